//! The OCS API as ownCloud clients read it: the `{ocs:{meta,data}}` envelope in JSON or XML
//! for both API versions, and the endpoints every sync client calls first —
//! `cloud/capabilities` (answered without authentication, as oCIS does) and `cloud/user`.
//!
//! Other OCS endpoints build on [`Ocs`]: a handler takes it as an extractor and answers with
//! [`Ocs::ok`], [`Ocs::error`] or [`Ocs::status`]; [`render`] is the envelope itself.
//!
//! Envelope rules (reva's `ocs/response`, which oCIS serves; shared/protocol/samples):
//! - `format=json` in the query selects JSON; anything else gets XML.
//! - v1 says success with `statuscode` 100 and answers HTTP 200 whatever happened, except 401
//!   for 997 (unauthorised). v2 says success with 200 and also sets the HTTP status: 404 for
//!   998, 401 for 997, 500 for 996/999, other 2xx–5xx codes as they are, 101–199 as 400.
//! - XML writes booleans as `1`/`0` and list items as `<element>` children.

use arca_proto::ErrorKind;
use arca_proto::v1::GetUserRequest;
use arca_proto::v1::users_client::UsersClient;
use arca_runtime::Caller;
use arca_transport::Channel;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::webdav::dav::escape::{escape_attr, escape_text};

mod shares;

/// OCS status codes (`meta.statuscode`), as reva defines them.
// The whole set is here for the OCS APIs built on this module; not every code is used yet.
#[allow(dead_code)]
pub(crate) mod code {
    /// Success in v1; v2 reports it as 200.
    pub(crate) const OK: u16 = 100;
    pub(crate) const FAILURE: u16 = 101;
    pub(crate) const INVALID_INPUT: u16 = 102;
    pub(crate) const FORBIDDEN: u16 = 104;
    pub(crate) const BAD_REQUEST: u16 = 400;
    pub(crate) const PATH_NOT_FOUND: u16 = 404;
    pub(crate) const LOCKED: u16 = 423;
    pub(crate) const SERVER_ERROR: u16 = 996;
    pub(crate) const UNAUTHORISED: u16 = 997;
    pub(crate) const NOT_FOUND: u16 = 998;
    pub(crate) const UNKNOWN_ERROR: u16 = 999;
}

/// `/ocs/v1.php/…` or `/ocs/v2.php/…`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Xml,
}

/// How a request wants its OCS answer; an extractor that never fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ocs {
    pub(crate) version: Version,
    pub(crate) format: Format,
}

impl Ocs {
    pub(crate) fn of(path: &str, query: Option<&str>) -> Self {
        let version = if path.starts_with("/ocs/v2.php") {
            Version::V2
        } else {
            Version::V1
        };
        let json = query.is_some_and(|q| {
            q.split('&')
                .filter_map(|pair| pair.split_once('='))
                .any(|(k, v)| k == "format" && v.eq_ignore_ascii_case("json"))
        });
        Ocs {
            version,
            format: if json { Format::Json } else { Format::Xml },
        }
    }

    /// Success with `data`.
    pub(crate) fn ok(self, data: Value) -> Response {
        render(self.version, self.format, code::OK, "OK", &data)
    }

    /// Failure with an OCS status code (see [`code`]) and a one-line message.
    pub(crate) fn error(self, status: u16, message: &str) -> Response {
        render(self.version, self.format, status, message, &Value::Null)
    }

    /// Failure from a gRPC status, by its error kind (the shared mapping, [`crate::failure`]).
    pub(crate) fn status(self, s: &tonic::Status) -> Response {
        let failure = crate::failure::Failure::of(s);
        let status = match failure.kind {
            ErrorKind::NotFound => code::NOT_FOUND,
            ErrorKind::Unauthenticated => code::UNAUTHORISED,
            ErrorKind::PermissionDenied => code::FORBIDDEN,
            ErrorKind::InvalidArgument | ErrorKind::TooLarge => code::BAD_REQUEST,
            ErrorKind::Locked => code::LOCKED,
            ErrorKind::AlreadyExists | ErrorKind::Conflict | ErrorKind::PreconditionFailed => {
                code::FAILURE
            }
            ErrorKind::QuotaExceeded | ErrorKind::Unavailable | ErrorKind::Internal => {
                code::SERVER_ERROR
            }
        };
        self.error(status, &failure.message)
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Ocs {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Ocs::of(parts.uri.path(), parts.uri.query()))
    }
}

/// The HTTP status of an OCS answer (see the module docs).
fn http_status(version: Version, status: u16) -> StatusCode {
    let http = match version {
        Version::V1 if status == code::UNAUTHORISED => 401,
        Version::V1 => 200,
        Version::V2 => match status {
            code::OK => 200,
            code::NOT_FOUND => 404,
            code::UNAUTHORISED => 401,
            code::SERVER_ERROR | code::UNKNOWN_ERROR => 500,
            200..=599 => status,
            101..=199 => 400,
            _ => 200,
        },
    };
    StatusCode::from_u16(http).unwrap_or(StatusCode::OK)
}

/// The whole OCS answer: envelope, HTTP status and content type. `data` `null` is written as
/// an empty `data`.
pub(crate) fn render(
    version: Version,
    format: Format,
    status: u16,
    message: &str,
    data: &Value,
) -> Response {
    let http = http_status(version, status);
    // v2 reports success as 200; errors keep their OCS code (as reva does).
    let meta_code = if version == Version::V2 && status == code::OK {
        200
    } else {
        status
    };
    let state = if status == code::OK { "ok" } else { "error" };
    let (body, content_type) = match format {
        Format::Json => {
            let doc = json!({"ocs": {
                "meta": {"status": state, "statuscode": meta_code, "message": message},
                "data": data,
            }});
            (doc.to_string(), "application/json; charset=utf-8")
        }
        Format::Xml => {
            let mut out = String::with_capacity(1024);
            out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ocs><meta><status>");
            out.push_str(state);
            out.push_str("</status><statuscode>");
            out.push_str(&meta_code.to_string());
            out.push_str("</statuscode><message>");
            escape_text(message, &mut out);
            out.push_str("</message></meta>");
            write_xml("data", data, &mut out);
            out.push_str("</ocs>");
            (out, "text/xml; charset=utf-8")
        }
    };
    let mut resp = (http, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A JSON value as an XML element named `name`, the way ownCloud serialises OCS data.
fn write_xml(name: &str, value: &Value, out: &mut String) {
    // Keys that are not XML names (a file extension, say) go in an attribute instead.
    let valid = is_xml_name(name);
    out.push('<');
    if valid {
        out.push_str(name);
    } else {
        out.push_str("element key=\"");
        escape_attr(name, out);
        out.push('"');
    }
    out.push('>');
    match value {
        Value::Null => {}
        Value::Bool(b) => out.push(if *b { '1' } else { '0' }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => escape_text(s, out),
        Value::Array(items) => {
            for item in items {
                write_xml("element", item, out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                write_xml(k, v, out);
            }
        }
    }
    out.push_str("</");
    out.push_str(if valid { name } else { "element" });
    out.push('>');
}

fn is_xml_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.to_ascii_lowercase().starts_with("xml")
}

pub(crate) fn routes(gateway: Channel) -> axum::Router {
    let [capabilities_v1, capabilities_v2] = arca_proto::routes::CAPABILITIES;
    axum::Router::new()
        // Public (arca_proto::routes): the proxy lets them through unauthenticated.
        .route(capabilities_v1, get(capabilities))
        .route(capabilities_v2, get(capabilities))
        .route("/ocs/v1.php/cloud/user", get(user))
        .route("/ocs/v2.php/cloud/user", get(user))
        .route(NOTIFICATIONS_V1, get(notifications))
        .route(NOTIFICATIONS_V2, get(notifications))
        .route("/ocs/v1.php/{*rest}", any(unknown))
        .route("/ocs/v2.php/{*rest}", any(unknown))
        .with_state(gateway.clone())
        .merge(shares::routes(gateway))
}

const NOTIFICATIONS_V1: &str = "/ocs/v1.php/apps/notifications/api/v1/notifications";
const NOTIFICATIONS_V2: &str = "/ocs/v2.php/apps/notifications/api/v1/notifications";

async fn unknown(ocs: Ocs) -> Response {
    ocs.error(code::NOT_FOUND, "Not Found")
}

/// `GET …/cloud/capabilities`.
async fn capabilities(ocs: Ocs) -> Response {
    ocs.ok(json!({
        "version": version(),
        "capabilities": capability_tree(),
    }))
}

/// The server version in the OCS shape, derived from `/status.php`'s answer so the two never
/// disagree.
fn version() -> Value {
    let status = crate::status_info();
    let s = |k: &str| status[k].as_str().unwrap_or_default().to_owned();
    let string = s("versionstring");
    let mut parts = string.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    json!({
        "major": parts.next().unwrap_or(0),
        "minor": parts.next().unwrap_or(0),
        "micro": parts.next().unwrap_or(0),
        "string": string,
        "edition": s("edition"),
        "product": s("product"),
        "productversion": s("productversion"),
    })
}

/// What arca offers, in the keys clients read (CLIENT_PROTOCOL.md §2, owncloud/client
/// `capabilities.cpp`). Only what arca does: chunking NG (`dav.chunking` "1.0" and
/// `bigfilechunking`, which the Nextcloud client needs before it chunks; the ownCloud client
/// prefers TUS), no URL signing, no server-sent events.
fn capability_tree() -> Value {
    json!({
        "core": {
            // Milliseconds for the desktop client, which ignores values below 5000 (and so
            // this one: oCIS sends the same 60).
            "pollinterval": 60,
            "webdav-root": "remote.php/webdav",
            "status": crate::status_info(),
            "support-url-signing": false,
            "support-sse": false,
        },
        "checksums": {
            "supportedTypes": ["SHA1", "MD5", "Adler32"],
            "preferredUploadType": "SHA1",
        },
        "files": {
            "privateLinks": true,
            "bigfilechunking": true,
            // The trash bin and versions (webdav::undo).
            "undelete": true,
            "versioning": true,
            "favorites": false,
            // Contents of text-like files are searched (`content:`).
            "full_text_search": true,
            "tags": false,
            "blacklisted_files": [],
            "thumbnail": crate::preview::capability(),
            "tus_support": {
                "version": "1.0.0",
                "resumable": "1.0.0",
                "extension": "creation,creation-with-upload",
                "max_chunk_size": 10_000_000,
                "http_method_override": "",
            },
        },
        "dav": {
            "chunking": "1.0",
            "trashbin": "1.0",
            "chunkingParallelUploadDisabled": false,
            // ownCloud Web offers search only where this lists "search-files".
            "reports": crate::search::reports(),
        },
        "search": crate::search::properties(),
        "files_sharing": {
            "api_enabled": true,
            "default_permissions": 22,
            "resharing": false,
            "group_sharing": true,
            "sharing_roles": true,
            "deny_access": false,
            "auto_accept_share": true,
            "share_with_group_members_only": true,
            "share_with_membership_groups_only": true,
            "search_min_length": 3,
            "user_enumeration": {"enabled": true, "group_members_only": true},
            "federation": {"outgoing": false, "incoming": false},
            "public": {
                "enabled": true,
                "send_mail": false,
                "social_share": false,
                "upload": true,
                "multiple": true,
                "supports_upload_only": true,
                "password": {
                    "enforced": false,
                    "enforced_for": {
                        "read_only": false,
                        "read_write": false,
                        "read_write_delete": false,
                        "upload_only": false,
                    },
                },
                "expire_date": {"enabled": false},
                "can_edit": true,
                "alias": true,
                "default_permissions": 1,
            },
            "user": {
                "send_mail": false,
                "profile_picture": false,
                "expire_date": {"enabled": false},
            },
        },
        "spaces": {
            "version": "1.0.0",
            "enabled": true,
            "projects": true,
            "share_jail": true,
            "max_quota": 0,
        },
        // The list is always empty (see `notifications`), but advertising it keeps clients
        // from probing for the older REST endpoint.
        "notifications": {"ocs-endpoints": ["list"]},
    })
}

/// `GET …/cloud/user`: the caller, in OCS field names.
async fn user(ocs: Ocs, State(gw): State<Channel>, Caller(who): Caller) -> Response {
    let found = UsersClient::new(gw)
        .get_user(GetUserRequest {
            id: who.id.clone(),
            username: String::new(),
        })
        .await;
    match found {
        Ok(u) => {
            let u = u.into_inner();
            let mut data = Map::new();
            data.insert("id".into(), Value::String(u.username));
            data.insert("display-name".into(), Value::String(u.display_name));
            data.insert("email".into(), Value::String(u.mail));
            data.insert("user-type".into(), Value::String("primary".into()));
            ocs.ok(Value::Object(data))
        }
        Err(s) => ocs.status(&s),
    }
}

/// `GET …/apps/notifications/api/v1/notifications`: arca raises no notifications yet, so the
/// list is empty rather than missing (the desktop client polls it when advertised).
async fn notifications(ocs: Ocs, Caller(_): Caller) -> Response {
    ocs.ok(json!([]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(resp: Response) -> (StatusCode, String, String) {
        let status = resp.status();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, ct, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[test]
    fn version_and_format_come_from_the_url() {
        let o = Ocs::of("/ocs/v2.php/cloud/user", Some("format=json"));
        assert_eq!((o.version, o.format), (Version::V2, Format::Json));
        let o = Ocs::of("/ocs/v1.php/cloud/user", Some("x=1&format=JSON"));
        assert_eq!((o.version, o.format), (Version::V1, Format::Json));
        let o = Ocs::of("/ocs/v1.php/cloud/user", Some("format=xml"));
        assert_eq!(o.format, Format::Xml);
        assert_eq!(Ocs::of("/ocs/v1.php/x", None).format, Format::Xml);
    }

    #[test]
    fn status_mapping_follows_reva() {
        assert_eq!(http_status(Version::V1, code::NOT_FOUND), StatusCode::OK);
        assert_eq!(
            http_status(Version::V1, code::UNAUTHORISED),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(http_status(Version::V2, code::OK), StatusCode::OK);
        assert_eq!(
            http_status(Version::V2, code::NOT_FOUND),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            http_status(Version::V2, code::SERVER_ERROR),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            http_status(Version::V2, code::FORBIDDEN),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            http_status(Version::V2, code::BAD_REQUEST),
            StatusCode::BAD_REQUEST
        );
    }

    #[tokio::test]
    async fn json_envelope() {
        let r = render(Version::V2, Format::Json, code::OK, "OK", &json!({"a": 1}));
        let (status, ct, text) = body(r).await;
        assert_eq!(status, StatusCode::OK);
        assert!(ct.starts_with("application/json"));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ocs"]["meta"]["statuscode"], 200);
        assert_eq!(v["ocs"]["meta"]["status"], "ok");
        assert_eq!(v["ocs"]["data"]["a"], 1);

        let r = render(
            Version::V2,
            Format::Json,
            code::NOT_FOUND,
            "gone",
            &Value::Null,
        );
        let (status, _, text) = body(r).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ocs"]["meta"]["statuscode"], 998);
        assert_eq!(v["ocs"]["meta"]["message"], "gone");
    }

    #[tokio::test]
    async fn xml_envelope() {
        let data = json!({
            "t": true, "f": false, "n": 7, "s": "a<b", "list": ["x", "y"], "empty": [],
            ".gif": "image/gif",
        });
        let r = render(Version::V1, Format::Xml, code::OK, "OK", &data);
        let (status, ct, text) = body(r).await;
        assert_eq!(status, StatusCode::OK);
        assert!(ct.starts_with("text/xml"));
        assert!(text.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ocs><meta>"));
        for part in [
            "<statuscode>100</statuscode>",
            "<t>1</t>",
            "<f>0</f>",
            "<n>7</n>",
            "<s>a&lt;b</s>",
            "<list><element>x</element><element>y</element></list>",
            "<empty></empty>",
            "<element key=\".gif\">image/gif</element>",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        assert!(text.ends_with("</data></ocs>"), "{text}");
    }

    #[test]
    fn version_matches_status() {
        let v = version();
        let status = crate::status_info();
        assert_eq!(v["string"], status["versionstring"]);
        assert_eq!(v["productversion"], status["productversion"]);
        assert_eq!(
            (v["major"].as_u64(), v["minor"].as_u64()),
            (Some(10), Some(11))
        );
    }

    /// Specific OCS routes and the catch-all for unknown ones live side by side (others add
    /// more specific routes later).
    #[tokio::test]
    async fn unknown_paths_are_ocs_not_found() {
        use tower::ServiceExt;
        let router = axum::Router::new()
            .route("/ocs/v1.php/cloud/capabilities", get(capabilities))
            .route("/ocs/v1.php/{*rest}", any(unknown))
            .route("/ocs/v2.php/{*rest}", any(unknown));
        let req = |uri: &str| {
            http::Request::get(uri)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let (status, _, text) = body(
            router
                .clone()
                .oneshot(req("/ocs/v1.php/nope?format=json"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("998"), "{text}");
        let (status, _, _) = body(
            router
                .clone()
                .oneshot(req("/ocs/v2.php/a/b"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _, text) = body(
            router
                .oneshot(req("/ocs/v1.php/cloud/capabilities?format=json"))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("tus_support"), "{text}");
    }
}
