//! Resumable uploads (the state behind TUS) shared by every instance that uses the same
//! metadata database and blob store: any instance can append to, inspect, commit or end any
//! upload, and an upload outlives the instance it began on.
//!
//! - The record (target, length, offset, expiry, owner) is a row of `uploads`.
//! - Each append is one **part**: an object in the blob store under `uploads/ID/`, with a
//!   random suffix so that two appends never write the same object. A part is written and
//!   made durable first ([`UploadPart::write`]); then one transaction moves the offset by
//!   compare-and-set (`received = start` → `start + size`) and lists the part in
//!   `upload_parts` ([`Store::append_upload_part`]). So the offset never counts a byte that is
//!   not durable, and of two appends at one offset (two instances, a retried request) exactly
//!   one counts: the other's part is deleted and it learns the offset that won.
//! - The commit streams the parts in order into [`Store::put_file`] (the ordinary atomic
//!   write: new blob, checksums computed, preconditions and quota checked), under a claim on
//!   the row (`committing`) so that one upload is committed once at a time.
//! - Parts go when the upload is committed, removed or expired; [`Store::expire_uploads`]
//!   also removes part objects that no row lists (an instance killed between writing a part
//!   and recording it, or between deleting the rows and the objects).

use std::collections::HashSet;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use sqlx::Row as _;
use sqlx::any::AnyRow;

use crate::blob::BlobWriter;
use crate::checksum::{Checksums, Hasher};
use crate::db::db_size;
use crate::ids::{new_id, now_ms};
use crate::model::{Node, PutOptions};
use crate::store::Written;
use crate::store::commit::PutCommit;
use crate::{Result, Store, StoreError};

/// Where parts live in the blob store, beside (never among) the fanned-out blob ids.
const PARTS_PREFIX: &str = "uploads";
/// Rows handled per expiry round, so a round stays short.
const EXPIRY_BATCH: i64 = 256;
/// How long a commit holds its upload: at least this, plus [`COMMIT_CLAIM_PER_MIB`] per MiB.
/// A commit that outlives it (a killed instance) lets another request commit again.
const COMMIT_CLAIM_MS: i64 = 120_000;
const COMMIT_CLAIM_PER_MIB: i64 = 1_000;

/// A resumable upload as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upload {
    /// 32 lowercase hex digits.
    pub id: String,
    /// The user who created it.
    pub user: String,
    pub space_id: String,
    /// The directory the file goes in, and its name there.
    pub parent_id: String,
    pub name: String,
    /// The target path inside the space (what the upload URL names).
    pub path: String,
    /// The space owner.
    pub owner: String,
    pub length: u64,
    /// Bytes durably stored: the TUS `Upload-Offset`.
    pub offset: u64,
    /// The etag the existing file must still have at commit; empty: no condition.
    pub if_match: String,
    /// The file's modification time in ns since the epoch; 0: the commit time.
    pub mtime_ns: i64,
    /// Seconds since the epoch; the upload is gone after this.
    pub expires: u64,
    /// The checksum the client announced for the whole file (`sha1:HEX`, `md5:HEX`,
    /// `adler32:HEX`), verified at the commit; empty: none.
    pub checksum: String,
    /// The SHA-1, MD5 and Adler-32 state over bytes `0..offset`, when every part so far was
    /// hashed as it arrived (see [`Store::commit_upload`]); `None` for a new record.
    pub hash_state: Option<Vec<u8>>,
}

impl Upload {
    /// A new upload id.
    pub fn new_id() -> String {
        new_id()
    }

    /// Whether `id` has the shape of an upload id (nothing else ever reaches the database).
    pub fn is_id(id: &str) -> bool {
        id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    }
}

/// What became of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The part counts: the upload's offset is now this.
    At(u64),
    /// Another request moved the offset first (to this); the part was discarded.
    Moved(u64),
    /// The upload no longer exists (finished, removed or expired); the part was discarded.
    Gone,
}

/// One append being written: an object in the blob store that nothing counts yet.
pub struct UploadPart {
    upload_id: String,
    start: u64,
    key: Path,
    writer: BlobWriter,
    size: u64,
    /// Continues the upload's checksums when they cover every byte before the part.
    hasher: Option<Hasher>,
}

impl std::fmt::Debug for UploadPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadPart")
            .field("key", &self.key)
            .field("start", &self.start)
            .field("size", &self.size)
            .finish()
    }
}

impl UploadPart {
    /// Appends bytes to the part (buffered, then streamed in parts of the blob store's size).
    pub async fn write(&mut self, chunk: Bytes) -> Result<()> {
        self.size += chunk.len() as u64;
        if let Some(h) = self.hasher.as_mut() {
            h.update(&chunk).await;
        }
        self.writer.write(chunk).await
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Abandons the part, removing what was written.
    pub async fn abort(self) {
        self.writer.abort().await;
    }
}

macro_rules! upload_cols {
    () => {
        "id, user_id, space_id, parent_id, name, path, owner, length, received, if_match, mtime, \
         expires, checksum, hashed, hash_state"
    };
}

fn from_row(row: &AnyRow) -> Result<Upload> {
    let unsigned = |i: usize| -> Result<u64> {
        let v: i64 = row.try_get(i)?;
        u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("upload column {i}: {v}")))
    };
    let offset = unsigned(8)?;
    // The state counts only if it covers exactly what was received.
    let hash_state = match row.try_get::<Option<Vec<u8>>, _>(14)? {
        Some(state) if offset > 0 && unsigned(13)? == offset => Some(state),
        _ => None,
    };
    Ok(Upload {
        id: row.try_get(0)?,
        user: row.try_get(1)?,
        space_id: row.try_get(2)?,
        parent_id: row.try_get(3)?,
        name: row.try_get(4)?,
        path: row.try_get(5)?,
        owner: row.try_get(6)?,
        length: unsigned(7)?,
        offset,
        if_match: row.try_get(9)?,
        mtime_ns: row.try_get(10)?,
        expires: unsigned(11)?,
        checksum: row.try_get(12)?,
        hash_state,
    })
}

/// The checksums a finished upload's suspended hash state stands for.
async fn checksums_of(state: &[u8]) -> Result<Checksums> {
    Ok(Hasher::resume(state)
        .ok_or_else(|| StoreError::Corrupt("an upload's hash state".into()))?
        .finish()
        .await?)
}

/// The upload id a part key belongs to (`uploads/ID/NAME`).
fn upload_of_key(key: &Path) -> Option<String> {
    let mut parts = key.parts();
    if parts.next()?.as_ref() != PARTS_PREFIX {
        return None;
    }
    Some(parts.next()?.as_ref().to_owned())
}

impl Store {
    /// Records a new upload (offset 0).
    pub async fn create_upload(&self, u: &Upload) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            sqlx::query(
                "INSERT INTO uploads (id, user_id, space_id, parent_id, name, path, owner, length, \
                 received, if_match, mtime, expires, committing, created, checksum) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10, $11, 0, $12, $13)",
            )
            .bind(&u.id)
            .bind(&u.user)
            .bind(&u.space_id)
            .bind(&u.parent_id)
            .bind(&u.name)
            .bind(&u.path)
            .bind(&u.owner)
            .bind(db_size(u.length)?)
            .bind(&u.if_match)
            .bind(u.mtime_ns)
            .bind(db_size(u.expires)?)
            .bind(now_ms())
            .bind(&u.checksum)
            .execute(w.conn())
            .await?;
            Ok(())
        }
        .await;
        w.finish(r).await
    }

    /// The upload `id` as recorded (expired or not: the caller compares `expires`).
    pub async fn upload(&self, id: &str) -> Result<Option<Upload>> {
        let mut c = self.read_conn().await?;
        let row = sqlx::query(concat!(
            "SELECT ",
            upload_cols!(),
            " FROM uploads WHERE id = $1 AND label = ''"
        ))
        .bind(id)
        .fetch_optional(&mut *c)
        .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Starts a part at the upload's offset as `u` read it. Nothing counts it until
    /// [`Store::append_upload_part`].
    pub fn upload_part(&self, u: &Upload) -> UploadPart {
        let key = Path::from(format!(
            "{PARTS_PREFIX}/{}/{:020}-{}",
            u.id,
            u.offset,
            new_id()
        ));
        let remaining = u.length.saturating_sub(u.offset);
        let hasher = match &u.hash_state {
            _ if u.offset == 0 => Some(Hasher::new()),
            Some(state) => Hasher::resume(state),
            None => None,
        };
        UploadPart {
            upload_id: u.id.clone(),
            start: u.offset,
            writer: self.blobs().writer_at(key.clone(), Some(remaining)),
            key,
            size: 0,
            hasher,
        }
    }

    /// Makes the part durable, then counts it if the upload's offset is still where the part
    /// starts (compare-and-set in one transaction with the part's row). A part that does not
    /// count is deleted. An empty part counts as nothing and is never stored.
    pub async fn append_upload_part(&self, part: UploadPart) -> Result<Appended> {
        let UploadPart {
            upload_id,
            start,
            key,
            writer,
            size,
            hasher,
        } = part;
        if size == 0 {
            writer.abort().await;
            return Ok(match self.upload(&upload_id).await? {
                Some(u) if u.offset == start => Appended::At(start),
                Some(u) => Appended::Moved(u.offset),
                None => Appended::Gone,
            });
        }
        writer.finish().await?;
        let state = match hasher {
            Some(h) => h
                .suspend()
                .await
                .inspect_err(|e| tracing::warn!(upload = %upload_id, error = %e, "hashing a part"))
                .ok(),
            None => None,
        };
        let end = start + size;
        let mut w = self.db().begin_write().await?;
        let r = async {
            // The row lock this UPDATE takes (PostgreSQL) or the single writer (SQLite) makes
            // a concurrent append wait, then see the moved offset and update nothing. The
            // checksum state moves with the offset, so it never covers a byte that did not
            // count; without one, `hashed` stays behind and the commit hashes again.
            let moved = sqlx::query(if state.is_some() {
                "UPDATE uploads SET received = $1, hashed = $1, hash_state = $5 WHERE id = $2 \
                 AND received = $3 AND received + $4 <= length"
            } else {
                "UPDATE uploads SET received = $1 WHERE id = $2 AND received = $3 \
                 AND received + $4 <= length"
            })
            .bind(db_size(end)?)
            .bind(&upload_id)
            .bind(db_size(start)?)
            .bind(db_size(size)?);
            let moved = match &state {
                Some(state) => moved.bind(state.clone()),
                None => moved,
            }
            .execute(w.conn())
            .await?
            .rows_affected();
            if moved == 0 {
                let row = sqlx::query("SELECT received FROM uploads WHERE id = $1")
                    .bind(&upload_id)
                    .fetch_optional(w.conn())
                    .await?;
                return Ok(match row {
                    Some(row) => {
                        let at: i64 = row.try_get(0)?;
                        Appended::Moved(u64::try_from(at).unwrap_or(0))
                    }
                    None => Appended::Gone,
                });
            }
            sqlx::query(
                "INSERT INTO upload_parts (upload_id, start, size, part_key) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&upload_id)
            .bind(db_size(start)?)
            .bind(db_size(size)?)
            .bind(key.as_ref())
            .execute(w.conn())
            .await?;
            Ok(Appended::At(end))
        }
        .await;
        let counted = matches!(r, Ok(Appended::At(_)));
        let result = w.finish(r).await;
        if !counted {
            // Not counted (or not known to be): delete it now, else the expiry sweep does once
            // it is old enough and still unlisted.
            if let Err(e) = self.blobs().delete_at(std::slice::from_ref(&key)).await {
                tracing::debug!(%key, error = %e, "deleting a discarded upload part");
            }
        }
        result
    }

    /// Commits a complete upload: its parts, in order, become the file `u.name` in
    /// `u.parent_id` through [`Store::put_file`] with `opts` (the length is the upload's), and
    /// the upload is removed. `Locked` while another commit of it runs; `NotFound` when it is
    /// gone. On failure the upload stays for another try; whether to remove it is the
    /// caller's choice ([`Store::remove_upload`]).
    pub async fn commit_upload(&self, u: &Upload, mut opts: PutOptions) -> Result<Node> {
        let now = now_ms();
        let hold = COMMIT_CLAIM_MS
            + i64::try_from(u.length >> 20)
                .unwrap_or(i64::MAX / 2)
                .saturating_mul(COMMIT_CLAIM_PER_MIB);
        let mut w = self.db().begin_write().await?;
        let r = async {
            let claimed = sqlx::query(
                "UPDATE uploads SET committing = $1 WHERE id = $2 AND received = length \
                 AND committing < $3",
            )
            .bind(now.saturating_add(hold))
            .bind(&u.id)
            .bind(now)
            .execute(w.conn())
            .await?
            .rows_affected();
            if claimed == 0 {
                let exists = sqlx::query("SELECT received, length FROM uploads WHERE id = $1")
                    .bind(&u.id)
                    .fetch_optional(w.conn())
                    .await?;
                return Err(match exists {
                    None => StoreError::NotFound,
                    Some(row) if row.try_get::<i64, _>(0)? != row.try_get::<i64, _>(1)? => {
                        StoreError::Conflict
                    }
                    Some(_) => StoreError::Locked,
                });
            }
            let rows = sqlx::query(
                "SELECT start, size, part_key FROM upload_parts WHERE upload_id = $1 \
                 ORDER BY start",
            )
            .bind(&u.id)
            .fetch_all(w.conn())
            .await?;
            let mut keys = Vec::with_capacity(rows.len());
            let mut at = 0i64;
            for row in &rows {
                let (start, size): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                if start != at {
                    return Err(StoreError::Corrupt(format!(
                        "upload {}: a part starts at {start}, expected {at}",
                        u.id
                    )));
                }
                at += size;
                keys.push(Path::from(row.try_get::<String, _>(2)?));
            }
            if at != db_size(u.length)? {
                return Err(StoreError::Corrupt(format!(
                    "upload {}: parts hold {at} of {} bytes",
                    u.id, u.length
                )));
            }
            let state = sqlx::query("SELECT hashed, hash_state FROM uploads WHERE id = $1")
                .bind(&u.id)
                .fetch_one(w.conn())
                .await?;
            let hashed: i64 = state.try_get(0)?;
            let state: Option<Vec<u8>> = state.try_get(1)?;
            Ok((keys, state.filter(|_| hashed == at)))
        }
        .await;
        let (keys, state) = w.finish(r).await?;

        opts.content_length = Some(u.length);
        let committed = match (keys.as_slice(), state) {
            ([key], Some(state)) if self.blobs().can_adopt(u.length) => {
                self.commit_adopted(u, key, &state, opts).await
            }
            // Several parts: copied into one blob, with the checksums the parts were hashed
            // to as they arrived (not hashed a second time), if they cover every byte.
            (_, state) => match state.as_deref() {
                Some(state) => match checksums_of(state).await {
                    Ok(known) => self.commit_parts(u, keys, opts, Some(known)).await,
                    // Released below like any failed commit.
                    Err(e) => Err(e),
                },
                None => self.commit_parts(u, keys, opts, None).await,
            },
        };
        match committed {
            Ok(node) => {
                if let Err(e) = self.remove_upload(&u.id).await {
                    // Committed all the same; the expiry sweep removes the upload later.
                    tracing::warn!(upload = %u.id, error = %e, "removing a committed upload");
                }
                Ok(node)
            }
            Err(e) => {
                let release = async {
                    let mut w = self.db().begin_write().await?;
                    let r = sqlx::query("UPDATE uploads SET committing = 0 WHERE id = $1")
                        .bind(&u.id)
                        .execute(w.conn())
                        .await
                        .map(|_| ())
                        .map_err(StoreError::from);
                    w.finish(r).await
                };
                if let Err(r) = release.await {
                    tracing::warn!(upload = %u.id, error = %r, "releasing an upload's commit");
                }
                Err(e)
            }
        }
    }

    /// The usual commit, of an upload sent in one request: its one part becomes the file's
    /// blob without a byte read or written again ([`BlobStore::adopt`]), and its checksums are
    /// those computed as the part arrived. Otherwise the same steps as [`Store::put_file`]:
    /// preconditions and quota checked, the blob reserved, then the put committed.
    ///
    /// [`BlobStore::adopt`]: crate::blob::BlobStore::adopt
    async fn commit_adopted(
        &self,
        u: &Upload,
        key: &Path,
        state: &[u8],
        opts: PutOptions,
    ) -> Result<Node> {
        crate::names::validate_name(&u.name)?;
        let checksums = checksums_of(state).await?;
        checksums.verify(opts.expected_checksum.as_ref())?;
        let (space_id, allowance) = self.precheck_put(&u.parent_id, &u.name, &opts).await?;
        if allowance.is_some_and(|a| u.length > a) {
            return Err(StoreError::QuotaExceeded);
        }
        let blob_id = self.committer().reserve().await?;
        if let Err(e) = self.blobs().adopt(key, &blob_id).await {
            self.discard_upload(&blob_id).await;
            return Err(e);
        }
        self.commit_written(PutCommit {
            space_id,
            parent_id: u.parent_id.clone(),
            name: u.name.clone(),
            opts,
            written: Written {
                blob_id,
                size: u.length,
                checksums,
                inline: None,
            },
        })
        .await
    }

    /// The parts, in order, copied into one new blob that becomes the file.
    async fn commit_parts(
        &self,
        u: &Upload,
        keys: Vec<Path>,
        opts: PutOptions,
        known: Option<Checksums>,
    ) -> Result<Node> {
        let body = self.parts_stream(keys);
        self.put_file_hashed(&u.parent_id, &u.name, body, opts, known)
            .await
    }

    /// The parts' bytes, one object after the other.
    fn parts_stream(&self, keys: Vec<Path>) -> BoxStream<'static, Result<Bytes>> {
        let blobs = self.blobs().clone();
        futures::stream::iter(keys)
            .then(move |key| {
                let blobs = blobs.clone();
                async move { blobs.read_at(&key).await }
            })
            .try_flatten()
            .boxed()
    }

    /// Removes an upload and its parts (an upload folder: its chunks and its assembly);
    /// `false` if there was none. The assembly goes first, then the rows (from then on the
    /// upload does not exist), the part objects after; a crash between leaves objects the
    /// expiry sweep removes.
    pub async fn remove_upload(&self, id: &str) -> Result<bool> {
        self.remove_upload_keeping(id, false).await
    }

    /// [`Store::remove_upload`]; with `keep_assembly`, an upload folder's assembly stays (it
    /// became a file's blob).
    pub(crate) async fn remove_upload_keeping(
        &self,
        id: &str,
        keep_assembly: bool,
    ) -> Result<bool> {
        if !keep_assembly {
            let row = {
                let mut c = self.read_conn().await?;
                sqlx::query("SELECT assembly, multipart FROM uploads WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *c)
                    .await?
            };
            if let Some(row) = row {
                let (assembly, multipart): (String, String) = (row.try_get(0)?, row.try_get(1)?);
                if !assembly.is_empty() {
                    self.blobs().discard_pieces(&assembly, &multipart).await?;
                }
            }
        }
        let mut w = self.db().begin_write().await?;
        let r = async {
            let mut keys = Vec::new();
            for sql in [
                "DELETE FROM upload_parts WHERE upload_id = $1 RETURNING part_key",
                "DELETE FROM upload_chunks WHERE upload_id = $1 RETURNING part_key",
            ] {
                for row in sqlx::query(sql).bind(id).fetch_all(w.conn()).await? {
                    let key: String = row.try_get(0)?;
                    if !key.is_empty() {
                        keys.push(Path::from(key));
                    }
                }
            }
            let gone = sqlx::query("DELETE FROM uploads WHERE id = $1")
                .bind(id)
                .execute(w.conn())
                .await?
                .rows_affected();
            Ok((keys, gone > 0))
        }
        .await;
        // Only the listed parts: one that lost its race was deleted by its writer, and one a
        // killed instance left unlisted is the expiry sweep's (no listing per commit).
        let (keys, existed) = w.finish(r).await?;
        self.blobs().delete_at(&keys).await?;
        Ok(existed)
    }

    /// Removes uploads that expired by `now_secs` (unless a commit holds them), and part
    /// objects older than `stray_min_age_ms` that no row lists. Returns how many uploads went.
    ///
    /// Run by one instance at a time (a leader lease): two would not corrupt anything, every
    /// removal being idempotent, but would do the same work twice.
    pub async fn expire_uploads(&self, now_secs: u64, stray_min_age_ms: i64) -> Result<u64> {
        let mut removed = 0u64;
        loop {
            let ids: Vec<String> = {
                let mut c = self.read_conn().await?;
                sqlx::query(
                    "SELECT id FROM uploads WHERE expires <= $1 AND committing < $2 \
                     AND place_claim < $2 LIMIT $3",
                )
                .bind(db_size(now_secs)?)
                .bind(now_ms())
                .bind(EXPIRY_BATCH)
                .fetch_all(&mut *c)
                .await?
                .iter()
                .map(|row| row.try_get::<String, _>(0))
                .collect::<std::result::Result<_, _>>()?
            };
            let batch = ids.len();
            for id in ids {
                if self.remove_upload(&id).await? {
                    removed += 1;
                }
            }
            if batch < usize::try_from(EXPIRY_BATCH).unwrap_or(usize::MAX) {
                break;
            }
        }

        // Read the listed keys after listing the objects: a part that is recorded in between
        // was listed as an object and is then known too, so it is never taken for a stray.
        let objects = self.blobs().list_under(&Path::from(PARTS_PREFIX)).await?;
        let cutoff = now_ms().saturating_sub(stray_min_age_ms);
        let old: Vec<Path> = objects
            .into_iter()
            .filter(|(key, modified)| *modified <= cutoff && upload_of_key(key).is_some())
            .map(|(key, _)| key)
            .collect();
        if !old.is_empty() {
            let known: HashSet<String> = {
                let mut c = self.read_conn().await?;
                sqlx::query(
                    "SELECT part_key FROM upload_parts UNION ALL \
                     SELECT part_key FROM upload_chunks WHERE part_key <> ''",
                )
                .fetch_all(&mut *c)
                .await?
                .iter()
                .map(|row| row.try_get::<String, _>(0))
                .collect::<std::result::Result<_, _>>()?
            };
            let strays: Vec<Path> = old
                .into_iter()
                .filter(|k| !known.contains(k.as_ref()))
                .collect();
            if !strays.is_empty() {
                tracing::info!(count = strays.len(), "removing stray upload parts");
                self.blobs().delete_at(&strays).await?;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreConfig;
    use crate::checksum::ChecksumAlgo;

    async fn store() -> (tempfile::TempDir, Store, String) {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("m.db").display());
        let store = Store::open(StoreConfig::new(url, tmp.path().join("blobs")))
            .await
            .unwrap();
        let space = store.personal_space("alice").await.unwrap();
        (tmp, store, space.root_id)
    }

    fn upload(root: &str, length: u64, expires: u64) -> Upload {
        Upload {
            id: Upload::new_id(),
            user: "alice".into(),
            space_id: root.into(),
            parent_id: root.into(),
            name: "f.bin".into(),
            path: "/f.bin".into(),
            owner: "alice".into(),
            length,
            offset: 0,
            if_match: String::new(),
            mtime_ns: 0,
            expires,
            checksum: String::new(),
            hash_state: None,
        }
    }

    async fn append(store: &Store, u: &Upload, bytes: &'static [u8]) -> Appended {
        let mut part = store.upload_part(u);
        part.write(Bytes::from_static(bytes)).await.unwrap();
        store.append_upload_part(part).await.unwrap()
    }

    #[tokio::test]
    async fn parts_count_once_and_commit_in_order() {
        let (tmp, store, root) = store().await;
        let mut u = upload(&root, 10, u64::MAX >> 2);
        store.create_upload(&u).await.unwrap();
        assert_eq!(append(&store, &u, b"hello").await, Appended::At(5));
        // A second append from the same (now stale) offset loses and leaves nothing behind.
        assert_eq!(append(&store, &u, b"HELLO").await, Appended::Moved(5));
        u = store.upload(&u.id).await.unwrap().unwrap();
        assert_eq!(u.offset, 5);
        // Too long for what is left: not counted.
        assert_eq!(append(&store, &u, b"world!").await, Appended::Moved(5));
        assert_eq!(append(&store, &u, b"world").await, Appended::At(10));
        u = store.upload(&u.id).await.unwrap().unwrap();
        let node = store
            .commit_upload(&u, PutOptions::default())
            .await
            .unwrap();
        assert_eq!(node.size, 10);
        assert_eq!(store.read_all(&node.id).await, b"helloworld");
        assert!(store.upload(&u.id).await.unwrap().is_none());
        let left = store.blobs().list_under(&Path::from(PARTS_PREFIX)).await;
        assert_eq!(left.unwrap(), Vec::new());
        assert_eq!(append(&store, &u, b"x").await, Appended::Gone);
        drop(tmp);
    }

    /// The bytes of a 3 MiB file (past the size where MD5 moves to a thread of its own).
    fn big_body() -> Vec<u8> {
        (0..3u32 << 20).map(|i| (i * 7 + i / 4093) as u8).collect()
    }

    async fn append_chunks(store: &Store, u: &Upload, bytes: &[u8]) -> Appended {
        let mut part = store.upload_part(u);
        for c in bytes.chunks(64 << 10) {
            part.write(Bytes::copy_from_slice(c)).await.unwrap();
        }
        store.append_upload_part(part).await.unwrap()
    }

    fn expected_checksums(bytes: &[u8]) -> (String, String) {
        use sha1::Digest as _;
        let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        (
            hex(&sha1::Sha1::digest(bytes)),
            hex(&md5::Md5::digest(bytes)),
        )
    }

    /// An upload sent in one part becomes the file without a copy: the blob is the part's own
    /// file (the same inode), with the checksums computed as the part arrived; a wrong
    /// announced checksum refuses it and keeps the upload.
    #[tokio::test]
    async fn one_part_is_adopted_with_the_checksums_it_arrived_with() {
        use std::os::unix::fs::MetadataExt as _;
        let (tmp, store, root) = store().await;
        let body = big_body();
        let (sha1, md5) = expected_checksums(&body);
        let u = upload(&root, body.len() as u64, u64::MAX >> 2);
        store.create_upload(&u).await.unwrap();
        let end = body.len() as u64;
        assert_eq!(append_chunks(&store, &u, &body).await, Appended::At(end));
        let u = store.upload(&u.id).await.unwrap().unwrap();
        assert!(u.hash_state.is_some(), "the part's hash state is recorded");
        let parts = store.blobs().list_under(&Path::from(PARTS_PREFIX)).await;
        let parts = parts.unwrap();
        assert_eq!(parts.len(), 1);
        let part_inode = std::fs::metadata(tmp.path().join("blobs").join(parts[0].0.as_ref()))
            .unwrap()
            .ino();

        let wrong = PutOptions {
            expected_checksum: Some((ChecksumAlgo::Sha1, "0".repeat(40))),
            ..PutOptions::default()
        };
        let refused = store.commit_upload(&u, wrong).await;
        assert!(
            matches!(refused, Err(StoreError::ChecksumMismatch { .. })),
            "{refused:?}"
        );
        assert!(
            store.upload(&u.id).await.unwrap().is_some(),
            "kept for another try"
        );

        let right = PutOptions {
            expected_checksum: Some((ChecksumAlgo::Md5, md5.to_uppercase())),
            ..PutOptions::default()
        };
        let node = store.commit_upload(&u, right).await.unwrap();
        let sums = node.checksums.clone().unwrap();
        assert_eq!((sums.sha1, sums.md5), (sha1, md5));
        let blob = store.blobs().local_path(node.blob_id().unwrap()).unwrap();
        assert_eq!(
            std::fs::metadata(&blob).unwrap().ino(),
            part_inode,
            "no copy"
        );
        assert_eq!(store.read_all(&node.id).await, body);
        let left = store.blobs().list_under(&Path::from(PARTS_PREFIX)).await;
        assert_eq!(left.unwrap(), Vec::new(), "the part's own name is gone");
        assert!(store.upload(&u.id).await.unwrap().is_none());
    }

    /// An upload of several parts is copied into one blob with the checksums its parts were
    /// hashed to as they arrived: the same as hashing the whole file.
    #[tokio::test]
    async fn several_parts_commit_with_the_checksums_they_arrived_with() {
        let (_tmp, store, root) = store().await;
        let body = big_body();
        let (sha1, md5) = expected_checksums(&body);
        let u = upload(&root, body.len() as u64, u64::MAX >> 2);
        store.create_upload(&u).await.unwrap();
        let mut at = 0;
        for piece in body.chunks(1_100_000) {
            let u = store.upload(&u.id).await.unwrap().unwrap();
            assert!(u.offset == 0 || u.hash_state.is_some());
            at += piece.len() as u64;
            assert_eq!(append_chunks(&store, &u, piece).await, Appended::At(at));
        }
        let u = store.upload(&u.id).await.unwrap().unwrap();
        let node = store
            .commit_upload(&u, PutOptions::default())
            .await
            .unwrap();
        let sums = node.checksums.clone().unwrap();
        assert_eq!((sums.sha1, sums.md5), (sha1, md5));
        assert_eq!(store.read_all(&node.id).await, body);
    }

    /// Parts continue the hash from one to the next, so the state covers the whole upload;
    /// a part written without a state to continue leaves none, and the commit hashes again.
    #[tokio::test]
    async fn the_hash_state_follows_the_offset() {
        let (_tmp, store, root) = store().await;
        let body = big_body();
        let (sha1, _) = expected_checksums(&body);
        let (head, rest) = body.split_at(1_000_003);
        let u = upload(&root, body.len() as u64, u64::MAX >> 2);
        store.create_upload(&u).await.unwrap();
        append_chunks(&store, &u, head).await;
        let mut u = store.upload(&u.id).await.unwrap().unwrap();
        let state = u.hash_state.clone().unwrap();
        let mut h = Hasher::resume(&state).unwrap();
        h.update(&Bytes::copy_from_slice(rest)).await;
        assert_eq!(h.finish().await.unwrap().sha1, sha1);

        // A record read without its state (as if a part had been written unhashed).
        u.hash_state = None;
        let (middle, tail) = rest.split_at(1 << 20);
        append_chunks(&store, &u, middle).await;
        let u = store.upload(&u.id).await.unwrap().unwrap();
        assert_eq!(u.hash_state, None, "no state covers the new offset");
        append_chunks(&store, &u, tail).await;
        let u = store.upload(&u.id).await.unwrap().unwrap();
        assert_eq!(u.hash_state, None);
        let node = store
            .commit_upload(&u, PutOptions::default())
            .await
            .unwrap();
        assert_eq!(node.checksums.unwrap().sha1, sha1);
    }

    #[tokio::test]
    async fn expiry_removes_uploads_and_strays() {
        let (_tmp, store, root) = store().await;
        let live = upload(&root, 10, u64::MAX >> 2);
        let dead = upload(&root, 10, 1);
        for u in [&live, &dead] {
            store.create_upload(u).await.unwrap();
            assert_eq!(append(&store, u, b"abc").await, Appended::At(3));
        }
        // A part written but never recorded (its instance died before the transaction).
        let mut stray = store.upload_part(&store.upload(&live.id).await.unwrap().unwrap());
        stray.write(Bytes::from_static(b"zz")).await.unwrap();
        stray.writer.finish().await.unwrap();
        assert_eq!(store.expire_uploads(1000, 3_600_000).await.unwrap(), 1);
        assert!(store.upload(&dead.id).await.unwrap().is_none());
        let objects = store.blobs().list_under(&Path::from(PARTS_PREFIX)).await;
        assert_eq!(
            objects.unwrap().len(),
            2,
            "the live part and the young stray"
        );
        assert_eq!(store.expire_uploads(1000, 0).await.unwrap(), 0);
        let objects = store.blobs().list_under(&Path::from(PARTS_PREFIX)).await;
        let objects = objects.unwrap();
        assert_eq!(objects.len(), 1);
        assert_eq!(upload_of_key(&objects[0].0), Some(live.id.clone()));
        assert!(store.remove_upload(&live.id).await.unwrap());
        assert!(!store.remove_upload(&live.id).await.unwrap());
    }
}
