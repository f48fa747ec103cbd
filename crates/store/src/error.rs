//! The one error type of the stores. It is mapped to gRPC/HTTP codes in one place (`status`);
//! the variant docs say which WebDAV answer each usually becomes.

use std::fmt;
use std::str::FromStr;

/// A boxed error from the caller's body stream.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A checksum algorithm a client may name (`OC-Checksum: SHA1:...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChecksumAlgo {
    Sha1,
    Md5,
    Adler32,
}

impl ChecksumAlgo {
    /// The upper-case name oCIS uses in `oc:checksums` and `OC-Checksum`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChecksumAlgo::Sha1 => "SHA1",
            ChecksumAlgo::Md5 => "MD5",
            ChecksumAlgo::Adler32 => "ADLER32",
        }
    }
}

impl fmt::Display for ChecksumAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChecksumAlgo {
    type Err = ();

    /// Case-insensitive: clients send `SHA1`, capabilities say `sha1`.
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.to_ascii_lowercase().as_str() {
            "sha1" | "sha-1" => Ok(ChecksumAlgo::Sha1),
            "md5" => Ok(ChecksumAlgo::Md5),
            "adler32" | "adler-32" => Ok(ChecksumAlgo::Adler32),
            _ => Err(()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The space, node or path does not exist (404).
    #[error("not found")]
    NotFound,
    /// The target name is taken (MKCOL: 405; COPY/MOVE without overwrite: 412).
    #[error("already exists")]
    AlreadyExists,
    /// The parent of the target does not exist (409).
    #[error("conflict: the parent does not exist")]
    Conflict,
    /// An `if_match` / `if_none_match_any` condition does not hold (412).
    #[error("precondition failed")]
    PreconditionFailed,
    /// The write would take the space over its quota (507).
    #[error("quota exceeded")]
    QuotaExceeded,
    /// A directory was expected, e.g. the parent of a new node is a file (409).
    #[error("not a directory")]
    NotADirectory,
    /// A file was expected, e.g. a PUT or read on a directory (405 / 409).
    #[error("is a directory")]
    IsADirectory,
    /// A node name or path segment was refused (400).
    #[error("invalid name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    /// The operation is never allowed, e.g. moving a directory into its own subtree, deleting a
    /// space root, moving across spaces (403 / 502 per RFC 4918).
    #[error("forbidden: {0}")]
    Forbidden(&'static str),
    /// The body did not match the checksum the client declared (400).
    #[error("{algo} checksum mismatch: expected {expected}, computed {actual}")]
    ChecksumMismatch {
        algo: ChecksumAlgo,
        expected: String,
        actual: String,
    },
    /// The body was shorter or longer than the declared content length (400).
    #[error("body length mismatch: declared {expected} bytes, received {received}")]
    LengthMismatch { expected: u64, received: u64 },
    /// The requested byte range cannot be satisfied (416).
    #[error("range not satisfiable")]
    InvalidRange,
    /// Reserved for the WebDAV lock manager (423).
    #[error("locked")]
    Locked,
    /// The caller's body stream failed (the client went away, a proxy timed out, ...).
    #[error("reading the body failed: {0}")]
    Body(#[source] BoxError),
    /// The configuration cannot work (bad URL scheme, unusable blob directory, ...).
    #[error("invalid store configuration: {0}")]
    Config(String),
    /// Stored metadata that this code cannot interpret (a bug or a foreign writer).
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    #[error("metadata store: {0}")]
    Db(#[from] sqlx::Error),
    #[error("metadata migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("blob store: {0}")]
    Blob(#[from] object_store::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The database went away while a batch of writes was committing: they may or may not
    /// have landed, and none was acknowledged.
    #[error("the database went away during a commit: {0}")]
    CommitUncertain(String),
}

impl StoreError {
    /// True when the disk (or a filesystem quota) is full somewhere under this error: the
    /// client gets 507 Insufficient Storage, as for a space quota, not a 500.
    pub fn is_storage_full(&self) -> bool {
        // The database's own word for it: SQLite's SQLITE_FULL (13, in the low byte of an
        // extended code: its file or WAL could not grow), PostgreSQL's 53100 disk_full.
        if let StoreError::Db(sqlx::Error::Database(db)) = self
            && db.code().is_some_and(|code| {
                if code.len() == 5 {
                    code == "53100"
                } else {
                    code.parse::<u32>().is_ok_and(|c| c & 0xff == 13)
                }
            })
        {
            return true;
        }
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = next {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && matches!(
                    io.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                )
            {
                return true;
            }
            next = e.source();
        }
        false
    }

    /// True when the metadata database (or a remote blob store) could not be reached or
    /// dropped the connection under the statement: a server restarting, failing over or refusing connections, a pool with
    /// no connection free in time, SQLite busy past its timeout. Nothing of such a statement
    /// took effect (a failed COMMIT aside, which its caller resolves), and the same request
    /// may well succeed a moment later: the caller hears 503, never 500.
    pub fn is_unavailable(&self) -> bool {
        let e = match self {
            StoreError::Db(e) => e,
            StoreError::CommitUncertain(_) => return true,
            // A remote object store that still failed after its client's own retries (5xx,
            // SlowDown, resets, timeouts): out of reach for now. A local disk's failure is
            // not that: it is a fault (or full, which `is_storage_full` tells).
            StoreError::Blob(object_store::Error::Generic { store, .. }) => {
                return *store != "LocalFileSystem";
            }
            _ => return false,
        };
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|code| {
                // PostgreSQL (SQLSTATE, always 5 characters): class 08 (connection
                // exception), 57P01-57P03 (admin or crash shutdown, cannot connect now), 53300
                // (too many connections). SQLite (a number, at most 4 digits): 5 SQLITE_BUSY,
                // 6 SQLITE_LOCKED, and their extended codes (the primary code in the low byte).
                if code.len() == 5 {
                    code.starts_with("08")
                        || matches!(&*code, "57P01" | "57P02" | "57P03" | "53300")
                } else {
                    code.parse::<u32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6))
                }
            }),
            _ => false,
        }
    }

    /// What an [`StoreError::is_unavailable`] error says to the client: which store is away.
    pub fn unavailable_message(&self) -> &'static str {
        match self {
            StoreError::Blob(_) => "the blob store is unavailable; retry shortly",
            _ => "the metadata database is unavailable; retry shortly",
        }
    }

    /// True when a database error is a unique-constraint violation (a lost creation race).
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, StoreError::Db(sqlx::Error::Database(e)) if e.is_unique_violation())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_database_connection_is_unavailable_not_internal() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        for e in [
            StoreError::Db(sqlx::Error::Io(reset)),
            StoreError::Db(sqlx::Error::PoolTimedOut),
            StoreError::Db(sqlx::Error::Protocol(
                "expected to read 5 bytes, got 0 bytes at EOF".into(),
            )),
        ] {
            assert!(e.is_unavailable(), "{e}");
        }
        let s3 = StoreError::Blob(object_store::Error::Generic {
            store: "S3",
            source: "Error after 10 retries: HTTP status server error (503)".into(),
        });
        assert!(s3.is_unavailable());
        let disk = StoreError::Blob(object_store::Error::Generic {
            store: "LocalFileSystem",
            source: "Input/output error".into(),
        });
        assert!(!disk.is_unavailable());
        for e in [
            StoreError::NotFound,
            StoreError::Db(sqlx::Error::RowNotFound),
            StoreError::Corrupt("x".into()),
        ] {
            assert!(!e.is_unavailable(), "{e}");
        }
    }

    #[test]
    fn a_full_disk_is_found_under_the_blob_stores_error() {
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let e = StoreError::Blob(object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(full),
        });
        assert!(e.is_storage_full());
        assert!(StoreError::Io(std::io::Error::from_raw_os_error(28)).is_storage_full());
        assert!(!StoreError::Io(std::io::Error::other("x")).is_storage_full());
        assert!(!StoreError::NotFound.is_storage_full());
    }
}
