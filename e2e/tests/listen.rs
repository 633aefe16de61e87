//! Where the services listen: `:PORT` is dual-stack (unit-tested in `core_k8s::net`), an IPv6
//! loopback address works end to end — kube-apiserver calls the admission-webhook at
//! `https://[::1]:PORT` — and a flag given twice takes its last value, so a chart's
//! `extraArgs` can override a flag the chart itself sets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use strata_e2e::admission::{configuration_name, kubectl_scale, register_yaml, stateful_set};
use strata_e2e::flux::install_layer_crds;
use strata_e2e::plane::free_port;
use strata_e2e::services::{SERVICES, start_admission_webhook, start_service};
use strata_e2e::support::{
    STATEFULSET_UPDATE_RULES, TestNamespace, apply_yaml, cluster, eventually, http_get,
    webhook_configuration,
};

/// Every service started with `--admin-address` twice (the harness's own first, an IPv6
/// loopback address last) serves its admin endpoints on the last one only.
#[tokio::test]
async fn a_repeated_flag_takes_its_last_value_and_the_admin_port_answers_on_ipv6() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "listen").await?;
    install_layer_crds(&client, &ns.name).await?;
    let selector = format!("strata-e2e/suite={}", ns.name);
    for service in SERVICES {
        let port = free_port()?;
        let admin6 = format!("[::1]:{port}");
        let tls = format!("127.0.0.1:{}", free_port()?);
        let mut args = vec!["--lease-namespace", ns.name.as_str()];
        match service {
            "admission-webhook" => args.extend(["--tls-address", &tls]),
            "rollout-operator" => args.extend(["--watch-namespace", &ns.name]),
            _ => args.extend([
                "--layer-selector",
                &selector,
                "--default-source-namespace",
                &ns.name,
            ]),
        }
        args.extend(["--admin-address", &admin6]);
        let process = start_service(service, cluster().kubeconfig(), &args)?;
        let last: SocketAddr = admin6.parse()?;
        eventually(
            &format!("{service} answers on {admin6}"),
            Duration::from_secs(30),
            || async { Ok(matches!(http_get(last, "/livez").await, Ok((200, _))).then_some(())) },
        )
        .await?;
        let first = process.admin.expect("the harness's admin address");
        assert!(
            http_get(first, "/livez").await.is_err(),
            "{service} also listens on the overridden {first}"
        );
    }
    Ok(())
}

/// The admission-webhook on `[::1]`: its certificate names `::1`, kube-apiserver reaches it at
/// an IPv6 URL, and no-downscale refuses a labelled StatefulSet's downscale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_apiserver_calls_the_webhook_on_an_ipv6_loopback_address() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "listen6").await?;
    let port = free_port()?;
    let _server = start_admission_webhook(
        &ns.name,
        &format!("[::1]:{port}"),
        &["--tls-extra-names", "::1"],
    )?;
    let kind = "ValidatingWebhookConfiguration";
    let name = configuration_name(&ns.name, "/admission/no-downscale");
    let yaml = webhook_configuration(
        kind,
        &name,
        &ns.name,
        "no-downscale",
        &format!("{{url: \"https://[::1]:{port}/admission/no-downscale\"}}"),
        STATEFULSET_UPDATE_RULES,
    );
    let _hook = register_yaml(&client, &ns.name, kind, &name, &yaml).await?;
    apply_yaml(
        &client,
        &ns.name,
        &stateful_set("store", r#"grafana.com/no-downscale: "true""#, ""),
    )
    .await?;
    let stderr = eventually(
        "the downscale refused over IPv6",
        Duration::from_secs(30),
        || async {
            let out = kubectl_scale(&ns.name, "store", 2)?;
            anyhow::ensure!(!out.status.success(), "the downscale went through");
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            Ok(stderr
                .contains("is not allowed because it has the label 'grafana.com/no-downscale=true'")
                .then_some(stderr))
        },
    )
    .await?;
    assert!(stderr.contains("from 3 to 2 replicas"), "{stderr}");
    Ok(())
}

/// A webhook server whose port is taken says so at once and stops, instead of running on
/// without serving while kube-apiserver's calls to that port fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_server_whose_port_is_taken_stops_saying_so() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "taken").await?;
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let address = taken.local_addr()?.to_string();
    let mut server = start_admission_webhook(&ns.name, &address, &[])?;
    let exited = tokio::task::block_in_place(|| server.wait_exit_blocking(Duration::from_secs(30)));
    assert!(exited.is_some(), "still running: {}", server.logs());
    let logs = server.logs();
    assert!(
        logs.contains("admission server failed; stopping") && logs.contains(&address),
        "{logs}"
    );
    drop(taken);
    Ok(())
}
