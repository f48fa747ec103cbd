//! Files over WebDAV through every service on the real boot path: the litmus suite, etag
//! propagation, id stability, atomic concurrent writes, a killed upload, a kill under a PUT
//! load (SQLite and PostgreSQL, bodies kept in the database and in blobs), and bad input. In the
//! test process ([`InProcess`]), except where the process is the subject: a SIGKILL, and the
//! log a secret must never reach.

use std::time::Duration;

use anyhow::Context as _;
use arca_tests::{HttpResponse, InProcess, Launch, Server, TempDir, send, send_as};
use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper_util::rt::TokioIo;

const PASSWORD: &str = "litmus-secret";
const READY: Duration = Duration::from_secs(20);
/// `admin:litmus-secret`, as HTTP Basic.
const AUTH: &str = "Basic YWRtaW46bGl0bXVzLXNlY3JldA==";

/// Every service in this process, the admin's password [`PASSWORD`].
async fn start(dir: &TempDir) -> anyhow::Result<InProcess> {
    InProcess::ready(dir, PASSWORD, &[]).await
}

/// `arca server` as a process, for a test that kills it.
async fn start_process(dir: &TempDir) -> anyhow::Result<Server> {
    let mut server = Launch::arca(dir)
        .env("ARCA_ADMIN_PASSWORD", PASSWORD)
        .spawn()?;
    server.wait_ready(READY).await?;
    Ok(server)
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

const ROOT: &str = "/remote.php/dav/files/admin";

/// The value of one property in a Depth 0 PROPFIND answer.
async fn prop(addr: &str, path: &str, name: &str) -> anyhow::Result<String> {
    arca_tests::dav_prop(addr, AUTH, path, name).await
}

#[tokio::test]
async fn litmus_suites_pass() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let url = format!("http://{}{ROOT}/", server.public);
    // litmus is a Debian package that `make test` installs; its absence is a failure here,
    // never a skip.
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new("litmus")
            // -k: keep going after a failing test, so one run reports every suite.
            .args(["-k", &url, "admin", PASSWORD])
            .current_dir(dir.path())
            .output(),
    )
    .await
    .context("litmus did not finish within 300 s")?
    .context("running litmus (apt-get install litmus; `make test` does it)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    for suite in ["basic", "copymove", "props", "locks", "http"] {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("summary for `{suite}'")))
            .with_context(|| format!("no summary for suite {suite}:\n{text}"))?;
        assert!(line.contains(" 0 failed"), "litmus {suite}: {line}\n{text}");
    }
    // A skipped test proves nothing: litmus marks it `SKIPPED` and counts it in a
    // "-> N tests were skipped" line, neither of which a summary's "0 failed" shows.
    let skipped: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("SKIPPED") || l.contains("skipped"))
        .collect();
    assert!(
        skipped.is_empty(),
        "litmus skipped tests, which is no pass: {skipped:?}\n{text}"
    );
    // Known warning, same as Apache mod_dav: basic/delete_fragment sends `DELETE /coll/#frag`.
    // hyper's URI parser drops the fragment before any handler runs (a fragment is never part
    // of a request-target, RFC 9112 §3.2), so the collection is deleted as the path names it.
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARNING")).collect();
    assert!(
        warnings.iter().all(|w| w.contains("delete_fragment")),
        "unexpected litmus warnings: {warnings:?}"
    );
    Ok(())
}

#[tokio::test]
async fn etags_propagate_to_the_root_and_ids_survive_moves() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;
    assert_eq!(
        dav(a, "MKCOL", &format!("{ROOT}/a"), &[], "").await?.status,
        201
    );
    assert_eq!(
        dav(a, "MKCOL", &format!("{ROOT}/a/b"), &[], "")
            .await?
            .status,
        201
    );
    assert_eq!(
        dav(a, "PUT", &format!("{ROOT}/a/b/f.txt"), &[], "one")
            .await?
            .status,
        201
    );

    let root_before = prop(a, &format!("{ROOT}/"), "d:getetag").await?;
    let a_before = prop(a, &format!("{ROOT}/a"), "d:getetag").await?;
    let id = prop(a, &format!("{ROOT}/a/b/f.txt"), "oc:fileid").await?;
    let size_before: u64 = prop(a, &format!("{ROOT}/a"), "oc:size").await?.parse()?;

    let put = dav(
        a,
        "PUT",
        &format!("{ROOT}/a/b/g.txt"),
        &[],
        "twenty bytes of data",
    )
    .await?;
    assert_eq!(put.status, 201, "{}", put.text());
    assert!(put.header("oc-fileid").is_some() && put.header("etag").is_some());
    let root_after = prop(a, &format!("{ROOT}/"), "d:getetag").await?;
    assert_ne!(
        root_before, root_after,
        "a change deep down must change the root's etag"
    );
    assert_ne!(a_before, prop(a, &format!("{ROOT}/a"), "d:getetag").await?);
    let size_after: u64 = prop(a, &format!("{ROOT}/a"), "oc:size").await?.parse()?;
    assert_eq!(size_after, size_before + 20, "folder size is the tree size");

    let mv = dav(
        a,
        "MOVE",
        &format!("{ROOT}/a/b/f.txt"),
        &[("destination", &format!("http://{a}{ROOT}/renamed.txt"))],
        "",
    )
    .await?;
    assert_eq!(mv.status, 201, "{}", mv.text());
    assert_eq!(
        prop(a, &format!("{ROOT}/renamed.txt"), "oc:fileid").await?,
        id
    );
    assert_ne!(root_after, prop(a, &format!("{ROOT}/"), "d:getetag").await?);
    assert_eq!(
        dav(a, "GET", &format!("{ROOT}/renamed.txt"), &[], "")
            .await?
            .text(),
        "one"
    );
    Ok(())
}

// Two workers: the server's tasks run in parallel with each other, as in `arca server`, not
// only interleaved on the test's one thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_each_commit_whole_files() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let addr = server.public.clone();
    let path = format!("{ROOT}/contended.bin");
    let mut tasks = Vec::new();
    for writer in 0u8..8 {
        let (addr, path) = (addr.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            dav(&addr, "PUT", &path, &[], vec![writer; 256 * 1024]).await
        }));
    }
    for t in tasks {
        let r = t.await??;
        assert!(
            matches!(r.status, 201 | 204),
            "PUT answered {} {}",
            r.status,
            r.text()
        );
    }
    let body = dav(&addr, "GET", &path, &[], "").await?.body;
    assert_eq!(body.len(), 256 * 1024);
    assert!(
        body.iter().all(|b| *b == body[0]),
        "bytes of several writers mixed"
    );

    // With If-Match on the same etag, exactly one writer wins; the others get 412.
    let etag = dav(&addr, "HEAD", &path, &[], "")
        .await?
        .header("etag")
        .unwrap_or_default()
        .to_owned();
    let mut tasks = Vec::new();
    for writer in 0u8..6 {
        let (addr, path, etag) = (addr.clone(), path.clone(), etag.clone());
        tasks.push(tokio::spawn(async move {
            dav(
                &addr,
                "PUT",
                &path,
                &[("if-match", &etag)],
                vec![100 + writer; 1024],
            )
            .await
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await??.status);
    }
    statuses.sort_unstable();
    assert_eq!(
        statuses.iter().filter(|s| **s == 204).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| matches!(s, 204 | 412)),
        "{statuses:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_killed_upload_leaves_the_previous_version() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut server = start_process(&dir).await?;
    let addr = server.public.clone();
    let path = format!("{ROOT}/big.bin");
    let v1 = vec![1u8; 1 << 20];
    assert_eq!(dav(&addr, "PUT", &path, &[], v1.clone()).await?.status, 201);

    // A 200 MiB PUT; after 40 MiB have gone out, the server is killed with SIGKILL.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
    let stream = tokio::net::TcpStream::connect(&addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::put(path.as_str())
        .header("host", addr.as_str())
        .header("authorization", AUTH)
        .header("content-length", (200u64 << 20).to_string())
        .body(StreamBody::new(tokio_stream_from(rx)))?;
    let upload = tokio::spawn(async move { sender.send_request(req).await });
    let chunk = Bytes::from(vec![2u8; 1 << 20]);
    for _ in 0..40 {
        tx.send(Ok(Frame::data(chunk.clone())))
            .await
            .context("server stopped reading early")?;
    }
    server.proc.signal(libc::SIGKILL);
    server.proc.wait_exit(Duration::from_secs(10)).await?;
    drop(tx);
    let _ = upload.await;

    let server = start_process(&dir).await?;
    let got = dav(&server.public, "GET", &path, &[], "").await?;
    assert_eq!(got.status, 200);
    assert!(
        got.body == v1,
        "the old content must survive a killed upload"
    );
    let listing = dav(
        &server.public,
        "PROPFIND",
        &format!("{ROOT}/"),
        &[("depth", "1")],
        "",
    )
    .await?;
    assert_eq!(
        listing.text().matches("<d:response>").count(),
        2,
        "{}",
        listing.text()
    );
    Ok(())
}

/// Bodies on both sides of storage-users' `inline_max` (64 KiB): kept in the database with
/// their node up to it, in the blob store past it.
const KILL_SIZES: [usize; 5] = [700, 16_000, 65_536, 65_537, 200_000];
const KILL_CLIENTS: usize = 4;
const KILL_FILES: usize = 5;

/// What one client sent to one path: the last content acknowledged, and the one in flight
/// when the server died (it may have committed without its answer getting out).
#[derive(Default, Clone)]
struct Sent {
    acknowledged: Option<Vec<u8>>,
    in_flight: Option<Vec<u8>>,
}

/// Content `n` of a client's file: its size cycles through [`KILL_SIZES`], its bytes say
/// whose and which it is.
fn kill_body(client: usize, file: usize, n: usize) -> Vec<u8> {
    let size = KILL_SIZES[(file + n / KILL_FILES) % KILL_SIZES.len()];
    format!("{client}/{file}/{n};")
        .bytes()
        .cycle()
        .take(size)
        .collect()
}

/// Four clients PUT and overwrite files of every size in [`KILL_SIZES`] until the server is
/// killed with SIGKILL once each size has been acknowledged ten times; then, after a
/// restart, every file is the content last acknowledged or the one in flight, whole, with
/// the size and checksum of those bytes, and nothing else is there.
async fn killed_under_a_put_load(dir: &TempDir, env: &[(&str, &str)]) -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let launch = |dir: &TempDir| {
        let mut launch = Launch::arca(dir).env("ARCA_ADMIN_PASSWORD", PASSWORD);
        for (k, v) in env {
            launch = launch.env(k, v);
        }
        launch
    };
    let mut server = launch(dir).spawn()?;
    server.wait_ready(READY).await?;
    let addr = server.public.clone();
    assert_eq!(
        dav(&addr, "MKCOL", &format!("{ROOT}/load"), &[], "")
            .await?
            .status,
        201
    );

    let dying = Arc::new(AtomicBool::new(false));
    // Acknowledged puts per size.
    let acked: Arc<Vec<AtomicUsize>> =
        Arc::new(KILL_SIZES.iter().map(|_| AtomicUsize::new(0)).collect());
    let mut clients = Vec::new();
    for c in 0..KILL_CLIENTS {
        let (addr, dying, acked) = (addr.clone(), Arc::clone(&dying), Arc::clone(&acked));
        clients.push(tokio::spawn(async move {
            let mut sent = vec![Sent::default(); KILL_FILES];
            for n in 0.. {
                let f = n % KILL_FILES;
                let body = kill_body(c, f, n);
                sent[f].in_flight = Some(body.clone());
                let path = format!("{ROOT}/load/c{c}-f{f}.bin");
                let put = dav(&addr, "PUT", &path, &[], body.clone()).await;
                match put {
                    Ok(r) if r.status == 201 || r.status == 204 => {
                        sent[f] = Sent {
                            acknowledged: Some(body.clone()),
                            in_flight: None,
                        };
                        if let Some(i) = KILL_SIZES.iter().position(|&s| s == body.len()) {
                            acked[i].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    _ if dying.load(Ordering::SeqCst) => return Ok(sent),
                    Ok(r) => anyhow::bail!("PUT {path}: {} {}", r.status, r.text()),
                    Err(e) => anyhow::bail!("PUT {path}: {e:#}"),
                }
            }
            Ok(sent)
        }));
    }
    // Killed mid-load: once every size has been acknowledged ten times, within a bound.
    let started = std::time::Instant::now();
    while acked.iter().any(|a| a.load(Ordering::SeqCst) < 10) {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the load did not get every size acknowledged ten times within 30 s"
        );
        anyhow::ensure!(
            clients.iter().all(|c| !c.is_finished()),
            "a client stopped before the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    dying.store(true, Ordering::SeqCst);
    server.proc.signal(libc::SIGKILL);
    server.proc.wait_exit(Duration::from_secs(10)).await?;
    let mut sent = Vec::new();
    for c in clients {
        sent.push(c.await??);
    }

    let mut server = launch(dir).spawn()?;
    server.wait_ready(READY).await?;
    let addr = server.public.clone();
    let listing = dav(
        &addr,
        "PROPFIND",
        &format!("{ROOT}/load/"),
        &[("depth", "1")],
        "",
    )
    .await?;
    assert_eq!(listing.status, 207);
    let listed = listing.text().matches("<d:response>").count() - 1;
    let (mut expected, mut in_flight_landed) = (0, 0);
    for (c, files) in sent.iter().enumerate() {
        for (f, s) in files.iter().enumerate() {
            let path = format!("{ROOT}/load/c{c}-f{f}.bin");
            let got = dav(&addr, "GET", &path, &[], "").await?;
            let whole = |b: &Option<Vec<u8>>| b.as_ref().is_some_and(|b| *b == got.body);
            match got.status {
                200 if whole(&s.acknowledged) => expected += 1,
                200 if whole(&s.in_flight) => {
                    expected += 1;
                    in_flight_landed += 1;
                }
                404 if s.acknowledged.is_none() => {}
                status => panic!(
                    "{path}: {status} with {} bytes, neither the acknowledged content ({:?} bytes) \
                     nor the one in flight ({:?} bytes) whole",
                    got.body.len(),
                    s.acknowledged.as_ref().map(Vec::len),
                    s.in_flight.as_ref().map(Vec::len),
                ),
            }
            if got.status == 200 {
                let size = prop(&addr, &path, "d:getcontentlength").await?;
                assert_eq!(size, got.body.len().to_string(), "{path}: listed size");
                let sums = prop(&addr, &path, "oc:checksums").await?.to_lowercase();
                let want = format!("sha1:{}", arca_tests::sha1_hex(&got.body));
                assert!(
                    sums.contains(&want),
                    "{path}: checksums {sums}, want {want}"
                );
            }
        }
    }
    assert_eq!(
        listed,
        expected,
        "the folder lists exactly the files there:\n{}",
        listing.text()
    );
    let acked: Vec<usize> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
    eprintln!(
        "killed under load: {acked:?} PUTs acknowledged per size {KILL_SIZES:?}; every file \
         read back whole after the restart, {in_flight_landed} of them the content in flight"
    );
    Ok(())
}

#[tokio::test]
async fn a_kill_under_a_put_load_loses_no_acknowledged_file_on_sqlite() -> anyhow::Result<()> {
    let dir = TempDir::new();
    killed_under_a_put_load(&dir, &[]).await
}

#[tokio::test]
async fn a_kill_under_a_put_load_loses_no_acknowledged_file_on_postgresql() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let pg = arca_tests::Postgres::start(&dir).await?;
    let url = pg.durable_database().await?;
    killed_under_a_put_load(&dir, &[("ARCA_STORAGE_USERS_DATABASE", url.as_str())]).await
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Frame<Bytes>, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// method, path, headers, body, expected status.
type BadCase<'a> = (&'a str, String, Vec<(&'a str, String)>, String, u16);

#[tokio::test]
async fn bad_input_gets_a_clear_status() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;
    assert_eq!(
        dav(a, "PUT", &format!("{ROOT}/keep.txt"), &[], "keep")
            .await?
            .status,
        201
    );
    let cases: Vec<BadCase> = vec![
        ("GET", format!("{ROOT}/%2e%2e/x"), vec![], String::new(), 400),
        ("GET", format!("{ROOT}/a%00b"), vec![], String::new(), 400),
        ("GET", format!("{ROOT}/%ff%fe"), vec![], String::new(), 400),
        ("GET", format!("{ROOT}/{}", "n".repeat(256)), vec![], String::new(), 400),
        ("PROPFIND", format!("{ROOT}/"), vec![("depth", "infinity".into())], String::new(), 403),
        ("PROPFIND", format!("{ROOT}/"), vec![("depth", "2".into())], String::new(), 400),
        ("PROPFIND", format!("{ROOT}/"), vec![("depth", "0".into())], "<d:propfind".into(), 400),
        (
            "PROPFIND",
            format!("{ROOT}/"),
            vec![("depth", "0".into())],
            r#"<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><d:propfind xmlns:d="DAV:"><d:allprop/></d:propfind>"#.into(),
            400,
        ),
        ("PROPFIND", format!("{ROOT}/"), vec![("depth", "0".into())], "x".repeat(2 << 20), 413),
        ("MKCOL", format!("{ROOT}/"), vec![], String::new(), 405),
        ("PUT", format!("{ROOT}/missing/parent.txt"), vec![], "x".into(), 409),
        (
            "PUT",
            format!("{ROOT}/keep.txt"),
            vec![("oc-checksum", "SHA1:0000000000000000000000000000000000000000".into())],
            "changed".into(),
            400,
        ),
        (
            "COPY",
            format!("{ROOT}/keep.txt"),
            vec![("destination", "http://elsewhere.example/x".into())],
            String::new(),
            502,
        ),
        ("GET", "/remote.php/dav/files/someone-else/keep.txt".into(), vec![], String::new(), 404),
    ];
    for (method, path, headers, body, want) in cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = dav(a, method, &path, &headers, body).await?;
        assert_eq!(r.status, want, "{method} {path}: {}", r.text());
    }
    assert_eq!(
        dav(a, "GET", &format!("{ROOT}/keep.txt"), &[], "")
            .await?
            .text(),
        "keep"
    );
    Ok(())
}

#[tokio::test]
async fn users_cannot_reach_each_others_files() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;
    let created = dav(
        a,
        "POST",
        "/graph/v1.0/users",
        &[("content-type", "application/json")],
        r#"{"onPremisesSamAccountName":"bob","displayName":"Bob","mail":"bob@example.org","passwordProfile":{"password":"bob-pass"}}"#,
    )
    .await?;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(created.json()?["onPremisesSamAccountName"], "bob");
    assert_eq!(
        dav(a, "PUT", &format!("{ROOT}/secret.txt"), &[], "admin only")
            .await?
            .status,
        201
    );
    let space = prop(a, &format!("{ROOT}/secret.txt"), "oc:spaceid").await?;
    let file_id = prop(a, &format!("{ROOT}/secret.txt"), "oc:fileid").await?;

    // bob:bob-pass
    let bob = [("authorization", "Basic Ym9iOmJvYi1wYXNz")];
    let me = send(a, "GET", "/graph/v1.0/me", &bob, "").await?;
    assert_eq!(
        me.json()?["onPremisesSamAccountName"],
        "bob",
        "{}",
        me.text()
    );
    let own = send(
        a,
        "PROPFIND",
        "/remote.php/webdav/",
        &[bob[0], ("depth", "1")],
        "",
    )
    .await?;
    assert_eq!(own.status, 207, "bob has a space of his own");
    assert!(!own.text().contains("secret.txt"));

    let theirs = [
        format!("{ROOT}/secret.txt"),
        format!("/dav/spaces/{space}/secret.txt"),
        format!("/dav/spaces/{space}/"),
    ];
    for path in &theirs {
        for method in [
            "GET",
            "HEAD",
            "PROPFIND",
            "PUT",
            "DELETE",
            "MKCOL",
            "PROPPATCH",
            "LOCK",
        ] {
            let body = match method {
                "PROPPATCH" => {
                    r#"<?xml version="1.0"?><d:propertyupdate xmlns:d="DAV:"><d:set><d:prop><x xmlns="urn:x">1</x></d:prop></d:set></d:propertyupdate>"#
                }
                "LOCK" => {
                    r#"<?xml version="1.0"?><d:lockinfo xmlns:d="DAV:"><d:lockscope><d:exclusive/></d:lockscope><d:locktype><d:write/></d:locktype></d:lockinfo>"#
                }
                _ => "",
            };
            let r = send(a, method, path, &[bob[0], ("depth", "0")], body).await?;
            assert_eq!(
                r.status,
                404,
                "bob {method} {path}: {} {}",
                r.status,
                r.text()
            );
        }
    }
    // MOVE and COPY out of the other space, and by resource id.
    for method in ["MOVE", "COPY"] {
        let dest = format!("http://{a}/remote.php/webdav/stolen.txt");
        let r = send(a, method, &theirs[1], &[bob[0], ("destination", &dest)], "").await?;
        assert!(
            matches!(r.status, 404 | 502),
            "bob {method}: {} {}",
            r.status,
            r.text()
        );
    }
    let by_id = format!("/dav/spaces/{}", file_id.replace('!', "%21"));
    assert_eq!(send(a, "GET", &by_id, &bob, "").await?.status, 404);
    // bob is not an admin: no user management for him.
    assert_eq!(
        send(a, "GET", "/graph/v1.0/users", &bob, "").await?.status,
        403
    );

    // Nothing of admin's changed.
    assert_eq!(
        dav(a, "GET", &format!("{ROOT}/secret.txt"), &[], "")
            .await?
            .text(),
        "admin only"
    );
    let listing = dav(a, "PROPFIND", &format!("{ROOT}/"), &[("depth", "1")], "").await?;
    assert_eq!(
        listing.text().matches("<d:response>").count(),
        2,
        "{}",
        listing.text()
    );
    Ok(())
}

#[tokio::test]
async fn a_write_over_quota_is_507_and_writes_nothing() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server =
        InProcess::ready(&dir, PASSWORD, &[("storage-users.personal_quota", "10KB")]).await?;
    let a = &server.public;
    assert_eq!(
        dav(a, "PUT", &format!("{ROOT}/small.bin"), &[], vec![1u8; 6000])
            .await?
            .status,
        201
    );
    let over = dav(a, "PUT", &format!("{ROOT}/big.bin"), &[], vec![2u8; 6000]).await?;
    assert_eq!(over.status, 507, "{}", over.text());
    // Overwriting within the quota still works; nothing of the refused write is visible.
    assert_eq!(
        dav(a, "PUT", &format!("{ROOT}/small.bin"), &[], vec![3u8; 9000])
            .await?
            .status,
        204
    );
    assert_eq!(
        dav(a, "GET", &format!("{ROOT}/big.bin"), &[], "")
            .await?
            .status,
        404
    );
    let used: u64 = prop(a, &format!("{ROOT}/"), "d:quota-used-bytes")
        .await?
        .parse()?;
    assert_eq!(used, 9000);
    let left: u64 = prop(a, &format!("{ROOT}/"), "d:quota-available-bytes")
        .await?
        .parse()?;
    assert_eq!(left, 1000);
    Ok(())
}

#[tokio::test]
async fn failed_logins_are_throttled_and_secrets_never_logged() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let mut server = Launch::arca(&dir)
        .env("ARCA_ADMIN_PASSWORD", PASSWORD)
        .env("ARCA_LOG_LEVEL", "debug")
        .set("proxy.auth.max_failures", "3")
        .set("proxy.auth.window", "60s")
        .spawn()?;
    server.wait_ready(READY).await?;
    let a = &server.public;
    let wrong = [("authorization", "Basic YWRtaW46d3Jvbmc=")]; // admin:wrong
    for _ in 0..3 {
        assert_eq!(
            send(a, "PROPFIND", "/remote.php/webdav/", &wrong, "")
                .await?
                .status,
            401
        );
    }
    // Blocked now, even with the right password: the limit is on attempts, not on luck.
    let blocked = dav(a, "PROPFIND", "/remote.php/webdav/", &[("depth", "0")], "").await?;
    assert_eq!(blocked.status, 429, "{}", blocked.text());
    let retry: u64 = blocked.header("retry-after").unwrap_or_default().parse()?;
    assert!((1..=60).contains(&retry), "Retry-After {retry}");

    let logs = server.proc.stderr().join("\n");
    for secret in [PASSWORD, "wrong", "YWRtaW46", "Basic "] {
        assert!(!logs.contains(secret), "the log contains {secret:?}");
    }
    Ok(())
}

/// GET serves whole files across read chunks (256 KiB on disk), single ranges (RFC 9110
/// §14), 416 past the end, empty files, and conditional answers.
#[tokio::test]
async fn gets_serve_whole_files_ranges_and_conditions() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;
    const LEN: usize = 600 << 10;
    let data = arca_tests::pattern(LEN, 7);
    let path = format!("{ROOT}/big.bin");
    let put = dav(a, "PUT", &path, &[], data.clone()).await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let etag = put
        .header("etag")
        .context("PUT answered no ETag")?
        .to_owned();

    let whole = dav(a, "GET", &path, &[], "").await?;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.header("content-length"), Some("614400"));
    assert_eq!(whole.header("etag"), Some(etag.as_str()));
    assert!(
        whole.body == data,
        "the whole GET differs from what was PUT"
    );

    // (Range header, expected first byte, expected last byte), inclusive.
    let chunk = 256 << 10;
    let ranges = [
        (
            format!("bytes={}-{}", chunk - 5, chunk + 4),
            chunk - 5,
            chunk + 4,
        ),
        ("bytes=0-0".to_owned(), 0, 0),
        ("bytes=-10".to_owned(), LEN - 10, LEN - 1),
        (format!("bytes={}-", LEN - 3), LEN - 3, LEN - 1),
        (format!("bytes=100-{}", LEN * 2), 100, LEN - 1),
    ];
    for (spec, first, last) in ranges {
        let r = dav(a, "GET", &path, &[("range", &spec)], "").await?;
        assert_eq!(r.status, 206, "{spec}: {}", r.text());
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {first}-{last}/{LEN}").as_str()),
            "{spec}"
        );
        assert!(r.body == data[first..=last], "{spec}: wrong bytes");
    }
    let past = dav(a, "GET", &path, &[("range", &format!("bytes={LEN}-"))], "").await?;
    assert_eq!(past.status, 416, "{}", past.text());
    assert_eq!(
        past.header("content-range"),
        Some(format!("bytes */{LEN}").as_str())
    );
    // Multiple ranges may be ignored (RFC 9110 §14.2): the whole file.
    let multi = dav(a, "GET", &path, &[("range", "bytes=0-1,5-6")], "").await?;
    assert_eq!(multi.status, 200);
    assert!(multi.body == data);

    let same = dav(a, "GET", &path, &[("if-none-match", &etag)], "").await?;
    assert_eq!(same.status, 304);
    assert!(same.body.is_empty());
    let stale = dav(a, "GET", &path, &[("if-match", "\"nope\"")], "").await?;
    assert_eq!(stale.status, 412);

    let empty = format!("{ROOT}/empty.txt");
    assert_eq!(dav(a, "PUT", &empty, &[], "").await?.status, 201);
    let got = dav(a, "GET", &empty, &[], "").await?;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.header("content-length"), Some("0"));
    assert!(got.body.is_empty());
    let r = dav(a, "GET", &empty, &[("range", "bytes=0-")], "").await?;
    assert_eq!(r.status, 416, "{}", r.text());

    // Overwritten: the next GET serves the new bytes under the new etag.
    let put2 = dav(a, "PUT", &path, &[], "short").await?;
    assert_eq!(put2.status, 204, "{}", put2.text());
    let got = dav(a, "GET", &path, &[], "").await?;
    assert_eq!(got.text(), "short");
    assert_eq!(got.header("etag"), put2.header("etag"));
    Ok(())
}

/// A Depth 1 PROPFIND gives each child its own dead properties, and none of another's.
#[tokio::test]
async fn depth_one_lists_each_childs_own_dead_properties() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;
    assert_eq!(
        dav(a, "MKCOL", &format!("{ROOT}/d"), &[], "").await?.status,
        201
    );
    for name in ["a", "b", "c"] {
        let path = format!("{ROOT}/d/{name}.txt");
        assert_eq!(dav(a, "PUT", &path, &[], name).await?.status, 201);
        if name == "c" {
            continue; // one child without any
        }
        let body = format!(
            r#"<?xml version="1.0"?><d:propertyupdate xmlns:d="DAV:" xmlns:x="urn:x"><d:set><d:prop><x:tag>tag-of-{name}</x:tag><x:{name}-only>1</x:{name}-only></d:prop></d:set></d:propertyupdate>"#
        );
        let r = dav(a, "PROPPATCH", &path, &[], body).await?;
        assert_eq!(r.status, 207, "{}", r.text());
    }
    let r = dav(
        a,
        "PROPFIND",
        &format!("{ROOT}/d/"),
        &[("depth", "1")],
        r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:"><d:allprop/></d:propfind>"#,
    )
    .await?;
    assert_eq!(r.status, 207, "{}", r.text());
    let text = r.text();
    // One <d:response> per entry; find each file's block.
    let block = |name: &str| -> anyhow::Result<String> {
        text.split("<d:response>")
            .find(|b| b.contains(&format!("/d/{name}.txt<")))
            .map(str::to_owned)
            .with_context(|| format!("no response for {name}.txt in {text}"))
    };
    let (ba, bb, bc) = (block("a")?, block("b")?, block("c")?);
    assert!(ba.contains("tag-of-a") && ba.contains("a-only"), "{ba}");
    assert!(!ba.contains("tag-of-b") && !ba.contains("b-only"), "{ba}");
    assert!(bb.contains("tag-of-b") && bb.contains("b-only"), "{bb}");
    assert!(!bb.contains("tag-of-a") && !bb.contains("a-only"), "{bb}");
    assert!(!bc.contains("tag-of") && !bc.contains("-only"), "{bc}");
    Ok(())
}

/// A Depth 1 listing carries, for every child, exactly the ids, checksums and owner the
/// request asks for (the frontend asks storage-users only for what it renders): each value is
/// the one a Depth 0 PROPFIND of the child gives, and a request for none of them gets none.
#[tokio::test]
async fn depth_one_children_carry_the_ids_checksums_and_owner_asked_for() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server = start(&dir).await?;
    let a = &server.public;
    assert_eq!(
        dav(a, "MKCOL", &format!("{ROOT}/m"), &[], "").await?.status,
        201
    );
    let file = format!("{ROOT}/m/f.txt");
    assert_eq!(dav(a, "PUT", &file, &[], "content").await?.status, 201);
    let names = [
        "oc:fileid",
        "oc:id",
        "oc:spaceid",
        "oc:file-parent",
        "oc:checksums",
        "oc:owner-id",
    ];
    let listing = |props: &str| {
        let body = format!(
            r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><d:getetag/>{props}</d:prop></d:propfind>"#
        );
        async move {
            dav(
                a,
                "PROPFIND",
                &format!("{ROOT}/m/"),
                &[("depth", "1")],
                body,
            )
            .await
        }
    };
    let child = |text: &str| -> anyhow::Result<String> {
        text.split("<d:response>")
            .find(|b| b.contains("/m/f.txt<"))
            .map(str::to_owned)
            .with_context(|| format!("no response for f.txt in {text}"))
    };
    let all: String = names.iter().map(|n| format!("<{n}/>")).collect();
    let r = listing(&all).await?;
    assert_eq!(r.status, 207, "{}", r.text());
    let block = child(&r.text())?;
    for name in names {
        let alone = prop(a, &file, name).await?;
        assert!(!alone.is_empty(), "{name} is empty at depth 0");
        assert!(
            block.contains(&format!("<{name}>{alone}<")),
            "{name}: depth 0 says {alone:?}, the listing says {block}"
        );
    }
    // Only the etag asked for: none of those fields come back, and none is answered empty.
    let r = listing("").await?;
    assert_eq!(r.status, 207, "{}", r.text());
    let block = child(&r.text())?;
    assert!(block.contains("<d:getetag>"), "{block}");
    for name in names {
        assert!(!block.contains(name), "{name} in {block}");
    }
    Ok(())
}

/// Paths as deep as `storage-users.max_depth` (512 by default) work for every method; one
/// segment deeper, or a path longer than `max_path_bytes`, is refused with 400 and one line
/// naming the limit: never a 500, never the database's words.
#[tokio::test]
async fn paths_work_to_the_depth_limit_and_are_refused_past_it() -> anyhow::Result<()> {
    let dir = TempDir::new();
    let server =
        InProcess::ready(&dir, PASSWORD, &[("storage-users.max_path_bytes", "4000")]).await?;
    let a = server.public.as_str();
    // 511 folders, then a file: 512 segments.
    let mut path = String::new();
    for _ in 0..511 {
        path.push_str("/x");
        let r = dav(a, "MKCOL", &format!("{ROOT}{path}"), &[], "").await?;
        assert_eq!(
            r.status,
            201,
            "MKCOL at {} segments: {}",
            path.len() / 2,
            r.text()
        );
    }
    let file = format!("{ROOT}{path}/f.txt");
    let put = dav(a, "PUT", &file, &[], "at the limit").await?;
    assert_eq!(put.status, 201, "{}", put.text());
    let got = dav(a, "GET", &file, &[], "").await?;
    assert_eq!((got.status, got.text().as_str()), (200, "at the limit"));
    let listed = dav(
        a,
        "PROPFIND",
        &format!("{ROOT}{path}/"),
        &[("depth", "1")],
        "",
    )
    .await?;
    assert_eq!(listed.status, 207, "{}", listed.text());
    assert!(listed.text().contains("f.txt"));
    let moved = format!("{ROOT}{path}/g.txt");
    let r = dav(a, "MOVE", &file, &[("destination", &moved)], "").await?;
    assert_eq!(r.status, 201, "{}", r.text());

    // One segment past it: refused, naming the limit, for reads and writes alike.
    let past = format!("{ROOT}{path}/x/f.txt");
    for (method, body) in [("PUT", "x"), ("GET", ""), ("PROPFIND", ""), ("MKCOL", "")] {
        let target = if method == "MKCOL" {
            format!("{ROOT}{path}/x/y")
        } else {
            past.clone()
        };
        let r = dav(a, method, &target, &[("depth", "0")], body).await?;
        assert_eq!(r.status, 400, "{method} past the limit: {}", r.text());
        assert!(
            r.text()
                .contains("deeper than 512 segments (storage-users.max_depth)"),
            "{method}: {}",
            r.text()
        );
    }
    let r = dav(
        a,
        "MOVE",
        &format!("{ROOT}{path}/g.txt"),
        &[("destination", &past)],
        "",
    )
    .await?;
    assert_eq!(r.status, 400, "MOVE past the limit: {}", r.text());

    // Longer than max_path_bytes, though shallow.
    let long = format!(
        "{ROOT}/{}/{}",
        "n".repeat(250),
        vec!["m".repeat(250); 16].join("/")
    );
    let r = dav(a, "PUT", &long, &[], "x").await?;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text()
            .contains("longer than 4000 bytes (storage-users.max_path_bytes)"),
        "{}",
        r.text()
    );
    let t = r.text().to_lowercase();
    assert!(!t.contains("sql") && !t.contains("select "), "{t}");
    Ok(())
}
