//! The metadata database: one `AnyPool` over SQLite or PostgreSQL, the same SQL for both
//! (`$n` placeholders, integers for flags and times, TEXT ids), its owner's migrations run at
//! open (see `schema`).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Row, Transaction};
use sqlx::{AnyConnection, Connection as _};
use tokio::sync::{Mutex, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

use crate::StoreError;
use crate::schema::Schema;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    pub fn of_url(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Dialect::Sqlite)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Dialect::Postgres)
        } else {
            Err(StoreError::Config(
                "db_url must start with sqlite:// or postgres://".into(),
            ))
        }
    }
}

/// Run on every new SQLite connection. WAL lets readers run beside the one writer. FULL
/// synchronous syncs the WAL at every COMMIT: an acknowledged write survives a power loss, not
/// only a crash of the process (NORMAL, SQLite's usual trade in WAL mode, may lose the last
/// commits to one). The group committer makes that one sync per batch of puts (~0.4 ms on
/// this machine's disk). busy_timeout covers other processes (in-process writers queue on
/// [`Db::write_lock`] instead).
///
/// Checkpoints every 10,000 WAL pages (~40 MiB) instead of SQLite's 1,000: small puts rewrite
/// the same few pages (the directory's row, the root's, the rightmost index leaves) in every
/// commit, and a checkpoint copies each page once however often the WAL holds it, so ten
/// times the interval copies far fewer pages per commit. The committing writer runs the
/// checkpoint, so that was time the group committer (the bottleneck of small puts) spent off
/// its queue: 4 KiB PUTs 1.12× per second, 0.96× CPU per PUT (paired runs). The WAL file is
/// cut back to 64 MiB when it restarts, should a reader that holds an old snapshot have
/// let it grow past that.
const SQLITE_PRAGMAS: [&str; 6] = [
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
    "PRAGMA busy_timeout = 5000",
    "PRAGMA foreign_keys = ON",
    "PRAGMA wal_autocheckpoint = 10000",
    "PRAGMA journal_size_limit = 67108864",
];

/// Applies [`SQLITE_PRAGMAS`] to a new connection (pooled or a reader).
async fn sqlite_pragmas(conn: &mut AnyConnection) -> Result<(), sqlx::Error> {
    for pragma in SQLITE_PRAGMAS {
        sqlx::query(pragma).execute(&mut *conn).await?;
    }
    Ok(())
}

pub struct Db {
    pub pool: AnyPool,
    pub dialect: Dialect,
    /// SQLite only: the connections reads use (see [`Readers`]).
    readers: Option<Arc<Readers>>,
    /// `arca_db_operations_total{store,op}`: connections taken for reading and write
    /// transactions begun — the units of work this process asks of the database. Handles made
    /// once, so counting costs an atomic add.
    reads: metrics::Counter,
    writes: metrics::Counter,
    /// SQLite has one writer at a time. Letting write transactions race for it makes the losers
    /// sleep in SQLite's busy handler (1, 2, 5, 10 … 100 ms steps), which wrecks latency under
    /// load; queueing them on an async mutex hands the lock over at once and in order.
    /// PostgreSQL needs none: writers serialise per space on the space row instead.
    write_lock: Option<Arc<Mutex<()>>>,
    /// Commits so far, once [`Db::count_changes`] asked for them: what an in-memory cache of
    /// reads is checked against (see `store::resolved`).
    changes: Option<Arc<AtomicU64>>,
}

/// How long a request waits for a PostgreSQL connection (see [`Db::open`]).
const PG_ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

impl Db {
    /// `name` labels the metrics (`store="NAME"`).
    pub async fn open(
        url: &str,
        max_connections: Option<u32>,
        name: &str,
        schema: &Schema,
    ) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of_url(url)?;
        let mut options = AnyPoolOptions::new().after_release(|conn, _meta| {
            Box::pin(async move { Ok(out_of_transaction(conn).await) })
        });
        match dialect {
            Dialect::Sqlite => {
                options = options
                    .max_connections(max_connections.unwrap_or(8))
                    // A pooled SQLite connection is a file handle in this process: it cannot
                    // go stale as a socket can, and the default ping before every acquire is
                    // one more round trip to the connection's worker thread on every query.
                    .test_before_acquire(false)
                    .after_connect(|conn, _meta| Box::pin(sqlite_pragmas(conn)));
            }
            Dialect::Postgres => {
                options = options
                    .max_connections(max_connections.unwrap_or(16))
                    // While the server is away (a restart, a failover) a request waits this
                    // long for a connection, not sqlx's 30 s; the service then runs it again
                    // within its `database_retry`, or answers 503.
                    .acquire_timeout(PG_ACQUIRE_TIMEOUT);
            }
        }
        let pool = options.connect(url).await?;
        crate::schema::migrate(&pool, dialect, schema).await?;
        let readers = (dialect == Dialect::Sqlite).then(|| {
            Arc::new(Readers {
                url: url.to_owned(),
                idle: std::sync::Mutex::new(Vec::new()),
                permits: Arc::new(Semaphore::new(
                    usize::try_from(max_connections.unwrap_or(8))
                        .unwrap_or(8)
                        .max(1),
                )),
            })
        });
        let ops = |op: &'static str| {
            let labels = [("store", name.to_owned()), ("op", op.to_owned())];
            metrics::counter!("arca_db_operations_total", &labels)
        };
        Ok(Db {
            pool,
            dialect,
            readers,
            reads: ops("read"),
            writes: ops("write"),
            write_lock: (dialect == Dialect::Sqlite).then(|| Arc::new(Mutex::new(()))),
            changes: None,
        })
    }

    /// Counts every commit from now on, and returns the count: it moves on only once a commit
    /// is over, so whatever a read returned before it moved may have changed since and nothing
    /// read while it stands still has. Commits then run to their end even when their caller
    /// goes away (see [`WriteTx::finish`]).
    pub fn count_changes(&mut self) -> Arc<AtomicU64> {
        Arc::clone(self.changes.get_or_insert_with(Default::default))
    }

    /// Counts a read made without a connection of the pool's (a statement run on the caller's
    /// thread).
    pub fn count_read(&self) {
        self.reads.increment(1);
    }

    /// A connection for reading.
    pub async fn acquire(&self) -> Result<ReadConn, StoreError> {
        self.reads.increment(1);
        match &self.readers {
            Some(readers) => readers.acquire().await,
            None => Ok(ReadConn::Pooled(self.pool.acquire().await?)),
        }
    }

    /// Whether the database answers now: one trivial statement on the pool (a connection made
    /// if none is idle).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await?;
        sqlx::query("SELECT 1").execute(&mut *conn).await?;
        Ok(())
    }

    /// Closes the pool and the idle reader connections.
    pub async fn close(&self) {
        self.pool.close().await;
        if let Some(readers) = &self.readers {
            readers.permits.close();
            let idle = std::mem::take(&mut *readers.lock());
            for conn in idle {
                if let Err(e) = conn.close().await {
                    tracing::debug!(error = %e, "closing a reader connection");
                }
            }
        }
    }

    /// Begins a write transaction. On SQLite it is `BEGIN IMMEDIATE`: a deferred transaction that
    /// reads first and writes later fails with SQLITE_BUSY when another writer committed in
    /// between, instead of waiting.
    pub async fn begin_write(&self) -> Result<WriteTx<'static>, StoreError> {
        self.writes.increment(1);
        let guard = self.write_guard().await;
        let tx = match self.dialect {
            Dialect::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Dialect::Postgres => self.pool.begin().await?,
        };
        Ok(WriteTx {
            tx,
            _guard: guard,
            changes: self.changes.clone(),
        })
    }

    /// A connection for a caller that runs write transactions back to back on it
    /// ([`Db::begin_write_on`]): the group committer keeps one while work is queued, so a
    /// batch pays no pool hand-off. Give it back (drop it) when idle: closing the store waits
    /// for every connection.
    pub async fn writer_conn(&self) -> Result<PoolConnection<Any>, StoreError> {
        Ok(self.pool.acquire().await?)
    }

    /// [`Db::begin_write`] on a connection the caller holds (see [`Db::writer_conn`]).
    pub async fn begin_write_on<'c>(
        &self,
        conn: &'c mut AnyConnection,
    ) -> Result<WriteTx<'c>, StoreError> {
        self.writes.increment(1);
        let guard = self.write_guard().await;
        let tx = match self.dialect {
            Dialect::Sqlite => conn.begin_with("BEGIN IMMEDIATE").await?,
            Dialect::Postgres => conn.begin().await?,
        };
        Ok(WriteTx {
            tx,
            _guard: guard,
            changes: self.changes.clone(),
        })
    }

    async fn write_guard(&self) -> Option<OwnedMutexGuard<()>> {
        match &self.write_lock {
            Some(lock) => Some(Arc::clone(lock).lock_owned().await),
            None => None,
        }
    }
}

/// The connections SQLite reads use, outside sqlx's pool.
///
/// Why: sqlx's pool pings every connection it gets back (one more round trip to the
/// connection's worker thread) and does so on a task it spawns when the connection is dropped,
/// so each read query cost three thread hand-offs where one does. A SQLite connection is a file
/// handle in this process and cannot go stale as a socket can, and nothing is left pending on
/// one: a read holds no transaction open, and sqlx resets a statement whose reader went away
/// (its `ExecuteIter` resets on drop) on the worker, before the next command there runs. So a
/// reader goes back to the idle list as it is dropped, with no ping.
pub struct Readers {
    url: String,
    idle: std::sync::Mutex<Vec<AnyConnection>>,
    /// As many as the pool's size: readers in use or idle never exceed it.
    permits: Arc<Semaphore>,
}

impl Readers {
    async fn acquire(self: &Arc<Self>) -> Result<ReadConn, StoreError> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Db(sqlx::Error::PoolClosed))?;
        let idle = self.lock().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => {
                let mut conn = AnyConnection::connect(&self.url).await?;
                sqlite_pragmas(&mut conn).await?;
                conn
            }
        };
        Ok(ReadConn::Own {
            conn: Some(conn),
            home: Arc::clone(self),
            _permit: permit,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AnyConnection>> {
        crate::lock_plain(&self.idle)
    }
}

/// A connection for reading: one of SQLite's [`Readers`], or one from PostgreSQL's pool.
pub enum ReadConn {
    Pooled(PoolConnection<Any>),
    Own {
        /// Taken back into `home` on drop.
        conn: Option<AnyConnection>,
        home: Arc<Readers>,
        _permit: OwnedSemaphorePermit,
    },
}

impl Deref for ReadConn {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        match self {
            ReadConn::Pooled(c) => c,
            ReadConn::Own { conn, .. } => conn
                .as_ref()
                .expect("a reader holds its connection until dropped"),
        }
    }
}

impl DerefMut for ReadConn {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match self {
            ReadConn::Pooled(c) => c,
            ReadConn::Own { conn, .. } => conn
                .as_mut()
                .expect("a reader holds its connection until dropped"),
        }
    }
}

impl Drop for ReadConn {
    fn drop(&mut self) {
        if let ReadConn::Own { conn, home, .. } = self
            && let Some(conn) = conn.take()
            && !home.permits.is_closed()
        {
            home.lock().push(conn);
        }
    }
}

/// A write transaction. Field order matters: the transaction is dropped (rolled back) before the
/// in-process write lock is released.
pub struct WriteTx<'c> {
    pub tx: Transaction<'c, Any>,
    _guard: Option<OwnedMutexGuard<()>>,
    changes: Option<Arc<AtomicU64>>,
}

impl WriteTx<'_> {
    pub fn conn(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }

    /// Commits on the caller's task. Only for a caller whose future is never dropped midway
    /// (the group committer's own task): [`WriteTx::finish`] explains why others may not.
    pub async fn commit_here(self) -> Result<(), StoreError> {
        let result = self.tx.commit().await;
        if let Some(changes) = &self.changes {
            // Counted whether it succeeded or not: a failed COMMIT may have landed.
            changes.fetch_add(1, Ordering::Release);
        }
        drop(self._guard);
        Ok(result?)
    }

    /// Rolls back explicitly (rather than on drop, so the connection is clean before the
    /// write lock passes on), and returns `error`.
    pub async fn roll_back(self, error: StoreError) -> StoreError {
        if let Err(rb) = self.tx.rollback().await {
            tracing::warn!(error = %rb, "rollback failed");
        }
        error
    }
}

impl WriteTx<'static> {
    /// Commits on `Ok`, rolls back explicitly on `Err` (rather than on drop, so the connection
    /// is clean before the write lock passes on).
    pub async fn finish<T>(self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        match result {
            Ok(v) => {
                match self.changes {
                    None => self.tx.commit().await?,
                    Some(changes) => {
                        // On its own task: a COMMIT whose caller went away would otherwise
                        // still land (sqlx sends it to the connection's worker at once) but
                        // uncounted, and a cache would keep serving what it replaced.
                        let (tx, guard) = (self.tx, self._guard);
                        tokio::spawn(async move {
                            let result = tx.commit().await;
                            // Counted whether it succeeded or not: a failed COMMIT may have
                            // landed all the same.
                            changes.fetch_add(1, Ordering::Release);
                            drop(guard);
                            result
                        })
                        .await
                        .map_err(|e| {
                            StoreError::Io(std::io::Error::other(format!("commit task: {e}")))
                        })??;
                    }
                }
                Ok(v)
            }
            Err(e) => Err(self.roll_back(e).await),
        }
    }
}

/// Whether `conn` is outside any transaction once the commands queued on it have run (a
/// rollback queued by a dropped transaction among them), so it may be used again.
///
/// Why: when SQLite ends a transaction by itself (it rolls back on SQLITE_FULL, SQLITE_IOERR and
/// the like: a full disk under the write-ahead log), the COMMIT fails and so does the ROLLBACK
/// that follows ("no transaction is active"), and sqlx, which counts open transactions per
/// connection and lowers the count only on success, goes on counting one: every later BEGIN on
/// that connection is refused. Such a connection is closed instead of reused.
pub async fn out_of_transaction(conn: &mut AnyConnection) -> bool {
    if !conn.is_in_transaction() {
        return true;
    }
    conn.ping().await.is_ok() && !conn.is_in_transaction()
}

/// The first column of every row, as text: what a `… RETURNING id` or a list of ids gives.
pub fn first_strings(rows: &[AnyRow]) -> Result<Vec<String>, StoreError> {
    rows.iter()
        .map(|r| r.try_get::<String, _>(0).map_err(StoreError::from))
        .collect()
}

/// Sizes are u64 in the API and BIGINT in the database.
pub fn db_size(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Corrupt(format!("size {v} out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Owner;

    /// A schema of no migrations: these tests make their own tables.
    const NO_TABLES: Schema = Schema {
        owner: Owner::Records,
        sqlite: &[],
        postgres: &[],
    };

    /// The pragmas are per connection: every pooled connection and every reader must have
    /// them, not only the first (WAL itself is persistent, busy_timeout and foreign_keys are
    /// not).
    #[tokio::test]
    async fn sqlite_pragmas_on_every_connection() {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("m.db").display());
        let db = Db::open(&url, Some(3), "test", &NO_TABLES).await.unwrap();
        let mut conns = Vec::new();
        let mut readers = Vec::new();
        for _ in 0..3 {
            conns.push(db.pool.acquire().await.unwrap());
            readers.push(db.acquire().await.unwrap());
        }
        let all = conns
            .iter_mut()
            .map(|c| &mut **c)
            .chain(readers.iter_mut().map(|c| &mut **c));
        for c in all {
            let mode: String = sqlx::query("PRAGMA journal_mode")
                .fetch_one(&mut *c)
                .await
                .unwrap()
                .try_get(0)
                .unwrap();
            assert_eq!(mode.to_lowercase(), "wal");
            for (pragma, want) in [
                ("PRAGMA busy_timeout", 5000i64),
                ("PRAGMA foreign_keys", 1),
                ("PRAGMA synchronous", 2), // FULL
                ("PRAGMA wal_autocheckpoint", 10_000),
                ("PRAGMA journal_size_limit", 64 << 20),
            ] {
                let got: i64 = sqlx::query(pragma)
                    .fetch_one(&mut *c)
                    .await
                    .unwrap()
                    .try_get(0)
                    .unwrap();
                assert_eq!(got, want, "{pragma}");
            }
        }
    }

    /// A reader goes back to the idle list without sqlx's ping; one whose query was abandoned
    /// half-way (its reader dropped after the first row) must not keep that query's snapshot:
    /// the next read on the same connection sees a write committed after it.
    #[tokio::test]
    async fn an_abandoned_read_leaves_no_stale_snapshot() {
        use futures::TryStreamExt as _;

        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("m.db").display());
        // One reader, so every read below runs on the same connection.
        let db = Db::open(&url, Some(1), "test", &NO_TABLES).await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE t (x INTEGER); \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000) \
             INSERT INTO t SELECT i FROM n",
        )
        .execute(&db.pool)
        .await
        .unwrap();
        {
            let mut r = db.acquire().await.unwrap();
            let mut rows = sqlx::query("SELECT x FROM t").fetch(&mut *r);
            assert!(rows.try_next().await.unwrap().is_some());
            // Dropped here with 49,999 rows unread.
        }
        sqlx::query("INSERT INTO t VALUES (-1)")
            .execute(&db.pool)
            .await
            .unwrap();
        let mut r = db.acquire().await.unwrap();
        let seen: i64 = sqlx::query("SELECT count(*) FROM t WHERE x = -1")
            .fetch_one(&mut *r)
            .await
            .unwrap()
            .try_get(0)
            .unwrap();
        assert_eq!(
            seen, 1,
            "the reader sees the write committed after its abandoned query"
        );
        drop(r);
        db.close().await;
    }
}
