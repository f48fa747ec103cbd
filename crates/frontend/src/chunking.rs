//! Nextcloud's chunked uploads ("chunking NG", dav.chunking 1.0, and its v2 extension) under
//! `/remote.php/dav/uploads/{user}/`:
//!
//! - `MKCOL …/{folder}` creates an upload folder (`OC-Total-Length`, when sent, is checked
//!   against the quota); 405 if it exists.
//! - `PUT …/{folder}/{chunk}` stores one chunk (`OC-Checksum` of the chunk, if sent, is
//!   verified); 201, or 204 when it replaced a chunk of that name. v2 clients also send
//!   `Destination` and `OC-Total-Length` here; neither is needed before the MOVE.
//! - `PROPFIND …/{folder}` lists the chunks received with their sizes: a client resumes an
//!   interrupted upload from it, sending only what is missing.
//! - `MOVE …/{folder}/.file` with `Destination` assembles the chunks (in the natural order of
//!   their names) onto that file, on the terms of a PUT: `If-Match`, `If-None-Match: *`, an
//!   `If` header naming the destination's etag, lock tokens, the quota; `OC-Total-Length` must
//!   equal the chunks' sum and `OC-Checksum` the file's; `X-OC-Mtime` sets its mtime. 201 for a
//!   new file, 204 for a replaced one, with `ETag`, `OC-ETag`, `OC-FileId` and
//!   `X-OC-MTime: accepted` (Nextcloud's answer; the desktop client takes the etag and id
//!   from it).
//! - `DELETE …/{folder}` aborts the upload; `DELETE …/{folder}/{chunk}` drops one chunk.
//!
//! Folders and chunks are storage-users' ([`arca_proto::v1::UploadFolder`]): kept with the
//! resumable uploads, so any instance serves any request of an upload and assembling copies
//! no byte in the usual case (see arca-store's `chunked`).

// Handlers return their HTTP error answer as the `Err` side, as `webdav` does: built once per
// failed request, never moved around in loops.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use arca_proto::ErrorKind;
use arca_proto::v1::*;
use arca_runtime::{Caller, Identity};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};

use crate::webdav::dav::{self, Depth};
use crate::webdav::{Dav, Location, checksum_header, dav_error, grpc_error, internal};

const ROOT: &str = "/remote.php/dav/uploads/";
/// The name a folder is MOVEd by to assemble it (`…/{folder}/.file`).
const ASSEMBLE_NAME: &str = ".file";
const ALLOW_ROOT: &str = "OPTIONS, PROPFIND";
const ALLOW_FOLDER: &str = "OPTIONS, PROPFIND, MKCOL, DELETE";
const ALLOW_CHUNK: &str = "OPTIONS, PROPFIND, PUT, DELETE, MOVE";

pub(crate) fn routes(dav: Dav) -> axum::Router {
    use axum::routing::any;
    axum::Router::new()
        .route("/remote.php/dav/uploads/{user}", any(handle))
        .route("/remote.php/dav/uploads/{user}/", any(handle))
        .route("/remote.php/dav/uploads/{user}/{*rest}", any(handle))
        .with_state(Arc::new(dav))
}

/// What a request path names below the caller's uploads root.
enum Target {
    Root,
    Folder(String),
    Chunk(String, String),
}

/// Decodes `/remote.php/dav/uploads/USER[/FOLDER[/CHUNK]]`; another user's uploads do not
/// exist for the caller (404, as for their files).
fn target(raw: &str, who: &Identity) -> Result<(String, Target), Response> {
    let not_found = || dav_error(StatusCode::NOT_FOUND, "Resource not found", None);
    let bad = |e: dav::PathError| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None);
    let rest = raw.strip_prefix(ROOT).ok_or_else(not_found)?;
    let mut segs = rest.split('/').filter(|s| !s.is_empty());
    let user_raw = segs.next().ok_or_else(not_found)?;
    if dav::paths::decode_segment(user_raw).map_err(bad)? != who.username {
        return Err(not_found());
    }
    let prefix = format!("{ROOT}{user_raw}");
    let mut names = Vec::new();
    for s in segs {
        names.push(dav::paths::decode_segment(s).map_err(bad)?);
    }
    let t = match names.len() {
        0 => Target::Root,
        1 => Target::Folder(names.remove(0)),
        2 => {
            let chunk = names.remove(1);
            Target::Chunk(names.remove(0), chunk)
        }
        _ => return Err(not_found()),
    };
    Ok((prefix, t))
}

fn not_allowed(allow: &'static str) -> Response {
    let mut r = dav_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not supported here",
        None,
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

fn options(allow: &'static str) -> Response {
    let mut r = StatusCode::OK.into_response();
    let h = r.headers_mut();
    h.insert(header::ALLOW, HeaderValue::from_static(allow));
    h.insert(
        HeaderName::from_static("dav"),
        HeaderValue::from_static("1, 2"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    r
}

/// `OC-Total-Length`, if sent: the size of the whole file.
fn total_length(h: &HeaderMap) -> Result<Option<i64>, Response> {
    match h.get("oc-total-length") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .and_then(|n| i64::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                dav_error(
                    StatusCode::BAD_REQUEST,
                    "OC-Total-Length is not a number of bytes",
                    None,
                )
            }),
    }
}

async fn handle(State(dav): State<Arc<Dav>>, Caller(who): Caller, req: Request) -> Response {
    let (prefix, t) = match target(req.uri().path(), &who) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let method = req.method().as_str().to_owned();
    let result = match (&t, method.as_str()) {
        (Target::Root, "OPTIONS") => Ok(options(ALLOW_ROOT)),
        (Target::Folder(_), "OPTIONS") => Ok(options(ALLOW_FOLDER)),
        (Target::Chunk(..), "OPTIONS") => Ok(options(ALLOW_CHUNK)),
        (_, "PROPFIND") => propfind(&dav, &prefix, &t, req).await,
        (Target::Folder(f), "MKCOL") => mkcol(&dav, f, req.headers()).await,
        (Target::Folder(f), "DELETE") => delete(&dav, f, "").await,
        (Target::Chunk(f, c), "DELETE") => delete(&dav, f, c).await,
        (Target::Chunk(f, c), "PUT") => put_chunk(&dav, f, c, req).await,
        (Target::Chunk(f, c), "MOVE") if c == ASSEMBLE_NAME => assemble(&dav, &who, f, req).await,
        (Target::Chunk(..), "MOVE") => Err(dav_error(
            StatusCode::FORBIDDEN,
            "only .file of an upload folder can be moved: MOVE …/FOLDER/.file assembles it",
            None,
        )),
        (Target::Chunk(..), "GET" | "HEAD") => Err(dav_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "chunks of an upload cannot be downloaded",
            None,
        )),
        (Target::Root, _) => Err(not_allowed(ALLOW_ROOT)),
        (Target::Folder(_), _) => Err(not_allowed(ALLOW_FOLDER)),
        (Target::Chunk(..), _) => Err(not_allowed(ALLOW_CHUNK)),
    };
    result.unwrap_or_else(|r| r)
}

async fn mkcol(dav: &Dav, folder: &str, h: &HeaderMap) -> Result<Response, Response> {
    let total_length = total_length(h)?.unwrap_or(-1);
    dav.storage()
        .create_upload_folder(CreateUploadFolderRequest {
            name: folder.to_owned(),
            total_length,
        })
        .await
        .map_err(|s| match ErrorKind::of(&s) {
            // Sabre's answer to a MKCOL of something that exists (RFC 4918 §9.3.1).
            ErrorKind::AlreadyExists => dav_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "The resource you tried to create already exists",
                None,
            ),
            _ => grpc_error(s),
        })?;
    Ok(StatusCode::CREATED.into_response())
}

async fn delete(dav: &Dav, folder: &str, chunk: &str) -> Result<Response, Response> {
    dav.storage()
        .delete_upload_folder(DeleteUploadFolderRequest {
            name: folder.to_owned(),
            chunk: chunk.to_owned(),
        })
        .await
        .map_err(grpc_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A folder and its chunks as nodes, for the WebDAV renderer.
fn folder_nodes(folder: &UploadFolder) -> (Node, Vec<Node>) {
    let dir = Node {
        name: folder.name.clone(),
        is_dir: true,
        size: folder.chunks.iter().map(|c| c.size).sum(),
        mtime_ns: folder.mtime_ns,
        etag: folder.etag.clone(),
        path: format!("/{}", folder.name),
        ..Node::default()
    };
    let chunks = folder
        .chunks
        .iter()
        .map(|c| Node {
            name: c.name.clone(),
            size: c.size,
            mtime_ns: c.mtime_ns,
            etag: format!("{:016x}{:016x}", c.mtime_ns, c.size),
            path: format!("/{}/{}", folder.name, c.name),
            ..Node::default()
        })
        .collect();
    (dir, chunks)
}

async fn propfind(dav: &Dav, prefix: &str, t: &Target, req: Request) -> Result<Response, Response> {
    let (depth, query) = crate::webdav::propfind_query(req).await?;
    let name = match t {
        Target::Root => "",
        Target::Folder(f) | Target::Chunk(f, _) => f.as_str(),
    };
    let folders = dav
        .storage()
        .list_upload_folders(ListUploadFoldersRequest {
            name: name.to_owned(),
        })
        .await
        .map_err(grpc_error)?
        .into_inner()
        .folders;
    let (node, members) = match t {
        Target::Root => {
            let root = Node {
                is_dir: true,
                path: "/".into(),
                etag: format!(
                    "{:032x}",
                    folders.iter().map(|f| f.mtime_ns).max().unwrap_or(0)
                ),
                ..Node::default()
            };
            (root, folders.iter().map(|f| folder_nodes(f).0).collect())
        }
        Target::Folder(_) => {
            let f = folders
                .first()
                .ok_or_else(|| internal(&"no folder listed"))?;
            folder_nodes(f)
        }
        Target::Chunk(_, c) => {
            let f = folders
                .first()
                .ok_or_else(|| internal(&"no folder listed"))?;
            let chunk = folder_nodes(f)
                .1
                .into_iter()
                .find(|n| &n.name == c)
                .ok_or_else(|| dav_error(StatusCode::NOT_FOUND, "no such chunk", None))?;
            (chunk, Vec::new())
        }
    };
    let members = if depth == Depth::Zero {
        Vec::new()
    } else {
        members
    };
    let loc = Location {
        prefix: prefix.to_owned(),
        space_id: String::new(),
        path: dav::decode_path("/").map_err(|e| internal(&e))?,
        tokens: Vec::new(),
        base: String::new(),
    };
    crate::webdav::propfind_answer(dav, &loc, &query, node, members, None).await
}

async fn put_chunk(
    dav: &Dav,
    folder: &str,
    chunk: &str,
    req: Request,
) -> Result<Response, Response> {
    let h = req.headers();
    if chunk == ASSEMBLE_NAME {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            ".file is the name an upload folder is assembled by, not a chunk's",
            None,
        ));
    }
    let length = h
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(-1);
    let checksum = checksum_header(h)?;
    let transfer = dav
        .storage()
        .initiate_chunk(InitiateChunkRequest {
            folder: folder.to_owned(),
            chunk: chunk.to_owned(),
            length,
            checksum,
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    let mut data_req = http::Request::put(format!("/chunk/{}", transfer.token));
    if length >= 0 {
        data_req = data_req.header(header::CONTENT_LENGTH, length);
    }
    let data_req = data_req.body(req.into_body()).map_err(|e| internal(&e))?;
    let resp = dav.transfer(&transfer.provider, data_req).await?;
    let status = resp.status();
    if !status.is_success() {
        return Err(crate::webdav::provider_error(resp).await);
    }
    Ok(status.into_response())
}

/// `MOVE …/{folder}/.file`: the folder becomes the file `Destination` names.
async fn assemble(
    dav: &Dav,
    who: &Identity,
    folder: &str,
    req: Request,
) -> Result<Response, Response> {
    let h = req.headers();
    let dest = crate::webdav::destination(dav, h, who).await?;
    // Nextcloud's client conditions an overwrite on the destination's etag in an `If` header
    // tagged with the destination's URL; a failed condition is 412 before anything moves.
    let tokens = match h.get("if") {
        Some(v) => crate::webdav::check_if(dav, who, req.uri().path(), v).await?,
        None => Vec::new(),
    };
    // Only an etag conditions an upload here; `If-Match: *` is passed on as no condition.
    let if_match = Some(crate::headers::if_match(h))
        .filter(|v| v != "*")
        .unwrap_or_default();
    let if_none_match_any = h
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == b"*");
    let mtime = crate::headers::mtime_ns(h);
    let transfer = dav
        .storage()
        .initiate_upload(InitiateUploadRequest {
            r#ref: Some(dest.reference()),
            if_match,
            if_none_match_any,
            mtime_ns: mtime.unwrap_or(0),
            length: total_length(h)?.unwrap_or(-1),
            checksum: checksum_header(h)?,
            lock_tokens: [dest.tokens.clone(), tokens].concat(),
            resumable: false,
            upload_folder: folder.to_owned(),
        })
        .await
        .map_err(|s| match ErrorKind::of(&s) {
            ErrorKind::PermissionDenied if dest.path.is_root() => dav_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "cannot assemble onto a collection",
                None,
            ),
            _ => grpc_error(s),
        })?
        .into_inner();
    let existed = transfer.node.is_some();
    let data_req = http::Request::post(format!("/assemble/{}", transfer.token))
        .body(Body::empty())
        .map_err(|e| internal(&e))?;
    let resp = dav.transfer(&transfer.provider, data_req).await?;
    crate::webdav::written(resp, existed, mtime.is_some()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who() -> Identity {
        Identity {
            id: "u1".into(),
            username: "admin".into(),
            display_name: String::new(),
            groups: Vec::new(),
            admin: false,
            space_admin: false,
            login: None,
        }
    }

    #[test]
    fn paths_name_the_root_a_folder_or_a_chunk() {
        let w = who();
        assert!(matches!(
            target("/remote.php/dav/uploads/admin/", &w),
            Ok((p, Target::Root)) if p == "/remote.php/dav/uploads/admin"
        ));
        assert!(matches!(
            target("/remote.php/dav/uploads/admin/123", &w),
            Ok((_, Target::Folder(f))) if f == "123"
        ));
        assert!(matches!(
            target("/remote.php/dav/uploads/admin/rc-%C3%BC/000-009", &w),
            Ok((_, Target::Chunk(f, c))) if f == "rc-ü" && c == "000-009"
        ));
        assert!(target("/remote.php/dav/uploads/other/1", &w).is_err());
        assert!(target("/remote.php/dav/uploads/admin/1/2/3", &w).is_err());
        assert!(target("/remote.php/dav/uploads/admin/%2e%2e/x", &w).is_err());
    }
}
