//! Span export over OTLP, configured by the standard `OTEL_EXPORTER_OTLP_*` variables.
//!
//! - Protocol: `grpc` or `http/protobuf` (`OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`). Unset, an
//!   endpoint on port 4318 (OTLP/HTTP's registered port) means `http/protobuf`, anything else
//!   `grpc`, which is what Strata spoke before the variable was honoured.
//! - Endpoint: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is, else `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   (with `/v1/traces` appended for HTTP). `https://` uses rustls with the system's roots plus
//!   `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`, and a client certificate from
//!   `…_CLIENT_CERTIFICATE`/`…_CLIENT_KEY`; both protocols go through `HTTPS_PROXY` with
//!   CONNECT unless `NO_PROXY` names the endpoint.
//! - Headers (`…_HEADERS`) and timeout (`…_TIMEOUT`, milliseconds) as the specification says.
//!
//! Spans wait in a bounded queue and a dedicated thread exports them in batches, so a slow,
//! refusing or absent collector costs at most [`QUEUE`] spans of memory and never blocks a
//! reconcile: what does not fit, and every batch the collector does not take, is counted in
//! [`SPANS_DROPPED`] (`<service>_traces_dropped_total`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Uri;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _, SpanProcessor};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Spans that may wait for export at once; more are dropped (and counted).
pub const QUEUE: usize = 2048;
/// Spans sent in one export request at most.
const BATCH: usize = 512;
/// How long a span may wait for a batch to fill.
const LINGER: Duration = Duration::from_secs(2);

/// Spans handed to the collector and accepted.
pub static SPANS_EXPORTED: AtomicU64 = AtomicU64::new(0);
/// Spans lost: the queue was full, or the collector failed or refused their batch.
pub static SPANS_DROPPED: AtomicU64 = AtomicU64::new(0);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// Where and how spans are sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub protocol: Protocol,
    /// gRPC: the collector's address; HTTP: the full URL spans are posted to.
    pub endpoint: String,
    pub ca_file: Option<String>,
    pub client_certificate: Option<(String, String)>,
    pub timeout: Duration,
}

impl Settings {
    /// The settings from `OTEL_*` variables (`get` reads one); `None` when no endpoint is set.
    /// A bad value is an error naming the variable.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        // The traces-specific variable wins over the general one.
        let var = |suffix: &str| {
            [
                format!("OTEL_EXPORTER_OTLP_TRACES_{suffix}"),
                format!("OTEL_EXPORTER_OTLP_{suffix}"),
            ]
            .into_iter()
            .find_map(|name| {
                get(&name)
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .map(|v| (name, v))
            })
        };
        let Some((endpoint_var, endpoint)) = var("ENDPOINT") else {
            return Ok(None);
        };
        let uri: Uri = endpoint
            .parse()
            .map_err(|e| format!("{endpoint_var}={endpoint:?}: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!(
                "{endpoint_var}={endpoint:?}: expected an http:// or https:// URL with a host"
            ));
        }
        let protocol = match var("PROTOCOL") {
            Some((_, p)) if p == "grpc" => Protocol::Grpc,
            Some((_, p)) if p == "http/protobuf" => Protocol::HttpProtobuf,
            Some((name, p)) => {
                return Err(format!(
                    "{name}={p:?}: Strata exports with grpc or http/protobuf"
                ));
            }
            None if uri.port_u16() == Some(4318) => Protocol::HttpProtobuf,
            None => Protocol::Grpc,
        };
        let endpoint = match protocol {
            Protocol::HttpProtobuf if endpoint_var == "OTEL_EXPORTER_OTLP_ENDPOINT" => {
                format!("{}/v1/traces", endpoint.trim_end_matches('/'))
            }
            _ => endpoint,
        };
        let timeout = match var("TIMEOUT") {
            Some((name, ms)) => Duration::from_millis(
                ms.parse()
                    .map_err(|_| format!("{name}={ms:?}: expected milliseconds"))?,
            ),
            None => Duration::from_secs(10),
        };
        let client_certificate = match (var("CLIENT_CERTIFICATE"), var("CLIENT_KEY")) {
            (Some((_, cert)), Some((_, key))) => Some((cert, key)),
            (None, None) => None,
            (Some((name, _)), None) | (None, Some((name, _))) => {
                return Err(format!(
                    "{name} is set without its pair (…_CLIENT_CERTIFICATE and …_CLIENT_KEY go together)"
                ));
            }
        };
        Ok(Some(Self {
            protocol,
            endpoint,
            ca_file: var("CERTIFICATE").map(|(_, f)| f),
            client_certificate,
            timeout,
        }))
    }

    /// rustls' client settings for an `https://` endpoint: the system's roots plus the
    /// configured CA, and the client certificate when one is configured.
    fn tls(&self) -> Result<rustls::ClientConfig, String> {
        let mut roots = rustls::RootCertStore::empty();
        // Missing system roots are normal in a minimal image; a configured CA covers it.
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(file) = &self.ca_file {
            let pem = std::fs::read(file).map_err(|e| format!("CA file {file}: {e}"))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("CA file {file}: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("CA file {file}: {e}"))?;
            }
        }
        if roots.is_empty() {
            return Err(
                "no CA to verify the https endpoint: set OTEL_EXPORTER_OTLP_CERTIFICATE".into(),
            );
        }
        let builder = client_config(roots)?;
        match &self.client_certificate {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("client certificate {cert}: {e}"))?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("client key {key}: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("client certificate {cert}: {e}"))
            }
        }
    }
}

/// rustls client settings (ring, TLS 1.2 and 1.3) trusting `roots`, before client auth.
fn client_config(
    roots: rustls::RootCertStore,
) -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>, String> {
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots))
}

/// TCP to the endpoint, direct or through an HTTPS proxy (CONNECT).
#[derive(Clone, Debug)]
enum Dial {
    Direct(HttpConnector),
    Tunnel(Tunnel<HttpConnector>),
}

type DialFuture =
    Pin<Box<dyn Future<Output = Result<TokioIo<tokio::net::TcpStream>, BoxError>> + Send>>;

impl tower::Service<Uri> for Dial {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = DialFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Dial::Direct(c) => c.poll_ready(cx).map_err(Into::into),
            Dial::Tunnel(t) => t.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, uri: Uri) -> DialFuture {
        match self {
            Dial::Direct(c) => {
                let connect = c.call(uri);
                Box::pin(async move { connect.await.map_err(Into::into) })
            }
            Dial::Tunnel(t) => {
                let connect = t.call(uri);
                Box::pin(async move { connect.await.map_err(Into::into) })
            }
        }
    }
}

type Connector = hyper_rustls::HttpsConnector<Dial>;

fn connector(settings: &Settings, target: &Uri, http1: bool) -> Result<Connector, String> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let proxies = crate::proxy::Proxies::from_env().map_err(|e| e.to_string())?;
    let dial = match proxies.for_grpc(target) {
        Some(proxy) => {
            let mut tunnel = Tunnel::new(proxy.clone(), http);
            if let Some(auth) = crate::proxy::basic_auth(proxy) {
                tunnel = tunnel.with_auth(auth);
            }
            tracing::info!(endpoint = %target, proxy = %crate::proxy::redacted(proxy), "exporting traces through a proxy");
            Dial::Tunnel(tunnel)
        }
        None => Dial::Direct(http),
    };
    let tls = if target.scheme_str() == Some("https") {
        settings.tls()?
    } else {
        // Never used for http://, but the connector needs a configuration.
        client_config(rustls::RootCertStore::empty())?.with_no_client_auth()
    };
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    Ok(if http1 {
        builder.enable_http1().enable_http2().wrap_connector(dial)
    } else {
        builder.enable_http2().wrap_connector(dial)
    })
}

/// The OTLP/HTTP exporter's client: hyper over our connector.
#[derive(Debug)]
struct HttpClient(hyper_util::client::legacy::Client<Connector, Full<Bytes>>);

impl opentelemetry_http::HttpClient for HttpClient {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: http::Request<Bytes>,
    ) -> Pin<
        Box<
            dyn Future<Output = Result<http::Response<Bytes>, opentelemetry_http::HttpError>>
                + Send
                + 'b,
        >,
    >
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let response = self
                .0
                .request(http::Request::from_parts(parts, Full::new(body)))
                .await?;
            let (parts, body) = response.into_parts();
            // Collectors answer with a small status message; cap it all the same.
            let body = http_body_util::Limited::new(body, 1 << 20)
                .collect()
                .await?
                .to_bytes();
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

/// Builds the exporter; must run inside the tokio runtime that will drive it (tonic spawns its
/// connection task at construction).
fn exporter(settings: &Settings) -> Result<opentelemetry_otlp::SpanExporter, String> {
    use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
    let target: Uri = settings
        .endpoint
        .parse()
        .map_err(|e| format!("{}: {e}", settings.endpoint))?;
    match settings.protocol {
        Protocol::Grpc => {
            let channel = tonic::transport::Endpoint::from(target.clone())
                .timeout(settings.timeout)
                .connect_with_connector_lazy(connector(settings, &target, false)?);
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_channel(channel)
                .with_timeout(settings.timeout)
                .build()
                .map_err(|e| e.to_string())
        }
        Protocol::HttpProtobuf => {
            let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .build(connector(settings, &target, true)?);
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(settings.endpoint.clone())
                .with_timeout(settings.timeout)
                .with_http_client(HttpClient(client))
                .build()
                .map_err(|e| e.to_string())
        }
    }
}

enum Control {
    Flush(SyncSender<()>),
    Shutdown(SyncSender<()>),
    Resource(Resource),
}

/// The span processor: a bounded queue in front of an export thread.
#[derive(Debug)]
pub struct BoundedExport {
    spans: SyncSender<SpanData>,
    control: SyncSender<Control>,
}

impl BoundedExport {
    /// Starts the export thread with its own small runtime (so export never competes with
    /// reconciles for the service's runtime, and shutdown can wait for it from anywhere).
    /// Fails when the exporter cannot be built.
    pub fn start(settings: Settings) -> Result<Self, String> {
        let (spans, queue) = mpsc::sync_channel::<SpanData>(QUEUE);
        let (control, orders) = mpsc::sync_channel::<Control>(4);
        let (built, outcome) = mpsc::sync_channel::<Result<(), String>>(1);
        std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = built.send(Err(format!("export runtime: {e}")));
                        return;
                    }
                };
                let exporter = runtime.block_on(async { exporter(&settings) });
                match exporter {
                    Ok(exporter) => {
                        let _ = built.send(Ok(()));
                        export_loop(&runtime, exporter, &queue, &orders, settings.timeout);
                    }
                    Err(e) => {
                        let _ = built.send(Err(e));
                    }
                }
            })
            .map_err(|e| format!("export thread: {e}"))?;
        outcome
            .recv()
            .map_err(|_| "export thread ended".to_string())??;
        Ok(Self { spans, control })
    }

    fn order(
        &self,
        make: impl FnOnce(SyncSender<()>) -> Control,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (done, wait) = mpsc::sync_channel(1);
        if self.control.send(make(done)).is_err() {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        wait.recv_timeout(timeout)
            .map_err(|_| OTelSdkError::Timeout(timeout))
    }
}

fn export_loop(
    runtime: &tokio::runtime::Runtime,
    mut exporter: opentelemetry_otlp::SpanExporter,
    queue: &Receiver<SpanData>,
    orders: &Receiver<Control>,
    timeout: Duration,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH);
    let mut oldest: Option<Instant> = None;
    let send = |exporter: &opentelemetry_otlp::SpanExporter, batch: &mut Vec<SpanData>| {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        let n = spans.len() as u64;
        // The exporter has its own timeout; this one also covers a connection that hangs.
        let outcome = runtime.block_on(async {
            tokio::time::timeout(timeout + Duration::from_secs(1), exporter.export(spans)).await
        });
        match outcome {
            Ok(Ok(())) => {
                SPANS_EXPORTED.fetch_add(n, Ordering::Relaxed);
            }
            Ok(Err(e)) => {
                SPANS_DROPPED.fetch_add(n, Ordering::Relaxed);
                tracing::debug!(error = %e, spans = n, "trace export failed");
            }
            Err(_) => {
                SPANS_DROPPED.fetch_add(n, Ordering::Relaxed);
                tracing::debug!(spans = n, "trace export timed out");
            }
        }
    };
    // Everything queued so far, in batches.
    let drain = |exporter: &opentelemetry_otlp::SpanExporter, batch: &mut Vec<SpanData>| {
        batch.extend(queue.try_iter());
        while !batch.is_empty() {
            let rest = batch.split_off(batch.len().min(BATCH));
            send(exporter, batch);
            *batch = rest;
        }
    };
    loop {
        match orders.try_recv() {
            Ok(Control::Resource(resource)) => exporter.set_resource(&resource),
            Ok(Control::Flush(done)) => {
                drain(&exporter, &mut batch);
                oldest = None;
                let _ = done.send(());
            }
            Ok(Control::Shutdown(done)) => {
                drain(&exporter, &mut batch);
                let _ = exporter.shutdown();
                let _ = done.send(());
                return;
            }
            Err(mpsc::TryRecvError::Disconnected) => return,
            Err(mpsc::TryRecvError::Empty) => {}
        }
        let wait = oldest.map_or(Duration::from_millis(200), |at| {
            LINGER
                .saturating_sub(at.elapsed())
                .min(Duration::from_millis(200))
        });
        match queue.recv_timeout(wait) {
            Ok(span) => {
                oldest.get_or_insert_with(Instant::now);
                batch.push(span);
                batch.extend(queue.try_iter().take(BATCH - batch.len()));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if batch.len() >= BATCH || oldest.is_some_and(|at| at.elapsed() >= LINGER) {
            send(&exporter, &mut batch);
            oldest = None;
        }
    }
}

impl SpanProcessor for BoundedExport {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.spans.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                SPANS_DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.order(Control::Flush, Duration::from_secs(30))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.order(Control::Shutdown, timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        let _ = self.control.send(Control::Resource(resource.clone()));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Option<Settings>, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn protocol_and_endpoint_follow_the_specification() {
        type Vars<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(Vars, Protocol, &str)] = &[
            // Strata's old behaviour: an endpoint alone speaks gRPC…
            (
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")],
                Protocol::Grpc,
                "http://collector:4317",
            ),
            // …unless it is OTLP/HTTP's port.
            (
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")],
                Protocol::HttpProtobuf,
                "http://collector:4318/v1/traces",
            ),
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example:443"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ],
                Protocol::HttpProtobuf,
                "https://otel.example:443/v1/traces",
            ),
            // The traces variables win, and a traces endpoint is used as it is.
            (
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4317"),
                    (
                        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                        "http://traces:9999/custom",
                    ),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                ],
                Protocol::HttpProtobuf,
                "http://traces:9999/custom",
            ),
        ];
        for (vars, protocol, endpoint) in cases {
            let s = settings(vars).unwrap().unwrap();
            assert_eq!(
                (s.protocol, s.endpoint.as_str()),
                (*protocol, *endpoint),
                "{vars:?}"
            );
        }
        assert_eq!(settings(&[]).unwrap(), None);
        assert_eq!(
            settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap(),
            None
        );
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (vars, named) in [
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                    ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "5s"),
                ],
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317"),
                    ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem"),
                ],
                "OTEL_EXPORTER_OTLP_CLIENT_KEY",
            ),
        ] {
            let e = settings(&vars).unwrap_err();
            assert!(e.contains(named), "{vars:?}: {e}");
        }
    }

    #[test]
    fn a_configured_ca_is_read_and_a_bad_one_named() {
        let s = Settings {
            protocol: Protocol::Grpc,
            endpoint: "https://c:4317".into(),
            ca_file: Some("/nonexistent/ca.pem".into()),
            client_certificate: None,
            timeout: Duration::from_secs(1),
        };
        let e = s.tls().unwrap_err();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }

    /// A collector that refuses every connection: spans are counted as dropped, never held.
    #[test]
    fn a_refusing_collector_costs_a_counter_not_memory() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port(); // bound, then closed: connections are refused
        let processor = BoundedExport::start(Settings {
            protocol: Protocol::HttpProtobuf,
            endpoint: format!("http://127.0.0.1:{port}/v1/traces"),
            ca_file: None,
            client_certificate: None,
            timeout: Duration::from_millis(500),
        })
        .unwrap();
        let before = SPANS_DROPPED.load(Ordering::Relaxed);
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        use opentelemetry::trace::{Tracer as _, TracerProvider as _};
        let tracer = provider.tracer("test");
        let n = QUEUE + 100;
        let started = Instant::now();
        for _ in 0..n {
            tracer.in_span("work", |_| {});
        }
        // Ending spans never waits for the collector.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        provider.force_flush().unwrap();
        let dropped = SPANS_DROPPED.load(Ordering::Relaxed) - before;
        assert_eq!(dropped, n as u64, "every span dropped and counted once");
    }
}
