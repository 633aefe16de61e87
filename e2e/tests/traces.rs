//! Traces in a real Jaeger: a layer-controller exporting over OTLP/gRPC and a drift-observer
//! over OTLP/HTTP, both with TLS and a private CA, deploy a layer, then find and heal a `kubectl set image`. Checked through
//! Jaeger's query API: the span tree of the deploy (reconcile → source fetch → apply →
//! health gate) with the attributes users search by, the drift check and its dry run, and the
//! heal crossing services — the layer-controller's re-apply is a child of the observer's heal
//! request, carried by the layer's `strata.dev/traceparent` annotation.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use strata_e2e::flux::{
    configmap_layer, configmap_yaml, deployment_yaml, install_layer_crds, layer_status,
};
use strata_e2e::jaeger::{Jaeger, Span};
use strata_e2e::services::start_layer_service_with_env;
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

fn env(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn find<'a>(spans: &'a [Span], operation: &str) -> Option<&'a Span> {
    spans.iter().find(|s| s.operation == operation)
}

fn child_of<'a>(spans: &'a [Span], parent: &Span, operation: &str) -> Option<&'a Span> {
    spans
        .iter()
        .find(|s| s.operation == operation && s.parent.as_deref() == Some(&parent.span_id))
}

#[tokio::test]
async fn a_deploy_and_a_heal_are_traced_across_services() -> Result<()> {
    let c = cluster();
    // OTLP over TLS with the plane's serving certificate (127.0.0.1): the services trust it
    // through OTEL_EXPORTER_OTLP_CERTIFICATE, as users with a private CA would. (The rollout
    // test below exports over plain gRPC.)
    let pki = c
        .kubeconfig()
        .parent()
        .context("plane directory")?
        .join("pki");
    let jaeger = Jaeger::start(Some((
        &pki.join("apiserver.crt"),
        &pki.join("apiserver.key"),
    )))
    .await?;
    let client = c.client().await?;
    let test_ns = TestNamespace::create(&client, "traces").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let layer = format!("{ns}-web");
    let files = vec![
        ("web.yaml", deployment_yaml(&ns, "web", "nginx:1.25")),
        ("settings.yaml", configmap_yaml(&ns, "settings", "")),
    ];
    // gRPC: an endpoint alone (not OTLP/HTTP's port) means gRPC.
    let _controller = start_layer_service_with_env(
        "layer-controller",
        &ns,
        &["--health-poll", "500ms", "--sync-period", "1h"],
        &[],
        &env(&[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("https://{}", jaeger.otlp_grpc),
            ),
            (
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                pki.join("ca.crt").display().to_string(),
            ),
        ]),
    )?;
    let _observer = start_layer_service_with_env(
        "drift-observer",
        &ns,
        &[],
        &[],
        &env(&[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("https://{}", jaeger.otlp_http),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
            (
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                pki.join("ca.crt").display().to_string(),
            ),
        ]),
    )?;
    apply_yaml(&client, &ns, &configmap_layer(&ns, "web", "60s", &files)).await?;
    eventually("the layer Deployed", Duration::from_secs(60), || async {
        Ok((layer_status(&client, &layer).await?["state"] == "Deployed").then_some(()))
    })
    .await?;

    // The deploy: reconcile → source fetch, apply, health gate, with their attributes.
    let deploy = eventually(
        "the deploy's span tree in Jaeger",
        Duration::from_secs(30),
        || async {
            for trace in jaeger.traces("layer-controller", "layer.apply").await? {
                let Some(reconcile) = trace.iter().find(|s| {
                    s.operation == "layer.reconcile" && s.tags.get("layer") == Some(&layer)
                }) else {
                    continue;
                };
                let (Some(fetch), Some(apply), Some(health)) = (
                    child_of(&trace, reconcile, "layer.source_fetch"),
                    child_of(&trace, reconcile, "layer.apply"),
                    child_of(&trace, reconcile, "layer.health"),
                ) else {
                    continue;
                };
                return Ok(Some((fetch.clone(), apply.clone(), health.clone())));
            }
            Ok(None)
        },
    )
    .await?;
    let (fetch, apply, health) = deploy;
    ensure!(
        fetch.tags.get("files").map(String::as_str) == Some("2")
            && fetch.tags.get("revision").is_some_and(|r| !r.is_empty())
            && fetch
                .tags
                .get("source")
                .is_some_and(|s| s.contains("src-web")),
        "source fetch attributes: {:?}",
        fetch.tags
    );
    ensure!(
        apply.tags.get("objects").map(String::as_str) == Some("2")
            && apply
                .tags
                .get("field_manager")
                .is_some_and(|m| !m.is_empty()),
        "apply attributes: {:?}",
        apply.tags
    );
    ensure!(
        health.tags.contains_key("not_ready") && health.tags.contains_key("revision"),
        "health gate attributes: {:?}",
        health.tags
    );
    ensure!(
        fetch.service == "layer-controller",
        "service name {}",
        fetch.service
    );

    // A drift: found by a check with its dry run, healed through the layer-controller.
    c.kubectl()
        .args([
            "-n",
            &ns,
            "set",
            "image",
            "deployment/web",
            "app=nginx:1.26",
        ])
        .status()?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    eventually("web healed", Duration::from_secs(30), || async {
        let d = deployments.get("web").await?;
        let image = d
            .spec
            .and_then(|s| s.template.spec)
            .map(|s| s.containers[0].image.clone());
        Ok((image == Some(Some("nginx:1.25".into()))).then_some(()))
    })
    .await?;
    eventually(
        "the drift check and its dry run in Jaeger",
        Duration::from_secs(30),
        || async {
            for trace in jaeger.traces("drift-observer", "drift.dry_run").await? {
                let Some(check) = trace.iter().find(|s| {
                    s.operation == "drift.check"
                        && s.tags
                            .get("object")
                            .is_some_and(|o| o.contains("Deployment") && o.contains("/web"))
                        && s.tags.get("layer") == Some(&layer)
                        && s.tags.get("drifted_fields").is_some_and(|n| n != "0")
                }) else {
                    continue;
                };
                if child_of(&trace, check, "drift.dry_run").is_some() {
                    ensure!(check.service == "drift-observer", "{check:?}");
                    return Ok(Some(()));
                }
            }
            Ok(None)
        },
    )
    .await?;
    let heal = eventually(
        "the heal's re-apply joined the observer's trace",
        Duration::from_secs(30),
        || async {
            for trace in jaeger
                .traces("drift-observer", "drift.heal_request")
                .await?
            {
                let Some(request) = find(&trace, "drift.heal_request")
                    .filter(|s| s.tags.get("layer") == Some(&layer))
                else {
                    continue;
                };
                if let Some(reapply) = child_of(&trace, request, "layer.reconcile")
                    && reapply.service == "layer-controller"
                {
                    return Ok(Some((request.clone(), reapply.clone(), trace.clone())));
                }
            }
            Ok(None)
        },
    )
    .await?;
    let (request, reapply, trace) = heal;
    ensure!(
        request.trace_id == reapply.trace_id,
        "one trace: {request:?} {reapply:?}"
    );
    // The re-apply did its work inside the observer's trace.
    child_of(&trace, &reapply, "layer.apply")
        .with_context(|| format!("no apply under the heal's reconcile: {trace:#?}"))?;
    Ok(())
}

/// A zone-by-zone rollout in Jaeger: the operator's reconcile of the group, its decision naming
/// the pods it chose, and each pod deletion under the reconcile that decided it.
#[tokio::test]
async fn a_rollout_is_traced_from_decision_to_deletion() -> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    use strata_e2e::services::{chart_identity, start_service_with_env};
    use strata_e2e::support::{pod_ready, rollout_zone};

    let jaeger = Jaeger::start(None).await?;
    let c = cluster();
    let client = c.client().await?;
    let test_ns = TestNamespace::create(&client, "traces-rollout").await?;
    let ns = test_ns.name.clone();
    let zone = |z: &str, image: &str| rollout_zone("ingester", z, 1, image, 1, false);
    // Zones a, b and c: the plane's nodes are labelled zone-a, zone-b, zone-c.
    const ZONES: [&str; 3] = ["a", "b", "c"];
    for z in ZONES {
        apply_yaml(&client, &ns, &zone(z, "example.invalid/ingester:1")).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    eventually("3 ready pods", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await?.items;
        Ok((list.len() == 3 && list.iter().all(pod_ready)).then_some(()))
    })
    .await?;
    let args = [
        "--watch-namespace",
        ns.as_str(),
        "--lease-namespace",
        ns.as_str(),
        "--leader-elect=false",
    ];
    let kubeconfig = chart_identity(c.kubeconfig(), "rollout-operator", &args)?;
    let _operator = start_service_with_env(
        "rollout-operator",
        &kubeconfig,
        &args,
        &env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://{}", jaeger.otlp_grpc),
        )]),
    )?;
    for z in ZONES {
        apply_yaml(&client, &ns, &zone(z, "example.invalid/ingester:2")).await?;
    }
    let (reconcile, decision, deletion) = eventually(
        "a pod deletion under the reconcile that decided it",
        Duration::from_secs(60),
        || async {
            for trace in jaeger
                .traces("rollout-operator", "rollout.delete_pod")
                .await?
            {
                for deletion in trace.iter().filter(|s| s.operation == "rollout.delete_pod") {
                    let Some(reconcile) = trace.iter().find(|s| {
                        Some(&s.span_id) == deletion.parent.as_ref()
                            && s.operation == "rollout.reconcile"
                    }) else {
                        continue;
                    };
                    if let Some(decision) = child_of(&trace, reconcile, "rollout.decision") {
                        return Ok(Some((
                            reconcile.clone(),
                            decision.clone(),
                            deletion.clone(),
                        )));
                    }
                }
            }
            Ok(None)
        },
    )
    .await?;
    ensure!(
        reconcile.tags.get("rollout_group").map(String::as_str) == Some("ingester")
            && reconcile.tags.get("namespace") == Some(&ns),
        "reconcile attributes: {:?}",
        reconcile.tags
    );
    let pod = deletion.tags.get("pod").context("pod attribute")?;
    ensure!(
        pod.starts_with(&format!("{ns}/ingester-zone-")),
        "deleted pod {pod}"
    );
    ensure!(
        decision
            .tags
            .get("delete_pods")
            .is_some_and(|chosen| chosen.contains(pod.as_str())),
        "the decision names the pod it deletes: {:?} vs {pod}",
        decision.tags
    );
    Ok(())
}

/// A collector that cannot be used never stops a service: a malformed endpoint turns export
/// off with one warning; a collector refusing connections costs the dropped-spans counter while
/// layers deploy as usual.
#[tokio::test]
async fn bad_or_absent_collectors_never_stop_a_service() -> Result<()> {
    let c = cluster();
    let client = c.client().await?;
    let test_ns = TestNamespace::create(&client, "traces-bad").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;

    let misconfigured = start_layer_service_with_env(
        "layer-controller",
        &ns,
        &[],
        &[],
        &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317".into())]),
    )?;
    eventually(
        "the misconfigured service ready",
        Duration::from_secs(30),
        || async {
            let admin = misconfigured.admin.context("admin address")?;
            Ok(matches!(
                strata_e2e::support::http_get(admin, "/readyz").await,
                Ok((200, _))
            )
            .then_some(()))
        },
    )
    .await?;
    let logs = misconfigured.logs();
    ensure!(
        logs.contains("trace export is off") && logs.contains("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "one warning naming the variable:\n{logs}"
    );
    drop(misconfigured); // the next controller serves the test's layers alone

    // Bound, then closed: every connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let controller = start_layer_service_with_env(
        "layer-controller",
        &ns,
        &["--health-poll", "500ms"],
        &[],
        &env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{closed}")),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "500".into()),
        ]),
    )?;
    let layer = format!("{ns}-cm");
    let files = vec![("settings.yaml", configmap_yaml(&ns, "settings", ""))];
    apply_yaml(&client, &ns, &configmap_layer(&ns, "cm", "60s", &files)).await?;
    eventually("the layer Deployed", Duration::from_secs(60), || async {
        Ok((layer_status(&client, &layer).await?["state"] == "Deployed").then_some(()))
    })
    .await?;
    eventually(
        "the refused spans counted",
        Duration::from_secs(30),
        || async {
            let dropped = controller
                .metric("layer_controller_traces_dropped_total", &[])
                .await?;
            let exported = controller
                .metric("layer_controller_traces_exported_total", &[])
                .await?;
            ensure!(exported == 0.0, "exported {exported} to a closed port");
            Ok((dropped > 0.0).then_some(()))
        },
    )
    .await?;
    Ok(())
}
