//! The `Users` gRPC API: the built-in user store, passwords hashed with argon2id.

use std::sync::Arc;

use arca_proto::ErrorKind;
use arca_proto::v1::users_server::Users;
use arca_proto::v1::*;
use arca_runtime::caller;
use arca_store::{Store, StoreError, User as StoredUser};
use argon2::Argon2;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub(crate) struct UsersApi {
    pub(crate) store: Store,
    /// A hash to verify against when the user does not exist, so that a wrong user name costs
    /// the same time as a wrong password and does not reveal which names exist.
    pub(crate) decoy: Arc<str>,
}

fn status(e: StoreError) -> Status {
    match e {
        StoreError::NotFound => ErrorKind::NotFound.status("no such user"),
        StoreError::AlreadyExists => ErrorKind::AlreadyExists.status("the user name is taken"),
        other => {
            tracing::error!(error = %other, "user store failure");
            ErrorKind::Internal.status(other.to_string())
        }
    }
}

fn message(u: &StoredUser) -> User {
    User {
        id: u.id.clone(),
        username: u.username.clone(),
        display_name: u.display_name.clone(),
        mail: u.mail.clone(),
        admin: u.admin,
        groups: Vec::new(),
        credential_version: u.credential_version,
    }
}

/// argon2id with the crate's defaults (RFC 9106's second recommended profile scaled down:
/// 19 MiB, 2 passes), run on a blocking thread: it is deliberately slow.
pub(crate) async fn hash_password(password: String) -> Result<String, Status> {
    tokio::task::spawn_blocking(move || {
        // The salt comes from the OS random source (the crate's `getrandom` feature).
        Argon2::default()
            .hash_password(password.as_bytes())
            .map(|h| h.to_string())
            .map_err(|e| ErrorKind::Internal.status(e.to_string()))
    })
    .await
    .map_err(|e| ErrorKind::Internal.status(e.to_string()))?
}

async fn verify_password(password: String, hash: String) -> bool {
    tokio::task::spawn_blocking(move || {
        Argon2::default()
            .verify_password(password.as_bytes(), hash.as_str())
            .is_ok()
    })
    .await
    .unwrap_or(false)
}

fn valid_username(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'))
}

#[tonic::async_trait]
impl Users for UsersApi {
    /// The only anonymous method: it is how the proxy learns who a credential belongs to.
    async fn authenticate(
        &self,
        req: Request<AuthenticateRequest>,
    ) -> Result<Response<User>, Status> {
        let r = req.into_inner();
        let refused = || ErrorKind::Unauthenticated.status("wrong user name or password");
        match self.store.user_by_name(&r.username).await {
            Ok(user) => {
                if verify_password(r.password, user.password_hash.clone()).await {
                    Ok(Response::new(message(&user)))
                } else {
                    Err(refused())
                }
            }
            Err(StoreError::NotFound) => {
                let _ = verify_password(r.password, self.decoy.to_string()).await;
                Err(refused())
            }
            Err(e) => Err(status(e)),
        }
    }

    async fn get_user(&self, req: Request<GetUserRequest>) -> Result<Response<User>, Status> {
        caller(&req)?;
        let r = req.get_ref();
        let user = if r.id.is_empty() {
            self.store.user_by_name(&r.username).await
        } else {
            self.store.user(&r.id).await
        };
        Ok(Response::new(message(&user.map_err(status)?)))
    }

    async fn list_users(
        &self,
        req: Request<ListUsersRequest>,
    ) -> Result<Response<ListUsersResponse>, Status> {
        caller(&req)?;
        let users = self.store.list_users().await.map_err(status)?;
        Ok(Response::new(ListUsersResponse {
            users: users.iter().map(message).collect(),
        }))
    }

    async fn create_user(&self, req: Request<CreateUserRequest>) -> Result<Response<User>, Status> {
        let who = caller(&req)?;
        if !who.admin {
            return Err(ErrorKind::PermissionDenied.status("only admins create users"));
        }
        let r = req.into_inner();
        if !valid_username(&r.username) {
            return Err(ErrorKind::InvalidArgument.status(
                "a user name is 1-64 characters of letters, digits, '.', '_', '-' or '@'",
            ));
        }
        if r.password.is_empty() {
            return Err(ErrorKind::InvalidArgument.status("a password is required"));
        }
        let hash = hash_password(r.password).await?;
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

    async fn update_user(&self, req: Request<UpdateUserRequest>) -> Result<Response<User>, Status> {
        let who = caller(&req)?.clone();
        let r = req.into_inner();
        if !who.admin && who.id != r.id {
            return Err(ErrorKind::NotFound.status("no such user"));
        }
        let hash = if r.password.is_empty() {
            None
        } else {
            Some(hash_password(r.password).await?)
        };
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
        Ok(Response::new(message(&user)))
    }

    async fn delete_user(
        &self,
        req: Request<DeleteUserRequest>,
    ) -> Result<Response<DeleteUserResponse>, Status> {
        let who = caller(&req)?;
        if !who.admin {
            return Err(ErrorKind::PermissionDenied.status("only admins delete users"));
        }
        self.store
            .delete_user(&req.get_ref().id)
            .await
            .map_err(status)?;
        Ok(Response::new(DeleteUserResponse {}))
    }
}
