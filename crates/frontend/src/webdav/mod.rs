//! WebDAV handlers: HTTP in, gateway gRPC and the providers' data path out.
//!
//! Three roots reach the same trees: `/remote.php/webdav/PATH` and
//! `/remote.php/dav/files/USER/PATH` (the caller's personal space; another user's name is
//! "not found", never "forbidden") and `/dav/spaces/SPACE-ID/PATH`. Hrefs in answers echo the
//! root the client used (CLIENT_PROTOCOL.md §0).

// Handlers return their HTTP error answer as the `Err` side and hand it straight to axum; a
// `Response` is large, but it is built once per failed request, never moved around in loops.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use arca_proto::ErrorKind;
use arca_proto::v1::storage_client::StorageClient;
use arca_proto::v1::*;
use arca_runtime::{Caller, Identity, Providers};
use arca_transport::Channel;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt as _;

use crate::failure::{Failure, transfer_failure};

pub mod dav;
pub(crate) mod jail;
mod locks;
mod propfind;
mod transfer;
mod tree;
mod undo;

use self::dav::{
    Depth, DestinationError, LiveProp, Multistatus, Precondition, PropName, PropPatchOp, Propfind,
};
pub(crate) use self::locks::check_if;
use self::locks::{active_lock, lock, unlock};
use self::propfind::{propfind, propfind_virtual, proppatch};
pub(crate) use self::propfind::{propfind_answer, propfind_query};
pub(crate) use self::transfer::{
    checksum_header, content_disposition, content_type, data_uri, internal, node_headers,
    provider_error, written,
};
use self::transfer::{get, put};
pub(crate) use self::tree::destination;
use self::tree::{copy_or_move, delete, mkcol};
/// XML request bodies larger than this are refused with 413 before parsing.
const MAX_XML_BODY: usize = 1 << 20;
const ALLOW: &str =
    "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, PROPFIND, PROPPATCH, COPY, MOVE, LOCK, UNLOCK, REPORT";

#[derive(Clone)]
pub(crate) struct Dav {
    gateway: Channel,
    /// The providers' data paths (downloads, uploads).
    data: Providers,
}

impl Dav {
    pub(crate) fn new(gateway: Channel, data: Providers) -> Self {
        Self { gateway, data }
    }

    /// The gateway, for the share jail and public links.
    pub(crate) fn gateway(&self) -> &Channel {
        &self.gateway
    }

    pub(crate) fn storage(&self) -> StorageClient<Channel> {
        arca_proto::storage_client(self.gateway.clone())
    }

    /// One request on a provider's data path; see [`transfer_failure`] for its failures.
    pub(crate) async fn transfer(
        &self,
        provider: &str,
        req: http::Request<Body>,
    ) -> Result<http::Response<Body>, Response> {
        self.data(provider).oneshot(req).await.map_err(|e| {
            let (status, message) = transfer_failure(&e);
            dav_error(status, message, None)
        })
    }

    fn data(&self, provider: &str) -> Channel {
        self.data.get(provider).clone()
    }
}

pub(crate) fn routes(dav: Dav) -> axum::Router {
    use axum::routing::any;
    let state = Arc::new(dav);
    axum::Router::new()
        .route("/remote.php/webdav", any(handle))
        .route("/remote.php/webdav/", any(handle))
        .route("/remote.php/webdav/{*rest}", any(handle))
        .route("/remote.php/dav/files/{user}", any(handle))
        .route("/remote.php/dav/files/{user}/", any(handle))
        .route("/remote.php/dav/files/{user}/{*rest}", any(handle))
        .route("/dav/spaces/{space}", any(handle))
        .route("/dav/spaces/{space}/", any(handle))
        .route("/dav/spaces/{space}/{*rest}", any(handle))
        .with_state(state.clone())
        // The trash bin and versions (`/remote.php/dav/trash-bin/…`, `…/meta/…`).
        .merge(undo::routes(state))
}

/// Where a request points: the href prefix it used, the space, and the path inside.
pub(crate) struct Location {
    /// Percent-encoded, no trailing slash: `/remote.php/webdav`, `/dav/spaces/ID`.
    pub(crate) prefix: String,
    pub(crate) space_id: String,
    pub(crate) path: dav::DavPath,
    /// Lock tokens the client submitted in its `If` header (RFC 4918 §10.4).
    pub(crate) tokens: Vec<String>,
    /// The path in the space that `prefix` stands for: empty, except for a share mounted in
    /// the jail or a public link, whose prefix names the shared node (`jail`, `public`).
    pub(crate) base: String,
}

impl Location {
    pub(crate) fn reference(&self) -> Ref {
        Ref {
            space_id: self.space_id.clone(),
            path: self.path.as_str().to_owned(),
            node_id: String::new(),
        }
    }

    pub(crate) fn href(&self, path: &str, is_dir: bool) -> String {
        let mut out = self.prefix.clone();
        let path = if self.base.is_empty() {
            path
        } else {
            path.strip_prefix(self.base.as_str()).unwrap_or(path)
        };
        dav::encode_path(path, &mut out);
        if is_dir && !out.ends_with('/') {
            out.push('/');
        }
        out
    }
}

/// One error answer: a status and a one-line message in the Sabre-shaped body.
pub(crate) fn dav_error(
    status: StatusCode,
    message: &str,
    condition: Option<&Precondition>,
) -> Response {
    let exception = match status {
        StatusCode::NOT_FOUND => "Sabre\\DAV\\Exception\\NotFound",
        StatusCode::METHOD_NOT_ALLOWED => "Sabre\\DAV\\Exception\\MethodNotAllowed",
        StatusCode::CONFLICT => "Sabre\\DAV\\Exception\\Conflict",
        StatusCode::PRECONDITION_FAILED => "Sabre\\DAV\\Exception\\PreconditionFailed",
        StatusCode::FORBIDDEN => "Sabre\\DAV\\Exception\\Forbidden",
        StatusCode::LOCKED => "Sabre\\DAV\\Exception\\Locked",
        StatusCode::INSUFFICIENT_STORAGE => "Sabre\\DAV\\Exception\\InsufficientStorage",
        StatusCode::BAD_REQUEST => "Sabre\\DAV\\Exception\\BadRequest",
        _ => "Sabre\\DAV\\Exception",
    };
    let mut resp = xml_answer(status, dav::error_body(exception, message, condition));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(arca_transport::UNAVAILABLE_RETRY_AFTER_SECS),
        );
    }
    resp
}

/// An XML answer (a multistatus, a lock discovery, an error body) with `status`.
pub(crate) fn xml_answer(status: StatusCode, body: String) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(dav::multistatus::MULTISTATUS_CONTENT_TYPE),
        )],
        body,
    )
        .into_response()
}

/// A gRPC failure as the HTTP answer its kind maps to (the one mapping, [`Failure`]).
pub(crate) fn grpc_error(status: tonic::Status) -> Response {
    let failure = Failure::of(&status);
    dav_error(failure.status, &failure.message, None)
}

async fn handle(State(dav): State<Arc<Dav>>, Caller(who): Caller, req: Request) -> Response {
    let loc = match locate(req.uri().path(), &who) {
        Ok(l) => l,
        Err(resp) => return resp,
    };
    // Shares mounted in the caller's `Shares/` (and the Shares space) become paths in their
    // owners' spaces; the folder of mounts itself is virtual.
    let mut loc = match jail::enter(&dav.gateway, loc).await {
        Ok(jail::Entered::Real(l)) => l,
        Ok(jail::Entered::Root(l)) => return jail_root(&dav, &l, req).await,
        Err(resp) => return resp,
    };
    if let Some(value) = req.headers().get("if") {
        match check_if(&dav, &who, req.uri().path(), value).await {
            Ok(tokens) => loc.tokens = tokens,
            Err(resp) => return resp,
        }
    }
    serve(&dav, loc, req).await
}

/// Serves one request at a location already resolved: WebDAV's own roots above, and public
/// links (`public`), which resolve theirs from the link.
pub(crate) async fn serve(dav: &Dav, loc: Location, req: Request) -> Response {
    let method = req.method().clone();
    let result = match method.as_str() {
        // TUS discovery and creation (crate::tus) share the WebDAV roots.
        "OPTIONS" => Ok(crate::tus::advertise(&dav.gateway, &loc.space_id, options()).await),
        "POST" if req.headers().contains_key("tus-resumable") => {
            let collection = crate::tus::Collection {
                space_id: &loc.space_id,
                path: loc.path.as_str(),
                lock_tokens: &loc.tokens,
            };
            // Upload URLs (`/data/{token}`) are the home provider's: it signs their tokens.
            let data = dav.data(arca_proto::ids::HOME_PROVIDER);
            Ok(crate::tus::create(&dav.gateway, &data, collection, req).await)
        }
        "PROPFIND" => propfind(dav, &loc, req).await,
        "PROPPATCH" => proppatch(dav, &loc, req).await,
        "MKCOL" => mkcol(dav, &loc, req).await,
        "GET" => get(dav, &loc, req, true).await,
        "HEAD" => get(dav, &loc, req, false).await,
        "PUT" => put(dav, &loc, req).await,
        "DELETE" => delete(dav, &loc, req).await,
        "COPY" => copy_or_move(dav, &loc, req, false).await,
        "MOVE" => copy_or_move(dav, &loc, req, true).await,
        "LOCK" => lock(dav, &loc, req).await,
        "UNLOCK" => unlock(dav, &loc, req).await,
        // Searches (crate::search): every root searches everything the caller may read.
        "REPORT" => Ok(crate::search::report(&dav.gateway, req).await),
        _ => Err(dav_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not supported here",
            None,
        )),
    };
    result.unwrap_or_else(|r| r)
}

/// The share jail's virtual folder (`Shares/`, or the Shares space's root): it lists the
/// mounts and takes no writes.
async fn jail_root(dav: &Dav, loc: &Location, req: Request) -> Response {
    let result = match req.method().as_str() {
        "OPTIONS" => Ok(options()),
        "PROPFIND" => {
            let path = jail::root_path(loc);
            match jail::mounts(&dav.gateway, path).await {
                Ok(mounts) => {
                    let folder = jail::folder(path, &mounts);
                    propfind_virtual(dav, loc, req, folder, mounts).await
                }
                Err(resp) => Err(resp),
            }
        }
        _ => Err(dav_error(
            StatusCode::FORBIDDEN,
            "the Shares folder holds only what others share with you",
            None,
        )),
    };
    result.unwrap_or_else(|r| r)
}

pub(crate) fn locate(raw: &str, who: &Identity) -> Result<Location, Response> {
    let bad = |e: dav::PathError| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None);
    let not_found = || dav_error(StatusCode::NOT_FOUND, "Resource not found", None);
    let (prefix, space_id, rest) = if let Some(rest) = raw.strip_prefix("/remote.php/webdav") {
        ("/remote.php/webdav".to_owned(), String::new(), rest)
    } else if let Some(after) = raw.strip_prefix("/remote.php/dav/files/") {
        let (user, rest) = after.split_at(after.find('/').unwrap_or(after.len()));
        let user_name = dav::paths::decode_segment(user).map_err(bad)?;
        // Another user's tree does not exist for this caller.
        if user_name != who.username {
            return Err(not_found());
        }
        (format!("/remote.php/dav/files/{user}"), String::new(), rest)
    } else if let Some(after) = raw.strip_prefix("/dav/spaces/") {
        let (space, rest) = after.split_at(after.find('/').unwrap_or(after.len()));
        let space_id = dav::paths::decode_segment(space).map_err(bad)?;
        (format!("/dav/spaces/{space}"), space_id, rest)
    } else {
        return Err(not_found());
    };
    let path = dav::decode_path(if rest.is_empty() { "/" } else { rest }).map_err(bad)?;
    Ok(Location {
        prefix,
        space_id,
        path,
        tokens: Vec::new(),
        base: String::new(),
    })
}

fn options() -> Response {
    let mut resp = StatusCode::OK.into_response();
    let h = resp.headers_mut();
    h.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
    h.insert(
        HeaderName::from_static("dav"),
        HeaderValue::from_static("1, 2"),
    );
    h.insert(
        HeaderName::from_static("ms-author-via"),
        HeaderValue::from_static("DAV"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    resp
}

/// Reads a small XML body, refusing oversized ones with 413 before reading them whole.
pub(crate) async fn xml_body(req: Request) -> Result<Bytes, Response> {
    let too_large = || {
        dav_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large",
            None,
        )
    };
    if let Some(len) = req.headers().get(header::CONTENT_LENGTH)
        && let Some(n) = len.to_str().ok().and_then(|v| v.parse::<usize>().ok())
        && n > MAX_XML_BODY
    {
        return Err(too_large());
    }
    match http_body_util::Limited::new(req.into_body(), MAX_XML_BODY)
        .collect()
        .await
    {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(too_large())
        }
        Err(e) => Err(dav_error(
            StatusCode::BAD_REQUEST,
            &format!("reading the body: {e}"),
            None,
        )),
    }
}

fn depth(headers: &HeaderMap, default: Depth) -> Result<Depth, Response> {
    match headers.get("depth") {
        None => Ok(default),
        Some(v) => Depth::parse(v.as_bytes())
            .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None)),
    }
}
