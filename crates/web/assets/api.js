// The session and every request the app makes: the session cookie goes along by itself
// (same origin); each request says it comes from a script (X-Requested-With), so a 401 never
// carries a Basic challenge that would open the browser's own password prompt; each request
// that may change something carries the session's CSRF token.

const SESSION = "/api/v1/session";
const SAFE = new Set(["GET", "HEAD", "OPTIONS", "PROPFIND"]);

/** Who is logged in: {user, displayName, csrf}, or null. */
export const session = { current: null };

/** An HTTP failure the app can show: `message` is one line for a person. */
export class HttpError extends Error {
  constructor(status, message, retryAfter) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

/** Headers every request carries besides those below (the link page's access token). */
export const always = {};

/** Headers every request of the app carries, plus `extra`. */
export function headers(method, extra = {}) {
  const h = { "X-Requested-With": "XMLHttpRequest", ...always, ...extra };
  if (!SAFE.has(method) && session.current) h["X-CSRF-Token"] = session.current.csrf;
  return h;
}

/** fetch() with the app's headers; a 401 means the session ended (an event tells the app). */
export async function request(method, url, { headers: extra = {}, body } = {}) {
  const resp = await fetch(url, {
    method,
    headers: headers(method, extra),
    body,
    credentials: "same-origin",
    cache: "no-store",
  });
  if (resp.status === 401 && session.current) {
    session.current = null;
    window.dispatchEvent(new CustomEvent("arca:session-ended"));
  }
  return resp;
}

/** The first line of a failed answer's text, or `fallback`. */
export async function failure(resp, fallback) {
  let text = "";
  try {
    text = await resp.text();
  } catch {
    // The reason is lost with the body; the status still says something.
  }
  let line = text.trim().split("\n")[0];
  if (line.startsWith("{")) {
    try {
      // arca's own `{"error": "…"}`, or Graph's `{"error": {"code", "message"}}`.
      const error = JSON.parse(text).error;
      line = (typeof error === "string" ? error : error?.message) || "";
    } catch {
      line = "";
    }
  }
  if (line.startsWith("<")) {
    // WebDAV errors are XML: the message element is what a person can read.
    const doc = new DOMParser().parseFromString(text, "application/xml");
    const m = doc.getElementsByTagNameNS("http://sabredav.org/ns", "message")[0];
    line = m ? m.textContent : "";
  }
  const retry = Number(resp.headers.get("Retry-After")) || undefined;
  return new HttpError(resp.status, line || `${fallback} (HTTP ${resp.status})`, retry);
}

const TOKENS = "/auth-app/tokens";

/** The user's app passwords: [{id, label, created_date, expiration_date}]. */
export async function appTokens() {
  const resp = await request("GET", TOKENS);
  if (!resp.ok) throw await failure(resp, "Cannot list app passwords");
  return resp.json();
}

/** A new app password for `label`, valid for `expiry` (e.g. "30d"): its secret, once. */
export async function createAppToken(label, expiry) {
  const q = new URLSearchParams({ label, expiry });
  const resp = await request("POST", `${TOKENS}?${q}`);
  if (!resp.ok) throw await failure(resp, "Cannot create the app password");
  return (await resp.json()).token;
}

export async function revokeAppToken(id) {
  const resp = await request("DELETE", `${TOKENS}?${new URLSearchParams({ id })}`);
  if (!resp.ok) throw await failure(resp, "Cannot revoke the app password");
}

/** Sets the logged-in user's password, given the current one (oCIS's Graph call; a session
 * may, an app token not). */
export async function changePassword(currentPassword, newPassword) {
  const resp = await request("POST", "/graph/v1.0/me/changePassword", {
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ currentPassword, newPassword }),
  });
  if (!resp.ok) throw await failure(resp, "Cannot change the password");
}

/** Logs in; the cookie is set by the answer, the CSRF token kept here. */
export async function login(user, password) {
  const resp = await request("POST", SESSION, {
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ user, password }),
  });
  if (!resp.ok) throw await failure(resp, "Login failed");
  session.current = await resp.json();
  return session.current;
}

/** How one may log in besides the form: `{name, url}` of the OIDC provider, null for none,
 * undefined until a 401 of the session endpoint said. */
export const provider = { current: undefined };

/** The session the cookie stands for, if any (and, without one, the provider offered). */
export async function whoami() {
  const resp = await request("GET", SESSION);
  if (resp.status === 401) {
    provider.current = (await resp.json().catch(() => ({}))).oidc ?? null;
    return null;
  }
  if (!resp.ok) throw await failure(resp, "Cannot reach the server");
  session.current = await resp.json();
  return session.current;
}

/**
 * Ends the session on the server (the cookie stops working everywhere). Returns where the
 * browser goes next to end the identity provider's session too, when the provider opened it
 * (the server answers 200 with `{"logout": URL}`), else null.
 */
export async function logout() {
  const resp = await request("DELETE", SESSION);
  session.current = null;
  if (!resp.ok) throw await failure(resp, "Logout failed");
  if (resp.status !== 200) return null;
  const body = await resp.json().catch(() => ({}));
  return typeof body.logout === "string" && /^https?:\/\//.test(body.logout) ? body.logout : null;
}
