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

/// HTTP/2 windows sized for bulk data on loopback and LAN: the 64 KiB protocol default caps a
/// single stream at a few hundred MiB/s once round trips add up.
pub(crate) const H2_STREAM_WINDOW: u32 = 4 << 20;
pub(crate) const H2_CONN_WINDOW: u32 = 16 << 20;

/// Serves `router` on `listener` until `shutdown` is cancelled, then stops accepting and waits
/// for every in-flight request (including response bodies still streaming) to finish.
///
/// The caller bounds the wait: the supervisor drops this future at its deadline.
pub async fn serve(
    listener: Listener,
    router: Router,
    shutdown: CancellationToken,
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
        Listener::Tcp(listener) => accept_loop(Sockets::Tcp(listener), router, shutdown).await,
        Listener::Unix(listener, path) => {
            accept_loop(Sockets::Unix(listener, path), router, shutdown).await
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
) -> io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONN_WINDOW);
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = sockets.accept() => match accepted {
                Ok(Accepted::Tcp(stream)) => {
                    let peer = stream.peer_addr().ok();
                    serve_connection(&builder, &graceful, &router, stream, peer);
                }
                Ok(Accepted::Unix(stream)) => serve_connection(&builder, &graceful, &router, stream, None),
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

fn serve_connection<S>(
    builder: &auto::Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
    router: &Router,
    stream: S,
    peer: Option<std::net::SocketAddr>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Every request learns which client address its connection came from (login throttling
    // counts per address); Unix-socket peers have none.
    let service = tower::ServiceExt::map_request(
        router.clone(),
        move |mut req: http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(PeerAddr(peer));
            req
        },
    );
    let service = TowerToHyperService::new(service);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    let conn = graceful.watch(conn.into_owned());
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "connection ended with an error");
        }
    });
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
