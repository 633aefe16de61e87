//! The `strata admission review` contract.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::process::Command;

#[test]
fn reviews_a_scale_request_against_the_state() {
    let dir = std::env::temp_dir().join(format!("strata-admission-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let review = dir.join("review.json");
    std::fs::write(
        &review,
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"abc","operation":"UPDATE",
        "resource":{"group":"apps","version":"v1","resource":"statefulsets"},"subResource":"scale","name":"ingester-zone-a","namespace":"mimir",
        "oldObject":{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"ingester-zone-a"},"spec":{"replicas":3}},
        "object":{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"ingester-zone-a"},"spec":{"replicas":1}}}}"#,
    )
    .unwrap();
    let state = dir.join("state.yaml");
    std::fs::write(&state, "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: ingester-zone-a, namespace: mimir, labels: {grafana.com/no-downscale: \"true\"}}\nspec: {replicas: 3, template: {spec: {containers: []}}, selector: {}}\n").unwrap();
    let run = |webhook: &str, with_state: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
        cmd.args([
            "admission",
            "review",
            "-f",
            review.to_str().unwrap(),
            "--webhook",
            webhook,
            "--now",
            "2026-01-01T00:00:00Z",
        ]);
        if with_state {
            cmd.args(["--state", state.to_str().unwrap()]);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let denied = run("no-downscale", true);
    assert_eq!(denied["kind"], "AdmissionReview");
    assert_eq!(denied["response"]["uid"], "abc");
    assert_eq!(denied["response"]["allowed"], false);
    assert_eq!(
        denied["response"]["status"]["message"],
        "downscale of statefulsets/ingester-zone-a in mimir from 3 to 1 replicas is not allowed because it has the label 'grafana.com/no-downscale=true'"
    );
    // Without the parent in the state, the webhook fails open with a warning.
    let open = run("no-downscale", false);
    assert_eq!(open["response"]["allowed"], true);
    assert!(
        open["response"]["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("can't get statefulsets/ingester-zone-a")
    );
    // A malformed review is bad input.
    std::fs::write(&review, "{}").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "admission",
            "review",
            "-f",
            review.to_str().unwrap(),
            "--webhook",
            "no-downscale",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn reviews_an_addonslayer_closing_a_cycle_offline() {
    let dir = std::env::temp_dir().join(format!("strata-admission-layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let review = dir.join("review.json");
    std::fs::write(
        &review,
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"l1","operation":"CREATE",
        "resource":{"group":"strata.dev","version":"v1alpha1","resource":"addonslayers"},"name":"bootstrap",
        "object":{"apiVersion":"strata.dev/v1alpha1","kind":"AddonsLayer","metadata":{"name":"bootstrap"},
          "spec":{"version":"1.0.0","source":{"name":"repo","path":"./bootstrap"},"prereqs":{"dependsOn":["base"]}}}}}"#,
    )
    .unwrap();
    let state = dir.join("state.yaml");
    std::fs::write(
        &state,
        "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {name: base}\nspec: {version: 1.0.0, source: {name: repo, path: ./base}, prereqs: {dependsOn: [bootstrap@>=1.0]}}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "admission",
            "review",
            "-f",
            review.to_str().unwrap(),
            "--webhook",
            "addonslayer-validation",
            "--state",
            state.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let response: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(response["response"]["allowed"], false, "{response}");
    let message = response["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("bootstrap -> base -> bootstrap"),
        "{message}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
