//! The server's TLS settings: the serving certificate and, with `--client-ca-file`, the
//! client certificates it requires. Built here rather than by axum-server's PEM helpers so a
//! renewed certificate keeps the client check (a reload from PEM alone would drop it).

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ServerConfig, WebPkiClientVerifier};

/// Who may call the server: anyone (the default), or only clients presenting a certificate
/// signed by one of these CAs (kube-apiserver with an AdmissionConfiguration kubeconfig).
#[derive(Clone, Debug, Default)]
pub struct ClientTrust {
    roots: Option<Arc<RootCertStore>>,
}

impl ClientTrust {
    /// The CAs of a PEM bundle (`--client-ca-file`); an error names what is wrong with it.
    pub fn from_pem(pem: &[u8]) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("reading a certificate: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("not a usable CA certificate: {e}"))?;
        }
        if roots.is_empty() {
            return Err("no CA certificate in it".into());
        }
        Ok(Self {
            roots: Some(Arc::new(roots)),
        })
    }

    pub fn requires_client_certificates(&self) -> bool {
        self.roots.is_some()
    }
}

/// The server configuration for a certificate chain and key (PEM): TLS 1.2 and 1.3, HTTP/2
/// and HTTP/1.1, and the client check of `trust`.
pub fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    trust: &ClientTrust,
) -> Result<ServerConfig, String> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("reading the certificate: {e}"))?;
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("reading the key: {e}"))?;
    let builder = ServerConfig::builder();
    let builder = match &trust.roots {
        Some(roots) => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder(roots.clone())
                .build()
                .map_err(|e| format!("the client CA: {e}"))?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
