//! arca-gateway: the one gRPC API the frontend calls; finds the storage provider for a space.
//!
//! Today it serves the probe and reports ready only while every storage provider and the
//! sharing service answer theirs; the space lookup and forwarding arrive with the files work.

use arca_runtime::{BoxFuture, Context, Router, Service, ServiceError};

/// The gateway service.
pub struct Gateway;

impl Service for Gateway {
    fn name(&self) -> &'static str {
        "gateway"
    }

    fn dependencies(&self) -> &'static [&'static str] {
        &["storage-users", "storage-system", "sharing"]
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            // Nothing of its own to open: the gateway holds no state, only routes calls.
            ctx.set_ready();
            ctx.serve(Router::new()).await
        })
    }
}
