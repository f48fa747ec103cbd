//! Calendar dates as the APIs write them: HTTP dates (RFC 9110 §5.6.7), oCIS's
//! `Last-Modified` wording, and the day arithmetic the OCS and Graph formats build on.
//! Formatted by hand: a PROPFIND writes one per listed node, and `write!` is ~10x slower.

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Writes an RFC 1123 date in GMT (`Wed, 02 Dec 2026 12:43:15 GMT`), the format of
/// `getlastmodified` (and of HTTP dates). Times outside years 0000–9999 are clamped.
pub(crate) fn write_http_date(unix_secs: i64, out: &mut String) {
    write_date(unix_secs, "GMT", out);
}

/// [`write_http_date`] into a new string.
pub(crate) fn http_date(unix_secs: i64) -> String {
    let mut s = String::with_capacity(29);
    write_http_date(unix_secs, &mut s);
    s
}

/// The `Last-Modified` header as oCIS writes it: `+0000` instead of `GMT`
/// (CLIENT_PROTOCOL.md §6, "Wording of Last-Modified").
pub(crate) fn last_modified_header(unix_secs: i64) -> String {
    let mut s = String::with_capacity(31);
    write_date(unix_secs, "+0000", &mut s);
    s
}

fn write_date(unix_secs: i64, zone: &str, out: &mut String) {
    // 0000-01-01T00:00:00Z ..= 9999-12-31T23:59:59Z
    let secs = unix_secs.clamp(-62_167_219_200, 253_402_300_799);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    // Formatted by hand: this runs once per PROPFIND entry and `write!` is ~10x slower.
    let mut b = *b"Thu, 01 Jan 1970 00:00:00 ";
    b[..3].copy_from_slice(DAYS[days.rem_euclid(7) as usize].as_bytes());
    two_digits(&mut b[5..7], d);
    b[8..11].copy_from_slice(MONTHS[(m - 1) as usize].as_bytes());
    two_digits(&mut b[12..14], y / 100);
    two_digits(&mut b[14..16], y % 100);
    two_digits(&mut b[17..19], sod / 3600);
    two_digits(&mut b[20..22], sod / 60 % 60);
    two_digits(&mut b[23..25], sod % 60);
    if let Ok(s) = std::str::from_utf8(&b) {
        out.push_str(s);
    }
    out.push_str(zone);
}

fn two_digits(dst: &mut [u8], v: i64) {
    dst[0] = b'0' + (v / 10 % 10) as u8;
    dst[1] = b'0' + (v % 10) as u8;
}

pub(crate) use arca_proto::civil::{civil_from_days, days_from_civil};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates() {
        assert_eq!(http_date(1_796_215_395), "Wed, 02 Dec 2026 12:43:15 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(http_date(1_700_000_000), "Tue, 14 Nov 2023 22:13:20 GMT");
        assert_eq!(http_date(-1), "Wed, 31 Dec 1969 23:59:59 GMT");
        assert_eq!(http_date(4_102_444_800), "Fri, 01 Jan 2100 00:00:00 GMT");
        assert_eq!(http_date(i64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(http_date(i64::MIN), "Sat, 01 Jan 0000 00:00:00 GMT");
        assert_eq!(
            last_modified_header(1_796_215_385),
            "Wed, 02 Dec 2026 12:43:05 +0000"
        );
    }

    #[test]
    fn days_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(days_from_civil(2024, 2, 29)), (2024, 2, 29));
    }
}
