"""The web app in a real browser, clicked through as a person would.

Run by tests/web.rs against a running `arca`:

    app.py BASE_URL USER PASSWORD UPLOAD_FILE

The server already holds (made over WebDAV by web.rs): hello.txt, old.txt, docs/inner.txt,
big.bin, notes.txt written twice (one version) and two files with names that are HTML; it
flags a mass delete past 5 files. This script logs in, checks what the page shows and does
(new folder, rename, delete, upload of UPLOAD_FILE, folder navigation, sort, a file's
versions and the restore of one, the trash: restore over a taken name, into a removed
folder, delete for good, empty; a sync client's mass delete shown as a banner and restored
with one click; a phone-sized window, keyboard use), checks the server's state after each
(over WebDAV with Basic, outside the browser), the session's CSRF and logout on the wire, and
ends with the login throttle's 429. web.rs then checks what is on the server (the uploaded
bytes, the renamed and restored files, the empty trash). Exits non-zero on the first failure,
naming it; prints each step's time.

Playwright drives Debian's Chromium (`/usr/bin/chromium`): this machine cannot download
Playwright's own browser builds. No page may open a dialog (an XSS payload's alert()) or
throw an uncaught script error.
"""

import os
import re
import sys
import tempfile
import time
import zipfile

from playwright.sync_api import expect, sync_playwright

import kit
from kit import basic_seen, check, content, dav, guard, http, log_in, names, page_errors, row, step

BASE, USER, PASSWORD, UPLOAD = sys.argv[1:5]
XSS_NAMES = ['<img src=x onerror=alert(1)>', '"><script>']
COOKIE = "arca_session"
kit.connect(BASE, USER, PASSWORD)
BASIC = kit.BASIC
SYNC_CLIENT = "Mozilla/5.0 (Linux) mirall/5.3.2 (owncloudcmd)"
started = time.monotonic()


def trash_names():
    status, _, body = http("PROPFIND", f"/remote.php/dav/trash-bin/{USER}/", {"Authorization": BASIC, "Depth": "1"})
    check(status == 207, f"PROPFIND the trash: {status}")
    return re.findall(r"<oc:trashbin-original-filename>([^<]*)<", body.decode())


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
    expect(page.locator("#file-list th.col-size")).to_have_attribute("aria-sort", "descending")
    page.click("button.sort[data-key=name]")

    step("upload through the file input (TUS)")
    upload_name = os.path.basename(UPLOAD)
    page.set_input_files("#upload-input", UPLOAD)
    expect(page.locator("#uploads li[data-state=done]")).to_have_count(1, timeout=60_000)
    expect(row(page, upload_name)).to_have_count(1)

    step("drag and drop two files onto the list")
    page.evaluate(
        """() => {
        const dt = new DataTransfer();
        dt.items.add(new File(["dropped bytes"], "dropped.txt", { type: "text/plain" }));
        dt.items.add(new File([new Uint8Array(70000).fill(5)], "dropped ünï.bin"));
        const zone = document.getElementById("files");
        for (const type of ["dragenter", "dragover", "drop"]) {
          zone.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
        }
      }"""
    )
    expect(page.locator("#status")).to_have_text("Uploaded 2 files.")
    expect(row(page, "dropped ünï.bin")).to_have_count(1)
    check(content("dropped.txt") == b"dropped bytes", "the dropped text file's bytes")
    check(content("dropped%20%C3%BCn%C3%AF.bin") == bytes([5]) * 70000, "the dropped binary's bytes")

    step("upload a whole folder through the folder picker")
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "tree")
        os.makedirs(os.path.join(tree, "sub"))
        made = {"tree/a.txt": b"a in tree", "tree/sub/b.bin": bytes(range(256)) * 300}
        for rel, body in made.items():
            with open(os.path.join(tmp, rel), "wb") as f:
                f.write(body)
        page.set_input_files("#upload-folder-input", tree)
        for rel in made:
            expect(page.locator(f"#uploads li[data-name='{rel}']")).to_have_attribute("data-state", "done")
    expect(row(page, "tree")).to_have_count(1)
    for rel, body in made.items():
        check(content(rel) == body, f"{rel} after the folder upload")

    step("cancel an upload under a slow network: nothing is left on the server")
    cdp = ctx.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": 256 * 1024},
    )
    page.set_input_files("#upload-input", UPLOAD)
    line = page.locator(f"#uploads li[data-name='{os.path.basename(UPLOAD)}']").last
    expect(line.locator(".upload-state")).to_contain_text("/s")
    line.get_by_role("button", name=f"Cancel {os.path.basename(UPLOAD)}").click()
    expect(line).to_have_attribute("data-state", "cancelled")
    expect(page.locator("#status")).to_have_text("Uploaded 0 files (1 cancelled).")
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    check(content(os.path.basename(UPLOAD).replace("Ω", "%CE%A9")) == open(UPLOAD, "rb").read(), "the earlier upload changed")

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
    check(label == "Download docs as a zip", f"Tab after the folder link focuses {label!r}")
    page.keyboard.press("Shift+Tab")
    focused = page.evaluate("document.activeElement.textContent")
    check(focused == "docs", f"Shift+Tab went to {focused!r}")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    check(outline not in ("", "none"), f"no visible focus on a row link: outline {outline!r}")
    page.keyboard.press("Enter")
    expect(row(page, "inner.txt")).to_have_count(1)
    page.locator("#crumbs a", has_text="Home").click()
    expect(row(page, "greeting.txt")).to_have_count(1)

    step("versions: the panel lists notes.txt's earlier content; restore it")
    page.get_by_role("button", name="Versions of notes.txt").click()
    versions = page.locator("#dialog .versions li")
    expect(versions).to_have_count(1)
    href = versions.locator("a", has_text="Download").get_attribute("href")
    check(href.startswith("/remote.php/dav/meta/"), f"a version's download link: {href}")
    versions.get_by_role("button", name="Restore").click()
    expect(page.locator("#status")).to_contain_text("Restored the version of notes.txt")
    check(content("notes.txt") == b"first draft", "notes.txt is not the restored version")
    # The content it replaced is now the one version (the restored one is the file again).
    page.get_by_role("button", name="Versions of notes.txt").click()
    expect(page.locator("#dialog .versions li")).to_have_count(1)
    expect(page.locator("#dialog .versions li .size")).to_have_text("12 B")
    page.locator("#dialog").get_by_role("button", name="Close").click()
    expect(page.locator("#dialog")).to_be_hidden()

    step("trash: restore over a name taken again asks, and keeps both")
    status, _, _ = dav("PUT", "old.txt", body=b"newer")
    check(status == 201, f"PUT old.txt again: {status}")
    page.click("#view-trash")
    check(page.url.endswith("#/trash"), f"URL {page.url}")
    old = page.locator("#trash-list tbody tr").filter(has_text="old.txt")
    expect(old).to_have_count(1)
    expect(old.locator(".col-location")).to_have_text("/")
    page.get_by_role("button", name="Restore old.txt").click()
    expect(page.locator("#dialog-title")).to_have_text("“old.txt” exists")
    page.locator("#dialog").get_by_role("button", name="Keep both").click()
    expect(page.locator("#status")).to_have_text("Restored old.txt to /old (2).txt.")
    expect(old).to_have_count(0)
    check(content("old.txt") == b"newer", "the file at the taken name changed")
    check(content("old%20(2).txt") == b"old", "the restored file's bytes")

    step("trash: restore into a folder removed since")
    for path in ["docs/inner.txt", "docs"]:
        status, _, _ = dav("DELETE", path)
        check(status == 204, f"DELETE {path}: {status}")
    page.reload()
    inner = page.locator("#trash-list tbody tr").filter(has_text="inner.txt")
    expect(inner.locator(".col-location")).to_have_text("/docs")
    page.get_by_role("button", name="Restore inner.txt").click()
    expect(page.locator("#status")).to_have_text("Restored inner.txt to /docs/inner.txt.")
    check(content("docs/inner.txt") == b"inner", "docs/inner.txt after its restore")

    step("trash: delete one item for good, after a confirmation")
    page.get_by_role("button", name="Delete docs for good").click()
    page.locator("#dialog").get_by_role("button", name="Cancel").click()
    expect(page.locator("#trash-list tbody tr").filter(has_text="docs")).to_have_count(1)
    page.get_by_role("button", name="Delete docs for good").click()
    page.locator("#dialog").get_by_role("button", name="Delete for good").click()
    expect(page.locator("#status")).to_have_text("Deleted docs for good.")
    check("docs" not in trash_names(), f"docs is still in the trash: {trash_names()}")

    step("a sync client's mass delete: a banner names it; one click restores it")
    status, _, _ = dav("MKCOL", "synced")
    check(status == 201, f"MKCOL synced: {status}")
    synced = {f"synced/f{i}.txt": f"synced file {i}".encode() * (i + 1) for i in range(8)}
    for path, body in synced.items():
        status, _, _ = dav("PUT", path, body=body)
        check(status == 201, f"PUT {path}: {status}")
    for path in synced:
        status, _, _ = dav("DELETE", path, {"User-Agent": SYNC_CLIENT})
        check(status == 204, f"DELETE {path}: {status}")
    page.click("#view-files")
    banner = page.locator("#burst")
    expect(banner).to_be_visible()
    expect(page.locator("#burst-text")).to_contain_text("8 files were deleted by")
    expect(page.locator("#burst-text")).to_contain_text("owncloudcmd")
    page.click("#burst-restore")
    expect(page.locator("#status")).to_have_text("Restored 8 items (8 files).")
    expect(banner).to_be_hidden()
    for path, body in synced.items():
        check(content(path) == body, f"{path} after the burst's restore")
    status, _, body = http("GET", "/api/v1/trash/bursts", {"Authorization": BASIC})
    check(status == 200 and b'"in_trash":0' in body, f"the burst after its restore: {status} {body!r}")
    page.reload()
    expect(row(page, "greeting.txt")).to_have_count(1)
    expect(banner).to_be_hidden()

    step("select a file and a folder; download them as one zip")
    page.get_by_label("Select greeting.txt").check()
    page.get_by_label("Select docs").check()
    with page.expect_download() as info:
        page.click("#sel-download")
    with zipfile.ZipFile(info.value.path()) as z:
        check(z.testzip() is None, "a damaged entry in the zip")
        listed = sorted(z.namelist())
        check(listed == ["docs/", "docs/inner.txt", "greeting.txt"], f"the zip holds {listed}")
        check(z.read("docs/inner.txt") == content("docs/inner.txt"), "docs/inner.txt in the zip")
        check(z.read("greeting.txt") == b"hello", "greeting.txt in the zip")
    page.get_by_label("Select greeting.txt").uncheck()
    page.get_by_label("Select docs").uncheck()
    expect(page.locator("#selection")).to_be_hidden()

    step("select two files and move them into a folder picked in the dialog")
    page.get_by_label("Select notes.txt").check()
    page.get_by_label("Select old (2).txt").check()
    expect(page.locator("#selection-count")).to_have_text("2 selected")
    page.click("#sel-move")
    expect(page.locator("#dialog-title")).to_have_text("Move 2 items")
    page.get_by_role("button", name="Open Projects").click()
    expect(page.locator("#picker-path")).to_have_text("Into: /Projects")
    page.locator("#dialog").get_by_role("button", name="Move here").click()
    expect(page.locator("#status")).to_have_text("Moved 2 items to /Projects.")
    expect(row(page, "notes.txt")).to_have_count(0)
    expect(page.locator("#selection")).to_be_hidden()
    check(content("Projects/notes.txt") == b"first draft", "Projects/notes.txt after the move")
    check(content("Projects/old%20(2).txt") == b"old", "Projects/old (2).txt after the move")

    step("copy onto a taken name: the dialog asks; keep both")
    page.get_by_label("Select greeting.txt").check()
    page.click("#sel-copy")
    page.locator("#dialog").get_by_role("button", name="Copy here").click()
    expect(page.locator("#dialog-title")).to_have_text("“greeting.txt” exists in /")
    page.locator("#dialog").get_by_role("button", name="Keep both").click()
    expect(page.locator("#status")).to_have_text("Copied 1 item to /.")
    expect(row(page, "greeting (2).txt")).to_have_count(1)
    check(content("greeting%20(2).txt") == b"hello", "the copy's bytes")
    check(content("greeting.txt") == b"hello", "the original after the copy")

    step("move onto a taken name: skip changes nothing; replace keeps what was there as a version")
    status, _, _ = dav("PUT", "Projects/old.txt", body=b"in projects")
    check(status == 201, f"PUT Projects/old.txt: {status}")
    for choice in ["Skip", "Replace"]:
        page.get_by_label("Select old.txt").check()
        page.click("#sel-move")
        page.get_by_role("button", name="Open Projects").click()
        page.locator("#dialog").get_by_role("button", name="Move here").click()
        expect(page.locator("#dialog-title")).to_have_text("“old.txt” exists in /Projects")
        page.locator("#dialog").get_by_role("button", name=choice).click()
        if choice == "Skip":
            expect(page.locator("#status")).to_have_text("Moved 0 items to /Projects; skipped 1.")
            check(content("Projects/old.txt") == b"in projects", "a skipped move changed the target")
            check(content("old.txt") == b"newer", "a skipped move changed the source")
    expect(page.locator("#status")).to_have_text("Moved 1 item to /Projects.")
    check(content("Projects/old.txt") == b"newer", "the moved file's bytes")
    page.locator("#file-list .file-name", has_text="Projects").click()
    page.get_by_role("button", name="Versions of old.txt").click()
    expect(page.locator("#dialog .versions li .size")).to_have_text("11 B")
    page.locator("#dialog").get_by_role("button", name="Close").click()
    page.locator("#crumbs a", has_text="Home").click()
    expect(row(page, "greeting.txt")).to_have_count(1)

    step("trash: HTML names as text; empty it, after a confirmation")
    for name in ["big.bin", XSS_NAMES[0]]:
        page.get_by_label(f"Select {name}", exact=True).check()
    page.click("#sel-delete")
    expect(page.locator("#status")).to_have_text("Moved 2 items to the trash.")
    expect(row(page, "big.bin")).to_have_count(0)
    page.click("#view-trash")
    expect(page.locator("#trash-list tbody tr")).to_have_count(2)
    expect(page.locator("#quota-text")).to_contain_text("trash 300 KB (2 items)")
    shown = page.eval_on_selector_all("#trash-list tbody .file-name span", "els => els.map(e => e.textContent)")
    check(XSS_NAMES[0] in shown, f"the trash shows {shown}")
    check(page.locator("img[src='x']").count() == 0, "an <img> from a trashed name reached the DOM")
    page.click("#trash-empty")
    page.locator("#dialog").get_by_role("button", name="Empty trash").click()
    expect(page.locator("#status")).to_have_text("The trash is empty.")
    expect(page.locator("#trash-none")).to_be_visible()
    check(trash_names() == [], f"the trash after emptying it: {trash_names()}")
    expect(page.locator("#quota-text")).to_contain_text("trash 0 B (0 items)")
    expect(page.locator("#quota-text")).to_contain_text("versions 23 B (2 versions)")
    page.click("#view-files")
    expect(row(page, "greeting.txt")).to_have_count(1)

    step("account: change the password (mistyped, then a wrong current one), log in with the new one, change it back")
    page.click("#view-tokens")
    page.fill("#password-current", PASSWORD)
    page.fill("#password-new", "web-secret-2")
    page.fill("#password-repeat", "web-secret-3")
    page.locator("#password-form button[type=submit]").click()
    expect(page.locator("#status")).to_have_text("The two passwords differ.")
    files_root = f"/remote.php/dav/files/{USER}/"
    page.fill("#password-current", "not-my-password")
    page.fill("#password-repeat", "web-secret-2")
    page.locator("#password-form button[type=submit]").click()
    expect(page.locator("#status")).to_have_text("the current password is wrong")
    expect(page.locator("#password-current")).to_have_value("")
    status, _, _ = http("PROPFIND", files_root, {"Authorization": kit.BASIC, "Depth": "0"})
    check(status == 207, f"a wrong current password changed the password: {status}")
    for current, new in [(PASSWORD, "web-secret-2"), ("web-secret-2", PASSWORD)]:
        page.fill("#password-current", current)
        page.fill("#password-new", new)
        page.fill("#password-repeat", new)
        page.locator("#password-form button[type=submit]").click()
        # The form is emptied once the server answered (the status line may already say so).
        expect(page.locator("#password-repeat")).to_have_value("")
        expect(page.locator("#status")).to_have_text("Password changed.")
        auth = kit.basic(USER, new)
        status, _, _ = http("PROPFIND", files_root, {"Authorization": auth, "Depth": "0"})
        check(status == 207, f"PROPFIND with the new password {new!r}: {status}")
    status, _, _ = http("PROPFIND", files_root, {"Authorization": kit.basic(USER, "web-secret-2"), "Depth": "0"})
    check(status == 401, f"PROPFIND with the password changed away from: {status}")

    step("app passwords: create one, a client logs in with it, revoke it")
    page.click("#view-tokens")
    page.fill("#token-label", "laptop")
    page.select_option("#token-expiry", "1d")
    page.locator("#token-form button[type=submit]").click()
    expect(page.locator("#token-new")).to_be_visible()
    secret = page.input_value("#token-secret")
    check(len(secret) >= 16, f"the app password shown: {secret!r}")
    token_auth = kit.basic(USER, secret)
    files_root = f"/remote.php/dav/files/{USER}/"
    status, _, _ = http("PROPFIND", files_root, {"Authorization": token_auth, "Depth": "0"})
    check(status == 207, f"PROPFIND with the app password: {status}")
    laptop = page.locator("#token-list tbody tr").filter(has_text="laptop")
    expect(laptop).to_have_count(1)
    page.get_by_role("button", name="Revoke laptop").click()
    page.locator("#dialog").get_by_role("button", name="Revoke").click()
    expect(page.locator("#status")).to_have_text("Revoked the app password for laptop.")
    expect(laptop).to_have_count(0)
    # The proxies learn of the revocation from storage-system's feed: a few tries, each a
    # failed login the throttle counts (it allows 4; the last step meets it).
    for _ in range(3):
        status, _, _ = http("PROPFIND", files_root, {"Authorization": token_auth, "Depth": "0"})
        if status == 401:
            break
        time.sleep(0.5)
    check(status == 401, f"PROPFIND with the revoked app password: {status}")
    page.click("#view-files")
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
    # The delete is held unanswered (as a big folder's takes its time) while the person opens
    # the trash: it shows nothing yet, and the item arrives there once the delete is done.
    held = []
    dav_urls = "**/remote.php/dav/**"

    def hold_deletes(route):
        if route.request.method == "DELETE":
            held.append(route)
        else:
            route.continue_()

    small.route(dav_urls, hold_deletes)
    with small.expect_request(lambda r: r.method == "DELETE"):
        small.get_by_role("button", name="Delete greeting.txt").click()
    small.click("#view-trash")
    expect(small.locator("#trash-none")).to_be_visible()
    for _ in range(100):
        if held:
            break
        small.wait_for_timeout(20)
    check(len(held) == 1, f"the delete was not held: {len(held)} requests")
    held[0].continue_()
    expect(small.locator("#status")).to_have_text("Moved greeting.txt to the trash.")
    restore = small.get_by_role("button", name="Restore greeting.txt")
    expect(restore).to_be_visible()
    small.unroute(dav_urls)
    width = small.evaluate("document.documentElement.scrollWidth")
    check(width <= 375, f"the trash is {width}px wide at 375px")
    box = restore.bounding_box()
    check(box is not None and box["x"] + box["width"] <= 375, f"the restore button is off screen: {box}")
    restore.click()
    expect(small.locator("#status")).to_have_text("Restored greeting.txt to /greeting.txt.")
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
    check(not page_errors, f"uncaught script errors: {page_errors}")
    browser.close()

step("end")
print(f"web app: all steps passed in {time.monotonic() - started:.1f}s", flush=True)
