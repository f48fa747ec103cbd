//! Publishing off the request path. A request that changed something (a share created, a link
//! opened) hands its event to an [`Outbox`] and answers at once; one worker per outbox
//! ([`OutboxWorker`], started by the service with `Context::spawn_worker`) publishes the events
//! in order and retries, with backoff, those the bus did not store. A bus that is
//! down (NATS away) thus delays events, never requests: the control plane's outage stays out of
//! the data plane.
//!
//! The queue is bounded: when it is full (the bus away long enough for `capacity` events to
//! pile up) a new event is dropped, logged and counted in `arca_events_dropped_total`. At
//! shutdown the worker publishes what is queued while the bus stores it; events still queued
//! when it cannot, or sent after it stopped, are lost too (logged and counted). Delivery was at least once from the
//! moment the bus stored an event; an outbox adds "at most once until then".

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::{Event, EventBus, EventError};
use crate::service::ServiceError;
use crate::worker::{Schedule, State, Worker};

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A bounded queue in front of an [`EventBus`]. Cheap to clone; its worker ends once every
/// clone is dropped and the queue is empty.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<Event>,
}

impl Outbox {
    /// The queue, and the worker that empties it into `bus` (run it with
    /// `Context::spawn_worker`, or [`worker::run`](crate::worker::run) outside a service).
    pub fn new(bus: Arc<dyn EventBus>, capacity: usize) -> (Self, OutboxWorker) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let worker = OutboxWorker {
            bus,
            rx,
            pending: None,
            failures: 0,
        };
        (Self { tx }, worker)
    }

    /// Queues `event` without waiting; drops it (logged, counted) when the queue is full.
    pub fn send(&self, event: Event) {
        match self.tx.try_send(event) {
            Ok(()) => metrics::gauge!("arca_events_queued").increment(1.0),
            Err(mpsc::error::TrySendError::Full(event)) => {
                tracing::warn!(id = %event.id, kind = %event.kind, "event queue full; event dropped");
                metrics::counter!("arca_events_dropped_total").increment(1);
            }
            // The worker is gone only once its service is stopping.
            Err(mpsc::error::TrySendError::Closed(event)) => {
                tracing::warn!(id = %event.id, kind = %event.kind, "event publisher stopped; event dropped");
                metrics::counter!("arca_events_dropped_total").increment(1);
            }
        }
    }
}

/// Publishes an [`Outbox`]'s events in order, one per step; a failed publish is retried, with
/// backoff, before any later event.
pub struct OutboxWorker {
    bus: Arc<dyn EventBus>,
    rx: mpsc::Receiver<Event>,
    /// The event the next step publishes (taken from the queue, or not stored yet).
    pending: Option<Event>,
    /// Failed publishes in a row: the outage is logged once, at its start and end.
    failures: u32,
}

impl Worker for OutboxWorker {
    fn name(&self) -> &'static str {
        "events/outbox"
    }

    fn schedule(&self) -> Schedule {
        Schedule::on_work(BACKOFF_MIN, BACKOFF_MAX)
    }

    fn wait_for_work(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            if self.pending.is_none() {
                // `recv` is cancel-safe: an event is never taken and then lost here.
                self.pending = self.rx.recv().await;
            }
            self.pending.is_some()
        })
    }

    fn work(&mut self) -> BoxFuture<'_, Result<State, ServiceError>> {
        Box::pin(async move {
            let Some(event) = self.pending.take().or_else(|| self.rx.try_recv().ok()) else {
                return Ok(State::Idle);
            };
            match self.bus.publish(event.clone()).await {
                Ok(()) => {
                    if self.failures > 0 {
                        tracing::info!(id = %event.id, failures = self.failures, "event bus back; queued events flow again");
                    }
                    self.failures = 0;
                }
                Err(e @ EventError::Invalid { .. }) => {
                    // No retry makes it valid.
                    tracing::error!(error = %e, "event dropped");
                    metrics::counter!("arca_events_dropped_total").increment(1);
                }
                Err(e) => {
                    // Once per outage, not once per attempt.
                    if self.failures == 0 {
                        tracing::warn!(error = %e, queued = self.rx.len(), "event bus not storing events; retrying");
                    }
                    self.failures += 1;
                    self.pending = Some(event);
                    return Err(e.into());
                }
            }
            metrics::gauge!("arca_events_queued").decrement(1.0);
            Ok(if self.rx.is_empty() {
                State::Idle
            } else {
                State::Busy
            })
        })
    }
}
