//! Which spaces changed, told over the bus as hints ([`arca_proto::HINT_SPACE_CHANGED`]) to
//! whoever listens: the search crawler, which then looks at those spaces at once.
//!
//! A write marks its space ([`Changes::mark`]: a map insert, no I/O on the request path). The
//! `storage-users/change-hints` worker sends one hint per marked space, then rests [`GAP`]
//! before its next round: however many writes a space takes, it is hinted at most once per
//! gap, so the bus's load follows the number of busy spaces, not the request rate. The first
//! write after a quiet spell is hinted at once.
//!
//! A write of one node (a file written, a folder made, something removed) marks that node
//! ([`Changes::mark_node`]) and the hint names it: the crawler then looks at those nodes, not
//! at every changed folder, whose listing grows with the folder (a PUT into a folder of
//! 100,000 files would have it list 100,000 entries). A move or a copy marks the node moved or
//! made and the one it replaced (the crawler walks a folder new at its path); a restore and
//! anything past [`MAX_NODES`] per gap mark the whole space, which the crawler walks by etags
//! as before.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arca_runtime::events::EventBus;
use arca_runtime::worker::{Schedule, State};
use arca_runtime::{BoxFuture, ServiceError, Worker};
use tokio::sync::Notify;

/// The least time between two hints of one space.
const GAP: Duration = Duration::from_millis(100);

/// Nodes named in one hint at most: past it the hint names the whole space (a hint stays a
/// small message; the crawler's walk is then the cheaper way anyway).
const MAX_NODES: usize = 1024;

/// What changed in one space since its last hint.
#[derive(Default)]
struct Marked {
    /// Anything may have: the crawler walks the space.
    whole: bool,
    /// The store ids of the nodes written or removed (empty when `whole`).
    nodes: HashSet<String>,
}

/// The spaces changed since the last round of hints; cloned into every request handler.
#[derive(Clone, Default)]
pub(crate) struct Changes {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    marked: Mutex<HashMap<String, Marked>>,
    /// Holds one wake-up for the worker when it is not waiting (a `Notify` permit).
    marked_some: Notify,
}

impl Changes {
    /// Anything in the space `space` (the store's id) may have changed (a move, a copy, a
    /// restore): the crawler walks it.
    pub(crate) fn mark(&self, space: &str) {
        self.update(space, |m| {
            m.whole = true;
            m.nodes = HashSet::new();
        });
    }

    /// The node `node` (the store's id) of `space` was written, made or removed. A node
    /// already marked costs two lookups, no allocation.
    pub(crate) fn mark_node(&self, space: &str, node: &str) {
        self.update(space, |m| {
            if m.whole || m.nodes.contains(node) {
                return;
            }
            if m.nodes.len() >= MAX_NODES {
                m.whole = true;
                m.nodes = HashSet::new();
            } else {
                m.nodes.insert(node.to_owned());
            }
        });
    }

    fn update(&self, space: &str, change: impl FnOnce(&mut Marked)) {
        let mut marked = self
            .shared
            .marked
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let first = match marked.get_mut(space) {
            Some(m) => {
                change(m);
                false
            }
            None => {
                let mut m = Marked::default();
                change(&mut m);
                marked.insert(space.to_owned(), m);
                true
            }
        };
        drop(marked);
        if first {
            self.shared.marked_some.notify_one();
        }
    }

    fn take(&self) -> HashMap<String, Marked> {
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
            for (space, marked) in self.changes.take() {
                let id = arca_proto::ids::space_id(self.provider, &space);
                let nodes: Vec<String> = marked
                    .nodes
                    .iter()
                    .map(|n| arca_proto::ids::node_id(self.provider, &space, n))
                    .collect();
                let key = arca_proto::space_hint_key(&id, nodes.iter().map(String::as_str));
                self.bus.hint(arca_proto::HINT_SPACE_CHANGED, &key).await;
            }
            tokio::time::sleep(GAP).await;
            Ok(State::Idle)
        })
    }
}
