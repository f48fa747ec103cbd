//! Zero failed client requests across the proxy → frontend hop, with real `arca` processes on
//! loopback TCP found through a static registry (issue 7, balancing and retry).
//!
//! - Clients hanging up mid-request by the thousand (each one makes the proxy reset its stream
//!   to the frontend, whose answer is already on the way) while other clients run a WebDAV
//!   load: not one of theirs fails. Before the fix, h2 in the proxy counted the late answers
//!   of the abandoned streams as protocol errors, and at 1,024 of them sent GOAWAY
//!   ENHANCE_YOUR_CALM and failed every request on the connection with 503.
//! - One of two frontend processes is SIGTERMed under the same load while the static registry
//!   still lists it: requests caught by its shutdown and those sent to its closed port go to
//!   the other one, and not one fails.
//!
//! The counts are printed (`cargo test -- --nocapture` shows them).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arca_tests::{Launch, Load, LoadExtra, Server, TempDir, assert_no_failures, free_addr, send};
use tokio::io::AsyncWriteExt;

const SECRET: &str = "retry-secret-0123456789abcdef0123";
const PASSWORD: &str = "retry-pass";
/// `admin:retry-pass`, as HTTP Basic.
const BASIC: &str = "Basic YWRtaW46cmV0cnktcGFzcw==";
const AUTH: [(&str, &str); 1] = [("authorization", BASIC)];
const READY: Duration = Duration::from_secs(30);
/// A file big enough that its answer is several DATA frames.
const BIG: usize = 48 * 1024;

/// The tests share two cores: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn tcp() -> String {
    format!("tcp://{}", free_addr())
}

/// proxy | `fronts` × (frontend + gateway in memory) | storage-users + storage-system +
/// sharing, on TCP, found through static registries.
struct Deployment {
    _dirs: Vec<TempDir>,
    back: Server,
    fronts: Vec<Server>,
    proxy: Server,
}

async fn deploy(fronts: usize) -> anyhow::Result<Deployment> {
    deploy_listing(fronts, &[]).await
}

/// [`deploy`], with the proxy's registry also listing `dead` frontend endpoints nothing
/// serves.
async fn deploy_listing(fronts: usize, dead: &[String]) -> anyhow::Result<Deployment> {
    let dirs: Vec<TempDir> = (0..fronts + 2).map(|_| TempDir::new()).collect();
    let (users, system, sharing) = (tcp(), tcp(), tcp());
    let frontends: Vec<String> = (0..fronts).map(|_| tcp()).collect();
    let launch = |dir: &TempDir, services: &str| {
        Launch::arca(dir)
            .services(services)
            .set("identity.secret", SECRET)
            .set("shutdown.drain_delay", "0s")
            .env("ARCA_ADMIN_PASSWORD", PASSWORD)
    };
    // The back process calls only its own services: the in-memory registry finds them.
    let back = launch(&dirs[0], "storage-users,storage-system,sharing")
        .set("storage-users.endpoint", &users)
        .set("storage-system.endpoint", &system)
        .set("sharing.endpoint", &sharing)
        .spawn()?;
    let mut front_servers = Vec::new();
    for (dir, endpoint) in dirs[1..=fronts].iter().zip(&frontends) {
        front_servers.push(
            launch(dir, "frontend,gateway")
                .set("registry.kind", "static")
                .set("frontend.endpoint", endpoint)
                .set("registry.static.storage-users", &users)
                .set("registry.static.storage-system", &system)
                .set("registry.static.sharing", &sharing)
                .spawn()?,
        );
    }
    let proxy = launch(&dirs[fronts + 1], "proxy")
        .set("registry.kind", "static")
        .set(
            "registry.static.frontend",
            frontends
                .iter()
                .chain(dead)
                .cloned()
                .collect::<Vec<_>>()
                .join(","),
        )
        .set("registry.static.storage-system", &system)
        .spawn()?;
    let mut d = Deployment {
        _dirs: dirs,
        back,
        fronts: front_servers,
        proxy,
    };
    d.back.wait_ready(READY).await?;
    for f in &mut d.fronts {
        f.wait_ready(READY).await?;
    }
    d.proxy.wait_ready(READY).await?;
    Ok(d)
}

/// Sends `GET path` on a fresh connection and hangs up after `wait`, without reading the
/// answer: the proxy abandons the request it is forwarding.
async fn hang_up(addr: &str, path: &str, wait: Duration) -> anyhow::Result<()> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {BASIC}\r\n\r\n");
    stream.write_all(head.as_bytes()).await?;
    tokio::time::sleep(wait).await;
    drop(stream);
    Ok(())
}

/// `fronts` frontends behind one proxy, a `BIG` file stored, and `conns` clients reading it
/// in a loop: the deployment, the proxy's public address and the running load.
async fn deploy_under_load(
    fronts: usize,
    conns: usize,
) -> anyhow::Result<(Deployment, String, Load)> {
    let d = deploy(fronts).await?;
    let addr = d.proxy.public.clone();
    let put = send(
        &addr,
        "PUT",
        "/remote.php/webdav/big.bin",
        &AUTH,
        vec![b'x'; BIG],
    )
    .await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let load = Load::start(
        &addr,
        conns,
        BASIC,
        LoadExtra::Get("/remote.php/webdav/big.bin", BIG),
    );
    Ok((d, addr, load))
}

/// A pseudo-random pause of 0 to 3 ms (no need for a good generator).
fn pause(i: u64) -> Duration {
    Duration::from_micros(i.wrapping_mul(2_654_435_761) % 3_000)
}

#[tokio::test]
async fn clients_hanging_up_by_the_thousand_fail_no_other_request() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    // `_d` keeps the processes running until the end of the test.
    let (_d, addr, load) = deploy_under_load(1, 6).await?;
    load.progress(20, "the load under way").await?;

    // Enough abandoned requests to pass h2's lifetime cap of 1,024 protocol-error resets on
    // the proxy's one connection to the frontend several times over.
    const HANG_UPS: u64 = 4_000;
    const AT_ONCE: u64 = 32;
    let started = Instant::now();
    let sent = Arc::new(AtomicU64::new(0));
    let mut quitters = Vec::new();
    for q in 0..AT_ONCE {
        let (addr, sent) = (addr.clone(), sent.clone());
        quitters.push(tokio::spawn(async move {
            let mut errors = Vec::new();
            let mut i = q;
            while i < HANG_UPS {
                let path = if i % 2 == 0 {
                    "/remote.php/webdav/big.bin".to_owned()
                } else {
                    format!("/remote.php/webdav/c0-{}", i % 7)
                };
                match hang_up(&addr, &path, pause(i)).await {
                    Ok(()) => {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => errors.push(format!("{e:#}")),
                }
                i += AT_ONCE;
            }
            errors
        }));
    }
    let mut errors = Vec::new();
    for q in quitters {
        errors.extend(q.await?);
    }
    let storm = started.elapsed();
    // The load goes on after the storm: a connection the storm broke shows here too.
    load.progress(20, "the load after the hang-ups").await?;
    let (ok, failures) = load.finish().await?;
    println!(
        "{} requests abandoned in {:.1}s; {ok} other requests answered, {} failed",
        sent.load(Ordering::Relaxed),
        storm.as_secs_f64(),
        failures.len()
    );
    assert!(errors.is_empty(), "hang-ups could not be sent: {errors:?}");
    assert_eq!(sent.load(Ordering::Relaxed), HANG_UPS);
    assert_no_failures(&failures);
    Ok(())
}

#[tokio::test]
async fn one_of_two_frontends_stopped_under_load_fails_no_request() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let (mut d, _, load) = deploy_under_load(2, 8).await?;
    load.progress(100, "the load on two frontends").await?;
    // The static registry keeps listing it: its requests in flight finish, later ones find
    // its port closed and go to the other frontend.
    let stopped = d.fronts.remove(0);
    stopped.proc.sigterm();
    let mut stopped = stopped;
    let status = stopped.proc.wait_exit(Duration::from_secs(30)).await?;
    assert!(status.success(), "the frontend exited with {status}");
    load.progress(200, "the load on the frontend left").await?;
    let (ok, failures) = load.finish().await?;
    println!(
        "one of two frontends stopped: {ok} requests answered, {} failed",
        failures.len()
    );
    assert_no_failures(&failures);
    Ok(())
}

/// An endpoint that refuses every connection (listed, but its process is gone) costs a few
/// failed connects, not one in two requests: its breaker opens after five failures in a row
/// and lets only a probe through per cooldown. Every request succeeds either way (the retry
/// takes the live endpoint); the breaker is what keeps the dead one from taxing each request.
#[tokio::test]
async fn a_dead_endpoint_is_skipped_once_its_breaker_opens() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let d = deploy_listing(1, &[tcp()]).await?;
    let public = d.proxy.public.clone();
    const REQUESTS: usize = 400;
    // Counted from here: the proxy may have failed to reach the live frontend too while both
    // were starting.
    let counts = |metrics: &str| {
        let count =
            |family: &str| arca_tests::metric_total(metrics, family, &[("service", "frontend")]);
        (
            count("arca_transport_connect_failures_total"),
            count("arca_transport_breaker_opened_total"),
        )
    };
    let metrics = || async {
        anyhow::Ok(
            send(&d.proxy.debug, "GET", "/metrics", &[], "")
                .await?
                .text(),
        )
    };
    let before = counts(&metrics().await?);
    let started = Instant::now();
    for i in 0..REQUESTS {
        let r = send(&public, "GET", "/status.php", &[], "").await?;
        anyhow::ensure!(r.status == 200, "request {i}: {} {}", r.status, r.text());
    }
    let took = started.elapsed();
    let after = counts(&metrics().await?);
    let (failed_connects, opened) = (after.0 - before.0, after.1);
    println!(
        "{REQUESTS} requests in {took:?}: {failed_connects} failed connects (before them: {}), breaker opened {opened} time(s)",
        before.0
    );
    assert!(opened >= 1.0, "the breaker never opened");
    // Without the breaker power-of-two-choices sends about half the requests there first.
    // With it: at most five, then one probe per cooldown (0.5 s doubling to 30 s).
    let bound = 5.0 + 2.0 * took.as_secs_f64() + 5.0;
    assert!(
        failed_connects <= bound,
        "{failed_connects} failed connects in {took:?} (bound {bound})"
    );
    Ok(())
}
