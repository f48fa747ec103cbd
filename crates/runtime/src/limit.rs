//! Bounds on the work a burst of user requests makes toward shared dependencies (the database,
//! storage-system, the registry): the "100 volumes at once" lesson, where every one of N
//! requests did M control-plane calls at the same moment and the control plane fell over.
//!
//! - [`Limiter`]: at most `concurrency` pieces of work at once, started at most `rate` per
//!   second with bursts of `burst` (a [`TokenBucket`]). Callers past the bound wait, in
//!   order; nothing is refused, so a burst becomes a queue instead of a stampede.
//! - [`SingleFlight`]: concurrent calls for one key run the work once; the others wait for
//!   and share its result (50 first requests of one user provision one space, not 50).
//!
//! Both keep no per-request state beyond the call, and both export metrics by the name they
//! are given: `arca_limiter_admitted_total{limit}`, `arca_limiter_wait_seconds{limit}` (how
//! long work waited for its slot and token) and `arca_limiter_in_flight{limit}`.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

/// A token bucket written as GCRA (a "theoretical arrival time"): one token every
/// `1/rate`, at most `burst` saved up while idle. [`take`](Self::take) reserves the next
/// token and sleeps until it is due, so waiters are served in the order they asked and
/// nobody polls.
#[derive(Debug)]
pub struct TokenBucket {
    /// Time between two tokens.
    every: Duration,
    /// How far behind "now" the next token may lie: `burst − 1` intervals, so that `burst`
    /// takes in a row after a long idle time are all immediate.
    slack: Duration,
    /// When the next token is due.
    next: Mutex<Instant>,
}

impl TokenBucket {
    /// `rate` tokens per second (at least 1), bursts of `burst` (at least 1).
    pub fn new(rate: u32, burst: u32) -> Self {
        let every = Duration::from_secs(1) / rate.max(1);
        let slack = every * (burst.max(1) - 1);
        let now = Instant::now();
        Self {
            every,
            slack,
            // Full at the start: `burst` takes right away.
            next: Mutex::new(now.checked_sub(slack).unwrap_or(now)),
        }
    }

    /// Reserves a token and returns when it is due. Dropping the future while it waits
    /// forfeits the token: the rate stays bounded, it is only one token lower.
    pub async fn take(&self) {
        let due = self.reserve(Instant::now());
        tokio::time::sleep_until(due).await;
    }

    /// Reserves the next token as of `now`; returns when it is due (`now` if at once).
    fn reserve(&self, now: Instant) -> Instant {
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        // Idle time saves up at most `burst` tokens.
        let earliest = now.checked_sub(self.slack).unwrap_or(now);
        let due = (*next).max(earliest);
        *next = due + self.every;
        due.max(now)
    }
}

/// How much work a [`Limiter`] admits; `arca_config::WorkLimits` in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// At most this many at once (at least 1).
    pub concurrency: u32,
    /// At most this many starts per second (at least 1)…
    pub rate: u32,
    /// …with up to this many at once after an idle time (at least 1).
    pub burst: u32,
}

impl From<&arca_config::WorkLimits> for Limits {
    fn from(l: &arca_config::WorkLimits) -> Self {
        Self {
            concurrency: l.concurrency,
            rate: l.rate,
            burst: l.burst,
        }
    }
}

/// A concurrency bound and a rate bound on one kind of work. Cheap to clone; clones share
/// the bounds.
#[derive(Clone, Debug)]
pub struct Limiter {
    inner: Arc<LimiterInner>,
}

#[derive(Debug)]
struct LimiterInner {
    name: &'static str,
    permits: Semaphore,
    bucket: TokenBucket,
}

impl Limiter {
    /// `name` labels the metrics (`limit="NAME"`), e.g. `storage-users/personal-space`.
    pub fn new(name: &'static str, limits: Limits) -> Self {
        Self {
            inner: Arc::new(LimiterInner {
                name,
                permits: Semaphore::new(limits.concurrency.max(1) as usize),
                bucket: TokenBucket::new(limits.rate, limits.burst),
            }),
        }
    }

    /// Runs `work` once a concurrency slot is free and a rate token is due.
    ///
    /// The slot is taken first and the token second: a token is only spent by work that can
    /// start at once, so a long queue for slots does not save tokens up into a bigger burst.
    pub async fn run<T>(&self, work: impl Future<Output = T>) -> T {
        let inner = &*self.inner;
        let asked = Instant::now();
        // The semaphore is never closed, so `acquire` cannot fail; if it ever did, running
        // unbounded is better than failing the user's request.
        let _permit = inner.permits.acquire().await.ok();
        inner.bucket.take().await;
        let waited = asked.elapsed();
        metrics::counter!("arca_limiter_admitted_total", "limit" => inner.name).increment(1);
        metrics::histogram!("arca_limiter_wait_seconds", "limit" => inner.name)
            .record(waited.as_secs_f64());
        let in_flight = metrics::gauge!("arca_limiter_in_flight", "limit" => inner.name);
        in_flight.increment(1.0);
        // Decremented however `work` ends, cancellation included.
        let _done = Decrement(in_flight);
        work.await
    }
}

struct Decrement(metrics::Gauge);

impl Drop for Decrement {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Counts one first-use creation (`what`: `user`, `space`) in
/// `arca_provisioning_total{what,result}`; `result` is `provisioned` (this call ran it),
/// `joined` (it shared a concurrent call's run, see [`SingleFlight`]), `found` (its run found
/// the thing already made, by a run that ended just before) or `failed`.
pub fn count_provisioning(what: &'static str, result: &'static str) {
    metrics::counter!("arca_provisioning_total", "what" => what, "result" => result).increment(1);
}

/// Whether a [`SingleFlight`] call ran the work itself or shared another call's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flight {
    Led,
    Joined,
}

/// Concurrent calls for one key share one run of the work.
pub struct SingleFlight<K, V> {
    calls: Mutex<HashMap<K, Call<V>>>,
    next_id: AtomicU64,
}

struct Call<V> {
    id: u64,
    result: watch::Receiver<Option<V>>,
}

impl<K, V> Default for SingleFlight<K, V> {
    fn default() -> Self {
        Self {
            calls: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }
}

impl<K, V> SingleFlight<K, V>
where
    K: Hash + Eq + Clone,
    V: Clone,
{
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `work` unless a call for `key` is already running, in which case its result is
    /// awaited and returned. A leader that is cancelled hands the work to one of the waiters
    /// (it runs `work` then), so cancelling one request never fails the others.
    ///
    /// Results are not kept once the run ends: a call after it runs the work again (which
    /// then finds what the first run made).
    pub async fn run<F, Fut>(&self, key: K, work: F) -> (V, Flight)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        let mut work = Some(work);
        loop {
            let (mut waiting, lead) = {
                let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
                match calls.get(&key) {
                    Some(call) => (call.result.clone(), None),
                    None => {
                        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                        let (tx, rx) = watch::channel(None);
                        calls.insert(
                            key.clone(),
                            Call {
                                id,
                                result: rx.clone(),
                            },
                        );
                        (rx, Some((id, tx)))
                    }
                }
            };
            if let Some((id, tx)) = lead {
                // Removed however the run ends; waiters see the sender gone if it was
                // cancelled, and try again.
                let _registered = Registered {
                    flights: self,
                    key: key.clone(),
                    id,
                };
                let Some(work) = work.take() else {
                    // Unreachable: a call leads at most once, since leading returns.
                    continue;
                };
                let value = work().await;
                let _ = tx.send(Some(value.clone()));
                return (value, Flight::Led);
            }
            match waiting.wait_for(Option::is_some).await {
                Ok(value) => {
                    if let Some(value) = value.clone() {
                        return (value, Flight::Joined);
                    }
                }
                // The leader was cancelled before it finished: one of us leads now.
                Err(_) => continue,
            }
        }
    }

    /// Calls running now (for tests and status pages).
    pub fn running(&self) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Removes a leader's entry when its run ends, unless a newer call replaced it.
struct Registered<'a, K: Hash + Eq, V> {
    flights: &'a SingleFlight<K, V>,
    key: K,
    id: u64,
}

impl<K: Hash + Eq, V> Drop for Registered<'_, K, V> {
    fn drop(&mut self) {
        let mut calls = self
            .flights
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if calls.get(&self.key).is_some_and(|c| c.id == self.id) {
            calls.remove(&self.key);
        }
    }
}

/// Raises this process's soft limit of open files to the hard one, as Go's runtime and nginx's
/// `worker_rlimit_nofile` do, and returns the soft limit now in effect: every client
/// connection, pooled connection and blob being written is a descriptor, and distributions
/// still start processes with a soft limit of 1,024 while allowing far more. 10,000 clients
/// logging in at once after an outage must not meet EMFILE (an accept loop that fails) when
/// the system would allow them. The supervisor calls it at start; `arca-bench` for its clients.
pub fn raise_open_files() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit = raised;
        }
    }
    Ok(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test(start_paused = true)]
    async fn a_bucket_allows_the_burst_then_the_rate() {
        let bucket = TokenBucket::new(10, 5);
        let start = Instant::now();
        let mut due = Vec::new();
        for _ in 0..15 {
            due.push(bucket.reserve(start) - start);
        }
        // Five at once, then one every 100 ms.
        let ms: Vec<u128> = due.iter().map(Duration::as_millis).collect();
        assert_eq!(ms[..5], [0, 0, 0, 0, 0]);
        assert_eq!(ms[5..], [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_saves_at_most_the_burst() {
        let bucket = TokenBucket::new(10, 3);
        let start = Instant::now();
        let later = start + Duration::from_secs(60);
        let due: Vec<u128> = (0..5)
            .map(|_| (bucket.reserve(later) - later).as_millis())
            .collect();
        assert_eq!(due, [0, 0, 0, 100, 200]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_limiter_bounds_concurrency_and_rate() {
        let limiter = Limiter::new(
            "test",
            Limits {
                concurrency: 2,
                rate: 20,
                burst: 4,
            },
        );
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let (limiter, running, peak) = (limiter.clone(), running.clone(), peak.clone());
                tokio::spawn(async move {
                    limiter
                        .run(async {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            running.fetch_sub(1, Ordering::SeqCst);
                        })
                        .await;
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(peak.load(Ordering::SeqCst), 2);
        // 4 at once, the other 16 at 20/s: the last starts at 800 ms.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(800), "{took:?}");
        assert!(took < Duration::from_millis(900), "{took:?}");
    }

    #[tokio::test]
    async fn concurrent_calls_for_one_key_run_once() {
        let flights = Arc::new(SingleFlight::<String, u32>::new());
        let runs = Arc::new(AtomicUsize::new(0));
        // Closed until every task has started; then open for good.
        let gate = Arc::new(Semaphore::new(0));
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let (flights, runs, gate) = (flights.clone(), runs.clone(), gate.clone());
                tokio::spawn(async move {
                    flights
                        .run("alice".to_owned(), || async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            let _ = gate.acquire().await;
                            7
                        })
                        .await
                })
            })
            .collect();
        // One thread: after these yields every task has started, and all wait on the one
        // run, which waits on the gate.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        gate.add_permits(Semaphore::MAX_PERMITS / 2);
        let mut led = 0;
        for t in tasks {
            let (value, flight) = t.await.unwrap();
            assert_eq!(value, 7);
            led += usize::from(flight == Flight::Led);
        }
        assert_eq!((runs.load(Ordering::SeqCst), led), (1, 1));
        assert_eq!(flights.running(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_leader_hands_the_work_on() {
        let flights = Arc::new(SingleFlight::<u8, &'static str>::new());
        let leader = {
            let flights = flights.clone();
            tokio::spawn(async move { flights.run(1, std::future::pending::<&'static str>).await })
        };
        while flights.running() == 0 {
            tokio::task::yield_now().await;
        }
        let follower = {
            let flights = flights.clone();
            tokio::spawn(async move { flights.run(1, || async { "done" }).await })
        };
        tokio::task::yield_now().await;
        leader.abort();
        let (value, flight) = follower.await.unwrap();
        assert_eq!((value, flight), ("done", Flight::Led));
        assert_eq!(flights.running(), 0);
    }
}
