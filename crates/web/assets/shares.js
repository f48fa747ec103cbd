// Shares over the OCS share API (/ocs/v2.php/apps/files_sharing/api/v1/), as ownCloud's
// clients speak it: whom one can share with (sharees), a file's shares and links, creating,
// changing and removing them, and the shares others made with the user (accept, decline).
// Paths are in the user's files ("/a/b"); permissions are OCS bits.

import { request, failure } from "./api.js";
import { h, announce } from "./ui.js";

/** How long typing pauses before the people search asks. */
const SEARCH_DELAY_MS = 250;

const BASE = "/ocs/v2.php/apps/files_sharing/api/v1";

/** OCS permission bits (arca_proto::sharing::perm) and share types. */
export const PERM = { read: 1, update: 2, create: 4, delete: 8, share: 16 };
export const TYPE = { user: 0, group: 1, link: 3 };

/** The roles offered for an item (`folder` or not) and a share `type`: [{label, permissions}]. */
export function roles(folder, type) {
  const out = [{ label: "Can view", permissions: PERM.read }];
  out.push(
    folder
      ? { label: "Can edit", permissions: PERM.read | PERM.update | PERM.create | PERM.delete }
      : { label: "Can edit", permissions: PERM.read | PERM.update },
  );
  if (folder && type === TYPE.link) out.push({ label: "Upload only", permissions: PERM.create });
  return out;
}

/** A role's label for `permissions` (share bits aside), or "Custom". */
export function roleLabel(folder, type, permissions) {
  const bits = permissions & ~PERM.share;
  return roles(folder, type).find((r) => r.permissions === bits)?.label ?? "Custom";
}

async function ocs(method, path, params) {
  const query = new URLSearchParams({ format: "json" });
  let body;
  const headers = { "OCS-APIREQUEST": "true" };
  if (method === "GET" || method === "DELETE") {
    for (const [k, v] of Object.entries(params || {})) query.set(k, v);
  } else if (params) {
    body = new URLSearchParams(params);
    headers["Content-Type"] = "application/x-www-form-urlencoded";
  }
  const resp = await request(method, `${BASE}${path}?${query}`, { headers, body });
  let json = null;
  try {
    json = await resp.clone().json();
  } catch {
    // Not JSON: the failure below reads the text.
  }
  if (!resp.ok || !json?.ocs) {
    const message = json?.ocs?.meta?.message;
    if (message) {
      const e = await failure(resp, message);
      e.message = message;
      throw e;
    }
    throw await failure(resp, "The share request failed");
  }
  return json.ocs.data;
}

/** Users and groups matching `search`: [{label, type, with}]. */
export async function sharees(search, folder) {
  const data = await ocs("GET", "/sharees", { search, itemType: folder ? "folder" : "file", perPage: "20" });
  const out = [];
  for (const key of ["exact", ""]) {
    const part = key ? data[key] || {} : data;
    for (const kind of ["users", "groups"]) {
      for (const s of part[kind] || []) {
        out.push({ label: s.label, type: s.value.shareType, with: s.value.shareWith });
      }
    }
  }
  return out;
}

/**
 * Search as you type for people and groups: `search` (an input) fills `results` (a list)
 * with buttons, each calling `pick({label, type, with})`; answers to older keystrokes are
 * dropped. `folder` tells the server what is shared (some roles fit folders only).
 */
export function searchAsYouType(search, results, folder, pick) {
  let timer = 0;
  let asked = 0;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    const term = search.value.trim();
    if (!term) {
      results.hidden = true;
      return;
    }
    timer = setTimeout(async () => {
      const mine = ++asked;
      let found = [];
      try {
        found = await sharees(term, folder);
      } catch (e) {
        return announce(e.message, "error");
      }
      if (mine !== asked) return;
      results.replaceChildren(
        ...(found.length
          ? found.map((f) =>
              h("li", {}, h("button", { type: "button", class: "share-result", onclick: () => pick(f) }, f.label, f.type === TYPE.group ? " (group)" : "")),
            )
          : [h("li", { class: "empty" }, "No one found.")]),
      );
      results.hidden = false;
    }, SEARCH_DELAY_MS);
  });
}

/** The shares and links the user made of `path` (in the project space `space`, if given). */
export async function sharesOf(path, space) {
  return ocs("GET", "/shares", { path, reshares: "true", ...(space ? { space_ref: space } : {}) });
}

/** Shares `path` (`type`: user, group or link) with `options` (shareWith, permissions, password, expireDate, name; space_ref for a project space's item). */
export async function create(path, type, options) {
  const params = { path, shareType: String(type) };
  for (const [k, v] of Object.entries(options)) if (v !== undefined && v !== "") params[k] = String(v);
  return ocs("POST", "/shares", params);
}

/** Changes a share: `changes` of permissions, expireDate, password, name. */
export async function update(id, changes) {
  return ocs("PUT", `/shares/${encodeURIComponent(id)}`, changes);
}

export async function remove(id) {
  return ocs("DELETE", `/shares/${encodeURIComponent(id)}`);
}

/** Shares others made with the user, whatever their state (0 accepted, 1 pending, 2 declined). */
export async function sharedWithMe() {
  return ocs("GET", "/shares", { shared_with_me: "true", state: "all" });
}

/** Every share and link the user made. */
export async function sharedByMe() {
  return ocs("GET", "/shares", { reshares: "true" });
}

export async function accept(id) {
  return ocs("POST", `/shares/pending/${encodeURIComponent(id)}`);
}

export async function decline(id) {
  return ocs("DELETE", `/shares/pending/${encodeURIComponent(id)}`);
}
