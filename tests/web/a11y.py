"""axe-core's accessibility rules on the web app's main pages, in a real browser.

Run by tests/web.rs against a running `arca`:

    a11y.py BASE_URL USER PASSWORD AXE_JS

The script makes a folder, a file and two links (one with a password) over WebDAV and OCS,
then runs axe (AXE_JS, axe-core from npm, which `make deps` installs) on the login page, the
files view, the share panel, a public link's folder and its password page, at desktop and
phone width. Any violation of serious or critical impact fails the run, named with the
elements it was found on.
"""

import json
import sys
import urllib.parse

from playwright.sync_api import sync_playwright

import kit
from kit import check, guard, log_in, page_errors, row, step

BASE, USER, PASSWORD, AXE = sys.argv[1:5]
kit.connect(BASE, USER, PASSWORD)
BLOCKING = {"serious", "critical"}


def link(form):
    status, _, raw = kit.http(
        "POST",
        "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json",
        {"Authorization": kit.BASIC, "OCS-APIREQUEST": "true", "Content-Type": "application/x-www-form-urlencoded"},
        urllib.parse.urlencode(form).encode(),
    )
    check(status == 200, f"link: {status}")
    return json.loads(raw)["ocs"]["data"]["token"]


def audit(page, what):
    """Runs axe on the page as it is; fails on serious or critical violations."""
    page.add_script_tag(path=AXE)
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    found = [v for v in result["violations"] if v["impact"] in BLOCKING]
    for v in found:
        targets = [n["target"] for n in v["nodes"]][:5]
        print(f"  {what}: {v['impact']} {v['id']}: {v['help']} at {targets}", flush=True)
    check(not found, f"{what}: {len(found)} serious or critical accessibility violations (above)")
    print(f"  {what}: no serious or critical violation ({len(result['violations'])} minor)", flush=True)


step("a folder, a file and two links over WebDAV and OCS")
kit.dav("MKCOL", "Reports")
kit.dav("PUT", "Reports/q3.txt", body=b"numbers")
kit.dav("PUT", "notes.txt", body=b"notes")
open_link = link({"path": "/Reports", "shareType": 3, "permissions": 1})
protected = link({"path": "/Reports", "shareType": 3, "permissions": 1, "password": "a11y-pw"})

with sync_playwright() as pw:
    # As root (in CI) Chromium's sandbox cannot start; the page is our own test server. The
    # CSP that keeps out injected scripts would keep out axe too: the audit context bypasses it.
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    for width, height in [(1280, 800), (375, 720)]:
        step(f"the pages at {width} px")
        ctx = browser.new_context(viewport={"width": width, "height": height}, bypass_csp=True)
        page = ctx.new_page()
        guard(page)
        page.goto(BASE + "/")
        page.wait_for_selector("#login-user")
        if width == 1280:
            # The audit can fail: an unlabelled field is a critical violation it must see.
            page.evaluate("() => { const i = document.createElement('input'); i.id = 'unlabelled'; document.querySelector('main').append(i); }")
            page.add_script_tag(path=AXE)
            seen = page.evaluate("async () => (await axe.run(document)).violations.map(v => v.id)")
            check("label" in seen, f"axe missed an unlabelled field: {seen}")
            page.evaluate("() => document.getElementById('unlabelled').remove()")
        audit(page, f"login at {width}px")
        log_in(page, USER, PASSWORD)
        page.wait_for_selector("#file-list tbody tr[data-name='Reports']")
        audit(page, f"files at {width}px")
        row(page, "Reports").locator("button[aria-label='Share Reports']").click()
        page.wait_for_selector(".share-list li[data-token]")
        audit(page, f"share panel at {width}px")
        page.keyboard.press("Escape")
        page.goto(f"{BASE}/s/{open_link}")
        page.wait_for_selector("#file-list tbody tr[data-name='q3.txt']")
        audit(page, f"public link folder at {width}px")
        page.goto(f"{BASE}/s/{protected}")
        page.wait_for_selector("#gate-password")
        audit(page, f"public link password page at {width}px")
        ctx.close()
    browser.close()

check(not page_errors, f"uncaught script errors: {page_errors}")
step("end")
print("a11y.py: all steps passed", flush=True)
