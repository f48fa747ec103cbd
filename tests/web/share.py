"""Sharing in the web app, in a real browser, clicked through as people would.

Run by tests/web.rs against a running `arca` (with sharing.auto_accept off):

    share.py BASE_URL USER PASSWORD

The script makes USER's folder Project with a file over WebDAV. Then USER, an admin, logged
in: makes the users alice and temp and the group team (alice in it) in the Users view, resets
alice's password, makes her a Space Admin and deletes temp; opens a project space made over Graph from the Spaces view
and makes a folder and uploads a file in it; opens Project's share panel, finds alice by typing, shares with her, makes her an editor,
sets an expiry, adds the group and removes it again, creates an upload-only link with a
password (its URL lands on the clipboard), and removes the link from "Shared by me". Then
alice, logged in: finds Project pending in "Shared with me", accepts it, opens it, reads the
file, declines it, and may make spaces (the New space button). After each step the share records are read back over OCS with Basic.
Exits non-zero on the first failure, naming it; no page may open a dialog, throw an uncaught
error or receive a Basic challenge.
"""

import json
import os
import re
import sys
import tempfile
import urllib.parse

from playwright.sync_api import expect, sync_playwright

import kit
from kit import basic_seen, check, dav, guard, http, log_in, names, page_errors, row, step

BASE, USER, PASSWORD = sys.argv[1:4]
ALICE_PASSWORD = "alice-in-the-browser"
# oCIS's Space Admin role id.
SPACE_ADMIN = "2aadd357-682c-406b-8874-293091995fdd"
kit.connect(BASE, USER, PASSWORD)
OCS = "/ocs/v2.php/apps/files_sharing/api/v1/shares"


def ocs(user_auth, query):
    """The shares an OCS listing returns for `query`, as `user_auth` (a Basic header)."""
    status, _, body = http("GET", f"{OCS}?format=json&{query}", {"Authorization": user_auth, "OCS-APIREQUEST": "true"})
    check(status == 200, f"OCS {query}: {status} {body[:200]!r}")
    return json.loads(body)["ocs"]["data"]


def shares_of(path):
    return ocs(kit.BASIC, "path=" + urllib.parse.quote(path))


def date_input(locator, value):
    """Sets a date input as a person picking a day does (the change event fires)."""
    locator.fill(value)
    locator.dispatch_event("change")


step("Project over WebDAV")
status, _, _ = dav("MKCOL", "Project")
check(status == 201, f"MKCOL Project: {status}")
status, _, _ = dav("PUT", "Project/plan.txt", body=b"the plan")
check(status == 201, f"PUT plan.txt: {status}")


def logs_in(user, password):
    """Whether `user` can log in with `password` (a WebDAV request with Basic)."""
    status, _, _ = http("PROPFIND", f"/remote.php/dav/files/{user}/", {"Authorization": kit.basic(user, password), "Depth": "0"})
    return status == 207


def graph_names(path, key):
    status, _, raw = http("GET", f"/graph/v1.0/{path}", {"Authorization": kit.BASIC})
    check(status == 200, f"GET {path}: {status}")
    return sorted(v[key] for v in json.loads(raw)["value"])


with sync_playwright() as pw:
    # As root (in CI) Chromium's sandbox cannot start; the page is our own test server.
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=BASE)
    page = ctx.new_page()
    guard(page)
    page.goto(BASE + "/")
    log_in(page, USER, PASSWORD)
    expect(row(page, "Project")).to_have_count(1)

    step("the Users view: create alice and temp, reset alice's password, delete temp")
    page.click("#view-admin")
    expect(page.locator("#admin")).to_be_visible()
    for name, display, password in [("alice", "Alice Liddell", "first-pw"), ("temp", "", "temp-pw")]:
        page.fill("#new-user-name", name)
        page.fill("#new-user-display", display)
        page.fill("#new-user-mail", f"{name}@example.org")
        page.fill("#new-user-password", password)
        page.press("#new-user-password", "Enter")
        expect(page.locator(f"#user-list tr[data-name='{name}']")).to_have_count(1)
    check(logs_in("alice", "first-pw"), "alice cannot log in with the password she was made with")
    page.locator("#user-list tr[data-name='alice'] button", has_text="Reset password").click()
    page.fill("#admin-new-password", ALICE_PASSWORD)
    page.press("#admin-new-password", "Enter")
    expect(page.locator("#status")).to_have_text("Set a new password for alice.")
    check(logs_in("alice", ALICE_PASSWORD) and not logs_in("alice", "first-pw"), "the reset did not take")
    step("the Users view: alice made a Space Admin (oCIS's role, Graph appRoleAssignments)")
    page.locator("#user-list select[aria-label='Role of alice']").select_option(label="Space Admin")
    expect(page.locator("#status")).to_have_text("alice is now Space Admin.")
    status, _, raw = http("GET", "/graph/v1.0/users?$expand=appRoleAssignments", {"Authorization": kit.BASIC})
    roles = {u["onPremisesSamAccountName"]: u["appRoleAssignments"][0]["appRoleId"] for u in json.loads(raw)["value"]}
    check(roles.get("alice") == SPACE_ADMIN, f"alice's role: {roles}")
    page.click("#user-list tr[data-name='temp'] button[aria-label='Delete temp']")
    page.locator("#dialog").get_by_role("button", name="Delete temp").click()
    expect(page.locator("#user-list tr[data-name='temp']")).to_have_count(0)
    check("temp" not in graph_names("users", "onPremisesSamAccountName"), "temp is still a user")

    step("the Users view: the group team with alice in it")
    page.fill("#new-group-name", "team")
    page.press("#new-group-name", "Enter")
    team = page.locator("#group-list tr[data-name='team']")
    expect(team).to_have_count(1)
    team.locator("button", has_text="Members").click()
    page.locator("#dialog select").select_option(label="alice")
    expect(page.locator("#dialog li[data-name='alice']")).to_have_count(1)
    page.locator("#dialog-buttons button", has_text="Close").click()
    team_id = [g["id"] for g in json.loads(http("GET", "/graph/v1.0/groups", {"Authorization": kit.BASIC})[2])["value"] if g["displayName"] == "team"][0]
    check(graph_names(f"groups/{team_id}/members", "onPremisesSamAccountName") == ["alice"], "alice is not in team")
    page.click("#view-files")
    expect(row(page, "Project")).to_have_count(1)

    step("a project space: listed under Spaces, opened, a folder made and a file uploaded in it")
    status, _, raw = http(
        "POST",
        "/graph/v1.0/drives",
        {"Authorization": kit.BASIC, "Content-Type": "application/json"},
        json.dumps({"name": "Team Space", "driveType": "project", "description": "for the team"}).encode(),
    )
    check(status == 201, f"create the space: {status} {raw[:200]!r}")
    space = json.loads(raw)["id"]
    page.click("#view-spaces")
    listed = page.locator("#space-list tr[data-name='Team Space']")
    expect(listed).to_contain_text("for the team")
    listed.locator("a.file-name").click()
    expect(page.locator("#crumbs")).to_contain_text("Team Space")
    expect(page.locator("#empty")).to_be_visible()
    page.click("#new-folder")
    page.fill("#new-folder-name", "plans")
    page.press("#new-folder-name", "Enter")
    expect(row(page, "plans")).to_have_count(1)
    row(page, "plans").locator(".file-name").click()
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "q4.txt")
        with open(plan, "wb") as f:
            f.write(b"the space's plan")
        page.set_input_files("#upload-input", plan)
        expect(row(page, "q4.txt")).to_have_count(1)
    in_space = f"/dav/spaces/{urllib.parse.quote(space)}/plans/q4.txt"
    status, _, body = http("GET", in_space, {"Authorization": kit.BASIC})
    check((status, body) == (200, b"the space's plan"), f"GET {in_space}: {status} {body[:80]!r}")
    # Shared from inside the space, with alice: the panel lists the share, alice receives it.
    row(page, "q4.txt").locator("button[aria-label='Share q4.txt']").click()
    page.fill("#share-search", "lidd")
    page.locator(".share-result", has_text="Alice Liddell").click()
    expect(page.locator(".share-list li[data-with='alice']")).to_have_count(1)
    page.locator("#dialog-buttons button", has_text="Close").click()
    status, _, raw = http(
        "GET",
        "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json&shared_with_me=true&state=all",
        {"Authorization": kit.basic("alice", ALICE_PASSWORD), "OCS-APIREQUEST": "true"},
    )
    received = [s.get("file_target", "") for s in json.loads(raw)["ocs"]["data"]] if status == 200 else []
    check(any(t.endswith("q4.txt") for t in received), f"alice did not receive q4.txt: {status} {received}")
    row(page, "q4.txt").locator("button[aria-label='Share q4.txt']").click()
    page.get_by_role("button", name="Stop sharing with Alice Liddell").click()
    expect(page.locator(".share-list li[data-with='alice']")).to_have_count(0)
    page.locator("#dialog-buttons button", has_text="Close").click()
    status, _, _ = dav("PROPFIND", "plans", {"Depth": "0"})
    check(status == 404, f"the space's folder landed in the personal files: {status}")

    step("the space's trash: q4.txt deleted in the space, found under Trash of Team Space, restored")
    page.get_by_role("button", name="Delete q4.txt").click()
    expect(row(page, "q4.txt")).to_have_count(0)
    page.click("#view-trash")
    expect(page.locator("#trash-of-field")).to_be_visible()
    check(page.locator("#trash-list tbody tr").filter(has_text="q4.txt").count() == 0, "the space's item is in the personal trash")
    page.locator("#trash-of").select_option(label="Team Space")
    item = page.locator("#trash-list tbody tr").filter(has_text="q4.txt")
    expect(item).to_have_count(1)
    expect(item).to_contain_text("/plans")
    item.get_by_role("button", name="Restore q4.txt").click()
    expect(page.locator("#status")).to_have_text("Restored q4.txt to /plans/q4.txt.")
    status, _, body = http("GET", in_space, {"Authorization": kit.BASIC})
    check((status, body) == (200, b"the space's plan"), f"restored {in_space}: {status} {body[:80]!r}")
    page.locator("#trash-of").select_option(label="My files")

    step("a space made in the app: alice added as an editor, made a viewer, then the space disabled, restored, deleted")
    page.click("#view-spaces")
    page.click("#space-new")
    page.fill("#space-new-name", "Room & Co")
    page.fill("#space-new-description", "made in the app")
    page.press("#space-new-name", "Enter")
    room = page.locator("#space-list tr[data-name='Room & Co']")
    expect(room).to_contain_text("made in the app")
    room_id = [d["id"] for d in json.loads(http("GET", "/graph/v1.0/me/drives", {"Authorization": kit.BASIC})[2])["value"] if d["name"] == "Room & Co"][0]
    perms = f"/graph/v1beta1/drives/{urllib.parse.quote(room_id)}/root/permissions"

    def members():
        value = json.loads(http("GET", perms, {"Authorization": kit.BASIC})[2])["value"]
        return {p["grantedToV2"].get("user", p["grantedToV2"].get("group", {})).get("displayName"): p["roles"][0] for p in value}

    room.locator("button[aria-label='Members of Room & Co']").click()
    page.locator("#dialog select[aria-label='Role of new members']").select_option(label="Can edit")
    page.fill("#member-search", "ali")
    page.locator("#dialog .share-result", has_text="Alice Liddell").click()
    expect(page.locator("#status")).to_have_text("Added Alice Liddell.")
    check(members().get("Alice Liddell") == "58c63c02-1d89-4572-916a-870abc5a1b7d", f"alice is not an editor: {members()}")
    status, _, _ = http("PUT", f"/dav/spaces/{urllib.parse.quote(room_id)}/alice.txt", {"Authorization": kit.basic("alice", ALICE_PASSWORD)}, b"hi")
    check(status == 201, f"alice, an editor, cannot write: {status}")
    page.locator("#dialog select[aria-label^='Role of Alice']").select_option(label="Can view")
    expect(page.locator("#status")).to_have_text("Alice Liddell now has another role.")
    check(members().get("Alice Liddell") == "a8d5fe5e-96e3-418d-825b-534dbdf22b99", f"alice is not a viewer: {members()}")
    status, _, _ = http("PUT", f"/dav/spaces/{urllib.parse.quote(room_id)}/alice.txt", {"Authorization": kit.basic("alice", ALICE_PASSWORD)}, b"again")
    check(status == 403, f"alice, a viewer, still writes: {status}")
    page.locator("#dialog-buttons button", has_text="Close").click()
    room.locator("button", has_text="Disable").click()
    page.locator("#dialog-buttons button", has_text="Disable").click()
    expect(room).to_contain_text("disabled")
    status, _, _ = http("GET", f"/dav/spaces/{urllib.parse.quote(room_id)}/alice.txt", {"Authorization": kit.basic("alice", ALICE_PASSWORD)})
    check(status == 404, f"alice still reads a disabled space: {status}")
    room.locator("button", has_text="Restore").click()
    expect(room.locator("a.file-name")).to_have_count(1)
    room.locator("button", has_text="Disable").click()
    page.locator("#dialog-buttons button", has_text="Disable").click()
    room.locator("button", has_text="Delete").click()
    page.locator("#dialog-buttons button", has_text="Delete").click()
    expect(room).to_have_count(0)
    status, _, _ = http("GET", f"/graph/v1.0/drives/{urllib.parse.quote(room_id)}", {"Authorization": kit.BASIC})
    check(status == 404, f"the deleted space is still there: {status}")
    page.click("#view-files")
    expect(row(page, "Project")).to_have_count(1)

    step("find alice by typing and share Project with her")
    row(page, "Project").locator("button[aria-label='Share Project']").click()
    expect(page.locator("#dialog")).to_be_visible()
    expect(page.locator("#dialog-title")).to_have_text("Share Project")
    page.fill("#share-search", "lidd")
    expect(page.locator(".share-result", has_text="Alice Liddell")).to_have_count(1)
    page.locator(".share-result", has_text="Alice Liddell").click()
    person = page.locator(".share-list li[data-with='alice']")
    expect(person).to_have_count(1)
    found = [s for s in shares_of("/Project") if s["share_type"] == 0]
    check(len(found) == 1 and found[0]["share_with"] == "alice" and found[0]["permissions"] == 1, f"alice's share: {found}")

    step("make alice an editor until a day in 2031")
    person.locator("select").select_option(label="Can edit")
    # The change is saved, and the list shown again, before the next one: a row replaced
    # under a half-made change would lose it.
    expect(page.locator("#status")).to_contain_text("now has another role")
    date_input(person.locator("input[type=date]"), "2031-05-06")
    expect(page.locator("#status")).to_contain_text("ends on 2031-05-06")
    found = [s for s in shares_of("/Project") if s["share_type"] == 0]
    check(found[0]["permissions"] == 15, f"alice is not an editor: {found}")
    check(str(found[0]["expiration"]).startswith("2031-05-06"), f"alice's expiry: {found}")

    step("add the group team, then remove it")
    page.fill("#share-search", "tea")
    expect(page.locator(".share-result", has_text="team")).to_have_count(1)
    page.press("#share-search", "Enter")
    group = page.locator(".share-list li[data-with='team']")
    expect(group).to_have_count(1)
    check(any(s["share_type"] == 1 for s in shares_of("/Project")), "no group share on the server")
    group.locator("button[aria-label='Stop sharing with team']").click()
    expect(group).to_have_count(0)
    check(not any(s["share_type"] == 1 for s in shares_of("/Project")), "the group share is still there")

    step("an upload-only link with a password, its URL on the clipboard")
    page.locator("select[aria-label='Role of a new link']").select_option(label="Upload only")
    page.fill("input[aria-label='Password of a new link']", "drop-pw-1")
    page.click("#share-create-link")
    expect(page.locator("#status")).to_contain_text("copied")
    links = [s for s in shares_of("/Project") if s["share_type"] == 3]
    check(len(links) == 1 and links[0]["permissions"] == 4, f"the link: {links}")
    check(links[0]["share_with"] == "***redacted***", f"the link has no password: {links}")
    clipboard = page.evaluate("navigator.clipboard.readText()")
    check(clipboard.endswith(f"/s/{links[0]['token']}"), f"clipboard holds {clipboard!r}")
    expect(page.locator(f".share-list li[data-token='{links[0]['token']}']")).to_have_count(1)
    page.locator("#dialog-buttons button", has_text="Close").click()
    expect(page.locator("#dialog")).to_be_hidden()

    step("Shared by me lists alice and the link; the link is removed there")
    page.click("#view-shared-by")
    expect(page.locator("#shared-by-list tbody tr")).to_have_count(2)
    expect(page.locator("#shared-by-list tbody tr[data-with='alice']")).to_contain_text("Can edit")
    page.locator(f"#shared-by-list tbody tr[data-with='{links[0]['token']}'] .icon-button").click()
    expect(page.locator("#shared-by-list tbody tr")).to_have_count(1)
    check(not any(s["share_type"] == 3 for s in shares_of("/Project")), "the link is still there")

    step("alice: pending in Shared with me, accepted, opened, then declined")
    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()
    log_in(page, "alice", ALICE_PASSWORD)
    expect(page.locator("#files")).to_be_visible()
    page.click("#view-shared-with")
    shared = page.locator("#shared-with-list tbody tr[data-name='Project']")
    expect(shared).to_contain_text("Pending")
    expect(shared).to_contain_text(re.compile(USER, re.IGNORECASE))  # the display name
    alice_auth = kit.basic("alice", ALICE_PASSWORD)
    mine = ocs(alice_auth, "shared_with_me=true&state=all")
    check(len(mine) == 1 and mine[0]["state"] == 1, f"alice's received shares: {mine}")
    shared.locator("button", has_text="Accept").click()
    expect(shared).to_contain_text("Accepted")
    check(ocs(alice_auth, "shared_with_me=true&state=all")[0]["state"] == 0, "not accepted on the server")
    shared.locator("a.file-name").click()
    expect(row(page, "plan.txt")).to_have_count(1)
    check(names(page) == ["plan.txt"], f"the shared folder lists {names(page)}")
    page.click("#view-shared-with")
    shared.locator("button", has_text="Decline").click()
    expect(shared).to_contain_text("Declined")
    check(ocs(alice_auth, "shared_with_me=true&state=all")[0]["state"] == 2, "not declined on the server")

    step("alice, a Space Admin, may make spaces")
    page.click("#view-spaces")
    expect(page.locator("#space-new")).to_be_visible()

    browser.close()

check(not basic_seen, f"Basic challenges reached the page: {basic_seen}")
check(not page_errors, f"uncaught script errors: {page_errors}")
step("end")
print("share.py: all steps passed", flush=True)
