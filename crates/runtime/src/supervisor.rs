//! The supervisor: starts a process's services in dependency order, keeps their readiness
//! honest, and stops them in reverse order on a signal or a failure.
//!
//! Shutdown, in order: readiness turns false at once → endpoints leave the registry → the
//! process keeps serving for `shutdown.drain_delay` (load balancers and peers' watches catch
//! up) → each service, dependants first, stops accepting and finishes its in-flight requests →
//! at `shutdown.timeout` whatever is left is abandoned and named. A forced [`Shutdown`] (the
//! binary's second signal) skips to the end. No service can end the process early: the process
//! exits once, from the binary, with the [`Outcome`] returned here.
//!
//! Cancellation has one root per process: each service's token is a child of it, and every
//! task the runtime starts for a service (its dependency probes, its background work) holds
//! that child, so nothing the supervisor started outlives [`Supervisor::run`]. The process's
//! own tasks hang under the same root: lease renewals, and the registry's watchers and
//! heartbeats when the host hands the root over first ([`Supervisor::with_root`]). The root is
//! cancelled last, once every service has stopped, so a job finishing within its grace keeps
//! its lease renewed and its registration alive.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arca_config::Config;
use arca_proto::v1::probe_client::ProbeClient;
use arca_proto::v1::{CheckRequest, State as ProbeState};
use arca_transport::{Clients, Endpoint, Listener, MemHub, Registry, RetryPolicy, bind};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::events::{EventBus, MemoryBus};
use crate::health::{FAILURES_BEFORE_UNHEALTHY, Health, Phase, elapsed_ms};
use crate::lease::Leases;
use crate::service::{Context, Entry, Service, ServiceError};
use crate::shutdown::Shutdown;
use crate::token::TokenSigner;

/// How a supervised process ended; the binary turns it into an exit code.
#[derive(Debug)]
pub enum Outcome {
    /// Stopped on request with every service drained in time.
    Clean,
    /// A service failed; the others were stopped in order.
    Failed {
        service: &'static str,
        cause: String,
    },
    /// Stopped on request, but these services were still busy at the deadline.
    TimedOut { stragglers: Vec<&'static str> },
    /// A second signal asked for an immediate exit.
    Forced,
}

impl Outcome {
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Clean => 0,
            Outcome::Failed { .. } | Outcome::TimedOut { .. } => 1,
            Outcome::Forced => 130,
        }
    }
}

/// Why a process could not start at all.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("no services to run")]
    Empty,
    #[error("service {0} is listed twice")]
    Duplicate(&'static str),
    #[error("dependency cycle among services: {0}")]
    Cycle(String),
}

/// How long a service waits for its local dependencies before starting anyway (its readiness
/// then says which dependency it is missing).
const LOCAL_DEPENDENCY_WAIT: Duration = Duration::from_secs(10);
/// Probe cadence once all dependencies answer; faster (from 2 ms, doubling) until they do, so
/// a process is ready milliseconds after its last dependency.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Events kept for a listener that falls behind on the default in-memory bus.
const EVENT_BUFFER: usize = 1024;

/// One process's services, supervised together.
pub struct Supervisor {
    config: Arc<Config>,
    services: Vec<Entry>,
    registry: Arc<dyn Registry>,
    health: Health,
    hub: MemHub,
    signer: TokenSigner,
    leases: Leases,
    /// Every task of the process hangs under it: services' tokens, leases, the registry.
    root: CancellationToken,
    bus: Arc<dyn EventBus>,
}

struct Running {
    name: &'static str,
    token: CancellationToken,
    /// Reports the service's end to the supervisor.
    handle: JoinHandle<()>,
    /// The service's own task, aborted with the reporter when it overruns the deadline.
    abort: tokio::task::AbortHandle,
}

impl Supervisor {
    /// The services of `entries`, built from `config` when [`run`](Self::run) starts them.
    pub fn new(
        config: Arc<Config>,
        entries: impl IntoIterator<Item = Entry>,
        registry: Arc<dyn Registry>,
    ) -> Self {
        // Without a configured secret, tokens only need to verify inside this process (the
        // binary refuses a split deployment without one), so a fresh random key will do.
        let secret = config
            .identity
            .secret
            .clone()
            .unwrap_or_else(|| arca_config::generate_secret(32));
        Self {
            signer: TokenSigner::new(secret.as_bytes()),
            config,
            services: entries.into_iter().collect(),
            registry,
            health: Health::default(),
            hub: MemHub::new(),
            leases: Leases::memory(Duration::from_secs(10)),
            root: CancellationToken::new(),
            bus: MemoryBus::new(EVENT_BUFFER),
        }
    }

    /// The event bus services publish on; by default in memory (this process only).
    pub fn with_bus(mut self, bus: Arc<dyn EventBus>) -> Self {
        self.bus = bus;
        self
    }

    /// The process's root cancellation, when the caller made it before the supervisor (to
    /// hang the registry's tasks under it); by default a fresh one.
    pub fn with_root(mut self, root: CancellationToken) -> Self {
        self.root = root;
        self
    }

    /// Where services' leader leases live; by default in memory (this process only).
    pub fn with_leases(mut self, leases: Leases) -> Self {
        self.leases = leases;
        self
    }

    /// The leases the services will hold, for the debug server's `/leases`.
    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    /// The health state `/readyz` reads; hand it to the debug server before [`run`](Self::run).
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Runs until `shutdown` is requested or a service fails, then shuts down; see the module
    /// docs for the order.
    pub async fn run(self, shutdown: Shutdown) -> Result<Outcome, StartError> {
        let started = Instant::now();
        match crate::limit::raise_open_files() {
            Ok(limit) => tracing::debug!(limit, "open files limit"),
            Err(e) => tracing::warn!(error = %e, "cannot raise the open files limit"),
        }
        let order = start_order(&self.services)?;
        let root = self.root.clone();
        let leases = self.leases.clone().under(&root);
        // Whatever way this returns, nothing started below keeps running.
        let _stop_all = root.clone().drop_guard();

        let clients = Clients::new(
            self.hub.clone(),
            self.registry.clone(),
            RetryPolicy {
                max_buffered_body: usize::try_from(self.config.transport.max_buffered_body)
                    .unwrap_or(usize::MAX),
                idempotent_calls: arca_proto::IDEMPOTENT_CALLS,
                ..RetryPolicy::default()
            },
        );
        let (exit_tx, mut exit_rx) =
            mpsc::unbounded_channel::<(&'static str, Result<(), String>)>();
        let registered: Arc<std::sync::Mutex<Vec<(&'static str, Endpoint)>>> = Arc::default();
        let local: Vec<&'static str> = self.services.iter().map(|s| s.name).collect();

        let mut services: HashMap<&'static str, Entry> =
            self.services.into_iter().map(|s| (s.name, s)).collect();
        let mut running = Vec::new();
        for &name in &order {
            let Some(entry) = services.remove(name) else {
                continue;
            };
            let deps = entry.dependencies;
            let service = (entry.build)(&self.config);
            self.health.add(name, deps);
            let token = root.child_token();
            let task = ServiceTask {
                config: self.config.clone(),
                clients: clients.clone(),
                health: self.health.clone(),
                token: token.clone(),
                local_deps: deps.iter().copied().filter(|d| local.contains(d)).collect(),
                registered: registered.clone(),
                started,
                signer: self.signer.clone(),
                leases: leases.clone(),
                bus: self.bus.clone(),
            };
            let exit_tx = exit_tx.clone();
            // The service runs in its own task so that a panic is caught here and reported as
            // that service's failure instead of tearing down the supervisor.
            let inner = tokio::spawn(task.run(name, deps, service));
            let abort = inner.abort_handle();
            let handle = tokio::spawn(async move {
                let result = match inner.await {
                    Ok(r) => r.map_err(|e| error_chain(&*e)),
                    Err(join) => Err(panic_message(join)),
                };
                let _ = exit_tx.send((name, result));
            });
            running.push(Running {
                name,
                token,
                handle,
                abort,
            });
        }
        drop(exit_tx);

        // Wait for the first of: a stop request, or a service ending on its own (always a
        // failure).
        let mut heartbeat = tokio::time::interval(Duration::from_millis(500));
        let failure = loop {
            self.health.beat();
            tokio::select! {
                () = shutdown.requested() => { tracing::info!("shutting down"); break None; }
                Some((name, result)) = exit_rx.recv() => {
                    let cause = match result {
                        Err(cause) => cause,
                        Ok(()) => "stopped on its own while it should be serving".to_owned(),
                    };
                    tracing::error!(service = name, %cause, "service failed; stopping the others");
                    self.health.set_phase(name, Phase::Failed);
                    self.health.set_blocker(name, Some(cause.clone()));
                    break Some((name, cause));
                }
                _ = heartbeat.tick() => {}
            }
        };

        // 1. Not ready, at once. 2. Out of the registry, before any draining.
        self.health.set_draining();
        let to_deregister = std::mem::take(
            &mut *registered
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (service, endpoint) in &to_deregister {
            match tokio::time::timeout(PROBE_TIMEOUT, self.registry.deregister(service, endpoint))
                .await
            {
                Ok(Ok(())) => tracing::info!(service, %endpoint, "deregistered"),
                Ok(Err(e)) => tracing::warn!(service, %endpoint, error = %e, "deregister failed"),
                Err(_) => tracing::warn!(service, %endpoint, "deregister timed out"),
            }
        }

        let second_signal = shutdown.forced();
        tokio::pin!(second_signal);

        // 3. Keep serving while the world notices we are leaving.
        let drain_delay = self.config.shutdown.drain_delay;
        if failure.is_none() && !drain_delay.is_zero() {
            tracing::info!(
                ?drain_delay,
                "draining: still serving until peers stop sending"
            );
            tokio::select! {
                () = tokio::time::sleep(drain_delay) => {}
                () = &mut second_signal => { tracing::warn!("second signal: exiting now"); return Ok(Outcome::Forced); }
            }
        }

        // 4. Stop services, dependants first, each finishing its in-flight work.
        let deadline = tokio::time::Instant::now() + self.config.shutdown.timeout;
        let mut stragglers = Vec::new();
        let mut running = running;
        running.reverse();
        for svc in &mut running {
            self.health.set_phase(svc.name, Phase::Stopping);
            svc.token.cancel();
            tokio::select! {
                r = tokio::time::timeout_at(deadline, &mut svc.handle) => match r {
                    Ok(_) => {
                        self.health.set_phase(svc.name, Phase::Stopped);
                        tracing::info!(service = svc.name, "stopped");
                    }
                    Err(_) => {
                        tracing::error!(service = svc.name, "still busy at the shutdown deadline; abandoning it");
                        svc.abort.abort();
                        svc.handle.abort();
                        stragglers.push(svc.name);
                    }
                },
                () = &mut second_signal => { tracing::warn!("second signal: exiting now"); return Ok(Outcome::Forced); }
            }
        }
        // Late failures (a service erroring while draining) are worth a log line, not a new outcome.
        while let Ok((name, Err(cause))) = exit_rx.try_recv() {
            if failure.as_ref().is_none_or(|(n, _)| *n != name) {
                tracing::warn!(service = name, %cause, "service reported an error while stopping");
            }
        }
        Ok(match (failure, stragglers.is_empty()) {
            (Some((service, cause)), _) => Outcome::Failed { service, cause },
            (None, false) => Outcome::TimedOut { stragglers },
            (None, true) => Outcome::Clean,
        })
    }
}

/// What one service's task needs besides the service itself.
struct ServiceTask {
    config: Arc<Config>,
    clients: Clients,
    health: Health,
    token: CancellationToken,
    local_deps: Vec<&'static str>,
    registered: Arc<std::sync::Mutex<Vec<(&'static str, Endpoint)>>>,
    started: Instant,
    signer: TokenSigner,
    leases: Leases,
    bus: Arc<dyn EventBus>,
}

impl ServiceTask {
    async fn run(
        self,
        name: &'static str,
        deps: &'static [&'static str],
        service: Box<dyn Service>,
    ) -> Result<(), ServiceError> {
        // Local dependencies first, so the service does not start by failing calls.
        let wait = async {
            while !self.local_deps.iter().all(|d| self.health.is_ready(d)) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        tokio::select! {
            () = self.token.cancelled() => return Ok(()),
            r = tokio::time::timeout(LOCAL_DEPENDENCY_WAIT, wait) => if r.is_err() {
                tracing::warn!(service = name, deps = ?self.local_deps, "local dependencies not ready in time; starting anyway");
            }
        }

        // Bind, retrying: a socket directory may appear later (a volume mount), and until then
        // `/readyz` names the problem instead of the process dying in a restart loop.
        let Some(endpoint) = self.config.endpoint(name).cloned() else {
            return Err(format!("no endpoint configured for {name}").into());
        };
        let Some(internal) = self.bind_retrying(name, &endpoint).await else {
            return Ok(());
        };
        let mut public = Vec::new();
        for ep in service.public_endpoints() {
            let Some(l) = self.bind_retrying(name, &ep).await else {
                return Ok(());
            };
            public.push(l);
        }
        let announce: Vec<Endpoint> = std::iter::once(&internal)
            .filter(|l| !matches!(l, Listener::Mem(..)))
            .map(Listener::local_endpoint)
            .collect();
        self.health
            .set_public(name, public.iter().map(Listener::local_endpoint).collect());
        self.health.set_bound(name, true);
        self.health.set_blocker(name, None);
        self.health.set_phase(name, Phase::Running);
        tracing::info!(service = name, endpoint = %internal.local_endpoint(), "listening");
        for l in &public {
            tracing::info!(service = name, endpoint = %l.local_endpoint(), "listening (public)");
        }

        // Tracked with the service's other background work, so its end is waited for.
        let tasks = TaskTracker::new();
        tasks.spawn(watch_dependencies(
            name,
            deps,
            announce,
            self.clients.clone(),
            self.health.clone(),
            self.registered.clone(),
            self.token.clone(),
            self.started,
        ));

        let ctx = Context {
            name,
            config: self.config.clone(),
            clients: self.clients.clone(),
            health: self.health.clone(),
            shutdown: self.token.clone(),
            tasks,
            signer: self.signer.clone(),
            internal,
            public,
            leases: self.leases.clone(),
            bus: self.bus.clone(),
        };
        service.run(ctx).await
    }

    async fn bind_retrying(&self, name: &'static str, endpoint: &Endpoint) -> Option<Listener> {
        let mut backoff = Duration::from_millis(50);
        let mut last = String::new();
        loop {
            match bind(endpoint, self.clients.hub()).await {
                Ok(l) => return Some(l),
                Err(e) => {
                    let reason = e.to_string();
                    if reason != last {
                        tracing::warn!(service = name, error = %reason, "cannot bind; retrying");
                        self.health.set_blocker(name, Some(reason.clone()));
                        last = reason;
                    }
                }
            }
            tokio::select! {
                () = self.token.cancelled() => return None,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }
}

/// Probes every dependency until shutdown, feeding readiness; registers the service's
/// endpoints the first time it is fully ready, so no peer sends it work before that.
#[allow(clippy::too_many_arguments)]
async fn watch_dependencies(
    name: &'static str,
    deps: &'static [&'static str],
    mut announce: Vec<Endpoint>,
    clients: Clients,
    health: Health,
    registered: Arc<std::sync::Mutex<Vec<(&'static str, Endpoint)>>>,
    token: CancellationToken,
    started: Instant,
) {
    let mut failures: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut healthy: BTreeMap<&'static str, bool> = BTreeMap::new();
    let mut interval = Duration::from_millis(2);
    let mut was_ready = false;
    loop {
        for dep in deps {
            let result = probe(&clients, dep).await;
            let ok = healthy.entry(dep).or_insert(false);
            match result {
                Ok(()) => {
                    failures.insert(dep, 0);
                    if !*ok {
                        tracing::info!(service = name, dependency = dep, "dependency reachable");
                    }
                    *ok = true;
                    health.set_dependency(name, dep, None);
                }
                Err(e) => {
                    let n = failures.entry(dep).or_insert(0);
                    *n += 1;
                    if !*ok || *n >= FAILURES_BEFORE_UNHEALTHY {
                        if *ok || *n == 1 {
                            tracing::warn!(service = name, dependency = dep, error = %e, "dependency unreachable");
                        }
                        *ok = false;
                        health.set_dependency(name, dep, Some(e));
                    }
                }
            }
        }
        let ready = health.is_ready(name);
        if ready && !was_ready {
            tracing::info!(service = name, after_ms = %elapsed_ms(started), "ready");
            for endpoint in announce.drain(..) {
                match clients.registry().register(name, &endpoint).await {
                    Ok(()) => registered
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((name, endpoint)),
                    Err(e) => {
                        tracing::warn!(service = name, %endpoint, error = %e, "register failed")
                    }
                }
            }
        }
        was_ready = ready;
        let all_ok = healthy.values().all(|ok| *ok);
        interval = if all_ok && ready {
            PROBE_INTERVAL
        } else {
            (interval * 2).min(Duration::from_millis(250))
        };
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

async fn probe(clients: &Clients, dep: &str) -> Result<(), String> {
    let mut client = ProbeClient::new(clients.channel(dep));
    let answer = tokio::time::timeout(PROBE_TIMEOUT, client.check(CheckRequest {}))
        .await
        .map_err(|_| format!("no answer within {PROBE_TIMEOUT:?}"))?
        .map_err(|status| status.message().to_owned())?
        .into_inner();
    if answer.service != dep {
        return Err(format!(
            "the endpoint answered as {:?}, not {dep}",
            answer.service
        ));
    }
    match ProbeState::try_from(answer.state) {
        Ok(ProbeState::Serving | ProbeState::Draining) => Ok(()),
        _ => Err("starting".to_owned()),
    }
}

/// Dependencies before dependants; local services only (remote ones are probed, not ordered).
fn start_order(services: &[Entry]) -> Result<Vec<&'static str>, StartError> {
    if services.is_empty() {
        return Err(StartError::Empty);
    }
    let mut deps: BTreeMap<&'static str, Vec<&'static str>> = BTreeMap::new();
    for s in services {
        if deps.insert(s.name, Vec::new()).is_some() {
            return Err(StartError::Duplicate(s.name));
        }
    }
    for s in services {
        let local: Vec<_> = s
            .dependencies
            .iter()
            .copied()
            .filter(|d| deps.contains_key(d))
            .collect();
        deps.insert(s.name, local);
    }
    let mut order = Vec::new();
    // Keep the configured order among services that are free to start (stable, predictable logs).
    let names: Vec<&'static str> = services.iter().map(|s| s.name).collect();
    while order.len() < names.len() {
        let next = names
            .iter()
            .find(|n| !order.contains(*n) && deps[*n].iter().all(|d| order.contains(d)));
        match next {
            Some(n) => order.push(*n),
            None => {
                let stuck: Vec<_> = names
                    .iter()
                    .filter(|n| !order.contains(*n))
                    .copied()
                    .collect();
                return Err(StartError::Cycle(stuck.join(", ")));
            }
        }
    }
    Ok(order)
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

fn panic_message(join: tokio::task::JoinError) -> String {
    match join.try_into_panic() {
        Ok(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            format!("panicked: {msg}")
        }
        Err(e) => format!("task ended abnormally: {e}"),
    }
}
