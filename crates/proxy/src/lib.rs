//! arca-proxy: the one public HTTP entry; routes every public path to the frontend.
//!
//! It streams request and response bodies through without buffering, gives every request an
//! id (`X-Request-Id`, kept when the client sent a sane one), and writes one access-log line per
//! request. It authenticates every request but the anonymous ones (`/status.php`) and hands
//! the frontend a signed identity token in place of the client's credentials; TLS, OIDC, app
//! tokens and limits arrive with the rest of the identity work.

mod auth;
mod throttle;

use std::time::Instant;

use arca_runtime::{BoxFuture, Context, Router, Service, ServiceError};
use arca_transport::context::{IDENTITY_HEADER, REQUEST_ID_HEADER};
use arca_transport::{Channel, Endpoint};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use tower::ServiceExt;

/// The proxy service; `public` is where it listens for clients (`proxy.http.addr`).
pub struct Proxy {
    public: Endpoint,
    throttle: throttle::Throttle,
}

impl Proxy {
    pub fn new(config: &arca_config::Config) -> Self {
        Self {
            public: Endpoint::Tcp(config.proxy.http.addr.clone()),
            throttle: throttle::Throttle::new(
                config.proxy.auth.max_failures,
                config.proxy.auth.window,
            ),
        }
    }
}

impl Service for Proxy {
    fn name(&self) -> &'static str {
        "proxy"
    }

    fn dependencies(&self) -> &'static [&'static str] {
        // storage-system answers who a credential belongs to.
        &["frontend", "storage-system"]
    }

    fn public_endpoints(&self) -> Vec<Endpoint> {
        vec![self.public.clone()]
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            let state = ProxyState {
                frontend: ctx.channel("frontend"),
                auth: auth::Authenticator::new(
                    ctx.channel("storage-system"),
                    ctx.signer().clone(),
                    self.throttle,
                ),
            };
            let public = Router::new().fallback(forward).with_state(state);
            ctx.set_ready();
            ctx.serve_with_public(Router::new(), Some(public)).await
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
    auth: auth::Authenticator,
}

/// Paths anyone may reach: clients read them before they log in.
fn is_anonymous(path: &str) -> bool {
    path == "/status.php"
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

    let mut response = if is_anonymous(&path) {
        send(&state.frontend, req).await
    } else {
        let authorization = req.headers().get(header::AUTHORIZATION);
        let peer = req
            .extensions()
            .get::<arca_transport::PeerAddr>()
            .and_then(|p| p.0)
            .map(|a| a.ip());
        match state.auth.authenticate(authorization, peer).await {
            Ok(token) => {
                req.headers_mut().remove(header::AUTHORIZATION);
                req.headers_mut().insert(IDENTITY_HEADER, token);
                send(&state.frontend, req).await
            }
            Err(auth::AuthError::Missing | auth::AuthError::Invalid) => challenge(req.headers()),
            Err(auth::AuthError::Throttled(wait)) => {
                let secs = wait.as_secs().max(1);
                let body = format!("too many failed logins, retry in {secs}s\n");
                let mut resp = (StatusCode::TOO_MANY_REQUESTS, body).into_response();
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                resp
            }
            Err(auth::AuthError::Unavailable(why)) => {
                tracing::warn!(error = %why, "cannot verify credentials");
                let body = "authentication unavailable, retry later\n";
                (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
            }
        }
    };
    strip_hop_by_hop(response.headers_mut());
    response
        .headers_mut()
        .insert(REQUEST_ID_HEADER, request_id.clone());
    tracing::info!(
        target: "access",
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        ms = start.elapsed().as_secs_f64() * 1000.0,
        request_id = request_id.to_str().unwrap_or(""),
    );
    response
}

/// 401 with the two challenges oCIS sends; the realm is the Host the client used.
fn challenge(headers: &HeaderMap) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| h.bytes().all(|b| b.is_ascii_graphic() && b != b'"'))
        .unwrap_or("arca");
    let mut response = (StatusCode::UNAUTHORIZED, "authentication required\n").into_response();
    for scheme in ["Bearer", "Basic"] {
        let value = format!("{scheme} realm=\"{host}\", charset=\"UTF-8\"");
        if let Ok(v) = HeaderValue::from_str(&value) {
            response.headers_mut().append(header::WWW_AUTHENTICATE, v);
        }
    }
    response
}

async fn send(frontend: &Channel, req: Request) -> Response {
    match frontend.clone().oneshot(req).await {
        Ok(resp) => resp.map(Body::new),
        Err(e) => {
            let message = match e.downcast_ref::<tonic::Status>() {
                Some(status) => status.message().to_owned(),
                None => e.to_string(),
            };
            tracing::warn!(error = %message, "frontend unreachable");
            let body = format!("frontend unavailable: {message}\n");
            (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
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
