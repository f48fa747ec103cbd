//! The NATS bus: events in one JetStream stream that every process of a deployment shares,
//! read through one durable pull consumer per consumer group.
//!
//! Subjects are `STREAM.KIND` (`arca-events.share.created`); the stream, created on first use
//! if missing, takes `STREAM.>` and keeps events for [`MAX_AGE`] (limits retention: a group
//! created later still reads what the stream holds). The payload is the [`Event`] as JSON and
//! the event id is the `Nats-Msg-Id`, so the stream drops the copy a retried publish may store
//! twice (within its duplicate window).
//!
//! Publish waits for the stream's ack. While the server is unreachable the client queues the
//! message and the ack does not come: each attempt waits a third of `publish_timeout`, then the
//! publish is tried again (same id, so never stored twice) until `publish_timeout` is spent;
//! the caller then gets [`EventError::NotStored`]. So a request path that publishes is delayed
//! by at most `publish_timeout`, never hung.
//!
//! A group is a durable pull consumer named after it, created (or updated to the configured
//! `ack_wait`/`max_deliver`) by every subscriber: replicas pulling from one consumer share its
//! events, each event going to one of them; another group is another consumer with its own
//! cursor. Acks are explicit; an event not acked within `ack_wait`, or nak'ed, is delivered
//! again (up to `max_deliver` times). A subscriber that loses its pull stream (server restart,
//! consumer deleted) opens it again with backoff; nothing is lost, the consumer's cursor is on
//! the server.
//!
//! Hints are plain core-NATS messages on `STREAM-hints.TOPIC`, outside the stream's subjects
//! so that JetStream never stores them; a listener is a plain subscription.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, AckKind, stream};
use futures::StreamExt as _;
use futures::future::BoxFuture;
use tokio::time::Instant;

use arca_transport::NatsConnection;

use super::{
    Delivery, Event, EventBus, EventError, Hint, HintSource, Hints, Received, Settle, Source,
    Subscription,
};

/// Bound on every control request (create a stream or consumer, confirm an ack): nothing here
/// hangs on an unreachable server.
const OP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the stream keeps an event, read or not.
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The stream drops a message whose id it stored within this window: retried publishes.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// Events a subscriber pulls ahead. Small: an event pulled but not yet handled runs down its
/// ack wait, and replicas that pull few at a time share the load evenly.
const PULL_BATCH: usize = 8;
/// A pull request lasts this long; the server proves it alive with a heartbeat meanwhile.
const PULL_EXPIRES: Duration = Duration::from_secs(30);
const PULL_HEARTBEAT: Duration = Duration::from_secs(5);
/// Backoff between attempts to (re)open a subscription.
const REOPEN_MIN: Duration = Duration::from_millis(100);
const REOPEN_MAX: Duration = Duration::from_secs(2);

/// Where the stream is and how it delivers (the `events.nats.*` keys).
#[derive(Clone, Debug)]
pub struct NatsBusSettings {
    /// `nats://HOST:PORT`, comma-separated for a cluster.
    pub url: String,
    pub stream: String,
    pub ack_wait: Duration,
    pub max_deliver: u32,
    pub publish_timeout: Duration,
}

/// The JetStream event bus. Cheap to share: one connection for all publishers and groups.
pub struct NatsBus {
    inner: Arc<Inner>,
}

struct Inner {
    /// For hints, which bypass JetStream.
    client: async_nats::Client,
    js: jetstream::Context,
    settings: NatsBusSettings,
    /// Whether the stream is known to exist; forgotten when the server says it does not
    /// (a server that lost its state gets it back).
    stream_ready: tokio::sync::Mutex<bool>,
}

impl NatsBus {
    /// Its own connection to `settings.url` (see [`NatsConnection::connect`]).
    pub async fn connect(settings: NatsBusSettings) -> Result<Arc<Self>, EventError> {
        let connection = NatsConnection::connect(&settings.url)
            .await
            .map_err(|e| EventError::Unavailable(e.to_string()))?;
        Ok(Self::on(&connection, settings))
    }

    /// The stream over an existing connection, the one the registry uses when both name
    /// the same servers (`settings.url` unused).
    pub fn on(connection: &NatsConnection, settings: NatsBusSettings) -> Arc<Self> {
        let client = connection.client().clone();
        // Each publish attempt's own bound (see `publish`); the context applies it to sending
        // and to waiting for the ack.
        let attempt = (settings.publish_timeout / 3).max(Duration::from_millis(100));
        let js = jetstream::ContextBuilder::new()
            .timeout(attempt)
            .build(client.clone());
        Arc::new(Self {
            inner: Arc::new(Inner {
                client,
                js,
                settings,
                stream_ready: tokio::sync::Mutex::new(false),
            }),
        })
    }
}

impl Inner {
    fn subject(&self, kind: &str) -> String {
        format!("{}.{kind}", self.settings.stream)
    }

    fn hint_subject(&self, topic: &str) -> String {
        format!("{}-hints.{topic}", self.settings.stream)
    }

    /// Creates the stream unless it is known to exist.
    async fn ensure_stream(&self) -> Result<(), String> {
        let mut ready = self.stream_ready.lock().await;
        if *ready {
            return Ok(());
        }
        let name = self.settings.stream.clone();
        let config = stream::Config {
            subjects: vec![format!("{name}.>")],
            name,
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            max_age: MAX_AGE,
            duplicate_window: DUPLICATE_WINDOW,
            ..Default::default()
        };
        // An existing stream is taken as it is: every process creates it with this config.
        match tokio::time::timeout(OP_TIMEOUT, self.js.get_or_create_stream(config)).await {
            Ok(Ok(_)) => {
                *ready = true;
                Ok(())
            }
            Ok(Err(e)) => Err(format!("stream {}: {e}", self.settings.stream)),
            Err(_) => Err(format!(
                "stream {}: no answer within {OP_TIMEOUT:?}",
                self.settings.stream
            )),
        }
    }

    async fn forget_stream(&self) {
        *self.stream_ready.lock().await = false;
    }

    /// One attempt: the stream exists, the event is sent and acknowledged.
    async fn publish_once(&self, subject: &str, id: &str, payload: &[u8]) -> Result<(), String> {
        self.ensure_stream().await?;
        let message = PublishMessage::build()
            .payload(payload.to_vec().into())
            .message_id(id);
        let ack = match self.js.send_publish(subject.to_owned(), message).await {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        match ack {
            Ok(_) => Ok(()),
            Err(e) => {
                if e.kind() == PublishErrorKind::StreamNotFound {
                    self.forget_stream().await;
                }
                Err(e.to_string())
            }
        }
    }

    async fn publish(&self, event: Event) -> Result<(), EventError> {
        let invalid = |reason: String| EventError::Invalid {
            id: event.id.clone(),
            reason,
        };
        // A kind is one or more subject tokens: no empty token, no wildcard, no space.
        if event.kind.is_empty()
            || event.kind.split('.').any(|t| {
                t.is_empty() || t.contains(['*', '>']) || t.chars().any(char::is_whitespace)
            })
        {
            return Err(invalid(format!("kind {:?} is not a subject", event.kind)));
        }
        let payload = serde_json::to_vec(&event).map_err(|e| invalid(e.to_string()))?;
        let subject = self.subject(&event.kind);
        let started = Instant::now();
        let deadline = started + self.settings.publish_timeout;
        let mut attempts = 0u32;
        let mut last = String::new();
        while Instant::now() < deadline {
            attempts += 1;
            // The context bounds an attempt already; this bounds the stream creation in it
            // and keeps the whole within the deadline.
            let outcome =
                tokio::time::timeout_at(deadline, self.publish_once(&subject, &event.id, &payload))
                    .await;
            match outcome {
                Ok(Ok(())) => {
                    if attempts > 1 {
                        tracing::info!(id = %event.id, attempts, "event stored after retries");
                    }
                    return Ok(());
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last = "no ack before the publish timeout".to_owned();
                    break;
                }
            }
            // Jittered so that many publishers failing together do not retry in step.
            let backoff = Duration::from_millis(50u64 << attempts.min(4))
                .mul_f64(0.5 + jitter() / 2.0)
                .min(deadline.saturating_duration_since(Instant::now()));
            tokio::time::sleep(backoff).await;
        }
        Err(EventError::NotStored {
            id: event.id,
            attempts,
            waited: started.elapsed(),
            last,
        })
    }
}

impl EventBus for NatsBus {
    fn publish(&self, event: Event) -> BoxFuture<'_, Result<(), EventError>> {
        Box::pin(self.inner.publish(event))
    }

    fn hint<'a>(&'a self, topic: &'a str, key: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let subject = self.inner.hint_subject(topic);
            let payload = key.as_bytes().to_vec().into();
            // The client queues while disconnected; bounded anyway, a hint is worth no wait.
            let sent =
                tokio::time::timeout(OP_TIMEOUT, self.inner.client.publish(subject, payload)).await;
            if !matches!(sent, Ok(Ok(()))) {
                tracing::debug!(topic, key, "hint not sent");
            }
        })
    }

    fn hints(&self, topic: &str) -> Hints {
        Hints {
            source: HintSource::Nats(Box::new(HintFeed {
                inner: self.inner.clone(),
                subject: self.inner.hint_subject(topic),
                subscriber: None,
                failures: 0,
            })),
        }
    }

    fn subscribe(&self, group: &str) -> Subscription {
        Subscription {
            source: Source::Nats(Box::new(Feed {
                inner: self.inner.clone(),
                group: group.to_owned(),
                messages: None,
                failures: 0,
            })),
        }
    }
}

/// A hint listener's subscription, opened on first use and again after it ends (the client
/// renews subscriptions over reconnects by itself; what was sent meanwhile is lost, which the
/// listener learns as [`Hint::Missed`] only when the subscription itself ended).
pub(super) struct HintFeed {
    inner: Arc<Inner>,
    subject: String,
    subscriber: Option<async_nats::Subscriber>,
    failures: u32,
}

impl HintFeed {
    pub(super) async fn next(&mut self) -> Hint {
        loop {
            let Some(subscriber) = self.subscriber.as_mut() else {
                let opened = tokio::time::timeout(
                    OP_TIMEOUT,
                    self.inner.client.subscribe(self.subject.clone()),
                )
                .await;
                match opened {
                    Ok(Ok(s)) => {
                        self.subscriber = Some(s);
                        self.failures = 0;
                    }
                    _ => {
                        self.failures += 1;
                        let wait = REOPEN_MIN.saturating_mul(1 << self.failures.min(5));
                        tokio::time::sleep(wait.min(REOPEN_MAX)).await;
                    }
                }
                continue;
            };
            match subscriber.next().await {
                Some(msg) => return Hint::Key(String::from_utf8_lossy(&msg.payload).into_owned()),
                None => {
                    // Ended (the client closed it): open another; what came meanwhile is gone.
                    self.subscriber = None;
                    return Hint::Missed;
                }
            }
        }
    }
}

/// One subscriber's pull stream from its group's consumer, opened on first use and again
/// after it fails.
pub(super) struct Feed {
    inner: Arc<Inner>,
    group: String,
    messages: Option<pull::Stream>,
    /// Consecutive failures to open or read, for the backoff.
    failures: u32,
}

impl Feed {
    async fn open(&self) -> Result<pull::Stream, String> {
        self.inner.ensure_stream().await?;
        let settings = &self.inner.settings;
        let config = pull::Config {
            durable_name: Some(self.group.clone()),
            description: Some(format!("arca events for {}", self.group)),
            ack_policy: AckPolicy::Explicit,
            ack_wait: settings.ack_wait,
            max_deliver: i64::from(settings.max_deliver),
            // A new group reads what the stream holds, not only what comes after it.
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        };
        let create = self
            .inner
            .js
            .create_consumer_on_stream(config, settings.stream.as_str());
        let consumer = match tokio::time::timeout(OP_TIMEOUT, create).await {
            Ok(Ok(consumer)) => consumer,
            Ok(Err(e)) => {
                // The stream may be gone (a server that lost its state): look again next time.
                self.inner.forget_stream().await;
                return Err(format!("consumer {}: {e}", self.group));
            }
            Err(_) => {
                return Err(format!(
                    "consumer {}: no answer within {OP_TIMEOUT:?}",
                    self.group
                ));
            }
        };
        let stream = consumer
            .stream()
            .max_messages_per_batch(PULL_BATCH)
            .expires(PULL_EXPIRES)
            .heartbeat(PULL_HEARTBEAT)
            .messages();
        match tokio::time::timeout(OP_TIMEOUT, stream).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(format!("pull {}: {e}", self.group)),
            Err(_) => Err(format!(
                "pull {}: no answer within {OP_TIMEOUT:?}",
                self.group
            )),
        }
    }

    async fn backoff(&mut self, error: &str) {
        self.failures += 1;
        let wait = REOPEN_MIN
            .saturating_mul(1 << self.failures.min(5))
            .min(REOPEN_MAX);
        tracing::warn!(group = %self.group, error, retry_in = ?wait, "event subscription interrupted");
        tokio::time::sleep(wait).await;
    }

    /// Cancel-safe: the pull stream stays in `self`; a message it had buffered is still there.
    pub(super) async fn next(&mut self) -> Received {
        loop {
            let messages = match &mut self.messages {
                Some(messages) => messages,
                None => match self.open().await {
                    Ok(stream) => self.messages.insert(stream),
                    Err(e) => {
                        self.backoff(&e).await;
                        continue;
                    }
                },
            };
            let msg = match messages.next().await {
                Some(Ok(msg)) => msg,
                Some(Err(e)) => {
                    // A missed heartbeat or a failed pull: the connection or the consumer is
                    // gone. Open a fresh pull; the consumer keeps the cursor.
                    self.messages = None;
                    self.backoff(&e.to_string()).await;
                    continue;
                }
                None => {
                    self.messages = None;
                    self.backoff("pull stream ended").await;
                    continue;
                }
            };
            self.failures = 0;
            let attempt = msg
                .info()
                .ok()
                .and_then(|i| u64::try_from(i.delivered).ok())
                .unwrap_or(1);
            match serde_json::from_slice::<Event>(&msg.payload) {
                Ok(event) => {
                    return Received::Event(Delivery {
                        event,
                        attempt,
                        settle: Some(Settle::Nats(Box::new(msg))),
                    });
                }
                Err(e) => {
                    // Not ours to handle, and it would fail every redelivery the same way.
                    tracing::warn!(group = %self.group, subject = %msg.subject, error = %e, "not an event; dropped");
                    if let Err(e) = msg.ack_with(AckKind::Term).await {
                        tracing::debug!(error = %e, "terminating a malformed message");
                    }
                }
            }
        }
    }
}

/// Acknowledges and waits for the server to confirm it.
pub(super) async fn ack(msg: &jetstream::Message, id: &str) -> Result<(), EventError> {
    let settle = |reason: String| EventError::Settle {
        id: id.to_owned(),
        reason,
    };
    match tokio::time::timeout(OP_TIMEOUT, msg.double_ack()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(settle(e.to_string())),
        Err(_) => Err(settle(format!("no confirmation within {OP_TIMEOUT:?}"))),
    }
}

/// Refuses the delivery: the server delivers it again after `delay` (at once without).
pub(super) async fn nak(
    msg: &jetstream::Message,
    id: &str,
    delay: Option<Duration>,
) -> Result<(), EventError> {
    msg.ack_with(AckKind::Nak(delay))
        .await
        .map_err(|e| EventError::Settle {
            id: id.to_owned(),
            reason: e.to_string(),
        })
}

/// A number in [0, 1) that differs between calls, for backoff jitter.
fn jitter() -> f64 {
    (super::rand_u128() >> 75) as f64 / (1u64 << 53) as f64
}
