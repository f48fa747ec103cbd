//! Previews kept on disk, under the service's data dir, bounded in total size.
//!
//! A preview is filed by its source: `DIR/FILE/ETAG-VARIANT`, FILE and ETAG hashes of the
//! file id and its etag, VARIANT the box and mode (`128x128-fit`). A preview of a new etag
//! removes those of older ones of the same file as it is stored, so an edited file's old
//! previews go at once; the rest is bounded by [`Cache::new`]'s `limit`: past it the least
//! recently used previews (by file mtime, touched on every hit) go first.
//!
//! Writes go to a temporary name and are renamed into place, so a reader (in this process or
//! another replica sharing the directory) sees a whole preview or none.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

/// What a preview is filed under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub file: String,
    pub etag: String,
    /// The box and mode: `128x128-fit`.
    pub variant: String,
}

impl Key {
    fn dir(&self) -> String {
        hex(&self.file, 16)
    }

    fn etag_prefix(&self) -> String {
        format!("{}-", hex(&self.etag, 8))
    }

    fn name(&self) -> String {
        format!("{}{}", self.etag_prefix(), self.variant)
    }
}

/// The first `bytes` bytes of SHA-256 of `s`, in hex: a file name whatever `s` holds.
fn hex(s: &str, bytes: usize) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .take(bytes)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The disk cache; cheap to clone.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    limit: u64,
    /// Bytes on disk as far as this process knows: counted at start, kept up by writes, set
    /// again by every eviction pass.
    used: AtomicU64,
    evicting: AtomicBool,
    /// Temporary names unique within the process (the pid keeps replicas apart).
    tmp: AtomicU64,
}

impl Cache {
    /// The cache in `dir` (created), its size counted once.
    pub async fn open(dir: PathBuf, limit: u64) -> std::io::Result<Self> {
        tokio::fs::create_dir_all(&dir).await?;
        let scan = dir.clone();
        let used = tokio::task::spawn_blocking(move || entries(&scan).iter().map(|e| e.1).sum())
            .await
            .map_err(std::io::Error::other)?;
        Ok(Cache {
            inner: Arc::new(Inner {
                dir,
                limit,
                used: AtomicU64::new(used),
                evicting: AtomicBool::new(false),
                tmp: AtomicU64::new(0),
            }),
        })
    }

    fn path(&self, key: &Key) -> PathBuf {
        self.inner.dir.join(key.dir()).join(key.name())
    }

    /// The preview filed under `key`, if kept; a hit counts as a use.
    pub async fn get(&self, key: &Key) -> Option<Vec<u8>> {
        let path = self.path(key);
        let data = tokio::fs::read(&path).await.ok()?;
        // Best effort: a preview whose use is not recorded is only evicted a little early.
        let _ = tokio::task::spawn_blocking(move || {
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(SystemTime::now()))
        })
        .await;
        Some(data)
    }

    /// Files `data` under `key`, drops the file's previews of other etags, and evicts past
    /// the limit. Failing to keep a preview is logged, never the request's failure.
    pub async fn put(&self, key: &Key, data: &[u8]) {
        if let Err(e) = self.store(key, data).await {
            tracing::warn!(error = %e, "keeping a preview failed");
        }
        let used = self.inner.used.load(Ordering::Relaxed);
        if used > self.inner.limit && !self.inner.evicting.swap(true, Ordering::AcqRel) {
            let inner = self.inner.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let left = evict(&inner.dir, inner.limit);
                inner.used.store(left, Ordering::Relaxed);
                inner.evicting.store(false, Ordering::Release);
            })
            .await;
        }
    }

    async fn store(&self, key: &Key, data: &[u8]) -> std::io::Result<()> {
        let dir = self.inner.dir.join(key.dir());
        tokio::fs::create_dir_all(&dir).await?;
        let n = self.inner.tmp.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".tmp-{}-{n}", std::process::id()));
        tokio::fs::write(&tmp, data).await?;
        let path = dir.join(key.name());
        if let Err(e) = tokio::fs::rename(&tmp, &path).await {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(e);
        }
        self.inner
            .used
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        // Older etags' previews of this file are stale for good: drop them now.
        let keep = key.etag_prefix();
        let mut freed = 0;
        let mut list = tokio::fs::read_dir(&dir).await?;
        while let Some(entry) = list.next_entry().await? {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&keep) || name.starts_with(".tmp-") {
                continue;
            }
            let size = entry.metadata().await.map(|m| m.len()).unwrap_or(0);
            if tokio::fs::remove_file(entry.path()).await.is_ok() {
                freed += size;
            }
        }
        let _ = self
            .inner
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(freed))
            });
        Ok(())
    }

    /// Bytes on disk as this process counts them.
    pub fn used(&self) -> u64 {
        self.inner.used.load(Ordering::Relaxed)
    }
}

/// Every kept preview: path, size, last use.
fn entries(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut out = Vec::new();
    let Ok(files) = std::fs::read_dir(dir) else {
        return out;
    };
    for sub in files.flatten() {
        let Ok(previews) = std::fs::read_dir(sub.path()) else {
            continue;
        };
        for p in previews.flatten() {
            if let Ok(m) = p.metadata()
                && m.is_file()
            {
                let used = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                out.push((p.path(), m.len(), used));
            }
        }
    }
    out
}

/// Removes the least recently used previews until at most 90% of `limit` is left (so the
/// next few writes do not start another pass); returns the bytes left.
fn evict(dir: &Path, limit: u64) -> u64 {
    let mut all = entries(dir);
    all.sort_by_key(|e| e.2);
    let mut used: u64 = all.iter().map(|e| e.1).sum();
    let target = limit / 10 * 9;
    for (path, size, _) in all {
        if used <= target {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            used -= size;
            if let Some(parent) = path.parent() {
                // Only succeeds when it was the file's last preview.
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(file: &str, etag: &str, variant: &str) -> Key {
        Key {
            file: file.into(),
            etag: etag.into(),
            variant: variant.into(),
        }
    }

    #[tokio::test]
    async fn a_new_etag_replaces_the_old_previews_of_its_file() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path().join("c"), 1 << 20).await?;
        cache.put(&key("f", "e1", "32x32-fit"), b"one").await;
        cache.put(&key("f", "e1", "64x64-fit"), b"two").await;
        cache.put(&key("g", "e1", "32x32-fit"), b"other").await;
        assert_eq!(
            cache.get(&key("f", "e1", "32x32-fit")).await.as_deref(),
            Some(&b"one"[..])
        );
        cache.put(&key("f", "e2", "32x32-fit"), b"new").await;
        assert_eq!(cache.get(&key("f", "e1", "32x32-fit")).await, None);
        assert_eq!(cache.get(&key("f", "e1", "64x64-fit")).await, None);
        assert!(cache.get(&key("g", "e1", "32x32-fit")).await.is_some());
        assert_eq!(cache.used(), 8);
        // Counted again from disk after a restart.
        let again = Cache::open(dir.path().join("c"), 1 << 20).await?;
        assert_eq!(again.used(), 8);
        Ok(())
    }

    #[tokio::test]
    async fn past_the_limit_the_least_recently_used_go() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let cache = Cache::open(dir.path().join("c"), 1000).await?;
        let old = SystemTime::now() - std::time::Duration::from_secs(60);
        for i in 0..4 {
            cache.put(&key(&format!("f{i}"), "e", "v"), &[0; 300]).await;
            // Older uses for the lower numbers, whatever the clock's resolution.
            let path = cache.path(&key(&format!("f{i}"), "e", "v"));
            std::fs::File::options()
                .write(true)
                .open(path)?
                .set_modified(old + std::time::Duration::from_secs(i))?;
        }
        assert!(cache.used() <= 900, "{}", cache.used());
        assert_eq!(cache.get(&key("f0", "e", "v")).await, None);
        assert!(cache.get(&key("f3", "e", "v")).await.is_some());
        Ok(())
    }
}
