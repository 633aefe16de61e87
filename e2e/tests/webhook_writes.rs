//! What the admission-webhook's ServiceAccount may write (issue #53, item 3). RBAC gives it
//! cluster-wide `patch` on pods and StatefulSets and `create` on Secrets and ConfigMaps, which
//! cannot be narrowed by field or by created name; the chart's ValidatingAdmissionPolicy
//! `<prefix>admission-webhook-writes` narrows them inside kube-apiserver. Checked as the
//! ServiceAccount the chart makes, with dry-run writes (admission runs on them as on real ones,
//! and nothing changes): first that RBAC alone lets it change a pod's image (the hole), then,
//! with the policy, that every write outside its own labels, annotations, certificate Secret
//! and zone-tracker ConfigMap is refused, naming the account, the object and what it may write,
//! while each write the webhook really makes still passes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use strata_e2e::release::Rendered;
use strata_e2e::services::chart_identity;
use strata_e2e::support::policy_refusal as refusal;
use strata_e2e::support::{
    DeleteOnDrop, TestNamespace, apply_yaml, cluster, eventually, kube_client,
};

/// Waits until the policy refuses `write` (policies reach the API server's admission through
/// an informer: until then the hole stays), and returns the refusal's message.
async fn refused_once_active<T, F, Fut>(what: &str, write: F) -> Result<String>
where
    T: std::fmt::Debug,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    eventually(what, Duration::from_secs(30), || async {
        Ok(refusal(write().await, what).ok())
    })
    .await
}

/// Renders the chart as the webhook's identity in `ns` was made (release `ns`, the service
/// alone, `extra` values) and applies its writes policy and binding; they are deleted when the
/// returned guards drop.
fn apply_policy(ns: &str, extra: &[&str]) -> Result<(Rendered, Vec<DeleteOnDrop>)> {
    let mut sets = strata_e2e::release::alone("admission-webhook");
    sets.extend(extra.iter().map(|s| s.to_string()));
    let rendered = Rendered::template(&strata_e2e::chart::helm(), ns, ns, &sets)?;
    let guards = strata_e2e::release::apply_policy(&rendered, "admission-webhook-writes")?;
    Ok((rendered, guards))
}

#[tokio::test]
async fn the_webhook_account_writes_only_its_own_marks_certificate_and_tracker() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "webhook-writes").await?;
    let ns = ns.name.clone();
    let args = ["--lease-namespace", ns.as_str()];
    let kubeconfig = chart_identity(cluster().kubeconfig(), "admission-webhook", &args)?;
    let webhook = kube_client(&kubeconfig).await?;

    // A pod and a StatefulSet as a workload owner made them.
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: target, namespace: {ns}, labels: {{app: target}}}}\nspec:\n  containers: [{{name: main, image: example.invalid/app:1}}]\n"
        ),
    )
    .await?;
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: store, namespace: {ns}}}\nspec:\n  replicas: 0\n  serviceName: store\n  selector: {{matchLabels: {{app: store}}}}\n  template:\n    metadata: {{labels: {{app: store}}}}\n    spec: {{containers: [{{name: main, image: example.invalid/store:1}}]}}\n"
        ),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(webhook.clone(), &ns);
    let sets: Api<StatefulSet> = Api::namespaced(webhook.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(webhook.clone(), &ns);
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let create = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let merge = |v: Value| Patch::Merge(v);
    // Strategic: the container is merged by name, so only its image changes.
    let new_image = || {
        Patch::Strategic(
            json!({"spec": {"containers": [{"name": "main", "image": "evil.invalid/x:1"}]}}),
        )
    };

    // The hole: RBAC alone lets the account change any pod's image.
    pods.patch("target", &dry, &new_image())
        .await
        .context("without the policy, RBAC lets the webhook's account patch a pod's image")?;

    // The chart's policy, rendered as this identity was (same release and namespace).
    let (rendered, _policy) = apply_policy(&ns, &[])?;
    let account = rendered.service_account("admission-webhook")?;
    let user = format!("system:serviceaccount:{ns}:{account}");
    let message = refused_once_active("the policy refuses the image change", || async {
        pods.patch("target", &dry, &new_image()).await
    })
    .await?;
    ensure!(
        message.contains(&format!(
            "admission-webhook ({user}): may not change the spec of pods {ns}/target"
        )),
        "{message}"
    );

    // Pods: its prepare-downscale marks pass; any other label does not.
    pods.patch(
        "target",
        &dry,
        &merge(json!({"metadata": {
            "labels": {"strata.dev/prepared-for-downscale": "true"},
            "annotations": {"strata.dev/prepared-for-downscale-at": "2026-11-28T00:00:00Z"},
        }})),
    )
    .await
    .context("the webhook marks a pod it prepares")?;
    let message = refusal(
        pods.patch(
            "target",
            &dry,
            &merge(json!({"metadata": {"labels": {"app": "other"}}})),
        )
        .await,
        "relabelling a pod",
    )?;
    ensure!(
        message.contains("may change only the labels strata.dev/prepared-for-downscale"),
        "{message}"
    );

    // StatefulSets: the last downscale time and the eviction records pass; a scale or any
    // other annotation does not.
    sets.patch(
        "store",
        &dry,
        &merge(json!({"metadata": {"annotations": {
            "grafana.com/last-downscale": "2026-11-28T00:00:00Z",
            "strata.dev/recent-evictions": "{}",
        }}})),
    )
    .await
    .context("the webhook records a downscale and an eviction")?;
    let message = refusal(
        sets.patch("store", &dry, &merge(json!({"spec": {"replicas": 5}})))
            .await,
        "scaling a StatefulSet",
    )?;
    ensure!(
        message.contains(&format!(
            "may not change the spec of statefulsets {ns}/store"
        )),
        "{message}"
    );
    let message = refusal(
        sets.patch(
            "store",
            &dry,
            &merge(json!({"metadata": {"annotations": {"other": "x"}}})),
        )
        .await,
        "annotating a StatefulSet",
    )?;
    ensure!(
        message.contains("may change only the annotations"),
        "{message}"
    );

    // Secrets: only its certificate Secret, Opaque.
    let certificate = rendered
        .deployment("admission-webhook")?
        .pointer("/spec/template/spec/containers/0/args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--tls-secret-name="))
        .context("the webhook's --tls-secret-name")?
        .to_string();
    let secret = |name: &str, kind: Option<&str>| -> Result<Secret> {
        let mut value = json!({"metadata": {"name": name}, "stringData": {"k": "v"}});
        if let Some(kind) = kind {
            value["type"] = json!(kind);
            value["metadata"]["annotations"] =
                json!({"kubernetes.io/service-account.name": "default"});
        }
        Ok(serde_json::from_value(value)?)
    };
    secrets
        .create(&create, &secret(&certificate, None)?)
        .await
        .context("the webhook writes its certificate Secret")?;
    let message = refusal(
        secrets.create(&create, &secret("other", None)?).await,
        "a Secret of another name",
    )?;
    ensure!(
        message.contains(&format!(
            "may write only its certificate Secret {ns}/{certificate} (type Opaque), not Secret {ns}/other"
        )),
        "{message}"
    );
    let message = refusal(
        secrets
            .create(
                &create,
                &secret(&certificate, Some("kubernetes.io/service-account-token"))?,
            )
            .await,
        "a service-account token under the certificate's name",
    )?;
    ensure!(
        message.contains("of type kubernetes.io/service-account-token"),
        "{message}"
    );

    Ok(())
}

/// With the zone tracker (`useZoneTracker`), the webhook's account may create ConfigMaps in its
/// own namespace only (where the trackers of every namespace live), and RBAC cannot name what
/// is created: the policy keeps it to the trackers' names.
#[tokio::test]
async fn the_zone_tracker_is_the_only_config_map_the_webhook_account_writes() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "webhook-tracker").await?;
    let ns = ns.name.clone();
    let args = ["--lease-namespace", ns.as_str(), "--use-zone-tracker"];
    let kubeconfig = chart_identity(cluster().kubeconfig(), "admission-webhook", &args)?;
    let maps: Api<ConfigMap> = Api::namespaced(kube_client(&kubeconfig).await?, &ns);
    let create = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let map = |name: &str| -> Result<ConfigMap> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name}}))?)
    };
    // The hole: RBAC alone lets it create any ConfigMap.
    maps.create(&create, &map("other")?)
        .await
        .context("without the policy, RBAC lets the webhook's account create any ConfigMap")?;
    let (_, _policy) = apply_policy(&ns, &["admissionWebhook.useZoneTracker=true"])?;
    let message = refused_once_active("the policy refuses another ConfigMap", || async {
        maps.create(&create, &map("other").expect("a ConfigMap"))
            .await
    })
    .await?;
    ensure!(
        message.contains(&format!(
            "may write only the zone-tracker ConfigMaps {ns}/rollout-operator-zone-tracker and {ns}/rollout-operator-zone-tracker-<namespace>, not ConfigMap {ns}/other"
        )),
        "{message}"
    );
    for name in [
        "rollout-operator-zone-tracker",
        "rollout-operator-zone-tracker-loki",
    ] {
        maps.create(&create, &map(name)?)
            .await
            .with_context(|| format!("the webhook writes the zone tracker {name}"))?;
    }
    // Nowhere else: the ConfigMap rights are a Role in its own namespace.
    let elsewhere: Api<ConfigMap> = Api::namespaced(kube_client(&kubeconfig).await?, "default");
    match elsewhere
        .create(&create, &map("rollout-operator-zone-tracker")?)
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => anyhow::bail!("a tracker created outside its namespace: {other:?}"),
    }
    Ok(())
}
