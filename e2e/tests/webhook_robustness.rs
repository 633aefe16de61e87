//! The admission server as a hostile or unlucky network sees it, over real TLS: slow clients
//! that never finish (slowloris: stalled handshakes and half-sent requests) do not stop it
//! serving everyone else; 64 clients at once are all answered correctly; an oversized body is
//! refused with 413; and its memory stays under the chart's limit throughout.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use strata_e2e::plane::free_port;
use strata_e2e::services::{ServiceProcess, start_admission_webhook};
use strata_e2e::support::{TestNamespace, cluster, eventually};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

struct Server {
    process: ServiceProcess,
    address: std::net::SocketAddr,
    tls: TlsConnector,
}

/// Starts the server with a certificate of our own (so the test can trust it), no injection.
async fn start(ns: &str) -> Result<Server> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.self_signed(&key)?;
    let dir = std::env::temp_dir().join(format!("strata-robust-{ns}"));
    std::fs::create_dir_all(&dir)?;
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, cert.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    let address: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let process = start_admission_webhook(
        ns,
        &address.to_string(),
        &[
            "--tls-cert-file",
            &cert_file.to_string_lossy(),
            "--tls-key-file",
            &key_file.to_string_lossy(),
            "--inject-ca-bundle=false",
        ],
    )?;
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(cert.pem().as_bytes())?)?;
    let config = tokio_rustls::rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    eventually("server listening", Duration::from_secs(30), || async {
        Ok(tokio::net::TcpStream::connect(address).await.ok().map(drop))
    })
    .await?;
    Ok(Server {
        process,
        address,
        tls: TlsConnector::from(Arc::new(config)),
    })
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// A TLS connection to the server.
async fn tls_stream(
    server: &Server,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(server.address).await?;
    Ok(server
        .tls
        .connect(ServerName::IpAddress(server.address.ip().into()), tcp)
        .await?)
}

/// The headers of a review announcing `length` bytes, and the first bytes of its body.
fn review_head(length: usize) -> Vec<u8> {
    format!("POST /admission/no-downscale HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n{{\"apiVersion\":").into_bytes()
}

async fn connect(server: &Server) -> Result<Sender> {
    let stream = tls_stream(server).await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// A no-downscale review of an unlabelled StatefulSet going from 3 to `to` replicas.
fn review(uid: &str, to: i64) -> Bytes {
    let sts = |replicas: i64| {
        serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "s", "namespace": "n"}, "spec": {"replicas": replicas}})
    };
    Bytes::from(
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "operation": "UPDATE", "name": "s", "namespace": "n",
                "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
                "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
                "oldObject": sts(3), "object": sts(to)}
        }))
        .unwrap(),
    )
}

/// Posts `body`; the status and the decoded answer.
async fn post(sender: &mut Sender, body: Bytes) -> Result<(u16, serde_json::Value)> {
    sender.ready().await?;
    let request = hyper::Request::post("/admission/no-downscale")
        .header("content-type", "application/json")
        .header("host", "127.0.0.1")
        .body(Full::new(body))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok((status, serde_json::from_slice(&bytes).unwrap_or_default()))
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_many_clients_and_oversized_bodies() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "robust").await?;
    let server = start(&ns.name).await?;

    // Slowloris: 32 connections that stall in the TLS handshake (a few bytes of a ClientHello),
    // and 32 that finish TLS and send half a request (headers promising a body that never
    // comes). They stay open for the rest of the test.
    let mut stalled = Vec::new();
    for _ in 0..32 {
        let mut tcp = tokio::net::TcpStream::connect(server.address).await?;
        tcp.write_all(&[0x16, 0x03, 0x01, 0x00]).await?;
        stalled.push(tcp);
    }
    let mut half_sent = Vec::new();
    for _ in 0..32 {
        let mut stream = tls_stream(&server).await?;
        stream.write_all(&review_head(100_000)).await?;
        stream.flush().await?;
        half_sent.push(stream);
    }

    // 64 clients at once, each on its own connection, 10 reviews each: every one answered,
    // correctly (an unlabelled StatefulSet may scale down), while the slow ones hang on.
    let server = Arc::new(server);
    let clients: Vec<_> = (0..64)
        .map(|c| {
            let server = server.clone();
            tokio::spawn(async move {
                let mut sender = connect(&server).await?;
                for i in 0..10 {
                    let uid = format!("c{c}-{i}");
                    let (status, answer) = post(&mut sender, review(&uid, 1)).await?;
                    if status != 200
                        || answer["response"]["uid"] != uid.as_str()
                        || answer["response"]["allowed"] != true
                    {
                        bail!("client {c} review {i}: {status} {answer}");
                    }
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        .collect();
    // A server stuck behind the slow connections would hang the clients: bound the wait so
    // that shows as a failure, not a hung test.
    let answered = tokio::time::timeout(Duration::from_secs(120), async {
        let mut answered = 0;
        for client in clients {
            client.await.context("client task")??;
            answered += 10;
        }
        Ok::<_, anyhow::Error>(answered)
    })
    .await
    .context("the 64 clients were not all answered while slow clients held connections")??;
    assert_eq!(answered, 640);
    // The server's own count: every one of them reached the handler and was allowed.
    let allowed = || async {
        server
            .process
            .metric(
                "admission_webhook_reviews_total",
                &["webhook=\"no-downscale\"", "outcome=\"allowed\""],
            )
            .await
    };
    assert_eq!(allowed().await?, 640.0);

    // An oversized body is refused (413) from its announced length, before it is read: the
    // client sends the headers of a 7 MiB review and a few bytes, and reads the answer.
    let mut stream = tls_stream(&server).await?;
    stream.write_all(&review_head(7 * 1024 * 1024)).await?;
    stream.flush().await?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    tokio::time::timeout(Duration::from_secs(10), async {
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                bail!("the connection closed without an answer");
            }
            answer.extend_from_slice(&chunk[..n]);
        }
        Ok(())
    })
    .await
    .context("no answer to an oversized request")??;
    let status_line = String::from_utf8_lossy(&answer);
    let status_line = status_line.lines().next().unwrap_or_default();
    assert!(status_line.starts_with("HTTP/1.1 413"), "{status_line}");
    // The server still answers on a new connection afterwards.
    let mut sender = connect(&server).await?;
    let (status, answer) = post(&mut sender, review("after", 2)).await?;
    assert_eq!(
        (status, answer["response"]["allowed"].clone()),
        (200, serde_json::json!(true))
    );

    assert_eq!(allowed().await?, 641.0, "the review after the abuse");

    // The slow connections are still open (the server neither closed them nor was stopped by
    // them): a read finds nothing to read, not the end of the stream.
    let open = |tcp: &tokio::net::TcpStream| {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.try_read(&mut buf) {
                // TLS 1.3 session tickets may be waiting on the finished handshakes.
                Ok(n) if n > 0 => continue,
                Ok(_) => return false,
                Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
            }
        }
    };
    let closed_stalled = stalled.iter().filter(|tcp| !open(tcp)).count();
    let closed_half = half_sent
        .iter()
        .filter(|tls| !open(tls.get_ref().0))
        .count();
    assert_eq!(
        (closed_stalled, closed_half),
        (0, 0),
        "slow connections closed"
    );

    // They never cost the server its memory budget.
    let chart_limit_kib = strata_e2e::chart::documented_memory_limit("admissionWebhook")? / 1024;
    let peak = peak_rss_kib(server.process.pid());
    eprintln!("admission-webhook peak RSS under abuse: {peak} KiB");
    assert!(
        peak > 0 && peak < chart_limit_kib,
        "peak RSS {peak} KiB, chart limit {chart_limit_kib} KiB"
    );
    Ok(())
}
