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

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arca_transport::NatsKv;
use arca_transport::registry::nats::Written;
use futures::future::BoxFuture;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
        }
    }

    /// This process's holder name.
    pub fn holder(&self) -> &str {
        &self.holder
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
                    tracing::info!(job = %self.job, holder = %leases.holder, "lease acquired");
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
    lost: CancellationToken,
    stop: CancellationToken,
    released: bool,
}

impl LeaseGuard {
    fn start(leases: Leases, job: Arc<str>, token: u64, valid_until: Instant) -> Self {
        let token = Arc::new(Mutex::new(Some(token)));
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        tokio::spawn(renew(
            leases.clone(),
            job.clone(),
            token.clone(),
            valid_until,
            lost.clone(),
            stop.clone(),
        ));
        Self {
            leases,
            job,
            token,
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
            match self.leases.store.release(&self.job, token).await {
                Ok(()) => tracing::info!(job = %self.job, "lease released"),
                Err(e) => {
                    tracing::warn!(job = %self.job, error = %e, "lease release failed; it expires by itself")
                }
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
    token.lock().unwrap_or_else(PoisonError::into_inner).take();
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
}
