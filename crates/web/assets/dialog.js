// The page's one dialog (<dialog id="dialog">): a question with a few answers (conflicts,
// confirmations), or a panel closed by a button (a file's versions, the folder picker).

import { h } from "./ui.js";

const $ = (id) => document.getElementById(id);

/**
 * Asks with the page's dialog: `buttons` are [{label, value, primary}]; resolves to the value
 * of the button pressed, or null when the dialog was closed (Escape).
 */
export function ask(title, body, buttons) {
  const dialog = $("dialog");
  $("dialog-title").textContent = title;
  $("dialog-body").replaceChildren(...[body].flat().filter(Boolean));
  $("dialog-buttons").replaceChildren(
    ...buttons.map((b) =>
      h("button", { type: "submit", value: b.value, class: `button ${b.primary ? "primary" : "quiet"}` }, b.label),
    ),
  );
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue || null), { once: true });
    dialog.showModal();
  });
}
