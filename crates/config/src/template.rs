//! What `arca init` writes: a commented YAML file with every key, and fresh secrets.

use std::fmt::Write as _;

use rand::Rng as _;

use crate::keys::{DefaultValue, KEYS};

const HEADER: &str = "\
# arca configuration, written by `arca init`.
#
# Layers, later wins: built-in defaults < this file < ARCA_* environment variables
# < command-line flags (`--set KEY=VALUE` takes any dotted key, e.g. proxy.http.addr).
# Every key is listed with its default. A commented-out key keeps the built-in default,
# so a later arca can improve it; unknown keys are refused.
# Durations: 500ms, 30s, 1m. Addresses: HOST:PORT.
# Endpoints: mem://NAME (in this process), unix:///PATH or tcp://HOST:PORT.
";

/// The `arca init` file: every key with its default commented out, its environment variable
/// and why it exists; `identity.secret` and `identity.admin_password` set to the given values.
pub fn init_template(secret: &str, admin_password: &str) -> String {
    render(
        &[
            ("identity.secret", secret),
            ("identity.admin_password", admin_password),
        ],
        false,
    )
}

/// Renders the template; `all_set` writes every default uncommented (tests load that back).
pub(crate) fn render(values: &[(&str, &str)], all_set: bool) -> String {
    let mut out = String::from(HEADER);
    // The sections currently open, to write each parent key once before its children.
    let mut open: Vec<&str> = Vec::new();
    for key in KEYS.iter() {
        let parts: Vec<&str> = key.path.split('.').collect();
        let (leaf, parents) = match parts.split_last() {
            Some(split) => split,
            None => continue,
        };
        let common = open.iter().zip(parents).take_while(|(a, b)| a == b).count();
        open.truncate(common);
        if common == 0 {
            out.push('\n');
        }
        for parent in &parents[common..] {
            let _ = writeln!(out, "{}{parent}:", indent(open.len()));
            open.push(parent);
        }
        let pad = indent(open.len());
        let env = match key.env {
            Some(var) => format!("env {var}"),
            None => "no env var".to_owned(),
        };
        let _ = writeln!(out, "{pad}# {} [{env}]", key.why);
        let given = values.iter().find(|(path, _)| *path == key.path);
        let (comment, value) = match given {
            Some((_, value)) => ("", quote(value)),
            None => (if all_set { "" } else { "# " }, yaml(&key.default)),
        };
        let _ = writeln!(out, "{pad}{comment}{leaf}: {value}");
    }
    out
}

fn indent(depth: usize) -> String {
    "  ".repeat(depth)
}

fn yaml(default: &DefaultValue) -> String {
    match default {
        DefaultValue::Unset => "\"\"".to_owned(),
        DefaultValue::Text(text) => quote(text),
        // Quoted: a pattern such as `*.tmp` would be a YAML alias bare.
        DefaultValue::List(items) => {
            let items: Vec<String> = items.iter().map(|i| quote(i)).collect();
            format!("[{}]", items.join(", "))
        }
        DefaultValue::EmptyMap => "{}".to_owned(),
    }
}

/// A YAML double-quoted scalar, so that a secret like `1234` stays a string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `bytes` random bytes from the thread-local CSPRNG (ChaCha seeded from the OS), as lowercase
/// hex: URL-safe and unambiguous in YAML once quoted.
pub fn generate_secret(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    buf.iter()
        .fold(String::with_capacity(bytes * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_layers;
    use crate::{Config, Overrides};
    use std::path::Path;

    fn load_text(text: &str) -> Result<Config, crate::ConfigError> {
        load_layers(
            Some((Path::new("arca.yaml"), text)),
            [],
            Overrides::default(),
        )
    }

    #[test]
    fn init_template_loads_back_to_defaults_and_secrets() {
        let secret = generate_secret(32);
        let password = "12\"34\\ü\n";
        let text = init_template(&secret, password);
        let config = load_text(&text).unwrap();
        let defaults = Config::default();
        let expected = Config {
            source: Some("arca.yaml".into()),
            identity: crate::IdentityConfig {
                secret: Some(secret),
                admin_password: Some(password.to_owned()),
            },
            ..defaults
        };
        assert_eq!(config, expected);
    }

    #[test]
    fn template_lists_every_key_and_env_name() {
        let text = init_template("s", "p");
        for key in KEYS.iter() {
            let leaf = key.path.rsplit('.').next().unwrap();
            assert!(text.contains(&format!("{leaf}: ")), "{} missing", key.path);
            if let Some(var) = key.env {
                assert!(text.contains(var), "{var} missing");
            }
        }
    }

    #[test]
    fn every_default_in_the_template_is_valid_and_is_the_default() {
        let text = render(&[], true);
        assert!(!text.contains("\n# data_dir"), "{text}");
        let mut config = load_text(&text).unwrap();
        config.source = None;
        assert_eq!(config, Config::default());
    }

    /// Keys four levels deep render under their parents and load back.
    #[test]
    fn nested_storage_keys_render_and_load_back() {
        let text = render(
            &[
                ("storage-users.personal_quota", "10GiB"),
                ("storage-users.blobs.kind", "s3"),
                ("storage-users.blobs.s3.bucket", "arca-users"),
                ("storage-users.blobs.s3.endpoint", "http://127.0.0.1:9000"),
            ],
            false,
        );
        assert!(
            text.contains("  blobs:\n    # Where file contents live"),
            "{text}"
        );
        assert!(text.contains("\n      bucket: \"arca-users\"\n"), "{text}");
        let config = load_text(&text).unwrap();
        assert_eq!(config.storage_users.personal_quota, Some(10 << 30));
        let Some(crate::BlobsConfig::S3(s3)) = &config.storage_users.blobs else {
            panic!("{:?}", config.storage_users);
        };
        assert_eq!(s3.bucket, "arca-users");
        assert_eq!(s3.region, "us-east-1");
        assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(config.storage_system.blobs, None);
    }

    #[test]
    fn secrets_are_hex_of_the_asked_length_and_differ() {
        let a = generate_secret(32);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, generate_secret(32));
    }
}
