//! Leader leases: at most one holder at a time runs a given background job across every
//! process sharing the lease store (one lease per job, never per item).
//!
//! A service asks [`Context::lease`](crate::Context::lease) for its job's [`Lease`], awaits
//! [`Lease::acquired`], runs while the [`LeaseGuard`] holds, and stops when
//! [`LeaseGuard::lost`] fires. Two stores: in memory ([`Leases::memory`], one process), and a
//! NATS KV key per job ([`Leases::nats`]): taken by a create-if-absent, renewed every `ttl/3`
//! by an update checked against the revision the holder last wrote, expired by the server's
//! per-message TTL when the holder dies, deleted on release so a successor takes over within
//! its next try (≤ 0.5 s) instead of a whole TTL.
//!
//! Why "never at once" holds: a holder counts its lease valid only until `ttl − margin` after it
//! *sent* its last successful write, and the server expires the key `ttl` after it *received*
//! it, so the holder gives up before anyone else can create the key; a renewal that finds
//! another revision means someone else holds it, and is a loss at once.
//!
//! Each process keeps a short ledger of its own holds ([`Leases::holds`], served as `/leases`
//! by the debug server): the job, the fencing token the store gave at the take (a KV revision:
//! a later holder's is larger) and the wall-clock window in which this process relied on it.
//! Collected from several processes, those windows must not overlap for one job; a test checks
//! that across restarts, kills and NATS outages without reading anyone's logs.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arca_transport::NatsKv;
use arca_transport::registry::nats::Written;
use futures::future::BoxFuture;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The holds a process remembers (the newest): enough for every hold of a test's run, and
/// bounded however long a process lives.
const LEDGER: usize = 256;

/// A try to acquire is at most this far apart, so a released lease moves within half a second
/// (two tries a second per waiting process and job: still independent of any request rate).
const MAX_RETRY: Duration = Duration::from_millis(500);

/// Where leases live; one per process, cloned into every service's context.
#[derive(Clone)]
pub struct Leases {
    store: Arc<dyn Store>,
    ttl: Duration,
    /// Who this process is, as written into the lease: for logs and people reading the bucket.
    holder: Arc<str>,
    /// This process's latest holds, for [`Leases::holds`].
    ledger: Arc<Mutex<VecDeque<Hold>>>,
    /// The process's cancellation: renewal tasks hang under it (see [`Leases::under`]).
    root: CancellationToken,
}

/// One hold of a lease by this process, as this process saw it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hold {
    pub job: String,
    /// The holder name of this process.
    pub holder: String,
    /// The store's token when the lease was taken: a fencing token, larger for every later
    /// take of the same job.
    pub token: u64,
    /// Unix milliseconds when this process began relying on the lease (the take confirmed).
    pub from_ms: u64,
    /// Unix milliseconds when it stopped (released, lost, dropped); `None` while held.
    pub until_ms: Option<u64>,
    /// Why it ended: "released", "taken over", "not renewed in time", "dropped".
    pub ended: Option<String>,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Leases {
    /// Leases among the services of this process only.
    pub fn memory(ttl: Duration) -> Self {
        Self::new(Arc::new(MemoryStore::default()), ttl)
    }

    /// Leases shared by every process using the bucket, with its TTL.
    pub fn nats(kv: NatsKv) -> Self {
        let ttl = kv.ttl();
        Self::new(Arc::new(NatsStore { kv }), ttl)
    }

    fn new(store: Arc<dyn Store>, ttl: Duration) -> Self {
        let salt = RandomState::new().hash_one(std::process::id());
        Self {
            store,
            ttl,
            holder: format!("pid{}-{:08x}", std::process::id(), salt as u32).into(),
            ledger: Arc::default(),
            root: CancellationToken::new(),
        }
    }

    /// The holds this process had and has, oldest first (the latest [`LEDGER`]).
    pub fn holds(&self) -> Vec<Hold> {
        let ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        ledger.iter().cloned().collect()
    }

    fn hold_began(&self, job: &str, token: u64) {
        let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        if ledger.len() == LEDGER {
            ledger.pop_front();
        }
        ledger.push_back(Hold {
            job: job.to_owned(),
            holder: self.holder.to_string(),
            token,
            from_ms: unix_ms(),
            until_ms: None,
            ended: None,
        });
    }

    /// Called before anything else may take the lease (before the release reaches the store,
    /// when the loss is noticed), so the window covers all the time this process relied on it.
    fn hold_ended(&self, job: &str, token: u64, why: &str) {
        let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hold) = ledger
            .iter_mut()
            .rev()
            .find(|h| h.job == job && h.token == token && h.until_ms.is_none())
        {
            hold.until_ms = Some(unix_ms());
            hold.ended = Some(why.to_owned());
        }
    }

    /// This process's holder name.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The same leases with their renewal tasks under `root`, the process's cancellation. The
    /// supervisor cancels it only once every service has stopped, so a job still finishing
    /// within its grace keeps its lease renewed.
    pub fn under(mut self, root: &CancellationToken) -> Self {
        self.root = root.clone();
        self
    }

    /// The lease of `job`; `shutdown` ends waiting for it.
    pub fn lease(&self, job: &str, shutdown: CancellationToken) -> Lease {
        Lease {
            leases: self.clone(),
            job: job.into(),
            shutdown,
        }
    }

    fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// How long before the store would expire the lease its holder stops relying on it.
    fn margin(&self) -> Duration {
        (self.ttl / 10).max(Duration::from_millis(500))
    }
}

/// One job's lease, before it is held.
pub struct Lease {
    leases: Leases,
    job: Arc<str>,
    shutdown: CancellationToken,
}

impl Lease {
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Waits until this process holds the lease; `None` once shutdown begins.
    pub async fn acquired(&self) -> Option<LeaseGuard> {
        let leases = &self.leases;
        let retry = leases.renew_every().min(MAX_RETRY);
        let mut warned = false;
        loop {
            if self.shutdown.is_cancelled() {
                return None;
            }
            let sent = Instant::now();
            let attempt = tokio::select! {
                () = self.shutdown.cancelled() => return None,
                r = leases.store.acquire(&self.job, &leases.holder) => r,
            };
            match attempt {
                Ok(Some(token)) => {
                    leases.hold_began(&self.job, token);
                    tracing::info!(job = %self.job, holder = %leases.holder, token, "lease acquired");
                    return Some(LeaseGuard::start(
                        leases.clone(),
                        self.job.clone(),
                        token,
                        sent + leases.ttl - leases.margin(),
                    ));
                }
                Ok(None) => warned = false,
                Err(e) => {
                    if !warned {
                        tracing::warn!(job = %self.job, error = %e, "cannot reach the lease store; retrying");
                        warned = true;
                    }
                }
            }
            tokio::select! {
                () = self.shutdown.cancelled() => return None,
                () = tokio::time::sleep(retry) => {}
            }
        }
    }
}

/// A held lease. Renews itself in the background until released, dropped or lost.
pub struct LeaseGuard {
    leases: Leases,
    job: Arc<str>,
    /// The token of the holder's last write; `None` once lost.
    token: Arc<Mutex<Option<u64>>>,
    /// The token of the take: this hold's fencing token, its entry in the ledger.
    taken: u64,
    lost: CancellationToken,
    stop: CancellationToken,
    released: bool,
}

impl LeaseGuard {
    fn start(leases: Leases, job: Arc<str>, token: u64, valid_until: Instant) -> Self {
        // `lost` is a signal to the holder, not a task's lifetime; `stop` ends the renewal.
        let lost = CancellationToken::new();
        let stop = leases.root.child_token();
        let taken = token;
        let token = Arc::new(Mutex::new(Some(token)));
        tokio::spawn(renew(
            leases.clone(),
            job.clone(),
            taken,
            token.clone(),
            valid_until,
            lost.clone(),
            stop.clone(),
        ));
        Self {
            leases,
            job,
            token,
            taken,
            lost,
            stop,
            released: false,
        }
    }

    /// Completes when the lease is lost (not renewed in time, or taken over); the job must
    /// stop starting new work then.
    pub async fn lost(&self) {
        self.lost.cancelled().await;
    }

    pub fn is_held(&self) -> bool {
        !self.lost.is_cancelled()
    }

    /// Gives the lease up now, so another holder can take it at its next try.
    pub async fn release(mut self) {
        self.released = true;
        self.stop.cancel();
        let token = self
            .token
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.lost.cancel();
        if let Some(token) = token {
            // Ended before the store hears of it: from here this holder runs nothing, and a
            // successor can take the lease as soon as the delete lands.
            self.leases.hold_ended(&self.job, self.taken, "released");
            tracing::info!(job = %self.job, "lease released");
            if let Err(e) = self.leases.store.release(&self.job, token).await {
                tracing::warn!(job = %self.job, error = %e, "lease release failed; it expires by itself");
            }
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop.cancel();
        self.lost.cancel();
        let token = self
            .token
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if token.is_some() {
            self.leases.hold_ended(&self.job, self.taken, "dropped");
        }
        // Best effort: without a runtime (process exit) the lease simply expires.
        if let (Some(token), Ok(rt)) = (token, tokio::runtime::Handle::try_current()) {
            let (store, job) = (self.leases.store.clone(), self.job.clone());
            rt.spawn(async move {
                let _ = store.release(&job, token).await;
            });
        }
    }
}

/// Renews every `ttl/3`; declares the lease lost when a renewal finds another holder, or when
/// none succeeded before `valid_until`.
async fn renew(
    leases: Leases,
    job: Arc<str>,
    taken: u64,
    token: Arc<Mutex<Option<u64>>>,
    mut valid_until: Instant,
    lost: CancellationToken,
    stop: CancellationToken,
) {
    let every = leases.renew_every();
    let mut next = Instant::now() + every;
    let reason = loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(valid_until) => break "not renewed in time",
            () = tokio::time::sleep_until(next) => {}
        }
        let Some(current) = *token.lock().unwrap_or_else(PoisonError::into_inner) else {
            return;
        };
        let sent = Instant::now();
        let result = tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(valid_until) => break "not renewed in time",
            r = leases.store.renew(&job, &leases.holder, current) => r,
        };
        match result {
            Ok(Some(new)) => {
                *token.lock().unwrap_or_else(PoisonError::into_inner) = Some(new);
                valid_until = sent + leases.ttl - leases.margin();
                next = sent + every;
            }
            Ok(None) => break "taken over",
            // Transient: try again soon, as long as the lease is still valid.
            Err(e) => {
                tracing::debug!(job = %job, error = %e, "lease renewal failed; retrying");
                next = Instant::now() + every.min(Duration::from_millis(500));
            }
        }
    };
    // A release racing this loss has taken the token and ended the hold itself.
    if token
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .is_none()
    {
        return;
    }
    leases.hold_ended(&job, taken, reason);
    tracing::warn!(job = %job, reason, "lease lost");
    lost.cancel();
}

/// A lease store. Tokens identify one holder's current write (a KV revision).
trait Store: Send + Sync + 'static {
    /// `Some(token)` if the lease was free and is now ours.
    fn acquire<'a>(
        &'a self,
        job: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, String>>;
    /// Extends a held lease: `Some(new token)`, or `None` if it is no longer ours.
    fn renew<'a>(
        &'a self,
        job: &'a str,
        holder: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, String>>;
    /// Frees the lease if `token` is still the current one.
    fn release<'a>(&'a self, job: &'a str, token: u64) -> BoxFuture<'a, Result<(), String>>;
}

/// In one process there is no crash to outlive: a lease is held until released or dropped.
#[derive(Default)]
struct MemoryStore {
    held: Mutex<HashMap<String, u64>>,
    next: std::sync::atomic::AtomicU64,
}

impl Store for MemoryStore {
    fn acquire<'a>(
        &'a self,
        job: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, String>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let result = if held.contains_key(job) {
            None
        } else {
            let token = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            held.insert(job.to_owned(), token);
            Some(token)
        };
        Box::pin(async move { Ok(result) })
    }

    fn renew<'a>(
        &'a self,
        job: &'a str,
        _: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, String>> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let result = (held.get(job) == Some(&token)).then_some(token);
        Box::pin(async move { Ok(result) })
    }

    fn release<'a>(&'a self, job: &'a str, token: u64) -> BoxFuture<'a, Result<(), String>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.get(job) == Some(&token) {
            held.remove(job);
        }
        Box::pin(async { Ok(()) })
    }
}

/// `lease.<job>` in the registry's bucket; the token is the key's revision.
struct NatsStore {
    kv: NatsKv,
}

fn lease_key(job: &str) -> String {
    format!("lease.{job}")
}

impl Store for NatsStore {
    fn acquire<'a>(
        &'a self,
        job: &'a str,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, String>> {
        Box::pin(async move {
            match self
                .kv
                .create(&lease_key(job), holder.to_owned().into())
                .await
                .map_err(|e| e.to_string())?
            {
                Written::Ok(rev) => Ok(Some(rev)),
                Written::Conflict => Ok(None),
            }
        })
    }

    fn renew<'a>(
        &'a self,
        job: &'a str,
        holder: &'a str,
        token: u64,
    ) -> BoxFuture<'a, Result<Option<u64>, String>> {
        Box::pin(async move {
            match self
                .kv
                .update(&lease_key(job), holder.to_owned().into(), token)
                .await
                .map_err(|e| e.to_string())?
            {
                Written::Ok(rev) => Ok(Some(rev)),
                Written::Conflict => Ok(None),
            }
        })
    }

    fn release<'a>(&'a self, job: &'a str, token: u64) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            // A conflict means it already moved on: nothing of ours to free.
            self.kv
                .delete(&lease_key(job), Some(token))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_memory_lease_has_one_holder_and_moves_on_release() {
        let leases = Leases::memory(Duration::from_secs(3));
        let stop = CancellationToken::new();
        let a = leases.lease("job", stop.clone());
        let b = leases.lease("job", stop.clone());
        let held = a.acquired().await.expect("free lease");
        assert!(held.is_held());
        // b waits while a holds.
        let waiting = tokio::spawn(async move { b.acquired().await.map(|g| g.is_held()) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        held.release().await;
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(3), waiting)
                .await
                .unwrap()
                .unwrap(),
            Some(true)
        );
        // Shutdown ends the wait.
        let c = leases.lease("other", stop.clone());
        let _held = c.acquired().await.unwrap();
        let d = leases.lease("other", stop.clone());
        stop.cancel();
        assert!(d.acquired().await.is_none());
    }

    #[tokio::test]
    async fn the_ledger_records_each_hold_with_its_token_and_window() {
        let leases = Leases::memory(Duration::from_secs(3));
        let stop = CancellationToken::new();
        let first = leases.lease("job", stop.clone()).acquired().await.unwrap();
        first.release().await;
        let second = leases.lease("job", stop.clone()).acquired().await.unwrap();
        let holds = leases.holds();
        assert_eq!(holds.len(), 2, "{holds:?}");
        let (a, b) = (&holds[0], &holds[1]);
        assert!(a.token < b.token, "{holds:?}");
        assert_eq!(a.ended.as_deref(), Some("released"));
        assert!(
            a.until_ms
                .is_some_and(|until| until >= a.from_ms && until <= b.from_ms)
        );
        assert_eq!((b.until_ms, b.ended.as_deref()), (None, None));
        drop(second);
        let holds = leases.holds();
        assert_eq!(holds[1].ended.as_deref(), Some("dropped"));
    }
}
