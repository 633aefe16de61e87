//! Metric gates (`spec.health.gates`) against the real Prometheus the plane builds, scraping a
//! series this test serves and changes: a gate that holds → the layer Deployed only after its
//! window (`for`); a breach within the watch after Deployed → Failed (`GateFailed`), then
//! rolled back to the previous revision; Prometheus gone → the layer waits in `GateUnknown`,
//! saying why, and is never Deployed; an invalid gate → stalled naming the field, nothing
//! applied. `strata layers why` shows each gate, its last value and for how long.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::Value;
use strata_e2e::flux::{install_layer_crds, source_configmap, wait_layer};
use strata_e2e::prometheus::{Prometheus, Target};
use strata_e2e::services::{ServiceProcess, bin_dir, delete_layers_then_stop, start_layer_service};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Serves `/metrics` with whatever the test puts in the returned text.
async fn metrics_server() -> Result<(std::net::SocketAddr, Arc<Mutex<String>>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let text = Arc::new(Mutex::new(String::new()));
    let served = text.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let served = served.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let body = served.lock().unwrap().clone();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    Ok((address, text))
}

fn set_ratio(text: &Mutex<String>, ratio: &str) {
    *text.lock().unwrap() = format!("# TYPE app_error_ratio gauge\napp_error_ratio {ratio}\n");
}

fn layer_yaml(ns: &str, name: &str, gates: &str) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-{name}, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  interval: 1h
  timeout: 60s
  source: {{kind: ConfigMap, name: src-{name}, path: ./}}
  rollback: {{enabled: true}}
  health:
    gates: {gates}
"
    )
}

fn settings(ns: &str, name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{level: {value}}}\n"
    )
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn time(v: &Value) -> Timestamp {
    text(v).parse().unwrap()
}

fn start_controller(ns: &str, prometheus: &Prometheus) -> Result<ServiceProcess> {
    let url = format!("http://{}", prometheus.address);
    start_layer_service(
        "layer-controller",
        ns,
        &[
            "--health-poll",
            "500ms",
            "--gate-poll",
            "1s",
            "--prometheus-url",
            &url,
        ],
    )
}

#[tokio::test]
async fn gates_hold_before_deployed_break_into_a_rollback_and_wait_when_unknown() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "gates").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let (address, ratio) = metrics_server().await?;
    set_ratio(&ratio, "0.001");
    let target = Target {
        job: "app".into(),
        address,
        labels: vec![],
    };
    let prometheus = Prometheus::start(&[target], None, "groups: []\n").await?;
    eventually("the series scraped", Duration::from_secs(30), || async {
        Ok((!prometheus.query("app_error_ratio").await?.is_empty()).then_some(()))
    })
    .await?;
    let controller = start_controller(&ns, &prometheus)?;
    let layer = format!("{ns}-web");
    let gates =
        "[{name: errors, query: 'max(app_error_ratio)', condition: '< 0.01', for: 3s, watch: 20s}]";
    apply_yaml(
        &client,
        &ns,
        &source_configmap(&ns, "web", &[("s.yaml", settings(&ns, "settings", "one"))]),
    )
    .await?;
    apply_yaml(&client, &ns, &layer_yaml(&ns, "web", gates)).await?;

    // Deployed only once the gate has held for its window.
    let deployed = wait_layer(&client, &layer, "Deployed", |s| s["state"] == "Deployed").await?;
    let gate = &deployed["gates"][0];
    assert_eq!(gate["state"], "Holding", "{deployed}");
    assert_eq!(gate["value"], "0.001", "{deployed}");
    let held = time(&deployed["history"][0]["deployedAt"]).duration_since(time(&gate["since"]));
    assert!(
        held.as_secs() >= 3,
        "Deployed {held:?} after the gate began holding: {deployed}"
    );
    let good = text(&deployed["revision"]);

    // `strata layers why` shows the gate, its value and how long it has held.
    let why = std::process::Command::new(bin_dir().join("strata"))
        .args(["layers", "why", &layer])
        .env("KUBECONFIG", cluster().kubeconfig())
        .output()?;
    let said = String::from_utf8_lossy(&why.stdout);
    assert!(
        said.contains("gate errors: Holding (value 0.001) for "),
        "{said}"
    );

    // A new revision deploys through the gate; then the error ratio rises within the watch.
    apply_yaml(
        &client,
        &ns,
        &source_configmap(&ns, "web", &[("s.yaml", settings(&ns, "settings", "two"))]),
    )
    .await?;
    let second = wait_layer(&client, &layer, "the second revision Deployed", |s| {
        s["state"] == "Deployed" && s["revision"] != good.as_str()
    })
    .await?;
    let bad = text(&second["revision"]);
    // Its own window: the gate's holding counted from this revision, not the last one (whose
    // gate held from 3 s or more before it was Deployed; times are to the second).
    let since = time(&second["gates"][0]["since"]);
    assert!(
        since >= time(&deployed["history"][0]["deployedAt"]),
        "{second}"
    );
    let held = time(&second["history"][0]["deployedAt"]).duration_since(since);
    assert!(
        held.as_secs() >= 3,
        "Deployed {held:?} after the gate began holding: {second}"
    );
    set_ratio(&ratio, "0.5");
    let rolled = wait_layer(&client, &layer, "rolled back after the breach", |s| {
        s["state"] == "RolledBack"
    })
    .await?;
    assert_eq!(rolled["rolledBack"]["reason"], "GateFailed", "{rolled}");
    assert_eq!(rolled["history"][1]["outcome"], "Failed", "{rolled}");
    assert_eq!(rolled["history"][1]["reason"], "GateFailed", "{rolled}");
    assert_eq!(rolled["history"][1]["revision"], bad.as_str(), "{rolled}");
    assert_eq!(
        rolled["rolledBack"]["failedRevision"],
        bad.as_str(),
        "{rolled}"
    );
    assert_eq!(text(&rolled["revision"]), good, "{rolled}");
    assert!(
        text(&rolled["rolledBack"]["message"]).contains("gate errors broke"),
        "{rolled}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let level = maps.get("settings").await?.data.unwrap()["level"].clone();
    assert_eq!(level, "one", "the first revision's object is back");

    // Prometheus gone: a new revision's objects are ready, its gate cannot be read.
    set_ratio(&ratio, "0.001");
    drop(prometheus);
    apply_yaml(
        &client,
        &ns,
        &source_configmap(
            &ns,
            "web",
            &[("s.yaml", settings(&ns, "settings", "three"))],
        ),
    )
    .await?;
    let unknown = wait_layer(&client, &layer, "GateUnknown", |s| {
        s["state"] == "GateUnknown"
    })
    .await?;
    assert!(
        text(&unknown["conditions"][0]["message"]).contains("cannot be read"),
        "{unknown}"
    );
    assert_eq!(unknown["gates"][0]["state"], "Unknown", "{unknown}");
    // It keeps waiting, saying so, through several gate reads (1 s apart): never Deployed.
    let checked = time(&unknown["gates"][0]["checkedAt"]);
    let later = wait_layer(&client, &layer, "read again", |s| {
        s["gates"][0]["checkedAt"].as_str().is_some_and(|t| {
            t.parse::<Timestamp>()
                .unwrap()
                .duration_since(checked)
                .as_secs()
                >= 3
        })
    })
    .await?;
    assert_eq!(later["state"], "GateUnknown", "{later}");

    // An invalid gate stalls its layer naming the field; nothing is applied.
    apply_yaml(
        &client,
        &ns,
        &source_configmap(
            &ns,
            "bad",
            &[("s.yaml", settings(&ns, "bad-settings", "x"))],
        ),
    )
    .await?;
    let invalid = "[{name: errors, query: 'sum(rate(x[1m])', condition: '< 1'}]";
    apply_yaml(&client, &ns, &layer_yaml(&ns, "bad", invalid)).await?;
    let stalled = wait_layer(&client, &format!("{ns}-bad"), "stalled", |s| {
        s["state"] == "Failed"
    })
    .await?;
    let message = text(&stalled["conditions"][0]["message"]);
    assert!(message.contains("spec.health.gates[0].query"), "{stalled}");
    assert!(
        maps.get_opt("bad-settings").await?.is_none(),
        "applied: {stalled}"
    );

    delete_layers_then_stop(&[&layer, &format!("{ns}-bad")], controller);
    Ok(())
}
