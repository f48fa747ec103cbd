//! The `Sharing` gRPC API: what shares mean. Records live in storage-system (`ShareRecords`);
//! users and groups come from its `Users` API; every answer is computed from them afresh.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arca_proto::ErrorKind;
use arca_proto::principals;
use arca_proto::v1::share_records_client::ShareRecordsClient;
use arca_proto::v1::sharing_server::Sharing;
use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::*;
use arca_runtime::events::{Event, Outbox};
use arca_runtime::{Identity, TokenSigner, caller};
use arca_transport::Channel;
use tonic::{Request, Response, Status};

use crate::perms::{self, PermError};
use arca_runtime::Throttle;
use arca_runtime::password::Decoy;
use arca_transport::context::IDENTITY as IDENTITY_METADATA;

/// How long the identity a public link hands out lasts: one request's worth, with room for a
/// slow upload to start. Revocation does not wait for it: providers ask `Grants` on every call.
const LINK_IDENTITY_TTL: Duration = Duration::from_secs(60);
/// How long an `access` token stands for a link's password: a working day of browsing a
/// protected folder without typing it again. A changed password ends it sooner.
const LINK_ACCESS_TTL: Duration = Duration::from_secs(8 * 3600);
/// The purposes of an access token and of the password tag inside it.
const LINK_ACCESS_PURPOSE: &str = "link-access";
const LINK_PASSWORD_PURPOSE: &str = "link-password";
/// The sharing service's own identity token, minted per call.
const SERVICE_TTL: Duration = Duration::from_secs(60);

use arca_proto::sharing::share_state::{ACCEPTED, DECLINED, PENDING};

/// What an access token vouches for: the password of this link, as it is now.
#[derive(serde::Serialize, serde::Deserialize)]
struct LinkAccess {
    share: String,
    /// A tag of the password's hash: the hash itself stays in storage-system.
    pw: String,
}

pub(crate) struct SharingApi {
    pub(crate) system: Channel,
    pub(crate) signer: TokenSigner,
    pub(crate) auto_accept: bool,
    pub(crate) events: Outbox,
    pub(crate) throttle: Throttle,
    /// Hashes a wrong-link-token request checks against, so a missing link costs what a
    /// wrong password does (no timing oracle for valid tokens with passwords).
    pub(crate) decoy: Decoy,
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn expired(r: &ShareRecord) -> bool {
    r.expires != 0 && r.expires <= now_secs()
}

fn perm_status(e: PermError) -> Status {
    match e {
        PermError::Escalation => ErrorKind::PermissionDenied.status(e.to_string()),
        _ => ErrorKind::InvalidArgument.status(e.to_string()),
    }
}

/// argon2id, as storage-system hashes user passwords (see [`arca_runtime::password`]).
async fn hash_password(password: String) -> Result<String, Status> {
    Ok(arca_runtime::password::hash(password).await?)
}

/// Who a record is for, from one caller's point of view.
struct Viewer<'a> {
    who: &'a Identity,
    groups: Vec<String>,
}

impl Viewer<'_> {
    fn manages(&self, r: &ShareRecord) -> bool {
        r.creator_id == self.who.id || r.owner_id == self.who.id
    }

    fn receives(&self, r: &ShareRecord) -> bool {
        match r.share_type {
            perms::USER => r.grantee_id == self.who.id,
            perms::GROUP => self.groups.contains(&r.grantee_id),
            _ => false,
        }
    }
}

impl SharingApi {
    /// A request carrying the sharing service's own identity instead of the end user's.
    fn as_service<T>(&self, message: T) -> Request<T> {
        let identity = Identity {
            id: principals::SHARING_SERVICE.to_owned(),
            username: "sharing".to_owned(),
            display_name: String::new(),
            groups: Vec::new(),
            admin: false,
            space_admin: false,
            login: None,
        };
        let mut req = Request::new(message);
        let token = self.signer.sign_identity(&identity, SERVICE_TTL);
        if let Ok(v) = token.parse() {
            req.metadata_mut().insert(IDENTITY_METADATA, v);
        }
        req
    }

    fn records(&self) -> ShareRecordsClient<Channel> {
        ShareRecordsClient::new(self.system.clone())
    }

    fn users(&self) -> UsersClient<Channel> {
        UsersClient::new(self.system.clone())
    }

    async fn record(&self, id: &str) -> Result<ShareRecord, Status> {
        Ok(self
            .records()
            .get_record(self.as_service(GetRecordRequest {
                id: id.to_owned(),
                token: String::new(),
            }))
            .await?
            .into_inner())
    }

    async fn list(&self, filter: ListRecordsRequest) -> Result<Vec<ShareRecord>, Status> {
        Ok(self
            .records()
            .list_records(self.as_service(filter))
            .await?
            .into_inner()
            .records)
    }

    /// The caller's groups, asked afresh: a member who left a group loses its shares at once,
    /// whatever groups their (longer-lived) identity token still lists.
    async fn viewer<'a>(&self, who: &'a Identity) -> Result<Viewer<'a>, Status> {
        let groups = if principals::is_user(&who.id) {
            // Asked as the caller (it may read its own groups); the identity travels with the
            // call.
            self.users()
                .list_user_groups(ListUserGroupsRequest {
                    user_id: who.id.clone(),
                })
                .await?
                .into_inner()
                .groups
                .into_iter()
                .map(|g| g.id)
                .collect()
        } else {
            Vec::new()
        };
        Ok(Viewer { who, groups })
    }

    fn publish(&self, kind: &str, actor: &str, r: &ShareRecord) {
        let event = Event::new(kind, actor)
            .with("share_id", r.id.clone())
            .with("share_type", r.share_type.to_string())
            .with("node_id", r.node_id.clone())
            .with("space_id", r.space_id.clone())
            .with("grantee_id", r.grantee_id.clone());
        self.events.send(event);
    }

    /// A record as the API shows it, with the names of the people and groups involved.
    async fn share(&self, r: ShareRecord, names: &mut HashMap<String, (String, String)>) -> Share {
        let share = Self::bare(r);
        self.named(share, names).await
    }

    /// A record as the API shows it, without names.
    fn bare(r: ShareRecord) -> Share {
        Share {
            id: r.id,
            share_type: r.share_type,
            space_id: r.space_id,
            node_id: r.node_id,
            is_dir: r.is_dir,
            target: r.target,
            owner_id: r.owner_id,
            creator_id: r.creator_id,
            grantee_id: r.grantee_id,
            permissions: r.permissions,
            token: r.token,
            has_password: !r.password_hash.is_empty(),
            expires: r.expires,
            name: r.name,
            created: r.created,
            ..Default::default()
        }
    }

    /// Fills in the names (one lookup per distinct user or group, remembered in `names`).
    async fn named(
        &self,
        mut share: Share,
        names: &mut HashMap<String, (String, String)>,
    ) -> Share {
        (share.owner_name, share.owner_display_name) = self.user_name(&share.owner_id, names).await;
        (share.creator_name, share.creator_display_name) =
            self.user_name(&share.creator_id, names).await;
        match share.share_type {
            perms::USER => {
                (share.grantee_name, share.grantee_display_name) =
                    self.user_name(&share.grantee_id, names).await;
            }
            perms::GROUP => {
                (share.grantee_name, share.grantee_display_name) =
                    self.group_name(&share.grantee_id, names).await;
            }
            _ => {}
        }
        share
    }

    /// (user name, display name); a user that is gone shows as its id.
    async fn user_name(
        &self,
        id: &str,
        names: &mut HashMap<String, (String, String)>,
    ) -> (String, String) {
        if let Some(n) = names.get(id) {
            return n.clone();
        }
        let found = self
            .users()
            .get_user(self.as_service(GetUserRequest {
                id: id.to_owned(),
                username: String::new(),
            }))
            .await
            .map(|u| {
                let u = u.into_inner();
                (u.username, u.display_name)
            })
            .unwrap_or_else(|_| (id.to_owned(), id.to_owned()));
        names.insert(id.to_owned(), found.clone());
        found
    }

    async fn group_name(
        &self,
        id: &str,
        names: &mut HashMap<String, (String, String)>,
    ) -> (String, String) {
        let key = format!("group:{id}");
        if let Some(n) = names.get(&key) {
            return n.clone();
        }
        let found = self
            .users()
            .get_group(self.as_service(GetGroupRequest {
                id: id.to_owned(),
                display_name: String::new(),
            }))
            .await
            .map(|g| {
                let g = g.into_inner();
                (g.display_name.clone(), g.display_name)
            })
            .unwrap_or_else(|_| (id.to_owned(), id.to_owned()));
        names.insert(key, found.clone());
        found
    }

    /// The shares made with the caller (or its groups), each with the caller's state and,
    /// for accepted ones, a mount name unique among them (`Docs`, `Docs (2)`, …).
    /// The share `id` as `viewer` receives it (with their state and mount name), if they do.
    async fn received_share(&self, viewer: &Viewer<'_>, id: &str) -> Result<Option<Share>, Status> {
        let found = self
            .received(viewer)
            .await?
            .into_iter()
            .find(|(x, _, _)| x.id == id);
        let Some((r, state, mount)) = found else {
            return Ok(None);
        };
        let mut share = self.share(r, &mut HashMap::new()).await;
        share.state = state;
        share.mount = mount;
        Ok(Some(share))
    }

    async fn received(
        &self,
        viewer: &Viewer<'_>,
    ) -> Result<Vec<(ShareRecord, i32, String)>, Status> {
        let mut grantees = vec![viewer.who.id.clone()];
        grantees.extend(viewer.groups.iter().cloned());
        let records = self
            .list(ListRecordsRequest {
                grantee_ids: grantees,
                share_types: vec![perms::USER, perms::GROUP],
                ..Default::default()
            })
            .await?;
        let states: HashMap<String, i32> = self
            .records()
            .list_recipient_states(self.as_service(ListRecipientStatesRequest {
                user_id: viewer.who.id.clone(),
            }))
            .await?
            .into_inner()
            .states
            .into_iter()
            .map(|s| (s.share_id, s.state))
            .collect();
        let default = if self.auto_accept { ACCEPTED } else { PENDING };
        let mut taken: Vec<String> = Vec::new();
        let mut mounted: HashMap<String, String> = HashMap::new();
        let mut out = Vec::new();
        // Records come oldest first, so a share keeps its name when newer ones arrive.
        for r in records {
            // Shares of one's own files (through a group, say) are not received.
            if r.owner_id == viewer.who.id || expired(&r) {
                continue;
            }
            let state = states.get(&r.id).copied().unwrap_or(default);
            let mount = if state != ACCEPTED {
                String::new()
            } else if let Some(m) = mounted.get(&r.node_id) {
                // The same node shared twice (to the user and a group) mounts once.
                m.clone()
            } else {
                let mut name = r.target.clone();
                let mut n = 2;
                while taken.iter().any(|t| t == &name) {
                    name = format!("{} ({n})", r.target);
                    n += 1;
                }
                taken.push(name.clone());
                mounted.insert(r.node_id.clone(), name.clone());
                name
            };
            out.push((r, state, mount));
        }
        Ok(out)
    }

    /// Whether `token` is an unexpired access token for link `r` with its current password
    /// (the tag of the password's hash, which a new password's salt changes).
    fn access_valid(&self, token: &str, r: &ShareRecord) -> bool {
        self.signer
            .verify::<LinkAccess>(LINK_ACCESS_PURPOSE, token)
            .is_ok_and(|a| {
                a.share == r.id && a.pw == self.signer.tag(LINK_PASSWORD_PURPOSE, &r.password_hash)
            })
    }

    fn link_identity(&self, share_id: &str, name: &str) -> String {
        let identity = Identity {
            id: format!("{}{share_id}", principals::PUBLIC_LINK_PREFIX),
            username: "public".to_owned(),
            display_name: name.to_owned(),
            groups: Vec::new(),
            admin: false,
            space_admin: false,
            login: None,
        };
        self.signer.sign_identity(&identity, LINK_IDENTITY_TTL)
    }
}

fn users_only(who: &Identity) -> Result<(), Status> {
    if principals::is_user(&who.id) {
        Ok(())
    } else {
        Err(ErrorKind::PermissionDenied.status("only users manage shares"))
    }
}

#[tonic::async_trait]
impl Sharing for SharingApi {
    async fn create_share(
        &self,
        req: Request<CreateShareRequest>,
    ) -> Result<Response<Share>, Status> {
        let who = caller(&req)?.clone();
        users_only(&who)?;
        let r = req.into_inner();
        let node = r
            .node
            .ok_or_else(|| ErrorKind::InvalidArgument.status("the node to share is missing"))?;
        if node.parent_id.is_empty() || node.path == "/" {
            return Err(ErrorKind::InvalidArgument.status("a space root cannot be shared"));
        }
        // The owner holds everything; anyone else what their shares give (the gateway stat'ed
        // the node as the caller, so these are the caller's).
        let held = if node.owner_id == who.id {
            perms::ALL
        } else {
            node.shared_permissions
        };
        if held & perms::SHARE == 0 {
            return Err(ErrorKind::PermissionDenied.status("you may not share this"));
        }
        let asked = if r.permissions == 0 {
            perms::READ
        } else {
            r.permissions
        };
        let permissions =
            perms::validate(r.share_type, node.is_dir, asked, held).map_err(perm_status)?;
        if r.expires != 0 && r.expires <= now_secs() {
            return Err(ErrorKind::InvalidArgument.status("the expiry date is in the past"));
        }
        let mut record = ShareRecord {
            share_type: r.share_type,
            space_id: node.space_id.clone(),
            node_id: node.id.clone(),
            is_dir: node.is_dir,
            target: node.name.clone(),
            owner_id: node.owner_id.clone(),
            creator_id: who.id.clone(),
            permissions,
            expires: r.expires,
            name: r.name.clone(),
            created: now_secs(),
            ..Default::default()
        };
        match r.share_type {
            perms::USER => {
                let user = self
                    .users()
                    .get_user(self.as_service(GetUserRequest {
                        id: String::new(),
                        username: r.share_with.clone(),
                    }))
                    .await
                    .map_err(|s| match ErrorKind::of(&s) {
                        ErrorKind::NotFound => ErrorKind::NotFound.status("no such user"),
                        _ => s,
                    })?
                    .into_inner();
                if user.id == who.id || user.id == node.owner_id {
                    return Err(ErrorKind::InvalidArgument
                        .status("a share cannot be made with its owner or yourself"));
                }
                record.grantee_id = user.id;
            }
            perms::GROUP => {
                let group = self
                    .users()
                    .get_group(self.as_service(GetGroupRequest {
                        id: String::new(),
                        display_name: r.share_with.clone(),
                    }))
                    .await
                    .map_err(|s| match ErrorKind::of(&s) {
                        ErrorKind::NotFound => ErrorKind::NotFound.status("no such group"),
                        _ => s,
                    })?
                    .into_inner();
                record.grantee_id = group.id;
            }
            perms::LINK => {
                // 128 bits from the OS-seeded generator: not guessable, not enumerable.
                record.token = arca_config::generate_secret(16);
                if !r.password.is_empty() {
                    record.password_hash = hash_password(r.password.clone()).await?;
                }
            }
            other => {
                return Err(ErrorKind::InvalidArgument
                    .status(format!("share type {other} is not supported")));
            }
        }
        if record.share_type != perms::LINK {
            let existing = self
                .list(ListRecordsRequest {
                    node_id: record.node_id.clone(),
                    grantee_ids: vec![record.grantee_id.clone()],
                    share_types: vec![record.share_type],
                    ..Default::default()
                })
                .await?;
            if !existing.is_empty() {
                return Err(ErrorKind::AlreadyExists.status("already shared with them"));
            }
        }
        let created = self
            .records()
            .create_record(self.as_service(record))
            .await?
            .into_inner();
        self.publish("share.created", &who.id, &created);
        let share = self.share(created, &mut HashMap::new()).await;
        Ok(Response::new(share))
    }

    async fn get_share(&self, req: Request<GetShareRequest>) -> Result<Response<Share>, Status> {
        let who = caller(&req)?.clone();
        users_only(&who)?;
        let not_found = || ErrorKind::NotFound.status("no such share");
        let r = self
            .record(&req.get_ref().id)
            .await
            .map_err(|_| not_found())?;
        let viewer = self.viewer(&who).await?;
        if viewer.manages(&r) {
            return Ok(Response::new(self.share(r, &mut HashMap::new()).await));
        }
        if !viewer.receives(&r) {
            return Err(not_found());
        }
        let share = self.received_share(&viewer, &r.id).await?;
        Ok(Response::new(share.ok_or_else(not_found)?))
    }

    async fn update_share(
        &self,
        req: Request<UpdateShareRequest>,
    ) -> Result<Response<Share>, Status> {
        let who = caller(&req)?.clone();
        users_only(&who)?;
        let u = req.into_inner();
        let not_found = || ErrorKind::NotFound.status("no such share");
        let mut r = self.record(&u.id).await.map_err(|_| not_found())?;
        let viewer = self.viewer(&who).await?;
        if !viewer.manages(&r) {
            return Err(if viewer.receives(&r) {
                ErrorKind::PermissionDenied.status("only the share's creator or owner changes it")
            } else {
                not_found()
            });
        }
        if let Some(p) = u.permissions {
            // The owner holds everything; a resharer may only narrow what it handed out
            // (what it holds itself is not known here, and never more than it gave).
            let held = if r.owner_id == who.id {
                perms::ALL
            } else {
                r.permissions
            };
            r.permissions =
                perms::validate(r.share_type, r.is_dir, p, held).map_err(perm_status)?;
        }
        if let Some(password) = u.password {
            if r.share_type != perms::LINK {
                return Err(ErrorKind::InvalidArgument.status("only links have passwords"));
            }
            r.password_hash = if password.is_empty() {
                String::new()
            } else {
                hash_password(password).await?
            };
        }
        if let Some(expires) = u.expires {
            if expires != 0 && expires <= now_secs() {
                return Err(ErrorKind::InvalidArgument.status("the expiry date is in the past"));
            }
            r.expires = expires;
        }
        if let Some(name) = u.name {
            r.name = name;
        }
        let updated = self
            .records()
            .update_record(self.as_service(r))
            .await?
            .into_inner();
        self.publish("share.updated", &who.id, &updated);
        Ok(Response::new(
            self.share(updated, &mut HashMap::new()).await,
        ))
    }

    async fn delete_share(
        &self,
        req: Request<DeleteShareRequest>,
    ) -> Result<Response<DeleteShareResponse>, Status> {
        let who = caller(&req)?.clone();
        users_only(&who)?;
        let not_found = || ErrorKind::NotFound.status("no such share");
        let r = self
            .record(&req.get_ref().id)
            .await
            .map_err(|_| not_found())?;
        let viewer = self.viewer(&who).await?;
        if viewer.manages(&r) {
            self.records()
                .delete_record(self.as_service(DeleteRecordRequest { id: r.id.clone() }))
                .await?;
            self.publish("share.removed", &who.id, &r);
        } else if viewer.receives(&r) {
            // A recipient "deleting" a share removes it from their view only (ownCloud's
            // unshare-from-self): it is declined.
            self.records()
                .set_recipient_state(self.as_service(RecipientState {
                    share_id: r.id.clone(),
                    user_id: who.id.clone(),
                    state: DECLINED,
                }))
                .await?;
            self.publish("share.declined", &who.id, &r);
        } else {
            return Err(not_found());
        }
        Ok(Response::new(DeleteShareResponse {}))
    }

    async fn list_shares(
        &self,
        req: Request<ListSharesRequest>,
    ) -> Result<Response<ListSharesResponse>, Status> {
        let who = caller(&req)?.clone();
        users_only(&who)?;
        let q = req.into_inner();
        let mut names = HashMap::new();
        let mut shares = Vec::new();
        if q.shared_with_me {
            let viewer = self.viewer(&who).await?;
            for (r, state, mount) in self.received(&viewer).await? {
                if (q.state >= 0 && state != q.state)
                    || (!q.node_id.is_empty() && r.node_id != q.node_id)
                {
                    continue;
                }
                let mut share = if q.skip_names {
                    Self::bare(r)
                } else {
                    self.share(r, &mut names).await
                };
                share.state = state;
                share.mount = mount;
                shares.push(share);
            }
        } else {
            let mut filter = ListRecordsRequest {
                node_id: q.node_id,
                ..Default::default()
            };
            if q.reshares {
                filter.creator_or_owner = who.id.clone();
            } else {
                filter.creator_id = who.id.clone();
            }
            for r in self.list(filter).await? {
                shares.push(if q.skip_names {
                    Self::bare(r)
                } else {
                    self.share(r, &mut names).await
                });
            }
        }
        Ok(Response::new(ListSharesResponse { shares }))
    }

    async fn set_share_state(
        &self,
        req: Request<SetShareStateRequest>,
    ) -> Result<Response<Share>, Status> {
        let who = caller(&req)?.clone();
        users_only(&who)?;
        let q = req.into_inner();
        if q.state != ACCEPTED && q.state != DECLINED {
            return Err(
                ErrorKind::InvalidArgument.status("a share is accepted (0) or declined (2)")
            );
        }
        let not_found = || ErrorKind::NotFound.status("no such share");
        let r = self.record(&q.id).await.map_err(|_| not_found())?;
        let viewer = self.viewer(&who).await?;
        if !viewer.receives(&r) || r.owner_id == who.id {
            return Err(not_found());
        }
        self.records()
            .set_recipient_state(self.as_service(RecipientState {
                share_id: r.id.clone(),
                user_id: who.id.clone(),
                state: q.state,
            }))
            .await?;
        let kind = if q.state == ACCEPTED {
            "share.accepted"
        } else {
            "share.declined"
        };
        self.publish(kind, &who.id, &r);
        let share = self.received_share(&viewer, &q.id).await?;
        Ok(Response::new(share.ok_or_else(not_found)?))
    }

    async fn grants(
        &self,
        req: Request<GrantsRequest>,
    ) -> Result<Response<GrantsResponse>, Status> {
        let who = caller(&req)?.clone();
        let space_id = req.into_inner().space_id;
        let grant = |r: &ShareRecord| Grant {
            node_id: r.node_id.clone(),
            permissions: r.permissions,
            share_id: r.id.clone(),
        };
        if let Some(share_id) = principals::public_link_share(&who.id) {
            let grants = match self.record(share_id).await {
                Ok(r) if r.share_type == perms::LINK && !expired(&r) && r.space_id == space_id => {
                    vec![grant(&r)]
                }
                Ok(_) => Vec::new(),
                Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => Vec::new(),
                Err(s) => return Err(s),
            };
            return Ok(Response::new(GrantsResponse { grants }));
        }
        if !principals::is_user(&who.id) {
            return Ok(Response::new(GrantsResponse::default()));
        }
        let viewer = self.viewer(&who).await?;
        let mut grantees = vec![who.id.clone()];
        grantees.extend(viewer.groups);
        // Grants hold whatever the recipient's accepted/declined state: declining hides a
        // share from the recipient's `Shares/`, it does not change what the owner granted.
        let grants = self
            .list(ListRecordsRequest {
                space_id,
                grantee_ids: grantees,
                share_types: vec![perms::USER, perms::GROUP],
                ..Default::default()
            })
            .await?
            .iter()
            .filter(|r| !expired(r))
            .map(grant)
            .collect();
        Ok(Response::new(GrantsResponse { grants }))
    }

    async fn open_link(
        &self,
        req: Request<OpenLinkRequest>,
    ) -> Result<Response<OpenLinkResponse>, Status> {
        let q = req.into_inner();
        let mut keys = vec![format!("link:{}", q.token)];
        if !q.client.is_empty() {
            keys.push(format!("addr:{}", q.client));
        }
        // Guessing is what is throttled: passwords and tokens. A known link without a password
        // opens whatever the address did before, so one client's bad guesses elsewhere do not
        // lock it out of links it was given.
        let throttled = || {
            self.throttle
                .blocked(&keys)
                .map(|wait| arca_proto::throttled("too many wrong guesses", wait))
        };
        let not_found = || ErrorKind::NotFound.status("no such link");
        let found = if q.token.is_empty() {
            Err(not_found())
        } else {
            self.records()
                .get_record(self.as_service(GetRecordRequest {
                    id: String::new(),
                    token: q.token.clone(),
                }))
                .await
                .map(Response::into_inner)
        };
        let r = match found {
            Ok(r) if r.share_type == perms::LINK => r,
            Ok(_) => return Err(not_found()),
            Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => {
                if let Some(refused) = throttled() {
                    return Err(refused);
                }
                // As long as a wrong password would take, and counted like one.
                if !q.password.is_empty() {
                    self.decoy.verify(q.password, None).await;
                }
                self.throttle.failed(&keys);
                return Err(not_found());
            }
            Err(s) => return Err(s),
        };
        if expired(&r) {
            return Err(ErrorKind::NotFound.status("the link has expired"));
        }
        let mut access = String::new();
        if !r.password_hash.is_empty() {
            if let Some(refused) = throttled() {
                return Err(refused);
            }
            if !q.access.is_empty() {
                if !self.access_valid(&q.access, &r) {
                    self.throttle.failed(&keys);
                    return Err(ErrorKind::Unauthenticated
                        .status("the link's access has ended: give the password again"));
                }
            } else if q.password.is_empty() {
                return Err(ErrorKind::Unauthenticated.status("the link needs a password"));
            } else if !arca_runtime::password::verify(q.password, r.password_hash.clone()).await {
                self.throttle.failed(&keys);
                return Err(ErrorKind::Unauthenticated.status("wrong password"));
            } else {
                access = self.signer.sign(
                    LINK_ACCESS_PURPOSE,
                    &LinkAccess {
                        share: r.id.clone(),
                        pw: self.signer.tag(LINK_PASSWORD_PURPOSE, &r.password_hash),
                    },
                    LINK_ACCESS_TTL,
                );
            }
        }
        let identity = self.link_identity(&r.id, &r.name);
        self.publish(
            "link.accessed",
            &format!("{}{}", principals::PUBLIC_LINK_PREFIX, r.id),
            &r,
        );
        let share = self.share(r, &mut HashMap::new()).await;
        Ok(Response::new(OpenLinkResponse {
            share: Some(share),
            identity,
            access,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_metadata_is_the_transport_header() {
        assert_eq!(
            IDENTITY_METADATA,
            arca_transport::context::IDENTITY_HEADER.as_str()
        );
    }

    #[test]
    fn expiry_is_inclusive_of_now() {
        let mut r = ShareRecord::default();
        assert!(!expired(&r), "0 never expires");
        r.expires = now_secs() + 60;
        assert!(!expired(&r));
        r.expires = now_secs();
        assert!(expired(&r));
    }
}
