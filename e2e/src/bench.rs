//! What the `make bench` drivers (`e2e/examples/*_bench.rs`) share: starting the measured
//! service from a release binary named by an environment variable, reading its memory and
//! CPU from `/proc`, and percentiles.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::runtime::WatchStreamExt as _;

use anyhow::{Context as _, Result};

use crate::plane::free_port;
use crate::services::ServiceProcess;
use crate::support::cluster;

/// Starts the binary of `service` named by `$variable` against the test cluster, as the
/// ServiceAccount the chart makes for it (as every test does), with a free admin address and
/// `args`; logs go to the temp dir's `strata-bench-logs`.
pub fn spawn_measured(variable: &str, service: &str, args: &[&str]) -> Result<ServiceProcess> {
    spawn_measured_with(variable, service, args, &[])
}

/// [`spawn_measured`] for a release installed with these extra chart `values` (`--set`).
pub fn spawn_measured_with(
    variable: &str,
    service: &str,
    args: &[&str],
    values: &[&str],
) -> Result<ServiceProcess> {
    let binary = measured_binary(variable)?;
    let kubeconfig =
        crate::services::chart_identity_with(cluster().kubeconfig(), service, args, values)?;
    let admin = format!("127.0.0.1:{}", free_port()?);
    let mut all = vec!["--admin-address", admin.as_str()];
    all.extend_from_slice(args);
    ServiceProcess::spawn_blocking(
        &binary,
        &kubeconfig,
        &all,
        &std::env::temp_dir().join("strata-bench-logs"),
    )
}

/// How a measured rollout-operator is started: with Strata's flags, or with the Grafana
/// operator's command line (`BENCH_STYLE=anchor`), which the anchor's binary and Strata's in
/// compatibility mode both take — the side-by-side runs use it for both.
pub fn anchor_style() -> bool {
    std::env::var("BENCH_STYLE").is_ok_and(|s| s == "anchor")
}

/// Starts the binary named by `$variable` with the Grafana operator's flags for namespace
/// `ns` (kubeconfig and API URL of the test cluster, a free admin port, log level warn) and
/// `extra`; returns it with its admin address. Admin rights, beyond what the chart grants:
/// the anchor and our compatibility mode run side by side under one identity, and the
/// anchor's own RBAC is not ours to reproduce here.
pub fn spawn_anchor_style(
    variable: &str,
    ns: &str,
    extra: &[&str],
) -> Result<(ServiceProcess, std::net::SocketAddr)> {
    spawn_binary_anchor_style(
        &measured_binary(variable)?,
        ns,
        cluster().kubeconfig(),
        extra,
    )
}

/// The measured binary: the path in `$variable`.
pub fn measured_binary(variable: &str) -> Result<std::path::PathBuf> {
    Ok(std::env::var(variable)
        .with_context(|| format!("${variable} is not set"))?
        .into())
}

/// [`spawn_anchor_style`] for the binary at `binary`, acting as whoever `kubeconfig` names (a
/// ServiceAccount's token, say, so that kube-apiserver's audit log tells the binary's requests
/// from the driver's).
pub fn spawn_binary_anchor_style(
    binary: &Path,
    ns: &str,
    kubeconfig: &Path,
    extra: &[&str],
) -> Result<(ServiceProcess, std::net::SocketAddr)> {
    let server = crate::support::kubeconfig_server(kubeconfig)?;
    let port = free_port()?;
    let args = [
        format!("-kubernetes.namespace={ns}"),
        format!("-kubernetes.config-file={}", kubeconfig.display()),
        format!("-kubernetes.api-url={server}"),
        format!("-server.port={port}"),
        "-log.level=warn".to_string(),
    ];
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend_from_slice(extra);
    let process = ServiceProcess::spawn_plain_blocking(
        binary,
        &all,
        &std::env::temp_dir().join("strata-bench-logs"),
    )?;
    Ok((process, ([127, 0, 0, 1], port).into()))
}

/// A `/proc/<pid>/status` memory figure in KiB: `VmRSS:` (now) or `VmHWM:` (peak); 0 when
/// the process is gone.
pub fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// User + system CPU time of a process so far, in clock ticks (100 per second on Linux).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// Deletes the bench's layers (`selector`) through their layer-controller, which tears them
/// down dependents first, and waits until they are gone (up to 5 min; best effort).
pub async fn tear_down_layers(api: &kube::Api<layer_controller::crd::AddonsLayer>, selector: &str) {
    let _ = cluster()
        .kubectl()
        .args(["delete", "addonslayer", "-l", selector, "--wait=false"])
        .output();
    let _ = crate::support::eventually(
        "layers deleted",
        std::time::Duration::from_secs(300),
        || async {
            let left = api
                .list(&kube::api::ListParams::default().labels(selector))
                .await?;
            Ok(left.items.is_empty().then_some(()))
        },
    )
    .await;
}

/// The `p` quantile (0..=1) of an ascending slice by the nearest-rank method: the smallest
/// value with at least `p` of the samples at or below it (rank `ceil(p·n)`, at least 1); 0 for
/// an empty slice.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Watches the layers `selector` picks until `count` of them are Deployed and taken by
/// `accept` (at the revision or generation wanted, say); returns when, since `started`, each
/// got there and at which revision. Fails after 20 minutes.
pub async fn layers_deployed(
    api: kube::Api<layer_controller::crd::AddonsLayer>,
    selector: String,
    count: usize,
    started: Instant,
    accept: impl Fn(&layer_controller::crd::AddonsLayer) -> bool,
) -> Result<std::collections::BTreeMap<String, (Duration, String)>> {
    all_reached(api, selector, count, started, "layers Deployed", |layer| {
        let status = layer.status.as_ref()?;
        (status.state.as_deref() == Some("Deployed") && accept(layer))
            .then(|| status.revision.clone().unwrap_or_default())
    })
    .await
}

/// Watches the objects `selector` picks until `count` of them have reached what `reached`
/// looks for (it returns what to record then, `None` before); returns when, since `started`,
/// each first got there, and what was recorded. Fails after 20 minutes, saying how many of
/// the `what` (e.g. "layers Deployed") there were.
pub async fn all_reached<K, V>(
    api: kube::Api<K>,
    selector: String,
    count: usize,
    started: Instant,
    what: &str,
    reached: impl Fn(&K) -> Option<V>,
) -> Result<std::collections::BTreeMap<String, (Duration, V)>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut times = std::collections::BTreeMap::new();
    let stream = kube::runtime::watcher(
        api,
        kube::runtime::watcher::Config::default().labels(&selector),
    )
    .applied_objects();
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::sleep(Duration::from_secs(1200));
    tokio::pin!(deadline);
    while times.len() < count {
        tokio::select! {
            () = &mut deadline => anyhow::bail!("not all {what} within 1200 s ({} were)", times.len()),
            next = stream.next() => {
                let object = next.context("watch ended")??;
                if let Some(value) = reached(&object) {
                    times.entry(object.name_any()).or_insert_with(|| (started.elapsed(), value));
                }
            }
        }
    }
    Ok(times)
}

/// How many of the layers `selector` picks the drift-observer reports clean
/// (`Drifted=False`).
pub async fn layers_reported_clean(
    api: &kube::Api<layer_controller::crd::AddonsLayer>,
    selector: &str,
) -> Result<usize> {
    let layers = api
        .list(&kube::api::ListParams::default().labels(selector))
        .await?;
    Ok(layers
        .items
        .iter()
        .filter(|l| {
            l.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Drifted" && c.status == "False")
            })
        })
        .count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        // Expected values from the definition, counted by hand: the p-quantile is the
        // smallest sample with at least p·n samples at or below it.
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        let ten: Vec<f64> = (1..=10).map(|i| f64::from(i) * 10.0).collect();
        let cases: &[(&str, &[f64], f64, f64)] = &[
            ("median of 1..100 is the 50th value", &hundred, 0.5, 50.0),
            ("p99 of 1..100", &hundred, 0.99, 99.0),
            ("p90 of 1..100", &hundred, 0.9, 90.0),
            ("max", &hundred, 1.0, 100.0),
            ("p0 is the minimum", &hundred, 0.0, 1.0),
            ("p50 of 10 values is the 5th", &ten, 0.5, 50.0),
            (
                "p91 of 10 values rounds the rank up to the 10th",
                &ten,
                0.91,
                100.0,
            ),
            ("p11 of 10 values is the 2nd", &ten, 0.11, 20.0),
            ("one sample", &[7.0], 0.5, 7.0),
            ("empty", &[], 0.5, 0.0),
        ];
        for (case, values, p, want) in cases {
            assert_eq!(percentile(values, *p), *want, "{case}");
        }
    }

    #[test]
    fn this_process_has_memory_and_cpu() {
        let pid = std::process::id();
        // Burn CPU until the kernel has charged at least one tick to this process.
        let started = std::time::Instant::now();
        let mut spin = 0u64;
        while cpu_ticks(pid) == 0 {
            assert!(started.elapsed().as_secs() < 10, "no CPU time ever charged");
            for i in 0..1_000_000u64 {
                spin = std::hint::black_box(spin.wrapping_add(i * i));
            }
        }
        assert!(rss_kib(pid, "VmRSS:") > 0);
        assert!(rss_kib(pid, "VmHWM:") >= rss_kib(pid, "VmRSS:"));
        assert_eq!(rss_kib(u32::MAX, "VmRSS:"), 0);
        assert_eq!(cpu_ticks(u32::MAX), 0);
    }
}
