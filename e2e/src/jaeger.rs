//! A real Jaeger (built from its Go module by the plane build, memory storage) receiving
//! OTLP from the services, and its query API to read the traces back.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::plane::{cached_tool, free_port};
use crate::services::ServiceProcess;
use crate::support::{eventually, http_get};

/// The Jaeger binary: `$JAEGER`, else the plane build's cache for the pinned version.
pub fn binary() -> Result<PathBuf> {
    cached_tool("JAEGER", "JAEGER_VERSION", "jaeger")
}

/// A running Jaeger: OTLP over gRPC and HTTP, and the query API.
#[derive(Debug)]
pub struct Jaeger {
    pub otlp_grpc: SocketAddr,
    pub otlp_http: SocketAddr,
    pub query: SocketAddr,
    _process: ServiceProcess,
}

/// One span as the query API shows it.
#[derive(Clone, Debug)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    pub operation: String,
    pub service: String,
    pub parent: Option<String>,
    pub tags: HashMap<String, String>,
}

impl Jaeger {
    /// Starts Jaeger on free local ports and waits until its query API answers. With `tls`
    /// (certificate and key files), both OTLP receivers serve TLS.
    pub async fn start(tls: Option<(&Path, &Path)>) -> Result<Self> {
        let [grpc, http, query, query_grpc] =
            [free_port()?, free_port()?, free_port()?, free_port()?];
        let dir = std::env::temp_dir().join(format!(
            "strata-e2e-jaeger-{}",
            core_k8s::args::random_suffix()
        ));
        std::fs::create_dir_all(&dir)?;
        // Only what the test needs: OTLP in, memory storage, the query API; no other listener
        // (the defaults would take fixed ports: 4317, 16686, 8888…).
        let tls = tls
            .map(|(cert, key)| {
                format!(
                    "\n        tls:\n          cert_file: {}\n          key_file: {}",
                    cert.display(),
                    key.display()
                )
            })
            .unwrap_or_default();
        let config = format!(
            "service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}{tls}
      http:
        endpoint: 127.0.0.1:{http}{tls}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"
        );
        let path = dir.join("jaeger.yaml");
        std::fs::write(&path, config)?;
        let config_arg = format!("--config={}", path.display());
        let process = ServiceProcess::spawn_plain_blocking(
            &binary()?,
            &[config_arg.as_str()],
            &std::env::temp_dir().join("strata-e2e-logs"),
        )?;
        let query: SocketAddr = format!("127.0.0.1:{query}").parse()?;
        eventually(
            "Jaeger's query API answers",
            Duration::from_secs(60),
            || async {
                Ok(matches!(http_get(query, "/api/services").await, Ok((200, _))).then_some(()))
            },
        )
        .await
        .with_context(|| format!("Jaeger log:\n{}", process.logs()))?;
        Ok(Self {
            otlp_grpc: format!("127.0.0.1:{grpc}").parse()?,
            otlp_http: format!("127.0.0.1:{http}").parse()?,
            query,
            _process: process,
        })
    }

    /// Every span of the traces of `service` that contain `operation` (the last hour).
    pub async fn traces(&self, service: &str, operation: &str) -> Result<Vec<Vec<Span>>> {
        let path =
            format!("/api/traces?service={service}&operation={operation}&limit=1000&lookback=1h");
        let (status, body) = http_get(self.query, &path).await?;
        if status != 200 {
            bail!("GET {path}: {status} {body}");
        }
        let answer: Value = serde_json::from_str(&body).with_context(|| body.clone())?;
        Ok(answer["data"]
            .as_array()
            .map(|traces| traces.iter().map(spans_of).collect())
            .unwrap_or_default())
    }
}

fn spans_of(trace: &Value) -> Vec<Span> {
    let services: HashMap<&str, &str> = trace["processes"]
        .as_object()
        .map(|p| {
            p.iter()
                .map(|(id, process)| {
                    (
                        id.as_str(),
                        process["serviceName"].as_str().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    trace["spans"]
        .as_array()
        .map(|spans| {
            spans
                .iter()
                .map(|s| Span {
                    trace_id: s["traceID"].as_str().unwrap_or_default().to_string(),
                    span_id: s["spanID"].as_str().unwrap_or_default().to_string(),
                    operation: s["operationName"].as_str().unwrap_or_default().to_string(),
                    service: services
                        .get(s["processID"].as_str().unwrap_or_default())
                        .copied()
                        .unwrap_or_default()
                        .to_string(),
                    parent: s["references"].as_array().and_then(|refs| {
                        refs.iter()
                            .find(|r| r["refType"] == "CHILD_OF")
                            .and_then(|r| r["spanID"].as_str())
                            .map(str::to_string)
                    }),
                    tags: s["tags"]
                        .as_array()
                        .map(|tags| {
                            tags.iter()
                                .map(|t| {
                                    let value = match &t["value"] {
                                        Value::String(s) => s.clone(),
                                        other => other.to_string(),
                                    };
                                    (t["key"].as_str().unwrap_or_default().to_string(), value)
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}
