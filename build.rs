//! Compiles the CRI v1 protos (proto/api.proto, package runtime.v1, copied from k8s.io/cri-api at the
//! pinned Kubernetes version) into tonic clients, and the servers the fake runtime implements
//! (src/cri/fake.rs; calls it does not model answer Unimplemented through the default stubs).
//!
//! For the release build (hack/lib/release.sh) it also hands the deckhand binary's link two
//! arguments through the environment rather than through RUSTFLAGS, which would change every
//! crate's metadata hash and with it the symbol names the link order list is made of:
//! `DECKHAND_LINK_ORDER` (lld's --symbol-ordering-file) and `DECKHAND_LINK_MAP` (the linker's map,
//! with mangled names, for hack/symbol-order.sh).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    println!("cargo:rerun-if-env-changed=DECKHAND_LINK_ORDER");
    println!("cargo:rerun-if-env-changed=DECKHAND_LINK_MAP");
    if let Some(order) = std::env::var_os("DECKHAND_LINK_ORDER").filter(|v| !v.is_empty()) {
        let order = order.to_string_lossy();
        println!("cargo:rerun-if-changed={order}");
        println!("cargo:rustc-link-arg-bin=deckhand=-Wl,--symbol-ordering-file={order}");
        println!("cargo:rustc-link-arg-bin=deckhand=-Wl,--no-warn-symbol-ordering");
    }
    if let Some(map) = std::env::var_os("DECKHAND_LINK_MAP").filter(|v| !v.is_empty()) {
        println!(
            "cargo:rustc-link-arg-bin=deckhand=-Wl,-Map={}",
            map.to_string_lossy()
        );
        println!("cargo:rustc-link-arg-bin=deckhand=-Wl,--no-demangle");
    }
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .generate_default_stubs(true)
        .compile_protos(&["proto/api.proto"], &["proto"])?;
    Ok(())
}
