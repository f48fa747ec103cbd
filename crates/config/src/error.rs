//! Config errors: each displays as one line, so the binary can print `config error: {err}`.

use std::fmt;
use std::path::PathBuf;

use arca_transport::EndpointError;

use crate::SERVICE_NAMES;

/// Where a value came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Default,
    /// The YAML file, by the path as given.
    File(PathBuf),
    /// An environment variable, by name.
    Env(String),
    /// A command-line flag, as the binary names it (e.g. `--services`).
    Flag(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Env(var) => write!(f, "env {var}"),
            Origin::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value (or key) that is not acceptable.
    #[error("{key}: {problem} ({origin})")]
    Invalid {
        /// Full dotted key, e.g. `proxy.http.addr`.
        key: String,
        problem: Problem,
        origin: Origin,
    },
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: YAML syntax error at line {line} column {column}: {message}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// Parsable YAML that is still not a file of settings (several documents, a bare scalar…).
    #[error("{}: not a map of settings: {message}", path.display())]
    NotSettings { path: PathBuf, message: String },
    /// config-rs refused to merge the layers; our sources cannot produce that, so it is a bug.
    #[error("cannot merge configuration layers: {0}")]
    Merge(String),
}

/// What is wrong with a value. Values are shown as written: strings quoted, numbers bare.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("unknown key")]
    UnknownKey,
    /// config-rs would read a top-level YAML key `a.b` as the path a → b; we refuse the surprise.
    #[error("write nested YAML keys, not dotted ones")]
    DottedKey,
    #[error("{0} is not a key like proxy.http.addr")]
    BadKey(String),
    #[error("{0} is not KEY=VALUE")]
    NotAssignment(String),
    #[error("expected {expected}, found {found}")]
    WrongType {
        expected: &'static str,
        found: &'static str,
    },
    #[error("{0} is not a host:port")]
    NotHostPort(String),
    #[error("{0} is not a duration like 30s or 500ms")]
    NotDuration(String),
    #[error("{value} is {error}")]
    NotEndpoint { value: String, error: EndpointError },
    #[error("{0} is not a URL like http://HOST:PORT or https://HOST:PORT")]
    NotUrl(String),
    #[error("{0} is not a database URL (postgres://USER:PASSWORD@HOST:PORT/DB or sqlite://PATH)")]
    NotDatabaseUrl(String),
    #[error("{0} is not a PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DB)")]
    NotPostgresUrl(String),
    #[error("{0} is not a service (one of {list})", list = SERVICE_NAMES.join(", "))]
    NotService(String),
    #[error("{0} is listed twice")]
    Duplicate(String),
    #[error("{value} is not one of {allowed}")]
    NotOneOf {
        value: String,
        allowed: &'static str,
    },
    #[error("must not be empty")]
    Empty,
    /// A key another one requires, e.g. the bucket when `blobs.kind` is s3; blamed on the
    /// origin of the requiring value.
    #[error("must not be empty when {0}")]
    EmptyWhen(&'static str),
    /// A key given where it has no effect, e.g. a bucket while `blobs.kind` is local.
    #[error("is only used when {0}")]
    Unused(&'static str),
    /// One of a pair given without the other.
    #[error("must be set together with {0}")]
    Unpaired(&'static str),
    #[error("{0} is not a size like 10GiB, 500MB or 1048576 (whole bytes)")]
    NotSize(String),
    #[error("{0} is too large (at most 8 EiB)")]
    TooLarge(String),
    /// A value past the bound the key allows, e.g. a body size kept in memory.
    #[error("{0} is above {1}")]
    Above(String, &'static str),
    #[error("{0} is not an S3 bucket name (3 to 63 lowercase letters, digits, dots and hyphens)")]
    NotBucket(String),
    #[error("must be longer than 0s")]
    Zero,
    #[error("{0} is not a NATS URL like nats://HOST:PORT (comma-separated for a cluster)")]
    NotNatsUrl(String),
    #[error("{0} is not a NATS bucket name (letters, digits, - and _)")]
    NotKvBucket(String),
    #[error("{0} is not a NATS stream name (letters, digits, - and _)")]
    NotStreamName(String),
    /// A key required by another key's value, e.g. `events.nats.url` with `events.kind: nats`
    /// and no NATS registry to take it from.
    #[error("must be set when {0}")]
    RequiredWhen(&'static str),
    #[error("{0} is shorter than {1}")]
    TooShort(String, &'static str),
    #[error("value is not valid UTF-8")]
    NotUtf8,
}
