//! The libregraph user API (`/graph/v1.0/me`, `/graph/v1.0/users`), as oCIS serves it:
//! field names `id`, `displayName`, `mail`, `onPremisesSamAccountName`, `passwordProfile`;
//! users' roles as oCIS's app role assignments (`/users/{id}/appRoleAssignments`, the roles
//! listed under `/applications`; see arca_proto::roles), and `$expand=appRoleAssignments`
//! on `me` and `users`.

// As in the WebDAV handlers: the `Err` side is the finished HTTP answer, built once per
// failed request and handed straight to axum.
#![allow(clippy::result_large_err)]

use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::*;
use arca_proto::{ErrorKind, roles};
use arca_runtime::Caller;
use arca_transport::Channel;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{error, grpc_error, parse, user_json};

pub(super) fn routes(gateway: Channel) -> axum::Router {
    axum::Router::new()
        .route("/graph/v1.0/me", get(me))
        .route("/graph/v1.0/me/changePassword", post(change_password))
        .route("/graph/v1.0/users", get(list).post(create))
        .route(
            "/graph/v1.0/users/{id}",
            get(read).patch(update).delete(remove),
        )
        .route(
            "/graph/v1.0/users/{id}/appRoleAssignments",
            get(assignments).post(assign),
        )
        .route(
            "/graph/v1.0/users/{id}/appRoleAssignments/{assignment}",
            axum::routing::delete(unassign),
        )
        .route("/graph/v1.0/applications", get(applications))
        .route("/graph/v1.0/applications/{id}", get(application))
        .with_state(gateway)
}

/// `GET /graph/v1.0/me`, with the caller's groups under `memberOf` for `$expand=memberOf`.
async fn me(State(gw): State<Channel>, Caller(who): Caller, RawQuery(query): RawQuery) -> Response {
    match UsersClient::new(gw.clone())
        .get_user(GetUserRequest {
            id: who.id.clone(),
            username: String::new(),
        })
        .await
    {
        Ok(u) => {
            let u = u.into_inner();
            let mut body = user_json(&u);
            if super::groups::expands(query.as_deref(), "appRoleAssignments") {
                body["appRoleAssignments"] = json!([assignment_json(&u)]);
            }
            if super::groups::expands(query.as_deref(), "memberOf") {
                match super::groups::member_of(&gw, &who.id).await {
                    Ok(groups) => body["memberOf"] = Value::Array(groups),
                    Err(r) => return r,
                }
            }
            Json(body).into_response()
        }
        Err(s) => grpc_error(s),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PasswordChange {
    current_password: String,
    new_password: String,
}

/// `POST /graph/v1.0/me/changePassword` (oCIS's): one's own password, given the current one.
async fn change_password(State(gw): State<Channel>, Caller(who): Caller, body: Bytes) -> Response {
    let change: PasswordChange = match parse(&body) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let refuse = |message| error(StatusCode::BAD_REQUEST, "invalidRequest", message);
    if change.current_password.is_empty() {
        return refuse("currentPassword is required");
    }
    if change.new_password.is_empty() {
        return refuse("newPassword is required");
    }
    if change.new_password == change.current_password {
        return refuse("the new password is the current one");
    }
    match UsersClient::new(gw)
        .update_user(UpdateUserRequest {
            id: who.id.clone(),
            password: change.new_password,
            current_password: change.current_password,
            ..Default::default()
        })
        .await
    {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(s) => grpc_error(s),
    }
}

async fn list(
    State(gw): State<Channel>,
    Caller(who): Caller,
    RawQuery(query): RawQuery,
) -> Response {
    if !who.admin {
        return error(
            StatusCode::FORBIDDEN,
            "accessDenied",
            "only admins list users",
        );
    }
    match UsersClient::new(gw).list_users(ListUsersRequest {}).await {
        Ok(r) => {
            let roles = super::groups::expands(query.as_deref(), "appRoleAssignments");
            let users: Vec<Value> = r
                .into_inner()
                .users
                .iter()
                .map(|u| {
                    let mut body = user_json(u);
                    if roles {
                        body["appRoleAssignments"] = json!([assignment_json(u)]);
                    }
                    body
                })
                .collect();
            Json(json!({ "value": users })).into_response()
        }
        Err(s) => grpc_error(s),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PasswordProfile {
    password: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewUser {
    on_premises_sam_account_name: String,
    #[serde(default)]
    display_name: String,
    #[serde(default)]
    mail: String,
    password_profile: PasswordProfile,
}

async fn create(State(gw): State<Channel>, Caller(_): Caller, body: Bytes) -> Response {
    let new: NewUser = match parse(&body) {
        Ok(n) => n,
        Err(r) => return r,
    };
    match UsersClient::new(gw)
        .create_user(CreateUserRequest {
            username: new.on_premises_sam_account_name,
            display_name: new.display_name,
            mail: new.mail,
            password: new.password_profile.password,
            admin: false,
        })
        .await
    {
        Ok(u) => (StatusCode::CREATED, Json(user_json(&u.into_inner()))).into_response(),
        Err(s) => grpc_error(s),
    }
}

/// A user by id or by login name; others than admins see only themselves.
async fn find(gw: &Channel, who: &arca_runtime::Identity, key: &str) -> Result<User, Response> {
    let by_id = UsersClient::new(gw.clone())
        .get_user(GetUserRequest {
            id: key.to_owned(),
            username: String::new(),
        })
        .await;
    let user = match by_id {
        Ok(u) => u.into_inner(),
        Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => UsersClient::new(gw.clone())
            .get_user(GetUserRequest {
                id: String::new(),
                username: key.to_owned(),
            })
            .await
            .map_err(grpc_error)?
            .into_inner(),
        Err(s) => return Err(grpc_error(s)),
    };
    if !who.admin && user.id != who.id {
        return Err(error(StatusCode::NOT_FOUND, "itemNotFound", "no such user"));
    }
    Ok(user)
}

async fn read(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    match find(&gw, &who, &key).await {
        Ok(u) => {
            let mut body = user_json(&u);
            if super::groups::expands(query.as_deref(), "appRoleAssignments") {
                body["appRoleAssignments"] = json!([assignment_json(&u)]);
            }
            Json(body).into_response()
        }
        Err(r) => r,
    }
}

/// A user's one role as a libregraph `appRoleAssignment`. Its id is the role's: a user has
/// exactly one, so the pair (user, role) names it.
fn assignment_json(u: &User) -> Value {
    let role = roles::id(roles::of(u.admin, u.space_admin)).unwrap_or(roles::USER);
    json!({
        "id": role,
        "appRoleId": role,
        "principalId": u.id,
        "principalType": "User",
        "principalDisplayName": u.display_name,
        "resourceId": roles::APPLICATION_ID,
        "resourceDisplayName": APPLICATION_NAME,
    })
}

/// The application's name in Graph answers.
const APPLICATION_NAME: &str = "arca";

/// `GET /graph/v1.0/users/{id}/appRoleAssignments`: the user's role (admins, or oneself).
async fn assignments(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(key): Path<String>,
) -> Response {
    match find(&gw, &who, &key).await {
        Ok(u) => Json(json!({ "value": [assignment_json(&u)] })).into_response(),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewAssignment {
    principal_id: String,
    app_role_id: String,
    resource_id: String,
}

/// `POST /graph/v1.0/users/{id}/appRoleAssignments`: gives the user that role in place of
/// the one they had (admins only, never to themselves); 201 and the assignment.
async fn assign(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(key): Path<String>,
    body: Bytes,
) -> Response {
    let new: NewAssignment = match parse(&body) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let refuse = |message: &str| error(StatusCode::BAD_REQUEST, "invalidRequest", message);
    if new.resource_id != roles::APPLICATION_ID {
        return refuse("resourceId names no application here: GET /graph/v1.0/applications");
    }
    let Some(role) = roles::by_id(&new.app_role_id) else {
        return refuse("appRoleId names no role of the application");
    };
    let user = match find(&gw, &who, &key).await {
        Ok(u) => u,
        Err(r) => return r,
    };
    if new.principal_id != user.id {
        return refuse("principalId is not the user of the URL");
    }
    set_role(gw, user.id, role, StatusCode::CREATED).await
}

/// `DELETE /graph/v1.0/users/{id}/appRoleAssignments/{id}`: the user goes back to the User
/// role; 204.
async fn unassign(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path((key, assignment)): Path<(String, String)>,
) -> Response {
    let user = match find(&gw, &who, &key).await {
        Ok(u) => u,
        Err(r) => return r,
    };
    if roles::id(roles::of(user.admin, user.space_admin)) != Some(assignment.as_str()) {
        return error(StatusCode::NOT_FOUND, "itemNotFound", "no such assignment");
    }
    set_role(gw, user.id, Role::User, StatusCode::NO_CONTENT).await
}

async fn set_role(gw: Channel, id: String, role: Role, status: StatusCode) -> Response {
    let changed = UsersClient::new(gw)
        .update_user(UpdateUserRequest {
            id,
            role: role.into(),
            ..Default::default()
        })
        .await;
    match changed {
        Ok(_) if status == StatusCode::NO_CONTENT => status.into_response(),
        Ok(u) => (status, Json(assignment_json(&u.into_inner()))).into_response(),
        Err(s) => grpc_error(s),
    }
}

/// The application the roles belong to, as libregraph describes it.
fn application_json() -> Value {
    let roles: Vec<Value> = roles::ALL
        .iter()
        .map(|(_, id, name, description)| {
            json!({
                "id": id,
                "displayName": name,
                "description": description,
                "allowedMemberTypes": ["User"],
            })
        })
        .collect();
    json!({
        "id": roles::APPLICATION_ID,
        "displayName": APPLICATION_NAME,
        "appRoles": roles,
    })
}

/// `GET /graph/v1.0/applications`: the one application and its roles (any user may read it:
/// the roles are no secret, and ownCloud Web reads them to show a user's role).
async fn applications(Caller(_): Caller) -> Response {
    Json(json!({ "value": [application_json()] })).into_response()
}

async fn application(Caller(_): Caller, Path(id): Path<String>) -> Response {
    if id != roles::APPLICATION_ID {
        return error(StatusCode::NOT_FOUND, "itemNotFound", "no such application");
    }
    Json(application_json()).into_response()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UserPatch {
    #[serde(default)]
    display_name: Option<String>,
    #[serde(default)]
    mail: Option<String>,
    #[serde(default)]
    password_profile: Option<PasswordProfile>,
}

async fn update(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(key): Path<String>,
    body: Bytes,
) -> Response {
    let patch: UserPatch = match parse(&body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let user = match find(&gw, &who, &key).await {
        Ok(u) => u,
        Err(r) => return r,
    };
    match UsersClient::new(gw)
        .update_user(UpdateUserRequest {
            id: user.id,
            display_name: patch.display_name.unwrap_or_default(),
            mail: patch.mail.unwrap_or_default(),
            password: patch
                .password_profile
                .map(|p| p.password)
                .unwrap_or_default(),
            // One's own password goes through /me/changePassword (storage-system says so),
            // unless this request's Basic login proved the current one.
            current_password: String::new(),
            role: Role::Unchanged.into(),
        })
        .await
    {
        Ok(u) => Json(user_json(&u.into_inner())).into_response(),
        Err(s) => grpc_error(s),
    }
}

async fn remove(
    State(gw): State<Channel>,
    Caller(who): Caller,
    Path(key): Path<String>,
) -> Response {
    let user = match find(&gw, &who, &key).await {
        Ok(u) => u,
        Err(r) => return r,
    };
    match UsersClient::new(gw)
        .delete_user(DeleteUserRequest { id: user.id })
        .await
    {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(s) => grpc_error(s),
    }
}
