//! The per-process debug server: `/healthz`, `/readyz`, `/metrics`, and `/leases` (this
//! process's lease holds, [`Leases::holds`]).
//!
//! It runs on a thread and runtime of its own so probes are answered even when the main runtime
//! is saturated by traffic (a busy process is not a dead one), and one port serves the whole
//! process however many services it hosts.

use std::net::{SocketAddr, TcpListener as StdTcpListener};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::health::Health;
use crate::lease::Leases;

/// `/healthz` fails when the supervisor loop has not turned for this long: the main runtime is
/// wedged, and a restart is the right answer.
const HEARTBEAT_STALE_MS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
#[error("debug server on {addr}: {source}")]
pub struct DebugError {
    addr: String,
    #[source]
    source: std::io::Error,
}

#[derive(Clone)]
struct DebugState {
    health: Health,
    metrics: Option<PrometheusHandle>,
    leases: Option<Leases>,
}

/// A running debug server; dropping it stops the server and lets its thread end.
pub struct DebugServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl DebugServer {
    /// The address actually bound (`127.0.0.1:0` reports the port it got).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for DebugServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may have stopped already; then there is nobody to tell.
            let _ = stop.send(());
        }
    }
}

/// Binds `addr` now (so a bad or busy address fails the start) and serves on a dedicated
/// thread until the returned handle is dropped.
pub fn spawn(
    addr: &str,
    health: Health,
    metrics: Option<PrometheusHandle>,
    leases: Option<Leases>,
) -> Result<DebugServer, DebugError> {
    let err = |source| DebugError {
        addr: addr.to_owned(),
        source,
    };
    let listener = StdTcpListener::bind(addr).map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    let local = listener.local_addr().map_err(err)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(err)?;
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .route("/leases", get(lease_holds))
        .with_state(DebugState {
            health,
            metrics,
            leases,
        });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("arca-debug".into())
        .spawn(move || {
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => {
                        let stopped = async {
                            let _ = stopped.await;
                        };
                        if let Err(e) = axum::serve(listener, app)
                            .with_graceful_shutdown(stopped)
                            .await
                        {
                            tracing::error!(error = %e, "debug server stopped");
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "debug server could not start"),
                }
            });
        })
        .map_err(err)?;
    Ok(DebugServer {
        addr: local,
        stop: Some(stop),
    })
}

async fn healthz(State(s): State<DebugState>) -> Response {
    if s.health.since_heartbeat_ms() < HEARTBEAT_STALE_MS {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "supervisor loop stalled\n").into_response()
    }
}

async fn readyz(State(s): State<DebugState>) -> Response {
    let report = s.health.report();
    let code = if report.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(report)).into_response()
}

async fn render_metrics(State(s): State<DebugState>) -> Response {
    match s.metrics {
        Some(handle) => {
            handle.run_upkeep();
            (
                [(
                    axum::http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4",
                )],
                handle.render(),
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "metrics recorder not installed\n").into_response(),
    }
}

async fn lease_holds(State(s): State<DebugState>) -> Response {
    match s.leases {
        Some(leases) => axum::Json(leases.holds()).into_response(),
        None => (StatusCode::NOT_FOUND, "no lease store in this process\n").into_response(),
    }
}
