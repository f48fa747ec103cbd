//! TUS resumable uploads through every service in the test process (the real boot path), with
//! the headers owncloudcmd and oCIS exchange (CLIENT_PROTOCOL.md §5a): creation with and
//! without a first chunk, chunked PATCHes, an interrupted chunk, a restart between chunks (an
//! orderly stop and a start on the same data dir), preconditions, quota, termination, expiry,
//! and a real TUS client (Python tuspy) that stops halfway and resumes.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use arca_tests::{HttpResponse, InProcess, TempDir, eventually, pattern, send, send_as, sha1_hex};
use base64::Engine as _;
use bytes::Bytes;
use sha1::Digest as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PASSWORD: &str = "tus-secret";
/// `admin:tus-secret`, as HTTP Basic.
const AUTH: &str = "Basic YWRtaW46dHVzLXNlY3JldA==";
/// Upload URLs are signed with the identity secret: a fixed one lets them outlive a restart.
const SECRET: &str = "tus-test-identity-secret";
const ROOT: &str = "/remote.php/dav/files/admin";

/// Every service in this process, with the admin's password and the identity secret above,
/// and `settings` (dotted keys).
async fn start(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<InProcess> {
    let mut all = vec![("identity.secret", SECRET)];
    all.extend_from_slice(settings);
    InProcess::ready(dir, PASSWORD, &all).await
}

/// One request as admin.
async fn dav(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> anyhow::Result<HttpResponse> {
    send_as(addr, AUTH, method, path, headers, body).await
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A TUS creation POST as owncloudcmd sends it: to a collection, the target in the metadata
/// (with an empty `checksum` key), the first bytes in the body when there are any.
async fn create(
    addr: &str,
    collection: &str,
    filename: &str,
    length: usize,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> anyhow::Result<HttpResponse> {
    let length = length.to_string();
    let metadata = format!("filename {},checksum", b64(filename));
    let mut all = vec![
        ("tus-resumable", "1.0.0"),
        ("upload-length", length.as_str()),
        ("upload-metadata", metadata.as_str()),
    ];
    if !body.is_empty() {
        all.push(("upload-offset", "0"));
        all.push(("content-type", "application/offset+octet-stream"));
    }
    all.extend_from_slice(headers);
    dav(addr, "POST", collection, &all, body).await
}

/// The path of an absolute `Location`, checking it points at this server.
fn upload_path(addr: &str, resp: &HttpResponse) -> anyhow::Result<String> {
    let location = resp
        .header("location")
        .with_context(|| format!("no Location: {} {}", resp.status, resp.text()))?;
    let prefix = format!("http://{addr}/data/");
    anyhow::ensure!(
        location.starts_with(&prefix),
        "Location {location} is not under {prefix}"
    );
    Ok(location[prefix.len() - "/data/".len()..].to_owned())
}

/// PATCH at `offset`, without credentials: the URL's token is the whole authorisation.
async fn patch(
    addr: &str,
    path: &str,
    offset: usize,
    body: &[u8],
    headers: &[(&str, &str)],
) -> anyhow::Result<HttpResponse> {
    let offset = offset.to_string();
    let mut all = vec![
        ("tus-resumable", "1.0.0"),
        ("upload-offset", offset.as_str()),
        ("content-type", "application/offset+octet-stream"),
    ];
    all.extend_from_slice(headers);
    send(addr, "PATCH", path, &all, body.to_vec()).await
}

async fn head(addr: &str, path: &str) -> anyhow::Result<HttpResponse> {
    send(addr, "HEAD", path, &[("tus-resumable", "1.0.0")], "").await
}

fn offset_of(resp: &HttpResponse) -> anyhow::Result<u64> {
    resp.header("upload-offset")
        .with_context(|| format!("no Upload-Offset: {} {}", resp.status, resp.text()))?
        .parse()
        .context("Upload-Offset")
}

/// The value of one property in a Depth 0 PROPFIND answer.
async fn prop(addr: &str, path: &str, name: &str) -> anyhow::Result<String> {
    arca_tests::dav_prop(addr, AUTH, path, name).await
}

async fn content(addr: &str, path: &str) -> anyhow::Result<Vec<u8>> {
    let r = dav(addr, "GET", path, &[], "").await?;
    anyhow::ensure!(r.status == 200, "GET {path}: {} {}", r.status, r.text());
    Ok(r.body)
}

/// Where the parts of uploads in progress live: under `uploads/` in the blob store (the
/// records are rows of the metadata database).
fn uploads_dir(dir: &TempDir) -> PathBuf {
    dir.join("data/storage-users/blobs/uploads")
}

/// The files below the uploads directory (one part per stored chunk, in a directory per
/// upload), as paths relative to it.
fn upload_files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let path = e.path();
            if path.is_dir() {
                walk(base, &path, out);
            } else if let Ok(rel) = path.strip_prefix(base) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut names = Vec::new();
    walk(dir, dir, &mut names);
    names.sort();
    names
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[tokio::test]
async fn a_small_file_in_one_post() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;

    let r = create(
        a,
        &format!("{ROOT}/"),
        "/one.txt",
        9,
        &[("x-oc-mtime", "1700000000")],
        b"hello tus".to_vec(),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    let path = upload_path(a, &r)?;
    assert_eq!(r.header("tus-resumable"), Some("1.0.0"));
    assert_eq!(offset_of(&r)?, 9);
    let expires: u64 = r
        .header("upload-expires")
        .context("Upload-Expires")?
        .parse()?;
    assert!(expires > now_secs() + 3600, "expires {expires}");
    let etag = r.header("etag").context("ETag")?.to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    assert_eq!(r.header("oc-etag"), Some(etag.as_str()));
    assert_eq!(r.header("oc-perm"), Some("SRDNVWZP"));
    assert!(r.header("last-modified").is_some());
    let file_id = r.header("oc-fileid").context("OC-FileId")?.to_owned();

    assert_eq!(content(a, &format!("{ROOT}/one.txt")).await?, b"hello tus");
    assert_eq!(
        prop(a, &format!("{ROOT}/one.txt"), "d:getetag").await?,
        etag
    );
    assert_eq!(
        prop(a, &format!("{ROOT}/one.txt"), "oc:fileid").await?,
        file_id
    );
    let modified = prop(a, &format!("{ROOT}/one.txt"), "d:getlastmodified").await?;
    assert!(
        modified.contains("14 Nov 2023"),
        "X-OC-Mtime kept: {modified}"
    );
    let checksums = prop(a, &format!("{ROOT}/one.txt"), "oc:checksums").await?;
    assert!(
        checksums.contains(&format!("SHA1:{}", sha1_hex(b"hello tus"))),
        "{checksums}"
    );
    // A finished upload is gone.
    assert_eq!(head(a, &path).await?.status, 404);
    assert_eq!(patch(a, &path, 9, b"", &[]).await?.status, 404);

    // The other roots, a filename relative to the collection (no leading slash), a name with
    // spaces and non-ASCII characters, and an empty file (complete as soon as it exists).
    assert_eq!(
        dav(a, "MKCOL", &format!("{ROOT}/sub"), &[], "")
            .await?
            .status,
        201
    );
    let r = create(
        a,
        "/remote.php/webdav/sub/",
        "über uns.txt",
        3,
        &[],
        b"abc".to_vec(),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        content(a, &format!("{ROOT}/sub/%C3%BCber%20uns.txt")).await?,
        b"abc"
    );
    let space = prop(a, &format!("{ROOT}/"), "oc:spaceid").await?;
    let r = create(
        a,
        &format!("/dav/spaces/{space}/sub"),
        "empty.txt",
        0,
        &[],
        Vec::new(),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(offset_of(&r)?, 0);
    assert!(
        r.header("oc-fileid").is_some(),
        "an empty upload completes at once"
    );
    assert_eq!(content(a, &format!("{ROOT}/sub/empty.txt")).await?, b"");
    let listing = dav(
        a,
        "PROPFIND",
        &format!("{ROOT}/sub/"),
        &[("depth", "1")],
        "",
    )
    .await?;
    assert_eq!(
        listing.text().matches("<d:response>").count(),
        3,
        "{}",
        listing.text()
    );

    // Bad creations.
    for (headers, want) in [
        (vec![("upload-length", "5")], 400),
        (
            vec![("upload-length", "x"), ("upload-metadata", "filename YQ==")],
            400,
        ),
        (
            vec![("upload-length", "5"), ("upload-metadata", "filename !!!")],
            400,
        ),
        (
            vec![
                ("upload-length", "5"),
                ("upload-metadata", "filename Li4vZXNjYXBl"),
            ],
            400,
        ),
        (
            vec![
                ("upload-length", "5"),
                ("upload-metadata", "filename bm8vc3VjaC9kaXIudHh0"),
            ],
            409,
        ),
    ] {
        let mut all = vec![("tus-resumable", "1.0.0")];
        all.extend(headers.iter().copied());
        let r = dav(a, "POST", &format!("{ROOT}/"), &all, "").await?;
        assert_eq!(r.status, want, "{headers:?}: {}", r.text());
    }
    let r = dav(
        a,
        "POST",
        &format!("{ROOT}/"),
        &[("tus-resumable", "0.2.2"), ("upload-length", "1")],
        "",
    )
    .await?;
    assert_eq!(r.status, 412);
    assert_eq!(r.header("tus-version"), Some("1.0.0"));
    // Creation needs credentials like any WebDAV request.
    let r = send(
        a,
        "POST",
        &format!("{ROOT}/"),
        &[("tus-resumable", "1.0.0")],
        "",
    )
    .await?;
    assert_eq!(r.status, 401);
    Ok(())
}

#[tokio::test]
async fn three_chunks_with_head_between() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    let data = pattern(30, 1);

    let options = dav(a, "OPTIONS", &format!("{ROOT}/"), &[], "").await?;
    assert!(options.status < 300, "{}", options.status);
    assert_eq!(options.header("tus-resumable"), Some("1.0.0"));
    assert_eq!(options.header("tus-version"), Some("1.0.0"));
    assert_eq!(
        options.header("tus-extension"),
        Some("creation,creation-with-upload,checksum,expiration,termination")
    );
    assert_eq!(options.header("tus-checksum-algorithm"), Some("md5,sha1"));
    assert_eq!(options.header("tus-max-size"), None, "no quota, no limit");
    assert_eq!(
        options.header("dav"),
        Some("1, 2"),
        "the WebDAV headers stay"
    );
    let allow = options.header("allow").unwrap_or("");
    assert!(
        allow.contains("PROPFIND") && allow.contains("POST"),
        "{allow}"
    );

    let r = create(a, &format!("{ROOT}/"), "chunks.bin", 30, &[], Vec::new()).await?;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(offset_of(&r)?, 0);
    assert!(r.header("etag").is_none() && r.header("oc-fileid").is_none());
    let path = upload_path(a, &r)?;

    let h = head(a, &path).await?;
    assert_eq!(h.status, 200);
    assert_eq!(offset_of(&h)?, 0);
    assert_eq!(h.header("upload-length"), Some("30"));
    assert_eq!(h.header("cache-control"), Some("no-store"));

    let r = patch(a, &path, 0, &data[..10], &[]).await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(offset_of(&r)?, 10);
    assert!(r.header("upload-expires").is_some());
    assert!(r.header("etag").is_none());
    assert_eq!(offset_of(&head(a, &path).await?)?, 10);

    // Wrong offset, wrong type, wrong version, wrong checksum: refused, nothing written.
    assert_eq!(patch(a, &path, 5, &data[5..10], &[]).await?.status, 409);
    let r = send(
        a,
        "PATCH",
        &path,
        &[("tus-resumable", "1.0.0"), ("upload-offset", "10")],
        data[10..20].to_vec(),
    )
    .await?;
    assert_eq!(r.status, 415);
    let r = send(
        a,
        "PATCH",
        &path,
        &[
            ("tus-resumable", "2.0.0"),
            ("upload-offset", "10"),
            ("content-type", "application/offset+octet-stream"),
        ],
        data[10..20].to_vec(),
    )
    .await?;
    assert_eq!(r.status, 412);
    let wrong = format!(
        "sha1 {}",
        base64::engine::general_purpose::STANDARD.encode([0u8; 20])
    );
    let r = patch(a, &path, 10, &data[10..20], &[("upload-checksum", &wrong)]).await?;
    assert_eq!(r.status, 460, "{}", r.text());
    let r = patch(
        a,
        &path,
        10,
        &data[10..20],
        &[("upload-checksum", "crc32 AAAA")],
    )
    .await?;
    assert_eq!(r.status, 400);
    assert_eq!(offset_of(&head(a, &path).await?)?, 10);
    // A token changed by one character opens nothing.
    let mut forged = path.clone();
    let last = forged.pop().context("empty path")?;
    forged.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(head(a, &forged).await?.status, 404);
    assert_eq!(patch(a, &forged, 10, &data[10..20], &[]).await?.status, 404);

    let right = format!(
        "sha1 {}",
        base64::engine::general_purpose::STANDARD.encode(sha1::Sha1::digest(&data[10..20]))
    );
    let r = patch(a, &path, 10, &data[10..20], &[("upload-checksum", &right)]).await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(offset_of(&head(a, &path).await?)?, 20);
    let r = patch(a, &path, 20, &data[20..], &[]).await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(offset_of(&r)?, 30);
    let file_id = r
        .header("oc-fileid")
        .context("OC-FileId on the last PATCH")?;
    assert_eq!(
        prop(a, &format!("{ROOT}/chunks.bin"), "oc:fileid").await?,
        file_id
    );
    assert_eq!(head(a, &path).await?.status, 404, "complete: gone");
    assert_eq!(content(a, &format!("{ROOT}/chunks.bin")).await?, data);
    assert!(upload_files(&uploads_dir(&dir)).is_empty());
    Ok(())
}

#[tokio::test]
async fn an_interrupted_chunk_keeps_what_arrived() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    let data = pattern(3 << 20, 2);
    let sent = (1 << 20) + 12_345;

    let r = create(
        a,
        &format!("{ROOT}/"),
        "cut.bin",
        data.len(),
        &[],
        Vec::new(),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    let path = upload_path(a, &r)?;

    // A PATCH announcing the whole rest, of which the client sends only a part and then goes
    // away (it half-closes, as a killed process's socket does, and stops listening).
    let mut conn = tokio::net::TcpStream::connect(a.as_str()).await?;
    let head_lines = format!(
        "PATCH {path} HTTP/1.1\r\nHost: {a}\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n\
         Content-Type: application/offset+octet-stream\r\nContent-Length: {}\r\n\r\n",
        data.len()
    );
    conn.write_all(head_lines.as_bytes()).await?;
    conn.write_all(&data[..sent]).await?;
    conn.shutdown().await?;
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut sink)).await;
    drop(conn);

    let stored = eventually(Duration::from_secs(10), "the bytes sent are stored", || {
        let path = path.clone();
        async move {
            let h = head(a, &path).await?;
            anyhow::ensure!(h.status == 200, "HEAD {}", h.status);
            let offset = offset_of(&h)?;
            Ok((offset == sent as u64).then_some(offset))
        }
    })
    .await?;
    let r = patch(a, &path, stored as usize, &data[stored as usize..], &[]).await?;
    assert_eq!(r.status, 204, "{}", r.text());
    let got = content(a, &format!("{ROOT}/cut.bin")).await?;
    assert_eq!(sha1_hex(&got), sha1_hex(&data));
    Ok(())
}

#[tokio::test]
async fn an_upload_resumes_after_a_restart() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = server.public.clone();
    let data = pattern(2 << 20, 3);
    let half = 1 << 20;

    let r = create(
        &a,
        &format!("{ROOT}/"),
        "restart.bin",
        data.len(),
        &[],
        data[..half / 2].to_vec(),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    let path = upload_path(&a, &r)?;
    let r = patch(&a, &path, half / 2, &data[half / 2..half], &[]).await?;
    assert_eq!(r.status, 204, "{}", r.text());

    // An orderly stop, as SIGTERM asks a process for (a clean outcome is its exit code 0).
    let outcome = tokio::time::timeout(Duration::from_secs(30), server.stop()).await??;
    assert!(
        matches!(outcome, arca_runtime::Outcome::Clean),
        "{outcome:?}"
    );

    // Same data dir, same public address: the Location the client holds still works.
    let server = start(&dir, &[("proxy.http.addr", &a)]).await?;
    let h = head(&a, &path).await?;
    assert_eq!(h.status, 200, "{}", h.text());
    assert_eq!(offset_of(&h)?, half as u64);
    let r = patch(&a, &path, half, &data[half..], &[]).await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(r.header("oc-fileid").is_some());
    let got = content(&server.public, &format!("{ROOT}/restart.bin")).await?;
    assert_eq!(sha1_hex(&got), sha1_hex(&data));
    Ok(())
}

#[tokio::test]
async fn preconditions_and_quota_are_checked() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[("storage-users.personal_quota", "10000")]).await?;
    let a = &server.public;
    let file = format!("{ROOT}/doc.txt");
    let put = dav(a, "PUT", &file, &[], "original").await?;
    assert_eq!(put.status, 201);
    let etag = put.header("etag").context("ETag")?.to_owned();

    // A stale etag at creation: refused before anything is stored.
    let r = create(
        a,
        &format!("{ROOT}/"),
        "doc.txt",
        7,
        &[("if-match", "\"stale\"")],
        b"changed".to_vec(),
    )
    .await?;
    assert_eq!(r.status, 412, "{}", r.text());
    assert_eq!(content(a, &file).await?, b"original");
    assert!(upload_files(&uploads_dir(&dir)).is_empty());

    // The current etag: the upload replaces the file, keeping its id.
    let id = prop(a, &file, "oc:fileid").await?;
    let r = create(
        a,
        &format!("{ROOT}/"),
        "doc.txt",
        7,
        &[("if-match", &etag)],
        b"changed".to_vec(),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(content(a, &file).await?, b"changed");
    assert_eq!(r.header("oc-fileid"), Some(id.as_str()));
    let etag = r.header("etag").context("ETag")?.to_owned();

    // The condition holds at creation but no longer at commit: the file changed meanwhile.
    let r = create(
        a,
        &format!("{ROOT}/"),
        "doc.txt",
        5,
        &[("if-match", &etag)],
        Vec::new(),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    let path = upload_path(a, &r)?;
    assert_eq!(dav(a, "PUT", &file, &[], "other").await?.status, 204);
    let r = patch(a, &path, 0, b"later", &[]).await?;
    assert_eq!(r.status, 412, "{}", r.text());
    assert_eq!(content(a, &file).await?, b"other");
    assert!(
        upload_files(&uploads_dir(&dir)).is_empty(),
        "a doomed upload is removed"
    );

    // Quota: the announced length is checked at creation.
    let options = dav(a, "OPTIONS", &format!("{ROOT}/"), &[], "").await?;
    assert_eq!(
        options.header("tus-max-size"),
        Some("9995"),
        "10000 minus \"other\""
    );
    let r = create(a, &format!("{ROOT}/"), "big.bin", 20_000, &[], Vec::new()).await?;
    assert_eq!(r.status, 507, "{}", r.text());
    assert!(upload_files(&uploads_dir(&dir)).is_empty());
    let r = create(a, &format!("{ROOT}/"), "fits.bin", 9_995, &[], Vec::new()).await?;
    assert_eq!(r.status, 201, "{}", r.text());
    Ok(())
}

#[tokio::test]
async fn termination_removes_the_upload() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    let r = create(
        a,
        &format!("{ROOT}/"),
        "gone.bin",
        10,
        &[],
        b"12345".to_vec(),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    let path = upload_path(a, &r)?;
    assert_eq!(
        upload_files(&uploads_dir(&dir)).len(),
        1,
        "the first chunk's part"
    );

    let r = send(a, "DELETE", &path, &[("tus-resumable", "1.0.0")], "").await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(upload_files(&uploads_dir(&dir)).is_empty());
    assert_eq!(head(a, &path).await?.status, 404);
    assert_eq!(patch(a, &path, 5, b"67890", &[]).await?.status, 404);
    assert_eq!(
        send(a, "DELETE", &path, &[("tus-resumable", "1.0.0")], "")
            .await?
            .status,
        404
    );
    assert_eq!(
        dav(a, "GET", &format!("{ROOT}/gone.bin"), &[], "")
            .await?
            .status,
        404
    );
    Ok(())
}

#[tokio::test]
async fn abandoned_uploads_expire() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[("storage-users.uploads.expiration", "4s")]).await?;
    let a = &server.public;
    let r = create(
        a,
        &format!("{ROOT}/"),
        "abandoned.bin",
        10,
        &[],
        b"12345".to_vec(),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    let path = upload_path(a, &r)?;
    let expires: u64 = r
        .header("upload-expires")
        .context("Upload-Expires")?
        .parse()?;
    assert!(expires <= now_secs() + 5, "expires {expires}");
    let uploads = uploads_dir(&dir);
    assert!(
        !upload_files(&uploads).is_empty(),
        "the first chunk is stored"
    );

    eventually(
        Duration::from_secs(30),
        "the abandoned bytes are removed",
        || {
            let left = upload_files(&uploads);
            async move { Ok(left.is_empty().then_some(())) }
        },
    )
    .await?;
    assert_eq!(head(a, &path).await?.status, 404);
    Ok(())
}

/// The Python script that drives tuspy: `partial` uploads two chunks and stops, `resume`
/// picks the stored URL up and finishes; each prints the offset it started from.
const TUSPY_SCRIPT: &str = r#"
import sys
from tusclient import client
from tusclient.storage import filestorage

url, auth, path, store, mode = sys.argv[1:6]
tus = client.TusClient(url, headers={"Authorization": auth})
uploader = tus.uploader(
    path,
    chunk_size=1 << 20,
    metadata={"filename": "tuspy/big.bin"},
    store_url=True,
    url_storage=filestorage.FileStorage(store),
    upload_checksum=True,
)
print("start", uploader.offset, flush=True)
if mode == "partial":
    uploader.upload_chunk()
    uploader.upload_chunk()
else:
    uploader.upload()
print("end", uploader.offset, uploader.url, flush=True)
"#;

async fn tuspy(dir: &TempDir, args: &[&str]) -> anyhow::Result<Vec<String>> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    anyhow::ensure!(
        python.exists(),
        "{} missing: `make deps` installs tuspy into .venv",
        python.display()
    );
    let script = dir.join("tuspy_upload.py");
    std::fs::write(&script, TUSPY_SCRIPT)?;
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&python)
            .arg(&script)
            .args(args)
            .output(),
    )
    .await
    .context("tuspy did not finish within 120 s")??;
    anyhow::ensure!(
        out.status.success(),
        "tuspy {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

#[tokio::test]
async fn tuspy_uploads_in_chunks_and_resumes() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = &server.public;
    assert_eq!(
        dav(a, "MKCOL", &format!("{ROOT}/tuspy"), &[], "")
            .await?
            .status,
        201
    );
    let data = pattern(5 << 20, 4);
    let local = dir.join("big.bin");
    std::fs::write(&local, &data)?;
    let url = format!("http://{a}{ROOT}/");
    let store = dir.join("tuspy-urls.json");
    let args = |mode: &'static str| -> Vec<String> {
        vec![
            url.clone(),
            AUTH.to_owned(),
            local.display().to_string(),
            store.display().to_string(),
            mode.to_owned(),
        ]
    };

    let first = args("partial");
    let out = tuspy(&dir, &first.iter().map(String::as_str).collect::<Vec<_>>()).await?;
    assert_eq!(out.first().map(String::as_str), Some("start 0"), "{out:?}");
    assert!(
        out.last().is_some_and(|l| l.starts_with("end 2097152 ")),
        "{out:?}"
    );
    assert_eq!(
        dav(a, "GET", &format!("{ROOT}/tuspy/big.bin"), &[], "")
            .await?
            .status,
        404
    );

    let second = args("resume");
    let out = tuspy(&dir, &second.iter().map(String::as_str).collect::<Vec<_>>()).await?;
    assert_eq!(
        out.first().map(String::as_str),
        Some("start 2097152"),
        "the second run resumes from the stored URL: {out:?}"
    );
    assert!(
        out.last().is_some_and(|l| l.starts_with("end 5242880 ")),
        "{out:?}"
    );

    let got = content(a, &format!("{ROOT}/tuspy/big.bin")).await?;
    assert_eq!(sha1_hex(&got), sha1_hex(&data));
    let checksums = prop(a, &format!("{ROOT}/tuspy/big.bin"), "oc:checksums").await?;
    assert!(checksums.contains(&sha1_hex(&data)), "{checksums}");
    Ok(())
}
