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

/// `name (n).ext` for `n` ≥ 2 (`name` itself for 1): a free name beside a taken one, as oCIS
/// and Nextcloud form them. The extension is what follows the last dot, unless that dot
/// starts the name.
pub fn numbered_name(name: &str, n: u32) -> String {
    if n <= 1 {
        return name.to_owned();
    }
    match name.rfind('.') {
        Some(dot) if dot > 0 => format!("{} ({n}){}", &name[..dot], &name[dot..]),
        _ => format!("{name} ({n})"),
    }
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
    fn numbered_names() {
        assert_eq!(numbered_name("a.txt", 1), "a.txt");
        assert_eq!(numbered_name("a.txt", 2), "a (2).txt");
        assert_eq!(numbered_name("a.tar.gz", 3), "a.tar (3).gz");
        assert_eq!(numbered_name(".bashrc", 2), ".bashrc (2)");
        assert_eq!(numbered_name("README", 2), "README (2)");
    }

    #[test]
    fn paths() {
        assert_eq!(segments("/a//b/c/").unwrap(), vec!["a", "b", "c"]);
        assert!(segments("/").unwrap().is_empty());
        assert!(segments("/a/../b").is_err());
        assert!(segments("/a/./b").is_err());
    }
}
