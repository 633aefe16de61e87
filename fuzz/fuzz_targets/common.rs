//! Shared by the per-webhook targets: a realistic cluster (three zones of a rollout group with
//! prepare-downscale and leader settings, their pods, a zone-aware PDB, dependent AddonsLayers),
//! so fuzzed reviews reach each handler's deep paths instead of stopping at "not found".

use core_admission::review::Review;
use core_admission::webhooks::{Cluster, Webhook, decide};
use core_rollout::observed::Observed;
use serde_json::{Value, json};

fn state() -> Vec<Value> {
    let mut state = vec![json!({
        "apiVersion": "rollout-operator.grafana.com/v1", "kind": "ZoneAwarePodDisruptionBudget",
        "metadata": {"name": "ingester", "namespace": "mimir"},
        "spec": {"maxUnavailable": 1, "podNamePartitionRegex": "[a-z\\-]+-zone-[a-z]-([0-9]+)",
                 "selector": {"matchLabels": {"rollout-group": "ingester"}}}})];
    for (i, zone) in ["a", "b", "c"].iter().enumerate() {
        let name = format!("ingester-zone-{zone}");
        let mut annotations = json!({
            "grafana.com/prepare-downscale-http-path": "ingester/prepare-shutdown",
            "grafana.com/prepare-downscale-http-port": "8080",
            "grafana.com/min-time-between-zones-downscale": "12h",
            "grafana.com/last-downscale": "2026-01-01T00:00:00Z",
        });
        if i > 0 {
            annotations["grafana.com/rollout-downscale-leader"] =
                Value::String(format!("ingester-zone-{}", ["a", "b", "c"][i - 1]));
        }
        state.push(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "mimir", "annotations": annotations,
                "labels": {"rollout-group": "ingester", "grafana.com/no-downscale": "true",
                           "grafana.com/prepare-downscale": "true", "grafana.com/min-time-between-zones-downscale": "12h"}},
            "spec": {"replicas": 3, "serviceName": "ingester", "selector": {"matchLabels": {"name": name}},
                "template": {"metadata": {"labels": {"name": name, "rollout-group": "ingester"}},
                             "spec": {"containers": [{"name": "c", "image": "x"}]}}},
            "status": {"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3,
                       "currentRevision": "r1", "updateRevision": "r1"}}));
        for p in 0..3 {
            state.push(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-{p}"), "namespace": "mimir",
                    "labels": {"name": name, "rollout-group": "ingester", "controller-revision-hash": "r1"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": "u", "controller": true}]},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running", "containerStatuses": [{"name": "c", "image": "x", "imageID": "",
                    "restartCount": 0, "ready": p != 2 || i != 1, "state": {"running": {}}}]}}));
        }
    }
    for (name, deps) in [("base", json!([])), ("mid", json!(["base@1.0.0"])), ("top", json!(["mid", "base"]))] {
        state.push(json!({
            "apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer", "metadata": {"name": name},
            "spec": {"version": "1.0.0", "source": {"name": "repo", "path": "./layers/x"},
                     "prereqs": {"dependsOn": deps}}}));
    }
    state
}

/// Decodes `data` as an AdmissionReview the way the server does (only what `webhook` reads)
/// and, if it is one, decides it against the realistic cluster. The answer must always be
/// encodable, and the same as the one decided from the fully decoded review.
pub fn review(webhook: Webhook, data: &[u8]) {
    let partial = Review::parse_reading(data, webhook.reads());
    let full = Review::parse(data);
    assert_eq!(partial.is_ok(), full.is_ok(), "decodings disagree: {partial:?} / {full:?}");
    if serde_json::from_slice::<Value>(data).is_err() {
        assert!(partial.is_err(), "accepted a body serde_json refuses");
    }
    let (Ok(review), Ok(full)) = (partial, full) else {
        return;
    };
    let documents = state().into_iter().enumerate().collect();
    let cluster = Cluster::new(Observed::from_documents("fuzz", documents).expect("valid state"));
    let now = "2026-01-01T12:00:00Z".parse().expect("timestamp");
    let decision = decide(webhook, &review, &cluster, now);
    assert_eq!(decision, decide(webhook, &full, &cluster, now), "decisions disagree");
    let answer = review.respond(&decision);
    assert!(answer.get("response").is_some(), "no response in {answer}");
}
