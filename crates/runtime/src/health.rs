//! What each service of the process says about itself, and what `/readyz` reports from it.
//!
//! A service is ready only when every condition holds: its listeners are bound, it declared
//! itself ready (store open, caches warm…), every dependency answered its probe, and the
//! process is not draining. Nothing here is set on a timer or assumed: each condition is
//! written by the code that checked it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The lifecycle of one service task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Starting,
    Running,
    Stopping,
    Stopped,
    Failed,
}

#[derive(Default)]
struct Entry {
    phase: Option<Phase>,
    bound: bool,
    self_ready: bool,
    /// Why the service itself is not ready (bind error, store not open…).
    blocker: Option<String>,
    /// Dependency name → the last probe error, absent when the last probe succeeded.
    deps: BTreeMap<&'static str, Option<String>>,
    /// The public listeners as bound (a `:0` port as it was given).
    public: Vec<arca_transport::Endpoint>,
}

/// Shared health state of one process; cheap to clone.
#[derive(Clone, Default)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    services: Mutex<BTreeMap<&'static str, Entry>>,
    draining: AtomicBool,
    /// Milliseconds since the epoch of the supervisor loop's last turn, for `/healthz`.
    heartbeat: AtomicU64,
}

/// The `/readyz` body.
#[derive(Serialize, Debug)]
pub struct Report {
    pub status: &'static str,
    pub services: BTreeMap<&'static str, &'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reasons: BTreeMap<&'static str, String>,
}

impl Report {
    pub fn is_ready(&self) -> bool {
        self.status == "ready"
    }
}

impl Health {
    pub(crate) fn add(&self, name: &'static str, deps: &[&'static str]) {
        let mut map = self.lock();
        let entry = map.entry(name).or_default();
        entry.phase = Some(Phase::Starting);
        entry.deps = deps
            .iter()
            .map(|d| (*d, Some(NOT_CHECKED.to_owned())))
            .collect();
        metrics::gauge!("arca_service_ready", "service" => name).set(0.0);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Entry>> {
        self.inner
            .services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, name: &'static str, f: impl FnOnce(&mut Entry)) {
        let mut map = self.lock();
        let entry = map.entry(name).or_default();
        let before = entry_ready(entry, false);
        f(entry);
        let after = entry_ready(entry, false);
        if before != after {
            metrics::gauge!("arca_service_ready", "service" => name).set(if after {
                1.0
            } else {
                0.0
            });
            tracing::info!(service = name, ready = after, "readiness changed");
        }
    }

    pub(crate) fn set_phase(&self, name: &'static str, phase: Phase) {
        self.update(name, |e| e.phase = Some(phase));
    }

    pub(crate) fn set_bound(&self, name: &'static str, bound: bool) {
        self.update(name, |e| e.bound = bound);
    }

    pub(crate) fn set_blocker(&self, name: &'static str, reason: Option<String>) {
        self.update(name, |e| e.blocker = reason);
    }

    pub(crate) fn set_public(&self, name: &'static str, public: Vec<arca_transport::Endpoint>) {
        self.update(name, |e| e.public = public);
    }

    /// Where `name`'s public listeners are bound (empty until they are): how a test that asked
    /// for port 0 learns the proxy's port.
    pub fn public_endpoints(&self, name: &str) -> Vec<arca_transport::Endpoint> {
        self.lock()
            .get(name)
            .map(|e| e.public.clone())
            .unwrap_or_default()
    }

    pub(crate) fn set_self_ready(&self, name: &'static str, ready: bool) {
        self.update(name, |e| e.self_ready = ready);
    }

    pub(crate) fn set_dependency(
        &self,
        name: &'static str,
        dep: &'static str,
        error: Option<String>,
    ) {
        self.update(name, |e| {
            e.deps.insert(dep, error);
        });
    }

    /// Whether `name` is serving (bound and self-ready), regardless of its dependencies; this is
    /// what its probe answers to dependants.
    pub(crate) fn is_serving(&self, name: &str) -> bool {
        self.lock()
            .get(name)
            .is_some_and(|e| e.bound && e.self_ready && e.phase == Some(Phase::Running))
    }

    /// Whether `name` is fully ready (what its dependants' startup waits for).
    pub fn is_ready(&self, name: &str) -> bool {
        self.lock()
            .get(name)
            .is_some_and(|e| entry_ready(e, self.is_draining()))
    }

    pub(crate) fn set_draining(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
        for name in self.lock().keys() {
            metrics::gauge!("arca_service_ready", "service" => *name).set(0.0);
        }
    }

    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }

    pub(crate) fn beat(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.inner.heartbeat.store(now, Ordering::Relaxed);
    }

    /// Milliseconds since the supervisor loop last turned.
    pub fn since_heartbeat_ms(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        now.saturating_sub(self.inner.heartbeat.load(Ordering::Relaxed))
    }

    /// The readiness report of the whole process.
    pub fn report(&self) -> Report {
        let draining = self.is_draining();
        let map = self.lock();
        let mut services = BTreeMap::new();
        let mut reasons = BTreeMap::new();
        for (name, e) in map.iter() {
            let (state, reason) = describe(e, draining);
            services.insert(*name, state);
            if let Some(r) = reason {
                reasons.insert(*name, r);
            }
        }
        let ready = !map.is_empty() && services.values().all(|s| *s == "ready");
        Report {
            status: if draining {
                "draining"
            } else if ready {
                "ready"
            } else {
                "not ready"
            },
            services,
            reasons,
        }
    }
}

fn entry_ready(e: &Entry, draining: bool) -> bool {
    !draining
        && e.phase == Some(Phase::Running)
        && e.bound
        && e.self_ready
        && e.blocker.is_none()
        && e.deps.values().all(Option::is_none)
}

/// A dependency's error slot before its first probe has answered.
const NOT_CHECKED: &str = "not checked yet";

fn describe(e: &Entry, draining: bool) -> (&'static str, Option<String>) {
    match e.phase {
        Some(Phase::Failed) => return ("failed", e.blocker.clone()),
        Some(Phase::Stopped) => return ("stopped", None),
        Some(Phase::Stopping) => return ("draining", None),
        _ => {}
    }
    if draining {
        return ("draining", None);
    }
    if entry_ready(e, false) {
        return ("ready", None);
    }
    let reason = if let Some(b) = &e.blocker {
        b.clone()
    } else if !e.bound {
        "listeners not bound yet".to_owned()
    } else if let Some((dep, Some(err))) = e.deps.iter().find(|(_, err)| err.is_some()) {
        // Not "unreachable" before the first probe has answered: nobody knows that yet.
        if err == NOT_CHECKED {
            format!("dependency {dep} {NOT_CHECKED}")
        } else {
            format!("dependency {dep} unreachable: {err}")
        }
    } else {
        "starting".to_owned()
    };
    let state = if e.phase == Some(Phase::Starting) {
        "starting"
    } else {
        "not ready"
    };
    (state, Some(reason))
}

/// Hysteresis for dependency probes: one success makes a dependency healthy, but only this
/// many consecutive failures make a healthy one unhealthy, so one lost probe does not flap
/// readiness (and with it the load balancer).
pub(crate) const FAILURES_BEFORE_UNHEALTHY: u32 = 2;

/// For startup timing logs.
pub(crate) fn elapsed_ms(since: Instant) -> u128 {
    since.elapsed().as_millis()
}
