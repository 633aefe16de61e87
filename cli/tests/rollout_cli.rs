//! The `strata rollout plan` contract.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::process::Command;

const STATE: &str = r#"apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: StatefulSet
  metadata:
    name: ingester-zone-a
    namespace: mimir
    labels: {rollout-group: ingester}
  spec:
    replicas: 2
    serviceName: ingester
    updateStrategy: {type: OnDelete}
    selector: {matchLabels: {name: ingester-zone-a}}
    template:
      metadata: {labels: {name: ingester-zone-a}}
      spec: {containers: [{name: i, image: x}]}
  status: {replicas: 2, readyReplicas: 2, currentRevision: r1, updateRevision: r2}
- apiVersion: v1
  kind: Pod
  metadata:
    name: ingester-zone-a-0
    namespace: mimir
    labels: {name: ingester-zone-a, controller-revision-hash: r1}
  spec: {containers: [{name: i, image: x}]}
  status:
    phase: Running
    containerStatuses: [{name: i, image: x, imageID: "", restartCount: 0, ready: true, state: {running: {}}}]
- apiVersion: v1
  kind: Pod
  metadata:
    name: ingester-zone-a-1
    namespace: mimir
    labels: {name: ingester-zone-a, controller-revision-hash: r1}
  spec: {containers: [{name: i, image: x}]}
  status:
    phase: Running
    containerStatuses: [{name: i, image: x, imageID: "", restartCount: 0, ready: true, state: {running: {}}}]
"#;

#[test]
fn prints_one_reconcile_as_json() {
    let dir = std::env::temp_dir().join(format!("strata-rollout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.yaml");
    std::fs::write(&state, STATE).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "rollout",
            "plan",
            "-f",
            state.to_str().unwrap(),
            "--now",
            "2026-01-01T00:00:00Z",
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        plan,
        serde_json::json!({"deletePods": ["mimir/ingester-zone-a-0"], "statusUpdates": [], "replicaChanges": [], "errors": []})
    );
    std::fs::write(
        &state,
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec: {replicas: \"two\"}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["rollout", "plan", "-f", state.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("document index 0: StatefulSet:"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A zone mirroring a ReplicaTemplate that asks for 1 of its 3 replicas, with a 1 h delayed
/// downscale.
const DELAYED: &str = r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ingester-zone-a
  namespace: mimir
  labels: {rollout-group: ingester}
  annotations:
    grafana.com/rollout-mirror-replicas-from-resource-name: ingester
    grafana.com/rollout-mirror-replicas-from-resource-kind: ReplicaTemplate
    grafana.com/rollout-mirror-replicas-from-resource-api-version: rollout-operator.grafana.com/v1
    grafana.com/rollout-delayed-downscale: 1h
    grafana.com/rollout-prepare-delayed-downscale-url: http://pod:8080/ingester/prepare-delayed-downscale
spec:
  replicas: 3
  serviceName: ingester
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {name: ingester-zone-a}}
  template:
    metadata: {labels: {name: ingester-zone-a}}
    spec: {containers: [{name: i, image: x}]}
status: {replicas: 3, readyReplicas: 3, currentRevision: r1, updateRevision: r1}
---
apiVersion: rollout-operator.grafana.com/v1
kind: ReplicaTemplate
metadata: {name: ingester, namespace: mimir}
spec: {replicas: 1}
status: {replicas: 3}
"#;

/// The delayed downscale's decision is in the plan: which pods, when they prepared, what it
/// waits for; offline, without `--prepared`, it is held (no pod reported a time).
#[test]
fn shows_the_delayed_downscale_decision() {
    let dir = std::env::temp_dir().join(format!("strata-rollout-delayed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.yaml");
    std::fs::write(&state, DELAYED).unwrap();
    let run = |prepared: &[&str]| {
        let mut args = vec![
            "rollout",
            "plan",
            "-f",
            state.to_str().unwrap(),
            "--now",
            "2026-01-01T12:00:00Z",
        ];
        for p in prepared {
            args.extend(["--prepared", p]);
        }
        Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&[
        "ingester-zone-a-2=2026-01-01T10:00:00Z",
        "ingester-zone-a-1=1767267000",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        plan["replicaChanges"],
        serde_json::json!([{"statefulSet": "mimir/ingester-zone-a", "from": 3, "to": 2}])
    );
    let decision = &plan["delayedDownscales"][0];
    assert_eq!(decision["desired"], 1);
    assert_eq!(decision["to"], 2);
    assert_eq!(decision["delay"], "1h");
    assert_eq!(
        decision["pods"],
        serde_json::json!([
            {"pod": "ingester-zone-a-2", "preparedAt": "2026-01-01T10:00:00Z", "mayGoAt": "2026-01-01T11:00:00Z"},
            {"pod": "ingester-zone-a-1", "preparedAt": "2026-01-01T11:30:00Z", "mayGoAt": "2026-01-01T12:30:00Z"}
        ])
    );
    assert_eq!(
        decision["decision"],
        "scale 3 -> 2: 1 pod(s) prepared at least 1h ago; next, ingester-zone-a-1 may go at 2026-01-01T12:30:00Z (1h after it prepared)"
    );
    // Offline without the pods' answers: held, and the reason is in the decision.
    let plan: serde_json::Value = serde_json::from_slice(&run(&[]).stdout).unwrap();
    assert_eq!(plan["replicaChanges"], serde_json::json!([]));
    let held = plan["delayedDownscales"][0]["decision"].as_str().unwrap();
    assert!(
        held.starts_with("held: pod ingester-zone-a-2: did not report a preparation time"),
        "{held}"
    );
    // A malformed --prepared is refused, naming it.
    let out = run(&["ingester-zone-a-2"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--prepared \"ingester-zone-a-2\": expected POD=TIME"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
