//! arca-storage-system: the platform's own data: users, groups, share records, settings.
//!
//! It keeps them in the platform records store (arca-store-records: one relational database,
//! SQLite under `data_dir/storage-system` by default; no blob store, as it keeps no file
//! contents) and serves the `Users` and `ShareRecords` APIs. On
//! first start it creates the `admin` user with `identity.admin_password`
//! (`ARCA_ADMIN_PASSWORD`), or with a random password printed once to the log.
//!
//! Besides users it keeps groups and app tokens, and feeds proxies the credential changes they
//! must forget cached logins for (`WatchCredentials`, see `credentials`). [`local`] is the
//! same user store for `arca users`, which works on the database with no server running.

mod apptokens;
mod credentials;
pub mod local;
mod shares;
mod users;

use arca_proto::v1::users_server::UsersServer;
use arca_runtime::{BoxFuture, Context, Service, ServiceError};
use arca_store_records::{Records, RecordsConfig, StoreError};

/// The storage-system service.
pub struct StorageSystem;

impl Service for StorageSystem {
    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            let dir = ctx.data_dir("storage-system").await?;
            let store = Records::open(RecordsConfig::from_section(
                &ctx.config().storage_system,
                &dir,
            ))
            .await?;
            ensure_admin(&store, ctx.config().identity.admin_password.clone()).await?;
            let feed = credentials::Feed::open(store.clone(), ctx.shutdown()).await?;
            ctx.spawn_worker(credentials::Poller(feed.clone()));
            ctx.spawn_worker(credentials::Pruner(store.clone()));
            let api = users::UsersApi {
                store: store.clone(),
                decoy: arca_runtime::password::Decoy::new().await?,
                feed,
                signer: ctx.signer().clone(),
                // The proxy's login throttle, counted per user here.
                password_checks: arca_runtime::Throttle::new(
                    ctx.config().proxy.auth.max_failures,
                    ctx.config().proxy.auth.window,
                ),
            };
            let router = tonic::service::Routes::new(UsersServer::new(api))
                // Share records for the sharing service (see `shares`).
                .add_service(
                    arca_proto::v1::share_records_server::ShareRecordsServer::new(
                        shares::RecordsApi {
                            store: store.clone(),
                        },
                    ),
                )
                .into_axum_router();
            // A database restart costs callers a wait, not an error (see the runtime's retry).
            let router =
                arca_runtime::retry_unavailable(router, ctx.config().storage_system.database_retry);
            // `/readyz` follows the database: not ready while it is unreachable for longer than
            // the calls meeting a loss are run again.
            let watched = store.clone();
            let check: arca_runtime::Check = Box::new(move || {
                let store = watched.clone();
                Box::pin(async move { store.ping().await.map_err(|e| e.to_string()) })
            });
            ctx.spawn_worker(arca_runtime::DependencyWatch::new(
                "storage-system/database-watch",
                "the metadata database",
                check,
                ctx.readiness(),
                ctx.config().storage_system.database_retry,
            ));
            ctx.set_ready();
            let result = ctx.serve(router).await;
            store.close().await;
            result
        })
    }
}

/// Creates `admin` once. Never a fixed default password: the configured one, or a random one
/// shown once, now, in the log.
async fn ensure_admin(store: &Records, configured: Option<String>) -> Result<(), ServiceError> {
    match store.user_by_name("admin").await {
        Ok(_) => return Ok(()),
        Err(StoreError::NotFound) => {}
        Err(e) => return Err(e.into()),
    }
    let (password, generated) = match configured {
        Some(p) => (p, false),
        None => (arca_config::generate_secret(12), true),
    };
    let hash = users::hash_password(password.clone()).await?;
    match store.create_user("admin", "Admin", "", &hash, true).await {
        Ok(_) => {}
        // Another instance created it first: fine.
        Err(StoreError::AlreadyExists) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    if generated {
        tracing::warn!(
            user = "admin",
            password = %password,
            "created the admin user with a generated password (shown only now; set ARCA_ADMIN_PASSWORD to choose one)"
        );
    } else {
        tracing::info!(
            user = "admin",
            "created the admin user with the configured password"
        );
    }
    Ok(())
}
