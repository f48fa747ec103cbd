// arca's web app: the login form, then the user's files and trash. The view is in the URL's
// hash (`#/files/a/b`, `#/trash`), so the browser's back and forward buttons walk the folders
// visited.

import * as api from "./api.js";
import * as dav from "./dav.js";
import * as undo from "./undo.js";
import { ask } from "./dialog.js";
import { wireUploads, wireResume, offerResume } from "./uploads.js";
import { wireTrash, refreshTrash, showBurst, showUsage } from "./view-trash.js";
import { wireTokens, refreshTokens } from "./view-tokens.js";
import { showShare, refreshSharedWithMe, refreshSharedByMe } from "./view-share.js";
import { wireAdmin, refreshAdmin } from "./view-admin.js";
import { wireSpaces, refreshSpaces } from "./view-spaces.js";
import { h, icon, kind, formatSize, formatDate, announce, byName } from "./ui.js";
import { Rows } from "./rows.js";

const $ = (id) => document.getElementById(id);

/** The file list's rows: only those near the window are in the page (rows.js). */
let list = null;

const state = {
  path: "/",
  entries: [],
  sort: { key: "name", dir: 1 },
  /** Bumped per listing: a slow answer for a folder left meanwhile is dropped. */
  generation: 0,
  /** Names of the selected entries of the folder shown. */
  selected: new Set(),
  /** The project space shown ({space, name}), or null for the user's own files. */
  root: null,
};

/** Project spaces' names by id, from the last Spaces listing (for the crumbs). */
const spaceNames = new Map();

// ------------------------------------------------------------------------- login

function showLogin(message) {
  for (const v of ["files", ...Object.keys(VIEWS)]) $(v).hidden = true;
  $("token-new").hidden = true;
  $("quota").hidden = true;
  $("views").hidden = true;
  $("burst").hidden = true;
  $("resume").hidden = true;
  $("who").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  showProvider();
  // Not known yet when this page began logged in: the session endpoint tells, without one.
  if (api.provider.current === undefined) api.whoami().then(showProvider, () => {});
  showLoginError(message);
  $("login-user").focus();
}

/** "Log in with …" when an OIDC provider is configured. */
function showProvider() {
  const oidc = api.provider.current;
  $("login-oidc").hidden = !oidc;
  if (oidc) {
    $("login-oidc-link").textContent = `Log in with ${oidc.name}`;
    $("login-oidc-link").href = oidc.url;
  }
}

/** What the provider's login came back with (`/?login=WORD`, set by the proxy): a fixed
 * message per word, so no text from a URL is ever shown. */
const OIDC_OUTCOMES = {
  denied: "The sign-in was cancelled at the identity provider.",
  expired: "The sign-in took too long: try again.",
  failed: "The sign-in could not be completed: try again.",
  unavailable: "The identity provider cannot be reached: try again later.",
  throttled: "Too many failed logins: try again later.",
  refused: "This account may not use arca: ask your administrator.",
};

function oidcOutcome() {
  const word = new URLSearchParams(location.search).get("login");
  if (word === null) return "";
  history.replaceState(null, "", "/" + location.hash);
  return Object.hasOwn(OIDC_OUTCOMES, word) ? OIDC_OUTCOMES[word] : OIDC_OUTCOMES.failed;
}

function showLoginError(message) {
  const el = $("login-error");
  el.textContent = message || "";
  el.hidden = !message;
}

async function onLogin(event) {
  event.preventDefault();
  const user = $("login-user").value.trim();
  const password = $("login-password").value;
  if (!user || !password) {
    showLoginError("Enter your user name and password.");
    return;
  }
  const button = $("login-submit");
  button.disabled = true;
  try {
    await api.login(user, password);
    $("login-password").value = "";
    showLoginError("");
    enter();
  } catch (e) {
    if (e.status === 429) {
      showLoginError(`Too many failed logins: try again in ${e.retryAfter ?? "a few"} s.`);
    } else if (e.status === 401) {
      showLoginError("Wrong user name or password.");
    } else {
      showLoginError(e.message || "Login failed.");
    }
  } finally {
    button.disabled = false;
  }
}

async function onLogout() {
  try {
    const provider = await api.logout();
    // Logged in through the provider: its session ends too, and it sends the browser back.
    if (provider) return location.assign(provider);
  } catch (e) {
    announce(e.message, "error");
  }
  history.replaceState(null, "", "/");
  showLogin("");
}

/** Logged in: the header, then the folder the URL names. */
function enter() {
  const me = api.session.current;
  $("login").hidden = true;
  $("files").hidden = false;
  $("who").textContent = me.displayName || me.user;
  $("who").hidden = false;
  $("logout").hidden = false;
  $("views").hidden = false;
  $("view-admin").hidden = !me.admin;
  if (!location.hash.startsWith("#/files") && !location.hash.startsWith("#/spaces/") && !Object.values(VIEWS).includes(location.hash)) {
    history.replaceState(null, "", "#/files/");
  }
  route();
}

// ------------------------------------------------------------------------- files

/**
 * Where the files view is: the user's files (`#/files/a/b`) or a project space's
 * (`#/spaces/{id}/a/b`). Sets `state.root` and answers the folder path, decoded.
 */
function pathFromHash() {
  const space = location.hash.match(/^#\/spaces\/([^/]+)(\/.*)?$/);
  let raw;
  if (space) {
    const id = decodeURIComponent(space[1]);
    if (state.root?.space !== id) state.root = { space: id, name: spaceNames.get(id) || "Space" };
    raw = space[2] || "/";
  } else {
    state.root = null;
    raw = location.hash.replace(/^#\/files/, "") || "/";
  }
  try {
    return decodeURIComponent(raw) || "/";
  } catch {
    return "/";
  }
}

/** The files view's root for WebDAV (dav.url): the user's name, or {space}. */
function root() {
  return state.root ?? api.session.current.user;
}

function hashFor(path) {
  const rest = path.split("/").map(encodeURIComponent).join("/") || "/";
  return state.root ? `#/spaces/${encodeURIComponent(state.root.space)}${rest}` : `#/files${rest}`;
}

function go(path) {
  location.hash = hashFor(path);
}

/** The views besides the files, by section id: the hash that shows each. */
const VIEWS = {
  trash: "#/trash",
  tokens: "#/tokens",
  "shared-with": "#/shared-with-me",
  "shared-by": "#/shared-by-me",
  admin: "#/admin",
  spaces: "#/spaces",
};
const REFRESH = {
  trash: refreshTrash,
  tokens: refreshTokens,
  "shared-with": refreshSharedWithMe,
  "shared-by": refreshSharedByMe,
  admin: refreshAdmin,
  spaces: () => refreshSpaces(spaceNames),
};

async function route() {
  if (!api.session.current) return;
  let view = Object.keys(VIEWS).find((v) => VIEWS[v] === location.hash) || "files";
  // The Users view is for admins (the server refuses its changes to anyone else).
  if (view === "admin" && !api.session.current.admin) view = "files";
  // A project space's files are under the Spaces tab.
  const current = view === "files" && location.hash.startsWith("#/spaces/") ? "spaces" : view;
  for (const v of ["files", ...Object.keys(VIEWS)]) {
    $(v).hidden = v !== view;
    const tab = $(`view-${v}`);
    if (v === current) tab.setAttribute("aria-current", "page");
    else tab.removeAttribute("aria-current");
  }
  if (view !== "tokens") $("token-new").hidden = true;
  showBurst();
  showUsage();
  offerResume($);
  if (view !== "files") {
    await REFRESH[view]();
  } else {
    const before = state.root?.space;
    const path = pathFromHash();
    if (path !== state.path || before !== state.root?.space) state.selected.clear();
    state.path = path;
    await refresh();
  }
  $("main").focus({ preventScroll: true });
}

async function refresh() {
  const generation = ++state.generation;
  renderCrumbs();
  try {
    const entries = await dav.list(root(), state.path);
    if (generation !== state.generation) return;
    state.entries = entries;
    const names = new Set(entries.map((e) => e.name));
    for (const n of [...state.selected]) if (!names.has(n)) state.selected.delete(n);
    renderList();
  } catch (e) {
    if (generation !== state.generation || e.status === 401) return;
    state.entries = [];
    renderList();
    announce(e.message, "error");
  }
}

function renderCrumbs() {
  const parts = state.path.split("/").filter(Boolean);
  const items = [h("li", {}, crumb(state.root ? state.root.name : "Home", "/", parts.length === 0))];
  parts.forEach((name, i) => {
    const path = `/${parts.slice(0, i + 1).join("/")}`;
    items.push(h("li", {}, crumb(name, path, i === parts.length - 1)));
  });
  $("crumbs").replaceChildren(h("ol", {}, items));
}

function crumb(label, path, current) {
  return current
    ? h("span", { "aria-current": "page" }, label)
    : h("a", { href: hashFor(path) }, label);
}

function compare(a, b) {
  // Folders first whatever the order, as file managers do.
  if (a.folder !== b.folder) return a.folder ? -1 : 1;
  const { key, dir } = state.sort;
  let c = 0;
  if (key === "size") c = (a.size ?? -1) - (b.size ?? -1);
  else if (key === "modified") c = (a.modified ?? 0) - (b.modified ?? 0);
  if (c === 0) c = byName(a.name, b.name);
  return c * dir;
}

function renderList() {
  for (const th of document.querySelectorAll("#file-list th[aria-sort], #file-list th")) {
    const key = th.querySelector("button.sort")?.dataset.key;
    if (!key) continue;
    if (key === state.sort.key) th.setAttribute("aria-sort", state.sort.dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
  const sorted = [...state.entries].sort(compare);
  list.set(sorted);
  $("empty").hidden = sorted.length > 0;
  renderSelection();
}

/** The toolbar's selection actions and the select-all box, from `state.selected`. */
function renderSelection() {
  const n = state.selected.size;
  $("selection").hidden = n === 0;
  $("selection-count").textContent = `${n} selected`;
  const all = $("select-all");
  all.checked = n > 0 && n === state.entries.length;
  all.indeterminate = n > 0 && n < state.entries.length;
}

function onSelectAll() {
  if ($("select-all").checked) for (const e of state.entries) state.selected.add(e.name);
  else state.selected.clear();
  renderList();
}

function row(entry) {
  const path = dav.join(state.path, entry.name);
  const name = entry.folder
    ? h("a", { href: hashFor(path), class: "file-name" }, icon(kind(entry)), h("span", {}, entry.name))
    : h(
        "a",
        { href: dav.url(root(), path), download: entry.name, class: "file-name" },
        icon(kind(entry)),
        h("span", {}, entry.name),
      );
  const actions = h(
    "td",
    { class: "col-actions" },
    h(
      "a",
      {
        class: "icon-button",
        href: entry.folder ? archiveUrl([entry]) : dav.url(root(), path),
        download: entry.folder ? `${entry.name}.zip` : entry.name,
        "aria-label": entry.folder ? `Download ${entry.name} as a zip` : `Download ${entry.name}`,
      },
      icon("download", 18),
    ),
    entry.folder
      ? null
      : h(
          "button",
          { type: "button", class: "icon-button", "aria-label": `Versions of ${entry.name}`, onclick: () => showVersions(entry) },
          icon("versions", 18),
        ),
    h(
      "button",
      { type: "button", class: "icon-button", "aria-label": `Share ${entry.name}`, onclick: () => showShare(entry, path, state.root?.space) },
      icon("share", 18),
    ),
    h(
      "button",
      { type: "button", class: "icon-button", "aria-label": `Rename ${entry.name}`, onclick: () => startRename(entry, tr) },
      icon("rename", 18),
    ),
    h(
      "button",
      { type: "button", class: "icon-button", "aria-label": `Delete ${entry.name}`, onclick: () => remove(entry) },
      icon("delete", 18),
    ),
  );
  const select = h("input", {
    type: "checkbox",
    class: "select",
    "aria-label": `Select ${entry.name}`,
    checked: state.selected.has(entry.name),
    onchange: (e) => {
      if (e.target.checked) state.selected.add(entry.name);
      else state.selected.delete(entry.name);
      renderSelection();
    },
  });
  const tr = h(
    "tr",
    { dataset: { name: entry.name } },
    h("td", { class: "col-select" }, select),
    h("td", { class: "col-name" }, name),
    h("td", { class: "col-size" }, formatSize(entry.size)),
    h("td", { class: "col-modified" }, formatDate(entry.modified)),
    actions,
  );
  return tr;
}

/** Where the server streams `entries` (files and folders) as one zip. */
function archiveUrl(entries) {
  return `/archiver?${entries.map((e) => `id=${encodeURIComponent(e.id)}`).join("&")}`;
}

/** The selection as one zip: the browser downloads it like any file. */
function onDownloadSelected() {
  const chosen = state.entries.filter((e) => state.selected.has(e.name));
  if (chosen.length === 0) return;
  const a = h("a", { href: archiveUrl(chosen), download: chosen.length === 1 ? `${chosen[0].name}.zip` : "download.zip" });
  document.body.append(a);
  a.click();
  a.remove();
}

/** Rename in place: the name cell becomes a small form. */
function startRename(entry, tr) {
  const cell = tr.querySelector(".col-name");
  const before = [...cell.childNodes];
  const input = h("input", { value: entry.name, "aria-label": `New name for ${entry.name}`, class: "rename-input" });
  const cancel = () => {
    cell.replaceChildren(...before);
    cell.querySelector("a")?.focus();
  };
  const form = h(
    "form",
    {
      class: "rename",
      onsubmit: async (e) => {
        e.preventDefault();
        const to = input.value.trim();
        if (!to || to === entry.name) return cancel();
        if (to.includes("/")) return announce("A name cannot contain /.", "error");
        try {
          await dav.move(root(), dav.join(state.path, entry.name), dav.join(state.path, to));
          announce(`Renamed ${entry.name} to ${to}.`);
          await refresh();
        } catch (err) {
          announce(err.message, "error");
        }
      },
    },
    input,
    h("button", { type: "submit", class: "button primary" }, "Save"),
    h("button", { type: "button", class: "button quiet", onclick: cancel }, "Cancel"),
  );
  input.addEventListener("keydown", (e) => {
    if (e.key === "Escape") cancel();
  });
  cell.replaceChildren(form);
  input.focus();
  input.select();
}

async function remove(entry) {
  try {
    await dav.remove(root(), dav.join(state.path, entry.name));
    announce(`Moved ${entry.name} to the trash.`);
    await afterRemoval();
  } catch (e) {
    announce(e.message, "error");
  }
}

/**
 * Once a removal is done: the folder, and the trash if that is what is shown now. A big
 * folder's delete can outlast the person's patience: whoever opened the trash meanwhile
 * must see the item arrive, not a trash listed before it got there.
 */
async function afterRemoval() {
  if (!$("trash").hidden) await refreshTrash();
  await refresh();
}

function toggleNewFolder(show) {
  $("new-folder-form").hidden = !show;
  if (show) {
    $("new-folder-name").value = "";
    $("new-folder-name").focus();
  } else {
    $("new-folder").focus();
  }
}

async function onNewFolder(event) {
  event.preventDefault();
  const name = $("new-folder-name").value.trim();
  if (!name) return;
  if (name.includes("/")) return announce("A name cannot contain /.", "error");
  try {
    await dav.mkcol(root(), dav.join(state.path, name));
    toggleNewFolder(false);
    announce(`Created folder ${name}.`);
    await refresh();
  } catch (e) {
    announce(e.message, "error");
  }
}

// ------------------------------------------------------------------------- move, copy, delete

/**
 * A folder chosen in the dialog, starting at the folder shown: folders open on a click, "up"
 * goes to the parent; `exclude` are paths that cannot be entered (a folder being moved).
 * Resolves to the chosen path, or null.
 */
async function pickFolder(title, action, exclude) {
  let at = state.path;
  const body = h("div", {});
  const render = async () => {
    let folders = [];
    try {
      folders = (await dav.list(root(), at)).filter((e) => e.folder && !exclude.has(dav.join(at, e.name)));
    } catch (e) {
      announce(e.message, "error");
    }
    folders.sort((a, b) => byName(a.name, b.name));
    const open = (path) => () => {
      at = path;
      render();
    };
    const items = [];
    if (at !== "/") {
      items.push(h("li", {}, h("button", { type: "button", onclick: open(dav.parent(at)) }, icon("folder"), h("span", {}, "Up one folder"))));
    }
    for (const f of folders) {
      items.push(
        h("li", {}, h("button", { type: "button", "aria-label": `Open ${f.name}`, onclick: open(dav.join(at, f.name)) }, icon("folder"), h("span", {}, f.name))),
      );
    }
    body.replaceChildren(
      h("p", { class: "picker-path", id: "picker-path" }, `Into: ${at}`),
      h("ul", { class: "picker", "aria-label": "Folders" }, items),
    );
  };
  await render();
  const choice = await ask(title, body, [
    { label: action, value: "here", primary: true },
    { label: "Cancel", value: "cancel" },
  ]);
  return choice === "here" ? at : null;
}

/**
 * Moves or copies the selection into a folder the user picks. A name taken there is never
 * replaced unasked: for each, the dialog offers replace (the server keeps a replaced file's
 * content as a version, a replaced folder in the trash), keep both (beside it as `name (2)`)
 * or skip.
 */
async function onTransfer(method) {
  const names = [...state.selected].sort();
  if (names.length === 0) return;
  const verb = method === "MOVE" ? "Move" : "Copy";
  const what = names.length === 1 ? `“${names[0]}”` : `${names.length} items`;
  const exclude = new Set(names.map((n) => dav.join(state.path, n)));
  const dest = await pickFolder(`${verb} ${what}`, `${verb} here`, exclude);
  if (dest === null) return;
  if (method === "MOVE" && dest === state.path) return announce("They are in this folder already.");
  let done = 0;
  let skipped = 0;
  let taken = null;
  for (const name of names) {
    const from = dav.join(state.path, name);
    let to = dav.join(dest, name);
    try {
      // A copy into its own folder is a duplicate: the name is taken by the item itself,
      // which cannot replace itself.
      const itself = from === to;
      let outcome = itself ? "taken" : await dav.transfer(method, root(), from, to);
      if (outcome === "taken") {
        const choice = await ask(
          `“${name}” exists in ${dest}`,
          h("p", {}, itself
            ? "Keep both, or skip it?"
            : "Replace it (a file's replaced content stays among its versions, a folder goes to the trash), keep both, or skip this one?"),
          [
            itself ? null : { label: "Replace", value: "replace" },
            { label: "Keep both", value: "keep", primary: true },
            { label: "Skip", value: "skip" },
          ].filter(Boolean),
        );
        if (choice === "replace") {
          outcome = await dav.transfer(method, root(), from, to, true);
        } else if (choice === "keep") {
          taken ??= new Set((await dav.list(root(), dest)).map((e) => e.name));
          const free = dav.freeName(name, taken);
          taken.add(free);
          to = dav.join(dest, free);
          outcome = await dav.transfer(method, root(), from, to);
        } else {
          outcome = "skipped";
        }
      }
      if (outcome === "done") done += 1;
      else skipped += 1;
    } catch (e) {
      announce(e.message, "error");
      await refresh();
      return;
    }
  }
  state.selected.clear();
  const past = method === "MOVE" ? "Moved" : "Copied";
  announce(`${past} ${done} item${done === 1 ? "" : "s"} to ${dest}${skipped ? `; skipped ${skipped}` : ""}.`);
  await refresh();
}

/** Deletes the selection (to the trash, from where it can come back). */
async function onDeleteSelected() {
  const names = [...state.selected];
  let done = 0;
  try {
    for (const name of names) {
      await dav.remove(root(), dav.join(state.path, name));
      done += 1;
    }
    announce(`Moved ${done} item${done === 1 ? "" : "s"} to the trash.`);
  } catch (e) {
    announce(e.message, "error");
  }
  state.selected.clear();
  await afterRemoval();
}

// ------------------------------------------------------------------------- versions

async function showVersions(entry) {
  const path = dav.join(state.path, entry.name);
  let versions;
  try {
    versions = await undo.listVersions(entry.id);
  } catch (e) {
    return announce(e.message, "error");
  }
  const items = versions.map((v) =>
    h(
      "li",
      { dataset: { key: v.key } },
      h("span", { class: "when" }, formatDate(v.modified)),
      h("span", { class: "size" }, formatSize(v.size)),
      h("a", { class: "button quiet", href: v.href, download: entry.name }, "Download"),
      h(
        "button",
        {
          type: "button",
          class: "button",
          onclick: async () => {
            $("dialog").close();
            try {
              await undo.restoreVersion(v, root(), path);
              announce(`Restored the version of ${entry.name} from ${formatDate(v.modified)}.`);
              await refresh();
            } catch (e) {
              announce(e.message, "error");
            }
          },
        },
        "Restore",
      ),
    ),
  );
  const body = items.length
    ? h("ul", { class: "versions", "aria-label": `Versions of ${entry.name}` }, items)
    : h("p", {}, "No earlier versions.");
  await ask(`Versions of ${entry.name}`, body, [{ label: "Close", value: "close" }]);
}

// ------------------------------------------------------------------------- start

function wire() {
  list = new Rows($("file-list"), row, ".file-name");
  // Space on a row's name selects it, as in file managers (Enter opens it).
  $("file-list").tBodies[0].addEventListener("keydown", (e) => {
    if (e.key !== " " || !e.target.classList.contains("file-name")) return;
    e.preventDefault();
    e.target.closest("tr")?.querySelector("input.select")?.click();
  });
  $("login-form").addEventListener("submit", onLogin);
  $("logout").addEventListener("click", onLogout);
  $("new-folder").addEventListener("click", () => toggleNewFolder($("new-folder-form").hidden));
  $("new-folder-cancel").addEventListener("click", () => toggleNewFolder(false));
  $("new-folder-form").addEventListener("submit", onNewFolder);
  wireUploads({
    folder: () => state.path,
    refresh,
    url: (path) => dav.url(root(), path),
    zone: $("files"),
    list: $("uploads"),
    files: $("upload-input"),
    folders: $("upload-folder-input"),
    // Kept in localStorage while under way (as this user's), to go on after a reload.
    persist: () => api.session.current?.user,
  });
  wireResume($);
  wireTrash(route);
  wireTokens();
  wireAdmin();
  wireSpaces();
  window.addEventListener("arca:spaces-changed", () => refreshSpaces(spaceNames));
  $("select-all").addEventListener("change", onSelectAll);
  $("sel-move").addEventListener("click", () => onTransfer("MOVE"));
  $("sel-copy").addEventListener("click", () => onTransfer("COPY"));
  $("sel-delete").addEventListener("click", onDeleteSelected);
  $("sel-download").addEventListener("click", onDownloadSelected);

  for (const b of document.querySelectorAll("button.sort")) {
    b.addEventListener("click", () => {
      const key = b.dataset.key;
      state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 };
      renderList();
    });
  }
  window.addEventListener("hashchange", route);
  window.addEventListener("arca:session-ended", () => showLogin("Your session ended: log in again."));
}

async function start() {
  wire();
  const outcome = oidcOutcome();
  try {
    const me = await api.whoami();
    if (me) enter();
    else showLogin(outcome);
  } catch (e) {
    showLogin(e.message);
  }
  document.body.dataset.ready = "true";
}

start();
