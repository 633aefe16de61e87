//! No layer author can become an account they could not become themselves. A layer applies
//! as the ServiceAccount it names, so:
//! - the addonslayer-validation webhook refuses a layer whose author may not `impersonate` that
//!   account (a SubjectAccessReview of the review's user), naming the user, the account and
//!   the missing right;
//! - without the webhook, the layer-controller still may not act as it: the chart lets it
//!   impersonate accounts only in the namespaces the release lists, so the layer fails naming
//!   the account and applies nothing;
//! - a layer naming an account the author may use, in a listed namespace, deploys.
//!
//! The author is a ServiceAccount `alice` with rights in namespace `team-a` only (plus
//! creating AddonsLayers); the powerful account is `kustomize-controller` in another namespace,
//! standing for `flux-system`. A second tenant, `bob` of `team-b`, has the same rights in his
//! namespace: the release lets layers act in both, and neither team may act as the other's
//! account — by creating a layer or by changing the account of one, with or without the
//! webhook — while each team's own layer deploys into its own namespace only.

use std::time::Duration;

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use strata_e2e::flux::{install_layer_crds, layer_status, ready_reason, source_configmap};
use strata_e2e::plane::free_port;
use strata_e2e::services::{start_admission_webhook, start_layer_service_with};
use strata_e2e::support::{
    DeleteOnDrop, TestNamespace, apply_yaml, cluster, eventually, service_account_kubeconfig,
    service_account_with_role, webhook_configuration,
};

/// An AddonsLayer `<team>-<name>` of this test (its label selects it for the test's
/// controller and webhook) reading ConfigMap `src-<name>` of `source_ns` as `account`.
fn layer(team: &str, name: &str, source_ns: &str, account: &str) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {team}-{name}, labels: {{strata-e2e/suite: {team}}}}}
spec:
  version: 1.0.0
  interval: 1h
  serviceAccountName: {account}
  source: {{kind: ConfigMap, name: src-{name}, namespace: {source_ns}, path: ./}}
"
    )
}

/// [`layer`] reading `src-<name>` of the team's own namespace and naming no account: it acts as
/// the layer-controller itself.
fn without_account(team: &str, name: &str) -> String {
    layer(team, name, team, "deployer").replace("  serviceAccountName: deployer\n", "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_author_cannot_act_as_an_account_they_may_not_impersonate() -> Result<()> {
    let admin = cluster().client().await?;
    let team = TestNamespace::create(&admin, "team-a").await?;
    let system = TestNamespace::create(&admin, "flux-system").await?;
    let team_b = TestNamespace::create(&admin, "team-b").await?;
    let (team, system, team_b) = (team.name.clone(), system.name.clone(), team_b.name.clone());
    install_layer_crds(&admin, &team).await?;

    // The powerful account elsewhere, the team's own deployer, and alice, who may act as
    // team-a's deployer (and, below, create layers, which are cluster-scoped) — not as the
    // layer-controller, whose account lives in team-a too in this test.
    let configmaps = r#"{apiGroups: [""], resources: [configmaps], verbs: [get, list, watch, create, update, patch, delete]}"#;
    let impersonate = r#"{apiGroups: [""], resources: [serviceaccounts], resourceNames: [deployer], verbs: [impersonate]}"#;
    for (ns, account, rule) in [
        (&system, "kustomize-controller", configmaps),
        (&team, "deployer", configmaps),
        (&team, "alice", impersonate),
        (&team_b, "deployer", configmaps),
        (&team_b, "bob", impersonate),
    ] {
        apply_yaml(&admin, ns, &service_account_with_role(ns, account, &[rule])).await?;
    }
    apply_yaml(
        &admin,
        &team,
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {team}-layer-author, labels: {{app.kubernetes.io/instance: {team}}}}}
rules: [{{apiGroups: [strata.dev], resources: [addonslayers], verbs: [get, list, watch, create, update, patch, delete]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {team}-layer-author, labels: {{app.kubernetes.io/instance: {team}}}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {team}-layer-author}}
subjects: [{{kind: ServiceAccount, name: alice, namespace: {team}}}, {{kind: ServiceAccount, name: bob, namespace: {team_b}}}]
"
        ),
    )
    .await?;
    let alice =
        strata_e2e::support::kube_client(&service_account_kubeconfig(&team, "alice")?).await?;
    let bob =
        strata_e2e::support::kube_client(&service_account_kubeconfig(&team_b, "bob")?).await?;

    // The sources: each would create a ConfigMap in its own namespace.
    let settings = |ns: &str, name: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{a: \"1\"}}\n"
        )
    };
    apply_yaml(
        &admin,
        &system,
        &source_configmap(
            &system,
            "escalate",
            &[("cm.yaml", settings(&system, "escalated"))],
        ),
    )
    .await?;
    apply_yaml(
        &admin,
        &team,
        &source_configmap(
            &team,
            "apps",
            &[("cm.yaml", settings(&team, "team-settings"))],
        ),
    )
    .await?;

    apply_yaml(
        &admin,
        &team_b,
        &source_configmap(
            &team_b,
            "b-apps",
            &[("cm.yaml", settings(&team_b, "b-settings"))],
        ),
    )
    .await?;

    // The release lets layers act as accounts of team-a and team-b only.
    let impersonation = [
        format!("layerController.impersonation[0].namespace={team}"),
        format!("layerController.impersonation[1].namespace={team_b}"),
    ];
    let _controller = start_layer_service_with(
        "layer-controller",
        &team,
        &["--health-poll", "500ms"],
        &[&impersonation[0], &impersonation[1]],
    )?;
    let tls = format!("127.0.0.1:{}", free_port()?);
    let _webhook = start_admission_webhook(
        &team,
        &tls,
        &[
            "--tls-extra-names",
            "127.0.0.1",
            "--layer-default-source-namespace",
            &team,
            "--layer-controller-service-account",
            &format!("{team}/layer-controller"),
        ],
    )?;
    // Validation of this test's layers only (AddonsLayers are cluster-scoped; other tests'
    // layers must not depend on this server).
    let name = format!("addonslayer-validation-{team}");
    let mut config = webhook_configuration(
        "ValidatingWebhookConfiguration",
        &name,
        &team,
        "addonslayer-validation",
        &format!("{{url: \"https://{tls}/admission/addonslayer-validation\"}}"),
        "  - apiGroups: [strata.dev]\n    apiVersions: [v1alpha1]\n    operations: [CREATE, UPDATE]\n    resources: [addonslayers]",
    );
    config.push_str(&format!(
        "  objectSelector: {{matchLabels: {{strata-e2e/suite: {team}}}}}\n"
    ));
    apply_yaml(&admin, &team, &config).await?;
    let registered = DeleteOnDrop {
        resource: "validatingwebhookconfiguration",
        name,
    };

    // 1. alice names the powerful account: refused, naming her, the account and the right.
    let escalate = layer(&team, "escalate", &system, "kustomize-controller");
    let refused = eventually(
        "the escalating layer refused",
        Duration::from_secs(60),
        || async {
            match apply_yaml(&alice, &team, &escalate).await {
                Ok(_) => {
                    bail!("alice's layer acting as {system}/kustomize-controller was admitted")
                }
                Err(e) if format!("{e:#}").contains("may not act as") => Ok(Some(format!("{e:#}"))),
                // The server's CA is not injected and trusted yet.
                Err(_) => Ok(None),
            }
        },
    )
    .await?;
    for want in [
        format!("user \"system:serviceaccount:{team}:alice\""),
        format!("ServiceAccount {system}/kustomize-controller"),
        "spec.serviceAccountName".to_string(),
        "\"impersonate\" on serviceaccounts \"kustomize-controller\"".to_string(),
    ] {
        ensure!(refused.contains(&want), "{want:?} missing from: {refused}");
    }

    // 2. An account of team-a: admitted, and deployed as that account.
    apply_yaml(&alice, &team, &layer(&team, "apps", &team, "deployer")).await?;
    let apps = format!("{team}-apps");
    eventually(
        "the team's layer Deployed",
        Duration::from_secs(60),
        || async {
            let status = layer_status(&admin, &apps).await?;
            Ok((status["state"] == "Deployed").then_some(()))
        },
    )
    .await?;
    let team_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), &team);
    ensure!(team_maps.get_opt("team-settings").await?.is_some());

    // 2b. Naming no account is acting as the layer-controller itself (no default here), which
    // alice may not be: refused on create, and on an update that drops the team's account;
    // the stored layer keeps acting as `deployer`.
    let unnamed = without_account(&team, "unnamed");
    let as_controller = format!("ServiceAccount {team}/layer-controller");
    for (what, manifest) in [
        ("a layer naming no account", unnamed),
        (
            "dropping the account of a deployed layer",
            without_account(&team, "apps"),
        ),
    ] {
        ensure!(!manifest.contains("serviceAccountName"), "{manifest}");
        match apply_yaml(&alice, &team, &manifest).await {
            Ok(_) => bail!("{what} was admitted for alice"),
            Err(e) => {
                let e = format!("{e:#}");
                ensure!(
                    e.contains(&as_controller)
                        && e.contains("names no spec.serviceAccountName")
                        && e.contains("\"impersonate\" on serviceaccounts \"layer-controller\""),
                    "{what}: the refusal names the controller's account and the right: {e}"
                );
            }
        }
    }
    // 2c. The other tenant: alice may not move her layer to team-b's account, bob may not
    // name team-a's; each refusal names the user, the account and the right.
    for (what, author, user, manifest, account) in [
        (
            "alice changing her layer's account to team-b's",
            &alice,
            format!("system:serviceaccount:{team}:alice"),
            layer(&team, "apps", &team_b, "deployer"),
            format!("ServiceAccount {team_b}/deployer"),
        ),
        (
            "bob naming team-a's account",
            &bob,
            format!("system:serviceaccount:{team_b}:bob"),
            layer(&team, "b-steal", &team, "deployer"),
            format!("ServiceAccount {team}/deployer"),
        ),
    ] {
        match apply_yaml(author, &team, &manifest).await {
            Ok(_) => bail!("{what}: admitted"),
            Err(e) => {
                let e = format!("{e:#}");
                ensure!(
                    e.contains(&format!("user \"{user}\""))
                        && e.contains(&account)
                        && e.contains("\"impersonate\" on serviceaccounts \"deployer\""),
                    "{what}: {e}"
                );
            }
        }
    }
    // Bob's own layer deploys, into team-b only.
    apply_yaml(&bob, &team, &layer(&team, "b-apps", &team_b, "deployer")).await?;
    let b_apps = format!("{team}-b-apps");
    eventually(
        "team-b's layer Deployed",
        Duration::from_secs(60),
        || async {
            let status = layer_status(&admin, &b_apps).await?;
            Ok((status["state"] == "Deployed").then_some(()))
        },
    )
    .await?;
    let team_b_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), &team_b);
    ensure!(team_b_maps.get_opt("b-settings").await?.is_some());
    ensure!(
        team_maps.get_opt("b-settings").await?.is_none()
            && team_b_maps.get_opt("team-settings").await?.is_none(),
        "a team's layer applied into the other team's namespace"
    );

    let layers: Api<layer_controller::crd::AddonsLayer> = Api::all(admin.clone());
    for refused in ["unnamed", "b-steal"] {
        ensure!(
            layers
                .get_opt(&format!("{team}-{refused}"))
                .await?
                .is_none(),
            "the refused layer {refused} was stored"
        );
    }
    let stored = layers.get(&apps).await?;
    ensure!(
        stored.spec.service_account_name.as_deref() == Some("deployer"),
        "the refused update changed the layer: {:?}",
        stored.spec.service_account_name
    );

    // 3. Without the webhook the layer is stored, but the controller may not act as that
    // account: Failed, naming it, nothing applied.
    drop(registered);
    let escalated = format!("{team}-escalate");
    eventually(
        "the layer admitted without the webhook",
        Duration::from_secs(30),
        || async { Ok(apply_yaml(&alice, &team, &escalate).await.ok().map(drop)) },
    )
    .await?;
    let failed = eventually(
        "the escalating layer Failed",
        Duration::from_secs(60),
        || async {
            let status = layer_status(&admin, &escalated).await?;
            Ok((status["state"] == "Failed").then(|| ready_reason(&status)))
        },
    )
    .await?;
    ensure!(
        failed.contains("kustomize-controller") && failed.contains("impersonate"),
        "the condition names the account and the right: {failed}"
    );
    let system_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), &system);
    ensure!(
        system_maps.get_opt("escalated").await?.is_none(),
        "the layer applied as an account nobody let it use"
    );

    // 4. The same rule inside kube-apiserver, still without the webhook: the chart's
    // ValidatingAdmissionPolicy (bound to this test's layers) refuses alice a layer naming the
    // other team's account, and one naming none; her team's own account still passes.
    let rendered = strata_e2e::release::Rendered::template(
        &strata_e2e::chart::helm(),
        &team,
        &team,
        &[
            format!("layerController.defaultSourceNamespace={team}"),
            format!(
                "layerController.authorPolicy.objectSelector.matchLabels.strata-e2e/suite={team}"
            ),
        ],
    )?;
    let _policy = strata_e2e::release::apply_policy(&rendered, "addonslayer-author")?;
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let as_alice: Api<layer_controller::crd::AddonsLayer> = Api::all(alice.clone());
    let parse = |manifest: &str| -> Result<layer_controller::crd::AddonsLayer> {
        let mut objects = strata_e2e::support::parse_yaml(manifest)?;
        Ok(serde_json::from_value(objects.remove(0))?)
    };
    let again = parse(&layer(
        &team,
        "escalate-again",
        &system,
        "kustomize-controller",
    ))?;
    // A policy takes effect a moment after it is created: dry runs until it refuses.
    let refused = eventually(
        "the policy refusing without the webhook",
        Duration::from_secs(60),
        || async {
            match as_alice.create(&dry_run, &again).await {
                Ok(_) => Ok(None),
                Err(e) => Ok(Some(format!("{e:#}"))),
            }
        },
    )
    .await?;
    for want in [
        "ValidatingAdmissionPolicy".to_string(),
        format!(
            "user \"system:serviceaccount:{team}:alice\" may not act as ServiceAccount {system}/kustomize-controller (spec.serviceAccountName)"
        ),
        "\"impersonate\" on serviceaccounts \"kustomize-controller\"".to_string(),
    ] {
        ensure!(refused.contains(&want), "{want:?} missing from: {refused}");
    }
    let unnamed = parse(&without_account(&team, "unnamed"))?;
    let refused = match as_alice.create(&dry_run, &unnamed).await {
        Ok(_) => bail!("the policy admitted alice's layer naming no account"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        refused.contains(&format!("ServiceAccount {team}/layer-controller (the layer-controller's own account: the layer names no spec.serviceAccountName)")),
        "{refused}"
    );
    as_alice
        .create(
            &dry_run,
            &parse(&layer(&team, "apps-again", &team, "deployer"))?,
        )
        .await
        .map_err(|e| anyhow::anyhow!("the policy refused the team's own account: {e}"))?;
    // The second tenant inside kube-apiserver: bob naming team-a's account, and alice
    // repointing her deployed layer at team-b's, are refused with no webhook in the path.
    let as_bob: Api<layer_controller::crd::AddonsLayer> = Api::all(bob.clone());
    let refused = match as_bob
        .create(
            &dry_run,
            &parse(&layer(&team, "b-steal", &team, "deployer"))?,
        )
        .await
    {
        Ok(_) => bail!("the policy admitted bob's layer acting as {team}/deployer"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        refused.contains(&format!(
            "user \"system:serviceaccount:{team_b}:bob\" may not act as ServiceAccount {team}/deployer"
        )),
        "{refused}"
    );
    let mut moved = as_alice.get(&apps).await?;
    moved.spec.source.namespace = Some(team_b.clone());
    let refused = match as_alice
        .replace(
            &apps,
            &kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            },
            &moved,
        )
        .await
    {
        Ok(_) => bail!("the policy let alice move her layer to {team_b}/deployer"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        refused.contains(&format!("may not act as ServiceAccount {team_b}/deployer")),
        "{refused}"
    );
    for layer in [&escalated, &apps, &b_apps] {
        let _ = cluster()
            .kubectl()
            .args([
                "delete",
                "addonslayer",
                layer,
                "--wait=true",
                "--timeout=60s",
            ])
            .output();
    }
    Ok(())
}
