//! The event bus over NATS JetStream, against a real `nats-server` (`.venv/bin/nats-server`,
//! installed by `make deps`): consumer groups (each event handled once per service however many
//! replicas pull, every service its own copy), redelivery of what a handler refused or did not
//! acknowledge in time, a publish bounded in time while NATS is away (and stored once when it
//! comes back within the bound), and end to end: real `arca` processes split as in
//! config/grouped-nats, a share created over OCS is a `share.created` event in the stream,
//! read here straight from JetStream, and the audit log of the two frontend groups writes it
//! once. Counts and times are printed (`cargo test -- --nocapture`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use arca_runtime::events::{
    Event, EventBus, EventError, Hint, NatsBus, NatsBusSettings, Received, Subscription,
};
use arca_tests::{Launch, Nats, Server, TempDir, basic, eventually, free_addr, free_port, send};
use async_nats::jetstream;
use futures::StreamExt as _;
use serde_json::Value;

/// The tests share two cores: one at a time keeps the timing assertions meaningful.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const WITHIN: Duration = Duration::from_secs(20);

fn settings(url: &str, stream: &str) -> NatsBusSettings {
    NatsBusSettings {
        url: url.to_owned(),
        stream: stream.to_owned(),
        ack_wait: Duration::from_secs(30),
        max_deliver: 10,
        publish_timeout: Duration::from_secs(2),
    }
}

/// A replica of a consuming service: its own connection, its group's subscription, a task
/// that records each event it is given (id → attempts seen) and settles it with `decide`.
struct Replica {
    seen: Arc<Mutex<Vec<(String, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

/// What a handler does with a delivery: its event and attempt number.
#[derive(Clone, Copy)]
enum Outcome {
    Ack,
    Nak,
    /// Neither: the delivery is dropped unsettled, as by a handler that crashed.
    Drop,
}

impl Replica {
    async fn start(
        bus: Arc<NatsBus>,
        group: &str,
        decide: impl Fn(&Event, u64) -> Outcome + Send + 'static,
    ) -> Self {
        let mut sub: Subscription = bus.subscribe(group);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            // The bus lives as long as its replica.
            let _bus = bus;
            loop {
                let delivery = match sub.next().await {
                    Received::Event(d) => d,
                    Received::Lagged(_) => continue,
                    Received::Closed => return,
                };
                let (event, attempt) = (delivery.event().clone(), delivery.attempt());
                record
                    .lock()
                    .expect("not poisoned")
                    .push((event.id.clone(), attempt));
                let settled = match decide(&event, attempt) {
                    Outcome::Ack => delivery.ack().await,
                    Outcome::Nak => delivery.nak(None).await,
                    Outcome::Drop => Ok(()),
                };
                assert!(settled.is_ok(), "settling {}: {settled:?}", event.id);
            }
        });
        Self { seen, task }
    }

    fn seen(&self) -> Vec<(String, u64)> {
        self.seen.lock().expect("not poisoned").clone()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn js(url: &str) -> anyhow::Result<jetstream::Context> {
    Ok(jetstream::new(async_nats::connect(url).await?))
}

/// Waits until `group`'s consumer has nothing left to deliver nor waiting for an ack: from
/// then on no delivery can come (nothing is pending and nothing can be redelivered). Returns
/// the stream sequence of the last event the consumer delivered.
async fn drained(js: &jetstream::Context, stream: &str, group: &str) -> anyhow::Result<u64> {
    eventually(WITHIN, &format!("consumer {group} drained"), || async {
        let mut consumer: jetstream::consumer::PullConsumer =
            js.get_consumer_from_stream(group, stream).await?;
        let info = consumer.info().await?;
        Ok((info.num_pending == 0 && info.num_ack_pending == 0)
            .then_some(info.delivered.stream_sequence))
    })
    .await
}

/// Two replicas of service A and one of service B: every event is handled once across A's
/// replicas (both take part), and B handles all of them.
#[tokio::test]
async fn each_service_handles_each_event_once_however_many_replicas_it_runs() -> anyhow::Result<()>
{
    let _serial = SERIAL.lock().await;
    const N: usize = 300;
    let dir = TempDir::new();
    let nats = Nats::start(&dir).await?;
    let stream = "ev-groups";
    let connect = || NatsBus::connect(settings(&nats.url(), stream));
    let ack = |_: &Event, _: u64| Outcome::Ack;
    let a1 = Replica::start(connect().await?, "svc-a", ack).await;
    let a2 = Replica::start(connect().await?, "svc-a", ack).await;
    let b = Replica::start(connect().await?, "svc-b", ack).await;
    let publisher = connect().await?;
    let started = Instant::now();
    let mut published = HashSet::new();
    for i in 0..N {
        let event = Event::new("test.happened", "tester").with("n", i.to_string());
        published.insert(event.id.clone());
        publisher.publish(event).await?;
    }
    let publish_time = started.elapsed();
    let js = js(&nats.url()).await?;
    let delivered_a = drained(&js, stream, "svc-a").await?;
    let delivered_b = drained(&js, stream, "svc-b").await?;
    let handled = started.elapsed();
    let (s1, s2, sb) = (a1.seen(), a2.seen(), b.seen());
    println!(
        "{N} events published in {publish_time:?} ({:.0}/s, each acked by the stream); \
         all handled by both services after {handled:?}; svc-a: replica 1 {} + replica 2 {}, \
         svc-b: {}; consumers drained (nothing pending, nothing unacked) at stream sequence \
         a={delivered_a} b={delivered_b}",
        N as f64 / publish_time.as_secs_f64(),
        s1.len(),
        s2.len(),
        sb.len()
    );
    let ids_a: Vec<&String> = s1.iter().chain(&s2).map(|(id, _)| id).collect();
    let unique_a: HashSet<String> = ids_a.iter().map(|id| (*id).clone()).collect();
    assert_eq!(
        ids_a.len(),
        N,
        "svc-a handled some event twice or missed one"
    );
    assert_eq!(unique_a, published);
    assert!(
        !s1.is_empty() && !s2.is_empty(),
        "both replicas take part: {} / {}",
        s1.len(),
        s2.len()
    );
    let unique_b: HashSet<String> = sb.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(sb.len(), N);
    assert_eq!(unique_b, published);
    assert_eq!((delivered_a, delivered_b), (N as u64, N as u64));
    assert!(
        s1.iter()
            .chain(&s2)
            .chain(&sb)
            .all(|(_, attempt)| *attempt == 1),
        "first deliveries only"
    );
    Ok(())
}

/// Hints reach every listener of their topic on every process, and none is stored: the
/// stream holds no message after them and a listener that came later hears nothing old.
#[tokio::test]
async fn hints_reach_every_listener_and_are_stored_nowhere() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let nats = Nats::start(&dir).await?;
    let stream = "ev-hints";
    let a = NatsBus::connect(settings(&nats.url(), stream)).await?;
    let b = NatsBus::connect(settings(&nats.url(), stream)).await?;
    // Both buses' stream exists, so that "nothing stored" below is a stream with 0 messages.
    a.publish(Event::new("test.first", "tester")).await?;
    let (mut on_a, mut on_b) = (a.hints("space-changed"), b.hints("space-changed"));
    // A subscription is live once the server has seen it: send until both hear one.
    let mut heard = (false, false);
    let deadline = Instant::now() + WITHIN;
    while heard != (true, true) {
        anyhow::ensure!(Instant::now() < deadline, "hints never heard: {heard:?}");
        a.hint("space-changed", "warmup").await;
        let wait = Duration::from_millis(100);
        if let Ok(h) = tokio::time::timeout(wait, on_a.next()).await {
            heard.0 |= h == Hint::Key("warmup".into());
        }
        if let Ok(h) = tokio::time::timeout(wait, on_b.next()).await {
            heard.1 |= h == Hint::Key("warmup".into());
        }
    }
    // Drain the warm-up copies, then one hint from each side reaches both.
    while tokio::time::timeout(Duration::from_millis(200), on_a.next())
        .await
        .is_ok()
    {}
    while tokio::time::timeout(Duration::from_millis(200), on_b.next())
        .await
        .is_ok()
    {}
    a.hint("space-changed", "s1").await;
    b.hint("space-changed", "s2").await;
    for feed in [&mut on_a, &mut on_b] {
        let mut got = Vec::new();
        for _ in 0..2 {
            got.push(tokio::time::timeout(WITHIN, feed.next()).await?);
        }
        got.sort_by_key(|h| format!("{h:?}"));
        assert_eq!(got, [Hint::Key("s1".into()), Hint::Key("s2".into())]);
    }
    let mut late = b.hints("space-changed");
    let old = tokio::time::timeout(Duration::from_millis(500), late.next()).await;
    assert!(old.is_err(), "a late listener heard an old hint: {old:?}");
    let js = js(&nats.url()).await?;
    let mut info = js.get_stream(stream).await?;
    let messages = info.info().await?.state.messages;
    assert_eq!(messages, 1, "hints were stored in the event stream");
    Ok(())
}

/// A handler that refuses an event (nak) gets it again at once; one that neither acks nor naks
/// gets it again after the ack wait; both with the same event and a growing attempt number.
#[tokio::test]
async fn a_failed_handler_gets_the_event_again() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let nats = Nats::start(&dir).await?;
    let stream = "ev-redelivery";
    let ack_wait = Duration::from_secs(2);
    let connect = || {
        NatsBus::connect(NatsBusSettings {
            ack_wait,
            ..settings(&nats.url(), stream)
        })
    };
    // First attempt: refused ("nak") or dropped ("drop") by the event's own choice.
    let decide = |e: &Event, attempt: u64| match (e.attrs.get("fail").map(String::as_str), attempt)
    {
        (Some("nak"), 1) => Outcome::Nak,
        (Some("drop"), 1) => Outcome::Drop,
        _ => Outcome::Ack,
    };
    let handler = Replica::start(connect().await?, "flaky", decide).await;
    let publisher = connect().await?;
    let nak = Event::new("test.nak", "tester").with("fail", "nak");
    let dropped = Event::new("test.drop", "tester").with("fail", "drop");
    let fine = Event::new("test.fine", "tester");
    let published = Instant::now();
    for e in [&nak, &dropped, &fine] {
        publisher.publish(e.clone()).await?;
    }
    let attempts = |id: &str| -> Vec<u64> {
        handler
            .seen()
            .iter()
            .filter(|(i, _)| i == id)
            .map(|(_, a)| *a)
            .collect()
    };
    let nak_again = eventually(WITHIN, "the nak'ed event again", || async {
        Ok((attempts(&nak.id) == [1, 2]).then(|| published.elapsed()))
    })
    .await?;
    let drop_again = eventually(WITHIN, "the dropped event again", || async {
        Ok((attempts(&dropped.id) == [1, 2]).then(|| published.elapsed()))
    })
    .await?;
    let js = js(&nats.url()).await?;
    drained(&js, stream, "flaky").await?;
    println!(
        "nak'ed event redelivered after {nak_again:?}; unacknowledged event redelivered after \
         {drop_again:?} (ack_wait {ack_wait:?})"
    );
    assert!(nak_again < ack_wait, "a nak does not wait for the ack wait");
    assert!(drop_again >= ack_wait, "redelivered before its ack wait");
    // Drained: each settled for good, the one that succeeded at once never came again.
    assert_eq!(attempts(&fine.id), [1]);
    assert_eq!(attempts(&nak.id), [1, 2]);
    assert_eq!(attempts(&dropped.id), [1, 2]);
    Ok(())
}

/// With NATS away, a publish gives up after `publish_timeout` with a typed error (never
/// hangs); when NATS returns within the bound, the retried publish is stored exactly once.
#[tokio::test]
async fn a_publish_while_nats_is_away_is_bounded_and_stored_once_when_it_returns()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let port = free_port();
    let store = dir.join("nats");
    let stream = "ev-outage";
    let url = format!("nats://127.0.0.1:{port}");
    let bound = Duration::from_secs(2);
    // Nothing listens: the client connects in the background and the publish times out.
    let bus = NatsBus::connect(NatsBusSettings {
        publish_timeout: bound,
        ..settings(&url, stream)
    })
    .await?;
    let started = Instant::now();
    let failed = bus.publish(Event::new("test.lost", "tester")).await;
    let took = started.elapsed();
    println!("publish with no server: {failed:?} after {took:?} (bound {bound:?})");
    match failed {
        Err(EventError::NotStored { attempts, .. }) => assert!(attempts >= 2, "{attempts}"),
        other => anyhow::bail!("expected NotStored, got {other:?}"),
    }
    assert!(
        took >= bound && took < bound + Duration::from_millis(500),
        "{took:?}"
    );

    // The server starts while a publish (bounded at 10 s) is retrying: it is stored, once.
    let bus = NatsBus::connect(NatsBusSettings {
        publish_timeout: Duration::from_secs(10),
        ..settings(&url, stream)
    })
    .await?;
    let event = Event::new("test.late", "tester");
    let publishing = tokio::spawn({
        let event = event.clone();
        async move {
            let started = Instant::now();
            (bus.publish(event).await, started.elapsed())
        }
    });
    // Let it fail at least one attempt first (an attempt lasts publish_timeout / 3).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let nats = Nats::start_on(port, store).await?;
    let (stored, took) = publishing.await?;
    println!("publish across the server's start: {stored:?} after {took:?}");
    stored?;
    assert!(took < Duration::from_secs(10));
    let js = js(&nats.url()).await?;
    let mut info = js.get_stream(stream).await?;
    let state = info.info().await?.state.clone();
    assert_eq!(state.messages, 1, "stored once: {state:?}");
    let got = info
        .get_last_raw_message_by_subject(&format!("{stream}.test.late"))
        .await?;
    let stored: Event = serde_json::from_slice(&got.payload)?;
    assert_eq!(stored, event);
    Ok(())
}

const SECRET: &str = "events-secret-0123456789abcdef01";
const PASSWORD: &str = "events-pass";
const READY: Duration = Duration::from_secs(30);

/// An `arca server` of a grouped NATS deployment: the NATS registry, and events on NATS with
/// the URL taken from the registry's (events.nats.url unset).
fn launch(dir: &TempDir, nats: &str, services: &str) -> Launch {
    Launch::arca(dir)
        .services(services)
        .set("identity.secret", SECRET)
        .set("registry.kind", "nats")
        .set("registry.nats.url", nats)
        .set("registry.nats.bucket", "arca-events-test")
        .set("registry.nats.ttl", "3s")
        .set("events.kind", "nats")
        .env("ARCA_ADMIN_PASSWORD", PASSWORD)
}

/// One request through the proxy as `user` (password `USER-pw`, the admin's PASSWORD).
async fn req(
    proxy: &Server,
    user: &str,
    method: &str,
    path: &str,
    form: &str,
) -> anyhow::Result<arca_tests::HttpResponse> {
    let password = if user == "admin" {
        PASSWORD.to_owned()
    } else {
        format!("{user}-pw")
    };
    let auth = basic(user, &password);
    let mut headers = vec![("authorization", auth.as_str())];
    if !form.is_empty() && !form.starts_with('{') {
        headers.push(("content-type", "application/x-www-form-urlencoded"));
    } else if form.starts_with('{') {
        headers.push(("content-type", "application/json"));
    }
    send(&proxy.public, method, path, &headers, form.to_owned()).await
}

async fn user(proxy: &Server, name: &str) -> anyhow::Result<String> {
    let body = format!(
        r#"{{"onPremisesSamAccountName":"{name}","displayName":"{name}","mail":"{name}@example.org","passwordProfile":{{"password":"{name}-pw"}}}}"#
    );
    let r = req(proxy, "admin", "POST", "/graph/v1.0/users", &body).await?;
    anyhow::ensure!(r.status == 201, "create {name}: {} {}", r.status, r.text());
    Ok(r.json()?["id"].as_str().context("user id")?.to_owned())
}

/// The `event` log lines of a process for events of `kind`: id → count.
fn logged(server: &Server, kind: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for e in server.proc.events_with("event") {
        if e["fields"]["kind"] == kind
            && let Some(id) = e["fields"]["id"].as_str()
        {
            *out.entry(id.to_owned()).or_default() += 1;
        }
    }
    out
}

/// Real processes split as in config/grouped-nats (proxy; two frontend groups with sharing;
/// storage-system; storage-users), all with `events.kind: nats`. Shares created over OCS are
/// `share.created` events in the stream, read here by a JetStream consumer of the test's own,
/// with ids, actor and time; the audit log (group "sharing") writes each event once across
/// the two frontend groups.
#[tokio::test]
async fn a_share_created_over_ocs_is_an_event_in_the_stream() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    const SHARES: usize = 4;
    let dirs: Vec<TempDir> = (0..5).map(|_| TempDir::new()).collect();
    let nats = Nats::start(&dirs[0]).await?;
    let url = nats.url();
    let tcp = || format!("tcp://{}", free_addr());
    let mut system = launch(&dirs[0], &url, "storage-system")
        .set("storage-system.endpoint", tcp())
        .spawn()?;
    let mut users = launch(&dirs[1], &url, "storage-users")
        .set("storage-users.endpoint", tcp())
        .spawn()?;
    let mut fronts = Vec::new();
    for dir in &dirs[2..4] {
        fronts.push(
            launch(dir, &url, "frontend,gateway,sharing")
                .set("frontend.endpoint", tcp())
                .set("sharing.endpoint", tcp())
                .spawn()?,
        );
    }
    let mut proxy = launch(&dirs[4], &url, "proxy").spawn()?;
    system.wait_ready(READY).await?;
    users.wait_ready(READY).await?;
    for f in &mut fronts {
        f.wait_ready(READY).await?;
    }
    proxy.wait_ready(READY).await?;
    // Both frontend groups announced (registrations appear as processes get ready).
    eventually(WITHIN, "the proxy answers", || async {
        Ok((proxy.get("/status.php").await?.status == 200).then_some(()))
    })
    .await?;

    let alice = user(&proxy, "alice").await?;
    let bob = user(&proxy, "bob").await?;
    let mut shares = Vec::new();
    let mut slowest = Duration::ZERO;
    for i in 0..SHARES {
        let folder = format!("/remote.php/dav/files/alice/Docs{i}");
        let made = req(&proxy, "alice", "MKCOL", &folder, "").await?;
        anyhow::ensure!(made.status == 201, "MKCOL: {}", made.status);
        let started = Instant::now();
        let r = req(
            &proxy,
            "alice",
            "POST",
            "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json",
            &format!("path=%2FDocs{i}&shareType=0&shareWith=bob&permissions=1"),
        )
        .await?;
        slowest = slowest.max(started.elapsed());
        let v = r.json()?;
        anyhow::ensure!(r.status == 200, "share: {} {v}", r.status);
        shares.push(
            v["ocs"]["data"]["id"]
                .as_str()
                .context("share id")?
                .to_owned(),
        );
    }

    // A reader of the stream of the test's own: its own durable consumer on the subject.
    let js = js(&url).await?;
    let stream = js.get_stream("arca-events").await?;
    let reader: jetstream::consumer::PullConsumer = stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("test-reader".to_owned()),
            filter_subject: "arca-events.share.created".to_owned(),
            ..Default::default()
        })
        .await?;
    let mut messages = reader.messages().await?;
    let mut events = Vec::new();
    while events.len() < SHARES {
        let msg = tokio::time::timeout(WITHIN, messages.next())
            .await
            .context("share.created events in the stream")?
            .context("stream ended")?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let id_header = msg
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Msg-Id"))
            .map(|v| v.as_str().to_owned());
        let event: Value = serde_json::from_slice(&msg.payload)?;
        msg.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        assert_eq!(id_header.as_deref(), event["id"].as_str(), "{event}");
        events.push(event);
    }
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    for (event, share) in events.iter().zip(&shares) {
        assert_eq!(event["kind"], "share.created", "{event}");
        assert_eq!(event["actor"], alice.as_str(), "{event}");
        assert_eq!(event["attrs"]["share_id"], share.as_str(), "{event}");
        assert_eq!(event["attrs"]["grantee_id"], bob.as_str(), "{event}");
        assert!(
            event["attrs"]["node_id"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{event}"
        );
        assert!(
            event["id"].as_str().is_some_and(|i| i.len() == 32),
            "{event}"
        );
        let at = event["at_ms"].as_i64().context("at_ms")?;
        assert!(at <= now_ms && at > now_ms - 60_000, "{event}");
    }

    // The audit log: group "sharing" over both frontend groups, each event logged once.
    // Drained: every event acked, none pending, so no further line can come.
    drained(&js, "arca-events", "sharing").await?;
    let ids: HashSet<&str> = events.iter().filter_map(|e| e["id"].as_str()).collect();
    // Acked after logging, but the test reads the processes' output asynchronously.
    let (one, two) = eventually(WITHIN, "every event in an audit log", || async {
        let (one, two) = (
            logged(&fronts[0], "share.created"),
            logged(&fronts[1], "share.created"),
        );
        let all = ids
            .iter()
            .all(|id| one.contains_key(*id) || two.contains_key(*id));
        Ok(all.then_some((one, two)))
    })
    .await?;
    println!(
        "{SHARES} shares created through 5 processes (slowest OCS create {slowest:?}); all in \
         the stream; audit log lines: frontend group 1 {}, group 2 {}",
        one.len(),
        two.len()
    );
    for id in &ids {
        let count = one.get(*id).unwrap_or(&0) + two.get(*id).unwrap_or(&0);
        assert_eq!(count, 1, "event {id} logged {count} times");
    }

    // NATS gone: creating a share still succeeds without waiting on the bus (sharing hands
    // its events to an outbox), and the event reaches the stream once NATS is back.
    let mut nats = nats;
    nats.stop().await?;
    let made = req(
        &proxy,
        "alice",
        "MKCOL",
        "/remote.php/dav/files/alice/Late",
        "",
    )
    .await?;
    anyhow::ensure!(made.status == 201, "MKCOL: {}", made.status);
    let started = Instant::now();
    let r = req(
        &proxy,
        "alice",
        "POST",
        "/ocs/v2.php/apps/files_sharing/api/v1/shares?format=json",
        "path=%2FLate&shareType=0&shareWith=bob&permissions=1",
    )
    .await?;
    let took = started.elapsed();
    println!("share created with NATS down: {} after {took:?}", r.status);
    assert_eq!(r.status, 200, "{}", r.text());
    let late = r.json()?["ocs"]["data"]["id"]
        .as_str()
        .context("share id")?
        .to_owned();
    let retrying = |f: &Server| {
        !f.proc
            .events_with("event bus not storing events; retrying")
            .is_empty()
    };
    eventually(WITHIN, "the outbox retrying while NATS is away", || async {
        Ok((retrying(&fronts[0]) || retrying(&fronts[1])).then_some(()))
    })
    .await?;
    let back = Nats::start_on(nats.port, nats.store.clone()).await?;
    let js_back = self::js(&back.url()).await?;
    let started = Instant::now();
    eventually(WITHIN, "the queued share.created stored", || async {
        let Ok(stream) = js_back.get_stream("arca-events").await else {
            return Ok(None);
        };
        let Ok(last) = stream
            .get_last_raw_message_by_subject("arca-events.share.created")
            .await
        else {
            return Ok(None);
        };
        let event: Value = serde_json::from_slice(&last.payload)?;
        Ok((event["attrs"]["share_id"] == late.as_str()).then_some(()))
    })
    .await?;
    println!(
        "queued event stored {:?} after NATS returned",
        started.elapsed()
    );
    Ok(())
}

/// The example set config/grouped-nats puts every process on the NATS bus, on the registry's
/// servers and one stream.
#[test]
fn the_grouped_nats_examples_use_the_nats_bus() -> anyhow::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/grouped-nats");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let config = arca_config::load(Some(&path), [], arca_config::Overrides::default())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        assert_eq!(
            config.events.kind,
            arca_config::EventsKind::Nats,
            "{path:?}"
        );
        assert_eq!(
            config.events.nats.url.as_deref(),
            Some(config.registry.nats.url.as_str()),
            "{path:?}"
        );
        assert_eq!(config.events.nats.stream, "arca-events", "{path:?}");
        files += 1;
    }
    assert!(files >= 4, "{files} files");
    Ok(())
}

/// Events handed to an outbox while NATS is away (as a request hands them: `send` does not
/// wait, it cannot) are all stored, in order, once NATS comes back.
#[tokio::test]
async fn an_outbox_holds_events_through_a_nats_outage_and_stores_them_in_order()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new();
    let port = free_port();
    let stream = "ev-outbox";
    let url = format!("nats://127.0.0.1:{port}");
    let bus = NatsBus::connect(settings(&url, stream)).await?;
    let (outbox, worker) = arca_runtime::events::Outbox::new(bus, 100);
    let stop = tokio_util::sync::CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    tokio::spawn(arca_runtime::worker::run(worker, None, stop));
    let sent: Vec<Event> = (0..20)
        .map(|i| Event::new("test.queued", "tester").with("n", i.to_string()))
        .collect();
    for event in &sent {
        outbox.send(event.clone());
    }
    // Some publish attempts fail before the server exists.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let nats = Nats::start_on(port, dir.join("nats")).await?;
    let js = js(&nats.url()).await?;
    let stored = eventually(WITHIN, "20 queued events stored", || async {
        let Ok(mut info) = js.get_stream(stream).await else {
            return Ok(None);
        };
        let count = info.info().await?.state.messages;
        Ok((count == 20).then_some(count))
    })
    .await?;
    println!("stored after the outage: {stored}");
    let mut ids = Vec::new();
    let info = js.get_stream(stream).await?;
    for seq in 1..=20u64 {
        let raw = info.get_raw_message(seq).await?;
        let event: Event = serde_json::from_slice(&raw.payload)?;
        ids.push(event.id);
    }
    let want: Vec<String> = sent.into_iter().map(|e| e.id).collect();
    assert_eq!(ids, want, "stored once each, in the order sent");
    Ok(())
}
