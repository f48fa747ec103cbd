//! The libregraph drives API (`/graph/{v1.0,v1beta1}/me/drives`, `…/drives[/{id}]`, and a
//! project drive's members at `…/drives/{id}/root/permissions` and `…/root/invite`): spaces as
//! drives, in oCIS's field names (shared/protocol/samples/graph-*.json).
//!
//! A drive's id is its space id (`PROVIDER$SPACE`), exactly what `/dav/spaces/{id}` takes, and
//! `root.webDavUrl` is that URL made absolute from the request's Host (and
//! `X-Forwarded-Proto`). Admins create project drives and manage every one; a drive's managers
//! rename it, disable it (DELETE), restore it (PATCH with `Restore: T`), purge it (DELETE with
//! `Purge: T`, once disabled) and manage its members (users and groups with oCIS's Manager,
//! Space Editor and Space Viewer roles); everyone lists the drives they may use. The storage
//! provider checks every permission again.

// As in graph.rs: the `Err` side is the finished HTTP answer, built once per failed request.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;

use arca_proto::ErrorKind;
use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::*;
use arca_runtime::{Caller, Identity};
use arca_transport::Channel;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use http::{HeaderMap, StatusCode, Uri};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use arca_proto::sharing::{MANAGER, Role as SharingRole, SPACE_EDITOR, SPACE_VIEWER};

use super::{error, grpc_error, parse};
use crate::dates::civil_from_days;

pub(super) fn routes(gateway: Channel) -> axum::Router {
    let mut router = axum::Router::new();
    // oCIS serves drives under both versions; clients use either.
    for v in ["v1.0", "v1beta1"] {
        router = router
            .route(&format!("/graph/{v}/me/drives"), get(my_drives))
            .route(&format!("/graph/{v}/drives"), get(all_drives).post(create))
            .route(
                &format!("/graph/{v}/drives/{{id}}"),
                get(read).patch(update).delete(remove),
            )
            .route(
                &format!("/graph/{v}/drives/{{id}}/root/permissions"),
                get(permissions),
            )
            .route(
                &format!("/graph/{v}/drives/{{id}}/root/invite"),
                post(invite),
            )
            .route(
                &format!("/graph/{v}/drives/{{id}}/root/permissions/{{perm}}"),
                patch(change_permission).delete(remove_permission),
            );
    }
    router.with_state(gateway)
}

fn forbidden(message: &str) -> Response {
    error(StatusCode::FORBIDDEN, "accessDenied", message)
}

/// `scheme://host` of the request, for absolute URLs in answers; empty (so URLs stay
/// relative) when the request names no usable host.
fn base_url(headers: &HeaderMap, uri: &Uri) -> String {
    crate::headers::public_base(headers, uri).unwrap_or_default()
}

/// RFC 3339 in UTC with nanoseconds, as oCIS writes `lastModifiedDateTime`.
fn rfc3339(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// oCIS's quota states: below 75 % normal, below 90 % nearing, below 100 % critical.
fn quota_state(total: u64, used: u64) -> &'static str {
    if total == 0 {
        return "normal";
    }
    let percent = used as f64 * 100.0 / total as f64;
    if percent >= 100.0 {
        "exceeded"
    } else if percent >= 90.0 {
        "critical"
    } else if percent >= 75.0 {
        "nearing"
    } else {
        "normal"
    }
}

/// Login and display names of the users owning drives, by user id.
type Names = HashMap<String, (String, String)>;

/// The names a drive listing needs: the caller's own, and for admins everyone's (one call).
async fn owner_names(gw: &Channel, who: &Identity, spaces: &[Space]) -> Names {
    let mut names = Names::new();
    names.insert(
        who.id.clone(),
        (who.username.clone(), who.display_name.clone()),
    );
    let others = spaces.iter().any(|s| s.owner_id != who.id);
    if others && who.admin {
        match UsersClient::new(gw.clone())
            .list_users(ListUsersRequest {})
            .await
        {
            Ok(r) => {
                for u in r.into_inner().users {
                    names.insert(u.id, (u.username, u.display_name));
                }
            }
            // Names are decoration: the drives still list, with ids where names would be.
            Err(s) => tracing::warn!(error = %s.message(), "listing users for drive owners"),
        }
    }
    names
}

/// One drive in libregraph's shape; `members` are a project drive's `root.permissions`.
fn drive_json(s: &Space, names: &Names, base: &str, members: Option<Vec<Value>>) -> Value {
    let personal = s.kind == "personal";
    let (login, display) = names
        .get(&s.owner_id)
        .cloned()
        .unwrap_or_else(|| (s.owner_id.clone(), String::new()));
    let display_or_login = if display.is_empty() {
        login.clone()
    } else {
        display.clone()
    };
    let name = if personal {
        display_or_login.clone()
    } else {
        s.name.clone()
    };
    let alias = if personal {
        format!("personal/{login}")
    } else {
        s.alias.clone()
    };
    // As in oCIS, a project drive's owner is the space itself; its managers are in
    // `root.permissions`.
    let owner_id = if personal {
        s.owner_id.clone()
    } else {
        s.id.split_once('$')
            .map_or(s.id.clone(), |(_, id)| id.to_owned())
    };
    let remaining = if s.quota == 0 {
        // Unlimited, written as oCIS does.
        i64::MAX as u64
    } else {
        s.quota.saturating_sub(s.used)
    };
    let modified = if s.root_mtime_ns != 0 {
        s.root_mtime_ns
    } else {
        s.mtime_ns
    };
    let mut root = Map::new();
    root.insert("id".into(), json!(s.id));
    root.insert("eTag".into(), json!(format!("\"{}\"", s.etag)));
    root.insert(
        "webDavUrl".into(),
        json!(format!("{base}/dav/spaces/{}", s.id)),
    );
    if let Some(members) = members {
        root.insert("permissions".into(), Value::Array(members));
    }
    if s.disabled {
        root.insert("deleted".into(), json!({"state": "trashed"}));
    }
    let mut d = Map::new();
    d.insert("id".into(), json!(s.id));
    d.insert("driveType".into(), json!(s.kind));
    d.insert("driveAlias".into(), json!(alias));
    d.insert("name".into(), json!(name));
    if !s.description.is_empty() {
        d.insert("description".into(), json!(s.description));
    }
    d.insert("lastModifiedDateTime".into(), json!(rfc3339(modified)));
    d.insert(
        "owner".into(),
        json!({"user": {"id": owner_id, "displayName": ""}}),
    );
    d.insert(
        "quota".into(),
        json!({
            "total": s.quota,
            "used": s.used,
            "remaining": remaining,
            "state": quota_state(s.quota, s.used),
            // arca's own, beside oCIS's fields: what the trash and the file versions hold
            // (bytes; outside the quota).
            "trash": s.trash_bytes,
            "trashItems": s.trash_items,
            "versions": s.version_bytes,
            "versionCount": s.version_count,
        }),
    );
    d.insert("root".into(), Value::Object(root));
    d.insert("webUrl".into(), json!(format!("{base}/f/{}", s.id)));
    Value::Object(d)
}

/// Names of the users and groups among `members`, by (kind, id): one lookup each (a few per
/// drive); a member that cannot be looked up keeps its id as its name.
async fn member_names(gw: &Channel, members: &[SpaceMember]) -> HashMap<(String, String), String> {
    let mut out = HashMap::new();
    for m in members {
        let key = (m.kind.clone(), m.id.clone());
        if out.contains_key(&key) {
            continue;
        }
        let name = if m.kind == "group" {
            UsersClient::new(gw.clone())
                .get_group(GetGroupRequest {
                    id: m.id.clone(),
                    display_name: String::new(),
                })
                .await
                .map(|g| g.into_inner().display_name)
        } else {
            UsersClient::new(gw.clone())
                .get_user(GetUserRequest {
                    id: m.id.clone(),
                    username: String::new(),
                })
                .await
                .map(|u| {
                    let u = u.into_inner();
                    if u.display_name.is_empty() {
                        u.username
                    } else {
                        u.display_name
                    }
                })
        };
        out.insert(key, name.unwrap_or_else(|_| m.id.clone()));
    }
    out
}

/// A membership's permission id, as oCIS names them: `u:{user id}` or `g:{group id}`.
fn permission_id(m: &SpaceMember) -> String {
    let prefix = if m.kind == "group" { "g" } else { "u" };
    format!("{prefix}:{}", m.id)
}

/// (kind, id) of a permission id.
fn parse_permission_id(perm: &str) -> Option<(&'static str, &str)> {
    match perm.split_once(':')? {
        ("u", id) if !id.is_empty() => Some(("user", id)),
        ("g", id) if !id.is_empty() => Some(("group", id)),
        _ => None,
    }
}

/// One membership in libregraph's shape.
fn permission_json(m: &SpaceMember, names: &HashMap<(String, String), String>) -> Value {
    let name = names
        .get(&(m.kind.clone(), m.id.clone()))
        .cloned()
        .unwrap_or_else(|| m.id.clone());
    let grantee = if m.kind == "group" {
        json!({"group": {"id": m.id, "displayName": name}})
    } else {
        json!({"user": {"@libre.graph.userType": "Member", "id": m.id, "displayName": name}})
    };
    let role = SharingRole::for_space(&m.role).map_or("", |r| r.graph_id);
    json!({
        "id": permission_id(m),
        "roles": [role],
        "grantedToV2": grantee,
        "grantedToIdentities": [grantee],
    })
}

/// The members of a project drive as `root.permissions`; `None` for personal drives and when
/// the caller may not see them.
async fn drive_permissions(gw: &Channel, s: &Space) -> Option<Vec<Value>> {
    if s.kind != "project" {
        return None;
    }
    let members = arca_proto::storage_client(gw.clone())
        .list_space_members(ListSpaceMembersRequest {
            space_id: s.id.clone(),
        })
        .await
        .ok()?
        .into_inner()
        .members;
    let names = member_names(gw, &members).await;
    Some(members.iter().map(|m| permission_json(m, &names)).collect())
}

/// `$filter` and `$orderby` of a drive listing, in the subset oCIS's clients send.
#[derive(Deserialize, Default)]
struct ListQuery {
    #[serde(rename = "$filter")]
    filter: Option<String>,
    #[serde(rename = "$orderby")]
    orderby: Option<String>,
}

/// Keeps the drives `filter` selects: `driveType eq 'project'` or `id eq '…'`.
fn apply_filter(spaces: &mut Vec<Space>, filter: &str) -> Result<(), Response> {
    let bad = || {
        error(
            StatusCode::BAD_REQUEST,
            "invalidRequest",
            "$filter: use driveType eq 'personal' | 'project', or id eq '…'",
        )
    };
    let mut words = filter.trim().splitn(3, ' ');
    let (field, op, value) = (words.next(), words.next(), words.next());
    let value = value
        .map(str::trim)
        .and_then(|v| v.strip_prefix('\'')?.strip_suffix('\''))
        .ok_or_else(bad)?;
    if op != Some("eq") {
        return Err(bad());
    }
    match field {
        Some("driveType") => spaces.retain(|s| s.kind == value),
        Some("id") => spaces.retain(|s| s.id == value),
        _ => return Err(bad()),
    }
    Ok(())
}

/// Sorts by `orderby`: `name` or `lastModifiedDateTime`, then `asc` (the default) or `desc`.
fn apply_orderby(spaces: &mut [Space], orderby: &str) -> Result<(), Response> {
    let bad = || {
        error(
            StatusCode::BAD_REQUEST,
            "invalidRequest",
            "$orderby: use name or lastModifiedDateTime, then asc or desc",
        )
    };
    let mut words = orderby.split_whitespace();
    let field = words.next();
    let desc = match (words.next(), words.next()) {
        (None | Some("asc"), None) => false,
        (Some("desc"), None) => true,
        _ => return Err(bad()),
    };
    match field {
        Some("name") => spaces.sort_by_key(|s| s.name.to_lowercase()),
        Some("lastModifiedDateTime") => spaces.sort_by_key(|s| {
            if s.root_mtime_ns != 0 {
                s.root_mtime_ns
            } else {
                s.mtime_ns
            }
        }),
        _ => return Err(bad()),
    }
    if desc {
        spaces.reverse();
    }
    Ok(())
}

async fn list(
    gw: Channel,
    who: Identity,
    all: bool,
    query: ListQuery,
    headers: &HeaderMap,
    uri: &Uri,
) -> Response {
    let mut spaces = match arca_proto::storage_client(gw.clone())
        .list_spaces(ListSpacesRequest {
            all,
            with_usage: true,
        })
        .await
    {
        Ok(r) => r.into_inner().spaces,
        Err(s) => return grpc_error(s),
    };
    // Personal drives first, as oCIS lists them; otherwise in the provider's (creation) order.
    spaces.sort_by_key(|s| s.kind != "personal");
    if let Some(filter) = &query.filter
        && let Err(r) = apply_filter(&mut spaces, filter)
    {
        return r;
    }
    if let Some(orderby) = &query.orderby
        && let Err(r) = apply_orderby(&mut spaces, orderby)
    {
        return r;
    }
    let names = owner_names(&gw, &who, &spaces).await;
    let base = base_url(headers, uri);
    let mut value = Vec::with_capacity(spaces.len());
    for s in &spaces {
        let members = drive_permissions(&gw, s).await;
        value.push(drive_json(s, &names, &base, members));
    }
    Json(json!({ "value": value })).into_response()
}

/// `GET /graph/v1.0/me/drives`: the caller's personal drive and the project drives they are a
/// member of.
async fn my_drives(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    list(gw, who, false, query, &headers, &uri).await
}

/// `GET /graph/v1.0/drives`: every drive for admins, every project drive (and their own) for
/// space admins, the same as `me/drives` for others.
async fn all_drives(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let all = who.manages_spaces();
    list(gw, who, all, query, &headers, &uri).await
}

#[derive(Deserialize)]
struct QuotaBody {
    #[serde(default)]
    total: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewDrive {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    quota: Option<QuotaBody>,
    #[serde(default)]
    drive_type: Option<String>,
}

/// `POST /graph/v1.0/drives` (admins and space admins): a new project drive, 201, with the caller its manager.
async fn create(
    State(gw): State<Channel>,
    Caller(who): Caller,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    if !who.manages_spaces() {
        return forbidden("only admins and space admins create drives");
    }
    let new: NewDrive = match parse(&body) {
        Ok(n) => n,
        Err(r) => return r,
    };
    if new.drive_type.as_deref().is_some_and(|t| t != "project") {
        return error(
            StatusCode::BAD_REQUEST,
            "invalidRequest",
            "only project drives can be created",
        );
    }
    if new.name.trim().is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalidRequest",
            "a drive needs a name",
        );
    }
    let created = arca_proto::storage_client(gw.clone())
        .create_space(CreateSpaceRequest {
            name: new.name,
            quota: new.quota.and_then(|q| q.total).unwrap_or(0),
            description: new.description.unwrap_or_default(),
        })
        .await;
    match created {
        Ok(s) => {
            let s = s.into_inner();
            let names = owner_names(&gw, &who, std::slice::from_ref(&s)).await;
            let members = drive_permissions(&gw, &s).await;
            let drive = drive_json(&s, &names, &base_url(&headers, &uri), members);
            (StatusCode::CREATED, Json(drive)).into_response()
        }
        Err(s) => grpc_error(s),
    }
}

/// A drive by id: any the caller may use; for admins also other users' personal drives,
/// which `drives` lists for them.
async fn find(gw: &Channel, who: &Identity, id: &str) -> Result<Space, Response> {
    let found = arca_proto::storage_client(gw.clone())
        .get_space(GetSpaceRequest {
            space_id: id.to_owned(),
            with_usage: true,
        })
        .await;
    match found {
        Ok(s) => Ok(s.into_inner()),
        Err(s) if who.admin && ErrorKind::of(&s) == ErrorKind::NotFound => {
            let all = arca_proto::storage_client(gw.clone())
                .list_spaces(ListSpacesRequest {
                    all: true,
                    with_usage: true,
                })
                .await
                .map_err(grpc_error)?;
            all.into_inner()
                .spaces
                .into_iter()
                .find(|sp| sp.id == id)
                .ok_or_else(|| grpc_error(s))
        }
        Err(s) => Err(grpc_error(s)),
    }
}

async fn one(gw: &Channel, who: &Identity, s: &Space, headers: &HeaderMap, uri: &Uri) -> Response {
    let names = owner_names(gw, who, std::slice::from_ref(s)).await;
    let members = drive_permissions(gw, s).await;
    Json(drive_json(s, &names, &base_url(headers, uri), members)).into_response()
}

/// `GET /graph/v1.0/drives/{id}`.
async fn read(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    match find(&gw, &who, &id).await {
        Ok(s) => one(&gw, &who, &s, &headers, &uri).await,
        Err(r) => r,
    }
}

#[derive(Deserialize, Default)]
struct DrivePatch {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    quota: Option<QuotaBody>,
}

/// Whether the request carries `name: T` (oCIS's `Restore` and `Purge` headers).
fn flag(headers: &HeaderMap, name: &str) -> bool {
    headers
        .get(name)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"T"))
}

/// `PATCH /graph/v1.0/drives/{id}`: name, description (managers and admins), `quota.total`
/// (admins; 0 = none); with `Restore: T` a disabled drive is back in use.
async fn update(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    let patch: DrivePatch = if body.iter().all(u8::is_ascii_whitespace) {
        DrivePatch::default()
    } else {
        match parse(&body) {
            Ok(p) => p,
            Err(r) => return r,
        }
    };
    let updated = arca_proto::storage_client(gw.clone())
        .update_space(UpdateSpaceRequest {
            space_id: id,
            name: patch.name,
            description: patch.description,
            quota: patch.quota.and_then(|q| q.total),
            disabled: flag(&headers, "restore").then_some(false),
        })
        .await;
    match updated {
        Ok(s) => one(&gw, &who, &s.into_inner(), &headers, &uri).await,
        Err(s) => grpc_error(s),
    }
}

/// `DELETE /graph/v1.0/drives/{id}` (managers and admins): disables a project drive, 204 (its
/// members lose it at once; `PATCH` with `Restore: T` brings it back). With `Purge: T` a
/// disabled drive is deleted with everything in it (400 while it is in use).
async fn remove(
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let mut storage = arca_proto::storage_client(gw);
    let done = if flag(&headers, "purge") {
        storage
            .delete_space(DeleteSpaceRequest { space_id: id })
            .await
            .map(|_| ())
    } else {
        storage
            .update_space(UpdateSpaceRequest {
                space_id: id,
                disabled: Some(true),
                ..Default::default()
            })
            .await
            .map(|_| ())
    };
    match done {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(s) => grpc_error(s),
    }
}

/// The roles a project drive's member may have, as `@libre.graph.permissions.roles.allowedValues`.
fn allowed_roles() -> Value {
    let roles: Vec<Value> = [SPACE_VIEWER, SPACE_EDITOR, MANAGER]
        .iter()
        .enumerate()
        .map(|(weight, r)| {
            let name = match r.name {
                "manager" => "Manager",
                "space-editor" => "Can edit",
                _ => "Can view",
            };
            json!({"id": r.graph_id, "displayName": name, "@libre.graph.weight": weight + 1})
        })
        .collect();
    Value::Array(roles)
}

/// `GET /graph/v1beta1/drives/{id}/root/permissions`: the drive's members (every member may
/// see them).
async fn permissions(
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path(id): Path<String>,
) -> Response {
    let members = match arca_proto::storage_client(gw.clone())
        .list_space_members(ListSpaceMembersRequest { space_id: id })
        .await
    {
        Ok(r) => r.into_inner().members,
        Err(s) => return grpc_error(s),
    };
    let names = member_names(&gw, &members).await;
    let value: Vec<Value> = members.iter().map(|m| permission_json(m, &names)).collect();
    Json(json!({
        "@libre.graph.permissions.roles.allowedValues": allowed_roles(),
        "value": value,
    }))
    .into_response()
}

#[derive(Deserialize)]
struct Recipient {
    #[serde(rename = "objectId")]
    object_id: String,
    #[serde(rename = "@libre.graph.recipient.type", default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct Invite {
    recipients: Vec<Recipient>,
    roles: Vec<String>,
    #[serde(rename = "expirationDateTime", default)]
    expiration: Option<Value>,
}

#[derive(Deserialize)]
struct RolesPatch {
    roles: Vec<String>,
}

fn invalid(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalidRequest", message)
}

/// The one space role of a request's `roles`.
fn space_role(roles: &[String]) -> Result<SharingRole, Response> {
    match roles {
        [one] => SharingRole::for_space(one).ok_or_else(|| {
            invalid(
                "roles: a drive member is a Manager, Space Editor or Space Viewer (their role ids)",
            )
        }),
        _ => Err(invalid("roles: give exactly one role id")),
    }
}

/// `POST /graph/v1beta1/drives/{id}/root/invite` (managers and admins): users and groups become
/// members with the role, or get it if they were; 200 with their permissions.
async fn invite(
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let invite: Invite = match parse(&body) {
        Ok(i) => i,
        Err(r) => return r,
    };
    if invite.expiration.as_ref().is_some_and(|e| !e.is_null()) {
        return invalid("expirationDateTime: drive memberships do not expire");
    }
    if invite.recipients.is_empty() {
        return invalid("recipients: name at least one user or group");
    }
    let role = match space_role(&invite.roles) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let mut added = Vec::with_capacity(invite.recipients.len());
    for r in &invite.recipients {
        let kind = r.kind.as_deref().unwrap_or("user");
        let member_id = match kind {
            "user" => UsersClient::new(gw.clone())
                .get_user(GetUserRequest {
                    id: r.object_id.clone(),
                    username: String::new(),
                })
                .await
                .map(|u| u.into_inner().id),
            "group" => UsersClient::new(gw.clone())
                .get_group(GetGroupRequest {
                    id: r.object_id.clone(),
                    display_name: String::new(),
                })
                .await
                .map(|g| g.into_inner().id),
            _ => return invalid("@libre.graph.recipient.type: user or group"),
        };
        let member_id = match member_id {
            Ok(id) => id,
            Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => {
                return invalid(&format!("recipients: no {kind} {:?}", r.object_id));
            }
            Err(s) => return grpc_error(s),
        };
        let set = arca_proto::storage_client(gw.clone())
            .set_space_member(SetSpaceMemberRequest {
                space_id: id.clone(),
                member: Some(SpaceMember {
                    kind: kind.to_owned(),
                    id: member_id,
                    role: role.name.to_owned(),
                    created_ns: 0,
                }),
            })
            .await;
        match set {
            Ok(m) => added.push(m.into_inner()),
            Err(s) => return grpc_error(s),
        }
    }
    let names = member_names(&gw, &added).await;
    let value: Vec<Value> = added.iter().map(|m| permission_json(m, &names)).collect();
    Json(json!({ "value": value })).into_response()
}

/// The member a permission id names, if it is one of the drive's.
async fn member_of(gw: &Channel, drive: &str, perm: &str) -> Result<SpaceMember, Response> {
    let (kind, id) = parse_permission_id(perm)
        .ok_or_else(|| error(StatusCode::NOT_FOUND, "itemNotFound", "no such permission"))?;
    let members = arca_proto::storage_client(gw.clone())
        .list_space_members(ListSpaceMembersRequest {
            space_id: drive.to_owned(),
        })
        .await
        .map_err(grpc_error)?
        .into_inner()
        .members;
    members
        .into_iter()
        .find(|m| m.kind == kind && m.id == id)
        .ok_or_else(|| error(StatusCode::NOT_FOUND, "itemNotFound", "no such permission"))
}

/// `PATCH /graph/v1beta1/drives/{id}/root/permissions/{perm}` (managers and admins): a
/// member's new role; the last manager stays one (403).
async fn change_permission(
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path((id, perm)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let patch: RolesPatch = match parse(&body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let role = match space_role(&patch.roles) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let mut member = match member_of(&gw, &id, &perm).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    member.role = role.name.to_owned();
    match arca_proto::storage_client(gw.clone())
        .set_space_member(SetSpaceMemberRequest {
            space_id: id,
            member: Some(member),
        })
        .await
    {
        Ok(m) => {
            let m = m.into_inner();
            let names = member_names(&gw, std::slice::from_ref(&m)).await;
            Json(permission_json(&m, &names)).into_response()
        }
        Err(s) => grpc_error(s),
    }
}

/// `DELETE /graph/v1beta1/drives/{id}/root/permissions/{perm}` (managers and admins): 204; the
/// last manager is never removed (403).
async fn remove_permission(
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path((id, perm)): Path<(String, String)>,
) -> Response {
    let Some((kind, member)) = parse_permission_id(&perm) else {
        return error(StatusCode::NOT_FOUND, "itemNotFound", "no such permission");
    };
    match arca_proto::storage_client(gw)
        .remove_space_member(RemoveSpaceMemberRequest {
            space_id: id,
            kind: kind.to_owned(),
            id: member.to_owned(),
        })
        .await
    {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(s) => grpc_error(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    #[test]
    fn rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
        // 2026-12-02T12:43:31.110281493Z, the sample's value.
        assert_eq!(
            rfc3339(1_796_215_411_110_281_493),
            "2026-12-02T12:43:31.110281493Z"
        );
        assert_eq!(
            rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999999999Z");
    }

    #[test]
    fn quota_states() {
        assert_eq!(quota_state(0, 5), "normal");
        assert_eq!(quota_state(100, 74), "normal");
        assert_eq!(quota_state(100, 75), "nearing");
        assert_eq!(quota_state(100, 90), "critical");
        assert_eq!(quota_state(100, 100), "exceeded");
        assert_eq!(quota_state(100, 250), "exceeded");
    }

    #[test]
    fn base_urls() {
        let uri: Uri = "/graph/v1.0/me/drives".parse().unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(base_url(&h, &uri), "");
        h.insert(header::HOST, "cloud.example:9200".parse().unwrap());
        assert_eq!(base_url(&h, &uri), "http://cloud.example:9200");
        h.insert("x-forwarded-proto", "https, http".parse().unwrap());
        assert_eq!(base_url(&h, &uri), "https://cloud.example:9200");
        h.insert("x-forwarded-proto", "gopher".parse().unwrap());
        assert_eq!(base_url(&h, &uri), "http://cloud.example:9200");
        h.insert(header::HOST, "evil/x y".parse().unwrap());
        assert_eq!(
            base_url(&h, &uri),
            "",
            "an unusable Host gives relative URLs"
        );
        let abs: Uri = "http://[::1]:9200/graph".parse().unwrap();
        assert_eq!(base_url(&HeaderMap::new(), &abs), "http://[::1]:9200");
    }

    #[test]
    fn personal_and_project_drives() {
        let mut names = Names::new();
        names.insert("u1".into(), ("alice".into(), "Alice".into()));
        let personal = Space {
            id: "storage-users$u1space".into(),
            kind: "personal".into(),
            owner_id: "u1".into(),
            name: "u1".into(),
            quota: 0,
            used: 21,
            etag: "abc".into(),
            root_mtime_ns: 1,
            trash_bytes: 300,
            trash_items: 2,
            version_bytes: 4000,
            version_count: 5,
            ..Default::default()
        };
        let d = drive_json(&personal, &names, "http://h:1", None);
        assert_eq!(d["name"], "Alice");
        assert_eq!(d["driveAlias"], "personal/alice");
        assert_eq!(d["owner"]["user"]["id"], "u1");
        assert_eq!(d["root"]["eTag"], "\"abc\"");
        assert_eq!(
            d["root"]["webDavUrl"],
            "http://h:1/dav/spaces/storage-users$u1space"
        );
        assert_eq!(d["quota"]["remaining"], i64::MAX);
        assert_eq!(
            d["quota"]["used"], 21,
            "the trash and versions are not in `used`"
        );
        assert_eq!(d["quota"]["trash"], 300);
        assert_eq!(d["quota"]["trashItems"], 2);
        assert_eq!(d["quota"]["versions"], 4000);
        assert_eq!(d["quota"]["versionCount"], 5);
        assert!(d.get("description").is_none());

        let project = Space {
            id: "storage-users$p1".into(),
            kind: "project".into(),
            owner_id: "u1".into(),
            name: "Alpha".into(),
            alias: "project/alpha".into(),
            description: "demo".into(),
            quota: 1000,
            used: 600,
            ..Default::default()
        };
        let member = SpaceMember {
            kind: "user".into(),
            id: "u1".into(),
            role: "manager".into(),
            created_ns: 0,
        };
        let mut member_names = HashMap::new();
        member_names.insert(("user".to_owned(), "u1".to_owned()), "Alice".to_owned());
        let members = vec![permission_json(&member, &member_names)];
        let d = drive_json(&project, &names, "", Some(members));
        assert_eq!(d["name"], "Alpha");
        assert_eq!(d["owner"]["user"]["id"], "p1");
        assert_eq!(d["root"]["permissions"][0]["id"], "u:u1");
        assert_eq!(d["root"]["permissions"][0]["roles"][0], MANAGER.graph_id);
        assert_eq!(
            d["root"]["permissions"][0]["grantedToV2"]["user"]["displayName"],
            "Alice"
        );
        assert!(d["root"].get("deleted").is_none());
        let disabled = Space {
            disabled: true,
            ..project.clone()
        };
        let d = drive_json(&disabled, &names, "", None);
        assert_eq!(d["root"]["deleted"]["state"], "trashed");
        assert_eq!(d["quota"]["remaining"], 400);
        assert_eq!(d["description"], "demo");
        assert_eq!(d["webUrl"], "/f/storage-users$p1");
    }
}
