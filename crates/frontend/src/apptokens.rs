//! The app-token API at `/auth-app/tokens`, as oCIS's auth-app service offers it: a signed-in
//! user creates a token for one client (`POST ?expiry=72h[&label=…]`, the token shown in that
//! answer only), lists their tokens (`GET`: ids, labels and dates, never a secret) and revokes
//! one (`DELETE ?token=…` with the token itself or the id the list shows, or `?id=…`). A client
//! then logs in with HTTP Basic, the user's name and the token as password.
//!
//! Only a password or OpenID Connect login may manage app tokens: a caller logged in with an
//! app token gets 403 on all three, so a token that leaked from one device can neither mint
//! more tokens (outliving its revocation) nor revoke the others. The proxy says how the caller
//! logged in inside the identity token it signs (claim `login`).

// As in the WebDAV handlers: the `Err` side is the finished HTTP answer.
#![allow(clippy::result_large_err)]

use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::*;
use arca_runtime::{Caller, Login};
use arca_transport::Channel;
use axum::Json;
use axum::extract::{FromRef, FromRequestParts, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::StatusCode;
use serde_json::{Value, json};

use crate::graph::{error, grpc_error};

/// The longest lifetime a token may be given (ten years).
const MAX_EXPIRY_SECS: u64 = 10 * 365 * 86_400;
const DEFAULT_LABEL: &str = "Generated via API";

#[derive(Clone)]
struct Api {
    gateway: Channel,
}

impl FromRef<Api> for Channel {
    fn from_ref(api: &Api) -> Channel {
        api.gateway.clone()
    }
}

pub(crate) fn routes(gateway: Channel) -> axum::Router {
    axum::Router::new()
        .route("/auth-app/tokens", get(list).post(create).delete(revoke))
        .with_state(Api { gateway })
}

/// The caller, if they logged in with their password or through OIDC; 403 otherwise.
struct Manager;

impl FromRequestParts<Api> for Manager {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        api: &Api,
    ) -> Result<Self, Response> {
        // Anonymous calls get the 401 the other extractor gives. A token without the login
        // claim is no person's password login: fails closed.
        let Caller(who) = Caller::from_request_parts(parts, api).await?;
        let login = who.login;
        if login.is_some_and(Login::manages_credentials) {
            Ok(Manager)
        } else {
            Err(error(
                StatusCode::FORBIDDEN,
                "accessDenied",
                "app tokens cannot manage app tokens: log in with your password or your identity provider",
            ))
        }
    }
}

fn bad_request(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalidRequest", message)
}

/// The decoded value of query parameter `name`, if present.
fn param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| {
            // `+` is a space in form-encoded queries.
            let v = v.replace('+', " ");
            percent_encoding::percent_decode_str(&v)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// `72h`, `30m`, `90s`, `7d` (oCIS takes h, m and s; days are a convenience) → seconds.
fn parse_expiry(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    number.checked_mul(scale).filter(|&s| s > 0)
}

/// Seconds since the epoch as RFC 3339 in UTC (`2024-08-08T13:42:42Z`).
fn rfc3339(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm, proleptic Gregorian).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn token_json(t: &AppToken) -> Value {
    json!({
        "id": t.id,
        // oCIS lists a stand-in for the secret under `token` and takes it back in DELETE;
        // here that stand-in is the id.
        "token": t.id,
        "label": t.label,
        "created_date": rfc3339(t.created),
        "expiration_date": if t.expires == 0 { Value::Null } else { Value::from(rfc3339(t.expires)) },
    })
}

async fn create(State(gw): State<Channel>, _: Manager, RawQuery(q): RawQuery) -> Response {
    let Some(expiry) = param(q.as_deref(), "expiry") else {
        return bad_request("expiry is required, e.g. ?expiry=72h");
    };
    let Some(expires_in) = parse_expiry(&expiry).filter(|&s| s <= MAX_EXPIRY_SECS) else {
        return bad_request(&format!(
            "expiry {expiry:?} is not a duration like 72h, 30m or 90s (at most ten years)"
        ));
    };
    let label = param(q.as_deref(), "label")
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| DEFAULT_LABEL.to_owned());
    match UsersClient::new(gw)
        .create_app_token(CreateAppTokenRequest { label, expires_in })
        .await
    {
        Ok(r) => {
            let r = r.into_inner();
            let Some(token) = r.token else {
                return error(
                    StatusCode::BAD_GATEWAY,
                    "generalException",
                    "no token in the answer",
                );
            };
            let mut body = token_json(&token);
            body["token"] = Value::from(r.secret);
            Json(body).into_response()
        }
        Err(s) => grpc_error(s),
    }
}

async fn list(State(gw): State<Channel>, _: Manager) -> Response {
    match UsersClient::new(gw)
        .list_app_tokens(ListAppTokensRequest {})
        .await
    {
        Ok(r) => Json(Value::Array(
            r.into_inner().tokens.iter().map(token_json).collect(),
        ))
        .into_response(),
        Err(s) => grpc_error(s),
    }
}

async fn revoke(State(gw): State<Channel>, _: Manager, RawQuery(q): RawQuery) -> Response {
    let Some(token) = param(q.as_deref(), "token")
        .or_else(|| param(q.as_deref(), "id"))
        .filter(|t| !t.is_empty())
    else {
        return bad_request("which token? ?token=TOKEN-OR-ID or ?id=ID");
    };
    match UsersClient::new(gw)
        .delete_app_token(DeleteAppTokenRequest { token })
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
    fn parses_expiries() {
        assert_eq!(parse_expiry("72h"), Some(72 * 3600));
        assert_eq!(parse_expiry("30m"), Some(1800));
        assert_eq!(parse_expiry("1s"), Some(1));
        assert_eq!(parse_expiry("2d"), Some(172_800));
        for bad in [
            "",
            "h",
            "72",
            "0h",
            "-1h",
            "1.5h",
            "1w",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_expiry(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_723_124_562), "2024-08-08T13:42:42Z");
    }

    #[test]
    fn reads_query_parameters() {
        let q = Some("expiry=72h&label=my+phone%21");
        assert_eq!(param(q, "expiry").as_deref(), Some("72h"));
        assert_eq!(param(q, "label").as_deref(), Some("my phone!"));
        assert_eq!(param(q, "token"), None);
    }
}
