"""arca-bench web: what the web app costs a person, measured in a real browser.

Run by `arca-bench web` (crates/bench/src/web.rs) against a release `arca` whose USER has
the folder `big` of 10,000 entries:

    web.py BASE_URL USER PASSWORD UPLOAD_FILE

Prints one `key value` line per measurement, which web.rs reads:
  first_load_bytes, first_load_requests  the login page with an empty cache, as transferred
  first_list_ms      a logged-in reload of the files view: navigation start to the first row
                     (median of 5)
  big_folder_ms      opening the folder of 10,000: the click to its first row (median of 3)
  upload_s           UPLOAD_FILE through the upload button (TUS): choosing it to "done"
  upload_heap_mib    the page's peak JS heap during that upload
Playwright drives Debian's Chromium (`/usr/bin/chromium`), as the tests do.
"""

import statistics
import sys
import time

from playwright.sync_api import sync_playwright

BASE, USER, PASSWORD, UPLOAD = sys.argv[1:5]
# Each wait in the page gives up after 30 s, naming what it waited for.
FIRST_ROW = """() => new Promise((resolve, reject) => {
  const check = () => document.querySelector('#file-list tbody tr[data-index]')
    ? resolve(performance.now())
    : performance.now() > 30000 ? reject(new Error('no file list: ' + document.body.innerText.slice(0, 200)))
    : requestAnimationFrame(check);
  check();
})"""
OPEN_BIG = """() => new Promise((resolve, reject) => {
  const started = performance.now();
  location.hash = '#/files/big';
  const check = () => document.querySelector('#file-list tbody tr[data-name="d00000"]')
    ? resolve(performance.now() - started)
    : performance.now() - started > 30000 ? reject(new Error('big did not open'))
    : requestAnimationFrame(check);
  check();
})"""


# Stamps the upload's start (now) and its end: the first upload row to reach done, failed
# or cancelled, as `window.uploadEnded = [state, ms]`.
WATCH_UPLOAD = """() => {
  const started = performance.now();
  window.uploadEnded = null;
  const look = () => {
    const state = document.querySelector('#uploads li')?.dataset.state;
    if (!window.uploadEnded && ['done', 'failed', 'cancelled'].includes(state)) {
      window.uploadEnded = [state, performance.now() - started];
    }
  };
  new MutationObserver(look).observe(document.body, {
    subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'],
  });
}"""


def out(key, value):
    print(f"{key} {value}", flush=True)


with sync_playwright() as pw:
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()

    # The first visit: an empty cache, every byte counted as it came over the wire.
    cdp = ctx.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
    loaded = []
    cdp.on("Network.loadingFinished", lambda e: loaded.append(e["encodedDataLength"]))
    # The load ends with the app's session check (401: no one is logged in yet).
    with page.expect_response(lambda r: r.url.endswith("/api/v1/session")):
        page.goto(BASE + "/", wait_until="load")
    page.wait_for_selector("#login-user")
    out("first_load_bytes", int(sum(loaded)))
    out("first_load_requests", len(loaded))
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": False})
    # Our own capture of every request ends here: a person has no DevTools open, and it cost
    # the 1 GiB upload below about 8%.
    cdp.send("Network.disable")

    page.fill("#login-user", USER)
    page.fill("#login-password", PASSWORD)
    page.click("#login-submit")
    page.wait_for_selector("#file-list tbody tr[data-index]")

    # A returning user reloads: the app's files cached by hash, the page revalidated. (A goto
    # of the same URL with a hash would only change the hash: no load at all.)
    firsts = []
    for _ in range(5):
        page.reload(wait_until="commit")
        firsts.append(page.evaluate(FIRST_ROW))
    out("first_list_ms", f"{statistics.median(firsts):.1f}")

    bigs = []
    for _ in range(3):
        bigs.append(page.evaluate(OPEN_BIG))
        page.evaluate("location.hash = '#/files/'")
        page.wait_for_selector("#file-list tbody tr[data-name='big']")
    out("big_folder_ms", f"{statistics.median(bigs):.1f}")

    # The upload, sampling the page's JS heap while it runs. Its end is stamped in the page
    # (an observer of the upload row's state), so the sampling can be sparse: polling the
    # page often took CPU from the upload on two cores.
    page.goto(BASE + "/#/files/")
    page.wait_for_selector("#file-list tbody tr[data-index]")
    heap = ctx.new_cdp_session(page)
    peak = 0
    page.evaluate(WATCH_UPLOAD)
    started = time.monotonic()
    page.set_input_files("#upload-input", UPLOAD)
    while True:
        used = heap.send("Runtime.getHeapUsage")["usedSize"]
        peak = max(peak, used)
        ended = page.evaluate("window.uploadEnded")
        if ended:
            state, took_ms = ended
            if state != "done":
                sys.exit(f"the upload ended {state}")
            break
        if time.monotonic() - started > 1800:
            sys.exit("the upload did not finish within 30 minutes")
        time.sleep(0.5)
    out("upload_s", f"{took_ms / 1000:.3f}")
    out("upload_heap_mib", f"{peak / 1048576:.1f}")
    browser.close()
