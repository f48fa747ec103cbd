//! What every service of a process shares, built once from the config: the registry, the
//! event bus and the leader leases (one NATS connection for all three when they name the same
//! servers).

use std::sync::Arc;

use arca_config::{Config, EventsKind, RegistryKind};
use arca_runtime::Leases;
use arca_runtime::events::{EventBus, EventError, NatsBus, NatsBusSettings};
use tokio_util::sync::CancellationToken;

use arca_transport::{
    DnsRegistry, MemoryRegistry, NatsConnection, NatsKv, NatsRegistry, NatsSettings, Registry,
    StaticRegistry,
};

/// Why a process could not be started; the binary prints it and exits 1.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("telemetry: {0}")]
    Telemetry(#[from] arca_runtime::telemetry::TelemetryError),
    #[error("{0}")]
    Debug(#[from] arca_runtime::debug::DebugError),
    #[error("registry.nats.url: {0}")]
    Registry(String),
    #[error("events.nats.url: {0}")]
    Events(#[from] EventError),
    #[error("{0}")]
    Start(#[from] arca_runtime::StartError),
    #[error("service {0} is not one this binary can host")]
    NotInCatalog(String),
    #[error("the supervisor task ended abnormally: {0}")]
    Supervisor(String),
}

pub(crate) struct Shared {
    pub registry: Arc<dyn Registry>,
    /// `None`: the supervisor's in-memory bus.
    pub bus: Option<Arc<dyn EventBus>>,
    /// `None`: leases in memory, per process.
    pub leases: Option<Leases>,
}

impl Shared {
    /// `root` is the process's cancellation: the registry's background tasks hang under it.
    pub async fn connect(config: &Config, root: &CancellationToken) -> Result<Self, HostError> {
        let mut leases = None;
        let mut nats_connection = None;
        let registry: Arc<dyn Registry> = match config.registry.kind {
            RegistryKind::Memory => Arc::new(MemoryRegistry::new()),
            RegistryKind::Static => {
                Arc::new(StaticRegistry::new(&config.registry.static_endpoints))
            }
            RegistryKind::Nats => {
                let nats = &config.registry.nats;
                // Connects in the background: a NATS outage at start delays readiness only.
                let connection = NatsConnection::connect(&nats.url)
                    .await
                    .map_err(|e| HostError::Registry(e.to_string()))?;
                let kv = NatsKv::on(
                    &connection,
                    &NatsSettings {
                        url: nats.url.clone(),
                        bucket: nats.bucket.clone(),
                        ttl: nats.ttl,
                    },
                );
                nats_connection = Some(connection);
                leases = Some(Leases::nats(kv.clone()));
                Arc::new(NatsRegistry::new(kv, root))
            }
            RegistryKind::Dns => Arc::new(DnsRegistry::new(
                &config.registry.dns.names,
                config.registry.dns.interval,
                root,
            )),
        };
        let bus = event_bus(config, nats_connection.as_ref()).await?;
        Ok(Self {
            registry,
            bus,
            leases,
        })
    }
}

/// The JetStream stream every process shares as the event bus, if the config says so.
/// `registry` is the registry's NATS connection, if it has one: the bus shares it when both
/// name the same servers.
async fn event_bus(
    config: &Config,
    registry: Option<&NatsConnection>,
) -> Result<Option<Arc<dyn EventBus>>, HostError> {
    let events = &config.events;
    Ok(Some(match (events.kind, &events.nats.url) {
        (EventsKind::Nats, Some(url)) => {
            let settings = NatsBusSettings {
                url: url.clone(),
                stream: events.nats.stream.clone(),
                ack_wait: events.nats.ack_wait,
                max_deliver: events.nats.max_deliver,
                publish_timeout: events.nats.publish_timeout,
            };
            match registry {
                Some(connection) if *url == config.registry.nats.url => {
                    NatsBus::on(connection, settings)
                }
                // Connects in the background like the registry: a NATS outage at start makes
                // publishes fail after events.nats.publish_timeout, it does not stop the
                // process.
                _ => NatsBus::connect(settings).await?,
            }
        }
        // The config refuses kind nats without a URL; memory it is otherwise.
        _ => return Ok(None),
    }))
}
