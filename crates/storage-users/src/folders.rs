//! Upload folders (Nextcloud's chunked uploads) on the provider's side: the gRPC calls that
//! create, list and delete a caller's folders and mint a token per chunk, and the data paths
//! `PUT /chunk/{token}` (one chunk's bytes) and `POST /assemble/{token}` (the folder becomes
//! the file an `InitiateUpload` with `upload_folder` checked and named).
//!
//! The state is the store's ([`arca_store_files::UploadFolder`]): rows in the shared database, chunks
//! in the blob store, so every instance continues, lists or assembles every folder. A folder
//! belongs to the user who created it; its name is theirs to choose, and another user's
//! folder of the same name is another folder. Folders live as long as resumable uploads
//! (`storage-users.uploads.expiration`) after their last chunk, and the same sweep removes
//! them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arca_proto::ErrorKind;
use arca_proto::v1::{
    CreateUploadFolderRequest, DeleteUploadFolderRequest, InitiateChunkRequest,
    ListUploadFoldersRequest, Transfer, UploadChunk, UploadFolder,
};
use arca_runtime::Identity;
use arca_store_files::{PutOptions, StoreError, UploadFolder as StoreFolder};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt as _;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use tonic::Status;

use crate::convert::expected_checksum;
use crate::data::{NODE_HEADER, node_header, store_error};
use crate::provider::{Provider, UploadGrant, mtime};

/// Token purposes: a chunk token, or an assembly token, is never any other grant.
pub(crate) const CHUNK_PURPOSE: &str = "chunk";
pub(crate) const ASSEMBLE_PURPOSE: &str = "assemble";
/// A chunk token is used at once; it need not outlive a slow chunk by much.
const CHUNK_TTL: Duration = Duration::from_secs(3600);

/// What a chunk token grants: storing one chunk of one folder.
#[derive(Serialize, Deserialize)]
pub(crate) struct ChunkGrant {
    user: String,
    folder: String,
    /// The folder's upload id when the token was minted: a folder deleted and made again
    /// under the same name is another folder.
    upload: String,
    chunk: String,
    length: i64,
    #[serde(default)]
    checksum: String,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn folder_message(f: &StoreFolder) -> UploadFolder {
    UploadFolder {
        name: f.name.clone(),
        chunks: f
            .chunks
            .iter()
            .map(|c| UploadChunk {
                name: c.name.clone(),
                size: c.size,
                mtime_ns: c.stored_ms.saturating_mul(1_000_000),
            })
            .collect(),
        mtime_ns: f.touched_ms.saturating_mul(1_000_000),
        expires: i64::try_from(f.expires).unwrap_or(i64::MAX),
        etag: f.etag(),
    }
}

/// A folder or chunk name: one path segment, as a file name would be.
fn check_name(what: &str, name: &str) -> Result<(), Status> {
    arca_store_files::validate_name(name)
        .map_err(|e| ErrorKind::InvalidArgument.status(format!("{what} {name:?}: {e}")))
}

impl Provider {
    fn folder_expiry(&self) -> u64 {
        now_secs() + self.uploads.expiration().as_secs().max(1)
    }

    /// The caller's live folder `name`, with its chunks.
    async fn folder(&self, who: &Identity, name: &str) -> Result<StoreFolder, Status> {
        self.store
            .upload_folder(&who.id, name, now_secs())
            .await
            .map_err(|e| e.status())?
            .ok_or_else(|| ErrorKind::NotFound.status(format!("no upload folder {name:?}")))
    }

    pub(crate) async fn create_upload_folder(
        &self,
        who: &Identity,
        r: &CreateUploadFolderRequest,
    ) -> Result<UploadFolder, Status> {
        check_name("upload folder", &r.name)?;
        let total = u64::try_from(r.total_length).ok();
        // The announced size against what the caller's home has left (where Nextcloud
        // checks it too): a file that cannot fit is refused before its first chunk.
        if let Some(total) = total {
            let home = self
                .store
                .personal_space(&who.id)
                .await
                .map_err(|e| e.status())?;
            if home.remaining().is_some_and(|left| total > left) {
                return Err(ErrorKind::QuotaExceeded.status("the upload would exceed the quota"));
            }
        }
        let folder =
            self.store
                .create_upload_folder(&who.id, &r.name, total, self.folder_expiry())
                .await
                .map_err(|e| match e {
                    StoreError::AlreadyExists => ErrorKind::AlreadyExists
                        .status(format!("upload folder {:?} exists", r.name)),
                    e => e.status(),
                })?;
        Ok(folder_message(&folder))
    }

    pub(crate) async fn list_upload_folders(
        &self,
        who: &Identity,
        r: &ListUploadFoldersRequest,
    ) -> Result<Vec<UploadFolder>, Status> {
        if r.name.is_empty() {
            let all = self
                .store
                .upload_folders(&who.id, now_secs())
                .await
                .map_err(|e| e.status())?;
            return Ok(all.iter().map(folder_message).collect());
        }
        Ok(vec![folder_message(&self.folder(who, &r.name).await?)])
    }

    pub(crate) async fn delete_upload_folder(
        &self,
        who: &Identity,
        r: &DeleteUploadFolderRequest,
    ) -> Result<(), Status> {
        let folder = self.folder(who, &r.name).await?;
        let gone = if r.chunk.is_empty() {
            self.store.remove_upload(&folder.id).await
        } else {
            self.store.remove_upload_chunk(&folder.id, &r.chunk).await
        }
        .map_err(|e| e.status())?;
        if !gone {
            return Err(ErrorKind::NotFound.status("no such chunk"));
        }
        Ok(())
    }

    pub(crate) async fn initiate_chunk(
        &self,
        who: &Identity,
        r: &InitiateChunkRequest,
    ) -> Result<Transfer, Status> {
        check_name("chunk", &r.chunk)?;
        expected_checksum(&r.checksum).map_err(|e| ErrorKind::InvalidArgument.status(e))?;
        let folder = self.folder(who, &r.folder).await?;
        let grant = ChunkGrant {
            user: who.id.clone(),
            folder: folder.name,
            upload: folder.id,
            chunk: r.chunk.clone(),
            length: r.length,
            checksum: r.checksum.clone(),
        };
        Ok(Transfer {
            provider: self.name.to_owned(),
            token: self.signer.sign(CHUNK_PURPOSE, &grant, CHUNK_TTL),
            node: None,
            expires: i64::try_from(folder.expires).unwrap_or(i64::MAX),
            ..Default::default()
        })
    }
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, format!("{message}\n")).into_response()
}

/// `PUT /chunk/{token}`: stores the body as the chunk the token names; 201 for a new chunk,
/// 204 for one that replaced a chunk of the same name.
pub(crate) async fn put_chunk(
    State(p): State<Provider>,
    Path(token): Path<String>,
    body: Body,
) -> Response {
    let grant: ChunkGrant = match p.signer.verify(CHUNK_PURPOSE, &token) {
        Ok(g) => g,
        Err(e) => return error(StatusCode::FORBIDDEN, format_args!("chunk token: {e}")),
    };
    let expected = match expected_checksum(&grant.checksum) {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let folder = match p
        .store
        .upload_folder(&grant.user, &grant.folder, now_secs())
        .await
    {
        Ok(Some(f)) if f.id == grant.upload => f,
        Ok(_) => return error(StatusCode::NOT_FOUND, "the upload folder is gone"),
        Err(e) => return store_error(e),
    };
    let stream = body
        .into_data_stream()
        .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) });
    match p
        .store
        .put_upload_chunk(
            &folder,
            &grant.chunk,
            u64::try_from(grant.length).ok(),
            stream,
            expected,
            p.folder_expiry(),
        )
        .await
    {
        Ok((_, replaced)) => if replaced {
            StatusCode::NO_CONTENT
        } else {
            StatusCode::CREATED
        }
        .into_response(),
        Err(StoreError::NotFound) => error(StatusCode::NOT_FOUND, "the upload folder is gone"),
        Err(e) => store_error(e),
    }
}

/// `POST /assemble/{token}`: the folder the token names becomes its file, on the terms of the
/// `InitiateUpload` that minted it. The committed node comes back in `x-arca-node`. A folder
/// that can never become this file (its size or checksum is wrong, the target vanished or
/// changed) is removed, so the client's next attempt starts over.
pub(crate) async fn assemble(State(p): State<Provider>, Path(token): Path<String>) -> Response {
    let grant: UploadGrant = match p.signer.verify(ASSEMBLE_PURPOSE, &token) {
        Ok(g) => g,
        Err(e) => return error(StatusCode::FORBIDDEN, format_args!("assembly token: {e}")),
    };
    let expected = match expected_checksum(&grant.checksum) {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let folder = match p
        .store
        .upload_folder(&grant.folder_user, &grant.folder, now_secs())
        .await
    {
        Ok(Some(f)) => f,
        Ok(None) => return error(StatusCode::NOT_FOUND, "no such upload folder"),
        Err(e) => return store_error(e),
    };
    let opts = PutOptions {
        if_match: (!grant.if_match.is_empty()).then(|| grant.if_match.clone()),
        if_none_match_any: grant.if_none_match_any,
        mtime: mtime(grant.mtime_ns),
        expected_checksum: expected,
        content_length: u64::try_from(grant.length).ok(),
        prechecked: None,
    };
    match p
        .store
        .assemble_upload_folder(&folder.id, &grant.parent, &grant.name, opts)
        .await
    {
        Ok(node) => {
            p.changed_node(&node.space_id, &node.id);
            let message = p.node_message(&node, grant.path, &grant.owner);
            let mut resp = StatusCode::OK.into_response();
            if let Some(v) = node_header(&message) {
                resp.headers_mut().insert(NODE_HEADER, v);
            }
            resp
        }
        Err(e) => {
            let hopeless = matches!(
                e,
                StoreError::ChecksumMismatch { .. }
                    | StoreError::LengthMismatch { .. }
                    | StoreError::PreconditionFailed
                    | StoreError::AlreadyExists
                    | StoreError::Conflict
                    | StoreError::NotADirectory
                    | StoreError::IsADirectory
                    | StoreError::InvalidName { .. }
            );
            if hopeless && let Err(r) = p.store.remove_upload(&folder.id).await {
                tracing::warn!(folder = %folder.id, error = %r, "removing a doomed upload folder");
            }
            store_error(e)
        }
    }
}
