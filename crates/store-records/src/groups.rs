//! Groups of the built-in identity store and their members. A membership change is a
//! credential change for the member: the groups ride in the identity the proxy vouches for.

use std::time::SystemTime;

use sqlx::Row as _;
use sqlx::any::AnyRow;

use crate::credentials::record_change;
use crate::ids::{from_ns, new_id, now_ns};
use crate::users::{User, user_from_row};
use crate::{Records, Result, StoreError};

/// A stored group; `display_name` is unique.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub id: String,
    pub display_name: String,
    pub description: String,
    pub created: SystemTime,
}

fn from_row(row: &AnyRow) -> Result<Group> {
    Ok(Group {
        id: row.try_get(0)?,
        display_name: row.try_get(1)?,
        description: row.try_get(2)?,
        created: from_ns(row.try_get(3)?),
    })
}

impl Records {
    /// Creates a group; `AlreadyExists` when the name is taken.
    pub async fn create_group(&self, display_name: &str, description: &str) -> Result<Group> {
        let id = new_id();
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query(
            "INSERT INTO groups (id, display_name, description, created) VALUES ($1, $2, $3, $4)",
        )
        .bind(&id)
        .bind(display_name)
        .bind(description)
        .bind(now_ns())
        .execute(w.conn())
        .await
        .map(|_| ())
        .map_err(StoreError::from);
        let r = match r {
            Err(e) if e.is_unique_violation() => Err(StoreError::AlreadyExists),
            other => other,
        };
        w.finish(r).await?;
        self.group(&id).await
    }

    pub async fn group(&self, id: &str) -> Result<Group> {
        self.group_where(
            "SELECT id, display_name, description, created FROM groups WHERE id = $1",
            id,
        )
        .await
    }

    pub async fn group_by_name(&self, display_name: &str) -> Result<Group> {
        self.group_where(
            "SELECT id, display_name, description, created FROM groups WHERE display_name = $1",
            display_name,
        )
        .await
    }

    async fn group_where(&self, sql: &'static str, value: &str) -> Result<Group> {
        let mut c = self.read_conn().await?;
        let row = sqlx::query(sql).bind(value).fetch_optional(&mut *c).await?;
        row.as_ref()
            .map(from_row)
            .transpose()?
            .ok_or(StoreError::NotFound)
    }

    pub async fn list_groups(&self) -> Result<Vec<Group>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT id, display_name, description, created FROM groups ORDER BY display_name",
        )
        .fetch_all(&mut *c)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Changes the given fields; `AlreadyExists` when the new name is taken.
    pub async fn update_group(
        &self,
        id: &str,
        display_name: Option<&str>,
        description: Option<&str>,
    ) -> Result<Group> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let exists = sqlx::query("SELECT 1 FROM groups WHERE id = $1")
                .bind(id)
                .fetch_optional(w.conn())
                .await?;
            if exists.is_none() {
                return Err(StoreError::NotFound);
            }
            if let Some(v) = display_name {
                let done = sqlx::query("UPDATE groups SET display_name = $1 WHERE id = $2")
                    .bind(v)
                    .bind(id)
                    .execute(w.conn())
                    .await
                    .map_err(StoreError::from);
                match done {
                    Err(e) if e.is_unique_violation() => return Err(StoreError::AlreadyExists),
                    other => other?,
                };
            }
            if let Some(v) = description {
                sqlx::query("UPDATE groups SET description = $1 WHERE id = $2")
                    .bind(v)
                    .bind(id)
                    .execute(w.conn())
                    .await?;
            }
            Ok(())
        }
        .await;
        w.finish(r).await?;
        self.group(id).await
    }

    /// Deletes a group and its memberships; each former member's credentials change.
    pub async fn delete_group(&self, id: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let members: Vec<String> =
                sqlx::query("SELECT user_id FROM group_members WHERE group_id = $1")
                    .bind(id)
                    .fetch_all(w.conn())
                    .await?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?;
            let done = sqlx::query("DELETE FROM groups WHERE id = $1")
                .bind(id)
                .execute(w.conn())
                .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound);
            }
            // Not left to the foreign key alone: the members are read above either way.
            sqlx::query("DELETE FROM group_members WHERE group_id = $1")
                .bind(id)
                .execute(w.conn())
                .await?;
            for user in members {
                record_change(w.conn(), &user).await?;
            }
            Ok(())
        }
        .await;
        w.finish(r).await
    }

    /// Makes `user_id` a member; `NotFound` when the group or the user does not exist. Adding
    /// an existing member changes nothing and is not an error (returns `false`).
    pub async fn add_group_member(&self, group_id: &str, user_id: &str) -> Result<bool> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            for (sql, id) in [
                ("SELECT 1 FROM groups WHERE id = $1", group_id),
                ("SELECT 1 FROM users WHERE id = $1", user_id),
            ] {
                if sqlx::query(sql)
                    .bind(id)
                    .fetch_optional(w.conn())
                    .await?
                    .is_none()
                {
                    return Err(StoreError::NotFound);
                }
            }
            let already =
                sqlx::query("SELECT 1 FROM group_members WHERE group_id = $1 AND user_id = $2")
                    .bind(group_id)
                    .bind(user_id)
                    .fetch_optional(w.conn())
                    .await?;
            if already.is_some() {
                return Ok(false);
            }
            sqlx::query("INSERT INTO group_members (group_id, user_id) VALUES ($1, $2)")
                .bind(group_id)
                .bind(user_id)
                .execute(w.conn())
                .await?;
            record_change(w.conn(), user_id).await?;
            Ok(true)
        }
        .await;
        w.finish(r).await
    }

    /// Ends a membership; `NotFound` when there is none.
    pub async fn remove_group_member(&self, group_id: &str, user_id: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let done =
                sqlx::query("DELETE FROM group_members WHERE group_id = $1 AND user_id = $2")
                    .bind(group_id)
                    .bind(user_id)
                    .execute(w.conn())
                    .await?;
            if done.rows_affected() == 0 {
                return Err(StoreError::NotFound);
            }
            record_change(w.conn(), user_id).await?;
            Ok(())
        }
        .await;
        w.finish(r).await
    }

    /// The members of a group, by user name; `NotFound` when the group does not exist.
    pub async fn group_members(&self, group_id: &str) -> Result<Vec<User>> {
        self.group(group_id).await?;
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT u.id, u.username, u.display_name, u.mail, u.admin, u.password_hash, \
             u.credential_version, u.created, u.space_admin \
             FROM group_members m JOIN users u ON u.id = m.user_id \
             WHERE m.group_id = $1 ORDER BY u.username",
        )
        .bind(group_id)
        .fetch_all(&mut *c)
        .await?;
        rows.iter().map(user_from_row).collect()
    }

    /// The groups a user belongs to, by name (empty for an unknown user).
    pub async fn user_groups(&self, user_id: &str) -> Result<Vec<Group>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT g.id, g.display_name, g.description, g.created \
             FROM group_members m JOIN groups g ON g.id = m.group_id \
             WHERE m.user_id = $1 ORDER BY g.display_name",
        )
        .bind(user_id)
        .fetch_all(&mut *c)
        .await?;
        rows.iter().map(from_row).collect()
    }
}
