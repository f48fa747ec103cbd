//! arca-config owns arca's one configuration: the typed [`Config`], its layered [`load`]
//! (built-in defaults → YAML file → `ARCA_*` environment → flags) and the `arca init` template.
//!
//! Every value is validated here, before any port is bound, and every [`ConfigError`] is one
//! line naming the dotted key, the problem and the [`Origin`] of the offending value.

mod error;
mod keys;
mod load;
mod template;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use arca_transport::Endpoint;

pub use error::{ConfigError, Origin, Problem};
pub use load::{Overrides, load, load_from_process};
pub use template::{generate_secret, init_template};

/// Every service arca knows, in start order for an all-in-one process.
pub const SERVICE_NAMES: [&str; 6] = [
    "proxy",
    "frontend",
    "gateway",
    "storage-users",
    "storage-system",
    "sharing",
];

/// The whole configuration of one `arca` process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The YAML file that was read, if any.
    pub source: Option<PathBuf>,
    pub data_dir: PathBuf,
    /// Services hosted by this process: names from [`SERVICE_NAMES`], no duplicates, never empty.
    pub services: Vec<String>,
    pub log: LogConfig,
    pub tracing: TracingConfig,
    pub debug: DebugConfig,
    pub shutdown: ShutdownConfig,
    pub transport: TransportConfig,
    pub registry: RegistryConfig,
    pub events: EventsConfig,
    pub identity: IdentityConfig,
    pub proxy: ProxyConfig,
    pub frontend: ServiceSection,
    pub gateway: ServiceSection,
    pub storage_users: StorageSection,
    pub storage_system: StorageSection,
    pub sharing: SharingSection,
}

impl Config {
    /// The configured endpoint of a service, by its name in [`SERVICE_NAMES`].
    pub fn endpoint(&self, service: &str) -> Option<&Endpoint> {
        let section = match service {
            "proxy" => return Some(&self.proxy.endpoint),
            "frontend" => &self.frontend,
            "gateway" => &self.gateway,
            "storage-users" => return Some(&self.storage_users.endpoint),
            "storage-system" => return Some(&self.storage_system.endpoint),
            "sharing" => return Some(&self.sharing.endpoint),
            _ => return None,
        };
        Some(&section.endpoint)
    }

    /// Whether this process hosts `service`.
    pub fn hosts(&self, service: &str) -> bool {
        self.services.iter().any(|s| s == service)
    }
}

impl Default for Config {
    /// The built-in defaults, as `load(None, [], Overrides::default())` gives them.
    fn default() -> Self {
        // The defaults are constants checked by `defaults_are_valid`; failing here is a bug in
        // this crate, not bad input.
        load(None, [], Overrides::default()).expect("built-in defaults are valid")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A `tracing_subscriber::EnvFilter` directive, kept as written.
    pub level: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracingConfig {
    pub otlp: OtlpConfig,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpConfig {
    /// `http(s)://HOST:PORT` of an OTLP collector; `None` exports nothing.
    pub endpoint: Option<String>,
    pub service_name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugConfig {
    /// `HOST:PORT` of the process's debug server.
    pub addr: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownConfig {
    pub drain_delay: Duration,
    /// Always greater than zero.
    pub timeout: Duration,
}

/// How calls between services behave (`transport.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    /// `transport.retry.max_buffered_body`: request bodies kept whole for a retry, in bytes
    /// (0: none).
    pub max_buffered_body: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryConfig {
    pub kind: RegistryKind,
    /// YAML key `static`: service name → its endpoints; every name is in [`SERVICE_NAMES`] and
    /// every list is non-empty.
    pub static_endpoints: BTreeMap<String, Vec<Endpoint>>,
    /// Used with [`RegistryKind::Nats`]; read (and validated) whatever the kind.
    pub nats: NatsRegistryConfig,
    /// Used with [`RegistryKind::Dns`]; read (and validated) whatever the kind.
    pub dns: DnsRegistryConfig,
}

/// A NATS JetStream KV bucket as the registry (and the home of leader leases).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsRegistryConfig {
    /// One or more `nats://HOST:PORT` (or `tls://`) server URLs, comma-separated as given.
    pub url: String,
    /// A valid KV bucket name.
    pub bucket: String,
    /// How long an entry lives without a heartbeat; at least 3 s, whole seconds (NATS
    /// per-message TTLs count seconds).
    pub ttl: Duration,
}

/// DNS names as the registry: each resolves to the instances of one service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsRegistryConfig {
    /// Service name → `HOST:PORT`; every name is in [`SERVICE_NAMES`].
    pub names: BTreeMap<String, String>,
    /// Re-resolution period, above zero.
    pub interval: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistryKind {
    Memory,
    Static,
    Nats,
    Dns,
}

/// The event bus (`events`): within one process, or a NATS JetStream stream all share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventsConfig {
    pub kind: EventsKind,
    /// Used with [`EventsKind::Nats`]; read (and validated) whatever the kind.
    pub nats: NatsEventsConfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventsKind {
    Memory,
    Nats,
}

/// A JetStream stream as the event bus, with one durable consumer per consuming service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsEventsConfig {
    /// `nats://HOST:PORT` (comma-separated): `events.nats.url`, else `registry.nats.url` when
    /// the registry is NATS. `None` only while the kind is memory.
    pub url: Option<String>,
    /// A valid stream name (letters, digits, `-`, `_`); also the first token of its subjects.
    pub stream: String,
    /// Above zero.
    pub ack_wait: Duration,
    /// Above zero.
    pub max_deliver: u32,
    /// Above zero: the bound on one publish, retries included.
    pub publish_timeout: Duration,
}

/// Secrets; `Debug` shows only whether each is set.
#[derive(Clone, PartialEq, Eq)]
pub struct IdentityConfig {
    /// Signs the internal identity tokens.
    pub secret: Option<String>,
    pub admin_password: Option<String>,
}

impl fmt::Debug for IdentityConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |s: &Option<String>| s.as_ref().map(|_| "<redacted>");
        f.debug_struct("IdentityConfig")
            .field("secret", &redact(&self.secret))
            .field("admin_password", &redact(&self.admin_password))
            .finish()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    pub endpoint: Endpoint,
    pub http: ProxyHttp,
    pub auth: ProxyAuth,
    /// `None`: plain HTTP.
    pub tls: Option<ProxyTls>,
    pub limits: ProxyLimits,
    pub cors: ProxyCors,
    /// `None`: no Bearer tokens accepted.
    pub oidc: Option<ProxyOidc>,
}

/// The public listener's certificate and key (PEM files); both or neither are set. The files
/// are read when the proxy starts (their contents are checked before anything binds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyTls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What one client may make the proxy hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Request line plus headers, in bytes; above 0.
    pub max_header_bytes: u64,
    /// `None`: unlimited.
    pub max_body_bytes: Option<u64>,
    /// Above 0.
    pub header_timeout: Duration,
    /// Above 0.
    pub idle_timeout: Duration,
}

/// Cross-origin access for browser clients (ownCloud web on another origin).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyCors {
    /// Origins as `scheme://host[:port]`, lowercase, no trailing `/`; empty: no CORS at all.
    pub allowed_origins: Vec<String>,
}

/// An OpenID Connect provider whose Bearer tokens the proxy accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyOidc {
    /// `http(s)://HOST[:PORT][/PATH]`, as the provider writes it in `iss`.
    pub issuer: String,
    pub audience: Option<String>,
    /// The claim naming the arca user.
    pub user_claim: String,
    /// Create unknown users on their first login.
    pub provision: bool,
    /// Bounds on those creations (`proxy.oidc.provisioning`): a burst of first logins
    /// queues here instead of hitting storage-system all at once.
    pub provisioning: WorkLimits,
}

/// Bounds on one kind of work toward a shared dependency: at most `concurrency` at once, and
/// at most `rate` starts per second with bursts of `burst`. All three above zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkLimits {
    pub concurrency: u32,
    pub rate: u32,
    pub burst: u32,
}

/// Login throttling: after `max_failures` failed logins within `window` for one user name or
/// one client address, further attempts are refused with 429 until the window moves on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyAuth {
    /// Whether a user's password is accepted over HTTP Basic; app tokens always are.
    pub basic: bool,
    pub max_failures: u32,
    pub window: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyHttp {
    /// `HOST:PORT` where clients reach arca.
    pub addr: String,
}

/// The part of the config every service has: where it listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSection {
    pub endpoint: Endpoint,
}

/// The sharing service: where it listens and how new shares reach their recipients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharingSection {
    pub endpoint: Endpoint,
    /// New user and group shares appear in recipients' `Shares/` at once (`true`, oCIS's
    /// default) or wait, pending, until the recipient accepts them.
    pub auto_accept: bool,
}

/// A storage service: where it listens, which metadata database it uses, where its blobs live.
#[derive(Clone, PartialEq, Eq)]
pub struct StorageSection {
    pub endpoint: Endpoint,
    /// `postgres://…` or `sqlite://…`; `None` = SQLite under `data_dir/NAME`.
    pub database: Option<String>,
    pub blobs: BlobsConfig,
    /// Quota in bytes given to each personal space when it is created; `None` = unlimited.
    /// Only storage-users has the key (`storage-users.personal_quota`): always `None` for
    /// storage-system, which has no personal spaces.
    pub personal_quota: Option<u64>,
    /// Resumable (TUS) uploads (`storage-users.uploads`): always `None` for storage-system,
    /// which takes no uploads from clients.
    pub uploads: Option<UploadsConfig>,
    /// Connections of the metadata database pool (`database_max_connections`); `None` = the
    /// store's default (8 for SQLite, 16 for PostgreSQL). Above zero.
    pub database_max_connections: Option<u32>,
    /// Bounds on creating personal spaces at first login (`storage-users.provisioning`);
    /// always `None` for storage-system, which has no personal spaces.
    pub provisioning: Option<WorkLimits>,
}

/// Resumable (TUS) uploads of storage-users.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadsConfig {
    /// How long an upload may take from its creation (`Upload-Expires`); an unfinished one is
    /// then removed with its bytes. Always greater than zero.
    pub expiration: Duration,
}

impl fmt::Debug for StorageSection {
    // The URL may carry a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageSection")
            .field("endpoint", &self.endpoint)
            .field("database", &self.database.as_ref().map(|_| "<redacted>"))
            .field("blobs", &self.blobs)
            .field("personal_quota", &self.personal_quota)
            .field("uploads", &self.uploads)
            .field("database_max_connections", &self.database_max_connections)
            .field("provisioning", &self.provisioning)
            .finish()
    }
}

/// Where a storage service keeps file contents (YAML `blobs.kind`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobsConfig {
    /// Files under `data_dir/NAME/blobs`.
    Local,
    S3(S3Config),
}

/// An S3 bucket (AWS or an S3-compatible server). `Debug` does not show the secret key.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// `http(s)://HOST[:PORT]` of an S3-compatible server; `None` = AWS.
    pub endpoint: Option<String>,
    /// A valid S3 bucket name.
    pub bucket: String,
    pub region: String,
    /// Static credentials, both or neither; neither = the AWS environment and credential chain.
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key id only names the credentials (AWS does not treat it as secret); the key is one.
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}
