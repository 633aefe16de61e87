//! `make bench` part (#55 item 3): a node drain's eviction storm through kube-apiserver with
//! the pod-eviction webhook of `$WEBHOOK_BIN` on the path — Strata's rollout-operator or the
//! anchor's binary, both started with the anchor's command line (`BENCH_STYLE` is ignored:
//! the storm is always run as the anchor's install runs it).
//!
//! `BENCH_DRAIN_GROUPS` zone-aware groups (default 6) of three zones × `BENCH_DRAIN_REPLICAS`
//! pods (default 4), one ZoneAwarePodDisruptionBudget each (one unavailable pod); every pod
//! evicted at once, each refusal retried after `BENCH_DRAIN_RETRY_MS` (default 10), until each
//! pod was evicted once or `BENCH_DRAIN_LIMIT_S` (default 120) passed.
//!
//! Measured from outside the binary: each eviction's latency as the caller saw it (through
//! kube-apiserver, the webhook's review included), the answers by code, the pods' states from
//! a watch of the driver's own (every budget breach is listed in the row), and the
//! binary's own requests to kube-apiserver during the storm from kube-apiserver's audit log
//! (the binary runs as a ServiceAccount of its own, which the plane's audit policy records).
//! Prints one JSON line.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark driver fails loudly

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use strata_e2e::bench::{
    cpu_ticks, measured_binary, percentile, rss_kib, spawn_binary_anchor_style,
};
use strata_e2e::drain::{Fleet, Watch, storm, webhook_serving};
use strata_e2e::plane::free_port;
use strata_e2e::support::{
    TestNamespace, cluster, eventually, http_get, service_account_kubeconfig,
};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The size of the audit log now: the storm's requests are the lines written after it.
fn audit_offset(log: &std::path::Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

/// The requests `user` made after `offset`, by `verb resource`.
fn requests_since(
    log: &std::path::Path,
    offset: u64,
    user: &str,
) -> Result<BTreeMap<String, usize>> {
    let mut file = std::fs::File::open(log)?;
    file.seek(std::io::SeekFrom::Start(offset))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let mut by = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue; // the last line may be half-written
        };
        if event["user"]["username"] != user {
            continue;
        }
        let subresource = event["objectRef"]["subresource"]
            .as_str()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        let key = format!(
            "{} {}{subresource}",
            event["verb"].as_str().unwrap_or("?"),
            event["objectRef"]["resource"].as_str().unwrap_or("?")
        );
        *by.entry(key).or_default() += 1;
    }
    Ok(by)
}

#[tokio::main]
async fn main() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "bench-drain").await?;
    let ns = ns.name.clone();
    let audit = cluster()
        .audit_log()
        .context("the storm's API requests are read from the local plane's audit log")?;
    let fleet = Fleet::new(
        env_or("BENCH_DRAIN_GROUPS", 6) as usize,
        env_or("BENCH_DRAIN_REPLICAS", 4) as usize,
    );
    fleet.create(&client, &ns).await?;

    // The binary's own identity (cluster-admin: the anchor's RBAC is not ours to reproduce).
    let account = "drain-bench-webhook";
    for args in [
        vec!["create", "serviceaccount", "-n", &ns, account],
        vec![
            "create",
            "clusterrolebinding",
            &ns,
            "--clusterrole=cluster-admin",
            &format!("--serviceaccount={ns}:{account}"),
        ],
    ] {
        let out = cluster().kubectl().args(&args).output()?;
        if !out.status.success() {
            bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let kubeconfig = service_account_kubeconfig(&ns, account)?;
    let user = format!("system:serviceaccount:{ns}:{account}");

    let port = free_port()?;
    let tls_port = format!("-server-tls.port={port}");
    // kube-apiserver calls `https://localhost:<port>`: the certificate each binary issues
    // itself names `localhost` (its `-server-tls.self-signed-cert.dns-name`).
    // `BENCH_DRAIN_ARGS`: more of the anchor's flags for both binaries (space-separated).
    let more = std::env::var("BENCH_DRAIN_ARGS").unwrap_or_default();
    let mut args = vec![
        "-server-tls.enabled=true",
        tls_port.as_str(),
        "-server-tls.self-signed-cert.dns-name=localhost",
    ];
    args.extend(more.split_whitespace());
    let (server, admin) =
        spawn_binary_anchor_style(&measured_binary("WEBHOOK_BIN")?, &ns, &kubeconfig, &args)?;
    eventually("webhook ready", Duration::from_secs(60), || async {
        Ok(matches!(http_get(admin, "/ready").await, Ok((200, _))).then_some(()))
    })
    .await
    .with_context(|| server.logs())?;
    let _hook = strata_e2e::admission::register_pod_eviction_at(&client, &ns, "localhost", port)
        .await
        .with_context(|| server.logs())?;
    webhook_serving(&client, &ns)
        .await
        .with_context(|| server.logs())?;

    let watch = Watch::start(&client, &ns, &fleet);
    let (offset, cpu_before) = (audit_offset(&audit), cpu_ticks(server.pid()));
    let retry = Duration::from_millis(env_or("BENCH_DRAIN_RETRY_MS", 10));
    let limit = Duration::from_secs(env_or("BENCH_DRAIN_LIMIT_S", 120));
    let out = storm(&ns, retry, limit).await?;
    let cpu_seconds = (cpu_ticks(server.pid()) - cpu_before) as f64 / 100.0;
    let peak_rss = rss_kib(server.pid(), "VmHWM:");
    // kube-apiserver writes its audit log in batches: wait for the storm's last events.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = requests_since(&audit, offset, &user)?;
    let worst = watch.worst();
    drop(server);

    let seconds = out.took.as_secs_f64();
    let api_requests: usize = requests.values().sum();
    let l = &out.latencies_ms;
    let result = serde_json::json!({
        "groups": fleet.groups.len(),
        "pods": fleet.pods(),
        "evicted": out.evicted,
        "evictions": out.calls(),
        "seconds": seconds,
        "evictions_per_second": out.calls() as f64 / seconds,
        "answers": out.answers,
        "unexpected": out.unexpected().iter().map(|(_, n)| n).sum::<usize>(),
        "p50_ms": percentile(l, 0.5),
        "p99_ms": percentile(l, 0.99),
        "max_ms": percentile(l, 1.0),
        "api_requests": api_requests,
        "api_requests_per_second": api_requests as f64 / seconds,
        "api_requests_by": requests,
        "breaches": worst.breaches(),
        "server_cpu_seconds": cpu_seconds,
        "peak_rss_kib": peak_rss,
        "retry_ms": retry.as_millis() as u64,
        "limit_s": limit.as_secs(),
        "args": more,
    });
    println!("{result}");
    if !worst.breaches().is_empty() || out.evicted != fleet.pods() {
        eprintln!(
            "drain bench: {} of {} pods evicted, breaches {:?}",
            out.evicted,
            fleet.pods(),
            worst.breaches()
        );
    }
    Ok(())
}
