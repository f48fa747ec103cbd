//! The scale benchmark: whether a request costs the same in a full space as in an empty one,
//! through the real `arca server` on built-in defaults (SQLite, local blobs, every write
//! durable before the answer).
//!
//! One server, one user's home. The same five lines are measured while the home holds 0, then
//! a tenth of [`FILES`], then [`FILES`] files (written through WebDAV in folders of
//! [`FOLDER_FILES`], 16-byte bodies; the lines' own folders are fresh at each stage, so only
//! the space's size differs):
//! - PUT of 4 KiB files under new names;
//! - GET of what that PUT wrote, every body compared;
//! - MKCOL + DELETE churn (each request counted, as `../shared/bench`'s churn counts them);
//! - PROPFIND Depth 1 of a folder of 1,000 files (etag, length, modified, type);
//! - MOVE of a file to a new name and back.
//!
//! Each line runs [`CONNECTIONS`] persistent connections of a hyper client (one request at a
//! time per connection, so a DELETE never overtakes its MKCOL) for [`MEASURE`] after a
//! warm-up, and prints its rate and the server's CPU per request; the fuller stages print the
//! rate as a ratio to the empty space's (target ≥ [`RATIO_TARGET`]× at the full stage). At the
//! full stage the server's VmRSS is printed with [`IDLE_CLIENTS`] idle keep-alive clients
//! connected (target < [`RSS_TARGET_MIB`] MiB).
//!
//! `ARCA_BENCH_SCALE_FILES` sets [`FILES`] for a quick run.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use bytes::Bytes;

use crate::files::{CREATED, Conn, count_elements, thousands};
use crate::process::{self, Server};
use crate::wrk::CONNECTIONS;
use crate::{Scratch, Targets};

const USER: &str = "admin";
const FILES: usize = 1_000_000;
const FOLDER_FILES: usize = 1_000;
const LISTING: usize = 1_000;
const SMALL: usize = 4096;
const MEASURE: Duration = Duration::from_secs(5);
const WARMUP: Duration = Duration::from_secs(1);
const RATIO_TARGET: f64 = 0.9;
const IDLE_CLIENTS: usize = 200;
const RSS_TARGET_MIB: f64 = 150.0;

const PROPS: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:"><d:prop><d:getetag/><d:getcontentlength/><d:getlastmodified/><d:resourcetype/></d:prop></d:propfind>"#;

/// The measured lines, in the order they run at each stage.
#[derive(Clone, Copy, PartialEq)]
enum Line {
    Put,
    Get,
    Churn,
    Propfind,
    Move,
}

impl Line {
    const ALL: [Line; 5] = [
        Line::Put,
        Line::Get,
        Line::Churn,
        Line::Propfind,
        Line::Move,
    ];

    fn title(self) -> &'static str {
        match self {
            Line::Put => "PUT 4 KiB (ops/s)",
            Line::Get => "GET 4 KiB (ops/s)",
            Line::Churn => "MKCOL+DELETE churn (ops/s)",
            Line::Propfind => "PROPFIND depth 1, 1,000 entries (req/s)",
            Line::Move => "MOVE of a file (ops/s)",
        }
    }
}

/// One line's measurement at one stage.
#[derive(Clone, Copy)]
struct Rate {
    per_s: f64,
    cpu_us: f64,
}

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    let bin = process::locate_arca("scale")?;
    let files = match std::env::var("ARCA_BENCH_SCALE_FILES") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("ARCA_BENCH_SCALE_FILES={v:?}: not a count"))?,
        Err(_) => FILES,
    };
    ensure!(
        files >= 10 * FOLDER_FILES,
        "ARCA_BENCH_SCALE_FILES must be at least {}",
        10 * FOLDER_FILES
    );
    let scratch = Scratch::new("scale").context("scratch directory")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let (password, auth) = process::admin_credentials(USER);
    let (mut server, debug, addr) =
        process::spawn_arca(&bin, &scratch.path, &[("ARCA_ADMIN_PASSWORD", &password)])?;
    server.wait_ready(debug)?;
    println!("scale: arca {addr}; user {USER}, built-in defaults, {CONNECTIONS} connections");

    let result = rt.block_on(stages(&server, addr, &auth, files));
    let (rows, rss_kib) =
        result.map_err(|e| anyhow::anyhow!(server.with_log(&format!("{e:#}"))))?;
    match server.terminate() {
        Ok((status, _)) if status.success() => {}
        Ok((status, _)) => println!("scale: note: arca exited with {status} after SIGTERM"),
        Err(e) => println!("scale: note: stopping arca: {e:#}"),
    }

    let sizes = [0, files / 10, files];
    let mut head = format!("scale: {:<42}", "files in the space");
    for n in sizes {
        let n = if n == 0 {
            "0".to_owned()
        } else {
            thousands(n as f64)
        };
        let _ = write!(head, "{n:>24}");
    }
    println!("{head}");
    for (line, rates) in Line::ALL.iter().zip(&rows) {
        let mut out = format!("scale: {:<42}", line.title());
        for (i, r) in rates.iter().enumerate() {
            let cell = if i == 0 {
                format!("{} ({} µs)", thousands(r.per_s), thousands(r.cpu_us))
            } else {
                format!(
                    "{} {:.2}× ({} µs)",
                    thousands(r.per_s),
                    r.per_s / rates[0].per_s,
                    thousands(r.cpu_us)
                )
            };
            let _ = write!(out, "{cell:>24}");
        }
        println!("{out}");
    }
    println!("scale: (rate, then server CPU per request in parentheses)");
    for (line, rates) in Line::ALL.iter().zip(&rows) {
        let ratio = rates[2].per_s / rates[0].per_s;
        targets.check(
            ratio >= RATIO_TARGET,
            &format!(
                "scale: {} with {} files {ratio:.2}× of the empty space ≥ {RATIO_TARGET}×",
                line.title(),
                thousands(files as f64)
            ),
        );
    }
    let rss_mib = rss_kib as f64 / 1024.0;
    targets.check(
        rss_mib < RSS_TARGET_MIB,
        &format!(
            "scale: VmRSS with {} files and {IDLE_CLIENTS} idle keep-alive clients {rss_mib:.0} \
             MiB < {RSS_TARGET_MIB} MiB",
            thousands(files as f64)
        ),
    );
    Ok(())
}

/// The three stages: the lines' rates per line (one per stage), and the VmRSS (KiB) at the
/// full stage with the idle clients connected.
async fn stages(
    server: &Server,
    addr: SocketAddr,
    auth: &str,
    files: usize,
) -> anyhow::Result<(Vec<Vec<Rate>>, u64)> {
    let pid = server.child.id();
    let mut c = Conn::open(addr, auth).await?;
    c.call("MKCOL", &dav("fill/"), &[], Bytes::new(), &[201])
        .await?;
    let mut rows = vec![Vec::new(); Line::ALL.len()];
    let mut folders = 0;
    for (stage, target) in [0, files / 10, files].into_iter().enumerate() {
        let wanted = target / FOLDER_FILES;
        if wanted > folders {
            let start = Instant::now();
            fill(addr, auth, folders..wanted).await?;
            let made = (wanted - folders) * FOLDER_FILES;
            println!(
                "scale: ({} files written in {:.0?}, {} files/s)",
                thousands(made as f64),
                start.elapsed(),
                thousands(made as f64 / start.elapsed().as_secs_f64())
            );
            folders = wanted;
        }
        let base = format!("s{stage}/");
        prepare(addr, auth, &base).await?;
        let mut per_task = 0;
        for (row, line) in rows.iter_mut().zip(Line::ALL) {
            let drive = |pass: &'static str, per_task: u64, length: Duration| {
                load(addr, auth, line, base.clone(), pass, per_task, length)
            };
            drive("w", per_task, WARMUP).await?;
            let before = process::tree_cpu_ticks(pid)?;
            let start = Instant::now();
            let done = drive("m", per_task, MEASURE).await?;
            let elapsed = start.elapsed();
            let ticks = process::tree_cpu_ticks(pid)?.saturating_sub(before);
            let total: u64 = done.iter().sum();
            if line == Line::Put {
                // The GET line reads what each connection wrote here.
                per_task = done.iter().copied().min().unwrap_or(0);
                ensure!(
                    per_task > 0,
                    "a PUT connection wrote nothing in {MEASURE:?}"
                );
            }
            row.push(Rate {
                per_s: total as f64 / elapsed.as_secs_f64(),
                cpu_us: ticks as f64 * 1e6 / process::clock_ticks_per_sec() / total.max(1) as f64,
            });
        }
    }
    let rss = idle_clients_rss(addr, auth, pid).await?;
    Ok((rows, rss))
}

fn dav(path: &str) -> String {
    format!("/remote.php/dav/files/{USER}/{path}")
}

/// Writes the fill folders `range` (each [`FOLDER_FILES`] 16-byte files) over [`CONNECTIONS`]
/// connections.
async fn fill(addr: SocketAddr, auth: &str, range: std::ops::Range<usize>) -> anyhow::Result<()> {
    let body = Bytes::from_static(b"sixteen bytes..\n");
    let mut tasks = tokio::task::JoinSet::new();
    for first in 0..CONNECTIONS {
        let (auth, body, range) = (auth.to_owned(), body.clone(), range.clone());
        tasks.spawn(async move {
            let mut c = Conn::open(addr, &auth).await?;
            for d in range.skip(first).step_by(CONNECTIONS) {
                let folder = format!("fill/d{d:05}/");
                c.call("MKCOL", &dav(&folder), &[], Bytes::new(), &[201])
                    .await?;
                for f in 0..FOLDER_FILES {
                    let path = dav(&format!("{folder}f{f}"));
                    c.call("PUT", &path, &[], body.clone(), CREATED).await?;
                }
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a filling task panicked")??;
    }
    Ok(())
}

/// The stage's folders: the listing with its [`LISTING`] files, and each connection's file to
/// move, for the warm-up and the measured pass.
async fn prepare(addr: SocketAddr, auth: &str, base: &str) -> anyhow::Result<()> {
    let mut c = Conn::open(addr, auth).await?;
    for dir in ["", "put/", "churn/", "list/", "move/"] {
        c.call(
            "MKCOL",
            &dav(&format!("{base}{dir}")),
            &[],
            Bytes::new(),
            &[201],
        )
        .await?;
    }
    let body = Bytes::from(vec![b'x'; SMALL]);
    let list = format!("{base}list/");
    let listed = body.clone();
    crate::files::put_all(
        addr,
        auth,
        LISTING,
        move |i| dav(&format!("{list}f{i:04}")),
        move |_| listed.clone(),
    )
    .await?;
    for pass in ["w", "m"] {
        for t in 0..CONNECTIONS {
            c.call(
                "PUT",
                &dav(&format!("{base}move/{pass}t{t}")),
                &[],
                body.clone(),
                CREATED,
            )
            .await?;
        }
    }
    Ok(())
}

/// A 4 KiB body that names its file, so a GET that answers another file's bytes is caught.
fn body_of(pass: &str, task: usize, i: u64) -> Bytes {
    let mut b = format!("{pass}t{task}-{i} ").into_bytes();
    b.resize(SMALL, b'.');
    Bytes::from(b)
}

/// Runs `line` on [`CONNECTIONS`] connections for `length`; returns the requests each
/// connection had answered. Any unexpected status or body fails the load.
async fn load(
    addr: SocketAddr,
    auth: &str,
    line: Line,
    base: String,
    pass: &'static str,
    per_task: u64,
    length: Duration,
) -> anyhow::Result<Vec<u64>> {
    let end = Instant::now() + length;
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..CONNECTIONS {
        let (auth, base) = (auth.to_owned(), base.clone());
        tasks.spawn(async move {
            let mut c = Conn::open(addr, &auth).await?;
            let mut i = 0u64;
            while Instant::now() < end {
                step(&mut c, line, &base, pass, task, i, per_task).await?;
                i += 1;
            }
            anyhow::Ok((task, i))
        });
    }
    let mut done = vec![0; CONNECTIONS];
    while let Some(r) = tasks.join_next().await {
        let (task, n) = r.context("a load task panicked")??;
        done[task] = n;
    }
    Ok(done)
}

/// Request `i` of connection `task` on `line`.
async fn step(
    c: &mut Conn,
    line: Line,
    base: &str,
    pass: &str,
    task: usize,
    i: u64,
    per_task: u64,
) -> anyhow::Result<()> {
    match line {
        Line::Put => {
            let path = dav(&format!("{base}put/{pass}t{task}-{i}"));
            c.call("PUT", &path, &[], body_of(pass, task, i), CREATED)
                .await?;
        }
        Line::Get => {
            // What the measured PUT pass wrote, whichever pass this is.
            let n = i % per_task.max(1);
            let path = dav(&format!("{base}put/mt{task}-{n}"));
            let got = c.call("GET", &path, &[], Bytes::new(), &[200]).await?;
            ensure!(
                got == body_of("m", task, n),
                "GET {path}: {} bytes, not what was PUT",
                got.len()
            );
        }
        Line::Churn => {
            let path = dav(&format!("{base}churn/{pass}t{task}-{}/", i / 2));
            let (method, expect) = if i.is_multiple_of(2) {
                ("MKCOL", &[201][..])
            } else {
                ("DELETE", &[204][..])
            };
            c.call(method, &path, &[], Bytes::new(), expect).await?;
        }
        Line::Propfind => {
            let xml = c
                .call(
                    "PROPFIND",
                    &dav(&format!("{base}list/")),
                    &[("depth", "1"), ("content-type", "application/xml")],
                    Bytes::from_static(PROPS.as_bytes()),
                    &[207],
                )
                .await?;
            let responses = count_elements(&String::from_utf8_lossy(&xml), "response", false);
            ensure!(
                responses == LISTING + 1,
                "PROPFIND answered {responses} responses, expected {}",
                LISTING + 1
            );
        }
        Line::Move => {
            let (a, b) = (
                format!("{base}move/{pass}t{task}"),
                format!("{base}move/{pass}t{task}.moved"),
            );
            let (from, to) = if i.is_multiple_of(2) { (a, b) } else { (b, a) };
            let destination = format!("http://{}{}", c.host(), dav(&to));
            c.call(
                "MOVE",
                &dav(&from),
                &[("destination", &destination), ("overwrite", "F")],
                Bytes::new(),
                &[201],
            )
            .await?;
        }
    }
    Ok(())
}

/// VmRSS (KiB) with [`IDLE_CLIENTS`] keep-alive connections open, each after one authenticated
/// PROPFIND, as idle sync clients between their polls: the larger of two samples a second
/// apart.
async fn idle_clients_rss(addr: SocketAddr, auth: &str, pid: u32) -> anyhow::Result<u64> {
    let mut clients = Vec::with_capacity(IDLE_CLIENTS);
    for _ in 0..IDLE_CLIENTS {
        let mut c = Conn::open(addr, auth).await?;
        c.call(
            "PROPFIND",
            &dav(""),
            &[("depth", "0")],
            Bytes::new(),
            &[207],
        )
        .await?;
        clients.push(c);
    }
    let first = process::vm_rss_kib(pid)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = process::vm_rss_kib(pid)?;
    println!(
        "scale: VmRSS with {IDLE_CLIENTS} idle keep-alive clients: {} MiB",
        first.max(second) / 1024
    );
    drop(clients);
    Ok(first.max(second))
}
