//! Nextcloud's search: `SEARCH /remote.php/dav/` with an RFC 5323 `basicsearch` body, turned
//! into the same query the `REPORT` takes (the search service's KQL), so both find the same.
//!
//! ```xml
//! <d:searchrequest xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">
//!   <d:basicsearch>
//!     <d:select><d:prop><d:displayname/></d:prop></d:select>
//!     <d:from><d:scope><d:href>/files/alice/Photos</d:href><d:depth>infinity</d:depth></d:scope></d:from>
//!     <d:where><d:like><d:prop><d:displayname/></d:prop><d:literal>%cat%</d:literal></d:like></d:where>
//!     <d:limit><d:nresults>50</d:nresults></d:limit>
//!   </d:basicsearch>
//! </d:searchrequest>
//! ```
//!
//! - `where`: `and`, `or`, `not`, `is-collection`, and `eq`, `like`, `gt`, `gte`, `lt`, `lte`
//!   of a property and a literal. Properties: `d:displayname` (eq, like; `%` any run, `_` one
//!   character; a name without wildcards matches names containing it, as KQL's `name:` does),
//!   `d:getcontenttype` (eq, or like a prefix `image/%`), `d:getlastmodified` (a time in
//!   RFC 3339 or Unix seconds; eq is that day), `oc:size` and `d:getcontentlength`. Anything
//!   else is 400 naming it.
//! - `from`: `/files/{you}[/path]` (with or without `/remote.php/dav`), depth `infinity` or
//!   `1` (the folder's own entries). Another user's files: 403. A folder that does not exist:
//!   404. The root of your files searches everything you can read, shares and spaces included.
//! - `orderby`: its first `order` by `d:displayname`, `d:getlastmodified`, `oc:size` or
//!   `d:getcontentlength` (ascending, or `d:descending`) decides which hits come first and so
//!   which `limit/nresults` keeps (without one: best first). `select` is accepted and not
//!   used: every hit carries the REPORT's properties plus `d:displayname`.
//!
//! Hits in your personal space are named as Nextcloud names them, under
//! `/remote.php/dav/files/{you}/`; others under `/dav/spaces/{space}/`, where arca serves them.

use arca_proto::v1::{GetHomeSpaceRequest, Ref, SearchOrder, SearchRequest, StatRequest};
use arca_runtime::Identity;
use arca_transport::Channel;
use axum::extract::Request;
use axum::response::Response;
use http::StatusCode;

use crate::webdav::dav::props::{DAV_NS, OC_NS};
use crate::webdav::dav::xml::{XmlTree, parse_tree};
use crate::webdav::dav::{self, Multistatus};
use crate::webdav::{dav_error, grpc_error, xml_answer, xml_body};

/// A `basicsearch` as the search service takes it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Basic {
    /// KQL, without the scope.
    pub(crate) query: String,
    /// The folder inside the caller's files searched ("" = everything they can read).
    pub(crate) scope: String,
    /// Only the folder's own entries (`depth 1`).
    pub(crate) shallow: bool,
    pub(crate) limit: u32,
    /// The first `orderby/order` (later ones are not used): which hits the limit keeps.
    pub(crate) order: SearchOrder,
    pub(crate) descending: bool,
}

/// Why a SEARCH body was refused: 400 with this line (403 for another user's files).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BasicError {
    #[error("{0}")]
    Xml(String),
    #[error("a searchrequest needs a basicsearch")]
    NotBasic,
    #[error("basicsearch needs a where")]
    NoWhere,
    #[error("{0}")]
    Invalid(String),
    #[error("the scope must be /files/{0} or a folder in it")]
    OtherUser(String),
}

fn invalid(why: impl Into<String>) -> BasicError {
    BasicError::Invalid(why.into())
}

/// Reads a `searchrequest` body for `user`.
pub(crate) fn parse(body: &[u8], user: &str) -> Result<Basic, BasicError> {
    let tree = parse_tree(body, "searchrequest", "DAV:searchrequest")
        .map_err(|e| BasicError::Xml(e.to_string()))?;
    let basic = tree.dav_child("basicsearch").ok_or(BasicError::NotBasic)?;
    let condition = basic
        .dav_child("where")
        .and_then(|w| w.children.first())
        .ok_or(BasicError::NoWhere)?;
    let query = kql(condition, 0)?;
    let (scope, shallow) = match basic.dav_child("from").and_then(|f| f.dav_child("scope")) {
        None => (String::new(), false),
        Some(scope) => {
            let href = scope.dav_child("href").map_or("", |h| h.text.trim());
            let shallow = match scope.dav_child("depth").map(|d| d.text.trim()) {
                None | Some("infinity") => false,
                Some("1") => true,
                Some(other) => {
                    return Err(invalid(format!(
                        "scope depth {:?} is not served (infinity or 1)",
                        dav::escape::one_line(other, 40)
                    )));
                }
            };
            (scope_path(href, user)?, shallow)
        }
    };
    let limit = match basic
        .dav_child("limit")
        .and_then(|l| l.dav_child("nresults"))
        .map(|n| n.text.trim())
    {
        None | Some("") => 0,
        Some(n) => n
            .parse::<u32>()
            .map_err(|_| invalid("limit nresults must be a whole number"))?,
    };
    let (order, descending) = match basic
        .dav_child("orderby")
        .and_then(|o| o.dav_child("order"))
    {
        None => (SearchOrder::Relevance, false),
        Some(o) => {
            let prop = o
                .dav_child("prop")
                .and_then(|p| p.children.first())
                .ok_or_else(|| invalid("order needs a prop"))?;
            let order = match (prop.name.ns.as_ref(), prop.name.local.as_ref()) {
                (DAV_NS, "displayname") | (OC_NS, "name") => SearchOrder::Name,
                (DAV_NS, "getlastmodified") => SearchOrder::Mtime,
                (OC_NS, "size") | (DAV_NS, "getcontentlength") => SearchOrder::Size,
                (OC_NS, "score") => SearchOrder::Relevance,
                _ => return Err(invalid(format!("cannot order by {}", prop.name))),
            };
            (order, o.dav_child("descending").is_some())
        }
    };
    Ok(Basic {
        query,
        scope,
        shallow,
        limit,
        order,
        descending,
    })
}

/// The path inside `user`'s files that `href` names.
fn scope_path(href: &str, user: &str) -> Result<String, BasicError> {
    let path = href
        .strip_prefix("/remote.php/dav")
        .unwrap_or(href)
        .trim_end_matches('/');
    let decoded = dav::decode_path(if path.is_empty() { "/" } else { path })
        .map_err(|e| invalid(format!("scope href: {e}")))?;
    let mut segments = decoded.as_str().split('/').filter(|s| !s.is_empty());
    if segments.next() != Some("files") {
        return Err(BasicError::OtherUser(user.to_owned()));
    }
    if segments.next() != Some(user) {
        return Err(BasicError::OtherUser(user.to_owned()));
    }
    Ok(segments.fold(String::new(), |mut p, s| {
        p.push('/');
        p.push_str(s);
        p
    }))
}

/// The deepest nesting of `and`/`or`/`not` taken (the tree's own limit is far higher).
const MAX_NESTING: usize = 32;

/// A condition as KQL.
fn kql(el: &XmlTree, depth: usize) -> Result<String, BasicError> {
    if depth > MAX_NESTING {
        return Err(invalid("conditions nest too deep"));
    }
    if el.name.ns != DAV_NS {
        return Err(invalid(format!("unknown operator {}", el.name)));
    }
    let op = el.name.local.as_ref();
    match op {
        "and" | "or" => {
            if el.children.is_empty() {
                return Err(invalid(format!("{op} needs conditions")));
            }
            let parts = el
                .children
                .iter()
                .map(|c| kql(c, depth + 1).map(|q| format!("({q})")))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(parts.join(if op == "and" { " AND " } else { " OR " }))
        }
        "not" => {
            let [inner] = el.children.as_slice() else {
                return Err(invalid("not takes one condition"));
            };
            Ok(format!("NOT ({})", kql(inner, depth + 1)?))
        }
        "is-collection" => Ok("mediatype:folder".to_owned()),
        "eq" | "like" | "gt" | "gte" | "lt" | "lte" => comparison(el, op),
        _ => Err(invalid(format!("unknown operator {op}"))),
    }
}

/// `<op><prop><NAME/></prop><literal>VALUE</literal></op>` as KQL.
fn comparison(el: &XmlTree, op: &str) -> Result<String, BasicError> {
    let prop = el
        .dav_child("prop")
        .and_then(|p| p.children.first())
        .ok_or_else(|| invalid(format!("{op} needs a prop")))?;
    let literal = el
        .dav_child("literal")
        .map(|l| l.text.as_str())
        .ok_or_else(|| invalid(format!("{op} needs a literal")))?;
    let key = (prop.name.ns.as_ref(), prop.name.local.as_ref());
    let sign = match op {
        "gt" => ">",
        "gte" => ">=",
        "lt" => "<",
        "lte" => "<=",
        _ => ":",
    };
    let not_with = || invalid(format!("{} cannot be compared with {op}", prop.name));
    match key {
        (DAV_NS, "displayname") | (OC_NS, "name") => {
            let value = match op {
                "eq" => literal.to_owned(),
                "like" => literal
                    .chars()
                    .map(|c| match c {
                        '%' => '*',
                        '_' => '?',
                        c => c,
                    })
                    .collect(),
                _ => return Err(not_with()),
            };
            if value.trim().is_empty() {
                return Err(invalid("an empty name"));
            }
            Ok(format!("name:{}", quote(&value)))
        }
        (DAV_NS, "getcontenttype") => {
            let value = match op {
                "eq" if literal == "httpd/unix-directory" => return Ok("mediatype:folder".into()),
                "eq" => literal,
                "like" => literal
                    .strip_suffix('%')
                    .filter(|p| !p.contains(['%', '_']) && p.contains('/'))
                    .ok_or_else(|| invalid("getcontenttype takes like only as a prefix: type/%"))?,
                _ => return Err(not_with()),
            };
            if !value.contains('/') || value.contains(|c: char| c.is_whitespace() || c == '"') {
                return Err(invalid(format!(
                    "{:?} is not a media type",
                    dav::escape::one_line(value, 80)
                )));
            }
            Ok(format!("mediatype:{value}"))
        }
        (DAV_NS, "getlastmodified") => {
            if op == "like" {
                return Err(not_with());
            }
            Ok(format!("mtime{sign}{}", quote(&rfc3339(literal.trim())?)))
        }
        (OC_NS, "size") | (DAV_NS, "getcontentlength") => {
            if op == "like" {
                return Err(not_with());
            }
            let n: u64 = literal
                .trim()
                .parse()
                .map_err(|_| invalid(format!("{} takes a number of bytes", prop.name)))?;
            Ok(format!("size{sign}{n}"))
        }
        _ => Err(invalid(format!("cannot search by {}", prop.name))),
    }
}

/// A KQL phrase: quoted, `"` and `\` escaped.
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// A time literal as RFC 3339 for KQL: Unix seconds become UTC; a date or RFC 3339 time is
/// passed on for the search service to check.
fn rfc3339(literal: &str) -> Result<String, BasicError> {
    if let Ok(secs) = literal.parse::<i64>() {
        let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, m, d) = arca_proto::civil::civil_from_days(days);
        return Ok(format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rest / 3600,
            rest % 3600 / 60,
            rest % 60
        ));
    }
    let plausible = literal.len() <= 40
        && literal
            .bytes()
            .all(|b| b.is_ascii_digit() || b"-:+.TZtz".contains(&b));
    if !plausible {
        return Err(invalid(format!(
            "getlastmodified takes a time (RFC 3339 or Unix seconds), not {:?}",
            dav::escape::one_line(literal, 60)
        )));
    }
    Ok(literal.to_owned())
}

/// Answers `SEARCH` for `who`.
pub(crate) async fn search(gateway: &Channel, who: &Identity, req: Request) -> Response {
    let body = match xml_body(req).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let ask = match parse(&body, &who.username) {
        Ok(a) => a,
        Err(e @ BasicError::OtherUser(_)) => {
            return dav_error(StatusCode::FORBIDDEN, &e.to_string(), None);
        }
        Err(e) => return dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None),
    };
    let mut storage = arca_proto::storage_client(gateway.clone());
    let home = match storage.get_home_space(GetHomeSpaceRequest {}).await {
        Ok(h) => h.into_inner(),
        Err(s) => return grpc_error(s),
    };
    let mut query = ask.query;
    let mut folder = None;
    if !ask.scope.is_empty() {
        let node = storage
            .stat(StatRequest {
                r#ref: Some(Ref {
                    space_id: home.id.clone(),
                    path: ask.scope.clone(),
                    node_id: String::new(),
                }),
                with_props: false,
                with_locks: false,
            })
            .await;
        let node = match node {
            Ok(n) => n.into_inner(),
            Err(s) => return grpc_error(s),
        };
        if !node.is_dir {
            return dav_error(StatusCode::BAD_REQUEST, "the scope is not a folder", None);
        }
        query = format!("scope:{} AND ({query})", node.id);
        folder = Some(node.id);
    }
    let request = SearchRequest {
        query,
        limit: ask.limit,
        order: ask.order as i32,
        descending: ask.descending,
    };
    let found = super::ask(gateway, request).await;
    let answer = match found {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    // The personal space's hrefs start here (the name encoded once, not per hit).
    let mut files = String::from("/remote.php/dav/files/");
    dav::encode_segment(&who.username, &mut files);
    let mut ms = Multistatus::with_capacity(answer.hits.len() * 750);
    for hit in &answer.hits {
        let Some(n) = &hit.node else { continue };
        if ask.shallow && folder.as_deref() != Some(n.parent_id.as_str()) {
            continue;
        }
        let mut href = if n.space_id == home.id {
            files.clone()
        } else {
            let mut h = String::from("/dav/spaces/");
            dav::encode_segment(&n.space_id, &mut h);
            h
        };
        dav::encode_path(&n.path, &mut href);
        if n.is_dir && !href.ends_with('/') {
            href.push('/');
        }
        super::write_hit(&mut ms, &href, hit, true);
    }
    xml_answer(StatusCode::MULTI_STATUS, ms.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(condition: &str, extra: &str) -> String {
        format!(
            r#"<?xml version="1.0"?>
<d:searchrequest xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">
  <d:basicsearch>
    <d:select><d:prop><d:displayname/><oc:size/></d:prop></d:select>
    {extra}
    <d:where>{condition}</d:where>
    <d:orderby/>
  </d:basicsearch>
</d:searchrequest>"#
        )
    }

    fn query(condition: &str) -> Result<String, BasicError> {
        parse(body(condition, "").as_bytes(), "alice").map(|b| b.query)
    }

    #[test]
    fn what_nextcloud_clients_send_becomes_kql() {
        let like =
            "<d:like><d:prop><d:displayname/></d:prop><d:literal>%cat_%</d:literal></d:like>";
        assert_eq!(query(like).unwrap(), r#"name:"*cat?*""#);
        let both = format!(
            "<d:and>{like}<d:gt><d:prop><oc:size/></d:prop><d:literal>100</d:literal></d:gt>\
             <d:lt><d:prop><d:getlastmodified/></d:prop><d:literal>86400</d:literal></d:lt></d:and>"
        );
        assert_eq!(
            query(&both).unwrap(),
            r#"(name:"*cat?*") AND (size>100) AND (mtime<"1970-01-02T00:00:00Z")"#
        );
        let either = "<d:or><d:eq><d:prop><d:getcontenttype/></d:prop>\
             <d:literal>httpd/unix-directory</d:literal></d:eq><d:like><d:prop>\
             <d:getcontenttype/></d:prop><d:literal>image/%</d:literal></d:like></d:or>";
        assert_eq!(
            query(either).unwrap(),
            "(mediatype:folder) OR (mediatype:image/)"
        );
        let not = r#"<d:not><d:eq><d:prop><d:displayname/></d:prop><d:literal>a"b</d:literal></d:eq></d:not>"#;
        assert_eq!(query(not).unwrap(), r#"NOT (name:"a\"b")"#);
        let scoped = parse(
            body(
                like,
                "<d:from><d:scope><d:href>/remote.php/dav/files/alice/My%20Photos/</d:href>\
                 <d:depth>1</d:depth></d:scope></d:from><d:limit><d:nresults>7</d:nresults></d:limit>",
            )
            .as_bytes(),
            "alice",
        )
        .unwrap();
        assert_eq!(scoped.scope, "/My Photos");
        assert!(scoped.shallow);
        assert_eq!(scoped.limit, 7);
    }

    #[test]
    fn what_is_not_served_is_named() {
        let cases = [
            (
                "<d:like><d:prop><oc:fileid/></d:prop><d:literal>1</d:literal></d:like>",
                "cannot search by",
            ),
            (
                "<d:gt><d:prop><d:displayname/></d:prop><d:literal>a</d:literal></d:gt>",
                "cannot be compared",
            ),
            (
                "<d:eq><d:prop><oc:size/></d:prop><d:literal>big</d:literal></d:eq>",
                "number of bytes",
            ),
            (
                "<d:lt><d:prop><d:getlastmodified/></d:prop><d:literal>soon</d:literal></d:lt>",
                "takes a time",
            ),
            ("<d:within/>", "unknown operator"),
            ("<d:and/>", "needs conditions"),
            (
                "<d:like><d:prop><d:getcontenttype/></d:prop><d:literal>%/png</d:literal></d:like>",
                "prefix",
            ),
        ];
        for (condition, says) in cases {
            let e = query(condition).unwrap_err().to_string();
            assert!(e.contains(says), "{condition}: {e}");
        }
        assert_eq!(
            parse(body("", "").as_bytes(), "alice"),
            Err(BasicError::NoWhere)
        );
        let other = body(
            "<d:is-collection/>",
            "<d:from><d:scope><d:href>/files/bob</d:href></d:scope></d:from>",
        );
        assert!(matches!(
            parse(other.as_bytes(), "alice"),
            Err(BasicError::OtherUser(_))
        ));
        assert!(matches!(
            parse(b"<d:propfind xmlns:d=\"DAV:\"/>", "alice"),
            Err(BasicError::Xml(_))
        ));
    }
}
