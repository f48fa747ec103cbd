//! arca-sharing: shares and public links, and who may do what because of them.
//!
//! It serves the `Sharing` API (through the gateway): user and group shares with OCS
//! permission bits, public links (unguessable tokens, argon2id passwords, expiry, upload-only
//! drops), recipients' accept/decline, and `Grants`, which storage providers ask on every call
//! by a caller who does not own the space. It keeps no state of its own: the records live in
//! storage-system (`ShareRecords`, over gRPC, so this service runs wherever the frontend does),
//! users and groups come from storage-system's `Users` API, and every answer is computed from
//! them afresh, so a revoked or narrowed share takes effect on the very next request.
//!
//! Share created/updated/removed/accepted/declined and link accessed are published on the
//! process's event bus ([`Context::bus`]), with ids, actor and time; the service writes each
//! one to the log too (`arca::events`).

mod api;
mod perms;

use arca_proto::v1::sharing_server::SharingServer;
use arca_runtime::events::Outbox;
use arca_runtime::{BoxFuture, Context, Service, ServiceError};

/// Events waiting for the bus (while NATS is away) before new ones are dropped.
const OUTBOX_CAPACITY: usize = 10_000;

/// The sharing service.
pub struct Sharing;

impl Service for Sharing {
    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            let config = ctx.config().clone();
            // Requests hand events over and answer; a bus that is down delays events only.
            let (events, publisher) = Outbox::new(ctx.bus().clone(), OUTBOX_CAPACITY);
            ctx.spawn_worker(publisher);
            let api = api::SharingApi {
                system: ctx.channel("storage-system"),
                signer: ctx.signer().clone(),
                auto_accept: config.sharing.auto_accept,
                events,
                throttle: arca_runtime::Throttle::new(
                    config.proxy.auth.max_failures,
                    config.proxy.auth.window,
                ),
                decoy: arca_runtime::password::Decoy::new().await?,
            };
            // The audit trail, read as group "sharing": once per event however many
            // sharing replicas run.
            ctx.spawn(arca_runtime::events::log_events(
                ctx.bus().as_ref(),
                "sharing",
                ctx.shutdown(),
            ));
            let router = tonic::service::Routes::new(SharingServer::new(api)).into_axum_router();
            ctx.set_ready();
            ctx.serve(router).await
        })
    }
}
