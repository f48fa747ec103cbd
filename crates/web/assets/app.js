// arca's web app: the login form, then the user's files and trash. The view is in the URL's
// hash (`#/files/a/b`, `#/trash`), so the browser's back and forward buttons walk the folders
// visited.

import * as api from "./api.js";
import * as dav from "./dav.js";
import { upload, CANCELLED } from "./tus.js";
import * as undo from "./undo.js";
import { h, icon, formatSize, formatDate, announce } from "./ui.js";

const $ = (id) => document.getElementById(id);

const state = {
  path: "/",
  entries: [],
  sort: { key: "name", dir: 1 },
  /** Bumped per listing: a slow answer for a folder left meanwhile is dropped. */
  generation: 0,
  /** Names of the selected entries of the folder shown. */
  selected: new Set(),
};

// ------------------------------------------------------------------------- login

function showLogin(message) {
  $("tokens").hidden = true;
  $("token-new").hidden = true;
  $("files").hidden = true;
  $("quota").hidden = true;
  $("trash").hidden = true;
  $("views").hidden = true;
  $("burst").hidden = true;
  $("who").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  showLoginError(message);
  $("login-user").focus();
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
    await api.logout();
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
  if (!location.hash.startsWith("#/files") && !["#/trash", "#/tokens"].includes(location.hash)) {
    history.replaceState(null, "", "#/files/");
  }
  route();
}

// ------------------------------------------------------------------------- files

/** The folder path in the hash, decoded. */
function pathFromHash() {
  const raw = location.hash.replace(/^#\/files/, "") || "/";
  try {
    return decodeURIComponent(raw) || "/";
  } catch {
    return "/";
  }
}

function hashFor(path) {
  return `#/files${path.split("/").map(encodeURIComponent).join("/") || "/"}`;
}

function go(path) {
  location.hash = hashFor(path);
}

async function route() {
  if (!api.session.current) return;
  const trash = location.hash === "#/trash";
  const tokens = location.hash === "#/tokens";
  const files = !trash && !tokens;
  $("files").hidden = !files;
  $("trash").hidden = !trash;
  $("tokens").hidden = !tokens;
  if (!tokens) $("token-new").hidden = true;
  for (const [id, on] of [["view-files", files], ["view-trash", trash], ["view-tokens", tokens]]) {
    if (on) $(id).setAttribute("aria-current", "page");
    else $(id).removeAttribute("aria-current");
  }
  showBurst();
  showUsage();
  if (trash) {
    await refreshTrash();
  } else if (tokens) {
    await refreshTokens();
  } else {
    const path = pathFromHash();
    if (path !== state.path) state.selected.clear();
    state.path = path;
    await refresh();
  }
  $("main").focus({ preventScroll: true });
}

async function refresh() {
  const generation = ++state.generation;
  const me = api.session.current;
  renderCrumbs();
  try {
    const entries = await dav.list(me.user, state.path);
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
  const items = [h("li", {}, crumb("Home", "/", parts.length === 0))];
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
  if (c === 0) c = a.name.localeCompare(b.name, undefined, { numeric: true, sensitivity: "base" });
  return c * dir;
}

function kind(entry) {
  if (entry.folder) return "folder";
  if (entry.type.startsWith("image/")) return "image";
  if (entry.type.startsWith("text/")) return "text";
  return "file";
}

function renderList() {
  for (const th of document.querySelectorAll("#file-list th[aria-sort], #file-list th")) {
    const key = th.querySelector("button.sort")?.dataset.key;
    if (!key) continue;
    if (key === state.sort.key) th.setAttribute("aria-sort", state.sort.dir > 0 ? "ascending" : "descending");
    else th.removeAttribute("aria-sort");
  }
  const rows = [...state.entries].sort(compare).map(row);
  document.querySelector("#file-list tbody").replaceChildren(...rows);
  $("empty").hidden = rows.length > 0;
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
  const me = api.session.current;
  const path = dav.join(state.path, entry.name);
  const name = entry.folder
    ? h("a", { href: hashFor(path), class: "file-name" }, icon(kind(entry)), h("span", {}, entry.name))
    : h(
        "a",
        { href: dav.url(me.user, path), download: entry.name, class: "file-name" },
        icon(kind(entry)),
        h("span", {}, entry.name),
      );
  const actions = h(
    "td",
    { class: "col-actions" },
    entry.folder
      ? null
      : h(
          "a",
          { class: "icon-button", href: dav.url(me.user, path), download: entry.name, "aria-label": `Download ${entry.name}` },
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
          const me = api.session.current;
          await dav.move(me.user, dav.join(state.path, entry.name), dav.join(state.path, to));
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
  const me = api.session.current;
  try {
    await dav.remove(me.user, dav.join(state.path, entry.name));
    announce(`Moved ${entry.name} to the trash.`);
    await refresh();
  } catch (e) {
    announce(e.message, "error");
  }
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
    await dav.mkcol(api.session.current.user, dav.join(state.path, name));
    toggleNewFolder(false);
    announce(`Created folder ${name}.`);
    await refresh();
  } catch (e) {
    announce(e.message, "error");
  }
}

// ------------------------------------------------------------------------- uploads

/** Uploads at once; the rest wait their turn. */
const PARALLEL_UPLOADS = 3;

/**
 * Uploads `items` ([{file, dir}], `dir` the folder below `folder` a file goes into, "" for
 * `folder` itself) into `folder`: the folders on the way first, then the files a few at a
 * time, each with its progress, speed, time left and a cancel button.
 */
async function uploadAll(items, folder) {
  if (items.length === 0) return;
  const me = api.session.current;
  const dirs = [...new Set(items.map((i) => i.dir).filter(Boolean))].sort();
  try {
    for (const d of dirs) await dav.mkdirs(me.user, dav.join(folder, d));
  } catch (e) {
    return announce(e.message, "error");
  }
  const results = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next;
      next += 1;
      results[i] = await uploadOne(items[i], folder);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL_UPLOADS, items.length) }, worker));
  if (state.path === folder) await refresh();
  const count = (r) => results.filter((x) => x === r).length;
  const [done, failed, cancelled] = [count("done"), count("failed"), count("cancelled")];
  const extra = [failed ? `${failed} failed` : "", cancelled ? `${cancelled} cancelled` : ""].filter(Boolean);
  announce(
    `Uploaded ${done} file${done === 1 ? "" : "s"}${extra.length ? ` (${extra.join(", ")})` : ""}.`,
    failed ? "error" : "info",
  );
}

function seconds(s) {
  if (!Number.isFinite(s)) return "";
  return s < 90 ? `${Math.ceil(s)} s left` : `${Math.ceil(s / 60)} min left`;
}

/** One file's upload with its line in the upload list: "done", "failed" or "cancelled". */
async function uploadOne({ file, dir }, folder) {
  const me = api.session.current;
  const shown = dir ? `${dir}/${file.name}` : file.name;
  const abort = new AbortController();
  const bar = h("progress", { max: file.size || 1, value: 0, "aria-label": `Uploading ${shown}` });
  const label = h("span", { class: "upload-state" }, "0 %");
  const cancel = h("button", { type: "button", class: "button quiet", "aria-label": `Cancel ${shown}`, onclick: () => abort.abort() }, "Cancel");
  const item = h("li", { dataset: { name: shown } }, h("span", { class: "upload-name" }, shown), bar, label, cancel);
  $("uploads").append(item);
  const started = performance.now();
  try {
    await upload(
      file,
      dav.url(me.user, dir ? dav.join(folder, dir) : folder),
      (sent) => {
        bar.value = sent;
        const pct = file.size ? Math.floor((sent * 100) / file.size) : 100;
        const elapsed = (performance.now() - started) / 1000;
        const rate = elapsed > 0.5 ? sent / elapsed : 0;
        label.textContent = rate > 0 ? `${pct} % · ${formatSize(rate)}/s · ${seconds((file.size - sent) / rate)}` : `${pct} %`;
      },
      abort.signal,
    );
    bar.value = file.size || 1;
    label.textContent = "done";
    item.dataset.state = "done";
    return "done";
  } catch (e) {
    const cancelled = e.message === CANCELLED;
    label.textContent = cancelled ? "cancelled" : e.message;
    item.dataset.state = cancelled ? "cancelled" : "failed";
    return cancelled ? "cancelled" : "failed";
  } finally {
    cancel.remove();
  }
}

async function onUpload() {
  const input = $("upload-input");
  const items = [...input.files].map((file) => ({ file, dir: "" }));
  input.value = "";
  await uploadAll(items, state.path);
}

/** A folder chosen in the picker: each file with the folders of its relative path. */
async function onUploadFolder() {
  const input = $("upload-folder-input");
  const items = [...input.files].map((file) => {
    const rel = file.webkitRelativePath || file.name;
    return { file, dir: rel.slice(0, Math.max(0, rel.lastIndexOf("/"))) };
  });
  input.value = "";
  await uploadAll(items, state.path);
}

/**
 * What was dropped: files, and folders walked through (their entries must be taken while the
 * drop event runs, hence the synchronous start).
 */
async function dropped(dt) {
  const entries = [...(dt.items || [])].map((i) => (i.kind === "file" ? i.webkitGetAsEntry?.() : null)).filter(Boolean);
  const files = [...(dt.files || [])];
  if (entries.length === 0) return files.map((file) => ({ file, dir: "" }));
  const out = [];
  const walk = async (entry, dir) => {
    if (entry.isFile) {
      out.push({ file: await new Promise((ok, fail) => entry.file(ok, fail)), dir });
    } else if (entry.isDirectory) {
      const sub = dir ? `${dir}/${entry.name}` : entry.name;
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((ok, fail) => reader.readEntries(ok, fail));
        if (batch.length === 0) break;
        for (const e of batch) await walk(e, sub);
      }
    }
  };
  for (const e of entries) await walk(e, "");
  return out;
}

function wireDrop() {
  const zone = $("files");
  const dragging = (e) => e.dataTransfer && [...e.dataTransfer.types].includes("Files");
  zone.addEventListener("dragover", (e) => {
    if (!dragging(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
    zone.classList.add("drop-target");
  });
  zone.addEventListener("dragleave", (e) => {
    if (!zone.contains(e.relatedTarget)) zone.classList.remove("drop-target");
  });
  zone.addEventListener("drop", async (e) => {
    e.preventDefault();
    zone.classList.remove("drop-target");
    const folder = state.path;
    let items;
    try {
      items = await dropped(e.dataTransfer);
    } catch (err) {
      return announce(`Cannot read what was dropped: ${err.message}`, "error");
    }
    await uploadAll(items, folder);
  });
}

// ------------------------------------------------------------------------- dialog

/**
 * Asks with the page's dialog: `buttons` are [{label, value, primary}]; resolves to the value
 * of the button pressed, or null when the dialog was closed (Escape).
 */
function ask(title, body, buttons) {
  const dialog = $("dialog");
  $("dialog-title").textContent = title;
  $("dialog-body").replaceChildren(...[body].flat().filter(Boolean));
  $("dialog-buttons").replaceChildren(
    ...buttons.map((b) =>
      h("button", { type: "submit", value: b.value, class: `button ${b.primary ? "primary" : "quiet"}` }, b.label),
    ),
  );
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue || null), { once: true });
    dialog.showModal();
  });
}

// ------------------------------------------------------------------------- move, copy, delete

/**
 * A folder chosen in the dialog, starting at the folder shown: folders open on a click, "up"
 * goes to the parent; `exclude` are paths that cannot be entered (a folder being moved).
 * Resolves to the chosen path, or null.
 */
async function pickFolder(title, action, exclude) {
  const me = api.session.current;
  let at = state.path;
  const body = h("div", {});
  const render = async () => {
    let folders = [];
    try {
      folders = (await dav.list(me.user, at)).filter((e) => e.folder && !exclude.has(dav.join(at, e.name)));
    } catch (e) {
      announce(e.message, "error");
    }
    folders.sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true, sensitivity: "base" }));
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
  const me = api.session.current;
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
      let outcome = itself ? "taken" : await dav.transfer(method, me.user, from, to);
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
          outcome = await dav.transfer(method, me.user, from, to, true);
        } else if (choice === "keep") {
          taken ??= new Set((await dav.list(me.user, dest)).map((e) => e.name));
          const free = freeName(name, taken);
          taken.add(free);
          to = dav.join(dest, free);
          outcome = await dav.transfer(method, me.user, from, to);
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
  const me = api.session.current;
  let done = 0;
  try {
    for (const name of names) {
      await dav.remove(me.user, dav.join(state.path, name));
      done += 1;
    }
    announce(`Moved ${done} item${done === 1 ? "" : "s"} to the trash.`);
  } catch (e) {
    announce(e.message, "error");
  }
  state.selected.clear();
  await refresh();
}

// ------------------------------------------------------------------------- versions

async function showVersions(entry) {
  const me = api.session.current;
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
              await undo.restoreVersion(v, me.user, path);
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

// ------------------------------------------------------------------------- trash

const trashState = { items: [] };

async function refreshTrash() {
  const me = api.session.current;
  try {
    trashState.items = await undo.listTrash(me.user);
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

/** A name beside `name` that `taken` does not hold: `a (2).txt`, `a (3).txt`, … */
function freeName(name, taken) {
  const dot = name.lastIndexOf(".");
  const [stem, ext] = dot > 0 ? [name.slice(0, dot), name.slice(dot)] : [name, ""];
  for (let n = 2; ; n += 1) {
    const candidate = `${stem} (${n})${ext}`;
    if (!taken.has(candidate)) return candidate;
  }
}

/**
 * Restores one item where it was. A taken name is never replaced unasked: the dialog offers
 * replace (what is there goes to the trash), keep both (restored beside it) or cancel. A
 * folder it came from that is gone is made again.
 */
async function restoreItem(item) {
  const me = api.session.current;
  let to = `/${item.location}`;
  try {
    let outcome = await undo.restore(me.user, item.key, to);
    if (outcome === "no-parent") {
      await dav.mkdirs(me.user, dav.parent(to));
      outcome = await undo.restore(me.user, item.key, to);
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
        outcome = await undo.restore(me.user, item.key, to, true);
      } else if (choice === "keep") {
        const taken = new Set((await dav.list(me.user, dav.parent(to))).map((e) => e.name));
        to = dav.join(dav.parent(to), freeName(item.name, taken));
        outcome = await undo.restore(me.user, item.key, to);
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
    await undo.purge(api.session.current.user, item.key);
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
    await undo.emptyTrash(api.session.current.user);
    announce("The trash is empty.");
  } catch (e) {
    announce(e.message, "error");
  }
  await refreshTrash();
}

// ------------------------------------------------------------------------- app passwords

async function refreshTokens() {
  let tokens = [];
  try {
    tokens = await api.appTokens();
  } catch (e) {
    if (e.status !== 401) announce(e.message, "error");
  }
  tokens.sort((a, b) => (b.created_date || "").localeCompare(a.created_date || ""));
  const date = (s) => (s ? formatDate(Date.parse(s)) : "never");
  const rows = tokens.map((t) =>
    h(
      "tr",
      { dataset: { id: t.id } },
      h("td", { class: "col-name" }, t.label),
      h("td", { class: "col-modified" }, date(t.created_date)),
      h("td", { class: "col-modified" }, date(t.expiration_date)),
      h(
        "td",
        { class: "col-actions" },
        h("button", { type: "button", class: "button", "aria-label": `Revoke ${t.label}`, onclick: () => revokeToken(t) }, "Revoke"),
      ),
    ),
  );
  document.querySelector("#token-list tbody").replaceChildren(...rows);
}

async function onCreateToken(event) {
  event.preventDefault();
  const label = $("token-label").value.trim();
  if (!label) return;
  try {
    const secret = await api.createAppToken(label, $("token-expiry").value);
    $("token-secret").value = secret;
    $("token-new").hidden = false;
    $("token-label").value = "";
    announce(`Created an app password for ${label}.`);
    $("token-secret").focus();
    $("token-secret").select();
  } catch (e) {
    announce(e.message, "error");
  }
  await refreshTokens();
}

async function onCopyToken() {
  const secret = $("token-secret").value;
  try {
    await navigator.clipboard.writeText(secret);
    announce("Copied.");
  } catch {
    // No clipboard access (an insecure origin): the text is selected for Ctrl+C instead.
    $("token-secret").select();
    announce("Press Ctrl+C to copy the selected app password.");
  }
}

async function revokeToken(t) {
  const choice = await ask(`Revoke the app password for “${t.label}”?`, h("p", {}, "What logs in with it stops working at once."), [
    { label: "Revoke", value: "revoke", primary: true },
    { label: "Cancel", value: "cancel" },
  ]);
  if (choice !== "revoke") return;
  try {
    await api.revokeAppToken(t.id);
    announce(`Revoked the app password for ${t.label}.`);
  } catch (e) {
    announce(e.message, "error");
  }
  await refreshTokens();
}

// ------------------------------------------------------------------------- usage

/** What the space uses, under the list: files against the quota, then trash and versions. */
async function showUsage() {
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
async function showBurst() {
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
    await route();
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

// ------------------------------------------------------------------------- start

function wire() {
  $("login-form").addEventListener("submit", onLogin);
  $("logout").addEventListener("click", onLogout);
  $("new-folder").addEventListener("click", () => toggleNewFolder($("new-folder-form").hidden));
  $("new-folder-cancel").addEventListener("click", () => toggleNewFolder(false));
  $("new-folder-form").addEventListener("submit", onNewFolder);
  $("upload-input").addEventListener("change", onUpload);
  $("upload-folder-input").addEventListener("change", onUploadFolder);
  wireDrop();
  $("trash-empty").addEventListener("click", onEmptyTrash);
  $("token-form").addEventListener("submit", onCreateToken);
  $("token-copy").addEventListener("click", onCopyToken);
  $("select-all").addEventListener("change", onSelectAll);
  $("sel-move").addEventListener("click", () => onTransfer("MOVE"));
  $("sel-copy").addEventListener("click", () => onTransfer("COPY"));
  $("sel-delete").addEventListener("click", onDeleteSelected);
  $("burst-restore").addEventListener("click", onBurstRestore);
  $("burst-dismiss").addEventListener("click", onBurstDismiss);
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
  try {
    const me = await api.whoami();
    if (me) enter();
    else showLogin("");
  } catch (e) {
    showLogin(e.message);
  }
  document.body.dataset.ready = "true";
}

start();
