//! Small files' bytes read from a SQLite database on the caller's thread.
//!
//! Why: a body kept in the metadata database (see `put`) is read by one primary-key lookup,
//! but through sqlx every statement is a round trip to the connection's worker thread — two
//! thread wake-ups that cost more CPU than the lookup itself (a profile of 4 KiB GETs: a
//! quarter of the server's CPU in futex waits and wakes). Here the lookup runs where the request
//! runs, on connections of our own made for this one statement. They only read; SQLite's WAL
//! lets them read beside the writer, each statement seeing the last commit.
//!
//! A lookup whose pages are in the OS page cache takes microseconds; one that is not blocks the
//! runtime's thread for its disk reads, as the page fault of a mapped file would. PostgreSQL
//! stores read through sqlx as every other query.

use std::ffi::{CStr, CString, c_int};
use std::ptr::{NonNull, null, null_mut};

use bytes::Bytes;
use libsqlite3_sys as ffi;

use crate::{Result, StoreError};

/// Idle connections kept for the next lookups: more are opened under a burst and closed after.
const KEEP_IDLE: usize = 8;

/// How long a lookup waits for a lock (only a WAL recovery or a checkpoint truncating the
/// log takes one readers wait for).
const BUSY_TIMEOUT_MS: c_int = 5_000;

/// Each connection's page cache, in KiB (negative: a size, not pages): the OS caches the
/// file anyway, so a small one keeps memory flat with many connections.
const CACHE: &CStr = c"PRAGMA cache_size = -256";

const LOOKUP: &CStr = c"SELECT data FROM blobs WHERE id = ?1";

/// Lookups of `blobs.data` by id on a SQLite database file.
pub(crate) struct InlineReads {
    path: CString,
    idle: std::sync::Mutex<Vec<Conn>>,
}

impl std::fmt::Debug for InlineReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineReads")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl InlineReads {
    /// For the SQLite database at `path` (connections are opened when first needed).
    pub(crate) fn new(path: &std::path::Path) -> Result<Self> {
        let path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
            StoreError::Config(format!("database path {} holds a NUL byte", path.display()))
        })?;
        Ok(InlineReads {
            path,
            idle: std::sync::Mutex::default(),
        })
    }

    /// The bytes of blob `id`; `None` when no such row has any.
    pub(crate) fn read(&self, id: &str) -> Result<Option<Bytes>> {
        let idle = crate::lock_plain(&self.idle).pop();
        let mut conn = match idle {
            Some(c) => c,
            None => Conn::open(&self.path)?,
        };
        let got = conn.lookup(id);
        // A connection that failed is closed rather than kept: whatever state it is in goes.
        if got.is_ok() {
            let mut idle = crate::lock_plain(&self.idle);
            if idle.len() < KEEP_IDLE {
                idle.push(conn);
            }
        }
        got
    }
}

/// One connection and its prepared lookup.
struct Conn {
    db: NonNull<ffi::sqlite3>,
    stmt: NonNull<ffi::sqlite3_stmt>,
}

// SAFETY: the connection is opened with SQLITE_OPEN_NOMUTEX (SQLite's multi-thread mode), in
// which a connection may move between threads as long as no two use it at once; a `Conn` is
// only used through `&mut` (taken out of the idle list while in use).
unsafe impl Send for Conn {}

impl Conn {
    fn open(path: &CStr) -> Result<Self> {
        let mut db: *mut ffi::sqlite3 = null_mut();
        let flags = ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_NOMUTEX;
        // SAFETY: `path` is NUL-terminated and outlives the call; `db` receives a handle
        // (possibly one carrying an error), closed below on every path that does not keep it.
        let rc = unsafe { ffi::sqlite3_open_v2(path.as_ptr(), &mut db, flags, null()) };
        let Some(db) = NonNull::new(db) else {
            return Err(failure("opening the database for reads", rc, None));
        };
        let fail = |rc: c_int, what: &str| {
            let e = failure(what, rc, Some(db));
            // SAFETY: `db` is an open handle with no statement left unfinalized.
            unsafe { ffi::sqlite3_close(db.as_ptr()) };
            e
        };
        if rc != ffi::SQLITE_OK {
            return Err(fail(rc, "opening the database for reads"));
        }
        // SAFETY: `db` is open; the SQL is NUL-terminated and static.
        unsafe {
            ffi::sqlite3_busy_timeout(db.as_ptr(), BUSY_TIMEOUT_MS);
            let rc = ffi::sqlite3_exec(db.as_ptr(), CACHE.as_ptr(), None, null_mut(), null_mut());
            if rc != ffi::SQLITE_OK {
                return Err(fail(rc, "setting a reader's page cache"));
            }
        }
        let mut stmt: *mut ffi::sqlite3_stmt = null_mut();
        // SAFETY: `db` is open; the SQL is NUL-terminated (-1: read to the NUL).
        let rc = unsafe {
            ffi::sqlite3_prepare_v2(db.as_ptr(), LOOKUP.as_ptr(), -1, &mut stmt, null_mut())
        };
        match NonNull::new(stmt) {
            Some(stmt) if rc == ffi::SQLITE_OK => Ok(Conn { db, stmt }),
            _ => Err(fail(rc, "preparing the lookup of a small file")),
        }
    }

    fn lookup(&mut self, id: &str) -> Result<Option<Bytes>> {
        let len = c_int::try_from(id.len())
            .map_err(|_| StoreError::Corrupt(format!("a blob id of {} bytes", id.len())))?;
        let stmt = self.stmt.as_ptr();
        // SAFETY: `stmt` is a prepared statement of this open connection, used by this thread
        // alone. The id is bound without a copy (SQLITE_STATIC): it outlives every step, and
        // the binding is cleared before this returns. The column's pointer is read before the
        // next call on the statement, which is when SQLite may free it.
        unsafe {
            let rc = ffi::sqlite3_bind_text(stmt, 1, id.as_ptr().cast(), len, ffi::SQLITE_STATIC());
            let got = if rc != ffi::SQLITE_OK {
                Err(failure("binding a blob id", rc, Some(self.db)))
            } else {
                match ffi::sqlite3_step(stmt) {
                    ffi::SQLITE_ROW if ffi::sqlite3_column_type(stmt, 0) == ffi::SQLITE_NULL => {
                        Ok(None)
                    }
                    ffi::SQLITE_ROW => {
                        let data = ffi::sqlite3_column_blob(stmt, 0);
                        let n = usize::try_from(ffi::sqlite3_column_bytes(stmt, 0)).unwrap_or(0);
                        if data.is_null() || n == 0 {
                            Ok(Some(Bytes::new()))
                        } else {
                            let bytes = std::slice::from_raw_parts(data.cast::<u8>(), n);
                            Ok(Some(Bytes::copy_from_slice(bytes)))
                        }
                    }
                    ffi::SQLITE_DONE => Ok(None),
                    rc => Err(failure("reading a small file", rc, Some(self.db))),
                }
            };
            ffi::sqlite3_reset(stmt);
            ffi::sqlite3_clear_bindings(stmt);
            got
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // SAFETY: the statement belongs to this connection and is finalized before it closes;
        // neither is used again.
        unsafe {
            ffi::sqlite3_finalize(self.stmt.as_ptr());
            ffi::sqlite3_close(self.db.as_ptr());
        }
    }
}

/// SQLite's failure as the store's: a full disk or a busy database keep their meaning for the
/// callers that look (`is_unavailable`), the rest is an I/O error with SQLite's message.
fn failure(what: &str, rc: c_int, db: Option<NonNull<ffi::sqlite3>>) -> StoreError {
    let message = match db {
        // SAFETY: `db` is an open handle; the message is copied before any other call on it.
        Some(db) => unsafe {
            CStr::from_ptr(ffi::sqlite3_errmsg(db.as_ptr()))
                .to_string_lossy()
                .into_owned()
        },
        None => format!("SQLite error {rc}"),
    };
    let kind = match rc & 0xff {
        ffi::SQLITE_BUSY | ffi::SQLITE_LOCKED => std::io::ErrorKind::ResourceBusy,
        ffi::SQLITE_FULL => std::io::ErrorKind::StorageFull,
        _ => std::io::ErrorKind::Other,
    };
    StoreError::Io(std::io::Error::new(kind, format!("{what}: {message}")))
}
