//! A service's readiness following a dependency of its own (its database): `/readyz` tells
//! the truth about whether the service can answer.
//!
//! A short loss is not reported: within `grace` (the service's `database_retry`) calls are
//! run again and succeed, so turning not-ready (and being taken out of the registry) would
//! only turn a wait into errors. A loss longer than that is: the service turns not-ready,
//! naming why, and ready again at the first answer.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::ServiceError;
use crate::health::Health;
use crate::worker::{Schedule, State, Worker};

/// How often the dependency is asked, and how long one answer may take.
const EVERY: Duration = Duration::from_secs(1);
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// A service's own readiness, for background work that decides it.
#[derive(Clone)]
pub struct Readiness {
    pub(crate) name: &'static str,
    pub(crate) health: Health,
}

impl Readiness {
    pub fn set_ready(&self) {
        self.health.set_self_ready(self.name, true);
        self.health.set_blocker(self.name, None);
    }

    pub fn set_not_ready(&self, reason: impl Into<String>) {
        self.health.set_self_ready(self.name, false);
        self.health.set_blocker(self.name, Some(reason.into()));
    }
}

/// The check of a dependency: `Ok` when it answers, else why not.
pub type Check = Box<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Asks `check` every second; see the module docs.
pub struct DependencyWatch {
    job: &'static str,
    what: &'static str,
    check: Check,
    readiness: Readiness,
    grace: Duration,
    failing_since: Option<Instant>,
    reported: bool,
}

impl DependencyWatch {
    /// `job`: the worker's name (`storage-users/database-watch`); `what`: the dependency as
    /// `/readyz` names it ("the metadata database").
    pub fn new(
        job: &'static str,
        what: &'static str,
        check: Check,
        readiness: Readiness,
        grace: Duration,
    ) -> Self {
        Self {
            job,
            what,
            check,
            readiness,
            grace,
            failing_since: None,
            reported: false,
        }
    }
}

impl Worker for DependencyWatch {
    fn name(&self) -> &'static str {
        self.job
    }

    fn schedule(&self) -> Schedule {
        Schedule::every(EVERY)
    }

    fn work(&mut self) -> BoxFuture<'_, Result<State, ServiceError>> {
        Box::pin(async move {
            let answer = match tokio::time::timeout(ANSWER_WITHIN, (self.check)()).await {
                Ok(answer) => answer,
                Err(_) => Err(format!("no answer within {ANSWER_WITHIN:?}")),
            };
            match answer {
                Ok(()) => {
                    self.failing_since = None;
                    if self.reported {
                        tracing::info!(dependency = self.what, "reachable again; ready");
                        self.readiness.set_ready();
                        self.reported = false;
                    }
                }
                Err(why) => {
                    let since = *self.failing_since.get_or_insert_with(Instant::now);
                    if !self.reported && since.elapsed() >= self.grace {
                        tracing::warn!(dependency = self.what, error = %why, "unreachable; not ready");
                        self.readiness
                            .set_not_ready(format!("{} is unreachable: {why}", self.what));
                        self.reported = true;
                    }
                }
            }
            Ok(State::Idle)
        })
    }
}
