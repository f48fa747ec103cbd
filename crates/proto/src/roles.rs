//! A user's role in the whole deployment, beside what shares and space memberships give them:
//! oCIS's "app roles", with oCIS's ids, assigned over Graph's `appRoleAssignments` (ownCloud
//! Web's user management and scripts written for oCIS send these ids).
//!
//! - Admin: everything, users and groups included.
//! - Space Admin: creates project spaces and manages every one (members, quota, disable,
//!   delete), nothing about users.
//! - User: their own files and what is shared with them. Every user has exactly one role.

use crate::v1::Role;

pub const ADMIN: &str = "71881883-1768-46bd-a24d-a356a2afdf7f";
pub const SPACE_ADMIN: &str = "2aadd357-682c-406b-8874-293091995fdd";
pub const USER: &str = "d7beeea8-8ff4-406b-8fb6-ab2dd81e6b11";

/// The id of the application the roles belong to (Graph's `resourceId`): fixed, so that an
/// assignment made on one instance reads the same on every other.
pub const APPLICATION_ID: &str = "438d3e28-55ce-4171-9c7f-25afce361ffd";

/// Every role: its id, its name and its description, as Graph's `appRoles` lists them.
pub const ALL: [(Role, &str, &str, &str); 3] = [
    (
        Role::Admin,
        ADMIN,
        "Admin",
        "Grants administrator permissions: users, groups and every space.",
    ),
    (
        Role::SpaceAdmin,
        SPACE_ADMIN,
        "Space Admin",
        "Grants creating project spaces and managing every one of them.",
    ),
    (
        Role::User,
        USER,
        "User",
        "Grants a user their own files and what is shared with them.",
    ),
];

/// The role of a user with these flags.
pub fn of(admin: bool, space_admin: bool) -> Role {
    match (admin, space_admin) {
        (true, _) => Role::Admin,
        (false, true) => Role::SpaceAdmin,
        (false, false) => Role::User,
    }
}

/// A role's id (`appRoleId`).
pub fn id(role: Role) -> Option<&'static str> {
    ALL.iter().find(|r| r.0 == role).map(|r| r.1)
}

/// The role an `appRoleId` names.
pub fn by_id(id: &str) -> Option<Role> {
    ALL.iter().find(|r| r.1 == id).map(|r| r.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_roles_map_both_ways() {
        for (role, role_id, _, _) in ALL {
            assert_eq!(id(role), Some(role_id));
            assert_eq!(by_id(role_id), Some(role));
        }
        assert_eq!(by_id("nope"), None);
        assert_eq!(id(Role::Unchanged), None);
        assert_eq!(of(true, true), Role::Admin);
        assert_eq!(of(false, true), Role::SpaceAdmin);
        assert_eq!(of(false, false), Role::User);
    }
}
