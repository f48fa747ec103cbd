// The Trash view (restore where it was, delete for good, empty), the banner of a flagged mass
// delete with its one-click restore, and the space's usage under the lists.

import * as api from "./api.js";
import * as dav from "./dav.js";
import * as undo from "./undo.js";
import { ask } from "./dialog.js";
import { h, icon, formatSize, formatDate, announce } from "./ui.js";
import { managedSpaces } from "./view-spaces.js";

const $ = (id) => document.getElementById(id);

/** What shows the current view again once a burst was restored (the app's router). */
let onChange = async () => {};

/** `owner`: whose trash is shown (the user's name, or {space} of a space they manage). */
const trashState = { items: [], owner: null };

/** The trash shown: the user's own, or that of the space picked above the list. */
function owner() {
  const picked = $("trash-of").value;
  return picked ? { space: picked } : api.session.current.user;
}

/** The spaces whose trash the user may see (those they manage), as choices above the list. */
async function offerSpaces() {
  let spaces = [];
  try {
    spaces = await managedSpaces();
  } catch {
    // Only the user's own trash is offered.
  }
  const select = $("trash-of");
  const picked = select.value;
  select.replaceChildren(h("option", { value: "" }, "My files"), ...spaces.map((d) => h("option", { value: d.id }, d.name)));
  select.value = spaces.some((d) => d.id === picked) ? picked : "";
  $("trash-of-field").hidden = spaces.length === 0;
}

export async function refreshTrash() {
  await offerSpaces();
  trashState.owner = owner();
  try {
    trashState.items = await undo.listTrash(trashState.owner);
  } catch (e) {
    trashState.items = [];
    if (e.status !== 401) announce(e.message, "error");
  }
  trashState.items.sort((a, b) => (b.deleted ?? 0) - (a.deleted ?? 0));
  const rows = trashState.items.map(trashRow);
  document.querySelector("#trash-list tbody").replaceChildren(...rows);
  $("trash-none").hidden = rows.length > 0;
  $("trash-empty").disabled = rows.length === 0;
  showUsage();
}

function trashRow(item) {
  const from = `/${item.location.slice(0, Math.max(0, item.location.lastIndexOf("/")))}`;
  return h(
    "tr",
    { dataset: { key: item.key } },
    h("td", { class: "col-name" }, h("span", { class: "file-name" }, icon(item.folder ? "folder" : "file"), h("span", {}, item.name))),
    h("td", { class: "col-location" }, from),
    h("td", { class: "col-modified" }, formatDate(item.deleted)),
    h("td", { class: "col-size" }, formatSize(item.size)),
    h(
      "td",
      { class: "col-actions" },
      h("button", { type: "button", class: "button", "aria-label": `Restore ${item.name}`, onclick: () => restoreItem(item) }, "Restore"),
      h(
        "button",
        { type: "button", class: "icon-button", "aria-label": `Delete ${item.name} for good`, onclick: () => purgeItem(item) },
        icon("delete", 18),
      ),
    ),
  );
}

/**
 * Restores one item where it was. A taken name is never replaced unasked: the dialog offers
 * replace (what is there goes to the trash), keep both (restored beside it) or cancel. A
 * folder it came from that is gone is made again.
 */
async function restoreItem(item) {
  const from = trashState.owner;
  let to = `/${item.location}`;
  try {
    let outcome = await undo.restore(from, item.key, to);
    if (outcome === "no-parent") {
      await dav.mkdirs(from, dav.parent(to));
      outcome = await undo.restore(from, item.key, to);
    }
    if (outcome === "taken") {
      const choice = await ask(
        `“${item.name}” exists`,
        h("p", {}, `${dav.parent(to)} already holds an item named “${item.name}”.`),
        [
          { label: "Replace", value: "replace" },
          { label: "Keep both", value: "keep", primary: true },
          { label: "Cancel", value: "cancel" },
        ],
      );
      if (choice === "replace") {
        outcome = await undo.restore(from, item.key, to, true);
      } else if (choice === "keep") {
        const taken = new Set((await dav.list(from, dav.parent(to))).map((e) => e.name));
        to = dav.join(dav.parent(to), dav.freeName(item.name, taken));
        outcome = await undo.restore(from, item.key, to);
      } else {
        return announce(`${item.name} stays in the trash.`);
      }
    }
    if (outcome !== "done") throw new Error(`Cannot restore ${item.name}: the name is taken.`);
    announce(`Restored ${item.name} to ${to}.`);
  } catch (e) {
    announce(e.message, "error");
  }
  await refreshTrash();
}

async function purgeItem(item) {
  const choice = await ask(`Delete “${item.name}” for good?`, h("p", {}, "It cannot be restored afterwards."), [
    { label: "Delete for good", value: "purge", primary: true },
    { label: "Cancel", value: "cancel" },
  ]);
  if (choice !== "purge") return;
  try {
    await undo.purge(trashState.owner, item.key);
    announce(`Deleted ${item.name} for good.`);
  } catch (e) {
    announce(e.message, "error");
  }
  await refreshTrash();
}

async function onEmptyTrash() {
  const n = trashState.items.length;
  const choice = await ask("Empty the trash?", h("p", {}, `${n} item${n === 1 ? "" : "s"} will be deleted for good.`), [
    { label: "Empty trash", value: "empty", primary: true },
    { label: "Cancel", value: "cancel" },
  ]);
  if (choice !== "empty") return;
  try {
    await undo.emptyTrash(trashState.owner);
    announce("The trash is empty.");
  } catch (e) {
    announce(e.message, "error");
  }
  await refreshTrash();
}

// ------------------------------------------------------------------------- usage

/** What the space uses, under the list: files against the quota, then trash and versions. */
export async function showUsage() {
  let q;
  try {
    q = await undo.usage();
  } catch {
    q = null;
  }
  $("quota").hidden = !q;
  if (!q) return;
  const plural = (n, one) => `${n} ${one}${n === 1 ? "" : "s"}`;
  const limited = q.total > 0;
  const meter = $("quota-meter");
  meter.hidden = !limited;
  if (limited) meter.value = Math.min(1, q.used / q.total);
  $("quota-text").textContent =
    `${formatSize(q.used)} used${limited ? ` of ${formatSize(q.total)}` : ""} · ` +
    `trash ${formatSize(q.trash)} (${plural(q.trashItems, "item")}) · ` +
    `versions ${formatSize(q.versions)} (${plural(q.versionCount, "version")})`;
}

// ------------------------------------------------------------------------- mass deletes

/** Bursts the user dismissed in this browser (a restored one has nothing left in the trash). */
const SETTLED = "arca.bursts.settled";

function settled() {
  try {
    return new Set(JSON.parse(localStorage.getItem(SETTLED) || "[]"));
  } catch {
    return new Set();
  }
}

function settle(id) {
  const ids = [...settled(), id].slice(-50);
  localStorage.setItem(SETTLED, JSON.stringify(ids));
}

/** The newest flagged mass delete still in the trash and not dismissed, as a banner. */
export async function showBurst() {
  let burst;
  try {
    const done = settled();
    burst = (await undo.bursts()).find((b) => b.in_trash > 0 && !done.has(b.id));
  } catch {
    burst = undefined;
  }
  const banner = $("burst");
  if (!burst) {
    banner.hidden = true;
    return;
  }
  const who = burst.client ? `${burst.client} (${burst.user})` : burst.user;
  $("burst-text").textContent =
    `${burst.files} file${burst.files === 1 ? " was" : "s were"} deleted by ${who} ` +
    `between ${formatDate(burst.first * 1000)} and ${formatDate(burst.last * 1000)}.`;
  banner.dataset.id = burst.id;
  banner.hidden = false;
}

async function onBurstRestore() {
  const banner = $("burst");
  const id = banner.dataset.id;
  $("burst-restore").disabled = true;
  try {
    const t = await undo.restoreBurst(id);
    banner.hidden = true;
    const renamed = t.renamed ? `, ${t.renamed} beside a name taken meanwhile` : "";
    announce(`Restored ${t.restored} item${t.restored === 1 ? "" : "s"} (${t.files} files)${renamed}.`);
    await onChange();
  } catch (e) {
    announce(e.message, "error");
  } finally {
    $("burst-restore").disabled = false;
  }
}

function onBurstDismiss() {
  settle($("burst").dataset.id);
  $("burst").hidden = true;
}

/** Wires the view's controls; `changed` shows the current view again. */
export function wireTrash(changed) {
  onChange = changed;
  $("trash-empty").addEventListener("click", onEmptyTrash);
  $("trash-of").addEventListener("change", refreshTrash);
  $("burst-restore").addEventListener("click", onBurstRestore);
  $("burst-dismiss").addEventListener("click", onBurstDismiss);
}
