//! Layering and validation.
//!
//! config-rs reads the YAML and merges the layers (file, then each env var, then each flag, later
//! wins). We then walk the merged tree ourselves instead of handing it to serde: serde's errors
//! through config-rs lose the origin of a value and say little about which key was unknown, and
//! every message here must name the full key, the problem and where the value came from. Each
//! value keeps its origin as a config-rs origin string holding an index into our own `Origin`
//! list. Defaults are not in the tree: the walk falls back to them for absent keys.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use arca_transport::{Endpoint, is_host_port};
use config::{FileFormat, Format, Map, Source, Value, ValueKind};

use crate::keys::DefaultValue::{Text, Unset};
use crate::keys::{Key, Part, default_of, join, key_of_env, keys};
use crate::{
    BlobsConfig, Config, ConfigError, EventsKind, OidcWebLogin, Origin, PathLimits, Problem,
    ProxyOidc, ProxyTls, RegistryKind, S3Config, SERVICE_NAMES, StorageSection, TransportConfig,
    TrashConfig, UploadsConfig, VersionsConfig, WorkLimits,
};

/// Values from command-line flags, in order (later wins), built by the binary: e.g.
/// `("services", "proxy,gateway", Origin::Flag("--services"))` or `("debug.addr", …)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides(pub Vec<(String, String, Origin)>);

impl Overrides {
    /// Adds one dotted key and its raw value.
    pub fn push(&mut self, key: impl Into<String>, value: impl Into<String>, origin: Origin) {
        self.0.push((key.into(), value.into(), origin));
    }

    /// Adds the argument of a generic `--set KEY=VALUE` flag.
    pub fn push_set(&mut self, assignment: &str) -> Result<(), ConfigError> {
        let origin = Origin::Flag("--set".to_owned());
        match assignment.split_once('=') {
            Some((key, value)) => {
                self.push(key.trim(), value, origin);
                Ok(())
            }
            None => Err(ConfigError::Invalid {
                key: "set".to_owned(),
                problem: Problem::NotAssignment(format!("{assignment:?}")),
                origin,
            }),
        }
    }
}

/// Loads the configuration: defaults, then `file` if given, then the `ARCA_*` variables of
/// `env` (others are ignored: the environment is not ours alone), then `flags`.
pub fn load(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    flags: Overrides,
) -> Result<Config, ConfigError> {
    let text = match file {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
                path: path.to_owned(),
                error,
            })?,
        ),
        None => None,
    };
    let file = file.zip(text.as_deref());
    load_layers(file, env, flags)
}

/// [`load`] with the process environment. A variable we read whose value is not UTF-8 is an
/// error naming it; any other variable is skipped.
pub fn load_from_process(file: Option<&Path>, flags: Overrides) -> Result<Config, ConfigError> {
    let mut env = Vec::new();
    for (var, value) in std::env::vars_os() {
        let Some(var) = var.to_str() else { continue };
        let Some(key) = key_of_env(var) else { continue };
        match value.into_string() {
            Ok(value) => env.push((var.to_owned(), value)),
            Err(_) => {
                return Err(ConfigError::Invalid {
                    key: key.to_owned(),
                    problem: Problem::NotUtf8,
                    origin: Origin::Env(var.to_owned()),
                });
            }
        }
    }
    load(file, env, flags)
}

/// One layer for config-rs: a map it merges as given.
#[derive(Clone, Debug)]
struct Layer(Map<String, Value>);

impl Source for Layer {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, config::ConfigError> {
        Ok(self.0.clone())
    }
}

/// Registers `origin` and returns the config-rs origin string that points back at it.
fn tag(origins: &mut Vec<Origin>, origin: Origin) -> String {
    origins.push(origin);
    (origins.len() - 1).to_string()
}

/// A layer setting one dotted key to a raw string.
fn single(key: &str, value: String, tag: &str) -> Layer {
    let mut map = Map::new();
    map.insert(key.to_owned(), Value::new(Some(&tag.to_owned()), value));
    Layer(map)
}

pub(crate) fn load_layers(
    file: Option<(&Path, &str)>,
    env: impl IntoIterator<Item = (String, String)>,
    flags: Overrides,
) -> Result<Config, ConfigError> {
    let mut origins = Vec::new();
    let mut builder = config::Config::builder();
    if let Some((path, text)) = file {
        let tag = tag(&mut origins, Origin::File(path.to_owned()));
        let map = FileFormat::Yaml.parse(Some(&tag), text).map_err(|err| {
            // config-rs ends some messages with " in ORIGIN", which here is our tag.
            let message = err.to_string();
            let message = message
                .strip_suffix(&format!(" in {tag}"))
                .unwrap_or(&message);
            yaml_error(path, message)
        })?;
        // config-rs parses top-level keys of a source as paths, so YAML `proxy.http: …` would
        // silently mean proxy → http. Nested keys are not parsed, hence only the top level.
        if let Some(dotted) = map.keys().filter(|k| k.contains(['.', '['])).min() {
            return Err(ConfigError::Invalid {
                key: dotted.clone(),
                problem: Problem::DottedKey,
                origin: Origin::File(path.to_owned()),
            });
        }
        builder = builder.add_source(Layer(map));
    }
    for (var, value) in env {
        let Some(key) = key_of_env(&var) else {
            continue;
        };
        let tag = tag(&mut origins, Origin::Env(var));
        builder = builder.add_source(single(key, value, &tag));
    }
    // One layer per flag: a layer is a HashMap, and a later flag must win over an earlier one.
    for (key, value, origin) in flags.0 {
        let valid = key.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        });
        if !valid {
            return Err(ConfigError::Invalid {
                problem: Problem::BadKey(format!("{key:?}")),
                key,
                origin,
            });
        }
        let tag = tag(&mut origins, origin);
        builder = builder.add_source(single(&key, value, &tag));
    }
    let merged = builder
        .build()
        .and_then(|c| c.collect())
        .map_err(|err| ConfigError::Merge(one_line(&err.to_string())))?;
    let origins = Origins {
        list: origins,
        read: RefCell::default(),
    };
    let mut root = Table::new(String::new(), merged, &origins);
    let mut config = (Config::PART.read)(&mut root)?;
    root.finish()?;
    config.source = file.map(|(path, _)| path.to_owned());
    Ok(config)
}

/// yaml-rust2 says "INFO at byte N line L column C"; we put the position first.
fn yaml_error(path: &Path, message: &str) -> ConfigError {
    let position = message.rsplit_once(" at byte ").and_then(|(info, at)| {
        let mut words = at.split(' ');
        let (_byte, line_word, line, column_word, column) = (
            words.next()?,
            words.next()?,
            words.next()?.parse().ok()?,
            words.next()?,
            words.next()?.parse().ok()?,
        );
        (line_word == "line" && column_word == "column").then_some((info, line, column))
    });
    match position {
        Some((info, line, column)) => ConfigError::Syntax {
            path: path.to_owned(),
            line,
            column,
            message: one_line(info),
        },
        None => ConfigError::NotSettings {
            path: path.to_owned(),
            message: one_line(message),
        },
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Rules across sections, once every key is read.
pub(crate) fn config_rules(config: &mut Config, t: &Table) -> Result<(), ConfigError> {
    // The events' NATS URL falls back to the registry's, so a NATS deployment names its
    // servers once.
    let nats = &mut config.events.nats;
    if nats.url.is_none() && config.registry.kind == RegistryKind::Nats {
        nats.url = Some(config.registry.nats.url.clone());
    }
    if config.events.kind == EventsKind::Nats && nats.url.is_none() {
        // Blame the value that asked for NATS.
        return Err(ConfigError::Invalid {
            key: "events.nats.url".to_owned(),
            problem: Problem::RequiredWhen("events.kind is nats and registry.kind is not"),
            origin: t.origin_of("events.kind"),
        });
    }
    Ok(())
}

/// `transport`: its one key sits a level deeper than its field.
pub(crate) const TRANSPORT: Part<TransportConfig> = Part {
    keys: |prefix, out| {
        keys!(prefix, out, {
            /// Request bodies up to this size (an idempotent PUT's) are kept until the answer,
            /// so the request can go again on another instance if one fails; larger ones
            /// stream through once. 0 keeps none.
            "retry.max_buffered_body" = "1MiB", env "ARCA_TRANSPORT_RETRY_MAX_BUFFERED_BODY";
        })
    },
    read: |t| {
        t.section("retry", |t| {
            Ok(TransportConfig {
                max_buffered_body: t.field("max_buffered_body").size_or_zero()?,
            })
        })
    },
};

/// `proxy.tls`: both files or neither (their contents are checked when the proxy starts).
pub(crate) const PROXY_TLS: Part<Option<ProxyTls>> = Part {
    keys: |prefix, out| {
        keys!(prefix, out, {
            /// PEM certificate chain (leaf first); with proxy.tls.key the public address speaks
            /// HTTPS (h2 and HTTP/1.1).
            "cert" = unset, env "ARCA_PROXY_TLS_CERT";
            /// PEM private key of proxy.tls.cert (PKCS#8, PKCS#1 or SEC1).
            "key" = unset, env "ARCA_PROXY_TLS_KEY";
        })
    },
    read: |t| {
        let (cert, key) = (t.field("cert"), t.field("key"));
        match (cert.optional_text()?, key.optional_text()?) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(cert.error(Problem::Unpaired("proxy.tls.key"))),
            (None, Some(_)) => Err(key.error(Problem::Unpaired("proxy.tls.cert"))),
            (Some(c), Some(k)) => Ok(Some(ProxyTls {
                cert: PathBuf::from(c),
                key: PathBuf::from(k),
            })),
        }
    },
};

/// `proxy.oidc`: off unless an issuer is set; the other keys are read (and checked) anyway.
pub(crate) const PROXY_OIDC: Part<Option<ProxyOidc>> = Part {
    keys: |prefix, out| {
        keys!(prefix, out, {
            /// OpenID Connect issuer URL; when set, Bearer tokens it signs (RS256, ES256) are
            /// accepted.
            "issuer" = unset, env "ARCA_PROXY_OIDC_ISSUER";
            /// Required aud claim of Bearer tokens; unset = not checked.
            "audience" = unset, env "ARCA_PROXY_OIDC_AUDIENCE";
            /// The token claim holding the arca user name.
            "user_claim" = "preferred_username";
            /// Create unknown users at their first login from the claims preferred_username,
            /// name and email.
            "provision" = "true";
            /// The web app's client id at the provider. When set, the login page offers "Log
            /// in with …": the authorization-code flow with PKCE, run by the proxy.
            "client_id" = unset, env "ARCA_PROXY_OIDC_CLIENT_ID";
            /// The client's secret, when the provider registered it as confidential; a public
            /// client (PKCE alone) has none.
            "client_secret" = unset, env "ARCA_PROXY_OIDC_CLIENT_SECRET";
            /// The provider as the login button names it: "Log in with NAME".
            "provider_name" = "single sign-on";
            /// Where the provider sends the browser back, registered there as the client's
            /// redirect URI: https://HOST/api/v1/session/oidc/callback. Unset: made of the
            /// request's Host and the listener's scheme.
            "redirect_uri" = unset;
            /// The scopes asked for (openid is needed; profile and email name the user).
            "scopes" = "openid profile email";
        });
        (OIDC_PROVISIONING.keys)(&join(prefix, "provisioning"), out);
    },
    read: |t| {
        let issuer_field = t.field("issuer");
        let issuer = issuer_field.optional_text()?;
        if let Some(url) = &issuer {
            let authority = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"))
                .map(|rest| rest.split_once('/').map_or(rest, |(host, _)| host));
            let valid = authority
                .is_some_and(|a| is_host_port(a) || is_host_port(&format!("{a}:1")))
                && !url.contains(['?', '#', ' ']);
            if !valid {
                return Err(issuer_field.error(Problem::NotOneOf {
                    value: format!("{url:?}"),
                    allowed: "an issuer URL like https://HOST[:PORT][/PATH]",
                }));
            }
        }
        let audience = t.field("audience").optional_text()?;
        let user_claim = t.field("user_claim").text()?;
        let provision = t.field("provision").choice("true, false", |s| match s {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        })?;
        let provisioning = t.section("provisioning", OIDC_PROVISIONING.read)?;
        let client_id = t.field("client_id").optional_text()?;
        let client_secret = t.field("client_secret").optional_text()?;
        let provider_name = t.field("provider_name").text()?;
        let redirect_field = t.field("redirect_uri");
        let redirect_uri = redirect_field.optional_text()?;
        if let Some(uri) = &redirect_uri
            && !(uri.starts_with("https://") || uri.starts_with("http://"))
        {
            return Err(redirect_field.error(Problem::NotOneOf {
                value: format!("{uri:?}"),
                allowed: "an absolute URL like https://HOST/api/v1/session/oidc/callback",
            }));
        }
        let scopes_field = t.field("scopes");
        let scopes = scopes_field.text()?;
        if !scopes.split_whitespace().any(|s| s == "openid") {
            return Err(scopes_field.error(Problem::NotOneOf {
                value: format!("{scopes:?}"),
                allowed: "space-separated scopes including openid",
            }));
        }
        let web = client_id.map(|client_id| OidcWebLogin {
            client_id,
            client_secret,
            provider_name,
            redirect_uri,
            scopes,
        });
        Ok(issuer.map(|issuer| ProxyOidc {
            issuer,
            audience,
            user_claim,
            provision,
            provisioning,
            web,
        }))
    },
};

/// `proxy.oidc.provisioning`.
const OIDC_PROVISIONING: Part<WorkLimits> = Part {
    keys: |prefix, out| {
        keys!(prefix, out, {
            /// Users created from OIDC claims at once by this proxy; further first logins wait
            /// their turn.
            "concurrency" = "8";
            /// Users created from OIDC claims per second at most by this proxy, so a burst of
            /// first logins does not swamp storage-system (a creation is one write
            /// transaction: 10,000 first logins at once take about 10 s at this rate).
            "rate" = "1000";
            /// Users that may be created at once above the rate after a quiet time.
            "burst" = "1000";
        })
    },
    read: work_limits,
};

/// `storage-users.provisioning`.
const SPACE_PROVISIONING: Part<WorkLimits> = Part {
    keys: |prefix, out| {
        keys!(prefix, out, {
            /// Personal spaces created at once (at first login); further first requests wait
            /// their turn. Concurrent first requests of one user create one space.
            "concurrency" = "8";
            /// Personal spaces created per second at most, so a burst of first logins does not
            /// swamp the database (a creation is one write transaction).
            "rate" = "1000";
            /// Personal spaces that may be created at once above the rate after a quiet time.
            "burst" = "1000";
        })
    },
    read: work_limits,
};

/// A `concurrency`/`rate`/`burst` section: bounds on one kind of work.
fn work_limits(t: &mut Table) -> Result<WorkLimits, ConfigError> {
    Ok(WorkLimits {
        concurrency: t.field("concurrency").positive_integer()?,
        rate: t.field("rate").positive_integer()?,
        burst: t.field("burst").positive_integer()?,
    })
}

/// `storage-users`: users' spaces, so personal quotas, provisioning and resumable uploads too.
pub(crate) const STORAGE_USERS: Part<StorageSection> = Part {
    keys: |prefix, out| {
        keys!(prefix, out, {
            /// Where the storage of users' spaces listens.
            "endpoint" = "mem://storage-users";
            /// Metadata database: postgres://USER:PASSWORD@HOST:PORT/DB; unset = SQLite in
            /// data_dir.
            "database" = unset, env "ARCA_STORAGE_USERS_DATABASE";
            /// Connections of the metadata database pool, the bound on this instance's
            /// concurrent database work; unset = 8 for SQLite, 16 for PostgreSQL.
            "database_max_connections" = unset;
            /// How long a call that met its database out of reach (a restart, a failover) is
            /// tried again before the client hears 503 with Retry-After; 0 = never.
            "database_retry" = "15s";
            /// Quota of each new personal space: 10GiB, 500MB (1000-based) or bytes; unset or
            /// 0 = unlimited.
            "personal_quota" = unset, env "ARCA_STORAGE_USERS_PERSONAL_QUOTA";
            /// The deepest path taken, in segments: deeper ones are refused (400) naming it.
            "max_depth" = "512";
            /// The longest path taken, in bytes (UTF-8, as stored): longer ones are refused
            /// (400) naming it.
            "max_path_bytes" = "32768";
            /// Files of at most this size, when the client says the size up front, are kept
            /// in the metadata database with their metadata (one sync commits a batch of
            /// them, no blob file is made); larger ones go to the blobs. 0 = every file to the
            /// blobs; at most 1MiB (a body is held in memory whole).
            "inline_max" = "64KiB";
        });
        (SPACE_PROVISIONING.keys)(&join(prefix, "provisioning"), out);
        (BLOBS.keys)(&join(prefix, "blobs"), out);
        (UploadsConfig::PART.keys)(&join(prefix, "uploads"), out);
        (TrashConfig::PART.keys)(&join(prefix, "trash"), out);
        (VersionsConfig::PART.keys)(&join(prefix, "versions"), out);
    },
    read: |t| {
        Ok(StorageSection {
            endpoint: t.field("endpoint").endpoint()?,
            database: t.field("database").optional_database_url()?,
            personal_quota: t.field("personal_quota").optional_size()?,
            inline_max: inline_max(&t.field("inline_max"))?,
            paths: Some(PathLimits {
                max_depth: t.field("max_depth").positive_integer()?,
                max_bytes: t.field("max_path_bytes").positive_integer()?,
            }),
            database_max_connections: t.field("database_max_connections").optional_count()?,
            database_retry: t.field("database_retry").duration()?,
            provisioning: Some(t.section("provisioning", SPACE_PROVISIONING.read)?),
            uploads: Some(t.section("uploads", UploadsConfig::PART.read)?),
            blobs: Some(t.section("blobs", BLOBS.read)?),
            trash: Some(t.section("trash", TrashConfig::PART.read)?),
            versions: Some(t.section("versions", VersionsConfig::PART.read)?),
        })
    },
};

/// `storage-system`: no personal spaces, no uploads from clients, no file contents.
pub(crate) const STORAGE_SYSTEM: Part<StorageSection> = Part {
    keys: |prefix, out| {
        keys!(prefix, out, {
            /// Where the storage of system data listens.
            "endpoint" = "mem://storage-system";
            /// Metadata database: postgres://USER:PASSWORD@HOST:PORT/DB; unset = SQLite in
            /// data_dir.
            "database" = unset, env "ARCA_STORAGE_SYSTEM_DATABASE";
            /// Connections of the metadata database pool, the bound on this instance's
            /// concurrent database work; unset = 8 for SQLite, 16 for PostgreSQL.
            "database_max_connections" = unset;
            /// How long a call that met its database out of reach (a restart, a failover) is
            /// tried again before the client hears 503 with Retry-After; 0 = never.
            "database_retry" = "15s";
        });
    },
    read: |t| {
        Ok(StorageSection {
            endpoint: t.field("endpoint").endpoint()?,
            database: t.field("database").optional_database_url()?,
            personal_quota: None,
            inline_max: 0,
            paths: None,
            database_max_connections: t.field("database_max_connections").optional_count()?,
            database_retry: t.field("database_retry").duration()?,
            provisioning: None,
            uploads: None,
            blobs: None,
            trash: None,
            versions: None,
        })
    },
};

/// A storage service's `blobs` section. The S3 keys are read whatever the kind, so that a typo
/// among them is an error even while they are unused.
const BLOBS: Part<BlobsConfig> = Part {
    keys: |prefix, out| {
        // `storage-users.blobs` → `STORAGE_USERS`: the env names predate this table.
        let service = prefix.strip_suffix(".blobs").unwrap_or(prefix);
        let env = |leaf: &str| -> Option<&'static str> {
            BLOBS_ENV
                .iter()
                .find(|(s, l, _)| *s == service && *l == leaf)
                .map(|(_, _, var)| *var)
        };
        let mut add = |name: &str, default, doc: &str| {
            out.push(Key::new(prefix, name, default, env(name), doc));
        };
        let dir = format!(
            "Where file contents live: local (data_dir/{service}/blobs) or s3 (the bucket below)."
        );
        add("kind", Text("local"), &dir);
        add(
            "s3.endpoint",
            Unset,
            "An S3-compatible server as http(s)://HOST[:PORT]; unset = AWS S3.",
        );
        add(
            "s3.bucket",
            Unset,
            "Bucket for the blobs, required with kind s3; give it a rule aborting incomplete multipart uploads.",
        );
        add(
            "s3.region",
            Text("us-east-1"),
            "Region of the bucket; S3-compatible servers mostly accept any.",
        );
        add(
            "s3.access_key_id",
            Unset,
            "Static credentials with secret_access_key; unset = AWS_* env, web identity or instance role.",
        );
        add(
            "s3.secret_access_key",
            Unset,
            "The secret of access_key_id; better given by its env var than written here.",
        );
        add(
            "s3.read_timeout",
            Text("10s"),
            "How long an S3 request waits for the server's next bytes before it is tried again \
             (within database_retry, after which the client hears 503): a frozen S3 is no hang.",
        );
    },
    read: blobs,
};

/// The environment variables of the blobs keys: (service, key below `blobs`, variable).
const BLOBS_ENV: &[(&str, &str, &str)] = &[
    ("storage-users", "kind", "ARCA_STORAGE_USERS_BLOBS_KIND"),
    (
        "storage-users",
        "s3.endpoint",
        "ARCA_STORAGE_USERS_S3_ENDPOINT",
    ),
    ("storage-users", "s3.bucket", "ARCA_STORAGE_USERS_S3_BUCKET"),
    ("storage-users", "s3.region", "ARCA_STORAGE_USERS_S3_REGION"),
    (
        "storage-users",
        "s3.access_key_id",
        "ARCA_STORAGE_USERS_S3_ACCESS_KEY_ID",
    ),
    (
        "storage-users",
        "s3.secret_access_key",
        "ARCA_STORAGE_USERS_S3_SECRET_ACCESS_KEY",
    ),
];

fn blobs(t: &mut Table) -> Result<BlobsConfig, ConfigError> {
    let kind = t.field("kind");
    let s3 = kind.choice("local, s3", |s| match s {
        "local" => Some(false),
        "s3" => Some(true),
        _ => None,
    })?;
    t.section("s3", |t| {
        let endpoint = t.field("endpoint").optional_endpoint_url()?;
        let bucket = t.field("bucket");
        let bucket_name = bucket.optional_bucket()?;
        let region = t.field("region").text()?;
        let key_id = t.field("access_key_id");
        let secret = t.field("secret_access_key");
        let (access_key_id, secret_access_key) = (key_id.optional_text()?, secret.optional_text()?);
        let read_timeout = t.field("read_timeout").positive_duration()?;
        match (&access_key_id, &secret_access_key) {
            (Some(_), None) => {
                return Err(key_id.error(Problem::Unpaired("blobs.s3.secret_access_key")));
            }
            (None, Some(_)) => {
                return Err(secret.error(Problem::Unpaired("blobs.s3.access_key_id")));
            }
            _ => {}
        }
        match (s3, bucket_name) {
            (false, None) => Ok(BlobsConfig::Local),
            // A bucket without `kind: s3` is almost surely a forgotten kind; taking it silently
            // would put the files on local disk.
            (false, Some(_)) => Err(bucket.error(Problem::Unused("blobs.kind is s3"))),
            // Blame the value that asked for a bucket.
            (true, None) => Err(ConfigError::Invalid {
                key: bucket.key.clone(),
                problem: Problem::EmptyWhen("blobs.kind is s3"),
                origin: kind.origin.clone(),
            }),
            (true, Some(bucket)) => Ok(BlobsConfig::S3(S3Config {
                endpoint,
                bucket,
                region,
                access_key_id,
                secret_access_key,
                read_timeout,
            })),
        }
    })
}

/// `services`: known names, no duplicates, at least one.
pub(crate) fn services(field: &Field) -> Result<Vec<String>, ConfigError> {
    let mut seen = HashSet::new();
    let mut services = Vec::new();
    for (raw, shown) in field.list()? {
        if !SERVICE_NAMES.contains(&raw.as_str()) {
            return Err(field.error(Problem::NotService(shown)));
        }
        if !seen.insert(raw.clone()) {
            return Err(field.error(Problem::Duplicate(shown)));
        }
        services.push(raw);
    }
    if services.is_empty() {
        return Err(field.error(Problem::Empty));
    }
    Ok(services)
}

/// A list of file name patterns (`*` any run, `?` one character); none may be empty or hold
/// a `/` (they match names, not paths).
pub(crate) fn globs(field: &Field) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for (raw, shown) in field.list()? {
        let glob = raw.trim();
        if glob.is_empty() || glob.contains('/') {
            return Err(field.error(Problem::NotOneOf {
                value: shown,
                allowed: "a file name pattern without '/'",
            }));
        }
        out.push(glob.to_owned());
    }
    Ok(out)
}

/// `thumbnails.resolutions`: `WIDTHxHEIGHT` items, both above 0, at least one.
pub(crate) fn resolutions(field: &Field) -> Result<Vec<(u32, u32)>, ConfigError> {
    let mut out = Vec::new();
    for (raw, shown) in field.list()? {
        let number = |s: &str| s.trim().parse::<u32>().ok().filter(|n| *n > 0);
        let size = raw
            .split_once(['x', 'X'])
            .and_then(|(w, h)| Some((number(w)?, number(h)?)));
        match size {
            Some(size) => out.push(size),
            None => {
                return Err(field.error(Problem::NotOneOf {
                    value: shown,
                    allowed: "WIDTHxHEIGHT, both above 0",
                }));
            }
        }
    }
    if out.is_empty() {
        return Err(field.error(Problem::Empty));
    }
    Ok(out)
}

/// A size in bytes above 0 (see [`parse_size`]).
pub(crate) fn positive_size(field: &Field) -> Result<u64, ConfigError> {
    field
        .optional_size()?
        .ok_or_else(|| field.error(Problem::Zero))
}

/// `storage-users.inline_max`: a size of at most 1 MiB, 0 for none.
fn inline_max(field: &Field) -> Result<u64, ConfigError> {
    let bytes = field.size_or_zero()?;
    if bytes > 1 << 20 {
        let (_, shown) = field.scalar()?;
        return Err(field.error(Problem::Above(shown, "1MiB")));
    }
    Ok(bytes)
}

/// A whole number above 0 that may pass `u32` (a count of pixels).
pub(crate) fn positive_u64(field: &Field) -> Result<u64, ConfigError> {
    let (raw, shown) = field.scalar()?;
    match raw.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(field.error(Problem::NotOneOf {
            value: shown,
            allowed: "a whole number above 0",
        })),
    }
}

/// A comma-separated list of `nats://` or `tls://` server URLs, trimmed.
pub(crate) fn nats_urls(url: &Field) -> Result<String, ConfigError> {
    let (raw, shown) = url.scalar()?;
    let servers: Vec<&str> = raw.split(',').map(str::trim).collect();
    let valid = servers.iter().all(|server| {
        ["nats://", "tls://"].iter().any(|scheme| {
            server
                .strip_prefix(scheme)
                // Credentials may precede the host (`nats://user:pass@host:port`).
                .map(|rest| rest.rsplit_once('@').map_or(rest, |(_, host)| host))
                .is_some_and(is_host_port)
        })
    });
    if !valid {
        // The URL may carry a password: show it only when it has none.
        let shown = if raw.contains('@') {
            "the URL".to_owned()
        } else {
            shown
        };
        return Err(url.error(Problem::NotNatsUrl(shown)));
    }
    Ok(servers.join(","))
}

/// `search.database`: a PostgreSQL URL, or unset (an SQLite file of the instance's own).
pub(crate) fn optional_postgres_url(url: &Field) -> Result<Option<String>, ConfigError> {
    url.optional_url_of(&["postgres://", "postgresql://"], Problem::NotPostgresUrl)
}

/// [`nats_urls`], or `None` if absent or empty.
pub(crate) fn optional_nats_urls(url: &Field) -> Result<Option<String>, ConfigError> {
    match url.optional_text()? {
        Some(_) => nats_urls(url).map(Some),
        None => Ok(None),
    }
}

/// `registry.nats.bucket`: a valid KV bucket name.
pub(crate) fn kv_bucket(bucket: &Field) -> Result<String, ConfigError> {
    let name = bucket.text()?;
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(bucket.error(Problem::NotKvBucket(format!("{name:?}"))));
    }
    Ok(name)
}

/// `registry.nats.ttl`: at least 3 s, in whole seconds.
pub(crate) fn nats_ttl(ttl: &Field) -> Result<Duration, ConfigError> {
    let duration = ttl.duration()?;
    // NATS per-message TTLs are whole seconds, and a heartbeat every ttl/3 must fit at least
    // one retry inside the TTL.
    if duration < Duration::from_secs(3) {
        let (_, shown) = ttl.scalar()?;
        return Err(ttl.error(Problem::TooShort(shown, "3s")));
    }
    Ok(Duration::from_secs(duration.as_secs()))
}

/// `events.nats.stream`: letters, digits, `-` and `_` (it is also the first token of the
/// subjects).
pub(crate) fn stream_name(stream: &Field) -> Result<String, ConfigError> {
    let name = stream.text()?;
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(stream.error(Problem::NotStreamName(format!("{name:?}"))));
    }
    Ok(name)
}

/// `registry.dns.names`: service → `HOST:PORT`.
pub(crate) fn dns_names(field: &Field) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, field) in field.table()?.into_fields() {
        if !SERVICE_NAMES.contains(&name.as_str()) {
            return Err(field.error(Problem::NotService(format!("{name:?}"))));
        }
        out.insert(name, field.host_port()?);
    }
    Ok(out)
}

/// `registry.static`: service → its endpoints, at least one each.
pub(crate) fn static_endpoints(
    field: &Field,
) -> Result<BTreeMap<String, Vec<Endpoint>>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, field) in field.table()?.into_fields() {
        if !SERVICE_NAMES.contains(&name.as_str()) {
            return Err(field.error(Problem::NotService(format!("{name:?}"))));
        }
        let endpoints = field
            .list()?
            .into_iter()
            .map(|(raw, shown)| field.parse_endpoint(&raw, shown))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(field.error(Problem::Empty));
        }
        out.insert(name, endpoints);
    }
    Ok(out)
}

/// `proxy.limits.max_header_bytes`: a size above 0.
pub(crate) fn max_header_bytes(header: &Field) -> Result<u64, ConfigError> {
    match header.optional_size()? {
        Some(bytes) => Ok(bytes),
        None => {
            let (_, shown) = header.scalar()?;
            Err(header.error(Problem::NotOneOf {
                value: shown,
                allowed: "a size above 0, like 64KiB",
            }))
        }
    }
}

/// `proxy.cors.allowed_origins`: each an origin as browsers send it (RFC 6454 §6.1): scheme,
/// host and optional port, no path. `*` is refused: credentials are allowed, and a wildcard
/// cannot be combined with them.
pub(crate) fn origins(field: &Field) -> Result<Vec<String>, ConfigError> {
    let mut allowed_origins = Vec::new();
    for (raw, shown) in field.list()? {
        let origin = raw.to_ascii_lowercase();
        let authority = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"));
        let valid = authority.is_some_and(|a| {
            !a.is_empty()
                && !a.contains(['/', '?', '#', '@', ' '])
                && (is_host_port(a) || is_host_port(&format!("{a}:1")))
        });
        if !valid {
            return Err(field.error(Problem::NotOneOf {
                value: shown,
                allowed: "an origin like https://HOST or https://HOST:PORT",
            }));
        }
        allowed_origins.push(origin);
    }
    Ok(allowed_origins)
}

/// Where the values of one load came from: `Origin`s by the index config-rs keeps as a value's
/// origin string, and the origin of every key read so far, for rules across keys.
pub(crate) struct Origins {
    list: Vec<Origin>,
    read: RefCell<HashMap<String, Origin>>,
}

/// A table of the merged tree being read: each known key is taken out, so whatever is left at
/// the end is unknown.
pub(crate) struct Table<'a> {
    path: String,
    entries: Map<String, Value>,
    origins: &'a Origins,
}

impl<'a> Table<'a> {
    fn new(path: String, entries: Map<String, Value>, origins: &'a Origins) -> Self {
        Table {
            path,
            entries,
            origins,
        }
    }

    fn key_of(&self, name: &str) -> String {
        join(&self.path, name)
    }

    /// The value at `name`, or its built-in default. YAML null counts as absent, so `proxy:`
    /// with everything below commented out (as `arca init` writes it) means "all defaults".
    pub(crate) fn field(&mut self, name: &str) -> Field<'a> {
        let key = self.key_of(name);
        let given = self.entries.remove(name);
        // A null keeps its origin: if there is no default, "must not be empty" blames the file.
        let origin = match &given {
            Some(value) => origin_of(value, &self.origins.list),
            None => Origin::Default,
        };
        let value = match given {
            Some(value) if !matches!(value.kind, ValueKind::Nil) => Some(value),
            _ => default_of(&key),
        };
        self.origins
            .read
            .borrow_mut()
            .insert(key.clone(), origin.clone());
        Field {
            key,
            value,
            origin,
            origins: self.origins,
        }
    }

    /// Where the value of a key read before came from (by its full dotted path).
    pub(crate) fn origin_of(&self, key: &str) -> Origin {
        let read = self.origins.read.borrow();
        read.get(key).cloned().unwrap_or(Origin::Default)
    }

    /// Reads the sub-table `name` with `read`, then refuses whatever keys it did not take.
    pub(crate) fn section<T>(
        &mut self,
        name: &str,
        read: impl FnOnce(&mut Table<'a>) -> Result<T, ConfigError>,
    ) -> Result<T, ConfigError> {
        let mut table = self.field(name).table()?;
        let value = read(&mut table)?;
        table.finish()?;
        Ok(value)
    }

    /// All remaining entries as fields, by name so errors come in a stable order.
    fn into_fields(mut self) -> Vec<(String, Field<'a>)> {
        let mut names: Vec<String> = self.entries.keys().cloned().collect();
        names.sort();
        names
            .into_iter()
            .map(|name| {
                let field = self.field(&name);
                (name, field)
            })
            .collect()
    }

    fn finish(self) -> Result<(), ConfigError> {
        match self.entries.iter().min_by(|a, b| a.0.cmp(b.0)) {
            None => Ok(()),
            Some((name, value)) => Err(ConfigError::Invalid {
                key: self.key_of(name),
                problem: Problem::UnknownKey,
                origin: origin_of(value, &self.origins.list),
            }),
        }
    }
}

/// Where a value in the merged tree came from. config-rs rebuilds every table while merging,
/// without an origin, so a table takes the origin of its first leaf that has one. A subtree
/// with no origin at all is an empty YAML map: env and flags only ever bring strings, and
/// defaults are not in the tree.
fn origin_of(value: &Value, origins: &[Origin]) -> Origin {
    fn find<'o>(value: &Value, origins: &'o [Origin]) -> Option<&'o Origin> {
        let own = value
            .origin()
            .and_then(|tag| tag.parse::<usize>().ok())
            .and_then(|i| origins.get(i));
        match (&value.kind, own) {
            (_, Some(origin)) => Some(origin),
            (ValueKind::Table(map), None) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                entries.into_iter().find_map(|(_, v)| find(v, origins))
            }
            (ValueKind::Array(items), None) => items.iter().find_map(|v| find(v, origins)),
            _ => None,
        }
    }
    find(value, origins)
        .or_else(|| origins.iter().find(|o| matches!(o, Origin::File(_))))
        .cloned()
        .unwrap_or(Origin::Default)
}

/// One value with its full key and origin, on its way to a typed value.
pub(crate) struct Field<'a> {
    key: String,
    /// `None`: absent and without a default.
    value: Option<Value>,
    origin: Origin,
    origins: &'a Origins,
}

impl<'a> Field<'a> {
    fn error(&self, problem: Problem) -> ConfigError {
        ConfigError::Invalid {
            key: self.key.clone(),
            problem,
            origin: self.origin.clone(),
        }
    }

    fn wrong_type(&self, expected: &'static str, found: &ValueKind) -> ConfigError {
        self.error(Problem::WrongType {
            expected,
            found: kind_name(found),
        })
    }

    fn table(&self) -> Result<Table<'a>, ConfigError> {
        match self.value.as_ref().map(|v| &v.kind) {
            None => Ok(Table::new(self.key.clone(), Map::new(), self.origins)),
            Some(ValueKind::Table(map)) => {
                Ok(Table::new(self.key.clone(), map.clone(), self.origins))
            }
            Some(other) => Err(self.wrong_type("a map", other)),
        }
    }

    /// A YAML string, strictly: `None` if absent or empty.
    pub(crate) fn optional_text(&self) -> Result<Option<String>, ConfigError> {
        match self.value.as_ref().map(|v| &v.kind) {
            None => Ok(None),
            Some(ValueKind::String(s)) if s.is_empty() => Ok(None),
            Some(ValueKind::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.wrong_type("a string", other)),
        }
    }

    pub(crate) fn text(&self) -> Result<String, ConfigError> {
        self.optional_text()?
            .ok_or_else(|| self.error(Problem::Empty))
    }

    /// A path, kept as written.
    pub(crate) fn path(&self) -> Result<PathBuf, ConfigError> {
        self.text().map(PathBuf::from)
    }

    /// A count above zero, or unset (absent or empty).
    pub(crate) fn optional_count(&self) -> Result<Option<u32>, ConfigError> {
        match self.value.as_ref().map(|v| &v.kind) {
            None => Ok(None),
            Some(ValueKind::String(s)) if s.trim().is_empty() => Ok(None),
            Some(_) => self.positive_integer().map(Some),
        }
    }

    /// A scalar as text, for values with their own syntax: a YAML number there is an invalid
    /// value (`5 is not a duration`), not a type error. Returns the text and how to show it.
    fn scalar(&self) -> Result<(String, String), ConfigError> {
        let value = self
            .value
            .as_ref()
            .ok_or_else(|| self.error(Problem::Empty))?;
        shown(&value.kind).ok_or_else(|| self.wrong_type("a string", &value.kind))
    }

    pub(crate) fn host_port(&self) -> Result<String, ConfigError> {
        let (raw, shown) = self.scalar()?;
        if is_host_port(&raw) {
            Ok(raw)
        } else {
            Err(self.error(Problem::NotHostPort(shown)))
        }
    }

    /// Durations must be strings with a unit: a bare `5` could mean seconds or milliseconds.
    pub(crate) fn duration(&self) -> Result<Duration, ConfigError> {
        let (raw, shown) = self.scalar()?;
        let is_string = matches!(
            self.value.as_ref().map(|v| &v.kind),
            Some(ValueKind::String(_))
        );
        match humantime::parse_duration(&raw) {
            Ok(duration) if is_string => Ok(duration),
            _ => Err(self.error(Problem::NotDuration(shown))),
        }
    }

    /// A duration above zero.
    pub(crate) fn positive_duration(&self) -> Result<Duration, ConfigError> {
        match self.duration()? {
            Duration::ZERO => Err(self.error(Problem::Zero)),
            positive => Ok(positive),
        }
    }

    /// A YAML boolean, or `true`/`false` as text (env and flags give strings).
    pub(crate) fn boolean(&self) -> Result<bool, ConfigError> {
        let (raw, shown) = self.scalar()?;
        match raw.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.error(Problem::NotOneOf {
                value: shown,
                allowed: "true or false",
            })),
        }
    }

    /// A share in percent, 0 to 100: `50` or `50%`.
    pub(crate) fn percent(&self) -> Result<u8, ConfigError> {
        let (raw, shown) = self.scalar()?;
        match raw.trim().trim_end_matches('%').trim().parse::<u8>() {
            Ok(n) if n <= 100 => Ok(n),
            _ => Err(self.error(Problem::NotOneOf {
                value: shown,
                allowed: "a percentage from 0 to 100",
            })),
        }
    }

    /// A count where 0 means "no bound": a YAML integer or a string of digits.
    pub(crate) fn count_or_zero(&self) -> Result<u32, ConfigError> {
        let (raw, shown) = self.scalar()?;
        raw.trim().parse::<u32>().map_err(|_| {
            self.error(Problem::NotOneOf {
                value: shown,
                allowed: "a whole number, 0 or more",
            })
        })
    }

    /// A count: a YAML integer or a string of digits (env and flags give strings), above 0.
    pub(crate) fn positive_integer(&self) -> Result<u32, ConfigError> {
        let (raw, shown) = self.scalar()?;
        match raw.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(self.error(Problem::NotOneOf {
                value: shown,
                allowed: "a whole number above 0",
            })),
        }
    }

    pub(crate) fn endpoint(&self) -> Result<Endpoint, ConfigError> {
        let (raw, shown) = self.scalar()?;
        self.parse_endpoint(&raw, shown)
    }

    fn parse_endpoint(&self, raw: &str, shown: String) -> Result<Endpoint, ConfigError> {
        raw.parse().map_err(|error| {
            self.error(Problem::NotEndpoint {
                value: shown,
                error,
            })
        })
    }

    pub(crate) fn optional_database_url(&self) -> Result<Option<String>, ConfigError> {
        self.optional_url_of(
            &["postgres://", "postgresql://", "sqlite://"],
            Problem::NotDatabaseUrl,
        )
    }

    /// A URL with one of the `schemes` (each `NAME://`), or `None` if absent or empty; any
    /// other is `refused` naming its scheme only (the URL may hold a password).
    fn optional_url_of(
        &self,
        schemes: &[&str],
        refused: fn(String) -> Problem,
    ) -> Result<Option<String>, ConfigError> {
        let Some(url) = self.optional_text()? else {
            return Ok(None);
        };
        if schemes
            .iter()
            .any(|p| url.len() > p.len() && url.starts_with(p))
        {
            Ok(Some(url))
        } else {
            let scheme = url.split_once("://").map_or("(no scheme)", |(s, _)| s);
            Err(self.error(refused(format!("a {scheme:?} URL"))))
        }
    }

    pub(crate) fn optional_url(&self) -> Result<Option<String>, ConfigError> {
        let Some(url) = self.optional_text()? else {
            return Ok(None);
        };
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        match rest.map(|r| r.strip_suffix('/').unwrap_or(r)) {
            Some(host_port) if is_host_port(host_port) => Ok(Some(url)),
            _ => Err(self.error(Problem::NotUrl(format!("{url:?}")))),
        }
    }

    /// An `http(s)://HOST[:PORT]` URL (a trailing `/` allowed); `None` if absent or empty.
    pub(crate) fn optional_endpoint_url(&self) -> Result<Option<String>, ConfigError> {
        let Some(url) = self.optional_text()? else {
            return Ok(None);
        };
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        let authority = rest.map(|r| r.strip_suffix('/').unwrap_or(r));
        // A host without a port is valid exactly when it is with one.
        let valid = authority.is_some_and(|a| is_host_port(a) || is_host_port(&format!("{a}:1")));
        if valid {
            Ok(Some(url))
        } else {
            Err(self.error(Problem::NotUrl(format!("{url:?}"))))
        }
    }

    /// An S3 bucket name as AWS requires it: 3–63 characters of lowercase letters, digits, dots
    /// and hyphens, starting and ending with a letter or digit. `None` if absent or empty.
    pub(crate) fn optional_bucket(&self) -> Result<Option<String>, ConfigError> {
        let Some(name) = self.optional_text()? else {
            return Ok(None);
        };
        let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let valid = (3..=63).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && edge(name.as_bytes().first())
            && edge(name.as_bytes().last());
        if valid {
            Ok(Some(name))
        } else {
            Err(self.error(Problem::NotBucket(format!("{name:?}"))))
        }
    }

    /// A size in bytes (see [`parse_size`]); `None` if absent, empty or 0. At most `i64::MAX`,
    /// which is what the databases store.
    pub(crate) fn optional_size(&self) -> Result<Option<u64>, ConfigError> {
        if self.optional_text().is_ok_and(|text| text.is_none()) {
            return Ok(None);
        }
        let (raw, shown) = self.scalar()?;
        match parse_size(&raw) {
            Ok(0) => Ok(None),
            Ok(bytes) => match i64::try_from(bytes) {
                Ok(bytes) => Ok(Some(bytes.unsigned_abs())),
                Err(_) => Err(self.error(Problem::TooLarge(shown))),
            },
            Err(SizeError::TooLarge) => Err(self.error(Problem::TooLarge(shown))),
            Err(SizeError::Invalid) => Err(self.error(Problem::NotSize(shown))),
        }
    }

    /// A size in bytes; 0 if absent, empty or 0.
    pub(crate) fn size_or_zero(&self) -> Result<u64, ConfigError> {
        Ok(self.optional_size()?.unwrap_or(0))
    }

    pub(crate) fn choice<T>(
        &self,
        allowed: &'static str,
        pick: impl Fn(&str) -> Option<T>,
    ) -> Result<T, ConfigError> {
        let (raw, shown) = self.scalar()?;
        pick(&raw).ok_or_else(|| {
            self.error(Problem::NotOneOf {
                value: shown,
                allowed,
            })
        })
    }

    /// A YAML sequence of scalars, or one string of comma-separated items (as env and flags
    /// give it); items are trimmed and empty ones dropped.
    fn list(&self) -> Result<Vec<(String, String)>, ConfigError> {
        match self.value.as_ref().map(|v| &v.kind) {
            None => Ok(Vec::new()),
            Some(ValueKind::String(s)) => Ok(s
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| (item.to_owned(), format!("{item:?}")))
                .collect()),
            Some(ValueKind::Array(items)) => items
                .iter()
                .map(|item| {
                    shown(&item.kind).ok_or_else(|| self.wrong_type("a string", &item.kind))
                })
                .collect(),
            Some(other) => Err(self.wrong_type("a sequence", other)),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum SizeError {
    Invalid,
    TooLarge,
}

/// A human size: a number, maybe with a decimal fraction, and maybe a unit after it (spaces
/// allowed, any case): `B`, `KB` `MB` `GB` `TB` (powers of 1000, as disk vendors and oCIS
/// count) or `KiB` `MiB` `GiB` `TiB` (powers of 1024). A bare number is bytes. The result must
/// be a whole number of bytes: `1.5KB` is 1500, `0.5B` is refused. One-letter units (`10G`)
/// are refused as ambiguous.
fn parse_size(text: &str) -> Result<u128, SizeError> {
    let text = text.trim();
    let unit_at = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(unit_at);
    let multiplier: u128 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1000u128.pow(2),
        "gb" => 1000u128.pow(3),
        "tb" => 1000u128.pow(4),
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(SizeError::Invalid),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (number.contains('.') && !digits(fraction)) {
        return Err(SizeError::Invalid);
    }
    // value = (whole + fraction / 10^len) * multiplier, in integers: scaled by 10^len.
    let scale = u32::try_from(fraction.len())
        .ok()
        .and_then(|len| 10u128.checked_pow(len))
        .ok_or(SizeError::TooLarge)?;
    let parse = |s: &str| -> Result<u128, SizeError> {
        match s {
            "" => Ok(0),
            s => s.parse().map_err(|_| SizeError::TooLarge),
        }
    };
    let scaled = parse(whole)?
        .checked_mul(scale)
        .and_then(|w| w.checked_add(parse(fraction).ok()?))
        .and_then(|v| v.checked_mul(multiplier))
        .ok_or(SizeError::TooLarge)?;
    if scaled % scale != 0 {
        return Err(SizeError::Invalid);
    }
    Ok(scaled / scale)
}

/// A scalar's text and how an error message shows it: strings quoted, numbers bare.
fn shown(kind: &ValueKind) -> Option<(String, String)> {
    let text = match kind {
        ValueKind::String(s) => return Some((s.clone(), format!("{s:?}"))),
        ValueKind::Boolean(b) => b.to_string(),
        ValueKind::I64(n) => n.to_string(),
        ValueKind::I128(n) => n.to_string(),
        ValueKind::U64(n) => n.to_string(),
        ValueKind::U128(n) => n.to_string(),
        ValueKind::Float(n) => n.to_string(),
        ValueKind::Nil | ValueKind::Table(_) | ValueKind::Array(_) => return None,
    };
    Some((text.clone(), text))
}

fn kind_name(kind: &ValueKind) -> &'static str {
    match kind {
        ValueKind::Nil => "null",
        ValueKind::Boolean(_) => "a boolean",
        ValueKind::I64(_)
        | ValueKind::I128(_)
        | ValueKind::U64(_)
        | ValueKind::U128(_)
        | ValueKind::Float(_) => "a number",
        ValueKind::String(_) => "a string",
        ValueKind::Table(_) => "a map",
        ValueKind::Array(_) => "a sequence",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogFormat;

    fn yaml(path: &str, text: &str) -> Result<Config, ConfigError> {
        load_layers(Some((Path::new(path), text)), [], Overrides::default())
    }

    fn yaml_err(text: &str) -> String {
        match yaml("config/arca.yaml", text) {
            Ok(config) => panic!("accepted: {config:?}"),
            Err(err) => err.to_string(),
        }
    }

    fn env(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let vars = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        load_layers(None, vars, Overrides::default())
    }

    fn flags(list: &[(&str, &str, &str)]) -> Result<Config, ConfigError> {
        let mut flags = Overrides::default();
        for (key, value, flag) in list {
            flags.push(*key, *value, Origin::Flag(flag.to_string()));
        }
        load_layers(None, [], flags)
    }

    #[test]
    fn search_defaults_and_overrides() {
        let config = load(None, [], Overrides::default()).unwrap();
        assert_eq!(config.search.interval, Duration::from_secs(10));
        assert_eq!(config.search.max_content_bytes, 1 << 20);
        let config = flags(&[
            ("search.interval", "250ms", "--set"),
            ("search.max_content_bytes", "10KB", "--set"),
        ])
        .unwrap();
        assert_eq!(config.search.interval, Duration::from_millis(250));
        assert_eq!(config.search.max_content_bytes, 10_000);
        assert!(flags(&[("search.max_content_bytes", "0", "--set")]).is_err());
    }

    #[test]
    fn search_database_is_postgresql_or_unset() {
        let config = load(None, [], Overrides::default()).unwrap();
        assert_eq!(config.search.database, None);
        let url = "postgres://arca:s3cret@db:5432/arca";
        let config = env(&[("ARCA_SEARCH_DATABASE", url)]).unwrap();
        assert_eq!(config.search.database.as_deref(), Some(url));
        // The password never shows in the section's Debug.
        assert!(!format!("{:?}", config.search).contains("s3cret"));
        let err = flags(&[("search.database", "sqlite:///tmp/x.db", "--set")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            r#"search.database: a "sqlite" URL is not a PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DB) (flag --set)"#
        );
    }

    #[test]
    fn thumbnail_resolutions_are_width_x_height() {
        let config = load(None, [], Overrides::default()).unwrap();
        assert_eq!(config.thumbnails.resolutions.len(), 10);
        assert_eq!(config.thumbnails.resolutions[0], (16, 16));
        assert_eq!(config.thumbnails.resolutions[9], (7680, 4320));
        let config = flags(&[("thumbnails.resolutions", "64x32, 640X480", "--set")]).unwrap();
        assert_eq!(config.thumbnails.resolutions, vec![(64, 32), (640, 480)]);
        for bad in ["64x0", "64", "x64", "axb"] {
            let err = flags(&[("thumbnails.resolutions", bad, "--set")]).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "thumbnails.resolutions: {bad:?} is not one of WIDTHxHEIGHT, both above 0 \
                     (flag --set)"
                )
            );
        }
    }

    #[test]
    fn defaults() {
        let config = load(None, [], Overrides::default()).unwrap();
        assert_eq!(config.source, None);
        assert_eq!(config.data_dir, PathBuf::from("./data"));
        assert_eq!(config.services, SERVICE_NAMES);
        assert_eq!(config.log.format, LogFormat::Pretty);
        assert_eq!(config.log.level, "info");
        assert_eq!(config.tracing.otlp.endpoint, None);
        assert_eq!(config.tracing.otlp.service_name, "arca");
        assert_eq!(config.debug.addr, "127.0.0.1:9205");
        assert_eq!(config.shutdown.drain_delay, Duration::ZERO);
        assert_eq!(config.shutdown.timeout, Duration::from_secs(30));
        assert_eq!(config.registry.kind, RegistryKind::Memory);
        assert!(config.registry.static_endpoints.is_empty());
        assert_eq!(config.identity.secret, None);
        assert_eq!(config.identity.admin_password, None);
        assert_eq!(config.proxy.http.addr, "127.0.0.1:9200");
        for name in SERVICE_NAMES {
            assert_eq!(config.endpoint(name), Some(&Endpoint::Mem(name.to_owned())));
        }
        assert_eq!(config.endpoint("nope"), None);
        assert!(config.hosts("gateway"));
        for storage in [&config.storage_users, &config.storage_system] {
            assert_eq!(storage.database, None);
            assert_eq!(storage.personal_quota, None);
        }
        assert_eq!(config.storage_users.blobs, Some(BlobsConfig::Local));
        // storage-system keeps no file contents: it has no blobs keys at all.
        assert_eq!(config.storage_system.blobs, None);
    }

    #[test]
    fn a_full_file_is_read() {
        let config = yaml(
            "arca.yaml",
            r#"
data_dir: /var/lib/arca
services: [gateway, sharing]
log: {format: json, level: "arca=debug,info"}
tracing:
  otlp: {endpoint: "http://otel:4317", service_name: node-a}
debug: {addr: "0.0.0.0:9205"}
shutdown: {drain_delay: 2s, timeout: 1m}
registry:
  kind: static
  static:
    proxy: [tcp://10.0.0.1:9142, "unix:///run/p.sock"]
    storage-users: tcp://a:1, tcp://b:2
identity: {secret: s3, admin_password: "1234"}
proxy: {endpoint: tcp://0.0.0.0:9142, http: {addr: "[::1]:9200"}}
gateway: {endpoint: unix:///run/gw.sock}
"#,
        )
        .unwrap();
        assert_eq!(config.source, Some(PathBuf::from("arca.yaml")));
        assert_eq!(config.data_dir, PathBuf::from("/var/lib/arca"));
        assert_eq!(config.services, ["gateway", "sharing"]);
        assert_eq!(config.log.format, LogFormat::Json);
        assert_eq!(config.log.level, "arca=debug,info");
        assert_eq!(
            config.tracing.otlp.endpoint.as_deref(),
            Some("http://otel:4317")
        );
        assert_eq!(config.tracing.otlp.service_name, "node-a");
        assert_eq!(config.shutdown.drain_delay, Duration::from_secs(2));
        assert_eq!(config.shutdown.timeout, Duration::from_secs(60));
        assert_eq!(config.registry.kind, RegistryKind::Static);
        assert_eq!(
            config.registry.static_endpoints["storage-users"],
            [Endpoint::Tcp("a:1".into()), Endpoint::Tcp("b:2".into())]
        );
        assert_eq!(config.registry.static_endpoints["proxy"].len(), 2);
        assert_eq!(config.identity.admin_password.as_deref(), Some("1234"));
        assert_eq!(config.proxy.http.addr, "[::1]:9200");
        assert_eq!(
            config.endpoint("gateway"),
            Some(&Endpoint::Unix("/run/gw.sock".into()))
        );
        assert_eq!(
            config.endpoint("sharing"),
            Some(&Endpoint::Mem("sharing".into()))
        );
    }

    #[test]
    fn layers_win_in_order_file_env_flags() {
        let text = "debug: {addr: \"a:1\"}\nlog: {level: debug}\nproxy: {http: {addr: \"f:1\"}}";
        let vars = [("ARCA_DEBUG_ADDR", "b:2"), ("ARCA_PROXY_HTTP_ADDR", "e:2")];
        let mut flags = Overrides::default();
        flags.push("debug.addr", "c:3", Origin::Flag("--debug-addr".into()));
        flags.push("debug.addr", "d:4", Origin::Flag("--set".into()));
        let config = load_layers(
            Some((Path::new("f.yaml"), text)),
            vars.map(|(k, v)| (k.to_owned(), v.to_owned())),
            flags,
        )
        .unwrap();
        assert_eq!(config.debug.addr, "d:4");
        assert_eq!(config.proxy.http.addr, "e:2");
        assert_eq!(config.log.level, "debug");
    }

    #[test]
    fn every_env_name_is_read() {
        let config = env(&[
            ("ARCA_DATA_DIR", "/d"),
            ("ARCA_SERVICES", " proxy , gateway "),
            ("ARCA_LOG_FORMAT", "json"),
            ("ARCA_LOG_LEVEL", "warn"),
            ("ARCA_TRACING_OTLP_ENDPOINT", "https://otel:4317/"),
            ("ARCA_DEBUG_ADDR", "0.0.0.0:1"),
            ("ARCA_SHUTDOWN_DRAIN_DELAY", "500ms"),
            ("ARCA_SHUTDOWN_TIMEOUT", "2s"),
            ("ARCA_IDENTITY_SECRET", "sec"),
            ("ARCA_ADMIN_PASSWORD", "pw"),
            ("ARCA_PROXY_HTTP_ADDR", "0.0.0.0:2"),
            ("ARCA_CONFIG", "ignored.yaml"),
            ("ARCA_WHATEVER", "ignored"),
            ("PATH", "/bin"),
        ])
        .unwrap();
        assert_eq!(config.data_dir, PathBuf::from("/d"));
        assert_eq!(config.services, ["proxy", "gateway"]);
        assert_eq!(config.log.format, LogFormat::Json);
        assert_eq!(config.log.level, "warn");
        assert_eq!(
            config.tracing.otlp.endpoint.as_deref(),
            Some("https://otel:4317/")
        );
        assert_eq!(config.debug.addr, "0.0.0.0:1");
        assert_eq!(config.shutdown.drain_delay, Duration::from_millis(500));
        assert_eq!(config.shutdown.timeout, Duration::from_secs(2));
        assert_eq!(config.identity.secret.as_deref(), Some("sec"));
        assert_eq!(config.identity.admin_password.as_deref(), Some("pw"));
        assert_eq!(config.proxy.http.addr, "0.0.0.0:2");
    }

    #[test]
    fn empty_optional_values_mean_unset() {
        let config = env(&[
            ("ARCA_TRACING_OTLP_ENDPOINT", ""),
            ("ARCA_IDENTITY_SECRET", ""),
        ])
        .unwrap();
        assert_eq!(config.tracing.otlp.endpoint, None);
        assert_eq!(config.identity.secret, None);
    }

    #[test]
    fn identity_debug_is_redacted() {
        let config = env(&[
            ("ARCA_IDENTITY_SECRET", "topsecret"),
            ("ARCA_ADMIN_PASSWORD", "hunter2"),
        ])
        .unwrap();
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("topsecret") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"));
        let unset = format!("{:?}", Config::default().identity);
        assert_eq!(
            unset,
            "IdentityConfig { secret: None, admin_password: None }"
        );
    }

    /// config-rs 0.15 keeps keys as written (only its own Environment source lowercases), and
    /// its path syntax allows '-', so `storage-users` works in YAML and in flags, and a key in
    /// another case is simply unknown.
    #[test]
    fn key_case_and_hyphens() {
        let config = yaml(
            "arca.yaml",
            "storage-users: {endpoint: \"tcp://h:1\"}\nstorage-system: {endpoint: \"unix:///s.sock\"}",
        )
        .unwrap();
        assert_eq!(config.storage_users.endpoint, Endpoint::Tcp("h:1".into()));
        assert_eq!(
            config.storage_system.endpoint,
            Endpoint::Unix("/s.sock".into())
        );

        let config = flags(&[("storage-users.endpoint", "tcp://h:2", "--set")]).unwrap();
        assert_eq!(config.storage_users.endpoint, Endpoint::Tcp("h:2".into()));

        assert_eq!(
            yaml_err("Storage-Users: {endpoint: \"tcp://h:1\"}"),
            "Storage-Users: unknown key (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("debug: {Addr: \"h:1\"}"),
            "debug.Addr: unknown key (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("storage_users: {endpoint: \"tcp://h:1\"}"),
            "storage_users: unknown key (config/arca.yaml)"
        );
        let err = flags(&[("Debug.addr", "h:1", "--set")]).unwrap_err();
        assert_eq!(err.to_string(), "Debug: unknown key (flag --set)");
    }

    #[test]
    fn brief_examples() {
        assert_eq!(
            yaml_err("proxy:\n  http:\n    addr: not an address\n"),
            r#"proxy.http.addr: "not an address" is not a host:port (config/arca.yaml)"#
        );
        let err = env(&[("ARCA_SHUTDOWN_TIMEOUT", "soon")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"shutdown.timeout: "soon" is not a duration like 30s or 500ms (env ARCA_SHUTDOWN_TIMEOUT)"#
        );
        let err = yaml("config/g.yaml", "frontend: {endpoint: \"http://x\"}").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"frontend.endpoint: "http://x" is not an endpoint: expected mem://NAME, unix:///PATH or tcp://HOST:PORT (config/g.yaml)"#
        );
        assert_eq!(
            yaml_err("proxy:\n  htp: {addr: \"h:1\"}\n"),
            "proxy.htp: unknown key (config/arca.yaml)"
        );
        let err = flags(&[("services", "proxy,foo", "--services")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"services: "foo" is not a service (one of proxy, frontend, gateway, thumbnails, search, storage-users, storage-system, sharing) (flag --services)"#
        );
        assert_eq!(
            yaml_err("debug:\n  addr: [a, b]\n"),
            "debug.addr: expected a string, found a sequence (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("shutdown:\n  drain_delay: 5\n"),
            "shutdown.drain_delay: 5 is not a duration like 30s or 500ms (config/arca.yaml)"
        );
    }

    #[test]
    fn yaml_syntax_errors_are_one_line_with_a_position() {
        let err = yaml(
            "config/arca.yaml",
            "log:\n  level: info\n    format: json\n",
        )
        .unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.starts_with("config/arca.yaml: YAML syntax error at line 3 column 11: "),
            "{shown}"
        );
        assert!(!shown.contains('\n'));

        let err = yaml("config/arca.yaml", "- a\n- b\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config/arca.yaml: not a map of settings: invalid type: sequence, expected a map"
        );
        let err = yaml("config/arca.yaml", "a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config/arca.yaml: not a map of settings: Got 2 YAML documents, expected 1"
        );
    }

    #[test]
    fn empty_and_comment_only_files_mean_defaults() {
        let mut config = yaml("a.yaml", "").unwrap();
        assert_eq!(config.source, Some(PathBuf::from("a.yaml")));
        config.source = None;
        assert_eq!(config, Config::default());
        let mut config = yaml("a.yaml", "# nothing\nproxy:\n  # endpoint: x\n").unwrap();
        config.source = None;
        assert_eq!(config, Config::default());
    }

    #[test]
    fn services_rules() {
        let err = |v: &str| {
            flags(&[("services", v, "--services")])
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err(""), "services: must not be empty (flag --services)");
        assert_eq!(err(" , "), "services: must not be empty (flag --services)");
        assert_eq!(
            err("proxy,gateway,proxy"),
            r#"services: "proxy" is listed twice (flag --services)"#
        );
        assert_eq!(
            yaml_err("services: []"),
            "services: must not be empty (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("services: [proxy, {a: 1}]"),
            "services: expected a string, found a map (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("services: {a: 1}"),
            "services: expected a sequence, found a map (config/arca.yaml)"
        );
    }

    #[test]
    fn value_rules() {
        let err = |var: &str, v: &str| env(&[(var, v)]).unwrap_err().to_string();
        assert_eq!(
            err("ARCA_SHUTDOWN_TIMEOUT", "0s"),
            "shutdown.timeout: must be longer than 0s (env ARCA_SHUTDOWN_TIMEOUT)"
        );
        assert_eq!(
            err("ARCA_LOG_FORMAT", "xml"),
            r#"log.format: "xml" is not one of pretty, json (env ARCA_LOG_FORMAT)"#
        );
        assert_eq!(
            err("ARCA_TRACING_OTLP_ENDPOINT", "otel:4317"),
            r#"tracing.otlp.endpoint: "otel:4317" is not a URL like http://HOST:PORT or https://HOST:PORT (env ARCA_TRACING_OTLP_ENDPOINT)"#
        );
        assert_eq!(
            err("ARCA_DEBUG_ADDR", "9205"),
            r#"debug.addr: "9205" is not a host:port (env ARCA_DEBUG_ADDR)"#
        );
        assert_eq!(
            err("ARCA_DATA_DIR", ""),
            "data_dir: must not be empty (env ARCA_DATA_DIR)"
        );
        assert_eq!(
            yaml_err("registry: {kind: consul}"),
            r#"registry.kind: "consul" is not one of memory, static, nats, dns (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("identity: {secret: 1234}"),
            "identity.secret: expected a string, found a number (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("debug: 5"),
            "debug: expected a map, found a number (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("debug: {addr: 9205}"),
            "debug.addr: 9205 is not a host:port (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("shutdown: {timeout: \"5\"}"),
            r#"shutdown.timeout: "5" is not a duration like 30s or 500ms (config/arca.yaml)"#
        );
    }

    #[test]
    fn static_registry_rules() {
        assert_eq!(
            yaml_err("registry: {static: {nosuch: [tcp://a:1]}}"),
            r#"registry.static.nosuch: "nosuch" is not a service (one of proxy, frontend, gateway, thumbnails, search, storage-users, storage-system, sharing) (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("registry: {static: {gateway: []}}"),
            "registry.static.gateway: must not be empty (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("registry: {static: {gateway: }}"),
            "registry.static.gateway: must not be empty (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("registry: {static: {gateway: [tcp://a:1, tcp://b]}}"),
            r#"registry.static.gateway: "tcp://b" is not an endpoint: tcp:// needs HOST:PORT with a port in 1..=65535 (config/arca.yaml)"#
        );
        let config = flags(&[("registry.static.gateway", "tcp://a:1,tcp://b:2", "--set")]).unwrap();
        assert_eq!(config.registry.static_endpoints["gateway"].len(), 2);
    }

    #[test]
    fn nats_and_dns_registry_keys() {
        let config = yaml(
            "r.yaml",
            "registry: {kind: nats, nats: {url: 'nats://10.0.0.1:4222, nats://10.0.0.2:4222', bucket: my_reg, ttl: 6500ms}}",
        )
        .unwrap();
        assert_eq!(config.registry.kind, RegistryKind::Nats);
        assert_eq!(
            config.registry.nats.url,
            "nats://10.0.0.1:4222,nats://10.0.0.2:4222"
        );
        assert_eq!(config.registry.nats.bucket, "my_reg");
        // Whole seconds: NATS TTLs count seconds.
        assert_eq!(config.registry.nats.ttl, Duration::from_secs(6));
        let defaults = load(None, [], Overrides::default()).unwrap();
        assert_eq!(defaults.registry.nats.url, "nats://127.0.0.1:4222");
        assert_eq!(defaults.registry.nats.bucket, "arca-registry");
        assert_eq!(defaults.registry.nats.ttl, Duration::from_secs(10));
        assert_eq!(defaults.registry.dns.interval, Duration::from_secs(5));
        assert!(defaults.registry.dns.names.is_empty());
        let config = env(&[("ARCA_REGISTRY_NATS_URL", "nats://user:pw@n1:4222")]).unwrap();
        assert_eq!(config.registry.nats.url, "nats://user:pw@n1:4222");

        assert_eq!(
            yaml_err("registry: {nats: {url: 'http://n:4222'}}"),
            r#"registry.nats.url: "http://n:4222" is not a NATS URL like nats://HOST:PORT (comma-separated for a cluster) (config/arca.yaml)"#
        );
        // A URL with credentials is never echoed.
        assert_eq!(
            yaml_err("registry: {nats: {url: 'nats://u:secret@nohost'}}"),
            "registry.nats.url: the URL is not a NATS URL like nats://HOST:PORT (comma-separated for a cluster) (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("registry: {nats: {bucket: 'a.b'}}"),
            r#"registry.nats.bucket: "a.b" is not a NATS bucket name (letters, digits, - and _) (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("registry: {nats: {ttl: 1s}}"),
            r#"registry.nats.ttl: "1s" is shorter than 3s (config/arca.yaml)"#
        );

        let config = yaml(
            "r.yaml",
            "registry: {kind: dns, dns: {names: {storage-users: 'arca-su.ns.svc.cluster.local:9290'}, interval: 2s}}",
        )
        .unwrap();
        assert_eq!(config.registry.kind, RegistryKind::Dns);
        assert_eq!(
            config.registry.dns.names["storage-users"],
            "arca-su.ns.svc.cluster.local:9290"
        );
        assert_eq!(config.registry.dns.interval, Duration::from_secs(2));
        assert_eq!(
            yaml_err("registry: {dns: {names: {nosuch: 'a:1'}}}"),
            r#"registry.dns.names.nosuch: "nosuch" is not a service (one of proxy, frontend, gateway, thumbnails, search, storage-users, storage-system, sharing) (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("registry: {dns: {names: {gateway: 'gw.local'}}}"),
            r#"registry.dns.names.gateway: "gw.local" is not a host:port (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("registry: {dns: {interval: 0s}}"),
            "registry.dns.interval: must be longer than 0s (config/arca.yaml)"
        );
        let config = flags(&[("registry.dns.names.gateway", "gw:9142", "--set")]).unwrap();
        assert_eq!(config.registry.dns.names["gateway"], "gw:9142");
    }

    #[test]
    fn events_keys() {
        let defaults = load(None, [], Overrides::default()).unwrap();
        assert_eq!(defaults.events.kind, crate::EventsKind::Memory);
        assert_eq!(defaults.events.nats.url, None);
        assert_eq!(defaults.events.nats.stream, "arca-events");
        assert_eq!(defaults.events.nats.ack_wait, Duration::from_secs(30));
        assert_eq!(defaults.events.nats.max_deliver, 10);
        assert_eq!(defaults.events.nats.publish_timeout, Duration::from_secs(2));
        // The URL comes from a NATS registry unless given.
        let config = yaml(
            "e.yaml",
            "registry: {kind: nats, nats: {url: 'nats://n1:4222'}}\nevents: {kind: nats}",
        )
        .unwrap();
        assert_eq!(config.events.kind, crate::EventsKind::Nats);
        assert_eq!(config.events.nats.url.as_deref(), Some("nats://n1:4222"));
        let config = env(&[
            ("ARCA_EVENTS_KIND", "nats"),
            ("ARCA_EVENTS_NATS_URL", "nats://a:1, nats://b:2"),
        ])
        .unwrap();
        assert_eq!(
            config.events.nats.url.as_deref(),
            Some("nats://a:1,nats://b:2")
        );
        let config = yaml(
            "e.yaml",
            "events: {nats: {stream: my_events, ack_wait: 5s, max_deliver: 3, publish_timeout: 500ms}}",
        )
        .unwrap();
        assert_eq!(config.events.nats.stream, "my_events");
        assert_eq!(config.events.nats.ack_wait, Duration::from_secs(5));
        assert_eq!(config.events.nats.max_deliver, 3);
        assert_eq!(
            config.events.nats.publish_timeout,
            Duration::from_millis(500)
        );

        assert_eq!(
            yaml_err("events: {kind: nats}"),
            "events.nats.url: must be set when events.kind is nats and registry.kind is not (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("events: {kind: kafka}"),
            r#"events.kind: "kafka" is not one of memory, nats (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("events: {nats: {url: 'http://n:4222'}}"),
            r#"events.nats.url: "http://n:4222" is not a NATS URL like nats://HOST:PORT (comma-separated for a cluster) (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("events: {nats: {stream: 'a.b'}}"),
            r#"events.nats.stream: "a.b" is not a NATS stream name (letters, digits, - and _) (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("events: {nats: {ack_wait: 0s}}"),
            "events.nats.ack_wait: must be longer than 0s (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("events: {nats: {max_deliver: 0}}"),
            "events.nats.max_deliver: 0 is not one of a whole number above 0 (config/arca.yaml)"
        );
    }

    #[test]
    fn unknown_keys_name_their_origin() {
        assert_eq!(
            yaml_err("extra: 1"),
            "extra: unknown key (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("proxy: {http: {addr: \"h:1\", tls: {}}}"),
            "proxy.http.tls: unknown key (config/arca.yaml)"
        );
        // A null value still names a key that does not exist.
        assert_eq!(
            yaml_err("debug: {port: }"),
            "debug.port: unknown key (config/arca.yaml)"
        );
        let err = flags(&[("proxy.http.port", "1", "--set")]).unwrap_err();
        assert_eq!(err.to_string(), "proxy.http.port: unknown key (flag --set)");
        // A table config-rs made up while merging still reports the flag that caused it.
        let err = flags(&[("new.deep.key", "1", "--set")]).unwrap_err();
        assert_eq!(err.to_string(), "new: unknown key (flag --set)");
    }

    #[test]
    fn dotted_and_malformed_keys_are_refused() {
        assert_eq!(
            yaml_err("proxy.http: {addr: \"h:1\"}"),
            "proxy.http: write nested YAML keys, not dotted ones (config/arca.yaml)"
        );
        for bad in ["", "a..b", "services[0]", "a b", ".x"] {
            let err = flags(&[(bad, "1", "--set")]).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("{bad}: {bad:?} is not a key like proxy.http.addr (flag --set)")
            );
        }
    }

    #[test]
    fn push_set_splits_at_the_first_equals() {
        let mut flags = Overrides::default();
        flags.push_set("log.level=arca=debug").unwrap();
        let err = flags.push_set("log.level").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"set: "log.level" is not KEY=VALUE (flag --set)"#
        );
        let config = load_layers(None, [], flags).unwrap();
        assert_eq!(config.log.level, "arca=debug");
    }

    #[test]
    fn errors_are_one_line_even_for_odd_values() {
        let err = env(&[("ARCA_DEBUG_ADDR", "a\nb")]).unwrap_err().to_string();
        assert_eq!(
            err,
            r#"debug.addr: "a\nb" is not a host:port (env ARCA_DEBUG_ADDR)"#
        );
    }

    fn s3_of(storage: &StorageSection) -> &S3Config {
        match &storage.blobs {
            Some(BlobsConfig::S3(s3)) => s3,
            other => panic!("not s3: {other:?}"),
        }
    }

    #[test]
    fn s3_blobs_from_yaml() {
        let config = yaml(
            "arca.yaml",
            r#"
storage-users:
  personal_quota: 10GiB
  blobs:
    kind: s3
    s3:
      endpoint: "http://minio:9000"
      bucket: arca-users
      access_key_id: AKIA1
      secret_access_key: "s3cr3t"
      read_timeout: 3s
"#,
        )
        .unwrap();
        assert_eq!(config.storage_users.personal_quota, Some(10 << 30));
        assert_eq!(
            s3_of(&config.storage_users),
            &S3Config {
                endpoint: Some("http://minio:9000".into()),
                bucket: "arca-users".into(),
                region: "us-east-1".into(),
                access_key_id: Some("AKIA1".into()),
                secret_access_key: Some("s3cr3t".into()),
                read_timeout: Duration::from_secs(3),
            }
        );
        assert_eq!(config.storage_system.personal_quota, None);
        // storage-system stores no file contents: a blobs section there is a mistake.
        assert_eq!(
            yaml_err("storage-system: {blobs: {kind: s3, s3: {bucket: arca.system}}}"),
            "storage-system.blobs: unknown key (config/arca.yaml)"
        );

        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(
            shown.contains("secret_access_key: Some(\"<redacted>\")"),
            "{shown}"
        );
        assert!(
            shown.contains("AKIA1"),
            "the key id names the credentials: {shown}"
        );
    }

    #[test]
    fn storage_env_names_are_read() {
        let config = env(&[
            ("ARCA_STORAGE_USERS_PERSONAL_QUOTA", "500MB"),
            ("ARCA_STORAGE_USERS_BLOBS_KIND", "s3"),
            ("ARCA_STORAGE_USERS_S3_ENDPOINT", "https://s3.example.com/"),
            ("ARCA_STORAGE_USERS_S3_BUCKET", "u-bucket"),
            ("ARCA_STORAGE_USERS_S3_REGION", "garage"),
            ("ARCA_STORAGE_USERS_S3_ACCESS_KEY_ID", "uid"),
            ("ARCA_STORAGE_USERS_S3_SECRET_ACCESS_KEY", "usecret"),
        ])
        .unwrap();
        assert_eq!(config.storage_users.personal_quota, Some(500_000_000));
        assert_eq!(
            s3_of(&config.storage_users),
            &S3Config {
                endpoint: Some("https://s3.example.com/".into()),
                bucket: "u-bucket".into(),
                region: "garage".into(),
                access_key_id: Some("uid".into()),
                secret_access_key: Some("usecret".into()),
                read_timeout: Duration::from_secs(10),
            }
        );
    }

    #[test]
    fn s3_rules() {
        let err = yaml("config/x.yaml", "storage-users: {blobs: {kind: s3}}")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "storage-users.blobs.s3.bucket: must not be empty when blobs.kind is s3 (config/x.yaml)"
        );
        let err = env(&[("ARCA_STORAGE_USERS_BLOBS_KIND", "s3")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "storage-users.blobs.s3.bucket: must not be empty when blobs.kind is s3 (env ARCA_STORAGE_USERS_BLOBS_KIND)"
        );
        assert_eq!(
            yaml_err("storage-users: {blobs: {s3: {bucket: arca}}}"),
            "storage-users.blobs.s3.bucket: is only used when blobs.kind is s3 (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("storage-users: {blobs: {kind: S3}}"),
            r#"storage-users.blobs.kind: "S3" is not one of local, s3 (config/arca.yaml)"#
        );
        let err = env(&[
            ("ARCA_STORAGE_USERS_BLOBS_KIND", "s3"),
            ("ARCA_STORAGE_USERS_S3_BUCKET", "arca"),
            ("ARCA_STORAGE_USERS_S3_ACCESS_KEY_ID", "id"),
        ])
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "storage-users.blobs.s3.access_key_id: must be set together with blobs.s3.secret_access_key (env ARCA_STORAGE_USERS_S3_ACCESS_KEY_ID)"
        );
        assert_eq!(
            yaml_err("storage-users: {blobs: {s3: {secret_access_key: x}}}"),
            "storage-users.blobs.s3.secret_access_key: must be set together with blobs.s3.access_key_id (config/arca.yaml)"
        );
        for bad in [
            "ab",
            "Arca",
            "arca_files",
            "-arca",
            "arca.",
            "s3://arca",
            "a/b",
        ] {
            assert_eq!(
                yaml_err(&format!(
                    "storage-users: {{blobs: {{kind: s3, s3: {{bucket: {bad:?}}}}}}}"
                )),
                format!(
                    "storage-users.blobs.s3.bucket: {bad:?} is not an S3 bucket name (3 to 63 lowercase letters, digits, dots and hyphens) (config/arca.yaml)"
                )
            );
        }
        for bad in [
            "minio:9000",
            "s3://minio",
            "http://",
            "http://a b",
            "ftp://minio",
        ] {
            assert_eq!(
                yaml_err(&format!(
                    "storage-users: {{blobs: {{s3: {{endpoint: {bad:?}}}}}}}"
                )),
                format!(
                    "storage-users.blobs.s3.endpoint: {bad:?} is not a URL like http://HOST:PORT or https://HOST:PORT (config/arca.yaml)"
                )
            );
        }
        assert_eq!(
            yaml_err("storage-users: {blobs: {kind: s3, s3: {bucket: arca, region: \"\"}}}"),
            "storage-users.blobs.s3.region: must not be empty (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("storage-users: {blobs: {s3: {buket: arca}}}"),
            "storage-users.blobs.s3.buket: unknown key (config/arca.yaml)"
        );
        // An empty value is unset, as for every optional key.
        let config = yaml(
            "a.yaml",
            "storage-users: {blobs: {kind: local, s3: {bucket: \"\"}}}",
        );
        assert_eq!(
            config.unwrap().storage_users.blobs,
            Some(BlobsConfig::Local)
        );
    }

    #[test]
    fn the_retry_buffer_is_a_size_and_0_keeps_none() {
        let defaults = yaml("a.yaml", "").unwrap();
        assert_eq!(defaults.transport.max_buffered_body, 1 << 20);
        let config = yaml("a.yaml", "transport: {retry: {max_buffered_body: 4MiB}}").unwrap();
        assert_eq!(config.transport.max_buffered_body, 4 << 20);
        let config = env(&[("ARCA_TRANSPORT_RETRY_MAX_BUFFERED_BODY", "0")]).unwrap();
        assert_eq!(config.transport.max_buffered_body, 0);
        assert_eq!(
            yaml_err("transport: {retry: {max_buffered_body: lots}}"),
            "transport.retry.max_buffered_body: \"lots\" is not a size like 10GiB, 500MB or 1048576 (whole bytes) (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("transport: {retry: {buffer: 1}}"),
            "transport.retry.buffer: unknown key (config/arca.yaml)"
        );
    }

    #[test]
    fn inline_max_rules() {
        let inline = |v: &str| {
            flags(&[("storage-users.inline_max", v, "--set")])
                .map(|c| c.storage_users.inline_max)
                .map_err(|e| e.to_string())
        };
        assert_eq!(inline(""), Ok(0));
        assert_eq!(flags(&[]).unwrap().storage_users.inline_max, 64 << 10);
        assert_eq!(inline("0"), Ok(0));
        assert_eq!(inline("1MiB"), Ok(1 << 20));
        assert_eq!(
            inline("2MiB"),
            Err(r#"storage-users.inline_max: "2MiB" is above 1MiB (flag --set)"#.to_owned())
        );
        assert_eq!(flags(&[]).unwrap().storage_system.inline_max, 0);
    }

    #[test]
    fn personal_quota_rules() {
        let quota = |v: &str| {
            flags(&[("storage-users.personal_quota", v, "--set")])
                .map(|c| c.storage_users.personal_quota)
                .map_err(|e| e.to_string())
        };
        assert_eq!(quota("1048576"), Ok(Some(1 << 20)));
        assert_eq!(quota("10GiB"), Ok(Some(10 << 30)));
        assert_eq!(quota("1.5 GB"), Ok(Some(1_500_000_000)));
        assert_eq!(quota(""), Ok(None));
        assert_eq!(quota("0"), Ok(None));
        assert_eq!(
            quota("10G"),
            Err(r#"storage-users.personal_quota: "10G" is not a size like 10GiB, 500MB or 1048576 (whole bytes) (flag --set)"#.to_owned())
        );
        assert_eq!(
            quota("10000000TB"),
            Err(r#"storage-users.personal_quota: "10000000TB" is too large (at most 8 EiB) (flag --set)"#.to_owned())
        );
        // YAML numbers are bytes; a fraction of a byte is not a size.
        let config = yaml("a.yaml", "storage-users: {personal_quota: 2048}").unwrap();
        assert_eq!(config.storage_users.personal_quota, Some(2048));
        assert_eq!(
            yaml_err("storage-users: {personal_quota: 1.5}"),
            "storage-users.personal_quota: 1.5 is not a size like 10GiB, 500MB or 1048576 (whole bytes) (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("storage-users: {personal_quota: -1}"),
            "storage-users.personal_quota: -1 is not a size like 10GiB, 500MB or 1048576 (whole bytes) (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("storage-users: {personal_quota: [1]}"),
            "storage-users.personal_quota: expected a string, found a sequence (config/arca.yaml)"
        );
        // storage-system has no personal spaces.
        assert_eq!(
            yaml_err("storage-system: {personal_quota: 1GiB}"),
            "storage-system.personal_quota: unknown key (config/arca.yaml)"
        );
    }

    #[test]
    fn sizes() {
        let ok = [
            ("0", 0),
            ("7", 7),
            ("7B", 7),
            ("7 b", 7),
            ("1KB", 1000),
            ("1kb", 1000),
            ("1KiB", 1024),
            ("2MB", 2_000_000),
            ("2MiB", 2 << 20),
            ("3GB", 3_000_000_000),
            ("3GiB", 3 << 30),
            ("4TB", 4_000_000_000_000),
            ("4TiB", 4 << 40),
            ("0.5KiB", 512),
            ("1.25 MB", 1_250_000),
            (" 10GiB ", 10 << 30),
        ];
        for (text, bytes) in ok {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in [
            "", "GiB", "1..5GB", ".5GB", "5.GB", "1.5B", "0.0001KB", "1 0", "1e9", "-1", "10G",
            "10 GiBs", "1,5GB", "ten",
        ] {
            assert_eq!(parse_size(bad), Err(SizeError::Invalid), "{bad:?}");
        }
        assert_eq!(
            parse_size("999999999999999999999999999999999999999999"),
            Err(SizeError::TooLarge)
        );
        assert_eq!(
            parse_size("340282366920938463463374607431768211455TiB"),
            Err(SizeError::TooLarge)
        );
    }

    #[test]
    fn provisioning_limits_and_pool_sizes() {
        let config = Config::default();
        let defaults = crate::WorkLimits {
            concurrency: 8,
            rate: 1000,
            burst: 1000,
        };
        assert_eq!(config.storage_users.provisioning, Some(defaults));
        assert_eq!(config.storage_system.provisioning, None);
        assert_eq!(config.storage_users.database_max_connections, None);
        let config = yaml(
            "a.yaml",
            "proxy: {oidc: {issuer: https://idp.example/realms/x, provisioning: {rate: 5}}}\n\
             storage-users: {database_max_connections: 32, provisioning: {concurrency: 2, burst: 1}}\n\
             storage-system: {database_max_connections: \"4\"}",
        )
        .unwrap();
        let oidc = config.proxy.oidc.unwrap();
        assert_eq!(oidc.provisioning.rate, 5);
        assert_eq!(oidc.provisioning.concurrency, 8);
        let users = &config.storage_users;
        assert_eq!(users.database_max_connections, Some(32));
        assert_eq!(
            users.provisioning,
            Some(crate::WorkLimits {
                concurrency: 2,
                rate: 1000,
                burst: 1
            })
        );
        assert_eq!(config.storage_system.database_max_connections, Some(4));
        assert_eq!(
            yaml_err("storage-users: {provisioning: {rate: 0}}"),
            "storage-users.provisioning.rate: 0 is not one of a whole number above 0 (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("storage-system: {database_max_connections: 0}"),
            "storage-system.database_max_connections: 0 is not one of a whole number above 0 (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("storage-system: {provisioning: {rate: 1}}"),
            "storage-system.provisioning: unknown key (config/arca.yaml)"
        );
    }

    #[test]
    fn proxy_edge_keys() {
        let defaults = load(None, [], Overrides::default()).unwrap();
        assert_eq!(defaults.proxy.tls, None);
        assert_eq!(defaults.proxy.limits.max_header_bytes, 64 << 10);
        assert_eq!(defaults.proxy.limits.max_body_bytes, None);
        assert_eq!(
            defaults.proxy.limits.header_timeout,
            Duration::from_secs(20)
        );
        assert_eq!(defaults.proxy.limits.idle_timeout, Duration::from_secs(300));
        assert!(defaults.proxy.cors.allowed_origins.is_empty());
        assert_eq!(defaults.proxy.oidc, None);

        let config = yaml(
            "e.yaml",
            "proxy: {tls: {cert: c.pem, key: k.pem}, limits: {max_body_bytes: 1MiB}, cors: {allowed_origins: ['https://Web.example.com', 'http://localhost:9100']}, oidc: {issuer: 'https://idp.example.com/realms/arca', audience: arca, provision: false}}",
        )
        .unwrap();
        let tls = config.proxy.tls.unwrap();
        assert_eq!((tls.cert, tls.key), ("c.pem".into(), "k.pem".into()));
        assert_eq!(config.proxy.limits.max_body_bytes, Some(1 << 20));
        assert_eq!(
            config.proxy.cors.allowed_origins,
            ["https://web.example.com", "http://localhost:9100"]
        );
        let oidc = config.proxy.oidc.unwrap();
        assert_eq!(oidc.issuer, "https://idp.example.com/realms/arca");
        assert_eq!(oidc.audience.as_deref(), Some("arca"));
        assert_eq!(oidc.user_claim, "preferred_username");
        assert!(!oidc.provision);

        assert_eq!(
            yaml_err("proxy: {tls: {cert: c.pem}}"),
            "proxy.tls.cert: must be set together with proxy.tls.key (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("proxy: {limits: {max_header_bytes: 0}}"),
            "proxy.limits.max_header_bytes: 0 is not one of a size above 0, like 64KiB (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("proxy: {limits: {header_timeout: 0s}}"),
            "proxy.limits.header_timeout: must be longer than 0s (config/arca.yaml)"
        );
        assert_eq!(
            yaml_err("proxy: {cors: {allowed_origins: ['*']}}"),
            r#"proxy.cors.allowed_origins: "*" is not one of an origin like https://HOST or https://HOST:PORT (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("proxy: {oidc: {issuer: 'idp.example.com'}}"),
            r#"proxy.oidc.issuer: "idp.example.com" is not one of an issuer URL like https://HOST[:PORT][/PATH] (config/arca.yaml)"#
        );
        assert_eq!(
            yaml_err("proxy: {oidc: {provision: maybe}}"),
            r#"proxy.oidc.provision: "maybe" is not one of true, false (config/arca.yaml)"#
        );
    }
}
