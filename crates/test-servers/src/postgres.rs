//! A private PostgreSQL: Debian's binaries (the newest `/usr/lib/postgresql/*/bin`), `initdb`
//! into `DIR/data`, `pg_ctl start` on a free loopback port with its socket in `DIR/sock` and its
//! log in `DIR/server.log`, `pg_ctl stop -m immediate` on drop.
//!
//! PostgreSQL refuses to run as root, so under root both run as the `postgres` user
//! (`runuser`), which then owns `DIR`. Durability is off (`initdb --no-sync`, fsync,
//! synchronous_commit, full_page_writes): a test server never outlives a crash anyway, and it
//! makes a CREATE DATABASE per test cheap. `max_connections=200`: tests open pools of several
//! stores at once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sqlx::{Connection, PgConnection};

use crate::{Error, free_port};

/// `pg_ctl start -w -t` and `stop -w -t`: a server that takes longer is broken.
const PG_CTL_SECONDS: &str = "60";
/// Each initdb or pg_ctl run: initdb writes a few MB without fsync, pg_ctl gives up after
/// PG_CTL_SECONDS itself; two minutes means a stuck machine.
const TOOL_DEADLINE: Duration = Duration::from_secs(120);
/// Connecting and CREATE/DROP DATABASE on the admin database.
const ADMIN_DEADLINE: Duration = Duration::from_secs(60);
/// Where the tools run: the `postgres` user may not be able to enter the test's cwd.
const TOOL_CWD: &str = "/tmp";
const INSTALL: &str = "Install the server (`apt-get install -y postgresql`, as `make deps` does), \
                       or point ARCA_TEST_POSTGRES_URL at a server whose user may CREATE DATABASE.";
/// The prefix of [`Postgres::fresh_database`]'s names, the only ones it will drop.
const PREFIX: &str = "arca_test_";

/// The PostgreSQL to test against: `ARCA_TEST_POSTGRES_URL` (an existing server whose user
/// may CREATE DATABASE) if set, else a private server in a temp dir of its own.
///
/// Panics (fails the test) when no server can be had, saying why and how to fix it.
pub async fn postgres_for_tests() -> Postgres {
    if let Ok(url) = std::env::var("ARCA_TEST_POSTGRES_URL")
        && !url.is_empty()
    {
        return Postgres::external(url);
    }
    Postgres::start().await.unwrap_or_else(|why| {
        panic!("\n\nPostgreSQL tests cannot run: {why}\n");
    })
}

/// A PostgreSQL server: private (stopped on drop) or external (left alone).
pub struct Postgres {
    /// `postgres://postgres@127.0.0.1:PORT/postgres` for a private server: the superuser on
    /// the default database, trusted on loopback.
    url: String,
    /// `None` for an external server; stops the private one when dropped.
    _private: Option<Private>,
}

struct Private {
    bin: PathBuf,
    data: PathBuf,
    as_postgres: bool,
    /// The directory [`Postgres::start`] made; removed after the server stopped.
    _temp: Option<tempfile::TempDir>,
}

impl Postgres {
    /// An existing server at `url` (its admin database), never stopped by this value.
    pub fn external(url: impl Into<String>) -> Postgres {
        Postgres {
            url: url.into(),
            _private: None,
        }
    }

    /// Starts a private server in a temp dir of its own under /tmp (any user can enter it).
    pub async fn start() -> Result<Postgres, Error> {
        let temp = tempfile::Builder::new()
            .prefix("arca-pg-")
            .tempdir_in(TOOL_CWD)
            .map_err(Error::io("making a temp dir for PostgreSQL"))?;
        let root = temp.path().to_owned();
        Self::start_at(&root, Some(temp)).await
    }

    /// Starts a private server in `dir` (made if missing; its parents must be enterable by
    /// the `postgres` user when running as root). Drop it before removing `dir`.
    pub async fn start_in(dir: &Path) -> Result<Postgres, Error> {
        Self::start_at(dir, None).await
    }

    async fn start_at(root: &Path, temp: Option<tempfile::TempDir>) -> Result<Postgres, Error> {
        let bin = bin_dir()?;
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        let as_postgres = unsafe { libc::geteuid() } == 0;
        let sock = root.join("sock");
        std::fs::create_dir_all(&sock)
            .map_err(Error::io(format!("creating {}", sock.display())))?;
        if as_postgres {
            let (uid, gid) = postgres_user()?;
            for p in [root, &sock] {
                std::os::unix::fs::chown(p, Some(uid), Some(gid))
                    .map_err(Error::io(format!("chown {} to postgres", p.display())))?;
            }
        }
        let port = free_port()?;
        // Made before anything runs: whatever fails below, dropping it stops a server that
        // did start (see its Drop).
        let private = Private {
            bin,
            data: root.join("data"),
            as_postgres,
            _temp: temp,
        };
        let data = private.data.to_string_lossy().into_owned();
        let initdb = [
            "-D",
            &data,
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ];
        private.run("initdb", &initdb, TOOL_DEADLINE).await?;
        let log = root.join("server.log");
        let opts = format!(
            "-k {} -p {port} -h 127.0.0.1 -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200",
            sock.display()
        );
        let log_arg = log.to_string_lossy();
        let start = [
            "-D",
            &data,
            "-l",
            &log_arg,
            "-w",
            "-t",
            PG_CTL_SECONDS,
            "-o",
            &opts,
            "start",
        ];
        if let Err(e) = private.run("pg_ctl", &start, TOOL_DEADLINE).await {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(Error::Failed(format!("{e}\nserver log:\n{log}")));
        }
        Ok(Postgres {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            _private: Some(private),
        })
    }

    /// The admin URL (database `postgres`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `pg_ctl restart -m MODE` of a private server (`fast`: connections are terminated, as
    /// an upgrade or a managed failover does), back to accepting connections when it returns.
    pub async fn restart(&self, mode: &str) -> Result<(), Error> {
        let private = self.private()?;
        let data = private.data.to_string_lossy().into_owned();
        // The new server writes to the log, not to pg_ctl's pipes (which `run` reads to
        // their end: a server holding them would hold it up forever).
        let log = private.log().to_string_lossy().into_owned();
        let args = [
            "-D",
            &data,
            "-l",
            &log,
            "-m",
            mode,
            "-w",
            "-t",
            PG_CTL_SECONDS,
            "restart",
        ];
        private.run("pg_ctl", &args, TOOL_DEADLINE).await
    }

    /// `pg_ctl stop -m MODE` of a private server (`immediate`: a crash, as far as clients
    /// see); [`Postgres::start_again`] brings it back.
    pub async fn stop(&self, mode: &str) -> Result<(), Error> {
        let private = self.private()?;
        let data = private.data.to_string_lossy().into_owned();
        let args = ["-D", &data, "-m", mode, "-w", "-t", PG_CTL_SECONDS, "stop"];
        private.run("pg_ctl", &args, TOOL_DEADLINE).await
    }

    /// Starts a private server [`Postgres::stop`] stopped, with the options it first started
    /// with (pg_ctl keeps them in the data directory).
    pub async fn start_again(&self) -> Result<(), Error> {
        let private = self.private()?;
        let data = private.data.to_string_lossy().into_owned();
        let log = private.log().to_string_lossy().into_owned();
        let opts = std::fs::read_to_string(private.data.join("postmaster.opts"))
            .map_err(Error::io("reading postmaster.opts"))?;
        // `BIN/postgres "-D" "DATA" "-k" "SOCK" …`: the options after the program and its -D.
        let opts = opts
            .split_once(" \"-D\" ")
            .and_then(|(_, rest)| rest.split_once("\" ").map(|(_, after)| after.to_owned()))
            .unwrap_or_default()
            .replace('"', "");
        let args = [
            "-D",
            &data,
            "-l",
            &log,
            "-w",
            "-t",
            PG_CTL_SECONDS,
            "-o",
            opts.trim(),
            "start",
        ];
        private.run("pg_ctl", &args, TOOL_DEADLINE).await
    }

    fn private(&self) -> Result<&Private, Error> {
        self._private
            .as_ref()
            .ok_or_else(|| Error::Failed("an external PostgreSQL is not restarted by tests".into()))
    }

    /// Creates an empty database with a name of its own and returns its URL.
    pub async fn fresh_database(&self) -> Result<String, Error> {
        let name = format!("{PREFIX}{:016x}", rand::random::<u64>());
        self.admin(&format!("CREATE DATABASE {name}")).await?;
        Ok(with_database(&self.url, &name))
    }

    /// [`Postgres::fresh_database`], with commits durable before they are acknowledged
    /// (`synchronous_commit = on`: an immediate stop, a crash to clients, then loses no
    /// acknowledged commit, as a production server would not).
    pub async fn fresh_durable_database(&self) -> Result<String, Error> {
        let url = self.fresh_database().await?;
        let name = database_name(&url).unwrap_or_default();
        self.admin(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = on"
        ))
        .await?;
        Ok(url)
    }

    /// Starts a new WAL segment and checkpoints into it (`pg_switch_wal()`, `CHECKPOINT`): the
    /// segment's 16 MiB are written now and the old ones recycled as the next, so a test that
    /// fills the disk next meets tables and indexes that cannot grow (SQLSTATE 53100) before a
    /// WAL that cannot (which stops the server).
    pub async fn switch_wal(&self) -> Result<(), Error> {
        self.admin("SELECT pg_switch_wal(); CHECKPOINT").await
    }

    /// Drops a database made by [`Postgres::fresh_database`], closing its connections.
    pub async fn drop_database(&self, url: &str) -> Result<(), Error> {
        let name = database_name(url)
            .filter(|n| n.starts_with(PREFIX))
            .ok_or_else(|| Error::Failed(format!("{url}: not made by fresh_database")))?;
        self.admin(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
    }

    /// Runs one statement on the admin database.
    async fn admin(&self, sql: &str) -> Result<(), Error> {
        let failed = |error| Error::Database {
            what: sql.to_owned(),
            error,
        };
        let exchange = async {
            let mut admin = PgConnection::connect(&self.url).await.map_err(&failed)?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                .execute(&mut admin)
                .await
                .map_err(&failed)?;
            // The statement is done; a failed goodbye changes nothing.
            let _ = admin.close().await;
            Ok(())
        };
        tokio::time::timeout(ADMIN_DEADLINE, exchange)
            .await
            .map_err(|_| {
                Error::Failed(format!(
                    "{sql} on {}: no answer within {ADMIN_DEADLINE:?}",
                    self.url
                ))
            })?
    }
}

/// Stops the server (before `_temp` is removed: fields drop after this).
impl Drop for Private {
    fn drop(&mut self) {
        // No pid file: the server never started (or already stopped); nothing to stop.
        if !self.data.join("postmaster.pid").exists() {
            return;
        }
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "-t", PG_CTL_SECONDS, "stop"]);
        match cmd.output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "stopping the test PostgreSQL in {} failed ({}): {}",
                self.data.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("stopping the test PostgreSQL: {e}"),
        }
    }
}

impl Private {
    /// The server's log, beside its data directory (`DIR/server.log`).
    fn log(&self) -> PathBuf {
        self.data.parent().map_or_else(
            || self.data.join("server.log"),
            |root| root.join("server.log"),
        )
    }

    /// `BIN/prog`, as `postgres` under root, stdin closed, in [`TOOL_CWD`].
    fn command(&self, prog: &str) -> Command {
        let exe = self.bin.join(prog);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        cmd.current_dir(TOOL_CWD).stdin(Stdio::null());
        cmd
    }

    /// `BIN/prog ARGS…` to completion within `within`; its output on failure. The server that
    /// `pg_ctl start` leaves running writes to its `-l` log, not to these pipes, so they close
    /// when pg_ctl exits.
    async fn run(&self, prog: &str, args: &[&str], within: Duration) -> Result<(), Error> {
        let mut cmd = tokio::process::Command::from(self.command(prog));
        cmd.args(args).kill_on_drop(true);
        let shown = format!("{} {}", self.bin.join(prog).display(), args.join(" "));
        let out = tokio::time::timeout(within, cmd.output())
            .await
            .map_err(|_| Error::Failed(format!("{shown}: not finished within {within:?}")))?
            .map_err(Error::io(format!("running {shown}")))?;
        if !out.status.success() {
            return Err(Error::Failed(format!(
                "{shown} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` holding initdb and pg_ctl.
fn bin_dir() -> Result<PathBuf, Error> {
    let root = Path::new("/usr/lib/postgresql");
    let missing = || Error::Missing {
        what: format!(
            "no PostgreSQL server binaries (no initdb/pg_ctl under {}/*/bin)",
            root.display()
        ),
        fix: INSTALL,
    };
    let entries = std::fs::read_dir(root).map_err(|_| missing())?;
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
    best.map(|(_, bin)| bin).ok_or_else(missing)
}

/// The uid and gid of the `postgres` user (the Debian package makes it).
fn postgres_user() -> Result<(u32, u32), Error> {
    let name = c"postgres";
    // SAFETY: getpwnam returns null or a pointer to static storage, read at once below.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(Error::Missing {
            what: "running as root but there is no `postgres` user to run PostgreSQL as".into(),
            fix: INSTALL,
        });
    }
    // SAFETY: a non-null result of getpwnam, read before any other libc call.
    Ok(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// `url` with its database (the path after the authority) replaced or added.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
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

/// The database of a `postgres://` URL.
fn database_name(url: &str) -> Option<&str> {
    let base = url.split('?').next()?;
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let slash = base[after_scheme..].find('/')?;
    Some(&base[after_scheme + slash + 1..]).filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_replaced_or_added_keeping_the_query() {
        let cases = [
            ("postgres://u@h:1/postgres", "postgres://u@h:1/db"),
            ("postgres://u@h:1", "postgres://u@h:1/db"),
            (
                "postgres://u@h:1/x?sslmode=disable",
                "postgres://u@h:1/db?sslmode=disable",
            ),
        ];
        for (url, want) in cases {
            assert_eq!(with_database(url, "db"), want, "{url}");
            assert_eq!(database_name(want), Some("db"), "{want}");
        }
        assert_eq!(database_name("postgres://u@h:1"), None);
        assert_eq!(database_name("postgres://u@h:1/?a=b"), None);
    }
}
