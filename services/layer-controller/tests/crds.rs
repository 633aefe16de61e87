//! The committed CRD YAML matches the Rust types (`make crds` rewrites it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

#[test]
fn committed_crds_are_up_to_date() {
    let dir = std::path::Path::new(
        std::env::var("CARGO_MANIFEST_DIR")
            .as_deref()
            .unwrap_or(env!("CARGO_MANIFEST_DIR")),
    )
    .join("../../manifests/crds");
    let stale = core_k8s::crds::check_or_update(
        &dir,
        "crates/core-layers/src/crd.rs",
        layer_controller::crd::crds(),
    )
    .unwrap();
    assert!(
        stale.is_empty(),
        "stale CRD YAML (run `make crds`): {stale:?}"
    );
}
