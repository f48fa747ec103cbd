//! The `Thumbnails` API, forwarded to the thumbnails service.
//!
//! As with `CreateShare`, the gateway fills in what the service must not take from a client:
//! the source's transfer, made by `InitiateDownload` of the reference *as the caller* on its
//! provider. So the provider checks the caller may read the file (a caller who may not gets
//! its refusal, never a preview), says the file's id and current etag (what previews are
//! cached by), and the thumbnails service reads the bytes itself without calling back here.
//!
//! The thumbnails service is an optional call of the gateway (`arca_host::OPTIONAL_CALLS`),
//! no dependency: where none is deployed, previews answer 503 and everything else works.

use arca_proto::v1::thumbnails_client::ThumbnailsClient;
use arca_proto::v1::thumbnails_server::Thumbnails;
use arca_proto::v1::*;
use arca_runtime::caller;
use arca_transport::Channel;
use tonic::{Request, Response, Status};

pub(crate) struct ThumbnailsApi {
    pub(crate) thumbnails: Channel,
    pub(crate) storage: crate::GatewayApi,
}

#[tonic::async_trait]
impl Thumbnails for ThumbnailsApi {
    async fn get_thumbnail(
        &self,
        req: Request<GetThumbnailRequest>,
    ) -> Result<Response<Thumbnail>, Status> {
        caller(&req)?;
        let mut r = req.into_inner();
        let provider = crate::GatewayApi::provider_of(r.r#ref.as_ref())?;
        let source = self
            .storage
            .provider(provider)
            .initiate_download(InitiateDownloadRequest {
                r#ref: r.r#ref.clone(),
                version_key: String::new(),
                small_body: false,
            })
            .await?
            .into_inner();
        r.source = Some(source);
        // A preview may be larger than tonic's 4 MiB default (a big PNG); the Storage API's
        // bound holds any the service makes.
        ThumbnailsClient::new(self.thumbnails.clone())
            .max_decoding_message_size(arca_proto::MAX_STORAGE_ANSWER)
            .get_thumbnail(Request::new(r))
            .await
    }
}
