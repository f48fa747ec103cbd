//! Checksums as clients write them (`OC-Checksum`, TUS `checksum` metadata), in the one
//! spelling the providers verify: `algo:hex`.

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
