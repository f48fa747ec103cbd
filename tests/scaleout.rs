//! Scale-out through the NATS registry, with real `arca` processes and a real `nats-server`
//! (`.venv/bin/nats-server`, installed by `make deps`): a split deployment finds itself through
//! the bucket and serves files; a frontend group is replaced under load without one failed
//! request; the example set config/grouped-nats runs with two storage-users instances sharing
//! one PostgreSQL database and one S3 bucket (moto), and one of them is replaced under load
//! without one failed request; NATS goes away for 30 s under load and every registration comes
//! back; a leader lease has one holder and moves when that holder stops.
//!
//! The client load is WebDAV through the proxy: MKCOL, PUT, GET (compared), PROPFIND (the file
//! listed), and PUTs of one file every client overwrites. Every answer is checked; the counts
//! are printed (`cargo test -- --nocapture` shows them).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arca_runtime::Leases;
use arca_tests::{
    ExampleSet, Launch, Load, LoadExtra, Moto, Nats, Postgres, Proc, Server, TempDir,
    assert_no_failures, eventually, free_addr, get, send,
};
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
/// Logs every request a service handles (debug level of the runtime's request layer), so a
/// test can see when traffic reaches a process.
const LOG_REQUESTS: &str = "info,arca_runtime::layers=debug";

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

fn tcp_endpoint() -> Endpoint {
    format!("tcp://{}", free_addr())
        .parse()
        .expect("a tcp:// endpoint on a free port")
}

/// A frontend group's launch and the endpoints it announces.
struct FrontLaunch {
    launch: Launch,
    frontend: Endpoint,
    sharing: Endpoint,
}

/// A frontend group on fresh TCP ports, logging every handled request.
fn frontend_group(dir: &TempDir, nats: &str) -> FrontLaunch {
    let (frontend, sharing) = (tcp_endpoint(), tcp_endpoint());
    let launch = nats_launch(dir, nats, "frontend,gateway,sharing")
        .set("frontend.endpoint", frontend.to_string())
        // storage-users (another process) asks sharing what shares grant.
        .set("sharing.endpoint", sharing.to_string())
        .set("shutdown.drain_delay", "1s")
        .env("ARCA_LOG_LEVEL", LOG_REQUESTS);
    FrontLaunch {
        launch,
        frontend,
        sharing,
    }
}

/// A running frontend group and what it announces.
struct Front {
    server: Server,
    frontend: Endpoint,
    sharing: Endpoint,
}

/// The processes of one deployment (each in its own directory).
struct Deployment {
    _dirs: Vec<TempDir>,
    system: Server,
    system_endpoint: Endpoint,
    users: Server,
    users_endpoint: Endpoint,
    fronts: Vec<Front>,
    proxy: Server,
}

impl Deployment {
    /// Every (service, endpoint) the deployment announces in the bucket (the proxy announces
    /// nothing: nobody calls it but clients, and the gateway is in memory).
    fn registrations(&self) -> Vec<(&'static str, Endpoint)> {
        let mut all = vec![
            ("storage-system", self.system_endpoint.clone()),
            ("storage-users", self.users_endpoint.clone()),
        ];
        for f in &self.fronts {
            all.push(("frontend", f.frontend.clone()));
            all.push(("sharing", f.sharing.clone()));
        }
        all
    }
}

/// storage-system; storage-users; `fronts` frontend groups; the proxy. All ready.
async fn deploy(nats: &str, fronts: usize) -> anyhow::Result<Deployment> {
    let mut dirs: Vec<TempDir> = (0..fronts + 3).map(|_| TempDir::new()).collect();
    let system_endpoint = tcp_endpoint();
    let system = nats_launch(&dirs[0], nats, "storage-system")
        .set("storage-system.endpoint", system_endpoint.to_string())
        .spawn()?;
    let users_endpoint = tcp_endpoint();
    let users = nats_launch(&dirs[1], nats, "storage-users")
        .set("storage-users.endpoint", users_endpoint.to_string())
        .spawn()?;
    let mut groups = Vec::new();
    for dir in &dirs[2..2 + fronts] {
        let f = frontend_group(dir, nats);
        groups.push(Front {
            server: f.launch.spawn()?,
            frontend: f.frontend,
            sharing: f.sharing,
        });
    }
    let proxy = nats_launch(&dirs[2 + fronts], nats, "proxy").spawn()?;
    let mut d = Deployment {
        _dirs: std::mem::take(&mut dirs),
        system,
        system_endpoint,
        users,
        users_endpoint,
        fronts: groups,
        proxy,
    };
    d.system.wait_ready(READY).await?;
    d.users.wait_ready(READY).await?;
    for f in &mut d.fronts {
        f.server.wait_ready(READY).await?;
    }
    d.proxy.wait_ready(READY).await?;
    Ok(d)
}

/// Whether a log event is `service` handling a request (not a readiness probe).
fn served_by(service: &'static str) -> impl Fn(&Value) -> bool {
    move |e| {
        e["fields"]["message"] == "handled"
            && e["span"]["service"] == service
            && e["span"]["route"]
                .as_str()
                .is_some_and(|r| !r.starts_with("/arca.v1.Probe"))
    }
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

/// Waits for the first request `service` in `proc` handles; how long after `since` it came.
async fn first_request_after(
    proc: &Proc,
    service: &'static str,
    since: Instant,
) -> anyhow::Result<Duration> {
    proc.wait_event(
        Duration::from_secs(10),
        &format!("a request handled by {service}"),
        served_by(service),
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
    let load = Load::start(&d.proxy.public, 6, AUTH[0].1, LoadExtra::SharedPut);
    load.progress(40, "load running").await?;
    let mut old = d.fronts.remove(0).server;
    let stayer = &d.fronts[0].server;
    let ops_before = metric_sum(stayer, "arca_registry_operations_total").await?;
    let served_before = metric_sum(stayer, "arca_requests_total").await?;
    let window = Instant::now();

    let dir_c = TempDir::new();
    let launch = frontend_group(&dir_c, &nats.url()).launch;
    let ok_at_term = load.ok();
    old.proc.sigterm();
    let mut replacement = launch.spawn()?;
    replacement.wait_ready(READY).await?;
    let ready_at = Instant::now();
    let to_first = first_request_after(&replacement.proc, "frontend", ready_at).await?;
    eprintln!(
        "frontend group: the replacement served its first request {to_first:?} after it was ready"
    );
    assert!(
        to_first <= Duration::from_secs(2),
        "the replacement got its first request {to_first:?} after it was ready"
    );
    let code = old.proc.exit_code(Duration::from_secs(20)).await?;
    assert_eq!(code, Some(0), "{}", old.proc.stderr_tail(20));
    assert!(!old.proc.events_with("deregistered").is_empty());
    let during = load.ok() - ok_at_term;
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
        "frontend group replaced: {during} requests succeeded from SIGTERM until the old group \
         exited, {ok} in all, {} failed",
        failures.len()
    );
    assert_no_failures(&failures);
    drop(d.system);
    drop(d.users);
    Ok(())
}

/// The endpoint of storage-users.yaml, swapped for a fresh one per instance started from it.
const USERS_1_ENDPOINT: &str = "tcp://127.0.0.1:9141";

/// Two storage-users instances are two writers of one database and one bucket: this checks
/// that they serve the same spaces correctly side by side (each client's writes, wherever they
/// land, are read back whole and listed, whichever instance answers) and that replacing one
/// under load fails no client request.
#[tokio::test]
async fn two_storage_users_share_one_database_and_bucket_and_one_is_replaced_under_load()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let started = Instant::now();
    // The bucket name of the examples.
    let (nats, pg, s3) = tokio::try_join!(
        Nats::start(&dir),
        Postgres::start(&dir),
        Moto::start(&["arca-blobs"])
    )?;
    eprintln!(
        "NATS, PostgreSQL and S3 (moto) up in {:?}",
        started.elapsed()
    );
    let set = ExampleSet {
        swaps: vec![
            ("nats://127.0.0.1:4222", nats.url()),
            (
                "postgres://arca:example-only@127.0.0.1:5432/arca",
                pg.url.clone(),
            ),
            ("http://127.0.0.1:9000", s3.endpoint.clone()),
            ("tcp://127.0.0.1:9140", tcp_endpoint().to_string()),
            ("tcp://127.0.0.1:9142", tcp_endpoint().to_string()),
            ("tcp://127.0.0.1:9143", tcp_endpoint().to_string()),
            ("tcp://127.0.0.1:9144", tcp_endpoint().to_string()),
        ],
    };
    let dirs: Vec<TempDir> = (0..6).map(|_| TempDir::new()).collect();
    // Started together, as a deployment's pods are: both storage-users migrate the empty
    // database at once.
    let mut system = set.launch(&dirs[0], "storage-system.yaml", &[])?.spawn()?;
    let users_1 = tcp_endpoint();
    let mut old = set
        .launch(
            &dirs[1],
            "storage-users.yaml",
            &[(USERS_1_ENDPOINT, users_1.to_string())],
        )?
        .spawn()?;
    let mut other = set.launch(&dirs[2], "storage-users-2.yaml", &[])?.spawn()?;
    let mut front = set.launch(&dirs[3], "frontend.yaml", &[])?.spawn()?;
    let mut proxy = set.launch(&dirs[4], "proxy.yaml", &[])?.spawn()?;
    for s in [&mut system, &mut old, &mut other, &mut front, &mut proxy] {
        s.wait_ready(READY).await?;
    }
    eprintln!("example set ready {:?} after the start", started.elapsed());

    let load = Load::start(&proxy.public, 6, AUTH[0].1, LoadExtra::SharedPut);
    load.progress(60, "load running").await?;
    // Both instances take part: with requests spread over two writers of one database and
    // one bucket, every GET above compared what some PUT wrote, wherever each one landed.
    for (name, s) in [
        ("storage-users.yaml", &old),
        ("storage-users-2.yaml", &other),
    ] {
        s.proc
            .wait_event(
                Duration::from_secs(10),
                &format!("{name} serving"),
                served_by("storage-users"),
            )
            .await?;
    }

    let ok_at_term = load.ok();
    let term_at = Instant::now();
    old.proc.sigterm();
    let replacement_endpoint = tcp_endpoint();
    let mut replacement = set
        .launch(
            &dirs[5],
            "storage-users.yaml",
            &[(USERS_1_ENDPOINT, replacement_endpoint.to_string())],
        )?
        .spawn()?;
    replacement.wait_ready(READY).await?;
    let ready_at = Instant::now();
    let to_first = first_request_after(&replacement.proc, "storage-users", ready_at).await?;
    eprintln!(
        "storage-users: the replacement was ready {:?} after the SIGTERM and served its first \
         request {to_first:?} after it was ready",
        ready_at - term_at
    );
    assert!(
        to_first <= Duration::from_secs(2),
        "the replacement got its first request {to_first:?} after it was ready"
    );
    let code = old.proc.exit_code(Duration::from_secs(20)).await?;
    assert_eq!(code, Some(0), "{}", old.proc.stderr_tail(20));
    assert!(!old.proc.events_with("deregistered").is_empty());
    let during = load.ok() - ok_at_term;
    let window = term_at.elapsed();
    load.progress(60, "load after the old instance left")
        .await?;

    let (ok, failures) = load.finish().await?;
    eprintln!(
        "storage-users replaced: {during} requests succeeded in the {window:?} from SIGTERM \
         until the old instance exited and the replacement served, {ok} in all, {} failed",
        failures.len()
    );
    assert_no_failures(&failures);
    drop((proxy, front, replacement, other, system));
    drop((s3, pg, nats));
    Ok(())
}

#[tokio::test]
async fn a_nats_outage_of_30s_under_load_fails_no_request_and_registrations_come_back()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let mut nats = Nats::start(&dir).await?;
    let (port, store) = (nats.port, nats.store.clone());
    let d = deploy(&nats.url(), 1).await?;

    let load = Load::start(&d.proxy.public, 4, AUTH[0].1, LoadExtra::SharedPut);
    load.progress(40, "load running").await?;
    nats.stop().await?;
    // The 30 s, ten times the TTL: when the server comes back every entry has expired
    // there, and only the watchers' grace and the immediate re-puts keep the sets whole.
    // Requests must keep succeeding all along, not only add up in the end: every 5 s has some.
    const OUTAGE: Duration = Duration::from_secs(30);
    let outage = Instant::now();
    let mut last = load.ok();
    let mut slices = Vec::new();
    while outage.elapsed() < OUTAGE {
        let next = Duration::from_secs(5 * (slices.len() as u64 + 1)).min(OUTAGE);
        tokio::time::sleep(next.saturating_sub(outage.elapsed())).await;
        let now = load.ok();
        slices.push(now - last);
        last = now;
    }
    let served_during = load.ok();
    let restarted = async_nats::datetime::now();
    let mut nats = Nats::start_on(port, store).await?;
    let back = Instant::now();
    eprintln!(
        "NATS was down {:?}; requests succeeded per 5 s meanwhile: {slices:?}",
        outage.elapsed()
    );
    assert!(
        slices.iter().all(|&n| n > 0),
        "a 5 s stretch of the outage without one successful request: {slices:?}"
    );

    // Every registration is live in the bucket again, put back by its process after the
    // server returned: its last write is a put stamped (by the server) after the restart, so
    // nothing left over from before the outage counts. Read with a connection of the test's
    // own, made after the restart.
    let client = async_nats::connect(nats.url()).await?;
    let bucket = async_nats::jetstream::new(client)
        .get_key_value(BUCKET)
        .await?;
    let expected = d.registrations();
    eventually(
        Duration::from_secs(10),
        "every registration put again after the restart",
        || {
            let (bucket, expected) = (bucket.clone(), expected.clone());
            async move {
                for (service, endpoint) in &expected {
                    let entry = bucket.entry(registry_key(service, endpoint)).await?;
                    let fresh = entry.is_some_and(|e| {
                        e.operation == async_nats::jetstream::kv::Operation::Put
                            && e.created >= restarted
                    });
                    if !fresh {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            }
        },
    )
    .await?;
    eprintln!(
        "all {} registrations ({}) put again {:?} after NATS was back",
        expected.len(),
        expected
            .iter()
            .map(|(s, _)| *s)
            .collect::<Vec<_>>()
            .join(", "),
        back.elapsed()
    );

    // A process started now is found: the proxy sends it requests.
    let dir_d = TempDir::new();
    let mut newcomer = frontend_group(&dir_d, &nats.url()).launch.spawn()?;
    newcomer.wait_ready(READY).await?;
    let to_first = first_request_after(&newcomer.proc, "frontend", Instant::now()).await?;
    eprintln!("newcomer after the outage served its first request {to_first:?} after ready");
    load.progress(40, "load after NATS returned").await?;

    let (ok, failures) = load.finish().await?;
    eprintln!(
        "NATS outage: {ok} successful requests ({served_during} by the end of the outage), {} failed",
        failures.len()
    );
    assert_no_failures(&failures);
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
/// data dirs and the same database and bucket, each draining before it stops.
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
    // A stopping instance keeps serving while its callers' watches drop it (rolling restarts).
    for u in [a, b] {
        assert!(
            !u.shutdown.drain_delay.is_zero(),
            "storage-users without a drain delay"
        );
    }
    assert!(a.storage_users.database.is_some());
    assert_eq!(a.storage_users.database, b.storage_users.database);
    assert_eq!(a.storage_users.blobs, b.storage_users.blobs);
    assert!(matches!(
        a.storage_users.blobs,
        Some(arca_config::BlobsConfig::S3(_))
    ));
    Ok(())
}
