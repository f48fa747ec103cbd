//! `arca-bench web`: the web app as a person meets it, in a real browser (crates/bench/web.py:
//! Playwright driving Debian's Chromium, both installed by `make deps`) against the release
//! binary on built-in defaults: the bytes of the first load, the time to the first file list,
//! the time to open a folder of 10,000 entries, and a large upload through the page (TUS)
//! beside the same file by `curl -T` (a plain WebDAV PUT) in the same run, as a ratio.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, ensure};
use bytes::Bytes;

use crate::files::{Conn, thousands};
use crate::process;
use crate::wrk::CONNECTIONS;
use crate::{Scratch, Targets};

const USER: &str = "admin";
/// The folder the app must open quickly.
const BIG_FOLDER: usize = 10_000;
/// The upload's size, MiB (`ARCA_BENCH_WEB_UPLOAD_MIB` overrides it).
const UPLOAD_MIB: usize = 1024;

const FIRST_LOAD_TARGET_BYTES: f64 = 150_000.0;
const FIRST_LIST_TARGET_MS: f64 = 300.0;
const BIG_FOLDER_TARGET_MS: f64 = 1_000.0;
const UPLOAD_RATIO_TARGET: f64 = 0.8;

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    let bin = process::locate_arca("web")?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .context("workspace root")?;
    let python = root.join(".venv/bin/python");
    ensure!(
        python.is_file() && Path::new("/usr/bin/chromium").is_file(),
        "run `make deps` first: it installs playwright into .venv and Debian's chromium"
    );
    let upload_mib = match std::env::var("ARCA_BENCH_WEB_UPLOAD_MIB") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("ARCA_BENCH_WEB_UPLOAD_MIB={v:?}: not a count"))?,
        Err(_) => UPLOAD_MIB,
    };
    let scratch = Scratch::new("web").context("scratch directory")?;
    let (password, auth) = process::admin_credentials(USER);
    let (mut server, debug, addr) = process::spawn_arca(
        &bin,
        &scratch.path,
        &[("ARCA_ADMIN_PASSWORD", password.as_str())],
    )?;
    server.wait_ready(debug)?;
    let fail = |e: anyhow::Error| anyhow::anyhow!(server.with_log(&format!("{e:#}")));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(big_folder(addr, &auth)).map_err(fail)?;

    let upload = scratch.path.join("upload.bin");
    write_upload(&upload, upload_mib).context("the upload file")?;
    let base = format!("http://{addr}");
    let curl_url = format!("{base}/remote.php/dav/files/{USER}/curl-put.bin");
    let curl_before = curl_put(&upload, &curl_url, &password)?;

    let started = Instant::now();
    let out = Command::new(&python)
        .arg(root.join("crates/bench/web.py"))
        .args([base.as_str(), USER, password.as_str()])
        .arg(&upload)
        .output()
        .context("running web.py")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "web.py failed after {:.1}s:\n{text}{}",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
    );
    let curl_after = curl_put(&upload, &curl_url, &password)?;
    let got: HashMap<&str, f64> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| v.trim().parse().ok().map(|v| (k, v)))
        .collect();
    let value = |key: &str| {
        got.get(key)
            .copied()
            .with_context(|| format!("web.py printed no {key}:\n{text}"))
    };

    let bytes = value("first_load_bytes")?;
    println!(
        "web: first load (login page, empty cache)          {} bytes in {} requests",
        thousands(bytes),
        value("first_load_requests")?
    );
    targets.check(
        bytes < FIRST_LOAD_TARGET_BYTES,
        &format!(
            "web: first load {} bytes < {} compressed",
            thousands(bytes),
            thousands(FIRST_LOAD_TARGET_BYTES)
        ),
    );
    let first = value("first_list_ms")?;
    println!("web: reload to the first file list (median of 5)   {first:.1} ms");
    targets.check(
        first < FIRST_LIST_TARGET_MS,
        &format!("web: first file list {first:.0} ms < {FIRST_LIST_TARGET_MS} ms"),
    );
    let big = value("big_folder_ms")?;
    println!("web: open a folder of 10,000 (median of 3)        {big:.1} ms");
    targets.check(
        big < BIG_FOLDER_TARGET_MS,
        &format!("web: a folder of 10,000 opens in {big:.0} ms < {BIG_FOLDER_TARGET_MS} ms"),
    );
    let mib = upload_mib as f64;
    let browser_s = value("upload_s")?;
    let curl_s = (curl_before + curl_after) / 2.0;
    println!(
        "web: {upload_mib} MiB upload: browser (TUS) {:.0} MiB/s, curl -T (PUT) {:.0} MiB/s \
         (curl before/after {curl_before:.2}s/{curl_after:.2}s); page heap peak {:.1} MiB",
        mib / browser_s,
        mib / curl_s,
        value("upload_heap_mib")?
    );
    let ratio = curl_s / browser_s;
    targets.check(
        ratio >= UPLOAD_RATIO_TARGET,
        &format!("web: browser upload {ratio:.2}× of curl ≥ {UPLOAD_RATIO_TARGET}×"),
    );
    Ok(())
}

/// `big/` with [`BIG_FOLDER`] folders in it, over [`CONNECTIONS`] connections.
async fn big_folder(addr: std::net::SocketAddr, auth: &str) -> anyhow::Result<()> {
    let mut c = Conn::open(addr, auth).await?;
    let root = format!("/remote.php/dav/files/{USER}/big");
    c.call("MKCOL", &root, &[], Bytes::new(), &[201]).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for first in 0..CONNECTIONS {
        let (auth, root) = (auth.to_owned(), root.clone());
        tasks.spawn(async move {
            let mut c = Conn::open(addr, &auth).await?;
            for i in (first..BIG_FOLDER).step_by(CONNECTIONS) {
                c.call(
                    "MKCOL",
                    &format!("{root}/d{i:05}"),
                    &[],
                    Bytes::new(),
                    &[201],
                )
                .await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// `mib` MiB of bytes that do not repeat in a way a transport could shortcut.
fn write_upload(path: &Path, mib: usize) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    let mut block = vec![0u8; 1 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..mib {
        for chunk in block.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        f.write_all(&block)?;
    }
    f.sync_all()
}

/// Seconds `curl -T` takes to PUT `file` to `url`.
fn curl_put(file: &Path, url: &str, password: &str) -> anyhow::Result<f64> {
    let out = Command::new("curl")
        .args(["-sS", "-f", "-o", "/dev/null", "-w", "%{time_total}", "-u"])
        .arg(format!("{USER}:{password}"))
        .arg("-T")
        .arg(file)
        .arg(url)
        .output()
        .context("curl (make deps installs it)")?;
    ensure!(
        out.status.success(),
        "curl PUT: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("curl's time_total")
}
