//! What travels with every call, on every transport: W3C trace context, the caller's identity
//! token and the request id.
//!
//! The server side of each hop scopes the handler in a [`CallContext`] taken from the request
//! headers; [`Channel`](crate::Channel) copies it onto every outgoing request made inside that
//! scope. Handlers never forward these headers by hand, so no hop can forget one.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The identity the proxy vouched for, as a signed token (verified by each service).
pub const IDENTITY_HEADER: HeaderName = HeaderName::from_static("x-arca-identity");
/// Correlates log lines of one client request across every hop.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Per-call values that must reach every downstream call.
#[derive(Clone, Debug, Default)]
pub struct CallContext {
    pub identity: Option<HeaderValue>,
    pub request_id: Option<HeaderValue>,
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
}

/// Adds trace context (from the current tracing span) and the current call's identity and
/// request id to an outgoing request; values the caller set explicitly are kept.
pub fn inject(headers: &mut HeaderMap) {
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut HeaderInjector(headers))
    });
    if let Ok(Some(())) = CURRENT.try_with(|call| {
        if let Some(v) = &call.identity {
            headers.entry(IDENTITY_HEADER).or_insert_with(|| v.clone());
        }
        if let Some(v) = &call.request_id {
            headers
                .entry(REQUEST_ID_HEADER)
                .or_insert_with(|| v.clone());
        }
        Some(())
    }) {}
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
