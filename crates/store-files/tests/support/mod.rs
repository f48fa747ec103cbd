//! Shared test plumbing: a store on a real database file (or PostgreSQL database) and real
//! blobs (a directory, or a bucket of an S3 server — see `s3.rs`), body streams, and a listing
//! of what the blob store holds.

#![allow(dead_code)]

pub mod s3;

use std::path::{Path, PathBuf};

use arca_store_files::{BlobConfig, Node, PutOptions, Store, StoreConfig, StoreError};
use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};

pub struct Ctx {
    pub store: Store,
    pub db_url: String,
    pub blobs: BlobConfig,
    /// The bucket when blobs are on S3, to list what the store left there.
    bucket: Option<s3::Bucket>,
    _tmp: tempfile::TempDir,
}

impl Ctx {
    /// A store on a fresh SQLite file, blobs in a directory beside it.
    pub async fn sqlite() -> Ctx {
        let tmp = tempfile::tempdir().expect("temp dir");
        let url = sqlite_url(&tmp);
        let blobs = BlobConfig::Local(tmp.path().join("blobs"));
        Self::open_in(tmp, url, blobs, None, false).await
    }

    /// [`Ctx::sqlite`] as storage-users opens it: the only writer of its file, caching path
    /// resolutions (`StoreConfig::sole_writer`).
    pub async fn sqlite_sole_writer() -> Ctx {
        let tmp = tempfile::tempdir().expect("temp dir");
        let url = sqlite_url(&tmp);
        let blobs = BlobConfig::Local(tmp.path().join("blobs"));
        Self::open_in(tmp, url, blobs, None, true).await
    }

    /// A store on the given database URL (a fresh PostgreSQL database).
    pub async fn with_url(url: &str) -> Ctx {
        let tmp = tempfile::tempdir().expect("temp dir");
        let blobs = BlobConfig::Local(tmp.path().join("blobs"));
        Self::open_in(tmp, url.to_owned(), blobs, None, false).await
    }

    /// A store on a fresh SQLite file, blobs in `bucket`.
    pub async fn sqlite_s3(bucket: s3::Bucket) -> Ctx {
        let tmp = tempfile::tempdir().expect("temp dir");
        let url = sqlite_url(&tmp);
        let blobs = BlobConfig::S3(bucket.options.clone());
        Self::open_in(tmp, url, blobs, Some(bucket), false).await
    }

    /// A store as storage-users opens one for `undo` tests: trash on, versions kept by
    /// `versions` (on a fresh SQLite file when `url` is `None`, else that database; blobs in
    /// `bucket` if given, else in a directory).
    pub async fn undo(
        url: Option<&str>,
        bucket: Option<s3::Bucket>,
        versions: arca_store_files::VersionRules,
    ) -> Ctx {
        let tmp = tempfile::tempdir().expect("temp dir");
        let db_url = url.map_or_else(|| sqlite_url(&tmp), str::to_owned);
        let blobs = match &bucket {
            Some(b) => BlobConfig::S3(b.options.clone()),
            None => BlobConfig::Local(tmp.path().join("blobs")),
        };
        Self::open_with(tmp, db_url, blobs, bucket, |cfg| {
            cfg.trash = true;
            cfg.versions = Some(versions);
        })
        .await
    }

    /// The blob directory of a local store.
    pub fn blob_dir(&self) -> Option<&Path> {
        match &self.blobs {
            BlobConfig::Local(dir) => Some(dir),
            _ => None,
        }
    }

    async fn open_in(
        tmp: tempfile::TempDir,
        db_url: String,
        blobs: BlobConfig,
        bucket: Option<s3::Bucket>,
        sole_writer: bool,
    ) -> Ctx {
        Self::open_with(tmp, db_url, blobs, bucket, |cfg| {
            cfg.sole_writer = sole_writer
        })
        .await
    }

    async fn open_with(
        tmp: tempfile::TempDir,
        db_url: String,
        blobs: BlobConfig,
        bucket: Option<s3::Bucket>,
        configure: impl FnOnce(&mut StoreConfig),
    ) -> Ctx {
        let mut cfg = StoreConfig::with_blobs(db_url.clone(), blobs.clone());
        configure(&mut cfg);
        let store = Store::open(cfg)
            .await
            .unwrap_or_else(|e| panic!("open store on {db_url}: {e}"));
        Ctx {
            store,
            db_url,
            blobs,
            bucket,
            _tmp: tmp,
        }
    }

    /// Reopens the same database and blob store (a restart), as a store that does not cache
    /// (the first one is still open, and a sole writer's lock would keep this one waiting).
    pub async fn reopen(&self) -> Store {
        Store::open(StoreConfig::with_blobs(
            self.db_url.clone(),
            self.blobs.clone(),
        ))
        .await
        .expect("reopen store")
    }

    /// What the blob store holds: the files in the blob directory (blobs and any staging
    /// leftovers) or the objects in the bucket.
    pub async fn blob_files(&self) -> Vec<String> {
        if let Some(bucket) = &self.bucket {
            return bucket.keys().await;
        }
        let BlobConfig::Local(dir) = &self.blobs else {
            panic!("blobs on S3 without a bucket to list");
        };
        let mut out = Vec::new();
        walk(dir, &mut out);
        out.into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }

    /// Bytes the blob store holds: the objects in the bucket, or the files in the directory.
    pub async fn stored_bytes(&self) -> u64 {
        if let Some(bucket) = &self.bucket {
            return bucket.bytes().await;
        }
        let Some(dir) = self.blob_dir() else {
            return 0;
        };
        let mut files = Vec::new();
        walk(dir, &mut files);
        files
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum()
    }

    pub async fn put(&self, parent: &str, name: &str, data: &[u8]) -> Result<Node, StoreError> {
        self.store
            .put_file(
                parent,
                name,
                body(data.to_vec(), 4096),
                PutOptions::default(),
            )
            .await
    }

    pub async fn read(&self, id: &str) -> Vec<u8> {
        read_all(&self.store, id, None).await
    }
}

fn sqlite_url(tmp: &tempfile::TempDir) -> String {
    format!("sqlite://{}?mode=rwc", tmp.path().join("meta.db").display())
}

/// Every file under `dir`, recursively (a missing dir holds none).
pub fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// A body stream yielding `data` in chunks of `chunk` bytes.
pub fn body(
    data: Vec<u8>,
    chunk: usize,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let data = Bytes::from(data);
    let chunks: Vec<Result<Bytes, std::io::Error>> = (0..data.len())
        .step_by(chunk.max(1))
        .map(|i| Ok(data.slice(i..(i + chunk).min(data.len()))))
        .collect();
    futures::stream::iter(chunks)
}

/// A body that yields `good` bytes and then fails, like a client that went away.
pub fn failing_body(good: Vec<u8>) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    body(good, 1000).chain(futures::stream::iter(vec![Err(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "client went away",
    ))]))
}

pub async fn read_all(store: &Store, id: &str, range: Option<(u64, u64)>) -> Vec<u8> {
    let dl = store.open_read(id, range).await.expect("open_read");
    let chunks: Vec<Bytes> = dl.stream.try_collect().await.expect("read stream");
    chunks.concat()
}

/// Deterministic pseudo-random content.
pub fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
