//! Space administration beyond the tree: renaming, and the details the Graph drives API shows
//! (description, alias, the root's mtime), kept in `space_details` beside `spaces`.

use std::time::SystemTime;

use sqlx::Row;

use super::Store;
use crate::ids::from_ns;
use crate::{Result, StoreError};

/// What a drive shows of a space beyond [`crate::Space`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceDetails {
    /// Free text; empty when never set.
    pub description: String,
    /// A stable short name such as `project/marketing`; empty when never set.
    pub alias: String,
    /// The root directory's mtime: it changes when a member of the root is added, removed or
    /// renamed.
    pub root_mtime: SystemTime,
}

/// Changes to a space; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct SpaceUpdate<'a> {
    pub name: Option<&'a str>,
    pub description: Option<&'a str>,
    pub alias: Option<&'a str>,
}

impl Store {
    /// The details of a space.
    pub async fn space_details(&self, space_id: &str) -> Result<SpaceDetails> {
        let mut c = self.read_conn().await?;
        // The root node has the space's id; a space without a details row has empty ones.
        let row = sqlx::query(
            "SELECT n.mtime, d.description, d.alias FROM spaces s \
             JOIN nodes n ON n.id = s.id \
             LEFT JOIN space_details d ON d.space_id = s.id WHERE s.id = $1",
        )
        .bind(space_id)
        .fetch_optional(&mut *c)
        .await?
        .ok_or(StoreError::NotFound)?;
        Ok(SpaceDetails {
            root_mtime: from_ns(row.try_get(0)?),
            description: row.try_get::<Option<String>, _>(1)?.unwrap_or_default(),
            alias: row.try_get::<Option<String>, _>(2)?.unwrap_or_default(),
        })
    }

    /// Applies `update` in one transaction: all of it, or nothing (`NotFound` for an unknown
    /// space).
    pub async fn update_space(&self, space_id: &str, update: &SpaceUpdate<'_>) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            let renamed = sqlx::query(
                "UPDATE spaces SET name = COALESCE($2, name) WHERE id = $1 RETURNING id",
            )
            .bind(space_id)
            .bind(update.name)
            .fetch_optional(&mut *c)
            .await?;
            if renamed.is_none() {
                return Err(StoreError::NotFound);
            }
            if update.description.is_some() || update.alias.is_some() {
                sqlx::query(
                    "INSERT INTO space_details (space_id, description, alias) \
                     VALUES ($1, COALESCE($2, ''), COALESCE($3, '')) \
                     ON CONFLICT (space_id) DO UPDATE SET \
                       description = COALESCE($2, space_details.description), \
                       alias = COALESCE($3, space_details.alias)",
                )
                .bind(space_id)
                .bind(update.description)
                .bind(update.alias)
                .execute(&mut *c)
                .await?;
            }
            Ok(())
        }
        .await;
        w.finish(r).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreConfig;

    async fn store(dir: &std::path::Path) -> Store {
        let url = format!("sqlite://{}?mode=rwc", dir.join("m.db").display());
        Store::open(StoreConfig::new(url, dir.join("blobs")))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn details_update_partially_and_go_with_the_space() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path()).await;
        let space = store
            .create_project_space("Alpha", "admin", Some(10))
            .await
            .unwrap();
        let fresh = store.space_details(&space.id).await.unwrap();
        assert_eq!((fresh.description.as_str(), fresh.alias.as_str()), ("", ""));

        let all = SpaceUpdate {
            name: Some("Beta"),
            description: Some("first"),
            alias: Some("project/alpha"),
        };
        store.update_space(&space.id, &all).await.unwrap();
        let only_description = SpaceUpdate {
            description: Some("second"),
            ..SpaceUpdate::default()
        };
        store
            .update_space(&space.id, &only_description)
            .await
            .unwrap();
        let d = store.space_details(&space.id).await.unwrap();
        assert_eq!(d.description, "second");
        assert_eq!(d.alias, "project/alpha", "an unset field stays");
        assert_eq!(store.space(&space.id).await.unwrap().name, "Beta");

        assert!(matches!(
            store.update_space("nope", &all).await,
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            store.space_details("nope").await,
            Err(StoreError::NotFound)
        ));

        store.delete_space(&space.id).await.unwrap();
        let mut c = store.read_conn().await.unwrap();
        let left: i64 = sqlx::query("SELECT COUNT(*) FROM space_details")
            .fetch_one(&mut *c)
            .await
            .unwrap()
            .try_get(0)
            .unwrap();
        assert_eq!(left, 0, "details are deleted with their space");
    }
}
