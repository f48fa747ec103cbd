//! Sharing end to end through every service on the real boot path (in the test process, or
//! the single binary where a test reads its logged events or splits it into processes): user
//! shares with roles (read under `Shares/`, write refused then allowed, revocation at once),
//! no way out of a shared folder,
//! group shares that follow membership, pending shares, public links (read, password with
//! throttling, expiry, upload-only), the OCS answers field by field, and the events.

mod sharing_env;

use std::time::Duration;

use anyhow::Context as _;
use arca_tests::{Launch, TempDir, eventually, free_addr};
use serde_json::Value;
use sharing_env::*;

#[tokio::test]
async fn user_share_viewer_then_editor_then_revoked() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::process(&dir, &[]).await?;
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
            .proc()
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

    // Carol's login is cached by the proxy (with the groups her identity lists) right before
    // she leaves: the share must still stop at once.
    let space = prop(&env, "alice", &files("alice", "/Proj"), "oc:spaceid").await?;
    assert_eq!(
        env.req(
            "carol",
            "GET",
            &format!("/dav/spaces/{space}/Proj/plan.txt"),
            &[],
            ""
        )
        .await?
        .status,
        200
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
            "carol",
            "GET",
            &format!("/dav/spaces/{space}/Proj/plan.txt"),
            &[],
            ""
        )
        .await?
        .status,
        404,
        "by space id"
    );
    let (_, root) = listing(&env, "carol", &files("carol", "/")).await?;
    assert!(!root.contains("Shares"), "{root}");
    let (_, v) = env
        .ocs("carol", "GET", "/shares?shared_with_me=true&state=all", "")
        .await?;
    assert_eq!(v["ocs"]["data"].as_array().map(Vec::len), Some(0), "{v}");
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
    // Accepted again: back.
    let (status, v) = env
        .ocs("bob", "POST", &format!("/shares/pending/{id}"), "")
        .await?;
    assert_eq!(status, 200, "{v}");
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
    Ok(())
}

#[tokio::test]
async fn public_links_read_password_expiry_and_drop() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::process(&dir, &[("proxy.auth.max_failures", "4")]).await?;
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
    env.proc()
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
    let env = Env::on(f);
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

/// alice's tree for the exposure and open-session tests: `/Docs` (shared), `/Docs/a.txt`,
/// `/Docs/Sub/s.txt`, and the siblings `/Secret.txt` and `/Other/o.txt`.
async fn alice_tree(env: &Env) -> anyhow::Result<()> {
    for folder in ["/Docs", "/Docs/Sub", "/Other"] {
        let r = env
            .req("alice", "MKCOL", &files("alice", folder), &[], "")
            .await?;
        anyhow::ensure!(r.status == 201, "MKCOL {folder}: {}", r.status);
    }
    for (path, body) in [
        ("/Docs/a.txt", "in share"),
        ("/Docs/Sub/s.txt", "deeper"),
        ("/Secret.txt", "secret"),
        ("/Other/o.txt", "other"),
    ] {
        anyhow::ensure!(env.put("alice", &files("alice", path), body).await? == 201);
    }
    Ok(())
}

/// alice shares `/Docs` with bob; the share's id.
async fn share_docs(env: &Env, permissions: u32) -> anyhow::Result<String> {
    let (status, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            &format!("path=%2FDocs&shareType=0&shareWith=bob&permissions={permissions}"),
        )
        .await?;
    anyhow::ensure!(status == 200, "share: {v}");
    Ok(v["ocs"]["data"]["id"].as_str().context("id")?.to_owned())
}

#[tokio::test]
async fn downgrade_and_revoke_reach_open_sessions() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    env.user("bob").await?;
    alice_tree(&env).await?;
    let id = share_docs(&env, 15).await?;
    let space = prop(&env, "alice", &files("alice", "/Docs"), "oc:spaceid").await?;
    let auth = basic("bob", "bob-pw");
    let bob = [("authorization", auth.as_str())];
    // One keep-alive connection for everything bob does (a sync client's session); his login
    // is in the proxy's credential cache from the first request on.
    let mut conn = Conn::open(env.addr()).await?;
    let jail = |rest: &str| files("bob", &format!("/Shares/Docs{rest}"));
    let by_space = |rest: &str| format!("/dav/spaces/{space}/Docs{rest}");
    assert_eq!(
        conn.send("PUT", &jail("/b.txt"), &bob, "editor")
            .await?
            .status,
        201
    );
    assert_eq!(
        conn.send("PUT", &by_space("/c.txt"), &bob, "editor")
            .await?
            .status,
        201
    );

    // Downgraded to viewer: the very next write is refused, on both paths; reading goes on.
    let (status, v) = env
        .ocs("alice", "PUT", &format!("/shares/{id}"), "permissions=1")
        .await?;
    assert_eq!(status, 200, "{v}");
    for path in [jail("/b2.txt"), by_space("/b2.txt"), jail("/a.txt")] {
        let r = conn.send("PUT", &path, &bob, "viewer").await?;
        assert_eq!(r.status, 403, "PUT {path}: {}", r.text());
    }
    for (method, path) in [("DELETE", jail("/a.txt")), ("MKCOL", jail("/d"))] {
        let r = conn.send(method, &path, &bob, "").await?;
        assert_eq!(r.status, 403, "{method} {path}: {}", r.text());
    }
    let r = conn.send("GET", &jail("/a.txt"), &bob, "").await?;
    assert_eq!((r.status, r.text().as_str()), (200, "in share"));
    let body = r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><oc:permissions/></d:prop></d:propfind>"#;
    let r = conn
        .send("PROPFIND", &jail(""), &[bob[0], ("depth", "0")], body)
        .await?;
    assert!(
        r.text().contains("<oc:permissions>S</oc:permissions>"),
        "{}",
        r.text()
    );

    // Revoked: the next request finds nothing, by either path, and the jail is empty.
    let (status, _) = env
        .ocs("alice", "DELETE", &format!("/shares/{id}"), "")
        .await?;
    assert_eq!(status, 200);
    for path in [jail("/a.txt"), by_space("/a.txt"), jail("/Sub/s.txt")] {
        let r = conn.send("GET", &path, &bob, "").await?;
        assert_eq!(r.status, 404, "GET {path}");
    }
    let r = conn
        .send(
            "PROPFIND",
            &files("bob", "/"),
            &[bob[0], ("depth", "1")],
            "",
        )
        .await?;
    assert_eq!(r.status, 207);
    assert!(!r.text().contains("Shares"), "{}", r.text());
    assert_eq!(
        conn.send("PUT", &jail("/late.txt"), &bob, "x")
            .await?
            .status,
        404
    );
    for (path, want) in [
        ("/Docs/b.txt", 200),
        ("/Docs/c.txt", 200),
        ("/Docs/b2.txt", 404),
    ] {
        let r = env
            .req("alice", "GET", &files("alice", path), &[], "")
            .await?;
        assert_eq!(r.status, want, "{path}");
    }
    Ok(())
}

#[tokio::test]
async fn no_share_exposes_a_sibling() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    env.user("bob").await?;
    alice_tree(&env).await?;
    assert_eq!(
        env.put("bob", &files("bob", "/Mine.txt"), "bob's").await?,
        201
    );
    // Editor: the widest a share gets, so refusals below are about the boundary, not the role.
    share_docs(&env, 15).await?;
    let space = prop(&env, "alice", &files("alice", "/Docs"), "oc:spaceid").await?;
    let root_id = prop(&env, "alice", &files("alice", "/"), "oc:fileid").await?;
    let docs_id = prop(&env, "alice", &files("alice", "/Docs"), "oc:fileid").await?;
    assert!(!root_id.is_empty() && !docs_id.is_empty());
    let url = |path: &str| format!("http://{}{path}", env.addr());

    // Paths that climb out, in every spelling: refused before anything is looked up.
    for path in [
        files("bob", "/Shares/Docs/../Secret.txt"),
        files("bob", "/Shares/Docs/%2e%2e/Secret.txt"),
        files("bob", "/Shares/Docs/%2E%2E/Secret.txt"),
        files("bob", "/Shares/Docs/Sub/../../Secret.txt"),
        files("bob", "/Shares/Docs/..%2fSecret.txt"),
        format!("/dav/spaces/{space}/Docs/../Secret.txt"),
        format!("/dav/spaces/{docs_id}/../Secret.txt"),
    ] {
        for method in ["GET", "PROPFIND", "DELETE"] {
            let r = env.req("bob", method, &path, &[("depth", "0")], "").await?;
            assert!(
                matches!(r.status, 400 | 404),
                "{method} {path}: {} {}",
                r.status,
                r.text()
            );
        }
    }
    // The owner's space, by its id or its root's resource id: nothing outside the share
    // exists for bob.
    for base in [
        format!("/dav/spaces/{space}"),
        format!("/dav/spaces/{root_id}"),
    ] {
        for (method, path) in [
            ("GET", format!("{base}/Secret.txt")),
            ("PROPFIND", format!("{base}/")),
            ("PROPFIND", format!("{base}/Other")),
            ("DELETE", format!("{base}/Secret.txt")),
            ("PUT", format!("{base}/planted.txt")),
            ("MKCOL", format!("{base}/planted")),
        ] {
            let body = if method == "PUT" { "x" } else { "" };
            let r = env
                .req("bob", method, &path, &[("depth", "1")], body)
                .await?;
            assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
        }
    }
    // Moving or copying out of the share: to bob's home, to the owner's space outside the
    // share, into a sibling folder, or up with `..` in the Destination.
    for (method, from, to) in [
        (
            "MOVE",
            files("bob", "/Shares/Docs/a.txt"),
            files("bob", "/stolen.txt"),
        ),
        (
            "COPY",
            files("bob", "/Shares/Docs/a.txt"),
            files("bob", "/stolen.txt"),
        ),
        (
            "MOVE",
            format!("/dav/spaces/{space}/Docs/a.txt"),
            format!("/dav/spaces/{space}/out.txt"),
        ),
        (
            "COPY",
            format!("/dav/spaces/{space}/Docs/Sub"),
            format!("/dav/spaces/{space}/Other/Sub"),
        ),
        (
            "MOVE",
            files("bob", "/Shares/Docs/a.txt"),
            files("bob", "/Shares/Docs/../../out.txt"),
        ),
        (
            "COPY",
            files("bob", "/Shares/Docs/a.txt"),
            format!("/dav/spaces/{space}/Docs/%2e%2e/out.txt"),
        ),
        // The shared folder itself stays where the owner put it.
        ("MOVE", files("bob", "/Shares/Docs"), files("bob", "/Docs2")),
        (
            "MOVE",
            format!("/dav/spaces/{space}/Docs"),
            format!("/dav/spaces/{space}/Other/Docs"),
        ),
        // Pulling a sibling in is reading it: no.
        (
            "COPY",
            format!("/dav/spaces/{space}/Secret.txt"),
            format!("/dav/spaces/{space}/Docs/pulled.txt"),
        ),
        (
            "MOVE",
            format!("/dav/spaces/{space}/Other/o.txt"),
            format!("/dav/spaces/{space}/Docs/pulled.txt"),
        ),
    ] {
        let r = env
            .req("bob", method, &from, &[("destination", &url(&to))], "")
            .await?;
        assert!(
            !(200..300).contains(&r.status),
            "{method} {from} -> {to}: {} {}",
            r.status,
            r.text()
        );
    }
    // OCS: paths out of the share are not found, and nothing above it can be shared.
    for path in [
        "%2FShares%2FDocs%2F..%2FSecret.txt",
        "%2FShares%2FDocs%2F..",
    ] {
        let (status, v) = env
            .ocs("bob", "GET", &format!("/shares?path={path}"), "")
            .await?;
        assert_eq!(status, 404, "{v}");
        let (status, v) = env
            .ocs(
                "bob",
                "POST",
                "/shares",
                &format!("path={path}&shareType=3&permissions=1"),
            )
            .await?;
        assert_eq!(status, 404, "{v}");
    }
    // Listings of the share (Depth infinity is refused everywhere) show the share only.
    for (path, member) in [("/Shares/Docs", "a.txt"), ("/Shares/Docs/Sub", "s.txt")] {
        let (status, text) = listing(&env, "bob", &files("bob", path)).await?;
        assert_eq!(status, 207, "{text}");
        assert!(text.contains(member), "{text}");
        for sibling in ["Secret", "Other", "o.txt"] {
            assert!(!text.contains(sibling), "{sibling}: {text}");
        }
    }

    // The victims: intact, and nothing landed anywhere.
    for (path, body) in [
        ("/Secret.txt", "secret"),
        ("/Other/o.txt", "other"),
        ("/Docs/a.txt", "in share"),
        ("/Docs/Sub/s.txt", "deeper"),
    ] {
        let r = env
            .req("alice", "GET", &files("alice", path), &[], "")
            .await?;
        assert_eq!((r.status, r.text().as_str()), (200, body), "{path}");
    }
    for path in [
        "/out.txt",
        "/planted.txt",
        "/planted",
        "/Other/Sub",
        "/Other/Docs",
        "/Docs/pulled.txt",
    ] {
        let r = env
            .req(
                "alice",
                "PROPFIND",
                &files("alice", path),
                &[("depth", "0")],
                "",
            )
            .await?;
        assert_eq!(r.status, 404, "{path} appeared");
    }
    for path in ["/stolen.txt", "/Docs2"] {
        let r = env
            .req(
                "bob",
                "PROPFIND",
                &files("bob", path),
                &[("depth", "0")],
                "",
            )
            .await?;
        assert_eq!(r.status, 404, "{path} appeared for bob");
    }
    Ok(())
}

#[tokio::test]
async fn declined_share_leaves_and_accepting_restores_it() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::process(&dir, &[]).await?;
    env.user("alice").await?;
    let bob = env.user("bob").await?;
    alice_tree(&env).await?;
    let id = share_docs(&env, 1).await?;
    let path = files("bob", "/Shares/Docs/a.txt");
    let readable = || env.req("bob", "GET", &path, &[], "");
    assert_eq!(readable().await?.status, 200, "auto-accepted");

    // Declined (oCIS's DELETE on pending): out of Shares/ and the accepted list.
    let (status, v) = env
        .ocs("bob", "DELETE", &format!("/shares/pending/{id}"), "")
        .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ocs"]["data"][0]["state"], 2, "{v}");
    assert_eq!(readable().await?.status, 404);
    let (_, root) = listing(&env, "bob", &files("bob", "/")).await?;
    assert!(!root.contains("Shares"), "{root}");
    let (_, v) = env
        .ocs("bob", "GET", "/shares?shared_with_me=true", "")
        .await?;
    assert_eq!(v["ocs"]["data"].as_array().map(Vec::len), Some(0), "{v}");
    let (_, v) = env
        .ocs("bob", "GET", "/shares?shared_with_me=true&state=2", "")
        .await?;
    assert_eq!(v["ocs"]["data"][0]["id"], id.as_str(), "{v}");
    assert_eq!(v["ocs"]["data"][0]["state"], 2);
    // The owner's share is unchanged.
    let (status, v) = env
        .ocs("alice", "GET", &format!("/shares/{id}"), "")
        .await?;
    assert_eq!(status, 200, "{v}");

    // Accepted again: back under its name.
    let (status, v) = env
        .ocs("bob", "POST", &format!("/shares/pending/{id}"), "")
        .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ocs"]["data"][0]["state"], 0, "{v}");
    assert_eq!(v["ocs"]["data"][0]["path"], "/Shares/Docs", "{v}");
    assert_eq!(readable().await?.status, 200);

    // Unsharing from oneself (DELETE on the share) is declining too; the share stays.
    let (status, v) = env
        .ocs("bob", "DELETE", &format!("/shares/{id}"), "")
        .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(readable().await?.status, 404);
    let (status, _) = env
        .ocs("alice", "GET", &format!("/shares/{id}"), "")
        .await?;
    assert_eq!(status, 200);
    // Only recipients decline; others do not even see the share.
    env.user("carol").await?;
    let (status, _) = env
        .ocs("carol", "DELETE", &format!("/shares/pending/{id}"), "")
        .await?;
    assert_eq!(status, 404);

    for kind in ["share.declined", "share.accepted"] {
        let e = env
            .proc()
            .wait_event(std::time::Duration::from_secs(5), kind, |e| {
                e["fields"]["message"] == "event" && e["fields"]["kind"] == kind
            })
            .await?;
        assert_eq!(e["fields"]["actor"], bob.as_str(), "{e}");
        let attrs: Value = serde_json::from_str(e["fields"]["attrs"].as_str().unwrap_or("{}"))?;
        assert_eq!(attrs["share_id"], id.as_str(), "{e}");
    }
    Ok(())
}

/// The `<element>`s of an OCS XML answer's `<data>`, each as its child elements' texts.
fn xml_shares(xml: &str) -> anyhow::Result<Vec<std::collections::BTreeMap<String, String>>> {
    let doc = arca_tests::xml::Element::parse(xml)?;
    anyhow::ensure!(doc.name == "ocs", "<{}> is not an OCS answer", doc.name);
    Ok(doc
        .at("data")?
        .children
        .iter()
        .map(|share| {
            share
                .children
                .iter()
                .map(|field| (field.name.clone(), field.text.clone()))
                .collect()
        })
        .collect())
}

/// The JSON share `j` and the XML share `x` carry the same fields with the same values
/// (null is an empty element, numbers their decimal text).
fn same_share(j: &Value, x: &std::collections::BTreeMap<String, String>) -> anyhow::Result<()> {
    let obj = j.as_object().context("a share object")?;
    let keys: Vec<&String> = obj.keys().collect();
    let xkeys: Vec<&String> = x.keys().collect();
    anyhow::ensure!(keys == xkeys, "JSON fields {keys:?} vs XML {xkeys:?}");
    for (k, v) in obj {
        let want = match v {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        anyhow::ensure!(x[k] == want, "{k}: JSON {v} vs XML {:?}", x[k]);
    }
    Ok(())
}

#[tokio::test]
async fn ocs_share_fields_in_json_and_xml() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    let bob = env.user("bob").await?;
    group(&env, "team", &[&bob]).await?;
    alice_tree(&env).await?;
    assert_eq!(
        env.put("alice", &files("alice", "/Note.md"), "# n").await?,
        201
    );
    let space = prop(&env, "alice", &files("alice", "/Docs"), "oc:spaceid").await?;
    let root_id = prop(&env, "alice", &files("alice", "/"), "oc:fileid").await?;
    let docs_id = prop(&env, "alice", &files("alice", "/Docs"), "oc:fileid").await?;
    let note_id = prop(&env, "alice", &files("alice", "/Note.md"), "oc:fileid").await?;
    let before = now_secs();

    let user_id = share_docs(&env, 15).await?;
    let (status, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FNote.md&shareType=1&shareWith=team&permissions=1&expireDate=2030-01-02",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    let group_id = v["ocs"]["data"]["id"].as_str().context("id")?.to_owned();
    let (status, v) = env
        .ocs(
            "alice",
            "POST",
            "/shares",
            "path=%2FDocs&shareType=3&permissions=1&name=Team+link&password=pw&expireDate=2030-01-02T12:00:00Z",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    let link_id = v["ocs"]["data"]["id"].as_str().context("id")?.to_owned();
    let token = v["ocs"]["data"]["token"]
        .as_str()
        .context("token")?
        .to_owned();

    // What every share shows, whatever its type.
    let common = |s: &Value| -> anyhow::Result<()> {
        for (k, want) in [
            ("uid_owner", "alice"),
            ("displayname_owner", "alice Display"),
            ("uid_file_owner", "alice"),
            ("displayname_file_owner", "alice Display"),
            ("additional_info_owner", ""),
            ("storage_id", space.as_str()),
            ("file_parent", root_id.as_str()),
        ] {
            anyhow::ensure!(s[k] == want, "{k}: {s}");
        }
        anyhow::ensure!(s["item_source"] == s["file_source"], "{s}");
        anyhow::ensure!(s["parent"].is_null() && s["state"] == 0, "{s}");
        anyhow::ensure!(s["mail_send"] == 0 && s["hide_download"] == 0, "{s}");
        anyhow::ensure!(
            s["stime"]
                .as_u64()
                .is_some_and(|t| t >= before && t <= now_secs()),
            "stime: {s}"
        );
        Ok(())
    };
    let (_, v) = env
        .ocs("alice", "GET", &format!("/shares/{user_id}"), "")
        .await?;
    let s = &v["ocs"]["data"][0];
    common(s)?;
    for (k, want) in [
        ("id", Value::from(user_id.as_str())),
        ("share_type", Value::from(0)),
        ("permissions", Value::from(15)),
        ("path", Value::from("/Docs")),
        ("item_type", Value::from("folder")),
        ("mimetype", Value::from("httpd/unix-directory")),
        ("item_source", Value::from(docs_id.as_str())),
        ("file_target", Value::from("/Docs")),
        ("share_with", Value::from("bob")),
        ("share_with_displayname", Value::from("bob Display")),
        ("share_with_additional_info", Value::from("")),
        ("name", Value::from("")),
        ("expiration", Value::Null),
        ("token", Value::Null),
    ] {
        assert_eq!(s[k], want, "{k}: {s}");
    }
    assert!(s.get("url").is_none(), "user shares have no url: {s}");

    let (_, v) = env
        .ocs("alice", "GET", &format!("/shares/{group_id}"), "")
        .await?;
    let s = &v["ocs"]["data"][0];
    common(s)?;
    for (k, want) in [
        ("share_type", Value::from(1)),
        ("permissions", Value::from(1)),
        ("path", Value::from("/Note.md")),
        ("item_type", Value::from("file")),
        ("item_source", Value::from(note_id.as_str())),
        ("file_target", Value::from("/Note.md")),
        ("share_with", Value::from("team")),
        ("share_with_displayname", Value::from("team")),
        // A date alone lasts through that day.
        ("expiration", Value::from("2030-01-02 23:59:59")),
    ] {
        assert_eq!(s[k], want, "{k}: {s}");
    }
    assert!(
        s["mimetype"]
            .as_str()
            .is_some_and(|m| m != "httpd/unix-directory"),
        "{s}"
    );

    let (_, v) = env
        .ocs("alice", "GET", &format!("/shares/{link_id}"), "")
        .await?;
    let s = &v["ocs"]["data"][0];
    common(s)?;
    for (k, want) in [
        ("share_type", Value::from(3)),
        ("permissions", Value::from(1)),
        ("path", Value::from("/Docs")),
        ("item_source", Value::from(docs_id.as_str())),
        ("token", Value::from(token.as_str())),
        (
            "url",
            Value::from(format!("http://{}/s/{token}", env.addr())),
        ),
        ("name", Value::from("Team link")),
        // That a password is set, never the password (nor its hash).
        ("share_with", Value::from("***redacted***")),
        ("share_with_displayname", Value::Null),
        ("expiration", Value::from("2030-01-02 12:00:00")),
    ] {
        assert_eq!(s[k], want, "{k}: {s}");
    }
    assert!(!v.to_string().contains("argon2"), "{v}");

    // The recipient's view: paths in its jail.
    let (_, v) = env
        .ocs("bob", "GET", "/shares?shared_with_me=true", "")
        .await?;
    let mine = v["ocs"]["data"].as_array().context("list")?;
    assert_eq!(mine.len(), 2, "{v}");
    for (id, path) in [(&user_id, "/Shares/Docs"), (&group_id, "/Shares/Note.md")] {
        let s = mine
            .iter()
            .find(|s| s["id"] == id.as_str())
            .context("received share")?;
        assert_eq!(s["path"], path, "{s}");
        assert_eq!(s["file_target"], path, "{s}");
        assert_eq!(s["state"], 0, "{s}");
        assert_eq!(s["uid_owner"], "alice", "{s}");
    }

    // Lists: by path, and of a folder's members.
    let (_, v) = env.ocs("alice", "GET", "/shares?path=%2FDocs", "").await?;
    let mut ids: Vec<&str> = v["ocs"]["data"]
        .as_array()
        .context("list")?
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    ids.sort_unstable();
    let mut want = vec![user_id.as_str(), link_id.as_str()];
    want.sort_unstable();
    assert_eq!(ids, want);
    let (_, v) = env
        .ocs("alice", "GET", "/shares?path=%2F&subfiles=true", "")
        .await?;
    assert_eq!(v["ocs"]["data"].as_array().map(Vec::len), Some(3), "{v}");

    // XML, v1 and v2, field by field the same as JSON, for every share.
    for id in [&user_id, &group_id, &link_id] {
        let (_, json) = env
            .ocs("alice", "GET", &format!("/shares/{id}"), "")
            .await?;
        for v in ["v1", "v2"] {
            let r = env
                .req(
                    "alice",
                    "GET",
                    &format!("/ocs/{v}.php/apps/files_sharing/api/v1/shares/{id}"),
                    &[],
                    "",
                )
                .await?;
            assert_eq!(r.status, 200, "{}", r.text());
            assert!(
                r.header("content-type")
                    .is_some_and(|c| c.starts_with("text/xml")),
                "{:?}",
                r.header("content-type")
            );
            let code = if v == "v1" { 100 } else { 200 };
            assert!(
                r.text()
                    .contains(&format!("<statuscode>{code}</statuscode>")),
                "{}",
                r.text()
            );
            let xml = xml_shares(&r.text())?;
            assert_eq!(xml.len(), 1, "{}", r.text());
            same_share(&json["ocs"]["data"][0], &xml[0])
                .with_context(|| format!("{v} share {id}: {}", r.text()))?;
        }
    }
    Ok(())
}
