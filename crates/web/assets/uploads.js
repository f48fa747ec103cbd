// Uploads from a page: files and folders from the pickers or dropped onto a zone, through
// TUS (tus.js), a few at a time, each with its line in an upload list. The app's files view
// and the link page each wire one (`wireUploads`) with where their files go.

import * as dav from "./dav.js";
import { upload, CANCELLED } from "./tus.js";
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

/** One file's upload with its line in the upload list: "done", "failed" or "cancelled". */
async function uploadOne(where, { file, dir }, folder) {
  const shown = dir ? `${dir}/${file.name}` : file.name;
  const abort = new AbortController();
  const bar = h("progress", { max: file.size || 1, value: 0, "aria-label": `Uploading ${shown}` });
  const label = h("span", { class: "upload-state" }, "0 %");
  const cancel = h("button", { type: "button", class: "button quiet", "aria-label": `Cancel ${shown}`, onclick: () => abort.abort() }, "Cancel");
  const item = h("li", { dataset: { name: shown } }, h("span", { class: "upload-name" }, shown), bar, label, cancel);
  where.list.append(item);
  const started = performance.now();
  try {
    await upload(
      file,
      where.url(dir ? dav.join(folder, dir) : folder),
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
  w.files.addEventListener("change", () => onUpload(w));
  w.folders?.addEventListener("change", () => onUploadFolder(w));
  wireDrop(w);
}
