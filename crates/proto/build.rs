//! Generates the gRPC code from `proto/` with protox, a pure-Rust protobuf compiler, so a fresh
//! machine needs no `protoc` binary.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = [
        "arca/v1/probe.proto",
        "arca/v1/storage.proto",
        "arca/v1/users.proto",
        "arca/v1/sharing.proto",
    ];
    println!("cargo:rerun-if-changed={}", root.display());
    let fds = protox::compile(files.iter().map(|f| root.join(f)), [&root])?;
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds(fds)?;
    Ok(())
}
