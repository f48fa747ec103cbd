//! The one mapping from a failed call to an HTTP failure, which each API renders in its own
//! format (DAV XML, the OCS envelope, libregraph JSON, TUS plain text).
//!
//! The status comes from [`ErrorKind::http_status`], the mapping every service shares; what
//! is added here is what the client may read: a call no instance could take says "retry
//! later" (which instance failed is for the log), and server-side faults are logged once,
//! here, rather than by each renderer.

use arca_proto::ErrorKind;
use arca_transport::{CallFailure, Channel};
use http::StatusCode;

/// What a client hears when no instance could take its request (with `Retry-After`).
pub(crate) const UNAVAILABLE: &str = "storage temporarily unavailable, retry later";

/// What a client hears of a server-side fault.
pub(crate) const INTERNAL: &str = "internal server error; the server log has the details";

/// A failed gRPC call as HTTP: its kind, the status the kind maps to and the one-line
/// message the client may read.
pub(crate) struct Failure {
    pub(crate) kind: ErrorKind,
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn of(status: &tonic::Status) -> Self {
        let kind = ErrorKind::of(status);
        let message = match kind {
            ErrorKind::Internal => {
                // The message names what broke inside (a store's words, a transport's); the
                // client gets one plain line and the log gets the rest.
                tracing::error!(error = %status.message(), "call failed");
                INTERNAL.to_owned()
            }
            ErrorKind::Unavailable => {
                tracing::warn!(error = %status.message(), "call failed");
                UNAVAILABLE.to_owned()
            }
            _ => status.message().to_owned(),
        };
        Failure {
            kind,
            status: kind.http_status(),
            message,
        }
    }
}

/// A failed call on a provider's data path as the client's answer: its own upload broke off
/// (it hung up, or sent less than its Content-Length) is 400; anything else is 503 with
/// `Retry-After` — the request could not go again (too large to keep, or not provably
/// unprocessed) and may succeed later; never 502, which clients take for a broken server.
pub(crate) fn transfer_failure(e: &arca_transport::BoxError) -> (StatusCode, &'static str) {
    match Channel::failure(e) {
        CallFailure::CallerBody(why) => {
            tracing::debug!(error = %why, "the client's upload broke off");
            (StatusCode::BAD_REQUEST, "request body incomplete")
        }
        CallFailure::Unavailable(why) => {
            tracing::warn!(error = %why, "storage data path failed");
            (StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE)
        }
    }
}
