//! Previews: `?preview=1` on a GET or HEAD of any file URL (`/remote.php/webdav/…`,
//! `/remote.php/dav/files/USER/…`, `/dav/spaces/ID/…`, a public link's `public-files` and
//! `/s/TOKEN`) answers an image of the file instead of its bytes, as oCIS and ownCloud Web
//! speak it (shared/protocol/NEXT_FEATURES.md "Previews"):
//!
//! - `x`, `y`: the box in pixels, 32 each when absent; not a whole number, or below 1, is
//!   400 (with oCIS's wording, kept for ownCloud 10 clients);
//! - `a=1`: keep the aspect ratio; `processor=fit|resize|fill|thumbnail` names the fitting
//!   (it wins over `a`); `c` (the etag the client has) and `scalingup` change nothing here:
//!   previews are cached by the file's current etag and never enlarge;
//! - answers: 200 with the image, 404 with one line when the file has no preview (its type,
//!   its size, a folder, or a caller who may not read it), 425 with `Retry-After` while a
//!   big source is still being drawn (ownCloud Web retries on it).
//!
//! The thumbnails service (through the gateway) makes the image; here is only the HTTP.

use arca_proto::ErrorKind;
use arca_proto::v1::thumbnails_client::ThumbnailsClient;
use arca_proto::v1::{GetThumbnailRequest, Processor, Ref};
use arca_transport::Channel;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::webdav::{dav_error, grpc_error};

/// oCIS's box when `x` or `y` is absent.
const DEFAULT_SIZE: u32 = 32;

/// What a preview request asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Query {
    width: u32,
    height: u32,
    processor: Processor,
    keep_aspect: bool,
}

/// The preview a URL's query asks for: `None` without `preview=1` (a plain download), the
/// 400 answer's message when `x` or `y` is bad.
pub(crate) fn wanted(query: Option<&str>) -> Option<Result<Query, &'static str>> {
    let query = query?;
    let value = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    };
    if value("preview") != Some("1") {
        return None;
    }
    // oCIS's words (services/webdav requests/thumbnail.go), which ownCloud 10 clients know.
    let size = |name: &str, what: &'static str| match value(name) {
        None | Some("") => Ok(DEFAULT_SIZE),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= 1 => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
            _ => Err(what),
        },
    };
    let width = match size("x", "Cannot set width of 0 or smaller!") {
        Ok(w) => w,
        Err(e) => return Some(Err(e)),
    };
    let height = match size("y", "Cannot set height of 0 or smaller!") {
        Ok(h) => h,
        Err(e) => return Some(Err(e)),
    };
    let processor = match value("processor").map(str::to_ascii_lowercase).as_deref() {
        Some("fit") => Processor::Fit,
        Some("resize") => Processor::Resize,
        Some("fill") => Processor::Fill,
        Some("thumbnail") => Processor::Thumbnail,
        // An unknown one is oCIS's default, as there.
        _ => Processor::Unspecified,
    };
    Some(Ok(Query {
        width,
        height,
        processor,
        keep_aspect: value("a") == Some("1"),
    }))
}

/// The answer to a preview request for the file `r`, as the caller (the identity the call
/// runs under: a user's, or a public link's).
pub(crate) async fn serve(
    gateway: &Channel,
    r: Ref,
    query: Result<Query, &'static str>,
    with_body: bool,
) -> Response {
    let query = match query {
        Ok(q) => q,
        Err(message) => return dav_error(StatusCode::BAD_REQUEST, message, None),
    };
    let answer = ThumbnailsClient::new(gateway.clone())
        .max_decoding_message_size(arca_proto::MAX_STORAGE_ANSWER)
        .get_thumbnail(GetThumbnailRequest {
            r#ref: Some(r),
            width: query.width,
            height: query.height,
            processor: query.processor as i32,
            keep_aspect: query.keep_aspect,
            source: None,
        })
        .await;
    let thumb = match answer {
        Ok(t) => t.into_inner(),
        Err(s) => {
            return match ErrorKind::of(&s) {
                // Nothing to show, whyever: a folder (the provider's Conflict), a file the
                // caller may not read (which must not tell it exists), its type, its size.
                ErrorKind::NotFound | ErrorKind::PermissionDenied | ErrorKind::Conflict => {
                    let message = match ErrorKind::of(&s) {
                        ErrorKind::NotFound => s.message(),
                        _ => "Resource not found",
                    };
                    dav_error(StatusCode::NOT_FOUND, message, None)
                }
                _ => grpc_error(s),
            };
        }
    };
    if thumb.retry_after > 0 {
        // RFC 8470 §5.2's 425 Too Early, as oCIS answers while a preview is made; ownCloud
        // Web retries after Retry-After.
        let mut resp = dav_error(StatusCode::TOO_EARLY, "the preview is being made", None);
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(thumb.retry_after));
        return resp;
    }
    let length = thumb.data.len();
    let mut resp = if with_body {
        Response::new(Body::from(thumb.data))
    } else {
        StatusCode::OK.into_response()
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&thumb.mime_type)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The same URL gives another image once the file changes: clients key their caches by
    // the etag they put in `c`, so the browser keeps it only for this user, briefly.
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=60"),
    );
    resp
}

/// `files.thumbnail` of the OCS capabilities, in the shape oCIS sends and ownCloud Web reads
/// (its preview service asks `version` and `supportedMimeTypes`).
pub(crate) fn capability() -> serde_json::Value {
    serde_json::json!({
        "enabled": true,
        "version": "v0.1",
        "supportedMimeTypes": [
            "image/png",
            "image/jpeg",
            "image/gif",
            "image/webp",
            "text/plain",
            "text/markdown",
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_without_preview_are_plain_downloads() {
        assert_eq!(wanted(None), None);
        assert_eq!(wanted(Some("x=32&y=32")), None);
        assert_eq!(wanted(Some("preview=0&x=32")), None);
    }

    #[test]
    fn sizes_default_to_32_and_must_be_whole_numbers_above_0() {
        let q = wanted(Some("preview=1")).and_then(Result::ok);
        assert_eq!(
            q,
            Some(Query {
                width: 32,
                height: 32,
                processor: Processor::Unspecified,
                keep_aspect: false,
            })
        );
        let q = wanted(Some(
            "scalingup=0&preview=1&a=1&c=abc&x=640&y=480&processor=FILL",
        ))
        .and_then(Result::ok);
        assert_eq!(
            q,
            Some(Query {
                width: 640,
                height: 480,
                processor: Processor::Fill,
                keep_aspect: true,
            })
        );
        for bad in ["x=0", "y=-3", "x=abc", "y=1.5"] {
            let q = wanted(Some(&format!("preview=1&{bad}")));
            assert!(matches!(q, Some(Err(_))), "{bad}: {q:?}");
        }
        let huge = wanted(Some("preview=1&x=99999999999")).and_then(Result::ok);
        assert_eq!(huge.map(|q| q.width), Some(u32::MAX));
    }
}
