//! The client side: a [`Channel`] per service name that picks an endpoint per request.
//!
//! Why per request: a client that pins one connection for its lifetime never sends traffic to
//! instances started after it, and keeps sending to one that is going away. Here every request
//! reads the service's current endpoint set (a `watch` fed by the registry), prefers an
//! in-process instance, otherwise picks the less loaded of two random endpoints, and retries
//! failures that provably happened before the request was processed on another endpoint.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::watch;
use tower::ServiceExt;

use crate::server::{H2_CONN_WINDOW, H2_STREAM_WINDOW, TrackedBody};
use crate::{BoxError, Endpoint, EndpointSet, MemHub, Registry};

/// Bodies up to this size that are complete at send time are kept so the request can be
/// replayed on another endpoint; larger or still-streaming bodies are retried only when the
/// transport hands the unsent request back.
const REPLAY_LIMIT: usize = 64 * 1024;

/// How hard a channel tries before giving up.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Attempts per request, across distinct endpoints (the first try included).
    pub max_attempts: usize,
    pub connect_timeout: Duration,
    /// Base pause before a retry; a random part up to the same amount is added.
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            connect_timeout: Duration::from_secs(2),
            backoff: Duration::from_millis(5),
        }
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
/// Errors are [`tonic::Status`] values (`UNAVAILABLE` when no endpoint could take the call), so
/// gRPC stubs report them as-is and HTTP callers can read the code.
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

impl Inner {
    async fn call(&self, req: Request<Body>) -> Result<Response<Body>, tonic::Status> {
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
        let set = self.endpoints.borrow().clone();
        if set.is_empty() {
            return Err(tonic::Status::unavailable(format!(
                "{}: no endpoint known (not hosted here, none registered)",
                self.service
            )));
        }

        let (parts, body) = req.into_parts();
        let mut body = Replayable::prepare(body).await?;
        let mut tried: Vec<&Endpoint> = Vec::with_capacity(self.policy.max_attempts);
        let mut last_error = String::new();
        for attempt in 0..self.policy.max_attempts.max(1) {
            let Some(endpoint) = self.pool.pick(&set, &tried) else {
                break;
            };
            tried.push(endpoint);
            if attempt > 0 {
                tokio::time::sleep(jitter(self.policy.backoff)).await;
            }
            if let Endpoint::Mem(name) = endpoint {
                last_error = format!("{endpoint}: not served in this process ({name})");
                continue;
            }
            let slot = self.pool.slot(endpoint);
            let mut sender = match slot.sender(endpoint, &self.policy).await {
                Ok(s) => s,
                Err(e) => {
                    last_error = format!("connect {endpoint}: {e}");
                    continue;
                }
            };
            let Some(req_body) = body.take() else {
                break;
            };
            let req = rebuild(&parts, &self.service, req_body);
            let _inflight = slot.begin();
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(resp.map(Body::new)),
                Err(mut e) => {
                    last_error = format!("{endpoint}: {}", e.error());
                    if let Some(unsent) = e.take_message() {
                        // The connection refused the request before any byte of it was written.
                        body.put_back(unsent.into_body());
                        slot.reset();
                        continue;
                    }
                    if is_refused(e.error()) && body.can_replay() {
                        // REFUSED_STREAM / GOAWAY: the server did not process it (RFC 9113 §8.7).
                        slot.reset();
                        continue;
                    }
                    return Err(tonic::Status::unavailable(last_error));
                }
            }
        }
        Err(tonic::Status::unavailable(format!(
            "{}: no endpoint took the call after {} attempt(s): {last_error}",
            self.service,
            tried.len()
        )))
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

/// Whether the server provably did not process the request: it refused the stream, or
/// announced a graceful shutdown (GOAWAY NO_ERROR) that excluded it (RFC 9113 §6.8, §8.7).
/// A connection that merely died mid-request is ambiguous and is not retried.
fn is_refused(err: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away()
                    && h2.is_remote()
                    && h2.reason() == Some(h2::Reason::NO_ERROR));
        }
        source = e.source();
    }
    false
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

/// A request body that can be sent again when it is small and complete.
enum Replayable {
    Full(Bytes),
    Stream(Option<Body>),
}

impl Replayable {
    async fn prepare(mut body: Body) -> Result<Self, tonic::Status> {
        use http_body::Body as _;
        if body.is_end_stream() {
            return Ok(Replayable::Full(Bytes::new()));
        }
        // Only what is ready right now is gathered: waiting here would deadlock a streaming
        // call whose client sends more only after it sees a response.
        let mut buf = BytesMut::new();
        loop {
            match body.frame().now_or_never() {
                Some(None) => return Ok(Replayable::Full(buf.freeze())),
                Some(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if buf.len() + data.len() <= REPLAY_LIMIT => {
                        buf.extend_from_slice(&data)
                    }
                    Ok(data) => {
                        buf.extend_from_slice(&data);
                        return Ok(Self::prefixed(buf.freeze(), None, body));
                    }
                    Err(frame) => return Ok(Self::prefixed(buf.freeze(), Some(frame), body)),
                },
                Some(Some(Err(e))) => {
                    return Err(tonic::Status::invalid_argument(format!(
                        "request body: {e}"
                    )));
                }
                None => return Ok(Self::prefixed(buf.freeze(), None, body)),
            }
        }
    }

    fn prefixed(prefix: Bytes, trailers: Option<Frame<Bytes>>, rest: Body) -> Self {
        Replayable::Stream(Some(Body::new(Prefixed {
            prefix: (!prefix.is_empty()).then_some(prefix),
            trailers,
            rest,
        })))
    }

    fn take(&mut self) -> Option<Body> {
        match self {
            Replayable::Full(bytes) => Some(Body::from(bytes.clone())),
            Replayable::Stream(body) => body.take(),
        }
    }

    fn put_back(&mut self, body: Body) {
        if let Replayable::Stream(slot) = self {
            *slot = Some(body);
        }
    }

    fn can_replay(&self) -> bool {
        matches!(self, Replayable::Full(_) | Replayable::Stream(Some(_)))
    }
}

/// A body whose first bytes were already read: yields them, then the rest.
struct Prefixed {
    prefix: Option<Bytes>,
    trailers: Option<Frame<Bytes>>,
    rest: Body,
}

impl http_body::Body for Prefixed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}

/// Connections to remote endpoints, shared by every channel of the process.
#[derive(Default)]
struct Pool {
    slots: Mutex<HashMap<Endpoint, Arc<Slot>>>,
}

impl Pool {
    fn slot(&self, endpoint: &Endpoint) -> Arc<Slot> {
        let mut map = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(endpoint.clone()).or_default().clone()
    }

    /// Power of two choices over the endpoints not tried yet for this request.
    fn pick<'a>(&self, set: &'a [Endpoint], tried: &[&Endpoint]) -> Option<&'a Endpoint> {
        let candidates: Vec<&Endpoint> = set.iter().filter(|e| !tried.contains(e)).collect();
        match candidates.len() {
            0 => None,
            1 => Some(candidates[0]),
            n => {
                let a = (random_unit() * n as f64) as usize % n;
                let b = (a + 1 + (random_unit() * (n - 1) as f64) as usize % (n - 1)) % n;
                let (ea, eb) = (candidates[a], candidates[b]);
                Some(if self.load(ea) <= self.load(eb) {
                    ea
                } else {
                    eb
                })
            }
        }
    }

    fn load(&self, endpoint: &Endpoint) -> usize {
        let map = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(endpoint)
            .map_or(0, |s| s.inflight.load(Ordering::Relaxed))
    }
}

/// One endpoint's HTTP/2 connection (multiplexed: one is enough) and its load.
#[derive(Default)]
struct Slot {
    current: Mutex<Option<SendRequest<Body>>>,
    /// Held while connecting, so concurrent callers share one attempt instead of stampeding a
    /// recovering endpoint; never held on the fast path.
    connecting: tokio::sync::Mutex<()>,
    inflight: AtomicUsize,
}

struct InflightGuard<'a>(&'a AtomicUsize);

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Slot {
    fn begin(&self) -> InflightGuard<'_> {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        InflightGuard(&self.inflight)
    }

    fn open_sender(&self) -> Option<SendRequest<Body>> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().filter(|s| !s.is_closed()).cloned()
    }

    /// A ready sender, connecting if there is none or the old connection died.
    async fn sender(
        &self,
        endpoint: &Endpoint,
        policy: &RetryPolicy,
    ) -> io::Result<SendRequest<Body>> {
        if let Some(mut sender) = self.open_sender()
            && sender.ready().await.is_ok()
        {
            return Ok(sender);
        }
        let _connecting = self.connecting.lock().await;
        // Someone else may have reconnected while we waited for the lock.
        if let Some(mut sender) = self.open_sender()
            && sender.ready().await.is_ok()
        {
            return Ok(sender);
        }
        let sender = tokio::time::timeout(policy.connect_timeout, connect(endpoint))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender.clone());
        Ok(sender)
    }

    /// Forgets the connection so the next call dials again (after GOAWAY or a refused stream).
    fn reset(&self) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

async fn connect(endpoint: &Endpoint) -> io::Result<SendRequest<Body>> {
    match endpoint {
        Endpoint::Tcp(addr) => {
            let stream = TcpStream::connect(addr.as_str()).await?;
            stream.set_nodelay(true)?;
            handshake(stream).await
        }
        Endpoint::Unix(path) => handshake(UnixStream::connect(path).await?).await,
        Endpoint::Mem(name) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("mem://{name} is not served in this process"),
        )),
    }
}

async fn handshake<S>(stream: S) -> io::Result<SendRequest<Body>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONN_WINDOW)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "client connection ended");
        }
    });
    Ok(sender)
}
