//! The undo benchmark: what the trash bin and versions cost, through the real `arca server`
//! on built-in defaults (SQLite, local blobs, every blob fsynced).
//!
//! Measured, one line each:
//! - PUT of 4 KiB overwriting existing names, 16 connections, on two fresh servers side by side:
//!   one with versions on (the default) and one with them off (`ARCA_VERSIONS_ENABLED=false`),
//!   in interleaved rounds; the on/off ratio is the cost of keeping every overwritten content
//!   (target ≥ 0.9×). Measured first, so that the servers differ only in that switch;
//! - DELETE of one folder of [`BIG_FOLDER`] files (ms: one request, the whole subtree into the
//!   trash), then the bulk restore of it in one `POST /api/v1/trash/restore` (items/s);
//! - PROPFIND Depth 1 of a trash of [`TRASH_ITEMS`] items, each removed on its own, asking for
//!   the trash properties a client shows (req/s over 16 connections with wrk);
//! - PROPFIND Depth 1 of the versions of one file with [`VERSIONS`] versions (req/s).
//!
//! `ARCA_BENCH_UNDO_FILES` sets the big folder's size (default 100,000) for a quick run.

use std::fmt::Write as _;
use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};

use crate::files::{CREATED, Conn, count_elements, lua_head, ms, thousands, wrk};
use crate::process::{self, Server};
use crate::wrk::CONNECTIONS;
use crate::{Scratch, Targets};

const USER: &str = "admin";
const BIG_FOLDER: usize = 100_000;
const TRASH_ITEMS: usize = 10_000;
const VERSIONS: usize = 1_000;
/// Names the overwrite load cycles over, per wrk thread (each thread its own range, so no two
/// connections write one name at once).
const OVERWRITE_NAMES: usize = 128;
const SMALL: usize = 4096;
const MEASURE: Duration = Duration::from_secs(5);
const WARMUP: Duration = Duration::from_secs(1);
/// Interleaved rounds of the on/off overwrite lines: background load hits both alike.
const ROUNDS: usize = 5;
const RATIO_TARGET: f64 = 0.9;

const TRASH_PROPS: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><oc:trashbin-original-filename/><oc:trashbin-original-location/><oc:trashbin-delete-datetime/><d:getcontentlength/><d:resourcetype/></d:prop></d:propfind>"#;
const VERSION_PROPS: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:"><d:prop><d:getetag/><d:getcontentlength/><d:getlastmodified/></d:prop></d:propfind>"#;

/// One `arca server` under test, with its password's Basic header.
struct Arca {
    server: Server,
    addr: SocketAddr,
    auth: String,
}

impl Arca {
    fn start(bin: &Path, dir: &Path, versions: bool) -> anyhow::Result<Self> {
        let (password, auth) = process::admin_credentials(USER);
        let versions = if versions { "true" } else { "false" };
        let (mut server, debug, addr) = process::spawn_arca(
            bin,
            dir,
            &[
                ("ARCA_ADMIN_PASSWORD", &password),
                ("ARCA_VERSIONS_ENABLED", versions),
            ],
        )?;
        server.wait_ready(debug)?;
        Ok(Self { server, addr, auth })
    }

    fn fail(&self, e: anyhow::Error) -> anyhow::Error {
        anyhow::anyhow!(self.server.with_log(&format!("{e:#}")))
    }
}

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    let bin = process::locate_arca("undo")?;
    ensure!(
        crate::wrk::find_program("wrk").is_some(),
        "wrk not found (apt-get install wrk; the files section installs it)"
    );
    let files = match std::env::var("ARCA_BENCH_UNDO_FILES") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("ARCA_BENCH_UNDO_FILES={v:?}: not a count"))?,
        Err(_) => BIG_FOLDER,
    };
    ensure!(files > 0, "ARCA_BENCH_UNDO_FILES must be above 0");
    let scratch = Scratch::new("undo").context("scratch directory")?;
    let wrk_dir = scratch.path.join("wrk");
    fs::create_dir_all(&wrk_dir).context("wrk script dir")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;

    let mut on = Arca::start(&bin, &scratch.path.join("on"), true)?;
    let mut off = Arca::start(&bin, &scratch.path.join("off"), false)?;
    println!(
        "undo: arca {} (versions on), arca {} (versions off); user {USER}, built-in defaults",
        on.addr, off.addr
    );

    // The overwrite lines first, while the two servers differ in nothing but the versions
    // switch: measured after the big folder and the trash, the `on` server also carried
    // 100,000 more nodes and 10,000 trash rows than `off` (0.70× then; 0.80–0.97× since).
    // The same names on both, in interleaved rounds.
    for arca in [&on, &off] {
        rt.block_on(overwrite_names(arca))
            .map_err(|e| arca.fail(e))?;
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let (mut cpu_with, mut cpu_without) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Which server goes first alternates: the first of a pair ran slower in some runs
        // (the other's writes still being flushed), which must not count against one side.
        let mut pair = [
            (&on, &mut with, &mut cpu_with, "on"),
            (&off, &mut without, &mut cpu_without, "off"),
        ];
        if round % 2 == 1 {
            pair.reverse();
        }
        for (arca, rates, cpu, name) in pair {
            let (rate, cpu_us) = overwrite_rate(&wrk_dir, &format!("{name}-{round}"), arca)
                .map_err(|e| arca.fail(e))?;
            rates.push(rate);
            cpu.push(cpu_us);
        }
    }
    println!(
        "undo: overwrite rounds (ops/s): on {}; off {}",
        rounds(&with),
        rounds(&without)
    );
    let (with, without) = (median(with), median(without));
    let ratio = with / without;
    let (cpu_with, cpu_without) = (median(cpu_with), median(cpu_without));
    println!(
        "undo: PUT 4 KiB overwrite, 16 conns: versions on {} ops/s, off {} ops/s (median of \
         {ROUNDS}); server CPU per overwrite on {} µs, off {} µs ({:.2}×)",
        thousands(with),
        thousands(without),
        thousands(cpu_with),
        thousands(cpu_without),
        cpu_with / cpu_without
    );
    targets.check(
        ratio >= RATIO_TARGET,
        &format!("undo: overwrite with versions on {ratio:.2}× of off ≥ {RATIO_TARGET}×"),
    );

    let (delete, restore) = rt
        .block_on(big_folder(&on, files))
        .map_err(|e| on.fail(e))?;
    println!(
        "undo: DELETE of a folder of {} files                 {}",
        thousands(files as f64),
        ms(delete)
    );
    let rate = files as f64 / restore.as_secs_f64();
    println!(
        "undo: bulk restore of it (one call)                    {} items/s ({})",
        thousands(rate),
        ms(restore)
    );

    let trash = rt
        .block_on(trash_of_many(&on))
        .and_then(|()| {
            let url = format!("http://{}/remote.php/dav/trash-bin/{USER}/", on.addr);
            propfind_rate(&wrk_dir, "trash", &on.auth, &url, TRASH_PROPS)
        })
        .map_err(|e| on.fail(e))?;
    println!(
        "undo: PROPFIND depth 1, trash of {} items          {} req/s",
        thousands(TRASH_ITEMS as f64),
        thousands(trash)
    );

    let listing = rt
        .block_on(many_versions(&on))
        .and_then(|path| {
            let url = format!("http://{}{path}", on.addr);
            propfind_rate(&wrk_dir, "versions", &on.auth, &url, VERSION_PROPS)
        })
        .map_err(|e| on.fail(e))?;
    println!(
        "undo: PROPFIND depth 1, {} versions of one file      {} req/s",
        thousands(VERSIONS as f64),
        thousands(listing)
    );

    for (name, arca) in [("on", &mut on), ("off", &mut off)] {
        match arca.server.terminate() {
            Ok((status, _)) if status.success() => {}
            Ok((status, _)) => println!("undo: note: arca ({name}) exited with {status}"),
            Err(e) => println!("undo: note: stopping arca ({name}): {e:#}"),
        }
    }
    Ok(())
}

fn rounds(v: &[f64]) -> String {
    v.iter()
        .map(|r| thousands(*r))
        .collect::<Vec<_>>()
        .join(" ")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn dav(path: &str) -> String {
    format!("/remote.php/dav/files/{USER}/{path}")
}

/// PUTs `count` small files named `{dir}f{i}` over [`CONNECTIONS`] connections.
async fn fill(arca: &Arca, dir: &str, count: usize) -> anyhow::Result<()> {
    let dir = dir.to_owned();
    crate::files::put_all(
        arca.addr,
        &arca.auth,
        count,
        move |i| dav(&format!("{dir}f{i}")),
        |_| Bytes::from_static(b"sixteen bytes..\n"),
    )
    .await
}

/// A folder of `files` files, deleted in one request and restored in one call: the two times.
async fn big_folder(arca: &Arca, files: usize) -> anyhow::Result<(Duration, Duration)> {
    let mut c = Conn::open(arca.addr, &arca.auth).await?;
    for dir in ["undo/", "undo/big/"] {
        c.call("MKCOL", &dav(dir), &[], Bytes::new(), &[201])
            .await?;
    }
    let filled = Instant::now();
    fill(arca, "undo/big/", files).await?;
    println!(
        "undo: ({} files written in {:.1?})",
        thousands(files as f64),
        filled.elapsed()
    );

    // A fresh connection: the first one idled through the fill, which can outlast the
    // server's keep-alive.
    let mut c = Conn::open(arca.addr, &arca.auth).await?;
    let started = Instant::now();
    c.call("DELETE", &dav("undo/big/"), &[], Bytes::new(), &[204])
        .await?;
    let delete = started.elapsed();

    let started = Instant::now();
    let answer = c
        .call(
            "POST",
            "/api/v1/trash/restore",
            &[("content-type", "application/json")],
            Bytes::from_static(br#"{"path": "/undo"}"#),
            &[200],
        )
        .await?;
    let restore = started.elapsed();
    let tally: serde_json::Value = serde_json::from_slice(&answer).context("restore answer")?;
    ensure!(
        tally["files"].as_u64() == Some(files as u64) && tally["restored"].as_u64() == Some(1),
        "the restore brought back {tally}, expected the one folder of {files} files"
    );
    Ok((delete, restore))
}

/// [`TRASH_ITEMS`] files, each removed by its own DELETE: a trash of that many entries.
async fn trash_of_many(arca: &Arca) -> anyhow::Result<()> {
    let mut c = Conn::open(arca.addr, &arca.auth).await?;
    c.call("MKCOL", &dav("undo/many/"), &[], Bytes::new(), &[201])
        .await?;
    fill(arca, "undo/many/", TRASH_ITEMS).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for first in 0..CONNECTIONS {
        let (addr, auth) = (arca.addr, arca.auth.clone());
        tasks.spawn(async move {
            let mut c = Conn::open(addr, &auth).await?;
            for i in (first..TRASH_ITEMS).step_by(CONNECTIONS) {
                let path = dav(&format!("undo/many/f{i}"));
                c.call("DELETE", &path, &[], Bytes::new(), &[204]).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a deleting task panicked")??;
    }
    // A fresh connection: the first one idled through the fill and the deletes, longer than
    // the server keeps an idle connection open.
    let mut c = Conn::open(arca.addr, &arca.auth).await?;
    let xml = c
        .call(
            "PROPFIND",
            &format!("/remote.php/dav/trash-bin/{USER}/"),
            &[("depth", "1"), ("content-type", "application/xml")],
            Bytes::from_static(TRASH_PROPS.as_bytes()),
            &[207],
        )
        .await?;
    let listed = count_elements(&String::from_utf8_lossy(&xml), "response", false);
    ensure!(
        listed == TRASH_ITEMS + 1,
        "the trash lists {listed} responses, expected {}",
        TRASH_ITEMS + 1
    );
    Ok(())
}

/// One file overwritten until it has [`VERSIONS`] versions; returns its versions' path.
async fn many_versions(arca: &Arca) -> anyhow::Result<String> {
    let mut c = Conn::open(arca.addr, &arca.auth).await?;
    let path = dav("undo/versioned.txt");
    let mut id = String::new();
    for i in 0..=VERSIONS {
        let resp = c
            .send(
                "PUT",
                &path,
                &[],
                Full::new(Bytes::from(format!("content {i}\n"))).boxed(),
            )
            .await?;
        let status = resp.status().as_u16();
        if let Some(v) = resp.headers().get("oc-fileid") {
            id = v.to_str().context("oc-fileid")?.to_owned();
        }
        resp.into_body().collect().await?;
        ensure!(CREATED.contains(&status), "PUT {path}: {status}");
    }
    ensure!(!id.is_empty(), "PUT {path} answered no OC-FileId");
    let versions = format!("/remote.php/dav/meta/{id}/v");
    let xml = c
        .call(
            "PROPFIND",
            &versions,
            &[("depth", "1"), ("content-type", "application/xml")],
            Bytes::from_static(VERSION_PROPS.as_bytes()),
            &[207],
        )
        .await?;
    let listed = count_elements(&String::from_utf8_lossy(&xml), "response", false);
    ensure!(
        listed == VERSIONS + 1,
        "the versions listing has {listed} responses, expected {}",
        VERSIONS + 1
    );
    Ok(versions)
}

/// PROPFIND Depth 1 of `url` with `body` under wrk: answered requests per second.
fn propfind_rate(
    wrk_dir: &Path,
    name: &str,
    auth: &str,
    url: &str,
    body: &str,
) -> anyhow::Result<f64> {
    let mut script = lua_head("PROPFIND", auth);
    let _ = write!(
        script,
        "wrk.headers[\"Depth\"] = \"1\"\nwrk.headers[\"Content-Type\"] = \"application/xml\"\nwrk.body = [[{body}]]\n"
    );
    wrk(wrk_dir, &format!("{name}-warm"), &script, url, WARMUP)?;
    rate(wrk(wrk_dir, name, &script, url, MEASURE)?, name)
}

/// Answered requests per second; any error fails the line, as a client would notice it.
fn rate(load: crate::files::Load, name: &str) -> anyhow::Result<f64> {
    let errors: Vec<String> = load
        .errors
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    ensure!(errors.is_empty(), "{name}: {}", errors.join(", "));
    Ok(load.ok as f64 / load.elapsed.as_secs_f64())
}

/// The names the overwrite load cycles over, written once (the first write is a create).
async fn overwrite_names(arca: &Arca) -> anyhow::Result<()> {
    let mut c = Conn::open(arca.addr, &arca.auth).await?;
    c.call("MKCOL", &dav("over/"), &[], Bytes::new(), &[201])
        .await?;
    let body = Bytes::from(vec![b'x'; SMALL]);
    for t in 0..crate::wrk::THREADS {
        for i in 0..OVERWRITE_NAMES {
            c.call(
                "PUT",
                &dav(&format!("over/t{t}-{i}")),
                &[],
                body.clone(),
                CREATED,
            )
            .await?;
        }
    }
    Ok(())
}

/// 4 KiB PUTs over existing names, each wrk thread cycling over its own [`OVERWRITE_NAMES`].
/// Overwrites per second, and the server's CPU time per overwrite (µs).
fn overwrite_rate(wrk_dir: &Path, name: &str, arca: &Arca) -> anyhow::Result<(f64, f64)> {
    let mut script = lua_head("PUT", &arca.auth);
    let _ = write!(
        script,
        r#"wrk.headers["Content-Type"] = "application/octet-stream"
wrk.body = string.rep("y", {SMALL})
function request()
  local path = "{base}t" .. tid .. "-" .. (counter % {OVERWRITE_NAMES})
  counter = counter + 1
  return wrk.format(nil, path)
end
"#,
        base = dav("over/")
    );
    let url = format!("http://{}/", arca.addr);
    wrk(wrk_dir, &format!("over-{name}-warm"), &script, &url, WARMUP)?;
    let pid = arca.server.child.id();
    let before = process::tree_cpu_ticks(pid)?;
    let load = wrk(wrk_dir, &format!("over-{name}"), &script, &url, MEASURE)?;
    let ticks = process::tree_cpu_ticks(pid)?.saturating_sub(before);
    let cpu_us = ticks as f64 * 1e6 / process::clock_ticks_per_sec() / load.ok.max(1) as f64;
    Ok((rate(load, name)?, cpu_us))
}
