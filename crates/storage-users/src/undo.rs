//! Undo: the trash bin and file versions, as the `Storage` API serves them.
//!
//! Who may do what. A space's trash is its owner's (and, for project spaces, its managers'):
//! a share recipient's removal lands there too, and the recipient cannot see it, since the
//! trash holds everything removed from the space, far outside any one share. For anyone else
//! the trash does not exist (NOT_FOUND), as a space they cannot see does not. Versions follow
//! the file: whoever may change it (owner, editors of a share covering it) lists, reads and
//! restores them; a reader sees an empty list and no version by its key.

use arca_proto::ErrorKind;
use arca_proto::v1::*;
use arca_runtime::Identity;
use arca_runtime::events::Event;
use arca_store_files::{
    Conflict, Node as StoreNode, Remover, Restored, Space as StoreSpace, StoreError,
    TrashItem as StoreItem, Version as StoreVersion,
};
use tonic::Status;

use crate::convert;
use crate::grants::{self, Access, Perm};
use crate::provider::{DOWNLOAD_PURPOSE, DownloadGrant, Provider, TRANSFER_TTL, Touch};

/// `/a/b` + `c` → `/a/b/c`.
fn join(dir: &str, name: &str) -> String {
    if dir == "/" || dir.is_empty() {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// A path inside a trashed item, normalised: `/` or `/x/y`.
fn inner_path(path: &str) -> String {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segs.is_empty() {
        "/".to_owned()
    } else {
        format!("/{}", segs.join("/"))
    }
}

fn conflict(c: i32) -> Result<Conflict, Status> {
    match RestoreConflict::try_from(c) {
        Ok(RestoreConflict::Fail) => Ok(Conflict::Fail),
        Ok(RestoreConflict::Skip) => Ok(Conflict::Skip),
        Ok(RestoreConflict::KeepBoth) => Ok(Conflict::KeepBoth),
        Ok(RestoreConflict::Replace) => Ok(Conflict::Replace),
        Err(_) => Err(ErrorKind::InvalidArgument.status(format!("unknown restore conflict {c}"))),
    }
}

/// A trash key or version key as clients send it back: short, printable, no path.
fn check_key(key: &str) -> Result<(), Status> {
    if key.is_empty()
        || key.len() > 128
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err(ErrorKind::NotFound.status("no such trash item or version"));
    }
    Ok(())
}

/// Store errors of a trash or version call: "not found" names what is missing.
fn status(e: StoreError) -> Status {
    match e {
        StoreError::NotFound => ErrorKind::NotFound.status("no such trash item or version"),
        e => e.status(),
    }
}

impl Provider {
    /// After a removal: `file.trashed` (what, from where, by whom), and `trash.burst` when
    /// counting it into its remover's burst (in the removal's transaction) made the burst a
    /// mass delete.
    pub(crate) fn trashed(
        &self,
        who: &Identity,
        space: &StoreSpace,
        item: &StoreItem,
        path: &str,
        remover: Remover<'_>,
        burst: Option<arca_store_files::Burst>,
    ) {
        let space_id = arca_proto::ids::space_id(self.name, &space.id);
        let event = Event::new("file.trashed", &who.id)
            .with("space_id", space_id.clone())
            .with("trash_key", item.key.clone())
            .with("path", path.to_owned())
            .with("client", remover.client.to_owned())
            .with("size", item.node.size.to_string());
        self.events.send(event);
        if let Some(burst) = burst {
            tracing::warn!(
                space = %space_id,
                actor = %burst.actor,
                client = %burst.client,
                files = burst.files,
                "a burst of removals: a client's mass delete? (restorable in one call)"
            );
            let event = Event::new("trash.burst", &who.id)
                .with("space_id", space_id)
                .with("burst_id", burst.id.clone())
                .with("client", burst.client.clone())
                .with("items", burst.items.to_string())
                .with("files", burst.files.to_string());
            self.events.send(event);
        }
    }

    pub(crate) async fn list_bursts_of(
        &self,
        who: &Identity,
        r: &ListBurstsRequest,
    ) -> Result<ListBurstsResponse, Status> {
        let space = self.trash_space(who, &r.space_id).await?;
        let bursts = self.store.bursts(&space.id).await.map_err(status)?;
        Ok(ListBurstsResponse {
            bursts: bursts
                .into_iter()
                .map(|b| Burst {
                    id: b.id,
                    space_id: arca_proto::ids::space_id(self.name, &b.space_id),
                    actor: b.actor,
                    client: b.client,
                    first_ns: convert::nanos(b.first),
                    last_ns: convert::nanos(b.last),
                    items: b.items,
                    files: b.files,
                    in_trash: b.in_trash.unwrap_or(0),
                })
                .collect(),
        })
    }

    /// The space of a trash call, if the caller owns (or manages) it.
    async fn trash_space(&self, who: &Identity, space_id: &str) -> Result<StoreSpace, Status> {
        let (space, access) = self.space_access(who, space_id).await?;
        if access != Access::Owner {
            return Err(ErrorKind::NotFound.status("no such space"));
        }
        Ok(space)
    }

    fn trash_message(&self, space: &StoreSpace, item: StoreItem) -> TrashItem {
        let path = item.original_path();
        let node = convert::node(self.name, item.node, path, &space.owner, Vec::new());
        TrashItem {
            key: item.key,
            space_id: arca_proto::ids::space_id(self.name, &item.space_id),
            name: item.name,
            location: item.location,
            deleted_ns: convert::nanos(item.deleted),
            stamp: item.stamp,
            deleted_by: item.deleted_by,
            node: Some(node),
        }
    }

    pub(crate) async fn list_trash_of(
        &self,
        who: &Identity,
        r: &ListTrashRequest,
    ) -> Result<ListTrashResponse, Status> {
        let space = self.trash_space(who, &r.space_id).await?;
        if !r.by_name.is_empty() {
            let item = self
                .store
                .trash_item_by_stamp(&space.id, &r.by_name, r.by_stamp)
                .await
                .map_err(status)?;
            return Ok(ListTrashResponse {
                item: Some(self.trash_message(&space, item)),
                ..Default::default()
            });
        }
        if r.key.is_empty() {
            let items = self.store.trash_items(&space.id).await.map_err(status)?;
            return Ok(ListTrashResponse {
                items: items
                    .into_iter()
                    .map(|i| self.trash_message(&space, i))
                    .collect(),
                ..Default::default()
            });
        }
        check_key(&r.key)?;
        let sub = inner_path(&r.path);
        let (item, node) = self
            .store
            .trash_entry(&space.id, &r.key, &sub)
            .await
            .map_err(status)?;
        let children = if node.is_dir() {
            self.store
                .list_children(&node.id)
                .await
                .map_err(status)?
                .into_iter()
                .map(|child| {
                    let path = join(&sub, &child.name);
                    convert::node(self.name, child, path, &space.owner, Vec::new())
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut node = convert::node(self.name, node, sub.clone(), &space.owner, Vec::new());
        if sub == "/" {
            // The item itself: in the trash its node is named by its key; it is shown by the
            // name it had.
            node.name = item.name.clone();
        }
        Ok(ListTrashResponse {
            item: Some(self.trash_message(&space, item)),
            node: Some(node),
            children,
            ..Default::default()
        })
    }

    pub(crate) async fn restore_trash_of(
        &self,
        who: &Identity,
        r: &RestoreTrashRequest,
    ) -> Result<RestoreTrashResponse, Status> {
        let space = self.trash_space(who, &r.space_id).await?;
        check_key(&r.key)?;
        let conflict = conflict(r.conflict)?;
        let sub = inner_path(&r.path);
        let restored = match &r.destination {
            None if sub == "/" => self
                .store
                .restore_to_origin(&space.id, &r.key, conflict, &who.id)
                .await
                .map_err(status)?,
            None => {
                return Err(ErrorKind::InvalidArgument
                    .status("a node inside a removed folder is restored to a destination"));
            }
            Some(dest) => {
                let (dest_space, parent, name) = self.restore_destination(who, dest).await?;
                if dest_space.id != space.id {
                    return Err(ErrorKind::Conflict
                        .status("a restore stays in the space it was removed from"));
                }
                self.store
                    .restore_trash(
                        &space.id, &r.key, &sub, &parent.id, &name, conflict, &who.id,
                    )
                    .await
                    .map_err(|e| match e {
                        // The destination's folder is gone: RFC 4918's 409.
                        StoreError::Conflict => ErrorKind::Conflict
                            .status("the destination's parent collection does not exist"),
                        e => status(e),
                    })?
            }
        };
        Ok(match restored {
            Restored::Done {
                node,
                path,
                replaced,
            } => {
                self.changed(&space.id);
                let event = Event::new("file.restored", &who.id)
                    .with("space_id", arca_proto::ids::space_id(self.name, &space.id))
                    .with("trash_key", r.key.clone())
                    .with("path", path.clone())
                    .with("replaced_key", replaced.clone().unwrap_or_default());
                self.events.send(event);
                RestoreTrashResponse {
                    node: Some(self.node_message(&node, path, &space.owner)),
                    replaced_key: replaced.unwrap_or_default(),
                    skipped: false,
                }
            }
            Restored::Skipped => RestoreTrashResponse {
                skipped: true,
                ..Default::default()
            },
        })
    }

    /// Where a restore with a destination lands: (space, parent folder, name). The parent
    /// must exist (409 otherwise, as for any WebDAV MOVE).
    async fn restore_destination(
        &self,
        who: &Identity,
        dest: &Ref,
    ) -> Result<(StoreSpace, StoreNode, String), Status> {
        if !dest.node_id.is_empty() {
            return Err(ErrorKind::InvalidArgument.status("a restore destination is a path"));
        }
        let space = self.trash_space(who, &dest.space_id).await?;
        let segs: Vec<&str> = dest.path.split('/').filter(|s| !s.is_empty()).collect();
        let Some((name, parents)) = segs.split_last() else {
            return Err(ErrorKind::PermissionDenied.status("the space root cannot be replaced"));
        };
        arca_store_files::validate_name(name).map_err(|e| e.status())?;
        let parent_path = format!("/{}", parents.join("/"));
        let parent = match self.store.resolve(&space.id, &parent_path).await {
            Ok(p) if p.is_dir() => p,
            Ok(_) | Err(StoreError::NotFound) => {
                return Err(ErrorKind::Conflict
                    .status("the destination's parent collection does not exist"));
            }
            Err(e) => return Err(e.status()),
        };
        Ok((space, parent, (*name).to_owned()))
    }

    pub(crate) async fn purge_trash_of(
        &self,
        who: &Identity,
        r: &PurgeTrashRequest,
    ) -> Result<PurgeTrashResponse, Status> {
        let space = self.trash_space(who, &r.space_id).await?;
        let gone = if r.key.is_empty() {
            self.store
                .purge_trash_all(&space.id)
                .await
                .map_err(status)?
        } else {
            check_key(&r.key)?;
            self.store
                .purge_trash(&space.id, &r.key, &inner_path(&r.path))
                .await
                .map_err(status)?
        };
        let event = Event::new("file.purged", &who.id)
            .with("space_id", arca_proto::ids::space_id(self.name, &space.id))
            .with("trash_key", r.key.clone())
            .with("items", gone.items.to_string())
            .with("bytes", gone.bytes.to_string());
        self.events.send(event);
        Ok(PurgeTrashResponse {
            items: gone.items,
            bytes: gone.bytes,
        })
    }

    pub(crate) async fn restore_all_of(
        &self,
        who: &Identity,
        r: &RestoreAllRequest,
    ) -> Result<RestoreAllResponse, Status> {
        let space = if !r.user_id.is_empty() && r.space_id.is_empty() {
            if !who.admin && r.user_id != who.id {
                return Err(
                    ErrorKind::PermissionDenied.status("only admins restore another user's trash")
                );
            }
            self.store
                .find_personal_space(&r.user_id)
                .await
                .map_err(|e| e.status())?
                .ok_or_else(|| ErrorKind::NotFound.status("that user has no personal space"))?
        } else {
            self.trash_space(who, &r.space_id).await?
        };
        let filter = if r.burst_id.is_empty() {
            let path = inner_path(&r.path);
            arca_store_files::RestoreFilter {
                since: crate::provider::mtime(r.since_ns),
                prefix: (path != "/").then_some(path),
                deleted_by: (!r.deleted_by.is_empty()).then(|| r.deleted_by.clone()),
                ..Default::default()
            }
        } else {
            check_key(&r.burst_id)?;
            let burst = self
                .store
                .burst(&space.id, &r.burst_id)
                .await
                .map_err(|e| match e {
                    StoreError::NotFound => ErrorKind::NotFound.status("no such burst"),
                    e => e.status(),
                })?;
            arca_store_files::RestoreFilter::of_burst(&burst)
        };
        let conflict = conflict(r.conflict)?;
        let mut run = self
            .store
            .restore_run(&space.id, &filter, conflict, &who.id)
            .await
            .map_err(status)?;
        let started = std::time::Instant::now();
        while run.step().await.map_err(status)? {}
        let t = run.tally();
        tracing::info!(
            space = %space.id,
            total = t.total,
            restored = t.restored,
            skipped = t.skipped,
            files = t.files,
            ms = started.elapsed().as_millis() as u64,
            "bulk restore"
        );
        self.changed(&space.id);
        let event = Event::new("file.restored", &who.id)
            .with("space_id", arca_proto::ids::space_id(self.name, &space.id))
            .with("items", t.restored.to_string())
            .with("files", t.files.to_string())
            .with("bulk", "true");
        self.events.send(event);
        Ok(RestoreAllResponse {
            total: t.total,
            restored: t.restored,
            renamed: t.renamed,
            replaced: t.replaced,
            skipped: t.skipped,
            over_quota: t.over_quota,
            files: t.files,
            bytes: t.bytes,
        })
    }

    /// The file a version call is about, and whether the caller may change it (owners and
    /// editors see versions; readers do not).
    async fn versioned_file(
        &self,
        who: &Identity,
        r: Option<&Ref>,
    ) -> Result<(StoreSpace, StoreNode, String, bool), Status> {
        let (space, node, path, perm) = self.resolve_perm(who, r).await?;
        perm.need(grants::READ)?;
        if node.is_dir() {
            return Err(ErrorKind::Conflict.status("a collection has no versions"));
        }
        Ok((space, node, path, may_change(&perm)))
    }

    /// A version the caller may see.
    async fn visible_version(
        &self,
        who: &Identity,
        r: Option<&Ref>,
        key: &str,
    ) -> Result<(StoreSpace, StoreNode, String, StoreVersion), Status> {
        let (space, node, path, editor) = self.versioned_file(who, r).await?;
        check_key(key)?;
        if !editor {
            return Err(ErrorKind::NotFound.status("no such version"));
        }
        let version = self.store.version(&node.id, key).await.map_err(status)?;
        Ok((space, node, path, version))
    }

    pub(crate) async fn list_versions_of(
        &self,
        who: &Identity,
        r: &ListVersionsRequest,
    ) -> Result<ListVersionsResponse, Status> {
        let (space, node, path, editor) = self.versioned_file(who, r.r#ref.as_ref()).await?;
        let versions = if editor {
            self.store.versions(&node.id).await.map_err(status)?
        } else {
            Vec::new()
        };
        Ok(ListVersionsResponse {
            node: Some(self.node_message(&node, path, &space.owner)),
            versions: versions
                .into_iter()
                .map(|v| version_message(self.name, &space.id, v))
                .collect(),
        })
    }

    pub(crate) async fn restore_version_of(
        &self,
        who: &Identity,
        r: &RestoreVersionRequest,
    ) -> Result<Node, Status> {
        let (space, node, path, version) =
            self.visible_version(who, r.r#ref.as_ref(), &r.key).await?;
        self.check_locks(who, &space.id, &path, Touch::Resource, &r.lock_tokens)
            .await?;
        let restored = self
            .store
            .restore_version(&node.id, &version.key)
            .await
            .map_err(status)?;
        self.changed(&space.id);
        let event = Event::new("version.restored", &who.id)
            .with("space_id", arca_proto::ids::space_id(self.name, &space.id))
            .with(
                "node_id",
                arca_proto::ids::node_id(self.name, &space.id, &node.id),
            )
            .with("version_key", version.key.clone())
            .with("path", path.clone());
        self.events.send(event);
        Ok(self.node_message(&restored, path, &space.owner))
    }

    pub(crate) async fn delete_version_of(
        &self,
        who: &Identity,
        r: &DeleteVersionRequest,
    ) -> Result<(), Status> {
        let (_, node, _, version) = self.visible_version(who, r.r#ref.as_ref(), &r.key).await?;
        self.store
            .delete_version(&node.id, &version.key)
            .await
            .map_err(status)
    }

    pub(crate) async fn set_version_label_of(
        &self,
        who: &Identity,
        r: &SetVersionLabelRequest,
    ) -> Result<Version, Status> {
        if r.label.len() > 1024 || r.label.chars().any(char::is_control) {
            return Err(ErrorKind::InvalidArgument
                .status("a version label is at most 1024 bytes of printable text"));
        }
        let (space, node, _, version) = self.visible_version(who, r.r#ref.as_ref(), &r.key).await?;
        self.store
            .set_version_label(&node.id, &version.key, &r.label)
            .await
            .map_err(status)?;
        let version = self
            .store
            .version(&node.id, &version.key)
            .await
            .map_err(status)?;
        Ok(version_message(self.name, &space.id, version))
    }

    /// A download grant for an earlier content of a file.
    pub(crate) async fn version_download(
        &self,
        who: &Identity,
        r: Option<&Ref>,
        key: &str,
    ) -> Result<Transfer, Status> {
        let (space, node, path, version) = self.visible_version(who, r, key).await?;
        let grant = DownloadGrant {
            node: node.id.clone(),
            path: path.clone(),
            owner: space.owner.clone(),
            blob: version.blob_id().to_owned(),
            size: version.size,
        };
        let mut message = self.node_message(&node, path, &space.owner);
        message.size = version.size;
        message.mtime_ns = convert::nanos(version.mtime);
        message.etag = version.etag.clone();
        let (sha1, md5, adler32) = version
            .checksums
            .map(|c| (c.sha1, c.md5, c.adler32))
            .unwrap_or_default();
        message.sha1 = sha1;
        message.md5 = md5;
        message.adler32 = adler32;
        Ok(Transfer {
            provider: self.name.to_owned(),
            token: self.signer.sign(DOWNLOAD_PURPOSE, &grant, TRANSFER_TTL),
            node: Some(message),
            expires: 0,
            ..Default::default()
        })
    }
}

/// Owners and those a share lets change the file.
fn may_change(perm: &Perm) -> bool {
    perm.owner || perm.here & grants::UPDATE != 0
}

fn version_message(provider: &str, space_id: &str, v: StoreVersion) -> Version {
    let (sha1, md5, adler32) = v
        .checksums
        .map(|c| (c.sha1, c.md5, c.adler32))
        .unwrap_or_default();
    Version {
        key: v.key,
        node_id: arca_proto::ids::node_id(provider, space_id, &v.node_id),
        size: v.size,
        mtime_ns: convert::nanos(v.mtime),
        etag: v.etag,
        sha1,
        md5,
        adler32,
        created_ns: convert::nanos(v.created),
        label: v.label,
    }
}
