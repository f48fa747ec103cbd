//! A private PostgreSQL for tests, shared by the tests of arca-store-files and arca-store-records
//! (each includes this file by `#[path]`, so it lives once, with the core).
//!
//! `PgServer::start` runs the Debian `postgresql` binaries (`/usr/lib/postgresql/*/bin`):
//! `initdb` into a data directory of its own under /tmp, then `pg_ctl start` with a socket
//! directory of its own and a free loopback port, and `pg_ctl stop` on drop. PostgreSQL refuses
//! to run as root, so under root both run as the `postgres` user (`runuser`), which then owns the
//! directory. Durability is switched off (fsync, synchronous_commit, full_page_writes): a test
//! server never survives a crash anyway, and it makes CREATE DATABASE per test cheap.
//!
//! [`postgres_for_tests`] is what tests call: `ARCA_TEST_POSTGRES_URL` (an existing server whose
//! user may CREATE DATABASE) wins; otherwise a private server is started; missing binaries FAIL
//! the test (a skipped suite would count as passed).

use std::path::{Path, PathBuf};
use std::process::Command;

use sqlx::AnyConnection;
use sqlx::Connection;

pub struct PgServer {
    /// Admin URL (database `postgres`).
    pub url: String,
    /// Set for a private server; `None` when `ARCA_TEST_POSTGRES_URL` points at an external one.
    private: Option<Private>,
}

struct Private {
    bin: PathBuf,
    data: PathBuf,
    as_postgres: bool,
    _dir: tempfile::TempDir,
}

/// The PostgreSQL to test against.
///
/// Panics (fails the test) when no server can be had, saying why and how to fix it.
pub fn postgres_for_tests() -> PgServer {
    if let Ok(url) = std::env::var("ARCA_TEST_POSTGRES_URL")
        && !url.is_empty()
    {
        return PgServer { url, private: None };
    }
    PgServer::start().unwrap_or_else(|why| {
        panic!(
            "\n\nPostgreSQL storage tests cannot run: {why}\n\
             Install the server (`apt-get install -y postgresql`, as `make deps` does), or point\n\
             ARCA_TEST_POSTGRES_URL at a server.\n"
        )
    })
}

impl PgServer {
    pub fn start() -> Result<Self, String> {
        let bin = find_bin_dir()?;
        let as_postgres = unsafe { libc::geteuid() } == 0;
        let dir = tempfile::Builder::new()
            .prefix("arca-pg-")
            .tempdir_in("/tmp")
            .map_err(|e| format!("temp dir: {e}"))?;
        let data = dir.path().join("data");
        let sock = dir.path().join("sock");
        std::fs::create_dir(&sock).map_err(|e| format!("socket dir: {e}"))?;
        if as_postgres {
            let (uid, gid) = postgres_user()?;
            for p in [dir.path(), sock.as_path()] {
                std::os::unix::fs::chown(p, Some(uid), Some(gid))
                    .map_err(|e| format!("chown {}: {e}", p.display()))?;
            }
        }
        let private = Private {
            bin,
            data,
            as_postgres,
            _dir: dir,
        };
        let data_arg = private.data.to_string_lossy().into_owned();
        private.run(
            "initdb",
            &[
                "-D",
                &data_arg,
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        let port = free_port()?;
        let log = private
            .data
            .parent()
            .map(|p| p.join("server.log"))
            .ok_or("no log dir")?;
        let opts = format!(
            "-k {} -p {port} -h 127.0.0.1 -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200",
            sock.display()
        );
        if let Err(e) = private.run(
            "pg_ctl",
            &[
                "-D",
                &data_arg,
                "-l",
                &log.to_string_lossy(),
                "-w",
                "-t",
                "60",
                "-o",
                &opts,
                "start",
            ],
        ) {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("{e}\nserver log:\n{log}"));
        }
        Ok(PgServer {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            private: Some(private),
        })
    }

    /// Creates an empty database and returns its URL.
    pub async fn fresh_database(&self) -> String {
        sqlx::any::install_default_drivers();
        let name = format!("arca_test_{:016x}", rand::random::<u64>());
        let mut admin = AnyConnection::connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.url));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let _ = admin.close().await;
        with_database(&self.url, &name)
    }

    /// Drops a database made by [`PgServer::fresh_database`] (best effort).
    pub async fn drop_database(&self, url: &str) {
        let Some(name) = url
            .split('?')
            .next()
            .and_then(|u| u.rsplit('/').next())
            .filter(|n| n.starts_with("arca_test_"))
        else {
            return;
        };
        if let Ok(mut admin) = AnyConnection::connect(&self.url).await {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await;
            let _ = admin.close().await;
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(p) = &self.private {
            let data = p.data.to_string_lossy().into_owned();
            if let Err(e) = p.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]) {
                eprintln!("stopping the test PostgreSQL: {e}");
            }
        }
    }
}

impl Private {
    fn run(&self, prog: &str, args: &[&str]) -> Result<(), String> {
        let exe = self.bin.join(prog);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        // pg_ctl's child inherits the test's stdio otherwise, and a test harness capturing
        // output waits for it to close.
        let out = cmd
            .args(args)
            .current_dir("/tmp")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("running {}: {e}", exe.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} {} failed ({}): {}{}",
                exe.display(),
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` holding initdb and pg_ctl.
fn find_bin_dir() -> Result<PathBuf, String> {
    let root = Path::new("/usr/lib/postgresql");
    let entries = std::fs::read_dir(root)
        .map_err(|e| format!("no PostgreSQL server binaries ({}: {e})", root.display()))?;
    let mut best: Option<(u32, PathBuf)> = None;
    for entry in entries.flatten() {
        let bin = entry.path().join("bin");
        let version = entry
            .file_name()
            .to_string_lossy()
            .split('.')
            .next()
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0);
        if bin.join("initdb").is_file()
            && bin.join("pg_ctl").is_file()
            && best.as_ref().is_none_or(|(v, _)| version > *v)
        {
            best = Some((version, bin));
        }
    }
    best.map(|(_, bin)| bin).ok_or_else(|| {
        format!(
            "no PostgreSQL server binaries (no initdb/pg_ctl under {}/*/bin)",
            root.display()
        )
    })
}

fn postgres_user() -> Result<(u32, u32), String> {
    let name = std::ffi::CString::new("postgres").map_err(|e| e.to_string())?;
    // SAFETY: getpwnam returns a pointer to static storage or null; read before any other call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err("running as root but there is no `postgres` user to run the server as".into());
    }
    // SAFETY: non-null result of getpwnam.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Ok((uid, gid))
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("free port: {e}"))
}

fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    // postgres://user@host:port[/db]: replace or add the path after the authority.
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let base = match base[after_scheme..].find('/') {
        Some(i) => &base[..after_scheme + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}
