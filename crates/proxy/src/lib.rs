//! arca-proxy: the one public HTTP entry; routes every public path to the frontend.
//!
//! It streams request and response bodies through without buffering, gives every request an
//! id (`X-Request-Id`, kept when the client sent a sane one), and writes one access-log line per
//! request. It authenticates every request but the anonymous ones (`arca_proto::routes`:
//! status.php, capabilities, upload URLs, public links, the web app's page and files) and CORS
//! preflights, with HTTP Basic, an OIDC Bearer token or the web app's session cookie
//! ([`session`], which also answers the login form), and hands the frontend a signed identity
//! token in place of the client's credentials. Browsers never get a Basic challenge from it
//! for the web app's calls (`X-Requested-With: XMLHttpRequest`, or a session cookie): a
//! browser would show its own password prompt.
//!
//! As the public edge it also speaks TLS when given a certificate ([`tls`]), bounds what one
//! client can make it hold ([`limits`]: head size, body size, slow or idle connections) and
//! answers browsers' cross-origin questions ([`cors`]).

mod auth;
mod cors;
mod limits;
mod linger;
mod oidc;
mod session;
pub mod tls;
mod web_login;

use std::time::Instant;

use arca_proto::headers::CLIENT_ADDR as CLIENT_ADDR_HEADER;
use arca_proto::routes;
use arca_runtime::{BoxFuture, Context, Router, Service, ServiceError};
use arca_transport::context::{IDENTITY_HEADER, REQUEST_ID_HEADER};
use arca_transport::{CallFailure, Channel, Endpoint};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use tower::ServiceExt;

/// The proxy service; `public` is where it listens for clients (`proxy.http.addr`).
pub struct Proxy {
    public: Endpoint,
    throttle: arca_runtime::Throttle,
    /// How the public listener is served; an error here was already reported by [`check`]
    /// before anything bound, so `run` only repeats it.
    edge: Result<arca_transport::ServeOptions, String>,
    limits: arca_config::ProxyLimits,
    cors: cors::Cors,
    oidc: Option<arca_config::ProxyOidc>,
    /// `proxy.auth.basic`: whether passwords are taken over Basic (app tokens always are).
    passwords: bool,
    /// `proxy.auth.session_ttl`: how long a web app login lasts.
    session_ttl: std::time::Duration,
}

impl Proxy {
    pub fn new(config: &arca_config::Config) -> Self {
        Self {
            public: Endpoint::Tcp(config.proxy.http.addr.clone()),
            throttle: arca_runtime::Throttle::new(
                config.proxy.auth.max_failures,
                config.proxy.auth.window,
            ),
            edge: tls::edge_options(config),
            limits: config.proxy.limits.clone(),
            cors: cors::Cors::new(&config.proxy.cors.allowed_origins),
            oidc: config.proxy.oidc.clone(),
            passwords: config.proxy.auth.basic,
            session_ttl: config.proxy.auth.session_ttl,
        }
    }
}

/// What of the proxy's configuration can only be checked by reading files (the TLS
/// certificate and key): one line naming the key, for `arca` to refuse to start with.
pub fn check(config: &arca_config::Config) -> Result<(), String> {
    if config.hosts("proxy") {
        tls::edge_options(config)?;
    }
    Ok(())
}

impl Service for Proxy {
    fn public_endpoints(&self) -> Vec<Endpoint> {
        vec![self.public.clone()]
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            let edge = self.edge?;
            // One cache and one failure count for every way of logging in: the credential
            // feed evicts Bearer logins with Basic ones, and an address guessing both is
            // counted once.
            let (auth, feed) = auth::Authenticator::new(
                ctx.channel("storage-system"),
                ctx.signer().clone(),
                self.throttle.clone(),
                self.passwords,
                ctx.shutdown(),
            );
            ctx.spawn_worker(feed);
            let oidc = match &self.oidc {
                Some(config) => {
                    let oidc = oidc::Oidc::new(
                        config,
                        ctx.channel("storage-system"),
                        ctx.signer().clone(),
                        auth.cache(),
                        self.throttle.clone(),
                    )?;
                    ctx.spawn_worker(oidc.key_refresher(ctx.shutdown()));
                    Some(oidc)
                }
                None => None,
            };
            let web = self.oidc.as_ref().and_then(|c| c.web.clone());
            let web_login = oidc.clone().zip(web.clone()).map(|(oidc, web)| {
                web_login::WebLogin::new(oidc, web, ctx.signer().clone(), self.throttle.clone())
            });
            let sessions = session::Sessions::new(
                ctx.channel("storage-system"),
                ctx.signer().clone(),
                self.session_ttl,
                edge.tls.is_some(),
                web.map(|w| w.provider_name),
            );
            let state = ProxyState {
                sessions,
                web_login,
                frontend: ctx.channel("frontend"),
                auth,
                oidc,
                cors: self.cors,
                max_header_bytes: self.limits.max_header_bytes,
                max_body_bytes: self.limits.max_body_bytes,
                https: edge.tls.is_some(),
            };
            let public = Router::new().fallback(forward).with_state(state);
            ctx.set_ready();
            ctx.serve_public_with(Router::new(), Some(public), edge)
                .await
        })
    }
}

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1); HTTP/2 forbids
/// them outright (RFC 9113 §8.2.2), so they never cross the proxy.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "proxy-authenticate",
    "proxy-authorization",
];

#[derive(Clone)]
struct ProxyState {
    frontend: Channel,
    sessions: session::Sessions,
    /// The web app's "Log in with …" (`proxy.oidc.client_id`).
    web_login: Option<web_login::WebLogin>,
    auth: auth::Authenticator,
    oidc: Option<oidc::Oidc>,
    cors: cors::Cors,
    max_header_bytes: u64,
    max_body_bytes: Option<u64>,
    /// The public listener speaks TLS: the frontend is told so (`X-Forwarded-Proto`).
    https: bool,
}

/// Characters of a capability token the access log keeps: enough to tell requests for
/// different links apart, far too few to use.
const LOGGED_TOKEN_CHARS: usize = 4;
/// The longest client name (User-Agent) passed on; longer ones are cut.
const MAX_CLIENT_LEN: usize = 200;

/// `path` as the access log may show it: the token segment under a capability root
/// ([`routes::CAPABILITY_ROOTS`]) becomes its first [`LOGGED_TOKEN_CHARS`] characters and "…"
/// (a short one only "…", so no token is ever logged whole).
fn loggable_path(path: &str) -> std::borrow::Cow<'_, str> {
    let Some(root) = routes::capability_root(path) else {
        return path.into();
    };
    // `capability_root` vouches for the `/` after the root.
    let rest = &path[root.len() + 1..];
    let (token, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if token.is_empty() {
        return path.into();
    }
    let keep = if token.chars().count() > 2 * LOGGED_TOKEN_CHARS {
        token
            .char_indices()
            .nth(LOGGED_TOKEN_CHARS)
            .map_or(token, |(at, _)| &token[..at])
    } else {
        ""
    };
    format!("{root}/{keep}…{tail}").into()
}

async fn forward(State(state): State<ProxyState>, mut req: Request) -> Response {
    let start = Instant::now();
    let request_id = request_id(req.headers());
    strip_hop_by_hop(req.headers_mut());
    req.headers_mut()
        .insert(REQUEST_ID_HEADER, request_id.clone());
    // Only the proxy vouches for identities: whatever a client sent under that name goes.
    req.headers_mut().remove(IDENTITY_HEADER);
    let method = req.method().clone();
    // The path only: queries can carry tokens, and access logs outlive them.
    let path = req.uri().path().to_owned();
    // ... and the log's copy with the capability tokens in paths cut short.
    let logged_path = loggable_path(&path);
    let origin = state.cors.allowed_origin(req.headers());
    // Whoever refuses the request early drops its body; the client must still hear why.
    let req = linger::on_drop(req);

    let mut response = handle(&state, req, &path).await;
    if let Some(origin) = origin {
        state.cors.decorate(origin, response.headers_mut());
    }
    strip_hop_by_hop(response.headers_mut());
    response
        .headers_mut()
        .insert(REQUEST_ID_HEADER, request_id.clone());
    tracing::info!(
        target: "access",
        method = %method,
        path = %logged_path,
        status = response.status().as_u16(),
        ms = start.elapsed().as_secs_f64() * 1000.0,
        request_id = request_id.to_str().unwrap_or(""),
    );
    response
}

/// Limits, then CORS preflight, then authentication, then the frontend.
async fn handle(state: &ProxyState, mut req: Request, path: &str) -> Response {
    if let Some(refused) = limits::check_head(&req, state.max_header_bytes) {
        return refused;
    }
    if let Some(answer) = state.cors.preflight(&req) {
        return answer;
    }
    if let Some(max) = state.max_body_bytes
        && let Some(refused) = limits::check_declared_body(&req, max)
    {
        return refused;
    }
    // HTTP/2 carries the host in `:authority`; the frontend reads `Host` (WebDAV Destination
    // checks, absolute URLs), as over HTTP/1.1.
    if !req.headers().contains_key(header::HOST)
        && let Some(authority) = req.uri().authority()
        && let Ok(host) = HeaderValue::from_str(authority.as_str())
    {
        req.headers_mut().insert(header::HOST, host);
    }
    // Said by the proxy alone: a client's own claim about the scheme is dropped.
    req.headers_mut().remove(X_FORWARDED_PROTO);
    req.headers_mut().remove(CLIENT_ADDR_HEADER);
    // The client program, for the trash's record of who removed what (bounded: it is stored
    // with every removal).
    let client = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|ua| {
            let end = ua
                .char_indices()
                .nth(MAX_CLIENT_LEN)
                .map_or(ua.len(), |(i, _)| i);
            ua[..end].to_owned()
        })
        .and_then(|ua| HeaderValue::from_str(&ua).ok());
    req.headers_mut()
        .remove(arca_transport::context::CLIENT_HEADER);
    if let Some(client) = client {
        req.headers_mut()
            .insert(arca_transport::context::CLIENT_HEADER, client);
    }
    if let Some(ip) = req
        .extensions()
        .get::<arca_transport::PeerAddr>()
        .and_then(|p| p.0)
        .and_then(|a| HeaderValue::from_str(&a.ip().to_string()).ok())
    {
        req.headers_mut().insert(CLIENT_ADDR_HEADER, ip);
    }
    if state.https {
        req.headers_mut()
            .insert(X_FORWARDED_PROTO, HeaderValue::from_static("https"));
    }

    let peer = req
        .extensions()
        .get::<arca_transport::PeerAddr>()
        .and_then(|p| p.0)
        .map(|a| a.ip());
    if path == routes::SESSION {
        if req.method() == http::Method::DELETE
            && let Some(login) = &state.web_login
        {
            let (parts, body) = req.into_parts();
            let head = parts.clone();
            let resp = state
                .sessions
                .handle(&state.auth, Request::from_parts(parts, body), peer)
                .await;
            return login.after_logout(&head, state.https, resp).await;
        }
        return state.sessions.handle(&state.auth, req, peer).await;
    }
    if path == routes::SESSION_OIDC || path == routes::SESSION_OIDC_CALLBACK {
        let Some(login) = &state.web_login else {
            return session::error(
                StatusCode::NOT_FOUND,
                "logging in through OIDC is not configured (proxy.oidc.client_id)",
            );
        };
        if req.method() != http::Method::GET {
            let mut resp = session::error(StatusCode::METHOD_NOT_ALLOWED, "use GET");
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET"));
            return resp;
        }
        let (req, _) = req.into_parts();
        return if path == routes::SESSION_OIDC {
            login.start(&req, state.https).await
        } else {
            login
                .callback(&state.sessions, &req, peer, state.https)
                .await
        };
    }
    // The session cookie is a credential: it stops here, whatever the path.
    let cookie = session::SessionCookie::from_headers(req.headers());
    session::strip_cookie(req.headers_mut());
    // A browser's own password prompt must not come up for the web app: its calls say who
    // they are, and a session cookie means a browser that logs in with the app's form.
    let browser = cookie.is_some() || arca_proto::headers::from_script(req.headers());

    if !routes::is_anonymous(path) {
        let authorization = req.headers().get(header::AUTHORIZATION);
        // The cookie counts only when the request brings no credentials of its own.
        let by_cookie = cookie.as_ref().filter(|_| authorization.is_none());
        let verified = match (oidc::bearer_token(authorization), &state.oidc, by_cookie) {
            (Some(token), Some(oidc), _) => {
                oidc.authenticate(token, peer).await.map_err(|e| match e {
                    oidc::BearerError::Invalid(why) => {
                        // The reason only: the token itself is a credential.
                        tracing::info!(reason = %why, "refused a Bearer token");
                        auth::AuthError::Invalid
                    }
                    oidc::BearerError::Unavailable(why) => auth::AuthError::Unavailable(why),
                    oidc::BearerError::Throttled(wait) => auth::AuthError::Throttled(wait),
                })
            }
            (_, _, Some(cookie)) => {
                let verified = state
                    .auth
                    .authenticate_session(&cookie.username, &cookie.secret)
                    .await;
                if verified.is_ok()
                    && let Some(refused) =
                        state
                            .sessions
                            .check_csrf(req.method(), req.headers(), cookie)
                {
                    return refused;
                }
                verified
            }
            _ => state.auth.authenticate(authorization, peer).await,
        };
        match verified {
            Ok(token) => {
                req.headers_mut().remove(header::AUTHORIZATION);
                req.headers_mut().insert(IDENTITY_HEADER, token);
            }
            Err(auth::AuthError::Missing | auth::AuthError::Invalid) => {
                return challenge(req.headers(), browser);
            }
            Err(auth::AuthError::Throttled(wait)) => {
                let secs = wait.as_secs().max(1);
                let body = format!("too many failed logins, retry in {secs}s\n");
                let mut resp = (StatusCode::TOO_MANY_REQUESTS, body).into_response();
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                return resp;
            }
            Err(auth::AuthError::Unavailable(why)) => {
                tracing::warn!(error = %why, "cannot verify credentials");
                let body = "authentication unavailable, retry later\n";
                let mut resp = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
                resp.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(arca_transport::UNAVAILABLE_RETRY_AFTER_SECS),
                );
                return resp;
            }
        }
    }

    match state.max_body_bytes {
        None => send(&state.frontend, req).await,
        Some(max) => {
            let (req, tripped) = limits::limit_body(req, max);
            let response = send(&state.frontend, req).await;
            // The frontend saw a broken body and answered for that; the client needs to know
            // why it broke.
            if tripped.load(std::sync::atomic::Ordering::Acquire) {
                limits::too_large(max)
            } else {
                response
            }
        }
    }
}

/// Tells the frontend which scheme the client used.
const X_FORWARDED_PROTO: header::HeaderName = header::HeaderName::from_static("x-forwarded-proto");

/// 401 with the two challenges oCIS sends; the realm is the Host the client used. To a
/// `browser` only the Bearer one: a Basic challenge makes browsers show their own password
/// prompt (or fail with ERR_INVALID_AUTH_CREDENTIALS) over the web app, which has its form.
fn challenge(headers: &HeaderMap, browser: bool) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| h.bytes().all(|b| b.is_ascii_graphic() && b != b'"'))
        .unwrap_or("arca");
    let mut response = (StatusCode::UNAUTHORIZED, "authentication required\n").into_response();
    let schemes: &[&str] = if browser {
        &["Bearer"]
    } else {
        &["Bearer", "Basic"]
    };
    for scheme in schemes {
        let value = format!("{scheme} realm=\"{host}\", charset=\"UTF-8\"");
        if let Ok(v) = HeaderValue::from_str(&value) {
            response.headers_mut().append(header::WWW_AUTHENTICATE, v);
        }
    }
    response
}

/// Forwards `req`. A request the frontend could not take is 503 with `Retry-After` (sync
/// clients retry those), never 502; one whose own body broke off (its client hung up, or sent
/// less than its Content-Length) is the client's fault, 400. Which instance failed and how is
/// for the log, not for the client.
async fn send(frontend: &Channel, req: Request) -> Response {
    match frontend.clone().oneshot(req).await {
        Ok(resp) => resp.map(Body::new),
        Err(e) => match Channel::failure(&e) {
            CallFailure::CallerBody(why) => {
                tracing::debug!(error = %why, "a client's request body broke off");
                (StatusCode::BAD_REQUEST, "request body incomplete\n").into_response()
            }
            CallFailure::Unavailable(why) => {
                tracing::warn!(error = %why, "frontend unreachable");
                let mut resp = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "service unavailable, retry later\n",
                )
                    .into_response();
                resp.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(arca_transport::UNAVAILABLE_RETRY_AFTER_SECS),
                );
                resp
            }
        },
    }
}

/// The client's id if it is short printable ASCII (it ends up in logs), otherwise a new one.
fn request_id(headers: &HeaderMap) -> HeaderValue {
    if let Some(v) = headers.get(REQUEST_ID_HEADER)
        && !v.is_empty()
        && v.len() <= 128
        && v.as_bytes().iter().all(|b| b.is_ascii_graphic())
    {
        return v.clone();
    }
    let id = arca_transport::context::new_request_id();
    HeaderValue::from_str(&id).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Headers named in `Connection` are hop-by-hop too.
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    for name in HOP_BY_HOP
        .iter()
        .copied()
        .chain(named.iter().map(String::as_str))
    {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::loggable_path;

    #[test]
    fn capability_tokens_are_cut_short_in_logged_paths() {
        let token = "Zq3xY7pLmN0aBcDeFgHiJk";
        for (path, logged) in [
            (format!("/data/{token}"), "/data/Zq3x…".to_owned()),
            (format!("/s/{token}"), "/s/Zq3x…".to_owned()),
            (format!("/s/{token}/"), "/s/Zq3x…/".to_owned()),
            (
                format!("/remote.php/dav/public-files/{token}/dir/a.txt"),
                "/remote.php/dav/public-files/Zq3x…/dir/a.txt".to_owned(),
            ),
            (
                format!("/dav/public-files/{token}"),
                "/dav/public-files/Zq3x…".to_owned(),
            ),
            // A short token is not shown at all.
            ("/s/abcdefgh/x".to_owned(), "/s/…/x".to_owned()),
            // Multi-byte characters are cut at a character boundary.
            ("/s/ééééééééé".to_owned(), "/s/éééé…".to_owned()),
            // Other paths and bare roots are untouched.
            ("/s/".to_owned(), "/s/".to_owned()),
            (
                "/remote.php/dav/files/admin/s/x".to_owned(),
                "/remote.php/dav/files/admin/s/x".to_owned(),
            ),
            ("/status.php".to_owned(), "/status.php".to_owned()),
        ] {
            assert_eq!(loggable_path(&path), logged, "{path}");
            assert!(!loggable_path(&path).contains(token), "{path} logged whole");
        }
    }
}
