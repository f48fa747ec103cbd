//! Faults below arca: the database restarting or gone, S3 failing, resetting or frozen, under
//! a load as hard as real clients (mixed sizes, the same names overwritten, every GET compared
//! byte for byte with what was last acknowledged, listings), in one process.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arca_tests::below::FaultyS3;
use arca_tests::{InProcess, Postgres, TempDir, send_as};

const PASSWORD: &str = "faults-secret";
/// Clients at once, and the files each keeps overwriting.
const CLIENTS: usize = 4;
const FILES: usize = 6;
/// Small bodies are kept in the metadata database (up to `storage-users.inline_max`, 64 KiB),
/// the rest reach S3: both sides of the threshold.
const SIZES: [usize; 5] = [1_000, 16_384, 65_536, 65_537, 300_000];

/// What the load saw: every request that did not succeed, as (status, what).
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failures: std::sync::Mutex<Vec<(u16, String)>>,
    /// The longest any one request took, in ms.
    slowest_ms: AtomicU64,
}

impl Tally {
    fn took(&self, since: Instant) {
        let ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.slowest_ms.fetch_max(ms, Ordering::SeqCst);
    }
}

fn auth() -> String {
    arca_tests::basic("admin", PASSWORD)
}

/// A client's content for version `n` of file `f`: its size varies (every size comes to every
/// file in turn), its bytes tell it apart.
fn body(client: usize, f: usize, n: u64) -> Vec<u8> {
    let size = SIZES[(f + n as usize / FILES) % SIZES.len()];
    let seed = format!("{client}/{f}/{n}:");
    seed.bytes().cycle().take(size).collect()
}

/// One client until `stop`: PUT a new version of one of its files, GET it back and compare,
/// now and then list its folder. A 503 is counted apart (the server said "retry later" with
/// Retry-After); anything else that is not a success is a failure.
async fn client(addr: String, id: usize, stop: Arc<AtomicBool>, tally: Arc<Tally>) -> u64 {
    let auth = auth();
    let dir = format!("/remote.php/dav/files/admin/c{id}");
    let mut unavailable = 0;
    let mut last: HashMap<usize, Vec<u8>> = HashMap::new();
    let mut n = 0u64;
    let fail = |status: u16, what: String| {
        if let Ok(mut f) = tally.failures.lock() {
            f.push((status, what));
        }
    };
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let f = (n as usize) % FILES;
        let path = format!("{dir}/f{f}.bin");
        let content = body(id, f, n);
        let started = Instant::now();
        let put = send_as(&addr, &auth, "PUT", &path, &[], content.clone()).await;
        tally.took(started);
        match put {
            Ok(r) if r.status == 201 || r.status == 204 => {
                last.insert(f, content);
                tally.ok.fetch_add(1, Ordering::SeqCst);
            }
            Ok(r) if r.status == 503 && r.header("retry-after").is_some() => unavailable += 1,
            Ok(r) => fail(r.status, format!("PUT {path}: {}", r.text())),
            Err(e) => fail(0, format!("PUT {path}: {e:#}")),
        }
        if let Some(expected) = last.get(&f) {
            let started = Instant::now();
            let get = send_as(&addr, &auth, "GET", &path, &[], "").await;
            tally.took(started);
            match get {
                Ok(r) if r.status == 200 && &r.body == expected => {
                    tally.ok.fetch_add(1, Ordering::SeqCst);
                }
                Ok(r) if r.status == 200 => {
                    fail(200, format!("GET {path}: other bytes ({} B)", r.body.len()))
                }
                Ok(r) if r.status == 503 && r.header("retry-after").is_some() => unavailable += 1,
                Ok(r) => fail(r.status, format!("GET {path}: {}", r.text())),
                Err(e) => fail(0, format!("GET {path}: {e:#}")),
            }
        }
        if n.is_multiple_of(5) {
            match send_as(
                &addr,
                &auth,
                "PROPFIND",
                &format!("{dir}/"),
                &[("depth", "1")],
                "",
            )
            .await
            {
                Ok(r) if r.status == 207 => {
                    tally.ok.fetch_add(1, Ordering::SeqCst);
                }
                Ok(r) if r.status == 503 && r.header("retry-after").is_some() => unavailable += 1,
                Ok(r) => fail(r.status, format!("PROPFIND {dir}: {}", r.text())),
                Err(e) => fail(0, format!("PROPFIND {dir}: {e:#}")),
            }
        }
    }
    unavailable
}

/// The load on `addr` while `during` runs, and a second after it: (requests that succeeded,
/// 503s with Retry-After, failures).
async fn under_load<F: std::future::Future<Output = anyhow::Result<()>>>(
    addr: &str,
    during: F,
) -> anyhow::Result<(u64, u64, Vec<(u16, String)>)> {
    let (ok, unavailable, failures, _) = timed_load(addr, during).await?;
    Ok((ok, unavailable, failures))
}

/// [`under_load`], and the longest one PUT or GET took.
async fn timed_load<F: std::future::Future<Output = anyhow::Result<()>>>(
    addr: &str,
    during: F,
) -> anyhow::Result<(u64, u64, Vec<(u16, String)>, Duration)> {
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| tokio::spawn(client(addr.to_owned(), id, stop.clone(), tally.clone())))
        .collect();
    during.await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let mut unavailable = 0;
    for c in clients {
        unavailable += tokio::time::timeout(Duration::from_secs(60), c).await??;
    }
    let failures = std::mem::take(
        &mut *tally
            .failures
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?,
    );
    Ok((
        tally.ok.load(Ordering::SeqCst),
        unavailable,
        failures,
        Duration::from_millis(tally.slowest_ms.load(Ordering::SeqCst)),
    ))
}

/// A new file `name` in admin's files holding `body`: created (201), then read back whole.
async fn written_and_read_back(addr: &str, name: &str, body: &str) -> anyhow::Result<()> {
    let path = format!("/remote.php/dav/files/admin/{name}");
    let r = send_as(addr, &auth(), "PUT", &path, &[], body.to_owned()).await?;
    assert_eq!(r.status, 201, "{}", r.text());
    let r = send_as(addr, &auth(), "GET", &path, &[], "").await?;
    assert_eq!((r.status, r.text().as_str()), (200, body));
    Ok(())
}

/// The folder each load client writes in.
async fn make_client_folders(addr: &str) -> anyhow::Result<()> {
    for id in 0..CLIENTS {
        let path = format!("/remote.php/dav/files/admin/c{id}");
        let r = send_as(addr, &auth(), "MKCOL", &path, &[], "").await?;
        anyhow::ensure!(r.status == 201, "MKCOL: {} {}", r.status, r.text());
    }
    Ok(())
}

/// Polls `/readyz` on `debug` until `pred(status, body)` holds, within `within`: the body.
async fn readyz_until(
    debug: &str,
    within: Duration,
    pred: impl Fn(u16, &str) -> bool,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + within;
    loop {
        let r = arca_tests::get(debug, "/readyz", &[]).await?;
        let body = r.text();
        if pred(r.status, &body) {
            return Ok(body);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "/readyz never came to that within {within:?}: {} {body}",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `pg_ctl restart -m fast` (every connection terminated, the server back within a second)
/// under the load: no request fails — the calls that met the restart are run again
/// server-side within `database_retry`; only a write whose COMMIT the restart cut hears 503.
/// Then an outage with a 2 s retry: requests past the deadline hear 503 with Retry-After,
/// never 500, `/readyz` turns not-ready naming the database and ready again once it is back,
/// and every request succeeds after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgresql_restart_fails_no_request_and_an_outage_is_503() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let pg = Postgres::start(&dir).await?;
    let (users_db, system_db) = (pg.durable_database().await?, pg.durable_database().await?);
    let server = InProcess::ready(
        &dir,
        PASSWORD,
        &[
            ("storage-users.database", users_db.as_str()),
            ("storage-system.database", system_db.as_str()),
            ("storage-users.database_retry", "15s"),
            ("storage-system.database_retry", "15s"),
        ],
    )
    .await?;
    let addr = server.public.clone();
    make_client_folders(&addr).await?;

    let restarted = Instant::now();
    let (ok, unavailable, failures) = under_load(&addr, async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        pg.restart("fast").await?;
        eprintln!("PostgreSQL restarted in {:?}", restarted.elapsed());
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(())
    })
    .await?;
    eprintln!(
        "restart: {ok} requests succeeded, {unavailable} heard 503, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "requests failed through a restart: {failures:?}"
    );
    // Only the writes whose COMMIT the restart cut may hear 503 (whether those landed is
    // unknown: the client sends them again).
    assert!(
        unavailable <= 8,
        "a fast restart made {unavailable} requests hear 503"
    );
    assert!(ok >= 40, "the load hardly ran: {ok} requests");
    drop(server);

    // An outage longer than the retry: 503 with Retry-After, never 500; then all well again.
    let server = InProcess::ready(
        &dir,
        PASSWORD,
        &[
            ("storage-users.database", users_db.as_str()),
            ("storage-system.database", system_db.as_str()),
            ("storage-users.database_retry", "2s"),
            ("storage-system.database_retry", "2s"),
        ],
    )
    .await?;
    let addr = server.public.clone();
    let debug = server.debug.clone();
    let (ok, unavailable, failures) = under_load(&addr, async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        pg.stop("immediate").await?;
        // Past the 2 s grace, /readyz says why the storage services cannot answer.
        let gone = readyz_until(&debug, Duration::from_secs(10), |status, body| {
            status == 503 && body.contains("the metadata database is unreachable")
        })
        .await?;
        eprintln!("not ready after the database went: {gone}");
        tokio::time::sleep(Duration::from_secs(2)).await;
        pg.start_again().await?;
        readyz_until(&debug, Duration::from_secs(15), |status, _| status == 200).await?;
        // Past the pool's and the writer's reconnection: the load goes on a while.
        tokio::time::sleep(Duration::from_secs(3)).await;
        Ok(())
    })
    .await?;
    eprintln!(
        "outage: {ok} requests succeeded, {unavailable} heard 503, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "requests failed other than 503 in an outage: {failures:?}"
    );
    assert!(unavailable > 0, "nothing heard 503 through a 6 s outage");
    // And after it, every kind of request works.
    written_and_read_back(&addr, "after.txt", "back").await?;
    drop(server);
    drop(pg);
    Ok(())
}

/// Every service in this process with storage-users' blobs in `s3`'s bucket, reached
/// through a [`FaultyS3`] (breaking requests if `breaks`), `settings` on top.
async fn behind_faulty_s3(
    dir: &TempDir,
    s3: &arca_tests::Moto,
    breaks: bool,
    settings: &[(&str, &str)],
) -> anyhow::Result<(FaultyS3, InProcess)> {
    let faulty = FaultyS3::start(&s3.endpoint).await?;
    faulty.set_breaking(breaks);
    let mut all = vec![
        ("storage-users.blobs.kind", "s3"),
        ("storage-users.blobs.s3.endpoint", faulty.endpoint.as_str()),
        ("storage-users.blobs.s3.bucket", "arca-blobs"),
        ("storage-users.blobs.s3.region", "us-east-1"),
        ("storage-users.blobs.s3.access_key_id", "test"),
        ("storage-users.blobs.s3.secret_access_key", "test"),
    ];
    all.extend_from_slice(settings);
    let server = InProcess::ready(dir, PASSWORD, &all).await?;
    Ok((faulty, server))
}

/// S3 answering 503 SlowDown to one request in seven and resetting the connection of another:
/// the object store client's retries absorb it all — the same load as above (PUTs of up to
/// 300 KB, overwrites, GETs compared) fails no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_errors_and_resets_fail_no_request() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let s3 = arca_tests::Moto::start(&["arca-blobs"]).await?;
    let (faulty, server) = behind_faulty_s3(&dir, &s3, true, &[]).await?;
    let addr = server.public.clone();
    make_client_folders(&addr).await?;
    let (ok, unavailable, failures) = under_load(&addr, async {
        tokio::time::sleep(Duration::from_secs(4)).await;
        Ok(())
    })
    .await?;
    let broken = faulty.broken();
    eprintln!(
        "S3 faults: {broken} S3 requests broken; {ok} requests succeeded, {unavailable} heard 503, {} failed",
        failures.len()
    );
    assert!(broken >= 10, "the proxy hardly broke anything: {broken}");
    assert!(
        failures.is_empty(),
        "requests failed through S3 faults: {failures:?}"
    );
    assert_eq!(unavailable, 0, "S3 faults made requests hear 503");
    assert!(ok >= 40, "the load hardly ran: {ok} requests");
    drop(server);
    Ok(())
}

/// A frozen S3 (every request held without an answer for 8 s, as a SIGSTOPped server holds
/// them) costs clients a bounded wait, never a hang: with `blobs.s3.read_timeout` 1 s and
/// `database_retry` 2 s, no PUT or GET takes more than 5 s; what S3 could not serve meanwhile
/// is 503 with Retry-After, nothing else fails, and once it answers again the load runs on
/// with every GET byte-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_s3_is_a_bounded_wait_then_503() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let s3 = arca_tests::Moto::start(&["arca-blobs"]).await?;
    let settings = [
        ("storage-users.blobs.s3.read_timeout", "1s"),
        ("storage-users.database_retry", "2s"),
    ];
    let (faulty, server) = behind_faulty_s3(&dir, &s3, false, &settings).await?;
    let addr = server.public.clone();
    make_client_folders(&addr).await?;
    let (ok, unavailable, failures, slowest) = timed_load(&addr, async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        faulty.set_frozen(true);
        tokio::time::sleep(Duration::from_secs(8)).await;
        faulty.set_frozen(false);
        // Long enough after the thaw for every client to go round again.
        tokio::time::sleep(Duration::from_secs(3)).await;
        Ok(())
    })
    .await?;
    let held = faulty.broken();
    eprintln!(
        "S3 frozen 8 s: {held} S3 requests held; {ok} requests succeeded, {unavailable} heard 503, \
         {} failed; the slowest PUT or GET took {slowest:?}",
        failures.len()
    );
    assert!(held >= 4, "the freeze hardly held anything: {held}");
    assert!(
        failures.is_empty(),
        "requests failed while S3 was frozen: {failures:?}"
    );
    assert!(unavailable > 0, "nobody heard 503 through an 8 s freeze");
    assert!(
        slowest <= Duration::from_secs(5),
        "a request waited {slowest:?} on a frozen S3"
    );
    // After the thaw: written and read back, as before the freeze.
    written_and_read_back(&addr, "thawed.txt", "thawed").await?;
    drop(server);
    Ok(())
}
