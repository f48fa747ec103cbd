//! The `ShareRecords` gRPC API: share records stored in storage-system's metadata database for
//! the sharing service.
//!
//! Why here: the records belong to the platform's metadata, which storage-system owns; in a
//! grouped deployment sharing runs in the frontend's process and cannot open this database,
//! so it reads and writes through this thin API. Nothing here interprets a share (roles,
//! reshare rules, expiry, passwords are the sharing service's); the one rule is who may call:
//! only the sharing service's own identity ([`principals::SHARING_SERVICE`]), never an end
//! user's identity riding along a call.

use arca_proto::ErrorKind;
use arca_proto::principals;
use arca_proto::v1::share_records_server::ShareRecords;
use arca_proto::v1::*;
use arca_runtime::caller;
use arca_store_records::{Records, ShareFilter, ShareRow, StoreError};
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub(crate) struct RecordsApi {
    pub(crate) store: Records,
}

/// The store's one mapping, in words that name what was missing or taken.
fn status(e: StoreError) -> Status {
    match e {
        StoreError::NotFound => e.kind().status("no such share"),
        StoreError::AlreadyExists => e.kind().status("the link token is taken"),
        other => other.status(),
    }
}

fn only_sharing<T>(req: &Request<T>) -> Result<(), Status> {
    if caller(req)?.id == principals::SHARING_SERVICE {
        Ok(())
    } else {
        Err(ErrorKind::PermissionDenied.status("share records are the sharing service's"))
    }
}

fn to_row(r: ShareRecord) -> ShareRow {
    ShareRow {
        id: r.id,
        share_type: r.share_type,
        space_id: r.space_id,
        node_id: r.node_id,
        is_dir: r.is_dir,
        target: r.target,
        owner_id: r.owner_id,
        creator_id: r.creator_id,
        grantee_id: r.grantee_id,
        permissions: r.permissions,
        token: (!r.token.is_empty()).then_some(r.token),
        password_hash: r.password_hash,
        expires: r.expires,
        name: r.name,
        created: r.created,
    }
}

fn to_record(r: ShareRow) -> ShareRecord {
    ShareRecord {
        id: r.id,
        share_type: r.share_type,
        space_id: r.space_id,
        node_id: r.node_id,
        is_dir: r.is_dir,
        target: r.target,
        owner_id: r.owner_id,
        creator_id: r.creator_id,
        grantee_id: r.grantee_id,
        permissions: r.permissions,
        token: r.token.unwrap_or_default(),
        password_hash: r.password_hash,
        expires: r.expires,
        name: r.name,
        created: r.created,
    }
}

fn some(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

#[tonic::async_trait]
impl ShareRecords for RecordsApi {
    async fn create_record(
        &self,
        req: Request<ShareRecord>,
    ) -> Result<Response<ShareRecord>, Status> {
        only_sharing(&req)?;
        let row = self
            .store
            .create_share(&to_row(req.into_inner()))
            .await
            .map_err(status)?;
        Ok(Response::new(to_record(row)))
    }

    async fn get_record(
        &self,
        req: Request<GetRecordRequest>,
    ) -> Result<Response<ShareRecord>, Status> {
        only_sharing(&req)?;
        let r = req.into_inner();
        let row = if !r.id.is_empty() {
            self.store.share(&r.id).await
        } else if !r.token.is_empty() {
            self.store.share_by_token(&r.token).await
        } else {
            return Err(ErrorKind::InvalidArgument.status("an id or a token is required"));
        };
        Ok(Response::new(to_record(row.map_err(status)?)))
    }

    async fn update_record(
        &self,
        req: Request<ShareRecord>,
    ) -> Result<Response<ShareRecord>, Status> {
        only_sharing(&req)?;
        let row = self
            .store
            .update_share(&to_row(req.into_inner()))
            .await
            .map_err(status)?;
        Ok(Response::new(to_record(row)))
    }

    async fn delete_record(
        &self,
        req: Request<DeleteRecordRequest>,
    ) -> Result<Response<DeleteRecordResponse>, Status> {
        only_sharing(&req)?;
        let deleted = self
            .store
            .delete_share(&req.get_ref().id)
            .await
            .map_err(status)?;
        Ok(Response::new(DeleteRecordResponse { deleted }))
    }

    async fn list_records(
        &self,
        req: Request<ListRecordsRequest>,
    ) -> Result<Response<ListRecordsResponse>, Status> {
        only_sharing(&req)?;
        let r = req.into_inner();
        let filter = ShareFilter {
            space_id: some(r.space_id),
            node_id: some(r.node_id),
            creator_id: some(r.creator_id),
            creator_or_owner: some(r.creator_or_owner),
            grantee_ids: r.grantee_ids,
            share_types: r.share_types,
        };
        let rows = self.store.list_shares(&filter).await.map_err(status)?;
        Ok(Response::new(ListRecordsResponse {
            records: rows.into_iter().map(to_record).collect(),
        }))
    }

    async fn set_recipient_state(
        &self,
        req: Request<RecipientState>,
    ) -> Result<Response<RecipientState>, Status> {
        only_sharing(&req)?;
        let r = req.into_inner();
        self.store
            .set_share_state(&r.share_id, &r.user_id, r.state)
            .await
            .map_err(status)?;
        Ok(Response::new(r))
    }

    async fn list_recipient_states(
        &self,
        req: Request<ListRecipientStatesRequest>,
    ) -> Result<Response<ListRecipientStatesResponse>, Status> {
        only_sharing(&req)?;
        let user_id = req.into_inner().user_id;
        let states = self.store.share_states(&user_id).await.map_err(status)?;
        Ok(Response::new(ListRecipientStatesResponse {
            states: states
                .into_iter()
                .map(|(share_id, state)| RecipientState {
                    share_id,
                    user_id: user_id.clone(),
                    state,
                })
                .collect(),
        }))
    }
}
