//! How a process ends: a graceful stop that lets in-flight downloads finish, the drain delay,
//! the shutdown deadline, a second signal, and a service failing at run time.
//!
//! Slow downloads and run-time failures come from `arca-fixture` (the real runtime, proxy and
//! storage-system around fixture services); whatever the real binary can show runs on `arca`.

use std::time::{Duration, Instant};

use arca_tests::{
    AS_ADMIN, Launch, TempDir, assert_stopped_in_reverse_dependency_order, get, request,
};
use http_body_util::BodyExt;

const FIXTURE: &str = env!("CARGO_BIN_EXE_arca-fixture");
/// Deadline for states that take milliseconds when all is well.
const WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn sigterm_lets_an_in_flight_download_finish_then_exits_0() -> anyhow::Result<()> {
    const MS: u64 = 1500;
    const BYTES: usize = 1_000_003;
    const TIMEOUT: Duration = Duration::from_secs(10);
    let dir = TempDir::new();
    let mut fx = Launch::fixture(FIXTURE, &dir, "proxy,frontend,storage-system")
        .env("ARCA_SHUTDOWN_TIMEOUT", "10s")
        .spawn()?;
    fx.wait_ready(WITHIN).await?;

    // The response head arrives at once; the body streams for MS milliseconds.
    let resp = request(
        &fx.public,
        &format!("/slow?ms={MS}&bytes={BYTES}"),
        &AS_ADMIN,
    )
    .await?;
    let requested = Instant::now();
    assert_eq!(resp.status(), 200);
    let download = tokio::spawn(async move {
        let body = resp.into_body().collect().await.map(|b| b.to_bytes());
        (body, Instant::now())
    });

    fx.proc.sigterm();
    let signalled = Instant::now();
    let report = fx
        .wait_readyz(WITHIN, "/readyz 503 after SIGTERM", |status, _| {
            status == 503
        })
        .await?;
    let unready = Instant::now();
    assert_eq!(report["status"], "draining", "{report}");

    let (body, finished) = download.await?;
    let body = body?;
    assert_eq!(body.len(), BYTES, "the download was cut short");
    assert!(body.iter().all(|b| *b == b'x'));
    assert!(
        finished.duration_since(requested) >= Duration::from_millis(MS * 8 / 10),
        "the download ended early: the test proves nothing"
    );
    assert!(
        unready + Duration::from_millis(500) < finished,
        "not ready only {:?} after SIGTERM, {:?} before the download ended",
        unready - signalled,
        finished.saturating_duration_since(unready)
    );

    assert_eq!(fx.proc.exit_code(TIMEOUT).await?, Some(0));
    assert!(signalled.elapsed() < TIMEOUT, "{:?}", signalled.elapsed());
    assert_stopped_in_reverse_dependency_order(
        &fx.proc,
        &["proxy", "frontend"],
        &[("proxy", "frontend")],
    );
    Ok(())
}

#[tokio::test]
async fn requests_during_the_drain_delay_still_succeed() -> anyhow::Result<()> {
    const DRAIN: Duration = Duration::from_secs(2);
    let dir = TempDir::new();
    let mut arca = Launch::arca(&dir)
        .set("shutdown.drain_delay", "2s")
        .set("shutdown.timeout", "10s")
        .spawn()?;
    arca.wait_ready(WITHIN).await?;

    arca.proc.sigterm();
    let signalled = Instant::now();
    let report = arca
        .wait_readyz(WITHIN, "/readyz 503 after SIGTERM", |status, _| {
            status == 503
        })
        .await?;
    assert_eq!(report["status"], "draining", "{report}");
    // Not ready, yet still serving new connections: peers are still catching up.
    let status = arca.get("/status.php").await?;
    assert_eq!(status.status, 200, "{}", status.text());
    assert_eq!(status.json()?["installed"], true);
    assert!(
        signalled.elapsed() < DRAIN,
        "answered only after the drain delay: the test proves nothing"
    );

    assert_eq!(arca.proc.exit_code(WITHIN).await?, Some(0));
    let elapsed = signalled.elapsed();
    assert!(
        elapsed >= DRAIN,
        "exited after {elapsed:?}, before the drain delay"
    );
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    Ok(())
}

#[tokio::test]
async fn a_download_outliving_the_shutdown_deadline_is_abandoned_with_exit_1() -> anyhow::Result<()>
{
    const TIMEOUT: Duration = Duration::from_millis(300);
    let dir = TempDir::new();
    let mut fx = Launch::fixture(FIXTURE, &dir, "proxy,frontend,storage-system")
        .env("ARCA_SHUTDOWN_TIMEOUT", "300ms")
        .spawn()?;
    fx.wait_ready(WITHIN).await?;
    let resp = request(&fx.public, "/slow?ms=20000&bytes=1000", &AS_ADMIN).await?;
    assert_eq!(resp.status(), 200);
    let download = tokio::spawn(resp.into_body().collect());

    fx.proc.sigterm();
    let signalled = Instant::now();
    assert_eq!(fx.proc.exit_code(WITHIN).await?, Some(1));
    let elapsed = signalled.elapsed();
    assert!(
        elapsed >= TIMEOUT,
        "gave up after {elapsed:?}, before the deadline"
    );
    assert!(
        elapsed < TIMEOUT + Duration::from_secs(2),
        "took {elapsed:?}"
    );
    let abandoned = fx
        .proc
        .events_with("still busy at the shutdown deadline; abandoning it");
    assert!(
        abandoned.iter().any(|e| e["fields"]["service"] == "proxy"),
        "the straggler is not named: {abandoned:?}\n{}",
        fx.proc.stderr_tail(20)
    );
    // The client sees the cut, not a short body passed off as complete.
    assert!(
        download.await?.is_err(),
        "the abandoned download looked complete"
    );
    Ok(())
}

#[tokio::test]
async fn second_signal_during_the_drain_delay_forces_exit_130() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut arca = Launch::arca(&dir)
        .set("shutdown.drain_delay", "30s")
        .spawn()?;
    arca.wait_ready(WITHIN).await?;

    arca.proc.signal(libc::SIGINT);
    // Only once the first signal is seen and the drain delay began: two pending signals would
    // merge into one.
    arca.wait_readyz(WITHIN, "/readyz 503 after SIGINT", |status, body| {
        status == 503 && body["status"] == "draining"
    })
    .await?;
    arca.proc
        .wait_event(WITHIN, "the drain delay to begin", |e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("draining"))
        })
        .await?;
    arca.proc.sigterm();
    let second = Instant::now();
    assert_eq!(arca.proc.exit_code(WITHIN).await?, Some(130));
    assert!(
        second.elapsed() < Duration::from_secs(2),
        "forced exit took {:?}",
        second.elapsed()
    );
    assert!(
        !arca
            .proc
            .events_with("second signal: exiting now")
            .is_empty(),
        "{}",
        arca.proc.stderr_tail(10)
    );
    Ok(())
}

#[tokio::test]
async fn a_service_failing_at_run_time_stops_the_others_in_order_and_exits_1() -> anyhow::Result<()>
{
    let dir = TempDir::new();
    let mut fx = Launch::fixture(FIXTURE, &dir, "proxy,frontend,gateway,storage-system").spawn()?;
    fx.wait_ready(WITHIN).await?;

    let told = get(&fx.public, "/fail", &AS_ADMIN).await?;
    assert_eq!(told.status, 202, "{}", told.text());
    assert_eq!(fx.proc.exit_code(WITHIN).await?, Some(1));

    let failed = fx.proc.events_with("service failed; stopping the others");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["fields"]["service"], "gateway");
    assert_eq!(failed[0]["fields"]["cause"], "fixture failure");
    assert!(
        fx.proc
            .stderr()
            .iter()
            .any(|l| l == "arca-fixture: service gateway failed: fixture failure"),
        "{}",
        fx.proc.stderr_tail(10)
    );
    assert_stopped_in_reverse_dependency_order(
        &fx.proc,
        &["proxy", "frontend", "gateway"],
        &[("proxy", "frontend"), ("frontend", "gateway")],
    );
    Ok(())
}

#[tokio::test]
async fn a_panicking_service_is_a_failure_too() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut fx = Launch::fixture(FIXTURE, &dir, "proxy,frontend,gateway,storage-system").spawn()?;
    fx.wait_ready(WITHIN).await?;

    let told = get(&fx.public, "/panic", &AS_ADMIN).await?;
    assert_eq!(told.status, 202, "{}", told.text());
    assert_eq!(fx.proc.exit_code(WITHIN).await?, Some(1));
    let failed = fx.proc.events_with("service failed; stopping the others");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["fields"]["service"], "gateway");
    assert_eq!(failed[0]["fields"]["cause"], "panicked: fixture panic");
    assert_stopped_in_reverse_dependency_order(
        &fx.proc,
        &["proxy", "frontend", "gateway"],
        &[("proxy", "frontend"), ("frontend", "gateway")],
    );
    Ok(())
}

#[tokio::test]
async fn a_service_failing_while_others_start_fails_the_process() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut fx = Launch::fixture(FIXTURE, &dir, "proxy,frontend,gateway,storage-system")
        .env("FIXTURE_FAIL_AFTER_MS", "0")
        .spawn()?;
    assert_eq!(fx.proc.exit_code(WITHIN).await?, Some(1));
    let failed = fx.proc.events_with("service failed; stopping the others");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["fields"]["service"], "gateway");
    assert_eq!(failed[0]["fields"]["cause"], "fixture failure");
    // Services still starting (waiting for the gateway) are stopped all the same, in order.
    assert_stopped_in_reverse_dependency_order(
        &fx.proc,
        &["proxy", "frontend", "gateway"],
        &[("proxy", "frontend"), ("frontend", "gateway")],
    );
    Ok(())
}

#[tokio::test]
async fn a_stopping_proxy_does_not_leave_new_connections_hanging() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut fx = Launch::fixture(FIXTURE, &dir, "proxy,frontend,storage-system").spawn()?;
    fx.wait_ready(WITHIN).await?;
    // Keeps the proxy busy stopping for 3 s.
    let resp = request(&fx.public, "/slow?ms=3000&bytes=1000", &AS_ADMIN).await?;
    let download = tokio::spawn(resp.into_body().collect());

    fx.proc.sigterm();
    fx.proc
        .wait_event(WITHIN, "the proxy to begin stopping", |e| {
            e["fields"]["message"] == "readiness changed"
                && e["fields"]["service"] == "proxy"
                && e["fields"]["ready"] == false
        })
        .await?;
    // No drain delay: the proxy no longer serves new connections. It must refuse them (or
    // answer them), not accept them into a backlog nobody reads until the process exits.
    let attempt = tokio::time::timeout(
        Duration::from_secs(1),
        get(&fx.public, "/slow?ms=0&bytes=10", &AS_ADMIN),
    )
    .await;
    assert!(
        attempt.is_ok(),
        "a new connection hung while the proxy finished an old request: {attempt:?}"
    );
    assert_eq!(download.await?.map(|b| b.to_bytes().len()).ok(), Some(1000));
    assert_eq!(fx.proc.exit_code(WITHIN).await?, Some(0));
    Ok(())
}
