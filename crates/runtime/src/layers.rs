//! What the runtime adds to every router a service serves: the probe, per-route metrics, a
//! request span joined to the caller's trace, and the call context for downstream calls.

use std::time::Instant;

use arca_proto::v1::probe_server::{Probe, ProbeServer};
use arca_proto::v1::{CheckRequest, CheckResponse, State as ProbeState};
use arca_transport::context::{
    CallContext, IDENTITY_HEADER, TRACEPARENT_HEADER, extract_trace, new_traceparent,
};
use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::health::Health;
use crate::token::{Identity, TokenError, TokenSigner};

/// The internal router: the service's own routes, the probe, and observation.
pub(crate) fn internal(
    router: Router,
    name: &'static str,
    health: Health,
    signer: TokenSigner,
) -> Router {
    let probe = ProbeServer::new(ProbeImpl { name, health });
    router
        .route_service(
            "/arca.v1.Probe/{*rest}",
            probe.map_request(|r: Request| r.map(tonic::body::Body::new)),
        )
        .layer(middleware::from_fn_with_state(signer, authenticate))
        .layer(middleware::from_fn_with_state(name, observe))
}

/// A public router (the proxy's listener): observation only; the proxy authenticates itself.
pub(crate) fn public(router: Router, name: &'static str) -> Router {
    router.layer(middleware::from_fn_with_state(name, observe))
}

/// Verifies the identity token on every internal call. A valid one becomes an [`Identity`]
/// extension for handlers; an invalid or expired one is refused here, so no handler ever sees
/// a forged caller. Calls without a token pass through anonymous: handlers that need a caller
/// refuse them (see [`Caller`] and [`caller`]).
async fn authenticate(State(signer): State<TokenSigner>, mut req: Request, next: Next) -> Response {
    if let Some(value) = req.headers().get(IDENTITY_HEADER) {
        let verified = value
            .to_str()
            .map_err(|_| TokenError::Malformed)
            .and_then(|token| signer.verify_identity(token));
        match verified {
            Ok(identity) => {
                req.extensions_mut().insert(identity);
            }
            Err(e) => {
                tracing::warn!(error = %e, "refused a call with an invalid identity token");
                return unauthenticated(&req, &format!("identity: {e}"));
            }
        }
    }
    next.run(req).await
}

fn unauthenticated(req: &Request, message: &str) -> Response {
    let grpc = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        tonic::Status::unauthenticated(message.to_owned())
            .into_http::<axum::body::Body>()
            .map(axum::body::Body::new)
    } else {
        (http::StatusCode::UNAUTHORIZED, format!("{message}\n")).into_response()
    }
}

/// The authenticated caller of an HTTP handler; refuses anonymous calls with 401.
pub struct Caller(pub Identity);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut http::request::Parts, _: &S) -> Result<Self, Response> {
        match parts.extensions.get::<Identity>() {
            Some(identity) => Ok(Caller(identity.clone())),
            None => Err((http::StatusCode::UNAUTHORIZED, "no caller identity\n").into_response()),
        }
    }
}

/// The authenticated caller of a gRPC method, or `UNAUTHENTICATED`.
pub fn caller<T>(req: &tonic::Request<T>) -> Result<&Identity, tonic::Status> {
    req.extensions()
        .get::<Identity>()
        .ok_or_else(|| tonic::Status::unauthenticated("no caller identity"))
}

struct ProbeImpl {
    name: &'static str,
    health: Health,
}

#[tonic::async_trait]
impl Probe for ProbeImpl {
    async fn check(
        &self,
        _: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let state = if self.health.is_draining() {
            ProbeState::Draining
        } else if self.health.is_serving(self.name) {
            ProbeState::Serving
        } else {
            ProbeState::Starting
        };
        Ok(tonic::Response::new(CheckResponse {
            service: self.name.to_owned(),
            version: arca_proto::VERSION.to_owned(),
            state: state as i32,
        }))
    }
}

async fn observe(State(service): State<&'static str>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let grpc = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    // Routes, not raw paths, keep the label set bounded; a gRPC path names one method.
    let route = if grpc {
        req.uri().path().to_owned()
    } else {
        req.extensions()
            .get::<MatchedPath>()
            .map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned())
    };
    let method = req.method().as_str().to_owned();
    let mut call = CallContext::from_headers(req.headers());
    let span = if crate::telemetry::otel_enabled() {
        use opentelemetry::trace::TraceContextExt;
        let span = request_span(service, &method, &route);
        let _ = span.set_parent(extract_trace(req.headers()));
        let trace_id = span.context().span().span_context().trace_id();
        span.record("trace_id", tracing::field::display(trace_id));
        Some(span)
    } else if CallContext::is_set() {
        // A hop over the in-memory transport runs in its caller's task, inside the request
        // span of the hop that entered this process, whose trace it carries: a span of its
        // own per hop cost a 4 KiB GET 4-13% of its CPU and told the log nothing the event's
        // target and fields do not (spans are per hop when they are exported, above).
        call.traceparent = req.headers().get(TRACEPARENT_HEADER).cloned();
        None
    } else {
        // The caller's trace (as the W3C propagator reads it), or a new one that every
        // downstream call joins.
        use opentelemetry::trace::TraceContextExt;
        let span = request_span(service, &method, &route);
        let remote = extract_trace(req.headers());
        let remote = remote.span().span_context().clone();
        if remote.is_valid() {
            span.record("trace_id", tracing::field::display(remote.trace_id()));
            call.traceparent = req.headers().get(TRACEPARENT_HEADER).cloned();
        } else {
            let (value, trace_id) = new_traceparent();
            span.record("trace_id", tracing::field::display(&trace_id));
            call.traceparent = Some(value);
        }
        Some(span)
    };

    let in_flight = metrics::gauge!("arca_requests_in_flight", "service" => service);
    in_flight.increment(1.0);
    let response = match &span {
        Some(span) => call.scope(next.run(req)).instrument(span.clone()).await,
        None => call.scope(next.run(req)).await,
    };
    in_flight.decrement(1.0);
    // One line per handled request at debug level, inside the span: with JSON logs it carries
    // the trace id, which is how one request is followed across hops without a collector.
    let code = response.status().as_u16();
    match &span {
        Some(span) => span.in_scope(|| tracing::debug!(status = code, "handled")),
        None => tracing::debug!(hop = service, route = %route, status = code, "handled"),
    }

    let status = match response.headers().get("grpc-status") {
        Some(code) => format!("grpc-{}", code.to_str().unwrap_or("?")),
        None => code.to_string(),
    };
    metrics::counter!(
        "arca_requests_total",
        "service" => service,
        "route" => route.clone(),
        "method" => method,
        "status" => status,
    )
    .increment(1);
    metrics::histogram!("arca_request_duration_seconds", "service" => service, "route" => route)
        .record(start.elapsed().as_secs_f64());
    response
}

/// The span of one request entering this process.
fn request_span(service: &'static str, method: &str, route: &str) -> tracing::Span {
    tracing::info_span!(
        "request",
        service,
        method = %method,
        route = %route,
        trace_id = tracing::field::Empty,
    )
}
