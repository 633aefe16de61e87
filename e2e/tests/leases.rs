//! Leader Leases: each service, as the ServiceAccount the chart makes for it, may read and renew
//! its own Lease (`<service>-leader`) and write no other, so a compromised service cannot take
//! another's Lease and stall it (issue #53, item 5). Creating a Lease cannot be narrowed by name in RBAC; that
//! is in docs/security.md's threat model.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use anyhow::{Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use strata_e2e::services::{SERVICES, chart_identity_with};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, kube_client};

#[tokio::test]
async fn each_service_may_touch_only_its_own_lease() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "leases").await?;
    // Every service's Lease exists, as once each has run.
    for service in SERVICES {
        apply_yaml(
            &client,
            &ns.name,
            &format!(
                "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {service}-leader}}\nspec: {{holderIdentity: {service}-0}}\n"
            ),
        )
        .await?;
    }
    for service in SERVICES {
        // The layer-controller's default `applyRules` grant every resource (it deploys whatever
        // layers hold), Leases included: its Lease boundary holds once they are narrowed, as
        // docs/security.md asks of any install.
        let narrowed: &[&str] = if service == "layer-controller" {
            &[
                "layerController.applyRules[0].apiGroups={apps}",
                "layerController.applyRules[0].resources={deployments}",
                "layerController.applyRules[0].verbs={get}",
            ]
        } else {
            &[]
        };
        let kubeconfig = chart_identity_with(
            cluster().kubeconfig(),
            service,
            // (The rollout-operator's Role is in the namespace it watches.)
            &["--lease-namespace", &ns.name, "--watch-namespace", &ns.name],
            narrowed,
        )?;
        let leases: Api<Lease> = Api::namespaced(kube_client(&kubeconfig).await?, &ns.name);
        for other in SERVICES {
            let lease = format!("{other}-leader");
            let read = leases.get(&lease).await;
            let renewed = leases
                .patch(
                    &lease,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"holderIdentity": format!("{service}-x")}})),
                )
                .await;
            if other == service {
                ensure!(
                    read.is_ok(),
                    "{service} cannot read its own Lease: {read:?}"
                );
                ensure!(
                    renewed.is_ok(),
                    "{service} cannot renew its own Lease: {renewed:?}"
                );
            } else {
                // Reading is not the threat (the drift-observer reads every object it
                // compares); writing is: no service may take another's Lease.
                match renewed {
                    Err(kube::Error::Api(e)) if e.code == 403 => {}
                    outcome => anyhow::bail!("{service} took {other}'s Lease: {outcome:?}"),
                }
            }
        }
    }
    // No Lease changed hands but to its own service.
    let admin: Api<Lease> = Api::namespaced(client, &ns.name);
    for service in SERVICES {
        let holder = admin
            .get(&format!("{service}-leader"))
            .await?
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        ensure!(
            holder == format!("{service}-x"),
            "{service}-leader is held by {holder}"
        );
    }
    Ok(())
}

/// With the chart's default `applyRules` (every resource, Leases included) RBAC lets the
/// layer-controller renew the other services' Leases; the chart's ValidatingAdmissionPolicy
/// `<prefix>layer-controller-leases` keeps it to its own in the release namespace, naming the
/// account, the Lease and the ones it may write. Leases elsewhere, as layers ship them, pass.
#[tokio::test]
async fn the_layer_controller_with_default_rights_takes_no_other_lease() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "leases-default").await?;
    let elsewhere = TestNamespace::create(&client, "leases-shipped").await?;
    for (namespace, name) in [
        (&ns.name, "layer-controller-leader"),
        (&ns.name, "drift-observer-leader"),
        (&elsewhere.name, "shipped-by-a-layer"),
    ] {
        apply_yaml(
            &client,
            namespace,
            &format!(
                "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {name}}}\nspec: {{holderIdentity: someone}}\n"
            ),
        )
        .await?;
    }
    let kubeconfig = chart_identity_with(
        cluster().kubeconfig(),
        "layer-controller",
        &["--lease-namespace", &ns.name],
        &[],
    )?;
    let controller = kube_client(&kubeconfig).await?;
    let leases: Api<Lease> = Api::namespaced(controller.clone(), &ns.name);
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let take = || Patch::Merge(json!({"spec": {"holderIdentity": "layer-controller-x"}}));
    // The hole: RBAC alone.
    leases
        .patch("drift-observer-leader", &dry, &take())
        .await
        .map_err(|e| anyhow::anyhow!("without the policy the default rights renew it: {e}"))?;
    let sets = strata_e2e::release::alone("layer-controller");
    let rendered = strata_e2e::release::Rendered::template(
        &strata_e2e::chart::helm(),
        &ns.name,
        &ns.name,
        &sets,
    )?;
    let _policy = strata_e2e::release::apply_policy(&rendered, "layer-controller-leases")?;
    let user = format!("system:serviceaccount:{}:layer-controller", ns.name);
    let message = strata_e2e::support::eventually(
        "the policy refuses another service's Lease",
        std::time::Duration::from_secs(30),
        || async {
            Ok(
                match leases.patch("drift-observer-leader", &dry, &take()).await {
                    Err(kube::Error::Api(e)) if e.code == 403 => Some(e.message),
                    _ => None,
                },
            )
        },
    )
    .await?;
    ensure!(
        message.contains(&format!(
            "layer-controller ({user}): may write only its own Leases in {ns} (layer-controller-leader), not Lease {ns}/drift-observer-leader",
            ns = ns.name
        )),
        "{message}"
    );
    leases
        .patch("layer-controller-leader", &dry, &take())
        .await
        .map_err(|e| anyhow::anyhow!("its own Lease: {e}"))?;
    Api::<Lease>::namespaced(controller, &elsewhere.name)
        .patch("shipped-by-a-layer", &dry, &take())
        .await
        .map_err(|e| anyhow::anyhow!("a Lease a layer ships elsewhere: {e}"))?;
    Ok(())
}
