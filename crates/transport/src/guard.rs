//! What keeps retries from making an outage worse: a [`RetryBudget`] per channel (retries are
//! at most a fraction of first attempts, plus a small floor) and a [`Breaker`] per endpoint
//! (an endpoint that keeps failing to connect is left alone for a while instead of costing
//! every request a connect timeout).
//!
//! Both are deliberately simple and lock-light: they sit on every request's path.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

/// Retries allowed per first attempt, on average.
const RETRY_RATIO: f64 = 0.2;
/// Retries always allowed per second, so a quiet channel can still retry its few requests.
const RETRY_FLOOR_PER_SEC: f64 = 10.0;
/// Most retries saved up (a burst after a quiet spell).
const RETRY_MAX_BALANCE: f64 = 100.0;

/// Caps retry amplification: when a whole service fails, retries add at most
/// [`RETRY_RATIO`] of the traffic (plus the floor), not `max_attempts` times it.
pub(crate) struct RetryBudget {
    state: Mutex<BudgetState>,
}

struct BudgetState {
    balance: f64,
    refilled: Instant,
}

impl RetryBudget {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(BudgetState {
                balance: RETRY_FLOOR_PER_SEC,
                refilled: Instant::now(),
            }),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut BudgetState) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let elapsed = now.duration_since(s.refilled).as_secs_f64();
        s.balance = (s.balance + elapsed * RETRY_FLOOR_PER_SEC).min(RETRY_MAX_BALANCE);
        s.refilled = now;
        f(&mut s)
    }

    /// A first attempt: earns part of a retry.
    pub(crate) fn deposit(&self) {
        self.with(|s| s.balance = (s.balance + RETRY_RATIO).min(RETRY_MAX_BALANCE));
    }

    /// Whether a retry may go out now (and spends it if so).
    pub(crate) fn withdraw(&self) -> bool {
        self.with(|s| {
            if s.balance >= 1.0 {
                s.balance -= 1.0;
                true
            } else {
                false
            }
        })
    }
}

/// Consecutive failures that open the breaker.
pub(crate) const OPEN_AFTER: u32 = 5;
const COOLDOWN_MIN: Duration = Duration::from_millis(500);
const COOLDOWN_MAX: Duration = Duration::from_secs(30);

/// One endpoint's health as its callers saw it. Closed: requests go. Open (after
/// [`OPEN_AFTER`] consecutive failures): the endpoint is skipped while another can serve,
/// until its cooldown ends; then one request probes it (half-open) — success closes the
/// breaker, failure opens it again for twice as long.
pub(crate) struct Breaker {
    state: Mutex<BreakerState>,
}

#[derive(Default)]
struct BreakerState {
    failures: u32,
    open_until: Option<Instant>,
    cooldown: Duration,
    /// A probe is out after the cooldown: others keep skipping until it reports.
    probing: bool,
}

impl Default for Breaker {
    fn default() -> Self {
        Self {
            state: Mutex::new(BreakerState::default()),
        }
    }
}

impl Breaker {
    fn lock(&self) -> std::sync::MutexGuard<'_, BreakerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a request may go to this endpoint now. Takes the probe slot when the cooldown
    /// is over, so call it only for the endpoint about to be used.
    pub(crate) fn admit(&self) -> bool {
        let mut s = self.lock();
        match s.open_until {
            None => true,
            Some(until) if Instant::now() >= until && !s.probing => {
                s.probing = true;
                true
            }
            Some(_) => false,
        }
    }

    /// Whether the breaker is open (and not yet due for a probe): for picking endpoints.
    pub(crate) fn is_open(&self) -> bool {
        let s = self.lock();
        match s.open_until {
            None => false,
            Some(until) => s.probing || Instant::now() < until,
        }
    }

    pub(crate) fn success(&self) {
        let mut s = self.lock();
        if s.open_until.is_some() {
            tracing::info!("endpoint answers again; breaker closed");
        }
        *s = BreakerState::default();
    }

    /// A failure to reach the endpoint (connect refused or timed out, connection lost).
    /// Returns true when this failure opened the breaker.
    pub(crate) fn failure(&self) -> bool {
        let mut s = self.lock();
        s.failures = s.failures.saturating_add(1);
        let reopen = s.probing;
        if s.failures >= OPEN_AFTER || reopen {
            s.cooldown = if reopen {
                (s.cooldown * 2).clamp(COOLDOWN_MIN, COOLDOWN_MAX)
            } else {
                s.cooldown.max(COOLDOWN_MIN)
            };
            let opened = s.open_until.is_none();
            s.open_until = Some(Instant::now() + s.cooldown);
            s.probing = false;
            return opened;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_are_a_fraction_of_first_attempts_plus_a_floor() {
        let budget = RetryBudget::new();
        // The floor's starting balance lets a few retries through at once...
        let mut granted = 0;
        while budget.withdraw() {
            granted += 1;
        }
        assert!((10..=11).contains(&granted), "{granted}");
        // ... then 1,000 first attempts earn about 200 retries, not 2,000.
        for _ in 0..1000 {
            budget.deposit();
        }
        let mut granted = 0;
        while budget.withdraw() {
            granted += 1;
        }
        assert!(
            (100..=101).contains(&granted),
            "capped at the max balance: {granted}"
        );
    }

    #[test]
    fn a_breaker_opens_after_consecutive_failures_and_probes_after_the_cooldown() {
        let b = Breaker::default();
        for _ in 0..OPEN_AFTER - 1 {
            assert!(!b.failure());
        }
        // A success in between resets the count.
        b.success();
        for _ in 0..OPEN_AFTER - 1 {
            assert!(!b.failure());
            assert!(b.admit());
        }
        assert!(b.failure(), "the fifth in a row opens it");
        assert!(b.is_open());
        assert!(!b.admit());
        // After the cooldown exactly one probe goes; its failure doubles the cooldown.
        std::thread::sleep(COOLDOWN_MIN + Duration::from_millis(20));
        assert!(b.admit());
        assert!(!b.admit(), "one probe at a time");
        b.failure();
        std::thread::sleep(COOLDOWN_MIN + Duration::from_millis(20));
        assert!(!b.admit(), "the cooldown doubled");
        std::thread::sleep(COOLDOWN_MIN);
        assert!(b.admit());
        b.success();
        assert!(!b.is_open());
        assert!(b.admit() && b.admit());
    }
}
