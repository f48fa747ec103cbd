//! Resumable uploads (TUS 1.0.0) on the provider's side: the partial bytes and a small record
//! per upload under `data_dir/storage-users/uploads`, the `/tus/{token}` data path that takes
//! `PATCH` (append a chunk), `HEAD` (where is it) and `DELETE` (termination), the commit of a
//! complete upload through the store (the same atomic write as a PUT: blob synced before the
//! metadata points at it, previous version intact on failure, etags propagated, checksums
//! computed), and the sweep that removes expired uploads.
//!
//! Durability: a record's `offset` only ever counts bytes that are synced to disk. A PATCH
//! appends to `ID.bin`, syncs it, then replaces `ID.info` atomically (write, sync, rename);
//! a chunk that completes the upload goes straight into the store's
//! commit instead, and is made durable here only if that commit fails. A process killed
//! mid-PATCH leaves a `.bin` longer than its record says; the next PATCH cuts it back to the
//! recorded offset before appending, so no unsynced byte is ever committed. A client that drops its connection mid-chunk keeps what arrived (TUS core:
//! the server should store as much as it received), unless the chunk carried an
//! `Upload-Checksum` that can no longer be verified.
//!
//! Uploads live on this process's disk, so they survive its restart but not the loss of the
//! disk. The URL token (signed with the process's [`TokenSigner`](arca_runtime::TokenSigner))
//! names the upload, the user who created it and its target: it authorises that one upload
//! and nothing else, and expires with it.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex as SyncMutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arca_proto::ErrorKind;
use arca_proto::v1::{InitiateUploadRequest, Node, Transfer};
use arca_runtime::Identity;
use arca_store::{Node as StoreNode, PutOptions, Space as StoreSpace, StoreError};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};
use sha1::Digest as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tonic::Status;

use crate::data::{NODE_HEADER, node_header};
use crate::provider::{Provider, mtime};

/// The token purpose of upload URLs: a TUS token is never accepted as any other grant.
pub(crate) const TUS_PURPOSE: &str = "tus";
/// TUS core: every PATCH body has this type (§ PATCH).
const OFFSET_STREAM: &str = "application/offset+octet-stream";
/// Body bytes gathered before one write: request bodies arrive in small frames.
const WRITE_BUFFER: usize = 1 << 20;
/// Read size when a complete upload streams into the store.
const READ_CHUNK: usize = 256 << 10;
/// TUS checksum extension: "460 Checksum Mismatch" for a chunk that fails its checksum.
const CHECKSUM_MISMATCH: u16 = 460;
/// How long a request waits for another one on the same upload to finish. A PATCH whose client
/// vanished without closing its connection holds the upload until the connection times out;
/// past this wait the request is refused (423) rather than hung.
const BUSY_WAIT: Duration = Duration::from_secs(30);
/// A `.bin` without a record, or a half-written record, is garbage once this old (younger ones
/// may belong to a request in progress).
const STRAY_MIN_AGE: Duration = Duration::from_secs(60);

static TUS_RESUMABLE: HeaderName = HeaderName::from_static("tus-resumable");
static UPLOAD_OFFSET: HeaderName = HeaderName::from_static("upload-offset");
static UPLOAD_LENGTH: HeaderName = HeaderName::from_static("upload-length");
static UPLOAD_EXPIRES: HeaderName = HeaderName::from_static("upload-expires");
static UPLOAD_METADATA: HeaderName = HeaderName::from_static("upload-metadata");
static UPLOAD_CHECKSUM: HeaderName = HeaderName::from_static("upload-checksum");

/// What an upload URL grants: appending to, inspecting and ending one upload.
#[derive(Serialize, Deserialize)]
pub(crate) struct TusGrant {
    upload: String,
    user: String,
    space: String,
    path: String,
}

/// One upload's state, as `ID.info` holds it (JSON).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    id: String,
    /// The user who created it; only their token reaches it.
    user: String,
    /// Store ids of the space and of the directory the file goes in.
    space: String,
    parent: String,
    name: String,
    /// The target path inside the space.
    path: String,
    /// The space owner, for the node answered on completion.
    owner: String,
    length: u64,
    /// Bytes received and synced.
    offset: u64,
    /// Etag the existing file must still have at commit; empty: no condition.
    #[serde(default)]
    if_match: String,
    #[serde(default)]
    mtime_ns: i64,
    /// Unix seconds; the upload is gone after this.
    expires: u64,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum UploadError {
    #[error("no such upload (unknown, expired, finished or terminated)")]
    NotFound,
    #[error("Upload-Offset {given} does not match the upload's offset {current}")]
    OffsetMismatch { given: u64, current: u64 },
    #[error("a PATCH body must be sent as application/offset+octet-stream")]
    MediaType,
    #[error("{0}")]
    BadRequest(String),
    #[error("the chunk does not match its Upload-Checksum; it was discarded")]
    ChecksumMismatch,
    #[error("the chunk goes past Upload-Length ({0} bytes); it was discarded")]
    TooLong(u64),
    #[error("another request is writing this upload")]
    Busy,
    #[error("reading the chunk failed: {0}")]
    Body(String),
    #[error("upload storage: {0}")]
    Io(#[from] io::Error),
    #[error("upload record {0}: {1}")]
    Record(String, String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl UploadError {
    fn status(&self) -> StatusCode {
        match self {
            UploadError::NotFound => StatusCode::NOT_FOUND,
            UploadError::OffsetMismatch { .. } => StatusCode::CONFLICT,
            UploadError::MediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            UploadError::BadRequest(_) | UploadError::Body(_) => StatusCode::BAD_REQUEST,
            UploadError::ChecksumMismatch => {
                StatusCode::from_u16(CHECKSUM_MISMATCH).unwrap_or(StatusCode::BAD_REQUEST)
            }
            UploadError::TooLong(_) => StatusCode::PAYLOAD_TOO_LARGE,
            UploadError::Busy => StatusCode::LOCKED,
            UploadError::Io(_) | UploadError::Record(..) => StatusCode::INTERNAL_SERVER_ERROR,
            UploadError::Store(e) => match e {
                StoreError::NotFound
                | StoreError::Conflict
                | StoreError::NotADirectory
                | StoreError::IsADirectory => StatusCode::CONFLICT,
                StoreError::PreconditionFailed | StoreError::AlreadyExists => {
                    StatusCode::PRECONDITION_FAILED
                }
                StoreError::QuotaExceeded => StatusCode::INSUFFICIENT_STORAGE,
                StoreError::Locked => StatusCode::LOCKED,
                StoreError::InvalidName { .. } => StatusCode::BAD_REQUEST,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
        }
    }

    /// Whether the upload can never complete after this commit failure, so it is removed.
    fn is_final(&self) -> bool {
        matches!(
            self,
            UploadError::Store(
                StoreError::NotFound
                    | StoreError::Conflict
                    | StoreError::NotADirectory
                    | StoreError::IsADirectory
                    | StoreError::PreconditionFailed
                    | StoreError::AlreadyExists
                    | StoreError::QuotaExceeded
                    | StoreError::InvalidName { .. }
                    | StoreError::LengthMismatch { .. }
            )
        )
    }

    fn into_response(self, current_offset: Option<u64>) -> Response {
        let status = self.status();
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self, "resumable upload failure");
        }
        let mut resp = (status, format!("{self}\n")).into_response();
        let h = resp.headers_mut();
        h.insert(TUS_RESUMABLE.clone(), HeaderValue::from_static("1.0.0"));
        if let UploadError::OffsetMismatch { current, .. } = self {
            h.insert(UPLOAD_OFFSET.clone(), HeaderValue::from(current));
        } else if let Some(offset) = current_offset {
            h.insert(UPLOAD_OFFSET.clone(), HeaderValue::from(offset));
        }
        resp
    }
}

/// The uploads of this process: their directory, their lifetime, and who is writing which.
#[derive(Clone)]
pub(crate) struct Uploads {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    expiration: Duration,
    /// One async lock per upload in use: requests on one upload run one at a time (two PATCHes
    /// appending to one file at once would interleave bytes). Entries nobody holds are pruned.
    busy: SyncMutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Upload ids are 32 lowercase hex digits: nothing else ever becomes a file name here.
fn is_upload_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Writes `bytes` to `path` so that a reader sees either the old or the new content, never a
/// mix or an empty file. The directory is not synced: after a power loss the rename may be
/// undone, and the old record (an older offset, or no upload at all) is still true, only
/// older. The client then resends more, or starts over; nothing wrong is ever committed.
fn write_atomically(path: &FsPath, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("info.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)
}

impl Uploads {
    /// The uploads kept in `dir` (created if missing), each living `expiration` from creation.
    pub(crate) async fn open(dir: PathBuf, expiration: Duration) -> io::Result<Self> {
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                expiration,
                busy: SyncMutex::new(HashMap::new()),
            }),
        })
    }

    fn info_path(&self, id: &str) -> PathBuf {
        self.inner.dir.join(format!("{id}.info"))
    }

    fn bin_path(&self, id: &str) -> PathBuf {
        self.inner.dir.join(format!("{id}.bin"))
    }

    fn lock_of(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut busy = self
            .inner
            .busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Only the map holds an idle entry; a holder or waiter has its own clone.
        busy.retain(|_, l| Arc::strong_count(l) > 1);
        busy.entry(id.to_owned()).or_default().clone()
    }

    async fn load(&self, id: &str) -> Result<Option<Record>, UploadError> {
        let bytes = match tokio::fs::read(self.info_path(id)).await {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| UploadError::Record(id.to_owned(), e.to_string()))
    }

    async fn save(&self, record: &Record) -> Result<(), UploadError> {
        let bytes = serde_json::to_vec(record)
            .map_err(|e| UploadError::Record(record.id.clone(), e.to_string()))?;
        let path = self.info_path(&record.id);
        tokio::task::spawn_blocking(move || write_atomically(&path, &bytes))
            .await
            .map_err(|e| io::Error::other(e.to_string()))??;
        Ok(())
    }

    /// Removes an upload: the record first, so that from then on it does not exist; a crash
    /// before the bytes go leaves a stray `.bin` for the sweep.
    async fn remove(&self, id: &str) {
        for path in [self.info_path(id), self.bin_path(id)] {
            match tokio::fs::remove_file(&path).await {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "removing an upload"),
            }
        }
    }

    /// The live record a grant names. Anything that does not match exactly is "not found":
    /// a token never reaches an upload it was not issued for.
    async fn record_for(&self, grant: &TusGrant) -> Result<Record, UploadError> {
        if !is_upload_id(&grant.upload) {
            return Err(UploadError::NotFound);
        }
        let record = self
            .load(&grant.upload)
            .await?
            .ok_or(UploadError::NotFound)?;
        if record.user != grant.user || record.space != grant.space || record.path != grant.path {
            return Err(UploadError::NotFound);
        }
        if record.expires <= now_secs() {
            self.remove(&record.id).await;
            return Err(UploadError::NotFound);
        }
        Ok(record)
    }

    /// Appends one chunk at `record.offset`. Returns the synced offset reached, and the error
    /// that stopped the chunk if any (the bytes before it are kept unless a checksum was asked).
    async fn append(
        &self,
        record: &Record,
        body: Body,
        checksum: Option<(ChunkHasher, Vec<u8>)>,
    ) -> (u64, Option<UploadError>) {
        let start = record.offset;
        let mut file = match self.open_at(record).await {
            Ok(f) => f,
            Err(e) => return (start, Some(e.into())),
        };
        let (mut hasher, expected) = match checksum {
            Some((h, e)) => (Some(h), Some(e)),
            None => (None, None),
        };
        let room = record.length - start;
        let mut received: u64 = 0;
        let mut buffer = BytesMut::new();
        let mut stream = body.into_data_stream();
        let mut failure = None;
        while let Some(frame) = stream.next().await {
            let chunk = match frame {
                Ok(c) => c,
                Err(e) => {
                    failure = Some(UploadError::Body(e.to_string()));
                    break;
                }
            };
            received += chunk.len() as u64;
            if received > room {
                failure = Some(UploadError::TooLong(record.length));
                break;
            }
            if let Some(h) = hasher.as_mut() {
                h.update(&chunk);
            }
            buffer.extend_from_slice(&chunk);
            if buffer.len() >= WRITE_BUFFER
                && let Err(e) = file.write_all(&buffer.split()).await
            {
                failure = Some(e.into());
                break;
            }
        }
        if failure.is_none()
            && let (Some(h), Some(want)) = (hasher, expected.as_ref())
            && h.finish() != *want
        {
            failure = Some(UploadError::ChecksumMismatch);
        }
        let keep = match &failure {
            None => true,
            // What arrived before the client went away is good data: keep it, unless it was
            // to be checked against a checksum of the whole chunk.
            Some(UploadError::Body(_)) => expected.is_none(),
            Some(_) => false,
        };
        if !keep {
            // The record still says `start`; the next PATCH cuts the file back to it anyway,
            // this only frees the space now.
            let _ = file.set_len(start).await;
            return (start, failure);
        }
        let reached = start + received;
        // A chunk that completes the upload is committed at once, read back from the page
        // cache into a blob the store syncs: syncing it here too would only cost. Should the
        // commit not happen now, `persist` makes it durable first.
        let complete = failure.is_none() && reached == record.length;
        let written = async {
            file.write_all(&buffer).await?;
            file.flush().await?;
            if !complete {
                file.sync_data().await?;
            }
            Ok::<_, io::Error>(())
        }
        .await;
        match written {
            Ok(()) => (reached, failure),
            Err(e) => (start, Some(e.into())),
        }
    }

    /// Syncs the bytes a record counts, then the record: after a complete chunk whose commit
    /// failed, so that the client can retry the commit later, even after a crash.
    async fn persist(&self, record: &Record) -> Result<(), UploadError> {
        tokio::fs::File::open(self.bin_path(&record.id))
            .await?
            .sync_data()
            .await?;
        self.save(record).await
    }

    /// The upload's file, cut back to the record's offset (whatever lies past it was never
    /// synced and recorded) and positioned there.
    async fn open_at(&self, record: &Record) -> io::Result<tokio::fs::File> {
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.bin_path(&record.id))
            .await?;
        file.set_len(record.offset).await?;
        file.seek(io::SeekFrom::Start(record.offset)).await?;
        Ok(file)
    }

    /// Removes expired uploads and stray files; returns how many uploads went.
    pub(crate) async fn sweep(&self) -> io::Result<usize> {
        let now = now_secs();
        let mut records = HashSet::new();
        let mut others = Vec::new();
        let mut entries = tokio::fs::read_dir(&self.inner.dir).await?;
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name().to_string_lossy().into_owned();
            match name.strip_suffix(".info") {
                Some(id) if is_upload_id(id) => {
                    records.insert(id.to_owned());
                }
                _ => others.push((name, entry.path())),
            }
        }
        let mut removed = 0;
        for id in &records {
            let lock = self.lock_of(id);
            // An upload a request is using is not abandoned; the next sweep looks again.
            let Ok(_held) = lock.try_lock() else { continue };
            match self.load(id).await {
                Ok(Some(r)) if r.expires > now => continue,
                Ok(_) => {}
                Err(e) => tracing::warn!(upload = %id, error = %e, "removing an unreadable upload"),
            }
            self.remove(id).await;
            removed += 1;
        }
        for (name, path) in others {
            let owned = name
                .strip_suffix(".bin")
                .is_some_and(|id| records.contains(id));
            if owned {
                continue;
            }
            let old = tokio::fs::metadata(&path)
                .await
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= STRAY_MIN_AGE);
            if old && let Err(e) = tokio::fs::remove_file(&path).await {
                tracing::warn!(path = %path.display(), error = %e, "removing a stray upload file");
            }
        }
        Ok(removed)
    }

    /// Sweeps now and then every quarter of the expiration (between 1 s and 10 min) until
    /// `stop` completes.
    pub(crate) async fn sweep_until(self, stop: impl Future<Output = ()>) {
        let every =
            (self.inner.expiration / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
        let mut stop = std::pin::pin!(stop);
        loop {
            match self.sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "removed expired uploads"),
                Err(e) => tracing::warn!(error = %e, "sweeping expired uploads failed"),
            }
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    }
}

/// The digest an `Upload-Checksum` names (TUS checksum extension; we offer sha1 and md5).
enum ChunkHasher {
    Sha1(sha1::Sha1),
    Md5(md5::Md5),
}

impl ChunkHasher {
    fn update(&mut self, bytes: &[u8]) {
        match self {
            ChunkHasher::Sha1(h) => h.update(bytes),
            ChunkHasher::Md5(h) => h.update(bytes),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            ChunkHasher::Sha1(h) => h.finalize().to_vec(),
            ChunkHasher::Md5(h) => h.finalize().to_vec(),
        }
    }
}

/// `Upload-Checksum: ALGO BASE64` → the hasher and the expected digest.
fn parse_checksum(headers: &HeaderMap) -> Result<Option<(ChunkHasher, Vec<u8>)>, UploadError> {
    let Some(value) = headers.get(&UPLOAD_CHECKSUM) else {
        return Ok(None);
    };
    let bad = |why: &str| UploadError::BadRequest(format!("Upload-Checksum: {why}"));
    let value = value.to_str().map_err(|_| bad("not ASCII"))?;
    let (algo, digest) = value
        .trim()
        .split_once(' ')
        .ok_or_else(|| bad("expected \"ALGORITHM BASE64\""))?;
    let hasher = match algo.to_ascii_lowercase().as_str() {
        "sha1" => ChunkHasher::Sha1(sha1::Sha1::new()),
        "md5" => ChunkHasher::Md5(md5::Md5::new()),
        _ => return Err(bad("unsupported algorithm (md5 and sha1 are)")),
    };
    let digest = base64::engine::general_purpose::STANDARD
        .decode(digest.trim())
        .map_err(|_| bad("the digest is not base64"))?;
    Ok(Some((hasher, digest)))
}

fn parse_offset(headers: &HeaderMap) -> Result<u64, UploadError> {
    headers
        .get(&UPLOAD_OFFSET)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| UploadError::BadRequest("Upload-Offset missing or not a number".into()))
}

/// A file's bytes as a body stream for the store.
fn read_stream<R>(reader: R) -> impl Stream<Item = io::Result<Bytes>> + Send
where
    R: AsyncRead + Unpin + Send,
{
    futures::stream::try_unfold(reader, |mut r| async move {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        let n = r.read_buf(&mut buf).await?;
        Ok((n > 0).then(|| (buf.freeze(), r)))
    })
}

fn tus_headers(h: &mut HeaderMap, record: &Record) {
    h.insert(TUS_RESUMABLE.clone(), HeaderValue::from_static("1.0.0"));
    h.insert(UPLOAD_OFFSET.clone(), HeaderValue::from(record.offset));
    h.insert(UPLOAD_EXPIRES.clone(), HeaderValue::from(record.expires));
}

impl Provider {
    /// `InitiateUpload` with `resumable`: the checks of a PUT (done by the caller) plus the
    /// quota against the announced length, then the upload's record and its URL token.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn initiate_resumable(
        &self,
        who: &Identity,
        space: &StoreSpace,
        parent: &StoreNode,
        name: String,
        path: String,
        existing: Option<Node>,
        r: &InitiateUploadRequest,
    ) -> Result<Transfer, Status> {
        let length = u64::try_from(r.length).map_err(|_| {
            ErrorKind::InvalidArgument.status("a resumable upload needs its length")
        })?;
        if let Some(quota) = space.quota {
            let others = space
                .used
                .saturating_sub(existing.as_ref().map_or(0, |n| n.size));
            if length > quota.saturating_sub(others) {
                return Err(ErrorKind::QuotaExceeded.status("the upload would exceed the quota"));
            }
        }
        let now = now_secs();
        let ttl = self.uploads.inner.expiration.as_secs().max(1);
        let if_match = r.if_match.trim().trim_matches('"');
        let record = Record {
            id: format!("{:032x}", rand::random::<u128>()),
            user: who.id.clone(),
            space: space.id.clone(),
            parent: parent.id.clone(),
            name,
            path,
            owner: space.owner.clone(),
            length,
            offset: 0,
            if_match: if if_match == "*" {
                String::new()
            } else {
                if_match.to_owned()
            },
            mtime_ns: r.mtime_ns,
            expires: now + ttl,
        };
        self.uploads.save(&record).await.map_err(|e| {
            tracing::error!(error = %e, "creating an upload");
            ErrorKind::Internal.status("cannot create the upload")
        })?;
        let grant = TusGrant {
            upload: record.id.clone(),
            user: record.user.clone(),
            space: record.space.clone(),
            path: record.path.clone(),
        };
        Ok(Transfer {
            provider: self.name.to_owned(),
            token: self
                .signer
                .sign(TUS_PURPOSE, &grant, Duration::from_secs(ttl)),
            node: existing,
            expires: i64::try_from(record.expires).unwrap_or(i64::MAX),
        })
    }

    fn grant(&self, token: &str) -> Result<TusGrant, UploadError> {
        // A bad, forged or expired token finds nothing, as an unknown upload would (TUS: 404).
        self.signer
            .verify(TUS_PURPOSE, token)
            .map_err(|_| UploadError::NotFound)
    }

    /// Waits for other requests on the upload to finish, up to [`BUSY_WAIT`].
    async fn hold(
        &self,
        grant: &TusGrant,
    ) -> Result<tokio::sync::OwnedMutexGuard<()>, UploadError> {
        let lock = self.uploads.lock_of(&grant.upload);
        tokio::time::timeout(BUSY_WAIT, lock.lock_owned())
            .await
            .map_err(|_| UploadError::Busy)
    }

    /// One PATCH: append, record, and commit once complete. Returns the record as it stands
    /// and the committed node when this request completed the upload.
    async fn patch_upload(
        &self,
        token: &str,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<(Record, Option<StoreNode>), (UploadError, Option<u64>)> {
        let grant = self.grant(token).map_err(|e| (e, None))?;
        let is_stream = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case(OFFSET_STREAM));
        if !is_stream {
            return Err((UploadError::MediaType, None));
        }
        let given = parse_offset(headers).map_err(|e| (e, None))?;
        let checksum = parse_checksum(headers).map_err(|e| (e, None))?;
        let _held = self.hold(&grant).await.map_err(|e| (e, None))?;
        let mut record = self
            .uploads
            .record_for(&grant)
            .await
            .map_err(|e| (e, None))?;
        if given != record.offset {
            return Err((
                UploadError::OffsetMismatch {
                    given,
                    current: record.offset,
                },
                None,
            ));
        }
        let before = record.offset;
        let (reached, failure) = self.uploads.append(&record, body, checksum).await;
        record.offset = reached;
        if failure.is_some() || reached < record.length {
            // Incomplete: the bytes that arrived are synced; now the record says so.
            if reached != before
                && let Err(e) = self.uploads.save(&record).await
            {
                return Err((e, Some(before)));
            }
            return match failure {
                Some(e) => Err((e, Some(record.offset))),
                None => Ok((record, None)),
            };
        }
        match self.commit(&record).await {
            Ok(node) => {
                self.uploads.remove(&record.id).await;
                Ok((record, Some(node)))
            }
            Err(e) => {
                if e.is_final() {
                    self.uploads.remove(&record.id).await;
                } else if let Err(p) = self.uploads.persist(&record).await {
                    tracing::warn!(upload = %record.id, error = %p, "keeping a complete upload");
                    return Err((e, Some(before)));
                }
                Err((e, Some(record.offset)))
            }
        }
    }

    /// The complete upload becomes the file, through the same write a PUT makes.
    async fn commit(&self, record: &Record) -> Result<StoreNode, UploadError> {
        let file = tokio::fs::File::open(self.uploads.bin_path(&record.id)).await?;
        let opts = PutOptions {
            if_match: (!record.if_match.is_empty()).then(|| record.if_match.clone()),
            if_none_match_any: false,
            mtime: mtime(record.mtime_ns),
            expected_checksum: None,
            content_length: Some(record.length),
        };
        // `take`: bytes past the length can only be a leftover; the store refuses a mismatch.
        let stream = read_stream(file.take(record.length));
        Ok(self
            .store
            .put_file(&record.parent, &record.name, stream, opts)
            .await?)
    }
}

/// `PATCH /tus/{token}`: appends the body at `Upload-Offset`; commits when complete. The
/// committed node comes back in the `x-arca-node` header, as on the PUT data path.
pub(crate) async fn patch(
    State(p): State<Provider>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match p.patch_upload(&token, &headers, body).await {
        Ok((record, node)) => {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            tus_headers(resp.headers_mut(), &record);
            if let Some(node) = node {
                let message = p.node_message(&node, record.path.clone(), &record.owner);
                if let Some(v) = node_header(&message) {
                    resp.headers_mut().insert(NODE_HEADER, v);
                }
            }
            resp
        }
        Err((e, offset)) => e.into_response(offset),
    }
}

/// `HEAD /tus/{token}`: where the upload stands (TUS core § HEAD).
pub(crate) async fn head(State(p): State<Provider>, Path(token): Path<String>) -> Response {
    let answer = async {
        let grant = p.grant(&token)?;
        let _held = p.hold(&grant).await?;
        p.uploads.record_for(&grant).await
    };
    match answer.await {
        Ok(record) => {
            let mut resp = StatusCode::OK.into_response();
            let h = resp.headers_mut();
            tus_headers(h, &record);
            h.insert(UPLOAD_LENGTH.clone(), HeaderValue::from(record.length));
            // TUS core: the offset must not be cached.
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
            let dir = match record.path.rsplit_once('/') {
                Some(("", _)) | None => "/",
                Some((dir, _)) => dir,
            };
            let metadata = format!("dir {},filename {}", b64(dir), b64(&record.name));
            if let Ok(v) = HeaderValue::from_str(&metadata) {
                h.insert(UPLOAD_METADATA.clone(), v);
            }
            resp
        }
        Err(e) => e.into_response(None),
    }
}

/// `DELETE /tus/{token}`: termination extension; the bytes go at once.
pub(crate) async fn terminate(State(p): State<Provider>, Path(token): Path<String>) -> Response {
    let answer = async {
        let grant = p.grant(&token)?;
        let _held = p.hold(&grant).await?;
        let record = p.uploads.record_for(&grant).await?;
        p.uploads.remove(&record.id).await;
        Ok::<_, UploadError>(())
    };
    match answer.await {
        Ok(()) => {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            resp.headers_mut()
                .insert(TUS_RESUMABLE.clone(), HeaderValue::from_static("1.0.0"));
            resp
        }
        Err(e) => e.into_response(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, expires: u64) -> Record {
        Record {
            id: id.to_owned(),
            user: "u".into(),
            space: "s".into(),
            parent: "p".into(),
            name: "f.bin".into(),
            path: "/f.bin".into(),
            owner: "u".into(),
            length: 10,
            offset: 0,
            if_match: String::new(),
            mtime_ns: 0,
            expires,
        }
    }

    fn grant(r: &Record) -> TusGrant {
        TusGrant {
            upload: r.id.clone(),
            user: r.user.clone(),
            space: r.space.clone(),
            path: r.path.clone(),
        }
    }

    async fn uploads() -> (tempfile::TempDir, Uploads) {
        let dir = tempfile::tempdir().unwrap();
        let u = Uploads::open(dir.path().join("uploads"), Duration::from_secs(60))
            .await
            .unwrap();
        (dir, u)
    }

    fn body(parts: &[&'static [u8]]) -> Body {
        let frames: Vec<Result<Bytes, io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Body::from_stream(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn records_survive_a_reload_and_match_only_their_grant() {
        let (_d, u) = uploads().await;
        let r = record(&"a".repeat(32), now_secs() + 60);
        u.save(&r).await.unwrap();
        let again = Uploads::open(u.inner.dir.clone(), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(again.record_for(&grant(&r)).await.unwrap().length, 10);
        let mut other = grant(&r);
        other.user = "someone-else".into();
        assert!(matches!(
            again.record_for(&other).await,
            Err(UploadError::NotFound)
        ));
        let mut bad = grant(&r);
        bad.upload = "../../etc/passwd".into();
        assert!(matches!(
            again.record_for(&bad).await,
            Err(UploadError::NotFound)
        ));
    }

    #[tokio::test]
    async fn an_unsynced_tail_is_cut_and_a_bad_chunk_is_discarded() {
        let (_d, u) = uploads().await;
        let mut r = record(&"b".repeat(32), now_secs() + 60);
        let (reached, err) = u.append(&r, body(&[b"hel", b"lo"]), None).await;
        assert!(err.is_none());
        assert_eq!(reached, 5);
        r.offset = 5;
        // Bytes past the record (a crash before the record was saved) are cut off.
        std::fs::OpenOptions::new()
            .append(true)
            .open(u.bin_path(&r.id))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"junk"))
            .unwrap();
        let sha1_of_world = sha1::Sha1::digest(b"world").to_vec();
        let wrong = (ChunkHasher::Sha1(sha1::Sha1::new()), vec![0u8; 20]);
        let (reached, err) = u.append(&r, body(&[b"world"]), Some(wrong)).await;
        assert_eq!(reached, 5);
        assert!(matches!(err, Some(UploadError::ChecksumMismatch)));
        let right = (ChunkHasher::Sha1(sha1::Sha1::new()), sha1_of_world);
        let (reached, err) = u.append(&r, body(&[b"wor", b"ld"]), Some(right)).await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(reached, 10);
        assert_eq!(std::fs::read(u.bin_path(&r.id)).unwrap(), b"helloworld");
        r.offset = 10;
        let (reached, err) = u.append(&r, body(&[b"x"]), None).await;
        assert_eq!(reached, 10);
        assert!(matches!(err, Some(UploadError::TooLong(10))));
    }

    #[tokio::test]
    async fn sweeping_removes_expired_uploads_only() {
        let (_d, u) = uploads().await;
        let live = record(&"c".repeat(32), now_secs() + 60);
        let dead = record(&"d".repeat(32), now_secs().saturating_sub(1));
        for r in [&live, &dead] {
            u.save(r).await.unwrap();
            let (_, err) = u.append(r, body(&[b"abc"]), None).await;
            assert!(err.is_none());
        }
        assert_eq!(u.sweep().await.unwrap(), 1);
        assert!(u.info_path(&live.id).exists() && u.bin_path(&live.id).exists());
        assert!(!u.info_path(&dead.id).exists() && !u.bin_path(&dead.id).exists());
    }

    #[test]
    fn checksum_headers() {
        let mut h = HeaderMap::new();
        assert!(parse_checksum(&h).unwrap().is_none());
        h.insert(
            &UPLOAD_CHECKSUM,
            HeaderValue::from_static("sha1 Kq5sNclPz7QV2+lfQIuc6R7oRu0="),
        );
        assert!(matches!(
            parse_checksum(&h),
            Ok(Some((ChunkHasher::Sha1(_), d))) if d.len() == 20
        ));
        h.insert(&UPLOAD_CHECKSUM, HeaderValue::from_static("crc32 AAAA"));
        assert!(matches!(
            parse_checksum(&h),
            Err(UploadError::BadRequest(_))
        ));
        h.insert(&UPLOAD_CHECKSUM, HeaderValue::from_static("md5 !!!"));
        assert!(matches!(
            parse_checksum(&h),
            Err(UploadError::BadRequest(_))
        ));
    }
}
