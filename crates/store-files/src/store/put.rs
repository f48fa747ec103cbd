//! Writing and reading file content.
//!
//! A put goes through four steps, and a failure at any point leaves the previous version of the
//! file untouched and nothing new visible:
//! 1. cheap checks without locks (parent, preconditions, quota against the declared length), so
//!    a doomed upload is refused before its body is read;
//! 2. a `blobs` row in state "uploading" is committed *before* the first byte is written — a
//!    process killed after this point leaves a row the collector finds (under load such rows
//!    are committed ahead for the puts to come: `commit::Reserved`);
//! 3. the body streams into a new blob (hashed on the way, length and quota watched), which is
//!    completed and synced;
//! 4. one transaction under the space lock re-checks everything, points the node at the new blob,
//!    marks the old blob released and propagates etag and size to the root.
//!
//! Steps 2 and 4 are queued to the store's writer task, which applies the steps of concurrent
//! puts in one transaction (group commit, see `commit`); each put's checks still run inside
//! the transaction that commits it. Concurrent puts to one path each commit atomically in
//! step 4: the last commit wins, and with `if_match` the later ones fail the etag check.

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use sqlx::Row as _;

use super::Store;
use super::commit::PutCommit;
use crate::checksum::{Checksums, Hasher};
use crate::db::{node_cols, node_from_row};
use crate::model::{Node, Precheck, PutOptions, Space};
use crate::names::validate_name;
use crate::{Result, StoreError};
use arca_store::BoxError;

/// A file's content, opened for reading.
pub struct Download {
    /// The node as it was when the read was opened (its etag matches the bytes streamed).
    pub node: Node,
    /// The byte range served, inclusive, when a range was asked for.
    pub range: Option<(u64, u64)>,
    /// The bytes, in chunks of at most 1 MiB for local blobs.
    pub stream: BoxStream<'static, Result<Bytes>>,
}

impl std::fmt::Debug for Download {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Download")
            .field("node", &self.node)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

/// What the commit needs to know about the written blob.
pub(crate) struct Written {
    pub(crate) blob_id: String,
    pub(crate) size: u64,
    pub(crate) checksums: Checksums,
    /// The bytes themselves, for a body kept in the metadata database: the commit writes its
    /// blobs row (no upload row was reserved for it).
    pub(crate) inline: Option<Bytes>,
}

impl Store {
    /// Writes a file `name` in directory `parent_id` from a body stream, creating it or replacing
    /// the content of the existing file (whose id is kept). Returns the node as committed.
    ///
    /// Errors: `Conflict` (no parent), `NotADirectory` (parent is a file), `IsADirectory` (the
    /// name is a directory), `PreconditionFailed`, `QuotaExceeded`, `ChecksumMismatch`,
    /// `LengthMismatch`, `Body` (the stream failed).
    pub async fn put_file<S, E>(
        &self,
        parent_id: &str,
        name: &str,
        body: S,
        opts: PutOptions,
    ) -> Result<Node>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Send,
        E: Into<BoxError>,
    {
        self.put_file_hashed(parent_id, name, body, opts, None)
            .await
    }

    /// [`Store::put_file`] of a body whose checksums are already `known` (computed from the
    /// same bytes as they arrived, e.g. a resumable upload's parts): it is stored without being
    /// hashed again. `None`: hashed as it streams.
    pub(crate) async fn put_file_hashed<S, E>(
        &self,
        parent_id: &str,
        name: &str,
        body: S,
        opts: PutOptions,
        known: Option<Checksums>,
    ) -> Result<Node>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Send,
        E: Into<BoxError>,
    {
        validate_name(name)?;
        let (space_id, allowance) = match &opts.prechecked {
            Some(p) => (p.space_id.clone(), p.allowance),
            None => self.precheck_put(parent_id, name, &opts).await?,
        };

        // A small body declared up front is read whole and committed with its node: nothing
        // is reserved beforehand or written to the blob store (see `read_inline`).
        if let Some(len) = opts.content_length
            && len <= self.inline_max()
        {
            let written = read_inline(body, len, &opts, allowance, known).await?;
            return self
                .commit_written(PutCommit {
                    space_id,
                    parent_id: parent_id.to_owned(),
                    name: name.to_owned(),
                    opts,
                    written,
                })
                .await;
        }

        let blob_id = self.committer().reserve().await?;
        let written = match self
            .write_blob(&blob_id, body, &opts, allowance, known)
            .await
        {
            Ok(w) => w,
            Err(e) => {
                self.discard_upload(&blob_id).await;
                return Err(e);
            }
        };

        self.commit_written(PutCommit {
            space_id,
            parent_id: parent_id.to_owned(),
            name: name.to_owned(),
            opts,
            written,
        })
        .await
    }

    /// Step 4: the put committed, its durable blob (reserved by `committer().reserve()`)
    /// becoming the file's content.
    pub(crate) async fn commit_written(&self, put: PutCommit) -> Result<Node> {
        let blob_id = put.written.blob_id.clone();
        // An inline body has no row or object until its commit writes both at once.
        let inline = put.written.inline.is_some();
        match self.committer().put(put).await {
            Ok(node) => Ok(node),
            Err(failed) => {
                // Only a refusal inside the transaction is known not to have committed; a failed
                // COMMIT may still have landed, so that blob is left for the collector to judge.
                if !failed.maybe_committed && !inline {
                    self.discard_upload(&blob_id).await;
                }
                Err(failed.error)
            }
        }
    }

    /// A file's whole content (tests).
    #[cfg(test)]
    pub(crate) async fn read_all(&self, id: &str) -> Vec<u8> {
        use futures::TryStreamExt as _;
        let got: Vec<Bytes> = self
            .open_read(id, None)
            .await
            .unwrap()
            .stream
            .try_collect()
            .await
            .unwrap();
        got.concat()
    }

    /// Step 1: refuse early what would be refused at commit. Returns the space and how many
    /// bytes the body may have before the quota is exceeded (`None` = unlimited).
    pub(crate) async fn precheck_put(
        &self,
        parent_id: &str,
        name: &str,
        opts: &PutOptions,
    ) -> Result<(String, Option<u64>)> {
        let mut c = self.read_conn().await?;
        // Parent, existing child and the space's quota and usage in one round trip.
        let rows = sqlx::query(concat!(
            "SELECT x.*, s.quota, r.size FROM (SELECT ",
            node_cols!(),
            " FROM nodes WHERE id = $1 OR (parent_id = $1 AND name = $2)) x \
             JOIN spaces s ON s.id = x.space_id JOIN nodes r ON r.id = x.space_id"
        ))
        .bind(parent_id)
        .bind(name)
        .fetch_all(&mut *c)
        .await?;
        drop(c);
        let (mut parent, mut existing, mut space) = (None, None, None);
        for row in &rows {
            let node = node_from_row(row)?;
            if node.id == parent_id {
                let quota: Option<i64> = row.try_get(13)?;
                let used: i64 = row.try_get(14)?;
                space = Some((quota, used));
                parent = Some(node);
            } else {
                existing = Some(node);
            }
        }
        let parent = parent.ok_or(StoreError::Conflict)?;
        let (quota, used) = space.ok_or(StoreError::Conflict)?;
        let quota = quota.and_then(|q| u64::try_from(q).ok()).filter(|&q| q > 0);
        let used = u64::try_from(used).unwrap_or(0);
        let allowance = early_checks(&parent, existing.as_ref(), opts, quota, used)?;
        Ok((parent.space_id, allowance))
    }

    /// Step 3: stream, hash (unless the checksums are `known`), check, sync.
    async fn write_blob<S, E>(
        &self,
        blob_id: &str,
        body: S,
        opts: &PutOptions,
        allowance: Option<u64>,
        known: Option<Checksums>,
    ) -> Result<Written>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Send,
        E: Into<BoxError>,
    {
        let mut body = std::pin::pin!(body);
        let mut writer = self.blobs().writer(blob_id, opts.content_length);
        let mut hasher = Hasher::new();
        let hashing = known.is_none();
        let mut size: u64 = 0;
        let outcome: Result<()> = async {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| StoreError::Body(e.into()))?;
                size += chunk.len() as u64;
                // Stop as soon as the body is known to be wrong rather than store all of it.
                if let Some(expected) = opts.content_length
                    && size > expected
                {
                    return Err(StoreError::LengthMismatch {
                        expected,
                        received: size,
                    });
                }
                if allowance.is_some_and(|a| size > a) {
                    return Err(StoreError::QuotaExceeded);
                }
                if hashing {
                    hasher.update(&chunk).await;
                }
                writer.write(chunk).await?;
            }
            if let Some(expected) = opts.content_length
                && size != expected
            {
                return Err(StoreError::LengthMismatch {
                    expected,
                    received: size,
                });
            }
            Ok(())
        }
        .await;
        if let Err(e) = outcome {
            writer.abort().await;
            return Err(e);
        }
        let checksums = match known {
            Some(known) => known,
            None => match hasher.finish().await {
                Ok(c) => c,
                Err(e) => {
                    writer.abort().await;
                    return Err(e.into());
                }
            },
        };
        if let Err(e) = checksums.verify(opts.expected_checksum.as_ref()) {
            writer.abort().await;
            return Err(e);
        }
        writer.finish().await?;
        Ok(Written {
            blob_id: blob_id.to_owned(),
            size,
            checksums,
            inline: None,
        })
    }

    /// Removes an upload that will never commit: its blob, then its row. Best effort — whatever
    /// fails here is still an "uploading" row that the collector removes after `min_age`.
    pub(crate) async fn discard_upload(&self, blob_id: &str) {
        if let Err(e) = self.blobs().delete(blob_id).await {
            tracing::warn!(blob = blob_id, error = %e, "removing a failed upload's blob");
            return;
        }
        let r = async {
            let mut w = self.db().begin_write().await?;
            let r = sqlx::query("DELETE FROM blobs WHERE id = $1 AND state = 0")
                .bind(blob_id)
                .execute(w.conn())
                .await
                .map(|_| ())
                .map_err(StoreError::from);
            w.finish(r).await
        }
        .await;
        if let Err(e) = r {
            tracing::warn!(blob = blob_id, error = %e, "removing a failed upload's row");
        }
    }

    /// Opens a file for reading, optionally a byte range `(start, end_inclusive)` as in an HTTP
    /// `Range` header. An end past the file is clamped; a start at or past the end is
    /// `InvalidRange`. Memory stays bounded whatever the file size.
    pub async fn open_read(&self, id: &str, range: Option<(u64, u64)>) -> Result<Download> {
        let node = self.stat(id).await?;
        if node.is_dir() {
            return Err(StoreError::IsADirectory);
        }
        let blob_id = node
            .blob_id
            .clone()
            .ok_or_else(|| StoreError::Corrupt(format!("file {} has no blob", node.id)))?;
        let (range, stream) = self.read_blob(&blob_id, node.size, range).await?;
        Ok(Download {
            node,
            range,
            stream,
        })
    }

    /// Opens a blob whose id and size the caller already knows (a download grant carries
    /// them), so a read costs no metadata query. Blobs are immutable and outlive their
    /// release by the collector's minimum age, so the bytes are those the grant was minted
    /// for. Returns the inclusive range served, as [`Store::open_read`] does.
    pub async fn read_blob(
        &self,
        blob_id: &str,
        size: u64,
        range: Option<(u64, u64)>,
    ) -> Result<(Option<(u64, u64)>, BoxStream<'static, Result<Bytes>>)> {
        let range = match range {
            None => None,
            Some((start, end)) => {
                if start > end || start >= size {
                    return Err(StoreError::InvalidRange);
                }
                Some((start, end.min(size - 1)))
            }
        };
        if crate::blob::is_inline(blob_id) {
            let data = self.read_inline_blob(blob_id).await?;
            let data = match range {
                Some((start, end)) => {
                    data.slice(start as usize..(end as usize + 1).min(data.len()))
                }
                None => data,
            };
            return Ok((range, futures::stream::once(async { Ok(data) }).boxed()));
        }
        let stream = self
            .blobs()
            .read(blob_id, range.map(|(s, e)| (s, e + 1)))
            .await?;
        Ok((range, stream))
    }

    /// The whole content of a blob kept in the metadata database (a small file's), read in
    /// one query; `None` for a blob in the blob store, which [`Store::read_blob`] streams.
    pub async fn small_body(&self, blob_id: &str) -> Result<Option<Bytes>> {
        if !crate::blob::is_inline(blob_id) {
            return Ok(None);
        }
        self.read_inline_blob(blob_id).await.map(Some)
    }

    /// The bytes of a body kept in the metadata database.
    async fn read_inline_blob(&self, blob_id: &str) -> Result<Bytes> {
        if let Some(reads) = self.inline_reads() {
            return reads
                .read(blob_id)?
                .ok_or_else(|| StoreError::Corrupt(format!("inline blob {blob_id} has no bytes")));
        }
        let mut c = self.read_conn().await?;
        let row = sqlx::query("SELECT data FROM blobs WHERE id = $1")
            .bind(blob_id)
            .fetch_optional(&mut *c)
            .await?;
        drop(c);
        let data: Option<Vec<u8>> = match row {
            Some(row) => row.try_get(0)?,
            None => None,
        };
        // Blobs outlive their release by the collector's minimum age, so a missing one is
        // a node pointing at nothing.
        data.map(Bytes::from)
            .ok_or_else(|| StoreError::Corrupt(format!("inline blob {blob_id} has no bytes")))
    }
}

/// Reads a body of `len` declared bytes (at most the store's `inline_max`) whole, with the
/// checks [`Store::write_blob`] makes as it streams, and hashes it (unless the checksums are
/// `known`). Its bytes then go into the metadata database with the commit: one WAL sync for
/// a whole batch of puts' data and metadata, where a blob file costs a create, an fdatasync,
/// a rename and a directory entry per put.
async fn read_inline<S, E>(
    body: S,
    len: u64,
    opts: &PutOptions,
    allowance: Option<u64>,
    known: Option<Checksums>,
) -> Result<Written>
where
    S: Stream<Item = std::result::Result<Bytes, E>> + Send,
    E: Into<BoxError>,
{
    if allowance.is_some_and(|a| len > a) {
        return Err(StoreError::QuotaExceeded);
    }
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut more: Option<bytes::BytesMut> = None;
    let mut size: u64 = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| StoreError::Body(e.into()))?;
        size += chunk.len() as u64;
        if size > len {
            return Err(StoreError::LengthMismatch {
                expected: len,
                received: size,
            });
        }
        // Most small bodies arrive as one chunk, kept as it is; more are joined.
        match (&mut first, &mut more) {
            (None, _) => first = Some(chunk),
            (Some(f), None) => {
                let mut joined = bytes::BytesMut::with_capacity(len as usize);
                joined.extend_from_slice(f);
                joined.extend_from_slice(&chunk);
                more = Some(joined);
            }
            (Some(_), Some(joined)) => joined.extend_from_slice(&chunk),
        }
    }
    if size != len {
        return Err(StoreError::LengthMismatch {
            expected: len,
            received: size,
        });
    }
    let data = match more {
        Some(joined) => joined.freeze(),
        None => first.unwrap_or_default(),
    };
    let checksums = match known {
        Some(known) => known,
        None => {
            let mut hasher = Hasher::new();
            hasher.update(&data).await;
            hasher.finish().await?
        }
    };
    checksums.verify(opts.expected_checksum.as_ref())?;
    Ok(Written {
        blob_id: crate::blob::new_inline_id(),
        size,
        checksums,
        inline: Some(data),
    })
}

impl Precheck {
    /// The checks [`Store::put_file`] makes before reading a body, on what the caller has just
    /// read: the space, the parent directory and the node now under the name, if any.
    ///
    /// Errors: as `put_file`'s early refusals: `NotADirectory`, `IsADirectory`,
    /// `PreconditionFailed`, `QuotaExceeded` (for the declared length).
    pub fn of(
        space: &Space,
        parent: &Node,
        existing: Option<&Node>,
        opts: &PutOptions,
    ) -> Result<Precheck> {
        if parent.space_id != space.id {
            return Err(StoreError::Corrupt(format!(
                "directory {} is not in space {}",
                parent.id, space.id
            )));
        }
        let allowance = early_checks(parent, existing, opts, space.quota, space.used)?;
        Ok(Precheck {
            space_id: space.id.clone(),
            allowance,
        })
    }
}

/// The early refusals, and the bytes the body may have (`None` = unlimited), given the
/// space's quota (`None` = unlimited) and the bytes it uses.
fn early_checks(
    parent: &Node,
    existing: Option<&Node>,
    opts: &PutOptions,
    quota: Option<u64>,
    used: u64,
) -> Result<Option<u64>> {
    check_target(parent, existing, opts)?;
    let allowance = quota.map(|quota| {
        let used_by_others = used.saturating_sub(existing.map_or(0, |n| n.size));
        quota.saturating_sub(used_by_others)
    });
    if let (Some(allowance), Some(len)) = (allowance, opts.content_length)
        && len > allowance
    {
        return Err(StoreError::QuotaExceeded);
    }
    Ok(allowance)
}

/// The rules shared by the precheck and the commit.
pub(crate) fn check_target(
    parent: &Node,
    existing: Option<&Node>,
    opts: &PutOptions,
) -> Result<()> {
    if !parent.is_dir() {
        return Err(StoreError::NotADirectory);
    }
    if let Some(n) = existing
        && n.is_dir()
    {
        return Err(StoreError::IsADirectory);
    }
    if opts.if_none_match_any && existing.is_some() {
        return Err(StoreError::PreconditionFailed);
    }
    if let Some(want) = &opts.if_match {
        let want = want.trim().trim_matches('"');
        match existing {
            Some(n) if want == "*" || n.etag == want => {}
            _ => return Err(StoreError::PreconditionFailed),
        }
    }
    Ok(())
}
