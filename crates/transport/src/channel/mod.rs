//! The client side: a [`Channel`] per service name that picks an endpoint per request.
//!
//! Why per request: a client that pins one connection for its lifetime never sends traffic to
//! instances started after it, and keeps sending to one that is going away. Here every request
//! reads the service's current endpoint set (a `watch` fed by the registry), prefers an
//! in-process instance, otherwise picks the less loaded of two random endpoints, and retries
//! failures that provably happened before the request was processed on another endpoint
//! ([`classify`] says which those are).
//!
//! A request that may have been processed goes again only when repeating it has the effect of
//! sending it once — an idempotent HTTP method (RFC 9110 §9.2.2, WebDAV's PROPFIND), or a gRPC
//! method its proto declares `idempotency_level` IDEMPOTENT or NO_SIDE_EFFECTS
//! ([`RetryPolicy::idempotent_calls`]) — and its body is whole in memory. So that a PUT can go
//! again, an idempotent request's body is kept until its answer when it declares a length of
//! at most [`RetryPolicy::max_buffered_body`] (`transport.retry.max_buffered_body`); a larger
//! one streams through once. A retry budget per channel caps how many extra requests retries
//! of possibly processed requests may add; a request that provably was not processed costs no
//! server anything and is not budgeted.
//!
//! A GET whose answer breaks off after its head was passed on continues from another endpoint
//! with a `Range` request ([`resume`]).
//!
//! Every call that failed at least once is counted in
//! `arca_transport_failed_calls_total{service,endpoint,outcome}`, `endpoint` being where it
//! first failed and `outcome` one of `retried-ok`, `retried-failed`, `failed-unretryable`
//! (it may have been processed and cannot go again), `caller-body` (the caller's own request
//! body broke: its client hung up or sent less than it declared), `resumed-ok` and
//! `resume-failed` (an answer body broke off). Each is also an event on the caller's span and
//! the attribute `arca.call.outcome` on it.

mod classify;
mod pool;
mod replay;
mod resume;

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response, header};
use http_body_util::BodyExt as _;
use tokio::sync::watch;
use tower::ServiceExt;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use self::classify::{BodyState, Decision, Failure, Outcome, classify, decide, is_idempotent};
use self::pool::{Pool, Slot, exchange};
use self::replay::Replayable;
use self::resume::{Again, Promise, Resuming};
use crate::body::{BodyFault, non_empty};
use crate::guard::RetryBudget;
use crate::server::TrackedBody;
use crate::{BoxError, Endpoint, EndpointSet, MemHub, Registry};

/// How hard a channel tries before giving up.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Attempts per request (the first try included): on other endpoints first, then on a
    /// fresh connection to one already tried, so a service with one endpoint is retried too.
    pub max_attempts: usize,
    pub connect_timeout: Duration,
    /// Base pause before a retry; a random part up to the same amount is added.
    pub backoff: Duration,
    /// The largest request body kept in memory so that the request can go again: an
    /// idempotent request declaring at most this many bytes waits for its whole body before
    /// it is sent. A process takes it from `transport.retry.max_buffered_body` (the default is
    /// arca-config's); [`RetryPolicy::default`] keeps none.
    pub max_buffered_body: usize,
    /// gRPC paths (`/package.Service/Method`) that are idempotent although they are POSTs.
    pub idempotent_calls: &'static [&'static str],
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            connect_timeout: Duration::from_secs(2),
            backoff: Duration::from_millis(5),
            max_buffered_body: 0,
            idempotent_calls: &[],
        }
    }
}

impl RetryPolicy {
    fn idempotent(&self, method: &http::Method, path: &str) -> bool {
        is_idempotent(method) || self.idempotent_calls.contains(&path)
    }
}

/// Hands out [`Channel`]s by service name. One per process: channels share its connections.
#[derive(Clone)]
pub struct Clients {
    hub: MemHub,
    registry: Arc<dyn Registry>,
    pool: Arc<Pool>,
    policy: RetryPolicy,
    channels: Arc<Mutex<HashMap<String, Channel>>>,
}

impl Clients {
    pub fn new(hub: MemHub, registry: Arc<dyn Registry>, policy: RetryPolicy) -> Self {
        Self {
            hub,
            registry,
            pool: Arc::default(),
            policy,
            channels: Arc::default(),
        }
    }

    /// A channel to `service`; the same one for every caller in this process.
    pub fn channel(&self, service: &str) -> Channel {
        let mut map = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(service.to_owned())
            .or_insert_with(|| Channel {
                inner: Arc::new(Inner {
                    service: service.to_owned(),
                    hub: self.hub.clone(),
                    endpoints: self.registry.watch(service),
                    pool: self.pool.clone(),
                    budget: RetryBudget::new(),
                    policy: self.policy.clone(),
                }),
            })
            .clone()
    }

    pub fn registry(&self) -> &Arc<dyn Registry> {
        &self.registry
    }

    pub fn hub(&self) -> &MemHub {
        &self.hub
    }
}

/// A client for one service name, usable as a tonic transport and as an HTTP client.
///
/// Errors are [`tonic::Status`] values, so gRPC stubs report them as-is and HTTP callers can
/// read them with [`Channel::failure`]: `CANCELLED` when the caller's own request body broke,
/// `UNAVAILABLE` when no endpoint could take the call.
#[derive(Clone)]
pub struct Channel {
    inner: Arc<Inner>,
}

struct Inner {
    service: String,
    hub: MemHub,
    endpoints: watch::Receiver<EndpointSet>,
    pool: Arc<Pool>,
    policy: RetryPolicy,
    budget: RetryBudget,
}

/// Why a call through a [`Channel`] failed, as an HTTP caller answers its own client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFailure<'a> {
    /// The request body the caller handed over broke (its client hung up mid-upload, or
    /// sent less than it declared): the caller's client is at fault (400).
    CallerBody(&'a str),
    /// No endpoint could take the call, or it failed where it cannot be sent again: worth a
    /// retry later (503 with `Retry-After`).
    Unavailable(&'a str),
}

impl Channel {
    /// The service this channel reaches.
    pub fn service(&self) -> &str {
        &self.inner.service
    }

    /// The endpoints currently known for the service (in-process instance not included).
    pub fn endpoints(&self) -> EndpointSet {
        self.inner.endpoints.borrow().clone()
    }

    /// What an error from this channel means for the caller's client.
    pub fn failure(err: &BoxError) -> CallFailure<'_> {
        match err.downcast_ref::<tonic::Status>() {
            Some(s) if s.code() == tonic::Code::Cancelled => CallFailure::CallerBody(s.message()),
            Some(s) => CallFailure::Unavailable(s.message()),
            None => CallFailure::Unavailable("transport error"),
        }
    }
}

impl<B> tower::Service<Request<B>> for Channel
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<Body>, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is per endpoint and decided per request; the channel itself never blocks.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let mut req = req.map(Body::new);
        crate::context::inject(req.headers_mut());
        Box::pin(async move { inner.call(req).await.map_err(BoxError::from) })
    }
}

/// Whether `req` is a gRPC call.
fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The largest answer [`Inner::call_whole`] reads: above the largest Storage API answer a
/// client takes (arca-proto's `MAX_STORAGE_ANSWER`, 128 MiB).
const MAX_WHOLE_ANSWER: usize = 256 << 20;

/// The `Retry-After` (seconds) of a 503 answered because no instance could take a request:
/// about the time a restarting instance's callers need to learn where the others are.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 1;

/// `CANCELLED`: the caller's request body broke (see [`CallFailure::CallerBody`]).
fn caller_body(why: &str) -> tonic::Status {
    tonic::Status::cancelled(format!("request body broke off: {why}"))
}

impl Inner {
    async fn call(self: &Arc<Self>, req: Request<Body>) -> Result<Response<Body>, tonic::Status> {
        // An instance in this process wins: no socket, no serialization of the HTTP exchange.
        if let Some(target) = self.hub.get(&self.service) {
            let token = target.tracker.token();
            let Ok(resp) = target.router.oneshot(req).await;
            return Ok(resp.map(|inner| {
                Body::new(TrackedBody {
                    inner,
                    _token: token,
                })
            }));
        }
        if self.answered_whole(&req) {
            return self.call_whole(req).await;
        }
        let method = req.method().clone();
        let grpc = is_grpc(&req);
        let again = Again {
            uri: req.uri().clone(),
            headers: req.headers().clone(),
        };
        let (resp, from) = self.fetch(req, None).await?;
        let (head, body) = resp.into_parts();
        let body = match Promise::of(&method, &head) {
            Some(promise) => Body::new(Resuming::new(self.clone(), again, promise, body, from)),
            // Any other gRPC answer that breaks off (a call that may not go twice, a stream)
            // says UNAVAILABLE, "try later": tonic would report the bare h2 error as INTERNAL,
            // and clients would hear 500 for an instance that died under their call.
            None if grpc => Body::new(body.map_err(move |e| {
                tonic::Status::unavailable(format!("{from}: the answer broke off: {e}"))
            })),
            None => body,
        };
        Ok(Response::from_parts(head, body))
    }

    /// Whether `req` is a gRPC call its proto declares idempotent: [`Inner::call_whole`]
    /// reads its answer to the end before passing it on.
    fn answered_whole(&self, req: &Request<Body>) -> bool {
        is_grpc(req) && self.policy.idempotent_calls.contains(&req.uri().path())
    }

    /// An idempotent gRPC call, answered whole. Its answer is one message (with its trailers)
    /// that the stub decodes into memory anyway, so it is read to the end here: an answer
    /// that breaks off after its head (the instance killed mid-answer) is then a failure like
    /// one before the answer, and the call goes again to another endpoint within the retry
    /// budget. Passed on as it was, that break reached the stub as an h2 error, which tonic
    /// reports as INTERNAL: a client's PROPFIND answered 500 while an instance died.
    async fn call_whole(
        self: &Arc<Self>,
        req: Request<Body>,
    ) -> Result<Response<Body>, tonic::Status> {
        let (parts, body) = req.into_parts();
        let sent = body
            .collect()
            .await
            .map_err(|e| caller_body(&e.to_string()))?
            .to_bytes();
        let mut broke: Option<Endpoint> = None;
        let mut last_error = String::new();
        for _ in 0..self.policy.max_attempts.max(1) {
            let req = Request::from_parts(parts.clone(), Body::from(sent.clone()));
            let (resp, from) = self.fetch(req, broke.clone()).await?;
            let (head, body) = resp.into_parts();
            match http_body_util::Limited::new(body, MAX_WHOLE_ANSWER)
                .collect()
                .await
            {
                Ok(whole) => {
                    if let Some(first) = &broke {
                        self.count_resume(first, "resumed-ok");
                        tracing::info!(
                            service = %self.service, from = %first, to = %from,
                            error = %last_error, "an answer broke off; asked another endpoint"
                        );
                    }
                    let trailers = whole.trailers().cloned();
                    let frames = [
                        Some(http_body::Frame::data(whole.to_bytes())),
                        trailers.map(http_body::Frame::trailers),
                    ];
                    let frames = frames
                        .into_iter()
                        .flatten()
                        .map(Ok::<_, std::convert::Infallible>);
                    let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
                    return Ok(Response::from_parts(head, Body::new(body)));
                }
                Err(e) => {
                    last_error = format!("{from}: the answer broke off: {e}");
                    broke = Some(from);
                    if !self.budget.withdraw() {
                        break;
                    }
                }
            }
        }
        if let Some(last) = &broke {
            self.count_resume(last, "resume-failed");
        }
        tracing::warn!(service = %self.service, error = %last_error, "internal call failed");
        Err(tonic::Status::unavailable(last_error))
    }

    /// The request on a remote endpoint (not `avoid`, while another can take it), retried as
    /// the module docs say: the answer, and the endpoint it came from.
    async fn fetch(
        &self,
        req: Request<Body>,
        avoid: Option<Endpoint>,
    ) -> Result<(Response<Body>, Endpoint), tonic::Status> {
        let set = self.endpoints.borrow().clone();
        if set.is_empty() {
            let message = format!(
                "{}: no endpoint known (not hosted here, none registered)",
                self.service
            );
            self.count(None, "failed-unretryable", &message, 0);
            return Err(tonic::Status::unavailable(message));
        }
        let (parts, body) = req.into_parts();
        let idempotent = self.policy.idempotent(&parts.method, parts.uri.path());
        let grpc = parts
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let limit = self.policy.max_buffered_body;
        // Waiting for a body is safe only where its client sends it whole regardless of the
        // answer: not a gRPC call (it may stream), not a body declared larger than we keep.
        let wait = idempotent && !grpc && declared.is_none_or(|n| n <= limit as u64);
        let fault = BodyFault::default();
        let mut body = Replayable::prepare(body, limit, wait, &fault)
            .await
            .map_err(|why| caller_body(&why))?;

        self.budget.deposit();
        let mut tried: Vec<&Endpoint> = Vec::with_capacity(self.policy.max_attempts + 1);
        if let Some(avoid) = &avoid
            && set.len() > 1
        {
            tried.push(avoid);
        }
        let mut first_failure: Option<Endpoint> = None;
        let mut attempts = 0;
        let mut last_error = String::new();
        while attempts < self.policy.max_attempts.max(1) {
            let Some(endpoint) = self.pool.pick(&set, &tried) else {
                break;
            };
            tried.push(endpoint);
            if attempts > 0 {
                tokio::time::sleep(jitter(self.policy.backoff)).await;
            }
            attempts += 1;
            if let Endpoint::Mem(name) = endpoint {
                last_error = format!("{endpoint}: not served in this process ({name})");
                first_failure.get_or_insert_with(|| endpoint.clone());
                continue;
            }
            let slot = self.pool.slot(endpoint);
            // Past its cooldown, an open breaker lets this request through as its probe; when
            // every endpoint's breaker is open the pick falls back to them all, and this goes
            // anyway: a breaker only ever steers traffic, it never refuses it.
            slot.breaker.admit();
            let conn = match slot.sender(endpoint, &self.policy).await {
                Ok(c) => c,
                Err(e) => {
                    // Nothing was sent: any request may go elsewhere.
                    last_error = format!("connect {endpoint}: {e}");
                    metrics::counter!("arca_transport_connect_failures_total", "service" => self.service.clone())
                        .increment(1);
                    self.failed(endpoint, &slot, &last_error);
                    first_failure.get_or_insert_with(|| endpoint.clone());
                    if decide(Failure::Connect, idempotent, body_state(&body)) == Decision::Fail {
                        break;
                    }
                    continue;
                }
            };
            let Some(req_body) = body.take() else {
                break;
            };
            let req = rebuild(&parts, &self.service, non_empty(req_body));
            let _inflight = slot.begin();
            let Some(result) = exchange(conn.sender.clone(), req).await else {
                last_error = format!("{endpoint}: the exchange task was lost");
                self.count(Some(endpoint), "failed-unretryable", &last_error, attempts);
                return Err(tonic::Status::unavailable(last_error));
            };
            match result {
                Ok(resp) => {
                    slot.breaker.success();
                    if let Some(first) = &first_failure {
                        self.count(Some(first), "retried-ok", &last_error, attempts);
                    }
                    return Ok((resp.map(Body::new), endpoint.clone()));
                }
                Err(mut e) => {
                    last_error = format!("{endpoint}: {}", crate::describe(e.error()));
                    first_failure.get_or_insert_with(|| endpoint.clone());
                    if let Some(unsent) = e.take_message() {
                        // The connection refused the request before any byte of it was written.
                        body.put_back(unsent.into_body());
                        slot.reset(conn.id);
                        if decide(Failure::HandedBack, idempotent, body_state(&body))
                            == Decision::Fail
                        {
                            break;
                        }
                        continue;
                    }
                    if let Some(why) = fault.get() {
                        // The caller's body broke, not the endpoint or its connection.
                        self.count(Some(endpoint), "caller-body", why, attempts);
                        return Err(caller_body(why));
                    }
                    // A refused stream or one above a GOAWAY is a server draining as it
                    // should, or a connection given up before the request reached it: not
                    // the endpoint's failure.
                    let outcome = classify(e.error());
                    if outcome == Outcome::Unknown {
                        self.failed(endpoint, &slot, &last_error);
                    }
                    let state = body_state(&body);
                    // Only retries of what may have been processed are budgeted: a request
                    // that never reached a server adds no load to any.
                    let again = match decide(Failure::Sent(outcome), idempotent, state) {
                        Decision::Again => true,
                        Decision::AgainIfBudgeted => self.budget.withdraw(),
                        Decision::Fail => false,
                    };
                    if again {
                        tracing::debug!(
                            service = %self.service,
                            error = %last_error,
                            "retrying a request that failed before its answer"
                        );
                        slot.reset(conn.id);
                        continue;
                    }
                    let outcome = if attempts > 1 {
                        "retried-failed"
                    } else {
                        "failed-unretryable"
                    };
                    self.count(first_failure.as_ref(), outcome, &last_error, attempts);
                    return Err(tonic::Status::unavailable(last_error));
                }
            }
        }
        let message = format!(
            "{}: no endpoint took the call after {attempts} attempt(s): {last_error}",
            self.service
        );
        let outcome = if attempts > 1 {
            "retried-failed"
        } else {
            "failed-unretryable"
        };
        self.count(first_failure.as_ref(), outcome, &message, attempts);
        Err(tonic::Status::unavailable(message))
    }

    /// Counts a failure to reach `endpoint` against its breaker.
    fn failed(&self, endpoint: &Endpoint, slot: &Slot, error: &str) {
        if slot.breaker.failure() {
            tracing::warn!(
                service = %self.service,
                %endpoint,
                %error,
                "endpoint keeps failing; sending its share elsewhere for a while"
            );
            metrics::counter!("arca_transport_breaker_opened_total", "service" => self.service.clone())
                .increment(1);
        }
    }

    /// Counts a call that failed at least once, and marks the caller's span with it.
    fn count(
        &self,
        endpoint: Option<&Endpoint>,
        outcome: &'static str,
        error: &str,
        attempts: usize,
    ) {
        let endpoint = endpoint.map_or_else(|| "none".to_owned(), Endpoint::to_string);
        metrics::counter!(
            "arca_transport_failed_calls_total",
            "service" => self.service.clone(),
            "endpoint" => endpoint.clone(),
            "outcome" => outcome,
        )
        .increment(1);
        let span = tracing::Span::current();
        span.set_attribute("arca.call.outcome", outcome);
        span.set_attribute("arca.call.attempts", attempts as i64);
        match outcome {
            // Nothing registered (yet): the caller's own log says what it was waiting for
            // (a dependency probe at start, most often).
            _ if attempts == 0 => tracing::debug!(
                service = %self.service, outcome, %error, "internal call failed"
            ),
            "retried-ok" => tracing::info!(
                service = %self.service, %endpoint, outcome, attempts, %error,
                "internal call failed and was retried"
            ),
            "caller-body" => tracing::debug!(
                service = %self.service, %endpoint, outcome, %error,
                "internal call failed: the caller's request body broke"
            ),
            _ => tracing::warn!(
                service = %self.service, %endpoint, outcome, attempts, %error,
                "internal call failed"
            ),
        }
    }

    /// Counts an answer body that broke off (`resumed-ok` or `resume-failed`).
    fn count_resume(&self, endpoint: &Endpoint, outcome: &'static str) {
        metrics::counter!(
            "arca_transport_failed_calls_total",
            "service" => self.service.clone(),
            "endpoint" => endpoint.to_string(),
            "outcome" => outcome,
        )
        .increment(1);
        tracing::Span::current().set_attribute("arca.call.outcome", outcome);
    }
}

/// A fresh HTTP/2 request from the original's head. HTTP/2 needs an absolute URI (`:scheme`
/// and `:authority`); the service name stands in as the authority, as tonic's origin would.
fn rebuild(parts: &http::request::Parts, service: &str, body: Body) -> Request<Body> {
    let mut req = Request::new(body);
    *req.method_mut() = parts.method.clone();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    *req.uri_mut() = http::Uri::builder()
        .scheme("http")
        .authority(service)
        .path_and_query(path)
        .build()
        .unwrap_or_else(|_| parts.uri.clone());
    *req.version_mut() = http::Version::HTTP_2;
    *req.headers_mut() = parts.headers.clone();
    req
}

fn jitter(base: Duration) -> Duration {
    base + base.mul_f64(random_unit())
}

/// A cheap, well-spread random number in [0, 1); no cryptographic use.
fn random_unit() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    thread_local!(static STATE: RandomState = RandomState::new());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let h = STATE.with(|s| s.hash_one(n));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// What the retry decision needs to know of a request's body.
fn body_state(body: &Replayable) -> BodyState {
    BodyState {
        can_replay: body.can_replay(),
        whole: body.is_whole(),
    }
}
