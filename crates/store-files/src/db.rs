//! The metadata database as this store uses it: arca-store's [`Db`] with this crate's
//! migrations ([`SCHEMA`]), and the rows of its tables.

use sqlx::Row;
use sqlx::any::AnyRow;

pub(crate) use arca_store::db::{Db, Dialect, ReadConn, db_size, first_strings};
use arca_store::ids::from_ns;
use arca_store::{Owner, Schema};

use crate::StoreError;
use crate::checksum::Checksums;
use crate::model::{Node, NodeKind, Space, SpaceKind};

/// The files store's tables. The versions continue the pre-split set's (see
/// `arca_store::schema`): a version here is the same change as the one of that number there.
pub(crate) const SCHEMA: Schema = Schema {
    owner: Owner::Files,
    // Slices, not arrays: each migration added is one entry, with no length to keep in step.
    sqlite: &[
        (
            1,
            "init",
            include_str!("../migrations/sqlite/0001_init.sql"),
        ),
        (
            2,
            "locks",
            include_str!("../migrations/sqlite/0002_locks.sql"),
        ),
        (
            4,
            "space_details",
            include_str!("../migrations/sqlite/0004_space_details.sql"),
        ),
        (
            12,
            "uploads",
            include_str!("../migrations/sqlite/0012_uploads.sql"),
        ),
        (
            20,
            "undo",
            include_str!("../migrations/sqlite/0020_undo.sql"),
        ),
        (
            25,
            "upload_folders",
            include_str!("../migrations/sqlite/0025_upload_folders.sql"),
        ),
        (
            26,
            "place_claim",
            include_str!("../migrations/sqlite/0026_place_claim.sql"),
        ),
        (
            27,
            "trash_bursts",
            include_str!("../migrations/sqlite/0027_trash_bursts.sql"),
        ),
        (
            28,
            "space_members",
            include_str!("../migrations/sqlite/0028_space_members.sql"),
        ),
        (
            29,
            "inline_bodies",
            include_str!("../migrations/sqlite/0029_inline_bodies.sql"),
        ),
    ],
    postgres: &[
        (
            1,
            "init",
            include_str!("../migrations/postgres/0001_init.sql"),
        ),
        (
            2,
            "locks",
            include_str!("../migrations/postgres/0002_locks.sql"),
        ),
        (
            4,
            "space_details",
            include_str!("../migrations/postgres/0004_space_details.sql"),
        ),
        (
            12,
            "uploads",
            include_str!("../migrations/postgres/0012_uploads.sql"),
        ),
        (
            20,
            "undo",
            include_str!("../migrations/postgres/0020_undo.sql"),
        ),
        (
            25,
            "upload_folders",
            include_str!("../migrations/postgres/0025_upload_folders.sql"),
        ),
        (
            27,
            "trash_bursts",
            include_str!("../migrations/postgres/0027_trash_bursts.sql"),
        ),
        (
            28,
            "space_members",
            include_str!("../migrations/postgres/0028_space_members.sql"),
        ),
        (
            29,
            "inline_bodies",
            include_str!("../migrations/postgres/0029_inline_bodies.sql"),
        ),
    ],
};

/// The node columns, in the order [`node_from_row`] reads them.
macro_rules! node_cols {
    () => {
        "id, space_id, parent_id, name, kind, size, mtime, etag, blob_id, sha1, md5, adler32, created"
    };
}
pub(crate) use node_cols;

/// A result row's columns by position, whichever way it was read: through sqlx
/// (`AnyRow`) or on the caller's thread (`store::inline_reads`).
pub(crate) trait Cols {
    fn text(&self, i: usize) -> Result<String, StoreError>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError>;
    fn int(&self, i: usize) -> Result<i64, StoreError>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError>;
}

impl Cols for AnyRow {
    fn text(&self, i: usize) -> Result<String, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn int(&self, i: usize) -> Result<i64, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(i)?)
    }
}

pub(crate) fn node_from_row(row: &impl Cols) -> Result<Node, StoreError> {
    node_from_row_at(row, 0)
}

/// [`node_from_row`] for node columns that start at column `base` (after others in a join).
pub(crate) fn node_from_row_at(row: &impl Cols, base: usize) -> Result<Node, StoreError> {
    let kind = row.int(base + 4)?;
    let kind =
        NodeKind::from_db(kind).ok_or_else(|| StoreError::Corrupt(format!("node kind {kind}")))?;
    let size = row.int(base + 5)?;
    let checksums = match (
        row.opt_text(base + 9)?,
        row.opt_text(base + 10)?,
        row.opt_text(base + 11)?,
    ) {
        (Some(sha1), Some(md5), Some(adler32)) => Some(Checksums { sha1, md5, adler32 }),
        _ => None,
    };
    Ok(Node {
        id: row.text(base)?,
        space_id: row.text(base + 1)?,
        parent_id: row.opt_text(base + 2)?,
        name: row.text(base + 3)?,
        kind,
        size: u64::try_from(size).map_err(|_| StoreError::Corrupt(format!("node size {size}")))?,
        mtime: from_ns(row.int(base + 6)?),
        etag: row.text(base + 7)?,
        blob_id: row.opt_text(base + 8)?,
        checksums,
        created: from_ns(row.int(base + 12)?),
    })
}

/// Space columns joined with the root node, in the order [`space_from_row`] reads them
/// (store.rs's `SPACE_COLS` counts them: keep it in step).
macro_rules! space_cols {
    () => {
        "s.id, s.kind, s.owner, s.name, s.quota, s.created, n.size, n.etag, s.disabled, \
         CAST(CASE WHEN EXISTS (SELECT 1 FROM nodes root_entry WHERE root_entry.parent_id = s.id) THEN 1 ELSE 0 END AS BIGINT)"
    };
}
pub(crate) use space_cols;

pub(crate) fn space_from_row(row: &impl Cols) -> Result<Space, StoreError> {
    let kind = row.text(1)?;
    let kind =
        SpaceKind::parse(&kind).ok_or_else(|| StoreError::Corrupt(format!("space kind {kind}")))?;
    let quota = row.opt_int(4)?;
    let used = row.int(6)?;
    let id = row.text(0)?;
    Ok(Space {
        root_id: id.clone(),
        id,
        kind,
        owner: row.text(2)?,
        name: row.text(3)?,
        quota: quota.and_then(|q| u64::try_from(q).ok()).filter(|&q| q > 0),
        used: u64::try_from(used).unwrap_or(0),
        etag: row.text(7)?,
        created: from_ns(row.int(5)?),
        disabled: row.opt_int(8)?.map(from_ns),
        empty: row.int(9)? == 0,
    })
}
