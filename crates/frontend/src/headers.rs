//! Request headers every upload path reads (WebDAV PUT, TUS, chunked uploads), each read in
//! one place: checksums as clients write them (`OC-Checksum`, TUS `checksum` metadata) in the
//! one spelling the providers verify (`algo:hex`), `X-OC-Mtime`, `If-Match`.

use http::{HeaderMap, header};

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
