//! App tokens: extra passwords a user creates for one client and can revoke alone. Only a
//! hash of each token is stored (the caller hashes; see storage-system for why SHA-256).
//! Revoking one is a credential change for its user.

use std::time::SystemTime;

use sqlx::Row as _;
use sqlx::any::AnyRow;

use crate::credentials::record_change;
use crate::ids::{from_ns, new_id, now_ns, to_ns};
use crate::{Records, Result, StoreError};

/// A stored app token. `hash` identifies the secret; never log it.
#[derive(Clone, PartialEq, Eq)]
pub struct AppToken {
    pub id: String,
    pub user_id: String,
    pub hash: String,
    pub label: String,
    pub created: SystemTime,
    /// `None`: never expires.
    pub expires: Option<SystemTime>,
}

impl AppToken {
    /// Whether the token may still be used at `now`.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        self.expires.is_none_or(|e| e > now)
    }
}

impl std::fmt::Debug for AppToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppToken")
            .field("id", &self.id)
            .field("user_id", &self.user_id)
            .field("label", &self.label)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

fn from_row(row: &AnyRow) -> Result<AppToken> {
    let expires: i64 = row.try_get(5)?;
    Ok(AppToken {
        id: row.try_get(0)?,
        user_id: row.try_get(1)?,
        hash: row.try_get(2)?,
        label: row.try_get(3)?,
        created: from_ns(row.try_get(4)?),
        expires: (expires != 0).then(|| from_ns(expires)),
    })
}

impl Records {
    /// Records a token for `user_id` (`NotFound` when there is no such user).
    pub async fn create_app_token(
        &self,
        user_id: &str,
        hash: &str,
        label: &str,
        expires: Option<SystemTime>,
    ) -> Result<AppToken> {
        let token = AppToken {
            id: new_id(),
            user_id: user_id.to_owned(),
            hash: hash.to_owned(),
            label: label.to_owned(),
            created: SystemTime::now(),
            expires,
        };
        let mut w = self.db().begin_write().await?;
        let r = async {
            if sqlx::query("SELECT 1 FROM users WHERE id = $1")
                .bind(user_id)
                .fetch_optional(w.conn())
                .await?
                .is_none()
            {
                return Err(StoreError::NotFound);
            }
            sqlx::query(
                "INSERT INTO app_tokens (id, user_id, hash, label, created, expires) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&token.id)
            .bind(user_id)
            .bind(hash)
            .bind(label)
            .bind(to_ns(token.created))
            // 0 stands for "never": a real expiry is never the epoch itself.
            .bind(expires.map_or(0, |e| to_ns(e).max(1)))
            .execute(w.conn())
            .await?;
            Ok(())
        }
        .await;
        w.finish(r).await?;
        Ok(token)
    }

    /// The user's tokens that have not expired, newest first.
    pub async fn app_tokens(&self, user_id: &str) -> Result<Vec<AppToken>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT id, user_id, hash, label, created, expires FROM app_tokens \
             WHERE user_id = $1 AND (expires = 0 OR expires > $2) ORDER BY created DESC",
        )
        .bind(user_id)
        .bind(now_ns())
        .fetch_all(&mut *c)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// Revokes one of the user's tokens, by id or by hash; `NotFound` when it has none such.
    pub async fn delete_app_token(&self, user_id: &str, id_or_hash: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let done =
                sqlx::query("DELETE FROM app_tokens WHERE user_id = $1 AND (id = $2 OR hash = $2)")
                    .bind(user_id)
                    .bind(id_or_hash)
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

    /// Deletes tokens that expired before now; they already refuse to authenticate, this only
    /// keeps the table small. No credential change: nothing valid was taken away.
    pub async fn prune_expired_app_tokens(&self) -> Result<u64> {
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query("DELETE FROM app_tokens WHERE expires <> 0 AND expires <= $1")
            .bind(now_ns())
            .execute(w.conn())
            .await
            .map(|d| d.rows_affected())
            .map_err(StoreError::from);
        w.finish(r).await
    }
}
