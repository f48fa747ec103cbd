//! arca-proto: the gRPC protocol between arca's services, generated from `proto/` at build time.

/// `arca.v1`: what every service serves (the probe) and, as services grow APIs, their messages.
pub mod v1 {
    tonic::include_proto!("arca.v1");
}

/// The arca version every process reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
