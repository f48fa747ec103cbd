//! The trash bin: removing a file or folder moves it, with its subtree, under the space's
//! trash root in one row update ([`Store::trash`]); it can be listed, browsed, restored one
//! by one ([`Store::restore_trash`], [`Store::restore_to_origin`]) or in bulk
//! ([`Store::restore_run`]), and purged, by hand or by retention ([`Store::expire_trash`]).
//!
//! Why a node tree and not a copy: a folder of 100,000 files is removed and restored in the
//! time of one file, its ids and versions survive the round trip, and the trash's byte count is
//! the trash root's size, kept by the propagation every write already does. A trashed node is
//! not live ([`super::live_path`]): nothing reaches it by path, and a share or link that points
//! at it finds nothing until it comes back.
//!
//! A restore never overwrites silently: a name taken at the destination fails the restore
//! (`AlreadyExists`), or by the caller's choice the item goes beside it under a free name,
//! stays in the trash, or replaces it — and then what it replaces goes to the trash itself.
//! A bulk restore works in batches of one transaction each, so a process killed during one
//! leaves every item either restored or still in the trash, never both and never lost.
//!
//! Purging removes the subtree and frees every blob it was the last reference to at once
//! ([`Store::reclaim`]): emptying the trash gives the bytes back.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime};

use sqlx::{AnyConnection, Row};

use super::tree::insert_dir;
use super::versions::{Expired, share_of};
use super::{
    Store, check_quota, get_child, get_node, live_path, lock_space, propagate, remove_subtree,
    trash_root_id,
};
use crate::db::{db_size, node_from_row_at};
use crate::ids::{from_ns, new_id, now_ns, to_ns};
use crate::model::{Node, NodeKind};
use crate::names::numbered_name;
use crate::{Result, StoreError};

/// One item in a trash: the top of a removed subtree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrashItem {
    /// Unique in the store (the node's id): names the item in URLs.
    pub key: String,
    pub space_id: String,
    /// The name it had.
    pub name: String,
    /// The path of the folder it was in: `/` or `/a/b`.
    pub location: String,
    pub deleted: SystemTime,
    /// Unix seconds near `deleted`, unique among the space's items of this name (Nextcloud
    /// addresses an item as `NAME.dSTAMP`).
    pub stamp: i64,
    /// Who removed it: a user id, a link principal, or empty when unknown.
    pub deleted_by: String,
    /// The node as it is in the trash (its size is the whole subtree's).
    pub node: Node,
}

impl TrashItem {
    /// Where it was: its location and name, `/a/b/name`.
    pub fn original_path(&self) -> String {
        join(&self.location, &self.name)
    }
}

/// Who removes something, and through which client program (its User-Agent; empty when
/// unknown): the trash records both, and bursts are one remover's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remover<'a> {
    pub actor: &'a str,
    pub client: &'a str,
}

impl<'a> Remover<'a> {
    /// `actor` with no client named.
    pub fn by(actor: &'a str) -> Self {
        Remover { actor, client: "" }
    }
}

/// What a restore does when the name it restores to is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// Refuse (`AlreadyExists`): what clients get unless they ask otherwise.
    Fail,
    /// Leave the item in the trash.
    Skip,
    /// Restore beside it as `name (2).ext` (the first free number).
    KeepBoth,
    /// Move what is there into the trash, then restore.
    Replace,
}

/// Which items a bulk restore takes.
#[derive(Debug, Clone, Default)]
pub struct RestoreFilter {
    /// Removed at or after this time.
    pub since: Option<SystemTime>,
    /// Whose original path is this path or below it (`/Documents`).
    pub prefix: Option<String>,
    /// Removed at or before this time.
    pub until: Option<SystemTime>,
    /// Removed by this actor (a user id, as [`TrashItem::deleted_by`]).
    pub deleted_by: Option<String>,
    /// Removed through this client program.
    pub client: Option<String>,
}

impl RestoreFilter {
    /// Exactly the items of `burst`.
    pub fn of_burst(burst: &super::bursts::Burst) -> Self {
        RestoreFilter {
            since: Some(burst.first),
            until: Some(burst.last),
            prefix: None,
            deleted_by: Some(burst.actor.clone()),
            client: Some(burst.client.clone()),
        }
    }
}

/// What a restore came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// The node is live again at `path` (its name may differ with [`Conflict::KeepBoth`]);
    /// `replaced` is the trash key of what it replaced.
    Done {
        node: Box<Node>,
        path: String,
        replaced: Option<String>,
    },
    /// [`Conflict::Skip`] and the name was taken: still in the trash.
    Skipped,
}

/// Counts of a bulk restore so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreTally {
    /// Items the run takes in all.
    pub total: u64,
    /// Items live again (including renamed and replacing ones).
    pub restored: u64,
    /// Of those, restored under another name (keep-both).
    pub renamed: u64,
    /// Of those, restored over something that went to the trash in their place.
    pub replaced: u64,
    /// Left in the trash because the name was taken (skip) or by a conflict with an item
    /// this run restored (the newer one wins).
    pub skipped: u64,
    /// Left in the trash because the space's quota would be exceeded.
    pub over_quota: u64,
    /// Files live again, counting every file inside restored folders.
    pub files: u64,
    pub bytes: u64,
}

/// A space's bytes by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpaceUsage {
    /// Live content (what the quota limits).
    pub used: u64,
    /// Bytes in the trash, and how many items.
    pub trash: u64,
    pub trash_items: u64,
    /// Bytes of versions, and how many.
    pub versions: u64,
    pub version_count: u64,
}

/// What one retention run purged from one space's trash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrashExpiry {
    pub space_id: String,
    /// Purged because the trash held more than its share of the space's quota (else: by age).
    pub by_quota: bool,
    /// Files (counting those inside purged folders) and bytes.
    pub gone: Expired,
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" || dir.is_empty() {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Segments of a path (`/a/b` → a, b); empty ones ignored.
fn segs(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

/// Whether `path` is `prefix` or below it, segment-wise.
fn within(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    prefix.is_empty()
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Columns of a trash row joined with its node `n`, as [`item_from_row`] reads them.
macro_rules! item_cols {
    () => {
        concat!(
            "t.node_id, t.space_id, t.name, t.location, t.deleted, t.stamp, t.deleted_by, n.",
            "id, n.space_id, n.parent_id, n.name, n.kind, n.size, n.mtime, n.etag, n.blob_id, \
             n.sha1, n.md5, n.adler32, n.created"
        )
    };
}

fn item_from_row(row: &sqlx::any::AnyRow) -> Result<TrashItem> {
    Ok(TrashItem {
        key: row.try_get(0)?,
        space_id: row.try_get(1)?,
        name: row.try_get(2)?,
        location: row.try_get(3)?,
        deleted: from_ns(row.try_get(4)?),
        stamp: row.try_get(5)?,
        deleted_by: row.try_get(6)?,
        node: node_from_row_at(row, 7)?,
    })
}

/// The space's trash root, made on first use.
async fn ensure_trash_root(c: &mut AnyConnection, space_id: &str, now: i64) -> Result<String> {
    let id = trash_root_id(space_id);
    sqlx::query(
        "INSERT INTO nodes (id, space_id, parent_id, name, kind, size, mtime, etag, created) \
         VALUES ($1, $2, NULL, '', $3, 0, $4, $5, $4) ON CONFLICT (id) DO NOTHING",
    )
    .bind(&id)
    .bind(space_id)
    .bind(NodeKind::Dir.to_db())
    .bind(now)
    .bind(new_id())
    .execute(&mut *c)
    .await?;
    Ok(id)
}

/// A trash row, its stamp the deletion second or, when an item of that name already has
/// it, the next free one (`trash_space_name_stamp` answers the MAX).
pub(crate) const TRASH_INSERT: &str = "INSERT INTO trash (node_id, space_id, name, location, deleted, stamp, deleted_by, deleted_via) \
     VALUES ($1, $2, $3, $4, $5, COALESCE((SELECT CASE WHEN MAX(stamp) >= $6 THEN MAX(stamp) + 1 END \
       FROM trash WHERE space_id = $2 AND name = $3), $6), $7, $8) RETURNING stamp";

/// Moves live node `id` of `space_id` into the trash; the caller holds the space lock.
pub(crate) async fn trash_tx(
    c: &mut AnyConnection,
    space_id: &str,
    id: &str,
    actor: &Remover<'_>,
) -> Result<TrashItem> {
    let node = get_node(c, id).await?.ok_or(StoreError::NotFound)?;
    if node.space_id != space_id {
        return Err(StoreError::NotFound);
    }
    let Some(parent_id) = node.parent_id.clone() else {
        return Err(StoreError::Forbidden("a space root cannot be deleted"));
    };
    // A node already in the trash (or below a trashed folder) is not removed again.
    let location = live_path(c, &parent_id)
        .await?
        .ok_or(StoreError::NotFound)?;
    let now = now_ns();
    let root = ensure_trash_root(c, space_id, now).await?;
    sqlx::query("UPDATE nodes SET parent_id = $2, name = $1 WHERE id = $1")
        .bind(id)
        .bind(&root)
        .execute(&mut *c)
        .await?;
    let secs = now.div_euclid(1_000_000_000);
    let row = sqlx::query(TRASH_INSERT)
        .bind(id)
        .bind(space_id)
        .bind(&node.name)
        .bind(&location)
        .bind(now)
        .bind(secs)
        .bind(actor.actor)
        .bind(actor.client)
        .fetch_one(&mut *c)
        .await?;
    let stamp: i64 = row.try_get(0)?;
    let size = db_size(node.size)?;
    propagate(c, &parent_id, &new_id(), -size, Some(now)).await?;
    propagate(c, &root, &new_id(), size, None).await?;
    let trashed = get_node(c, id).await?.ok_or(StoreError::NotFound)?;
    Ok(TrashItem {
        key: id.to_owned(),
        space_id: space_id.to_owned(),
        // The node now carries its key as its name; the item keeps the one it had.
        name: node.name,
        location,
        deleted: from_ns(now),
        stamp,
        deleted_by: actor.actor.to_owned(),
        node: trashed,
    })
}

async fn get_item(c: &mut AnyConnection, space_id: &str, key: &str) -> Result<Option<TrashItem>> {
    let row = sqlx::query(concat!(
        "SELECT ",
        item_cols!(),
        " FROM trash t JOIN nodes n ON n.id = t.node_id WHERE t.node_id = $1 AND t.space_id = $2"
    ))
    .bind(key)
    .bind(space_id)
    .fetch_optional(&mut *c)
    .await?;
    row.as_ref().map(item_from_row).transpose()
}

/// The node at `sub` (`/` or `/x/y`) inside trashed item `item`.
async fn node_in_item(c: &mut AnyConnection, item: &TrashItem, sub: &str) -> Result<Node> {
    let mut node = item.node.clone();
    for seg in segs(sub) {
        if !node.is_dir() {
            return Err(StoreError::NotFound);
        }
        node = get_child(c, &node.id, seg)
            .await?
            .ok_or(StoreError::NotFound)?;
    }
    Ok(node)
}

/// The first of `name (2)`, `name (3)`… not in `taken`.
fn free_in(taken: &HashSet<String>, name: &str) -> String {
    (2..)
        .map(|n| numbered_name(name, n))
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_else(|| name.to_owned())
}

async fn child_names(c: &mut AnyConnection, dir: &str) -> Result<HashSet<String>> {
    let rows = sqlx::query("SELECT name FROM nodes WHERE parent_id = $1")
        .bind(dir)
        .fetch_all(&mut *c)
        .await?;
    Ok(crate::db::first_strings(&rows)?.into_iter().collect())
}

impl Store {
    /// Moves node `id` and everything below it into its space's trash, in one row update
    /// whatever its size. `actor` is who removed it. A space root cannot be trashed
    /// (`Forbidden`); a node already in the trash is `NotFound`.
    pub async fn trash(&self, id: &str, actor: &str) -> Result<TrashItem> {
        self.trash_by(id, Remover::by(actor)).await
    }

    /// [`trash`](Self::trash), recording the client program it came through.
    pub async fn trash_by(&self, id: &str, remover: Remover<'_>) -> Result<TrashItem> {
        let node = self.stat(id).await?;
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            lock_space(c, &node.space_id).await?;
            trash_tx(c, &node.space_id, id, &remover).await
        }
        .await;
        w.finish(r).await
    }

    /// [`trash_by`](Self::trash_by), the removal counted into its remover's burst (see the
    /// `bursts` module) in the same transaction: one commit per removal, not two.
    /// Returns the item and the burst when this removal made it pass the threshold.
    pub async fn trash_noting(
        &self,
        id: &str,
        remover: Remover<'_>,
        rules: &super::bursts::BurstRules,
    ) -> Result<(TrashItem, Option<super::bursts::Burst>)> {
        let node = self.stat(id).await?;
        if self.batches_writes() {
            let (space_id, id, rules) = (node.space_id, id.to_owned(), *rules);
            let (actor, client) = (remover.actor.to_owned(), remover.client.to_owned());
            return self
                .committer()
                .write(move |c| {
                    let (space_id, id) = (space_id.clone(), id.clone());
                    let (actor, client) = (actor.clone(), client.clone());
                    Box::pin(async move {
                        let remover = Remover {
                            actor: &actor,
                            client: &client,
                        };
                        trash_noting_tx(c, &space_id, &id, remover, &rules).await
                    })
                })
                .await;
        }
        let mut w = self.db().begin_write().await?;
        let r = trash_noting_tx(w.conn(), &node.space_id, id, remover, rules).await;
        w.finish(r).await
    }

    /// The items in a space's trash, newest first.
    pub async fn trash_items(&self, space_id: &str) -> Result<Vec<TrashItem>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            item_cols!(),
            " FROM trash t JOIN nodes n ON n.id = t.node_id WHERE t.space_id = $1 \
             ORDER BY t.deleted DESC, t.node_id"
        ))
        .bind(space_id)
        .fetch_all(&mut *c)
        .await?;
        rows.iter().map(item_from_row).collect()
    }

    /// One item of a space's trash and the node at `sub` inside it (`/`: the item itself),
    /// for browsing a removed folder.
    pub async fn trash_entry(
        &self,
        space_id: &str,
        key: &str,
        sub: &str,
    ) -> Result<(TrashItem, Node)> {
        let mut c = self.read_conn().await?;
        let item = get_item(&mut c, space_id, key)
            .await?
            .ok_or(StoreError::NotFound)?;
        let node = node_in_item(&mut c, &item, sub).await?;
        Ok((item, node))
    }

    /// The item that Nextcloud names `NAME.dSTAMP`.
    pub async fn trash_item_by_stamp(
        &self,
        space_id: &str,
        name: &str,
        stamp: i64,
    ) -> Result<TrashItem> {
        let mut c = self.read_conn().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            item_cols!(),
            " FROM trash t JOIN nodes n ON n.id = t.node_id \
             WHERE t.space_id = $1 AND t.name = $2 AND t.stamp = $3"
        ))
        .bind(space_id)
        .bind(name)
        .bind(stamp)
        .fetch_optional(&mut *c)
        .await?;
        row.as_ref()
            .map(item_from_row)
            .transpose()?
            .ok_or(StoreError::NotFound)
    }

    /// Restores trashed item `key` (or, with `sub`, the node at that path inside it) to
    /// `name` in live directory `dest_parent_id` of the same space, by `conflict` when the
    /// name is taken. `Conflict` when the destination directory is gone (or in the trash),
    /// `QuotaExceeded` when the space cannot take it back.
    #[allow(clippy::too_many_arguments)]
    pub async fn restore_trash(
        &self,
        space_id: &str,
        key: &str,
        sub: &str,
        dest_parent_id: &str,
        dest_name: &str,
        conflict: Conflict,
        actor: &str,
    ) -> Result<Restored> {
        crate::names::validate_name(dest_name)?;
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            let quota = lock_space(c, space_id).await?;
            let item = get_item(c, space_id, key)
                .await?
                .ok_or(StoreError::NotFound)?;
            let target = node_in_item(c, &item, sub).await?;
            let dest = get_node(c, dest_parent_id)
                .await?
                .filter(|d| d.space_id == space_id)
                .ok_or(StoreError::Conflict)?;
            if !dest.is_dir() {
                return Err(StoreError::Conflict);
            }
            let dest_path = live_path(c, &dest.id).await?.ok_or(StoreError::Conflict)?;
            let mut name = dest_name.to_owned();
            let mut replaced = None;
            if let Some(existing) = get_child(c, &dest.id, dest_name).await? {
                match conflict {
                    Conflict::Fail => return Err(StoreError::AlreadyExists),
                    Conflict::Skip => return Ok(Restored::Skipped),
                    Conflict::KeepBoth => {
                        name = free_in(&child_names(c, &dest.id).await?, dest_name);
                    }
                    Conflict::Replace => {
                        trash_tx(c, space_id, &existing.id, &Remover::by(actor)).await?;
                        replaced = Some(existing.id);
                    }
                }
            }
            let size = db_size(target.size)?;
            check_quota(c, space_id, quota, size).await?;
            sqlx::query("UPDATE nodes SET parent_id = $2, name = $3 WHERE id = $1")
                .bind(&target.id)
                .bind(&dest.id)
                .bind(&name)
                .execute(&mut *c)
                .await?;
            if target.id == item.key {
                sqlx::query("DELETE FROM trash WHERE node_id = $1")
                    .bind(&item.key)
                    .execute(&mut *c)
                    .await?;
            }
            let now = Some(now_ns());
            let from = target
                .parent_id
                .clone()
                .ok_or_else(|| StoreError::Corrupt("a trashed node without a parent".into()))?;
            propagate(c, &from, &new_id(), -size, now).await?;
            propagate(c, &dest.id, &new_id(), size, now).await?;
            let node = get_node(c, &target.id).await?.ok_or(StoreError::NotFound)?;
            Ok(Restored::Done {
                node: Box::new(node),
                path: join(&dest_path, &name),
                replaced,
            })
        }
        .await;
        w.finish(r).await
    }

    /// Restores trashed item `key` to where it was, recreating the folders on the way that
    /// are gone (renamed, removed) — what Nextcloud's restore and the bulk restore do.
    pub async fn restore_to_origin(
        &self,
        space_id: &str,
        key: &str,
        conflict: Conflict,
        actor: &str,
    ) -> Result<Restored> {
        let mut run = RestoreRun::new(self.clone(), space_id, conflict, actor, vec![key.into()]);
        run.fail_on_conflict = conflict == Conflict::Fail;
        run.step().await?;
        match run.last.take() {
            Some(Ok(done)) => Ok(done),
            Some(Err(e)) => Err(e),
            None => Err(StoreError::NotFound),
        }
    }

    /// A bulk restore of the space's items that `filter` takes, to their original places (see
    /// [`RestoreRun`]); nothing is restored until it is stepped.
    pub async fn restore_run(
        &self,
        space_id: &str,
        filter: &RestoreFilter,
        conflict: Conflict,
        actor: &str,
    ) -> Result<RestoreRun> {
        let mut c = self.read_conn().await?;
        let since = filter.since.map_or(i64::MIN, to_ns);
        let until = filter.until.map_or(i64::MAX, to_ns);
        // A filter on the client is exact: an empty one is "removed through no named client".
        let rows = sqlx::query(
            "SELECT node_id, location, name, deleted FROM trash \
             WHERE space_id = $1 AND deleted >= $2 AND deleted <= $3 \
             AND ($4 = '' OR deleted_by = $4) AND ($5 = 0 OR deleted_via = $6)",
        )
        .bind(space_id)
        .bind(since)
        .bind(until)
        .bind(filter.deleted_by.as_deref().unwrap_or(""))
        .bind(i64::from(filter.client.is_some()))
        .bind(filter.client.as_deref().unwrap_or(""))
        .fetch_all(&mut *c)
        .await?;
        drop(c);
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let (key, location, name, deleted): (String, String, String, i64) = (
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
            );
            let path = join(&location, &name);
            if filter.prefix.as_deref().is_some_and(|p| !within(&path, p)) {
                continue;
            }
            items.push((segs(&path).count(), std::cmp::Reverse(deleted), key));
        }
        // Shallow first, so a folder comes back before what was removed from inside it on
        // its own; among items of one depth the newest first, so of two removals of one name
        // the newer is what lands there.
        items.sort();
        let keys = items.into_iter().map(|(_, _, key)| key).collect();
        Ok(RestoreRun::new(
            self.clone(),
            space_id,
            conflict,
            actor,
            keys,
        ))
    }

    /// Purges trashed item `key` (or, with `sub`, the node at that path inside it): removes it
    /// for good and frees the blobs nothing else refers to.
    pub async fn purge_trash(&self, space_id: &str, key: &str, sub: &str) -> Result<Expired> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            lock_space(c, space_id).await?;
            let item = get_item(c, space_id, key)
                .await?
                .ok_or(StoreError::NotFound)?;
            let node = node_in_item(c, &item, sub).await?;
            purge_node(c, &node).await
        }
        .await;
        let (released, gone) = w.finish(r).await?;
        self.reclaim(&released).await?;
        Ok(gone)
    }

    /// Purges every item of a space's trash, a batch of items per transaction.
    pub async fn purge_trash_all(&self, space_id: &str) -> Result<Expired> {
        self.purge_where(space_id, i64::MAX, u64::MAX).await
    }

    /// One retention run over every trash at time `now`: items removed longer than
    /// `retention` ago are purged; then in each space with a quota whose trash holds more than
    /// `max_share` percent of it, the oldest items until it holds no more (0: no share bound).
    /// What went, summed over every space; [`expire_trash_by_space`](Self::expire_trash_by_space)
    /// says which space lost what.
    pub async fn expire_trash(
        &self,
        now: SystemTime,
        retention: Duration,
        max_share: u8,
    ) -> Result<Expired> {
        let mut done = Expired::default();
        for space in self
            .expire_trash_by_space(now, retention, max_share)
            .await?
        {
            done += space.gone;
        }
        Ok(done)
    }

    /// [`expire_trash`](Self::expire_trash), reporting each space that lost something, once
    /// per reason (age, then the quota share), in that order.
    pub async fn expire_trash_by_space(
        &self,
        now: SystemTime,
        retention: Duration,
        max_share: u8,
    ) -> Result<Vec<TrashExpiry>> {
        let cutoff = now
            .checked_sub(retention)
            .map_or(i64::MIN, to_ns)
            .saturating_add(1);
        let mut c = self.read_conn().await?;
        let rows = sqlx::query("SELECT DISTINCT space_id FROM trash WHERE deleted < $1")
            .bind(cutoff)
            .fetch_all(&mut *c)
            .await?;
        let over_share = if max_share > 0 {
            sqlx::query(
                "SELECT s.id, s.quota, r.size FROM spaces s JOIN nodes r ON r.id = s.id || '-trash' \
                 WHERE s.quota > 0 AND r.size > 0",
            )
            .fetch_all(&mut *c)
            .await?
        } else {
            Vec::new()
        };
        drop(c);
        let mut done = Vec::new();
        let mut total = Expired::default();
        for row in &rows {
            let space: String = row.try_get(0)?;
            let gone = self.purge_where(&space, cutoff, u64::MAX).await?;
            if gone != Expired::default() {
                total += gone;
                done.push(TrashExpiry {
                    space_id: space,
                    by_quota: false,
                    gone,
                });
            }
        }
        for row in &over_share {
            let (space, quota, size): (String, i64, i64) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            let allowed = share_of(quota, max_share);
            if size > allowed {
                let over = u64::try_from(size - allowed).unwrap_or(0);
                let gone = self.purge_where(&space, i64::MAX, over).await?;
                if gone != Expired::default() {
                    total += gone;
                    done.push(TrashExpiry {
                        space_id: space,
                        by_quota: true,
                        gone,
                    });
                }
            }
        }
        if total.items > 0 {
            tracing::info!(
                items = total.items,
                bytes = total.bytes,
                "expired trash items"
            );
        }
        Ok(done)
    }

    /// Purges the space's oldest items removed before `before` (ns) until `bytes` are gone
    /// (`u64::MAX`: all of them), a few items per transaction.
    async fn purge_where(&self, space_id: &str, before: i64, bytes: u64) -> Result<Expired> {
        let mut done = Expired::default();
        while done.bytes < bytes {
            let mut w = self.db().begin_write().await?;
            let r = async {
                let c = w.conn();
                lock_space(c, space_id).await?;
                // Oldest removals first.
                let rows = sqlx::query(concat!(
                    "SELECT ",
                    item_cols!(),
                    " FROM trash t JOIN nodes n ON n.id = t.node_id \
                     WHERE t.space_id = $1 AND t.deleted < $2 ORDER BY t.deleted, t.node_id LIMIT 32"
                ))
                .bind(space_id)
                .bind(before)
                .fetch_all(&mut *c)
                .await?;
                let items = rows.iter().map(item_from_row).collect::<Result<Vec<_>>>()?;
                let mut released = Vec::new();
                let mut batch = Expired::default();
                for item in &items {
                    if done.bytes + batch.bytes >= bytes {
                        break;
                    }
                    let (mut r, gone) = purge_node(c, &item.node).await?;
                    released.append(&mut r);
                    batch += gone;
                }
                Ok((released, batch, items.is_empty()))
            }
            .await;
            let (released, batch, empty) = w.finish(r).await?;
            self.reclaim(&released).await?;
            done += batch;
            if empty {
                break;
            }
        }
        Ok(done)
    }

    /// A space's live, trash and version bytes.
    pub async fn space_usage(&self, space_id: &str) -> Result<SpaceUsage> {
        let mut c = self.read_conn().await?;
        let row = sqlx::query(
            "SELECT r.size, \
               COALESCE((SELECT size FROM nodes WHERE id = $2), 0), \
               (SELECT count(*) FROM trash WHERE space_id = $1), \
               COALESCE((SELECT CAST(SUM(size) AS BIGINT) FROM versions WHERE space_id = $1), 0), \
               (SELECT count(*) FROM versions WHERE space_id = $1) \
             FROM nodes r WHERE r.id = $1",
        )
        .bind(space_id)
        .bind(trash_root_id(space_id))
        .fetch_optional(&mut *c)
        .await?
        .ok_or(StoreError::NotFound)?;
        let n = |i: usize| -> Result<u64> {
            let v: i64 = row.try_get(i)?;
            Ok(u64::try_from(v).unwrap_or(0))
        };
        Ok(SpaceUsage {
            used: n(0)?,
            trash: n(1)?,
            trash_items: n(2)?,
            versions: n(3)?,
            version_count: n(4)?,
        })
    }

    /// Bytes of every committed blob the store holds: what its blob store uses, whoever
    /// refers to them (blobs released but not yet collected included).
    pub async fn blob_bytes(&self) -> Result<u64> {
        let mut c = self.read_conn().await?;
        let row =
            sqlx::query("SELECT COALESCE(CAST(SUM(size) AS BIGINT), 0) FROM blobs WHERE state = 1")
                .fetch_one(&mut *c)
                .await?;
        let v: i64 = row.try_get(0)?;
        Ok(u64::try_from(v).unwrap_or(0))
    }

    /// Deletes at once the blobs among `ids` that nothing refers to any more (no node, no
    /// version), rows first, then objects, as the collector does (see `gc`). For purges and
    /// expiry: the user asked for the bytes to go. Blobs still referenced stay released for the
    /// collector to clear.
    pub(crate) async fn reclaim(&self, ids: &[String]) -> Result<()> {
        for chunk in ids.chunks(256) {
            let list = super::commit::placeholders(1, chunk.len());
            // Safe: built from constants and the count; every value is bound.
            let sql = format!(
                "DELETE FROM blobs WHERE id IN ({list}) AND state = 1 \
                 AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.blob_id = blobs.id) \
                 AND NOT EXISTS (SELECT 1 FROM versions v WHERE v.blob_id = blobs.id) \
                 RETURNING id"
            );
            let mut w = self.db().begin_write().await?;
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                q = q.bind(id.as_str());
            }
            let r = q
                .fetch_all(w.conn())
                .await
                .map_err(StoreError::from)
                .and_then(|rows| crate::db::first_strings(&rows));
            let gone = w.finish(r).await?;
            if !gone.is_empty() {
                self.blobs().delete_many(&gone).await?;
            }
        }
        Ok(())
    }
}

/// [`Store::trash_noting`]'s work on a write transaction.
async fn trash_noting_tx(
    c: &mut sqlx::AnyConnection,
    space_id: &str,
    id: &str,
    remover: Remover<'_>,
    rules: &super::bursts::BurstRules,
) -> Result<(TrashItem, Option<super::bursts::Burst>)> {
    lock_space(c, space_id).await?;
    let item = trash_tx(c, space_id, id, &remover).await?;
    let burst = super::bursts::note_removal_tx(c, &item, remover, rules).await?;
    Ok((item, burst))
}

/// Removes `node` (in the trash) for good, with the bookkeeping of its item; returns the
/// released blobs and what went.
async fn purge_node(c: &mut AnyConnection, node: &Node) -> Result<(Vec<String>, Expired)> {
    let files = count_files(c, &node.id).await?;
    let parent = node
        .parent_id
        .clone()
        .ok_or(StoreError::Forbidden("a space root cannot be purged"))?;
    let released = remove_subtree(c, node).await?;
    propagate(c, &parent, &new_id(), -db_size(node.size)?, Some(now_ns())).await?;
    Ok((
        released,
        Expired {
            items: files,
            bytes: node.size,
        },
    ))
}

/// Items restored per transaction: bounds how long one holds the write lock.
const RESTORE_BATCH: usize = 256;

/// A bulk restore in progress: every [`step`](Self::step) restores the next batch of items in
/// one transaction (see the module docs for the order and for conflicts). Built by
/// [`Store::restore_run`].
pub struct RestoreRun {
    store: Store,
    space_id: String,
    conflict: Conflict,
    actor: String,
    keys: VecDeque<String>,
    batch: usize,
    tally: RestoreTally,
    /// Live directories by path, resolved or created by this run, and their paths by id.
    dirs: HashMap<String, String>,
    paths: HashMap<String, String>,
    /// Names taken in the directories this run restores into.
    names: HashMap<String, HashSet<String>>,
    /// (directory, name) pairs this run restored: never replaced by an older item.
    placed: HashSet<(String, String)>,
    /// A single restore refuses a taken name instead of skipping.
    fail_on_conflict: bool,
    /// The outcome of the last item (single restores read it).
    last: Option<Result<Restored>>,
}

/// One item's planned move.
struct Move {
    id: String,
    dir: String,
    name: String,
    size: i64,
}

impl RestoreRun {
    fn new(
        store: Store,
        space_id: &str,
        conflict: Conflict,
        actor: &str,
        keys: Vec<String>,
    ) -> Self {
        RestoreRun {
            store,
            space_id: space_id.to_owned(),
            conflict,
            actor: actor.to_owned(),
            tally: RestoreTally {
                total: keys.len() as u64,
                ..RestoreTally::default()
            },
            keys: keys.into(),
            batch: RESTORE_BATCH,
            dirs: HashMap::new(),
            paths: HashMap::new(),
            names: HashMap::new(),
            placed: HashSet::new(),
            fail_on_conflict: false,
            last: None,
        }
    }

    /// Items per transaction (at least one).
    pub fn with_batch(mut self, items: usize) -> Self {
        self.batch = items.max(1);
        self
    }

    /// The counts so far.
    pub fn tally(&self) -> RestoreTally {
        self.tally
    }

    /// Whether every item was taken.
    pub fn is_done(&self) -> bool {
        self.keys.is_empty()
    }

    /// Restores the next batch in one transaction; `false` once nothing is left. On an error
    /// the batch is rolled back (its items stay in the trash) and the run should be dropped.
    pub async fn step(&mut self) -> Result<bool> {
        if self.keys.is_empty() {
            return Ok(false);
        }
        let n = self.batch.min(self.keys.len());
        let keys: Vec<String> = self.keys.drain(..n).collect();
        let store = self.store.clone();
        let mut w = store.db().begin_write().await?;
        let before = (
            self.dirs.clone(),
            self.paths.clone(),
            self.names.clone(),
            self.placed.clone(),
        );
        let r = self.batch_tx(w.conn(), &keys).await;
        match w.finish(r).await {
            Ok(tally) => {
                self.tally = tally;
                Ok(true)
            }
            Err(e) => {
                // What this batch cached never happened.
                (self.dirs, self.paths, self.names, self.placed) = before;
                Err(e)
            }
        }
    }

    async fn batch_tx(&mut self, c: &mut AnyConnection, keys: &[String]) -> Result<RestoreTally> {
        let space_id = self.space_id.clone();
        let quota = lock_space(c, &space_id).await?;
        let mut used: i64 = sqlx::query("SELECT size FROM nodes WHERE id = $1")
            .bind(&space_id)
            .fetch_one(&mut *c)
            .await?
            .try_get(0)?;
        let mut tally = self.tally;
        let mut moves: Vec<Move> = Vec::new();
        let mut files = 0u64;
        for key in keys {
            // Gone meanwhile (purged, restored by someone else): nothing to do.
            let Some(item) = get_item(c, &space_id, key).await? else {
                tally.skipped += 1;
                continue;
            };
            let dir = self.dir_for(c, &item.location).await?;
            if !self.names.contains_key(&dir) {
                let names = child_names(c, &dir).await?;
                self.names.insert(dir.clone(), names);
            }
            let mut name = item.name.clone();
            let mut replaced = None;
            let taken = self.names.get(&dir).is_some_and(|n| n.contains(&name));
            if taken {
                let ours = self.placed.contains(&(dir.clone(), name.clone()));
                let policy = if self.fail_on_conflict {
                    Conflict::Fail
                } else if ours && self.conflict != Conflict::KeepBoth {
                    Conflict::Skip
                } else {
                    self.conflict
                };
                match policy {
                    Conflict::Fail => {
                        tally.skipped += 1;
                        self.last = Some(Err(StoreError::AlreadyExists));
                        continue;
                    }
                    Conflict::Skip => {
                        tally.skipped += 1;
                        self.last = Some(Ok(Restored::Skipped));
                        continue;
                    }
                    Conflict::KeepBoth => {
                        let taken = self.names.get(&dir).cloned().unwrap_or_default();
                        name = free_in(&taken, &item.name);
                        tally.renamed += 1;
                    }
                    Conflict::Replace => {
                        let existing = get_child(c, &dir, &name).await?.ok_or_else(|| {
                            StoreError::Corrupt("a taken name has no node".into())
                        })?;
                        trash_tx(c, &space_id, &existing.id, &Remover::by(&self.actor)).await?;
                        used -= db_size(existing.size)?;
                        // What was cached below the replaced folder is in the trash now.
                        let gone = join(&self.path_of_dir(&dir), &name);
                        self.forget_below(&gone);
                        replaced = Some(existing.id);
                        tally.replaced += 1;
                    }
                }
            }
            let size = db_size(item.node.size)?;
            if let Some(q) = quota
                && size > 0
                && used.saturating_add(size) > i64::try_from(q).unwrap_or(i64::MAX)
            {
                tally.over_quota += 1;
                self.last = Some(Err(StoreError::QuotaExceeded));
                continue;
            }
            used += size;
            if let Some(names) = self.names.get_mut(&dir) {
                names.insert(name.clone());
            }
            self.placed.insert((dir.clone(), name.clone()));
            let path = join(&self.path_of_dir(&dir), &name);
            if item.node.is_dir() {
                self.remember(&path, &item.key);
                files += count_files(c, &item.key).await?;
            } else {
                files += 1;
            }
            tally.restored += 1;
            tally.bytes += item.node.size;
            let mut node = item.node.clone();
            node.parent_id = Some(dir.clone());
            node.name.clone_from(&name);
            self.last = Some(Ok(Restored::Done {
                node: Box::new(node),
                path,
                replaced,
            }));
            moves.push(Move {
                id: item.key,
                dir,
                name,
                size,
            });
        }
        apply_moves(c, &space_id, &moves).await?;
        tally.files += files;
        Ok(tally)
    }

    /// The path of a directory this run knows (resolved or restored), `/` for the root.
    fn path_of_dir(&self, dir: &str) -> String {
        self.paths
            .get(dir)
            .cloned()
            .unwrap_or_else(|| "/".to_owned())
    }

    fn remember(&mut self, path: &str, id: &str) {
        self.dirs.insert(path.to_owned(), id.to_owned());
        self.paths.insert(id.to_owned(), path.to_owned());
    }

    /// Forgets the directories at or below `path` (it went to the trash).
    fn forget_below(&mut self, path: &str) {
        self.dirs.retain(|p, _| !within(p, path));
        self.paths.retain(|_, p| !within(p, path));
    }

    /// The live directory at `location`, creating what is missing on the way (a name taken
    /// by a file gets the folder beside it as `name (2)`).
    async fn dir_for(&mut self, c: &mut AnyConnection, location: &str) -> Result<String> {
        let mut path = String::from("/");
        let mut dir = self.space_id.clone();
        for seg in segs(location) {
            let next = join(&path, seg);
            if let Some(id) = self.dirs.get(&next) {
                dir = id.clone();
                path = next;
                continue;
            }
            let (id, real) = match get_child(c, &dir, seg).await? {
                Some(n) if n.is_dir() => (n.id, next.clone()),
                Some(_) => {
                    let taken = child_names(c, &dir).await?;
                    let name = free_in(&taken, seg);
                    let id = insert_dir(c, &self.space_id, &dir, &name).await?;
                    (id, join(&path, &name))
                }
                None => {
                    let id = insert_dir(c, &self.space_id, &dir, seg).await?;
                    (id, next.clone())
                }
            };
            if let Some(names) = self.names.get_mut(&dir) {
                names.insert(real.rsplit('/').next().unwrap_or(seg).to_owned());
            }
            // Found under its original path from now on; its own path is where it is.
            self.dirs.insert(next.clone(), id.clone());
            self.remember(&real, &id);
            dir = id;
            path = next;
        }
        Ok(dir)
    }
}

/// Files in the subtree of `id` (the node itself if it is one).
async fn count_files(c: &mut AnyConnection, id: &str) -> Result<u64> {
    let row = sqlx::query(
        "WITH RECURSIVE sub(sid) AS ( \
           SELECT id FROM nodes WHERE id = $1 \
           UNION ALL \
           SELECT n.id FROM nodes n JOIN sub ON n.parent_id = sub.sid \
         ) SELECT count(*) FROM nodes n JOIN sub ON n.id = sub.sid WHERE n.kind = $2",
    )
    .bind(id)
    .bind(NodeKind::File.to_db())
    .fetch_one(&mut *c)
    .await?;
    let n: i64 = row.try_get(0)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Writes a batch's moves: one statement re-parents and renames every item, one drops their
/// trash rows, then one propagation per destination and one for the trash root.
async fn apply_moves(c: &mut AnyConnection, space_id: &str, moves: &[Move]) -> Result<()> {
    use std::fmt::Write as _;
    if moves.is_empty() {
        return Ok(());
    }
    for chunk in moves.chunks(128) {
        let n = chunk.len();
        let mut sql = String::from("UPDATE nodes SET parent_id = CASE id");
        for i in 0..n {
            let _ = write!(sql, " WHEN ${} THEN ${}", 3 * i + 1, 3 * i + 2);
        }
        sql.push_str(" END, name = CASE id");
        for i in 0..n {
            let _ = write!(sql, " WHEN ${} THEN ${}", 3 * i + 1, 3 * i + 3);
        }
        sql.push_str(" END WHERE id IN (");
        for i in 0..n {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(sql, "{sep}${}", 3 * i + 1);
        }
        sql.push(')');
        // Safe: built from constants and the count; every value is bound.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for m in chunk {
            q = q
                .bind(m.id.as_str())
                .bind(m.dir.as_str())
                .bind(m.name.as_str());
        }
        q.execute(&mut *c).await?;
        let sql = format!(
            "DELETE FROM trash WHERE node_id IN ({})",
            super::commit::placeholders(1, n)
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for m in chunk {
            q = q.bind(m.id.as_str());
        }
        q.execute(&mut *c).await?;
    }
    let mut per_dir: Vec<(&str, i64)> = Vec::new();
    for m in moves {
        match per_dir.iter_mut().find(|(d, _)| *d == m.dir) {
            Some((_, sum)) => *sum += m.size,
            None => per_dir.push((&m.dir, m.size)),
        }
    }
    let now = Some(now_ns());
    for (dir, sum) in per_dir {
        propagate(c, dir, &new_id(), sum, now).await?;
    }
    let total: i64 = moves.iter().map(|m| m.size).sum();
    propagate(c, &trash_root_id(space_id), &new_id(), -total, None).await?;
    Ok(())
}
