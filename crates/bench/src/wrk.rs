//! Running wrk the one way every section does: `-t2 -c16` for a duration with a Lua script
//! whose `done()` prints one `RESULT key=value …` line (and any other lines the section
//! reads), failing with wrk's own output when it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, ensure};

/// Connections wrk keeps open, the load of every benchmark line.
pub(crate) const CONNECTIONS: usize = 16;
pub(crate) const THREADS: usize = 2;
/// Per request: a slow answer counts as slow, not as an error.
const TIMEOUT: &str = "30s";

/// What one wrk run printed.
pub(crate) struct Output {
    pub(crate) text: String,
    result: String,
}

impl Output {
    /// A numeric field of the `RESULT` line.
    pub(crate) fn field(&self, key: &str) -> anyhow::Result<u64> {
        self.result
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {key} in {:?}", self.result))
    }

    /// `duration_us` as a duration, refusing a run of no time.
    pub(crate) fn elapsed(&self) -> anyhow::Result<Duration> {
        let elapsed = Duration::from_micros(self.field("duration_us")?);
        ensure!(!elapsed.is_zero(), "wrk ran for no time");
        Ok(elapsed)
    }
}

/// Reads wrk's output: the `RESULT` line must be there.
pub(crate) fn parse(text: &str) -> anyhow::Result<Output> {
    let result = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .context("no RESULT line")?
        .to_owned();
    Ok(Output {
        text: text.to_owned(),
        result,
    })
}

/// A program on the PATH.
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// One run of `script` against `url` for `d`.
pub(crate) fn run(script: &Path, url: &str, d: Duration) -> anyhow::Result<Output> {
    let out = Command::new(find_program("wrk").context("wrk not found")?)
        .arg(format!("-t{THREADS}"))
        .arg(format!("-c{CONNECTIONS}"))
        .arg(format!("-d{}s", d.as_secs()))
        .args(["--timeout", TIMEOUT, "-s"])
        .arg(script)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .context("running wrk")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "wrk {url} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&stdout).with_context(|| format!("wrk output for {url}:\n{stdout}"))
}
