//! The in-memory "network": services of this process, reachable by name without a socket.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use axum::Router;
use tokio_util::task::TaskTracker;

/// Routers of the services this process hosts, by service endpoint name (`mem://NAME`).
///
/// A caller in the same process gets the router itself and calls it as a tower service: the
/// request never touches a socket or an HTTP/2 codec, which is what makes the in-memory
/// transport ~20× cheaper than a Unix socket (see STACK.md).
#[derive(Clone, Default)]
pub struct MemHub {
    inner: Arc<RwLock<HashMap<String, MemTarget>>>,
}

/// One attached service: its router, and the tracker its in-flight calls hold so that shutdown
/// can wait for them exactly as a socket server waits for its connections.
#[derive(Clone)]
pub(crate) struct MemTarget {
    pub(crate) router: Router,
    pub(crate) tracker: TaskTracker,
}

impl MemHub {
    pub fn new() -> Self {
        Self::default()
    }

    /// Claims a name; fails if another service of this process already claimed it.
    pub(crate) fn reserve(&self, name: &str) -> bool {
        let mut map = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        if map.contains_key(name) {
            return false;
        }
        // A reserved name answers nothing until `attach`: callers see "unavailable".
        let tracker = TaskTracker::new();
        tracker.close();
        map.insert(
            name.to_owned(),
            MemTarget {
                router: Router::new(),
                tracker,
            },
        );
        true
    }

    pub(crate) fn attach(&self, name: &str, target: MemTarget) {
        let mut map = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        map.insert(name.to_owned(), target);
    }

    pub(crate) fn detach(&self, name: &str) {
        let mut map = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        map.remove(name);
    }

    /// The live target for `name`, if it is attached and not shutting down.
    pub(crate) fn get(&self, name: &str) -> Option<MemTarget> {
        let map = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        map.get(name).filter(|t| !t.tracker.is_closed()).cloned()
    }

    /// Whether a service of this name is hosted here and accepting calls.
    pub fn is_serving(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}
