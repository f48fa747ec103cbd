//! Graph drives in one in-process deployment: each drive's `root.webDavUrl` works over
//! WebDAV, project drives are created, changed and deleted by admins and space admins only
//! (roles given as oCIS gives them, Graph appRoleAssignments), their quota holds, and other
//! users neither see nor reach them.

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
    start_with(dir, &[]).await
}

/// [`start`] with `settings` (another database).
async fn start_with(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<InProcess> {
    let server = InProcess::ready(dir, "drives-secret", settings).await?;
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
    // Its creator is its manager (oCIS's Manager role id).
    assert_eq!(
        created["root"]["permissions"][0]["roles"][0],
        "312c0871-5ef7-4b3a-85b6-0e4074c64049"
    );
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

    // DELETE disables it: gone from WebDAV, shown to its manager as trashed; a purge waits
    // for that, and `Restore: T` brings it back as it was.
    const PURGE: (&str, &str) = ("purge", "T");
    let r = send(a, "DELETE", &url, &[ADMIN, PURGE], "").await?;
    expect(&r, 400, "purge in use")?;
    assert!(r.text().contains("disable it first"), "{}", r.text());
    expect(
        &send(a, "DELETE", &url, &[ADMIN], "").await?,
        204,
        "disable",
    )?;
    let disabled = expect(&send(a, "GET", &url, &[ADMIN], "").await?, 200, "read")?;
    assert_eq!(disabled["root"]["deleted"]["state"], "trashed");
    let r = propfind(a, &format!("{path}/"), ADMIN).await?;
    assert_eq!(r.status, 404, "{}", r.text());
    let restored = expect(
        &send(a, "PATCH", &url, &[ADMIN, ("restore", "T")], "").await?,
        200,
        "restore",
    )?;
    assert!(restored["root"].get("deleted").is_none(), "{restored}");
    let back = send(a, "GET", &format!("{path}/a.bin"), &[ADMIN], "").await?;
    assert_eq!(back.status, 200, "{}", back.text());
    assert_eq!(back.body, vec![b'x'; 600]);
    expect(
        &send(a, "DELETE", &url, &[ADMIN], "").await?,
        204,
        "disable",
    )?;
    expect(
        &send(a, "DELETE", &url, &[ADMIN, PURGE], "").await?,
        204,
        "purge",
    )?;
    expect(
        &send(a, "GET", &url, &[ADMIN], "").await?,
        404,
        "read purged",
    )?;
    let r = propfind(a, &format!("{path}/"), ADMIN).await?;
    assert_eq!(r.status, 404, "{}", r.text());
    expect(
        &send(a, "DELETE", &url, &[ADMIN, PURGE], "").await?,
        404,
        "purge twice",
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

/// `user:user-pass` as a Basic authorization header.
fn basic_of(user: &str) -> String {
    arca_tests::basic(user, &format!("{user}-pass"))
}

/// Creates user `name` (password `{name}-pass`): their id.
async fn user(a: &str, name: &str) -> anyhow::Result<String> {
    let body = serde_json::json!({
        "onPremisesSamAccountName": name,
        "displayName": format!("{name} D."),
        "passwordProfile": {"password": format!("{name}-pass")},
    })
    .to_string();
    let r = send(a, "POST", "/graph/v1.0/users", &[ADMIN, JSON], body).await?;
    let created = expect(&r, 201, "create user")?;
    Ok(created["id"].as_str().context("user id")?.to_owned())
}

/// One keep-alive HTTP/1.1 connection: requests on it reuse the same socket.
struct Connection {
    addr: String,
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
}

impl Connection {
    async fn open(addr: &str) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Self {
            addr: addr.to_owned(),
            sender,
        })
    }

    /// The status of `method path` as `auth`, on this connection.
    async fn status(&mut self, method: &str, path: &str, auth: &str) -> anyhow::Result<u16> {
        use http_body_util::BodyExt as _;
        let exchange = async {
            self.sender.ready().await?;
            let req = hyper::Request::builder()
                .method(method)
                .uri(path)
                .header(hyper::header::HOST, &self.addr)
                .header(hyper::header::AUTHORIZATION, auth)
                .header("depth", "0")
                .body(http_body_util::Full::new(bytes::Bytes::new()))?;
            let resp = self.sender.send_request(req).await?;
            let status = resp.status().as_u16();
            resp.into_body().collect().await?;
            anyhow::Ok(status)
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), exchange)
            .await
            .context("no answer within 30 s")?
    }
}

/// A project drive's members: users and groups with oCIS's roles, managed over Graph
/// (`root/permissions`, `root/invite`), each role checked on every method, changes taking
/// effect on the next request of an open connection, the last manager kept, a disabled drive
/// gone for its members at once.
#[tokio::test]
async fn project_drive_members_and_their_roles() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    members_and_roles(server.public.as_str()).await
}

/// The same on PostgreSQL (storage-users' metadata, memberships included).
#[tokio::test]
async fn project_drive_members_and_their_roles_on_postgresql() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let pg = arca_tests::Postgres::start(&dir).await?;
    let server = start_with(&dir, &[("storage-users.database", pg.url.as_str())]).await?;
    members_and_roles(server.public.as_str()).await?;
    drop(server);
    drop(pg);
    Ok(())
}

async fn members_and_roles(a: &str) -> anyhow::Result<()> {
    const MANAGER: &str = "312c0871-5ef7-4b3a-85b6-0e4074c64049";
    const EDITOR: &str = "58c63c02-1d89-4572-916a-870abc5a1b7d";
    const VIEWER: &str = "a8d5fe5e-96e3-418d-825b-534dbdf22b99";
    let (vic, ed, gus, out) = (
        user(a, "vic").await?,
        user(a, "ed").await?,
        user(a, "gus").await?,
        user(a, "out").await?,
    );
    // gus is an editor through a group.
    let team = expect(
        &send(
            a,
            "POST",
            "/graph/v1.0/groups",
            &[ADMIN, JSON],
            r#"{"displayName":"team"}"#,
        )
        .await?,
        201,
        "group",
    )?;
    let team = team["id"].as_str().context("group id")?.to_owned();
    let member = format!(r#"{{"@odata.id":"http://x/graph/v1.0/users/{gus}"}}"#);
    let r = send(
        a,
        "POST",
        &format!("/graph/v1.0/groups/{team}/members/$ref"),
        &[ADMIN, JSON],
        member,
    )
    .await?;
    assert_eq!(r.status, 204, "{}", r.text());

    let drive = expect(
        &send(
            a,
            "POST",
            "/graph/v1beta1/drives",
            &[ADMIN, JSON],
            r#"{"name":"Team"}"#,
        )
        .await?,
        201,
        "create",
    )?;
    let id = drive["id"].as_str().context("id")?.to_owned();
    let root = dav_path(&drive, a)?;
    let perms = format!("/graph/v1beta1/drives/{id}/root/permissions");
    let listed = expect(
        &send(a, "GET", &perms, &[ADMIN], "").await?,
        200,
        "permissions",
    )?;
    assert_eq!(
        listed["value"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    assert_eq!(listed["value"][0]["roles"][0], MANAGER);
    let allowed = listed["@libre.graph.permissions.roles.allowedValues"].to_string();
    for role in [MANAGER, EDITOR, VIEWER] {
        assert!(allowed.contains(role), "{allowed}");
    }
    let put = send(a, "PUT", &format!("{root}/plan.txt"), &[ADMIN], "v1").await?;
    assert_eq!(put.status, 201, "{}", put.text());

    let invite = |objects: Vec<(&str, &str)>, role: &str| {
        let recipients: Vec<Value> = objects
            .iter()
            .map(|(id, kind)| serde_json::json!({"objectId": id, "@libre.graph.recipient.type": kind}))
            .collect();
        serde_json::json!({"recipients": recipients, "roles": [role]}).to_string()
    };
    let url_invite = format!("/graph/v1beta1/drives/{id}/root/invite");
    let added = expect(
        &send(
            a,
            "POST",
            &url_invite,
            &[ADMIN, JSON],
            invite(vec![(&vic, "user")], VIEWER),
        )
        .await?,
        200,
        "invite vic",
    )?;
    assert_eq!(added["value"][0]["id"], format!("u:{vic}"));
    assert_eq!(
        added["value"][0]["grantedToV2"]["user"]["displayName"],
        "vic D."
    );
    let body = invite(vec![(&ed, "user"), (&team, "group")], EDITOR);
    let added = expect(
        &send(a, "POST", &url_invite, &[ADMIN, JSON], body).await?,
        200,
        "invite",
    )?;
    assert_eq!(added["value"][1]["id"], format!("g:{team}"));
    assert_eq!(
        added["value"][1]["grantedToV2"]["group"]["displayName"],
        "team"
    );
    // Bad invitations say what is wrong.
    for (body, says) in [
        (invite(vec![(&vic, "user")], "nope"), "role"),
        (invite(vec![("no-such-user", "user")], VIEWER), "no user"),
        (invite(vec![], VIEWER), "recipients"),
        (invite(vec![(&vic, "robot")], VIEWER), "user or group"),
    ] {
        let r = send(a, "POST", &url_invite, &[ADMIN, JSON], body).await?;
        assert_eq!(r.status, 400, "{says}: {}", r.text());
        assert!(r.text().contains(says), "{says}: {}", r.text());
    }

    // Each role on each method. Members list the drive; others do not see it.
    let (vic_auth, ed_auth, gus_auth, out_auth) = (
        basic_of("vic"),
        basic_of("ed"),
        basic_of("gus"),
        basic_of("out"),
    );
    let status = |method: &'static str, path: String, auth: String, body: &'static str| async move {
        let r = send(
            a,
            method,
            &path,
            &[("authorization", &auth), ("depth", "0")],
            body,
        )
        .await?;
        anyhow::Ok(r.status)
    };
    let file = format!("{root}/plan.txt");
    assert_eq!(
        status("GET", file.clone(), vic_auth.clone(), "").await?,
        200
    );
    assert_eq!(
        status("PROPFIND", format!("{root}/"), vic_auth.clone(), "").await?,
        207
    );
    assert_eq!(
        status("PUT", file.clone(), vic_auth.clone(), "vic").await?,
        403
    );
    assert_eq!(
        status("PUT", format!("{root}/v.txt"), vic_auth.clone(), "x").await?,
        403
    );
    assert_eq!(
        status("MKCOL", format!("{root}/vdir"), vic_auth.clone(), "").await?,
        403
    );
    assert_eq!(
        status("DELETE", file.clone(), vic_auth.clone(), "").await?,
        403
    );
    let dest = |to: &str| format!("http://{a}{root}/{to}");
    let r = send(
        a,
        "MOVE",
        &file,
        &[
            ("authorization", &vic_auth),
            ("destination", &dest("moved.txt")),
        ],
        "",
    )
    .await?;
    assert_eq!(r.status, 403, "a viewer moves: {}", r.text());
    let r = send(
        a,
        "COPY",
        &file,
        &[
            ("authorization", &vic_auth),
            ("destination", &dest("copy.txt")),
        ],
        "",
    )
    .await?;
    assert_eq!(
        r.status,
        403,
        "a viewer copies into the space: {}",
        r.text()
    );
    let r = send(
        a,
        "COPY",
        &file,
        &[
            ("authorization", &ed_auth),
            ("destination", &dest("copy.txt")),
        ],
        "",
    )
    .await?;
    assert_eq!(r.status, 201, "an editor copies: {}", r.text());
    let r = send(
        a,
        "MOVE",
        &dest("copy.txt"),
        &[
            ("authorization", &ed_auth),
            ("destination", &dest("moved.txt")),
        ],
        "",
    )
    .await?;
    assert_eq!(r.status, 201, "an editor moves: {}", r.text());
    for auth in [&ed_auth, &gus_auth] {
        assert_eq!(
            status("PUT", file.clone(), auth.clone(), "edited").await?,
            204
        );
        assert_eq!(
            status("MKCOL", format!("{root}/d"), auth.clone(), "").await?,
            201
        );
        assert_eq!(
            status("DELETE", format!("{root}/d"), auth.clone(), "").await?,
            204
        );
    }
    for auth in [&vic_auth, &ed_auth, &gus_auth] {
        let r = send(
            a,
            "GET",
            "/graph/v1.0/me/drives?$filter=driveType%20eq%20%27project%27",
            &[("authorization", auth)],
            "",
        )
        .await?;
        let seen = expect(&r, 200, "member lists")?;
        assert_eq!(drives(&seen).len(), 1, "{seen}");
        assert_eq!(drives(&seen)[0]["id"], id.as_str());
        // Members see the members; only managers change them or the drive.
        expect(
            &send(a, "GET", &perms, &[("authorization", auth)], "").await?,
            200,
            "members",
        )?;
        let r = send(
            a,
            "POST",
            &url_invite,
            &[("authorization", auth), JSON],
            invite(vec![(&out, "user")], VIEWER),
        )
        .await?;
        assert_eq!(r.status, 403, "{}", r.text());
        let r = send(
            a,
            "PATCH",
            &format!("/graph/v1.0/drives/{id}"),
            &[("authorization", auth), JSON],
            r#"{"name":"mine"}"#,
        )
        .await?;
        assert_eq!(r.status, 403, "{}", r.text());
    }
    for (method, path) in [("GET", file.clone()), ("PROPFIND", format!("{root}/"))] {
        assert_eq!(status(method, path, out_auth.clone(), "").await?, 404);
    }
    expect(
        &send(a, "GET", &perms, &[("authorization", &out_auth)], "").await?,
        404,
        "outsider",
    )?;
    let r = send(
        a,
        "GET",
        "/graph/v1.0/me/drives",
        &[("authorization", &out_auth)],
        "",
    )
    .await?;
    assert_eq!(drives(&expect(&r, 200, "outsider lists")?).len(), 1);

    // A role change holds on the next request of an open connection.
    let mut conn = Connection::open(a).await?;
    let vics_file = format!("{root}/vic.txt");
    assert_eq!(conn.status("PUT", &vics_file, &vic_auth).await?, 403);
    let patch_url = format!("{perms}/u:{vic}");
    let body = serde_json::json!({"roles": [MANAGER]}).to_string();
    let changed = expect(
        &send(a, "PATCH", &patch_url, &[ADMIN, JSON], body).await?,
        200,
        "promote",
    )?;
    assert_eq!(changed["roles"][0], MANAGER);
    assert_eq!(conn.status("PUT", &vics_file, &vic_auth).await?, 201);
    // Now a manager, vic manages: renames the drive and removes the admin.
    let r = send(
        a,
        "PATCH",
        &format!("/graph/v1.0/drives/{id}"),
        &[("authorization", &vic_auth), JSON],
        r#"{"name":"Team 2"}"#,
    )
    .await?;
    assert_eq!(expect(&r, 200, "vic renames")?["name"], "Team 2");
    let admin_id = listed["value"][0]["grantedToV2"]["user"]["id"]
        .as_str()
        .context("admin id")?
        .to_owned();
    let r = send(
        a,
        "DELETE",
        &format!("{perms}/u:{admin_id}"),
        &[("authorization", &vic_auth)],
        "",
    )
    .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    // The last manager stays: neither removed nor demoted.
    let r = send(a, "DELETE", &patch_url, &[("authorization", &vic_auth)], "").await?;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("at least one manager"), "{}", r.text());
    let body = serde_json::json!({"roles": [VIEWER]}).to_string();
    let r = send(
        a,
        "PATCH",
        &patch_url,
        &[("authorization", &vic_auth), JSON],
        body,
    )
    .await?;
    assert_eq!(r.status, 403, "{}", r.text());
    // An admin still manages the drive, but no longer reads it.
    expect(
        &send(a, "GET", &perms, &[ADMIN], "").await?,
        200,
        "admin lists members",
    )?;
    assert_eq!(
        status("GET", file.clone(), ADMIN.1.to_owned(), "").await?,
        404
    );

    // OCS as oCIS's clients speak it: a member added with shareType 7 and space_ref, and a
    // file of the space shared from it by a manager who did not create the space.
    let ocs = "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json";
    let form = ("content-type", "application/x-www-form-urlencoded");
    let vic_h = ("authorization", vic_auth.as_str());
    let body = format!("shareType=7&shareWith=out&space_ref={id}&role=space-viewer");
    let r = send(a, "POST", ocs, &[vic_h, form], body).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()?["ocs"]["data"]["share_type"], 7, "{}", r.text());
    assert_eq!(
        status("GET", file.clone(), out_auth.clone(), "").await?,
        200
    );
    let r = send(a, "DELETE", &format!("{perms}/u:{out}"), &[vic_h], "").await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        status("GET", file.clone(), out_auth.clone(), "").await?,
        404
    );
    let body = format!("shareType=0&shareWith=out&space_ref={id}&path=/plan.txt&permissions=1");
    let r = send(a, "POST", ocs, &[vic_h, form], body).await?;
    assert_eq!(
        r.status,
        200,
        "a manager shares from the space: {}",
        r.text()
    );
    let r = send(
        a,
        "GET",
        "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json&shared_with_me=true",
        &[("authorization", out_auth.as_str())],
        "",
    )
    .await?;
    assert!(r.text().contains("plan.txt"), "{}", r.text());
    let body = "shareType=7&shareWith=nobody&space_ref=storage-users$x&role=space-viewer";
    let r = send(a, "POST", ocs, &[vic_h, form], body).await?;
    assert!(r.text().contains("no such user"), "{}", r.text());

    // The group leaves: gus loses the drive on his open connection's next request.
    let mut gus_conn = Connection::open(a).await?;
    assert_eq!(gus_conn.status("GET", &file, &gus_auth).await?, 200);
    let r = send(
        a,
        "DELETE",
        &format!("{perms}/g:{team}"),
        &[("authorization", &vic_auth)],
        "",
    )
    .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(gus_conn.status("GET", &file, &gus_auth).await?, 404);
    let r = send(
        a,
        "DELETE",
        &format!("{perms}/g:{team}"),
        &[("authorization", &vic_auth)],
        "",
    )
    .await?;
    assert_eq!(r.status, 404, "{}", r.text());

    // Disabled by its manager: every member loses it at once; the manager restores it.
    let drive_url = format!("/graph/v1.0/drives/{id}");
    assert_eq!(conn.status("GET", &file, &ed_auth).await?, 200);
    let r = send(a, "DELETE", &drive_url, &[("authorization", &vic_auth)], "").await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(conn.status("GET", &file, &ed_auth).await?, 404);
    assert_eq!(conn.status("GET", &file, &vic_auth).await?, 404);
    let r = send(
        a,
        "GET",
        "/graph/v1.0/me/drives",
        &[("authorization", &ed_auth)],
        "",
    )
    .await?;
    assert_eq!(
        drives(&expect(&r, 200, "ed lists")?).len(),
        1,
        "a disabled drive is not listed to editors"
    );
    let r = send(
        a,
        "GET",
        "/graph/v1.0/me/drives?$orderby=name%20desc",
        &[("authorization", &vic_auth)],
        "",
    )
    .await?;
    let listed = expect(&r, 200, "vic lists")?;
    let trashed = drives(&listed)
        .iter()
        .any(|d| d["id"] == id.as_str() && d["root"]["deleted"]["state"] == "trashed");
    assert!(trashed, "the manager sees the disabled drive: {listed}");
    let r = send(
        a,
        "PATCH",
        &drive_url,
        &[("authorization", &vic_auth), ("restore", "T")],
        "",
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(conn.status("GET", &file, &ed_auth).await?, 200);

    // Names oCIS refuses.
    for name in ["a/b", "x.y", "why?", "a|b"] {
        let body = serde_json::json!({ "name": name }).to_string();
        let r = send(a, "POST", "/graph/v1.0/drives", &[ADMIN, JSON], body).await?;
        assert_eq!(r.status, 400, "{name}: {}", r.text());
    }

    // Bad queries and ids.
    let r = send(
        a,
        "GET",
        "/graph/v1.0/me/drives?$filter=owner%20eq%20%27x%27",
        &[ADMIN],
        "",
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.text());
    let r = send(
        a,
        "GET",
        "/graph/v1.0/me/drives?$orderby=size",
        &[ADMIN],
        "",
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.text());
    let r = send(
        a,
        "DELETE",
        &format!("{perms}/x:1"),
        &[("authorization", &vic_auth)],
        "",
    )
    .await?;
    assert_eq!(r.status, 404, "{}", r.text());
    Ok(())
}

/// oCIS's role ids (arca_proto::roles).
const ROLE_ADMIN: &str = "71881883-1768-46bd-a24d-a356a2afdf7f";
const ROLE_SPACE_ADMIN: &str = "2aadd357-682c-406b-8874-293091995fdd";
const ROLE_USER: &str = "d7beeea8-8ff4-406b-8fb6-ab2dd81e6b11";

/// Roles as oCIS assigns them (Graph `appRoleAssignments`): a user may not create project
/// drives until an admin makes them a Space Admin; then they create drives, see and manage
/// every project drive (not its files), until the role is taken back. Only admins change
/// roles, never their own; bad assignments are 400s naming the field.
#[tokio::test]
async fn space_admins_create_and_manage_project_drives() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    app_roles(server.public.as_str()).await
}

/// The same with storage-system's records (the users and their roles) on PostgreSQL.
#[tokio::test]
async fn space_admins_on_postgresql() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let pg = arca_tests::Postgres::start(&dir).await?;
    let server = start_with(&dir, &[("storage-system.database", pg.url.as_str())]).await?;
    app_roles(server.public.as_str()).await?;
    drop(server);
    drop(pg);
    Ok(())
}

async fn app_roles(a: &str) -> anyhow::Result<()> {
    let within = std::time::Duration::from_secs(10);
    let sam_id = user(a, "sam").await?;
    let sam = basic_of("sam");
    let sam_auth = ("authorization", sam.as_str());
    let new_drive = |name: &str| format!(r#"{{"name":"{name}","driveType":"project"}}"#);

    // The roles, for anyone to read.
    let apps = expect(
        &send(a, "GET", "/graph/v1.0/applications", &[sam_auth], "").await?,
        200,
        "applications",
    )?;
    let app = &apps["value"][0];
    let app_id = app["id"].as_str().context("application id")?.to_owned();
    let mut ids: Vec<&str> = app["appRoles"]
        .as_array()
        .context("appRoles")?
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    ids.sort_unstable();
    let mut want = vec![ROLE_ADMIN, ROLE_SPACE_ADMIN, ROLE_USER];
    want.sort_unstable();
    assert_eq!(ids, want);
    let one = send(
        a,
        "GET",
        &format!("/graph/v1.0/applications/{app_id}"),
        &[sam_auth],
        "",
    )
    .await?;
    expect(&one, 200, "the application")?;
    let none = send(a, "GET", "/graph/v1.0/applications/nope", &[sam_auth], "").await?;
    expect(&none, 404, "an unknown application")?;

    // A user: no drive of their own making, their role User.
    let r = send(
        a,
        "POST",
        "/graph/v1.0/drives",
        &[sam_auth, JSON],
        new_drive("Sam's"),
    )
    .await?;
    expect(&r, 403, "a user creates a drive")?;
    let me = expect(
        &send(
            a,
            "GET",
            "/graph/v1.0/me?$expand=appRoleAssignments",
            &[sam_auth],
            "",
        )
        .await?,
        200,
        "me with roles",
    )?;
    assert_eq!(me["appRoleAssignments"][0]["appRoleId"], ROLE_USER);
    assert_eq!(me["appRoleAssignments"][0]["principalId"], sam_id.as_str());
    assert_eq!(me["appRoleAssignments"][0]["resourceId"], app_id.as_str());

    // An admin's drive, which sam will manage as a space admin without being a member.
    let admins = expect(
        &send(
            a,
            "POST",
            "/graph/v1.0/drives",
            &[ADMIN, JSON],
            new_drive("Finance"),
        )
        .await?,
        201,
        "the admin's drive",
    )?;
    let finance = admins["id"].as_str().context("drive id")?.to_owned();
    let finance_dav = dav_path(&admins, a)?;

    let assign = |principal: &str, role: &str, resource: &str| {
        serde_json::json!({"principalId": principal, "appRoleId": role, "resourceId": resource})
            .to_string()
    };
    let path = format!("/graph/v1.0/users/{sam_id}/appRoleAssignments");
    // Only admins give roles; a bad assignment says what is wrong.
    let r = send(
        a,
        "POST",
        &path,
        &[sam_auth, JSON],
        assign(&sam_id, ROLE_SPACE_ADMIN, &app_id),
    )
    .await?;
    expect(&r, 403, "sam makes himself a space admin")?;
    for (body, what) in [
        (assign(&sam_id, "no-such-role", &app_id), "appRoleId"),
        (
            assign(&sam_id, ROLE_SPACE_ADMIN, "no-such-app"),
            "resourceId",
        ),
        (
            assign("someone-else", ROLE_SPACE_ADMIN, &app_id),
            "principalId",
        ),
    ] {
        let r = send(a, "POST", &path, &[ADMIN, JSON], body).await?;
        expect(&r, 400, what)?;
        assert!(r.text().contains(what), "{what}: {}", r.text());
    }
    let r = send(a, "POST", &path, &[ADMIN, JSON], "{").await?;
    expect(&r, 400, "a body that is no JSON")?;
    let given = expect(
        &send(
            a,
            "POST",
            &path,
            &[ADMIN, JSON],
            assign(&sam_id, ROLE_SPACE_ADMIN, &app_id),
        )
        .await?,
        201,
        "sam made a space admin",
    )?;
    assert_eq!(given["appRoleId"], ROLE_SPACE_ADMIN);
    let listed = expect(
        &send(a, "GET", &path, &[ADMIN], "").await?,
        200,
        "sam's roles",
    )?;
    assert_eq!(listed["value"][0]["appRoleId"], ROLE_SPACE_ADMIN);
    let users = expect(
        &send(
            a,
            "GET",
            "/graph/v1.0/users?$expand=appRoleAssignments",
            &[ADMIN],
            "",
        )
        .await?,
        200,
        "users with roles",
    )?;
    let role_of = |name: &str| {
        users["value"]
            .as_array()
            .and_then(|v| v.iter().find(|u| u["onPremisesSamAccountName"] == name))
            .map(|u| u["appRoleAssignments"][0]["appRoleId"].clone())
    };
    assert_eq!(role_of("admin"), Some(Value::from(ROLE_ADMIN)));
    assert_eq!(role_of("sam"), Some(Value::from(ROLE_SPACE_ADMIN)));
    assert_eq!(role_of("bob"), Some(Value::from(ROLE_USER)));

    // The role holds from sam's next requests (the proxies drop what they cached of him).
    let mut created = None;
    let deadline = std::time::Instant::now() + within;
    while created.is_none() {
        let r = send(
            a,
            "POST",
            "/graph/v1.0/drives",
            &[sam_auth, JSON],
            new_drive("Sam's"),
        )
        .await?;
        match r.status {
            201 => created = Some(r.json()?),
            403 if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            _ => anyhow::bail!(
                "sam creates a drive as a space admin: {} {}",
                r.status,
                r.text()
            ),
        }
    }
    let sams = created.context("sam's drive")?;
    let sams_dav = dav_path(&sams, a)?;
    let r = propfind(a, &sams_dav, sam_auth).await?;
    assert_eq!(r.status, 207, "sam lists his own drive: {}", r.text());
    // Every project drive listed, the admin's included, and managed: quota, disable.
    let all = expect(
        &send(
            a,
            "GET",
            "/graph/v1.0/drives?$filter=driveType%20eq%20%27project%27",
            &[sam_auth],
            "",
        )
        .await?,
        200,
        "every project drive",
    )?;
    let names: Vec<String> = drives(&all)
        .iter()
        .filter_map(|d| d["name"].as_str().map(str::to_owned))
        .collect();
    assert!(
        names.contains(&"Finance".to_owned()) && names.contains(&"Sam's".to_owned()),
        "{names:?}"
    );
    let drive = format!("/graph/v1.0/drives/{finance}");
    let r = send(
        a,
        "PATCH",
        &drive,
        &[sam_auth, JSON],
        r#"{"quota":{"total":1000000}}"#,
    )
    .await?;
    let patched = expect(&r, 200, "sam sets the admin's drive's quota")?;
    assert_eq!(patched["quota"]["total"], 1_000_000);
    // Managing a drive is not reading its files.
    let r = propfind(a, &finance_dav, sam_auth).await?;
    assert!(
        matches!(r.status, 403 | 404),
        "sam reads Finance's files: {}",
        r.status
    );
    // Personal drives stay the admins': bob's quota is not sam's to set.
    let bobs = expect(
        &send(a, "GET", "/graph/v1.0/me/drives", &[BOB], "").await?,
        200,
        "bob's drives",
    )?;
    let bobs_id = drives(&bobs)
        .iter()
        .find(|d| d["driveType"] == "personal")
        .and_then(|d| d["id"].as_str().map(str::to_owned))
        .context("bob's personal drive")?;
    let r = send(
        a,
        "PATCH",
        &format!("/graph/v1.0/drives/{bobs_id}"),
        &[sam_auth, JSON],
        r#"{"quota":{"total":5}}"#,
    )
    .await?;
    assert!(
        matches!(r.status, 403 | 404),
        "sam sets bob's quota: {}",
        r.status
    );
    let r = send(a, "DELETE", &drive, &[sam_auth], "").await?;
    expect(&r, 204, "sam disables the admin's drive")?;

    // An admin does not change their own role.
    let admin_id = expect(
        &send(a, "GET", "/graph/v1.0/me", &[ADMIN], "").await?,
        200,
        "admin",
    )?["id"]
        .as_str()
        .context("admin id")?
        .to_owned();
    let r = send(
        a,
        "POST",
        &format!("/graph/v1.0/users/{admin_id}/appRoleAssignments"),
        &[ADMIN, JSON],
        assign(&admin_id, ROLE_USER, &app_id),
    )
    .await?;
    expect(&r, 403, "the admin demotes himself")?;

    // Taken back: a user again, from the next requests on.
    let r = send(a, "DELETE", &format!("{path}/{ROLE_USER}"), &[ADMIN], "").await?;
    expect(&r, 404, "removing a role sam does not have")?;
    let r = send(
        a,
        "DELETE",
        &format!("{path}/{ROLE_SPACE_ADMIN}"),
        &[ADMIN],
        "",
    )
    .await?;
    expect(&r, 204, "sam's role taken back")?;
    let deadline = std::time::Instant::now() + within;
    loop {
        let r = send(
            a,
            "POST",
            "/graph/v1.0/drives",
            &[sam_auth, JSON],
            new_drive("Again"),
        )
        .await?;
        match r.status {
            403 => break,
            201 if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            _ => anyhow::bail!(
                "sam creates a drive as a user again: {} {}",
                r.status,
                r.text()
            ),
        }
    }
    let listed = expect(
        &send(a, "GET", &path, &[sam_auth], "").await?,
        200,
        "sam's roles",
    )?;
    assert_eq!(listed["value"][0]["appRoleId"], ROLE_USER);
    Ok(())
}
