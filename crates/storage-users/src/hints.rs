//! Which spaces changed, told over the bus as hints ([`arca_proto::HINT_SPACE_CHANGED`]) to
//! whoever listens: the search crawler, which then looks at those spaces at once.
//!
//! A write marks its space ([`Changes::mark`]: a set insert, no I/O on the request path). The
//! `storage-users/change-hints` worker sends one hint per marked space, then rests [`GAP`]
//! before its next round: however many writes a space takes, it is hinted at most once per
//! gap, so the bus's load follows the number of busy spaces, not the request rate. The first
//! write after a quiet spell is hinted at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arca_runtime::events::EventBus;
use arca_runtime::worker::{Schedule, State};
use arca_runtime::{BoxFuture, ServiceError, Worker};
use tokio::sync::Notify;

/// The least time between two hints of one space.
const GAP: Duration = Duration::from_millis(100);

/// The spaces changed since the last round of hints; cloned into every request handler.
#[derive(Clone, Default)]
pub(crate) struct Changes {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    marked: Mutex<HashSet<String>>,
    /// Holds one wake-up for the worker when it is not waiting (a `Notify` permit).
    marked_some: Notify,
}

impl Changes {
    /// The space `space` (the store's id) changed. A write to a space already marked costs a
    /// set lookup, no allocation.
    pub(crate) fn mark(&self, space: &str) {
        let mut marked = self
            .shared
            .marked
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if marked.contains(space) {
            return;
        }
        marked.insert(space.to_owned());
        drop(marked);
        self.shared.marked_some.notify_one();
    }

    fn take(&self) -> HashSet<String> {
        std::mem::take(
            &mut *self
                .shared
                .marked
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// Sends the hints; see the module docs.
pub(crate) struct HintWorker {
    pub(crate) changes: Changes,
    pub(crate) bus: Arc<dyn EventBus>,
    /// The provider's name, which a hinted space id carries (`PROVIDER$SPACE`).
    pub(crate) provider: &'static str,
}

impl Worker for HintWorker {
    fn name(&self) -> &'static str {
        "storage-users/change-hints"
    }

    // Not leased: each instance hints the writes it took.
    fn schedule(&self) -> Schedule {
        Schedule::on_work(GAP, GAP)
    }

    fn wait_for_work(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async {
            self.changes.shared.marked_some.notified().await;
            true
        })
    }

    fn work(&mut self) -> BoxFuture<'_, Result<State, ServiceError>> {
        Box::pin(async {
            for space in self.changes.take() {
                let id = arca_proto::ids::space_id(self.provider, &space);
                self.bus.hint(arca_proto::HINT_SPACE_CHANGED, &id).await;
            }
            tokio::time::sleep(GAP).await;
            Ok(State::Idle)
        })
    }
}
