//! The in-cluster tier (DESIGN.md §5): the chart installed with `helm install` onto the plane's
//! real node, its pods running the images `scripts/images.sh` builds, kube-apiserver calling
//! every webhook through the chart's Service, each service acting with the token kubelet
//! mounts. Needs `strata-plane up --real-node` (scripts/with-plane.sh, `make e2e`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use strata_e2e::in_cluster::{
    Release, SERVICES, WEBHOOK_OPT_IN, container_processes, node_namespace, pod_ip, recorded_calls,
    serial, test_pod_image,
};
use strata_e2e::node::NODE_NAME;
use strata_e2e::rollout_watch;
use strata_e2e::support::{apply_yaml, cluster, eventually};

async fn client() -> Client {
    cluster().client().await.expect("client")
}

/// What kube-apiserver answered a write that an admission webhook refused: its message.
async fn refused(ns: &str, yaml: &str) -> Result<String> {
    let client = client().await;
    match apply_yaml(&client, ns, yaml).await {
        Ok(_) => bail!("the write was admitted:\n{yaml}"),
        Err(e) => Ok(format!("{e:#}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_on_the_real_node_as_a_user_installs_it() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let release = Release::install(&client, &[]).await?;
    let ns = release.namespace().to_string();

    // Every service's pods run on the real node, from our images.
    for service in SERVICES {
        let pods = release.pods(&client, service).await?;
        ensure!(pods.len() == 2, "{service}: {} pods, want 2", pods.len());
        for pod in &pods {
            let spec = pod.spec.as_ref().unwrap();
            ensure!(
                spec.node_name.as_deref() == Some(NODE_NAME),
                "{} runs on {:?}",
                pod.name_any(),
                spec.node_name
            );
            let image = &spec.containers[0].image.clone().unwrap_or_default();
            ensure!(
                image.starts_with(&format!("localhost/strata/{service}:")),
                "{}: image {image}",
                pod.name_any()
            );
        }
    }

    // As the kernel sees each container: the chart's numeric non-root user, no capability, no
    // way to gain privileges, a read-only root filesystem.
    let processes = container_processes(&ns)?;
    ensure!(
        processes.len() == 8,
        "{} containers running in {ns}, want 8: {processes:?}",
        processes.len()
    );
    for p in &processes {
        let uid = p.status_field("Uid")?;
        ensure!(uid == "65532 65532 65532 65532", "{}: Uid {uid}", p.pod);
        let gid = p.status_field("Gid")?;
        ensure!(gid == "65532 65532 65532 65532", "{}: Gid {gid}", p.pod);
        for caps in ["CapEff", "CapPrm", "CapBnd"] {
            let value = p.status_field(caps)?;
            ensure!(
                value.chars().all(|c| c == '0'),
                "{}/{}: {caps} {value}",
                p.pod,
                p.container
            );
        }
        ensure!(
            p.status_field("NoNewPrivs")? == "1",
            "{}: privileges can be gained",
            p.pod
        );
        let root = p.root_mount_options()?;
        ensure!(
            root.split(',').any(|o| o == "ro"),
            "{}: root filesystem mounted {root}",
            p.pod
        );
    }

    // Every webhook configuration of the release sends kube-apiserver to the chart's Service,
    // with the CA the server injected.
    let mut configured = BTreeMap::new();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for c in validating.list(&ListParams::default()).await?.items {
        for w in c.webhooks.unwrap_or_default() {
            configured.insert(w.name.clone(), w.client_config);
        }
    }
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    for c in mutating.list(&ListParams::default()).await?.items {
        for w in c.webhooks.unwrap_or_default() {
            configured.insert(w.name.clone(), w.client_config);
        }
    }
    for hook in [
        "no-downscale",
        "prepare-downscale",
        "pod-eviction",
        "zpdb-validation",
        "addonslayer-validation",
    ] {
        let name = format!("{hook}-{ns}.strata.dev");
        let config = configured
            .get(&name)
            .with_context(|| format!("webhook {name} not configured"))?;
        ensure!(config.url.is_none(), "{name} is called at a URL");
        let service = config.service.as_ref().context("no service")?;
        ensure!(
            service.name == "admission-webhook" && service.namespace == ns,
            "{name}: service {}/{}",
            service.namespace,
            service.name
        );
        ensure!(
            config.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty()),
            "{name}: no caBundle injected"
        );
    }

    // kube-apiserver calls them through that Service: each refusal below is the webhook's.
    let guarded = node_namespace(&client, "ic-guarded", &[WEBHOOK_OPT_IN]).await?;
    let g = &guarded.name;
    let message = refused(
        g,
        &format!(
            "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {g}-self}}
spec:
  version: 1.0.0
  source: {{kind: ConfigMap, name: src, namespace: {g}, path: ./}}
  prereqs: {{dependsOn: [\"{g}-self@1.0.0\"]}}
"
        ),
    )
    .await?;
    ensure!(
        message.contains(&format!("addonslayer-validation-{ns}.strata.dev"))
            && message.contains("a layer cannot depend on itself"),
        "{message}"
    );
    let message = refused(
        g,
        "apiVersion: rollout-operator.grafana.com/v1
kind: ZoneAwarePodDisruptionBudget
metadata: {name: both}
spec:
  maxUnavailable: 1
  maxUnavailablePercentage: 50
  selector: {matchLabels: {rollout-group: x}}
",
    )
    .await?;
    ensure!(
        message.contains(&format!("zpdb-validation-{ns}.strata.dev")),
        "{message}"
    );
    apply_yaml(
        &client,
        g,
        &format!(
            "apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: guarded, labels: {{grafana.com/no-downscale: \"true\"}}}}
spec:
  replicas: 2
  serviceName: guarded
  selector: {{matchLabels: {{name: guarded}}}}
  template:
    metadata: {{labels: {{name: guarded}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{{name: app, image: {image}, readinessProbe: {{httpGet: {{path: /ready, port: 8080}}, periodSeconds: 1}}}}]
",
            image = test_pod_image()
        ),
    )
    .await?;
    let out = cluster()
        .kubectl()
        .args(["-n", g, "scale", "statefulset", "guarded", "--replicas=1"])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success()
            && stderr.contains(&format!("no-downscale-{ns}.strata.dev"))
            && stderr.contains("grafana.com/no-downscale"),
        "downscale of a no-downscale StatefulSet: {stderr}"
    );

    // Each service acts with the token kubelet mounted into its pod: kube-apiserver's audit log
    // names the pod a token was bound to, for requests of each service's ServiceAccount.
    let audit = cluster().audit_log().context("the plane's audit log")?;
    let mut pods_by_service: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for service in SERVICES {
        let names = release
            .pods(&client, service)
            .await?
            .iter()
            .map(|p| p.name_any())
            .collect();
        pods_by_service.insert(service, names);
    }
    eventually(
        "requests of every service bound to one of its pods in the audit log",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&audit)?;
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            for line in text.lines() {
                let Ok(event) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                for service in SERVICES {
                    if event["user"]["username"] != format!("system:serviceaccount:{ns}:{service}")
                    {
                        continue;
                    }
                    let pod = event["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
                        .as_str()
                        .unwrap_or_default();
                    if pods_by_service[service].contains(pod) {
                        seen.insert(service);
                    }
                }
            }
            Ok((seen.len() == SERVICES.len()).then_some(()))
        },
    )
    .await?;
    refusals_as_the_mounted_tokens(&client, &ns, g).await
}

/// A client acting with `token` (as a pod's mounted one), impersonating `as_user` if given.
async fn token_client(token: &str, as_user: Option<&str>) -> Result<Client> {
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(cluster().kubeconfig())?,
        &Default::default(),
    )
    .await?;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_string().into()),
        impersonate: as_user.map(str::to_string),
        ..Default::default()
    };
    Ok(Client::try_from(config)?)
}

/// The boundaries of docs/security.md, each refused for a token kubelet mounted into a real pod
/// (read through the container's own root, as a process that took over the container would):
/// the admission-webhook's and the drift-observer's write policies, the observer's dry-run
/// identity, every service's hold on the other services' Leases, the rollout-operator outside
/// its namespace and the layer-controller's impersonation outside the listed namespaces.
async fn refusals_as_the_mounted_tokens(admin: &Client, ns: &str, elsewhere: &str) -> Result<()> {
    let mut tokens: BTreeMap<&str, String> = BTreeMap::new();
    for process in container_processes(ns)? {
        let Some(service) = SERVICES.iter().find(|s| process.pod.starts_with(*s)) else {
            continue;
        };
        let path = format!(
            "/proc/{}/root/var/run/secrets/kubernetes.io/serviceaccount/token",
            process.pid
        );
        let token = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        tokens.insert(service, token.trim().to_string());
    }
    ensure!(
        tokens.len() == SERVICES.len(),
        "mounted tokens: {:?}",
        tokens.keys()
    );
    let dry = kube::api::PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let merge = |v: Value| kube::api::Patch::Merge(v);
    let refusal = |outcome: kube::Result<Value>, what: &str| -> Result<(u16, String)> {
        match outcome {
            Err(kube::Error::Api(e)) => Ok((e.code, e.message)),
            other => bail!("{what}: not refused: {other:?}"),
        }
    };
    let as_value = |r: kube::Result<_>| {
        r.map(|o: kube::api::DynamicObject| serde_json::to_value(o).unwrap_or_default())
    };
    let user = |service: &str| format!("system:serviceaccount:{ns}:{service}");

    // The admission-webhook changing another pod's image.
    let victim = Api::<Pod>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|p| p.name_any().starts_with("layer-controller"))
        .context("a layer-controller pod")?
        .name_any();
    let pods = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        token_client(&tokens["admission-webhook"], None).await?,
        ns,
        &kube::core::ApiResource::erase::<Pod>(&()),
    );
    let (code, message) = refusal(
        as_value(
            pods.patch(
                &victim,
                &dry,
                // Strategic: the container is merged by name, so only its image changes.
                &kube::api::Patch::Strategic(json!({"spec": {"containers": [{"name": "layer-controller", "image": "evil.invalid/x:1"}]}})),
            )
            .await,
        ),
        "the webhook's token changing a pod's image",
    )?;
    ensure!(
        code == 403
            && message.contains(&format!(
                "admission-webhook ({}): may not change the spec of pods",
                user("admission-webhook")
            )),
        "{code}: {message}"
    );

    // The drift-observer rewriting a layer, and writing for real as its dry-run identity.
    let layer = format!("{ns}-token-target");
    apply_yaml(
        admin,
        ns,
        &format!(
            "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {layer}}}
spec:
  version: 1.0.0
  serviceAccountName: deployer
  source: {{kind: ConfigMap, name: absent, namespace: {ns}, path: ./}}
"
        ),
    )
    .await?;
    let layers = kube::Api::<kube::api::DynamicObject>::all_with(
        token_client(&tokens["drift-observer"], None).await?,
        &kube::core::ApiResource::erase::<layer_controller::crd::AddonsLayer>(&()),
    );
    // A relabel (into another shard): a change of spec would be refused by the author policy
    // too, and its message could come first.
    let (code, message) = refusal(
        as_value(
            layers
                .patch(
                    &layer,
                    &dry,
                    &merge(json!({"metadata": {"labels": {"sharding.fluxcd.io/key": "b"}}})),
                )
                .await,
        ),
        "the observer's token moving a layer to another shard",
    )?;
    let _ = kube::Api::<layer_controller::crd::AddonsLayer>::all(admin.clone())
        .delete(&layer, &Default::default())
        .await;
    ensure!(
        code == 403
            && message.contains(&format!(
                "drift-observer ({}): AddonsLayer {layer}: may not change labels",
                user("drift-observer")
            )),
        "{code}: {message}"
    );
    let as_dry_run = token_client(
        &tokens["drift-observer"],
        Some(&user("drift-observer-dry-run")),
    )
    .await?;
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(as_dry_run, ns);
    let created = maps
        .create(
            &Default::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "written-by-the-dry-run-identity"}}),
            )?,
        )
        .await;
    match created {
        Err(kube::Error::Api(e)) if e.message.contains("makes dry runs only") => {}
        other => bail!("the observer's dry-run identity wrote for real: {other:?}"),
    }

    // Every service renewing another's Lease.
    for (service, token) in &tokens {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(token_client(token, None).await?, ns);
        for other in SERVICES.iter().filter(|o| *o != service) {
            match leases
                .patch(
                    &format!("{other}-leader"),
                    &dry,
                    &merge(json!({"spec": {"holderIdentity": "taken"}})),
                )
                .await
            {
                Err(kube::Error::Api(e)) if e.code == 403 => {}
                other_outcome => {
                    bail!("{service}'s token renewing {other}-leader: {other_outcome:?}")
                }
            }
        }
    }

    // The rollout-operator deleting a pod outside its namespace; the layer-controller acting as
    // an account of a namespace the release does not list.
    let outside: Api<Pod> = Api::namespaced(
        token_client(&tokens["rollout-operator"], None).await?,
        elsewhere,
    );
    match outside.list(&ListParams::default()).await {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => bail!("the rollout-operator's token listed pods of {elsewhere}: {other:?}"),
    }
    let impersonating = token_client(
        &tokens["layer-controller"],
        Some("system:serviceaccount:kube-system:default"),
    )
    .await?;
    match Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(impersonating, "kube-system")
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("impersonate") => {}
        other => bail!("the layer-controller's token impersonated kube-system/default: {other:?}"),
    }
    Ok(())
}

/// A layer deployed by the in-cluster layer-controller, and a hand edit of what it applied
/// reported by the in-cluster drift-observer and healed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_deploys_and_its_drift_heals_in_cluster() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let release = Release::install(&client, &[]).await?;
    let ns = release.namespace().to_string();
    let target = node_namespace(&client, "ic-layer", &[]).await?;
    let t = &target.name;
    let layer = format!("{t}-app");
    let settings = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {t}}}\ndata: {{retention: 30d}}\n"
    );
    let body: String = settings.lines().map(|l| format!("    {l}\n")).collect();
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1
kind: ConfigMap
metadata: {{name: src-app, namespace: {ns}}}
data:
  settings.yaml: |
{body}---
apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {layer}}}
spec:
  version: 1.0.0
  interval: 1h
  timeout: 60s
  source: {{kind: ConfigMap, name: src-app, namespace: {ns}, path: ./}}
  drift: {{mode: Heal}}
"
        ),
    )
    .await?;
    let layers: Api<layer_controller::crd::AddonsLayer> = Api::all(client.clone());
    let _delete_layer = scopeguard(&layer);
    eventually("the layer Deployed", Duration::from_secs(60), || async {
        let status = serde_json::to_value(layers.get(&layer).await?.status)?;
        Ok((status["state"] == "Deployed").then_some(()))
    })
    .await
    .with_context(|| "waiting for the layer".to_string())?;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), t);
    ensure!(
        configmaps.get("settings").await?.data.unwrap_or_default()["retention"] == "30d",
        "the layer's ConfigMap was not applied"
    );
    // A hand edit: reported by the observer, then healed by the controller.
    cluster()
        .kubectl()
        .args([
            "-n",
            t,
            "patch",
            "configmap",
            "settings",
            "--type=merge",
            "-p",
            r#"{"data":{"retention":"1d"}}"#,
        ])
        .output()?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), t);
    let reported = eventually(
        "the drift-observer's DriftDetected event on the edited ConfigMap",
        Duration::from_secs(60),
        || async {
            let found = events.list(&ListParams::default()).await?.items;
            Ok(found
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("DriftDetected")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("settings")
                })
                .map(|e| e.note.unwrap_or_default()))
        },
    )
    .await;
    let note = match reported {
        Ok(note) => note,
        Err(e) => bail!(
            "{e:#}
{}",
            release.logs("drift-observer", 20)
        ),
    };
    ensure!(
        note.contains("retention") && note.contains("30d") && note.contains("1d"),
        "the drift event says: {note}"
    );
    // Healed through the API: the observer asked (the reconcile-requested-at annotation on the
    // layer), the controller handled that very request, and the edit is undone.
    let requested = eventually(
        "the drift-observer's heal request handled by the layer-controller",
        Duration::from_secs(60),
        || async {
            let layer = layers.get(&layer).await?;
            let asked = layer
                .annotations()
                .get("strata.dev/reconcile-requested-at")
                .cloned();
            let handled = layer.status.and_then(|s| s.last_handled_reconcile_at);
            Ok(asked.filter(|a| handled.as_ref() == Some(a)))
        },
    )
    .await?;
    eventually("the edit healed", Duration::from_secs(60), || async {
        let data = configmaps.get("settings").await?.data.unwrap_or_default();
        Ok((data["retention"] == "30d").then_some(()))
    })
    .await?;
    eprintln!("drift healed through the heal request of {requested}");
    Ok(())
}

/// Zone `zone` of the rollout group `ingester`: `replicas` test pods (Ready by kubelet's probe
/// two seconds after they start), OnDelete, labelled for prepare-downscale at `/prepare-shutdown`
/// on port 8080; every POST to pod `fail_on` fails.
fn ingester_zone(zone: &str, replicas: i32, version: &str, fail_on: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ingester-zone-{zone}
  labels: {{rollout-group: ingester, grafana.com/prepare-downscale: "true"}}
  annotations:
    rollout-max-unavailable: "2"
    grafana.com/prepare-downscale-http-path: prepare-shutdown
    grafana.com/prepare-downscale-http-port: "8080"
spec:
  replicas: {replicas}
  serviceName: ingester
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  selector: {{matchLabels: {{name: ingester-zone-{zone}}}}}
  template:
    metadata: {{labels: {{name: ingester-zone-{zone}, rollout-group: ingester}}}}
    spec:
      # The test pod (PID 1, no signal handler) ignores SIGTERM: a removed pod lingers this long,
      # still answering what it recorded.
      terminationGracePeriodSeconds: 3
      containers:
      - name: ingester
        image: {image}
        env:
        - {{name: VERSION, value: "{version}"}}
        - {{name: READY_AFTER, value: "2"}}
        - {{name: FAIL_PREPARE_ON, value: "{fail_on}"}}
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        readinessProbe: {{httpGet: {{path: /ready, port: 8080}}, periodSeconds: 1}}
"#,
        image = test_pod_image()
    )
}

/// The in-cluster rollout-operator, given two namespaces, rolls the three-zone group of real
/// pods in each at the same time, one zone at a time per group, each zone only once the
/// previous one's new pods are Ready by kubelet (#55 item 4); the in-cluster
/// prepare-downscale webhook calls the pods going away at their own addresses, and tells them
/// to undo when the downscale is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollout_operator_rolls_real_pods_zone_by_zone() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let group = node_namespace(&client, "ic-rollout", &[WEBHOOK_OPT_IN]).await?;
    let ns = group.name.clone();
    // A second namespace the operator also manages (#55 item 2): the real image given a list,
    // a Role in each namespace, the webhooks selecting both; its group, on real pods too, is
    // rolled at the same time as the first one's.
    let other = node_namespace(&client, "ic-rollout-other", &[WEBHOOK_OPT_IN]).await?;
    let release = Release::install(&client, &[]).await?;
    release.upgrade(&[&format!(
        "rolloutOperator.watchNamespaces={{{ns},{}}}",
        other.name
    )])?;
    release
        .wait_available(&client, Duration::from_secs(120))
        .await?;
    let zones = ["a", "b", "c"];
    let both = [ns.clone(), other.name.clone()];
    for namespace in &both {
        for zone in zones {
            apply_yaml(
                &client,
                namespace,
                &ingester_zone(zone, 2, "1", "ingester-zone-b-1"),
            )
            .await?;
        }
    }
    let pods_of = |namespace: &str| -> Api<Pod> { Api::namespaced(client.clone(), namespace) };
    let pods = pods_of(&ns);
    let all_ready = |pods: Api<Pod>, want: usize| async move {
        let list = pods.list(&ListParams::default()).await?.items;
        let up = list.iter().filter(|p| rollout_watch::up(p)).count();
        Ok((up == want && list.len() == want).then_some(list))
    };
    let mut old: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for namespace in &both {
        let before = eventually(
            &format!("six ingester pods Ready by kubelet in {namespace}"),
            Duration::from_secs(90),
            || all_ready(pods_of(namespace), 6),
        )
        .await?;
        old.insert(
            namespace.clone(),
            before
                .iter()
                .filter_map(|p| p.labels().get("controller-revision-hash").cloned())
                .collect(),
        );
    }

    // A new version of every zone of both groups: the operator deletes old pods zone by zone,
    // in each namespace at once.
    let watches: Vec<_> = both
        .iter()
        .map(|namespace| {
            rollout_watch::watch_rollout(pods_of(namespace), "ingester", &["a", "b", "c"], 2)
        })
        .collect();
    for namespace in &both {
        for zone in zones {
            apply_yaml(
                &client,
                namespace,
                &ingester_zone(zone, 2, "2", "ingester-zone-b-1"),
            )
            .await?;
        }
    }
    let audit = cluster().audit_log().context("the plane's audit log")?;
    for (namespace, watch) in both.iter().zip(watches) {
        let finished = rollout_watch::rollout_finished(
            &pods_of(namespace),
            &old[namespace],
            6,
            Duration::from_secs(180),
        )
        .await;
        let seen = watch.finish().await?;
        if let Err(e) = finished {
            bail!(
                "{namespace}: {e:#}
{}",
                release.logs("rollout-operator", 30)
            );
        }
        ensure!(
            seen.violations.is_empty(),
            "{namespace}: {:?}",
            seen.violations
        );
        ensure!(
            seen.most_zones_down == 1,
            "{namespace}: zones down at once: {}",
            seen.most_zones_down
        );
        let summary = rollout_watch::judge_operator_deletions(
            &strata_e2e::plane::pod_deletions(&audit)?,
            namespace,
            "ingester",
            &old[namespace],
            6,
        )?;
        eprintln!("rollout of {namespace}: {summary}");
    }

    // A downscale: the pod going away is called at its IP before the downscale is admitted.
    let going = pods.get("ingester-zone-a-1").await?;
    let out = cluster()
        .kubectl()
        .args([
            "-n",
            &ns,
            "scale",
            "statefulset",
            "ingester-zone-a",
            "--replicas=1",
        ])
        .output()?;
    ensure!(
        out.status.success(),
        "downscale of zone a: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = recorded_calls(&going).await?;
    // At least once: kube-apiserver re-runs admission when the update conflicts with a write
    // during admission (the StatefulSet controller's status update, say).
    ensure!(
        !calls.is_empty()
            && calls
                .iter()
                .all(|c| *c == ("POST".to_string(), "/prepare-shutdown".to_string())),
        "ingester-zone-a-1 ({}) recorded {calls:?}",
        pod_ip(&going)?
    );
    let staying = recorded_calls(&pods.get("ingester-zone-a-0").await?).await?;
    ensure!(
        staying.is_empty(),
        "ingester-zone-a-0 was called: {staying:?}"
    );
    // Recorded once the downscale has landed (not during its admission).
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), &ns);
    eventually(
        "last-downscale recorded on ingester-zone-a",
        Duration::from_secs(10),
        || async {
            Ok(sets
                .get("ingester-zone-a")
                .await?
                .annotations()
                .contains_key("grafana.com/last-downscale")
                .then_some(()))
        },
    )
    .await?;
    // Zone a settles (its pod gone) before another zone may go down.
    eventually(
        "zone a at one Ready replica",
        Duration::from_secs(60),
        || async {
            let status = sets
                .get("ingester-zone-a")
                .await?
                .status
                .unwrap_or_default();
            Ok((status.replicas == 1
                && status.ready_replicas == Some(1)
                && status.updated_replicas == Some(1))
            .then_some(()))
        },
    )
    .await?;

    // A downscale that one pod cannot prepare for: refused, and the pod that did prepare is told
    // to undo; no pod stays marked.
    let b0 = pods.get("ingester-zone-b-0").await?;
    let out = cluster()
        .kubectl()
        .args([
            "-n",
            &ns,
            "scale",
            "statefulset",
            "ingester-zone-b",
            "--replicas=0",
        ])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success()
            && stderr.contains("ingester-zone-b-1 answered HTTP 500")
            && stderr.contains("failed to prepare for shutdown"),
        "downscale of zone b: {stderr}"
    );
    eventually(
        "ingester-zone-b-0 told to prepare, then to undo",
        Duration::from_secs(30),
        || async {
            let calls = recorded_calls(&b0).await?;
            let posted = calls.first().is_some_and(|c| c.0 == "POST");
            let undone = calls.last().is_some_and(|c| c.0 == "DELETE");
            Ok(
                (posted && undone && calls.iter().all(|c| c.1 == "/prepare-shutdown"))
                    .then_some(calls),
            )
        },
    )
    .await?;
    eventually(
        "no pod left marked as prepared",
        Duration::from_secs(30),
        || async {
            let marked = pods
                .list(&ListParams::default().labels("strata.dev/prepared-for-downscale=true"))
                .await?
                .items;
            Ok(marked.is_empty().then_some(()))
        },
    )
    .await?;
    ensure!(
        sets.get("ingester-zone-b").await?.spec.unwrap().replicas == Some(2),
        "zone b was scaled down"
    );
    Ok(())
}

/// Zone `zone` of [`ingester_zone`] (2 real pods), labelled with a 10 s minimum time between
/// zone downscales, following `leader` when given.
fn following_zone(zone: &str, leader: Option<&str>) -> String {
    let yaml = ingester_zone(zone, 2, "1", "none").replace(
        r#"labels: {rollout-group: ingester, grafana.com/prepare-downscale: "true"}"#,
        r#"labels: {rollout-group: ingester, grafana.com/prepare-downscale: "true", grafana.com/min-time-between-zones-downscale: 10s}"#,
    );
    match leader {
        Some(leader) => yaml.replace(
            "  annotations:\n",
            &format!(
                "  annotations:\n    grafana.com/rollout-downscale-leader: ingester-zone-{leader}\n"
            ),
        ),
        None => yaml,
    }
}

/// #303 on real pods (#55 items 1 and 4): a HorizontalPodAutoscaler on zone a, driven by
/// kube-controller-manager, downscales it through the in-cluster prepare-downscale webhook
/// without a conflict; the in-cluster operator then takes zones b and c down one minimum time
/// apart, and kubelet stops the pods that go. Raised again, the HPA's upscale is followed at
/// once and the new pods become Ready by kubelet's probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_steps_real_zones_down_one_window_apart() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let group = node_namespace(&client, "ic-hpa", &[WEBHOOK_OPT_IN]).await?;
    let ns = group.name.clone();
    let release = Release::install(&client, &[]).await?;
    release.upgrade(&[&format!("rolloutOperator.watchNamespaces={{{ns}}}")])?;
    release
        .wait_available(&client, Duration::from_secs(120))
        .await?;
    for (zone, leader) in [("a", None), ("b", Some("a")), ("c", Some("b"))] {
        apply_yaml(&client, &ns, &following_zone(zone, leader)).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let ready = |want: usize| {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await?.items;
            let up = list.iter().filter(|p| rollout_watch::up(p)).count();
            Ok((up == want && list.len() == want).then_some(()))
        }
    };
    eventually("six pods Ready by kubelet", Duration::from_secs(90), || {
        ready(6)
    })
    .await?;
    let hpa = |min: i32, max: i32| {
        format!(
            "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {{name: ingester}}\nspec:\n  scaleTargetRef: {{apiVersion: apps/v1, kind: StatefulSet, name: ingester-zone-a}}\n  minReplicas: {min}\n  maxReplicas: {max}\n  metrics:\n  - type: Resource\n    resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 80}}}}\n"
        )
    };
    // Bounds move the HPA (the plane has no metrics API): max 1 scales zone a down to 1.
    apply_yaml(&client, &ns, &hpa(1, 1)).await?;
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), &ns);
    let mut down: BTreeMap<&str, std::time::Instant> = BTreeMap::new();
    let started = std::time::Instant::now();
    while down.len() < 3 {
        ensure!(
            started.elapsed() < Duration::from_secs(120),
            "only zones {:?} went down to 1\n{}",
            down.keys().collect::<Vec<_>>(),
            release.logs("rollout-operator", 30)
        );
        for zone in ["a", "b", "c"] {
            if !down.contains_key(zone) {
                let sts = sets.get(&format!("ingester-zone-{zone}")).await?;
                if sts.spec.and_then(|s| s.replicas) == Some(1) {
                    down.insert(zone, std::time::Instant::now());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The window is whole seconds on the annotation: up to 1 s sooner, plus this loop's polls.
    let least = Duration::from_millis(8500);
    for (before, after) in [("a", "b"), ("b", "c")] {
        let gap = down[after].saturating_duration_since(down[before]);
        ensure!(
            gap >= least,
            "zone {after} followed zone {before} after {gap:?}, less than the 10 s window"
        );
    }
    eventually("three pods, each Ready", Duration::from_secs(90), || {
        ready(3)
    })
    .await?;
    let audit = cluster().audit_log().context("the plane's audit log")?;
    let writes = strata_e2e::plane::scale_writes(&audit, &ns)?;
    ensure!(
        writes.iter().any(
            |(agent, _, name, _)| agent.contains("horizontal-pod-autoscaler")
                && name == "ingester-zone-a"
        ),
        "no /scale write by the HPA: {writes:?}"
    );
    let conflicts: Vec<_> = writes.iter().filter(|w| w.3 == 409).collect();
    ensure!(
        conflicts.is_empty(),
        "/scale writes answered 409: {conflicts:?}"
    );
    // Up again: the followers follow at once, and kubelet readies the new pods.
    apply_yaml(&client, &ns, &hpa(2, 2)).await?;
    eventually("six pods Ready again", Duration::from_secs(60), || ready(6)).await?;
    Ok(())
}

/// The pod holding `service`'s leader Lease (the holder identity is `<pod>-<suffix>`).
async fn leader_pod(client: &Client, release: &Release, service: &str) -> Result<Option<String>> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), release.namespace());
    let Some(lease) = leases.get_opt(&format!("{service}-leader")).await? else {
        return Ok(None);
    };
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    Ok(release
        .pods(client, service)
        .await?
        .iter()
        .map(|p| p.name_any())
        .find(|name| holder.starts_with(&format!("{name}-"))))
}

/// An AddonsLayer reading ConfigMap `src-<name>` in `source_ns`, applying one ConfigMap (and
/// `extra` manifests) into `target_ns`.
fn configmap_layer(name: &str, source_ns: &str, target_ns: &str, extra: &str) -> String {
    let files = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {target_ns}}}\ndata: {{owner: {name}}}\n{extra}"
    );
    let body: String = files.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: src-{name}, namespace: {source_ns}}}
data:
  objects.yaml: |
{body}---
apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {name}}}
spec:
  version: 1.0.0
  interval: 1h
  timeout: 90s
  source: {{kind: ConfigMap, name: src-{name}, namespace: {source_ns}, path: ./}}
"
    )
}

async fn layer_state(client: &Client, layer: &str) -> Result<String> {
    let layers: Api<layer_controller::crd::AddonsLayer> = Api::all(client.clone());
    let status = serde_json::to_value(layers.get(layer).await?.status)?;
    Ok(status["state"].as_str().unwrap_or_default().to_string())
}

/// Two replicas of each service: deleting a leader pod hands its Lease to the other replica and
/// work goes on; a `helm upgrade` that changes the webhook's arguments rolls its Deployment
/// while kube-apiserver keeps calling it, and not one admission fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_hand_over_and_the_webhook_rolls_without_a_failed_admission() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let release = Release::install(&client, &[]).await?;
    let ns = release.namespace().to_string();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    for service in ["layer-controller", "drift-observer", "rollout-operator"] {
        let leader = eventually(
            &format!("{service} elects a leader"),
            Duration::from_secs(60),
            || leader_pod(&client, &release, service),
        )
        .await?;
        pods.delete(&leader, &Default::default()).await?;
        let next = eventually(
            &format!("{service}'s Lease held by another pod than {leader}"),
            Duration::from_secs(60),
            || async {
                Ok(leader_pod(&client, &release, service)
                    .await?
                    .filter(|p| *p != leader))
            },
        )
        .await;
        let next = match next {
            Ok(next) => next,
            Err(e) => bail!("{e:#}\n{}", release.logs(service, 20)),
        };
        eprintln!("{service}: leader {leader} deleted, {next} leads");
    }
    // Work goes on under the new leader: a layer created now deploys.
    let target = node_namespace(&client, "ic-ha", &[]).await?;
    let layer = format!("{}-after", target.name);
    let _delete_layer = scopeguard(&layer);
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&layer, &ns, &target.name, ""),
    )
    .await?;
    eventually(
        "a layer created after the hand-over Deployed",
        Duration::from_secs(60),
        || async { Ok((layer_state(&client, &layer).await? == "Deployed").then_some(())) },
    )
    .await?;
    release
        .wait_available(&client, Duration::from_secs(120))
        .await?;

    // Continuous admission traffic: dry-run creates of AddonsLayers, every one reviewed by the
    // addonslayer-validation webhook (failurePolicy Fail): a valid layer must be admitted, a
    // self-dependent one refused with the webhook's reason. Anything else is a failed admission.
    let old_pods: BTreeSet<String> = release
        .pods(&client, "admission-webhook")
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut traffic = Vec::new();
    for worker in 0..4 {
        let (client, stop, ns) = (client.clone(), stop.clone(), ns.clone());
        traffic.push(tokio::spawn(async move {
            let layers: Api<layer_controller::crd::AddonsLayer> = Api::all(client);
            let dry_run = kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            };
            let (mut admitted, mut refused, mut failed) = (0u32, 0u32, Vec::new());
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let name = format!("traffic-{worker}-{n}");
                let invalid = n.is_multiple_of(2);
                let depends = if invalid { format!("[\"{name}@1.0.0\"]") } else { "[]".into() };
                let layer: layer_controller::crd::AddonsLayer = serde_json::from_value(serde_json::json!({
                    "apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer",
                    "metadata": {"name": name},
                    "spec": {"version": "1.0.0",
                        "source": {"kind": "ConfigMap", "name": "src", "namespace": ns, "path": "./"},
                        "prereqs": {"dependsOn": serde_json::from_str::<Value>(&depends).unwrap()}}
                }))
                .unwrap();
                match (layers.create(&dry_run, &layer).await, invalid) {
                    (Ok(_), false) => admitted += 1,
                    (Err(kube::Error::Api(e)), true)
                        if e.message.contains("a layer cannot depend on itself") =>
                    {
                        refused += 1
                    }
                    (outcome, _) => failed.push(format!("{name}: {outcome:?}")),
                }
            }
            (admitted, refused, failed)
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // An argument change rolls the webhook's Deployment, one replica at a time.
    release.upgrade(&["admissionWebhook.podTimeout=4s"])?;
    eventually(
        "the webhook's pods all replaced and Ready",
        Duration::from_secs(120),
        || async {
            let now = release.pods(&client, "admission-webhook").await?;
            let replaced = now.len() == 2
                && now
                    .iter()
                    .all(|p| !old_pods.contains(&p.name_any()) && rollout_watch::up(p));
            Ok(replaced.then_some(()))
        },
    )
    .await?;
    release
        .wait_available(&client, Duration::from_secs(60))
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut admitted, mut refused, mut failed) = (0, 0, Vec::new());
    for worker in traffic {
        let (a, r, f) = worker.await?;
        admitted += a;
        refused += r;
        failed.extend(f);
    }
    eprintln!(
        "webhook rolled under traffic: {admitted} admitted, {refused} refused as asked, {} failed",
        failed.len()
    );
    ensure!(
        failed.is_empty(),
        "{} failed admissions during the webhook's rolling update, e.g. {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    ensure!(
        admitted > 50 && refused > 50,
        "too little traffic to judge: {admitted} admitted, {refused} refused"
    );
    Ok(())
}

/// SIGTERM (a pod deletion) on a pod of each service: it exits on its own, well within its grace
/// period; the layer-controller's leader, stopped in the middle of a layer's attempt, leaves
/// nothing half-done (the new leader finishes the layer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_stops_cleanly_on_sigterm() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let release = Release::install(&client, &[]).await?;
    let ns = release.namespace().to_string();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // A layer whose Deployment becomes Ready only after 8 s: its attempt is under way when the
    // controller's leader gets SIGTERM.
    let target = node_namespace(&client, "ic-stop", &[]).await?;
    let layer = format!("{}-slow", target.name);
    let _delete_layer = scopeguard(&layer);
    let slow = format!(
        "---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: slow, namespace: {t}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: slow}}}}
  template:
    metadata: {{labels: {{app: slow}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: {image}
        env: [{{name: READY_AFTER, value: \"8\"}}]
        readinessProbe: {{httpGet: {{path: /ready, port: 8080}}, periodSeconds: 1}}
",
        t = target.name,
        image = test_pod_image()
    );
    let leader = eventually("a layer-controller leader", Duration::from_secs(60), || {
        leader_pod(&client, &release, "layer-controller")
    })
    .await?;
    apply_yaml(
        &client,
        &ns,
        &configmap_layer(&layer, &ns, &target.name, &slow),
    )
    .await?;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &target.name);
    eventually(
        "the layer's Deployment applied",
        Duration::from_secs(30),
        || async { Ok(deployments.get_opt("slow").await?.map(|_| ())) },
    )
    .await?;
    ensure!(
        layer_state(&client, &layer).await? != "Deployed",
        "the layer was Deployed before its Deployment was Ready"
    );

    for service in SERVICES {
        let victim = if service == "layer-controller" {
            leader.clone()
        } else {
            release.pods(&client, service).await?[0].name_any()
        };
        let grace = pods
            .get(&victim)
            .await?
            .spec
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        let (left, exit) = stopped(&pods, &victim).await?;
        eprintln!(
            "{service}: {victim} left {:.1} s after SIGTERM, exit {exit:?}",
            left.as_secs_f64()
        );
        ensure!(
            left < Duration::from_secs(u64::try_from(grace)?),
            "{victim} took {left:?}, its grace period is {grace} s"
        );
        ensure!(
            exit == Some(0),
            "{victim} ended with exit code {exit:?}, not 0: it did not stop on its own"
        );
    }
    // The old leader left the layer mid-attempt; the new one finishes it.
    eventually(
        "the layer Deployed by the new leader",
        Duration::from_secs(90),
        || async { Ok((layer_state(&client, &layer).await? == "Deployed").then_some(())) },
    )
    .await?;
    ensure!(
        deployments
            .get("slow")
            .await?
            .status
            .unwrap_or_default()
            .ready_replicas
            == Some(1),
        "Deployed while its Deployment is not Ready"
    );
    Ok(())
}

/// Deletes `pod` (kubelet sends SIGTERM) and follows it until it is gone: how long that took
/// and the exit code its container reported on the way.
async fn stopped(pods: &Api<Pod>, pod: &str) -> Result<(Duration, Option<i32>)> {
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    let config = watcher::Config::default().fields(&format!("metadata.name={pod}"));
    let mut events = std::pin::pin!(watcher::watcher(pods.clone(), config));
    // The first (list) event: the watch is under way before the deletion.
    let _ = events.next().await;
    let started = std::time::Instant::now();
    pods.delete(pod, &Default::default()).await?;
    let mut exit = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .with_context(|| format!("{pod} still there after 60 s"))?;
        match event {
            Some(Ok(watcher::Event::Delete(_))) => return Ok((started.elapsed(), exit)),
            Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => {
                let terminated = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .into_iter()
                    .flatten()
                    .find_map(|c| c.state.and_then(|s| s.terminated));
                if let Some(t) = terminated {
                    exit = Some(t.exit_code);
                }
            }
            Some(_) => {}
            None => bail!("the watch of {pod} ended"),
        }
    }
}

/// An image that cannot start (here: the binary refuses an argument) fails the install, naming
/// the pod and its container's last state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_start_fails_the_install_naming_the_pod() -> Result<()> {
    let _one_release = serial().await;
    let client = client().await;
    let failed = Release::install_within(
        &client,
        &["layerController.extraArgs={--no-such-flag}"],
        Duration::from_secs(40),
    )
    .await;
    let error = format!("{:#}", failed.err().context("the install succeeded")?);
    ensure!(
        error.contains("/layer-controller-") && error.contains("last state"),
        "the failure names no layer-controller pod: {error}"
    );
    ensure!(
        error.contains("\"exitCode\":2") && error.contains("--no-such-flag"),
        "the failure shows no exit code or log line: {error}"
    );
    Ok(())
}

/// One real node per machine: a second plane asking for one fails at once with one line naming
/// the plane that holds it, and leaves the running node alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_real_node_is_refused_in_one_line() -> Result<()> {
    let client = client().await;
    strata_e2e::in_cluster::real_node(&client).await?;
    let dir = std::env::temp_dir().join(format!("strata-second-node-{}", std::process::id()));
    let out = std::process::Command::new(strata_e2e::services::bin_dir().join("strata-plane"))
        .args(["up", "--real-node", "--dir"])
        .arg(&dir)
        .output()?;
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    ensure!(
        !out.status.success(),
        "a second real node started: {stderr}"
    );
    ensure!(
        last.starts_with("strata-plane: ")
            && last.contains("another plane's real node runs on this machine"),
        "{stderr}"
    );
    strata_e2e::in_cluster::real_node(&client).await?;
    Ok(())
}

/// Deletes an AddonsLayer when dropped (a failed test leaves none behind).
fn scopeguard(layer: &str) -> strata_e2e::support::DeleteOnDrop {
    strata_e2e::support::DeleteOnDrop {
        resource: "addonslayer",
        name: layer.to_string(),
    }
}

#[allow(dead_code)]
fn pod_names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.name_any()).collect()
}
