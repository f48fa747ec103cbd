// Undo on the wire, as the app uses it: the user's trash (oCIS trash-bin, WebDAV), a file's
// versions (oCIS meta/{fileid}/v) and the mass deletes the server flagged (arca's
// /api/v1/trash/bursts). What each answer means is the server's; this module only asks.

import { request, failure } from "./api.js";
import { url as fileUrl } from "./dav.js";

const DAV = "DAV:";
const OC = "http://owncloud.org/ns";

/** The trash of `root`: a user's personal space (their name) or a project space ({space}). */
function trashUrl(root, key = "") {
  const item = key ? encodeURIComponent(key) : "";
  if (typeof root === "object" && root.space) return `/remote.php/dav/spaces/trash-bin/${encodeURIComponent(root.space)}/${item}`;
  return `/remote.php/dav/trash-bin/${encodeURIComponent(root)}/${item}`;
}

/** A URL path decoded, to compare paths however their characters were escaped. */
function decodedPath(href) {
  const path = new URL(href, location.origin).pathname.replace(/\/$/, "");
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

function prop(el, ns, name) {
  const found = el.getElementsByTagNameNS(ns, name)[0];
  return found ? found.textContent : "";
}

function lastSegment(href) {
  const path = new URL(href, location.origin).pathname.replace(/\/$/, "");
  const last = path.slice(path.lastIndexOf("/") + 1);
  try {
    return decodeURIComponent(last);
  } catch {
    return last;
  }
}

async function multistatus(resp, what) {
  if (resp.status !== 207) throw await failure(resp, what);
  return new DOMParser().parseFromString(await resp.text(), "application/xml");
}

const TRASH_BODY = `<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop>
<oc:trashbin-original-filename/><oc:trashbin-original-location/><oc:trashbin-delete-timestamp/>
<oc:size/><d:resourcetype/></d:prop></d:propfind>`;

/** The trash of `owner` (see trashUrl): [{key, name, location (no leading slash), deleted (ms), size, folder}]. */
export async function listTrash(owner) {
  const root = trashUrl(owner);
  const doc = await multistatus(
    await request("PROPFIND", root, {
      headers: { Depth: "1", "Content-Type": "application/xml; charset=utf-8" },
      body: TRASH_BODY,
    }),
    "Cannot list the trash",
  );
  const items = [];
  for (const r of doc.getElementsByTagNameNS(DAV, "response")) {
    const href = prop(r, DAV, "href");
    if (decodedPath(href) === decodedPath(root)) continue;
    const seconds = Number(prop(r, OC, "trashbin-delete-timestamp"));
    items.push({
      key: lastSegment(href),
      name: prop(r, OC, "trashbin-original-filename"),
      location: prop(r, OC, "trashbin-original-location"),
      deleted: Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : null,
      size: Number(prop(r, OC, "size")) || 0,
      folder: r.getElementsByTagNameNS(DAV, "collection").length > 0,
    });
  }
  return items;
}

/**
 * Restores `key` to `to` (a path in the user's files). Answers "done", or "taken" when the
 * name is taken again and `replace` is false (the server never overwrites unasked), or
 * "no-parent" when the folder it came from is gone.
 */
export async function restore(owner, key, to, replace = false) {
  const destination = new URL(fileUrl(owner, to), location.origin).href;
  const resp = await request("MOVE", trashUrl(owner, key), {
    headers: { Destination: destination, Overwrite: replace ? "T" : "F" },
  });
  if (resp.status === 201 || resp.status === 204) return "done";
  if (resp.status === 412) return "taken";
  if (resp.status === 409) return "no-parent";
  throw await failure(resp, "Cannot restore");
}

/** Deletes one trash item for good (its bytes are freed). */
export async function purge(owner, key) {
  const resp = await request("DELETE", trashUrl(owner, key));
  if (resp.status !== 204 && resp.status !== 200) throw await failure(resp, "Cannot delete for good");
}

/** Empties the whole trash. */
export async function emptyTrash(owner) {
  const resp = await request("DELETE", trashUrl(owner));
  if (resp.status !== 204 && resp.status !== 200) throw await failure(resp, "Cannot empty the trash");
}

const VERSIONS_BODY = `<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:"><d:prop><d:getcontentlength/><d:getlastmodified/></d:prop></d:propfind>`;

/** A file's earlier contents, newest first: [{href, key, size, modified (ms)}]. */
export async function listVersions(fileid) {
  const root = `/remote.php/dav/meta/${encodeURIComponent(fileid)}/v`;
  const doc = await multistatus(
    await request("PROPFIND", root, {
      headers: { Depth: "1", "Content-Type": "application/xml; charset=utf-8" },
      body: VERSIONS_BODY,
    }),
    "Cannot list the versions",
  );
  const versions = [];
  for (const r of doc.getElementsByTagNameNS(DAV, "response")) {
    const href = prop(r, DAV, "href");
    const path = new URL(href, location.origin).pathname.replace(/\/$/, "");
    if (path === root) continue;
    const modified = Date.parse(prop(r, DAV, "getlastmodified"));
    versions.push({
      href: path,
      key: lastSegment(href),
      size: Number(prop(r, DAV, "getcontentlength")) || 0,
      modified: Number.isNaN(modified) ? null : modified,
    });
  }
  versions.sort((a, b) => (b.modified ?? 0) - (a.modified ?? 0));
  return versions;
}

/**
 * Makes a version the file's content again; the content it replaces becomes a version. As
 * ownCloud Web does: COPY with `Overwrite: F`, which the server answers 204 (a version's
 * restore replaces the file's content by definition).
 */
export async function restoreVersion(version, user, path) {
  const destination = new URL(fileUrl(user, path), location.origin).href;
  const resp = await request("COPY", version.href, {
    headers: { Destination: destination, Overwrite: "F" },
  });
  if (resp.status !== 204 && resp.status !== 201) throw await failure(resp, "Cannot restore this version");
}

/**
 * The personal space's usage (Graph's drive quota, with arca's trash and version fields):
 * {total (0: no quota), used, trash, trashItems, versions, versionCount}, bytes and counts.
 */
export async function usage() {
  const resp = await request("GET", "/graph/v1.0/me/drives");
  if (!resp.ok) throw await failure(resp, "Cannot read the quota");
  const drives = (await resp.json()).value || [];
  const personal = drives.find((d) => d.driveType === "personal");
  return personal ? personal.quota : null;
}

/** The mass deletes the server flagged in the user's space, newest first. */
export async function bursts() {
  const resp = await request("GET", "/api/v1/trash/bursts");
  if (!resp.ok) throw await failure(resp, "Cannot list mass deletes");
  return (await resp.json()).value || [];
}

/** Restores exactly what one burst removed; the counts of what happened. */
export async function restoreBurst(id) {
  const resp = await request("POST", `/api/v1/trash/bursts/${encodeURIComponent(id)}/restore`, {
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ conflict: "keep-both" }),
  });
  if (!resp.ok) throw await failure(resp, "Cannot restore");
  return resp.json();
}
