//! What the runtime adds to every router a service serves: the probe, per-route metrics, a
//! request span joined to the caller's trace, and the call context for downstream calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
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
        .layer(middleware::from_fn_with_state(Observer::new(name), observe))
}

/// A public router (the proxy's listener): observation only; the proxy authenticates itself.
pub(crate) fn public(router: Router, name: &'static str) -> Router {
    router.layer(middleware::from_fn_with_state(Observer::new(name), observe))
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

/// The metric handles of one router, made once per route: building a labelled key and
/// looking it up in the recorder's registry for three metrics at each of a request's hops
/// cost ~12% of a 4 KiB GET's CPU.
#[derive(Clone)]
struct Observer {
    service: &'static str,
    meters: Arc<Meters>,
}

struct Meters {
    /// Made on first use: a handle made before the recorder is installed would count nothing.
    in_flight: OnceLock<metrics::Gauge>,
    routes: Mutex<HashMap<String, Arc<RouteMeters>>>,
}

/// At most this many routes get handles kept; more (gRPC paths are whatever a caller sends)
/// are counted through the registry each time.
const MAX_ROUTES: usize = 512;

struct RouteMeters {
    route: String,
    duration: metrics::Histogram,
    /// By method and status: a route sees a handful of each.
    requests: Mutex<Vec<(http::Method, Status, metrics::Counter)>>,
}

/// An answer's status as the `status` label shows it: `200`, or `grpc-0` for a gRPC answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Http(u16),
    /// `None` for a grpc-status that is not a number.
    Grpc(Option<u16>),
}

impl Status {
    fn of(response: &Response) -> Self {
        match response.headers().get("grpc-status") {
            Some(code) => Status::Grpc(code.to_str().ok().and_then(|c| c.parse().ok())),
            None => Status::Http(response.status().as_u16()),
        }
    }

    fn label(self) -> String {
        match self {
            Status::Http(code) => code.to_string(),
            Status::Grpc(Some(code)) => format!("grpc-{code}"),
            Status::Grpc(None) => "grpc-?".to_owned(),
        }
    }
}

impl Observer {
    fn new(service: &'static str) -> Self {
        Observer {
            service,
            meters: Arc::new(Meters {
                in_flight: OnceLock::new(),
                routes: Mutex::default(),
            }),
        }
    }

    fn in_flight(&self) -> &metrics::Gauge {
        let service = self.service;
        self.meters
            .in_flight
            .get_or_init(|| metrics::gauge!("arca_requests_in_flight", "service" => service))
    }

    fn route(&self, route: &str) -> Arc<RouteMeters> {
        // Plain maps of handles: a panic elsewhere while holding the lock leaves them usable.
        let mut routes = self
            .meters
            .routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(meters) = routes.get(route) {
            return Arc::clone(meters);
        }
        let meters = Arc::new(RouteMeters {
            route: route.to_owned(),
            duration: metrics::histogram!(
                "arca_request_duration_seconds",
                "service" => self.service,
                "route" => route.to_owned()
            ),
            requests: Mutex::default(),
        });
        if routes.len() < MAX_ROUTES {
            routes.insert(route.to_owned(), Arc::clone(&meters));
        }
        meters
    }
}

impl RouteMeters {
    fn count(&self, service: &'static str, method: &http::Method, status: Status) {
        let mut requests = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, _, counter)) = requests
            .iter()
            .find(|(m, s, _)| m == method && *s == status)
        {
            counter.increment(1);
            return;
        }
        let counter = metrics::counter!(
            "arca_requests_total",
            "service" => service,
            "route" => self.route.clone(),
            "method" => method.as_str().to_owned(),
            "status" => status.label(),
        );
        counter.increment(1);
        requests.push((method.clone(), status, counter));
    }
}

async fn observe(State(observer): State<Observer>, req: Request, next: Next) -> Response {
    let service = observer.service;
    let start = Instant::now();
    let grpc = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    // Routes, not raw paths, keep the label set bounded; a gRPC path names one method.
    let meters = if grpc {
        observer.route(req.uri().path())
    } else {
        observer.route(
            req.extensions()
                .get::<MatchedPath>()
                .map_or("unmatched", |m| m.as_str()),
        )
    };
    let route = meters.route.as_str();
    let method = req.method().clone();
    let mut call = CallContext::from_headers(req.headers());
    let span = if crate::telemetry::otel_enabled() {
        use opentelemetry::trace::TraceContextExt;
        let span = request_span(service, method.as_str(), route);
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
        let span = request_span(service, method.as_str(), route);
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

    let in_flight = observer.in_flight();
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

    meters.count(service, &method, Status::of(&response));
    meters.duration.record(start.elapsed().as_secs_f64());
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
