// Uploads through TUS 1.0.0 (https://tus.io/protocols/resumable-upload): a POST on the folder
// creates the upload (the name in Upload-Metadata), then one PATCH sends the file from the
// offset the server confirmed, streamed from disk by the browser (flat memory whatever the
// size). XMLHttpRequest, not fetch(): only it reports upload progress. The server keeps what
// arrived of a PATCH that broke off, so a dropped connection costs nothing: the upload goes
// on from the offset the server reports (HEAD). One PATCH rather than chunks because each
// PATCH is one stored part the server joins at the end: 8 MiB chunks made a 1 GiB upload 128
// parts and a fifth as fast as a plain PUT. A server that refuses a body that large (413:
// `proxy.limits.max_body_bytes`) gets halves of it, down to MIN_CHUNK.

import { headers } from "./api.js";

const VERSION = "1.0.0";
/** The smallest PATCH when the server limits request bodies. */
const MIN_CHUNK = 1024 * 1024;
const RETRIES = 3;

/** Base64 of a string's UTF-8 bytes (TUS metadata values are base64). */
function b64(s) {
  const bytes = new TextEncoder().encode(s);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

/** The error an upload cancelled by its signal ends with. */
export const CANCELLED = "cancelled";
/** The error an upload paused by its signal (aborted with this reason) ends with. */
export const PAUSED = "paused";

/** Why `signal` stopped the upload: paused (the server keeps it) or cancelled. */
function stopped(signal) {
  return new Error(signal?.reason === PAUSED ? PAUSED : CANCELLED);
}

function xhr(method, url, extra, body, onProgress, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(stopped(signal));
    const x = new XMLHttpRequest();
    signal?.addEventListener("abort", () => x.abort(), { once: true });
    x.open(method, url);
    for (const [k, v] of Object.entries(headers(method, { "Tus-Resumable": VERSION, ...extra }))) {
      x.setRequestHeader(k, v);
    }
    if (onProgress) x.upload.onprogress = (e) => onProgress(e.loaded);
    x.onload = () => resolve(x);
    x.onerror = () => reject(new Error("network error"));
    x.onabort = () => reject(stopped(signal));
    x.send(body ?? null);
  });
}

function reason(x, fallback) {
  const line = (x.responseText || "").trim().split("\n")[0];
  const e = new Error(line || `${fallback} (HTTP ${x.status})`);
  e.status = x.status;
  return e;
}

/**
 * Uploads `file` into the folder at `folderUrl`; `onProgress(bytesSent)` as it goes.
 * Resolves when the server has the whole file. `signal` (an AbortSignal) stops it: aborted
 * with the reason PAUSED, the upload stays on the server (the error is PAUSED; call again
 * with `resume` to go on); otherwise it is cancelled and terminated on the server (TUS
 * DELETE), so no partial file is left and its space is freed. `resume` is the upload URL of
 * an earlier start of this file (after a pause, or a reload): it goes on from the offset the
 * server has, or starts over when the server no longer knows it. `onCreated(url)` is told
 * the upload URL when one is made, to keep for a resume.
 */
export async function upload(file, folderUrl, onProgress = () => {}, signal = undefined, { resume, onCreated } = {}) {
  let location = null;
  let from = 0;
  if (resume) {
    const head = await xhr("HEAD", resume, {}, null, null, signal);
    if (head.status === 200) {
      location = resume;
      from = Number(head.getResponseHeader("Upload-Offset")) || 0;
    }
  }
  if (!location) {
    const created = await xhr(
      "POST",
      folderUrl,
      { "Upload-Length": String(file.size), "Upload-Metadata": `filename ${b64(file.name)}` },
      null,
      null,
      signal,
    );
    if (created.status !== 201) throw reason(created, "Cannot start the upload");
    location = created.getResponseHeader("Location");
    if (!location) throw new Error("the server named no upload URL");
    from = Number(created.getResponseHeader("Upload-Offset")) || 0;
    onCreated?.(location);
  }
  onProgress(from);
  try {
    await send(file, location, from, onProgress, signal);
  } catch (e) {
    // Best effort: a server that keeps it anyway collects it as abandoned.
    if (e.message === CANCELLED) await terminate(location);
    throw e;
  }
}

/** Ends an upload on the server (TUS termination); best effort. */
export async function terminate(location) {
  await xhr("DELETE", location, {}).catch(() => {});
}

async function send(file, location, from, onProgress, signal) {
  let offset = from;
  let failures = 0;
  let chunk = Infinity;
  while (offset < file.size) {
    const end = Math.min(offset + chunk, file.size);
    const start = offset;
    let x;
    try {
      x = await xhr(
        "PATCH",
        location,
        { "Upload-Offset": String(start), "Content-Type": "application/offset+octet-stream" },
        file.slice(start, end),
        (loaded) => onProgress(start + loaded),
        signal,
      );
    } catch (e) {
      x = null;
      if (e.message === CANCELLED || e.message === PAUSED) throw e;
    }
    if (x && x.status === 204) {
      offset = Number(x.getResponseHeader("Upload-Offset")) || end;
      failures = 0;
      onProgress(offset);
      continue;
    }
    if (x && x.status === 413 && end - start > MIN_CHUNK) {
      // Refused before a byte was taken: the offset stands; try half as much.
      chunk = Math.max(MIN_CHUNK, Math.floor((end - start) / 2));
      continue;
    }
    if (x && x.status >= 400 && x.status < 500 && x.status !== 409) {
      throw reason(x, "The upload was refused");
    }
    // Lost connection, a server hiccup or an offset mismatch: ask where the server stands.
    failures += 1;
    if (failures > RETRIES) throw x ? reason(x, "The upload failed") : new Error("network error");
    const head = await xhr("HEAD", location, {}, null, null, signal);
    if (head.status !== 200) throw reason(head, "The upload is gone");
    offset = Number(head.getResponseHeader("Upload-Offset")) || 0;
  }
  onProgress(file.size);
}
