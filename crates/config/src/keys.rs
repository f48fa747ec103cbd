//! Every leaf key with its default, its environment variable and why it exists. One table feeds
//! the loader's defaults, the environment mapping and the `arca init` template, so the three
//! cannot drift apart.

use config::{Map, Value, ValueKind};

use crate::SERVICE_NAMES;

pub(crate) enum DefaultValue {
    /// No value: the setting is off until given.
    Unset,
    Text(&'static str),
    List(&'static [&'static str]),
    EmptyMap,
}

impl DefaultValue {
    /// The default as a config-rs value, as if a source had given it.
    pub(crate) fn to_value(&self) -> Option<Value> {
        let kind = match self {
            DefaultValue::Unset => return None,
            DefaultValue::Text(text) => ValueKind::String((*text).to_owned()),
            DefaultValue::List(items) => {
                ValueKind::Array(items.iter().map(|i| Value::from(*i)).collect())
            }
            DefaultValue::EmptyMap => ValueKind::Table(Map::new()),
        };
        Some(Value::new(None, kind))
    }
}

pub(crate) struct Key {
    /// Dotted path, as `--set` takes it.
    pub path: &'static str,
    pub default: DefaultValue,
    pub env: Option<&'static str>,
    pub why: &'static str,
}

const fn key(
    path: &'static str,
    default: DefaultValue,
    env: Option<&'static str>,
    why: &'static str,
) -> Key {
    Key {
        path,
        default,
        env,
        why,
    }
}

use DefaultValue::{EmptyMap, List, Text, Unset};

/// In template order: siblings must stay next to each other.
pub(crate) const KEYS: &[Key] = &[
    key(
        "data_dir",
        Text("./data"),
        Some("ARCA_DATA_DIR"),
        "Directory where services keep their files and databases.",
    ),
    key(
        "services",
        List(&SERVICE_NAMES),
        Some("ARCA_SERVICES"),
        "Services this process hosts (a comma list in env and flags); others are found through the registry.",
    ),
    key(
        "log.format",
        Text("pretty"),
        Some("ARCA_LOG_FORMAT"),
        "pretty for people at a terminal, json for log collectors.",
    ),
    key(
        "log.level",
        Text("info"),
        Some("ARCA_LOG_LEVEL"),
        "A tracing filter, e.g. info or arca_gateway=debug,info.",
    ),
    key(
        "tracing.otlp.endpoint",
        Unset,
        Some("ARCA_TRACING_OTLP_ENDPOINT"),
        "OTLP collector as http(s)://HOST:PORT; empty exports no traces.",
    ),
    key(
        "tracing.otlp.service_name",
        Text("arca"),
        None,
        "Service name attached to exported traces.",
    ),
    key(
        "debug.addr",
        Text("127.0.0.1:9205"),
        Some("ARCA_DEBUG_ADDR"),
        "HOST:PORT of this process's debug server: health, readiness, metrics.",
    ),
    key(
        "shutdown.drain_delay",
        Text("0s"),
        Some("ARCA_SHUTDOWN_DRAIN_DELAY"),
        "Wait between turning not-ready and stopping, so load balancers stop sending work first.",
    ),
    key(
        "shutdown.timeout",
        Text("30s"),
        Some("ARCA_SHUTDOWN_TIMEOUT"),
        "Deadline for a clean stop; services still running after it are aborted.",
    ),
    key(
        "transport.retry.max_buffered_body",
        Text("1MiB"),
        Some("ARCA_TRANSPORT_RETRY_MAX_BUFFERED_BODY"),
        "Request bodies up to this size (an idempotent PUT's) are kept until the answer, so the request can go again on another instance if one fails; larger ones stream through once. 0 keeps none.",
    ),
    key(
        "registry.kind",
        Text("memory"),
        None,
        "How services find each other: memory (this process only), static (the map below), nats (a JetStream KV bucket) or dns (names below).",
    ),
    key(
        "registry.static",
        EmptyMap,
        None,
        "With kind static: service name -> endpoints, e.g. {gateway: [tcp://10.0.0.2:9142]}.",
    ),
    key(
        "registry.nats.url",
        Text("nats://127.0.0.1:4222"),
        Some("ARCA_REGISTRY_NATS_URL"),
        "With kind nats: the NATS server(s), nats://HOST:PORT, comma-separated for a cluster; also holds the leader leases.",
    ),
    key(
        "registry.nats.bucket",
        Text("arca-registry"),
        None,
        "With kind nats: the JetStream KV bucket of registrations and leases (created if missing).",
    ),
    key(
        "registry.nats.ttl",
        Text("10s"),
        None,
        "With kind nats: how long an entry outlives its last heartbeat (one every ttl/3); at least 3s.",
    ),
    key(
        "registry.dns.names",
        EmptyMap,
        None,
        "With kind dns: service name -> HOST:PORT whose A/AAAA records are its instances, e.g. {gateway: arca-gateway.ns.svc:9142}.",
    ),
    key(
        "registry.dns.interval",
        Text("5s"),
        None,
        "With kind dns: how often the names are resolved again.",
    ),
    key(
        "events.kind",
        Text("memory"),
        Some("ARCA_EVENTS_KIND"),
        "The event bus: memory (within this process) or nats (a JetStream stream every process shares; each consuming service handles each event once, however many replicas it runs).",
    ),
    key(
        "events.nats.url",
        Unset,
        Some("ARCA_EVENTS_NATS_URL"),
        "With kind nats: the NATS server(s), nats://HOST:PORT, comma-separated; unset = registry.nats.url when registry.kind is nats, else required.",
    ),
    key(
        "events.nats.stream",
        Text("arca-events"),
        None,
        "With kind nats: the JetStream stream holding the events (created if missing; subjects STREAM.KIND).",
    ),
    key(
        "events.nats.ack_wait",
        Text("30s"),
        None,
        "With kind nats: a delivery its handler has not acknowledged within this time goes to another replica (or the same one) again.",
    ),
    key(
        "events.nats.max_deliver",
        Text("10"),
        None,
        "With kind nats: deliveries of one event to one consuming service before it is given up (and logged by nobody).",
    ),
    key(
        "events.nats.publish_timeout",
        Text("2s"),
        None,
        "With kind nats: how long a publish may retry until the stream acknowledges it; then the publisher gets an error.",
    ),
    key(
        "identity.secret",
        Unset,
        Some("ARCA_IDENTITY_SECRET"),
        "Signs the identity tokens services pass to each other; the same in every process.",
    ),
    key(
        "identity.admin_password",
        Unset,
        Some("ARCA_ADMIN_PASSWORD"),
        "Password of the initial admin user.",
    ),
    key(
        "proxy.endpoint",
        Text("mem://proxy"),
        None,
        "Where the proxy's internal API listens: mem://NAME, unix:///PATH or tcp://HOST:PORT.",
    ),
    key(
        "proxy.http.addr",
        Text("127.0.0.1:9200"),
        Some("ARCA_PROXY_HTTP_ADDR"),
        "HOST:PORT where clients reach arca over HTTP.",
    ),
    key(
        "proxy.auth.basic",
        Text("true"),
        Some("ARCA_PROXY_AUTH_BASIC"),
        "HTTP Basic with a user's password. false: only app tokens are taken over Basic (sync clients keep working); people log in through OIDC.",
    ),
    key(
        "proxy.auth.max_failures",
        Text("10"),
        None,
        "Failed logins per user and per client address within proxy.auth.window before 429.",
    ),
    key(
        "proxy.auth.window",
        Text("60s"),
        None,
        "The sliding window failed logins are counted in.",
    ),
    key(
        "proxy.tls.cert",
        Unset,
        Some("ARCA_PROXY_TLS_CERT"),
        "PEM certificate chain (leaf first); with proxy.tls.key the public address speaks HTTPS (h2 and HTTP/1.1).",
    ),
    key(
        "proxy.tls.key",
        Unset,
        Some("ARCA_PROXY_TLS_KEY"),
        "PEM private key of proxy.tls.cert (PKCS#8, PKCS#1 or SEC1).",
    ),
    key(
        "proxy.limits.max_header_bytes",
        Text("64KiB"),
        None,
        "Largest request line plus headers a client may send; larger gets 431.",
    ),
    key(
        "proxy.limits.max_body_bytes",
        Text("0"),
        None,
        "Largest request body (e.g. 10GiB); larger gets 413. 0 = unlimited (sync clients upload big files).",
    ),
    key(
        "proxy.limits.header_timeout",
        Text("20s"),
        None,
        "A client must finish the TLS handshake and each request's headers within this time (slowloris).",
    ),
    key(
        "proxy.limits.idle_timeout",
        Text("5m"),
        None,
        "A client connection that moves no byte either way for this long is closed.",
    ),
    key(
        "proxy.cors.allowed_origins",
        List(&[]),
        Some("ARCA_PROXY_CORS_ALLOWED_ORIGINS"),
        "Browser origins (https://HOST[:PORT]) allowed to call arca cross-origin; empty = no CORS headers at all.",
    ),
    key(
        "proxy.oidc.issuer",
        Unset,
        Some("ARCA_PROXY_OIDC_ISSUER"),
        "OpenID Connect issuer URL; when set, Bearer tokens it signs (RS256, ES256) are accepted.",
    ),
    key(
        "proxy.oidc.audience",
        Unset,
        Some("ARCA_PROXY_OIDC_AUDIENCE"),
        "Required aud claim of Bearer tokens; unset = not checked.",
    ),
    key(
        "proxy.oidc.user_claim",
        Text("preferred_username"),
        None,
        "The token claim holding the arca user name.",
    ),
    key(
        "proxy.oidc.provision",
        Text("true"),
        None,
        "Create unknown users at their first login from the claims preferred_username, name and email.",
    ),
    key(
        "proxy.oidc.provisioning.concurrency",
        Text("8"),
        None,
        "Users created from OIDC claims at once by this proxy; further first logins wait their turn.",
    ),
    key(
        "proxy.oidc.provisioning.rate",
        Text("100"),
        None,
        "Users created from OIDC claims per second at most by this proxy, so a burst of first logins does not swamp storage-system.",
    ),
    key(
        "proxy.oidc.provisioning.burst",
        Text("200"),
        None,
        "Users that may be created at once above the rate after a quiet time.",
    ),
    key(
        "frontend.endpoint",
        Text("mem://frontend"),
        None,
        "Where the frontend service listens.",
    ),
    key(
        "gateway.endpoint",
        Text("mem://gateway"),
        None,
        "Where the gateway service listens.",
    ),
    key(
        "storage-users.endpoint",
        Text("mem://storage-users"),
        None,
        "Where the storage of users' spaces listens.",
    ),
    key(
        "storage-users.database",
        Unset,
        Some("ARCA_STORAGE_USERS_DATABASE"),
        "Metadata database: postgres://USER:PASSWORD@HOST:PORT/DB; unset = SQLite in data_dir.",
    ),
    key(
        "storage-users.database_max_connections",
        Unset,
        None,
        "Connections of the metadata database pool, the bound on this instance's concurrent database work; unset = 8 for SQLite, 16 for PostgreSQL.",
    ),
    key(
        "storage-users.personal_quota",
        Unset,
        Some("ARCA_STORAGE_USERS_PERSONAL_QUOTA"),
        "Quota of each new personal space: 10GiB, 500MB (1000-based) or bytes; unset or 0 = unlimited.",
    ),
    key(
        "storage-users.provisioning.concurrency",
        Text("8"),
        None,
        "Personal spaces created at once (at first login); further first requests wait their turn. Concurrent first requests of one user create one space.",
    ),
    key(
        "storage-users.provisioning.rate",
        Text("100"),
        None,
        "Personal spaces created per second at most, so a burst of first logins does not swamp the database.",
    ),
    key(
        "storage-users.provisioning.burst",
        Text("200"),
        None,
        "Personal spaces that may be created at once above the rate after a quiet time.",
    ),
    key(
        "storage-users.blobs.kind",
        Text("local"),
        Some("ARCA_STORAGE_USERS_BLOBS_KIND"),
        "Where file contents live: local (data_dir/storage-users/blobs) or s3 (the bucket below).",
    ),
    key(
        "storage-users.blobs.s3.endpoint",
        Unset,
        Some("ARCA_STORAGE_USERS_S3_ENDPOINT"),
        "An S3-compatible server as http(s)://HOST[:PORT]; unset = AWS S3.",
    ),
    key(
        "storage-users.blobs.s3.bucket",
        Unset,
        Some("ARCA_STORAGE_USERS_S3_BUCKET"),
        "Bucket for the blobs, required with kind s3; give it a rule aborting incomplete multipart uploads.",
    ),
    key(
        "storage-users.blobs.s3.region",
        Text("us-east-1"),
        Some("ARCA_STORAGE_USERS_S3_REGION"),
        "Region of the bucket; S3-compatible servers mostly accept any.",
    ),
    key(
        "storage-users.blobs.s3.access_key_id",
        Unset,
        Some("ARCA_STORAGE_USERS_S3_ACCESS_KEY_ID"),
        "Static credentials with secret_access_key; unset = AWS_* env, web identity or instance role.",
    ),
    key(
        "storage-users.blobs.s3.secret_access_key",
        Unset,
        Some("ARCA_STORAGE_USERS_S3_SECRET_ACCESS_KEY"),
        "The secret of access_key_id; better given by its env var than written here.",
    ),
    key(
        "storage-users.uploads.expiration",
        Text("24h"),
        Some("ARCA_STORAGE_USERS_UPLOADS_EXPIRATION"),
        "How long a resumable (TUS) upload may take from its creation; unfinished ones are then removed.",
    ),
    key(
        "storage-system.endpoint",
        Text("mem://storage-system"),
        None,
        "Where the storage of system data listens.",
    ),
    key(
        "storage-system.database",
        Unset,
        Some("ARCA_STORAGE_SYSTEM_DATABASE"),
        "Metadata database: postgres://USER:PASSWORD@HOST:PORT/DB; unset = SQLite in data_dir.",
    ),
    key(
        "storage-system.database_max_connections",
        Unset,
        None,
        "Connections of the metadata database pool, the bound on this instance's concurrent database work; unset = 8 for SQLite, 16 for PostgreSQL.",
    ),
    key(
        "storage-system.blobs.kind",
        Text("local"),
        Some("ARCA_STORAGE_SYSTEM_BLOBS_KIND"),
        "Where file contents live: local (data_dir/storage-system/blobs) or s3 (the bucket below).",
    ),
    key(
        "storage-system.blobs.s3.endpoint",
        Unset,
        Some("ARCA_STORAGE_SYSTEM_S3_ENDPOINT"),
        "An S3-compatible server as http(s)://HOST[:PORT]; unset = AWS S3.",
    ),
    key(
        "storage-system.blobs.s3.bucket",
        Unset,
        Some("ARCA_STORAGE_SYSTEM_S3_BUCKET"),
        "Bucket for the blobs, required with kind s3; give it a rule aborting incomplete multipart uploads.",
    ),
    key(
        "storage-system.blobs.s3.region",
        Text("us-east-1"),
        Some("ARCA_STORAGE_SYSTEM_S3_REGION"),
        "Region of the bucket; S3-compatible servers mostly accept any.",
    ),
    key(
        "storage-system.blobs.s3.access_key_id",
        Unset,
        Some("ARCA_STORAGE_SYSTEM_S3_ACCESS_KEY_ID"),
        "Static credentials with secret_access_key; unset = AWS_* env, web identity or instance role.",
    ),
    key(
        "storage-system.blobs.s3.secret_access_key",
        Unset,
        Some("ARCA_STORAGE_SYSTEM_S3_SECRET_ACCESS_KEY"),
        "The secret of access_key_id; better given by its env var than written here.",
    ),
    key(
        "sharing.endpoint",
        Text("mem://sharing"),
        None,
        "Where the sharing service listens.",
    ),
    key(
        "sharing.auto_accept",
        Text("true"),
        Some("ARCA_SHARING_AUTO_ACCEPT"),
        "New user and group shares show in the recipient's Shares/ at once; false: pending until accepted.",
    ),
];

/// The built-in default of a leaf key, if it has one.
pub(crate) fn default_of(path: &str) -> Option<Value> {
    KEYS.iter()
        .find(|k| k.path == path)
        .and_then(|k| k.default.to_value())
}

/// The dotted key an `ARCA_*` variable sets; `None` for names that are not ours.
pub(crate) fn key_of_env(var: &str) -> Option<&'static str> {
    KEYS.iter().find(|k| k.env == Some(var)).map(|k| k.path)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn env_names_are_unique_and_prefixed() {
        let mut seen = HashSet::new();
        for var in KEYS.iter().filter_map(|k| k.env) {
            assert!(var.starts_with("ARCA_"), "{var}");
            assert!(seen.insert(var), "{var} twice");
        }
        assert_eq!(key_of_env("ARCA_PROXY_HTTP_ADDR"), Some("proxy.http.addr"));
        assert_eq!(key_of_env("ARCA_CONFIG"), None);
    }

    #[test]
    fn paths_are_unique() {
        let paths: HashSet<_> = KEYS.iter().map(|k| k.path).collect();
        assert_eq!(paths.len(), KEYS.len());
    }
}
