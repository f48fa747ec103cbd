//! The `Sharing` API, forwarded to the sharing service.
//!
//! One call is more than a forward: `CreateShare` carries the node to share, which the gateway
//! fills in itself by stat'ing the reference *as the caller* on its storage provider. So the
//! sharing service learns the node's id, space, owner and the caller's permissions there from
//! the provider that enforces them, never from the client, and a caller can only share what
//! it can see. `OpenLink` is the one call taken without an identity (anyone holding a link).

use arca_proto::ErrorKind;
use arca_proto::v1::sharing_client::SharingClient;
use arca_proto::v1::sharing_server::Sharing;
use arca_proto::v1::*;
use arca_runtime::caller;
use arca_transport::Channel;
use tonic::{Request, Response, Status};

pub(crate) struct SharingApi {
    pub(crate) sharing: Channel,
    pub(crate) storage: crate::GatewayApi,
}

impl SharingApi {
    fn client(&self) -> SharingClient<Channel> {
        SharingClient::new(self.sharing.clone())
    }
}

macro_rules! forward_sharing {
    ($self:ident, $req:ident, $method:ident) => {{
        caller(&$req)?;
        $self
            .client()
            .$method(Request::new($req.into_inner()))
            .await
    }};
}

#[tonic::async_trait]
impl Sharing for SharingApi {
    async fn create_share(
        &self,
        req: Request<CreateShareRequest>,
    ) -> Result<Response<Share>, Status> {
        caller(&req)?;
        let mut r = req.into_inner();
        let provider = crate::GatewayApi::provider_of(r.r#ref.as_ref())?;
        // As the caller: the call's identity travels with it.
        let node = self
            .storage
            .provider(provider)
            .stat(StatRequest {
                r#ref: r.r#ref.clone(),
                with_props: false,
                with_locks: false,
            })
            .await?
            .into_inner();
        r.node = Some(node);
        self.client().create_share(Request::new(r)).await
    }

    async fn get_share(&self, req: Request<GetShareRequest>) -> Result<Response<Share>, Status> {
        forward_sharing!(self, req, get_share)
    }

    async fn update_share(
        &self,
        req: Request<UpdateShareRequest>,
    ) -> Result<Response<Share>, Status> {
        forward_sharing!(self, req, update_share)
    }

    async fn delete_share(
        &self,
        req: Request<DeleteShareRequest>,
    ) -> Result<Response<DeleteShareResponse>, Status> {
        forward_sharing!(self, req, delete_share)
    }

    async fn list_shares(
        &self,
        req: Request<ListSharesRequest>,
    ) -> Result<Response<ListSharesResponse>, Status> {
        forward_sharing!(self, req, list_shares)
    }

    async fn set_share_state(
        &self,
        req: Request<SetShareStateRequest>,
    ) -> Result<Response<Share>, Status> {
        forward_sharing!(self, req, set_share_state)
    }

    async fn grants(
        &self,
        _req: Request<GrantsRequest>,
    ) -> Result<Response<GrantsResponse>, Status> {
        // Providers ask the sharing service directly; clients have no use for it.
        Err(ErrorKind::PermissionDenied.status("grants are for storage providers"))
    }

    async fn open_link(
        &self,
        req: Request<OpenLinkRequest>,
    ) -> Result<Response<OpenLinkResponse>, Status> {
        self.client()
            .open_link(Request::new(req.into_inner()))
            .await
    }
}
