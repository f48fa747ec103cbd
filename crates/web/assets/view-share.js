// Sharing in the app: the share panel of a file or folder (people and groups found by search,
// each with a role and an expiry; public links with a role, password and expiry, copied to the
// clipboard), and the "Shared with me" (accept, decline) and "Shared by me" views.

import * as shares from "./shares.js";
import { ask } from "./dialog.js";
import { h, icon, formatDate, announce, changeThenShow } from "./ui.js";

const $ = (id) => document.getElementById(id);
const { TYPE } = shares;
/** Typing pauses this long before a search is sent. */

/** "2030-01-02 12:00:00" (OCS) → "2030-01-02", what a date input holds. */
function day(expiration) {
  return expiration ? String(expiration).slice(0, 10) : "";
}

function roleSelect(folder, type, permissions, label, onchange) {
  const select = h(
    "select",
    { "aria-label": label, onchange: (e) => onchange(Number(e.target.value)) },
    ...shares.roles(folder, type).map((r) =>
      h("option", { value: r.permissions, selected: r.permissions === (permissions & ~shares.PERM.share) }, r.label),
    ),
  );
  return select;
}

/** A date field with its visible word; `label` names it for screen readers. */
function dateInput(value, label, onchange) {
  return h(
    "label",
    { class: "share-date" },
    "until",
    h("input", { type: "date", value: day(value), "aria-label": label, onchange: (e) => onchange(e.target.value) }),
  );
}

/** The share panel of `entry` at `path` (in the user's files). */
/** The share panel of `entry` at `path`, in the user's files or the project space `space`. */
export async function showShare(entry, path, space) {
  const folder = entry.folder;
  const people = h("ul", { class: "share-list", "aria-label": "People and groups with access" });
  const links = h("ul", { class: "share-list", "aria-label": "Public links" });
  const results = h("ul", { class: "share-results", "aria-label": "Search results", hidden: true });
  const search = h("input", {
    type: "search",
    id: "share-search",
    autocomplete: "off",
    placeholder: "Name or group",
    "aria-label": `Share ${entry.name} with`,
  });
  const newRole = roleSelect(folder, TYPE.user, shares.PERM.read, "Role for new shares", () => {});
  const newExpiry = h("input", { type: "date", "aria-label": "Expiry for new shares" });
  const newExpiryField = h("label", { class: "share-date" }, "until", newExpiry);

  const reload = async () => {
    let list = [];
    try {
      list = await shares.sharesOf(path, space);
    } catch (e) {
      return announce(e.message, "error");
    }
    people.replaceChildren(...list.filter((s) => s.share_type !== TYPE.link).map((s) => personRow(s)));
    links.replaceChildren(...list.filter((s) => s.share_type === TYPE.link).map((s) => linkRow(s)));
    if (!people.children.length) people.append(h("li", { class: "empty" }, "Not shared with anyone."));
    if (!links.children.length) links.append(h("li", { class: "empty" }, "No public links."));
  };

  // Each change says it is done once the panel shows it (the list is read back first).
  const act = (work, what) => changeThenShow(work, reload, what);
  const change = (s, changes, what) => act(() => shares.update(s.id, changes), what);
  const removeShare = (s, what) => act(() => shares.remove(s.id), what);

  const personRow = (s) => {
    const who = s.share_with_displayname || s.share_with;
    const kind = s.share_type === TYPE.group ? " (group)" : "";
    return h(
      "li",
      { dataset: { with: s.share_with } },
      h("span", { class: "share-who" }, `${who}${kind}`),
      roleSelect(folder, s.share_type, s.permissions, `Role of ${who}`, (p) => change(s, { permissions: p }, `${who} now has another role.`)),
      dateInput(s.expiration, `Access of ${who} ends on`, (d) => change(s, { expireDate: d }, d ? `${who}'s access ends on ${d}.` : `${who}'s access no longer ends.`)),
      h(
        "button",
        { type: "button", class: "icon-button", "aria-label": `Stop sharing with ${who}`, onclick: () => removeShare(s, `No longer shared with ${who}.`) },
        icon("delete", 18),
      ),
    );
  };

  const linkRow = (s) => {
    const name = s.name || "Link";
    const protectedBy = s.share_with ? "with a password" : "no password";
    return h(
      "li",
      { dataset: { token: s.token } },
      h("span", { class: "share-who" }, name, h("small", { class: "hint" }, ` · ${protectedBy}`)),
      roleSelect(folder, TYPE.link, s.permissions, `Role of ${name}`, (p) => change(s, { permissions: p }, `${name} now gives another role.`)),
      dateInput(s.expiration, `${name} ends on`, (d) => change(s, { expireDate: d }, d ? `${name} ends on ${d}.` : `${name} no longer ends.`)),
      h("button", { type: "button", class: "button", "aria-label": `Copy ${name}`, onclick: () => copyLink(s.url) }, "Copy link"),
      h(
        "button",
        { type: "button", class: "icon-button", "aria-label": `Remove ${name}`, onclick: () => removeShare(s, `Removed ${name}.`) },
        icon("delete", 18),
      ),
    );
  };

  const addPerson = async (found) => {
    results.hidden = true;
    search.value = "";
    try {
      await shares.create(path, found.type, {
        space_ref: space,
        shareWith: found.with,
        permissions: newRole.value,
        expireDate: newExpiry.value,
      });
      announce(`Shared ${entry.name} with ${found.label}.`);
    } catch (e) {
      announce(e.message, "error");
    }
    await reload();
  };

  shares.searchAsYouType(search, results, folder, addPerson);

  // A new link: role, optional password and expiry.
  const linkRole = roleSelect(folder, TYPE.link, shares.PERM.read, "Role of a new link", () => {});
  const linkPassword = h("input", { type: "password", autocomplete: "new-password", "aria-label": "Password of a new link", placeholder: "Password (optional)" });
  const linkExpiry = h("input", { type: "date", "aria-label": "Expiry of a new link" });
  const linkExpiryField = h("label", { class: "share-date" }, "until", linkExpiry);
  const createLink = async () => {
    try {
      const made = await shares.create(path, TYPE.link, {
        space_ref: space,
        permissions: linkRole.value,
        password: linkPassword.value,
        expireDate: linkExpiry.value,
      });
      linkPassword.value = "";
      announce(`Created a link to ${entry.name}.`);
      await copyLink(made.url);
    } catch (e) {
      announce(e.message, "error");
    }
    await reload();
  };

  // The panel sits in the dialog's form: Enter in a field must not submit it (closing the
  // panel); in the search it takes the first person found.
  const panel = h("div", {
    class: "share-panel",
    onkeydown: (e) => {
      if (e.key !== "Enter" || e.target.tagName !== "INPUT") return;
      e.preventDefault();
      if (e.target === search) results.querySelector("button")?.click();
      if (e.target === linkPassword) createLink();
    },
  });
  panel.append(
    h("h3", { class: "view-subtitle" }, "People and groups"),
    h("div", { class: "share-add" }, search, newRole, newExpiryField),
    results,
    people,
    h("h3", { class: "view-subtitle" }, "Public links"),
    h(
      "div",
      { class: "share-add" },
      linkRole,
      linkPassword,
      linkExpiryField,
      h("button", { type: "button", class: "button", id: "share-create-link", onclick: createLink }, "Create link"),
    ),
    links,
  );
  await reload();
  const closed = ask(`Share ${entry.name}`, panel, [{ label: "Close", value: "close", primary: true }]);
  search.focus();
  await closed;
}

/** Copies a link's URL, saying so; where the clipboard is refused, shows it to copy by hand. */
async function copyLink(url) {
  try {
    await navigator.clipboard.writeText(url);
    announce("Link copied to the clipboard.");
  } catch {
    announce(`Copy this link: ${url}`);
  }
}

// ------------------------------------------------------------------------- views

const STATE = { 0: "Accepted", 1: "Pending", 2: "Declined" };

/** "Shared with me": each share's item, owner, state, and accept or decline. */
export async function refreshSharedWithMe() {
  let list = [];
  try {
    list = await shares.sharedWithMe();
  } catch (e) {
    if (e.status !== 401) announce(e.message, "error");
  }
  const act = async (fn, s, what) => {
    try {
      await fn(s.id);
      announce(what);
    } catch (e) {
      announce(e.message, "error");
    }
    await refreshSharedWithMe();
  };
  const rows = list.map((s) => {
    const name = s.file_target.split("/").filter(Boolean).pop() || s.path;
    const accepted = s.state === 0;
    const item = accepted
      ? h("a", { href: `#/files${s.path.split("/").map(encodeURIComponent).join("/")}`, class: "file-name" }, icon(s.item_type === "folder" ? "folder" : "file"), h("span", {}, name))
      : h("span", { class: "file-name" }, icon(s.item_type === "folder" ? "folder" : "file"), h("span", {}, name));
    return h(
      "tr",
      { dataset: { name } },
      h("td", { class: "col-name" }, item),
      h("td", { class: "col-location" }, s.displayname_owner || s.uid_owner),
      h("td", { class: "col-modified" }, STATE[s.state] ?? ""),
      h(
        "td",
        { class: "col-actions" },
        s.state !== 0 ? h("button", { type: "button", class: "button", "aria-label": `Accept ${name}`, onclick: () => act(shares.accept, s, `Accepted ${name}.`) }, "Accept") : null,
        s.state !== 2 ? h("button", { type: "button", class: "button quiet", "aria-label": `Decline ${name}`, onclick: () => act(shares.decline, s, `Declined ${name}.`) }, "Decline") : null,
      ),
    );
  });
  document.querySelector("#shared-with-list tbody").replaceChildren(...rows);
  $("shared-with-none").hidden = rows.length > 0;
}

/** "Shared by me": each share and link the user made, with whom, the role, and remove. */
export async function refreshSharedByMe() {
  let list = [];
  try {
    list = await shares.sharedByMe();
  } catch (e) {
    if (e.status !== 401) announce(e.message, "error");
  }
  const rows = list.map((s) => {
    const folder = s.item_type === "folder";
    const link = s.share_type === TYPE.link;
    const who = link ? `Public link${s.name ? ` “${s.name}”` : ""}` : `${s.share_with_displayname || s.share_with}${s.share_type === TYPE.group ? " (group)" : ""}`;
    const path = s.path;
    const name = path.split("/").filter(Boolean).pop() || path;
    return h(
      "tr",
      { dataset: { path, with: link ? s.token : s.share_with } },
      h("td", { class: "col-name" }, h("span", { class: "file-name" }, icon(folder ? "folder" : "file"), h("span", {}, name))),
      h("td", { class: "col-location" }, who),
      h("td", { class: "col-modified" }, shares.roleLabel(folder, s.share_type, s.permissions), s.expiration ? ` · until ${formatDate(Date.parse(day(s.expiration)))}` : ""),
      h(
        "td",
        { class: "col-actions" },
        link ? h("button", { type: "button", class: "button quiet", "aria-label": `Copy the link to ${name}`, onclick: () => copyLink(s.url) }, "Copy") : null,
        h(
          "button",
          {
            type: "button",
            class: "icon-button",
            "aria-label": `Stop sharing ${name} with ${who}`,
            onclick: async () => {
              try {
                await shares.remove(s.id);
                announce(`Stopped sharing ${name} with ${who}.`);
              } catch (e) {
                announce(e.message, "error");
              }
              await refreshSharedByMe();
            },
          },
          icon("delete", 18),
        ),
      ),
    );
  });
  document.querySelector("#shared-by-list tbody").replaceChildren(...rows);
  $("shared-by-none").hidden = rows.length > 0;
}
