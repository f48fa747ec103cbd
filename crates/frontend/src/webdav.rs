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
use arca_runtime::{Caller, Identity};
use arca_transport::Channel;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use prost::Message as _;
use tower::ServiceExt as _;

use crate::dav::{
    self, Depth, DestinationError, LiveProp, Multistatus, Precondition, PropName, PropPatchOp,
    Propfind,
};

/// XML request bodies larger than this are refused with 413 before parsing.
const MAX_XML_BODY: usize = 1 << 20;
/// How the committed node comes back from a provider's data path.
const NODE_HEADER: &str = "x-arca-node";

const ALLOW: &str =
    "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, PROPFIND, PROPPATCH, COPY, MOVE, LOCK, UNLOCK";

#[derive(Clone)]
pub(crate) struct Dav {
    gateway: Channel,
    users_data: Channel,
    system_data: Channel,
}

impl Dav {
    pub(crate) fn new(gateway: Channel, users_data: Channel, system_data: Channel) -> Self {
        Self {
            gateway,
            users_data,
            system_data,
        }
    }

    /// The gateway, for the share jail and public links.
    pub(crate) fn gateway(&self) -> &Channel {
        &self.gateway
    }

    pub(crate) fn storage(&self) -> StorageClient<Channel> {
        StorageClient::new(self.gateway.clone())
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
        if provider == "storage-system" {
            self.system_data.clone()
        } else {
            self.users_data.clone()
        }
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
        .with_state(state)
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
    let body = dav::error_body(exception, message, condition);
    let mut resp = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml; charset=utf-8"),
        )],
        body,
    )
        .into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(arca_transport::UNAVAILABLE_RETRY_AFTER_SECS),
        );
    }
    resp
}

/// A gRPC failure as the HTTP answer its kind maps to (one mapping, in arca-proto).
pub(crate) fn grpc_error(status: tonic::Status) -> Response {
    let kind = ErrorKind::of(&status);
    match kind {
        ErrorKind::Internal => tracing::error!(error = %status.message(), "storage call failed"),
        // Which instance could not be reached is for the log, not for the client.
        ErrorKind::Unavailable => {
            tracing::warn!(error = %status.message(), "storage call failed");
            return dav_error(kind.http_status(), UNAVAILABLE, None);
        }
        _ => {}
    }
    dav_error(kind.http_status(), status.message(), None)
}

/// What a client hears when no instance could take its request (with `Retry-After`).
const UNAVAILABLE: &str = "storage temporarily unavailable, retry later";

/// A failed call on a provider's data path as the client's answer: its own upload broke off
/// (it hung up, or sent less than its Content-Length) is 400; anything else is 503 with
/// `Retry-After` — the request could not go again (too large to keep, or not provably
/// unprocessed) and may succeed later; never 502, which clients take for a broken server.
pub(crate) fn transfer_failure(e: &arca_transport::BoxError) -> (StatusCode, &'static str) {
    match Channel::failure(e) {
        arca_transport::CallFailure::CallerBody(why) => {
            tracing::debug!(error = %why, "the client's upload broke off");
            (StatusCode::BAD_REQUEST, "request body incomplete")
        }
        arca_transport::CallFailure::Unavailable(why) => {
            tracing::warn!(error = %why, "storage data path failed");
            (StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE)
        }
    }
}

async fn handle(State(dav): State<Arc<Dav>>, Caller(who): Caller, req: Request) -> Response {
    let loc = match locate(req.uri().path(), &who) {
        Ok(l) => l,
        Err(resp) => return resp,
    };
    // Shares mounted in the caller's `Shares/` (and the Shares space) become paths in their
    // owners' spaces; the folder of mounts itself is virtual.
    let mut loc = match crate::jail::enter(&dav.gateway, loc).await {
        Ok(crate::jail::Entered::Real(l)) => l,
        Ok(crate::jail::Entered::Root(l)) => return jail_root(&dav, &l, req).await,
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
            Ok(crate::tus::create(&dav.gateway, &dav.users_data, collection, req).await)
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
            let path = crate::jail::root_path(loc);
            match crate::jail::mounts(&dav.gateway, path).await {
                Ok(mounts) => {
                    let folder = crate::jail::folder(path, &mounts);
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

/// Evaluates an `If` header (RFC 4918 §10.4): 412 when no list holds. Returns the lock tokens
/// it submits, which the provider checks against the locks an operation touches.
pub(crate) async fn check_if(
    dav: &Dav,
    who: &Identity,
    raw_path: &str,
    value: &HeaderValue,
) -> Result<Vec<String>, Response> {
    let header = dav::IfHeader::parse(value.as_bytes())
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    let request_path = dav::decode_path(raw_path)
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?
        .as_str()
        .to_owned();
    let mut paths = vec![request_path.clone()];
    for list in &header.lists {
        if let Some(tag) = &list.resource {
            let p = dav::if_header::tag_path(tag);
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
    }
    let mut states = Vec::with_capacity(paths.len());
    for p in paths {
        let mut encoded = String::new();
        dav::encode_path(&p, &mut encoded);
        // A tag naming something outside our trees matches nothing.
        let state = match locate(&encoded, who) {
            Ok(loc) => match dav
                .storage()
                .get_locks(GetLocksRequest {
                    r#ref: Some(loc.reference()),
                })
                .await
            {
                Ok(r) => {
                    let r = r.into_inner();
                    let etag = (!r.etag.is_empty()).then_some(r.etag);
                    (etag, r.locks.into_iter().map(|l| l.token).collect())
                }
                Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => (None, Vec::new()),
                Err(s) => return Err(grpc_error(s)),
            },
            Err(_) => (None, Vec::new()),
        };
        states.push((p, state));
    }
    let holds = header.evaluate(&request_path, |p| {
        states
            .iter()
            .find(|(path, _)| path == p)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    });
    if !holds {
        return Err(dav_error(
            StatusCode::PRECONDITION_FAILED,
            "the If header's conditions do not hold",
            None,
        ));
    }
    Ok(header
        .submitted_tokens()
        .filter(|t| *t != dav::if_header::NO_LOCK)
        .map(str::to_owned)
        .collect())
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
async fn xml_body(req: Request) -> Result<Bytes, Response> {
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

/// A PROPFIND's depth (0 or 1) and what it asks for.
pub(crate) async fn propfind_query(req: Request) -> Result<(Depth, Propfind), Response> {
    let depth = depth(req.headers(), Depth::Infinity)?;
    if depth == Depth::Infinity {
        return Err(dav_error(
            StatusCode::FORBIDDEN,
            "PROPFIND with Depth: infinity is not supported",
            Some(&Precondition::PropfindFiniteDepth),
        ));
    }
    let body = xml_body(req).await?;
    let query = dav::parse_propfind(&body)
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    Ok((depth, query))
}

/// A PROPFIND answered from nodes another module made up (the share jail's folder).
async fn propfind_virtual(
    dav: &Dav,
    loc: &Location,
    req: Request,
    folder: Node,
    members: Vec<Node>,
) -> Result<Response, Response> {
    let (depth, query) = propfind_query(req).await?;
    let members = if depth == Depth::Zero {
        Vec::new()
    } else {
        members
    };
    propfind_answer(dav, loc, &query, folder, members, None).await
}

async fn propfind(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    let (depth, query) = propfind_query(req).await?;
    let with_props =
        !matches!(&query, Propfind::Prop(names) if names.iter().all(|n| n.live().is_some()));
    let with_locks = matches!(&query, Propfind::Prop(names) if names.iter().any(|n| n.live() == Some(LiveProp::LockDiscovery)));
    let mut client = dav.storage();
    let (node, children) = if depth == Depth::Zero {
        let node = client
            .stat(StatRequest {
                r#ref: Some(loc.reference()),
                with_props,
                with_locks,
            })
            .await
            .map_err(grpc_error)?
            .into_inner();
        (node, Vec::new())
    } else {
        let list = client
            .list(ListRequest {
                r#ref: Some(loc.reference()),
                with_props,
                with_locks,
                without_ids: !asks_for(&query, |p| {
                    matches!(
                        p,
                        LiveProp::OcId
                            | LiveProp::OcFileId
                            | LiveProp::OcSpaceId
                            | LiveProp::OcFileParent
                            | LiveProp::OcPrivateLink
                            // Found by node id (`propfind_answer`).
                            | LiveProp::OcShareTypes
                    )
                }),
                without_checksums: !asks_for(&query, |p| p == LiveProp::OcChecksums),
                without_owner: !asks_for(&query, |p| p == LiveProp::OcOwnerId),
            })
            .await
            .map_err(grpc_error)?
            .into_inner();
        let mut children = list.children;
        // The caller's home lists the folder its shares are mounted in.
        if let Some(shares) = crate::jail::home_entry(&dav.gateway, loc).await {
            children.push(shares);
        }
        (list.node.unwrap_or_default(), children)
    };
    let quota = if wants_quota(&query) {
        client
            .get_space(GetSpaceRequest {
                space_id: node.space_id.clone(),
            })
            .await
            .ok()
            .map(|s| s.into_inner())
    } else {
        None
    };
    propfind_answer(dav, loc, &query, node, children, quota).await
}

/// The multistatus for `node` and its `children`.
pub(crate) async fn propfind_answer(
    dav: &Dav,
    loc: &Location,
    query: &Propfind,
    mut node: Node,
    mut children: Vec<Node>,
    quota: Option<Space>,
) -> Result<Response, Response> {
    let wants_share_types = matches!(query, Propfind::Prop(names) if names.iter().any(|n| n.live() == Some(LiveProp::OcShareTypes)));
    if wants_share_types {
        // One lookup for the whole answer; `live` finds each node's types among its props.
        let types = crate::jail::share_types(&dav.gateway)
            .await
            .map_err(grpc_error)?;
        for n in std::iter::once(&mut node).chain(children.iter_mut()) {
            if let Some(xml) = types.get(&n.id) {
                let name = PropName::OC_SHARE_TYPES;
                n.props.push(Property {
                    namespace: name.ns.to_string(),
                    name: name.local.to_string(),
                    value: xml.clone(),
                });
            }
        }
    }
    let mut ms = Multistatus::with_capacity(512 * (children.len() + 1));
    for n in std::iter::once(&node).chain(children.iter()) {
        let href = loc.href(&n.path, n.is_dir);
        let mut resp = ms.response(&href);
        render(&mut resp, n, query, quota.as_ref(), loc);
        resp.finish();
    }
    Ok(multistatus(ms.finish()))
}

fn multistatus(body: String) -> Response {
    (
        StatusCode::MULTI_STATUS,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

/// Whether answering `q` renders a live property that `p` picks (see [`render`]).
fn asks_for(q: &Propfind, p: impl Fn(LiveProp) -> bool) -> bool {
    match q {
        Propfind::PropName => false,
        Propfind::AllProp { include } => {
            ALLPROP.iter().any(|a| p(*a)) || include.iter().filter_map(|n| n.live()).any(&p)
        }
        Propfind::Prop(names) => names.iter().filter_map(|n| n.live()).any(&p),
    }
}

fn wants_quota(q: &Propfind) -> bool {
    match q {
        Propfind::Prop(names) => names.iter().any(|n| {
            matches!(
                n.live(),
                Some(LiveProp::QuotaUsedBytes | LiveProp::QuotaAvailableBytes)
            )
        }),
        _ => false,
    }
}

/// The properties answered for `allprop`, as oCIS answers them (CLIENT_PROTOCOL.md §4b).
const ALLPROP: [LiveProp; 12] = [
    LiveProp::OcId,
    LiveProp::OcFileId,
    LiveProp::OcSpaceId,
    LiveProp::OcFileParent,
    LiveProp::OcName,
    LiveProp::GetEtag,
    LiveProp::OcPermissions,
    LiveProp::ResourceType,
    LiveProp::OcSize,
    LiveProp::GetLastModified,
    LiveProp::GetContentLength,
    LiveProp::OcFavorite,
];

fn render(
    resp: &mut dav::PropResponse<'_>,
    n: &Node,
    q: &Propfind,
    quota: Option<&Space>,
    loc: &Location,
) {
    match q {
        Propfind::PropName => {
            for p in ALLPROP {
                resp.empty(&p.name());
            }
            for d in &n.props {
                resp.empty(&PropName::new(d.namespace.clone(), d.name.clone()));
            }
        }
        Propfind::AllProp { include } => {
            for p in ALLPROP {
                live(resp, n, p, quota, loc);
            }
            for d in &n.props {
                resp.raw(
                    &PropName::new(d.namespace.clone(), d.name.clone()),
                    &d.value,
                );
            }
            for name in include {
                if let Some(p) = name.live().filter(|p| !ALLPROP.contains(p)) {
                    live(resp, n, p, quota, loc);
                }
            }
        }
        Propfind::Prop(names) => {
            for name in names {
                match name.live() {
                    Some(p) => live(resp, n, p, quota, loc),
                    None => match n
                        .props
                        .iter()
                        .find(|d| d.namespace == name.ns && d.name == name.local)
                    {
                        Some(d) => resp.raw(name, &d.value),
                        None => resp.not_found(name),
                    },
                }
            }
        }
    }
}

fn live(
    resp: &mut dav::PropResponse<'_>,
    n: &Node,
    p: LiveProp,
    quota: Option<&Space>,
    loc: &Location,
) {
    let name = p.name();
    let secs = n.mtime_ns.div_euclid(1_000_000_000);
    match p {
        LiveProp::GetEtag => resp.etag(&n.etag),
        LiveProp::GetLastModified => resp.last_modified(secs),
        LiveProp::ResourceType => resp.resourcetype(n.is_dir),
        LiveProp::GetContentLength if !n.is_dir => resp.number(&name, n.size),
        LiveProp::GetContentType if !n.is_dir => resp.text(&name, content_type(&n.name)),
        LiveProp::OcId | LiveProp::OcFileId => resp.text(&name, &n.id),
        LiveProp::OcSpaceId => resp.text(&name, &n.space_id),
        LiveProp::OcFileParent if !n.parent_id.is_empty() => resp.text(&name, &n.parent_id),
        LiveProp::OcName => resp.text(&name, &n.name),
        LiveProp::OcPermissions => resp.text(&name, &crate::jail::dav_permissions(n)),
        // Put among the props by `propfind_answer` when asked for: only shared nodes have it.
        LiveProp::OcShareTypes => match n
            .props
            .iter()
            .find(|d| d.namespace == name.ns && d.name == name.local)
        {
            Some(d) => resp.raw(&name, &d.value),
            None => resp.not_found(&name),
        },
        LiveProp::OcSize => resp.number(&name, n.size),
        LiveProp::OcFavorite => resp.number(&name, 0),
        LiveProp::OcOwnerId if !n.owner_id.is_empty() => resp.text(&name, &n.owner_id),
        LiveProp::OcChecksums if !n.is_dir && !n.sha1.is_empty() => {
            resp.checksums(Some(&n.sha1), Some(&n.md5), Some(&n.adler32));
        }
        LiveProp::OcPrivateLink => resp.text(&name, &format!("/f/{}", n.id.replace('!', "%21"))),
        LiveProp::SupportedLock => resp.supportedlock(),
        LiveProp::LockDiscovery => {
            let roots: Vec<String> = n
                .locks
                .iter()
                .map(|l| loc.href(&l.root_path, false))
                .collect();
            let locks: Vec<dav::ActiveLock<'_>> = n
                .locks
                .iter()
                .zip(&roots)
                .map(|(l, root)| active_lock(l, root))
                .collect();
            resp.lockdiscovery(&locks);
        }
        LiveProp::QuotaUsedBytes if n.is_dir => resp.number(&name, n.size),
        LiveProp::QuotaAvailableBytes if n.is_dir => match quota {
            // RFC 4331: the space left; an unlimited quota has no meaningful number, and
            // ownCloud clients read -3 as "unlimited".
            Some(s) if s.quota > 0 => resp.number(&name, s.quota.saturating_sub(s.used)),
            _ => resp.integer(&name, -3),
        },
        LiveProp::CreationDate => resp.text(&name, &dav::multistatus::http_date(secs)),
        _ => resp.not_found(&name),
    }
}

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

async fn proppatch(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    let body = xml_body(req).await?;
    let ops = dav::parse_proppatch(&body)
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    let mut client = dav.storage();
    let node = client
        .stat(StatRequest {
            r#ref: Some(loc.reference()),
            with_props: false,
            with_locks: false,
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    // RFC 4918 §9.2: all or nothing; a protected property fails the whole request (403 for
    // it, 424 Failed Dependency for the rest).
    let protected: Vec<&PropName> = ops
        .iter()
        .map(|op| match op {
            PropPatchOp::Set { name, .. } | PropPatchOp::Remove { name } => name,
        })
        .filter(|n| n.live().is_some())
        .collect();
    let names: Vec<&PropName> = ops
        .iter()
        .map(|op| match op {
            PropPatchOp::Set { name, .. } | PropPatchOp::Remove { name } => name,
        })
        .collect();
    let href = loc.href(&node.path, node.is_dir);
    let mut ms = Multistatus::new();
    if !protected.is_empty() {
        let mut resp = ms.response(&href);
        let failed: Vec<&PropName> = names
            .iter()
            .copied()
            .filter(|n| n.live().is_some())
            .collect();
        let others: Vec<&PropName> = names
            .iter()
            .copied()
            .filter(|n| n.live().is_none())
            .collect();
        resp.propstat(
            StatusCode::FORBIDDEN,
            failed,
            Some(&Precondition::CannotModifyProtectedProperty),
        );
        if !others.is_empty() {
            resp.propstat(StatusCode::FAILED_DEPENDENCY, others, None);
        }
        resp.finish();
        return Ok(multistatus(ms.finish()));
    }
    let changes = ops
        .iter()
        .map(|op| {
            let (name, value, remove) = match op {
                PropPatchOp::Set { name, value } => (name, value.clone(), false),
                PropPatchOp::Remove { name } => (name, String::new(), true),
            };
            PropChange {
                property: Some(Property {
                    namespace: name.ns.to_string(),
                    name: name.local.to_string(),
                    value,
                }),
                remove,
            }
        })
        .collect();
    client
        .set_props(SetPropsRequest {
            r#ref: Some(loc.reference()),
            changes,
            lock_tokens: loc.tokens.clone(),
        })
        .await
        .map_err(grpc_error)?;
    let mut resp = ms.response(&href);
    resp.propstat(StatusCode::OK, names, None);
    resp.finish();
    Ok(multistatus(ms.finish()))
}

async fn mkcol(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    // RFC 4918 §9.3: a body we do not understand is 415.
    let has_body = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || req.headers().contains_key(header::TRANSFER_ENCODING);
    if has_body {
        let body = xml_body(req).await?;
        if !body.is_empty() {
            return Err(dav_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "MKCOL with a body is not supported",
                None,
            ));
        }
    }
    let node = dav
        .storage()
        .create_dir(CreateDirRequest {
            r#ref: Some(loc.reference()),
            lock_tokens: loc.tokens.clone(),
        })
        .await
        .map_err(|s| {
            let kind = ErrorKind::of(&s);
            // The root always exists: the provider refuses to replace it.
            if kind == ErrorKind::AlreadyExists
                || (kind == ErrorKind::PermissionDenied && loc.path.is_root())
            {
                dav_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "The resource you tried to create already exists",
                    None,
                )
            } else {
                grpc_error(s)
            }
        })?
        .into_inner();
    let mut resp = StatusCode::CREATED.into_response();
    node_headers(resp.headers_mut(), &node);
    Ok(resp)
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
    if let Ok(v) = HeaderValue::from_str(&dav::multistatus::http_date(secs)) {
        h.insert(header::LAST_MODIFIED, v);
    }
}

/// The data-path URL of a transfer token (tokens are base64url: no escaping needed).
pub(crate) fn data_uri(token: &str) -> String {
    format!("/data/{token}")
}

fn etag_matches(list: &HeaderValue, etag: &str) -> bool {
    let Ok(list) = list.to_str() else {
        return false;
    };
    list.split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/").trim_matches('"') == etag)
}

async fn get(
    dav: &Dav,
    loc: &Location,
    req: Request,
    with_body: bool,
) -> Result<Response, Response> {
    let transfer = dav
        .storage()
        .initiate_download(InitiateDownloadRequest {
            r#ref: Some(loc.reference()),
        })
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
    let mut resp = if with_body {
        let mut data_req = http::Request::get(data_uri(&transfer.token));
        if let Some(range) = h.get(header::RANGE) {
            data_req = data_req.header(header::RANGE, range.clone());
        }
        let data_req = data_req.body(Body::empty()).map_err(|e| internal(&e))?;
        let resp = dav.transfer(&transfer.provider, data_req).await?;
        let (parts, body) = resp.into_parts();
        let mut out = Response::new(Body::new(body));
        *out.status_mut() = parts.status;
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
    if let Ok(v) = HeaderValue::from_str(&content_disposition(&node.name)) {
        hm.insert(header::CONTENT_DISPOSITION, v);
    }
    if !node.sha1.is_empty()
        && let Ok(v) = HeaderValue::from_str(&format!("SHA1:{}", node.sha1))
    {
        hm.insert(HeaderName::from_static("oc-checksum"), v);
    }
    Ok(resp)
}

/// `Content-Disposition` of a download, as oCIS sends it (CLIENT_PROTOCOL.md §6): the exact
/// name in RFC 8187 `filename*`, and an ASCII-only `filename` for agents that ignore it.
fn content_disposition(name: &str) -> String {
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
    Ok(checksum_value(v))
}

/// A checksum as clients write it: `ALGO:HEX` (OC-Checksum; several may be space separated,
/// one we know is enough) or `ALGO HEX` (owncloudcmd's TUS `checksum` metadata), the
/// algorithm in any case → `algo:hex`, or empty if none we know.
pub(crate) fn checksum_value(v: &str) -> String {
    let v = v.trim();
    let pairs: Vec<(&str, &str)> = if v.contains(':') {
        v.split_whitespace()
            .filter_map(|part| part.split_once(':'))
            .collect()
    } else {
        v.split_once(' ').into_iter().collect()
    };
    for (algo, hex) in pairs {
        let algo = algo.trim().to_ascii_lowercase();
        let hex = hex.trim();
        if matches!(algo.as_str(), "sha1" | "md5" | "adler32") && !hex.is_empty() {
            return format!("{algo}:{hex}");
        }
    }
    String::new()
}

/// `X-OC-Mtime`: unix seconds (integer or decimal) → nanoseconds; invalid values are ignored
/// as oCIS does, not refused.
pub(crate) fn mtime_header(h: &HeaderMap) -> Option<i64> {
    let v = h.get("x-oc-mtime")?.to_str().ok()?;
    let secs: f64 = v.trim().parse().ok()?;
    (secs.is_finite() && secs > 0.0).then_some((secs * 1e9) as i64)
}

async fn put(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
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
    let if_match = h
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().trim_matches('"').to_owned())
        .unwrap_or_default();
    let if_none_match_any = h
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == b"*");
    let length = h
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(-1);
    let mtime = mtime_header(h);
    let checksum = checksum_header(h)?;
    let transfer = dav
        .storage()
        .initiate_upload(InitiateUploadRequest {
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
        })
        .await
        .map_err(|s| match ErrorKind::of(&s) {
            ErrorKind::PermissionDenied if loc.path.is_root() => dav_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "cannot PUT onto a collection",
                None,
            ),
            _ => grpc_error(s),
        })?
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
    let node = resp
        .headers()
        .get(NODE_HEADER)
        .and_then(|v| {
            base64::engine::general_purpose::STANDARD
                .decode(v.as_bytes())
                .ok()
        })
        .and_then(|b| Node::decode(b.as_slice()).ok())
        .unwrap_or_default();
    let mut out = if replaced {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    }
    .into_response();
    let hm = out.headers_mut();
    node_headers(hm, &node);
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
    Ok(out)
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

async fn delete(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    let if_match = req
        .headers()
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().trim_matches('"').to_owned())
        .unwrap_or_default();
    dav.storage()
        .delete(DeleteRequest {
            r#ref: Some(loc.reference()),
            if_match,
            lock_tokens: loc.tokens.clone(),
        })
        .await
        .map_err(grpc_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Where a `Destination` header (RFC 4918 §10.3) points, for the caller: absolute on this
/// host or path-only, into any WebDAV root (a share mounted in the jail included).
pub(crate) async fn destination(
    dav: &Dav,
    h: &HeaderMap,
    who: &Identity,
) -> Result<Location, Response> {
    let Some(dest) = h.get("destination") else {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "Destination header missing",
            None,
        ));
    };
    let host = h
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let dest_path = match dav::parse_destination(dest.as_bytes(), &[host]) {
        Ok(p) => p,
        Err(DestinationError::OtherServer(d)) => {
            return Err(dav_error(
                StatusCode::BAD_GATEWAY,
                &format!("destination {d} is on another server"),
                None,
            ));
        }
        Err(e) => return Err(dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None)),
    };
    let mut raw = String::new();
    dav::encode_path(dest_path.as_str(), &mut raw);
    crate::jail::enter_destination(&dav.gateway, locate(&raw, who)?).await
}

async fn copy_or_move(
    dav: &Dav,
    loc: &Location,
    req: Request,
    is_move: bool,
) -> Result<Response, Response> {
    let h = req.headers();
    let who = req
        .extensions()
        .get::<Identity>()
        .cloned()
        .ok_or_else(|| dav_error(StatusCode::UNAUTHORIZED, "no caller identity", None))?;
    let dest_loc = destination(dav, h, &who).await?;
    if dest_loc.space_id != loc.space_id {
        return Err(dav_error(
            StatusCode::BAD_GATEWAY,
            "copying or moving between spaces is not supported",
            None,
        ));
    }
    if dest_loc.path == loc.path {
        return Err(dav_error(
            StatusCode::FORBIDDEN,
            "source and destination are the same",
            None,
        ));
    }
    let overwrite = dav::parse_overwrite(h.get("overwrite").map(|v| v.as_bytes()))
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    let depth = depth(h, Depth::Infinity)?;
    if depth == Depth::One || (is_move && depth != Depth::Infinity) {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "Depth must be 0 or infinity here",
            None,
        ));
    }
    let mut client = dav.storage();
    let result = if is_move {
        client
            .r#move(MoveRequest {
                source: Some(loc.reference()),
                destination: Some(dest_loc.reference()),
                overwrite,
                lock_tokens: loc.tokens.clone(),
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                (r.node, r.replaced)
            })
    } else {
        client
            .copy(CopyRequest {
                source: Some(loc.reference()),
                destination: Some(dest_loc.reference()),
                overwrite,
                recursive: depth == Depth::Infinity,
                lock_tokens: loc.tokens.clone(),
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                (r.node, r.replaced)
            })
    };
    let (node, replaced) = result.map_err(|s| match ErrorKind::of(&s) {
        // Overwrite: F and the destination exists (RFC 4918 §9.8.5, §9.9.4).
        ErrorKind::AlreadyExists => dav_error(
            StatusCode::PRECONDITION_FAILED,
            "the destination exists",
            None,
        ),
        _ => grpc_error(s),
    })?;
    let mut out = if replaced {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    }
    .into_response();
    if let Some(node) = node {
        node_headers(out.headers_mut(), &node);
    }
    Ok(out)
}

fn active_lock<'a>(l: &'a ActiveLock, root: &'a str) -> dav::ActiveLock<'a> {
    dav::ActiveLock {
        scope: if l.exclusive {
            dav::xml::LockScope::Exclusive
        } else {
            dav::xml::LockScope::Shared
        },
        depth: if l.deep { Depth::Infinity } else { Depth::Zero },
        owner: (!l.owner.is_empty()).then_some(l.owner.as_str()),
        timeout_secs: (l.timeout_secs > 0).then_some(l.timeout_secs),
        token: &l.token,
        root,
    }
}

/// Locks granted without a `Timeout` header last this long; longer asks are capped (a lock
/// left by a vanished client must not block others forever).
const LOCK_DEFAULT_SECS: u64 = 3600;
const LOCK_MAX_SECS: u64 = 7 * 24 * 3600;

async fn lock(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    let depth = depth(req.headers(), Depth::Infinity)?;
    if depth == Depth::One {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "a lock has Depth 0 or infinity",
            None,
        ));
    }
    let timeout = dav::lock_timeout(
        req.headers().get("timeout"),
        LOCK_DEFAULT_SECS,
        LOCK_MAX_SECS,
    );
    let body = xml_body(req).await?;
    let info = dav::parse_lockinfo(&body)
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    let request = match &info {
        // A refresh names its lock in the If header (RFC 4918 §9.10.2).
        None => {
            let Some(token) = loc.tokens.first() else {
                return Err(dav_error(
                    StatusCode::BAD_REQUEST,
                    "a lock refresh needs the lock token in an If header",
                    None,
                ));
            };
            LockRequest {
                r#ref: Some(loc.reference()),
                refresh_token: token.clone(),
                timeout_secs: timeout,
                ..Default::default()
            }
        }
        Some(info) => LockRequest {
            r#ref: Some(loc.reference()),
            refresh_token: String::new(),
            exclusive: info.scope == dav::xml::LockScope::Exclusive,
            deep: depth == Depth::Infinity,
            owner: info.owner.clone().unwrap_or_default(),
            timeout_secs: timeout,
            lock_tokens: loc.tokens.clone(),
        },
    };
    let answer = dav
        .storage()
        .lock(request)
        .await
        .map_err(|s| match ErrorKind::of(&s) {
            ErrorKind::Locked => dav_error(
                StatusCode::LOCKED,
                s.message(),
                Some(&Precondition::NoConflictingLock(Vec::new())),
            ),
            _ => grpc_error(s),
        })?
        .into_inner();
    let granted = answer.lock.unwrap_or_default();
    let root = loc.href(&granted.root_path, false);
    let body = dav::lock_response_body(&[active_lock(&granted, &root)]);
    let status = if answer.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut resp = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml; charset=utf-8"),
        )],
        body,
    )
        .into_response();
    if info.is_some()
        && let Ok(v) = HeaderValue::from_str(&format!("<{}>", granted.token))
    {
        resp.headers_mut()
            .insert(HeaderName::from_static("lock-token"), v);
    }
    Ok(resp)
}

async fn unlock(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    let Some(value) = req.headers().get("lock-token") else {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "UNLOCK needs a Lock-Token header",
            None,
        ));
    };
    let token = dav::parse_lock_token(value.as_bytes())
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    dav.storage()
        .unlock(UnlockRequest {
            r#ref: Some(loc.reference()),
            token,
        })
        .await
        .map_err(|s| match ErrorKind::of(&s) {
            ErrorKind::Conflict => dav_error(
                StatusCode::CONFLICT,
                s.message(),
                Some(&Precondition::LockTokenMatchesRequestUri),
            ),
            _ => grpc_error(s),
        })?;
    Ok(StatusCode::NO_CONTENT.into_response())
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
