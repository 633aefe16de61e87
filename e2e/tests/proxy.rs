//! The chart's `global.env.httpsProxy`/`httpProxy`/`noProxy` (HTTPS_PROXY, HTTP_PROXY,
//! NO_PROXY) reach every outbound connection of a service: the API server (a CONNECT tunnel),
//! artifact downloads (absolute-form GET) and OTLP traces (a CONNECT tunnel, as gRPC clients
//! do), each with the proxy URL's credentials; with NO_PROXY naming the hosts, none of them
//! touches the proxy. A local proxy counts what passes through it.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use strata_e2e::flux::{
    ArtifactServer, create_source_with_artifact, install_layer_crds, layer_status,
};
use strata_e2e::http_proxy::CountingProxy;
use strata_e2e::services::{ServiceProcess, bin_dir, chart_identity};
use strata_e2e::support::{TestNamespace, apply_yaml, cluster, eventually};

/// The API server's `host:port` from the plane's kubeconfig.
fn api_server() -> Result<String> {
    let kubeconfig = std::fs::read_to_string(cluster().kubeconfig())?;
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .context("server in kubeconfig")?
        .trim();
    Ok(server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string())
}

/// Publishes an artifact for a GitRepository `name` and creates a layer deploying it.
async fn layer_from_artifact(
    client: &kube::Client,
    ns: &str,
    server: &ArtifactServer,
    name: &str,
) -> Result<(String, String)> {
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{via: proxy-test}}\n"
    );
    let (url, digest) = server.publish(&format!("{name}.tar.gz"), &[("cm.yaml", &manifest)]);
    create_source_with_artifact(
        client,
        ns,
        "GitRepository",
        name,
        &format!("rev-{name}"),
        &url,
        &digest,
    )
    .await?;
    let layer = format!("{ns}-{name}");
    apply_yaml(client, ns, &format!(
        "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {layer}, labels: {{strata-e2e/suite: {ns}}}}}\nspec: {{version: 1.0.0, interval: 1h, source: {{kind: GitRepository, name: {name}, namespace: {ns}, path: ./}}}}\n"
    )).await?;
    Ok((layer, url))
}

async fn deployed(client: &kube::Client, layer: &str) -> Result<()> {
    eventually(
        &format!("{layer} Deployed"),
        Duration::from_secs(60),
        || async {
            let status = layer_status(client, layer).await?;
            Ok((status["state"] == "Deployed").then_some(()))
        },
    )
    .await
}

/// The layer-controller as its chart ServiceAccount, with this environment.
fn controller(ns: &str, env: &[(&str, String)]) -> Result<ServiceProcess> {
    let selector = format!("strata-e2e/suite={ns}");
    let args = [
        "--leader-elect=false",
        "--layer-selector",
        &selector,
        "--default-source-namespace",
        ns,
        "--health-poll",
        "500ms",
    ];
    let kubeconfig = chart_identity(cluster().kubeconfig(), "layer-controller", &args)?;
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let admin = format!("127.0.0.1:{}", strata_e2e::plane::free_port()?);
    let mut all = vec![
        "--kubeconfig",
        kubeconfig.as_str(),
        "--admin-address",
        admin.as_str(),
    ];
    all.extend(args);
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    ServiceProcess::spawn_with_env_blocking(
        &bin_dir().join("layer-controller"),
        &all,
        &env,
        &std::env::temp_dir().join("strata-e2e-logs"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_artifacts_and_traces_go_through_the_proxy_unless_no_proxy() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "proxy").await?;
    let ns = ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let server = ArtifactServer::start().await?;
    // The proxy on 127.0.0.2, the servers on 127.0.0.1: NO_PROXY=127.0.0.1 must be checked
    // against where a request goes, not against the proxy's own address.
    let proxy = CountingProxy::start_on("127.0.0.2").await?;
    // An OTLP "collector" that accepts connections: the tunnel to it is what is counted.
    let collector = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let collector_address = collector.local_addr()?.to_string();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = collector.accept().await {
            open.push(stream);
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let api = api_server()?;
    let proxy_with_credentials = format!("http://strata:s%40cret@{}", proxy.address);
    let otlp = format!("http://{collector_address}");

    let (layer, artifact) = layer_from_artifact(&client, &ns, &server, "through").await?;
    let env = [
        ("HTTPS_PROXY", proxy_with_credentials.clone()),
        ("HTTP_PROXY", proxy_with_credentials.clone()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY", "200".to_string()),
    ];
    let proxied = controller(&ns, &env)?;
    deployed(&client, &layer).await?;
    ensure!(
        proxy.count("CONNECT", &api) > 0,
        "no CONNECT to the API server {api}: {:?}",
        proxy.seen()
    );
    ensure!(
        proxy.count("GET", &artifact) > 0,
        "the artifact {artifact} was not fetched through the proxy: {:?}",
        proxy.seen()
    );
    eventually(
        "traces exported through the proxy",
        Duration::from_secs(30),
        || async { Ok((proxy.count("CONNECT", &collector_address) > 0).then_some(())) },
    )
    .await?;
    // Every request carried the credentials (base64 of `strata:s@cret`).
    for seen in proxy.seen() {
        ensure!(
            seen.authorization.as_deref() == Some("Basic c3RyYXRhOnNAY3JldA=="),
            "{seen:?}"
        );
    }
    drop(proxied);

    // NO_PROXY: the same settings, the servers' hosts excluded (the artifact server and the
    // collector on loopback; the API server on loopback, or on the plane's bridge when it has
    // a real node), and nothing reaches the proxy.
    let before = proxy.seen().len();
    let collector_connections = accepted.load(std::sync::atomic::Ordering::SeqCst);
    let (direct_layer, _) = layer_from_artifact(&client, &ns, &server, "direct").await?;
    let api_host = api.rsplit_once(':').map_or(api.as_str(), |(host, _)| host);
    let mut env = env.to_vec();
    env.push(("NO_PROXY", format!("localhost,127.0.0.1,{api_host}")));
    let direct = controller(&ns, &env)?;
    deployed(&client, &direct_layer).await?;
    deployed(&client, &layer).await?;
    // Its API requests and the artifact were done by now; the traces are the last to go out:
    // once the collector has a new connection, each kind of outbound connection has been made.
    eventually(
        "traces exported without the proxy",
        Duration::from_secs(30),
        || async {
            let now = accepted.load(std::sync::atomic::Ordering::SeqCst);
            Ok((now > collector_connections).then_some(()))
        },
    )
    .await?;
    let after = proxy.seen();
    ensure!(
        after.len() == before,
        "with NO_PROXY the proxy still saw {:?}",
        &after[before..]
    );
    drop(direct);
    strata_e2e::services::delete_layers_then_stop(&[&layer, &direct_layer], controller(&ns, &[])?);
    Ok(())
}
