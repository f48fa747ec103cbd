"""A folder of 10,000 entries in the web app, in a real browser.

Run by tests/web.rs against a running `arca` whose USER has the folder `big` holding the
folders d00000 … d09999 (made by web.rs):

    big.py BASE_URL USER PASSWORD

The list must show all of them while keeping only a few dozen rows in the page (it renders
what the window shows), reach the last by the keyboard (End) and by scrolling, move with the
arrow keys, select with Space, and sort both ways. Prints how long the folder took to show
(the target lives in the benchmark, not here). Exits non-zero on the first failure.
"""

import sys
import time

from playwright.sync_api import expect, sync_playwright

import kit
from kit import basic_seen, check, guard, log_in, page_errors, row, step

BASE, USER, PASSWORD = sys.argv[1:4]
COUNT = 10_000
kit.connect(BASE, USER, PASSWORD)


def rendered(page):
    return page.locator("#file-list tbody tr[data-index]").count()


def focused_name(page):
    return page.evaluate("document.activeElement.closest('tr')?.dataset.name ?? null")


with sync_playwright() as pw:
    # As root (in CI) Chromium's sandbox cannot start; the page is our own test server.
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    guard(page)
    page.goto(BASE + "/")
    log_in(page, USER, PASSWORD)
    expect(row(page, "big")).to_have_count(1)

    step("open the folder of 10,000")
    started = time.monotonic()
    row(page, "big").locator(".file-name").click()
    expect(row(page, "d00000")).to_have_count(1)
    print(f"  the folder of {COUNT:,} showed in {time.monotonic() - started:.2f}s", flush=True)
    check(page.get_attribute("#file-list", "aria-rowcount") == str(COUNT + 1), "aria-rowcount")
    shown = rendered(page)
    check(0 < shown < 100, f"{shown} rows in the page for {COUNT} entries")

    step("End from the first row reaches the last; Up moves back one")
    row(page, "d00000").locator(".file-name").focus()
    page.keyboard.press("End")
    expect(row(page, "d09999")).to_have_count(1)
    check(focused_name(page) == "d09999", f"End focused {focused_name(page)!r}")
    box = row(page, "d09999").bounding_box()
    check(box is not None and 0 <= box["y"] and box["y"] + box["height"] <= 800, f"the last row is not in view: {box}")
    page.keyboard.press("ArrowUp")
    check(focused_name(page) == "d09998", f"Up focused {focused_name(page)!r}")
    check(rendered(page) < 100, f"{rendered(page)} rows in the page at the end")

    step("scrolling to the middle shows the middle")
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight / 2)")
    expect(row(page, "d05000")).to_have_count(1)
    check(rendered(page) < 100, f"{rendered(page)} rows in the page in the middle")

    step("Space selects the focused row; Home goes back to the first")
    row(page, "d05000").locator(".file-name").focus()
    page.keyboard.press(" ")
    expect(page.locator("#selection-count")).to_have_text("1 selected")
    page.keyboard.press("Home")
    expect(row(page, "d00000")).to_have_count(1)
    check(focused_name(page) == "d00000", f"Home focused {focused_name(page)!r}")

    step("sort by name, descending: the last comes first")
    page.click("button.sort[data-key=name]")
    expect(page.locator("#file-list tbody tr[data-index='0']")).to_have_attribute("data-name", "d09999")

    browser.close()

check(not basic_seen, f"Basic challenges reached the page: {basic_seen}")
check(not page_errors, f"uncaught script errors: {page_errors}")
step("end")
print("big.py: all steps passed", flush=True)
