//! Bursts of removals: one remover (an actor through one client program) removing item after
//! item, each within the burst window of the one before. A sync client's mass delete (a wiped
//! laptop folder, a wrong sync root) is one; a person tidying up by hand rarely is, and never
//! a large one. A burst counts its items and the files inside them; once the files pass the
//! threshold it is flagged ([`Store::trash_noting`] says so once, so the caller can tell
//! someone), listed for the space's owner ([`Store::bursts`]) and can be restored exactly
//! ([`RestoreFilter::of_burst`](super::trash::RestoreFilter::of_burst)).

use std::time::{Duration, SystemTime};

use sqlx::Row;

use super::Store;
use super::trash::{Remover, TrashItem};
use crate::ids::{from_ns, new_id, to_ns};
use crate::model::NodeKind;
use crate::{Result, StoreError};

/// When removals make a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BurstRules {
    /// A burst is flagged once it removed more files than this.
    pub files: u64,
    /// Removals further apart than this start a new burst.
    pub window: Duration,
}

/// One remover's run of removals in one space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Burst {
    pub id: String,
    pub space_id: String,
    pub actor: String,
    /// The client program (User-Agent); empty when unknown.
    pub client: String,
    pub first: SystemTime,
    pub last: SystemTime,
    /// Trash items, and the files removed with them (inside removed folders included).
    pub items: u64,
    pub files: u64,
    /// Of its items, how many are still in the trash (restored or purged ones are not);
    /// counted only by [`Store::bursts`], `None` elsewhere.
    pub in_trash: Option<u64>,
    /// Past the threshold.
    pub flagged: bool,
}

/// The columns [`burst_from_row`] reads.
macro_rules! burst_cols {
    () => {
        "id, space_id, actor, client, first_at, last_at, items, files, flagged"
    };
}

fn burst_from_row(row: &sqlx::any::AnyRow) -> Result<Burst> {
    let count = |i: usize| -> Result<u64> {
        let v: i64 = row.try_get(i)?;
        Ok(u64::try_from(v).unwrap_or(0))
    };
    Ok(Burst {
        id: row.try_get(0)?,
        space_id: row.try_get(1)?,
        actor: row.try_get(2)?,
        client: row.try_get(3)?,
        first: from_ns(row.try_get(4)?),
        last: from_ns(row.try_get(5)?),
        items: count(6)?,
        files: count(7)?,
        flagged: count(8)? != 0,
        // The listing's extra column (see `Store::bursts`).
        in_trash: if row.len() > 9 { Some(count(9)?) } else { None },
    })
}

/// The files in the subtree of `id` (itself, when a file).
const FILES_BELOW: &str = "WITH RECURSIVE sub(id, kind) AS ( SELECT id, kind FROM nodes WHERE id = $1 \
     UNION ALL SELECT n.id, n.kind FROM nodes n JOIN sub ON n.parent_id = sub.id ) \
     SELECT count(*) FROM sub WHERE kind = $2";

impl Store {
    /// The flagged bursts of a space, newest first.
    pub async fn bursts(&self, space_id: &str) -> Result<Vec<Burst>> {
        let mut c = self.read_conn().await?;
        // Its items are the trash rows of its remover and client within its time span (as a
        // restore of it finds them, `RestoreFilter::of_burst`).
        let rows = sqlx::query(concat!(
            "SELECT ",
            burst_cols!(),
            ", (SELECT count(*) FROM trash t WHERE t.space_id = trash_bursts.space_id \
             AND t.deleted >= trash_bursts.first_at AND t.deleted <= trash_bursts.last_at \
             AND t.deleted_by = trash_bursts.actor AND t.deleted_via = trash_bursts.client) \
             FROM trash_bursts WHERE space_id = $1 AND flagged = 1 ORDER BY last_at DESC, id"
        ))
        .bind(space_id)
        .fetch_all(&mut *c)
        .await?;
        rows.iter().map(burst_from_row).collect()
    }

    /// One burst of a space.
    pub async fn burst(&self, space_id: &str, id: &str) -> Result<Burst> {
        let mut c = self.read_conn().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            burst_cols!(),
            " FROM trash_bursts WHERE space_id = $1 AND id = $2"
        ))
        .bind(space_id)
        .bind(id)
        .fetch_optional(&mut *c)
        .await?
        .ok_or(StoreError::NotFound)?;
        burst_from_row(&row)
    }
}

/// Counts trashed `item` into its remover's current burst in its space (starting one when the
/// last removal is older than the window), on the removal's write transaction, which holds the
/// space's lock (see [`Store::trash_noting`]). Returns the burst when this removal made it pass
/// the threshold: once per burst.
pub(crate) async fn note_removal_tx(
    c: &mut sqlx::AnyConnection,
    item: &TrashItem,
    remover: Remover<'_>,
    rules: &BurstRules,
) -> Result<Option<Burst>> {
    let files: i64 = if item.node.is_dir() {
        sqlx::query(FILES_BELOW)
            .bind(&item.key)
            .bind(NodeKind::File.to_db())
            .fetch_one(&mut *c)
            .await?
            .try_get(0)?
    } else {
        1
    };
    // The removal's own time: a burst's first and last then bound exactly its items'
    // `deleted`, which is what restoring it selects by.
    let at = to_ns(item.deleted);
    let window = i64::try_from(rules.window.as_nanos()).unwrap_or(i64::MAX);
    let threshold = i64::try_from(rules.files).unwrap_or(i64::MAX);
    let open = sqlx::query(concat!(
        "SELECT ",
        burst_cols!(),
        " FROM trash_bursts WHERE space_id = $1 AND actor = $2 \
         AND client = $3 AND last_at >= $4 ORDER BY last_at DESC LIMIT 1"
    ))
    .bind(&item.space_id)
    .bind(remover.actor)
    .bind(remover.client)
    .bind(at.saturating_sub(window))
    .fetch_optional(&mut *c)
    .await?;
    let (id, was_flagged, total) = match open.as_ref().map(burst_from_row).transpose()? {
        Some(b) => {
            let total = i64::try_from(b.files)
                .unwrap_or(i64::MAX)
                .saturating_add(files);
            sqlx::query(
                "UPDATE trash_bursts SET items = items + 1, files = $2, \
                 last_at = CASE WHEN last_at < $3 THEN $3 ELSE last_at END, \
                 first_at = CASE WHEN first_at > $3 THEN $3 ELSE first_at END, \
                 flagged = $4 WHERE id = $1",
            )
            .bind(&b.id)
            .bind(total)
            .bind(at)
            .bind(i64::from(total > threshold))
            .execute(&mut *c)
            .await?;
            (b.id, b.flagged, total)
        }
        None => {
            let id = new_id();
            sqlx::query(
                "INSERT INTO trash_bursts (id, space_id, actor, client, first_at, \
                 last_at, items, files, flagged) VALUES ($1, $2, $3, $4, $5, $5, 1, $6, $7)",
            )
            .bind(&id)
            .bind(&item.space_id)
            .bind(remover.actor)
            .bind(remover.client)
            .bind(at)
            .bind(files)
            .bind(i64::from(files > threshold))
            .execute(&mut *c)
            .await?;
            (id, false, files)
        }
    };
    if was_flagged || total <= threshold {
        return Ok(None);
    }
    let row = sqlx::query(concat!(
        "SELECT ",
        burst_cols!(),
        " FROM trash_bursts WHERE id = $1"
    ))
    .bind(&id)
    .fetch_one(&mut *c)
    .await?;
    burst_from_row(&row).map(Some)
}
