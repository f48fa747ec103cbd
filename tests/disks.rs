//! Full disks (issue 36): a small tmpfs mounted where arca keeps its data, filled through
//! WebDAV until it is full, then given more room (a remount with a larger size, as an operator
//! grows a volume). While full every write is refused with 507 and nothing else, every
//! acknowledged file stays byte-exact, resumable uploads (TUS and chunked) keep what they had and
//! go on once there is room, and after a restart on the same disk nothing half-written shows.
//!
//! The mounts need root (CAP_SYS_ADMIN), as the network namespaces of other tests do; a
//! machine without it fails here with the reason rather than skipping.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use arca_tests::below::SmallDisk;
use arca_tests::{HttpResponse, InProcess, Postgres, TempDir, pattern, send, send_as};
use base64::Engine as _;

const PASSWORD: &str = "disks-secret";
const ROOT: &str = "/remote.php/dav/files/admin";
const UPLOADS: &str = "/remote.php/dav/uploads/admin";
/// Upload URLs are signed with the identity secret: a fixed one lets them outlive a restart.
const SECRET: &str = "disks-test-identity-secret";
const MIB: usize = 1 << 20;

fn auth() -> String {
    arca_tests::basic("admin", PASSWORD)
}

async fn dav(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<bytes::Bytes>,
) -> anyhow::Result<HttpResponse> {
    send_as(addr, &auth(), method, path, headers, body).await
}

/// A PUT's status (a 5xx also logged with its text).
async fn put(addr: &str, path: &str, body: &[u8]) -> anyhow::Result<u16> {
    let r = dav(addr, "PUT", path, &[], body.to_vec()).await?;
    if r.status >= 500 {
        eprintln!("PUT {path}: {} {}", r.status, r.text());
    }
    Ok(r.status)
}

async fn start(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<InProcess> {
    let mut all = vec![("identity.secret", SECRET)];
    all.extend_from_slice(settings);
    InProcess::ready(dir, PASSWORD, &all).await
}

/// What the test holds as acknowledged: each path's last content written with success.
#[derive(Default)]
struct Acknowledged(HashMap<String, Vec<u8>>);

impl Acknowledged {
    /// Every acknowledged file read back and compared.
    async fn verify(&self, addr: &str, when: &str) -> anyhow::Result<()> {
        for (path, want) in &self.0 {
            let r = dav(addr, "GET", path, &[], "").await?;
            ensure!(
                r.status == 200 && &r.body == want,
                "{when}: GET {path}: {} with {} bytes, expected {} bytes",
                r.status,
                r.body.len(),
                want.len()
            );
        }
        eprintln!(
            "{when}: {} acknowledged files read back byte-exact",
            self.0.len()
        );
        Ok(())
    }
}

/// PUTs files of mixed sizes, overwriting a few names, until the disk refuses `refusals` in a
/// row (bounded by `within`). Every answer is a success or 507; anything else fails the
/// test. Returns how many were refused.
async fn fill(
    addr: &str,
    folder: &str,
    sizes: &[usize],
    refusals: usize,
    acked: &mut Acknowledged,
    within: Duration,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + within;
    let (mut in_a_row, mut refused) = (0, 0);
    let mut i = 0usize;
    while in_a_row < refusals {
        ensure!(
            Instant::now() < deadline,
            "the disk was not full after {i} PUTs in {within:?}"
        );
        let size = sizes[i % sizes.len()];
        // Names come back now and then: overwrites (which keep the old content as a version).
        let path = format!("{folder}/f{}.bin", i % 40);
        let body = pattern(size, i as u32);
        let r = dav(addr, "PUT", &path, &[], body.clone()).await?;
        match r.status {
            201 | 204 => {
                acked.0.insert(path, body);
                in_a_row = 0;
            }
            507 => {
                in_a_row += 1;
                refused += 1;
            }
            s => anyhow::bail!(
                "PUT {path} ({size} bytes) on a filling disk: {s} {}",
                r.text()
            ),
        }
        i += 1;
    }
    Ok(refused)
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Creates a TUS upload of `length` bytes for `name` in the admin's root; its path.
async fn tus_create(addr: &str, name: &str, length: usize) -> anyhow::Result<String> {
    let r = dav(
        addr,
        "POST",
        ROOT,
        &[
            ("tus-resumable", "1.0.0"),
            ("upload-length", &length.to_string()),
            ("upload-metadata", &format!("filename {}", b64(name))),
        ],
        "",
    )
    .await?;
    ensure!(r.status == 201, "TUS POST: {} {}", r.status, r.text());
    let location = r.header("location").context("no Location")?;
    let at = location
        .find("/data/")
        .context("Location not under /data/")?;
    Ok(location[at..].to_owned())
}

async fn tus_patch(addr: &str, path: &str, offset: usize, body: &[u8]) -> anyhow::Result<u16> {
    let r = send(
        addr,
        "PATCH",
        path,
        &[
            ("tus-resumable", "1.0.0"),
            ("upload-offset", &offset.to_string()),
            ("content-type", "application/offset+octet-stream"),
        ],
        body.to_vec(),
    )
    .await?;
    Ok(r.status)
}

async fn tus_offset(addr: &str, path: &str) -> anyhow::Result<u64> {
    let r = send(addr, "HEAD", path, &[("tus-resumable", "1.0.0")], "").await?;
    r.header("upload-offset")
        .with_context(|| format!("HEAD {path}: {} without Upload-Offset", r.status))?
        .parse()
        .context("Upload-Offset")
}

/// The whole data directory on one small disk: PUTs, a TUS upload and a chunked upload fill
/// it; 507 while full; everything goes on after it grows, and after a restart.
#[tokio::test]
async fn a_full_data_disk_refuses_with_507_and_everything_goes_on_once_it_grows()
-> anyhow::Result<()> {
    let dir = TempDir::new();
    let data = InProcess::data_dir(&dir);
    let disk = SmallDisk::mount(data.clone(), 40 * MIB as u64)?;
    let d = start(&dir, &[]).await?;
    let a = d.public.clone();
    let r = dav(&a, "MKCOL", &format!("{ROOT}/fill"), &[], "").await?;
    ensure!(r.status == 201, "MKCOL: {}", r.status);

    // Two uploads under way before the disk fills.
    let tus_body = pattern(6 * MIB, 77);
    let tus = tus_create(&a, "tus.bin", tus_body.len()).await?;
    ensure!(tus_patch(&a, &tus, 0, &tus_body[..2 * MIB]).await? == 204);
    let chunks = [pattern(2 * MIB, 78), pattern(4 * MIB, 79)];
    let folder = format!("{UPLOADS}/chunked-1");
    let r = dav(&a, "MKCOL", &folder, &[], "").await?;
    ensure!(r.status == 201, "MKCOL upload folder: {}", r.status);
    let r = dav(
        &a,
        "PUT",
        &format!("{folder}/00001"),
        &[],
        chunks[0].clone(),
    )
    .await?;
    ensure!(r.status == 201, "first chunk: {} {}", r.status, r.text());

    let mut acked = Acknowledged::default();
    let sizes = [MIB, 300_000, 65_536, 4_096, 2 * MIB];
    let refused = fill(
        &a,
        &format!("{ROOT}/fill"),
        &sizes,
        6,
        &mut acked,
        Duration::from_secs(60),
    )
    .await?;
    eprintln!(
        "full after {} acknowledged files ({refused} PUTs refused with 507), {} bytes used",
        acked.0.len(),
        disk.used()?
    );

    // Full: the rest of the TUS upload and the second chunk are refused, and keep nothing.
    let status = tus_patch(&a, &tus, 2 * MIB, &tus_body[2 * MIB..]).await?;
    ensure!(status == 507, "the TUS PATCH on a full disk: {status}");
    ensure!(
        tus_offset(&a, &tus).await? == 2 * MIB as u64,
        "the upload kept its offset"
    );
    let status = put(&a, &format!("{folder}/00002"), &chunks[1]).await?;
    ensure!(status == 507, "a chunk on a full disk: {status}");
    acked.verify(&a, "while full").await?;

    // Room again: both uploads finish, new files are taken.
    disk.resize(96 * MIB as u64)?;
    ensure!(tus_patch(&a, &tus, 2 * MIB, &tus_body[2 * MIB..]).await? == 204);
    acked.0.insert(format!("{ROOT}/tus.bin"), tus_body);
    let status = put(&a, &format!("{folder}/00002"), &chunks[1]).await?;
    ensure!(status == 201, "the chunk again: {status}");
    let target = format!("http://{a}{ROOT}/chunked.bin");
    let total = (chunks[0].len() + chunks[1].len()).to_string();
    let r = dav(
        &a,
        "MOVE",
        &format!("{folder}/.file"),
        &[("destination", &target), ("oc-total-length", &total)],
        "",
    )
    .await?;
    ensure!(r.status == 201, "assembling: {} {}", r.status, r.text());
    acked
        .0
        .insert(format!("{ROOT}/chunked.bin"), chunks.concat());
    let after = pattern(3 * MIB, 80);
    let r = dav(&a, "PUT", &format!("{ROOT}/after.bin"), &[], after.clone()).await?;
    ensure!(r.status == 201, "a PUT after growing: {}", r.status);
    acked.0.insert(format!("{ROOT}/after.bin"), after);
    acked.verify(&a, "after growing").await?;

    d.stop().await?;
    let d = start(&dir, &[]).await?;
    acked.verify(&d.public, "after a restart").await?;
    d.stop().await?;
    drop(disk);
    Ok(())
}

/// The metadata database on a disk of its own that fills (its write-ahead log cannot grow)
/// while the blobs have room: concurrent PUTs, committed in shared transactions, are each
/// answered 201 or 507, none acknowledged and lost; after it grows, writes go on.
#[tokio::test]
async fn a_full_database_disk_refuses_whole_batches_and_loses_no_acknowledged_write()
-> anyhow::Result<()> {
    let dir = TempDir::new();
    let db_dir = dir.join("db");
    let disk = SmallDisk::mount(db_dir.clone(), 64 * MIB as u64)?;
    let url = format!("sqlite://{}?mode=rwc", db_dir.join("files.db").display());
    let full = FullDatabase {
        clients: 8,
        room: 768 * 1024,
        roomy: 64 * MIB as u64,
    };
    full.run(&dir, &disk, &url, async { Ok(()) }).await?;
    drop(disk);
    Ok(())
}

/// PostgreSQL's data directory on a small disk: once the server cannot extend a table or an
/// index (SQLSTATE 53100 disk_full) every PUT is refused with 507 and nothing else, nothing
/// acknowledged is lost, reads go on, and once the disk grows writes do too. The WAL is given
/// a fresh segment before the disk is cut down, as a server that has been running has: what
/// runs out is the room tables grow into, not the WAL's (which PostgreSQL answers by stopping).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_postgresql_disk_refuses_with_507_and_loses_no_acknowledged_write()
-> anyhow::Result<()> {
    let dir = TempDir::new();
    // `Postgres::start` keeps its data in DIR/pg: the small disk is mounted there first.
    let disk = SmallDisk::mount(dir.join("pg"), 256 * MIB as u64)?;
    let pg = Postgres::start(&dir).await?;
    let url = pg.durable_database().await?;
    let full = FullDatabase {
        clients: 4,
        room: 512 * 1024,
        roomy: 256 * MIB as u64,
    };
    full.run(&dir, &disk, &url, pg.switch_wal()).await?;
    drop(pg);
    drop(disk);
    Ok(())
}

/// A metadata database (`storage-users.database`) on a disk that fills under concurrent small
/// PUTs and then grows.
struct FullDatabase {
    clients: usize,
    /// Bytes left free on the disk once the clients' folders exist.
    room: u64,
    /// The disk's size again after.
    roomy: u64,
}

impl FullDatabase {
    /// Each client PUTs until its PUTs are refused with 507 four times in a row (any other
    /// answer fails); then every acknowledged file is read back, a listing works, the disk
    /// grows, a PUT is taken, and after a restart every acknowledged file reads back again.
    /// `before_cut` runs just before the disk is cut down to `room`.
    async fn run(
        &self,
        dir: &TempDir,
        disk: &SmallDisk,
        database: &str,
        before_cut: impl std::future::Future<Output = anyhow::Result<()>>,
    ) -> anyhow::Result<()> {
        let settings = [("storage-users.database", database)];
        let d = start(dir, &settings).await?;
        let a = d.public.clone();
        for c in 0..self.clients {
            let r = dav(&a, "MKCOL", &format!("{ROOT}/c{c}"), &[], "").await?;
            ensure!(r.status == 201, "MKCOL: {}", r.status);
        }
        before_cut.await?;
        let used = disk.used()?;
        disk.resize(used + self.room)?;

        let clients: Vec<_> = (0..self.clients)
            .map(|c| {
                let a = a.clone();
                tokio::spawn(async move {
                    let mut acked = Acknowledged::default();
                    // Small bodies: each is mostly rows in the database.
                    let sizes = [4_096, 1_000, 16_384];
                    let refused = fill(
                        &a,
                        &format!("{ROOT}/c{c}"),
                        &sizes,
                        4,
                        &mut acked,
                        Duration::from_secs(90),
                    )
                    .await?;
                    anyhow::Ok((acked, refused))
                })
            })
            .collect();
        let mut acked = Acknowledged::default();
        let mut refused = 0;
        for c in clients {
            let (mine, n) = tokio::time::timeout(Duration::from_secs(120), c).await???;
            acked.0.extend(mine.0);
            refused += n;
        }
        eprintln!(
            "database disk full: {} files acknowledged, {refused} PUTs refused with 507",
            acked.0.len()
        );
        acked.verify(&a, "while the database disk is full").await?;
        let r = dav(
            &a,
            "PROPFIND",
            &format!("{ROOT}/c0/"),
            &[("depth", "1")],
            "",
        )
        .await?;
        ensure!(r.status == 207, "a listing while full: {}", r.status);

        disk.resize(self.roomy)?;
        let more = pattern(10_000, 99);
        let r = dav(&a, "PUT", &format!("{ROOT}/c0/more.bin"), &[], more.clone()).await?;
        ensure!(
            r.status == 201,
            "a PUT once the disk grew: {} {}",
            r.status,
            r.text()
        );
        acked.0.insert(format!("{ROOT}/c0/more.bin"), more);
        d.stop().await?;
        let d = start(dir, &settings).await?;
        acked.verify(&d.public, "after a restart").await?;
        d.stop().await?;
        Ok(())
    }
}

/// Only the blob store's disk is small: PUTs are refused with 507 once it is full while the
/// database has room, and taken again once it grows.
#[tokio::test]
async fn a_full_blob_disk_refuses_with_507_while_the_database_has_room() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let blobs: PathBuf = InProcess::data_dir(&dir).join("storage-users/blobs");
    let disk = SmallDisk::mount(blobs, 16 * MIB as u64)?;
    let d = start(&dir, &[]).await?;
    let a = d.public.clone();
    let mut acked = Acknowledged::default();
    let sizes = [MIB, 200_000, 3 * MIB];
    fill(&a, ROOT, &sizes, 4, &mut acked, Duration::from_secs(60)).await?;
    acked.verify(&a, "blob disk full").await?;
    disk.resize(48 * MIB as u64)?;
    let body = pattern(2 * MIB, 5);
    let r = dav(&a, "PUT", &format!("{ROOT}/again.bin"), &[], body.clone()).await?;
    ensure!(
        r.status == 201,
        "a PUT once the blob disk grew: {}",
        r.status
    );
    acked.0.insert(format!("{ROOT}/again.bin"), body);
    acked.verify(&a, "blob disk grown").await?;
    d.stop().await?;
    drop(disk);
    Ok(())
}
