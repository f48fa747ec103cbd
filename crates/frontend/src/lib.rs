//! arca-frontend: the HTTP APIs clients speak, translated into gateway gRPC calls and the
//! storage providers' data path. One module per API, each rendering failures in its own format:
//!
//! - `webdav`: `/remote.php/webdav/`, `/remote.php/dav/files/{user}/`, `/dav/spaces/{id}/`
//!   (handlers by method group, the share jail; the protocol pieces, pure, in [`dav`]); the
//!   trash bin and versions in oCIS's and Nextcloud's shapes (`webdav::undo`).
//! - `ocs`: the OCS envelope, capabilities, the user, the share API (`ocs::shares`).
//! - `graph`: libregraph users, groups and drives (spaces); `apptokens`: `/auth-app/tokens`.
//! - `tus`: resumable uploads; `chunking`: Nextcloud's chunked uploads; `public`: public links.
//! - `trash_api`: bulk restore of a trash (`/api/v1/trash/restore`, what `arca trash` calls).
//! - `archive`: folders and selections as one streamed ZIP (`/archiver`, a link's `/archive`).
//! - `preview`: `?preview=1` on a file URL's GET or HEAD, an image made by the thumbnails
//!   service.
//! - `search`: `REPORT` `oc:search-files` on the WebDAV roots and `/remote.php/dav/spaces/`,
//!   answered by the search service.
//! - the web app (`arca_web`), mounted at `/` as it is.
//!
//! Below them, shared by all: `failure` (the one gRPC status → HTTP mapping), `headers` (what
//! every upload path reads), `dates`. Which paths need no login is `arca_proto::routes`, which
//! the proxy reads too; every other route here is authenticated.

use arca_runtime::{BoxFuture, Context, Router, Service, ServiceError};
use axum::Json;
use axum::routing::get;
use serde_json::{Value, json};

mod apptokens;
mod archive;
mod chunking;
mod dates;
mod failure;
mod graph;
mod headers;
mod ocs;
mod preview;
mod public;
mod search;
mod trash_api;
mod tus;
mod webdav;

pub use webdav::dav;

/// The frontend service.
pub struct Frontend;

impl Service for Frontend {
    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            let dav = webdav::Dav::new(ctx.channel("gateway"), ctx.providers());
            let archive = archive::Limits::of(&ctx.config().frontend.archive);
            let router = Router::new()
                .route(arca_proto::routes::STATUS, get(status))
                .merge(webdav::routes(dav.clone()))
                // REPORT oc:search-files where no space is named (the WebDAV roots hand
                // their REPORTs to the same handler).
                .merge(search::routes(ctx.channel("gateway")))
                // Nextcloud's chunked uploads (/remote.php/dav/uploads/).
                .merge(chunking::routes(dav.clone()))
                // Public links and the OCS share API (the share jail lives in `webdav`).
                .merge(public::routes(dav.clone(), archive))
                // Folders and selections as one ZIP.
                .merge(archive::routes(dav, archive))
                .merge(tus::routes(ctx.channel(arca_proto::ids::HOME_PROVIDER)))
                .merge(graph::routes(ctx.channel("gateway")))
                .merge(apptokens::routes(ctx.channel("gateway")))
                .merge(trash_api::routes(ctx.channel("gateway")))
                .merge(ocs::routes(ctx.channel("gateway")))
                // The web app's page and files (public: see arca_proto::routes).
                .merge(arca_web::router());
            ctx.set_ready();
            ctx.serve(router).await
        })
    }
}

/// `GET /status.php`, in the shape oCIS answers (see shared/protocol/samples/status.json):
/// clients read `installed`, `maintenance` and the version strings before logging in.
async fn status() -> Json<Value> {
    Json(status_info())
}

/// `/status.php`'s answer; the OCS capabilities carry the same object and version.
pub(crate) fn status_info() -> Value {
    json!({
        "installed": true,
        "maintenance": false,
        "needsDbUpgrade": false,
        "version": "10.11.0.0",
        "versionstring": "10.11.0",
        "edition": "Community",
        "productname": "arca",
        "product": "arca",
        "productversion": arca_proto::VERSION,
    })
}
