//! arca-store: the storage machinery shared by storage-users and storage-system.
//!
//! It owns a tree of **spaces** and **nodes** kept in a relational metadata store (SQLite in WAL
//! mode, or PostgreSQL — one code path over `sqlx::AnyPool`, migrations run at [`Store::open`])
//! and the file contents kept as immutable **blobs** in an `object_store`: a local directory by
//! default, an S3 bucket by [`BlobConfig::S3`], other backends through
//! [`BlobStore::from_object_store`]. Only the `blob` module knows which.
//!
//! Main types: [`Store`] (every operation), [`StoreConfig`], [`BlobConfig`], [`Space`],
//! [`Node`], [`PutOptions`], [`Download`], [`StoreError`].
//!
//! The guarantees sync clients depend on, and where they are made:
//! - **Stable ids**: a node's id is random and never changes on rename or move.
//! - **Etag propagation**: every content or child change gives the node and every ancestor up to
//!   the space root a new etag, in the same transaction as the change, so a client sees change
//!   from the root's etag alone. Directory sizes are subtree sizes, maintained the same way.
//! - **Atomic writes**: [`Store::put_file`] streams the body to a *new* blob, makes it durable
//!   (synced on disk; on S3 a completed PUT is), and only then points the node at it in one
//!   transaction that also checks preconditions and quota. A failed, aborted or killed upload
//!   leaves the previous version intact; what it wrote is an orphan that
//!   [`Store::collect_orphans`] removes (on S3, the parts of a killed multipart upload are the
//!   bucket lifecycle rule's to remove: see [`BlobStore::s3`]).
//!
//! Nothing here knows about RPC or HTTP: errors are typed ([`StoreError`]) and mapped to status
//! codes by the callers.

mod apptokens;
mod blob;
mod checksum;
mod chunked;
mod credentials;
mod db;
mod error;
mod groups;
mod ids;
mod locks;
mod model;
mod names;
mod shares;
mod store;
mod uploads;
mod users;

/// Locks a mutex over plain in-memory state (maps, lists, counters) that no panic can leave
/// half-changed: a panic elsewhere while the lock was held leaves it usable, not poisoned.
fn lock_plain<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub use apptokens::AppToken;
pub use blob::{BlobConfig, BlobStore, S3Options};
pub use checksum::{ChecksumAlgo, Checksums};
pub use chunked::{FolderChunk, UploadFolder, natural_cmp};
pub use credentials::CredentialEvent;
pub use error::StoreError;
pub use groups::Group;
pub use locks::Lock;
pub use model::{DeadProp, Node, NodeKind, Precheck, PropPatch, PutOptions, Space, SpaceKind};
pub use names::{numbered_name, validate_name};
pub use shares::{ShareFilter, ShareRow};
pub use store::{
    Conflict, Download, Expired, RestoreFilter, RestoreRun, RestoreTally, Restored, SpaceUsage,
    Store, StoreConfig, TrashItem, Version, VersionRetention, VersionRules,
};
pub use store::{SpaceDetails, SpaceUpdate};
pub use uploads::{Appended, Upload, UploadPart};
pub use users::User;

/// Result alias used throughout the crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
