//! Undo (issue 32) where arca scales out: real `arca` processes split as config/grouped-nats
//! runs them (storage-system; storage-users on one PostgreSQL database and one S3 bucket in
//! moto; frontend + gateway + sharing; the proxy), found through the NATS registry, publishing
//! on the NATS event bus, which the test reads straight from JetStream.
//!
//! - The trash and versions on PostgreSQL and S3, with two storage-users instances: a removed
//!   folder listed, restored over a taken name (412, then 204 with `Overwrite: T`), one item
//!   purged and the trash emptied, each checked against the objects and bytes S3 itself lists;
//!   a version restored. A file trashed through one instance is listed and restored through
//!   the other; a client's mass delete is flagged and restored in one call while both serve;
//!   expiry frees the S3 bytes. Every step's event (`file.trashed`, `file.restored`,
//!   `file.purged`, `version.restored`, `trash.burst`) is in the stream with its space and
//!   path.
//! - A bulk restore of 10,000 items whose storage-users is killed (SIGKILL) part way: every
//!   item is restored or still in the trash, never both; the restarted instance finishes the
//!   rest; nothing is lost, nothing comes back twice, every file's size and checksum are right
//!   and a sample's bytes are.
//!
//! Times are printed (`cargo test -- --nocapture`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use arca_tests::xml::{DavResponse as Entry, multistatus as entries};
use arca_tests::{
    EXAMPLE_PASSWORD, ExampleSet, HttpResponse, Launch, Moto, Nats, Postgres, Server, TempDir,
    basic, eventually, free_addr, pattern, send_as, sha1_hex,
};
use async_nats::jetstream;
use futures::StreamExt as _;
use serde_json::Value;

/// The tests share two cores: one deployment at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const READY: Duration = Duration::from_secs(30);
const WITHIN: Duration = Duration::from_secs(20);
/// The bucket and the event stream of the examples.
const BUCKET: &str = "arca-blobs";
const STREAM: &str = "arca-events";
/// The endpoints the two storage-users examples announce, swapped per instance started.
const USERS_1: &str = "tcp://127.0.0.1:9141";
const USERS_2: &str = "tcp://127.0.0.1:9143";
const SYNC_CLIENT: &str = "Mozilla/5.0 (Linux) mirall/5.3.2 (owncloudcmd)";

fn tcp_endpoint() -> String {
    format!("tcp://{}", free_addr())
}

/// A storage-users process and what it takes to start it again as it was (a pod restarted):
/// its example file, endpoint and directory.
struct Instance {
    server: Server,
    file: &'static str,
    endpoint: String,
    dir: TempDir,
}

/// Everything but storage-users, which each test starts and stops itself.
struct Cluster {
    system: Server,
    front: Server,
    proxy: Server,
    set: ExampleSet,
    /// `ARCA_LOG_LEVEL` of every process, and settings every storage-users instance gets.
    log: &'static str,
    users_settings: Vec<(&'static str, &'static str)>,
    _dirs: Vec<TempDir>,
    s3: Moto,
    _pg: Postgres,
    nats: Nats,
    _root: TempDir,
}

impl Cluster {
    /// NATS, PostgreSQL and moto, then the example set with `users` storage-users instances
    /// (storage-users.yaml, then storage-users-2.yaml), all ready.
    async fn start(
        users: usize,
        users_settings: &[(&'static str, &'static str)],
        log: &'static str,
    ) -> anyhow::Result<(Self, Vec<Instance>)> {
        let started = Instant::now();
        let root = TempDir::new();
        let (nats, pg, s3) = tokio::try_join!(
            Nats::start(&root),
            Postgres::start(&root),
            Moto::start(&[BUCKET])
        )?;
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
                ("tcp://127.0.0.1:9144", tcp_endpoint()),
            ],
        };
        let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new()).collect();
        let launch = |dir: &TempDir, file: &str| -> anyhow::Result<Launch> {
            Ok(set.launch(dir, file, &[])?.env("ARCA_LOG_LEVEL", log))
        };
        let system = launch(&dirs[0], "storage-system.yaml")?.spawn()?;
        let front = launch(&dirs[1], "frontend.yaml")?.spawn()?;
        let proxy = launch(&dirs[2], "proxy.yaml")?.spawn()?;
        let mut cluster = Cluster {
            system,
            front,
            proxy,
            set,
            log,
            users_settings: users_settings.to_vec(),
            _dirs: dirs,
            s3,
            _pg: pg,
            nats,
            _root: root,
        };
        let files = ["storage-users.yaml", "storage-users-2.yaml"];
        // Started together, as a deployment's pods are: the storage-users instances migrate
        // the empty database at once; the frontend is ready once it finds one of them.
        let mut instances = Vec::new();
        for file in files.iter().take(users) {
            instances.push(cluster.spawn_users(file, &[])?);
        }
        cluster.system.wait_ready(READY).await?;
        for i in &mut instances {
            i.server.wait_ready(READY).await?;
        }
        cluster.front.wait_ready(READY).await?;
        cluster.proxy.wait_ready(READY).await?;
        eprintln!(
            "NATS, PostgreSQL, moto and {} arca processes ready in {:?}",
            3 + users,
            started.elapsed()
        );
        Ok((cluster, instances))
    }

    fn users_launch(
        &self,
        file: &'static str,
        endpoint: &str,
        dir: &TempDir,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<Launch> {
        let example = if file == "storage-users.yaml" {
            USERS_1
        } else {
            USERS_2
        };
        let mut launch = self
            .set
            .launch(dir, file, &[(example, endpoint.to_owned())])?
            .env("ARCA_LOG_LEVEL", self.log);
        for (key, value) in self.users_settings.iter().chain(extra) {
            launch = launch.set(key, value);
        }
        Ok(launch)
    }

    /// A new storage-users instance from `file` on a fresh endpoint and directory (not waited
    /// for), with `extra` settings on top of the cluster's.
    fn spawn_users(&self, file: &'static str, extra: &[(&str, &str)]) -> anyhow::Result<Instance> {
        let dir = TempDir::new();
        let endpoint = tcp_endpoint();
        let server = self.users_launch(file, &endpoint, &dir, extra)?.spawn()?;
        Ok(Instance {
            server,
            file,
            endpoint,
            dir,
        })
    }

    /// `i` started again after it stopped: same file, endpoint and directory.
    async fn restart(&self, i: &mut Instance) -> anyhow::Result<()> {
        ensure!(i.server.proc.has_exited(), "restart of a running instance");
        i.server = self
            .users_launch(i.file, &i.endpoint, &i.dir, &[])?
            .spawn()?;
        i.server.wait_ready(READY).await?;
        Ok(())
    }

    fn addr(&self) -> &str {
        &self.proxy.public
    }

    async fn req(
        &self,
        user: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<bytes::Bytes>,
    ) -> anyhow::Result<HttpResponse> {
        let auth = if user == "admin" {
            basic("admin", EXAMPLE_PASSWORD)
        } else {
            basic(user, &format!("{user}-pw"))
        };
        send_as(self.addr(), &auth, method, path, headers, body).await
    }

    /// Creates `name` (password `NAME-pw`) through Graph; its id.
    async fn user(&self, name: &str) -> anyhow::Result<String> {
        let body = format!(
            r#"{{"onPremisesSamAccountName":"{name}","displayName":"{name}","mail":"{name}@example.org","passwordProfile":{{"password":"{name}-pw"}}}}"#
        );
        let r = self
            .req(
                "admin",
                "POST",
                "/graph/v1.0/users",
                &[("content-type", "application/json")],
                body,
            )
            .await?;
        ensure!(r.status == 201, "create {name}: {} {}", r.status, r.text());
        Ok(r.json()?["id"].as_str().context("user id")?.to_owned())
    }

    async fn expect(
        &self,
        status: u16,
        user: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<bytes::Bytes>,
    ) -> anyhow::Result<HttpResponse> {
        let r = self.req(user, method, path, headers, body).await?;
        ensure!(
            r.status == status,
            "{method} {path}: {} (not {status}) {}",
            r.status,
            r.text()
        );
        Ok(r)
    }

    async fn put(&self, path: &str, content: &[u8]) -> anyhow::Result<()> {
        let r = self
            .req("alice", "PUT", &files(path), &[], content.to_vec())
            .await?;
        ensure!(
            r.status == 201 || r.status == 204,
            "PUT {path}: {} {}",
            r.status,
            r.text()
        );
        Ok(())
    }

    async fn expect_content(&self, path: &str, content: &[u8]) -> anyhow::Result<()> {
        let r = self
            .expect(200, "alice", "GET", &files(path), &[], "")
            .await?;
        ensure!(
            r.body == content,
            "GET {path}: {} bytes, not the {} written",
            r.body.len(),
            content.len()
        );
        Ok(())
    }

    /// alice's trash (the root's own entry left out).
    async fn trash(&self) -> anyhow::Result<Vec<Entry>> {
        let root = "/remote.php/dav/trash-bin/alice/";
        let mut all = self.list(root, "").await?;
        ensure!(
            all.first().is_some_and(|e| e.href == root && e.collection),
            "the trash root comes first: {:?}",
            all.first()
        );
        all.remove(0);
        Ok(all)
    }

    /// PROPFIND Depth 1 of `path` as alice (`body` empty: allprop); 207 required.
    async fn list(&self, path: &str, body: &str) -> anyhow::Result<Vec<Entry>> {
        let r = self
            .expect(
                207,
                "alice",
                "PROPFIND",
                path,
                &[("depth", "1")],
                body.to_owned(),
            )
            .await?;
        entries(&r.text())
    }

    /// alice's personal drive's `quota` (Graph): used, trash bytes, trash items.
    async fn quota(&self) -> anyhow::Result<(u64, u64, u64)> {
        let r = self
            .expect(200, "alice", "GET", "/graph/v1.0/me/drives", &[], "")
            .await?;
        let v = r.json()?;
        let drive = v["value"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["driveType"] == "personal"))
            .with_context(|| format!("no personal drive: {v}"))?;
        let n = |k: &str| {
            drive["quota"][k]
                .as_u64()
                .with_context(|| format!("quota.{k}"))
        };
        Ok((n("used")?, n("trash")?, n("trashItems")?))
    }

    /// `POST /api/v1/trash/restore` of alice's trash, as the admin: its counts.
    async fn restore_all(&self) -> anyhow::Result<Value> {
        let r = self
            .expect(
                200,
                "admin",
                "POST",
                "/api/v1/trash/restore",
                &[("content-type", "application/json")],
                r#"{"user":"alice"}"#,
            )
            .await?;
        r.json()
    }

    async fn s3_objects(&self) -> anyhow::Result<(u64, u64)> {
        self.s3.objects(BUCKET).await
    }
}

fn files(rest: &str) -> String {
    format!("/remote.php/dav/files/alice{rest}")
}

/// Every event arca publishes, read from JetStream by a durable consumer of the test's own
/// (as tests/events.rs reads them), in the stream's order.
struct Bus {
    seen: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Bus {
    async fn read(url: &str) -> anyhow::Result<Self> {
        let js = jetstream::new(async_nats::connect(url).await?);
        // Made by the first process that publishes or subscribes.
        let stream = eventually(WITHIN, "the event stream exists", || {
            let js = js.clone();
            async move { Ok(js.get_stream(STREAM).await.ok()) }
        })
        .await?;
        let consumer: jetstream::consumer::PullConsumer = stream
            .create_consumer(jetstream::consumer::pull::Config {
                durable_name: Some("undo-scaleout-test".to_owned()),
                filter_subject: format!("{STREAM}.>"),
                ..Default::default()
            })
            .await?;
        let mut messages = consumer.messages().await?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Some(Ok(msg)) = messages.next().await {
                if let Ok(event) = serde_json::from_slice::<Value>(&msg.payload) {
                    into.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(event);
                }
                let _ = msg.ack().await;
            }
        });
        Ok(Self { seen, task })
    }

    fn of(&self, kind: &str) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|e| e["kind"] == kind)
            .cloned()
            .collect()
    }

    /// Waits for an event of `kind` whose attributes include every `(key, value)` of `attrs`.
    async fn wait(&self, kind: &str, attrs: &[(&str, &str)]) -> anyhow::Result<Value> {
        let matches = |e: &Value| attrs.iter().all(|(k, v)| e["attrs"][*k] == *v);
        let found = eventually(WITHIN, &format!("a {kind} event with {attrs:?}"), || {
            let hit = self.of(kind).into_iter().find(|e| matches(e));
            async move { Ok(hit) }
        })
        .await;
        found.with_context(|| format!("{kind} events in the stream: {:?}", self.of(kind)))
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The gRPC methods of the Storage API a storage-users process handled, from its request log
/// (`handled` at debug level of the runtime's request layer), from log event `from` on.
fn handled(server: &Server, from: usize) -> Vec<String> {
    server
        .proc
        .events()
        .into_iter()
        .skip(from)
        .filter(|e| e["fields"]["message"] == "handled" && e["span"]["service"] == "storage-users")
        .filter_map(|e| {
            let route = e["span"]["route"].as_str()?;
            Some(route.strip_prefix("/arca.v1.Storage/")?.to_owned())
        })
        .collect()
}

/// [`handled`] once it holds every one of `methods` (a request's line is logged as its
/// answer leaves, so it may trail the answer a little).
async fn served(server: &Server, from: usize, methods: &[&str]) -> anyhow::Result<Vec<String>> {
    let what = format!("{methods:?} in a storage-users request log");
    let seen = eventually(WITHIN, &what, || {
        let h = handled(server, from);
        let all = methods.iter().all(|m| h.iter().any(|x| x == m));
        async move { Ok(all.then_some(h)) }
    })
    .await;
    seen.with_context(|| format!("handled: {:?}", handled(server, from)))
}

/// SIGTERM, then a clean exit.
async fn stop(server: &mut Server) -> anyhow::Result<()> {
    server.proc.sigterm();
    let code = server.proc.exit_code(Duration::from_secs(20)).await?;
    ensure!(
        code == Some(0),
        "exit {code:?}: {}",
        server.proc.stderr_tail(20)
    );
    Ok(())
}

/// Bytes that differ per `seed`, `n` long.
fn body(seed: u32, n: usize) -> Vec<u8> {
    pattern(n, seed)
}

#[tokio::test]
async fn trash_and_versions_on_postgres_and_s3_across_two_storage_users_with_their_events()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let (c, mut users) = Cluster::start(
        2,
        // Every body to S3, so that S3's own listing counts what the trash and versions keep
        // and free (small bodies kept in the database are the store tests' to count).
        &[
            ("storage-users.trash.burst.items", "20"),
            ("storage-users.inline_max", "0"),
        ],
        arca_tests::EXAMPLE_LOG_LEVEL,
    )
    .await?;
    c.user("alice").await?;
    let bus = Bus::read(&c.nats.url()).await?;

    // (1) The trash wire on PostgreSQL and S3: a folder removed, listed, restored over a
    // taken name, one item purged, a version restored, the trash emptied; S3 counted directly.
    let phase = Instant::now();
    let (objects_0, bytes_0) = c.s3_objects().await?;
    let (a, b) = (body(1, 5_000), body(2, 70_000));
    c.expect(201, "alice", "MKCOL", &files("/docs"), &[], "")
        .await?;
    c.expect(201, "alice", "MKCOL", &files("/docs/sub"), &[], "")
        .await?;
    c.put("/docs/a.txt", &a).await?;
    c.put("/docs/sub/b.bin", &b).await?;
    let written = (objects_0 + 2, bytes_0 + 75_000);
    assert_eq!(c.s3_objects().await?, written, "S3 holds what was written");
    c.expect(204, "alice", "DELETE", &files("/docs"), &[], "")
        .await?;
    c.expect(404, "alice", "GET", &files("/docs/a.txt"), &[], "")
        .await?;
    assert_eq!(c.s3_objects().await?, written, "the trash keeps the bytes");
    let items = c.trash().await?;
    ensure!(items.len() == 1, "one item: {items:?}");
    let docs = &items[0];
    assert_eq!(docs.prop("oc:trashbin-original-filename"), "docs");
    assert_eq!(docs.prop("oc:trashbin-original-location"), "docs");
    assert!(docs.collection, "{docs:?}");
    assert_eq!(docs.prop("oc:size"), "75000");
    let space = docs.prop("oc:spaceid").to_owned();
    assert!(space.starts_with("storage-users$"), "{docs:?}");
    let docs_key = docs.last().to_owned();
    let inside = c
        .list(
            &format!("/remote.php/dav/trash-bin/alice/{docs_key}/sub/"),
            "",
        )
        .await?;
    assert_eq!(inside.len(), 2, "sub and b.bin: {inside:?}");
    assert_eq!(
        inside[1].prop("oc:trashbin-original-location"),
        "docs/sub/b.bin"
    );
    bus.wait(
        "file.trashed",
        &[
            ("space_id", &space),
            ("path", "/docs"),
            ("trash_key", &docs_key),
        ],
    )
    .await?;

    // The name is taken again: a restore without Overwrite (or with F) is 412 and changes
    // nothing; with T it is 204 and what it replaced goes to the trash.
    c.expect(201, "alice", "MKCOL", &files("/docs"), &[], "")
        .await?;
    c.put("/docs/new.txt", b"newer").await?;
    let item_url = format!("/remote.php/dav/trash-bin/alice/{docs_key}");
    let dest = files("/docs");
    for headers in [
        vec![("destination", dest.as_str())],
        vec![("destination", dest.as_str()), ("overwrite", "F")],
    ] {
        c.expect(412, "alice", "MOVE", &item_url, &headers, "")
            .await?;
    }
    c.expect_content("/docs/new.txt", b"newer").await?;
    assert_eq!(c.trash().await?.len(), 1);
    c.expect(
        204,
        "alice",
        "MOVE",
        &item_url,
        &[("destination", dest.as_str()), ("overwrite", "T")],
        "",
    )
    .await?;
    c.expect_content("/docs/a.txt", &a).await?;
    c.expect_content("/docs/sub/b.bin", &b).await?;
    c.expect(404, "alice", "GET", &files("/docs/new.txt"), &[], "")
        .await?;
    let items = c.trash().await?;
    ensure!(items.len() == 1, "the replaced folder: {items:?}");
    assert_eq!(items[0].prop("oc:size"), "5");
    let replaced_key = items[0].last().to_owned();
    bus.wait(
        "file.restored",
        &[
            ("space_id", &space),
            ("path", "/docs"),
            ("trash_key", &docs_key),
            ("replaced_key", &replaced_key),
        ],
    )
    .await?;

    // Purging that one item deletes its object from S3 before the answer.
    assert_eq!(c.s3_objects().await?, (objects_0 + 3, bytes_0 + 75_005));
    c.expect(
        204,
        "alice",
        "DELETE",
        &format!("/remote.php/dav/trash-bin/alice/{replaced_key}"),
        &[],
        "",
    )
    .await?;
    assert_eq!(c.s3_objects().await?, written, "the purged object is gone");
    assert!(c.trash().await?.is_empty());
    bus.wait(
        "file.purged",
        &[
            ("space_id", &space),
            ("trash_key", &replaced_key),
            ("items", "1"),
            ("bytes", "5"),
        ],
    )
    .await?;

    // A version restored as ownCloud Web does (COPY with Overwrite: F): 204, v1 is the
    // content, v3 a version.
    let (v1, v2, v3) = (body(3, 40_000), body(4, 50_000), body(5, 33));
    for v in [&v1, &v2, &v3] {
        c.put("/v.txt", v).await?;
    }
    let id = c
        .list(
            &files("/v.txt"),
            r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><oc:fileid/></d:prop></d:propfind>"#,
        )
        .await?
        .first()
        .map(|e| e.prop("oc:fileid").to_owned())
        .context("v.txt")?;
    let versions_url = format!("/remote.php/dav/meta/{id}/v");
    let versions = c.list(&versions_url, "").await?;
    let sizes: Vec<&str> = versions[1..]
        .iter()
        .map(|e| e.prop("d:getcontentlength"))
        .collect();
    assert_eq!(sizes, ["50000", "40000"], "v2, v1 newest first");
    let v1_href = versions[2].href.clone();
    let v1_key = versions[2].last().to_owned();
    let target = files("/v.txt");
    c.expect(
        204,
        "alice",
        "COPY",
        &v1_href,
        &[("destination", target.as_str()), ("overwrite", "F")],
        "",
    )
    .await?;
    c.expect_content("/v.txt", &v1).await?;
    let sizes: Vec<String> = c.list(&versions_url, "").await?[1..]
        .iter()
        .map(|e| e.prop("d:getcontentlength").to_owned())
        .collect();
    assert_eq!(sizes, ["33", "50000"], "v3 and v2 are the versions");
    bus.wait(
        "version.restored",
        &[
            ("space_id", &space),
            ("path", "/v.txt"),
            ("version_key", &v1_key),
        ],
    )
    .await?;

    // Everything removed, then the trash emptied: S3 is back where it started.
    c.expect(204, "alice", "DELETE", &files("/docs"), &[], "")
        .await?;
    c.expect(204, "alice", "DELETE", &files("/v.txt"), &[], "")
        .await?;
    assert_eq!(c.trash().await?.len(), 2);
    let held = c.s3_objects().await?;
    assert_eq!(held.0, objects_0 + 5, "a, b, v1, v2, v3: {held:?}");
    c.expect(
        204,
        "alice",
        "DELETE",
        "/remote.php/dav/trash-bin/alice/",
        &[],
        "",
    )
    .await?;
    assert_eq!(
        c.s3_objects().await?,
        (objects_0, bytes_0),
        "emptying the trash gives every object back"
    );
    assert!(c.trash().await?.is_empty());
    bus.wait(
        "file.purged",
        &[("space_id", &space), ("trash_key", ""), ("items", "3")],
    )
    .await?;
    eprintln!(
        "trash and versions on PostgreSQL and S3: {:?}",
        phase.elapsed()
    );

    // (2) One instance trashes, the other lists and restores: B stopped, the DELETE can only
    // reach A; B back and A stopped, the listing and the restore can only reach B.
    let phase = Instant::now();
    let moved = body(6, 3_000);
    c.put("/moved.txt", &moved).await?;
    let (mut a_users, mut b_users) = {
        let mut it = users.drain(..);
        (
            it.next().context("instance A")?,
            it.next().context("instance B")?,
        )
    };
    stop(&mut b_users.server).await?;
    let a_mark = a_users.server.proc.events().len();
    c.expect(204, "alice", "DELETE", &files("/moved.txt"), &[], "")
        .await?;
    c.restart(&mut b_users).await?;
    stop(&mut a_users.server).await?;
    let b_mark = b_users.server.proc.events().len();
    let items = c.trash().await?;
    ensure!(items.len() == 1, "{items:?}");
    assert_eq!(items[0].prop("oc:trashbin-original-location"), "moved.txt");
    let moved_key = items[0].last().to_owned();
    c.expect(
        201,
        "alice",
        "MOVE",
        &format!("/remote.php/dav/trash-bin/alice/{moved_key}"),
        &[("destination", &files("/moved.txt"))],
        "",
    )
    .await?;
    c.expect_content("/moved.txt", &moved).await?;
    served(&a_users.server, a_mark, &["Delete"]).await?;
    served(&b_users.server, b_mark, &["ListTrash", "RestoreTrash"]).await?;
    bus.wait(
        "file.restored",
        &[
            ("space_id", &space),
            ("path", "/moved.txt"),
            ("trash_key", &moved_key),
        ],
    )
    .await?;

    // Both up: a client removes 30 files one by one (a burst past the 20 configured), and
    // one admin call restores them, every file byte-exact.
    c.restart(&mut a_users).await?;
    let (a_mark, b_mark) = (
        a_users.server.proc.events().len(),
        b_users.server.proc.events().len(),
    );
    c.expect(201, "alice", "MKCOL", &files("/bulk"), &[], "")
        .await?;
    let tree: Vec<(String, Vec<u8>)> = (0..30u32)
        .map(|i| {
            (
                format!("/bulk/f{i:02}.bin"),
                body(100 + i, 100 + 977 * i as usize),
            )
        })
        .collect();
    for (path, content) in &tree {
        c.put(path, content).await?;
    }
    for (path, _) in &tree {
        c.expect(
            204,
            "alice",
            "DELETE",
            &files(path),
            &[("user-agent", SYNC_CLIENT)],
            "",
        )
        .await?;
    }
    let burst = bus
        .wait(
            "trash.burst",
            &[("space_id", &space), ("client", SYNC_CLIENT)],
        )
        .await?;
    let files_in_burst: u64 = burst["attrs"]["files"].as_str().unwrap_or("").parse()?;
    assert!(files_in_burst >= 20, "{burst}");
    // Listed on PostgreSQL with what of it is in the trash; none once restored (below).
    let in_trash = || async {
        let r = c
            .expect(200, "alice", "GET", "/api/v1/trash/bursts", &[], "")
            .await?;
        let v = r.json()?;
        anyhow::Ok((
            v["value"][0]["items"].as_u64(),
            v["value"][0]["in_trash"].as_u64(),
        ))
    };
    assert_eq!(in_trash().await?, (Some(30), Some(30)));
    let t = c.restore_all().await?;
    assert_eq!(
        (
            t["total"].as_u64(),
            t["restored"].as_u64(),
            t["renamed"].as_u64()
        ),
        (Some(30), Some(30), Some(0)),
        "{t}"
    );
    for (path, content) in &tree {
        c.expect_content(path, content).await?;
    }
    assert!(c.trash().await?.is_empty());
    assert_eq!(in_trash().await?, (Some(30), Some(0)));
    // Each instance took part of the removals (the frontend picks an endpoint per request).
    let by_a = served(&a_users.server, a_mark, &["Delete"]).await?;
    let by_b = served(&b_users.server, b_mark, &["Delete"]).await?;
    let restores = by_a
        .iter()
        .chain(&by_b)
        .filter(|m| *m == "RestoreAll")
        .count();
    assert_eq!(restores, 1, "one bulk restore call");
    bus.wait(
        "file.restored",
        &[
            ("space_id", &space),
            ("bulk", "true"),
            ("items", "30"),
            ("files", "30"),
        ],
    )
    .await?;
    eprintln!(
        "two storage-users instances: trashed by one, restored by the other, a burst of 30 \
         restored in one call: {:?}",
        phase.elapsed()
    );

    // (3) Expiry: one instance left, with a retention of 2 s (its job then runs every
    // second); a removed file expires, S3 gives its object back, file.purged says so.
    let phase = Instant::now();
    stop(&mut a_users.server).await?;
    stop(&mut b_users.server).await?;
    let mut short = c.spawn_users(
        "storage-users.yaml",
        &[("storage-users.trash.retention", "2s")],
    )?;
    short.server.wait_ready(READY).await?;
    let before = c.s3_objects().await?;
    let old = body(7, 100_000);
    c.put("/old.bin", &old).await?;
    c.expect(204, "alice", "DELETE", &files("/old.bin"), &[], "")
        .await?;
    // The trash row goes first, the object right after it (see `Store::reclaim`): wait for
    // both, within the bound.
    eventually(
        WITHIN,
        "the removed file expires and its object is freed",
        || async {
            Ok((c.trash().await?.is_empty() && c.s3_objects().await? == before).then_some(()))
        },
    )
    .await?;
    let purged = bus
        .wait(
            "file.purged",
            &[
                ("space_id", &space),
                ("reason", "age"),
                ("items", "1"),
                ("bytes", "100000"),
            ],
        )
        .await?;
    assert_eq!(purged["actor"], "system:retention", "{purged}");
    eprintln!("expiry on S3: {:?}", phase.elapsed());

    eprintln!("the whole test: {:?}", started.elapsed());
    drop((short, a_users, b_users, bus));
    Ok(())
}

/// The 10,000 paths of the bulk tree: `/bulk/dNN/fMM` (NN, MM in 00..99), file MM holding
/// seed MM's bytes.
fn bulk_paths() -> BTreeSet<String> {
    (0..100)
        .flat_map(|d| (0..100).map(move |f| format!("/bulk/d{d:02}/f{f:02}")))
        .collect()
}

#[tokio::test]
async fn a_bulk_restore_of_10000_items_killed_part_way_loses_and_doubles_nothing()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    // Requests are not logged (10,000 of them through four processes would cost CPU).
    let (cluster, mut users) = Cluster::start(1, &[], "warn").await?;
    let c = &cluster;
    let mut users = users.pop().context("one instance")?;
    c.user("alice").await?;

    // 100 seed files, then 100 copies of their folder (a copy refers to the same blobs, so
    // S3 is written 100 times, not 10,000), then 10,000 removals one by one.
    let phase = Instant::now();
    let seeds: Vec<Vec<u8>> = (0..100u32)
        .map(|i| body(1_000 + i, 200 + 13 * i as usize))
        .collect();
    c.expect(201, "alice", "MKCOL", &files("/seed"), &[], "")
        .await?;
    let puts = futures::stream::iter(seeds.iter().enumerate())
        .map(|(i, s)| c.put_owned(format!("/seed/f{i:02}"), s))
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    puts.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    c.expect(201, "alice", "MKCOL", &files("/bulk"), &[], "")
        .await?;
    let copies = futures::stream::iter(0..100)
        .map(|d| {
            let dest = files(&format!("/bulk/d{d:02}"));
            async move {
                c.expect(
                    201,
                    "alice",
                    "COPY",
                    &files("/seed"),
                    &[("destination", &dest)],
                    "",
                )
                .await
                .map(drop)
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<_>>()
        .await;
    copies.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let made = phase.elapsed();
    let phase = Instant::now();
    let all = bulk_paths();
    let removals = futures::stream::iter(all.iter())
        .map(|p| async move {
            c.expect(
                204,
                "alice",
                "DELETE",
                &files(p),
                &[("user-agent", SYNC_CLIENT)],
                "",
            )
            .await
            .map(drop)
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    removals.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let removed = phase.elapsed();
    let seed_bytes: u64 = seeds.iter().map(|s| s.len() as u64).sum();
    assert_eq!(c.quota().await?, (seed_bytes, 100 * seed_bytes, 10_000));
    eprintln!(
        "10,000 files made in {made:?} (100 PUTs, 100 COPYs), removed one by one in {removed:?} \
         ({:.0}/s)",
        10_000.0 / removed.as_secs_f64()
    );

    // The bulk restore starts; as soon as the trash has shrunk, storage-users is killed.
    let phase = Instant::now();
    let restoring = {
        let (addr, auth) = (c.addr().to_owned(), basic("admin", EXAMPLE_PASSWORD));
        tokio::spawn(async move {
            send_as(
                &addr,
                &auth,
                "POST",
                "/api/v1/trash/restore",
                &[("content-type", "application/json")],
                r#"{"user":"alice"}"#,
            )
            .await
        })
    };
    let seen = eventually(Duration::from_secs(60), "the trash shrinking", || async {
        ensure!(
            !restoring.is_finished(),
            "the restore ended before the kill"
        );
        let (_, _, items) = c.quota().await?;
        Ok((items < 10_000).then_some(items))
    })
    .await?;
    users.server.proc.signal(libc::SIGKILL);
    users.server.proc.wait_exit(Duration::from_secs(10)).await?;
    let killed_after = phase.elapsed();
    let answer = tokio::time::timeout(WITHIN, restoring).await??;
    match &answer {
        Ok(r) => ensure!(
            r.status != 200,
            "the restore answered 200 though its storage-users was killed: {}",
            r.text()
        ),
        Err(e) => eprintln!("the restore call failed as its server died: {e:#}"),
    }
    eprintln!(
        "storage-users killed {killed_after:?} into the restore, {seen} items then still in the \
         trash; the call answered {:?}",
        answer.as_ref().map(|r| r.status)
    );

    // Restarted: every item is either back or still in the trash, never both, none lost.
    let phase = Instant::now();
    c.restart(&mut users).await?;
    let (trashed, live) = bulk_state(c).await?;
    eprintln!(
        "after the restart: {} restored, {} in the trash",
        live.len(),
        trashed.len()
    );
    ensure!(
        !trashed.is_empty() && trashed.len() <= seen as usize,
        "the kill came part way: {} of 10,000 still in the trash, {seen} seen before the kill",
        trashed.len()
    );
    let both: Vec<&String> = trashed.intersection(&live).take(5).collect();
    ensure!(both.is_empty(), "restored and still in the trash: {both:?}");
    let union: BTreeSet<String> = trashed.union(&live).cloned().collect();
    ensure!(
        union == all,
        "lost or unknown: {:?}",
        all.symmetric_difference(&union).take(5).collect::<Vec<_>>()
    );

    // The same call again finishes the rest: nothing renamed, nothing skipped.
    let t = c.restore_all().await?;
    let rest = trashed.len() as u64;
    assert_eq!(
        (
            t["total"].as_u64(),
            t["restored"].as_u64(),
            t["renamed"].as_u64(),
            t["skipped"].as_u64(),
            t["files"].as_u64()
        ),
        (Some(rest), Some(rest), Some(0), Some(0), Some(rest)),
        "{t}"
    );
    let resumed = phase.elapsed();

    // Every file once, where it was, its size and checksum its seed's; a sample byte-exact.
    let (trashed, live) = bulk_state(c).await?;
    ensure!(trashed.is_empty(), "{} left in the trash", trashed.len());
    ensure!(live == all, "{} files live", live.len());
    assert_eq!(c.quota().await?, (101 * seed_bytes, 0, 0));
    let checked = futures::stream::iter(0..100)
        .map(|d| {
            let seeds = &seeds;
            async move {
                let folder = files(&format!("/bulk/d{d:02}/"));
                let listed = c
                    .list(
                        &folder,
                        r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><d:getcontentlength/><oc:checksums/></d:prop></d:propfind>"#,
                    )
                    .await?;
                for e in &listed[1..] {
                    let f: usize = e.last().trim_start_matches('f').parse()?;
                    let seed = &seeds[f];
                    ensure!(
                        e.prop("d:getcontentlength") == seed.len().to_string(),
                        "{}: {:?}",
                        e.href,
                        e.props
                    );
                    ensure!(
                        e.prop("oc:checksums")
                            .contains(&format!("SHA1:{}", sha1_hex(seed))),
                        "{}: {:?}",
                        e.href,
                        e.props
                    );
                }
                let f = (d * 37) % 100;
                c.expect_content(&format!("/bulk/d{d:02}/f{f:02}"), &seeds[f])
                    .await
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    checked.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    eprintln!(
        "restart, state check and the resumed restore of {rest} items: {resumed:?}; the whole \
         test: {:?}",
        started.elapsed()
    );
    drop(users);
    Ok(())
}

/// The bulk tree's paths in alice's trash (by original location) and live (by listing each
/// of the 100 folders); an error if a path shows up twice on either side (a duplicate, or a
/// name such as `f07 (2)` from a restore that ran twice).
async fn bulk_state(c: &Cluster) -> anyhow::Result<(BTreeSet<String>, BTreeSet<String>)> {
    let mut trashed = BTreeSet::new();
    for e in c.trash().await? {
        let path = format!("/{}", e.prop("oc:trashbin-original-location"));
        ensure!(trashed.insert(path.clone()), "{path} twice in the trash");
    }
    let listings = futures::stream::iter(0..100)
        .map(|d| async move {
            let folder = files(&format!("/bulk/d{d:02}/"));
            let listed = c.list(&folder, "").await?;
            Ok::<_, anyhow::Error>(
                listed[1..]
                    .iter()
                    .map(|e| format!("/bulk/d{d:02}/{}", e.last()))
                    .collect::<Vec<_>>(),
            )
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let mut live = BTreeSet::new();
    for listing in listings {
        for path in listing? {
            ensure!(live.insert(path.clone()), "{path} twice");
        }
    }
    Ok((trashed, live))
}

impl Cluster {
    /// [`Cluster::put`] of an owned path, for streams of uploads.
    async fn put_owned(&self, path: String, content: &[u8]) -> anyhow::Result<()> {
        self.put(&path, content).await
    }
}
