//! WebDAV request headers (RFC 4918 §10): Depth, Overwrite, Destination, Timeout, Lock-Token.
//! The If header lives in [`super::if_header`].
//!
//! Parsers take `impl AsRef<[u8]>`, so a `&HeaderValue`, `&str` or `&[u8]` all work.

use super::escape::one_line;
use super::paths::{DavPath, PathError, decode_path};

/// A bad header value. Each means `400 Bad Request`; `Display` is one line and names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("invalid Depth header '{0}': expected 0, 1 or infinity")]
    Depth(String),
    #[error("invalid Overwrite header '{0}': expected T or F")]
    Overwrite(String),
    #[error("invalid Lock-Token header '{0}': expected <token>")]
    LockToken(String),
    #[error("invalid If header: {0}")]
    If(String),
}

/// Shows an untrusted header value in an error message: lossy, one line, bounded.
pub(crate) fn show(value: &[u8]) -> String {
    one_line(&String::from_utf8_lossy(value), 80)
}

fn trimmed(value: &[u8]) -> &[u8] {
    value.trim_ascii()
}

/// The `Depth` header (RFC 4918 §10.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Depth {
    Zero,
    One,
    Infinity,
}

impl Depth {
    /// Parses `0`, `1` or `infinity` (case-insensitive); anything else is an error naming it.
    /// A missing header has a per-method default (RFC 4918: infinity for PROPFIND, COPY,
    /// MOVE and LOCK), which is the caller's to apply.
    pub fn parse(value: impl AsRef<[u8]>) -> Result<Depth, HeaderError> {
        let v = trimmed(value.as_ref());
        match v {
            b"0" => Ok(Depth::Zero),
            b"1" => Ok(Depth::One),
            _ if v.eq_ignore_ascii_case(b"infinity") => Ok(Depth::Infinity),
            _ => Err(HeaderError::Depth(show(value.as_ref()))),
        }
    }

    /// As written in a header or in `<d:depth>`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Depth::Zero => "0",
            Depth::One => "1",
            Depth::Infinity => "infinity",
        }
    }
}

/// The `Overwrite` header (RFC 4918 §10.6): `T` or `F`, `T` when absent.
pub fn parse_overwrite<V: AsRef<[u8]>>(value: Option<V>) -> Result<bool, HeaderError> {
    let Some(value) = value else {
        return Ok(true);
    };
    match trimmed(value.as_ref()) {
        b"T" | b"t" => Ok(true),
        b"F" | b"f" => Ok(false),
        _ => Err(HeaderError::Overwrite(show(value.as_ref()))),
    }
}

/// Why a `Destination` header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    /// An absolute URI naming another server: RFC 4918 §9.8.4/§9.9.4 answer `502 Bad Gateway`.
    #[error("Destination '{0}' is on another server")]
    OtherServer(String),
    /// Not a URI or absolute path: `400`.
    #[error("invalid Destination header '{0}'")]
    Malformed(String),
    /// The path decodes to something refused (`..`, NUL, …): `400`.
    #[error("invalid Destination path: {0}")]
    Path(PathError),
}

/// Parses `Destination` (RFC 4918 §10.3): an absolute URI, or an absolute path as
/// owncloudcmd sends it (CLIENT_PROTOCOL.md §6). An absolute URI must be http(s) with an
/// authority equal to one of `local_authorities` (`host[:port]`, e.g. the request's `Host`
/// and the public URL's authority; compared case-insensitively, default ports ignored).
/// Returns the decoded, validated path; the caller maps it into a space (and answers 403 or
/// 502 when it leaves the request's space, per its own rules).
pub fn parse_destination(
    value: impl AsRef<[u8]>,
    local_authorities: &[&str],
) -> Result<DavPath, DestinationError> {
    let raw = value.as_ref();
    let text =
        std::str::from_utf8(trimmed(raw)).map_err(|_| DestinationError::Malformed(show(raw)))?;
    let malformed = || DestinationError::Malformed(show(raw));
    if text.starts_with("//") {
        return Err(malformed());
    }
    let path = if text.starts_with('/') {
        text
    } else {
        let (scheme, rest) = text.split_once("://").ok_or_else(malformed)?;
        if scheme.is_empty()
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        {
            return Err(malformed());
        }
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(DestinationError::OtherServer(show(raw)));
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        // userinfo is not part of the server's identity.
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        if authority.is_empty() {
            return Err(malformed());
        }
        let ours = normalize_authority(authority, Some(&scheme));
        if !local_authorities
            .iter()
            .any(|a| normalize_authority(strip_scheme(a), None) == ours)
        {
            return Err(DestinationError::OtherServer(show(raw)));
        }
        if path.is_empty() || !path.starts_with('/') {
            "/"
        } else {
            path
        }
    };
    let path = path.split(['?', '#']).next().unwrap_or("/");
    decode_path(path).map_err(DestinationError::Path)
}

fn strip_scheme(a: &str) -> &str {
    a.split_once("://")
        .map_or(a, |(_, rest)| rest)
        .trim_end_matches('/')
}

/// Lowercase `host[:port]`, without the scheme's default port. With no scheme known (a
/// `Host` header), both 80 and 443 count as default.
fn normalize_authority(authority: &str, scheme: Option<&str>) -> String {
    let a = authority.to_ascii_lowercase();
    let defaults: &[&str] = match scheme {
        Some("http") => &[":80"],
        Some("https") => &[":443"],
        _ => &[":80", ":443"],
    };
    for d in defaults {
        if let Some(stripped) = a.strip_suffix(d) {
            // Not for "[::1:80]"-like IPv6 literal ends: a port follows a `]` or a host.
            if !stripped.ends_with(':') {
                return stripped.to_string();
            }
        }
    }
    a
}

/// A `Timeout` header entry (RFC 4918 §10.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    Seconds(u64),
    Infinite,
}

impl Timeout {
    /// The first acceptable entry of a comma-separated `Timeout` list (`Second-N` or
    /// `Infinite`, case-insensitive), or `None` when there is none: unknown forms and
    /// `Second-0` are skipped, as the server may ignore what it does not like (§10.7).
    pub fn parse(value: impl AsRef<[u8]>) -> Option<Timeout> {
        let text = String::from_utf8_lossy(value.as_ref());
        text.split(',').find_map(|entry| {
            let entry = entry.trim();
            if entry.eq_ignore_ascii_case("infinite") {
                return Some(Timeout::Infinite);
            }
            let (kind, n) = entry.split_at_checked(7)?;
            if !kind.eq_ignore_ascii_case("second-")
                || n.is_empty()
                || !n.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            // More digits than u64 holds: as long as can be (capped by the caller anyway).
            let secs = n.parse::<u64>().unwrap_or(u64::MAX);
            (secs > 0).then_some(Timeout::Seconds(secs))
        })
    }

    /// Seconds to grant, at most `max` (`Infinite` gets `max`).
    pub fn capped(self, max_secs: u64) -> u64 {
        match self {
            Timeout::Seconds(s) => s.min(max_secs),
            Timeout::Infinite => max_secs,
        }
    }
}

/// The lock timeout to grant for an optional `Timeout` header: its first acceptable entry
/// capped at `max_secs`, or `default_secs` (also capped) when there is none.
pub fn lock_timeout<V: AsRef<[u8]>>(value: Option<V>, default_secs: u64, max_secs: u64) -> u64 {
    value
        .and_then(Timeout::parse)
        .map_or(default_secs.min(max_secs), |t| t.capped(max_secs))
}

/// The `Lock-Token` header of UNLOCK (RFC 4918 §10.5): `<token>` → `token`.
pub fn parse_lock_token(value: impl AsRef<[u8]>) -> Result<String, HeaderError> {
    let raw = value.as_ref();
    let err = || HeaderError::LockToken(show(raw));
    let text = std::str::from_utf8(trimmed(raw)).map_err(|_| err())?;
    let inner = text
        .strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .ok_or_else(err)?;
    if inner.is_empty() || inner.bytes().any(|b| b <= b' ' || b == b'<' || b == b'>') {
        return Err(err());
    }
    Ok(inner.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth() {
        assert_eq!(Depth::parse("0"), Ok(Depth::Zero));
        assert_eq!(Depth::parse(" 1 "), Ok(Depth::One));
        assert_eq!(Depth::parse("infinity"), Ok(Depth::Infinity));
        assert_eq!(Depth::parse("Infinity"), Ok(Depth::Infinity));
        assert_eq!(Depth::parse(b"2"), Err(HeaderError::Depth("2".into())));
        for bad in ["", "-1", "01", "one", "infinite", "0,1"] {
            let err = Depth::parse(bad).unwrap_err();
            assert!(err.to_string().contains(&format!("'{bad}'")), "{err}");
        }
        let err = Depth::parse(b"x\ny\xff").unwrap_err().to_string();
        assert!(!err.contains('\n'));
        assert_eq!(Depth::Infinity.as_str(), "infinity");
    }

    #[test]
    fn overwrite() {
        assert_eq!(parse_overwrite::<&str>(None), Ok(true));
        assert_eq!(parse_overwrite(Some("T")), Ok(true));
        assert_eq!(parse_overwrite(Some("F")), Ok(false));
        assert_eq!(parse_overwrite(Some(" f ")), Ok(false));
        assert_eq!(
            parse_overwrite(Some("yes")),
            Err(HeaderError::Overwrite("yes".into()))
        );
    }

    const HOSTS: &[&str] = &["localhost:9200", "https://cloud.example.org"];

    #[test]
    fn destination_path_only_and_absolute() {
        // owncloudcmd: path only.
        let p = parse_destination("/remote.php/webdav/synctest/file4-renamed.txt", HOSTS).unwrap();
        assert_eq!(p.as_str(), "/remote.php/webdav/synctest/file4-renamed.txt");
        // litmus: absolute URI on this server, percent-encoded.
        let p = parse_destination(
            "http://localhost:9200/remote.php/dav/files/admin/litmus/a%20b%23c/",
            HOSTS,
        )
        .unwrap();
        assert_eq!(p.as_str(), "/remote.php/dav/files/admin/litmus/a b#c");
        assert!(p.trailing_slash());
        // Case-insensitive host, default port, userinfo, query dropped.
        let p = parse_destination("HTTPS://user@Cloud.Example.org:443/x?y=1", HOSTS).unwrap();
        assert_eq!(p.as_str(), "/x");
        let p = parse_destination("http://localhost:9200", HOSTS).unwrap();
        assert!(p.is_root());
    }

    #[test]
    fn destination_elsewhere_or_malformed() {
        assert!(matches!(
            parse_destination("http://other.example.org/x", HOSTS),
            Err(DestinationError::OtherServer(_))
        ));
        assert!(matches!(
            parse_destination("http://localhost:9201/x", HOSTS),
            Err(DestinationError::OtherServer(_))
        ));
        assert!(matches!(
            parse_destination("ftp://localhost:9200/x", HOSTS),
            Err(DestinationError::OtherServer(_))
        ));
        for bad in [
            "",
            "relative/path",
            "//localhost:9200/x",
            "http:///x",
            "ht tp://a/b",
        ] {
            assert!(
                matches!(
                    parse_destination(bad, HOSTS),
                    Err(DestinationError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_destination("/a/%2e%2e/b", HOSTS),
            Err(DestinationError::Path(PathError::DotSegment))
        );
        assert_eq!(
            parse_destination("http://localhost:9200/a/%00", HOSTS),
            Err(DestinationError::Path(PathError::Nul))
        );
        assert!(
            !DestinationError::Malformed(show(b"a\nb"))
                .to_string()
                .contains('\n')
        );
    }

    #[test]
    fn destination_host_header_forms() {
        assert!(parse_destination("http://example.org:80/a", &["example.org"]).is_ok());
        assert!(parse_destination("http://example.org/a", &["example.org:80"]).is_ok());
        assert!(parse_destination("http://[::1]:8080/a", &["[::1]:8080"]).is_ok());
        assert!(parse_destination("http://[::1]/a", &["[::1]:8080"]).is_err());
    }

    #[test]
    fn timeout() {
        assert_eq!(Timeout::parse("Second-3600"), Some(Timeout::Seconds(3600)));
        assert_eq!(Timeout::parse("Infinite"), Some(Timeout::Infinite));
        assert_eq!(
            Timeout::parse("Infinite, Second-4100000000"),
            Some(Timeout::Infinite)
        );
        assert_eq!(
            Timeout::parse("Extended-1, second-60"),
            Some(Timeout::Seconds(60))
        );
        assert_eq!(
            Timeout::parse("Second-0, Second-5"),
            Some(Timeout::Seconds(5))
        );
        assert_eq!(Timeout::parse("Second-"), None);
        assert_eq!(Timeout::parse("Second-x"), None);
        assert_eq!(Timeout::parse("garbage"), None);
        assert_eq!(
            Timeout::parse("Second-99999999999999999999999"),
            Some(Timeout::Seconds(u64::MAX))
        );
        assert_eq!(Timeout::Infinite.capped(86400), 86400);
        assert_eq!(Timeout::Seconds(60).capped(86400), 60);
        assert_eq!(Timeout::Seconds(100000).capped(86400), 86400);
        assert_eq!(lock_timeout::<&str>(None, 3600, 86400), 3600);
        assert_eq!(lock_timeout(Some("bogus"), 3600, 600), 600);
        assert_eq!(lock_timeout(Some("Second-10"), 3600, 86400), 10);
        assert_eq!(lock_timeout(Some("Infinite"), 3600, 86400), 86400);
    }

    #[test]
    fn lock_token() {
        assert_eq!(
            parse_lock_token("<opaquelocktoken:abc-123>"),
            Ok("opaquelocktoken:abc-123".into())
        );
        assert_eq!(
            parse_lock_token(" <urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6> "),
            Ok("urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6".into())
        );
        for bad in ["opaquelocktoken:abc", "<>", "<a b>", "<abc", "<<a>>"] {
            assert!(parse_lock_token(bad).is_err(), "{bad}");
        }
    }
}
