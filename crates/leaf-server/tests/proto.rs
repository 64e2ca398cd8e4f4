//! The gRPC code is generated from `proto/leaf/v1/leaf.proto` and committed, so that building
//! the server needs no `protoc` and no code generator: this test compiles the `.proto` with a
//! pure-Rust compiler (`protox`), generates the code as the server's was generated, and fails
//! when the committed files differ. `LEAFTEST_BLESS=1` rewrites them instead.

use std::path::{Path, PathBuf};

use prost::Message as _;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The committed files: the Rust code and the encoded descriptor set (served by reflection).
const RUST: &str = "src/grpc/generated/leaf.v1.rs";
const DESCRIPTORS: &str = "src/grpc/generated/leaf.v1.bin";

/// The descriptor set and the Rust code of the `.proto` as it is now.
fn generate() -> (Vec<u8>, String) {
    let root = workspace().join("proto");
    let fds = protox::compile(["leaf/v1/leaf.proto"], [&root]).expect("the .proto compiles");
    let encoded = fds.encode_to_vec();
    let out = tempfile::tempdir().unwrap();
    tonic_prost_build::configure()
        // Clients and servers generic over the transport: the server is served by leaf-server's
        // own listener, and the tests' client runs on tonic's channel.
        .build_transport(false)
        .build_client(true)
        .build_server(true)
        .emit_rerun_if_changed(false)
        .out_dir(out.path())
        .compile_fds(fds)
        .expect("the code generates");
    let code = std::fs::read_to_string(out.path().join("leaf.v1.rs")).unwrap();
    (encoded, code)
}

#[test]
fn the_committed_grpc_code_matches_the_proto() {
    let (descriptors, code) = generate();
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("LEAFTEST_BLESS").is_some() {
        std::fs::write(crate_dir.join(RUST), &code).unwrap();
        std::fs::write(crate_dir.join(DESCRIPTORS), &descriptors).unwrap();
        return;
    }
    let committed_code = std::fs::read_to_string(crate_dir.join(RUST)).unwrap_or_default();
    let committed_descriptors = std::fs::read(crate_dir.join(DESCRIPTORS)).unwrap_or_default();
    let how = "proto/leaf/v1/leaf.proto changed without the generated code: run \
               LEAFTEST_BLESS=1 cargo test -p leaf-server --test proto, and commit both";
    assert!(committed_code == code, "{RUST}: {how}");
    assert!(committed_descriptors == descriptors, "{DESCRIPTORS}: {how}");
}
