//! Node names and paths.

use crate::StoreError;

/// The longest name accepted, in bytes (the common filesystem limit; clients mirror files locally).
pub const MAX_NAME_BYTES: usize = 255;

/// Checks one node name: not empty, not `.` or `..`, no `/` or NUL, at most 255 bytes.
///
/// Names are otherwise taken as given (case-sensitive, no Unicode normalisation): the store keeps
/// exactly what the client sent so that the name it lists back is byte-identical.
pub fn validate_name(name: &str) -> Result<(), StoreError> {
    let reason = if name.is_empty() {
        "empty"
    } else if name == "." || name == ".." {
        "dot segment"
    } else if name.contains('/') {
        "contains '/'"
    } else if name.contains('\0') {
        "contains NUL"
    } else if name.len() > MAX_NAME_BYTES {
        "longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidName {
        name: name.chars().take(64).collect(),
        reason,
    })
}

/// Splits a space-relative path (`/a/b/c`, `a/b/`, `/`) into validated segments. Empty segments
/// (leading, trailing or doubled slashes) are ignored; `.` and `..` are refused rather than
/// interpreted, so a path can never climb out of the space.
pub(crate) fn segments(path: &str) -> Result<Vec<&str>, StoreError> {
    let mut out = Vec::new();
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        validate_name(seg)?;
        out.push(seg);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for bad in ["", ".", "..", "a/b", "a\0b", &"x".repeat(256)] {
            assert!(validate_name(bad).is_err(), "{bad:?} should be refused");
        }
        for good in [
            "a",
            "...",
            ".hidden",
            "with space",
            "ünïcödé",
            &"x".repeat(255),
        ] {
            assert!(validate_name(good).is_ok(), "{good:?} should be accepted");
        }
        // 255 bytes is the limit, not 255 characters.
        assert!(validate_name(&"é".repeat(128)).is_err());
    }

    #[test]
    fn paths() {
        assert_eq!(segments("/a//b/c/").unwrap(), vec!["a", "b", "c"]);
        assert!(segments("/").unwrap().is_empty());
        assert!(segments("/a/../b").is_err());
        assert!(segments("/a/./b").is_err());
    }
}
