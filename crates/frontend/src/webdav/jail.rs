//! The share jail: what others shared with the caller, mounted by name.
//!
//! Accepted shares appear as `/remote.php/dav/files/USER/Shares/NAME/…` (and under
//! `/remote.php/webdav/Shares/…`) and in the virtual Shares space, `/dav/spaces/SHARES_ID/NAME/…`,
//! the space id oCIS uses. `Shares` itself is a virtual, read-only folder listing the mounts.
//!
//! A jail path is turned into a plain [`Location`] in the owner's space: the mount is looked
//! up among the caller's accepted shares (`ListShares`), the shared node's current path is
//! stat'ed by id as the caller, and the rest of the path is appended; hrefs in answers strip
//! that path again ([`Location::base`]). The provider then enforces the grant on the real path
//! like for any call, so nothing here decides access: a path that escapes the shared node
//! (`..` is refused by path parsing) or a revoked share fails there. Cost per jail request:
//! two gateway calls (the caller's shares and one stat) before the operation itself.

// Handlers return their HTTP error answer as the `Err` side, as in `webdav`.
#![allow(clippy::result_large_err)]

use std::hash::{DefaultHasher, Hash, Hasher};

use arca_proto::ErrorKind;
use arca_proto::v1::sharing_client::SharingClient;
use arca_proto::v1::*;
use arca_transport::Channel;
use axum::response::Response;
use http::StatusCode;

use arca_proto::sharing::{perm, share_state};

use super::dav;
use super::{Location, dav_error, grpc_error};

/// The name of the folder shares are mounted under in the caller's home.
pub(crate) const SHARES: &str = "Shares";
/// The virtual Shares space, with the id oCIS gives it (CLIENT_PROTOCOL.md, Graph drives).
pub(crate) const SHARES_SPACE_ID: &str =
    "a0ca6a90-a365-4782-871e-d44447bbc668$a0ca6a90-a365-4782-871e-d44447bbc668";

/// Where a location points, jail-wise.
enum Spot {
    /// Not in the jail.
    Outside,
    /// The virtual folder of mounts; `prefix` is the href prefix of its parent space and
    /// `path` the folder's path there (`/Shares` in a home, `/` in the Shares space).
    Root { path: &'static str },
    /// Inside mount `name`, at `rest` (`""` or `/a/b`); `prefix` the href prefix for it.
    Mount {
        name: String,
        rest: String,
        prefix: String,
    },
}

fn spot(loc: &Location) -> Spot {
    if loc.space_id == SHARES_SPACE_ID {
        let mut segs = loc.path.segments();
        return match segs.next() {
            None => Spot::Root { path: "/" },
            Some(name) => {
                let mut prefix = format!("{}/", loc.prefix.trim_end_matches('/'));
                dav::encode_path(name, &mut prefix);
                Spot::Mount {
                    name: name.to_owned(),
                    rest: rest_of(segs),
                    prefix: prefix.trim_end_matches('/').to_owned(),
                }
            }
        };
    }
    // Only the caller's own home (no space id) has a `Shares` folder.
    if !loc.space_id.is_empty() || !loc.base.is_empty() {
        return Spot::Outside;
    }
    let mut segs = loc.path.segments();
    if segs.next() != Some(SHARES) {
        return Spot::Outside;
    }
    match segs.next() {
        None => Spot::Root { path: "/Shares" },
        Some(name) => {
            let mut prefix = format!("{}/{SHARES}/", loc.prefix);
            dav::encode_path(name, &mut prefix);
            Spot::Mount {
                name: name.to_owned(),
                rest: rest_of(segs),
                prefix: prefix.trim_end_matches('/').to_owned(),
            }
        }
    }
}

fn rest_of<'a>(segs: impl Iterator<Item = &'a str>) -> String {
    let mut rest = String::new();
    for s in segs {
        rest.push('/');
        rest.push_str(s);
    }
    rest
}

/// What a request in the jail becomes.
pub(crate) enum Entered {
    /// A location in a real space (the owner's), or one outside the jail, unchanged.
    Real(Location),
    /// The virtual folder of mounts.
    Root(Location),
}

/// Maps a jail location to the owner's space; others pass through.
pub(crate) async fn enter(gateway: &Channel, loc: Location) -> Result<Entered, Response> {
    match spot(&loc) {
        Spot::Outside => Ok(Entered::Real(loc)),
        Spot::Root { .. } => Ok(Entered::Root(loc)),
        Spot::Mount { name, rest, prefix } => {
            let (share, node) = mount(gateway, &name).await?;
            let base = node.path.clone();
            let mut raw = String::new();
            dav::encode_path(&format!("{base}{rest}"), &mut raw);
            if loc.path.trailing_slash() {
                raw.push('/');
            }
            let path = dav::decode_path(&raw)
                .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
            Ok(Entered::Real(Location {
                prefix,
                space_id: share.space_id,
                path,
                tokens: loc.tokens,
                base,
            }))
        }
    }
}

/// [`enter`] for a COPY or MOVE destination: the virtual folder takes nothing.
pub(crate) async fn enter_destination(
    gateway: &Channel,
    loc: Location,
) -> Result<Location, Response> {
    match enter(gateway, loc).await? {
        Entered::Real(l) => Ok(l),
        Entered::Root(_) => Err(dav_error(
            StatusCode::FORBIDDEN,
            "the Shares folder holds only what others share with you",
            None,
        )),
    }
}

/// The accepted share mounted as `name`, and its node as the caller sees it now.
async fn mount(gateway: &Channel, name: &str) -> Result<(Share, Node), Response> {
    let not_found = || dav_error(StatusCode::NOT_FOUND, "Resource not found", None);
    let shares = accepted(gateway).await.map_err(grpc_error)?;
    let share = shares
        .into_iter()
        .find(|s| s.mount == name)
        .ok_or_else(not_found)?;
    let node = stat(gateway, &share.node_id).await.map_err(|s| {
        if ErrorKind::of(&s) == ErrorKind::NotFound {
            not_found()
        } else {
            grpc_error(s)
        }
    })?;
    Ok((share, node))
}

async fn accepted(gateway: &Channel) -> Result<Vec<Share>, tonic::Status> {
    Ok(SharingClient::new(gateway.clone())
        .list_shares(ListSharesRequest {
            shared_with_me: true,
            node_id: String::new(),
            reshares: false,
            state: share_state::ACCEPTED,
            skip_names: true,
        })
        .await?
        .into_inner()
        .shares)
}

async fn stat(gateway: &Channel, node_id: &str) -> Result<Node, tonic::Status> {
    Ok(arca_proto::storage_client(gateway.clone())
        .stat(StatRequest {
            r#ref: Some(Ref {
                space_id: String::new(),
                path: String::new(),
                node_id: node_id.to_owned(),
            }),
            with_props: false,
            with_locks: false,
        })
        .await?
        .into_inner())
}

/// The mounts as nodes of the virtual folder at `folder` (`/Shares` or `/`): each the shared
/// node as the caller sees it, renamed to its mount. Shares whose node is gone are left out.
pub(crate) async fn mounts(gateway: &Channel, folder: &str) -> Result<Vec<Node>, Response> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for share in accepted(gateway).await.map_err(grpc_error)? {
        if seen.contains(&share.mount) {
            continue;
        }
        seen.push(share.mount.clone());
        match stat(gateway, &share.node_id).await {
            Ok(mut node) => {
                node.path = if folder == "/" {
                    format!("/{}", share.mount)
                } else {
                    format!("{folder}/{}", share.mount)
                };
                node.name = share.mount;
                node.parent_id = String::new();
                out.push(node);
            }
            Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => {}
            Err(s) => return Err(grpc_error(s)),
        }
    }
    Ok(out)
}

/// The virtual folder itself, at `path`, summing up `mounts`: its etag changes whenever one
/// of theirs does (or the set changes), so sync clients see changes from it alone.
pub(crate) fn folder(path: &str, mounts: &[Node]) -> Node {
    let mut h = DefaultHasher::new();
    for m in mounts {
        (&m.name, &m.etag).hash(&mut h);
    }
    Node {
        id: SHARES_SPACE_ID.to_owned(),
        space_id: SHARES_SPACE_ID.to_owned(),
        name: SHARES.to_owned(),
        is_dir: true,
        size: mounts.iter().map(|m| m.size).sum(),
        mtime_ns: mounts.iter().map(|m| m.mtime_ns).max().unwrap_or(0),
        etag: format!("{:016x}", h.finish()),
        path: path.to_owned(),
        // Read-only: nothing is created in the jail itself.
        shared_permissions: perm::READ,
        ..Default::default()
    }
}

/// The `Shares` folder for a Depth 1 listing of the caller's home root, when it has shares.
pub(crate) async fn home_entry(gateway: &Channel, loc: &Location) -> Option<Node> {
    if !loc.space_id.is_empty() || !loc.base.is_empty() || !loc.path.is_root() {
        return None;
    }
    let path = format!("/{SHARES}");
    match mounts(gateway, &path).await {
        Ok(m) if !m.is_empty() => Some(folder(&path, &m)),
        _ => None,
    }
}

/// The virtual folder's path for a root location (`/Shares` or `/`).
pub(crate) fn root_path(loc: &Location) -> &'static str {
    match spot(loc) {
        Spot::Root { path } => path,
        _ => "/",
    }
}

/// `oc:permissions` letters for a node: the owner's full set, or for shared nodes `S` and
/// what the share allows (R reshare, D delete, NV rename/move, W write a file, CK create in a
/// folder), as ownCloud shows received shares.
pub(crate) fn dav_permissions(n: &Node) -> String {
    if n.shared_permissions == 0 {
        return if n.is_dir { "RDNVCKZP" } else { "RDNVWZP" }.to_owned();
    }
    let bits = n.shared_permissions;
    let mut s = String::from("S");
    if bits & perm::SHARE != 0 {
        s.push('R');
    }
    if bits & perm::DELETE != 0 {
        s.push('D');
    }
    if bits & perm::UPDATE != 0 {
        s.push_str("NV");
    }
    if n.is_dir {
        if bits & perm::CREATE != 0 {
            s.push_str("CK");
        }
    } else if bits & perm::UPDATE != 0 {
        s.push('W');
    }
    s
}

/// For `oc:share-types`: the types of the shares the caller made (or that exist on its files)
/// of each node, as the property's inner XML, keyed by node id.
pub(crate) async fn share_types(
    gateway: &Channel,
) -> Result<std::collections::HashMap<String, String>, tonic::Status> {
    let shares = SharingClient::new(gateway.clone())
        .list_shares(ListSharesRequest {
            shared_with_me: false,
            node_id: String::new(),
            reshares: true,
            state: share_state::ANY,
            skip_names: true,
        })
        .await?
        .into_inner()
        .shares;
    let mut by_node: std::collections::HashMap<String, Vec<i32>> = Default::default();
    for s in shares {
        let types = by_node.entry(s.node_id).or_default();
        if !types.contains(&s.share_type) {
            types.push(s.share_type);
        }
    }
    Ok(by_node
        .into_iter()
        .map(|(node, mut types)| {
            types.sort_unstable();
            let xml = types
                .iter()
                .map(|t| format!("<oc:share-type>{t}</oc:share-type>"))
                .collect();
            (node, xml)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(prefix: &str, space: &str, raw: &str) -> Location {
        Location {
            prefix: prefix.into(),
            space_id: space.into(),
            path: dav::decode_path(raw).unwrap(),
            tokens: Vec::new(),
            base: String::new(),
        }
    }

    #[test]
    fn jail_paths_are_recognised() {
        let home = "/remote.php/dav/files/bob";
        assert!(matches!(
            spot(&loc(home, "", "/Shares")),
            Spot::Root { path: "/Shares" }
        ));
        assert!(matches!(spot(&loc(home, "", "/Docs")), Spot::Outside));
        assert!(matches!(spot(&loc(home, "", "/SharesX/a")), Spot::Outside));
        match spot(&loc(home, "", "/Shares/My%20Docs/a/b")) {
            Spot::Mount { name, rest, prefix } => {
                assert_eq!(name, "My Docs");
                assert_eq!(rest, "/a/b");
                assert_eq!(prefix, "/remote.php/dav/files/bob/Shares/My%20Docs");
            }
            _ => panic!("a mount"),
        }
        // Another space's Shares folder is just a folder.
        assert!(matches!(
            spot(&loc("/dav/spaces/x", "x", "/Shares/a")),
            Spot::Outside
        ));
        let space =
            "/dav/spaces/a0ca6a90-a365-4782-871e-d44447bbc668$a0ca6a90-a365-4782-871e-d44447bbc668";
        assert!(matches!(
            spot(&loc(space, SHARES_SPACE_ID, "/")),
            Spot::Root { path: "/" }
        ));
        match spot(&loc(space, SHARES_SPACE_ID, "/Docs")) {
            Spot::Mount { rest, prefix, .. } => {
                assert!(rest.is_empty());
                assert_eq!(prefix, format!("{space}/Docs"));
            }
            _ => panic!("a mount"),
        }
    }

    #[test]
    fn permission_letters() {
        let mut n = Node {
            is_dir: true,
            ..Default::default()
        };
        assert_eq!(dav_permissions(&n), "RDNVCKZP");
        n.shared_permissions = 1;
        assert_eq!(dav_permissions(&n), "S");
        n.shared_permissions = 15;
        assert_eq!(dav_permissions(&n), "SDNVCK");
        n.is_dir = false;
        n.shared_permissions = 3;
        assert_eq!(dav_permissions(&n), "SNVW");
    }
}
