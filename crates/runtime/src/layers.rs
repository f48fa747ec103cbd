//! What the runtime adds to every router a service serves: the probe, per-route metrics, a
//! request span joined to the caller's trace, and the call context for downstream calls.

use std::time::Instant;

use arca_proto::v1::probe_server::{Probe, ProbeServer};
use arca_proto::v1::{CheckRequest, CheckResponse, State as ProbeState};
use arca_transport::context::{CallContext, extract_trace};
use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use tower::ServiceExt;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::health::Health;

/// The internal router: the service's own routes, the probe, and observation.
pub(crate) fn internal(router: Router, name: &'static str, health: Health) -> Router {
    let probe = ProbeServer::new(ProbeImpl { name, health });
    router
        .route_service(
            "/arca.v1.Probe/{*rest}",
            probe.map_request(|r: Request| r.map(tonic::body::Body::new)),
        )
        .layer(middleware::from_fn_with_state(name, observe))
}

/// A public router (the proxy's listener): observation only.
pub(crate) fn public(router: Router, name: &'static str) -> Router {
    router.layer(middleware::from_fn_with_state(name, observe))
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
    let span = tracing::info_span!(
        "request",
        service,
        method = %method,
        route = %route,
        trace_id = tracing::field::Empty,
    );
    let _ = span.set_parent(extract_trace(req.headers()));
    {
        use opentelemetry::trace::TraceContextExt;
        let trace_id = span.context().span().span_context().trace_id();
        span.record("trace_id", tracing::field::display(trace_id));
    }
    let call = CallContext::from_headers(req.headers());

    let in_flight = metrics::gauge!("arca_requests_in_flight", "service" => service);
    in_flight.increment(1.0);
    let response = call.scope(next.run(req)).instrument(span).await;
    in_flight.decrement(1.0);

    let status = match response.headers().get("grpc-status") {
        Some(code) => format!("grpc-{}", code.to_str().unwrap_or("?")),
        None => response.status().as_u16().to_string(),
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
