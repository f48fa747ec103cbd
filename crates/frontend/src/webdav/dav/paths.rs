//! Request paths: percent-decoding with validation, and percent-encoding for hrefs.
//!
//! Decoding refuses what must never reach storage (issue 3 §6): `.` and `..` segments, also
//! when encoded (`%2e%2e`), NUL, invalid UTF-8, names over 255 bytes, an encoded `/` inside a
//! name, and broken escapes. Empty segments (`a//b`) collapse.
//!
//! Encoding keeps RFC 3986 unreserved characters and `/` and escapes every other byte, the
//! way Sabre (`rawurlencode` per segment) and so oCIS write hrefs: a space is `%20`, `#` is
//! `%23`, `%` is `%25`, `+` is `%2B`, non-ASCII names go out as escaped UTF-8 and clients
//! decode them back to the same name.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// The longest name (one segment, decoded) accepted, in bytes; what common file systems allow.
pub const MAX_NAME_BYTES: usize = 255;

/// Everything except RFC 3986 unreserved (`A-Z a-z 0-9 - . _ ~`).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// As [`SEGMENT`], keeping `/`.
const PATH: &AsciiSet = &SEGMENT.remove(b'/');

/// Why a request path was refused. All mean `400 Bad Request`; `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path must start with '/'")]
    NotAbsolute,
    #[error("path contains a '.' or '..' segment")]
    DotSegment,
    #[error("path contains a NUL character")]
    Nul,
    #[error("path is not valid UTF-8 after percent-decoding")]
    InvalidUtf8,
    #[error("a name in the path is longer than 255 bytes")]
    NameTooLong,
    #[error("path contains an encoded '/' inside a name")]
    EncodedSlash,
    #[error("path contains an invalid percent-escape")]
    BadEscape,
}

/// A validated, decoded request path: `/`-separated names, no empty, `.` or `..` segments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DavPath {
    /// Decoded; starts with `/`; no trailing `/` except for the root itself.
    path: String,
    trailing_slash: bool,
}

impl DavPath {
    /// The root, `/`.
    pub fn root() -> DavPath {
        DavPath {
            path: "/".to_string(),
            trailing_slash: true,
        }
    }

    /// The decoded path, e.g. `/remote.php/webdav/a b/c#d` (no trailing slash unless root).
    pub fn as_str(&self) -> &str {
        &self.path
    }

    pub fn into_string(self) -> String {
        self.path
    }

    /// Whether the request had a trailing `/` (rclone lists `dir` and then `dir/`).
    pub fn trailing_slash(&self) -> bool {
        self.trailing_slash
    }

    pub fn is_root(&self) -> bool {
        self.path == "/"
    }

    /// The decoded names.
    pub fn segments(&self) -> impl DoubleEndedIterator<Item = &str> + '_ {
        self.path[1..].split('/').filter(|s| !s.is_empty())
    }

    /// The last name, `None` for the root.
    pub fn name(&self) -> Option<&str> {
        self.segments().next_back()
    }

    /// The path below `prefix` (a decoded path such as `/remote.php/webdav`, trailing slash
    /// optional), matched on whole segments: `Some("")` for the prefix itself, `Some("a/b")`
    /// below it, `None` elsewhere (`/remote.php/webdavx` is not below `/remote.php/webdav`).
    pub fn strip_prefix(&self, prefix: &str) -> Option<&str> {
        let prefix = prefix.trim_end_matches('/');
        let rest = self.path.strip_prefix(prefix)?;
        if rest.is_empty() || rest == "/" {
            Some("")
        } else {
            rest.strip_prefix('/')
        }
    }
}

/// Decodes and validates a raw (percent-encoded) absolute path. A query or fragment must
/// already be split off (axum's `uri.path()` is).
pub fn decode_path(raw: &str) -> Result<DavPath, PathError> {
    if !raw.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let mut path = String::with_capacity(raw.len());
    for seg in raw.split('/').filter(|s| !s.is_empty()) {
        let name = decode_segment(seg)?;
        path.push('/');
        path.push_str(&name);
    }
    if path.is_empty() {
        return Ok(DavPath::root());
    }
    Ok(DavPath {
        path,
        trailing_slash: raw.ends_with('/'),
    })
}

/// Decodes and validates one name (a segment of a raw path, or a name from a client).
pub fn decode_segment(seg: &str) -> Result<String, PathError> {
    let bytes = seg.as_bytes();
    // percent_decode passes `%zz` and a trailing `%` through unchanged; we refuse them.
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'%'
            && !(i + 2 < bytes.len()
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit())
        {
            return Err(PathError::BadEscape);
        }
    }
    let decoded = percent_decode_str(seg).collect::<Vec<u8>>();
    let name = String::from_utf8(decoded).map_err(|_| PathError::InvalidUtf8)?;
    validate_name(&name)?;
    Ok(name)
}

/// Checks a decoded name: not `.`/`..`, no NUL, no `/`, at most [`MAX_NAME_BYTES`].
pub fn validate_name(name: &str) -> Result<(), PathError> {
    if name == "." || name == ".." {
        return Err(PathError::DotSegment);
    }
    if name.contains('\0') {
        return Err(PathError::Nul);
    }
    if name.contains('/') {
        return Err(PathError::EncodedSlash);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(PathError::NameTooLong);
    }
    Ok(())
}

/// Appends `name` percent-encoded as one href segment (`/` escaped too).
pub fn encode_segment(name: &str, out: &mut String) {
    push_encoded(name, SEGMENT, false, out);
}

/// Appends a decoded `path` percent-encoded for an href, keeping its `/` separators.
pub fn encode_path(path: &str, out: &mut String) {
    push_encoded(path, PATH, true, out);
}

/// [`encode_path`] into a new string.
pub fn encoded_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    encode_path(path, &mut out);
    out
}

#[inline]
fn push_encoded(s: &str, set: &'static AsciiSet, keep_slash: bool, out: &mut String) {
    // Fast path: most names need no escaping at all.
    if s.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
    }) {
        out.push_str(s);
        return;
    }
    for chunk in utf8_percent_encode(s, set) {
        out.push_str(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_paths() {
        let p = decode_path("/remote.php/webdav/a%20b/c%23d%25e%2Bf+g/").unwrap();
        assert_eq!(p.as_str(), "/remote.php/webdav/a b/c#d%e+f+g");
        assert!(p.trailing_slash());
        assert_eq!(
            p.segments().collect::<Vec<_>>(),
            ["remote.php", "webdav", "a b", "c#d%e+f+g"]
        );
        assert_eq!(p.name(), Some("c#d%e+f+g"));
        let p = decode_path("/a//b").unwrap();
        assert_eq!(p.as_str(), "/a/b");
        assert!(!p.trailing_slash());
        let root = decode_path("/").unwrap();
        assert!(root.is_root());
        assert_eq!(root.name(), None);
        assert_eq!(root.segments().count(), 0);
        assert_eq!(decode_path("//").unwrap(), DavPath::root());
        let p = decode_path("/d/%E6%97%A5%E6%9C%AC/%C3%BC").unwrap();
        assert_eq!(p.as_str(), "/d/日本/ü");
    }

    #[test]
    fn refuses_bad_paths() {
        use PathError::*;
        for (raw, err) in [
            ("a/b", NotAbsolute),
            ("/a/../b", DotSegment),
            ("/a/./b", DotSegment),
            ("/a/%2e%2e/b", DotSegment),
            ("/a/%2E%2e", DotSegment),
            ("/a/.%2E/", DotSegment),
            ("/a/%2e", DotSegment),
            ("/a/b%00c", Nul),
            ("/a/%ff%fe", InvalidUtf8),
            ("/a/%c3", InvalidUtf8),
            ("/a/b%2fc", EncodedSlash),
            ("/a/%zz", BadEscape),
            ("/a/b%", BadEscape),
            ("/a/b%4", BadEscape),
        ] {
            assert_eq!(decode_path(raw), Err(err), "{raw}");
        }
        let long = format!("/a/{}", "x".repeat(256));
        assert_eq!(decode_path(&long), Err(NameTooLong));
        let ok = format!("/a/{}", "x".repeat(255));
        assert!(decode_path(&ok).is_ok());
        // 255 bytes is the limit after decoding: 86 × "日" (3 bytes each) = 258 bytes.
        let long_utf8 = format!("/a/{}", "%E6%97%A5".repeat(86));
        assert_eq!(decode_path(&long_utf8), Err(NameTooLong));
        // Names with dots that are not dot segments are fine.
        assert!(decode_path("/a/...").is_ok());
        assert!(decode_path("/a/.hidden/..x").is_ok());
        for e in [
            NotAbsolute,
            DotSegment,
            Nul,
            InvalidUtf8,
            NameTooLong,
            EncodedSlash,
            BadEscape,
        ] {
            assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn encodes_hrefs() {
        let mut s = String::new();
        encode_segment("a b#c%d+e&f?g/h~i-j_k.l", &mut s);
        assert_eq!(s, "a%20b%23c%25d%2Be%26f%3Fg%2Fh~i-j_k.l");
        assert_eq!(
            encoded_path("/remote.php/webdav/日本 x/ü"),
            "/remote.php/webdav/%E6%97%A5%E6%9C%AC%20x/%C3%BC"
        );
        assert_eq!(encoded_path("/plain/path.txt"), "/plain/path.txt");
        assert_eq!(encoded_path("/a'b(c)d!e*f"), "/a%27b%28c%29d%21e%2Af");
    }

    #[test]
    fn encode_then_decode_round_trips() {
        for name in [
            "a b",
            "#",
            "%",
            "+",
            "100% sure+ok #1",
            "Grüße 😀",
            "a&b;c=d",
            "x?y",
            "[z]",
        ] {
            let mut enc = String::from("/");
            encode_segment(name, &mut enc);
            let p = decode_path(&enc).unwrap();
            assert_eq!(p.name(), Some(name), "{enc}");
        }
    }

    #[test]
    fn strip_prefix_matches_whole_segments() {
        let p = decode_path("/remote.php/webdav/a/b").unwrap();
        assert_eq!(p.strip_prefix("/remote.php/webdav"), Some("a/b"));
        assert_eq!(p.strip_prefix("/remote.php/webdav/"), Some("a/b"));
        assert_eq!(p.strip_prefix("/remote.php/web"), None);
        let p = decode_path("/remote.php/webdav/").unwrap();
        assert_eq!(p.strip_prefix("/remote.php/webdav/"), Some(""));
        assert_eq!(p.strip_prefix("/other"), None);
        assert_eq!(DavPath::root().strip_prefix("/"), Some(""));
        assert_eq!(decode_path("/x/y").unwrap().strip_prefix("/"), Some("x/y"));
    }
}
