//! Throttling of guesses (failed logins, wrong public-link passwords): failures counted per
//! key in a sliding window, used by the proxy and the sharing service.
//!
//! A caller counts each failure against several keys (a user name or link and the client
//! address): per account stops guessing one account from many addresses, per address stops
//! one client from trying many accounts. Only failures are counted, and a blocked key is
//! refused before any password is checked, so guessing costs the guesser time, not us CPU.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Keys kept at most; beyond it, keys with no failure inside the window are dropped.
const MAX_KEYS: usize = 100_000;

#[derive(Clone)]
pub struct Throttle {
    max_failures: usize,
    window: Duration,
    failures: Arc<Mutex<HashMap<String, VecDeque<Instant>>>>,
}

impl Throttle {
    /// Blocks a key after `max_failures` (at least 1) failures within `window`.
    pub fn new(max_failures: u32, window: Duration) -> Self {
        Self {
            max_failures: usize::try_from(max_failures.max(1)).unwrap_or(usize::MAX),
            window,
            failures: Arc::default(),
        }
    }

    /// How long until one of `keys` may try again, if any of them is blocked now.
    pub fn blocked(&self, keys: &[String]) -> Option<Duration> {
        let now = Instant::now();
        let map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        keys.iter()
            .filter_map(|k| map.get(k))
            .filter_map(|times| {
                let recent: Vec<&Instant> = times
                    .iter()
                    .filter(|t| now.duration_since(**t) < self.window)
                    .collect();
                // Blocked until the oldest failure that keeps the count at the limit ages out.
                (recent.len() >= self.max_failures).then(|| {
                    self.window.saturating_sub(
                        now.duration_since(*recent[recent.len() - self.max_failures]),
                    )
                })
            })
            .max()
    }

    /// Counts one failure against each of `keys`.
    pub fn failed(&self, keys: &[String]) {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_KEYS {
            map.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < self.window)
            });
        }
        for k in keys {
            let times = map.entry(k.clone()).or_default();
            while times
                .front()
                .is_some_and(|t| now.duration_since(*t) >= self.window)
            {
                times.pop_front();
            }
            times.push_back(now);
            // Older entries than the limit never matter.
            while times.len() > self.max_failures {
                times.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_after_the_limit_and_only_those_keys() {
        let t = Throttle::new(3, Duration::from_secs(60));
        let keys = vec!["u:bob".to_owned(), "ip:1.2.3.4".to_owned()];
        for _ in 0..2 {
            t.failed(&keys);
        }
        assert_eq!(t.blocked(&keys), None);
        t.failed(&keys);
        let wait = t.blocked(&keys).expect("blocked after 3 failures");
        assert!(
            wait > Duration::from_secs(58) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        assert_eq!(t.blocked(&["u:alice".to_owned()]), None);
        assert!(
            t.blocked(&["ip:1.2.3.4".to_owned()]).is_some(),
            "the address is blocked too"
        );
    }

    #[test]
    fn failures_age_out_of_the_window() {
        let t = Throttle::new(1, Duration::from_millis(1));
        t.failed(&["u:x".to_owned()]);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(t.blocked(&["u:x".to_owned()]), None);
    }
}
