//! Logs and traces: a fmt layer (text or JSON) under an env filter, plus an OTLP trace exporter
//! switched on at run time when `OTEL_EXPORTER_OTLP_ENDPOINT` is set — one binary, no feature.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::args::LogFormat;
use crate::{Error, Result};

/// Keeps the trace exporter alive; [`Telemetry::shutdown`] flushes buffered spans.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported over OTLP.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Flushes and stops the exporter. Safe to call when nothing is exported.
    pub fn shutdown(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "flushing traces at shutdown failed");
        }
    }
}

/// Installs the global subscriber. Call once, at start-up.
pub fn init(service: &str, format: LogFormat, filter: &str) -> Result<Telemetry> {
    let filter = EnvFilter::try_new(filter)
        .map_err(|e| Error::Telemetry(format!("log filter {filter:?}: {e}")))?;
    let fmt = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer().with_target(true).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .boxed(),
        LogFormat::Logfmt => tracing_subscriber::fmt::layer()
            .event_format(crate::logfmt::Logfmt)
            .boxed(),
    };

    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty());
    let (otel, provider) = match endpoint {
        Some(_) => {
            // The exporter reads the endpoint and headers from the standard OTEL_* variables;
            // through a proxy it gets a channel tunnelled with CONNECT.
            use opentelemetry_otlp::WithTonicConfig as _;
            let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            let builder = match otlp_proxy_channel()? {
                Some(channel) => builder.with_channel(channel),
                None => builder,
            };
            let exporter = builder
                .build()
                .map_err(|e| Error::Telemetry(format!("otlp exporter: {e}")))?;
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name(service.to_string())
                .build();
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource)
                .build();
            let tracer = provider.tracer(service.to_string());
            let layer = tracing_opentelemetry::layer().with_tracer(tracer).boxed();
            (Some(layer), Some(provider))
        }
        None => (None, None),
    };

    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|e| Error::Telemetry(format!("installing subscriber: {e}")))?;
    Ok(Telemetry { provider })
}

/// The OTLP endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT`).
fn otlp_endpoint() -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .find_map(|v| std::env::var(v).ok().filter(|e| !e.is_empty()))
}

/// A gRPC channel to the OTLP endpoint through `HTTPS_PROXY` (CONNECT), when one applies.
fn otlp_proxy_channel() -> Result<Option<tonic::transport::Channel>> {
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::client::legacy::connect::proxy::Tunnel;

    let Some(endpoint) = otlp_endpoint() else {
        return Ok(None);
    };
    let target: http::Uri = endpoint
        .parse()
        .map_err(|e| Error::Telemetry(format!("OTLP endpoint {endpoint:?}: {e}")))?;
    let proxies = crate::proxy::Proxies::from_env()?;
    let Some(proxy) = proxies.for_grpc(&target) else {
        return Ok(None);
    };
    let mut tunnel = Tunnel::new(proxy.clone(), HttpConnector::new());
    if let Some(auth) = crate::proxy::basic_auth(proxy) {
        tunnel = tunnel.with_auth(auth);
    }
    tracing::info!(%endpoint, proxy = %crate::proxy::redacted(proxy), "exporting traces through a proxy");
    Ok(Some(
        tonic::transport::Endpoint::from(target).connect_with_connector_lazy(tunnel),
    ))
}
