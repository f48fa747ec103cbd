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
        "arca/v1/thumbnails.proto",
        "arca/v1/search.proto",
    ];
    println!("cargo:rerun-if-changed={}", root.display());
    let fds = protox::compile(files.iter().map(|f| root.join(f)), [&root])?;
    write_idempotent_calls(&fds)?;
    tonic_prost_build::configure()
        .build_transport(false)
        // A small PUT's body: decoded as a view of the received buffer, not copied.
        .bytes(".arca.v1.PutRequest.body")
        .bytes(".arca.v1.Transfer.body")
        .compile_fds(fds)?;
    Ok(())
}

/// `$OUT_DIR/idempotent.rs`: the gRPC paths of every method whose proto declares
/// `idempotency_level` IDEMPOTENT or NO_SIDE_EFFECTS, which the transport may send again after
/// a failure that leaves open whether the server acted (see `arca_transport::RetryPolicy`).
fn write_idempotent_calls(
    fds: &protox::prost_reflect::prost_types::FileDescriptorSet,
) -> Result<(), Box<dyn std::error::Error>> {
    // descriptor.proto's MethodOptions.IdempotencyLevel: 1 NO_SIDE_EFFECTS, 2 IDEMPOTENT.
    let mut paths = Vec::new();
    for file in &fds.file {
        let package = file.package();
        for service in &file.service {
            for method in &service.method {
                let level = method
                    .options
                    .as_ref()
                    .and_then(|o| o.idempotency_level)
                    .unwrap_or(0);
                if level == 1 || level == 2 {
                    paths.push(format!("/{package}.{}/{}", service.name(), method.name()));
                }
            }
        }
    }
    paths.sort();
    let mut out = String::from("&[\n");
    for p in &paths {
        out.push_str(&format!("    {p:?},\n"));
    }
    out.push_str("]\n");
    let dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(dir.join("idempotent.rs"), out)?;
    Ok(())
}
