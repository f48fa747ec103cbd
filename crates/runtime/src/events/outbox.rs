//! Publishing off the request path. A request that changed something (a share created, a link
//! opened) hands its event to an [`Outbox`] and answers at once; one task per outbox publishes
//! the events in order and retries, with backoff, those the bus did not store. A bus that is
//! down (NATS away) thus delays events, never requests: the control plane's outage stays out of
//! the data plane.
//!
//! The queue is bounded: when it is full (the bus away long enough for `capacity` events to
//! pile up) a new event is dropped, logged and counted in `arca_events_dropped_total`; events
//! still queued when the process stops are lost too. Delivery was at least once from the
//! moment the bus stored an event; an outbox adds "at most once until then".

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Event, EventBus, EventError};

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A bounded queue in front of an [`EventBus`]. Cheap to clone; the publishing task ends
/// once every clone is dropped and the queue is empty.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<Event>,
}

impl Outbox {
    /// Spawns the publishing task on the current tokio runtime.
    pub fn new(bus: Arc<dyn EventBus>, capacity: usize) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        tokio::spawn(drain(bus, rx));
        Self { tx }
    }

    /// Queues `event` without waiting; drops it (logged, counted) when the queue is full.
    pub fn send(&self, event: Event) {
        match self.tx.try_send(event) {
            Ok(()) => metrics::gauge!("arca_events_queued").increment(1.0),
            Err(mpsc::error::TrySendError::Full(event)) => {
                tracing::warn!(id = %event.id, kind = %event.kind, "event queue full; event dropped");
                metrics::counter!("arca_events_dropped_total").increment(1);
            }
            // The task is gone only if its runtime is shutting down.
            Err(mpsc::error::TrySendError::Closed(event)) => {
                tracing::warn!(id = %event.id, kind = %event.kind, "event publisher stopped; event dropped");
                metrics::counter!("arca_events_dropped_total").increment(1);
            }
        }
    }
}

async fn drain(bus: Arc<dyn EventBus>, mut rx: mpsc::Receiver<Event>) {
    while let Some(event) = rx.recv().await {
        let mut backoff = BACKOFF_MIN;
        let mut failures = 0u32;
        loop {
            match bus.publish(event.clone()).await {
                Ok(()) => {
                    if failures > 0 {
                        tracing::info!(id = %event.id, failures, "event bus back; queued events flow again");
                    }
                    break;
                }
                Err(e @ EventError::Invalid { .. }) => {
                    // No retry makes it valid.
                    tracing::error!(error = %e, "event dropped");
                    metrics::counter!("arca_events_dropped_total").increment(1);
                    break;
                }
                Err(e) => {
                    // Once per outage, not once per attempt.
                    if failures == 0 {
                        tracing::warn!(error = %e, queued = rx.len(), "event bus not storing events; retrying");
                    }
                    failures += 1;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
        metrics::gauge!("arca_events_queued").decrement(1.0);
    }
}
