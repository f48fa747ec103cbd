//! Response bodies: 207 multistatus in the oCIS shape, LOCK responses, lock XML and the
//! Sabre-style error body.
//!
//! Everything is written straight into one `String` (no DOM, no per-entry allocation for
//! the common properties), so a 1,000-entry PROPFIND renders in well under a millisecond.
//!
//! Shape (CLIENT_PROTOCOL.md §4b): no XML declaration; the root binds `d:`, `s:` and `oc:`;
//! per response the found properties go in one `200` propstat and the missing ones in one
//! `404` propstat as empty elements. Properties in other namespaces declare their namespace
//! on the element (`<x:foo xmlns:x="urn:bar">`).

use crate::dates::write_http_date;
use std::fmt::Write as _;

use http::StatusCode;

use super::escape::{escape_attr, escape_text};
use super::headers::Depth;
use super::props::{DAV_NS, OC_NS, PropName, SABRE_NS};
use super::xml::LockScope;

/// The opening of every multistatus (the namespace order oCIS uses does not matter to XML).
pub const MULTISTATUS_OPEN: &str = r#"<d:multistatus xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns" xmlns:oc="http://owncloud.org/ns">"#;
const MULTISTATUS_CLOSE: &str = "</d:multistatus>";

/// `Content-Type` of a multistatus, as oCIS sends it.
pub const MULTISTATUS_CONTENT_TYPE: &str = "application/xml; charset=utf-8";
/// `Content-Type` of an error body, as oCIS sends it.
pub const ERROR_CONTENT_TYPE: &str = "text/xml; charset=utf-8";

/// `DAV:supportedlock` content: exclusive and shared write locks.
pub const SUPPORTEDLOCK: &str = "<d:lockentry><d:lockscope><d:exclusive/></d:lockscope><d:locktype><d:write/></d:locktype></d:lockentry><d:lockentry><d:lockscope><d:shared/></d:lockscope><d:locktype><d:write/></d:locktype></d:lockentry>";

/// `DAV:resourcetype` content of a collection.
pub const RESOURCETYPE_COLLECTION: &str = "<d:collection/>";

/// Writes `HTTP/1.1 <code> <reason>`.
pub fn write_status_line(status: StatusCode, out: &mut String) {
    out.push_str("HTTP/1.1 ");
    out.push_str(status.as_str());
    out.push(' ');
    out.push_str(status.canonical_reason().unwrap_or(""));
}

/// The prefix our writer uses for `ns`, if it is one the root binds.
fn bound_prefix(ns: &str) -> Option<&'static str> {
    match ns {
        DAV_NS => Some("d"),
        OC_NS => Some("oc"),
        SABRE_NS => Some("s"),
        _ => None,
    }
}

/// Writes the start tag of `name` (declaring its namespace if the root does not).
pub fn write_open_tag(name: &PropName, out: &mut String) {
    out.push('<');
    match bound_prefix(&name.ns) {
        Some(p) => {
            out.push_str(p);
            out.push(':');
            out.push_str(&name.local);
        }
        None if name.ns.is_empty() => {
            // No namespace: unprefixed, and undeclare any default in force around us.
            out.push_str(&name.local);
            out.push_str(" xmlns=\"\"");
        }
        None => {
            out.push_str("x:");
            out.push_str(&name.local);
            out.push_str(" xmlns:x=\"");
            escape_attr(&name.ns, out);
            out.push('"');
        }
    }
    out.push('>');
}

/// Writes the end tag matching [`write_open_tag`].
pub fn write_close_tag(name: &PropName, out: &mut String) {
    out.push_str("</");
    match bound_prefix(&name.ns) {
        Some(p) => {
            out.push_str(p);
            out.push(':');
        }
        None if name.ns.is_empty() => {}
        None => out.push_str("x:"),
    }
    out.push_str(&name.local);
    out.push('>');
}

/// `<tag></tag>`, the way oCIS writes empty properties.
pub fn write_empty_element(name: &PropName, out: &mut String) {
    write_open_tag(name, out);
    write_close_tag(name, out);
}

/// A 207 Multi-Status body under construction.
///
/// ```
/// use arca_frontend::dav::{Multistatus, PropName};
/// let mut ms = Multistatus::new();
/// let mut r = ms.response("/remote.php/webdav/dir/");
/// r.resourcetype(true);
/// r.etag("\"abc\"");
/// r.not_found(&PropName::GETCONTENTLENGTH);
/// r.finish();
/// let body = ms.finish();
/// assert!(body.ends_with("</d:response></d:multistatus>"));
/// ```
pub struct Multistatus {
    buf: String,
    /// The 404 names of the response being written, flushed at its end (reused buffer).
    missing: String,
}

impl Default for Multistatus {
    fn default() -> Self {
        Self::new()
    }
}

impl Multistatus {
    pub fn new() -> Multistatus {
        Self::with_capacity(4096)
    }

    /// `capacity`: a guess of the body size (≈ 600 bytes per entry for a typical PROPFIND).
    pub fn with_capacity(capacity: usize) -> Multistatus {
        let mut buf = String::with_capacity(capacity.max(MULTISTATUS_OPEN.len() + 64));
        buf.push_str(MULTISTATUS_OPEN);
        Multistatus {
            buf,
            missing: String::new(),
        }
    }

    /// Starts a `<d:response>` with properties. `href` must already be percent-encoded
    /// (see [`super::paths::encode_path`]); it is XML-escaped here.
    pub fn response(&mut self, href: &str) -> PropResponse<'_> {
        self.buf.push_str("<d:response><d:href>");
        escape_text(href, &mut self.buf);
        self.buf.push_str("</d:href>");
        self.missing.clear();
        PropResponse {
            ms: self,
            ok_open: false,
            wrote_propstat: false,
            finished: false,
        }
    }

    /// A status-only response (RFC 4918 §9.6.1: a member that could not be deleted, copied
    /// or moved), optionally with an error element: `<d:response><d:href>…</d:href>
    /// <d:status>HTTP/1.1 423 Locked</d:status><d:error>…</d:error></d:response>`.
    pub fn status_response(
        &mut self,
        href: &str,
        status: StatusCode,
        error: Option<&Precondition>,
    ) {
        self.buf.push_str("<d:response><d:href>");
        escape_text(href, &mut self.buf);
        self.buf.push_str("</d:href><d:status>");
        write_status_line(status, &mut self.buf);
        self.buf.push_str("</d:status>");
        if let Some(e) = error {
            self.buf.push_str("<d:error>");
            e.write(&mut self.buf);
            self.buf.push_str("</d:error>");
        }
        self.buf.push_str("</d:response>");
    }

    /// Takes what has been written so far (for streaming a large body in chunks).
    /// The remainder, ending with `</d:multistatus>`, comes from later calls and `finish`.
    pub fn take_written(&mut self) -> String {
        std::mem::take(&mut self.buf)
    }

    /// Bytes written and not yet taken.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Closes the root and returns the body (or its last chunk after `take_written`).
    pub fn finish(mut self) -> String {
        self.buf.push_str(MULTISTATUS_CLOSE);
        self.buf
    }
}

/// One `<d:response>` with propstats; closed by [`PropResponse::finish`] or on drop.
pub struct PropResponse<'a> {
    ms: &'a mut Multistatus,
    /// `<d:propstat><d:prop>` of the 200 group is open.
    ok_open: bool,
    wrote_propstat: bool,
    finished: bool,
}

impl PropResponse<'_> {
    fn open_ok(&mut self) -> &mut String {
        if !self.ok_open {
            self.ms.buf.push_str("<d:propstat><d:prop>");
            self.ok_open = true;
        }
        &mut self.ms.buf
    }

    fn close_ok(&mut self) {
        if self.ok_open {
            self.ms
                .buf
                .push_str("</d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>");
            self.ok_open = false;
            self.wrote_propstat = true;
        }
    }

    /// A found property with a text value (XML-escaped).
    pub fn text(&mut self, name: &PropName, value: &str) {
        let buf = self.open_ok();
        write_open_tag(name, buf);
        escape_text(value, buf);
        write_close_tag(name, buf);
    }

    /// A found property whose value is XML written as is: a dead property's stored value
    /// (as produced by the PROPPATCH parser) or one of this module's fragments.
    pub fn raw(&mut self, name: &PropName, xml: &str) {
        let buf = self.open_ok();
        write_open_tag(name, buf);
        buf.push_str(xml);
        write_close_tag(name, buf);
    }

    /// A found property with an empty value (also every name of a `propname` answer).
    pub fn empty(&mut self, name: &PropName) {
        let buf = self.open_ok();
        write_empty_element(name, buf);
    }

    /// A found property whose value `f` writes into the body (raw: `f` escapes what it must).
    pub fn with(&mut self, name: &PropName, f: impl FnOnce(&mut String)) {
        let buf = self.open_ok();
        write_open_tag(name, buf);
        f(buf);
        write_close_tag(name, buf);
    }

    /// A found property with an unsigned integer value (sizes, quota, favorite).
    pub fn number(&mut self, name: &PropName, value: u64) {
        self.with(name, |b| push_u64(value, b));
    }

    /// A found property with a signed integer value (Sabre reports unlimited
    /// `quota-available-bytes` as `-3`).
    pub fn integer(&mut self, name: &PropName, value: i64) {
        self.with(name, |b| {
            if value < 0 {
                b.push('-');
            }
            push_u64(value.unsigned_abs(), b);
        });
    }

    /// `d:getetag`, quoted if it is not already.
    pub fn etag(&mut self, etag: &str) {
        self.with(&PropName::GETETAG, |b| write_quoted_etag(etag, b));
    }

    /// `d:getlastmodified` from unix seconds, RFC 1123 in GMT.
    pub fn last_modified(&mut self, unix_secs: i64) {
        self.with(&PropName::GETLASTMODIFIED, |b| {
            write_http_date(unix_secs, b)
        });
    }

    /// `d:resourcetype`: `<d:collection/>` or empty.
    pub fn resourcetype(&mut self, collection: bool) {
        let v = if collection {
            RESOURCETYPE_COLLECTION
        } else {
            ""
        };
        self.raw(&PropName::RESOURCETYPE, v);
    }

    /// `oc:checksums` with one `oc:checksum` element (CLIENT_PROTOCOL.md §4b).
    pub fn checksums(&mut self, sha1: Option<&str>, md5: Option<&str>, adler32: Option<&str>) {
        self.with(&PropName::OC_CHECKSUMS, |b| {
            write_checksums(sha1, md5, adler32, b)
        });
    }

    /// `d:supportedlock` (exclusive and shared write).
    pub fn supportedlock(&mut self) {
        self.raw(&PropName::SUPPORTEDLOCK, SUPPORTEDLOCK);
    }

    /// `d:lockdiscovery` with these active locks (empty when none).
    pub fn lockdiscovery(&mut self, locks: &[ActiveLock<'_>]) {
        self.with(&PropName::LOCKDISCOVERY, |b| {
            for l in locks {
                l.write(b);
            }
        });
    }

    /// A requested property the resource does not have: goes in the 404 propstat.
    pub fn not_found(&mut self, name: &PropName) {
        write_empty_element(name, &mut self.ms.missing);
    }

    /// A whole propstat of names with one status, e.g. for PROPPATCH results (`403` with
    /// `DAV:cannot-modify-protected-property`, `424 Failed Dependency`, `200`).
    pub fn propstat<'n>(
        &mut self,
        status: StatusCode,
        names: impl IntoIterator<Item = &'n PropName>,
        error: Option<&Precondition>,
    ) {
        self.close_ok();
        let buf = &mut self.ms.buf;
        buf.push_str("<d:propstat><d:prop>");
        for n in names {
            write_empty_element(n, buf);
        }
        buf.push_str("</d:prop><d:status>");
        write_status_line(status, buf);
        buf.push_str("</d:status>");
        if let Some(e) = error {
            buf.push_str("<d:error>");
            e.write(buf);
            buf.push_str("</d:error>");
        }
        buf.push_str("</d:propstat>");
        self.wrote_propstat = true;
    }

    /// Closes the response (the 200 group, then the 404 group).
    pub fn finish(mut self) {
        self.close();
    }

    fn close(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.close_ok();
        if !self.ms.missing.is_empty() {
            let buf = &mut self.ms.buf;
            buf.push_str("<d:propstat><d:prop>");
            buf.push_str(&self.ms.missing);
            buf.push_str("</d:prop><d:status>HTTP/1.1 404 Not Found</d:status></d:propstat>");
            self.ms.missing.clear();
            self.wrote_propstat = true;
        }
        if !self.wrote_propstat {
            // A response needs a propstat (RFC 4918 §14.24); an empty 200 one is valid.
            self.ms.buf.push_str(
                "<d:propstat><d:prop></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>",
            );
        }
        self.ms.buf.push_str("</d:response>");
    }
}

impl Drop for PropResponse<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Writes `etag` double-quoted unless it already is (`"…"` or `W/"…"`).
pub fn write_quoted_etag(etag: &str, out: &mut String) {
    if etag.starts_with('"') || etag.starts_with("W/\"") {
        escape_text(etag, out);
    } else {
        out.push('"');
        escape_text(etag, out);
        out.push('"');
    }
}

/// `etag` double-quoted unless it already is (for the `ETag`/`OC-ETag` headers).
pub fn quote_etag(etag: &str) -> String {
    if etag.starts_with('"') || etag.starts_with("W/\"") {
        etag.to_string()
    } else {
        format!("\"{etag}\"")
    }
}

/// Writes the checksum element: `<oc:checksum>SHA1:… MD5:… ADLER32:…</oc:checksum>`
/// (present types only, in that order; nothing if none).
pub fn write_checksums(
    sha1: Option<&str>,
    md5: Option<&str>,
    adler32: Option<&str>,
    out: &mut String,
) {
    let parts = [("SHA1:", sha1), ("MD5:", md5), ("ADLER32:", adler32)];
    if parts.iter().all(|(_, v)| v.is_none()) {
        return;
    }
    out.push_str("<oc:checksum>");
    let mut first = true;
    for (label, value) in parts {
        if let Some(v) = value {
            if !first {
                out.push(' ');
            }
            first = false;
            out.push_str(label);
            escape_text(v, out);
        }
    }
    out.push_str("</oc:checksum>");
}

/// Appends the decimal digits of `v`.
pub fn push_u64(mut v: u64, out: &mut String) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if let Ok(s) = std::str::from_utf8(&buf[i..]) {
        out.push_str(s);
    }
}

/// One `DAV:activelock` (RFC 4918 §14.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveLock<'a> {
    pub scope: LockScope,
    /// `Zero` or `Infinity` (a lock has no depth 1).
    pub depth: Depth,
    /// The stored `<owner>` inner XML (from [`super::xml::parse_lockinfo`]), written raw.
    pub owner: Option<&'a str>,
    /// Seconds remaining; `None` is `Infinite`.
    pub timeout_secs: Option<u64>,
    /// The full token URI: `opaquelocktoken:…` or `urn:uuid:…`.
    pub token: &'a str,
    /// The lock root's href, percent-encoded.
    pub root: &'a str,
}

impl ActiveLock<'_> {
    /// Writes `<d:activelock>…</d:activelock>`.
    pub fn write(&self, out: &mut String) {
        out.push_str("<d:activelock><d:locktype><d:write/></d:locktype><d:lockscope>");
        out.push_str(match self.scope {
            LockScope::Exclusive => "<d:exclusive/>",
            LockScope::Shared => "<d:shared/>",
        });
        out.push_str("</d:lockscope><d:depth>");
        out.push_str(match self.depth {
            Depth::Zero => "0",
            Depth::One => "1",
            Depth::Infinity => "infinity",
        });
        out.push_str("</d:depth>");
        if let Some(owner) = self.owner {
            out.push_str("<d:owner>");
            out.push_str(owner);
            out.push_str("</d:owner>");
        }
        out.push_str("<d:timeout>");
        match self.timeout_secs {
            Some(s) => {
                let _ = write!(out, "Second-{s}");
            }
            None => out.push_str("Infinite"),
        }
        out.push_str("</d:timeout><d:locktoken><d:href>");
        escape_text(self.token, out);
        out.push_str("</d:href></d:locktoken><d:lockroot><d:href>");
        escape_text(self.root, out);
        out.push_str("</d:href></d:lockroot></d:activelock>");
    }
}

/// The body of a successful LOCK (RFC 4918 §9.10.1): `<d:prop><d:lockdiscovery>…`.
/// Send with `Lock-Token: <token>` on a new lock.
pub fn lock_response_body(locks: &[ActiveLock<'_>]) -> String {
    let mut out = String::with_capacity(512);
    out.push_str(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<d:prop xmlns:d=\"DAV:\"><d:lockdiscovery>",
    );
    for l in locks {
        l.write(&mut out);
    }
    out.push_str("</d:lockdiscovery></d:prop>");
    out
}

/// An RFC 4918 §16 precondition/postcondition element for a `DAV:error` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// PROPFIND Depth: infinity refused (403).
    PropfindFiniteDepth,
    /// The resource is locked and no lock token was submitted (423); the locked roots.
    LockTokenSubmitted(Vec<String>),
    /// A LOCK conflicts with an existing lock (423); the conflicting roots, if known.
    NoConflictingLock(Vec<String>),
    /// UNLOCK: the token does not belong to the request URI's locks (409).
    LockTokenMatchesRequestUri,
    /// PROPPATCH of a protected property (403).
    CannotModifyProtectedProperty,
    /// COPY/MOVE could not keep live properties (409).
    PreservedLiveProperties,
    /// Any other element, written raw (must be well-formed XML using `d:`/`s:`/`oc:`
    /// or declaring its own namespaces).
    Raw(String),
}

impl Precondition {
    pub fn write(&self, out: &mut String) {
        fn with_hrefs(tag: &str, hrefs: &[String], out: &mut String) {
            if hrefs.is_empty() {
                let _ = write!(out, "<d:{tag}/>");
                return;
            }
            let _ = write!(out, "<d:{tag}>");
            for h in hrefs {
                out.push_str("<d:href>");
                escape_text(h, out);
                out.push_str("</d:href>");
            }
            let _ = write!(out, "</d:{tag}>");
        }
        match self {
            Precondition::PropfindFiniteDepth => out.push_str("<d:propfind-finite-depth/>"),
            Precondition::LockTokenSubmitted(h) => with_hrefs("lock-token-submitted", h, out),
            Precondition::NoConflictingLock(h) => with_hrefs("no-conflicting-lock", h, out),
            Precondition::LockTokenMatchesRequestUri => {
                out.push_str("<d:lock-token-matches-request-uri/>")
            }
            Precondition::CannotModifyProtectedProperty => {
                out.push_str("<d:cannot-modify-protected-property/>")
            }
            Precondition::PreservedLiveProperties => out.push_str("<d:preserved-live-properties/>"),
            Precondition::Raw(xml) => out.push_str(xml),
        }
    }
}

/// Sabre exception class names oCIS puts in `s:exception` (clients show `s:message`).
pub mod exception {
    pub const BAD_REQUEST: &str = r"Sabre\DAV\Exception\BadRequest";
    pub const CONFLICT: &str = r"Sabre\DAV\Exception\Conflict";
    pub const FORBIDDEN: &str = r"Sabre\DAV\Exception\Forbidden";
    pub const INSUFFICIENT_STORAGE: &str = r"Sabre\DAV\Exception\InsufficientStorage";
    pub const LOCKED: &str = r"Sabre\DAV\Exception\Locked";
    pub const CONFLICTING_LOCK: &str = r"Sabre\DAV\Exception\ConflictingLock";
    pub const LOCK_TOKEN_MATCHES_REQUEST_URI: &str =
        r"Sabre\DAV\Exception\LockTokenMatchesRequestUri";
    pub const METHOD_NOT_ALLOWED: &str = r"Sabre\DAV\Exception\MethodNotAllowed";
    pub const NOT_AUTHENTICATED: &str = r"Sabre\DAV\Exception\NotAuthenticated";
    pub const NOT_FOUND: &str = r"Sabre\DAV\Exception\NotFound";
    pub const NOT_IMPLEMENTED: &str = r"Sabre\DAV\Exception\NotImplemented";
    pub const PRECONDITION_FAILED: &str = r"Sabre\DAV\Exception\PreconditionFailed";
    pub const REQUESTED_RANGE_NOT_SATISFIABLE: &str =
        r"Sabre\DAV\Exception\RequestedRangeNotSatisfiable";
    pub const SERVICE_UNAVAILABLE: &str = r"Sabre\DAV\Exception\ServiceUnavailable";
    pub const TOO_MANY_MATCHES: &str = r"Sabre\DAV\Exception\TooManyMatches";
    pub const UNSUPPORTED_MEDIA_TYPE: &str = r"Sabre\DAV\Exception\UnsupportedMediaType";
    pub const BAD_GATEWAY: &str = r"Sabre\DAV\Exception\BadGateway";
    pub const ENTITY_TOO_LARGE: &str = r"Sabre\DAV\Exception\EntityTooLarge";
}

/// An error body in the oCIS/Sabre shape (CLIENT_PROTOCOL.md §4d), with the correct
/// `xmlns:d="DAV:"` (oCIS writes `"DAV"`, a bug) and an optional RFC 4918 condition element:
///
/// `<d:error xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns"><d:lock-token-submitted>…
/// </d:lock-token-submitted><s:exception>…</s:exception><s:message>…</s:message></d:error>`
pub fn error_body(exception: &str, message: &str, condition: Option<&Precondition>) -> String {
    let mut out = String::with_capacity(256 + message.len());
    out.push_str("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<d:error xmlns:d=\"DAV:\" xmlns:s=\"http://sabredav.org/ns\">");
    if let Some(c) = condition {
        c.write(&mut out);
    }
    out.push_str("<s:exception>");
    escape_text(exception, &mut out);
    out.push_str("</s:exception><s:message>");
    escape_text(message, &mut out);
    out.push_str("</s:message></d:error>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webdav::dav::xml::parse_proppatch;

    /// Checks well-formedness and namespace validity with quick-xml (no DTD, all prefixes
    /// bound), returning the (namespace, local) of every element in document order.
    fn elements(xml: &str) -> Vec<(String, String)> {
        use quick_xml::events::Event;
        use quick_xml::name::ResolveResult;
        let mut r = quick_xml::reader::NsReader::from_str(xml);
        let mut out = Vec::new();
        let mut depth = 0i32;
        loop {
            let (res, ev) = r.read_resolved_event().expect("well-formed");
            match ev {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let ns = match res {
                        ResolveResult::Bound(ns) => ns.0.to_string(),
                        ResolveResult::Unbound => String::new(),
                        ResolveResult::Unknown(p) => panic!("unbound prefix {p} in {xml}"),
                    };
                    out.push((ns, e.local_name().into_inner().to_string()));
                    if matches!(ev, Event::Start(_)) {
                        depth += 1;
                    }
                }
                Event::End(_) => depth -= 1,
                Event::Eof => break,
                Event::DocType(_) => panic!("doctype"),
                _ => {}
            }
        }
        assert_eq!(depth, 0);
        out
    }

    #[test]
    fn owncloudcmd_shape() {
        let mut ms = Multistatus::new();
        {
            let mut r = ms.response("/remote.php/webdav/synctest/");
            r.resourcetype(true);
            r.last_modified(1_796_215_395);
            r.etag("b834cf6fd60cc89f58e7d1facb8b4f57");
            r.text(&PropName::OC_ID, "STORAGE$SPACE!NODE");
            r.text(&PropName::OC_PERMISSIONS, "RDNVCKZP");
            r.not_found(&PropName::GETCONTENTLENGTH);
            r.not_found(&PropName::OC_DOWNLOAD_URL);
            r.finish();
        }
        {
            let mut r = ms.response("/remote.php/webdav/synctest/file8.txt");
            r.resourcetype(false);
            r.number(&PropName::GETCONTENTLENGTH, 25);
            r.integer(&PropName::QUOTA_AVAILABLE_BYTES, -3);
            r.number(&PropName::QUOTA_USED_BYTES, u64::MAX);
            r.checksums(Some("4b43"), Some("d491"), Some("68b30711"));
            r.not_found(&PropName::OC_SHARE_TYPES);
        }
        let body = ms.finish();
        assert_eq!(
            body,
            concat!(
                r#"<d:multistatus xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns" xmlns:oc="http://owncloud.org/ns">"#,
                r#"<d:response><d:href>/remote.php/webdav/synctest/</d:href><d:propstat><d:prop>"#,
                r#"<d:resourcetype><d:collection/></d:resourcetype>"#,
                r#"<d:getlastmodified>Wed, 02 Dec 2026 12:43:15 GMT</d:getlastmodified>"#,
                r#"<d:getetag>"b834cf6fd60cc89f58e7d1facb8b4f57"</d:getetag>"#,
                r#"<oc:id>STORAGE$SPACE!NODE</oc:id><oc:permissions>RDNVCKZP</oc:permissions>"#,
                r#"</d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>"#,
                r#"<d:propstat><d:prop><d:getcontentlength></d:getcontentlength><oc:downloadURL></oc:downloadURL>"#,
                r#"</d:prop><d:status>HTTP/1.1 404 Not Found</d:status></d:propstat></d:response>"#,
                r#"<d:response><d:href>/remote.php/webdav/synctest/file8.txt</d:href><d:propstat><d:prop>"#,
                r#"<d:resourcetype></d:resourcetype><d:getcontentlength>25</d:getcontentlength>"#,
                r#"<d:quota-available-bytes>-3</d:quota-available-bytes><d:quota-used-bytes>18446744073709551615</d:quota-used-bytes>"#,
                r#"<oc:checksums><oc:checksum>SHA1:4b43 MD5:d491 ADLER32:68b30711</oc:checksum></oc:checksums>"#,
                r#"</d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>"#,
                r#"<d:propstat><d:prop><oc:share-types></oc:share-types></d:prop><d:status>HTTP/1.1 404 Not Found</d:status></d:propstat>"#,
                r#"</d:response></d:multistatus>"#
            )
        );
        elements(&body);
    }

    #[test]
    fn foreign_namespaces_are_declared_inline_and_escaped() {
        let mut ms = Multistatus::new();
        let mut r = ms.response("/a%20b&c");
        for i in 0..3 {
            r.text(
                &PropName::new(format!("http://example.com/{i}"), "somename"),
                "manynsvalue",
            );
        }
        r.text(&PropName::new("", "nonamespace"), "randomvalue");
        r.text(&PropName::new("urn:q\"&", "v"), "<&>\"");
        r.not_found(&PropName::new("urn:missing", "gone"));
        r.finish();
        let body = ms.finish();
        assert!(body.contains("<d:href>/a%20b&amp;c</d:href>"));
        assert!(
            body.contains(r#"<x:somename xmlns:x="http://example.com/1">manynsvalue</x:somename>"#)
        );
        assert!(body.contains(r#"<nonamespace xmlns="">randomvalue</nonamespace>"#));
        assert!(body.contains(r#"<x:v xmlns:x="urn:q&quot;&amp;">&lt;&amp;&gt;"</x:v>"#));
        assert!(body.contains(r#"<x:gone xmlns:x="urn:missing"></x:gone>"#));
        let els = elements(&body);
        assert!(els.contains(&("http://example.com/2".into(), "somename".into())));
        assert!(els.contains(&("".into(), "nonamespace".into())));
        // (quick-xml's resolver reports the namespace value unescaped-as-written.)
        assert!(els.contains(&("urn:q&quot;&amp;".into(), "v".into())));
    }

    #[test]
    fn dead_property_values_round_trip_into_valid_xml() {
        // Values as the PROPPATCH parser stores them, rendered back in a PROPFIND.
        let body = r#"<D:propertyupdate xmlns:D="DAV:" xmlns:z="urn:z"><D:set><D:prop><t:valnspace xmlns:t="http://example.com/neon/litmus/"><foo xmlns="http://bar"/></t:valnspace><z:doc><z:item>&#65536; &amp; ü</z:item></z:doc><nonamespace xmlns="">randomvalue</nonamespace></D:prop></D:set></D:propertyupdate>"#;
        let ops = parse_proppatch(body.as_bytes()).unwrap();
        let mut ms = Multistatus::new();
        let mut r = ms.response("/p");
        for op in &ops {
            let crate::webdav::dav::xml::PropPatchOp::Set { name, value } = op else {
                unreachable!()
            };
            r.raw(name, value);
        }
        r.finish();
        let out = ms.finish();
        let els = elements(&out);
        assert!(els.contains(&("http://bar".into(), "foo".into())));
        assert!(els.contains(&("urn:z".into(), "item".into())));
        assert!(out.contains("<item xmlns=\"urn:z\">\u{10000} &amp; ü</item>"));
        assert!(out.contains(r#"<nonamespace xmlns="">randomvalue</nonamespace>"#));
    }

    #[test]
    fn propname_and_empty_responses() {
        let mut ms = Multistatus::new();
        let mut r = ms.response("/x");
        r.empty(&PropName::GETETAG);
        r.empty(&PropName::new("urn:x", "dead"));
        drop(r); // closed on drop
        ms.response("/nothing").finish();
        let body = ms.finish();
        assert!(body.contains("<d:getetag></d:getetag><x:dead xmlns:x=\"urn:x\"></x:dead>"));
        assert!(body.contains("<d:href>/nothing</d:href><d:propstat><d:prop></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>"));
        elements(&body);
    }

    #[test]
    fn only_missing_props_give_only_a_404_propstat() {
        let mut ms = Multistatus::new();
        let mut r = ms.response("/f");
        r.not_found(&PropName::DISPLAYNAME);
        r.finish();
        let body = ms.finish();
        assert!(body.contains("<d:href>/f</d:href><d:propstat><d:prop><d:displayname></d:displayname></d:prop><d:status>HTTP/1.1 404 Not Found</d:status></d:propstat></d:response>"));
        assert!(!body.contains("200 OK"));
    }

    #[test]
    fn proppatch_style_propstats() {
        let mut ms = Multistatus::new();
        let mut r = ms.response("/f");
        r.propstat(
            StatusCode::FORBIDDEN,
            [&PropName::GETETAG],
            Some(&Precondition::CannotModifyProtectedProperty),
        );
        r.propstat(
            StatusCode::FAILED_DEPENDENCY,
            &[PropName::new("urn:x", "a")],
            None,
        );
        r.finish();
        let body = ms.finish();
        assert!(body.contains("<d:propstat><d:prop><d:getetag></d:getetag></d:prop><d:status>HTTP/1.1 403 Forbidden</d:status><d:error><d:cannot-modify-protected-property/></d:error></d:propstat>"));
        assert!(body.contains("<d:status>HTTP/1.1 424 Failed Dependency</d:status>"));
        elements(&body);
    }

    #[test]
    fn status_only_responses() {
        let mut ms = Multistatus::new();
        ms.status_response(
            "/remote.php/dav/files/admin/coll/locked.txt",
            StatusCode::LOCKED,
            Some(&Precondition::LockTokenSubmitted(vec![
                "/remote.php/dav/files/admin/coll/locked.txt".into(),
            ])),
        );
        ms.status_response("/x/y", StatusCode::FORBIDDEN, None);
        let body = ms.finish();
        assert!(body.contains("<d:response><d:href>/remote.php/dav/files/admin/coll/locked.txt</d:href><d:status>HTTP/1.1 423 Locked</d:status><d:error><d:lock-token-submitted><d:href>/remote.php/dav/files/admin/coll/locked.txt</d:href></d:lock-token-submitted></d:error></d:response>"));
        assert!(body.contains("<d:response><d:href>/x/y</d:href><d:status>HTTP/1.1 403 Forbidden</d:status></d:response>"));
        elements(&body);
    }

    #[test]
    fn streaming_chunks_concatenate_to_the_whole() {
        let mut ms = Multistatus::new();
        let mut chunks = Vec::new();
        for i in 0..5 {
            ms.response(&format!("/f{i}")).text(&PropName::OC_ID, "x");
            chunks.push(ms.take_written());
        }
        chunks.push(ms.finish());
        let body: String = chunks.concat();
        assert!(body.starts_with(MULTISTATUS_OPEN));
        assert_eq!(
            elements(&body).iter().filter(|e| e.1 == "response").count(),
            5
        );
    }

    #[test]
    fn integers() {
        for v in [0u64, 7, 10, 1234567890, u64::MAX] {
            let mut s = String::new();
            push_u64(v, &mut s);
            assert_eq!(s, v.to_string());
        }
    }

    #[test]
    fn etag_quoting() {
        assert_eq!(quote_etag("abc"), "\"abc\"");
        assert_eq!(quote_etag("\"abc\""), "\"abc\"");
        assert_eq!(quote_etag("W/\"abc\""), "W/\"abc\"");
        let mut s = String::new();
        write_quoted_etag("a<b", &mut s);
        assert_eq!(s, "\"a&lt;b\"");
    }

    #[test]
    fn checksums_forms() {
        let mut s = String::new();
        write_checksums(Some("11e8"), None, Some("2e4c"), &mut s);
        assert_eq!(s, "<oc:checksum>SHA1:11e8 ADLER32:2e4c</oc:checksum>");
        let mut s = String::new();
        write_checksums(None, None, None, &mut s);
        assert_eq!(s, "");
    }

    #[test]
    fn lock_xml() {
        let owner = r#"<href xmlns="DAV:">http://example.org/~me</href>"#;
        let locks = [
            ActiveLock {
                scope: LockScope::Exclusive,
                depth: Depth::Zero,
                owner: Some("litmus test suite"),
                timeout_secs: Some(3600),
                token: "opaquelocktoken:e71d4fae-5dec-22d6-fea5-00a0c91e6be4",
                root: "/remote.php/dav/files/admin/litmus/lockme",
            },
            ActiveLock {
                scope: LockScope::Shared,
                depth: Depth::Infinity,
                owner: Some(owner),
                timeout_secs: None,
                token: "urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
                root: "/coll/",
            },
        ];
        let body = lock_response_body(&locks[..1]);
        assert_eq!(
            body,
            concat!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<d:prop xmlns:d=\"DAV:\"><d:lockdiscovery>",
                "<d:activelock><d:locktype><d:write/></d:locktype><d:lockscope><d:exclusive/></d:lockscope>",
                "<d:depth>0</d:depth><d:owner>litmus test suite</d:owner><d:timeout>Second-3600</d:timeout>",
                "<d:locktoken><d:href>opaquelocktoken:e71d4fae-5dec-22d6-fea5-00a0c91e6be4</d:href></d:locktoken>",
                "<d:lockroot><d:href>/remote.php/dav/files/admin/litmus/lockme</d:href></d:lockroot>",
                "</d:activelock></d:lockdiscovery></d:prop>"
            )
        );
        elements(&body);
        let mut ms = Multistatus::new();
        let mut r = ms.response("/coll/");
        r.lockdiscovery(&locks);
        r.supportedlock();
        r.finish();
        let body = ms.finish();
        assert!(body.contains("<d:depth>infinity</d:depth><d:owner><href xmlns=\"DAV:\">http://example.org/~me</href></d:owner><d:timeout>Infinite</d:timeout>"));
        assert!(body.contains("<d:supportedlock><d:lockentry><d:lockscope><d:exclusive/>"));
        let els = elements(&body);
        assert_eq!(els.iter().filter(|e| e.1 == "activelock").count(), 2);
        let mut ms = Multistatus::new();
        ms.response("/f").lockdiscovery(&[]);
        assert!(ms.finish().contains("<d:lockdiscovery></d:lockdiscovery>"));
    }

    #[test]
    fn error_bodies() {
        let body = error_body(exception::NOT_FOUND, "Resource not found", None);
        assert_eq!(
            body,
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<d:error xmlns:d=\"DAV:\" xmlns:s=\"http://sabredav.org/ns\"><s:exception>Sabre\\DAV\\Exception\\NotFound</s:exception><s:message>Resource not found</s:message></d:error>"
        );
        let body = error_body(
            exception::FORBIDDEN,
            "Depth: infinity is not supported",
            Some(&Precondition::PropfindFiniteDepth),
        );
        assert!(body.contains("<d:error xmlns:d=\"DAV:\" xmlns:s=\"http://sabredav.org/ns\"><d:propfind-finite-depth/><s:exception>"));
        let body = error_body(
            exception::LOCKED,
            "a <locked> & \"held\" resource",
            Some(&Precondition::LockTokenSubmitted(vec!["/a&b".into()])),
        );
        assert!(body.contains(
            "<d:lock-token-submitted><d:href>/a&amp;b</d:href></d:lock-token-submitted>"
        ));
        assert!(body.contains("<s:message>a &lt;locked&gt; &amp; \"held\" resource</s:message>"));
        for p in [
            Precondition::NoConflictingLock(vec![]),
            Precondition::NoConflictingLock(vec!["/x".into()]),
            Precondition::LockTokenMatchesRequestUri,
            Precondition::CannotModifyProtectedProperty,
            Precondition::PreservedLiveProperties,
            Precondition::Raw("<oc:custom/>".into()),
        ] {
            let b = error_body(exception::CONFLICT, "m", Some(&p));
            let els = elements(&b.replace("<oc:custom/>", "<s:custom/>"));
            assert_eq!(els[0], ("DAV:".into(), "error".into()));
        }
    }

    #[test]
    fn status_lines() {
        let mut s = String::new();
        write_status_line(StatusCode::MULTI_STATUS, &mut s);
        assert_eq!(s, "HTTP/1.1 207 Multi-Status");
        let mut s = String::new();
        write_status_line(StatusCode::INSUFFICIENT_STORAGE, &mut s);
        assert_eq!(s, "HTTP/1.1 507 Insufficient Storage");
    }

    /// Renders the PROPFIND Depth 1 answer for 1,000 entries that the benchmark asks for
    /// (getetag, getcontentlength, getlastmodified, resourcetype) plus the oc: set
    /// owncloudcmd asks for, and checks it is valid. Timing is asserted only in release builds.
    #[test]
    fn thousand_entries_render_fast() {
        let names: Vec<String> = (0..1000).map(|i| format!("file {i:04}.txt")).collect();
        let start = std::time::Instant::now();
        let mut ms = Multistatus::with_capacity(1001 * 700);
        for (i, n) in names.iter().enumerate() {
            let mut href = String::with_capacity(64);
            href.push_str("/remote.php/dav/files/admin/dir/");
            crate::webdav::dav::paths::encode_segment(n, &mut href);
            let mut r = ms.response(&href);
            r.resourcetype(false);
            r.etag("d226aadefb5212476b11ae82f756c6ff");
            r.number(&PropName::GETCONTENTLENGTH, i as u64 * 1000);
            r.last_modified(1_796_215_395 + i as i64);
            r.text(&PropName::OC_ID, "d7481119-eee5-46ee-bd07-6b79213e4418$1d335f94-b864-41b0-a3fe-a7a6cc92d17a!c5cd89e9-fe85-47d0-82b1-de98682f24dc");
            r.text(&PropName::OC_PERMISSIONS, "RDNVWZP");
            r.checksums(
                Some("11e85118513cd7eaf403b8416421d38e44f24b86"),
                Some("8c78719e9456f7b5d60ed16c08bd5a15"),
                Some("2e4c0c5d"),
            );
            r.not_found(&PropName::OC_DOWNLOAD_URL);
            r.not_found(&PropName::OC_DDC);
            r.not_found(&PropName::OC_SHARE_TYPES);
        }
        let body = ms.finish();
        let elapsed = start.elapsed();
        assert_eq!(
            elements(&body).iter().filter(|e| e.1 == "response").count(),
            1000
        );
        if !cfg!(debug_assertions) {
            assert!(elapsed.as_micros() < 2000, "took {elapsed:?}");
        }
        eprintln!("1000 entries: {} bytes in {elapsed:?}", body.len());
    }
}
