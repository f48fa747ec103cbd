//! TUS 1.0.0 resumable uploads as oCIS offers them (CLIENT_PROTOCOL.md §5a): creation by `POST`
//! on a WebDAV collection (with the first bytes in the same request, creation-with-upload),
//! then `PATCH`/`HEAD`/`DELETE` on the absolute `Location` URL `/data/{token}`, which the proxy
//! lets through without credentials because the signed token authorises by itself.
//!
//! The frontend only translates: creation is an `InitiateUpload` with `resumable` through the
//! gateway (so permissions, locks, `If-Match` and quota are checked where a PUT's are), and
//! every byte streams on to storage-users' `/tus/{token}` data path, which keeps the upload's
//! state and commits it. That state is in the shared store, so each request may go to any
//! storage-users instance (the data channel balances them per request) and an upload survives
//! the replacement of the instance it began on. Extensions offered: creation, creation-with-upload, checksum (md5,
//! sha1), expiration, termination.

use arca_proto::v1::{GetHomeSpaceRequest, GetSpaceRequest, InitiateUploadRequest, Node};
use arca_transport::Channel;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt as _;

pub(crate) const VERSION: &str = "1.0.0";
const EXTENSIONS: &str = "creation,creation-with-upload,checksum,expiration,termination";
const CHECKSUM_ALGORITHMS: &str = "md5,sha1";
/// TUS core: PATCH bodies (and creation-with-upload bodies) have this type.
const OFFSET_STREAM: &str = "application/offset+octet-stream";
/// What the upload URL answers to.
const UPLOAD_URL_ALLOW: &str = "OPTIONS, HEAD, PATCH, DELETE";

static TUS_RESUMABLE: HeaderName = HeaderName::from_static("tus-resumable");
static TUS_VERSION: HeaderName = HeaderName::from_static("tus-version");
static TUS_EXTENSION: HeaderName = HeaderName::from_static("tus-extension");
static TUS_CHECKSUM_ALGORITHM: HeaderName = HeaderName::from_static("tus-checksum-algorithm");
static TUS_MAX_SIZE: HeaderName = HeaderName::from_static("tus-max-size");
static UPLOAD_LENGTH: HeaderName = HeaderName::from_static("upload-length");
static UPLOAD_DEFER_LENGTH: HeaderName = HeaderName::from_static("upload-defer-length");
static UPLOAD_OFFSET: HeaderName = HeaderName::from_static("upload-offset");
static UPLOAD_EXPIRES: HeaderName = HeaderName::from_static("upload-expires");
static UPLOAD_METADATA: HeaderName = HeaderName::from_static("upload-metadata");
static UPLOAD_CHECKSUM: HeaderName = HeaderName::from_static("upload-checksum");

/// The collection a creation `POST` was sent to, as the WebDAV layer resolved it.
pub(crate) struct Collection<'a> {
    /// Empty for the caller's personal space.
    pub(crate) space_id: &'a str,
    /// Decoded path inside the space, `/` for its root.
    pub(crate) path: &'a str,
    /// Lock tokens from the request's `If` header.
    pub(crate) lock_tokens: &'a [String],
}

/// A one-line plain-text error with the TUS version header (TUS clients read status codes,
/// not bodies).
fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    let mut resp = (status, format!("{message}\n")).into_response();
    resp.headers_mut()
        .insert(TUS_RESUMABLE.clone(), HeaderValue::from_static(VERSION));
    resp
}

/// TUS core § Tus-Resumable: a version we do not speak is refused with 412 and ours named;
/// `Some` is that refusal.
fn check_version(headers: &HeaderMap) -> Option<Response> {
    match headers.get(&TUS_RESUMABLE) {
        Some(v) if v.as_bytes() != VERSION.as_bytes() => {
            let mut resp = error(
                StatusCode::PRECONDITION_FAILED,
                "unsupported Tus-Resumable version",
            );
            resp.headers_mut()
                .insert(TUS_VERSION.clone(), HeaderValue::from_static(VERSION));
            Some(resp)
        }
        _ => None,
    }
}

/// Adds the TUS discovery headers (TUS core § OPTIONS) to a WebDAV `OPTIONS` answer, with
/// `Tus-Max-Size` when the space has a quota: what is left of it.
pub(crate) async fn advertise(gateway: &Channel, space_id: &str, mut resp: Response) -> Response {
    let mut storage = arca_proto::storage_client(gateway.clone());
    let space = if space_id.is_empty() {
        storage.get_home_space(GetHomeSpaceRequest {}).await
    } else {
        storage
            .get_space(GetSpaceRequest {
                space_id: space_id.to_owned(),
                with_usage: false,
            })
            .await
    };
    let h = resp.headers_mut();
    discovery_headers(h);
    // Without the space (a failure is the WebDAV layer's to report) there is just no limit to
    // announce.
    if let Ok(space) = space.map(tonic::Response::into_inner)
        && space.quota > 0
    {
        h.insert(
            TUS_MAX_SIZE.clone(),
            HeaderValue::from(space.quota.saturating_sub(space.used)),
        );
    }
    // Creation is a POST on a collection.
    let allow = h
        .get(header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !allow.split(',').any(|m| m.trim() == "POST") {
        let with_post = if allow.is_empty() {
            "POST".to_owned()
        } else {
            format!("{allow}, POST")
        };
        if let Ok(v) = HeaderValue::from_str(&with_post) {
            h.insert(header::ALLOW, v);
        }
    }
    resp
}

fn discovery_headers(h: &mut HeaderMap) {
    h.insert(TUS_RESUMABLE.clone(), HeaderValue::from_static(VERSION));
    h.insert(TUS_VERSION.clone(), HeaderValue::from_static(VERSION));
    h.insert(TUS_EXTENSION.clone(), HeaderValue::from_static(EXTENSIONS));
    h.insert(
        TUS_CHECKSUM_ALGORITHM.clone(),
        HeaderValue::from_static(CHECKSUM_ALGORITHMS),
    );
}

/// `Upload-Metadata` (TUS creation § Upload-Metadata): `key base64,key base64,key`. A key may
/// have no value (owncloudcmd sends `checksum` so); the value of `key` is returned decoded.
fn metadata_value(header: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
    for pair in header.split(',') {
        let mut parts = pair.split_whitespace();
        let Some(k) = parts.next() else { continue };
        if k != key {
            continue;
        }
        let Some(value) = parts.next() else {
            return Ok(Some(Vec::new()));
        };
        return base64::engine::general_purpose::STANDARD
            .decode(value)
            .map(Some)
            .map_err(|_| format!("Upload-Metadata: the value of {key} is not base64"));
    }
    Ok(None)
}

/// The target of an upload: `filename` (relative to the collection, with or without a leading
/// slash, possibly with directories) below the collection's path.
fn target_path(collection: &str, filename: &str) -> Result<String, String> {
    let mut out = String::new();
    for seg in collection.split('/').chain(filename.split('/')) {
        match seg {
            "" => continue,
            "." | ".." => return Err("filename: . and .. are not allowed".into()),
            s if s.contains('\0') => return Err("filename: NUL is not allowed".into()),
            s => {
                out.push('/');
                out.push_str(s);
            }
        }
    }
    if out.len() <= collection.trim_end_matches('/').len() {
        return Err("filename names no file".into());
    }
    Ok(out)
}

/// The absolute upload URL: the client must reach it as it reached us, so it is built from the
/// request's `Host` (and `X-Forwarded-Proto` from a TLS-terminating proxy in front).
fn location(headers: &HeaderMap, uri: &http::Uri, token: &str) -> Option<HeaderValue> {
    let base = crate::headers::public_base(headers, uri)?;
    HeaderValue::from_str(&format!(
        "{base}{}/{token}",
        arca_proto::routes::UPLOAD_URLS
    ))
    .ok()
}

/// The WebDAV headers of a committed file (as on a PUT answer).
fn node_headers(h: &mut HeaderMap, node: &Node) {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", node.etag)) {
        h.insert(header::ETAG, v.clone());
        h.insert(HeaderName::from_static("oc-etag"), v);
    }
    if let Ok(v) = HeaderValue::from_str(&node.id) {
        h.insert(HeaderName::from_static("oc-fileid"), v);
    }
    let secs = node.mtime_ns.div_euclid(1_000_000_000);
    if let Ok(v) = HeaderValue::from_str(&crate::dates::last_modified_header(secs)) {
        h.insert(header::LAST_MODIFIED, v);
    }
    h.insert(
        HeaderName::from_static("oc-perm"),
        HeaderValue::from_static("SRDNVWZP"),
    );
}

/// Sends one request to storage-users' `/tus/{token}`; unreachable is 502.
async fn to_provider(
    data: &Channel,
    method: Method,
    token: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<http::Response<Body>, Response> {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("/tus/{token}"));
    for name in [
        &header::CONTENT_TYPE,
        &header::CONTENT_LENGTH,
        &UPLOAD_OFFSET,
        &UPLOAD_CHECKSUM,
        &TUS_RESUMABLE,
    ] {
        if let Some(v) = headers.get(name) {
            req = req.header(name, v.clone());
        }
    }
    let req = req
        .body(body)
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    data.clone()
        .oneshot(req)
        .await
        .map(|r| r.map(Body::new))
        .map_err(|e| {
            let (status, message) = crate::failure::transfer_failure(&e);
            let mut resp = error(status, message);
            if status == StatusCode::SERVICE_UNAVAILABLE {
                resp.headers_mut().insert(
                    http::header::RETRY_AFTER,
                    HeaderValue::from(arca_transport::UNAVAILABLE_RETRY_AFTER_SECS),
                );
            }
            resp
        })
}

/// The provider's answer as the client's: status, TUS headers, and the file's headers when
/// the upload completed.
async fn relay(resp: http::Response<Body>) -> Response {
    let (parts, body) = resp.into_parts();
    let body = if parts.status.is_client_error() || parts.status.is_server_error() {
        // A one-line reason: small, and worth passing on.
        Body::from(
            body.collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default(),
        )
    } else {
        Body::empty()
    };
    let mut out = Response::new(body);
    *out.status_mut() = parts.status;
    let h = out.headers_mut();
    for name in [
        &TUS_RESUMABLE,
        &UPLOAD_OFFSET,
        &UPLOAD_LENGTH,
        &UPLOAD_EXPIRES,
        &UPLOAD_METADATA,
        &header::CACHE_CONTROL,
    ] {
        if let Some(v) = parts.headers.get(name) {
            h.insert(name.clone(), v.clone());
        }
    }
    if let Some(node) = crate::headers::committed_node(&parts.headers) {
        node_headers(h, &node);
    }
    out
}

/// `POST` on a WebDAV collection: creates an upload (and with an offset-stream body, writes
/// its first bytes). Without `Tus-Resumable` it is not a TUS request: 405, as before.
pub(crate) async fn create(
    gateway: &Channel,
    data: &Channel,
    collection: Collection<'_>,
    req: Request,
) -> Response {
    let h = req.headers();
    if !h.contains_key(&TUS_RESUMABLE) {
        return error(StatusCode::METHOD_NOT_ALLOWED, "POST is for TUS uploads");
    }
    if let Some(resp) = check_version(h) {
        return resp;
    }
    if h.contains_key(&UPLOAD_DEFER_LENGTH) {
        return error(
            StatusCode::BAD_REQUEST,
            "Upload-Defer-Length is not supported: send Upload-Length",
        );
    }
    let Some(length) = h
        .get(&UPLOAD_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "Upload-Length missing or not a number",
        );
    };
    let Ok(length) = i64::try_from(length) else {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "Upload-Length is too large");
    };
    let Ok(metadata) = h.get(&UPLOAD_METADATA).map_or(Ok(""), |v| v.to_str()) else {
        return error(StatusCode::BAD_REQUEST, "Upload-Metadata is not ASCII");
    };
    let filename = match metadata_value(metadata, "filename") {
        Ok(Some(name)) => name,
        Ok(None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "Upload-Metadata needs a filename (base64)",
            );
        }
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let Ok(filename) = String::from_utf8(filename) else {
        return error(StatusCode::BAD_REQUEST, "filename is not UTF-8");
    };
    let path = match target_path(collection.path, &filename) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    // owncloudcmd announces the file's checksum as `checksum` = "SHA1 HEX" (CLIENT_PROTOCOL.md
    // §5a); an empty one is no checksum. Verified when the upload is committed.
    let checksum = match metadata_value(metadata, "checksum") {
        Ok(Some(v)) => crate::headers::checksum_value(&String::from_utf8_lossy(&v)),
        Ok(None) => String::new(),
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    // Only an etag conditions an upload here; `If-Match: *` is passed on as no condition.
    let if_match = Some(crate::headers::if_match(h))
        .filter(|v| v != "*")
        .unwrap_or_default();
    let with_body = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(OFFSET_STREAM));

    let transfer = arca_proto::storage_client(gateway.clone())
        .initiate_upload(InitiateUploadRequest {
            r#ref: Some(arca_proto::v1::Ref {
                space_id: collection.space_id.to_owned(),
                path: path.clone(),
                node_id: String::new(),
            }),
            if_match,
            if_none_match_any: false,
            mtime_ns: crate::headers::mtime_ns(h).unwrap_or(0),
            length,
            checksum,
            lock_tokens: collection.lock_tokens.to_vec(),
            resumable: true,
            upload_folder: String::new(),
        })
        .await;
    let transfer = match transfer {
        Ok(t) => t.into_inner(),
        Err(s) => {
            let failure = crate::failure::Failure::of(&s);
            return error(failure.status, failure.message);
        }
    };
    let Some(location) = location(h, req.uri(), &transfer.token) else {
        return error(StatusCode::BAD_REQUEST, "no usable Host header");
    };

    // The first bytes go as a PATCH at offset 0; so does an empty upload, which is complete
    // (and committed) as soon as it exists.
    let mut resp = if with_body || length == 0 {
        let mut headers = h.clone();
        headers.insert(UPLOAD_OFFSET.clone(), HeaderValue::from_static("0"));
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(OFFSET_STREAM),
        );
        let body = if with_body {
            req.into_body()
        } else {
            Body::empty()
        };
        match to_provider(data, Method::PATCH, &transfer.token, &headers, body).await {
            Ok(r) => relay(r).await,
            Err(r) => r,
        }
    } else {
        let mut r = StatusCode::CREATED.into_response();
        r.headers_mut()
            .insert(UPLOAD_OFFSET.clone(), HeaderValue::from_static("0"));
        r
    };
    if resp.status() == StatusCode::NO_CONTENT {
        *resp.status_mut() = StatusCode::CREATED;
    }
    let rh = resp.headers_mut();
    // Even when the first chunk failed (a checksum mismatch, say), the upload exists: the
    // client may resume it at the Upload-Offset it is told.
    rh.insert(header::LOCATION, location);
    rh.insert(TUS_RESUMABLE.clone(), HeaderValue::from_static(VERSION));
    rh.insert(TUS_EXTENSION.clone(), HeaderValue::from_static(EXTENSIONS));
    rh.insert(UPLOAD_EXPIRES.clone(), HeaderValue::from(transfer.expires));
    resp
}

/// The upload URL's routes: `/data/{token}`, outside any WebDAV root; public
/// (`arca_proto::routes::UPLOAD_URLS`), as the token authorises by itself.
pub(crate) fn routes(data: Channel) -> axum::Router {
    let root = arca_proto::routes::UPLOAD_URLS;
    axum::Router::new()
        .route(&format!("{root}/{{token}}"), axum::routing::any(upload_url))
        .with_state(data)
}

async fn upload_url(
    State(data): State<Channel>,
    Path(token): Path<String>,
    req: Request,
) -> Response {
    let method = req.method().clone();
    if method == Method::OPTIONS {
        let mut resp = StatusCode::NO_CONTENT.into_response();
        discovery_headers(resp.headers_mut());
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(UPLOAD_URL_ALLOW));
        return resp;
    }
    if !matches!(method, Method::PATCH | Method::HEAD | Method::DELETE) {
        let mut resp = error(StatusCode::METHOD_NOT_ALLOWED, "not a method of an upload");
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(UPLOAD_URL_ALLOW));
        return resp;
    }
    if let Some(resp) = check_version(req.headers()) {
        return resp;
    }
    let headers = req.headers().clone();
    let body = if method == Method::PATCH {
        req.into_body()
    } else {
        Body::empty()
    };
    match to_provider(&data, method, &token, &headers, body).await {
        Ok(r) => relay(r).await,
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_values() {
        let h = "filename L3N5bmN0ZXN0L2ZpbGUxLnR4dA==,checksum";
        assert_eq!(
            metadata_value(h, "filename").unwrap().as_deref(),
            Some(&b"/synctest/file1.txt"[..])
        );
        assert_eq!(metadata_value(h, "checksum").unwrap(), Some(Vec::new()));
        assert_eq!(metadata_value(h, "mtime").unwrap(), None);
        assert!(metadata_value("filename !!", "filename").is_err());
        assert_eq!(
            metadata_value(" checksum , filename  YQ== ", "filename").unwrap(),
            Some(b"a".to_vec())
        );
    }

    #[test]
    fn targets() {
        assert_eq!(
            target_path("/", "/synctest/f.txt").unwrap(),
            "/synctest/f.txt"
        );
        assert_eq!(target_path("/", "f.txt").unwrap(), "/f.txt");
        assert_eq!(target_path("/a/b/", "c/d.txt").unwrap(), "/a/b/c/d.txt");
        assert_eq!(target_path("/a", "/ü n.txt").unwrap(), "/a/ü n.txt");
        assert!(target_path("/a", "../x").is_err());
        assert!(target_path("/a", "").is_err());
        assert!(target_path("/a", "/").is_err());
    }

    #[test]
    fn locations() {
        let uri: http::Uri = "/remote.php/dav/files/admin/".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("cloud.example:9200"));
        assert_eq!(
            location(&h, &uri, "v1.x.y").unwrap(),
            "http://cloud.example:9200/data/v1.x.y"
        );
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(
            location(&h, &uri, "t").unwrap(),
            "https://cloud.example:9200/data/t"
        );
        h.insert(header::HOST, HeaderValue::from_static("evil/path"));
        assert!(location(&h, &uri, "t").is_none());
    }
}
