//! Group commit of puts: the metadata writes of concurrent puts (the "uploading" row recorded
//! before a body is written, and the commit that points a node at the finished blob) are queued
//! to one writer task, which applies whatever is queued in one write transaction.
//!
//! Why: SQLite has one writer at a time anyway, and every statement is a round trip to the
//! connection's worker thread; a put alone paid two write transactions of ~10 round trips,
//! serialised behind every other put. In a batch the per-transaction work (BEGIN, the space
//! lock, the quota read, etag propagation to the root, COMMIT) is paid once per batch, and so is
//! the puts' own work: one statement claims every upload, one reads every parent and target,
//! one inserts every new file (overwrites: one update per file), whatever the batch's size;
//! the checks run in memory, in queue order. PostgreSQL runs the same code: one batch is one
//! transaction holding the row locks of the spaces it touches, taken in id order (as every
//! other multi-space writer takes them), so batches of two instances cannot deadlock.
//!
//! Guarantees kept: a put is queued only after its blob is durable, so metadata never points at
//! bytes that are not on stable storage (blob fsyncs of concurrent puts run concurrently, before
//! they queue); each put's checks (parent, preconditions, quota, the upload still unclaimed)
//! run inside the transaction that commits it, after the puts queued before it, so with
//! `if_match` the later of two puts to one file sees the earlier one's etag and fails; every
//! ancestor of every changed directory gets a new etag and its size in the same transaction.
//!
//! A put refused by its checks writes nothing (its claimed upload row is put back as it was),
//! so the rest of the batch goes on. Any other failure inside the transaction (a database error) rolls the whole batch
//! back and each job is retried alone, so one job's failure is never another's. A failed COMMIT
//! is reported as "may have committed": the caller must then leave its blob to the collector.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, Row as _};
use tokio::sync::{mpsc, oneshot};

use super::put::{Written, check_target};
use super::versions::{Version, VersionRules, insert_versions, version_of};
use super::{lock_space, propagate};
use crate::db::{Db, db_size, node_cols, node_from_row};
use crate::ids::{from_ns, new_id, now_ms, now_ns, to_ns};
use crate::model::{Node, NodeKind, PutOptions};
use crate::{Result, StoreError};

/// Most jobs applied in one transaction: bounds how long the write lock is held (and the
/// statement variants of the multi-row insert the driver caches).
const MAX_BATCH: usize = 64;

/// One put's commit: where, on which terms, and the blob that was written.
pub(crate) struct PutCommit {
    pub(crate) space_id: String,
    pub(crate) parent_id: String,
    pub(crate) name: String,
    pub(crate) opts: PutOptions,
    pub(crate) written: Written,
}

/// A failed commit, and whether it may nevertheless have landed (a failed COMMIT).
pub(crate) struct CommitFailed {
    pub(crate) error: StoreError,
    pub(crate) maybe_committed: bool,
}

enum Job {
    /// Upload rows for `ids`: one is the requester's, the rest go to `reserved`.
    Reserve {
        ids: Vec<String>,
        reserved: Arc<Reserved>,
        reply: oneshot::Sender<Result<String>>,
    },
    /// Deletes the rows `reserved` holds (see [`Committer::forget_reserved`]).
    Forget {
        reserved: Arc<Reserved>,
        reply: oneshot::Sender<Result<()>>,
    },
    Put {
        put: Box<PutCommit>,
        reply: oneshot::Sender<std::result::Result<Node, CommitFailed>>,
    },
    /// A namespace write (a folder made, an item trashed): see [`Write`].
    Write(Box<dyn Write>),
}

/// A namespace write queued like the puts, so that concurrent ones share a commit (one WAL
/// sync) instead of paying one each: a run of them is applied in one transaction, each under
/// a savepoint of its own, so one refused (the name taken, the parent gone) leaves the others
/// standing. Only on SQLite, whose writes are serial anyway: on PostgreSQL each keeps its own
/// transaction, as the row locks of a batch taken in queue order could deadlock another
/// instance's.
pub(crate) trait Write: Send + Sync {
    /// Applies the write on the batch's transaction (it takes its space's lock itself). May
    /// run again, alone, when the batch failed for a reason not its own.
    fn apply<'c>(&'c self, c: &'c mut AnyConnection) -> futures::future::BoxFuture<'c, Result<()>>;
    /// Answers the caller once the batch committed (`Ok`), or with why not.
    fn answer(self: Box<Self>, outcome: Result<()>);
}

/// The work of a [`Write`]: a function of the batch's connection, which may run more than once.
pub(crate) trait WriteFn<T>:
    for<'c> Fn(&'c mut AnyConnection) -> futures::future::BoxFuture<'c, Result<T>>
    + Send
    + Sync
    + 'static
{
}

impl<T, F> WriteFn<T> for F where
    F: for<'c> Fn(&'c mut AnyConnection) -> futures::future::BoxFuture<'c, Result<T>>
        + Send
        + Sync
        + 'static
{
}

/// A [`Write`] from a function of the connection; its value is kept until the commit.
struct Task<T, F> {
    f: F,
    value: std::sync::Mutex<Option<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T: Send + 'static, F: WriteFn<T>> Write for Task<T, F> {
    fn apply<'c>(&'c self, c: &'c mut AnyConnection) -> futures::future::BoxFuture<'c, Result<()>> {
        Box::pin(async move {
            let value = (self.f)(c).await?;
            *crate::lock_plain(&self.value) = Some(value);
            Ok(())
        })
    }

    fn answer(self: Box<Self>, outcome: Result<()>) {
        let value = crate::lock_plain(&self.value).take();
        let r = outcome.and_then(|()| {
            value.ok_or_else(|| StoreError::Corrupt("a write was left out of its batch".into()))
        });
        // A caller that went away no longer needs the answer; its write stands.
        let _ = self.reply.send(r);
    }
}

/// Whether a write's failure is its own refusal (it changed nothing and the batch goes on)
/// rather than the database failing under it.
fn refused(e: &StoreError) -> bool {
    !matches!(
        e,
        StoreError::Db(_)
            | StoreError::Io(_)
            | StoreError::Blob(_)
            | StoreError::Migrate(_)
            | StoreError::CommitUncertain(_)
    )
}

/// The handle puts queue their metadata writes on. The writer task ends when every handle is
/// gone (the store is dropped).
pub(crate) struct Committer {
    tx: mpsc::UnboundedSender<Job>,
    reserved: Arc<Reserved>,
}

/// How long a reserved upload row may wait for its put: far below the collector's minimum
/// age (an hour in storage-users; it must exceed the longest upload anyway), so the collector
/// never takes a row for abandoned that a put is about to use.
const RESERVED_FOR: Duration = Duration::from_secs(60);

/// Puts per second from which upload rows are committed ahead of need.
const RESERVE_FROM: u32 = 32;

/// Upload rows committed ahead of the puts that take them.
///
/// Why: a put's "uploading" row must be committed before its first byte is written, so every
/// put waited for a whole batch of the committer — the bottleneck of small PUTs — before it
/// could write its blob, and then for another to commit it; and the committer paid an INSERT
/// per batch. Under load (at least [`RESERVE_FROM`] puts in the last second) a put that finds
/// no row ready commits rows for a quarter second of puts at once (at most [`MAX_BATCH`]) and
/// the puts after it take those. Below that, a row per put as before, so a trickle of puts
/// leaves no spare rows.
///
/// Rows never taken (the process stopped, or [`RESERVED_FOR`] passed) are collected as any
/// abandoned upload. [`Store::collect_orphans`](crate::Store::collect_orphans) first deletes
/// the rows this process holds, through the queue after any reservation in it, so even a zero
/// minimum age never collects a row a later put takes.
pub(crate) struct Reserved {
    ids: std::sync::Mutex<Vec<(String, Instant)>>,
    /// One reservation at a time: puts that find none ready wait for it.
    reserving: tokio::sync::Mutex<()>,
    /// Puts counted in the current second and the one before.
    demand: std::sync::Mutex<(Instant, u32, u32)>,
}

impl Default for Reserved {
    fn default() -> Self {
        Reserved {
            ids: std::sync::Mutex::default(),
            reserving: tokio::sync::Mutex::default(),
            demand: std::sync::Mutex::new((Instant::now(), 0, 0)),
        }
    }
}

impl Reserved {
    /// Counts a put; returns the puts in the last second or so.
    fn count(&self) -> u32 {
        let mut d = crate::lock_plain(&self.demand);
        let (since, this, last) = &mut *d;
        let age = since.elapsed();
        if age >= Duration::from_secs(1) {
            *last = if age < Duration::from_secs(2) {
                *this
            } else {
                0
            };
            *this = 0;
            *since = Instant::now();
        }
        *this += 1;
        (*this).max(*last)
    }

    /// A row still fresh enough to take.
    fn take(&self) -> Option<String> {
        let mut ids = crate::lock_plain(&self.ids);
        while let Some((id, at)) = ids.pop() {
            if at.elapsed() < RESERVED_FOR {
                return Some(id);
            }
        }
        None
    }

    fn keep(&self, ids: impl IntoIterator<Item = String>) {
        let now = Instant::now();
        crate::lock_plain(&self.ids).extend(ids.into_iter().map(|id| (id, now)));
    }
}

fn stopped() -> StoreError {
    StoreError::Io(std::io::Error::other("the store's writer has stopped"))
}

impl Committer {
    /// Starts the writer task on the current runtime. The queue needs no bound of its own:
    /// every job in it is awaited by the request that queued it. The task hangs under no
    /// cancellation token on purpose: it ends when the last handle of the store drops, after
    /// answering every queued job, so a shutdown's drain never fails a write it is finishing.
    /// `versions`: which overwritten contents the puts keep as versions (see `versions`).
    /// `retry`: how long a batch that failed before its commit because the database was out
    /// of reach is tried again (see [`run`]).
    pub(crate) fn spawn(db: Arc<Db>, versions: Option<Arc<VersionRules>>, retry: Duration) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut jobs = Vec::with_capacity(MAX_BATCH);
            // Kept while jobs keep coming: a batch then pays no pool hand-off.
            let mut conn = None;
            while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
                let mut batch = std::mem::take(&mut jobs);
                // A forget runs after the jobs before it are answered (a reservation among
                // them has handed its rows over by then), in a transaction of its own.
                while let Some(at) = batch.iter().position(|j| matches!(j, Job::Forget { .. })) {
                    let rest = batch.split_off(at + 1);
                    if let Some(Job::Forget { reserved, reply }) = batch.pop() {
                        if !batch.is_empty() {
                            run(&db, versions.as_deref(), &mut conn, batch, retry).await;
                        }
                        let _ = reply.send(forget(&db, &reserved).await);
                    }
                    batch = rest;
                }
                // Runs of writes and of puts apply in queue order, each run in a transaction.
                while !batch.is_empty() {
                    let writes = matches!(batch[0], Job::Write(_));
                    let end = batch
                        .iter()
                        .position(|j| matches!(j, Job::Write(_)) != writes)
                        .unwrap_or(batch.len());
                    let rest = batch.split_off(end);
                    if writes {
                        let writes = batch
                            .into_iter()
                            .filter_map(|j| match j {
                                Job::Write(w) => Some(w),
                                _ => None,
                            })
                            .collect();
                        run_writes(&db, &mut conn, writes).await;
                    } else {
                        run(&db, versions.as_deref(), &mut conn, batch, retry).await;
                    }
                    batch = rest;
                }
                if rx.is_empty() {
                    conn = None;
                }
            }
        });
        Committer {
            tx,
            reserved: Arc::default(),
        }
    }

    /// A blob id whose "uploading" row is committed (see [`Reserved`]).
    pub(crate) async fn reserve(&self) -> Result<String> {
        let demand = self.reserved.count();
        if let Some(id) = self.reserved.take() {
            return Ok(id);
        }
        let _one = self.reserved.reserving.lock().await;
        if let Some(id) = self.reserved.take() {
            return Ok(id);
        }
        let n = if demand >= RESERVE_FROM {
            (demand as usize / 4).clamp(1, MAX_BATCH)
        } else {
            1
        };
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job::Reserve {
                ids: (0..n).map(|_| new_id()).collect(),
                reserved: Arc::clone(&self.reserved),
                reply,
            })
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Deletes the upload rows reserved and not yet taken, once every job queued before has
    /// been answered.
    pub(crate) async fn forget_reserved(&self) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job::Forget {
                reserved: Arc::clone(&self.reserved),
                reply,
            })
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Applies `f` in a batch of namespace writes (see [`Write`]); returns its value once
    /// committed. `f` may run more than once (alone, after a batch failed under it).
    pub(crate) async fn write<T: Send + 'static>(&self, f: impl WriteFn<T>) -> Result<T> {
        let (reply, rx) = oneshot::channel();
        let task = Task {
            f,
            value: std::sync::Mutex::new(None),
            reply,
        };
        self.tx
            .send(Job::Write(Box::new(task)))
            .map_err(|_| stopped())?;
        // The writer may have taken the job before it went away: whether it landed is unknown.
        rx.await
            .map_err(|_| StoreError::CommitUncertain("the store's writer has stopped".into()))?
    }

    /// Commits a put whose blob is durable; returns the node as committed.
    pub(crate) async fn put(&self, put: PutCommit) -> std::result::Result<Node, CommitFailed> {
        let (reply, rx) = oneshot::channel();
        let lost = || CommitFailed {
            error: stopped(),
            // The writer may have taken the job before it went away.
            maybe_committed: true,
        };
        self.tx
            .send(Job::Put {
                put: Box::new(put),
                reply,
            })
            .map_err(|_| CommitFailed {
                error: stopped(),
                maybe_committed: false,
            })?;
        rx.await.map_err(|_| lost())?
    }
}

/// What one job came to inside the transaction: refused (nothing written), or applied.
type Outcome = std::result::Result<Applied, StoreError>;

struct Applied {
    node: Node,
}

/// The first wait before a batch is tried again while the database is out of reach, doubled
/// each time up to the second.
const RETRY_FIRST_WAIT: Duration = Duration::from_millis(50);
const RETRY_MAX_WAIT: Duration = Duration::from_secs(1);

/// The committer's connection, while it keeps one.
type Held = Option<PoolConnection<Any>>;

/// Applies `jobs`, retrying each alone when the batch as a whole fails, and answers every job.
/// A batch that failed before its commit because the database was out of reach (nothing of
/// it took effect) is tried again as a whole, with backoff, for up to `retry`: a database
/// restart holds the writes back instead of failing them. The writes queued behind wait, as
/// none of them could commit meanwhile anyway.
async fn run(
    db: &Db,
    versions: Option<&VersionRules>,
    conn: &mut Held,
    jobs: Vec<Job>,
    retry: Duration,
) {
    let single = jobs.len() == 1;
    let started = Instant::now();
    let mut wait = RETRY_FIRST_WAIT;
    let attempted = loop {
        let attempted = attempt(db, versions, conn, &jobs).await;
        if attempted.is_err() {
            // Whatever failed, the next transaction starts on a fresh connection.
            *conn = None;
        }
        match attempted {
            Err(Failure::Before(e)) if e.is_unavailable() && started.elapsed() + wait <= retry => {
                tracing::warn!(error = %e, jobs = jobs.len(), "the database is out of reach; the writes wait");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX_WAIT);
            }
            // The connection went with the COMMIT: whether the batch landed is asked of the
            // database once it answers again. Landed: the outcomes stand. Not: it is tried
            // again, as a batch that failed before its commit.
            Err(Failure::Commit(e, outcomes)) if e.is_unavailable() => {
                match landed(db, &jobs, &outcomes, started + retry).await {
                    Some(true) => {
                        tracing::info!(
                            jobs = jobs.len(),
                            "a batch whose COMMIT was cut off had landed"
                        );
                        break Ok(outcomes);
                    }
                    Some(false) if started.elapsed() + wait <= retry => {
                        tracing::warn!(error = %e, jobs = jobs.len(), "a batch whose COMMIT was cut off had not landed; tried again");
                    }
                    _ => break Err(Failure::Commit(e, outcomes)),
                }
            }
            attempted => break attempted,
        }
    };
    match attempted {
        Ok(outcomes) => answer(jobs, outcomes.into_iter().map(Ok).collect()),
        Err(Failure::Commit(e, _)) => {
            // Whether the COMMIT landed is unknown. A lost connection is the database going
            // away (a restart): every job hears that, 503, and a client sends its write again
            // (a PUT's content is the same either way). A full disk (the write-ahead log could
            // not grow) is told as such: 507. Anything else is a fault.
            let lost = e.is_unavailable();
            let full = e.is_storage_full();
            let message = e.to_string();
            let mut first = Some(e);
            let errors = jobs
                .iter()
                .map(|_| {
                    Err(first
                        .take()
                        .unwrap_or_else(|| commit_error(&message, lost, full)))
                })
                .collect();
            answer(jobs, errors);
        }
        Err(Failure::Before(e)) if single => {
            answer(jobs, vec![Err(e)]);
        }
        Err(Failure::Before(e)) => {
            tracing::debug!(error = %e, jobs = jobs.len(), "batch failed, retrying its jobs alone");
            for job in jobs {
                // Boxed: the retry of a single job never recurses further.
                Box::pin(run(db, versions, conn, vec![job], Duration::ZERO)).await;
            }
        }
    }
}

/// Applies a run of namespace writes in one transaction, each under a savepoint, and answers
/// each. A failure of the database (not a write's own refusal) rolls the batch back and each
/// write is tried alone; a failed COMMIT leaves open whether they landed, which each hears.
async fn run_writes(db: &Db, conn: &mut Held, writes: Vec<Box<dyn Write>>) {
    let attempted = async {
        let c = match conn {
            Some(c) => c,
            None => conn.insert(db.writer_conn().await.map_err(Failure::Before)?),
        };
        let mut w = db.begin_write_on(c).await.map_err(Failure::Before)?;
        let mut outcomes = Vec::with_capacity(writes.len());
        for write in &writes {
            let applied = async {
                sqlx::query("SAVEPOINT arca_write")
                    .execute(&mut *w.conn())
                    .await?;
                let r = write.apply(w.conn()).await;
                let end = if r.is_ok() {
                    "RELEASE SAVEPOINT arca_write"
                } else {
                    "ROLLBACK TO SAVEPOINT arca_write"
                };
                sqlx::query(end).execute(&mut *w.conn()).await?;
                if r.is_err() {
                    sqlx::query("RELEASE SAVEPOINT arca_write")
                        .execute(&mut *w.conn())
                        .await?;
                }
                Ok::<_, StoreError>(r)
            }
            .await;
            match applied {
                Ok(Err(e)) if !refused(&e) => {
                    return Err(Failure::Before(w.roll_back(e).await));
                }
                Ok(r) => outcomes.push(r),
                Err(e) => return Err(Failure::Before(w.roll_back(e).await)),
            }
        }
        match w.commit_here().await {
            Ok(()) => Ok(outcomes),
            Err(e) => Err(Failure::Commit(e, Vec::new())),
        }
    }
    .await;
    if attempted.is_err() {
        *conn = None;
    }
    match attempted {
        Ok(outcomes) => {
            for (write, outcome) in writes.into_iter().zip(outcomes) {
                write.answer(outcome);
            }
        }
        Err(Failure::Before(e)) if writes.len() == 1 => {
            if let Some(write) = writes.into_iter().next() {
                write.answer(Err(e));
            }
        }
        Err(Failure::Before(e)) => {
            tracing::debug!(error = %e, writes = writes.len(), "batch of writes failed, retrying each alone");
            for write in writes {
                // Boxed: the retry of a single write never recurses further.
                Box::pin(run_writes(db, conn, vec![write])).await;
            }
        }
        Err(Failure::Commit(e, _)) => {
            let message = e.to_string();
            let full = e.is_storage_full();
            for write in writes {
                // Whether a write whose COMMIT failed landed is unknown unless the disk was full.
                write.answer(Err(commit_error(&message, !full, full)));
            }
        }
    }
}

/// What each job of a batch whose COMMIT failed hears: `lost` (the connection went: it may
/// have landed, 503), `full` (the disk: 507), or the failure as it was.
fn commit_error(message: &str, lost: bool, full: bool) -> StoreError {
    if lost {
        StoreError::CommitUncertain(message.to_owned())
    } else if full {
        StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!("committing a batch of writes: {message}"),
        ))
    } else {
        StoreError::Io(std::io::Error::other(format!(
            "committing a batch of writes failed: {message}"
        )))
    }
}

/// Whether a batch whose COMMIT was cut off landed, asked of the database as soon as it answers
/// again (until `until`; `None` if it does not by then). The blob rows are the batch's
/// idempotency keys, written in its transaction: a put that applied claimed its upload's row
/// (state 0 → 1), a reservation inserted its rows. One such row tells for the whole
/// transaction. A batch that applied nothing anyone sees (only refusals) is answered the
/// same either way.
async fn landed(
    db: &Db,
    jobs: &[Job],
    outcomes: &[Option<Outcome>],
    until: Instant,
) -> Option<bool> {
    let witness = jobs
        .iter()
        .zip(outcomes)
        .find_map(|(job, outcome)| match (job, outcome) {
            (Job::Put { put, .. }, Some(Ok(_))) => Some((put.written.blob_id.clone(), true)),
            (Job::Reserve { ids, .. }, _) => ids.first().map(|id| (id.clone(), false)),
            _ => None,
        });
    let Some((id, claimed)) = witness else {
        return Some(true);
    };
    // A moment first: a server that lost only the connection may still be finishing the COMMIT.
    tokio::time::sleep(RETRY_FIRST_WAIT).await;
    let mut wait = RETRY_FIRST_WAIT;
    loop {
        let read = async {
            let mut c = db.acquire().await?;
            let row = sqlx::query("SELECT state FROM blobs WHERE id = $1")
                .bind(&id)
                .fetch_optional(&mut *c)
                .await?;
            row.map(|r| r.try_get::<i64, _>(0))
                .transpose()
                .map_err(StoreError::from)
        }
        .await;
        match read {
            // A put's row claimed, or a reservation's row there: landed. A put's row still
            // unclaimed, or a reservation's missing: not.
            Ok(state) => {
                return Some(if claimed {
                    state == Some(1)
                } else {
                    state.is_some()
                });
            }
            Err(e) if e.is_unavailable() && Instant::now() + wait <= until => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX_WAIT);
            }
            Err(e) => {
                tracing::warn!(error = %e, "asking whether a cut-off COMMIT landed");
                return None;
            }
        }
    }
}

/// Sends each job its outcome: `Ok(Some(outcome))` applied or refused inside a committed
/// transaction, `Err` the transaction failed at COMMIT (it may have landed).
fn answer(jobs: Vec<Job>, results: Vec<std::result::Result<Option<Outcome>, StoreError>>) {
    for (job, result) in jobs.into_iter().zip(results) {
        match job {
            Job::Reserve {
                mut ids,
                reserved,
                reply,
            } => {
                let mine = result.and_then(|_| {
                    ids.pop()
                        .ok_or_else(|| StoreError::Corrupt("an empty reservation".into()))
                });
                if mine.is_ok() {
                    reserved.keep(ids);
                }
                // A requester that went away leaves its row to the collector.
                let _ = reply.send(mine);
            }
            Job::Forget { reply, .. } => {
                let _ = reply.send(Err(StoreError::Corrupt(
                    "a forget was batched with other writes".into(),
                )));
            }
            Job::Write(write) => {
                write.answer(Err(StoreError::Corrupt(
                    "a namespace write was batched with puts".into(),
                )));
            }
            Job::Put { reply, .. } => {
                let r = match result {
                    Ok(Some(Ok(applied))) => Ok(applied.node),
                    Ok(Some(Err(error))) => Err(CommitFailed {
                        error,
                        maybe_committed: false,
                    }),
                    Ok(None) => Err(CommitFailed {
                        error: StoreError::Corrupt("a put was left out of its batch".into()),
                        maybe_committed: false,
                    }),
                    Err(error) => Err(CommitFailed {
                        error,
                        maybe_committed: true,
                    }),
                };
                // A requester that went away no longer needs the answer; its put stands.
                let _ = reply.send(r);
            }
        }
    }
}

enum Failure {
    /// Rolled back: nothing of the batch landed.
    Before(StoreError),
    /// COMMIT failed: the batch may or may not have landed; if it did, with these outcomes.
    Commit(StoreError, Vec<Option<Outcome>>),
}

/// One transaction for `jobs`: per job `None` for a reservation, `Some(outcome)` for a put.
///
/// The COMMIT runs on this task: the committer's task is never dropped midway, so it needs
/// none of its own (see `WriteTx::commit_here`).
async fn attempt(
    db: &Db,
    versions: Option<&VersionRules>,
    conn: &mut Held,
    jobs: &[Job],
) -> std::result::Result<Vec<Option<Outcome>>, Failure> {
    let c = match conn {
        Some(c) => c,
        None => conn.insert(db.writer_conn().await.map_err(Failure::Before)?),
    };
    let mut w = db.begin_write_on(c).await.map_err(Failure::Before)?;
    match apply(w.conn(), versions, jobs).await {
        Ok(outcomes) => match w.commit_here().await {
            Ok(()) => Ok(outcomes),
            Err(e) => Err(Failure::Commit(e, outcomes)),
        },
        Err(e) => Err(Failure::Before(w.roll_back(e).await)),
    }
}

/// Per space touched by the batch: its quota, the bytes used before the batch, the bytes the
/// batch's applied puts add so far. `None` when the space does not exist (any more).
struct SpaceState {
    quota: Option<u64>,
    used: i64,
    pending: i64,
}

async fn apply(
    c: &mut AnyConnection,
    versions: Option<&VersionRules>,
    jobs: &[Job],
) -> Result<Vec<Option<Outcome>>> {
    let records: Vec<&str> = jobs
        .iter()
        .flat_map(|j| match j {
            Job::Reserve { ids, .. } => ids.iter().map(String::as_str).collect(),
            Job::Put { .. } | Job::Forget { .. } | Job::Write(_) => Vec::new(),
        })
        .collect();
    if !records.is_empty() {
        insert_records(c, &records).await?;
    }

    // The space locks, in id order (see the module docs), with what the quota checks need.
    let mut spaces: BTreeMap<&str, Option<SpaceState>> = BTreeMap::new();
    for job in jobs {
        if let Job::Put { put, .. } = job {
            spaces.insert(put.space_id.as_str(), None);
        }
    }
    for (id, state) in spaces.iter_mut() {
        let quota = match lock_space(c, id).await {
            Ok(q) => q,
            Err(StoreError::NotFound) => continue,
            Err(e) => return Err(e),
        };
        let used = match quota {
            Some(_) => sqlx::query("SELECT size FROM nodes WHERE id = $1")
                .bind(*id)
                .fetch_one(&mut *c)
                .await?
                .try_get(0)?,
            None => 0,
        };
        *state = Some(SpaceState {
            quota,
            used,
            pending: 0,
        });
    }

    let puts: Vec<&PutCommit> = jobs
        .iter()
        .filter_map(|j| match j {
            Job::Put { put, .. } => Some(&**put),
            _ => None,
        })
        .collect();
    if puts.is_empty() {
        return Ok(jobs.iter().map(|_| None).collect());
    }

    // A handful of statements for the whole batch, whatever its size: claim every upload, read
    // every parent and every existing target, then decide each put in queue order in memory
    // (a put sees what the puts before it in the batch did), then write the results.
    // Inline bodies have no upload row: their rows are written below, for the puts applied.
    let streamed: Vec<&PutCommit> = puts
        .iter()
        .copied()
        .filter(|p| p.written.inline.is_none())
        .collect();
    let claimed = if streamed.is_empty() {
        Vec::new()
    } else {
        claim_uploads(c, &streamed).await?
    };
    let (dirs, mut targets) = lookup(c, &puts).await?;

    let now = now_ns();
    let mut outcomes = Vec::with_capacity(jobs.len());
    // New nodes to insert, and existing nodes whose final state is to be written, by id.
    let mut inserts: Vec<Node> = Vec::new();
    let mut updates: Vec<Node> = Vec::new();
    let mut released: Vec<String> = Vec::new();
    // Overwritten contents kept as versions instead of released.
    let mut kept: Vec<Version> = Vec::new();
    let mut unclaim: Vec<&str> = Vec::new();
    // The inline bodies of the puts applied: (blob id, size, bytes).
    let mut inline: Vec<(&str, u64, &bytes::Bytes)> = Vec::new();
    // Parent → (size delta, an entry was created in it), in first-seen order.
    let mut parents: Vec<(&str, i64, bool)> = Vec::new();
    for job in jobs {
        let Job::Put { put, .. } = job else {
            outcomes.push(None);
            continue;
        };
        let blob = put.written.blob_id.as_str();
        if put.written.inline.is_none() && !claimed.iter().any(|id| id == blob) {
            // The collector judged the upload abandoned (slower than its min_age): the row is
            // gone, and this commit must fail rather than point at nothing.
            outcomes.push(Some(Err(StoreError::Corrupt(format!(
                "upload {blob} was collected before it committed"
            )))));
            continue;
        }
        let key = (put.parent_id.clone(), put.name.clone());
        let existing = targets.get(&key);
        let decided = match spaces.get_mut(put.space_id.as_str()) {
            Some(Some(space)) => decide(put, dirs.get(&put.parent_id), existing, space),
            // The space is gone (deleted since the put began).
            _ => Err(StoreError::NotFound),
        };
        let delta = match decided {
            Ok(delta) => delta,
            Err(e) => {
                if put.written.inline.is_none() {
                    unclaim.push(blob);
                }
                outcomes.push(Some(Err(e)));
                continue;
            }
        };
        let written = &put.written;
        if let Some(data) = &written.inline {
            inline.push((blob, written.size, data));
        }
        let mtime = put.opts.mtime.map_or(now, to_ns);
        let fresh = Node {
            id: String::new(),
            space_id: put.space_id.clone(),
            parent_id: Some(put.parent_id.clone()),
            name: put.name.clone(),
            kind: NodeKind::File,
            size: written.size,
            mtime: from_ns(mtime),
            etag: new_id(),
            checksums: Some(written.checksums.clone()),
            created: from_ns(now),
            blob_id: Some(written.blob_id.clone()),
        };
        let (node, created) = match existing {
            Some(old) => {
                // The content replaced stays as a version, by reference, when the rules take
                // it; an acknowledged put's content is kept even when it was replaced in the
                // same batch.
                if versions.is_some_and(|r| r.keeps(&put.name, old.size))
                    && let Some(v) = version_of(old, now)
                {
                    kept.push(v);
                } else if let Some(b) = &old.blob_id {
                    released.push(b.clone());
                }
                // Overwriting content keeps the id and creation time and adds no entry.
                let node = Node {
                    id: old.id.clone(),
                    created: old.created,
                    ..fresh
                };
                match inserts.iter_mut().find(|n| n.id == node.id) {
                    // Created earlier in this batch: insert the final content instead.
                    Some(pending) => *pending = node.clone(),
                    None => match updates.iter_mut().find(|n| n.id == node.id) {
                        Some(pending) => *pending = node.clone(),
                        None => updates.push(node.clone()),
                    },
                }
                (node, false)
            }
            None => {
                let node = Node {
                    id: new_id(),
                    ..fresh
                };
                inserts.push(node.clone());
                (node, true)
            }
        };
        targets.insert(key, node.clone());
        match parents.iter_mut().find(|(p, ..)| *p == put.parent_id) {
            Some((_, d, c)) => {
                *d += delta;
                *c |= created;
            }
            None => parents.push((&put.parent_id, delta, created)),
        }
        outcomes.push(Some(Ok(Applied { node })));
    }

    if !unclaim.is_empty() {
        // Refused puts leave their upload rows as they found them, for `discard_upload`.
        let sql = format!(
            "UPDATE blobs SET state = 0 WHERE id IN ({})",
            placeholders(1, unclaim.len())
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for id in &unclaim {
            q = q.bind(*id);
        }
        q.execute(&mut *c).await?;
    }
    if !inline.is_empty() {
        insert_inline(c, &inline).await?;
    }
    if !inserts.is_empty() {
        insert_nodes(c, &inserts).await?;
    }
    for n in &updates {
        let cs = n.checksums.as_ref();
        sqlx::query(
            "UPDATE nodes SET blob_id = $2, size = $3, mtime = $4, etag = $5, sha1 = $6, \
             md5 = $7, adler32 = $8 WHERE id = $1",
        )
        .bind(&n.id)
        .bind(n.blob_id.as_deref())
        .bind(db_size(n.size)?)
        .bind(to_ns(n.mtime))
        .bind(&n.etag)
        .bind(cs.map(|c| c.sha1.as_str()))
        .bind(cs.map(|c| c.md5.as_str()))
        .bind(cs.map(|c| c.adler32.as_str()))
        .execute(&mut *c)
        .await?;
    }
    if !kept.is_empty() {
        insert_versions(c, &kept).await?;
    }
    if !released.is_empty() {
        let sql = format!(
            "UPDATE blobs SET released = $1 WHERE id IN ({})",
            placeholders(2, released.len())
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now_ms());
        for id in &released {
            q = q.bind(id.as_str());
        }
        q.execute(&mut *c).await?;
    }
    // One walk to the root per directory written into, whatever the number of puts in it.
    for (parent, delta, created) in parents {
        propagate(c, parent, &new_id(), delta, created.then_some(now)).await?;
    }
    Ok(outcomes)
}

/// Deletes the upload rows `reserved` holds (none of them has a blob: no put took them).
async fn forget(db: &Db, reserved: &Reserved) -> Result<()> {
    let ids: Vec<String> = std::mem::take(&mut *crate::lock_plain(&reserved.ids))
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for chunk in ids.chunks(MAX_BATCH) {
        let sql = format!(
            "DELETE FROM blobs WHERE state = 0 AND id IN ({})",
            placeholders(1, chunk.len())
        );
        let mut w = db.begin_write().await?;
        // Safe: built from constants and the count; every value is bound.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for id in chunk {
            q = q.bind(id.as_str());
        }
        let r = q
            .execute(w.conn())
            .await
            .map(|_| ())
            .map_err(StoreError::from);
        w.finish(r).await?;
    }
    Ok(())
}

/// `$first, $first+1, …` for `n` values.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for i in 0..n {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(out, "{sep}${}", first + i);
    }
    out
}

/// Marks every put's upload committed (with its size) and returns the ids it could claim: an
/// upload row the collector removed is not there to claim.
async fn claim_uploads(c: &mut AnyConnection, puts: &[&PutCommit]) -> Result<Vec<String>> {
    use std::fmt::Write as _;
    let mut sql = String::from("UPDATE blobs SET state = 1, size = CASE id");
    for i in 0..puts.len() {
        let _ = write!(sql, " WHEN ${} THEN ${}", 2 * i + 1, 2 * i + 2);
    }
    sql.push_str(" END WHERE state = 0 AND id IN (");
    for i in 0..puts.len() {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(sql, "{sep}${}", 2 * i + 1);
    }
    sql.push_str(") RETURNING id");
    // Safe: built from constants and the count; every value is bound.
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for p in puts {
        q = q
            .bind(p.written.blob_id.as_str())
            .bind(db_size(p.written.size)?);
    }
    let rows = q.fetch_all(&mut *c).await?;
    crate::db::first_strings(&rows)
}

/// [`lookup`]'s statement for `parents` directories and `names` (parent, name) pairs.
pub(crate) fn lookup_sql(parents: usize, names: usize) -> String {
    use std::fmt::Write as _;
    let mut sql = format!(
        concat!("SELECT ", node_cols!(), " FROM nodes WHERE id IN ({})"),
        placeholders(1, parents)
    );
    let mut next = parents + 1;
    for _ in 0..names {
        let _ = write!(sql, " OR (parent_id = ${} AND name = ${})", next, next + 1);
        next += 2;
    }
    sql
}

/// Every parent of the batch's puts by id, and every node now under one of their names.
async fn lookup(
    c: &mut AnyConnection,
    puts: &[&PutCommit],
) -> Result<(HashMap<String, Node>, HashMap<(String, String), Node>)> {
    let mut parent_ids: Vec<&str> = Vec::new();
    let mut names: Vec<(&str, &str)> = Vec::new();
    for p in puts {
        if !parent_ids.contains(&p.parent_id.as_str()) {
            parent_ids.push(&p.parent_id);
        }
        let pair = (p.parent_id.as_str(), p.name.as_str());
        if !names.contains(&pair) {
            names.push(pair);
        }
    }
    // Safe: built from constants and the counts; every value is bound.
    let mut q = sqlx::query(sqlx::AssertSqlSafe(lookup_sql(
        parent_ids.len(),
        names.len(),
    )));
    for id in &parent_ids {
        q = q.bind(*id);
    }
    for (parent, name) in &names {
        q = q.bind(*parent).bind(*name);
    }
    let rows = q.fetch_all(&mut *c).await?;
    let mut dirs = HashMap::new();
    let mut targets = HashMap::new();
    for row in &rows {
        let node = node_from_row(row)?;
        if let Some(parent) = &node.parent_id
            && names.contains(&(parent.as_str(), node.name.as_str()))
        {
            targets.insert((parent.clone(), node.name.clone()), node.clone());
        }
        if parent_ids.contains(&node.id.as_str()) {
            dirs.insert(node.id.clone(), node);
        }
    }
    Ok((dirs, targets))
}

/// The checks of one put against the state the batch has reached: the size delta it brings,
/// or why it is refused.
fn decide(
    put: &PutCommit,
    parent: Option<&Node>,
    existing: Option<&Node>,
    space: &mut SpaceState,
) -> Result<i64> {
    let parent = parent.ok_or(StoreError::Conflict)?;
    check_target(parent, existing, &put.opts)?;
    let size = db_size(put.written.size)?;
    let delta = size - existing.map_or(Ok(0), |n| db_size(n.size))?;
    // Shrinking is always allowed, so a space over its quota can still be cleaned up.
    if let Some(quota) = space.quota
        && delta > 0
        && space
            .used
            .saturating_add(space.pending)
            .saturating_add(delta)
            > i64::try_from(quota).unwrap_or(i64::MAX)
    {
        return Err(StoreError::QuotaExceeded);
    }
    space.pending += delta;
    Ok(delta)
}

/// The batch's new files in one multi-row `INSERT`.
async fn insert_nodes(c: &mut AnyConnection, nodes: &[Node]) -> Result<()> {
    const COLS: usize = 13;
    let mut sql = String::from(
        "INSERT INTO nodes (id, space_id, parent_id, name, kind, size, mtime, etag, blob_id, \
         sha1, md5, adler32, created) VALUES ",
    );
    for i in 0..nodes.len() {
        sql.push_str(if i == 0 { "(" } else { ", (" });
        sql.push_str(&placeholders(i * COLS + 1, COLS));
        sql.push(')');
    }
    // Safe: built from constants and the count; every value is bound.
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for n in nodes {
        let cs = n.checksums.as_ref();
        q = q
            .bind(n.id.as_str())
            .bind(n.space_id.as_str())
            .bind(n.parent_id.as_deref())
            .bind(n.name.as_str())
            .bind(n.kind.to_db())
            .bind(db_size(n.size)?)
            .bind(to_ns(n.mtime))
            .bind(n.etag.as_str())
            .bind(n.blob_id.as_deref())
            .bind(cs.map(|c| c.sha1.as_str()))
            .bind(cs.map(|c| c.md5.as_str()))
            .bind(cs.map(|c| c.adler32.as_str()))
            .bind(to_ns(n.created));
    }
    q.execute(&mut *c).await?;
    Ok(())
}

/// The rows of the batch's inline bodies, committed (state 1) with their bytes, in one
/// statement. The row doubles as the put's witness for [`landed`], as a claimed upload's does.
async fn insert_inline(c: &mut AnyConnection, rows: &[(&str, u64, &bytes::Bytes)]) -> Result<()> {
    use std::fmt::Write as _;
    let mut sql = String::from("INSERT INTO blobs (id, state, size, created, data) VALUES ");
    for i in 0..rows.len() {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(
            sql,
            "{sep}(${}, 1, ${}, $1, ${})",
            3 * i + 2,
            3 * i + 3,
            3 * i + 4
        );
    }
    // Safe: built from constants and the count; every value is bound.
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now_ms());
    for (id, size, data) in rows {
        q = q.bind(*id).bind(db_size(*size)?).bind(&data[..]);
    }
    q.execute(&mut *c).await?;
    Ok(())
}

/// `INSERT … VALUES (…), (…)`: the rows of every reservation in the batch in one statement.
async fn insert_records(c: &mut AnyConnection, ids: &[&str]) -> Result<()> {
    use std::fmt::Write as _;
    let mut sql = String::from("INSERT INTO blobs (id, state, size, created) VALUES ");
    for i in 0..ids.len() {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(sql, "{sep}(${}, 0, 0, $1)", i + 2);
    }
    // Safe: built from constants and the count; every value is bound.
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now_ms());
    for id in ids {
        q = q.bind(*id);
    }
    q.execute(&mut *c).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures::future::join_all;

    use crate::{PutOptions, Store, StoreConfig, StoreError};

    fn body(b: &'static [u8]) -> impl futures::Stream<Item = std::io::Result<Bytes>> {
        futures::stream::iter([Ok(Bytes::from_static(b))])
    }

    async fn sqlite_store(dir: &tempfile::TempDir) -> Store {
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
        Store::open(StoreConfig::new(url, dir.path().join("blobs")))
            .await
            .unwrap()
    }

    /// Concurrent namespace writes share batches: of many folders made at once under one
    /// name exactly one is made and the others hear AlreadyExists, every other name is made,
    /// removals into the trash beside them land, a refused write leaves the batch standing,
    /// and the parent's etag and the tree read back as the answers said.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn namespace_writes_in_batches_are_judged_each_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_store(&dir).await;
        assert!(store.batches_writes());
        let space = store.personal_space("nina").await.unwrap();
        let root = space.root_id.clone();
        let names: Vec<String> = (0..8).map(|i| format!("old{i}")).collect();
        let doomed: Vec<_> = join_all(names.iter().map(|n| store.mkdir(&root, n)))
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let before = store.stat(&root).await.unwrap().etag;
        let makes = (0..48).map(|i| {
            let store = store.clone();
            let root = root.clone();
            async move {
                let name = if i % 3 == 0 {
                    "same".to_owned()
                } else {
                    format!("d{i}")
                };
                (name.clone(), store.mkdir(&root, &name).await)
            }
        });
        let removals = doomed.iter().map(|d| {
            let store = store.clone();
            let id = d.id.clone();
            async move { store.trash(&id, "nina").await }
        });
        let (made, removed) = futures::join!(join_all(makes), join_all(removals));
        assert!(removed.iter().all(|r| r.is_ok()), "{removed:?}");
        let same: Vec<_> = made.iter().filter(|(n, _)| n == "same").collect();
        assert_eq!(
            same.iter().filter(|(_, r)| r.is_ok()).count(),
            1,
            "{same:?}"
        );
        assert!(
            same.iter()
                .filter(|(_, r)| r.is_err())
                .all(|(_, r)| matches!(r, Err(StoreError::AlreadyExists))),
            "{same:?}"
        );
        assert!(
            made.iter()
                .filter(|(n, _)| n != "same")
                .all(|(_, r)| r.is_ok())
        );
        let root_node = store.stat(&root).await.unwrap();
        let listed = store.list_dir(&root_node, false).await.unwrap();
        let mut names: Vec<&str> = listed.iter().map(|n| n.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names.len(), 33, "32 d* and one same, no old*: {names:?}");
        assert!(names.iter().all(|n| !n.starts_with("old")));
        assert_ne!(store.stat(&root).await.unwrap().etag, before);
        assert_eq!(store.trash_items(&space.id).await.unwrap().len(), 8);
    }

    /// Under load, upload rows are committed ahead and taken by the puts after; the collector
    /// removes the ones still held (uncounted, they have no blob) but never one a put took,
    /// and puts go on after it. A row held past `RESERVED_FOR` is never taken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn upload_rows_reserved_ahead_are_taken_or_forgotten() {
        use sqlx::Row as _;
        let tmp = tempfile::tempdir().unwrap();
        let s = sqlite_store(&tmp).await;
        let uploading = || async {
            let mut c = s.read_conn().await.unwrap();
            let row = sqlx::query("SELECT count(*) FROM blobs WHERE state = 0")
                .fetch_one(&mut *c)
                .await
                .unwrap();
            row.try_get::<i64, _>(0).unwrap()
        };
        let held = |s: &Store| crate::lock_plain(&s.committer().reserved.ids).len() as i64;
        let mut taken = Vec::new();
        while held(&s) == 0 {
            assert!(
                taken.len() < 200,
                "no rows reserved ahead after {} puts",
                taken.len()
            );
            taken.push(s.committer().reserve().await.unwrap());
        }
        assert!(
            taken.len() >= super::RESERVE_FROM as usize,
            "{}",
            taken.len()
        );
        assert_eq!(uploading().await, taken.len() as i64 + held(&s));
        // The next put takes a held row: no new one is committed for it.
        let before = uploading().await;
        let next = s.committer().reserve().await.unwrap();
        assert!(!taken.contains(&next));
        assert_eq!(uploading().await, before);
        taken.push(next);

        // The taken ones are abandoned uploads; the held ones are no one's.
        let collected = s.collect_orphans(std::time::Duration::ZERO).await.unwrap();
        assert_eq!(collected, taken.len() as u64);
        assert_eq!((uploading().await, held(&s)), (0, 0));
        let space = s.personal_space("u").await.unwrap();
        s.put_file(&space.root_id, "f", body(b"after"), PutOptions::default())
            .await
            .unwrap();

        s.committer().forget_reserved().await.unwrap();
        let stale = std::time::Instant::now() - super::RESERVED_FOR;
        s.committer()
            .reserved
            .ids
            .lock()
            .unwrap()
            .push(("stale".into(), stale));
        assert_eq!(s.committer().reserved.take(), None);
    }

    /// Puts queued together land in shared transactions, and each is still judged on the state
    /// the puts before it left: one creation of a name wins, one `if_match` overwrite of a
    /// version wins, and sizes and etags reach the root.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_puts_are_judged_one_after_another() {
        let tmp = tempfile::tempdir().unwrap();
        let s = sqlite_store(&tmp).await;
        let space = s.personal_space("u").await.unwrap();
        let dir = s.mkdir(&space.root_id, "d").await.unwrap();

        let creations = (0..16).map(|_| {
            let opts = PutOptions {
                if_none_match_any: true,
                ..PutOptions::default()
            };
            s.put_file(&dir.id, "one", body(b"abc"), opts)
        });
        let results = join_all(creations).await;
        let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "{results:?}");
        assert!(results.iter().all(|r| match r {
            Ok(_) => true,
            Err(e) => matches!(e, StoreError::PreconditionFailed),
        }));
        let first = won[0].clone();

        let overwrites = (0..8).map(|_| {
            let opts = PutOptions {
                if_match: Some(first.etag.clone()),
                ..PutOptions::default()
            };
            s.put_file(&dir.id, "one", body(b"abcdef"), opts)
        });
        let results = join_all(overwrites).await;
        let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "{results:?}");
        assert_eq!(won[0].id, first.id, "an overwrite keeps the id");
        assert_ne!(won[0].etag, first.etag);

        let many = (0..24).map(|i| {
            let s = s.clone();
            let dir = dir.id.clone();
            async move {
                s.put_file(
                    &dir,
                    &format!("f{i}"),
                    body(b"0123456789"),
                    PutOptions::default(),
                )
                .await
            }
        });
        for r in join_all(many).await {
            r.unwrap();
        }
        let listed = s.list_children(&dir.id).await.unwrap();
        assert_eq!(listed.len(), 25);
        let d = s.stat(&dir.id).await.unwrap();
        assert_eq!(d.size, 6 + 24 * 10);
        let root = s.space(&space.id).await.unwrap();
        assert_eq!(root.used, 6 + 24 * 10);
        assert_ne!(root.etag, space.etag);
        // What the puts answered is what is stored.
        let stored = s.child(&dir.id, "one").await.unwrap();
        assert_eq!(stored.etag, won[0].etag);
        assert_eq!(stored.size, 6);
    }
}
