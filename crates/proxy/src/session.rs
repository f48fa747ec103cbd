//! The web app's login: a session cookie in place of HTTP Basic, at
//! [`routes::SESSION`](arca_proto::routes::SESSION).
//!
//! `POST` with `{"user", "password"}` checks the password (under the login throttle: 429 with
//! `Retry-After`), then creates the session as one of the user's app tokens in storage-system,
//! labelled [`LABEL`] and expiring after `proxy.auth.session_ttl`. So a session is stored
//! where every proxy replica finds it, is checked like an app token (cached, and evicted by
//! the credential feed), and shows in the user's token list, where it can be revoked. The
//! cookie [`COOKIE`] carries the user name and the token (`HttpOnly`: no script reads it;
//! `SameSite=Strict`: no other site's page sends it; `Secure` under TLS). `GET` tells whose
//! session the cookie is; `DELETE` revokes it server-side (a copy of the cookie stops working
//! everywhere as the revocation is acknowledged by every proxy, before the answer).
//!
//! CSRF: a request authenticated by the cookie that may change state (any method but GET,
//! HEAD, OPTIONS, PROPFIND) must carry [`CSRF_HEADER`], a MAC of the session's token under the
//! process secret: every replica computes it, a page of another origin cannot read it (the
//! login and `GET` answers are same-origin JSON), and it dies with the session.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::{CreateAppTokenRequest, DeleteAppTokenRequest};
use arca_runtime::{Identity, Login, TokenSigner};
use arca_transport::Channel;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use serde_json::json;

use crate::auth::{AuthError, Authenticator};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "arca_session";
/// The header carrying the session's CSRF token.
pub(crate) const CSRF_HEADER: HeaderName = HeaderName::from_static("x-csrf-token");
/// The MAC purpose of CSRF tokens (no other token is made for it).
const CSRF_PURPOSE: &str = "web-csrf";
/// The app-token label of sessions, as the user's token list shows them.
pub(crate) const LABEL: &str = "web session";
/// A login body is a user name and a password: anything longer is not one.
const MAX_BODY: usize = 16 * 1024;
/// How long the identity the proxy signs to create or revoke a session is valid: the one call.
const CALL_IDENTITY_TTL: Duration = Duration::from_secs(60);

/// The session a request's cookie names.
#[derive(Clone)]
pub(crate) struct SessionCookie {
    pub(crate) username: String,
    pub(crate) secret: String,
}

impl SessionCookie {
    /// The cookie's value: `base64url(user name).token` (user names may hold characters a
    /// cookie value may not; the token is hex).
    fn value(&self) -> String {
        format!("{}.{}", B64.encode(&self.username), self.secret)
    }

    fn parse(value: &str) -> Option<Self> {
        let (user, secret) = value.split_once('.')?;
        let username = String::from_utf8(B64.decode(user).ok()?).ok()?;
        let plausible = !username.is_empty()
            && !secret.is_empty()
            && secret.len() <= 128
            && secret.bytes().all(|b| b.is_ascii_alphanumeric());
        plausible.then(|| Self {
            username,
            secret: secret.to_owned(),
        })
    }

    /// The session cookie among the request's cookies (RFC 6265 §5.4: `name=value` pairs
    /// separated by `; `, in one or, over HTTP/2, several `Cookie` headers).
    pub(crate) fn from_headers(headers: &HeaderMap) -> Option<Self> {
        cookies(headers)
            .find_map(|(name, value)| (name == COOKIE).then(|| Self::parse(value)).flatten())
    }
}

pub(crate) fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

/// Removes the session cookie from the request: it is a credential, and past the proxy the
/// identity token stands for it. Other cookies are passed on.
pub(crate) fn strip_cookie(headers: &mut HeaderMap) {
    if !cookies(headers).any(|(name, _)| name == COOKIE) {
        return;
    }
    let others: Vec<String> = cookies(headers)
        .filter(|(name, _)| *name != COOKIE)
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    headers.remove(header::COOKIE);
    if !others.is_empty()
        && let Ok(v) = HeaderValue::from_str(&others.join("; "))
    {
        headers.insert(header::COOKIE, v);
    }
}

/// Methods that change nothing, which a cookie may authenticate without the CSRF token. A
/// cross-site page can send none of them with a body that acts, and PROPFIND only reads.
fn is_safe(method: &Method) -> bool {
    matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS" | "PROPFIND")
}

/// What the proxy needs to run sessions.
#[derive(Clone)]
pub(crate) struct Sessions {
    users: Channel,
    signer: TokenSigner,
    ttl: Duration,
    /// The public listener speaks TLS: the cookie is `Secure`.
    secure: bool,
    /// The provider the login page offers ("Log in with NAME"), when OIDC logins are on.
    provider: Option<String>,
}

impl Sessions {
    pub(crate) fn new(
        users: Channel,
        signer: TokenSigner,
        ttl: Duration,
        secure: bool,
        provider: Option<String>,
    ) -> Self {
        Self {
            users,
            signer,
            ttl,
            secure,
            provider,
        }
    }

    /// 401 to a browser with no session: and how it may log in besides the form.
    fn not_logged_in(&self) -> Response {
        let oidc = self
            .provider
            .as_ref()
            .map(|name| json!({ "name": name, "url": arca_proto::routes::SESSION_OIDC }));
        (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({ "error": "not logged in", "oidc": oidc })),
        )
            .into_response()
    }

    fn csrf(&self, secret: &str) -> String {
        csrf(&self.signer, secret)
    }

    /// How long a session lasts (`proxy.auth.session_ttl`).
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// `None` when a request authenticated by `cookie` may go on; else the 403 to answer.
    pub(crate) fn check_csrf(
        &self,
        method: &Method,
        headers: &HeaderMap,
        cookie: &SessionCookie,
    ) -> Option<Response> {
        check_csrf(&self.signer, method, headers, cookie)
    }

    /// `POST`, `GET` or `DELETE` on the session path.
    pub(crate) async fn handle(
        &self,
        auth: &Authenticator,
        req: Request,
        peer: Option<IpAddr>,
    ) -> Response {
        let mut resp = match *req.method() {
            Method::POST => self.login(auth, req, peer).await,
            Method::GET | Method::HEAD => self.current(auth, req.headers()).await,
            Method::DELETE => self.logout(auth, req.headers()).await,
            _ => {
                let mut resp = error(StatusCode::METHOD_NOT_ALLOWED, "use POST, GET or DELETE");
                resp.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
                resp
            }
        };
        // Answers about credentials are never stored by caches.
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp
    }

    async fn login(&self, auth: &Authenticator, req: Request, peer: Option<IpAddr>) -> Response {
        #[derive(serde::Deserialize)]
        struct Form {
            user: String,
            password: String,
        }
        let body = match axum::body::to_bytes(req.into_body(), MAX_BODY).await {
            Ok(b) => b,
            Err(_) => return error(StatusCode::BAD_REQUEST, "the login body is too large"),
        };
        let Ok(form) = serde_json::from_slice::<Form>(&body) else {
            return error(
                StatusCode::BAD_REQUEST,
                "send JSON {\"user\": …, \"password\": …}",
            );
        };
        let user = match auth.check_password(&form.user, &form.password, peer).await {
            Ok(user) => user,
            Err(e) => return refusal(e),
        };
        let identity = Identity {
            id: user.id.clone(),
            username: user.username.clone(),
            display_name: user.display_name.clone(),
            groups: user.groups.clone(),
            admin: user.admin,
            space_admin: user.space_admin,
            login: Some(Login::Password),
        };
        match self.open(&identity).await {
            Ok((set_cookie, body)) => {
                let mut resp = (StatusCode::OK, axum::Json(body)).into_response();
                resp.headers_mut().insert(header::SET_COOKIE, set_cookie);
                resp
            }
            Err(resp) => resp,
        }
    }

    /// Opens a session for `identity`, whose login was just checked: the session cookie to
    /// set and what the app is told (who, and the CSRF token).
    pub(crate) async fn open(
        &self,
        identity: &Identity,
    ) -> Result<(HeaderValue, serde_json::Value), Response> {
        let request = self.call(
            identity,
            CreateAppTokenRequest {
                label: LABEL.to_owned(),
                expires_in: self.ttl.as_secs().max(1),
            },
        );
        let created = UsersClient::new(self.users.clone())
            .create_app_token(request)
            .await;
        let secret = match created {
            Ok(r) => r.into_inner().secret,
            Err(status) => return Err(unavailable(&status)),
        };
        let cookie = SessionCookie {
            username: identity.username.clone(),
            secret,
        };
        let expires = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            + self.ttl.as_secs();
        let body = json!({
            "user": identity.username,
            "displayName": identity.display_name,
            "admin": identity.admin,
        "spaceAdmin": identity.space_admin,
            "spaceAdmin": identity.space_admin,
            "csrf": self.csrf(&cookie.secret),
            "expires": expires,
        });
        let set = format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            cookie.value(),
            self.ttl.as_secs().max(1),
            if self.secure { "; Secure" } else { "" }
        );
        let set = HeaderValue::from_str(&set).map_err(|_| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the session cookie could not be made",
            )
        })?;
        Ok((set, body))
    }

    /// Who the cookie's session belongs to, and its CSRF token (the app asks on every load:
    /// the cookie itself is out of a script's reach).
    async fn current(&self, auth: &Authenticator, headers: &HeaderMap) -> Response {
        let Some(cookie) = SessionCookie::from_headers(headers) else {
            return self.not_logged_in();
        };
        let identity = match self.identity(auth, &cookie).await {
            Ok(identity) => identity,
            Err(AuthError::Missing | AuthError::Invalid) => return self.not_logged_in(),
            Err(e) => return refusal(e),
        };
        axum::Json(json!({
            "user": identity.username,
            "displayName": identity.display_name,
            "admin": identity.admin,
        "spaceAdmin": identity.space_admin,
            "spaceAdmin": identity.space_admin,
            "csrf": self.csrf(&cookie.secret),
        }))
        .into_response()
    }

    /// Revokes the cookie's session. It needs the CSRF token (another site must not log the
    /// user out); a cookie whose session already ended is just cleared.
    async fn logout(&self, auth: &Authenticator, headers: &HeaderMap) -> Response {
        let clear = |mut resp: Response| {
            let set = format!(
                "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
                if self.secure { "; Secure" } else { "" }
            );
            if let Ok(v) = HeaderValue::from_str(&set) {
                resp.headers_mut().insert(header::SET_COOKIE, v);
            }
            resp
        };
        let Some(cookie) = SessionCookie::from_headers(headers) else {
            return clear(StatusCode::NO_CONTENT.into_response());
        };
        let identity = match self.identity(auth, &cookie).await {
            Ok(identity) => identity,
            Err(AuthError::Missing | AuthError::Invalid) => {
                return clear(StatusCode::NO_CONTENT.into_response());
            }
            Err(e) => return refusal(e),
        };
        if let Some(refused) = self.check_csrf(&Method::DELETE, headers, &cookie) {
            return refused;
        }
        let request = DeleteAppTokenRequest {
            token: cookie.secret.clone(),
        };
        let request = self.call(&identity, request);
        match UsersClient::new(self.users.clone())
            .delete_app_token(request)
            .await
        {
            Ok(_) => clear(StatusCode::NO_CONTENT.into_response()),
            // Gone already (revoked from the token list): logged out all the same.
            Err(status) if status.code() == tonic::Code::NotFound => {
                clear(StatusCode::NO_CONTENT.into_response())
            }
            Err(status) => unavailable(&status),
        }
    }

    /// The identity of a valid session.
    async fn identity(
        &self,
        auth: &Authenticator,
        cookie: &SessionCookie,
    ) -> Result<Identity, AuthError> {
        let token = auth
            .authenticate_session(&cookie.username, &cookie.secret)
            .await?;
        let token = token.to_str().map_err(|_| AuthError::Invalid)?;
        self.signer
            .verify_identity(token)
            .map_err(|e| AuthError::Unavailable(e.to_string()))
    }

    /// `request` to storage-system as the user `identity` (signed here for this call: no
    /// client request carries one yet).
    fn call<T>(&self, identity: &Identity, request: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(request);
        let token = self.signer.sign_identity(identity, CALL_IDENTITY_TTL);
        if let Ok(value) = token.parse() {
            // The metadata key is the identity header the channel would otherwise fill in.
            request
                .metadata_mut()
                .insert(arca_transport::context::IDENTITY, value);
        }
        request
    }
}

/// The CSRF token of the session whose token is `secret`.
fn csrf(signer: &TokenSigner, secret: &str) -> String {
    signer.tag(CSRF_PURPOSE, secret)
}

fn check_csrf(
    signer: &TokenSigner,
    method: &Method,
    headers: &HeaderMap,
    cookie: &SessionCookie,
) -> Option<Response> {
    if is_safe(method) {
        return None;
    }
    let expected = csrf(signer, &cookie.secret);
    let given = headers.get(&CSRF_HEADER).map(HeaderValue::as_bytes);
    if given.is_some_and(|g| constant_time_eq(g, expected.as_bytes())) {
        return None;
    }
    Some(
        (
            StatusCode::FORBIDDEN,
            "missing or wrong X-CSRF-Token: a request that changes something with the \
             session cookie needs the token GET /api/v1/session returns\n",
        )
            .into_response(),
    )
}

/// A JSON error the app shows as it is: `{"error": message}`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "error": message }))).into_response()
}

fn refusal(e: AuthError) -> Response {
    match e {
        AuthError::Missing | AuthError::Invalid => {
            error(StatusCode::UNAUTHORIZED, "wrong user name or password")
        }
        AuthError::Throttled(wait) => {
            let secs = wait.as_secs().max(1);
            let mut resp = (
                StatusCode::TOO_MANY_REQUESTS,
                axum::Json(json!({
                    "error": format!("too many failed logins, try again in {secs} s"),
                    "retryAfter": secs,
                })),
            )
                .into_response();
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            resp
        }
        AuthError::Unavailable(why) => {
            tracing::warn!(error = %why, "cannot verify a web login");
            let mut resp = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "logins are unavailable, try again later",
            );
            resp.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(arca_transport::UNAVAILABLE_RETRY_AFTER_SECS),
            );
            resp
        }
    }
}

fn unavailable(status: &tonic::Status) -> Response {
    refusal(AuthError::Unavailable(status.message().to_owned()))
}

/// Equality that takes the same time wherever the inputs differ (a CSRF token compared byte
/// by byte with an early exit would leak its prefix to a patient attacker).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_round_trips_and_is_stripped_alone() {
        let c = SessionCookie {
            username: "ann é".into(),
            secret: "0123abcd".into(),
        };
        let mut h = HeaderMap::new();
        let v = format!("theme=dark; {COOKIE}={}; lang=en", c.value());
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&v).unwrap_or(HeaderValue::from_static("")),
        );
        let parsed = SessionCookie::from_headers(&h);
        assert_eq!(parsed.as_ref().map(|p| p.username.as_str()), Some("ann é"));
        assert_eq!(parsed.as_ref().map(|p| p.secret.as_str()), Some("0123abcd"));
        strip_cookie(&mut h);
        assert_eq!(h[header::COOKIE], "theme=dark; lang=en");
        assert!(SessionCookie::from_headers(&h).is_none());

        for bad in ["x", "YQ.", ".abc", "!!.abc", "YQ.ab;c"] {
            assert!(SessionCookie::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn only_reads_go_without_the_csrf_token() {
        let signer = TokenSigner::new(b"k");
        let cookie = SessionCookie {
            username: "a".into(),
            secret: "s1".into(),
        };
        let mut h = HeaderMap::new();
        for m in ["GET", "HEAD", "OPTIONS", "PROPFIND"] {
            let m = Method::from_bytes(m.as_bytes()).unwrap_or(Method::GET);
            assert!(check_csrf(&signer, &m, &h, &cookie).is_none());
        }
        for m in [
            "POST",
            "PUT",
            "DELETE",
            "MKCOL",
            "MOVE",
            "PATCH",
            "PROPPATCH",
        ] {
            let m = Method::from_bytes(m.as_bytes()).unwrap_or(Method::POST);
            assert!(check_csrf(&signer, &m, &h, &cookie).is_some(), "{m}");
        }
        let token = csrf(&signer, "s1");
        h.insert(
            CSRF_HEADER,
            HeaderValue::from_str(&token).unwrap_or(HeaderValue::from_static("")),
        );
        assert!(check_csrf(&signer, &Method::DELETE, &h, &cookie).is_none());
        // Another session's token does not do.
        assert_ne!(csrf(&signer, "s2"), token);
        let other = SessionCookie {
            username: "a".into(),
            secret: "s2".into(),
        };
        assert!(check_csrf(&signer, &Method::DELETE, &h, &other).is_some());
    }
}
