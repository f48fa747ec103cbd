//! Cross-origin resource sharing for browser clients (ownCloud web served from another origin),
//! per the Fetch standard's CORS protocol.
//!
//! Only configured origins get CORS headers; with none configured the proxy sends none at all,
//! and an `OPTIONS` is just a WebDAV `OPTIONS`. A preflight is an `OPTIONS` carrying both
//! `Origin` and `Access-Control-Request-Method`: browsers send it without credentials, so it is
//! answered here, before authentication. A plain WebDAV `OPTIONS` (no
//! `Access-Control-Request-Method`) is not a preflight and goes on to be authenticated.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};

/// Methods a browser may use: HTTP, WebDAV (RFC 4918, RFC 3253 REPORT, SEARCH) and TUS's PATCH.
const ALLOW_METHODS: &str = "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, PROPFIND, PROPPATCH, \
                             MKCOL, COPY, MOVE, LOCK, UNLOCK, REPORT, SEARCH";

/// Request headers ownCloud web and the TUS client library send besides the CORS-safelisted
/// ones.
const ALLOW_HEADERS: &str = "Authorization, Content-Type, Depth, Destination, Overwrite, If, \
                             If-Match, If-None-Match, If-Modified-Since, Lock-Token, Timeout, \
                             Range, OC-Checksum, OC-Total-Length, X-OC-Mtime, Tus-Resumable, \
                             Upload-Length, Upload-Offset, Upload-Metadata, Upload-Concat, \
                             Upload-Defer-Length, Upload-Checksum, X-HTTP-Method-Override, \
                             X-Request-ID, X-Requested-With, OCS-APIREQUEST, Accept-Language, \
                             Cache-Control, Initiator-ID";

/// Response headers a cross-origin script may read (beyond the safelisted ones): what sync and
/// upload code needs to follow up without another round trip.
const EXPOSE_HEADERS: &str = "ETag, OC-ETag, OC-FileId, OC-Perm, OC-Checksum, X-OC-Mtime, \
                              Location, Content-Range, Content-Disposition, Accept-Ranges, DAV, \
                              Lock-Token, Upload-Offset, Upload-Length, Upload-Expires, \
                              Upload-Metadata, Tus-Resumable, Tus-Version, Tus-Extension, \
                              Tus-Max-Size, Tus-Checksum-Algorithm, X-Request-ID, \
                              WWW-Authenticate, Retry-After";

/// How long a browser may reuse a preflight answer, in seconds (browsers cap it: Chromium at
/// 2 hours, Firefox at 24).
const MAX_AGE: &str = "7200";

#[derive(Clone, Default)]
pub(crate) struct Cors {
    origins: Arc<HashSet<String>>,
}

impl Cors {
    /// `origins` as the config normalized them: lowercase `scheme://host[:port]`.
    pub(crate) fn new(origins: &[String]) -> Self {
        Self {
            origins: Arc::new(origins.iter().cloned().collect()),
        }
    }

    /// The request's `Origin` if CORS is on and it is allowed.
    pub(crate) fn allowed_origin(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        if self.origins.is_empty() {
            return None;
        }
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?.to_ascii_lowercase();
        self.origins.contains(&text).then(|| origin.clone())
    }

    /// The answer to a preflight: 204 with the grants for an allowed origin, 403 without any
    /// CORS header for another. `None` if the request is not a preflight or CORS is off.
    pub(crate) fn preflight(&self, req: &Request) -> Option<Response> {
        let headers = req.headers();
        if self.origins.is_empty()
            || req.method() != Method::OPTIONS
            || !headers.contains_key(header::ORIGIN)
            || !headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return None;
        }
        let Some(origin) = self.allowed_origin(headers) else {
            return Some((StatusCode::FORBIDDEN, "origin not allowed\n").into_response());
        };
        let mut response = StatusCode::NO_CONTENT.into_response();
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(MAX_AGE),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        vary_origin(h);
        Some(response)
    }

    /// Marks an actual response to an allowed origin as readable by it. Every response gets it,
    /// errors included, so a browser app can tell a 401 from a network failure.
    pub(crate) fn decorate(&self, origin: HeaderValue, headers: &mut HeaderMap) {
        if headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN) {
            return;
        }
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSE_HEADERS),
        );
        vary_origin(headers);
    }
}

/// The answer depends on `Origin`: caches must not hand one origin's answer to another.
fn vary_origin(headers: &mut HeaderMap) {
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    fn req(method: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().method(method).uri("/remote.php/webdav/");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn preflights_only_for_configured_origins() {
        let cors = Cors::new(&["https://web.example.com".to_owned()]);
        let pre = req(
            "OPTIONS",
            &[
                ("origin", "https://Web.example.com"),
                ("access-control-request-method", "PROPFIND"),
            ],
        );
        let r = cors.preflight(&pre).unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        assert_eq!(
            r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://Web.example.com"
        );
        let other = req(
            "OPTIONS",
            &[
                ("origin", "https://evil.example.com"),
                ("access-control-request-method", "GET"),
            ],
        );
        let r = cors.preflight(&other).unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert!(
            r.headers()
                .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
                .is_none()
        );
        // WebDAV OPTIONS from a page: not a preflight.
        let dav = req("OPTIONS", &[("origin", "https://web.example.com")]);
        assert!(cors.preflight(&dav).is_none());
        // CORS off: nothing is a preflight.
        assert!(Cors::new(&[]).preflight(&pre).is_none());
        assert!(Cors::new(&[]).allowed_origin(pre.headers()).is_none());
    }
}
