//! App-token secrets: how they are made, stored and checked.
//!
//! A token is 192 bits from the OS random source, written as 48 hex digits. It is stored as a
//! plain SHA-256, not argon2: a slow, salted hash protects *guessable* secrets against offline
//! guessing after a database leak, and a 192-bit random value is not guessable; a fast hash
//! keeps a login with an app token as cheap as a lookup. The comparison is constant-time anyway,
//! so an attacker timing failed logins learns nothing about the stored hashes.

use std::time::SystemTime;

use arca_store_records::AppToken;
use sha2::{Digest, Sha256};

/// A new token secret.
pub(crate) fn generate() -> String {
    arca_config::generate_secret(24)
}

/// The stored form of a secret: lowercase hex SHA-256.
pub(crate) fn hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    digest.iter().fold(String::with_capacity(64), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Equality that takes the same time wherever the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keeps the optimiser from turning the fold into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

/// The unexpired token among `tokens` whose secret is `secret`, checking every one of them.
pub(crate) fn find<'a>(tokens: &'a [AppToken], secret: &str) -> Option<&'a AppToken> {
    let wanted = hash(secret);
    let now = SystemTime::now();
    let mut found = None;
    for t in tokens {
        if constant_time_eq(t.hash.as_bytes(), wanted.as_bytes()) && t.valid_at(now) {
            found = Some(t);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(secret: &str, expires: Option<SystemTime>) -> AppToken {
        AppToken {
            id: "t".into(),
            user_id: "u".into(),
            hash: hash(secret),
            label: String::new(),
            created: SystemTime::now(),
            expires,
        }
    }

    #[test]
    fn secrets_are_long_random_hex() {
        let (a, b) = (generate(), generate());
        assert_eq!(a.len(), 48);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn finds_only_the_matching_unexpired_token() {
        let hour = std::time::Duration::from_secs(3600);
        let live = token("s1", Some(SystemTime::now() + hour));
        let expired = token("s2", Some(SystemTime::now() - hour));
        let forever = token("s3", None);
        let all = [live, expired, forever];
        assert!(find(&all, "s1").is_some());
        assert!(find(&all, "s2").is_none());
        assert!(find(&all, "s3").is_some());
        assert!(find(&all, "s4").is_none());
        assert!(find(&all, "").is_none());
    }

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
