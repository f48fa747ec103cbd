//! Upload folders: Nextcloud's chunked uploads (`/remote.php/dav/uploads/USER/NAME`), kept
//! beside the resumable (TUS) uploads in the same rows, so the same expiry, removal and commit
//! claim serve both, and every instance sharing the database and blob store serves every
//! folder.
//!
//! A folder is created empty, without a target; chunks are added by name in any order (a name
//! again replaces its chunk); it is assembled in the natural order of the names (as Nextcloud
//! does: `strnatcmp`), onto whatever file the client finally names.
//!
//! **Assembly copies nothing in the usual case.** A client uploads the chunks of one file one
//! after another, in name order. Such a chunk is written *in place*: straight into the blob the
//! file will have (see `blob::assembly`: at its offset on disk, as parts of a multipart upload
//! on S3), and its bytes are hashed on the way, the SHA-1/MD5/Adler-32 state carried in the
//! row from chunk to chunk. Assembling is then completing that blob and committing it: no byte
//! is read or written again. One chunk at a time is placed: a writer claims the folder's tail
//! (`place_claim`, with a deadline, so a killed writer's claim lapses), and a chunk that finds the
//! tail claimed, or whose name sorts before the last placed one, is stored as an object of
//! its own, like a TUS part. A folder with such a chunk (or a piece S3 cannot take as a part:
//! under 5 MiB and not last) is assembled the slow way: its chunks streamed in order into a
//! new blob through [`Store::put_file`], which also computes the checksums.
//!
//! Durability: a chunk counts once its bytes are synced (disk) or stored (S3) and its row is
//! committed; a chunk cut short is not recorded, and its place is given to the next one.

use std::cmp::Ordering;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use object_store::path::Path;
use sqlx::Row as _;
use sqlx::any::AnyRow;

use crate::blob::{BlobStore, Placement};
use crate::checksum::{ChecksumAlgo, Hasher};
use crate::db::db_size;
use crate::ids::{new_id, now_ms};
use crate::model::{Node, PutOptions};
use crate::store::Written;
use crate::store::commit::PutCommit;
use crate::{Result, Store, StoreError};
use arca_store::BoxError;

/// Where chunks stored on their own live: among the TUS parts, so the same stray sweep finds
/// those a killed instance left.
const PARTS_PREFIX: &str = "uploads";
/// How long a chunk may hold the folder's tail: at least this, plus a second per MiB.
const PLACING_MS: i64 = 120_000;
const PLACING_PER_MIB_MS: i64 = 1_000;
/// How long an assembly holds the folder (see `uploads::COMMIT_CLAIM_MS`).
const ASSEMBLY_CLAIM_MS: i64 = 120_000;
const ASSEMBLY_CLAIM_PER_MIB_MS: i64 = 1_000;

/// An upload folder as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadFolder {
    /// The upload's id (32 hex).
    pub id: String,
    /// Its creator, the only one who reaches it.
    pub user: String,
    /// The name the client gave it.
    pub name: String,
    /// The announced total size, if any (checked against the chunks at assembly).
    pub total: Option<u64>,
    /// Seconds since the epoch; every chunk stored pushes it back.
    pub expires: u64,
    /// When it was created or last got a chunk (ms since the epoch).
    pub touched_ms: i64,
    /// Filled by [`Store::upload_folder`]: its chunks in assembly order.
    pub chunks: Vec<FolderChunk>,
}

impl UploadFolder {
    /// Changes whenever the chunks do: hex of the folder's last change and its chunk count.
    pub fn etag(&self) -> String {
        format!("{:016x}{:016x}", self.touched_ms, self.chunks.len())
    }
}

/// One chunk of an upload folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderChunk {
    pub name: String,
    pub size: u64,
    /// When it was stored (ms since the epoch).
    pub stored_ms: i64,
}

/// A chunk's row: where its bytes are.
#[derive(Debug, Clone)]
struct ChunkRow {
    name: String,
    size: u64,
    /// In place: byte offset (disk) or first part index (S3); `None`: an object of its own.
    place: Option<u64>,
    part_key: String,
    /// S3, in place: the ETags of its parts.
    parts: Vec<String>,
}

/// The folder's in-place state, as one chunk reads it before claiming the tail.
#[derive(Debug)]
struct Tail {
    assembly: String,
    multipart: String,
    /// Bytes (disk) or parts (S3) placed.
    tail: u64,
    tail_bytes: u64,
    tail_name: String,
    tail_small: bool,
    placing: i64,
    hashed: u64,
    hash_state: Option<Vec<u8>>,
}

/// A folder's tail claimed by the chunk being written in place. Given back by
/// [`TailClaim::release`], or on drop while still armed (the request's future dropped
/// mid-body): then on the runtime, since drop cannot wait.
struct TailClaim {
    store: Store,
    upload_id: String,
    until: i64,
    armed: bool,
}

impl TailClaim {
    async fn release(mut self) {
        self.armed = false;
        self.store.release_tail(&self.upload_id, self.until).await;
    }
}

impl Drop for TailClaim {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, id, until) = (
            self.store.clone(),
            std::mem::take(&mut self.upload_id),
            self.until,
        );
        // Without a runtime (process teardown) the claim lapses at its deadline instead.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { store.release_tail(&id, until).await });
        }
    }
}

/// Natural order of chunk names, as PHP's `strnatcmp` (which Nextcloud assembles by): runs of
/// digits compare as numbers, so `2` < `10` and zero-padded offsets sort as numbers too. Ties
/// (`01` and `1`) fall back to plain order, so the order is total.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(c), Some(d)) if c.is_ascii_digit() && d.is_ascii_digit() => {
                let run = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
                let (n, m) = (run(x), run(y));
                let trim = |s: &[u8]| {
                    let z = s.iter().take_while(|&&c| c == b'0').count();
                    s[z..].to_vec()
                };
                let (p, q) = (trim(&x[..n]), trim(&y[..m]));
                let by_value = p.len().cmp(&q.len()).then_with(|| p.cmp(&q));
                if by_value != Ordering::Equal {
                    return by_value;
                }
                x = &x[n..];
                y = &y[m..];
            }
            (Some(c), Some(d)) => {
                if c != d {
                    return c.cmp(d);
                }
                x = &x[1..];
                y = &y[1..];
            }
        }
    }
}

fn unsigned(row: &AnyRow, i: usize) -> Result<u64> {
    let v: i64 = row.try_get(i)?;
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("upload column {i}: {v}")))
}

/// A [`Tail`] from a row starting with [`TAIL_COLS`].
fn tail_from_row(row: &AnyRow) -> Result<Tail> {
    Ok(Tail {
        assembly: row.try_get(0)?,
        multipart: row.try_get(1)?,
        tail: unsigned(row, 2)?,
        tail_bytes: unsigned(row, 3)?,
        tail_name: row.try_get(4)?,
        tail_small: row.try_get::<i64, _>(5)? != 0,
        placing: row.try_get(6)?,
        hashed: unsigned(row, 7)?,
        hash_state: row.try_get(8)?,
    })
}

fn folder_from_row(row: &AnyRow) -> Result<UploadFolder> {
    let length: i64 = row.try_get(3)?;
    Ok(UploadFolder {
        id: row.try_get(0)?,
        user: row.try_get(1)?,
        name: row.try_get(2)?,
        total: u64::try_from(length).ok(),
        expires: unsigned(row, 4)?,
        touched_ms: row.try_get(5)?,
        chunks: Vec::new(),
    })
}

/// A folder's columns (`length` is its announced total, -1 if none).
const FOLDER_COLS: &str = "id, user_id, label, length, expires, touched";

fn now_secs() -> u64 {
    u64::try_from(now_ms() / 1000).unwrap_or(0)
}

impl Store {
    /// Creates upload folder `name` of `user`, living until `expires` (unix seconds) unless a
    /// chunk pushes that back. `AlreadyExists` if the user has a live folder of that name (an
    /// expired one is removed first).
    pub async fn create_upload_folder(
        &self,
        user: &str,
        name: &str,
        total: Option<u64>,
        expires: u64,
    ) -> Result<UploadFolder> {
        if let Some(old) = self.folder_row(user, name).await?
            && old.expires <= now_secs()
        {
            self.remove_upload(&old.id).await?;
        }
        let id = new_id();
        let assembly = new_id();
        let multipart = match self.blobs().placement() {
            Placement::Parts => self.blobs().start_parts(&assembly).await?,
            _ => String::new(),
        };
        let now = now_ms();
        let mut w = self.db().begin_write().await?;
        // A folder counts its bytes in its chunks' rows; `length` is the announced total.
        let r = sqlx::query(
            "INSERT INTO uploads (id, user_id, space_id, parent_id, name, path, owner, length, \
             received, if_match, mtime, expires, committing, created, label, assembly, \
             multipart, touched) \
             VALUES ($1, $2, '', '', '', '', '', $3, 0, '', 0, $4, 0, $5, $6, $7, $8, $5)",
        )
        .bind(&id)
        .bind(user)
        .bind(match total {
            Some(t) => db_size(t)?,
            None => -1,
        })
        .bind(db_size(expires)?)
        .bind(now)
        .bind(name)
        .bind(&assembly)
        .bind(&multipart)
        .execute(w.conn())
        .await
        .map(|_| ())
        .map_err(StoreError::from);
        let r = w.finish(r).await;
        if let Err(e) = r {
            if let Err(d) = self.blobs().discard_pieces(&assembly, &multipart).await {
                tracing::debug!(error = %d, "abandoning an upload folder's multipart upload");
            }
            return Err(if e.is_unique_violation() {
                StoreError::AlreadyExists
            } else {
                e
            });
        }
        Ok(UploadFolder {
            id,
            user: user.to_owned(),
            name: name.to_owned(),
            total,
            expires,
            touched_ms: now,
            chunks: Vec::new(),
        })
    }

    async fn folder_row(&self, user: &str, name: &str) -> Result<Option<UploadFolder>> {
        if name.is_empty() {
            return Ok(None);
        }
        let mut c = self.read_conn().await?;
        let sql = format!("SELECT {FOLDER_COLS} FROM uploads WHERE user_id = $1 AND label = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(user)
            .bind(name)
            .fetch_optional(&mut *c)
            .await?;
        row.as_ref().map(folder_from_row).transpose()
    }

    /// `user`'s live upload folder `name` with its chunks in assembly order.
    pub async fn upload_folder(
        &self,
        user: &str,
        name: &str,
        now_secs: u64,
    ) -> Result<Option<UploadFolder>> {
        let Some(mut folder) = self.folder_row(user, name).await? else {
            return Ok(None);
        };
        if folder.expires <= now_secs {
            return Ok(None);
        }
        let mut rows = self.chunk_rows_timed(&folder.id).await?;
        rows.sort_by(|a, b| natural_cmp(&a.0.name, &b.0.name));
        folder.chunks = rows
            .into_iter()
            .map(|(r, stored_ms)| FolderChunk {
                name: r.name,
                size: r.size,
                stored_ms,
            })
            .collect();
        Ok(Some(folder))
    }

    /// `user`'s live upload folders, without their chunks.
    pub async fn upload_folders(&self, user: &str, now_secs: u64) -> Result<Vec<UploadFolder>> {
        let mut c = self.read_conn().await?;
        let sql = format!(
            "SELECT {FOLDER_COLS} FROM uploads WHERE user_id = $1 AND label <> '' \
             AND expires > $2 ORDER BY label"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(user)
            .bind(db_size(now_secs)?)
            .fetch_all(&mut *c)
            .await?;
        rows.iter().map(folder_from_row).collect()
    }

    async fn chunk_rows_timed(&self, upload_id: &str) -> Result<Vec<(ChunkRow, i64)>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT name, size, place, part_key, parts, stored FROM upload_chunks \
             WHERE upload_id = $1",
        )
        .bind(upload_id)
        .fetch_all(&mut *c)
        .await?;
        rows.iter()
            .map(|row| {
                let place: i64 = row.try_get(2)?;
                let parts: String = row.try_get(4)?;
                let parts = decode_parts(&parts)?;
                Ok((
                    ChunkRow {
                        name: row.try_get(0)?,
                        size: unsigned(row, 1)?,
                        place: u64::try_from(place).ok(),
                        part_key: row.try_get(3)?,
                        parts,
                    },
                    row.try_get(5)?,
                ))
            })
            .collect()
    }

    /// Removes chunk `name` of upload folder `upload_id`; `false` if there was none. A chunk
    /// placed in the assembly leaves its place behind: the folder is then assembled by copy.
    pub async fn remove_upload_chunk(&self, upload_id: &str, name: &str) -> Result<bool> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let row = sqlx::query(
                "DELETE FROM upload_chunks WHERE upload_id = $1 AND name = $2 RETURNING part_key",
            )
            .bind(upload_id)
            .bind(name)
            .fetch_optional(w.conn())
            .await?;
            let key = match row {
                Some(row) => Some(row.try_get::<String, _>(0)?),
                None => None,
            };
            if key.is_some() {
                sqlx::query("UPDATE uploads SET touched = $1 WHERE id = $2")
                    .bind(now_ms())
                    .bind(upload_id)
                    .execute(w.conn())
                    .await?;
            }
            Ok(key)
        }
        .await;
        match w.finish(r).await? {
            None => Ok(false),
            Some(key) => {
                if !key.is_empty() {
                    self.blobs().delete_at(&[Path::from(key)]).await?;
                }
                Ok(true)
            }
        }
    }

    /// Stores chunk `name` of `folder` from `body` (`length` bytes if known), replacing a chunk
    /// of that name, and pushes the folder's expiry to `expires`. With `expected`, the chunk
    /// must have that checksum (else `ChecksumMismatch`, and nothing is kept). Returns the
    /// chunk and whether it replaced one. `NotFound` if the folder went meanwhile.
    pub async fn put_upload_chunk<S, E>(
        &self,
        folder: &UploadFolder,
        name: &str,
        length: Option<u64>,
        body: S,
        expected: Option<(ChecksumAlgo, String)>,
        expires: u64,
    ) -> Result<(FolderChunk, bool)>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Send,
        E: Into<BoxError>,
    {
        let claim = match length {
            Some(len) => self.claim_tail(&folder.id, name, len).await?,
            None => None,
        };
        // Whatever ends this request (an error, or its future dropped when the client goes
        // away mid-body), a tail it claimed and did not record is given back.
        let mut held = claim.as_ref().map(|(_, until)| TailClaim {
            store: self.clone(),
            upload_id: folder.id.clone(),
            until: *until,
            armed: true,
        });
        let (row, hash) = match claim {
            Some((tail, until)) => {
                let len = length.unwrap_or(0);
                match self.write_in_place(&tail, len, body, expected).await {
                    Ok((parts, hash)) => {
                        let small = self.blobs().placement() == Placement::Parts
                            && BlobStore::is_small_piece(len);
                        let placed = match self.blobs().placement() {
                            Placement::Parts => parts.len() as u64,
                            _ => len,
                        };
                        let row = ChunkRow {
                            name: name.to_owned(),
                            size: len,
                            place: Some(tail.tail),
                            part_key: String::new(),
                            parts,
                        };
                        (row, Some((tail, until, placed, small, hash)))
                    }
                    Err(e) => {
                        if let Some(claim) = held.take() {
                            claim.release().await;
                        }
                        return Err(e);
                    }
                }
            }
            None => {
                let (key, size) = self
                    .write_own_object(&folder.id, length, body, expected)
                    .await?;
                let row = ChunkRow {
                    name: name.to_owned(),
                    size,
                    place: None,
                    part_key: key,
                    parts: Vec::new(),
                };
                (row, None)
            }
        };
        let stored = now_ms();
        let mut w = self.db().begin_write().await?;
        let r = async {
            if let Some((tail, until, placed, small, hash)) = &hash {
                let moved = sqlx::query(
                    "UPDATE uploads SET tail = $1, tail_bytes = $2, tail_name = $3, \
                     tail_small = $4, place_claim = 0, hashed = $5, hash_state = $6, touched = $7, \
                     expires = $8 WHERE id = $9 AND place_claim = $10 AND tail = $11",
                )
                .bind(db_size(tail.tail + placed)?)
                .bind(db_size(tail.tail_bytes + row.size)?)
                .bind(&row.name)
                .bind(i64::from(*small))
                .bind(db_size(hash.as_ref().map_or(0, |(n, _)| *n))?)
                .bind(hash.as_ref().map(|(_, s)| s.clone()))
                .bind(stored)
                .bind(db_size(expires)?)
                .bind(&folder.id)
                .bind(*until)
                .bind(db_size(tail.tail)?)
                .execute(w.conn())
                .await?
                .rows_affected();
                if moved == 0 {
                    // The claim lapsed and another chunk took the place: this one's bytes may
                    // have been overwritten. The client sends it again.
                    return Err(StoreError::Locked);
                }
            } else {
                let live =
                    sqlx::query("UPDATE uploads SET touched = $1, expires = $2 WHERE id = $3")
                        .bind(stored)
                        .bind(db_size(expires)?)
                        .bind(&folder.id)
                        .execute(w.conn())
                        .await?
                        .rows_affected();
                if live == 0 {
                    return Err(StoreError::NotFound);
                }
            }
            let old = sqlx::query(
                "DELETE FROM upload_chunks WHERE upload_id = $1 AND name = $2 RETURNING part_key",
            )
            .bind(&folder.id)
            .bind(&row.name)
            .fetch_optional(w.conn())
            .await?;
            let old_key = match old {
                Some(r) => Some(r.try_get::<String, _>(0)?),
                None => None,
            };
            sqlx::query(
                "INSERT INTO upload_chunks (upload_id, name, size, place, part_key, parts, stored) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&folder.id)
            .bind(&row.name)
            .bind(db_size(row.size)?)
            .bind(match row.place {
                Some(p) => db_size(p)?,
                None => -1,
            })
            .bind(&row.part_key)
            .bind(encode_parts(&row.parts))
            .bind(stored)
            .execute(w.conn())
            .await?;
            Ok(old_key)
        }
        .await;
        match w.finish(r).await {
            Ok(old_key) => {
                if let Some(claim) = held.as_mut() {
                    // Recorded: the update above gave the tail back with the chunk in it.
                    claim.armed = false;
                }
                if let Some(k) = old_key.as_ref().filter(|k| !k.is_empty())
                    && let Err(e) = self.blobs().delete_at(&[Path::from(k.as_str())]).await
                {
                    tracing::debug!(key = %k, error = %e, "deleting a replaced chunk");
                }
                let chunk = FolderChunk {
                    name: row.name,
                    size: row.size,
                    stored_ms: stored,
                };
                Ok((chunk, old_key.is_some()))
            }
            Err(e) => {
                match held.take() {
                    Some(claim) => claim.release().await,
                    None if !row.part_key.is_empty() => {
                        let _ = self.blobs().delete_at(&[Path::from(row.part_key)]).await;
                    }
                    None => {}
                }
                Err(e)
            }
        }
    }

    /// Claims the folder's tail for chunk `name` of `len` bytes if it can go in place: the
    /// blob store places pieces, no other chunk holds the tail, the name sorts after the last
    /// placed one, and (S3) the last placed piece may have a successor. Returns the tail as
    /// read and the claim's deadline, which is also its token.
    async fn claim_tail(
        &self,
        upload_id: &str,
        name: &str,
        len: u64,
    ) -> Result<Option<(Tail, i64)>> {
        let placement = self.blobs().placement();
        if placement == Placement::None {
            return Ok(None);
        }
        let mut c = self.read_conn().await?;
        let row = sqlx::query(
            "SELECT assembly, multipart, tail, tail_bytes, tail_name, tail_small, place_claim, \
             hashed, hash_state FROM uploads WHERE id = $1 AND label <> ''",
        )
        .bind(upload_id)
        .fetch_optional(&mut *c)
        .await?;
        drop(c);
        let Some(row) = row else {
            return Err(StoreError::NotFound);
        };
        let tail = tail_from_row(&row)?;
        let now = now_ms();
        let after =
            tail.tail_name.is_empty() || natural_cmp(name, &tail.tail_name) == Ordering::Greater;
        let blocked = tail.placing >= now
            || !after
            || tail.assembly.is_empty()
            || (placement == Placement::Parts && (tail.tail_small || tail.multipart.is_empty()));
        if blocked {
            return Ok(None);
        }
        let until = now
            + PLACING_MS
            + i64::try_from(len >> 20)
                .unwrap_or(i64::MAX / 2)
                .saturating_mul(PLACING_PER_MIB_MS);
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query(
            "UPDATE uploads SET place_claim = $1 WHERE id = $2 AND place_claim = $3 AND tail = $4 \
             AND committing < $5",
        )
        .bind(until)
        .bind(upload_id)
        .bind(tail.placing)
        .bind(db_size(tail.tail)?)
        .bind(now)
        .execute(w.conn())
        .await
        .map(|r| r.rows_affected())
        .map_err(StoreError::from);
        let claimed = w.finish(r).await? == 1;
        Ok(claimed.then_some((tail, until)))
    }

    /// One statement in a write transaction of its own, binding `id` (as `$1`) and `n` (as
    /// `$2`, if any): the small updates of a folder's claims and of an assembly's blob.
    async fn update_one(&self, sql: &'static str, id: &str, n: Option<i64>) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let mut q = sqlx::query(sql).bind(id);
        if let Some(n) = n {
            q = q.bind(n);
        }
        let r = q
            .execute(w.conn())
            .await
            .map(|_| ())
            .map_err(StoreError::from);
        w.finish(r).await
    }

    /// [`Store::update_one`] where a failure only costs time (a claim lapses by itself, the
    /// collector removes what a row left): logged, not returned.
    async fn update_one_or_log(&self, sql: &'static str, id: &str, n: Option<i64>, what: &str) {
        if let Err(e) = self.update_one(sql, id, n).await {
            tracing::warn!(id, error = %e, "{what}");
        }
    }

    /// Gives the tail back after a chunk that will not be recorded (only if still ours).
    async fn release_tail(&self, upload_id: &str, until: i64) {
        self.update_one_or_log(
            "UPDATE uploads SET place_claim = 0 WHERE id = $1 AND place_claim = $2",
            upload_id,
            Some(until),
            "releasing an upload folder's tail",
        )
        .await;
    }

    /// Writes a chunk at the tail, continuing the folder's hash when it covers everything
    /// placed. Returns the parts' ETags (S3) and the new hash state with the bytes it covers.
    async fn write_in_place<S, E>(
        &self,
        tail: &Tail,
        len: u64,
        body: S,
        expected: Option<(ChecksumAlgo, String)>,
    ) -> Result<(Vec<String>, Option<(u64, Vec<u8>)>)>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Send,
        E: Into<BoxError>,
    {
        let mut running = match (&tail.hash_state, tail.tail_bytes) {
            (_, 0) => Some(Hasher::new()),
            (Some(state), placed) if tail.hashed == placed => Hasher::resume(state),
            _ => None,
        };
        let mut own = expected.as_ref().map(|_| Hasher::new());
        let mut writer =
            self.blobs()
                .piece_writer(&tail.assembly, &tail.multipart, tail.tail, len)?;
        let mut body = std::pin::pin!(body);
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| StoreError::Body(e.into()))?;
            if let Some(h) = running.as_mut() {
                h.update(&chunk).await;
            }
            if let Some(h) = own.as_mut() {
                h.update(&chunk).await;
            }
            writer.write(chunk).await?;
        }
        if let (Some(h), Some((algo, want))) = (own, &expected) {
            check_checksum(h, *algo, want).await?;
        }
        let parts = writer.finish().await?;
        let hash = match running {
            Some(h) => Some((tail.tail_bytes + len, h.suspend().await?)),
            None => None,
        };
        Ok((parts, hash))
    }

    /// Writes a chunk as an object of its own under the upload's part prefix.
    async fn write_own_object<S, E>(
        &self,
        upload_id: &str,
        length: Option<u64>,
        body: S,
        expected: Option<(ChecksumAlgo, String)>,
    ) -> Result<(String, u64)>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Send,
        E: Into<BoxError>,
    {
        let key = Path::from(format!("{PARTS_PREFIX}/{upload_id}/c-{}", new_id()));
        let mut writer = self.blobs().writer_at(key.clone(), length);
        let mut own = expected.as_ref().map(|_| Hasher::new());
        let mut size = 0u64;
        let mut body = std::pin::pin!(body);
        let outcome: Result<()> = async {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| StoreError::Body(e.into()))?;
                size += chunk.len() as u64;
                if let Some(expected) = length
                    && size > expected
                {
                    return Err(StoreError::LengthMismatch {
                        expected,
                        received: size,
                    });
                }
                if let Some(h) = own.as_mut() {
                    h.update(&chunk).await;
                }
                writer.write(chunk).await?;
            }
            if let Some(expected) = length
                && size != expected
            {
                return Err(StoreError::LengthMismatch {
                    expected,
                    received: size,
                });
            }
            if let (Some(h), Some((algo, want))) = (own.take(), &expected) {
                check_checksum(h, *algo, want).await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = outcome {
            writer.abort().await;
            return Err(e);
        }
        writer.finish().await?;
        Ok((key.as_ref().to_owned(), size))
    }

    /// Assembles upload folder `upload_id` onto file `name` in directory `parent_id` with the
    /// conditions of `opts` (`content_length`: the total the client announced), then removes
    /// the folder. `Locked` while another assembly runs;
    /// `LengthMismatch` if the chunks do not add up to the announced total;
    /// `ChecksumMismatch` if the file does not have `opts.expected_checksum`. On failure the
    /// folder stays; whether to remove it is the caller's choice.
    pub async fn assemble_upload_folder(
        &self,
        upload_id: &str,
        parent_id: &str,
        name: &str,
        mut opts: PutOptions,
    ) -> Result<Node> {
        crate::names::validate_name(name)?;
        let (tail, mut rows, stolen) = self.claim_assembly(upload_id).await?;
        rows.sort_by(|a, b| natural_cmp(&a.name, &b.name));
        let total: u64 = rows.iter().map(|r| r.size).sum();
        let outcome = async {
            if let Some(announced) = opts.content_length
                && announced != total
            {
                return Err(StoreError::LengthMismatch {
                    expected: announced,
                    received: total,
                });
            }
            opts.content_length = Some(total);
            if !stolen && self.in_place_complete(&tail, &rows, total) {
                self.assemble_in_place(upload_id, &tail, &rows, total, parent_id, name, opts)
                    .await
            } else {
                let body = self.pieces_stream(&tail, &rows).await?;
                self.put_file(parent_id, name, body, opts).await
            }
        }
        .await;
        match outcome {
            Ok(node) => {
                if let Err(e) = self.remove_upload_keeping(upload_id, true).await {
                    tracing::warn!(upload = upload_id, error = %e, "removing an assembled folder");
                }
                Ok(node)
            }
            Err(e) => {
                self.release_assembly(upload_id).await;
                Err(e)
            }
        }
    }

    /// Claims the folder for its assembly (no other assembly runs), taking the tail from a
    /// chunk still being placed (then `true`).
    async fn claim_assembly(&self, upload_id: &str) -> Result<(Tail, Vec<ChunkRow>, bool)> {
        let now = now_ms();
        let mut w = self.db().begin_write().await?;
        let r = async {
            let row = sqlx::query(
                "SELECT assembly, multipart, tail, tail_bytes, tail_name, tail_small, place_claim, \
                 hashed, hash_state, committing FROM uploads WHERE id = $1 AND label <> ''",
            )
            .bind(upload_id)
            .fetch_optional(w.conn())
            .await?
            .ok_or(StoreError::NotFound)?;
            let tail = tail_from_row(&row)?;
            let committing: i64 = row.try_get(9)?;
            if committing >= now {
                return Err(StoreError::Locked);
            }
            let bytes = tail.tail_bytes;
            let hold = ASSEMBLY_CLAIM_MS
                + i64::try_from(bytes >> 20)
                    .unwrap_or(i64::MAX / 2)
                    .saturating_mul(ASSEMBLY_CLAIM_PER_MIB_MS);
            // A chunk still being placed is one the client gave up on (it sends the MOVE once
            // every chunk is stored): its claim is taken away, so it can no longer be recorded,
            // and since its writer may still write past the tail, the file is then assembled
            // by copying the recorded chunks rather than from the assembly itself.
            sqlx::query("UPDATE uploads SET committing = $1, place_claim = 0 WHERE id = $2")
                .bind(now.saturating_add(hold))
                .bind(upload_id)
                .execute(w.conn())
                .await?;
            Ok((tail.placing >= now, tail))
        }
        .await;
        let (stolen, tail) = w.finish(r).await?;
        let rows = self
            .chunk_rows_timed(upload_id)
            .await?
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        Ok((tail, rows, stolen))
    }

    async fn release_assembly(&self, upload_id: &str) {
        self.update_one_or_log(
            "UPDATE uploads SET committing = 0 WHERE id = $1",
            upload_id,
            None,
            "releasing an upload folder",
        )
        .await;
    }

    /// Whether the chunks, in order, are exactly the pieces placed in the assembly, with the
    /// hash covering them all: then the assembly is the file.
    fn in_place_complete(&self, tail: &Tail, rows: &[ChunkRow], total: u64) -> bool {
        let placement = self.blobs().placement();
        if placement == Placement::None
            || tail.assembly.is_empty()
            || tail.hashed != total
            || tail.tail_bytes != total
            || tail.hash_state.is_none()
        {
            return false;
        }
        let mut at = 0u64;
        for r in rows {
            if r.place != Some(at) {
                return false;
            }
            at += match placement {
                Placement::Parts => r.parts.len() as u64,
                _ => r.size,
            };
        }
        at == tail.tail
    }

    /// The fast path: the assembly completed as the file's blob and committed.
    #[allow(clippy::too_many_arguments)]
    async fn assemble_in_place(
        &self,
        upload_id: &str,
        tail: &Tail,
        rows: &[ChunkRow],
        total: u64,
        parent_id: &str,
        name: &str,
        opts: PutOptions,
    ) -> Result<Node> {
        let state = tail.hash_state.as_deref().unwrap_or_default();
        let checksums = Hasher::resume(state)
            .ok_or_else(|| StoreError::Corrupt(format!("upload {upload_id}: hash state")))?
            .finish()
            .await?;
        checksums.verify(opts.expected_checksum.as_ref())?;
        let (space_id, allowance) = self.precheck_put(parent_id, name, &opts).await?;
        if allowance.is_some_and(|a| total > a) {
            return Err(StoreError::QuotaExceeded);
        }
        // The blob's row first ("uploading"), so that from the moment the blob is complete a
        // crash leaves something the orphan collector finds.
        self.record_assembled_blob(&tail.assembly).await?;
        let etags: Vec<String> = rows.iter().flat_map(|r| r.parts.iter().cloned()).collect();
        if !(self.blobs().placement() == Placement::Parts && tail.multipart.is_empty()) {
            self.blobs()
                .complete_pieces(&tail.assembly, &tail.multipart, total, etags)
                .await?;
        }
        if !tail.multipart.is_empty() {
            // Completed: a retry must not complete it again.
            self.forget_assembly(upload_id, false).await?;
        }
        let put = PutCommit {
            space_id,
            parent_id: parent_id.to_owned(),
            name: name.to_owned(),
            opts,
            written: Written {
                blob_id: tail.assembly.clone(),
                size: total,
                checksums,
                inline: None,
            },
        };
        match self.committer().put(put).await {
            Ok(node) => Ok(node),
            Err(failed) => {
                if failed.maybe_committed {
                    // The file may point at the blob now: the folder must never delete it.
                    // Committed or not, the collector judges it by its row.
                    if let Err(e) = self.forget_assembly(upload_id, true).await {
                        tracing::warn!(upload = upload_id, error = %e, "detaching an assembly");
                    }
                } else {
                    self.unrecord_assembled_blob(&tail.assembly).await;
                }
                Err(failed.error)
            }
        }
    }

    async fn record_assembled_blob(&self, blob_id: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = sqlx::query(
            "INSERT INTO blobs (id, state, size, created) VALUES ($1, 0, 0, $2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(blob_id)
        .bind(now_ms())
        .execute(w.conn())
        .await
        .map(|_| ())
        .map_err(StoreError::from);
        w.finish(r).await
    }

    async fn unrecord_assembled_blob(&self, blob_id: &str) {
        self.update_one_or_log(
            "DELETE FROM blobs WHERE id = $1 AND state = 0",
            blob_id,
            None,
            "unrecording an assembly's blob",
        )
        .await;
    }

    /// Clears the folder's multipart id (completed), and with `whole` its assembly too (the
    /// blob is no longer the folder's to delete).
    async fn forget_assembly(&self, upload_id: &str, whole: bool) -> Result<()> {
        let sql = if whole {
            "UPDATE uploads SET multipart = '', assembly = '' WHERE id = $1"
        } else {
            "UPDATE uploads SET multipart = '' WHERE id = $1"
        };
        self.update_one(sql, upload_id, None).await
    }

    /// The slow path's body: the chunks' bytes in order, each from its own object or from its
    /// place in the assembly (on S3 the multipart upload is completed first, so its parts can
    /// be read: every placed piece but the last is at least 5 MiB, so it always completes).
    async fn pieces_stream(
        &self,
        tail: &Tail,
        rows: &[ChunkRow],
    ) -> Result<BoxStream<'static, Result<Bytes>>> {
        let placement = self.blobs().placement();
        let placed: Vec<&ChunkRow> = rows.iter().filter(|r| r.place.is_some()).collect();
        // Byte offsets of the placed chunks inside the assembly.
        let mut offsets = std::collections::HashMap::new();
        if placement == Placement::Parts && !placed.is_empty() {
            let mut by_place = placed.clone();
            by_place.sort_by_key(|r| r.place);
            let mut at = 0u64;
            let mut etags = Vec::new();
            for r in &by_place {
                offsets.insert(r.name.clone(), at);
                at += r.size;
                etags.extend(r.parts.iter().cloned());
            }
            if !tail.multipart.is_empty() {
                self.blobs()
                    .complete_pieces(&tail.assembly, &tail.multipart, at, etags)
                    .await?;
            }
        } else {
            for r in &placed {
                offsets.insert(r.name.clone(), r.place.unwrap_or(0));
            }
        }
        enum Piece {
            Object(Path),
            Range(String, u64, u64),
        }
        let pieces: Vec<Piece> = rows
            .iter()
            .filter(|r| r.size > 0)
            .map(|r| match r.place {
                None => Piece::Object(Path::from(r.part_key.as_str())),
                Some(_) => {
                    let start = offsets.get(&r.name).copied().unwrap_or(0);
                    Piece::Range(tail.assembly.clone(), start, start + r.size)
                }
            })
            .collect();
        let blobs = self.blobs().clone();
        Ok(futures::stream::iter(pieces)
            .then(move |piece| {
                let blobs = blobs.clone();
                async move {
                    match piece {
                        Piece::Object(key) => blobs.read_at(&key).await,
                        Piece::Range(id, start, end) => blobs.read(&id, Some((start, end))).await,
                    }
                }
            })
            .try_flatten()
            .boxed())
    }
}

/// A placed chunk's part ETags as stored: their count, then one per line (an ETag may be
/// empty: some stores give none).
fn encode_parts(parts: &[String]) -> String {
    let mut out = parts.len().to_string();
    for p in parts {
        out.push('\n');
        out.push_str(p);
    }
    out
}

fn decode_parts(text: &str) -> Result<Vec<String>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let mut lines = text.split('\n');
    let n: usize = lines
        .next()
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("chunk parts {text:?}")))?;
    let parts: Vec<String> = lines.map(str::to_owned).collect();
    if parts.len() != n {
        return Err(StoreError::Corrupt(format!("chunk parts {text:?}")));
    }
    Ok(parts)
}

/// Finishes a chunk's own hasher and compares it with what the client announced.
async fn check_checksum(h: Hasher, algo: ChecksumAlgo, want: &str) -> Result<()> {
    h.finish().await?.verify(Some(&(algo, want.to_owned())))
}

#[cfg(test)]
mod tests {
    use sha1::Digest as _;

    use super::*;
    use crate::StoreConfig;

    const FAR: u64 = u64::MAX >> 2;

    async fn store(s3: bool) -> (tempfile::TempDir, Store, String) {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", tmp.path().join("m.db").display());
        let cfg = StoreConfig::new(url, tmp.path().join("blobs"));
        let store = if s3 {
            Store::open_with_blobs(cfg, BlobStore::in_memory_with_parts())
                .await
                .unwrap()
        } else {
            Store::open(cfg).await.unwrap()
        };
        let root = store.personal_space("alice").await.unwrap().root_id;
        (tmp, store, root)
    }

    fn body(data: &[u8]) -> impl Stream<Item = std::result::Result<Bytes, std::io::Error>> + use<> {
        let frames: Vec<_> = data
            .chunks(7_001)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        futures::stream::iter(frames)
    }

    fn data(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 11) as u8)
            .collect()
    }

    async fn put(store: &Store, f: &UploadFolder, name: &str, bytes: &[u8]) {
        store
            .put_upload_chunk(f, name, Some(bytes.len() as u64), body(bytes), None, FAR)
            .await
            .unwrap();
    }

    /// The one value `sql` selects for upload `id`.
    async fn cell<T>(store: &Store, sql: &'static str, id: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
    {
        let mut c = store.read_conn().await.unwrap();
        sqlx::query(sql)
            .bind(id)
            .fetch_one(&mut *c)
            .await
            .unwrap()
            .try_get(0)
            .unwrap()
    }

    async fn chunk_state(store: &Store, id: &str) -> (u64, u64) {
        let mut c = store.read_conn().await.unwrap();
        let row = sqlx::query("SELECT tail_bytes, hashed FROM uploads WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *c)
            .await
            .unwrap();
        (unsigned(&row, 0).unwrap(), unsigned(&row, 1).unwrap())
    }

    /// Chunks sent in order land in place: the file's blob is the assembly itself (nothing
    /// copied), with the checksums carried from chunk to chunk; the folder is gone after.
    #[tokio::test]
    async fn chunks_in_order_become_the_file_without_a_copy() {
        for s3 in [false, true] {
            let (_tmp, store, root) = store(s3).await;
            let whole = data(3 * 6_000_000 + 123, 1);
            let f = store
                .create_upload_folder("alice", "up-1", Some(whole.len() as u64), FAR)
                .await
                .unwrap();
            assert!(matches!(
                store.create_upload_folder("alice", "up-1", None, FAR).await,
                Err(StoreError::AlreadyExists)
            ));
            for (i, piece) in whole.chunks(6_000_000).enumerate() {
                put(&store, &f, &format!("{:016}", i * 6_000_000), piece).await;
            }
            assert_eq!(
                chunk_state(&store, &f.id).await,
                (whole.len() as u64, whole.len() as u64)
            );
            let listed = store
                .upload_folder("alice", "up-1", 0)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(listed.chunks.len(), 4);
            assert_eq!(listed.chunks[3].size, 123);
            let assembly: String =
                cell(&store, "SELECT assembly FROM uploads WHERE id = $1", &f.id).await;
            let node = store
                .assemble_upload_folder(&f.id, &root, "big.bin", PutOptions::default())
                .await
                .unwrap();
            assert_eq!(node.blob_id(), Some(assembly.as_str()), "s3: {s3}");
            assert_eq!(store.read_all(&node.id).await, whole);
            let sums = node.checksums.clone().unwrap();
            assert_eq!(sums.sha1, crate::checksum::hex(&sha1::Sha1::digest(&whole)));
            assert!(
                store
                    .upload_folder("alice", "up-1", 0)
                    .await
                    .unwrap()
                    .is_none()
            );
        }
    }

    /// Out of order, replaced and removed chunks: the folder is assembled by copy in name
    /// order, with the checksums computed then.
    #[tokio::test]
    async fn chunks_out_of_order_are_assembled_in_name_order() {
        for s3 in [false, true] {
            let (_tmp, store, root) = store(s3).await;
            let f = store
                .create_upload_folder("alice", "x", None, FAR)
                .await
                .unwrap();
            let (a, b, c) = (data(5 << 20, 2), data(6 << 20, 3), data(1000, 4));
            put(&store, &f, "2", &b).await;
            put(&store, &f, "1", &data(10, 9)).await; // sorts before "2": stored on its own
            put(&store, &f, "10", &c).await;
            put(&store, &f, "1", &a).await; // replaces the first "1"
            put(&store, &f, "5", &data(77, 5)).await;
            assert!(store.remove_upload_chunk(&f.id, "5").await.unwrap());
            assert!(!store.remove_upload_chunk(&f.id, "5").await.unwrap());
            let names: Vec<String> = store
                .upload_folder("alice", "x", 0)
                .await
                .unwrap()
                .unwrap()
                .chunks
                .into_iter()
                .map(|c| c.name)
                .collect();
            assert_eq!(names, ["1", "2", "10"]);
            let opts = PutOptions {
                content_length: Some(1),
                ..PutOptions::default()
            };
            assert!(matches!(
                store.assemble_upload_folder(&f.id, &root, "f", opts).await,
                Err(StoreError::LengthMismatch { .. })
            ));
            let node = store
                .assemble_upload_folder(&f.id, &root, "f", PutOptions::default())
                .await
                .unwrap();
            let want = [a.clone(), b.clone(), c.clone()].concat();
            assert_eq!(store.read_all(&node.id).await, want, "s3: {s3}");
            assert_eq!(
                node.checksums.unwrap().sha1,
                crate::checksum::hex(&sha1::Sha1::digest(&want))
            );
            let left = store
                .blobs()
                .list_under(&Path::from(PARTS_PREFIX))
                .await
                .unwrap();
            assert_eq!(left, Vec::new());
        }
    }

    /// A chunk or a file with the wrong checksum is refused; the file keeps its content.
    #[tokio::test]
    async fn checksums_are_verified_per_chunk_and_per_file() {
        let (_tmp, store, root) = store(false).await;
        let old = store
            .put_file(&root, "f", body(b"old content"), PutOptions::default())
            .await
            .unwrap();
        let f = store
            .create_upload_folder("alice", "c", None, FAR)
            .await
            .unwrap();
        let piece = data(1 << 20, 7);
        let wrong = Some((ChecksumAlgo::Sha1, "00".repeat(20)));
        let r = store
            .put_upload_chunk(&f, "1", Some(piece.len() as u64), body(&piece), wrong, FAR)
            .await;
        assert!(
            matches!(r, Err(StoreError::ChecksumMismatch { .. })),
            "{r:?}"
        );
        let right = crate::checksum::hex(&md5::Md5::digest(&piece));
        store
            .put_upload_chunk(
                &f,
                "1",
                Some(piece.len() as u64),
                body(&piece),
                Some((ChecksumAlgo::Md5, right.to_uppercase())),
                FAR,
            )
            .await
            .unwrap();
        let opts = PutOptions {
            expected_checksum: Some((ChecksumAlgo::Adler32, "01234567".into())),
            ..PutOptions::default()
        };
        assert!(matches!(
            store.assemble_upload_folder(&f.id, &root, "f", opts).await,
            Err(StoreError::ChecksumMismatch { .. })
        ));
        let now = store.stat(&old.id).await.unwrap();
        assert_eq!(now.etag, old.etag);
        assert_eq!(store.read_all(&now.id).await, b"old content");
        // The folder is still there; a right checksum assembles it.
        let opts = PutOptions {
            expected_checksum: Some((
                ChecksumAlgo::Sha1,
                crate::checksum::hex(&sha1::Sha1::digest(&piece)),
            )),
            ..PutOptions::default()
        };
        let node = store
            .assemble_upload_folder(&f.id, &root, "f", opts)
            .await
            .unwrap();
        assert_eq!(node.id, old.id);
        assert_eq!(store.read_all(&node.id).await, piece);
    }

    /// A chunk cut short is not recorded and gives its place to the next; removing a folder
    /// removes its assembly.
    #[tokio::test]
    async fn a_cut_chunk_leaves_nothing_and_removal_cleans_up() {
        let (_tmp, store, root) = store(false).await;
        let f = store
            .create_upload_folder("alice", "k", None, FAR)
            .await
            .unwrap();
        let piece = data(3 << 20, 8);
        let frames: Vec<std::result::Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::copy_from_slice(&piece[..1 << 20])),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "gone",
            )),
        ];
        let r = store
            .put_upload_chunk(
                &f,
                "1",
                Some(piece.len() as u64),
                futures::stream::iter(frames),
                None,
                FAR,
            )
            .await;
        assert!(matches!(r, Err(StoreError::Body(_))), "{r:?}");
        assert_eq!(chunk_state(&store, &f.id).await, (0, 0));
        put(&store, &f, "1", &piece).await;
        put(&store, &f, "2", b"tail").await;
        let node = store
            .assemble_upload_folder(&f.id, &root, "g", PutOptions::default())
            .await
            .unwrap();
        assert_eq!(
            store.read_all(&node.id).await,
            [piece.as_slice(), b"tail"].concat()
        );

        // A request dropped mid-body (its client went away) gives the tail back as well.
        let f = store
            .create_upload_folder("alice", "drop", None, FAR)
            .await
            .unwrap();
        let stalled = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"abc"))])
            .chain(futures::stream::pending());
        let stalled_put = store.put_upload_chunk(&f, "1", Some(10), stalled, None, FAR);
        let cut = tokio::time::timeout(std::time::Duration::from_millis(200), stalled_put).await;
        assert!(cut.is_err(), "the stalled chunk finished");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let claim: i64 = cell(
                &store,
                "SELECT place_claim FROM uploads WHERE id = $1",
                &f.id,
            )
            .await;
            if claim == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the tail stayed claimed"
            );
            tokio::task::yield_now().await;
        }

        let g = store
            .create_upload_folder("alice", "gone", None, FAR)
            .await
            .unwrap();
        put(&store, &g, "1", &piece).await;
        put(&store, &g, "0", b"own object").await;
        assert!(store.remove_upload(&g.id).await.unwrap());
        assert!(
            store
                .upload_folder("alice", "gone", 0)
                .await
                .unwrap()
                .is_none()
        );
        let left = store
            .blobs()
            .list_under(&Path::from(PARTS_PREFIX))
            .await
            .unwrap();
        assert_eq!(left, Vec::new());
        let r = store
            .put_upload_chunk(&g, "3", Some(1), body(b"x"), None, FAR)
            .await;
        assert!(matches!(r, Err(StoreError::NotFound)), "{r:?}");
    }

    #[test]
    fn names_sort_as_nextcloud_assembles_them() {
        let mut names = vec![
            "10",
            "2",
            "1",
            "0000000000000020",
            "0000000000000003",
            "a10",
            "a9",
            "01",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            [
                "01",
                "1",
                "2",
                "0000000000000003",
                "10",
                "0000000000000020",
                "a9",
                "a10"
            ]
        );
        // rclone's `START-END` names.
        assert_eq!(
            natural_cmp(
                "000000010485760-000000020971519",
                "000000000000000-000000010485759"
            ),
            Ordering::Greater
        );
        assert_eq!(natural_cmp("x", "x"), Ordering::Equal);
    }
}
