//! Checksums computed while a body streams through: SHA-1, MD5 and Adler-32, the three oCIS
//! advertises (`checksums.supportedTypes`) and reports in `oc:checksums` / `OC-Checksum`.

use std::fmt;
use std::str::FromStr;

use md5::Md5;
use sha1::{Digest, Sha1};

/// A checksum algorithm a client may name (`OC-Checksum: SHA1:...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChecksumAlgo {
    Sha1,
    Md5,
    Adler32,
}

impl ChecksumAlgo {
    /// The upper-case name oCIS uses in `oc:checksums` and `OC-Checksum`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChecksumAlgo::Sha1 => "SHA1",
            ChecksumAlgo::Md5 => "MD5",
            ChecksumAlgo::Adler32 => "ADLER32",
        }
    }
}

impl fmt::Display for ChecksumAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChecksumAlgo {
    type Err = ();

    /// Case-insensitive: clients send `SHA1`, capabilities say `sha1`.
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.to_ascii_lowercase().as_str() {
            "sha1" | "sha-1" => Ok(ChecksumAlgo::Sha1),
            "md5" => Ok(ChecksumAlgo::Md5),
            "adler32" | "adler-32" => Ok(ChecksumAlgo::Adler32),
            _ => Err(()),
        }
    }
}

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
}

/// All three digests fed in one pass. Hashing runs on the task that reads the body: the chunks a
/// request body yields are small (≤ 64 KiB typically), so each update is well under a millisecond.
pub(crate) struct Hasher {
    sha1: Sha1,
    md5: Md5,
    adler: Adler32,
}

impl Hasher {
    pub(crate) fn new() -> Self {
        Hasher {
            sha1: Sha1::new(),
            md5: Md5::new(),
            adler: Adler32::new(),
        }
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        self.sha1.update(data);
        self.md5.update(data);
        self.adler.update(data);
    }

    pub(crate) fn finish(self) -> Checksums {
        Checksums {
            sha1: hex(&self.sha1.finalize()),
            md5: hex(&self.md5.finalize()),
            adler32: format!("{:08x}", self.adler.value()),
        }
    }
}

/// Adler-32 (RFC 1950 §8.2). Small enough to keep rather than add a dependency.
struct Adler32 {
    a: u32,
    b: u32,
}

impl Adler32 {
    const MOD: u32 = 65521;
    /// The most bytes that can be summed before `b` could overflow a u32 (zlib's NMAX).
    const NMAX: usize = 5552;

    fn new() -> Self {
        Adler32 { a: 1, b: 0 }
    }

    fn update(&mut self, data: &[u8]) {
        for chunk in data.chunks(Self::NMAX) {
            for &byte in chunk {
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

    #[test]
    fn known_vectors() {
        let mut h = Hasher::new();
        h.update(b"Wikipedia");
        let c = h.finish();
        // The example in the Adler-32 article.
        assert_eq!(c.adler32, "11e60398");

        let mut h = Hasher::new();
        h.update(b"abc");
        let c = h.finish();
        assert_eq!(c.sha1, "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(c.md5, "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(c.adler32, "024d0127");
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
