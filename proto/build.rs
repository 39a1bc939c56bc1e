//! Compiles the .proto files with protox (a pure-Rust protobuf compiler), so a
//! fresh machine needs no `protoc` binary to build clawfed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["clawfed/admin/v1/admin.proto", "clawfed/link/v1/link.proto"];
    for file in files {
        println!("cargo:rerun-if-changed=proto/{file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    // The encoded descriptors, so tests can walk the services' methods
    // (REST/gRPC parity) without a reflection service.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("clawfed_descriptors.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // `SpokeLink.Connect` would clash with the generated `connect`
        // constructor; clients are built with `new(channel)` instead.
        .build_transport(false)
        // Requests carrying a secret value get a redacting Debug (in lib.rs).
        .skip_debug([".clawfed.admin.v1.SetAgentCredentialRequest"])
        .compile_fds(descriptors)?;
    Ok(())
}
