//! In-place assembly: one blob written in pieces by separate requests, in any process sharing
//! the blob store, and completed without a byte being copied (an upload folder's chunks, see
//! `chunked`).
//!
//! - On disk each piece is written at its offset into the blob's own file and synced before
//!   the caller records it; completing cuts the file to its length and syncs it.
//! - On S3 each piece is one or more parts of a multipart upload of the blob's key (every part
//!   but the last at least 5 MiB, as S3 requires); completing is `CompleteMultipartUpload`,
//!   which S3 answers only once the object is stored durably.
//!
//! Which piece goes where, and that two writers never share a place, is the caller's to
//! decide (the upload's row in the database). A backend with neither (another object store)
//! has no placement: every piece is then an object of its own and assembling copies them.

use std::collections::VecDeque;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{MultipartId, PutPayload};

use super::{BlobStore, REMOTE_MIN_PART_SIZE};
use crate::StoreError;

/// Bytes gathered before one positioned write on disk.
const FILE_WRITE: usize = 1 << 20;
/// The largest S3 part a piece is cut into: the memory one piece being written holds.
const PART_MAX: u64 = 16 << 20;

/// How pieces of a blob can be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// At byte offsets of the blob's file.
    File,
    /// As numbered parts of a multipart upload.
    Parts,
    /// Nowhere: pieces are objects of their own.
    None,
}

impl BlobStore {
    pub(crate) fn placement(&self) -> Placement {
        if self.local_root.is_some() {
            Placement::File
        } else if self.parts.is_some() {
            Placement::Parts
        } else {
            Placement::None
        }
    }

    fn parts_store(&self) -> Result<&Arc<dyn MultipartStore>, StoreError> {
        self.parts
            .as_ref()
            .ok_or_else(|| StoreError::Corrupt("this blob store has no multipart API".into()))
    }

    /// S3: starts the multipart upload the pieces of blob `id` become parts of.
    pub(crate) async fn start_parts(&self, id: &str) -> Result<MultipartId, StoreError> {
        Ok(self.parts_store()?.create_multipart(&Self::key(id)).await?)
    }

    /// How many parts a piece of `len` bytes is cut into (S3): as few as fit in
    /// [`PART_MAX`], of equal size, so that each is at least 5 MiB whenever the piece is.
    pub(crate) fn parts_for(len: u64) -> u64 {
        len.div_ceil(PART_MAX).max(1)
    }

    /// Whether a piece of `len` bytes can only be the last part of its upload (S3 refuses a
    /// smaller part anywhere else).
    pub(crate) fn is_small_piece(len: u64) -> bool {
        len < REMOTE_MIN_PART_SIZE as u64
    }

    /// A writer of one piece of blob `id`, `len` bytes long, at `place`: a byte offset
    /// ([`Placement::File`]) or the index of its first part in multipart upload `multipart`
    /// ([`Placement::Parts`]).
    pub(crate) fn piece_writer(
        &self,
        id: &str,
        multipart: &str,
        place: u64,
        len: u64,
    ) -> Result<PieceWriter, StoreError> {
        let key = Self::key(id);
        let target = match (self.placement(), &self.local_root) {
            (Placement::File, Some(root)) => Target::File {
                path: root.join(key.as_ref()),
                file: None,
                at: place,
                pending: None,
                sync_dir: self.sync_dirs,
            },
            (Placement::Parts, _) => {
                let n = Self::parts_for(len);
                Target::Parts {
                    store: Arc::clone(self.parts_store()?),
                    key,
                    multipart: multipart.to_owned(),
                    next: usize::try_from(place)
                        .map_err(|_| StoreError::Corrupt(format!("part index {place}")))?,
                    part_len: usize::try_from(len.div_ceil(n).max(1)).unwrap_or(usize::MAX),
                    ids: Vec::new(),
                }
            }
            _ => return Err(StoreError::Corrupt("no in-place assembly here".into())),
        };
        Ok(PieceWriter {
            target,
            buffer: VecDeque::new(),
            buffered: 0,
            len,
            written: 0,
        })
    }

    /// Completes blob `id` from its pieces: on disk, its file cut to `len` bytes (a writer that
    /// failed may have left bytes past the last recorded piece) and synced; on S3, multipart
    /// upload `multipart` completed from the parts `etags` (in part order).
    pub(crate) async fn complete_pieces(
        &self,
        id: &str,
        multipart: &str,
        len: u64,
        etags: Vec<String>,
    ) -> Result<(), StoreError> {
        match (self.placement(), &self.local_root) {
            (Placement::File, Some(root)) => {
                let path = root.join(Self::key(id).as_ref());
                let sync_dir = self.sync_dirs;
                blocking(move || {
                    let file = open_piece_file(&path)?;
                    file.set_len(len)?;
                    file.sync_all()?;
                    sync_parent(&path, sync_dir)
                })
                .await
            }
            (Placement::Parts, _) => {
                let parts = etags
                    .into_iter()
                    .map(|content_id| PartId { content_id })
                    .collect();
                self.parts_store()?
                    .complete_multipart(&Self::key(id), &multipart.to_owned(), parts)
                    .await?;
                Ok(())
            }
            _ => Err(StoreError::Corrupt("no in-place assembly here".into())),
        }
    }

    /// Abandons blob `id`'s assembly: its file (or completed object) deleted, its multipart
    /// upload (if `multipart` names one) aborted. Missing pieces are fine.
    pub(crate) async fn discard_pieces(&self, id: &str, multipart: &str) -> Result<(), StoreError> {
        if !multipart.is_empty()
            && let Some(parts) = &self.parts
        {
            match parts
                .abort_multipart(&Self::key(id), &multipart.to_owned())
                .await
            {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.delete(id).await
    }
}

/// One piece being written. Dropped unfinished, what it wrote stays in place unrecorded: the
/// next piece given the same place overwrites it.
pub(crate) struct PieceWriter {
    target: Target,
    buffer: VecDeque<Bytes>,
    buffered: usize,
    /// The piece's declared length: more is refused.
    len: u64,
    written: u64,
}

enum Target {
    File {
        path: PathBuf,
        file: Option<Arc<std::fs::File>>,
        /// Where the next write goes.
        at: u64,
        /// The write in flight: one runs while the next fills.
        pending: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
        sync_dir: bool,
    },
    Parts {
        store: Arc<dyn MultipartStore>,
        key: Path,
        multipart: MultipartId,
        /// The index of the next part.
        next: usize,
        part_len: usize,
        ids: Vec<String>,
    },
}

impl PieceWriter {
    /// Bytes received so far.
    pub(crate) fn size(&self) -> u64 {
        self.written + self.buffered as u64
    }

    /// Appends bytes to the piece, writing whenever a write's worth has gathered.
    pub(crate) async fn write(&mut self, chunk: Bytes) -> Result<(), StoreError> {
        if self.size() + chunk.len() as u64 > self.len {
            return Err(StoreError::LengthMismatch {
                expected: self.len,
                received: self.size() + chunk.len() as u64,
            });
        }
        self.buffered += chunk.len();
        self.buffer.push_back(chunk);
        let step = match &self.target {
            Target::File { .. } => FILE_WRITE,
            Target::Parts { part_len, .. } => *part_len,
        };
        while self.buffered >= step {
            self.flush(step).await?;
        }
        Ok(())
    }

    /// Writes the first `n` buffered bytes (all of them if fewer).
    async fn flush(&mut self, n: usize) -> Result<(), StoreError> {
        let n = n.min(self.buffered);
        if n == 0 {
            return Ok(());
        }
        let mut take = Vec::new();
        let mut left = n;
        while left > 0 {
            let Some(first) = self.buffer.front_mut() else {
                break;
            };
            if first.len() <= left {
                left -= first.len();
                if let Some(whole) = self.buffer.pop_front() {
                    take.push(whole);
                }
            } else {
                take.push(first.split_to(left));
                left = 0;
            }
        }
        self.buffered -= n;
        self.written += n as u64;
        match &mut self.target {
            Target::File {
                path,
                file,
                at,
                pending,
                ..
            } => {
                let f = match file {
                    Some(f) => Arc::clone(f),
                    None => {
                        let p = path.clone();
                        let opened = Arc::new(blocking(move || open_piece_file(&p)).await?);
                        *file = Some(Arc::clone(&opened));
                        opened
                    }
                };
                if let Some(previous) = pending.take() {
                    join(previous).await?;
                }
                let offset = *at;
                *at += n as u64;
                *pending = Some(tokio::task::spawn_blocking(move || {
                    let mut pos = offset;
                    for part in take {
                        f.write_all_at(&part, pos)?;
                        pos += part.len() as u64;
                    }
                    Ok(())
                }));
            }
            Target::Parts {
                store,
                key,
                multipart,
                next,
                ids,
                ..
            } => {
                let payload: PutPayload = take.into_iter().collect();
                let id = store.put_part(key, multipart, *next, payload).await?;
                ids.push(id.content_id);
                *next += 1;
            }
        }
        Ok(())
    }

    /// Writes what is left and makes the piece durable. Returns the ETags of its parts (S3;
    /// none on disk). Fails if fewer bytes than declared arrived.
    pub(crate) async fn finish(mut self) -> Result<Vec<String>, StoreError> {
        if self.size() != self.len {
            return Err(StoreError::LengthMismatch {
                expected: self.len,
                received: self.size(),
            });
        }
        self.flush(usize::MAX).await?;
        match self.target {
            Target::File {
                path,
                file,
                pending,
                sync_dir,
                ..
            } => {
                if let Some(previous) = pending {
                    join(previous).await?;
                }
                // An empty piece opened nothing; its place is then just a length.
                if let Some(f) = file {
                    blocking(move || {
                        f.sync_data()?;
                        sync_parent(&path, sync_dir)
                    })
                    .await?;
                }
                Ok(Vec::new())
            }
            Target::Parts { ids, .. } => Ok(ids),
        }
    }
}

/// The blob's file, created if this is its first piece; never truncated.
fn open_piece_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// Where the file system does not keep a new name with the file's own sync (see
/// `fsync_keeps_new_names`), the directory is synced too.
fn sync_parent(path: &std::path::Path, sync_dir: bool) -> std::io::Result<()> {
    if sync_dir && let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))?
        .map_err(StoreError::Io)
}

async fn join(task: tokio::task::JoinHandle<std::io::Result<()>>) -> Result<(), StoreError> {
    task.await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))?
        .map_err(StoreError::Io)
}
