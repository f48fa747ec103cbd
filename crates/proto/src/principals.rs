//! Callers that are not users: the identities the sharing service signs for itself and for
//! public links. User ids are 32 hex digits, so these prefixes never collide with one.

/// The sharing service's own identity, the only caller storage-system's `ShareRecords` serves:
/// the end user's identity, which travels with every call, is not enough to read records.
pub const SHARING_SERVICE: &str = "service:sharing";

/// The search service's own identity, which its crawler signs to read every space's tree and
/// text (storage-users grants it read-only access to every space, and nothing else). What a
/// search *returns* is checked against the end user's rights at query time, never this one's.
pub const SEARCH_SERVICE: &str = "service:search";

/// Prefix of a public link's identity: `public:SHARE_ID`. Storage providers give it no
/// personal space and resolve its grants like any other caller's.
pub const PUBLIC_LINK_PREFIX: &str = "public:";

/// The share id of a public link's identity, if `id` is one.
pub fn public_link_share(id: &str) -> Option<&str> {
    id.strip_prefix(PUBLIC_LINK_PREFIX)
        .filter(|s| !s.is_empty())
}

/// Whether `id` names a real user (not a service or a public link).
pub fn is_user(id: &str) -> bool {
    !id.starts_with(PUBLIC_LINK_PREFIX) && !id.starts_with("service:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_are_told_apart() {
        assert_eq!(public_link_share("public:abc"), Some("abc"));
        assert_eq!(public_link_share("public:"), None);
        assert_eq!(public_link_share("abc"), None);
        assert!(is_user("0123abcd"));
        assert!(!is_user(SHARING_SERVICE));
        assert!(!is_user("public:x"));
    }
}
