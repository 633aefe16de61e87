//! The Helm chart installed for real: `helm install` into the local control plane with each
//! service alone and with all four. Every object must be accepted; then each enabled service is
//! started exactly as its rendered Deployment says (command, arguments, environment, with the
//! pod fields filled in) and with its rendered ServiceAccount's identity (a TokenRequest token,
//! never the admin's certificate), so the chart's RBAC is what is exercised. Each becomes ready,
//! takes its Lease and does one job. The all-four case also upgrades and uninstalls.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use layer_controller::crd::AddonsLayer;
use serde_json::{Value, json};
use strata_e2e::chart::{self, SERVICES};
use strata_e2e::flux::{configmap_layer, install_layer_crds};
use strata_e2e::plane::free_port;
use strata_e2e::release::Rendered;
use strata_e2e::services::{ServiceProcess, bin_dir};
use strata_e2e::support::{
    TestNamespace, apply_shipped_crd, apply_yaml, cluster, eventually, http_get, parse_yaml,
    service_account_kubeconfig,
};

fn helm(args: &[&str]) -> Result<String> {
    let out = Command::new(chart::helm())
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster().kubeconfig())
        .output()
        .context("running helm")?;
    if !out.status.success() {
        bail!(
            "helm {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// One installed release in its own namespace.
struct Release {
    name: String,
    ns: TestNamespace,
    enabled: Vec<&'static str>,
}

/// A test that fails half-way must not leave its release behind: its webhook configurations are
/// cluster-wide with `failurePolicy: Fail`, and once its server is gone they would refuse every
/// later test's StatefulSets and ZPDBs (the in-cluster tier failed so once). Best effort; an
/// uninstall the test already made leaves nothing to do.
impl Drop for Release {
    fn drop(&mut self) {
        let _ = Command::new(chart::helm())
            .args(["uninstall", &self.name, "-n", &self.ns.name, "--wait=false"])
            .arg("--kubeconfig")
            .arg(cluster().kubeconfig())
            .output();
    }
}

impl Release {
    /// `helm install` with only `enabled` services (values keys), on free ports, layers of this
    /// test only, and the webhooks called at 127.0.0.1 (the plane has no Service routing).
    async fn install(client: &Client, enabled: &[&'static str], extra: &[&str]) -> Result<Self> {
        let ns = TestNamespace::create(client, "install").await?;
        let name = ns.name.clone();
        let mut sets = vec![
            format!("layerController.layerSelector=strata-e2e/suite={name}"),
            format!("driftObserver.layerSelector=strata-e2e/suite={name}"),
            "global.logFormat=text".to_string(),
        ];
        for (key, _) in SERVICES {
            sets.push(format!("{key}.enabled={}", enabled.contains(&key)));
            sets.push(format!("{key}.ports.admin={}", free_port()?));
        }
        let https = free_port()?;
        sets.push(format!("admissionWebhook.ports.https={https}"));
        sets.push(format!(
            "admissionWebhook.webhooks.url=https://127.0.0.1:{https}"
        ));
        sets.push("admissionWebhook.tls.extraNames={127.0.0.1}".to_string());
        // AddonsLayers are cluster-scoped, so their validation sees every test's layers on this
        // shared plane: while this release's server starts or stops, it must not refuse them.
        sets.push("admissionWebhook.webhooks.addonsLayerValidation.failurePolicy=Ignore".into());
        // Ignore covers a server that cannot be reached, not one that answers "cannot decide"
        // (its RBAC already gone while kube-apiserver still calls it during an uninstall): so
        // this release validates only the layers of its own test.
        sets.push(format!(
            "admissionWebhook.webhooks.addonsLayerValidation.objectSelector.matchLabels.strata-e2e/suite={name}"
        ));
        // The author policy is cluster-wide too: it judges only this test's layers.
        sets.push(format!(
            "layerController.authorPolicy.objectSelector.matchLabels.strata-e2e/suite={name}"
        ));
        let chart_dir = chart::chart_dir();
        let chart_path = chart_dir.to_string_lossy();
        let mut args = vec!["install", &name, chart_path.as_ref(), "-n", &name];
        for set in &sets {
            args.extend(["--set", set.as_str()]);
        }
        args.extend_from_slice(extra);
        helm(&args)?;
        Ok(Self {
            name,
            ns,
            enabled: enabled.to_vec(),
        })
    }

    fn objects(&self) -> Result<Vec<Value>> {
        parse_yaml(&helm(&[
            "get",
            "manifest",
            &self.name,
            "-n",
            &self.ns.name,
        ])?)
    }

    /// Every object of the release exists in the cluster.
    async fn assert_all_accepted(&self, client: &Client) -> Result<usize> {
        let objects = self.objects()?;
        let discovery = kube::discovery::Discovery::new(client.clone())
            .run()
            .await?;
        for obj in &objects {
            let api_version = obj["apiVersion"].as_str().context("apiVersion")?;
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let kind = obj["kind"].as_str().context("kind")?;
            let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
            let (resource, caps) = discovery
                .resolve_gvk(&gvk)
                .with_context(|| format!("{kind} is not served"))?;
            let name = obj["metadata"]["name"].as_str().context("name")?;
            let api: Api<DynamicObject> = match caps.scope {
                kube::discovery::Scope::Namespaced => {
                    Api::namespaced_with(client.clone(), &self.ns.name, &resource)
                }
                kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
            };
            api.get(name)
                .await
                .with_context(|| format!("{kind} {name} of release {}", self.name))?;
        }
        Ok(objects.len())
    }

    /// Starts every enabled service as its rendered Deployment describes, as its ServiceAccount.
    async fn start_services(&self) -> Result<Vec<Started>> {
        let installed = Rendered {
            release: self.name.clone(),
            namespace: self.ns.name.clone(),
            objects: self.objects()?,
        };
        let mut started = Vec::new();
        for (key, service) in SERVICES {
            if !self.enabled.contains(&key) {
                continue;
            }
            started.push(self.start(&installed, service)?);
        }
        Ok(started)
    }

    fn start(&self, installed: &Rendered, service: &str) -> Result<Started> {
        let pod_name = format!("{service}-0");
        let command = installed.container_command(service, &pod_name, &bin_dir())?;
        let mut env = command.env.clone();
        env.push((
            "KUBECONFIG".into(),
            service_account_kubeconfig(&self.ns.name, &command.service_account)?
                .display()
                .to_string(),
        ));
        let admin_port: u16 = command
            .args
            .iter()
            .find_map(|a| a.strip_prefix("--admin-address=:"))
            .context("--admin-address")?
            .parse()?;
        let arg_refs: Vec<&str> = command.args.iter().map(String::as_str).collect();
        let process = ServiceProcess::spawn_with_env_blocking(
            &command.binary,
            &arg_refs,
            &env,
            &std::env::temp_dir().join("strata-e2e-logs"),
        )?;
        Ok(Started {
            process,
            admin: ([127, 0, 0, 1], admin_port).into(),
            pod_name,
            args: command.args,
        })
    }
}

struct Started {
    process: ServiceProcess,
    admin: std::net::SocketAddr,
    pod_name: String,
    args: Vec<String>,
}

/// Ready (/readyz 200) and holding its Lease `<service>-leader` under its pod name.
async fn ready_and_leader(client: &Client, ns: &str, started: &Started) -> Result<()> {
    let name = started.process.name.clone();
    eventually(
        &format!("{name} ready"),
        Duration::from_secs(60),
        || async {
            Ok((http_get(started.admin, "/readyz")
                .await
                .ok()
                .map(|(c, _)| c)
                == Some(200))
            .then_some(()))
        },
    )
    .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let lease = format!("{name}-leader");
    eventually(
        &format!("{name} holds {lease}"),
        Duration::from_secs(60),
        || async {
            let holder = leases
                .get_opt(&lease)
                .await?
                .and_then(|l| l.spec?.holder_identity);
            Ok(holder
                .is_some_and(|h| h.starts_with(&started.pod_name))
                .then_some(()))
        },
    )
    .await
}

/// The smoke layer: one ConfigMap, from a ConfigMap source in the release namespace (found
/// through the chart's `--default-source-namespace`).
fn layer_source(ns: &str) -> String {
    let settings = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: smoke-settings, namespace: {ns}}}\ndata: {{a: \"1\"}}\n"
    );
    configmap_layer(ns, "smoke", "60s", &[("settings.yaml", settings)])
}

async fn layer_condition(client: &Client, layer: &str, type_: &str) -> Result<Option<Value>> {
    let api: Api<AddonsLayer> = Api::all(client.clone());
    let Some(layer) = api.get_opt(layer).await? else {
        return Ok(None);
    };
    let status = serde_json::to_value(layer.status.unwrap_or_default())?;
    Ok(status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_).cloned()))
}

/// layer-controller's job: a layer from a ConfigMap source is applied and Ready.
async fn smoke_layer_controller(client: &Client, ns: &str) -> Result<()> {
    apply_yaml(client, ns, &layer_source(ns)).await?;
    let layer = format!("{ns}-smoke");
    eventually("the smoke layer Ready", Duration::from_secs(60), || async {
        Ok(layer_condition(client, &layer, "Ready")
            .await?
            .filter(|c| c["status"] == "True")
            .map(|_| ()))
    })
    .await?;
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    ensure!(
        maps.get_opt("smoke-settings").await?.is_some(),
        "the layer's ConfigMap"
    );
    Ok(())
}

/// drift-observer's job: it checks the deployed layer and reports (no drift) in its status.
async fn smoke_drift_observer(client: &Client, ns: &str) -> Result<()> {
    let layer = format!("{ns}-smoke");
    eventually(
        "the observer's Drifted condition",
        Duration::from_secs(60),
        || async {
            Ok(layer_condition(client, &layer, "Drifted")
                .await?
                .filter(|c| c["status"] == "False")
                .map(|_| ()))
        },
    )
    .await
}

fn zone(name: &str, replicas: i32, labels: &str, annotations: &str) -> String {
    strata_e2e::support::group_stateful_set(name, "store", replicas, labels, annotations)
}

async fn replicas(api: &Api<StatefulSet>, name: &str) -> Result<i32> {
    Ok(api
        .get(name)
        .await?
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(1))
}

/// rollout-operator's job: a follower zone follows its leader's downscale.
async fn smoke_rollout_operator(client: &Client, ns: &str) -> Result<()> {
    apply_yaml(client, ns, &zone("store-zone-a", 2, "", "")).await?;
    apply_yaml(
        client,
        ns,
        &zone(
            "store-zone-b",
            2,
            "",
            r#""grafana.com/rollout-downscale-leader": store-zone-a"#,
        ),
    )
    .await?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    sts.patch(
        "store-zone-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await?;
    eventually("zone b follows zone a", Duration::from_secs(30), || async {
        Ok((replicas(&sts, "store-zone-b").await? == 1).then_some(()))
    })
    .await
}

/// admission-webhook's job: its CA is injected, kube-apiserver calls it and a labelled
/// StatefulSet's downscale is refused in an opted-in namespace — and only there.
async fn smoke_admission_webhook(client: &Client, release_ns: &str) -> Result<TestNamespace> {
    let configs: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    let config = format!("no-downscale-{release_ns}");
    eventually("the CA injected", Duration::from_secs(60), || async {
        let c = configs.get(&config).await?;
        Ok(c.webhooks
            .and_then(|w| w.into_iter().next())
            .and_then(|w| w.client_config.ca_bundle)
            .filter(|b| !b.0.is_empty())
            .map(|_| ()))
    })
    .await?;
    let guarded = TestNamespace::create(client, "guarded").await?;
    let label = cluster()
        .kubectl()
        .args([
            "label",
            "namespace",
            &guarded.name,
            "strata.dev/admission-webhook=enabled",
        ])
        .output()?;
    ensure!(
        label.status.success(),
        "{}",
        String::from_utf8_lossy(&label.stderr)
    );
    let guarded_sts = zone("guarded", 2, r#", "grafana.com/no-downscale": "true""#, "");
    for ns in [guarded.name.as_str(), release_ns] {
        apply_yaml(client, ns, &guarded_sts).await?;
    }
    let downscale = |ns: String| async move {
        let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
        sts.patch(
            "guarded",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
    };
    // The injected CA reaches the API server's webhook client a moment after the write.
    let refused = eventually("the downscale refused", Duration::from_secs(30), || async {
        match downscale(guarded.name.clone()).await {
            Err(kube::Error::Api(e)) if e.message.contains("grafana.com/no-downscale=true") => {
                Ok(Some(e.message))
            }
            // Until the API server trusts the injected CA, calls fail (failurePolicy Fail).
            Err(e) => bail!("not refused by the webhook yet: {e}"),
            Ok(_) => bail!("a downscale of a no-downscale StatefulSet was allowed"),
        }
    })
    .await?;
    ensure!(
        refused.contains("grafana.com/no-downscale=true"),
        "{refused}"
    );
    // The release namespace never opts in: the same downscale goes through there.
    downscale(release_ns.to_string())
        .await
        .context("downscale outside the opted-in namespaces")?;
    Ok(guarded)
}

/// With the webhook server stopped (its configurations still installed, failurePolicy Fail),
/// nothing outside the opted-in namespaces notices: a Deployment elsewhere scales and rolls
/// out, and a pod there is evicted (what a node drain does); the guard itself still holds.
async fn server_stopped_blocks_only_opted_in(
    client: &Client,
    guarded: &TestNamespace,
) -> Result<()> {
    let other = TestNamespace::create(client, "unguarded").await?;
    let deployment = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: x}]}
";
    apply_yaml(client, &other.name, deployment).await?;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &other.name);
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1, "template": {"metadata": {"annotations": {"rollout": "2"}}}}})),
        )
        .await
        .context("a Deployment outside the opted-in namespaces rolls out")?;
    apply_yaml(
        client,
        &other.name,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: drained}\nspec: {containers: [{name: c, image: x}]}\n",
    )
    .await?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &other.name);
    pods.evict("drained", &kube::api::EvictParams::default())
        .await
        .context("evicting a pod outside the opted-in namespaces")?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &guarded.name);
    let refused = sts
        .patch(
            "guarded",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await;
    ensure!(
        refused.is_err(),
        "the guard must hold while its server is down (Fail)"
    );
    Ok(())
}

/// Tears a release down in the order that never blocks anyone: its layer deleted (while its
/// layer-controller still runs to remove the finalizer), the release uninstalled (while the
/// webhook server still answers), then the processes stopped.
async fn teardown(client: &Client, release: &Release, started: &mut [Started]) -> Result<()> {
    let ns = &release.ns.name;
    if release.enabled.contains(&"layerController") {
        let layer = format!("{ns}-smoke");
        let _ = cluster()
            .kubectl()
            .args([
                "delete",
                "addonslayer",
                &layer,
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
        let api: Api<AddonsLayer> = Api::all(client.clone());
        eventually("the smoke layer gone", Duration::from_secs(60), || async {
            Ok(api.get_opt(&layer).await?.is_none().then_some(()))
        })
        .await?;
    }
    helm(&["uninstall", &release.name, "-n", ns, "--wait"])?;
    for s in started {
        // A process already stopped by the test has been reaped: never signal its pid again.
        if s.process.try_exit().is_none() {
            s.process.terminate_blocking();
        }
    }
    Ok(())
}

async fn prepare_crds(client: &Client, ns: &str) -> Result<()> {
    install_layer_crds(client, ns).await?;
    for file in [
        "zone-aware-pod-disruption-budget.yaml",
        "replica-templates.yaml",
    ] {
        apply_shipped_crd(client, ns, file).await?;
    }
    Ok(())
}

async fn alone(key: &'static str) -> Result<()> {
    let client = cluster().client().await?;
    let crd_ns = TestNamespace::create(&client, "install-crds").await?;
    prepare_crds(&client, &crd_ns.name).await?;
    let release = Release::install(&client, &[key], &["--set", "crds.enabled=false"]).await?;
    let count = release.assert_all_accepted(&client).await?;
    ensure!(count >= 6, "{count} objects");
    let mut started = release.start_services().await?;
    ensure!(started.len() == 1);
    let ns = release.ns.name.clone();
    ready_and_leader(&client, &ns, &started[0]).await?;
    match key {
        "layerController" => smoke_layer_controller(&client, &ns).await?,
        "rolloutOperator" => smoke_rollout_operator(&client, &ns).await?,
        "admissionWebhook" => {
            let guarded = smoke_admission_webhook(&client, &ns).await?;
            started[0].process.terminate_blocking();
            server_stopped_blocks_only_opted_in(&client, &guarded).await?;
        }
        // Alone, the observer has no deployed layer to check: it is ready, leads, and reads
        // layers (its watch is what /readyz waits for); the all-four case checks a layer.
        _ => {}
    }
    teardown(&client, &release, &mut started).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layer_controller_alone() -> Result<()> {
    alone("layerController").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_observer_alone() -> Result<()> {
    alone("driftObserver").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_operator_alone() -> Result<()> {
    alone("rolloutOperator").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_webhook_alone() -> Result<()> {
    alone("admissionWebhook").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_four_install_upgrade_and_uninstall_keeping_the_crds() -> Result<()> {
    let client = cluster().client().await?;
    let crd_ns = TestNamespace::create(&client, "install-crds").await?;
    // Flux's source CRDs are not the chart's; the chart's own CRDs may already be there
    // (other tests apply them), so this release adopts them.
    prepare_crds(&client, &crd_ns.name).await?;
    let all: Vec<&'static str> = SERVICES.iter().map(|(k, _)| *k).collect();
    let release = Release::install(&client, &all, &["--take-ownership"]).await?;
    let ns = release.ns.name.clone();
    let objects = release.objects()?;
    ensure!(
        objects
            .iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
            .count()
            == 3,
        "the CRDs are part of the release"
    );
    release.assert_all_accepted(&client).await?;
    let mut started = release.start_services().await?;
    ensure!(started.len() == 4);
    for s in &started {
        ready_and_leader(&client, &ns, s).await?;
    }
    smoke_layer_controller(&client, &ns).await?;
    smoke_drift_observer(&client, &ns).await?;
    smoke_rollout_operator(&client, &ns).await?;
    drop(smoke_admission_webhook(&client, &ns).await?);

    // Upgrade with a changed value: the Deployment's arguments change, and the CA the server
    // injected survives helm's three-way merge.
    let chart_dir = chart::chart_dir();
    helm(&[
        "upgrade",
        &release.name,
        chart_dir.to_str().unwrap(),
        "-n",
        &ns,
        "--reuse-values",
        "--set",
        "layerController.syncPeriod=2m",
    ])?;
    let upgraded = release.objects()?;
    let args = upgraded
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "layer-controller")
        .map(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].clone())
        .context("layer-controller Deployment after upgrade")?;
    ensure!(
        args.as_array()
            .unwrap()
            .contains(&json!("--sync-period=2m")),
        "{args}"
    );
    let before: Vec<&String> = started[0].args.iter().collect();
    ensure!(
        before.iter().any(|a| *a == "--sync-period=1m"),
        "{before:?}"
    );
    let live: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), &ns);
    let live_args = live
        .get("layer-controller")
        .await?
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap_or_default();
    ensure!(
        live_args.contains(&"--sync-period=2m".to_string()),
        "{live_args:?}"
    );
    drop(
        smoke_admission_webhook(&client, &ns)
            .await
            .context("after the upgrade")?,
    );

    teardown(&client, &release, &mut started).await?;
    ensure!(
        live.get_opt("layer-controller").await?.is_none(),
        "uninstalled"
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    for crd in [
        "addonslayers.strata.dev",
        "zoneawarepoddisruptionbudgets.rollout-operator.grafana.com",
        "replicatemplates.rollout-operator.grafana.com",
    ] {
        ensure!(
            crds.get_opt(crd).await?.is_some(),
            "{crd} kept after uninstall"
        );
    }
    Ok(())
}

/// RBAC narrowed by the chart's own value: the layer may apply Secrets only, so its ConfigMap
/// is refused by the API server, and the layer says so (Failed, the forbidden call named)
/// instead of hanging; nothing else is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_beyond_the_apply_role_fails_naming_the_forbidden_call() -> Result<()> {
    let client = cluster().client().await?;
    let crd_ns = TestNamespace::create(&client, "install-crds").await?;
    prepare_crds(&client, &crd_ns.name).await?;
    let secrets_only = r#"layerController.applyRules=[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list","watch","create","patch","update","delete"]}]"#;
    let release = Release::install(
        &client,
        &["layerController"],
        &["--set", "crds.enabled=false", "--set-json", secrets_only],
    )
    .await?;
    let ns = release.ns.name.clone();
    let mut started = release.start_services().await?;
    ready_and_leader(&client, &ns, &started[0]).await?;
    apply_yaml(&client, &ns, &layer_source(&ns)).await?;
    let layer = format!("{ns}-smoke");
    let ready = eventually("the layer refused", Duration::from_secs(60), || async {
        Ok(layer_condition(&client, &layer, "Ready")
            .await?
            .filter(|c| {
                c["status"] == "False"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("forbidden"))
            }))
    })
    .await?;
    let message = ready["message"].as_str().unwrap_or_default();
    ensure!(
        message.contains("configmaps") && message.contains("smoke-settings"),
        "the refused object is named: {message}"
    );
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    ensure!(
        maps.get_opt("smoke-settings").await?.is_none(),
        "nothing applied"
    );
    teardown(&client, &release, &mut started).await
}
