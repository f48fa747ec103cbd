//! The one trait every arca service implements, the catalog [`Entry`] that names it, and the
//! context the runtime hands it.

use std::sync::Arc;

use arca_config::Config;
use arca_transport::{Channel, Clients, Endpoint, Listener};
use axum::Router;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::events::EventBus;
use crate::health::Health;
use crate::layers;
use crate::lease::{Lease, Leases};
use crate::token::TokenSigner;
use crate::worker::Worker;

/// What a service's `run` may fail with; reported by the supervisor with the service's name.
pub type ServiceError = Box<dyn std::error::Error + Send + Sync>;

/// An arca service: proxy, frontend, gateway, storage-users, storage-system or sharing.
///
/// A service never binds sockets, handles signals or exits the process: the runtime binds its
/// endpoint(s), starts it after the services it depends on, tells it when to stop through
/// [`Context::shutdown`], and owns the process's fate. Its name and dependencies are not the
/// service's to say: they are its catalog [`Entry`]'s, known before anything is built.
pub trait Service: Send + 'static {
    /// Listeners besides the service's internal endpoint (the proxy's public HTTP address).
    fn public_endpoints(&self) -> Vec<Endpoint> {
        Vec::new()
    }

    /// Serves until `ctx.shutdown()` is cancelled, then drains and returns. Returning before
    /// that, or returning an error, is a failure that stops the process.
    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>>;
}

/// One service a process can host: what the supervisor must know before building it, and how
/// to build it. A binary's catalog is a list of these (`arca_host::CATALOG`); adding a service
/// is one entry there.
#[derive(Clone, Copy)]
pub struct Entry {
    /// The service's name, as used in config, the registry, logs and `/readyz`.
    pub name: &'static str,
    /// Services this one calls. Local ones are started first; every one, local or remote, is
    /// probed continuously and must answer for this service to be ready.
    pub dependencies: &'static [&'static str],
    /// Builds the service from the process's config (nothing is bound or opened yet).
    pub build: fn(&Config) -> Box<dyn Service>,
    /// What of the config only the service can check (files it names), before anything binds:
    /// one line naming the key.
    pub check: fn(&Config) -> Result<(), String>,
}

impl Entry {
    /// A check for services whose whole config the loader validates.
    pub fn no_check(_: &Config) -> Result<(), String> {
        Ok(())
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("dependencies", &self.dependencies)
            .finish_non_exhaustive()
    }
}

/// Everything a running service gets from the runtime.
pub struct Context {
    pub(crate) name: &'static str,
    pub(crate) config: Arc<Config>,
    pub(crate) clients: Clients,
    pub(crate) health: Health,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tasks: TaskTracker,
    pub(crate) signer: TokenSigner,
    pub(crate) internal: Listener,
    pub(crate) public: Vec<Listener>,
    pub(crate) leases: Leases,
    pub(crate) bus: Arc<dyn EventBus>,
}

impl Context {
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// A client channel to another service by name, wherever it runs.
    pub fn channel(&self, service: &str) -> Channel {
        self.clients.channel(service)
    }

    /// A channel to each storage provider ([`arca_proto::ids::PROVIDERS`]), by the name a
    /// resource id carries.
    pub fn providers(&self) -> Providers {
        Providers {
            home: self.channel(arca_proto::ids::HOME_PROVIDER),
            all: arca_proto::ids::PROVIDERS
                .iter()
                .map(|name| (*name, self.channel(name)))
                .collect(),
        }
    }

    /// Signs and verifies identity tokens and transfer grants with the process's secret.
    pub fn signer(&self) -> &TokenSigner {
        &self.signer
    }

    /// The process's one event bus (in memory, or the JetStream stream all processes share).
    pub fn bus(&self) -> &Arc<dyn EventBus> {
        &self.bus
    }

    /// The leader lease of a background job (`"storage-users/orphan-gc"`): at most one holder
    /// across the processes sharing the lease store runs it. Waiting for it ends at shutdown.
    pub fn lease(&self, job: &str) -> Lease {
        self.leases.lease(job, self.shutdown.clone())
    }

    /// Declares the service itself ready (its own stores open, its own state loaded).
    /// Dependencies and listeners are checked by the runtime on top of this.
    pub fn set_ready(&self) {
        self.health.set_self_ready(self.name, true);
    }

    /// The service's readiness, for background work that decides it later (see
    /// [`crate::DependencyWatch`]).
    pub fn readiness(&self) -> crate::Readiness {
        crate::Readiness {
            name: self.name,
            health: self.health.clone(),
        }
    }

    /// Withdraws readiness, naming why; `/readyz` shows the reason.
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        self.health.set_self_ready(self.name, false);
        self.health.set_blocker(self.name, Some(reason.into()));
    }

    /// Cancelled when this service must stop: finish in-flight work and return.
    pub fn shutdown(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Runs background work that shutdown waits for (within the process deadline).
    pub fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tasks.spawn(fut);
    }

    /// Starts a background [`Worker`] for the life of the service: paced by its schedule, under
    /// its leader lease if it asks for one, stopped (and waited for) at shutdown.
    pub fn spawn_worker(&self, worker: impl Worker) {
        let lease = worker.schedule().leased.then(|| self.lease(worker.name()));
        self.tasks
            .spawn(crate::worker::run(worker, lease, self.shutdown.clone()));
    }

    /// Creates (if needed) and returns `data_dir/NAME`, after proving it is writable and
    /// durable: a file is written, synced and removed. A store that cannot do this must not
    /// report ready.
    pub async fn data_dir(&self, name: &str) -> std::io::Result<std::path::PathBuf> {
        let dir = self.config.data_dir.join(name);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| annotate(&dir, e))?;
        let probe = dir.join(".arca-write-probe");
        let write = async {
            let mut f = tokio::fs::File::create(&probe).await?;
            tokio::io::AsyncWriteExt::write_all(&mut f, b"ok").await?;
            f.sync_all().await?;
            tokio::fs::remove_file(&probe).await
        };
        write.await.map_err(|e| annotate(&probe, e))?;
        Ok(dir)
    }

    /// Serves `internal` on the service's endpoint until shutdown, then drains.
    pub async fn serve(self, internal: Router) -> Result<(), ServiceError> {
        self.serve_with_public(internal, None).await
    }

    /// Serves `internal` on the service's endpoint and `public` on its public listeners.
    pub async fn serve_with_public(
        self,
        internal: Router,
        public: Option<Router>,
    ) -> Result<(), ServiceError> {
        self.serve_public_with(internal, public, arca_transport::ServeOptions::default())
            .await
    }

    /// [`serve_with_public`](Self::serve_with_public), the public listeners served with
    /// `edge` (TLS, connection timeouts); the internal endpoint never is.
    pub async fn serve_public_with(
        self,
        internal: Router,
        public: Option<Router>,
        edge: arca_transport::ServeOptions,
    ) -> Result<(), ServiceError> {
        let internal = layers::internal(
            internal,
            self.name,
            self.health.clone(),
            self.signer.clone(),
        );
        let mut servers = Vec::new();
        // A service listening on a socket (for callers in other processes) is served to
        // callers in this process in memory too: the gateway calls the sharing service of its
        // own pod without a socket hop, and finds it at all where the registry names only
        // other groups' services (a DNS or static registry has no entry for what a process
        // hosts itself). Closed at shutdown like any in-memory endpoint, so in-process callers
        // then go to another instance.
        if !matches!(self.internal, Listener::Mem(..)) {
            let name = Endpoint::Mem(self.name.to_owned());
            match arca_transport::bind(&name, self.clients.hub()).await {
                Ok(mem) => servers.push(arca_transport::serve_with(
                    mem,
                    internal.clone(),
                    self.shutdown.clone(),
                    arca_transport::ServeOptions::default(),
                )),
                Err(e) => tracing::warn!(
                    service = self.name,
                    error = %e,
                    "not served in memory to this process's callers"
                ),
            }
        }
        servers.push(arca_transport::serve_with(
            self.internal,
            internal,
            self.shutdown.clone(),
            arca_transport::ServeOptions::default(),
        ));
        if let Some(public) = public {
            let public = layers::public(public, self.name);
            for listener in self.public {
                servers.push(arca_transport::serve_with(
                    listener,
                    public.clone(),
                    self.shutdown.clone(),
                    edge.clone(),
                ));
            }
        }
        let results = futures::future::join_all(servers).await;
        self.tasks.close();
        self.tasks.wait().await;
        for r in results {
            r?;
        }
        Ok(())
    }
}

fn annotate(path: &std::path::Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The storage providers' channels, by provider name (see [`Context::providers`]).
#[derive(Clone)]
pub struct Providers {
    home: Channel,
    all: Vec<(&'static str, Channel)>,
}

impl Providers {
    /// The channel of `provider`. Resource ids are parsed against the same list, so a parsed
    /// id always names one; any other name gets the home provider's.
    pub fn get(&self, provider: &str) -> &Channel {
        self.all
            .iter()
            .find(|(n, _)| *n == provider)
            .map_or(&self.home, |(_, c)| c)
    }
}
