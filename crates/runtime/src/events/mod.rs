//! The event bus: domain events (a share created, a link opened…) published by one service for
//! whoever listens: today the audit log, later notifications and search.
//!
//! [`EventBus`] is a trait so the transport can change with the deployment: [`MemoryBus`]
//! (the default) delivers within one process over a tokio broadcast channel; [`NatsBus`]
//! (`events.kind: nats`) stores every event in a JetStream stream that all processes share.
//!
//! Listeners subscribe as a *consumer group*, named after the consuming service: each event is
//! handled once per group, however many replicas of the service subscribe, and every group
//! gets its own copy. A handler settles each [`Delivery`]: [`Delivery::ack`] when done,
//! [`Delivery::nak`] to have it again; one it drops unsettled comes again too (on NATS after
//! `events.nats.ack_wait`). Delivery is at least once, so handlers are idempotent: the event id
//! tells a redelivery.
//!
//! Publishing never waits for listeners. On NATS it waits for the stream to have stored the
//! event (bounded by `events.nats.publish_timeout`, retries included): an event that was not
//! stored is an error to the publisher, never lost silently. Request paths publish through an
//! [`Outbox`] instead, which queues and retries so that a bus outage never slows a request.
//!
//! Beside events, the bus carries *hints* ([`EventBus::hint`], [`EventBus::hints`]): "this
//! changed, look again", to every listener of a topic at that moment, stored nowhere, lost
//! when nobody listens or a listener lags. They are for work that has a source of truth to
//! fall back on and only wants to look sooner: the search crawler follows the spaces' etags
//! on its own schedule, and a hint that a space changed makes it look now. A lost hint costs
//! a delay, never a wrong answer; that is why they need no stream, no consumer and no ack (a
//! durable consumer per search instance would be one more thing to clean up on every
//! scale-down).

pub mod nats;
mod outbox;

pub use nats::{NatsBus, NatsBusSettings};
pub use outbox::{Outbox, OutboxWorker};

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

/// One domain event. `kind` is dotted (`share.created`); `attrs` carry the ids it concerns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Unique per event (128 random bits, hex), so a consumer can drop redeliveries.
    pub id: String,
    pub kind: String,
    /// Who caused it: a user id, or a principal such as `public:SHARE_ID`.
    pub actor: String,
    /// Milliseconds since the epoch.
    pub at_ms: i64,
    pub attrs: BTreeMap<String, String>,
}

impl Event {
    /// A new event of `kind` by `actor`, now, with a fresh id.
    pub fn new(kind: &str, actor: &str) -> Self {
        Self {
            id: format!("{:032x}", rand_u128()),
            kind: kind.to_owned(),
            actor: actor.to_owned(),
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            attrs: BTreeMap::new(),
        }
    }

    /// Adds one attribute.
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.attrs.insert(key.to_owned(), value.into());
        self
    }
}

fn rand_u128() -> u128 {
    use std::hash::{BuildHasher, RandomState};
    // Two independently keyed SipHashes: unique and unpredictable enough for event ids,
    // without another dependency here.
    let (a, b) = (
        RandomState::new().hash_one(1u8),
        RandomState::new().hash_one(2u8),
    );
    (u128::from(a) << 64) | u128::from(b)
}

#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The bus could not take the event (a remote bus that is down, say).
    #[error("event bus unavailable: {0}")]
    Unavailable(String),
    /// The stream did not acknowledge the event within the publish timeout, over `attempts`
    /// tries: it may not be stored (or, rarely, stored without the answer reaching us).
    #[error("event {id} not stored after {attempts} attempts in {waited:?}: {last}")]
    NotStored {
        id: String,
        attempts: u32,
        waited: std::time::Duration,
        last: String,
    },
    /// The event cannot be sent at all (its kind is no subject token, it does not encode).
    #[error("event {id} refused: {reason}")]
    Invalid { id: String, reason: String },
    /// Acknowledging or refusing a delivery failed; the bus delivers it again after its ack
    /// wait.
    #[error("settling event {id}: {reason}")]
    Settle { id: String, reason: String },
}

/// Where events go. Implementations must not block the publisher on slow listeners.
pub trait EventBus: Send + Sync + 'static {
    /// Sends `event` to every consumer group; `Ok` once the bus holds it.
    fn publish(&self, event: Event) -> BoxFuture<'_, Result<(), EventError>>;
    /// The events of consumer group `group` (the consuming service's name): every replica
    /// subscribing with the same group shares one feed, each event going to one of them. The
    /// group exists from this call on (on NATS: from the first [`Subscription::next`], then
    /// durably, with every event the stream holds).
    fn subscribe(&self, group: &str) -> Subscription;
    /// Sends a hint on `topic` (one subject token) carrying `key` to whoever listens now.
    /// Never fails: a hint that cannot go is dropped (and logged at debug).
    fn hint<'a>(&'a self, topic: &'a str, key: &'a str) -> BoxFuture<'a, ()>;
    /// The hints sent on `topic` from now on, for as long as the feed lives. Every feed gets
    /// every hint (no groups).
    fn hints(&self, topic: &str) -> Hints;
}

/// What [`Hints::next`] yields.
#[derive(Debug, PartialEq, Eq)]
pub enum Hint {
    /// A hint's key.
    Key(String),
    /// Hints may have been lost (the feed lagged, or was reopened): look at everything.
    Missed,
    /// The bus is gone: no hint will ever come.
    Closed,
}

/// A feed of hints from [`EventBus::hints`].
pub struct Hints {
    source: HintSource,
}

enum HintSource {
    Memory(broadcast::Receiver<String>),
    Nats(Box<nats::HintFeed>),
}

impl Hints {
    /// The next hint. Cancel-safe.
    pub async fn next(&mut self) -> Hint {
        match &mut self.source {
            HintSource::Memory(rx) => match rx.recv().await {
                Ok(key) => Hint::Key(key),
                Err(broadcast::error::RecvError::Lagged(_)) => Hint::Missed,
                Err(broadcast::error::RecvError::Closed) => Hint::Closed,
            },
            HintSource::Nats(feed) => feed.next().await,
        }
    }
}

/// A feed of events from [`EventBus::subscribe`].
pub struct Subscription {
    source: Source,
}

enum Source {
    Memory(Arc<MemGroup>),
    Nats(Box<nats::Feed>),
}

/// What [`Subscription::next`] yields.
pub enum Received {
    Event(Delivery),
    /// The group fell this many events behind and they were dropped (memory bus only: a
    /// stream keeps what a slow group has not read yet).
    Lagged(u64),
    Closed,
}

impl Subscription {
    /// The next event for this group. Cancel-safe: an event is never lost by dropping this
    /// future, so it can sit in a `select!` with a shutdown signal.
    pub async fn next(&mut self) -> Received {
        match &mut self.source {
            Source::Memory(group) => group.next().await,
            Source::Nats(feed) => feed.next().await,
        }
    }
}

/// One event handed to one subscriber of a group, until it is settled.
pub struct Delivery {
    event: Event,
    attempt: u64,
    /// `None` once settled.
    settle: Option<Settle>,
}

enum Settle {
    /// Dropped unsettled or nak'ed: queued again for the group.
    Memory(Arc<MemGroup>),
    Nats(Box<async_nats::jetstream::Message>),
}

impl Delivery {
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// 1 for the first delivery of this event to this group, 2 for the first redelivery…
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// Handled: the group will not see the event again. On NATS this waits for the server to
    /// confirm, so `Ok` means it is recorded.
    pub async fn ack(mut self) -> Result<(), EventError> {
        match self.settle.take() {
            Some(Settle::Nats(msg)) => nats::ack(&msg, &self.event.id).await,
            Some(Settle::Memory(_)) | None => Ok(()),
        }
    }

    /// Not handled: deliver it again (to any subscriber of the group) after `delay`.
    pub async fn nak(mut self, delay: Option<std::time::Duration>) -> Result<(), EventError> {
        match self.settle.take() {
            Some(Settle::Nats(msg)) => nats::nak(&msg, &self.event.id, delay).await,
            Some(Settle::Memory(group)) => {
                // The delay does not matter within one process: nobody else is waiting on it.
                group.again(self.event.clone(), self.attempt);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        // A memory delivery dropped unsettled (its handler panicked or forgot) comes again, as
        // on NATS after the ack wait.
        if let Some(Settle::Memory(group)) = self.settle.take() {
            group.again(self.event.clone(), self.attempt);
        }
    }
}

/// Deliveries of one event to one group on the memory bus before it is dropped (and logged):
/// a handler that always fails must not spin forever.
const MEMORY_MAX_DELIVER: u64 = 10;

/// The in-process bus: a broadcast channel holding up to `capacity` events per slow group.
pub struct MemoryBus {
    tx: broadcast::Sender<Event>,
    groups: Mutex<HashMap<String, Arc<MemGroup>>>,
    /// One broadcast channel per hint topic, made by its first listener.
    hints: Mutex<HashMap<String, broadcast::Sender<String>>>,
}

/// Hints a slow listener of the memory bus may fall behind by before it is told it missed
/// some ([`Hint::Missed`]).
const MEMORY_HINTS: usize = 1024;

/// One consumer group of the memory bus: one broadcast receiver that its subscribers take
/// turns on, so each event reaches one of them, and the deliveries to hand out again.
struct MemGroup {
    name: String,
    rx: tokio::sync::Mutex<broadcast::Receiver<Event>>,
    again: Mutex<VecDeque<(Event, u64)>>,
    requeued: Notify,
}

impl MemGroup {
    fn again(self: &Arc<Self>, event: Event, attempt: u64) {
        if attempt >= MEMORY_MAX_DELIVER {
            tracing::warn!(group = %self.name, id = %event.id, kind = %event.kind, attempt, "event given up after its last delivery");
            return;
        }
        self.again
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back((event, attempt + 1));
        self.requeued.notify_one();
    }

    async fn next(self: &Arc<Self>) -> Received {
        loop {
            // Registered before looking at the queue, so a requeue between the look and the
            // wait still wakes us.
            let requeued = self.requeued.notified();
            tokio::pin!(requeued);
            requeued.as_mut().enable();
            let queued = self
                .again
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front();
            if let Some((event, attempt)) = queued {
                return Received::Event(self.delivery(event, attempt));
            }
            // The receiver's lock and recv are both cancel-safe: losing the race to a requeue
            // loses no event.
            let received = tokio::select! {
                r = async { self.rx.lock().await.recv().await } => r,
                () = &mut requeued => continue,
            };
            return match received {
                Ok(event) => Received::Event(self.delivery(event, 1)),
                Err(broadcast::error::RecvError::Lagged(n)) => Received::Lagged(n),
                Err(broadcast::error::RecvError::Closed) => Received::Closed,
            };
        }
    }

    fn delivery(self: &Arc<Self>, event: Event, attempt: u64) -> Delivery {
        Delivery {
            event,
            attempt,
            settle: Some(Settle::Memory(self.clone())),
        }
    }
}

impl MemoryBus {
    pub fn new(capacity: usize) -> Arc<Self> {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Arc::new(Self {
            tx,
            groups: Mutex::new(HashMap::new()),
            hints: Mutex::new(HashMap::new()),
        })
    }
}

impl EventBus for MemoryBus {
    fn publish(&self, event: Event) -> BoxFuture<'_, Result<(), EventError>> {
        // No listener is not an error: events are announcements, not commands.
        let _ = self.tx.send(event);
        Box::pin(async { Ok(()) })
    }

    fn subscribe(&self, group: &str) -> Subscription {
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let group = groups
            .entry(group.to_owned())
            .or_insert_with(|| {
                Arc::new(MemGroup {
                    name: group.to_owned(),
                    rx: tokio::sync::Mutex::new(self.tx.subscribe()),
                    again: Mutex::new(VecDeque::new()),
                    requeued: Notify::new(),
                })
            })
            .clone();
        Subscription {
            source: Source::Memory(group),
        }
    }

    fn hint<'a>(&'a self, topic: &'a str, key: &'a str) -> BoxFuture<'a, ()> {
        let hints = self.hints.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = hints.get(topic) {
            // No listener left is not an error: nobody needed the hint.
            let _ = tx.send(key.to_owned());
        }
        Box::pin(async {})
    }

    fn hints(&self, topic: &str) -> Hints {
        let mut hints = self.hints.lock().unwrap_or_else(PoisonError::into_inner);
        let rx = hints
            .entry(topic.to_owned())
            .or_insert_with(|| broadcast::channel(MEMORY_HINTS).0)
            .subscribe();
        Hints {
            source: HintSource::Memory(rx),
        }
    }
}

/// Writes every event to the log (message "event", fields kind, id, actor, at_ms and the
/// attributes as JSON) until `stop` is cancelled: the audit trail every deployment has. It
/// reads as consumer group `group` (the service writing the trail), so with several replicas
/// each event is logged once. It subscribes before returning, so nothing published after the
/// call is missed.
pub fn log_events(
    bus: &dyn EventBus,
    group: &str,
    stop: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let mut sub = bus.subscribe(group);
    async move { log_loop(&mut sub, stop).await }
}

async fn log_loop(sub: &mut Subscription, stop: CancellationToken) {
    loop {
        let received = tokio::select! {
            () = stop.cancelled() => return,
            r = sub.next() => r,
        };
        match received {
            Received::Event(delivery) => {
                let e = delivery.event();
                let attrs = serde_json::to_string(&e.attrs).unwrap_or_default();
                tracing::info!(
                    target: "arca::events",
                    kind = %e.kind,
                    id = %e.id,
                    actor = %e.actor,
                    at_ms = e.at_ms,
                    attrs = %attrs,
                    attempt = delivery.attempt(),
                    "event"
                );
                if let Err(e) = delivery.ack().await {
                    // It comes again after the ack wait and is logged twice: the id tells.
                    tracing::warn!(error = %e, "event logged but not acknowledged");
                }
            }
            Received::Lagged(n) => tracing::warn!(dropped = n, "event log fell behind"),
            Received::Closed => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;

    /// The next event within a second, or a panic naming what came instead.
    async fn next_event(sub: &mut Subscription) -> Delivery {
        match tokio::time::timeout(Duration::from_secs(1), sub.next()).await {
            Ok(Received::Event(d)) => d,
            Ok(Received::Lagged(n)) => panic!("lagged {n}"),
            Ok(Received::Closed) => panic!("closed"),
            Err(_) => panic!("no event within 1s"),
        }
    }

    #[tokio::test]
    async fn subscribers_get_what_is_published_after_they_subscribe() {
        let bus = MemoryBus::new(4);
        bus.publish(Event::new("early", "a")).await.unwrap();
        let mut sub = bus.subscribe("audit");
        let e = Event::new("share.created", "alice").with("share_id", "s1");
        bus.publish(e.clone()).await.unwrap();
        let d = next_event(&mut sub).await;
        assert_eq!(d.event(), &e);
        assert_eq!(d.attempt(), 1);
        d.ack().await.unwrap();
        assert_ne!(Event::new("k", "a").id, Event::new("k", "a").id);
    }

    #[tokio::test]
    async fn every_hint_listener_hears_every_hint_and_a_lagging_one_is_told() {
        let bus = MemoryBus::new(4);
        // Nobody listens: dropped, not kept for a later listener.
        bus.hint("space-changed", "early").await;
        let mut a = bus.hints("space-changed");
        let mut b = bus.hints("space-changed");
        let mut other = bus.hints("elsewhere");
        bus.hint("space-changed", "s1").await;
        assert_eq!(a.next().await, Hint::Key("s1".into()));
        assert_eq!(b.next().await, Hint::Key("s1".into()));
        let nothing = tokio::time::timeout(Duration::from_millis(50), other.next()).await;
        assert!(nothing.is_err(), "a hint reached another topic");
        for i in 0..=MEMORY_HINTS {
            bus.hint("space-changed", &format!("k{i}")).await;
        }
        assert_eq!(a.next().await, Hint::Missed);
        assert_eq!(a.next().await, Hint::Key("k1".into()));
    }

    #[tokio::test]
    async fn a_slow_group_is_told_what_it_lost() {
        let bus = MemoryBus::new(2);
        let mut sub = bus.subscribe("audit");
        for i in 0..5 {
            bus.publish(Event::new(&format!("e{i}"), "a"))
                .await
                .unwrap();
        }
        assert!(matches!(sub.next().await, Received::Lagged(3)));
        assert!(matches!(sub.next().await, Received::Event(e) if e.event().kind == "e3"));
    }

    #[tokio::test]
    async fn each_group_gets_every_event_once_across_its_subscribers() {
        let bus = MemoryBus::new(64);
        let (mut a1, mut a2, mut b) = (bus.subscribe("a"), bus.subscribe("a"), bus.subscribe("b"));
        let mut published = HashSet::new();
        for i in 0..10 {
            let e = Event::new(&format!("e{i}"), "x");
            published.insert(e.id.clone());
            bus.publish(e).await.unwrap();
        }
        let mut seen_a = Vec::new();
        for _ in 0..5 {
            for sub in [&mut a1, &mut a2] {
                let d = next_event(sub).await;
                seen_a.push(d.event().id.clone());
                d.ack().await.unwrap();
            }
        }
        let mut seen_b = HashSet::new();
        for _ in 0..10 {
            let d = next_event(&mut b).await;
            seen_b.insert(d.event().id.clone());
            d.ack().await.unwrap();
        }
        assert_eq!(seen_a.len(), 10);
        assert_eq!(seen_a.iter().cloned().collect::<HashSet<_>>(), published);
        assert_eq!(seen_b, published);
        // Nothing more for group a: each event went to one of its subscribers only.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), a1.next())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_nak_or_an_unsettled_drop_delivers_again() {
        let bus = MemoryBus::new(8);
        let (mut one, mut two) = (bus.subscribe("g"), bus.subscribe("g"));
        let e = Event::new("share.created", "alice");
        bus.publish(e.clone()).await.unwrap();
        let first = next_event(&mut one).await;
        first.nak(None).await.unwrap();
        // The other subscriber of the group may take it: it is the group's, not the replica's.
        let second = next_event(&mut two).await;
        assert_eq!((second.event(), second.attempt()), (&e, 2));
        drop(second);
        let third = next_event(&mut one).await;
        assert_eq!((third.event(), third.attempt()), (&e, 3));
        third.ack().await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), two.next())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_failing_handler_gives_up_after_the_last_delivery() {
        let bus = MemoryBus::new(8);
        let mut sub = bus.subscribe("g");
        bus.publish(Event::new("k", "a")).await.unwrap();
        for attempt in 1..=MEMORY_MAX_DELIVER {
            let d = next_event(&mut sub).await;
            assert_eq!(d.attempt(), attempt);
            d.nak(None).await.unwrap();
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(50), sub.next())
                .await
                .is_err()
        );
    }
}
