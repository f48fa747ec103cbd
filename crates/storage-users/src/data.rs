//! The data path: file contents stream over HTTP here, never inside gRPC messages.
//!
//! `PUT /data/{token}` writes the body as the upload grant says; `GET /data/{token}` reads
//! (with an optional single `Range`). The signed token is the whole authorisation: it was
//! minted by `InitiateUpload`/`InitiateDownload` after the permission checks. The committed
//! node comes back in the `x-arca-node` header (base64 protobuf), so the frontend can answer
//! with ETag and file id without another call.

use arca_store_files::{Precheck, PutOptions, StoreError};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures::TryStreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use prost::Message as _;

use crate::provider::{
    DOWNLOAD_PURPOSE, DownloadGrant, Provider, UPLOAD_PURPOSE, UploadGrant, mtime,
};
pub(crate) use arca_proto::headers::NODE as NODE_HEADER;

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, format!("{message}\n")).into_response()
}

/// A store error as the data path answers it: the status of the one mapping
/// (`StoreError::http_status`), its message as the body.
pub(crate) fn store_error(e: StoreError) -> Response {
    let code = e.http_status();
    if e.is_storage_full() {
        tracing::error!(error = %e, "the blob or metadata store is full");
        return error(code, "no space left on the storage");
    }
    if e.is_unavailable() {
        tracing::warn!(error = %e, "a store is unavailable");
        let mut resp = error(code, e.unavailable_message());
        resp.headers_mut().insert(
            http::header::RETRY_AFTER,
            HeaderValue::from(arca_transport::UNAVAILABLE_RETRY_AFTER_SECS),
        );
        return resp;
    }
    if code == StatusCode::INTERNAL_SERVER_ERROR {
        // The details (a statement, a path) are for the log, not the client.
        tracing::error!(error = %e, "data path failure");
        return error(code, "the storage failed; the server's log has the details");
    }
    error(code, e)
}

pub(crate) fn node_header(node: &arca_proto::v1::Node) -> Option<HeaderValue> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(node.encode_to_vec());
    HeaderValue::from_str(&encoded).ok()
}

pub(crate) async fn upload(
    State(p): State<Provider>,
    Path(token): Path<String>,
    body: Body,
) -> Response {
    let grant: UploadGrant = match p.signer.verify(UPLOAD_PURPOSE, &token) {
        Ok(g) => g,
        Err(e) => return error(StatusCode::FORBIDDEN, format_args!("upload token: {e}")),
    };
    let expected_checksum = match crate::convert::expected_checksum(&grant.checksum) {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let stream = body
        .into_data_stream()
        .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) });
    match put_granted(&p, grant, expected_checksum, stream).await {
        Ok(message) => {
            let mut resp = StatusCode::OK.into_response();
            if let Some(v) = node_header(&message) {
                resp.headers_mut().insert(NODE_HEADER, v);
            }
            resp
        }
        Err(e) => store_error(e),
    }
}

/// Writes `body` as an upload grant says (through the data path, or carried in a `Put`
/// call); returns the file as committed.
pub(crate) async fn put_granted<S, E>(
    p: &Provider,
    grant: UploadGrant,
    expected_checksum: Option<(arca_store_files::ChecksumAlgo, String)>,
    body: S,
) -> Result<arca_proto::v1::Node, StoreError>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send,
    E: Into<arca_store::BoxError>,
{
    let opts = PutOptions {
        if_match: (!grant.if_match.is_empty()).then(|| grant.if_match.clone()),
        if_none_match_any: grant.if_none_match_any,
        mtime: mtime(grant.mtime_ns),
        expected_checksum,
        content_length: u64::try_from(grant.length).ok(),
        prechecked: grant.space.map(|space_id| Precheck {
            space_id,
            allowance: grant.allowance,
        }),
    };
    let node = p
        .store
        .put_file(&grant.parent, &grant.name, body, opts)
        .await?;
    p.changed_node(&node.space_id, &node.id);
    Ok(p.node_message(&node, grant.path, &grant.owner))
}

/// A body whose length is not the one announced, as the store would refuse it.
pub(crate) fn length_mismatch(expected: i64, received: i64) -> tonic::Status {
    StoreError::LengthMismatch {
        expected: expected.unsigned_abs(),
        received: received.unsigned_abs(),
    }
    .status()
}

pub(crate) async fn download(
    State(p): State<Provider>,
    Path(token): Path<String>,
    headers: HeaderMap,
) -> Response {
    let grant: DownloadGrant = match p.signer.verify(DOWNLOAD_PURPOSE, &token) {
        Ok(g) => g,
        Err(e) => return error(StatusCode::FORBIDDEN, format_args!("download token: {e}")),
    };
    let spec = headers.get(header::RANGE).map(|v| v.to_str().unwrap_or(""));
    // A grant naming its blob is served without a metadata query; an older one looks the
    // node up once for its blob.
    let (blob, size) = if grant.blob.is_empty() {
        match p.store.stat(&grant.node).await {
            Ok(n) if n.is_dir() => return store_error(StoreError::IsADirectory),
            Ok(n) => match n.blob_id() {
                Some(b) => (b.to_owned(), n.size),
                None => return store_error(StoreError::NotFound),
            },
            Err(e) => return store_error(e),
        }
    } else {
        (grant.blob, grant.size)
    };
    // The blob names these exact bytes: a strong validator, so that a caller whose answer
    // broke off can ask another instance for the rest of the same bytes (If-Match + Range).
    let etag = format!("\"{blob}\"");
    if let Some(wanted) = headers.get(header::IF_MATCH)
        && !wanted
            .to_str()
            .is_ok_and(|w| w.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
    {
        return error(StatusCode::PRECONDITION_FAILED, "the content changed");
    }
    let range = match spec.map(|spec| parse_range(spec, size)) {
        None | Some(RangeSpec::All) => None,
        Some(RangeSpec::One(start, end)) => Some((start, end)),
        Some(RangeSpec::Unsatisfiable) => {
            let mut resp = error(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                resp.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return resp;
        }
    };
    let (range, stream) = match p.store.read_blob(&blob, size, range).await {
        Ok(r) => r,
        Err(e) => return store_error(e),
    };
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut()
        .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    match range {
        Some((start, end)) => {
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            let h = resp.headers_mut();
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start + 1));
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{end}/{size}")) {
                h.insert(header::CONTENT_RANGE, v);
            }
        }
        None => {
            resp.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
        }
    }
    resp
}

#[derive(Debug, PartialEq, Eq)]
enum RangeSpec {
    /// Absent, malformed or multi-range: RFC 9110 §14.2 lets a server ignore it and send all.
    All,
    One(u64, u64),
    Unsatisfiable,
}

/// A single `bytes=` range against a representation of `size` bytes (RFC 9110 §14.1.2).
fn parse_range(spec: &str, size: u64) -> RangeSpec {
    let Some(set) = spec.trim().strip_prefix("bytes=") else {
        return RangeSpec::All;
    };
    if set.contains(',') {
        return RangeSpec::All;
    }
    let Some((first, last)) = set.trim().split_once('-') else {
        return RangeSpec::All;
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        // Suffix range: the last N bytes.
        return match last.parse::<u64>() {
            Ok(0) => RangeSpec::Unsatisfiable,
            Ok(_) if size == 0 => RangeSpec::Unsatisfiable,
            Ok(n) => RangeSpec::One(size.saturating_sub(n), size - 1),
            Err(_) => RangeSpec::All,
        };
    }
    let Ok(start) = first.parse::<u64>() else {
        return RangeSpec::All;
    };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match last.parse::<u64>() {
            Ok(e) if e >= start => e,
            _ => return RangeSpec::All,
        }
    };
    if start >= size {
        return RangeSpec::Unsatisfiable;
    }
    RangeSpec::One(start, end.min(size - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), RangeSpec::One(0, 9));
        assert_eq!(parse_range("bytes=90-", 100), RangeSpec::One(90, 99));
        assert_eq!(parse_range("bytes=-10", 100), RangeSpec::One(90, 99));
        assert_eq!(parse_range("bytes=-1000", 100), RangeSpec::One(0, 99));
        assert_eq!(parse_range("bytes=100-", 100), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range("bytes=5-1", 100), RangeSpec::All);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), RangeSpec::All);
        assert_eq!(parse_range("items=0-1", 100), RangeSpec::All);
        assert_eq!(parse_range("bytes=0-0", 0), RangeSpec::Unsatisfiable);
    }
}
