// DOM helpers. Every piece of data reaches the page as text (text nodes, textContent,
// attribute values), never as markup: a file named `<img src=x onerror=alert(1)>` is a name.

/**
 * An element: `props` are attributes (on* functions become listeners; `dataset` an object),
 * `children` strings (as text) or nodes.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return el;
}

/** A decorative icon from icons/ (its meaning is in the text or label beside it). */
export function icon(name, size = 20) {
  return h("img", {
    src: new URL(`./icons/${name}.svg`, import.meta.url).href,
    alt: "",
    width: size,
    height: size,
    class: "icon",
  });
}

/** The icon of a listed entry ({folder, type}): folder, image, text or file. */
export function kind(entry) {
  if (entry.folder) return "folder";
  if (entry.type.startsWith("image/")) return "image";
  if (entry.type.startsWith("text/")) return "text";
  return "file";
}

/**
 * Compares names as people sort them (numbers by value, case aside). One collator for all:
 * `localeCompare` with options builds one per call, which made sorting 10,000 names take
 * longer than fetching them.
 */
export const byName = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" }).compare;

const UNITS = ["B", "KB", "MB", "GB", "TB"];

export function formatSize(bytes) {
  if (bytes === null || bytes === undefined) return "";
  let n = bytes;
  let u = 0;
  while (n >= 1000 && u < UNITS.length - 1) {
    n /= 1000;
    u += 1;
  }
  return `${u === 0 ? n : n.toFixed(n < 10 ? 1 : 0)} ${UNITS[u]}`;
}

const DATE = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

export function formatDate(ms) {
  return ms === null || ms === undefined ? "" : DATE.format(new Date(ms));
}

/** A short message for screen readers and eyes, in the status line. */
/**
 * Runs `work`, then `reload` (what it changed is read back and shown), then says `what` or
 * what failed: a panel tells a change is done only once it shows it.
 */
export async function changeThenShow(work, reload, what) {
  let failed = null;
  try {
    await work();
  } catch (e) {
    failed = e;
  }
  await reload();
  if (failed) announce(failed.message, "error");
  else announce(what);
}

export function announce(message, kind = "info") {
  const status = document.getElementById("status");
  status.textContent = message;
  status.dataset.kind = kind;
}
