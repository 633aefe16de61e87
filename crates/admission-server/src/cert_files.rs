//! A serving certificate given as files (`--tls-cert-file`/`--tls-key-file`: a cert-manager
//! Secret or one of the user's, mounted into the pod) is watched and reloaded when the files
//! change — a rotation must not end in an expired certificate, nor need a restart. A change
//! that cannot be loaded (a file unreadable or half-written, a key that does not match) keeps
//! the last good certificate serving, and says so: a Warning Event, a `failed` reload in
//! `admission_webhook_certificate_reloads_total`, a log line. The expiry metric follows the
//! certificate served, in this mode as in the self-managed one.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use core_k8s::Context;
use core_k8s::events::Severity;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::ServerConfig;

use crate::metrics::{Metrics, ReloadLabels};
use crate::tls::{ClientTrust, server_config};

/// The certificate and key files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A loaded certificate: the server configuration, when it expires, and a fingerprint of the
/// files' bytes (to tell a change from a touch).
#[derive(Debug)]
pub struct Loaded {
    pub config: ServerConfig,
    pub not_after: Timestamp,
    pub fingerprint: u64,
}

/// Both files' bytes, as read, and their fingerprint.
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    fingerprint: u64,
}

impl CertFiles {
    /// Reads and checks both files; an error names the file and what is wrong.
    pub fn load(&self, trust: &ClientTrust) -> Result<Loaded, String> {
        self.parse(self.read()?, trust)
    }

    fn read(&self) -> Result<Contents, String> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))
        };
        let (cert, key) = (read(&self.cert)?, read(&self.key)?);
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&cert, &key).hash(&mut hasher);
        Ok(Contents {
            cert,
            key,
            fingerprint: hasher.finish(),
        })
    }

    fn parse(&self, contents: Contents, trust: &ClientTrust) -> Result<Loaded, String> {
        let not_after =
            not_after(&contents.cert).map_err(|e| format!("{}: {e}", self.cert.display()))?;
        let config = server_config(&contents.cert, &contents.key, trust)
            .map_err(|e| format!("{} and {}: {e}", self.cert.display(), self.key.display()))?;
        Ok(Loaded {
            config,
            not_after,
            fingerprint: contents.fingerprint,
        })
    }

    /// Checks the files every `every` until shutdown; swaps in a changed certificate that
    /// loads, keeps the last good one otherwise.
    #[allow(clippy::too_many_arguments)] // the server's pieces a reload touches
    pub async fn watch(
        self,
        ctx: Arc<Context>,
        regarding: ObjectReference,
        trust: ClientTrust,
        tls: RustlsConfig,
        metrics: Metrics,
        every: Duration,
        mut fingerprint: u64,
    ) {
        loop {
            tokio::select! {
                _ = ctx.shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let result = |result| {
                metrics
                    .certificate_reloads
                    .get_or_create(&ReloadLabels { result })
                    .inc();
            };
            // Unchanged files are not parsed again: only bytes that differ build a config.
            match self.read().and_then(|c| {
                if c.fingerprint == fingerprint {
                    Ok(None)
                } else {
                    self.parse(c, &trust).map(Some)
                }
            }) {
                Ok(None) => {}
                Ok(Some(loaded)) => {
                    tls.reload_from_config(Arc::new(loaded.config));
                    metrics.certificate_expiry.set(loaded.not_after.as_second());
                    fingerprint = loaded.fingerprint;
                    result("reloaded");
                    tracing::info!(not_after = %loaded.not_after, file = %self.cert.display(), "serving certificate reloaded from its files");
                }
                Err(why) => {
                    result("failed");
                    tracing::warn!(error = %why, "the certificate files changed but cannot be loaded; still serving the last good certificate");
                    // Every failed check: repeats fold into the first Event's series, whose
                    // count says how long the files have been broken.
                    let _ = ctx
                        .events
                        .publish(
                            &regarding,
                            Severity::Warning,
                            "CertificateReloadFailed",
                            "Reload",
                            format!("{why}; still serving the last good certificate"),
                        )
                        .await;
                }
            }
        }
    }
}

/// What a reload Event is about: this pod when it knows its name (the chart gives
/// `POD_NAME`/`POD_NAMESPACE`), else the certificate Secret `secret` of `namespace`.
pub fn regarding(secret: &str, namespace: &str) -> ObjectReference {
    match (std::env::var("POD_NAME"), std::env::var("POD_NAMESPACE")) {
        (Ok(name), Ok(pod_namespace)) if !name.is_empty() => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: Some(pod_namespace),
            ..ObjectReference::default()
        },
        _ => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            name: Some(secret.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectReference::default()
        },
    }
}

/// When the first certificate of a PEM chain expires (its `notAfter`).
pub fn not_after(pem: &[u8]) -> Result<Timestamp, String> {
    let der = CertificateDer::pem_slice_iter(pem)
        .next()
        .ok_or("no certificate in it")?
        .map_err(|e| format!("reading the certificate: {e}"))?;
    let bad = || "not an X.509 certificate".to_string();
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serial,
    // signature, issuer, validity SEQUENCE { notBefore, notAfter }, … }, … }
    let (_, certificate) = Der(der.as_ref()).next().ok_or_else(bad)?;
    let (_, tbs) = Der(certificate).next().ok_or_else(bad)?;
    let mut fields = Der(tbs);
    if fields.0.first() == Some(&0xA0) {
        fields.next().ok_or_else(bad)?;
    }
    for _ in 0..3 {
        fields.next().ok_or_else(bad)?;
    }
    let (_, validity) = fields.next().ok_or_else(bad)?;
    let mut times = Der(validity);
    times.next().ok_or_else(bad)?;
    let (tag, time) = times.next().ok_or_else(bad)?;
    parse_time(tag, time).ok_or_else(|| "its notAfter is not a valid time".to_string())
}

/// A cursor over DER elements: each `next` returns (tag, contents).
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.0.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, &rest[n..])
        };
        if rest.len() < len {
            return None;
        }
        let (contents, after) = rest.split_at(len);
        self.0 = after;
        Some((tag, contents))
    }
}

/// UTCTime (`YYMMDDHHMMSSZ`, 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn parse_time(tag: u8, bytes: &[u8]) -> Option<Timestamp> {
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('Z')?;
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let full = match (tag, text.len()) {
        (0x17, 12) if digits(text) => {
            let yy: u32 = text[..2].parse().ok()?;
            format!("{}{text}", if yy < 50 { "20" } else { "19" })
        }
        (0x18, 14) if digits(text) => text.to_string(),
        _ => return None,
    };
    let n = |range: std::ops::Range<usize>| full[range].parse::<i16>().ok();
    jiff::civil::datetime(
        n(0..4)?,
        n(4..6)? as i8,
        n(6..8)? as i8,
        n(8..10)? as i8,
        n(10..12)? as i8,
        n(12..14)? as i8,
        0,
    )
    .to_zoned(jiff::tz::TimeZone::UTC)
    .ok()
    .map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn cert_until(until: &str) -> String {
        let mut params = rcgen::CertificateParams::new(vec!["webhook.test".into()]).unwrap();
        let t: Timestamp = until.parse().unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(t.as_second()).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn reads_not_after_in_both_time_forms() {
        // Before 2050 X.509 writes UTCTime, from 2050 GeneralizedTime.
        for until in [
            "2027-03-04T05:06:07Z",
            "2049-12-31T23:59:59Z",
            "2061-01-02T03:04:05Z",
        ] {
            let got = not_after(cert_until(until).as_bytes()).unwrap();
            assert_eq!(got, until.parse::<Timestamp>().unwrap(), "{until}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_certificate() {
        assert!(not_after(b"").is_err());
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(not_after(garbage.as_bytes()).is_err());
    }
}
