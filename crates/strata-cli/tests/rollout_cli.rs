//! The `strata rollout plan` contract (DESIGN.md §4).

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
