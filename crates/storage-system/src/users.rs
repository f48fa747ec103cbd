//! The `Users` gRPC API: the built-in user store (passwords hashed with argon2id), groups,
//! app tokens, and the credential change feed the proxies subscribe to.
//!
//! Every method that changes what a cached login would say (a password, a deletion, an app
//! token revoked, a membership) answers only after the proxies acknowledged the change (see
//! `credentials`), so the caller's next request is judged by the new state.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arca_proto::ErrorKind;
use arca_proto::v1::users_server::Users;
use arca_proto::v1::*;
use arca_runtime::{Identity, Login, TokenSigner, caller};
use arca_store_records::{
    AppToken as StoredToken, Group as StoredGroup, Records, StoreError, User as StoredUser,
};
use serde::Deserialize;
use tonic::{Request, Response, Status};

use crate::apptokens;
use crate::credentials::{EventStream, Feed, WATCH_PURPOSE};

#[derive(Clone)]
pub(crate) struct UsersApi {
    pub(crate) store: Records,
    /// A hash to verify against when the user does not exist, so that a wrong user name costs
    /// the same time as a wrong password and does not reveal which names exist.
    pub(crate) decoy: arca_runtime::password::Decoy,
    pub(crate) feed: Feed,
    pub(crate) signer: TokenSigner,
    /// Wrong current passwords given to change one's own, per user: a session left open
    /// on a shared computer must not become a way to guess the password.
    pub(crate) password_checks: arca_runtime::Throttle,
}

/// The store's one mapping, in words that name what was missing or taken.
fn status_of(what: &str, e: StoreError) -> Status {
    match e {
        StoreError::NotFound => e.kind().status(format!("no such {what}")),
        StoreError::AlreadyExists => e.kind().status(format!("the {what} name is taken")),
        other => other.status(),
    }
}

fn status(e: StoreError) -> Status {
    status_of("user", e)
}

fn group_status(e: StoreError) -> Status {
    status_of("group", e)
}

fn message(u: &StoredUser) -> User {
    User {
        id: u.id.clone(),
        username: u.username.clone(),
        display_name: u.display_name.clone(),
        mail: u.mail.clone(),
        admin: u.admin,
        space_admin: u.space_admin,
        groups: Vec::new(),
        credential_version: u.credential_version,
        credential_expires: 0,
        app_token: false,
    }
}

fn group_message(g: &StoredGroup) -> Group {
    Group {
        id: g.id.clone(),
        display_name: g.display_name.clone(),
        description: g.description.clone(),
    }
}

fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn token_message(t: &StoredToken) -> AppToken {
    AppToken {
        id: t.id.clone(),
        label: t.label.clone(),
        created: epoch_secs(t.created),
        expires: t.expires.map_or(0, epoch_secs),
    }
}

/// The stored hash of a user who has no password (not a PHC string, so it never verifies).
pub(crate) const NO_PASSWORD: &str = "!";

/// argon2id, bounded to one computation per core (see [`arca_runtime::password`]).
pub(crate) async fn hash_password(password: String) -> Result<String, Status> {
    Ok(arca_runtime::password::hash(password).await?)
}

pub(crate) fn valid_username(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'))
}

pub(crate) const USERNAME_RULE: &str =
    "a user name is 1-64 characters of letters, digits, '.', '_', '-' or '@'";

fn valid_group_name(name: &str) -> bool {
    let name = name.trim();
    !name.is_empty() && name.len() <= 128 && !name.chars().any(char::is_control)
}

fn require_admin<'a>(who: &'a Identity, what: &str) -> Result<&'a Identity, Status> {
    if who.admin {
        Ok(who)
    } else {
        Err(ErrorKind::PermissionDenied.status(format!("only admins {what}")))
    }
}

/// What a proxy signs to subscribe to the credential feed.
#[derive(Deserialize)]
struct WatchClaims {
    #[allow(dead_code)]
    sub: String,
}

impl UsersApi {
    /// That `given` is the password of user `id` now, under [`Self::password_checks`].
    async fn check_current_password(&self, id: &str, given: String) -> Result<(), Status> {
        let keys = [format!("password-change:{id}")];
        if let Some(wait) = self.password_checks.blocked(&keys) {
            return Err(arca_proto::throttled(
                "too many wrong current passwords",
                wait,
            ));
        }
        let user = self.store.user(id).await.map_err(status)?;
        if user.password_hash == NO_PASSWORD {
            return Err(ErrorKind::InvalidArgument.status(
                "this account has no password here: it logs in through its identity provider",
            ));
        }
        if given.is_empty() {
            return Err(ErrorKind::PermissionDenied.status(
                "setting your own password needs your current one: POST \
                 /graph/v1.0/me/changePassword with currentPassword and newPassword",
            ));
        }
        if !self.decoy.verify(given, Some(&user.password_hash)).await {
            self.password_checks.failed(&keys);
            return Err(ErrorKind::InvalidArgument.status("the current password is wrong"));
        }
        Ok(())
    }

    fn check_watch_token(&self, token: &str) -> Result<(), Status> {
        self.signer
            .verify::<WatchClaims>(WATCH_PURPOSE, token)
            .map(|_| ())
            .map_err(|e| ErrorKind::Unauthenticated.status(format!("credential feed: {e}")))
    }

    /// The user's message with the ids of their groups (they ride in identity tokens).
    async fn with_groups(&self, u: &StoredUser) -> Result<User, Status> {
        let mut m = message(u);
        m.groups = self
            .store
            .user_groups(&u.id)
            .await
            .map_err(status)?
            .into_iter()
            .map(|g| g.id)
            .collect();
        Ok(m)
    }
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl Users for UsersApi {
    /// The only anonymous method: it is how the proxy learns who a credential belongs to. The
    /// secret is tried as an app token first (one query and a SHA-256), then as the password.
    async fn authenticate(&self, req: Request<AuthenticateRequest>) -> Answer<User> {
        let r = req.into_inner();
        let refused = || ErrorKind::Unauthenticated.status("wrong user name or password");
        match self.store.user_by_name(&r.username).await {
            Ok(user) => {
                let tokens = self.store.app_tokens(&user.id).await.map_err(status)?;
                if let Some(token) = apptokens::find(&tokens, &r.password) {
                    let mut m = self.with_groups(&user).await?;
                    m.credential_expires = token.expires.map_or(0, epoch_secs);
                    m.app_token = true;
                    return Ok(Response::new(m));
                }
                if r.app_tokens_only {
                    return Err(refused());
                }
                // A user without a password is checked against the decoy (same time as a
                // wrong password) and refused whatever was sent.
                let stored =
                    (user.password_hash != NO_PASSWORD).then_some(user.password_hash.as_str());
                if self.decoy.verify(r.password, stored).await {
                    Ok(Response::new(self.with_groups(&user).await?))
                } else {
                    Err(refused())
                }
            }
            Err(StoreError::NotFound) => {
                if !r.app_tokens_only {
                    self.decoy.verify(r.password, None).await;
                }
                Err(refused())
            }
            Err(e) => Err(status(e)),
        }
    }

    async fn get_user(&self, req: Request<GetUserRequest>) -> Answer<User> {
        caller(&req)?;
        let r = req.get_ref();
        let user = if r.id.is_empty() {
            self.store.user_by_name(&r.username).await
        } else {
            self.store.user(&r.id).await
        };
        Ok(Response::new(
            self.with_groups(&user.map_err(status)?).await?,
        ))
    }

    async fn list_users(&self, req: Request<ListUsersRequest>) -> Answer<ListUsersResponse> {
        caller(&req)?;
        let users = self.store.list_users().await.map_err(status)?;
        Ok(Response::new(ListUsersResponse {
            users: users.iter().map(message).collect(),
        }))
    }

    async fn create_user(&self, req: Request<CreateUserRequest>) -> Answer<User> {
        let by_service = !arca_proto::principals::is_user(&caller(&req)?.id);
        require_admin(caller(&req)?, "create users")?;
        let r = req.into_inner();
        if !valid_username(&r.username) {
            return Err(ErrorKind::InvalidArgument.status(USERNAME_RULE));
        }
        // A service may create a user without a password: the proxy provisioning a user from
        // OIDC claims, who logs in through the identity provider only. No hash is computed
        // for a secret nobody would know (argon2id costs 19 MiB and tens of ms: a burst of
        // first logins would be a burst of those) and no password is ever accepted for it.
        // People creating users must give one.
        let hash = match (r.password.is_empty(), by_service) {
            (true, true) => NO_PASSWORD.to_owned(),
            (true, false) => {
                return Err(ErrorKind::InvalidArgument.status("a password is required"));
            }
            (false, _) => hash_password(r.password).await?,
        };
        let display = if r.display_name.is_empty() {
            r.username.clone()
        } else {
            r.display_name
        };
        let user = self
            .store
            .create_user(&r.username, &display, &r.mail, &hash, r.admin)
            .await
            .map_err(status)?;
        Ok(Response::new(message(&user)))
    }

    async fn update_user(&self, req: Request<UpdateUserRequest>) -> Answer<User> {
        let who = caller(&req)?.clone();
        let r = req.into_inner();
        if !who.admin && who.id != r.id {
            return Err(ErrorKind::NotFound.status("no such user"));
        }
        // A password is a credential: only a login that may manage credentials sets one. An
        // app token (a sync client's, which may leak with its device) must not be able to
        // take the account over by setting a password, as it may not mint app tokens.
        if !r.password.is_empty() && !who.login.is_some_and(Login::manages_credentials) {
            return Err(ErrorKind::PermissionDenied.status(
                "app tokens cannot change passwords: log in with your password or your identity provider",
            ));
        }
        // Setting one's own password takes the current one, unless this very request proved
        // it (HTTP Basic with the password): a session or a provider's token is not the person.
        if !r.password.is_empty() && who.id == r.id && who.login != Some(Login::Password) {
            self.check_current_password(&r.id, r.current_password)
                .await?;
        }
        let role = Role::try_from(r.role).unwrap_or(Role::Unchanged);
        if role != Role::Unchanged {
            require_admin(&who, "change roles")?;
            if who.id == r.id {
                return Err(ErrorKind::PermissionDenied
                    .status("admins do not change their own role: another admin does"));
            }
        }
        let hash = if r.password.is_empty() {
            None
        } else {
            Some(hash_password(r.password).await?)
        };
        if role != Role::Unchanged {
            let (admin, space_admin) = match role {
                Role::Admin => (true, false),
                Role::SpaceAdmin => (false, true),
                _ => (false, false),
            };
            self.store
                .set_role(&r.id, admin, space_admin)
                .await
                .map_err(status)?;
        }
        let user = self
            .store
            .update_user(
                &r.id,
                (!r.display_name.is_empty()).then_some(r.display_name.as_str()),
                (!r.mail.is_empty()).then_some(r.mail.as_str()),
                hash.as_deref(),
            )
            .await
            .map_err(status)?;
        self.feed.changed().await;
        Ok(Response::new(message(&user)))
    }

    async fn delete_user(&self, req: Request<DeleteUserRequest>) -> Answer<DeleteUserResponse> {
        require_admin(caller(&req)?, "delete users")?;
        self.store
            .delete_user(&req.get_ref().id)
            .await
            .map_err(status)?;
        self.feed.changed().await;
        Ok(Response::new(DeleteUserResponse {}))
    }

    // ------------------------------------------------------------------ groups

    async fn create_group(&self, req: Request<CreateGroupRequest>) -> Answer<Group> {
        require_admin(caller(&req)?, "create groups")?;
        let r = req.into_inner();
        if !valid_group_name(&r.display_name) {
            return Err(ErrorKind::InvalidArgument
                .status("a group needs a displayName of 1-128 printable characters"));
        }
        let group = self
            .store
            .create_group(r.display_name.trim(), &r.description)
            .await
            .map_err(group_status)?;
        Ok(Response::new(group_message(&group)))
    }

    async fn get_group(&self, req: Request<GetGroupRequest>) -> Answer<Group> {
        caller(&req)?;
        let r = req.get_ref();
        let group = if r.id.is_empty() {
            self.store.group_by_name(&r.display_name).await
        } else {
            self.store.group(&r.id).await
        };
        Ok(Response::new(group_message(&group.map_err(group_status)?)))
    }

    async fn list_groups(&self, req: Request<ListGroupsRequest>) -> Answer<ListGroupsResponse> {
        caller(&req)?;
        let groups = self.store.list_groups().await.map_err(group_status)?;
        Ok(Response::new(ListGroupsResponse {
            groups: groups.iter().map(group_message).collect(),
        }))
    }

    async fn update_group(&self, req: Request<UpdateGroupRequest>) -> Answer<Group> {
        require_admin(caller(&req)?, "change groups")?;
        let r = req.into_inner();
        if let Some(name) = &r.display_name
            && !valid_group_name(name)
        {
            return Err(ErrorKind::InvalidArgument
                .status("a group needs a displayName of 1-128 printable characters"));
        }
        let group = self
            .store
            .update_group(
                &r.id,
                r.display_name.as_deref().map(str::trim),
                r.description.as_deref(),
            )
            .await
            .map_err(group_status)?;
        Ok(Response::new(group_message(&group)))
    }

    async fn delete_group(&self, req: Request<DeleteGroupRequest>) -> Answer<DeleteGroupResponse> {
        require_admin(caller(&req)?, "delete groups")?;
        self.store
            .delete_group(&req.get_ref().id)
            .await
            .map_err(group_status)?;
        self.feed.changed().await;
        Ok(Response::new(DeleteGroupResponse {}))
    }

    async fn add_member(&self, req: Request<AddMemberRequest>) -> Answer<AddMemberResponse> {
        require_admin(caller(&req)?, "change group members")?;
        let r = req.get_ref();
        let added = self
            .store
            .add_group_member(&r.group_id, &r.user_id)
            .await
            .map_err(|e| status_of("group or user", e))?;
        if added {
            self.feed.changed().await;
        }
        Ok(Response::new(AddMemberResponse { added }))
    }

    async fn remove_member(
        &self,
        req: Request<RemoveMemberRequest>,
    ) -> Answer<RemoveMemberResponse> {
        require_admin(caller(&req)?, "change group members")?;
        let r = req.get_ref();
        self.store
            .remove_group_member(&r.group_id, &r.user_id)
            .await
            .map_err(|e| status_of("membership", e))?;
        self.feed.changed().await;
        Ok(Response::new(RemoveMemberResponse {}))
    }

    async fn list_members(&self, req: Request<ListMembersRequest>) -> Answer<ListUsersResponse> {
        caller(&req)?;
        let users = self
            .store
            .group_members(&req.get_ref().group_id)
            .await
            .map_err(group_status)?;
        Ok(Response::new(ListUsersResponse {
            users: users.iter().map(message).collect(),
        }))
    }

    async fn list_user_groups(
        &self,
        req: Request<ListUserGroupsRequest>,
    ) -> Answer<ListGroupsResponse> {
        let who = caller(&req)?;
        let user_id = &req.get_ref().user_id;
        if !who.admin && &who.id != user_id {
            return Err(ErrorKind::PermissionDenied.status("only admins read others' groups"));
        }
        let groups = self
            .store
            .user_groups(user_id)
            .await
            .map_err(group_status)?;
        Ok(Response::new(ListGroupsResponse {
            groups: groups.iter().map(group_message).collect(),
        }))
    }

    // -------------------------------------------------------------- app tokens

    async fn create_app_token(
        &self,
        req: Request<CreateAppTokenRequest>,
    ) -> Answer<CreateAppTokenResponse> {
        let who = caller(&req)?.clone();
        let r = req.into_inner();
        let expires = match r.expires_in {
            0 => None,
            secs => Some(
                SystemTime::now()
                    .checked_add(Duration::from_secs(secs))
                    .ok_or_else(|| ErrorKind::InvalidArgument.status("expiry too far away"))?,
            ),
        };
        if r.label.len() > 256 {
            return Err(ErrorKind::InvalidArgument.status("a label is at most 256 bytes"));
        }
        let secret = apptokens::generate();
        let token = self
            .store
            .create_app_token(&who.id, &apptokens::hash(&secret), &r.label, expires)
            .await
            .map_err(status)?;
        Ok(Response::new(CreateAppTokenResponse {
            token: Some(token_message(&token)),
            secret,
        }))
    }

    async fn list_app_tokens(
        &self,
        req: Request<ListAppTokensRequest>,
    ) -> Answer<ListAppTokensResponse> {
        let who = caller(&req)?;
        let tokens = self.store.app_tokens(&who.id).await.map_err(status)?;
        Ok(Response::new(ListAppTokensResponse {
            tokens: tokens.iter().map(token_message).collect(),
        }))
    }

    async fn delete_app_token(
        &self,
        req: Request<DeleteAppTokenRequest>,
    ) -> Answer<DeleteAppTokenResponse> {
        let who = caller(&req)?;
        let given = &req.get_ref().token;
        if given.is_empty() {
            return Err(ErrorKind::InvalidArgument.status("which token? (its id or the token)"));
        }
        // By id, else by the secret itself: either names one of the caller's tokens only.
        let by_id = self.store.delete_app_token(&who.id, given).await;
        match by_id {
            Err(StoreError::NotFound) => self
                .store
                .delete_app_token(&who.id, &apptokens::hash(given))
                .await
                .map_err(|e| status_of("app token", e))?,
            other => other.map_err(|e| status_of("app token", e))?,
        }
        self.feed.changed().await;
        Ok(Response::new(DeleteAppTokenResponse {}))
    }

    // ----------------------------------------------------------- change feed

    type WatchCredentialsStream = EventStream;

    async fn watch_credentials(
        &self,
        req: Request<WatchCredentialsRequest>,
    ) -> Answer<Self::WatchCredentialsStream> {
        self.check_watch_token(&req.get_ref().token)?;
        Ok(Response::new(self.feed.subscribe().await))
    }

    async fn ack_credentials(
        &self,
        req: Request<AckCredentialsRequest>,
    ) -> Answer<AckCredentialsResponse> {
        let r = req.get_ref();
        self.check_watch_token(&r.token)?;
        if self.feed.ack(&r.subscription, r.generation) {
            Ok(Response::new(AckCredentialsResponse {}))
        } else {
            Err(ErrorKind::NotFound.status("no such subscription"))
        }
    }
}
