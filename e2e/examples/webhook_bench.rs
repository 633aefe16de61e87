//! `make bench` part: a constant-rate load of no-downscale AdmissionReviews over TLS on
//! loopback against the admission-webhook (self-managed certificate, verified against the CA
//! from its Secret). Half the reviews are denied downscales of a StatefulSet labelled
//! `grafana.com/no-downscale=true`, half allowed upscales; every answer is checked.
//!
//! Open loop: request *n* is due at `n / rate` seconds, spread over a fixed set of keep-alive
//! connections. Latency counts from the due time whenever the connection was still busy then,
//! so a slow answer that delays the next request on its connection is charged to that request
//! too (no coordinated omission); on an idle connection it counts from the actual send, since
//! tokio's timers fire up to a millisecond late and that delay is the generator's, not the
//! server's.
//! Prints one JSON line. The server binary is `$WEBHOOK_BIN` (the bench builds it in release
//! mode); `BENCH_WEBHOOK_RATE`, `BENCH_WEBHOOK_SECONDS`, `BENCH_WEBHOOK_CONNECTIONS` tune it.
//! With `$FLOOR_BIN` (the `tls_floor_server` example) the floor runs beside it and the two are
//! loaded in alternating slices (`BENCH_WEBHOOK_SLICES`, default 6) of the same run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark driver fails loudly

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use strata_e2e::bench::{
    anchor_style, cpu_ticks, percentile, rss_kib, spawn_anchor_style, spawn_measured,
};
use strata_e2e::plane::free_port;
use strata_e2e::support::{TestNamespace, apply_shipped_crd, cluster, eventually, http_get};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A StatefulSet as kube-apiserver sends it (defaulted fields included), `replicas` replicas.
fn stateful_set(ns: &str, replicas: u32) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": "ingester-zone-a", "namespace": ns, "uid": "8f0c1a9e-5d7b-4c1e-9a51-3b1f0e6c2d44",
            "resourceVersion": "48213", "generation": 7, "creationTimestamp": "2026-11-20T08:00:00Z",
            "labels": {"grafana.com/no-downscale": "true", "rollout-group": "ingester", "name": "ingester-zone-a"},
            "annotations": {"rollout-max-unavailable": "2", "grafana.com/prepare-downscale-http-path": "ingester/prepare-shutdown"}
        },
        "spec": {
            "replicas": replicas, "serviceName": "ingester", "podManagementPolicy": "Parallel",
            "revisionHistoryLimit": 10, "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "selector": {"matchLabels": {"name": "ingester-zone-a"}},
            "template": {
                "metadata": {"labels": {"name": "ingester-zone-a", "rollout-group": "ingester"}},
                "spec": {
                    "containers": [{
                        "name": "ingester", "image": "grafana/mimir:2.14.0",
                        "args": ["-target=ingester", "-config.file=/etc/mimir/mimir.yaml"],
                        "ports": [{"containerPort": 8080, "name": "http-metrics", "protocol": "TCP"},
                                  {"containerPort": 9095, "name": "grpc", "protocol": "TCP"}],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                                           "initialDelaySeconds": 15, "timeoutSeconds": 1, "periodSeconds": 10,
                                           "successThreshold": 1, "failureThreshold": 3},
                        "resources": {"requests": {"cpu": "4", "memory": "15Gi"}, "limits": {"memory": "25Gi"}},
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                        "imagePullPolicy": "IfNotPresent",
                        "volumeMounts": [{"mountPath": "/data", "name": "ingester-data"}]
                    }],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 1200, "dnsPolicy": "ClusterFirst",
                    "schedulerName": "default-scheduler", "securityContext": {}
                }
            },
            "volumeClaimTemplates": [{
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "ingester-data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}},
                         "volumeMode": "Filesystem"}
            }]
        },
        "status": {"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3,
                   "availableReplicas": 3, "observedGeneration": 7,
                   "currentRevision": "ingester-zone-a-6d9f8c7b5", "updateRevision": "ingester-zone-a-6d9f8c7b5",
                   "collisionCount": 0}
    })
}

/// An UPDATE review of the StatefulSet from 3 replicas to `to`.
fn review(ns: &str, uid: &str, to: u32) -> Bytes {
    let body = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
            "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
            "requestKind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
            "name": "ingester-zone-a", "namespace": ns, "operation": "UPDATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": stateful_set(ns, to),
            "oldObject": stateful_set(ns, 3),
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}
        }
    });
    Bytes::from(serde_json::to_vec(&body).unwrap())
}

struct Load {
    address: std::net::SocketAddr,
    server_name: ServerName<'static>,
    tls: TlsConnector,
    bodies: [(Bytes, bool); 2],
    rate: f64,
    connections: usize,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(load: &Load) -> Result<Sender> {
    let tcp = tokio::net::TcpStream::connect(load.address).await?;
    tcp.set_nodelay(true)?;
    let stream = load.tls.connect(load.server_name.clone(), tcp).await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// Sends one review; `Ok(())` only for a 200 whose answer matches the expected decision.
async fn call(sender: &mut Sender, body: &Bytes, allowed: bool) -> Result<()> {
    sender.ready().await?;
    let request = hyper::Request::post("/admission/no-downscale")
        .header("content-type", "application/json")
        .header("host", "127.0.0.1")
        .body(Full::new(body.clone()))?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    if status != 200 {
        bail!("HTTP {status}: {}", String::from_utf8_lossy(&bytes));
    }
    let answer: serde_json::Value = serde_json::from_slice(&bytes)?;
    if answer.pointer("/response/allowed") != Some(&serde_json::Value::Bool(allowed)) {
        bail!("wrong decision: {answer}");
    }
    Ok(())
}

#[derive(Default)]
struct Outcome {
    latencies_us: Vec<u64>,
    /// Due times (ms since the start) of the answers slower than 1 ms.
    slow_at_ms: Vec<u64>,
    errors: Vec<String>,
}

/// Connection `k` sends requests `k, k + C, k + 2C, ...` at their due times until `until`.
async fn worker(load: Arc<Load>, k: usize, start: Instant, until: Duration) -> Outcome {
    let mut out = Outcome::default();
    let mut sender = None;
    let mut n = k;
    let mut free_since = Duration::ZERO;
    loop {
        let due = Duration::from_secs_f64(n as f64 / load.rate);
        if due >= until {
            return out;
        }
        tokio::time::sleep_until((start + due).into()).await;
        let origin = if free_since <= due {
            start.elapsed()
        } else {
            due
        };
        let (body, allowed) = &load.bodies[n % 2];
        let result = async {
            if sender.is_none() {
                sender = Some(connect(&load).await?);
            }
            call(sender.as_mut().unwrap(), body, *allowed).await
        }
        .await;
        free_since = start.elapsed();
        match result {
            Ok(()) => {
                let latency = free_since.saturating_sub(origin);
                out.latencies_us.push(latency.as_micros() as u64);
                if latency > Duration::from_millis(1) {
                    out.slow_at_ms.push(due.as_millis() as u64);
                }
            }
            Err(e) => {
                sender = None;
                out.errors.push(format!("{e:#}"));
            }
        }
        n += load.connections;
    }
}

async fn run(load: &Arc<Load>, seconds: u64) -> Outcome {
    let start = Instant::now();
    let until = Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..load.connections)
        .map(|k| tokio::spawn(worker(load.clone(), k, start, until)))
        .collect();
    let mut all = Outcome::default();
    for task in tasks {
        let out = task.await.unwrap();
        all.latencies_us.extend(out.latencies_us);
        all.slow_at_ms.extend(out.slow_at_ms);
        all.errors.extend(out.errors);
    }
    all.latencies_us.sort_unstable();
    all
}

/// Where the load goes: a TLS address whose certificate `roots` verify, served by `pid`.
struct Target {
    address: std::net::SocketAddr,
    /// The name the certificate is checked against.
    server_name: ServerName<'static>,
    roots: tokio_rustls::rustls::RootCertStore,
    pid: u32,
}

fn load_for(target: &Target, bodies: [(Bytes, bool); 2]) -> Arc<Load> {
    let config = tokio_rustls::rustls::ClientConfig::builder()
        .with_root_certificates(target.roots.clone())
        .with_no_client_auth();
    Arc::new(Load {
        address: target.address,
        server_name: target.server_name.clone(),
        tls: TlsConnector::from(Arc::new(config)),
        bodies,
        rate: env_or("BENCH_WEBHOOK_RATE", 2000) as f64,
        connections: env_or("BENCH_WEBHOOK_CONNECTIONS", 8) as usize,
    })
}

/// The answers of one measured stretch and the server's CPU over it.
#[derive(Default)]
struct Measured {
    out: Outcome,
    cpu_seconds: f64,
    seconds: u64,
}

impl Measured {
    /// Adds a slice run `offset_ms` after the first (slow answers keep distinct windows).
    fn add(&mut self, slice: Outcome, cpu_seconds: f64, seconds: u64, offset_ms: u64) {
        self.out.latencies_us.extend(slice.latencies_us);
        self.out
            .slow_at_ms
            .extend(slice.slow_at_ms.iter().map(|ms| ms + offset_ms));
        self.out.errors.extend(slice.errors);
        self.cpu_seconds += cpu_seconds;
        self.seconds += seconds;
    }
}

/// One load run of `seconds` against `load`, with the CPU `pid` used meanwhile.
async fn slice(load: &Arc<Load>, pid: u32, seconds: u64) -> (Outcome, f64) {
    let before = cpu_ticks(pid);
    let out = run(load, seconds).await;
    (out, (cpu_ticks(pid) - before) as f64 / 100.0)
}

fn summary(load: &Load, m: &mut Measured, pid: u32, idle_rss: u64) -> serde_json::Value {
    m.out.latencies_us.sort_unstable();
    let l: Vec<f64> = m
        .out
        .latencies_us
        .iter()
        .map(|us| *us as f64 / 1000.0)
        .collect();
    let l = &l;
    serde_json::json!({
        "rate": load.rate,
        "seconds": m.seconds,
        "connections": load.connections,
        "requests": l.len() + m.out.errors.len(),
        "ok": l.len(),
        "errors": m.out.errors.len(),
        "first_error": m.out.errors.first(),
        "p50_ms": percentile(l, 0.5),
        "p99_ms": percentile(l, 0.99),
        "p999_ms": percentile(l, 0.999),
        "max_ms": percentile(l, 1.0),
        "server_cpu_seconds": m.cpu_seconds,
        // Slow answers come in bursts: how many 100 ms windows held any.
        "slow_windows_100ms": m.out.slow_at_ms.iter().map(|ms| ms / 100).collect::<std::collections::BTreeSet<_>>().len(),
        "slow": m.out.slow_at_ms.len(),
        "idle_rss_kib": idle_rss,
        "rss_kib": rss_kib(pid, "VmRSS:"),
        "peak_rss_kib": rss_kib(pid, "VmHWM:"),
        "request_bytes": load.bodies[0].0.len(),
    })
}

fn p99_ms(out: &Outcome) -> f64 {
    let mut l: Vec<f64> = out
        .latencies_us
        .iter()
        .map(|us| *us as f64 / 1000.0)
        .collect();
    l.sort_by(f64::total_cmp);
    percentile(&l, 0.99)
}

/// Warms up, then loads `target` for `BENCH_WEBHOOK_SECONDS` and summarises the answers and
/// the server's CPU and memory.
async fn measure(target: Target, bodies: [(Bytes, bool); 2]) -> Result<serde_json::Value> {
    let seconds = env_or("BENCH_WEBHOOK_SECONDS", 30);
    let load = load_for(&target, bodies);
    let idle_rss = rss_kib(target.pid, "VmRSS:");
    // Warm-up (connections, allocator), not recorded.
    let warm = run(&load, 2).await;
    if let Some(e) = warm.errors.first() {
        bail!("warm-up failed: {e}");
    }
    let mut m = Measured::default();
    let (out, cpu) = slice(&load, target.pid, seconds).await;
    m.add(out, cpu, seconds, 0);
    Ok(summary(&load, &mut m, target.pid, idle_rss))
}

/// The server and the floor measured in alternating slices of the same run
/// (`BENCH_WEBHOOK_SLICES` each, `BENCH_WEBHOOK_SECONDS` in all per target), so both see the
/// same machine: whatever else slows the machine down lands on both. Each summary covers all
/// its slices; `slices` has every slice's p99 for both, in order.
async fn measure_interleaved(
    server: Target,
    floor: Target,
    bodies: [(Bytes, bool); 2],
) -> Result<(serde_json::Value, serde_json::Value, Vec<serde_json::Value>)> {
    let seconds = env_or("BENCH_WEBHOOK_SECONDS", 30);
    let slices = env_or("BENCH_WEBHOOK_SLICES", 6).max(1);
    let each = (seconds / slices).max(1);
    let (server_load, floor_load) = (load_for(&server, bodies.clone()), load_for(&floor, bodies));
    let idle = (rss_kib(server.pid, "VmRSS:"), rss_kib(floor.pid, "VmRSS:"));
    for (load, what) in [(&server_load, "server"), (&floor_load, "floor")] {
        let warm = run(load, 2).await;
        if let Some(e) = warm.errors.first() {
            bail!("{what} warm-up failed: {e}");
        }
    }
    let (mut s, mut f) = (Measured::default(), Measured::default());
    let mut per_slice = Vec::new();
    for i in 0..slices {
        let offset = i * each * 1000;
        let (out_s, cpu_s) = slice(&server_load, server.pid, each).await;
        let (out_f, cpu_f) = slice(&floor_load, floor.pid, each).await;
        per_slice.push(serde_json::json!({
            "server_p99_ms": p99_ms(&out_s), "floor_p99_ms": p99_ms(&out_f),
            "server_errors": out_s.errors.len(), "floor_errors": out_f.errors.len(),
        }));
        s.add(out_s, cpu_s, each, offset);
        f.add(out_f, cpu_f, each, offset);
    }
    Ok((
        summary(&server_load, &mut s, server.pid, idle.0),
        summary(&floor_load, &mut f, floor.pid, idle.1),
        per_slice,
    ))
}

/// A root store trusting one PEM certificate.
fn trusting(pem: &[u8]) -> Result<tokio_rustls::rustls::RootCertStore> {
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(pem)?)?;
    Ok(roots)
}

/// The floor (`$FLOOR_BIN`, the `tls_floor_server` example): the same server stack with a
/// fixed answer and its own self-signed certificate. Returns the process (killed on drop)
/// and where to send the load.
async fn start_floor(binary: &str) -> Result<(FloorProcess, Target)> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.self_signed(&key)?;
    let dir = std::env::temp_dir().join(format!("strata-floor-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, cert.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    let address: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let child = std::process::Command::new(binary)
        .arg(address.to_string())
        .arg(&cert_file)
        .arg(&key_file)
        .spawn()
        .with_context(|| format!("starting {binary}"))?;
    let process = FloorProcess { child, dir };
    eventually(
        "floor server listening",
        Duration::from_secs(20),
        || async { Ok(tokio::net::TcpStream::connect(address).await.ok().map(drop)) },
    )
    .await?;
    let target = Target {
        address,
        server_name: ServerName::IpAddress(address.ip().into()),
        roots: trusting(cert.pem().as_bytes())?,
        pid: process.child.id(),
    };
    Ok((process, target))
}

struct FloorProcess {
    child: std::process::Child,
    dir: std::path::PathBuf,
}

impl Drop for FloorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "bench-webhook").await?;
    let ns = ns.name.clone();

    let port = free_port()?;
    let tls_address = format!("127.0.0.1:{port}");
    // Strata's flags, or the Grafana operator's command line (its binary, or Strata's in
    // compatibility mode): the webhooks on -server-tls.port, the certificate in its Secret
    // for the Service's name.
    let (server, secret_name, server_name) = if anchor_style() {
        apply_shipped_crd(&client, &ns, "zone-aware-pod-disruption-budget.yaml").await?;
        apply_shipped_crd(&client, &ns, "replica-templates.yaml").await?;
        let tls_port = format!("-server-tls.port={port}");
        let (server, admin) =
            spawn_anchor_style("WEBHOOK_BIN", &ns, &["-server-tls.enabled=true", &tls_port])?;
        eventually("webhook ready", Duration::from_secs(60), || async {
            Ok(matches!(http_get(admin, "/ready").await, Ok((200, _))).then_some(()))
        })
        .await
        .with_context(|| server.logs())?;
        (
            server,
            "rollout-operator-self-signed-certificate",
            ServerName::try_from(format!("rollout-operator.{ns}.svc"))?,
        )
    } else {
        let server = spawn_measured(
            "WEBHOOK_BIN",
            "admission-webhook",
            &[
                "--leader-elect=false",
                "--lease-namespace",
                &ns,
                "--tls-address",
                &tls_address,
                "--tls-extra-names",
                "127.0.0.1",
                "--log-filter",
                "warn",
            ],
        )?;
        let admin_address = server.admin.context("admin address")?;
        eventually("webhook ready", Duration::from_secs(60), || async {
            Ok(matches!(http_get(admin_address, "/readyz").await, Ok((200, _))).then_some(()))
        })
        .await?;
        let name = ServerName::IpAddress(tls_address.parse::<std::net::SocketAddr>()?.ip().into());
        (server, "strata-admission-webhook-certificate", name)
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret = eventually("certificate Secret", Duration::from_secs(60), || async {
        Ok(secrets.get_opt(secret_name).await?)
    })
    .await?;
    let ca = secret
        .data
        .and_then(|d| d.get("ca").cloned())
        .context("the Secret has no CA")?;
    let roots = trusting(&ca.0)?;
    let bodies = [
        (review(&ns, "deny", 2), false),
        (review(&ns, "allow", 4), true),
    ];
    let target = Target {
        address: tls_address.parse()?,
        server_name,
        roots,
        pid: server.pid(),
    };
    let result = match std::env::var("FLOOR_BIN") {
        Ok(floor_bin) => {
            let (_floor, floor) = start_floor(&floor_bin).await?;
            let (mut result, floor, slices) = measure_interleaved(target, floor, bodies).await?;
            result["floor"] = floor;
            result["slices"] = serde_json::Value::Array(slices);
            result
        }
        Err(_) => measure(target, bodies).await?,
    };
    drop(server);
    println!("{result}");
    Ok(())
}
