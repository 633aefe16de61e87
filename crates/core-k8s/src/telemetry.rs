//! Logs and traces: a fmt layer (text, JSON or logfmt) under the log filter, plus OTLP span
//! export switched on at run time by the standard `OTEL_*` variables — one binary, no feature.
//!
//! The log filter (`--log-level`/`RUST_LOG`) only decides what is logged: spans go to the
//! exporter through their own filter ([`SPAN_FILTER`]), so quieting the logs never empties the
//! traces. Trace context crosses process boundaries as W3C `traceparent`. Tracing setup never
//! stops a service: a bad setting is logged once and the service runs without export.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::args::LogFormat;
use crate::otlp::{BoundedExport, Settings};
use crate::{Error, Result};

/// What is exported as spans: Strata's and kube-runtime's info spans; the transport crates'
/// own spans (one per HTTP/2 frame, TLS handshake…) would drown them.
pub const SPAN_FILTER: &str = "info,h2=off,hyper=off,hyper_util=off,tower=off,tonic=off,rustls=off,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off";

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

/// The resource: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` as the SDK reads them,
/// with the service's own name only when neither names one, and its version.
fn resource(service: &str, get: impl Fn(&str) -> Option<String>) -> Resource {
    let named = get("OTEL_SERVICE_NAME").is_some_and(|v| !v.trim().is_empty())
        || get("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attrs| {
            attrs
                .split(',')
                .any(|kv| kv.trim_start().starts_with("service.name="))
        });
    let mut builder = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if !named {
        builder = builder.with_service_name(service.to_string());
    }
    builder.build()
}

/// The exporting provider, or why there is none (`Ok(None)`: nothing configured).
fn provider(service: &str) -> std::result::Result<Option<SdkTracerProvider>, String> {
    let get = |name: &str| std::env::var(name).ok();
    if get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || get("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none")
    {
        return Ok(None);
    }
    let Some(settings) = Settings::from_vars(get)? else {
        return Ok(None);
    };
    let endpoint = settings.endpoint.clone();
    let processor = BoundedExport::start(settings).map_err(|e| format!("{endpoint}: {e}"))?;
    // The sampler comes from OTEL_TRACES_SAMPLER/_ARG (the SDK's default configuration).
    Ok(Some(
        SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource(service, get))
            .build(),
    ))
}

/// Installs the global subscriber. Call once, at start-up.
pub fn init(service: &str, format: LogFormat, filter: &str) -> Result<Telemetry> {
    let log_filter = EnvFilter::try_new(filter)
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
    }
    .with_filter(log_filter);

    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let (provider, problem) = match provider(service) {
        Ok(provider) => (provider, None),
        Err(problem) => (None, Some(problem)),
    };
    let otel = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(service.to_string()))
            .with_filter(EnvFilter::new(SPAN_FILTER))
    });

    tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|e| Error::Telemetry(format!("installing subscriber: {e}")))?;
    if let Some(problem) = problem {
        tracing::warn!(%problem, "trace export is off: the OTEL_* settings cannot be used");
    } else if provider.is_some() {
        tracing::info!("exporting traces over OTLP");
    }
    Ok(Telemetry { provider })
}

/// The current span's W3C `traceparent`, to hand to another service (an annotation, a
/// header); `None` when the span is not recorded (traces off, or not sampled).
pub fn traceparent() -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = std::collections::HashMap::new();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, &mut carrier));
    carrier.remove("traceparent")
}

/// Makes `span` (not entered yet) a child of the trace a `traceparent` names; a missing or
/// malformed value leaves it a root.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let Some(value) = traceparent else { return };
    let carrier = std::collections::HashMap::from([("traceparent".to_string(), value.to_string())]);
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service_name(vars: &[(&str, &str)]) -> String {
        let vars: std::collections::HashMap<&str, &str> = vars.iter().copied().collect();
        let r = resource("layer-controller", |n| vars.get(n).map(|v| v.to_string()));
        r.get(&opentelemetry::Key::new("service.name"))
            .map(|v| v.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn the_service_name_is_ours_unless_the_user_names_one() {
        assert_eq!(service_name(&[]), "layer-controller");
        // The SDK reads the real environment for these; here only the decision is checked:
        // when the user names the service, we do not override it.
        let named = resource("layer-controller", |n| {
            (n == "OTEL_SERVICE_NAME").then(|| "platform-layers".to_string())
        });
        assert_ne!(
            named
                .get(&opentelemetry::Key::new("service.name"))
                .map(|v| v.to_string()),
            Some("layer-controller".to_string())
        );
    }
}
