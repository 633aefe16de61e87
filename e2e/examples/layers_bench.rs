//! `make bench` part: 50 layers × 20 objects in one dependency chain on the local control
//! plane. Measures the initial deploy, then the time from a new source revision to every layer
//! Deployed at it, the per-hop latency (a layer Deployed → its dependent Deployed, which
//! includes the dependent's own 20 applies), and the controller's RSS. Prints one JSON line.
//!
//! The controller binary is `$LAYER_CONTROLLER_BIN` (the bench builds it in release mode).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark driver fails loudly

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use kube::Api;
use layer_controller::crd::AddonsLayer;
use strata_e2e::bench::{layers_deployed, percentile, rss_kib, spawn_measured};
use strata_e2e::flux::{ArtifactServer, create_gitrepository, install_layer_crds, set_artifact};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster};

const LAYERS: usize = 50;
const OBJECTS: usize = 20;

fn revision_files(ns: &str, generation: &str) -> Vec<(String, String)> {
    (0..LAYERS)
        .map(|l| {
            let docs: Vec<String> = (0..OBJECTS)
                .map(|o| {
                    format!(
                        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: l{l:02}-o{o:02}, namespace: {ns}}}\ndata: {{revision: \"{generation}\"}}\n"
                    )
                })
                .collect();
            (format!("l{l:02}/objects.yaml"), docs.join("---\n"))
        })
        .collect()
}

/// When, since `started`, each layer got Deployed at `revision`.
async fn deployed_times(
    api: Api<AddonsLayer>,
    selector: String,
    revision: &'static str,
    started: Instant,
) -> Result<BTreeMap<String, Duration>> {
    let at_revision = move |layer: &AddonsLayer| {
        layer.status.as_ref().and_then(|s| s.revision.as_deref()) == Some(revision)
    };
    let times = layers_deployed(api, selector, LAYERS, started, at_revision).await?;
    Ok(times
        .into_iter()
        .map(|(name, (at, _))| (name, at))
        .collect())
}

#[tokio::main]
async fn main() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "bench-layers").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let server = ArtifactServer::start().await?;
    let publish = |name: &str, generation: &str| {
        let files = revision_files(&ns, generation);
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        server.publish(name, &refs)
    };
    let (url, digest) = publish("r1.tar.gz", "1");
    create_gitrepository(&client, &ns).await?;
    set_artifact(&client, &ns, "main@sha1:r1", &url, &digest).await?;

    let selector = format!("strata-e2e/suite={ns}");
    // Extra controller flags for a diagnostic run (e.g. `--log-filter debug`).
    let extra = std::env::var("BENCH_LAYER_CONTROLLER_ARGS").unwrap_or_default();
    let mut args = vec![
        "--leader-elect=false",
        "--layer-selector",
        &selector,
        "--default-source-namespace",
        &ns,
    ];
    args.extend(extra.split_whitespace());
    let controller = spawn_measured("LAYER_CONTROLLER_BIN", "layer-controller", &args)?;
    let api: Api<AddonsLayer> = Api::all(client.clone());
    let started = Instant::now();
    let initial = tokio::spawn(deployed_times(
        api.clone(),
        selector.clone(),
        "main@sha1:r1",
        started,
    ));
    for l in 0..LAYERS {
        let deps = if l == 0 {
            String::new()
        } else {
            format!("{ns}-l{:02}", l - 1)
        };
        let yaml = format!(
            "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {ns}-l{l:02}, labels: {{strata-e2e/suite: {ns}}}}}\nspec: {{version: 1.0.0, source: {{name: repo, namespace: {ns}, path: ./l{l:02}}}, prereqs: {{dependsOn: [{deps}]}}}}\n"
        );
        apply_yaml(&client, &ns, &yaml).await?;
    }
    let initial = initial.await??;
    let initial_total = initial.values().max().copied().unwrap_or_default();

    // A new revision of the shared source: every layer re-applies, dependency-first.
    let (url, digest) = publish("r2.tar.gz", "2");
    let started = Instant::now();
    let rollout = tokio::spawn(deployed_times(
        api.clone(),
        selector.clone(),
        "main@sha1:r2",
        started,
    ));
    set_artifact(&client, &ns, "main@sha1:r2", &url, &digest).await?;
    let times = rollout.await??;
    let total = times.values().max().copied().unwrap_or_default();
    let mut hops = Vec::with_capacity(LAYERS - 1);
    for l in 1..LAYERS {
        let this = times[&format!("{ns}-l{l:02}")];
        let before = times[&format!("{ns}-l{:02}", l - 1)];
        // A dependent Deployed before its dependency is an ordering violation, not a 0 ms
        // hop: it fails the benchmark.
        let Some(hop) = this.checked_sub(before) else {
            anyhow::bail!(
                "ordering violation: layer l{l:02} Deployed at {this:?}, before its dependency l{:02} at {before:?}",
                l - 1
            );
        };
        hops.push(hop.as_secs_f64() * 1000.0);
    }
    // In chain order, for reading where the slow hops fall (start, end, or scattered).
    eprintln!(
        "layers bench: hops in chain order (ms): {}",
        hops.iter()
            .map(|h| format!("{h:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    eprintln!(
        "layers bench: {} reconciles",
        controller.reconciles().await.unwrap_or(-1.0)
    );
    hops.sort_by(f64::total_cmp);
    let pid = controller.pid();
    let result = serde_json::json!({
        "layers": LAYERS,
        "objects_per_layer": OBJECTS,
        "initial_deploy_seconds": initial_total.as_secs_f64(),
        "revision_to_all_deployed_seconds": total.as_secs_f64(),
        "first_layer_deployed_ms": times[&format!("{ns}-l00")].as_secs_f64() * 1000.0,
        "hop_ms_median": percentile(&hops, 0.5),
        "hop_ms_p90": percentile(&hops, 0.9),
        "hop_ms_max": percentile(&hops, 1.0),
        "controller_rss_kib": rss_kib(pid, "VmRSS:"),
        "controller_peak_rss_kib": rss_kib(pid, "VmHWM:"),
    });
    println!("{result}");
    // Tear down through the controller (dependents first), then stop it.
    strata_e2e::bench::tear_down_layers(&api, &selector).await;
    drop(controller);
    Ok(())
}
