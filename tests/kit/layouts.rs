//! The example deployments run for real, with what they need beside arca, and the ways a
//! deployment's processes come and go: [`NatsLayout`] (config/grouped-nats: proxy; frontend +
//! gateway + sharing; storage-system; two storage-users on one PostgreSQL and one S3 bucket;
//! nats-server) and [`UnixLayout`] (config/grouped-unix: one pod's four processes over Unix
//! sockets). The soak test and `arca-bench soak` drive the same code. S3 is reached through a
//! [`FaultyS3`], which the soak bench breaks and freezes.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::below::{FaultyS3, SmallDisk};
use crate::{ExampleSet, Moto, Nats, Postgres, Server, TempDir, free_addr, get, metric_total};

/// Readiness of any one process.
const READY: Duration = Duration::from_secs(60);
/// A SIGTERMed process drains (1 s in the examples) and stops well within this.
const EXIT: Duration = Duration::from_secs(30);
/// The log level of soak processes: warnings and the lifecycle, not a line per request (the
/// test keeps every line in memory, and a debug build writing them costs the load CPU).
pub const SOAK_LOG_LEVEL: &str = "info,access=off";

/// [`SOAK_LOG_LEVEL`], or the log filter in `ARCA_SOAK_LOG` (e.g.
/// `info,access=off,arca_transport=debug` to see every connection that ends with an error).
pub fn soak_log_level() -> String {
    std::env::var("ARCA_SOAK_LOG").unwrap_or_else(|_| SOAK_LOG_LEVEL.to_owned())
}
/// `admin:scale-pass` as HTTP Basic: the examples' admin (see [`crate::EXAMPLE_PASSWORD`]).
pub const EXAMPLE_BASIC: &str = "Basic YWRtaW46c2NhbGUtcGFzcw==";

/// The endpoints of config/grouped-nats, each swapped for a free port of this run.
const NATS_ENDPOINTS: [&str; 5] = [
    "tcp://127.0.0.1:9140", // frontend
    "tcp://127.0.0.1:9141", // storage-users
    "tcp://127.0.0.1:9142", // storage-system
    "tcp://127.0.0.1:9143", // storage-users-2
    "tcp://127.0.0.1:9144", // sharing
];

/// config/grouped-nats as real processes. Every process lives in its own directory, which
/// a restart keeps (same config file, data dir and endpoint).
pub struct NatsLayout {
    set: ExampleSet,
    dirs: Vec<TempDir>,
    pub system: Server,
    /// storage-users.yaml and storage-users-2.yaml.
    pub users: [Server; 2],
    pub front: Server,
    pub proxy: Server,
    /// Processes stopped and replaced, kept for their logs.
    retired: Vec<(&'static str, Server)>,
    /// The lease holds of the processes stopped so far, as [`LeaseHolds`] closes them.
    holds: LeaseHolds,
    pub nats: Nats,
    /// Dropped after every process that uses them; the PostgreSQL is restarted and stopped
    /// by the soak bench (`arca-bench soak`).
    pub pg: Postgres,
    /// Where PostgreSQL keeps its data, if the layout was asked to put it on a small disk.
    pub database_disk: Option<SmallDisk>,
    /// Between storage-users and moto: breaks or freezes S3 on demand.
    pub s3: FaultyS3,
    _moto: Moto,
    _dir: TempDir,
}

impl NatsLayout {
    /// NATS, PostgreSQL and S3, then the five processes, all ready.
    pub async fn start(log_level: &str) -> anyhow::Result<Self> {
        Self::start_with(log_level, None).await
    }

    /// As [`NatsLayout::start`], PostgreSQL's data on a tmpfs of `database_disk` bytes if
    /// given (for a full disk below the database: see [`SmallDisk`]; needs root).
    pub async fn start_with(log_level: &str, database_disk: Option<u64>) -> anyhow::Result<Self> {
        let dir = TempDir::new();
        // `Postgres::start` keeps its data in DIR/pg: the small disk is mounted there first.
        let database_disk = database_disk
            .map(|bytes| SmallDisk::mount(dir.join("pg"), bytes))
            .transpose()?;
        let (nats, pg, moto) = tokio::try_join!(
            Nats::start(&dir),
            Postgres::start(&dir),
            Moto::start(&["arca-blobs"])
        )?;
        // A database that commits durably, as a real one does: the private server runs with
        // `synchronous_commit = off`, and the soak bench's outage (`pg_ctl stop -m immediate`)
        // would otherwise lose commits it had already acknowledged to arca.
        let database = pg.durable_database().await?;
        let s3 = FaultyS3::start(&moto.endpoint).await?;
        let mut swaps = vec![
            ("nats://127.0.0.1:4222", nats.url()),
            ("postgres://arca:example-only@127.0.0.1:5432/arca", database),
            ("http://127.0.0.1:9000", s3.endpoint.clone()),
        ];
        for e in NATS_ENDPOINTS {
            swaps.push((e, format!("tcp://{}", free_addr())));
        }
        let set = ExampleSet { swaps };
        let dirs: Vec<TempDir> = (0..5).map(|_| TempDir::new()).collect();
        let launch = |i: usize, file: &str| -> anyhow::Result<Server> {
            set.launch(&dirs[i], file, &[])?
                .env("ARCA_LOG_LEVEL", log_level)
                .spawn()
        };
        let mut system = launch(0, "storage-system.yaml")?;
        // Together, as a deployment's pods start: both migrate the empty database at once.
        let mut users = [
            launch(1, "storage-users.yaml")?,
            launch(2, "storage-users-2.yaml")?,
        ];
        let mut front = launch(3, "frontend.yaml")?;
        let mut proxy = launch(4, "proxy.yaml")?;
        system.wait_ready(READY).await?;
        for u in &mut users {
            u.wait_ready(READY).await?;
        }
        front.wait_ready(READY).await?;
        proxy.wait_ready(READY).await?;
        Ok(Self {
            set,
            dirs,
            system,
            users,
            front,
            proxy,
            retired: Vec::new(),
            holds: LeaseHolds::default(),
            nats,
            pg,
            database_disk,
            s3,
            _moto: moto,
            _dir: dir,
        })
    }

    /// The public address clients use.
    pub fn public(&self) -> &str {
        &self.proxy.public
    }

    fn users_file(i: usize) -> &'static str {
        if i == 0 {
            "storage-users.yaml"
        } else {
            "storage-users-2.yaml"
        }
    }

    /// Sends `signal` to storage-users `i` and waits for it to exit (a SIGTERM must end in a
    /// clean exit); how long that took.
    pub async fn stop_users(&mut self, i: usize, signal: i32) -> anyhow::Result<Duration> {
        let at = Instant::now();
        let u = &mut self.users[i];
        let before = lease_holds(u).await?;
        let stopped = unix_ms();
        u.proc.signal(signal);
        let status = u.proc.wait_exit(EXIT).await?;
        self.holds.exited(before, stopped);
        if signal == libc::SIGTERM {
            anyhow::ensure!(
                status.code() == Some(0),
                "storage-users {i} exited {status} after SIGTERM:\n{}",
                u.proc.stderr_tail(20)
            );
        }
        Ok(at.elapsed())
    }

    /// Starts storage-users `i` again (same file, directory and endpoint) and waits until it
    /// is ready.
    pub async fn start_users(&mut self, i: usize, log_level: &str) -> anyhow::Result<()> {
        let mut server = self
            .set
            .launch(&self.dirs[1 + i], Self::users_file(i), &[])?
            .env("ARCA_LOG_LEVEL", log_level)
            .spawn()?;
        server.wait_ready(READY).await?;
        let old = std::mem::replace(&mut self.users[i], server);
        self.retired.push((
            ["storage-users-1 (before)", "storage-users-2 (before)"][i],
            old,
        ));
        Ok(())
    }

    /// Starts a second frontend group on endpoints of its own; once it is ready SIGTERMs the
    /// first and waits for its clean exit. The new group is [`front`](Self::front) after.
    pub async fn replace_frontend(&mut self, log_level: &str) -> anyhow::Result<()> {
        let dir = TempDir::new();
        let next = self
            .set
            .launch(
                &dir,
                "frontend.yaml",
                &[
                    (NATS_ENDPOINTS[0], format!("tcp://{}", free_addr())),
                    (NATS_ENDPOINTS[4], format!("tcp://{}", free_addr())),
                ],
            )?
            .env("ARCA_LOG_LEVEL", log_level)
            .spawn()?;
        let before = lease_holds(&self.front).await?;
        let (old, stopped) = hand_over(&mut self.front, next).await?;
        self.holds.exited(before, stopped);
        self.dirs.push(dir);
        self.retired.push(("frontend (before)", old));
        Ok(())
    }

    /// Stops nats-server; [`start_nats`](Self::start_nats) brings it back with its state.
    pub async fn stop_nats(&mut self) -> anyhow::Result<()> {
        self.nats.stop().await
    }

    pub async fn start_nats(&mut self) -> anyhow::Result<()> {
        let (port, store) = (self.nats.port, self.nats.store.clone());
        self.nats = Nats::start_on(port, store)
            .await
            .context("nats-server again")?;
        Ok(())
    }

    /// Every way the soak restarts this deployment under `soak`'s load, each its own phase of
    /// at least `phase` (the load runs throughout: this is the phases' length, not a wait for
    /// readiness): steady; SIGTERM of each storage-users and a start again; a SIGKILL of the
    /// first; the frontend group replaced; NATS down 20 s; NATS back.
    pub async fn restart_every_way(
        &mut self,
        soak: &crate::soak::Soak,
        phase: Duration,
        log_level: &str,
    ) -> anyhow::Result<()> {
        let hold = |since: Instant| tokio::time::sleep_until((since + phase).into());
        hold(Instant::now()).await;
        for i in 0..2 {
            soak.phase(&format!("SIGTERM storage-users-{}", i + 1));
            let at = Instant::now();
            self.stop_users(i, libc::SIGTERM).await?;
            self.start_users(i, log_level).await?;
            hold(at).await;
        }
        soak.phase("SIGKILL storage-users-1");
        let at = Instant::now();
        self.stop_users(0, libc::SIGKILL).await?;
        self.start_users(0, log_level).await?;
        hold(at).await;
        soak.phase("frontend group replaced");
        let at = Instant::now();
        self.replace_frontend(log_level).await?;
        hold(at).await;
        soak.phase("NATS down 20 s");
        self.stop_nats().await?;
        tokio::time::sleep(Duration::from_secs(20)).await;
        soak.phase("NATS back");
        let at = Instant::now();
        self.start_nats().await?;
        hold(at).await;
        Ok(())
    }

    /// Waits until storage-users `i` serves requests of the load or of `path` reads (a
    /// PROPFIND through the proxy now and then): the frontend knows it again.
    pub async fn until_serving(
        &self,
        i: usize,
        path: &str,
        authorization: &str,
    ) -> anyhow::Result<()> {
        let before = handled(&self.users[i], "storage-users").await?;
        let auth = [("authorization", authorization), ("depth", "0")];
        crate::eventually(
            Duration::from_secs(20),
            "storage-users serving again",
            || async {
                crate::send(self.public(), "PROPFIND", path, &auth, "").await?;
                let now = handled(&self.users[i], "storage-users").await?;
                Ok((now > before).then_some(()))
            },
        )
        .await
    }

    /// Checks that no two processes held one background job's lease at once, through every
    /// restart, kill and NATS outage so far: each process reports its holds (`/leases`: the
    /// job, the fencing token of the take, the wall-clock window it relied on the lease in);
    /// the stopped ones reported just before their signal, their open holds closed when they
    /// had exited. Returns a line per job; fails unless some job changed hands between
    /// processes (else nothing was checked).
    pub async fn one_lease_holder_at_a_time(&self) -> anyhow::Result<Vec<String>> {
        let mut all = self.holds.clone();
        for (_, server) in self.servers().into_iter().take(5) {
            all.live(lease_holds(server).await?);
        }
        let lines = all.check()?;
        anyhow::ensure!(
            all.handed_over(),
            "no lease changed hands between processes: nothing was checked\n{lines:#?}"
        );
        Ok(lines)
    }

    /// Every arca process, for logs and metrics.
    pub fn servers(&self) -> Vec<(&'static str, &Server)> {
        let mut all = vec![
            ("proxy", &self.proxy),
            ("frontend", &self.front),
            ("storage-users-1", &self.users[0]),
            ("storage-users-2", &self.users[1]),
            ("storage-system", &self.system),
        ];
        all.extend(self.retired.iter().map(|(n, s)| (*n, s)));
        all
    }
}

/// config/grouped-unix as real processes: the pod's four processes over Unix sockets in a
/// directory of the run's own, with the proxy listing a second frontend socket (and the
/// callers of sharing a second sharing socket) so that a frontend group can be replaced:
/// started on the other sockets, then the first SIGTERMed.
pub struct UnixLayout {
    set: ExampleSet,
    pub system: Server,
    pub users: Server,
    pub front: Server,
    /// Which of the two frontend sockets the running group serves.
    front_socket: usize,
    pub proxy: Server,
    dirs: Vec<TempDir>,
    _sockets: TempDir,
}

impl UnixLayout {
    pub async fn start(log_level: &str) -> anyhow::Result<Self> {
        let sockets = TempDir::new();
        let dir = sockets.path().display().to_string();
        let set = ExampleSet {
            swaps: vec![
                // The proxy lists both frontend sockets: the second is where a replacement
                // group starts.
                (
                    r#"frontend: ["unix:///tmp/arca/frontend.sock"]"#,
                    format!(
                        r#"frontend: ["unix://{dir}/frontend.sock", "unix://{dir}/frontend-2.sock"]"#
                    ),
                ),
                // ... and whoever calls sharing lists both sockets it may be on.
                (
                    r#"sharing: ["unix:///tmp/arca/sharing.sock"]"#,
                    format!(
                        r#"sharing: ["unix://{dir}/sharing.sock", "unix://{dir}/sharing-2.sock"]"#
                    ),
                ),
                ("/tmp/arca/", format!("{dir}/")),
            ],
        };
        let dirs: Vec<TempDir> = (0..4).map(|_| TempDir::new()).collect();
        let launch = |i: usize, file: &str| -> anyhow::Result<Server> {
            set.launch_in("grouped-unix", &dirs[i], file, &[])?
                .env("ARCA_LOG_LEVEL", log_level)
                .spawn()
        };
        let mut system = launch(0, "storage-system.yaml")?;
        let mut users = launch(1, "storage-users.yaml")?;
        let mut front = launch(2, "frontend.yaml")?;
        let mut proxy = launch(3, "proxy.yaml")?;
        for s in [&mut system, &mut users, &mut front, &mut proxy] {
            s.wait_ready(READY).await?;
        }
        Ok(Self {
            set,
            system,
            users,
            front,
            front_socket: 0,
            proxy,
            dirs,
            _sockets: sockets,
        })
    }

    pub fn public(&self) -> &str {
        &self.proxy.public
    }

    /// Starts a frontend group on the other socket; once it is ready SIGTERMs the running one
    /// and waits for its clean exit.
    pub async fn replace_frontend(&mut self, log_level: &str) -> anyhow::Result<()> {
        let dir = TempDir::new();
        let next_socket = 1 - self.front_socket;
        let suffix = ["", "-2"][next_socket];
        let extra = [
            (
                r#"endpoint: "unix:///tmp/arca/frontend.sock""#,
                format!(r#"endpoint: "unix:///tmp/arca/frontend{suffix}.sock""#),
            ),
            (
                r#"endpoint: "unix:///tmp/arca/sharing.sock""#,
                format!(r#"endpoint: "unix:///tmp/arca/sharing{suffix}.sock""#),
            ),
        ];
        let next = self
            .set
            .launch_in("grouped-unix", &dir, "frontend.yaml", &extra)?
            .env("ARCA_LOG_LEVEL", log_level)
            .spawn()?;
        hand_over(&mut self.front, next).await?;
        self.front_socket = next_socket;
        self.dirs.push(dir);
        Ok(())
    }

    pub fn servers(&self) -> Vec<(&'static str, &Server)> {
        vec![
            ("proxy", &self.proxy),
            ("frontend", &self.front),
            ("storage-users", &self.users),
            ("storage-system", &self.system),
        ]
    }
}

/// A rolling replacement: once `next` is ready it takes `current`'s place, and the one it
/// replaced is SIGTERMed and must exit cleanly; it is returned (for its logs).
async fn hand_over(current: &mut Server, mut next: Server) -> anyhow::Result<(Server, u64)> {
    next.wait_ready(READY).await?;
    let mut old = std::mem::replace(current, next);
    let stopped = unix_ms();
    old.proc.sigterm();
    let status = old.proc.wait_exit(EXIT).await?;
    anyhow::ensure!(
        status.code() == Some(0),
        "the replaced process exited {status}:\n{}",
        old.proc.stderr_tail(20)
    );
    Ok((old, stopped))
}

/// The requests `server` has handled so far for `service` (its `arca_requests_total`).
pub async fn handled(server: &Server, service: &str) -> anyhow::Result<f64> {
    let text = get(&server.debug, "/metrics", &[]).await?.text();
    Ok(metric_total(
        &text,
        "arca_requests_total",
        &[("service", service)],
    ))
}

/// The calls `server` counted in `arca_transport_failed_calls_total`, by outcome.
pub async fn failed_calls(server: &Server) -> anyhow::Result<Vec<(String, f64)>> {
    let text = get(&server.debug, "/metrics", &[]).await?.text();
    let mut by_outcome: std::collections::BTreeMap<String, f64> = Default::default();
    for line in text
        .lines()
        .filter(|l| l.starts_with("arca_transport_failed_calls_total{"))
    {
        let outcome = line
            .split("outcome=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?");
        let n: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0);
        *by_outcome.entry(outcome.to_owned()).or_default() += n;
    }
    Ok(by_outcome.into_iter().collect())
}

/// The warnings and errors each of `servers` logged (at most `n` per process, the last ones),
/// for a failure message: what the processes saw while requests failed.
pub fn problems(servers: &[(&'static str, &Server)], n: usize) -> String {
    let mut out = String::new();
    for (name, s) in servers {
        let lines: Vec<String> = s
            .proc
            .events()
            .into_iter()
            .filter(|e| {
                // The lifecycle, to place the problems in it.
                let lifecycle = [
                    "listening",
                    "ready",
                    "SIGTERM: shutting down",
                    "deregistered",
                    "draining: still serving until peers stop sending",
                    "stopped",
                ];
                e["level"] == "WARN"
                    || e["level"] == "ERROR"
                    || e["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| lifecycle.contains(&m))
                    || e["target"].as_str().is_some_and(|t| {
                        t.starts_with("arca_transport::channel")
                            || t.starts_with("arca_transport::server")
                    })
            })
            .map(|e| {
                let mut fields = e["fields"].clone();
                let message = fields["message"].take();
                format!(
                    "{} {} {} {}",
                    e["timestamp"].as_str().unwrap_or(""),
                    e["level"].as_str().unwrap_or(""),
                    message.as_str().unwrap_or(""),
                    fields
                )
            })
            .collect();
        if lines.is_empty() {
            continue;
        }
        out.push_str(&format!("{name} ({} warnings and errors):\n", lines.len()));
        for l in &lines[lines.len().saturating_sub(n)..] {
            out.push_str("  ");
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// One hold of a background job's lease by one process, as it reported it (`/leases`).
#[derive(Clone, Debug)]
pub struct Hold {
    pub job: String,
    pub holder: String,
    /// The fencing token of the take: larger for every later take of the job.
    pub token: u64,
    /// Unix milliseconds.
    pub from_ms: u64,
    /// `None`: still held when it reported, by a process still running.
    pub until_ms: Option<u64>,
}

/// The holds of `server`'s process so far.
pub async fn lease_holds(server: &Server) -> anyhow::Result<Vec<Hold>> {
    let resp = get(&server.debug, "/leases", &[]).await?;
    anyhow::ensure!(
        resp.status == 200,
        "/leases: {} {}",
        resp.status,
        resp.text()
    );
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&resp.text()).context("/leases is not a JSON list")?;
    list.iter()
        .map(|h| {
            Ok(Hold {
                job: h["job"].as_str().context("hold without job")?.to_owned(),
                holder: h["holder"]
                    .as_str()
                    .context("hold without holder")?
                    .to_owned(),
                token: h["token"].as_u64().context("hold without token")?,
                from_ms: h["from_ms"].as_u64().context("hold without from_ms")?,
                until_ms: h["until_ms"].as_u64(),
            })
        })
        .collect()
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Holds reported by several processes, and the check that their windows never overlap.
#[derive(Clone, Debug, Default)]
pub struct LeaseHolds {
    holds: Vec<Hold>,
}

impl LeaseHolds {
    /// The holds a process reported just before it was sent its stop signal at `stopped_ms`,
    /// now that it has exited. A hold still open then is counted as ended at the signal: a
    /// SIGKILLed process relied on nothing after it, and a SIGTERMed one releases its leases
    /// early in its shutdown, where a successor may take them at once while the process still
    /// drains, so "ended by its exit" would see an overlap that never was. Its order against
    /// a successor's take is still checked by the fencing tokens.
    pub fn exited(&mut self, reported: Vec<Hold>, stopped_ms: u64) {
        self.holds.extend(reported.into_iter().map(|mut h| {
            h.until_ms.get_or_insert(stopped_ms.max(h.from_ms));
            h
        }));
    }

    /// The holds of a running process: a hold still open lasts until now at least.
    pub fn live(&mut self, reported: Vec<Hold>) {
        let now = unix_ms();
        self.holds.extend(reported.into_iter().map(|mut h| {
            h.until_ms.get_or_insert(now);
            h
        }));
    }

    /// Whether some job was held by more than one process.
    pub fn handed_over(&self) -> bool {
        self.holds.iter().any(|a| {
            self.holds
                .iter()
                .any(|b| a.job == b.job && a.holder != b.holder)
        })
    }

    /// Per job: no two windows of different holds overlap, and a later take has a larger
    /// token (the fencing order is the order in time). A line per job.
    pub fn check(&self) -> anyhow::Result<Vec<String>> {
        let mut by_job: std::collections::BTreeMap<&str, Vec<&Hold>> = Default::default();
        for h in &self.holds {
            by_job.entry(&h.job).or_default().push(h);
        }
        let mut lines = Vec::new();
        for (job, mut list) in by_job {
            list.sort_by_key(|h| (h.token, h.from_ms));
            for pair in list.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                anyhow::ensure!(
                    a.token != b.token || a.holder == b.holder,
                    "{job}: token {} taken by {} and by {}",
                    a.token,
                    a.holder,
                    b.holder
                );
            }
            for (i, a) in list.iter().enumerate() {
                let a_until = a.until_ms.unwrap_or(u64::MAX);
                for b in &list[i + 1..] {
                    let b_until = b.until_ms.unwrap_or(u64::MAX);
                    anyhow::ensure!(
                        !(a.from_ms < b_until && b.from_ms < a_until),
                        "{job}: held at once by {} (token {}, {}..{}) and {} (token {}, {}..{})",
                        a.holder,
                        a.token,
                        a.from_ms,
                        a_until,
                        b.holder,
                        b.token,
                        b.from_ms,
                        b_until
                    );
                    anyhow::ensure!(
                        b.from_ms >= a_until,
                        "{job}: token {} ({}) taken at {} before token {} ({}) ended at {}",
                        b.token,
                        b.holder,
                        b.from_ms,
                        a.token,
                        a.holder,
                        a_until
                    );
                }
            }
            let holders: std::collections::BTreeSet<&str> =
                list.iter().map(|h| h.holder.as_str()).collect();
            lines.push(format!(
                "{job}: {} holds by {} processes, tokens {}..{}, never two at once",
                list.len(),
                holders.len(),
                list.first().map_or(0, |h| h.token),
                list.last().map_or(0, |h| h.token),
            ));
        }
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::{Hold, LeaseHolds};

    fn hold(holder: &str, token: u64, from_ms: u64, until_ms: Option<u64>) -> Hold {
        Hold {
            job: "gc".into(),
            holder: holder.into(),
            token,
            from_ms,
            until_ms,
        }
    }

    #[test]
    fn holds_one_after_another_pass_and_overlapping_ones_fail() {
        let mut ok = LeaseHolds::default();
        ok.exited(vec![hold("a", 1, 100, Some(200))], 250);
        ok.live(vec![hold("b", 7, 200, None), hold("b", 3, 250, Some(300))]);
        // b's hold 3 inside b's own open hold 7 would be a bug of ordering: token 3 < 7 but
        // later in time.
        assert!(ok.check().is_err());

        let mut ok = LeaseHolds::default();
        ok.exited(vec![hold("a", 1, 100, Some(200))], 250);
        ok.live(vec![hold("b", 7, 200, Some(300)), hold("b", 9, 400, None)]);
        assert_eq!(ok.check().unwrap().len(), 1);
        assert!(ok.handed_over());

        let mut overlap = LeaseHolds::default();
        overlap.exited(vec![hold("a", 1, 100, None)], 170);
        overlap.live(vec![hold("b", 2, 150, Some(160))]);
        let err = overlap.check().unwrap_err().to_string();
        assert!(err.contains("held at once"), "{err}");

        let mut alone = LeaseHolds::default();
        alone.live(vec![hold("a", 1, 100, None)]);
        assert!(!alone.handed_over());
    }
}
