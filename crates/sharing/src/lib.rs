//! arca-sharing: shares and public links, and who may do what because of them.
//!
//! Today it serves the probe and is ready while storage-system (where share records live)
//! answers; the share API arrives with the sharing work.

use arca_runtime::{BoxFuture, Context, Router, Service, ServiceError};

/// The sharing service.
pub struct Sharing;

impl Service for Sharing {
    fn name(&self) -> &'static str {
        "sharing"
    }

    fn dependencies(&self) -> &'static [&'static str] {
        &["storage-system"]
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            ctx.set_ready();
            ctx.serve(Router::new()).await
        })
    }
}
