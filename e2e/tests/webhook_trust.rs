//! The admission-webhook trusts nothing a caller sends. Reviews posted straight to the server
//! (as any pod that reaches port 8443 could) cannot aim its prepare-downscale calls: a
//! StatefulSet that does not exist, a forged port or path, another object's uid or a replica
//! count the live object does not have reach no pod at all, and the answer says why. With
//! `--client-ca-file`, only a caller holding a certificate of that CA — kube-apiserver, given
//! one by the plane's AdmissionConfiguration — gets past the TLS handshake.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use base64::Engine as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use strata_e2e::plane::{WEBHOOK_CLIENT_CA, free_port};
use strata_e2e::services::{ServiceProcess, start_admission_webhook};
use strata_e2e::support::{
    DeleteOnDrop, STATEFULSET_UPDATE_RULES, TestNamespace, apply_yaml, cluster, eventually,
    guarded_stateful_set, pod_ready, webhook_configuration,
};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

struct Server {
    _process: ServiceProcess,
    address: std::net::SocketAddr,
    /// The server's certificate (PEM), which the test trusts.
    cert_pem: String,
}

/// Starts the server with a certificate of the test's own (so the test can trust it and put it
/// in a configuration's caBundle), no CA injection, then `extra` flags.
async fn start(ns: &str, extra: &[&str]) -> Result<Server> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.self_signed(&key)?;
    let port = free_port()?;
    // A directory per server: a second server in the namespace must not rewrite (and make
    // reload) the first one's certificate.
    let dir = std::env::temp_dir().join(format!("strata-trust-{ns}-{port}"));
    std::fs::create_dir_all(&dir)?;
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, cert.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    let address: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let mut args = vec![
        "--tls-cert-file",
        cert_file.to_str().unwrap(),
        "--tls-key-file",
        key_file.to_str().unwrap(),
        "--inject-ca-bundle=false",
    ];
    args.extend_from_slice(extra);
    let process = start_admission_webhook(ns, &address.to_string(), &args)?;
    eventually("server listening", Duration::from_secs(30), || async {
        Ok(tokio::net::TcpStream::connect(address).await.ok().map(drop))
    })
    .await?;
    Ok(Server {
        _process: process,
        address,
        cert_pem: cert.pem(),
    })
}

/// A TLS client trusting `server`, presenting `client` (certificate and key PEM) if given.
fn client_config(server: &Server, client: Option<(&str, &str)>) -> Result<ClientConfig> {
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(server.cert_pem.as_bytes())?)?;
    let builder = ClientConfig::builder().with_root_certificates(roots);
    Ok(match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder.with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(cert.as_bytes())?],
            PrivateKeyDer::from_pem_slice(key.as_bytes())?,
        )?,
    })
}

/// POSTs `review` to `path` over TLS as `config` and returns the answer's status and body.
async fn post(
    server: &Server,
    config: ClientConfig,
    path: &str,
    review: &Value,
) -> Result<(u16, Value)> {
    let tcp = tokio::net::TcpStream::connect(server.address).await?;
    let stream = TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(server.address.ip().into()), tcp)
        .await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::post(path)
        .header("content-type", "application/json")
        .header("host", server.address.to_string())
        .body(Full::new(Bytes::from(review.to_string())))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// A stand-in for every pod (the server's test-only `--pod-address-override`): records every
/// request it gets, whatever the method or path.
struct AnyPod {
    address: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl AnyPod {
    async fn start() -> Result<Self> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            record
                .lock()
                .unwrap()
                .push(format!("{} {}", request.method(), request.uri()));
            async { "ok" }
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?.to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { address, seen })
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// An UPDATE review of StatefulSet `old` (as JSON) to `new_replicas`, as kube-apiserver sends.
fn downscale_review(old: &Value, new_replicas: i64) -> Value {
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(new_replicas);
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "3b9a3c5e-0000-4000-8000-000000000001", "operation": "UPDATE",
        "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
        "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
        "name": old["metadata"]["name"], "namespace": old["metadata"]["namespace"],
        "userInfo": {"username": "forger"}, "oldObject": old, "object": new}})
}

/// A prepare-downscale StatefulSet `ingester` with 2 ready pods in `ns`: its API and its live
/// object as JSON.
async fn ingester(client: &kube::Client, ns: &str) -> Result<(Api<StatefulSet>, Value)> {
    apply_yaml(
        client,
        ns,
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ingester
  labels: {grafana.com/prepare-downscale: "true"}
  annotations: {grafana.com/prepare-downscale-http-port: "80", grafana.com/prepare-downscale-http-path: ingester/prepare-shutdown}
spec:
  replicas: 2
  serviceName: ingester
  podManagementPolicy: Parallel
  selector: {matchLabels: {name: ingester}}
  template:
    metadata: {labels: {name: ingester}}
    spec: {containers: [{name: c, image: x}]}
"#,
    )
    .await?;
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually("2 ready pods", Duration::from_secs(60), || async {
        let list = pod_api.list(&Default::default()).await?;
        Ok((list.items.iter().filter(|p| pod_ready(p)).count() == 2).then_some(()))
    })
    .await?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let live = serde_json::to_value(sts.get("ingester").await?)?;
    Ok((sts, live))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_reviews_posted_straight_to_the_server_reach_no_pod() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "trust").await?;
    let pods = AnyPod::start().await?;
    let server = start(&ns.name, &["--pod-address-override", &pods.address]).await?;
    let (sts, live) = ingester(&client, &ns.name).await?;
    let config = || client_config(&server, None);
    let path = "/admission/prepare-downscale";

    let mut ghost = live.clone();
    ghost["metadata"]["name"] = json!("ghost");
    let mut aimed = live.clone();
    aimed["metadata"]["annotations"]["grafana.com/prepare-downscale-http-port"] = json!("9095");
    aimed["metadata"]["annotations"]["grafana.com/prepare-downscale-http-path"] =
        json!("admin/shutdown");
    let mut other = live.clone();
    other["metadata"]["uid"] = json!("00000000-0000-4000-8000-00000000dead");
    let mut wider = live.clone();
    wider["spec"]["replicas"] = json!(6);
    let cases = [
        ("a StatefulSet that does not exist", ghost, "does not exist"),
        (
            "a forged port and path",
            aimed,
            "annotation grafana.com/prepare-downscale-http-port",
        ),
        (
            "another object's uid",
            other,
            "00000000-0000-4000-8000-00000000dead",
        ),
        ("more replicas than it has", wider, "has 2 replicas"),
    ];
    for (what, old, why) in cases {
        let (status, answer) = post(&server, config()?, path, &downscale_review(&old, 1)).await?;
        ensure!(status == 200, "{what}: HTTP {status}");
        let response = &answer["response"];
        ensure!(response["allowed"] == false, "{what}: allowed: {answer}");
        let message = response["status"]["message"].as_str().unwrap_or_default();
        ensure!(
            message.contains(why) && message.contains("nothing was prepared"),
            "{what}: {message}"
        );
        ensure!(
            pods.seen().is_empty(),
            "{what}: the pods were called: {:?}",
            pods.seen()
        );
    }
    let recorded = || async {
        Ok::<_, anyhow::Error>(
            sts.get("ingester")
                .await?
                .annotations()
                .contains_key("grafana.com/last-downscale"),
        )
    };
    ensure!(!recorded().await?, "a refused review recorded a downscale");

    // The control: the live object exactly as kube-apiserver would send it is prepared, at the
    // live object's port and path, and recorded — the stand-in sees what a real call looks like.
    let (_, answer) = post(&server, config()?, path, &downscale_review(&live, 1)).await?;
    ensure!(answer["response"]["allowed"] == true, "{answer}");
    ensure!(
        pods.seen() == vec!["POST /ingester/prepare-shutdown".to_string()],
        "{:?}",
        pods.seen()
    );
    // The time is recorded once the downscale has landed, never before: a review that no
    // write follows (forged, or refused after this webhook) records nothing. The server looks
    // every 100 ms; half a second is five looks.
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure!(!recorded().await?, "recorded before the downscale happened");
    sts.patch(
        "ingester",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await?;
    eventually(
        "the landed downscale recorded",
        Duration::from_secs(10),
        || async { Ok(recorded().await?.then_some(())) },
    )
    .await?;
    Ok(())
}

/// kube-apiserver sends a webhook only reviews of namespaces its `namespaceSelector` matches;
/// the server checks the same selector (`--namespace-selector`, which the chart passes), so a
/// review of a namespace that did not opt in — forged — gets nothing done: no pod called, no
/// downscale or eviction recorded. Once the namespace opts in, the same review is prepared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_review_of_a_namespace_that_did_not_opt_in_does_nothing() -> Result<()> {
    const OPT_IN: &str = "strata.dev/admission-webhook";
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "trust-ns").await?;
    let pods = AnyPod::start().await?;
    let prepare_selector = format!("prepare-downscale={OPT_IN}=enabled");
    let eviction_selector = format!("pod-eviction={OPT_IN}=enabled");
    let server = start(
        &ns.name,
        &[
            "--pod-address-override",
            &pods.address,
            "--namespace-selector",
            &prepare_selector,
            "--namespace-selector",
            &eviction_selector,
        ],
    )
    .await?;
    let (sts, live) = ingester(&client, &ns.name).await?;
    let config = || client_config(&server, None);
    let not_selected = format!(
        "namespace {} is not selected by the prepare-downscale webhook ({OPT_IN}=enabled): nothing checked, called or recorded",
        ns.name
    );
    let (status, answer) = post(
        &server,
        config()?,
        "/admission/prepare-downscale",
        &downscale_review(&live, 1),
    )
    .await?;
    ensure!(status == 200, "HTTP {status}: {answer}");
    ensure!(
        answer["response"]["allowed"] == true
            && answer["response"]["status"]["message"] == not_selected.as_str(),
        "{answer}"
    );
    let pod_name = "ingester-0";
    let eviction = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "3b9a3c5e-0000-4000-8000-000000000002", "operation": "CREATE",
        "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
        "name": pod_name, "namespace": ns.name,
        "userInfo": {"username": "forger"},
        "object": {"apiVersion": "policy/v1", "kind": "Eviction",
                   "metadata": {"name": pod_name, "namespace": ns.name}}}});
    let (_, answer) = post(&server, config()?, "/admission/pod-eviction", &eviction).await?;
    ensure!(
        answer["response"]["allowed"] == true
            && answer["response"]["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("not selected by the pod-eviction webhook")),
        "{answer}"
    );
    let annotations = sts.get("ingester").await?.annotations().clone();
    ensure!(
        pods.seen().is_empty()
            && !annotations.contains_key("grafana.com/last-downscale")
            && !annotations.contains_key("strata.dev/recent-evictions"),
        "a review of a namespace that did not opt in did something: calls {:?}, annotations {annotations:?}",
        pods.seen()
    );

    // The control: opted in, the same review is prepared.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {OPT_IN: "enabled"}}})),
        )
        .await?;
    let (_, answer) = post(
        &server,
        config()?,
        "/admission/prepare-downscale",
        &downscale_review(&live, 1),
    )
    .await?;
    ensure!(
        answer["response"]["allowed"] == true
            && pods.seen() == vec!["POST /ingester/prepare-shutdown".to_string()],
        "opted in: {answer}, calls {:?}",
        pods.seen()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_kube_apiserver_gets_past_the_handshake() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "client-ca").await?;
    let pki = cluster()
        .kubeconfig()
        .parent()
        .context("the plane's directory")?
        .join("pki");
    let ca_file = pki.join(WEBHOOK_CLIENT_CA);
    ensure!(
        ca_file.exists(),
        "{} missing: this test needs the local plane",
        ca_file.display()
    );
    let server = start(&ns.name, &["--client-ca-file", ca_file.to_str().unwrap()]).await?;
    let bundle = base64::engine::general_purpose::STANDARD.encode(&server.cert_pem);
    let name = format!("no-downscale-{}", ns.name);
    apply_yaml(
        &client,
        &ns.name,
        &webhook_configuration(
            "ValidatingWebhookConfiguration",
            &name,
            &ns.name,
            "no-downscale",
            &format!(
                "{{url: \"https://{}/admission/no-downscale\", caBundle: \"{bundle}\"}}",
                server.address
            ),
            STATEFULSET_UPDATE_RULES,
        ),
    )
    .await?;
    let _config = DeleteOnDrop {
        resource: "validatingwebhookconfiguration",
        name,
    };
    apply_yaml(&client, &ns.name, &guarded_stateful_set(2)).await?;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    // Through kube-apiserver: its client certificate passes, so the policy decides.
    let refused = eventually(
        "the downscale refused by the webhook",
        Duration::from_secs(30),
        || async {
            match sts
                .patch(
                    "guarded",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": 1}})),
                )
                .await
            {
                Err(kube::Error::Api(e)) if e.message.contains("grafana.com/no-downscale=true") => {
                    Ok(Some(e.message))
                }
                Err(e) => bail!("not decided by the webhook yet: {e}"),
                Ok(_) => bail!("the downscale of a no-downscale StatefulSet was allowed"),
            }
        },
    )
    .await?;
    ensure!(refused.contains("not allowed"), "{refused}");

    // Straight to the server: no answer without a certificate of that CA.
    let review = downscale_review(&serde_json::to_value(sts.get("guarded").await?)?, 1);
    let path = "/admission/no-downscale";
    let anonymous = post(&server, client_config(&server, None)?, path, &review).await;
    ensure!(
        anonymous.is_err(),
        "a caller without a client certificate was answered: {anonymous:?}"
    );
    let stranger_key = rcgen::KeyPair::generate()?;
    let stranger =
        rcgen::CertificateParams::new(Vec::<String>::new())?.self_signed(&stranger_key)?;
    let forged = post(
        &server,
        client_config(
            &server,
            Some((&stranger.pem(), &stranger_key.serialize_pem())),
        )?,
        path,
        &review,
    )
    .await;
    ensure!(
        forged.is_err(),
        "a caller with a certificate of another CA was answered: {forged:?}"
    );
    // The control: kube-apiserver's own client certificate gets an answer.
    let cert = std::fs::read_to_string(pki.join("webhook-client.crt"))?;
    let key = std::fs::read_to_string(pki.join("webhook-client.key"))?;
    let (status, answer) = post(
        &server,
        client_config(&server, Some((&cert, &key)))?,
        path,
        &review,
    )
    .await?;
    ensure!(
        status == 200 && answer["response"]["allowed"] == false,
        "{status}: {answer}"
    );

    // Subject pinning (`--client-cn`): the same certificate of the same CA is refused by a
    // server pinned to another subject, and answered by one pinned to its own.
    let ca = ca_file.to_str().unwrap();
    for (subject, answered) in [
        ("someone-else", false),
        ("kube-apiserver-webhook-client", true),
    ] {
        let pinned = start(&ns.name, &["--client-ca-file", ca, "--client-cn", subject]).await?;
        let outcome = post(
            &pinned,
            client_config(&pinned, Some((&cert, &key)))?,
            path,
            &review,
        )
        .await;
        match (outcome, answered) {
            (Ok((200, _)), true) | (Err(_), false) => {}
            (outcome, _) => bail!(
                "a server pinned to {subject:?} {} kube-apiserver's certificate: {outcome:?}",
                if answered { "refused" } else { "answered" }
            ),
        }
    }
    Ok(())
}
