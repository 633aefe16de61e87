//! A small HTTP(S) GET client for services' calls to other HTTP APIs (the layer-controller's
//! metric gates read Prometheus): system roots plus an optional CA, an optional bearer token,
//! a timeout and a size bound on the answer.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// Largest answer read.
const MAX_BODY: usize = 4 << 20;

/// GETs with one TLS configuration and token.
#[derive(Clone)]
pub struct HttpGet {
    client: Client<Connector, Empty<Bytes>>,
    token: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for HttpGet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpGet")
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl HttpGet {
    /// A client trusting the system's roots and `ca_pem` (PEM certificates), sending `token`
    /// as a bearer token.
    pub fn new(
        ca_pem: Option<&[u8]>,
        token: Option<String>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in system_roots() {
            let _ = roots.add(cert.clone());
        }
        if let Some(pem) = ca_pem {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("CA: {e}"))?;
                roots.add(cert).map_err(|e| format!("CA: {e}"))?;
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            token: token
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
            timeout,
        })
    }

    /// GETs `url`: the status and the body (at most 4 MiB), or why not.
    pub async fn get(&self, url: &str) -> Result<(u16, Bytes), String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let mut request = http::Request::get(uri);
        if let Some(token) = &self.token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let call = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| format!("{}: {e}", redact(url)))?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| format!("{}: {e}", redact(url)))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| format!("{}: no answer within {:?}", redact(url), self.timeout))?
    }
}

/// `url` without its query (which may be long, and is the caller's to show).
fn redact(url: &str) -> &str {
    url.split_once('?').map_or(url, |(base, _)| base)
}

/// The system's root certificates, read from disk once per process: a client is built per
/// call site (a layer's own Prometheus, each gate poll), the roots do not change.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: std::sync::OnceLock<Vec<CertificateDer<'static>>> = std::sync::OnceLock::new();
    // Missing system roots are normal in a minimal image; a configured CA covers it.
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// `text` percent-encoded for a URL query value (every byte but unreserved ones).
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            percent_encode(r#"sum by (le) (rate(x{a=~"b.*"}[1m])) < 0.01"#),
            "sum%20by%20%28le%29%20%28rate%28x%7Ba%3D~%22b.%2A%22%7D%5B1m%5D%29%29%20%3C%200.01"
        );
    }
}
