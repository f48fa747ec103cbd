// Uploads from a page: files and folders from the pickers or dropped onto a zone, through
// TUS (tus.js), a few at a time, each with its line in an upload list. The app's files view
// and the link page each wire one (`wireUploads`) with where their files go.

import * as dav from "./dav.js";
import { upload, terminate, CANCELLED, PAUSED } from "./tus.js";
import { h, formatSize, announce } from "./ui.js";

// Each function takes `where`, what `wireUploads` was given: where uploads go and what shows
// them (one page may wire several: the link page has a folder view and a drop zone).

/** Uploads at once; the rest wait their turn. */
const PARALLEL_UPLOADS = 3;

/**
 * Uploads `items` ([{file, dir}], `dir` the folder below `folder` a file goes into, "" for
 * `folder` itself) into `folder`: the folders on the way first, then the files a few at a
 * time, each with its progress, speed, time left and a cancel button.
 */
async function uploadAll(where, items, folder) {
  if (items.length === 0) return;
  const dirs = [...new Set(items.map((i) => i.dir).filter(Boolean))].sort();
  try {
    for (const d of dirs) await dav.mkdirsAt(where.url, dav.join(folder, d));
  } catch (e) {
    return announce(e.message, "error");
  }
  const results = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next;
      next += 1;
      results[i] = await uploadOne(where, items[i], folder);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL_UPLOADS, items.length) }, worker));
  if (where.folder() === folder) await where.refresh();
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

// Uploads under way, kept in localStorage so that one a reload or a closed tab interrupted can
// go on where it stopped: the server keeps what arrived; the page only needs the file again
// (a browser never hands a page a file by itself), matched by name, size and modification time.
const KEPT = "arca-uploads";
/** The uploads that are kept for a resume (the app's files view: `persist()` names its user). */
let persisted = null;

/** Every kept upload, of whoever used this browser: [{location, name, size, modified, folderUrl, shown, user}]. */
function allKept() {
  try {
    return JSON.parse(localStorage.getItem(KEPT) || "[]");
  } catch {
    return [];
  }
}

/** The uploads of the user logged in (`persisted.persist()`) that a reload interrupted. */
export function interrupted() {
  const user = persisted?.persist();
  return user ? allKept().filter((r) => r.user === user) : [];
}

function keep(record) {
  localStorage.setItem(KEPT, JSON.stringify([...allKept().filter((r) => r.location !== record.location), record]));
}

/** Forgets the kept upload at `location` (or all of the user's). */
export function forget(location) {
  const mine = new Set((location ? [location] : interrupted().map((r) => r.location)));
  const left = allKept().filter((r) => !mine.has(r.location));
  if (left.length) localStorage.setItem(KEPT, JSON.stringify(left));
  else localStorage.removeItem(KEPT);
}

/**
 * One file's upload with its line in the upload list: "done", "failed" or "cancelled".
 * Pause stops it and keeps it on the server; Resume goes on from what the server has.
 * `resume` is a kept upload to continue (its URL).
 */
async function uploadOne(where, { file, dir }, folder, resume = null) {
  const shown = dir ? `${dir}/${file.name}` : file.name;
  let run = new AbortController();
  let location = resume;
  const bar = h("progress", { max: file.size || 1, value: 0, "aria-label": `Uploading ${shown}` });
  const label = h("span", { class: "upload-state" }, "0 %");
  const pause = h("button", { type: "button", class: "button quiet", "aria-label": `Pause ${shown}`, onclick: () => run.abort(PAUSED) }, "Pause");
  const cancel = h("button", { type: "button", class: "button quiet", "aria-label": `Cancel ${shown}`, onclick: () => run.abort() }, "Cancel");
  const item = h("li", { dataset: { name: shown } }, h("span", { class: "upload-name" }, shown), bar, label, h("span", { class: "upload-actions" }, pause, cancel));
  where.list.append(item);
  const folderUrl = where.url(dir ? dav.join(folder, dir) : folder);
  for (;;) {
    const started = performance.now();
    let from = null;
    item.dataset.state = "running";
    try {
      await upload(
        file,
        folderUrl,
        (sent) => {
          from ??= sent;
          bar.value = sent;
          const pct = file.size ? Math.floor((sent * 100) / file.size) : 100;
          const elapsed = (performance.now() - started) / 1000;
          const rate = elapsed > 0.5 ? (sent - from) / elapsed : 0;
          label.textContent = rate > 0 ? `${pct} % · ${formatSize(rate)}/s · ${seconds((file.size - sent) / rate)}` : `${pct} %`;
        },
        run.signal,
        {
          resume: location,
          onCreated: (url) => {
            location = url;
            const user = where.persist?.();
            if (user) keep({ location: url, name: file.name, size: file.size, modified: file.lastModified, folderUrl, shown, user });
          },
        },
      );
      bar.value = file.size || 1;
      label.textContent = "done";
      item.dataset.state = "done";
      forget(location);
      pause.remove();
      cancel.remove();
      return "done";
    } catch (e) {
      if (e.message === PAUSED) {
        item.dataset.state = "paused";
        label.textContent = `paused at ${Math.floor((bar.value * 100) / (file.size || 1))} %`;
        pause.textContent = "Resume";
        pause.setAttribute("aria-label", `Resume ${shown}`);
        // Wait for Resume (or Cancel, which ends it below).
        const again = await new Promise((resolve) => {
          pause.onclick = () => resolve(true);
          cancel.onclick = () => resolve(false);
        });
        run = new AbortController();
        pause.textContent = "Pause";
        pause.setAttribute("aria-label", `Pause ${shown}`);
        pause.onclick = () => run.abort(PAUSED);
        cancel.onclick = () => run.abort();
        if (again) continue;
        // Cancelled while paused: the server's upload goes too.
        if (location) await terminate(location);
        e.message = CANCELLED;
      }
      const cancelled = e.message === CANCELLED;
      label.textContent = cancelled ? "cancelled" : e.status === 507 ? `Not enough space left: ${e.message}` : e.message;
      item.dataset.state = cancelled ? "cancelled" : "failed";
      // A refusal will not change by trying again; a lost connection might (kept for a resume).
      if (cancelled || e.status) forget(location);
      pause.remove();
      cancel.remove();
      return cancelled ? "cancelled" : "failed";
    }
  }
}


/**
 * Shows the banner of interrupted uploads, if there are any: choosing their files again goes
 * on with them; "Forget them" ends them on the server. `$` finds the banner's elements.
 */
export function offerResume($) {
  const kept = interrupted();
  $("resume").hidden = kept.length === 0 || !persisted;
  if (kept.length === 0) return;
  const names = kept.map((r) => r.shown).join(", ");
  $("resume-text").textContent =
    `${kept.length} upload${kept.length === 1 ? " was" : "s were"} interrupted (${names}). ` +
    "Choose the same files again to continue where they stopped.";
}

/** Wires the banner `offerResume` shows. */
export function wireResume($) {
  $("resume-input").addEventListener("change", async (e) => {
    const files = [...e.target.files];
    e.target.value = "";
    if (!persisted) return;
    await resumeUploads(persisted, files);
    offerResume($);
  });
  $("resume-forget").addEventListener("click", async () => {
    for (const r of interrupted()) await terminate(r.location);
    forget();
    offerResume($);
  });
}

/** Goes on with kept uploads whose files were chosen again; the rest stay kept. */
export async function resumeUploads(where, files) {
  const kept = interrupted();
  const items = [];
  for (const file of files) {
    const r = kept.find((k) => k.name === file.name && k.size === file.size && k.modified === file.lastModified);
    if (r) items.push({ file, record: r });
  }
  if (items.length === 0) return announce("None of these files is one of the interrupted uploads.", "error");
  const results = await Promise.all(
    items.map(({ file, record }) => uploadOne({ ...where, url: () => record.folderUrl }, { file, dir: "" }, "/", record.location)),
  );
  await where.refresh();
  const done = results.filter((r) => r === "done").length;
  announce(`Finished ${done} interrupted upload${done === 1 ? "" : "s"}.`, done === items.length ? "info" : "error");
}

async function onUpload(where) {
  const input = where.files;
  const items = [...input.files].map((file) => ({ file, dir: "" }));
  input.value = "";
  await uploadAll(where, items, where.folder());
}

/** A folder chosen in the picker: each file with the folders of its relative path. */
async function onUploadFolder(where) {
  const input = where.folders;
  const items = [...input.files].map((file) => {
    const rel = file.webkitRelativePath || file.name;
    return { file, dir: rel.slice(0, Math.max(0, rel.lastIndexOf("/"))) };
  });
  input.value = "";
  await uploadAll(where, items, where.folder());
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

function wireDrop(where) {
  const zone = where.zone;
  const dragging = (e) => e.dataTransfer && [...e.dataTransfer.types].includes("Files") && where.allowed();
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
    if (!where.allowed()) return;
    const folder = where.folder();
    let items;
    try {
      items = await dropped(e.dataTransfer);
    } catch (err) {
      return announce(`Cannot read what was dropped: ${err.message}`, "error");
    }
    await uploadAll(where, items, folder);
  });
}

/**
 * Wires the pickers and the drop zone of `where`: `folder()` the folder shown, `refresh()`
 * lists it again, `url(path)` the WebDAV URL of a folder; `zone` takes drops while
 * `allowed()` (default: always), `list` shows the progress, `files` and `folders` (may be
 * absent) are the pickers.
 */
export function wireUploads(where) {
  const w = { allowed: () => true, ...where };
  if (w.persist) persisted = w;
  w.files.addEventListener("change", () => onUpload(w));
  w.folders?.addEventListener("change", () => onUploadFolder(w));
  wireDrop(w);
}
