// Files over WebDAV (RFC 4918), at /remote.php/dav/files/{user}/ (the `…At` forms at any root,
// a public link's too): list a folder (PROPFIND, Depth 1), make one (MKCOL), rename (MOVE),
// delete (DELETE: the server moves it to the trash). Paths inside the app are decoded, "/"-separated, "/" for the root.

import { request, failure } from "./api.js";

const DAV = "DAV:";

/** The URL of `path` in `user`'s files, every segment percent-encoded. */
export function url(user, path) {
  const segments = path.split("/").filter(Boolean).map(encodeURIComponent);
  return `/remote.php/dav/files/${encodeURIComponent(user)}/${segments.join("/")}`;
}

/** `path` joined with one more name. */
export function join(path, name) {
  return `${path.replace(/\/$/, "")}/${name}`;
}

/** The parent folder of `path`. */
export function parent(path) {
  const cut = path.replace(/\/$/, "").lastIndexOf("/");
  return cut <= 0 ? "/" : path.slice(0, cut);
}

const OC = "http://owncloud.org/ns";

const PROPFIND_BODY = `<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><d:resourcetype/>
<d:getcontentlength/><d:getlastmodified/><d:getcontenttype/><d:getetag/><oc:fileid/>
</d:prop></d:propfind>`;

function text(el, name, ns = DAV) {
  const found = el.getElementsByTagNameNS(ns, name)[0];
  return found ? found.textContent : "";
}

/** The entries of the folder `path`: [{name, folder, size, modified (ms), type, id}]. */
export async function list(user, path) {
  return listAt(url(user, path));
}

/** The entries of the folder at `folderUrl` (any WebDAV root: a user's files, a link's). */
export async function listAt(folderUrl) {
  const resp = await request("PROPFIND", folderUrl, {
    headers: { Depth: "1", "Content-Type": "application/xml; charset=utf-8" },
    body: PROPFIND_BODY,
  });
  if (resp.status !== 207) throw await failure(resp, "Cannot list this folder");
  const doc = new DOMParser().parseFromString(await resp.text(), "application/xml");
  const self = new URL(folderUrl, location.origin).pathname.replace(/\/$/, "");
  const entries = [];
  for (const r of doc.getElementsByTagNameNS(DAV, "response")) {
    const href = text(r, "href");
    // Hrefs may be absolute URLs or paths; only the path matters.
    const hrefPath = new URL(href, location.origin).pathname.replace(/\/$/, "");
    if (hrefPath === self) continue;
    const last = hrefPath.slice(hrefPath.lastIndexOf("/") + 1);
    let name;
    try {
      name = decodeURIComponent(last);
    } catch {
      name = last;
    }
    const folder = r.getElementsByTagNameNS(DAV, "collection").length > 0;
    const modified = Date.parse(text(r, "getlastmodified"));
    entries.push({
      name,
      folder,
      size: folder ? null : Number(text(r, "getcontentlength")) || 0,
      modified: Number.isNaN(modified) ? null : modified,
      type: text(r, "getcontenttype"),
      id: text(r, "fileid", OC),
    });
  }
  return entries;
}

async function expect(resp, ok, what) {
  if (!ok.includes(resp.status)) throw await failure(resp, what);
}

export async function mkcol(user, path) {
  await expect(await request("MKCOL", url(user, path)), [201], "Cannot create the folder");
}

/** Renames or moves; an existing target is never replaced (`Overwrite: F`). */
export async function move(user, from, to) {
  const destination = new URL(url(user, to), location.origin).href;
  const resp = await request("MOVE", url(user, from), {
    headers: { Destination: destination, Overwrite: "F" },
  });
  if (resp.status === 412) throw await failure(resp, "That name is taken");
  await expect(resp, [201, 204], "Cannot rename");
}

/**
 * Moves or copies (`method` MOVE or COPY) `from` to `to`. Answers "done", or "taken" when
 * `to` exists and `replace` is false (nothing changed then); with `replace` a file's content
 * at `to` becomes one of its versions, a folder there goes to the trash.
 */
export async function transfer(method, user, from, to, replace = false) {
  const destination = new URL(url(user, to), location.origin).href;
  const resp = await request(method, url(user, from), {
    headers: { Destination: destination, Overwrite: replace ? "T" : "F" },
  });
  if (resp.status === 412) return "taken";
  await expect(resp, [201, 204], method === "COPY" ? "Cannot copy" : "Cannot move");
  return "done";
}

/** Makes every missing folder of `path` in `user`'s files. */
export async function mkdirs(user, path) {
  await mkdirsAt((p) => url(user, p), path);
}

/** Makes every missing folder of `path`, `urlOf(path)` its URL (MKCOL each; 405: it exists). */
export async function mkdirsAt(urlOf, path) {
  let at = "";
  for (const name of path.split("/").filter(Boolean)) {
    at = `${at}/${name}`;
    const resp = await request("MKCOL", urlOf(at));
    if (resp.status !== 201 && resp.status !== 405) throw await failure(resp, "Cannot create the folder");
  }
}

/** Deletes `path`: the server keeps it in the trash. */
export async function remove(user, path) {
  await removeAt(url(user, path));
}

/** Deletes what `target` names (a URL). */
export async function removeAt(target) {
  await expect(await request("DELETE", target), [204, 200], "Cannot delete");
}

/** Makes the folder `target` names (a URL). */
export async function mkcolAt(target) {
  await expect(await request("MKCOL", target), [201], "Cannot create the folder");
}

/** A name beside `name` that `taken` does not hold: `a (2).txt`, `a (3).txt`, … */
export function freeName(name, taken) {
  const dot = name.lastIndexOf(".");
  const [stem, ext] = dot > 0 ? [name.slice(0, dot), name.slice(dot)] : [name, ""];
  for (let n = 2; ; n += 1) {
    const candidate = `${stem} (${n})${ext}`;
    if (!taken.has(candidate)) return candidate;
  }
}
