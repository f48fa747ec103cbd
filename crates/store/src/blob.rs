//! The blob layer: immutable objects named by a random blob id, written once, read by range,
//! deleted by the collector. Everything goes through `object_store`, so S3 (its `aws` feature)
//! or any other backend plugs in with [`BlobStore::from_object_store`] without touching callers.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, GetResultPayload, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart,
};

use crate::StoreError;

/// Part size for local multipart writes: the unit of buffering per upload. Small, because each
/// upload holds up to `MAX_PARTS_IN_FLIGHT + 1` of them in memory.
const LOCAL_PART_SIZE: usize = 1 << 20;
/// S3 refuses parts under 5 MiB (except the last); 8 MiB is the usual choice.
const REMOTE_PART_SIZE: usize = 8 << 20;
/// Parts written concurrently per upload. Two keep the disk (or the network) busy while the next
/// part fills, and bound memory at ~3 parts per upload.
const MAX_PARTS_IN_FLIGHT: usize = 2;
/// Read size for local files. object_store's own file stream reads 8 KiB per blocking task, which
/// caps a large GET far below disk speed; 256 KiB amortises the task hand-off.
const LOCAL_READ_CHUNK: usize = 256 << 10;

/// Where blobs live.
#[derive(Clone, Debug)]
pub struct BlobStore {
    store: Arc<dyn ObjectStore>,
    /// Set for the local backend: lets the collector remove staging files a killed upload left.
    local_root: Option<PathBuf>,
    part_size: usize,
}

impl BlobStore {
    /// Blobs as files under `dir` (created if missing).
    ///
    /// Durability: `LocalFileSystem` does not fsync by default; `with_fsync(true)` makes it
    /// `sync_all` every written file before the rename that publishes it and fsync the parent
    /// directory after, so a blob is on stable storage when its write returns — which is what
    /// lets metadata point at it. (Checked in object_store 0.14's `local.rs`: `finish_staged_rename`.)
    pub fn local(dir: impl AsRef<FsPath>) -> Result<Self, StoreError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir)?;
        let dir = std::fs::canonicalize(dir)?;
        // The fan-out directories exist before the first write: a put that has to create its
        // directory pays three more fsyncs (the new directory and its parents) on top of the
        // file's and the directory entry's.
        let mut created = false;
        for i in 0..=255u8 {
            let sub = dir.join(format!("{i:02x}"));
            if !sub.is_dir() {
                std::fs::create_dir_all(&sub)?;
                created = true;
            }
        }
        if created {
            std::fs::File::open(&dir)?.sync_all()?;
        }
        let fs = LocalFileSystem::new_with_prefix(&dir)?.with_fsync(true);
        Ok(BlobStore {
            store: Arc::new(fs),
            local_root: Some(dir),
            part_size: LOCAL_PART_SIZE,
        })
    }

    /// Blobs in any object store (S3, memory, ...). The store must make a completed write durable
    /// before returning, as the cloud stores do.
    pub fn from_object_store(store: Arc<dyn ObjectStore>) -> Self {
        BlobStore {
            store,
            local_root: None,
            part_size: REMOTE_PART_SIZE,
        }
    }

    /// `ab/abcd…`: 256 directories, so none grows past a few ten thousand entries per million
    /// blobs (ext4 and xfs index large directories), and few enough to create them all up front.
    fn key(id: &str) -> Path {
        let fan = id.get(0..2).unwrap_or("00");
        Path::from(format!("{fan}/{id}"))
    }

    /// Starts writing a new blob.
    pub(crate) fn writer(&self, id: &str) -> BlobWriter {
        BlobWriter {
            store: Arc::clone(&self.store),
            key: Self::key(id),
            part_size: self.part_size,
            state: WriterState::Buffering {
                parts: Vec::new(),
                len: 0,
            },
        }
    }

    /// Streams `range` (start..end exclusive; the whole blob if `None`) with bounded memory.
    pub(crate) async fn read(
        &self,
        id: &str,
        range: Option<(u64, u64)>,
    ) -> Result<BoxStream<'static, Result<Bytes, StoreError>>, StoreError> {
        let opts = GetOptions {
            range: range.map(|(start, end)| GetRange::Bounded(start..end)),
            ..GetOptions::default()
        };
        let got = self.store.get_opts(&Self::key(id), opts).await?;
        let range = got.range.clone();
        Ok(match got.payload {
            GetResultPayload::File(file, _) => local_file_stream(file, range.start, range.end),
            GetResultPayload::Stream(s) => s.map_err(StoreError::from).boxed(),
        })
    }

    /// Deletes a blob; a missing blob is fine (the collector may retry after a crash).
    pub(crate) async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let key = Self::key(id);
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        // A process killed mid-upload leaves LocalFileSystem's staging file `<key>#1` behind (its
        // Drop cleanup never ran). Blob ids are never reused, so the suffix is always 1.
        if let Some(root) = &self.local_root {
            let mut staging = root.join(key.as_ref()).into_os_string();
            staging.push("#1");
            match tokio::fs::remove_file(&staging).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Whether the blob exists (tests and diagnostics).
    #[cfg(test)]
    pub(crate) async fn exists(&self, id: &str) -> Result<bool, StoreError> {
        match self.store.head(&Self::key(id)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    #[cfg(test)]
    pub(crate) fn local_path(&self, id: &str) -> Option<PathBuf> {
        self.local_root
            .as_ref()
            .map(|r| r.join(Self::key(id).as_ref()))
    }
}

/// Reads `start..end` of a local file in large chunks, one blocking read at a time, so memory
/// stays at one chunk however large the file.
fn local_file_stream(
    file: std::fs::File,
    start: u64,
    end: u64,
) -> BoxStream<'static, Result<Bytes, StoreError>> {
    let state = (Some(file), start, false);
    stream::try_unfold(state, move |(file, pos, seeked)| async move {
        let Some(mut file) = file else {
            return Ok(None);
        };
        if pos >= end {
            return Ok(None);
        }
        let want = usize::try_from((end - pos).min(LOCAL_READ_CHUNK as u64))
            .map_err(|_| StoreError::InvalidRange)?;
        let (file, buf) = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
            if !seeked {
                file.seek(SeekFrom::Start(pos))?;
            }
            let mut buf = vec![0u8; want];
            file.read_exact(&mut buf)?;
            Ok((file, buf))
        })
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
        let next = pos + buf.len() as u64;
        Ok(Some((Bytes::from(buf), (Some(file), next, true))))
    })
    .boxed()
}

enum WriterState {
    /// Small bodies never start a multipart upload: if the whole body fits in one part it is
    /// written with a single `put`, one blocking task and one fsync instead of three round trips.
    Buffering {
        parts: Vec<Bytes>,
        len: usize,
    },
    Multipart(WriteMultipart),
}

/// One blob being written. Dropping it without [`BlobWriter::finish`] abandons the write;
/// `LocalFileSystem` removes its staging file on drop.
pub(crate) struct BlobWriter {
    store: Arc<dyn ObjectStore>,
    key: Path,
    part_size: usize,
    state: WriterState,
}

impl BlobWriter {
    /// Appends a chunk, waiting while too many parts are in flight (backpressure on the body).
    pub(crate) async fn write(&mut self, chunk: Bytes) -> Result<(), StoreError> {
        match &mut self.state {
            WriterState::Buffering { parts, len } => {
                *len += chunk.len();
                parts.push(chunk);
                if *len >= self.part_size {
                    let upload = self.store.put_multipart(&self.key).await?;
                    let mut multipart = WriteMultipart::new_with_chunk_size(upload, self.part_size);
                    for part in parts.drain(..) {
                        multipart.put(part);
                    }
                    self.state = WriterState::Multipart(multipart);
                    self.wait().await?;
                }
            }
            WriterState::Multipart(multipart) => {
                multipart.put(chunk);
                self.wait().await?;
            }
        }
        Ok(())
    }

    async fn wait(&mut self) -> Result<(), StoreError> {
        if let WriterState::Multipart(m) = &mut self.state {
            m.wait_for_capacity(MAX_PARTS_IN_FLIGHT).await?;
        }
        Ok(())
    }

    /// Completes the blob; when this returns Ok the content is durable.
    pub(crate) async fn finish(self) -> Result<(), StoreError> {
        match self.state {
            WriterState::Buffering { parts, .. } => {
                let payload: PutPayload = parts.into_iter().collect();
                self.store.put(&self.key, payload).await?;
            }
            WriterState::Multipart(multipart) => {
                multipart.finish().await?;
            }
        }
        Ok(())
    }

    /// Abandons the blob, removing what was written so far (best effort; the collector catches
    /// what this misses).
    pub(crate) async fn abort(self) {
        if let WriterState::Multipart(multipart) = self.state
            && let Err(e) = multipart.abort().await
        {
            tracing::debug!(key = %self.key, error = %e, "aborting a blob upload failed");
        }
    }
}
