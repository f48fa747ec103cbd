//! Folders and selections as one ZIP, streamed as it is made: `GET /archiver?id=ID[&id=ID…]`
//! for a logged-in user (the route and parameter of oCIS's archiver; `id` is a file id as
//! WebDAV's `oc:fileid` gives it), and `GET /s/{token}/archive?id=…` for a public link's
//! visitor (`public`), under the link's identity, so it reaches only what the link shares.
//!
//! Two phases. Planning walks the named items (folders down to their last file), counts
//! them against `frontend.archive` (`max_files`, `max_size`: one line and 400 when past
//! either, before a byte is sent) and asks a download for every file up front: the caller's
//! identity lasts a minute, a download's token an hour, so a long stream needs no call on the
//! caller's behalf after its start. Then a task writes the archive ([`zip`]: entries stored,
//! CRC-32 computed on the way) into a bounded channel the response body reads, file by file
//! from the providers' data path: memory stays a few chunks whatever the archive's size, and
//! a client that goes away stops the task at its next chunk. A file removed since planning is
//! left out; a read that fails midway ends the response early, so the client sees a failed
//! download rather than a damaged archive.

pub(crate) mod zip;

use std::collections::HashSet;
use std::sync::Arc;

use arca_proto::ErrorKind;
use arca_proto::v1::*;
use arca_transport::context::CallContext;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use http::{HeaderValue, StatusCode, header};
use http_body_util::BodyExt as _;

use crate::failure::Failure;
use crate::webdav::{Dav, content_disposition, data_uri};

/// How big an archive may get (`frontend.archive`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Bytes of file contents; 0: no bound.
    pub(crate) max_size: u64,
    /// Files and folders; 0: no bound.
    pub(crate) max_files: u32,
}

impl Limits {
    pub(crate) fn of(config: &arca_config::ArchiveConfig) -> Self {
        Self {
            max_size: config.max_size,
            max_files: config.max_files,
        }
    }
}

/// Downloads asked for at once while planning.
const PARALLEL_DOWNLOADS: usize = 8;
/// Chunks between the writer and the response body: the archive's memory, with the data
/// path's chunk size.
const CHANNEL_CHUNKS: usize = 4;

#[derive(Clone)]
struct ArchiveState {
    dav: Dav,
    limits: Limits,
}

pub(crate) fn routes(dav: Dav, limits: Limits) -> axum::Router {
    axum::Router::new()
        .route("/archiver", axum::routing::get(archiver))
        .with_state(Arc::new(ArchiveState { dav, limits }))
}

/// `GET /archiver?id=…`: what the logged-in caller names.
async fn archiver(State(s): State<Arc<ArchiveState>>, RawQuery(query): RawQuery) -> Response {
    serve(&s.dav, s.limits, ids(query.as_deref())).await
}

/// The `id` parameters of a query, decoded.
pub(crate) fn ids(query: Option<&str>) -> Vec<String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.strip_prefix("id="))
        .filter_map(|v| {
            percent_encoding::percent_decode_str(&v.replace('+', " "))
                .decode_utf8()
                .ok()
                .map(|v| v.into_owned())
        })
        .filter(|v| !v.is_empty())
        .collect()
}

/// A refusal as one plain line.
fn refuse(status: StatusCode, message: &str) -> Response {
    let mut resp = (status, format!("{message}\n")).into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn call_failed(s: &tonic::Status) -> Response {
    let f = Failure::of(s);
    refuse(f.status, &f.message)
}

/// The archive of the items `ids` names, as the current caller may read them.
pub(crate) async fn serve(dav: &Dav, limits: Limits, ids: Vec<String>) -> Response {
    if ids.is_empty() {
        return refuse(
            StatusCode::BAD_REQUEST,
            "name what to download: ?id=FILE_ID, once per file or folder",
        );
    }
    let (name, entries) = match plan(dav, limits, &ids).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let entries = match with_downloads(dav, entries).await {
        Ok(e) => e,
        Err(resp) => return resp,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL_CHUNKS);
    let call = CallContext::current().unwrap_or_default();
    let writer_dav = dav.clone();
    let archive_name = name.clone();
    tokio::spawn(call.scope(async move {
        if let Err(why) = write(&writer_dav, entries, &tx).await {
            tracing::warn!(archive = %archive_name, error = %why, "archive ended early");
            // The client sees the body break off: a failed download, not a damaged file.
            let _ = tx.send(Err(std::io::Error::other(why))).await;
        }
    }));
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    }));
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/zip"),
    );
    if let Ok(v) = HeaderValue::from_str(&content_disposition(&name)) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// One entry of the archive: its path inside it, and what is needed to write it.
struct Entry {
    /// `/`-separated, no leading slash.
    name: String,
    dir: bool,
    node_id: String,
    /// Unix seconds.
    mtime: i64,
    /// Files: the download asked for while planning (its token lasts an hour).
    download: Option<Transfer>,
}

fn by_id(node_id: &str) -> Option<Ref> {
    Some(Ref {
        space_id: String::new(),
        path: String::new(),
        node_id: node_id.to_owned(),
    })
}

fn secs(mtime_ns: i64) -> i64 {
    mtime_ns.div_euclid(1_000_000_000)
}

/// `name`, or `name (2)`, `name (3)`, … if an earlier item took it (two selected items of the
/// same name from different folders).
fn unique(name: &str, taken: &mut HashSet<String>) -> String {
    let mut candidate = name.to_owned();
    let mut n = 2;
    while !taken.insert(candidate.clone()) {
        candidate = match name.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() => format!("{stem} ({n}).{ext}"),
            _ => format!("{name} ({n})"),
        };
        n += 1;
    }
    candidate
}

/// The archive's name and its entries, folders before what they hold; refused when past the
/// limits.
async fn plan(dav: &Dav, limits: Limits, ids: &[String]) -> Result<(String, Vec<Entry>), Response> {
    let storage = dav.storage();
    let mut entries = Vec::new();
    let mut taken = HashSet::new();
    let mut bytes = 0u64;
    let mut first_name = String::new();
    let over = |entries: usize, bytes: u64| -> Option<Response> {
        if limits.max_files > 0 && entries > limits.max_files as usize {
            return Some(refuse(
                StatusCode::BAD_REQUEST,
                &format!(
                    "more than {} files and folders: download fewer at once",
                    limits.max_files
                ),
            ));
        }
        if limits.max_size > 0 && bytes > limits.max_size {
            return Some(refuse(
                StatusCode::BAD_REQUEST,
                &format!(
                    "more than {} bytes: download fewer at once",
                    limits.max_size
                ),
            ));
        }
        None
    };
    for id in ids {
        let mut storage = storage.clone();
        let node = storage
            .stat(StatRequest {
                r#ref: by_id(id),
                with_props: false,
                with_locks: false,
            })
            .await
            .map_err(|s| call_failed(&s))?
            .into_inner();
        if first_name.is_empty() {
            first_name = node.name.clone();
        }
        let top = unique(&node.name, &mut taken);
        if !node.is_dir {
            bytes += node.size;
            entries.push(Entry {
                name: top,
                dir: false,
                node_id: node.id.clone(),
                mtime: secs(node.mtime_ns),
                download: None,
            });
            if let Some(refused) = over(entries.len(), bytes) {
                return Err(refused);
            }
            continue;
        }
        entries.push(Entry {
            name: top.clone(),
            dir: true,
            node_id: node.id.clone(),
            mtime: secs(node.mtime_ns),
            download: None,
        });
        // Breadth first: a folder's entry comes before what it holds.
        let mut queue = std::collections::VecDeque::from([(node.id.clone(), top)]);
        while let Some((dir_id, prefix)) = queue.pop_front() {
            let listed = storage
                .list(ListRequest {
                    r#ref: by_id(&dir_id),
                    without_checksums: true,
                    without_owner: true,
                    ..Default::default()
                })
                .await
                .map_err(|s| call_failed(&s))?
                .into_inner();
            for child in listed.children {
                let name = format!("{prefix}/{}", child.name);
                if child.is_dir {
                    queue.push_back((child.id.clone(), name.clone()));
                } else {
                    bytes += child.size;
                }
                entries.push(Entry {
                    name,
                    dir: child.is_dir,
                    node_id: child.id,
                    mtime: secs(child.mtime_ns),
                    download: None,
                });
            }
            if let Some(refused) = over(entries.len(), bytes) {
                return Err(refused);
            }
        }
    }
    let name = if ids.len() == 1 {
        format!("{first_name}.zip")
    } else {
        "download.zip".to_owned()
    };
    Ok((name, entries))
}

/// Asks a download for every file, a few at a time. A file removed meanwhile is left out.
async fn with_downloads(dav: &Dav, entries: Vec<Entry>) -> Result<Vec<Entry>, Response> {
    let storage = dav.storage();
    let asked = futures::stream::iter(entries.into_iter().map(|mut e| {
        let mut storage = storage.clone();
        async move {
            if e.dir {
                return Ok(Some(e));
            }
            match storage
                .initiate_download(InitiateDownloadRequest {
                    r#ref: by_id(&e.node_id),
                    version_key: String::new(),
                    small_body: false,
                })
                .await
            {
                Ok(t) => {
                    e.download = Some(t.into_inner());
                    Ok(Some(e))
                }
                Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => Ok(None),
                Err(s) => Err(call_failed(&s)),
            }
        }
    }))
    .buffered(PARALLEL_DOWNLOADS)
    .collect::<Vec<_>>()
    .await;
    let mut out = Vec::with_capacity(asked.len());
    for e in asked {
        if let Some(e) = e? {
            out.push(e);
        }
    }
    Ok(out)
}

/// Writes the archive of `entries` into `tx`; an error ends it early.
async fn write(
    dav: &Dav,
    entries: Vec<Entry>,
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
) -> Result<(), String> {
    let send = |chunk: Bytes| async move {
        tx.send(Ok(chunk))
            .await
            .map_err(|_| "the client went away".to_owned())
    };
    let mut zip = zip::ZipWriter::default();
    for e in entries {
        let Some(transfer) = e.download else {
            send(zip.dir(&e.name, e.mtime).map_err(|z| z.to_string())?).await?;
            continue;
        };
        let node = transfer.node.clone().unwrap_or_default();
        let req = http::Request::get(data_uri(&transfer.token))
            .body(Body::empty())
            .map_err(|x| x.to_string())?;
        let resp = dav
            .transfer(&transfer.provider, req)
            .await
            .map_err(|_| format!("{}: the data path failed", e.name))?;
        if resp.status() == StatusCode::NOT_FOUND {
            // Removed since planning: not in the archive.
            continue;
        }
        if !resp.status().is_success() {
            return Err(format!(
                "{}: the data path answered {}",
                e.name,
                resp.status()
            ));
        }
        let (header, open) = zip
            .file_start(&e.name, secs(node.mtime_ns), node.size)
            .map_err(|z| z.to_string())?;
        send(header).await?;
        let mut body = resp.into_body();
        let mut crc = crc32fast::Hasher::new();
        let mut size = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|x| format!("{}: {x}", e.name))?;
            if let Ok(data) = frame.into_data() {
                crc.update(&data);
                size += data.len() as u64;
                send(data).await?;
            }
        }
        send(
            zip.file_end(open, crc.finalize(), size)
                .map_err(|z| z.to_string())?,
        )
        .await?;
    }
    send(zip.finish()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_every_id_parameter() {
        assert_eq!(
            ids(Some("id=a%24b%21c&x=1&id=d+e&id=")),
            vec!["a$b!c".to_owned(), "d e".to_owned()]
        );
        assert!(ids(None).is_empty());
    }

    #[test]
    fn a_taken_top_level_name_gets_a_number() {
        let mut taken = HashSet::new();
        assert_eq!(unique("a.txt", &mut taken), "a.txt");
        assert_eq!(unique("a.txt", &mut taken), "a (2).txt");
        assert_eq!(unique("a.txt", &mut taken), "a (3).txt");
        assert_eq!(unique("docs", &mut taken), "docs");
        assert_eq!(unique("docs", &mut taken), "docs (2)");
        assert_eq!(unique(".env", &mut taken), ".env");
        assert_eq!(unique(".env", &mut taken), ".env (2)");
    }
}
