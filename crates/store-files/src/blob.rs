//! The blob layer: immutable objects named by a random blob id, written once, read by range,
//! deleted by the collector. Everything goes through `object_store`: a local directory
//! ([`BlobStore::local`]), an S3 bucket ([`BlobStore::s3`]) or any other backend
//! ([`BlobStore::from_object_store`]). This module is the only place that knows which: the
//! differences (fsync and staging files on disk, part sizes, timeouts and incomplete multipart
//! uploads on S3) are handled here, so callers never ask.

use std::collections::HashMap;
use std::fmt;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    ClientOptions, GetOptions, GetRange, GetResultPayload, ObjectStore, ObjectStoreExt, PutPayload,
    WriteMultipart,
};

use crate::StoreError;

mod assembly;
pub(crate) use assembly::Placement;

/// Part size for local multipart writes: the unit of buffering per upload. Small, because each
/// upload holds up to `MAX_PARTS_IN_FLIGHT + 1` of them in memory.
const LOCAL_PART_SIZE: usize = 1 << 20;
/// S3 refuses parts under 5 MiB (except the last).
const REMOTE_MIN_PART_SIZE: usize = 5 << 20;
/// Part size for a remote upload of unknown length: 8 MiB parts reach S3's 10,000-part limit
/// at 78 GiB.
const REMOTE_PART_SIZE: usize = 8 << 20;
/// The largest part chosen for a declared length (S3 takes up to 5 GiB): it bounds memory per
/// upload at about 3 × 64 MiB, and with 10,000 parts still allows 625 GiB.
const REMOTE_MAX_PART_SIZE: usize = 64 << 20;
/// S3's limit on the number of parts of one upload.
const REMOTE_MAX_PARTS: u64 = 10_000;
/// The largest object S3 copies in one `CopyObject` (5 GiB).
const REMOTE_MAX_COPY: u64 = 5 << 30;
/// Parts written concurrently per upload. Two keep the disk (or the network) busy while the next
/// part fills, and bound memory at ~3 parts per upload.
const MAX_PARTS_IN_FLIGHT: usize = 2;
/// Read size for local files. object_store's own file stream reads 8 KiB per blocking task, which
/// caps a large GET far below disk speed; 1 MiB amortises the task hand-off (a download holds
/// two: see `local_file_stream`).
const LOCAL_READ_CHUNK: usize = 1 << 20;
/// How long an S3 request may wait for the server's next bytes before it counts as failed (and
/// is retried; a download resumes where it stopped), unless configured.
const REMOTE_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a failing S3 request is tried again, from its first try, unless configured.
const REMOTE_RETRY_DEADLINE: Duration = Duration::from_secs(15);

/// Where a [`Store`](crate::Store) keeps its blobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobConfig {
    /// Files under this directory, created if missing.
    Local(PathBuf),
    /// Objects in an S3 bucket (AWS or an S3-compatible server).
    S3(S3Options),
}

/// An S3 bucket for blobs. `Debug` does not show the secret key.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Options {
    pub bucket: String,
    pub region: String,
    /// `http(s)://HOST[:PORT]` of an S3-compatible server; `None` = AWS itself.
    pub endpoint: Option<String>,
    /// Static credentials. When `None`, object_store's AWS chain applies: the `AWS_*`
    /// environment variables, a web identity token, ECS task or EC2 instance credentials.
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// The longest wait for the server's next bytes before a request counts as failed.
    pub read_timeout: Duration,
    /// How long a failed request (5xx, SlowDown, a reset, a read timed out) is tried again,
    /// from its first try; after that the caller gets the error (503 to clients).
    pub retry_deadline: Duration,
}

impl S3Options {
    /// A bucket on AWS with credentials from the environment.
    pub fn new(bucket: impl Into<String>, region: impl Into<String>) -> Self {
        S3Options {
            bucket: bucket.into(),
            region: region.into(),
            endpoint: None,
            access_key_id: None,
            secret_access_key: None,
            read_timeout: REMOTE_READ_TIMEOUT,
            retry_deadline: REMOTE_RETRY_DEADLINE,
        }
    }
}

impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key id names the credentials (AWS does not treat it as secret); the key is one.
        f.debug_struct("S3Options")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Where blobs live.
#[derive(Clone)]
pub struct BlobStore {
    store: Arc<dyn ObjectStore>,
    /// Set for the local backend: lets the collector remove staging files a killed upload left.
    local_root: Option<PathBuf>,
    /// Local backend: small blobs kept open (see [`OpenBlobs`]).
    open: Arc<OpenBlobs>,
    /// Local backend: whether a new blob's directory needs an fsync of its own after the
    /// blob's (see [`fsync_keeps_new_names`]).
    sync_dirs: bool,
    /// S3: the same bucket through object_store's multipart API, which lets pieces written by
    /// separate requests (in any process) become one object (see `assembly`).
    parts: Option<Arc<dyn object_store::multipart::MultipartStore>>,
}

/// Descriptors of small local blobs kept open, by key, with their length.
///
/// Why: opening a 4 KiB blob (a path walk, permission checks, a new descriptor), taking its
/// length and closing it again were ~6% of a small GET's CPU. A blob never changes once written
/// (ids are never reused), so a kept descriptor reads what a fresh one would; deleting a blob
/// through the store drops its descriptor, so its space is freed as before (a read racing the
/// delete may keep one until the set next starts over: at most [`MAX_OPEN_BLOBS`] small files).
#[derive(Default)]
struct OpenBlobs(std::sync::Mutex<HashMap<String, (Arc<std::fs::File>, u64)>>);

/// At most this many descriptors are kept: a full set starts over.
const MAX_OPEN_BLOBS: usize = 256;

impl OpenBlobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Arc<std::fs::File>, u64)>> {
        crate::lock_plain(&self.0)
    }

    fn get(&self, key: &str) -> Option<(Arc<std::fs::File>, u64)> {
        self.lock()
            .get(key)
            .map(|(file, len)| (Arc::clone(file), *len))
    }

    fn keep(&self, key: &str, file: &Arc<std::fs::File>, len: u64) {
        let mut open = self.lock();
        if open.len() >= MAX_OPEN_BLOBS {
            open.clear();
        }
        open.insert(key.to_owned(), (Arc::clone(file), len));
    }

    fn forget(&self, key: &str) {
        self.lock().remove(key);
    }
}

impl fmt::Debug for BlobStore {
    // The backend's one-line Display (`AmazonS3(bucket)`, `LocalFileSystem(file:///…)`), not its
    // Debug: that dumps the whole client configuration.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobStore")
            .field("store", &format_args!("{}", self.store))
            .finish()
    }
}

/// Whether a blob's bytes are kept in the metadata database (the blobs row's `data`, written
/// with the commit that made it a file's content) rather than in the blob store. Such ids
/// start with `i`, which no blob store id (hex) does; the rest of the store treats both alike,
/// and only reads and deletions look.
pub(crate) fn is_inline(id: &str) -> bool {
    id.starts_with('i')
}

/// A new id for a body kept in the metadata database (see [`is_inline`]).
pub(crate) fn new_inline_id() -> String {
    // Time-ordered: these ids are keys of the blobs table only, never of directories or S3
    // prefixes, so inserts land on the index's rightmost page.
    format!("i{}", crate::ids::time_ordered_id(crate::ids::now_ns()))
}

impl BlobStore {
    /// The blob store `cfg` describes.
    pub fn open(cfg: &BlobConfig) -> Result<Self, StoreError> {
        match cfg {
            BlobConfig::Local(dir) => Self::local(dir),
            BlobConfig::S3(opts) => Self::s3(opts),
        }
    }

    /// Blobs as files under `dir` (created if missing).
    ///
    /// Durability: `LocalFileSystem` does not fsync by default; `with_fsync(true)` makes it
    /// `sync_all` every written file before the rename that publishes it and fsync the parent
    /// directory after, so a blob is on stable storage when its write returns — which is what
    /// lets metadata point at it. (Checked in object_store 0.14's `local.rs`: `finish_staged_rename`.)
    pub fn local(dir: impl AsRef<FsPath>) -> Result<Self, StoreError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir)?;
        let dir = std::fs::canonicalize(dir)?;
        // The fan-out directories exist before the first write: a put that has to create its
        // directory pays three more fsyncs (the new directory and its parents) on top of the
        // file's and the directory entry's.
        let mut created = false;
        for i in 0..=255u8 {
            let sub = dir.join(format!("{i:02x}"));
            if !sub.is_dir() {
                std::fs::create_dir_all(&sub)?;
                created = true;
            }
        }
        if created {
            std::fs::File::open(&dir)?.sync_all()?;
        }
        let fs = LocalFileSystem::new_with_prefix(&dir)?.with_fsync(true);
        Ok(BlobStore {
            store: Arc::new(fs),
            sync_dirs: !fsync_keeps_new_names(&dir),
            local_root: Some(dir),
            open: Arc::default(),
            parts: None,
        })
    }

    /// Blobs as objects in an S3 bucket. Nothing is sent until the first use
    /// ([`Store::open`](crate::Store::open) checks the bucket).
    ///
    /// - Durability: S3 acknowledges a PUT or a multipart completion only once the object is
    ///   stored durably, so a completed write may be pointed at (no fsync to ask for).
    /// - Addressing: path-style (`ENDPOINT/BUCKET/KEY`) for a custom endpoint, as S3-compatible
    ///   servers expect; virtual-hosted (`BUCKET.s3.REGION.amazonaws.com`) on AWS unless the
    ///   bucket name has a dot, which the TLS wildcard certificate would not cover.
    /// - Timeouts: no limit on a whole request — a download lasts as long as its client takes
    ///   to read it — but `read_timeout` without a byte from the server fails a read, and
    ///   object_store retries it (a download resumes at the byte where it stopped, if the
    ///   object's ETag is unchanged; a write that timed out is not retried: object_store
    ///   retries timeouts of safe requests only). Failures are retried with backoff until
    ///   `retry_deadline` after the first try, then the error stands (storage-users answers
    ///   503): a frozen or failing S3 costs a bounded wait, never a hang.
    /// - Incomplete uploads: a failed or cancelled upload is aborted (see [`BlobWriter`]); only a
    ///   killed process leaves the parts of a multipart upload behind, which no object names
    ///   and the collector cannot see. Give the bucket a lifecycle rule with
    ///   `AbortIncompleteMultipartUpload` (e.g. after 1 day) to remove them.
    pub fn s3(opts: &S3Options) -> Result<Self, StoreError> {
        // Layers, later wins: our client defaults, then the AWS_* variables as
        // `AmazonS3Builder::from_env` reads them (credentials, session token, web identity,
        // container credentials, proxy, timeouts), then what the config gives. (from_env itself
        // would start from object_store's client defaults, and setting ours after it would drop
        // the client settings it read.)
        let client = ClientOptions::new()
            .with_timeout_disabled()
            .with_read_timeout(opts.read_timeout);
        let retry = object_store::RetryConfig {
            retry_timeout: opts.retry_deadline,
            ..Default::default()
        };
        let mut builder = AmazonS3Builder::new()
            .with_client_options(client)
            .with_retry(retry);
        for (key, value) in std::env::vars_os() {
            if let (Some(key), Some(value)) = (key.to_str(), value.to_str())
                && key.starts_with("AWS_")
                && let Ok(key) = key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>()
            {
                builder = builder.with_config(key, value);
            }
        }
        builder = builder
            .with_bucket_name(&opts.bucket)
            .with_region(&opts.region);
        match &opts.endpoint {
            Some(endpoint) => {
                builder = builder
                    .with_endpoint(endpoint)
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_virtual_hosted_style_request(false);
            }
            // AWS itself.
            None if builder
                .get_config_value(&AmazonS3ConfigKey::Endpoint)
                .is_none() =>
            {
                builder = builder.with_virtual_hosted_style_request(!opts.bucket.contains('.'));
            }
            // An endpoint from AWS_ENDPOINT: its addressing is the environment's too
            // (AWS_VIRTUAL_HOSTED_STYLE_REQUEST, AWS_ALLOW_HTTP).
            None => {}
        }
        match (&opts.access_key_id, &opts.secret_access_key) {
            (Some(id), Some(secret)) => {
                builder = builder
                    .with_access_key_id(id)
                    .with_secret_access_key(secret);
            }
            (None, None) => {}
            _ => {
                return Err(StoreError::Config(
                    "S3 access_key_id and secret_access_key must be given together".to_owned(),
                ));
            }
        }
        let s3 = Arc::new(
            builder
                .build()
                .map_err(|e| StoreError::Config(format!("S3 bucket {:?}: {e}", opts.bucket)))?,
        );
        let mut blobs = Self::from_object_store(Arc::clone(&s3) as Arc<dyn ObjectStore>);
        blobs.parts = Some(s3);
        Ok(blobs)
    }

    /// Blobs in any object store (S3, memory, ...). The store must make a completed write durable
    /// before returning, as the cloud stores do.
    pub fn from_object_store(store: Arc<dyn ObjectStore>) -> Self {
        BlobStore {
            store,
            local_root: None,
            open: Arc::default(),
            sync_dirs: true,
            parts: None,
        }
    }

    /// An in-memory store with its multipart API (tests of the S3 paths).
    #[cfg(test)]
    pub(crate) fn in_memory_with_parts() -> Self {
        let mem = Arc::new(object_store::memory::InMemory::new());
        let mut blobs = Self::from_object_store(Arc::clone(&mem) as Arc<dyn ObjectStore>);
        blobs.parts = Some(mem);
        blobs
    }

    /// Checks that the backend answers and the bucket exists, so a wrong bucket name or
    /// credentials fail at start, not at the first upload. Lists at most one page of keys (S3
    /// needs `s3:ListBucket`); the local directory was checked when it was opened.
    pub(crate) async fn check(&self) -> Result<(), StoreError> {
        if self.local_root.is_some() {
            return Ok(());
        }
        match self.store.list(None).next().await {
            None | Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(StoreError::Config(format!(
                "blob store {} does not answer a listing: {e}",
                self.store
            ))),
        }
    }

    /// `ab/abcd…`: 256 directories, so none grows past a few ten thousand entries per million
    /// blobs (ext4 and xfs index large directories), and few enough to create them all up front.
    /// On S3 the same keys spread requests over prefixes.
    fn key(id: &str) -> Path {
        let fan = id.get(0..2).unwrap_or("00");
        Path::from(format!("{fan}/{id}"))
    }

    /// The part size for an upload: small parts on disk; on S3 at least 5 MiB, and large enough
    /// for a declared length to fit in 10,000 parts.
    fn part_size(&self, size_hint: Option<u64>) -> usize {
        if self.local_root.is_some() {
            return LOCAL_PART_SIZE;
        }
        match size_hint {
            None => REMOTE_PART_SIZE,
            Some(len) => {
                let mib = len.div_ceil(REMOTE_MAX_PARTS).div_ceil(1 << 20);
                usize::try_from(mib << 20)
                    .unwrap_or(usize::MAX)
                    .clamp(REMOTE_MIN_PART_SIZE, REMOTE_MAX_PART_SIZE)
            }
        }
    }

    /// Starts writing a new blob; `size_hint` is the declared length, if any.
    pub(crate) fn writer(&self, id: &str, size_hint: Option<u64>) -> BlobWriter {
        let key = Self::key(id);
        BlobWriter {
            store: Arc::clone(&self.store),
            direct: self.local_root.as_ref().map(|root| DirectWrite {
                path: root.join(key.as_ref()),
                sync_dir: self.sync_dirs,
            }),
            key,
            part_size: self.part_size(size_hint),
            state: WriterState::Buffering {
                parts: Vec::new(),
                len: 0,
            },
        }
    }

    /// Streams `range` (start..end exclusive; the whole blob if `None`) with bounded memory.
    pub(crate) async fn read(
        &self,
        id: &str,
        range: Option<(u64, u64)>,
    ) -> Result<BoxStream<'static, Result<Bytes, StoreError>>, StoreError> {
        if let Some(root) = &self.local_root {
            let key = Self::key(id);
            return local_read(
                root.join(key.as_ref()),
                range,
                Some((&self.open, key.as_ref())),
            )
            .await;
        }
        let opts = GetOptions {
            range: range.map(|(start, end)| GetRange::Bounded(start..end)),
            ..GetOptions::default()
        };
        let got = self.store.get_opts(&Self::key(id), opts).await?;
        let range = got.range.clone();
        Ok(match got.payload {
            GetResultPayload::File(file, _) => {
                local_file_stream(file, range.start, range.end, false)
            }
            GetResultPayload::Stream(s) => s.map_err(StoreError::from).boxed(),
        })
    }

    /// Deletes a blob; a missing blob is fine (the collector may retry after a crash).
    pub(crate) async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.delete_many(&[id.to_owned()]).await
    }

    /// Deletes blobs; missing ones are fine. On S3 this is one `DeleteObjects` request per
    /// 1,000 keys rather than a round trip per blob.
    /// Bodies kept inline have nothing here: deleting their rows freed them.
    pub(crate) async fn delete_many(&self, ids: &[String]) -> Result<(), StoreError> {
        let ids: Vec<&String> = ids.iter().filter(|id| !is_inline(id)).collect();
        if ids.is_empty() {
            return Ok(());
        }
        let keys: Vec<object_store::Result<Path>> =
            ids.iter().map(|id| Ok(Self::key(id))).collect();
        let mut results = self.store.delete_stream(stream::iter(keys).boxed());
        while let Some(result) = results.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // A process killed mid-upload leaves LocalFileSystem's staging file `<key>#1` behind (its
        // Drop cleanup never ran). Blob ids are never reused, so the suffix is always 1.
        if let Some(root) = &self.local_root {
            for id in ids {
                self.open.forget(Self::key(id).as_ref());
                let mut staging = root.join(Self::key(id).as_ref()).into_os_string();
                staging.push("#1");
                match tokio::fs::remove_file(&staging).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Starts writing an object at `key`, outside the blob id namespace (resumable upload
    /// parts: see `uploads`). Same durability as a blob once `finish` returns.
    pub(crate) fn writer_at(&self, key: Path, size_hint: Option<u64>) -> BlobWriter {
        BlobWriter {
            store: Arc::clone(&self.store),
            // Upload parts are read by key alone, so they keep object_store's staged write.
            direct: None,
            key,
            part_size: self.part_size(size_hint),
            state: WriterState::Buffering {
                parts: Vec::new(),
                len: 0,
            },
        }
    }

    /// Streams the whole object at `key` with bounded memory.
    pub(crate) async fn read_at(
        &self,
        key: &Path,
    ) -> Result<BoxStream<'static, Result<Bytes, StoreError>>, StoreError> {
        let got = self.store.get_opts(key, GetOptions::default()).await?;
        let range = got.range.clone();
        Ok(match got.payload {
            GetResultPayload::File(file, _) => {
                local_file_stream(file, range.start, range.end, false)
            }
            GetResultPayload::Stream(s) => s.map_err(StoreError::from).boxed(),
        })
    }

    /// Deletes the objects at `keys` (and a local staging leftover of each); missing ones are
    /// fine.
    pub(crate) async fn delete_at(&self, keys: &[Path]) -> Result<(), StoreError> {
        let all: Vec<object_store::Result<Path>> = keys.iter().cloned().map(Ok).collect();
        let mut results = self.store.delete_stream(stream::iter(all).boxed());
        while let Some(result) = results.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(root) = &self.local_root {
            for key in keys {
                self.open.forget(key.as_ref());
                let path = root.join(key.as_ref());
                let mut staging = path.clone().into_os_string();
                staging.push("#1");
                match tokio::fs::remove_file(&staging).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
                // Directories are not objects: one emptied here would stay forever. One that
                // still holds something (or is gone already) is left as it is.
                if let Some(dir) = path.parent()
                    && dir != root.as_path()
                {
                    let _ = tokio::fs::remove_dir(dir).await;
                }
            }
        }
        Ok(())
    }

    /// Whether [`BlobStore::adopt`] can take an object of `len` bytes: always on disk; on S3
    /// up to the largest object one `CopyObject` copies.
    pub(crate) fn can_adopt(&self, len: u64) -> bool {
        self.local_root.is_some() || len <= REMOTE_MAX_COPY
    }

    /// Gives the finished object at `key` (an upload part) a second name, blob `id`, without
    /// sending its bytes again: a hard link on disk, a server-side copy on S3. The part keeps
    /// its own name, so deleting either never touches the other, and a crash between leaves
    /// only a blob the collector judges by its row. Durable when this returns.
    pub(crate) async fn adopt(&self, key: &Path, id: &str) -> Result<(), StoreError> {
        let to = Self::key(id);
        let Some(root) = &self.local_root else {
            self.store.copy(key, &to).await?;
            return Ok(());
        };
        let (from, to) = (root.join(key.as_ref()), root.join(to.as_ref()));
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let dir = to.parent().unwrap_or(FsPath::new("/")).to_owned();
            if let Err(e) = std::fs::hard_link(&from, &to) {
                if e.kind() != std::io::ErrorKind::NotFound || !from.exists() {
                    return Err(e);
                }
                // The fan-out directory was removed: made again, as a direct write does.
                std::fs::create_dir_all(&dir)?;
                std::fs::hard_link(&from, &to)?;
            }
            // A link changes only the directory (and the inode's link count), which no fsync
            // of the file's data covers: the directory is synced on every file system.
            std::fs::File::open(&dir)?.sync_all()
        })
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
        Ok(())
    }

    /// The objects under `prefix` with their last-modified time (ms since the epoch).
    pub(crate) async fn list_under(&self, prefix: &Path) -> Result<Vec<(Path, i64)>, StoreError> {
        let mut out = Vec::new();
        let mut listing = self.store.list(Some(prefix));
        while let Some(meta) = listing.next().await {
            match meta {
                Ok(m) => out.push((m.location, m.last_modified.timestamp_millis())),
                // A local directory that was never created holds nothing.
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// Whether the blob exists (tests and diagnostics).
    #[cfg(test)]
    pub(crate) async fn exists(&self, id: &str) -> Result<bool, StoreError> {
        match self.store.head(&Self::key(id)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    #[cfg(test)]
    pub(crate) fn local_path(&self, id: &str) -> Option<PathBuf> {
        self.local_root
            .as_ref()
            .map(|r| r.join(Self::key(id).as_ref()))
    }
}

/// The largest read first tried from the page cache on the async thread (see
/// [`read_cached`]): a small file's whole body, as most requests fetch. Blobs up to this size
/// are also kept open (see [`OpenBlobs`]).
const CACHED_READ_MAX: usize = 64 * 1024;

/// Opens a local blob and streams `range` of it. The open and its length are taken on the
/// async thread, as event-driven servers open files: a lookup of an inode the kernel almost
/// always holds. A small read is then served from the page cache right here when it is all
/// there; otherwise the first chunk is read in one blocking task and the rest streams as
/// [`local_file_stream`] reads it. Each hand-off to a blocking thread and back costs two
/// context switches, more than reading a small file itself. With `open` (the store's kept
/// descriptors and the blob's key), a small blob is read through a kept descriptor.
async fn local_read(
    path: PathBuf,
    range: Option<(u64, u64)>,
    open: Option<(&OpenBlobs, &str)>,
) -> Result<BoxStream<'static, Result<Bytes, StoreError>>, StoreError> {
    let kept = open.and_then(|(blobs, key)| blobs.get(key));
    let (file, len) = match kept {
        Some(kept) => kept,
        None => {
            let file = open_local(&path)?;
            let len = file.metadata()?.len();
            let file = Arc::new(file);
            if let Some((blobs, key)) = open
                && len <= CACHED_READ_MAX as u64
            {
                blobs.keep(key, &file, len);
            }
            (file, len)
        }
    };
    let (start, end) = match range {
        None => (0, len),
        Some((start, end)) if start <= end && start <= len => (start, end.min(len)),
        Some(_) => return Err(StoreError::InvalidRange),
    };
    let want = chunk_len(start, end)?;
    let cached = if want <= CACHED_READ_MAX {
        read_cached(&file, start, want)?
    } else {
        None
    };
    // A kept descriptor is shared: it is only ever read at an offset (`read_cached`), and
    // a read that seeks or streams gets a descriptor of its own.
    let file = match cached {
        // At most CACHED_READ_MAX bytes were wanted, so this is the whole range.
        Some(buf) => {
            return Ok(stream::iter((!buf.is_empty()).then(|| Ok(Bytes::from(buf)))).boxed());
        }
        None => match Arc::try_unwrap(file) {
            Ok(file) => file,
            Err(_) => open_local(&path)?,
        },
    };
    let (file, first) =
        tokio::task::spawn_blocking(move || read_chunk(file, start, want, start == 0))
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
    let next = start + first.len() as u64;
    let head = stream::iter((!first.is_empty()).then(|| Ok(Bytes::from(first))));
    // read_chunk left the file positioned at `next`.
    Ok(head.chain(local_file_stream(file, next, end, true)).boxed())
}

/// Opens a local blob; a missing one is the error object_store gives for a missing object.
fn open_local(path: &FsPath) -> Result<std::fs::File, StoreError> {
    std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            StoreError::Blob(object_store::Error::NotFound {
                path: path.display().to_string(),
                source: Box::new(e),
            })
        } else {
            StoreError::Io(e)
        }
    })
}

/// `want` bytes at `pos`, if the page cache holds every one of them: read with `preadv2` and
/// `RWF_NOWAIT`, which never waits for the disk. `None` when some would need the disk (or the
/// kernel or file system cannot tell), for the caller to read them on a blocking thread.
#[cfg(target_os = "linux")]
fn read_cached(file: &std::fs::File, pos: u64, want: usize) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::fd::AsRawFd as _;
    let mut buf = Vec::with_capacity(want);
    while buf.len() < want {
        let offset = libc::off_t::try_from(pos + buf.len() as u64)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let left = want - buf.len();
        let spare = &mut buf.spare_capacity_mut()[..left];
        let iov = libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: spare.len(),
        };
        // SAFETY: the one iovec points at the vector's spare capacity, valid for `iov_len`
        // bytes for the whole call; the kernel writes at most that many there.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => {
                    return Ok(None);
                }
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        // SAFETY: the kernel initialised the first `n` bytes of the spare capacity, and
        // `n <= iov_len` keeps the length within it.
        unsafe { buf.set_len(buf.len() + n as usize) };
    }
    Ok(Some(buf))
}

#[cfg(not(target_os = "linux"))]
fn read_cached(_: &std::fs::File, _: u64, _: usize) -> std::io::Result<Option<Vec<u8>>> {
    Ok(None)
}

/// How much of `start..end` one read takes.
fn chunk_len(start: u64, end: u64) -> Result<usize, StoreError> {
    usize::try_from(end.saturating_sub(start).min(LOCAL_READ_CHUNK as u64))
        .map_err(|_| StoreError::InvalidRange)
}

/// Reads `want` bytes at `pos` (seeking there unless `seeked`). The buffer is filled by the
/// read itself, not zeroed first.
fn read_chunk(
    mut file: std::fs::File,
    pos: u64,
    want: usize,
    seeked: bool,
) -> std::io::Result<(std::fs::File, Vec<u8>)> {
    if !seeked {
        file.seek(SeekFrom::Start(pos))?;
    }
    let mut buf = Vec::with_capacity(want);
    (&mut file).take(want as u64).read_to_end(&mut buf)?;
    if buf.len() < want {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok((file, buf))
}

/// Reads `start..end` of a local file in large chunks on blocking threads, one chunk ahead of
/// the consumer: the next read runs while the previous chunk travels to the client, so disk
/// (page cache) copies and socket copies proceed on two cores at once. Memory stays at two
/// chunks however large the file. `seeked`: the file is positioned at `start`.
fn local_file_stream(
    file: std::fs::File,
    start: u64,
    end: u64,
    seeked: bool,
) -> BoxStream<'static, Result<Bytes, StoreError>> {
    type Pending = tokio::task::JoinHandle<std::io::Result<(std::fs::File, Vec<u8>)>>;
    fn read_ahead(file: std::fs::File, pos: u64, end: u64, seeked: bool) -> Option<Pending> {
        let want = chunk_len(pos, end).ok().filter(|&n| n > 0)?;
        Some(tokio::task::spawn_blocking(move || {
            read_chunk(file, pos, want, seeked)
        }))
    }
    let first = read_ahead(file, start, end, seeked);
    stream::try_unfold((first, start), move |(pending, pos)| async move {
        let Some(pending) = pending else {
            return Ok(None);
        };
        let (file, buf) = pending
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
        let next = pos + buf.len() as u64;
        let ahead = read_ahead(file, next, end, true);
        Ok(Some((Bytes::from(buf), (ahead, next))))
    })
    .boxed()
}

enum WriterState {
    /// Small bodies never start a multipart upload: if the whole body fits in one part it is
    /// written with a single `put`, one blocking task and one fsync instead of three round trips.
    Buffering {
        parts: Vec<Bytes>,
        len: usize,
    },
    Multipart(WriteMultipart),
    /// Finished or aborted.
    Done,
}

/// One blob being written. Dropping it without [`BlobWriter::finish`] abandons the write: a
/// multipart upload in progress is aborted in the background (on S3 its parts would otherwise
/// stay, unseen and billed; on disk the staging file is removed).
pub(crate) struct BlobWriter {
    store: Arc<dyn ObjectStore>,
    /// Local blobs: a body that fits in one part is written straight to its final name.
    direct: Option<DirectWrite>,
    key: Path,
    part_size: usize,
    state: WriterState,
}

impl BlobWriter {
    /// Appends a chunk, waiting while too many parts are in flight (backpressure on the body).
    pub(crate) async fn write(&mut self, chunk: Bytes) -> Result<(), StoreError> {
        match &mut self.state {
            WriterState::Buffering { parts, len } => {
                *len += chunk.len();
                parts.push(chunk);
                if *len >= self.part_size {
                    let parts = std::mem::take(parts);
                    let upload = self.store.put_multipart(&self.key).await?;
                    let mut multipart = WriteMultipart::new_with_chunk_size(upload, self.part_size);
                    for part in parts {
                        multipart.put(part);
                    }
                    self.state = WriterState::Multipart(multipart);
                    self.wait().await?;
                }
            }
            WriterState::Multipart(multipart) => {
                multipart.put(chunk);
                self.wait().await?;
            }
            WriterState::Done => {
                return Err(StoreError::Corrupt(format!(
                    "blob {} written after it was finished",
                    self.key
                )));
            }
        }
        Ok(())
    }

    async fn wait(&mut self) -> Result<(), StoreError> {
        if let WriterState::Multipart(m) = &mut self.state {
            m.wait_for_capacity(MAX_PARTS_IN_FLIGHT).await?;
        }
        Ok(())
    }

    /// Completes the blob; when this returns Ok the content is durable. A multipart upload that
    /// fails to complete is aborted by object_store.
    pub(crate) async fn finish(mut self) -> Result<(), StoreError> {
        match std::mem::replace(&mut self.state, WriterState::Done) {
            WriterState::Buffering { parts, .. } => match self.direct.take() {
                Some(direct) => {
                    tokio::task::spawn_blocking(move || direct.write(&parts))
                        .await
                        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
                }
                None => {
                    let payload: PutPayload = parts.into_iter().collect();
                    self.store.put(&self.key, payload).await?;
                }
            },
            WriterState::Multipart(multipart) => {
                multipart.finish().await?;
            }
            WriterState::Done => {}
        }
        Ok(())
    }

    /// Abandons the blob, removing what was written so far (best effort; the collector catches
    /// what this misses).
    pub(crate) async fn abort(mut self) {
        if let WriterState::Multipart(multipart) =
            std::mem::replace(&mut self.state, WriterState::Done)
            && let Err(e) = multipart.abort().await
        {
            tracing::debug!(key = %self.key, error = %e, "aborting a blob upload failed");
        }
    }
}

impl Drop for BlobWriter {
    /// A put whose future is dropped (the client went away mid-body, the request was cancelled)
    /// never reaches `abort`: abort here, on the runtime, since Drop cannot wait.
    fn drop(&mut self) {
        let WriterState::Multipart(multipart) =
            std::mem::replace(&mut self.state, WriterState::Done)
        else {
            return;
        };
        let key = self.key.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = multipart.abort().await {
                        tracing::debug!(%key, error = %e, "aborting a dropped blob upload failed");
                    }
                });
            }
            // No runtime (process teardown): dropping it still removes a local staging file; an
            // S3 upload is left to the bucket's lifecycle rule.
            Err(_) => drop(multipart),
        }
    }
}

/// A small local blob written in one blocking task, straight to its final name: create, write,
/// `fdatasync`, and the directory's fsync where the file system needs it.
///
/// Why not object_store's put: it writes a staging file, syncs it, renames it and syncs the
/// directory — two journal commits per blob, and a small PUT's largest cost. The rename exists
/// so that readers never see a partial object; a blob has no reader before metadata points at
/// it, which happens only after this returns. A write cut short (an error, a crash) leaves a
/// file under an "uploading" row, which the put's own cleanup or the collector deletes.
struct DirectWrite {
    path: PathBuf,
    sync_dir: bool,
}

impl DirectWrite {
    fn write(self, parts: &[Bytes]) -> Result<(), StoreError> {
        let mut file = self.create()?;
        let written = (|| {
            use std::io::Write as _;
            for part in parts {
                file.write_all(part)?;
            }
            file.sync_data()?;
            if self.sync_dir
                && let Some(dir) = self.path.parent()
            {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })();
        if written.is_err() {
            // Best effort: what stays is an uploading blob, the collector's to remove.
            let _ = std::fs::remove_file(&self.path);
        }
        written.map_err(StoreError::Io)
    }

    /// Creates the blob's file; never opens one that exists.
    fn create(&self) -> std::io::Result<std::fs::File> {
        match std::fs::File::create_new(&self.path) {
            // The fan-out directory was removed by hand: make it again, durably.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let Some(dir) = self.path.parent() else {
                    return Err(e);
                };
                std::fs::create_dir_all(dir)?;
                if let Some(root) = dir.parent() {
                    std::fs::File::open(root)?.sync_all()?;
                }
                std::fs::File::create_new(&self.path)
            }
            created => created,
        }
    }
}

/// Whether fsync of a newly created file also makes its name durable on the file system
/// holding `dir`, so the directory needs no fsync of its own. True for ext4 and XFS: ext4 adds
/// the name in the same journal transaction as the inode, which the file's fsync commits (in
/// no-journal mode ext4 syncs the parent itself), and XFS forces its log up to the inode's
/// last change, which includes the create. Everywhere else the directory is synced too, at a
/// cost: on this ext4 a directory fsync after each blob's doubled the disk cache flushes per
/// blob (0.6 to 1.2) and the CPU time of a 4 KiB PUT grew by a tenth.
#[cfg(target_os = "linux")]
fn fsync_keeps_new_names(dir: &FsPath) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string and `fs` is valid for one `statfs` struct,
    // which the call fills when it returns 0.
    if unsafe { libc::statfs(path.as_ptr(), fs.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: statfs returned 0, so it filled the struct.
    let fs = unsafe { fs.assume_init() };
    matches!(fs.f_type, libc::EXT4_SUPER_MAGIC | libc::XFS_SUPER_MAGIC)
}

#[cfg(not(target_os = "linux"))]
fn fsync_keeps_new_names(_: &FsPath) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    #[test]
    fn part_sizes() {
        const MIB: usize = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        let local = BlobStore::local(dir.path()).unwrap();
        assert_eq!(local.part_size(None), MIB);
        assert_eq!(local.part_size(Some(1 << 40)), MIB);

        let remote = BlobStore::from_object_store(Arc::new(InMemory::new()));
        assert_eq!(remote.part_size(None), 8 * MIB);
        assert_eq!(remote.part_size(Some(0)), 5 * MIB);
        assert_eq!(remote.part_size(Some((5 << 20) + 3)), 5 * MIB);
        // 100 GiB needs 10.24 MiB parts to fit in 10,000; rounded up to whole MiB.
        assert_eq!(remote.part_size(Some(100 << 30)), 11 * MIB);
        assert_eq!(remote.part_size(Some(u64::MAX)), 64 * MIB);
    }

    /// A small read comes from the page cache when every byte is there, and from a blocking
    /// thread when not, with the same bytes either way.
    /// A small blob is read through a kept descriptor, from the page cache or (when its pages
    /// are gone) through a descriptor of its own, with the same bytes for every range; deleting
    /// it through the store drops the descriptor and later reads find nothing.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn small_blobs_are_read_through_a_kept_descriptor_until_deleted() {
        use std::os::fd::AsRawFd as _;
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let blobs = BlobStore::local(dir.path()).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 241) as u8).collect();
        let id = "00112233445566778899aabbccddeeff";
        let mut w = blobs.writer(id, Some(data.len() as u64));
        w.write(Bytes::from(data.clone())).await.unwrap();
        w.finish().await.unwrap();
        let key = BlobStore::key(id);
        let read = |range| {
            let blobs = blobs.clone();
            async move {
                let chunks: Vec<Bytes> = blobs.read(id, range).await?.try_collect().await?;
                Ok::<_, StoreError>(chunks.concat())
            }
        };
        assert_eq!(read(None).await.unwrap(), data);
        let (kept, len) = blobs.open.get(key.as_ref()).expect("kept open");
        assert_eq!(len, data.len() as u64);
        for cold in [false, true] {
            if cold {
                // SAFETY: a valid open descriptor; the advice only concerns the page cache.
                let rc = unsafe {
                    libc::posix_fadvise(kept.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
                };
                assert_eq!(rc, 0);
            }
            for (range, want) in [
                (Some((100, 1000)), &data[100..1000]),
                (None, &data[..]),
                (Some((9_990, 20_000)), &data[9_990..]),
            ] {
                assert_eq!(read(range).await.unwrap(), want, "{range:?}, cold: {cold}");
            }
        }
        drop(kept);
        blobs.delete(id).await.unwrap();
        assert!(blobs.open.get(key.as_ref()).is_none());
        assert!(matches!(
            read(None).await,
            Err(StoreError::Blob(object_store::Error::NotFound { .. }))
        ));
    }

    /// A body that fits in one part lands under its final name in one go (no staging file
    /// left, none renamed), in a fan-out directory made again if it was removed; a file
    /// already under the name is neither opened nor removed.
    #[tokio::test]
    async fn small_local_blobs_are_written_in_place() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let blobs = BlobStore::local(dir.path()).unwrap();
        let write = |id: &'static str, parts: Vec<&'static [u8]>| {
            let blobs = blobs.clone();
            async move {
                let mut w = blobs.writer(id, None);
                for part in parts {
                    w.write(Bytes::from_static(part)).await?;
                }
                w.finish().await
            }
        };
        let id = "ab112233445566778899aabbccddeeff";
        write(id, vec![b"hello ", b"world"]).await.unwrap();
        let path = blobs.local_path(id).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world");
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(id)]);

        std::fs::remove_dir_all(dir.path().join("cd")).unwrap();
        let id = "cd112233445566778899aabbccddeeff";
        write(id, vec![b"again"]).await.unwrap();
        assert_eq!(
            std::fs::read(blobs.local_path(id).unwrap()).unwrap(),
            b"again"
        );

        let taken = "ef112233445566778899aabbccddeeff";
        std::fs::write(blobs.local_path(taken).unwrap(), b"someone else's").unwrap();
        let err = write(taken, vec![b"mine"]).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Io(e) if e.kind() == std::io::ErrorKind::AlreadyExists),
            "{err}"
        );
        assert_eq!(
            std::fs::read(blobs.local_path(taken).unwrap()).unwrap(),
            b"someone else's"
        );
    }

    /// Directories are synced on a file system not known to keep a new file's name with the
    /// file's fsync.
    #[cfg(target_os = "linux")]
    #[test]
    fn new_names_are_trusted_to_ext4_and_xfs_only() {
        assert!(!fsync_keeps_new_names(FsPath::new("/proc")));
        assert!(!fsync_keeps_new_names(FsPath::new("/no/such/dir")));
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn small_reads_from_the_page_cache_or_the_disk() {
        use std::os::fd::AsRawFd as _;
        // Beside the sources, on the disk the build uses: /tmp may be a tmpfs, whose pages
        // cannot be dropped and are always "cached".
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = dir.path().join("blob");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // Written back, so the kernel may drop the pages when told to.
        file.sync_all().unwrap();
        let evict = || {
            // SAFETY: a valid open descriptor; the advice only concerns the page cache.
            let rc =
                unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(rc, 0);
        };
        let cached = read_cached(&file, 100, 900).unwrap();
        assert_eq!(cached.as_deref(), Some(&data[100..1000]));
        // The advice is a request: pages the kernel is still handling (a batch not yet on its
        // lists, another test's writeback on the disk) may stay a moment, longer on a busy
        // machine: ask again for up to two seconds. Once they are gone the non-blocking read
        // must decline; one that read through the disk never would.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let declined = std::iter::from_fn(|| {
            (std::time::Instant::now() < until).then(|| {
                evict();
                let gone = read_cached(&file, 100, 900).unwrap().is_none();
                if !gone {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                gone
            })
        })
        .any(|gone| gone);
        assert!(
            declined,
            "read_cached served pages the kernel was told to drop"
        );

        for (range, want) in [
            (None, &data[..]),
            (Some((100, 1000)), &data[100..1000]),
            (Some((9_990, 20_000)), &data[9_990..]),
        ] {
            for cold in [true, false] {
                if cold {
                    evict();
                }
                let chunks: Vec<Bytes> = local_read(path.clone(), range, None)
                    .await
                    .unwrap()
                    .try_collect()
                    .await
                    .unwrap();
                assert_eq!(chunks.concat(), want, "{range:?}, cold: {cold}");
            }
        }
    }

    /// Building the S3 client builds its TLS configuration: with one rustls crypto provider
    /// compiled in (aws-lc-rs, through object_store's `aws` feature) that cannot be ambiguous.
    #[test]
    fn s3_options_are_checked_and_the_secret_is_not_shown() {
        let aws = S3Options::new("arca.blobs", "eu-central-1");
        BlobStore::s3(&aws).unwrap();
        let opts = S3Options {
            access_key_id: Some("AKIAEXAMPLE".into()),
            secret_access_key: Some("wJalrXUtnFEMI".into()),
            endpoint: Some("https://s3.example.com".into()),
            ..aws.clone()
        };
        let store = BlobStore::s3(&opts).unwrap();
        let shown = format!("{opts:?} {store:?}");
        assert!(!shown.contains("wJalrXUtnFEMI"), "{shown}");
        assert!(shown.contains("AmazonS3(arca.blobs)"), "{shown}");

        let half = S3Options {
            access_key_id: Some("AKIAEXAMPLE".into()),
            ..aws
        };
        let err = BlobStore::s3(&half).unwrap_err();
        assert!(matches!(err, StoreError::Config(_)), "{err:?}");
    }
}
