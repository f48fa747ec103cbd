//! Graph drives in one in-process deployment: each drive's `root.webDavUrl` works over
//! WebDAV, project drives are created, changed and deleted by admins only, their quota holds,
//! and other users neither see nor reach them.

use anyhow::Context as _;
use arca_tests::{HttpResponse, InProcess, TempDir, send};
use serde_json::Value;

/// `admin:drives-secret`.
const ADMIN: (&str, &str) = ("authorization", "Basic YWRtaW46ZHJpdmVzLXNlY3JldA==");
/// `bob:bob-pass`.
const BOB: (&str, &str) = ("authorization", "Basic Ym9iOmJvYi1wYXNz");
const JSON: (&str, &str) = ("content-type", "application/json");

/// Every service in this process, the admin's password `drives-secret`, and user bob.
async fn start(dir: &TempDir) -> anyhow::Result<InProcess> {
    let server = InProcess::ready(dir, "drives-secret", &[]).await?;
    let bob = send(
        &server.public,
        "POST",
        "/graph/v1.0/users",
        &[ADMIN, JSON],
        r#"{"onPremisesSamAccountName":"bob","displayName":"Bob","passwordProfile":{"password":"bob-pass"}}"#,
    )
    .await?;
    anyhow::ensure!(bob.status == 201, "creating bob: {}", bob.text());
    Ok(server)
}

/// The JSON body of an answer that must have `status`.
fn expect(r: &HttpResponse, status: u16, what: &str) -> anyhow::Result<Value> {
    anyhow::ensure!(
        r.status == status,
        "{what}: {} (wanted {status}) {}",
        r.status,
        r.text()
    );
    if r.body.is_empty() {
        return Ok(Value::Null);
    }
    r.json().with_context(|| what.to_owned())
}

/// The path part of a drive's `root.webDavUrl`, which must point at this server.
fn dav_path(drive: &Value, addr: &str) -> anyhow::Result<String> {
    let url = drive["root"]["webDavUrl"]
        .as_str()
        .context("root.webDavUrl")?;
    let path = url
        .strip_prefix(&format!("http://{addr}"))
        .with_context(|| format!("{url} is not on http://{addr}"))?;
    let id = drive["id"].as_str().context("id")?;
    assert_eq!(
        path,
        format!("/dav/spaces/{id}"),
        "webDavUrl names the drive id"
    );
    Ok(path.to_owned())
}

async fn propfind(addr: &str, path: &str, who: (&str, &str)) -> anyhow::Result<HttpResponse> {
    send(addr, "PROPFIND", path, &[who, ("depth", "1")], "").await
}

fn drives(list: &Value) -> Vec<Value> {
    list["value"].as_array().cloned().unwrap_or_default()
}

/// A drive's fields in libregraph's shape.
fn check_shape(d: &Value) {
    let id = d["id"].as_str().unwrap_or_default();
    assert!(id.starts_with("storage-users$"), "id {id}");
    assert_eq!(d["root"]["id"], d["id"]);
    let etag = d["root"]["eTag"].as_str().unwrap_or_default();
    assert!(
        etag.len() > 2 && etag.starts_with('"') && etag.ends_with('"'),
        "quoted eTag {etag}"
    );
    let modified = d["lastModifiedDateTime"].as_str().unwrap_or_default();
    assert!(
        modified.len() == 30 && modified.ends_with('Z') && &modified[10..11] == "T",
        "RFC 3339 {modified}"
    );
    assert!(d["owner"]["user"]["id"].is_string());
    for key in ["total", "used", "remaining"] {
        assert!(d["quota"][key].is_u64(), "quota.{key} in {d}");
    }
    assert!(d["webUrl"].as_str().is_some_and(|u| u.ends_with(id)));
}

#[tokio::test]
async fn personal_drive_is_reachable_at_its_webdav_url() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;

    let list = expect(
        &send(a, "GET", "/graph/v1.0/me/drives", &[ADMIN], "").await?,
        200,
        "me/drives",
    )?;
    let mine = drives(&list);
    assert_eq!(mine.len(), 1, "only the personal drive: {list}");
    let personal = &mine[0];
    check_shape(personal);
    assert_eq!(personal["driveType"], "personal");
    assert_eq!(personal["driveAlias"], "personal/admin");
    assert_eq!(personal["quota"]["state"], "normal");
    let path = dav_path(personal, a)?;

    let put = send(a, "PUT", &format!("{path}/hello.txt"), &[ADMIN], "hello").await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let listing = propfind(a, &format!("{path}/"), ADMIN).await?;
    assert_eq!(listing.status, 207, "{}", listing.text());
    assert!(listing.text().contains("hello.txt"));
    // The same file is in the legacy root: one personal space.
    let legacy = send(a, "GET", "/remote.php/webdav/hello.txt", &[ADMIN], "").await?;
    assert_eq!(legacy.text(), "hello");

    let after = expect(
        &send(a, "GET", "/graph/v1.0/me/drives", &[ADMIN], "").await?,
        200,
        "me/drives again",
    )?;
    let after = &drives(&after)[0];
    assert_eq!(after["quota"]["used"], 5);
    assert_ne!(
        after["root"]["eTag"], personal["root"]["eTag"],
        "etag moved"
    );

    // The proxy drops a client's own X-Forwarded-Proto (it alone says whether the client
    // used TLS), so the URLs keep the scheme the client really used.
    let spoofed = send(
        a,
        "GET",
        "/graph/v1.0/me/drives",
        &[ADMIN, ("x-forwarded-proto", "https")],
        "",
    )
    .await?;
    let url = drives(&spoofed.json()?)[0]["root"]["webDavUrl"].clone();
    assert!(
        url.as_str().is_some_and(|u| u.starts_with("http://")),
        "{url}"
    );

    // A personal drive cannot be deleted or renamed on its own; its quota can be set.
    let id = personal["id"].as_str().context("id")?;
    let url = format!("/graph/v1.0/drives/{id}");
    expect(
        &send(a, "DELETE", &url, &[ADMIN], "").await?,
        403,
        "delete personal",
    )?;
    expect(
        &send(a, "PATCH", &url, &[ADMIN, JSON], r#"{"name":"x"}"#).await?,
        403,
        "rename personal",
    )?;
    let patched = expect(
        &send(a, "PATCH", &url, &[ADMIN, JSON], r#"{"quota":{"total":4}}"#).await?,
        200,
        "personal quota",
    )?;
    assert_eq!(patched["quota"]["total"], 4);
    assert_eq!(patched["quota"]["state"], "exceeded");
    let more = send(a, "PUT", &format!("{path}/more.txt"), &[ADMIN], "x").await?;
    assert_eq!(more.status, 507, "over quota: {}", more.text());
    Ok(())
}

#[tokio::test]
async fn project_drive_lifecycle() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;

    // Only admins create drives, and only from a well-formed request.
    expect(
        &send(
            a,
            "POST",
            "/graph/v1.0/drives",
            &[BOB, JSON],
            r#"{"name":"Mine"}"#,
        )
        .await?,
        403,
        "bob creates",
    )?;
    for bad in [
        "{",
        r#"{"name":"  "}"#,
        r#"{"description":"no name"}"#,
        r#"{"name":"x","quota":{"total":-1}}"#,
        r#"{"name":"x","driveType":"personal"}"#,
    ] {
        let r = send(a, "POST", "/graph/v1.0/drives", &[ADMIN, JSON], bad).await?;
        let body = expect(&r, 400, bad)?;
        assert!(body["error"]["message"].is_string(), "{body}");
    }

    let created = expect(
        &send(
            a,
            "POST",
            "/graph/v1.0/drives",
            &[ADMIN, JSON],
            r#"{"name":"Project Alpha","description":"demo","quota":{"total":1000}}"#,
        )
        .await?,
        201,
        "create",
    )?;
    check_shape(&created);
    assert_eq!(created["driveType"], "project");
    assert_eq!(created["driveAlias"], "project/project-alpha");
    assert_eq!(created["name"], "Project Alpha");
    assert_eq!(created["description"], "demo");
    assert_eq!(created["quota"]["total"], 1000);
    assert_eq!(created["quota"]["used"], 0);
    assert_eq!(created["quota"]["remaining"], 1000);
    assert_eq!(created["root"]["permissions"][0]["roles"][0], "manager");
    let id = created["id"].as_str().context("id")?.to_owned();
    let path = dav_path(&created, a)?;
    let url = format!("/graph/v1.0/drives/{id}");

    // Usable over WebDAV at once, within its quota.
    let chunk = vec![b'x'; 600];
    let put = send(a, "PUT", &format!("{path}/a.bin"), &[ADMIN], chunk.clone()).await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let over = send(a, "PUT", &format!("{path}/b.bin"), &[ADMIN], chunk.clone()).await?;
    assert_eq!(over.status, 507, "{}", over.text());
    let read = expect(&send(a, "GET", &url, &[ADMIN], "").await?, 200, "read")?;
    assert_eq!(read["quota"]["used"], 600);
    assert_eq!(read["quota"]["remaining"], 400);
    assert_eq!(read["quota"]["state"], "normal");

    // Renamed with a higher quota: the alias stays, the second file now fits.
    let patched = expect(
        &send(
            a,
            "PATCH",
            &url,
            &[ADMIN, JSON],
            r#"{"name":"Project Beta","description":"more","quota":{"total":5000}}"#,
        )
        .await?,
        200,
        "patch",
    )?;
    assert_eq!(patched["name"], "Project Beta");
    assert_eq!(patched["description"], "more");
    assert_eq!(patched["driveAlias"], "project/project-alpha");
    assert_eq!(patched["quota"]["total"], 5000);
    let put = send(a, "PUT", &format!("{path}/b.bin"), &[ADMIN], chunk).await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let read = expect(&send(a, "GET", &url, &[ADMIN], "").await?, 200, "read")?;
    assert_eq!(read["quota"]["used"], 1200);
    assert_eq!(read["name"], "Project Beta");
    expect(
        &send(a, "PATCH", &url, &[ADMIN, JSON], "not json").await?,
        400,
        "bad patch",
    )?;
    expect(
        &send(a, "PATCH", &url, &[ADMIN, JSON], r#"{"name":""}"#).await?,
        400,
        "empty name",
    )?;

    // Listings: admins see the project drive in both; /drives also shows bob's personal one,
    // which exists once bob has used arca (personal spaces are made on first use).
    let first = propfind(a, "/remote.php/webdav/", BOB).await?;
    assert_eq!(first.status, 207, "bob's first use: {}", first.text());
    let mine = drives(&expect(
        &send(a, "GET", "/graph/v1.0/me/drives", &[ADMIN], "").await?,
        200,
        "admin me/drives",
    )?);
    let kinds: Vec<&str> = mine
        .iter()
        .filter_map(|d| d["driveType"].as_str())
        .collect();
    assert_eq!(kinds, ["personal", "project"], "{mine:?}");
    let all = drives(&expect(
        &send(a, "GET", "/graph/v1.0/drives", &[ADMIN], "").await?,
        200,
        "admin drives",
    )?);
    let aliases: Vec<&str> = all
        .iter()
        .filter_map(|d| d["driveAlias"].as_str())
        .collect();
    for want in ["personal/admin", "personal/bob", "project/project-alpha"] {
        assert!(aliases.contains(&want), "{want} in {aliases:?}");
    }
    let bobs = all
        .iter()
        .find(|d| d["driveAlias"] == "personal/bob")
        .context("bob's drive")?;
    assert_eq!(bobs["name"], "Bob");
    let bobs_id = bobs["id"].as_str().context("id")?;
    expect(
        &send(
            a,
            "GET",
            &format!("/graph/v1.0/drives/{bobs_id}"),
            &[ADMIN],
            "",
        )
        .await?,
        200,
        "admin reads bob's drive",
    )?;

    // Bob sees only his own drive and cannot reach the project in any way.
    for list in ["/graph/v1.0/me/drives", "/graph/v1.0/drives"] {
        let his = drives(&expect(
            &send(a, "GET", list, &[BOB], "").await?,
            200,
            list,
        )?);
        assert_eq!(his.len(), 1, "{list}: {his:?}");
        assert_eq!(his[0]["driveAlias"], "personal/bob");
        assert_eq!(his[0]["name"], "Bob");
    }
    expect(&send(a, "GET", &url, &[BOB], "").await?, 404, "bob reads")?;
    expect(
        &send(a, "PATCH", &url, &[BOB, JSON], r#"{"name":"mine"}"#).await?,
        404,
        "bob patches",
    )?;
    expect(
        &send(a, "DELETE", &url, &[BOB], "").await?,
        404,
        "bob deletes",
    )?;
    for (method, target) in [
        ("PROPFIND", format!("{path}/")),
        ("GET", format!("{path}/a.bin")),
        ("PUT", format!("{path}/c.bin")),
        ("DELETE", format!("{path}/a.bin")),
    ] {
        let body = if method == "PUT" { "x" } else { "" };
        let r = send(a, method, &target, &[BOB, ("depth", "0")], body).await?;
        assert_eq!(r.status, 404, "bob {method} {target}: {}", r.text());
    }

    // Deleted: gone from Graph and from WebDAV.
    expect(&send(a, "DELETE", &url, &[ADMIN], "").await?, 204, "delete")?;
    expect(
        &send(a, "GET", &url, &[ADMIN], "").await?,
        404,
        "read deleted",
    )?;
    let r = propfind(a, &format!("{path}/"), ADMIN).await?;
    assert_eq!(r.status, 404, "{}", r.text());
    expect(
        &send(a, "DELETE", &url, &[ADMIN], "").await?,
        404,
        "delete twice",
    )?;
    let mine = drives(&expect(
        &send(a, "GET", "/graph/v1.0/me/drives", &[ADMIN], "").await?,
        200,
        "me/drives after delete",
    )?);
    assert!(
        mine.iter().all(|d| d["driveType"] == "personal"),
        "{mine:?}"
    );

    // Ids that name nothing.
    for bad in [
        "garbage",
        "storage-users$nope",
        "gateway$x",
        "storage-users$",
    ] {
        let r = send(a, "GET", &format!("/graph/v1.0/drives/{bad}"), &[ADMIN], "").await?;
        assert_eq!(r.status, 404, "{bad}: {}", r.text());
    }
    Ok(())
}
