//! The libregraph API as oCIS serves it under `/graph/v1.0/`: users (`me`, `users`), groups
//! and drives (spaces). Every answer is JSON; failures take libregraph's error shape.

// As in the WebDAV handlers: the `Err` side is the finished HTTP answer, built once per
// failed request and handed straight to axum.
#![allow(clippy::result_large_err)]

use arca_proto::ErrorKind;
use arca_proto::v1::User;
use arca_transport::Channel;
use axum::Json;
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::failure::Failure;

mod drives;
mod groups;
mod users;

pub(crate) fn routes(gateway: Channel) -> axum::Router {
    axum::Router::new()
        .merge(users::routes(gateway.clone()))
        .merge(groups::routes(gateway.clone()))
        .merge(drives::routes(gateway))
}

/// libregraph's error shape: `{"error":{"code":…,"message":…}}`.
pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

/// A failed call in libregraph's shape, with the shared mapping's status except for a taken
/// name.
pub(crate) fn grpc_error(s: tonic::Status) -> Response {
    if let Some(secs) = arca_proto::retry_after(&s) {
        let mut resp = error(
            StatusCode::TOO_MANY_REQUESTS,
            "tooManyRequests",
            s.message(),
        );
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
        return resp;
    }
    let failure = Failure::of(&s);
    let code = match failure.kind {
        ErrorKind::NotFound => "itemNotFound",
        ErrorKind::AlreadyExists => "nameAlreadyExists",
        ErrorKind::PermissionDenied => "accessDenied",
        ErrorKind::Unauthenticated => "unauthenticated",
        ErrorKind::InvalidArgument => "invalidRequest",
        _ => "generalException",
    };
    let status = match failure.kind {
        // Graph answers 409 for a taken name, not WebDAV's 405.
        ErrorKind::AlreadyExists => StatusCode::CONFLICT,
        _ => failure.status,
    };
    error(status, code, &failure.message)
}

pub(crate) fn user_json(u: &User) -> Value {
    json!({
        "id": u.id,
        "displayName": u.display_name,
        "mail": u.mail,
        "onPremisesSamAccountName": u.username,
        "userType": "Member",
    })
}

pub(crate) fn parse<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T, Response> {
    serde_json::from_slice(body).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            "invalidRequest",
            &format!("request body: {e}"),
        )
    })
}
