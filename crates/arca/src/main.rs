//! arca: the one binary. Parses the command line and config, composes the services this
//! process hosts, hands them to the supervisor, and turns its outcome into the exit code.
//!
//! Exit codes: 0 clean stop, 1 a service failed or shutdown overran its deadline, 2 bad
//! configuration or usage, 130 forced by a second signal.

mod health;
mod users_cli;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use arca_config::{Config, EventsKind, Origin, Overrides, RegistryKind};
use arca_runtime::Leases;
use arca_runtime::events::{EventBus, MemoryBus, NatsBus, NatsBusSettings};
use arca_runtime::{Service, Supervisor};
use arca_transport::{
    DnsRegistry, MemoryRegistry, NatsConnection, NatsKv, NatsRegistry, NatsSettings, Registry,
    StaticRegistry,
};
use clap::{Args, Parser, Subcommand};

/// mimalloc instead of glibc malloc: a WebDAV listing allocates a few dozen small strings per
/// node and frees many of them on another worker thread, where glibc's arenas spent a third of
/// a PROPFIND's CPU (measured with perf; `make bench` shows the difference).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "arca",
    version,
    about = "arca: file sync and share, one binary from laptop to cluster"
)]
struct Cli {
    /// YAML config file; without one, built-in defaults (embedded stores, all services).
    #[arg(long, global = true, env = "ARCA_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run services: all six by default, or the group named by --services / ARCA_SERVICES.
    Server(ServerArgs),
    /// Ask a running process whether it is ready (its /readyz); exit 0 if so, 1 if not.
    Health {
        /// The process's debug address (default: debug.addr from the config).
        #[arg(long)]
        debug_addr: Option<String>,
    },
    /// Manage the built-in users in storage-system's database directly (no server needed).
    Users(users_cli::UsersArgs),
    /// Write a commented config file with freshly generated secrets.
    Init {
        /// Overwrite the file if it exists.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Args, Default)]
struct ServerArgs {
    /// Comma-separated services to host: proxy, frontend, gateway, storage-users,
    /// storage-system, sharing.
    #[arg(long)]
    services: Option<String>,
    /// Where embedded stores keep their data (data_dir).
    #[arg(long)]
    data_dir: Option<String>,
    /// Address of this process's debug server: /healthz, /readyz, /metrics (debug.addr).
    #[arg(long)]
    debug_addr: Option<String>,
    /// The public HTTP address (proxy.http.addr).
    #[arg(long)]
    proxy_http_addr: Option<String>,
    /// Log format: pretty or json (log.format).
    #[arg(long)]
    log_format: Option<String>,
    /// Any other setting, as a dotted key: --set shutdown.timeout=10s (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

fn main() -> ExitCode {
    // One rustls crypto provider for the whole process, before anything builds a TLS config
    // (the NATS client, S3): with two compiled in, rustls would panic instead of choosing.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    match cli.command {
        Command::Server(args) => server(cli.config, args),
        Command::Health { debug_addr } => health::run(cli.config, debug_addr),
        Command::Init { force } => init(cli.config, force),
        Command::Users(args) => users_cli::run(cli.config, args),
    }
}

fn server(file: Option<PathBuf>, args: ServerArgs) -> ExitCode {
    let config = match load_config(file.as_deref(), &args) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("config error: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("arca: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async move {
        match serve(config).await {
            Ok(code) => code,
            Err(e) => {
                tracing::error!("{e:#}");
                eprintln!("arca: {e:#}");
                1
            }
        }
    });
    // Exit now: the outcome is final, and waiting for idle connection tasks to notice the
    // runtime going away would only delay the exit. Log lines still waiting go out first.
    arca_runtime::telemetry::flush_logs();
    std::process::exit(code)
}

fn load_config(file: Option<&std::path::Path>, args: &ServerArgs) -> Result<Config, String> {
    let mut flags = Overrides::default();
    let named = [
        ("services", "--services", &args.services),
        ("data_dir", "--data-dir", &args.data_dir),
        ("debug.addr", "--debug-addr", &args.debug_addr),
        (
            "proxy.http.addr",
            "--proxy-http-addr",
            &args.proxy_http_addr,
        ),
        ("log.format", "--log-format", &args.log_format),
    ];
    for (key, flag, value) in named {
        if let Some(v) = value {
            flags.push(key, v.clone(), Origin::Flag(flag.into()));
        }
    }
    for assignment in &args.set {
        flags.push_set(assignment).map_err(|e| e.to_string())?;
    }
    let config = arca_config::load_from_process(file, flags).map_err(|e| e.to_string())?;
    arca_runtime::telemetry::check_log_level(&config.log.level)?;
    check_endpoints(&config)?;
    check_reachability(&config)?;
    // The TLS certificate and key are read now, so a bad one stops arca before it binds.
    arca_proxy::check(&config)?;
    Ok(config)
}

/// An in-process endpoint is found by service name, so `mem://` must name its own service.
fn check_endpoints(config: &Config) -> Result<(), String> {
    for service in arca_config::SERVICE_NAMES {
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
fn check_reachability(config: &Config) -> Result<(), String> {
    let source = config
        .source
        .as_ref()
        .map_or_else(|| "defaults".to_owned(), |p| p.display().to_string());
    // Identity tokens signed in one process are verified in another: both need the secret.
    if config.identity.secret.is_none()
        && arca_config::SERVICE_NAMES.iter().any(|s| !config.hosts(s))
    {
        return Err(format!(
            "identity.secret: required when services run in several processes (set it in every process's config or ARCA_IDENTITY_SECRET) ({source})"
        ));
    }
    // Only the dependency lists are asked for here: no bus is connected to.
    let bus: Arc<dyn EventBus> = MemoryBus::new(1);
    for name in &config.services {
        for dep in compose(name, config, &bus).dependencies() {
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

/// The one table of what this binary can host.
fn compose(name: &str, config: &Config, bus: &Arc<dyn EventBus>) -> Box<dyn Service> {
    match name {
        "proxy" => Box::new(arca_proxy::Proxy::new(config)),
        "frontend" => Box::new(arca_frontend::Frontend),
        "gateway" => Box::new(arca_gateway::Gateway),
        "storage-users" => Box::new(arca_storage_users::StorageUsers),
        "storage-system" => Box::new(arca_storage_system::StorageSystem),
        // The config crate accepts only the six names; this is the sixth.
        _ => Box::new(arca_sharing::Sharing::new(bus.clone())),
    }
}

/// The process's one event bus: in memory, or the JetStream stream every process shares.
/// `registry` is the registry's NATS connection, if it has one: the bus shares it when both
/// name the same servers.
async fn event_bus(
    config: &Config,
    registry: Option<&NatsConnection>,
) -> anyhow::Result<Arc<dyn EventBus>> {
    let events = &config.events;
    Ok(match (events.kind, &events.nats.url) {
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
                _ => NatsBus::connect(settings)
                    .await
                    .context("events.nats.url")?,
            }
        }
        // The config refuses kind nats without a URL; memory it is otherwise.
        _ => MemoryBus::new(EVENT_BUFFER),
    })
}

/// Events kept for a listener that falls behind on the in-memory bus.
const EVENT_BUFFER: usize = 1024;

async fn serve(config: Config) -> anyhow::Result<i32> {
    let telemetry = arca_runtime::telemetry::init(&config).context("telemetry")?;
    let config = Arc::new(config);
    let mut leases = None;
    let mut nats_connection = None;
    let registry: Arc<dyn Registry> = match config.registry.kind {
        RegistryKind::Memory => Arc::new(MemoryRegistry::new()),
        RegistryKind::Static => Arc::new(StaticRegistry::new(&config.registry.static_endpoints)),
        RegistryKind::Nats => {
            let nats = &config.registry.nats;
            // Connects in the background: a NATS outage at start delays readiness only.
            let connection = NatsConnection::connect(&nats.url)
                .await
                .context("registry.nats.url")?;
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
            Arc::new(NatsRegistry::new(kv))
        }
        RegistryKind::Dns => Arc::new(DnsRegistry::new(
            &config.registry.dns.names,
            config.registry.dns.interval,
        )),
    };
    let bus = event_bus(&config, nats_connection.as_ref()).await?;
    let services = config
        .services
        .iter()
        .map(|name| compose(name, &config, &bus))
        .collect();
    let mut supervisor = Supervisor::new(config.clone(), services, registry);
    // Without NATS, leases are per process: each process runs its own background jobs.
    if let Some(leases) = leases {
        supervisor = supervisor.with_leases(leases);
    }
    let debug_addr = arca_runtime::debug::spawn(
        &config.debug.addr,
        supervisor.health(),
        Some(telemetry.metrics.clone()),
    )?;
    tracing::info!(
        services = %config.services.join(","),
        debug = %format!("http://{debug_addr}"),
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
    let outcome = supervisor.run().await?;
    let code = outcome.exit_code();
    match &outcome {
        arca_runtime::Outcome::Clean => tracing::info!("stopped cleanly"),
        arca_runtime::Outcome::Failed { service, cause } => {
            tracing::error!(service, %cause, "stopped because a service failed");
            eprintln!("arca: service {service} failed: {cause}");
        }
        arca_runtime::Outcome::TimedOut { stragglers } => {
            tracing::error!(
                ?stragglers,
                "shutdown deadline passed with work still running"
            );
        }
        // Skip flushing: the operator asked for an exit now.
        arca_runtime::Outcome::Forced => return Ok(code),
    }
    telemetry.shutdown();
    Ok(code)
}

fn init(file: Option<PathBuf>, force: bool) -> ExitCode {
    let path = file.unwrap_or_else(|| PathBuf::from("arca.yaml"));
    if path.exists() && !force {
        eprintln!(
            "arca init: {} exists; pass --force to overwrite it",
            path.display()
        );
        return ExitCode::from(2);
    }
    let password = arca_config::generate_secret(12);
    let text = arca_config::init_template(&arca_config::generate_secret(32), &password);
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        eprintln!("arca init: {}: {e}", parent.display());
        return ExitCode::from(1);
    }
    if let Err(e) = write_private(&path, text.as_bytes()) {
        eprintln!("arca init: {}: {e}", path.display());
        return ExitCode::from(1);
    }
    println!("wrote {} (mode 0600)", path.display());
    println!("admin password: {password}");
    println!("start with: arca server --config {}", path.display());
    ExitCode::SUCCESS
}

/// The file holds secrets: create it readable by its owner only.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // `mode` applies only when the file is created; an overwritten one is narrowed here.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)?;
    f.sync_all()
}
