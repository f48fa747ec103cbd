//! WebDAV locks (RFC 4918 §6-7): kept in the metadata database so that every provider
//! instance enforces the same locks.
//!
//! Locks are on paths, not nodes: a lock may be taken on an unmapped URL, and a MOVE does not
//! carry its source's locks along (§7.7). Expired locks are ignored when read and purged when
//! a lock is written.

use crate::db::Cols;
use crate::ids::now_ms;
use crate::store::{Arg, lock_space};
use crate::{Result, Store, StoreError};

/// An active lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// `opaquelocktoken:<uuid>`.
    pub token: String,
    pub space_id: String,
    /// Space-relative, `/`-separated, no trailing slash (`/` for the root).
    pub root_path: String,
    pub exclusive: bool,
    /// `Depth: infinity`: the lock covers everything below its root too.
    pub deep: bool,
    /// The client's `<owner>` XML, echoed in lock discovery.
    pub owner_xml: String,
    /// The user who took the lock: only they can use its token.
    pub holder: String,
    /// Milliseconds since the epoch; 0 = never.
    pub expires_ms: i64,
}

impl Lock {
    /// Whether this lock applies to `path`: its root, or below a deep lock's root.
    pub fn covers(&self, path: &str) -> bool {
        self.root_path == path || (self.deep && is_below(path, &self.root_path))
    }

    /// Whether the lock's root is `path` or below it (for operations on a whole subtree).
    pub fn within(&self, path: &str) -> bool {
        self.root_path == path || is_below(&self.root_path, path)
    }

    fn expired(&self, now: i64) -> bool {
        self.expires_ms != 0 && self.expires_ms <= now
    }
}

/// `/a/b` is below `/a` and below `/`.
fn is_below(path: &str, ancestor: &str) -> bool {
    if ancestor == "/" {
        return path != "/";
    }
    path.len() > ancestor.len()
        && path.starts_with(ancestor)
        && path.as_bytes()[ancestor.len()] == b'/'
}

macro_rules! lock_cols {
    () => {
        "token, space_id, root_path, exclusive, deep, owner_xml, holder, expires"
    };
}

fn from_row(row: &impl Cols) -> Result<Lock> {
    Ok(Lock {
        token: row.text(0)?,
        space_id: row.text(1)?,
        root_path: row.text(2)?,
        exclusive: row.int(3)? != 0,
        deep: row.int(4)? != 0,
        owner_xml: row.text(5)?,
        holder: row.text(6)?,
        expires_ms: row.int(7)?,
    })
}

impl Store {
    /// The live locks of a space (few: a handful per space at most in practice).
    pub async fn space_locks(&self, space_id: &str) -> Result<Vec<Lock>> {
        const SQL: &str = concat!("SELECT ", lock_cols!(), " FROM locks WHERE space_id = $1");
        let rows = self
            .read_rows(SQL, &[Arg::Text(space_id)], usize::MAX)
            .await?;
        let now = now_ms();
        Ok(rows
            .iter()
            .map(from_row)
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .filter(|l| !l.expired(now))
            .collect())
    }

    /// Takes a lock unless it conflicts with a live one (§6.1: an exclusive lock conflicts with
    /// any other; shared locks coexist). The check and the insert are one transaction, and it
    /// holds the space's write lock: on PostgreSQL (read committed) two instances could
    /// otherwise both find no conflict and both insert. `NotFound` if the space does not exist.
    pub async fn create_lock(&self, lock: &Lock) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            // Serialises lock takers of one space, across instances, until the commit: the
            // same row lock every tree write of the space takes (see `store`).
            lock_space(w.conn(), &lock.space_id).await?;
            let now = now_ms();
            sqlx::query("DELETE FROM locks WHERE expires <> 0 AND expires <= $1")
                .bind(now)
                .execute(w.conn())
                .await?;
            let rows = sqlx::query(concat!("SELECT ", lock_cols!(), " FROM locks WHERE space_id = $1"))
                .bind(&lock.space_id)
                .fetch_all(w.conn())
                .await?;
            for existing in rows.iter().map(from_row) {
                let existing = existing?;
                let overlaps = existing.covers(&lock.root_path) || (lock.deep && existing.within(&lock.root_path));
                if overlaps && (existing.exclusive || lock.exclusive) {
                    return Err(StoreError::Locked);
                }
            }
            sqlx::query(
                "INSERT INTO locks (token, space_id, root_path, exclusive, deep, owner_xml, holder, expires) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(&lock.token)
            .bind(&lock.space_id)
            .bind(&lock.root_path)
            .bind(i64::from(lock.exclusive))
            .bind(i64::from(lock.deep))
            .bind(&lock.owner_xml)
            .bind(&lock.holder)
            .bind(lock.expires_ms)
            .execute(w.conn())
            .await?;
            Ok(())
        }
        .await;
        w.finish(r).await
    }

    /// Extends a live lock; `NotFound` if the token is unknown or expired.
    pub async fn refresh_lock(&self, token: &str, expires_ms: i64) -> Result<Lock> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let row = sqlx::query(concat!(
                "SELECT ",
                lock_cols!(),
                " FROM locks WHERE token = $1"
            ))
            .bind(token)
            .fetch_optional(w.conn())
            .await?;
            let mut lock = row
                .as_ref()
                .map(from_row)
                .transpose()?
                .ok_or(StoreError::NotFound)?;
            if lock.expired(now_ms()) {
                return Err(StoreError::NotFound);
            }
            sqlx::query("UPDATE locks SET expires = $1 WHERE token = $2")
                .bind(expires_ms)
                .bind(token)
                .execute(w.conn())
                .await?;
            lock.expires_ms = expires_ms;
            Ok(lock)
        }
        .await;
        w.finish(r).await
    }

    /// Removes a lock; `NotFound` if there is none with this token.
    pub async fn remove_lock(&self, token: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query("DELETE FROM locks WHERE token = $1")
            .bind(token)
            .execute(w.conn())
            .await
            .map_err(StoreError::from)
            .and_then(|d| {
                if d.rows_affected() == 0 {
                    Err(StoreError::NotFound)
                } else {
                    Ok(())
                }
            });
        w.finish(r).await
    }

    /// Drops the locks rooted at `path` or below it (the resources are gone or moved away).
    pub async fn remove_locks_within(&self, space_id: &str, path: &str) -> Result<()> {
        let doomed: Vec<String> = self
            .space_locks(space_id)
            .await?
            .into_iter()
            .filter(|l| l.within(path))
            .map(|l| l.token)
            .collect();
        for token in doomed {
            match self.remove_lock(&token).await {
                Ok(()) | Err(StoreError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(root: &str, deep: bool) -> Lock {
        Lock {
            token: "t".into(),
            space_id: "s".into(),
            root_path: root.into(),
            exclusive: true,
            deep,
            owner_xml: String::new(),
            holder: "u".into(),
            expires_ms: 0,
        }
    }

    #[test]
    fn coverage() {
        assert!(lock("/a", false).covers("/a"));
        assert!(!lock("/a", false).covers("/a/b"));
        assert!(lock("/a", true).covers("/a/b/c"));
        assert!(!lock("/a", true).covers("/ab"));
        assert!(lock("/", true).covers("/x"));
        assert!(lock("/a/b", false).within("/a"));
        assert!(!lock("/ab", false).within("/a"));
    }
}
