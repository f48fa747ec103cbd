"""Screenshots of the web app's main pages for docs/ and the README (`make screenshots`).

    screenshots.py ARCA_BINARY OUT_DIR

Starts ARCA_BINARY on built-in defaults in a temporary directory, fills it with a few files,
a version, a share and links over WebDAV and OCS, then photographs in Chromium: the login
page, the files view, the share panel, the trash, a public link's folder and password pages,
and the files view at phone width. Not a test: the tests click through the same pages.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

from playwright.sync_api import sync_playwright

import kit

ARCA, OUT = os.path.abspath(sys.argv[1]), sys.argv[2]
PASSWORD = "screens-secret"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed():
    for folder in ["Documents", "Photos", "Projects", "Projects/arca"]:
        kit.dav("MKCOL", urllib.parse.quote(folder))
    files = {
        "Documents/Quarterly report.txt": b"Revenue grew.\n" * 300,
        "Documents/Meeting notes.txt": b"Agenda\n" * 50,
        "Projects/arca/README.md": b"# arca\n" * 20,
        "Photos/holiday.png": b"\x89PNG\r\n\x1a\n",
        "todo.txt": b"- ship the web app\n",
    }
    for path, body in files.items():
        kit.dav("PUT", urllib.parse.quote(path), body=body)
    kit.dav("PUT", "todo.txt", body=b"- ship the web app\n- write the docs\n")
    kit.dav("DELETE", urllib.parse.quote("Documents/Meeting notes.txt"))
    links = []
    for form in [{"path": "/Projects", "shareType": 3, "permissions": 1, "name": "Team link"},
                 {"path": "/Documents", "shareType": 3, "permissions": 1, "password": "pw-for-docs"}]:
        status, _, raw = kit.http(
            "POST",
            "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json",
            {"Authorization": kit.BASIC, "OCS-APIREQUEST": "true", "Content-Type": "application/x-www-form-urlencoded"},
            urllib.parse.urlencode(form).encode(),
        )
        kit.check(status == 200, f"link: {status}")
        links.append(json.loads(raw)["ocs"]["data"]["token"])
    return links


with tempfile.TemporaryDirectory() as tmp:
    public, debug = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARCA_")}
    env["ARCA_ADMIN_PASSWORD"] = PASSWORD
    server = subprocess.Popen(
        [ARCA, "server", "--data-dir", f"{tmp}/data", "--debug-addr", f"127.0.0.1:{debug}",
         "--proxy-http-addr", f"127.0.0.1:{public}"],
        env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        kit.connect(f"http://127.0.0.1:{public}", "admin", PASSWORD)
        deadline = time.monotonic() + 60
        while True:
            try:
                if kit.http("GET", "/status.php")[0] == 200:
                    break
            except OSError:
                pass  # not listening yet
            kit.check(time.monotonic() < deadline and server.poll() is None, "arca did not start")
            time.sleep(0.2)
        open_link, protected = seed()
        os.makedirs(OUT, exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 640})
            shot = lambda name: page.screenshot(path=os.path.join(OUT, f"{name}.png"))
            page.goto(kit.BASE + "/")
            page.wait_for_selector("#login-user")
            shot("login")
            kit.log_in(page, "admin", PASSWORD)
            page.wait_for_selector("#file-list tbody tr[data-name='Documents']")
            shot("files")
            kit.row(page, "Projects").locator("button[aria-label='Share Projects']").click()
            page.wait_for_selector(".share-list li[data-token]")
            shot("share")
            page.keyboard.press("Escape")
            page.click("#view-trash")
            page.wait_for_selector("#trash-list tbody tr")
            shot("trash")
            page.set_viewport_size({"width": 375, "height": 720})
            page.click("#view-files")
            page.wait_for_selector("#file-list tbody tr[data-name='Documents']")
            shot("files-phone")
            page.set_viewport_size({"width": 1100, "height": 640})
            page.goto(f"{kit.BASE}/s/{open_link}")
            page.wait_for_selector("#file-list tbody tr[data-name='arca']")
            shot("link-folder")
            page.goto(f"{kit.BASE}/s/{protected}")
            page.wait_for_selector("#gate-password")
            shot("link-password")
            browser.close()
        print(f"screenshots in {OUT}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
