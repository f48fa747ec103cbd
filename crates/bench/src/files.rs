//! The files benchmark: WebDAV through the real `arca server` (built-in defaults: every hop
//! in-memory, HTTP Basic auth on, every blob fsynced) beside two references started in the same
//! run on this machine — Apache httpd with mod_dav and nginx with dav_ext, each a private
//! instance with a config of our own on a loopback port, behind Basic auth with the same user.
//!
//! Measured, one line each, with the arca/peer ratio against the better of the two peers:
//! - PUT of 4 KiB files over 16 persistent connections (new names each time): ops/s, p99;
//! - GET of the files that PUT wrote, same concurrency: ops/s, p99;
//! - PROPFIND Depth 1 on a folder of 1,000 files asking for getetag, getcontentlength,
//!   getlastmodified and resourcetype: req/s, p99;
//! - on those three lines also the CPU time (user + system, from `/proc`) the server's
//!   processes spent per answered request, and arca's as a multiple of the better peer's;
//! - PUT, then GET, of one 512 MiB file over one connection: MiB/s (median of [`BIG_ROUNDS`]);
//! - arca only: RSS growth while it streams a 2 GiB PUT and a 2 GiB GET (VmRSS sampled every
//!   [`RSS_EVERY`]; peak minus the idle value just before the transfer).
//!
//! Small requests come from `wrk` (Debian) with Lua scripts written into the scratch dir: one
//! script per case sets the method, auth header and body, and for PUT/GET a `request()` that
//! rotates file names; a `done()` prints the numbers in a form this module parses. Big transfers
//! come from a hyper client of our own, because wrk cannot stream a body it does not hold.
//!
//! Fairness, because a ratio is only as good as its setup: all three servers run for the whole
//! benchmark but only the one under test gets requests; each case runs on arca, Apache, nginx in
//! turn, so a change in background load hits all three alike; every load has a warm-up first;
//! `sync(2)` runs before each measurement so nobody pays for the previous server's dirty pages;
//! the peers write an access log, as arca writes an access line per request by default; their
//! keep-alive limits are lifted, as arca has none. What is *not* equal, and is the point of the
//! targets: arca fsyncs every blob before answering and keeps an etag per node; mod_dav_fs and
//! nginx write into the page cache, and nginx's PROPFIND answers no etags.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use crate::process::{self, free_ports, http_status, vm_rss_kib};
use crate::wrk::{CONNECTIONS, THREADS as WRK_THREADS, find_program};
use crate::{Scratch, Targets};

/// Each small-request load runs this long after a warm-up of [`WARMUP`].
const MEASURE: Duration = Duration::from_secs(5);
const WARMUP: Duration = Duration::from_secs(1);
// The small-request loads run wrk with crate::wrk's CONNECTIONS and THREADS (2 threads on a
// two-core machine: the client takes CPU from the server under test, but the same from each
// of the three).
const SMALL: usize = 4096;
const LISTING: usize = 1000;
const MIB: u64 = 1 << 20;
const BIG: u64 = 512 * MIB;
const BIG_WARMUP: u64 = 64 * MIB;
/// A single transfer is one sample; the median of three says more.
const BIG_ROUNDS: usize = 3;
const HUGE: u64 = 2048 * MIB;
/// The client sends its body in chunks of this size (clones of one buffer, so no copying).
const CHUNK: usize = MIB as usize;
const RSS_EVERY: Duration = Duration::from_millis(50);
/// Beyond this a single client operation is a failure, not a slow measurement.
const OP_LIMIT: Duration = Duration::from_secs(300);
const PEER_READY_LIMIT: Duration = Duration::from_secs(15);
const PEER_EXIT_LIMIT: Duration = Duration::from_secs(10);

/// Targets from the issue.
const RSS_GROWTH_TARGET_MIB: f64 = 64.0;
const RATIO_TARGET: f64 = 1.0;

const USER: &str = "admin";
const PROPFIND_BODY: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:"><d:prop><d:getetag/><d:getcontentlength/><d:getlastmodified/><d:resourcetype/></d:prop></d:propfind>"#;

const REFERENCE: &str = "issue's run on this kind of machine: Apache PUT 3,770/s, GET 9,040/s, \
                         PROPFIND 349/s, 512 MiB PUT 543 MiB/s, GET 1,625 MiB/s; nginx GET \
                         10,650/s, PROPFIND 624/s; oCIS PUT 15/s, PROPFIND 6/s";

/// The peers' binaries and modules, and the Debian package that provides each.
const APACHE: &str = "/usr/sbin/apache2";
const APACHE_MODULES: &str = "/usr/lib/apache2/modules";
const NGINX: &str = "/usr/sbin/nginx";
const NGINX_DAV_EXT: &str = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so";

/// One WebDAV server under test.
struct Dav {
    name: &'static str,
    addr: SocketAddr,
    /// The collection everything lives under, with a trailing slash.
    base: String,
    /// The process the bench started (a master, for the peers): its tree's CPU is measured.
    pid: u32,
}

/// One measured rate, with what else the line shows.
struct Measure {
    rate: f64,
    /// wrk's 99th percentile; none for the single big transfers.
    p99: Option<Duration>,
    /// Errors, spread, anything a reader should see beside the number.
    note: String,
    /// CPU time the server's processes spent per answered request, in µs (wrk lines only).
    cpu_us: Option<f64>,
}

/// One line of the report: a case and what each server measured (or why it could not).
struct Row {
    what: &'static str,
    unit: &'static str,
    results: Vec<(&'static str, Result<Measure, String>)>,
}

/// Which lines to run: `ARCA_BENCH_FILES` is a comma-separated subset of `put`, `get`,
/// `propfind`, `big`, `rss` (GET reads what PUT wrote, so `get` runs PUT too); unset runs all.
/// `ARCA_BENCH_PEERS=0` measures arca alone. For quick before/after checks while tuning one
/// path; a full run is the one to quote.
struct Lines {
    put: bool,
    get: bool,
    propfind: bool,
    big: bool,
    rss: bool,
    peers: bool,
}

impl Lines {
    fn from_env() -> anyhow::Result<Self> {
        let peers = std::env::var("ARCA_BENCH_PEERS").map_or(true, |v| v != "0");
        let Ok(list) = std::env::var("ARCA_BENCH_FILES") else {
            return Ok(Self {
                put: true,
                get: true,
                propfind: true,
                big: true,
                rss: true,
                peers,
            });
        };
        let mut l = Self {
            put: false,
            get: false,
            propfind: false,
            big: false,
            rss: false,
            peers,
        };
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "put" => l.put = true,
                "get" => (l.put, l.get) = (true, true),
                "propfind" => l.propfind = true,
                "big" => l.big = true,
                "rss" => l.rss = true,
                other => bail!("ARCA_BENCH_FILES: unknown line {other:?}"),
            }
        }
        Ok(l)
    }
}

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    let lines = Lines::from_env()?;
    let arca_bin = process::locate_arca("files")?;
    ensure_tools()?;
    let scratch = Scratch::new("files").context("scratch directory")?;
    let (password, auth) = process::admin_credentials(USER);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;

    // arca's memory is measured before any other case runs (the peers are up but idle): a
    // fresh process, so the growth is the streaming path's and not what earlier cases left in
    // the allocator.
    let arca_dir = scratch.path.join("arca");
    let (mut arca, debug, public) =
        process::spawn_arca(&arca_bin, &arca_dir, &[("ARCA_ADMIN_PASSWORD", &password)])?;
    arca.wait_ready(debug)?;
    let arca_pid = arca.child.id();
    let arca_dav = Dav {
        name: "arca",
        addr: public,
        base: format!("/remote.php/dav/files/{USER}/"),
        pid: arca_pid,
    };
    rt.block_on(make_collections(&arca_dav, &auth))
        .map_err(|e| anyhow::anyhow!(arca.with_log(&format!("{e:#}"))))?;

    // The peers, each in its own dir, sharing one htpasswd file with the same user.
    let htpasswd = scratch.path.join("htpasswd");
    make_htpasswd(&htpasswd, &password)?;
    let owner = worker_owner()?;
    let [apache_addr, nginx_addr] = free_ports()?;
    let mut apache = start_apache(&scratch.path.join("apache"), apache_addr, &htpasswd, owner)?;
    let mut nginx = start_nginx(&scratch.path.join("nginx"), nginx_addr, &htpasswd, owner)?;
    apache.wait_ready(apache_addr, "/dav/")?;
    nginx.wait_ready(nginx_addr, "/dav/")?;
    let mut servers = vec![
        arca_dav,
        Dav {
            name: "apache",
            addr: apache_addr,
            base: "/dav/".to_owned(),
            pid: apache.child.id(),
        },
        Dav {
            name: "nginx",
            addr: nginx_addr,
            base: "/dav/".to_owned(),
            pid: nginx.child.id(),
        },
    ];
    if !lines.peers {
        servers.truncate(1);
    }
    for dav in &servers[1..] {
        rt.block_on(make_collections(dav, &auth))
            .with_context(|| format!("{}: creating collections", dav.name))?;
    }
    println!(
        "files: arca {}, apache {apache_addr} (mod_dav_fs, mpm_event), nginx {nginx_addr} \
         (dav_ext){}; user {USER}, Basic auth (peers: htpasswd apr1-MD5)",
        servers[0].addr,
        if lines.peers { "" } else { " (not measured)" }
    );

    let rss = if lines.rss {
        measure_rss(&rt, &servers[0], &auth, arca_pid)
            .map_err(|e| anyhow::anyhow!(arca.with_log(&format!("arca RSS: {e:#}"))))?
    } else {
        Vec::new()
    };

    let wrk_dir = scratch.path.join("wrk");
    fs::create_dir_all(&wrk_dir).context("wrk script dir")?;
    let mut rows = Vec::new();

    // PUT, then GET of what each server's PUT wrote.
    let mut put = Row::new("PUT 4 KiB, 16 conns", "ops/s");
    let mut get = Row::new("GET 4 KiB, 16 conns", "ops/s");
    let mut written = Vec::new();
    for dav in servers.iter().filter(|_| lines.put) {
        let r = put_small(dav, &auth, &wrk_dir);
        written.push(r.as_ref().ok().map(|(_, counters)| counters.clone()));
        put.push(dav.name, r.map(|(m, _)| m));
    }
    for (dav, counters) in servers.iter().zip(&written).filter(|_| lines.get) {
        let r = match counters {
            Some(c) => get_small(dav, &auth, &wrk_dir, c),
            None => Err(anyhow::anyhow!("no files: its PUT case failed")),
        };
        get.push(dav.name, r);
    }
    if lines.put {
        rows.push(put);
    }
    if lines.get {
        rows.push(get);
    }

    let mut listing = Row::new("PROPFIND depth 1, 1,000 entries", "req/s");
    for dav in servers.iter().filter(|_| lines.propfind) {
        let r = rt
            .block_on(populate_listing(dav, &auth))
            .and_then(|note| propfind(dav, &auth, &wrk_dir, note));
        listing.push(dav.name, r);
    }
    if lines.propfind {
        rows.push(listing);
    }

    let mut big_put = Row::new("PUT 512 MiB, 1 conn", "MiB/s");
    let mut big_get = Row::new("GET 512 MiB, 1 conn", "MiB/s");
    for dav in servers.iter().filter(|_| lines.big) {
        match rt.block_on(big_transfers(dav, &auth)) {
            Ok((p, g)) => {
                big_put.push(dav.name, Ok(p));
                big_get.push(dav.name, Ok(g));
            }
            Err(e) => {
                big_put.push(dav.name, Err(anyhow::anyhow!("{e:#}")));
                big_get.push(dav.name, Err(e));
            }
        }
    }
    if lines.big {
        rows.push(big_put);
        rows.push(big_get);
    }

    // Stop the peers before printing, so a reader's next command finds the machine idle.
    apache.stop();
    nginx.stop();
    match arca.terminate() {
        Ok((status, _)) if status.success() => {}
        Ok((status, _)) => println!("files: note: arca exited with {status} after SIGTERM"),
        Err(e) => println!("files: note: stopping arca: {e:#}"),
    }

    report(&rows, &rss, targets)
}

impl Row {
    fn new(what: &'static str, unit: &'static str) -> Self {
        Self {
            what,
            unit,
            results: Vec::new(),
        }
    }

    fn push(&mut self, server: &'static str, r: anyhow::Result<Measure>) {
        if let Err(e) = &r {
            eprintln!("arca-bench: files: {} on {server}: {e:#}", self.what);
        }
        self.results.push((server, r.map_err(|e| format!("{e:#}"))));
    }
}

/// Prints one line per case and per RSS measurement, then the target verdicts. Fails only when
/// a measurement could not be made.
fn report(rows: &[Row], rss: &[RssGrowth], targets: &mut Targets) -> anyhow::Result<()> {
    println!("reference: {REFERENCE}");
    let mut missing = 0;
    for row in rows {
        let mut line = format!("files {:<41}", format!("{} ({})", row.what, row.unit));
        for (server, r) in &row.results {
            match r {
                Ok(m) => {
                    let detail: Vec<String> = m
                        .p99
                        .map(|p| format!("p99 {}", ms(p)))
                        .into_iter()
                        .chain(m.cpu_us.map(|c| format!("{} µs CPU", thousands(c))))
                        .collect();
                    let detail = if detail.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", detail.join(", "))
                    };
                    let _ = write!(line, " {server} {}{detail} |", thousands(m.rate));
                }
                Err(_) => {
                    missing += 1;
                    let _ = write!(line, " {server} FAILED |");
                }
            }
        }
        let arca = row
            .results
            .iter()
            .find(|(s, _)| *s == "arca")
            .and_then(|(_, r)| r.as_ref().ok());
        let best = row
            .results
            .iter()
            .filter(|(s, _)| *s != "arca")
            .filter_map(|(s, r)| r.as_ref().ok().map(|m| (*s, m)))
            .max_by(|a, b| a.1.rate.total_cmp(&b.1.rate));
        let ratio = match (arca, best) {
            (Some(a), Some((peer, p))) if p.rate > 0.0 => {
                let ratio = a.rate / p.rate;
                let _ = write!(line, " arca/best {ratio:.2}× ({peer})");
                if let (Some(ac), Some(pc)) = (a.cpu_us, p.cpu_us)
                    && pc > 0.0
                {
                    let _ = write!(line, ", CPU per request {:.2}× {peer}'s", ac / pc);
                }
                Some((ratio, peer, a, p))
            }
            _ => None,
        };
        println!("{line}");
        for (server, r) in &row.results {
            if let Ok(m) = r
                && !m.note.is_empty()
            {
                println!("      {server}: {}", m.note);
            }
        }
        if let Some((ratio, peer, a, p)) = ratio {
            targets.check(
                ratio >= RATIO_TARGET,
                &format!(
                    "files {}: arca {} {} = {ratio:.2}× {peer} {} (target ≥ {RATIO_TARGET:.1}× \
                     the better peer)",
                    row.what,
                    thousands(a.rate),
                    row.unit,
                    thousands(p.rate)
                ),
            );
        }
    }
    for g in rss {
        let growth = g.peak_mib - g.idle_mib;
        println!(
            "files {:<41} arca +{growth:.1} MiB (idle {:.1} → peak {:.1} MiB, {} samples \
             {} ms apart, {} MiB/s)",
            format!("RSS growth during 2 GiB {}", g.what),
            g.idle_mib,
            g.peak_mib,
            g.samples,
            RSS_EVERY.as_millis(),
            thousands(g.mib_per_s)
        );
        targets.check(
            growth < RSS_GROWTH_TARGET_MIB,
            &format!(
                "files arca RSS grows {growth:.1} MiB during a 2 GiB {} (target < \
                 {RSS_GROWTH_TARGET_MIB:.0} MiB)",
                g.what
            ),
        );
    }
    if missing > 0 {
        bail!("{missing} measurements could not be made (errors above)");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Tools and peers.

/// Installs what is missing with apt-get (the bench brings its own tools), and says so.
///
/// On a Debian image with a `policy-rc.d` that forbids it (containers), installing apache2 or
/// nginx starts no system service; elsewhere one may start on port 80 and stays idle — it is
/// not ours to stop, and nothing here talks to it.
fn ensure_tools() -> anyhow::Result<()> {
    let have = |path: &str| Path::new(path).exists();
    let checks: [(&str, bool); 4] = [
        ("wrk", find_program("wrk").is_some()),
        (
            "apache2",
            have(APACHE) && have(&format!("{APACHE_MODULES}/mod_dav_fs.so")),
        ),
        ("apache2-utils", find_program("htpasswd").is_some()),
        ("nginx-extras", have(NGINX) && have(NGINX_DAV_EXT)),
    ];
    let missing: Vec<&str> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        println!("files: tools present: wrk, apache2 + mod_dav_fs, htpasswd, nginx + dav_ext");
        return Ok(());
    }
    println!(
        "files: installing Debian packages with apt-get: {}",
        missing.join(" ")
    );
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let apt = |args: &[&str]| -> anyhow::Result<()> {
        let mut cmd = if root {
            Command::new("apt-get")
        } else {
            let mut c = Command::new("sudo");
            c.arg("apt-get");
            c
        };
        let status = cmd
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .context("running apt-get")?;
        ensure!(
            status.success(),
            "apt-get {} failed: {status}",
            args.join(" ")
        );
        Ok(())
    };
    apt(&["update", "-q"])?;
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend(&missing);
    apt(&install)?;
    if find_program("wrk").is_none()
        || find_program("htpasswd").is_none()
        || !have(APACHE)
        || !have(NGINX_DAV_EXT)
    {
        bail!("apt-get install {} left a tool missing", missing.join(" "));
    }
    Ok(())
}

fn make_htpasswd(path: &Path, password: &str) -> anyhow::Result<()> {
    let htpasswd = find_program("htpasswd").context("htpasswd not found")?;
    // -m (apr1-MD5) is htpasswd's default: what an admin following the manual gets.
    let out = Command::new(htpasswd)
        .args(["-b", "-c", "-m"])
        .arg(path)
        .args([USER, password])
        .output()
        .context("running htpasswd")?;
    ensure!(
        out.status.success(),
        "htpasswd failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The peers' workers run as www-data and read it on every request.
    set_mode(path, 0o644)
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

/// The user the peers' workers run as and who must own their data and temp dirs: `www-data`
/// when we are root (both daemons drop privileges to it), else none (they keep ours).
#[derive(Clone, Copy)]
struct Owner {
    uid: u32,
    gid: u32,
}

fn worker_owner() -> anyhow::Result<Option<Owner>> {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
    let line = passwd
        .lines()
        .find(|l| l.starts_with("www-data:"))
        .context("no www-data user (the apache2 package creates it)")?;
    let fields: Vec<&str> = line.split(':').collect();
    let (Some(uid), Some(gid)) = (
        fields.get(2).and_then(|f| f.parse().ok()),
        fields.get(3).and_then(|f| f.parse().ok()),
    ) else {
        bail!("/etc/passwd: bad www-data line {line:?}");
    };
    Ok(Some(Owner { uid, gid }))
}

/// Creates `dir` and hands it to the workers' user.
fn worker_dir(dir: &Path, owner: Option<Owner>) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    if let Some(o) = owner {
        std::os::unix::fs::chown(dir, Some(o.uid), Some(o.gid))
            .with_context(|| format!("chown {}", dir.display()))?;
    }
    Ok(())
}

fn start_apache(
    dir: &Path,
    addr: SocketAddr,
    htpasswd: &Path,
    owner: Option<Owner>,
) -> anyhow::Result<Peer> {
    let data = dir.join("data");
    let run = dir.join("run");
    worker_dir(&data, owner)?;
    worker_dir(&run, owner)?;
    let (d, dt, r, h) = (
        dir.display(),
        data.display(),
        run.display(),
        htpasswd.display(),
    );
    let user = if owner.is_some() {
        "User www-data\nGroup www-data\n"
    } else {
        ""
    };
    let m = APACHE_MODULES;
    // mpm_event with its compiled-in defaults (3 processes × 25 threads to start); keep-alive
    // unlimited as arca's is; LimitRequestBody 0 lifts 2.4.54's 1 GiB default.
    let conf = format!(
        r#"ServerRoot "{d}"
ServerName 127.0.0.1
Listen {addr}
PidFile "{d}/httpd.pid"
DefaultRuntimeDir "{r}"
ErrorLog "{d}/error.log"
LogLevel warn
{user}LoadModule mpm_event_module {m}/mod_mpm_event.so
LoadModule authn_core_module {m}/mod_authn_core.so
LoadModule authn_file_module {m}/mod_authn_file.so
LoadModule authz_core_module {m}/mod_authz_core.so
LoadModule authz_user_module {m}/mod_authz_user.so
LoadModule auth_basic_module {m}/mod_auth_basic.so
LoadModule alias_module {m}/mod_alias.so
LoadModule dav_module {m}/mod_dav.so
LoadModule dav_fs_module {m}/mod_dav_fs.so
LogFormat "%h %l %u %t \"%r\" %>s %O \"%{{Referer}}i\" \"%{{User-Agent}}i\"" combined
CustomLog "{d}/access.log" combined
KeepAlive On
MaxKeepAliveRequests 0
LimitRequestBody 0
DavLockDB "{r}/davlock"
DocumentRoot "{dt}"
Alias /dav "{dt}"
<Directory "{dt}">
  Dav On
  AuthType Basic
  AuthName arca-bench
  AuthBasicProvider file
  AuthUserFile "{h}"
  Require valid-user
</Directory>
"#
    );
    let conf_path = dir.join("httpd.conf");
    fs::write(&conf_path, conf).context("writing httpd.conf")?;
    let mut cmd = Command::new(APACHE);
    cmd.arg("-f").arg(&conf_path).arg("-DFOREGROUND");
    Peer::spawn("apache", cmd, dir)
}

fn start_nginx(
    dir: &Path,
    addr: SocketAddr,
    htpasswd: &Path,
    owner: Option<Owner>,
) -> anyhow::Result<Peer> {
    let data = dir.join("data");
    let tmp = dir.join("tmp");
    worker_dir(&data, owner)?;
    worker_dir(&tmp, owner)?;
    let (d, dt, t, h) = (
        dir.display(),
        data.display(),
        tmp.display(),
        htpasswd.display(),
    );
    let user = if owner.is_some() {
        "user www-data www-data;"
    } else {
        ""
    };
    // One worker per core; sendfile as Debian's stock config has it; PUT bodies are spooled to
    // client_body_temp_path and renamed into place, so it sits on the data dir's filesystem.
    let conf = format!(
        r#"load_module {NGINX_DAV_EXT};
{user}
worker_processes auto;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log {d}/access.log;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_max_body_size 0;
  client_body_temp_path {t}/body;
  proxy_temp_path {t}/proxy;
  fastcgi_temp_path {t}/fastcgi;
  uwsgi_temp_path {t}/uwsgi;
  scgi_temp_path {t}/scgi;
  server {{
    listen {addr};
    location /dav/ {{
      alias {dt}/;
      auth_basic arca-bench;
      auth_basic_user_file {h};
      dav_methods PUT DELETE MKCOL COPY MOVE;
      dav_ext_methods PROPFIND OPTIONS;
      create_full_put_path on;
    }}
  }}
}}
"#
    );
    let conf_path = dir.join("nginx.conf");
    fs::write(&conf_path, conf).context("writing nginx.conf")?;
    let mut cmd = Command::new(NGINX);
    cmd.arg("-c")
        .arg(&conf_path)
        .arg("-p")
        .arg(dir)
        // -e: the log for errors before the config is read (else /var/log/nginx/error.log).
        .arg("-e")
        .arg(dir.join("error.log"))
        .args(["-g", "daemon off;"]);
    Peer::spawn("nginx", cmd, dir)
}

/// A reference server in the foreground as our child. Stopping (or dropping) sends SIGTERM,
/// which both Apache and nginx masters pass on to their workers, then kills after a deadline.
struct Peer {
    name: &'static str,
    child: Child,
    dir: PathBuf,
}

impl Peer {
    fn spawn(name: &'static str, mut cmd: Command, dir: &Path) -> anyhow::Result<Self> {
        let out = fs::File::create(dir.join("stdout.log")).context("peer log")?;
        let child = cmd
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().context("peer log")?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            name,
            child,
            dir: dir.to_owned(),
        })
    }

    /// Ready when `path` answers 401: listening, and auth is on.
    fn wait_ready(&mut self, addr: SocketAddr, path: &str) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().context("waiting for peer")? {
                bail!(self.with_log(&format!("{} exited with {status} at start", self.name)));
            }
            match http_status(addr, path) {
                Ok(401) => return Ok(()),
                Ok(other) => bail!(self.with_log(&format!(
                    "{}: GET {path} without credentials answered {other}, not 401",
                    self.name
                ))),
                Err(_) if start.elapsed() < PEER_READY_LIMIT => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => bail!(self.with_log(&format!(
                    "{} not answering on {addr} after {PEER_READY_LIMIT:?}: {e}",
                    self.name
                ))),
            }
        }
    }

    fn with_log(&self, message: &str) -> String {
        let mut text = String::new();
        for log in ["stdout.log", "error.log"] {
            text.push_str(&fs::read_to_string(self.dir.join(log)).unwrap_or_default());
        }
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n  ");
        format!("{message}; its logs end:\n  {tail}")
    }

    fn stop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child and
            // not yet reaped (try_wait just saw it running), so it names no other process.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let start = Instant::now();
        while start.elapsed() < PEER_EXIT_LIMIT {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "arca-bench: files: {} still running {PEER_EXIT_LIMIT:?} after SIGTERM; killing it",
            self.name
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------------
// Small requests with wrk.

/// What one wrk run reported.
pub(crate) struct Load {
    pub(crate) ok: u64,
    pub(crate) elapsed: Duration,
    p99: Duration,
    /// Requests answered ≥ 400, plus socket errors and timeouts, as "kind=count" pairs.
    pub(crate) errors: Vec<(String, u64)>,
    /// Per wrk thread: how many names its `request()` handed out (PUT only).
    counters: Vec<u64>,
    /// The server's CPU time per answered request, in µs (set by [`measured_wrk`]).
    cpu_us: Option<f64>,
}

impl Load {
    fn measure(&self) -> Measure {
        let errors: Vec<String> = self
            .errors
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        Measure {
            rate: self.ok as f64 / self.elapsed.as_secs_f64(),
            p99: Some(self.p99),
            cpu_us: self.cpu_us,
            note: if errors.is_empty() {
                String::new()
            } else {
                format!(
                    "errors (not counted in the rate): {}; {} answered OK",
                    errors.join(", "),
                    thousands(self.ok as f64)
                )
            },
        }
    }
}

/// Lua shared by every script: the auth header, thread numbering, and a `done()` that prints
/// the summary as `RESULT k=v …` and each thread's name counter as `THREAD tid count`.
const LUA_COMMON: &str = r#"
threads = {}
tid = 0
counter = 0
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d p99_us=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
    summary.requests, summary.duration, latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
  for _, t in ipairs(threads) do
    io.write(string.format("THREAD %d %d\n", t:get("tid"), t:get("counter") or 0))
  end
end
"#;

pub(crate) fn lua_head(method: &str, auth: &str) -> String {
    format!("wrk.method = \"{method}\"\nwrk.headers[\"Authorization\"] = \"{auth}\"\n{LUA_COMMON}")
}

/// A PUT script: each request a new name `{dir}t{thread}-{n}`, body 4 KiB.
fn put_script(auth: &str, dir: &str) -> String {
    let mut s = lua_head("PUT", auth);
    let _ = write!(
        s,
        r#"wrk.headers["Content-Type"] = "application/octet-stream"
wrk.body = string.rep("x", {SMALL})
function request()
  local path = "{dir}t" .. tid .. "-" .. counter
  counter = counter + 1
  return wrk.format(nil, path)
end
"#
    );
    s
}

/// A GET script cycling over names `{dir}t{j}-{i}` for j < `threads`, 1 ≤ i ≤ `per_thread`;
/// each wrk thread starts at its own offset so the two do not read the same file at once.
///
/// i starts at 1 because wrk calls `request()` once on thread 0's script before the run, to
/// check it, and throws the request away: the PUT script's `t0-0` is never written.
fn get_script(auth: &str, dir: &str, threads: usize, per_thread: u64) -> String {
    let total = threads as u64 * per_thread;
    let stride = total / WRK_THREADS as u64;
    let mut s = lua_head("GET", auth);
    let _ = write!(
        s,
        r#"k = nil
function request()
  if k == nil then k = tid * {stride} end
  local n = k % {total}
  k = k + 1
  local path = "{dir}t" .. (n % {threads}) .. "-" .. (math.floor(n / {threads}) + 1)
  return wrk.format(nil, path)
end
"#
    );
    s
}

/// A PROPFIND script: one static request (the URL names the folder).
fn propfind_script(auth: &str) -> String {
    let mut s = lua_head("PROPFIND", auth);
    let _ = write!(
        s,
        r#"wrk.headers["Depth"] = "1"
wrk.headers["Content-Type"] = "application/xml; charset=utf-8"
wrk.body = [[{PROPFIND_BODY}]]
"#
    );
    s
}

pub(crate) fn wrk(
    script_dir: &Path,
    name: &str,
    script: &str,
    url: &str,
    d: Duration,
) -> anyhow::Result<Load> {
    let path = script_dir.join(format!("{name}.lua"));
    fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
    let out = crate::wrk::run(&path, url, d)?;
    parse_wrk(&out).with_context(|| format!("wrk output for {url}:\n{}", out.text))
}

/// The measured run of a case: [`wrk`], with the CPU time `dav`'s processes spent during it.
///
/// Why CPU per request beside the rate: on this two-core machine wrk and the server share the
/// cores, so the rate follows what the whole request costs the server; the CPU per request
/// says how far that cost is from a peer's, and it swings much less between runs than the
/// rate does. A sample that cannot be read leaves the field empty rather than failing the case.
fn measured_wrk(
    dav: &Dav,
    script_dir: &Path,
    name: &str,
    script: &str,
    url: &str,
) -> anyhow::Result<Load> {
    let before = process::tree_cpu_ticks(dav.pid);
    let mut load = wrk(script_dir, name, script, url, MEASURE)?;
    let after = process::tree_cpu_ticks(dav.pid);
    load.cpu_us = match (before, after) {
        (Ok(b), Ok(a)) if load.ok > 0 => {
            Some(a.saturating_sub(b) as f64 * 1e6 / process::clock_ticks_per_sec() / load.ok as f64)
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("arca-bench: files: {name}: no CPU time: {e:#}");
            None
        }
        _ => None,
    };
    Ok(load)
}

fn parse_wrk(out: &crate::wrk::Output) -> anyhow::Result<Load> {
    let field = |key: &str| out.field(key);
    let text = out.text.as_str();
    let requests = field("requests")?;
    let status = field("status")?;
    let mut counters = Vec::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("THREAD ")) {
        let mut parts = line.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(tid)), Some(Ok(count))) = (parts.next(), parts.next()) else {
            bail!("bad THREAD line {line:?}");
        };
        let tid = usize::try_from(tid)?;
        if counters.len() <= tid {
            counters.resize(tid + 1, 0);
        }
        counters[tid] = count;
    }
    let errors = ["status", "connect", "read", "write", "timeout"]
        .iter()
        .map(|k| Ok(((*k).to_owned(), field(k)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let elapsed = out.elapsed()?;
    Ok(Load {
        ok: requests.saturating_sub(status),
        elapsed,
        p99: Duration::from_micros(field("p99_us")?),
        errors: errors
            .into_iter()
            .map(|(k, n)| match k.as_str() {
                "status" => ("status ≥ 400".to_owned(), n),
                _ => (k, n),
            })
            .collect(),
        counters,
        cpu_us: None,
    })
}

/// Flushes every dirty page on the machine, so a measurement does not pay for writeback the
/// previous one (possibly another server's) left behind.
fn sync_disks() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// PUT of 4 KiB files: a warm-up into `bench/warm/`, then the measurement into `bench/put/`.
/// Returns the measure and how many names each wrk thread handed out.
fn put_small(dav: &Dav, auth: &str, wrk_dir: &Path) -> anyhow::Result<(Measure, Vec<u64>)> {
    let url = format!("http://{}/", dav.addr);
    let warm = put_script(auth, &format!("{}bench/warm/", dav.base));
    wrk(
        wrk_dir,
        &format!("{}-put-warm", dav.name),
        &warm,
        &url,
        WARMUP,
    )?;
    sync_disks();
    let script = put_script(auth, &format!("{}bench/put/", dav.base));
    let load = measured_wrk(dav, wrk_dir, &format!("{}-put", dav.name), &script, &url)?;
    ensure!(
        load.counters.len() == WRK_THREADS,
        "wrk reported {} thread counters, expected {WRK_THREADS}",
        load.counters.len()
    );
    Ok((load.measure(), load.counters))
}

/// GET of the files the PUT case wrote. The last names a thread handed out may not have been
/// written (requests in flight when wrk stopped), so each thread's last `CONNECTIONS` are left
/// out, and so is its first (see [`get_script`]); a name that still does not exist shows up as
/// a status error.
fn get_small(dav: &Dav, auth: &str, wrk_dir: &Path, counters: &[u64]) -> anyhow::Result<Measure> {
    let per_thread = counters
        .iter()
        .min()
        .map_or(0, |c| c.saturating_sub(CONNECTIONS as u64 + 1));
    ensure!(
        per_thread > 0,
        "its PUT case wrote too few files to read ({counters:?} per thread)"
    );
    let url = format!("http://{}/", dav.addr);
    let script = get_script(
        auth,
        &format!("{}bench/put/", dav.base),
        counters.len(),
        per_thread,
    );
    wrk(
        wrk_dir,
        &format!("{}-get-warm", dav.name),
        &script,
        &url,
        WARMUP,
    )?;
    sync_disks();
    let load = measured_wrk(dav, wrk_dir, &format!("{}-get", dav.name), &script, &url)?;
    let mut m = load.measure();
    let files = per_thread * counters.len() as u64;
    m.note = join_notes(&format!("over {} files", thousands(files as f64)), &m.note);
    Ok(m)
}

fn propfind(
    dav: &Dav,
    auth: &str,
    wrk_dir: &Path,
    listing_note: String,
) -> anyhow::Result<Measure> {
    let url = format!("http://{}{}bench/list/", dav.addr, dav.base);
    let script = propfind_script(auth);
    wrk(
        wrk_dir,
        &format!("{}-propfind-warm", dav.name),
        &script,
        &url,
        WARMUP,
    )?;
    sync_disks();
    let load = measured_wrk(
        dav,
        wrk_dir,
        &format!("{}-propfind", dav.name),
        &script,
        &url,
    )?;
    let mut m = load.measure();
    m.note = join_notes(&listing_note, &m.note);
    Ok(m)
}

fn join_notes(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_owned(),
        (_, true) => a.to_owned(),
        _ => format!("{a}; {b}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Setup, big transfers and memory with a hyper client.

pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// One persistent HTTP/1.1 connection, every request authenticated.
pub(crate) struct Conn {
    send: SendRequest<Body>,
    host: String,
    auth: String,
}

impl Conn {
    pub(crate) async fn open(addr: SocketAddr, auth: &str) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        // A connection error also fails the request in flight, which reports it.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self {
            send,
            host: addr.to_string(),
            auth: auth.to_owned(),
        })
    }

    /// The `host:port` requests go to (what a Destination header names).
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    pub(crate) async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Body,
    ) -> anyhow::Result<hyper::Response<Incoming>> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.host)
            .header(hyper::header::AUTHORIZATION, &self.auth);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send.ready().await?;
        let resp = tokio::time::timeout(OP_LIMIT, self.send.send_request(req.body(body)?))
            .await
            .with_context(|| format!("{method} {path}: no answer within {OP_LIMIT:?}"))??;
        Ok(resp)
    }

    /// A request with a small body whose whole answer is wanted; fails unless the status is
    /// one of `expect`.
    pub(crate) async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        expect: &[u16],
    ) -> anyhow::Result<Bytes> {
        let resp = self
            .send(method, path, headers, Full::new(body).boxed())
            .await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        ensure!(
            expect.contains(&status),
            "{method} {path}: {status} {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        Ok(body)
    }
}

pub(crate) const CREATED: &[u16] = &[200, 201, 204];

/// PUTs file `i` for every `i` in `0..count` (at `path(i)`, with `body(i)`) over
/// [`CONNECTIONS`] connections, connection `c` taking every `i` with `i % CONNECTIONS == c`:
/// how each section fills a server before it measures.
pub(crate) async fn put_all<P, B>(
    addr: SocketAddr,
    auth: &str,
    count: usize,
    path: P,
    body: B,
) -> anyhow::Result<()>
where
    P: Fn(usize) -> String + Clone + Send + 'static,
    B: Fn(usize) -> Bytes + Clone + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    for first in 0..CONNECTIONS {
        let (auth, path, body) = (auth.to_owned(), path.clone(), body.clone());
        tasks.spawn(async move {
            let mut c = Conn::open(addr, &auth).await?;
            for i in (first..count).step_by(CONNECTIONS) {
                c.call("PUT", &path(i), &[], body(i), CREATED).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a filling task panicked")??;
    }
    Ok(())
}

async fn make_collections(dav: &Dav, auth: &str) -> anyhow::Result<()> {
    let mut c = Conn::open(dav.addr, auth).await?;
    // Trailing slashes: nginx refuses MKCOL on a URI without one.
    for dir in [
        "bench/",
        "bench/warm/",
        "bench/put/",
        "bench/list/",
        "bench/big/",
    ] {
        let path = format!("{}{dir}", dav.base);
        c.call("MKCOL", &path, &[], Bytes::new(), &[201]).await?;
    }
    Ok(())
}

/// Fills `bench/list/` with [`LISTING`] files of 4 KiB over 16 connections, then checks one
/// PROPFIND answer: 207, one response per entry plus the folder, and how many carry an etag.
async fn populate_listing(dav: &Dav, auth: &str) -> anyhow::Result<String> {
    let body = Bytes::from(vec![b'x'; SMALL]);
    let base = dav.base.clone();
    put_all(
        dav.addr,
        auth,
        LISTING,
        move |i| format!("{base}bench/list/f{i:04}"),
        move |_| body.clone(),
    )
    .await?;
    let mut c = Conn::open(dav.addr, auth).await?;
    let xml = c
        .call(
            "PROPFIND",
            &format!("{}bench/list/", dav.base),
            &[("depth", "1"), ("content-type", "application/xml")],
            Bytes::from_static(PROPFIND_BODY.as_bytes()),
            &[207],
        )
        .await?;
    let xml = String::from_utf8_lossy(&xml);
    let responses = count_elements(&xml, "response", false);
    let etags = count_elements(&xml, "getetag", true);
    ensure!(
        responses == LISTING + 1,
        "PROPFIND answered {responses} responses, expected {}",
        LISTING + 1
    );
    Ok(format!(
        "answer {} KiB, {responses} responses, {etags} with an etag{}",
        xml.len() / 1024,
        if etags == 0 { " (none)" } else { "" }
    ))
}

/// Counts closing tags `</prefix:local>` (any prefix); with `nonempty`, only those with text
/// before them, i.e. elements that carry a value.
pub(crate) fn count_elements(xml: &str, local: &str, nonempty: bool) -> usize {
    xml.match_indices("</")
        .filter(|(i, _)| {
            let rest = &xml[i + 2..];
            let Some(end) = rest.find('>') else {
                return false;
            };
            let name = rest[..end].trim();
            let name = name.rsplit(':').next().unwrap_or(name);
            name == local && (!nonempty || !xml[..*i].trim_end().ends_with('>'))
        })
        .count()
}

/// A request body of `left` bytes: clones of one buffer of pseudo-random bytes (nothing a
/// server could compress or deduplicate), with an exact size so it goes out with Content-Length
/// as sync clients send it.
struct Pattern {
    chunk: Bytes,
    left: u64,
}

impl Pattern {
    fn new(size: u64) -> Self {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let chunk: Vec<u8> = (0..CHUNK)
            .map(|_| {
                // xorshift64: fast and good enough to defeat compression.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Self {
            chunk: chunk.into(),
            left: size,
        }
    }
}

impl hyper::body::Body for Pattern {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = usize::try_from(self.left).map_or(CHUNK, |left| left.min(CHUNK));
        self.left -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

/// PUT of `size` bytes; returns the time from sending to the answer.
async fn put_big(c: &mut Conn, path: &str, size: u64) -> anyhow::Result<Duration> {
    let body = Pattern::new(size);
    let len = size.to_string();
    let start = Instant::now();
    let resp = c
        .send(
            "PUT",
            path,
            &[
                ("content-length", &len),
                ("content-type", "application/octet-stream"),
            ],
            body.boxed(),
        )
        .await?;
    let status = resp.status().as_u16();
    let answer = resp.into_body().collect().await?.to_bytes();
    let elapsed = start.elapsed();
    ensure!(
        CREATED.contains(&status),
        "PUT {path} ({size} bytes): {status} {}",
        String::from_utf8_lossy(&answer[..answer.len().min(300)])
    );
    Ok(elapsed)
}

/// GET that reads and discards the body; checks its length; returns the time to the last byte.
async fn get_big(c: &mut Conn, path: &str, size: u64) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let resp = c.send("GET", path, &[], Full::default().boxed()).await?;
    let status = resp.status().as_u16();
    ensure!(status == 200, "GET {path}: {status}");
    let mut body = resp.into_body();
    let mut got = 0u64;
    while let Some(frame) = tokio::time::timeout(OP_LIMIT, body.frame())
        .await
        .with_context(|| format!("GET {path}: stalled for {OP_LIMIT:?}"))?
    {
        if let Ok(data) = frame?.into_data() {
            got += data.len() as u64;
        }
    }
    let elapsed = start.elapsed();
    ensure!(got == size, "GET {path}: {got} bytes, expected {size}");
    Ok(elapsed)
}

fn mib_per_s(size: u64, d: Duration) -> f64 {
    size as f64 / MIB as f64 / d.as_secs_f64()
}

/// A warm-up transfer of [`BIG_WARMUP`], then [`BIG_ROUNDS`] × (PUT, GET) of [`BIG`] to the
/// same path (so rounds after the first overwrite), each after a `sync`. Medians.
async fn big_transfers(dav: &Dav, auth: &str) -> anyhow::Result<(Measure, Measure)> {
    let mut c = Conn::open(dav.addr, auth).await?;
    let warm = format!("{}bench/big/warm", dav.base);
    put_big(&mut c, &warm, BIG_WARMUP).await?;
    get_big(&mut c, &warm, BIG_WARMUP).await?;
    let path = format!("{}bench/big/file", dav.base);
    let (mut puts, mut gets) = (Vec::new(), Vec::new());
    for _ in 0..BIG_ROUNDS {
        sync_disks();
        puts.push(mib_per_s(BIG, put_big(&mut c, &path, BIG).await?));
        sync_disks();
        gets.push(mib_per_s(BIG, get_big(&mut c, &path, BIG).await?));
    }
    Ok((median_measure(puts), median_measure(gets)))
}

fn median_measure(mut v: Vec<f64>) -> Measure {
    v.sort_by(f64::total_cmp);
    let median = v.get(v.len() / 2).copied().unwrap_or(f64::NAN);
    let all: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
    Measure {
        rate: median,
        p99: None,
        cpu_us: None,
        note: format!("median of {} (MiB/s: {})", v.len(), all.join(", ")),
    }
}

/// One RSS measurement around a 2 GiB transfer.
struct RssGrowth {
    what: &'static str,
    idle_mib: f64,
    peak_mib: f64,
    samples: usize,
    mib_per_s: f64,
}

/// Samples VmRSS of `pid` every [`RSS_EVERY`] on a thread of its own until stopped.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, usize)>,
}

impl RssSampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let (mut peak, mut samples) = (0, 0);
            loop {
                if let Ok(kib) = vm_rss_kib(pid) {
                    peak = peak.max(kib);
                    samples += 1;
                }
                if flag.load(Ordering::Relaxed) {
                    return (peak, samples);
                }
                std::thread::sleep(RSS_EVERY);
            }
        });
        Self { stop, thread }
    }

    /// Peak KiB and the number of samples; one last sample is taken after the stop.
    fn finish(self) -> (u64, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or((0, 0))
    }
}

fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// arca's RSS growth during a 2 GiB PUT and a 2 GiB GET. A 1 MiB PUT and GET first, so
/// one-time set-up (store connections, the auth cache) is in the idle figure and not in the
/// growth; the idle value is read after a pause, right before each transfer.
fn measure_rss(
    rt: &tokio::runtime::Runtime,
    dav: &Dav,
    auth: &str,
    pid: u32,
) -> anyhow::Result<Vec<RssGrowth>> {
    let path = format!("{}bench/big/huge", dav.base);
    let mut c = rt.block_on(Conn::open(dav.addr, auth))?;
    rt.block_on(async {
        put_big(&mut c, &path, MIB).await?;
        get_big(&mut c, &path, MIB).await
    })?;
    let mut out = Vec::new();
    for what in ["PUT", "GET"] {
        sync_disks();
        std::thread::sleep(Duration::from_millis(300));
        let idle = vm_rss_kib(pid)?;
        let sampler = RssSampler::start(pid);
        let elapsed = rt.block_on(async {
            match what {
                "PUT" => put_big(&mut c, &path, HUGE).await,
                _ => get_big(&mut c, &path, HUGE).await,
            }
        });
        let (peak, samples) = sampler.finish();
        out.push(RssGrowth {
            what,
            idle_mib: kib_to_mib(idle),
            peak_mib: kib_to_mib(peak.max(idle)),
            samples,
            mib_per_s: mib_per_s(HUGE, elapsed?),
        });
    }
    // 2 GiB less on the disk for the cases that follow.
    rt.block_on(c.call("DELETE", &path, &[], Bytes::new(), &[200, 204]))?;
    Ok(out)
}

/// "3,770" for 3770.4; one decimal below 100 so small rates keep their precision.
pub(crate) fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".to_owned();
    }
    if x < 100.0 {
        return format!("{x:.1}");
    }
    let digits = format!("{:.0}", x);
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

#[cfg(test)]
mod tests {
    use hyper::body::Body as _;

    use super::*;

    #[test]
    fn wrk_done_output_parses() {
        let text = "Running 5s test\nRESULT requests=1000 duration_us=5000000 p99_us=12345 \
                    connect=0 read=1 write=0 status=10 timeout=0\nTHREAD 1 480\nTHREAD 0 530\n";
        let load = parse_wrk(&crate::wrk::parse(text).unwrap()).unwrap();
        assert_eq!(load.ok, 990);
        assert_eq!(load.elapsed, Duration::from_secs(5));
        assert_eq!(load.p99, Duration::from_micros(12345));
        assert_eq!(load.counters, vec![530, 480]);
        assert!(load.measure().note.contains("status ≥ 400 10"));
        assert!(crate::wrk::parse("no result here").is_err());
    }

    #[test]
    fn elements_are_counted_with_any_prefix() {
        let apache = "<D:response><lp1:getetag>W/\"1\"</lp1:getetag></D:response>\n\
                      <D:response><g0:getetag/></D:response>";
        assert_eq!(count_elements(apache, "response", false), 2);
        assert_eq!(count_elements(apache, "getetag", true), 1);
        let arca = "<d:response><d:getetag>\"a\"</d:getetag></d:response>\
                    <d:response><d:getetag></d:getetag></d:response>";
        assert_eq!(count_elements(arca, "response", false), 2);
        assert_eq!(count_elements(arca, "getetag", true), 1);
    }

    #[test]
    fn numbers_format() {
        assert_eq!(thousands(3770.4), "3,770");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(543.0), "543");
        assert_eq!(thousands(15.04), "15.0");
    }

    #[test]
    fn pattern_body_has_the_exact_size() {
        let mut p = Pattern::new(3 * MIB + 5);
        assert_eq!(p.size_hint().exact(), Some(3 * MIB + 5));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut total = 0;
        while let Poll::Ready(Some(Ok(f))) = Pin::new(&mut p).poll_frame(&mut cx) {
            total += f.into_data().map_or(0, |d| d.len() as u64);
        }
        assert_eq!(total, 3 * MIB + 5);
        assert!(p.is_end_stream());
    }
}
