//! Request headers every upload path reads (WebDAV PUT, TUS, chunked uploads), each read in
//! one place: checksums as clients write them (`OC-Checksum`, TUS `checksum` metadata) in the
//! one spelling the providers verify (`algo:hex`), `X-OC-Mtime`, `If-Match`; the node a
//! provider committed; and the scheme and host the client used, for absolute URLs.

use arca_proto::v1::Node;
use base64::Engine as _;
use http::{HeaderMap, Uri, header};
use prost::Message as _;

/// The node a provider's data path committed (`arca_proto::headers::NODE`: base64 of the
/// protobuf), if its answer carries one.
pub(crate) fn committed_node(h: &HeaderMap) -> Option<Node> {
    let raw = h.get(arca_proto::headers::NODE)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(raw.as_bytes())
        .ok()?;
    Node::decode(bytes.as_slice()).ok()
}

/// `scheme://host` as the client reached us, for absolute URLs in answers (upload URLs, link
/// URLs, Graph's `webUrl`); `None` when the request names no usable host. Behind a
/// TLS-terminating proxy the request arrives as http and `X-Forwarded-Proto` says what the
/// client used: only its first hop counts, and only the two schemes we serve.
pub(crate) fn public_base(h: &HeaderMap, uri: &Uri) -> Option<String> {
    let host = h
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
        })?;
    let scheme = h
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(str::trim)
        .filter(|v| v.eq_ignore_ascii_case("https"))
        .map_or("http", |_| "https");
    Some(format!("{scheme}://{host}"))
}

/// `X-OC-Mtime`: unix seconds (integer or decimal) → nanoseconds; invalid values are ignored
/// as oCIS does, not refused.
pub(crate) fn mtime_ns(h: &HeaderMap) -> Option<i64> {
    let v = h.get("x-oc-mtime")?.to_str().ok()?;
    let secs: f64 = v.trim().parse().ok()?;
    (secs.is_finite() && secs > 0.0).then_some((secs * 1e9) as i64)
}

/// `If-Match`'s etag without its quotes (`*` as sent); empty when absent.
pub(crate) fn if_match(h: &HeaderMap) -> String {
    h.get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().trim_matches('"').to_owned())
        .unwrap_or_default()
}

/// A checksum as clients write it: `ALGO:HEX` (OC-Checksum; several may be space separated,
/// one we know is enough) or `ALGO HEX` (owncloudcmd's TUS `checksum` metadata), the
/// algorithm in any case → `algo:hex`, or empty if none we know.
pub(crate) fn checksum_value(v: &str) -> String {
    let v = v.trim();
    let pairs: Vec<(&str, &str)> = if v.contains(':') {
        v.split_whitespace()
            .filter_map(|part| part.split_once(':'))
            .collect()
    } else {
        v.split_once(' ').into_iter().collect()
    };
    for (algo, hex) in pairs {
        let algo = algo.trim().to_ascii_lowercase();
        let hex = hex.trim();
        if matches!(algo.as_str(), "sha1" | "md5" | "adler32") && !hex.is_empty() {
            return format!("{algo}:{hex}");
        }
    }
    String::new()
}
