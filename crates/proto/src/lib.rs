//! arca-proto: the gRPC protocol between arca's services, generated from `proto/` at build
//! time, the one mapping of error kinds to gRPC and HTTP statuses ([`ErrorKind`]), and the
//! words several services share: resource ids ([`ids`]), principals, the public HTTP paths
//! ([`routes`]), permission bits, share types and states and roles ([`sharing`]).

mod error;
pub mod headers;
pub mod ids;
pub mod principals;
pub mod routes;
pub mod sharing;

pub use error::ErrorKind;

/// `arca.v1`: the probe every service serves and the storage API.
pub mod v1 {
    tonic::include_proto!("arca.v1");
}

/// The gRPC paths (`/arca.v1.Service/Method`) whose methods the proto declares idempotent
/// (`idempotency_level` IDEMPOTENT or NO_SIDE_EFFECTS): a call of one may go again after a
/// failure that leaves open whether the server acted.
pub const IDEMPOTENT_CALLS: &[&str] = include!(concat!(env!("OUT_DIR"), "/idempotent.rs"));

/// The arca version every process reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(test)]
mod tests {
    #[test]
    fn reads_are_declared_idempotent_and_writes_are_not() {
        for read in [
            "/arca.v1.Storage/Stat",
            "/arca.v1.Storage/List",
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
}
