//! The public data types: spaces, nodes, dead properties, write options.

use std::time::SystemTime;

use crate::checksum::{ChecksumAlgo, Checksums};

/// What a space is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceKind {
    /// A user's own space, created on first use ([`crate::Store::personal_space`]).
    Personal,
    /// A space created by an admin, shared by its members.
    Project,
}

impl SpaceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SpaceKind::Personal => "personal",
            SpaceKind::Project => "project",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "personal" => Some(SpaceKind::Personal),
            "project" => Some(SpaceKind::Project),
            _ => None,
        }
    }
}

/// A space: a tree of nodes with an owner and a quota. Its root node's id equals the space id
/// (as in oCIS, where `oc:id` of a space root is `storage$space!space`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Space {
    pub id: String,
    pub kind: SpaceKind,
    /// The owning user's id.
    pub owner: String,
    pub name: String,
    /// Bytes; `None` = unlimited.
    pub quota: Option<u64>,
    /// Bytes used: the size of the root's subtree.
    pub used: u64,
    /// The root node's id (equal to `id`).
    pub root_id: String,
    /// The root's etag: it changes whenever anything in the space changes.
    pub etag: String,
    pub created: SystemTime,
    /// When a project space was disabled (its members lose it until it is restored).
    pub disabled: Option<SystemTime>,
    /// Nothing in the root (one index probe in the statement that reads the space): a new
    /// space, which the search crawler then need not list.
    pub empty: bool,
}

impl Space {
    /// Bytes left before the quota is reached; `None` = unlimited.
    pub fn remaining(&self) -> Option<u64> {
        self.quota.map(|q| q.saturating_sub(self.used))
    }
}

/// Directory or file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Dir,
    File,
}

impl NodeKind {
    pub(crate) fn to_db(self) -> i64 {
        match self {
            NodeKind::Dir => 1,
            NodeKind::File => 2,
        }
    }

    pub(crate) fn from_db(v: i64) -> Option<Self> {
        match v {
            1 => Some(NodeKind::Dir),
            2 => Some(NodeKind::File),
            _ => None,
        }
    }
}

/// A file or directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Stable: kept across rename, move and overwrite.
    pub id: String,
    pub space_id: String,
    /// `None` for a space root.
    pub parent_id: Option<String>,
    /// `""` for a space root.
    pub name: String,
    pub kind: NodeKind,
    /// Files: content length. Directories: total size of the subtree.
    pub size: u64,
    /// Client-settable for files (`X-OC-Mtime`); for directories the time of the last entry
    /// added, removed or renamed directly inside.
    pub mtime: SystemTime,
    /// Changes on every content change of this node or any change below it (32 hex, unquoted).
    pub etag: String,
    /// Files only.
    pub checksums: Option<Checksums>,
    pub created: SystemTime,
    pub(crate) blob_id: Option<String>,
}

impl Node {
    pub fn is_dir(&self) -> bool {
        self.kind == NodeKind::Dir
    }

    pub fn is_root(&self) -> bool {
        self.parent_id.is_none()
    }

    /// The id of the blob holding a file's content, for diagnostics and tests.
    pub fn blob_id(&self) -> Option<&str> {
        self.blob_id.as_deref()
    }
}

/// A WebDAV dead property: `(namespace, name) → value` where the value is the XML fragment text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadProp {
    pub namespace: String,
    pub name: String,
    pub value: String,
}

/// One step of a PROPPATCH; a batch is applied atomically ([`crate::Store::patch_props`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropPatch {
    Set {
        namespace: String,
        name: String,
        value: String,
    },
    Remove {
        namespace: String,
        name: String,
    },
}

/// Conditions and metadata of a [`crate::Store::put_file`].
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// Write only if the file exists with this etag (quotes around it are ignored).
    pub if_match: Option<String>,
    /// Write only if nothing exists under the name (`If-None-Match: *`).
    pub if_none_match_any: bool,
    /// The file's modification time; now if `None`.
    pub mtime: Option<SystemTime>,
    /// Refuse the body unless it has this checksum (hex, any case).
    pub expected_checksum: Option<(ChecksumAlgo, String)>,
    /// The declared body length: checked against the quota before the body is read, and against
    /// the body received.
    pub content_length: Option<u64>,
    /// The early checks, when the caller has just made them (see [`Precheck::of`]): the put
    /// then skips its own first read. `None`: the put makes them before reading the body.
    pub prechecked: Option<Precheck>,
}

/// What a put checks before it reads a body (parent, target, preconditions, the quota against
/// the declared length), done by a caller that had just read the parent, the node under the
/// name and the space; made by [`Precheck::of`]. The commit checks everything again, so a
/// precheck that went stale cannot let anything through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Precheck {
    /// The space written into.
    pub space_id: String,
    /// Bytes the body may have before the quota is exceeded (`None` = unlimited); a body that
    /// grows past it is refused while it streams.
    pub allowance: Option<u64>,
}
