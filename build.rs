//! Compiles the CRI v1 protos (proto/api.proto, package runtime.v1, copied from k8s.io/cri-api at the
//! pinned Kubernetes version) into tonic clients, and the servers the fake runtime implements
//! (src/cri/fake.rs; calls it does not model answer Unimplemented through the default stubs).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .generate_default_stubs(true)
        .compile_protos(&["proto/api.proto"], &["proto"])?;
    Ok(())
}
