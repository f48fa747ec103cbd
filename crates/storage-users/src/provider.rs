//! The `Storage` gRPC API over the store: who may touch which space, and path resolution.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use arca_proto::ErrorKind;
use arca_proto::ids;
use arca_proto::principals;
use arca_proto::v1::storage_server::Storage;
use arca_proto::v1::*;
use arca_runtime::{Identity, TokenSigner, caller};
use arca_store_files::{Node as StoreNode, PropPatch, Space as StoreSpace, Store};
use serde::{Deserialize, Serialize};
use tonic::{Request, Response, Status};

use crate::convert;
use crate::grants::{self, Access, Perm};

/// Transfer grants are checked when the transfer starts; an upload may then run for as long
/// as it needs.
pub(crate) const TRANSFER_TTL: Duration = Duration::from_secs(3600);
pub(crate) const UPLOAD_PURPOSE: &str = "upload";
pub(crate) const DOWNLOAD_PURPOSE: &str = "download";

/// What an upload token grants: one write of `name` in directory `parent`, on these terms.
#[derive(Serialize, Deserialize)]
pub(crate) struct UploadGrant {
    pub(crate) parent: String,
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) owner: String,
    #[serde(default)]
    pub(crate) if_match: String,
    #[serde(default)]
    pub(crate) if_none_match_any: bool,
    #[serde(default)]
    pub(crate) mtime_ns: i64,
    #[serde(default)]
    pub(crate) length: i64,
    #[serde(default)]
    pub(crate) checksum: String,
    /// Set when the early checks of the put were made as the grant was minted (see
    /// `arca_store_files::Precheck`): the space, and the bytes the body may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) space: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) allowance: Option<u64>,
    /// An assembly grant (`folders`): the upload folder that becomes the file, and its owner.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) folder: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) folder_user: String,
}

/// What a download token grants: reading one node.
#[derive(Serialize, Deserialize)]
pub(crate) struct DownloadGrant {
    pub(crate) node: String,
    pub(crate) path: String,
    pub(crate) owner: String,
    /// The blob and its size when the grant was minted: the data path reads them without a
    /// metadata query, and the bytes match the etag the caller was given. Empty in grants
    /// minted before this field existed: those look the node up.
    #[serde(default)]
    pub(crate) blob: String,
    #[serde(default)]
    pub(crate) size: u64,
}

#[derive(Clone)]
pub(crate) struct Provider {
    pub(crate) name: &'static str,
    pub(crate) store: Store,
    pub(crate) signer: TokenSigner,
    /// Resumable (TUS) uploads in progress.
    pub(crate) uploads: crate::uploads::Uploads,
    /// What callers who do not own a space may do in it (asks the sharing service).
    pub(crate) grants: grants::Grants,
    /// Personal spaces, created at first use within `storage-users.provisioning`.
    pub(crate) homes: crate::homes::Homes,
    /// Where `file.trashed`, `file.restored`, `file.purged`, `version.restored` and
    /// `trash.burst` go.
    pub(crate) events: arca_runtime::events::Outbox,
    /// The spaces whose trees changed, for the search crawler's hints (every write marks).
    pub(crate) changes: crate::hints::Changes,
    /// When removals make a burst (`storage-users.trash.burst`).
    pub(crate) bursts: arca_store_files::BurstRules,
    /// The deepest and longest path taken (`storage-users.max_depth`, `max_path_bytes`).
    pub(crate) paths: arca_config::PathLimits,
}

/// `Node.shared_permissions` for the caller: 0 for the space's owner, who may do everything;
/// a project space's other managers may too, and say so in bits (the sharing service reads
/// them to allow sharing), as do members and share recipients.
fn shared_bits(perm: &Perm, space: &StoreSpace, who: &Identity) -> u32 {
    if perm.owner && space.owner != who.id {
        grants::ALL
    } else {
        perm.shared()
    }
}

/// Path segments of a `Ref.path`, within `limits` (`storage-users.max_depth` and
/// `max_path_bytes`: past them one line names the limit, 400); the frontend already refused
/// `.`/`..` and friends, this is the provider's own line of defence.
fn segments(path: &str, limits: arca_config::PathLimits) -> Result<Vec<&str>, Status> {
    if path.len() > limits.max_bytes as usize {
        return Err(ErrorKind::InvalidArgument.status(format!(
            "the path is longer than {} bytes (storage-users.max_path_bytes)",
            limits.max_bytes
        )));
    }
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segs.len() > limits.max_depth as usize {
        return Err(ErrorKind::InvalidArgument.status(format!(
            "the path is deeper than {} segments (storage-users.max_depth)",
            limits.max_depth
        )));
    }
    if segs.iter().any(|s| *s == "." || *s == "..") {
        return Err(ErrorKind::InvalidArgument.status("path segments . and .. are not allowed"));
    }
    Ok(segs)
}

fn join(segs: &[&str]) -> String {
    let mut p = String::from("/");
    p.push_str(&segs.join("/"));
    p
}

fn child_path(parent: &str, name: &str) -> String {
    if parent.ends_with('/') {
        format!("{parent}{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Which locks an operation must satisfy, relative to its target path.
#[derive(Clone, Copy)]
pub(crate) enum Touch {
    /// The resource's content or properties: locks covering it.
    Resource,
    /// A member is created or removed: also the parent's locks (membership is the parent's
    /// state, RFC 4918 §7.5).
    Member,
    /// A whole subtree goes away or is replaced: also every lock inside it.
    Subtree,
}

fn parent_path(path: &str) -> String {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/".to_owned(),
        Some((parent, _)) => parent.to_owned(),
    }
}

fn lock_token() -> String {
    let v: u128 = rand::random();
    let h = format!("{v:032x}");
    format!(
        "opaquelocktoken:{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub(crate) fn active_lock(l: &arca_store_files::Lock) -> ActiveLock {
    ActiveLock {
        token: l.token.clone(),
        root_path: l.root_path.clone(),
        exclusive: l.exclusive,
        deep: l.deep,
        owner: l.owner_xml.clone(),
        timeout_secs: if l.expires_ms == 0 {
            0
        } else {
            u64::try_from((l.expires_ms - now_ms()).max(1000) / 1000).unwrap_or(1)
        },
    }
}

impl Provider {
    /// Refuses the operation (423) unless every lock it touches was submitted by its holder.
    pub(crate) async fn check_locks(
        &self,
        who: &Identity,
        space_id: &str,
        path: &str,
        touch: Touch,
        submitted: &[String],
    ) -> Result<(), Status> {
        let locks = self
            .store
            .space_locks(space_id)
            .await
            .map_err(|e| e.status())?;
        if locks.is_empty() {
            return Ok(());
        }
        let parent = parent_path(path);
        for l in &locks {
            let applies = l.covers(path)
                || (matches!(touch, Touch::Member | Touch::Subtree)
                    && path != "/"
                    && l.covers(&parent))
                || (matches!(touch, Touch::Subtree) && l.within(path));
            if applies && !(l.holder == who.id && submitted.contains(&l.token)) {
                return Err(ErrorKind::Locked.status(format!("locked by {}", l.root_path)));
            }
        }
        Ok(())
    }

    async fn locks_covering(&self, space_id: &str, path: &str) -> Result<Vec<ActiveLock>, Status> {
        Ok(self
            .store
            .space_locks(space_id)
            .await
            .map_err(|e| e.status())?
            .iter()
            .filter(|l| l.covers(path))
            .map(active_lock)
            .collect())
    }

    /// The space a reference names, if the caller may use it. Anything the caller may not
    /// know exists is "not found", never "forbidden".
    async fn space(&self, who: &Identity, space_id: &str) -> Result<StoreSpace, Status> {
        Ok(self.space_access(who, space_id).await?.0)
    }

    /// [`space`](Self::space) and what the caller may do in it.
    pub(crate) async fn space_access(
        &self,
        who: &Identity,
        space_id: &str,
    ) -> Result<(StoreSpace, Access), Status> {
        if space_id.is_empty() {
            // Only users have a home; a public link's identity names its space.
            if !principals::is_user(&who.id) {
                return Err(ErrorKind::NotFound.status("no such space"));
            }
            let space = self.homes.get(&who.id).await?;
            return Ok((space, Access::Owner));
        }
        let not_found = || ErrorKind::NotFound.status("no such space");
        let (provider, id) = ids::parse_space_id(space_id).ok_or_else(not_found)?;
        if provider != self.name {
            return Err(not_found());
        }
        let space = self.store.space(id).await.map_err(|e| e.status())?;
        let access = self.check_access(who, &space).await?;
        Ok((space, access))
    }

    /// See [`Provider::access_to`] (crate::members): owners and managers, members by role,
    /// anyone else by the shares in the space (asked on every call, never cached).
    async fn check_access(&self, who: &Identity, space: &StoreSpace) -> Result<Access, Status> {
        self.access_to(who, space).await
    }

    /// (space, node, path inside the space) for a reference the caller may read.
    async fn resolve(
        &self,
        who: &Identity,
        r: Option<&Ref>,
    ) -> Result<(StoreSpace, StoreNode, String), Status> {
        let (space, node, path, perm) = self.resolve_perm(who, r).await?;
        perm.need(grants::READ)?;
        Ok((space, node, path))
    }

    /// [`resolve`](Self::resolve) without the read check, with the caller's permissions there.
    pub(crate) async fn resolve_perm(
        &self,
        who: &Identity,
        r: Option<&Ref>,
    ) -> Result<(StoreSpace, StoreNode, String, Perm), Status> {
        let (space, node, path, perm, _) = self.resolve_fresh(who, r).await?;
        Ok((space, node, path, perm))
    }

    /// [`resolve_perm`](Self::resolve_perm), and whether the node is the root of a home this
    /// very call created (a first login): nothing is stored under or about it yet.
    async fn resolve_fresh(
        &self,
        who: &Identity,
        r: Option<&Ref>,
    ) -> Result<(StoreSpace, StoreNode, String, Perm, bool), Status> {
        let r = r.ok_or_else(|| ErrorKind::InvalidArgument.status("missing reference"))?;
        let not_found = || ErrorKind::NotFound.status("no such resource");
        if !r.node_id.is_empty() {
            let (provider, space_id, node_id) =
                ids::parse_node_id(&r.node_id).ok_or_else(not_found)?;
            if provider != self.name {
                return Err(not_found());
            }
            let node = self.store.stat(node_id).await.map_err(|e| e.status())?;
            if node.space_id != space_id {
                return Err(not_found());
            }
            let space = self.store.space(space_id).await.map_err(|e| e.status())?;
            let access = self.check_access(who, &space).await?;
            let path = self.store.path_of(node_id).await.map_err(|e| e.status())?;
            let perm = access.at(&path).ok_or_else(not_found)?;
            return Ok((space, node, path, perm, false));
        }
        if r.space_id.is_empty() && principals::is_user(&who.id) {
            // The caller's own home, where a client's plain paths point: its owner may do
            // everything there, so space and node come in one round trip. A miss takes the
            // general way below, which creates a missing home and tells what is missing.
            let path = join(&segments(&r.path, self.paths)?);
            if let Some((space, node)) = self
                .store
                .resolve_personal(&who.id, &path)
                .await
                .map_err(|e| e.status())?
            {
                return Ok((space, node, path, grants::Perm::OWNER, false));
            }
            if path == "/" {
                // The root is missing only where the home is (a first login): that lookup
                // was the one `Homes::get` makes, so create at once, root included.
                let (space, root, fresh) = self.homes.create(&who.id).await?;
                return Ok((space, root, path, grants::Perm::OWNER, fresh));
            }
        }
        let (space, access) = self.space_access(who, &r.space_id).await?;
        let segs = segments(&r.path, self.paths)?;
        let path = join(&segs);
        // Coverage first: outside a share, what exists and what does not look the same.
        let perm = access.at(&path).ok_or_else(not_found)?;
        let node = self
            .store
            .resolve(&space.id, &path)
            .await
            .map_err(|e| e.status())?;
        Ok((space, node, path, perm, false))
    }

    /// (space, parent directory, name, full path) for a reference to something to create or
    /// replace, which the caller may write.
    async fn resolve_parent(
        &self,
        who: &Identity,
        r: Option<&Ref>,
    ) -> Result<(StoreSpace, StoreNode, String, String), Status> {
        let (space, parent, name, path, perm) = self.resolve_parent_perm(who, r).await?;
        if perm.here & (grants::CREATE | grants::UPDATE) == 0 {
            perm.need(grants::CREATE)?;
        }
        Ok((space, parent, name, path))
    }

    /// [`resolve_parent`](Self::resolve_parent) with the caller's permissions at the path
    /// (not at the parent), unchecked.
    async fn resolve_parent_perm(
        &self,
        who: &Identity,
        r: Option<&Ref>,
    ) -> Result<(StoreSpace, StoreNode, String, String, Perm), Status> {
        let r = r.ok_or_else(|| ErrorKind::InvalidArgument.status("missing reference"))?;
        if !r.node_id.is_empty() {
            return Err(ErrorKind::InvalidArgument.status("a new resource is named by path"));
        }
        let (space, access) = self.space_access(who, &r.space_id).await?;
        let segs = segments(&r.path, self.paths)?;
        let Some((name, parents)) = segs.split_last() else {
            return Err(ErrorKind::PermissionDenied.status("the space root cannot be replaced"));
        };
        let path = join(&segs);
        // Before the parent is looked for: a 409 must not tell a recipient what exists
        // outside its share.
        let perm = access
            .at(&path)
            .ok_or_else(|| ErrorKind::NotFound.status("no such resource"))?;
        let parent_path = join(parents);
        let parent = match self.store.resolve(&space.id, &parent_path).await {
            Ok(p) => p,
            // A missing parent is a conflict (RFC 4918 §9.3.1, §9.7.1), not "not found".
            Err(arca_store_files::StoreError::NotFound) => {
                return Err(ErrorKind::Conflict.status("the parent collection does not exist"));
            }
            Err(e) => return Err(e.status()),
        };
        if !parent.is_dir() {
            return Err(ErrorKind::Conflict.status("the parent is not a collection"));
        }
        Ok((space, parent, (*name).to_owned(), path, perm))
    }

    /// The caller's own home, where a client's plain paths point, for something to create or
    /// replace: (space, parent, name, path, (existing child, whether the space has any lock))
    /// in one round trip; its owner may do everything there. `None` when the reference is not
    /// a plain path in the caller's home, or the fast lookup misses (no home yet, no parent
    /// directory, the root): the general way then creates or explains.
    #[allow(clippy::type_complexity)]
    async fn personal_entry(
        &self,
        who: &Identity,
        r: Option<&Ref>,
    ) -> Result<
        Option<(
            StoreSpace,
            StoreNode,
            String,
            String,
            (Option<StoreNode>, bool),
        )>,
        Status,
    > {
        let Some(r) = r else { return Ok(None) };
        if !r.node_id.is_empty() || !r.space_id.is_empty() || !principals::is_user(&who.id) {
            return Ok(None);
        }
        let segs = segments(&r.path, self.paths)?;
        let Some(name) = segs.last() else {
            return Ok(None);
        };
        // A refused name takes the general way, which refuses it in its own order.
        if arca_store_files::validate_name(name).is_err() {
            return Ok(None);
        }
        let path = join(&segs);
        let found = self
            .store
            .resolve_personal_entry(&who.id, &path)
            .await
            .map_err(|e| e.status())?;
        Ok(found.map(|(space, parent, child, locks)| {
            (space, parent, (*name).to_owned(), path, (child, locks))
        }))
    }

    /// The destination of a copy or move: create where it lands, and delete too when it
    /// replaces something.
    async fn writable_destination(
        &self,
        who: &Identity,
        r: Option<&Ref>,
    ) -> Result<(StoreSpace, StoreNode, String, String), Status> {
        let (space, parent, name, path, perm) = self.resolve_parent_perm(who, r).await?;
        if !perm.owner {
            let replaces = self.store.child(&parent.id, &name).await.is_ok();
            perm.need(if replaces {
                grants::CREATE | grants::DELETE
            } else {
                grants::CREATE
            })?;
        }
        Ok((space, parent, name, path))
    }

    async fn to_proto(
        &self,
        space: &StoreSpace,
        node: &StoreNode,
        path: String,
        with_props: bool,
    ) -> Result<Node, Status> {
        let props = if with_props {
            self.store.props(&node.id).await.map_err(|e| e.status())?
        } else {
            Vec::new()
        };
        Ok(convert::node(
            self.name,
            node.clone(),
            path,
            &space.owner,
            props,
        ))
    }

    /// Anything in `space` (the store's id) may have changed: hinted to the search crawler
    /// (see `crate::hints`), which walks the space.
    pub(crate) fn changed(&self, space: &str) {
        self.changes.mark(space);
    }

    /// The node `node` of `space` (store ids) was written, made or removed: hinted to the
    /// search crawler, which looks at that node alone.
    pub(crate) fn changed_node(&self, space: &str, node: &str) {
        self.changes.mark_node(space, node);
    }

    pub(crate) fn node_message(&self, node: &StoreNode, path: String, owner: &str) -> Node {
        convert::node(self.name, node.clone(), path, owner, Vec::new())
    }
}

#[tonic::async_trait]
impl Storage for Provider {
    async fn get_home_space(
        &self,
        req: Request<GetHomeSpaceRequest>,
    ) -> Result<Response<Space>, Status> {
        let who = caller(&req)?;
        if !principals::is_user(&who.id) {
            return Err(ErrorKind::NotFound.status("no home space"));
        }
        let space = self.homes.get(&who.id).await?;
        Ok(Response::new(convert::space(self.name, &space)))
    }

    async fn get_space(&self, req: Request<GetSpaceRequest>) -> Result<Response<Space>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let space = match self.space(who, &r.space_id).await {
            Ok(space) => space,
            // A disabled space: its managers and admins still see it (to restore or purge).
            Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => {
                self.managed(who, &r.space_id, "see a disabled space")
                    .await
                    .map_err(|_| s)?
                    .0
            }
            Err(s) => return Err(s),
        };
        Ok(Response::new(
            self.space_message(who, &space, r.with_usage).await?,
        ))
    }

    async fn list_spaces(
        &self,
        req: Request<ListSpacesRequest>,
    ) -> Result<Response<ListSpacesResponse>, Status> {
        let who = caller(&req)?;
        let crawler = who.id == principals::SEARCH_SERVICE;
        if !principals::is_user(&who.id) && !crawler {
            return Ok(Response::new(ListSpacesResponse::default()));
        }
        // Creating the personal space here too: a client listing drives must find its own.
        if !crawler {
            self.homes.get(&who.id).await?;
        }
        let r = req.get_ref();
        let spaces = self.visible_spaces(who, r.all).await?;
        let mut out = Vec::with_capacity(spaces.len());
        for s in &spaces {
            out.push(self.space_message(who, s, r.with_usage).await?);
        }
        Ok(Response::new(ListSpacesResponse { spaces: out }))
    }

    async fn create_space(
        &self,
        req: Request<CreateSpaceRequest>,
    ) -> Result<Response<Space>, Status> {
        let who = caller(&req)?;
        if !who.manages_spaces() {
            return Err(ErrorKind::PermissionDenied
                .status("only admins and space admins create project spaces"));
        }
        let r = req.get_ref();
        let name = space_name(&r.name)?;
        check_description(&r.description)?;
        let quota = (r.quota > 0).then_some(r.quota);
        let space = self
            .store
            .create_project_space(name, &who.id, quota)
            .await
            .map_err(|e| e.status())?;
        // The alias is fixed at creation, as in oCIS: links made with it survive a rename.
        let alias = format!("project/{}", alias_slug(name));
        let details = arca_store_files::SpaceUpdate {
            name: None,
            description: Some(&r.description),
            alias: Some(&alias),
        };
        if let Err(e) = self.store.update_space(&space.id, &details).await {
            // Not left half-made: a space the caller was told failed must not linger.
            if let Err(d) = self.store.delete_space(&space.id).await {
                tracing::warn!(error = %d, space = %space.id, "removing a half-created space");
            }
            return Err(e.status());
        }
        Ok(Response::new(self.space_message(who, &space, true).await?))
    }

    async fn update_space(
        &self,
        req: Request<UpdateSpaceRequest>,
    ) -> Result<Response<Space>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let (space, _) = self.managed(who, &r.space_id, "change the space").await?;
        // A project space's quota is the space admins' too; a personal one only admins'.
        let sets_quotas =
            who.admin || (who.space_admin && space.kind == arca_store_files::SpaceKind::Project);
        if r.quota.is_some() && !sets_quotas {
            return Err(ErrorKind::PermissionDenied
                .status("only admins and space admins change a space's quota"));
        }
        let name = r.name.as_deref().map(space_name).transpose()?;
        if let Some(d) = &r.description {
            check_description(d)?;
        }
        if space.kind == arca_store_files::SpaceKind::Personal
            && (name.is_some() || r.description.is_some())
        {
            return Err(ErrorKind::PermissionDenied
                .status("a personal space takes its owner's name; only its quota changes"));
        }
        let update = arca_store_files::SpaceUpdate {
            name,
            description: r.description.as_deref(),
            alias: None,
        };
        self.store
            .update_space(&space.id, &update)
            .await
            .map_err(|e| e.status())?;
        if let Some(quota) = r.quota {
            self.store
                .set_quota(&space.id, (quota > 0).then_some(quota))
                .await
                .map_err(|e| e.status())?;
        }
        if let Some(disabled) = r.disabled {
            if space.kind != arca_store_files::SpaceKind::Project {
                return Err(ErrorKind::PermissionDenied
                    .status("a personal space is deleted with its user, not on its own"));
            }
            self.store
                .set_disabled(&space.id, disabled)
                .await
                .map_err(|e| e.status())?;
            tracing::info!(space = %space.id, disabled, by = %who.id, "project space disabled or restored");
        }
        let space = self.store.space(&space.id).await.map_err(|e| e.status())?;
        Ok(Response::new(self.space_message(who, &space, true).await?))
    }

    async fn delete_space(
        &self,
        req: Request<DeleteSpaceRequest>,
    ) -> Result<Response<DeleteSpaceResponse>, Status> {
        let who = caller(&req)?;
        let (space, _) = self
            .managed(who, &req.get_ref().space_id, "delete the space")
            .await?;
        if space.kind == arca_store_files::SpaceKind::Personal {
            return Err(ErrorKind::PermissionDenied
                .status("a personal space is deleted with its user, not on its own"));
        }
        if space.disabled.is_none() {
            return Err(ErrorKind::InvalidArgument
                .status("a space in use is not deleted: disable it first"));
        }
        // The tree goes at once; its blobs become orphans that the collector removes.
        self.store
            .delete_space(&space.id)
            .await
            .map_err(|e| e.status())?;
        Ok(Response::new(DeleteSpaceResponse {}))
    }

    async fn list_space_members(
        &self,
        req: Request<ListSpaceMembersRequest>,
    ) -> Result<Response<ListSpaceMembersResponse>, Status> {
        let who = caller(&req)?;
        let members = self.members(who, &req.get_ref().space_id).await?;
        Ok(Response::new(ListSpaceMembersResponse { members }))
    }

    async fn set_space_member(
        &self,
        req: Request<SetSpaceMemberRequest>,
    ) -> Result<Response<SpaceMember>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(self.set_member(who, req.get_ref()).await?))
    }

    async fn remove_space_member(
        &self,
        req: Request<RemoveSpaceMemberRequest>,
    ) -> Result<Response<RemoveSpaceMemberResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        self.remove_member(who, &r.space_id, &r.kind, &r.id).await?;
        Ok(Response::new(RemoveSpaceMemberResponse {}))
    }

    async fn stat(&self, req: Request<StatRequest>) -> Result<Response<Node>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let (space, node, path, perm, fresh) = self.resolve_fresh(who, r.r#ref.as_ref()).await?;
        // A shared node itself may be stat'ed with any grant on it (an upload-only link
        // must find where it uploads to); everything else needs read.
        if !perm.at_root {
            perm.need(grants::READ)?;
        }
        let mut message = self
            .to_proto(&space, &node, path.clone(), r.with_props && !fresh)
            .await?;
        message.shared_permissions = shared_bits(&perm, &space, who);
        if r.with_locks {
            message.locks = self.locks_covering(&space.id, &path).await?;
        }
        Ok(Response::new(message))
    }

    async fn list(&self, req: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let (space, node, path, perm, fresh) = self.resolve_fresh(who, r.r#ref.as_ref()).await?;
        perm.need(grants::READ)?;
        let mut this = self
            .to_proto(&space, &node, path.clone(), r.with_props && !fresh)
            .await?;
        this.shared_permissions = shared_bits(&perm, &space, who);
        let locks = if r.with_locks {
            self.store
                .space_locks(&space.id)
                .await
                .map_err(|e| e.status())?
        } else {
            Vec::new()
        };
        this.locks = locks
            .iter()
            .filter(|l| l.covers(&path))
            .map(active_lock)
            .collect();
        if !node.is_dir() {
            return Ok(Response::new(ListResponse {
                node: Some(this),
                children: Vec::new(),
            }));
        }
        let children = self
            .store
            // Only checksums of the fields a display listing leaves out reach the message.
            .list_dir(&node, !r.without_checksums)
            .await
            .map_err(|e| e.status())?;
        let mut props = if r.with_props {
            self.store
                .children_props(&node.id)
                .await
                .map_err(|e| e.status())?
        } else {
            Vec::new()
        };
        // Each child's dead properties, found by id in one pass over them all.
        let mut by_child: HashMap<String, Vec<_>> = HashMap::new();
        for (id, prop) in props.drain(..) {
            by_child.entry(id).or_default().push(prop);
        }
        let shared = shared_bits(&perm.child(), &space, who);
        let without = convert::Without {
            ids: r.without_ids,
            checksums: r.without_checksums,
            owner: r.without_owner,
        };
        let children = children
            .iter()
            .map(|c| {
                let c = c.clone();
                let mine = by_child.remove(&c.id).unwrap_or_default();
                let child = child_path(&path, &c.name);
                let locks: Vec<_> = locks
                    .iter()
                    .filter(|l| l.covers(&child))
                    .map(active_lock)
                    .collect();
                let mut m = convert::node_without(self.name, c, child, &space.owner, mine, without);
                m.shared_permissions = shared;
                m.locks = locks;
                m
            })
            .collect();
        Ok(Response::new(ListResponse {
            node: Some(this),
            children,
        }))
    }

    async fn create_dir(&self, req: Request<CreateDirRequest>) -> Result<Response<Node>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let (space, parent, name, path, perm) =
            self.resolve_parent_perm(who, r.r#ref.as_ref()).await?;
        perm.need(grants::CREATE)?;
        self.check_locks(who, &space.id, &path, Touch::Member, &r.lock_tokens)
            .await?;
        let node = self
            .store
            .mkdir(&parent.id, &name)
            .await
            .map_err(|e| e.status())?;
        self.changed_node(&space.id, &node.id);
        Ok(Response::new(self.node_message(&node, path, &space.owner)))
    }

    async fn delete(
        &self,
        req: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let (space, node, path, perm) = self.resolve_perm(who, r.r#ref.as_ref()).await?;
        perm.need(grants::READ | grants::DELETE)?;
        if node.is_root() {
            return Err(ErrorKind::PermissionDenied.status("a space root cannot be deleted"));
        }
        if !r.if_match.is_empty() && r.if_match.trim_matches('"') != node.etag {
            return Err(ErrorKind::PreconditionFailed.status("etag does not match"));
        }
        self.check_locks(who, &space.id, &path, Touch::Subtree, &r.lock_tokens)
            .await?;
        // Into the space's trash, whoever removes it: a client's mass delete can be undone.
        let client = arca_transport::context::CallContext::current_client();
        let remover = arca_store_files::Remover {
            actor: &who.id,
            client: &client,
        };
        let (item, burst) = self
            .store
            .trash_noting(&node.id, remover, &self.bursts)
            .await
            .map_err(|e| e.status())?;
        self.changed_node(&space.id, &node.id);
        self.trashed(who, &space, &item, &path, remover, burst);
        self.store
            .remove_locks_within(&space.id, &path)
            .await
            .map_err(|e| e.status())?;
        Ok(Response::new(DeleteResponse {}))
    }

    async fn r#move(&self, req: Request<MoveRequest>) -> Result<Response<MoveResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let (space, node, src_path, perm) = self.resolve_perm(who, r.source.as_ref()).await?;
        // Moving takes the source away: a recipient needs delete there (never on the shared
        // node itself), and create where it lands.
        perm.need(grants::READ | grants::DELETE)?;
        let (dspace, parent, name, path) = self
            .writable_destination(who, r.destination.as_ref())
            .await?;
        if dspace.id != space.id {
            return Err(ErrorKind::Conflict.status("moving between spaces is not supported"));
        }
        self.check_locks(who, &space.id, &src_path, Touch::Subtree, &r.lock_tokens)
            .await?;
        self.check_locks(who, &space.id, &path, Touch::Subtree, &r.lock_tokens)
            .await?;
        let replaced = self.store.child(&parent.id, &name).await.ok();
        let moved = self
            .store
            .move_node(&node.id, &parent.id, &name, r.overwrite)
            .await
            .map_err(|e| e.status())?;
        // The crawler looks at the node moved (and walks it when a folder) and at the one it
        // replaced (gone from its path), not at the whole space. A file moved over a file may
        // live on under the replaced one's id: the source's id is named too (then gone).
        self.changed_node(&space.id, &node.id);
        self.changed_node(&space.id, &moved.id);
        if let Some(replaced) = &replaced {
            self.changed_node(&space.id, &replaced.id);
        }
        let replaced = replaced.is_some();
        // Locks stay with URLs, not resources (RFC 4918 §7.7): the source's go away.
        self.store
            .remove_locks_within(&space.id, &src_path)
            .await
            .map_err(|e| e.status())?;
        Ok(Response::new(MoveResponse {
            node: Some(self.node_message(&moved, path, &space.owner)),
            replaced,
        }))
    }

    async fn copy(&self, req: Request<CopyRequest>) -> Result<Response<CopyResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let (_, node, _) = self.resolve(who, r.source.as_ref()).await?;
        let (dspace, parent, name, path) = self
            .writable_destination(who, r.destination.as_ref())
            .await?;
        self.check_locks(who, &dspace.id, &path, Touch::Subtree, &r.lock_tokens)
            .await?;
        let replaced = self.store.child(&parent.id, &name).await.ok();
        let copied = self
            .store
            .copy_node(&node.id, &parent.id, &name, r.overwrite, r.recursive)
            .await
            .map_err(|e| e.status())?;
        // As for a move: the copy (walked when a folder) and what it replaced.
        self.changed_node(&dspace.id, &copied.id);
        if let Some(replaced) = &replaced {
            self.changed_node(&dspace.id, &replaced.id);
        }
        let replaced = replaced.is_some();
        Ok(Response::new(CopyResponse {
            node: Some(self.node_message(&copied, path, &dspace.owner)),
            replaced,
        }))
    }

    async fn set_props(
        &self,
        req: Request<SetPropsRequest>,
    ) -> Result<Response<SetPropsResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let (space, node, path, perm) = self.resolve_perm(who, r.r#ref.as_ref()).await?;
        perm.need(grants::READ | grants::UPDATE)?;
        self.check_locks(who, &space.id, &path, Touch::Resource, &r.lock_tokens)
            .await?;
        let patch: Vec<PropPatch> = r
            .changes
            .iter()
            .filter_map(|c| {
                let p = c.property.as_ref()?;
                Some(if c.remove {
                    PropPatch::Remove {
                        namespace: p.namespace.clone(),
                        name: p.name.clone(),
                    }
                } else {
                    PropPatch::Set {
                        namespace: p.namespace.clone(),
                        name: p.name.clone(),
                        value: p.value.clone(),
                    }
                })
            })
            .collect();
        self.store
            .patch_props(&node.id, &patch)
            .await
            .map_err(|e| e.status())?;
        Ok(Response::new(SetPropsResponse {}))
    }

    async fn lock(&self, req: Request<LockRequest>) -> Result<Response<LockResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let expires_ms = if r.timeout_secs == 0 {
            0
        } else {
            now_ms().saturating_add(
                i64::try_from(r.timeout_secs)
                    .unwrap_or(i64::MAX / 2)
                    .saturating_mul(1000),
            )
        };
        if !r.refresh_token.is_empty() {
            let (space, _, path) = self.resolve(who, r.r#ref.as_ref()).await?;
            let current = self
                .store
                .space_locks(&space.id)
                .await
                .map_err(|e| e.status())?;
            let Some(lock) = current
                .iter()
                .find(|l| l.token == r.refresh_token && l.covers(&path) && l.holder == who.id)
            else {
                return Err(ErrorKind::PreconditionFailed.status("no such lock on this resource"));
            };
            let refreshed = self
                .store
                .refresh_lock(&lock.token, expires_ms)
                .await
                .map_err(|e| e.status())?;
            return Ok(Response::new(LockResponse {
                lock: Some(active_lock(&refreshed)),
                created: false,
            }));
        }
        let (space, parent, name, path) = match self.resolve_parent(who, r.r#ref.as_ref()).await {
            Ok(v) => v,
            // Locking the space root itself.
            Err(e) if ErrorKind::of(&e) == ErrorKind::PermissionDenied => {
                let (space, node, path) = self.resolve(who, r.r#ref.as_ref()).await?;
                (space, node, String::new(), path)
            }
            Err(e) => return Err(e),
        };
        let exists = name.is_empty() || self.store.child(&parent.id, &name).await.is_ok();
        // Lock-on-lock conflicts are `create_lock`'s to judge (shared locks coexist); creating
        // the empty resource also adds a member to the parent, which its locks protect.
        if !exists {
            self.check_locks(who, &space.id, &path, Touch::Member, &r.lock_tokens)
                .await?;
        }
        let lock = arca_store_files::Lock {
            token: lock_token(),
            space_id: space.id.clone(),
            root_path: path.clone(),
            exclusive: r.exclusive,
            deep: r.deep,
            owner_xml: r.owner.clone(),
            holder: who.id.clone(),
            expires_ms,
        };
        self.store
            .create_lock(&lock)
            .await
            .map_err(|e| e.status())?;
        let mut created = false;
        if !exists {
            // RFC 4918 §7.3: locking an unmapped URL creates an empty resource.
            let empty = futures::stream::empty::<Result<bytes::Bytes, std::io::Error>>();
            let put = self
                .store
                .put_file(
                    &parent.id,
                    &name,
                    empty,
                    arca_store_files::PutOptions::default(),
                )
                .await;
            if let Err(e) = put {
                let _ = self.store.remove_lock(&lock.token).await;
                return Err(e.status());
            }
            created = true;
        }
        Ok(Response::new(LockResponse {
            lock: Some(active_lock(&lock)),
            created,
        }))
    }

    async fn unlock(
        &self,
        req: Request<UnlockRequest>,
    ) -> Result<Response<UnlockResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let (space, _, path) = self.resolve(who, r.r#ref.as_ref()).await?;
        let locks = self
            .store
            .space_locks(&space.id)
            .await
            .map_err(|e| e.status())?;
        let Some(lock) = locks.iter().find(|l| l.token == r.token && l.covers(&path)) else {
            return Err(
                ErrorKind::Conflict.status("the lock token does not match a lock of this resource")
            );
        };
        if lock.holder != who.id {
            return Err(ErrorKind::PermissionDenied.status("the lock belongs to someone else"));
        }
        self.store
            .remove_lock(&lock.token)
            .await
            .map_err(|e| e.status())?;
        Ok(Response::new(UnlockResponse {}))
    }

    async fn get_locks(
        &self,
        req: Request<GetLocksRequest>,
    ) -> Result<Response<GetLocksResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref().r#ref.as_ref();
        let rr = r.ok_or_else(|| ErrorKind::InvalidArgument.status("missing reference"))?;
        let (space, access) = self.space_access(who, &rr.space_id).await?;
        let path = join(&segments(&rr.path, self.paths)?);
        // Outside what the caller may read, nothing exists and nothing is locked.
        if access.at(&path).is_none_or(|p| p.here & grants::READ == 0) {
            return Ok(Response::new(GetLocksResponse::default()));
        }
        let etag = match self.store.resolve(&space.id, &path).await {
            Ok(n) => n.etag,
            Err(
                arca_store_files::StoreError::NotFound
                | arca_store_files::StoreError::NotADirectory,
            ) => String::new(),
            Err(e) => return Err(e.status()),
        };
        Ok(Response::new(GetLocksResponse {
            etag,
            locks: self.locks_covering(&space.id, &path).await?,
        }))
    }

    async fn initiate_upload(
        &self,
        req: Request<InitiateUploadRequest>,
    ) -> Result<Response<Transfer>, Status> {
        let who = caller(&req)?;
        let transfer = match self.prepare_upload(who, req.get_ref()).await? {
            Prepared::Transfer(t) => t,
            Prepared::Grant { grant, existing } => Transfer {
                provider: self.name.to_owned(),
                token: self.signer.sign(UPLOAD_PURPOSE, &grant, TRANSFER_TTL),
                node: existing,
                expires: 0,
                ..Default::default()
            },
        };
        Ok(Response::new(transfer))
    }

    async fn put(&self, req: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        let mut upload = r.upload.clone().unwrap_or_default();
        if upload.resumable || !upload.upload_folder.is_empty() {
            return Err(ErrorKind::InvalidArgument
                .status("a Put carries its body: neither resumable nor an upload folder"));
        }
        if r.body.len() > arca_proto::SMALL_BODY {
            return Err(ErrorKind::InvalidArgument.status(format!(
                "a Put carries at most {} bytes; larger bodies go through InitiateUpload",
                arca_proto::SMALL_BODY
            )));
        }
        let length = r.body.len() as i64;
        if upload.length >= 0 && upload.length != length {
            return Err(crate::data::length_mismatch(upload.length, length));
        }
        upload.length = length;
        let Prepared::Grant { grant, existing } = self.prepare_upload(who, &upload).await? else {
            return Err(ErrorKind::Internal.status("a Put was prepared as a transfer"));
        };
        let expected_checksum = convert::expected_checksum(&grant.checksum)
            .map_err(|e| ErrorKind::InvalidArgument.status(e))?;
        let body = futures::stream::iter([Ok::<_, std::io::Error>(r.body.clone())]);
        let node = crate::data::put_granted(self, grant, expected_checksum, body)
            .await
            .map_err(|e| e.status())?;
        Ok(Response::new(PutResponse {
            node: Some(node),
            replaced: existing.is_some(),
        }))
    }

    async fn create_upload_folder(
        &self,
        req: Request<CreateUploadFolderRequest>,
    ) -> Result<Response<UploadFolder>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(
            self.create_upload_folder(who, req.get_ref()).await?,
        ))
    }

    async fn list_upload_folders(
        &self,
        req: Request<ListUploadFoldersRequest>,
    ) -> Result<Response<ListUploadFoldersResponse>, Status> {
        let who = caller(&req)?;
        let folders = self.list_upload_folders(who, req.get_ref()).await?;
        Ok(Response::new(ListUploadFoldersResponse { folders }))
    }

    async fn delete_upload_folder(
        &self,
        req: Request<DeleteUploadFolderRequest>,
    ) -> Result<Response<DeleteUploadFolderResponse>, Status> {
        let who = caller(&req)?;
        self.delete_upload_folder(who, req.get_ref()).await?;
        Ok(Response::new(DeleteUploadFolderResponse {}))
    }

    async fn initiate_chunk(
        &self,
        req: Request<InitiateChunkRequest>,
    ) -> Result<Response<Transfer>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(
            self.initiate_chunk(who, req.get_ref()).await?,
        ))
    }

    async fn initiate_download(
        &self,
        req: Request<InitiateDownloadRequest>,
    ) -> Result<Response<Transfer>, Status> {
        let who = caller(&req)?;
        let r = req.get_ref();
        if !r.version_key.is_empty() {
            let transfer = self
                .version_download(who, r.r#ref.as_ref(), &r.version_key)
                .await?;
            return Ok(Response::new(transfer));
        }
        let (space, node, path) = self.resolve(who, r.r#ref.as_ref()).await?;
        if node.is_dir() {
            return Err(ErrorKind::Conflict.status("a collection has no content to download"));
        }
        let blob = node.blob_id().unwrap_or_default().to_owned();
        // A small file's bytes come from the same database as its node: in the answer, with
        // no token to sign and no data-path request to follow.
        if r.small_body
            && let Some(body) = self.store.small_body(&blob).await.map_err(|e| e.status())?
        {
            return Ok(Response::new(Transfer {
                provider: self.name.to_owned(),
                node: Some(self.node_message(&node, path, &space.owner)),
                body,
                has_body: true,
                ..Default::default()
            }));
        }
        let grant = DownloadGrant {
            node: node.id.clone(),
            path: path.clone(),
            owner: space.owner.clone(),
            blob,
            size: node.size,
        };
        Ok(Response::new(Transfer {
            provider: self.name.to_owned(),
            token: self.signer.sign(DOWNLOAD_PURPOSE, &grant, TRANSFER_TTL),
            node: Some(self.node_message(&node, path, &space.owner)),
            expires: 0,
            ..Default::default()
        }))
    }

    async fn list_trash(
        &self,
        req: Request<ListTrashRequest>,
    ) -> Result<Response<ListTrashResponse>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(self.list_trash_of(who, req.get_ref()).await?))
    }

    async fn restore_trash(
        &self,
        req: Request<RestoreTrashRequest>,
    ) -> Result<Response<RestoreTrashResponse>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(
            self.restore_trash_of(who, req.get_ref()).await?,
        ))
    }

    async fn purge_trash(
        &self,
        req: Request<PurgeTrashRequest>,
    ) -> Result<Response<PurgeTrashResponse>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(
            self.purge_trash_of(who, req.get_ref()).await?,
        ))
    }

    async fn restore_all(
        &self,
        req: Request<RestoreAllRequest>,
    ) -> Result<Response<RestoreAllResponse>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(
            self.restore_all_of(who, req.get_ref()).await?,
        ))
    }

    async fn list_bursts(
        &self,
        req: Request<ListBurstsRequest>,
    ) -> Result<Response<ListBurstsResponse>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(
            self.list_bursts_of(who, req.get_ref()).await?,
        ))
    }

    async fn list_versions(
        &self,
        req: Request<ListVersionsRequest>,
    ) -> Result<Response<ListVersionsResponse>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(
            self.list_versions_of(who, req.get_ref()).await?,
        ))
    }

    async fn restore_version(
        &self,
        req: Request<RestoreVersionRequest>,
    ) -> Result<Response<Node>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(
            self.restore_version_of(who, req.get_ref()).await?,
        ))
    }

    async fn delete_version(
        &self,
        req: Request<DeleteVersionRequest>,
    ) -> Result<Response<DeleteVersionResponse>, Status> {
        let who = caller(&req)?;
        self.delete_version_of(who, req.get_ref()).await?;
        Ok(Response::new(DeleteVersionResponse {}))
    }

    async fn set_version_label(
        &self,
        req: Request<SetVersionLabelRequest>,
    ) -> Result<Response<Version>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(
            self.set_version_label_of(who, req.get_ref()).await?,
        ))
    }
}

/// Unix nanoseconds to a time; 0 means "now".
pub(crate) fn mtime(ns: i64) -> Option<std::time::SystemTime> {
    (ns > 0).then(|| UNIX_EPOCH + Duration::from_nanos(ns as u64))
}

/// Space administration (the Graph drives API).
impl Provider {
    /// A space as a message, with the details a drive shows and, `with_usage`, what its trash
    /// and versions hold.
    ///
    /// The usage is a second query that sums every version row of the space, so it is only
    /// counted where a caller asks: the Graph drives API and a PROPFIND naming
    /// `oc:trashbin-size`/`oc:versions-size` ask; the PROPFIND quota read and TUS discovery,
    /// which clients send all the time, do not. CreateSpace and UpdateSpace (rare, admins')
    /// always count, as their answer is a drive.
    async fn space_message(
        &self,
        who: &Identity,
        space: &StoreSpace,
        with_usage: bool,
    ) -> Result<Space, Status> {
        let role = self.role_in(who, space).await?;
        let details = self
            .store
            .space_details(&space.id)
            .await
            .map_err(|e| e.status())?;
        let mut m = convert::space(self.name, space);
        m.description = details.description;
        m.alias = details.alias;
        m.root_mtime_ns = convert::nanos(details.root_mtime);
        m.disabled = space.disabled.is_some();
        m.role = role
            .map(|r| crate::members::wire_role(r).name.to_owned())
            .unwrap_or_default();
        if with_usage {
            let usage = self
                .store
                .space_usage(&space.id)
                .await
                .map_err(|e| e.status())?;
            m.trash_bytes = usage.trash;
            m.trash_items = usage.trash_items;
            m.version_bytes = usage.versions;
            m.version_count = usage.version_count;
        }
        Ok(m)
    }

    /// What ListSpaces shows: with `all` every space (admins; space admins: every project
    /// space and their own), else the caller's own and the project spaces they are a member
    /// of.
    async fn visible_spaces(&self, who: &Identity, all: bool) -> Result<Vec<StoreSpace>, Status> {
        if all && who.space_admin && !who.admin {
            let mut spaces = self.store.list_spaces(None).await.map_err(|e| e.status())?;
            spaces.retain(|s| {
                s.kind == arca_store_files::SpaceKind::Project
                    || (s.kind == arca_store_files::SpaceKind::Personal && s.owner == who.id)
            });
            return Ok(spaces);
        }
        if all {
            // The search service's crawler lists every space to index it (read-only, see
            // `access_to`).
            if !who.admin && who.id != principals::SEARCH_SERVICE {
                return Err(ErrorKind::PermissionDenied.status("only admins list every space"));
            }
            return self.store.list_spaces(None).await.map_err(|e| e.status());
        }
        let mut spaces = self
            .store
            .list_spaces(Some(&who.id))
            .await
            .map_err(|e| e.status())?;
        // A project space its creator left is no longer theirs to list.
        spaces.retain(|s| s.kind == arca_store_files::SpaceKind::Personal);
        spaces.extend(self.member_spaces(who).await?);
        Ok(spaces)
    }
}

/// What oCIS's Graph service refuses in a space name.
const FORBIDDEN_IN_SPACE_NAMES: [char; 10] = ['/', '\\', '.', ':', '?', '*', '"', '>', '<', '|'];

/// Longest space name and description accepted, in characters.
const MAX_SPACE_NAME: usize = 255;
const MAX_DESCRIPTION: usize = 1024;

/// A space name, trimmed: not empty, not too long, no control characters.
fn space_name(name: &str) -> Result<&str, Status> {
    let name = name.trim();
    if name.is_empty() {
        return Err(ErrorKind::InvalidArgument.status("a space needs a name"));
    }
    if name.chars().count() > MAX_SPACE_NAME {
        return Err(ErrorKind::InvalidArgument.status(format!(
            "a space name has at most {MAX_SPACE_NAME} characters"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(ErrorKind::InvalidArgument.status("a space name has no control characters"));
    }
    // The characters oCIS refuses in a space name, refused the same way.
    if let Some(c) = name.chars().find(|c| FORBIDDEN_IN_SPACE_NAMES.contains(c)) {
        return Err(ErrorKind::InvalidArgument.status(format!(
            "a space name may not contain {c:?} (nor any of / \\ . : ? * \" > < |)"
        )));
    }
    Ok(name)
}

fn check_description(d: &str) -> Result<(), Status> {
    if d.chars().count() > MAX_DESCRIPTION {
        return Err(ErrorKind::InvalidArgument.status(format!(
            "a description has at most {MAX_DESCRIPTION} characters"
        )));
    }
    Ok(())
}

/// The name part of a project alias: lowercase, runs of anything but letters and digits
/// become one `-` ("Project Alpha" → "project-alpha", as oCIS forms it).
fn alias_slug(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("space");
    }
    out
}

/// What an upload's checks came to: a transfer the caller is handed as it is (a resumable
/// upload, an upload folder to assemble), or the grant of a plain write.
enum Prepared {
    Transfer(Transfer),
    Grant {
        grant: UploadGrant,
        /// The file now under the name, if any.
        existing: Option<Node>,
    },
}

impl Provider {
    /// The checks of an upload (`InitiateUpload`, `Put`) before any byte moves: the caller's
    /// right to create or replace, locks, preconditions, the quota against the length.
    async fn prepare_upload(
        &self,
        who: &Identity,
        r: &InitiateUploadRequest,
    ) -> Result<Prepared, Status> {
        // The fast path reads the space, the parent and the target in one query: what the
        // put would check before reading the body is checked here on it, and the put skips
        // its own read (`prechecked`).
        let (space, parent, mut name, mut path, perm, mut found, locks_possible, one_read) =
            match self.personal_entry(who, r.r#ref.as_ref()).await? {
                Some((space, parent, name, path, child)) => {
                    let (child, locks) = child;
                    let found = child.ok_or(arca_store_files::StoreError::NotFound);
                    (
                        space,
                        parent,
                        name,
                        path,
                        grants::Perm::OWNER,
                        found,
                        locks,
                        true,
                    )
                }
                None => {
                    let (space, parent, name, path, perm) =
                        self.resolve_parent_perm(who, r.r#ref.as_ref()).await?;
                    arca_store_files::validate_name(&name).map_err(|e| e.status())?;
                    let found = self.store.child(&parent.id, &name).await;
                    (space, parent, name, path, perm, found, true, false)
                }
            };
        // Upload-only: a taken name is neither replaced nor revealed (grants::free_name).
        let blind = grants::blind(&perm);
        if blind && found.is_ok() {
            (name, path) = grants::free_name(&self.store, &parent.id, &path).await?;
            found = Err(arca_store_files::StoreError::NotFound);
        }
        // Replacing is an update, a new file a create (all an upload-only link may do).
        perm.need(if found.is_ok() {
            grants::UPDATE
        } else {
            grants::CREATE
        })?;
        let found = match found {
            Ok(n) if n.is_dir() => {
                return Err(ErrorKind::Conflict.status("a collection exists under this name"));
            }
            Ok(n) => Some(n),
            Err(arca_store_files::StoreError::NotFound) => None,
            Err(e) => return Err(e.status()),
        };
        let existing = found
            .as_ref()
            .map(|n| self.node_message(n, path.clone(), &space.owner));
        let touch = if existing.is_some() {
            Touch::Resource
        } else {
            Touch::Member
        };
        // A space without a single lock row has no lock to satisfy.
        if locks_possible {
            self.check_locks(who, &space.id, &path, touch, &r.lock_tokens)
                .await?;
        }
        // Fail fast on preconditions the commit would refuse anyway, before any byte moves.
        match &existing {
            Some(_) if r.if_none_match_any => {
                return Err(ErrorKind::PreconditionFailed.status("the resource exists"));
            }
            Some(n) if !r.if_match.is_empty() && r.if_match.trim_matches('"') != n.etag => {
                return Err(ErrorKind::PreconditionFailed.status("etag does not match"));
            }
            None if !r.if_match.is_empty() => {
                return Err(ErrorKind::PreconditionFailed.status("the resource does not exist"));
            }
            _ => {}
        }
        if r.resumable {
            let transfer = self
                .initiate_resumable(who, &space, &parent, name, path, existing, r)
                .await?;
            return Ok(Prepared::Transfer(transfer));
        }
        let mut grant = UploadGrant {
            parent: parent.id.clone(),
            name,
            path,
            owner: space.owner.clone(),
            if_match: r.if_match.clone(),
            // A blind upload never replaces what a racing one just created.
            if_none_match_any: r.if_none_match_any || blind,
            mtime_ns: r.mtime_ns,
            length: r.length,
            checksum: r.checksum.clone(),
            space: None,
            allowance: None,
            folder: String::new(),
            folder_user: String::new(),
        };
        if !r.upload_folder.is_empty() {
            // The folder's chunks become the file: the assembly checks the space and the
            // quota itself, against the folder's real size.
            grant.folder = r.upload_folder.clone();
            grant.folder_user = who.id.clone();
            return Ok(Prepared::Transfer(Transfer {
                provider: self.name.to_owned(),
                token: self
                    .signer
                    .sign(crate::folders::ASSEMBLE_PURPOSE, &grant, TRANSFER_TTL),
                node: existing,
                expires: 0,
                ..Default::default()
            }));
        }
        if one_read {
            let opts = arca_store_files::PutOptions {
                if_match: (!r.if_match.is_empty()).then(|| r.if_match.clone()),
                if_none_match_any: r.if_none_match_any,
                content_length: u64::try_from(r.length).ok(),
                ..Default::default()
            };
            let prechecked = arca_store_files::Precheck::of(&space, &parent, found.as_ref(), &opts)
                .map_err(|e| e.status())?;
            grant.space = Some(prechecked.space_id);
            grant.allowance = prechecked.allowance;
        }
        Ok(Prepared::Grant { grant, existing })
    }
}

#[cfg(test)]
mod space_admin_tests {
    use super::*;

    #[test]
    fn aliases_are_slugs() {
        assert_eq!(alias_slug("Project Alpha"), "project-alpha");
        assert_eq!(alias_slug("  Ünïcode -- & Co. "), "ünïcode-co");
        assert_eq!(alias_slug("!!!"), "space");
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(space_name("  Alpha ").ok(), Some("Alpha"));
        assert!(space_name(" ").is_err());
        assert!(space_name("a\tb").is_err(), "no control characters");
        assert!(space_name(&"x".repeat(256)).is_err());
        for bad in [
            "a/b", "a.b", "x:y", "why?", "a*", "\"q\"", "<>", "a|b", "a\\b",
        ] {
            assert!(space_name(bad).is_err(), "{bad}");
        }
        assert_eq!(
            space_name("Team – Q3 (2026)").ok(),
            Some("Team – Q3 (2026)")
        );
    }
}
