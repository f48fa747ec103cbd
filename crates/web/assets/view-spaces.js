// The Spaces view: the project spaces one is a member of (Graph's me/drives), each opening in
// the files view; admins and space admins make new ones; managers see and change the members (users and groups
// with a role: Graph's root/permissions, added through OCS by name), disable a space, restore
// or delete a disabled one. The server checks every change again.

import { request, failure, session } from "./api.js";
import { ask } from "./dialog.js";
import * as shares from "./shares.js";
import { h, icon, announce, byName, formatSize, changeThenShow } from "./ui.js";

const $ = (id) => document.getElementById(id);
const GRAPH = "/graph/v1beta1";

/** The member roles, by oCIS's role ids, with what the app calls them. */
const ROLES = [
  { id: "a8d5fe5e-96e3-418d-825b-534dbdf22b99", name: "space-viewer", label: "Can view" },
  { id: "58c63c02-1d89-4572-916a-870abc5a1b7d", name: "space-editor", label: "Can edit" },
  { id: "312c0871-5ef7-4b3a-85b6-0e4074c64049", name: "manager", label: "Manager" },
];
const MANAGER = ROLES[2].id;

async function graph(method, path, body, headers = {}) {
  const resp = await request(method, `${GRAPH}${path}`, {
    headers: body ? { "Content-Type": "application/json", ...headers } : headers,
    body: body ? JSON.stringify(body) : undefined,
  });
  if (!resp.ok) throw await failure(resp, `${method} ${path} failed`);
  return resp.status === 204 ? null : resp.json();
}

/** The user's id, for finding them among a drive's members (asked once per login). */
const me = { user: null, id: null };

async function myId() {
  const user = session.current?.user;
  if (me.user !== user) {
    const resp = await request("GET", "/graph/v1.0/me");
    if (!resp.ok) throw await failure(resp, "Cannot tell who you are");
    Object.assign(me, { user, id: (await resp.json()).id });
  }
  return me.id;
}

/** The project spaces the user manages and that are in use: [{id, name}] (their trash is theirs to see). */
export async function managedSpaces() {
  const id = await myId();
  const drives = (await graph("GET", "/me/drives")).value;
  return drives
    .filter((d) => d.driveType === "project" && d.root?.deleted?.state !== "trashed" && manages(d, id))
    .map((d) => ({ id: d.id, name: d.name }))
    .sort((a, b) => byName(a.name, b.name));
}

/** Whether user `id` manages the drive (its root.permissions name them a Manager). */
function manages(d, id) {
  return (d.root?.permissions || []).some((p) => p.roles?.includes(MANAGER) && p.grantedToV2?.user?.id === id);
}

function roleSelect(value, label, onchange) {
  const select = h("select", { "aria-label": label, onchange: () => onchange(select.value) }, ROLES.map((r) => h("option", { value: r.id }, r.label)));
  select.value = value;
  return select;
}

/** Lists the spaces; `names` (id → name) is filled for the files view's crumbs. */
export async function refreshSpaces(names) {
  let drives = [];
  let id = null;
  try {
    id = await myId();
    drives = (await graph("GET", "/me/drives")).value.filter((d) => d.driveType === "project");
  } catch (e) {
    if (e.status !== 401) announce(e.message, "error");
  }
  drives.sort((a, b) => byName(a.name, b.name));
  $("space-new").hidden = !(session.current?.admin || session.current?.spaceAdmin);
  for (const d of drives) names.set(d.id, d.name);
  const rows = drives.map((d) => {
    const disabled = d.root?.deleted?.state === "trashed";
    const name = disabled
      ? h("span", { class: "file-name" }, icon("folder"), h("span", {}, d.name), h("small", { class: "hint" }, " · disabled"))
      : h("a", { class: "file-name", href: `#/spaces/${encodeURIComponent(d.id)}/` }, icon("folder"), h("span", {}, d.name));
    const managed = manages(d, id);
    const actions = [
      h("button", { type: "button", class: "icon-button", "aria-label": `Members of ${d.name}`, onclick: () => showMembers(d, managed) }, icon("share", 18)),
    ];
    if (managed && !disabled) {
      actions.push(h("button", { type: "button", class: "button quiet", onclick: () => disable(d) }, "Disable"));
    }
    if (managed && disabled) {
      actions.push(
        h("button", { type: "button", class: "button quiet", onclick: () => restore(d) }, "Restore"),
        h("button", { type: "button", class: "button quiet", onclick: () => purge(d) }, "Delete"),
      );
    }
    return h(
      "tr",
      { dataset: { name: d.name } },
      h("td", { class: "col-name" }, name),
      h("td", { class: "col-size" }, formatSize(d.quota?.used ?? null)),
      h("td", { class: "col-location" }, d.description || ""),
      h("td", { class: "col-actions" }, actions),
    );
  });
  document.querySelector("#space-list tbody").replaceChildren(...rows);
  $("space-none").hidden = rows.length > 0;
}

/** Runs `work`, says `done` or what failed, then lists the spaces again. */
async function act(work, done) {
  try {
    await work();
    announce(done);
  } catch (e) {
    announce(e.message, "error");
  }
  window.dispatchEvent(new CustomEvent("arca:spaces-changed"));
}

async function disable(d) {
  const choice = await ask(`Disable ${d.name}?`, h("p", {}, "Its members lose it at once. You can restore it, or delete it for good, later."), [
    { label: "Disable", value: "disable", primary: true },
    { label: "Cancel", value: "cancel" },
  ]);
  if (choice !== "disable") return;
  await act(() => graph("DELETE", `/drives/${encodeURIComponent(d.id)}`), `Disabled ${d.name}.`);
}

async function restore(d) {
  await act(() => graph("PATCH", `/drives/${encodeURIComponent(d.id)}`, null, { Restore: "T" }), `Restored ${d.name}.`);
}

async function purge(d) {
  const choice = await ask(`Delete ${d.name} for good?`, h("p", {}, "Everything in it is deleted, its trash and versions too. This cannot be undone."), [
    { label: "Delete", value: "delete", primary: true },
    { label: "Cancel", value: "cancel" },
  ]);
  if (choice !== "delete") return;
  await act(() => graph("DELETE", `/drives/${encodeURIComponent(d.id)}`, null, { Purge: "T" }), `Deleted ${d.name}.`);
}

/** The members panel: who is in the space with which role; managers change it. */
async function showMembers(d, managed) {
  const drive = `/drives/${encodeURIComponent(d.id)}/root/permissions`;
  const list = h("ul", { class: "share-list", "aria-label": `Members of ${d.name}` });
  const reload = async () => {
    let members = [];
    try {
      members = (await graph("GET", drive)).value;
    } catch (e) {
      return announce(e.message, "error");
    }
    list.replaceChildren(
      ...members.map((p) => {
        const who = p.grantedToV2?.user || p.grantedToV2?.group || {};
        const label = `${who.displayName || who.id}${p.grantedToV2?.group ? " (group)" : ""}`;
        const role = ROLES.find((r) => p.roles?.includes(r.id));
        return h(
          "li",
          { dataset: { member: p.id } },
          h("span", { class: "share-who" }, label),
          managed
            ? roleSelect(role?.id ?? ROLES[0].id, `Role of ${label}`, (id) => change(p, id, label))
            : h("span", { class: "hint" }, role?.label ?? ""),
          managed
            ? h("button", { type: "button", class: "icon-button", "aria-label": `Remove ${label}`, onclick: () => remove(p, label) }, icon("delete", 18))
            : null,
        );
      }),
    );
  };
  const run = (work, what) => changeThenShow(work, reload, what);
  const change = (p, role, label) =>
    run(() => graph("PATCH", `${drive}/${encodeURIComponent(p.id)}`, { roles: [role] }), `${label} now has another role.`);
  const remove = (p, label) => run(() => graph("DELETE", `${drive}/${encodeURIComponent(p.id)}`), `${label} is no longer a member.`);

  const panel = h("div", { class: "share-panel" });
  if (managed) {
    const search = h("input", { type: "search", id: "member-search", autocomplete: "off", placeholder: "Name or group", "aria-label": `Add to ${d.name}` });
    const newRole = roleSelect(ROLES[0].id, "Role of new members", () => {});
    const results = h("ul", { class: "share-results", "aria-label": "Search results", hidden: true });
    const add = (found) =>
      run(async () => {
        results.hidden = true;
        search.value = "";
        const role = ROLES.find((r) => r.id === newRole.value);
        // OCS takes the user's or the group's name, as the search found it.
        await shares.create("", found.type === shares.TYPE.group ? 8 : 7, { shareWith: found.with, space_ref: d.id, role: role.name });
      }, `Added ${found.label}.`);
    shares.searchAsYouType(search, results, true, add);
    panel.addEventListener("keydown", (e) => {
      if (e.key !== "Enter" || e.target !== search) return;
      e.preventDefault();
      results.querySelector("button")?.click();
    });
    panel.append(h("div", { class: "share-add" }, search, newRole), results);
  }
  panel.append(list);
  await reload();
  await ask(`Members of ${d.name}`, panel, [{ label: "Close", value: "close", primary: true }]);
}

async function onNewSpace(event) {
  event.preventDefault();
  const name = $("space-new-name").value.trim();
  if (!name) return;
  const description = $("space-new-description").value.trim();
  await act(async () => {
    await graph("POST", "/drives", { name, description, driveType: "project" });
    $("space-new-name").value = "";
    $("space-new-description").value = "";
    $("space-new-form").hidden = true;
  }, `Created the space ${name}.`);
}

export function wireSpaces() {
  $("space-new").addEventListener("click", () => {
    $("space-new-form").hidden = !$("space-new-form").hidden;
    if (!$("space-new-form").hidden) $("space-new-name").focus();
  });
  $("space-new-form").addEventListener("submit", onNewSpace);
  $("space-new-cancel").addEventListener("click", () => {
    $("space-new-form").hidden = true;
  });
}
