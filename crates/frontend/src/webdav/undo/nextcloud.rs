//! The trash bin and versions in Nextcloud's shape (nextcloud/documentation, WebDAV
//! trashbin.rst and versions.rst), for Nextcloud clients and apps:
//!
//! - `/remote.php/dav/trashbin/{user}/trash/`: PROPFIND lists the items as `NAME.dSTAMP`
//!   (browse inside a removed folder below it); MOVE of an item to
//!   `/remote.php/dav/trashbin/{user}/restore/{anything}` restores it where it was (its folders
//!   recreated when gone; beside a file that took its name, never over it: 201); DELETE of an
//!   item purges it, of `…/trash` every item (204).
//! - `/remote.php/dav/versions/{user}/versions/{fileid}/`: PROPFIND lists the versions;
//!   GET/HEAD one; MOVE one to `/remote.php/dav/versions/{user}/restore/target` restores it
//!   (204); PROPPATCH `nc:version-label` labels it; DELETE deletes it (204).
//!
//! Another user's URLs are 404.

use super::*;

const TRASH_ALLPROP: [PropName; 9] = [
    PropName::nc("trashbin-filename"),
    PropName::nc("trashbin-original-location"),
    PropName::nc("trashbin-deletion-time"),
    PropName::nc("trashbin-title"),
    PropName::nc("trashbin-deleted-by-id"),
    PropName::RESOURCETYPE,
    PropName::GETCONTENTLENGTH,
    PropName::oc("size"),
    PropName::oc("fileid"),
];

pub(super) fn routes(dav: Arc<Dav>) -> axum::Router {
    use axum::routing::any;
    axum::Router::new()
        .route("/remote.php/dav/trashbin/{user}/{*rest}", any(trash))
        .route("/remote.php/dav/versions/{user}/{*rest}", any(versions))
        .with_state(dav)
}

/// `NAME.dSTAMP` → (NAME, STAMP).
fn split_item(segment: &str) -> Option<(&str, i64)> {
    let (name, stamp) = segment.rsplit_once(".d")?;
    Some((name, stamp.parse().ok()?))
}

/// The user segment of `raw` after `root`, checked against the caller, and what follows.
fn own_rest<'a>(raw: &'a str, root: &str, who: &Identity) -> Result<(&'a str, &'a str), Response> {
    let after = raw.strip_prefix(root).ok_or_else(not_found)?;
    let (user, rest) = after.split_at(after.find('/').unwrap_or(after.len()));
    let name = dav::paths::decode_segment(user).map_err(|e| bad_request(&e.to_string()))?;
    if name != who.username {
        return Err(not_found());
    }
    Ok((user, rest))
}

/// Decoded segments of a path.
fn segments(rest: &str) -> Result<Vec<String>, Response> {
    rest.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| dav::paths::decode_segment(s).map_err(|e| bad_request(&e.to_string())))
        .collect()
}

async fn trash(State(dav): State<Arc<Dav>>, Caller(who): Caller, req: Request) -> Response {
    let result = serve_trash(&dav, &who, req).await;
    result.unwrap_or_else(|r| r)
}

async fn serve_trash(dav: &Dav, who: &Identity, req: Request) -> Result<Response, Response> {
    let raw = req.uri().path().to_owned();
    let (user, rest) = own_rest(&raw, "/remote.php/dav/trashbin/", who)?;
    let segs = segments(rest)?;
    let root = format!("/remote.php/dav/trashbin/{user}/trash");
    let method = req.method().as_str().to_owned();
    match (segs.first().map(String::as_str), method.as_str()) {
        (_, "OPTIONS") => return Ok(undo_options()),
        (Some("trash"), _) => {}
        (Some("restore"), "PROPFIND") => {
            let mut ms = Multistatus::new();
            let mut resp = ms.response(&format!("/remote.php/dav/trashbin/{user}/restore/"));
            resp.resourcetype(true);
            resp.finish();
            return Ok(multistatus(ms.finish()));
        }
        _ => return Err(not_found()),
    }
    let item = segs.get(1);
    let sub = format!("/{}", segs.get(2..).unwrap_or_default().join("/"));
    // The item's key, found by its Nextcloud name.
    let key = match item {
        None => None,
        Some(segment) => {
            let (name, stamp) = split_item(segment).ok_or_else(not_found)?;
            let found = dav
                .storage()
                .list_trash(ListTrashRequest {
                    by_name: name.to_owned(),
                    by_stamp: stamp,
                    ..Default::default()
                })
                .await
                .map_err(grpc_error)?
                .into_inner();
            Some(found.item.unwrap_or_default().key)
        }
    };
    match (method.as_str(), key) {
        ("PROPFIND", key) => list(dav, &root, item.map(String::as_str), key, &sub, req).await,
        ("MOVE", Some(key)) => {
            let dest = req
                .headers()
                .get("destination")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let restore_root = format!("/remote.php/dav/trashbin/{user}/restore/");
            if !dest.contains(&restore_root) || sub != "/" {
                return Err(dav_error(
                    StatusCode::FORBIDDEN,
                    "an item is restored by moving it into the restore folder",
                    None,
                ));
            }
            let restored = dav
                .storage()
                .restore_trash(RestoreTrashRequest {
                    key,
                    conflict: RestoreConflict::KeepBoth as i32,
                    ..Default::default()
                })
                .await
                .map_err(grpc_error)?
                .into_inner();
            let mut resp = StatusCode::CREATED.into_response();
            if let Some(node) = &restored.node {
                node_headers(resp.headers_mut(), node);
            }
            Ok(resp)
        }
        ("DELETE", key) => {
            dav.storage()
                .purge_trash(PurgeTrashRequest {
                    key: key.unwrap_or_default(),
                    path: sub,
                    ..Default::default()
                })
                .await
                .map_err(grpc_error)?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => Err(dav_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "the trash bin takes PROPFIND, MOVE (restore) and DELETE (purge)",
            None,
        )),
    }
}

fn trash_prop(resp: &mut dav::PropResponse<'_>, name: &PropName, e: &TrashEntry<'_>, by: &str) {
    match (name.ns.as_ref(), name.local.as_ref()) {
        (NC_NS, "trashbin-filename" | "trashbin-title") => resp.text(name, e.name),
        (NC_NS, "trashbin-original-location") => resp.text(name, &e.location),
        (NC_NS, "trashbin-deletion-time") => {
            resp.integer(name, e.deleted_ns.div_euclid(1_000_000_000));
        }
        (NC_NS, "trashbin-deleted-by-id") => resp.text(name, by),
        _ => super::trash_prop(resp, name, e),
    }
}

async fn list(
    dav: &Dav,
    root: &str,
    item_segment: Option<&str>,
    key: Option<String>,
    sub: &str,
    req: Request,
) -> Result<Response, Response> {
    let (depth, query) = finite_query(req).await?;
    let listing = dav
        .storage()
        .list_trash(ListTrashRequest {
            key: key.unwrap_or_default(),
            path: sub.to_owned(),
            ..Default::default()
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    let shown = TrashListing {
        root,
        item: item_segment,
        depth,
        query: &query,
    };
    Ok(shown.answer(
        &listing,
        |item| format!("{}.d{}", item.name, item.stamp),
        |resp, entry, item| {
            render(resp, &query, &TRASH_ALLPROP, |resp, p| {
                trash_prop(resp, p, entry, &item.deleted_by);
            });
        },
    ))
}

async fn versions(State(dav): State<Arc<Dav>>, Caller(who): Caller, req: Request) -> Response {
    let result = serve_versions(&dav, &who, req).await;
    result.unwrap_or_else(|r| r)
}

async fn serve_versions(dav: &Dav, who: &Identity, req: Request) -> Result<Response, Response> {
    let raw = req.uri().path().to_owned();
    let (user, rest) = own_rest(&raw, "/remote.php/dav/versions/", who)?;
    let segs = segments(rest)?;
    let method = req.method().as_str().to_owned();
    if method == "OPTIONS" {
        return Ok(undo_options());
    }
    let (Some("versions"), Some(file_id)) = (segs.first().map(String::as_str), segs.get(1)) else {
        return Err(not_found());
    };
    let file = Ref {
        node_id: file_id.clone(),
        ..Default::default()
    };
    let mut prefix = format!("/remote.php/dav/versions/{user}/versions/");
    dav::encode_path(file_id, &mut prefix);
    match (segs.get(2), segs.len(), method.as_str()) {
        (None, _, "PROPFIND") => list_versions(dav, &format!("{prefix}/"), file, req).await,
        (Some(key), 3, "GET" | "HEAD") => {
            let what = InitiateDownloadRequest {
                r#ref: Some(file),
                version_key: key.clone(),
                small_body: false,
            };
            download(dav, what, req, method == "GET").await
        }
        (Some(key), 3, "MOVE") => {
            let dest = req
                .headers()
                .get("destination")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !dest.contains(&format!("/remote.php/dav/versions/{user}/restore")) {
                return Err(dav_error(
                    StatusCode::FORBIDDEN,
                    "a version is restored by moving it to the restore folder",
                    None,
                ));
            }
            let node = dav
                .storage()
                .restore_version(RestoreVersionRequest {
                    r#ref: Some(file),
                    key: key.clone(),
                    lock_tokens: Vec::new(),
                })
                .await
                .map_err(grpc_error)?
                .into_inner();
            let mut resp = StatusCode::NO_CONTENT.into_response();
            node_headers(resp.headers_mut(), &node);
            Ok(resp)
        }
        (Some(key), 3, "DELETE") => {
            dav.storage()
                .delete_version(DeleteVersionRequest {
                    r#ref: Some(file),
                    key: key.clone(),
                })
                .await
                .map_err(grpc_error)?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (Some(key), 3, "PROPPATCH") => label(dav, &prefix, file, key, req).await,
        _ => Err(dav_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "versions take PROPFIND, GET, HEAD, MOVE (restore), PROPPATCH and DELETE",
            None,
        )),
    }
}

/// PROPPATCH of a version: only `nc:version-label` may be set or removed.
async fn label(
    dav: &Dav,
    prefix: &str,
    file: Ref,
    key: &str,
    req: Request,
) -> Result<Response, Response> {
    let body = xml_body(req).await?;
    let ops = dav::parse_proppatch(&body).map_err(|e| bad_request(&e.to_string()))?;
    let label_name = PropName::nc("version-label");
    let mut label = None;
    let mut names = Vec::new();
    for op in &ops {
        let (name, value) = match op {
            PropPatchOp::Set { name, value } => (name, value.clone()),
            PropPatchOp::Remove { name } => (name, String::new()),
        };
        if *name != label_name {
            return Err(dav_error(
                StatusCode::FORBIDDEN,
                "only nc:version-label can be set on a version",
                None,
            ));
        }
        label = Some(value);
        names.push(name);
    }
    let Some(label) = label else {
        return Err(bad_request("nothing to set"));
    };
    dav.storage()
        .set_version_label(SetVersionLabelRequest {
            r#ref: Some(file),
            key: key.to_owned(),
            label,
        })
        .await
        .map_err(grpc_error)?;
    let mut href = format!("{prefix}/");
    dav::encode_path(key, &mut href);
    let mut ms = Multistatus::new();
    let mut resp = ms.response(&href);
    resp.propstat(StatusCode::OK, names, None);
    resp.finish();
    Ok(multistatus(ms.finish()))
}
