//! The libregraph drives API (`/graph/v1.0/me/drives`, `/graph/v1.0/drives[/{id}]`): spaces
//! as drives, in oCIS's field names (shared/protocol/samples/graph-*.json).
//!
//! A drive's id is its space id (`PROVIDER$SPACE`), exactly what `/dav/spaces/{id}` takes, and
//! `root.webDavUrl` is that URL made absolute from the request's Host (and
//! `X-Forwarded-Proto`). Admins create, change and delete project drives; everyone lists what
//! they may use. The storage provider checks every permission again.

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
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, StatusCode, Uri};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{error, grpc_error, parse};
use crate::dates::civil_from_days;

pub(super) fn routes(gateway: Channel) -> axum::Router {
    axum::Router::new()
        .route("/graph/v1.0/me/drives", get(my_drives))
        .route("/graph/v1.0/drives", get(all_drives).post(create))
        .route(
            "/graph/v1.0/drives/{id}",
            get(read).patch(update).delete(remove),
        )
        .with_state(gateway)
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

/// One drive in libregraph's shape.
fn drive_json(s: &Space, names: &Names, base: &str) -> Value {
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
    if !personal {
        let manager = json!({"user": {
            "@libre.graph.userType": "Member",
            "displayName": display_or_login,
            "id": s.owner_id,
        }});
        root.insert(
            "permissions".into(),
            json!([{
                "grantedToV2": manager,
                "grantedToIdentities": [manager],
                "roles": ["manager"],
            }]),
        );
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

async fn list(gw: Channel, who: Identity, all: bool, headers: &HeaderMap, uri: &Uri) -> Response {
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
    let names = owner_names(&gw, &who, &spaces).await;
    let base = base_url(headers, uri);
    let value: Vec<Value> = spaces
        .iter()
        .map(|s| drive_json(s, &names, &base))
        .collect();
    Json(json!({ "value": value })).into_response()
}

/// `GET /graph/v1.0/me/drives`: the caller's personal drive and the project drives they may
/// use (every one, for admins).
async fn my_drives(
    State(gw): State<Channel>,
    Caller(who): Caller,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    list(gw, who, false, &headers, &uri).await
}

/// `GET /graph/v1.0/drives`: every drive for admins, the same as `me/drives` for others.
async fn all_drives(
    State(gw): State<Channel>,
    Caller(who): Caller,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let all = who.admin;
    list(gw, who, all, &headers, &uri).await
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

/// `POST /graph/v1.0/drives` (admins): a new project drive, 201.
async fn create(
    State(gw): State<Channel>,
    Caller(who): Caller,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    if !who.admin {
        return forbidden("only admins create drives");
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
            let drive = drive_json(&s, &names, &base_url(&headers, &uri));
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
    Json(drive_json(s, &names, &base_url(headers, uri))).into_response()
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

#[derive(Deserialize)]
struct DrivePatch {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    quota: Option<QuotaBody>,
}

/// `PATCH /graph/v1.0/drives/{id}` (admins): name, description, `quota.total` (0 = none).
async fn update(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    let patch: DrivePatch = match parse(&body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let updated = arca_proto::storage_client(gw.clone())
        .update_space(UpdateSpaceRequest {
            space_id: id,
            name: patch.name,
            description: patch.description,
            quota: patch.quota.and_then(|q| q.total),
        })
        .await;
    match updated {
        Ok(s) => one(&gw, &who, &s.into_inner(), &headers, &uri).await,
        Err(s) => grpc_error(s),
    }
}

/// `DELETE /graph/v1.0/drives/{id}` (admins): the project drive and its contents, 204. oCIS
/// first disables a drive and deletes it on a second request; arca has no disabled state, so
/// this deletes at once.
async fn remove(State(gw): State<Channel>, Caller(_): Caller, Path(id): Path<String>) -> Response {
    match arca_proto::storage_client(gw)
        .delete_space(DeleteSpaceRequest { space_id: id })
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
        let d = drive_json(&personal, &names, "http://h:1");
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
        let d = drive_json(&project, &names, "");
        assert_eq!(d["name"], "Alpha");
        assert_eq!(d["owner"]["user"]["id"], "p1");
        assert_eq!(d["root"]["permissions"][0]["roles"][0], "manager");
        assert_eq!(
            d["root"]["permissions"][0]["grantedToV2"]["user"]["id"],
            "u1"
        );
        assert_eq!(d["quota"]["remaining"], 400);
        assert_eq!(d["description"], "demo");
        assert_eq!(d["webUrl"], "/f/storage-users$p1");
    }
}
