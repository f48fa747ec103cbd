//! arca-proxy: the one public HTTP entry; routes every public path to the frontend.
//!
//! It streams request and response bodies through without buffering, gives every request an
//! id (`X-Request-Id`, kept when the client sent a sane one), and writes one access-log line per
//! request. Authentication, TLS and limits arrive with the identity work.

use std::time::Instant;

use arca_runtime::{BoxFuture, Context, Router, Service, ServiceError};
use arca_transport::context::REQUEST_ID_HEADER;
use arca_transport::{Channel, Endpoint};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use tower::ServiceExt;

/// The proxy service; `public` is where it listens for clients (`proxy.http.addr`).
pub struct Proxy {
    public: Endpoint,
}

impl Proxy {
    pub fn new(config: &arca_config::Config) -> Self {
        Self {
            public: Endpoint::Tcp(config.proxy.http.addr.clone()),
        }
    }
}

impl Service for Proxy {
    fn name(&self) -> &'static str {
        "proxy"
    }

    fn dependencies(&self) -> &'static [&'static str] {
        &["frontend"]
    }

    fn public_endpoints(&self) -> Vec<Endpoint> {
        vec![self.public.clone()]
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            let frontend = ctx.channel("frontend");
            let public = Router::new().fallback(forward).with_state(frontend);
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

async fn forward(State(frontend): State<Channel>, mut req: Request) -> Response {
    let start = Instant::now();
    let request_id = request_id(req.headers());
    strip_hop_by_hop(req.headers_mut());
    req.headers_mut()
        .insert(REQUEST_ID_HEADER, request_id.clone());
    let method = req.method().clone();
    // The path only: queries can carry tokens, and access logs outlive them.
    let path = req.uri().path().to_owned();

    let mut response = match frontend.oneshot(req).await {
        Ok(resp) => resp,
        Err(e) => {
            let message = match e.downcast_ref::<tonic::Status>() {
                Some(status) => status.message().to_owned(),
                None => e.to_string(),
            };
            tracing::warn!(error = %message, "frontend unreachable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("frontend unavailable: {message}\n"),
            )
                .into_response()
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
    response.map(Body::new)
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
