//! Users of the built-in identity store: rows in the same metadata database as the trees.
//! Every change to a user is recorded in the credential change feed (see `credentials`), in the
//! same transaction, so that proxies drop what they cached about the user.

use std::time::SystemTime;

use sqlx::Row as _;
use sqlx::any::AnyRow;

use crate::credentials::record_change;
use crate::ids::{from_ns, new_id, now_ns};
use crate::{Records, Result, StoreError};

/// A stored user. `password_hash` is an argon2id PHC string; never log it.
#[derive(Clone, PartialEq, Eq)]
pub struct User {
    pub id: String,
    pub username: String,
    pub display_name: String,
    pub mail: String,
    pub admin: bool,
    /// Creates project spaces and manages every one (oCIS's Space Admin role).
    pub space_admin: bool,
    pub password_hash: String,
    /// Bumped on every password change, so credential caches can tell stale entries.
    pub credential_version: u64,
    pub created: SystemTime,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("id", &self.id)
            .field("username", &self.username)
            .field("admin", &self.admin)
            .field("space_admin", &self.space_admin)
            .finish_non_exhaustive()
    }
}

macro_rules! user_cols {
    () => {
        "id, username, display_name, mail, admin, password_hash, credential_version, created, \
         space_admin"
    };
}

/// Reads a row of the columns of `user_cols!`, in that order.
pub(crate) fn user_from_row(row: &AnyRow) -> Result<User> {
    Ok(User {
        id: row.try_get(0)?,
        username: row.try_get(1)?,
        display_name: row.try_get(2)?,
        mail: row.try_get(3)?,
        admin: row.try_get::<i64, _>(4)? != 0,
        password_hash: row.try_get(5)?,
        credential_version: u64::try_from(row.try_get::<i64, _>(6)?).unwrap_or(0),
        created: from_ns(row.try_get(7)?),
        space_admin: row.try_get::<i64, _>(8)? != 0,
    })
}

impl Records {
    /// Creates a user; `AlreadyExists` when the name is taken.
    pub async fn create_user(
        &self,
        username: &str,
        display_name: &str,
        mail: &str,
        password_hash: &str,
        admin: bool,
    ) -> Result<User> {
        let id = new_id();
        let created = now_ns();
        let mut w = self.db().begin_write().await?;
        // The row comes back from the INSERT itself: a burst of first logins costs one unit of
        // database work per user created, not a write and a read.
        let r = sqlx::query(concat!(
            "INSERT INTO users (id, username, display_name, mail, admin, password_hash, credential_version, created) \
             VALUES ($1, $2, $3, $4, $5, $6, 1, $7) RETURNING ",
            user_cols!()
        ))
        .bind(&id)
        .bind(username)
        .bind(display_name)
        .bind(mail)
        .bind(i64::from(admin))
        .bind(password_hash)
        .bind(created)
        .fetch_one(w.conn())
        .await
        .map_err(StoreError::from)
        .and_then(|row| user_from_row(&row));
        let r = match r {
            Err(e) if e.is_unique_violation() => Err(StoreError::AlreadyExists),
            other => other,
        };
        w.finish(r).await
    }

    pub async fn user(&self, id: &str) -> Result<User> {
        let mut c = self.read_conn().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            user_cols!(),
            " FROM users WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&mut *c)
        .await?;
        row.as_ref()
            .map(user_from_row)
            .transpose()?
            .ok_or(StoreError::NotFound)
    }

    pub async fn user_by_name(&self, username: &str) -> Result<User> {
        let mut c = self.read_conn().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            user_cols!(),
            " FROM users WHERE username = $1"
        ))
        .bind(username)
        .fetch_optional(&mut *c)
        .await?;
        row.as_ref()
            .map(user_from_row)
            .transpose()?
            .ok_or(StoreError::NotFound)
    }

    pub async fn list_users(&self) -> Result<Vec<User>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            user_cols!(),
            " FROM users ORDER BY username"
        ))
        .fetch_all(&mut *c)
        .await?;
        rows.iter().map(user_from_row).collect()
    }

    /// Changes the given fields; a new password hash bumps the credential version. Any change
    /// is a credential change: cached logins carry the name and flags too.
    pub async fn update_user(
        &self,
        id: &str,
        display_name: Option<&str>,
        mail: Option<&str>,
        password_hash: Option<&str>,
    ) -> Result<User> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let exists = sqlx::query("SELECT 1 FROM users WHERE id = $1")
                .bind(id)
                .fetch_optional(w.conn())
                .await?;
            if exists.is_none() {
                return Err(StoreError::NotFound);
            }
            if let Some(v) = display_name {
                sqlx::query("UPDATE users SET display_name = $1 WHERE id = $2")
                    .bind(v)
                    .bind(id)
                    .execute(w.conn())
                    .await?;
            }
            if let Some(v) = mail {
                sqlx::query("UPDATE users SET mail = $1 WHERE id = $2")
                    .bind(v)
                    .bind(id)
                    .execute(w.conn())
                    .await?;
            }
            if let Some(v) = password_hash {
                sqlx::query("UPDATE users SET password_hash = $1, credential_version = credential_version + 1 WHERE id = $2")
                    .bind(v)
                    .bind(id)
                    .execute(w.conn())
                    .await?;
            }
            if display_name.is_some() || mail.is_some() || password_hash.is_some() {
                record_change(w.conn(), id).await?;
            }
            Ok(())
        }
        .await;
        w.finish(r).await?;
        self.user(id).await
    }

    /// Sets or clears the admin flag (a credential change).
    pub async fn set_admin(&self, id: &str, admin: bool) -> Result<User> {
        let space_admin = self.user(id).await?.space_admin;
        self.set_role(id, admin, space_admin).await
    }

    /// Sets the admin and space admin flags together (a credential change: the proxies drop
    /// what they cached, so the new role holds from the user's next request).
    pub async fn set_role(&self, id: &str, admin: bool, space_admin: bool) -> Result<User> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let done = sqlx::query("UPDATE users SET admin = $1, space_admin = $2 WHERE id = $3")
                .bind(i64::from(admin))
                .bind(i64::from(space_admin))
                .bind(id)
                .execute(w.conn())
                .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound);
            }
            record_change(w.conn(), id).await?;
            Ok(())
        }
        .await;
        w.finish(r).await?;
        self.user(id).await
    }

    /// Deletes a user with their group memberships and app tokens (by foreign key, and
    /// explicitly, so a database without enforced foreign keys ends the same).
    pub async fn delete_user(&self, id: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let done = sqlx::query("DELETE FROM users WHERE id = $1")
                .bind(id)
                .execute(w.conn())
                .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound);
            }
            for sql in [
                "DELETE FROM group_members WHERE user_id = $1",
                "DELETE FROM app_tokens WHERE user_id = $1",
            ] {
                sqlx::query(sql).bind(id).execute(w.conn()).await?;
            }
            record_change(w.conn(), id).await?;
            Ok(())
        }
        .await;
        w.finish(r).await
    }
}
