//! Undo on the wire, in one in-process deployment: the trash bin and versions as oCIS clients
//! (ownCloud Web, the desktop client) reach them. Every status the wire promises is checked,
//! bytes are compared after every GET, and what is purged or expires gives its blob bytes back
//! on disk.

mod sharing_env;

use std::path::Path;
use std::time::Duration;

use anyhow::ensure;
use arca_tests::xml::{DavResponse as Entry, multistatus as entries};
use arca_tests::{TempDir, eventually};
use sharing_env::*;

/// PROPFIND Depth 1 of `path` as `user` with an allprop body: its entries (207 required).
async fn list(env: &Env, user: &str, path: &str) -> anyhow::Result<Vec<Entry>> {
    let r = env
        .req(user, "PROPFIND", path, &[("depth", "1")], "")
        .await?;
    ensure!(
        r.status == 207,
        "PROPFIND {path}: {} {}",
        r.status,
        r.text()
    );
    entries(&r.text())
}

/// The items of `user`'s personal trash (the root's own entry left out).
async fn trash_items(env: &Env, user: &str) -> anyhow::Result<Vec<Entry>> {
    let root = format!("/remote.php/dav/trash-bin/{user}/");
    let mut all = list(env, user, &root).await?;
    ensure!(
        all.first().is_some_and(|e| e.href == root && e.collection),
        "the trash root comes first, as a collection: {all:?}"
    );
    all.remove(0);
    Ok(all)
}

/// The trash key in an item's href (`…/trash-bin/USER/KEY[/]`).
fn key_of(e: &Entry) -> String {
    e.href
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned()
}

async fn get_bytes(env: &Env, user: &str, path: &str) -> anyhow::Result<(u16, Vec<u8>)> {
    let r = env.req(user, "GET", path, &[], "").await?;
    Ok((r.status, r.body.to_vec()))
}

/// A body of `n` bytes that differs per `seed`.
fn body(seed: u8, n: usize) -> String {
    (0..n)
        .map(|i| char::from(b'a' + ((i as u8).wrapping_mul(7).wrapping_add(seed) % 26)))
        .collect()
}

async fn put(env: &Env, user: &str, path: &str, content: &str) -> anyhow::Result<()> {
    let status = env.put(user, &files(user, path), content).await?;
    ensure!(status == 201 || status == 204, "PUT {path}: {status}");
    Ok(())
}

async fn expect_content(env: &Env, user: &str, path: &str, content: &str) -> anyhow::Result<()> {
    let (status, got) = get_bytes(env, user, &files(user, path)).await?;
    ensure!(status == 200, "GET {path}: {status}");
    ensure!(
        got == content.as_bytes(),
        "GET {path}: {} bytes, not the {} written",
        got.len(),
        content.len()
    );
    Ok(())
}

/// Bytes of the regular files under `dir` (local blobs).
fn disk_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in read.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

#[tokio::test]
async fn a_deleted_folder_is_listed_browsed_restored_and_purged() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    env.user("bob").await?;
    let a = body(1, 5000);
    let b = body(2, 70_000);
    let mk = env
        .req("alice", "MKCOL", &files("alice", "/docs"), &[], "")
        .await?;
    ensure!(mk.status == 201, "MKCOL {}", mk.status);
    let mk = env
        .req("alice", "MKCOL", &files("alice", "/docs/sub"), &[], "")
        .await?;
    ensure!(mk.status == 201, "MKCOL {}", mk.status);
    put(&env, "alice", "/docs/a.txt", &a).await?;
    put(&env, "alice", "/docs/sub/b.bin", &b).await?;

    let del = env
        .req("alice", "DELETE", &files("alice", "/docs"), &[], "")
        .await?;
    ensure!(del.status == 204, "DELETE {}", del.status);
    let (status, _) = get_bytes(&env, "alice", &files("alice", "/docs/a.txt")).await?;
    ensure!(status == 404, "gone from the tree: {status}");

    // Listed with the properties ownCloud Web reads.
    let items = trash_items(&env, "alice").await?;
    ensure!(items.len() == 1, "one item: {items:?}");
    let item = &items[0];
    let p = &item.props;
    assert_eq!(p["oc:trashbin-original-filename"], "docs");
    assert_eq!(
        p["oc:trashbin-original-location"], "docs",
        "no leading slash"
    );
    assert!(item.collection, "a folder: {item:?}");
    assert_eq!(p["oc:size"], (a.len() + b.len()).to_string());
    let stamp: i64 = p["oc:trashbin-delete-timestamp"].parse()?;
    assert!(
        (now_secs() as i64 - stamp).abs() < 60,
        "deleted just now: {stamp}"
    );
    assert!(p["oc:trashbin-delete-datetime"].ends_with(" GMT"), "{p:?}");
    assert!(p["oc:spaceid"].starts_with("storage-users$"), "{p:?}");
    let key = key_of(item);

    // Depth infinity is refused; inside a removed folder can be browsed.
    let inf = env
        .req(
            "alice",
            "PROPFIND",
            "/remote.php/dav/trash-bin/alice/",
            &[("depth", "infinity")],
            "",
        )
        .await?;
    assert_eq!(inf.status, 400, "{}", inf.text());
    let inside = list(
        &env,
        "alice",
        &format!("/remote.php/dav/trash-bin/alice/{key}/sub/"),
    )
    .await?;
    let names: Vec<&str> = inside
        .iter()
        .map(|e| e.props["oc:trashbin-original-filename"].as_str())
        .collect();
    assert_eq!(names, ["sub", "b.bin"], "{inside:?}");
    assert_eq!(
        inside[1].props["oc:trashbin-original-location"],
        "docs/sub/b.bin"
    );
    assert_eq!(inside[1].props["d:getcontentlength"], b.len().to_string());

    // Nobody else sees it: not bob by the user URL, nor by the space URL.
    let theirs = env
        .req(
            "bob",
            "PROPFIND",
            "/remote.php/dav/trash-bin/alice/",
            &[("depth", "1")],
            "",
        )
        .await?;
    assert_eq!(theirs.status, 404, "{}", theirs.text());
    let space = &p["oc:spaceid"];
    let by_space = env
        .req(
            "bob",
            "PROPFIND",
            &format!("/remote.php/dav/spaces/trash-bin/{space}/"),
            &[("depth", "1")],
            "",
        )
        .await?;
    assert_eq!(by_space.status, 404, "{}", by_space.text());
    let restore_theirs = env
        .req(
            "bob",
            "MOVE",
            &format!("/remote.php/dav/trash-bin/alice/{key}"),
            &[("destination", &files("bob", "/stolen"))],
            "",
        )
        .await?;
    assert_eq!(restore_theirs.status, 404);
    // The owner reaches the same trash by the space URL (ownCloud Web's way).
    let mine = list(
        &env,
        "alice",
        &format!("/remote.php/dav/spaces/trash-bin/{space}/"),
    )
    .await?;
    assert_eq!(mine.len(), 2, "{mine:?}");

    // Restore: 201, and every byte is back.
    let dest = files("alice", "/docs");
    let r = env
        .req(
            "alice",
            "MOVE",
            &format!("/remote.php/dav/trash-bin/alice/{key}"),
            &[("destination", &dest)],
            "",
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(r.header("oc-fileid").is_some() && r.header("etag").is_some());
    expect_content(&env, "alice", "/docs/a.txt", &a).await?;
    expect_content(&env, "alice", "/docs/sub/b.bin", &b).await?;
    assert!(trash_items(&env, "alice").await?.is_empty());

    // A restore never overwrites silently: 412 without Overwrite or with F; T replaces
    // (204) and what it replaced is in the trash itself.
    env.req("alice", "DELETE", &files("alice", "/docs/a.txt"), &[], "")
        .await?;
    let newer = body(3, 800);
    put(&env, "alice", "/docs/a.txt", &newer).await?;
    let items = trash_items(&env, "alice").await?;
    let key = key_of(&items[0]);
    let url = format!("/remote.php/dav/trash-bin/alice/{key}");
    let dest = files("alice", "/docs/a.txt");
    for headers in [
        vec![("destination", dest.as_str())],
        vec![("destination", dest.as_str()), ("overwrite", "F")],
    ] {
        let r = env.req("alice", "MOVE", &url, &headers, "").await?;
        assert_eq!(r.status, 412, "{headers:?}: {}", r.text());
        expect_content(&env, "alice", "/docs/a.txt", &newer).await?;
    }
    let r = env
        .req(
            "alice",
            "MOVE",
            &url,
            &[("destination", &dest), ("overwrite", "T")],
            "",
        )
        .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    expect_content(&env, "alice", "/docs/a.txt", &a).await?;
    let items = trash_items(&env, "alice").await?;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(
        items[0].props["d:getcontentlength"],
        newer.len().to_string()
    );

    // Restoring into a parent that is gone is 409 (as MOVE); to another name works.
    let key = key_of(&items[0]);
    let url = format!("/remote.php/dav/trash-bin/alice/{key}");
    let r = env
        .req(
            "alice",
            "MOVE",
            &url,
            &[("destination", &files("alice", "/nowhere/a.txt"))],
            "",
        )
        .await?;
    assert_eq!(r.status, 409, "{}", r.text());
    let r = env
        .req(
            "alice",
            "MOVE",
            &url,
            &[("destination", &files("alice", "/docs/a%20(newer).txt"))],
            "",
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    expect_content(&env, "alice", "/docs/a%20(newer).txt", &newer).await?;

    // Purge: one key (204; again 404), then the whole trash.
    for f in ["/docs/a.txt", "/docs/sub"] {
        env.req("alice", "DELETE", &files("alice", f), &[], "")
            .await?;
    }
    let items = trash_items(&env, "alice").await?;
    assert_eq!(items.len(), 2);
    let url = format!("/remote.php/dav/trash-bin/alice/{}", key_of(&items[0]));
    assert_eq!(env.req("alice", "DELETE", &url, &[], "").await?.status, 204);
    assert_eq!(env.req("alice", "DELETE", &url, &[], "").await?.status, 404);
    assert_eq!(
        env.req(
            "alice",
            "DELETE",
            "/remote.php/dav/trash-bin/alice/nope",
            &[],
            ""
        )
        .await?
        .status,
        404
    );
    assert_eq!(trash_items(&env, "alice").await?.len(), 1);
    let all = env
        .req(
            "alice",
            "DELETE",
            "/remote.php/dav/trash-bin/alice/",
            &[],
            "",
        )
        .await?;
    assert_eq!(all.status, 204);
    assert!(trash_items(&env, "alice").await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn purge_and_expiry_give_the_blob_bytes_back() -> anyhow::Result<()> {
    let dir = TempDir::new();
    // A short retention: the expiry job then runs every second.
    let env = Env::start(&dir, &[("storage-users.trash.retention", "3s")]).await?;
    env.user("alice").await?;
    let blobs = dir.join("data/storage-users/blobs");
    let big = body(4, 3 << 20);
    put(&env, "alice", "/big.bin", &big).await?;
    let before = disk_bytes(&blobs);
    ensure!(before >= big.len() as u64, "the blob is on disk: {before}");

    // In the trash the bytes stay (it can be restored); once expired they are gone.
    env.req("alice", "DELETE", &files("alice", "/big.bin"), &[], "")
        .await?;
    assert_eq!(trash_items(&env, "alice").await?.len(), 1);
    assert!(disk_bytes(&blobs) >= big.len() as u64);
    eventually(
        Duration::from_secs(30),
        "the trash item expires",
        || async { Ok(trash_items(&env, "alice").await?.is_empty().then_some(())) },
    )
    .await?;
    // The job deletes the blob right after the transaction that took the item off the list
    // (never before: a failed commit must leave it restorable), so the bytes may lag it by a
    // moment.
    eventually(
        Duration::from_secs(10),
        "expiry frees the blob's bytes",
        || async {
            let after = disk_bytes(&blobs);
            Ok((after + big.len() as u64 <= before).then_some(()))
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn purging_by_hand_frees_the_bytes_at_once() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    let blobs = dir.join("data/storage-users/blobs");
    let big = body(5, 2 << 20);
    put(&env, "alice", "/big.bin", &big).await?;
    env.req("alice", "DELETE", &files("alice", "/big.bin"), &[], "")
        .await?;
    let before = disk_bytes(&blobs);
    let items = trash_items(&env, "alice").await?;
    let url = format!("/remote.php/dav/trash-bin/alice/{}", key_of(&items[0]));
    assert_eq!(env.req("alice", "DELETE", &url, &[], "").await?.status, 204);
    let after = disk_bytes(&blobs);
    ensure!(
        after + big.len() as u64 <= before,
        "purge frees the blob: {before} bytes before, {after} after"
    );
    Ok(())
}

/// The file id of `path` (`oc:fileid`).
async fn file_id(env: &Env, user: &str, path: &str) -> anyhow::Result<String> {
    let id = prop(env, user, &files(user, path), "oc:fileid").await?;
    ensure!(!id.is_empty(), "no oc:fileid for {path}");
    Ok(id)
}

/// The versions of a file as `user` sees them: (href, size) newest first.
async fn versions(env: &Env, user: &str, id: &str) -> anyhow::Result<(u16, Vec<Entry>)> {
    let url = format!("/remote.php/dav/meta/{id}/v");
    // ownCloud Web's request: an empty prop element.
    let r = env
        .req(
            user,
            "PROPFIND",
            &url,
            &[("depth", "1")],
            r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:"><d:prop/></d:propfind>"#,
        )
        .await?;
    if r.status != 207 {
        return Ok((r.status, Vec::new()));
    }
    let mut all = entries(&r.text())?;
    ensure!(
        !all.is_empty() && all[0].collection,
        "the v collection first: {all:?}"
    );
    all.remove(0);
    Ok((207, all))
}

#[tokio::test]
async fn overwrites_keep_versions_that_are_read_and_restored() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    env.user("bob").await?;
    env.user("carol").await?;
    let v1 = body(6, 1200);
    let v2 = body(7, 90_000);
    let v3 = body(8, 33);
    for v in [&v1, &v2, &v3] {
        put(&env, "alice", "/f.txt", v).await?;
    }
    let id = file_id(&env, "alice", "/f.txt").await?;
    let (status, list) = versions(&env, "alice", &id).await?;
    assert_eq!(status, 207);
    let sizes: Vec<&str> = list
        .iter()
        .map(|e| e.props["d:getcontentlength"].as_str())
        .collect();
    assert_eq!(
        sizes,
        [v2.len().to_string(), v1.len().to_string()],
        "newest first"
    );
    for (entry, content) in list.iter().zip([&v2, &v1]) {
        assert!(
            entry.props.contains_key("d:getetag") && entry.props.contains_key("d:getlastmodified")
        );
        let (status, got) = get_bytes(&env, "alice", &entry.href).await?;
        assert_eq!(status, 200, "GET {}", entry.href);
        assert!(got == content.as_bytes(), "a version's bytes");
        let head = env.req("alice", "HEAD", &entry.href, &[], "").await?;
        assert_eq!(
            head.header("content-length"),
            Some(content.len().to_string().as_str())
        );
    }

    // Where the file is, for the user (ownCloud Web's versions panel asks).
    let meta = env
        .req("alice", "PROPFIND", &format!("/remote.php/dav/meta/{id}"), &[("depth", "0")],
            r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><oc:meta-path-for-user/></d:prop></d:propfind>"#)
        .await?;
    assert_eq!(meta.status, 207, "{}", meta.text());
    assert_eq!(
        entries(&meta.text())?[0].props["oc:meta-path-for-user"],
        "/f.txt"
    );

    // Restore v1 as ownCloud Web does (COPY, Overwrite: F): 204, the content is v1, and v3
    // (the content it replaced) is a version now.
    let v1_href = list[1].href.clone();
    let r = env
        .req(
            "alice",
            "COPY",
            &v1_href,
            &[
                ("destination", &files("alice", "/f.txt")),
                ("overwrite", "F"),
            ],
            "",
        )
        .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    expect_content(&env, "alice", "/f.txt", &v1).await?;
    let (_, list) = versions(&env, "alice", &id).await?;
    let sizes: Vec<&str> = list
        .iter()
        .map(|e| e.props["d:getcontentlength"].as_str())
        .collect();
    assert_eq!(sizes, [v3.len().to_string(), v2.len().to_string()]);
    // A version restores onto its own file only.
    put(&env, "alice", "/other.txt", "other").await?;
    let r = env
        .req(
            "alice",
            "COPY",
            &list[0].href,
            &[("destination", &files("alice", "/other.txt"))],
            "",
        )
        .await?;
    assert_eq!(r.status, 409, "{}", r.text());

    // Share it: a viewer sees no versions and reads none; an editor sees and restores them.
    for (who, perms) in [("bob", 1), ("carol", 3)] {
        let (status, v) = env
            .ocs(
                "alice",
                "POST",
                "/shares",
                &format!("path=/f.txt&shareType=0&shareWith={who}&permissions={perms}"),
            )
            .await?;
        ensure!(status == 200, "share with {who}: {v}");
    }
    let (status, seen) = versions(&env, "bob", &id).await?;
    assert_eq!((status, seen.len()), (207, 0), "a viewer sees none");
    let (status, _) = get_bytes(&env, "bob", &list[0].href).await?;
    assert_eq!(status, 404, "a viewer reads none");
    let (status, seen) = versions(&env, "carol", &id).await?;
    assert_eq!((status, seen.len()), (207, 2), "an editor sees them");
    let (status, got) = get_bytes(&env, "carol", &seen[0].href).await?;
    assert_eq!(status, 200);
    assert!(got == v3.as_bytes());
    // Someone with no share at all: the file does not exist for them.
    let stranger = env
        .req(
            "admin",
            "PROPFIND",
            &format!("/remote.php/dav/meta/{id}/v"),
            &[("depth", "1")],
            "",
        )
        .await?;
    assert_eq!(stranger.status, 404, "{}", stranger.text());
    Ok(())
}

#[tokio::test]
async fn nextcloud_clients_reach_the_same_trash_and_versions() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    env.user("bob").await?;
    let x = body(9, 4000);
    let newer_x = body(10, 10);
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/n"), &[], "")
            .await?
            .status,
        201
    );
    put(&env, "alice", "/n/x.txt", &x).await?;
    env.req("alice", "DELETE", &files("alice", "/n"), &[], "")
        .await?;

    let root = "/remote.php/dav/trashbin/alice/trash/";
    let all = list(&env, "alice", root).await?;
    assert_eq!(all.len(), 2, "{all:?}");
    let item = &all[1];
    assert_eq!(item.props["x:trashbin-filename"], "n");
    assert_eq!(item.props["x:trashbin-original-location"], "n");
    let segment = key_of(item);
    let stamp: i64 = segment.strip_prefix("n.d").unwrap_or_default().parse()?;
    assert_eq!(item.props["x:trashbin-deletion-time"], stamp.to_string());
    let inside = list(&env, "alice", &format!("{root}{segment}/")).await?;
    let names: Vec<&str> = inside
        .iter()
        .map(|e| e.props["x:trashbin-filename"].as_str())
        .collect();
    assert_eq!(names, ["n", "x.txt"]);
    // Not bob's to see.
    let theirs = env
        .req("bob", "PROPFIND", root, &[("depth", "1")], "")
        .await?;
    assert_eq!(theirs.status, 404);

    // Restore into the restore folder: where it was.
    let restore = format!("/remote.php/dav/trashbin/alice/restore/{segment}");
    let r = env
        .req(
            "alice",
            "MOVE",
            &format!("{root}{segment}"),
            &[("destination", &restore)],
            "",
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    expect_content(&env, "alice", "/n/x.txt", &x).await?;

    // Its name taken meanwhile: it comes back beside, never over.
    env.req("alice", "DELETE", &files("alice", "/n/x.txt"), &[], "")
        .await?;
    put(&env, "alice", "/n/x.txt", &newer_x).await?;
    let segment = key_of(&list(&env, "alice", root).await?[1]);
    let r = env
        .req(
            "alice",
            "MOVE",
            &format!("{root}{segment}"),
            &[(
                "destination",
                &format!("/remote.php/dav/trashbin/alice/restore/{segment}"),
            )],
            "",
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    expect_content(&env, "alice", "/n/x.txt", &newer_x).await?;
    expect_content(&env, "alice", "/n/x%20(2).txt", &x).await?;

    // Emptying: DELETE of the trash folder.
    env.req("alice", "DELETE", &files("alice", "/n"), &[], "")
        .await?;
    assert_eq!(
        env.req("alice", "DELETE", root.trim_end_matches('/'), &[], "")
            .await?
            .status,
        204
    );
    assert_eq!(list(&env, "alice", root).await?.len(), 1);

    // Versions: list, read, label, restore, delete.
    let y1 = body(11, 3000);
    let y2 = body(12, 300);
    put(&env, "alice", "/y.txt", &y1).await?;
    put(&env, "alice", "/y.txt", &y2).await?;
    let id = file_id(&env, "alice", "/y.txt").await?;
    let url = format!("/remote.php/dav/versions/alice/versions/{id}");
    let found = list(&env, "alice", &url).await?;
    assert_eq!(found.len(), 2, "{found:?}");
    let v = &found[1];
    let (status, got) = get_bytes(&env, "alice", &v.href).await?;
    assert_eq!(status, 200);
    assert!(got == y1.as_bytes(), "the version's bytes");
    let r = env
        .req(
            "alice",
            "PROPPATCH",
            &v.href,
            &[],
            r#"<?xml version="1.0"?><d:propertyupdate xmlns:d="DAV:" xmlns:nc="http://nextcloud.org/ns"><d:set><d:prop><nc:version-label>before the edit</nc:version-label></d:prop></d:set></d:propertyupdate>"#,
        )
        .await?;
    assert_eq!(r.status, 207, "{}", r.text());
    let found = list(&env, "alice", &url).await?;
    assert_eq!(found[1].props["x:version-label"], "before the edit");
    assert_eq!(
        env.req("bob", "PROPFIND", &url, &[("depth", "1")], "")
            .await?
            .status,
        404
    );
    let r = env
        .req(
            "alice",
            "MOVE",
            &found[1].href,
            &[(
                "destination",
                "/remote.php/dav/versions/alice/restore/target",
            )],
            "",
        )
        .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    expect_content(&env, "alice", "/y.txt", &y1).await?;
    let found = list(&env, "alice", &url).await?;
    assert_eq!(found.len(), 2, "y2 is the version now: {found:?}");
    assert_eq!(found[1].props["d:getcontentlength"], y2.len().to_string());
    assert_eq!(
        env.req("alice", "DELETE", &found[1].href, &[], "")
            .await?
            .status,
        204
    );
    assert_eq!(list(&env, "alice", &url).await?.len(), 1);
    Ok(())
}

/// `arca trash ARGS…` against the deployment at `addr`, the admin's password in the
/// environment as a server's would be; its exit code, stdout and stderr.
async fn trash_cli(addr: &str, args: &[&str]) -> anyhow::Result<(Option<i32>, String, String)> {
    let mut cmd = tokio::process::Command::from(arca_tests::command(arca_tests::arca_bin()));
    cmd.arg("trash")
        .args(args)
        .arg("--set")
        .arg(format!("proxy.http.addr={addr}"))
        .env("ARCA_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .map_err(|_| anyhow::anyhow!("arca trash did not finish within 120s"))??;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn one_command_undoes_a_mass_delete_into_renamed_and_removed_folders() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    env.user("bob").await?;
    for d in ["/proj", "/proj/a", "/proj/b", "/proj/b/deep"] {
        assert_eq!(
            env.req("alice", "MKCOL", &files("alice", d), &[], "")
                .await?
                .status,
            201
        );
    }
    let mut tree = Vec::new();
    for i in 0..120usize {
        let folder = ["/proj/a", "/proj/b", "/proj/b/deep", "/proj"][i % 4];
        let path = format!("{folder}/f{i}.dat");
        let content = body(i as u8, 1 + (i * 997) % 20_000);
        put(&env, "alice", &path, &content).await?;
        tree.push((path, content));
    }
    // Overwrites of the same names: the restored bytes are the last ones written.
    for (i, (path, content)) in tree.iter_mut().enumerate().take(10) {
        *content = body(200 + i as u8, 3000 + i);
        put(&env, "alice", path, content).await?;
    }
    // A client removes file by file in /proj/a, then whole folders; the user renames what
    // was /proj/a's parent meanwhile, and removes the rest.
    for (path, _) in tree.iter().filter(|(p, _)| p.starts_with("/proj/a/")) {
        let r = env
            .req("alice", "DELETE", &files("alice", path), &[], "")
            .await?;
        ensure!(r.status == 204, "DELETE {path}: {}", r.status);
    }
    assert_eq!(
        env.req("alice", "DELETE", &files("alice", "/proj/b"), &[], "")
            .await?
            .status,
        204
    );
    let r = env
        .req(
            "alice",
            "MOVE",
            &files("alice", "/proj"),
            &[("destination", &files("alice", "/renamed"))],
            "",
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    let loose: Vec<&String> = tree
        .iter()
        .map(|(p, _)| p)
        .filter(|p| p.matches('/').count() == 2)
        .collect();
    for path in &loose {
        let moved = path.replacen("/proj", "/renamed", 1);
        assert_eq!(
            env.req("alice", "DELETE", &files("alice", &moved), &[], "")
                .await?
                .status,
            204
        );
    }
    let before = trash_items(&env, "alice").await?.len();
    assert_eq!(
        before,
        30 + 1 + 30,
        "30 files of a, folder b, 30 loose files"
    );

    // Bad input gets one clear line and no change.
    let (code, _, err) = trash_cli(
        env.addr(),
        &["restore", "--user", "alice", "--since", "soon"],
    )
    .await?;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--since"), "{err}");
    let (code, _, err) = trash_cli(
        env.addr(),
        &["restore", "--user", "alice", "--conflict", "merge"],
    )
    .await?;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("keep-both"), "{err}");
    assert_eq!(trash_items(&env, "alice").await?.len(), before);
    // Only admins restore another user's trash over HTTP.
    let r = env
        .req(
            "bob",
            "POST",
            "/api/v1/trash/restore",
            &[("content-type", "application/json")],
            r#"{"user":"alice"}"#,
        )
        .await?;
    assert_eq!(r.status, 403, "{}", r.text());

    // The loose files went to /renamed, yet come back where they were removed from; what was
    // removed from /proj comes back to a /proj made anew.
    let (code, out, err) =
        trash_cli(env.addr(), &["restore", "--user", "alice", "--since", "1h"]).await?;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.starts_with("restored 61 of 61 items (120 files"),
        "{out}"
    );
    for (path, content) in &tree {
        let now_at = if path.starts_with("/proj/a/") || path.starts_with("/proj/b/") {
            path.clone()
        } else {
            path.replacen("/proj", "/renamed", 1)
        };
        expect_content(&env, "alice", &now_at, content).await?;
    }
    assert!(trash_items(&env, "alice").await?.is_empty());
    // Again: nothing left, nothing done twice.
    let (code, out, _) = trash_cli(env.addr(), &["restore", "--user", "alice"]).await?;
    assert_eq!(code, Some(0));
    assert!(out.starts_with("restored 0 of 0 items"), "{out}");
    Ok(())
}

#[tokio::test]
async fn a_clients_mass_delete_is_flagged_listed_and_restored_exactly() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[("storage-users.trash.burst.items", "50")]).await?;
    env.user("alice").await?;
    env.user("bob").await?;
    const SYNC: &str = "Mozilla/5.0 (Linux) mirall/5.3.2 (owncloudcmd)";
    const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0";
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/sync"), &[], "")
            .await?
            .status,
        201
    );
    let mut tree = Vec::new();
    for i in 0..80usize {
        let path = format!("/sync/f{i}.bin");
        let content = body(i as u8, 100 + i * 37);
        put(&env, "alice", &path, &content).await?;
        tree.push((path, content));
    }
    for name in ["/by-hand-1.txt", "/by-hand-2.txt"] {
        put(&env, "alice", name, "kept in the trash").await?;
    }
    // A person removes two files in the browser; the sync client removes eighty.
    for name in ["/by-hand-1.txt", "/by-hand-2.txt"] {
        let r = env
            .req(
                "alice",
                "DELETE",
                &files("alice", name),
                &[("user-agent", BROWSER)],
                "",
            )
            .await?;
        assert_eq!(r.status, 204);
    }
    for (path, _) in &tree {
        let r = env
            .req(
                "alice",
                "DELETE",
                &files("alice", path),
                &[("user-agent", SYNC)],
                "",
            )
            .await?;
        assert_eq!(r.status, 204, "DELETE {path}");
    }
    let r = env
        .req("alice", "GET", "/api/v1/trash/bursts", &[], "")
        .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    let listed = r.json()?;
    let bursts = listed["value"].as_array().cloned().unwrap_or_default();
    assert_eq!(bursts.len(), 1, "one burst, the client's: {listed}");
    let b = &bursts[0];
    assert_eq!(b["user"], "alice");
    assert_eq!(b["client"], SYNC);
    assert_eq!(
        (
            b["items"].as_u64(),
            b["files"].as_u64(),
            b["in_trash"].as_u64()
        ),
        (Some(80), Some(80), Some(80))
    );
    assert!(b["first"].as_i64() <= b["last"].as_i64());
    // Not bob's to see or restore.
    let theirs = env
        .req("bob", "GET", "/api/v1/trash/bursts", &[], "")
        .await?;
    assert_eq!(theirs.json()?["value"], serde_json::json!([]));
    let id = b["id"].as_str().unwrap_or_default();
    let url = format!("/api/v1/trash/bursts/{id}/restore");
    assert_eq!(env.req("bob", "POST", &url, &[], "").await?.status, 404);

    // One call brings back exactly the burst: every file byte-exact, the hand-removed two
    // stay in the trash.
    let r = env.req("alice", "POST", &url, &[], "").await?;
    assert_eq!(r.status, 200, "{}", r.text());
    let t = r.json()?;
    assert_eq!(
        (t["restored"].as_u64(), t["files"].as_u64()),
        (Some(80), Some(80)),
        "{t}"
    );
    for (path, content) in &tree {
        expect_content(&env, "alice", path, content).await?;
    }
    let left: Vec<String> = trash_items(&env, "alice")
        .await?
        .iter()
        .map(|e| e.props["oc:trashbin-original-filename"].clone())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|n| n.starts_with("by-hand")), "{left:?}");
    // Still listed, with nothing of it left in the trash.
    let r = env
        .req("alice", "GET", "/api/v1/trash/bursts", &[], "")
        .await?;
    let listed = r.json()?;
    assert_eq!(listed["value"][0]["id"], *id, "{listed}");
    assert_eq!(listed["value"][0]["in_trash"], 0, "{listed}");
    let r = env
        .req(
            "alice",
            "POST",
            "/api/v1/trash/bursts/nope/restore",
            &[],
            "",
        )
        .await?;
    assert_eq!(r.status, 404, "{}", r.text());
    Ok(())
}

/// A trash whose listing is larger than a gRPC message may be by default (4 MiB: about 7,000
/// items of short names, 5,000 of long ones) lists whole in one PROPFIND: every item once.
#[tokio::test]
async fn a_trash_larger_than_a_default_grpc_message_lists_whole() -> anyhow::Result<()> {
    use futures::{StreamExt as _, TryStreamExt as _};
    const ITEMS: usize = 6_000;
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    let name = |i: usize| format!("{i:05}-{}", "a-long-file-name-".repeat(6));
    // Sixteen at a time, as a sync client's parallel jobs.
    futures::stream::iter(0..ITEMS)
        .map(|i| {
            let (env, name) = (&env, name(i));
            async move {
                put(env, "alice", &format!("/{name}"), &i.to_string()).await?;
                let r = env
                    .req(
                        "alice",
                        "DELETE",
                        &files("alice", &format!("/{name}")),
                        &[],
                        "",
                    )
                    .await?;
                ensure!(r.status == 204, "DELETE {name}: {}", r.status);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    let items = trash_items(&env, "alice").await?;
    let names: std::collections::BTreeSet<String> = items
        .iter()
        .filter_map(|e| e.props.get("oc:trashbin-original-filename").cloned())
        .collect();
    ensure!(
        items.len() == ITEMS && names == (0..ITEMS).map(name).collect(),
        "the trash lists {} items ({} distinct names), not the {ITEMS} removed",
        items.len(),
        names.len()
    );
    Ok(())
}
