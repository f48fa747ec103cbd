//! The search benchmark: the search service over a realistic tree, through the real `arca
//! server` on built-in defaults (SQLite, the index in `data_dir/search`).
//!
//! 1. [`FILES`] small text files in [`FOLDERS`] folders are written by PUT with the search
//!    service left out (`ARCA_SERVICES` without it), then the server is started again with it:
//!    the time until a query counts every file is the first index, in files/s (names and
//!    contents: every file is text and read whole).
//! 2. Name queries (`REPORT oc:search-files`, `name:"*…*"` as ownCloud Web sends them) one at a
//!    time, each for a different file: p50 and p99 over [`QUERIES`] (target p50 < 10 ms).
//! 3. PUT to findable: a new file is written, then searched for every [`POLL`] until found;
//!    p50 and the worst of [`FRESH`] (target < 1 s). The crawler's round over every space is
//!    left at its default (10 s), so what is measured is storage-users' change hint.
//! 4. Memory: the process's VmRSS with the index full, beside the same tree served without
//!    the search service, and the index's size on disk.
//! 5. Steps 1 to 3 again with the index in PostgreSQL (`search.database`, a private server
//!    started here), as several search instances share it.
//!
//! `ARCA_BENCH_SEARCH_FILES` sets the number of files (default 100,000) for a quick run.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};

use crate::files::{CREATED, Conn, ms, thousands};
use crate::process::{self, Server};
use crate::{Scratch, Targets};

const USER: &str = "admin";
const FILES: usize = 100_000;
const FOLDERS: usize = 100;
const QUERIES: usize = 500;
const FRESH: usize = 20;
const POLL: Duration = Duration::from_millis(10);
/// The longest a first index or one fresh file may take before the bench gives up.
const GIVE_UP: Duration = Duration::from_secs(900);
/// Every service but search (see arca_config::SERVICE_NAMES).
const WITHOUT_SEARCH: &str =
    "proxy,frontend,gateway,storage-users,storage-system,sharing,thumbnails";

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    let files = std::env::var("ARCA_BENCH_SEARCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FILES)
        .max(FOLDERS);
    let bin = process::locate_arca("search")?;
    let scratch = Scratch::new("search").context("scratch directory")?;
    let (password, auth) = process::admin_credentials(USER);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;

    // The tree, written without the search service.
    let env = [
        ("ARCA_ADMIN_PASSWORD", password.as_str()),
        ("ARCA_SERVICES", WITHOUT_SEARCH),
    ];
    let (mut server, debug, addr) = process::spawn_arca(&bin, &scratch.path, &env)?;
    server.wait_ready(debug)?;
    let started = Instant::now();
    rt.block_on(fill(addr, &auth, files))
        .map_err(|e| anyhow::anyhow!(server.with_log(&format!("{e:#}"))))?;
    let written = started.elapsed();
    let rss_without = process::vm_rss_kib(server.child.id())?;
    stop(&mut server);
    println!(
        "search: {} text files in {FOLDERS} folders written in {:.1?} (search service off)",
        thousands(files as f64),
        written
    );

    // The same data dir with the search service: the first index, then the queries.
    let env = [("ARCA_ADMIN_PASSWORD", password.as_str())];
    let (mut server, debug, addr) = process::spawn_arca(&bin, &scratch.path, &env)?;
    server.wait_ready(debug)?;
    let result = rt.block_on(measure(addr, &auth, files, "fresh"));
    let m = result.map_err(|e| anyhow::anyhow!(server.with_log(&format!("{e:#}"))))?;
    let rss_with = process::vm_rss_kib(server.child.id())?;
    let index_bytes = dir_bytes(&scratch.path.join("data/search"));
    stop(&mut server);
    report(targets, &m, files, "");
    println!(
        "search: VmRSS with the index full {} MiB, without the search service {} MiB; \
         index on disk {} MiB",
        rss_with / 1024,
        rss_without / 1024,
        index_bytes >> 20
    );

    // Once more with the index shared in PostgreSQL (`search.database`), from empty.
    let pg_dir = arca_tests::TempDir::new();
    let pg = rt.block_on(arca_tests::Postgres::start(&pg_dir))?;
    let env = [
        ("ARCA_ADMIN_PASSWORD", password.as_str()),
        ("ARCA_SEARCH_DATABASE", pg.url.as_str()),
    ];
    let (mut server, debug, addr) = process::spawn_arca(&bin, &scratch.path, &env)?;
    server.wait_ready(debug)?;
    let result = rt.block_on(measure(addr, &auth, files, "later"));
    let m = result.map_err(|e| anyhow::anyhow!(server.with_log(&format!("{e:#}"))))?;
    stop(&mut server);
    drop(pg);
    report(targets, &m, files, " (PostgreSQL)");
    Ok(())
}

/// Prints `m` and checks its targets; `label` names the index's home ("" for the default).
fn report(targets: &mut Targets, m: &Measured, files: usize, label: &str) {
    println!(
        "search{label}: first index of {} files  {} files/s ({:.1?})",
        thousands(files as f64),
        thousands(files as f64 / m.indexed.as_secs_f64()),
        m.indexed
    );
    println!(
        "search{label}: name query over them, one at a time  p50 {}, p99 {} ({QUERIES} queries)",
        ms(m.query_p50),
        ms(m.query_p99)
    );
    println!(
        "search{label}: PUT to findable  p50 {}, worst {} ({FRESH} files)",
        ms(m.fresh_p50),
        ms(m.fresh_max)
    );
    targets.check(
        m.query_p50 < Duration::from_millis(10),
        &format!(
            "search{label} name query p50 {} < 10 ms over {} files",
            ms(m.query_p50),
            thousands(files as f64)
        ),
    );
    targets.check(
        m.fresh_max < Duration::from_secs(1),
        &format!(
            "search{label} PUT to findable worst {} < 1,000 ms",
            ms(m.fresh_max)
        ),
    );
}

fn stop(server: &mut Server) {
    match server.terminate() {
        Ok((status, _)) if status.success() => {}
        Ok((status, _)) => println!("search: note: arca exited with {status}"),
        Err(e) => println!("search: note: stopping arca: {e:#}"),
    }
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn dav(path: &str) -> String {
    format!("/remote.php/dav/files/{USER}/{path}")
}

/// File `i`'s path: folder `i % FOLDERS`, a name unique by `i`.
fn file_path(i: usize) -> String {
    format!("bench/team-{:03}/report-{i:06}.txt", i % FOLDERS)
}

/// A few lines of text with words shared by many files and one of its own.
fn file_body(i: usize) -> Bytes {
    Bytes::from(format!(
        "Quarterly report {i}\nbudget forecast travel invoices\nreference token{i:06}x\n"
    ))
}

/// Writes the folders and `files` files over [`crate::wrk::CONNECTIONS`] connections.
async fn fill(addr: SocketAddr, auth: &str, files: usize) -> anyhow::Result<()> {
    let mut c = Conn::open(addr, auth).await?;
    c.call("MKCOL", &dav("bench/"), &[], Bytes::new(), &[201])
        .await?;
    for f in 0..FOLDERS {
        c.call(
            "MKCOL",
            &dav(&format!("bench/team-{f:03}/")),
            &[],
            Bytes::new(),
            &[201],
        )
        .await?;
    }
    crate::files::put_all(addr, auth, files, |i| dav(&file_path(i)), file_body).await
}

struct Measured {
    indexed: Duration,
    query_p50: Duration,
    query_p99: Duration,
    fresh_p50: Duration,
    fresh_max: Duration,
}

/// `fresh_name`: the name the fresh files start with (another for each run on one tree).
async fn measure(
    addr: SocketAddr,
    auth: &str,
    files: usize,
    fresh_name: &str,
) -> anyhow::Result<Measured> {
    let mut c = Conn::open(addr, auth).await?;
    // The first index: until a query matching every file counts them all.
    let started = Instant::now();
    loop {
        let (total, _) = search(&mut c, "name:\"*report-*\"", 1).await?;
        if total >= files {
            break;
        }
        ensure!(
            started.elapsed() < GIVE_UP,
            "only {total} of {files} files indexed after {GIVE_UP:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let indexed = started.elapsed();
    // Every file's content is there too: the last file's own word finds it.
    let last = files - 1;
    let (total, body) = search(&mut c, &format!("content:token{last:06}x"), 10).await?;
    ensure!(
        total == 1 && body.contains(&format!("report-{last:06}.txt")),
        "content:token{last:06}x found {total}"
    );

    // Name queries, each for another file (a prime stride spreads them over the folders).
    let mut times = Vec::with_capacity(QUERIES);
    for q in 0..QUERIES {
        let i = (q * 7_919) % files;
        let pattern = format!("name:\"*report-{i:06}*\"");
        let t = Instant::now();
        let (total, _) = search(&mut c, &pattern, 50).await?;
        times.push(t.elapsed());
        ensure!(total == 1, "{pattern} found {total} files");
    }
    times.sort();
    let query_p50 = times[times.len() / 2];
    let query_p99 = times[times.len() * 99 / 100];

    // PUT to findable, each fresh file in another folder.
    let mut fresh = Vec::with_capacity(FRESH);
    for k in 0..FRESH {
        let path = format!(
            "bench/team-{:03}/{fresh_name}-{k:03}-note.txt",
            k * 7 % FOLDERS
        );
        c.call("PUT", &dav(&path), &[], file_body(k), CREATED)
            .await?;
        let written = Instant::now();
        let pattern = format!("name:\"*{fresh_name}-{k:03}-*\"");
        loop {
            let (total, _) = search(&mut c, &pattern, 10).await?;
            if total == 1 {
                break;
            }
            ensure!(
                written.elapsed() < GIVE_UP,
                "{path} not findable after {GIVE_UP:?}"
            );
            tokio::time::sleep(POLL).await;
        }
        fresh.push(written.elapsed());
    }
    fresh.sort();
    Ok(Measured {
        indexed,
        query_p50,
        query_p99,
        fresh_p50: fresh[fresh.len() / 2],
        fresh_max: fresh[fresh.len() - 1],
    })
}

/// `REPORT oc:search-files` as ownCloud Web sends it: the total from `Content-Range` and the
/// body.
async fn search(c: &mut Conn, pattern: &str, limit: u32) -> anyhow::Result<(usize, String)> {
    let escaped = pattern
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('"', "&quot;");
    let body = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<oc:search-files xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">
  <d:prop><oc:fileid/><oc:name/><oc:score/><d:getetag/><oc:permissions/></d:prop>
  <oc:search><oc:pattern>{escaped}</oc:pattern><oc:limit>{limit}</oc:limit></oc:search>
</oc:search-files>"#
    );
    let resp = c
        .send(
            "REPORT",
            "/remote.php/dav/spaces/",
            &[("content-type", "application/xml")],
            Full::new(Bytes::from(body)).boxed(),
        )
        .await?;
    let status = resp.status().as_u16();
    // `rows 0-{n-1}/{total}`; no header when nothing matched.
    let total = resp
        .headers()
        .get("content-range")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit('/').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&resp.into_body().collect().await?.to_bytes()).into_owned();
    ensure!(status == 207, "search {pattern}: {status} {text}");
    Ok((total, text))
}
