//! arca: the one binary. Parses the command line and config, owns the process's signals, runs
//! the config through `arca_host` (the one boot path, shared with the test fixture), and turns
//! its outcome into the exit code.
//!
//! Exit codes: 0 clean stop, 1 a service failed or shutdown overran its deadline, 2 bad
//! configuration or usage, 130 forced by a second signal.

mod health;
mod memory;
mod search_cli;
mod server_api;
mod spaces_cli;
mod trash_cli;
mod users_cli;

use std::path::PathBuf;
use std::process::ExitCode;

use arca_config::{Config, Origin, Overrides};
use arca_runtime::{Outcome, Shutdown};
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
    /// Run services: all eight by default, or the group named by --services / ARCA_SERVICES.
    Server(ServerArgs),
    /// Ask a running process whether it is ready (its /readyz); exit 0 if so, 1 if not.
    Health {
        /// The process's debug address (default: debug.addr from the config).
        #[arg(long)]
        debug_addr: Option<String>,
    },
    /// Manage the built-in users in storage-system's database directly (no server needed).
    Users(users_cli::UsersArgs),
    /// Undo a mass delete: restore a user's removed items, asking the running server.
    Trash(trash_cli::TrashArgs),
    /// What each space holds: used bytes, its trash and its versions, asking the running
    /// server.
    Spaces(spaces_cli::SpacesArgs),
    /// The search index: rebuild it from the store.
    Search(search_cli::SearchArgs),
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
        Command::Trash(args) => trash_cli::run(cli.config, args),
        Command::Spaces(args) => spaces_cli::run(cli.config, args),
        Command::Search(args) => search_cli::run(cli.config, args),
    }
}

/// The runtime of a one-shot command; on failure the message is printed (prefixed with
/// `what`) and the exit code returned.
pub(crate) fn command_runtime(what: &str) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("{what}: cannot start the async runtime: {e}");
            ExitCode::from(1)
        })
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
    let purge = memory::purge_at_once();
    let code = runtime.block_on(async move {
        let shutdown = Shutdown::new();
        // The process's signals are handled here, at the top, and nowhere else.
        if let Err(e) = arca_host::stop_on_signals(shutdown.clone()) {
            eprintln!("arca: signal handler: {e}");
            return 1;
        }
        let served = match arca_host::start(config, &arca_host::CATALOG, shutdown).await {
            Ok(host) => {
                tokio::spawn(memory::after_start_up(host.health().clone(), purge));
                host.wait().await
            }
            Err(e) => Err(e),
        };
        match served {
            Ok(outcome) => {
                if let Outcome::Failed { service, cause } = &outcome {
                    eprintln!("arca: service {service} failed: {cause}");
                }
                outcome.exit_code()
            }
            Err(e) => {
                tracing::error!("{e}");
                eprintln!("arca: {e}");
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
    arca_host::check(&config, &arca_host::CATALOG)?;
    Ok(config)
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
