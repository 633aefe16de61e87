//! Self-managed TLS: a CA and a serving certificate made with rcgen, persisted in a Secret so
//! restarts and every replica share them, and renewed well before they expire.
//!
//! Beyond the anchor: the Secret records the names the certificate was made for, so a changed
//! service name or extra SAN regenerates it (the anchor kept a stale SAN forever), and renewal
//! happens a third of the validity before expiry instead of a restart at the expiry instant.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Annotation on the Secret: when the serving certificate expires (RFC 3339).
pub const NOT_AFTER: &str = "strata.dev/not-after";
/// Annotation on the Secret: the names the certificate covers, comma-separated.
pub const NAMES: &str = "strata.dev/names";

/// How long the CA lives. Serving certificates are renewed under the same CA, so the
/// `caBundle` injected into webhook configurations does not change at renewal and no request
/// fails while certificates rotate.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 86400);

/// PEM-encoded CA (and its key), serving certificate and key, and when they expire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    pub ca_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: Timestamp,
    pub names: Vec<String>,
}

/// The names a serving certificate must cover: the Service's DNS names plus extra names and
/// IP addresses.
pub fn names(service: &str, namespace: &str, extra: &[String]) -> Vec<String> {
    let mut names = vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ];
    for name in extra {
        if !name.is_empty() && !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

fn at(second: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(second).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// The CA's parameters. They are the same every time, so an issuer rebuilt from them and the
/// stored CA key signs certificates that chain to the stored CA certificate.
fn ca_params(not_before: i64, not_after: i64) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "strata-admission-webhook-ca");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Strata");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = at(not_before);
    params.not_after = at(not_after);
    Ok(params)
}

/// Makes a new CA and a serving certificate for `names` (IP addresses become IP SANs).
pub fn generate(
    names: &[String],
    validity: Duration,
    now: Timestamp,
) -> Result<Bundle, rcgen::Error> {
    issue(names, validity, now, None)
}

fn issue(
    names: &[String],
    validity: Duration,
    now: Timestamp,
    keep_ca: Option<&Bundle>,
) -> Result<Bundle, rcgen::Error> {
    let not_before = at(now.as_second() - 3600);
    let not_after_ts = now.as_second().saturating_add(validity.as_secs() as i64);
    let not_after = at(not_after_ts);

    let (ca_pem, ca_key) = match keep_ca {
        Some(old) => (old.ca_pem.clone(), KeyPair::from_pem(&old.ca_key_pem)?),
        None => {
            let key = KeyPair::generate()?;
            let params = ca_params(
                now.as_second() - 3600,
                now.as_second().saturating_add(CA_VALIDITY.as_secs() as i64),
            )?;
            (params.self_signed(&key)?.pem(), key)
        }
    };
    let ca_key_pem = ca_key.serialize_pem();
    let ca = rcgen::Issuer::new(ca_params(0, 0)?, ca_key);

    let dns: Vec<String> = names
        .iter()
        .filter(|n| n.parse::<std::net::IpAddr>().is_err())
        .cloned()
        .collect();
    let mut params = CertificateParams::new(dns)?;
    for ip in names
        .iter()
        .filter_map(|n| n.parse::<std::net::IpAddr>().ok())
    {
        params.subject_alt_names.push(SanType::IpAddress(ip));
    }
    params.distinguished_name.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    Ok(Bundle {
        ca_pem,
        ca_key_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after: Timestamp::from_second(not_after_ts).unwrap_or(now),
        names: names.to_vec(),
    })
}

/// Whether a bundle must be replaced: other names, or less than a third of `validity` left.
pub fn needs_renewal(
    bundle: &Bundle,
    names: &[String],
    validity: Duration,
    now: Timestamp,
) -> bool {
    let margin = jiff::SignedDuration::from_secs(validity.as_secs() as i64 / 3);
    bundle.names != names || now >= bundle.not_after - margin
}

fn from_secret(secret: &Secret) -> Option<Bundle> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    let annotations = secret.metadata.annotations.as_ref()?;
    Some(Bundle {
        ca_pem: text("ca")?,
        ca_key_pem: text("ca.key")?,
        cert_pem: text("cert")?,
        key_pem: text("key")?,
        not_after: annotations.get(NOT_AFTER)?.parse().ok()?,
        names: annotations
            .get(NAMES)?
            .split(',')
            .map(str::to_string)
            .collect(),
    })
}

fn to_secret(
    name: &str,
    namespace: &str,
    bundle: &Bundle,
    resource_version: Option<String>,
) -> Secret {
    let data: BTreeMap<String, ByteString> = [
        ("ca", &bundle.ca_pem),
        ("ca.key", &bundle.ca_key_pem),
        ("cert", &bundle.cert_pem),
        ("key", &bundle.key_pem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            resource_version,
            annotations: Some(BTreeMap::from([
                (NOT_AFTER.to_string(), bundle.not_after.to_string()),
                (NAMES.to_string(), bundle.names.join(",")),
            ])),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "strata".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Reads the bundle from the Secret, creating or replacing it when missing, unreadable, for
/// other names, or due for renewal. Replicas racing here converge on one Secret: a create that
/// loses re-reads, an update that loses (resourceVersion conflict) re-reads.
pub async fn ensure(
    client: &Client,
    namespace: &str,
    secret: &str,
    names: &[String],
    validity: Duration,
) -> Result<Bundle, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for _ in 0..5 {
        let now = Timestamp::now();
        let current = api.get_opt(secret).await?;
        if let Some(bundle) = current.as_ref().and_then(from_secret)
            && !needs_renewal(&bundle, names, validity, now)
        {
            return Ok(bundle);
        }
        // Renewals keep the CA, so injected caBundles stay valid.
        let keep = current.as_ref().and_then(from_secret);
        let fresh = issue(names, validity, now, keep.as_ref())
            .or_else(|_| generate(names, validity, now))
            .map_err(|e| kube::Error::Service(Box::new(e)))?;
        let result = match &current {
            None => {
                api.create(
                    &PostParams::default(),
                    &to_secret(secret, namespace, &fresh, None),
                )
                .await
            }
            Some(existing) => {
                let rv = existing.metadata.resource_version.clone();
                api.replace(
                    secret,
                    &PostParams::default(),
                    &to_secret(secret, namespace, &fresh, rv),
                )
                .await
            }
        };
        match result {
            Ok(_) => {
                tracing::info!(secret, not_after = %fresh.not_after, "issued a new serving certificate");
                return Ok(fresh);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(kube::Error::Service(
        "could not settle the certificate secret after 5 attempts".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_the_service() {
        let n = names(
            "admission-webhook",
            "strata-system",
            &["127.0.0.1".into(), "admission-webhook".into()],
        );
        assert_eq!(
            n,
            vec![
                "admission-webhook",
                "admission-webhook.strata-system",
                "admission-webhook.strata-system.svc",
                "admission-webhook.strata-system.svc.cluster.local",
                "127.0.0.1"
            ]
        );
    }

    #[test]
    fn renewal_rules() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let year = Duration::from_secs(365 * 86400);
        let names = names("w", "ns", &[]);
        let bundle = generate(&names, year, now).unwrap();
        assert!(bundle.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!needs_renewal(&bundle, &names, year, now));
        assert!(
            !needs_renewal(
                &bundle,
                &names,
                year,
                "2026-08-15T00:00:00Z".parse().unwrap()
            ),
            "before the last third"
        );
        assert!(
            needs_renewal(
                &bundle,
                &names,
                year,
                "2026-09-15T00:00:00Z".parse().unwrap()
            ),
            "inside the last third"
        );
        assert!(
            needs_renewal(&bundle, &super::names("other", "ns", &[]), year, now),
            "names changed"
        );
    }

    #[test]
    fn renewal_keeps_the_ca() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let first = generate(&names("w", "ns", &[]), Duration::from_secs(3600), now).unwrap();
        let renewed = issue(
            &names("w", "ns", &[]),
            Duration::from_secs(3600),
            now,
            Some(&first),
        )
        .unwrap();
        assert_eq!(renewed.ca_pem, first.ca_pem);
        assert_ne!(renewed.cert_pem, first.cert_pem);
        // The renewed certificate verifies against the original CA: checked end to end by the
        // certificate-rotation e2e test (e2e/tests/webhook.rs); here: a new key, same CA.
        assert_ne!(renewed.key_pem, first.key_pem);
    }

    #[test]
    fn secrets_round_trip() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let bundle = generate(
            &names("w", "ns", &["10.0.0.1".into()]),
            Duration::from_secs(3600),
            now,
        )
        .unwrap();
        let secret = to_secret("s", "ns", &bundle, None);
        assert_eq!(from_secret(&secret), Some(bundle));
    }
}
