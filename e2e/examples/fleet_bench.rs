//! `make bench` part (`BENCH_ONLY=fleet`): many independent apps, the shape of Flux's "Mean
//! Time To Production" benchmark. Per app: a namespace, its own OCIRepository (Flux's real
//! CRD, the artifact served by a local HTTP server as source-controller serves it), a
//! ServiceAccount the layer acts as (impersonation, like `serviceAccountName`), and one
//! health-gated AddonsLayer applying a ServiceAccount, a Service, a Deployment scaled to zero
//! and an Ingress into the app's namespace, with three variables substituted
//! (`spec.postBuild.substitute`). All layers are created at once; measured: create → every
//! layer Deployed, an upgrade round (one variable changes in every layer, as Flux's upgrade
//! changes only each Deployment's pod template) → every layer Deployed at its new generation,
//! the controller's peak RSS, its most open sockets, its API requests, and the floor set by
//! kube-controller-manager (every Deployment's status observed at its generation).
//!
//! The controller binary is `$LAYER_CONTROLLER_BIN`; the number of apps `$BENCH_FLEET_LAYERS`
//! (default 100). With `$DRIFT_OBSERVER_BIN` set, the drift-observer is started once both
//! rounds are measured, on the deployed fleet: its start-up sync (every layer reported
//! clean), peak RSS and sockets. With `$BENCH_FLEET_SHARDS` = S > 1 the layers are spread
//! over S shards (`sharding.fluxcd.io/key`, the first shard being the unlabelled default one)
//! and S controllers run, one per shard, as the chart's `sharding.shards` deploys them.
//! With `$BENCH_FLEET_DIRECT` set no controller runs: the driver applies every app's four
//! objects itself (server-side apply, 16 at a time, as itself) and times kube-controller-manager
//! observing every Deployment, in both rounds: what the plane alone needs on this machine, the
//! floor of floors.
//! With `$ANCHOR_KUSTOMIZE_CONTROLLER_BIN` set, Flux's kustomize-controller deploys the same
//! apps instead, one Kustomization each (see [`anchor_rounds`]): the anchor, side by side.
//! Prints one JSON line.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark driver fails loudly

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use layer_controller::crd::AddonsLayer;
use strata_e2e::bench::{layers_reported_clean, rss_kib, spawn_measured_with};
use strata_e2e::flux::{ArtifactServer, install_layer_crds, set_source_artifact};
use strata_e2e::support::{TestNamespace, cluster, parse_yaml};

/// Every app's manifests: our own podinfo-like set (the same four kinds as Flux's
/// benchmark), with three variables: the app's name and namespace, and the release (the
/// round). As in Flux's benchmark, whose upgrade changes the CPU request of the Deployment's
/// pod template, the release is in the Deployment alone, so an upgrade changes that object
/// and rolls it out; with `$BENCH_FLEET_UPGRADE_EVERY_OBJECT` set every object carries it
/// (a label), so an upgrade changes all four (the bench as recorded before that change).
/// Variables are quoted:
/// a `${` inside a flow mapping is not valid YAML. The release is never a bare number
/// (`r1`, `r2`): Flux substitutes after its YAML is re-serialized, quotes gone, and `1` in a
/// label or annotation would then be an integer its apply rejects.
fn app_manifests() -> String {
    let (app, namespace, release) = ("${APP}", "${NAMESPACE}", "${RELEASE}");
    let stamp = if std::env::var_os("BENCH_FLEET_UPGRADE_EVERY_OBJECT").is_some() {
        format!(", release: \"{release}\"")
    } else {
        String::new()
    };
    format!(
        "apiVersion: v1
kind: ServiceAccount
metadata: {{name: \"{app}\", namespace: \"{namespace}\", labels: {{app: \"{app}\"{stamp}}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: \"{app}\", namespace: \"{namespace}\", labels: {{app: \"{app}\"{stamp}}}}}
spec:
  selector: {{app: \"{app}\"}}
  ports: [{{name: http, port: 9898, targetPort: http}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: \"{app}\", namespace: \"{namespace}\", labels: {{app: \"{app}\", release: \"{release}\", strata-bench/fleet: \"true\"}}}}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: \"{app}\"}}}}
  template:
    metadata: {{labels: {{app: \"{app}\"}}, annotations: {{release: \"{release}\"}}}}
    spec:
      serviceAccountName: \"{app}\"
      containers:
      - name: app
        image: example.invalid/podinfo:6.7.0
        ports: [{{name: http, containerPort: 9898}}]
        resources: {{requests: {{cpu: 10m, memory: 16Mi}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: \"{app}\", namespace: \"{namespace}\", labels: {{app: \"{app}\"{stamp}}}}}
spec:
  rules:
  - host: \"{app}.example.invalid\"
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {{service: {{name: \"{app}\", port: {{name: http}}}}}}
"
    )
}

/// The OCIRepository of app `app` in the bench namespace `ns` (its status is written by
/// [`set_source_artifact`], as source-controller would).
fn source(ns: &str, app: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
        "metadata": {"name": app, "namespace": ns},
        "spec": {"url": format!("oci://registry.example.invalid/{app}"), "interval": "10m", "ref": {"tag": "latest"}},
    })
}

/// Everything an app needs before its layer exists: its namespace, the ServiceAccount its
/// layer acts as (in the bench namespace, where the chart lets the controller impersonate),
/// and that account's admin rights in the app's namespace.
fn app_setup(ns: &str, app: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {app}, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {app}-deployer, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}}
subjects: [{{kind: ServiceAccount, name: {app}, namespace: {ns}}}]
"
    )
}

/// The shard of app number `i` of `shards`: `None` for the default shard.
fn shard_of(i: usize, shards: usize) -> Option<String> {
    (!i.is_multiple_of(shards)).then(|| format!("s{}", i % shards))
}

/// Every layer's `interval`. The controller runs with `--sync-period` set to it as well (unless
/// `$BENCH_LAYER_CONTROLLER_ARGS` names one): its default of 1m re-applies every layer at
/// least once a minute whatever its interval, so a round longer than a minute would re-apply,
/// in full, every layer deployed before its last minute, while Flux's Kustomizations in the
/// same bench re-apply at their own 60m interval.
const LAYER_INTERVAL: &str = "1h";

fn layer(
    ns: &str,
    app: &str,
    namespace: &str,
    release: &str,
    shard: Option<&str>,
) -> serde_json::Value {
    let mut labels = serde_json::json!({"strata-e2e/suite": ns});
    if let Some(shard) = shard {
        labels[layer_controller::keys::SHARD_LABEL] = shard.into();
    }
    let mut layer = serde_json::json!({
        "apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer",
        "metadata": {"name": format!("{ns}-{app}"), "labels": labels},
        "spec": {
            "version": "1.0.0", "interval": LAYER_INTERVAL, "timeout": "5m",
            "serviceAccountName": app,
            "source": {"kind": "OCIRepository", "name": app, "namespace": ns, "path": "./"},
            "postBuild": {"substitute": {"APP": app, "NAMESPACE": namespace, "RELEASE": release}},
        },
    });
    // With `$BENCH_FLEET_ROLLBACK` every layer rolls back on failure: each attempt's
    // manifests are kept in a Secret before it is applied.
    if std::env::var_os("BENCH_FLEET_ROLLBACK").is_some() {
        layer["spec"]["rollback"] = serde_json::json!({"enabled": true});
    }
    layer
}

/// What the layers of suite `ns` keep for rollback: (Secrets, their data bytes per layer).
async fn kept_revisions(client: &kube::Client, ns: &str, apps: usize) -> Result<(usize, f64)> {
    use k8s_openapi::api::core::v1::Secret;
    use kube::ResourceExt as _;
    let secrets: Api<Secret> = Api::all(client.clone());
    let selector = format!("{}=revisions", layer_controller::keys::KEPT_REVISIONS_LABEL);
    let listed = secrets
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?;
    let prefix = format!("{ns}-");
    let ours: Vec<&Secret> = listed
        .items
        .iter()
        .filter(|s| {
            s.annotations()
                .get(layer_controller::keys::KEPT_REVISIONS_LABEL)
                .is_some_and(|layer| layer.starts_with(&prefix))
        })
        .collect();
    let bytes: usize = ours
        .iter()
        .flat_map(|s| s.data.iter().flatten())
        .map(|(_, v)| v.0.len())
        .sum();
    Ok((ours.len(), bytes as f64 / apps as f64))
}

/// Watches, from `started`, for when kube-controller-manager has observed every bench
/// Deployment at its generation with the label `release=<release>` (its ReplicaSet made, its
/// status written): the floor no health-gated deployer can beat. Watched, not polled: a LIST of every Deployment four times
/// a second cost the API server (and this driver, on the same two cores) CPU the system under
/// test then lacked.
fn controller_manager_floor(
    client: &kube::Client,
    apps: usize,
    release: &str,
    started: Instant,
) -> tokio::task::JoinHandle<Result<Floor>> {
    tokio::spawn(floor_watch(
        client.clone(),
        apps,
        release.to_string(),
        started,
    ))
}

/// When kube-controller-manager had observed every Deployment of a round, and when the last
/// of them had reached the API server at that release: which of the deployer and
/// kube-controller-manager held the round back.
/// Also, per app namespace, the resourceVersion of the write in which its Deployment was first
/// seen observed at this release: what [`ensure_in_order`] checks each deployer against.
#[derive(Debug, Clone)]
struct Floor {
    done: Duration,
    applied: Duration,
    observed: BTreeMap<String, u64>,
}

/// The resourceVersion of a write, as a number. The API calls it opaque; kube-apiserver's etcd3
/// storage makes it etcd's revision, one counter for every resource, so two writes to
/// different objects compare in the order etcd committed them. This bench relies on that to
/// check order without clocks: two watches deliver to this driver with their own delays (a
/// layer's event can reach it before its Deployment's although it was written after).
fn write_order(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// Fails naming the apps (their deployer objects' names) that were reported done (`done`:
/// name → the resourceVersion of the write that said so) in `round` before
/// kube-controller-manager had observed their own Deployment, in app namespace
/// `namespace_of(name)`: a deployer reporting too early (its health check passing on an
/// unprocessed Deployment) would otherwise only show as a suspiciously good time.
fn ensure_in_order(
    done: &BTreeMap<String, (Duration, u64)>,
    floor: &Floor,
    namespace_of: impl Fn(&str) -> String,
    who: &str,
    round: &str,
) -> Result<()> {
    let early: Vec<&str> = done
        .iter()
        .filter(|(name, (_, at))| {
            floor
                .observed
                .get(&namespace_of(name))
                .is_none_or(|observed| at < observed)
        })
        .map(|(name, _)| name.as_str())
        .collect();
    anyhow::ensure!(
        early.is_empty(),
        "{} of the {who} were reported done in the {round} round before kube-controller-manager had observed their Deployment (e.g. {})",
        early.len(),
        early[..early.len().min(5)].join(", ")
    );
    Ok(())
}

/// The watch behind [`controller_manager_floor`].
async fn floor_watch(
    client: kube::Client,
    apps: usize,
    release: String,
    started: Instant,
) -> Result<Floor> {
    use kube::runtime::{WatchStreamExt, watcher};
    let api: Api<Deployment> = Api::all(client);
    let selector = format!("strata-bench/fleet=true,release={release}");
    let (mut observed, mut seen) = (BTreeMap::new(), BTreeSet::new());
    let mut applied = Duration::ZERO;
    let stream = watcher(api, watcher::Config::default().labels(&selector)).applied_objects();
    let mut stream = std::pin::pin!(stream);
    while observed.len() < apps {
        let deployment = stream
            .try_next()
            .await?
            .ok_or_else(|| anyhow::anyhow!("the Deployment watch ended"))?;
        let key = (
            deployment.metadata.namespace.clone().unwrap_or_default(),
            deployment.metadata.name.clone().unwrap_or_default(),
        );
        // Its first event at this release (the selector): applied by now.
        if seen.insert(key.clone()) {
            applied = started.elapsed();
        }
        if deployment
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            == deployment.metadata.generation
        {
            observed
                .entry(key.0)
                .or_insert_with(|| write_order(&deployment.metadata));
        }
    }
    Ok(Floor {
        done: started.elapsed(),
        applied,
        observed,
    })
}

/// What kube-apiserver has served so far, by verb and resource (`apiserver_request_total`,
/// every client together: the counter does not say who asked); answers other than 2xx by
/// their code too (`APPLY deployments 429`): a request sent again after a throttled or failed
/// attempt counts twice, and this tells such repeats from the deployer's own.
async fn apiserver_requests(client: &kube::Client) -> Result<BTreeMap<String, f64>> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let mut by_call = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let resource = match (label("resource"), label("subresource")) {
            (r, s) if r.is_empty() => "(non-resource)".to_string() + &s,
            (r, s) if s.is_empty() => r,
            (r, s) => format!("{r}/{s}"),
        };
        let code = label("code");
        let call = if code.starts_with('2') || code.is_empty() {
            format!("{} {resource}", label("verb"))
        } else {
            format!("{} {resource} {code}", label("verb"))
        };
        *by_call.entry(call).or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    Ok(by_call)
}

/// A CPU profile of kube-apiserver over `seconds` (pprof's format), when the plane serves
/// /debug/pprof (`STRATA_PLANE_APISERVER_PROFILING`).
async fn apiserver_profile(
    client: kube::Client,
    seconds: u64,
    to: std::path::PathBuf,
) -> Result<()> {
    use http_body_util::BodyExt;
    let request = http::Request::get(format!("/debug/pprof/profile?seconds={seconds}"))
        .body(kube::client::Body::empty())?;
    let response = client.send(request).await?;
    anyhow::ensure!(
        response.status().is_success(),
        "kube-apiserver's profile: {}",
        response.status()
    );
    let bytes = response.into_body().collect().await?.to_bytes();
    std::fs::write(&to, &bytes)?;
    eprintln!(
        "fleet bench: kube-apiserver CPU profile in {}",
        to.display()
    );
    Ok(())
}

/// CPU time of `pid` so far (user + system), in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after its closing parenthesis.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds used so far by each process of the local plane, by command name.
fn plane_cpu() -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let comm = comm.trim();
        if [
            "kube-apiserver",
            "etcd",
            "kube-controller",
            "kube-scheduler",
            "kwok",
        ]
        .iter()
        .any(|name| comm.starts_with(name))
        {
            *by_name.entry(comm.to_string()).or_insert(0.0) += cpu_seconds(pid);
        }
    }
    by_name
}

/// CPU seconds each process of the local plane used since `before` ([`plane_cpu`]).
fn plane_cpu_since(before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    plane_cpu()
        .into_iter()
        .map(|(name, after)| {
            let earlier = before.get(&name).copied().unwrap_or(0.0);
            (name, after - earlier)
        })
        .collect()
}

/// What kube-apiserver served since `before` ([`apiserver_requests`]), per app, calls under
/// 0.01 per app left out.
async fn served_per_app_since(
    client: &kube::Client,
    before: &BTreeMap<String, f64>,
    apps: usize,
) -> Result<BTreeMap<String, f64>> {
    Ok(apiserver_requests(client)
        .await?
        .into_iter()
        .map(|(call, n)| {
            let per_app = (n - before.get(&call).copied().unwrap_or(0.0)) / apps as f64;
            (call, per_app)
        })
        .filter(|(_, n)| *n >= 0.01)
        .collect())
}

/// kube-controller-manager's `--kube-api-qps` on the local plane (its default, 20, unless
/// the plane was started with `STRATA_PLANE_CONTROLLER_MANAGER_QPS`).
fn controller_manager_qps() -> u32 {
    std::env::var("STRATA_PLANE_CONTROLLER_MANAGER_QPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

/// Open sockets of `pid` (from its file descriptors).
fn sockets(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
                })
                .count() as u64
        })
        .unwrap_or(0)
}

/// The controllers' API requests so far, by HTTP method (from their own client metrics).
async fn requests(controllers: &[strata_e2e::services::ServiceProcess]) -> BTreeMap<String, f64> {
    let mut by_verb = BTreeMap::new();
    for verb in ["GET", "POST", "PATCH", "PUT", "DELETE"] {
        by_verb.insert(
            verb.to_string(),
            summed(
                controllers,
                "layer_controller_kubernetes_api_client_request_duration_seconds_count",
                &[&format!("method=\"{verb}\"")],
            )
            .await,
        );
    }
    by_verb
}

/// The objects the controllers applied and those a new attempt left unapplied (unchanged
/// since applied exactly so), so far.
async fn objects_sent(controllers: &[strata_e2e::services::ServiceProcess]) -> (f64, f64) {
    (
        summed(controllers, "layer_controller_applied_objects_total", &[]).await,
        summed(controllers, "layer_controller_unchanged_objects_total", &[]).await,
    )
}

/// The controllers' reconciles so far, whatever their outcome: how often a layer was woken.
async fn reconciles(controllers: &[strata_e2e::services::ServiceProcess]) -> f64 {
    summed(controllers, "layer_controller_reconcile_total", &[]).await
}

/// One metric (its series matching every filter) summed over the controllers.
async fn summed(
    controllers: &[strata_e2e::services::ServiceProcess],
    metric: &str,
    filters: &[&str],
) -> f64 {
    let mut n = 0.0;
    for controller in controllers {
        n += controller.metric(metric, filters).await.unwrap_or(0.0);
    }
    n
}

/// Starts the drift-observer on the deployed fleet (dry runs as each layer's account, as the
/// chart wires it) and measures it until every layer is reported clean.
async fn observe_fleet(
    api: &Api<AddonsLayer>,
    selector: &str,
    ns: &str,
    names: &[(String, String)],
    impersonation: &str,
) -> Result<serde_json::Value> {
    let apps = names.len();
    let apply_as = format!("--apply-as=system:serviceaccount:{ns}:layer-controller");
    let args = [
        "--leader-elect=false",
        "--layer-selector",
        selector,
        "--default-source-namespace",
        ns,
        &apply_as,
    ];
    let started = Instant::now();
    let observer = spawn_measured_with(
        "DRIFT_OBSERVER_BIN",
        "drift-observer",
        &args,
        &[impersonation],
    )?;
    let pid = observer.pid();
    let mut peak_sockets = 0;
    loop {
        peak_sockets = peak_sockets.max(sockets(pid));
        let clean = layers_reported_clean(api, selector).await?;
        if clean == apps {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(900),
            "the drift-observer reported {clean} of {apps} layers clean in 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let sync = started.elapsed();
    // Settled: what it holds once every layer is watched and compared.
    tokio::time::sleep(Duration::from_secs(10)).await;
    peak_sockets = peak_sockets.max(sockets(pid));
    eprintln!("fleet bench: drift-observer synced {apps} layers in {sync:?}");
    let synced_rss = rss_kib(pid, "VmRSS:");
    let latency = drift_latency(&cluster().client().await?, ns, names).await?;
    peak_sockets = peak_sockets.max(sockets(pid));
    Ok(serde_json::json!({
        "sync_seconds": sync.as_secs_f64(),
        "rss_after_sync_kib": synced_rss,
        "edit_to_drift": latency,
        "rss_kib": rss_kib(pid, "VmRSS:"),
        "peak_rss_kib": rss_kib(pid, "VmHWM:"),
        "peak_sockets": peak_sockets,
        "sockets_at_end": sockets(pid),
    }))
}

/// Edit → drift in the layer's status, under a steady background of 50 unrelated edits a
/// second (annotations of Services no layer applied, in a namespace of their own: events the
/// observer's one Service watch receives and must pass over). Each sample changes the
/// `app` label of one app's Service as another field manager and times until an event of
/// its layer (a watch on that layer, opened before the edit) shows the drift in
/// `status.drift`. The layer-controller then heals it, as in production.
async fn drift_latency(
    client: &kube::Client,
    ns: &str,
    names: &[(String, String)],
) -> Result<serde_json::Value> {
    use k8s_openapi::api::core::v1::Service;
    use kube::ResourceExt as _;
    use kube::api::{Patch, PatchParams};
    use kube::runtime::watcher;
    const NOISE_SERVICES: usize = 10;
    const SAMPLES: usize = 40;
    let noise_ns = format!("{ns}-noise");
    let applier = core_k8s::apply::Applier::new(client.clone(), "strata-bench");
    let mut noise = parse_yaml(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {noise_ns}}}\n"
    ))?;
    for i in 0..NOISE_SERVICES {
        noise.extend(parse_yaml(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: noise{i}, namespace: {noise_ns}}}\nspec: {{ports: [{{port: 80}}]}}\n"
        ))?);
    }
    apply_all(&applier, noise).await?;
    let on = Arc::new(AtomicBool::new(true));
    let edits = Arc::new(AtomicU64::new(0));
    let background = {
        let (on, edits, api) = (
            on.clone(),
            edits.clone(),
            Api::<Service>::namespaced(client.clone(), &noise_ns),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            let mut n = 0u64;
            while on.load(Ordering::Relaxed) {
                tick.tick().await;
                n += 1;
                let patch =
                    serde_json::json!({"metadata": {"annotations": {"noise": n.to_string()}}});
                let name = format!("noise{}", n as usize % NOISE_SERVICES);
                if api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok()
                {
                    edits.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let layers: Api<AddonsLayer> = Api::all(client.clone());
    let mut latencies = Vec::new();
    let mut voided = 0;
    for k in 0..SAMPLES {
        let (app, namespace) = &names[k * names.len() / SAMPLES];
        let layer = format!("{ns}-{app}");
        let tampered = format!("tampered-{k}");
        let mut events = Box::pin(watcher(
            layers.clone(),
            watcher::Config::default().fields(&format!("metadata.name={layer}")),
        ));
        // The watch is open once its initial list is in.
        while let Some(event) = events.try_next().await? {
            if matches!(event, watcher::Event::InitDone) {
                break;
            }
        }
        let edited = Instant::now();
        Api::<Service>::namespaced(client.clone(), namespace)
            .patch(
                app,
                &PatchParams::apply("strata-bench-tamper").force(),
                &Patch::Apply(serde_json::json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": app, "namespace": namespace, "labels": {"app": tampered}},
                })),
            )
            .await?;
        let reported = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(event) = events.try_next().await? {
                if let watcher::Event::Apply(l) | watcher::Event::InitApply(l) = event
                    && l.status
                        .as_ref()
                        .is_some_and(|s| s.drift.iter().any(|d| d.actual.contains(&tampered)))
                {
                    return Ok::<_, anyhow::Error>(edited.elapsed());
                }
            }
            anyhow::bail!("the watch of {layer} ended")
        })
        .await;
        let reported = match reported {
            Ok(reported) => reported?,
            Err(_) => {
                // The layer's periodic re-apply (every --sync-period) may land between the
                // edit and the observer's look, undoing the edit first: no drift to report,
                // the sample is void. Still tampered, the observer missed it: a failure.
                let live = Api::<Service>::namespaced(client.clone(), namespace)
                    .get(app)
                    .await?;
                if live.labels().get("app") == Some(&tampered) {
                    anyhow::bail!("{layer}: the drift of its Service was not reported within 60 s");
                }
                eprintln!(
                    "fleet bench: {layer}: the edit was undone before the observer looked (a periodic re-apply); sample void"
                );
                voided += 1;
                continue;
            }
        };
        latencies.push(reported.as_secs_f64());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    on.store(false, Ordering::Relaxed);
    background.await?;
    let rate = edits.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(!latencies.is_empty(), "every drift sample was void");
    latencies.sort_by(f64::total_cmp);
    let quantile = |q: f64| {
        latencies[((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1]
    };
    eprintln!(
        "fleet bench: edit -> drift p50 {:.3} s, p99 {:.3} s under {rate:.1} unrelated edits/s",
        quantile(0.5),
        quantile(0.99)
    );
    Ok(serde_json::json!({
        "samples": latencies.len(),
        "voided_samples": voided,
        "p50_seconds": quantile(0.5),
        "p99_seconds": quantile(0.99),
        "max_seconds": latencies.last().copied().unwrap_or_default(),
        "background_edits_per_second": rate,
    }))
}

/// A round's cost from its start: the CPU each plane process, the deployer's processes (if
/// any) and this driver used, and what kube-apiserver served per app.
struct RoundCost {
    plane: BTreeMap<String, f64>,
    /// The deployer's name, its processes and their CPU at the start.
    deployer: Option<(&'static str, Vec<u32>, f64)>,
    driver: f64,
    served: BTreeMap<String, f64>,
}

impl RoundCost {
    async fn start(
        client: &kube::Client,
        deployer: Option<(&'static str, &[u32])>,
    ) -> Result<Self> {
        let cpu_of = |pids: &[u32]| pids.iter().map(|p| cpu_seconds(*p)).sum::<f64>();
        Ok(Self {
            plane: plane_cpu(),
            deployer: deployer.map(|(name, pids)| (name, pids.to_vec(), cpu_of(pids))),
            driver: cpu_seconds(std::process::id()),
            served: apiserver_requests(client).await?,
        })
    }

    /// CPU seconds by process since the start (the deployer under its name, this driver as
    /// `bench driver`), and the calls kube-apiserver served per app
    /// ([`served_per_app_since`]).
    async fn finish(
        self,
        client: &kube::Client,
        apps: usize,
    ) -> Result<(BTreeMap<String, f64>, BTreeMap<String, f64>)> {
        let driver = cpu_seconds(std::process::id()) - self.driver;
        let deployer = self.deployer.map(|(name, pids, before)| {
            let used = pids.iter().map(|p| cpu_seconds(*p)).sum::<f64>() - before;
            (name, used)
        });
        let served = served_per_app_since(client, &self.served, apps).await?;
        let mut cpu = plane_cpu_since(&self.plane);
        if let Some((name, used)) = deployer {
            cpu.insert(name.into(), used);
        }
        cpu.insert("bench driver".into(), driver);
        Ok((cpu, served))
    }
}

async fn apply_all(applier: &core_k8s::apply::Applier, docs: Vec<serde_json::Value>) -> Result<()> {
    futures::stream::iter(docs)
        .map(|doc| async move { applier.apply_dynamic(&doc, None).await })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Every app's objects applied by the driver itself, no deployer in between, in the same two
/// rounds as the layers (created at release r1, then at r2: the Deployment changed, or every
/// object with `$BENCH_FLEET_UPGRADE_EVERY_OBJECT`; the others applied again unchanged): when
/// kube-controller-manager has observed every Deployment, and the CPU each process used.
async fn direct_round(
    client: &kube::Client,
    applier: &core_k8s::apply::Applier,
    names: &[(String, String)],
) -> Result<()> {
    let mut result = serde_json::json!({
        "direct": true,
        "controller_manager_qps": controller_manager_qps(),
        "layers": names.len(),
    });
    for (round, release) in [("create", "r1"), ("upgrade", "r2")] {
        let mut docs = Vec::new();
        for (app, namespace) in names {
            let manifests = app_manifests()
                .replace("${APP}", app)
                .replace("${NAMESPACE}", namespace)
                .replace("${RELEASE}", release);
            docs.extend(parse_yaml(&manifests)?);
        }
        let cost = RoundCost::start(client, None).await?;
        let started = Instant::now();
        let floor = controller_manager_floor(client, names.len(), release, started);
        apply_all(applier, docs).await?;
        let applied = started.elapsed();
        let floor = floor.await??.done;
        let (cpu, served) = cost.finish(client, names.len()).await?;
        eprintln!(
            "fleet bench (direct, {round}): {} apps applied in {applied:?}, kube-controller-manager done at {floor:?}",
            names.len()
        );
        let key = |what: &str| format!("{round}_{what}");
        result[key("applied_seconds")] = applied.as_secs_f64().into();
        result[key("floor_seconds")] = floor.as_secs_f64().into();
        result[format!("cpu_seconds_{round}")] = serde_json::json!(cpu);
        result[format!("apiserver_requests_per_app_{round}")] = serde_json::json!(served);
    }
    println!("{result}");
    Ok(())
}

/// Flux's Kustomization for app `app`: the flux-benchmark's settings (prune, wait, a 60 m
/// interval, `serviceAccountName`, `targetNamespace`, three substituted variables), reading
/// the app's OCIRepository in the bench namespace `ns`.
fn kustomization(ns: &str, app: &str, namespace: &str, release: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": app, "namespace": ns, "labels": {"strata-e2e/suite": ns}},
        "spec": {
            "interval": "60m", "retryInterval": "2m", "timeout": "5m",
            "path": "./", "prune": true, "wait": true,
            "serviceAccountName": app, "targetNamespace": namespace,
            "sourceRef": {"kind": "OCIRepository", "name": app},
            "postBuild": {"substitute": {"APP": app, "NAMESPACE": namespace, "RELEASE": release}},
        },
    })
}

/// Whether a Kustomization is Ready (its Ready condition True, observed at its generation) at
/// a generation of at least `generation`.
fn ready_at_least(kustomization: &kube::api::DynamicObject, generation: i64) -> bool {
    let at = kustomization.metadata.generation.unwrap_or_default();
    at >= generation
        && kustomization.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "Ready"
                    && c["status"] == "True"
                    && c["observedGeneration"].as_i64() == Some(at)
            })
}

/// The same two rounds, deployed by Flux's kustomize-controller (`$ANCHOR_KUSTOMIZE_CONTROLLER_BIN`,
/// built by hand from its source outside this repository) instead of the layer-controller:
/// one Kustomization per app in place of its AddonsLayer, the flux-benchmark's controller
/// flags (`--concurrent=20`, every namespace watched), admin rights as Flux's own install
/// binds it. Its client limit is off: it turns client-side throttling off when the API server
/// has priority and fairness, as ours has.
async fn anchor_rounds(
    client: &kube::Client,
    applier: &core_k8s::apply::Applier,
    ns: &str,
    names: &[(String, String)],
) -> Result<()> {
    use strata_e2e::services::ServiceProcess;
    let binary = std::env::var("ANCHOR_KUSTOMIZE_CONTROLLER_BIN")?;
    strata_e2e::support::apply_upstream_crd(client, "kustomization-crd.yaml").await?;
    strata_e2e::support::crds_established(client, &["kustomizations.kustomize.toolkit.fluxcd.io"])
        .await?;
    let metrics_addr: std::net::SocketAddr =
        format!("127.0.0.1:{}", strata_e2e::plane::free_port()?).parse()?;
    let metrics = format!("--metrics-addr={metrics_addr}");
    // Extra flags, e.g. its client limit (`--kube-api-qps`, `--kube-api-burst`; Flux ships 50
    // and 300), recorded with the run.
    let extra = std::env::var("BENCH_FLEET_ANCHOR_ARGS").unwrap_or_default();
    let health = format!(
        "--health-addr=127.0.0.1:{}",
        strata_e2e::plane::free_port()?
    );
    let mut args = vec![
        metrics.as_str(),
        &health,
        "--enable-leader-election=false",
        "--watch-all-namespaces=true",
        "--concurrent=20",
        "--log-level=info",
        "--log-encoding=json",
    ];
    args.extend(extra.split_whitespace());
    let controller = ServiceProcess::spawn_with_env_blocking(
        std::path::Path::new(&binary),
        &args,
        &[(
            "KUBECONFIG".into(),
            cluster().kubeconfig().display().to_string(),
        )],
        &std::env::temp_dir().join("strata-bench-logs"),
    )?;
    let pid = controller.pid();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss = rss_kib(pid, "VmRSS:");
    let api = strata_e2e::flux::kustomization_api(client, ns);
    let selector = format!("strata-e2e/suite={ns}");
    let round = async |release: &str, generation: i64| -> Result<(Duration, Floor)> {
        let started = Instant::now();
        let floor = controller_manager_floor(client, names.len(), release, started);
        let ready = tokio::spawn(strata_e2e::bench::all_reached(
            api.clone(),
            selector.clone(),
            names.len(),
            started,
            "Kustomizations Ready",
            move |k: &kube::api::DynamicObject| {
                ready_at_least(k, generation).then(|| write_order(&k.metadata))
            },
        ));
        apply_all(
            applier,
            names
                .iter()
                .map(|(app, namespace)| kustomization(ns, app, namespace, release))
                .collect(),
        )
        .await?;
        let ready = ready.await??;
        let last = ready.values().map(|(t, _)| *t).max().unwrap_or_default();
        let floor = floor.await??;
        ensure_in_order(
            &ready,
            &floor,
            |app| format!("{ns}-{app}"),
            "Kustomizations",
            release,
        )?;
        Ok((last, floor))
    };
    let cost = RoundCost::start(client, Some(("kustomize-controller", &[pid]))).await?;
    let sent_before = anchor_requests(metrics_addr).await?;
    let (create, create_floor) = round("r1", 1).await?;
    let (cpu_create, served_create) = cost.finish(client, names.len()).await?;
    // Its own request rate over the round, against its client limit: above it, the limit did
    // not hold it back.
    let sent_create = anchor_requests(metrics_addr).await? - sent_before;
    let rss_after_first = rss_kib(pid, "VmRSS:");
    eprintln!(
        "fleet bench (kustomize-controller): {} Kustomizations Ready in {create:?} (kube-controller-manager done at {:?}), {sent_create} requests sent",
        names.len(),
        create_floor.done
    );
    let cost = RoundCost::start(client, Some(("kustomize-controller", &[pid]))).await?;
    let (upgrade, upgrade_floor) = round("r2", 2).await?;
    let (cpu_upgrade, _) = cost.finish(client, names.len()).await?;
    let result = serde_json::json!({
        "anchor": "kustomize-controller",
        "anchor_args": extra,
        "controller_manager_qps": controller_manager_qps(),
        "layers": names.len(),
        "objects_per_layer": 4,
        "create_to_all_deployed_seconds": create.as_secs_f64(),
        "create_floor_seconds": create_floor.done.as_secs_f64(),
        "create_deployments_applied_seconds": create_floor.applied.as_secs_f64(),
        "cpu_seconds_create": cpu_create,
        "anchor_requests_create": sent_create,
        "upgrade_to_all_deployed_seconds": upgrade.as_secs_f64(),
        "upgrade_floor_seconds": upgrade_floor.done.as_secs_f64(),
        "upgrade_deployments_applied_seconds": upgrade_floor.applied.as_secs_f64(),
        "cpu_seconds_upgrade": cpu_upgrade,
        "controller_idle_rss_kib": idle_rss,
        "controller_rss_after_create_kib": rss_after_first,
        "controller_peak_rss_kib": rss_kib(pid, "VmHWM:"),
        "controller_sockets_at_end": sockets(pid),
        "apiserver_requests_per_layer_create": served_create,
    });
    println!("{result}");
    drop(controller);
    Ok(())
}

/// Every request the anchor has sent so far (client-go's `rest_client_requests_total`, which
/// controller-runtime serves on its metrics endpoint, in Prometheus' text format).
async fn anchor_requests(metrics: std::net::SocketAddr) -> Result<f64> {
    let (_, body) = strata_e2e::support::http_get(metrics, "/metrics").await?;
    let sent = body
        .lines()
        .filter(|line| line.starts_with("rest_client_requests_total{"))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    Ok(sent)
}

#[tokio::main]
async fn main() -> Result<()> {
    let apps: usize = std::env::var("BENCH_FLEET_LAYERS")
        .ok()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(100);
    let shards: usize = std::env::var("BENCH_FLEET_SHARDS")
        .ok()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1)
        .max(1);
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "fleet").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let applier = core_k8s::apply::Applier::new(client.clone(), "strata-bench");
    let names: Vec<(String, String)> = (0..apps)
        .map(|i| (format!("app{i:04}"), format!("{ns}-app{i:04}")))
        .collect();
    let server = ArtifactServer::start().await?;
    let (url, digest) = server.publish("podinfo.tar.gz", &[("app.yaml", &app_manifests())]);
    let mut setup = Vec::new();
    for (app, namespace) in &names {
        setup.extend(parse_yaml(&app_setup(&ns, app, namespace))?);
        setup.push(source(&ns, app));
    }
    // Namespaces first: applied 16 at a time in any order, a RoleBinding could reach the API
    // server before its namespace existed (a 500-app run failed so, NotFound).
    let (namespaces, rest): (Vec<_>, Vec<_>) = setup
        .into_iter()
        .partition(|doc| doc["kind"] == "Namespace");
    apply_all(&applier, namespaces).await?;
    apply_all(&applier, rest).await?;
    let revision = format!("latest@{digest}");
    futures::stream::iter(&names)
        .map(|(app, _)| {
            set_source_artifact(&client, &ns, "OCIRepository", app, &revision, &url, &digest)
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    eprintln!("fleet bench: {apps} apps set up");
    if std::env::var_os("BENCH_FLEET_DIRECT").is_some() {
        return direct_round(&client, &applier, &names).await;
    }
    if std::env::var_os("ANCHOR_KUSTOMIZE_CONTROLLER_BIN").is_some() {
        return anchor_rounds(&client, &applier, &ns, &names).await;
    }

    let selector = format!("strata-e2e/suite={ns}");
    let extra = std::env::var("BENCH_LAYER_CONTROLLER_ARGS").unwrap_or_default();
    let impersonation = format!("layerController.impersonation[0].namespace={ns}");
    let key = layer_controller::keys::SHARD_LABEL;
    let mut controllers = Vec::new();
    // The command line each controller ran with (the last shard's), for the report.
    let mut controller_args = String::new();
    for shard in 0..shards {
        let shard_selector = match (shards, shard_of(shard, shards)) {
            (1, _) => selector.clone(),
            (_, None) => format!("{selector},!{key}"),
            (_, Some(name)) => format!("{selector},{key}={name}"),
        };
        let mut args = vec![
            "--leader-elect=false",
            "--layer-selector",
            &shard_selector,
            "--default-source-namespace",
            &ns,
        ];
        if !extra
            .split_whitespace()
            .any(|w| w.starts_with("--sync-period"))
        {
            args.extend(["--sync-period", LAYER_INTERVAL]);
        }
        args.extend(extra.split_whitespace());
        controller_args = args.join(" ");
        controllers.push(spawn_measured_with(
            "LAYER_CONTROLLER_BIN",
            "layer-controller",
            &args,
            &[&impersonation],
        )?);
    }
    let pids: Vec<u32> = controllers.iter().map(|c| c.pid()).collect();
    let sum = |probe: &dyn Fn(u32) -> u64| pids.iter().map(|p| probe(*p)).sum::<u64>();
    // Sampled through both rounds: the most sockets the controllers held at once.
    let peak_sockets = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, on, pids) = (peak_sockets.clone(), sampling.clone(), pids.clone());
        tokio::spawn(async move {
            while on.load(Ordering::Relaxed) {
                peak.fetch_max(pids.iter().map(|p| sockets(*p)).sum(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss = sum(&|p| rss_kib(p, "VmRSS:"));
    let api: Api<AddonsLayer> = Api::all(client.clone());

    // One round: every layer applied at `release` at once, timed until each is Deployed as
    // `done` says, beside kube-controller-manager's floor. (all Deployed, floor, applied in)
    let round = async |release: &str, done: fn(&AddonsLayer) -> bool| -> Result<_> {
        let started = Instant::now();
        let floor = controller_manager_floor(&client, apps, release, started);
        let deployed = tokio::spawn(strata_e2e::bench::all_reached(
            api.clone(),
            selector.clone(),
            apps,
            started,
            "layers Deployed",
            move |layer: &AddonsLayer| {
                let deployed = layer.status.as_ref()?.state.as_deref() == Some("Deployed");
                (deployed && done(layer)).then(|| write_order(&layer.metadata))
            },
        ));
        apply_all(
            &applier,
            names
                .iter()
                .enumerate()
                .map(|(i, (app, namespace))| {
                    layer(&ns, app, namespace, release, shard_of(i, shards).as_deref())
                })
                .collect(),
        )
        .await?;
        let applied = started.elapsed();
        let times = deployed.await??;
        let total = times.values().map(|(t, _)| *t).max().unwrap_or_default();
        let floor = floor.await??;
        // A layer (cluster-scoped) is named after its app's namespace.
        ensure_in_order(&times, &floor, str::to_string, "layers", release)?;
        Ok((total, floor, applied))
    };

    // Round 1: every layer created at once; where the CPU went meanwhile, and what the API
    // server served.
    let cost = RoundCost::start(&client, Some(("layer-controller", &pids))).await?;
    // The profile covers the create round, or the upgrade round with
    // BENCH_FLEET_APISERVER_PROFILE_ROUND=upgrade.
    let profiled_round =
        std::env::var("BENCH_FLEET_APISERVER_PROFILE_ROUND").unwrap_or_else(|_| "create".into());
    let start_profile = |round: &str| {
        std::env::var_os("BENCH_FLEET_APISERVER_PROFILE")
            .filter(|_| profiled_round == round)
            .map(|to| {
                let seconds = std::env::var("BENCH_FLEET_APISERVER_PROFILE_SECONDS")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(30);
                tokio::spawn(apiserver_profile(client.clone(), seconds, to.into()))
            })
    };
    let profile = start_profile("create");
    let (first_total, first_floor, created) = round("r1", |_| true).await?;
    let (cpu_create, served_create) = cost.finish(&client, apps).await?;
    if let Some(profile) = profile {
        profile.await??;
    }
    let requests_first = requests(&controllers).await;
    let reconciles_first = reconciles(&controllers).await;
    let objects_first = objects_sent(&controllers).await;
    let rss_after_first = sum(&|p| rss_kib(p, "VmRSS:"));
    let sockets_after_first = sum(&sockets);
    eprintln!(
        "fleet bench: {apps} layers Deployed in {first_total:?} (created in {created:?}, the last Deployment applied at {:?}, kube-controller-manager done at {:?}), RSS {} MiB, {sockets_after_first} sockets",
        first_floor.applied,
        first_floor.done,
        rss_after_first / 1024
    );

    // Round 2: one variable changes in every layer (a new release), every layer re-applies.
    let cost = RoundCost::start(&client, Some(("layer-controller", &pids))).await?;
    let profile = start_profile("upgrade");
    let (second_total, second_floor, _) = round("r2", |layer| {
        layer.metadata.generation > Some(1)
            && layer.status.as_ref().and_then(|s| s.observed_generation)
                == layer.metadata.generation
    })
    .await?;
    let (cpu_upgrade, served_upgrade) = cost.finish(&client, apps).await?;
    if let Some(profile) = profile {
        profile.await??;
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.await?;
    let requests_total = requests(&controllers).await;
    let reconciles_total = reconciles(&controllers).await;
    let objects_total = objects_sent(&controllers).await;
    let observer = match std::env::var_os("DRIFT_OBSERVER_BIN") {
        Some(_) => Some(observe_fleet(&api, &selector, &ns, &names, &impersonation).await?),
        None => None,
    };
    let kept = match std::env::var_os("BENCH_FLEET_ROLLBACK") {
        Some(_) => Some(kept_revisions(&client, &ns, apps).await?),
        None => None,
    };
    let per_layer = |by_verb: &BTreeMap<String, f64>| -> serde_json::Value {
        by_verb
            .iter()
            .map(|(verb, n)| (verb.clone(), serde_json::json!(n / apps as f64)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let result = serde_json::json!({
        "controller_manager_qps": controller_manager_qps(),
        "shards": shards,
        "controller_peak_rss_kib_per_shard": pids.iter().map(|p| rss_kib(*p, "VmHWM:")).collect::<Vec<_>>(),
        "layers": apps,
        "objects_per_layer": 4,
        "create_to_all_deployed_seconds": first_total.as_secs_f64(),
        "create_floor_seconds": first_floor.done.as_secs_f64(),
        "create_deployments_applied_seconds": first_floor.applied.as_secs_f64(),
        "cpu_seconds_create": cpu_create,
        "upgrade_to_all_deployed_seconds": second_total.as_secs_f64(),
        "upgrade_floor_seconds": second_floor.done.as_secs_f64(),
        "upgrade_deployments_applied_seconds": second_floor.applied.as_secs_f64(),
        "cpu_seconds_upgrade": cpu_upgrade,
        "apiserver_requests_per_layer_upgrade": served_upgrade,
        "controller_idle_rss_kib": idle_rss,
        "controller_rss_after_create_kib": rss_after_first,
        "controller_peak_rss_kib": sum(&|p| rss_kib(p, "VmHWM:")),
        "controller_peak_sockets": peak_sockets.load(Ordering::Relaxed),
        "controller_sockets_at_end": sum(&sockets),
        "requests_per_layer_create": per_layer(&requests_first),
        "apiserver_requests_per_layer_create": served_create,
        "requests_per_layer_both_rounds": per_layer(&requests_total),
        "reconciles_per_layer_create": reconciles_first / apps as f64,
        "reconciles_per_layer_upgrade": (reconciles_total - reconciles_first) / apps as f64,
        // What each round sent and left unsent, per layer (the controllers' counters): above
        // 4.00 in the create round, some layer was re-applied within it.
        "applied_objects_per_layer_create": objects_first.0 / apps as f64,
        "applied_objects_per_layer_upgrade": (objects_total.0 - objects_first.0) / apps as f64,
        "unchanged_objects_per_layer_upgrade": (objects_total.1 - objects_first.1) / apps as f64,
        "controller_args": controller_args,
        "observer": observer,
        "rollback": kept.is_some(),
        "kept_revision_secrets": kept.map(|(n, _)| n),
        "kept_bytes_per_layer": kept.map(|(_, b)| b),
    });
    println!("{result}");
    drop(controllers);
    Ok(())
}
