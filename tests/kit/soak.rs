//! The soak load: what a crowd of real sync clients does to arca, through the proxy, while a
//! test (tests/soak.rs) or the benchmark (`arca-bench soak`) restarts the processes behind it.
//!
//! Each [`Soak`] client keeps one HTTP/1.1 connection alive (as sync clients do) and loops over
//! its own folder: PUT of a 1 KB, 4 KiB or 70 KB body onto one of [`NAMES`] names (so names are
//! overwritten again and again), GET of that name with the bytes compared, PROPFIND Depth 1 of
//! the folder with the name listed at its new length; every eighth round also a MKCOL of a new
//! folder, the one request here that is not idempotent. Optional "big" clients PUT and GET a
//! body above `transport.retry.max_buffered_body` (2 MiB), the case no hop may buffer whole.
//!
//! Every answer is checked and counted in the phase it started in ([`Soak::phase`]), with its
//! latency. A failure is a wrong status, wrong or short bytes, or a broken connection. Two
//! answers are not failures but are counted and shown: 503 with `Retry-After` to a MKCOL (not
//! idempotent: nobody may send it again without proof it was not processed) and to a big PUT
//! (too large to keep for a retry). After either, the next read of the name must give the old
//! content or the new one whole, and the ledger learns which. While the caller says a disk
//! below arca is full ([`Soak::disk_full`]), a 507 to a PUT or a MKCOL is the right answer:
//! counted and shown too, and a failure at any other time.
//!
//! The ledger keeps every acknowledged write (name → length and seed of its bytes); [`verify`]
//! reads every name back at the end and compares.
//!
//! [`Faults`] are the clients nobody wants: uploads abandoned mid-body, bodies shorter than
//! their `Content-Length`, requests sent and reset at once by the thousand. They must cost the
//! others nothing, so they run beside the load and the load must stay clean.
//!
//! [`Idle`] holds many keep-alive connections open without traffic, then uses each again.
//!
//! [`verify`]: Soak::verify

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::pattern;

/// Names each client overwrites in turn.
pub const NAMES: usize = 40;
/// Body sizes of the normal clients: 1 KB, 4 KiB, 70 KB (an answer of several DATA frames).
pub const SIZES: [usize; 3] = [1000, 4096, 70_000];
/// The big clients' body: above the 1 MiB a hop keeps for a retry.
pub const BIG: usize = 2 << 20;
/// How long one request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Every this many rounds a client also makes a folder (not idempotent).
const MKCOL_EVERY: u64 = 8;
const PROPFIND_BODY: &str = r#"<?xml version="1.0" encoding="utf-8"?><d:propfind xmlns:d="DAV:"><d:prop><d:getcontentlength/><d:getetag/><d:resourcetype/></d:prop></d:propfind>"#;

/// What a soak runs.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// Normal clients.
    pub clients: usize,
    /// Clients moving [`BIG`] bodies.
    pub big_clients: usize,
    /// Prefix of every path: clients of two soaks on one server stay apart.
    pub root: String,
}

impl Default for SoakConfig {
    fn default() -> Self {
        Self {
            clients: 8,
            big_clients: 1,
            root: "soak".to_owned(),
        }
    }
}

/// What happened in one phase.
#[derive(Default, Clone, Debug)]
pub struct PhaseStats {
    pub name: String,
    pub requests: u64,
    pub failures: Vec<String>,
    /// 503 + Retry-After to a request that is not idempotent (MKCOL): allowed, shown.
    pub unretryable_503: u64,
    /// 503 + Retry-After to a PUT too big to keep for a retry: allowed, shown.
    pub big_put_503: u64,
    /// 507 to a write sent while a disk was full: allowed, shown.
    pub full_507: u64,
    latencies_us: Vec<u32>,
    pub started: Option<Instant>,
    pub ended: Option<Instant>,
}

impl PhaseStats {
    /// The 99th percentile latency.
    pub fn p99(&self) -> Duration {
        percentile(&self.latencies_us, 0.99)
    }

    pub fn duration(&self) -> Duration {
        match (self.started, self.ended) {
            (Some(s), Some(e)) => e - s,
            _ => Duration::ZERO,
        }
    }
}

fn percentile(samples: &[u32], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    Duration::from_micros(u64::from(sorted[at]))
}

/// The phases of a run, in order, and the one requests are counted in now.
#[derive(Default)]
struct Phases {
    list: Mutex<Vec<PhaseStats>>,
    current: AtomicUsize,
    /// A disk below arca is full: a write may be refused with 507.
    disk_full: AtomicBool,
}

impl Phases {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<PhaseStats>> {
        self.list.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn begin(&self, name: &str) {
        let mut list = self.lock();
        let now = Instant::now();
        if let Some(last) = list.last_mut() {
            last.ended = Some(now);
        }
        list.push(PhaseStats {
            name: name.to_owned(),
            started: Some(now),
            ..PhaseStats::default()
        });
        self.current.store(list.len() - 1, Ordering::Release);
    }

    fn now(&self) -> usize {
        self.current.load(Ordering::Acquire)
    }

    fn record(&self, phase: usize, took: Duration, outcome: Outcome) {
        let mut list = self.lock();
        let Some(p) = list.get_mut(phase) else {
            return;
        };
        p.requests += 1;
        p.latencies_us
            .push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
        match outcome {
            Outcome::Ok => {}
            Outcome::Failed(why) => p.failures.push(why),
            Outcome::Unretryable503 => p.unretryable_503 += 1,
            Outcome::BigPut503 => p.big_put_503 += 1,
            Outcome::Full507 => p.full_507 += 1,
        }
    }
}

enum Outcome {
    Ok,
    Failed(String),
    Unretryable503,
    BigPut503,
    Full507,
}

/// What a name holds, as far as the client knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// Acknowledged: this length and seed.
    Known(usize, u32),
    /// A PUT of `new` was answered 503 after `old`: either may be there, whole.
    Either {
        old: Option<(usize, u32)>,
        new: (usize, u32),
    },
}

/// Acknowledged writes: path → what it holds.
type Ledger = Arc<Mutex<BTreeMap<String, Held>>>;

/// A running soak load.
pub struct Soak {
    addr: String,
    authorization: String,
    stop: Arc<AtomicBool>,
    phases: Arc<Phases>,
    ledger: Ledger,
    ok: Arc<AtomicU64>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

/// The run's numbers, phase by phase.
pub struct Report {
    pub phases: Vec<PhaseStats>,
}

impl Soak {
    /// Makes the folders (before any phase: setup, not load) and starts the clients; requests
    /// are counted in phase `first`.
    pub async fn start(
        addr: &str,
        authorization: &str,
        config: &SoakConfig,
        first: &str,
    ) -> anyhow::Result<Self> {
        let mut conn = KeepAlive::new(addr);
        let root = format!("/remote.php/webdav/{}", config.root);
        let mut folders = vec![root.clone()];
        for c in 0..config.clients {
            folders.push(format!("{root}/c{c}"));
            folders.push(format!("{root}/c{c}-dirs"));
        }
        for folder in &folders {
            let got = conn
                .send(
                    "MKCOL",
                    folder,
                    &[("authorization", authorization)],
                    Bytes::new(),
                )
                .await?;
            if got.status != 201 {
                bail!("MKCOL {folder}: {} {}", got.status, got.text());
            }
        }
        let phases = Arc::new(Phases::default());
        phases.begin(first);
        let mut soak = Self {
            addr: addr.to_owned(),
            authorization: authorization.to_owned(),
            stop: Arc::default(),
            phases,
            ledger: Ledger::default(),
            ok: Arc::default(),
            workers: Vec::new(),
        };
        for c in 0..config.clients {
            let client = Client {
                id: c,
                conn: KeepAlive::new(addr),
                authorization: authorization.to_owned(),
                folder: format!("{root}/c{c}"),
                dirs: format!("{root}/c{c}-dirs"),
                big: false,
            };
            soak.spawn(client);
        }
        for b in 0..config.big_clients {
            let client = Client {
                id: 1000 + b,
                conn: KeepAlive::new(addr),
                authorization: authorization.to_owned(),
                folder: root.clone(),
                dirs: String::new(),
                big: true,
            };
            soak.spawn(client);
        }
        Ok(soak)
    }

    fn spawn(&mut self, client: Client) {
        let (stop, phases, ledger, ok) = (
            self.stop.clone(),
            self.phases.clone(),
            self.ledger.clone(),
            self.ok.clone(),
        );
        self.workers
            .push(tokio::spawn(client.run(stop, phases, ledger, ok)));
    }

    /// From now on requests count in a new phase called `name`.
    pub fn phase(&self, name: &str) {
        self.phases.begin(name);
    }

    /// From now on (`true`) until told otherwise a 507 to a write is the right answer: the
    /// caller has filled a disk below arca.
    pub fn disk_full(&self, full: bool) {
        self.phases.disk_full.store(full, Ordering::Release);
    }

    /// Requests answered as expected so far.
    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Failures so far, in every phase.
    pub fn failures(&self) -> usize {
        self.phases.lock().iter().map(|p| p.failures.len()).sum()
    }

    /// Waits until `n` more requests than now have succeeded (at most 60 s).
    pub async fn progress(&self, n: u64, what: &str) -> anyhow::Result<()> {
        let target = self.ok() + n;
        crate::eventually(Duration::from_secs(60), what, || {
            let done = self.ok() >= target;
            async move { Ok(done.then_some(())) }
        })
        .await
    }

    /// Stops the clients (each finishes its request) and returns the phases.
    pub async fn stop(self) -> anyhow::Result<(Report, Verifier)> {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            w.await?;
        }
        let mut phases = std::mem::take(&mut *self.phases.lock());
        if let Some(last) = phases.last_mut() {
            last.ended = Some(Instant::now());
        }
        Ok((
            Report { phases },
            Verifier {
                addr: self.addr,
                authorization: self.authorization,
                ledger: self.ledger,
            },
        ))
    }
}

/// Reads every acknowledged write back once the load has stopped.
pub struct Verifier {
    addr: String,
    authorization: String,
    ledger: Ledger,
}

impl Verifier {
    /// GETs every name the load wrote and compares it with its last acknowledged content (or,
    /// after a 503, with one of the two candidates). Returns how many were read and every
    /// mismatch.
    pub async fn verify(&self) -> anyhow::Result<(usize, Vec<String>)> {
        let entries: Vec<(String, Held)> = self
            .ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let mut conn = KeepAlive::new(&self.addr);
        let auth = [("authorization", self.authorization.as_str())];
        let mut wrong = Vec::new();
        for (path, held) in &entries {
            let got = conn.send("GET", path, &auth, Bytes::new()).await;
            match got {
                Ok(r) if r.status == 200 && matches_held(held, &r.body).is_some() => {}
                Ok(r) => wrong.push(format!(
                    "{path}: {} with {} bytes, expected {held:?}",
                    r.status,
                    r.body.len()
                )),
                Err(e) => wrong.push(format!("{path}: {e:#}")),
            }
        }
        Ok((entries.len(), wrong))
    }
}

/// Which candidate `body` is, if any.
fn matches_held(held: &Held, body: &[u8]) -> Option<(usize, u32)> {
    let is = |(len, seed): (usize, u32)| body.len() == len && body == pattern(len, seed).as_slice();
    match *held {
        Held::Known(len, seed) => is((len, seed)).then_some((len, seed)),
        Held::Either { old, new } => {
            if is(new) {
                Some(new)
            } else {
                old.filter(|o| is(*o))
            }
        }
    }
}

impl Report {
    /// Requests and failures over every phase.
    pub fn totals(&self) -> (u64, usize) {
        (
            self.phases.iter().map(|p| p.requests).sum(),
            self.phases.iter().map(|p| p.failures.len()).sum(),
        )
    }

    /// One line per phase: requests, failures, the allowed 503s, p99; then the totals.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| phase | seconds | requests | failed | 503 not idempotent | 503 big PUT | \
             507 disk full | p99 ms |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
        for p in &self.phases {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {} | {} | {} | {} | {} | {:.1} |",
                p.name,
                p.duration().as_secs_f64(),
                p.requests,
                p.failures.len(),
                p.unretryable_503,
                p.big_put_503,
                p.full_507,
                p.p99().as_secs_f64() * 1000.0
            );
        }
        let (requests, failed) = self.totals();
        let _ = writeln!(out, "| all | | {requests} | {failed} | | | | |");
        out
    }

    /// The first few failures of each phase.
    pub fn failure_sample(&self, per_phase: usize) -> String {
        let mut out = String::new();
        for p in self.phases.iter().filter(|p| !p.failures.is_empty()) {
            let _ = writeln!(out, "{} ({} failed):", p.name, p.failures.len());
            for f in p.failures.iter().take(per_phase) {
                let _ = writeln!(out, "  {f}");
            }
        }
        out
    }
}

/// One sync client: its connection, its folder, its place in the ledger.
struct Client {
    id: usize,
    conn: KeepAlive,
    authorization: String,
    folder: String,
    /// Where its MKCOLs go (kept out of `folder`, which PROPFIND lists every round).
    dirs: String,
    big: bool,
}

impl Client {
    async fn run(
        mut self,
        stop: Arc<AtomicBool>,
        phases: Arc<Phases>,
        ledger: Ledger,
        ok: Arc<AtomicU64>,
    ) {
        let mut round: u64 = 0;
        // Bounded even if the caller forgets to stop it.
        let started = Instant::now();
        while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(3600) {
            if self.big {
                self.big_round(round, &phases, &ledger, &ok).await;
            } else {
                self.round(round, &phases, &ledger, &ok).await;
            }
            round += 1;
        }
    }

    /// Sends one request and counts it in the phase it started in; `judge` turns the answer
    /// into an outcome.
    async fn exchange(
        &mut self,
        phases: &Phases,
        ok: &AtomicU64,
        what: String,
        request: (&str, &str, &[(&str, &str)], Bytes),
        judge: impl FnOnce(&Answer) -> Outcome,
    ) -> Option<Answer> {
        let phase = phases.now();
        let start = Instant::now();
        let (method, path, headers, body) = request;
        let got = self.conn.send(method, path, headers, body).await;
        let took = start.elapsed();
        match got {
            Ok(answer) => {
                let outcome = judge(&answer);
                let outcome = match outcome {
                    Outcome::Failed(why) => Outcome::Failed(format!(
                        "{what}: {why} (answer {} {:?}, {took:?})",
                        answer.status,
                        answer.text_head()
                    )),
                    other => {
                        if matches!(other, Outcome::Ok) {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        other
                    }
                };
                phases.record(phase, took, outcome);
                Some(answer)
            }
            Err(e) => {
                phases.record(
                    phase,
                    took,
                    Outcome::Failed(format!("{what}: {e:#} ({took:?})")),
                );
                None
            }
        }
    }

    /// PUT of `len` bytes of `seed` onto `path`, then a GET compared with what the path must
    /// hold now; the ledger learns the outcome. A 503 with `Retry-After` to the PUT is allowed
    /// for a body too big to keep for a retry (`big`).
    async fn write_then_read(
        &mut self,
        (phases, ledger, ok): (&Phases, &Ledger, &AtomicU64),
        path: &str,
        (len, seed): (usize, u32),
        big: bool,
    ) {
        let authorization = self.authorization.clone();
        let auth = [("authorization", authorization.as_str())];
        let body = Bytes::from(pattern(len, seed));
        let full = phases.disk_full.load(Ordering::Acquire);
        let put = self
            .exchange(
                phases,
                ok,
                format!("PUT {path} ({len} bytes)"),
                ("PUT", path, &auth, body),
                |a| match a.status {
                    201 | 204 => Outcome::Ok,
                    503 if big && a.retry_after => Outcome::BigPut503,
                    507 if full => Outcome::Full507,
                    _ => Outcome::Failed("expected 201 or 204".into()),
                },
            )
            .await;
        let acknowledged = put
            .as_ref()
            .is_some_and(|a| a.status == 201 || a.status == 204);
        update_ledger(ledger, path, acknowledged, (len, seed));

        let held = ledger_get(ledger, path);
        let got = self
            .exchange(
                phases,
                ok,
                format!("GET {path}"),
                ("GET", path, &auth, Bytes::new()),
                |a| match (&held, a.status) {
                    (Some(h), 200) if matches_held(h, &a.body).is_some() => Outcome::Ok,
                    (Some(h), 200) => Outcome::Failed(format!(
                        "{} bytes that are not what was written ({h:?})",
                        a.body.len()
                    )),
                    (None, 404) => Outcome::Ok,
                    _ => Outcome::Failed("unexpected status".into()),
                },
            )
            .await;
        settle_ledger(ledger, path, got.as_ref());
    }

    async fn round(&mut self, round: u64, phases: &Phases, ledger: &Ledger, ok: &AtomicU64) {
        let i = round % NAMES as u64;
        let name = format!("f{i}.bin");
        let path = format!("{}/{name}", self.folder);
        let len = SIZES[(self.id + round as usize) % SIZES.len()];
        let written = (len, seed(self.id, round));
        self.write_then_read((phases, ledger, ok), &path, written, false)
            .await;

        let authorization = self.authorization.clone();
        let depth = [
            ("authorization", authorization.as_str()),
            ("depth", "1"),
            ("content-type", "application/xml"),
        ];
        let listed_len = match ledger_get(ledger, &path) {
            Some(Held::Known(len, _)) => Some(len),
            _ => None,
        };
        let folder = self.folder.clone();
        self.exchange(
            phases,
            ok,
            format!("PROPFIND {folder}"),
            (
                "PROPFIND",
                &folder,
                &depth,
                Bytes::from_static(PROPFIND_BODY.as_bytes()),
            ),
            |a| {
                if a.status != 207 {
                    return Outcome::Failed("expected 207".into());
                }
                let text = String::from_utf8_lossy(&a.body);
                match (listed(&text, &name), listed_len) {
                    (None, Some(_)) => Outcome::Failed(format!("{name} not listed")),
                    (Some(shown), Some(len)) if shown != len as u64 => {
                        Outcome::Failed(format!("{name} listed with {shown} bytes, not {len}"))
                    }
                    _ => Outcome::Ok,
                }
            },
        )
        .await;

        if round % MKCOL_EVERY == MKCOL_EVERY - 1 {
            let dir = format!("{}/d{round}", self.dirs);
            let auth = [depth[0]];
            let full = phases.disk_full.load(Ordering::Acquire);
            self.exchange(
                phases,
                ok,
                format!("MKCOL {dir}"),
                ("MKCOL", &dir, &auth, Bytes::new()),
                |a| match a.status {
                    201 => Outcome::Ok,
                    503 if a.retry_after => Outcome::Unretryable503,
                    507 if full => Outcome::Full507,
                    _ => Outcome::Failed("expected 201".into()),
                },
            )
            .await;
        }
    }

    async fn big_round(&mut self, round: u64, phases: &Phases, ledger: &Ledger, ok: &AtomicU64) {
        let path = format!("{}/big{}.bin", self.folder, self.id);
        let written = (BIG, seed(self.id, round));
        self.write_then_read((phases, ledger, ok), &path, written, true)
            .await;
    }
}

fn seed(client: usize, round: u64) -> u32 {
    (client as u32).wrapping_mul(1_000_003) ^ (round as u32).wrapping_mul(2_654_435_761)
}

/// After a PUT: acknowledged → known; not → the old content or the new one may be there.
fn update_ledger(ledger: &Ledger, path: &str, acknowledged: bool, new: (usize, u32)) {
    let mut map = ledger.lock().unwrap_or_else(PoisonError::into_inner);
    let old = map.get(path).copied();
    let next = if acknowledged {
        Held::Known(new.0, new.1)
    } else {
        let old = match old {
            None => None,
            Some(Held::Known(l, s)) => Some((l, s)),
            // Two unacknowledged writes in a row: the read after the first settled nothing;
            // keep the newest two candidates.
            Some(Held::Either { new, .. }) => Some(new),
        };
        Held::Either { old, new }
    };
    map.insert(path.to_owned(), next);
}

fn ledger_get(ledger: &Ledger, path: &str) -> Option<Held> {
    ledger
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(path)
        .copied()
}

/// After a GET: an "either" learns which one it is.
fn settle_ledger(ledger: &Ledger, path: &str, got: Option<&Answer>) {
    let Some(a) = got.filter(|a| a.status == 200) else {
        return;
    };
    let mut map = ledger.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(held @ Held::Either { .. }) = map.get(path).copied()
        && let Some((len, seed)) = matches_held(&held, &a.body)
    {
        map.insert(path.to_owned(), Held::Known(len, seed));
    }
}

/// The `getcontentlength` a multistatus shows for the member `name`, if it lists it.
fn listed(multistatus: &str, name: &str) -> Option<u64> {
    let href_end = format!("/{name}</d:href>");
    let response = multistatus
        .split("<d:response>")
        .find(|r| r.contains(&href_end))?;
    let start = response.find("<d:getcontentlength>")? + "<d:getcontentlength>".len();
    let end = response[start..].find('<')? + start;
    response[start..end].trim().parse().ok()
}

/// A whole answer.
pub struct Answer {
    pub status: u16,
    pub retry_after: bool,
    pub body: Bytes,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The start of a text body, for failure messages.
    fn text_head(&self) -> String {
        if self.body.len() > 300 || self.body.contains(&0) {
            format!("<{} bytes>", self.body.len())
        } else {
            self.text()
        }
    }
}

/// One HTTP/1.1 connection kept alive across requests, as a sync client keeps it; made again
/// when the server closed it.
pub struct KeepAlive {
    addr: String,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// Connections made so far.
    connects: u64,
}

impl KeepAlive {
    pub fn new(addr: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            sender: None,
            connects: 0,
        }
    }

    async fn connect(&mut self) -> anyhow::Result<&mut SendRequest<Full<Bytes>>> {
        let reusable = match self.sender.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !reusable {
            let stream = tokio::net::TcpStream::connect(&self.addr)
                .await
                .with_context(|| format!("connect {}", self.addr))?;
            stream.set_nodelay(true)?;
            let (sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            self.sender = Some(sender);
            self.connects += 1;
        }
        self.sender.as_mut().context("no connection")
    }

    /// One request and its whole answer. A request the connection handed back unsent (it was
    /// closed by the server between two requests, as keep-alive allows) goes once more on a
    /// new connection, as every HTTP client does; any other error is the answer.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> anyhow::Result<Answer> {
        let exchange = async {
            let mut req = hyper::Request::builder()
                .method(method)
                .uri(path)
                .header(hyper::header::HOST, &self.addr);
            for (name, value) in headers {
                req = req.header(*name, *value);
            }
            let mut req = req.body(Full::new(body))?;
            for attempt in 0..2 {
                let sender = self.connect().await?;
                match sender.try_send_request(req).await {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let retry_after = resp.headers().contains_key(hyper::header::RETRY_AFTER);
                        let body = resp.into_body().collect().await;
                        let body = match body {
                            Ok(b) => b.to_bytes(),
                            Err(e) => {
                                self.sender = None;
                                bail!("{status} answer's body broke off: {e}");
                            }
                        };
                        return Ok(Answer {
                            status,
                            retry_after,
                            body,
                        });
                    }
                    Err(mut e) => {
                        self.sender = None;
                        match e.take_message() {
                            Some(unsent) if attempt == 0 => req = unsent,
                            _ => bail!("{}", e.into_error()),
                        }
                    }
                }
            }
            bail!("the connection refused the request twice")
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(r) => r,
            Err(_) => {
                self.sender = None;
                bail!("no whole answer within {REQUEST_TIMEOUT:?}")
            }
        }
    }
}

/// Clients that misbehave, beside the load: each kind in a loop until stopped.
pub struct Faults {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    /// Misbehaving requests answered in a way that blames the server (a 5xx) or never.
    wrong: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Faults {
    /// Starts one client of each kind; `resets` requests are sent and reset at once (in
    /// parallel batches) by the third.
    pub fn start(addr: &str, authorization: &str, root: &str, resets: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let wrong: Arc<Mutex<Vec<String>>> = Arc::default();
        let path = format!("/remote.php/webdav/{root}/fault.bin");
        let mut tasks = Vec::new();
        for kind in 0..2 {
            let (addr, auth, path, stop, done, wrong) = (
                addr.to_owned(),
                authorization.to_owned(),
                path.clone(),
                stop.clone(),
                done.clone(),
                wrong.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    // A few hundred a second each: a misbehaving crowd, not a CPU hog that
                    // would starve the load on two cores.
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    if kind == 0 {
                        hang_up_mid_upload(&addr, &auth, &path).await?;
                    } else if let Err(e) = short_body(&addr, &auth, &path).await {
                        wrong
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(format!("{e:#}"));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
        let (addr, auth, done2) = (addr.to_owned(), authorization.to_owned(), done.clone());
        let get = format!("/remote.php/webdav/{root}/c0/f0.bin");
        tasks.push(tokio::spawn(async move {
            for batch in 0..resets.div_ceil(50) {
                let n = (resets - batch * 50).min(50);
                let sent: Vec<_> = (0..n)
                    .map(|_| {
                        let (addr, auth, get) = (addr.clone(), auth.clone(), get.clone());
                        tokio::spawn(async move { send_and_reset(&addr, &auth, &get).await })
                    })
                    .collect();
                for s in sent {
                    s.await??;
                    done2.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        }));
        Self {
            stop,
            done,
            wrong,
            tasks,
        }
    }

    /// Misbehaving requests made so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Stops them: how many misbehaving requests were made, and those the server answered
    /// as its own fault; an error if one could not even connect.
    pub async fn stop(self) -> anyhow::Result<(u64, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await??;
        }
        let wrong = std::mem::take(&mut *self.wrong.lock().unwrap_or_else(PoisonError::into_inner));
        Ok((self.done.load(Ordering::Relaxed), wrong))
    }
}

/// A 70 KB PUT of which 10 KB are sent before the client goes away.
async fn hang_up_mid_upload(addr: &str, auth: &str, path: &str) -> anyhow::Result<()> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {auth}\r\nContent-Length: 70000\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(&pattern(10_000, 7)).await?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(s);
    Ok(())
}

/// A PUT declaring 4096 bytes that sends 100 and ends its side of the connection: the
/// server must answer it as the client's fault (or just close), never hang.
async fn short_body(addr: &str, auth: &str, path: &str) -> anyhow::Result<()> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {auth}\r\nContent-Length: 4096\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(&pattern(100, 9)).await?;
    s.shutdown().await?;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
    match read {
        Ok(_) => {
            let head = String::from_utf8_lossy(&answer[..answer.len().min(12)]).into_owned();
            // No answer at all, or the client's fault: anything 5xx blames the server.
            if head.starts_with("HTTP/1.1 5") {
                bail!("a short body was answered {head}");
            }
            Ok(())
        }
        Err(_) => bail!("a short body left the connection hanging for 10 s"),
    }
}

/// A GET sent and the connection reset (RST, not FIN) right after.
async fn send_and_reset(addr: &str, auth: &str, path: &str) -> anyhow::Result<()> {
    let s = tokio::net::TcpStream::connect(addr).await?;
    let mut s = s.into_std()?;
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {auth}\r\n\r\n");
    std::io::Write::write_all(&mut s, head.as_bytes())?;
    let s = tokio::net::TcpStream::from_std(s)?;
    s.set_zero_linger()?;
    drop(s);
    Ok(())
}

/// Many keep-alive connections that sit idle: each made one request and holds on.
pub struct Idle {
    conns: Vec<KeepAlive>,
    authorization: String,
    path: String,
}

impl Idle {
    /// Opens `n` connections, each with one GET of `path` answered 200 (or 404: only the
    /// connection matters).
    pub async fn open(
        addr: &str,
        authorization: &str,
        path: &str,
        n: usize,
    ) -> anyhow::Result<Self> {
        let mut idle = Self {
            conns: (0..n).map(|_| KeepAlive::new(addr)).collect(),
            authorization: authorization.to_owned(),
            path: path.to_owned(),
        };
        idle.use_all().await?;
        Ok(idle)
    }

    /// One GET on every connection, 20 at a time: how many went on the connection it already
    /// had (none was made again); an error names the first failure.
    pub async fn use_all(&mut self) -> anyhow::Result<usize> {
        let mut reused = 0;
        let auth = self.authorization.clone();
        let path = self.path.clone();
        for chunk in self.conns.chunks_mut(20) {
            let sends = chunk.iter_mut().map(|c| {
                let (auth, path) = (auth.clone(), path.clone());
                async move {
                    let connects = c.connects;
                    let got = c
                        .send(
                            "GET",
                            &path,
                            &[("authorization", auth.as_str())],
                            Bytes::new(),
                        )
                        .await?;
                    if got.status != 200 && got.status != 404 {
                        bail!("GET {path} on an idle connection: {}", got.status);
                    }
                    Ok::<bool, anyhow::Error>(connects > 0 && c.connects == connects)
                }
            });
            for r in futures::future::join_all(sends).await {
                reused += usize::from(r?);
            }
        }
        Ok(reused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_shows_a_members_length() {
        let ms = "<d:multistatus><d:response><d:href>/remote.php/webdav/c/</d:href></d:response>\
                  <d:response><d:href>/remote.php/webdav/c/f1.bin</d:href><d:propstat><d:prop>\
                  <d:getcontentlength>4096</d:getcontentlength></d:prop></d:propstat></d:response>\
                  <d:response><d:href>/remote.php/webdav/c/f11.bin</d:href><d:propstat><d:prop>\
                  <d:getcontentlength>7</d:getcontentlength></d:prop></d:propstat></d:response>";
        assert_eq!(listed(ms, "f1.bin"), Some(4096));
        assert_eq!(listed(ms, "f11.bin"), Some(7));
        assert_eq!(listed(ms, "f2.bin"), None);
    }

    #[test]
    fn an_unacknowledged_write_leaves_either_candidate() {
        let ledger = Ledger::default();
        update_ledger(&ledger, "/a", true, (10, 1));
        update_ledger(&ledger, "/a", false, (20, 2));
        let held = ledger_get(&ledger, "/a").unwrap();
        assert_eq!(matches_held(&held, &pattern(10, 1)), Some((10, 1)));
        assert_eq!(matches_held(&held, &pattern(20, 2)), Some((20, 2)));
        assert_eq!(matches_held(&held, &pattern(20, 3)), None);
        assert_eq!(matches_held(&held, &pattern(20, 2)[..10]), None);
    }

    #[test]
    fn percentiles() {
        let samples: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&samples, 0.99), Duration::from_micros(99));
        assert_eq!(percentile(&[], 0.99), Duration::ZERO);
    }
}
