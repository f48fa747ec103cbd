//! [`Store`]: opening, spaces, reads, and the transaction helpers every write shares.
//!
//! Concurrency model: every write to a space's tree runs in one transaction that first bumps the
//! space's row (`UPDATE spaces SET seq = seq + 1`). On PostgreSQL that row lock serialises the
//! writers of one space, so the checks made inside the transaction (name free, parent present,
//! quota, etag precondition, no cycle) hold until commit even at READ COMMITTED — and since every
//! write also updates the root's etag, the root row would serialise them anyway; taking the space
//! row first gives one lock order and no deadlocks. On SQLite writers are serialised globally
//! (see `Db::write_lock`).

mod bursts;
pub(crate) mod commit;
mod gc;
mod inline_reads;
mod listing;
mod members;
#[cfg(test)]
mod plans;
mod props;
mod put;
mod resolved;
mod spaces;
mod trash;
mod tree;
mod versions;

use std::path::PathBuf;
use std::sync::Arc;

use sqlx::AnyConnection;
use sqlx::Row;

use crate::blob::{BlobConfig, BlobStore};
use crate::db::{
    Cols, Db, Dialect, db_size, node_cols, node_from_row, node_from_row_at, space_cols,
    space_from_row,
};
use crate::ids::{new_id, now_ns};
use crate::model::{Node, NodeKind, Space, SpaceKind};
use crate::names::segments;
use crate::{Result, StoreError};
pub(crate) use inline_reads::Arg;

pub use bursts::{Burst, BurstRules};
pub use members::{Member, MemberKind, Role};
pub use put::Download;
pub(crate) use put::Written;
pub use spaces::{SpaceDetails, SpaceUpdate};
pub use trash::{
    Conflict, Remover, RestoreFilter, RestoreRun, RestoreTally, Restored, SpaceUsage, TrashExpiry,
    TrashItem,
};
pub use versions::{Expired, Version, VersionRetention, VersionRules};

/// How to open a [`Store`].
///
/// Open one `Store` per SQLite file per process and share it (it is `Clone`): writers of one
/// `Store` queue in process, while two `Store`s on one file would contend through SQLite's busy
/// handler. A relative SQLite path is relative to the working directory; its directory must exist.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `sqlite://PATH?mode=rwc` or `postgres://USER@HOST:PORT/DB`.
    pub db_url: String,
    /// Where blobs live: a local directory or an S3 bucket.
    pub blobs: BlobConfig,
    /// Pool size; default 8 for SQLite (one writer plus readers), 16 for PostgreSQL.
    pub max_db_connections: Option<u32>,
    /// Quota given to personal spaces when they are created; `None` = unlimited.
    pub default_personal_quota: Option<u64>,
    /// Labels this store's metrics (`arca_db_operations_total{store}`); the service's name.
    pub name: String,
    /// This process is the only writer of a SQLite database: path resolutions are then kept
    /// in memory between commits (see `resolved`), and the file is locked (`FILE.lock`) while
    /// the store is open, so a second process that opens it waits for the first to close it.
    /// Ignored for PostgreSQL, whose other clients may write at any time.
    pub sole_writer: bool,
    /// Which overwritten contents are kept as versions; `None`: none (an overwrite releases
    /// the old blob). See `versions`.
    pub versions: Option<VersionRules>,
    /// What a copy or move that replaces its target does with the target: into the trash
    /// (`true`; a file replaced by a file becomes a version instead when `versions` keeps it),
    /// or removed for good. Explicit removals choose themselves: [`Store::trash`] or
    /// [`Store::delete`].
    pub trash: bool,
    /// How long the writer tries a batch again that failed before its commit because the
    /// database was out of reach (a restart); zero: not at all.
    pub write_retry: std::time::Duration,
    /// Bodies of at most this many bytes, declared up front, are kept in the metadata
    /// database and committed with their node (see `put`); zero: every body goes to the
    /// blob store.
    pub inline_max: u64,
}

/// [`StoreConfig::inline_max`] unless set: a 64 KiB body costs the database about what a
/// file create, fdatasync and directory entry cost the file system.
pub const DEFAULT_INLINE_MAX: u64 = 64 * 1024;

impl StoreConfig {
    /// Blobs in the local directory `blob_dir`; nothing else set.
    pub fn new(db_url: impl Into<String>, blob_dir: impl Into<PathBuf>) -> Self {
        Self::with_blobs(db_url, BlobConfig::Local(blob_dir.into()))
    }

    /// The store of storage-users' config section: its database (SQLite in `dir` when none is
    /// set) and its blobs (`dir/blobs` unless S3 is configured).
    pub fn from_section(section: &arca_config::StorageSection, dir: &std::path::Path) -> Self {
        let db_url = arca_store::database_url(section, dir);
        let blobs = match &section.blobs {
            // `None` only for storage-system's section, which no files store opens.
            None | Some(arca_config::BlobsConfig::Local) => BlobConfig::Local(dir.join("blobs")),
            Some(arca_config::BlobsConfig::S3(s3)) => BlobConfig::S3(crate::S3Options {
                bucket: s3.bucket.clone(),
                region: s3.region.clone(),
                endpoint: s3.endpoint.clone(),
                access_key_id: s3.access_key_id.clone(),
                secret_access_key: s3.secret_access_key.clone(),
                read_timeout: s3.read_timeout,
                // A remote store is waited for as long as the database is.
                retry_deadline: section.database_retry,
            }),
        };
        let mut cfg = Self::with_blobs(db_url, blobs);
        cfg.max_db_connections = section.database_max_connections;
        cfg.write_retry = section.database_retry;
        cfg.inline_max = section.inline_max;
        // `dir` is DATA_DIR/<service name>.
        if let Some(name) = dir.file_name() {
            cfg.name = name.to_string_lossy().into_owned();
        }
        cfg
    }

    pub fn with_blobs(db_url: impl Into<String>, blobs: BlobConfig) -> Self {
        StoreConfig {
            db_url: db_url.into(),
            blobs,
            max_db_connections: None,
            default_personal_quota: None,
            name: "store".to_owned(),
            sole_writer: false,
            versions: None,
            trash: false,
            write_retry: std::time::Duration::ZERO,
            inline_max: DEFAULT_INLINE_MAX,
        }
    }
}

/// The storage engine. Cheap to clone; all clones share one pool and one blob store.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<Db>,
    blobs: BlobStore,
    /// The writer task puts queue their metadata writes on (group commit, see `commit`).
    committer: commit::Committer,
    /// Listings served by [`Store::list_dir`] (see `listing`).
    listings: listing::ListingCache,
    /// Path resolutions, for a SQLite database this process alone writes.
    resolved: Option<resolved::Resolved>,
    /// Held while open when `resolved` is: the lock on the database file (see `sole_writer`).
    _lock: Option<std::fs::File>,
    default_personal_quota: Option<u64>,
    versions: Option<std::sync::Arc<VersionRules>>,
    trash: bool,
    inline_max: u64,
    /// Small files' bytes read off sqlx's worker threads, for a SQLite database.
    inline_reads: Option<inline_reads::InlineReads>,
}

/// A row of [`Store::read_rows`].
pub(crate) enum ReadRow {
    Inline(inline_reads::Row),
    Pooled(sqlx::any::AnyRow),
}

impl Cols for ReadRow {
    fn text(&self, i: usize) -> Result<String> {
        match self {
            ReadRow::Inline(r) => r.text(i),
            ReadRow::Pooled(r) => r.text(i),
        }
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        match self {
            ReadRow::Inline(r) => r.opt_text(i),
            ReadRow::Pooled(r) => r.opt_text(i),
        }
    }
    fn int(&self, i: usize) -> Result<i64> {
        match self {
            ReadRow::Inline(r) => r.int(i),
            ReadRow::Pooled(r) => r.int(i),
        }
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self {
            ReadRow::Inline(r) => r.opt_int(i),
            ReadRow::Pooled(r) => r.opt_int(i),
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dialect", &self.inner.db.dialect)
            .field("blobs", &self.inner.blobs)
            .finish()
    }
}

impl Store {
    /// Opens the blob store (checking that it answers) and the metadata store (running
    /// migrations).
    pub async fn open(cfg: StoreConfig) -> Result<Self> {
        let blobs = BlobStore::open(&cfg.blobs)?;
        Self::open_with_blobs(cfg, blobs).await
    }

    /// Like [`Store::open`] with a blob store built by the caller; `cfg.blobs` is ignored.
    pub async fn open_with_blobs(cfg: StoreConfig, blobs: BlobStore) -> Result<Self> {
        blobs.check().await?;
        let lock = match sqlite_path(&cfg.db_url) {
            Some(path) if cfg.sole_writer => Some(lock_database(path).await?),
            _ => None,
        };
        let mut db = Db::open(
            &cfg.db_url,
            cfg.max_db_connections,
            &cfg.name,
            &crate::db::SCHEMA,
        )
        .await?;
        let resolved = lock
            .is_some()
            .then(|| resolved::Resolved::new(db.count_changes()));
        let db = Arc::new(db);
        let versions = cfg.versions.clone().map(Arc::new);
        let committer =
            commit::Committer::spawn(Arc::clone(&db), versions.clone(), cfg.write_retry);
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                committer,
                listings: listing::ListingCache::default(),
                resolved,
                _lock: lock,
                blobs,
                default_personal_quota: cfg.default_personal_quota,
                versions,
                trash: cfg.trash,
                inline_max: cfg.inline_max,
                inline_reads: match sqlite_path(&cfg.db_url) {
                    Some(path) => Some(inline_reads::InlineReads::new(path)?),
                    None => None,
                },
            }),
        })
    }

    /// Whether the metadata database answers now (for `/readyz`).
    pub async fn ping(&self) -> Result<()> {
        self.db().ping().await
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.inner.db.close().await;
    }

    pub(crate) fn db(&self) -> &Db {
        &self.inner.db
    }

    pub(crate) fn committer(&self) -> &commit::Committer {
        &self.inner.committer
    }

    pub(crate) fn blobs(&self) -> &BlobStore {
        &self.inner.blobs
    }

    /// Namespace writes go through the committer's batches (see `commit::Write`): on SQLite.
    pub(crate) fn batches_writes(&self) -> bool {
        self.db().dialect == arca_store::db::Dialect::Sqlite
    }

    pub(crate) fn inline_max(&self) -> u64 {
        self.inner.inline_max
    }

    pub(crate) fn inline_reads(&self) -> Option<&inline_reads::InlineReads> {
        self.inner.inline_reads.as_ref()
    }

    /// The rules of versions, when this store keeps any.
    pub fn version_rules(&self) -> Option<&VersionRules> {
        self.inner.versions.as_deref()
    }

    pub(crate) async fn read_conn(&self) -> Result<crate::db::ReadConn> {
        self.db().acquire().await
    }

    /// The rows of the read statement `sql` (at most `max`): on the caller's thread from a
    /// SQLite file (see `inline_reads`), through the pool otherwise. For the statements every
    /// request runs; the rest take [`read_conn`](Self::read_conn).
    pub(crate) async fn read_rows(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        max: usize,
    ) -> Result<Vec<ReadRow>> {
        if let Some(reads) = self.inline_reads() {
            self.db().count_read();
            let rows = reads.rows(sql, args, max)?;
            return Ok(rows.into_iter().map(ReadRow::Inline).collect());
        }
        let mut c = self.read_conn().await?;
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()));
        for arg in args {
            q = match *arg {
                Arg::Text(t) => q.bind(t),
            };
        }
        let mut rows = Vec::new();
        let mut stream = q.fetch(&mut *c);
        while rows.len() < max {
            match futures::TryStreamExt::try_next(&mut stream).await? {
                Some(row) => rows.push(ReadRow::Pooled(row)),
                None => break,
            }
        }
        Ok(rows)
    }

    /// The first row of [`read_rows`](Self::read_rows), if any.
    pub(crate) async fn read_row(&self, sql: &str, args: &[Arg<'_>]) -> Result<Option<ReadRow>> {
        Ok(self.read_rows(sql, args, 1).await?.pop())
    }

    // ---------------------------------------------------------------- spaces

    /// The user's personal space, created (with an empty root) on first use. Safe under
    /// concurrent first calls: the unique index on personal owners lets one insert win and the
    /// others read the winner's space.
    pub async fn personal_space(&self, owner: &str) -> Result<Space> {
        if let Some(space) = self.find_personal(owner).await? {
            return Ok(space);
        }
        Ok(self.create_personal_space(owner).await?.0)
    }

    /// Creates the user's personal space, or finds the one another caller made first (the
    /// unique index on personal owners decides), for callers that looked for it themselves
    /// ([`Store::find_personal_space`], [`Store::resolve_personal`]): one write transaction,
    /// plus one read when it lost that race. With the space comes its root, and whether this
    /// call made it (a root made here has no properties yet).
    pub async fn create_personal_space(&self, owner: &str) -> Result<(Space, Node, bool)> {
        let quota = self.inner.default_personal_quota;
        match self
            .create_space(SpaceKind::Personal, owner, owner, quota)
            .await
        {
            Ok((space, root)) => Ok((space, root, true)),
            Err(e) if e.is_unique_violation() => {
                let space = self
                    .find_personal(owner)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                let root = self.resolve(&space.id, "").await?;
                Ok((space, root, false))
            }
            Err(e) => Err(e),
        }
    }

    /// Creates a project space.
    pub async fn create_project_space(
        &self,
        name: &str,
        owner: &str,
        quota: Option<u64>,
    ) -> Result<Space> {
        Ok(self
            .create_space(SpaceKind::Project, owner, name, quota)
            .await?
            .0)
    }

    /// The user's personal space if it exists: one read, never a write. Callers that bound
    /// how many spaces are created at once try this first and create only when it is absent.
    pub async fn find_personal_space(&self, owner: &str) -> Result<Option<Space>> {
        self.find_personal(owner).await
    }

    async fn find_personal(&self, owner: &str) -> Result<Option<Space>> {
        const SQL: &str = concat!(
            "SELECT ",
            space_cols!(),
            " FROM spaces s JOIN nodes n ON n.id = s.id WHERE s.owner = $1 AND s.kind = 'personal'"
        );
        let row = self.read_row(SQL, &[Arg::Text(owner)]).await?;
        row.as_ref().map(space_from_row).transpose()
    }

    async fn create_space(
        &self,
        kind: SpaceKind,
        owner: &str,
        name: &str,
        quota: Option<u64>,
    ) -> Result<(Space, Node)> {
        let id = new_id();
        let quota = quota.map(db_size).transpose()?;
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            let now = now_ns();
            sqlx::query(
                "INSERT INTO spaces (id, kind, owner, name, quota, seq, created) \
                 VALUES ($1, $2, $3, $4, $5, 0, $6)",
            )
            .bind(&id)
            .bind(kind.as_str())
            .bind(owner)
            .bind(name)
            .bind(quota)
            .bind(now)
            .execute(&mut *c)
            .await?;
            // The root node has the space's id, as in oCIS.
            sqlx::query(
                "INSERT INTO nodes (id, space_id, parent_id, name, kind, size, mtime, etag, created) \
                 VALUES ($1, $1, NULL, '', $2, 0, $3, $4, $3)",
            )
            .bind(&id)
            .bind(NodeKind::Dir.to_db())
            .bind(now)
            .bind(new_id())
            .execute(&mut *c)
            .await?;
            // A project space begins with its creator as its manager, in the same commit:
            // never a space nobody manages.
            if kind == SpaceKind::Project {
                sqlx::query(
                    "INSERT INTO space_members (space_id, kind, member, role, created) \
                     VALUES ($1, 'user', $2, 'manager', $3)",
                )
                .bind(&id)
                .bind(owner)
                .bind(now)
                .execute(&mut *c)
                .await?;
            }
            // Read back in the same transaction: a first login costs one unit of database
            // work here, not a write and two reads.
            let space = get_space(c, &id).await?;
            let root = get_node(c, &id).await?.ok_or(StoreError::NotFound)?;
            Ok((space, root))
        }
        .await;
        w.finish(r).await
    }

    /// A space by id.
    pub async fn space(&self, id: &str) -> Result<Space> {
        let row = self.read_row(GET_SPACE, &[Arg::Text(id)]).await?;
        row.as_ref()
            .map(space_from_row)
            .transpose()?
            .ok_or(StoreError::NotFound)
    }

    /// All spaces, or those of one owner.
    pub async fn list_spaces(&self, owner: Option<&str>) -> Result<Vec<Space>> {
        let mut c = self.read_conn().await?;
        let rows = match owner {
            Some(owner) => {
                sqlx::query(concat!(
                    "SELECT ",
                    space_cols!(),
                    " FROM spaces s JOIN nodes n ON n.id = s.id WHERE s.owner = $1"
                ))
                .bind(owner)
                .fetch_all(&mut *c)
                .await?
            }
            None => {
                sqlx::query(concat!(
                    "SELECT ",
                    space_cols!(),
                    " FROM spaces s JOIN nodes n ON n.id = s.id"
                ))
                .fetch_all(&mut *c)
                .await?
            }
        };
        let mut spaces = rows
            .iter()
            .map(space_from_row)
            .collect::<Result<Vec<_>>>()?;
        spaces.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
        Ok(spaces)
    }

    /// Sets a space's quota (`None` or 0 = unlimited). Lowering it below the usage is allowed:
    /// existing data stays, further growth is refused.
    pub async fn set_quota(&self, space_id: &str, quota: Option<u64>) -> Result<()> {
        let quota = quota.map(db_size).transpose()?;
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query("UPDATE spaces SET quota = $2 WHERE id = $1")
            .bind(space_id)
            .bind(quota)
            .execute(w.conn())
            .await
            .map_err(StoreError::from);
        let done = w.finish(r).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    /// Deletes a space and everything in it; its blobs become orphans.
    pub async fn delete_space(&self, space_id: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            lock_space(c, space_id).await?;
            sqlx::query(
                "UPDATE blobs SET released = $2 WHERE id IN \
                 (SELECT blob_id FROM nodes WHERE space_id = $1 AND blob_id IS NOT NULL) \
                 OR id IN (SELECT blob_id FROM versions WHERE space_id = $1)",
            )
            .bind(space_id)
            .bind(crate::ids::now_ms())
            .execute(&mut *c)
            .await?;
            sqlx::query("DELETE FROM spaces WHERE id = $1")
                .bind(space_id)
                .execute(&mut *c)
                .await?;
            Ok(())
        }
        .await;
        w.finish(r).await
    }

    // ---------------------------------------------------------------- reads

    /// A node by id.
    pub async fn stat(&self, id: &str) -> Result<Node> {
        let row = self.read_row(GET_NODE, &[Arg::Text(id)]).await?;
        row.as_ref()
            .map(node_from_row)
            .transpose()?
            .ok_or(StoreError::NotFound)
    }

    /// The children of a directory in one query, sorted by name (byte order, the same on every
    /// database whatever its collation).
    pub async fn list_children(&self, dir_id: &str) -> Result<Vec<Node>> {
        self.list_children_with(dir_id, true).await
    }

    /// [`list_children`](Self::list_children); without `full`, a listing for display only:
    /// the nodes may come without checksums and blob id and with a zero creation time (on
    /// SQLite they do, which makes a large listing markedly cheaper to build).
    pub async fn list_children_with(&self, dir_id: &str, full: bool) -> Result<Vec<Node>> {
        let mut c = self.read_conn().await?;
        let packed = match self.db().dialect {
            Dialect::Sqlite => list_packed(&mut c, dir_id, full).await?,
            Dialect::Postgres => None,
        };
        let mut nodes = match packed {
            Some(nodes) => nodes,
            None => {
                let rows = sqlx::query(concat!(
                    "SELECT ",
                    node_cols!(),
                    " FROM nodes WHERE parent_id = $1"
                ))
                .bind(dir_id)
                .fetch_all(&mut *c)
                .await?;
                rows.iter().map(node_from_row).collect::<Result<Vec<_>>>()?
            }
        };
        if nodes.is_empty() {
            // Empty directory, a file, or nothing at all: only now is the parent worth a query.
            let dir = get_node(&mut c, dir_id)
                .await?
                .ok_or(StoreError::NotFound)?;
            if !dir.is_dir() {
                return Err(StoreError::NotADirectory);
            }
            return Ok(Vec::new());
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(nodes)
    }

    /// The children of `dir` as [`list_children_with`](Self::list_children_with) gives them,
    /// from memory when they were read before under `dir`'s etag. `dir` must have been read
    /// from this store just before (a stat or a resolve): its etag is what proves a cached
    /// listing current.
    pub async fn list_dir(&self, dir: &Node, full: bool) -> Result<Arc<Vec<Node>>> {
        if !dir.is_dir() {
            return Err(StoreError::NotADirectory);
        }
        let cache = &self.inner.listings;
        if let Some(children) = cache.get(&dir.id, &dir.etag, full) {
            return Ok(children);
        }
        let children = Arc::new(self.list_children_with(&dir.id, full).await?);
        cache.put(&dir.id, &dir.etag, full, Arc::clone(&children));
        Ok(children)
    }

    /// The child of `dir_id` named `name`.
    pub async fn child(&self, dir_id: &str, name: &str) -> Result<Node> {
        let row = self
            .read_row(GET_CHILD, &[Arg::Text(dir_id), Arg::Text(name)])
            .await?;
        row.as_ref()
            .map(node_from_row)
            .transpose()?
            .ok_or(StoreError::NotFound)
    }

    /// Resolves a space-relative path (`/a/b/c`; `/` is the root) in one round trip: a join of
    /// one indexed lookup per segment (`nodes_parent_name`), where every node on the way but
    /// the last must be a directory. Round trips, not lookups, are what a request pays for on
    /// a pooled connection, and a request resolves a path on every call. `.` and `..` segments
    /// are refused, not interpreted.
    pub async fn resolve(&self, space_id: &str, path: &str) -> Result<Node> {
        let key = resolved::Key::Space { space_id, path };
        let Some(cache) = &self.inner.resolved else {
            return self.resolve_uncached(space_id, path).await;
        };
        if let Some((_, node)) = cache.get(&key) {
            return Ok(node);
        }
        let at = cache.now();
        let node = self.resolve_uncached(space_id, path).await?;
        cache.put(at, &key, (None, node.clone()));
        Ok(node)
    }

    async fn resolve_uncached(&self, space_id: &str, path: &str) -> Result<Node> {
        let segs = segments(path)?;
        if segs.is_empty() {
            return match self.stat(space_id).await {
                Ok(root) if root.is_root() => Ok(root),
                Ok(_) => Err(StoreError::NotFound),
                Err(e) => Err(e),
            };
        }
        // A path at most JOIN_SEGMENTS deep in one statement; a deeper one in statements of
        // that many segments each, every one going on from the directory the last one found.
        // No statement grows with the depth (a database joins a bounded number of tables:
        // SQLite 64).
        let mut at: Option<Node> = None;
        for (i, chunk) in segs.chunks(JOIN_SEGMENTS).enumerate() {
            let from = match &at {
                None => space_id,
                Some(dir) if dir.is_dir() => dir.id.as_str(),
                // A file on the way: nothing below it.
                Some(_) => return Err(StoreError::NotFound),
            };
            // The statement is built from constants and the depth; every name is bound.
            let sql = resolve_sql_from(chunk.len(), i == 0);
            let args: Vec<Arg<'_>> = std::iter::once(from)
                .chain(chunk.iter().copied())
                .map(Arg::Text)
                .collect();
            let row = self.read_row(&sql, &args).await?;
            at = Some(
                row.as_ref()
                    .map(node_from_row)
                    .transpose()?
                    .ok_or(StoreError::NotFound)?,
            );
        }
        at.ok_or(StoreError::NotFound)
    }

    /// [`resolve`](Self::resolve) in `owner`'s personal space, with the space, in one round
    /// trip: the request path of a client's own files names no space, so this is what nearly
    /// every request resolves. `None` when the space or the path is missing (the caller then
    /// takes the general way, which creates a missing personal space).
    pub async fn resolve_personal(&self, owner: &str, path: &str) -> Result<Option<(Space, Node)>> {
        let key = resolved::Key::Personal { owner, path };
        let Some(cache) = &self.inner.resolved else {
            return self.resolve_personal_uncached(owner, path).await;
        };
        if let Some((Some(space), node)) = cache.get(&key) {
            return Ok(Some((space, node)));
        }
        let at = cache.now();
        let found = self.resolve_personal_uncached(owner, path).await?;
        if let Some((space, node)) = &found {
            cache.put(at, &key, (Some(space.clone()), node.clone()));
        }
        Ok(found)
    }

    async fn resolve_personal_uncached(
        &self,
        owner: &str,
        path: &str,
    ) -> Result<Option<(Space, Node)>> {
        let segs = segments(path)?;
        if segs.len() > JOIN_SEGMENTS {
            // Deeper than one statement goes: the general way resolves it piecewise.
            return Ok(None);
        }
        // The statement is built from constants and the depth; every value is bound.
        let sql = resolve_sql(segs.len(), true);
        let args: Vec<Arg<'_>> = std::iter::once(owner)
            .chain(segs.iter().copied())
            .map(Arg::Text)
            .collect();
        let Some(row) = self.read_row(&sql, &args).await? else {
            return Ok(None);
        };
        Ok(Some((
            space_from_row(&row)?,
            node_from_row_at(&row, SPACE_COLS)?,
        )))
    }

    /// Where a new entry at `path` of `owner`'s personal space would go, in one round trip:
    /// the space, the parent directory, what exists under the name now, and whether the space
    /// has any lock rows (when not, no lock check needs them). `None` when the space or the
    /// parent is missing, or the parent is not a directory, or `path` is the root: the caller
    /// then takes the general way, which tells what is wrong.
    pub async fn resolve_personal_entry(
        &self,
        owner: &str,
        path: &str,
    ) -> Result<Option<(Space, Node, Option<Node>, bool)>> {
        let segs = segments(path)?;
        let Some((name, parents)) = segs.split_last() else {
            return Ok(None);
        };
        if parents.len() > JOIN_SEGMENTS {
            // Deeper than one statement goes: the general way resolves it piecewise.
            return Ok(None);
        }
        // The statement is built from constants and the depth; every value is bound.
        let sql = entry_sql(parents.len());
        let args: Vec<Arg<'_>> = std::iter::once(owner)
            .chain(parents.iter().copied())
            .chain(std::iter::once(*name))
            .map(Arg::Text)
            .collect();
        let Some(row) = self.read_row(&sql, &args).await? else {
            return Ok(None);
        };
        let parent = node_from_row_at(&row, SPACE_COLS)?;
        if !parent.is_dir() {
            return Ok(None);
        }
        let child_base = SPACE_COLS + NODE_COLS;
        let child = match row.opt_text(child_base)? {
            Some(_) => Some(node_from_row_at(&row, child_base)?),
            None => None,
        };
        let locks = row.int(child_base + NODE_COLS)?;
        Ok(Some((space_from_row(&row)?, parent, child, locks > 0)))
    }

    /// The space-relative path of a node (`/` for a root), for answering by id. A node in the
    /// trash has none: `NotFound`, as for one that does not exist (whoever holds its id, a
    /// share or a link, reaches nothing until it is restored).
    pub async fn path_of(&self, id: &str) -> Result<String> {
        let rows = self
            .read_rows(LIVE_PATH, &[Arg::Text(id)], usize::MAX)
            .await?;
        path_from_rows(&rows)?.ok_or(StoreError::NotFound)
    }

    /// The space of a node (ids of nodes never change space: moves stay inside one).
    async fn space_of(&self, id: &str) -> Result<String> {
        let row = self
            .read_row("SELECT space_id FROM nodes WHERE id = $1", &[Arg::Text(id)])
            .await?;
        match row {
            Some(row) => row.text(0),
            None => Err(StoreError::NotFound),
        }
    }
}

// -------------------------------------------------------------------- shared SQL helpers

/// [`list_packed`]'s statement. concat_ws builds each record in one pass (a chain of `||`
/// copies the growing string once per operator); it skips NULLs, hence every nullable column is
/// COALESCEd.
pub(crate) const LIST_PACKED: &str = "SELECT count(*), group_concat(concat_ws('/', id, space_id, kind, size, mtime, etag, \
         CASE WHEN $2 THEN COALESCE(blob_id, '') ELSE '' END, \
         CASE WHEN $2 THEN COALESCE(sha1, '') ELSE '' END, \
         CASE WHEN $2 THEN COALESCE(md5, '') ELSE '' END, \
         CASE WHEN $2 THEN COALESCE(adler32, '') ELSE '' END, \
         CASE WHEN $2 THEN created ELSE 0 END, \
         length(CAST(name AS BLOB)), name), '/') \
         FROM nodes WHERE parent_id = $1";

/// The children of `dir_id` as one packed text value (SQLite only), or `None` when the value
/// does not parse (then the caller reads rows).
///
/// Why: sqlx runs each SQLite connection on a worker thread and hands every result row across
/// threads on its own, copying each column value and converting it for `Any` — for a listing
/// of 1,000 entries that hand-off, not SQLite, was nearly all of a PROPFIND's cost. One row
/// with one text value crosses once. Every field but the name is an id, a number or hex and
/// never contains `/`; the name (the one free-form field) goes last, prefixed with its length
/// in bytes, so the packing is unambiguous whatever a name holds. `count(*)` checks that every
/// record was read back.
///
/// Without `full` the blob id and the three checksums stay empty and the creation time is 0:
/// records half as long, for listings that show none of them.
async fn list_packed(c: &mut AnyConnection, dir_id: &str, full: bool) -> Result<Option<Vec<Node>>> {
    let row = sqlx::query(LIST_PACKED)
        .bind(dir_id)
        .bind(full)
        .fetch_one(&mut *c)
        .await?;
    let count: i64 = row.try_get(0)?;
    let packed: Option<String> = row.try_get(1)?;
    let Some(packed) = packed else {
        return Ok((count == 0).then(Vec::new));
    };
    let nodes = unpack_children(&packed, dir_id);
    Ok(nodes.filter(|n| i64::try_from(n.len()) == Ok(count)))
}

/// Parses [`list_packed`]'s value; `None` if anything is off.
fn unpack_children(mut rest: &str, dir_id: &str) -> Option<Vec<Node>> {
    fn field<'a>(rest: &mut &'a str) -> Option<&'a str> {
        let (f, tail) = rest.split_once('/')?;
        *rest = tail;
        Some(f)
    }
    fn opt(s: &str) -> Option<String> {
        (!s.is_empty()).then(|| s.to_owned())
    }
    let mut nodes = Vec::new();
    loop {
        let id = field(&mut rest)?;
        let space_id = field(&mut rest)?;
        let kind = NodeKind::from_db(field(&mut rest)?.parse().ok()?)?;
        let size: u64 = field(&mut rest)?.parse().ok()?;
        let mtime: i64 = field(&mut rest)?.parse().ok()?;
        let etag = field(&mut rest)?;
        let blob_id = opt(field(&mut rest)?);
        let sha1 = field(&mut rest)?;
        let md5 = field(&mut rest)?;
        let adler32 = field(&mut rest)?;
        let created: i64 = field(&mut rest)?.parse().ok()?;
        let name_len: usize = field(&mut rest)?.parse().ok()?;
        let name = rest.get(..name_len)?;
        rest = &rest[name_len..];
        let checksums = (!sha1.is_empty() && !md5.is_empty() && !adler32.is_empty()).then(|| {
            crate::checksum::Checksums {
                sha1: sha1.to_owned(),
                md5: md5.to_owned(),
                adler32: adler32.to_owned(),
            }
        });
        nodes.push(Node {
            id: id.to_owned(),
            space_id: space_id.to_owned(),
            parent_id: Some(dir_id.to_owned()),
            name: name.to_owned(),
            kind,
            size,
            mtime: crate::ids::from_ns(mtime),
            etag: etag.to_owned(),
            blob_id,
            checksums,
            created: crate::ids::from_ns(created),
        });
        if rest.is_empty() {
            return Some(nodes);
        }
        rest = rest.strip_prefix('/')?;
    }
}

/// Path segments one resolving statement joins at most; deeper paths take several statements.
/// Well under SQLite's 64 tables per join, with the personal form's space and the entry
/// form's child beside them.
const JOIN_SEGMENTS: usize = 32;

/// [`resolve_sql`] for `depth` segments below node `$1`: a space's root (`$1` the space id)
/// when `from_root`, else any directory (a deep path's next piece).
fn resolve_sql_from(depth: usize, from_root: bool) -> String {
    resolve_sql_anchored(depth, false, from_root)
}

/// How many columns `space_cols!` selects.
const SPACE_COLS: usize = 10;

/// The file of a `sqlite://FILE?…` URL; `None` for an in-memory database or PostgreSQL.
fn sqlite_path(url: &str) -> Option<&std::path::Path> {
    let rest = url.strip_prefix("sqlite://")?;
    let file = rest.split('?').next().unwrap_or(rest);
    (!file.is_empty() && !file.contains(":memory:")).then(|| std::path::Path::new(file))
}

/// Takes the lock of a SQLite database for this process (see `StoreConfig::sole_writer`),
/// waiting while another process holds it. The lock is an `flock` on `FILE.lock` beside it, not
/// on the database file: closing any handle of that file would drop SQLite's own locks.
async fn lock_database(db: &std::path::Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd as _;
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| lock_error(&path, e))?;
    let flock = |file: &std::fs::File, how| {
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => return Ok(file),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {}
        Err(e) => return Err(lock_error(&path, e)),
    }
    tracing::warn!(
        lock = %path.display(),
        "another process has this database open; waiting for it to close it"
    );
    tokio::task::spawn_blocking(move || {
        loop {
            match flock(&file, libc::LOCK_EX) {
                Ok(()) => return Ok(file),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(lock_error(&path, e)),
            }
        }
    })
    .await
    .map_err(|e| StoreError::Io(std::io::Error::other(format!("database lock: {e}"))))?
}

fn lock_error(path: &std::path::Path, e: std::io::Error) -> StoreError {
    StoreError::Io(std::io::Error::new(
        e.kind(),
        format!("locking {}: {e}", path.display()),
    ))
}

/// The statement [`Store::resolve`] runs for a path of `depth` segments: `$1` is the space
/// (its root has the space's id and no parent), `$2…` the names. With `personal`, `$1` is the
/// owner of a personal space instead, and the space's columns come first
/// ([`Store::resolve_personal`]). The statement is the same for every path of one depth, so
/// the driver's statement cache keeps one per depth in use.
fn resolve_sql(depth: usize, personal: bool) -> String {
    resolve_sql_anchored(depth, personal, true)
}

/// [`resolve_sql`]; without `at_root`, `$1` may be any node (not only a root).
fn resolve_sql_anchored(depth: usize, personal: bool, at_root: bool) -> String {
    use std::fmt::Write as _;
    let dir = NodeKind::Dir.to_db();
    let mut sql = String::from("SELECT ");
    if personal {
        // space_cols! reads the root as `n`.
        sql.push_str(space_cols!());
        sql.push_str(", ");
    }
    let last = if depth == 0 {
        "n".to_owned()
    } else {
        format!("n{depth}")
    };
    for col in node_cols!().split(", ") {
        let _ = write!(sql, "{last}.{col}, ");
    }
    sql.truncate(sql.len() - 2);
    if personal {
        sql.push_str(" FROM spaces s JOIN nodes n ON n.id = s.id");
    } else {
        sql.push_str(" FROM nodes n");
    }
    for i in 1..=depth {
        let parent = if i == 1 {
            "n".to_owned()
        } else {
            format!("n{}", i - 1)
        };
        let _ = write!(
            sql,
            " JOIN nodes n{i} ON n{i}.parent_id = {parent}.id AND n{i}.name = ${b}",
            b = i + 1
        );
    }
    if personal {
        sql.push_str(" WHERE s.owner = $1 AND s.kind = 'personal' AND n.parent_id IS NULL");
    } else {
        sql.push_str(if at_root {
            " WHERE n.id = $1 AND n.parent_id IS NULL"
        } else {
            " WHERE n.id = $1"
        });
    }
    // Every node on the way but the last is a directory.
    let _ = write!(sql, " AND n.kind = {dir}");
    for i in 1..depth {
        let _ = write!(sql, " AND n{i}.kind = {dir}");
    }
    sql
}

/// How many columns `node_cols!` selects.
const NODE_COLS: usize = 13;

/// The statement [`Store::resolve_personal_entry`] runs for a parent `depth` segments deep:
/// [`resolve_sql`]'s personal form for the parent, with the child named `$depth+2` left-joined
/// (its columns NULL when the name is free) and the space's lock row count.
fn entry_sql(depth: usize) -> String {
    let base = resolve_sql(depth, true);
    let last = if depth == 0 {
        "n".to_owned()
    } else {
        format!("n{depth}")
    };
    // The statement's own FROM (space_cols! holds a subquery with a FROM of its own).
    const FROM: &str = " FROM spaces s ";
    let (select, rest) = base.split_once(FROM).unwrap_or((base.as_str(), ""));
    let (joins, filter) = rest.split_once(" WHERE ").unwrap_or((rest, ""));
    let mut sql = String::from(select);
    for col in node_cols!().split(", ") {
        sql.push_str(", c.");
        sql.push_str(col);
    }
    // count(*), not EXISTS: an integer on both databases (EXISTS is a bool on PostgreSQL).
    sql.push_str(", (SELECT count(*) FROM locks l WHERE l.space_id = s.id)");
    sql.push_str(FROM);
    sql.push_str(joins);
    sql.push_str(&format!(
        " LEFT JOIN nodes c ON c.parent_id = {last}.id AND c.name = ${} WHERE ",
        depth + 2
    ));
    sql.push_str(filter);
    sql
}

/// A space by id.
const GET_SPACE: &str = concat!(
    "SELECT ",
    space_cols!(),
    " FROM spaces s JOIN nodes n ON n.id = s.id WHERE s.id = $1"
);

pub(crate) async fn get_space(c: &mut AnyConnection, id: &str) -> Result<Space> {
    let row = sqlx::query(GET_SPACE)
        .bind(id)
        .fetch_optional(&mut *c)
        .await?;
    row.as_ref()
        .map(space_from_row)
        .transpose()?
        .ok_or(StoreError::NotFound)
}

/// A node by id.
const GET_NODE: &str = concat!("SELECT ", node_cols!(), " FROM nodes WHERE id = $1");

/// A node by its parent and name.
const GET_CHILD: &str = concat!(
    "SELECT ",
    node_cols!(),
    " FROM nodes WHERE parent_id = $1 AND name = $2"
);

pub(crate) async fn get_node(c: &mut AnyConnection, id: &str) -> Result<Option<Node>> {
    let row = sqlx::query(GET_NODE)
        .bind(id)
        .fetch_optional(&mut *c)
        .await?;
    row.as_ref().map(node_from_row).transpose()
}

pub(crate) async fn get_child(
    c: &mut AnyConnection,
    parent_id: &str,
    name: &str,
) -> Result<Option<Node>> {
    let row = sqlx::query(GET_CHILD)
        .bind(parent_id)
        .bind(name)
        .fetch_optional(&mut *c)
        .await?;
    row.as_ref().map(node_from_row).transpose()
}

pub(crate) const PARENT_AND_CHILD: &str = concat!(
    "SELECT ",
    node_cols!(),
    " FROM nodes WHERE id = $1 OR (parent_id = $1 AND name = $2)"
);

/// The parent and the existing child of that name, in one round trip.
pub(crate) async fn parent_and_child(
    c: &mut AnyConnection,
    parent_id: &str,
    name: &str,
) -> Result<(Option<Node>, Option<Node>)> {
    let rows = sqlx::query(PARENT_AND_CHILD)
        .bind(parent_id)
        .bind(name)
        .fetch_all(&mut *c)
        .await?;
    let (mut parent, mut child) = (None, None);
    for row in &rows {
        let node = node_from_row(row)?;
        if node.id == parent_id {
            parent = Some(node);
        } else {
            child = Some(node);
        }
    }
    Ok((parent, child))
}

/// Takes the space's write lock (see the module docs) and returns its quota (`None` = unlimited).
pub(crate) async fn lock_space(c: &mut AnyConnection, space_id: &str) -> Result<Option<u64>> {
    let row = sqlx::query("UPDATE spaces SET seq = seq + 1 WHERE id = $1 RETURNING quota")
        .bind(space_id)
        .fetch_optional(&mut *c)
        .await?
        .ok_or(StoreError::NotFound)?;
    let quota: Option<i64> = row.try_get(0)?;
    Ok(quota.and_then(|q| u64::try_from(q).ok()).filter(|&q| q > 0))
}

/// Refuses growth by `delta` bytes past the quota. Shrinking is always allowed, so a space that
/// is over quota (after the quota was lowered) can still be cleaned up.
pub(crate) async fn check_quota(
    c: &mut AnyConnection,
    space_id: &str,
    quota: Option<u64>,
    delta: i64,
) -> Result<()> {
    let Some(quota) = quota else { return Ok(()) };
    if delta <= 0 {
        return Ok(());
    }
    let row = sqlx::query("SELECT size FROM nodes WHERE id = $1")
        .bind(space_id)
        .fetch_one(&mut *c)
        .await?;
    let used: i64 = row.try_get(0)?;
    if used.saturating_add(delta) > i64::try_from(quota).unwrap_or(i64::MAX) {
        return Err(StoreError::QuotaExceeded);
    }
    Ok(())
}

/// The walk of [`propagate`]: the ancestor chain by primary key, one indexed lookup per level.
pub(crate) const PROPAGATE: &str = "WITH RECURSIVE anc(id) AS ( \
       SELECT id FROM nodes WHERE id = $1 \
       UNION ALL \
       SELECT n.parent_id FROM nodes n JOIN anc ON n.id = anc.id WHERE n.parent_id IS NOT NULL \
     ) UPDATE nodes SET etag = $2, size = size + $3, \
       mtime = CASE WHEN id = $4 THEN $5 ELSE mtime END \
     WHERE id IN (SELECT id FROM anc)";

/// Gives `from` and every ancestor up to the root the etag `etag` and adds `size_delta` to their
/// sizes, in one statement walking the parent chain by primary key. With `touch`, `from`'s own
/// mtime becomes that time: a directory's mtime changes when an entry is added, removed or
/// renamed directly inside it (folded in here to save a statement on every such write).
pub(crate) async fn propagate(
    c: &mut AnyConnection,
    from: &str,
    etag: &str,
    size_delta: i64,
    touch: Option<i64>,
) -> Result<()> {
    let (touch_id, touch_time) = match touch {
        Some(t) => (from, t),
        None => ("", 0),
    };
    sqlx::query(PROPAGATE)
        .bind(from)
        .bind(etag)
        .bind(size_delta)
        .bind(touch_id)
        .bind(touch_time)
        .execute(&mut *c)
        .await?;
    Ok(())
}

/// The walk of [`is_ancestor_or_self`]: `node`'s chain up to the root.
pub(crate) const ANCESTOR_OR_SELF: &str = "WITH RECURSIVE anc(id) AS ( \
       SELECT id FROM nodes WHERE id = $1 \
       UNION ALL \
       SELECT n.parent_id FROM nodes n JOIN anc ON n.id = anc.id WHERE n.parent_id IS NOT NULL \
     ) SELECT id FROM anc WHERE id = $2";

/// Whether `ancestor` is `node` itself or one of its ancestors.
pub(crate) async fn is_ancestor_or_self(
    c: &mut AnyConnection,
    ancestor: &str,
    node: &str,
) -> Result<bool> {
    let row = sqlx::query(ANCESTOR_OR_SELF)
        .bind(node)
        .bind(ancestor)
        .fetch_optional(&mut *c)
        .await?;
    Ok(row.is_some())
}

/// The blobs of a subtree marked released: the nodes' contents and their versions'. The walk
/// carries each node's blob id down from the index it reads the children with: joining the
/// walk back to `nodes` for the blob ids let SQLite 3.51 drive that join from the partial index
/// `nodes_blob` — every file of the database read to delete one folder, so a delete cost
/// 0.14 ms in an empty store and 67 ms beside 30,000 files (MKCOL+DELETE churn 1,333 → 32 per
/// second). The versions are found by node (`versions_node`). `plans` checks the plan.
pub(crate) const RELEASE_SUBTREE_BLOBS: &str = "WITH RECURSIVE sub(sid, blob) AS ( \
       SELECT id, blob_id FROM nodes WHERE id = $1 \
       UNION ALL \
       SELECT n.id, n.blob_id FROM nodes n JOIN sub ON n.parent_id = sub.sid \
     ) UPDATE blobs SET released = $2 WHERE id IN (SELECT blob FROM sub WHERE blob IS NOT NULL) \
     OR id IN (SELECT v.blob_id FROM versions v WHERE v.node_id IN (SELECT sid FROM sub)) \
     RETURNING id";

/// Deletes a node and its subtree (the foreign keys cascade to children, dead properties,
/// versions and a trash row) and marks every blob they referenced as released, for the
/// collector: the contents of the nodes and of their versions. Returns the released blob ids
/// (a purge reclaims them at once, see `trash::reclaim`). Sizes and etags of the ancestors
/// are the caller's to update.
pub(crate) async fn remove_subtree(c: &mut AnyConnection, node: &Node) -> Result<Vec<String>> {
    let now = crate::ids::now_ms();
    let rows = match node.kind {
        NodeKind::File => {
            sqlx::query(
                "UPDATE blobs SET released = $2 WHERE id = $1 \
                 OR id IN (SELECT blob_id FROM versions WHERE node_id = $3) RETURNING id",
            )
            .bind(node.blob_id.as_deref())
            .bind(now)
            .bind(&node.id)
            .fetch_all(&mut *c)
            .await?
        }
        NodeKind::Dir => {
            sqlx::query(RELEASE_SUBTREE_BLOBS)
                .bind(&node.id)
                .bind(now)
                .fetch_all(&mut *c)
                .await?
        }
    };
    sqlx::query("DELETE FROM nodes WHERE id = $1")
        .bind(&node.id)
        .execute(&mut *c)
        .await?;
    crate::db::first_strings(&rows)
}

/// The id of a space's trash root: the directory every trashed item of the space hangs from
/// (see the `0020_undo` migration). It has no parent, like the space root, but is never
/// reached by a path: paths start at the space root.
pub(crate) fn trash_root_id(space_id: &str) -> String {
    format!("{space_id}-trash")
}

/// The walk of [`live_path`]: `$1`'s chain of parents, the top first.
pub(crate) const LIVE_PATH: &str = "WITH RECURSIVE anc(id, parent_id, name, depth, space_id) AS ( \
       SELECT id, parent_id, name, 0, space_id FROM nodes WHERE id = $1 \
       UNION ALL \
       SELECT n.id, n.parent_id, n.name, anc.depth + 1, n.space_id \
       FROM nodes n JOIN anc ON n.id = anc.parent_id \
     ) SELECT id, name, space_id FROM anc ORDER BY depth DESC";

/// The space-relative path of a node (`/` for a space root) if it is live; `None` when it is
/// in the trash (its chain of parents ends at the trash root) or does not exist.
pub(crate) async fn live_path(c: &mut AnyConnection, id: &str) -> Result<Option<String>> {
    let rows = sqlx::query(LIVE_PATH).bind(id).fetch_all(&mut *c).await?;
    path_from_rows(&rows)
}

/// [`LIVE_PATH`]'s rows as the path they spell.
fn path_from_rows(rows: &[impl Cols]) -> Result<Option<String>> {
    let Some(top) = rows.first() else {
        return Ok(None);
    };
    // The space root's id is the space id; the trash root's is not.
    if top.text(0)? != top.text(2)? {
        return Ok(None);
    }
    let mut path = String::new();
    for row in rows.iter().skip(1) {
        path.push('/');
        path.push_str(&row.text(1)?);
    }
    if path.is_empty() {
        path.push('/');
    }
    Ok(Some(path))
}

/// The walk of [`subtree`]. Each level's columns come from the index lookup that found it:
/// joining the walk back to `nodes` by id was planned as a scan of every node.
pub(crate) const SUBTREE: &str = concat!(
    "WITH RECURSIVE sub(",
    node_cols!(),
    ", depth) AS ( SELECT ",
    node_cols!(),
    ", 0 FROM nodes WHERE id = $1 \
     UNION ALL \
     SELECT n.id, n.space_id, n.parent_id, n.name, n.kind, n.size, n.mtime, n.etag, n.blob_id, \
       n.sha1, n.md5, n.adler32, n.created, sub.depth + 1 FROM nodes n JOIN sub ON n.parent_id = sub.id \
     ) SELECT ",
    node_cols!(),
    " FROM sub ORDER BY depth"
);

/// Whole subtree of `root`, parents before children.
pub(crate) async fn subtree(c: &mut AnyConnection, root: &str) -> Result<Vec<Node>> {
    let rows = sqlx::query(SUBTREE).bind(root).fetch_all(&mut *c).await?;
    rows.iter().map(node_from_row).collect()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// The one-round-trip paths answer exactly what the general ones do.
    #[tokio::test]
    async fn personal_resolve_and_packed_listing_match_the_general_way() {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("m.db").display());
        let s = Store::open(StoreConfig::new(url, tmp.path().join("blobs")))
            .await
            .unwrap();
        let space = s.personal_space("u1").await.unwrap();
        let a = s.mkdir(&space.root_id, "a").await.unwrap();
        let names = ["f", "b c", "ünï", "x'y\"z", "%2F"];
        for n in names {
            let body = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"hi"))]);
            s.put_file(&a.id, n, body, crate::PutOptions::default())
                .await
                .unwrap();
        }
        s.mkdir(&a.id, "sub").await.unwrap();

        for path in ["/", "/a", "/a/f", "/a/b c", "/a/sub"] {
            let (sp, node) = s.resolve_personal("u1", path).await.unwrap().unwrap();
            assert_eq!(sp.id, space.id);
            assert_eq!(node, s.resolve(&space.id, path).await.unwrap(), "{path}");
        }
        for path in ["/missing", "/a/missing", "/a/f/x"] {
            assert!(
                s.resolve_personal("u1", path).await.unwrap().is_none(),
                "{path}"
            );
            assert!(s.resolve(&space.id, path).await.is_err(), "{path}");
        }
        assert!(s.resolve_personal("u2", "/a").await.unwrap().is_none());

        // A new entry's parent, the child under its name, and whether locks exist, at once.
        let (sp, parent, child, locks) = s
            .resolve_personal_entry("u1", "/a/b c")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(sp.id, space.id);
        assert_eq!(parent, s.stat(&a.id).await.unwrap());
        assert_eq!(child, Some(s.resolve(&space.id, "/a/b c").await.unwrap()));
        assert!(!locks);
        let (_, parent, child, _) = s
            .resolve_personal_entry("u1", "/new")
            .await
            .unwrap()
            .unwrap();
        assert!(parent.is_root() && child.is_none());
        for path in ["/", "/missing/x", "/a/f/x"] {
            assert!(
                s.resolve_personal_entry("u1", path)
                    .await
                    .unwrap()
                    .is_none(),
                "{path}"
            );
        }
        assert!(
            s.resolve_personal_entry("u2", "/a/f")
                .await
                .unwrap()
                .is_none()
        );

        let listed = s.list_children(&a.id).await.unwrap();
        let mut c = s.read_conn().await.unwrap();
        let rows = sqlx::query(concat!(
            "SELECT ",
            node_cols!(),
            " FROM nodes WHERE parent_id = $1"
        ))
        .bind(&a.id)
        .fetch_all(&mut *c)
        .await
        .unwrap();
        let mut by_rows: Vec<Node> = rows.iter().map(|r| node_from_row(r).unwrap()).collect();
        by_rows.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(listed, by_rows);
        // ... and it came from the packed value, not the fallback that reads rows.
        let mut packed = list_packed(&mut c, &a.id, true).await.unwrap().unwrap();
        packed.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(packed, by_rows);
        // For display only: the same nodes but for checksums, blob id and creation time.
        let mut lean = list_packed(&mut c, &a.id, false).await.unwrap().unwrap();
        lean.sort_by(|x, y| x.name.cmp(&y.name));
        assert!(
            by_rows
                .iter()
                .any(|n| n.checksums.is_some() && n.blob_id.is_some())
        );
        for n in &mut packed {
            n.checksums = None;
            n.blob_id = None;
            n.created = crate::ids::from_ns(0);
        }
        assert_eq!(lean, packed);
        assert_eq!(listed.len(), names.len() + 1);
        assert!(
            s.list_children(&s.resolve(&space.id, "/a/sub").await.unwrap().id)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn packed_children_parse_whatever_the_names_hold() {
        let packed = "a1/s1/2/4096/1700000000000000000/e1/b1/aa/bb/cc/1600000000000000000/5/a/b c\
                      /a2/s1/1/0/-5/e2/////7/3/é/";
        let nodes = unpack_children(packed, "p").unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].name, "a/b c");
        assert_eq!(nodes[0].size, 4096);
        assert_eq!(nodes[0].blob_id.as_deref(), Some("b1"));
        assert_eq!(nodes[0].checksums.as_ref().unwrap().md5, "bb");
        assert_eq!(nodes[0].parent_id.as_deref(), Some("p"));
        assert_eq!(nodes[1].name, "é/");
        assert!(nodes[1].is_dir() && nodes[1].blob_id.is_none() && nodes[1].checksums.is_none());
        assert_eq!(nodes[1].mtime, crate::ids::from_ns(-5));
        // Anything off (a cut value, a length past a character boundary) is refused, not guessed.
        assert!(unpack_children("a1/s1/2/1/1/e/b/x/y/z/1/9/short", "p").is_none());
        assert!(unpack_children("a1/s1/2/1/1/e/b/x/y/z/1/1/é", "p").is_none());
        assert!(unpack_children("a1/s1/9/1/1/e/b/x/y/z/1/1/n", "p").is_none());
    }
}
