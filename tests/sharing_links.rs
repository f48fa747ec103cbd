//! Public links beyond reading: COPY and MOVE inside a read-write link and never out of it,
//! upload-only links ("file drop") that neither reveal nor overwrite what the folder holds,
//! link changes (narrowed, password added, removed) reaching the very next request of an
//! open connection, and what the link page asks of `/s/{token}` (the page itself, the link as
//! JSON, an access token standing for a password until it changes), and folders and
//! selections as one ZIP (a user's `/archiver`, a link's `/s/{token}/archive`, read back by
//! Info-ZIP's `unzip`). Every service on the real boot path (in the test process, or the
//! single binary where its logged events are read); anonymous requests, and the owner's.

mod sharing_env;

use anyhow::Context as _;
use arca_tests::TempDir;
use sharing_env::*;

/// `Destination` as an absolute URL on the server the request went to.
fn dest(env: &Env, path: &str) -> String {
    format!("http://{}{path}", env.addr())
}

async fn copy_or_move(
    env: &Env,
    method: &str,
    from: &str,
    to: &str,
) -> anyhow::Result<arca_tests::HttpResponse> {
    anon(env, method, from, &[("destination", &dest(env, to))], "").await
}

/// alice's file, as she reads it: (status, body).
async fn owner_reads(env: &Env, path: &str) -> anyhow::Result<(u16, String)> {
    let r = env
        .req("alice", "GET", &files("alice", path), &[], "")
        .await?;
    Ok((r.status, r.text()))
}

/// The services in this process, user alice, and her `folders`.
async fn alice_with(dir: &TempDir, folders: &[&str]) -> anyhow::Result<Env> {
    let env = Env::start(dir, &[]).await?;
    env.user("alice").await?;
    for folder in folders {
        let r = env
            .req("alice", "MKCOL", &files("alice", folder), &[], "")
            .await?;
        anyhow::ensure!(r.status == 201, "MKCOL {folder}: {}", r.status);
    }
    Ok(env)
}

#[tokio::test]
async fn read_write_link_copies_and_moves_inside_only() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = alice_with(&dir, &["/Pub", "/Other"]).await?;
    for (path, body) in [
        ("/Pub/p.txt", "public"),
        ("/Private.txt", "private"),
        ("/Other/o.txt", "other"),
    ] {
        assert_eq!(env.put("alice", &files("alice", path), body).await?, 201);
    }
    let (rw, _) = link(&env, "path=%2FPub&shareType=3&permissions=15").await?;
    let (other, _) = link(&env, "path=%2FOther&shareType=3&permissions=15").await?;
    let (ro, _) = link(&env, "path=%2FPub&shareType=3&permissions=1").await?;
    let (file_link, _) = link(&env, "path=%2FPrivate.txt&shareType=3&permissions=3").await?;
    let root = format!("/dav/public-files/{rw}");

    // Inside the link: COPY, MOVE into a subfolder, and the other public-files root naming
    // the same link.
    let r = copy_or_move(
        &env,
        "COPY",
        &format!("{root}/p.txt"),
        &format!("{root}/copy.txt"),
    )
    .await?;
    assert_eq!(r.status, 201, "COPY inside: {}", r.text());
    assert_eq!(
        anon(&env, "MKCOL", &format!("{root}/sub"), &[], "")
            .await?
            .status,
        201
    );
    let r = copy_or_move(
        &env,
        "MOVE",
        &format!("{root}/copy.txt"),
        &format!("/remote.php/dav/public-files/{rw}/sub/moved.txt"),
    )
    .await?;
    assert_eq!(r.status, 201, "MOVE inside: {}", r.text());
    assert_eq!(
        owner_reads(&env, "/Pub/sub/moved.txt").await?,
        (200, "public".to_owned())
    );
    assert_eq!(owner_reads(&env, "/Pub/copy.txt").await?.0, 404);
    // Overwrite: F onto an existing member is 412, as anywhere else.
    let r = anon(
        &env,
        "COPY",
        &format!("{root}/p.txt"),
        &[
            ("destination", &dest(&env, &format!("{root}/sub/moved.txt"))),
            ("overwrite", "F"),
        ],
        "",
    )
    .await?;
    assert_eq!(r.status, 412, "{}", r.text());

    // Out of the link: into the owner's home, another link of hers, her space by id, another
    // server, or up with `..`: refused, and nothing lands anywhere.
    let space = prop(&env, "alice", &files("alice", "/Pub"), "oc:spaceid").await?;
    for (method, to, want) in [
        ("COPY", files("alice", "/stolen.txt"), 403),
        ("MOVE", files("alice", "/stolen.txt"), 403),
        ("COPY", format!("/dav/public-files/{other}/stolen.txt"), 403),
        ("MOVE", format!("/dav/public-files/{other}/stolen.txt"), 403),
        ("COPY", format!("/dav/spaces/{space}/stolen.txt"), 403),
        ("COPY", format!("/dav/public-files/{ro}/stolen.txt"), 403),
        ("COPY", format!("{root}/../stolen.txt"), 400),
        ("MOVE", format!("{root}/%2e%2e/stolen.txt"), 400),
    ] {
        let r = copy_or_move(&env, method, &format!("{root}/p.txt"), &to).await?;
        assert_eq!(r.status, want, "{method} to {to}: {}", r.text());
    }
    let r = anon(
        &env,
        "COPY",
        &format!("{root}/p.txt"),
        &[("destination", "http://elsewhere.example/x.txt")],
        "",
    )
    .await?;
    assert_eq!(r.status, 502, "another server");
    // The link's own folder is not moved away, nor copied onto itself.
    let r = copy_or_move(&env, "MOVE", &format!("{root}/"), &format!("{root}/sub/x")).await?;
    assert_eq!(r.status, 403, "{}", r.text());
    // A sibling is not pulled in either: outside the link nothing exists.
    let r = copy_or_move(
        &env,
        "COPY",
        &format!("{root}/../Private.txt"),
        &format!("{root}/pulled.txt"),
    )
    .await?;
    assert!(matches!(r.status, 400 | 404), "{}", r.status);
    assert_eq!(owner_reads(&env, "/stolen.txt").await?.0, 404);
    assert_eq!(owner_reads(&env, "/Pub/pulled.txt").await?.0, 404);
    let r = anon(
        &env,
        "PROPFIND",
        &format!("/dav/public-files/{other}/"),
        &[("depth", "1")],
        "",
    )
    .await?;
    assert!(!r.text().contains("stolen"), "{}", r.text());

    // A read-only link copies nothing; a file link has nowhere inside to copy to.
    let r = copy_or_move(
        &env,
        "COPY",
        &format!("/dav/public-files/{ro}/p.txt"),
        &format!("/dav/public-files/{ro}/c.txt"),
    )
    .await?;
    assert_eq!(r.status, 403, "read-only: {}", r.text());
    let r = copy_or_move(
        &env,
        "COPY",
        &format!("/dav/public-files/{file_link}"),
        &format!("/dav/public-files/{file_link}/c.txt"),
    )
    .await?;
    assert_eq!(r.status, 403, "file link: {}", r.text());

    // The victims are intact.
    assert_eq!(
        owner_reads(&env, "/Private.txt").await?,
        (200, "private".to_owned())
    );
    assert_eq!(
        owner_reads(&env, "/Other/o.txt").await?,
        (200, "other".to_owned())
    );
    assert_eq!(
        owner_reads(&env, "/Pub/p.txt").await?,
        (200, "public".to_owned())
    );
    Ok(())
}

#[tokio::test]
async fn upload_only_link_neither_reveals_nor_overwrites() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(&dir, &[]).await?;
    env.user("alice").await?;
    assert_eq!(
        env.req("alice", "MKCOL", &files("alice", "/Drop"), &[], "")
            .await?
            .status,
        201
    );
    assert_eq!(
        env.put("alice", &files("alice", "/Drop/report.pdf"), "alice's")
            .await?,
        201
    );
    let (drop, _) = link(&env, "path=%2FDrop&shareType=3&permissions=4").await?;
    let root = format!("/remote.php/dav/public-files/{drop}");

    // A PUT onto a taken name answers exactly as onto a free one and lands beside it, under
    // the next free "name (n).ext", as oCIS does; the owner's file is untouched.
    let fresh = anon(&env, "PUT", &format!("{root}/fresh.pdf"), &[], "one").await?;
    assert_eq!(fresh.status, 201, "{}", fresh.text());
    let taken = anon(&env, "PUT", &format!("{root}/report.pdf"), &[], "two").await?;
    assert_eq!(taken.status, 201, "{}", taken.text());
    let again = anon(
        &env,
        "PUT",
        &format!("{root}/report.pdf"),
        &[("if-none-match", "*")],
        "three",
    )
    .await?;
    assert_eq!(
        again.status,
        201,
        "If-None-Match is no oracle: {}",
        again.text()
    );
    // The same headers either way (what differs are the new file's own ids).
    let names = |r: &arca_tests::HttpResponse| {
        let mut n: Vec<String> = r.headers.keys().map(|k| k.as_str().to_owned()).collect();
        n.sort();
        n.retain(|h| h != "date");
        n
    };
    assert_eq!(names(&fresh), names(&taken));
    for (path, body) in [
        ("/Drop/report.pdf", "alice's"),
        ("/Drop/report%20(2).pdf", "two"),
        ("/Drop/report%20(3).pdf", "three"),
        ("/Drop/fresh.pdf", "one"),
    ] {
        assert_eq!(
            owner_reads(&env, path).await?,
            (200, body.to_owned()),
            "{path}"
        );
    }
    // Folders to upload into.
    assert_eq!(
        anon(&env, "MKCOL", &format!("{root}/batch"), &[], "")
            .await?
            .status,
        201
    );
    assert_eq!(
        anon(&env, "PUT", &format!("{root}/batch/a.txt"), &[], "a")
            .await?
            .status,
        201
    );

    // Nothing else, and the same 403 whether the name exists or not.
    for name in ["report.pdf", "missing.pdf"] {
        let path = format!("{root}/{name}");
        let to = dest(&env, &format!("{root}/x.pdf"));
        for (method, headers) in [
            ("GET", vec![]),
            ("HEAD", vec![]),
            ("PROPFIND", vec![("depth", "0")]),
            ("DELETE", vec![]),
            ("PROPPATCH", vec![]),
            ("LOCK", vec![]),
            ("COPY", vec![("destination", to.as_str())]),
            ("MOVE", vec![("destination", to.as_str())]),
        ] {
            let r = anon(&env, method, &path, &headers, "").await?;
            assert_eq!(r.status, 403, "{method} {name}: {}", r.text());
        }
    }
    let r = anon(&env, "PROPFIND", &format!("{root}/"), &[("depth", "1")], "").await?;
    assert_eq!(r.status, 403);
    assert!(!r.text().contains("report"), "{}", r.text());
    let page = anon(&env, "GET", &format!("/s/{drop}"), &[], "").await?;
    assert_eq!(page.status, 200);
    assert!(!page.text().contains("report"), "{}", page.text());
    assert_eq!(
        owner_reads(&env, "/Drop/report.pdf").await?,
        (200, "alice's".to_owned()),
        "still there after the DELETE and MOVE attempts"
    );
    Ok(())
}

#[tokio::test]
async fn link_changes_reach_the_next_request_of_an_open_connection() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::process(&dir, &[]).await?;
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
    let (token, id) = link(&env, "path=%2FPub&shareType=3&permissions=15").await?;
    let root = format!("/dav/public-files/{token}");
    let mut conn = Conn::open(env.addr()).await?;
    let r = conn
        .send("PUT", &format!("{root}/w1.txt"), &[], "one")
        .await?;
    assert_eq!(r.status, 201, "{}", r.text());

    // Narrowed to read-only: the next write on the same connection is refused.
    let (status, v) = env
        .ocs("alice", "PUT", &format!("/shares/{id}"), "permissions=1")
        .await?;
    assert_eq!(status, 200, "{v}");
    let r = conn
        .send("PUT", &format!("{root}/w2.txt"), &[], "two")
        .await?;
    assert_eq!(r.status, 403, "{}", r.text());
    let r = conn.send("GET", &format!("{root}/p.txt"), &[], "").await?;
    assert_eq!((r.status, r.text().as_str()), (200, "public"));

    // A password added: the next request without it is challenged, with it served.
    let (status, v) = env
        .ocs("alice", "PUT", &format!("/shares/{id}"), "password=n3w")
        .await?;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ocs"]["data"]["share_with"], "***redacted***", "{v}");
    let r = conn.send("GET", &format!("{root}/p.txt"), &[], "").await?;
    assert_eq!(r.status, 401);
    let auth = basic("public", "n3w");
    let r = conn
        .send(
            "GET",
            &format!("{root}/p.txt"),
            &[("authorization", &auth)],
            "",
        )
        .await?;
    assert_eq!(r.status, 200);

    // Removed: gone on the next request.
    let (status, _) = env
        .ocs("alice", "DELETE", &format!("/shares/{id}"), "")
        .await?;
    assert_eq!(status, 200);
    let r = conn
        .send(
            "GET",
            &format!("{root}/p.txt"),
            &[("authorization", &auth)],
            "",
        )
        .await?;
    assert_eq!(r.status, 404);
    assert_eq!(owner_reads(&env, "/Pub/w2.txt").await?.0, 404);
    assert_eq!(
        owner_reads(&env, "/Pub/w1.txt").await?,
        (200, "one".to_owned())
    );

    // Every opening was published: link.accessed with the share's id, the link as actor,
    // an event id and a time.
    let link_accessed = || -> Vec<serde_json::Value> {
        env.proc()
            .events_with("event")
            .into_iter()
            .filter(|e| e["fields"]["kind"] == "link.accessed")
            .collect()
    };
    // The events logger runs beside the requests: wait for the four openings that succeeded
    // (two PUTs, two GETs) before the password was needed.
    let opened = arca_tests::eventually(
        std::time::Duration::from_secs(5),
        "four link.accessed events",
        || {
            let found = link_accessed();
            async move { Ok((found.len() >= 4).then_some(found)) }
        },
    )
    .await?;
    for e in &opened {
        let attrs: serde_json::Value =
            serde_json::from_str(e["fields"]["attrs"].as_str().context("attrs")?)?;
        assert_eq!(attrs["share_id"], id.as_str(), "{e}");
        assert_eq!(attrs["share_type"], "3", "{e}");
        assert_eq!(e["fields"]["actor"], format!("public:{id}").as_str(), "{e}");
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

/// What the link page asks of `/s/{token}`: the link as JSON, with a script's headers.
async fn link_json(
    env: &Env,
    token: &str,
    extra: &[(&str, &str)],
) -> anyhow::Result<arca_tests::HttpResponse> {
    let mut headers = vec![
        ("accept", "application/json"),
        ("x-requested-with", "XMLHttpRequest"),
    ];
    headers.extend_from_slice(extra);
    anon(env, "GET", &format!("/s/{token}"), &headers, "").await
}

#[tokio::test]
async fn the_link_page_opens_links_and_a_password_once() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = alice_with(&dir, &["/Pub", "/Drop"]).await?;
    assert_eq!(
        env.put("alice", &files("alice", "/Pub/p.txt"), "public")
            .await?,
        201
    );
    let (secret, secret_id) = link(
        &env,
        "path=%2FPub&shareType=3&permissions=1&password=s3cret",
    )
    .await?;
    let (other, _) = link(&env, "path=%2FPub&shareType=3&permissions=1&password=other").await?;
    let (open, _) = link(&env, "path=%2FPub%2Fp.txt&shareType=3&permissions=1").await?;
    let (drop, _) = link(&env, "path=%2FDrop&shareType=3&permissions=4").await?;

    // A browser gets the page (for any token: the page asks what the link is); curl still
    // gets the file.
    let browser = [(
        "accept",
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    )];
    for token in [
        &secret,
        &open,
        &drop,
        &"0123456789abcdef0123456789abcdef".to_owned(),
    ] {
        let page = anon(&env, "GET", &format!("/s/{token}"), &browser, "").await?;
        assert_eq!(page.status, 200);
        assert!(
            page.header("content-type")
                .is_some_and(|t| t.starts_with("text/html"))
        );
        assert!(page.text().contains("/link.js"), "{}", page.text());
        assert!(
            page.header("content-security-policy")
                .is_some_and(|c| c.contains("script-src 'self'"))
        );
    }
    let raw = anon(&env, "GET", &format!("/s/{open}"), &[], "").await?;
    assert_eq!((raw.status, raw.text().as_str()), (200, "public"));

    // What the link is. A script asking without the password gets 401 and no challenge (a
    // browser would put its own prompt over the page); a WebDAV client gets the challenge.
    let r = link_json(&env, &secret, &[]).await?;
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.header("www-authenticate"), None);
    let r = anon(
        &env,
        "PROPFIND",
        &format!("/remote.php/dav/public-files/{secret}/"),
        &[("depth", "0")],
        "",
    )
    .await?;
    assert!(
        r.header("www-authenticate")
            .is_some_and(|h| h.starts_with("Basic"))
    );
    let right = basic("public", "s3cret");
    let r = link_json(&env, &secret, &[("authorization", &right)]).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let v = r.json()?;
    assert_eq!(v["name"], "Pub");
    assert_eq!(v["folder"], true);
    assert_eq!(v["permissions"], 1);
    assert_eq!(v["drop"], false);
    assert!(v["owner"].as_str().is_some_and(|o| !o.is_empty()), "{v}");
    let access = v["access"].as_str().context("access")?.to_owned();
    assert!(access.len() > 40, "{v}");

    // The access token stands for the password: in a header for any request, in the query
    // for a download; the bytes come with a sandbox, whatever they are.
    let dav = format!("/remote.php/dav/public-files/{secret}");
    let r = anon(
        &env,
        "PROPFIND",
        &format!("{dav}/"),
        &[("depth", "1"), ("x-link-access", &access)],
        "",
    )
    .await?;
    assert_eq!(r.status, 207, "{}", r.text());
    assert!(r.text().contains("p.txt"));
    let got = anon(
        &env,
        "GET",
        &format!("{dav}/p.txt?access={access}"),
        &[],
        "",
    )
    .await?;
    assert_eq!((got.status, got.text().as_str()), (200, "public"));
    assert!(
        got.header("content-security-policy")
            .is_some_and(|c| c.contains("sandbox"))
    );
    assert_eq!(got.header("x-content-type-options"), Some("nosniff"));
    // Only reads take it from the query (a URL is easier to leak than a header).
    let r = anon(
        &env,
        "PROPFIND",
        &format!("{dav}/?access={access}"),
        &[("depth", "0")],
        "",
    )
    .await?;
    assert_eq!(r.status, 401);
    let r = link_json(&env, &secret, &[("x-link-access", &access)]).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()?["access"], "", "an access token mints no other");

    // Not a key to anything else: forged, or another link's.
    let r = link_json(&env, &secret, &[("x-link-access", "v1.e30.AAAA")]).await?;
    assert_eq!(r.status, 401);
    let theirs = link_json(&env, &other, &[("authorization", &basic("x", "other"))])
        .await?
        .json()?;
    let theirs = theirs["access"].as_str().context("access")?;
    let r = link_json(&env, &secret, &[("x-link-access", theirs)]).await?;
    assert_eq!(r.status, 401, "another link's access token");

    // A new password ends every access token given for the old one.
    let (status, v) = env
        .ocs(
            "alice",
            "PUT",
            &format!("/shares/{secret_id}"),
            "password=changed",
        )
        .await?;
    assert_eq!(status, 200, "{v}");
    let r = anon(
        &env,
        "GET",
        &format!("{dav}/p.txt?access={access}"),
        &[],
        "",
    )
    .await?;
    assert_eq!(r.status, 401, "the old password's token after a change");
    let r = link_json(&env, &secret, &[("authorization", &basic("p", "changed"))]).await?;
    assert_eq!(r.status, 200, "{}", r.text());

    // A link without a password needs no token; an upload-only one says it is one; an unknown
    // one is 404.
    let v = link_json(&env, &open, &[]).await?.json()?;
    assert_eq!(
        (&v["name"], &v["folder"], &v["type"], &v["access"]),
        (
            &"p.txt".into(),
            &false.into(),
            &"text/plain".into(),
            &"".into()
        ),
        "{v}"
    );
    let v = link_json(&env, &drop, &[]).await?.json()?;
    assert_eq!(
        (&v["drop"], &v["permissions"]),
        (&true.into(), &4.into()),
        "{v}"
    );
    let r = link_json(&env, "0123456789abcdef0123456789abcdef", &[]).await?;
    assert_eq!(r.status, 404);
    Ok(())
}

/// An archive as Info-ZIP's `unzip` reads it: every CRC checked (`-t`), then the names in
/// order and each file's bytes.
struct Unzipped {
    names: Vec<String>,
    zip: std::path::PathBuf,
}

impl Unzipped {
    fn of(dir: &TempDir, bytes: &[u8]) -> anyhow::Result<Self> {
        let zip = dir.join(&format!("archive-{}.zip", bytes.len()));
        std::fs::write(&zip, bytes)?;
        let test = std::process::Command::new("unzip")
            .arg("-tqq")
            .arg(&zip)
            .output()
            .context("unzip (make deps installs it)")?;
        anyhow::ensure!(
            test.status.success(),
            "unzip -t: {}{}",
            String::from_utf8_lossy(&test.stdout),
            String::from_utf8_lossy(&test.stderr)
        );
        let list = std::process::Command::new("unzip")
            .arg("-Z1")
            .arg(&zip)
            .output()?;
        anyhow::ensure!(list.status.success(), "unzip -Z1");
        let names = String::from_utf8(list.stdout)?
            .lines()
            .map(str::to_owned)
            .collect();
        Ok(Self { names, zip })
    }

    fn read(&self, name: &str) -> anyhow::Result<Vec<u8>> {
        // unzip takes names as wildcards: brackets would be classes.
        let out = std::process::Command::new("unzip")
            .arg("-p")
            .arg(&self.zip)
            .arg(name)
            .output()?;
        anyhow::ensure!(out.status.success(), "unzip -p {name}");
        Ok(out.stdout)
    }
}

#[tokio::test]
async fn folders_and_selections_download_as_one_zip() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let env = Env::start(
        &dir,
        &[
            ("frontend.archive.max_files", "12"),
            ("frontend.archive.max_size", "4MB"),
        ],
    )
    .await?;
    env.user("alice").await?;
    // Paths as URLs carry them (percent-encoded): "Fotos ü", "naïve ✓.txt".
    let fotos_path = "/Fotos%20%C3%BC";
    for folder in [
        fotos_path,
        "/Fotos%20%C3%BC/sub",
        "/Fotos%20%C3%BC/empty",
        "/Many",
    ] {
        let r = env
            .req("alice", "MKCOL", &files("alice", folder), &[], "")
            .await?;
        assert_eq!(r.status, 201, "{folder}");
    }
    let big = arca_tests::pattern(3_000_000 + 7, 9);
    for (path, body) in [
        (
            "/Fotos%20%C3%BC/na%C3%AFve%20%E2%9C%93.txt",
            b"unicode".to_vec(),
        ),
        ("/Fotos%20%C3%BC/sub/big.bin", big.clone()),
        ("/top.txt", b"top".to_vec()),
        ("/other.bin", arca_tests::pattern(1_500_000, 3)),
    ] {
        let url = files("alice", path);
        let r = arca_tests::send_as(
            env.addr(),
            &arca_tests::basic("alice", "alice-pw"),
            "PUT",
            &url,
            &[],
            body,
        )
        .await?;
        assert_eq!(r.status, 201, "{path}");
    }
    for i in 0..12 {
        assert_eq!(
            env.put("alice", &files("alice", &format!("/Many/{i}.txt")), "x")
                .await?,
            201
        );
    }
    let id = |path: &'static str| {
        let env = &env;
        async move { prop(env, "alice", &files("alice", path), "oc:fileid").await }
    };
    let (fotos, top, other, many) = (
        id(fotos_path).await?,
        id("/top.txt").await?,
        id("/other.bin").await?,
        id("/Many").await?,
    );
    let get = |query: String| {
        let env = &env;
        async move {
            env.req("alice", "GET", &format!("/archiver?{query}"), &[], "")
                .await
        }
    };

    // A folder: every folder (the empty one too) and file, its bytes, its name on the zip.
    let r = get(format!("id={fotos}")).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/zip"));
    assert!(
        r.header("content-disposition")
            .is_some_and(|d| d.contains("Fotos%20%C3%BC.zip")),
        "{:?}",
        r.header("content-disposition")
    );
    let z = Unzipped::of(&dir, &r.body)?;
    let mut names = z.names.clone();
    names.sort();
    assert_eq!(
        names,
        [
            "Fotos ü/",
            "Fotos ü/empty/",
            "Fotos ü/naïve ✓.txt",
            "Fotos ü/sub/",
            "Fotos ü/sub/big.bin"
        ]
    );
    assert_eq!(z.read("Fotos ü/sub/big.bin")?, big);
    assert_eq!(z.read("Fotos ü/naïve ✓.txt")?, b"unicode");

    // A selection: each item at the top.
    let r = get(format!("id={top}&id={fotos}")).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.header("content-disposition")
            .is_some_and(|d| d.contains("download.zip"))
    );
    let z = Unzipped::of(&dir, &r.body)?;
    assert_eq!(z.names[0], "top.txt");
    assert_eq!(z.read("top.txt")?, b"top");
    assert_eq!(z.names.len(), 6);

    // Past the bounds, or naming nothing or something unknown: one line, before any byte.
    for (query, status, says) in [
        (format!("id={many}"), 400, "more than 12 files"),
        (
            format!("id={fotos}&id={other}"),
            400,
            "more than 4000000 bytes",
        ),
        (String::new(), 400, "name what to download"),
        ("id=nope%24nope%21nope".to_owned(), 404, ""),
    ] {
        let r = get(query.clone()).await?;
        assert_eq!(r.status, status, "{query}: {}", r.text());
        assert!(r.text().contains(says), "{query}: {}", r.text());
        assert_eq!(r.text().lines().count(), 1, "{query}: {}", r.text());
    }
    // Not logged in: the proxy's 401.
    let r = anon(&env, "GET", &format!("/archiver?id={fotos}"), &[], "").await?;
    assert_eq!(r.status, 401);

    // A link's archive reaches what the link shares, and nothing else.
    let (shared, _) = link(&env, "path=%2FFotos+%C3%BC&shareType=3&permissions=1").await?;
    let r = anon(
        &env,
        "GET",
        &format!("/s/{shared}/archive?id={fotos}"),
        &[],
        "",
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(Unzipped::of(&dir, &r.body)?.names.len(), 5);
    let r = anon(
        &env,
        "GET",
        &format!("/s/{shared}/archive?id={top}"),
        &[],
        "",
    )
    .await?;
    assert!(
        matches!(r.status, 403 | 404),
        "outside the link: {}",
        r.status
    );
    let (drop, _) = link(&env, "path=%2FMany&shareType=3&permissions=4").await?;
    let r = anon(
        &env,
        "GET",
        &format!("/s/{drop}/archive?id={many}"),
        &[],
        "",
    )
    .await?;
    assert_eq!(r.status, 403, "a drop is not read");
    Ok(())
}
