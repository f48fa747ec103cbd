//! Ids, etags and time stamps.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A new random 128-bit id as 32 lowercase hex characters. Used for node, space and blob ids and
/// for etags (the oCIS etag shape: 32 hex characters, quoted by the HTTP layer).
pub fn new_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A new id of [`new_id`]'s shape that sorts by `ns` (a time stamp, ns): its 64 bits, then 64
/// random ones. For keys of an index that grows in time order, whose inserts then land on its
/// rightmost page instead of a random one. Not for blob ids, whose first characters spread
/// blobs over directories and S3 prefixes.
pub fn time_ordered_id(ns: i64) -> String {
    format!("{:016x}{:016x}", ns, rand::random::<u64>())
}

/// Nanoseconds since the epoch; i64 covers the years 1678..2262, and times outside are clamped.
pub fn to_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

pub fn from_ns(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

pub fn now_ns() -> i64 {
    to_ns(SystemTime::now())
}

/// Milliseconds since the epoch, for blob bookkeeping (ages compared against `min_age`).
pub fn now_ms() -> i64 {
    now_ns() / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex() {
        let a = new_id();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, new_id());
    }

    #[test]
    fn time_ordered_ids_sort_by_time() {
        let (a, b) = (time_ordered_id(1_000), time_ordered_id(2_000));
        assert_eq!((a.len(), b.len()), (32, 32));
        assert!(a < b, "{a} < {b}");
        assert_ne!(time_ordered_id(5), time_ordered_id(5));
    }

    #[test]
    fn ns_round_trip() {
        let t = UNIX_EPOCH + Duration::from_nanos(1_796_215_407_123_456_789);
        assert_eq!(from_ns(to_ns(t)), t);
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(from_ns(to_ns(before)), before);
    }
}
