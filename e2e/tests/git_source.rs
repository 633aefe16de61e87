//! Layers follow a real Git repository: served by git's own `http-backend`, turned into
//! GitRepository artifacts by a source-controller stand-in (Flux's real source CRD, revision
//! `main@sha1:<commit>`). A pushed commit rolls out; a force-push to an older commit rolls
//! back; an artifact whose digest does not match is refused and nothing is applied.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use layer_controller::crd::AddonsLayer;
use strata_e2e::flux::{ArtifactServer, create_gitrepository, install_layer_crds, set_artifact};
use strata_e2e::git::{GitServer, SourceStandIn, git};
use strata_e2e::services::{delete_layers_then_stop, start_layer_service};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

async fn commit(work: &std::path::Path, value: &str, ns: &str) -> Result<String> {
    std::fs::create_dir_all(work.join("layer"))?;
    std::fs::write(
        work.join("layer/settings.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}}}\ndata: {{release: \"{value}\"}}\n"
        ),
    )?;
    git(work, &["add", "-A"]).await?;
    git(work, &["commit", "--quiet", "-m", value]).await?;
    git(work, &["rev-parse", "HEAD"]).await
}

#[tokio::test]
async fn commits_roll_out_force_pushes_roll_back_and_tampering_is_refused() -> Result<()> {
    let client = cluster().client().await?;
    let test_ns = TestNamespace::create(&client, "git").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let tmp = std::env::temp_dir().join(format!("git-source-{ns}"));
    let _ = std::fs::remove_dir_all(&tmp);
    let server = GitServer::start(&tmp.join("server")).await?;
    let url = server.create_repo("fleet").await?;
    let work = tmp.join("work");
    std::fs::create_dir_all(&work)?;
    git(&work, &["init", "--quiet"]).await?;
    let first = commit(&work, "one", &ns).await?;
    git(&work, &["push", "--quiet", &url, "main"]).await?;

    let artifacts = Arc::new(ArtifactServer::start().await?);
    create_gitrepository(&client, &ns).await?;
    let stand_in =
        SourceStandIn::start(client.clone(), &ns, &url, "main", artifacts.clone(), &tmp).await?;
    let name = format!("{ns}-fleet");
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {name}, labels: {{strata-e2e/suite: {ns}}}}}\nspec: {{version: 1.0.0, interval: 1h, source: {{name: repo, namespace: {ns}, path: ./layer}}}}\n"
        ),
    )
    .await?;
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "500ms"])?;
    let layers: Api<AddonsLayer> = Api::all(client.clone());
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deployed_at = |commit: String, value: &'static str| {
        let layers = layers.clone();
        let configmaps = configmaps.clone();
        let name = name.clone();
        async move {
            let revision = format!("main@sha1:{commit}");
            eventually(
                &format!("{name} Deployed at {revision}"),
                Duration::from_secs(60),
                || async {
                    let status = layers.get(&name).await?.status.unwrap_or_default();
                    Ok((status.state.as_deref() == Some("Deployed")
                        && status.revision.as_deref() == Some(revision.as_str()))
                    .then_some(()))
                },
            )
            .await?;
            let data = configmaps.get("settings").await?.data.unwrap_or_default();
            ensure!(
                data.get("release").map(String::as_str) == Some(value),
                "{data:?}"
            );
            anyhow::Ok(())
        }
    };
    deployed_at(first.clone(), "one").await?;

    // A new commit pushed over HTTP becomes a new revision, rolled out.
    let second = commit(&work, "two", &ns).await?;
    git(&work, &["push", "--quiet", &url, "main"]).await?;
    deployed_at(second, "two").await?;

    // A force-push back to the first commit rolls back.
    git(
        &work,
        &[
            "push",
            "--quiet",
            "--force",
            &url,
            &format!("{first}:refs/heads/main"),
        ],
    )
    .await?;
    deployed_at(first.clone(), "one").await?;

    // A tampered artifact (its digest no longer matches the status) is refused: nothing
    // applied, the layer says why.
    drop(stand_in);
    let evil =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {release: evil}\n";
    let (artifact_url, _) = artifacts.publish("tampered.tar.gz", &[("layer/settings.yaml", evil)]);
    let (_, published_digest) = artifacts.publish("genuine.tar.gz", &[("layer/settings.yaml", "")]);
    set_artifact(
        &client,
        &ns,
        "main@sha1:feedface",
        &artifact_url,
        &published_digest,
    )
    .await?;
    let failed = eventually(
        "tampered artifact refused",
        Duration::from_secs(30),
        || async {
            let status = layers.get(&name).await?.status.unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .cloned();
            Ok((status.state.as_deref() == Some("Failed")).then_some((status, ready)))
        },
    )
    .await?;
    ensure!(
        failed
            .1
            .as_ref()
            .is_some_and(|c| c.reason == "ArtifactFailed" && c.message.contains("digest")),
        "{:?}",
        failed.1
    );
    let data = configmaps.get("settings").await?.data.unwrap_or_default();
    ensure!(
        data.get("release").map(String::as_str) == Some("one"),
        "nothing applied: {data:?}"
    );

    delete_layers_then_stop(&[&name], controller);
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
