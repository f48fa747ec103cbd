//! File versions: the earlier contents of a file, kept by reference to their blobs (never
//! copied), listed, read, labelled, restored, deleted one by one, and thinned by age and count.
//!
//! When a version is made: on every overwrite of a file's content — a put (the group commit,
//! `commit`), a copy or move onto a file (`tree`), the restore of a version — when the store
//! keeps versions ([`StoreConfig::versions`](crate::StoreConfig)) and the rules take the file
//! ([`VersionRules::keeps`]: its previous content is not below the minimum size, its name
//! matches no exclusion). The version row points at the blob the file pointed at, so making a
//! version costs one row and no byte.
//!
//! Retention ([`Store::expire_versions`], run by storage-users' background job): thinning by
//! age in Nextcloud's shape, then a per-file count, then a share of the space's quota, oldest
//! first. A labelled version is kept by thinning and by the count, never by the quota share:
//! the disk's bound comes first. Whatever a version was the last reference to is freed at once
//! (`trash::reclaim`).

use std::time::{Duration, SystemTime};

use sqlx::{AnyConnection, Row};

use super::{Store, get_node, lock_space, propagate};
use crate::checksum::Checksums;
use crate::db::db_size;
use crate::ids::{from_ns, new_id, now_ns, to_ns};
use crate::model::Node;
use crate::{Result, StoreError};

/// Which overwritten contents become versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionRules {
    /// Contents smaller than this many bytes are not kept (0: every size).
    pub min_size: u64,
    /// File names matching any of these are not versioned (`*` any run, `?` one character),
    /// e.g. `*.tmp`, `~$*`, `.~lock.*#`.
    pub exclude: Vec<String>,
}

impl VersionRules {
    /// Whether the content a file named `name` had, `size` bytes, is kept when it is replaced.
    pub fn keeps(&self, name: &str, size: u64) -> bool {
        size >= self.min_size && !self.exclude.iter().any(|g| glob_match(g, name))
    }
}

/// How long versions stay and how many (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRetention {
    /// Thin by age: all from the last minute, then one per minute for an hour, per hour for a
    /// day, per day for 30 days, per week after that.
    pub thinning: bool,
    /// At most this many versions of one file (0: no bound); the oldest go first.
    pub max_per_file: u32,
    /// Versions of a space with a quota together use at most this share of it, in percent
    /// (0: no bound); the oldest in the space go first.
    pub max_share_of_quota: u8,
}

/// One earlier content of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// Unique; names the version in URLs.
    pub key: String,
    /// The file it is a version of.
    pub node_id: String,
    pub space_id: String,
    pub size: u64,
    /// The content's modification time.
    pub mtime: SystemTime,
    /// The file's etag while this was its content.
    pub etag: String,
    pub checksums: Option<Checksums>,
    /// When it stopped being the file's content.
    pub created: SystemTime,
    /// Free text; empty unless set.
    pub label: String,
    pub(crate) blob_id: String,
}

impl Version {
    /// The blob holding this content, which a download grant names.
    pub fn blob_id(&self) -> &str {
        &self.blob_id
    }
}

/// What a retention run removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    pub items: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for Expired {
    fn add_assign(&mut self, o: Expired) {
        self.items += o.items;
        self.bytes += o.bytes;
    }
}

/// The columns [`version_from_row`] reads.
macro_rules! version_cols {
    () => {
        "id, node_id, space_id, blob_id, size, mtime, etag, sha1, md5, adler32, created, label"
    };
}

fn version_from_row(row: &sqlx::any::AnyRow) -> Result<Version> {
    let size: i64 = row.try_get(4)?;
    let sha1: Option<String> = row.try_get(7)?;
    let md5: Option<String> = row.try_get(8)?;
    let adler32: Option<String> = row.try_get(9)?;
    let checksums = match (sha1, md5, adler32) {
        (Some(sha1), Some(md5), Some(adler32)) => Some(Checksums { sha1, md5, adler32 }),
        _ => None,
    };
    Ok(Version {
        key: row.try_get(0)?,
        node_id: row.try_get(1)?,
        space_id: row.try_get(2)?,
        blob_id: row.try_get(3)?,
        size: u64::try_from(size)
            .map_err(|_| StoreError::Corrupt(format!("version size {size}")))?,
        mtime: from_ns(row.try_get(5)?),
        etag: row.try_get(6)?,
        checksums,
        created: from_ns(row.try_get(10)?),
        label: row.try_get(11)?,
    })
}

/// A new version key: 32 hex characters as every id, but ordered by time (the replacement
/// time's 64 ns bits, then 64 random ones). Keys are the versions table's primary key, which
/// every overwrite inserts into: a random key lands on a random page of an index that grows
/// by every overwrite, so a commit of N overwrites dirtied N scattered pages (more than the
/// page cache holds once a space has tens of thousands of versions); in time order they land
/// on the rightmost page. (On `arca-bench undo`'s overwrite line the gain was within this
/// machine's noise.)
fn version_key(created_ns: i64) -> String {
    crate::ids::time_ordered_id(created_ns)
}

/// A version row to insert: `node`'s current content, replaced at `created` (ns).
pub(crate) fn version_of(node: &Node, created: i64) -> Option<Version> {
    Some(Version {
        key: version_key(created),
        node_id: node.id.clone(),
        space_id: node.space_id.clone(),
        size: node.size,
        mtime: node.mtime,
        etag: node.etag.clone(),
        checksums: node.checksums.clone(),
        created: from_ns(created),
        label: String::new(),
        blob_id: node.blob_id.clone()?,
    })
}

/// Inserts `versions` in one statement per 64 rows.
pub(crate) async fn insert_versions(c: &mut AnyConnection, versions: &[Version]) -> Result<()> {
    const COLS: usize = 12;
    for chunk in versions.chunks(64) {
        let mut sql = String::from(concat!(
            "INSERT INTO versions (",
            version_cols!(),
            ") VALUES "
        ));
        for i in 0..chunk.len() {
            sql.push_str(if i == 0 { "(" } else { ", (" });
            sql.push_str(&super::commit::placeholders(i * COLS + 1, COLS));
            sql.push(')');
        }
        // Safe: built from constants and the count; every value is bound.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for v in chunk {
            let cs = v.checksums.as_ref();
            q = q
                .bind(v.key.as_str())
                .bind(v.node_id.as_str())
                .bind(v.space_id.as_str())
                .bind(v.blob_id.as_str())
                .bind(db_size(v.size)?)
                .bind(to_ns(v.mtime))
                .bind(v.etag.as_str())
                .bind(cs.map(|c| c.sha1.as_str()))
                .bind(cs.map(|c| c.md5.as_str()))
                .bind(cs.map(|c| c.adler32.as_str()))
                .bind(to_ns(v.created))
                .bind(v.label.as_str());
        }
        q.execute(&mut *c).await?;
    }
    Ok(())
}

/// Makes `node` (a file, read in this transaction) take `content`'s blob, size, checksums and
/// mtime, with a new etag; its current content becomes a version when `keep`, else its blob
/// is released. Ancestors get the size change and new etags. Returns the node as written.
pub(crate) async fn replace_content(
    c: &mut AnyConnection,
    node: &Node,
    content: &Content,
    keep: bool,
) -> Result<Node> {
    let now = now_ns();
    if keep && let Some(v) = version_of(node, now) {
        insert_versions(c, std::slice::from_ref(&v)).await?;
    } else if let Some(blob) = &node.blob_id {
        sqlx::query("UPDATE blobs SET released = $2 WHERE id = $1")
            .bind(blob)
            .bind(crate::ids::now_ms())
            .execute(&mut *c)
            .await?;
    }
    let etag = new_id();
    let cs = content.checksums.as_ref();
    sqlx::query(
        "UPDATE nodes SET blob_id = $2, size = $3, mtime = $4, etag = $5, sha1 = $6, md5 = $7, \
         adler32 = $8 WHERE id = $1",
    )
    .bind(&node.id)
    .bind(&content.blob_id)
    .bind(db_size(content.size)?)
    .bind(to_ns(content.mtime))
    .bind(&etag)
    .bind(cs.map(|c| c.sha1.as_str()))
    .bind(cs.map(|c| c.md5.as_str()))
    .bind(cs.map(|c| c.adler32.as_str()))
    .execute(&mut *c)
    .await?;
    if let Some(parent) = &node.parent_id {
        let delta = db_size(content.size)? - db_size(node.size)?;
        propagate(c, parent, &new_id(), delta, None).await?;
    }
    get_node(c, &node.id).await?.ok_or(StoreError::NotFound)
}

/// A file content: what a node or a version points at.
pub(crate) struct Content {
    pub(crate) blob_id: String,
    pub(crate) size: u64,
    pub(crate) mtime: SystemTime,
    pub(crate) checksums: Option<Checksums>,
}

impl Content {
    pub(crate) fn of_node(n: &Node) -> Result<Content> {
        Ok(Content {
            blob_id: n
                .blob_id
                .clone()
                .ok_or_else(|| StoreError::Corrupt(format!("file {} has no blob", n.id)))?,
            size: n.size,
            mtime: n.mtime,
            checksums: n.checksums.clone(),
        })
    }
}

impl Store {
    /// The versions of a file, newest first.
    pub async fn versions(&self, node_id: &str) -> Result<Vec<Version>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            version_cols!(),
            " FROM versions WHERE node_id = $1 ORDER BY created DESC, id"
        ))
        .bind(node_id)
        .fetch_all(&mut *c)
        .await?;
        rows.iter().map(version_from_row).collect()
    }

    /// One version of a file.
    pub async fn version(&self, node_id: &str, key: &str) -> Result<Version> {
        let mut c = self.read_conn().await?;
        get_version(&mut c, node_id, key)
            .await?
            .ok_or(StoreError::NotFound)
    }

    /// Opens a version's content for reading, as [`Store::open_read`] opens a file's.
    pub async fn open_version(
        &self,
        node_id: &str,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<super::Download> {
        let v = self.version(node_id, key).await?;
        let mut node = self.stat(node_id).await?;
        let (range, stream) = self.read_blob(&v.blob_id, v.size, range).await?;
        node.size = v.size;
        node.mtime = v.mtime;
        node.etag = v.etag;
        node.checksums = v.checksums;
        node.blob_id = Some(v.blob_id);
        Ok(super::Download {
            node,
            range,
            stream,
        })
    }

    /// Makes version `key` the file's content again; the content it replaces becomes a
    /// version (whatever the rules: a restore must be undoable), and the restored version
    /// leaves the list (it is the current content now). Returns the file as written.
    pub async fn restore_version(&self, node_id: &str, key: &str) -> Result<Node> {
        let node = self.stat(node_id).await?;
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            lock_space(c, &node.space_id).await?;
            let node = get_node(c, node_id).await?.ok_or(StoreError::NotFound)?;
            if node.is_dir() {
                return Err(StoreError::IsADirectory);
            }
            let v = get_version(c, node_id, key)
                .await?
                .ok_or(StoreError::NotFound)?;
            sqlx::query("DELETE FROM versions WHERE id = $1")
                .bind(&v.key)
                .execute(&mut *c)
                .await?;
            let content = Content {
                blob_id: v.blob_id,
                size: v.size,
                mtime: v.mtime,
                checksums: v.checksums,
            };
            replace_content(c, &node, &content, true).await
        }
        .await;
        w.finish(r).await
    }

    /// Deletes one version; its blob is freed at once unless something else refers to it.
    pub async fn delete_version(&self, node_id: &str, key: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            let v = get_version(c, node_id, key)
                .await?
                .ok_or(StoreError::NotFound)?;
            delete_versions(c, std::slice::from_ref(&v.key)).await
        }
        .await;
        let released = w.finish(r).await?;
        self.reclaim(&released).await
    }

    /// Sets (or, empty, clears) a version's label.
    pub async fn set_version_label(&self, node_id: &str, key: &str, label: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query("UPDATE versions SET label = $3 WHERE node_id = $1 AND id = $2")
            .bind(node_id)
            .bind(key)
            .bind(label)
            .execute(w.conn())
            .await
            .map_err(StoreError::from);
        let done = w.finish(r).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    /// One retention run over every version at time `now` (see the module docs). Works one
    /// file (and one space) per transaction, so writers never wait long.
    pub async fn expire_versions(
        &self,
        now: SystemTime,
        rules: &VersionRetention,
    ) -> Result<Expired> {
        let mut done = Expired::default();
        if rules.thinning || rules.max_per_file > 0 {
            let mut after = String::new();
            loop {
                let nodes = self.nodes_with_versions(&after, 256).await?;
                let Some(last) = nodes.last() else { break };
                after = last.clone();
                for node in &nodes {
                    done += self.expire_file_versions(node, now, rules).await?;
                }
            }
        }
        if rules.max_share_of_quota > 0 {
            for (space, over) in self.spaces_over_version_share(rules).await? {
                done += self.expire_oldest_versions(&space, over).await?;
            }
        }
        if done.items > 0 {
            tracing::info!(
                versions = done.items,
                bytes = done.bytes,
                "expired file versions"
            );
        }
        Ok(done)
    }

    /// Nodes after `after` (by id) that have more than one version or any at all when a
    /// count bound applies: the candidates of a retention run, a page at a time.
    async fn nodes_with_versions(&self, after: &str, limit: i64) -> Result<Vec<String>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT node_id FROM versions WHERE node_id > $1 GROUP BY node_id \
             HAVING count(*) > 1 ORDER BY node_id LIMIT $2",
        )
        .bind(after)
        .bind(limit)
        .fetch_all(&mut *c)
        .await?;
        crate::db::first_strings(&rows)
    }

    async fn expire_file_versions(
        &self,
        node_id: &str,
        now: SystemTime,
        rules: &VersionRetention,
    ) -> Result<Expired> {
        let versions = self.versions(node_id).await?;
        let doomed = doomed_versions(&versions, now, rules);
        if doomed.is_empty() {
            return Ok(Expired::default());
        }
        let bytes = versions
            .iter()
            .filter(|v| doomed.contains(&v.key))
            .map(|v| v.size)
            .sum();
        let mut w = self.db().begin_write().await?;
        let r = delete_versions(w.conn(), &doomed).await;
        let released = w.finish(r).await?;
        self.reclaim(&released).await?;
        Ok(Expired {
            items: doomed.len() as u64,
            bytes,
        })
    }

    /// Spaces with a quota whose versions use more than the share allowed: (space, bytes over).
    async fn spaces_over_version_share(
        &self,
        rules: &VersionRetention,
    ) -> Result<Vec<(String, u64)>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT s.id, s.quota, CAST(SUM(v.size) AS BIGINT) FROM spaces s \
             JOIN versions v ON v.space_id = s.id WHERE s.quota > 0 GROUP BY s.id, s.quota",
        )
        .fetch_all(&mut *c)
        .await?;
        let mut out = Vec::new();
        for row in &rows {
            let quota: i64 = row.try_get(1)?;
            let used: i64 = row.try_get(2)?;
            let allowed = share_of(quota, rules.max_share_of_quota);
            if used > allowed {
                out.push((row.try_get(0)?, u64::try_from(used - allowed).unwrap_or(0)));
            }
        }
        Ok(out)
    }

    /// Deletes the oldest versions of a space until at least `over` bytes are gone.
    async fn expire_oldest_versions(&self, space_id: &str, over: u64) -> Result<Expired> {
        let mut done = Expired::default();
        while done.bytes < over {
            let mut c = self.read_conn().await?;
            let rows = sqlx::query(
                "SELECT id, size FROM versions WHERE space_id = $1 ORDER BY created, id LIMIT 256",
            )
            .bind(space_id)
            .fetch_all(&mut *c)
            .await?;
            drop(c);
            if rows.is_empty() {
                break;
            }
            let mut keys = Vec::new();
            for row in &rows {
                if done.bytes >= over {
                    break;
                }
                let size: i64 = row.try_get(1)?;
                keys.push(row.try_get::<String, _>(0)?);
                done.bytes += u64::try_from(size).unwrap_or(0);
                done.items += 1;
            }
            let mut w = self.db().begin_write().await?;
            let r = delete_versions(w.conn(), &keys).await;
            let released = w.finish(r).await?;
            self.reclaim(&released).await?;
        }
        Ok(done)
    }
}

/// `percent` % of `quota` bytes.
pub(crate) fn share_of(quota: i64, percent: u8) -> i64 {
    i64::try_from(i128::from(quota) * i128::from(percent) / 100).unwrap_or(i64::MAX)
}

pub(crate) async fn get_version(
    c: &mut AnyConnection,
    node_id: &str,
    key: &str,
) -> Result<Option<Version>> {
    let row = sqlx::query(concat!(
        "SELECT ",
        version_cols!(),
        " FROM versions WHERE id = $1 AND node_id = $2"
    ))
    .bind(key)
    .bind(node_id)
    .fetch_optional(&mut *c)
    .await?;
    row.as_ref().map(version_from_row).transpose()
}

/// Deletes versions by key and releases their blobs; returns the released blob ids.
async fn delete_versions(c: &mut AnyConnection, keys: &[String]) -> Result<Vec<String>> {
    let mut released = Vec::new();
    for chunk in keys.chunks(256) {
        let list = super::commit::placeholders(2, chunk.len());
        // Safe: built from constants and the count; every value is bound.
        let sql = format!(
            "UPDATE blobs SET released = $1 WHERE id IN \
             (SELECT blob_id FROM versions WHERE id IN ({list})) RETURNING id"
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(crate::ids::now_ms());
        for k in chunk {
            q = q.bind(k.as_str());
        }
        for row in q.fetch_all(&mut *c).await? {
            released.push(row.try_get::<String, _>(0)?);
        }
        let sql = format!(
            "DELETE FROM versions WHERE id IN ({})",
            super::commit::placeholders(1, chunk.len())
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for k in chunk {
            q = q.bind(k.as_str());
        }
        q.execute(&mut *c).await?;
    }
    Ok(released)
}

/// The age steps of thinning: versions younger than the bound keep one per step.
const THINNING: [(Duration, Duration); 5] = [
    (Duration::from_secs(60), Duration::ZERO),
    (Duration::from_secs(3600), Duration::from_secs(60)),
    (Duration::from_secs(24 * 3600), Duration::from_secs(3600)),
    (
        Duration::from_secs(30 * 24 * 3600),
        Duration::from_secs(24 * 3600),
    ),
    (Duration::MAX, Duration::from_secs(7 * 24 * 3600)),
];

/// The step thinning keeps one version per, at `age`.
fn step_at(age: Duration) -> Duration {
    THINNING
        .iter()
        .find(|(below, _)| age < *below)
        .map_or(THINNING[THINNING.len() - 1].1, |(_, step)| *step)
}

/// The keys of `versions` (newest first) a retention run deletes at `now`: thinning keeps the
/// newest of each step (a version closer than a step to the last one kept goes), then the
/// count keeps the newest `max_per_file`. Labelled versions are always kept by both.
pub(crate) fn doomed_versions(
    versions: &[Version],
    now: SystemTime,
    rules: &VersionRetention,
) -> Vec<String> {
    let mut doomed = Vec::new();
    let mut kept: Vec<&Version> = Vec::new();
    let mut last_kept: Option<SystemTime> = None;
    for v in versions {
        if !v.label.is_empty() {
            kept.push(v);
            continue;
        }
        let age = now.duration_since(v.created).unwrap_or_default();
        let step = step_at(age);
        let too_close = rules.thinning
            && last_kept
                .is_some_and(|newer| newer.duration_since(v.created).unwrap_or_default() < step);
        if too_close {
            doomed.push(v.key.clone());
        } else {
            kept.push(v);
            last_kept = Some(v.created);
        }
    }
    let max = rules.max_per_file as usize;
    if max > 0 && kept.len() > max {
        let mut unlabelled = kept.len() - kept.iter().filter(|v| !v.label.is_empty()).count();
        let mut excess = kept.len() - max;
        // Oldest first.
        for v in kept.iter().rev() {
            if excess == 0 || unlabelled == 0 {
                break;
            }
            if v.label.is_empty() {
                doomed.push(v.key.clone());
                excess -= 1;
                unlabelled -= 1;
            }
        }
    }
    doomed
}

/// Matches a file name against a glob of `*` (any run, also empty) and `?` (one character);
/// every other character stands for itself.
pub(crate) fn glob_match(glob: &str, name: &str) -> bool {
    let g: Vec<char> = glob.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative with one backtrack point: the last `*` seen.
    let (mut gi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if gi < g.len() && (g[gi] == '?' || (g[gi] != '*' && g[gi] == n[ni])) {
            gi += 1;
            ni += 1;
        } else if gi < g.len() && g[gi] == '*' {
            star = Some((gi, ni));
            gi += 1;
        } else if let Some((sg, sn)) = star {
            gi = sg + 1;
            ni = sn + 1;
            star = Some((sg, sn + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(key: &str, secs_ago: u64, now: SystemTime) -> Version {
        Version {
            key: key.into(),
            node_id: "n".into(),
            space_id: "s".into(),
            size: 1,
            mtime: now,
            etag: "e".into(),
            checksums: None,
            created: now - Duration::from_secs(secs_ago),
            label: String::new(),
            blob_id: "b".into(),
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("*.tmp", "a.tmp"));
        assert!(glob_match("*.tmp", ".tmp"));
        assert!(!glob_match("*.tmp", "a.tmpx"));
        assert!(glob_match("~$*", "~$doc.docx"));
        assert!(glob_match(".~lock.*#", ".~lock.report.odt#"));
        assert!(glob_match("a?c", "abc") && !glob_match("a?c", "ac"));
        assert!(glob_match("*a*b*", "xxaYYbzz") && !glob_match("*a*b*", "ba"));
        assert!(glob_match("*", "") && !glob_match("?", ""));
        assert!(glob_match("ü*", "über"));
    }

    #[test]
    fn rules_take_size_and_names() {
        let rules = VersionRules {
            min_size: 10,
            exclude: vec!["*.tmp".into()],
        };
        assert!(rules.keeps("a.txt", 10));
        assert!(!rules.keeps("a.txt", 9));
        assert!(!rules.keeps("a.tmp", 100));
    }

    #[test]
    fn thinning_keeps_one_per_step() {
        let now = SystemTime::now();
        let rules = VersionRetention {
            thinning: true,
            max_per_file: 0,
            max_share_of_quota: 0,
        };
        // Newest first: three in the last minute (all kept), three within one minute slot
        // half an hour ago (one kept), two a day apart 10 days ago (both kept), two a day
        // apart 100 days ago (one kept: a week per version there).
        let list = vec![
            v("a", 1, now),
            v("b", 2, now),
            v("c", 30, now),
            v("d", 1800, now),
            v("e", 1810, now),
            v("f", 1820, now),
            v("g", 10 * 86400, now),
            v("h", 11 * 86400, now),
            v("i", 100 * 86400, now),
            v("j", 101 * 86400, now),
        ];
        let doomed = doomed_versions(&list, now, &rules);
        assert_eq!(doomed, ["e", "f", "j"]);

        let mut labelled = list.clone();
        labelled[4].label = "keep me".into();
        assert_eq!(doomed_versions(&labelled, now, &rules), ["f", "j"]);
    }

    #[test]
    fn count_bound_takes_the_oldest_unlabelled() {
        let now = SystemTime::now();
        let rules = VersionRetention {
            thinning: false,
            max_per_file: 2,
            max_share_of_quota: 0,
        };
        let mut list = vec![
            v("a", 1, now),
            v("b", 2, now),
            v("c", 3, now),
            v("d", 4, now),
        ];
        assert_eq!(doomed_versions(&list, now, &rules), ["d", "c"]);
        list[3].label = "x".into();
        assert_eq!(doomed_versions(&list, now, &rules), ["c", "b"]);
        assert_eq!(share_of(1000, 50), 500);
    }
}
