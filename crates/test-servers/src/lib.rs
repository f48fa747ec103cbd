//! The external servers arca's tests run against, started privately for the test that needs
//! them: [`Postgres`] (Debian's PostgreSQL binaries, a server of its own per test process or
//! per test directory) and [`Moto`] (moto's S3 server, objects in memory). Dev-only: the store
//! crates' tests and the real-process kit in `tests/` use it, nothing ships with it.
//!
//! These are real servers, not fakes, and a missing one FAILS the test, never skips it: a
//! skipped suite would count as passed. The error says how to fix it — `make deps` installs
//! both (`apt-get install postgresql`; `moto[server]` into the workspace's `.venv`), or
//! `ARCA_TEST_POSTGRES_URL` / `ARCA_MOTO_SERVER` point at what is already there.
//!
//! Entry points: [`postgres_for_tests`] and [`moto_for_tests`] (panic with that advice), or
//! [`Postgres::start`], [`Postgres::start_in`] and [`Moto::start`] (return an [`Error`]).
//! Every server is stopped when its value is dropped; every wait has a bound.

mod moto;
mod postgres;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use moto::{Moto, moto_for_tests};
pub use postgres::{Postgres, postgres_for_tests};

/// Why a server could not be had, or did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A program is not installed; `fix` says how to install it.
    #[error("{what}\n{fix}")]
    Missing { what: String, fix: &'static str },
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    /// A program exited with a failure, or did not finish in time; its output, and the
    /// server's log where there is one.
    #[error("{0}")]
    Failed(String),
    /// The server did not answer within the bound.
    #[error("{what} not ready within {within:?}; its log ends with:\n{log}")]
    NotReady {
        what: String,
        within: Duration,
        log: String,
    },
    #[error("{what}: {error}")]
    Database { what: String, error: sqlx::Error },
}

impl Error {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |error| Error::Io { what, error }
    }
}

/// What `make deps` puts in place; named in every [`Error::Missing`].
const MAKE_DEPS: &str = "`make deps` installs the test servers (Debian's `postgresql`; \
                         `moto[server]` and the other PyPI tools into the workspace's .venv)";

/// `.venv/bin/NAME` of the workspace (`make deps` fills it from PyPI).
pub fn venv_bin(name: &str) -> Result<PathBuf, Error> {
    // This crate is crates/test-servers: the workspace root is two levels up.
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.venv/bin")
        .join(name);
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(Error::Missing {
            what: format!("{} not found", bin.display()),
            fix: MAKE_DEPS,
        })
    }
}

/// A loopback port free when checked, released for the server to bind. Another process may
/// take it in between; the server's start then fails and says so.
fn free_port() -> Result<u16, Error> {
    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(Error::io("finding a free loopback port"))
}

/// The last `n` lines of a log file (empty if it cannot be read), for error messages.
fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
