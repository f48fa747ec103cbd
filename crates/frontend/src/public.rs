//! Public links: `/s/{token}` for browsers and `/remote.php/dav/public-files/{token}/…` and
//! `/dav/public-files/{token}/…` for WebDAV clients.
//!
//! The proxy lets these through without a login. Each request opens the link through the
//! sharing service (`OpenLink`): the token must exist and not have expired, and a password,
//! when the link has one, comes as HTTP Basic with any user name (as ownCloud clients send
//! it); wrong ones answer 401 and are throttled per link and per client address (then 429).
//! An open link yields a short-lived identity for the link, `public:SHARE_ID`; the request
//! runs under it through the ordinary WebDAV handlers, and the storage provider resolves that
//! identity's grant like any caller's, so a revoked link stops at the next request.
//!
//! Upload-only links ("file drop") take PUT, MKCOL and TUS creation and refuse everything else
//! with the same 403 whatever the path, so a drop tells nothing about what its folder holds;
//! the provider refuses reading too, and lands an upload onto a taken name beside it as
//! `name (2).ext` instead of replacing it or saying it exists (as oCIS does).
//!
//! COPY and MOVE stay inside their link: the destination must be below the same token
//! ([`confine_destination`]).

use std::sync::Arc;

use arca_proto::v1::sharing_client::SharingClient;
use arca_proto::v1::*;
use arca_proto::{ErrorKind, principals, routes};
use arca_runtime::Identity;
use arca_transport::Channel;
use arca_transport::context::CallContext;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, StatusCode, header};

use crate::webdav::dav;
use crate::webdav::{Dav, Location, dav_error, grpc_error};
use arca_proto::headers::CLIENT_ADDR as CLIENT_ADDR_HEADER;

/// The request header the link page sends the link's access token in.
const ACCESS_HEADER: &str = "x-link-access";

// Upload-only links lack the read bit.
use arca_proto::sharing::perm::READ;

pub(crate) fn routes(dav: Dav, archive: crate::archive::Limits) -> axum::Router {
    use axum::routing::{any, get};
    let archives = axum::Router::new()
        .route(
            &format!("{}/{{token}}/archive", routes::PUBLIC_LINK_BROWSER),
            get(link_archive),
        )
        .with_state(Arc::new((dav.clone(), archive)));
    let state = Arc::new(dav);
    // The roots are public (arca_proto::routes): the proxy lets them through unauthenticated.
    let browser_root = routes::PUBLIC_LINK_BROWSER;
    let mut router = axum::Router::new()
        .route(&format!("{browser_root}/{{token}}"), any(browser))
        .route(&format!("{browser_root}/{{token}}/"), any(browser));
    for root in routes::PUBLIC_LINK_DAV {
        router = router
            .route(&format!("{root}/{{token}}"), any(webdav))
            .route(&format!("{root}/{{token}}/"), any(webdav))
            .route(&format!("{root}/{{token}}/{{*rest}}"), any(webdav));
    }
    router.with_state(state).merge(archives)
}

/// `/s/{token}/archive?id=…`: files and folders of the link as one ZIP, as the link's
/// identity reaches them (ids outside what it shares are refused by their provider).
async fn link_archive(
    State(state): State<Arc<(Dav, crate::archive::Limits)>>,
    axum::extract::Path(token): axum::extract::Path<String>,
    req: Request,
) -> Response {
    let (dav, limits) = &*state;
    let access = access_token(&req);
    let opened = match open(dav.gateway(), &token, req.headers(), access).await {
        Ok(o) => o,
        Err(resp) => return resp,
    };
    if opened.share.permissions & READ == 0 {
        return dav_error(StatusCode::FORBIDDEN, "this link only takes uploads", None);
    }
    let ids = crate::archive::ids(req.uri().query());
    as_link(&opened.identity, crate::archive::serve(dav, *limits, ids)).await
}

/// The password of a Basic `Authorization`, whatever the user name.
fn basic_password(headers: &HeaderMap) -> String {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return String::new();
    };
    let Some((scheme, encoded)) = value.split_once(' ') else {
        return String::new();
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return String::new();
    }
    base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| t.split_once(':').map(|(_, p)| p.to_owned()))
        .unwrap_or_default()
}

/// An open link: its share, the identity to act as, and where its node is.
struct Opened {
    share: Share,
    identity: HeaderValue,
    node: Node,
    /// `OpenLinkResponse.access`: set when this request gave the password.
    access: String,
}

/// Opens the link named in a request with these `headers` (the password) or `access` token,
/// or the answer refusing it. (Not the request itself: its body is not `Sync`, so holding a
/// reference to it across an await would make the handler's future not `Send`.)
async fn open(
    gateway: &Channel,
    token: &str,
    headers: &HeaderMap,
    access: String,
) -> Result<Opened, Response> {
    let client = headers
        .get(CLIENT_ADDR_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let opened = SharingClient::new(gateway.clone())
        .open_link(OpenLinkRequest {
            token: token.to_owned(),
            password: basic_password(headers),
            client,
            access,
        })
        .await
        .map_err(|s| refusal(s, arca_proto::headers::from_script(headers)))?
        .into_inner();
    let share = opened.share.unwrap_or_default();
    let identity = HeaderValue::from_str(&opened.identity)
        .map_err(|_| dav_error(StatusCode::INTERNAL_SERVER_ERROR, "bad link identity", None))?;
    // The shared node's current path, asked as the link.
    let node = as_link(&identity, async {
        arca_proto::storage_client(gateway.clone())
            .stat(StatRequest {
                r#ref: Some(Ref {
                    space_id: String::new(),
                    path: String::new(),
                    node_id: share.node_id.clone(),
                }),
                with_props: false,
                with_locks: false,
            })
            .await
    })
    .await
    .map_err(grpc_error)?
    .into_inner();
    Ok(Opened {
        share,
        identity,
        node,
        access: opened.access,
    })
}

/// The link's access token (`OpenLinkResponse.access`) a request brings in place of the
/// password: in [`ACCESS_HEADER`], or for a GET or HEAD in the query's `access` (a download
/// link or an image the page points at cannot carry a header).
fn access_token(req: &Request) -> String {
    if let Some(v) = req
        .headers()
        .get(ACCESS_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        return v.trim().to_owned();
    }
    if !matches!(req.method().as_str(), "GET" | "HEAD") {
        return String::new();
    }
    // The token is base64url and dots: nothing in it is percent-encoded.
    req.uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .find_map(|kv| kv.strip_prefix("access="))
        .unwrap_or_default()
        .to_owned()
}

/// Runs `fut` with the link's identity on every call it makes.
async fn as_link<F: Future>(identity: &HeaderValue, fut: F) -> F::Output {
    let mut call = CallContext::current().unwrap_or_default();
    call.identity = Some(identity.clone());
    call.scope(fut).await
}

/// Why a link did not open, as HTTP: 404 unknown or expired, 401 password needed or wrong
/// (with a Basic challenge, so clients ask for it, unless a page's `script` asked), 429 when
/// throttled.
fn refusal(s: tonic::Status, script: bool) -> Response {
    match ErrorKind::of(&s) {
        ErrorKind::Unauthenticated => {
            let mut resp = dav_error(StatusCode::UNAUTHORIZED, s.message(), None);
            if !script {
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"public link\", charset=\"UTF-8\""),
                );
            }
            resp
        }
        ErrorKind::Unavailable if let Some(secs) = arca_proto::retry_after(&s) => {
            let mut resp = dav_error(StatusCode::TOO_MANY_REQUESTS, s.message(), None);
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            resp
        }
        _ => grpc_error(s),
    }
}

/// The link's token and the path below it, from the request path.
fn split(raw: &str) -> Option<(&str, &str, &str)> {
    let (root, after) = ["/remote.php/dav/public-files/", "/dav/public-files/"]
        .iter()
        .find_map(|r| raw.strip_prefix(r).map(|a| (*r, a)))?;
    let end = after.find('/').unwrap_or(after.len());
    let (token, rest) = after.split_at(end);
    Some((&raw[..root.len() + token.len()], token, rest))
}

async fn webdav(State(dav): State<Arc<Dav>>, req: Request) -> Response {
    let raw = req.uri().path().to_owned();
    let Some((prefix, token, rest)) = split(&raw) else {
        return dav_error(StatusCode::NOT_FOUND, "Resource not found", None);
    };
    let access = access_token(&req);
    let opened = match open(dav.gateway(), token, req.headers(), access).await {
        Ok(o) => o,
        Err(resp) => return resp,
    };
    let bits = opened.share.permissions;
    if bits & READ == 0 && !drop_allows(&req) {
        // The same answer whatever the path: a drop tells nothing about what it holds.
        return dav_error(StatusCode::FORBIDDEN, "this link only takes uploads", None);
    }
    let base = opened.node.path.clone();
    let rest = if rest.is_empty() { "/" } else { rest };
    // A file link's root is the file; its own name below the token names it too.
    let below = if opened.node.is_dir {
        rest.to_owned()
    } else {
        let name = dav::encoded_path(&opened.node.name);
        if rest == "/" || rest.trim_matches('/') == name.trim_start_matches('/') {
            String::new()
        } else {
            return dav_error(StatusCode::NOT_FOUND, "Resource not found", None);
        }
    };
    let mut raw_path = dav::encoded_path(&base);
    if below != "/" {
        raw_path.push_str(&below);
    }
    let path = match dav::decode_path(&raw_path) {
        Ok(p) => p,
        Err(e) => return dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None),
    };
    let mut req = req;
    if matches!(req.method().as_str(), "COPY" | "MOVE")
        && let Err(resp) = confine_destination(&mut req, token, &opened)
    {
        return resp;
    }
    let loc = Location {
        prefix: prefix.to_owned(),
        space_id: opened.node.space_id.clone(),
        path,
        tokens: Vec::new(),
        base,
    };
    as_link(&opened.identity, crate::webdav::serve(&dav, loc, req)).await
}

/// What an upload-only link takes: uploads (PUT, a TUS creation), folders to upload into,
/// and OPTIONS. Nothing that reads, lists, removes or moves.
fn drop_allows(req: &Request) -> bool {
    match req.method().as_str() {
        "PUT" | "MKCOL" | "OPTIONS" => true,
        "POST" => req.headers().contains_key("tus-resumable"),
        _ => false,
    }
}

/// A COPY or MOVE stays inside its link: the `Destination` must name a path below the same
/// token (under either public-files root). It is rewritten to the same place as a space path
/// (`/dav/spaces/SPACE/…`), which the WebDAV handler resolves like any other; the provider
/// then checks the link's grant at both ends, so even a rewritten path outside the shared
/// folder is refused there. Anything else is 403: a link reaches nothing beyond itself.
// The refusal is the HTTP answer itself, as for every handler here.
#[allow(clippy::result_large_err)]
fn confine_destination(req: &mut Request, token: &str, opened: &Opened) -> Result<(), Response> {
    let outside = || {
        dav_error(
            StatusCode::FORBIDDEN,
            "the destination is outside this link",
            None,
        )
    };
    let Some(dest) = req.headers().get("destination") else {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "Destination header missing",
            None,
        ));
    };
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let dest = match dav::parse_destination(dest.as_bytes(), &[host]) {
        Ok(p) => p,
        Err(dav::DestinationError::OtherServer(d)) => {
            return Err(dav_error(
                StatusCode::BAD_GATEWAY,
                &format!("destination {d} is on another server"),
                None,
            ));
        }
        Err(e) => return Err(dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None)),
    };
    // A file link is the file itself: there is nowhere inside it to copy to.
    let Some((_, dest_token, rest)) = split(dest.as_str()) else {
        return Err(outside());
    };
    if dest_token != token || !opened.node.is_dir || rest.trim_matches('/').is_empty() {
        return Err(outside());
    }
    let mut raw = String::from("/dav/spaces/");
    dav::encode_segment(&opened.node.space_id, &mut raw);
    dav::encode_path(&format!("{}{rest}", opened.node.path), &mut raw);
    if dest.trailing_slash() && !raw.ends_with('/') {
        raw.push('/');
    }
    let value = HeaderValue::from_str(&raw).map_err(|_| outside())?;
    req.headers_mut().insert("destination", value);
    // The WebDAV handler maps destinations for a caller; the link's principal has no home,
    // so only space paths (the one just written) resolve for it.
    req.extensions_mut().insert(Identity {
        id: format!("{}{}", principals::PUBLIC_LINK_PREFIX, opened.share.id),
        username: String::new(),
        display_name: opened.share.name.clone(),
        groups: Vec::new(),
        admin: false,
        space_admin: false,
        login: None,
    });
    Ok(())
}

/// What a `/s/{token}` request asks for, by its `Accept`.
#[derive(Debug, PartialEq, Eq)]
enum Wanted {
    /// A browser navigating: the link page of the web app.
    Page,
    /// The link page's script: what the link is ([`link_info`]).
    Json,
    /// Anything else (curl, wget, a script of its own): the file's bytes, or a bare listing.
    Raw,
}

fn wanted(headers: &HeaderMap) -> Wanted {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    // The first type listed: browsers lead with text/html, the page's fetch names JSON.
    match accept.split([',', ';']).next().map(str::trim) {
        Some("text/html") => Wanted::Page,
        Some("application/json") => Wanted::Json,
        _ => Wanted::Raw,
    }
}

/// What the link page needs to show a link, as JSON: its item (id, name, folder or file, size,
/// modification time in ms, media type), what it allows (`permissions`, the OCS bits, and
/// `drop` for upload-only), whose it is (`owner`, a display name), when it ends (`expires`,
/// ms, or null) and, after a password, the `access` token that stands for it. Refusals are
/// those of the link (401 without a challenge to a script, 404, 429 with Retry-After).
async fn link_info(dav: &Dav, token: &str, headers: &HeaderMap, access: String) -> Response {
    let opened = match open(dav.gateway(), token, headers, access).await {
        Ok(o) => o,
        Err(resp) => return resp,
    };
    let node = &opened.node;
    let share = &opened.share;
    let mime = if node.is_dir {
        String::new()
    } else {
        crate::webdav::content_type(&node.name).to_owned()
    };
    let body = serde_json::json!({
        "id": node.id,
        "name": node.name,
        "folder": node.is_dir,
        "size": node.size,
        "modified": node.mtime_ns / 1_000_000,
        "type": mime,
        "permissions": share.permissions,
        "drop": share.permissions & READ == 0,
        "owner": share.owner_display_name,
        "expires": (share.expires > 0).then_some(share.expires * 1000),
        "access": opened.access,
    });
    let mut resp = axum::Json(body).into_response();
    // The answer may carry a credential (the access token): no cache keeps it.
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// `/s/{token}` for clients other than browsers: a file's contents, a folder's listing as a
/// small page, or how to upload to a drop.
async fn browser(
    State(dav): State<Arc<Dav>>,
    axum::extract::Path(token): axum::extract::Path<String>,
    req: Request,
) -> Response {
    if !matches!(req.method().as_str(), "GET" | "HEAD") {
        return (StatusCode::METHOD_NOT_ALLOWED, "GET only\n").into_response();
    }
    match wanted(req.headers()) {
        // The page opens the link itself (it asks for the JSON below), password and all.
        Wanted::Page => return arca_web::link_page(req.headers()),
        Wanted::Json => {
            let access = access_token(&req);
            return link_info(&dav, &token, req.headers(), access).await;
        }
        Wanted::Raw => {}
    }
    let access = access_token(&req);
    let opened = match open(dav.gateway(), &token, req.headers(), access).await {
        Ok(o) => o,
        Err(resp) => return resp,
    };
    let loc = Location {
        prefix: format!("/s/{token}"),
        space_id: opened.node.space_id.clone(),
        path: match dav::decode_path(&dav::encoded_path(&opened.node.path)) {
            Ok(p) => p,
            Err(e) => return dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None),
        },
        tokens: Vec::new(),
        base: opened.node.path.clone(),
    };
    let bits = opened.share.permissions;
    if !opened.node.is_dir {
        return as_link(&opened.identity, crate::webdav::serve(&dav, loc, req)).await;
    }
    let dav_root = format!("/remote.php/dav/public-files/{token}/");
    let mut page = String::from("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>");
    dav::escape::escape_text(&opened.node.name, &mut page);
    page.push_str("</title></head><body><h1>");
    dav::escape::escape_text(&opened.node.name, &mut page);
    page.push_str("</h1>");
    if bits & READ == 0 {
        page.push_str("<p>Upload files with PUT to ");
        dav::escape::escape_text(&dav_root, &mut page);
        page.push_str("NAME</p>");
    } else {
        let listed = as_link(&opened.identity, async {
            arca_proto::storage_client(dav.gateway().clone())
                .list(ListRequest {
                    r#ref: Some(Ref {
                        space_id: loc.space_id.clone(),
                        path: loc.path.as_str().to_owned(),
                        node_id: String::new(),
                    }),
                    ..Default::default()
                })
                .await
        })
        .await;
        let children = match listed {
            Ok(l) => l.into_inner().children,
            Err(s) => return grpc_error(s),
        };
        page.push_str("<ul>");
        for c in &children {
            page.push_str("<li><a href=\"");
            let mut href = dav_root.clone();
            dav::encode_path(&c.name, &mut href);
            if c.is_dir {
                href.push('/');
            }
            dav::escape::escape_attr(&href, &mut page);
            page.push_str("\">");
            dav::escape::escape_text(&c.name, &mut page);
            page.push_str("</a></li>");
        }
        page.push_str("</ul>");
    }
    page.push_str("</body></html>\n");
    let mut resp = (StatusCode::OK, page).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_token_and_rest() {
        assert_eq!(
            split("/remote.php/dav/public-files/abc/x/y"),
            Some(("/remote.php/dav/public-files/abc", "abc", "/x/y"))
        );
        assert_eq!(
            split("/dav/public-files/abc"),
            Some(("/dav/public-files/abc", "abc", ""))
        );
        assert_eq!(split("/remote.php/webdav/abc"), None);
    }

    #[test]
    fn any_user_name_carries_the_password() {
        let mut h = HeaderMap::new();
        // "public:s3cr:et"
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic cHVibGljOnMzY3I6ZXQ="),
        );
        assert_eq!(basic_password(&h), "s3cr:et");
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        assert_eq!(basic_password(&h), "");
        assert_eq!(basic_password(&HeaderMap::new()), "");
    }
}
