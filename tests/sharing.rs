//! Sharing end to end through the single binary: user shares with roles (read under
//! `Shares/`, write refused then allowed, revocation at once), no way out of a shared folder,
//! group shares that follow membership, pending shares, public links (read, password with
//! throttling, expiry, upload-only), the OCS answers field by field, and the events.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use arca_tests::{HttpResponse, Launch, Server, TempDir, eventually, free_addr, send};
use base64::Engine as _;
use serde_json::Value;

const READY: Duration = Duration::from_secs(20);
const ADMIN_PASSWORD: &str = "admin-secret";
const OCS: &str = "/ocs/v2.php/apps/files_sharing/api/v1";

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

struct Env {
    server: Server,
}

impl Env {
    async fn start(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut launch = Launch::arca(dir).env("ARCA_ADMIN_PASSWORD", ADMIN_PASSWORD);
        for (k, v) in settings {
            launch = launch.set(k, v);
        }
        let mut server = launch.spawn()?;
        server.wait_ready(READY).await?;
        Ok(Self { server })
    }

    fn addr(&self) -> &str {
        &self.server.public
    }

    /// One request as `user` (whose password is `USER-pw`; the admin's is ADMIN_PASSWORD).
    async fn req(
        &self,
        user: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> anyhow::Result<HttpResponse> {
        let password = if user == "admin" {
            ADMIN_PASSWORD.to_owned()
        } else {
            format!("{user}-pw")
        };
        let auth = basic(user, &password);
        let mut all = vec![("authorization", auth.as_str())];
        all.extend_from_slice(headers);
        send(self.addr(), method, path, &all, body.to_owned()).await
    }

    /// Creates a user through the Graph API; its id.
    async fn user(&self, name: &str) -> anyhow::Result<String> {
        let body = format!(
            r#"{{"onPremisesSamAccountName":"{name}","displayName":"{name} Display","mail":"{name}@example.org","passwordProfile":{{"password":"{name}-pw"}}}}"#
        );
        let r = self
            .req(
                "admin",
                "POST",
                "/graph/v1.0/users",
                &[("content-type", "application/json")],
                &body,
            )
            .await?;
        anyhow::ensure!(r.status == 201, "create {name}: {} {}", r.status, r.text());
        Ok(r.json()?["id"].as_str().context("user id")?.to_owned())
    }

    /// An OCS call as `user` with a form body; the parsed JSON answer.
    async fn ocs(
        &self,
        user: &str,
        method: &str,
        path: &str,
        form: &str,
    ) -> anyhow::Result<(u16, Value)> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let r = self
            .req(
                user,
                method,
                &format!("{OCS}{path}{sep}format=json"),
                &[("content-type", "application/x-www-form-urlencoded")],
                form,
            )
            .await?;
        let v = r.json().with_context(|| format!("{method} {path}"))?;
        Ok((r.status, v))
    }

    async fn put(&self, user: &str, path: &str, body: &str) -> anyhow::Result<u16> {
        Ok(self.req(user, "PUT", path, &[], body).await?.status)
    }
}

fn files(user: &str, rest: &str) -> String {
    format!("/remote.php/dav/files/{user}{rest}")
}

/// A Depth 1 PROPFIND's hrefs and the body.
async fn listing(env: &Env, user: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let r = env
        .req(user, "PROPFIND", path, &[("depth", "1")], "")
        .await?;
    Ok((r.status, r.text()))
}

async fn prop(env: &Env, user: &str, path: &str, name: &str) -> anyhow::Result<String> {
    let body = format!(
        r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><{name}/></d:prop></d:propfind>"#
    );
    let r = env
        .req(user, "PROPFIND", path, &[("depth", "0")], &body)
        .await?;
    anyhow::ensure!(
        r.status == 207,
        "PROPFIND {path}: {} {}",
        r.status,
        r.text()
    );
    let text = r.text();
    let open = format!("<{name}>");
    let Some(start) = text.find(&open) else {
        return Ok(String::new());
    };
    let start = start + open.len();
    let end = text[start..]
        .find(&format!("</{name}>"))
        .context("unterminated")?
        + start;
    Ok(text[start..end].to_owned())
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[tokio::test]
async fn user_share_viewer_then_editor_then_revoked() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    let alice = env.user("alice").await?;
    let bob = env.user("bob").await?;
    env.user("carol").await?;
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/Docs"), &[], "")
            .await?
            .status,
        201
    );
    assert_eq!(
        env.put("alice", &files("alice", "/Docs/a.txt"), "hello bob")
            .await?,
        201
    );
    assert_eq!(
        env.put("alice", &files("alice", "/Secret.txt"), "not for bob")
            .await?,
        201
    );

    // Share as viewer; the OCS answer field by field.
    let (status, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FDocs&shareType=0&shareWith=bob&permissions=1",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ocs"]["meta"]["statuscode"], 200);
    assert_eq!(v["ocs"]["meta"]["status"], "ok");
    let s = &v["ocs"]["data"];
    let id = s["id"].as_str().context("id")?.to_owned();
    assert_eq!(s["share_type"], 0);
    assert_eq!(s["uid_owner"], "alice");
    assert_eq!(s["displayname_owner"], "alice Display");
    assert_eq!(s["uid_file_owner"], "alice");
    assert_eq!(s["permissions"], 1);
    assert_eq!(s["share_with"], "bob");
    assert_eq!(s["share_with_displayname"], "bob Display");
    assert_eq!(s["path"], "/Docs");
    assert_eq!(s["item_type"], "folder");
    assert_eq!(s["mimetype"], "httpd/unix-directory");
    assert_eq!(s["file_target"], "/Docs");
    assert_eq!(s["expiration"], Value::Null);
    assert_eq!(s["token"], Value::Null);
    assert!(
        s["stime"].as_u64().is_some_and(|t| t + 60 > now_secs()),
        "{s}"
    );
    assert!(
        s["item_source"].as_str().is_some_and(|i| i.contains('!')),
        "{s}"
    );
    assert_eq!(s["item_source"], s["file_source"]);
    // The same share again is refused.
    let (status, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FDocs&shareType=0&shareWith=bob",
        )
        .await?;
    assert_eq!(
        (status, v["ocs"]["meta"]["statuscode"].as_u64()),
        (403, Some(403)),
        "{v}"
    );
    // Unknown path and unknown user.
    let (status, _) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FNope&shareType=0&shareWith=bob",
        )
        .await?;
    assert_eq!(status, 404);
    let (status, _) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FDocs&shareType=0&shareWith=nobody",
        )
        .await?;
    assert_eq!(status, 404);

    // The owner's PROPFIND shows the share.
    let types = prop(&env, "alice", &files("alice", "/Docs"), "oc:share-types").await?;
    assert_eq!(types, "<oc:share-type>0</oc:share-type>");
    assert_eq!(
        prop(
            &env,
            "alice",
            &files("alice", "/Secret.txt"),
            "oc:share-types"
        )
        .await?,
        ""
    );

    // Bob: listed under Shares/, readable, not writable.
    let (status, root) = listing(&env, "bob", &files("bob", "/")).await?;
    assert_eq!(status, 207);
    assert!(root.contains("/remote.php/dav/files/bob/Shares/"), "{root}");
    let (status, shares) = listing(&env, "bob", &files("bob", "/Shares")).await?;
    assert_eq!(status, 207, "{shares}");
    assert!(
        shares.contains("/remote.php/dav/files/bob/Shares/Docs/"),
        "{shares}"
    );
    let (status, docs) = listing(&env, "bob", &files("bob", "/Shares/Docs")).await?;
    assert_eq!(status, 207, "{docs}");
    assert!(
        docs.contains("/remote.php/dav/files/bob/Shares/Docs/a.txt"),
        "{docs}"
    );
    assert!(!docs.contains("Secret"), "{docs}");
    let got = env
        .req("bob", "GET", &files("bob", "/Shares/Docs/a.txt"), &[], "")
        .await?;
    assert_eq!((got.status, got.text().as_str()), (200, "hello bob"));
    assert_eq!(
        prop(&env, "bob", &files("bob", "/Shares/Docs"), "oc:permissions").await?,
        "S"
    );
    assert_eq!(
        env.put("bob", &files("bob", "/Shares/Docs/new.txt"), "x")
            .await?,
        403
    );
    assert_eq!(
        env.put("bob", &files("bob", "/Shares/Docs/a.txt"), "x")
            .await?,
        403
    );
    assert_eq!(
        env.req("bob", "MKCOL", &files("bob", "/Shares/Docs/d"), &[], "")
            .await?
            .status,
        403
    );
    assert_eq!(
        env.req(
            "bob",
            "DELETE",
            &files("bob", "/Shares/Docs/a.txt"),
            &[],
            ""
        )
        .await?
        .status,
        403
    );
    // The Shares space shows the same mount.
    let shares_space =
        "/dav/spaces/a0ca6a90-a365-4782-871e-d44447bbc668$a0ca6a90-a365-4782-871e-d44447bbc668";
    let got = env
        .req("bob", "GET", &format!("{shares_space}/Docs/a.txt"), &[], "")
        .await?;
    assert_eq!((got.status, got.text().as_str()), (200, "hello bob"));
    // No reshare for a viewer.
    let (status, v) = env
        .ocs(
            "bob",
            "POST",
            "/shares",
            "path=%2FShares%2FDocs&shareType=0&shareWith=carol",
        )
        .await?;
    assert_eq!(status, 403, "{v}");
    // Bob's view of the share.
    let (status, v) = env
        .ocs("bob", "GET", "/shares?shared_with_me=true", "")
        .await?;
    assert_eq!(status, 200);
    let mine = &v["ocs"]["data"][0];
    assert_eq!(mine["id"], id.as_str());
    assert_eq!(mine["path"], "/Shares/Docs");
    assert_eq!(mine["file_target"], "/Shares/Docs");
    assert_eq!(mine["state"], 0);
    assert_eq!(mine["uid_owner"], "alice");

    // No way out of the shared folder.
    let escape = env
        .req(
            "bob",
            "GET",
            &files("bob", "/Shares/Docs/../Secret.txt"),
            &[],
            "",
        )
        .await?;
    assert!(
        matches!(escape.status, 400 | 404),
        "{} {}",
        escape.status,
        escape.text()
    );
    let escape = env
        .req(
            "bob",
            "GET",
            &files("bob", "/Shares/Docs/%2e%2e/Secret.txt"),
            &[],
            "",
        )
        .await?;
    assert!(matches!(escape.status, 400 | 404), "{}", escape.status);
    let space = prop(&env, "alice", &files("alice", "/Docs"), "oc:spaceid").await?;
    let direct = env
        .req(
            "bob",
            "GET",
            &format!("/dav/spaces/{space}/Secret.txt"),
            &[],
            "",
        )
        .await?;
    assert_eq!(direct.status, 404, "a sibling by space id");
    let direct = env
        .req(
            "bob",
            "PROPFIND",
            &format!("/dav/spaces/{space}/"),
            &[("depth", "1")],
            "",
        )
        .await?;
    assert_eq!(
        direct.status,
        404,
        "the owner's root by space id: {}",
        direct.text()
    );
    let direct = env
        .req(
            "bob",
            "GET",
            &format!("/dav/spaces/{space}/Docs/a.txt"),
            &[],
            "",
        )
        .await?;
    assert_eq!(direct.status, 200, "inside the share by space id");
    let (status, v) = env
        .ocs(
            "bob",
            "GET",
            "/shares?path=%2FShares%2FDocs%2F..%2FSecret.txt",
            "",
        )
        .await?;
    assert_eq!(status, 404, "{v}");
    let moved = env
        .req(
            "bob",
            "MOVE",
            &files("bob", "/Shares/Docs/a.txt"),
            &[(
                "destination",
                &format!("http://{}{}", env.addr(), files("bob", "/stolen.txt")),
            )],
            "",
        )
        .await?;
    assert!(
        !(200..300).contains(&moved.status),
        "MOVE out: {}",
        moved.status
    );
    let copied = env
        .req(
            "bob",
            "COPY",
            &files("bob", "/Shares/Docs/a.txt"),
            &[(
                "destination",
                &format!("http://{}{}", env.addr(), files("bob", "/copy.txt")),
            )],
            "",
        )
        .await?;
    assert!(
        !(200..300).contains(&copied.status),
        "COPY to another space: {}",
        copied.status
    );
    assert_eq!(
        env.req("bob", "GET", &files("bob", "/stolen.txt"), &[], "")
            .await?
            .status,
        404
    );
    assert_eq!(
        env.req("bob", "GET", &files("bob", "/copy.txt"), &[], "")
            .await?
            .status,
        404
    );
    assert_eq!(
        env.req("alice", "GET", &files("alice", "/Docs/a.txt"), &[], "")
            .await?
            .status,
        200
    );
    // Carol has nothing.
    let (_, carol_root) = listing(&env, "carol", &files("carol", "/")).await?;
    assert!(!carol_root.contains("Shares"), "{carol_root}");
    assert_eq!(
        env.req(
            "carol",
            "GET",
            &format!("/dav/spaces/{space}/Docs/a.txt"),
            &[],
            ""
        )
        .await?
        .status,
        404
    );

    // Upgrade to editor: bob writes, alice sees it.
    let (status, v) = env
        .ocs("alice", "PUT", &format!("/shares/{id}"), "permissions=15")
        .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ocs"]["data"]["permissions"], 15);
    assert_eq!(
        env.put("bob", &files("bob", "/Shares/Docs/new.txt"), "from bob")
            .await?,
        201
    );
    let got = env
        .req("alice", "GET", &files("alice", "/Docs/new.txt"), &[], "")
        .await?;
    assert_eq!(got.text(), "from bob");
    assert_eq!(
        prop(&env, "bob", &files("bob", "/Shares/Docs"), "oc:permissions").await?,
        "SNVCK"
    );
    let renamed = env
        .req(
            "bob",
            "MOVE",
            &files("bob", "/Shares/Docs/new.txt"),
            &[(
                "destination",
                &format!(
                    "http://{}{}",
                    env.addr(),
                    files("bob", "/Shares/Docs/renamed.txt")
                ),
            )],
            "",
        )
        .await?;
    assert_eq!(renamed.status, 201, "{}", renamed.text());
    // The shared folder itself stays the owner's: not deleted, not moved away.
    assert_eq!(
        env.req("bob", "DELETE", &files("bob", "/Shares/Docs"), &[], "")
            .await?
            .status,
        403
    );

    // Revoke: 404 on the very next request, the listing is empty again.
    let (status, _) = env
        .ocs("alice", "DELETE", &format!("/shares/{id}"), "")
        .await?;
    assert_eq!(status, 200);
    assert_eq!(
        env.req("bob", "GET", &files("bob", "/Shares/Docs/a.txt"), &[], "")
            .await?
            .status,
        404
    );
    assert_eq!(
        env.req(
            "bob",
            "GET",
            &format!("/dav/spaces/{space}/Docs/a.txt"),
            &[],
            ""
        )
        .await?
        .status,
        404
    );
    let (_, root) = listing(&env, "bob", &files("bob", "/")).await?;
    assert!(!root.contains("Shares"), "{root}");
    let (status, _) = env
        .ocs("alice", "GET", &format!("/shares/{id}"), "")
        .await?;
    assert_eq!(status, 404);

    // Events: created, updated, removed, each with ids, actor and time.
    for kind in ["share.created", "share.updated", "share.removed"] {
        let e = env
            .server
            .proc
            .wait_event(Duration::from_secs(5), kind, |e| {
                e["fields"]["message"] == "event" && e["fields"]["kind"] == kind
            })
            .await?;
        assert_eq!(e["fields"]["actor"], alice.as_str(), "{e}");
        let attrs: Value = serde_json::from_str(e["fields"]["attrs"].as_str().unwrap_or("{}"))?;
        assert_eq!(attrs["share_id"], id.as_str(), "{e}");
        assert_eq!(attrs["grantee_id"], bob.as_str(), "{e}");
        assert!(
            e["fields"]["id"].as_str().is_some_and(|i| i.len() == 32),
            "{e}"
        );
        assert!(
            e["fields"]["at_ms"]
                .as_u64()
                .is_some_and(|t| t / 1000 + 60 > now_secs()),
            "{e}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn ocs_share_in_xml_v1_and_sharees() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    env.user("bob").await?;
    env.user("bobby").await?;
    assert_eq!(env.put("alice", &files("alice", "/f.txt"), "x").await?, 201);
    let r = env
        .req(
            "alice",
            "POST",
            "/ocs/v1.php/apps/files_sharing/api/v1/shares",
            &[("content-type", "application/x-www-form-urlencoded")],
            "path=/f.txt&shareType=0&shareWith=bob&permissions=15",
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    let xml = r.text();
    for part in [
        "<statuscode>100</statuscode>",
        "<status>ok</status>",
        "<share_type>0</share_type>",
        "<item_type>file</item_type>",
        "<mimetype>text/plain</mimetype>",
        // A file share cannot create or delete: 15 becomes read + update.
        "<permissions>3</permissions>",
        "<share_with>bob</share_with>",
        "<path>/f.txt</path>",
    ] {
        assert!(xml.contains(part), "{part} missing in {xml}");
    }
    // v1 answers errors with HTTP 200 and the code in the envelope.
    let r = env
        .req(
            "alice",
            "GET",
            "/ocs/v1.php/apps/files_sharing/api/v1/shares/nope",
            &[],
            "",
        )
        .await?;
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("<statuscode>404</statuscode>"),
        "{}",
        r.text()
    );

    // Resharing: only with the share bit, and never more than one holds.
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/Dir"), &[], "")
            .await?
            .status,
        201
    );
    let (status, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FDir&shareType=0&shareWith=bob&permissions=17",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    let (status, v) = env
        .ocs(
            "bob",
            "POST",
            "/shares",
            "path=%2FShares%2FDir&shareType=0&shareWith=bobby&permissions=3",
        )
        .await?;
    assert_eq!(status, 403, "more than bob holds: {v}");
    let (status, v) = env
        .ocs(
            "bob",
            "POST",
            "/shares",
            "path=%2FShares%2FDir&shareType=0&shareWith=bobby&permissions=1",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ocs"]["data"]["uid_owner"], "bob");
    assert_eq!(v["ocs"]["data"]["uid_file_owner"], "alice");
    let r = env
        .req(
            "bobby",
            "PROPFIND",
            &files("bobby", "/Shares/Dir"),
            &[("depth", "0")],
            "",
        )
        .await?;
    assert_eq!(r.status, 207, "{}", r.text());

    let (status, v) = env.ocs("alice", "GET", "/sharees?search=bob", "").await?;
    assert_eq!(status, 200, "{v}");
    let data = &v["ocs"]["data"];
    assert_eq!(
        data["exact"]["users"][0]["value"]["shareWith"], "bob",
        "{v}"
    );
    assert_eq!(data["exact"]["users"][0]["value"]["shareType"], 0);
    assert_eq!(data["users"][0]["value"]["shareWith"], "bobby", "{v}");
    assert_eq!(data["users"].as_array().map(Vec::len), Some(1), "{v}");
    let (_, v) = env.ocs("alice", "GET", "/sharees?search=alice", "").await?;
    assert_eq!(
        v["ocs"]["data"]["exact"]["users"].as_array().map(Vec::len),
        Some(0),
        "not yourself"
    );
    Ok(())
}

/// Groups through the Graph API as admin; the group's id.
async fn group(env: &Env, name: &str, members: &[&str]) -> anyhow::Result<String> {
    let r = env
        .req(
            "admin",
            "POST",
            "/graph/v1.0/groups",
            &[("content-type", "application/json")],
            &format!(r#"{{"displayName":"{name}"}}"#),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "group: {} {}", r.status, r.text());
    let id = r.json()?["id"].as_str().context("group id")?.to_owned();
    for m in members {
        let r = env
            .req(
                "admin",
                "POST",
                &format!("/graph/v1.0/groups/{id}/members/$ref"),
                &[("content-type", "application/json")],
                &format!(r#"{{"@odata.id":"http://x/graph/v1.0/users/{m}"}}"#),
            )
            .await?;
        anyhow::ensure!(r.status == 204, "add member: {} {}", r.status, r.text());
    }
    Ok(id)
}

#[tokio::test]
async fn group_share_follows_membership() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    let bob = env.user("bob").await?;
    let carol = env.user("carol").await?;
    env.user("dave").await?;
    let team = group(&env, "team", &[&bob, &carol]).await?;
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/Proj"), &[], "")
            .await?
            .status,
        201
    );
    assert_eq!(
        env.put("alice", &files("alice", "/Proj/plan.txt"), "plan")
            .await?,
        201
    );
    let (status, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FProj&shareType=1&shareWith=team",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ocs"]["data"]["share_type"], 1);
    assert_eq!(v["ocs"]["data"]["share_with"], "team");
    let (_, v) = env.ocs("alice", "GET", "/sharees?search=tea", "").await?;
    assert_eq!(
        v["ocs"]["data"]["groups"][0]["value"]["shareWith"], "team",
        "{v}"
    );

    for user in ["bob", "carol"] {
        let got = env
            .req(user, "GET", &files(user, "/Shares/Proj/plan.txt"), &[], "")
            .await?;
        assert_eq!((got.status, got.text().as_str()), (200, "plan"), "{user}");
    }
    assert_eq!(
        env.req(
            "dave",
            "GET",
            &files("dave", "/Shares/Proj/plan.txt"),
            &[],
            ""
        )
        .await?
        .status,
        404
    );

    // Carol leaves the group: her access ends with her very next request; bob keeps his.
    let r = env
        .req(
            "admin",
            "DELETE",
            &format!("/graph/v1.0/groups/{team}/members/{carol}/$ref"),
            &[],
            "",
        )
        .await?;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        env.req(
            "carol",
            "GET",
            &files("carol", "/Shares/Proj/plan.txt"),
            &[],
            ""
        )
        .await?
        .status,
        404
    );
    assert_eq!(
        env.req(
            "bob",
            "GET",
            &files("bob", "/Shares/Proj/plan.txt"),
            &[],
            ""
        )
        .await?
        .status,
        200
    );
    Ok(())
}

#[tokio::test]
async fn pending_shares_wait_for_acceptance() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[("sharing.auto_accept", "false")]).await?;
    env.user("alice").await?;
    env.user("bob").await?;
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/Docs"), &[], "")
            .await?
            .status,
        201
    );
    let (_, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FDocs&shareType=0&shareWith=bob",
        )
        .await?;
    let id = v["ocs"]["data"]["id"].as_str().context("id")?.to_owned();
    assert_eq!(
        env.req(
            "bob",
            "PROPFIND",
            &files("bob", "/Shares/Docs"),
            &[("depth", "0")],
            ""
        )
        .await?
        .status,
        404
    );
    let (_, v) = env
        .ocs("bob", "GET", "/shares?shared_with_me=true&state=1", "")
        .await?;
    assert_eq!(v["ocs"]["data"][0]["id"], id.as_str(), "{v}");
    assert_eq!(v["ocs"]["data"][0]["state"], 1);
    let (status, v) = env
        .ocs("bob", "POST", &format!("/shares/pending/{id}"), "")
        .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ocs"]["data"][0]["state"], 0);
    assert_eq!(
        env.req(
            "bob",
            "PROPFIND",
            &files("bob", "/Shares/Docs"),
            &[("depth", "0")],
            ""
        )
        .await?
        .status,
        207
    );
    // Declined: gone from the jail again.
    let (status, _) = env
        .ocs("bob", "DELETE", &format!("/shares/pending/{id}"), "")
        .await?;
    assert_eq!(status, 200);
    assert_eq!(
        env.req(
            "bob",
            "PROPFIND",
            &files("bob", "/Shares/Docs"),
            &[("depth", "0")],
            ""
        )
        .await?
        .status,
        404
    );
    Ok(())
}

async fn link(env: &Env, form: &str) -> anyhow::Result<(String, String)> {
    let (status, v) = env.ocs("alice", "POST", "/shares", form).await?;
    anyhow::ensure!(status == 200, "link: {v}");
    let d = &v["ocs"]["data"];
    Ok((
        d["token"].as_str().context("token")?.to_owned(),
        d["id"].as_str().context("id")?.to_owned(),
    ))
}

/// A request without a login, with optional headers.
async fn anon(
    env: &Env,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<HttpResponse> {
    send(env.addr(), method, path, headers, body.to_owned()).await
}

#[tokio::test]
async fn public_links_read_password_expiry_and_drop() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[("proxy.auth.max_failures", "4")]).await?;
    env.user("alice").await?;
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/Pub"), &[], "")
            .await?
            .status,
        201
    );
    assert_eq!(
        env.put("alice", &files("alice", "/Pub/p.txt"), "public")
            .await?,
        201
    );
    assert_eq!(
        env.put("alice", &files("alice", "/Private.txt"), "private")
            .await?,
        201
    );
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/Drop"), &[], "")
            .await?
            .status,
        201
    );

    // Read-only link.
    let (status, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FPub&shareType=3&permissions=1&name=mine",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    let d = &v["ocs"]["data"];
    let token = d["token"].as_str().context("token")?.to_owned();
    assert!(token.len() >= 32, "at least 128 bits: {token}");
    assert_eq!(d["share_type"], 3);
    assert_eq!(d["name"], "mine");
    assert_eq!(d["url"], format!("http://{}/s/{token}", env.addr()));
    assert_eq!(d["share_with"], Value::Null);
    let page = anon(&env, "GET", &format!("/s/{token}"), &[], "").await?;
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(page.text().contains("p.txt"), "{}", page.text());
    for root in ["/remote.php/dav/public-files", "/dav/public-files"] {
        let r = anon(
            &env,
            "PROPFIND",
            &format!("{root}/{token}/"),
            &[("depth", "1")],
            "",
        )
        .await?;
        assert_eq!(r.status, 207, "{}", r.text());
        assert!(
            r.text().contains(&format!("{root}/{token}/p.txt")),
            "{}",
            r.text()
        );
        assert!(!r.text().contains("Private"), "{}", r.text());
        let got = anon(&env, "GET", &format!("{root}/{token}/p.txt"), &[], "").await?;
        assert_eq!((got.status, got.text().as_str()), (200, "public"));
    }
    let put = anon(
        &env,
        "PUT",
        &format!("/dav/public-files/{token}/new.txt"),
        &[],
        "x",
    )
    .await?;
    assert_eq!(put.status, 403, "read-only link: {}", put.text());
    let out = anon(
        &env,
        "GET",
        &format!("/dav/public-files/{token}/../Private.txt"),
        &[],
        "",
    )
    .await?;
    assert!(matches!(out.status, 400 | 404), "{}", out.status);
    assert_eq!(
        anon(&env, "GET", "/s/0123456789abcdef0123456789abcdef", &[], "")
            .await?
            .status,
        404
    );
    env.server
        .proc
        .wait_event(Duration::from_secs(5), "link.accessed", |e| {
            e["fields"]["kind"] == "link.accessed"
                && e["fields"]["actor"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("public:"))
        })
        .await?;

    // Expiry: open now, refused once the time has passed.
    let soon = now_secs() + 2;
    let (y, m, d, hh, mm, ss) = civil(soon);
    let (expiring, _) = link(
        &env,
        &format!("path=%2FPub&shareType=3&permissions=1&expireDate={y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z"),
    )
    .await?;
    let path = format!("/s/{expiring}");
    assert_eq!(anon(&env, "GET", &path, &[], "").await?.status, 200);
    eventually(Duration::from_secs(10), "the link expires", || {
        let path = path.clone();
        let env = &env;
        async move { Ok((anon(env, "GET", &path, &[], "").await?.status == 404).then_some(())) }
    })
    .await?;
    let (status, _) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FPub&shareType=3&expireDate=2001-01-01",
        )
        .await?;
    assert_eq!(status, 400, "an expiry in the past");

    // Upload-only: PUT yes, reading no.
    let (drop, drop_id) = link(&env, "path=%2FDrop&shareType=3&permissions=4").await?;
    let root = format!("/remote.php/dav/public-files/{drop}");
    let put = anon(&env, "PUT", &format!("{root}/in.txt"), &[], "dropped").await?;
    assert_eq!(put.status, 201, "{}", put.text());
    assert_eq!(
        anon(&env, "PROPFIND", &format!("{root}/"), &[("depth", "1")], "")
            .await?
            .status,
        403
    );
    assert_eq!(
        anon(&env, "GET", &format!("{root}/in.txt"), &[], "")
            .await?
            .status,
        403
    );
    let got = env
        .req("alice", "GET", &files("alice", "/Drop/in.txt"), &[], "")
        .await?;
    assert_eq!(got.text(), "dropped");
    // A revoked link stops at once.
    let (status, _) = env
        .ocs("alice", "DELETE", &format!("/shares/{drop_id}"), "")
        .await?;
    assert_eq!(status, 200);
    assert_eq!(
        anon(&env, "PUT", &format!("{root}/again.txt"), &[], "x")
            .await?
            .status,
        404
    );

    // Password: none or wrong is 401, the right one with any user name opens it; wrong ones
    // are throttled like logins.
    let (secret, _) = link(
        &env,
        "path=%2FPub&shareType=3&permissions=1&password=s3cret",
    )
    .await?;
    let dav = format!("/remote.php/dav/public-files/{secret}/");
    let none = anon(&env, "PROPFIND", &dav, &[("depth", "0")], "").await?;
    assert_eq!(none.status, 401);
    assert!(
        none.header("www-authenticate")
            .is_some_and(|h| h.starts_with("Basic"))
    );
    let right = basic("anything", "s3cret");
    let r = anon(
        &env,
        "PROPFIND",
        &dav,
        &[("depth", "0"), ("authorization", &right)],
        "",
    )
    .await?;
    assert_eq!(r.status, 207, "{}", r.text());
    let wrong = basic("public", "guess");
    // The unknown and the revoked token above were this address's first two wrong guesses;
    // two wrong passwords reach the limit of 4.
    for _ in 0..2 {
        let r = anon(
            &env,
            "PROPFIND",
            &dav,
            &[("depth", "0"), ("authorization", &wrong)],
            "",
        )
        .await?;
        assert_eq!(r.status, 401);
    }
    let r = anon(
        &env,
        "PROPFIND",
        &dav,
        &[("depth", "0"), ("authorization", &wrong)],
        "",
    )
    .await?;
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    let r = anon(
        &env,
        "PROPFIND",
        &dav,
        &[("depth", "0"), ("authorization", &right)],
        "",
    )
    .await?;
    assert_eq!(r.status, 429, "throttled even with the right password");
    // A link without a password still opens from this address; logins are not affected.
    assert_eq!(
        anon(&env, "GET", &format!("/s/{token}"), &[], "")
            .await?
            .status,
        200,
        "no password, no throttle"
    );
    assert_eq!(
        env.req(
            "alice",
            "PROPFIND",
            &files("alice", "/"),
            &[("depth", "0")],
            ""
        )
        .await?
        .status,
        207
    );
    Ok(())
}

/// The grouped layout: sharing in the frontend's process, storage-users and storage-system in
/// their own, over TCP. storage-users asks sharing (in another process) for grants.
#[tokio::test]
async fn grouped_processes_enforce_shares_across_the_wire() -> anyhow::Result<()> {
    const SECRET: &str = "0123456789abcdef0123456789abcdef";
    let (dir_f, dir_u, dir_s) = (TempDir::new(), TempDir::new(), TempDir::new());
    let (system, users, sharing) = (
        format!("tcp://{}", free_addr()),
        format!("tcp://{}", free_addr()),
        format!("tcp://{}", free_addr()),
    );
    let mut s = Launch::arca(&dir_s)
        .services("storage-system")
        .set("identity.secret", SECRET)
        .set("registry.kind", "static")
        .set("storage-system.endpoint", &system)
        .env("ARCA_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .spawn()?;
    let mut u = Launch::arca(&dir_u)
        .services("storage-users")
        .set("identity.secret", SECRET)
        .set("registry.kind", "static")
        .set("storage-users.endpoint", &users)
        .set("registry.static.sharing", &sharing)
        .spawn()?;
    let mut f = Launch::arca(&dir_f)
        .services("proxy,frontend,gateway,sharing")
        .set("identity.secret", SECRET)
        .set("registry.kind", "static")
        .set("sharing.endpoint", &sharing)
        // A static registry knows only what it lists, even for services of this process.
        .set("registry.static.sharing", &sharing)
        .set("registry.static.storage-users", &users)
        .set("registry.static.storage-system", &system)
        .spawn()?;
    s.wait_ready(READY).await?;
    f.wait_ready(READY).await?;
    u.wait_ready(READY).await?;
    let env = Env { server: f };
    env.user("alice").await?;
    env.user("bob").await?;
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/Docs"), &[], "")
            .await?
            .status,
        201
    );
    assert_eq!(
        env.put("alice", &files("alice", "/Docs/a.txt"), "across")
            .await?,
        201
    );
    let (status, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FDocs&shareType=0&shareWith=bob",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    let id = v["ocs"]["data"]["id"].as_str().context("id")?.to_owned();
    let got = env
        .req("bob", "GET", &files("bob", "/Shares/Docs/a.txt"), &[], "")
        .await?;
    assert_eq!((got.status, got.text().as_str()), (200, "across"));
    assert_eq!(
        env.put("bob", &files("bob", "/Shares/Docs/b.txt"), "x")
            .await?,
        403
    );
    let (status, _) = env
        .ocs("alice", "DELETE", &format!("/shares/{id}"), "")
        .await?;
    assert_eq!(status, 200);
    assert_eq!(
        env.req("bob", "GET", &files("bob", "/Shares/Docs/a.txt"), &[], "")
            .await?
            .status,
        404
    );
    drop(u);
    drop(s);
    Ok(())
}

/// (year, month, day, hour, minute, second) of unix seconds, UTC.
fn civil(secs: u64) -> (i64, i64, i64, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let t = secs % 86_400;
    (
        yoe + era * 400 + i64::from(m <= 2),
        m,
        d,
        t / 3600,
        t / 60 % 60,
        t % 60,
    )
}
