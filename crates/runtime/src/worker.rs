//! Background work: a [`Worker`] is a named job of a service (collect orphaned blobs, expire
//! abandoned uploads, publish queued events, follow a change feed) that the runtime starts
//! with the service ([`Context::spawn_worker`](crate::Context::spawn_worker)), paces by its
//! [`Schedule`], runs under a leader lease when it must run once per deployment, and stops at
//! the service's shutdown. Every worker shows in `/metrics`:
//!
//! - `arca_worker_runs_total{worker}`: steps finished (with or without an error);
//! - `arca_worker_errors_total{worker}`: steps that failed;
//! - `arca_worker_last_run_timestamp_seconds{worker}`: when the last step finished (Unix time);
//! - `arca_worker_active{worker}`: 1 while this process runs it (holds its lease, or needs
//!   none), 0 while it waits for the lease or has stopped.
//!
//! A worker logs what an operator must read (what it removed, an outage beginning and
//! ending); the runner counts, paces and backs off.
//!
//! Stopping: a worker waiting for its next step stops at once. A step that started is never
//! interrupted (a collection stopped between its claim and its deletes would strand what it
//! claimed), so a step that may wait a long time watches the shutdown itself. A worker fed by a
//! queue ([`Trigger::OnWork`]) first finishes what is at hand, as long as its steps succeed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::lease::{Lease, LeaseGuard};
use crate::service::ServiceError;

/// What one step of a worker left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// More work is at hand: step again at once.
    Busy,
    /// Nothing more now: wait for the next trigger.
    Idle,
    /// Nothing more ever: the worker ends.
    Done,
}

/// When a worker's steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Every `period`; the first step at once, or after one period.
    Every { period: Duration, at_once: bool },
    /// When [`Worker::wait_for_work`] says there is work (a queue, a subscription).
    OnWork,
}

/// A worker's pacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub trigger: Trigger,
    /// After a failed step: step again after a backoff from the first duration, doubling up to
    /// the second, reset by a step that succeeds. `None`: wait for the next trigger.
    pub retry: Option<(Duration, Duration)>,
    /// Run only while this process holds the leader lease named after the worker: a job over
    /// shared state (one database) runs once per deployment, not once per instance.
    pub leased: bool,
}

impl Schedule {
    /// Every `period`, first after one period; a failure waits for the next one.
    pub const fn every(period: Duration) -> Self {
        Self {
            trigger: Trigger::Every {
                period,
                at_once: false,
            },
            retry: None,
            leased: false,
        }
    }

    /// When there is work, retrying a failure with backoff from `min` to `max`.
    pub const fn on_work(min: Duration, max: Duration) -> Self {
        Self {
            trigger: Trigger::OnWork,
            retry: Some((min, max)),
            leased: false,
        }
    }

    /// The first step at once instead of after one period.
    pub const fn at_once(mut self) -> Self {
        if let Trigger::Every { period, .. } = self.trigger {
            self.trigger = Trigger::Every {
                period,
                at_once: true,
            };
        }
        self
    }

    /// Under the worker's leader lease.
    pub const fn leased(mut self) -> Self {
        self.leased = true;
        self
    }
}

/// A named background job; see the module docs.
pub trait Worker: Send + 'static {
    /// `service/job` (`storage-users/orphan-gc`): in logs, in `/metrics` and as the lease's
    /// name.
    fn name(&self) -> &'static str;

    fn schedule(&self) -> Schedule;

    /// One step of work. An error is counted and paced by [`Schedule::retry`].
    fn work(&mut self) -> BoxFuture<'_, Result<State, ServiceError>>;

    /// For [`Trigger::OnWork`]: completes when there is work (`true`), or when there never
    /// will be again (`false`: the worker ends). Must be cancel-safe: the runner drops it at
    /// shutdown or when the lease is lost (a `recv` on a tokio channel is).
    fn wait_for_work(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(std::future::pending())
    }
}

/// Why [`drive`] returned.
enum Ended {
    /// Shutdown, or the worker is done: stop for good.
    Stop,
    /// The lease was lost: wait to hold it again.
    LeaseLost,
}

/// Runs `worker` until `stop` is cancelled (or it is done), under its lease when its schedule
/// says so. `lease` is that lease (see [`Context::lease`](crate::Context::lease)); a worker
/// run outside a service, as a test does with an outbox, passes `None` and runs alone.
pub async fn run<W: Worker>(mut worker: W, lease: Option<Lease>, stop: CancellationToken) {
    let name = worker.name();
    let lease = lease.filter(|_| worker.schedule().leased);
    let Some(lease) = lease else {
        active(name, true);
        drive(&mut worker, None, &stop).await;
        active(name, false);
        return;
    };
    // `acquired` gives up (None) once shutdown begins.
    while let Some(guard) = lease.acquired().await {
        active(name, true);
        let ended = drive(&mut worker, Some(&guard), &stop).await;
        active(name, false);
        match ended {
            Ended::Stop => {
                guard.release().await;
                return;
            }
            Ended::LeaseLost => {}
        }
    }
}

fn active(name: &'static str, on: bool) {
    metrics::gauge!("arca_worker_active", "worker" => name).set(if on { 1.0 } else { 0.0 });
}

/// The worker's steps, paced, while `guard` (if any) is held.
async fn drive<W: Worker>(
    worker: &mut W,
    guard: Option<&LeaseGuard>,
    stop: &CancellationToken,
) -> Ended {
    let name = worker.name();
    let schedule = worker.schedule();
    let lost = async {
        match guard {
            Some(g) => g.lost().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(lost);
    let mut first = true;
    loop {
        // Wait for the next trigger.
        let wait = async {
            match schedule.trigger {
                Trigger::Every { at_once: true, .. } if first => true,
                Trigger::Every { period, .. } => {
                    tokio::time::sleep(period).await;
                    true
                }
                Trigger::OnWork => worker.wait_for_work().await,
            }
        };
        let woke = tokio::select! {
            // Work at hand goes before a stop.
            biased;
            woke = wait => Some(woke),
            () = stop.cancelled() => None,
            () = &mut lost => return Ended::LeaseLost,
        };
        let Some(woke) = woke else {
            if schedule.trigger == Trigger::OnWork {
                finish_at_hand(worker).await;
            }
            return Ended::Stop;
        };
        first = false;
        if !woke {
            return Ended::Stop;
        }
        // Steps until idle; the lease is checked before each, never during one.
        let mut backoff = schedule.retry.map(|(min, _)| min);
        loop {
            if guard.is_some_and(|g| !g.is_held()) {
                return Ended::LeaseLost;
            }
            let result = worker.work().await;
            record(name, result.is_err());
            match result {
                Ok(State::Busy) => {
                    backoff = schedule.retry.map(|(min, _)| min);
                }
                Ok(State::Idle) => break,
                Ok(State::Done) => return Ended::Stop,
                Err(e) => {
                    tracing::debug!(worker = name, error = %e, "worker step failed");
                    let (Some(wait), Some((_, max))) = (backoff, schedule.retry) else {
                        break;
                    };
                    tokio::select! {
                        () = stop.cancelled() => return Ended::Stop,
                        () = &mut lost => return Ended::LeaseLost,
                        () = tokio::time::sleep(wait) => {}
                    }
                    backoff = Some((wait * 2).min(max));
                }
            }
            if stop.is_cancelled() && schedule.trigger != Trigger::OnWork {
                return Ended::Stop;
            }
        }
    }
}

/// At shutdown, a queue-fed worker's remaining work, while its steps succeed.
async fn finish_at_hand<W: Worker>(worker: &mut W) {
    use futures::FutureExt as _;
    // Only what is already there: nobody waits for more.
    if worker.wait_for_work().now_or_never() != Some(true) {
        return;
    }
    loop {
        let result = worker.work().await;
        record(worker.name(), result.is_err());
        if !matches!(result, Ok(State::Busy)) {
            return;
        }
    }
}

fn record(name: &'static str, failed: bool) {
    metrics::counter!("arca_worker_runs_total", "worker" => name).increment(1);
    if failed {
        metrics::counter!("arca_worker_errors_total", "worker" => name).increment(1);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    metrics::gauge!("arca_worker_last_run_timestamp_seconds", "worker" => name).set(now);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Counts its steps; fails the first `fail` of them; has `queued` work at hand.
    struct Counter {
        steps: Arc<AtomicU32>,
        fail: u32,
        queued: u32,
        schedule: Schedule,
    }

    impl Worker for Counter {
        fn name(&self) -> &'static str {
            "test/counter"
        }

        fn schedule(&self) -> Schedule {
            self.schedule
        }

        fn work(&mut self) -> BoxFuture<'_, Result<State, ServiceError>> {
            Box::pin(async move {
                let n = self.steps.fetch_add(1, Ordering::SeqCst) + 1;
                if n <= self.fail {
                    return Err("failing".into());
                }
                if self.queued > 0 {
                    self.queued -= 1;
                }
                Ok(if self.queued > 0 {
                    State::Busy
                } else {
                    State::Idle
                })
            })
        }

        fn wait_for_work(&mut self) -> BoxFuture<'_, bool> {
            Box::pin(async move {
                if self.queued == 0 {
                    std::future::pending::<()>().await;
                }
                true
            })
        }
    }

    fn counter(schedule: Schedule, fail: u32, queued: u32) -> (Counter, Arc<AtomicU32>) {
        let steps = Arc::new(AtomicU32::new(0));
        let c = Counter {
            steps: steps.clone(),
            fail,
            queued,
            schedule,
        };
        (c, steps)
    }

    #[tokio::test(start_paused = true)]
    async fn an_interval_worker_steps_once_per_period_and_stops_at_once() {
        let (w, steps) = counter(Schedule::every(Duration::from_secs(10)), 0, 0);
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(w, None, stop.clone()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(steps.load(Ordering::SeqCst), 0, "not before one period");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(steps.load(Ordering::SeqCst), 3);
        stop.cancel();
        task.await.expect("worker task");
        assert_eq!(steps.load(Ordering::SeqCst), 3, "no step at shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn at_once_steps_before_the_first_period() {
        let (w, steps) = counter(Schedule::every(Duration::from_secs(10)).at_once(), 0, 0);
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(w, None, stop.clone()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(steps.load(Ordering::SeqCst), 1);
        stop.cancel();
        task.await.expect("worker task");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_step_is_retried_with_doubling_backoff() {
        let schedule = Schedule::on_work(Duration::from_millis(100), Duration::from_millis(400));
        let (w, steps) = counter(schedule, 4, 1);
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(w, None, stop.clone()));
        // Fails at 0, 100, 300, 700 (backoff 100, 200, 400, 400), succeeds at 1100.
        tokio::time::sleep(Duration::from_millis(1050)).await;
        assert_eq!(steps.load(Ordering::SeqCst), 4);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(steps.load(Ordering::SeqCst), 5);
        stop.cancel();
        task.await.expect("worker task");
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_fed_worker_finishes_what_is_at_hand_at_shutdown() {
        let (w, steps) = counter(
            Schedule::on_work(Duration::from_millis(100), Duration::from_secs(1)),
            0,
            3,
        );
        let stop = CancellationToken::new();
        stop.cancel();
        run(w, None, stop).await;
        assert_eq!(steps.load(Ordering::SeqCst), 3);
    }
}
