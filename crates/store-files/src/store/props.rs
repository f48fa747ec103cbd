//! WebDAV dead properties. They are metadata about a node, not its content: changing them does
//! not change the etag (RFC 4918 ties the etag to the entity body).

use sqlx::AnyConnection;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, get_node};
use crate::model::{DeadProp, PropPatch};
use crate::{Result, StoreError};

impl Store {
    /// All dead properties of a node.
    pub async fn props(&self, id: &str) -> Result<Vec<DeadProp>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query("SELECT ns, name, value FROM props WHERE node_id = $1")
            .bind(id)
            .fetch_all(&mut *c)
            .await?;
        if rows.is_empty() && get_node(&mut c, id).await?.is_none() {
            return Err(StoreError::NotFound);
        }
        let mut props = rows.iter().map(prop_from_row).collect::<Result<Vec<_>>>()?;
        props.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(props)
    }

    /// The dead properties of every child of a directory in one query (PROPFIND Depth 1 without
    /// a query per child): `(node id, property)` pairs.
    pub async fn children_props(&self, dir_id: &str) -> Result<Vec<(String, DeadProp)>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT p.node_id, p.ns, p.name, p.value FROM props p \
             JOIN nodes n ON n.id = p.node_id WHERE n.parent_id = $1",
        )
        .bind(dir_id)
        .fetch_all(&mut *c)
        .await?;
        rows.iter()
            .map(|row| {
                let node: String = row.try_get(0)?;
                let prop = DeadProp {
                    namespace: row.try_get(1)?,
                    name: row.try_get(2)?,
                    value: row.try_get(3)?,
                };
                Ok((node, prop))
            })
            .collect()
    }

    /// Applies a PROPPATCH atomically: all steps or none.
    pub async fn patch_props(&self, id: &str, patch: &[PropPatch]) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = patch_tx(w.conn(), id, patch).await;
        w.finish(r).await
    }

    /// Sets one dead property.
    pub async fn set_prop(&self, id: &str, namespace: &str, name: &str, value: &str) -> Result<()> {
        self.patch_props(
            id,
            &[PropPatch::Set {
                namespace: namespace.into(),
                name: name.into(),
                value: value.into(),
            }],
        )
        .await
    }

    /// Removes one dead property; removing one that is not set is not an error (RFC 4918 §9.2).
    pub async fn remove_prop(&self, id: &str, namespace: &str, name: &str) -> Result<()> {
        self.patch_props(
            id,
            &[PropPatch::Remove {
                namespace: namespace.into(),
                name: name.into(),
            }],
        )
        .await
    }
}

async fn patch_tx(c: &mut AnyConnection, id: &str, patch: &[PropPatch]) -> Result<()> {
    if get_node(c, id).await?.is_none() {
        return Err(StoreError::NotFound);
    }
    for step in patch {
        match step {
            PropPatch::Set {
                namespace,
                name,
                value,
            } => {
                sqlx::query(
                    "INSERT INTO props (node_id, ns, name, value) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (node_id, ns, name) DO UPDATE SET value = excluded.value",
                )
                .bind(id)
                .bind(namespace)
                .bind(name)
                .bind(value)
                .execute(&mut *c)
                .await?;
            }
            PropPatch::Remove { namespace, name } => {
                sqlx::query("DELETE FROM props WHERE node_id = $1 AND ns = $2 AND name = $3")
                    .bind(id)
                    .bind(namespace)
                    .bind(name)
                    .execute(&mut *c)
                    .await?;
            }
        }
    }
    Ok(())
}

fn prop_from_row(row: &AnyRow) -> Result<DeadProp> {
    Ok(DeadProp {
        namespace: row.try_get(0)?,
        name: row.try_get(1)?,
        value: row.try_get(2)?,
    })
}
