"""The web app in a real browser, clicked through as a person would.

Run by tests/web.rs against a running `arca`:

    app.py BASE_URL USER PASSWORD UPLOAD_FILE

The server already holds (made over WebDAV by web.rs): hello.txt, old.txt, docs/inner.txt,
big.bin and two files with names that are HTML. This script logs in, checks what the page
shows and does (new folder, rename, delete, upload of UPLOAD_FILE, folder navigation, sort,
a phone-sized window, keyboard use), checks the session's CSRF and logout on the wire, and
ends with the login throttle's 429. web.rs then checks what is on the server (the uploaded
bytes, the trash). Exits non-zero on the first failure, naming it; prints each step's time.

Playwright drives Debian's Chromium (`/usr/bin/chromium`): this machine cannot download
Playwright's own browser builds. No page may open a dialog (an XSS payload's alert()).
"""

import os
import re
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import expect, sync_playwright

BASE, USER, PASSWORD, UPLOAD = sys.argv[1:5]
XSS_NAMES = ['<img src=x onerror=alert(1)>', '"><script>']
COOKIE = "arca_session"
# Expectations wait at most this long: the server is local, the machine is shared.
expect.set_options(timeout=15_000)

started = time.monotonic()
step_started = started


def step(name):
    """Prints how long the last step took and starts the next."""
    global step_started
    now = time.monotonic()
    print(f"  {now - step_started:5.2f}s  done; next: {name}", flush=True)
    step_started = now


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


def guard(page):
    """Fails the run on any dialog, and records Basic challenges the page receives."""
    page.on("dialog", lambda d: (d.dismiss(), fail(f"a dialog opened: {d.type} {d.message!r}")))
    page.on("pageerror", lambda e: print(f"  page error: {e}", flush=True))

    def on_response(resp):
        challenge = resp.headers.get("www-authenticate", "")
        if "basic" in challenge.lower():
            basic_seen.append(f"{resp.request.method} {resp.url}: {challenge}")

    page.on("response", on_response)


def names(page):
    return page.eval_on_selector_all(
        "#file-list tbody .file-name span", "els => els.map(e => e.textContent)"
    )


def log_in(page, user, password):
    page.fill("#login-user", user)
    page.fill("#login-password", password)
    page.click("#login-submit")


def row(page, name):
    return page.locator("#file-list tbody tr").filter(
        has=page.locator(".file-name span", has_text=name)
    )


basic_seen = []

with sync_playwright() as pw:
    # As root (in CI) Chromium's sandbox cannot start; the page is our own test server.
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    page = ctx.new_page()
    guard(page)

    step("the page at / with its headers and no Basic prompt")
    resp = page.goto(BASE + "/")
    check(resp is not None and resp.status == 200, f"GET / answered {resp and resp.status}")
    csp = resp.headers.get("content-security-policy", "")
    check("frame-ancestors 'none'" in csp and "script-src 'self'" in csp, f"CSP: {csp!r}")
    check("unsafe-inline" not in csp, f"CSP allows inline code: {csp!r}")
    expect(page.locator("#login")).to_be_visible()
    check(page.evaluate("document.body.dataset.ready") == "true", "the app did not start")

    step("a wrong password shows a message")
    log_in(page, USER, "not-the-password")
    expect(page.locator("#login-error")).to_have_text("Wrong user name or password.")
    expect(page.locator("#files")).to_be_hidden()

    step("login")
    log_in(page, USER, PASSWORD)
    expect(page.locator("#files")).to_be_visible()
    expect(page.locator("#who")).not_to_have_text("")
    check(COOKIE not in page.evaluate("document.cookie"), "the session cookie is readable by scripts")
    cookie = next((c for c in ctx.cookies() if c["name"] == COOKIE), None)
    check(cookie is not None, f"no {COOKIE} cookie: {ctx.cookies()}")
    check(cookie["httpOnly"] and cookie["sameSite"] == "Strict", f"cookie flags: {cookie}")

    step("the list shows the files made over WebDAV, HTML names as text")
    expect(row(page, "hello.txt")).to_have_count(1)
    shown = names(page)
    for n in ["docs", "hello.txt", "old.txt", "big.bin", *XSS_NAMES]:
        check(n in shown, f"{n!r} not listed; the list shows {shown}")
    check(shown.index("docs") == 0, f"folders first: {shown}")
    check(page.locator("img[src='x']").count() == 0, "an <img> from a file name reached the DOM")
    check(page.locator("#file-list script").count() == 0, "a <script> from a file name reached the DOM")

    step("sort by size, both ways")
    page.click("button.sort[data-key=size]")
    files = [n for n in names(page) if n != "docs"]
    check(files[-1] == "big.bin", f"size ascending ends with big.bin: {files}")
    page.click("button.sort[data-key=size]")
    files = [n for n in names(page) if n != "docs"]
    check(files[0] == "big.bin", f"size descending starts with big.bin: {files}")
    expect(page.locator("th.col-size")).to_have_attribute("aria-sort", "descending")
    page.click("button.sort[data-key=name]")

    step("upload through the file input (TUS)")
    upload_name = os.path.basename(UPLOAD)
    page.set_input_files("#upload-input", UPLOAD)
    expect(page.locator("#uploads li[data-state=done]")).to_have_count(1, timeout=60_000)
    expect(row(page, upload_name)).to_have_count(1)

    step("new folder")
    page.click("#new-folder")
    page.fill("#new-folder-name", "Projects")
    page.press("#new-folder-name", "Enter")
    expect(row(page, "Projects")).to_have_count(1)

    step("rename in place")
    page.get_by_role("button", name="Rename hello.txt").click()
    page.get_by_label("New name for hello.txt").fill("greeting.txt")
    page.get_by_role("button", name="Save").click()
    expect(row(page, "greeting.txt")).to_have_count(1)
    expect(row(page, "hello.txt")).to_have_count(0)

    step("delete (to the trash)")
    page.get_by_role("button", name="Delete old.txt").click()
    expect(row(page, "old.txt")).to_have_count(0)
    expect(page.locator("#status")).to_contain_text("trash")

    step("folder navigation, breadcrumbs and history")
    page.locator("#file-list .file-name", has_text="docs").click()
    expect(row(page, "inner.txt")).to_have_count(1)
    expect(page.locator("#crumbs [aria-current=page]")).to_have_text("docs")
    check(page.url.endswith("#/files/docs"), f"URL {page.url}")
    page.go_back()
    expect(row(page, "greeting.txt")).to_have_count(1)
    page.go_forward()
    expect(row(page, "inner.txt")).to_have_count(1)
    page.locator("#crumbs a", has_text="Home").click()
    expect(row(page, "greeting.txt")).to_have_count(1)

    step("keyboard: Tab reaches the rows, Enter opens a folder, focus is visible")
    page.locator("#file-list .file-name", has_text="docs").focus()
    page.keyboard.press("Tab")
    label = page.evaluate("document.activeElement.getAttribute('aria-label')")
    check(label == "Rename docs", f"Tab after the folder link focuses {label!r}")
    page.keyboard.press("Shift+Tab")
    focused = page.evaluate("document.activeElement.textContent")
    check(focused == "docs", f"Shift+Tab went to {focused!r}")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    check(outline not in ("", "none"), f"no visible focus on a row link: outline {outline!r}")
    page.keyboard.press("Enter")
    expect(row(page, "inner.txt")).to_have_count(1)
    page.locator("#crumbs a", has_text="Home").click()
    expect(row(page, "greeting.txt")).to_have_count(1)

    step("CSRF: the cookie alone changes nothing")
    jar = f"{COOKIE}={cookie['value']}"
    status, _, _ = http("MKCOL", f"/remote.php/dav/files/{USER}/csrf-probe", {"Cookie": jar})
    check(status == 403, f"MKCOL with the cookie and no CSRF token: {status}")
    status, _, _ = http("PROPFIND", f"/remote.php/dav/files/{USER}/", {"Cookie": jar, "Depth": "0"})
    check(status == 207, f"PROPFIND with the cookie: {status}")

    step("a phone-sized window (375 px)")
    phone = browser.new_context(viewport={"width": 375, "height": 740}, is_mobile=True, has_touch=True)
    small = phone.new_page()
    guard(small)
    small.goto(BASE + "/")
    log_in(small, USER, PASSWORD)
    expect(row(small, "greeting.txt")).to_have_count(1)
    width = small.evaluate("document.documentElement.scrollWidth")
    check(width <= 375, f"the page is {width}px wide at 375px")
    box = small.get_by_role("button", name="Delete greeting.txt").bounding_box()
    check(box is not None and box["x"] + box["width"] <= 375, f"the delete button is off screen: {box}")
    phone.close()

    step("logout ends the session on the server")
    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()
    status, headers, _ = http("PROPFIND", f"/remote.php/dav/files/{USER}/", {"Cookie": jar, "Depth": "0"})
    check(status == 401, f"the old cookie after logout: {status}")
    check("basic" not in (headers.get("WWW-Authenticate") or "").lower(), "a Basic challenge to the cookie")

    step("the login throttle: 429 shown as 'try again in N s'")
    def login_answer(r):
        return r.url.endswith("/api/v1/session") and r.request.method == "POST"

    for _ in range(10):
        with page.expect_response(login_answer) as answer:
            log_in(page, "nobody", "guess")
        if answer.value.status == 429:
            break
    check(answer.value.status == 429, f"no 429 after repeated failures: {answer.value.status}")
    expect(page.locator("#login-error")).to_have_text(re.compile(r"try again in \d+ s\."))

    check(not basic_seen, f"the browser received Basic challenges: {basic_seen}")
    browser.close()

step("end")
print(f"web app: all steps passed in {time.monotonic() - started:.1f}s", flush=True)
