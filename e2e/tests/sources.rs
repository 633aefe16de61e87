//! Every Flux source kind a layer can name — GitRepository, OCIRepository, Bucket (the real
//! CRDs, the artifact served as source-controller serves it) — is read by the layer-controller,
//! which deploys from it, and by the drift-observer, which reads the same artifact to know what
//! was applied and reports the layer clean. Both run as their chart ServiceAccounts, so this is
//! also where their `get` on each source kind is exercised.

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use strata_e2e::flux::{
    ArtifactServer, install_layer_crds, layer_status, set_source_artifact, source_api,
};
use strata_e2e::services::{delete_layers_then_stop, start_layer_service};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

/// A source object of `kind` named `name`, with the spec fields its schema requires.
fn source(kind: &str, name: &str) -> String {
    let spec = match kind {
        "GitRepository" => "{url: https://example.com/repo, interval: 1m}",
        "OCIRepository" => {
            "{url: oci://registry.example.com/addons, interval: 1m, ref: {tag: latest}}"
        }
        _ => "{bucketName: addons, endpoint: storage.example.com, interval: 1m}",
    };
    format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flux_source_kind_is_deployed_and_observed() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "sources").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let server = ArtifactServer::start().await?;
    let kinds = [
        ("GitRepository", "repo"),
        ("OCIRepository", "oci"),
        ("Bucket", "bucket"),
    ];
    let mut layers = Vec::new();
    for (kind, name) in kinds {
        let manifest = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: from-{name}, namespace: {ns}}}\ndata: {{kind: {kind}}}\n"
        );
        let (url, digest) = server.publish(&format!("{name}.tar.gz"), &[("cm.yaml", &manifest)]);
        apply_yaml(&client, &ns, &source(kind, name)).await?;
        // A source is created before its status can be written.
        eventually(
            &format!("{kind} {name} served"),
            Duration::from_secs(20),
            || async {
                Ok(source_api(&client, &ns, kind)
                    .get_opt(name)
                    .await?
                    .map(drop))
            },
        )
        .await?;
        set_source_artifact(
            &client,
            &ns,
            kind,
            name,
            &format!("rev-{name}"),
            &url,
            &digest,
        )
        .await?;
        let layer = format!("{ns}-{name}");
        apply_yaml(
            &client,
            &ns,
            &format!(
                "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {layer}, labels: {{strata-e2e/suite: {ns}}}}}\nspec: {{version: 1.0.0, interval: 1h, source: {{kind: {kind}, name: {name}, namespace: {ns}, path: ./}}}}\n"
            ),
        )
        .await?;
        layers.push(layer);
    }
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "500ms"])?;
    let observer = start_layer_service("drift-observer", &ns, &[])?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for ((kind, name), layer) in kinds.iter().zip(&layers) {
        let status = eventually(
            &format!("{layer} Deployed"),
            Duration::from_secs(60),
            || async {
                let status = layer_status(&client, layer).await?;
                Ok((status["state"] == "Deployed").then_some(status))
            },
        )
        .await?;
        ensure!(
            status["revision"] == format!("rev-{name}"),
            "{kind}: {status}"
        );
        let applied = maps.get(&format!("from-{name}")).await?;
        ensure!(
            applied.data.and_then(|d| d.get("kind").cloned()).as_deref() == Some(*kind),
            "{kind}: the artifact's ConfigMap"
        );
        // The observer read the same artifact and compared: Drifted=False.
        eventually(
            &format!("{layer} observed clean"),
            Duration::from_secs(60),
            || async {
                let status = layer_status(&client, layer).await?;
                Ok(status["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Drifted" && c["status"] == "False")
                    .then_some(()))
            },
        )
        .await?;
    }
    drop(observer);
    let names: Vec<&str> = layers.iter().map(String::as_str).collect();
    delete_layers_then_stop(&names, controller);
    Ok(())
}
