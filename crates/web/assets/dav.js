// Files over WebDAV (RFC 4918), at /remote.php/dav/files/{user}/ (the `…At` forms at any root,
// a public link's too): list a folder (PROPFIND, Depth 1), make one (MKCOL), rename (MOVE),
// delete (DELETE: the server moves it to the trash). Paths inside the app are decoded, "/"-separated, "/" for the root.

import { request, failure } from "./api.js";

const DAV = "DAV:";

/**
 * The URL of `path` in a root: a user's files (`root` their user name) or a project space's
 * (`root` {space: id}), every segment percent-encoded. Every function here that takes a
 * `user` takes either.
 */
export function url(root, path) {
  const segments = path.split("/").filter(Boolean).map(encodeURIComponent);
  if (typeof root === "object" && root.space) return `/dav/spaces/${encodeURIComponent(root.space)}/${segments.join("/")}`;
  return `/remote.php/dav/files/${encodeURIComponent(root)}/${segments.join("/")}`;
}

/** A URL path decoded, to compare paths however their characters were escaped. */
function decoded(path) {
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
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

const ENTITIES = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

function unescapeXml(s) {
  if (!s.includes("&")) return s;
  return s.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|amp|lt|gt|quot|apos);/g, (_, e) =>
    e[0] === "#" ? String.fromCodePoint(e[1] === "x" ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10)) : ENTITIES[e],
  );
}

const ATTRIBUTE = /([^\s=]+)\s*=\s*(?:"([^"]*)"|'([^']*)')/g;

/**
 * The responses of a WebDAV multistatus (RFC 4918 §14.16): [{href, props, collection}],
 * `props` a Map from "namespace name" to the text of each property of a 200 propstat,
 * `collection` whether its resourcetype holds DAV:collection.
 *
 * Read in one pass over the text, with namespaces resolved from their declarations, instead
 * of DOMParser: building a document of 10,000 responses (6 MB) took 0.8 s in Chromium, most
 * of the time a large folder took to show; this takes a tenth of it. It reads what a
 * multistatus holds (elements, text, character and entity references, CDATA, comments).
 */
export function multistatus(xml) {
  const responses = [];
  const scopes = [new Map([["xml", "http://www.w3.org/XML/1998/namespace"]])];
  let depth = 0;
  let response = null;
  let propstat = null;
  let propDepth = -1;
  let capture = null; // {what: "href" | "status" | key, depth, text}

  const start = (ns, local) => {
    const dav = ns === DAV;
    if (dav && local === "response") response = { href: "", props: new Map(), collection: false };
    else if (!response) return;
    else if (dav && local === "propstat") propstat = { props: new Map(), collection: false, status: "" };
    else if (!propstat && dav && local === "href") capture = { what: "href", depth, text: "" };
    else if (!propstat) return;
    else if (dav && local === "prop" && propDepth < 0) propDepth = depth;
    else if (propDepth >= 0 && depth === propDepth + 1) capture = { what: `${ns} ${local}`, depth, text: "" };
    else if (propDepth < 0 && dav && local === "status") capture = { what: "status", depth, text: "" };
    if (propstat && dav && local === "collection") propstat.collection = true;
  };

  const end = (ns, local) => {
    if (capture && capture.depth === depth) {
      if (capture.what === "href") response.href = capture.text.trim();
      else if (capture.what === "status") propstat.status = capture.text;
      else propstat.props.set(capture.what, capture.text);
      capture = null;
    }
    if (ns !== DAV) return;
    if (local === "prop" && depth === propDepth) propDepth = -1;
    else if (local === "propstat" && propstat) {
      if (/\s200\s/.test(`${propstat.status} `)) {
        for (const [k, v] of propstat.props) response.props.set(k, v);
        response.collection ||= propstat.collection;
      }
      propstat = null;
    } else if (local === "response" && response) {
      responses.push(response);
      response = null;
    }
  };

  let i = 0;
  while (i < xml.length) {
    const lt = xml.indexOf("<", i);
    if (capture) capture.text += unescapeXml(xml.slice(i, lt < 0 ? xml.length : lt));
    if (lt < 0) break;
    if (xml.startsWith("<![CDATA[", lt)) {
      const close = xml.indexOf("]]>", lt);
      if (close < 0) break;
      if (capture) capture.text += xml.slice(lt + 9, close);
      i = close + 3;
      continue;
    }
    if (xml.startsWith("<!--", lt)) {
      const close = xml.indexOf("-->", lt);
      if (close < 0) break;
      i = close + 3;
      continue;
    }
    // The tag's end: the first ">" outside quotes (attribute values may hold one).
    let gt = lt + 1;
    for (let quote = ""; gt < xml.length; gt += 1) {
      const c = xml[gt];
      if (quote) {
        if (c === quote) quote = "";
      } else if (c === '"' || c === "'") quote = c;
      else if (c === ">") break;
    }
    const kind = xml[lt + 1];
    i = gt + 1;
    if (kind === "?" || kind === "!") continue;
    if (kind === "/") {
      const qname = xml.slice(lt + 2, gt).trim();
      const scope = scopes.pop();
      depth -= 1;
      const colon = qname.indexOf(":");
      end(scope.get(colon < 0 ? "" : qname.slice(0, colon)) ?? "", colon < 0 ? qname : qname.slice(colon + 1));
      continue;
    }
    const selfClosing = xml[gt - 1] === "/";
    const body = xml.slice(lt + 1, selfClosing ? gt - 1 : gt);
    const space = body.search(/\s/);
    const qname = space < 0 ? body : body.slice(0, space);
    let scope = scopes[scopes.length - 1];
    if (space >= 0 && body.includes("xmlns")) {
      scope = new Map(scope);
      for (const [, name, double, single] of body.slice(space).matchAll(ATTRIBUTE)) {
        if (name === "xmlns") scope.set("", unescapeXml(double ?? single));
        else if (name.startsWith("xmlns:")) scope.set(name.slice(6), unescapeXml(double ?? single));
      }
    }
    const colon = qname.indexOf(":");
    const ns = scope.get(colon < 0 ? "" : qname.slice(0, colon)) ?? "";
    const local = colon < 0 ? qname : qname.slice(colon + 1);
    start(ns, local);
    if (selfClosing) {
      end(ns, local);
    } else {
      scopes.push(scope);
      depth += 1;
    }
  }
  return responses;
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
  const self = decoded(new URL(folderUrl, location.origin).pathname.replace(/\/$/, ""));
  const entries = [];
  for (const r of multistatus(await resp.text())) {
    // Hrefs may be absolute URLs or paths; only the path matters.
    const hrefPath = new URL(r.href, location.origin).pathname.replace(/\/$/, "");
    if (decoded(hrefPath) === self) continue;
    const last = hrefPath.slice(hrefPath.lastIndexOf("/") + 1);
    let name;
    try {
      name = decodeURIComponent(last);
    } catch {
      name = last;
    }
    const prop = (local, ns = DAV) => r.props.get(`${ns} ${local}`) ?? "";
    const modified = Date.parse(prop("getlastmodified"));
    entries.push({
      name,
      folder: r.collection,
      size: r.collection ? null : Number(prop("getcontentlength")) || 0,
      modified: Number.isNaN(modified) ? null : modified,
      type: prop("getcontenttype"),
      id: prop("fileid", OC),
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
