//! The NATS registry: every (service, endpoint) a process serves is one key of a JetStream KV
//! bucket, kept alive by heartbeats and gone by TTL when its process dies; every process
//! follows the bucket with one watcher and answers [`Registry::watch`] from memory.
//!
//! Keys are `svc.<service>.<base64url(endpoint)>` (the endpoint is in the key because KV keys
//! cannot hold `:`; the value repeats it for people reading the bucket). Each put carries a
//! per-message TTL (`Nats-TTL`, NATS ≥ 2.11) of `ttl`, re-put every `ttl/3`; the bucket has
//! `limit_markers`, so an expiry shows up in the watch as a purge marker.
//!
//! Load: one watcher and, per registered endpoint, one put per `ttl/3`, whatever the request
//! rate; a request reads the last set from a `watch` channel. Every operation is counted in
//! `arca_registry_operations_total{kind="nats",op}`.
//!
//! Outages: while NATS is unreachable the last known sets stay (the data plane keeps serving),
//! heartbeats fail and are retried. After every (re)connection the watcher re-reads the bucket
//! from scratch (a deletion missed during the outage is not kept forever) and the heartbeats
//! re-put at once. Entries that vanished by expiry — as happens to every entry when the server
//! was down longer than the TTL — are kept for a grace of one heartbeat period plus a second,
//! so their processes can re-put them before any client loses them; an explicit deletion
//! (deregistration) takes effect at once.
//!
//! [`NatsKv`] is the connection and bucket, shared with the leader leases of `arca-runtime`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::push, kv};
use async_nats::{HeaderMap, HeaderValue};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{EndpointSet, Registry, RegistryError};
use crate::Endpoint;

/// Every NATS request the registry makes is bounded by this, so a heartbeat, a registration or
/// a shutdown never hangs on an unreachable server.
const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the bucket keeps the purge marker of an expired entry. Fixed, not derived from a
/// process's TTL: every process creates the bucket with the same settings, or creation fails.
const MARKER_TTL: Duration = Duration::from_secs(60);
const REGISTRY_PREFIX: &str = "svc.";

/// Where to find the bucket and how long entries live.
#[derive(Clone, Debug)]
pub struct NatsSettings {
    /// `nats://HOST:PORT`, comma-separated for a cluster.
    pub url: String,
    pub bucket: String,
    /// Lifetime of an entry without a heartbeat; whole seconds, at least 3 s.
    pub ttl: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    #[error("nats {0}: {1}")]
    Connect(String, String),
    #[error("nats bucket {0}: {1}")]
    Bucket(String, String),
    #[error("nats {op} {key}: {error}")]
    Op {
        op: &'static str,
        key: String,
        error: String,
    },
    #[error("nats {op} {key}: no answer within {OP_TIMEOUT:?}")]
    Timeout { op: &'static str, key: String },
}

impl From<NatsError> for RegistryError {
    fn from(e: NatsError) -> Self {
        RegistryError::Unavailable(e.to_string())
    }
}

/// What a revision-checked write found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Written; the new revision.
    Ok(u64),
    /// Someone else's value is there (create), or the revision moved on (update).
    Conflict,
}

/// One NATS connection and one KV bucket: puts with a per-message TTL, revision-checked
/// creates and updates, deletes. Cheap to clone.
#[derive(Clone)]
pub struct NatsKv {
    inner: Arc<KvInner>,
}

struct KvInner {
    client: async_nats::Client,
    js: jetstream::Context,
    bucket: String,
    ttl: Duration,
    /// The bucket handle, looked up (or created) on first use and forgotten when the bucket
    /// turns out to be gone, so a server that lost its state gets it back.
    store: tokio::sync::Mutex<Option<kv::Store>>,
    /// Bumped on every (re)connection: watchers re-read, heartbeats re-put.
    connections: watch::Receiver<u64>,
}

/// One client connection to a NATS server or cluster, shared by everything a process does
/// with NATS (registry, leases, event bus): one socket, one reconnect loop, one set of logs.
/// Cheap to clone.
#[derive(Clone)]
pub struct NatsConnection {
    client: async_nats::Client,
    /// Bumped on every (re)connection: watchers re-read, heartbeats re-put.
    connections: watch::Receiver<u64>,
}

impl NatsConnection {
    /// Connects in the background: this returns at once even while the server is down, and
    /// the client keeps reconnecting (within a second after the server is back) for as long as
    /// the process lives. Fails only on a URL the client cannot use. `url` is
    /// `nats://HOST:PORT`, comma-separated for a cluster.
    pub async fn connect(url: &str) -> Result<Self, NatsError> {
        let (tx, rx) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let options = async_nats::ConnectOptions::new()
            .name("arca")
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connection_timeout(OP_TIMEOUT)
            // Short and capped at 1 s: the data plane does not wait on NATS, so reconnecting
            // fast only shortens the time registrations are stale and publishes are queued.
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((100 * attempts as u64).min(1000))
            })
            .event_callback(move |event| {
                let tx = tx.clone();
                async move {
                    match event {
                        async_nats::Event::Connected => {
                            tracing::info!("nats connected");
                            tx.send_modify(|n| *n += 1);
                        }
                        async_nats::Event::Disconnected => tracing::warn!(
                            "nats disconnected; registry entries kept as last known, publishes wait and retry"
                        ),
                        other => tracing::debug!(event = %other, "nats event"),
                    }
                }
            });
        let servers: Vec<&str> = url.split(',').map(str::trim).collect();
        let client = options
            .connect(servers)
            .await
            .map_err(|e| NatsError::Connect(redact(url), e.to_string()))?;
        Ok(Self {
            client,
            connections: rx,
        })
    }

    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }
}

impl NatsKv {
    /// Its own connection to `settings.url` (see [`NatsConnection::connect`]).
    pub async fn connect(settings: &NatsSettings) -> Result<Self, NatsError> {
        let connection = NatsConnection::connect(&settings.url).await?;
        Ok(Self::on(&connection, settings))
    }

    /// The bucket `settings.bucket` over an existing connection (`settings.url` unused).
    pub fn on(connection: &NatsConnection, settings: &NatsSettings) -> Self {
        Self {
            inner: Arc::new(KvInner {
                client: connection.client.clone(),
                js: jetstream::new(connection.client.clone()),
                bucket: settings.bucket.clone(),
                ttl: settings.ttl,
                store: tokio::sync::Mutex::new(None),
                connections: connection.connections.clone(),
            }),
        }
    }

    /// The TTL entries are written with.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// Changes with every (re)connection to the server.
    pub fn connections(&self) -> watch::Receiver<u64> {
        self.inner.connections.clone()
    }

    /// Puts `value` at `key`, alive for the TTL.
    pub async fn put(&self, key: &str, value: Bytes) -> Result<u64, NatsError> {
        match self.publish("put", key, value, None, None).await? {
            Written::Ok(rev) => Ok(rev),
            Written::Conflict => Err(NatsError::Op {
                op: "put",
                key: key.to_owned(),
                error: "unexpected revision conflict".to_owned(),
            }),
        }
    }

    /// Writes `key` only if it has no live value (absent, deleted or expired).
    pub async fn create(&self, key: &str, value: Bytes) -> Result<Written, NatsError> {
        match self
            .publish("create", key, value.clone(), Some(0), None)
            .await?
        {
            Written::Ok(rev) => Ok(Written::Ok(rev)),
            Written::Conflict => match self.entry(key).await? {
                // A deletion or expiry marker is the last message: take over its revision.
                Some((rev, false)) => self.publish("create", key, value, Some(rev), None).await,
                Some((_, true)) => Ok(Written::Conflict),
                // Gone between the two calls (its marker expired): try once more from scratch.
                None => self.publish("create", key, value, Some(0), None).await,
            },
        }
    }

    /// Writes `key` only if its last revision is still `revision`.
    pub async fn update(
        &self,
        key: &str,
        value: Bytes,
        revision: u64,
    ) -> Result<Written, NatsError> {
        self.publish("update", key, value, Some(revision), None)
            .await
    }

    /// Deletes `key` (if its last revision is still `revision`, when given). The deletion
    /// marker itself expires after the TTL, so keys of departed endpoints do not pile up.
    pub async fn delete(&self, key: &str, revision: Option<u64>) -> Result<Written, NatsError> {
        self.publish("delete", key, Bytes::new(), revision, Some("DEL"))
            .await
    }

    /// The last revision of `key` and whether it is a live value (not a deletion or expiry).
    pub async fn entry(&self, key: &str) -> Result<Option<(u64, bool)>, NatsError> {
        let store = self.store().await?;
        count("get");
        let entry = tokio::time::timeout(OP_TIMEOUT, store.entry(key))
            .await
            .map_err(|_| NatsError::Timeout {
                op: "get",
                key: key.to_owned(),
            })?
            .map_err(|e| NatsError::Op {
                op: "get",
                key: key.to_owned(),
                error: e.to_string(),
            })?;
        Ok(entry.map(|e| (e.revision, e.operation == kv::Operation::Put)))
    }

    async fn publish(
        &self,
        op: &'static str,
        key: &str,
        value: Bytes,
        expect: Option<u64>,
        kv_operation: Option<&'static str>,
    ) -> Result<Written, NatsError> {
        // Ensures the bucket exists before the first write.
        self.store().await?;
        count(op);
        let subject = format!("$KV.{}.{key}", self.inner.bucket);
        let mut headers = HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_TTL,
            HeaderValue::from(self.inner.ttl.as_secs().max(1).to_string()),
        );
        if let Some(rev) = expect {
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                HeaderValue::from(rev.to_string()),
            );
        }
        if let Some(kv_op) = kv_operation {
            headers.insert("KV-Operation", HeaderValue::from(kv_op));
        }
        let err = |error: String| NatsError::Op {
            op,
            key: key.to_owned(),
            error,
        };
        let send = async {
            let ack = self
                .inner
                .js
                .publish_with_headers(subject, headers, value)
                .await?;
            ack.await
        };
        // Ambiguous on timeout: the write may still be applied later. Every caller copes: a
        // heartbeat is re-put anyway, a lease is re-checked by revision.
        match tokio::time::timeout(OP_TIMEOUT, send).await {
            Err(_) => Err(NatsError::Timeout {
                op,
                key: key.to_owned(),
            }),
            Ok(Ok(ack)) => Ok(Written::Ok(ack.sequence)),
            Ok(Err(e)) => match e.kind() {
                jetstream::context::PublishErrorKind::WrongLastSequence => Ok(Written::Conflict),
                jetstream::context::PublishErrorKind::StreamNotFound => {
                    // The server lost the bucket: look it up (and create it) again next time.
                    *self.inner.store.lock().await = None;
                    Err(err(e.to_string()))
                }
                _ => Err(err(e.to_string())),
            },
        }
    }

    /// The bucket, created when missing with per-message TTLs and expiry markers enabled.
    async fn store(&self) -> Result<kv::Store, NatsError> {
        let mut slot = self.inner.store.lock().await;
        if let Some(store) = slot.as_ref() {
            return Ok(store.clone());
        }
        let bucket = &self.inner.bucket;
        let fail = |e: String| NatsError::Bucket(bucket.clone(), e);
        count("bucket");
        let found = tokio::time::timeout(OP_TIMEOUT, self.inner.js.get_key_value(bucket.as_str()))
            .await
            .map_err(|_| fail(format!("no answer within {OP_TIMEOUT:?}")))?;
        let store = match found {
            Ok(store) => store,
            Err(_) => {
                let config = kv::Config {
                    bucket: bucket.clone(),
                    description: "arca: service registrations and leader leases".to_owned(),
                    history: 1,
                    storage: jetstream::stream::StorageType::File,
                    limit_markers: Some(MARKER_TTL),
                    ..Default::default()
                };
                let created =
                    tokio::time::timeout(OP_TIMEOUT, self.inner.js.create_key_value(config))
                        .await
                        .map_err(|_| fail(format!("no answer within {OP_TIMEOUT:?}")))?;
                match created {
                    Ok(store) => store,
                    // Another process may have created it meanwhile with other settings.
                    Err(create) => self
                        .inner
                        .js
                        .get_key_value(bucket.as_str())
                        .await
                        .map_err(|_| fail(create.to_string()))?,
                }
            }
        };
        *slot = Some(store.clone());
        Ok(store)
    }
}

fn count(op: &'static str) {
    metrics::counter!("arca_registry_operations_total", "kind" => "nats", "op" => op).increment(1);
}

/// A NATS URL without its credentials, for messages.
fn redact(url: &str) -> String {
    url.split(',')
        .map(|u| match (u.split_once("://"), u.rsplit_once('@')) {
            (Some((scheme, _)), Some((_, host))) => format!("{scheme}://***@{host}"),
            _ => u.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The registry over a [`NatsKv`]. Its background tasks (one watcher, one heartbeat) stop when
/// it is dropped.
pub struct NatsRegistry {
    kv: NatsKv,
    shared: Arc<Shared>,
    /// Endpoints this process announced: the heartbeat re-puts them.
    own: Arc<Mutex<BTreeSet<String>>>,
    stop: CancellationToken,
}

/// The watcher's view of the bucket, and the channels readers hold.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Registry key → its entry.
    entries: HashMap<String, Slot>,
    senders: HashMap<String, watch::Sender<EndpointSet>>,
}

struct Slot {
    service: String,
    endpoint: Endpoint,
    /// Set when the entry expired (or was missing from a re-read): it goes at this instant
    /// unless a heartbeat puts it back first.
    remove_at: Option<Instant>,
}

impl State {
    fn set_of(&self, service: &str) -> EndpointSet {
        let mut list: Vec<Endpoint> = self
            .entries
            .values()
            .filter(|s| s.service == service)
            .map(|s| s.endpoint.clone())
            .collect();
        list.sort();
        list.dedup();
        list.into()
    }

    /// Sends each watched service its set, where it changed.
    fn publish(&self) {
        for (service, tx) in &self.senders {
            let set = self.set_of(service);
            tx.send_if_modified(|current| {
                if **current == *set {
                    false
                } else {
                    *current = set;
                    true
                }
            });
        }
    }

    fn next_removal(&self) -> Option<Instant> {
        self.entries.values().filter_map(|s| s.remove_at).min()
    }

    fn remove_due(&mut self, now: Instant) {
        self.entries
            .retain(|_, s| s.remove_at.is_none_or(|at| at > now));
    }
}

/// What the last message of a key says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Put,
    /// Deregistered: gone at once.
    Deleted,
    /// Expired or purged: gone after the grace.
    Expired,
}

impl NatsRegistry {
    /// Starts the watcher and the heartbeat on the current tokio runtime, under `root`, the
    /// process's cancellation.
    pub fn new(kv: NatsKv, root: &CancellationToken) -> Self {
        let shared = Arc::new(Shared::default());
        let own = Arc::new(Mutex::new(BTreeSet::new()));
        let stop = root.child_token();
        let period = heartbeat_period(kv.ttl());
        tokio::spawn(watcher(
            kv.clone(),
            shared.clone(),
            period + Duration::from_secs(1),
            stop.clone(),
        ));
        tokio::spawn(heartbeat(kv.clone(), own.clone(), period, stop.clone()));
        Self {
            kv,
            shared,
            own,
            stop,
        }
    }

    /// The connection and bucket, for leader leases.
    pub fn kv(&self) -> &NatsKv {
        &self.kv
    }
}

impl Drop for NatsRegistry {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Re-puts well inside the TTL: two heartbeats may fail before an entry expires.
fn heartbeat_period(ttl: Duration) -> Duration {
    ttl / 3
}

/// `svc.<service>.<base64url(endpoint)>`.
pub fn registry_key(service: &str, endpoint: &Endpoint) -> String {
    format!(
        "{REGISTRY_PREFIX}{service}.{}",
        URL_SAFE_NO_PAD.encode(endpoint.to_string())
    )
}

/// The service and endpoint a registry key names; `None` for keys that are not ours.
fn parse_key(key: &str) -> Option<(String, Endpoint)> {
    let (service, encoded) = key.strip_prefix(REGISTRY_PREFIX)?.split_once('.')?;
    let text = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    let endpoint = std::str::from_utf8(&text).ok()?.parse().ok()?;
    Some((service.to_owned(), endpoint))
}

impl Registry for NatsRegistry {
    fn watch(&self, service: &str) -> watch::Receiver<EndpointSet> {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = state.senders.get(service) {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(state.set_of(service));
        state.senders.insert(service.to_owned(), tx);
        rx
    }

    fn register<'a>(
        &'a self,
        service: &'a str,
        endpoint: &'a Endpoint,
    ) -> BoxFuture<'a, Result<(), RegistryError>> {
        Box::pin(async move {
            let key = registry_key(service, endpoint);
            self.own
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key.clone());
            // Accepted even if NATS is down right now: the heartbeat keeps trying, and the
            // supervisor must still deregister it at shutdown.
            if let Err(e) = self.kv.put(&key, endpoint.to_string().into()).await {
                tracing::warn!(service, %endpoint, error = %e, "registration deferred; the heartbeat retries");
            }
            Ok(())
        })
    }

    fn deregister<'a>(
        &'a self,
        service: &'a str,
        endpoint: &'a Endpoint,
    ) -> BoxFuture<'a, Result<(), RegistryError>> {
        Box::pin(async move {
            let key = registry_key(service, endpoint);
            self.own
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
            // If this fails the entry still expires by TTL, the heartbeat having stopped.
            self.kv.delete(&key, None).await?;
            Ok(())
        })
    }

    fn kind(&self) -> &'static str {
        "nats"
    }
}

/// Re-puts every own entry each `period`, and at once after a (re)connection.
async fn heartbeat(
    kv: NatsKv,
    own: Arc<Mutex<BTreeSet<String>>>,
    period: Duration,
    stop: CancellationToken,
) {
    let mut connections = kv.connections();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
            r = connections.changed() => if r.is_err() { return },
        }
        let keys: Vec<String> = own
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        for key in keys {
            let Some((_, endpoint)) = parse_key(&key) else {
                continue;
            };
            // Deregistered meanwhile: a late put would resurrect it for a whole TTL.
            if !own
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&key)
            {
                continue;
            }
            if let Err(e) = kv.put(&key, endpoint.to_string().into()).await {
                tracing::debug!(error = %e, "heartbeat failed; retrying next period");
            }
        }
    }
}

/// Follows the bucket: a full read first (and again after every reconnection), then every
/// change as it comes.
async fn watcher(kv: NatsKv, shared: Arc<Shared>, grace: Duration, stop: CancellationToken) {
    let mut connections = kv.connections();
    let mut backoff = Duration::from_millis(100);
    loop {
        connections.borrow_and_update();
        let result = tokio::select! {
            () = stop.cancelled() => return,
            r = follow(&kv, &shared, grace, &mut connections) => r,
        };
        match result {
            // A reconnection: re-read at once.
            Ok(()) => backoff = Duration::from_millis(100),
            Err(e) => {
                tracing::debug!(error = %e, "registry watch interrupted; re-reading");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                    r = connections.changed() => if r.is_err() { return },
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// One watch: reads the current state of every key, swaps it in, then applies changes until
/// the connection is re-established (`Ok`) or the watch fails (`Err`).
async fn follow(
    kv: &NatsKv,
    shared: &Shared,
    grace: Duration,
    connections: &mut watch::Receiver<u64>,
) -> Result<(), String> {
    let store = kv.store().await.map_err(|e| e.to_string())?;
    count("watch");
    let prefix = format!("$KV.{}.", kv.inner.bucket);
    let consumer = tokio::time::timeout(
        OP_TIMEOUT,
        store.stream.create_consumer(push::OrderedConfig {
            deliver_subject: kv.inner.client.new_inbox(),
            description: Some("arca registry watch".to_owned()),
            filter_subject: format!("{prefix}{REGISTRY_PREFIX}>"),
            replay_policy: jetstream::consumer::ReplayPolicy::Instant,
            // The last message of every key: the current state, then what follows.
            deliver_policy: jetstream::consumer::DeliverPolicy::LastPerSubject,
            ..Default::default()
        }),
    )
    .await
    .map_err(|_| "creating the watch timed out".to_owned())?;
    let consumer = match consumer {
        Ok(c) => c,
        Err(e) => {
            // Perhaps the server lost the bucket: look it up (or create it) again next time.
            *kv.inner.store.lock().await = None;
            return Err(e.to_string());
        }
    };
    let mut pending = consumer.cached_info().num_pending;
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;

    // The re-read: nothing is applied until it is complete, so readers never see half a state.
    let mut fresh: HashMap<String, Op> = HashMap::new();
    let mut current = pending == 0;
    if current {
        swap_in(shared, fresh.drain(), grace);
    }
    loop {
        let next_removal = shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next_removal();
        let removal = async {
            match next_removal {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = connections.changed() => {
                return match r {
                    Ok(()) => Ok(()),
                    Err(_) => Err("connection gone".to_owned()),
                };
            }
            () = removal => {
                let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.remove_due(Instant::now());
                state.publish();
            }
            message = messages.next() => {
                let message = match message {
                    None => return Err("watch ended".to_owned()),
                    Some(Err(e)) => return Err(e.to_string()),
                    Some(Ok(m)) => m,
                };
                let Some(key) = message.subject.as_str().strip_prefix(&prefix) else {
                    continue;
                };
                let op = operation(message.headers.as_ref());
                if current {
                    apply(shared, key, op, grace);
                } else {
                    fresh.insert(key.to_owned(), op);
                    pending = message.info().map_or(0, |i| i.pending);
                    if pending == 0 {
                        current = true;
                        swap_in(shared, fresh.drain(), grace);
                    }
                }
            }
        }
    }
}

/// The operation a KV message carries: a header for deletions and purges, a marker reason
/// for what the server removed by itself (TTL expiry).
fn operation(headers: Option<&HeaderMap>) -> Op {
    let Some(headers) = headers else {
        return Op::Put;
    };
    if let Some(op) = headers.get("KV-Operation") {
        return match op.as_str() {
            "DEL" => Op::Deleted,
            "PURGE" => Op::Expired,
            _ => Op::Put,
        };
    }
    match headers
        .get(async_nats::header::NATS_MARKER_REASON)
        .map(HeaderValue::as_str)
    {
        Some("Remove") => Op::Deleted,
        Some(_) => Op::Expired,
        None => Op::Put,
    }
}

/// Replaces the state with a complete re-read: keys it shows alive are in, keys it shows
/// deleted are out, and keys it lost otherwise (expired, or markers gone) leave after the grace.
fn swap_in(shared: &Shared, fresh: impl Iterator<Item = (String, Op)>, grace: Duration) {
    let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    let fresh: HashMap<String, Op> = fresh.collect();
    let now = Instant::now();
    state.entries.retain(|key, slot| match fresh.get(key) {
        Some(Op::Deleted) => false,
        Some(Op::Put) => true,
        Some(Op::Expired) | None => {
            if slot.remove_at.is_none() {
                tracing::debug!(service = %slot.service, endpoint = %slot.endpoint, "registry entry missing after a re-read; kept for a grace period");
            }
            slot.remove_at.get_or_insert(now + grace);
            true
        }
    });
    for (key, op) in fresh {
        if op == Op::Put
            && let Some((service, endpoint)) = parse_key(&key)
        {
            state.entries.insert(
                key,
                Slot {
                    service,
                    endpoint,
                    remove_at: None,
                },
            );
        }
    }
    state.publish();
}

/// Applies one change after the state is current.
fn apply(shared: &Shared, key: &str, op: Op, grace: Duration) {
    let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    match op {
        Op::Put => {
            let Some((service, endpoint)) = parse_key(key) else {
                return;
            };
            state.entries.insert(
                key.to_owned(),
                Slot {
                    service,
                    endpoint,
                    remove_at: None,
                },
            );
        }
        Op::Deleted => {
            state.entries.remove(key);
        }
        Op::Expired => {
            if let Some(slot) = state.entries.get_mut(key)
                && slot.remove_at.is_none()
            {
                tracing::debug!(service = %slot.service, endpoint = %slot.endpoint, "registry entry expired; kept for a grace period");
                slot.remove_at = Some(Instant::now() + grace);
            }
        }
    }
    state.publish();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_are_valid_kv_keys() {
        for ep in [
            "tcp://127.0.0.1:9140",
            "unix:///run/arca/gw.sock",
            "tcp://[::1]:1",
        ] {
            let endpoint: Endpoint = ep.parse().unwrap();
            let key = registry_key("storage-users", &endpoint);
            assert!(
                key.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b)),
                "{key}"
            );
            assert_eq!(
                parse_key(&key),
                Some(("storage-users".to_owned(), endpoint))
            );
        }
        assert_eq!(parse_key("lease.x"), None);
        assert_eq!(parse_key("svc.gateway.!!"), None);
    }

    #[test]
    fn urls_lose_their_credentials_in_messages() {
        assert_eq!(
            redact("nats://u:p@h:4222,nats://h2:4222"),
            "nats://***@h:4222,nats://h2:4222"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn expiry_waits_for_the_grace_and_deletion_does_not() {
        let shared = Shared::default();
        let grace = Duration::from_secs(2);
        let (a, b): (Endpoint, Endpoint) = (
            "tcp://10.0.0.1:1".parse().unwrap(),
            "tcp://10.0.0.2:1".parse().unwrap(),
        );
        let rx = {
            let mut state = shared.state.lock().unwrap();
            let (tx, rx) = watch::channel(EndpointSet::from(Vec::new()));
            state.senders.insert("gateway".to_owned(), tx);
            rx
        };
        let (ka, kb) = (registry_key("gateway", &a), registry_key("gateway", &b));
        swap_in(
            &shared,
            [(ka.clone(), Op::Put), (kb.clone(), Op::Put)].into_iter(),
            grace,
        );
        assert_eq!(rx.borrow().len(), 2);
        apply(&shared, &kb, Op::Deleted, grace);
        assert_eq!(&rx.borrow()[..], &[a.clone()][..]);
        // Expired: still there until the grace passes, and back for good if re-put.
        apply(&shared, &ka, Op::Expired, grace);
        assert_eq!(rx.borrow().len(), 1);
        apply(&shared, &ka, Op::Put, grace);
        apply(&shared, &ka, Op::Expired, grace);
        let at = shared.state.lock().unwrap().next_removal().unwrap();
        tokio::time::sleep_until(at).await;
        let mut state = shared.state.lock().unwrap();
        state.remove_due(Instant::now());
        state.publish();
        assert!(rx.borrow().is_empty());
        drop(state);
        // A re-read that misses a key keeps it for the grace only.
        swap_in(&shared, [(kb.clone(), Op::Put)].into_iter(), grace);
        swap_in(&shared, std::iter::empty(), grace);
        assert_eq!(&rx.borrow()[..], &[b][..]);
    }
}
