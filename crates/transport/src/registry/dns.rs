//! The DNS registry: each service is a `HOST:PORT` whose name resolves to all of its instances
//! (a Kubernetes headless Service, a round-robin record), re-resolved every interval.
//!
//! Registration is a no-op here: the platform decides what the name resolves to (Kubernetes
//! publishes a pod's address once its readiness probe, `/readyz`, passes, and withdraws it when
//! the pod turns not ready at the start of shutdown). A failed or empty resolution keeps the
//! last known set: a DNS hiccup must not take the data plane down. Resolution uses the system
//! resolver through `tokio::net::lookup_host`, so `/etc/hosts` and search domains apply.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{EndpointSet, Registry, RegistryError};
use crate::Endpoint;

/// Names resolved periodically; its tasks stop when it is dropped or the process's root
/// cancellation fires.
pub struct DnsRegistry {
    services: BTreeMap<String, watch::Sender<EndpointSet>>,
    stop: CancellationToken,
}

impl DnsRegistry {
    /// Starts one resolver task per name on the current tokio runtime. `names` maps a service
    /// to a `HOST:PORT`; the tasks hang under `root`, the process's cancellation.
    pub fn new(
        names: &BTreeMap<String, String>,
        interval: Duration,
        root: &CancellationToken,
    ) -> Self {
        let stop = root.child_token();
        let mut services = BTreeMap::new();
        for (service, name) in names {
            let (tx, _) = watch::channel(EndpointSet::from(Vec::new()));
            tokio::spawn(resolve_loop(
                service.clone(),
                name.clone(),
                interval,
                tx.clone(),
                stop.clone(),
            ));
            services.insert(service.clone(), tx);
        }
        Self { services, stop }
    }
}

impl Drop for DnsRegistry {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn resolve_loop(
    service: String,
    name: String,
    interval: Duration,
    tx: watch::Sender<EndpointSet>,
    stop: CancellationToken,
) {
    let mut failing = false;
    loop {
        metrics::counter!("arca_registry_operations_total", "kind" => "dns", "op" => "resolve")
            .increment(1);
        match resolve(&name).await {
            Ok(set) if !set.is_empty() => {
                if failing {
                    tracing::info!(service, name, "DNS resolves again");
                    failing = false;
                }
                tx.send_if_modified(|current| {
                    let changed = **current != *set;
                    if changed {
                        tracing::info!(service, endpoints = set.len(), "DNS endpoints changed");
                        *current = set;
                    }
                    changed
                });
            }
            // An empty answer is treated like a failure: more often a transient DNS state than
            // a deliberate "no instances", and keeping the last set errs on serving.
            result => {
                if !failing {
                    let error = result.map_or_else(|e| e.to_string(), |_| "no addresses".into());
                    tracing::warn!(
                        service,
                        name,
                        error,
                        "DNS resolution failed; keeping the last endpoints"
                    );
                    failing = true;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// Every A/AAAA record of `name` (a `HOST:PORT`), as sorted TCP endpoints.
async fn resolve(name: &str) -> std::io::Result<EndpointSet> {
    let mut list: Vec<Endpoint> = tokio::net::lookup_host(name)
        .await?
        .map(|addr| Endpoint::Tcp(addr.to_string()))
        .collect();
    list.sort();
    list.dedup();
    Ok(list.into())
}

impl Registry for DnsRegistry {
    fn watch(&self, service: &str) -> watch::Receiver<EndpointSet> {
        match self.services.get(service) {
            Some(tx) => tx.subscribe(),
            // Unnamed services never gain endpoints.
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
        "dns"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_resolve_to_every_address_and_failures_keep_the_last_set() {
        let names = BTreeMap::from([
            ("gateway".to_owned(), "localhost:9142".to_owned()),
            ("sharing".to_owned(), "127.0.0.1:9143".to_owned()),
        ]);
        let reg = DnsRegistry::new(&names, Duration::from_millis(50), &CancellationToken::new());
        let mut rx = reg.watch("sharing");
        let set = rx.wait_for(|s| !s.is_empty()).await.unwrap().clone();
        assert_eq!(&set[..], &[Endpoint::Tcp("127.0.0.1:9143".into())][..]);
        let mut rx = reg.watch("gateway");
        let set = rx.wait_for(|s| !s.is_empty()).await.unwrap().clone();
        assert!(
            set.iter()
                .all(|e| matches!(e, Endpoint::Tcp(a) if a.ends_with(":9142"))),
            "{set:?}"
        );
        assert!(reg.watch("storage-users").borrow().is_empty());

        // A name that stops resolving keeps what it had.
        let (tx, rx) = watch::channel(set.clone());
        let stop = CancellationToken::new();
        let task = tokio::spawn(resolve_loop(
            "gateway".into(),
            "no-such-host.invalid:1".into(),
            Duration::from_millis(10),
            tx,
            stop.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(*rx.borrow(), set);
        stop.cancel();
        task.await.unwrap();
    }
}
