//! Every Flux source kind a layer can name — GitRepository, OCIRepository, Bucket (the real
//! CRDs, the artifact served as source-controller serves it) — is read by the layer-controller,
//! which deploys from it, and by the drift-observer, which reads the same artifact to know what
//! was applied and reports the layer clean. Both run as their chart ServiceAccounts, so this is
//! also where their `get` on each source kind is exercised. Variables (`spec.postBuild`) come
//! from these sources' namespace too.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use strata_e2e::flux::{
    ArtifactServer, create_source_with_artifact, install_layer_crds, layer_status,
};
use strata_e2e::services::{delete_layers_then_stop, start_layer_service};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

/// Waits until the drift-observer has compared `layer` and reports it clean (Drifted=False).
async fn observed_clean(client: &kube::Client, layer: &str) -> Result<()> {
    eventually(
        &format!("{layer} observed clean"),
        Duration::from_secs(60),
        || async {
            let status = layer_status(client, layer).await?;
            Ok(status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Drifted" && c["status"] == "False")
                .then_some(()))
        },
    )
    .await
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
        create_source_with_artifact(
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
        // The observer read the same artifact and compared.
        observed_clean(&client, layer).await?;
    }
    drop(observer);
    let names: Vec<&str> = layers.iter().map(String::as_str).collect();
    delete_layers_then_stop(&names, controller);
    Ok(())
}

/// `spec.postBuild`, Flux's way: variables from `substitute`, a ConfigMap and a Secret (an
/// optional missing one skipped) fill a name, a number and a default; `$${…}` and an opted-out
/// object stay literal; the drift-observer substitutes the same and reports the layer clean.
/// A layer whose required variables' ConfigMap is missing, and one using an unset variable,
/// fail alone with the reason named, nothing of them applied, while the first stays Deployed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_build_variables_are_substituted_as_flux_does() -> Result<()> {
    use k8s_openapi::api::core::v1::Service;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "substitute").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let manifests = format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: \"${{APP}}-config\", namespace: {ns}}}
data:
  greeting: ${{GREETING:=hello}}
  region: ${{REGION:=eu-west-1}}
  literal: $${{NOT_A_VARIABLE}}
---
apiVersion: v1
kind: Service
metadata: {{name: \"${{APP}}\", namespace: {ns}}}
spec:
  ports:
  - name: http
    port: ${{PORT}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: untouched
  namespace: {ns}
  annotations: {{kustomize.toolkit.fluxcd.io/substitute: disabled}}
data:
  script: echo ${{UNSET}}
"
    );
    let source = |name: &str, text: &str| {
        let body: String = text.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}, labels: {{strata.dev/layer-source: \"true\"}}}}\ndata:\n  app.yaml: |\n{body}"
        )
    };
    let layer = |name: &str, src: &str, post_build: &str| {
        format!(
            "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {ns}-{name}, labels: {{strata-e2e/suite: {ns}}}}}\nspec: {{version: 1.0.0, interval: 1h, timeout: 30s, source: {{kind: ConfigMap, name: {src}, namespace: {ns}, path: ./}}, postBuild: {post_build}}}\n"
        )
    };
    apply_yaml(&client, &ns, &source("src-app", &manifests)).await?;
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: vars, namespace: {ns}}}\ndata: {{PORT: \"8080\", GREETING: from-configmap}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: secret-vars, namespace: {ns}}}\nstringData: {{GREETING: from-secret}}\n"
        ),
    )
    .await?;
    let from = "[{kind: ConfigMap, name: vars}, {kind: ConfigMap, name: absent, optional: true}, {kind: Secret, name: secret-vars}]";
    apply_yaml(
        &client,
        &ns,
        &layer(
            "app",
            "src-app",
            &format!("{{substitute: {{APP: demo}}, substituteFrom: {from}}}"),
        ),
    )
    .await?;
    // Needs a ConfigMap that does not exist (not optional).
    apply_yaml(
        &client,
        &ns,
        &layer(
            "missing",
            "src-app",
            "{substitute: {APP: other}, substituteFrom: [{kind: ConfigMap, name: nowhere}]}",
        ),
    )
    .await?;
    // PORT is set nowhere and has no default.
    apply_yaml(
        &client,
        &ns,
        &layer("unset", "src-app", "{substitute: {APP: third}}"),
    )
    .await?;
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "500ms"])?;
    let observer = start_layer_service("drift-observer", &ns, &[])?;
    let state = |name: &'static str, want: &'static str| {
        let client = client.clone();
        let layer = format!("{ns}-{name}");
        async move {
            eventually(
                &format!("{layer} {want}"),
                Duration::from_secs(60),
                || async {
                    let status = layer_status(&client, &layer).await?;
                    Ok((status["state"] == want).then_some(status))
                },
            )
            .await
        }
    };
    state("app", "Deployed").await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let data = maps.get("demo-config").await?.data.unwrap_or_default();
    ensure!(
        data["greeting"] == "from-secret",
        "later substituteFrom wins: {data:?}"
    );
    ensure!(data["region"] == "eu-west-1", "default: {data:?}");
    ensure!(data["literal"] == "${NOT_A_VARIABLE}", "escaped: {data:?}");
    let untouched = maps.get("untouched").await?.data.unwrap_or_default();
    ensure!(
        untouched["script"] == "echo ${UNSET}",
        "opted out: {untouched:?}"
    );
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let port = services
        .get("demo")
        .await?
        .spec
        .and_then(|s| s.ports)
        .unwrap_or_default();
    ensure!(
        port.first().map(|p| p.port) == Some(8080),
        "a number: {port:?}"
    );
    let missing = state("missing", "Failed").await?;
    let message = missing["conditions"].to_string();
    ensure!(
        message.contains(&format!(
            "spec.postBuild.substituteFrom[0] (ConfigMap {ns}/nowhere) does not exist"
        )),
        "{missing}"
    );
    let unset = state("unset", "Failed").await?;
    let message = unset["conditions"].to_string();
    ensure!(
        message.contains("app.yaml: document 1 (line 15)")
            && message.contains("\\\"PORT\\\" is not set"),
        "{unset}"
    );
    // Nothing of the failed layers was applied.
    for name in ["other-config", "third-config"] {
        ensure!(maps.get_opt(name).await?.is_none(), "{name} applied");
    }
    ensure!(services.get_opt("third").await?.is_none(), "third applied");
    // The observer read the same variables.
    observed_clean(&client, &format!("{ns}-app")).await?;
    state("app", "Deployed").await?;
    drop(observer);
    let names = [
        format!("{ns}-app"),
        format!("{ns}-missing"),
        format!("{ns}-unset"),
    ];
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    delete_layers_then_stop(&names, controller);
    Ok(())
}

/// A layer reads its Flux source from the layer-controller's watch of the kind, not with a GET
/// per reconcile: a layer naming a source that does not exist yet deploys as soon as it is
/// created, follows each new artifact revision at once (its interval is an hour: only the watch
/// can wake it), and from then on the controller, as its chart ServiceAccount, never GETs the
/// source (the local plane's audit log), through new revisions and requested reconciles alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_reads_its_flux_source_from_the_watch() -> Result<()> {
    use strata_e2e::flux::{reconciled, set_source_artifact};
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "source-watch").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let server = ArtifactServer::start().await?;
    let layer = format!("{ns}-late");
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {layer}, labels: {{strata-e2e/suite: {ns}}}}}\nspec: {{version: 1.0.0, interval: 1h, source: {{kind: OCIRepository, name: late, namespace: {ns}, path: ./}}}}\n"
        ),
    )
    .await?;
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "500ms"])?;
    let waiting = eventually(
        "the layer waiting for its source",
        Duration::from_secs(60),
        || async {
            let status = layer_status(&client, &layer).await?;
            Ok(status["conditions"]
                .to_string()
                .contains("not found")
                .then_some(status))
        },
    )
    .await?;
    ensure!(waiting["state"] != "Deployed", "{waiting}");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let publish = |revision: &str| {
        let manifest = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app, namespace: {ns}}}\ndata: {{revision: {revision}}}\n"
        );
        server.publish(&format!("{revision}.tar.gz"), &[("cm.yaml", &manifest)])
    };
    let deployed_at = |revision: &'static str| {
        let (client, layer, maps) = (&client, &layer, &maps);
        async move {
            eventually(
                &format!("{layer} Deployed at {revision}"),
                Duration::from_secs(30),
                || async {
                    let status = layer_status(client, layer).await?;
                    Ok(
                        (status["state"] == "Deployed" && status["revision"] == revision)
                            .then_some(()),
                    )
                },
            )
            .await?;
            let applied = maps.get("app").await?;
            ensure!(
                applied
                    .data
                    .and_then(|d| d.get("revision").cloned())
                    .as_deref()
                    == Some(revision),
                "{revision}: the artifact's ConfigMap"
            );
            Ok::<_, anyhow::Error>(())
        }
    };
    let (url, digest) = publish("rev-1");
    create_source_with_artifact(
        &client,
        &ns,
        "OCIRepository",
        "late",
        "rev-1",
        &url,
        &digest,
    )
    .await?;
    deployed_at("rev-1").await?;
    // From here on the kind is listed: every read of the source must come from the watch.
    let audit = cluster().audit_log();
    let from = audit
        .as_ref()
        .map(|log| std::fs::metadata(log).map(|m| m.len()))
        .transpose()?;
    for revision in ["rev-2", "rev-3"] {
        let (url, digest) = publish(revision);
        set_source_artifact(
            &client,
            &ns,
            "OCIRepository",
            "late",
            revision,
            &url,
            &digest,
        )
        .await?;
        deployed_at(revision).await?;
    }
    // Requested reconciles: each request is an edit of the layer made after the controller's
    // last write (the test saw that write), so the layer watch delivers the write before the
    // request that triggers the reconcile, and the reconcile decides from the cache. A
    // revision, by contrast, comes from the source's watch, another stream, and may start a
    // reconcile before the layer watch delivered the previous status write: that one reads the
    // layer afresh (rightly), so only this window's GETs of the layer are counted.
    let requests_from = audit
        .as_ref()
        .map(|log| std::fs::metadata(log).map(|m| m.len()))
        .transpose()?;
    for _ in 0..4 {
        let status = reconciled(&client, &layer, Duration::from_secs(30)).await?;
        ensure!(status["revision"] == "rev-3", "{status}");
    }
    match (audit, from, requests_from) {
        (Some(log), Some(from), Some(requests_from)) => {
            use std::io::{Read, Seek};
            let mut file = std::fs::File::open(&log)?;
            file.seek(std::io::SeekFrom::Start(from))?;
            let mut text = String::new();
            file.read_to_string(&mut text)?;
            let user = format!("system:serviceaccount:{ns}:layer-controller");
            let ours_in = |text: &str| -> Vec<serde_json::Value> {
                text.lines()
                    .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                    .filter(|e| e["user"]["username"] == user.as_str())
                    .collect()
            };
            let ours = ours_in(&text);
            let requests = usize::try_from(requests_from - from)?;
            let during_requests = ours_in(
                text.get(requests..)
                    .context("the audit log's size before the requests is not a line's end")?,
            );
            // The window holds the controller's writes of the four requests' handling.
            ensure!(
                during_requests
                    .iter()
                    .filter(|e| e["objectRef"]["resource"] == "addonslayers")
                    .count()
                    >= 4,
                "fewer than four requests of {user} on the layer while it handled four reconcile requests"
            );
            // The log does hold this controller's requests of the window (its status writes).
            ensure!(
                ours.iter()
                    .any(|e| e["objectRef"]["resource"] == "addonslayers"),
                "no request of {user} in the audit log since rev-1"
            );
            let gets: Vec<&serde_json::Value> = ours
                .iter()
                .filter(|e| e["verb"] == "get" && e["objectRef"]["resource"] == "ocirepositories")
                .collect();
            ensure!(gets.is_empty(), "the source was read with a GET: {gets:#?}");
            // Nor is the layer read afresh at the start of a reconcile whose cache holds its
            // last write: none in the four requested reconciles.
            let layer_gets = |events: &[serde_json::Value]| {
                events
                    .iter()
                    .filter(|e| e["verb"] == "get" && e["objectRef"]["resource"] == "addonslayers")
                    .count()
            };
            eprintln!(
                "GETs of the layer by its controller since rev-1: {}, during the requested reconciles: {}",
                layer_gets(&ours),
                layer_gets(&during_requests)
            );
            ensure!(
                layer_gets(&during_requests) == 0,
                "the layer was read {} times in four reconciles its cache was current for",
                layer_gets(&during_requests)
            );
        }
        _ => eprintln!("no audit log (not the local plane): the GETs are not counted"),
    }
    delete_layers_then_stop(&[layer.as_str()], controller);
    Ok(())
}
