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

// As in the WebDAV handlers: the `Err` side is the finished HTTP answer.
#![allow(clippy::result_large_err)]

use arca_proto::v1::storage_client::StorageClient;
use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::*;
use arca_runtime::Caller;
use arca_transport::Channel;
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use crate::graph::{error, grpc_error};

/// Where the bulk restore is served.
pub const RESTORE: &str = "/api/v1/trash/restore";

pub(crate) fn routes(gateway: Channel) -> axum::Router {
    axum::Router::new()
        .route(RESTORE, post(restore))
        .with_state(gateway)
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
    let conflict = match b.conflict.as_deref().unwrap_or("keep-both") {
        "keep-both" => RestoreConflict::KeepBoth,
        "skip" => RestoreConflict::Skip,
        "replace" => RestoreConflict::Replace,
        other => {
            return Err(invalid(&format!(
                "conflict {other:?} is not one of keep-both, skip, replace"
            )));
        }
    };
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
    let tally = StorageClient::new(gateway.clone())
        .restore_all(RestoreAllRequest {
            space_id: b.space.unwrap_or_default(),
            user_id,
            since_ns,
            path: b.path.unwrap_or_default(),
            deleted_by,
            conflict: conflict as i32,
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    Ok(Json(json!({
        "total": tally.total,
        "restored": tally.restored,
        "renamed": tally.renamed,
        "replaced": tally.replaced,
        "skipped": tally.skipped,
        "over_quota": tally.over_quota,
        "files": tally.files,
        "bytes": tally.bytes,
    }))
    .into_response())
}
