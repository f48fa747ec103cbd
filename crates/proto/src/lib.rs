//! arca-proto: the gRPC protocol between arca's services, generated from `proto/` at build
//! time, and the one mapping of error kinds to gRPC and HTTP statuses ([`ErrorKind`]).

mod error;
pub mod ids;
pub mod principals;

pub use error::ErrorKind;

/// `arca.v1`: the probe every service serves and the storage API.
pub mod v1 {
    tonic::include_proto!("arca.v1");
}

/// The arca version every process reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
