//! The one mapping of [`StoreError`] to what callers answer: an [`ErrorKind`] (which
//! arca-proto turns into the gRPC status and, at the frontend, the HTTP status) for the storage
//! APIs, and an HTTP status for the data paths storage-users serves over HTTP itself.

use arca_proto::ErrorKind;
use http::StatusCode;
use tonic::Status;

use crate::StoreError;

impl StoreError {
    /// What kind of failure this is for whoever asked.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NotFound => ErrorKind::NotFound,
            StoreError::AlreadyExists => ErrorKind::AlreadyExists,
            StoreError::Conflict | StoreError::NotADirectory | StoreError::IsADirectory => {
                ErrorKind::Conflict
            }
            StoreError::PreconditionFailed => ErrorKind::PreconditionFailed,
            StoreError::QuotaExceeded => ErrorKind::QuotaExceeded,
            StoreError::Locked => ErrorKind::Locked,
            StoreError::Forbidden(_) => ErrorKind::PermissionDenied,
            StoreError::InvalidName { .. }
            | StoreError::ChecksumMismatch { .. }
            | StoreError::LengthMismatch { .. }
            | StoreError::InvalidRange
            | StoreError::Body(_) => ErrorKind::InvalidArgument,
            // A full disk answers like a full space (507), not as a server fault.
            _ if self.is_storage_full() => ErrorKind::QuotaExceeded,
            // A database restarting or out of reach: try again shortly (503).
            _ if self.is_unavailable() => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        }
    }

    /// The gRPC status: [`StoreError::kind`] with the error's own words (a full disk says so
    /// without its path). Failures of the store itself are logged here, once, and say nothing
    /// of themselves to the caller: a database's or a file system's text (statements, paths)
    /// is for the log, which the request id in the answer's headers finds.
    pub fn status(&self) -> Status {
        let kind = self.kind();
        if self.is_storage_full() {
            tracing::error!(error = %self, "the blob or metadata store is full");
            return kind.status("no space left on the storage");
        }
        if kind == ErrorKind::Internal {
            tracing::error!(error = %self, "storage failure");
            return kind.status("the storage failed; the server's log has the details");
        }
        if kind == ErrorKind::Unavailable {
            tracing::warn!(error = %self, "a store is unavailable");
            // Nothing happened: the service may run the call again (`retry_unavailable`).
            return arca_proto::retryable(self.unavailable_message());
        }
        kind.status(self.to_string())
    }

    /// The HTTP status where storage-users answers over HTTP itself (PUT and GET of contents,
    /// TUS, chunks): [`StoreError::kind`]'s, except where the data path means something
    /// else by the error.
    pub fn http_status(&self) -> StatusCode {
        match self {
            // Only a write's `If-None-Match: *` meets an existing target here (RFC 9110
            // §13.1.2: 412), not a MKCOL (405, the kind's status).
            StoreError::AlreadyExists => StatusCode::PRECONDITION_FAILED,
            // A GET's `Range` beyond the content (RFC 9110 §15.5.17).
            StoreError::InvalidRange => StatusCode::RANGE_NOT_SATISFIABLE,
            _ => self.kind().http_status(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_path_and_the_apis_agree_but_where_http_says_otherwise() {
        let cases = [
            (StoreError::NotFound, ErrorKind::NotFound, 404),
            (StoreError::AlreadyExists, ErrorKind::AlreadyExists, 412),
            (StoreError::IsADirectory, ErrorKind::Conflict, 409),
            (StoreError::QuotaExceeded, ErrorKind::QuotaExceeded, 507),
            (StoreError::Locked, ErrorKind::Locked, 423),
            (StoreError::InvalidRange, ErrorKind::InvalidArgument, 416),
            (
                StoreError::LengthMismatch {
                    expected: 1,
                    received: 2,
                },
                ErrorKind::InvalidArgument,
                400,
            ),
            (
                StoreError::Io(std::io::Error::from(std::io::ErrorKind::StorageFull)),
                ErrorKind::QuotaExceeded,
                507,
            ),
            (StoreError::Corrupt("x".into()), ErrorKind::Internal, 500),
        ];
        for (e, kind, http) in cases {
            assert_eq!(e.kind(), kind, "{e}");
            assert_eq!(ErrorKind::of(&e.status()), e.kind(), "{e}");
            assert_eq!(e.http_status().as_u16(), http, "{e}");
        }
    }
}
