//! The hot read calls, forwarded as bytes.
//!
//! A typed forward decodes the provider's answer and encodes it again: for a `List` of 1,000
//! children that was a sixth of a PROPFIND's CPU time, and twelve allocations per child, for
//! an answer the gateway never looks at. These routes decode only the request (a few bytes:
//! the reference that names the provider), check the caller as the typed methods do, and pass
//! the provider's HTTP answer through untouched, trailers and errors included. They shadow the
//! typed methods of the same name, which stay as the definition of the API.

use std::sync::Arc;

use arca_proto::v1::{InitiateDownloadRequest, ListRequest, Ref, StatRequest};
use arca_runtime::Identity;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use prost::Message;
use tonic::Status;
use tower::ServiceExt as _;

use crate::GatewayApi;

/// A unary request message is small; anything larger is not one of ours.
const MAX_REQUEST: usize = 64 << 10;

/// Routes for the forwarded-as-bytes methods, to merge before the typed service.
pub(crate) fn routes(api: Arc<GatewayApi>) -> axum::Router {
    axum::Router::new()
        .route(
            "/arca.v1.Storage/List",
            post(forward::<ListRequest>).with_state(Arc::clone(&api)),
        )
        .route(
            "/arca.v1.Storage/Stat",
            post(forward::<StatRequest>).with_state(Arc::clone(&api)),
        )
        .route(
            "/arca.v1.Storage/InitiateDownload",
            post(forward::<InitiateDownloadRequest>).with_state(api),
        )
}

/// A request message that names the resource it is about.
pub(crate) trait Routed: Message + Default {
    fn reference(&self) -> Option<&Ref>;
}

impl Routed for ListRequest {
    fn reference(&self) -> Option<&Ref> {
        self.r#ref.as_ref()
    }
}

impl Routed for StatRequest {
    fn reference(&self) -> Option<&Ref> {
        self.r#ref.as_ref()
    }
}

impl Routed for InitiateDownloadRequest {
    fn reference(&self) -> Option<&Ref> {
        self.r#ref.as_ref()
    }
}

async fn forward<M: Routed>(State(api): State<Arc<GatewayApi>>, req: Request) -> Response {
    match try_forward::<M>(&api, req).await {
        Ok(resp) => resp,
        Err(status) => status.into_http::<Body>(),
    }
}

async fn try_forward<M: Routed>(api: &GatewayApi, req: Request) -> Result<Response, Status> {
    if req.extensions().get::<Identity>().is_none() {
        return Err(Status::unauthenticated("no caller identity"));
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, MAX_REQUEST)
        .await
        .map_err(|e| Status::invalid_argument(format!("request body: {e}")))?;
    let message = unary_message(&body)?;
    let decoded = M::decode(message)
        .map_err(|e| Status::invalid_argument(format!("request message: {e}")))?;
    let provider = GatewayApi::provider_of(decoded.reference())?;
    let req = Request::from_parts(parts, Body::from(body));
    let resp =
        api.channel(provider)
            .oneshot(req)
            .await
            .map_err(|e| match e.downcast::<Status>() {
                Ok(status) => *status,
                Err(e) => Status::unavailable(format!("{provider}: {e}")),
            })?;
    Ok(resp.map(Body::new))
}

/// The message inside one gRPC length-prefixed frame (uncompressed: arca never compresses).
fn unary_message(frame: &Bytes) -> Result<Bytes, Status> {
    let bad = |why: &str| Status::invalid_argument(format!("request frame: {why}"));
    let header = frame
        .get(..5)
        .ok_or_else(|| bad("shorter than its header"))?;
    if header[0] != 0 {
        return Err(bad("compressed"));
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if frame.len() != 5 + len {
        return Err(bad("length does not match the body"));
    }
    Ok(frame.slice(5..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_checked() {
        let msg = ListRequest::default().encode_to_vec();
        let mut frame = vec![0, 0, 0, 0, msg.len() as u8];
        frame.extend_from_slice(&msg);
        assert_eq!(unary_message(&Bytes::from(frame.clone())).unwrap(), msg);
        for bad in [vec![0, 0, 0], vec![1, 0, 0, 0, 0], vec![0, 0, 0, 0, 9, 1]] {
            assert!(unary_message(&Bytes::from(bad)).is_err());
        }
    }
}
