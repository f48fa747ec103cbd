//! The rules for which permissions a share may carry.
//!
//! The bits and share types are arca_proto's ([`arca_proto::sharing`]). A grant's bits apply
//! to the shared node and everything below it, except that a recipient never deletes (or
//! moves away) the shared node itself: unsharing is the owner's.

pub(crate) use arca_proto::sharing::perm::{ALL, CREATE, DELETE, READ, SHARE};
pub(crate) use arca_proto::sharing::share_type::{GROUP, LINK, USER};

/// Why a permission set was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PermError {
    #[error("permissions must be between 1 and 31")]
    OutOfRange,
    #[error("a user or group share must allow reading")]
    NoRead,
    #[error("an upload-only link needs a folder")]
    DropOnFile,
    #[error("a link is read-only (1), read-write (up to 15) or upload-only (4)")]
    BadLinkSet,
    #[error("the share would grant more than you hold")]
    Escalation,
}

/// The permissions a new or updated share carries, checked against what its creator holds.
/// Files have no members, so create and delete are dropped for them (as ownCloud does); links
/// never carry the share bit.
pub fn validate(share_type: i32, is_dir: bool, asked: u32, held: u32) -> Result<u32, PermError> {
    if asked == 0 || asked > ALL {
        return Err(PermError::OutOfRange);
    }
    let mut bits = asked;
    if share_type == LINK {
        bits &= !SHARE;
        if bits == CREATE {
            if !is_dir {
                return Err(PermError::DropOnFile);
            }
        } else if bits & READ == 0 {
            return Err(PermError::BadLinkSet);
        }
    } else if bits & READ == 0 {
        return Err(PermError::NoRead);
    }
    if !is_dir {
        bits &= !(CREATE | DELETE);
    }
    if bits & !held != 0 {
        return Err(PermError::Escalation);
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_validation() {
        assert_eq!(validate(USER, true, 15, ALL), Ok(15));
        assert_eq!(validate(USER, false, 15, ALL), Ok(3));
        assert_eq!(validate(USER, true, 4, ALL), Err(PermError::NoRead));
        assert_eq!(validate(USER, true, 0, ALL), Err(PermError::OutOfRange));
        assert_eq!(validate(USER, true, 32, ALL), Err(PermError::OutOfRange));
        assert_eq!(validate(USER, true, 17, 15), Err(PermError::Escalation));
        assert_eq!(validate(GROUP, true, 3, 19), Ok(3));
        assert_eq!(validate(GROUP, true, 7, 19), Err(PermError::Escalation));
        assert_eq!(validate(LINK, true, 4, ALL), Ok(4));
        assert_eq!(validate(LINK, false, 4, ALL), Err(PermError::DropOnFile));
        assert_eq!(validate(LINK, true, 31, ALL), Ok(15));
        assert_eq!(validate(LINK, true, 2, ALL), Err(PermError::BadLinkSet));
    }
}
