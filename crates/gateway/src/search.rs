//! The `Search` API, forwarded to the search service as it is.
//!
//! Unlike previews there is nothing to fill in: the caller's identity travels with the call,
//! and the search service asks the providers and the sharing service itself, as the caller,
//! which spaces and shares that caller may read (the gateway is no help there: it calls the
//! search service, so the search service calling it back would be a cycle).
//!
//! The search service is an optional call of the gateway (`arca_host::OPTIONAL_CALLS`), no
//! dependency: where none is deployed, searches answer unavailable (the frontend's 503) and
//! everything else works.

use arca_proto::v1::search_client::SearchClient;
use arca_proto::v1::search_server::Search;
use arca_proto::v1::{SearchRequest, SearchResponse};
use arca_runtime::caller;
use arca_transport::Channel;
use tonic::{Request, Response, Status};

pub(crate) struct SearchApi {
    pub(crate) search: Channel,
}

#[tonic::async_trait]
impl Search for SearchApi {
    async fn search(
        &self,
        req: Request<SearchRequest>,
    ) -> Result<Response<SearchResponse>, Status> {
        // Anonymous calls stop here, as every gateway API refuses them.
        caller(&req)?;
        // A page of hits with their nodes may pass tonic's 4 MiB default; the Storage API's
        // bound holds any the service sends.
        SearchClient::new(self.search.clone())
            .max_decoding_message_size(arca_proto::MAX_STORAGE_ANSWER)
            .search(Request::new(req.into_inner()))
            .await
    }
}
