//! The server's TLS settings: the serving certificate and, with `--client-ca-file`, the
//! client certificates it requires. Built here rather than by axum-server's PEM helpers so a
//! renewed certificate keeps the client check (a reload from PEM alone would drop it).

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

/// Who may call the server: anyone (the default), or only clients presenting a certificate
/// signed by one of these CAs (kube-apiserver with an AdmissionConfiguration kubeconfig).
#[derive(Clone, Debug, Default)]
pub struct ClientTrust {
    roots: Option<Arc<RootCertStore>>,
    /// With `--client-cn`: the subject common names a client certificate must carry one of
    /// (any certificate of the CA passes otherwise).
    names: Vec<String>,
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
            names: Vec::new(),
        })
    }

    /// Pins the client certificates to these subject common names (`--client-cn`): a
    /// certificate of the CA with another subject is refused at the handshake. Pinning needs
    /// the CA (`--client-ca-file`).
    pub fn pinned_to(mut self, names: Vec<String>) -> Result<Self, String> {
        if !names.is_empty() && self.roots.is_none() {
            return Err("--client-cn needs --client-ca-file: without a CA no client certificate is asked for".into());
        }
        if let Some(empty) = names.iter().find(|n| n.trim().is_empty()) {
            return Err(format!(
                "--client-cn {empty:?}: a common name cannot be empty"
            ));
        }
        self.names = names;
        Ok(self)
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
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder(roots.clone())
                .build()
                .map_err(|e| format!("the client CA: {e}"))?;
            if trust.names.is_empty() {
                builder.with_client_cert_verifier(verifier)
            } else {
                builder.with_client_cert_verifier(Arc::new(PinnedSubjects {
                    inner: verifier,
                    names: trust.names.clone(),
                }))
            }
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
/// The subject common names of a DER certificate; an error says why it cannot be read.
pub fn common_names(der: &[u8]) -> Result<Vec<String>, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("reading the client certificate: {e}"))?;
    Ok(cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .map(str::to_string)
        .collect())
}

/// The CA's check, then the subject's: a client certificate must also carry one of `names` as
/// its common name. kube-apiserver presents the one its AdmissionConfiguration names; another
/// holder of a certificate from the same CA (a CA shared with other clients) is refused.
#[derive(Debug)]
struct PinnedSubjects {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<String>,
}

impl ClientCertVerifier for PinnedSubjects {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let names = common_names(end_entity).map_err(rustls::Error::General)?;
        if names.iter().any(|n| self.names.contains(n)) {
            return Ok(verified);
        }
        tracing::warn!(subject = ?names, allowed = ?self.names, "a client certificate of the CA with another subject was refused (--client-cn)");
        Err(rustls::Error::General(format!(
            "client certificate subject CN {names:?} is not one of --client-cn {:?}",
            self.names
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

    /// A CA, and a client certificate it signed for each common name.
    fn ca_and_clients(names: &[&str]) -> (String, Vec<CertificateDer<'static>>) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "test-ca");
        let ca_pem = ca.clone().self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let clients = names
            .iter()
            .map(|name| {
                let key = KeyPair::generate().unwrap();
                let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
                params.distinguished_name.push(DnType::CommonName, *name);
                params.signed_by(&key, &issuer).unwrap().der().clone()
            })
            .collect();
        (ca_pem, clients)
    }

    fn verifier(ca_pem: &str, names: &[&str]) -> PinnedSubjects {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let trust = ClientTrust::from_pem(ca_pem.as_bytes())
            .unwrap()
            .pinned_to(names.iter().map(|n| n.to_string()).collect())
            .unwrap();
        PinnedSubjects {
            inner: WebPkiClientVerifier::builder(trust.roots.unwrap())
                .build()
                .unwrap(),
            names: trust.names,
        }
    }

    #[test]
    fn a_pinned_subject_passes_and_another_of_the_same_ca_does_not() {
        let (ca, clients) = ca_and_clients(&["kube-apiserver-webhook-client", "other-client"]);
        let (_, strangers) = ca_and_clients(&["kube-apiserver-webhook-client"]);
        let pinned = verifier(&ca, &["kube-apiserver-webhook-client"]);
        let now = UnixTime::now();
        // (case, certificate, passes)
        let cases = [
            ("the pinned name, signed by the CA", &clients[0], true),
            ("another name, signed by the same CA", &clients[1], false),
            (
                "the pinned name, signed by another CA",
                &strangers[0],
                false,
            ),
        ];
        for (case, cert, passes) in cases {
            let outcome = pinned.verify_client_cert(cert, &[], now);
            assert_eq!(outcome.is_ok(), passes, "{case}: {outcome:?}");
        }
        let refused = pinned
            .verify_client_cert(&clients[1], &[], now)
            .unwrap_err();
        assert!(
            refused.to_string().contains("\"other-client\"")
                && refused.to_string().contains("--client-cn"),
            "{refused}"
        );
        // Pinned to both, both of the CA pass.
        let both = verifier(&ca, &["kube-apiserver-webhook-client", "other-client"]);
        assert!(both.verify_client_cert(&clients[1], &[], now).is_ok());
    }

    #[test]
    fn pinning_needs_the_ca_and_names() {
        let none = ClientTrust::default().pinned_to(vec!["x".into()]);
        assert!(none.unwrap_err().contains("--client-ca-file"));
        let (ca, clients) = ca_and_clients(&["a"]);
        let empty = ClientTrust::from_pem(ca.as_bytes())
            .unwrap()
            .pinned_to(vec![" ".into()]);
        assert!(empty.unwrap_err().contains("cannot be empty"));
        assert_eq!(common_names(&clients[0]).unwrap(), vec!["a".to_string()]);
        assert!(common_names(b"not a certificate").is_err());
    }
}
