//! Store types to protocol messages.

use std::time::{SystemTime, UNIX_EPOCH};

use arca_proto::ids;
use arca_proto::v1;
use arca_store_files::{DeadProp, Node, Space};

pub(crate) fn nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

pub(crate) fn space(provider: &str, s: &Space) -> v1::Space {
    v1::Space {
        id: ids::space_id(provider, &s.id),
        kind: s.kind.as_str().to_owned(),
        owner_id: s.owner.clone(),
        name: s.name.clone(),
        quota: s.quota.unwrap_or(0),
        used: s.used,
        root_id: ids::node_id(provider, &s.id, &s.root_id),
        etag: s.etag.clone(),
        mtime_ns: nanos(s.created),
        provider: provider.to_owned(),
        empty: s.empty,
        // The drive details (description, alias, root mtime) cost a query of their own: the
        // provider adds them where they are asked for.
        ..Default::default()
    }
}

pub(crate) fn node(
    provider: &str,
    n: Node,
    path: String,
    owner: &str,
    props: Vec<DeadProp>,
) -> v1::Node {
    node_without(provider, n, path, owner, props, Without::default())
}

/// Fields of a node message a caller said it will not read (see `ListRequest`).
#[derive(Clone, Copy, Default)]
pub(crate) struct Without {
    pub(crate) ids: bool,
    pub(crate) checksums: bool,
    pub(crate) owner: bool,
}

/// [`node`], leaving empty what `without` names.
pub(crate) fn node_without(
    provider: &str,
    n: Node,
    path: String,
    owner: &str,
    props: Vec<DeadProp>,
    without: Without,
) -> v1::Node {
    let is_dir = n.is_dir();
    let (sha1, md5, adler32) = match n.checksums {
        Some(c) if !without.checksums => (c.sha1, c.md5, c.adler32),
        _ => Default::default(),
    };
    let (id, space_id, parent_id) = if without.ids {
        Default::default()
    } else {
        (
            ids::node_id(provider, &n.space_id, &n.id),
            ids::space_id(provider, &n.space_id),
            n.parent_id
                .as_deref()
                .map(|p| ids::node_id(provider, &n.space_id, p))
                .unwrap_or_default(),
        )
    };
    v1::Node {
        id,
        space_id,
        parent_id,
        name: n.name,
        is_dir,
        size: n.size,
        mtime_ns: nanos(n.mtime),
        etag: n.etag,
        sha1,
        md5,
        adler32,
        path,
        props: props
            .into_iter()
            .map(|p| v1::Property {
                namespace: p.namespace,
                name: p.name,
                value: p.value,
            })
            .collect(),
        locks: Vec::new(),
        owner_id: if without.owner {
            String::new()
        } else {
            owner.to_owned()
        },
        // The provider narrows this for callers who are not the owner (see `provider`).
        shared_permissions: 0,
    }
}

/// A checksum as the frontend passes it (`sha1:HEX`, `md5:HEX`, `adler32:HEX`; empty: none)
/// → what the store verifies. An unknown algorithm is refused (never silently unchecked).
pub(crate) fn expected_checksum(
    text: &str,
) -> Result<Option<(arca_store_files::ChecksumAlgo, String)>, String> {
    match text.split_once(':') {
        None if text.trim().is_empty() => Ok(None),
        None => Err(format!("checksum {text:?} is not ALGORITHM:HEX")),
        Some((algo, hex)) => algo
            .parse::<arca_store_files::ChecksumAlgo>()
            .map(|a| Some((a, hex.trim().to_owned())))
            .map_err(|()| format!("unsupported checksum type {algo:?}")),
    }
}
