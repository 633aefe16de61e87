//! The Rust side of the core-status benchmark (`make bench`).
//!
//! `status_bench gen OUT.json N` writes a deterministic mixed corpus of N objects: every
//! special-cased kind in several states, plus custom resources with and without conditions.
//! `status_bench run CORPUS.json ITERATIONS [compact|full|decode]` computes every object's
//! status ITERATIONS times and prints one JSON line: throughput and peak memory.
//! - `compact` (default): the corpus is decoded before the clock starts into the compact
//!   status-only form (`core_status::Observed`, what bulk status uses), as the Go harness
//!   decodes into unstructured objects first; only status computation is timed.
//! - `full`: the same, from fully decoded `serde_json::Value` trees.
//! - `decode`: end to end, each pass decodes the file (compact) and computes every status.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark tool: fail loudly

use std::collections::BTreeMap;
use std::time::Instant;

use core_status::Observed;
use serde_json::{Value, json};

/// A tiny deterministic generator (64-bit LCG), so both harnesses see the same corpus.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> i64 {
        (self.next() % n) as i64
    }
}

fn meta(kind: &str, i: usize, generation: i64) -> Value {
    json!({
        "name": format!("{}-{i}", kind.to_lowercase()),
        "namespace": format!("team-{}", i % 17),
        "uid": format!("00000000-0000-4000-8000-{i:012}"),
        "resourceVersion": format!("{}", 1000 + i),
        "generation": generation,
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"app.kubernetes.io/name": kind.to_lowercase(), "app.kubernetes.io/part-of": "bench", "strata.dev/layer": "apps"},
        "annotations": {"strata.dev/revision": "sha256:0123456789abcdef"},
    })
}

fn cond(t: &str, s: &str, reason: &str) -> Value {
    json!({"type": t, "status": s, "reason": reason, "message": format!("{t} is {s}"), "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn pod_template() -> Value {
    json!({"metadata": {"labels": {"app": "bench"}}, "spec": {"containers": [
        {"name": "app", "image": "example.invalid/app:1.2.3", "ports": [{"containerPort": 8080}],
         "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}})
}

fn object(i: usize, rng: &mut Lcg) -> Value {
    let g = 1 + rng.below(5);
    let lag = if rng.below(10) == 0 { 1 } else { 0 };
    let s = 1 + rng.below(5);
    let got = |rng: &mut Lcg| s - rng.below(2);
    match i % 16 {
        0 => {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("Deployment", i, g),
            "spec": {"replicas": s, "progressDeadlineSeconds": 600, "template": pod_template()},
            "status": {"observedGeneration": g - lag, "replicas": got(rng), "updatedReplicas": got(rng), "readyReplicas": got(rng), "availableReplicas": got(rng),
                "conditions": [cond("Available", "True", "MinimumReplicasAvailable"), cond("Progressing", "True", if rng.below(4) == 0 { "ReplicaSetUpdated" } else { "NewReplicaSetAvailable" })]}})
        }
        1 => {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("StatefulSet", i, g),
            "spec": {"replicas": s, "updateStrategy": if rng.below(3) == 0 { json!({"type": "OnDelete"}) } else { json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}) }, "template": pod_template()},
            "status": {"observedGeneration": g, "replicas": s, "readyReplicas": got(rng), "currentReplicas": got(rng), "updatedReplicas": got(rng), "currentRevision": "r1", "updateRevision": if rng.below(2) == 0 { "r1" } else { "r2" }}})
        }
        2 => {
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta("DaemonSet", i, g),
            "spec": {"template": pod_template()},
            "status": {"observedGeneration": g, "desiredNumberScheduled": s, "currentNumberScheduled": got(rng), "updatedNumberScheduled": got(rng), "numberAvailable": got(rng), "numberReady": got(rng)}})
        }
        3 => {
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta("ReplicaSet", i, g),
            "spec": {"replicas": s, "template": pod_template()},
            "status": {"observedGeneration": g, "replicas": s, "fullyLabeledReplicas": got(rng), "availableReplicas": got(rng), "readyReplicas": got(rng)}})
        }
        4 | 5 => {
            let phase =
                ["Running", "Running", "Pending", "Succeeded", "Failed"][rng.below(5) as usize];
            let ready = if rng.below(3) == 0 { "False" } else { "True" };
            let waiting = if rng.below(8) == 0 {
                "CrashLoopBackOff"
            } else {
                "ContainerCreating"
            };
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta("Pod", i, 0), "spec": pod_template()["spec"].clone(),
                "status": {"phase": phase, "conditions": [cond("PodScheduled", if phase == "Pending" && rng.below(2) == 0 { "False" } else { "True" }, "Unschedulable"), cond("Ready", ready, "")],
                    "containerStatuses": [{"name": "app", "ready": ready == "True", "restartCount": 0, "state": if ready == "True" { json!({"running": {}}) } else { json!({"waiting": {"reason": waiting}}) }}]}})
        }
        6 => json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("Job", i, 1),
            "spec": {"completions": s, "parallelism": 1, "template": pod_template()},
            "status": match rng.below(3) { 0 => json!({"startTime": "2026-01-01T00:00:00Z", "succeeded": s, "conditions": [cond("Complete", "True", "")]}),
                1 => json!({"startTime": "2026-01-01T00:00:00Z", "failed": 1, "conditions": [cond("Failed", "True", "BackoffLimitExceeded")]}),
                _ => json!({"startTime": "2026-01-01T00:00:00Z", "active": 1}) }}),
        7 => {
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("CronJob", i, 1), "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": pod_template()}}}})
        }
        8 => {
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("PersistentVolumeClaim", i, 0),
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}, "status": {"phase": if rng.below(4) == 0 { "Pending" } else { "Bound" }}})
        }
        9 => json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("Service", i, 0),
            "spec": {"type": if rng.below(4) == 0 { "LoadBalancer" } else { "ClusterIP" }, "clusterIP": if rng.below(5) == 0 { "" } else { "10.96.0.10" }, "ports": [{"port": 80, "targetPort": 8080}]}}),
        10 => {
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta("PodDisruptionBudget", i, g),
            "spec": {"maxUnavailable": 1}, "status": {"observedGeneration": g - lag, "disruptionsAllowed": 1}})
        }
        11 => {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": meta("CustomResourceDefinition", i, 1),
            "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced"},
            "status": {"conditions": [cond("NamesAccepted", "True", "NoConflicts"), cond("Established", if rng.below(5) == 0 { "False" } else { "True" }, "InitialNamesAccepted")]}})
        }
        12 => {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("ConfigMap", i, 0), "data": {"config.yaml": "key: value\nother: 1\n"}})
        }
        13 => {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("Secret", i, 0), "type": "Opaque", "data": {"token": "c2VjcmV0"}})
        }
        14 => {
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta("Widget", i, g),
            "spec": {"size": s}, "status": {"observedGeneration": g - lag, "conditions": [match rng.below(4) {
                0 => cond("Ready", "True", "Succeeded"), 1 => cond("Ready", "False", "Progressing"),
                2 => cond("Reconciling", "True", "Progressing"), _ => cond("Stalled", "True", "Error") }]}})
        }
        _ => {
            json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "metadata": meta("GitRepository", i, g),
            "spec": {"url": "https://example.invalid/repo.git", "interval": "5m"}})
        }
    }
}

fn peak_rss_kib() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(-1)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match (args.get(1).map(String::as_str), args.len()) {
        (Some("gen"), 4) => {
            let n: usize = args[3].parse().unwrap();
            let mut rng = Lcg(42);
            let corpus: Vec<Value> = (0..n).map(|i| object(i, &mut rng)).collect();
            std::fs::write(&args[2], serde_json::to_vec(&corpus).unwrap()).unwrap();
        }
        (Some("run"), 4 | 5) => {
            let iterations: usize = args[3].parse().unwrap();
            let mode = args.get(4).map_or("compact", String::as_str);
            let raw = std::fs::read_to_string(&args[2]).unwrap();
            run(raw, iterations, mode);
        }
        _ => {
            eprintln!(
                "usage: status_bench gen OUT.json N | run CORPUS.json ITERATIONS [compact|full|decode]"
            );
            std::process::exit(2);
        }
    }
}

/// Resets the peak-RSS counter (Linux `clear_refs` 5), so the peak reported covers what the
/// engine holds and uses from here on, not the loading that came before.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// With `STATUS_OUT` set, every object's status and message of the first pass, one
/// `status<TAB>message` line each, in corpus order: the bench compares them with Go's.
struct PerObject(Option<std::io::BufWriter<std::fs::File>>);

impl PerObject {
    fn from_env() -> Self {
        Self(
            std::env::var_os("STATUS_OUT")
                .map(|p| std::io::BufWriter::new(std::fs::File::create(p).unwrap())),
        )
    }

    fn record(&mut self, it: usize, evaluation: &core_status::Evaluation) {
        use std::io::Write as _;
        if let (0, Some(out)) = (it, self.0.as_mut()) {
            writeln!(
                out,
                "{}\t{}",
                evaluation.status,
                evaluation.message.replace(['\n', '\t'], " ")
            )
            .unwrap();
        }
    }
}

fn run(raw: String, iterations: usize, mode: &str) {
    let now = jiff::Timestamp::now();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_object = PerObject::from_env();
    let mut count = |it: usize, evaluation: &core_status::Evaluation| {
        if it == 0 {
            *counts.entry(evaluation.status.to_string()).or_default() += 1;
        }
        per_object.record(it, evaluation);
        std::hint::black_box(evaluation);
    };
    let mut objects = 0;
    let start;
    match mode {
        "decode" => {
            // End to end: the file's bytes are the input; everything after is the engine's.
            reset_peak_rss();
            start = Instant::now();
            for it in 0..iterations {
                let corpus = Observed::many_from_json(&raw).unwrap();
                objects = corpus.len();
                for object in &corpus {
                    count(it, &object.evaluate(now));
                }
            }
        }
        "full" => {
            // Same input as Go's: full object trees, the file's bytes released.
            let corpus: Vec<Value> = serde_json::from_str(&raw).unwrap();
            drop(raw);
            objects = corpus.len();
            reset_peak_rss();
            start = Instant::now();
            for it in 0..iterations {
                for object in &corpus {
                    count(it, &core_status::evaluate(object, now));
                }
            }
        }
        "compact" => {
            // The projection borrows from the file's bytes, so those stay (and count).
            let corpus = Observed::many_from_json(&raw).unwrap();
            objects = corpus.len();
            reset_peak_rss();
            start = Instant::now();
            for it in 0..iterations {
                for object in &corpus {
                    count(it, &object.evaluate(now));
                }
            }
        }
        other => panic!("unknown mode {other}"),
    }
    let seconds = start.elapsed().as_secs_f64();
    if let Some(mut out) = per_object.0.take() {
        use std::io::Write as _;
        out.flush().unwrap();
    }
    println!(
        "{{\"engine\":\"strata-core-status-{mode}\",\"objects\":{objects},\"iterations\":{iterations},\"seconds\":{seconds:.6},\"objects_per_second\":{:.0},\"peak_rss_kib\":{},\"statuses\":{}}}",
        (objects * iterations) as f64 / seconds,
        peak_rss_kib(),
        serde_json::to_string(&counts).unwrap()
    );
}
