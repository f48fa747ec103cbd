//! Wrong public-link passwords, throttled like logins (`proxy.auth.max_failures` within
//! `proxy.auth.window`): per link and per client address, so neither one link guessed from
//! many addresses nor one address guessing many links gets far. A blocked key is refused
//! before any hash is computed, so guessing costs the guesser time and us nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Keys kept at most; past it, keys whose failures all left the window are forgotten.
const MAX_KEYS: usize = 50_000;

#[derive(Clone)]
pub(crate) struct Throttle {
    limit: usize,
    window: Duration,
    keys: Arc<Mutex<HashMap<String, VecDeque<Instant>>>>,
}

impl Throttle {
    pub(crate) fn new(limit: u32, window: Duration) -> Self {
        Self {
            limit: usize::try_from(limit.max(1)).unwrap_or(usize::MAX),
            window,
            keys: Arc::default(),
        }
    }

    /// How long until every key in `keys` may try again; `None` when none is blocked.
    pub(crate) fn wait(&self, keys: &[String]) -> Option<Duration> {
        let now = Instant::now();
        let map = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.iter()
            .filter_map(|k| map.get(k))
            .filter_map(|times| {
                let recent: Vec<Instant> = times
                    .iter()
                    .copied()
                    .filter(|t| now.duration_since(*t) < self.window)
                    .collect();
                // Free again when the failure that keeps the count at the limit ages out.
                let n = recent.len();
                (n >= self.limit).then(|| {
                    self.window
                        .saturating_sub(now.duration_since(recent[n - self.limit]))
                })
            })
            .max()
    }

    pub(crate) fn failed(&self, keys: &[String]) {
        let now = Instant::now();
        let mut map = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_KEYS {
            map.retain(|_, t| {
                t.back()
                    .is_some_and(|t| now.duration_since(*t) < self.window)
            });
        }
        for k in keys {
            let times = map.entry(k.clone()).or_default();
            times.push_back(now);
            while times.len() > self.limit {
                times.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_at_the_limit_per_key() {
        let t = Throttle::new(2, Duration::from_secs(60));
        let a = vec!["link:a".to_owned(), "addr:1".to_owned()];
        assert_eq!(t.wait(&a), None);
        t.failed(&a);
        assert_eq!(t.wait(&a), None);
        t.failed(&a);
        assert!(t.wait(&a).is_some_and(|d| d > Duration::from_secs(50)));
        // The same address on another link is blocked too; another address is not.
        assert!(t.wait(&["link:b".into(), "addr:1".into()]).is_some());
        assert_eq!(t.wait(&["link:b".into(), "addr:2".into()]), None);
    }

    #[test]
    fn failures_age_out() {
        let t = Throttle::new(1, Duration::from_millis(1));
        t.failed(&["k".into()]);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(t.wait(&["k".into()]), None);
    }
}
