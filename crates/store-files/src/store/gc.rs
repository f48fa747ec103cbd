//! Orphan blob collection.
//!
//! Two kinds of blob are garbage: uploads that never committed (a failed put that could not clean
//! up, a cancelled request, a killed process — their `blobs` row is still "uploading"), and
//! committed blobs that nothing refers to any more (overwritten, deleted; copies share blobs, so
//! "released" only marks a candidate and the reference check decides).
//!
//! The rule every change to how contents are referenced must keep: a blob is referenced by the
//! current content of a node (live or in the trash: trashed nodes are nodes) and by file
//! versions (`versions.blob_id`), and the reference check counts both. Both references are also
//! foreign keys, so a check that forgot one would fail its batch rather than delete data.
//!
//! Order of work: the row is deleted first, the object after. Deleting the row is the claim — a
//! late commit of the same upload then fails instead of pointing at a deleted blob, and the
//! `nodes.blob_id` foreign key makes deleting a referenced row impossible. A crash between the
//! two steps can leak one object, never lose data.

use std::time::Duration;

use super::Store;
use crate::ids::now_ms;
use crate::{Result, StoreError};

/// Rows claimed per transaction, so the SQLite write lock is never held for long.
const BATCH: i64 = 256;

impl Store {
    /// Deletes blobs that no node references and uploads that never committed, when older than
    /// `min_age`, and returns how many blobs were deleted.
    ///
    /// Age is measured in whole milliseconds and compared inclusively, so `Duration::ZERO` takes
    /// everything up to this instant.
    ///
    /// `min_age` protects work in flight: a download that opened an old version keeps reading
    /// it, and an upload is not yet committed while its body streams. It must therefore exceed
    /// the longest upload (a slower one fails at commit, cleanly). Tests pass zero.
    pub async fn collect_orphans(&self, min_age: Duration) -> Result<u64> {
        // Rows this process reserved for puts to come have no blob yet (see
        // `commit::Reserved`): removed here, uncounted, before the cutoff could take them.
        self.committer().forget_reserved().await?;
        let age = i64::try_from(min_age.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now_ms().saturating_sub(age);
        let mut deleted = 0u64;

        loop {
            let ids = self
                .claim(
                    "DELETE FROM blobs WHERE id IN ( \
                       SELECT id FROM blobs WHERE state = 0 AND created <= $1 LIMIT $2 \
                     ) RETURNING id",
                    cutoff,
                )
                .await?;
            if ids.is_empty() {
                break;
            }
            deleted += self.delete_objects(&ids).await?;
        }

        loop {
            let ids = self
                .claim(
                    "DELETE FROM blobs WHERE id IN ( \
                       SELECT b.id FROM blobs b WHERE b.state = 1 AND b.released IS NOT NULL \
                       AND b.released <= $1 \
                       AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.blob_id = b.id) \
                       AND NOT EXISTS (SELECT 1 FROM versions v WHERE v.blob_id = b.id) LIMIT $2 \
                     ) RETURNING id",
                    cutoff,
                )
                .await?;
            if ids.is_empty() {
                break;
            }
            deleted += self.delete_objects(&ids).await?;
        }

        // Released blobs that are still referenced (a copy shares them) stop being candidates
        // until a node releases them again.
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query(
            "UPDATE blobs SET released = NULL WHERE released IS NOT NULL AND released <= $1 \
             AND (EXISTS (SELECT 1 FROM nodes n WHERE n.blob_id = blobs.id) \
               OR EXISTS (SELECT 1 FROM versions v WHERE v.blob_id = blobs.id))",
        )
        .bind(cutoff)
        .execute(w.conn())
        .await
        .map(|_| ())
        .map_err(StoreError::from);
        w.finish(r).await?;

        if deleted > 0 {
            tracing::info!(deleted, "collected orphan blobs");
        }
        Ok(deleted)
    }

    async fn claim(&self, sql: &'static str, cutoff: i64) -> Result<Vec<String>> {
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query(sql)
            .bind(cutoff)
            .bind(BATCH)
            .fetch_all(w.conn())
            .await
            .map_err(StoreError::from)
            .and_then(|rows| crate::db::first_strings(&rows));
        w.finish(r).await
    }

    async fn delete_objects(&self, ids: &[String]) -> Result<u64> {
        self.blobs().delete_many(ids).await?;
        Ok(ids.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use crate::{Store, StoreConfig};

    /// What a killed process leaves behind, which no Drop cleaned up: (1) an upload killed
    /// mid-body — its row and LocalFileSystem's staging file `<key>#1`; (2) one killed between
    /// "blob synced" and "metadata committed" — its row and a complete object. Both are collected
    /// after a restart, and nothing visible ever pointed at them.
    #[tokio::test]
    async fn crash_leftovers_are_collected() {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("m.db").display());
        let cfg = StoreConfig::new(url, tmp.path().join("blobs"));
        let store = Store::open(cfg.clone()).await.unwrap();

        let mid_body = store.committer().reserve().await.unwrap();
        let final_path = store.blobs().local_path(&mid_body).unwrap();
        std::fs::create_dir_all(final_path.parent().unwrap()).unwrap();
        let mut staging = final_path.clone().into_os_string();
        staging.push("#1");
        std::fs::write(&staging, b"partial").unwrap();

        let before_commit = store.committer().reserve().await.unwrap();
        let mut w = store.blobs().writer(&before_commit, None);
        w.write(Bytes::from_static(b"complete but never committed"))
            .await
            .unwrap();
        w.finish().await.unwrap();
        assert!(store.blobs().exists(&before_commit).await.unwrap());
        store.close().await;

        let store = Store::open(cfg).await.unwrap();
        assert_eq!(
            store
                .collect_orphans(Duration::from_secs(3600))
                .await
                .unwrap(),
            0,
            "too young"
        );
        assert_eq!(store.collect_orphans(Duration::ZERO).await.unwrap(), 2);
        assert!(!std::path::Path::new(&staging).exists());
        assert!(!store.blobs().exists(&before_commit).await.unwrap());
        assert_eq!(store.collect_orphans(Duration::ZERO).await.unwrap(), 0);
    }
}
