//! Directory listings kept in memory and checked against the directory's etag.
//!
//! Why: sync clients ask for the same folders again and again (a PROPFIND of every folder whose
//! etag they see change, and of the unchanged ones on every poll), and reading 1,000 children
//! from the database was most of such a request's cost.
//!
//! Why a cached listing is never stale: every change to a child (a child added, removed,
//! renamed, moved away, its content, size or mtime changed) gives its parent a new etag in the
//! same transaction (`propagate`), and etags are random and never reused. A listing is cached
//! under the etag the caller read *before* the listing was read, so it shows that state or a
//! later one; once anything changes, the directory's etag moves on and the entry is never
//! served again. This holds across processes too (several storage-users on one PostgreSQL):
//! the etag is always read from the database, only the children come from memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::model::Node;

/// At most this many nodes across all cached listings (each listing also counts one for
/// itself, so empty ones are paid for): a few tens of MiB at worst.
const MAX_CACHED_NODES: usize = 50_000;
/// At most this many listings: eviction scans them all.
const MAX_DIRS: usize = 4_096;
/// A listing longer than this is read every time: it would push out many smaller ones.
const MAX_LISTING: usize = 10_000;

/// The cache; one per [`Store`](crate::Store).
#[derive(Default)]
pub(crate) struct ListingCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    by_dir: HashMap<String, Entry>,
    /// Sum of the cached listings' costs (see [`cost`]).
    nodes: usize,
    /// Bumped on every hit and insert: an entry's `used` orders eviction.
    clock: u64,
}

struct Entry {
    etag: String,
    /// The listing has every field (see `Store::list_children_with`).
    full: bool,
    children: Arc<Vec<Node>>,
    used: u64,
}

impl ListingCache {
    /// The children of `dir_id` cached under `etag`, if they carry what `full` asks for.
    pub(crate) fn get(&self, dir_id: &str, etag: &str, full: bool) -> Option<Arc<Vec<Node>>> {
        let mut state = self.lock();
        state.clock += 1;
        let clock = state.clock;
        let entry = state.by_dir.get_mut(dir_id)?;
        if entry.etag != etag || (full && !entry.full) {
            return None;
        }
        entry.used = clock;
        Some(Arc::clone(&entry.children))
    }

    /// Caches `children` of `dir_id` as read after its etag was `etag`, evicting the least
    /// recently used listings beyond the budget.
    pub(crate) fn put(&self, dir_id: &str, etag: &str, full: bool, children: Arc<Vec<Node>>) {
        if children.len() > MAX_LISTING {
            return;
        }
        let mut state = self.lock();
        state.clock += 1;
        let entry = Entry {
            etag: etag.to_owned(),
            full,
            used: state.clock,
            children,
        };
        let added = cost(&entry);
        if let Some(old) = state.by_dir.insert(dir_id.to_owned(), entry) {
            state.nodes -= cost(&old);
        }
        state.nodes += added;
        while state.nodes > MAX_CACHED_NODES || state.by_dir.len() > MAX_DIRS {
            let Some(oldest) = state
                .by_dir
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            if let Some(e) = state.by_dir.remove(&oldest) {
                state.nodes -= cost(&e);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock_plain(&self.state)
    }
}

/// What a cached listing counts against [`MAX_CACHED_NODES`].
fn cost(entry: &Entry) -> usize {
    entry.children.len() + 1
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::model::NodeKind;

    fn listing(n: usize) -> Arc<Vec<Node>> {
        let node = Node {
            id: "c".into(),
            space_id: "s".into(),
            parent_id: Some("d".into()),
            name: "n".into(),
            kind: NodeKind::File,
            size: 1,
            mtime: UNIX_EPOCH,
            etag: "e".into(),
            blob_id: None,
            checksums: None,
            created: UNIX_EPOCH,
        };
        Arc::new(vec![node; n])
    }

    #[test]
    fn served_only_under_the_etag_it_was_read_with() {
        let cache = ListingCache::default();
        cache.put("d", "e1", false, listing(3));
        assert_eq!(cache.get("d", "e1", false).map(|l| l.len()), Some(3));
        assert!(cache.get("d", "e2", false).is_none(), "another etag");
        assert!(
            cache.get("other", "e1", false).is_none(),
            "another directory"
        );
        assert!(
            cache.get("d", "e1", true).is_none(),
            "a lean listing is not a full one"
        );
        cache.put("d", "e2", true, listing(2));
        assert!(cache.get("d", "e1", false).is_none(), "replaced");
        assert_eq!(cache.get("d", "e2", false).map(|l| l.len()), Some(2));
        assert_eq!(cache.get("d", "e2", true).map(|l| l.len()), Some(2));
    }

    #[test]
    fn stays_within_its_budget_evicting_the_least_recently_used() {
        let cache = ListingCache::default();
        let dirs = ["a", "b", "c", "d", "e", "f", "g", "h"];
        // Eight listings that fill the budget exactly.
        let per = MAX_CACHED_NODES / dirs.len() - 1;
        for d in dirs {
            cache.put(d, "e", false, listing(per));
        }
        // "a" is used, so "b" is the oldest when "i" comes.
        assert!(cache.get("a", "e", false).is_some());
        cache.put("i", "e", false, listing(per));
        assert!(cache.get("b", "e", false).is_none());
        for d in ["a", "c", "d", "e", "f", "g", "h", "i"] {
            assert!(cache.get(d, "e", false).is_some(), "{d}");
        }
        assert!(cache.lock().nodes <= MAX_CACHED_NODES);
        cache.put("huge", "e", false, listing(MAX_LISTING + 1));
        assert!(cache.get("huge", "e", false).is_none(), "too long to cache");

        // Many empty listings: bounded by count.
        let cache = ListingCache::default();
        for i in 0..MAX_DIRS + 10 {
            cache.put(&format!("d{i}"), "e", false, listing(0));
        }
        assert_eq!(cache.lock().by_dir.len(), MAX_DIRS);
        assert!(cache.get("d0", "e", false).is_none(), "the oldest went");
        assert!(
            cache
                .get(&format!("d{}", MAX_DIRS + 9), "e", false)
                .is_some()
        );
    }
}
