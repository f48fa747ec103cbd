//! arca-store: the store core both storage services build on. It owns no tables of its own.
//!
//! What it owns:
//! - the metadata database ([`db::Db`]): one `sqlx::AnyPool` over SQLite (WAL mode) or
//!   PostgreSQL, the same SQL for both, SQLite's write queue and reader connections, write
//!   transactions;
//! - the migration runner ([`schema`]): each owner's tables migrated on their own, recorded in a
//!   migrations table of their own, and databases made before the split into owners taken over
//!   in place;
//! - ids and time stamps ([`ids`]);
//! - the one error type, [`StoreError`], with its one mapping to an [`arca_proto::ErrorKind`]
//!   (hence to a gRPC status) and to an HTTP status (feature `status`).
//!
//! The owners: **arca-store-files** (storage-users: the space/node tree, blobs, uploads,
//! locks, trash, versions) and **arca-store-records** (storage-system: users, groups, app
//! tokens, the credential feed, share records). Each database holds only its owner's tables;
//! two owners may share one database (their tables do not overlap).

pub mod db;
mod error;
pub mod ids;
pub mod schema;
#[cfg(feature = "status")]
mod status;

pub use error::{BoxError, ChecksumAlgo, StoreError};
pub use schema::{Owner, Schema};

/// Result alias used throughout the stores.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Locks a mutex over plain in-memory state (maps, lists, counters) that no panic can leave
/// half-changed: a panic elsewhere while the lock was held leaves it usable, not poisoned.
pub fn lock_plain<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The metadata database of a storage service's config section: `database` when set, else a
/// SQLite file `meta.db` in `dir` (`DATA_DIR/<service name>`, which the caller creates).
pub fn database_url(section: &arca_config::StorageSection, dir: &std::path::Path) -> String {
    match &section.database {
        Some(url) => url.clone(),
        None => format!("sqlite://{}?mode=rwc", dir.join("meta.db").display()),
    }
}
