//! Scale-out through the NATS registry, with real `arca` processes and a real `nats-server`
//! (`.venv/bin/nats-server`, installed by `make deps`): a split deployment finds itself through
//! the bucket and serves files; a frontend group is replaced under load without one failed
//! request; NATS goes away under load and comes back; a leader lease has one holder and moves
//! when that holder stops.
//!
//! The rolling restart replaces a frontend group (frontend + gateway + sharing), which is
//! stateless: two storage-users instances cannot share spaces yet unless they share a
//! PostgreSQL database *and* an S3 bucket (local blobs live in each instance's data dir), so
//! storage-users runs once here, and its second instance appears only in the lease test, which
//! sends it no traffic.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arca_runtime::Leases;
use arca_tests::{Launch, Nats, Proc, Server, TempDir, eventually, free_addr, get, send};
use arca_transport::registry::nats::registry_key;
use arca_transport::{Endpoint, NatsKv, NatsSettings};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "scaleout-secret-0123456789abcdef";
const PASSWORD: &str = "scale-pass";
/// `admin:scale-pass`, as HTTP Basic.
const AUTH: [(&str, &str); 1] = [("authorization", "Basic YWRtaW46c2NhbGUtcGFzcw==")];
const READY: Duration = Duration::from_secs(30);
/// Short, so that expiry and outages longer than it fit in a test.
const TTL: &str = "3s";
const BUCKET: &str = "arca-test";

/// The tests share two cores: one at a time keeps the timing assertions meaningful.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An `arca server` hosting `services`, finding the others through the NATS bucket.
fn nats_launch(dir: &TempDir, nats: &str, services: &str) -> Launch {
    Launch::arca(dir)
        .services(services)
        .set("identity.secret", SECRET)
        .set("registry.kind", "nats")
        .set("registry.nats.url", nats)
        .set("registry.nats.bucket", BUCKET)
        .set("registry.nats.ttl", TTL)
        .env("ARCA_ADMIN_PASSWORD", PASSWORD)
}

/// A frontend group on a fresh TCP port; it logs every handled request (debug level of the
/// runtime's request layer) so a test can see when traffic reaches it.
fn frontend_group(dir: &TempDir, nats: &str) -> (Launch, Endpoint) {
    let endpoint: Endpoint = format!("tcp://{}", free_addr()).parse().expect("endpoint");
    let launch = nats_launch(dir, nats, "frontend,gateway,sharing")
        .set("frontend.endpoint", endpoint.to_string())
        // storage-users (another process) asks sharing what shares grant.
        .set("sharing.endpoint", format!("tcp://{}", free_addr()))
        .set("shutdown.drain_delay", "1s")
        .env("ARCA_LOG_LEVEL", "info,arca_runtime::layers=debug");
    (launch, endpoint)
}

/// The processes of one deployment (each in its own directory).
struct Deployment {
    _dirs: Vec<TempDir>,
    system: Server,
    users: Server,
    fronts: Vec<(Server, Endpoint)>,
    proxy: Server,
}

/// storage-system; storage-users; `fronts` frontend groups; the proxy. All ready.
async fn deploy(nats: &str, fronts: usize) -> anyhow::Result<Deployment> {
    let mut dirs: Vec<TempDir> = (0..fronts + 3).map(|_| TempDir::new()).collect();
    let system = nats_launch(&dirs[0], nats, "storage-system")
        .set("storage-system.endpoint", format!("tcp://{}", free_addr()))
        .spawn()?;
    let users = nats_launch(&dirs[1], nats, "storage-users")
        .set("storage-users.endpoint", format!("tcp://{}", free_addr()))
        .spawn()?;
    let mut groups = Vec::new();
    for dir in &dirs[2..2 + fronts] {
        let (launch, endpoint) = frontend_group(dir, nats);
        groups.push((launch.spawn()?, endpoint));
    }
    let proxy = nats_launch(&dirs[2 + fronts], nats, "proxy").spawn()?;
    let mut d = Deployment {
        _dirs: std::mem::take(&mut dirs),
        system,
        users,
        fronts: groups,
        proxy,
    };
    d.system.wait_ready(READY).await?;
    d.users.wait_ready(READY).await?;
    for (front, _) in &mut d.fronts {
        front.wait_ready(READY).await?;
    }
    d.proxy.wait_ready(READY).await?;
    Ok(d)
}

/// Whether a log event is the frontend handling a client request (not a readiness probe).
fn served_request(e: &Value) -> bool {
    e["fields"]["message"] == "handled"
        && e["span"]["service"] == "frontend"
        && e["span"]["route"]
            .as_str()
            .is_some_and(|r| !r.starts_with("/arca.v1.Probe"))
}

/// The sum of a counter family in a process's `/metrics`.
async fn metric_sum(server: &Server, family: &str) -> anyhow::Result<f64> {
    let text = get(&server.debug, "/metrics", &[]).await?.text();
    Ok(text
        .lines()
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Concurrent clients doing PUT then GET (and comparing) through the proxy until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    workers: Vec<tokio::task::JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(addr: &str, workers: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let workers = (0..workers)
            .map(|w| {
                let (addr, stop, ok) = (addr.to_owned(), stop.clone(), ok.clone());
                tokio::spawn(async move {
                    let started = Instant::now();
                    let mut failures = Vec::new();
                    let mut round = 0u64;
                    // Bounded even if the test forgets to stop it.
                    while !stop.load(Ordering::Relaxed)
                        && started.elapsed() < Duration::from_secs(90)
                    {
                        let path = format!("/remote.php/webdav/load-{w}-{}.txt", round % 3);
                        let body = format!("worker {w} round {round}");
                        match send(&addr, "PUT", &path, &AUTH, body.clone()).await {
                            Ok(r) if r.status == 201 || r.status == 204 => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(r) => {
                                failures.push(format!("PUT {path}: {} {}", r.status, r.text()))
                            }
                            Err(e) => failures.push(format!("PUT {path}: {e:#}")),
                        }
                        match send(&addr, "GET", &path, &AUTH, "").await {
                            Ok(r) if r.status == 200 && r.text() == body => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(r) => {
                                failures.push(format!("GET {path}: {} {:?}", r.status, r.text()))
                            }
                            Err(e) => failures.push(format!("GET {path}: {e:#}")),
                        }
                        round += 1;
                    }
                    failures
                })
            })
            .collect();
        Self { stop, ok, workers }
    }

    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Waits until `n` more requests than now have succeeded.
    async fn progress(&self, n: u64, what: &str) -> anyhow::Result<()> {
        let target = self.ok() + n;
        eventually(Duration::from_secs(20), what, || {
            let done = self.ok() >= target;
            async move { Ok(done.then_some(())) }
        })
        .await
    }

    /// Stops the clients; every failure they saw.
    async fn finish(self) -> anyhow::Result<(u64, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut failures = Vec::new();
        for w in self.workers {
            failures.extend(w.await?);
        }
        Ok((self.ok.load(Ordering::Relaxed), failures))
    }
}

/// Waits for the first client request `proc` serves; how long after `since` it came.
async fn first_request_after(proc: &Proc, since: Instant) -> anyhow::Result<Duration> {
    proc.wait_event(
        Duration::from_secs(10),
        "a served client request",
        served_request,
    )
    .await?;
    Ok(since.elapsed())
}

#[tokio::test]
async fn split_processes_find_each_other_and_a_frontend_group_is_replaced_under_load()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let nats = Nats::start(&dir).await?;
    let mut d = deploy(&nats.url(), 2).await?;

    // (a) A file through the proxy, every hop found through the bucket.
    let put = send(
        &d.proxy.public,
        "PUT",
        "/remote.php/webdav/hello.txt",
        &AUTH,
        "via nats",
    )
    .await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let got = send(
        &d.proxy.public,
        "GET",
        "/remote.php/webdav/hello.txt",
        &AUTH,
        "",
    )
    .await?;
    assert_eq!((got.status, got.text().as_str()), (200, "via nats"));
    assert!(metric_sum(&d.proxy, "arca_registry_operations_total").await? > 0.0);

    // (b) A rolling replacement of a frontend group under load.
    let load = Load::start(&d.proxy.public, 6);
    load.progress(40, "load running").await?;
    let (mut old, _) = d.fronts.remove(0);
    let (stayer, _) = &d.fronts[0];
    let ops_before = metric_sum(stayer, "arca_registry_operations_total").await?;
    let served_before = metric_sum(stayer, "arca_requests_total").await?;
    let window = Instant::now();

    let dir_c = TempDir::new();
    let (launch, _) = frontend_group(&dir_c, &nats.url());
    old.proc.sigterm();
    let mut replacement = launch.spawn()?;
    replacement.wait_ready(READY).await?;
    let ready_at = Instant::now();
    let to_first = first_request_after(&replacement.proc, ready_at).await?;
    eprintln!("replacement served its first request {to_first:?} after it was ready");
    assert!(
        to_first <= Duration::from_secs(2),
        "the replacement got its first request {to_first:?} after it was ready"
    );
    let code = old.proc.exit_code(Duration::from_secs(20)).await?;
    assert_eq!(code, Some(0), "{}", old.proc.stderr_tail(20));
    assert!(!old.proc.events_with("deregistered").is_empty());
    load.progress(60, "load after the old group left").await?;

    // Registry load follows heartbeats, not requests: over the window the staying group served
    // hundreds of requests and made a handful of registry calls (one put per ttl/3 = 1 s).
    let ops = metric_sum(stayer, "arca_registry_operations_total").await? - ops_before;
    let served = metric_sum(stayer, "arca_requests_total").await? - served_before;
    let secs = window.elapsed().as_secs_f64();
    eprintln!("staying group: {served} requests, {ops} registry operations in {secs:.1}s");
    assert!(
        ops <= secs / 1.0 + 3.0,
        "{ops} registry operations in {secs:.1}s"
    );
    assert!(
        served >= 10.0 * ops.max(1.0),
        "{served} requests vs {ops} registry operations"
    );

    let (ok, failures) = load.finish().await?;
    eprintln!(
        "rolling replacement: {ok} successful requests, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    drop(d.system);
    drop(d.users);
    Ok(())
}

#[tokio::test]
async fn a_nats_outage_under_load_fails_no_request_and_registrations_come_back()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let mut nats = Nats::start(&dir).await?;
    let (port, store) = (nats.port, nats.store.clone());
    let d = deploy(&nats.url(), 1).await?;
    let front_endpoint = d.fronts[0].1.clone();

    let load = Load::start(&d.proxy.public, 4);
    load.progress(40, "load running").await?;
    nats.stop().await?;
    // Longer than the TTL: when the server comes back every entry has expired there, and
    // only the watchers' grace and the immediate re-puts keep the sets whole.
    let outage = Instant::now();
    load.progress(40, "requests served while NATS is down")
        .await?;
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(outage.elapsed())).await;
    let served_during = load.ok();
    let mut nats = Nats::start_on(port, store).await?;
    eprintln!("NATS was down {:?}", outage.elapsed());

    // The existing registration is back in the bucket, put again by its heartbeat.
    let kv = NatsKv::connect(&NatsSettings {
        url: nats.url(),
        bucket: BUCKET.to_owned(),
        ttl: Duration::from_secs(3),
    })
    .await?;
    let key = registry_key("frontend", &front_endpoint);
    eventually(
        Duration::from_secs(10),
        "the frontend's entry live again",
        || {
            let (kv, key) = (kv.clone(), key.clone());
            async move { Ok(matches!(kv.entry(&key).await?, Some((_, true))).then_some(())) }
        },
    )
    .await?;

    // A process started now is found: the proxy sends it requests.
    let dir_d = TempDir::new();
    let (launch, _) = frontend_group(&dir_d, &nats.url());
    let mut newcomer = launch.spawn()?;
    newcomer.wait_ready(READY).await?;
    let to_first = first_request_after(&newcomer.proc, Instant::now()).await?;
    eprintln!("newcomer after the outage served its first request {to_first:?} after ready");
    load.progress(40, "load after NATS returned").await?;

    let (ok, failures) = load.finish().await?;
    eprintln!(
        "NATS outage: {ok} successful requests ({served_during} by the end of the outage), {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    nats.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_lease_has_one_holder_and_moves_when_the_holder_stops() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let nats = Nats::start(&dir).await?;
    let settings = NatsSettings {
        url: nats.url(),
        bucket: BUCKET.to_owned(),
        ttl: Duration::from_secs(3),
    };

    // Two contenders with their own connections, as two processes would be: whoever holds
    // the lease marks the job running; the mark must never be taken twice.
    let running = Arc::new(AtomicU64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    let mut contenders = Vec::new();
    for _ in 0..2 {
        let leases = Leases::nats(NatsKv::connect(&settings).await?);
        let (running, overlaps) = (running.clone(), overlaps.clone());
        contenders.push(tokio::spawn(async move {
            let stop = CancellationToken::new();
            let lease = leases.lease("test/exclusive", stop);
            let mut held = 0;
            for _ in 0..4 {
                let Some(guard) = lease.acquired().await else {
                    break;
                };
                if running.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let until = Instant::now() + Duration::from_millis(150);
                while Instant::now() < until && guard.is_held() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                running.fetch_sub(1, Ordering::SeqCst);
                guard.release().await;
                held += 1;
                // Let the other one in sometimes.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            held
        }));
    }
    let mut total = 0;
    for c in contenders {
        total += tokio::time::timeout(Duration::from_secs(30), c).await??;
    }
    assert_eq!(total, 8);
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");

    // Across processes: the storage-users orphan collection.
    let job = "storage-users/orphan-gc";
    let acquired = |proc: &Proc| {
        proc.events_with("lease acquired")
            .iter()
            .filter(|e| e["fields"]["job"] == job)
            .count()
    };
    let users = |dir: &TempDir| {
        nats_launch(dir, &nats.url(), "storage-users")
            .set("storage-users.endpoint", format!("tcp://{}", free_addr()))
            .spawn()
    };
    // What storage-users depends on (sharing, and sharing's storage-system), so it gets ready.
    let dir_deps = TempDir::new();
    let mut deps = nats_launch(&dir_deps, &nats.url(), "storage-system,sharing")
        .set("storage-system.endpoint", format!("tcp://{}", free_addr()))
        .set("sharing.endpoint", format!("tcp://{}", free_addr()))
        .spawn()?;
    deps.wait_ready(READY).await?;
    let (dir_a, dir_b, dir_c) = (TempDir::new(), TempDir::new(), TempDir::new());
    let mut a = users(&dir_a)?;
    a.wait_ready(READY).await?;
    a.proc
        .wait_event(Duration::from_secs(5), "a holds the lease", |e| {
            e["fields"]["message"] == "lease acquired" && e["fields"]["job"] == job
        })
        .await?;
    let mut b = users(&dir_b)?;
    b.wait_ready(READY).await?;

    // A crash: no release, so b takes over once the TTL has passed.
    a.proc.signal(libc::SIGKILL);
    let killed = Instant::now();
    b.proc
        .wait_event(Duration::from_secs(10), "b takes over", |e| {
            e["fields"]["message"] == "lease acquired" && e["fields"]["job"] == job
        })
        .await?;
    let takeover = killed.elapsed();
    eprintln!("lease taken over {takeover:?} after its holder was killed (ttl {TTL})");
    assert!(takeover <= Duration::from_secs(6), "{takeover:?}");

    // A clean stop releases: the waiting c takes over within its next try, not a TTL.
    let mut c = users(&dir_c)?;
    c.wait_ready(READY).await?;
    assert_eq!(acquired(&c.proc), 0, "c acquired while b held");
    b.proc.sigterm();
    let stopped = Instant::now();
    c.proc
        .wait_event(Duration::from_secs(10), "c takes over", |e| {
            e["fields"]["message"] == "lease acquired" && e["fields"]["job"] == job
        })
        .await?;
    let handover = stopped.elapsed();
    eprintln!("lease handed over {handover:?} after its holder was stopped");
    assert!(handover <= Duration::from_secs(2), "{handover:?}");
    assert_eq!(b.proc.exit_code(Duration::from_secs(10)).await?, Some(0));
    assert!(!b.proc.events_with("lease released").is_empty());
    assert_eq!(acquired(&b.proc), 1);
    Ok(())
}

/// The example set config/grouped-nats: every file loads, uses the NATS registry with one
/// bucket, and together they host every service, with storage-users twice on distinct ports,
/// data dirs and the same database and bucket.
#[test]
fn the_grouped_nats_examples_are_valid() -> anyhow::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/grouped-nats");
    let mut hosted = Vec::new();
    let mut users = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let config = arca_config::load(Some(&path), [], arca_config::Overrides::default())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        assert_eq!(
            config.registry.kind,
            arca_config::RegistryKind::Nats,
            "{path:?}"
        );
        assert_eq!(config.registry.nats.bucket, "arca-registry", "{path:?}");
        hosted.extend(config.services.clone());
        if config.hosts("storage-users") {
            users.push(config);
        }
    }
    hosted.sort();
    hosted.dedup();
    assert_eq!(hosted.len(), 6, "{hosted:?}");
    let [a, b] = &users[..] else {
        anyhow::bail!("expected two storage-users instances, got {}", users.len());
    };
    assert_ne!(a.storage_users.endpoint, b.storage_users.endpoint);
    assert_ne!(a.data_dir, b.data_dir);
    assert!(a.storage_users.database.is_some());
    assert_eq!(a.storage_users.database, b.storage_users.database);
    assert_eq!(a.storage_users.blobs, b.storage_users.blobs);
    assert!(matches!(
        a.storage_users.blobs,
        arca_config::BlobsConfig::S3(_)
    ));
    Ok(())
}
