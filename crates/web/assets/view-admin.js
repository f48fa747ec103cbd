// The Users view, for admins: users (create, reset a password, give a role, delete) and groups
// (create, delete, members added and removed), over Graph (/graph/v1.0/users, /groups, the
// roles of /applications as appRoleAssignments). The server refuses every change from anyone
// else; the view is only shown to admins.

import { request, failure } from "./api.js";
import { ask } from "./dialog.js";
import { h, icon, announce, byName } from "./ui.js";

const $ = (id) => document.getElementById(id);
const GRAPH = "/graph/v1.0";

async function graph(method, path, body) {
  const resp = await request(method, `${GRAPH}${path}`, {
    headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  if (!resp.ok) throw await failure(resp, `${method} ${path} failed`);
  return resp.status === 204 ? null : resp.json();
}

/** Runs `work`, says `done` or what failed, then lists everything again. */
async function act(work, done) {
  try {
    await work();
    announce(done);
  } catch (e) {
    announce(e.message, "error");
  }
  await refreshAdmin();
}

export async function refreshAdmin() {
  let users = [];
  let groups = [];
  let app = { id: "", appRoles: [] };
  try {
    [users, groups, app] = await Promise.all([
      graph("GET", "/users?$expand=appRoleAssignments"),
      graph("GET", "/groups"),
      graph("GET", "/applications"),
    ]).then(([u, g, a]) => [u.value, g.value, a.value[0]]);
  } catch (e) {
    if (e.status !== 401) announce(e.message, "error");
  }
  users.sort((a, b) => byName(a.onPremisesSamAccountName, b.onPremisesSamAccountName));
  groups.sort((a, b) => byName(a.displayName, b.displayName));
  document.querySelector("#user-list tbody").replaceChildren(...users.map((u) => userRow(u, app)));
  document.querySelector("#group-list tbody").replaceChildren(...groups.map((g) => groupRow(g, users)));
}

function userRow(u, app) {
  const name = u.onPremisesSamAccountName;
  const current = u.appRoleAssignments?.[0]?.appRoleId;
  const role = h(
    "select",
    { class: "role", "aria-label": `Role of ${name}`, onchange: (e) => setRole(u, app, e.target.value) },
    ...app.appRoles.map((r) => h("option", { value: r.id, selected: r.id === current }, r.displayName)),
  );
  return h(
    "tr",
    { dataset: { name } },
    h("td", { class: "col-name" }, name),
    h("td", { class: "col-location" }, u.displayName, u.mail ? h("small", { class: "hint" }, ` · ${u.mail}`) : ""),
    h(
      "td",
      { class: "col-actions" },
      role,
      h("button", { type: "button", class: "button quiet", "aria-label": `Reset the password of ${name}`, onclick: () => resetPassword(u) }, "Reset password"),
      h("button", { type: "button", class: "icon-button", "aria-label": `Delete ${name}`, onclick: () => deleteUser(u) }, icon("delete", 18)),
    ),
  );
}

async function setRole(u, app, roleId) {
  const name = u.onPremisesSamAccountName;
  const role = app.appRoles.find((r) => r.id === roleId)?.displayName ?? roleId;
  await act(
    () => graph("POST", `/users/${encodeURIComponent(u.id)}/appRoleAssignments`, { principalId: u.id, appRoleId: roleId, resourceId: app.id }),
    `${name} is now ${role}.`,
  );
}

async function resetPassword(u) {
  const name = u.onPremisesSamAccountName;
  const input = h("input", { type: "password", id: "admin-new-password", autocomplete: "new-password", "aria-label": `New password for ${name}` });
  const answer = ask(`New password for ${name}`, [h("p", { class: "hint" }, "Their sync clients keep working with their app passwords."), input], [
    { label: "Set password", value: "set", primary: true },
    { label: "Cancel", value: "cancel" },
  ]);
  input.focus();
  if ((await answer) !== "set") return;
  if (!input.value) return announce("A password cannot be empty.", "error");
  await act(() => graph("PATCH", `/users/${encodeURIComponent(u.id)}`, { passwordProfile: { password: input.value } }), `Set a new password for ${name}.`);
}

async function deleteUser(u) {
  const name = u.onPremisesSamAccountName;
  const answer = await ask(`Delete ${name}?`, h("p", {}, `${name} can no longer log in; their shares end.`), [
    { label: `Delete ${name}`, value: "delete", primary: true },
    { label: "Cancel", value: "cancel" },
  ]);
  if (answer === "delete") await act(() => graph("DELETE", `/users/${encodeURIComponent(u.id)}`), `Deleted ${name}.`);
}

async function onCreateUser(event) {
  event.preventDefault();
  const form = event.target;
  const user = {
    onPremisesSamAccountName: $("new-user-name").value.trim(),
    displayName: $("new-user-display").value.trim() || $("new-user-name").value.trim(),
    mail: $("new-user-mail").value.trim(),
    passwordProfile: { password: $("new-user-password").value },
  };
  if (!user.onPremisesSamAccountName || !user.passwordProfile.password) {
    return announce("A new user needs a user name and a password.", "error");
  }
  await act(async () => {
    await graph("POST", "/users", user);
    form.reset();
  }, `Created ${user.onPremisesSamAccountName}.`);
}

function groupRow(g, users) {
  return h(
    "tr",
    { dataset: { name: g.displayName } },
    h("td", { class: "col-name" }, g.displayName),
    h("td", { class: "col-location" }, g.description || ""),
    h(
      "td",
      { class: "col-actions" },
      h("button", { type: "button", class: "button quiet", "aria-label": `Members of ${g.displayName}`, onclick: () => showMembers(g, users) }, "Members…"),
      h(
        "button",
        {
          type: "button",
          class: "icon-button",
          "aria-label": `Delete the group ${g.displayName}`,
          onclick: async () => {
            const answer = await ask(`Delete the group ${g.displayName}?`, h("p", {}, "Its members lose what was shared with the group."), [
              { label: "Delete the group", value: "delete", primary: true },
              { label: "Cancel", value: "cancel" },
            ]);
            if (answer === "delete") await act(() => graph("DELETE", `/groups/${encodeURIComponent(g.id)}`), `Deleted the group ${g.displayName}.`);
          },
        },
        icon("delete", 18),
      ),
    ),
  );
}

/** A group's members in the dialog: each removable, any other user addable. */
async function showMembers(g, users) {
  const list = h("ul", { class: "share-list", "aria-label": `Members of ${g.displayName}` });
  const add = h("select", { "aria-label": `Add a member to ${g.displayName}` });
  const render = async () => {
    let members = [];
    try {
      members = (await graph("GET", `/groups/${encodeURIComponent(g.id)}/members`)).value;
    } catch (e) {
      return announce(e.message, "error");
    }
    const ids = new Set(members.map((m) => m.id));
    list.replaceChildren(
      ...(members.length
        ? members.map((m) =>
            h(
              "li",
              { dataset: { name: m.onPremisesSamAccountName } },
              h("span", { class: "share-who" }, m.displayName || m.onPremisesSamAccountName),
              h(
                "button",
                {
                  type: "button",
                  class: "icon-button",
                  "aria-label": `Remove ${m.onPremisesSamAccountName} from ${g.displayName}`,
                  onclick: async () => {
                    try {
                      await graph("DELETE", `/groups/${encodeURIComponent(g.id)}/members/${encodeURIComponent(m.id)}/$ref`);
                      announce(`Removed ${m.onPremisesSamAccountName} from ${g.displayName}.`);
                    } catch (e) {
                      announce(e.message, "error");
                    }
                    await render();
                  },
                },
                icon("delete", 18),
              ),
            ),
          )
        : [h("li", { class: "empty" }, "No members.")]),
    );
    add.replaceChildren(
      h("option", { value: "" }, "Add a member…"),
      ...users.filter((u) => !ids.has(u.id)).map((u) => h("option", { value: u.id }, u.onPremisesSamAccountName)),
    );
  };
  add.addEventListener("change", async () => {
    const id = add.value;
    if (!id) return;
    const name = add.selectedOptions[0].textContent;
    try {
      await graph("POST", `/groups/${encodeURIComponent(g.id)}/members/$ref`, { "@odata.id": `${location.origin}${GRAPH}/users/${id}` });
      announce(`Added ${name} to ${g.displayName}.`);
    } catch (e) {
      announce(e.message, "error");
    }
    await render();
  });
  await render();
  await ask(`Members of ${g.displayName}`, [list, add], [{ label: "Close", value: "close", primary: true }]);
}

async function onCreateGroup(event) {
  event.preventDefault();
  const name = $("new-group-name").value.trim();
  if (!name) return announce("A new group needs a name.", "error");
  await act(async () => {
    await graph("POST", "/groups", { displayName: name });
    event.target.reset();
  }, `Created the group ${name}.`);
}

export function wireAdmin() {
  $("user-form").addEventListener("submit", onCreateUser);
  $("group-form").addEventListener("submit", onCreateGroup);
}
