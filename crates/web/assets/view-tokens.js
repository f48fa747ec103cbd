// The Account view: the password, and app passwords, one per device or client (the
// `/auth-app/tokens` API), shown once when made, listed and revoked here.

import * as api from "./api.js";
import { ask } from "./dialog.js";
import { h, formatDate, announce } from "./ui.js";

const $ = (id) => document.getElementById(id);

export async function refreshTokens() {
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

async function onChangePassword(event) {
  event.preventDefault();
  const current = $("password-current").value;
  const [first, second] = [$("password-new").value, $("password-repeat").value];
  if (!first) return;
  if (!current) return announce("Enter your current password.", "error");
  if (first !== second) return announce("The two passwords differ.", "error");
  try {
    await api.changePassword(current, first);
    announce("Password changed.");
  } catch (e) {
    if (e.status === 429) announce(`Too many wrong passwords: try again in ${e.retryAfter ?? "a few"} s.`, "error");
    else announce(e.message, "error");
    // The current password is asked again; what was typed as the new one stays.
    $("password-current").value = "";
    return;
  }
  $("password-current").value = "";
  $("password-new").value = "";
  $("password-repeat").value = "";
}

export function wireTokens() {
  $("password-form").addEventListener("submit", onChangePassword);
  $("token-form").addEventListener("submit", onCreateToken);
  $("token-copy").addEventListener("click", onCopyToken);
}
