//! Search (`REPORT` `oc:search-files`) in one in-process deployment (every service, the real
//! boot path, the proxy on a real port): names and contents found, the answer's shape and
//! `Content-Range`, bad queries 400, and rights checked at query time — another user's files
//! never found, a share found by its recipient until it is revoked, a project space's files
//! by its members until they are removed or the space is disabled. Without the search
//! service, search is 503 and WebDAV works; files changed while it was not running are found
//! once it runs again on the same data dir.

use std::time::Duration;

use anyhow::Context as _;
use arca_tests::{HttpResponse, InProcess, TempDir, basic, eventually, get, send};
use serde_json::Value;

const SECRET: &str = "search-secret";
/// The crawler's rounds over every space in these tests: never after the first, so that
/// every change below is found through storage-users' hints alone (the default is 10 s).
const INTERVAL: (&str, &str) = ("search.interval", "1h");
/// Rounds for the test that needs them (a reindex is seen at the next round).
const ROUNDS: (&str, &str) = ("search.interval", "100ms");
/// How long a change may take to be found (the bound of a wait, not a speed).
const WITHIN: Duration = Duration::from_secs(20);
const JSON: (&str, &str) = ("content-type", "application/json");
const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

fn admin() -> String {
    basic("admin", SECRET)
}

fn auth(value: &str) -> (&str, &str) {
    ("authorization", value)
}

async fn start(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<InProcess> {
    let mut all = vec![INTERVAL];
    all.extend_from_slice(settings);
    InProcess::ready(dir, SECRET, &all).await
}

/// Creates a user `name` with password `NAME-pass`; its id and its Basic credentials.
async fn user(a: &str, name: &str) -> anyhow::Result<(String, String)> {
    let body = serde_json::json!({
        "onPremisesSamAccountName": name,
        "displayName": name,
        "passwordProfile": {"password": format!("{name}-pass")},
    })
    .to_string();
    let r = send(
        a,
        "POST",
        "/graph/v1.0/users",
        &[auth(&admin()), JSON],
        body,
    )
    .await?;
    anyhow::ensure!(r.status == 201, "creating {name}: {}", r.text());
    let id = r.json()?["id"].as_str().context("user id")?.to_owned();
    Ok((id, basic(name, &format!("{name}-pass"))))
}

async fn put(a: &str, path: &str, who: &str, body: &str) -> anyhow::Result<()> {
    let r = send(a, "PUT", path, &[auth(who)], body.to_owned()).await?;
    anyhow::ensure!(
        r.status == 201 || r.status == 204,
        "PUT {path}: {} {}",
        r.status,
        r.text()
    );
    Ok(())
}

async fn mkcol(a: &str, path: &str, who: &str) -> anyhow::Result<()> {
    let r = send(a, "MKCOL", path, &[auth(who)], "").await?;
    anyhow::ensure!(r.status == 201, "MKCOL {path}: {} {}", r.status, r.text());
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `REPORT` `oc:search-files` at `root` as ownCloud Web sends it.
async fn report(
    a: &str,
    root: &str,
    who: &str,
    pattern: &str,
    limit: u32,
) -> anyhow::Result<HttpResponse> {
    let body = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<oc:search-files xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">
  <d:prop><oc:fileid/><oc:name/><oc:score/><d:getetag/><oc:permissions/></d:prop>
  <oc:search><oc:pattern>{}</oc:pattern><oc:limit>{limit}</oc:limit></oc:search>
</oc:search-files>"#,
        escape(pattern)
    );
    send(
        a,
        "REPORT",
        root,
        &[auth(who), ("content-type", "application/xml")],
        body,
    )
    .await
}

/// Every `<oc:name>` of a multistatus, sorted.
fn names(body: &str) -> Vec<String> {
    let mut out: Vec<String> = body
        .split("<oc:name>")
        .skip(1)
        .filter_map(|s| s.split_once("</oc:name>").map(|(n, _)| n.to_owned()))
        .collect();
    out.sort();
    out
}

/// The names a search finds for `who` (on `/remote.php/dav/spaces/`).
async fn found(a: &str, who: &str, pattern: &str) -> anyhow::Result<Vec<String>> {
    let r = report(a, "/remote.php/dav/spaces/", who, pattern, 100).await?;
    anyhow::ensure!(
        r.status == 207,
        "search {pattern}: {} {}",
        r.status,
        r.text()
    );
    Ok(names(&r.text()))
}

/// A WebDAV MOVE or COPY of `from` to `to` (paths below `who`'s files) that must succeed.
async fn transfer(a: &str, who: &str, method: &str, from: &str, to: &str) -> anyhow::Result<()> {
    let destination = format!("http://{a}/remote.php/webdav/{to}");
    let r = send(
        a,
        method,
        &format!("/remote.php/webdav/{from}"),
        &[auth(who), ("destination", destination.as_str())],
        "",
    )
    .await?;
    anyhow::ensure!(
        r.status == 201 || r.status == 204,
        "{method} {from}: {} {}",
        r.status,
        r.text()
    );
    Ok(())
}

/// Waits until searching `pattern` as `who` finds exactly `want`.
async fn until_found(a: &str, who: &str, pattern: &str, want: &[&str]) -> anyhow::Result<()> {
    let want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
    eventually(WITHIN, &format!("{pattern} finds {want:?}"), || {
        let want = want.clone();
        async move {
            let got = found(a, who, pattern).await?;
            anyhow::ensure!(got == want, "found {got:?}");
            Ok(Some(()))
        }
    })
    .await
}

#[tokio::test]
async fn names_and_contents_are_found_in_ocis_shape_on_every_root() -> anyhow::Result<()> {
    let dir = TempDir::new();
    names_and_contents(&dir, &[]).await
}

/// The same with storage-users' metadata on PostgreSQL (the index stays the search
/// service's own SQLite file).
#[tokio::test]
async fn names_and_contents_are_found_with_storage_on_postgresql() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let pg = arca_tests::Postgres::start(&dir).await?;
    names_and_contents(&dir, &[("storage-users.database", pg.url.as_str())]).await?;
    drop(pg);
    Ok(())
}

/// The same with the index in PostgreSQL (`search.database`: pg_trgm instead of FTS5, the
/// crawler under the lease, in memory here: one process).
#[tokio::test]
async fn names_and_contents_are_found_with_the_index_in_postgresql() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let pg = arca_tests::Postgres::start(&dir).await?;
    names_and_contents(&dir, &[("search.database", pg.url.as_str())]).await?;
    // Another deployment, another database.
    let url = pg.durable_database().await?;
    nextcloud_search(&TempDir::new(), &[("search.database", url.as_str())]).await?;
    drop(pg);
    Ok(())
}

async fn names_and_contents(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<()> {
    let server = start(dir, settings).await?;
    let a = server.public.as_str();
    let admin = admin();
    mkcol(a, "/remote.php/webdav/notes", &admin).await?;
    put(
        a,
        "/remote.php/webdav/notes/Report-2024.md",
        &admin,
        "the quick brown fox",
    )
    .await?;
    put(
        a,
        "/remote.php/webdav/zebra.txt",
        &admin,
        "a report inside, and a fox",
    )
    .await?;
    put(
        a,
        "/remote.php/webdav/photo.png",
        &admin,
        "not really a picture",
    )
    .await?;

    // Indexed once all three are there (the crawler may have run between two PUTs).
    until_found(
        a,
        &admin,
        "content:fox OR photo",
        &["Report-2024.md", "photo.png", "zebra.txt"],
    )
    .await?;
    assert_eq!(
        found(a, &admin, r#"name:"*report*""#).await?,
        ["Report-2024.md"]
    );
    // Content of text files; a name match ranks above a content match.
    let r = report(
        a,
        "/remote.php/dav/spaces/",
        &admin,
        "report OR content:report",
        10,
    )
    .await?;
    assert_eq!(r.status, 207, "{}", r.text());
    let body = r.text();
    let first = body.find("Report-2024.md").context("name hit")?;
    let second = body.find("zebra.txt").context("content hit")?;
    assert!(first < second, "{body}");
    assert_eq!(r.header("content-range"), Some("rows 0-1/2"));
    assert_eq!(
        found(a, &admin, r#"content:"brown fox""#).await?,
        ["Report-2024.md"]
    );
    assert_eq!(
        found(a, &admin, "content:fox AND name:*.txt").await?,
        ["zebra.txt"]
    );
    assert_eq!(found(a, &admin, "mediatype:folder").await?, ["notes"]);
    assert_eq!(found(a, &admin, "mediatype:image").await?, ["photo.png"]);
    assert_eq!(
        found(a, &admin, "mediatype:document AND mtime>2000-01-01").await?,
        ["Report-2024.md", "zebra.txt"]
    );
    assert!(found(a, &admin, "mtime<2000-01-01").await?.is_empty());
    assert_eq!(
        found(a, &admin, "size>19 AND NOT mediatype:folder").await?,
        ["photo.png", "zebra.txt"]
    );

    // The answer's shape: href under the space, ids, etag, permissions, score.
    let r = report(
        a,
        "/remote.php/dav/spaces/",
        &admin,
        "name:Report-2024.md",
        10,
    )
    .await?;
    let body = r.text();
    let space = get(a, "/graph/v1.0/me/drives", &[auth(&admin)])
        .await?
        .json()?["value"][0]["id"]
        .as_str()
        .context("drive id")?
        .to_owned();
    assert!(
        body.contains(&format!(
            "<d:href>/dav/spaces/{}/notes/Report-2024.md</d:href>",
            space.replace('$', "%24")
        )),
        "{body}"
    );
    for prop in [
        "<oc:fileid>",
        "<oc:file-parent>",
        "<oc:score>",
        "<d:getetag>",
        "<oc:permissions>RDNVWZP</oc:permissions>",
        "<d:getcontenttype>text/markdown</d:getcontenttype>",
    ] {
        assert!(body.contains(prop), "{prop} in {body}");
    }
    assert_eq!(r.header("content-range"), Some("rows 0-0/1"));
    // The limit caps the hits, not the total.
    let r = report(
        a,
        "/remote.php/dav/spaces/",
        &admin,
        "content:fox OR name:report",
        1,
    )
    .await?;
    assert_eq!(names(&r.text()).len(), 1);
    assert_eq!(r.header("content-range"), Some("rows 0-0/2"));
    // Every root answers the same search; scope narrows it.
    for root in [
        "/remote.php/webdav/".to_owned(),
        "/remote.php/dav/files/admin/".to_owned(),
        format!("/dav/spaces/{space}"),
        "/dav/spaces/".to_owned(),
    ] {
        let r = report(a, &root, &admin, "report", 10).await?;
        assert_eq!(r.status, 207, "{root}: {}", r.text());
        assert_eq!(names(&r.text()), ["Report-2024.md"], "{root}");
    }
    // Scope: below a folder (its id, as the folder search gives it), or another space.
    let folder = report(a, "/remote.php/dav/spaces/", &admin, "mediatype:folder", 10).await?;
    let notes = folder
        .text()
        .split("<oc:fileid>")
        .nth(1)
        .and_then(|f| f.split_once("</oc:fileid>"))
        .map(|(f, _)| f.to_owned())
        .context("folder id")?;
    assert_eq!(
        found(a, &admin, &format!("content:fox scope:{notes}")).await?,
        ["Report-2024.md"]
    );
    assert!(
        found(a, &admin, "content:fox scope:storage-users$nope")
            .await?
            .is_empty()
    );
    assert_eq!(
        found(a, &admin, &format!("content:fox scope:{space}")).await?,
        ["Report-2024.md", "zebra.txt"]
    );
    let none = report(
        a,
        "/remote.php/dav/spaces/",
        &admin,
        "name:nothing-like-this",
        10,
    )
    .await?;
    assert_eq!(none.status, 207);
    // As oCIS: no Content-Range when nothing is found.
    assert_eq!(none.header("content-range"), None);

    // Bad queries: 400 with one line naming the problem.
    for (bad, says) in [
        ("colour:red", "unknown search property"),
        (r#"name:"open"#, "unterminated quote"),
        ("(a OR b", "parentheses"),
        ("mtime>yesterday", "mtime"),
        ("a AND", "AND"),
    ] {
        let r = report(a, "/remote.php/dav/spaces/", &admin, bad, 10).await?;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        let text = r.text();
        assert!(text.contains(says), "{bad}: {text}");
        let message = text
            .split("<s:message>")
            .nth(1)
            .and_then(|m| m.split_once("</s:message>"))
            .map(|(m, _)| m.to_owned())
            .unwrap_or_default();
        assert!(!message.contains('\n'), "{bad}: one line, {text}");
    }
    // Other REPORTs are refused as oCIS refuses them; other methods on the space-less root
    // are not allowed.
    let other = send(
        a,
        "REPORT",
        "/remote.php/dav/spaces/",
        &[auth(&admin)],
        r#"<oc:filter-files xmlns:oc="http://owncloud.org/ns"/>"#,
    )
    .await?;
    assert_eq!(other.status, 400, "{}", other.text());
    assert!(
        other.text().contains("missing search-files tag"),
        "{}",
        other.text()
    );
    let r = send(
        a,
        "PROPFIND",
        "/remote.php/dav/spaces/",
        &[auth(&admin)],
        "",
    )
    .await?;
    assert_eq!(r.status, 405, "{}", r.text());
    let anon = report(a, "/remote.php/dav/spaces/", "", "report", 10).await?;
    assert_eq!(anon.status, 401);

    // The capability ownCloud Web looks for.
    let caps = get(
        a,
        "/ocs/v1.php/cloud/capabilities?format=json",
        &[auth(&admin)],
    )
    .await?;
    let caps: Value = caps.json()?;
    assert_eq!(
        caps["ocs"]["data"]["capabilities"]["dav"]["reports"],
        serde_json::json!(["search-files"])
    );
    let property = &caps["ocs"]["data"]["capabilities"]["search"]["property"];
    assert_eq!(property["content"]["enabled"], true, "{caps}");
    assert_eq!(property["name"]["enabled"], true, "{caps}");
    assert_eq!(
        caps["ocs"]["data"]["capabilities"]["files"]["full_text_search"],
        true
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn search_finds_only_what_the_caller_may_read_now_shares_included() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = server.public.as_str();
    let admin = admin();
    let (_, bob) = user(a, "bob").await?;
    mkcol(a, "/remote.php/webdav/Docs", &admin).await?;
    put(
        a,
        "/remote.php/webdav/Docs/budget.txt",
        &admin,
        "secret numbers",
    )
    .await?;
    put(a, "/remote.php/webdav/private.txt", &admin, "secret diary").await?;
    put(
        a,
        "/remote.php/webdav/bobs-budget.txt",
        &bob,
        "bob's numbers",
    )
    .await?;
    until_found(a, &admin, "budget", &["budget.txt"]).await?;
    until_found(a, &bob, "budget", &["bobs-budget.txt"]).await?;
    // Another user's files are never found, by name or content.
    assert!(found(a, &bob, "content:secret").await?.is_empty());
    assert!(found(a, &admin, "content:bob").await?.is_empty());

    // Shared with bob: found by him, below the shared folder only.
    let r = send(
        a,
        "POST",
        "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json",
        &[auth(&admin), FORM],
        "path=%2FDocs&shareType=0&shareWith=bob&permissions=1",
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    let share = r.json()?["ocs"]["data"]["id"]
        .as_str()
        .context("share id")?
        .to_owned();
    let got = found(a, &bob, "content:secret").await?;
    assert_eq!(got, ["budget.txt"]);
    assert_eq!(
        found(a, &bob, "budget").await?,
        ["bobs-budget.txt", "budget.txt"]
    );
    let r = report(a, "/remote.php/dav/spaces/", &bob, "content:secret", 10).await?;
    // A viewer's permissions: shared, nothing more.
    assert!(
        r.text().contains("<oc:permissions>S</oc:permissions>"),
        "{}",
        r.text()
    );
    // The hit's href is a URL the recipient may read.
    let text = r.text();
    let href = text
        .split("<d:href>")
        .nth(1)
        .and_then(|h| h.split_once("</d:href>"))
        .map(|(h, _)| h.to_owned())
        .context("href")?;
    let got = get(a, &href, &[auth(&bob)]).await?;
    assert_eq!(got.status, 200, "GET {href}: {}", got.text());
    assert_eq!(got.body, b"secret numbers");

    // Revoked: gone from the very next query.
    let r = send(
        a,
        "DELETE",
        &format!("/ocs/v2.php/apps/files_sharing/api/v1/shares/{share}?format=json"),
        &[auth(&admin)],
        "",
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(found(a, &bob, "content:secret").await?.is_empty());
    assert_eq!(found(a, &bob, "budget").await?, ["bobs-budget.txt"]);
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn project_space_members_find_its_files_until_removed_or_disabled() -> anyhow::Result<()> {
    const VIEWER: &str = "a8d5fe5e-96e3-418d-825b-534dbdf22b99";
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = server.public.as_str();
    let admin = admin();
    let (vic_id, vic) = user(a, "vic").await?;
    let (ed_id, ed) = user(a, "ed").await?;
    let r = send(
        a,
        "POST",
        "/graph/v1beta1/drives",
        &[auth(&admin), JSON],
        r#"{"name":"Team"}"#,
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()?["id"].as_str().context("drive id")?.to_owned();
    put(
        a,
        &format!("/dav/spaces/{id}/plan.txt"),
        &admin,
        "launch plan",
    )
    .await?;
    let invite = serde_json::json!({
        "recipients": [
            {"objectId": vic_id, "@libre.graph.recipient.type": "user"},
            {"objectId": ed_id, "@libre.graph.recipient.type": "user"},
        ],
        "roles": [VIEWER],
    })
    .to_string();
    let r = send(
        a,
        "POST",
        &format!("/graph/v1beta1/drives/{id}/root/invite"),
        &[auth(&admin), JSON],
        invite,
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    until_found(a, &vic, "content:launch", &["plan.txt"]).await?;
    assert_eq!(found(a, &ed, "plan").await?, ["plan.txt"]);
    let r = report(a, "/remote.php/dav/spaces/", &vic, "plan", 10).await?;
    assert!(
        r.text().contains(&format!(
            "<d:href>/dav/spaces/{}/plan.txt</d:href>",
            id.replace('$', "%24")
        )),
        "{}",
        r.text()
    );

    // vic removed: gone at once; ed still finds it.
    let r = send(
        a,
        "DELETE",
        &format!("/graph/v1beta1/drives/{id}/root/permissions/u:{vic_id}"),
        &[auth(&admin)],
        "",
    )
    .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(found(a, &vic, "plan").await?.is_empty());
    assert_eq!(found(a, &ed, "plan").await?, ["plan.txt"]);

    // The space disabled: gone for every member at once, the manager included.
    let r = send(
        a,
        "DELETE",
        &format!("/graph/v1.0/drives/{id}"),
        &[auth(&admin)],
        "",
    )
    .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(found(a, &ed, "plan").await?.is_empty());
    assert!(found(a, &admin, "plan").await?.is_empty());
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn without_a_search_service_search_is_503_and_the_rest_works() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(
        &dir,
        &[(
            "services",
            "proxy,frontend,gateway,storage-users,storage-system,sharing,thumbnails",
        )],
    )
    .await?;
    let a = server.public.as_str();
    let admin = admin();
    put(a, "/remote.php/webdav/a.txt", &admin, "hello").await?;
    let r = report(a, "/remote.php/dav/spaces/", &admin, "a", 10).await?;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    let r = report(a, "/remote.php/webdav/", &admin, "a", 10).await?;
    assert_eq!(r.status, 503, "{}", r.text());
    let got = get(a, "/remote.php/webdav/a.txt", &[auth(&admin)]).await?;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"hello");
    let r = send(
        a,
        "PROPFIND",
        "/remote.php/webdav/",
        &[auth(&admin), ("depth", "1")],
        "",
    )
    .await?;
    assert_eq!(r.status, 207);
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn the_index_catches_up_with_changes_made_while_search_was_down() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let admin = admin();
    let server = start(&dir, &[]).await?;
    let a = server.public.clone();
    mkcol(&a, "/remote.php/webdav/old", &admin).await?;
    put(&a, "/remote.php/webdav/old/gone.txt", &admin, "first words").await?;
    put(&a, "/remote.php/webdav/kept.txt", &admin, "first words").await?;
    until_found(&a, &admin, "content:first", &["gone.txt", "kept.txt"]).await?;
    server.stop().await?;

    // The same data dir without the search service: files change meanwhile.
    let server = start(
        &dir,
        &[(
            "services",
            "proxy,frontend,gateway,storage-users,storage-system,sharing,thumbnails",
        )],
    )
    .await?;
    let a = server.public.clone();
    let r = send(&a, "DELETE", "/remote.php/webdav/old", &[auth(&admin)], "").await?;
    assert_eq!(r.status, 204, "{}", r.text());
    put(&a, "/remote.php/webdav/kept.txt", &admin, "second words").await?;
    mkcol(&a, "/remote.php/webdav/new", &admin).await?;
    put(
        &a,
        "/remote.php/webdav/new/fresh.txt",
        &admin,
        "second words",
    )
    .await?;
    server.stop().await?;

    // Back with search: the index (kept on disk) catches up.
    let server = start(&dir, &[]).await?;
    let a = server.public.clone();
    until_found(&a, &admin, "content:second", &["fresh.txt", "kept.txt"]).await?;
    assert!(found(&a, &admin, "content:first").await?.is_empty());
    assert!(found(&a, &admin, "gone").await?.is_empty());
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn moved_folders_and_renamed_files_are_found_where_they_are_now() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = server.public.as_str();
    let admin = admin();
    mkcol(a, "/remote.php/webdav/proj", &admin).await?;
    mkcol(a, "/remote.php/webdav/proj/deep", &admin).await?;
    put(
        a,
        "/remote.php/webdav/proj/deep/inner.txt",
        &admin,
        "moving words",
    )
    .await?;
    put(a, "/remote.php/webdav/loose.txt", &admin, "loose words").await?;
    until_found(a, &admin, "content:words", &["inner.txt", "loose.txt"]).await?;

    for (from, to) in [
        ("proj", "archive-2024"),
        ("loose.txt", "archive-2024/tidy.txt"),
    ] {
        transfer(a, &admin, "MOVE", from, to).await?;
    }
    until_found(a, &admin, "content:words", &["inner.txt", "tidy.txt"]).await?;
    let r = report(a, "/remote.php/dav/spaces/", &admin, "inner", 10).await?;
    let text = r.text();
    assert!(
        text.contains("/archive-2024/deep/inner.txt</d:href>"),
        "{text}"
    );
    assert!(found(a, &admin, "proj").await?.is_empty());
    assert_eq!(found(a, &admin, "archive").await?, ["archive-2024"]);
    server.stop().await?;
    Ok(())
}

/// Writes of single nodes (a PUT, an overwrite, a MKCOL, a DELETE) reach the index through
/// hints that name the node, each looked at alone: a new folder is walked with what it holds,
/// an overwrite of a file whose content is not read refreshes its size in place, a deleted
/// folder leaves with its subtree, a copied folder is walked, a file moved over another
/// replaces it. No round runs meanwhile (INTERVAL), so each of these is the hint's doing.
#[tokio::test]
async fn single_writes_are_indexed_node_by_node() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[]).await?;
    let a = server.public.as_str();
    let admin = admin();
    mkcol(a, "/remote.php/webdav/team", &admin).await?;
    put(a, "/remote.php/webdav/team/a.txt", &admin, "alpha words").await?;
    put(a, "/remote.php/webdav/team/b.bin", &admin, "short").await?;
    mkcol(a, "/remote.php/webdav/team/sub", &admin).await?;
    mkcol(a, "/remote.php/webdav/team/sub/inner", &admin).await?;
    put(
        a,
        "/remote.php/webdav/team/sub/inner/deep.txt",
        &admin,
        "deep words",
    )
    .await?;
    until_found(a, &admin, "content:words", &["a.txt", "deep.txt"]).await?;

    put(a, "/remote.php/webdav/team/a.txt", &admin, "omega words").await?;
    until_found(a, &admin, "content:omega", &["a.txt"]).await?;
    assert!(found(a, &admin, "content:alpha").await?.is_empty());

    put(
        a,
        "/remote.php/webdav/team/b.bin",
        &admin,
        &"long ".repeat(10),
    )
    .await?;
    until_found(a, &admin, "size>40 AND NOT mediatype:folder", &["b.bin"]).await?;

    let r = send(
        a,
        "DELETE",
        "/remote.php/webdav/team/sub",
        &[auth(&admin)],
        "",
    )
    .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    until_found(a, &admin, "content:words", &["a.txt"]).await?;
    assert!(found(a, &admin, "inner").await?.is_empty());
    assert_eq!(found(a, &admin, "team").await?, ["team"]);

    // Removed and made again at once (most likely in one hint): two ids at one path, the new
    // one indexed, the old one's subtree gone.
    let r = send(
        a,
        "DELETE",
        "/remote.php/webdav/team/sub",
        &[auth(&admin)],
        "",
    )
    .await?;
    assert!(r.status == 404, "{}", r.text());
    mkcol(a, "/remote.php/webdav/team/sub", &admin).await?;
    put(a, "/remote.php/webdav/team/sub/x.txt", &admin, "x words").await?;
    let r = send(
        a,
        "DELETE",
        "/remote.php/webdav/team/sub",
        &[auth(&admin)],
        "",
    )
    .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    mkcol(a, "/remote.php/webdav/team/sub", &admin).await?;
    put(
        a,
        "/remote.php/webdav/team/sub/again.txt",
        &admin,
        "again words",
    )
    .await?;
    until_found(a, &admin, "content:words", &["a.txt", "again.txt"]).await?;
    assert_eq!(found(a, &admin, "sub").await?, ["sub"]);

    // A folder copied: the copy is walked, its file found under it (two again.txt now); a
    // file moved over another replaces it in the index (one c.txt, with a.txt's text).
    put(a, "/remote.php/webdav/team/c.txt", &admin, "gamma text").await?;
    until_found(a, &admin, "content:gamma", &["c.txt"]).await?;
    transfer(a, &admin, "COPY", "team/sub", "team/copied").await?;
    transfer(a, &admin, "MOVE", "team/a.txt", "team/c.txt").await?;
    until_found(a, &admin, "content:again", &["again.txt", "again.txt"]).await?;
    let r = report(a, "/remote.php/dav/spaces/", &admin, "content:again", 10).await?;
    let text = r.text();
    assert!(text.contains("/team/copied/again.txt</d:href>"), "{text}");
    until_found(a, &admin, "content:omega", &["c.txt"]).await?;
    assert_eq!(found(a, &admin, "c.txt").await?, ["c.txt"]);
    assert!(found(a, &admin, "a.txt").await?.is_empty());
    assert!(found(a, &admin, "content:gamma").await?.is_empty());
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn only_text_files_within_the_size_bound_have_their_content_indexed() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[("search.max_content_bytes", "32")]).await?;
    let a = server.public.as_str();
    let admin = admin();
    put(a, "/remote.php/webdav/small.txt", &admin, "a needle").await?;
    let big = format!("{} needle", "hay ".repeat(20));
    put(a, "/remote.php/webdav/big.txt", &admin, &big).await?;
    put(a, "/remote.php/webdav/code.rs", &admin, "fn needle() {}").await?;
    put(
        a,
        "/remote.php/webdav/blob.bin",
        &admin,
        "a needle in bytes",
    )
    .await?;
    until_found(
        a,
        &admin,
        "name:*.*",
        &["big.txt", "blob.bin", "code.rs", "small.txt"],
    )
    .await?;
    assert_eq!(
        found(a, &admin, "content:needle").await?,
        ["code.rs", "small.txt"]
    );
    server.stop().await?;
    Ok(())
}

/// Nextcloud's `SEARCH` (RFC 5323 basicsearch) on `/remote.php/dav/` as admin: `condition`
/// inside `d:where`, `from` the scope element (or nothing), `limit` nresults (0: none).
async fn nc_search(
    a: &str,
    condition: &str,
    from: &str,
    limit: u32,
) -> anyhow::Result<HttpResponse> {
    nc_search_ordered(a, condition, from, LATEST, limit).await
}

/// The newest first, as Nextcloud's recent-files view asks.
const LATEST: &str = "<d:order><d:prop><d:getlastmodified/></d:prop><d:descending/></d:order>";

/// [`nc_search`] with `order` inside `d:orderby`.
async fn nc_search_ordered(
    a: &str,
    condition: &str,
    from: &str,
    order: &str,
    limit: u32,
) -> anyhow::Result<HttpResponse> {
    let limit = if limit > 0 {
        format!("<d:limit><d:nresults>{limit}</d:nresults></d:limit>")
    } else {
        String::new()
    };
    let body = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<d:searchrequest xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">
  <d:basicsearch>
    <d:select><d:prop><d:displayname/><d:getcontenttype/><oc:size/></d:prop></d:select>
    {from}
    <d:where>{condition}</d:where>
    <d:orderby>{order}</d:orderby>
    {limit}
  </d:basicsearch>
</d:searchrequest>"#
    );
    send(
        a,
        "SEARCH",
        "/remote.php/dav/",
        &[auth(&admin()), ("content-type", "text/xml")],
        body,
    )
    .await
}

/// Every `<d:href>` of a multistatus, sorted.
fn hrefs(body: &str) -> Vec<String> {
    let mut out: Vec<String> = body
        .split("<d:href>")
        .skip(1)
        .filter_map(|s| s.split_once("</d:href>").map(|(n, _)| n.to_owned()))
        .collect();
    out.sort();
    out
}

fn scope(href: &str, depth: &str) -> String {
    format!("<d:from><d:scope><d:href>{href}</d:href><d:depth>{depth}</d:depth></d:scope></d:from>")
}

#[tokio::test]
async fn nextcloud_search_finds_the_same_through_basicsearch() -> anyhow::Result<()> {
    nextcloud_search(&TempDir::new(), &[]).await
}

async fn nextcloud_search(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<()> {
    let server = start(dir, settings).await?;
    let a = server.public.as_str();
    let admin = admin();
    mkcol(a, "/remote.php/webdav/Photos", &admin).await?;
    mkcol(a, "/remote.php/webdav/Photos/old%20ones", &admin).await?;
    put(
        a,
        "/remote.php/webdav/Photos/cat-1.jpg",
        &admin,
        &"x".repeat(5000),
    )
    .await?;
    put(
        a,
        "/remote.php/webdav/Photos/old%20ones/cat-2.png",
        &admin,
        "tiny",
    )
    .await?;
    put(a, "/remote.php/webdav/Photos/dog.jpg", &admin, "woof").await?;
    put(a, "/remote.php/webdav/cat-notes.txt", &admin, "about cats").await?;
    until_found(
        a,
        &admin,
        "cat OR dog",
        &["cat-1.jpg", "cat-2.png", "cat-notes.txt", "dog.jpg"],
    )
    .await?;

    let files = "/remote.php/dav/files/admin";
    let cat = "<d:like><d:prop><d:displayname/></d:prop><d:literal>%cat%</d:literal></d:like>";
    let r = nc_search(a, cat, &scope("/files/admin", "infinity"), 0).await?;
    assert_eq!(r.status, 207, "{}", r.text());
    assert_eq!(
        hrefs(&r.text()),
        [
            format!("{files}/Photos/cat-1.jpg"),
            format!("{files}/Photos/old%20ones/cat-2.png"),
            format!("{files}/cat-notes.txt"),
        ]
    );
    assert!(
        r.text()
            .contains("<d:displayname>cat-1.jpg</d:displayname>"),
        "{}",
        r.text()
    );
    // Below a folder, all the way down or its own entries only; and a cap on the hits.
    let r = nc_search(
        a,
        cat,
        &scope("/files/admin/Photos/old%20ones", "infinity"),
        0,
    )
    .await?;
    assert_eq!(
        hrefs(&r.text()),
        [format!("{files}/Photos/old%20ones/cat-2.png")]
    );
    let r = nc_search(a, cat, &scope(&format!("{files}/Photos"), "1"), 0).await?;
    assert_eq!(hrefs(&r.text()), [format!("{files}/Photos/cat-1.jpg")]);
    // The order decides which hits the limit keeps: the newest, the largest, by name.
    let r = nc_search(a, cat, "", 1).await?;
    assert_eq!(hrefs(&r.text()), [format!("{files}/cat-notes.txt")]);
    let largest = "<d:order><d:prop><oc:size/></d:prop><d:descending/></d:order>";
    let r = nc_search_ordered(a, cat, "", largest, 1).await?;
    assert_eq!(hrefs(&r.text()), [format!("{files}/Photos/cat-1.jpg")]);
    let by_name = "<d:order><d:prop><d:displayname/></d:prop><d:ascending/></d:order>";
    let r = nc_search_ordered(a, cat, "", by_name, 0).await?;
    let body = r.text();
    let names: Vec<usize> = ["cat-1.jpg", "cat-2.png", "cat-notes.txt"]
        .iter()
        .map(|n| {
            body.find(&format!("<d:displayname>{n}<"))
                .unwrap_or(usize::MAX)
        })
        .collect();
    assert!(names[0] < names[1] && names[1] < names[2], "{body}");
    let r = nc_search_ordered(
        a,
        cat,
        "",
        "<d:order><d:prop><oc:favorite/></d:prop></d:order>",
        0,
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.text());
    // Conditions combined: names and sizes, media types, folders.
    let big = format!(
        "<d:and>{cat}<d:gt><d:prop><oc:size/></d:prop><d:literal>1000</d:literal></d:gt></d:and>"
    );
    let r = nc_search(a, &big, "", 0).await?;
    assert_eq!(hrefs(&r.text()), [format!("{files}/Photos/cat-1.jpg")]);
    let images =
        "<d:like><d:prop><d:getcontenttype/></d:prop><d:literal>image/%</d:literal></d:like>";
    let r = nc_search(a, images, "", 0).await?;
    assert_eq!(
        hrefs(&r.text()),
        [
            format!("{files}/Photos/cat-1.jpg"),
            format!("{files}/Photos/dog.jpg"),
            format!("{files}/Photos/old%20ones/cat-2.png"),
        ]
    );
    let r = nc_search(a, "<d:is-collection/>", "", 0).await?;
    assert_eq!(
        hrefs(&r.text()),
        [
            format!("{files}/Photos/"),
            format!("{files}/Photos/old%20ones/")
        ]
    );
    let recent = "<d:gt><d:prop><d:getlastmodified/></d:prop><d:literal>2020-01-01T00:00:00Z</d:literal></d:gt>";
    let r = nc_search(a, &format!("<d:and>{recent}{cat}</d:and>"), "", 0).await?;
    assert_eq!(hrefs(&r.text()).len(), 3, "{}", r.text());
    let future =
        "<d:gt><d:prop><d:getlastmodified/></d:prop><d:literal>4102444800</d:literal></d:gt>";
    let r = nc_search(a, future, "", 0).await?;
    assert_eq!(hrefs(&r.text()), Vec::<String>::new());

    // What is refused says why.
    let r = nc_search(
        a,
        "<d:eq><d:prop><oc:favorite/></d:prop><d:literal>1</d:literal></d:eq>",
        "",
        0,
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("cannot search by"), "{}", r.text());
    let r = nc_search(a, cat, &scope("/files/somebody", "infinity"), 0).await?;
    assert_eq!(r.status, 403, "{}", r.text());
    let r = nc_search(a, cat, &scope("/files/admin/Nope", "infinity"), 0).await?;
    assert_eq!(r.status, 404, "{}", r.text());
    let r = send(a, "GET", "/remote.php/dav/", &[auth(&admin)], "").await?;
    assert_eq!(r.status, 405, "{}", r.text());
    Ok(())
}

/// `arca search reindex` reads everything again: a file indexed while contents above 10 bytes
/// were skipped is found by its content only after the limit was raised and the index was
/// rebuilt (another file's content is found at once: the crawler runs, the old file is not
/// read again without the rebuild).
#[tokio::test]
async fn reindex_reads_every_file_again() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir, &[ROUNDS, ("search.max_content_bytes", "10")]).await?;
    let a = server.public.clone();
    let admin = admin();
    put(
        &a,
        "/remote.php/webdav/notes.txt",
        &admin,
        "a long line about zebras",
    )
    .await?;
    until_found(&a, &admin, "notes", &["notes.txt"]).await?;
    assert_eq!(
        found(&a, &admin, "content:zebras").await?,
        Vec::<String>::new()
    );
    server.stop().await?;

    let server = start(&dir, &[ROUNDS, ("search.max_content_bytes", "1000")]).await?;
    let a = server.public.clone();
    put(&a, "/remote.php/webdav/later.txt", &admin, "zebras too").await?;
    until_found(&a, &admin, "content:zebras", &["later.txt"]).await?;

    let data = InProcess::data_dir(&dir);
    let out = arca_tests::run_arca(
        &[
            "search",
            "reindex",
            "--data-dir",
            &data.display().to_string(),
        ],
        &[],
    )
    .await?;
    assert_eq!(out.code, Some(0), "{:?} {:?}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .iter()
            .any(|l| l.contains("entries to check again")),
        "{:?}",
        out.stdout
    );
    until_found(&a, &admin, "content:zebras", &["later.txt", "notes.txt"]).await?;

    // Without an index there is nothing to rebuild: said, not made.
    let empty = TempDir::new();
    let out = arca_tests::run_arca(
        &[
            "search",
            "reindex",
            "--data-dir",
            &empty.path().display().to_string(),
        ],
        &[],
    )
    .await?;
    assert_eq!(out.code, Some(1), "{:?}", out.stderr);
    assert!(!empty.path().join("search/index.db").exists());
    server.stop().await?;
    Ok(())
}

/// An `arca server` of a deployment whose search instances share one index in PostgreSQL:
/// the NATS registry (and its leases), hints on the NATS bus.
fn shared_launch(dir: &TempDir, nats: &str, services: &str) -> arca_tests::Launch {
    arca_tests::Launch::arca(dir)
        .services(services)
        .set("identity.secret", "search-shared-secret-0123456789ab")
        .set("registry.kind", "nats")
        .set("registry.nats.url", nats)
        .set("registry.nats.bucket", "arca-search-test")
        .set("registry.nats.ttl", "3s")
        .set("events.kind", "nats")
        .set(INTERVAL.0, INTERVAL.1)
        .env("ARCA_ADMIN_PASSWORD", SECRET)
}

/// Which of `instances` hold the crawl's lease now (by index).
async fn crawling(instances: &[&arca_tests::Server]) -> anyhow::Result<Vec<usize>> {
    let mut out = Vec::new();
    for (i, s) in instances.iter().enumerate() {
        let holds = arca_tests::layouts::lease_holds(s).await?;
        if holds
            .iter()
            .any(|h| h.job == "search/crawl" && h.until_ms.is_none())
        {
            out.push(i);
        }
    }
    Ok(out)
}

/// Two search instances (processes of their own) on one index in PostgreSQL: one crawls it,
/// under the lease, both answer queries from it; the crawling one killed, the other takes
/// the lease over and what changed meanwhile is found through it. `arca search reindex`
/// works on the shared index.
#[tokio::test]
async fn search_instances_share_one_index_in_postgresql() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let (nats, pg) = tokio::try_join!(
        arca_tests::Nats::start(&dir),
        arca_tests::Postgres::start(&dir)
    )?;
    let nats = nats.url();
    let rest_dir = TempDir::new();
    let mut rest = shared_launch(
        &rest_dir,
        &nats,
        "proxy,frontend,gateway,storage-users,storage-system,sharing,thumbnails",
    )
    // Called by the search instances: the crawl, and what a caller may read.
    .set(
        "storage-users.endpoint",
        format!("tcp://{}", arca_tests::free_addr()),
    )
    .set(
        "sharing.endpoint",
        format!("tcp://{}", arca_tests::free_addr()),
    )
    .spawn()?;
    let search_dirs = [TempDir::new(), TempDir::new()];
    let search = |d: &TempDir| {
        shared_launch(d, &nats, "search")
            .set(
                "search.endpoint",
                format!("tcp://{}", arca_tests::free_addr()),
            )
            .set("search.database", &pg.url)
            .spawn()
    };
    let mut instances = [search(&search_dirs[0])?, search(&search_dirs[1])?];
    rest.wait_ready(WITHIN).await?;
    for s in &mut instances {
        s.wait_ready(WITHIN).await?;
    }
    let a = rest.public.clone();
    let admin = admin();
    mkcol(&a, "/remote.php/webdav/team", &admin).await?;
    put(
        &a,
        "/remote.php/webdav/team/plan.txt",
        &admin,
        "shared needle",
    )
    .await?;
    until_found(&a, &admin, "content:needle", &["plan.txt"]).await?;

    // One instance crawls; queries reach both, and both answer from the one index.
    let leader = eventually(WITHIN, "one search instance holding the crawl", || async {
        let now = crawling(&[&instances[0], &instances[1]]).await?;
        anyhow::ensure!(now.len() == 1, "holding: {now:?}");
        Ok(Some(now[0]))
    })
    .await?;
    eventually(WITHIN, "queries answered by both instances", || async {
        assert_eq!(found(&a, &admin, "content:needle").await?, ["plan.txt"]);
        let mut counts = Vec::new();
        for s in &instances {
            counts.push(arca_tests::layouts::handled(s, "search").await?);
        }
        anyhow::ensure!(counts.iter().all(|c| *c > 0.0), "handled: {counts:?}");
        Ok(Some(()))
    })
    .await?;

    // The crawling instance dies; a file written now is found through the other, which
    // took the lease over (its rounds are an hour apart: it begins with one as it takes it).
    let other = 1 - leader;
    instances[leader].proc.signal(libc::SIGKILL);
    instances[leader].proc.wait_exit(WITHIN).await?;
    put(
        &a,
        "/remote.php/webdav/team/later.txt",
        &admin,
        "late needle",
    )
    .await?;
    until_found(&a, &admin, "content:needle", &["later.txt", "plan.txt"]).await?;
    assert_eq!(crawling(&[&instances[other]]).await?, [0]);

    // A reindex forgets the shared index's progress (every document to check again).
    let data_dir = search_dirs[other].join("data");
    let done = arca_tests::run_arca(
        &[
            "search",
            "reindex",
            "--data-dir",
            &data_dir.display().to_string(),
            "--set",
            &format!("search.database={}", pg.url),
        ],
        &[],
    )
    .await?;
    assert_eq!(done.code, Some(0), "{:?}", done.stderr);
    assert!(
        done.stdout
            .iter()
            .any(|l| l.contains("entries to check again")),
        "{:?}",
        done.stdout
    );
    rest.proc.sigterm();
    instances[other].proc.sigterm();
    rest.proc.wait_exit(WITHIN).await?;
    instances[other].proc.wait_exit(WITHIN).await?;
    Ok(())
}
