//! arca-runtime: the supervisor (start order, readiness, graceful shutdown), the `Service`
//! trait every service implements, the per-process debug server and telemetry setup.
//!
//! Main types: [`Service`], its catalog [`Entry`] and its [`Context`], [`Supervisor`], the
//! [`Shutdown`] it is stopped by and its [`Outcome`], [`Health`]
//! (what `/readyz` reports), [`Leases`] (one holder per background job), [`Limiter`] and
//! [`SingleFlight`] (bounded work toward shared dependencies, see [`limit`]), [`Worker`]
//! (named background jobs, see [`worker`]), [`password`]
//! (argon2id hashing bounded to one computation per core),
//! [`debug::spawn`] and [`telemetry::init`].

pub mod debug;
pub mod events;
mod health;
mod layers;
mod lease;
pub mod limit;
pub mod password;
mod retry;
mod service;
mod shutdown;
mod supervisor;
pub mod telemetry;
mod throttle;
mod token;
mod watch;
pub mod worker;

pub use health::{Health, Report};
pub use layers::{Caller, caller};
pub use lease::{Lease, LeaseGuard, Leases};
pub use limit::{Flight, Limiter, Limits, SingleFlight};
pub use retry::retry_unavailable;
pub use service::{Context, Entry, Providers, Service, ServiceError};
pub use shutdown::Shutdown;
pub use supervisor::{Outcome, StartError, Supervisor};
pub use throttle::Throttle;
pub use token::{IDENTITY_PURPOSE, Identity, Login, TokenError, TokenSigner};
pub use watch::{Check, DependencyWatch, Readiness};
pub use worker::{Schedule, State as WorkerState, Worker};

/// Re-exported so services build routers and futures with the runtime's versions.
pub use axum::Router;
pub use futures::future::BoxFuture;
