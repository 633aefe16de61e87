//! The admission server as a hostile or unlucky network sees it, over real TLS: slow clients
//! that never finish (slowloris: stalled handshakes, half-sent requests, headers trickled a
//! byte at a time) do not stop it serving everyone else, and are cut off once
//! `--request-timeout` has passed; a connection left quiet is closed after `--idle-timeout`,
//! a busy one is not; 64 clients at once are all answered correctly; an oversized body is
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
    /// HTTP/1.1 (no ALPN).
    tls: TlsConnector,
    /// HTTP/2 by ALPN.
    tls_h2: TlsConnector,
}

/// Starts the server with a certificate of our own (so the test can trust it), no injection,
/// and these extra flags.
async fn start(ns: &str, extra: &[&str]) -> Result<Server> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.self_signed(&key)?;
    let dir = std::env::temp_dir().join(format!("strata-robust-{ns}"));
    std::fs::create_dir_all(&dir)?;
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, cert.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    let address: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let (cert_file, key_file) = (cert_file.to_string_lossy(), key_file.to_string_lossy());
    let mut args = vec![
        "--tls-cert-file",
        &cert_file,
        "--tls-key-file",
        &key_file,
        "--inject-ca-bundle=false",
    ];
    args.extend_from_slice(extra);
    let process = start_admission_webhook(ns, &address.to_string(), &args)?;
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(cert.pem().as_bytes())?)?;
    let config = tokio_rustls::rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // As kube-apiserver connects: offering HTTP/2.
    let mut h2 = config.clone();
    h2.alpn_protocols = vec![b"h2".to_vec()];
    eventually("server listening", Duration::from_secs(30), || async {
        Ok(tokio::net::TcpStream::connect(address).await.ok().map(drop))
    })
    .await?;
    Ok(Server {
        process,
        address,
        tls: TlsConnector::from(Arc::new(config)),
        tls_h2: TlsConnector::from(Arc::new(h2)),
    })
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

type TlsStream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection to the server (HTTP/1.1).
async fn tls_stream(server: &Server) -> Result<TlsStream> {
    tls_stream_with(server, &server.tls).await
}

async fn tls_stream_with(server: &Server, connector: &TlsConnector) -> Result<TlsStream> {
    let tcp = tokio::net::TcpStream::connect(server.address).await?;
    Ok(connector
        .connect(ServerName::IpAddress(server.address.ip().into()), tcp)
        .await?)
}

/// Reads until the server closes the connection (end of stream, or an error such as a reset),
/// within `within`; everything read. `None` when it was still open then.
async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
) -> Option<Vec<u8>> {
    let mut read = Vec::new();
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .ok()
    .map(|()| read)
}

/// The HTTP/2 client preface and an empty SETTINGS frame: a connection open and set up.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// An HTTP/2 PING frame (8 bytes of payload, stream 0).
const H2_PING: &[u8] = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00strata!!";

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

/// The slow-client test's `--request-timeout`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_many_clients_and_oversized_bodies() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "robust").await?;
    let server = start(
        &ns.name,
        &[
            "--request-timeout",
            &format!("{}s", REQUEST_TIMEOUT.as_secs()),
        ],
    )
    .await?;

    // A kept-alive connection, as kube-apiserver keeps them: one review now, one at the end,
    // after longer than the request timeout with nothing sent (it must still be served).
    let mut kept_alive = connect(&server).await?;
    let (status, _) = post(&mut kept_alive, review("kept-alive-1", 2)).await?;
    assert_eq!(status, 200);
    let kept_alive_since = std::time::Instant::now();

    // Slowloris: 32 connections that stall in the TLS handshake (a few bytes of a ClientHello),
    // 32 that finish TLS and send half a request (headers promising a body that never comes),
    // and 8 that send their headers a byte every 200 ms (each byte would keep an idle timer
    // alive). The client side never lets go of them.
    // Each slow connection's clock starts before it is opened: the server's timeout cannot
    // have started earlier.
    let mut stalled = Vec::new();
    for _ in 0..32 {
        let opened = std::time::Instant::now();
        let mut tcp = tokio::net::TcpStream::connect(server.address).await?;
        tcp.write_all(&[0x16, 0x03, 0x01, 0x00]).await?;
        stalled.push((tcp, opened));
    }
    let mut half_sent = Vec::new();
    for _ in 0..32 {
        let opened = std::time::Instant::now();
        let mut stream = tls_stream(&server).await?;
        stream.write_all(&review_head(100_000)).await?;
        stream.flush().await?;
        half_sent.push((stream, opened));
    }
    let mut trickling = Vec::new();
    for _ in 0..8 {
        let mut stream = tls_stream(&server).await?;
        trickling.push(tokio::spawn(async move {
            let started = std::time::Instant::now();
            for byte in review_head(100) {
                if stream.write_all(&[byte]).await.is_err() || stream.flush().await.is_err() {
                    // Cut off: how long the server put up with it.
                    return Some(started.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            None
        }));
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
    assert_eq!(allowed().await?, 641.0);

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

    assert_eq!(
        allowed().await?,
        642.0,
        "the reviews after the abuse (and the first kept-alive one)"
    );

    // The server cut every slow connection off once the request timeout had passed (and not
    // long after): the stalled handshakes are closed, each half-sent request was answered 408,
    // and every trickler found its connection gone long before its headers were out (111
    // bytes at 5 a second would take 22 s). The promise is the timeout itself; the 3 s margin
    // past it, counted from each connection's own start, is for scheduling on a shared
    // two-core machine, and stays far below what a server that never cut them off would show
    // (the tricklers' 22 s).
    let deadline = REQUEST_TIMEOUT + Duration::from_secs(3);
    for (i, (tcp, opened)) in stalled.iter_mut().enumerate() {
        let left = deadline.saturating_sub(opened.elapsed());
        assert!(
            read_until_closed(tcp, left).await.is_some(),
            "stalled handshake {i} still open {:?} after it began",
            opened.elapsed()
        );
    }
    for (i, (stream, opened)) in half_sent.iter_mut().enumerate() {
        let left = deadline.saturating_sub(opened.elapsed());
        let answer = read_until_closed(stream, left).await;
        let answer = answer.unwrap_or_else(|| {
            panic!(
                "half-sent request {i} still open {:?} after it began",
                opened.elapsed()
            )
        });
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 408"),
            "half-sent request {i}: {answer}"
        );
    }
    for (i, trickler) in trickling.into_iter().enumerate() {
        let cut_off = trickler.await?;
        let cut_off = cut_off.unwrap_or_else(|| panic!("trickler {i} sent all its headers"));
        // Not before the timeout: its first byte, which starts the server's clock, left
        // after `started`.
        assert!(
            cut_off >= REQUEST_TIMEOUT && cut_off <= deadline,
            "trickler {i} cut off after {cut_off:?}"
        );
    }

    // The kept-alive connection is still served: only a request in progress has the request
    // timeout; a connection between requests has the idle one (3 m).
    let quiet_for = REQUEST_TIMEOUT + Duration::from_secs(2);
    tokio::time::sleep(quiet_for.saturating_sub(kept_alive_since.elapsed())).await;
    let (status, answer) = post(&mut kept_alive, review("kept-alive-2", 2)).await?;
    assert_eq!(
        (status, answer["response"]["uid"].clone()),
        (200, serde_json::json!("kept-alive-2")),
        "a review on a connection kept alive for {:?}",
        kept_alive_since.elapsed()
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

/// An HTTP/2 connection (as kube-apiserver opens them) on which the client says nothing after
/// setting it up is closed once `--idle-timeout` has passed, not before; one kept busy (a PING
/// a second) stays open well past it, and the server still answers reviews on new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_connection_is_closed_after_the_idle_timeout_a_busy_one_is_not() -> Result<()> {
    const IDLE: Duration = Duration::from_secs(3);
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "idle").await?;
    // A long request timeout: only the idle timeout can close these.
    let server = start(
        &ns.name,
        &["--idle-timeout", "3s", "--request-timeout", "30s"],
    )
    .await?;
    let mut quiet = tls_stream_with(&server, &server.tls_h2).await?;
    assert_eq!(
        quiet.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "HTTP/2 negotiated"
    );
    let mut busy = tls_stream_with(&server, &server.tls_h2).await?;
    let opened = std::time::Instant::now();
    quiet.write_all(H2_PREFACE).await?;
    busy.write_all(H2_PREFACE).await?;
    let pinger = tokio::spawn(async move {
        // A ping a second for eight seconds, reading the answers as they come.
        let mut chunk = [0u8; 4096];
        for _ in 0..8 {
            busy.write_all(H2_PING).await?;
            busy.flush().await?;
            let read = tokio::time::timeout(Duration::from_secs(1), busy.read(&mut chunk)).await;
            match read {
                Ok(Ok(0)) | Ok(Err(_)) => bail!("the busy connection was closed"),
                _ => {}
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Ok::<_, anyhow::Error>(busy)
    });
    let closed = read_until_closed(&mut quiet, Duration::from_secs(15)).await;
    let after = opened.elapsed();
    assert!(
        closed.is_some(),
        "the quiet connection was still open after 15 s"
    );
    // The promise is the idle timeout: never before it (the server's idle clock last restarts
    // on the preface and its answer, both after `opened`), and soon after it, with 3 s for scheduling on a shared two-core machine
    // (well below the 8 s the busy connection is kept open).
    assert!(
        after >= IDLE && after < IDLE + Duration::from_secs(3),
        "the quiet connection closed after {after:?}"
    );
    let mut busy = pinger.await??;
    assert!(
        opened.elapsed() > IDLE * 2,
        "the busy connection was watched past twice the idle timeout"
    );
    // Still open: a last ping is answered (some bytes come back).
    busy.write_all(H2_PING).await?;
    busy.flush().await?;
    let mut chunk = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(2), busy.read(&mut chunk)).await??;
    assert!(n > 0, "the busy connection answered its last ping");
    let mut sender = connect(&server).await?;
    let (status, answer) = post(&mut sender, review("after-idle", 2)).await?;
    assert_eq!(
        (status, answer["response"]["allowed"].clone()),
        (200, serde_json::json!(true))
    );
    Ok(())
}
