//! Connections to remote endpoints, one multiplexed HTTP/2 connection per endpoint, shared by
//! every channel of the process; and how an endpoint is picked for a request.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpStream, UnixStream};

use super::{RetryPolicy, random_unit};
use crate::Endpoint;
use crate::guard::Breaker;
use crate::server::{H2_CONN_WINDOW, H2_STREAM_WINDOW, INTERNAL_MAX_HEADER_LIST};

#[derive(Default)]
pub(super) struct Pool {
    slots: Mutex<HashMap<Endpoint, Arc<Slot>>>,
}

impl Pool {
    pub(super) fn slot(&self, endpoint: &Endpoint) -> Arc<Slot> {
        let mut map = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(endpoint.clone()).or_default().clone()
    }

    /// Power of two choices over the endpoints not tried yet for this request; once every one
    /// was, over all of them again (a retry then goes out on a fresh connection).
    /// Endpoints whose breaker is open are left out while any other can be chosen.
    pub(super) fn pick<'a>(
        &self,
        set: &'a [Endpoint],
        tried: &[&Endpoint],
    ) -> Option<&'a Endpoint> {
        let healthy = |e: &&Endpoint| !self.open(e);
        let untried = |e: &&Endpoint| !tried.contains(e);
        let mut candidates: Vec<&Endpoint> =
            set.iter().filter(|e| untried(e) && healthy(e)).collect();
        // An endpoint this request has not tried, even with its breaker open, before one that
        // has just failed it: when the endpoint taking all traffic dies, its breaker is still
        // closed for a few requests, and retrying it would fail them while the other (open
        // since some earlier blip, so never probed) was never asked. Seen in CI.
        if candidates.is_empty() {
            candidates = set.iter().filter(untried).collect();
        }
        if candidates.is_empty() {
            candidates = set.iter().filter(healthy).collect();
        }
        if candidates.is_empty() {
            candidates = set.iter().collect();
        }
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

    pub(super) fn open(&self, endpoint: &Endpoint) -> bool {
        let map = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(endpoint).is_some_and(|s| s.breaker.is_open())
    }

    fn load(&self, endpoint: &Endpoint) -> usize {
        let map = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(endpoint)
            .map_or(0, |s| s.inflight.load(Ordering::Relaxed))
    }
}

/// One endpoint's HTTP/2 connection (multiplexed: one is enough) and its load.
#[derive(Default)]
pub(super) struct Slot {
    current: Mutex<Option<Conn>>,
    /// Held while connecting, so concurrent callers share one attempt instead of stampeding a
    /// recovering endpoint; never held on the fast path.
    connecting: tokio::sync::Mutex<()>,
    inflight: AtomicUsize,
    pub(super) breaker: Breaker,
}

/// One client connection.
#[derive(Clone)]
pub(super) struct Conn {
    /// Tells this connection from the one that replaces it, so a request failing on an old
    /// connection does not drop a new one another request just made.
    pub(super) id: u64,
    pub(super) sender: SendRequest<Body>,
}

pub(super) struct InflightGuard<'a>(&'a AtomicUsize);

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Slot {
    pub(super) fn begin(&self) -> InflightGuard<'_> {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        InflightGuard(&self.inflight)
    }

    fn open_conn(&self) -> Option<Conn> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().filter(|c| !c.sender.is_closed()).cloned()
    }

    /// A ready connection, connecting if there is none or the old one died.
    pub(super) async fn sender(
        &self,
        endpoint: &Endpoint,
        policy: &RetryPolicy,
    ) -> io::Result<Conn> {
        if let Some(mut conn) = self.open_conn()
            && conn.sender.ready().await.is_ok()
        {
            return Ok(conn);
        }
        let _connecting = self.connecting.lock().await;
        // Someone else may have reconnected while we waited for the lock.
        if let Some(mut conn) = self.open_conn()
            && conn.sender.ready().await.is_ok()
        {
            return Ok(conn);
        }
        let conn = tokio::time::timeout(policy.connect_timeout, connect(endpoint))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets connection `id` so the next call dials again (after GOAWAY or a refused
    /// stream); a newer connection stays.
    pub(super) fn reset(&self, id: u64) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|c| c.id == id) {
            *current = None;
        }
    }
}

async fn connect(endpoint: &Endpoint) -> io::Result<Conn> {
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

/// Reset streams a client connection remembers (h2's default is 50). h2 drops frames that
/// arrive for a stream it reset and remembers; one it forgot gets a STREAM_CLOSED reset of its
/// own, a "protocol error" h2 counts against a cap for the connection's lifetime. Every
/// request a client abandons (the proxy's clients hang up mid-request) is a reset stream, and
/// its answer is usually already on the way.
const RESET_STREAMS_REMEMBERED: usize = 4096;

/// An HTTP/2 client connection over `stream`, driven by a task of its own.
pub(super) async fn handshake<S>(stream: S) -> io::Result<Conn>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    static IDS: AtomicU64 = AtomicU64::new(0);
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONN_WINDOW)
        .max_concurrent_reset_streams(RESET_STREAMS_REMEMBERED)
        // The lifetime cap on locally reset streams (1,024 by default) guards a server against
        // clients that make it reset streams; on this side of an internal hop it only ever
        // fired on late frames of abandoned requests, and then h2 sent GOAWAY
        // ENHANCE_YOUR_CALM and failed every request on the connection, a few times a minute
        // under load. The peer is one of our own services; the cap is off.
        .max_local_error_reset_streams(None)
        // An answer head may be as large as what the server side of our hops takes.
        .max_header_list_size(INTERNAL_MAX_HEADER_LIST)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %crate::describe(&e), "client connection ended");
        }
    });
    Ok(Conn {
        id: IDS.fetch_add(1, Ordering::Relaxed),
        sender,
    })
}

/// How long a request whose caller went away may still wait for its answer head.
const ABANDONED_GRACE: Duration = Duration::from_secs(30);

/// What sending one request gave: the answer head, or why not (with the request handed back
/// when it never left).
pub(super) type Exchanged =
    Result<Response<hyper::body::Incoming>, hyper::client::conn::TrySendError<Request<Body>>>;

/// Sends `req` and waits for the answer head on a task of its own, so that a caller that goes
/// away (its client hung up, so the proxy or a service dropped the call) does not reset the
/// stream: the exchange goes on until the head arrives (then the answer is dropped), for at
/// most [`ABANDONED_GRACE`].
///
/// Why: a stream reset right after its HEADERS often reaches the server before the server has
/// accepted the stream, and h2 allows a connection only 20 such streams at a time before it
/// sends GOAWAY ENHANCE_YOUR_CALM ("too_many_resets", its guard against rapid-reset floods),
/// failing every request on the connection. A crowd of clients hanging up did exactly that to
/// the frontend and storage-users. The request already left, so the server does the work
/// either way; letting it finish also spares it a cancelled half-done operation. `None` if
/// the task died (a panic in hyper).
pub(super) async fn exchange(
    mut sender: SendRequest<Body>,
    req: Request<Body>,
) -> Option<Exchanged> {
    // Dropped with this future: tells the task nobody is waiting any more.
    let (_waiting, gone) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let send = sender.try_send_request(req);
        tokio::select! {
            result = send => Some(result),
            () = async {
                let _ = gone.await;
                tokio::time::sleep(ABANDONED_GRACE).await;
            } => None,
        }
    });
    task.await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_tries_other_endpoints_first_then_any() {
        let pool = Pool::default();
        let set: Vec<Endpoint> = ["tcp://a:1", "tcp://b:1"]
            .iter()
            .map(|e| e.parse().unwrap())
            .collect();
        for _ in 0..20 {
            let first = pool.pick(&set, &[]).unwrap();
            let second = pool.pick(&set, &[first]).unwrap();
            assert_ne!(first, second);
            assert!(pool.pick(&set, &[first, second]).is_some());
        }
        assert!(pool.pick(&[], &[]).is_none());
    }

    #[test]
    fn a_retry_prefers_an_untried_endpoint_with_an_open_breaker_over_the_one_that_failed() {
        let pool = Pool::default();
        let (a, b): (Endpoint, Endpoint) =
            ("tcp://a:1".parse().unwrap(), "tcp://b:1".parse().unwrap());
        let set = vec![a.clone(), b.clone()];
        let open_b = pool.slot(&b);
        for _ in 0..crate::guard::OPEN_AFTER {
            open_b.breaker.failure();
        }
        assert!(pool.open(&b));
        for _ in 0..20 {
            // First attempts avoid the open breaker...
            assert_eq!(pool.pick(&set, &[]), Some(&a));
            // ...but a retry after `a` failed goes to `b`, not to `a` again.
            assert_eq!(pool.pick(&set, &[&a]), Some(&b));
        }
    }
}
