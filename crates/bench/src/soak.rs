//! The soak benchmark: config/grouped-nats (proxy; frontend + gateway + sharing;
//! storage-system; two storage-users on one PostgreSQL and one S3 bucket; nats-server) run
//! from `target/release/arca`, under [`CLIENTS`] keep-alive sync clients plus one moving 2 MiB
//! bodies (tests/kit/soak.rs: overwrites of the same names, every GET compared, listings),
//! for a fixed time per phase while the deployment is restarted every way tests/soak.rs
//! restarts it, misbehaving clients included; below arca, its PostgreSQL is restarted and then
//! away for 10 s, S3 answers errors and drops connections and then freezes for 8 s, and the
//! database's disk fills up (PostgreSQL's data on a tmpfs cut down to what it holds: writes are
//! refused with 507 meanwhile, the one answer other than success counted as right) and grows
//! again. Prints requests, failures and p99 per phase, then reads every acknowledged write
//! back. Target: 0 failed requests in ≥ 100,000. Needs root for the tmpfs.
//!
//! `ARCA_BENCH_SOAK_PHASE` sets a phase's length in seconds (default 25: about 125,000
//! requests in all on a 2-core machine).

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use arca_tests::layouts::{EXAMPLE_BASIC, NatsLayout, problems, soak_log_level};
use arca_tests::soak::{Faults, Soak, SoakConfig};

use crate::Targets;
use crate::files::thousands;

/// Keep-alive clients: twice the soak test's, for a release build.
const CLIENTS: usize = 16;
const PHASE: Duration = Duration::from_secs(25);
/// How long PostgreSQL is away in its outage phase (within the layout's `database_retry`).
const POSTGRES_OUTAGE: Duration = Duration::from_secs(10);
/// How long S3 holds every request in its freeze (within `blobs.s3.read_timeout`, 10 s).
const S3_FREEZE: Duration = Duration::from_secs(8);
/// How long the database's disk stays full.
const DISK_FULL: Duration = Duration::from_secs(10);
/// PostgreSQL's disk: room for the run; cut down to what it holds (plus [`FULL_ROOM`]) in
/// the full-disk phase.
const DATABASE_DISK: u64 = 256 << 20;
const FULL_ROOM: u64 = 512 << 10;
/// The least number of requests the target asks for.
const ENOUGH: u64 = 100_000;

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    crate::process::locate_arca("soak")?;
    let phase = std::env::var("ARCA_BENCH_SOAK_PHASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(PHASE, Duration::from_secs);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let Outcome {
        requests,
        failed,
        wrong,
        s3_broken,
        refused_full,
    } = rt.block_on(soak(phase))?;
    // A fault phase that broke nothing proves nothing.
    targets.check(
        s3_broken > 0 && refused_full > 0,
        &format!(
            "soak: the faults took: {s3_broken} S3 requests broken or held, {refused_full} \
             writes refused with 507 on the full database disk (both > 0)"
        ),
    );
    targets.check(
        failed == 0 && wrong == 0 && requests >= ENOUGH,
        &format!(
            "soak: {failed} failed of {} requests, {wrong} writes read back wrong \
             (0 failed in ≥ {})",
            thousands(requests as f64),
            thousands(ENOUGH as f64)
        ),
    );
    Ok(())
}

/// What a run came to.
struct Outcome {
    requests: u64,
    failed: usize,
    /// Writes read back wrong at the end.
    wrong: usize,
    /// S3 requests the faulty S3 broke or held.
    s3_broken: u64,
    /// Writes answered 507 while the database's disk was full.
    refused_full: u64,
}

/// The phases, then the read-back.
async fn soak(phase: Duration) -> anyhow::Result<Outcome> {
    let log = soak_log_level();
    let started = Instant::now();
    let mut d = NatsLayout::start_with(&log, Some(DATABASE_DISK)).await?;
    println!(
        "soak: config/grouped-nats started in {:.1?}; {CLIENTS} clients + 1 moving 2 MiB \
         bodies, {phase:?} a phase",
        started.elapsed()
    );
    let config = SoakConfig {
        clients: CLIENTS,
        ..SoakConfig::default()
    };
    let soak = Soak::start(d.public(), EXAMPLE_BASIC, &config, "steady").await?;
    d.restart_every_way(&soak, phase, &log).await?;
    let hold = |since: Instant| tokio::time::sleep_until((since + phase).into());
    // Below arca: the database both storage-users and storage-system use restarts (as an
    // upgrade or a managed failover does: connections cut), then is away for 10 s, within
    // `database_retry` (15 s): requests wait for it, none fails.
    soak.phase("postgres restart");
    let at = Instant::now();
    d.pg.restart("fast").await?;
    hold(at).await;
    soak.phase("postgres down 10 s");
    let at = Instant::now();
    d.pg.stop("immediate").await?;
    tokio::time::sleep(POSTGRES_OUTAGE).await;
    d.pg.start_again().await?;
    hold(at).await;
    // S3 answering 503 SlowDown to one request in seven and dropping the connection of
    // another: the object store client's retries absorb it.
    soak.phase("s3 errors and resets");
    let at = Instant::now();
    d.s3.set_breaking(true);
    hold(at).await;
    d.s3.set_breaking(false);
    // S3 holding every request unanswered (as a SIGSTOPped server does), shorter than the
    // read timeout: requests wait, none fails.
    soak.phase("s3 frozen 8 s");
    let at = Instant::now();
    d.s3.set_frozen(true);
    tokio::time::sleep(S3_FREEZE).await;
    d.s3.set_frozen(false);
    hold(at).await;
    println!("soak: S3 requests broken or held: {}", d.s3.broken());
    // The database's disk full: a WAL switch and a checkpoint first, so its tables run out of
    // room before its WAL (PostgreSQL stops when the WAL cannot grow; an operator's alert
    // fires long before). Writes are refused with 507, reads go on; then the volume grows.
    soak.phase("database disk full");
    let at = Instant::now();
    let disk = d
        .database_disk
        .as_ref()
        .context("the layout has no database disk")?;
    d.pg.switch_wal().await?;
    soak.disk_full(true);
    disk.resize(disk.used()? + FULL_ROOM)?;
    tokio::time::sleep(DISK_FULL).await;
    disk.resize(DATABASE_DISK)?;
    hold(at).await;
    soak.disk_full(false);
    soak.phase("faulty clients");
    let at = Instant::now();
    let faults = Faults::start(d.public(), EXAMPLE_BASIC, "soak", 1000);
    hold(at).await;
    let (faulty, blamed) = faults.stop().await?;
    soak.phase("steady again");
    hold(Instant::now()).await;

    let (report, verifier) = soak.stop().await?;
    println!("{}", report.table());
    println!(
        "soak: faulty clients sent {faulty} misbehaving requests, {} answered as the \
         server's fault",
        blamed.len()
    );
    if report.totals().1 > 0 {
        println!("{}", report.failure_sample(4));
        // What the processes logged about it (their directories go with the layout).
        println!("{}", problems(&d.servers(), 40));
    }
    let (read, wrong) = tokio::time::timeout(Duration::from_secs(300), verifier.verify())
        .await
        .context("the read-back did not end in time")??;
    println!(
        "soak: read back at the end: {read} names, {} wrong",
        wrong.len()
    );
    let (requests, failed) = report.totals();
    ensure!(
        blamed.is_empty(),
        "misbehaving clients got 5xx answers: {blamed:?}"
    );
    Ok(Outcome {
        requests,
        failed,
        wrong: wrong.len(),
        s3_broken: d.s3.broken(),
        refused_full: report.phases.iter().map(|p| p.full_507).sum(),
    })
}
