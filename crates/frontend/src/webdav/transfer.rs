//! GET, HEAD and PUT: file contents over the storage providers' data path, and the headers
//! that carry a node's metadata (etag, file id, checksum, mtime).

use super::*;

/// A content type from the file name: enough for browsers and clients that preview.
pub(crate) fn content_type(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "txt" | "md" | "log" => "text/plain",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "js" => "application/javascript",
        "json" => "application/json",
        "xml" => "application/xml",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        "mp4" => "video/mp4",
        "mp3" => "audio/mpeg",
        _ => "application/octet-stream",
    }
}

/// ETag, OC-ETag, OC-FileId and Last-Modified of a node.
pub(crate) fn node_headers(h: &mut HeaderMap, node: &Node) {
    let etag = format!("\"{}\"", node.etag);
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v.clone());
        h.insert(HeaderName::from_static("oc-etag"), v);
    }
    if let Ok(v) = HeaderValue::from_str(&node.id) {
        h.insert(HeaderName::from_static("oc-fileid"), v);
    }
    let secs = node.mtime_ns.div_euclid(1_000_000_000);
    if let Ok(v) = HeaderValue::from_str(&crate::dates::http_date(secs)) {
        h.insert(header::LAST_MODIFIED, v);
    }
}

/// The data-path URL of a transfer token (tokens are base64url: no escaping needed).
pub(crate) fn data_uri(token: &str) -> String {
    format!("/data/{token}")
}

pub(super) fn etag_matches(list: &HeaderValue, etag: &str) -> bool {
    let Ok(list) = list.to_str() else {
        return false;
    };
    list.split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/").trim_matches('"') == etag)
}

pub(super) async fn get(
    dav: &Dav,
    loc: &Location,
    req: Request,
    with_body: bool,
) -> Result<Response, Response> {
    // `?preview=1`: an image of the file instead of its bytes (crate::preview).
    if let Some(query) = crate::preview::wanted(req.uri().query()) {
        return Ok(crate::preview::serve(&dav.gateway, loc.reference(), query, with_body).await);
    }
    let what = InitiateDownloadRequest {
        r#ref: Some(loc.reference()),
        version_key: String::new(),
        // A small file whole comes in the answer (a Range is served by the data path).
        small_body: with_body && !req.headers().contains_key(header::RANGE),
    };
    download(dav, what, req, with_body).await
}

/// GET or HEAD of what `what` names: a file, or an earlier version of one (`undo`).
pub(super) async fn download(
    dav: &Dav,
    what: InitiateDownloadRequest,
    req: Request,
    with_body: bool,
) -> Result<Response, Response> {
    let transfer = dav
        .storage()
        .initiate_download(what)
        .await
        .map_err(|s| match ErrorKind::of(&s) {
            // A collection has no body to GET.
            ErrorKind::Conflict => dav_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "a collection cannot be downloaded",
                None,
            ),
            _ => grpc_error(s),
        })?
        .into_inner();
    let node = transfer.node.unwrap_or_default();
    let inline_pdf =
        content_type(&node.name) == "application/pdf" && wants_inline(req.uri().query());
    let h = req.headers();
    let secs = node.mtime_ns.div_euclid(1_000_000_000);
    // RFC 9110 §13.2.2: If-Match, then If-None-Match (If-Modified-Since only without it).
    if let Some(v) = h.get(header::IF_MATCH)
        && !etag_matches(v, &node.etag)
    {
        return Err(dav_error(
            StatusCode::PRECONDITION_FAILED,
            "etag does not match",
            None,
        ));
    }
    let not_modified = match h.get(header::IF_NONE_MATCH) {
        Some(v) => etag_matches(v, &node.etag),
        None => h
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .is_some_and(|since| secs <= since.as_secs() as i64),
    };
    if not_modified {
        let mut resp = StatusCode::NOT_MODIFIED.into_response();
        node_headers(resp.headers_mut(), &node);
        return Ok(resp);
    }
    let mut resp = if with_body && transfer.has_body {
        let len = transfer.body.len();
        let mut out = Response::new(Body::from(transfer.body));
        out.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        out.headers_mut()
            .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        out
    } else if with_body {
        let mut data_req = http::Request::get(data_uri(&transfer.token));
        if let Some(range) = h.get(header::RANGE) {
            data_req = data_req.header(header::RANGE, range.clone());
        }
        let data_req = data_req.body(Body::empty()).map_err(|e| internal(&e))?;
        let resp = dav.transfer(&transfer.provider, data_req).await?;
        let (parts, body) = resp.into_parts();
        let mut out = Response::new(Body::new(body));
        *out.status_mut() = parts.status;
        // The data path failed (the blob store away, a blob missing): its answer as it is,
        // Retry-After included, none of the file's headers.
        if !parts.status.is_success() && parts.status != StatusCode::RANGE_NOT_SATISFIABLE {
            for name in [header::RETRY_AFTER, header::CONTENT_TYPE] {
                if let Some(v) = parts.headers.get(&name) {
                    out.headers_mut().insert(name, v.clone());
                }
            }
            return Ok(out);
        }
        for name in [
            header::CONTENT_LENGTH,
            header::CONTENT_RANGE,
            header::ACCEPT_RANGES,
        ] {
            if let Some(v) = parts.headers.get(&name) {
                out.headers_mut().insert(name, v.clone());
            }
        }
        out
    } else {
        let mut out = StatusCode::OK.into_response();
        out.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(node.size));
        out.headers_mut()
            .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        out
    };
    let hm = resp.headers_mut();
    node_headers(hm, &node);
    hm.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&node.name)),
    );
    let mut disposition = content_disposition(&node.name);
    if inline_pdf {
        disposition = disposition.replacen("attachment", "inline", 1);
    }
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        hm.insert(header::CONTENT_DISPOSITION, v);
    }
    // Users' bytes come from the web app's origin: should a browser ever render one (an
    // HTML or SVG file opened in a tab), it runs no script and reaches nothing of the app.
    // A PDF asked for inline is shown by the browser's own viewer, which a sandbox refuses
    // to load: it may load only its own document as a plugin, and be framed only by arca's pages
    // (the public-link page's preview); with `nosniff` nothing else is read as a PDF.
    let policy = if inline_pdf {
        "default-src 'none'; object-src 'self'; frame-ancestors 'self'"
    } else {
        "default-src 'none'; sandbox"
    };
    hm.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(policy),
    );
    hm.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if !node.sha1.is_empty()
        && let Ok(v) = HeaderValue::from_str(&format!("SHA1:{}", node.sha1))
    {
        hm.insert(HeaderName::from_static("oc-checksum"), v);
    }
    Ok(resp)
}

/// `?inline=1`: the file is to be shown in the page (a PDF preview), not saved.
fn wants_inline(query: Option<&str>) -> bool {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .any(|pair| pair == "inline=1" || pair == "inline=true")
}

/// `Content-Disposition` of a download, as oCIS sends it (CLIENT_PROTOCOL.md §6): the exact
/// name in RFC 8187 `filename*`, and an ASCII-only `filename` for agents that ignore it.
pub(crate) fn content_disposition(name: &str) -> String {
    let mut exact = String::new();
    dav::encode_segment(name, &mut exact);
    let fallback: String = name
        .chars()
        .map(|c| {
            if c == ' ' || (c.is_ascii_graphic() && c != '"' && c != '\\') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("attachment; filename*=UTF-8''{exact}; filename=\"{fallback}\"")
}

pub(crate) fn internal(e: &dyn std::fmt::Display) -> Response {
    tracing::error!(error = %e, "internal error");
    dav_error(StatusCode::INTERNAL_SERVER_ERROR, "internal error", None)
}

/// `OC-Checksum: SHA1:hex` (also `MD5:`, `ADLER32:`/`Adler32:`, in any case) → `sha1:hex`
/// for the provider, which verifies it; empty when absent or naming no algorithm we know.
pub(crate) fn checksum_header(h: &HeaderMap) -> Result<String, Response> {
    let Some(v) = h.get("oc-checksum") else {
        return Ok(String::new());
    };
    let v = v
        .to_str()
        .map_err(|_| dav_error(StatusCode::BAD_REQUEST, "OC-Checksum is not ASCII", None))?;
    Ok(crate::headers::checksum_value(v))
}

pub(super) async fn put(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    let h = req.headers();
    if h.contains_key("oc-chunked") {
        // ownCloud's chunking v1 (`NAME-chunking-ID-COUNT-INDEX` with `OC-Chunked`) is refused,
        // never stored as a file of the chunk's name (issue 25; see the README).
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "chunking v1 (OC-Chunked) is not supported: upload in chunks to \
             /remote.php/dav/uploads/ (chunking v2, capability dav.chunking 1.0)",
            None,
        ));
    }
    if h.contains_key(header::CONTENT_RANGE) {
        // RFC 9110 §14.5: a partial PUT must not be taken for a whole one.
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "Content-Range on PUT is not supported",
            None,
        ));
    }
    let if_match = crate::headers::if_match(h);
    let if_none_match_any = h
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == b"*");
    let length = h
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(-1);
    let mtime = crate::headers::mtime_ns(h);
    let checksum = checksum_header(h)?;
    let upload = InitiateUploadRequest {
        r#ref: Some(loc.reference()),
        if_match: if if_match == "*" {
            String::new()
        } else {
            if_match
        },
        if_none_match_any,
        mtime_ns: mtime.unwrap_or(0),
        length,
        checksum,
        lock_tokens: loc.tokens.clone(),
        resumable: false,
        upload_folder: String::new(),
    };
    let refused = |s: tonic::Status| match ErrorKind::of(&s) {
        ErrorKind::PermissionDenied if loc.path.is_root() => dav_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "cannot PUT onto a collection",
            None,
        ),
        _ => grpc_error(s),
    };
    // A small body of a declared length rides in the one call that checks and writes it:
    // no grant, no second request through the data path.
    if (0..=arca_proto::SMALL_BODY as i64).contains(&length) {
        let body = axum::body::to_bytes(req.into_body(), arca_proto::SMALL_BODY)
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "reading a small PUT's body");
                dav_error(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read whole",
                    None,
                )
            })?;
        let put = dav
            .storage()
            .put(PutRequest {
                upload: Some(upload),
                body,
            })
            .await
            .map_err(refused)?
            .into_inner();
        let node = put.node.unwrap_or_default();
        return Ok(answer_written(&node, put.replaced, mtime.is_some()));
    }
    let transfer = dav
        .storage()
        .initiate_upload(upload)
        .await
        .map_err(refused)?
        .into_inner();
    let existed = transfer.node.is_some();
    let mut data_req = http::Request::put(data_uri(&transfer.token));
    if length >= 0 {
        data_req = data_req.header(header::CONTENT_LENGTH, length);
    }
    let data_req = data_req.body(req.into_body()).map_err(|e| internal(&e))?;
    let resp = dav.transfer(&transfer.provider, data_req).await?;
    written(resp, existed, mtime.is_some()).await
}

/// The answer to a write through a provider's data path (a PUT, an assembled upload): the
/// provider's refusal as the client's, or 201 (204 when a file was `replaced`) with the
/// committed node's headers, and `X-OC-Mtime: accepted` when the client set the mtime.
pub(crate) async fn written(
    resp: http::Response<Body>,
    replaced: bool,
    mtime_set: bool,
) -> Result<Response, Response> {
    if !resp.status().is_success() {
        return Err(provider_error(resp).await);
    }
    let node = crate::headers::committed_node(resp.headers()).unwrap_or_default();
    Ok(answer_written(&node, replaced, mtime_set))
}

/// 201 (204 when a file was `replaced`) with the committed node's headers.
fn answer_written(node: &Node, replaced: bool, mtime_set: bool) -> Response {
    let mut out = if replaced {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    }
    .into_response();
    let hm = out.headers_mut();
    node_headers(hm, node);
    hm.insert(
        HeaderName::from_static("oc-perm"),
        HeaderValue::from_static("SRDNVWZP"),
    );
    if mtime_set {
        hm.insert(
            HeaderName::from_static("x-oc-mtime"),
            HeaderValue::from_static("accepted"),
        );
    }
    out
}

/// A provider's failure answer as a WebDAV error with its one-line reason.
pub(crate) async fn provider_error(resp: http::Response<Body>) -> Response {
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    dav_error(status, String::from_utf8_lossy(&body).trim(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_disposition_keeps_the_exact_name_and_an_ascii_fallback() {
        assert_eq!(
            content_disposition("remote-new.txt"),
            "attachment; filename*=UTF-8''remote-new.txt; filename=\"remote-new.txt\""
        );
        let v = content_disposition("nötë #1 \"q\".md");
        assert_eq!(
            v,
            "attachment; filename*=UTF-8''n%C3%B6t%C3%AB%20%231%20%22q%22.md; \
             filename=\"n_t_ #1 _q_.md\""
        );
        assert!(HeaderValue::from_str(&v).is_ok());
    }
}
