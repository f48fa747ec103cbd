"""The public-link page (/s/{token}) in a real browser, clicked through as a recipient would.

Run by tests/web.rs against a running `arca`:

    link.py BASE_URL USER PASSWORD

The script makes USER's folders, files and links over WebDAV and OCS (outside the browser),
then, as a visitor with no login: an unknown link; a password-protected folder (the form,
a wrong password, the right one, browsing, a download, a reload that does not ask again, an
XSS name shown as text); a file link with its text preview and download; an image link with
its preview; a PDF link shown in Chromium's own viewer; an upload-only link (uploads land, a taken name gets a number, nothing is
listed); a read-write link (new folder, upload into it, delete); a phone-sized window. After
each, what is on the server is read back over WebDAV with Basic. Exits non-zero on the first
failure, naming it; no page may open a dialog, throw an uncaught error or receive a Basic
challenge.
"""

import json
import os
import struct
import sys
import tempfile
import urllib.parse
import zipfile
import zlib

from playwright.sync_api import expect, sync_playwright

import kit
from kit import basic_seen, check, content, dav, guard, http, names, page_errors, row, step

BASE, USER, PASSWORD = sys.argv[1:4]
XSS_NAME = '<img src=x onerror=alert(1)>.txt'
LINK_PASSWORD = "correct horse"
kit.connect(BASE, USER, PASSWORD)


def path_of(name):
    """`name` URL-encoded, as kit.dav takes paths."""
    return urllib.parse.quote(name)


def put(path, body):
    status, _, _ = dav("PUT", path_of(path), body=body)
    check(status in (201, 204), f"PUT {path}: {status}")


def mkcol(path):
    status, _, _ = dav("MKCOL", path_of(path))
    check(status == 201, f"MKCOL {path}: {status}")


def exists(path):
    status, _, _ = dav("PROPFIND", path_of(path), {"Depth": "0"})
    return status == 207


def share(form):
    """A public link made over OCS: its token."""
    body = urllib.parse.urlencode(form).encode()
    status, _, raw = http(
        "POST",
        "/ocs/v1.php/apps/files_sharing/api/v1/shares?format=json",
        {"Authorization": kit.BASIC, "OCS-APIREQUEST": "true", "Content-Type": "application/x-www-form-urlencoded"},
        body,
    )
    check(status == 200, f"create link {form}: {status} {raw[:200]!r}")
    return json.loads(raw)["ocs"]["data"]["token"]


def download(page, locator):
    """Clicks `locator` (a download link); the bytes the browser saved."""
    with page.expect_download() as info:
        locator.click()
    path = info.value.path()
    with open(path, "rb") as f:
        return f.read()


def png(width, height):
    """A red RGB PNG of this size, made here: the smallest image a browser decodes and sizes."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def pdf(text):
    """A one-page PDF saying `text`, made here with its cross-reference table."""
    stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for o in offsets:
        out += f"{o:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


PNG = png(2, 1)
PDF = pdf("hello from a PDF")
# Chromium's built-in PDF viewer extension.
PDF_VIEWER = "chrome-extension://mhjfbmdgcfjbbpaeojofohoefgiehjai/"
README = "hello from the link\n" * 40

step("seed folders, files and links over WebDAV and OCS")
for folder in ["Shared", "Shared/sub", "Inbox", "Team"]:
    mkcol(folder)
put("Shared/readme.txt", README.encode())
put("Shared/pic.png", PNG)
put("paper.pdf", PDF)
put("Shared/sub/deep.txt", b"deep down")
put(f"Shared/{XSS_NAME}", b"xss")
put("Inbox/report.txt", b"the owner's report")
put("Inbox/secret-plan.txt", b"not for visitors")
put("Team/old.txt", b"old")
protected = share({"path": "/Shared", "shareType": 3, "permissions": 1, "password": LINK_PASSWORD})
file_link = share({"path": "/Shared/readme.txt", "shareType": 3, "permissions": 1})
image_link = share({"path": "/Shared/pic.png", "shareType": 3, "permissions": 1})
pdf_link = share({"path": "/paper.pdf", "shareType": 3, "permissions": 1})
drop_link = share({"path": "/Inbox", "shareType": 3, "permissions": 4})
team_link = share({"path": "/Team", "shareType": 3, "permissions": 15})

with sync_playwright() as pw, tempfile.TemporaryDirectory() as tmp:
    # As root (in CI) Chromium's sandbox cannot start; the page is our own test server.
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    page = ctx.new_page()
    guard(page)

    step("an unknown link says so")
    resp = page.goto(BASE + "/s/0123456789abcdef0123456789abcdef")
    check(resp is not None and resp.status == 200, f"the page: {resp and resp.status}")
    csp = resp.headers.get("content-security-policy", "")
    check("script-src 'self'" in csp and "frame-ancestors 'none'" in csp, f"CSP: {csp!r}")
    expect(page.locator("#gone")).to_be_visible()
    expect(page.locator("#gone-text")).to_contain_text("does not exist")

    step("a protected folder: the form, a wrong password, the right one")
    page.goto(f"{BASE}/s/{protected}")
    expect(page.locator("#gate")).to_be_visible()
    check(not basic_seen, f"Basic challenges reached the page: {basic_seen}")
    page.fill("#gate-password", "wrong guess")
    page.click("#gate-submit")
    expect(page.locator("#gate-error")).to_have_text("Wrong password.")
    page.fill("#gate-password", LINK_PASSWORD)
    page.click("#gate-submit")
    expect(page.locator("#folder")).to_be_visible()
    expect(page.locator("#folder-title")).to_have_text("Shared")
    expect(row(page, "readme.txt")).to_have_count(1)
    listed = names(page)
    check(listed[0] == "sub", f"folders first: {listed}")
    check(XSS_NAME in listed, f"the HTML-looking name is shown as text: {listed}")
    check(page.locator("#file-list img[src='x']").count() == 0, "a name became markup")
    check(page.locator("#new-folder").is_hidden() and page.locator("#upload-files").is_hidden(), "a read-only link offers writing")
    check(page.locator("#file-list button[aria-label^='Delete']").count() == 0, "a read-only link offers delete")
    check(not basic_seen, f"Basic challenges reached the page: {basic_seen}")

    step("browse into a subfolder and back by the crumbs")
    row(page, "sub").locator(".file-name").click()
    expect(row(page, "deep.txt")).to_have_count(1)
    check(names(page) == ["deep.txt"], f"sub lists {names(page)}")
    page.locator("#crumbs a", has_text="Shared").click()
    expect(row(page, "readme.txt")).to_have_count(1)

    step("the protected folder as one zip, and a subfolder's")
    with page.expect_download() as info:
        page.click("#download-all")
    with zipfile.ZipFile(info.value.path()) as z:
        check(z.testzip() is None, "a damaged entry in the zip")
        listed = sorted(z.namelist())
        want = sorted(["Shared/", "Shared/sub/", "Shared/sub/deep.txt", "Shared/readme.txt", "Shared/pic.png", f"Shared/{XSS_NAME}"])
        check(listed == want, f"the zip holds {listed}")
        check(z.read("Shared/readme.txt") == README.encode(), "readme.txt in the zip")
    with page.expect_download() as info:
        row(page, "sub").locator("a[aria-label='Download sub as a zip']").click()
    with zipfile.ZipFile(info.value.path()) as z:
        check(z.namelist() == ["sub/", "sub/deep.txt"], f"sub's zip holds {z.namelist()}")

    step("a download from the protected folder, then a reload that does not ask again")
    got = download(page, row(page, "readme.txt").locator("a[aria-label='Download readme.txt']"))
    check(got == README.encode(), f"downloaded {len(got)} bytes, not the file")
    page.reload()
    expect(page.locator("#folder")).to_be_visible()
    expect(row(page, "readme.txt")).to_have_count(1)
    check(page.locator("#gate").is_hidden(), "the password was asked again after a reload")

    step("a file link: its text shown, its bytes downloaded")
    page.goto(f"{BASE}/s/{file_link}")
    expect(page.locator("#file")).to_be_visible()
    expect(page.locator("#file-name")).to_have_text("readme.txt")
    expect(page.locator(".preview-text")).to_contain_text("hello from the link")
    got = download(page, page.locator("#file-download"))
    check(got == README.encode(), f"downloaded {len(got)} bytes, not the file")

    step("an image link: the image shown")
    page.goto(f"{BASE}/s/{image_link}")
    expect(page.locator(".preview-image")).to_be_visible()
    page.wait_for_function("() => document.querySelector('.preview-image').naturalWidth === 2")

    step("a PDF link: shown in the browser's own viewer, framed by the page alone")
    status, headers, raw = http("GET", f"/remote.php/dav/public-files/{pdf_link}/paper.pdf?inline=1")
    check(status == 200 and raw == PDF, f"the inline PDF: {status}, {len(raw)} bytes")
    check(headers.get("content-disposition", "").startswith("inline;"), f"inline PDF disposition: {headers}")
    policy = headers.get("content-security-policy", "")
    check("sandbox" not in policy and "frame-ancestors 'self'" in policy, f"inline PDF policy: {policy}")
    status, headers, _ = http("GET", f"/remote.php/dav/public-files/{pdf_link}/paper.pdf")
    check(headers.get("content-disposition", "").startswith("attachment;") and "sandbox" in headers.get("content-security-policy", ""), f"a PDF download: {headers}")
    page.goto(f"{BASE}/s/{pdf_link}")
    expect(page.locator("#file-name")).to_have_text("paper.pdf")
    check(page.evaluate("navigator.pdfViewerEnabled"), "this Chromium has no PDF viewer")
    expect(page.locator("iframe.preview-pdf")).to_have_attribute("title", "Preview of paper.pdf")
    # Chromium's viewer (its built-in PDF extension) runs in a frame inside the PDF's own: it
    # loaded there, neither blocked by a policy nor turned into a download.
    viewer = []
    for _ in range(150):
        viewer = [f for f in page.frames if f.url.startswith(PDF_VIEWER) and f.parent_frame and "paper.pdf?inline=1" in f.parent_frame.url]
        if viewer:
            break
        page.wait_for_timeout(100)
    check(viewer, f"no PDF viewer in the preview; frames: {[f.url for f in page.frames]}")

    step("an upload-only link: uploads land, a taken name is kept, nothing is listed")
    page.goto(f"{BASE}/s/{drop_link}")
    expect(page.locator("#drop")).to_be_visible()
    expect(page.locator("#drop-title")).to_have_text("Upload files to Inbox")
    check(page.locator("#file-list tbody tr").count() == 0, "a drop lists files")
    report = os.path.join(tmp, "report.txt")
    with open(report, "wb") as f:
        f.write(b"a visitor's report")
    photo = os.path.join(tmp, "photo-Ω.bin")
    photo_bytes = os.urandom(300_000)
    with open(photo, "wb") as f:
        f.write(photo_bytes)
    page.set_input_files("#drop-input", [report, photo])
    expect(page.locator("#drop-uploads li[data-state='done']")).to_have_count(2)
    check(content(path_of("Inbox/report.txt")) == b"the owner's report", "the drop replaced the owner's file")
    check(content(path_of("Inbox/report (2).txt")) == b"a visitor's report", "the visitor's file is not beside it")
    check(content(path_of("Inbox/photo-Ω.bin")) == photo_bytes, "the dropped bytes differ")
    check("secret-plan" not in page.content(), "the page shows what the folder holds")

    step("a read-write link: a new folder, an upload into it, a delete")
    page.goto(f"{BASE}/s/{team_link}")
    expect(row(page, "old.txt")).to_have_count(1)
    page.click("#new-folder")
    page.fill("#new-folder-name", "made")
    page.press("#new-folder-name", "Enter")
    expect(row(page, "made")).to_have_count(1)
    check(exists("Team/made"), "the folder is not on the server")
    row(page, "made").locator(".file-name").click()
    expect(page.locator("#empty")).to_be_visible()
    notes = os.path.join(tmp, "notes.txt")
    with open(notes, "wb") as f:
        f.write(b"written through a link")
    page.set_input_files("#upload-input", notes)
    expect(row(page, "notes.txt")).to_have_count(1)
    check(content(path_of("Team/made/notes.txt")) == b"written through a link", "the uploaded bytes differ")
    page.locator("#crumbs a", has_text="Team").click()
    row(page, "old.txt").locator("button[aria-label='Delete old.txt']").click()
    expect(row(page, "old.txt")).to_have_count(0)
    check(not exists("Team/old.txt"), "the deleted file is still there")

    step("a phone-sized window: the folder fits")
    page.set_viewport_size({"width": 375, "height": 700})
    page.goto(f"{BASE}/s/{protected}")
    expect(row(page, "readme.txt")).to_have_count(1)
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    check(overflow <= 0, f"the page is {overflow}px wider than the phone")

    browser.close()

check(not basic_seen, f"Basic challenges reached the page: {basic_seen}")
check(not page_errors, f"uncaught script errors: {page_errors}")
step("end")
print("link.py: all steps passed", flush=True)
