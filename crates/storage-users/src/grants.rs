//! What a caller who does not own a space may do in it because of shares.
//!
//! The space's owner never pays for this: ownership is decided from the space row alone. For
//! anyone else the provider asks the sharing service for the caller's grants in that space on
//! every call (one gRPC call, which costs the sharing service two to storage-system: the
//! caller's groups and the matching share records). Nothing is cached, so a revoked or
//! narrowed share, or a member leaving a group, takes effect on the very next request, open
//! sessions included. A grant covers its node and everything below it, found by path: the
//! grant's node path is looked up in this store (one indexed walk per grant), so a grant
//! follows its folder through renames and moves.

use arca_proto::ErrorKind;
use arca_proto::ids;
use arca_proto::v1::GrantsRequest;
use arca_proto::v1::sharing_client::SharingClient;
use arca_transport::Channel;
use tonic::Status;

pub(crate) use arca_proto::sharing::perm::{ALL, CREATE, DELETE, READ, UPDATE};

/// What the caller may do in one space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// The owner (or an admin managing a project space): everything, no lookups.
    Owner,
    /// (path of the shared node in this space, permission bits) per grant.
    Shared(Vec<(String, u32)>),
}

/// The caller's permissions at one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Perm {
    pub(crate) owner: bool,
    /// At the path itself.
    pub(crate) here: u32,
    /// For anything below it.
    pub(crate) below: u32,
    /// The path is a shared node itself: its existence is known to the recipient.
    pub(crate) at_root: bool,
}

impl Perm {
    pub(crate) const OWNER: Perm = Perm {
        owner: true,
        here: ALL,
        below: ALL,
        at_root: false,
    };

    /// Refuses unless every bit of `need` is held here: 403 where the caller knows the
    /// resource exists (it may read it, or it is the shared node), 404 where it may not know.
    pub(crate) fn need(&self, need: u32) -> Result<(), Status> {
        if self.here & need == need {
            return Ok(());
        }
        if self.here & READ != 0 || self.at_root {
            Err(ErrorKind::PermissionDenied.status("the share does not allow this"))
        } else {
            Err(ErrorKind::NotFound.status("no such resource"))
        }
    }

    /// What `Node.shared_permissions` carries: 0 for the owner.
    pub(crate) fn shared(&self) -> u32 {
        if self.owner { 0 } else { self.here }
    }

    /// The permissions of a child of this (directory) path.
    pub(crate) fn child(&self) -> Perm {
        Perm {
            owner: self.owner,
            here: self.below,
            below: self.below,
            at_root: false,
        }
    }
}

impl Access {
    /// The caller's permissions at `path`, `None` when no grant covers it. A recipient never
    /// deletes (or moves away) the shared node itself: that is unsharing, the owner's to do.
    pub(crate) fn at(&self, path: &str) -> Option<Perm> {
        let grants = match self {
            Access::Owner => return Some(Perm::OWNER),
            Access::Shared(g) => g,
        };
        let mut perm: Option<Perm> = None;
        for (root, bits) in grants {
            let at_root = path == root;
            let inside = at_root || is_below(path, root);
            if !inside {
                continue;
            }
            let p = perm.get_or_insert(Perm {
                owner: false,
                here: 0,
                below: 0,
                at_root: false,
            });
            p.here |= if at_root { bits & !DELETE } else { *bits };
            p.below |= bits;
            p.at_root |= at_root;
        }
        perm
    }
}

/// The caller may create but neither read nor update here: an upload-only link. Such a
/// caller must learn nothing about what the folder holds, so its uploads never replace a file
/// and never say one exists ([`free_name`]).
pub(crate) fn blind(perm: &Perm) -> bool {
    !perm.owner && perm.here & (READ | UPDATE) == 0
}

/// Attempts at a free name before giving up (a folder with that many `name (n)` files).
const MAX_FREE_NAME_TRIES: u32 = 1000;

/// The first name of `path`'s [`arca_store_files::numbered_name`] series (as oCIS renames uploads
/// into a file drop) not taken in directory `parent_id`, and
/// the path it gives: (name, path).
pub(crate) async fn free_name(
    store: &arca_store_files::Store,
    parent_id: &str,
    path: &str,
) -> Result<(String, String), Status> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    for n in 2..=MAX_FREE_NAME_TRIES {
        let candidate = arca_store_files::numbered_name(name, n);
        match store.child(parent_id, &candidate).await {
            Ok(_) => {}
            Err(arca_store_files::StoreError::NotFound) => {
                let path = format!("{dir}/{candidate}");
                return Ok((candidate, path));
            }
            Err(e) => return Err(e.status()),
        }
    }
    Err(ErrorKind::Conflict.status("no free name for the upload"))
}

/// `path` is strictly below `root` (segment-wise: `/a/bc` is not below `/a/b`).
fn is_below(path: &str, root: &str) -> bool {
    if root == "/" {
        return path != "/";
    }
    path.strip_prefix(root)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Asks the sharing service; see the module docs for the cost.
#[derive(Clone)]
pub(crate) struct Grants {
    pub(crate) sharing: Channel,
}

impl Grants {
    /// The caller's grants in `space` (the store's space id), as (node id in this store,
    /// bits). The caller's identity travels with the call.
    pub(crate) async fn of(
        &self,
        provider: &str,
        space: &str,
    ) -> Result<Vec<(String, u32)>, Status> {
        let answer = SharingClient::new(self.sharing.clone())
            .grants(GrantsRequest {
                space_id: ids::space_id(provider, space),
            })
            .await?
            .into_inner();
        Ok(answer
            .grants
            .into_iter()
            .filter_map(|g| {
                let (p, s, node) = ids::parse_node_id(&g.node_id)?;
                (p == provider && s == space).then(|| (node.to_owned(), g.permissions))
            })
            .collect())
    }
}

/// Resolves grants to (path, bits) in `store`; grants on nodes that no longer exist are
/// dropped.
pub(crate) async fn with_paths(
    store: &arca_store_files::Store,
    grants: Vec<(String, u32)>,
) -> Result<Vec<(String, u32)>, Status> {
    let mut out = Vec::with_capacity(grants.len());
    for (node, bits) in grants {
        match store.path_of(&node).await {
            Ok(path) => out.push((path, bits)),
            Err(arca_store_files::StoreError::NotFound) => {}
            Err(e) => return Err(e.status()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_cover_their_subtree_only() {
        let a = Access::Shared(vec![("/a/b".into(), READ), ("/x".into(), 15)]);
        assert_eq!(a.at("/a"), None);
        assert_eq!(a.at("/a/bc"), None, "a sibling with a common prefix");
        let root = a.at("/a/b").unwrap();
        assert!(root.at_root && root.here == READ);
        assert_eq!(a.at("/a/b/c/d").unwrap().here, READ);
        let x = a.at("/x").unwrap();
        assert_eq!(
            x.here,
            15 & !DELETE,
            "the shared node itself is not deleted"
        );
        assert_eq!(x.child().here, 15);
        assert_eq!(a.at("/x/y").unwrap().here, 15);
        assert_eq!(Access::Owner.at("/anything"), Some(Perm::OWNER));
    }

    #[test]
    fn overlapping_grants_add_up() {
        let a = Access::Shared(vec![("/a".into(), READ), ("/a/b".into(), READ | UPDATE)]);
        assert_eq!(a.at("/a/b/c").unwrap().here, READ | UPDATE);
        assert_eq!(a.at("/a/c").unwrap().here, READ);
    }

    #[test]
    fn drop_uploads_get_numbered_names() {
        let drop_box = Access::Shared(vec![("/in".into(), CREATE)]);
        assert!(blind(&drop_box.at("/in/x").unwrap()));
        let editor = Access::Shared(vec![("/in".into(), 15)]);
        assert!(!blind(&editor.at("/in/x").unwrap()));
        assert!(!blind(&Perm::OWNER));
    }

    #[test]
    fn refusals_hide_what_the_caller_cannot_know() {
        let drop_box = Access::Shared(vec![("/in".into(), CREATE)]);
        let root = drop_box.at("/in").unwrap();
        assert_eq!(
            ErrorKind::of(&root.need(READ).unwrap_err()),
            ErrorKind::PermissionDenied
        );
        let inside = drop_box.at("/in/secret.txt").unwrap();
        assert_eq!(
            ErrorKind::of(&inside.need(READ).unwrap_err()),
            ErrorKind::NotFound
        );
        assert!(inside.need(CREATE).is_ok());
        let viewer = Access::Shared(vec![("/d".into(), READ)])
            .at("/d/f")
            .unwrap();
        assert_eq!(
            ErrorKind::of(&viewer.need(UPDATE).unwrap_err()),
            ErrorKind::PermissionDenied
        );
        assert!(Perm::OWNER.need(ALL).is_ok());
    }
}
