//! What travels with every call, on every transport: W3C trace context, the caller's identity
//! token, the request id and the client program the request came from.
//!
//! The server side of each hop scopes the handler in a [`CallContext`] taken from the request
//! headers; [`Channel`](crate::Channel) copies it onto every outgoing request made inside that
//! scope. Handlers never forward these headers by hand, so no hop can forget one.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The identity the proxy vouched for, as a signed token (verified by each service).
pub const IDENTITY_HEADER: HeaderName = HeaderName::from_static(IDENTITY);
/// [`IDENTITY_HEADER`]'s name as a static str, the key tonic metadata takes.
pub const IDENTITY: &str = "x-arca-identity";
/// Correlates log lines of one client request across every hop.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// The client program the request came from (its `User-Agent` as the proxy saw it): who
/// removed what is recorded with it, so that one client's mass delete can be found and undone.
/// Only the proxy sets it from outside: a client's own value is dropped there.
pub const CLIENT_HEADER: HeaderName = HeaderName::from_static("x-arca-client");
/// W3C trace context: `00-TRACE_ID-PARENT_ID-FLAGS`.
pub const TRACEPARENT_HEADER: HeaderName = HeaderName::from_static("traceparent");

/// Per-call values that must reach every downstream call.
#[derive(Clone, Debug, Default)]
pub struct CallContext {
    pub identity: Option<HeaderValue>,
    pub request_id: Option<HeaderValue>,
    /// [`CLIENT_HEADER`].
    pub client: Option<HeaderValue>,
    /// The trace to join, when no OpenTelemetry tracer carries it (see [`inject`]).
    pub traceparent: Option<HeaderValue>,
}

tokio::task_local! {
    static CURRENT: CallContext;
}

impl CallContext {
    /// Reads the propagated values from an incoming request.
    pub fn from_headers(headers: &HeaderMap) -> Self {
        Self {
            identity: headers.get(IDENTITY_HEADER).cloned(),
            request_id: headers.get(REQUEST_ID_HEADER).cloned(),
            client: headers.get(CLIENT_HEADER).cloned(),
            traceparent: None,
        }
    }

    /// Runs `fut` with this context as the current one.
    pub async fn scope<F: Future>(self, fut: F) -> F::Output {
        CURRENT.scope(self, fut).await
    }

    /// The context of the call being handled, if any.
    pub fn current() -> Option<CallContext> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// The client program of the call being handled, `""` when unknown.
    pub fn current_client() -> String {
        CURRENT
            .try_with(|call| {
                call.client
                    .as_ref()
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            })
            .unwrap_or_default()
    }

    /// Whether a call is being handled in this task: a request that arrives over the
    /// in-memory transport runs inside its caller's.
    pub fn is_set() -> bool {
        CURRENT.try_with(|_| ()).is_ok()
    }
}

/// Adds trace context and the current call's identity and request id to an outgoing request;
/// values the caller set explicitly are kept. The trace context comes from the current
/// tracing span when an OpenTelemetry tracer is installed, else from the current call's
/// `traceparent` (passed on as it came: without a tracer there are no spans to parent).
pub fn inject(headers: &mut HeaderMap) {
    use opentelemetry::trace::TraceContextExt as _;
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_valid() {
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&cx, &mut HeaderInjector(headers))
        });
    }
    if let Ok(Some(())) = CURRENT.try_with(|call| {
        if let Some(v) = &call.identity {
            headers.entry(IDENTITY_HEADER).or_insert_with(|| v.clone());
        }
        if let Some(v) = &call.request_id {
            headers
                .entry(REQUEST_ID_HEADER)
                .or_insert_with(|| v.clone());
        }
        if let Some(v) = &call.client {
            headers.entry(CLIENT_HEADER).or_insert_with(|| v.clone());
        }
        if let Some(v) = &call.traceparent {
            headers
                .entry(TRACEPARENT_HEADER)
                .or_insert_with(|| v.clone());
        }
        Some(())
    }) {}
}

/// A `traceparent` starting a new trace (sampled), and its trace id.
pub fn new_traceparent() -> (HeaderValue, String) {
    let trace = new_request_id();
    let parent = &new_request_id()[..16];
    let value = HeaderValue::from_str(&format!("00-{trace}-{parent}-01")).unwrap_or_else(|_| {
        HeaderValue::from_static("00-00000000000000000000000000000001-0000000000000001-01")
    });
    (value, trace)
}

/// The remote parent span context carried by an incoming request (empty if none).
pub fn extract_trace(headers: &HeaderMap) -> opentelemetry::Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)))
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(key), HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// A fresh random request id: 128 bits as 32 hex digits.
pub fn new_request_id() -> String {
    use std::hash::{BuildHasher, RandomState};
    // Two independently keyed SipHashes of a counter: unique and unpredictable enough for
    // correlation ids (they are not secrets).
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (a, b) = (
        RandomState::new().hash_one(n),
        RandomState::new().hash_one(!n),
    );
    format!("{a:016x}{b:016x}")
}

#[cfg(test)]
mod tests {
    use opentelemetry::propagation::TextMapPropagator as _;
    use opentelemetry::trace::TraceContextExt as _;

    use super::*;

    /// What [`new_traceparent`] starts is a trace the W3C propagator reads back, with the id
    /// it returned.
    #[test]
    fn a_new_traceparent_is_valid_w3c_trace_context() {
        let (value, trace) = new_traceparent();
        let mut headers = HeaderMap::new();
        headers.insert(TRACEPARENT_HEADER, value);
        let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .extract(&HeaderExtractor(&headers));
        let read = cx.span().span_context().clone();
        assert!(read.is_valid());
        assert_eq!(read.trace_id().to_string(), trace);
        assert!(read.is_sampled());
    }
}
