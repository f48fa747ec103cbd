//! arca-host: "run this config". The one place a process is composed: the [`CATALOG`] of
//! services arca can host, the process-wide pieces they share (registry, event bus, leader
//! leases, telemetry, the debug server) and the supervisor that runs them.
//!
//! The `arca` binary and the test fixture both call [`run`]; a test hosts a whole deployment in
//! its own process with [`start`] (over `mem://`, no child process, no port race). Signals are
//! the caller's: it asks for a stop through the [`Shutdown`] it passes in ([`stop_on_signals`]
//! for a binary's `main`), and turns the [`Outcome`] into an exit code.
//!
//! Main items: [`CATALOG`], [`check`] (everything about a config that can be known before
//! binding), [`start`] / [`Host`], [`run`], [`HostError`].

mod compose;

use std::net::SocketAddr;
use std::sync::Arc;

use arca_config::{Config, RegistryKind};
use arca_runtime::{Entry, Health, Outcome, Shutdown, StartError, Supervisor};

pub use compose::HostError;

/// Every service the `arca` binary can host, in start order for an all-in-one process. A new
/// service is one entry here (and its crate).
pub static CATALOG: [Entry; 8] = [
    Entry {
        name: "proxy",
        // storage-system answers who a credential belongs to.
        dependencies: &["frontend", "storage-system"],
        build: |config| Box::new(arca_proxy::Proxy::new(config)),
        // The TLS certificate and key are read now, so a bad one stops arca before it binds.
        check: arca_proxy::check,
    },
    Entry {
        name: "frontend",
        // The data path streams straight to the provider, so it must be reachable too.
        dependencies: &["gateway", "storage-users"],
        build: |_| Box::new(arca_frontend::Frontend),
        check: Entry::no_check,
    },
    Entry {
        name: "gateway",
        // Previews go to "thumbnails" and queries to "search" too, optional calls (see
        // OPTIONAL_CALLS).
        dependencies: &["storage-users", "storage-system", "sharing"],
        build: |_| Box::new(arca_gateway::Gateway),
        check: Entry::no_check,
    },
    Entry {
        name: "thumbnails",
        // It reads sources from the providers' data path; the gateway hands it the transfer,
        // made as the caller, so it calls no gateway back (no cycle).
        dependencies: &["storage-users"],
        build: |_| Box::new(arca_thumbnails::Thumbnails),
        check: Entry::no_check,
    },
    Entry {
        name: "search",
        // Its crawler reads the spaces from storage-users, and a query asks storage-users and
        // sharing what the caller may read; never the gateway, which calls it (no cycle).
        dependencies: &["storage-users", "sharing"],
        build: |_| Box::new(arca_search::Search),
        check: Entry::no_check,
    },
    Entry {
        name: "storage-users",
        // Callers who do not own a space get what its shares grant them, asked of the sharing
        // service on every such call. No cycle: sharing needs storage-system only.
        dependencies: &["sharing"],
        build: |_| Box::new(arca_storage_users::StorageUsers),
        check: Entry::no_check,
    },
    Entry {
        name: "storage-system",
        dependencies: &[],
        build: |_| Box::new(arca_storage_system::StorageSystem),
        check: Entry::no_check,
    },
    Entry {
        name: "sharing",
        dependencies: &["storage-system"],
        build: |_| Box::new(arca_sharing::Sharing),
        check: Entry::no_check,
    },
];

/// Calls a service makes without depending on the callee, as (caller, callee): the caller
/// starts and is ready without it, and answers what needs it as unavailable while it is
/// away. The gateway's previews and searches: a deployment that hosts no thumbnails or search
/// service (the example configs that list their services) keeps every other API. Deployments
/// that do host one route to it like to a dependency (the chart reads this list as
/// `$optional`).
pub static OPTIONAL_CALLS: [(&str, &str); 2] = [("gateway", "thumbnails"), ("gateway", "search")];

/// Everything about `config` that can be known before anything binds, beyond what the config
/// loader checked: the log filter, `mem://` names, whether every dependency this process does
/// not host can be found, and each hosted service's own [`Entry::check`]. One line naming the
/// key.
pub fn check(config: &Config, catalog: &[Entry]) -> Result<(), String> {
    arca_runtime::telemetry::check_log_level(&config.log.level)?;
    check_endpoints(config, catalog)?;
    let hosted = hosted(config, catalog).map_err(|e| e.to_string())?;
    check_reachability(config, catalog, &hosted)?;
    for entry in &hosted {
        (entry.check)(config)?;
    }
    Ok(())
}

/// The entries of the services `config` says this process hosts, in the configured order.
fn hosted(config: &Config, catalog: &[Entry]) -> Result<Vec<Entry>, HostError> {
    config
        .services
        .iter()
        .map(|name| {
            catalog
                .iter()
                .find(|e| e.name == name)
                .copied()
                .ok_or_else(|| HostError::NotInCatalog(name.clone()))
        })
        .collect()
}

/// An in-process endpoint is found by service name, so `mem://` must name its own service.
fn check_endpoints(config: &Config, catalog: &[Entry]) -> Result<(), String> {
    for entry in catalog {
        let service = entry.name;
        if let Some(arca_transport::Endpoint::Mem(name)) = config.endpoint(service)
            && name != service
        {
            return Err(format!(
                "{service}.endpoint: \"mem://{name}\" must be mem://{service}: in-process services are reached by their own name"
            ));
        }
    }
    Ok(())
}

/// A dependency this process does not host must be findable through the registry; with the
/// in-process registry nothing remote ever is, so that is a configuration error, caught before
/// anything binds.
fn check_reachability(config: &Config, catalog: &[Entry], hosted: &[Entry]) -> Result<(), String> {
    let source = config
        .source
        .as_ref()
        .map_or_else(|| "defaults".to_owned(), |p| p.display().to_string());
    // Identity tokens signed in one process are verified in another: both need the secret.
    // A service only ever called optionally (thumbnails, search) may be left out of a single
    // process (the example configs list the others): that alone is not a second process.
    let optional_only = |name: &str| {
        OPTIONAL_CALLS.iter().any(|(_, callee)| *callee == name)
            && !catalog.iter().any(|e| e.dependencies.contains(&name))
    };
    if config.identity.secret.is_none()
        && catalog
            .iter()
            .any(|e| !config.hosts(e.name) && !optional_only(e.name))
    {
        return Err(format!(
            "identity.secret: required when services run in several processes (set it in every process's config or ARCA_IDENTITY_SECRET) ({source})"
        ));
    }
    for entry in hosted {
        let name = entry.name;
        for dep in entry.dependencies {
            if config.hosts(dep) {
                continue;
            }
            let listed = config.registry.static_endpoints.contains_key(*dep);
            match config.registry.kind {
                // Every process announces itself in the bucket: whatever runs is findable.
                RegistryKind::Nats => {}
                RegistryKind::Dns if config.registry.dns.names.contains_key(*dep) => {}
                RegistryKind::Dns => {
                    return Err(format!(
                        "registry.dns.names.{dep}: missing: {name} depends on {dep}, which this process does not host ({source})"
                    ));
                }
                RegistryKind::Static if listed => {}
                RegistryKind::Static => {
                    return Err(format!(
                        "registry.static.{dep}: missing: {name} depends on {dep}, which this process does not host ({source})"
                    ));
                }
                RegistryKind::Memory => {
                    return Err(format!(
                        "registry.kind: \"memory\" cannot find {dep}, which {name} depends on and this process does not host; use a static, nats or dns registry ({source})"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A started process: its services are starting or serving until [`Host::wait`] returns.
pub struct Host {
    debug: arca_runtime::debug::DebugServer,
    health: Health,
    supervisor: tokio::task::JoinHandle<Result<Outcome, StartError>>,
    telemetry: arca_runtime::telemetry::Telemetry,
}

impl Host {
    /// Where `/healthz`, `/readyz` and `/metrics` answer (`debug.addr`, with the port a `:0`
    /// address got).
    pub fn debug_addr(&self) -> SocketAddr {
        self.debug.addr()
    }

    /// What `/readyz` reports, read in process.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Waits until the services have stopped (after the [`Shutdown`] given to [`start`] was
    /// requested, or a service failed); then flushes telemetry unless the stop was forced, and
    /// stops the debug server.
    pub async fn wait(self) -> Result<Outcome, HostError> {
        let outcome = match self.supervisor.await {
            Ok(result) => result?,
            Err(join) => return Err(HostError::Supervisor(join.to_string())),
        };
        match &outcome {
            Outcome::Clean => tracing::info!("stopped cleanly"),
            Outcome::Failed { service, cause } => {
                tracing::error!(service, %cause, "stopped because a service failed");
            }
            Outcome::TimedOut { stragglers } => {
                tracing::error!(
                    ?stragglers,
                    "shutdown deadline passed with work still running"
                );
            }
            // Skip flushing: the operator asked for an exit now.
            Outcome::Forced => return Ok(outcome),
        }
        self.telemetry.shutdown();
        drop(self.debug);
        Ok(outcome)
    }
}

/// Starts the services `config` names, from `catalog`, with everything they share; returns
/// once the debug server is bound. Call [`check`] first: this only refuses what it cannot build.
pub async fn start(
    config: Config,
    catalog: &[Entry],
    shutdown: Shutdown,
) -> Result<Host, HostError> {
    let telemetry = arca_runtime::telemetry::init(&config)?;
    let entries = hosted(&config, catalog)?;
    let config = Arc::new(config);
    // One cancellation for the whole process, made first so the registry's tasks hang under
    // it too; the supervisor cancels it last.
    let root = tokio_util::sync::CancellationToken::new();
    let shared = compose::Shared::connect(&config, &root).await?;
    let mut supervisor = Supervisor::new(config.clone(), entries, shared.registry).with_root(root);
    if let Some(bus) = shared.bus {
        supervisor = supervisor.with_bus(bus);
    }
    // Without NATS, leases are per process: each process runs its own background jobs.
    if let Some(leases) = shared.leases {
        supervisor = supervisor.with_leases(leases);
    }
    let health = supervisor.health();
    let debug_server = arca_runtime::debug::spawn(
        &config.debug.addr,
        health.clone(),
        Some(telemetry.metrics.clone()),
        Some(supervisor.leases().clone()),
    )?;
    tracing::info!(
        services = %config.services.join(","),
        debug = %format!("http://{}", debug_server.addr()),
        config = %config.source.as_ref().map_or_else(|| "built-in defaults".to_owned(), |p| p.display().to_string()),
        "arca starting"
    );
    if config.hosts("proxy") {
        let scheme = if config.proxy.tls.is_some() {
            "https"
        } else {
            "http"
        };
        tracing::info!("public HTTP on {scheme}://{}", config.proxy.http.addr);
    }
    Ok(Host {
        debug: debug_server,
        health,
        supervisor: tokio::spawn(supervisor.run(shutdown)),
        telemetry,
    })
}

/// For a binary's `main`: the first SIGTERM or SIGINT requests an orderly stop of `shutdown`,
/// the next one forces it. Call it before [`run`], so an early signal is a stop request and
/// not the default action (an exit with nothing drained). Services never see signals, and
/// tests that [`start`] a deployment in process stop it by the [`Shutdown`] alone.
pub fn stop_on_signals(shutdown: Shutdown) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                _ = sigterm.recv() => "SIGTERM",
                _ = sigint.recv() => "SIGINT",
            };
            if shutdown.is_requested() {
                tracing::warn!("{name} again: forcing the stop");
            } else {
                tracing::info!("{name}: shutting down");
            }
            shutdown.request();
        }
    });
    Ok(())
}

/// [`start`], then [`Host::wait`]: runs `config` until `shutdown` is requested or a service
/// fails.
pub async fn run(
    config: Config,
    catalog: &[Entry],
    shutdown: Shutdown,
) -> Result<Outcome, HostError> {
    start(config, catalog, shutdown).await?.wait().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The catalog and the config crate's list of names are the same set, in the same order:
    /// the config refuses a name the catalog cannot build, and nothing is left out.
    #[test]
    fn the_catalog_lists_every_configurable_service() {
        let names: Vec<&str> = CATALOG.iter().map(|e| e.name).collect();
        assert_eq!(names, arca_config::SERVICE_NAMES);
    }

    #[test]
    fn every_dependency_is_in_the_catalog() {
        for entry in &CATALOG {
            for dep in entry.dependencies {
                assert!(
                    CATALOG.iter().any(|e| e.name == *dep),
                    "{} depends on {dep}, which is not in the catalog",
                    entry.name
                );
            }
        }
        for (caller, callee) in OPTIONAL_CALLS {
            assert!(CATALOG.iter().any(|e| e.name == caller), "{caller}");
            assert!(CATALOG.iter().any(|e| e.name == callee), "{callee}");
        }
    }

    /// Leaving out a service only called optionally is still one process (no shared secret
    /// needed); leaving out any other is a split that needs one.
    #[test]
    fn only_optional_services_may_be_left_out_without_a_secret() {
        let config = |services: &str| {
            let mut flags = arca_config::Overrides::default();
            let origin = arca_config::Origin::Flag("test".into());
            flags.push("services", services, origin);
            arca_config::load(None, [], flags)
        };
        let Ok(without_previews) =
            config("proxy,frontend,gateway,storage-users,storage-system,sharing")
        else {
            panic!("a valid config");
        };
        assert_eq!(check_reachability(&without_previews, &CATALOG, &[]), Ok(()));
        let Ok(without_sharing) =
            config("proxy,frontend,gateway,thumbnails,storage-users,storage-system")
        else {
            panic!("a valid config");
        };
        let refused = check_reachability(&without_sharing, &CATALOG, &[]);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("identity.secret")),
            "{refused:?}"
        );
    }
}
