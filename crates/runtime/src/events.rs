//! The event bus: domain events (a share created, a link opened…) published by one service for
//! whoever listens: today the audit log, later notifications and search.
//!
//! [`EventBus`] is a trait so the transport can change with the deployment: [`MemoryBus`]
//! (the default) delivers within one process over a tokio broadcast channel; a NATS
//! JetStream bus can implement the same trait once the scale-out work brings it. Publishing
//! never waits for listeners: a listener too slow to keep up loses the oldest events and is
//! told how many (see [`log_events`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
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
}

/// Where events go. Implementations must not block the publisher on slow listeners.
pub trait EventBus: Send + Sync + 'static {
    fn publish(&self, event: Event) -> BoxFuture<'_, Result<(), EventError>>;
    /// Every event published from now on (within this bus's reach).
    fn subscribe(&self) -> Subscription;
}

/// A stream of events from [`EventBus::subscribe`].
pub struct Subscription {
    rx: broadcast::Receiver<Event>,
}

/// What [`Subscription::next`] yields.
pub enum Received {
    Event(Event),
    /// The listener fell this many events behind and they were dropped.
    Lagged(u64),
    Closed,
}

impl Subscription {
    pub async fn next(&mut self) -> Received {
        match self.rx.recv().await {
            Ok(e) => Received::Event(e),
            Err(broadcast::error::RecvError::Lagged(n)) => Received::Lagged(n),
            Err(broadcast::error::RecvError::Closed) => Received::Closed,
        }
    }
}

/// The in-process bus: a broadcast channel holding up to `capacity` events per slow listener.
#[derive(Clone)]
pub struct MemoryBus {
    tx: broadcast::Sender<Event>,
}

impl MemoryBus {
    pub fn new(capacity: usize) -> Arc<Self> {
        let (tx, _) = broadcast::channel(capacity.max(1));
        Arc::new(Self { tx })
    }
}

impl EventBus for MemoryBus {
    fn publish(&self, event: Event) -> BoxFuture<'_, Result<(), EventError>> {
        // No listener is not an error: events are announcements, not commands.
        let _ = self.tx.send(event);
        Box::pin(async { Ok(()) })
    }

    fn subscribe(&self) -> Subscription {
        Subscription {
            rx: self.tx.subscribe(),
        }
    }
}

/// Writes every event to the log (message "event", fields kind, id, actor, at_ms and the
/// attributes as JSON) until `stop` is cancelled: the audit trail every deployment has.
/// It subscribes before returning, so nothing published after the call is missed.
pub fn log_events(
    bus: &dyn EventBus,
    stop: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let mut sub = bus.subscribe();
    async move { log_loop(&mut sub, stop).await }
}

async fn log_loop(sub: &mut Subscription, stop: CancellationToken) {
    loop {
        let received = tokio::select! {
            () = stop.cancelled() => return,
            r = sub.next() => r,
        };
        match received {
            Received::Event(e) => {
                let attrs = serde_json::to_string(&e.attrs).unwrap_or_default();
                tracing::info!(
                    target: "arca::events",
                    kind = %e.kind,
                    id = %e.id,
                    actor = %e.actor,
                    at_ms = e.at_ms,
                    attrs = %attrs,
                    "event"
                );
            }
            Received::Lagged(n) => tracing::warn!(dropped = n, "event log fell behind"),
            Received::Closed => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_get_what_is_published_after_they_subscribe() {
        let bus = MemoryBus::new(4);
        bus.publish(Event::new("early", "a")).await.unwrap();
        let mut sub = bus.subscribe();
        let e = Event::new("share.created", "alice").with("share_id", "s1");
        bus.publish(e.clone()).await.unwrap();
        match sub.next().await {
            Received::Event(got) => assert_eq!(got, e),
            _ => panic!("expected the event"),
        }
        assert_ne!(Event::new("k", "a").id, Event::new("k", "a").id);
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_told_what_it_lost() {
        let bus = MemoryBus::new(2);
        let mut sub = bus.subscribe();
        for i in 0..5 {
            bus.publish(Event::new(&format!("e{i}"), "a"))
                .await
                .unwrap();
        }
        assert!(matches!(sub.next().await, Received::Lagged(3)));
        assert!(matches!(sub.next().await, Received::Event(e) if e.kind == "e3"));
    }
}
