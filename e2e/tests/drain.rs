//! A node drain's eviction storm through kube-apiserver (#55 item 3): every pod of three
//! zone-aware groups is evicted at once, each refusal retried 20 ms later, so kube-apiserver
//! calls the pod-eviction webhook a few hundred times a second. Checked from outside the
//! webhook: the pods' states, from a watch of this test's own, never show more unavailable
//! pods in a zone than its ZoneAwarePodDisruptionBudget allows, nor two zones of a group down
//! at once; every eviction answer kube-apiserver gave is 201 (evicted) or 429 with the reason,
//! never a timeout or a 5xx (the anchor's v0.38.0 changelog: a burst of evictions stalled its
//! client rate limiter and every webhook answered `context canceled`). Twice: under the
//! admission-webhook with Strata's flags, and under the rollout-operator started with the
//! anchor's command line, at the anchor's client-side limit.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use strata_e2e::admission::{namespace_args, register_pod_eviction};
use strata_e2e::drain::{Fleet, Watch, storm, webhook_serving};
use strata_e2e::plane::free_port;
use strata_e2e::services::start_service;
use strata_e2e::support::{TestNamespace, cluster};

/// How soon a refused eviction is tried again: with every pod at once, a few hundred
/// evictions a second.
const RETRY_AFTER: Duration = Duration::from_millis(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_storm_never_exceeds_a_zone_budget_and_every_refusal_is_a_429() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "drain").await?;
    let fleet = Fleet::new(3, 4);
    fleet.create(&client, &ns.name).await?;

    let port = free_port()?;
    let tls = format!("127.0.0.1:{port}");
    let _server = start_service(
        "admission-webhook",
        cluster().kubeconfig(),
        &namespace_args(&ns.name, &tls, "127.0.0.1:9"),
    )?;
    let _hook = register_pod_eviction(&client, &ns.name, port).await?;
    webhook_serving(&client, &ns.name).await?;

    judge(&client, &ns.name, &fleet).await
}

/// The storm under the rollout-operator's compatibility mode, started exactly as the anchor's
/// install starts its binary and so at the anchor's client-side limit (5 requests/s per API
/// group, burst 10): a storm must not queue the webhook behind its own reads until
/// kube-apiserver gives up on it (the anchor's own v0.38.0 stall; read fresh per review, three
/// LISTs each, our drop-in answered most of this storm 500 after 9 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_storm_at_the_anchors_client_limit_is_answered_in_time() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "drain-compat").await?;
    // 72 pods: enough callers that three reads per review at 5 requests/s would outlast
    // kube-apiserver's 10 s call (36 did not: the reads queued ~7 s and were answered).
    let fleet = Fleet::new(6, 4);
    fleet.create(&client, &ns.name).await?;
    let port = free_port()?;
    let tls_port = format!("-server-tls.port={port}");
    let (server, _) = strata_e2e::bench::spawn_binary_anchor_style(
        &strata_e2e::services::bin_dir().join("rollout-operator"),
        &ns.name,
        cluster().kubeconfig(),
        &[
            "-server-tls.enabled=true",
            &tls_port,
            "-server-tls.self-signed-cert.dns-name=localhost",
        ],
    )?;
    let _hook =
        strata_e2e::admission::register_pod_eviction_at(&client, &ns.name, "localhost", port)
            .await
            .with_context(|| server.logs())?;
    webhook_serving(&client, &ns.name)
        .await
        .with_context(|| server.logs())?;
    judge(&client, &ns.name, &fleet)
        .await
        .with_context(|| server.logs())
}

/// Runs the storm on `ns` and judges it from outside the webhook.
async fn judge(client: &kube::Client, ns: &str, fleet: &Fleet) -> Result<()> {
    // The test's own view of the pods, from a watch started before the storm.
    let watch = Watch::start(client, ns, fleet);
    let out = storm(ns, RETRY_AFTER, Duration::from_secs(240)).await?;
    let total = fleet.pods();
    eprintln!(
        "drain: {}/{total} pods evicted in {:?}, {} evictions ({:.0}/s, p99 {:.0} ms): {:?}",
        out.evicted,
        out.took,
        out.calls(),
        out.calls() as f64 / out.took.as_secs_f64(),
        strata_e2e::bench::percentile(&out.latencies_ms, 0.99),
        out.answers
    );
    ensure!(
        out.evicted == total,
        "not every pod was evicted: {:?}",
        out.answers
    );
    ensure!(
        out.unexpected().is_empty(),
        "answers other than 201 and 429: {:?}",
        out.unexpected()
    );
    ensure!(
        out.answers.get("429").copied().unwrap_or(0) > total,
        "the storm was refused less than once per pod: {:?}",
        out.answers
    );
    // Each refusal says why, in the anchor's words.
    ensure!(
        out.refusals
            .iter()
            .all(|m| m.contains("not ready") || m.contains("unknown")),
        "{:?}",
        out.refusals
    );
    let worst = watch.worst();
    ensure!(worst.breaches().is_empty(), "{:?}", worst.breaches());
    ensure!(
        worst.per_zone.values().any(|m| *m == 1),
        "the watch never saw a pod unavailable: {worst:?}"
    );
    Ok(())
}
