//! Search: `REPORT` with an `<oc:search-files>` body, as oCIS serves it to ownCloud Web
//! (shared/protocol/NEXT_FEATURES.md "Search"), on `/remote.php/dav/spaces/`, `/dav/spaces/`
//! and every WebDAV root (`/remote.php/webdav/`, `/remote.php/dav/files/USER/`,
//! `/dav/spaces/ID/`): the same search everywhere, over every space the caller may read;
//! `scope:` in the query narrows it.
//!
//! The body: `<oc:search-files><oc:search><oc:pattern>KQL</oc:pattern><oc:limit>N</oc:limit>
//! </oc:search></oc:search-files>`. The answer: 207, one `<d:response>` per hit with its
//! href under `/dav/spaces/SPACE-ID/PATH` (a URL arca serves) and `oc:fileid`, `oc:file-parent`,
//! `oc:name`, `oc:score`, `d:getetag`, `oc:permissions`, `d:getlastmodified`,
//! `d:getcontenttype`, `oc:size`, `d:resourcetype`; the hits in all (past the limit) in
//! `Content-Range: rows 0-{n-1}/{total}`, oCIS's header (left out when nothing is found, as
//! oCIS does). A body that is no `oc:search-files` or a query that does not parse is 400 with
//! one line naming the problem; a deployment without the search service answers 503 with
//! Retry-After. (oCIS writes hrefs under `/remote.php/dav/spaces/` when asked there; arca
//! serves spaces at `/dav/spaces/` only, so its hrefs always name that.)
//!
//! Nextcloud's `SEARCH` (RFC 5323 `basicsearch`) on `/remote.php/dav/` is turned into the
//! same query ([`basic`]).
//!
//! The search service (through the gateway) finds and checks rights; here is only the HTTP.

mod basic;

use std::sync::Arc;

use arca_proto::ErrorKind;
use arca_proto::v1::search_client::SearchClient;
use arca_proto::v1::{SearchHit, SearchRequest, SearchResponse};
use arca_runtime::Caller;
use arca_transport::Channel;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{HeaderValue, StatusCode};
use quick_xml::events::Event;
use quick_xml::reader::Reader;

use crate::webdav::dav::{self, LiveProp, Multistatus, OC_NS, PropName};
use crate::webdav::{dav_error, grpc_error, xml_answer, xml_body};

/// `oc:score`, not among the live properties PROPFIND knows.
const OC_SCORE: PropName = PropName {
    ns: std::borrow::Cow::Borrowed(OC_NS),
    local: std::borrow::Cow::Borrowed("score"),
};

/// What an `<oc:search-files>` body asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Report {
    pattern: String,
    limit: u32,
}

/// Why a REPORT body was refused (400, one line).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReportError {
    #[error("malformed XML: {0}")]
    Malformed(String),
    #[error("XML document type declarations and entity references are not allowed")]
    Dtd,
    // oCIS's words.
    #[error("missing search-files tag")]
    Unsupported,
    #[error("oc:search-files needs an oc:pattern")]
    NoPattern,
    #[error("oc:limit must be a whole number")]
    BadLimit,
}

/// The routes without a space id (`REPORT /remote.php/dav/spaces/`), where ownCloud Web sends
/// its searches; below them, `webdav::serve` hands REPORT here.
pub(crate) fn routes(gateway: Channel) -> axum::Router {
    use axum::routing::any;
    let state = Arc::new(gateway);
    axum::Router::new()
        .route("/remote.php/dav/spaces", any(root))
        .route("/remote.php/dav/spaces/", any(root))
        .route("/dav/spaces", any(root))
        .route("/dav/spaces/", any(root))
        .route("/remote.php/dav", any(dav_root))
        .route("/remote.php/dav/", any(dav_root))
        .with_state(state)
}

/// `/remote.php/dav/`: Nextcloud's SEARCH.
async fn dav_root(
    State(gateway): State<Arc<Channel>>,
    Caller(who): Caller,
    req: Request,
) -> Response {
    if req.method().as_str() != "SEARCH" {
        let mut resp = dav_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "only SEARCH is served here",
            None,
        );
        resp.headers_mut()
            .insert(http::header::ALLOW, HeaderValue::from_static("SEARCH"));
        return resp;
    }
    basic::search(&gateway, &who, req).await
}

/// Asks the search service; the error answer when it cannot (503 with Retry-After when no
/// search service is deployed or it is away: searches wait, nothing else does).
async fn ask(gateway: &Channel, request: SearchRequest) -> Result<SearchResponse, Response> {
    let answer = SearchClient::new(gateway.clone())
        .max_decoding_message_size(arca_proto::MAX_STORAGE_ANSWER)
        .search(request)
        .await;
    match answer {
        Ok(a) => Ok(a.into_inner()),
        Err(s) if ErrorKind::of(&s) == ErrorKind::Unavailable => Err(dav_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "search is temporarily unavailable, retry later",
            None,
        )),
        Err(s) => Err(grpc_error(s)),
    }
}

/// One hit's `<d:response>` at `href`, with `d:displayname` too when `named` (Nextcloud's
/// clients show it).
fn write_hit(ms: &mut Multistatus, href: &str, hit: &SearchHit, named: bool) {
    let Some(n) = &hit.node else { return };
    let mut r = ms.response(href);
    r.text(&LiveProp::OcId.name(), &n.id);
    r.text(&LiveProp::OcFileId.name(), &n.id);
    r.text(&LiveProp::OcSpaceId.name(), &n.space_id);
    if !n.parent_id.is_empty() {
        r.text(&LiveProp::OcFileParent.name(), &n.parent_id);
    }
    r.text(&LiveProp::OcName.name(), &n.name);
    if named {
        r.text(&LiveProp::DisplayName.name(), &n.name);
    }
    r.text(&OC_SCORE, &hit.score.to_string());
    r.etag(&n.etag);
    r.text(
        &LiveProp::OcPermissions.name(),
        &crate::webdav::jail::dav_permissions(n),
    );
    r.last_modified(n.mtime_ns.div_euclid(1_000_000_000));
    r.resourcetype(n.is_dir);
    if !n.is_dir {
        r.text(&LiveProp::GetContentType.name(), &hit.media_type);
        r.number(&LiveProp::GetContentLength.name(), n.size);
    }
    r.number(&LiveProp::OcSize.name(), n.size);
    r.finish();
}

async fn root(State(gateway): State<Arc<Channel>>, Caller(_): Caller, req: Request) -> Response {
    if req.method().as_str() != "REPORT" {
        return dav_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "only REPORT is served here",
            None,
        );
    }
    report(&gateway, req).await
}

/// Answers a `REPORT` request.
pub(crate) async fn report(gateway: &Channel, req: Request) -> Response {
    let body = match xml_body(req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let ask = match parse(&body) {
        Ok(a) => a,
        Err(e) => return dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None),
    };
    let request = SearchRequest {
        query: ask.pattern,
        limit: ask.limit,
        ..SearchRequest::default()
    };
    let answer = match self::ask(gateway, request).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    let mut ms = Multistatus::with_capacity(answer.hits.len() * 700);
    for hit in &answer.hits {
        let Some(n) = &hit.node else { continue };
        let mut href = String::from("/dav/spaces/");
        dav::encode_segment(&n.space_id, &mut href);
        dav::encode_path(&n.path, &mut href);
        if n.is_dir && !href.ends_with('/') {
            href.push('/');
        }
        write_hit(&mut ms, &href, hit, false);
    }
    let mut resp = xml_answer(StatusCode::MULTI_STATUS, ms.finish());
    // oCIS's header, only when something was found.
    if !answer.hits.is_empty() {
        let range = format!("rows 0-{}/{}", answer.hits.len() - 1, answer.total);
        if let Ok(v) = HeaderValue::from_str(&range) {
            resp.headers_mut().insert(http::header::CONTENT_RANGE, v);
        }
    }
    resp
}

/// Reads an `<oc:search-files>` body: the text of its `pattern` and `limit` elements
/// (namespaces are not checked beyond the root's local name: clients send `oc:`).
pub(crate) fn parse(body: &[u8]) -> Result<Report, ReportError> {
    let text = std::str::from_utf8(body).map_err(|_| ReportError::Malformed("not UTF-8".into()))?;
    let mut reader = Reader::from_str(text);
    let mut depth = 0usize;
    let mut root = None;
    let mut current = String::new();
    let mut pattern: Option<String> = None;
    let mut limit = String::new();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| ReportError::Malformed(e.to_string()))?;
        match event {
            Event::Start(e) => {
                let local = e.local_name().as_ref().to_owned();
                if depth == 0 {
                    root = Some(local.clone());
                }
                depth += 1;
                current = local;
            }
            Event::Empty(e) if depth == 0 => {
                root = Some(e.local_name().as_ref().to_owned());
            }
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                current.clear();
            }
            Event::Text(t) => {
                let s = t.xml10_content();
                append(&current, &s, &mut pattern, &mut limit);
            }
            Event::CData(c) => {
                let s = c.xml10_content();
                append(&current, &s, &mut pattern, &mut limit);
            }
            Event::GeneralRef(r) => {
                let name = r.into_inner();
                let s = if name.starts_with('#') {
                    dav::escape::char_ref(&name)
                        .map_err(|_| ReportError::Malformed(format!("bad reference &{name};")))?
                        .to_string()
                } else {
                    dav::escape::predefined_entity(&name)
                        .ok_or(ReportError::Dtd)?
                        .to_owned()
                };
                append(&current, &s, &mut pattern, &mut limit);
            }
            Event::DocType(_) => return Err(ReportError::Dtd),
            Event::Eof => break,
            _ => {}
        }
    }
    if root.as_deref() != Some("search-files") {
        return Err(ReportError::Unsupported);
    }
    let pattern = pattern
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .ok_or(ReportError::NoPattern)?;
    let limit = match limit.trim() {
        "" => 0,
        l => l.parse::<u32>().map_err(|_| ReportError::BadLimit)?,
    };
    Ok(Report { pattern, limit })
}

fn append(current: &str, s: &str, pattern: &mut Option<String>, limit: &mut String) {
    match current {
        "pattern" => pattern.get_or_insert_with(String::new).push_str(s),
        "limit" => limit.push_str(s),
        _ => {}
    }
}

/// The capability that makes ownCloud Web offer search.
pub(crate) fn reports() -> serde_json::Value {
    serde_json::json!(["search-files"])
}

/// oCIS's `search.property` capability: what ownCloud Web's search filters may ask. Names and
/// contents, and the media type groups the query language knows; `mtime` keywords ("today",
/// "last 7 days") are not understood, so that filter is off.
pub(crate) fn properties() -> serde_json::Value {
    serde_json::json!({
        "property": {
            "name": {"enabled": true},
            "content": {"enabled": true},
            "mediatype": {
                "enabled": true,
                "keywords": ["folder", "document", "spreadsheet", "presentation", "pdf",
                             "image", "video", "audio", "archive"],
            },
            "mtime": {"enabled": false},
            "tag": {"enabled": false},
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_web_sends() {
        let body = br#"<?xml version="1.0"?>
<oc:search-files xmlns:a="DAV:" xmlns:oc="http://owncloud.org/ns">
  <a:prop><oc:fileid/><oc:name/></a:prop>
  <oc:search><oc:pattern>name:"*a&amp;b*"</oc:pattern><oc:limit>50</oc:limit></oc:search>
</oc:search-files>"#;
        assert_eq!(
            parse(body),
            Ok(Report {
                pattern: r#"name:"*a&b*""#.into(),
                limit: 50
            })
        );
        assert_eq!(
            parse(b"<oc:filter-files xmlns:oc=\"http://owncloud.org/ns\"/>"),
            Err(ReportError::Unsupported)
        );
        assert_eq!(
            parse(b"<oc:search-files xmlns:oc=\"http://owncloud.org/ns\"><oc:search><oc:pattern> </oc:pattern></oc:search></oc:search-files>"),
            Err(ReportError::NoPattern)
        );
        assert_eq!(
            parse(b"<!DOCTYPE x [<!ENTITY a \"b\">]><oc:search-files/>"),
            Err(ReportError::Dtd)
        );
    }
}
