//! Checksums computed while a body streams through: SHA-1, MD5 and Adler-32, the three oCIS
//! advertises (`checksums.supportedTypes`) and reports in `oc:checksums` / `OC-Checksum`.

use bytes::Bytes;
use md5::Md5;
use sha1::digest::common::hazmat::SerializableState;
use sha1::digest::typenum::Unsigned;
use sha1::{Digest, Sha1};

pub use arca_store::ChecksumAlgo;

/// The checksums of a file's content, lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checksums {
    pub sha1: String,
    pub md5: String,
    pub adler32: String,
}

impl Checksums {
    pub fn get(&self, algo: ChecksumAlgo) -> &str {
        match algo {
            ChecksumAlgo::Sha1 => &self.sha1,
            ChecksumAlgo::Md5 => &self.md5,
            ChecksumAlgo::Adler32 => &self.adler32,
        }
    }

    /// `ChecksumMismatch` unless these are the checksum a client announced (hex, any case).
    pub(crate) fn verify(
        &self,
        expected: Option<&(ChecksumAlgo, String)>,
    ) -> Result<(), crate::StoreError> {
        let Some((algo, want)) = expected else {
            return Ok(());
        };
        let actual = self.get(*algo);
        if actual.eq_ignore_ascii_case(want.trim()) {
            return Ok(());
        }
        Err(crate::StoreError::ChecksumMismatch {
            algo: *algo,
            expected: want.clone(),
            actual: actual.to_owned(),
        })
    }
}

/// All three digests fed in one pass, on the task that reads the body — until the body is
/// large. MD5 is the slowest of the three (≈ 1.5 ns/byte here, SHA-1 with the CPU's SHA
/// extensions and Adler-32 together ≈ 1 ns/byte), so a large upload running all three on one
/// core is capped near 400 MB/s whatever the disk does. Past [`PARALLEL_AFTER`] bytes MD5
/// moves to a blocking thread of its own that is fed the same chunks (reference-counted
/// `Bytes`, no copies) through a bounded queue, and the body's task keeps SHA-1 and Adler-32.
/// Small bodies never pay for a thread hand-off.
pub(crate) struct Hasher {
    sha1: Sha1,
    adler: Adler32,
    md5: Md5Lane,
    fed: u64,
}

/// Bytes hashed on the body's task before MD5 moves to its own thread.
const PARALLEL_AFTER: u64 = 1 << 20;
/// Chunks queued for the MD5 thread before the body's task waits for it (backpressure: memory
/// stays at a few chunks however fast the body arrives).
const MD5_QUEUE: usize = 8;

enum Md5Lane {
    Here(Md5),
    Away {
        chunks: tokio::sync::mpsc::Sender<Bytes>,
        done: tokio::task::JoinHandle<Md5>,
    },
    /// Only while switching lanes.
    Switching,
}

impl Hasher {
    pub(crate) fn new() -> Self {
        Hasher {
            sha1: Sha1::new(),
            adler: Adler32::new(),
            md5: Md5Lane::Here(Md5::new()),
            fed: 0,
        }
    }

    /// Feeds one chunk of the body.
    pub(crate) async fn update(&mut self, chunk: &Bytes) {
        self.fed += chunk.len() as u64;
        if self.fed > PARALLEL_AFTER && matches!(self.md5, Md5Lane::Here(_)) {
            self.move_md5_away();
        }
        match &mut self.md5 {
            Md5Lane::Here(md5) => md5.update(chunk),
            Md5Lane::Away { chunks, .. } => {
                // The thread only ends after the sender is dropped, or by panicking: then
                // `finish` reports the panic and this chunk does not matter.
                let _ = chunks.send(chunk.clone()).await;
            }
            Md5Lane::Switching => {}
        }
        self.sha1.update(chunk);
        self.adler.update(chunk);
    }

    fn move_md5_away(&mut self) {
        let Md5Lane::Here(mut md5) = std::mem::replace(&mut self.md5, Md5Lane::Switching) else {
            return;
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(MD5_QUEUE);
        let done = tokio::task::spawn_blocking(move || {
            while let Some(chunk) = rx.blocking_recv() {
                md5.update(&chunk);
            }
            md5
        });
        self.md5 = Md5Lane::Away { chunks: tx, done };
    }

    /// The MD5 state with every chunk fed, its thread (if any) joined.
    async fn md5(md5: Md5Lane) -> std::io::Result<Md5> {
        match md5 {
            Md5Lane::Here(md5) => Ok(md5),
            Md5Lane::Away { chunks, done } => {
                drop(chunks);
                done.await.map_err(std::io::Error::other)
            }
            Md5Lane::Switching => Err(std::io::Error::other("md5 lane lost while switching")),
        }
    }

    /// The three checksums of everything fed. Fails only if the MD5 thread died (a panic).
    pub(crate) async fn finish(self) -> std::io::Result<Checksums> {
        let md5 = Self::md5(self.md5).await?;
        Ok(Checksums {
            sha1: hex(&self.sha1.finalize()),
            md5: hex(&md5.finalize()),
            adler32: format!("{:08x}", self.adler.value()),
        })
    }

    /// The state after everything fed, as bytes that [`Hasher::resume`] continues from — in
    /// another process, too: an upload folder's chunks are hashed as they arrive, whichever
    /// instance stores each, so its checksums are ready when it is assembled.
    pub(crate) async fn suspend(self) -> std::io::Result<Vec<u8>> {
        let md5 = Self::md5(self.md5).await?;
        let mut out = Vec::with_capacity(1 + SHA1_STATE + MD5_STATE + 16);
        out.push(STATE_VERSION);
        out.extend_from_slice(self.sha1.serialize().as_slice());
        out.extend_from_slice(md5.serialize().as_slice());
        out.extend_from_slice(&self.adler.a.to_le_bytes());
        out.extend_from_slice(&self.adler.b.to_le_bytes());
        out.extend_from_slice(&self.fed.to_le_bytes());
        Ok(out)
    }

    /// A hasher continuing from a [`Hasher::suspend`]ed state; `None` if the bytes are not
    /// one (another version, truncated).
    pub(crate) fn resume(state: &[u8]) -> Option<Hasher> {
        let rest = state.strip_prefix(&[STATE_VERSION])?;
        let (sha1, rest) = rest.split_at_checked(SHA1_STATE)?;
        let (md5, rest) = rest.split_at_checked(MD5_STATE)?;
        let (a, rest) = rest.split_at_checked(4)?;
        let (b, fed) = rest.split_at_checked(4)?;
        let sha1 = Sha1::deserialize(&sha1.try_into().ok()?).ok()?;
        let md5 = Md5::deserialize(&md5.try_into().ok()?).ok()?;
        let adler = Adler32 {
            a: u32::from_le_bytes(a.try_into().ok()?),
            b: u32::from_le_bytes(b.try_into().ok()?),
        };
        Some(Hasher {
            sha1,
            adler,
            md5: Md5Lane::Here(md5),
            fed: u64::from_le_bytes(fed.try_into().ok()?),
        })
    }
}

/// The layout of a suspended [`Hasher`]: this byte, then the SHA-1 and MD5 states as the
/// digest crates serialise them, Adler-32's two sums and the byte count, little-endian.
const STATE_VERSION: u8 = 1;
const SHA1_STATE: usize = <<Sha1 as SerializableState>::SerializedStateSize as Unsigned>::USIZE;
const MD5_STATE: usize = <<Md5 as SerializableState>::SerializedStateSize as Unsigned>::USIZE;

/// Adler-32 (RFC 1950 §8.2). Small enough to keep rather than add a dependency.
struct Adler32 {
    a: u32,
    b: u32,
}

impl Adler32 {
    const MOD: u32 = 65521;
    /// The most bytes that can be summed before `b` could overflow a u32 (zlib's NMAX),
    /// rounded down to whole [`Self::BLOCK`]s.
    const NMAX: usize = 5552 / Self::BLOCK * Self::BLOCK;
    /// Bytes summed as one block: `a` grows by their sum and `b` by `BLOCK·a` plus their sum
    /// weighted `BLOCK, BLOCK-1, … 1` — the same values as byte by byte, but without the
    /// byte-to-byte dependency, so the compiler turns both sums into vector code (≈ 5× faster).
    const BLOCK: usize = 32;

    fn new() -> Self {
        Adler32 { a: 1, b: 0 }
    }

    fn update(&mut self, data: &[u8]) {
        for chunk in data.chunks(Self::NMAX) {
            let mut blocks = chunk.chunks_exact(Self::BLOCK);
            for block in &mut blocks {
                let mut sum = 0u32;
                let mut weighted = 0u32;
                for (i, &byte) in block.iter().enumerate() {
                    sum += u32::from(byte);
                    weighted += (Self::BLOCK - i) as u32 * u32::from(byte);
                }
                self.b += Self::BLOCK as u32 * self.a + weighted;
                self.a += sum;
            }
            for &byte in blocks.remainder() {
                self.a += u32::from(byte);
                self.b += self.a;
            }
            self.a %= Self::MOD;
            self.b %= Self::MOD;
        }
    }

    fn value(&self) -> u32 {
        (self.b << 16) | self.a
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn known_vectors() {
        let mut h = Hasher::new();
        h.update(&Bytes::from_static(b"Wikipedia")).await;
        let c = h.finish().await.unwrap();
        // The example in the Adler-32 article.
        assert_eq!(c.adler32, "11e60398");

        let mut h = Hasher::new();
        h.update(&Bytes::from_static(b"abc")).await;
        let c = h.finish().await.unwrap();
        assert_eq!(c.sha1, "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(c.md5, "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(c.adler32, "024d0127");
    }

    /// A body past the threshold (MD5 on its own thread) hashes exactly as one fed in a
    /// single piece on the calling task.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_bodies_hash_the_same_in_parallel() {
        let data: Vec<u8> = (0..(3 * PARALLEL_AFTER as u32 + 12_345))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let data = Bytes::from(data);
        let mut split = Hasher::new();
        for c in data.chunks(64 * 1024 + 7) {
            split.update(&data.slice_ref(c)).await;
        }
        assert!(
            matches!(split.md5, Md5Lane::Away { .. }),
            "MD5 moved to its thread"
        );
        let split = split.finish().await.unwrap();
        let whole = Checksums {
            sha1: hex(&Sha1::digest(&data)),
            md5: hex(&Md5::digest(&data)),
            adler32: {
                let mut a = Adler32::new();
                a.update(&data);
                format!("{:08x}", a.value())
            },
        };
        assert_eq!(split, whole);
        // And Adler-32 against the byte-by-byte definition.
        let (mut a, mut b) = (1u64, 0u64);
        for &x in data.iter() {
            a = (a + u64::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!(split.adler32, format!("{:08x}", (b << 16) | a));
    }

    /// Suspended after any prefix and resumed (on another hasher, as another process would),
    /// the checksums are those of the whole body in one go.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_suspended_hasher_resumes_where_it_stopped() {
        let data: Vec<u8> = (0..(3 << 20) + 77u32)
            .map(|i| (i * 31 % 253) as u8)
            .collect();
        let data = Bytes::from(data);
        let mut whole = Hasher::new();
        whole.update(&data).await;
        let whole = whole.finish().await.unwrap();
        for cut in [0, 1, 63, 64, 1 << 20, (2 << 20) + 5] {
            let mut h = Hasher::new();
            h.update(&data.slice(..cut)).await;
            let state = h.suspend().await.unwrap();
            let mut h = Hasher::resume(&state).unwrap();
            h.update(&data.slice(cut..)).await;
            assert_eq!(h.finish().await.unwrap(), whole, "cut at {cut}");
        }
        assert!(Hasher::resume(&[]).is_none());
        assert!(Hasher::resume(&[STATE_VERSION, 1, 2]).is_none());
        assert!(Hasher::resume(&[9; 200]).is_none());
    }

    #[test]
    fn adler_split_equals_whole() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut whole = Adler32::new();
        whole.update(&data);
        let mut parts = Adler32::new();
        for c in data.chunks(777) {
            parts.update(c);
        }
        assert_eq!(whole.value(), parts.value());
        // All 0xff is the worst case for the NMAX bound.
        let mut ff = Adler32::new();
        ff.update(&vec![0xff; 1 << 20]);
        let mut naive_a: u64 = 1;
        let mut naive_b: u64 = 0;
        for _ in 0..(1 << 20) {
            naive_a = (naive_a + 0xff) % 65521;
            naive_b = (naive_b + naive_a) % 65521;
        }
        assert_eq!(u64::from(ff.value()), (naive_b << 16) | naive_a);
    }

    #[test]
    fn algo_names() {
        assert_eq!("sha1".parse(), Ok(ChecksumAlgo::Sha1));
        assert_eq!("ADLER32".parse(), Ok(ChecksumAlgo::Adler32));
        assert_eq!("crc32".parse::<ChecksumAlgo>(), Err(()));
    }
}
