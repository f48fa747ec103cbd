//! Resumable uploads (TUS 1.0.0) on the provider's side: the `/tus/{token}` data path that
//! takes `PATCH` (append a chunk), `HEAD` (where is it) and `DELETE` (termination), the commit
//! of a complete upload, and the sweep that removes expired uploads.
//!
//! The state is the store's ([`arca_store_files::Upload`]): the record in the shared metadata
//! database, each PATCH's bytes as one part object in the blob store. So every storage-users
//! instance sharing the database and blob store serves every upload, and an upload outlives
//! the instance it began on (issue 7: a rolling restart loses no upload).
//!
//! Durability: the offset only ever counts bytes of parts that are stored durably (the part
//! is completed, then the offset moves by compare-and-set in the database). A client that
//! drops its connection mid-chunk keeps what arrived (TUS core: the server should store as
//! much as it received), unless the chunk carried an `Upload-Checksum` that can no longer be
//! verified. Two PATCHes at one offset (two instances, a client retrying): one counts, the
//! other is answered 409 with the offset that won; a PATCH on an upload whose commit is
//! running is answered 423. The commit is the store's atomic write, as for a PUT (blob durable
//! before the metadata points at it, previous version intact on failure, etags propagated,
//! checksums computed).
//!
//! The URL token (signed with the deployment's [`TokenSigner`](arca_runtime::TokenSigner),
//! the same secret in every process) names the upload, the user who created it and its
//! target: it authorises that one upload and nothing else, and expires with it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arca_proto::ErrorKind;
use arca_proto::v1::{InitiateUploadRequest, Node, Transfer};
use arca_runtime::{BoxFuture, Identity, Schedule, ServiceError, Worker, WorkerState};
use arca_store_files::{
    Appended, Node as StoreNode, PutOptions, Space as StoreSpace, Store, StoreError, Upload,
};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};
use sha1::Digest as _;
use tonic::Status;

use crate::data::{NODE_HEADER, node_header};
use crate::provider::{Provider, mtime};

/// The token purpose of upload URLs: a TUS token is never accepted as any other grant.
pub(crate) const TUS_PURPOSE: &str = "tus";
/// TUS core: every PATCH body has this type (§ PATCH).
const OFFSET_STREAM: &str = "application/offset+octet-stream";
/// TUS checksum extension: "460 Checksum Mismatch" for a chunk that fails its checksum.
const CHECKSUM_MISMATCH: u16 = 460;
/// A part object that no upload lists is garbage once this old (younger ones may belong to a
/// PATCH between storing its part and recording it).
const STRAY_MIN_AGE_MS: i64 = 10 * 60 * 1000;

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
    #[error("reading the chunk failed: {0}")]
    Body(String),
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
            UploadError::Store(e) => match e {
                // Here the target's directory is what was not found: to a TUS client a 404
                // means the upload itself is gone (TUS 1.0.0, HEAD and PATCH), so 409.
                StoreError::NotFound => StatusCode::CONFLICT,
                e => e.http_status(),
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
                    | StoreError::ChecksumMismatch { .. }
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

/// The uploads of the provider's store, and how long each lives.
#[derive(Clone)]
pub(crate) struct Uploads {
    store: Store,
    expiration: Duration,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Uploads {
    /// The uploads kept in `store`, each living `expiration` from creation.
    pub(crate) fn new(store: Store, expiration: Duration) -> Self {
        Self { store, expiration }
    }

    /// How long an upload lives (an upload folder: after its last chunk).
    pub(crate) fn expiration(&self) -> Duration {
        self.expiration
    }

    /// The live upload a grant names. Anything that does not match exactly is "not found":
    /// a token never reaches an upload it was not issued for.
    async fn record_for(&self, grant: &TusGrant) -> Result<Upload, UploadError> {
        if !Upload::is_id(&grant.upload) {
            return Err(UploadError::NotFound);
        }
        let record = self
            .store
            .upload(&grant.upload)
            .await?
            .ok_or(UploadError::NotFound)?;
        if record.user != grant.user || record.space_id != grant.space || record.path != grant.path
        {
            return Err(UploadError::NotFound);
        }
        if record.expires <= now_secs() {
            if let Err(e) = self.store.remove_upload(&record.id).await {
                tracing::warn!(upload = %record.id, error = %e, "removing an expired upload");
            }
            return Err(UploadError::NotFound);
        }
        Ok(record)
    }

    /// Appends one chunk at `record.offset` as one part. Returns what became of the part
    /// (`None`: nothing was stored), and the error that stopped the chunk if any (the bytes
    /// before it are kept unless a checksum was asked).
    async fn append(
        &self,
        record: &Upload,
        body: Body,
        checksum: Option<(ChunkHasher, Vec<u8>)>,
    ) -> (Option<Appended>, Option<UploadError>) {
        let (mut hasher, expected) = match checksum {
            Some((h, e)) => (Some(h), Some(e)),
            None => (None, None),
        };
        let room = record.length - record.offset;
        let mut part = self.store.upload_part(record);
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
            if part.size() + chunk.len() as u64 > room {
                failure = Some(UploadError::TooLong(record.length));
                break;
            }
            if let Some(h) = hasher.as_mut() {
                h.update(&chunk);
            }
            if let Err(e) = part.write(chunk).await {
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
            part.abort().await;
            return (None, failure);
        }
        match self.store.append_upload_part(part).await {
            Ok(appended) => (Some(appended), failure),
            Err(e) => (None, Some(e.into())),
        }
    }

    /// Removes expired uploads and stray parts; returns how many uploads went.
    pub(crate) async fn sweep(&self) -> Result<u64, StoreError> {
        self.store
            .expire_uploads(now_secs(), STRAY_MIN_AGE_MS)
            .await
    }
}

/// Removes expired uploads at once and then every quarter of the expiration (between 1 s and
/// 10 min), while this instance holds its lease: the uploads are shared, one sweeper per
/// deployment. A sweep that started is finished even if the lease is lost meanwhile: every
/// removal in it is idempotent, and the next holder's first sweep repeats it.
pub(crate) struct Sweeper {
    uploads: Uploads,
    name: &'static str,
}

impl Sweeper {
    pub(crate) fn new(uploads: Uploads, name: &'static str) -> Self {
        Self { uploads, name }
    }
}

impl Worker for Sweeper {
    fn name(&self) -> &'static str {
        self.name
    }

    fn schedule(&self) -> Schedule {
        let every =
            (self.uploads.expiration / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
        Schedule::every(every).at_once().leased()
    }

    fn work(&mut self) -> BoxFuture<'_, Result<WorkerState, ServiceError>> {
        Box::pin(async move {
            match self.uploads.sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "removed expired uploads"),
                Err(e) => {
                    tracing::warn!(error = %e, "sweeping expired uploads failed");
                    return Err(e.into());
                }
            }
            Ok(WorkerState::Idle)
        })
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

fn tus_headers(h: &mut HeaderMap, record: &Upload) {
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
        // Verified at the commit; an unknown algorithm is refused now, before any byte moves.
        crate::convert::expected_checksum(&r.checksum)
            .map_err(|e| ErrorKind::InvalidArgument.status(e))?;
        let now = now_secs();
        let ttl = self.uploads.expiration.as_secs().max(1);
        let if_match = r.if_match.trim().trim_matches('"');
        let record = Upload {
            id: Upload::new_id(),
            user: who.id.clone(),
            space_id: space.id.clone(),
            parent_id: parent.id.clone(),
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
            checksum: r.checksum.clone(),
            hash_state: None,
        };
        self.store.create_upload(&record).await.map_err(|e| {
            tracing::error!(error = %e, "creating an upload");
            ErrorKind::Internal.status("cannot create the upload")
        })?;
        let grant = TusGrant {
            upload: record.id.clone(),
            user: record.user.clone(),
            space: record.space_id.clone(),
            path: record.path.clone(),
        };
        Ok(Transfer {
            provider: self.name.to_owned(),
            token: self
                .signer
                .sign(TUS_PURPOSE, &grant, Duration::from_secs(ttl)),
            node: existing,
            expires: i64::try_from(record.expires).unwrap_or(i64::MAX),
            ..Default::default()
        })
    }

    fn grant(&self, token: &str) -> Result<TusGrant, UploadError> {
        // A bad, forged or expired token finds nothing, as an unknown upload would (TUS: 404).
        self.signer
            .verify(TUS_PURPOSE, token)
            .map_err(|_| UploadError::NotFound)
    }

    /// One PATCH: append, and commit once complete. Returns the record as it stands and the
    /// committed node when this request completed the upload.
    async fn patch_upload(
        &self,
        token: &str,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<(Upload, Option<StoreNode>), (UploadError, Option<u64>)> {
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
        let (appended, failure) = self.uploads.append(&record, body, checksum).await;
        match appended {
            Some(Appended::At(offset)) => record.offset = offset,
            // Another PATCH at the same offset counted first: this one's bytes were dropped.
            Some(Appended::Moved(current)) => {
                return Err((UploadError::OffsetMismatch { given, current }, None));
            }
            Some(Appended::Gone) => return Err((UploadError::NotFound, None)),
            None => {}
        }
        if let Some(e) = failure {
            return Err((e, Some(record.offset)));
        }
        if record.offset < record.length {
            return Ok((record, None));
        }
        match self.commit(&record).await {
            Ok(node) => Ok((record, Some(node))),
            Err(e) => {
                if e.is_final()
                    && let Err(r) = self.store.remove_upload(&record.id).await
                {
                    tracing::warn!(upload = %record.id, error = %r, "removing a doomed upload");
                }
                Err((e, Some(record.offset)))
            }
        }
    }

    /// The complete upload becomes the file, through the same write a PUT makes.
    async fn commit(&self, record: &Upload) -> Result<StoreNode, UploadError> {
        let opts = PutOptions {
            if_match: (!record.if_match.is_empty()).then(|| record.if_match.clone()),
            if_none_match_any: false,
            mtime: mtime(record.mtime_ns),
            expected_checksum: crate::convert::expected_checksum(&record.checksum)
                .map_err(UploadError::BadRequest)?,
            content_length: Some(record.length),
            prechecked: None,
        };
        Ok(self.store.commit_upload(record, opts).await?)
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
                p.changed_node(&node.space_id, &node.id);
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

/// `HEAD /tus/{token}`: where the upload stands (TUS core § HEAD): the durable offset, also
/// while a PATCH on it is still receiving.
pub(crate) async fn head(State(p): State<Provider>, Path(token): Path<String>) -> Response {
    let answer = async {
        let grant = p.grant(&token)?;
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
        let record = p.uploads.record_for(&grant).await?;
        if !p.store.remove_upload(&record.id).await? {
            return Err(UploadError::NotFound);
        }
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
    use arca_store_files::StoreConfig;
    use bytes::Bytes;

    use super::*;

    async fn uploads() -> (tempfile::TempDir, Uploads, String) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
        let store = Store::open(StoreConfig::new(url, dir.path().join("blobs")))
            .await
            .unwrap();
        let root = store.personal_space("u").await.unwrap().root_id;
        (dir, Uploads::new(store, Duration::from_secs(60)), root)
    }

    fn record(root: &str, expires: u64) -> Upload {
        Upload {
            id: Upload::new_id(),
            user: "u".into(),
            space_id: root.into(),
            parent_id: root.into(),
            name: "f.bin".into(),
            path: "/f.bin".into(),
            owner: "u".into(),
            length: 10,
            offset: 0,
            if_match: String::new(),
            mtime_ns: 0,
            expires,
            checksum: String::new(),
            hash_state: None,
        }
    }

    fn grant(r: &Upload) -> TusGrant {
        TusGrant {
            upload: r.id.clone(),
            user: r.user.clone(),
            space: r.space_id.clone(),
            path: r.path.clone(),
        }
    }

    fn body(parts: &[&'static [u8]]) -> Body {
        let frames: Vec<Result<Bytes, std::io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Body::from_stream(futures::stream::iter(frames))
    }

    /// Bytes, then the connection breaks.
    fn cut_body(part: &'static [u8]) -> Body {
        let frames: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(part)),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "gone",
            )),
        ];
        Body::from_stream(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn records_match_only_their_grant_and_expire() {
        let (_d, u, root) = uploads().await;
        let r = record(&root, now_secs() + 60);
        u.store.create_upload(&r).await.unwrap();
        assert_eq!(u.record_for(&grant(&r)).await.unwrap().length, 10);
        let mut other = grant(&r);
        other.user = "someone-else".into();
        assert!(matches!(
            u.record_for(&other).await,
            Err(UploadError::NotFound)
        ));
        let mut bad = grant(&r);
        bad.upload = "../../etc/passwd".into();
        assert!(matches!(
            u.record_for(&bad).await,
            Err(UploadError::NotFound)
        ));
        let old = record(&root, now_secs().saturating_sub(1));
        u.store.create_upload(&old).await.unwrap();
        assert!(matches!(
            u.record_for(&grant(&old)).await,
            Err(UploadError::NotFound)
        ));
        assert!(u.store.upload(&old.id).await.unwrap().is_none(), "removed");
    }

    #[tokio::test]
    async fn a_cut_chunk_keeps_what_arrived_and_a_bad_chunk_is_discarded() {
        let (_d, u, root) = uploads().await;
        let mut r = record(&root, now_secs() + 60);
        u.store.create_upload(&r).await.unwrap();
        let (got, err) = u.append(&r, cut_body(b"hel"), None).await;
        assert_eq!(got, Some(Appended::At(3)));
        assert!(matches!(err, Some(UploadError::Body(_))));
        r.offset = 3;
        let sha1_of_lo = sha1::Sha1::digest(b"lo").to_vec();
        let wrong = (ChunkHasher::Sha1(sha1::Sha1::new()), vec![0u8; 20]);
        let (got, err) = u.append(&r, body(&[b"lo"]), Some(wrong)).await;
        assert_eq!(got, None);
        assert!(matches!(err, Some(UploadError::ChecksumMismatch)));
        // With a checksum, a cut chunk cannot be verified: nothing of it is kept.
        let right = (ChunkHasher::Sha1(sha1::Sha1::new()), sha1_of_lo.clone());
        let (got, _) = u.append(&r, cut_body(b"l"), Some(right)).await;
        assert_eq!(got, None);
        let right = (ChunkHasher::Sha1(sha1::Sha1::new()), sha1_of_lo);
        let (got, err) = u.append(&r, body(&[b"l", b"o"]), Some(right)).await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got, Some(Appended::At(5)));
        r.offset = 5;
        let (got, err) = u.append(&r, body(&[b"world", b"!"]), None).await;
        assert_eq!(got, None);
        assert!(matches!(err, Some(UploadError::TooLong(10))));
        assert_eq!(u.store.upload(&r.id).await.unwrap().unwrap().offset, 5);
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
