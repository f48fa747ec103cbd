//! A ZIP writer for streaming (PKWARE APPNOTE 6.3.10): entries are stored, not compressed,
//! each file's CRC-32 and size follow its bytes in a data descriptor (general purpose bit 3),
//! so nothing is buffered or written twice; the central directory at the end is all it keeps,
//! one small record per entry. ZIP64 fields appear only where a value needs them (a file of
//! 4 GiB or more, an offset past 4 GiB, 65,535 entries or more), so ordinary archives open
//! in every unzip.
//!
//! Names are UTF-8 (bit 11). Each entry carries its modification time twice: in DOS form
//! (local time in the format, written here as UTC) and as Unix seconds in the extended
//! timestamp field (0x5455), which unzip and most tools prefer.

use bytes::{BufMut, Bytes, BytesMut};

/// What a ZIP field of 32 bits cannot hold: past it, the value goes into a ZIP64 field.
const MAX32: u64 = 0xFFFF_FFFF;
/// Entries past this need the ZIP64 end record.
const MAX_ENTRIES16: u64 = 0xFFFF;

const LOCAL_HEADER: u32 = 0x0403_4b50;
const DATA_DESCRIPTOR: u32 = 0x0807_4b50;
const CENTRAL_HEADER: u32 = 0x0201_4b50;
const END_OF_CENTRAL: u32 = 0x0605_4b50;
const ZIP64_END: u32 = 0x0606_4b50;
const ZIP64_LOCATOR: u32 = 0x0706_4b50;

/// Bit 3 (sizes and CRC in a data descriptor) and bit 11 (UTF-8 names).
const FLAGS_FILE: u16 = 0x0808;
const FLAGS_DIR: u16 = 0x0800;
/// Version needed: 2.0 (folders, descriptors), 4.5 (ZIP64).
const VERSION_20: u16 = 20;
const VERSION_45: u16 = 45;
/// Made by: Unix (3) in the high byte, so the external attributes hold a mode.
const MADE_BY: u16 = (3 << 8) | VERSION_45;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ZipError {
    #[error("a file grew past 4 GiB while it was archived")]
    TooLargeForEntry,
    #[error("an entry's name is longer than 65,535 bytes")]
    NameTooLong,
}

/// One entry, as the central directory records it.
struct Entry {
    name: String,
    dir: bool,
    mtime: i64,
    crc: u32,
    size: u64,
    offset: u64,
}

/// Writes an archive as a sequence of byte chunks: [`dir`](Self::dir), or
/// [`file_start`](Self::file_start), the file's bytes, [`file_end`](Self::file_end), per
/// entry, then [`finish`](Self::finish).
#[derive(Default)]
pub struct ZipWriter {
    offset: u64,
    entries: Vec<Entry>,
}

/// A file whose bytes are being written: its header is out, its descriptor not yet.
pub struct OpenFile {
    name: String,
    mtime: i64,
    offset: u64,
    zip64: bool,
}

impl ZipWriter {
    /// Bytes written so far.
    #[cfg(test)]
    pub fn written(&self) -> u64 {
        self.offset
    }

    /// A folder entry (`name` without the trailing slash, which this adds).
    pub fn dir(&mut self, name: &str, mtime: i64) -> Result<Bytes, ZipError> {
        let name = format!("{}/", name.trim_end_matches('/'));
        let header = local_header(&name, mtime, FLAGS_DIR, false)?;
        self.entries.push(Entry {
            name,
            dir: true,
            mtime,
            crc: 0,
            size: 0,
            offset: self.offset,
        });
        self.offset += header.len() as u64;
        Ok(header)
    }

    /// A file's header; `expected` is its size as known now (it decides whether the entry
    /// needs ZIP64 sizes, so a file that grows past 4 GiB meanwhile fails at the end).
    pub fn file_start(
        &mut self,
        name: &str,
        mtime: i64,
        expected: u64,
    ) -> Result<(Bytes, OpenFile), ZipError> {
        let zip64 = expected >= MAX32;
        let header = local_header(name, mtime, FLAGS_FILE, zip64)?;
        let open = OpenFile {
            name: name.to_owned(),
            mtime,
            offset: self.offset,
            zip64,
        };
        self.offset += header.len() as u64;
        Ok((header, open))
    }

    /// The data descriptor after a file's `size` bytes, whose CRC-32 is `crc`.
    pub fn file_end(&mut self, file: OpenFile, crc: u32, size: u64) -> Result<Bytes, ZipError> {
        if !file.zip64 && size >= MAX32 {
            return Err(ZipError::TooLargeForEntry);
        }
        let mut b = BytesMut::with_capacity(24);
        b.put_u32_le(DATA_DESCRIPTOR);
        b.put_u32_le(crc);
        if file.zip64 {
            b.put_u64_le(size);
            b.put_u64_le(size);
        } else {
            b.put_u32_le(size as u32);
            b.put_u32_le(size as u32);
        }
        self.offset += size + b.len() as u64;
        self.entries.push(Entry {
            name: file.name,
            dir: false,
            mtime: file.mtime,
            crc,
            size,
            offset: file.offset,
        });
        Ok(b.freeze())
    }

    /// The central directory and the end records.
    pub fn finish(self) -> Bytes {
        let start = self.offset;
        let mut b = BytesMut::new();
        for e in &self.entries {
            central_header(&mut b, e);
        }
        let size = b.len() as u64;
        let count = self.entries.len() as u64;
        let zip64 = count >= MAX_ENTRIES16 || start >= MAX32 || size >= MAX32;
        if zip64 {
            let end64 = start + size;
            b.put_u32_le(ZIP64_END);
            b.put_u64_le(44);
            b.put_u16_le(MADE_BY);
            b.put_u16_le(VERSION_45);
            b.put_u32_le(0);
            b.put_u32_le(0);
            b.put_u64_le(count);
            b.put_u64_le(count);
            b.put_u64_le(size);
            b.put_u64_le(start);
            b.put_u32_le(ZIP64_LOCATOR);
            b.put_u32_le(0);
            b.put_u64_le(end64);
            b.put_u32_le(1);
        }
        b.put_u32_le(END_OF_CENTRAL);
        b.put_u16_le(0);
        b.put_u16_le(0);
        b.put_u16_le(count.min(MAX_ENTRIES16) as u16);
        b.put_u16_le(count.min(MAX_ENTRIES16) as u16);
        b.put_u32_le(size.min(MAX32) as u32);
        b.put_u32_le(start.min(MAX32) as u32);
        b.put_u16_le(0);
        b.freeze()
    }
}

/// MS-DOS time and date (2-second steps, 1980 to 2107) of Unix seconds, as UTC.
fn dos_time(unix: i64) -> (u16, u16) {
    let unix = unix.clamp(315_532_800, 4_354_819_199);
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = crate::dates::civil_from_days(days);
    let time = ((secs / 3600) << 11) | (((secs / 60) % 60) << 5) | ((secs % 60) / 2);
    let date = ((y - 1980) << 9) | (m << 5) | d;
    (time as u16, date as u16)
}

/// The extended timestamp field: the modification time in Unix seconds.
fn put_timestamp(b: &mut BytesMut, mtime: i64) {
    b.put_u16_le(0x5455);
    b.put_u16_le(5);
    b.put_u8(1);
    b.put_u32_le(mtime.clamp(0, i64::from(u32::MAX)) as u32);
}

fn local_header(name: &str, mtime: i64, flags: u16, zip64: bool) -> Result<Bytes, ZipError> {
    let name_len = u16::try_from(name.len()).map_err(|_| ZipError::NameTooLong)?;
    let (time, date) = dos_time(mtime);
    let extra_len: u16 = 9 + if zip64 { 20 } else { 0 };
    let mut b = BytesMut::with_capacity(30 + name.len() + usize::from(extra_len));
    b.put_u32_le(LOCAL_HEADER);
    b.put_u16_le(if zip64 { VERSION_45 } else { VERSION_20 });
    b.put_u16_le(flags);
    b.put_u16_le(0); // stored
    b.put_u16_le(time);
    b.put_u16_le(date);
    b.put_u32_le(0); // CRC-32: in the descriptor (files) or 0 (folders)
    let sizes = if zip64 { u32::MAX } else { 0 };
    b.put_u32_le(sizes);
    b.put_u32_le(sizes);
    b.put_u16_le(name_len);
    b.put_u16_le(extra_len);
    b.put_slice(name.as_bytes());
    put_timestamp(&mut b, mtime);
    if zip64 {
        // The sizes themselves follow in the descriptor; here they are placeholders.
        b.put_u16_le(0x0001);
        b.put_u16_le(16);
        b.put_u64_le(0);
        b.put_u64_le(0);
    }
    Ok(b.freeze())
}

fn central_header(b: &mut BytesMut, e: &Entry) {
    let big_size = e.size >= MAX32;
    let big_offset = e.offset >= MAX32;
    let zip64_len = if big_size { 16 } else { 0 } + if big_offset { 8 } else { 0 };
    let extra_len = 9 + if zip64_len > 0 { 4 + zip64_len } else { 0 };
    let (time, date) = dos_time(e.mtime);
    b.put_u32_le(CENTRAL_HEADER);
    b.put_u16_le(MADE_BY);
    b.put_u16_le(if zip64_len > 0 {
        VERSION_45
    } else {
        VERSION_20
    });
    b.put_u16_le(if e.dir { FLAGS_DIR } else { FLAGS_FILE });
    b.put_u16_le(0);
    b.put_u16_le(time);
    b.put_u16_le(date);
    b.put_u32_le(e.crc);
    let size = if big_size { u32::MAX } else { e.size as u32 };
    b.put_u32_le(size);
    b.put_u32_le(size);
    // The name's length was checked when its local header was written.
    b.put_u16_le(e.name.len() as u16);
    b.put_u16_le(extra_len);
    b.put_u16_le(0); // comment
    b.put_u16_le(0); // disk
    b.put_u16_le(0); // internal attributes
    let (mode, dos) = if e.dir {
        (0o040_755u32, 0x10)
    } else {
        (0o100_644u32, 0)
    };
    b.put_u32_le((mode << 16) | dos);
    b.put_u32_le(if big_offset {
        u32::MAX
    } else {
        e.offset as u32
    });
    b.put_slice(e.name.as_bytes());
    put_timestamp(b, e.mtime);
    if zip64_len > 0 {
        b.put_u16_le(0x0001);
        b.put_u16_le(zip64_len);
        if big_size {
            b.put_u64_le(e.size);
            b.put_u64_le(e.size);
        }
        if big_offset {
            b.put_u64_le(e.offset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    #[test]
    fn an_archive_is_headers_bytes_descriptors_then_the_directory() -> Result<(), ZipError> {
        let mut z = ZipWriter::default();
        let mut out = Vec::new();
        out.extend_from_slice(&z.dir("docs", 1_700_000_000)?);
        let (head, open) = z.file_start("docs/a.txt", 1_700_000_000, 5)?;
        out.extend_from_slice(&head);
        out.extend_from_slice(b"hello");
        let crc = crc32fast::hash(b"hello");
        out.extend_from_slice(&z.file_end(open, crc, 5)?);
        assert_eq!(z.written(), out.len() as u64);
        out.extend_from_slice(&z.finish());
        assert_eq!(u32_at(&out, 0), LOCAL_HEADER);
        // The end record: 2 entries, and the directory where it says.
        let end = out.len() - 22;
        assert_eq!(u32_at(&out, end), END_OF_CENTRAL);
        assert_eq!(u16::from_le_bytes([out[end + 10], out[end + 11]]), 2);
        let start = u32_at(&out, end + 16) as usize;
        assert_eq!(u32_at(&out, start), CENTRAL_HEADER);
        // The file's central record has its CRC and size.
        let second = start + 46 + "docs/".len() + 9;
        assert_eq!(u32_at(&out, second), CENTRAL_HEADER);
        assert_eq!(u32_at(&out, second + 16), crc);
        assert_eq!(u32_at(&out, second + 24), 5);
        Ok(())
    }

    #[test]
    fn a_file_that_outgrows_its_header_fails() -> Result<(), ZipError> {
        let mut z = ZipWriter::default();
        let (_, open) = z.file_start("a", 0, 10)?;
        assert_eq!(z.file_end(open, 0, MAX32), Err(ZipError::TooLargeForEntry));
        let (_, open) = z.file_start("b", 0, MAX32)?;
        assert!(z.file_end(open, 0, MAX32 + 1).is_ok());
        Ok(())
    }

    #[test]
    fn dos_times_are_utc_in_two_second_steps() {
        // 2024-02-29 13:45:58 UTC.
        let (time, date) = dos_time(1_709_214_358);
        assert_eq!(time, (13 << 11) | (45 << 5) | 29);
        assert_eq!(date, (44 << 9) | (2 << 5) | 29);
        // Before 1980: clamped to its first day.
        assert_eq!(dos_time(0), (0, (1 << 5) | 1));
    }
}
