"""The web app's "Log in with …" through an OpenID provider, in a real browser.

Run by tests/web.rs against a running `arca` whose proxy.oidc names the test issuer:

    oidc.py BASE_URL PROVIDER_NAME

The login page offers the provider; "Cancel" at the provider comes back to the login page
with a message; signing in as a new user there (dora) comes back to arca logged in as her
(created from the ID token's claims), with a session cookie the server honours; logging out
ends that session on the server and offers the provider again.
"""

import sys

from playwright.sync_api import expect, sync_playwright

import kit
from kit import check, guard, page_errors, step

BASE, PROVIDER = sys.argv[1:3]
kit.connect(BASE, "dora", "")


def with_cookie(method, path, cookie):
    status, _, _ = kit.http(method, path, {"Cookie": f"arca_session={cookie}", "Depth": "0"})
    return status


with sync_playwright() as pw:
    # As root (in CI) Chromium's sandbox cannot start; the pages are our own test servers.
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    ctx = browser.new_context()
    page = ctx.new_page()
    guard(page)

    step("the login page offers the provider")
    page.goto(BASE + "/")
    link = page.locator("#login-oidc-link")
    expect(link).to_have_text(f"Log in with {PROVIDER}")

    step("cancelled at the provider: back on the login page, told so")
    link.click()
    expect(page.locator("h1")).to_have_text("Sign in to Test IdP")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#login-error")).to_have_text("The sign-in was cancelled at the identity provider.")
    check("login=" not in page.url, f"the outcome stays in the address bar: {page.url}")
    expect(page.locator("#login-oidc-link")).to_be_visible()

    step("signed in at the provider: logged in to arca as that person")
    page.locator("#login-oidc-link").click()
    page.fill("#username", "dora")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#who")).to_have_text("dora from the IdP")
    page.wait_for_selector("#file-list")
    check(page.url.startswith(BASE + "/#/files/"), f"not in the files view: {page.url}")
    cookies = {c["name"]: c for c in ctx.cookies(BASE)}
    session = cookies.get("arca_session")
    check(session is not None, f"no session cookie: {list(cookies)}")
    check(session["httpOnly"] and session["sameSite"] == "Strict", f"session cookie flags: {session}")
    check("arca_oidc" not in cookies, "the login's state cookie outlived the login")
    status = with_cookie("PROPFIND", "/remote.php/dav/files/dora/", session["value"])
    check(status == 207, f"the session does not open dora's files: {status}")

    step("a folder made in the app lands in her files")
    page.click("#new-folder")
    page.fill("#new-folder-name", "From SSO")
    page.keyboard.press("Enter")
    page.wait_for_selector("#file-list tbody tr[data-name='From SSO']")
    status = with_cookie("PROPFIND", "/remote.php/dav/files/dora/From%20SSO/", session["value"])
    check(status == 207, f"the folder is not on the server: {status}")

    step("log out: the session ends on the server and at the provider, which sends the browser back")
    with page.expect_navigation(url=BASE + "/", timeout=15000):
        page.click("#logout")
    expect(page.locator("#login-oidc-link")).to_have_text(f"Log in with {PROVIDER}")
    status = with_cookie("PROPFIND", "/remote.php/dav/files/dora/", session["value"])
    check(status == 401, f"the old session cookie still works after logout: {status}")
    ctx.close()
    browser.close()

check(not kit.basic_seen, f"Basic challenges reached the browser: {kit.basic_seen}")
check(not page_errors, f"uncaught script errors: {page_errors}")
step("end")
print("oidc.py: all steps passed", flush=True)
