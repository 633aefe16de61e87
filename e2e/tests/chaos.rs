//! Fault injection on the layer-controller's inputs (the subset of `make chaos` that runs in
//! `make test`; docs/reliability.md lists every scenario and its invariant). A layer is Deployed
//! from a good artifact, then the source publishes hostile or broken revisions one after the
//! other. Invariant for each: the layer turns Failed with a condition naming the fault, nothing
//! of the bad revision is applied, nothing of the good one is pruned, a healthy neighbour layer
//! stays Deployed, and the next good revision deploys again.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use serde_json::Value;
use strata_e2e::flux::{
    ArtifactServer, configmap_layer, configmap_yaml, create_gitrepository, gitrepository_layer,
    install_layer_crds, inventory_names, layer_status, ready_reason, set_artifact,
};
use strata_e2e::services::{delete_layers_then_stop, start_layer_service};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

fn cm(ns: &str, name: &str) -> String {
    configmap_yaml(ns, name, "")
}

/// Waits until the layer is Deployed at `revision`.
async fn deployed_at(client: &Client, layer: &str, revision: &str) -> Result<Value> {
    eventually(
        &format!("layer {layer} Deployed at {revision}"),
        Duration::from_secs(30),
        || async {
            let s = layer_status(client, layer).await?;
            Ok((s["state"] == "Deployed" && s["revision"] == revision).then_some(s))
        },
    )
    .await
}

/// Waits until the layer is Failed with a Ready condition mentioning `needle`.
async fn failed_with(client: &Client, layer: &str, needle: &str) -> Result<String> {
    eventually(
        &format!("layer {layer} Failed naming {needle:?}"),
        Duration::from_secs(30),
        || async {
            let s = layer_status(client, layer).await?;
            let message = ready_reason(&s);
            Ok((s["state"] == "Failed" && message.contains(needle)).then_some(message))
        },
    )
    .await
}

#[tokio::test]
async fn hostile_and_broken_artifacts_fail_precisely_and_change_nothing() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "chaos").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let server = ArtifactServer::start().await?;
    create_gitrepository(&client, &ns).await?;
    // Archives up to 64 KiB, unpacked content up to 256 KiB.
    let controller = start_layer_service(
        "layer-controller",
        &ns,
        &["--orphan-grace", "1s", "--max-artifact-bytes", "65536"],
    )?;
    let layer = format!("{ns}-app");
    apply_yaml(&client, &ns, &gitrepository_layer(&ns, "app", "./app")).await?;
    // A neighbour layer on its own (ConfigMap) source: faults of the first never touch it.
    let neighbour = format!("{ns}-other");
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "other", "30s", &[("n.yaml", cm(&ns, "neighbour"))]),
    )
    .await?;

    let keep = cm(&ns, "keep");
    let good = |n: usize| {
        let (url, digest) = server.publish(
            &format!("good-{n}.tar.gz"),
            &[("app/keep.yaml", keep.as_str())],
        );
        (url, digest)
    };
    let (url, digest) = good(0);
    set_artifact(&client, &ns, "main@sha1:good0", &url, &digest).await?;
    deployed_at(&client, &layer, "main@sha1:good0")
        .await
        .with_context(|| controller.logs())?;

    let evil = cm(&ns, "evil");
    let valid = ArtifactServer::archive(&[
        ("app/keep.yaml", keep.as_str()),
        ("app/evil.yaml", evil.as_str()),
    ]);
    let bomb_text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: evil, namespace: {ns}}}\ndata: {{k: {}}}\n",
        "a".repeat(1 << 20)
    );
    let bomb = ArtifactServer::archive(&[
        ("app/keep.yaml", keep.as_str()),
        ("app/evil.yaml", bomb_text.as_str()),
    ]);
    assert!(
        bomb.len() < 65536,
        "the bomb itself is small: {} bytes",
        bomb.len()
    );
    let invalid_yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: evil\n";
    let unknown_kind = format!(
        "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {{name: evil, namespace: {ns}}}\n"
    );
    // (what, archive bytes, digest override, what the condition must say)
    let faults: Vec<(&str, Vec<u8>, Option<String>, String)> = vec![
        (
            "truncated",
            valid[..valid.len() / 2].to_vec(),
            None,
            "ArtifactFailed".into(),
        ),
        (
            "wrong digest",
            valid.clone(),
            Some(format!("sha256:{}", "0".repeat(64))),
            "digest mismatch".into(),
        ),
        (
            "path traversal",
            ArtifactServer::archive(&[
                ("app/keep.yaml", keep.as_str()),
                ("app/../../evil.yaml", evil.as_str()),
            ]),
            None,
            "escapes the archive root".into(),
        ),
        (
            "absolute path",
            ArtifactServer::archive(&[
                ("app/keep.yaml", keep.as_str()),
                ("/etc/evil.yaml", evil.as_str()),
            ]),
            None,
            "absolute path".into(),
        ),
        (
            "decompression bomb",
            bomb,
            None,
            "unpacked content exceeds 262144 bytes".into(),
        ),
        ("oversized", vec![0u8; 70_000], None, "65536".into()),
        (
            "invalid YAML",
            ArtifactServer::archive(&[
                ("app/keep.yaml", keep.as_str()),
                ("app/bad.yaml", invalid_yaml),
            ]),
            None,
            "bad.yaml".into(),
        ),
        (
            "a kind the cluster does not serve",
            ArtifactServer::archive(&[
                ("app/keep.yaml", keep.as_str()),
                ("app/gizmo.yaml", unknown_kind.as_str()),
            ]),
            None,
            "Gizmo".into(),
        ),
    ];
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for (n, (what, bytes, digest_override, needle)) in faults.into_iter().enumerate() {
        let name = format!("bad-{n}.tar.gz");
        let (url, digest) = server.publish_bytes(&name, bytes);
        let revision = format!("main@sha1:bad{n}");
        set_artifact(
            &client,
            &ns,
            &revision,
            &url,
            &digest_override.unwrap_or(digest),
        )
        .await?;
        failed_with(&client, &layer, &needle)
            .await
            .with_context(|| format!("{what}: {}", controller.logs()))?;
        assert!(
            maps.get_opt("evil").await?.is_none(),
            "{what}: nothing of it applied"
        );
        assert!(
            maps.get_opt("keep").await?.is_some(),
            "{what}: nothing pruned"
        );
        assert_eq!(
            layer_status(&client, &neighbour).await?["state"],
            "Deployed",
            "{what}: the neighbour layer is unaffected"
        );
        // And the next good revision deploys again.
        let (url, digest) = good(n + 1);
        let revision = format!("main@sha1:good{}", n + 1);
        set_artifact(&client, &ns, &revision, &url, &digest).await?;
        deployed_at(&client, &layer, &revision)
            .await
            .with_context(|| format!("recovering from {what}: {}", controller.logs()))?;
    }

    // A symbolic link is not followed (nor applied): only regular files are manifests.
    let linked = layer_controller::source::pack_entries(
        &[("app/keep.yaml", keep.as_str())],
        &[("app/link.yaml", "/etc/passwd")],
    );
    let (url, digest) = server.publish_bytes("link.tar.gz", linked);
    set_artifact(&client, &ns, "main@sha1:link", &url, &digest).await?;
    let deployed = deployed_at(&client, &layer, "main@sha1:link")
        .await
        .with_context(|| controller.logs())?;
    assert_eq!(
        inventory_names(&deployed),
        vec!["keep"],
        "only the regular file"
    );
    delete_layers_then_stop(&[&layer, &neighbour], controller);
    Ok(())
}
