//! Reading a layer's metric gates (`spec.health.gates`) from Prometheus' HTTP API: one
//! instant query per gate, turned into a [`Reading`] by `core_layers::metric_gate`. Anything
//! that is not a number — a refused connection, a timeout, an HTTP error, no series — is a
//! reading of its own (`Unknown`, with why), never a pass.

use std::time::Duration;

use core_k8s::http_get::{HttpGet, percent_encode};
use core_layers::crd::AddonsLayer;
use core_layers::metric_gate::{Reading, reading_of};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

/// A Prometheus to query.
#[derive(Clone, Debug)]
pub struct Prometheus {
    base: String,
    http: HttpGet,
}

impl Prometheus {
    /// The server at `base` (`http://` or `https://`, no trailing path needed), trusting
    /// `ca_pem` besides the system roots and sending `token` as a bearer token.
    pub fn new(
        base: &str,
        ca_pem: Option<&[u8]>,
        token: Option<String>,
        timeout: Duration,
    ) -> Result<Self, String> {
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!("{base:?} is not an http:// or https:// URL"));
        }
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            http: HttpGet::new(ca_pem, token, timeout)?,
        })
    }

    /// Its address, for messages.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The value of `query` now.
    pub async fn read(&self, query: &str) -> Reading {
        let url = format!("{}/api/v1/query?query={}", self.base, percent_encode(query));
        match self.http.get(&url).await {
            Err(e) => Reading::Unknown(format!("Prometheus at {} cannot be read: {e}", self.base)),
            Ok((status, body)) => match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(answer) => reading_of(&answer),
                Err(_) => Reading::Unknown(format!(
                    "Prometheus at {} answered HTTP {status}, not its API's JSON",
                    self.base
                )),
            },
        }
    }
}

/// The Prometheus `layer`'s gates are read from: its own `spec.health.prometheus` (its Secret
/// read with `client`, the layer's access, in `namespace`), else `default`. `Err` names the
/// field when the layer's own cannot be used.
pub async fn for_layer(
    client: &kube::Client,
    layer: &AddonsLayer,
    namespace: &str,
    default: Option<&Prometheus>,
    timeout: Duration,
) -> Result<Option<Prometheus>, String> {
    let Some(own) = layer
        .spec
        .health
        .as_ref()
        .and_then(|h| h.prometheus.as_ref())
    else {
        return Ok(default.cloned());
    };
    let (mut ca, mut token) = (None, None);
    if let Some(name) = &own.secret_ref {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let secret = secrets
            .get_opt(name)
            .await
            .map_err(|e| {
                format!("spec.health.prometheus.secretRef: Secret {namespace}/{name}: {e}")
            })?
            .ok_or_else(|| {
                format!("spec.health.prometheus.secretRef: Secret {namespace}/{name} not found")
            })?;
        let data = secret.data.unwrap_or_default();
        ca = data.get("ca.crt").map(|b| b.0.clone());
        token = data
            .get("token")
            .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    }
    Prometheus::new(&own.url, ca.as_deref(), token, timeout)
        .map(Some)
        .map_err(|e| format!("spec.health.prometheus: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn an_unreachable_prometheus_is_an_unknown_reading() {
        // Port 9 (discard) on loopback: nothing listens in the test sandbox.
        let prometheus =
            Prometheus::new("http://127.0.0.1:9", None, None, Duration::from_secs(2)).unwrap();
        match prometheus.read("up").await {
            Reading::Unknown(why) => {
                assert!(
                    why.starts_with("Prometheus at http://127.0.0.1:9 cannot be read"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(Prometheus::new("prometheus:9090", None, None, Duration::from_secs(1)).is_err());
    }
}
