//! Read statements run on a SQLite database on the caller's thread.
//!
//! Why: through sqlx every statement is a round trip to the connection's worker thread — two
//! thread wake-ups that cost more CPU than the indexed lookups a request makes (a profile of
//! 4 KiB GETs: a quarter of the server's CPU in futex waits and wakes). The statements every
//! request runs — resolving its path, a node by id, a space, a small file's bytes — run here
//! instead, where the request runs, on connections of our own made for them. They only read;
//! SQLite's WAL lets them read beside the writer, each statement seeing the last commit.
//!
//! A lookup whose pages are in the OS page cache takes microseconds; one that is not blocks the
//! runtime's thread for its disk reads, as the page fault of a mapped file would. PostgreSQL
//! stores read through sqlx as every other query.

use std::collections::HashMap;
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

/// Prepared statements one connection keeps (a resolution's statement differs by depth); past
/// it the connection starts its set over.
const MAX_STATEMENTS: usize = 64;

const BLOB: &str = "SELECT data FROM blobs WHERE id = $1";

/// A value bound to a statement's parameter (`$1` is the first).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
}

/// A column's value.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Null,
    Int(i64),
    /// A floating-point number (no statement here reads one: its value is not kept).
    Real,
    Text(String),
    Blob(Bytes),
}

/// One row of a result.
#[derive(Debug, Clone)]
pub(crate) struct Row(Vec<Value>);

impl Row {
    /// Column `i` (from 0); `Null` past the last.
    pub(crate) fn get(&self, i: usize) -> &Value {
        self.0.get(i).unwrap_or(&Value::Null)
    }
}

/// Read statements on a SQLite database file.
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

    /// The rows of the read statement `sql` with `args` bound, at most `max` of them.
    pub(crate) fn rows(&self, sql: &str, args: &[Arg<'_>], max: usize) -> Result<Vec<Row>> {
        let idle = crate::lock_plain(&self.idle).pop();
        let mut conn = match idle {
            Some(c) => c,
            None => Conn::open(&self.path)?,
        };
        let got = conn.run(sql, args, max);
        // A connection that failed is closed rather than kept: whatever state it is in goes.
        if got.is_ok() {
            let mut idle = crate::lock_plain(&self.idle);
            if idle.len() < KEEP_IDLE {
                idle.push(conn);
            }
        }
        got
    }

    /// The first row of `sql`, if any.
    pub(crate) fn row(&self, sql: &str, args: &[Arg<'_>]) -> Result<Option<Row>> {
        Ok(self.rows(sql, args, 1)?.pop())
    }

    /// The bytes of blob `id`; `None` when no such row has any.
    pub(crate) fn read(&self, id: &str) -> Result<Option<Bytes>> {
        let row = self.row(BLOB, &[Arg::Text(id)])?;
        match row.as_ref().map(|r| r.get(0)) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Blob(b)) => Ok(Some(b.clone())),
            Some(Value::Text(t)) => Ok(Some(Bytes::copy_from_slice(t.as_bytes()))),
            Some(other) => Err(StoreError::Corrupt(format!("blob {id} holds {other:?}"))),
        }
    }
}

/// A prepared statement and, for each of its parameters, the argument it takes.
struct Prepared {
    stmt: NonNull<ffi::sqlite3_stmt>,
    /// Parameter `i + 1` takes `args[params[i]]`.
    params: Vec<usize>,
}

/// One connection and the statements prepared on it.
struct Conn {
    db: NonNull<ffi::sqlite3>,
    stmts: HashMap<Box<str>, Prepared>,
}

// SAFETY: the connection is opened with SQLITE_OPEN_NOMUTEX (SQLite's multi-thread mode), in
// which a connection and its statements may move between threads as long as no two use them
// at once; a `Conn` is only used through `&mut` (taken out of the idle list while in use).
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
        // From here the handle is closed by `Conn`'s drop on every path.
        let conn = Conn {
            db,
            stmts: HashMap::new(),
        };
        if rc != ffi::SQLITE_OK {
            return Err(failure("opening the database for reads", rc, Some(db)));
        }
        // SAFETY: `db` is open; the SQL is NUL-terminated and static.
        unsafe {
            ffi::sqlite3_busy_timeout(db.as_ptr(), BUSY_TIMEOUT_MS);
            let rc = ffi::sqlite3_exec(db.as_ptr(), CACHE.as_ptr(), None, null_mut(), null_mut());
            if rc != ffi::SQLITE_OK {
                return Err(failure("setting a reader's page cache", rc, Some(db)));
            }
        }
        Ok(conn)
    }

    /// The statement for `sql`, prepared on first use.
    fn prepare(&mut self, sql: &str) -> Result<&Prepared> {
        if !self.stmts.contains_key(sql) {
            if self.stmts.len() >= MAX_STATEMENTS {
                self.finalize_all();
            }
            let prepared = self.prepare_new(sql)?;
            self.stmts.insert(sql.into(), prepared);
        }
        self.stmts
            .get(sql)
            .ok_or_else(|| StoreError::Corrupt("a prepared statement went missing".into()))
    }

    fn prepare_new(&self, sql: &str) -> Result<Prepared> {
        let len = c_int::try_from(sql.len())
            .map_err(|_| StoreError::Corrupt(format!("a statement of {} bytes", sql.len())))?;
        let mut stmt: *mut ffi::sqlite3_stmt = null_mut();
        // SAFETY: `db` is open; SQLite reads `len` bytes of `sql` and keeps no pointer to them.
        let rc = unsafe {
            ffi::sqlite3_prepare_v3(
                self.db.as_ptr(),
                sql.as_ptr().cast(),
                len,
                ffi::SQLITE_PREPARE_PERSISTENT as _,
                &mut stmt,
                null_mut(),
            )
        };
        let stmt = match NonNull::new(stmt) {
            Some(stmt) if rc == ffi::SQLITE_OK => stmt,
            Some(stmt) => {
                // SAFETY: a statement prepared on this connection, not used again.
                unsafe { ffi::sqlite3_finalize(stmt.as_ptr()) };
                return Err(failure("preparing a read", rc, Some(self.db)));
            }
            None => return Err(failure("preparing a read", rc, Some(self.db))),
        };
        // Which argument each parameter takes: `$N` and `?N` the Nth, a bare `?` the next one
        // (sqlx's rule, so a statement reads alike both ways).
        let mut params = Vec::new();
        // SAFETY: `stmt` is a live statement; parameter names live as long as it does and are
        // copied out at once.
        let count = unsafe { ffi::sqlite3_bind_parameter_count(stmt.as_ptr()) };
        let mut next = 0;
        for i in 1..=count {
            // SAFETY: as above.
            let name = unsafe { ffi::sqlite3_bind_parameter_name(stmt.as_ptr(), i) };
            let index = if name.is_null() {
                next += 1;
                next
            } else {
                // SAFETY: a NUL-terminated name owned by the statement.
                let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
                match name
                    .strip_prefix('$')
                    .or_else(|| name.strip_prefix('?'))
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    Some(n) if n > 0 => n,
                    _ => {
                        // SAFETY: the statement is not kept.
                        unsafe { ffi::sqlite3_finalize(stmt.as_ptr()) };
                        return Err(StoreError::Corrupt(format!(
                            "a read's parameter {name} is not numbered"
                        )));
                    }
                }
            };
            params.push(index - 1);
        }
        Ok(Prepared { stmt, params })
    }

    fn run(&mut self, sql: &str, args: &[Arg<'_>], max: usize) -> Result<Vec<Row>> {
        let db = self.db;
        let prepared = self.prepare(sql)?;
        let stmt = prepared.stmt.as_ptr();
        let mut rows = Vec::new();
        // SAFETY: `stmt` is a prepared statement of this open connection, used by this thread
        // alone. Text is bound without a copy (SQLITE_STATIC): `args` outlive every step, and
        // the bindings are cleared before this returns. A column's pointer is copied from
        // before the next call on the statement, which is when SQLite may free it.
        unsafe {
            let mut got = Ok(());
            for (i, &arg) in prepared.params.iter().enumerate() {
                let slot = c_int::try_from(i + 1).unwrap_or(c_int::MAX);
                let rc = match args.get(arg) {
                    // SQLite reads an unbound parameter as NULL, and so does sqlx.
                    None => ffi::SQLITE_OK,
                    Some(Arg::Text(t)) => match c_int::try_from(t.len()) {
                        Ok(len) => ffi::sqlite3_bind_text(
                            stmt,
                            slot,
                            t.as_ptr().cast(),
                            len,
                            ffi::SQLITE_STATIC(),
                        ),
                        Err(_) => ffi::SQLITE_TOOBIG,
                    },
                };
                if rc != ffi::SQLITE_OK {
                    got = Err(failure("binding a read's value", rc, Some(db)));
                    break;
                }
            }
            while got.is_ok() && rows.len() < max {
                match ffi::sqlite3_step(stmt) {
                    ffi::SQLITE_ROW => match row_of(stmt) {
                        Ok(row) => rows.push(row),
                        Err(e) => got = Err(e),
                    },
                    ffi::SQLITE_DONE => break,
                    rc => got = Err(failure("reading", rc, Some(db))),
                }
            }
            ffi::sqlite3_reset(stmt);
            ffi::sqlite3_clear_bindings(stmt);
            got.map(|()| rows)
        }
    }

    fn finalize_all(&mut self) {
        for (_, p) in self.stmts.drain() {
            // SAFETY: a statement of this connection, not used again.
            unsafe { ffi::sqlite3_finalize(p.stmt.as_ptr()) };
        }
    }
}

/// The current row of `stmt`, each column copied out.
///
/// # Safety
/// `stmt` is a live statement whose last step returned `SQLITE_ROW`.
unsafe fn row_of(stmt: *mut ffi::sqlite3_stmt) -> Result<Row> {
    // SAFETY: per the contract; every pointer read is copied before the next call.
    unsafe {
        let n = ffi::sqlite3_column_count(stmt);
        let mut values = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        for i in 0..n {
            let value = match ffi::sqlite3_column_type(stmt, i) {
                ffi::SQLITE_INTEGER => Value::Int(ffi::sqlite3_column_int64(stmt, i)),
                ffi::SQLITE_FLOAT => Value::Real,
                ffi::SQLITE_TEXT => {
                    let data = ffi::sqlite3_column_text(stmt, i);
                    let len = usize::try_from(ffi::sqlite3_column_bytes(stmt, i)).unwrap_or(0);
                    let bytes = if data.is_null() || len == 0 {
                        &[][..]
                    } else {
                        std::slice::from_raw_parts(data, len)
                    };
                    let text = std::str::from_utf8(bytes)
                        .map_err(|_| StoreError::Corrupt("a text column is not UTF-8".into()))?;
                    Value::Text(text.to_owned())
                }
                ffi::SQLITE_BLOB => {
                    let data = ffi::sqlite3_column_blob(stmt, i);
                    let len = usize::try_from(ffi::sqlite3_column_bytes(stmt, i)).unwrap_or(0);
                    if data.is_null() || len == 0 {
                        Value::Blob(Bytes::new())
                    } else {
                        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), len);
                        Value::Blob(Bytes::copy_from_slice(bytes))
                    }
                }
                _ => Value::Null,
            };
            values.push(value);
        }
        Ok(Row(values))
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.finalize_all();
        // SAFETY: every statement of this connection was finalized above; the handle is not
        // used again.
        unsafe {
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

impl crate::db::Cols for Row {
    fn text(&self, i: usize) -> Result<String> {
        match self.get(i) {
            Value::Text(t) => Ok(t.clone()),
            other => Err(mismatch(i, "text", other)),
        }
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        match self.get(i) {
            Value::Null => Ok(None),
            _ => self.text(i).map(Some),
        }
    }
    fn int(&self, i: usize) -> Result<i64> {
        match self.get(i) {
            Value::Int(v) => Ok(*v),
            other => Err(mismatch(i, "an integer", other)),
        }
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self.get(i) {
            Value::Null => Ok(None),
            _ => self.int(i).map(Some),
        }
    }
}

fn mismatch(i: usize, want: &str, got: &Value) -> StoreError {
    let got = match got {
        Value::Null => "NULL",
        Value::Int(_) => "an integer",
        Value::Real => "a real",
        Value::Text(_) => "text",
        Value::Blob(_) => "a blob",
    };
    StoreError::Corrupt(format!("column {i} holds {got}, not {want}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Cols as _;

    #[tokio::test]
    async fn parameters_are_taken_by_their_number_and_rows_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("t.db");
        let url = format!("sqlite://{}?mode=rwc", file.display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query("CREATE TABLE t (k TEXT, v INTEGER, b BLOB)")
            .execute(&pool)
            .await
            .unwrap();
        for (k, v) in [("a", 1), ("b", 2), ("c", 3)] {
            sqlx::query("INSERT INTO t VALUES ($1, $2, x'00ff')")
                .bind(k)
                .bind(v)
                .execute(&pool)
                .await
                .unwrap();
        }
        let reads = InlineReads::new(&file).unwrap();
        // `$2` comes first in the text: it still takes the second argument.
        let row = reads
            .row(
                "SELECT $2 || k, v FROM t WHERE k = $1",
                &[Arg::Text("b"), Arg::Text("x")],
            )
            .unwrap()
            .unwrap();
        assert_eq!(row.text(0).unwrap(), "xb");
        assert_eq!(row.int(1).unwrap(), 2);
        assert!(row.text(1).is_err(), "an integer is not read as text");
        assert_eq!(row.opt_text(5).unwrap(), None);
        let rows = reads.rows("SELECT k FROM t ORDER BY k", &[], 2).unwrap();
        assert_eq!(rows.len(), 2);
        // The statement was reset after its cut-short run: it runs again from the start.
        let rows = reads.rows("SELECT k FROM t ORDER BY k", &[], 9).unwrap();
        let keys: Vec<String> = rows.iter().map(|r| r.text(0).unwrap()).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        assert!(matches!(
            reads.row("SELECT b FROM t WHERE k = 'a'", &[]).unwrap().unwrap().get(0),
            Value::Blob(b) if b[..] == [0, 0xff]
        ));
        // A bad statement is an error, not a panic, and the reader goes on.
        assert!(reads.row("SELECT nope FROM t", &[]).is_err());
        assert!(reads.row("SELECT k FROM t WHERE k = :name", &[]).is_err());
        assert!(reads.row("SELECT 1", &[]).unwrap().is_some());
        pool.close().await;
    }
}
