//! Loading real files: the origin in errors is the path as given.

use std::path::{Path, PathBuf};

use arca_config::{Config, ConfigError, Origin, Overrides, init_template, load};

/// A file of our own under the system temp dir, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let dir = std::env::temp_dir().join(format!("arca-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn load_file(path: &Path) -> Result<Config, ConfigError> {
    load(Some(path), [], Overrides::default())
}

#[test]
fn missing_file_names_the_path() {
    let err = load_file(Path::new("config/arca.yaml")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "config/arca.yaml: cannot read: No such file or directory (os error 2)"
    );
}

#[test]
fn errors_name_the_file_as_given() {
    let file = TempFile::new("bad.yaml", "proxy:\n  http:\n    addr: not an address\n");
    let err = load_file(&file.0).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            r#"proxy.http.addr: "not an address" is not a host:port ({})"#,
            file.0.display()
        )
    );
}

#[test]
fn syntax_error_is_one_line() {
    let file = TempFile::new("syntax.yaml", "log:\n  level: [info\n");
    let err = load_file(&file.0).unwrap_err().to_string();
    let prefix = format!("{}: YAML syntax error at line ", file.0.display());
    assert!(err.starts_with(&prefix), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn init_template_round_trips_through_a_file() {
    let file = TempFile::new("init.yaml", &init_template("abc123", "007"));
    let config = load_file(&file.0).unwrap();
    assert_eq!(config.source.as_deref(), Some(file.0.as_path()));
    assert_eq!(config.identity.secret.as_deref(), Some("abc123"));
    assert_eq!(config.identity.admin_password.as_deref(), Some("007"));
    assert_eq!(config.services, arca_config::SERVICE_NAMES);
}

#[test]
fn flags_beat_env_beat_file() {
    let file = TempFile::new("layers.yaml", "services: [proxy]\nlog: {level: debug}\n");
    let env = [("ARCA_SERVICES".to_owned(), "gateway".to_owned())];
    let mut flags = Overrides::default();
    flags.push("log.level", "trace", Origin::Flag("--log-level".into()));
    let config = load(Some(&file.0), env, flags).unwrap();
    assert_eq!(config.services, ["gateway"]);
    assert_eq!(config.log.level, "trace");
}
