//! Riding through a database restart: a service's calls that failed because its database was
//! out of reach for a moment are run again, server-side, until they succeed or a deadline
//! passes.
//!
//! Only what is safe to repeat is repeated: calls of the methods the protos declare idempotent
//! ([`arca_proto::IDEMPOTENT_CALLS`]) whose failure carries [`arca_proto::RETRYABLE`] — a
//! store sets it on a failure that provably changed nothing (the connection was lost or
//! refused before the statement took effect). A restart of PostgreSQL (`pg_ctl restart -m
//! fast`) then costs the clients a short wait, not an error; past the deadline they hear 503
//! with `Retry-After`, never 500.

use std::time::Duration;

use tokio::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::StatusCode;

/// A unary request message is small; anything larger is not repeated.
const MAX_REPEATED_BODY: usize = 1 << 20;
/// The first wait before running a call again, doubled each time up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(50);
const MAX_WAIT: Duration = Duration::from_secs(1);

/// `router` with its idempotent gRPC calls run again while they fail as retryable, for at
/// most `deadline` (zero: never).
pub fn retry_unavailable(router: Router, deadline: Duration) -> Router {
    if deadline.is_zero() {
        return router;
    }
    router.layer(middleware::from_fn_with_state(deadline, retry))
}

async fn retry(State(deadline): State<Duration>, req: Request, next: Next) -> Response {
    if !arca_proto::IDEMPOTENT_CALLS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REPEATED_BODY).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request message too large").into_response();
    };
    let started = Instant::now();
    let mut wait = FIRST_WAIT;
    let mut attempt = 1u32;
    loop {
        let again = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
        let resp = next.clone().run(again).await;
        if !retryable(&resp) || started.elapsed() + wait > deadline {
            if attempt > 1 {
                tracing::info!(
                    path = %parts.uri.path(),
                    attempts = attempt,
                    waited_ms = started.elapsed().as_millis() as u64,
                    succeeded = !retryable(&resp),
                    "a call was run again while the database was unavailable"
                );
            }
            return resp;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_WAIT);
        attempt += 1;
    }
}

/// A unary gRPC failure answered at once ("trailers-only": the status in the headers) that
/// carries the retryable mark.
fn retryable(resp: &Response) -> bool {
    resp.headers().contains_key(arca_proto::RETRYABLE)
        && resp
            .headers()
            .get("grpc-status")
            .is_some_and(|s| s.as_bytes() != b"0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use axum::routing::post;
    use tower::ServiceExt as _;

    /// A handler failing as retryable `fails` times, then answering OK.
    fn flaky(fails: u32) -> (Router, Arc<AtomicU32>) {
        let calls = Arc::new(AtomicU32::new(0));
        let seen = Arc::clone(&calls);
        let answer = move || {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            async move {
                let mut resp = StatusCode::OK.into_response();
                if n < fails {
                    resp.headers_mut().insert(
                        "grpc-status",
                        "14".parse().unwrap_or_else(|_| unreachable!()),
                    );
                    resp.headers_mut().insert(
                        arca_proto::RETRYABLE,
                        "1".parse().unwrap_or_else(|_| unreachable!()),
                    );
                } else {
                    resp.headers_mut().insert(
                        "grpc-status",
                        "0".parse().unwrap_or_else(|_| unreachable!()),
                    );
                }
                resp
            }
        };
        let router = Router::new()
            .route("/arca.v1.Storage/Stat", post(answer.clone()))
            .route("/arca.v1.Storage/Delete", post(answer));
        (router, calls)
    }

    async fn call(router: Router, path: &str) -> Response {
        let req = Request::post(path)
            .body(Body::from("x"))
            .unwrap_or_default();
        router.oneshot(req).await.unwrap_or_else(|e| match e {})
    }

    #[tokio::test(start_paused = true)]
    async fn idempotent_calls_are_run_again_until_they_succeed_within_the_deadline() {
        let (router, calls) = flaky(3);
        let resp = call(
            retry_unavailable(router, Duration::from_secs(15)),
            "/arca.v1.Storage/Stat",
        )
        .await;
        assert_eq!(resp.headers()["grpc-status"], "0");
        assert_eq!(calls.load(Ordering::SeqCst), 4);

        // Past the deadline, the failure goes back to the caller.
        let (router, calls) = flaky(100);
        let resp = call(
            retry_unavailable(router, Duration::from_secs(2)),
            "/arca.v1.Storage/Stat",
        )
        .await;
        assert_eq!(resp.headers()["grpc-status"], "14");
        assert!(calls.load(Ordering::SeqCst) < 10);
    }

    #[tokio::test(start_paused = true)]
    async fn other_calls_are_never_repeated() {
        let (router, calls) = flaky(1);
        let resp = call(
            retry_unavailable(router, Duration::from_secs(15)),
            "/arca.v1.Storage/Delete",
        )
        .await;
        assert_eq!(resp.headers()["grpc-status"], "14");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
