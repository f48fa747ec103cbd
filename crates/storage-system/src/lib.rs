//! arca-storage-system: the platform's own data: users, groups, share records, settings.
//!
//! Today it opens (creates and proves writable) its directory under `data_dir` and is ready
//! once that succeeded; the metadata store and blob store arrive with the files work.

use arca_runtime::{BoxFuture, Context, Router, Service, ServiceError};

/// The storage-system service.
pub struct StorageSystem;

impl Service for StorageSystem {
    fn name(&self) -> &'static str {
        "storage-system"
    }

    fn dependencies(&self) -> &'static [&'static str] {
        &[]
    }

    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            // A storage service that cannot write its own directory can never work: fail the
            // process (with the path and the OS error) rather than linger unready.
            let dir = ctx.data_dir("storage-system").await?;
            tracing::debug!(dir = %dir.display(), "data directory ready");
            ctx.set_ready();
            ctx.serve(Router::new()).await
        })
    }
}
