"""Uploads that stop and go on, in a real browser: pause and resume, a reload in the middle,
and a file larger than what is left of the quota.

Run by tests/web.rs against a running `arca` whose personal spaces have a quota of 30 MB:

    upload.py BASE_URL USER PASSWORD

The page's uploads are slowed to 2 MB/s (Chromium's network emulation) so that they can be
caught midway. Each upload's bytes are read back over WebDAV; a resumed upload must start
from where the server had got to (its PATCH's Upload-Offset above 0), not from the start.
Exits non-zero on the first failure, naming it.
"""

import os
import sys
import tempfile

from playwright.sync_api import expect, sync_playwright

import kit
from kit import basic_seen, check, content, guard, log_in, page_errors, row, step

BASE, USER, PASSWORD = sys.argv[1:4]
kit.connect(BASE, USER, PASSWORD)
SIZE = 4 * 1024 * 1024
RATE = 2 * 1024 * 1024


def upload_line(page, name):
    return page.locator("#uploads li").filter(has=page.locator(".upload-name", has_text=name))


def past(page, name, share):
    """Waits until `name`'s upload has sent more than `share` of its bytes."""
    page.wait_for_function(
        """([name, share]) => [...document.querySelectorAll('#uploads li')]
             .some((li) => li.dataset.name === name && li.querySelector('progress').value > share * li.querySelector('progress').max)""",
        arg=[name, share],
    )


with sync_playwright() as pw, tempfile.TemporaryDirectory() as tmp:
    files = {}
    for name in ["paused.bin", "reloaded.bin"]:
        path = os.path.join(tmp, name)
        files[name] = (path, os.urandom(SIZE))
        with open(path, "wb") as f:
            f.write(files[name][1])
    # As root (in CI) Chromium's sandbox cannot start; the page is our own test server.
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    guard(page)
    offsets = []
    page.on("request", lambda r: r.method == "PATCH" and offsets.append((r.url, int(r.headers.get("upload-offset", "-1")))))
    page.goto(BASE + "/")
    log_in(page, USER, PASSWORD)
    expect(page.locator("#files")).to_be_visible()
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    slow = {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": RATE}
    cdp.send("Network.emulateNetworkConditions", slow)

    step("pause midway, resume: it goes on from where the server got to")
    path, body = files["paused.bin"]
    page.set_input_files("#upload-input", path)
    past(page, "paused.bin", 0.25)
    upload_line(page, "paused.bin").get_by_role("button", name="Pause paused.bin").click()
    expect(upload_line(page, "paused.bin")).to_have_attribute("data-state", "paused")
    offsets.clear()
    upload_line(page, "paused.bin").get_by_role("button", name="Resume paused.bin").click()
    expect(upload_line(page, "paused.bin")).to_have_attribute("data-state", "done", timeout=30_000)
    check(offsets and offsets[0][1] > 0, f"the resumed upload started from {offsets}")
    check(content("paused.bin") == body, "paused.bin's bytes on the server")

    step("a reload midway: the page offers the upload; the file chosen again finishes it")
    path, body = files["reloaded.bin"]
    page.set_input_files("#upload-input", path)
    past(page, "reloaded.bin", 0.25)
    page.reload()
    expect(page.locator("#resume")).to_be_visible()
    expect(page.locator("#resume-text")).to_contain_text("reloaded.bin")
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", slow)
    offsets.clear()
    page.set_input_files("#resume-input", path)
    expect(upload_line(page, "reloaded.bin")).to_have_attribute("data-state", "done", timeout=30_000)
    check(offsets and offsets[0][1] > 0, f"the upload after the reload started from {offsets}")
    check(content("reloaded.bin") == body, "reloaded.bin's bytes on the server")
    expect(page.locator("#resume")).to_be_hidden()
    check(page.evaluate("localStorage.getItem('arca-uploads')") is None, "a finished upload is still kept")
    expect(row(page, "reloaded.bin")).to_have_count(1)

    step("a file larger than what is left of the quota: a clear message")
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    big = os.path.join(tmp, "too-big.bin")
    with open(big, "wb") as f:
        f.truncate(40 * 1024 * 1024)
    page.set_input_files("#upload-input", big)
    line = upload_line(page, "too-big.bin")
    expect(line).to_have_attribute("data-state", "failed")
    expect(line.locator(".upload-state")).to_contain_text("Not enough space left")
    status, _, _ = kit.dav("PROPFIND", "too-big.bin", {"Depth": "0"})
    check(status == 404, f"too-big.bin is on the server: {status}")

    browser.close()

check(not basic_seen, f"Basic challenges reached the page: {basic_seen}")
check(not page_errors, f"uncaught script errors: {page_errors}")
step("end")
print("upload.py: all steps passed", flush=True)
