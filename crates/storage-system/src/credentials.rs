//! The credential change feed, served to proxies as the `WatchCredentials` stream.
//!
//! Every change that must end cached logins is recorded in the database with a generation
//! number (arca-store's `credentials`), by this process or by anything else writing the same
//! database (`arca users`, another storage-system instance). [`Feed::catch_up`] reads what is
//! new and broadcasts it to the subscribed proxies; it runs right after each change made through
//! this process, and every [`POLL`] for changes made elsewhere. So:
//!
//! - a change made through this process's API answers its caller only after every subscribed
//!   proxy acknowledged it (or [`ACK_WAIT`] passed): the caller's next request, at any proxy,
//!   already sees it;
//! - a change written by another process reaches the proxies within [`POLL`] plus one round
//!   trip: that is the bound `arca users passwd` documents.
//!
//! A subscriber that falls behind the broadcast buffer, or a feed whose old events were pruned,
//! gets RESET: the proxy then drops its whole cache, which is always safe.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arca_proto::v1::{CredentialEvent, CredentialEventKind};
use arca_runtime::{BoxFuture, Schedule, ServiceError, Worker, WorkerState};
use arca_store_records::{Records, StoreError};
use futures::Stream;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

/// The purpose proxies sign their subscription tokens for (with `identity.secret`): only a
/// process holding the deployment's secret may read the feed, and no user identity can.
pub(crate) const WATCH_PURPOSE: &str = "credentials-watch";
/// How often the database is asked whether another process changed credentials: one
/// single-row read per interval, whatever the request rate.
pub(crate) const POLL: Duration = Duration::from_secs(1);
/// A subscriber hears at least this often, so it can tell a quiet stream from a dead one.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(5);
/// How long a change waits for the proxies' acknowledgements before answering anyway (a proxy
/// that does not acknowledge in time is one whose stream is broken; it will find out and drop
/// its cache).
pub(crate) const ACK_WAIT: Duration = Duration::from_secs(2);
/// Events are kept this long for late readers, then pruned.
const KEEP_EVENTS: Duration = Duration::from_secs(600);
/// Events read per query while catching up.
const BATCH: u32 = 1000;
/// Broadcast buffer per subscriber; one falling further behind gets RESET.
const BUFFER: usize = 1024;

#[derive(Clone, Debug)]
enum Change {
    User { generation: u64, user_id: String },
    Reset { generation: u64 },
}

/// The feed of one storage-system process. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Feed {
    inner: Arc<Inner>,
}

struct Inner {
    store: Records,
    tx: broadcast::Sender<Change>,
    /// The last generation broadcast. Held while reading and broadcasting, so events go out
    /// once and in order, and a new subscriber starts exactly after what it was not sent.
    published: tokio::sync::Mutex<u64>,
    /// The same value for readers that must not wait (heartbeats, lag recovery).
    published_now: AtomicU64,
    /// Subscription id → the generation it acknowledged.
    acked: Mutex<HashMap<String, u64>>,
    ack_changed: Notify,
    shutdown: CancellationToken,
}

impl Feed {
    /// A feed starting at the database's current generation: what happened before this
    /// process started concerns no subscriber of it (each starts with an empty cache).
    pub(crate) async fn open(
        store: Records,
        shutdown: CancellationToken,
    ) -> Result<Self, StoreError> {
        let current = store.credentials_generation().await?;
        let (tx, _) = broadcast::channel(BUFFER);
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                tx,
                published: tokio::sync::Mutex::new(current),
                published_now: AtomicU64::new(current),
                acked: Mutex::default(),
                ack_changed: Notify::new(),
                shutdown,
            }),
        })
    }

    /// Broadcasts every event recorded since the last call; returns the generation reached.
    pub(crate) async fn catch_up(&self) -> Result<u64, StoreError> {
        let inner = &self.inner;
        let mut published = inner.published.lock().await;
        loop {
            let current = inner.store.credentials_generation().await?;
            if current == *published {
                return Ok(current);
            }
            if current < *published {
                // The database went back (restored from a backup): nothing cached is certain.
                self.publish(
                    &mut published,
                    Change::Reset {
                        generation: current,
                    },
                );
                return Ok(current);
            }
            let events = inner
                .store
                .credential_events_after(*published, BATCH)
                .await?;
            if events.first().map(|e| e.generation) != Some(*published + 1) {
                // Pruned before we read them: tell everyone to forget everything.
                self.publish(
                    &mut published,
                    Change::Reset {
                        generation: current,
                    },
                );
                continue;
            }
            for e in events {
                self.publish(
                    &mut published,
                    Change::User {
                        generation: e.generation,
                        user_id: e.user_id,
                    },
                );
            }
        }
    }

    fn publish(&self, published: &mut u64, change: Change) {
        let generation = match &change {
            Change::User { generation, .. } | Change::Reset { generation } => *generation,
        };
        // No receivers is fine: nobody is caching.
        let _ = self.inner.tx.send(change);
        *published = generation;
        self.inner
            .published_now
            .store(generation, Ordering::Release);
    }

    /// After a change made through this process: broadcast it and wait (at most
    /// [`ACK_WAIT`]) until every subscriber acknowledged it. Failures are logged, not returned:
    /// the change itself is committed, and the poller will broadcast it.
    pub(crate) async fn changed(&self) {
        match self.catch_up().await {
            Ok(generation) => self.settle(generation).await,
            Err(e) => tracing::warn!(error = %e, "cannot read the credential change feed"),
        }
    }

    /// Waits until every current subscriber acknowledged `generation`, or [`ACK_WAIT`].
    async fn settle(&self, generation: u64) {
        let deadline = tokio::time::Instant::now() + ACK_WAIT;
        loop {
            let notified = self.inner.ack_changed.notified();
            tokio::pin!(notified);
            // Registered before the check, so an acknowledgement in between is not missed.
            notified.as_mut().enable();
            let behind = self
                .lock_acked()
                .values()
                .filter(|&&acked| acked < generation)
                .count();
            if behind == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::warn!(
                    generation,
                    subscribers = behind,
                    "credential change not acknowledged in time by every proxy"
                );
                return;
            }
        }
    }

    fn lock_acked(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.inner
            .acked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a subscriber's acknowledgement; `false` for an unknown subscription.
    pub(crate) fn ack(&self, subscription: &str, generation: u64) -> bool {
        let known = match self.lock_acked().get_mut(subscription) {
            Some(acked) => {
                *acked = (*acked).max(generation);
                true
            }
            None => false,
        };
        self.inner.ack_changed.notify_waiters();
        known
    }

    /// A new subscription: SUBSCRIBED first, then every change after it, heartbeats between.
    /// The stream ends when the service shuts down; dropping it ends the subscription.
    pub(crate) async fn subscribe(&self) -> EventStream {
        let (rx, generation, id) = {
            let published = self.inner.published.lock().await;
            let rx = self.inner.tx.subscribe();
            let id = arca_config::generate_secret(16);
            self.lock_acked().insert(id.clone(), *published);
            (rx, *published, id)
        };
        let mut heartbeat =
            tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        // A stream that stalled (flow control) gets one heartbeat after, not a burst.
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let state = Subscription {
            first: Some(CredentialEvent {
                kind: CredentialEventKind::Subscribed as i32,
                generation,
                user_id: String::new(),
                subscription: id.clone(),
            }),
            rx,
            heartbeat,
            guard: Unsubscribe {
                feed: self.clone(),
                id,
            },
        };
        Box::pin(futures::stream::unfold(state, next_event))
    }
}

/// Reads the feed every [`POLL`] for changes made by other processes; in every instance (each
/// serves its own subscribers).
pub(crate) struct Poller(pub(crate) Feed);

impl Worker for Poller {
    fn name(&self) -> &'static str {
        "storage-system/credential-feed"
    }

    fn schedule(&self) -> Schedule {
        Schedule::every(POLL)
    }

    fn work(&mut self) -> BoxFuture<'_, Result<WorkerState, ServiceError>> {
        Box::pin(async move {
            if let Err(e) = self.0.catch_up().await {
                tracing::warn!(error = %e, "cannot read the credential change feed");
                return Err(e.into());
            }
            Ok(WorkerState::Idle)
        })
    }
}

/// Prunes credential events older than [`KEEP_EVENTS`] and expired app tokens, every
/// [`PRUNE_EVERY`].
pub(crate) struct Pruner(pub(crate) Records);

/// How often [`Pruner`] runs.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

impl Worker for Pruner {
    fn name(&self) -> &'static str {
        "storage-system/prune"
    }

    fn schedule(&self) -> Schedule {
        Schedule::every(PRUNE_EVERY)
    }

    fn work(&mut self) -> BoxFuture<'_, Result<WorkerState, ServiceError>> {
        Box::pin(async move {
            // Both run, whichever fails; the step fails if either did.
            let events = self.0.prune_credential_events(KEEP_EVENTS).await;
            if let Err(e) = &events {
                tracing::warn!(error = %e, "pruning credential events failed");
            }
            let tokens = self.0.prune_expired_app_tokens().await;
            if let Err(e) = &tokens {
                tracing::warn!(error = %e, "pruning expired app tokens failed");
            }
            events?;
            tokens?;
            Ok(WorkerState::Idle)
        })
    }
}

pub(crate) type EventStream =
    Pin<Box<dyn Stream<Item = Result<CredentialEvent, tonic::Status>> + Send + 'static>>;

struct Subscription {
    first: Option<CredentialEvent>,
    rx: broadcast::Receiver<Change>,
    heartbeat: tokio::time::Interval,
    guard: Unsubscribe,
}

/// Forgets the subscription when its stream is dropped (the proxy went away), so changes stop
/// waiting for its acknowledgement.
struct Unsubscribe {
    feed: Feed,
    id: String,
}

impl Drop for Unsubscribe {
    fn drop(&mut self) {
        self.feed.lock_acked().remove(&self.id);
        self.feed.inner.ack_changed.notify_waiters();
    }
}

async fn next_event(
    mut s: Subscription,
) -> Option<(Result<CredentialEvent, tonic::Status>, Subscription)> {
    if let Some(first) = s.first.take() {
        return Some((Ok(first), s));
    }
    let inner = s.guard.feed.inner.clone();
    let event = |kind: CredentialEventKind, generation: u64, user_id: String| CredentialEvent {
        kind: kind as i32,
        generation,
        user_id,
        subscription: String::new(),
    };
    let next = tokio::select! {
        // A stream that never ends would hold the server's graceful shutdown open.
        () = inner.shutdown.cancelled() => return None,
        _ = s.heartbeat.tick() => event(
            CredentialEventKind::Heartbeat,
            inner.published_now.load(Ordering::Acquire),
            String::new(),
        ),
        change = s.rx.recv() => match change {
            Ok(Change::User { generation, user_id }) => {
                event(CredentialEventKind::Changed, generation, user_id)
            }
            Ok(Change::Reset { generation }) => {
                event(CredentialEventKind::Reset, generation, String::new())
            }
            Err(broadcast::error::RecvError::Lagged(_)) => event(
                CredentialEventKind::Reset,
                inner.published_now.load(Ordering::Acquire),
                String::new(),
            ),
            Err(broadcast::error::RecvError::Closed) => return None,
        },
    };
    Some((Ok(next), s))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use arca_store_records::RecordsConfig;
    use futures::StreamExt;

    use super::*;

    async fn feed(dir: &tempfile::TempDir) -> (Records, Feed) {
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
        let store = Records::open(RecordsConfig::new(url)).await.unwrap();
        let feed = Feed::open(store.clone(), CancellationToken::new())
            .await
            .unwrap();
        (store, feed)
    }

    fn kind(e: &CredentialEvent) -> CredentialEventKind {
        CredentialEventKind::try_from(e.kind).unwrap()
    }

    #[tokio::test]
    async fn a_change_answers_once_every_subscriber_acknowledged_it() {
        let dir = tempfile::tempdir().unwrap();
        let (store, feed) = feed(&dir).await;
        let user = store.create_user("u", "U", "", "h", false).await.unwrap();

        let mut stream = feed.subscribe().await;
        let hello = stream.next().await.unwrap().unwrap();
        assert_eq!(kind(&hello), CredentialEventKind::Subscribed);
        assert_eq!(hello.generation, 0);

        store
            .update_user(&user.id, None, None, Some("h2"))
            .await
            .unwrap();
        let changing = tokio::spawn({
            let feed = feed.clone();
            async move { feed.changed().await }
        });
        let event = stream.next().await.unwrap().unwrap();
        assert_eq!(kind(&event), CredentialEventKind::Changed);
        assert_eq!(
            (event.generation, event.user_id.as_str()),
            (1, user.id.as_str())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !changing.is_finished(),
            "answered before the acknowledgement"
        );
        let acked = Instant::now();
        assert!(feed.ack(&hello.subscription, 1));
        changing.await.unwrap();
        assert!(acked.elapsed() < ACK_WAIT / 2, "{:?}", acked.elapsed());
        assert!(!feed.ack("unknown", 1));

        // A subscriber that went away is not waited for.
        drop(stream);
        store.delete_user(&user.id).await.unwrap();
        let start = Instant::now();
        feed.changed().await;
        assert!(start.elapsed() < ACK_WAIT / 2, "{:?}", start.elapsed());
    }

    #[tokio::test]
    async fn a_silent_subscriber_delays_a_change_at_most_ack_wait() {
        let dir = tempfile::tempdir().unwrap();
        let (store, feed) = feed(&dir).await;
        let user = store.create_user("u", "U", "", "h", false).await.unwrap();
        let mut stream = feed.subscribe().await;
        stream.next().await.unwrap().unwrap();
        store.delete_user(&user.id).await.unwrap();
        let start = Instant::now();
        feed.changed().await;
        let took = start.elapsed();
        assert!(took >= ACK_WAIT && took < ACK_WAIT * 2, "{took:?}");
    }

    #[tokio::test]
    async fn pruned_events_become_a_reset_and_shutdown_ends_the_stream() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
        let store = Records::open(RecordsConfig::new(url)).await.unwrap();
        let shutdown = CancellationToken::new();
        let feed = Feed::open(store.clone(), shutdown.clone()).await.unwrap();
        let user = store.create_user("u", "U", "", "h", false).await.unwrap();
        let mut stream = feed.subscribe().await;
        let hello = stream.next().await.unwrap().unwrap();

        // Two changes made elsewhere, then pruned before this process read them.
        store.set_admin(&user.id, true).await.unwrap();
        store.set_admin(&user.id, false).await.unwrap();
        store.prune_credential_events(Duration::ZERO).await.unwrap();
        assert_eq!(feed.catch_up().await.unwrap(), 2);
        let event = stream.next().await.unwrap().unwrap();
        assert_eq!(kind(&event), CredentialEventKind::Reset);
        assert_eq!(event.generation, 2);
        assert!(feed.ack(&hello.subscription, 2));

        shutdown.cancel();
        assert!(
            stream.next().await.is_none(),
            "the stream outlived shutdown"
        );
    }
}
