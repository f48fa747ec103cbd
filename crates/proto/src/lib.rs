//! arca-proto: the gRPC protocol between arca's services, generated from `proto/` at build
//! time, the one mapping of error kinds to gRPC and HTTP statuses ([`ErrorKind`]), and the
//! words several services share: resource ids ([`ids`]), principals, users' roles in the
//! deployment ([`roles`]), the public HTTP paths ([`routes`]), permission bits, share types
//! and states and roles ([`sharing`]).

pub mod civil;
mod error;
pub mod headers;
pub mod ids;
pub mod principals;
pub mod roles;
pub mod routes;
pub mod sharing;

pub use error::{ErrorKind, RETRYABLE, retry_after, retryable, throttled};

/// The bus hint storage-users sends, keyed by the space id, when a space's tree changed (a
/// file written, a folder made, something moved, removed or restored): the search crawler
/// looks at that space at once instead of at its next round (see arca_runtime's events).
pub const HINT_SPACE_CHANGED: &str = "space-changed";

/// The key of a [`HINT_SPACE_CHANGED`] hint: the space id alone when anything in it may have
/// changed, or followed by the ids of the nodes written or removed (space-separated; ids hold
/// no spaces), so the crawler looks at those nodes instead of walking the space's changed
/// folders — a walk that lists a folder of 100,000 files for every file added to it.
pub fn space_hint_key<'a>(space_id: &str, nodes: impl IntoIterator<Item = &'a str>) -> String {
    let mut key = space_id.to_owned();
    for node in nodes {
        key.push(' ');
        key.push_str(node);
    }
    key
}

/// A [`space_hint_key`] taken apart: the space id and the nodes named (none: the whole space).
pub fn parse_space_hint(key: &str) -> (&str, Vec<&str>) {
    let mut parts = key.split(' ').filter(|p| !p.is_empty());
    let space = parts.next().unwrap_or_default();
    (space, parts.collect())
}

/// `arca.v1`: the probe every service serves and the storage API.
pub mod v1 {
    tonic::include_proto!("arca.v1");
}

/// The gRPC paths (`/arca.v1.Service/Method`) whose methods the proto declares idempotent
/// (`idempotency_level` IDEMPOTENT or NO_SIDE_EFFECTS): a call of one may go again after a
/// failure that leaves open whether the server acted.
pub const IDEMPOTENT_CALLS: &[&str] = include!(concat!(env!("OUT_DIR"), "/idempotent.rs"));

/// The largest Storage API answer a client reads. A listing (a folder, a trash, a file's
/// versions) comes whole in one message of roughly 600 bytes an entry, and tonic's default of
/// 4 MiB refused a trash of 10,000 items; this allows about 200,000 entries. A listing past
/// that still fails, as a clear error, rather than a process holding an unbounded answer.
pub const MAX_STORAGE_ANSWER: usize = 128 << 20;

/// The largest body a PUT carries inside the Storage API's `Put` call instead of through the
/// provider's data path: one round trip instead of two for the small files sync clients write
/// most, at the cost of holding the body in memory (the data path streams). The same as
/// storage-users' default `inline_max`, so such a body is committed with its metadata.
pub const SMALL_BODY: usize = 64 << 10;

/// A Storage API client on `channel` that reads answers up to [`MAX_STORAGE_ANSWER`]: the one
/// way every service makes one.
pub fn storage_client<T>(channel: T) -> v1::storage_client::StorageClient<T>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    v1::storage_client::StorageClient::new(channel).max_decoding_message_size(MAX_STORAGE_ANSWER)
}

/// The arca version every process reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(test)]
mod tests {
    #[test]
    fn reads_are_declared_idempotent_and_writes_are_not() {
        for read in [
            "/arca.v1.Storage/Stat",
            "/arca.v1.Storage/List",
            "/arca.v1.Storage/Put",
            "/arca.v1.Probe/Check",
        ] {
            assert!(super::IDEMPOTENT_CALLS.contains(&read), "{read}");
        }
        for write in [
            "/arca.v1.Storage/CreateDir",
            "/arca.v1.Storage/Move",
            "/arca.v1.Sharing/CreateShare",
        ] {
            assert!(!super::IDEMPOTENT_CALLS.contains(&write), "{write}");
        }
    }

    #[test]
    fn space_hints_name_the_space_and_maybe_nodes() {
        let whole = super::space_hint_key("storage-users$s", []);
        assert_eq!(super::parse_space_hint(&whole), ("storage-users$s", vec![]));
        let key = super::space_hint_key(
            "storage-users$s",
            ["storage-users$s!a", "storage-users$s!b"],
        );
        assert_eq!(
            super::parse_space_hint(&key),
            (
                "storage-users$s",
                vec!["storage-users$s!a", "storage-users$s!b"]
            )
        );
    }
}
