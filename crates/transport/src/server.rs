//! Serving a router on a bound listener until a shutdown token fires, then draining.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::Listener;
use crate::hub::MemTarget;
use crate::tls::{IdleTimeout, ServeOptions};

/// HTTP/2 windows sized for bulk data on loopback and LAN: the 64 KiB protocol default caps a
/// single stream at a few hundred MiB/s once round trips add up.
pub(crate) const H2_STREAM_WINDOW: u32 = 4 << 20;
pub(crate) const H2_CONN_WINDOW: u32 = 16 << 20;

/// The largest request or answer head an internal hop takes (h2's default is 16 KiB): at least
/// what the proxy lets a client send (`proxy.limits.max_header_bytes`), so a head the edge
/// accepted never fails a hop behind it.
pub(crate) const INTERNAL_MAX_HEADER_LIST: u32 = 1 << 20;

/// Concurrent streams one internal connection carries (hyper's default is 200). Callers keep
/// one connection per endpoint, so this bounds the requests in flight from one process to
/// another: 200 slow downloads would queue every other request behind them.
const INTERNAL_MAX_STREAMS: u32 = 1 << 16;

/// Streams a client may reset before the server has accepted them (h2's default is 20, then
/// GOAWAY ENHANCE_YOUR_CALM "too_many_resets"). The guard is for rapid-reset floods from the
/// internet; on an internal endpoint the client is our own proxy or service, which resets a
/// stream whenever its own client's upload breaks, and a crowd of those killed the
/// connection with every request on it.
const INTERNAL_PENDING_RESETS: usize = 1 << 16;

/// Serves `router` on `listener` until `shutdown` is cancelled, then stops accepting and waits
/// for every in-flight request (including response bodies still streaming) to finish.
///
/// The caller bounds the wait: the supervisor drops this future at its deadline.
pub async fn serve(
    listener: Listener,
    router: Router,
    shutdown: CancellationToken,
) -> io::Result<()> {
    serve_with(listener, router, shutdown, ServeOptions::default()).await
}

/// [`serve`] with edge options (TLS, timeouts) for socket listeners; in-memory listeners
/// ignore them, having no connections to protect.
pub async fn serve_with(
    listener: Listener,
    router: Router,
    shutdown: CancellationToken,
    options: ServeOptions,
) -> io::Result<()> {
    match listener {
        Listener::Mem(hub, name) => {
            let tracker = TaskTracker::new();
            hub.attach(
                &name,
                MemTarget {
                    router,
                    tracker: tracker.clone(),
                },
            );
            shutdown.cancelled().await;
            // Closing first makes new in-process calls fail fast as "unavailable" (so they can
            // go elsewhere) while calls already admitted run to completion.
            tracker.close();
            hub.detach(&name);
            tracker.wait().await;
            Ok(())
        }
        Listener::Tcp(listener) => {
            accept_loop(Sockets::Tcp(listener), router, shutdown, options).await
        }
        Listener::Unix(listener, path) => {
            accept_loop(Sockets::Unix(listener, path), router, shutdown, options).await
        }
    }
}

/// A socket listener being served; dropped as soon as serving stops.
enum Sockets {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, std::path::PathBuf),
}

enum Accepted {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Sockets {
    async fn accept(&self) -> io::Result<Accepted> {
        match self {
            Sockets::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                // Small gRPC frames must not wait for Nagle.
                let _ = stream.set_nodelay(true);
                Ok(Accepted::Tcp(stream))
            }
            Sockets::Unix(l, _) => Ok(Accepted::Unix(l.accept().await?.0)),
        }
    }

    /// Closes the listening socket (and removes a Unix socket's file), so that new clients
    /// are refused at once instead of waiting in the backlog of a server that will never
    /// accept them again.
    async fn close(self) {
        if let Sockets::Unix(listener, path) = self {
            drop(listener);
            let _ = tokio::fs::remove_file(&path).await;
        }
    }
}

async fn accept_loop(
    sockets: Sockets,
    router: Router,
    shutdown: CancellationToken,
    options: ServeOptions,
) -> io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONN_WINDOW);
    if !options.public {
        // Internal endpoints: no cap of h2's that normal traffic between our own services can
        // reach (the public edge keeps h2's guards against abusive clients).
        builder
            .http2()
            .max_concurrent_streams(INTERNAL_MAX_STREAMS)
            .max_pending_accept_reset_streams(INTERNAL_PENDING_RESETS)
            // Frames arriving for streams the server already reset and forgot (the rest of a
            // body it answered early) are each a "local error reset", 1,024 of them per
            // connection lifetime by default before GOAWAY: off, as on the client side.
            .max_local_error_reset_streams(None)
            .max_header_list_size(INTERNAL_MAX_HEADER_LIST);
    }
    edge_builder(&mut builder, &options);
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = sockets.accept() => match accepted {
                Ok(Accepted::Tcp(stream)) => {
                    let peer = stream.peer_addr().ok();
                    serve_edge(&builder, &graceful, &router, stream, peer, &options);
                }
                Ok(Accepted::Unix(stream)) => serve_edge(&builder, &graceful, &router, stream, None, &options),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning, keep serving the rest.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    sockets.close().await;
    // HTTP/2 connections get GOAWAY (streams already started finish), HTTP/1 connections close
    // after their current response; then we wait for them all.
    graceful.shutdown().await;
    Ok(())
}

/// The builder settings [`ServeOptions`] ask for.
fn edge_builder(builder: &mut auto::Builder<TokioExecutor>, options: &ServeOptions) {
    if let Some(timeout) = options.header_timeout {
        builder
            .http1()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(timeout);
    }
    if let Some(max) = options.max_header_bytes {
        // hyper's own cap (~400 KB) already bounds memory; raise it for a larger limit. h2
        // counts 32 bytes per field on top (RFC 9113 §6.5.2), hence the slack.
        if max > HYPER_DEFAULT_BUF {
            builder.http1().max_buf_size(max);
        }
        let list = u32::try_from(max.saturating_mul(2)).unwrap_or(u32::MAX);
        builder.http2().max_header_list_size(list.max(16 << 10));
    }
}

/// hyper's default `max_buf_size` for HTTP/1 (8 KiB + 400 KiB).
const HYPER_DEFAULT_BUF: usize = 8192 + 4096 * 100;

/// Serves one accepted connection as `options` say: under an idle deadline and, with TLS,
/// after a handshake that must finish within the header deadline. The handshake runs on the
/// connection's own task, so a slow client never holds up the accept loop.
fn serve_edge<S>(
    builder: &auto::Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
    router: &Router,
    stream: S,
    peer: Option<std::net::SocketAddr>,
    options: &ServeOptions,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    match (&options.tls, options.idle_timeout) {
        (None, None) => serve_connection(builder, graceful, router, stream, peer),
        (None, Some(idle)) => {
            serve_connection(
                builder,
                graceful,
                router,
                IdleTimeout::new(stream, Some(idle)),
                peer,
            );
        }
        (Some(tls), idle) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
            // Watched from accept on, so shutdown waits for (bounded) handshakes too.
            let watcher = graceful.watcher();
            let builder = builder.clone();
            let router = router.clone();
            let deadline = options.header_timeout.unwrap_or(Duration::from_secs(30));
            tokio::spawn(async move {
                let stream = IdleTimeout::new(stream, idle);
                let tls = match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!("TLS handshake timed out");
                        return;
                    }
                };
                let service = peer_service(&router, peer);
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
                if let Err(e) = watcher.watch(conn.into_owned()).await {
                    tracing::debug!(error = %crate::describe(&*e), "connection ended with an error");
                }
            });
        }
    }
}

fn serve_connection<S>(
    builder: &auto::Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
    router: &Router,
    stream: S,
    peer: Option<std::net::SocketAddr>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = peer_service(router, peer);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    let conn = graceful.watch(conn.into_owned());
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %crate::describe(&*e), "connection ended with an error");
        }
    });
}

/// `router` as a hyper service for one connection from `peer`.
fn peer_service(
    router: &Router,
    peer: Option<std::net::SocketAddr>,
) -> TowerToHyperService<
    impl tower::Service<
        http::Request<hyper::body::Incoming>,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
        Future = impl Send,
    > + Clone
    + Send
    + 'static,
> {
    // Every request learns which client address its connection came from (login throttling
    // counts per address); Unix-socket peers have none.
    let service = tower::ServiceExt::map_request(
        router.clone(),
        move |mut req: http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(PeerAddr(peer));
            req
        },
    );
    let service = tower::ServiceExt::map_response(service, ends_with_last_byte);
    TowerToHyperService::new(service)
}

/// A response whose length is declared ends with its last byte ([`EndAtLength`]), and no
/// response sends empty data frames ([`crate::body::NonEmpty`]).
fn ends_with_last_byte(resp: axum::response::Response) -> axum::response::Response {
    let declared = resp
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(remaining) if !http_body::Body::is_end_stream(resp.body()) => resp.map(|inner| {
            Body::new(EndAtLength {
                inner: crate::body::non_empty(inner),
                remaining,
            })
        }),
        _ => resp.map(crate::body::non_empty),
    }
}

/// A body that says it has ended as soon as the bytes its `Content-Length` declared are out.
///
/// Why: hyper asks a body `is_end_stream()` after each chunk to set END_STREAM on that DATA
/// frame. A streamed body (a file read, a body relayed from another hop) only knows it has
/// ended when polled once more, so hyper sends its last bytes and then an empty DATA frame
/// with END_STREAM. A client that stops reading at the declared length (hyper's HTTP/1 server
/// in the proxy does, writing to its client) drops the stream before that frame arrives and
/// resets it; the late frame then finds a stream h2 no longer remembers (it keeps 50 reset
/// streams), which h2 answers with a library reset it counts against a per-connection
/// lifetime cap (1,024, then GOAWAY ENHANCE_YOUR_CALM): under load the proxy killed its
/// connection to the frontend, and every request on it, every few thousand requests. Ending
/// on the last byte sends one DATA frame with END_STREAM and leaves nothing to arrive late.
/// A body declaring a length does not send trailers after it (none of ours does).
struct EndAtLength {
    inner: Body,
    remaining: u64,
}

impl http_body::Body for EndAtLength {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
            let len = data.map_or(0, |d| d.len() as u64);
            self.remaining = self.remaining.saturating_sub(len);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0 || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The client address of the connection a request arrived on (`None` over Unix sockets and
/// in memory).
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub Option<std::net::SocketAddr>);

/// A response body that keeps its in-memory server "busy" until it is fully sent or dropped.
pub(crate) struct TrackedBody {
    pub(crate) inner: Body,
    pub(crate) _token: TaskTrackerToken,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
