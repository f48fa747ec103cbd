// The page of a public link, `/s/{token}`: what a recipient sees, often the only page of arca
// they ever load. It asks the server what the link is (GET /s/{token} as JSON), then shows a
// password form, a file (preview and download), a folder (browsable; uploads, new folders and
// deletes when the link allows them) or, for an upload-only link, a drop zone that lists
// nothing. The link's files are reached over its WebDAV root, /remote.php/dav/public-files/.
//
// A protected link's password is sent once; the server answers with an access token that
// stands for it (for hours, until the password changes). Requests carry it in a header, and
// URLs that cannot carry one (downloads, image previews) in `?access=`. The tab keeps it in
// sessionStorage, so a reload does not ask again and closing the tab forgets it.

import * as api from "./api.js";
import * as dav from "./dav.js";
import { wireUploads } from "./uploads.js";
import { h, icon, kind, formatSize, formatDate, announce, byName } from "./ui.js";
import { Rows } from "./rows.js";

const $ = (id) => document.getElementById(id);

/** OCS permission bits (arca_proto::sharing::perm). */
const PERM = { read: 1, update: 2, create: 4, delete: 8 };
/** Text previews show at most this much of a file. */
const TEXT_PREVIEW_BYTES = 256 * 1024;

const token = decodeURIComponent(location.pathname.split("/")[2] || "");
const root = `/remote.php/dav/public-files/${encodeURIComponent(token)}`;
const stored = `arca-link-access:${token}`;

const state = {
  /** What GET /s/{token} said: {name, folder, size, modified, type, permissions, drop, owner, expires}. */
  link: null,
  access: sessionStorage.getItem(stored) || "",
  path: "/",
  generation: 0,
  /** The file list (rows.js: only rows near the window are in the page). */
  rows: null,
};

function show(id) {
  for (const s of ["opening", "gone", "gate", "file", "folder", "drop"]) $(s).hidden = s !== id;
}

function gone(text) {
  $("gone-text").textContent = text;
  show("gone");
  document.title = "Link not available · arca";
}

/** The URL of `path` below the link, every segment encoded. */
function linkUrl(path) {
  const segments = path.split("/").filter(Boolean).map(encodeURIComponent);
  return `${root}/${segments.join("/")}`;
}

/** `url` with the access token, for what the browser fetches by itself (downloads, images). */
function withAccess(url) {
  if (!state.access) return url;
  return `${url}${url.includes("?") ? "&" : "?"}access=${encodeURIComponent(state.access)}`;
}

/** A URL a browser fetches by itself (a download, an image): the access token rides along. */
function fetchable(path) {
  return withAccess(linkUrl(path));
}

/** Where the server streams the items with these ids as one zip. */
function archive(ids) {
  return withAccess(`/s/${encodeURIComponent(token)}/archive?${ids.map((id) => `id=${encodeURIComponent(id)}`).join("&")}`);
}

function setAccess(access) {
  state.access = access;
  if (access) {
    api.always["X-Link-Access"] = access;
    sessionStorage.setItem(stored, access);
  } else {
    delete api.always["X-Link-Access"];
    sessionStorage.removeItem(stored);
  }
}

/** Asks what the link is; with `password`, gives it. Answers the link, or throws HttpError. */
async function describe(password) {
  const extra = { Accept: "application/json" };
  if (password !== undefined) {
    const bytes = new TextEncoder().encode(`public:${password}`);
    extra.Authorization = `Basic ${btoa(String.fromCharCode(...bytes))}`;
  }
  const resp = await api.request("GET", location.pathname, { headers: extra });
  if (!resp.ok) throw await api.failure(resp, "Cannot open the link");
  return resp.json();
}

async function open(password) {
  let link;
  try {
    link = await describe(password);
  } catch (e) {
    if (e.status === 401) {
      // A stored access token that no longer works (expired, or the password changed).
      setAccess("");
      return gate(password === undefined ? "" : "Wrong password.");
    }
    if (e.status === 429) {
      return gate(`Too many wrong passwords: try again in ${e.retryAfter ?? "a few"} s.`);
    }
    if (e.status === 404) return gone("It does not exist, has expired or was removed by the person who shared it.");
    return gone(e.message);
  }
  if (link.access) setAccess(link.access);
  state.link = link;
  $("owner").textContent = link.owner ? `Shared by ${link.owner}` : "";
  $("owner").hidden = !link.owner;
  document.title = `${link.name} · arca`;
  if (link.drop) return showDrop();
  if (!link.folder) return showFile();
  state.path = pathFromHash();
  return showFolder();
}

function gate(message) {
  show("gate");
  const el = $("gate-error");
  el.textContent = message;
  el.hidden = !message;
  $("gate-password").focus();
}

async function onGate(event) {
  event.preventDefault();
  const password = $("gate-password").value;
  if (!password) return gate("Enter the password you were given with the link.");
  $("gate-submit").disabled = true;
  try {
    await open(password);
  } finally {
    $("gate-submit").disabled = false;
    $("gate-password").value = "";
  }
}

// ------------------------------------------------------------------------- a file

function showFile() {
  const link = state.link;
  show("file");
  $("file-name").textContent = link.name;
  const meta = [formatSize(link.size), link.modified ? `modified ${formatDate(link.modified)}` : ""];
  if (link.expires) meta.push(`link valid until ${formatDate(link.expires)}`);
  $("file-meta").textContent = meta.filter(Boolean).join(" · ");
  const download = $("file-download");
  download.href = fetchable(`/${link.name}`);
  download.setAttribute("download", link.name);
  download.setAttribute("aria-label", `Download ${link.name}`);
  preview(link, `/${link.name}`);
}

/** A look at the file where the browser can show it safely: images, text as text, and PDF
 *  in the browser's own viewer where it has one. */
async function preview(entry, path) {
  const box = $("preview");
  box.replaceChildren();
  if (entry.type.startsWith("image/")) {
    box.append(h("img", { src: fetchable(path), alt: `Preview of ${entry.name}`, class: "preview-image" }));
    return;
  }
  if (entry.type === "application/pdf" && navigator.pdfViewerEnabled) {
    box.append(h("iframe", { src: withAccess(`${linkUrl(path)}?inline=1`), title: `Preview of ${entry.name}`, class: "preview-pdf" }));
    return;
  }
  if (!(entry.type.startsWith("text/") || entry.type === "application/json")) {
    box.append(h("p", { class: "empty" }, "No preview for this kind of file: download it to open it."));
    return;
  }
  const resp = await api.request("GET", linkUrl(path), { headers: { Range: `bytes=0-${TEXT_PREVIEW_BYTES - 1}` } });
  if (!resp.ok) {
    box.append(h("p", { class: "empty" }, "The preview could not be loaded."));
    return;
  }
  const text = new TextDecoder("utf-8", { fatal: false }).decode(await resp.arrayBuffer());
  box.append(h("pre", { class: "preview-text", tabindex: "0", "aria-label": `Contents of ${entry.name}` }, text));
  if (entry.size > TEXT_PREVIEW_BYTES) {
    box.append(h("p", { class: "hint" }, `The first ${formatSize(TEXT_PREVIEW_BYTES)} are shown.`));
  }
}

// ------------------------------------------------------------------------- a folder

function pathFromHash() {
  const raw = location.hash.replace(/^#/, "");
  const segments = raw
    .split("/")
    .filter(Boolean)
    .map((s) => {
      try {
        return decodeURIComponent(s);
      } catch {
        return s;
      }
    })
    .filter((s) => s !== "." && s !== "..");
  return `/${segments.join("/")}`;
}

function hashFor(path) {
  return `#${path.split("/").map(encodeURIComponent).join("/")}`;
}

function can(bit) {
  return (state.link.permissions & bit) !== 0;
}

async function showFolder() {
  show("folder");
  $("folder-title").textContent = state.link.name;
  const all = $("download-all");
  all.href = archive([state.link.id]);
  all.setAttribute("download", `${state.link.name}.zip`);
  $("new-folder").hidden = !can(PERM.create);
  $("upload-files").hidden = !can(PERM.create);
  $("upload-folders").hidden = !can(PERM.create);
  await refresh();
}

async function refresh() {
  const generation = ++state.generation;
  const path = state.path;
  renderCrumbs(path);
  let entries;
  try {
    entries = await dav.listAt(linkUrl(path));
  } catch (e) {
    if (e.status === 401) return open();
    if (e.status === 404 && path !== "/") return go("/");
    if (e.status === 404) return gone("It does not exist, has expired or was removed by the person who shared it.");
    return announce(e.message, "error");
  }
  if (generation !== state.generation) return;
  entries.sort((a, b) => (a.folder !== b.folder ? (a.folder ? -1 : 1) : byName(a.name, b.name)));
  state.rows.set(entries);
  $("empty").hidden = entries.length > 0;
}

function go(path) {
  location.hash = hashFor(path);
}

function renderCrumbs(path) {
  const names = path.split("/").filter(Boolean);
  // At the link's root the title says where one is.
  $("crumbs").hidden = names.length === 0;
  const items = [crumb(state.link.name, "/", names.length === 0)];
  let at = "";
  names.forEach((name, i) => {
    at = `${at}/${name}`;
    items.push(crumb(name, at, i === names.length - 1));
  });
  $("crumbs").replaceChildren(h("ol", {}, ...items));
}

function crumb(label, path, current) {
  return h("li", {}, current ? h("span", { "aria-current": "page" }, label) : h("a", { href: hashFor(path) }, label));
}

function row(entry) {
  const path = dav.join(state.path, entry.name);
  const name = entry.folder
    ? h("a", { href: hashFor(path), class: "file-name" }, icon(kind(entry)), h("span", {}, entry.name))
    : h("a", { href: fetchable(path), download: entry.name, class: "file-name" }, icon(kind(entry)), h("span", {}, entry.name));
  const actions = h(
    "td",
    { class: "col-actions" },
    entry.folder
      ? h("a", { class: "icon-button", href: archive([entry.id]), download: `${entry.name}.zip`, "aria-label": `Download ${entry.name} as a zip` }, icon("download", 18))
      : h("a", { class: "icon-button", href: fetchable(path), download: entry.name, "aria-label": `Download ${entry.name}` }, icon("download", 18)),
    can(PERM.delete)
      ? h("button", { type: "button", class: "icon-button", "aria-label": `Delete ${entry.name}`, onclick: () => remove(entry, path) }, icon("delete", 18))
      : null,
  );
  return h(
    "tr",
    { dataset: { name: entry.name } },
    h("td", { class: "col-name" }, name),
    h("td", { class: "col-size" }, formatSize(entry.size)),
    h("td", { class: "col-modified" }, formatDate(entry.modified)),
    actions,
  );
}

async function remove(entry, path) {
  try {
    await dav.removeAt(linkUrl(path));
    announce(`Deleted ${entry.name}.`);
  } catch (e) {
    announce(e.message, "error");
  }
  await refresh();
}

function toggleNewFolder(visible) {
  $("new-folder-form").hidden = !visible;
  if (visible) $("new-folder-name").focus();
  else $("new-folder-name").value = "";
}

async function onNewFolder(event) {
  event.preventDefault();
  const name = $("new-folder-name").value.trim();
  if (!name || name.includes("/") || name === "." || name === "..") {
    return announce("A folder name cannot be empty, contain / or be . or ..", "error");
  }
  try {
    await dav.mkcolAt(linkUrl(dav.join(state.path, name)));
    toggleNewFolder(false);
    announce(`Created ${name}.`);
  } catch (e) {
    return announce(e.message, "error");
  }
  await refresh();
}

// ------------------------------------------------------------------------- a drop

function showDrop() {
  show("drop");
  $("drop-title").textContent = `Upload files to ${state.link.name}`;
  $("drop-input").focus();
}

// ------------------------------------------------------------------------- start

function start() {
  state.rows = new Rows($("file-list"), row, ".file-name");
  if (state.access) api.always["X-Link-Access"] = state.access;
  $("gate-form").addEventListener("submit", onGate);
  $("new-folder").addEventListener("click", () => toggleNewFolder(true));
  $("new-folder-cancel").addEventListener("click", () => toggleNewFolder(false));
  $("new-folder-form").addEventListener("submit", onNewFolder);
  wireUploads({
    folder: () => state.path,
    refresh,
    url: linkUrl,
    zone: $("folder"),
    list: $("uploads"),
    files: $("upload-input"),
    folders: $("upload-folder-input"),
    // A link without the create bit has no pickers; drops are refused there too.
    allowed: () => state.link && can(PERM.create),
  });
  wireUploads({
    folder: () => "/",
    refresh: async () => {},
    url: linkUrl,
    zone: $("drop-zone"),
    list: $("drop-uploads"),
    files: $("drop-input"),
    allowed: () => state.link?.drop === true,
  });
  window.addEventListener("hashchange", () => {
    if (!state.link?.folder || state.link.drop) return;
    state.path = pathFromHash();
    refresh();
  });
  if (!token) return gone("The address names no link.");
  open();
}

start();
