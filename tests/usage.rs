//! What a space holds besides its live content, in one in-process deployment: files written,
//! overwritten (versions) and removed (trash), then the exact bytes read back where the quota
//! is shown: the Graph drive's `quota`, the space root's WebDAV properties, and `arca spaces
//! usage`; after the trash is emptied its bytes are 0 everywhere.

mod sharing_env;

use std::time::Duration;

use anyhow::{Context as _, ensure};
use arca_tests::TempDir;
use serde_json::Value;
use sharing_env::*;

/// A body of `n` bytes.
fn body(seed: u8, n: usize) -> String {
    (0..n)
        .map(|i| char::from(b'a' + ((i as u8).wrapping_add(seed) % 26)))
        .collect()
}

async fn put(env: &Env, user: &str, path: &str, n: usize, seed: u8) -> anyhow::Result<()> {
    let status = env.put(user, &files(user, path), &body(seed, n)).await?;
    ensure!(status == 201 || status == 204, "PUT {path}: {status}");
    Ok(())
}

async fn delete(env: &Env, user: &str, path: &str) -> anyhow::Result<()> {
    let r = env.req(user, "DELETE", path, &[], "").await?;
    ensure!(r.status == 204, "DELETE {path}: {} {}", r.status, r.text());
    Ok(())
}

/// `user`'s personal drive as `me/drives` lists it.
async fn personal_drive(env: &Env, user: &str) -> anyhow::Result<Value> {
    let r = env
        .req(user, "GET", "/graph/v1.0/me/drives", &[], "")
        .await?;
    ensure!(r.status == 200, "me/drives: {} {}", r.status, r.text());
    let v = r.json()?;
    v["value"]
        .as_array()
        .context("value")?
        .iter()
        .find(|d| d["driveType"] == "personal")
        .cloned()
        .context("no personal drive")
}

/// The numbers a drive's `quota` shows: used, trash, trashItems, versions, versionCount.
fn quota_numbers(drive: &Value) -> [u64; 5] {
    let q = &drive["quota"];
    ["used", "trash", "trashItems", "versions", "versionCount"]
        .map(|k| q[k].as_u64().unwrap_or(u64::MAX))
}

/// `arca spaces ARGS…` against the deployment at `addr`; its exit code, stdout and stderr.
async fn spaces_cli(addr: &str, args: &[&str]) -> anyhow::Result<(Option<i32>, String, String)> {
    let mut cmd = tokio::process::Command::from(arca_tests::command(arca_tests::arca_bin()));
    cmd.arg("spaces")
        .args(args)
        .arg("--set")
        .arg(format!("proxy.http.addr={addr}"))
        .env("ARCA_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .map_err(|_| anyhow::anyhow!("arca spaces did not finish within 120s"))??;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The numbers of `arca spaces usage --user USER`'s one personal line: used, trashed items,
/// trash bytes, versions, version bytes.
async fn cli_numbers(env: &Env, user: &str) -> anyhow::Result<[u64; 5]> {
    let (code, out, err) = spaces_cli(env.addr(), &["usage", "--user", user]).await?;
    ensure!(code == Some(0), "arca spaces usage: {code:?} {out}{err}");
    let mut lines = out.lines();
    let header = lines.next().context("a header")?;
    ensure!(
        header.split_whitespace().collect::<Vec<_>>()
            == [
                "KIND",
                "OWNER",
                "USED",
                "TRASHED",
                "TRASH_BYTES",
                "VERSIONS",
                "VERSION_BYTES",
                "NAME"
            ],
        "{out}"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    ensure!(rows.len() == 1, "one space of {user}: {out}");
    let row = &rows[0];
    ensure!(row[0] == "personal" && row[1] == user, "{out}");
    let mut n = [0u64; 5];
    for (slot, cell) in n.iter_mut().zip(&row[2..7]) {
        *slot = cell.parse().with_context(|| format!("{cell:?} in {out}"))?;
    }
    Ok(n)
}

#[tokio::test]
async fn trash_and_version_bytes_show_where_quota_shows() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    env.user("bob").await?;

    // Live: a.txt (last written 120 bytes), c.txt 300, d/keep.txt 40. Versions: a.txt's 100
    // and 150. Trash: b.txt 200 and the folder d/old with 50 + 60.
    put(&env, "alice", "/a.txt", 100, 1).await?;
    put(&env, "alice", "/a.txt", 150, 2).await?;
    put(&env, "alice", "/a.txt", 120, 3).await?;
    put(&env, "alice", "/b.txt", 200, 4).await?;
    put(&env, "alice", "/c.txt", 300, 5).await?;
    for d in ["/d", "/d/old"] {
        let r = env
            .req("alice", "MKCOL", &files("alice", d), &[], "")
            .await?;
        ensure!(r.status == 201, "MKCOL {d}: {}", r.status);
    }
    put(&env, "alice", "/d/keep.txt", 40, 6).await?;
    put(&env, "alice", "/d/old/x.txt", 50, 7).await?;
    put(&env, "alice", "/d/old/y.txt", 60, 8).await?;
    delete(&env, "alice", &files("alice", "/b.txt")).await?;
    delete(&env, "alice", &files("alice", "/d/old")).await?;
    // Bob's space is his own: nothing of alice's counts there.
    put(&env, "bob", "/bob.txt", 7, 9).await?;
    put(&env, "bob", "/bob.txt", 8, 10).await?;

    let used = 120 + 300 + 40;
    let expected = [used, 200 + 50 + 60, 2, 100 + 150, 2];

    // Graph: the personal drive's quota, oCIS's fields unchanged beside arca's.
    let drive = personal_drive(&env, "alice").await?;
    assert_eq!(quota_numbers(&drive), expected, "{}", drive["quota"]);
    assert_eq!(drive["quota"]["total"], 0);
    assert_eq!(drive["quota"]["remaining"], i64::MAX);
    assert_eq!(drive["quota"]["state"], "normal");
    let id = drive["id"].as_str().context("drive id")?.to_owned();
    // The same by id, and in the admin's list of every drive.
    let r = env
        .req("alice", "GET", &format!("/graph/v1.0/drives/{id}"), &[], "")
        .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(quota_numbers(&r.json()?), expected);
    let r = env
        .req("admin", "GET", "/graph/v1.0/drives", &[], "")
        .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    let all = r.json()?;
    let seen = all["value"]
        .as_array()
        .context("value")?
        .iter()
        .find(|d| d["id"] == id.as_str())
        .context("alice's drive among every drive")?
        .clone();
    assert_eq!(quota_numbers(&seen), expected);
    let bob = personal_drive(&env, "bob").await?;
    assert_eq!(quota_numbers(&bob), [8, 0, 0, 7, 1]);

    // WebDAV: on the space root, by either URL, when named; nowhere else.
    for root in [format!("/dav/spaces/{id}/"), files("alice", "/")] {
        assert_eq!(
            prop(&env, "alice", &root, "oc:trashbin-size").await?,
            "310",
            "{root}"
        );
        assert_eq!(
            prop(&env, "alice", &root, "oc:versions-size").await?,
            "250",
            "{root}"
        );
    }
    let below = files("alice", "/d/");
    assert_eq!(prop(&env, "alice", &below, "oc:trashbin-size").await?, "");
    let r = env
        .req("alice", "PROPFIND", &below, &[("depth", "0")], "")
        .await?;
    assert!(
        !r.text().contains("trashbin-size"),
        "not in allprop: {}",
        r.text()
    );

    // The command line: the admin's view of alice's one space.
    assert_eq!(
        cli_numbers(&env, "alice").await?,
        [used, 2, 310, 2, 250],
        "used, trashed, trash bytes, versions, version bytes"
    );
    let (code, out, err) = spaces_cli(env.addr(), &["usage"]).await?;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("personal") && l.contains(" bob ")),
        "every space without --user: {out}"
    );
    let (code, _, err) = spaces_cli(env.addr(), &["usage", "--user", "nobody"]).await?;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("nobody") && err.lines().count() == 1, "{err}");

    // Emptying the trash: its bytes are 0 everywhere; versions stay.
    delete(&env, "alice", "/remote.php/dav/trash-bin/alice/").await?;
    let drive = personal_drive(&env, "alice").await?;
    assert_eq!(quota_numbers(&drive), [used, 0, 0, 250, 2]);
    assert_eq!(
        prop(&env, "alice", &files("alice", "/"), "oc:trashbin-size").await?,
        "0"
    );
    assert_eq!(
        prop(&env, "alice", &files("alice", "/"), "oc:versions-size").await?,
        "250"
    );
    assert_eq!(cli_numbers(&env, "alice").await?, [used, 0, 0, 2, 250]);
    Ok(())
}
