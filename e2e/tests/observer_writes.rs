//! What the drift-observer's ServiceAccount may write (issue #53, item 4). RBAC gives it
//! `patch` on AddonsLayers (for its heal request) and impersonation of the release's dry-run
//! identity, which holds the layer-controller's apply rights; neither can be narrowed by RBAC
//! to a field or to dry runs. The chart's ValidatingAdmissionPolicies narrow them inside
//! kube-apiserver: `<prefix>drift-observer-writes` lets the observer change only the heal
//! request's annotations of a layer, `<prefix>drift-observer-dry-run` refuses every request of
//! the dry-run identity that is not a dry run. Checked as the ServiceAccount the chart makes:
//! first the holes with RBAC alone, then each refused with the policies, naming the account,
//! the object and what it may do, while what the observer really does still passes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};
use layer_controller::crd::AddonsLayer;
use serde_json::json;
use strata_e2e::flux::install_layer_crds;
use strata_e2e::release::Rendered;
use strata_e2e::services::chart_identity;
use strata_e2e::support::policy_refusal as refusal;
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually, kube_client};

/// kubectl as the observer's account impersonating `user`: (succeeded, stdout + stderr).
fn kubectl_as(kubeconfig: &std::path::Path, user: &str, args: &[&str]) -> Result<(bool, String)> {
    let out = std::process::Command::new(strata_e2e::support::kubectl_binary())
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--as={user}"))
        .args(args)
        .output()?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

#[tokio::test]
async fn the_observer_asks_for_heals_only_and_its_dry_runs_never_write() -> Result<()> {
    let client = cluster().client().await?;
    let test_ns = TestNamespace::create(&client, "observer-writes").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let args = ["--default-source-namespace", ns.as_str()];
    let kubeconfig = chart_identity(cluster().kubeconfig(), "drift-observer", &args)?;
    let observer = kube_client(&kubeconfig).await?;
    let name = format!("{ns}-target");
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {name}, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  serviceAccountName: deployer
  source: {{kind: ConfigMap, name: src, namespace: {ns}, path: ./}}
"
        ),
    )
    .await?;
    let layers: Api<AddonsLayer> = Api::all(observer.clone());
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let relabel = || Patch::Merge(json!({"metadata": {"labels": {"sharding.fluxcd.io/key": "b"}}}));
    let identity = format!("system:serviceaccount:{ns}:drift-observer-dry-run");
    let create_map = |dry_run: bool, name: &str| {
        let mut args = vec!["-n", ns.as_str(), "create", "configmap", name];
        if dry_run {
            args.push("--dry-run=server");
        }
        kubectl_as(&kubeconfig, &identity, &args)
    };

    // The holes: RBAC alone lets the observer move a layer to another shard (a change of spec
    // is the same right, but another test's author policy may be active meanwhile), and its
    // dry-run identity write for real.
    layers
        .patch(&name, &dry, &relabel())
        .await
        .context("without the policy, RBAC lets the observer relabel a layer")?;
    let (written, out) = create_map(false, "before-the-policy")?;
    ensure!(
        written,
        "without the policy the dry-run identity writes: {out}"
    );

    let mut sets = strata_e2e::release::alone("drift-observer");
    sets.push(format!("driftObserver.defaultSourceNamespace={ns}"));
    let rendered = Rendered::template(&strata_e2e::chart::helm(), &ns, &ns, &sets)?;
    let _writes = strata_e2e::release::apply_policy(&rendered, "drift-observer-writes")?;
    let _dry_run = strata_e2e::release::apply_policy(&rendered, "drift-observer-dry-run")?;
    let user = format!(
        "system:serviceaccount:{ns}:{}",
        rendered.service_account("drift-observer")?
    );

    // Policies reach admission through an informer: until then the hole stays. Each refusal
    // is awaited with its own message: the tenancy tests' author policy, active at times,
    // refuses spec changes of every layer too.
    for (what, patch, says) in [
        (
            "clearing the account",
            json!({"spec": {"serviceAccountName": null}}),
            format!("drift-observer ({user}): AddonsLayer {name}: may not change spec"),
        ),
        (
            "repointing the source",
            json!({"spec": {"source": {"name": "elsewhere"}}}),
            "may not change spec".to_string(),
        ),
        (
            "relabelling (moving it to another shard)",
            json!({"metadata": {"labels": {"sharding.fluxcd.io/key": "b"}}}),
            "may not change labels".to_string(),
        ),
        (
            "another annotation",
            json!({"metadata": {"annotations": {"other": "x"}}}),
            "may change only the annotations strata.dev/reconcile-requested-at, strata.dev/traceparent".to_string(),
        ),
        (
            "a finalizer",
            json!({"metadata": {"finalizers": ["example.invalid/hold"]}}),
            "may not change finalizers or owners".to_string(),
        ),
    ] {
        eventually(&format!("{what} refused: {says}"), Duration::from_secs(60), || async {
            let message = refusal(
                layers.patch(&name, &dry, &Patch::Merge(patch.clone())).await,
                what,
            )
            .unwrap_or_default();
            Ok(message.contains(&says).then_some(()))
        })
        .await?;
    }
    // Its heal request passes, for real.
    layers
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "strata.dev/reconcile-requested-at": "2026-11-28T00:00:00Z",
                "strata.dev/traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            }}})),
        )
        .await
        .context("the observer's heal request")?;
    let live = Api::<AddonsLayer>::all(client.clone()).get(&name).await?;
    ensure!(
        live.spec.service_account_name.as_deref() == Some("deployer"),
        "the layer's account is unchanged: {:?}",
        live.spec.service_account_name
    );

    // The dry-run identity: a real write refused, naming it and the object; a dry run passes.
    // Each try creates another ConfigMap: one created before the policy was active would make
    // the next try of the same name fail as a duplicate, not by the policy.
    let tries = std::sync::atomic::AtomicUsize::new(0);
    let (name_tried, out) = eventually(
        "the policy refuses the dry-run identity's real create",
        Duration::from_secs(30),
        || async {
            let n = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let map = format!("after-the-policy-{n}");
            let (written, out) = create_map(false, &map)?;
            Ok((!written).then_some((map, out)))
        },
    )
    .await?;
    ensure!(
        out.contains(&format!(
            "drift-observer dry-run identity ({identity}): makes dry runs only; refused: CREATE of configmaps {ns}/{name_tried}"
        )),
        "{out}"
    );
    let (written, out) = create_map(true, "a-dry-run")?;
    ensure!(written, "a dry run as the identity passes: {out}");
    let (labelled, out) = kubectl_as(
        &kubeconfig,
        &identity,
        &[
            "-n",
            &ns,
            "label",
            "configmap",
            "before-the-policy",
            "taken=yes",
        ],
    )?;
    ensure!(
        !labelled && out.contains("makes dry runs only; refused: UPDATE of configmaps"),
        "{out}"
    );
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    ensure!(
        maps.get_opt("after-the-policy").await?.is_none()
            && maps.get_opt("a-dry-run").await?.is_none()
            && maps
                .get_opt("before-the-policy")
                .await?
                .is_some_and(|m| !m.labels().contains_key("taken")),
        "only the write made before the policy exists, unchanged"
    );
    Ok(())
}
