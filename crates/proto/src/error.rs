//! The one mapping of arca's error kinds to gRPC status codes and HTTP statuses.
//!
//! A provider turns its typed error into an [`ErrorKind`] once; the kind rides in the gRPC
//! status (code + `arca-error` metadata, so kinds that share a gRPC code stay distinct) through
//! the gateway to the frontend, which answers the HTTP status chosen here. Handlers may still
//! pick a method-specific status (MKCOL on an existing path is 405, RFC 4918 §9.3.1).

use tonic::{Code, Status};

/// What went wrong, independent of the protocol that reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    AlreadyExists,
    /// A parent is missing, or the operation conflicts with the tree (RFC 4918 409).
    Conflict,
    /// An `If-Match`/`If-None-Match` or lock precondition failed.
    PreconditionFailed,
    QuotaExceeded,
    Locked,
    PermissionDenied,
    Unauthenticated,
    InvalidArgument,
    TooLarge,
    Unavailable,
    Internal,
}

const KINDS: [(ErrorKind, &str); 12] = [
    (ErrorKind::NotFound, "not_found"),
    (ErrorKind::AlreadyExists, "already_exists"),
    (ErrorKind::Conflict, "conflict"),
    (ErrorKind::PreconditionFailed, "precondition_failed"),
    (ErrorKind::QuotaExceeded, "quota_exceeded"),
    (ErrorKind::Locked, "locked"),
    (ErrorKind::PermissionDenied, "permission_denied"),
    (ErrorKind::Unauthenticated, "unauthenticated"),
    (ErrorKind::InvalidArgument, "invalid_argument"),
    (ErrorKind::TooLarge, "too_large"),
    (ErrorKind::Unavailable, "unavailable"),
    (ErrorKind::Internal, "internal"),
];

const METADATA_KEY: &str = "arca-error";
/// Marks a failure that changed nothing and may succeed if the same call runs again shortly
/// (a database that dropped or refused the connection): the service runs its idempotent calls
/// again while they fail so (`arca_runtime::retry_unavailable`).
pub const RETRYABLE: &str = "arca-retryable";

/// [`ErrorKind::Unavailable`] with `message` and the [`RETRYABLE`] mark.
pub fn retryable(message: impl Into<String>) -> Status {
    let mut status = ErrorKind::Unavailable.status(message);
    status
        .metadata_mut()
        .insert(RETRYABLE, tonic::metadata::MetadataValue::from_static("1"));
    status
}

/// On a [`throttled`] refusal: the seconds the client waits (the frontend answers 429 with
/// `Retry-After`).
const RETRY_AFTER_KEY: &str = "arca-retry-after";

/// The refusal of a caller who failed too often (wrong passwords, guessed tokens): `what`
/// ("too many wrong guesses") and how long to wait, which the frontend turns into 429.
pub fn throttled(what: &str, wait: std::time::Duration) -> Status {
    let secs = wait.as_secs().max(1);
    let mut status = ErrorKind::Unavailable.status(format!("{what}, retry in {secs}s"));
    status.metadata_mut().insert(RETRY_AFTER_KEY, secs.into());
    status
}

/// The seconds a [`throttled`] refusal says to wait; `None` for any other status.
pub fn retry_after(status: &Status) -> Option<u64> {
    status
        .metadata()
        .get(RETRY_AFTER_KEY)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        KINDS
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("internal", |(_, s)| s)
    }

    pub fn grpc_code(self) -> Code {
        match self {
            ErrorKind::NotFound => Code::NotFound,
            ErrorKind::AlreadyExists => Code::AlreadyExists,
            ErrorKind::Conflict | ErrorKind::PreconditionFailed | ErrorKind::Locked => {
                Code::FailedPrecondition
            }
            ErrorKind::QuotaExceeded => Code::ResourceExhausted,
            ErrorKind::PermissionDenied => Code::PermissionDenied,
            ErrorKind::Unauthenticated => Code::Unauthenticated,
            ErrorKind::InvalidArgument => Code::InvalidArgument,
            ErrorKind::TooLarge => Code::OutOfRange,
            ErrorKind::Unavailable => Code::Unavailable,
            ErrorKind::Internal => Code::Internal,
        }
    }

    pub fn http_status(self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            ErrorKind::NotFound => S::NOT_FOUND,
            ErrorKind::AlreadyExists => S::METHOD_NOT_ALLOWED,
            ErrorKind::Conflict => S::CONFLICT,
            ErrorKind::PreconditionFailed => S::PRECONDITION_FAILED,
            ErrorKind::QuotaExceeded => S::INSUFFICIENT_STORAGE,
            ErrorKind::Locked => S::LOCKED,
            ErrorKind::PermissionDenied => S::FORBIDDEN,
            ErrorKind::Unauthenticated => S::UNAUTHORIZED,
            ErrorKind::InvalidArgument => S::BAD_REQUEST,
            ErrorKind::TooLarge => S::PAYLOAD_TOO_LARGE,
            ErrorKind::Unavailable => S::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => S::INTERNAL_SERVER_ERROR,
        }
    }

    /// A gRPC status carrying this kind and a one-line message.
    pub fn status(self, message: impl Into<String>) -> Status {
        let mut status = Status::new(self.grpc_code(), message);
        if let Ok(v) = self.as_str().parse() {
            status.metadata_mut().insert(METADATA_KEY, v);
        }
        status
    }

    /// The kind a status carries; statuses from elsewhere (the transport, tonic) are
    /// classified by their code.
    pub fn of(status: &Status) -> ErrorKind {
        if let Some(kind) = status
            .metadata()
            .get(METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| KINDS.iter().find(|(_, name)| *name == s))
        {
            return kind.0;
        }
        match status.code() {
            Code::NotFound => ErrorKind::NotFound,
            Code::AlreadyExists => ErrorKind::AlreadyExists,
            Code::FailedPrecondition | Code::Aborted => ErrorKind::PreconditionFailed,
            Code::ResourceExhausted => ErrorKind::QuotaExceeded,
            Code::PermissionDenied => ErrorKind::PermissionDenied,
            Code::Unauthenticated => ErrorKind::Unauthenticated,
            // Without the metadata no arca service judged the request: tonic itself refused
            // a message arca built (too large to decode, malformed), which is a server fault,
            // never the client's bad input.
            Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_survives_a_status_round_trip() {
        for (kind, _) in KINDS {
            assert_eq!(ErrorKind::of(&kind.status("x")), kind);
        }
    }

    #[test]
    fn foreign_statuses_map_by_code() {
        assert_eq!(
            ErrorKind::of(&Status::unavailable("down")),
            ErrorKind::Unavailable
        );
        assert_eq!(ErrorKind::of(&Status::unknown("?")), ErrorKind::Internal);
        // What tonic answers for an answer over the message limit is no client's fault.
        let too_large = Status::out_of_range("decoded message length too large");
        assert_eq!(ErrorKind::of(&too_large), ErrorKind::Internal);
        assert_eq!(
            ErrorKind::of(&Status::invalid_argument("bad frame")),
            ErrorKind::Internal
        );
        // A provider's own judgement keeps its kind.
        let bad = ErrorKind::InvalidArgument.status("bad name");
        assert_eq!(ErrorKind::of(&bad), ErrorKind::InvalidArgument);
    }
}
