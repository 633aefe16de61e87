//! `make bench` part: the drift-observer with 5,000 observed objects in 50 layers (ConfigMap
//! sources, 100 ConfigMaps each; 25 layers in Warn mode, 25 in Heal mode) next to a real
//! layer-controller. Measures the observer's RSS, edit → drift in the layer's status (Warn
//! layers), edit → healed (Heal layers), the API requests per edit (from kube-apiserver's own
//! request counters), and, for comparison, a Krake-style observer driven by this program: a GET
//! of every object, then a 2 s sleep, over and over. Prints one JSON line.
//!
//! The observer is `$DRIFT_OBSERVER_BIN`, the layer-controller `$LAYER_CONTROLLER_BIN`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark driver fails loudly

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use layer_controller::crd::AddonsLayer;
use serde_json::json;
use strata_e2e::bench::{layers_reported_clean, percentile, rss_kib, spawn_measured};
use strata_e2e::flux::install_layer_crds;
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually, http_get};

const LAYERS: usize = 50;
const OBJECTS: usize = 100;
const DETECT_EDITS: usize = 60;
const HEAL_EDITS: usize = 20;
const POLL_SECONDS: u64 = 40;
const POLL_CONCURRENCY: usize = 16;

fn object_name(layer: usize, object: usize) -> String {
    format!("l{layer:02}-o{object:03}")
}

fn is_warn(layer: usize) -> bool {
    layer.is_multiple_of(2)
}

async fn metric(admin: std::net::SocketAddr, name: &str) -> f64 {
    let Ok((_, body)) = http_get(admin, "/metrics").await else {
        return 0.0;
    };
    body.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// kube-apiserver's `apiserver_request_total`, summed per (verb, resource, subresource,
/// dry run).
async fn apiserver_requests(client: &Client) -> Result<BTreeMap<String, f64>> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let label = |name: &str| {
            series
                .split(&format!("{name}=\""))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let key = format!(
            "{} {}{}{}",
            label("verb"),
            label("resource"),
            match label("subresource").as_str() {
                "" => String::new(),
                s => format!("/{s}"),
            },
            if label("dry_run").is_empty() {
                ""
            } else {
                " (dry run)"
            }
        );
        *out.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    Ok(out)
}

fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// Follows every layer's `status.drift` and records when each (object, actual value) first
/// appeared.
fn follow_drift(
    api: Api<AddonsLayer>,
    selector: String,
) -> Arc<Mutex<BTreeMap<(String, String), Instant>>> {
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let out = seen.clone();
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default().labels(&selector)).applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(layer)) = stream.next().await {
            let now = Instant::now();
            for entry in layer.status.unwrap_or_default().drift {
                seen.lock()
                    .unwrap()
                    .entry((entry.object.clone(), entry.actual.clone()))
                    .or_insert(now);
            }
        }
    });
    out
}

#[tokio::main]
async fn main() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "bench-drift").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let selector = format!("strata-e2e/suite={ns}");
    for l in 0..LAYERS {
        let docs: Vec<String> = (0..OBJECTS)
            .map(|o| {
                format!(
                    "    apiVersion: v1\n    kind: ConfigMap\n    metadata: {{name: {}, namespace: {ns}}}\n    data: {{value: \"0\", owner: bench}}\n",
                    object_name(l, o)
                )
            })
            .collect();
        let source = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: src-l{l:02}, namespace: {ns}, labels: {{strata.dev/layer-source: \"true\"}}}}\ndata:\n  objects.yaml: |\n{}",
            docs.join("    ---\n")
        );
        apply_yaml(&client, &ns, &source).await?;
        let mode = if is_warn(l) { "Warn" } else { "Heal" };
        let layer = format!(
            "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {ns}-l{l:02}, labels: {{strata-e2e/suite: {ns}}}}}\nspec: {{version: 1.0.0, interval: 1h, source: {{kind: ConfigMap, name: src-l{l:02}, namespace: {ns}, path: ./}}, drift: {{mode: {mode}}}}}\n"
        );
        apply_yaml(&client, &ns, &layer).await?;
    }
    let controller = spawn_measured(
        "LAYER_CONTROLLER_BIN",
        "layer-controller",
        &[
            "--leader-elect=false",
            "--sync-period",
            "1h",
            "--layer-selector",
            &selector,
            "--default-source-namespace",
            &ns,
        ],
    )?;
    let api: Api<AddonsLayer> = Api::all(client.clone());
    let setup = Instant::now();
    eventually("every layer Deployed", Duration::from_secs(600), || async {
        let layers = api
            .list(&kube::api::ListParams::default().labels(&selector))
            .await?;
        let deployed = layers
            .items
            .iter()
            .filter(|l| l.status.as_ref().and_then(|s| s.state.as_deref()) == Some("Deployed"))
            .count();
        Ok((deployed == LAYERS).then_some(()))
    })
    .await?;
    let deployed_seconds = setup.elapsed().as_secs_f64();

    // Read-only itself, the observer dry-runs as the identity that applies (the chart's
    // wiring; without it no dry run is authorized and no drift is ever reported).
    let apply_as = format!("--apply-as=system:serviceaccount:{ns}:layer-controller");
    let observer = spawn_measured(
        "DRIFT_OBSERVER_BIN",
        "drift-observer",
        &[
            "--leader-elect=false",
            "--layer-selector",
            &selector,
            "--default-source-namespace",
            &ns,
            &apply_as,
        ],
    )?;
    let admin = observer.admin.context("observer admin address")?;
    let total = (LAYERS * OBJECTS) as f64;
    let synced = Instant::now();
    eventually("observer synced", Duration::from_secs(600), || async {
        let observed = metric(admin, "drift_observer_objects_observed").await;
        let checks = metric(admin, "drift_observer_checks_total").await;
        let reported = layers_reported_clean(&api, &selector).await?;
        Ok((observed >= total && checks >= total && reported == LAYERS).then_some(()))
    })
    .await?;
    let sync_seconds = synced.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = observer.pid();
    let idle_rss = rss_kib(pid, "VmRSS:");
    let startup_checks = metric(admin, "drift_observer_checks_total").await;

    // Edit → drift in status, on Warn layers (the drift stays, so status shows it).
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let editor = PatchParams {
        field_manager: Some("bench-editor".into()),
        ..Default::default()
    };
    let seen = follow_drift(api.clone(), selector.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let requests_before = apiserver_requests(&client).await?;
    let checks_before = metric(admin, "drift_observer_checks_total").await;
    let mut detect_ms = Vec::new();
    for i in 0..DETECT_EDITS {
        let layer = (i * 2) % LAYERS; // even: Warn
        let name = object_name(layer, (i * 7) % OBJECTS);
        let value = format!("edit-{i}");
        let started = Instant::now();
        configmaps
            .patch(
                &name,
                &editor,
                &Patch::Merge(json!({"data": {"value": value}})),
            )
            .await?;
        let key = (format!("ConfigMap {ns}/{name}"), value.clone());
        let at = eventually(
            &format!("drift of {name} reported"),
            Duration::from_secs(30),
            || {
                let seen = seen.clone();
                let key = key.clone();
                async move { Ok(seen.lock().unwrap().get(&key).copied()) }
            },
        )
        .await?;
        detect_ms.push(at.saturating_duration_since(started).as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Let the last status write land before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = delta(&requests_before, &apiserver_requests(&client).await?);
    let checks_during = metric(admin, "drift_observer_checks_total").await - checks_before;
    detect_ms.sort_by(f64::total_cmp);

    // Edit → healed, on Heal layers.
    let mut heal_ms = Vec::new();
    for i in 0..HEAL_EDITS {
        let layer = (i * 2 + 1) % LAYERS; // odd: Heal
        let name = object_name(layer, (i * 13) % OBJECTS);
        let started = Instant::now();
        configmaps
            .patch(
                &name,
                &editor,
                &Patch::Merge(json!({"data": {"value": format!("heal-{i}")}})),
            )
            .await?;
        eventually(&format!("{name} healed"), Duration::from_secs(60), || {
            let configmaps = configmaps.clone();
            let name = name.clone();
            async move {
                let cm = configmaps.get(&name).await?;
                let value = cm.data.unwrap_or_default().get("value").cloned();
                Ok((value.as_deref() == Some("0")).then_some(()))
            }
        })
        .await?;
        heal_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    heal_ms.sort_by(f64::total_cmp);
    let loaded_rss = rss_kib(pid, "VmRSS:");
    let peak_rss = rss_kib(pid, "VmHWM:");
    // A quiet minute of the observer: requests it makes with nothing changing.
    let quiet_before = apiserver_requests(&client).await?;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let quiet = delta(&quiet_before, &apiserver_requests(&client).await?);
    drop(observer);

    // Krake-style: GET every object, sleep 2 s, repeat; edits land at known times.
    let names: Vec<String> = (0..LAYERS)
        .flat_map(|l| (0..OBJECTS).map(move |o| object_name(l, o)))
        .collect();
    let poll_started = Instant::now();
    let mut gets = 0u64;
    let mut rounds = Vec::new();
    let mut poll_detect_ms = Vec::new();
    let mut pending: Option<(String, String, Instant)> = None;
    let mut edit = 0;
    while poll_started.elapsed() < Duration::from_secs(POLL_SECONDS) {
        if pending.is_none() {
            let name = object_name((edit * 2) % LAYERS, (edit * 11 + 3) % OBJECTS);
            let value = format!("poll-{edit}");
            configmaps
                .patch(
                    &name,
                    &editor,
                    &Patch::Merge(json!({"data": {"value": value}})),
                )
                .await?;
            pending = Some((name, value, Instant::now()));
            edit += 1;
        }
        let round = Instant::now();
        let results: Vec<(String, Option<String>)> = futures::stream::iter(names.iter().cloned())
            .map(|name| {
                let configmaps = configmaps.clone();
                async move {
                    let value = configmaps
                        .get(&name)
                        .await
                        .ok()
                        .and_then(|c| c.data.unwrap_or_default().get("value").cloned());
                    (name, value)
                }
            })
            .buffer_unordered(POLL_CONCURRENCY)
            .collect()
            .await;
        gets += results.len() as u64;
        rounds.push(round.elapsed().as_secs_f64());
        if let Some((name, value, at)) = &pending
            && results
                .iter()
                .any(|(n, v)| n == name && v.as_deref() == Some(value.as_str()))
        {
            poll_detect_ms.push(at.elapsed().as_secs_f64() * 1000.0);
            pending = None;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let poll_elapsed = poll_started.elapsed().as_secs_f64();
    poll_detect_ms.sort_by(f64::total_cmp);
    if detect_ms.is_empty() || heal_ms.is_empty() {
        bail!("no measurements");
    }
    rounds.sort_by(f64::total_cmp);
    let round_median = percentile(&rounds, 0.5);
    let edits = DETECT_EDITS as f64;
    let per_edit: BTreeMap<String, f64> = requests
        .iter()
        .filter(|(k, _)| k.as_str() != "PATCH configmaps")
        .map(|(k, v)| (k.clone(), v / edits))
        .collect();
    let result = json!({
        "layers": LAYERS,
        "objects": LAYERS * OBJECTS,
        "deployed_seconds": deployed_seconds,
        "observer_sync_seconds": sync_seconds,
        "startup_checks": startup_checks,
        "idle_rss_kib": idle_rss,
        "loaded_rss_kib": loaded_rss,
        "peak_rss_kib": peak_rss,
        "detect_ms": detect_ms,
        "detect_ms_p50": percentile(&detect_ms, 0.5),
        "detect_ms_p99": percentile(&detect_ms, 0.99),
        "detect_ms_max": percentile(&detect_ms, 1.0),
        "heal_ms_p50": percentile(&heal_ms, 0.5),
        "heal_ms_p90": percentile(&heal_ms, 0.9),
        "heal_ms_max": percentile(&heal_ms, 1.0),
        "edits": DETECT_EDITS,
        "checks_per_edit": checks_during / edits,
        "requests_per_edit": per_edit,
        "quiet_requests_20s": quiet,
        "poll_seconds": poll_elapsed,
        "poll_gets": gets,
        "poll_requests_per_minute": gets as f64 / poll_elapsed * 60.0,
        "poll_round_seconds_median": round_median,
        "poll_detect_ms": poll_detect_ms,
    });
    println!("{result}");
    strata_e2e::bench::tear_down_layers(&api, &selector).await;
    drop(controller);
    Ok(())
}
