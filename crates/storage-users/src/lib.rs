//! arca-storage-users: users' spaces: file metadata and blobs, served as the `Storage` API.
//!
//! Metadata lives in the store's relational database (SQLite under `data_dir/storage-users`
//! by default), contents in its blob store (`data_dir/storage-users/blobs` by default, an S3
//! bucket by `storage-users.blobs`); new personal spaces get `storage-users.personal_quota`.
//! gRPC carries metadata operations and the HTTP data path (`/data/{token}`) carries the bytes.
//! Every call is checked against the caller's identity here, whatever the gateway already did.

mod convert;
mod data;
mod provider;

use std::time::Duration;

use arca_proto::v1::storage_server::StorageServer;
use arca_runtime::{BoxFuture, Context, Service, ServiceError};
use arca_store::{Store, StoreConfig};
use axum::routing::put;

/// How often orphaned blobs are looked for, and how old an unreferenced blob must be before it
/// is removed (an upload in progress is young; a crashed one is not).
const GC_INTERVAL: Duration = Duration::from_secs(600);
const GC_MIN_AGE: Duration = Duration::from_secs(3600);

/// The storage-users service.
pub struct StorageUsers;

impl Service for StorageUsers {
    fn name(&self) -> &'static str {
        "storage-users"
    }

    fn dependencies(&self) -> &'static [&'static str] {
        &[]
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            // A storage service that cannot write its own directory can never work: fail the
            // process (with the path and the OS error) rather than linger unready.
            let dir = ctx.data_dir("storage-users").await?;
            let section = &ctx.config().storage_users;
            let mut cfg = StoreConfig::from_section(section, &dir);
            cfg.default_personal_quota = section.personal_quota;
            let store = Store::open(cfg).await?;
            let provider = provider::Provider {
                name: "storage-users",
                store: store.clone(),
                signer: ctx.signer().clone(),
            };
            let grpc = tonic::service::Routes::new(StorageServer::new(provider.clone()))
                .into_axum_router();
            let data = axum::Router::new()
                .route("/data/{token}", put(data::upload).get(data::download))
                .with_state(provider);
            let router = grpc.merge(data);

            let gc_store = store.clone();
            let stop = ctx.shutdown();
            ctx.spawn(async move {
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(GC_INTERVAL) => {}
                    }
                    match gc_store.collect_orphans(GC_MIN_AGE).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(removed = n, "collected orphaned blobs"),
                        Err(e) => tracing::warn!(error = %e, "orphan collection failed"),
                    }
                }
            });

            ctx.set_ready();
            let result = ctx.serve(router).await;
            store.close().await;
            result
        })
    }
}
