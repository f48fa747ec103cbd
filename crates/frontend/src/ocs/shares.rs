//! The OCS share API, `/ocs/v{1,2}.php/apps/files_sharing/api/v1/…`, as ownCloud clients and
//! oCIS speak it: `shares` (list, create), `shares/{id}` (get, update, delete),
//! `shares/pending/{id}` (accept, decline) and `sharees` (whom one can share with). Answers
//! use [`crate::ocs`]'s envelope (JSON with `format=json`, XML otherwise) and ownCloud's field
//! names; the work is the sharing service's, reached through the gateway.
//!
//! Requests give their parameters as a form (`application/x-www-form-urlencoded`, what the
//! clients send) or JSON; `path` names a file in the caller's home, or under `/Shares/NAME`
//! in something shared with it (for resharing). Errors carry ownCloud's status codes: 400
//! bad input, 403 not allowed (more permissions than one holds, an existing share), 404 no
//! such file or share.

use std::collections::HashMap;

use arca_proto::ErrorKind;
use arca_proto::v1::sharing_client::SharingClient;
use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::*;
use arca_runtime::Caller;
use arca_transport::Channel;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use axum::routing::{get, post};
use http::{HeaderMap, Uri, header};
use serde_json::{Map, Value, json};

use super::{Ocs, code};
use crate::dates::{civil_from_days, days_from_civil};
use crate::webdav::jail;

use arca_proto::routes;
use arca_proto::sharing::share_type::{GROUP, LINK, SPACE_GROUP, SPACE_USER, USER};
use arca_proto::sharing::{Role, share_state};

pub(super) fn routes(gateway: Channel) -> axum::Router {
    let mut router = axum::Router::new();
    for v in ["v1", "v2"] {
        let base = format!("/ocs/{v}.php/apps/files_sharing/api/v1");
        router = router
            .route(&format!("{base}/shares"), get(list).post(create))
            .route(
                &format!("{base}/shares/{{id}}"),
                get(get_one).put(update).delete(remove),
            )
            .route(
                &format!("{base}/shares/pending/{{id}}"),
                post(accept).delete(decline),
            )
            .route(&format!("{base}/sharees"), get(sharees));
    }
    router.with_state(gateway)
}

/// Request parameters from the query and the body (form or JSON), later ones winning.
fn params(query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    if let Some(q) = query {
        form_into(q, &mut out);
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json {
        if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) {
            for (k, v) in map {
                let v = match v {
                    Value::String(s) => s,
                    Value::Null => continue,
                    other => other.to_string(),
                };
                out.insert(k, v);
            }
        }
    } else if let Ok(text) = std::str::from_utf8(body) {
        form_into(text, &mut out);
    }
    out
}

/// `a=1&b=x+y` (`+` is a space in forms, HTML §4.10.21.7).
fn form_into(text: &str, out: &mut HashMap<String, String>) {
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(&s.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        };
        out.insert(decode(k), decode(v));
    }
}

fn truthy(v: Option<&String>) -> bool {
    v.is_some_and(|v| matches!(v.as_str(), "true" | "1" | "yes"))
}

/// A gRPC failure with the share API's codes.
fn failure(ocs: Ocs, s: &tonic::Status) -> Response {
    let status = match ErrorKind::of(s) {
        ErrorKind::NotFound => code::PATH_NOT_FOUND,
        ErrorKind::PermissionDenied | ErrorKind::AlreadyExists => 403,
        ErrorKind::InvalidArgument => code::BAD_REQUEST,
        ErrorKind::Unauthenticated => code::UNAUTHORISED,
        _ => return ocs.status(s),
    };
    ocs.error(status, s.message())
}

fn bad(ocs: Ocs, message: &str) -> Response {
    ocs.error(code::BAD_REQUEST, message)
}

// ------------------------------------------------------------------------------- dates
// The day arithmetic is crate::dates'; the wording of OCS dates is this API's.

/// `expireDate`: `YYYY-MM-DD` (the link lasts through that day, UTC, as ownCloud means it)
/// or an RFC 3339 time (`2026-05-01T12:00:00Z`, `…+02:00`). Unix seconds; 0 for empty.
fn parse_expiry(v: &str) -> Option<i64> {
    let v = v.trim();
    if v.is_empty() {
        return Some(0);
    }
    let num = |s: &str| s.parse::<i64>().ok();
    let date = v.get(..10)?;
    let mut parts = date.split('-');
    let (y, m, d) = (
        num(parts.next()?)?,
        num(parts.next()?)?,
        num(parts.next()?)?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || date.as_bytes().get(4) != Some(&b'-') {
        return None;
    }
    let day = days_from_civil(y, m, d) * 86_400;
    let rest = &v[10..];
    if rest.is_empty() {
        return Some(day + 86_399);
    }
    // Time part: [T ]HH:MM:SS[.frac](Z|±HH:MM), or a bare time (then UTC).
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (h, mi, s) = (
        num(rest.get(0..2)?)?,
        num(rest.get(3..5)?)?,
        num(rest.get(6..8)?)?,
    );
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut tz = &rest[8..];
    if let Some(frac) = tz.strip_prefix('.') {
        tz = frac.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match tz {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match tz.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh = num(tz.get(1..3)?)?;
            let om = num(tz.get(4..6)?)?;
            sign * (oh * 3600 + om * 60)
        }
    };
    Some(day + h * 3600 + mi * 60 + s - offset)
}

/// `YYYY-MM-DD HH:MM:SS` (UTC), ownCloud's `expiration` format.
fn format_time(secs: i64) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

// ------------------------------------------------------------------------------- shares

/// Where a client-given path is: the caller's home, or inside a share mounted in its jail.
async fn reference(gateway: &Channel, path: &str) -> Result<Ref, Response> {
    let raw = crate::webdav::dav::encoded_path(path);
    let parsed = crate::webdav::dav::decode_path(&raw).map_err(|e| {
        crate::webdav::dav_error(http::StatusCode::BAD_REQUEST, &e.to_string(), None)
    })?;
    let loc = crate::webdav::Location {
        prefix: String::new(),
        space_id: String::new(),
        path: parsed,
        tokens: Vec::new(),
        base: String::new(),
    };
    match jail::enter(gateway, loc).await? {
        jail::Entered::Real(l) => Ok(Ref {
            space_id: l.space_id,
            path: l.path.as_str().to_owned(),
            node_id: String::new(),
        }),
        jail::Entered::Root(_) => Err(crate::webdav::dav_error(
            http::StatusCode::FORBIDDEN,
            "the Shares folder cannot be shared",
            None,
        )),
    }
}

async fn stat(gateway: &Channel, r: Ref) -> Result<Node, tonic::Status> {
    Ok(arca_proto::storage_client(gateway.clone())
        .stat(StatRequest {
            r#ref: Some(r),
            with_props: false,
            with_locks: false,
        })
        .await?
        .into_inner())
}

fn by_id(node_id: &str) -> Ref {
    Ref {
        space_id: String::new(),
        path: String::new(),
        node_id: node_id.to_owned(),
    }
}

/// The public URL of a link: the scheme and host the client used.
fn link_url(headers: &HeaderMap, token: &str) -> String {
    // The Host header is required of HTTP/1.1 clients; without a usable one the URL names
    // this machine rather than whatever a client put there.
    let base = crate::headers::public_base(headers, &Uri::default())
        .unwrap_or_else(|| "http://localhost".to_owned());
    format!("{base}{}/{token}", routes::PUBLIC_LINK_BROWSER)
}

/// One share in ownCloud's fields. `node` is the shared node as the caller sees it, if it
/// could be stat'ed; `received` says the caller is its recipient (paths are then in its jail).
fn share_json(s: &Share, node: Option<&Node>, received: bool, headers: &HeaderMap) -> Value {
    let item_type = if s.is_dir { "folder" } else { "file" };
    let mimetype = if s.is_dir {
        "httpd/unix-directory"
    } else {
        crate::webdav::content_type(&s.target)
    };
    let path = if received {
        let name = if s.mount.is_empty() {
            &s.target
        } else {
            &s.mount
        };
        format!("/{}/{name}", jail::SHARES)
    } else {
        node.map_or_else(|| format!("/{}", s.target), |n| n.path.clone())
    };
    let file_target = if received {
        path.clone()
    } else {
        format!("/{}", s.target)
    };
    let null_or = |v: &str| {
        if v.is_empty() {
            Value::Null
        } else {
            Value::String(v.to_owned())
        }
    };
    let mut m = Map::new();
    m.insert("id".into(), json!(s.id));
    m.insert("share_type".into(), json!(s.share_type));
    m.insert("uid_owner".into(), json!(s.creator_name));
    m.insert("displayname_owner".into(), json!(s.creator_display_name));
    m.insert("additional_info_owner".into(), json!(""));
    m.insert("permissions".into(), json!(s.permissions));
    m.insert("stime".into(), json!(s.created));
    m.insert("parent".into(), Value::Null);
    m.insert(
        "expiration".into(),
        if s.expires == 0 {
            Value::Null
        } else {
            json!(format_time(s.expires))
        },
    );
    m.insert("token".into(), null_or(&s.token));
    m.insert("uid_file_owner".into(), json!(s.owner_name));
    m.insert("displayname_file_owner".into(), json!(s.owner_display_name));
    m.insert("additional_info_file_owner".into(), json!(""));
    m.insert("state".into(), json!(s.state));
    m.insert("path".into(), json!(path));
    m.insert("item_type".into(), json!(item_type));
    m.insert("mimetype".into(), json!(mimetype));
    m.insert("storage_id".into(), json!(s.space_id));
    m.insert("storage".into(), json!(0));
    m.insert("item_source".into(), json!(s.node_id));
    m.insert("file_source".into(), json!(s.node_id));
    m.insert(
        "file_parent".into(),
        json!(node.map(|n| n.parent_id.clone()).unwrap_or_default()),
    );
    m.insert("file_target".into(), json!(file_target));
    match s.share_type {
        LINK => {
            // ownCloud shows that a link has a password, never the password.
            m.insert(
                "share_with".into(),
                if s.has_password {
                    json!("***redacted***")
                } else {
                    Value::Null
                },
            );
            m.insert("share_with_displayname".into(), Value::Null);
            m.insert("name".into(), json!(s.name));
            m.insert("url".into(), json!(link_url(headers, &s.token)));
        }
        _ => {
            m.insert("share_with".into(), json!(s.grantee_name));
            m.insert(
                "share_with_displayname".into(),
                json!(s.grantee_display_name),
            );
            m.insert("share_with_additional_info".into(), json!(""));
            m.insert("name".into(), json!(s.name));
        }
    }
    m.insert("mail_send".into(), json!(0));
    m.insert("hide_download".into(), json!(0));
    Value::Object(m)
}

/// [`share_json`] with the node looked up (a node the caller can no longer see is left out).
async fn render(gateway: &Channel, s: &Share, received: bool, headers: &HeaderMap) -> Value {
    let node = if received {
        None
    } else {
        stat(gateway, by_id(&s.node_id)).await.ok()
    };
    share_json(s, node.as_ref(), received, headers)
}

/// Permissions from `permissions`, or a `role` (oCIS), or `publicUpload` (older clients).
fn asked_permissions(p: &HashMap<String, String>, share_type: i32) -> Result<u32, String> {
    if let Some(v) = p.get("permissions").filter(|v| !v.is_empty()) {
        return v
            .parse::<u32>()
            .map_err(|_| format!("permissions {v:?} is not a number"));
    }
    if let Some(role) = p.get("role").filter(|v| !v.is_empty()) {
        return Role::for_share(role, share_type == LINK)
            .map(|r| r.permissions)
            .ok_or_else(|| format!("unknown role {role:?}"));
    }
    if share_type == LINK && truthy(p.get("publicUpload")) {
        return Ok(arca_proto::sharing::EDITOR.permissions);
    }
    Ok(0)
}

/// `GET …/shares`: the caller's shares, or with `shared_with_me=true` those made with it.
async fn list(
    ocs: Ocs,
    State(gw): State<Channel>,
    Caller(_): Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let p = params(query.as_deref(), &headers, &[]);
    let with_me = truthy(p.get("shared_with_me"));
    let mut req = ListSharesRequest {
        shared_with_me: with_me,
        node_id: String::new(),
        reshares: truthy(p.get("reshares")),
        // ownCloud lists accepted received shares unless asked for another state or `all`.
        state: match p.get("state").map(String::as_str) {
            Some("all") => share_state::ANY,
            Some(v) => v.parse().unwrap_or(share_state::ACCEPTED),
            None => share_state::ACCEPTED,
        },
        skip_names: false,
    };
    let subfiles = truthy(p.get("subfiles"));
    let mut folder = None;
    if let Some(path) = p.get("path").filter(|v| !v.is_empty()) {
        let r = match p.get("space_ref").filter(|v| !v.is_empty()) {
            Some(space) => Ok(in_space(space, path)),
            None => reference(&gw, path).await,
        };
        let r = match r {
            Ok(r) => r,
            Err(_) => {
                return ocs.error(
                    code::PATH_NOT_FOUND,
                    "wrong path, file/folder doesn't exist",
                );
            }
        };
        let node = match stat(&gw, r).await {
            Ok(n) => n,
            Err(s) => return failure(ocs, &s),
        };
        if subfiles {
            if !node.is_dir {
                return bad(ocs, "subfiles needs a folder");
            }
            folder = Some(node.id);
        } else {
            req.node_id = node.id;
        }
    }
    let shares = match SharingClient::new(gw.clone()).list_shares(req).await {
        Ok(r) => r.into_inner().shares,
        Err(s) => return failure(ocs, &s),
    };
    let mut out = Vec::with_capacity(shares.len());
    for s in &shares {
        if let Some(parent) = &folder {
            // Shares of the folder's direct members only.
            match stat(&gw, by_id(&s.node_id)).await {
                Ok(n) if &n.parent_id == parent => {
                    out.push(share_json(s, Some(&n), false, &headers));
                }
                _ => {}
            }
            continue;
        }
        out.push(render(&gw, s, with_me, &headers).await);
    }
    ocs.ok(Value::Array(out))
}

/// The reference of `path` inside the space `space_ref` names (`PROVIDER$SPACE`, or a resource
/// id `PROVIDER$SPACE!NODE` of which the space is taken).
fn in_space(space_ref: &str, path: &str) -> Ref {
    let space_id = space_ref.split('!').next().unwrap_or_default();
    Ref {
        space_id: space_id.to_owned(),
        path: format!("/{}", path.trim_start_matches('/')),
        node_id: String::new(),
    }
}

/// `shareType=7|8` with `space_ref`: oCIS's OCS way of adding a user or a group to a project
/// space, with a `role` (manager, space-editor, space-viewer) or `permissions` (1 viewer, 15
/// editor, 31 manager). The same membership as Graph's `root/invite`.
async fn add_space_member(
    ocs: Ocs,
    gw: &Channel,
    p: &HashMap<String, String>,
    share_type: i32,
) -> Response {
    let Some(space_ref) = p.get("space_ref").filter(|v| !v.is_empty()) else {
        return bad(ocs, "a space membership needs space_ref");
    };
    let Some(share_with) = p.get("shareWith").filter(|v| !v.is_empty()) else {
        return bad(ocs, "please specify shareWith");
    };
    let role = match (p.get("role"), p.get("permissions")) {
        (Some(role), _) if !role.is_empty() => Role::for_space(role),
        (_, Some(bits)) if !bits.is_empty() => arca_proto::sharing::ROLES
            .into_iter()
            .filter(|r| r.space_only)
            .find(|r| bits.parse::<u32>().is_ok_and(|b| b == r.permissions)),
        _ => Some(arca_proto::sharing::SPACE_VIEWER),
    };
    let Some(role) = role else {
        return bad(
            ocs,
            "a space member's role is manager, space-editor or space-viewer (permissions 31, 15 or 1)",
        );
    };
    let (kind, member) = if share_type == SPACE_USER {
        let user = UsersClient::new(gw.clone())
            .get_user(GetUserRequest {
                id: String::new(),
                username: share_with.clone(),
            })
            .await;
        ("user", user.map(|u| u.into_inner().id))
    } else {
        let group = UsersClient::new(gw.clone())
            .get_group(GetGroupRequest {
                id: String::new(),
                display_name: share_with.clone(),
            })
            .await;
        ("group", group.map(|g| g.into_inner().id))
    };
    let member = match member {
        Ok(id) => id,
        Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => {
            return ocs.error(code::NOT_FOUND, &format!("no such {kind} {share_with:?}"));
        }
        Err(s) => return failure(ocs, &s),
    };
    let space_id = in_space(space_ref, "").space_id;
    let set = arca_proto::storage_client(gw.clone())
        .set_space_member(SetSpaceMemberRequest {
            space_id: space_id.clone(),
            member: Some(SpaceMember {
                kind: kind.to_owned(),
                id: member,
                role: role.name.to_owned(),
                created_ns: 0,
            }),
        })
        .await;
    match set {
        Ok(m) => ocs.ok(json!({
            "id": format!("{}:{}", if kind == "group" { "g" } else { "u" }, m.get_ref().id),
            "share_type": share_type,
            "share_with": share_with,
            "permissions": role.permissions,
            "role": role.name,
            "space_id": space_id,
        })),
        Err(s) => failure(ocs, &s),
    }
}

/// `POST …/shares`.
async fn create(
    ocs: Ocs,
    State(gw): State<Channel>,
    Caller(_): Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let p = params(query.as_deref(), &headers, &body);
    let share_type = match p.get("shareType").map(|v| v.parse::<i32>()) {
        Some(Ok(t @ (USER | GROUP | LINK))) => t,
        Some(Ok(t @ (SPACE_USER | SPACE_GROUP))) => {
            return add_space_member(ocs, &gw, &p, t).await;
        }
        Some(_) => return bad(ocs, "unknown share type"),
        None => return bad(ocs, "please specify a shareType"),
    };
    let Some(path) = p.get("path").filter(|v| !v.is_empty()) else {
        return bad(ocs, "please specify a file or folder path");
    };
    let share_with = p.get("shareWith").cloned().unwrap_or_default();
    if share_type != LINK && share_with.is_empty() {
        return bad(ocs, "please specify shareWith");
    }
    let permissions = match asked_permissions(&p, share_type) {
        Ok(v) => v,
        Err(e) => return bad(ocs, &e),
    };
    let expires = match p.get("expireDate").map(|v| parse_expiry(v)) {
        None => 0,
        Some(Some(t)) => t,
        Some(None) => return bad(ocs, "invalid expireDate, use YYYY-MM-DD or RFC 3339"),
    };
    let r = match p.get("space_ref").filter(|v| !v.is_empty()) {
        // A file or folder of a project space: oCIS's clients name the space and the path in
        // it.
        Some(space) => in_space(space, path),
        None => match reference(&gw, path).await {
            Ok(r) => r,
            Err(_) => {
                return ocs.error(
                    code::PATH_NOT_FOUND,
                    "wrong path, file/folder doesn't exist",
                );
            }
        },
    };
    let created = SharingClient::new(gw.clone())
        .create_share(CreateShareRequest {
            r#ref: Some(r),
            node: None,
            share_type,
            share_with,
            permissions,
            password: p.get("password").cloned().unwrap_or_default(),
            expires,
            name: p.get("name").cloned().unwrap_or_default(),
        })
        .await;
    match created {
        Ok(s) => {
            let s = s.into_inner();
            ocs.ok(render(&gw, &s, false, &headers).await)
        }
        Err(s) => failure(ocs, &s),
    }
}

/// The share `id` as the caller sees it: (share, received by the caller).
async fn one(
    gw: &Channel,
    id: &str,
    who: &arca_runtime::Identity,
) -> Result<(Share, bool), tonic::Status> {
    let s = SharingClient::new(gw.clone())
        .get_share(GetShareRequest { id: id.to_owned() })
        .await?
        .into_inner();
    let received = s.creator_id != who.id && s.owner_id != who.id;
    Ok((s, received))
}

/// `GET …/shares/{id}`: a list of one, as ownCloud answers.
async fn get_one(
    ocs: Ocs,
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    match one(&gw, &id, &who).await {
        Ok((s, received)) => ocs.ok(json!([render(&gw, &s, received, &headers).await])),
        Err(s) => failure(ocs, &s),
    }
}

/// `PUT …/shares/{id}`: permissions, password, expireDate, name (each optional).
async fn update(
    ocs: Ocs,
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let p = params(query.as_deref(), &headers, &body);
    let mut req = UpdateShareRequest {
        id,
        ..Default::default()
    };
    if p.contains_key("permissions") || p.contains_key("role") || p.contains_key("publicUpload") {
        // The type decides what `publicUpload` means; links are the only ones with it.
        match asked_permissions(&p, LINK) {
            Ok(0) => {}
            Ok(v) => req.permissions = Some(v),
            Err(e) => return bad(ocs, &e),
        }
    }
    if let Some(pw) = p.get("password") {
        req.password = Some(pw.clone());
    }
    if let Some(e) = p.get("expireDate") {
        match parse_expiry(e) {
            Some(t) => req.expires = Some(t),
            None => return bad(ocs, "invalid expireDate, use YYYY-MM-DD or RFC 3339"),
        }
    }
    if let Some(n) = p.get("name") {
        req.name = Some(n.clone());
    }
    if req.permissions.is_none()
        && req.password.is_none()
        && req.expires.is_none()
        && req.name.is_none()
    {
        return bad(ocs, "nothing to update");
    }
    match SharingClient::new(gw.clone()).update_share(req).await {
        Ok(s) => {
            let s = s.into_inner();
            ocs.ok(render(&gw, &s, false, &headers).await)
        }
        Err(s) => failure(ocs, &s),
    }
}

/// `DELETE …/shares/{id}`: the creator or owner removes it; a recipient declines it.
async fn remove(
    ocs: Ocs,
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path(id): Path<String>,
) -> Response {
    match SharingClient::new(gw)
        .delete_share(DeleteShareRequest { id })
        .await
    {
        Ok(_) => ocs.ok(Value::Null),
        Err(s) => failure(ocs, &s),
    }
}

async fn set_state(ocs: Ocs, gw: Channel, id: String, state: i32, headers: &HeaderMap) -> Response {
    match SharingClient::new(gw.clone())
        .set_share_state(SetShareStateRequest { id, state })
        .await
    {
        Ok(s) => {
            let s = s.into_inner();
            ocs.ok(json!([render(&gw, &s, true, headers).await]))
        }
        Err(s) => failure(ocs, &s),
    }
}

/// `POST …/shares/pending/{id}`: accept.
async fn accept(
    ocs: Ocs,
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    set_state(ocs, gw, id, share_state::ACCEPTED, &headers).await
}

/// `DELETE …/shares/pending/{id}`: decline.
async fn decline(
    ocs: Ocs,
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    set_state(ocs, gw, id, share_state::DECLINED, &headers).await
}

/// `GET …/sharees?search=`: users and groups whose name or display name contains `search`
/// (case-insensitively), the caller excepted; `exact` holds those matching it whole.
async fn sharees(
    ocs: Ocs,
    State(gw): State<Channel>,
    Caller(who): Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let p = params(query.as_deref(), &headers, &[]);
    let search = p.get("search").cloned().unwrap_or_default().to_lowercase();
    let per_page = p
        .get("perPage")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(200)
        .clamp(1, 1000);
    let mut users_client = UsersClient::new(gw);
    let users = match users_client.list_users(ListUsersRequest {}).await {
        Ok(r) => r.into_inner().users,
        Err(s) => return failure(ocs, &s),
    };
    let groups = match users_client.list_groups(ListGroupsRequest {}).await {
        Ok(r) => r.into_inner().groups,
        Err(s) => return failure(ocs, &s),
    };
    let hit = |name: &str, display: &str| {
        name.to_lowercase().contains(&search) || display.to_lowercase().contains(&search)
    };
    let exact = |name: &str, display: &str| {
        name.to_lowercase() == search || display.to_lowercase() == search
    };
    let (mut exact_users, mut other_users) = (Vec::new(), Vec::new());
    for u in users.iter().filter(|u| u.id != who.id) {
        if !hit(&u.username, &u.display_name) {
            continue;
        }
        let entry = json!({
            "label": u.display_name,
            "value": {"shareType": USER, "shareWith": u.username, "shareWithAdditionalInfo": u.mail},
        });
        if exact(&u.username, &u.display_name) {
            exact_users.push(entry);
        } else {
            other_users.push(entry);
        }
    }
    let (mut exact_groups, mut other_groups) = (Vec::new(), Vec::new());
    for g in &groups {
        if !hit(&g.display_name, &g.display_name) {
            continue;
        }
        let entry = json!({
            "label": g.display_name,
            "value": {"shareType": GROUP, "shareWith": g.display_name},
        });
        if exact(&g.display_name, &g.display_name) {
            exact_groups.push(entry);
        } else {
            other_groups.push(entry);
        }
    }
    other_users.truncate(per_page);
    other_groups.truncate(per_page);
    ocs.ok(json!({
        "exact": {"users": exact_users, "groups": exact_groups, "remotes": []},
        "users": other_users,
        "groups": other_groups,
        "remotes": [],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(days_from_civil(2024, 2, 29)), (2024, 2, 29));
        assert_eq!(parse_expiry("2030-01-02"), Some(1_893_628_799));
        assert_eq!(format_time(1_893_628_799), "2030-01-02 23:59:59");
        assert_eq!(parse_expiry("2030-01-02T00:00:00Z"), Some(1_893_542_400));
        assert_eq!(
            parse_expiry("2030-01-02T02:00:00+02:00"),
            Some(1_893_542_400)
        );
        assert_eq!(
            parse_expiry("2030-01-02T00:00:00.123Z"),
            Some(1_893_542_400)
        );
        assert_eq!(parse_expiry(""), Some(0));
        assert_eq!(parse_expiry("tomorrow"), None);
        assert_eq!(parse_expiry("2030-13-01"), None);
    }

    #[test]
    fn forms_and_json_bodies() {
        let mut h = HeaderMap::new();
        let p = params(
            Some("format=json"),
            &h,
            b"path=%2FDocs+1&shareType=0&shareWith=bob",
        );
        assert_eq!(p["path"], "/Docs 1");
        assert_eq!(p["shareType"], "0");
        assert_eq!(p["format"], "json");
        h.insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        let p = params(None, &h, br#"{"path":"/a","shareType":3,"permissions":4}"#);
        assert_eq!(p["shareType"], "3");
        assert_eq!(p["permissions"], "4");
    }

    #[test]
    fn permissions_from_roles() {
        let p = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<HashMap<_, _>>()
        };
        assert_eq!(asked_permissions(&p(&[("role", "editor")]), USER), Ok(15));
        assert_eq!(
            asked_permissions(&p(&[("permissions", "17")]), USER),
            Ok(17)
        );
        assert_eq!(
            asked_permissions(&p(&[("publicUpload", "true")]), LINK),
            Ok(15)
        );
        assert_eq!(asked_permissions(&p(&[]), USER), Ok(0));
        assert!(asked_permissions(&p(&[("permissions", "x")]), USER).is_err());
    }
}
