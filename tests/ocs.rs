//! The OCS API in one in-process deployment: capabilities and cloud/user in v1 and v2, JSON
//! and XML, checked key by key against what the ownCloud desktop client reads
//! (shared/protocol/CLIENT_PROTOCOL.md §2–3), with and without authentication.

use anyhow::Context as _;
use arca_tests::xml::Element;
use arca_tests::{HttpResponse, InProcess, TempDir, get, send};
use serde_json::Value;

/// `admin:ocs-secret`.
const ADMIN: (&str, &str) = ("authorization", "Basic YWRtaW46b2NzLXNlY3JldA==");
/// `bob:bob-pass`.
const BOB: (&str, &str) = ("authorization", "Basic Ym9iOmJvYi1wYXNz");
/// What owncloudcmd sends with every OCS call.
const OCS_HEADER: (&str, &str) = ("ocs-apirequest", "true");

/// Every service in this process, the admin's password `ocs-secret`.
async fn start(dir: &TempDir) -> anyhow::Result<InProcess> {
    InProcess::ready(dir, "ocs-secret", &[]).await
}

/// Checks a JSON capabilities answer; `code` is the version's success statuscode.
fn check_caps_json(r: &HttpResponse, code: u64, status_php: &Value) -> anyhow::Result<()> {
    anyhow::ensure!(r.status == 200, "{} {}", r.status, r.text());
    let ct = r.header("content-type").unwrap_or_default();
    anyhow::ensure!(ct.starts_with("application/json"), "content-type {ct}");
    let v = r.json()?;
    let meta = &v["ocs"]["meta"];
    assert_eq!(meta["status"], "ok");
    assert_eq!(meta["statuscode"], code);
    assert_eq!(meta["message"], "OK");
    let data = &v["ocs"]["data"];
    let caps = &data["capabilities"];

    // The version is /status.php's.
    assert_eq!(data["version"]["string"], status_php["versionstring"]);
    assert_eq!(
        data["version"]["productversion"],
        status_php["productversion"]
    );
    assert_eq!(data["version"]["product"], status_php["product"]);
    assert_eq!(data["version"]["edition"], status_php["edition"]);
    assert_eq!(data["version"]["major"], 10);
    assert_eq!(data["version"]["minor"], 11);
    assert_eq!(data["version"]["micro"], 0);
    assert_eq!(&caps["core"]["status"], status_php);

    // What owncloud/client's capabilities.cpp reads.
    assert_eq!(caps["core"]["pollinterval"], 60);
    assert_eq!(caps["core"]["webdav-root"], "remote.php/webdav");
    // Chunking NG (the v2 uploads under /remote.php/dav/uploads/) is announced as oCIS and
    // Nextcloud announce it, so that both desktop clients use it.
    assert_eq!(caps["dav"]["chunking"], "1.0");
    assert_eq!(caps["dav"]["chunkingParallelUploadDisabled"], false);
    assert!(caps["dav"]["reports"].is_array());
    // The Nextcloud client chunks only when bigfilechunking is on.
    assert_eq!(caps["files"]["bigfilechunking"], true);
    assert_eq!(caps["files"]["privateLinks"], true);
    // The trash bin and versions (tests/undo.rs).
    assert_eq!(caps["files"]["versioning"], true);
    assert_eq!(caps["files"]["undelete"], true);
    assert_eq!(caps["dav"]["trashbin"], "1.0");
    assert_eq!(caps["files"]["favorites"], false);
    assert_eq!(caps["files"]["blacklisted_files"], serde_json::json!([]));
    let tus = &caps["files"]["tus_support"];
    assert_eq!(tus["version"], "1.0.0");
    assert_eq!(tus["resumable"], "1.0.0");
    assert_eq!(tus["extension"], "creation,creation-with-upload");
    assert_eq!(tus["max_chunk_size"], 10_000_000);
    assert_eq!(tus["http_method_override"], "");
    assert_eq!(
        caps["checksums"]["supportedTypes"],
        // Upper case, as the Nextcloud client compares them (the ownCloud client ignores case).
        serde_json::json!(["SHA1", "MD5", "Adler32"])
    );
    assert_eq!(caps["checksums"]["preferredUploadType"], "SHA1");
    let sharing = &caps["files_sharing"];
    assert_eq!(sharing["api_enabled"], true);
    assert_eq!(sharing["resharing"], false);
    assert_eq!(sharing["default_permissions"], 22);
    assert_eq!(sharing["public"]["enabled"], true);
    assert!(sharing["public"]["password"]["enforced"].is_boolean());
    let spaces = &caps["spaces"];
    assert_eq!(spaces["version"], "1.0.0");
    assert_eq!(spaces["enabled"], true);
    assert_eq!(spaces["projects"], true);
    assert_eq!(spaces["share_jail"], true);
    assert_eq!(spaces["max_quota"], 0);
    assert!(
        caps["notifications"]["ocs-endpoints"]
            .as_array()
            .is_some_and(|e| e.iter().any(|x| x == "list")),
        "{}",
        caps["notifications"]
    );
    Ok(())
}

/// Checks an XML capabilities answer the way a client parsing XML would.
fn check_caps_xml(r: &HttpResponse, code: &str, status_php: &Value) -> anyhow::Result<()> {
    anyhow::ensure!(r.status == 200, "{} {}", r.status, r.text());
    let ct = r.header("content-type").unwrap_or_default();
    anyhow::ensure!(ct.contains("xml"), "content-type {ct}");
    let text = r.text();
    anyhow::ensure!(text.starts_with("<?xml"), "{text}");
    let doc = Element::parse(&text)?;
    assert_eq!(doc.name, "ocs");
    assert_eq!(doc.text_at("meta/status")?, "ok");
    assert_eq!(doc.text_at("meta/statuscode")?, code);
    let caps = doc.at("data/capabilities")?;
    assert_eq!(caps.text_at("core/pollinterval")?, "60");
    assert_eq!(caps.text_at("core/webdav-root")?, "remote.php/webdav");
    assert_eq!(
        caps.text_at("core/status/installed")?,
        "1",
        "booleans are 1/0"
    );
    assert_eq!(caps.text_at("core/status/maintenance")?, "0");
    assert_eq!(
        caps.text_at("core/status/productversion")?,
        status_php["productversion"].as_str().unwrap_or_default()
    );
    assert_eq!(caps.text_at("dav/chunking")?, "1.0");
    assert_eq!(caps.text_at("dav/chunkingParallelUploadDisabled")?, "0");
    assert_eq!(caps.text_at("files/bigfilechunking")?, "1");
    assert_eq!(caps.text_at("files/privateLinks")?, "1");
    assert_eq!(caps.text_at("files/versioning")?, "1");
    assert_eq!(caps.text_at("dav/trashbin")?, "1.0");
    assert!(caps.at("files/blacklisted_files")?.children.is_empty());
    assert_eq!(caps.text_at("files/tus_support/version")?, "1.0.0");
    assert_eq!(caps.text_at("files/tus_support/resumable")?, "1.0.0");
    assert_eq!(
        caps.text_at("files/tus_support/extension")?,
        "creation,creation-with-upload"
    );
    assert_eq!(
        caps.text_at("files/tus_support/max_chunk_size")?,
        "10000000"
    );
    assert_eq!(caps.text_at("files/tus_support/http_method_override")?, "");
    let types: Vec<(&str, &str)> = caps
        .at("checksums/supportedTypes")?
        .children
        .iter()
        .map(|e| (e.name.as_str(), e.text.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("element", "SHA1"),
            ("element", "MD5"),
            ("element", "Adler32")
        ]
    );
    assert_eq!(caps.text_at("checksums/preferredUploadType")?, "SHA1");
    assert_eq!(caps.text_at("files_sharing/api_enabled")?, "1");
    assert_eq!(caps.text_at("spaces/enabled")?, "1");
    assert_eq!(caps.text_at("spaces/version")?, "1.0.0");
    assert_eq!(
        doc.text_at("data/version/string")?,
        status_php["versionstring"].as_str().unwrap_or_default()
    );
    Ok(())
}

#[tokio::test]
async fn capabilities_in_every_version_and_format() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;
    let status_php = get(a, "/status.php", &[]).await?.json()?;
    let auth = [ADMIN, OCS_HEADER];

    let v1 = get(a, "/ocs/v1.php/cloud/capabilities?format=json", &auth).await?;
    check_caps_json(&v1, 100, &status_php).context("v1 json")?;
    let v2 = get(a, "/ocs/v2.php/cloud/capabilities?format=json", &auth).await?;
    check_caps_json(&v2, 200, &status_php).context("v2 json")?;
    assert_eq!(
        v1.json()?["ocs"]["data"],
        v2.json()?["ocs"]["data"],
        "v1 and v2 differ only in the envelope"
    );

    let x1 = get(a, "/ocs/v1.php/cloud/capabilities", &auth).await?;
    check_caps_xml(&x1, "100", &status_php).context("v1 xml")?;
    let x2 = get(a, "/ocs/v2.php/cloud/capabilities?format=xml", &auth).await?;
    check_caps_xml(&x2, "200", &status_php).context("v2 xml")?;

    // Without credentials, as oCIS: clients read capabilities before they log in.
    let anon = get(a, "/ocs/v1.php/cloud/capabilities?format=json", &[]).await?;
    check_caps_json(&anon, 100, &status_php).context("anonymous v1 json")?;
    let anon = get(a, "/ocs/v2.php/cloud/capabilities", &[]).await?;
    check_caps_xml(&anon, "200", &status_php).context("anonymous v2 xml")?;
    Ok(())
}

#[tokio::test]
async fn cloud_user_for_each_caller() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;

    for (path, code) in [
        ("/ocs/v1.php/cloud/user?format=json", 100),
        ("/ocs/v2.php/cloud/user?format=json", 200),
    ] {
        let r = get(a, path, &[ADMIN, OCS_HEADER]).await?;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let v = r.json()?;
        assert_eq!(v["ocs"]["meta"]["statuscode"], code, "{path}");
        let data = &v["ocs"]["data"];
        assert_eq!(data["id"], "admin");
        assert!(data["display-name"].is_string());
        assert!(data["email"].is_string());
        assert_eq!(data["user-type"], "primary");
    }
    let x = get(a, "/ocs/v1.php/cloud/user", &[ADMIN]).await?;
    assert_eq!(x.status, 200);
    let doc = Element::parse(&x.text())?;
    assert_eq!(doc.text_at("meta/statuscode")?, "100");
    assert_eq!(doc.text_at("data/id")?, "admin");
    assert_eq!(doc.text_at("data/user-type")?, "primary");

    let created = send(
        a,
        "POST",
        "/graph/v1.0/users",
        &[ADMIN, ("content-type", "application/json")],
        r#"{"onPremisesSamAccountName":"bob","displayName":"Bob <B>","mail":"bob@example.org","passwordProfile":{"password":"bob-pass"}}"#,
    )
    .await?;
    assert_eq!(created.status, 201, "{}", created.text());
    let r = get(a, "/ocs/v2.php/cloud/user?format=json", &[BOB, OCS_HEADER]).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    let data = r.json()?["ocs"]["data"].clone();
    assert_eq!(data["id"], "bob");
    assert_eq!(data["display-name"], "Bob <B>");
    assert_eq!(data["email"], "bob@example.org");
    let x = get(a, "/ocs/v2.php/cloud/user", &[BOB]).await?;
    let doc = Element::parse(&x.text())?;
    assert_eq!(
        doc.text_at("data/display-name")?,
        "Bob <B>",
        "escaped and back"
    );

    // Unauthenticated or with a wrong password: the proxy's 401 with its challenge.
    for path in [
        "/ocs/v1.php/cloud/user?format=json",
        "/ocs/v2.php/cloud/user",
    ] {
        let r = get(a, path, &[OCS_HEADER]).await?;
        assert_eq!(r.status, 401, "{path}: {}", r.text());
        assert!(r.header("www-authenticate").is_some(), "{path}");
        let wrong = ("authorization", "Basic Ym9iOndyb25n"); // bob:wrong
        assert_eq!(get(a, path, &[wrong]).await?.status, 401, "{path}");
    }
    Ok(())
}

#[tokio::test]
async fn unknown_ocs_paths_and_notifications() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;

    // v1 says "not found" in the envelope only; v2 in the HTTP status as well.
    let r = get(a, "/ocs/v1.php/cloud/nothing?format=json", &[ADMIN]).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()?["ocs"]["meta"]["statuscode"], 998);
    assert_eq!(r.json()?["ocs"]["meta"]["status"], "error");
    let r = get(a, "/ocs/v2.php/apps/nothing/api/v1/x?format=json", &[ADMIN]).await?;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()?["ocs"]["meta"]["statuscode"], 998);
    let r = send(a, "POST", "/ocs/v2.php/cloud/nothing", &[ADMIN], "x").await?;
    assert_eq!(r.status, 404);
    let doc = Element::parse(&r.text())?;
    assert_eq!(doc.text_at("meta/statuscode")?, "998");
    // Unknown OCS paths are not a way around authentication.
    assert_eq!(get(a, "/ocs/v1.php/cloud/nothing", &[]).await?.status, 401);

    // Advertised in the capabilities, so it answers: an empty list.
    let r = get(
        a,
        "/ocs/v2.php/apps/notifications/api/v1/notifications?format=json",
        &[ADMIN],
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()?["ocs"]["data"], serde_json::json!([]));
    Ok(())
}
