//! The libregraph group API (`/graph/v1.0/groups`), as oCIS serves it: field names `id`,
//! `displayName`, `description`, `members`; members are added by reference
//! (`POST …/members/$ref` with `{"@odata.id": "…/users/{id}"}`) and removed by
//! `DELETE …/members/{user-id}/$ref`. Anyone signed in reads groups; only admins change them.

// As in the WebDAV handlers: the `Err` side is the finished HTTP answer.
#![allow(clippy::result_large_err)]

use arca_proto::ErrorKind;
use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::*;
use arca_runtime::{Caller, Identity};
use arca_transport::Channel;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{error, grpc_error, parse, user_json};

pub(super) fn routes(gateway: Channel) -> axum::Router {
    axum::Router::new()
        .route("/graph/v1.0/groups", get(list).post(create))
        .route(
            "/graph/v1.0/groups/{id}",
            get(read).patch(update).delete(remove),
        )
        .route("/graph/v1.0/groups/{id}/members", get(members))
        .route("/graph/v1.0/groups/{id}/members/$ref", post(add_member))
        .route(
            "/graph/v1.0/groups/{id}/members/{user}/$ref",
            delete(remove_member),
        )
        .with_state(gateway)
}

fn group_json(g: &Group) -> Value {
    json!({
        "id": g.id,
        "displayName": g.display_name,
        "description": g.description,
    })
}

/// Whether the OData `$expand` option of `query` names `what` (`$expand=members,memberOf`;
/// the `$` may come percent-encoded).
pub(crate) fn expands(query: Option<&str>, what: &str) -> bool {
    query.into_iter().flat_map(|q| q.split('&')).any(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        key == "$expand" && value.split(',').any(|v| v.trim() == what)
    })
}

/// The groups of `user_id` as libregraph objects (`memberOf`).
pub(crate) async fn member_of(gw: &Channel, user_id: &str) -> Result<Vec<Value>, Response> {
    let groups = UsersClient::new(gw.clone())
        .list_user_groups(ListUserGroupsRequest {
            user_id: user_id.to_owned(),
        })
        .await
        .map_err(grpc_error)?
        .into_inner()
        .groups;
    Ok(groups.iter().map(group_json).collect())
}

fn forbidden(who: &Identity) -> Option<Response> {
    (!who.admin).then(|| {
        error(
            StatusCode::FORBIDDEN,
            "accessDenied",
            "only admins change groups",
        )
    })
}

/// A group by id, or by display name (as oCIS accepts both in the path).
async fn find(gw: &Channel, key: &str) -> Result<Group, Response> {
    let mut client = UsersClient::new(gw.clone());
    let by_id = client
        .get_group(GetGroupRequest {
            id: key.to_owned(),
            display_name: String::new(),
        })
        .await;
    match by_id {
        Ok(g) => Ok(g.into_inner()),
        Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => client
            .get_group(GetGroupRequest {
                id: String::new(),
                display_name: key.to_owned(),
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(grpc_error),
        Err(s) => Err(grpc_error(s)),
    }
}

async fn members_json(gw: &Channel, group_id: &str) -> Result<Vec<Value>, Response> {
    let users = UsersClient::new(gw.clone())
        .list_members(ListMembersRequest {
            group_id: group_id.to_owned(),
        })
        .await
        .map_err(grpc_error)?
        .into_inner()
        .users;
    Ok(users.iter().map(user_json).collect())
}

/// The group as JSON, with `members` when `$expand=members` asks for them.
async fn expanded(gw: &Channel, g: &Group, query: Option<&str>) -> Result<Value, Response> {
    let mut body = group_json(g);
    if expands(query, "members") {
        body["members"] = Value::Array(members_json(gw, &g.id).await?);
    }
    Ok(body)
}

async fn list(State(gw): State<Channel>, Caller(_): Caller, RawQuery(q): RawQuery) -> Response {
    let groups = match UsersClient::new(gw.clone())
        .list_groups(ListGroupsRequest {})
        .await
    {
        Ok(r) => r.into_inner().groups,
        Err(s) => return grpc_error(s),
    };
    let mut value = Vec::with_capacity(groups.len());
    for g in &groups {
        match expanded(&gw, g, q.as_deref()).await {
            Ok(v) => value.push(v),
            Err(r) => return r,
        }
    }
    Json(json!({ "value": value })).into_response()
}

async fn read(
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path(key): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let group = match find(&gw, &key).await {
        Ok(g) => g,
        Err(r) => return r,
    };
    match expanded(&gw, &group, q.as_deref()).await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewGroup {
    display_name: String,
    #[serde(default)]
    description: String,
    #[serde(default, rename = "members@odata.bind")]
    members: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupPatch {
    #[serde(default)]
    display_name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, rename = "members@odata.bind")]
    members: Vec<String>,
}

#[derive(Deserialize)]
struct Reference {
    #[serde(rename = "@odata.id")]
    odata_id: String,
}

/// The user an OData reference (`https://host/graph/v1.0/users/{id}`) names: its id, looked up
/// by id or user name.
async fn referenced_user(gw: &Channel, reference: &str) -> Result<String, Response> {
    let key = reference
        .trim_end_matches('/')
        .rsplit_once("/users/")
        .map(|(_, key)| key)
        .filter(|k| !k.is_empty() && !k.contains('/'))
        .ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                "invalidRequest",
                &format!("{reference:?} is not a reference to a user (…/users/{{id}})"),
            )
        })?;
    let key = percent_encoding::percent_decode_str(key)
        .decode_utf8_lossy()
        .into_owned();
    let mut client = UsersClient::new(gw.clone());
    let by_id = client
        .get_user(GetUserRequest {
            id: key.clone(),
            username: String::new(),
        })
        .await;
    match by_id {
        Ok(u) => Ok(u.into_inner().id),
        Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => client
            .get_user(GetUserRequest {
                id: String::new(),
                username: key,
            })
            .await
            .map(|u| u.into_inner().id)
            .map_err(grpc_error),
        Err(s) => Err(grpc_error(s)),
    }
}

/// Adds every referenced user to the group; the references are checked before any is added.
async fn bind_members(gw: &Channel, group_id: &str, references: &[String]) -> Option<Response> {
    let mut users = Vec::with_capacity(references.len());
    for r in references {
        match referenced_user(gw, r).await {
            Ok(id) => users.push(id),
            Err(resp) => return Some(resp),
        }
    }
    for user_id in users {
        if let Err(s) = UsersClient::new(gw.clone())
            .add_member(AddMemberRequest {
                group_id: group_id.to_owned(),
                user_id,
            })
            .await
        {
            return Some(grpc_error(s));
        }
    }
    None
}

async fn create(State(gw): State<Channel>, Caller(who): Caller, body: Bytes) -> Response {
    if let Some(r) = forbidden(&who) {
        return r;
    }
    let new: NewGroup = match parse(&body) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let group = match UsersClient::new(gw.clone())
        .create_group(CreateGroupRequest {
            display_name: new.display_name,
            description: new.description,
        })
        .await
    {
        Ok(g) => g.into_inner(),
        Err(s) => return grpc_error(s),
    };
    if let Some(r) = bind_members(&gw, &group.id, &new.members).await {
        return r;
    }
    (StatusCode::CREATED, Json(group_json(&group))).into_response()
}

async fn update(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(key): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = forbidden(&who) {
        return r;
    }
    let patch: GroupPatch = match parse(&body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let group = match find(&gw, &key).await {
        Ok(g) => g,
        Err(r) => return r,
    };
    if patch.display_name.is_some() || patch.description.is_some() {
        let r = UsersClient::new(gw.clone())
            .update_group(UpdateGroupRequest {
                id: group.id.clone(),
                display_name: patch.display_name,
                description: patch.description,
            })
            .await;
        if let Err(s) = r {
            return grpc_error(s);
        }
    }
    if let Some(r) = bind_members(&gw, &group.id, &patch.members).await {
        return r;
    }
    // libregraph answers a successful PATCH of a group with no content.
    StatusCode::NO_CONTENT.into_response()
}

async fn remove(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(key): Path<String>,
) -> Response {
    if let Some(r) = forbidden(&who) {
        return r;
    }
    let group = match find(&gw, &key).await {
        Ok(g) => g,
        Err(r) => return r,
    };
    match UsersClient::new(gw)
        .delete_group(DeleteGroupRequest { id: group.id })
        .await
    {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(s) => grpc_error(s),
    }
}

async fn members(
    State(gw): State<Channel>,
    Caller(_): Caller,
    Path(key): Path<String>,
) -> Response {
    let group = match find(&gw, &key).await {
        Ok(g) => g,
        Err(r) => return r,
    };
    match members_json(&gw, &group.id).await {
        Ok(users) => Json(json!({ "value": users })).into_response(),
        Err(r) => r,
    }
}

async fn add_member(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(key): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = forbidden(&who) {
        return r;
    }
    let reference: Reference = match parse(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let group = match find(&gw, &key).await {
        Ok(g) => g,
        Err(r) => return r,
    };
    match bind_members(&gw, &group.id, &[reference.odata_id]).await {
        Some(r) => r,
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

async fn remove_member(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path((key, user)): Path<(String, String)>,
) -> Response {
    if let Some(r) = forbidden(&who) {
        return r;
    }
    let group = match find(&gw, &key).await {
        Ok(g) => g,
        Err(r) => return r,
    };
    let user_id = match referenced_user(&gw, &format!("/users/{user}")).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    match UsersClient::new(gw)
        .remove_member(RemoveMemberRequest {
            group_id: group.id,
            user_id,
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

    #[test]
    fn reads_the_expand_option() {
        assert!(expands(Some("$expand=memberOf"), "memberOf"));
        assert!(expands(Some("a=1&%24expand=members,memberOf"), "memberOf"));
        assert!(expands(Some("$expand=members"), "members"));
        assert!(!expands(Some("$expand=members"), "memberOf"));
        assert!(!expands(Some("expand=memberOf"), "memberOf"));
        assert!(!expands(None, "memberOf"));
    }
}
