//! Who is in a project space, and what that lets them do.
//!
//! A project space's members are users and groups with a role (oCIS's Manager, Space Editor
//! and Space Viewer), kept in this provider's store beside the space. The caller's role is
//! read on every request (one indexed query, the caller's groups come with their identity),
//! so a role change, a removal or a disabled space takes effect on the very next request,
//! open connections included. Managers may do everything in the space, as an owner does in a
//! personal one (trash, versions, sharing, members); editors read, create, change and
//! delete; viewers read. Admins manage every project space (its name, quota, members, its
//! disabling and purging) without being able to read what is in it unless they are members.

use arca_proto::ErrorKind;
use arca_proto::ids;
use arca_proto::principals;
use arca_proto::sharing;
use arca_proto::v1::{SetSpaceMemberRequest, SpaceMember};
use arca_runtime::Identity;
use arca_store_files::{MemberKind, Role, Space as StoreSpace, SpaceKind, StoreError};
use tonic::Status;

use crate::convert;
use crate::grants::{self, Access};
use crate::provider::Provider;

/// The shared vocabulary's role (its name on the wire, its permission bits) of a stored one.
pub(crate) fn wire_role(role: Role) -> sharing::Role {
    match role {
        Role::Viewer => sharing::SPACE_VIEWER,
        Role::Editor => sharing::SPACE_EDITOR,
        Role::Manager => sharing::MANAGER,
    }
}

/// The stored role of a member role named on the wire.
fn stored_role(name: &str) -> Option<Role> {
    let role = sharing::Role::for_space(name)?;
    [Role::Viewer, Role::Editor, Role::Manager]
        .into_iter()
        .find(|r| wire_role(*r) == role)
}

fn not_found() -> Status {
    ErrorKind::NotFound.status("no such space")
}

fn store_status(e: StoreError) -> Status {
    e.status()
}

impl Provider {
    /// The caller's role in `space`: `None` in personal spaces and for non-members.
    pub(crate) async fn role_in(
        &self,
        who: &Identity,
        space: &StoreSpace,
    ) -> Result<Option<Role>, Status> {
        if space.kind != SpaceKind::Project || !principals::is_user(&who.id) {
            return Ok(None);
        }
        self.store
            .member_role(&space.id, &who.id, &who.groups)
            .await
            .map_err(store_status)
    }

    /// What the caller may do in `space`. A personal space's owner and a project space's
    /// managers may do everything without further lookups; editors and viewers what their
    /// role gives, plus what shares inside the space grant them; anyone else only what shares
    /// grant (none: the space does not exist for them). Nobody uses a disabled space.
    pub(crate) async fn access_to(
        &self,
        who: &Identity,
        space: &StoreSpace,
    ) -> Result<Access, Status> {
        if space.kind == SpaceKind::Personal && space.owner == who.id {
            return Ok(Access::Owner);
        }
        if space.disabled.is_some() {
            return Err(not_found());
        }
        // The search service's crawler indexes every space, so it reads all of them; only
        // reads (no write bit): it changes nothing, and what a search returns is checked
        // against the end user's own rights when they ask.
        if who.id == principals::SEARCH_SERVICE {
            return Ok(Access::Shared(vec![("/".to_owned(), sharing::perm::READ)]));
        }
        let role = self.role_in(who, space).await?;
        if role == Some(Role::Manager) {
            return Ok(Access::Owner);
        }
        let shared = self.grants.of(self.name, &space.id).await?;
        if shared.is_empty() && role.is_none() {
            return Err(not_found());
        }
        let mut paths = grants::with_paths(&self.store, shared).await?;
        if let Some(role) = role {
            paths.push(("/".to_owned(), wire_role(role).permissions));
        }
        Ok(Access::Shared(paths))
    }

    /// A project space the caller may manage (its managers, admins and space admins), with
    /// the caller's role. Members who may not manage it get 403; anyone else learns nothing (404).
    pub(crate) async fn managed(
        &self,
        who: &Identity,
        space_id: &str,
        what: &str,
    ) -> Result<(StoreSpace, Option<Role>), Status> {
        let (provider, id) = ids::parse_space_id(space_id).ok_or_else(not_found)?;
        if provider != self.name {
            return Err(not_found());
        }
        let space = self.store.space(id).await.map_err(store_status)?;
        if space.kind == SpaceKind::Personal {
            // Only admins change a personal space (its quota); its owner cannot.
            if who.admin {
                return Ok((space, None));
            }
            if space.owner == who.id {
                return Err(ErrorKind::PermissionDenied.status(format!("only admins {what}")));
            }
            return Err(not_found());
        }
        let role = self.role_in(who, &space).await?;
        match role {
            Some(Role::Manager) => Ok((space, role)),
            _ if who.manages_spaces() => Ok((space, role)),
            // A disabled space is not there for its members.
            Some(_) if space.disabled.is_none() => {
                Err(ErrorKind::PermissionDenied.status(format!("only the space's managers {what}")))
            }
            _ => Err(not_found()),
        }
    }

    /// The members of a project space: every member may see them, and its managers and
    /// admins (a disabled space's too).
    pub(crate) async fn members(
        &self,
        who: &Identity,
        space_id: &str,
    ) -> Result<Vec<SpaceMember>, Status> {
        let (provider, id) = ids::parse_space_id(space_id).ok_or_else(not_found)?;
        if provider != self.name {
            return Err(not_found());
        }
        let space = self.store.space(id).await.map_err(store_status)?;
        if space.kind != SpaceKind::Project {
            return Err(not_found());
        }
        let role = self.role_in(who, &space).await?;
        let sees = who.manages_spaces()
            || role == Some(Role::Manager)
            || (role.is_some() && space.disabled.is_none());
        if !sees {
            return Err(not_found());
        }
        let members = self
            .store
            .space_members(&space.id)
            .await
            .map_err(store_status)?;
        Ok(members.iter().map(member_message).collect())
    }

    /// Adds a member or changes its role.
    pub(crate) async fn set_member(
        &self,
        who: &Identity,
        r: &SetSpaceMemberRequest,
    ) -> Result<SpaceMember, Status> {
        let (space, _) = self.managed(who, &r.space_id, "add members").await?;
        if space.kind != SpaceKind::Project {
            return Err(ErrorKind::InvalidArgument.status("only project spaces have members"));
        }
        let m = r
            .member
            .as_ref()
            .ok_or_else(|| ErrorKind::InvalidArgument.status("no member given"))?;
        let kind = MemberKind::parse(&m.kind)
            .ok_or_else(|| ErrorKind::InvalidArgument.status("a member is a user or a group"))?;
        let role = stored_role(&m.role).ok_or_else(|| {
            ErrorKind::InvalidArgument
                .status("a member's role is manager, space-editor or space-viewer")
        })?;
        if m.id.is_empty() || m.id.len() > 256 {
            return Err(ErrorKind::InvalidArgument.status("a member needs an id"));
        }
        let member = self
            .store
            .set_member(&space.id, kind, &m.id, role)
            .await
            .map_err(store_status)?;
        tracing::info!(space = %space.id, member = %m.id, kind = kind.as_str(), role = wire_role(role).name, by = %who.id, "space member set");
        Ok(member_message(&member))
    }

    /// Removes a member (never the last manager).
    pub(crate) async fn remove_member(
        &self,
        who: &Identity,
        space_id: &str,
        kind: &str,
        id: &str,
    ) -> Result<(), Status> {
        let (space, _) = self.managed(who, space_id, "remove members").await?;
        let kind = MemberKind::parse(kind)
            .ok_or_else(|| ErrorKind::InvalidArgument.status("a member is a user or a group"))?;
        self.store
            .remove_member(&space.id, kind, id)
            .await
            .map_err(|e| match e {
                StoreError::NotFound => ErrorKind::NotFound.status("no such member"),
                e => e.status(),
            })?;
        tracing::info!(space = %space.id, member = %id, kind = kind.as_str(), by = %who.id, "space member removed");
        Ok(())
    }

    /// The project spaces the caller is in: all in use, and the disabled ones they manage.
    pub(crate) async fn member_spaces(&self, who: &Identity) -> Result<Vec<StoreSpace>, Status> {
        let spaces = self
            .store
            .member_spaces(&who.id, &who.groups)
            .await
            .map_err(store_status)?;
        let mut out = Vec::with_capacity(spaces.len());
        for space in spaces {
            if space.disabled.is_none() || self.role_in(who, &space).await? == Some(Role::Manager) {
                out.push(space);
            }
        }
        Ok(out)
    }
}

fn member_message(m: &arca_store_files::Member) -> SpaceMember {
    SpaceMember {
        kind: m.kind.as_str().to_owned(),
        id: m.id.clone(),
        role: wire_role(m.role).name.to_owned(),
        created_ns: convert::nanos(m.created),
    }
}
