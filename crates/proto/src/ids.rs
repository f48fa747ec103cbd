//! Public resource ids, in the form ownCloud clients know: `PROVIDER$SPACE` for a space and
//! `PROVIDER$SPACE!NODE` for a node (`oc:id`, `oc:fileid`, `OC-FileId`). The provider part
//! names the storage service that holds the space, so the gateway routes by id alone, with no
//! lookup.

/// Storage services a space id may name; anything else is not a valid id. The one list of
/// storage providers: the gateway and the frontend route to these (storage-system keeps
/// users, groups and share records, no files, so it is none).
pub const PROVIDERS: [&str; 1] = [HOME_PROVIDER];

/// Where personal spaces live.
pub const HOME_PROVIDER: &str = "storage-users";

/// `PROVIDER$SPACE`.
pub fn space_id(provider: &str, space: &str) -> String {
    format!("{provider}${space}")
}

/// `PROVIDER$SPACE!NODE`.
pub fn node_id(provider: &str, space: &str, node: &str) -> String {
    format!("{provider}${space}!{node}")
}

/// Splits a space id into (provider, space); `None` unless the provider is known.
pub fn parse_space_id(id: &str) -> Option<(&'static str, &str)> {
    let (provider, space) = id.split_once('$')?;
    let provider = PROVIDERS.iter().find(|p| **p == provider)?;
    (!space.is_empty() && !space.contains('!')).then_some((provider, space))
}

/// Splits a node id into (provider, space, node).
pub fn parse_node_id(id: &str) -> Option<(&'static str, &str, &str)> {
    let (space_id, node) = id.split_once('!')?;
    let (provider, space) = parse_space_id(space_id)?;
    (!node.is_empty()).then_some((provider, space, node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        assert_eq!(
            parse_space_id(&space_id("storage-users", "ab")),
            Some(("storage-users", "ab"))
        );
        assert_eq!(
            parse_node_id(&node_id("storage-users", "ab", "cd")),
            Some(("storage-users", "ab", "cd"))
        );
    }

    #[test]
    fn unknown_providers_and_garbage_are_refused() {
        assert_eq!(parse_space_id("gateway$ab"), None);
        assert_eq!(parse_space_id("storage-system$ab"), None);
        assert_eq!(parse_space_id("storage-users$"), None);
        assert_eq!(parse_node_id("storage-users$ab"), None);
        assert_eq!(parse_node_id("storage-users$ab!"), None);
    }
}
