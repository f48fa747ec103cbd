//! The words of sharing, defined once: ownCloud's permission bits, share types and states (the
//! numbers OCS clients send and read, and the `Share` messages carry), and the roles with the
//! ids the libregraph API uses.

/// Permission bits (ownCloud's, as OCS and `oc:permissions` speak them). A grant's bits apply
/// to the shared node and everything below it.
pub mod perm {
    pub const READ: u32 = 1;
    pub const UPDATE: u32 = 2;
    pub const CREATE: u32 = 4;
    pub const DELETE: u32 = 8;
    /// Re-share: grant others what one holds.
    pub const SHARE: u32 = 16;
    pub const ALL: u32 = READ | UPDATE | CREATE | DELETE | SHARE;
}

/// Share types (OCS `share_type`).
pub mod share_type {
    pub const USER: i32 = 0;
    pub const GROUP: i32 = 1;
    pub const LINK: i32 = 3;
    /// A project space's member (oCIS's OCS types): a user, a group.
    pub const SPACE_USER: i32 = 7;
    pub const SPACE_GROUP: i32 = 8;
}

/// A received share's state (OCS `state`, `ListSharesRequest.state`).
pub mod share_state {
    pub const ACCEPTED: i32 = 0;
    pub const PENDING: i32 = 1;
    pub const DECLINED: i32 = 2;
    /// In a listing request only: every state.
    pub const ANY: i32 = -1;
}

/// A named set of permissions a client may ask for instead of bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    /// The OCS `role` parameter (oCIS's spelling).
    pub name: &'static str,
    /// The libregraph role id (oCIS's unified roles), for the Graph API.
    pub graph_id: &'static str,
    pub permissions: u32,
    /// Only a public link may carry it (an upload-only drop box).
    pub links_only: bool,
    /// A role of a project space's members, not of a share of a file or folder.
    pub space_only: bool,
}

pub const VIEWER: Role = Role {
    name: "viewer",
    graph_id: "b1e2218d-eef8-4d4c-b82d-0f1a1b48f3b5",
    permissions: perm::READ,
    links_only: false,
    space_only: false,
};
pub const EDITOR: Role = Role {
    name: "editor",
    graph_id: "fb6c3e19-e378-47e5-b277-9732f9de6e21",
    permissions: perm::READ | perm::UPDATE | perm::CREATE | perm::DELETE,
    links_only: false,
    space_only: false,
};
pub const FILE_EDITOR: Role = Role {
    name: "file-editor",
    graph_id: "2d00ce52-1fc2-4dbc-8b95-a73b73395f5a",
    permissions: perm::READ | perm::UPDATE,
    links_only: false,
    space_only: false,
};
pub const UPLOADER: Role = Role {
    name: "uploader",
    graph_id: "1c996275-f1c9-4e71-abdf-a42f6495e960",
    permissions: perm::CREATE,
    links_only: true,
    space_only: false,
};
pub const SPACE_VIEWER: Role = Role {
    name: "space-viewer",
    graph_id: "a8d5fe5e-96e3-418d-825b-534dbdf22b99",
    permissions: perm::READ,
    links_only: false,
    space_only: true,
};
pub const SPACE_EDITOR: Role = Role {
    name: "space-editor",
    graph_id: "58c63c02-1d89-4572-916a-870abc5a1b7d",
    permissions: perm::READ | perm::UPDATE | perm::CREATE | perm::DELETE,
    links_only: false,
    space_only: true,
};
pub const MANAGER: Role = Role {
    name: "manager",
    graph_id: "312c0871-5ef7-4b3a-85b6-0e4074c64049",
    permissions: perm::ALL,
    links_only: false,
    space_only: true,
};

/// Every role, for lookups by name or Graph id.
pub const ROLES: [Role; 7] = [
    VIEWER,
    EDITOR,
    FILE_EDITOR,
    UPLOADER,
    SPACE_VIEWER,
    SPACE_EDITOR,
    MANAGER,
];

impl Role {
    /// The role an OCS `role` parameter names.
    pub fn by_name(name: &str) -> Option<Role> {
        ROLES.into_iter().find(|r| r.name == name)
    }

    /// The role an OCS share of a file, folder or (`link`) public link may name.
    pub fn for_share(name: &str, link: bool) -> Option<Role> {
        Role::by_name(name).filter(|r| !r.space_only && (link || !r.links_only))
    }

    /// The role a libregraph role id names.
    pub fn by_graph_id(id: &str) -> Option<Role> {
        ROLES.into_iter().find(|r| r.graph_id == id)
    }

    /// The role of a project space's member that `name` (or a libregraph id) names.
    pub fn for_space(name_or_id: &str) -> Option<Role> {
        Role::by_name(name_or_id)
            .or_else(|| Role::by_graph_id(name_or_id))
            .filter(|r| r.space_only)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_found_by_either_name() {
        assert_eq!(Role::by_name("editor").map(|r| r.permissions), Some(15));
        assert_eq!(Role::by_graph_id(MANAGER.graph_id), Some(MANAGER));
        assert_eq!(Role::by_name("owner"), None);
        assert_eq!(Role::for_share("uploader", true), Some(UPLOADER));
        assert_eq!(Role::for_share("uploader", false), None);
        assert_eq!(Role::for_share("manager", false), None);
        for (i, a) in ROLES.iter().enumerate() {
            for b in &ROLES[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.graph_id, b.graph_id);
            }
        }
    }
}
