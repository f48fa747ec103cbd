//! arca-storage-users: users' spaces: file metadata and blobs.
//!
//! Today it opens (creates and proves writable) its directory under `data_dir` and is ready
//! once that succeeded; the metadata store and blob store arrive with the files work.

use arca_runtime::{BoxFuture, Context, Router, Service, ServiceError};

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
            tracing::debug!(dir = %dir.display(), "data directory ready");
            ctx.set_ready();
            ctx.serve(Router::new()).await
        })
    }
}
