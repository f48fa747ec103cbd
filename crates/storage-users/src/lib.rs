//! arca-storage-users: users' spaces: file metadata and blobs, served as the `Storage` API.
//!
//! Metadata lives in the store's relational database (SQLite under `data_dir/storage-users`
//! by default), contents in its blob store (`data_dir/storage-users/blobs` by default, an S3
//! bucket by `storage-users.blobs`); new personal spaces get `storage-users.personal_quota`.
//! gRPC carries metadata operations and the HTTP data path (`/data/{token}`) carries the bytes.
//! Every call is checked against the caller's identity here, whatever the gateway already did:
//! a space's owner may do everything, anyone else what its shares grant (`grants`).
//! Removals go to the space's trash and overwritten contents become versions (`undo`), kept
//! by `storage-users.trash` and `storage-users.versions` (retention runs under a leader lease).

mod convert;
mod data;
mod folders;
mod grants;
mod hints;
mod homes;
mod members;
mod provider;
mod undo;
mod uploads;

use std::time::Duration;

use arca_proto::v1::storage_server::StorageServer;
use arca_runtime::events::Event;
use arca_runtime::{BoxFuture, Context, Schedule, Service, ServiceError, Worker, WorkerState};
use arca_store_files::{Store, StoreConfig};
use axum::routing::{patch, post, put};

/// `/readyz` follows the metadata database: not ready while it is unreachable for longer than
/// `grace` (the calls meeting a shorter loss are run again and succeed).
fn database_watch(
    job: &'static str,
    store: Store,
    ctx: &Context,
    grace: Duration,
) -> arca_runtime::DependencyWatch {
    let check: arca_runtime::Check = Box::new(move || {
        let store = store.clone();
        Box::pin(async move { store.ping().await.map_err(|e| e.to_string()) })
    });
    arca_runtime::DependencyWatch::new(job, "the metadata database", check, ctx.readiness(), grace)
}

/// How often orphaned blobs are looked for, and how old an unreferenced blob must be before it
/// is removed (an upload in progress is young; a crashed one is not).
const GC_INTERVAL: Duration = Duration::from_secs(600);
const GC_MIN_AGE: Duration = Duration::from_secs(3600);

/// The leader lease of the orphan collection: with several instances sharing one database,
/// one collects at a time. (Two would not corrupt anything, since each blob row is claimed by
/// one `DELETE … RETURNING`, but they would scan the same tables for nothing.)
const GC_LEASE: &str = "storage-users/orphan-gc";
/// The leader lease of the expiry of abandoned resumable uploads (one sweeper at a time).
const UPLOAD_EXPIRY_LEASE: &str = "storage-users/upload-expiry";
/// Events waiting for the bus; past this many (a bus outage) new ones are dropped, counted.
const OUTBOX_CAPACITY: usize = 10_000;
/// The leader lease of trash and version retention.
const UNDO_EXPIRY_LEASE: &str = "storage-users/undo-expiry";
/// This provider's name: the prefix of its space ids.
const PROVIDER: &str = "storage-users";
/// The actor of what retention purges.
const EXPIRY_ACTOR: &str = "system:retention";
/// The longest wait between two retention runs; a short retention runs more often (a tenth of
/// it, at least a second), so nothing outstays it by much.
const UNDO_EXPIRY_MAX_INTERVAL: Duration = Duration::from_secs(600);

/// Purges trash items past `storage-users.trash.retention` or over their share of a quota,
/// and thins versions by `storage-users.versions`, while this instance holds
/// [`UNDO_EXPIRY_LEASE`]. What expires frees its blob bytes at once, and each space's trash
/// that lost something is a `file.purged` event, as a purge by hand is.
struct UndoExpiry {
    store: Store,
    /// The provider's name, which prefixes space ids on the wire.
    provider: &'static str,
    events: arca_runtime::events::Outbox,
    trash: arca_config::TrashConfig,
    versions: arca_store_files::VersionRetention,
}

impl UndoExpiry {
    fn interval(&self) -> Duration {
        (self.trash.retention / 10).clamp(Duration::from_secs(1), UNDO_EXPIRY_MAX_INTERVAL)
    }
}

impl Worker for UndoExpiry {
    fn name(&self) -> &'static str {
        UNDO_EXPIRY_LEASE
    }

    fn schedule(&self) -> Schedule {
        Schedule::every(self.interval()).leased()
    }

    fn work(&mut self) -> BoxFuture<'_, Result<WorkerState, ServiceError>> {
        Box::pin(async move {
            let now = std::time::SystemTime::now();
            let trash = self
                .store
                .expire_trash_by_space(now, self.trash.retention, self.trash.max_share_of_quota)
                .await;
            let expired = match trash {
                Ok(expired) => expired,
                Err(e) => {
                    tracing::warn!(error = %e, "trash retention failed");
                    return Err(e.into());
                }
            };
            for space in expired {
                // No user removed these: the actor is the retention rule (a principal, as
                // `public:SHARE_ID` is for links); no trash key, as when a trash is emptied.
                let event = Event::new("file.purged", EXPIRY_ACTOR)
                    .with(
                        "space_id",
                        arca_proto::ids::space_id(self.provider, &space.space_id),
                    )
                    .with("trash_key", "")
                    .with("items", space.gone.items.to_string())
                    .with("bytes", space.gone.bytes.to_string())
                    .with("reason", if space.by_quota { "quota" } else { "age" });
                self.events.send(event);
            }
            if let Err(e) = self.store.expire_versions(now, &self.versions).await {
                tracing::warn!(error = %e, "version retention failed");
                return Err(e.into());
            }
            Ok(WorkerState::Idle)
        })
    }
}

/// Removes blobs no node refers to any more, every [`GC_INTERVAL`], while this instance holds
/// [`GC_LEASE`].
struct OrphanGc {
    store: Store,
}

impl Worker for OrphanGc {
    fn name(&self) -> &'static str {
        GC_LEASE
    }

    fn schedule(&self) -> Schedule {
        Schedule::every(GC_INTERVAL).leased()
    }

    fn work(&mut self) -> BoxFuture<'_, Result<WorkerState, ServiceError>> {
        Box::pin(async move {
            match self.store.collect_orphans(GC_MIN_AGE).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "collected orphaned blobs"),
                Err(e) => {
                    tracing::warn!(error = %e, "orphan collection failed");
                    return Err(e.into());
                }
            }
            Ok(WorkerState::Idle)
        })
    }
}

/// The storage-users service.
pub struct StorageUsers;

impl Service for StorageUsers {
    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            // A storage service that cannot write its own directory can never work: fail the
            // process (with the path and the OS error) rather than linger unready.
            let dir = ctx.data_dir("storage-users").await?;
            let section = &ctx.config().storage_users;
            let mut cfg = StoreConfig::from_section(section, &dir);
            cfg.default_personal_quota = section.personal_quota;
            // arca-config always sets these for storage-users (their defaults live there).
            let (Some(upload), Some(provisioning), Some(trash), Some(versions)) = (
                &section.uploads,
                &section.provisioning,
                &section.trash,
                &section.versions,
            ) else {
                return Err(
                    "config: storage-users lacks its uploads, provisioning, trash or \
                            versions section"
                        .into(),
                );
            };
            // Removals and replaced folders go to the trash; replaced contents become
            // versions (see arca_store_files' trash and versions).
            cfg.trash = true;
            cfg.versions = versions.enabled.then(|| arca_store_files::VersionRules {
                min_size: versions.min_size,
                exclude: versions.exclude.clone(),
            });
            // Users' spaces are written by this service alone: with SQLite, path lookups are
            // then served from memory between commits (instances sharing PostgreSQL do not).
            cfg.sole_writer = true;
            let store = Store::open(cfg).await?;
            // Resumable uploads live in the store (records in the database, bytes in the blob
            // store), so every instance sharing it serves every upload.
            let resumable = uploads::Uploads::new(store.clone(), upload.expiration);
            let (events, publisher) =
                arca_runtime::events::Outbox::new(ctx.bus().clone(), OUTBOX_CAPACITY);
            ctx.spawn_worker(publisher);
            let changes = hints::Changes::default();
            ctx.spawn_worker(hints::HintWorker {
                changes: changes.clone(),
                bus: ctx.bus().clone(),
                provider: PROVIDER,
            });
            let provider = provider::Provider {
                name: PROVIDER,
                store: store.clone(),
                signer: ctx.signer().clone(),
                uploads: resumable.clone(),
                grants: grants::Grants {
                    sharing: ctx.channel("sharing"),
                },
                homes: homes::Homes::new(store.clone(), provisioning.into()),
                events: events.clone(),
                changes,
                bursts: arca_store_files::BurstRules {
                    files: u64::from(trash.burst.items),
                    window: trash.burst.window,
                },
                paths: section.paths.unwrap_or(arca_config::PathLimits {
                    max_depth: 512,
                    max_bytes: 32 << 10,
                }),
            };
            let grpc = tonic::service::Routes::new(StorageServer::new(provider.clone()))
                .into_axum_router();
            // A database restart costs callers a wait, not an error (see the runtime's retry).
            let grpc = arca_runtime::retry_unavailable(grpc, section.database_retry);
            let data = axum::Router::new()
                .route("/data/{token}", put(data::upload).get(data::download))
                .route(
                    "/tus/{token}",
                    patch(uploads::patch)
                        .head(uploads::head)
                        .delete(uploads::terminate),
                )
                .route("/chunk/{token}", put(folders::put_chunk))
                .route("/assemble/{token}", post(folders::assemble))
                .with_state(provider);
            let router = grpc.merge(data);
            // Abandoned uploads are shared by the instances: one sweeps, under its lease.
            ctx.spawn_worker(uploads::Sweeper::new(resumable, UPLOAD_EXPIRY_LEASE));
            ctx.spawn_worker(OrphanGc {
                store: store.clone(),
            });
            ctx.spawn_worker(UndoExpiry {
                store: store.clone(),
                provider: PROVIDER,
                events,
                trash: trash.clone(),
                // Versions already kept are thinned even when new ones are no longer made.
                versions: arca_store_files::VersionRetention {
                    thinning: true,
                    max_per_file: versions.max_per_file,
                    max_share_of_quota: versions.max_share_of_quota,
                },
            });

            ctx.spawn_worker(database_watch(
                "storage-users/database-watch",
                store.clone(),
                &ctx,
                section.database_retry,
            ));
            ctx.set_ready();
            let result = ctx.serve(router).await;
            store.close().await;
            result
        })
    }
}
