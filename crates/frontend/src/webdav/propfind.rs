//! PROPFIND and PROPPATCH: properties of nodes, live and dead (RFC 4918 §9.1, §9.2).

use super::*;

/// A PROPFIND's depth (0 or 1) and what it asks for.
pub(crate) async fn propfind_query(req: Request) -> Result<(Depth, Propfind), Response> {
    let depth = depth(req.headers(), Depth::Infinity)?;
    if depth == Depth::Infinity {
        return Err(dav_error(
            StatusCode::FORBIDDEN,
            "PROPFIND with Depth: infinity is not supported",
            Some(&Precondition::PropfindFiniteDepth),
        ));
    }
    let body = xml_body(req).await?;
    let query = dav::parse_propfind(&body)
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    Ok((depth, query))
}

/// A PROPFIND answered from nodes another module made up (the share jail's folder).
pub(super) async fn propfind_virtual(
    dav: &Dav,
    loc: &Location,
    req: Request,
    folder: Node,
    members: Vec<Node>,
) -> Result<Response, Response> {
    let (depth, query) = propfind_query(req).await?;
    let members = if depth == Depth::Zero {
        Vec::new()
    } else {
        members
    };
    propfind_answer(dav, loc, &query, folder, members, None).await
}

pub(super) async fn propfind(
    dav: &Dav,
    loc: &Location,
    req: Request,
) -> Result<Response, Response> {
    let (depth, query) = propfind_query(req).await?;
    let with_props =
        !matches!(&query, Propfind::Prop(names) if names.iter().all(|n| n.live().is_some()));
    let with_locks = matches!(&query, Propfind::Prop(names) if names.iter().any(|n| n.live() == Some(LiveProp::LockDiscovery)));
    let mut client = dav.storage();
    let (node, children) = if depth == Depth::Zero {
        let node = client
            .stat(StatRequest {
                r#ref: Some(loc.reference()),
                with_props,
                with_locks,
            })
            .await
            .map_err(grpc_error)?
            .into_inner();
        (node, Vec::new())
    } else {
        let list = client
            .list(ListRequest {
                r#ref: Some(loc.reference()),
                with_props,
                with_locks,
                without_ids: !asks_for(&query, |p| {
                    matches!(
                        p,
                        LiveProp::OcId
                            | LiveProp::OcFileId
                            | LiveProp::OcSpaceId
                            | LiveProp::OcFileParent
                            | LiveProp::OcPrivateLink
                            // Found by node id (`propfind_answer`).
                            | LiveProp::OcShareTypes
                    )
                }),
                without_checksums: !asks_for(&query, |p| p == LiveProp::OcChecksums),
                without_owner: !asks_for(&query, |p| p == LiveProp::OcOwnerId),
            })
            .await
            .map_err(grpc_error)?
            .into_inner();
        let mut children = list.children;
        // The caller's home lists the folder its shares are mounted in.
        if let Some(shares) = crate::webdav::jail::home_entry(&dav.gateway, loc).await {
            children.push(shares);
        }
        (list.node.unwrap_or_default(), children)
    };
    let with_usage = wants_usage(&query);
    let quota = if with_usage || wants_quota(&query) {
        client
            .get_space(GetSpaceRequest {
                space_id: node.space_id.clone(),
                with_usage,
            })
            .await
            .ok()
            .map(|s| s.into_inner())
    } else {
        None
    };
    propfind_answer(dav, loc, &query, node, children, quota).await
}

/// The multistatus for `node` and its `children`.
pub(crate) async fn propfind_answer(
    dav: &Dav,
    loc: &Location,
    query: &Propfind,
    mut node: Node,
    mut children: Vec<Node>,
    quota: Option<Space>,
) -> Result<Response, Response> {
    let wants_share_types = matches!(query, Propfind::Prop(names) if names.iter().any(|n| n.live() == Some(LiveProp::OcShareTypes)));
    if wants_share_types {
        // One lookup for the whole answer; `live` finds each node's types among its props.
        let types = crate::webdav::jail::share_types(&dav.gateway)
            .await
            .map_err(grpc_error)?;
        for n in std::iter::once(&mut node).chain(children.iter_mut()) {
            if let Some(xml) = types.get(&n.id) {
                let name = PropName::OC_SHARE_TYPES;
                n.props.push(Property {
                    namespace: name.ns.to_string(),
                    name: name.local.to_string(),
                    value: xml.clone(),
                });
            }
        }
    }
    let mut ms = Multistatus::with_capacity(512 * (children.len() + 1));
    for n in std::iter::once(&node).chain(children.iter()) {
        let href = loc.href(&n.path, n.is_dir);
        let mut resp = ms.response(&href);
        render(&mut resp, n, query, quota.as_ref(), loc);
        resp.finish();
    }
    Ok(multistatus(ms.finish()))
}

pub(super) fn multistatus(body: String) -> Response {
    xml_answer(StatusCode::MULTI_STATUS, body)
}

/// Whether answering `q` renders a live property that `p` picks (see [`render`]).
pub(super) fn asks_for(q: &Propfind, p: impl Fn(LiveProp) -> bool) -> bool {
    match q {
        Propfind::PropName => false,
        Propfind::AllProp { include } => {
            ALLPROP.iter().any(|a| p(*a)) || include.iter().filter_map(|n| n.live()).any(&p)
        }
        Propfind::Prop(names) => names.iter().filter_map(|n| n.live()).any(&p),
    }
}

pub(super) fn wants_quota(q: &Propfind) -> bool {
    match q {
        Propfind::Prop(names) => names.iter().any(|n| {
            matches!(
                n.live(),
                Some(LiveProp::QuotaUsedBytes | LiveProp::QuotaAvailableBytes)
            )
        }),
        _ => false,
    }
}

/// Whether `q` names the trash or versions size (never in `allprop`: counting them costs the
/// provider a query over every version of the space).
pub(super) fn wants_usage(q: &Propfind) -> bool {
    match q {
        Propfind::Prop(names) => names.iter().any(|n| {
            matches!(
                n.live(),
                Some(LiveProp::OcTrashbinSize | LiveProp::OcVersionsSize)
            )
        }),
        _ => false,
    }
}

/// The properties answered for `allprop`, as oCIS answers them (CLIENT_PROTOCOL.md §4b).
pub(super) const ALLPROP: [LiveProp; 12] = [
    LiveProp::OcId,
    LiveProp::OcFileId,
    LiveProp::OcSpaceId,
    LiveProp::OcFileParent,
    LiveProp::OcName,
    LiveProp::GetEtag,
    LiveProp::OcPermissions,
    LiveProp::ResourceType,
    LiveProp::OcSize,
    LiveProp::GetLastModified,
    LiveProp::GetContentLength,
    LiveProp::OcFavorite,
];

pub(super) fn render(
    resp: &mut dav::PropResponse<'_>,
    n: &Node,
    q: &Propfind,
    quota: Option<&Space>,
    loc: &Location,
) {
    match q {
        Propfind::PropName => {
            for p in ALLPROP {
                resp.empty(&p.name());
            }
            for d in &n.props {
                resp.empty(&PropName::new(d.namespace.clone(), d.name.clone()));
            }
        }
        Propfind::AllProp { include } => {
            for p in ALLPROP {
                live(resp, n, p, quota, loc);
            }
            for d in &n.props {
                resp.raw(
                    &PropName::new(d.namespace.clone(), d.name.clone()),
                    &d.value,
                );
            }
            for name in include {
                if let Some(p) = name.live().filter(|p| !ALLPROP.contains(p)) {
                    live(resp, n, p, quota, loc);
                }
            }
        }
        Propfind::Prop(names) => {
            for name in names {
                match name.live() {
                    Some(p) => live(resp, n, p, quota, loc),
                    None => match n
                        .props
                        .iter()
                        .find(|d| d.namespace == name.ns && d.name == name.local)
                    {
                        Some(d) => resp.raw(name, &d.value),
                        None => resp.not_found(name),
                    },
                }
            }
        }
    }
}

pub(super) fn live(
    resp: &mut dav::PropResponse<'_>,
    n: &Node,
    p: LiveProp,
    quota: Option<&Space>,
    loc: &Location,
) {
    let name = p.name();
    let secs = n.mtime_ns.div_euclid(1_000_000_000);
    match p {
        LiveProp::GetEtag => resp.etag(&n.etag),
        LiveProp::GetLastModified => resp.last_modified(secs),
        LiveProp::ResourceType => resp.resourcetype(n.is_dir),
        LiveProp::GetContentLength if !n.is_dir => resp.number(&name, n.size),
        LiveProp::GetContentType if !n.is_dir => resp.text(&name, content_type(&n.name)),
        LiveProp::OcId | LiveProp::OcFileId => resp.text(&name, &n.id),
        LiveProp::OcSpaceId => resp.text(&name, &n.space_id),
        LiveProp::OcFileParent if !n.parent_id.is_empty() => resp.text(&name, &n.parent_id),
        LiveProp::OcName => resp.text(&name, &n.name),
        LiveProp::OcPermissions => resp.text(&name, &crate::webdav::jail::dav_permissions(n)),
        // Put among the props by `propfind_answer` when asked for: only shared nodes have it.
        LiveProp::OcShareTypes => match n
            .props
            .iter()
            .find(|d| d.namespace == name.ns && d.name == name.local)
        {
            Some(d) => resp.raw(&name, &d.value),
            None => resp.not_found(&name),
        },
        LiveProp::OcSize => resp.number(&name, n.size),
        LiveProp::OcFavorite => resp.number(&name, 0),
        LiveProp::OcOwnerId if !n.owner_id.is_empty() => resp.text(&name, &n.owner_id),
        LiveProp::OcChecksums if !n.is_dir && !n.sha1.is_empty() => {
            resp.checksums(Some(&n.sha1), Some(&n.md5), Some(&n.adler32));
        }
        LiveProp::OcPrivateLink => resp.text(&name, &format!("/f/{}", n.id.replace('!', "%21"))),
        LiveProp::SupportedLock => resp.supportedlock(),
        LiveProp::LockDiscovery => {
            let roots: Vec<String> = n
                .locks
                .iter()
                .map(|l| loc.href(&l.root_path, false))
                .collect();
            let locks: Vec<dav::ActiveLock<'_>> = n
                .locks
                .iter()
                .zip(&roots)
                .map(|(l, root)| active_lock(l, root))
                .collect();
            resp.lockdiscovery(&locks);
        }
        LiveProp::QuotaUsedBytes if n.is_dir => resp.number(&name, n.size),
        LiveProp::QuotaAvailableBytes if n.is_dir => match quota {
            // RFC 4331: the space left; an unlimited quota has no meaningful number, and
            // ownCloud clients read -3 as "unlimited".
            Some(s) if s.quota > 0 => resp.number(&name, s.quota.saturating_sub(s.used)),
            _ => resp.integer(&name, -3),
        },
        LiveProp::CreationDate => resp.text(&name, &crate::dates::http_date(secs)),
        // A space's, so only on its root; the space came with its usage (`wants_usage`).
        LiveProp::OcTrashbinSize | LiveProp::OcVersionsSize => match quota {
            Some(s) if n.is_dir && n.id == s.root_id => {
                let bytes = if p == LiveProp::OcTrashbinSize {
                    s.trash_bytes
                } else {
                    s.version_bytes
                };
                resp.number(&name, bytes)
            }
            _ => resp.not_found(&name),
        },
        _ => resp.not_found(&name),
    }
}

pub(super) async fn proppatch(
    dav: &Dav,
    loc: &Location,
    req: Request,
) -> Result<Response, Response> {
    let body = xml_body(req).await?;
    let ops = dav::parse_proppatch(&body)
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    let mut client = dav.storage();
    let node = client
        .stat(StatRequest {
            r#ref: Some(loc.reference()),
            with_props: false,
            with_locks: false,
        })
        .await
        .map_err(grpc_error)?
        .into_inner();
    // RFC 4918 §9.2: all or nothing; a protected property fails the whole request (403 for
    // it, 424 Failed Dependency for the rest).
    let protected: Vec<&PropName> = ops
        .iter()
        .map(|op| match op {
            PropPatchOp::Set { name, .. } | PropPatchOp::Remove { name } => name,
        })
        .filter(|n| n.live().is_some())
        .collect();
    let names: Vec<&PropName> = ops
        .iter()
        .map(|op| match op {
            PropPatchOp::Set { name, .. } | PropPatchOp::Remove { name } => name,
        })
        .collect();
    let href = loc.href(&node.path, node.is_dir);
    let mut ms = Multistatus::new();
    if !protected.is_empty() {
        let mut resp = ms.response(&href);
        let failed: Vec<&PropName> = names
            .iter()
            .copied()
            .filter(|n| n.live().is_some())
            .collect();
        let others: Vec<&PropName> = names
            .iter()
            .copied()
            .filter(|n| n.live().is_none())
            .collect();
        resp.propstat(
            StatusCode::FORBIDDEN,
            failed,
            Some(&Precondition::CannotModifyProtectedProperty),
        );
        if !others.is_empty() {
            resp.propstat(StatusCode::FAILED_DEPENDENCY, others, None);
        }
        resp.finish();
        return Ok(multistatus(ms.finish()));
    }
    let changes = ops
        .iter()
        .map(|op| {
            let (name, value, remove) = match op {
                PropPatchOp::Set { name, value } => (name, value.clone(), false),
                PropPatchOp::Remove { name } => (name, String::new(), true),
            };
            PropChange {
                property: Some(Property {
                    namespace: name.ns.to_string(),
                    name: name.local.to_string(),
                    value,
                }),
                remove,
            }
        })
        .collect();
    client
        .set_props(SetPropsRequest {
            r#ref: Some(loc.reference()),
            changes,
            lock_tokens: loc.tokens.clone(),
        })
        .await
        .map_err(grpc_error)?;
    let mut resp = ms.response(&href);
    resp.propstat(StatusCode::OK, names, None);
    resp.finish();
    Ok(multistatus(ms.finish()))
}
