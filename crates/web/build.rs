//! Embeds the web app: reads `assets/`, hashes all of it into one content hash (the URL
//! segment that lets browsers cache the files for a year), writes each file and its gzip and
//! brotli forms into `OUT_DIR`, and generates the table `src/lib.rs` includes.
//!
//! One hash for the whole app, not one per file: the ES modules import each other by relative
//! paths (`./dav.js`), which only resolve to current files if they all live under the same
//! hashed folder. Any change to any file moves the whole app to a new folder.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where the page finds the hashed folder; build.rs puts `/app/{hash}` in its place.
const PLACEHOLDER: &str = "{{ASSETS}}";
/// `arca_proto::routes::WEB_ASSETS` (a build script cannot use the crate it builds for).
const ASSETS_ROOT: &str = "/app";

/// A build script reports by failing the build with the reason: an error returned from
/// `main` does, and names this crate's step.
fn main() -> Result<(), String> {
    run().map_err(|e| format!("arca-web build: {e}"))
}

fn run() -> Result<(), String> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?)
        .join("assets");
    let out = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?);
    println!("cargo::rerun-if-changed=assets");

    let mut files = Vec::new();
    collect(&root, &root, &mut files)?;
    files.sort();

    let mut hasher = Sha256::new();
    let mut contents = Vec::new();
    for rel in &files {
        let bytes = std::fs::read(root.join(rel)).map_err(|e| format!("{rel}: {e}"))?;
        // Name and length before the bytes, so moving bytes between files changes the hash.
        hasher.update(rel.as_bytes());
        hasher.update([0]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
        contents.push(bytes);
    }
    let hash: String = hasher.finalize()[..8]
        .iter()
        .fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        });
    let prefix = format!("{ASSETS_ROOT}/{hash}");

    let dir = out.join("web");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut table = String::new();
    let _ = writeln!(table, "/// The content hash of the app's files.");
    let _ = writeln!(table, "pub const HASH: &str = {hash:?};");
    let _ = writeln!(table, "static FILES: &[Asset] = &[");
    for (i, (rel, bytes)) in files.iter().zip(contents).enumerate() {
        // Only the pages name the hashed folder: the modules reach each other relatively.
        let bytes = if rel.ends_with(".html") {
            String::from_utf8(bytes)
                .map_err(|_| format!("{rel} is not UTF-8"))?
                .replace(PLACEHOLDER, &prefix)
                .into_bytes()
        } else {
            bytes
        };
        let raw = dir.join(format!("{i}.raw"));
        let gz = dir.join(format!("{i}.gz"));
        let br = dir.join(format!("{i}.br"));
        std::fs::write(&raw, &bytes).map_err(|e| e.to_string())?;
        std::fs::write(&gz, gzip(&bytes)?).map_err(|e| e.to_string())?;
        std::fs::write(&br, brotli(&bytes)?).map_err(|e| e.to_string())?;
        let _ = writeln!(
            table,
            "    Asset {{ name: {rel:?}, content_type: {:?}, raw: include_bytes!({:?}), gzip: include_bytes!({:?}), brotli: include_bytes!({:?}) }},",
            content_type(rel)?,
            raw.display().to_string(),
            gz.display().to_string(),
            br.display().to_string(),
        );
    }
    let _ = writeln!(table, "];");
    std::fs::write(out.join("assets.rs"), table).map_err(|e| e.to_string())
}

/// The files below `dir`, as paths relative to `root` with `/` separators.
fn collect(root: &Path, dir: &Path, into: &mut Vec<String>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            collect(root, &path, into)?;
        } else {
            let rel = path
                .strip_prefix(root)
                .map_err(|e| e.to_string())?
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            into.push(rel);
        }
    }
    Ok(())
}

/// Brotli at its best quality: made once per build, read by every browser.
fn brotli(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: 11,
        lgwin: 22,
        ..Default::default()
    };
    brotli::BrotliCompress(&mut &bytes[..], &mut out, &params).map_err(|e| e.to_string())?;
    Ok(out)
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).map_err(|e| e.to_string())?;
    enc.finish().map_err(|e| e.to_string())
}

/// The media type of an asset, by extension; an unknown one fails the build, so nothing is
/// ever served with a type a browser would sniff.
fn content_type(name: &str) -> Result<&'static str, String> {
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    Ok(match ext {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "json" => "application/json",
        "ico" => "image/x-icon",
        "png" => "image/png",
        _ => return Err(format!("{name}: no media type known for .{ext}")),
    })
}
