//! Resumable (TUS) uploads across two storage-users instances sharing one PostgreSQL database
//! and one S3 bucket (moto), with the example set config/grouped-nats run for real (NATS
//! registry, the frontend group, the proxy), as issue 7 asks: no request may be lost because
//! it reached the other instance, or because an instance was replaced.
//!
//! - Ten uploads in parallel, each in several PATCHes through the proxy: the frontend balances
//!   every PATCH over both instances, so an upload's chunks land on one instance and then on
//!   the other. Every PATCH must succeed and every file be byte-identical. Which instance
//!   served which PATCH is read from the instances' request logs, matched by the trace id each
//!   PATCH carries (`traceparent`), and printed; the test requires that uploads did move
//!   between instances.
//! - An upload whose first chunk one instance stored: that instance is SIGTERMed (it exits 0),
//!   and the upload is resumed (HEAD) and finished through the other one.
//! - nextcloudcmd's chunked uploads (issue 25): its chunks land on both instances, a killed
//!   upload resumes from the chunks either instance stored, and the files are byte-identical
//!   on the server and after a download into an empty folder.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arca_tests::{
    EXAMPLE_PASSWORD, ExampleSet, HttpResponse, Moto, Nats, Postgres, Proc, Server, TempDir,
    eventually, free_addr, pattern, send, sha1_hex,
};
use base64::Engine as _;
use serde_json::Value;

/// `admin:scale-pass` ([`arca_tests::EXAMPLE_PASSWORD`]), as HTTP Basic.
const AUTH: &str = "Basic YWRtaW46c2NhbGUtcGFzcw==";
const READY: Duration = Duration::from_secs(30);
const ROOT: &str = "/remote.php/dav/files/admin";
/// The endpoint of storage-users.yaml, swapped for a fresh one.
const USERS_1_ENDPOINT: &str = "tcp://127.0.0.1:9141";

/// The tests share two cores: one deployment at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn tcp_endpoint() -> String {
    format!("tcp://{}", free_addr())
}

/// The example set on a NATS, a PostgreSQL and an S3 of its own; all ready.
struct Deployment {
    users: Vec<Server>,
    /// `HOST:PORT` of each instance's endpoint (gRPC and its data paths).
    users_addr: [String; 2],
    proxy: Server,
    _rest: Vec<Server>,
    _dirs: Vec<TempDir>,
    _deps: (Nats, Postgres, Moto),
}

async fn deploy(dir: &TempDir) -> anyhow::Result<Deployment> {
    let started = Instant::now();
    let (nats, pg, s3) = tokio::try_join!(
        Nats::start(dir),
        Postgres::start(dir),
        Moto::start(&["arca-blobs"])
    )?;
    let users_addr = [tcp_endpoint(), tcp_endpoint()];
    let set = ExampleSet {
        swaps: vec![
            ("nats://127.0.0.1:4222", nats.url()),
            (
                "postgres://arca:example-only@127.0.0.1:5432/arca",
                pg.url.clone(),
            ),
            ("http://127.0.0.1:9000", s3.endpoint.clone()),
            ("tcp://127.0.0.1:9140", tcp_endpoint()),
            ("tcp://127.0.0.1:9142", tcp_endpoint()),
            ("tcp://127.0.0.1:9143", users_addr[1].clone()),
            ("tcp://127.0.0.1:9144", tcp_endpoint()),
        ],
    };
    let dirs: Vec<TempDir> = (0..5).map(|_| TempDir::new()).collect();
    let mut system = set.launch(&dirs[0], "storage-system.yaml", &[])?.spawn()?;
    let mut one = set
        .launch(
            &dirs[1],
            "storage-users.yaml",
            &[(USERS_1_ENDPOINT, users_addr[0].clone())],
        )?
        .spawn()?;
    let mut two = set.launch(&dirs[2], "storage-users-2.yaml", &[])?.spawn()?;
    let mut front = set.launch(&dirs[3], "frontend.yaml", &[])?.spawn()?;
    let mut proxy = set.launch(&dirs[4], "proxy.yaml", &[])?.spawn()?;
    for s in [&mut system, &mut one, &mut two, &mut front, &mut proxy] {
        s.wait_ready(READY).await?;
    }
    // Both instances are in the frontend's endpoint set before the uploads start.
    eventually(READY, "the frontend reaches both instances", || {
        let (one, two) = (&one, &two);
        let proxy = &proxy;
        async move {
            let r = dav(
                &proxy.public,
                "PROPFIND",
                &format!("{ROOT}/"),
                &[("depth", "0")],
                "",
            )
            .await?;
            anyhow::ensure!(r.status == 207, "PROPFIND {}", r.status);
            let both = [one, two].iter().all(|s| {
                s.proc
                    .events()
                    .iter()
                    .any(|e| handled(e) && e["span"]["route"] != "/tus/{token}")
            });
            Ok(both.then_some(()))
        }
    })
    .await?;
    eprintln!(
        "two storage-users on PostgreSQL + S3, ready {:?} after the start",
        started.elapsed()
    );
    Ok(Deployment {
        users: vec![one, two],
        users_addr: users_addr.map(|e| e.trim_start_matches("tcp://").to_owned()),
        proxy,
        _rest: vec![system, front],
        _dirs: dirs,
        _deps: (nats, pg, s3),
    })
}

/// Whether a log event is storage-users handling a request (not a readiness probe).
fn handled(e: &Value) -> bool {
    e["fields"]["message"] == "handled"
        && e["span"]["service"] == "storage-users"
        && e["span"]["route"]
            .as_str()
            .is_some_and(|r| !r.starts_with("/arca.v1.Probe"))
}

async fn dav(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<bytes::Bytes>,
) -> anyhow::Result<HttpResponse> {
    let mut all = vec![("authorization", AUTH)];
    all.extend_from_slice(headers);
    send(addr, method, path, &all, body).await
}

/// A fresh W3C trace id (32 hex digits, never zero) to follow one request across processes.
fn trace_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{:016x}{n:016x}", std::process::id())
}

/// TUS creation without a body: the upload's path (`/data/TOKEN`) on the proxy.
async fn create(addr: &str, name: &str, length: usize) -> anyhow::Result<String> {
    let metadata = format!(
        "filename {}",
        base64::engine::general_purpose::STANDARD.encode(name)
    );
    let length = length.to_string();
    let r = dav(
        addr,
        "POST",
        &format!("{ROOT}/"),
        &[
            ("tus-resumable", "1.0.0"),
            ("upload-length", &length),
            ("upload-metadata", &metadata),
        ],
        "",
    )
    .await?;
    anyhow::ensure!(r.status == 201, "creation: {} {}", r.status, r.text());
    let location = r.header("location").context("no Location")?;
    let at = location.find("/data/").context("Location without /data/")?;
    Ok(location[at..].to_owned())
}

/// One PATCH through the proxy, carrying `trace`.
async fn patch(
    addr: &str,
    path: &str,
    offset: usize,
    body: &[u8],
    trace: &str,
) -> anyhow::Result<HttpResponse> {
    let offset = offset.to_string();
    let traceparent = format!("00-{trace}-00000000000000a1-01");
    send(
        addr,
        "PATCH",
        path,
        &[
            ("tus-resumable", "1.0.0"),
            ("upload-offset", &offset),
            ("content-type", "application/offset+octet-stream"),
            ("traceparent", &traceparent),
        ],
        body.to_vec(),
    )
    .await
}

async fn content(addr: &str, path: &str) -> anyhow::Result<Vec<u8>> {
    let r = dav(addr, "GET", path, &[], "").await?;
    anyhow::ensure!(r.status == 200, "GET {path}: {} {}", r.status, r.text());
    Ok(r.body)
}

/// Which instance (index into `users`) handled each of `traces` as a PATCH of an upload,
/// waiting until every one is found in the logs.
async fn served_by(users: &[&Server], traces: &[String]) -> anyhow::Result<HashMap<String, usize>> {
    eventually(
        Duration::from_secs(10),
        "every PATCH in an instance's log",
        || {
            let mut found = HashMap::new();
            for (i, s) in users.iter().enumerate() {
                for e in s.proc.events() {
                    if handled(&e)
                        && e["span"]["route"] == "/tus/{token}"
                        && e["span"]["method"] == "PATCH"
                        && let Some(t) = e["span"]["trace_id"].as_str()
                    {
                        found.insert(t.to_owned(), i);
                    }
                }
            }
            let all = traces.iter().all(|t| found.contains_key(t));
            async move { Ok(all.then_some(found)) }
        },
    )
    .await
}

/// Uploads `data` as `name` in `CHUNKS` PATCHes; chunk `c` goes to `via(c)`: `None` through
/// the proxy (the frontend balances it), `Some(addr)` straight to that instance's
/// `/tus/{token}` (the token authorises by itself). Checks every answer and the file. Returns
/// the trace ids of the proxied PATCHes, in order.
async fn upload_in_chunks(
    proxy: &str,
    name: &str,
    data: &[u8],
    chunks: usize,
    via: impl Fn(usize) -> Option<String>,
) -> anyhow::Result<Vec<String>> {
    let size = data.len() / chunks;
    let path = create(proxy, name, data.len()).await?;
    let token = path.trim_start_matches("/data/").to_owned();
    let mut traces = Vec::new();
    for c in 0..chunks {
        let end = if c + 1 == chunks {
            data.len()
        } else {
            (c + 1) * size
        };
        let body = &data[c * size..end];
        let r = match via(c) {
            None => {
                let trace = trace_id();
                let r = patch(proxy, &path, c * size, body, &trace).await?;
                traces.push(trace);
                r
            }
            Some(addr) => {
                patch(&addr, &format!("/tus/{token}"), c * size, body, &trace_id()).await?
            }
        };
        anyhow::ensure!(
            r.status == 204,
            "{name} chunk {c}: {} {}",
            r.status,
            r.text()
        );
        let offset: usize = r.header("upload-offset").context("offset")?.parse()?;
        anyhow::ensure!(
            offset == end,
            "{name} chunk {c}: at {offset}, expected {end}"
        );
        if c + 1 == chunks {
            // The proxied answer has the file's headers, the provider's the node itself.
            anyhow::ensure!(
                r.header("oc-fileid").is_some() || r.header("x-arca-node").is_some(),
                "{name}: not committed by its last chunk"
            );
        }
    }
    let got = content(proxy, &format!("{ROOT}/{name}")).await?;
    anyhow::ensure!(
        sha1_hex(&got) == sha1_hex(data),
        "{name}: {} bytes back, not the bytes sent",
        got.len()
    );
    Ok(traces)
}

#[tokio::test]
async fn ten_uploads_whose_patches_alternate_instances_complete_byte_identical()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let d = deploy(&dir).await?;
    let a = d.proxy.public.clone();
    const UPLOADS: usize = 10;
    const CHUNKS: usize = 6;
    const CHUNK: usize = 96 << 10;

    // 1. Strict alternation: chunk c of upload u goes to instance (u + c) % 2, so every
    //    chunk after the first continues on the instance that did not store the one before.
    let started = Instant::now();
    let tasks: Vec<_> = (0..UPLOADS)
        .map(|u| {
            let (a, addrs) = (a.clone(), d.users_addr.clone());
            tokio::spawn(async move {
                let data = pattern(CHUNKS * CHUNK + u, u as u32 + 1);
                let via = |c: usize| Some(addrs[(u + c) % 2].clone());
                upload_in_chunks(&a, &format!("alternate-{u}.bin"), &data, CHUNKS, via).await
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    eprintln!(
        "{UPLOADS} uploads of {CHUNKS} PATCHes (~{} KiB each), every PATCH on the other \
         instance than the one before: all 204, all files byte-identical, in {:?}",
        CHUNK >> 10,
        started.elapsed()
    );

    // 2. Through the proxy, as clients send them: the frontend picks an instance per PATCH.
    let started = Instant::now();
    let tasks: Vec<_> = (0..UPLOADS)
        .map(|u| {
            let a = a.clone();
            tokio::spawn(async move {
                let data = pattern(CHUNKS * CHUNK, 100 + u as u32);
                upload_in_chunks(&a, &format!("balanced-{u}.bin"), &data, CHUNKS, |_| None).await
            })
        })
        .collect();
    let mut per_upload = Vec::new();
    for t in tasks {
        per_upload.push(t.await??);
    }
    let elapsed = started.elapsed();
    let users: Vec<&Server> = d.users.iter().collect();
    let all: Vec<String> = per_upload.iter().flatten().cloned().collect();
    let by = served_by(&users, &all).await?;
    let mut per_instance = [0usize; 2];
    let (mut moves, mut on_both) = (0, 0);
    for traces in &per_upload {
        let seq: Vec<usize> = traces.iter().map(|t| by[t]).collect();
        for &i in &seq {
            per_instance[i] += 1;
        }
        moves += seq.windows(2).filter(|w| w[0] != w[1]).count();
        if seq.contains(&0) && seq.contains(&1) {
            on_both += 1;
        }
    }
    eprintln!(
        "{UPLOADS} uploads of {CHUNKS} PATCHes through the proxy in {elapsed:?}: all 204, all \
         files byte-identical; PATCHes served by instance 1: {}, instance 2: {}; {moves} of {} \
         consecutive PATCHes of an upload moved to the other instance; {on_both} of {UPLOADS} \
         uploads were written by both",
        per_instance[0],
        per_instance[1],
        UPLOADS * (CHUNKS - 1),
    );
    assert!(
        per_instance[0] > 0 && per_instance[1] > 0,
        "the frontend used one instance only"
    );

    // 3. Racing PATCHes of one upload at one offset, on both instances at once: one counts,
    //    the others are refused with the offset that won, and the file is the winner's bytes.
    const RACERS: usize = 8;
    let path = create(&a, "raced.bin", 2 * CHUNK).await?;
    let token = path.trim_start_matches("/data/").to_owned();
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(RACERS));
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let addr = d.users_addr[i % 2].clone();
            let (path, barrier) = (format!("/tus/{token}"), barrier.clone());
            tokio::spawn(async move {
                let body = pattern(CHUNK, 1000 + i as u32);
                barrier.wait().await;
                let r = patch(&addr, &path, 0, &body, &trace_id()).await?;
                Ok::<_, anyhow::Error>((r, body))
            })
        })
        .collect();
    let (mut winners, mut refused) = (Vec::new(), 0);
    for t in tasks {
        let (r, body) = t.await??;
        match r.status {
            204 => winners.push(body),
            409 | 423 => {
                refused += 1;
                assert_eq!(r.header("upload-offset"), Some(CHUNK.to_string().as_str()));
            }
            other => anyhow::bail!("a racing PATCH got {other}: {}", r.text()),
        }
    }
    assert_eq!(winners.len(), 1, "{} racing PATCHes counted", winners.len());
    let rest = pattern(CHUNK, 2000);
    let r = patch(&a, &path, CHUNK, &rest, &trace_id()).await?;
    assert_eq!(r.status, 204, "{}", r.text());
    let got = content(&a, &format!("{ROOT}/raced.bin")).await?;
    assert_eq!(
        sha1_hex(&got),
        sha1_hex(&[winners[0].clone(), rest].concat())
    );
    eprintln!(
        "{RACERS} PATCHes at one offset on both instances at once: 1 counted, {refused} refused \
         (409/423), the file is the winner's bytes"
    );
    Ok(())
}

#[tokio::test]
async fn an_upload_is_finished_through_the_other_instance_after_a_sigterm() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let mut d = deploy(&dir).await?;
    let a = d.proxy.public.clone();
    let chunk = 256 << 10;
    let data = pattern(4 * chunk, 77);
    let path = create(&a, "survivor.bin", data.len()).await?;

    let trace = trace_id();
    let r = patch(&a, &path, 0, &data[..chunk], &trace).await?;
    assert_eq!(r.status, 204, "{}", r.text());
    let users: Vec<&Server> = d.users.iter().collect();
    let first = served_by(&users, std::slice::from_ref(&trace)).await?[&trace];
    let other = 1 - first;
    eprintln!("the first chunk was stored by instance {}", first + 1);

    let term_at = Instant::now();
    d.users[first].proc.sigterm();
    let code = d.users[first]
        .proc
        .exit_code(Duration::from_secs(30))
        .await?;
    assert_eq!(code, Some(0), "{}", d.users[first].proc.stderr_tail(20));
    eprintln!(
        "instance {} exited 0 {:?} after its SIGTERM",
        first + 1,
        term_at.elapsed()
    );

    // The client resumes as a TUS client does after losing its connection: HEAD, then on.
    let h = send(&a, "HEAD", &path, &[("tus-resumable", "1.0.0")], "").await?;
    assert_eq!(h.status, 200, "{}", h.text());
    assert_eq!(h.header("upload-offset"), Some(chunk.to_string().as_str()));
    let mut traces = Vec::new();
    for c in 1..4 {
        let trace = trace_id();
        let r = patch(
            &a,
            &path,
            c * chunk,
            &data[c * chunk..(c + 1) * chunk],
            &trace,
        )
        .await?;
        assert_eq!(r.status, 204, "chunk {c}: {}", r.text());
        traces.push(trace);
    }
    let users: Vec<&Server> = d.users.iter().collect();
    let by = served_by(&users, &traces).await?;
    assert!(
        traces.iter().all(|t| by[t] == other),
        "the rest went to instance {}",
        other + 1
    );
    let got = content(&a, &format!("{ROOT}/survivor.bin")).await?;
    assert_eq!(sha1_hex(&got), sha1_hex(&data));
    eprintln!(
        "the upload was finished by instance {} from offset {chunk}: {} bytes, byte-identical",
        other + 1,
        got.len()
    );
    Ok(())
}

/// Relative path → SHA-1 of every file under `root`, the client's own files left out.
fn local_files(
    root: &std::path::Path,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let rel = path.strip_prefix(root)?.to_string_lossy().into_owned();
            if rel.starts_with(".sync_") || rel.starts_with(".nextcloudsync.log") {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.insert(rel, sha1_hex(&std::fs::read(&path)?));
            }
        }
    }
    Ok(out)
}

/// The proxy's access lines for chunk PUTs answered `status`: their paths.
fn chunk_puts(proxy: &Server, status: u64) -> Vec<String> {
    proxy
        .proc
        .events()
        .into_iter()
        .filter(|e| {
            e["target"] == "access"
                && e["fields"]["method"] == "PUT"
                && e["fields"]["status"] == status
        })
        .filter_map(|e| e["fields"]["path"].as_str().map(str::to_owned))
        .filter(|p| p.starts_with("/remote.php/dav/uploads/"))
        .collect()
}

#[tokio::test]
async fn nextcloudcmd_chunks_land_on_both_instances_and_resume_across_them() -> anyhow::Result<()> {
    const CHUNK: usize = 10_000_000;
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let d = deploy(&dir).await?;
    let a = d.proxy.public.clone();
    let r = dav(&a, "MKCOL", &format!("{ROOT}/nc"), &[], "").await?;
    anyhow::ensure!(r.status == 201, "MKCOL: {}", r.status);
    let local = dir.join("nc-local");
    std::fs::create_dir_all(local.join("sub ü"))?;
    for i in 0..20 {
        std::fs::write(
            local.join(format!("sub ü/small #{i}.txt")),
            pattern(100 + i * 37, i as u32),
        )?;
    }
    std::fs::write(local.join("big 150 MB.bin"), pattern(150_000_000, 150))?;
    std::fs::write(local.join("sub ü/25 MB + x.bin"), pattern(25_000_000, 25))?;
    let want = local_files(&local)?;
    let home = dir.join("nc-home");
    std::fs::create_dir_all(&home)?;
    let sync = |local: &std::path::Path, home: &std::path::Path, extra: &[&str]| {
        let mut cmd = arca_tests::nextcloudcmd(home, EXAMPLE_PASSWORD, Some(CHUNK));
        cmd.args(extra)
            .args(["--path", "/nc"])
            .arg(local)
            .arg(format!("http://{a}"));
        cmd
    };

    // Run 1, slowed and killed once a few chunks are stored (a crash: SIGKILL).
    let started = Instant::now();
    let mut proc = Proc::spawn(sync(&local, &home, &["--uplimit", "50000"]))?;
    eventually(Duration::from_secs(90), "four chunks stored", || {
        let n = chunk_puts(&d.proxy, 201).len();
        async move { Ok((n >= 4).then_some(())) }
    })
    .await
    .with_context(|| format!("nextcloudcmd: {}", proc.stderr_tail(20)))?;
    anyhow::ensure!(
        !proc.has_exited(),
        "nextcloudcmd finished before it was interrupted"
    );
    proc.signal(libc::SIGKILL);
    proc.wait_exit(Duration::from_secs(10)).await?;
    let before = chunk_puts(&d.proxy, 201).len();

    // Run 2 finishes from what either instance stored, sending no stored chunk again.
    let mut proc = Proc::spawn(sync(&local, &home, &[]))?;
    let status = proc.wait_exit(Duration::from_secs(180)).await?;
    anyhow::ensure!(
        status.success(),
        "nextcloudcmd: {status}\n{}",
        proc.stderr_tail(30)
    );
    // nextcloudcmd exits 0 over a file it only postponed (a 423 on its MOVE): the server's
    // answers are what count. None refused a request, failed, or made a client wait, but the
    // chunk the kill cut short (503 from the proxy: its client was gone).
    let refused: Vec<String> = d
        .proxy
        .proc
        .events()
        .into_iter()
        .filter(|e| e["target"] == "access" && e["fields"]["status"].as_u64().unwrap_or(0) >= 423)
        .filter(|e| !(e["fields"]["method"] == "PUT" && e["fields"]["status"] == 503))
        .map(|e| {
            format!(
                "{} {} {}",
                e["fields"]["method"], e["fields"]["path"], e["fields"]["status"]
            )
        })
        .collect();
    assert!(refused.is_empty(), "answers: {refused:?}");
    let stored = chunk_puts(&d.proxy, 201);
    let unique: std::collections::BTreeSet<&String> = stored.iter().collect();
    assert_eq!(
        unique.len(),
        stored.len(),
        "a stored chunk was sent again: {stored:?}"
    );
    assert_eq!(
        stored.len(),
        150_000_000usize.div_ceil(CHUNK) + 25_000_000usize.div_ceil(CHUNK)
    );
    for (rel, sha1) in &want {
        let got = content(
            &a,
            &format!(
                "{ROOT}/nc/{}",
                rel.replace(' ', "%20")
                    .replace('#', "%23")
                    .replace('+', "%2B")
                    .replace('ü', "%C3%BC")
            ),
        )
        .await?;
        assert_eq!(&sha1_hex(&got), sha1, "{rel} on the server");
    }
    // Which instance stored which chunk: the data path `/chunk/{token}` in their logs.
    let per_instance: Vec<usize> = d
        .users
        .iter()
        .map(|s| {
            s.proc
                .events()
                .iter()
                .filter(|e| handled(e) && e["span"]["route"] == "/chunk/{token}")
                .count()
        })
        .collect();
    assert!(
        per_instance.iter().all(|&n| n > 0),
        "chunks landed on one instance only: {per_instance:?}"
    );

    // An unchanged run changes nothing; a fresh folder gets every file byte for byte.
    let mut proc = Proc::spawn(sync(&local, &home, &[]))?;
    let status = proc.wait_exit(Duration::from_secs(60)).await?;
    anyhow::ensure!(status.success(), "nextcloudcmd: {status}");
    let changes: Vec<String> = proc
        .stderr()
        .into_iter()
        .filter(|l| l.contains("Discovered \"") && l.contains("CSYNC_INSTRUCTION_"))
        .filter(|l| !l.contains("INSTRUCTION_NONE") && !l.contains("INSTRUCTION_UPDATE_METADATA"))
        .collect();
    assert_eq!(
        changes,
        Vec::<String>::new(),
        "an unchanged run changed things"
    );
    let fresh = dir.join("nc-fresh");
    let fresh_home = dir.join("nc-fresh-home");
    std::fs::create_dir_all(&fresh)?;
    std::fs::create_dir_all(&fresh_home)?;
    let mut proc = Proc::spawn(sync(&fresh, &fresh_home, &[]))?;
    let status = proc.wait_exit(Duration::from_secs(120)).await?;
    anyhow::ensure!(status.success(), "nextcloudcmd: {status}");
    assert_eq!(
        local_files(&fresh)?,
        want,
        "the download into an empty folder"
    );
    eprintln!(
        "nextcloudcmd through the split deployment: killed with {before} chunks stored, \
         finished by the next run ({} chunks in all, each once), chunks per instance {:?}; \
         all byte-identical up and down, in {:?}",
        stored.len(),
        per_instance,
        started.elapsed()
    );
    Ok(())
}
