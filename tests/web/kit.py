"""What the browser scripts of tests/web share: steps with their times, failing with a reason,
requests outside the browser (WebDAV with Basic, to check what a click left on the server),
and the guard every page runs under (no dialog, no uncaught script error, no Basic challenge).

A script calls `connect(BASE, USER, PASSWORD)` before anything else.
"""

import base64
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import expect

# Expectations wait at most this long: the server is local, the machine is shared.
expect.set_options(timeout=15_000)

BASE = ""
USER = ""
BASIC = ""
# Filled by `guard`: a script fails at its end if either holds anything.
basic_seen = []
page_errors = []
_step_started = time.monotonic()


def connect(base, user, password):
    """Where the server is and whose files `dav` reaches."""
    global BASE, USER, BASIC
    BASE, USER = base, user
    BASIC = basic(user, password)


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def step(name):
    """Prints how long the last step took and starts the next."""
    global _step_started
    now = time.monotonic()
    print(f"  {now - _step_started:5.2f}s  done; next: {name}", flush=True)
    _step_started = now


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def check(cond, message):
    if not cond:
        fail(message)


def http(method, path, headers=None, body=None):
    """One request outside the browser: (status, headers, body)."""
    req = urllib.request.Request(BASE + path, method=method, headers=headers or {}, data=body)
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def dav(method, path, headers=None, body=None):
    """A WebDAV request on USER's files with Basic, outside the browser; `path` URL-encoded."""
    return http(method, f"/remote.php/dav/files/{USER}/{path}", {"Authorization": BASIC, **(headers or {})}, body)


def content(path):
    """The bytes at `path` (URL-encoded) in USER's files; fails unless it is there."""
    status, _, body = dav("GET", path)
    check(status == 200, f"GET {path}: {status}")
    return body


def guard(page):
    """Fails the run on any dialog; records uncaught errors and Basic challenges."""
    page.on("dialog", lambda d: (d.dismiss(), fail(f"a dialog opened: {d.type} {d.message!r}")))
    page.on("pageerror", lambda e: page_errors.append(str(e)))

    def on_response(resp):
        challenge = resp.headers.get("www-authenticate", "")
        if "basic" in challenge.lower():
            basic_seen.append(f"{resp.request.method} {resp.url}: {challenge}")

    page.on("response", on_response)


def names(page):
    """The names in the file list, in order."""
    return page.eval_on_selector_all("#file-list tbody .file-name span", "els => els.map(e => e.textContent)")


def row(page, name):
    """The file list's row of `name`."""
    return page.locator("#file-list tbody tr").filter(has=page.locator(".file-name span", has_text=name))


def log_in(page, user, password):
    """Fills the app's login form and sends it."""
    page.fill("#login-user", user)
    page.fill("#login-password", password)
    page.click("#login-submit")
