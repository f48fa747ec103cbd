//! Where services are: the `Registry` trait and its in-process and static implementations.
//!
//! Clients never ask the registry per request: they hold a `watch` receiver per service name
//! and read its latest value, so a registry outage leaves the last known endpoints in place
//! (the data plane keeps serving) and the registry sees load proportional to changes, not to
//! traffic.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::Endpoint;

pub mod dns;
pub mod nats;

pub use dns::DnsRegistry;
pub use nats::{NatsConnection, NatsKv, NatsRegistry, NatsSettings};

/// The current endpoints of one service, shared cheaply between readers.
pub type EndpointSet = Arc<[Endpoint]>;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("registry unavailable: {0}")]
    Unavailable(String),
}

/// Service discovery. Implementations: [`MemoryRegistry`], [`StaticRegistry`], [`NatsRegistry`]
/// (a JetStream KV bucket) and [`DnsRegistry`] (names resolved periodically).
pub trait Registry: Send + Sync + 'static {
    /// A live view of `service`'s endpoints. Cheap to call; callers keep the receiver.
    fn watch(&self, service: &str) -> watch::Receiver<EndpointSet>;
    /// Announces that this process serves `service` at `endpoint`.
    fn register<'a>(
        &'a self,
        service: &'a str,
        endpoint: &'a Endpoint,
    ) -> BoxFuture<'a, Result<(), RegistryError>>;
    /// Withdraws an announcement; called at the start of shutdown, before draining.
    fn deregister<'a>(
        &'a self,
        service: &'a str,
        endpoint: &'a Endpoint,
    ) -> BoxFuture<'a, Result<(), RegistryError>>;
    /// Short name for logs and metrics (`memory`, `static`, …).
    fn kind(&self) -> &'static str;
}

/// A registry that lives in this process: what it knows is what this process registered.
#[derive(Default)]
pub struct MemoryRegistry {
    services: Mutex<HashMap<String, watch::Sender<EndpointSet>>>,
}

impl MemoryRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    fn update(&self, service: &str, f: impl FnOnce(&mut Vec<Endpoint>)) {
        let mut map = self.services.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = map
            .entry(service.to_owned())
            .or_insert_with(|| watch::channel(EndpointSet::from(Vec::new())).0);
        tx.send_modify(|set| {
            let mut list = set.to_vec();
            f(&mut list);
            *set = list.into();
        });
    }
}

impl Registry for MemoryRegistry {
    fn watch(&self, service: &str) -> watch::Receiver<EndpointSet> {
        let mut map = self.services.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(service.to_owned())
            .or_insert_with(|| watch::channel(EndpointSet::from(Vec::new())).0)
            .subscribe()
    }

    fn register<'a>(
        &'a self,
        service: &'a str,
        endpoint: &'a Endpoint,
    ) -> BoxFuture<'a, Result<(), RegistryError>> {
        self.update(service, |list| {
            if !list.contains(endpoint) {
                list.push(endpoint.clone());
            }
        });
        Box::pin(async { Ok(()) })
    }

    fn deregister<'a>(
        &'a self,
        service: &'a str,
        endpoint: &'a Endpoint,
    ) -> BoxFuture<'a, Result<(), RegistryError>> {
        self.update(service, |list| list.retain(|e| e != endpoint));
        Box::pin(async { Ok(()) })
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

/// Endpoints written in the config file. Registration is a no-op: the file is the truth.
pub struct StaticRegistry {
    services: BTreeMap<String, watch::Sender<EndpointSet>>,
}

impl StaticRegistry {
    pub fn new(endpoints: &BTreeMap<String, Vec<Endpoint>>) -> Self {
        let services = endpoints
            .iter()
            .map(|(name, list)| {
                (
                    name.clone(),
                    watch::channel(EndpointSet::from(list.clone())).0,
                )
            })
            .collect();
        Self { services }
    }
}

impl Registry for StaticRegistry {
    fn watch(&self, service: &str) -> watch::Receiver<EndpointSet> {
        match self.services.get(service) {
            Some(tx) => tx.subscribe(),
            // Unknown names never gain endpoints; the receiver simply stays empty.
            None => watch::channel(EndpointSet::from(Vec::new())).1,
        }
    }

    fn register<'a>(
        &'a self,
        _: &'a str,
        _: &'a Endpoint,
    ) -> BoxFuture<'a, Result<(), RegistryError>> {
        Box::pin(async { Ok(()) })
    }

    fn deregister<'a>(
        &'a self,
        _: &'a str,
        _: &'a Endpoint,
    ) -> BoxFuture<'a, Result<(), RegistryError>> {
        Box::pin(async { Ok(()) })
    }

    fn kind(&self) -> &'static str {
        "static"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_registry_watchers_see_changes() {
        let reg = MemoryRegistry::new();
        let mut rx = reg.watch("gateway");
        assert!(rx.borrow().is_empty());
        let ep: Endpoint = "tcp://127.0.0.1:1".parse().unwrap();
        reg.register("gateway", &ep).await.unwrap();
        rx.changed().await.unwrap();
        assert_eq!(&rx.borrow_and_update()[..], &[ep.clone()][..]);
        reg.deregister("gateway", &ep).await.unwrap();
        rx.changed().await.unwrap();
        assert!(rx.borrow().is_empty());
    }
}
