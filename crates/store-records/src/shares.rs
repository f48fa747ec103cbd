//! Share records and recipients' states: rows in storage-system's metadata database, which the
//! sharing service reads and writes through storage-system's `ShareRecords` API. Storage only:
//! what a share means (roles, reshare rules, expiry, passwords) is the sharing service's.

use sqlx::Row as _;
use sqlx::any::AnyRow;

use crate::ids::new_id;
use crate::{Records, Result, StoreError};

/// One stored share. Ids of the node and space are the public ids the sharing service uses.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ShareRow {
    pub id: String,
    /// OCS share type: 0 user, 1 group, 3 public link.
    pub share_type: i32,
    pub space_id: String,
    pub node_id: String,
    pub is_dir: bool,
    pub target: String,
    pub owner_id: String,
    pub creator_id: String,
    /// User or group id; empty for links.
    pub grantee_id: String,
    pub permissions: u32,
    /// Links only.
    pub token: Option<String>,
    /// argon2id PHC string; empty = none. Never log it.
    pub password_hash: String,
    /// Unix seconds; 0 = never.
    pub expires: i64,
    pub name: String,
    /// Unix seconds.
    pub created: i64,
}

impl std::fmt::Debug for ShareRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareRow")
            .field("id", &self.id)
            .field("share_type", &self.share_type)
            .field("node_id", &self.node_id)
            .field("grantee_id", &self.grantee_id)
            .field("permissions", &self.permissions)
            .finish_non_exhaustive()
    }
}

/// Which shares [`Records::list_shares`] returns: every set filter must hold.
#[derive(Clone, Debug, Default)]
pub struct ShareFilter {
    pub space_id: Option<String>,
    pub node_id: Option<String>,
    pub creator_id: Option<String>,
    /// Shares whose creator or owner is this user.
    pub creator_or_owner: Option<String>,
    /// Any of these grantees; an empty list does not filter.
    pub grantee_ids: Vec<String>,
    /// Any of these types; an empty list does not filter.
    pub share_types: Vec<i32>,
}

const COLS: &str = "id, share_type, space_id, node_id, is_dir, target, owner_id, creator_id, \
                    grantee_id, permissions, token, password_hash, expires, name, created";

fn from_row(row: &AnyRow) -> Result<ShareRow> {
    let permissions: i64 = row.try_get(9)?;
    Ok(ShareRow {
        id: row.try_get(0)?,
        share_type: i32::try_from(row.try_get::<i64, _>(1)?)
            .map_err(|_| StoreError::Corrupt("share type".into()))?,
        space_id: row.try_get(2)?,
        node_id: row.try_get(3)?,
        is_dir: row.try_get::<i64, _>(4)? != 0,
        target: row.try_get(5)?,
        owner_id: row.try_get(6)?,
        creator_id: row.try_get(7)?,
        grantee_id: row.try_get(8)?,
        permissions: u32::try_from(permissions)
            .map_err(|_| StoreError::Corrupt(format!("share permissions {permissions}")))?,
        token: row.try_get(10)?,
        password_hash: row.try_get(11)?,
        expires: row.try_get(12)?,
        name: row.try_get(13)?,
        created: row.try_get(14)?,
    })
}

/// A bind value of a dynamically built query.
enum Bind {
    Text(String),
    Int(i64),
}

impl Records {
    /// Stores a new share under a fresh id (the given one is ignored); `AlreadyExists` when
    /// its link token is taken.
    pub async fn create_share(&self, share: &ShareRow) -> Result<ShareRow> {
        let mut row = share.clone();
        row.id = new_id();
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query(
            "INSERT INTO shares (id, share_type, space_id, node_id, is_dir, target, owner_id, \
             creator_id, grantee_id, permissions, token, password_hash, expires, name, created) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        )
        .bind(&row.id)
        .bind(i64::from(row.share_type))
        .bind(&row.space_id)
        .bind(&row.node_id)
        .bind(i64::from(row.is_dir))
        .bind(&row.target)
        .bind(&row.owner_id)
        .bind(&row.creator_id)
        .bind(&row.grantee_id)
        .bind(i64::from(row.permissions))
        .bind(row.token.clone())
        .bind(&row.password_hash)
        .bind(row.expires)
        .bind(&row.name)
        .bind(row.created)
        .execute(w.conn())
        .await
        .map(|_| ())
        .map_err(StoreError::from);
        let r = match r {
            Err(e) if e.is_unique_violation() => Err(StoreError::AlreadyExists),
            other => other,
        };
        w.finish(r).await?;
        Ok(row)
    }

    pub async fn share(&self, id: &str) -> Result<ShareRow> {
        self.share_where("id", id).await
    }

    pub async fn share_by_token(&self, token: &str) -> Result<ShareRow> {
        self.share_where("token", token).await
    }

    async fn share_where(&self, column: &'static str, value: &str) -> Result<ShareRow> {
        let sql = format!("SELECT {COLS} FROM shares WHERE {column} = $1");
        let mut c = self.read_conn().await?;
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(value)
            .fetch_optional(&mut *c)
            .await?;
        row.as_ref()
            .map(from_row)
            .transpose()?
            .ok_or(StoreError::NotFound)
    }

    /// Replaces the mutable fields: permissions, password hash, expiry and name.
    pub async fn update_share(&self, share: &ShareRow) -> Result<ShareRow> {
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query(
            "UPDATE shares SET permissions = $1, password_hash = $2, expires = $3, name = $4 \
             WHERE id = $5",
        )
        .bind(i64::from(share.permissions))
        .bind(&share.password_hash)
        .bind(share.expires)
        .bind(&share.name)
        .bind(&share.id)
        .execute(w.conn())
        .await
        .map_err(StoreError::from)
        .and_then(|done| match done.rows_affected() {
            0 => Err(StoreError::NotFound),
            _ => Ok(()),
        });
        w.finish(r).await?;
        self.share(&share.id).await
    }

    /// Removes a share and its recipients' states; `false` when there was none.
    pub async fn delete_share(&self, id: &str) -> Result<bool> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            sqlx::query("DELETE FROM share_states WHERE share_id = $1")
                .bind(id)
                .execute(w.conn())
                .await?;
            let done = sqlx::query("DELETE FROM shares WHERE id = $1")
                .bind(id)
                .execute(w.conn())
                .await?;
            Ok(done.rows_affected() > 0)
        }
        .await;
        w.finish(r).await
    }

    /// The shares matching every filter that is set, oldest first.
    pub async fn list_shares(&self, filter: &ShareFilter) -> Result<Vec<ShareRow>> {
        let mut sql = format!("SELECT {COLS} FROM shares WHERE 1 = 1");
        let mut binds = Vec::new();
        let mut eq = |sql: &mut String, column: &str, value: &Option<String>| {
            if let Some(v) = value {
                binds.push(Bind::Text(v.clone()));
                sql.push_str(&format!(" AND {column} = ${}", binds.len()));
            }
        };
        eq(&mut sql, "space_id", &filter.space_id);
        eq(&mut sql, "node_id", &filter.node_id);
        eq(&mut sql, "creator_id", &filter.creator_id);
        if let Some(user) = &filter.creator_or_owner {
            binds.push(Bind::Text(user.clone()));
            let n = binds.len();
            sql.push_str(&format!(" AND (creator_id = ${n} OR owner_id = ${n})"));
        }
        if !filter.grantee_ids.is_empty() {
            let mut list = Vec::new();
            for g in &filter.grantee_ids {
                binds.push(Bind::Text(g.clone()));
                list.push(format!("${}", binds.len()));
            }
            sql.push_str(&format!(" AND grantee_id IN ({})", list.join(", ")));
        }
        if !filter.share_types.is_empty() {
            let mut list = Vec::new();
            for t in &filter.share_types {
                binds.push(Bind::Int(i64::from(*t)));
                list.push(format!("${}", binds.len()));
            }
            sql.push_str(&format!(" AND share_type IN ({})", list.join(", ")));
        }
        sql.push_str(" ORDER BY created, id");
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for b in binds {
            q = match b {
                Bind::Text(t) => q.bind(t),
                Bind::Int(i) => q.bind(i),
            };
        }
        let mut c = self.read_conn().await?;
        let rows = q.fetch_all(&mut *c).await?;
        rows.iter().map(from_row).collect()
    }

    /// Records what `user_id` did with a share; `NotFound` when the share is gone.
    pub async fn set_share_state(&self, share_id: &str, user_id: &str, state: i32) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let exists = sqlx::query("SELECT 1 FROM shares WHERE id = $1")
                .bind(share_id)
                .fetch_optional(w.conn())
                .await?;
            if exists.is_none() {
                return Err(StoreError::NotFound);
            }
            sqlx::query(
                "INSERT INTO share_states (share_id, user_id, state) VALUES ($1, $2, $3) \
                 ON CONFLICT (share_id, user_id) DO UPDATE SET state = excluded.state",
            )
            .bind(share_id)
            .bind(user_id)
            .bind(i64::from(state))
            .execute(w.conn())
            .await?;
            Ok(())
        }
        .await;
        w.finish(r).await
    }

    /// (share id, state) of every share `user_id` accepted or declined.
    pub async fn share_states(&self, user_id: &str) -> Result<Vec<(String, i32)>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query("SELECT share_id, state FROM share_states WHERE user_id = $1")
            .bind(user_id)
            .fetch_all(&mut *c)
            .await?;
        rows.iter()
            .map(|r| {
                let state: i64 = r.try_get(1)?;
                Ok((
                    r.try_get(0)?,
                    i32::try_from(state).map_err(|_| StoreError::Corrupt("share state".into()))?,
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordsConfig;

    async fn store(dir: &std::path::Path) -> Records {
        let url = format!("sqlite://{}?mode=rwc", dir.join("m.db").display());
        Records::open(RecordsConfig::new(url)).await.unwrap()
    }

    fn share(grantee: &str, kind: i32) -> ShareRow {
        ShareRow {
            share_type: kind,
            space_id: "storage-users$s1".into(),
            node_id: "storage-users$s1!n1".into(),
            is_dir: true,
            target: "Docs".into(),
            owner_id: "alice".into(),
            creator_id: "alice".into(),
            grantee_id: grantee.into(),
            permissions: 1,
            created: 10,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn records_round_trip_and_filter() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path()).await;
        let a = s.create_share(&share("bob", 0)).await.unwrap();
        let mut link = share("", 3);
        link.token = Some("tok".into());
        let link = s.create_share(&link).await.unwrap();
        assert_eq!(s.share(&a.id).await.unwrap(), a);
        assert_eq!(s.share_by_token("tok").await.unwrap(), link);
        // Tokens are unique.
        let mut again = share("", 3);
        again.token = Some("tok".into());
        assert!(matches!(
            s.create_share(&again).await,
            Err(StoreError::AlreadyExists)
        ));
        let for_bob = ShareFilter {
            space_id: Some("storage-users$s1".into()),
            grantee_ids: vec!["bob".into(), "group-x".into()],
            ..Default::default()
        };
        assert_eq!(s.list_shares(&for_bob).await.unwrap(), vec![a.clone()]);
        let links = ShareFilter {
            creator_or_owner: Some("alice".into()),
            share_types: vec![3],
            ..Default::default()
        };
        assert_eq!(s.list_shares(&links).await.unwrap(), vec![link.clone()]);

        let mut up = a.clone();
        up.permissions = 15;
        up.name = "n".into();
        assert_eq!(s.update_share(&up).await.unwrap().permissions, 15);

        s.set_share_state(&a.id, "bob", 2).await.unwrap();
        s.set_share_state(&a.id, "bob", 0).await.unwrap();
        assert_eq!(
            s.share_states("bob").await.unwrap(),
            vec![(a.id.clone(), 0)]
        );
        assert!(s.delete_share(&a.id).await.unwrap());
        assert!(!s.delete_share(&a.id).await.unwrap());
        assert!(s.share_states("bob").await.unwrap().is_empty());
        assert!(matches!(
            s.set_share_state(&a.id, "bob", 0).await,
            Err(StoreError::NotFound)
        ));
    }
}
