//! The trash's bulk API, for people and for `arca trash restore` (no peer has one): restoring
//! thousands of removed items in one call instead of one WebDAV MOVE each.
//!
//! `POST /api/v1/trash/restore` with a JSON body, every field optional:
//!
//! ```json
//! {"user": "alice", "space": "storage-users$…", "since": 1767000000, "path": "/Documents",
//!  "by": "alice", "conflict": "keep-both"}
//! ```
//!
//! `user` (a login name; admins only, for another user's personal space) or `space` (a space
//! the caller owns or manages; default: the caller's personal space); `since`: removed at or
//! after these unix seconds; `path`: removed from this folder or below it; `by`: removed by
//! this login name; `conflict` when the original name is taken again: `keep-both` (default:
//! beside it as `name (2).ext`), `skip` (stays in the trash) or `replace` (what is there goes
//! to the trash). Items come back where they were, folders on the way recreated. The answer
//! counts what happened: `{"total", "restored", "renamed", "replaced", "skipped",
//! "over_quota", "files", "bytes"}`. Errors are Graph-shaped JSON.
//!
//! Mass deletes (`storage-users.trash.burst`): `GET /api/v1/trash/bursts[?space=ID]` lists the
//! flagged bursts of the caller's personal space (or of a space they own or manage), newest
//! first: `{"value": [{"id", "space", "user", "client", "first", "last", "items", "files",
//! "in_trash"}]}` (`user` a login name, `client` the program's User-Agent, `first`/`last` unix
//! seconds, `files` counting those inside removed folders, `in_trash` how many of its items
//! are still in the trash: 0 once it was restored or purged).
//! `POST /api/v1/trash/bursts/{id}/restore[?space=ID]` restores exactly that burst's items
//! (body optional: `{"conflict": …}`) and answers the same counts as above.

// As in the WebDAV handlers: the `Err` side is the finished HTTP answer.
#![allow(clippy::result_large_err)]

use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::*;
use arca_runtime::Caller;
use arca_transport::Channel;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use crate::graph::{error, grpc_error};

/// Where the bulk restore is served.
pub const RESTORE: &str = "/api/v1/trash/restore";

pub(crate) fn routes(gateway: Channel) -> axum::Router {
    axum::Router::new()
        .route(RESTORE, post(restore))
        .route("/api/v1/trash/bursts", get(bursts))
        .route("/api/v1/trash/bursts/{id}/restore", post(restore_burst))
        .with_state(gateway)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SpaceQuery {
    space: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ConflictBody {
    conflict: Option<String>,
}

async fn bursts(
    State(gateway): State<Channel>,
    Caller(_who): Caller,
    query: Result<Query<SpaceQuery>, QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return invalid("the only query parameter is space");
    };
    let listed = arca_proto::storage_client(gateway.clone())
        .list_bursts(ListBurstsRequest {
            space_id: q.space.unwrap_or_default(),
        })
        .await;
    let listed = match listed {
        Ok(l) => l.into_inner(),
        Err(s) => return grpc_error(s),
    };
    let mut value = Vec::with_capacity(listed.bursts.len());
    for b in listed.bursts {
        // A login name where one is found; the id otherwise (a deleted user).
        let user = UsersClient::new(gateway.clone())
            .get_user(GetUserRequest {
                id: b.actor.clone(),
                username: String::new(),
            })
            .await
            .map_or(b.actor.clone(), |u| u.into_inner().username);
        value.push(json!({
            "id": b.id,
            "space": b.space_id,
            "user": user,
            "client": b.client,
            "first": b.first_ns.div_euclid(1_000_000_000),
            "last": b.last_ns.div_euclid(1_000_000_000),
            "items": b.items,
            "files": b.files,
            "in_trash": b.in_trash,
        }));
    }
    Json(json!({ "value": value })).into_response()
}

async fn restore_burst(
    State(gateway): State<Channel>,
    Caller(_who): Caller,
    Path(id): Path<String>,
    query: Result<Query<SpaceQuery>, QueryRejection>,
    body: axum::body::Bytes,
) -> Response {
    let Ok(Query(q)) = query else {
        return invalid("the only query parameter is space");
    };
    let b: ConflictBody = if body.iter().all(u8::is_ascii_whitespace) {
        ConflictBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return invalid(&format!("request body: {e}")),
        }
    };
    let conflict = match conflict_of(b.conflict.as_deref()) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let done = arca_proto::storage_client(gateway)
        .restore_all(RestoreAllRequest {
            space_id: q.space.unwrap_or_default(),
            burst_id: id,
            conflict: conflict as i32,
            ..Default::default()
        })
        .await;
    match done {
        Ok(t) => tally(&t.into_inner()),
        Err(s) => grpc_error(s),
    }
}

/// `keep-both` (the default), `skip` or `replace`.
fn conflict_of(name: Option<&str>) -> Result<RestoreConflict, Response> {
    match name.unwrap_or("keep-both") {
        "keep-both" => Ok(RestoreConflict::KeepBoth),
        "skip" => Ok(RestoreConflict::Skip),
        "replace" => Ok(RestoreConflict::Replace),
        other => Err(invalid(&format!(
            "conflict {other:?} is not one of keep-both, skip, replace"
        ))),
    }
}

fn tally(t: &RestoreAllResponse) -> Response {
    Json(json!({
        "total": t.total,
        "restored": t.restored,
        "renamed": t.renamed,
        "replaced": t.replaced,
        "skipped": t.skipped,
        "over_quota": t.over_quota,
        "files": t.files,
        "bytes": t.bytes,
    }))
    .into_response()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    user: Option<String>,
    space: Option<String>,
    since: Option<i64>,
    path: Option<String>,
    by: Option<String>,
    conflict: Option<String>,
}

fn invalid(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalidRequest", message)
}

/// The id of the user named `name`.
async fn id_of(gateway: &Channel, name: &str) -> Result<String, Response> {
    let user = UsersClient::new(gateway.clone())
        .get_user(GetUserRequest {
            id: String::new(),
            username: name.to_owned(),
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    Ok(user.id)
}

async fn restore(
    State(gateway): State<Channel>,
    Caller(_who): Caller,
    body: axum::body::Bytes,
) -> Response {
    match try_restore(&gateway, &body).await {
        Ok(r) => r,
        Err(r) => r,
    }
}

async fn try_restore(gateway: &Channel, body: &[u8]) -> Result<Response, Response> {
    let b: RestoreBody = if body.iter().all(u8::is_ascii_whitespace) {
        RestoreBody::default()
    } else {
        serde_json::from_slice(body).map_err(|e| invalid(&format!("request body: {e}")))?
    };
    let conflict = conflict_of(b.conflict.as_deref())?;
    if b.user.is_some() && b.space.is_some() {
        return Err(invalid("give user or space, not both"));
    }
    let user_id = match &b.user {
        Some(name) => id_of(gateway, name).await?,
        None => String::new(),
    };
    let deleted_by = match &b.by {
        Some(name) => id_of(gateway, name).await?,
        None => String::new(),
    };
    let since_ns = match b.since {
        None => 0,
        Some(s) if s >= 0 => s.saturating_mul(1_000_000_000),
        Some(_) => return Err(invalid("since is unix seconds, not negative")),
    };
    let done = arca_proto::storage_client(gateway.clone())
        .restore_all(RestoreAllRequest {
            space_id: b.space.unwrap_or_default(),
            user_id,
            since_ns,
            path: b.path.unwrap_or_default(),
            deleted_by,
            conflict: conflict as i32,
            burst_id: String::new(),
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    Ok(tally(&done))
}
