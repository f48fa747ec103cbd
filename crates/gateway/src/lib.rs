//! arca-gateway: the one gRPC API the frontend calls; finds the storage provider for a space.
//!
//! It serves the `Storage` API and forwards each call to the provider named in the resource's
//! id (`PROVIDER$SPACE!NODE`), or to storage-users for the caller's own personal space, so
//! routing costs no lookup. The caller's identity travels with the forwarded call and the
//! provider checks it against the space on every call; the gateway refuses anonymous calls
//! and operations spanning two providers before anything is forwarded (the providers are
//! `arca_proto::ids::PROVIDERS`). The `Users` API is forwarded to storage-system the same way, so the frontend has one API to call, the
//! `Sharing` API to the sharing service (`sharing`: it stats what is to be shared first), and
//! the `Thumbnails` API to the thumbnails service (`thumbnails`: it opens the source first),
//! and the `Search` API to the search service (`search`).

use arca_proto::ErrorKind;
use arca_proto::ids::{HOME_PROVIDER, parse_node_id, parse_space_id};
use arca_proto::v1::storage_client::StorageClient;
use arca_proto::v1::storage_server::{Storage, StorageServer};
use arca_proto::v1::users_client::UsersClient;
use arca_proto::v1::users_server::{Users, UsersServer};
use arca_proto::v1::*;
use arca_runtime::{BoxFuture, Context, Providers, Service, ServiceError, caller};
use arca_transport::Channel;
use tonic::{Request, Response, Status};

mod passthrough;
mod search;
mod sharing;
mod thumbnails;

/// The gateway service.
pub struct Gateway;

impl Service for Gateway {
    fn run(self: Box<Self>, ctx: Context) -> BoxFuture<'static, Result<(), ServiceError>> {
        Box::pin(async move {
            let api = std::sync::Arc::new(GatewayApi {
                providers: ctx.providers(),
            });
            let users = UsersApi {
                system: ctx.channel("storage-system"),
            };
            // Sharing calls stat through the same routing as the Storage API (see `sharing`).
            let shares = sharing::SharingApi {
                sharing: ctx.channel("sharing"),
                storage: GatewayApi {
                    providers: ctx.providers(),
                },
            };
            // Previews: the source's transfer is made here, as the caller (see `thumbnails`).
            let previews = thumbnails::ThumbnailsApi {
                thumbnails: ctx.channel("thumbnails"),
                storage: GatewayApi {
                    providers: ctx.providers(),
                },
            };
            let typed = tonic::service::Routes::new(StorageServer::from_arc(api.clone()))
                .add_service(UsersServer::new(users))
                .add_service(arca_proto::v1::sharing_server::SharingServer::new(shares))
                .add_service(arca_proto::v1::thumbnails_server::ThumbnailsServer::new(
                    previews,
                ))
                .add_service(arca_proto::v1::search_server::SearchServer::new(
                    search::SearchApi {
                        search: ctx.channel("search"),
                    },
                ))
                .into_axum_router();
            let router = passthrough::routes(api).merge(typed);
            // Nothing of its own to open: the gateway holds no state, only routes calls.
            ctx.set_ready();
            ctx.serve(router).await
        })
    }
}

struct GatewayApi {
    providers: Providers,
}

impl GatewayApi {
    fn channel(&self, name: &str) -> Channel {
        self.providers.get(name).clone()
    }

    fn provider(&self, name: &str) -> StorageClient<Channel> {
        arca_proto::storage_client(self.channel(name))
    }

    /// The provider holding `r`: named by its node or space id, else the caller's home.
    fn provider_of(r: Option<&Ref>) -> Result<&'static str, Status> {
        let Some(r) = r else {
            return Err(ErrorKind::InvalidArgument.status("missing resource reference"));
        };
        if !r.node_id.is_empty() {
            return parse_node_id(&r.node_id).map(|(p, _, _)| p).ok_or_else(|| {
                ErrorKind::NotFound.status(format!("no such resource id {:?}", r.node_id))
            });
        }
        if !r.space_id.is_empty() {
            return parse_space_id(&r.space_id).map(|(p, _)| p).ok_or_else(|| {
                ErrorKind::NotFound.status(format!("no such space {:?}", r.space_id))
            });
        }
        Ok(HOME_PROVIDER)
    }

    /// The provider of a trash: space `id`'s, or the caller's home's when `id` is empty.
    fn trash_provider(id: &str) -> Result<&'static str, Status> {
        if id.is_empty() {
            return Ok(HOME_PROVIDER);
        }
        Self::space_provider(id)
    }

    /// The provider holding space `id`.
    fn space_provider(id: &str) -> Result<&'static str, Status> {
        parse_space_id(id)
            .map(|(p, _)| p)
            .ok_or_else(|| ErrorKind::NotFound.status(format!("no such space {id:?}")))
    }

    fn same_provider(a: Option<&Ref>, b: Option<&Ref>) -> Result<&'static str, Status> {
        let (pa, pb) = (Self::provider_of(a)?, Self::provider_of(b)?);
        if pa != pb {
            return Err(
                ErrorKind::Conflict.status("source and destination are in different storages")
            );
        }
        Ok(pa)
    }
}

/// Forwards one call: authenticated callers only, to the provider `$provider` evaluates to.
macro_rules! forward {
    ($self:ident, $req:ident, $method:ident, $provider:expr) => {{
        caller(&$req)?;
        let provider: &'static str = $provider;
        $self
            .provider(provider)
            .$method(Request::new($req.into_inner()))
            .await
    }};
}

#[tonic::async_trait]
impl Storage for GatewayApi {
    async fn get_home_space(
        &self,
        req: Request<GetHomeSpaceRequest>,
    ) -> Result<Response<Space>, Status> {
        forward!(self, req, get_home_space, HOME_PROVIDER)
    }

    async fn get_space(&self, req: Request<GetSpaceRequest>) -> Result<Response<Space>, Status> {
        let provider = Self::space_provider(&req.get_ref().space_id)?;
        forward!(self, req, get_space, provider)
    }

    async fn list_spaces(
        &self,
        req: Request<ListSpacesRequest>,
    ) -> Result<Response<ListSpacesResponse>, Status> {
        forward!(self, req, list_spaces, HOME_PROVIDER)
    }

    async fn create_space(
        &self,
        req: Request<CreateSpaceRequest>,
    ) -> Result<Response<Space>, Status> {
        forward!(self, req, create_space, HOME_PROVIDER)
    }

    async fn update_space(
        &self,
        req: Request<UpdateSpaceRequest>,
    ) -> Result<Response<Space>, Status> {
        let provider = Self::space_provider(&req.get_ref().space_id)?;
        forward!(self, req, update_space, provider)
    }

    async fn delete_space(
        &self,
        req: Request<DeleteSpaceRequest>,
    ) -> Result<Response<DeleteSpaceResponse>, Status> {
        let provider = Self::space_provider(&req.get_ref().space_id)?;
        forward!(self, req, delete_space, provider)
    }

    async fn list_space_members(
        &self,
        req: Request<ListSpaceMembersRequest>,
    ) -> Result<Response<ListSpaceMembersResponse>, Status> {
        let provider = Self::space_provider(&req.get_ref().space_id)?;
        forward!(self, req, list_space_members, provider)
    }

    async fn set_space_member(
        &self,
        req: Request<SetSpaceMemberRequest>,
    ) -> Result<Response<SpaceMember>, Status> {
        let provider = Self::space_provider(&req.get_ref().space_id)?;
        forward!(self, req, set_space_member, provider)
    }

    async fn remove_space_member(
        &self,
        req: Request<RemoveSpaceMemberRequest>,
    ) -> Result<Response<RemoveSpaceMemberResponse>, Status> {
        let provider = Self::space_provider(&req.get_ref().space_id)?;
        forward!(self, req, remove_space_member, provider)
    }

    async fn stat(&self, req: Request<StatRequest>) -> Result<Response<Node>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, stat, p)
    }

    async fn list(&self, req: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, list, p)
    }

    async fn create_dir(&self, req: Request<CreateDirRequest>) -> Result<Response<Node>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, create_dir, p)
    }

    async fn delete(
        &self,
        req: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, delete, p)
    }

    async fn r#move(&self, req: Request<MoveRequest>) -> Result<Response<MoveResponse>, Status> {
        let r = req.get_ref();
        let p = Self::same_provider(r.source.as_ref(), r.destination.as_ref())?;
        forward!(self, req, r#move, p)
    }

    async fn copy(&self, req: Request<CopyRequest>) -> Result<Response<CopyResponse>, Status> {
        let r = req.get_ref();
        let p = Self::same_provider(r.source.as_ref(), r.destination.as_ref())?;
        forward!(self, req, copy, p)
    }

    async fn set_props(
        &self,
        req: Request<SetPropsRequest>,
    ) -> Result<Response<SetPropsResponse>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, set_props, p)
    }

    async fn lock(&self, req: Request<LockRequest>) -> Result<Response<LockResponse>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, lock, p)
    }

    async fn unlock(
        &self,
        req: Request<UnlockRequest>,
    ) -> Result<Response<UnlockResponse>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, unlock, p)
    }

    async fn get_locks(
        &self,
        req: Request<GetLocksRequest>,
    ) -> Result<Response<GetLocksResponse>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, get_locks, p)
    }

    async fn initiate_upload(
        &self,
        req: Request<InitiateUploadRequest>,
    ) -> Result<Response<Transfer>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, initiate_upload, p)
    }

    async fn put(&self, req: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let target = req.get_ref().upload.as_ref().and_then(|u| u.r#ref.as_ref());
        let p = Self::provider_of(target)?;
        forward!(self, req, put, p)
    }

    async fn create_upload_folder(
        &self,
        req: Request<CreateUploadFolderRequest>,
    ) -> Result<Response<UploadFolder>, Status> {
        // Upload folders are storage-users': a user's uploads, wherever they end up.
        forward!(self, req, create_upload_folder, HOME_PROVIDER)
    }

    async fn list_upload_folders(
        &self,
        req: Request<ListUploadFoldersRequest>,
    ) -> Result<Response<ListUploadFoldersResponse>, Status> {
        forward!(self, req, list_upload_folders, HOME_PROVIDER)
    }

    async fn delete_upload_folder(
        &self,
        req: Request<DeleteUploadFolderRequest>,
    ) -> Result<Response<DeleteUploadFolderResponse>, Status> {
        forward!(self, req, delete_upload_folder, HOME_PROVIDER)
    }

    async fn initiate_chunk(
        &self,
        req: Request<InitiateChunkRequest>,
    ) -> Result<Response<Transfer>, Status> {
        forward!(self, req, initiate_chunk, HOME_PROVIDER)
    }

    async fn initiate_download(
        &self,
        req: Request<InitiateDownloadRequest>,
    ) -> Result<Response<Transfer>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, initiate_download, p)
    }

    async fn list_trash(
        &self,
        req: Request<ListTrashRequest>,
    ) -> Result<Response<ListTrashResponse>, Status> {
        let p = Self::trash_provider(&req.get_ref().space_id)?;
        forward!(self, req, list_trash, p)
    }

    async fn restore_trash(
        &self,
        req: Request<RestoreTrashRequest>,
    ) -> Result<Response<RestoreTrashResponse>, Status> {
        let r = req.get_ref();
        let p = Self::trash_provider(&r.space_id)?;
        if let Some(dest) = r.destination.as_ref()
            && Self::provider_of(Some(dest))? != p
        {
            return Err(
                ErrorKind::Conflict.status("a restore stays in the space it was removed from")
            );
        }
        forward!(self, req, restore_trash, p)
    }

    async fn purge_trash(
        &self,
        req: Request<PurgeTrashRequest>,
    ) -> Result<Response<PurgeTrashResponse>, Status> {
        let p = Self::trash_provider(&req.get_ref().space_id)?;
        forward!(self, req, purge_trash, p)
    }

    async fn restore_all(
        &self,
        req: Request<RestoreAllRequest>,
    ) -> Result<Response<RestoreAllResponse>, Status> {
        let p = Self::trash_provider(&req.get_ref().space_id)?;
        forward!(self, req, restore_all, p)
    }

    async fn list_bursts(
        &self,
        req: Request<ListBurstsRequest>,
    ) -> Result<Response<ListBurstsResponse>, Status> {
        let p = Self::trash_provider(&req.get_ref().space_id)?;
        forward!(self, req, list_bursts, p)
    }

    async fn list_versions(
        &self,
        req: Request<ListVersionsRequest>,
    ) -> Result<Response<ListVersionsResponse>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, list_versions, p)
    }

    async fn restore_version(
        &self,
        req: Request<RestoreVersionRequest>,
    ) -> Result<Response<Node>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, restore_version, p)
    }

    async fn delete_version(
        &self,
        req: Request<DeleteVersionRequest>,
    ) -> Result<Response<DeleteVersionResponse>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, delete_version, p)
    }

    async fn set_version_label(
        &self,
        req: Request<SetVersionLabelRequest>,
    ) -> Result<Response<Version>, Status> {
        let p = Self::provider_of(req.get_ref().r#ref.as_ref())?;
        forward!(self, req, set_version_label, p)
    }
}

/// The `Users` API, forwarded to storage-system (which checks admin rights itself).
struct UsersApi {
    system: Channel,
}

/// Forwards one `Users` call; `authenticate` is the proxy's business and is not offered here.
macro_rules! forward_users {
    ($self:ident, $req:ident, $method:ident) => {{
        caller(&$req)?;
        UsersClient::new($self.system.clone())
            .$method(Request::new($req.into_inner()))
            .await
    }};
}

#[tonic::async_trait]
impl Users for UsersApi {
    async fn authenticate(
        &self,
        _req: Request<AuthenticateRequest>,
    ) -> Result<Response<User>, Status> {
        Err(ErrorKind::PermissionDenied.status("authentication is not offered through the gateway"))
    }

    async fn get_user(&self, req: Request<GetUserRequest>) -> Result<Response<User>, Status> {
        forward_users!(self, req, get_user)
    }

    async fn list_users(
        &self,
        req: Request<ListUsersRequest>,
    ) -> Result<Response<ListUsersResponse>, Status> {
        forward_users!(self, req, list_users)
    }

    async fn create_user(&self, req: Request<CreateUserRequest>) -> Result<Response<User>, Status> {
        forward_users!(self, req, create_user)
    }

    async fn update_user(&self, req: Request<UpdateUserRequest>) -> Result<Response<User>, Status> {
        forward_users!(self, req, update_user)
    }

    async fn delete_user(
        &self,
        req: Request<DeleteUserRequest>,
    ) -> Result<Response<DeleteUserResponse>, Status> {
        forward_users!(self, req, delete_user)
    }

    async fn create_group(
        &self,
        req: Request<CreateGroupRequest>,
    ) -> Result<Response<Group>, Status> {
        forward_users!(self, req, create_group)
    }

    async fn get_group(&self, req: Request<GetGroupRequest>) -> Result<Response<Group>, Status> {
        forward_users!(self, req, get_group)
    }

    async fn list_groups(
        &self,
        req: Request<ListGroupsRequest>,
    ) -> Result<Response<ListGroupsResponse>, Status> {
        forward_users!(self, req, list_groups)
    }

    async fn update_group(
        &self,
        req: Request<UpdateGroupRequest>,
    ) -> Result<Response<Group>, Status> {
        forward_users!(self, req, update_group)
    }

    async fn delete_group(
        &self,
        req: Request<DeleteGroupRequest>,
    ) -> Result<Response<DeleteGroupResponse>, Status> {
        forward_users!(self, req, delete_group)
    }

    async fn add_member(
        &self,
        req: Request<AddMemberRequest>,
    ) -> Result<Response<AddMemberResponse>, Status> {
        forward_users!(self, req, add_member)
    }

    async fn remove_member(
        &self,
        req: Request<RemoveMemberRequest>,
    ) -> Result<Response<RemoveMemberResponse>, Status> {
        forward_users!(self, req, remove_member)
    }

    async fn list_members(
        &self,
        req: Request<ListMembersRequest>,
    ) -> Result<Response<ListUsersResponse>, Status> {
        forward_users!(self, req, list_members)
    }

    async fn list_user_groups(
        &self,
        req: Request<ListUserGroupsRequest>,
    ) -> Result<Response<ListGroupsResponse>, Status> {
        forward_users!(self, req, list_user_groups)
    }

    async fn create_app_token(
        &self,
        req: Request<CreateAppTokenRequest>,
    ) -> Result<Response<CreateAppTokenResponse>, Status> {
        forward_users!(self, req, create_app_token)
    }

    async fn list_app_tokens(
        &self,
        req: Request<ListAppTokensRequest>,
    ) -> Result<Response<ListAppTokensResponse>, Status> {
        forward_users!(self, req, list_app_tokens)
    }

    async fn delete_app_token(
        &self,
        req: Request<DeleteAppTokenRequest>,
    ) -> Result<Response<DeleteAppTokenResponse>, Status> {
        forward_users!(self, req, delete_app_token)
    }

    /// The credential feed is between proxies and storage-system; never offered here.
    type WatchCredentialsStream =
        tonic::codegen::tokio_stream::Empty<Result<CredentialEvent, Status>>;

    async fn watch_credentials(
        &self,
        _req: Request<WatchCredentialsRequest>,
    ) -> Result<Response<Self::WatchCredentialsStream>, Status> {
        Err(ErrorKind::PermissionDenied
            .status("the credential feed is not offered through the gateway"))
    }

    async fn ack_credentials(
        &self,
        _req: Request<AckCredentialsRequest>,
    ) -> Result<Response<AckCredentialsResponse>, Status> {
        Err(ErrorKind::PermissionDenied
            .status("the credential feed is not offered through the gateway"))
    }
}
