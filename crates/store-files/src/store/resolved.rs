//! Path resolutions kept in memory while the database has not changed, for a database this
//! process alone writes.
//!
//! Why: nearly every request begins by resolving its path to a node, one query; on SQLite a
//! query is a round trip to the connection's worker thread, and those two thread hand-offs
//! were a third of a small GET's CPU (a 4 KiB GET: 261 → 170 µs of CPU, 2.5 → 0.8 context
//! switches, measured with every resolution served from memory).
//!
//! Why a cached resolution is never stale: it is only kept for a database no other process
//! writes (a SQLite file, locked by the store while open), and every commit in this process is
//! counted once it is over (`Db::count_changes`). An entry is stored under the count read
//! *before* its query and served only while the count stands still: a commit that lands after
//! that read moves the count on, so what the query may have seen before it is never served
//! after it. Any commit empties the cache; that is crude, and cheap next to what a read costs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::model::{Node, Space};

/// At most this many resolutions (a few KiB each): a full cache starts over.
const MAX_ENTRIES: usize = 16_384;

/// The cache; one per [`Store`](crate::Store) that owns its database.
pub(crate) struct Resolved {
    changes: Arc<AtomicU64>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The change count the entries were read at.
    at: u64,
    entries: HashMap<String, (Option<Space>, Node)>,
}

/// What a resolution is keyed by: a path in a user's personal space, or in a space by id.
pub(crate) enum Key<'a> {
    Personal { owner: &'a str, path: &'a str },
    Space { space_id: &'a str, path: &'a str },
}

impl Key<'_> {
    fn text(&self) -> String {
        // NUL never occurs in an id, a user name or a path (`names` refuses it).
        match self {
            Key::Personal { owner, path } => format!("p\0{owner}\0{path}"),
            Key::Space { space_id, path } => format!("s\0{space_id}\0{path}"),
        }
    }
}

impl Resolved {
    pub(crate) fn new(changes: Arc<AtomicU64>) -> Self {
        Resolved {
            changes,
            state: Mutex::default(),
        }
    }

    /// The change count to read under: take it before the query whose result is [`put`](Self::put).
    pub(crate) fn now(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    pub(crate) fn get(&self, key: &Key<'_>) -> Option<(Option<Space>, Node)> {
        let now = self.now();
        let state = self.lock();
        if state.at != now {
            return None;
        }
        state.entries.get(&key.text()).cloned()
    }

    /// Keeps what a query started at change count `at` returned, unless something was
    /// committed since.
    pub(crate) fn put(&self, at: u64, key: &Key<'_>, value: (Option<Space>, Node)) {
        let mut state = self.lock();
        if self.now() != at || state.at > at {
            return;
        }
        if state.at != at || state.entries.len() >= MAX_ENTRIES {
            state.entries.clear();
            state.at = at;
        }
        state.entries.insert(key.text(), value);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock_plain(&self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeKind;

    fn node(etag: &str) -> Node {
        Node {
            id: "n".into(),
            space_id: "s".into(),
            parent_id: None,
            name: String::new(),
            kind: NodeKind::File,
            size: 0,
            mtime: std::time::UNIX_EPOCH,
            etag: etag.into(),
            checksums: None,
            created: std::time::UNIX_EPOCH,
            blob_id: None,
        }
    }

    const KEY: Key<'static> = Key::Space {
        space_id: "s",
        path: "/a",
    };

    #[test]
    fn an_entry_is_served_until_the_next_commit() {
        let changes = Arc::new(AtomicU64::new(0));
        let cache = Resolved::new(Arc::clone(&changes));
        let at = cache.now();
        cache.put(at, &KEY, (None, node("e1")));
        assert_eq!(cache.get(&KEY).map(|(_, n)| n.etag), Some("e1".into()));
        changes.fetch_add(1, Ordering::Release);
        assert!(cache.get(&KEY).is_none());
    }

    #[test]
    fn a_read_that_a_commit_overtook_is_not_kept() {
        let changes = Arc::new(AtomicU64::new(0));
        let cache = Resolved::new(Arc::clone(&changes));
        let at = cache.now();
        // The query ran, then a commit landed before its result was put.
        changes.fetch_add(1, Ordering::Release);
        cache.put(at, &KEY, (None, node("old")));
        assert!(cache.get(&KEY).is_none());
        // A slower reader of the old count cannot push out what a newer one keeps.
        let fresh = cache.now();
        cache.put(fresh, &KEY, (None, node("new")));
        cache.put(at, &KEY, (None, node("old")));
        assert_eq!(cache.get(&KEY).map(|(_, n)| n.etag), Some("new".into()));
    }
}
