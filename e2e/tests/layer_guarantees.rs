//! Promises the documentation makes, each shown on the local control plane:
//! - a failed apply prunes nothing (docs/layer-controller.md, apply);
//! - an object two layers want stays with the layer that applied it first; the other fails
//!   `OwnershipConflict` naming both and applies nothing, until the first lets go
//!   (docs/layer-controller.md, ownership);
//! - a Failed layer becomes Deployed by itself once its objects recover, with no new revision
//!   (health);
//! - a teardown that cannot finish releases the finalizer after `timeout` with a Warning event
//!   `TeardownTimedOut` naming what was still terminating (deleting a layer);
//! - an artifact over `--max-artifact-bytes` fails the layer with nothing applied (source);
//! - a `caBundle` removed by hand is injected again (docs/admission-webhook.md, CA injection);
//! - a layer acts as its ServiceAccount (`spec.serviceAccountName`, `--default-service-account`):
//!   it can apply only what that account may (docs/layer-controller.md, multi-tenancy).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use layer_controller::crd::AddonsLayer;
use serde_json::{Value, json};
use strata_e2e::flux::{
    ArtifactServer, configmap_layer, configmap_yaml, create_gitrepository, gitrepository_layer,
    install_layer_crds, inventory_names, layer_status, ready_reason, reconciled, set_artifact,
};
use strata_e2e::plane::free_port;
use strata_e2e::services::{
    ServiceProcess, start_admission_webhook, start_layer_service, start_layer_service_with,
};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

fn start_controller(ns: &str, extra: &[&str]) -> Result<ServiceProcess> {
    let mut args = vec!["--orphan-grace", "1s", "--health-poll", "500ms"];
    args.extend_from_slice(extra);
    start_layer_service("layer-controller", ns, &args)
}

async fn wait_state(client: &Client, layer: &str, want: &str, within: Duration) -> Result<Value> {
    eventually(&format!("layer {layer} {want}"), within, || async {
        let s = layer_status(client, layer).await?;
        Ok((s["state"] == want).then_some(s))
    })
    .await
}

async fn delete_layer(client: &Client, layer: &str) {
    let _ = cluster()
        .kubectl()
        .args(["delete", "addonslayer", layer, "--wait=false"])
        .output();
    let api: Api<AddonsLayer> = Api::all(client.clone());
    let _ = eventually("layer gone", Duration::from_secs(60), || async {
        Ok(api.get_opt(layer).await?.is_none().then_some(()))
    })
    .await;
}

#[tokio::test]
async fn a_failed_apply_prunes_nothing() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "noprune").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns, &[])?;
    let layer = format!("{ns}-base");
    let v1 = [
        ("a.yaml", configmap_yaml(&ns, "a", "")),
        ("b.yaml", configmap_yaml(&ns, "b", "")),
    ];
    apply_yaml(&client, &ns, &configmap_layer(&ns, "base", "30s", &v1)).await?;
    wait_state(&client, &layer, "Deployed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;

    // v2: b leaves the source, and an object the API server refuses (an invalid name) joins.
    let v2 = [
        ("a.yaml", configmap_yaml(&ns, "a", "")),
        ("bad.yaml", configmap_yaml(&ns, "Not_A_Valid_Name", "")),
    ];
    apply_yaml(&client, &ns, &configmap_layer(&ns, "base", "30s", &v2)).await?;
    let failed = wait_state(&client, &layer, "Failed", Duration::from_secs(30)).await?;
    let reason = ready_reason(&failed);
    assert!(
        reason.contains("ApplyFailed") && reason.contains("Not_A_Valid_Name"),
        "{reason}"
    );
    // The controller had every chance to prune: it wrote the Failed status after the attempt.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let b = maps
        .get("b")
        .await
        .context("b must survive a failed apply")?;
    assert!(
        !b.labels().contains_key("strata.dev/orphaned"),
        "b was marked for pruning: {:?}",
        b.labels()
    );
    let inventory = inventory_names(&failed);
    assert!(
        inventory.iter().any(|n| n == "b"),
        "the inventory keeps b: {inventory:?}"
    );

    delete_layer(&client, &layer).await;
    drop(controller);
    Ok(())
}

#[tokio::test]
async fn an_object_two_layers_want_stays_with_the_first_until_it_lets_go() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "owners").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns, &[])?;
    let (first, second) = (format!("{ns}-first"), format!("{ns}-second"));
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner_of = async |name: &str| -> Result<Option<String>> {
        Ok(maps
            .get_opt(name)
            .await?
            .and_then(|m| m.labels().get("strata.dev/layer").cloned()))
    };
    let with_shared = [
        ("a.yaml", configmap_yaml(&ns, "a", "")),
        ("shared.yaml", configmap_yaml(&ns, "shared", "")),
    ];
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "first", "30s", &with_shared),
    )
    .await?;
    wait_state(&client, &first, "Deployed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;

    // The second layer wants `shared` too: it fails naming the object and the first layer,
    // and applies nothing, not even what no one else owns.
    let wants_shared = [
        ("b.yaml", configmap_yaml(&ns, "b", "")),
        ("shared.yaml", configmap_yaml(&ns, "shared", "")),
    ];
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "second", "30s", &wants_shared),
    )
    .await?;
    let failed = wait_state(&client, &second, "Failed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;
    let reason = ready_reason(&failed);
    assert!(
        reason.contains("OwnershipConflict")
            && reason.contains(&format!("ConfigMap {ns}/shared is also in layer {first}")),
        "{reason}"
    );
    assert_eq!(owner_of("shared").await?.as_deref(), Some(first.as_str()));
    assert!(
        maps.get_opt("b").await?.is_none(),
        "b was applied despite the conflict"
    );
    // Asked again, it still does not take the object.
    reconciled(&client, &second, Duration::from_secs(30)).await?;
    assert_eq!(layer_status(&client, &second).await?["state"], "Failed");
    assert_eq!(owner_of("shared").await?.as_deref(), Some(first.as_str()));

    // The first layer lets go of `shared`; the second, asked again, takes it and deploys.
    let without_shared = [("a.yaml", configmap_yaml(&ns, "a", ""))];
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "first", "30s", &without_shared),
    )
    .await?;
    eventually(
        "first no longer holds shared",
        Duration::from_secs(30),
        || async {
            let s = layer_status(&client, &first).await?;
            Ok(
                (s["state"] == "Deployed" && !inventory_names(&s).iter().any(|n| n == "shared"))
                    .then_some(()),
            )
        },
    )
    .await
    .with_context(|| controller.logs())?;
    reconciled(&client, &second, Duration::from_secs(30)).await?;
    wait_state(&client, &second, "Deployed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;
    eventually(
        "shared belongs to the second layer",
        Duration::from_secs(30),
        || async {
            Ok((owner_of("shared").await?.as_deref() == Some(second.as_str())).then_some(()))
        },
    )
    .await?;
    assert!(maps.get_opt("b").await?.is_some());

    delete_layer(&client, &second).await;
    delete_layer(&client, &first).await;
    drop(controller);
    Ok(())
}

#[tokio::test]
async fn a_failed_layer_recovers_by_itself_when_its_objects_do() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "recover").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns, &[])?;
    let layer = format!("{ns}-web");
    // Its pod runs but is not Ready (kwok's stage for this label): the layer times out.
    let web = format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web, strata.dev/fake-ready: \"false\"}}}}
    spec: {{containers: [{{name: c, image: example/app:1}}]}}
"
    );
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "web", "4s", &[("web.yaml", web)]),
    )
    .await?;
    let failed = wait_state(&client, &layer, "Failed", Duration::from_secs(40))
        .await
        .with_context(|| controller.logs())?;
    // Never deployed yet: the revision it tried is the last attempted one.
    let revision = failed["lastAttemptedRevision"].clone();
    assert!(revision.is_string(), "{failed}");
    assert!(
        ready_reason(&failed).contains("HealthCheckFailed"),
        "{failed}"
    );

    // The pod becomes Ready (nothing in the layer or its source changes).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for pod in pods.list(&ListParams::default().labels("app=web")).await? {
        pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"strata.dev/fake-ready": null}}})),
        )
        .await?;
    }
    let deployed = wait_state(&client, &layer, "Deployed", Duration::from_secs(40)).await?;
    assert_eq!(
        deployed["revision"], revision,
        "same revision, no new attempt"
    );

    delete_layer(&client, &layer).await;
    drop(controller);
    Ok(())
}

#[tokio::test]
async fn a_stuck_teardown_is_released_after_the_timeout() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "teardown").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let controller = start_controller(&ns, &[])?;
    let layer = format!("{ns}-held");
    // A finalizer nobody removes: the object stays Terminating after the layer deletes it.
    let held = configmap_yaml(&ns, "held", ", finalizers: [example.com/hold]");
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&ns, "held", "3s", &[("held.yaml", held)]),
    )
    .await?;
    wait_state(&client, &layer, "Deployed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;

    let _ = cluster()
        .kubectl()
        .args(["delete", "addonslayer", &layer, "--wait=false"])
        .output();
    let api: Api<AddonsLayer> = Api::all(client.clone());
    eventually("the layer released", Duration::from_secs(40), || async {
        Ok(api.get_opt(&layer).await?.is_none().then_some(()))
    })
    .await
    .with_context(|| controller.logs())?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let terminating = maps.get("held").await?;
    assert!(terminating.metadata.deletion_timestamp.is_some());

    // The Warning event names the layer's leftover.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let note = eventually(
        "a TeardownTimedOut event",
        Duration::from_secs(20),
        || async {
            let list = events
                .list(&ListParams::default().fields("reason=TeardownTimedOut"))
                .await?;
            Ok(list
                .items
                .into_iter()
                .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&layer))
                .map(|e| (e.type_.unwrap_or_default(), e.note.unwrap_or_default())))
        },
    )
    .await?;
    assert_eq!(note.0, "Warning");
    assert!(note.1.contains("held"), "{}", note.1);

    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    drop(controller);
    Ok(())
}

#[tokio::test]
async fn an_artifact_over_the_size_limit_fails_with_nothing_applied() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "bigart").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let server = ArtifactServer::start().await?;
    // Incompressible content, so the archive itself is over the 4 KiB limit.
    let noise = strata_e2e::support::incompressible(8192, 7);
    let big = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: big, namespace: {ns}}}\ndata: {{k: {noise}}}\n"
    );
    let (url, digest) = server.publish("big.tar.gz", &[("app/big.yaml", big.as_str())]);
    create_gitrepository(&client, &ns).await?;
    set_artifact(&client, &ns, "main@sha1:big", &url, &digest).await?;
    let controller = start_controller(&ns, &["--max-artifact-bytes", "4096"])?;
    let layer = format!("{ns}-app");
    apply_yaml(&client, &ns, &gitrepository_layer(&ns, "app", "./app")).await?;
    let failed = wait_state(&client, &layer, "Failed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;
    let reason = ready_reason(&failed);
    assert!(
        reason.contains("ArtifactFailed") && reason.contains("4096"),
        "{reason}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(maps.get_opt("big").await?.is_none(), "nothing applied");
    delete_layer(&client, &layer).await;
    drop(controller);
    Ok(())
}

#[tokio::test]
async fn a_ca_bundle_removed_by_hand_is_injected_again() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "reinject").await?;
    let ns = ns.name.clone();
    let tls = format!("127.0.0.1:{}", free_port()?);
    let _server = start_admission_webhook(&ns, &tls, &[])?;
    // The chart's name for it: the only kind of name the server may inject into.
    let name = format!("no-downscale-{ns}");
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {name}
  labels: {{grafana.com/inject-rollout-operator-ca: \"true\", grafana.com/namespace: {ns}}}
webhooks:
- name: reinject.strata.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig: {{url: \"https://{tls}/admission/no-downscale\"}}
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}
  rules: [{{apiGroups: [apps], apiVersions: [v1], operations: [UPDATE], resources: [statefulsets]}}]
"
        ),
    )
    .await?;
    let configs: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    let bundle = || async {
        Ok(configs
            .get(&name)
            .await?
            .webhooks
            .and_then(|w| w.into_iter().next())
            .and_then(|w| w.client_config.ca_bundle)
            .filter(|b| !b.0.is_empty()))
    };
    let injected = eventually("the CA injected", Duration::from_secs(30), bundle).await?;
    // Removed by hand, as an operator would.
    let out = cluster()
        .kubectl()
        .args([
            "patch",
            "validatingwebhookconfiguration",
            &name,
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/webhooks/0/clientConfig/caBundle"}]"#,
            "-o",
            "jsonpath={.metadata.resourceVersion}|{.webhooks[0].clientConfig.caBundle}",
        ])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The patch's own answer is the object without a bundle; the server may re-inject within
    // milliseconds, so "again" means a later version of the object that has it.
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (version, left) = answer.split_once('|').unwrap_or((&answer, ""));
    assert!(left.is_empty(), "the patch removed the bundle: {answer}");
    let removed_at: u64 = version.parse()?;
    let bundle_after = || async {
        let config = configs.get(&name).await?;
        let version: u64 = config
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or("0")
            .parse()?;
        Ok(config
            .webhooks
            .and_then(|w| w.into_iter().next())
            .and_then(|w| w.client_config.ca_bundle)
            .filter(|b| !b.0.is_empty() && version > removed_at))
    };
    let again = eventually(
        "the CA injected again",
        Duration::from_secs(90),
        bundle_after,
    )
    .await?;
    assert_eq!(again, injected, "the same CA");
    let _ = configs.delete(&name, &Default::default()).await;
    Ok(())
}

#[tokio::test]
async fn a_layer_acts_as_its_service_account() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "tenant").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    // The tenant may manage ConfigMaps in its namespace, nothing else.
    let rbac = strata_e2e::support::service_account_with_role(
        &ns,
        "tenant",
        &[
            r#"{apiGroups: [""], resources: [configmaps], verbs: [get, list, watch, create, update, patch, delete]}"#,
        ],
    );
    apply_yaml(&client, &ns, &rbac).await?;
    // Layers without serviceAccountName act as `tenant` (the lock-down flag); the release lets
    // layers act as accounts of this namespace.
    let impersonation = format!("layerController.impersonation[0].namespace={ns}");
    let controller = start_layer_service_with(
        "layer-controller",
        &ns,
        &[
            "--orphan-grace",
            "1s",
            "--health-poll",
            "500ms",
            "--default-service-account",
            "tenant",
        ],
        &[&impersonation],
    )?;
    let layer = format!("{ns}-apps");
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: token, namespace: {ns}}}\nstringData: {{k: v}}\n"
    );
    let v1 = [("a.yaml", configmap_yaml(&ns, "a", "")), ("s.yaml", secret)];
    apply_yaml(&client, &ns, &configmap_layer(&ns, "apps", "30s", &v1)).await?;
    let failed = wait_state(&client, &layer, "Failed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;
    let reason = ready_reason(&failed);
    assert!(
        reason.contains(&format!("system:serviceaccount:{ns}:tenant"))
            && reason.contains("secrets")
            && reason.contains("forbidden"),
        "{reason}"
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    assert!(
        secrets.get_opt("token").await?.is_none(),
        "the Secret was not created"
    );
    // What the account may do, the layer does.
    let v2 = [
        ("a.yaml", configmap_yaml(&ns, "a", "")),
        ("b.yaml", configmap_yaml(&ns, "b", "")),
    ];
    apply_yaml(&client, &ns, &configmap_layer(&ns, "apps", "30s", &v2)).await?;
    wait_state(&client, &layer, "Deployed", Duration::from_secs(30))
        .await
        .with_context(|| controller.logs())?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let a = maps.get("a").await?;
    let managers: Vec<String> = a
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == "strata-layer-controller"),
        "{managers:?}"
    );
    // Pruning goes through the account too: b leaves the source and is deleted.
    let v3 = [("a.yaml", configmap_yaml(&ns, "a", ""))];
    apply_yaml(&client, &ns, &configmap_layer(&ns, "apps", "30s", &v3)).await?;
    eventually("b pruned", Duration::from_secs(30), || async {
        Ok(maps.get_opt("b").await?.is_none().then_some(()))
    })
    .await
    .with_context(|| controller.logs())?;
    // spec.serviceAccountName wins over the default: an account with no rights applies nothing.
    let other = configmap_layer(
        &ns,
        "other",
        "30s",
        &[("c.yaml", configmap_yaml(&ns, "c", ""))],
    )
    .replace(
        "  source: {kind: ConfigMap",
        "  serviceAccountName: nobody\n  source: {kind: ConfigMap",
    );
    apply_yaml(&client, &ns, &other).await?;
    let failed = wait_state(
        &client,
        &format!("{ns}-other"),
        "Failed",
        Duration::from_secs(30),
    )
    .await
    .with_context(|| controller.logs())?;
    let reason = ready_reason(&failed);
    assert!(
        reason.contains(&format!("system:serviceaccount:{ns}:nobody")),
        "{reason}"
    );
    delete_layer(&client, &format!("{ns}-other")).await;
    delete_layer(&client, &layer).await;
    drop(controller);
    Ok(())
}
