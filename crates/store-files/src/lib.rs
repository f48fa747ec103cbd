//! arca-store-files: the files store of storage-users.
//!
//! It owns a tree of **spaces** and **nodes** kept in a relational metadata store (SQLite in WAL
//! mode, or PostgreSQL — one code path over `sqlx::AnyPool`, through arca-store's database and
//! this crate's own migrations, run at [`Store::open`]) and the file contents kept as immutable
//! **blobs** in an `object_store`: a local directory by default, an S3 bucket by
//! [`BlobConfig::S3`], other backends through [`BlobStore::from_object_store`]. Only the `blob`
//! module knows which. Small bodies of a declared length ([`StoreConfig::inline_max`]) are
//! blobs too, whose bytes the metadata database holds, committed with their node. Beside the tree it keeps what storage-users' clients do to it: resumable
//! (TUS) uploads, chunked upload folders, WebDAV locks, dead properties, the trash and file
//! versions, and the collection of orphaned blobs.
//!
//! Its tables (spaces, nodes, blobs, props, space_details, locks, uploads, upload_parts,
//! upload_chunks, trash, versions) are its own: migrations in `migrations/`, recorded in
//! `_arca_files_migrations` (see `arca_store::schema`).
//!
//! Main types: [`Store`] (every operation), [`StoreConfig`], [`BlobConfig`], [`Space`],
//! [`Node`], [`PutOptions`], [`Download`], and arca-store's [`StoreError`].
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
//! codes in one place, arca-store's `status`.

mod blob;
mod checksum;
mod chunked;
mod db;
mod locks;
mod model;
mod names;
mod store;
mod uploads;

pub use arca_store::{Result, StoreError};
pub(crate) use arca_store::{ids, lock_plain};

pub use blob::{BlobConfig, BlobStore, S3Options};
pub use checksum::{ChecksumAlgo, Checksums};
pub use chunked::{FolderChunk, UploadFolder, natural_cmp};
pub use locks::Lock;
pub use model::{DeadProp, Node, NodeKind, Precheck, PropPatch, PutOptions, Space, SpaceKind};
pub use names::{numbered_name, validate_name};
pub use store::{
    Burst, BurstRules, Conflict, DEFAULT_INLINE_MAX, Download, Expired, Remover, RestoreFilter,
    RestoreRun, RestoreTally, Restored, SpaceUsage, Store, StoreConfig, TrashExpiry, TrashItem,
    Version, VersionRetention, VersionRules,
};
pub use store::{Member, MemberKind, Role, SpaceDetails, SpaceUpdate};
pub use uploads::{Appended, Upload, UploadPart};
