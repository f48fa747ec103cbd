//! Undo on the WebDAV wire: the trash bin and file versions, in oCIS's shape
//! (shared/protocol/NEXT_FEATURES.md).
//!
//! - Trash: `/remote.php/dav/trash-bin/{user}/` (the caller's personal space) and
//!   `/remote.php/dav/spaces/trash-bin/{space-id}/` (also under `/dav/spaces/trash-bin/`).
//!   PROPFIND (Depth 0 or 1; infinity is 400) lists the items, or inside a removed folder
//!   `…/{key}/sub/path`; MOVE with a `Destination` restores (201; 204 when `Overwrite: T`
//!   replaced a target, which goes to the trash itself; 412 when the target exists and
//!   `Overwrite` is F or absent: never a silent overwrite; 409 when the parent is gone);
//!   DELETE purges a key, or the whole trash at the root (204; an unknown key 404).
//!   Another user's trash is 404.
//! - Versions: `/remote.php/dav/meta/{fileid}` (PROPFIND: `oc:meta-path-for-user`),
//!   `/remote.php/dav/meta/{fileid}/v` (PROPFIND Depth 1: the versions; an empty `<d:prop/>`
//!   is allprop), GET/HEAD `…/v/{key}` (the content), COPY `…/v/{key}` to the file (restore:
//!   204, whatever `Overwrite` says, as oCIS answers ownCloud Web's `Overwrite: F`).
//! - The same in Nextcloud's shape: [`nextcloud`].

use arca_runtime::Caller;
use axum::extract::State;

use super::dav::{DAV_NS, NC_NS, OC_NS};
use super::propfind::multistatus;
use super::transfer::download;
use super::*;

mod nextcloud;

/// Methods the trash and version URLs take.
const UNDO_ALLOW: &str = "OPTIONS, GET, HEAD, PROPFIND, MOVE, COPY, DELETE";

pub(crate) fn routes(dav: Arc<Dav>) -> axum::Router {
    use axum::routing::any;
    axum::Router::new()
        .route("/remote.php/dav/trash-bin/{user}", any(trash))
        .route("/remote.php/dav/trash-bin/{user}/", any(trash))
        .route("/remote.php/dav/trash-bin/{user}/{*rest}", any(trash))
        .route("/remote.php/dav/spaces/trash-bin/{space}", any(trash))
        .route("/remote.php/dav/spaces/trash-bin/{space}/", any(trash))
        .route(
            "/remote.php/dav/spaces/trash-bin/{space}/{*rest}",
            any(trash),
        )
        .route("/dav/spaces/trash-bin/{space}", any(trash))
        .route("/dav/spaces/trash-bin/{space}/", any(trash))
        .route("/dav/spaces/trash-bin/{space}/{*rest}", any(trash))
        .route("/remote.php/dav/meta/{fileid}", any(meta))
        .route("/remote.php/dav/meta/{fileid}/", any(meta))
        .route("/remote.php/dav/meta/{fileid}/{*rest}", any(meta))
        .with_state(dav.clone())
        .merge(nextcloud::routes(dav))
}

fn not_found() -> Response {
    dav_error(StatusCode::NOT_FOUND, "Resource not found", None)
}

fn bad_request(message: &str) -> Response {
    dav_error(StatusCode::BAD_REQUEST, message, None)
}

/// A trash URL taken apart: the href of its root (percent-encoded, no trailing slash), the
/// space (empty: the caller's home), and the item key and the path inside it, if any.
struct TrashUrl {
    root: String,
    space_id: String,
    key: String,
    sub: String,
}

impl TrashUrl {
    fn parse(raw: &str, who: &Identity) -> Result<TrashUrl, Response> {
        let bad = |e: dav::PathError| bad_request(&e.to_string());
        let (root, space_id, rest) =
            if let Some(after) = raw.strip_prefix("/remote.php/dav/trash-bin/") {
                let (user, rest) = after.split_at(after.find('/').unwrap_or(after.len()));
                // Another user's trash does not exist for this caller.
                if dav::paths::decode_segment(user).map_err(bad)? != who.username {
                    return Err(not_found());
                }
                (
                    format!("/remote.php/dav/trash-bin/{user}"),
                    String::new(),
                    rest,
                )
            } else {
                let (prefix, after) = [
                    "/remote.php/dav/spaces/trash-bin/",
                    "/dav/spaces/trash-bin/",
                ]
                .iter()
                .find_map(|p| raw.strip_prefix(p).map(|a| (p, a)))
                .ok_or_else(not_found)?;
                let (space, rest) = after.split_at(after.find('/').unwrap_or(after.len()));
                let space_id = dav::paths::decode_segment(space).map_err(bad)?;
                if space_id.is_empty() {
                    return Err(not_found());
                }
                (format!("{prefix}{space}"), space_id, rest)
            };
        let path = dav::decode_path(if rest.is_empty() { "/" } else { rest }).map_err(bad)?;
        let mut segs = path.as_str().split('/').filter(|s| !s.is_empty());
        let key = segs.next().unwrap_or_default().to_owned();
        let sub: Vec<&str> = segs.collect();
        Ok(TrashUrl {
            root,
            space_id,
            key,
            sub: format!("/{}", sub.join("/")),
        })
    }
}

async fn trash(State(dav): State<Arc<Dav>>, Caller(who): Caller, req: Request) -> Response {
    let url = match TrashUrl::parse(req.uri().path(), &who) {
        Ok(u) => u,
        Err(resp) => return resp,
    };
    let result = match req.method().as_str() {
        "OPTIONS" => Ok(undo_options()),
        "PROPFIND" => list_trash(&dav, &url, req).await,
        "MOVE" => restore(&dav, &url, &who, req).await,
        "DELETE" => purge(&dav, &url).await,
        _ => Err(dav_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "the trash bin takes PROPFIND, MOVE (restore) and DELETE (purge)",
            None,
        )),
    };
    result.unwrap_or_else(|r| r)
}

fn undo_options() -> Response {
    let mut resp = StatusCode::OK.into_response();
    let h = resp.headers_mut();
    h.insert(header::ALLOW, HeaderValue::from_static(UNDO_ALLOW));
    h.insert(
        HeaderName::from_static("dav"),
        HeaderValue::from_static("1"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    resp
}

/// Depth 0 or 1 (1 when absent, as oCIS takes it); infinity is refused.
async fn finite_query(req: Request) -> Result<(Depth, Propfind), Response> {
    let depth = depth(req.headers(), Depth::One)?;
    if depth == Depth::Infinity {
        return Err(bad_request("Depth: infinity is not supported here"));
    }
    let body = xml_body(req).await?;
    let query = dav::parse_propfind(&body).map_err(|e| bad_request(&e.to_string()))?;
    // ownCloud Web asks for versions with an empty `<d:prop/>`: it means everything.
    let query = match query {
        Propfind::Prop(names) if names.is_empty() => Propfind::AllProp {
            include: Vec::new(),
        },
        q => q,
    };
    Ok((depth, query))
}

/// What a trash listing shows of one entry.
struct TrashEntry<'a> {
    /// The original name, and the original path without its leading slash.
    name: &'a str,
    location: String,
    deleted_ns: i64,
    space_id: &'a str,
    node: &'a Node,
}

const TRASH_ALLPROP: [PropName; 9] = [
    PropName::oc("trashbin-original-filename"),
    PropName::oc("trashbin-original-location"),
    PropName::oc("trashbin-delete-datetime"),
    PropName::oc("trashbin-delete-timestamp"),
    PropName::oc("spaceid"),
    PropName::RESOURCETYPE,
    PropName::GETCONTENTLENGTH,
    PropName::oc("size"),
    PropName::OC_PERMISSIONS,
];

fn trash_prop(resp: &mut dav::PropResponse<'_>, name: &PropName, e: &TrashEntry<'_>) {
    let secs = e.deleted_ns.div_euclid(1_000_000_000);
    match (name.ns.as_ref(), name.local.as_ref()) {
        (OC_NS, "trashbin-original-filename") => resp.text(name, e.name),
        (OC_NS, "trashbin-original-location") => resp.text(name, &e.location),
        (OC_NS, "trashbin-delete-datetime") => resp.text(name, &crate::dates::http_date(secs)),
        (OC_NS, "trashbin-delete-timestamp") => resp.integer(name, secs),
        (OC_NS, "spaceid") => resp.text(name, e.space_id),
        (OC_NS, "id" | "fileid") => resp.text(name, &e.node.id),
        (OC_NS, "name") => resp.text(name, e.name),
        (OC_NS, "size") => resp.number(name, e.node.size),
        // Removed things can be restored or purged, nothing else.
        (OC_NS, "permissions") => resp.text(name, ""),
        (DAV_NS, "resourcetype") => resp.resourcetype(e.node.is_dir),
        (DAV_NS, "getcontentlength") if !e.node.is_dir => resp.number(name, e.node.size),
        (DAV_NS, "getlastmodified") => {
            resp.last_modified(e.node.mtime_ns.div_euclid(1_000_000_000));
        }
        (DAV_NS, "getetag") => resp.etag(&e.node.etag),
        _ => resp.not_found(name),
    }
}

/// One entry's properties for query `q`: `allprop` are its names for `<allprop/>` and
/// `<propname/>`, `prop` writes one (found or not).
fn render(
    resp: &mut dav::PropResponse<'_>,
    q: &Propfind,
    allprop: &[PropName],
    mut prop: impl FnMut(&mut dav::PropResponse<'_>, &PropName),
) {
    match q {
        Propfind::PropName => {
            for p in allprop {
                resp.empty(p);
            }
        }
        Propfind::AllProp { include } => {
            for p in allprop.iter().chain(include) {
                prop(resp, p);
            }
        }
        Propfind::Prop(names) => {
            for p in names {
                prop(resp, p);
            }
        }
    }
}

/// The trash root as a collection: only what a collection has.
fn render_root(resp: &mut dav::PropResponse<'_>, q: &Propfind) {
    let names: Vec<PropName> = match q {
        Propfind::Prop(names) => names.clone(),
        _ => vec![PropName::RESOURCETYPE],
    };
    for name in &names {
        if *name == PropName::RESOURCETYPE {
            resp.resourcetype(true);
        } else if matches!(q, Propfind::PropName) {
            resp.empty(name);
        } else {
            resp.not_found(name);
        }
    }
}

fn no_slash(path: &str) -> String {
    path.trim_start_matches('/').to_owned()
}

async fn list_trash(dav: &Dav, url: &TrashUrl, req: Request) -> Result<Response, Response> {
    let (depth, query) = finite_query(req).await?;
    let listing = dav
        .storage()
        .list_trash(ListTrashRequest {
            space_id: url.space_id.clone(),
            key: url.key.clone(),
            path: url.sub.clone(),
            ..Default::default()
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    let shown = TrashListing {
        root: &url.root,
        item: (!url.key.is_empty()).then_some(url.key.as_str()),
        depth,
        query: &query,
    };
    Ok(shown.answer(
        &listing,
        |item| item.key.clone(),
        |resp, entry, _| {
            render(resp, &query, &TRASH_ALLPROP, |resp, p| {
                trash_prop(resp, p, entry)
            });
        },
    ))
}

/// A PROPFIND of a trash, as either wire shows it.
struct TrashListing<'a> {
    /// The trash's href, without a trailing slash.
    root: &'a str,
    /// The item's URL segment when the PROPFIND is inside one.
    item: Option<&'a str>,
    depth: Depth,
    query: &'a Propfind,
}

impl TrashListing<'_> {
    /// The multistatus: the trash root and its items, or the node inside an item and its
    /// children. `segment` names an item in URLs; `render` writes an entry's properties.
    fn answer(
        &self,
        listing: &ListTrashResponse,
        segment: impl Fn(&TrashItem) -> String,
        render: impl Fn(&mut dav::PropResponse<'_>, &TrashEntry<'_>, &TrashItem),
    ) -> Response {
        let href = |segment: &str, inner: &str, is_dir: bool| {
            let mut out = format!("{}/", self.root);
            dav::encode_path(segment, &mut out);
            if inner != "/" {
                dav::encode_path(inner, &mut out);
            }
            if is_dir && !out.ends_with('/') {
                out.push('/');
            }
            out
        };
        let mut ms =
            Multistatus::with_capacity(600 * (listing.items.len() + listing.children.len() + 1));
        let Some(item_segment) = self.item else {
            let mut resp = ms.response(&format!("{}/", self.root));
            render_root(&mut resp, self.query);
            resp.finish();
            if self.depth == Depth::One {
                for item in &listing.items {
                    let node = item.node.clone().unwrap_or_default();
                    let entry = TrashEntry {
                        name: &item.name,
                        location: no_slash(&node.path),
                        deleted_ns: item.deleted_ns,
                        space_id: &item.space_id,
                        node: &node,
                    };
                    let mut resp = ms.response(&href(&segment(item), "/", node.is_dir));
                    render(&mut resp, &entry, item);
                    resp.finish();
                }
            }
            return multistatus(ms.finish());
        };
        let item = listing.item.clone().unwrap_or_default();
        let node = listing.node.clone().unwrap_or_default();
        let base = item.node.as_ref().map(|n| n.path.as_str()).unwrap_or("");
        let mut shown = vec![&node];
        if self.depth == Depth::One {
            shown.extend(listing.children.iter());
        }
        for n in shown {
            let location = if n.path == "/" {
                no_slash(base)
            } else {
                no_slash(&format!("{base}{}", n.path))
            };
            let entry = TrashEntry {
                name: &n.name,
                location,
                deleted_ns: item.deleted_ns,
                space_id: &item.space_id,
                node: n,
            };
            let mut resp = ms.response(&href(item_segment, &n.path, n.is_dir));
            render(&mut resp, &entry, &item);
            resp.finish();
        }
        multistatus(ms.finish())
    }
}

async fn restore(
    dav: &Dav,
    url: &TrashUrl,
    who: &Identity,
    req: Request,
) -> Result<Response, Response> {
    if url.key.is_empty() {
        return Err(dav_error(
            StatusCode::NOT_IMPLEMENTED,
            "restore an item of the trash, not the trash itself",
            None,
        ));
    }
    let h = req.headers();
    let dest = destination(dav, h, who).await?;
    let overwrite = dav::parse_overwrite(h.get("overwrite").map(|v| v.as_bytes()))
        .map_err(|e| bad_request(&e.to_string()))?;
    // Absent means F here: a restore never replaces anything unless told to.
    let replace = overwrite && h.contains_key("overwrite");
    let conflict = if replace {
        RestoreConflict::Replace
    } else {
        RestoreConflict::Fail
    };
    let restored = dav
        .storage()
        .restore_trash(RestoreTrashRequest {
            space_id: url.space_id.clone(),
            key: url.key.clone(),
            path: url.sub.clone(),
            destination: Some(dest.reference()),
            conflict: conflict as i32,
        })
        .await
        .map_err(|s| match ErrorKind::of(&s) {
            ErrorKind::AlreadyExists => dav_error(
                StatusCode::PRECONDITION_FAILED,
                "the destination exists; restore with Overwrite: T to replace it (it goes to \
                 the trash), or to another name",
                None,
            ),
            _ => grpc_error(s),
        })?
        .into_inner();
    let status = if restored.replaced_key.is_empty() {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    };
    let mut resp = status.into_response();
    if let Some(node) = &restored.node {
        node_headers(resp.headers_mut(), node);
    }
    Ok(resp)
}

async fn purge(dav: &Dav, url: &TrashUrl) -> Result<Response, Response> {
    dav.storage()
        .purge_trash(PurgeTrashRequest {
            space_id: url.space_id.clone(),
            key: url.key.clone(),
            path: url.sub.clone(),
        })
        .await
        .map_err(grpc_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `/remote.php/dav/meta/{fileid}[/v[/{key}]]`.
async fn meta(State(dav): State<Arc<Dav>>, Caller(who): Caller, req: Request) -> Response {
    let raw = req.uri().path().to_owned();
    let Some(after) = raw.strip_prefix("/remote.php/dav/meta/") else {
        return not_found();
    };
    let mut segs = after.split('/').filter(|s| !s.is_empty());
    let file_id = match segs.next().map(dav::paths::decode_segment) {
        Some(Ok(id)) if !id.is_empty() => id,
        Some(Err(e)) => return bad_request(&e.to_string()),
        _ => return not_found(),
    };
    let rest: Vec<&str> = segs.collect();
    let file = Ref {
        space_id: String::new(),
        path: String::new(),
        node_id: file_id.clone(),
    };
    let prefix = format!(
        "/remote.php/dav/meta/{}",
        after.split('/').next().unwrap_or("")
    );
    let method = req.method().as_str().to_owned();
    let result = match (rest.as_slice(), method.as_str()) {
        (_, "OPTIONS") => Ok(undo_options()),
        ([], "PROPFIND") => meta_path(&dav, &prefix, file, req).await,
        (["v"], "PROPFIND") => list_versions(&dav, &format!("{prefix}/v/"), file, req).await,
        (["v", key], "GET" | "HEAD") => match dav::paths::decode_segment(key) {
            Ok(key) => {
                let what = InitiateDownloadRequest {
                    r#ref: Some(file),
                    version_key: key,
                    small_body: false,
                };
                download(&dav, what, req, method == "GET").await
            }
            Err(e) => Err(bad_request(&e.to_string())),
        },
        (["v", key], "COPY") => match dav::paths::decode_segment(key) {
            Ok(key) => restore_version(&dav, &who, file, key, req).await,
            Err(e) => Err(bad_request(&e.to_string())),
        },
        ([], _) | (["v"], _) | (["v", _], _) => Err(dav_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "versions take PROPFIND, GET, HEAD and COPY (restore)",
            None,
        )),
        _ => Err(not_found()),
    };
    result.unwrap_or_else(|r| r)
}

/// PROPFIND of `meta/{fileid}`: where the file is for the caller (`oc:meta-path-for-user`).
async fn meta_path(dav: &Dav, prefix: &str, file: Ref, req: Request) -> Result<Response, Response> {
    let (_, query) = finite_query(req).await?;
    let node = dav
        .storage()
        .stat(StatRequest {
            r#ref: Some(file),
            with_props: false,
            with_locks: false,
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    let path_prop = PropName::oc("meta-path-for-user");
    let names = match &query {
        Propfind::Prop(names) => names.clone(),
        _ => vec![path_prop.clone(), PropName::oc("fileid")],
    };
    let mut ms = Multistatus::new();
    let mut resp = ms.response(&format!("{prefix}/"));
    for name in &names {
        match (name.ns.as_ref(), name.local.as_ref()) {
            (OC_NS, "meta-path-for-user") => resp.text(name, &node.path),
            (OC_NS, "fileid" | "id") => resp.text(name, &node.id),
            (DAV_NS, "resourcetype") => resp.resourcetype(node.is_dir),
            _ => resp.not_found(name),
        }
    }
    resp.finish();
    Ok(multistatus(ms.finish()))
}

const VERSION_ALLPROP: [PropName; 7] = [
    PropName::nc("version-label"),
    PropName::GETCONTENTLENGTH,
    PropName::GETCONTENTTYPE,
    PropName::GETETAG,
    PropName::GETLASTMODIFIED,
    PropName::RESOURCETYPE,
    PropName::oc("size"),
];

fn version_prop(resp: &mut dav::PropResponse<'_>, name: &PropName, v: &Version, file: &Node) {
    match (name.ns.as_ref(), name.local.as_ref()) {
        (DAV_NS, "getcontentlength") => resp.number(name, v.size),
        (DAV_NS, "getcontenttype") => resp.text(name, content_type(&file.name)),
        (DAV_NS, "getetag") => resp.etag(&v.etag),
        (DAV_NS, "getlastmodified") => resp.last_modified(v.mtime_ns.div_euclid(1_000_000_000)),
        (DAV_NS, "resourcetype") => resp.resourcetype(false),
        (OC_NS, "size") => resp.number(name, v.size),
        (OC_NS, "fileid" | "id") => resp.text(name, &file.id),
        (OC_NS, "name") => resp.text(name, &v.key),
        (OC_NS | NC_NS, "version-label") => resp.text(name, &v.label),
        (OC_NS, "checksums") if !v.sha1.is_empty() => {
            resp.checksums(Some(&v.sha1), Some(&v.md5), Some(&v.adler32));
        }
        _ => resp.not_found(name),
    }
}

/// PROPFIND of the versions of a file: the collection at `collection` (an href ending in
/// `/`), each version at `collection` + its key.
async fn list_versions(
    dav: &Dav,
    collection: &str,
    file: Ref,
    req: Request,
) -> Result<Response, Response> {
    let (depth, query) = finite_query(req).await?;
    let listing = dav
        .storage()
        .list_versions(ListVersionsRequest { r#ref: Some(file) })
        .await
        .map_err(grpc_error)?
        .into_inner();
    let node = listing.node.unwrap_or_default();
    let mut ms = Multistatus::with_capacity(400 * (listing.versions.len() + 1));
    let mut resp = ms.response(collection);
    render_root(&mut resp, &query);
    resp.finish();
    if depth == Depth::One {
        for v in &listing.versions {
            let mut href = collection.to_owned();
            dav::encode_path(&v.key, &mut href);
            let mut resp = ms.response(&href);
            render(&mut resp, &query, &VERSION_ALLPROP, |resp, p| {
                version_prop(resp, p, v, &node);
            });
            resp.finish();
        }
    }
    Ok(multistatus(ms.finish()))
}

/// COPY of a version onto its file: the version becomes the content, the content it
/// replaces a version. The destination must be the file itself.
async fn restore_version(
    dav: &Dav,
    who: &Identity,
    file: Ref,
    key: String,
    req: Request,
) -> Result<Response, Response> {
    let h = req.headers();
    let dest = destination(dav, h, who).await?;
    let mut client = dav.storage();
    let target = client
        .stat(StatRequest {
            r#ref: Some(dest.reference()),
            with_props: false,
            with_locks: false,
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    if target.id != file.node_id {
        return Err(dav_error(
            StatusCode::CONFLICT,
            "a version is restored onto its own file",
            None,
        ));
    }
    let node = client
        .restore_version(RestoreVersionRequest {
            r#ref: Some(file),
            key,
            lock_tokens: dest.tokens.clone(),
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    let mut resp = StatusCode::NO_CONTENT.into_response();
    node_headers(resp.headers_mut(), &node);
    Ok(resp)
}
