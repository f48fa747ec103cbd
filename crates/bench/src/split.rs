//! The split benchmark: what it costs to take arca's services apart. The same WebDAV workload
//! runs against three deployments of the same release binary, started side by side in one run:
//!
//! - `single`: one process hosting all six services, every hop in memory (`mem://`): built-in
//!   defaults, which is what config/single.yaml spells out;
//! - `pod`: four processes of one pod talking over Unix sockets (the config/grouped-unix
//!   layout: proxy | frontend + gateway + sharing | storage-users | storage-system);
//! - `split`: the same four processes over TCP on loopback (the config/grouped layout).
//!
//! Each case — GET of 4 KiB files and PROPFIND Depth 1 on a folder of [`FOLDER`] of them, both
//! at 16 connections with HTTP Basic, driven by `wrk` — runs [`ROUNDS`] times on every
//! deployment in turn, so a change in background load hits all three alike; a line shows the
//! median req/s and p99 of each, and pod/single and split/single ratios: the price of each
//! split. The issue sets no target for these ratios, so they get no verdict. Failed requests
//! (socket errors, answers ≥ 400) are left out of the rates, counted per deployment, and get
//! the one target here: none under a steady load; when some fail, the failing processes' log
//! lines are printed with the counts.
//!
//! The configs are written into the scratch dir with free ports, sockets under the scratch dir
//! and a secret of this run, so nothing collides with another run or with `make run-grouped`.
//!
//! To chase a failure: `ARCA_BENCH_SPLIT_SHAPES=pod,split` runs only those deployments, and
//! `ARCA_BENCH_SPLIT_LOG='info,h2::proto=debug'` sets every process's log level and keeps the
//! logs after the run (the path is printed).

use std::fmt::Write as _;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use crate::process::{self, Server, free_ports, vm_rss_kib};
use crate::wrk::{CONNECTIONS, find_program};
use crate::{Scratch, Targets};

const ROUNDS: usize = 3;
const MEASURE: Duration = Duration::from_secs(5);
const WARMUP: Duration = Duration::from_secs(1);
/// The same load shape as the files and auth sections.
const SMALL: usize = 4096;
/// Files in the benchmark folder: GET cycles over them, PROPFIND lists them.
const FOLDER: usize = 32;
const USER: &str = "admin";
/// The longest path a Unix socket address holds (`sun_path`, 108 bytes with its NUL).
const SUN_PATH_MAX: usize = 107;
/// Problem lines of each process's log shown when a measurement fails.
const LOG_PROBLEMS: usize = 12;
const PROPFIND_BODY: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:"><d:prop><d:getetag/><d:getcontentlength/><d:getlastmodified/><d:resourcetype/></d:prop></d:propfind>"#;

/// One deployment shape.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Single,
    Pod,
    Split,
}

const SHAPES: [Shape; 3] = [Shape::Single, Shape::Pod, Shape::Split];

/// Runs only the deployments named here (comma-separated shape names, e.g. `pod,split`), to
/// chase a problem of one shape without waiting for the others; ratios need `single`.
const SHAPES_ENV: &str = "ARCA_BENCH_SPLIT_SHAPES";
/// A `log.level` filter for every process of the run (e.g. `info,h2=debug`), to see why a
/// request failed; the default is the binary's own.
const LOG_ENV: &str = "ARCA_BENCH_SPLIT_LOG";

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Single => "single",
            Shape::Pod => "pod",
            Shape::Split => "split",
        }
    }

    /// The shapes [`SHAPES_ENV`] selects, in [`SHAPES`] order; all of them when it is unset.
    fn selected(filter: Option<&str>) -> anyhow::Result<Vec<Shape>> {
        let Some(filter) = filter.filter(|f| !f.trim().is_empty()) else {
            return Ok(SHAPES.to_vec());
        };
        let names: Vec<&str> = filter.split(',').map(str::trim).collect();
        for name in &names {
            ensure!(
                SHAPES.iter().any(|s| s.name() == *name),
                "{SHAPES_ENV}: no shape {name:?} (single, pod, split)"
            );
        }
        Ok(SHAPES
            .into_iter()
            .filter(|s| names.contains(&s.name()))
            .collect())
    }
}

/// Where the services that other processes call listen, in a grouped deployment.
struct Endpoints {
    frontend: String,
    sharing: String,
    storage_users: String,
    storage_system: String,
}

impl Endpoints {
    /// Sockets in `dir`, which must exist; fails if a path is too long for a socket address.
    fn unix(dir: &Path) -> anyhow::Result<Self> {
        let sock = |name: &str| -> anyhow::Result<String> {
            let path = dir.join(format!("{name}.sock"));
            let path = path.to_str().context("socket path is not UTF-8")?;
            ensure!(
                path.len() <= SUN_PATH_MAX,
                "socket path {path} is longer than {SUN_PATH_MAX} bytes; set TMPDIR to a \
                 shorter directory"
            );
            Ok(format!("unix://{path}"))
        };
        Ok(Self {
            frontend: sock("frontend")?,
            sharing: sock("sharing")?,
            storage_users: sock("storage-users")?,
            storage_system: sock("storage-system")?,
        })
    }

    fn tcp() -> anyhow::Result<Self> {
        let [frontend, sharing, storage_users, storage_system] = free_ports()?;
        let tcp = |a: SocketAddr| format!("tcp://{a}");
        Ok(Self {
            frontend: tcp(frontend),
            sharing: tcp(sharing),
            storage_users: tcp(storage_users),
            storage_system: tcp(storage_system),
        })
    }
}

/// A YAML double-quoted scalar: JSON's string syntax is valid YAML.
fn q(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The config of each process of a grouped deployment, as in config/grouped: the proxy alone;
/// frontend with the gateway (in memory: only its own process calls it) and sharing (on a
/// socket: storage-users calls it); storage-users; storage-system. Callers come first, the
/// order they are stopped in. The data dir, debug and public addresses come from
/// [`process::spawn_arca`]'s flags.
fn grouped_configs(e: &Endpoints, secret: &str) -> [(&'static str, String); 4] {
    let head = |services: &str| {
        format!(
            "services: [{services}]\nidentity:\n  secret: {}\nregistry:\n  kind: static\n",
            q(secret)
        )
    };
    let (fe, sh, su, ss) = (
        q(&e.frontend),
        q(&e.sharing),
        q(&e.storage_users),
        q(&e.storage_system),
    );
    [
        (
            "proxy",
            format!(
                "{}  static:\n    frontend: [{fe}]\n    storage-system: [{ss}]\n",
                head("proxy")
            ),
        ),
        (
            "frontend",
            format!(
                "{}  static:\n    storage-users: [{su}]\n    storage-system: [{ss}]\n    \
                 sharing: [{sh}]\nfrontend:\n  endpoint: {fe}\ngateway:\n  endpoint: \
                 \"mem://gateway\"\nsharing:\n  endpoint: {sh}\n",
                head("frontend, gateway, sharing")
            ),
        ),
        (
            "storage-users",
            format!(
                "{}  static:\n    sharing: [{sh}]\nstorage-users:\n  endpoint: {su}\n",
                head("storage-users")
            ),
        ),
        (
            "storage-system",
            format!(
                "{}  static: {{}}\nstorage-system:\n  endpoint: {ss}\n",
                head("storage-system")
            ),
        ),
    ]
}

/// One running deployment: its processes (named) and the public address of its proxy.
struct Deployment {
    shape: Shape,
    servers: Vec<(&'static str, Server)>,
    /// Each process's directory, holding its `arca.log` (see [`process::spawn_arca`]).
    dirs: Vec<PathBuf>,
    public: SocketAddr,
}

impl Deployment {
    fn start(
        shape: Shape,
        arca: &Path,
        dir: &Path,
        password: &str,
        log_level: Option<&str>,
    ) -> anyhow::Result<Self> {
        let dir = dir.join(shape.name());
        // Every process gets the same variables; a file's `log` section would be overridden
        // by ARCA_LOG_LEVEL, and the single process has no file.
        let mut env = vec![("ARCA_ADMIN_PASSWORD", password)];
        if let Some(level) = log_level {
            env.push(("ARCA_LOG_LEVEL", level));
        }
        let mut servers = Vec::new();
        let mut dirs = Vec::new();
        let mut debugs = Vec::new();
        let mut public = None;
        let configs = match shape {
            Shape::Single => None,
            Shape::Pod => {
                let sockets = dir.join("sock");
                fs::create_dir_all(&sockets)
                    .with_context(|| format!("creating {}", sockets.display()))?;
                Some(grouped_configs(&Endpoints::unix(&sockets)?, &secret()))
            }
            Shape::Split => Some(grouped_configs(&Endpoints::tcp()?, &secret())),
        };
        match configs {
            None => {
                let proc_dir = dir.join("arca");
                let (server, debug, addr) = process::spawn_arca(arca, &proc_dir, &env)?;
                servers.push(("arca", server));
                dirs.push(proc_dir);
                debugs.push(debug);
                public = Some(addr);
            }
            Some(configs) => {
                // All four start at once, as a pod's containers do; each waits for what it
                // calls by itself.
                for (name, yaml) in configs {
                    let proc_dir = dir.join(name);
                    fs::create_dir_all(&proc_dir)
                        .with_context(|| format!("creating {}", proc_dir.display()))?;
                    let config = proc_dir.join("arca.yaml");
                    fs::write(&config, yaml)
                        .with_context(|| format!("writing {}", config.display()))?;
                    let config = config.to_str().context("config path is not UTF-8")?;
                    // spawn_arca clears the caller's ARCA_* variables and then sets these,
                    // so the file is ours alone.
                    let mut env = env.clone();
                    env.push(("ARCA_CONFIG", config));
                    let (server, debug, addr) = process::spawn_arca(arca, &proc_dir, &env)?;
                    if name == "proxy" {
                        public = Some(addr);
                    }
                    servers.push((name, server));
                    dirs.push(proc_dir);
                    debugs.push(debug);
                }
            }
        }
        let public = public.context("no process hosts the proxy")?;
        for ((name, server), debug) in servers.iter_mut().zip(debugs) {
            server
                .wait_ready(debug)
                .with_context(|| format!("{} {name}", shape.name()))?;
        }
        Ok(Self {
            shape,
            servers,
            dirs,
            public,
        })
    }

    /// Resident memory of all its processes, in MiB.
    fn rss_mib(&self) -> anyhow::Result<f64> {
        let mut kib = 0;
        for (_, s) in &self.servers {
            kib += vm_rss_kib(s.child.id())?;
        }
        Ok(kib as f64 / 1024.0)
    }

    /// Copies each process's log to `dir` as `SHAPE-NAME.log`.
    fn keep_logs(&self, dir: &Path) {
        if let Err(e) = fs::create_dir_all(dir) {
            println!("split: note: creating {}: {e}", dir.display());
            return;
        }
        for ((name, _), from) in self.servers.iter().zip(&self.dirs) {
            let to = dir.join(format!("{}-{name}.log", self.shape.name()));
            if let Err(e) = fs::copy(from.join("arca.log"), &to) {
                println!("split: note: keeping {}: {e}", to.display());
            }
        }
    }

    /// SIGTERM to each process, callers first; says so when one does not exit cleanly.
    fn stop(mut self) {
        for (name, server) in &mut self.servers {
            match server.terminate() {
                Ok((status, _)) if status.success() => {}
                Ok((status, _)) => println!(
                    "split: note: {} {name} exited with {status} after SIGTERM",
                    self.shape.name()
                ),
                Err(e) => println!("split: note: stopping {} {name}: {e:#}", self.shape.name()),
            }
        }
    }

    /// `message` with, for every process, the last warnings, errors and failed requests of
    /// its log, or the end of the log when it has none: the tail alone is usually a screen of
    /// successful access lines that hides the one failure.
    fn with_logs(&self, message: &str) -> String {
        let mut text = message.to_owned();
        for ((name, s), dir) in self.servers.iter().zip(&self.dirs) {
            let log = fs::read_to_string(dir.join("arca.log")).unwrap_or_default();
            let problems: Vec<&str> = log.lines().filter(|l| is_problem(l)).collect();
            if problems.is_empty() {
                let _ = write!(text, "\n{name}: {}", s.with_log("no warnings"));
            } else {
                let last = &problems[problems.len().saturating_sub(LOG_PROBLEMS)..];
                let _ = write!(
                    text,
                    "\n{name}: {} warnings, errors or failed requests in {}; the last:\n  {}",
                    problems.len(),
                    dir.join("arca.log").display(),
                    last.join("\n  ")
                );
            }
        }
        text
    }
}

/// The time of day in UTC, `HH:MM:SS.mmm`, to set a failing run beside the servers' log lines.
fn utc_time() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let day = now.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day / 3600,
        day / 60 % 60,
        day % 60,
        now.subsec_millis()
    )
}

/// A log line worth showing when a measurement fails.
fn is_problem(line: &str) -> bool {
    [" WARN ", " ERROR ", "status=4", "status=5"]
        .iter()
        .any(|p| line.contains(p))
}

/// A secret for this run's identity tokens: only the processes of one deployment share it.
fn secret() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("arca-bench-split-{}-{nanos:x}", std::process::id())
}

/// One measured round.
#[derive(Clone, Copy)]
struct Sample {
    /// Answered requests per second, failed ones not counted.
    rate: f64,
    p99: Duration,
    requests: u64,
    /// Socket errors, timeouts and answers ≥ 400: a fast error is not a fast request.
    failed: u64,
}

/// A case: what it is, and the wrk script and URL path it runs.
struct Case {
    what: &'static str,
    script: PathBuf,
    path: String,
}

pub(crate) fn run(targets: &mut Targets) -> anyhow::Result<()> {
    let arca = process::locate_arca("split")?;
    // Checked up front so a missing wrk fails before any process starts.
    find_program("wrk")
        .context("wrk not found (apt-get install wrk; the files section installs it)")?;
    let scratch = Scratch::new("split").context("scratch directory")?;
    let (password, auth) = process::admin_credentials(USER);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;

    let shapes = Shape::selected(std::env::var(SHAPES_ENV).ok().as_deref())?;
    let log_level = std::env::var(LOG_ENV).ok().filter(|l| !l.trim().is_empty());
    let mut deployments = Vec::new();
    for &shape in &shapes {
        let d = Deployment::start(shape, &arca, &scratch.path, &password, log_level.as_deref())?;
        rt.block_on(populate(d.public, &auth))
            .map_err(|e| anyhow::anyhow!(d.with_logs(&format!("{}: {e:#}", shape.name()))))?;
        deployments.push(d);
    }
    let started: Vec<String> = deployments
        .iter()
        .map(|d| {
            let what = match d.shape {
                Shape::Single => "1 process, mem://",
                Shape::Pod => "4 processes, unix sockets",
                Shape::Split => "4 processes, tcp loopback",
            };
            format!("{} {} ({what})", d.shape.name(), d.public)
        })
        .collect();
    println!(
        "split: {}; folder of {FOLDER} × 4 KiB, user {USER}, Basic auth",
        started.join(", ")
    );

    let base = format!("/remote.php/dav/files/{USER}/bench/");
    let cases = [
        Case {
            what: "GET 4 KiB, 16 conns",
            script: write_script(&scratch.path, "get", &get_script(&auth, &base))?,
            path: "/".to_owned(),
        },
        Case {
            what: "PROPFIND depth 1, 32 entries",
            script: write_script(&scratch.path, "propfind", &propfind_script(&auth))?,
            path: base.clone(),
        },
    ];

    // samples[case][shape]: one per round. Failed requests are counted, warm-ups included,
    // and the first failing run of each deployment keeps what its logs say about it.
    let mut samples = vec![vec![Vec::new(); shapes.len()]; cases.len()];
    let mut failed = vec![(0u64, 0u64); shapes.len()];
    let mut diagnoses: Vec<Option<String>> = vec![None; shapes.len()];
    for (c, case) in cases.iter().enumerate() {
        let rounds = std::iter::once(WARMUP).chain(std::iter::repeat_n(MEASURE, ROUNDS));
        for (round, d) in rounds.enumerate() {
            for (s, dep) in deployments.iter().enumerate() {
                let url = format!("http://{}{}", dep.public, case.path);
                let started = utc_time();
                let sample = wrk_run(&case.script, &url, d).map_err(|e| {
                    anyhow::anyhow!(dep.with_logs(&format!("{}: {e:#}", case.what)))
                })?;
                failed[s].0 += sample.failed;
                failed[s].1 += sample.requests;
                if sample.failed > 0 && diagnoses[s].is_none() {
                    diagnoses[s] = Some(dep.with_logs(&format!(
                        "split: {} {}, {} run of {}s from {started} UTC: {} of {} requests \
                         failed",
                        dep.shape.name(),
                        case.what,
                        if round == 0 { "warm-up" } else { "measured" },
                        d.as_secs(),
                        sample.failed,
                        sample.requests
                    )));
                }
                if round > 0 {
                    samples[c][s].push(sample);
                }
            }
        }
    }
    let rss: Vec<String> = deployments
        .iter()
        .map(|d| {
            d.rss_mib().map_or_else(
                |e| format!("{} n/a ({e:#})", d.shape.name()),
                |m| {
                    format!(
                        "{} {m:.1} MiB ({} process{})",
                        d.shape.name(),
                        d.servers.len(),
                        if d.servers.len() == 1 { "" } else { "es" }
                    )
                },
            )
        })
        .collect();
    // With a log level asked for, the logs are what the run is for: they outlive the scratch
    // dir.
    let kept = log_level.is_some().then(|| {
        std::env::temp_dir().join(format!("arca-bench-split-logs-{}", std::process::id()))
    });
    for d in deployments {
        if let Some(kept) = &kept {
            d.keep_logs(kept);
        }
        d.stop();
    }
    if let Some(kept) = &kept {
        println!("split: logs kept in {}", kept.display());
    }

    println!(
        "split: median of {ROUNDS} rounds × {}s each, {CONNECTIONS} connections, ratios against \
         single",
        MEASURE.as_secs()
    );
    for (case, by_shape) in cases.iter().zip(&samples) {
        println!("{}", report_line(case.what, &shapes, by_shape));
        let rounds: Vec<String> = shapes
            .iter()
            .zip(by_shape)
            .map(|(shape, v)| {
                let r: Vec<String> = v.iter().map(|s| format!("{:.0}", s.rate)).collect();
                format!("{} {}", shape.name(), r.join(", "))
            })
            .collect();
        println!("      rounds (req/s): {}", rounds.join("; "));
    }
    println!("split {:<36} {}", "RSS after the load", rss.join(" | "));
    let counts: Vec<String> = shapes
        .iter()
        .zip(&failed)
        .map(|(shape, (f, n))| format!("{} {f} of {n}", shape.name()))
        .collect();
    targets.check(
        failed.iter().all(|(f, _)| *f == 0),
        &format!(
            "split: no failed request under steady load ({}; warm-ups included)",
            counts.join(", ")
        ),
    );
    for d in diagnoses.into_iter().flatten() {
        println!("{d}");
    }
    Ok(())
}

/// "split GET 4 KiB, 16 conns (req/s)  single 9,000 (p99 3.1 ms) | pod … 0.61× | split …";
/// ratios only when `single` ran (it comes first when it did).
fn report_line(what: &str, shapes: &[Shape], by_shape: &[Vec<Sample>]) -> String {
    let medians: Vec<Sample> = by_shape.iter().map(|v| median(v)).collect();
    let mut line = format!("split {:<36}", format!("{what} (req/s)"));
    let with_single = shapes.first() == Some(&Shape::Single);
    for (i, (shape, m)) in shapes.iter().zip(&medians).enumerate() {
        let sep = if i == 0 { " " } else { " | " };
        let _ = write!(
            line,
            "{sep}{} {:.0} (p99 {:.1} ms)",
            shape.name(),
            m.rate,
            m.p99.as_secs_f64() * 1e3
        );
        if i > 0 && with_single {
            let single = medians[0].rate;
            let ratio = if single > 0.0 { m.rate / single } else { 0.0 };
            let _ = write!(line, " {ratio:.2}×");
        }
    }
    line
}

/// The median rate, with the median of the p99s (the two need not come from one round).
fn median(v: &[Sample]) -> Sample {
    let mid = |mut x: Vec<f64>| {
        x.sort_by(f64::total_cmp);
        match x.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => x[n / 2],
            n => (x[n / 2 - 1] + x[n / 2]) / 2.0,
        }
    };
    Sample {
        requests: v.iter().map(|s| s.requests).sum(),
        failed: v.iter().map(|s| s.failed).sum(),
        rate: mid(v.iter().map(|s| s.rate).collect()),
        p99: Duration::from_secs_f64(mid(v.iter().map(|s| s.p99.as_secs_f64()).collect()).max(0.0)),
    }
}

// ---------------------------------------------------------------------------------------------
// Setup over one HTTP/1.1 connection.

struct Conn {
    send: SendRequest<Full<Bytes>>,
    host: String,
    auth: String,
}

impl Conn {
    async fn open(addr: SocketAddr, auth: &str) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
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

    /// The status and whole body of one request.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> anyhow::Result<(u16, Bytes)> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.host)
            .header(hyper::header::AUTHORIZATION, &self.auth);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send.ready().await?;
        let resp = tokio::time::timeout(
            Duration::from_secs(30),
            self.send.send_request(req.body(Full::new(body))?),
        )
        .await
        .with_context(|| format!("{method} {path}: no answer within 30 s"))??;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// Creates the folder and its files, then checks that a GET and a PROPFIND answer what the
/// load will ask for, so the load measures real answers.
async fn populate(addr: SocketAddr, auth: &str) -> anyhow::Result<()> {
    let mut c = Conn::open(addr, auth).await?;
    let base = format!("/remote.php/dav/files/{USER}/bench/");
    let (status, body) = c.call("MKCOL", &base, &[], Bytes::new()).await?;
    ensure!(status == 201, "MKCOL {base}: {status} {}", lossy(&body));
    let file = Bytes::from(vec![b'x'; SMALL]);
    for i in 0..FOLDER {
        let path = format!("{base}{}", file_name(i));
        let (status, body) = c.call("PUT", &path, &[], file.clone()).await?;
        ensure!(
            status == 201 || status == 204,
            "PUT {path}: {status} {}",
            lossy(&body)
        );
    }
    let path = format!("{base}{}", file_name(FOLDER - 1));
    let (status, body) = c.call("GET", &path, &[], Bytes::new()).await?;
    ensure!(
        status == 200 && body.len() == SMALL,
        "GET {path}: {status}, {} bytes",
        body.len()
    );
    let (status, body) = c
        .call(
            "PROPFIND",
            &base,
            &[("depth", "1"), ("content-type", "application/xml")],
            Bytes::from_static(PROPFIND_BODY.as_bytes()),
        )
        .await?;
    ensure!(status == 207, "PROPFIND {base}: {status} {}", lossy(&body));
    let responses = count_closing(&String::from_utf8_lossy(&body), "response");
    ensure!(
        responses == FOLDER + 1,
        "PROPFIND {base}: {responses} responses, expected {}",
        FOLDER + 1
    );
    Ok(())
}

/// The i-th file of the folder; the GET script builds the same names.
fn file_name(i: usize) -> String {
    format!("f{i:02}")
}

fn lossy(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()
}

/// Closing tags `</prefix:local>` (any prefix or none).
fn count_closing(xml: &str, local: &str) -> usize {
    xml.split("</")
        .skip(1)
        .filter_map(|rest| rest.split_once('>'))
        .filter(|(name, _)| name.trim().rsplit(':').next() == Some(local))
        .count()
}

// ---------------------------------------------------------------------------------------------
// Load with wrk.

/// Lua shared by both scripts: a `done()` printing `RESULT k=v …` for [`parse_result`].
const LUA_DONE: &str = r#"
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p99_us=%d errors=%d\n",
    summary.requests, summary.duration, latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
"#;

/// GET cycling over the folder's files.
fn get_script(auth: &str, base: &str) -> String {
    format!(
        r#"wrk.method = "GET"
wrk.headers["Authorization"] = "{auth}"
counter = 0
function request()
  local path = string.format("{base}f%02d", counter % {FOLDER})
  counter = counter + 1
  return wrk.format(nil, path)
end
{LUA_DONE}"#
    )
}

/// PROPFIND Depth 1 on the folder (the URL names it).
fn propfind_script(auth: &str) -> String {
    format!(
        r#"wrk.method = "PROPFIND"
wrk.headers["Authorization"] = "{auth}"
wrk.headers["Depth"] = "1"
wrk.headers["Content-Type"] = "application/xml; charset=utf-8"
wrk.body = [[{PROPFIND_BODY}]]
{LUA_DONE}"#
    )
}

fn write_script(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("{name}.lua"));
    fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// One wrk run of `d`.
fn wrk_run(script: &Path, url: &str, d: Duration) -> anyhow::Result<Sample> {
    let out = crate::wrk::run(script, url, d)?;
    parse_result(&out).with_context(|| format!("wrk {url}:\n{}", out.text))
}

fn parse_result(out: &crate::wrk::Output) -> anyhow::Result<Sample> {
    let (requests, failed) = (out.field("requests")?, out.field("errors")?);
    Ok(Sample {
        requests,
        failed,
        rate: requests.saturating_sub(failed) as f64 / out.elapsed()?.as_secs_f64(),
        p99: Duration::from_micros(out.field("p99_us")?),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    /// Which endpoint each process serves, and which ones its static registry lists, read back
    /// from the generated YAML by line (the shapes written are fixed).
    fn parse(yaml: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
        let (mut served, mut listed) = (BTreeSet::new(), BTreeMap::new());
        let mut section = "";
        for line in yaml.lines() {
            if !line.starts_with(' ') {
                section = line.trim_end_matches(':');
            }
            let t = line.trim();
            if let Some(v) = t.strip_prefix("endpoint: ") {
                served.insert(format!("{section}={}", v.trim_matches('"')));
            } else if line.starts_with("    ")
                && let Some((k, v)) = t.split_once(": [")
            {
                listed.insert(
                    k.to_owned(),
                    v.trim_end_matches(']').trim_matches('"').into(),
                );
            }
        }
        (served, listed)
    }

    #[test]
    fn every_listed_endpoint_is_served_by_another_process_over_a_socket() {
        for e in [
            Endpoints::unix(Path::new("/tmp/x")).unwrap(),
            Endpoints::tcp().unwrap(),
        ] {
            let configs = grouped_configs(&e, "s3cret");
            assert_eq!(
                configs.each_ref().map(|(n, _)| *n),
                ["proxy", "frontend", "storage-users", "storage-system"]
            );
            let parsed: Vec<_> = configs.iter().map(|(_, y)| parse(y)).collect();
            let all_served: BTreeSet<&String> = parsed.iter().flat_map(|(s, _)| s).collect();
            for ((name, yaml), (_, listed)) in configs.iter().zip(&parsed) {
                assert!(yaml.contains("secret: \"s3cret\""), "{name}: {yaml}");
                assert!(!listed.is_empty() || *name == "storage-system", "{name}");
                for (service, endpoint) in listed {
                    assert!(!endpoint.starts_with("mem://"), "{name}: {service}");
                    assert!(
                        all_served.contains(&format!("{service}={endpoint}")),
                        "{name} lists {service} at {endpoint}, which no process serves"
                    );
                }
            }
        }
    }

    #[test]
    fn long_socket_paths_are_refused() {
        let long = PathBuf::from(format!("/tmp/{}", "d".repeat(100)));
        assert!(Endpoints::unix(&long).is_err());
    }

    #[test]
    fn wrk_results_parse_and_failures_do_not_count() {
        let parse = |text: &str| parse_result(&crate::wrk::parse(text)?);
        let ok =
            parse("x\nRESULT requests=500 duration_us=2000000 p99_us=1500 errors=0\n").unwrap();
        assert_eq!(ok.rate, 250.0);
        assert_eq!(ok.p99, Duration::from_micros(1500));
        let bad = parse("RESULT requests=5 duration_us=1000000 p99_us=1 errors=1").unwrap();
        assert_eq!((bad.rate, bad.failed, bad.requests), (4.0, 1, 5));
        assert!(parse("nothing").is_err());
    }

    #[test]
    fn closing_tags_count_with_any_prefix() {
        let xml = "<d:multistatus><d:response></d:response><response/><D:response>\
                   </D:response></response></d:multistatus>";
        assert_eq!(count_closing(xml, "response"), 3);
    }

    #[test]
    fn medians_and_ratios() {
        let s = |rate, ms| Sample {
            rate,
            p99: Duration::from_millis(ms),
            requests: 0,
            failed: 0,
        };
        let m = median(&[s(3.0, 9), s(1.0, 1), s(2.0, 5)]);
        assert_eq!((m.rate, m.p99), (2.0, Duration::from_millis(5)));
        let line = report_line(
            "GET",
            &SHAPES,
            &[vec![s(1000.0, 2)], vec![s(500.0, 4)], vec![s(250.0, 8)]],
        );
        assert!(line.contains("pod 500 (p99 4.0 ms) 0.50×"), "{line}");
        assert!(line.contains("split 250 (p99 8.0 ms) 0.25×"), "{line}");
        // Without single there is nothing to compare against.
        let line = report_line(
            "GET",
            &[Shape::Pod, Shape::Split],
            &[vec![s(500.0, 4)], vec![s(250.0, 8)]],
        );
        assert!(line.contains("pod 500 (p99 4.0 ms) | split 250"), "{line}");
        assert!(!line.contains('×'), "{line}");
    }

    #[test]
    fn shape_filter() {
        assert_eq!(Shape::selected(None).unwrap(), SHAPES.to_vec());
        assert_eq!(Shape::selected(Some(" ")).unwrap(), SHAPES.to_vec());
        assert_eq!(
            Shape::selected(Some("split, pod")).unwrap(),
            vec![Shape::Pod, Shape::Split]
        );
        assert!(Shape::selected(Some("pods")).is_err());
    }
}
