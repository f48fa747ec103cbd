//! Structural changes: mkdir, delete, move, copy. Each is one transaction under the space lock,
//! and each gives every changed ancestor chain a new etag and corrected sizes before commit.

use std::collections::HashMap;

use sqlx::AnyConnection;

use super::trash::{Remover, trash_tx};
use super::versions::{Content, VersionRules, replace_content};
use super::{
    Store, check_quota, get_node, is_ancestor_or_self, lock_space, parent_and_child, propagate,
    remove_subtree, subtree,
};
use crate::db::db_size;
use crate::ids::{new_id, now_ns, to_ns};
use crate::model::{Node, NodeKind};
use crate::names::validate_name;
use crate::{Result, StoreError};

impl Store {
    /// Creates a directory. `Conflict` if the parent is missing, `NotADirectory` if it is a
    /// file, `AlreadyExists` if the name is taken.
    pub async fn mkdir(&self, parent_id: &str, name: &str) -> Result<Node> {
        validate_name(name)?;
        let space_id = self.space_of(parent_id).await.map_err(missing_parent)?;
        if self.batches_writes() {
            let (parent_id, name) = (parent_id.to_owned(), name.to_owned());
            return self
                .committer()
                .write(move |c| {
                    let (space_id, parent_id, name) =
                        (space_id.clone(), parent_id.clone(), name.clone());
                    Box::pin(async move { mkdir_tx(c, &space_id, &parent_id, &name).await })
                })
                .await;
        }
        let mut w = self.db().begin_write().await?;
        let r = mkdir_tx(w.conn(), &space_id, parent_id, name).await;
        w.finish(r).await
    }

    /// Deletes a node and, for a directory, everything below it. The blobs become orphans for
    /// [`Store::collect_orphans`]. A space root cannot be deleted (delete the space instead).
    pub async fn delete(&self, id: &str) -> Result<()> {
        let node = self.stat(id).await?;
        let mut w = self.db().begin_write().await?;
        let r = delete_tx(w.conn(), &node.space_id, id).await;
        w.finish(r).await
    }

    /// Moves and/or renames a node inside its space. The id (and the node's own etag) stay; both
    /// the old and the new ancestor chains get new etags and corrected sizes. With `overwrite`
    /// an existing target is replaced, otherwise it is `AlreadyExists`; see
    /// [`move_node_as`](Self::move_node_as) for what becomes of it.
    pub async fn move_node(
        &self,
        id: &str,
        new_parent_id: &str,
        new_name: &str,
        overwrite: bool,
    ) -> Result<Node> {
        self.move_node_as(id, new_parent_id, new_name, overwrite, "")
            .await
    }

    /// [`move_node`](Self::move_node) by `actor`. A replaced target goes to the trash when the
    /// store keeps removed items ([`StoreConfig::trash`](crate::StoreConfig)), removed by
    /// `actor` — except a file replaced by a file whose content the version rules keep: that
    /// is an overwrite, so the target keeps its id, shares and history, takes the moved file's
    /// content, properties and versions, and its previous content becomes a version (the
    /// moved node itself is gone; the answer is the target). Without trash it is removed.
    pub async fn move_node_as(
        &self,
        id: &str,
        new_parent_id: &str,
        new_name: &str,
        overwrite: bool,
        actor: &str,
    ) -> Result<Node> {
        validate_name(new_name)?;
        let node = self.stat(id).await?;
        let undo = self.undo(actor);
        let mut w = self.db().begin_write().await?;
        let r = move_tx(
            w.conn(),
            &node.space_id,
            id,
            new_parent_id,
            new_name,
            overwrite,
            &undo,
        )
        .await;
        w.finish(r).await
    }

    /// What removals by `actor` keep, by this store's configuration.
    fn undo<'a>(&'a self, actor: &'a str) -> Undo<'a> {
        Undo {
            trash: self.inner.trash,
            versions: self.inner.versions.as_deref(),
            actor,
        }
    }

    /// Copies a node to `new_parent_id/new_name`, possibly in another space. Copies get new ids
    /// and share the file blobs by reference (the collector checks references, so no counts are
    /// kept). A directory is copied with its whole subtree when `depth_infinity`, otherwise as an
    /// empty directory (WebDAV `Depth: 0`). Dead properties are copied too.
    pub async fn copy_node(
        &self,
        id: &str,
        new_parent_id: &str,
        new_name: &str,
        overwrite: bool,
        depth_infinity: bool,
    ) -> Result<Node> {
        self.copy_node_as(id, new_parent_id, new_name, overwrite, depth_infinity, "")
            .await
    }

    /// [`copy_node`](Self::copy_node) by `actor`; a replaced target is kept as
    /// [`move_node_as`](Self::move_node_as) keeps one (a file copied onto a file overwrites it
    /// in place, its previous content becoming a version).
    pub async fn copy_node_as(
        &self,
        id: &str,
        new_parent_id: &str,
        new_name: &str,
        overwrite: bool,
        depth_infinity: bool,
        actor: &str,
    ) -> Result<Node> {
        validate_name(new_name)?;
        let undo = self.undo(actor);
        let src = self.stat(id).await?;
        let dest_space = self.space_of(new_parent_id).await.map_err(missing_parent)?;
        let mut w = self.db().begin_write().await?;
        let r = copy_tx(
            w.conn(),
            &src.space_id,
            &dest_space,
            id,
            new_parent_id,
            new_name,
            overwrite,
            depth_infinity,
            &undo,
        )
        .await;
        w.finish(r).await
    }
}

/// What a copy or move does with a target it replaces (see [`Store::move_node_as`]).
struct Undo<'a> {
    trash: bool,
    versions: Option<&'a VersionRules>,
    actor: &'a str,
}

impl Undo<'_> {
    /// Whether replacing `dest` (named `name`) with `src` is an overwrite kept as a version.
    fn versions_overwrite(&self, src: &Node, dest: &Node, name: &str) -> bool {
        self.trash
            && !src.is_dir()
            && !dest.is_dir()
            && self.versions.is_some_and(|r| r.keeps(name, dest.size))
    }
}

/// Makes file `dest` take `src`'s content and dead properties in place (its previous content
/// becoming a version); with `take_history`, `src`'s versions too.
async fn overwrite_file(
    c: &mut AnyConnection,
    src: &Node,
    dest: &Node,
    take_history: bool,
) -> Result<Node> {
    let node = replace_content(c, dest, &Content::of_node(src)?, true).await?;
    if take_history {
        sqlx::query("UPDATE versions SET node_id = $2 WHERE node_id = $1")
            .bind(&src.id)
            .bind(&dest.id)
            .execute(&mut *c)
            .await?;
    }
    sqlx::query("DELETE FROM props WHERE node_id = $1")
        .bind(&dest.id)
        .execute(&mut *c)
        .await?;
    sqlx::query(
        "INSERT INTO props (node_id, ns, name, value) \
         SELECT $1, ns, name, value FROM props WHERE node_id = $2",
    )
    .bind(&dest.id)
    .bind(&src.id)
    .execute(&mut *c)
    .await?;
    Ok(node)
}

fn missing_parent(e: StoreError) -> StoreError {
    match e {
        StoreError::NotFound => StoreError::Conflict,
        e => e,
    }
}

async fn mkdir_tx(
    c: &mut AnyConnection,
    space_id: &str,
    parent_id: &str,
    name: &str,
) -> Result<Node> {
    lock_space(c, space_id).await?;
    let (parent, existing) = parent_and_child(c, parent_id, name).await?;
    let parent = parent.ok_or(StoreError::Conflict)?;
    if !parent.is_dir() {
        return Err(StoreError::NotADirectory);
    }
    if existing.is_some() {
        return Err(StoreError::AlreadyExists);
    }
    let id = insert_dir(c, space_id, parent_id, name).await?;
    get_node(c, &id).await?.ok_or(StoreError::NotFound)
}

/// Inserts directory `name` into `parent_id` and propagates; the caller holds the space lock
/// and has checked the parent. Returns the new id.
pub(crate) async fn insert_dir(
    c: &mut AnyConnection,
    space_id: &str,
    parent_id: &str,
    name: &str,
) -> Result<String> {
    let now = now_ns();
    let etag = new_id();
    let id = new_id();
    sqlx::query(
        "INSERT INTO nodes (id, space_id, parent_id, name, kind, size, mtime, etag, created) \
         VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $6)",
    )
    .bind(&id)
    .bind(space_id)
    .bind(parent_id)
    .bind(name)
    .bind(NodeKind::Dir.to_db())
    .bind(now)
    .bind(&etag)
    .execute(&mut *c)
    .await
    .map_err(|e| match StoreError::from(e) {
        e if e.is_unique_violation() => StoreError::AlreadyExists,
        e => e,
    })?;
    propagate(c, parent_id, &etag, 0, Some(now)).await?;
    Ok(id)
}

async fn delete_tx(c: &mut AnyConnection, space_id: &str, id: &str) -> Result<()> {
    lock_space(c, space_id).await?;
    let node = get_node(c, id).await?.ok_or(StoreError::NotFound)?;
    let Some(parent_id) = node.parent_id.clone() else {
        return Err(StoreError::Forbidden("a space root cannot be deleted"));
    };
    remove_subtree(c, &node).await?;
    propagate(
        c,
        &parent_id,
        &new_id(),
        -db_size(node.size)?,
        Some(now_ns()),
    )
    .await
}

async fn move_tx(
    c: &mut AnyConnection,
    space_id: &str,
    id: &str,
    new_parent_id: &str,
    new_name: &str,
    overwrite: bool,
    undo: &Undo<'_>,
) -> Result<Node> {
    lock_space(c, space_id).await?;
    let node = get_node(c, id).await?.ok_or(StoreError::NotFound)?;
    let Some(old_parent_id) = node.parent_id.clone() else {
        return Err(StoreError::Forbidden("a space root cannot be moved"));
    };
    let (parent, existing) = parent_and_child(c, new_parent_id, new_name).await?;
    let parent = parent.ok_or(StoreError::Conflict)?;
    if parent.space_id != node.space_id {
        return Err(StoreError::Forbidden("cannot move across spaces"));
    }
    if !parent.is_dir() {
        return Err(StoreError::NotADirectory);
    }
    if node.is_dir() && is_ancestor_or_self(c, &node.id, &parent.id).await? {
        return Err(StoreError::Forbidden(
            "cannot move a directory into its own subtree",
        ));
    }
    let etag = new_id();
    if let Some(dest) = existing {
        if dest.id == node.id {
            return Err(StoreError::Forbidden("source and destination are the same"));
        }
        if !overwrite {
            return Err(StoreError::AlreadyExists);
        }
        if is_ancestor_or_self(c, &dest.id, &node.id).await? {
            return Err(StoreError::Forbidden(
                "cannot overwrite an ancestor of the source",
            ));
        }
        if undo.versions_overwrite(&node, &dest, new_name) {
            let moved = overwrite_file(c, &node, &dest, true).await?;
            // The source's content lives on in the target: its node goes without releasing
            // the blob.
            sqlx::query("DELETE FROM nodes WHERE id = $1")
                .bind(&node.id)
                .execute(&mut *c)
                .await?;
            propagate(
                c,
                &old_parent_id,
                &etag,
                -db_size(node.size)?,
                Some(now_ns()),
            )
            .await?;
            return get_node(c, &moved.id).await?.ok_or(StoreError::NotFound);
        }
        if undo.trash {
            trash_tx(c, space_id, &dest.id, &Remover::by(undo.actor)).await?;
        } else {
            remove_subtree(c, &dest).await?;
            propagate(c, &parent.id, &etag, -db_size(dest.size)?, None).await?;
        }
    }
    sqlx::query("UPDATE nodes SET parent_id = $2, name = $3 WHERE id = $1")
        .bind(id)
        .bind(new_parent_id)
        .bind(new_name)
        .execute(&mut *c)
        .await?;
    let size = db_size(node.size)?;
    // Two walks: the common part of the chains gets -size then +size, i.e. no net change.
    let now = Some(now_ns());
    propagate(c, &old_parent_id, &etag, -size, now).await?;
    propagate(c, new_parent_id, &etag, size, now).await?;
    get_node(c, id).await?.ok_or(StoreError::NotFound)
}

#[allow(clippy::too_many_arguments)]
async fn copy_tx(
    c: &mut AnyConnection,
    src_space: &str,
    dest_space: &str,
    id: &str,
    new_parent_id: &str,
    new_name: &str,
    overwrite: bool,
    depth_infinity: bool,
    undo: &Undo<'_>,
) -> Result<Node> {
    // Two spaces are locked in id order so two opposite cross-space copies cannot deadlock.
    let (first, second) = if src_space <= dest_space {
        (src_space, dest_space)
    } else {
        (dest_space, src_space)
    };
    let q1 = lock_space(c, first).await?;
    let quota = if first == second {
        q1
    } else {
        let q2 = lock_space(c, second).await?;
        if first == dest_space { q1 } else { q2 }
    };

    let src = get_node(c, id).await?.ok_or(StoreError::NotFound)?;
    let (parent, existing) = parent_and_child(c, new_parent_id, new_name).await?;
    let parent = parent.ok_or(StoreError::Conflict)?;
    if !parent.is_dir() {
        return Err(StoreError::NotADirectory);
    }
    if src.is_dir() && is_ancestor_or_self(c, &src.id, &parent.id).await? {
        return Err(StoreError::Forbidden("cannot copy a directory into itself"));
    }
    let etag = new_id();
    let mut removed = 0i64;
    if let Some(dest) = existing {
        if dest.id == src.id {
            return Err(StoreError::Forbidden("source and destination are the same"));
        }
        if !overwrite {
            return Err(StoreError::AlreadyExists);
        }
        if is_ancestor_or_self(c, &dest.id, &src.id).await? {
            return Err(StoreError::Forbidden(
                "cannot overwrite an ancestor of the source",
            ));
        }
        if undo.versions_overwrite(&src, &dest, new_name) {
            check_quota(
                c,
                dest_space,
                quota,
                db_size(src.size)? - db_size(dest.size)?,
            )
            .await?;
            return overwrite_file(c, &src, &dest, false).await;
        }
        if undo.trash {
            // The trash takes it out of the space's size at once.
            trash_tx(c, dest_space, &dest.id, &Remover::by(undo.actor)).await?;
        } else {
            remove_subtree(c, &dest).await?;
            removed = db_size(dest.size)?;
        }
    }

    let whole = !src.is_dir() || depth_infinity;
    let nodes = if src.is_dir() && depth_infinity {
        subtree(c, &src.id).await?
    } else {
        vec![src.clone()]
    };
    let added = if whole { db_size(src.size)? } else { 0 };
    check_quota(c, dest_space, quota, added - removed).await?;

    let now = now_ns();
    let mut new_ids: HashMap<&str, String> = HashMap::with_capacity(nodes.len());
    let mut root_copy = None;
    for (i, n) in nodes.iter().enumerate() {
        let copy_id = new_id();
        let (parent_id, name) = if i == 0 {
            (new_parent_id, new_name)
        } else {
            let parent = n
                .parent_id
                .as_deref()
                .and_then(|p| new_ids.get(p))
                .ok_or_else(|| StoreError::Corrupt("subtree out of order".into()))?;
            (parent.as_str(), n.name.as_str())
        };
        let size = if whole { db_size(n.size)? } else { 0 };
        let (sha1, md5, adler32) = match &n.checksums {
            Some(cs) => (
                Some(cs.sha1.as_str()),
                Some(cs.md5.as_str()),
                Some(cs.adler32.as_str()),
            ),
            None => (None, None, None),
        };
        sqlx::query(
            "INSERT INTO nodes (id, space_id, parent_id, name, kind, size, mtime, etag, blob_id, \
             sha1, md5, adler32, created) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(&copy_id)
        .bind(dest_space)
        .bind(parent_id)
        .bind(name)
        .bind(n.kind.to_db())
        .bind(size)
        .bind(to_ns(n.mtime))
        .bind(&etag)
        .bind(n.blob_id.as_deref())
        .bind(sha1)
        .bind(md5)
        .bind(adler32)
        .bind(now)
        .execute(&mut *c)
        .await?;
        sqlx::query(
            "INSERT INTO props (node_id, ns, name, value) \
             SELECT $1, ns, name, value FROM props WHERE node_id = $2",
        )
        .bind(&copy_id)
        .bind(&n.id)
        .execute(&mut *c)
        .await?;
        if i == 0 {
            root_copy = Some(copy_id.clone());
        }
        new_ids.insert(n.id.as_str(), copy_id);
    }
    propagate(c, new_parent_id, &etag, added - removed, Some(now)).await?;
    let root_copy = root_copy.ok_or(StoreError::NotFound)?;
    get_node(c, &root_copy).await?.ok_or(StoreError::NotFound)
}
