//! arca-config owns arca's one configuration: the typed [`Config`], its layered [`load`]
//! (built-in defaults → YAML file → `ARCA_*` environment → flags) and the `arca init` template.
//!
//! Every value is validated here, before any port is bound, and every [`ConfigError`] is one
//! line naming the dotted key, the problem and the [`Origin`] of the offending value.
//!
//! Each key is declared once, in a `section!` below: its field (name and type), default,
//! environment variable, reader (the check of its value) and doc, which is also its line in
//! the `arca init` template. A new plain key is one line there. Values made of several keys
//! (the proxy's TLS pair and OIDC provider, a storage service's section and blobs) are
//! hand-written `Part`s in load.rs, their keys still listed once beside their reader.

mod error;
mod keys;
mod load;
mod template;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use arca_transport::Endpoint;

use crate::keys::section;
use crate::load::Field;

pub use error::{ConfigError, Origin, Problem};
pub use load::{Overrides, load, load_from_process};
pub use template::{generate_secret, init_template};

/// Every service that has a section in this config, in start order for an all-in-one process,
/// with where its endpoint is configured: the one list in this crate. The catalog in arca-host
/// (which builds the services and names their dependencies) lists the same names in the same
/// order; its test `the_catalog_lists_every_configurable_service` holds the two together, since
/// this crate cannot depend on the services it configures.
const SERVICES: [(&str, EndpointOf); 8] = [
    ("proxy", |c| &c.proxy.endpoint),
    ("frontend", |c| &c.frontend.endpoint),
    ("gateway", |c| &c.gateway.endpoint),
    ("thumbnails", |c| &c.thumbnails.endpoint),
    ("search", |c| &c.search.endpoint),
    ("storage-users", |c| &c.storage_users.endpoint),
    ("storage-system", |c| &c.storage_system.endpoint),
    ("sharing", |c| &c.sharing.endpoint),
];

/// Where in the config a service's endpoint is.
type EndpointOf = fn(&Config) -> &Endpoint;

/// The names of [`SERVICES`], in their order.
pub const SERVICE_NAMES: [&str; SERVICES.len()] = {
    let mut names = [""; SERVICES.len()];
    let mut i = 0;
    while i < SERVICES.len() {
        names[i] = SERVICES[i].0;
        i += 1;
    }
    names
};

section! {
    /// The whole configuration of one `arca` process.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Config check(load::config_rules) {
        /// The YAML file that was read, if any.
        source: Option<PathBuf> = none(None),
        /// Directory where services keep their files and databases.
        data_dir: PathBuf = key("./data", Field::path, env "ARCA_DATA_DIR"),
        /// Services this process hosts (a comma list in env and flags); others are found
        /// through the registry.
        services: Vec<String> = key(SERVICE_NAMES, load::services, env "ARCA_SERVICES"),
        log: LogConfig = part(LogConfig::PART),
        tracing: TracingConfig = part(TracingConfig::PART),
        debug: DebugConfig = part(DebugConfig::PART),
        shutdown: ShutdownConfig = part(ShutdownConfig::PART),
        transport: TransportConfig = part(load::TRANSPORT),
        registry: RegistryConfig = part(RegistryConfig::PART),
        events: EventsConfig = part(EventsConfig::PART),
        identity: IdentityConfig = part(IdentityConfig::PART),
        proxy: ProxyConfig = part(ProxyConfig::PART),
        frontend: FrontendSection = part(FrontendSection::PART),
        gateway: GatewaySection = part(GatewaySection::PART),
        storage_users as "storage-users": StorageSection = part(load::STORAGE_USERS),
        storage_system as "storage-system": StorageSection = part(load::STORAGE_SYSTEM),
        sharing: SharingSection = part(SharingSection::PART),
        thumbnails: ThumbnailsSection = part(ThumbnailsSection::PART),
        search: SearchSection = part(SearchSection::PART),
    }
}

impl Config {
    /// The configured endpoint of a service, by its name in [`SERVICE_NAMES`].
    pub fn endpoint(&self, service: &str) -> Option<&Endpoint> {
        SERVICES
            .iter()
            .find(|(name, _)| *name == service)
            .map(|(_, endpoint)| endpoint(self))
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

section! {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct LogConfig {
        /// pretty for people at a terminal, json for log collectors.
        format: LogFormat = key("pretty", |f: &Field| {
            f.choice("pretty, json", |s| match s {
                "pretty" => Some(LogFormat::Pretty),
                "json" => Some(LogFormat::Json),
                _ => None,
            })
        }, env "ARCA_LOG_FORMAT"),
        /// A tracing filter, e.g. info or arca_gateway=debug,info.
        level: String = key("info", Field::text, env "ARCA_LOG_LEVEL"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

section! {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct TracingConfig {
        otlp: OtlpConfig = part(OtlpConfig::PART),
    }
}

section! {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct OtlpConfig {
        /// OTLP collector as http(s)://HOST:PORT; empty exports no traces.
        endpoint: Option<String> = key(unset, Field::optional_url, env "ARCA_TRACING_OTLP_ENDPOINT"),
        /// Service name attached to exported traces.
        service_name: String = key("arca", Field::text),
    }
}

section! {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct DebugConfig {
        /// HOST:PORT of this process's debug server: health, readiness, metrics.
        addr: String = key("127.0.0.1:9205", Field::host_port, env "ARCA_DEBUG_ADDR"),
    }
}

section! {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ShutdownConfig {
        /// Wait between turning not-ready and stopping, so load balancers stop sending work
        /// first.
        drain_delay: Duration = key("0s", Field::duration, env "ARCA_SHUTDOWN_DRAIN_DELAY"),
        /// Deadline for a clean stop; services still running after it are aborted.
        timeout: Duration = key("30s", Field::positive_duration, env "ARCA_SHUTDOWN_TIMEOUT"),
    }
}

/// How calls between services behave (`transport.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    /// `transport.retry.max_buffered_body`: request bodies kept whole for a retry, in bytes
    /// (0: none).
    pub max_buffered_body: u64,
}

section! {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct RegistryConfig {
        /// How services find each other: memory (this process only), static (the map below),
        /// nats (a JetStream KV bucket) or dns (names below).
        kind: RegistryKind = key("memory", |f: &Field| {
            f.choice("memory, static, nats, dns", |s| match s {
                "memory" => Some(RegistryKind::Memory),
                "static" => Some(RegistryKind::Static),
                "nats" => Some(RegistryKind::Nats),
                "dns" => Some(RegistryKind::Dns),
                _ => None,
            })
        }),
        /// With kind static: service name -> endpoints, e.g. {gateway: [tcp://10.0.0.2:9142]}.
        static_endpoints as "static": BTreeMap<String, Vec<Endpoint>> = key({}, load::static_endpoints),
        nats: NatsRegistryConfig = part(NatsRegistryConfig::PART),
        dns: DnsRegistryConfig = part(DnsRegistryConfig::PART),
    }
}

section! {
    /// A NATS JetStream KV bucket as the registry (and the home of leader leases); read (and
    /// validated) whatever the kind.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct NatsRegistryConfig {
        /// With kind nats: the NATS server(s), nats://HOST:PORT, comma-separated for a cluster;
        /// also holds the leader leases.
        url: String = key("nats://127.0.0.1:4222", load::nats_urls, env "ARCA_REGISTRY_NATS_URL"),
        /// With kind nats: the JetStream KV bucket of registrations and leases (created if
        /// missing).
        bucket: String = key("arca-registry", load::kv_bucket),
        /// With kind nats: how long an entry outlives its last heartbeat (one every ttl/3); at
        /// least 3s.
        ttl: Duration = key("10s", load::nats_ttl),
    }
}

section! {
    /// DNS names as the registry: each resolves to the instances of one service; read (and
    /// validated) whatever the kind.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct DnsRegistryConfig {
        /// With kind dns: service name -> HOST:PORT whose A/AAAA records are its instances,
        /// e.g. {gateway: arca-gateway.ns.svc:9142}.
        names: BTreeMap<String, String> = key({}, load::dns_names),
        /// With kind dns: how often the names are resolved again.
        interval: Duration = key("5s", Field::positive_duration),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistryKind {
    Memory,
    Static,
    Nats,
    Dns,
}

section! {
    /// The event bus (`events`): within one process, or a NATS JetStream stream all share.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct EventsConfig {
        /// The event bus: memory (within this process) or nats (a JetStream stream every
        /// process shares; each consuming service handles each event once, however many
        /// replicas it runs).
        kind: EventsKind = key("memory", |f: &Field| {
            f.choice("memory, nats", |s| match s {
                "memory" => Some(EventsKind::Memory),
                "nats" => Some(EventsKind::Nats),
                _ => None,
            })
        }, env "ARCA_EVENTS_KIND"),
        nats: NatsEventsConfig = part(NatsEventsConfig::PART),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventsKind {
    Memory,
    Nats,
}

section! {
    /// A JetStream stream as the event bus, with one durable consumer per consuming service;
    /// read (and validated) whatever the kind.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct NatsEventsConfig {
        /// With kind nats: the NATS server(s), nats://HOST:PORT, comma-separated; unset =
        /// registry.nats.url when registry.kind is nats, else required.
        url: Option<String> = key(unset, load::optional_nats_urls, env "ARCA_EVENTS_NATS_URL"),
        /// With kind nats: the JetStream stream holding the events (created if missing;
        /// subjects STREAM.KIND).
        stream: String = key("arca-events", load::stream_name),
        /// With kind nats: a delivery its handler has not acknowledged within this time goes to
        /// another replica (or the same one) again.
        ack_wait: Duration = key("30s", Field::positive_duration),
        /// With kind nats: deliveries of one event to one consuming service before it is given
        /// up (and logged by nobody).
        max_deliver: u32 = key("10", Field::positive_integer),
        /// With kind nats: how long a publish may retry until the stream acknowledges it; then
        /// the publisher gets an error.
        publish_timeout: Duration = key("2s", Field::positive_duration),
    }
}

section! {
    /// Secrets; `Debug` shows only whether each is set.
    #[derive(Clone, PartialEq, Eq)]
    pub struct IdentityConfig {
        /// Signs the identity tokens services pass to each other; the same in every process.
        secret: Option<String> = key(unset, Field::optional_text, env "ARCA_IDENTITY_SECRET"),
        /// Password of the initial admin user.
        admin_password: Option<String> = key(unset, Field::optional_text, env "ARCA_ADMIN_PASSWORD"),
    }
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

section! {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ProxyConfig {
        /// Where the proxy's internal API listens: mem://NAME, unix:///PATH or tcp://HOST:PORT.
        endpoint: Endpoint = key("mem://proxy", Field::endpoint),
        http: ProxyHttp = part(ProxyHttp::PART),
        auth: ProxyAuth = part(ProxyAuth::PART),
        /// `None`: plain HTTP.
        tls: Option<ProxyTls> = part(load::PROXY_TLS),
        limits: ProxyLimits = part(ProxyLimits::PART),
        cors: ProxyCors = part(ProxyCors::PART),
        /// `None`: no Bearer tokens accepted.
        oidc: Option<ProxyOidc> = part(load::PROXY_OIDC),
    }
}

section! {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ProxyHttp {
        /// HOST:PORT where clients reach arca over HTTP.
        addr: String = key("127.0.0.1:9200", Field::host_port, env "ARCA_PROXY_HTTP_ADDR"),
    }
}

section! {
    /// Login throttling: after `max_failures` failed logins within `window` for one user name
    /// or one client address, further attempts are refused with 429 until the window moves on.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ProxyAuth {
        /// HTTP Basic with a user's password. false: only app tokens are taken over Basic (sync
        /// clients keep working); people log in through OIDC.
        basic: bool = key("true", Field::boolean, env "ARCA_PROXY_AUTH_BASIC"),
        /// Failed logins per user and per client address within proxy.auth.window before 429.
        max_failures: u32 = key("10", Field::positive_integer),
        /// The sliding window failed logins are counted in.
        window: Duration = key("60s", Field::duration),
        /// How long a web app login lasts (its session cookie and the server-side session
        /// behind it); logging out ends it sooner.
        session_ttl: Duration = key("12h", Field::positive_duration),
    }
}

/// The public listener's certificate and key (PEM files); both or neither are set. The files
/// are read when the proxy starts (their contents are checked before anything binds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyTls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

section! {
    /// What one client may make the proxy hold.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ProxyLimits {
        /// Largest request line plus headers a client may send; larger gets 431.
        max_header_bytes: u64 = key("64KiB", load::max_header_bytes),
        /// Largest request body (e.g. 10GiB); larger gets 413. 0 = unlimited (sync clients
        /// upload big files).
        max_body_bytes: Option<u64> = key("0", Field::optional_size),
        /// A client must finish the TLS handshake and each request's headers within this time
        /// (slowloris).
        header_timeout: Duration = key("20s", Field::positive_duration),
        /// A client connection that moves no byte either way for this long is closed.
        idle_timeout: Duration = key("5m", Field::positive_duration),
    }
}

section! {
    /// Cross-origin access for browser clients (ownCloud web on another origin).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ProxyCors {
        /// Browser origins (https://HOST[:PORT]) allowed to call arca cross-origin; empty = no
        /// CORS headers at all.
        allowed_origins: Vec<String> = key([], load::origins, env "ARCA_PROXY_CORS_ALLOWED_ORIGINS"),
    }
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
    /// The web app's "Log in with …", when a client id is set.
    pub web: Option<OidcWebLogin>,
}

/// The web app's login through the provider (`proxy.oidc.client_id` and the keys with it).
#[derive(Clone, PartialEq, Eq)]
pub struct OidcWebLogin {
    pub client_id: String,
    pub client_secret: Option<String>,
    pub provider_name: String,
    pub redirect_uri: Option<String>,
    pub scopes: String,
}

impl std::fmt::Debug for OidcWebLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcWebLogin")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("provider_name", &self.provider_name)
            .field("redirect_uri", &self.redirect_uri)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// Bounds on one kind of work toward a shared dependency: at most `concurrency` at once, and
/// at most `rate` starts per second with bursts of `burst`. All three above zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkLimits {
    pub concurrency: u32,
    pub rate: u32,
    pub burst: u32,
}

section! {
    /// The frontend service.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct FrontendSection {
        /// Where the frontend service listens.
        endpoint: Endpoint = key("mem://frontend", Field::endpoint),
        archive: ArchiveConfig = part(ArchiveConfig::PART),
    }
}

section! {
    /// Folders and selections downloaded as one ZIP (`/archiver`, a public link's
    /// `/s/{token}/archive`): streamed as it is made, refused up front past these bounds.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ArchiveConfig {
        /// At most this many bytes of file contents (0: no bound): 4GiB, 500MB or bytes.
        max_size: u64 = key("4GiB", Field::size_or_zero),
        /// At most this many files and folders (0: no bound).
        max_files: u32 = key("10000", Field::count_or_zero),
    }
}

section! {
    /// The gateway service.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct GatewaySection {
        /// Where the gateway service listens.
        endpoint: Endpoint = key("mem://gateway", Field::endpoint),
    }
}

section! {
    /// The sharing service: where it listens and how new shares reach their recipients.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SharingSection {
        /// Where the sharing service listens.
        endpoint: Endpoint = key("mem://sharing", Field::endpoint),
        /// New user and group shares show in the recipient's Shares/ at once; false: pending
        /// until accepted.
        auto_accept: bool = key("true", Field::boolean, env "ARCA_SHARING_AUTO_ACCEPT"),
    }
}

section! {
    /// The thumbnails service: previews of images and text files (`?preview=1` on a file
    /// URL), rendered on a bounded pool of workers and kept on disk under `data_dir`.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ThumbnailsSection {
        /// Where the thumbnails service listens.
        endpoint: Endpoint = key("mem://thumbnails", Field::endpoint),
        /// Previews rendered at once (each takes a core while it decodes); 0 = one per core.
        workers: u32 = key("0", Field::count_or_zero, env "ARCA_THUMBNAILS_WORKERS"),
        /// The sizes previews are made in, WIDTHxHEIGHT: a request is snapped up to the
        /// smallest that holds it (oCIS's THUMBNAILS_RESOLUTIONS).
        resolutions: Vec<(u32, u32)> = key(THUMBNAIL_RESOLUTIONS, load::resolutions, env "ARCA_THUMBNAILS_RESOLUTIONS"),
        /// Sources larger than this get no preview (404), and no more of one is ever read:
        /// 50MB, 1GiB or bytes.
        max_source_size: u64 = key("50MB", load::positive_size),
        /// Images with more pixels than this get no preview (404); their headers are read,
        /// their pixels never decoded (decompression bombs).
        max_source_pixels: u64 = key("50000000", load::positive_u64),
        /// How long a request waits for its preview to be made; after that it is answered
        /// 425 with Retry-After while the render goes on, so the retry finds it made.
        render_wait: Duration = key("3s", Field::positive_duration),
        /// Disk the kept previews may fill (under data_dir/thumbnails); the least recently
        /// used go first: 1GiB, 500MB or bytes.
        cache_size: u64 = key("1GiB", load::positive_size),
    }
}

section! {
    /// The search service: names and text of files in an index (on disk under `data_dir`, or
    /// in PostgreSQL shared by every instance), fed by crawling the spaces (only folders whose
    /// etag changed: a space at once when storage-users hints that it changed, every space
    /// each `interval`), queried with oCIS's KQL. `Debug` shows only whether `database` is
    /// set (its URL may hold a password).
    #[derive(Clone, PartialEq, Eq)]
    pub struct SearchSection {
        /// Where the search service listens.
        endpoint: Endpoint = key("mem://search", Field::endpoint),
        /// Where the index lives. Unset: an SQLite file under data_dir/search, each instance
        /// its own, each crawling the spaces itself. A postgres:// URL: tables in the schema
        /// arca_search of that database (the pg_trgm extension is created if missing), one
        /// index for every search instance; one of them crawls, under the leader lease
        /// search/crawl (run several only with leases every instance shares: registry.kind
        /// nats), and all answer queries from it.
        database: Option<String> = key(unset, load::optional_postgres_url, env "ARCA_SEARCH_DATABASE"),
        /// How often the crawler looks at every space (one ListSpaces; a space whose root etag
        /// is unchanged costs nothing more). Changes are seen sooner through storage-users'
        /// hints; this round catches what a lost hint missed.
        interval: Duration = key("10s", Field::positive_duration, env "ARCA_SEARCH_INTERVAL"),
        /// Text-like files (text, markdown, code) up to this size have their content indexed;
        /// larger ones only their name: 1MiB, 500KB or bytes.
        max_content_bytes: u64 = key("1MiB", load::positive_size),
    }
}

impl fmt::Debug for SearchSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SearchSection")
            .field("endpoint", &self.endpoint)
            .field("database", &self.database.as_ref().map(|_| "<redacted>"))
            .field("interval", &self.interval)
            .field("max_content_bytes", &self.max_content_bytes)
            .finish()
    }
}

/// oCIS's default preview sizes (THUMBNAILS_RESOLUTIONS).
const THUMBNAIL_RESOLUTIONS: [&str; 10] = [
    "16x16",
    "32x32",
    "64x64",
    "128x128",
    "1080x1920",
    "1920x1080",
    "2160x3840",
    "3840x2160",
    "4320x7680",
    "7680x4320",
];

/// A storage service: where it listens, which metadata database it uses, where storage-users'
/// blobs live.
#[derive(Clone, PartialEq, Eq)]
pub struct StorageSection {
    pub endpoint: Endpoint,
    /// `postgres://…` or `sqlite://…`; `None` = SQLite under `data_dir/NAME`.
    pub database: Option<String>,
    /// Where file contents live (`storage-users.blobs`): always `Some` for storage-users, and
    /// `None` for storage-system, which stores no file contents.
    pub blobs: Option<BlobsConfig>,
    /// Quota in bytes given to each personal space when it is created; `None` = unlimited.
    /// Only storage-users has the key (`storage-users.personal_quota`): always `None` for
    /// storage-system, which has no personal spaces.
    pub personal_quota: Option<u64>,
    /// Bodies of at most this many bytes kept in the metadata database
    /// (`storage-users.inline_max`); 0 for storage-system, which holds no file contents.
    pub inline_max: u64,
    /// How deep and long a path may be (`storage-users.max_depth`, `max_path_bytes`); `None`
    /// for storage-system, which takes no paths from clients.
    pub paths: Option<PathLimits>,
    /// Resumable (TUS) uploads (`storage-users.uploads`): always `None` for storage-system,
    /// which takes no uploads from clients.
    pub uploads: Option<UploadsConfig>,
    /// Connections of the metadata database pool (`database_max_connections`); `None` = the
    /// store's default (8 for SQLite, 16 for PostgreSQL). Above zero.
    pub database_max_connections: Option<u32>,
    /// How long calls that met the database out of reach are tried again (`database_retry`);
    /// zero: never.
    pub database_retry: Duration,
    /// Bounds on creating personal spaces at first login (`storage-users.provisioning`);
    /// always `None` for storage-system, which has no personal spaces.
    pub provisioning: Option<WorkLimits>,
    /// The trash bin (`storage-users.trash`); `None` for storage-system, which holds no files.
    pub trash: Option<TrashConfig>,
    /// File versions (`storage-users.versions`); `None` for storage-system.
    pub versions: Option<VersionsConfig>,
}

section! {
    /// The trash bin of storage-users' spaces: removals are kept until restored, purged or
    /// expired here.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct TrashConfig {
        /// How long a removed item stays in the trash before it is purged for good.
        retention: Duration = key("30days", Field::positive_duration, env "ARCA_TRASH_RETENTION"),
        /// The share of a space's quota its trash may fill, in percent (0: no bound): past
        /// it, the oldest removals are purged first. Spaces without a quota have no bound.
        max_share_of_quota: u8 = key("50", Field::percent),
        burst: BurstConfig = part(BurstConfig::PART),
    }
}

section! {
    /// Mass deletes: one user removing through one client program, each removal within
    /// `window` of the one before, is a burst; past `items` files it is flagged, published
    /// (`trash.burst`) and listed for the space's owner, who can restore exactly it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct BurstConfig {
        /// Files removed (inside removed folders included) past which a burst is flagged.
        items: u32 = key("500", Field::positive_integer),
        /// Removals further apart than this start a new burst.
        window: Duration = key("10min", Field::positive_duration),
    }
}

section! {
    /// Versions of storage-users' files: the contents an overwrite replaced.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct VersionsConfig {
        /// Keep the previous content of a file when it is overwritten.
        enabled: bool = key("true", Field::boolean, env "ARCA_VERSIONS_ENABLED"),
        /// Contents smaller than this are not kept (0: every size): 1MiB, 500KB or bytes.
        min_size: u64 = key("0", Field::size_or_zero),
        /// File names whose contents are never kept (`*` any run, `?` one character).
        exclude: Vec<String> = key(["*.part", "~$*", ".~lock.*#", "*.tmp"], load::globs),
        /// At most this many versions of one file (0: no bound); the oldest go first. Thinning
        /// by age comes first: all from the last minute, then one per minute for an hour, per
        /// hour for a day, per day for 30 days, per week after that.
        max_per_file: u32 = key("0", Field::count_or_zero),
        /// The share of a space's quota its versions may fill, in percent (0: no bound); the
        /// oldest go first. Labelled versions count but are never thinned.
        max_share_of_quota: u8 = key("25", Field::percent),
    }
}

section! {
    /// Resumable (TUS) uploads of storage-users.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct UploadsConfig {
        /// How long a resumable (TUS) upload may take from its creation; unfinished ones are
        /// then removed.
        expiration: Duration = key("24h", Field::positive_duration, env "ARCA_STORAGE_USERS_UPLOADS_EXPIRATION"),
    }
}

impl fmt::Debug for StorageSection {
    // The URL may carry a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageSection")
            .field("endpoint", &self.endpoint)
            .field("database", &self.database.as_ref().map(|_| "<redacted>"))
            .field("blobs", &self.blobs)
            .field("personal_quota", &self.personal_quota)
            .field("inline_max", &self.inline_max)
            .field("paths", &self.paths)
            .field("uploads", &self.uploads)
            .field("database_max_connections", &self.database_max_connections)
            .field("database_retry", &self.database_retry)
            .field("provisioning", &self.provisioning)
            .finish()
    }
}

/// The deepest and longest path a storage service takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathLimits {
    /// Segments.
    pub max_depth: u32,
    /// Bytes of the whole path.
    pub max_bytes: u32,
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
    /// The longest wait for the server's next bytes before a request is tried again.
    pub read_timeout: Duration,
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
            .field("read_timeout", &self.read_timeout)
            .finish()
    }
}
