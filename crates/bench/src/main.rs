//! arca-bench: measures the two costs arca was built to cut, and prints each number beside the
//! thing it is meant to beat.
//!
//! - `transport`: one unary gRPC call (`arca.v1.Probe/Check` on a trivial implementation) through
//!   the real arca transport — [`arca_transport::bind`], [`arca_transport::serve`],
//!   [`arca_transport::Clients`] — over `mem://`, `unix://` and `tcp://`, one caller at a time
//!   and with 16 concurrent callers. Services of one process talk over `mem://`, so its cost
//!   relative to a socket is the whole argument for hosting them together.
//! - `process`: the real `arca` binary (`target/release/arca`, next to this one) on built-in
//!   defaults: time until `/readyz` answers 200, idle RSS, listening TCP ports, and time from
//!   SIGTERM to exit — printed beside what oCIS 7 measured on the same machine.
//! - `files`: WebDAV through the same binary — 4 KiB PUT and GET at 16 connections, PROPFIND
//!   Depth 1 on 1,000 entries, a 512 MiB PUT and GET, RSS growth during 2 GiB transfers — beside
//!   Apache httpd (mod_dav) and nginx (dav_ext) started in the same run, with arca/peer ratios.
//!   It installs what it drives (`wrk`, `apache2`, `nginx-extras`) with apt-get when missing.
//! - `auth`: 4 KiB GETs through the same binary with HTTP Basic and with an OIDC Bearer token
//!   from a small issuer started in the run, side by side, with the Bearer/Basic ratio.
//! - `logins`: 10,000 first logins at once (OIDC Bearer tokens of new users) through the same
//!   binary: wall time, p50/p99, database work per login.
//! - `split`: the same WebDAV workload (4 KiB GET, PROPFIND Depth 1 on a small folder, 16
//!   connections) on three deployments of that binary started side by side — one process
//!   (`mem://`), one pod of four processes over Unix sockets, four processes over TCP — with
//!   pod/single and split/single ratios: what each split costs.
//! - `undo`: the trash and versions through the same binary: DELETE of a 100,000-file folder
//!   and its bulk restore, PROPFIND of a 10,000-item trash and of 1,000 versions, and the 4 KiB
//!   overwrite rate with versions on as a ratio of versions off.
//! - `search`: the search service over 100,000 text files: the first index (files/s), name
//!   queries one at a time (p50/p99), the time from a PUT to the file being findable, and the
//!   process's memory with the index full beside it without search.
//! - `scale`: PUT, GET, churn, PROPFIND and MOVE through the same binary in a home of 0, 100,000
//!   and 1,000,000 files, as ratios to the empty space, and the memory with the million and 200
//!   idle keep-alive clients.
//! - `soak`: config/grouped-nats (PostgreSQL, S3, NATS, two storage-users) under 17
//!   keep-alive sync clients while every process is restarted, killed or replaced and NATS is
//!   down: requests, failures and p99 per phase (target: 0 failed in ≥ 100,000).
//! - `thumbnails`: previews per second of 4-megapixel JPEGs through the same binary with two
//!   render workers, each a render from the source, then the same previews from the cache.
//! - `web`: the web app in a real browser (Chromium driven by crates/bench/web.py): bytes of
//!   the first load, time to the first file list, time to open a folder of 10,000 entries, and
//!   a 1 GiB upload through the page as a ratio of the same file by `curl -T`.
//!
//! Numbers are printed side by side rather than asserted: an absolute µs or ms figure depends on
//! the machine and its load, a ratio measured in the same run does much less. Each target from
//! the issue gets a `target met:` or `TARGET MISSED:` line; the exit code is non-zero only when
//! something could not be run at all.
//!
//! Usage: `arca-bench [all|transport|process|files|auth|logins|split|undo|search|scale|soak|thumbnails|web]` (default
//! `all`), in a release
//! build.

mod auth;
mod files;
mod logins;
mod process;
mod scale;
mod search;
mod soak;
mod split;
mod thumbnails;
mod transport;
mod undo;
mod web;
mod wrk;

use std::process::ExitCode;

const USAGE: &str =
    "usage: arca-bench [all|transport|process|files|auth|logins|split|undo|search|scale|soak|thumbnails|web]
  transport  unary gRPC round trip over mem://, unix:// and tcp:// (sequential, 16 concurrent)
  process    target/release/arca: ready time, idle RSS, listening ports, SIGTERM-to-exit
  files      WebDAV PUT/GET/PROPFIND/512 MiB/RSS through target/release/arca vs Apache, nginx
  auth       4 KiB GET with Basic vs an OIDC Bearer token through target/release/arca
  logins     10,000 first OIDC logins at once: wall time, p99, database work per login
  split      WebDAV GET/PROPFIND on one process vs a pod (unix sockets) vs split (tcp)
  undo       trash and versions: folder DELETE/restore, trash and versions PROPFIND, overwrite cost
  search     100,000 files: first index files/s, name query p50/p99, PUT to findable, memory
  scale      PUT/GET/churn/PROPFIND/MOVE in a home of 0, 100,000, 1,000,000 files; RSS
  soak       config/grouped-nats through restarts, kills and a NATS outage: failures, p99
  thumbnails previews/s of 4 MP JPEGs with 2 render workers: rendered, then cached
  web        the web app in Chromium: first load bytes, first list, 10,000-entry folder, upload
  all        all of them, in this order (the default)";

/// The sections in the order `all` runs them: `files` installs wrk, which `auth` and `split`
/// use.
const SECTIONS: [&str; 12] = [
    "transport",
    "process",
    "files",
    "auth",
    "logins",
    "split",
    "undo",
    "search",
    "scale",
    "soak",
    "thumbnails",
    "web",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let selected: Vec<&str> = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] | ["all"] => SECTIONS.to_vec(),
        [one] if SECTIONS.contains(&one) => vec![one],
        ["-h" | "--help" | "help"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if cfg!(debug_assertions) {
        println!("note: debug build; run with --release for meaningful numbers");
    }
    print_machine();

    let mut targets = Targets::default();
    let mut failed = false;
    for section in selected {
        let result = match section {
            "transport" => transport::run(&mut targets),
            "process" => process::run(&mut targets),
            "files" => files::run(&mut targets),
            "auth" => auth::run(&mut targets),
            "logins" => logins::run(&mut targets),
            "split" => split::run(&mut targets),
            "undo" => undo::run(&mut targets),
            "search" => search::run(&mut targets),
            "scale" => scale::run(&mut targets),
            "soak" => soak::run(&mut targets),
            "thumbnails" => thumbnails::run(&mut targets),
            "web" => web::run(&mut targets),
            other => Err(anyhow::anyhow!("no section {other}")),
        };
        // A section that cannot run is reported and the next one still runs: one missing
        // binary should not hide the transport numbers.
        if let Err(e) = result {
            eprintln!("arca-bench: {section}: {e:#}");
            failed = true;
        }
    }

    println!();
    match targets.missed {
        0 => println!("summary: all {} targets met", targets.checked),
        n => println!("summary: {n} of {} targets missed", targets.checked),
    }
    if failed {
        println!("summary: some measurements could not be run (see errors above)");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Cores and load average, so a reader can tell a slow machine from a slow arca: with a load
/// above the core count, every time here is inflated by waiting for a CPU.
fn print_machine() {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load1: f64 = load
        .split_whitespace()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(0.0);
    println!("machine: {cores} cores, load average {load1:.2} (1 min)");
    if load1 > cores as f64 * 0.75 {
        println!("note: the machine is busy; times below are inflated by CPU contention");
    }
}

/// Counts targets and prints one verdict line per target.
#[derive(Default)]
pub(crate) struct Targets {
    checked: usize,
    missed: usize,
}

impl Targets {
    /// `what` states the measurement and the target, e.g. "mem sequential 2.4 µs/call ≤ 5 µs".
    pub(crate) fn check(&mut self, met: bool, what: &str) {
        self.checked += 1;
        if met {
            println!("target met:    {what}");
        } else {
            self.missed += 1;
            println!("TARGET MISSED: {what}");
        }
    }
}

/// A directory of our own under the system temp dir, removed when dropped.
pub(crate) struct Scratch {
    pub(crate) path: std::path::PathBuf,
}

impl Scratch {
    pub(crate) fn new(purpose: &str) -> std::io::Result<Self> {
        let path =
            std::env::temp_dir().join(format!("arca-bench-{}-{purpose}", std::process::id()));
        // A leftover from an earlier run with the same pid is ours to replace.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(Self { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
