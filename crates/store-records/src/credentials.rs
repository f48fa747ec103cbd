//! The credential change feed: every change that must end cached logins (a new password, a
//! deleted user, a revoked app token, a membership change) bumps one generation counter in the
//! same transaction and records whose credentials it was about. storage-system reads the feed
//! to tell the proxies; anything that writes the database (the server, `arca users`) feeds it.

use std::time::Duration;

use sqlx::AnyConnection;
use sqlx::Row as _;

use crate::ids::now_ns;
use crate::{Records, Result, StoreError};

/// One generation of the feed: the credentials of `user_id` changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialEvent {
    pub generation: u64,
    pub user_id: String,
}

fn generation(v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("credentials generation {v}")))
}

/// Bumps the generation and records `user_id` against it, inside the caller's write
/// transaction. The single counter row is updated first: on PostgreSQL its row lock makes
/// concurrent credential changes commit in generation order, so a reader that sees generation
/// N committed has every event up to N to read.
pub(crate) async fn record_change(conn: &mut AnyConnection, user_id: &str) -> Result<u64> {
    let row =
        sqlx::query("UPDATE credentials_generation SET gen = gen + 1 WHERE id = 1 RETURNING gen")
            .fetch_one(&mut *conn)
            .await?;
    let current: i64 = row.try_get(0)?;
    sqlx::query("INSERT INTO credential_events (gen, user_id, at) VALUES ($1, $2, $3)")
        .bind(current)
        .bind(user_id)
        .bind(now_ns())
        .execute(&mut *conn)
        .await?;
    generation(current)
}

impl Records {
    /// The current generation: one indexed single-row read, cheap enough to poll every second.
    pub async fn credentials_generation(&self) -> Result<u64> {
        let mut c = self.read_conn().await?;
        let row = sqlx::query("SELECT gen FROM credentials_generation WHERE id = 1")
            .fetch_one(&mut *c)
            .await?;
        generation(row.try_get(0)?)
    }

    /// Events after `after`, oldest first, at most `limit`. A caller that finds the first
    /// returned generation is not `after + 1` has missed pruned events and must assume
    /// everything changed.
    pub async fn credential_events_after(
        &self,
        after: u64,
        limit: u32,
    ) -> Result<Vec<CredentialEvent>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT gen, user_id FROM credential_events WHERE gen > $1 ORDER BY gen LIMIT $2",
        )
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *c)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(CredentialEvent {
                    generation: generation(r.try_get(0)?)?,
                    user_id: r.try_get(1)?,
                })
            })
            .collect()
    }

    /// Deletes events older than `age`; returns how many went.
    pub async fn prune_credential_events(&self, age: Duration) -> Result<u64> {
        let cutoff = now_ns().saturating_sub(i64::try_from(age.as_nanos()).unwrap_or(i64::MAX));
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query("DELETE FROM credential_events WHERE at < $1")
            .bind(cutoff)
            .execute(w.conn())
            .await
            .map(|done| done.rows_affected())
            .map_err(StoreError::from);
        w.finish(r).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use crate::{Records, RecordsConfig, StoreError};

    async fn store(dir: &tempfile::TempDir) -> Records {
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
        Records::open(RecordsConfig::new(url)).await.unwrap()
    }

    async fn events(s: &Records, after: u64) -> Vec<(u64, String)> {
        s.credential_events_after(after, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.generation, e.user_id))
            .collect()
    }

    #[tokio::test]
    async fn every_credential_change_is_one_generation_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(&tmp).await;
        assert_eq!(s.credentials_generation().await.unwrap(), 0);
        let alice = s.create_user("alice", "A", "", "h1", false).await.unwrap();
        let bob = s.create_user("bob", "B", "", "h2", false).await.unwrap();
        // Creating a user takes nothing away from anyone: no event.
        assert_eq!(s.credentials_generation().await.unwrap(), 0);

        s.update_user(&alice.id, None, None, Some("h3"))
            .await
            .unwrap();
        let g = s.create_group("team", "").await.unwrap();
        assert!(s.add_group_member(&g.id, &bob.id).await.unwrap());
        assert!(!s.add_group_member(&g.id, &bob.id).await.unwrap());
        let t = s
            .create_app_token(&alice.id, "hash", "phone", None)
            .await
            .unwrap();
        s.delete_app_token(&alice.id, &t.id).await.unwrap();
        assert_eq!(
            events(&s, 0).await,
            vec![
                (1, alice.id.clone()),
                (2, bob.id.clone()),
                (3, alice.id.clone())
            ]
        );
        assert_eq!(s.credentials_generation().await.unwrap(), 3);
        assert_eq!(events(&s, 2).await, vec![(3, alice.id.clone())]);

        // Deleting a user takes their memberships and tokens along, and is an event.
        s.create_app_token(&bob.id, "h", "", None).await.unwrap();
        s.delete_user(&bob.id).await.unwrap();
        assert!(s.group_members(&g.id).await.unwrap().is_empty());
        assert!(s.app_tokens(&bob.id).await.unwrap().is_empty());
        assert_eq!(events(&s, 3).await, vec![(4, bob.id.clone())]);

        assert_eq!(s.prune_credential_events(Duration::ZERO).await.unwrap(), 4);
        assert!(events(&s, 0).await.is_empty());
        assert_eq!(s.credentials_generation().await.unwrap(), 4);
    }

    #[tokio::test]
    async fn groups_and_memberships() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(&tmp).await;
        let alice = s.create_user("alice", "A", "", "h", false).await.unwrap();
        let g = s.create_group("team", "the team").await.unwrap();
        assert!(matches!(
            s.create_group("team", "").await,
            Err(StoreError::AlreadyExists)
        ));
        assert_eq!(s.group_by_name("team").await.unwrap(), g);
        s.add_group_member(&g.id, &alice.id).await.unwrap();
        assert!(matches!(
            s.add_group_member(&g.id, "nobody").await,
            Err(StoreError::NotFound)
        ));
        assert_eq!(s.user_groups(&alice.id).await.unwrap(), vec![g.clone()]);
        let renamed = s.update_group(&g.id, Some("crew"), Some("")).await.unwrap();
        assert_eq!(
            (renamed.display_name.as_str(), renamed.description.as_str()),
            ("crew", "")
        );
        s.remove_group_member(&g.id, &alice.id).await.unwrap();
        assert!(matches!(
            s.remove_group_member(&g.id, &alice.id).await,
            Err(StoreError::NotFound)
        ));
        s.add_group_member(&g.id, &alice.id).await.unwrap();
        let before = s.credentials_generation().await.unwrap();
        s.delete_group(&g.id).await.unwrap();
        // The member's groups changed: one event for them.
        assert_eq!(s.credentials_generation().await.unwrap(), before + 1);
        assert!(s.user_groups(&alice.id).await.unwrap().is_empty());
        assert!(matches!(s.group(&g.id).await, Err(StoreError::NotFound)));
    }

    #[tokio::test]
    async fn expired_app_tokens_are_not_listed_and_get_pruned() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(&tmp).await;
        let alice = s.create_user("alice", "A", "", "h", false).await.unwrap();
        let past = SystemTime::now() - Duration::from_secs(1);
        let future = SystemTime::now() + Duration::from_secs(3600);
        s.create_app_token(&alice.id, "old", "", Some(past))
            .await
            .unwrap();
        let live = s
            .create_app_token(&alice.id, "new", "", Some(future))
            .await
            .unwrap();
        let listed = s.app_tokens(&alice.id).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, live.id);
        assert_eq!(s.prune_expired_app_tokens().await.unwrap(), 1);
        assert!(matches!(
            s.create_app_token("nobody", "x", "", None).await,
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            s.delete_app_token(&alice.id, "no-such-id").await,
            Err(StoreError::NotFound)
        ));
        // Revoking by hash works as well as by id.
        s.delete_app_token(&alice.id, "new").await.unwrap();
        assert!(s.app_tokens(&alice.id).await.unwrap().is_empty());
    }
}
