//! Self-managed TLS: a CA and a serving certificate made with rcgen, persisted in a Secret so
//! restarts and every replica share them, and renewed well before they expire.
//!
//! Beyond the anchor: the Secret records the names the certificate was made for, so a changed
//! service name or extra SAN regenerates it (the anchor kept a stale SAN forever), and renewal
//! happens a third of the validity before expiry instead of a restart at the expiry instant.
//!
//! The CA rotates too, a third of its validity before it expires, with overlap: the new CA
//! signs from then on, and the old one stays in the trust bundle (`caBundle`, see
//! [`Bundle::trust_pem`]) until it expires. A serving certificate never outlives the CA that
//! signed it, so by the time the old CA leaves the bundle no server can still present a leaf
//! of it: every request verifies throughout. Private keys never appear in `Debug` output.

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
/// Annotation on the Secret: when the issuing CA expires (RFC 3339).
pub const CA_NOT_AFTER: &str = "strata.dev/ca-not-after";
/// Annotation on the Secret: the issuing CA's common name (each CA has its own).
pub const CA_NAME: &str = "strata.dev/ca-name";
/// Annotation on the Secret: when the previous CA, still trusted, expires.
pub const PREVIOUS_CA_NOT_AFTER: &str = "strata.dev/previous-ca-not-after";
/// Annotations on the Secret: the announced next CA's name, expiry, and since when it is
/// trusted.
pub const NEXT_CA_NAME: &str = "strata.dev/next-ca-name";
pub const NEXT_CA_NOT_AFTER: &str = "strata.dev/next-ca-not-after";
pub const NEXT_CA_SINCE: &str = "strata.dev/next-ca-since";
/// The common name of CAs made before CAs had their own names.
const LEGACY_CA_NAME: &str = "strata-admission-webhook-ca";

/// How long the CA lives. Serving certificates are renewed under the same CA, so the
/// `caBundle` injected into webhook configurations does not change at renewal and no request
/// fails while certificates rotate.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 86400);

/// PEM-encoded CA (and its key), serving certificate and key, and when they expire; the
/// previous CA while it is still trusted.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    pub ca_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: Timestamp,
    pub names: Vec<String>,
    /// The issuing CA's common name.
    pub ca_name: String,
    /// When the issuing CA expires; `None` for a Secret written before this was recorded
    /// (such a CA is rotated at the next check).
    pub ca_not_after: Option<Timestamp>,
    /// The CA that signed before the last rotation and when it expires: trusted until then.
    pub previous_ca: Option<(String, Timestamp)>,
    /// A CA announced for the next rotation: trusted already, signing once announced long
    /// enough.
    pub next_ca: Option<Ca>,
}

/// A CA: its certificate and key (PEM), name, expiry, and since when it is known (for an
/// announced next CA: since when it is trusted).
#[derive(Clone, PartialEq, Eq)]
pub struct Ca {
    pub pem: String,
    pub key_pem: String,
    pub name: String,
    pub not_after: Timestamp,
    pub since: Timestamp,
}

/// The key is left out.
impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("name", &self.name)
            .field("not_after", &self.not_after)
            .field("since", &self.since)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Keys are left out: a bundle may be logged.
impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bundle")
            .field("names", &self.names)
            .field("not_after", &self.not_after)
            .field("ca_name", &self.ca_name)
            .field("ca_not_after", &self.ca_not_after)
            .field(
                "previous_ca_not_after",
                &self.previous_ca.as_ref().map(|(_, t)| t),
            )
            .field(
                "next_ca",
                &self.next_ca.as_ref().map(|n| (&n.name, n.since)),
            )
            .field("ca_key_pem", &"<redacted>")
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl Bundle {
    /// The issuing CA (an unknown expiry reads as never: it is rotated at the next check).
    fn current_ca(&self, now: Timestamp) -> Ca {
        Ca {
            pem: self.ca_pem.clone(),
            key_pem: self.ca_key_pem.clone(),
            name: self.ca_name.clone(),
            not_after: self.ca_not_after.unwrap_or(Timestamp::MAX),
            since: now,
        }
    }

    /// What clients must trust (`caBundle`): the issuing CA, the announced next one, and
    /// until it expires the previous one, whose leaves servers may still present.
    pub fn trust_pem(&self, now: Timestamp) -> String {
        let mut pem = self.ca_pem.clone();
        let next = self.next_ca.as_ref().map(|n| n.pem.as_str());
        let previous = self
            .previous_ca
            .as_ref()
            .filter(|(_, until)| now < *until)
            .map(|(p, _)| p.as_str());
        for extra in [next, previous].into_iter().flatten() {
            if !pem.ends_with('\n') {
                pem.push('\n');
            }
            pem.push_str(extra);
        }
        pem
    }
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

/// The CA's parameters. Given the same name they are the same every time, so an issuer rebuilt
/// from them and the stored CA key signs certificates that chain to the stored CA certificate.
fn ca_params(
    name: &str,
    not_before: i64,
    not_after: i64,
) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
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
    issue(names, validity, CA_VALIDITY, now, None, Renewal::Ca)
}

/// What a bundle needs at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    Keep,
    /// A new serving certificate from the same CA (names changed, last third of its life, or
    /// the previous CA expired and leaves the bundle).
    Leaf,
    /// CA rotation, step 1: a new CA joins the trust bundle (the last third of the current
    /// CA's life, or its expiry unknown); certificates are still signed by the current one.
    AnnounceCa,
    /// CA rotation, step 2, once the new CA has been trusted for [`announce_period`]: it
    /// signs a new serving certificate, and the old CA stays trusted until it expires.
    Ca,
}

/// How long a new CA is trusted before it signs: long enough for every `caBundle` to carry it
/// (injection is continuous) before any server presents a certificate of it.
pub fn announce_period(ca_validity: Duration) -> Duration {
    (ca_validity / 30).max(Duration::from_secs(5))
}

/// Whether a bundle must be replaced, and how. Renewal comes a third of the validity before
/// expiry, for the serving certificate and for the CA alike.
pub fn renewal(
    bundle: &Bundle,
    names: &[String],
    validity: Duration,
    ca_validity: Duration,
    now: Timestamp,
) -> Renewal {
    let span = |d: Duration| jiff::SignedDuration::from_secs(d.as_secs() as i64);
    match &bundle.next_ca {
        Some(next) if now >= next.since + span(announce_period(ca_validity)) => {
            return Renewal::Ca;
        }
        Some(_) => {}
        None => match bundle.ca_not_after {
            None => return Renewal::AnnounceCa,
            Some(until) if now >= until - span(ca_validity / 3) => return Renewal::AnnounceCa,
            Some(_) => {}
        },
    }
    let previous_expired = bundle
        .previous_ca
        .as_ref()
        .is_some_and(|(_, until)| now >= *until);
    if bundle.names != names || now >= bundle.not_after - span(validity / 3) || previous_expired {
        Renewal::Leaf
    } else {
        Renewal::Keep
    }
}

/// A CA made now, valid for `ca_validity`, with its own name.
fn new_ca(now: Timestamp, ca_validity: Duration) -> Result<Ca, rcgen::Error> {
    let key = KeyPair::generate()?;
    let until = now.as_second().saturating_add(ca_validity.as_secs() as i64);
    // Each CA has its own name, so clients holding two tell them apart.
    let name = format!("{LEGACY_CA_NAME}-{}", now.as_second());
    let params = ca_params(&name, now.as_second() - 3600, until)?;
    Ok(Ca {
        pem: params.self_signed(&key)?.pem(),
        key_pem: key.serialize_pem(),
        name,
        not_after: Timestamp::from_second(until).unwrap_or(now),
        since: now,
    })
}

/// The next bundle for step `step` (see [`Renewal`]) from `keep` (`None`: a whole new one).
/// A serving certificate never outlives the CA that signs it.
fn issue(
    names: &[String],
    validity: Duration,
    ca_validity: Duration,
    now: Timestamp,
    keep: Option<&Bundle>,
    step: Renewal,
) -> Result<Bundle, rcgen::Error> {
    let Some(old) = keep else {
        let ca = new_ca(now, ca_validity)?;
        return sign(names, validity, now, ca, None, None);
    };
    let live_previous = old.previous_ca.clone().filter(|(_, until)| now < *until);
    match step {
        Renewal::Keep => Ok(old.clone()),
        Renewal::AnnounceCa => {
            // The serving certificate stays: only what clients trust grows.
            let mut next = old.clone();
            next.next_ca = Some(new_ca(now, ca_validity)?);
            next.previous_ca = live_previous;
            Ok(next)
        }
        Renewal::Leaf => {
            let current = old.current_ca(now);
            let mut fresh = sign(
                names,
                validity,
                now,
                current,
                live_previous,
                old.next_ca.clone(),
            )?;
            fresh.ca_not_after = old.ca_not_after;
            Ok(fresh)
        }
        Renewal::Ca => {
            let ca = match &old.next_ca {
                Some(next) => next.clone(),
                None => new_ca(now, ca_validity)?,
            };
            // The old CA stays trusted until it expires (unknown expiry: a CA's full validity).
            let old_until = old.ca_not_after.unwrap_or_else(|| {
                now.checked_add(jiff::SignedDuration::from_secs(ca_validity.as_secs() as i64))
                    .unwrap_or(now)
            });
            let previous = Some((old.ca_pem.clone(), old_until)).filter(|(_, until)| now < *until);
            sign(names, validity, now, ca, previous, None)
        }
    }
}

/// A serving certificate for `names` signed by `ca`, in a bundle with the given previous and
/// next CAs.
fn sign(
    names: &[String],
    validity: Duration,
    now: Timestamp,
    ca: Ca,
    previous_ca: Option<(String, Timestamp)>,
    next_ca: Option<Ca>,
) -> Result<Bundle, rcgen::Error> {
    let not_before = at(now.as_second() - 3600);
    let wanted = now.as_second().saturating_add(validity.as_secs() as i64);
    let not_after_ts = wanted.min(ca.not_after.as_second());
    let issuer = rcgen::Issuer::new(ca_params(&ca.name, 0, 0)?, KeyPair::from_pem(&ca.key_pem)?);
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
    params.not_after = at(not_after_ts);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Bundle {
        ca_pem: ca.pem,
        ca_key_pem: ca.key_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after: Timestamp::from_second(not_after_ts).unwrap_or(now),
        names: names.to_vec(),
        ca_name: ca.name,
        ca_not_after: Some(ca.not_after),
        previous_ca,
        next_ca,
    })
}

/// Whether a bundle must be replaced (see [`renewal`], with the default CA validity).
pub fn needs_renewal(
    bundle: &Bundle,
    names: &[String],
    validity: Duration,
    now: Timestamp,
) -> bool {
    renewal(bundle, names, validity, CA_VALIDITY, now) != Renewal::Keep
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
        ca_name: annotations
            .get(CA_NAME)
            .cloned()
            .unwrap_or_else(|| LEGACY_CA_NAME.to_string()),
        ca_not_after: annotations.get(CA_NOT_AFTER).and_then(|t| t.parse().ok()),
        previous_ca: text("ca.previous").zip(
            annotations
                .get(PREVIOUS_CA_NOT_AFTER)
                .and_then(|t| t.parse().ok()),
        ),
        next_ca: (|| {
            Some(Ca {
                pem: text("ca.next")?,
                key_pem: text("ca.next.key")?,
                name: annotations.get(NEXT_CA_NAME)?.clone(),
                not_after: annotations.get(NEXT_CA_NOT_AFTER)?.parse().ok()?,
                since: annotations.get(NEXT_CA_SINCE)?.parse().ok()?,
            })
        })(),
    })
}

fn to_secret(
    name: &str,
    namespace: &str,
    bundle: &Bundle,
    resource_version: Option<String>,
) -> Secret {
    let mut data: BTreeMap<String, ByteString> = [
        ("ca", &bundle.ca_pem),
        ("ca.key", &bundle.ca_key_pem),
        ("cert", &bundle.cert_pem),
        ("key", &bundle.key_pem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
    .collect();
    let mut annotations = BTreeMap::from([
        (NOT_AFTER.to_string(), bundle.not_after.to_string()),
        (NAMES.to_string(), bundle.names.join(",")),
        (CA_NAME.to_string(), bundle.ca_name.clone()),
    ]);
    if let Some(until) = bundle.ca_not_after {
        annotations.insert(CA_NOT_AFTER.to_string(), until.to_string());
    }
    if let Some((pem, until)) = &bundle.previous_ca {
        data.insert("ca.previous".into(), ByteString(pem.clone().into_bytes()));
        annotations.insert(PREVIOUS_CA_NOT_AFTER.to_string(), until.to_string());
    }
    if let Some(next) = &bundle.next_ca {
        data.insert("ca.next".into(), ByteString(next.pem.clone().into_bytes()));
        data.insert(
            "ca.next.key".into(),
            ByteString(next.key_pem.clone().into_bytes()),
        );
        annotations.insert(NEXT_CA_NAME.to_string(), next.name.clone());
        annotations.insert(NEXT_CA_NOT_AFTER.to_string(), next.not_after.to_string());
        annotations.insert(NEXT_CA_SINCE.to_string(), next.since.to_string());
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            resource_version,
            annotations: Some(annotations),
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
    ca_validity: Duration,
    known: Option<&Bundle>,
) -> Result<Bundle, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for _ in 0..5 {
        let now = Timestamp::now();
        let current = api.get_opt(secret).await?;
        // A Secret deleted (or emptied) while this process serves is written back from what it
        // serves: a brand-new CA would be untrusted until injected, failing admissions.
        let stored = current.as_ref().and_then(from_secret);
        let restoring = stored.is_none() && known.is_some();
        let keep = stored.or_else(|| known.cloned());
        let plan = keep.as_ref().map_or(Renewal::Ca, |b| {
            renewal(b, names, validity, ca_validity, now)
        });
        if let (Some(bundle), Renewal::Keep, false) = (&keep, plan, restoring) {
            return Ok(bundle.clone());
        }
        // Leaf renewals keep the CA, so injected caBundles stay valid; a CA rotation first
        // adds the new CA to what clients trust, then signs with it, keeping the old one
        // trusted until it expires.
        let fresh = issue(names, validity, ca_validity, now, keep.as_ref(), plan)
            .or_else(|_| generate(names, validity, now))
            .map_err(|e| kube::Error::Service(Box::new(e)))?;
        if restoring {
            tracing::warn!(
                secret,
                "the certificate Secret is gone; writing back the one being served"
            );
        }
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
                tracing::info!(secret, not_after = %fresh.not_after, ca = %fresh.ca_name, step = ?plan, "issued a new serving certificate");
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
            CA_VALIDITY,
            now,
            Some(&first),
            Renewal::Leaf,
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

    /// Whether `leaf_pem` verifies as a server certificate for `name` against `trust_pem`, at
    /// `now` (what kube-apiserver does with the `caBundle`).
    fn verifies(trust_pem: &str, leaf_pem: &str, name: &str, now: Timestamp) -> bool {
        use rustls::client::danger::ServerCertVerifier as _;
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(trust_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(leaf_pem.as_bytes()).unwrap();
        verifier
            .verify_server_cert(
                &leaf,
                &[],
                &ServerName::try_from(name.to_string()).unwrap(),
                &[],
                UnixTime::since_unix_epoch(Duration::from_secs(now.as_second() as u64)),
            )
            .is_ok()
    }

    fn day(n: i64) -> Timestamp {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        start + jiff::SignedDuration::from_hours(24 * n)
    }

    #[test]
    fn the_ca_rotates_with_overlap_and_every_leaf_keeps_verifying() {
        let (validity, ca_validity) = (
            Duration::from_secs(30 * 86400),
            Duration::from_secs(90 * 86400),
        );
        let names = names("w", "ns", &[]);
        let check = |b: &Bundle, n: i64| renewal(b, &names, validity, ca_validity, day(n));
        let first = issue(&names, validity, ca_validity, day(0), None, Renewal::Ca).unwrap();
        assert!(verifies(
            &first.trust_pem(day(1)),
            &first.cert_pem,
            "w.ns.svc",
            day(1)
        ));
        assert_eq!(check(&first, 10), Renewal::Keep);
        assert_eq!(check(&first, 21), Renewal::Leaf);
        // A leaf renewed under the first CA on day 50 lives until day 80.
        let second = issue(
            &names,
            validity,
            ca_validity,
            day(50),
            Some(&first),
            Renewal::Leaf,
        )
        .unwrap();
        assert_eq!(second.ca_pem, first.ca_pem);
        // Two thirds into the CA's life a new CA is announced: trusted, not signing yet.
        assert_eq!(check(&second, 61), Renewal::AnnounceCa);
        let announced = issue(
            &names,
            validity,
            ca_validity,
            day(61),
            Some(&second),
            Renewal::AnnounceCa,
        )
        .unwrap();
        assert_eq!(
            announced.cert_pem, second.cert_pem,
            "servers keep their certificate"
        );
        let next = announced.next_ca.clone().unwrap();
        assert!(announced.trust_pem(day(61)).contains(&next.pem));
        assert!(verifies(
            &announced.trust_pem(day(61)),
            &second.cert_pem,
            "w.ns.svc",
            day(61)
        ));
        // Announced for 3 days (a thirtieth of the CA's validity), then it signs.
        assert_eq!(check(&announced, 63), Renewal::Keep);
        assert_eq!(check(&announced, 64), Renewal::Ca);
        let rotated = issue(
            &names,
            validity,
            ca_validity,
            day(64),
            Some(&announced),
            Renewal::Ca,
        )
        .unwrap();
        assert_eq!(rotated.ca_pem, next.pem);
        assert_ne!(rotated.ca_name, first.ca_name, "each CA has its own name");
        assert_eq!(
            rotated.previous_ca.as_ref().map(|(p, _)| p),
            Some(&first.ca_pem)
        );
        // Both the new leaf and a replica still serving the old one verify.
        let trust = rotated.trust_pem(day(65));
        assert!(verifies(&trust, &rotated.cert_pem, "w.ns.svc", day(65)));
        assert!(verifies(&trust, &second.cert_pem, "w.ns.svc", day(65)));
        assert!(!verifies(
            &rotated.ca_pem,
            &second.cert_pem,
            "w.ns.svc",
            day(65)
        ));
        // Once the old CA has expired it leaves the bundle (the bundle is re-issued for it).
        assert_eq!(check(&rotated, 91), Renewal::Leaf);
        let later = issue(
            &names,
            validity,
            ca_validity,
            day(91),
            Some(&rotated),
            Renewal::Leaf,
        )
        .unwrap();
        assert_eq!(later.previous_ca, None);
        assert_eq!(later.trust_pem(day(91)), later.ca_pem);
        assert!(verifies(
            &later.trust_pem(day(92)),
            &later.cert_pem,
            "w.ns.svc",
            day(92)
        ));
        // Round trips through the Secret, rotation state included.
        for bundle in [announced, rotated] {
            let secret = to_secret("s", "ns", &bundle, None);
            assert_eq!(from_secret(&secret), Some(bundle));
        }
    }

    #[test]
    fn a_leaf_never_outlives_its_ca() {
        let names = names("w", "ns", &[]);
        let ca_validity = Duration::from_secs(90 * 86400);
        let first = issue(
            &names,
            Duration::from_secs(3600),
            ca_validity,
            day(0),
            None,
            Renewal::Ca,
        )
        .unwrap();
        // A year-long certificate asked for from a CA with 40 days left ends with the CA.
        let year = Duration::from_secs(365 * 86400);
        let long = issue(
            &names,
            year,
            ca_validity,
            day(50),
            Some(&first),
            Renewal::Leaf,
        )
        .unwrap();
        assert_eq!(Some(long.not_after), first.ca_not_after);
        assert!(verifies(
            &long.trust_pem(day(51)),
            &long.cert_pem,
            "w",
            day(51)
        ));
    }

    #[test]
    fn a_ca_of_unknown_expiry_is_rotated_and_stays_trusted() {
        let names = names("w", "ns", &[]);
        let year = Duration::from_secs(365 * 86400);
        let mut legacy = generate(&names, year, day(0)).unwrap();
        legacy.ca_not_after = None;
        assert_eq!(
            renewal(&legacy, &names, year, CA_VALIDITY, day(1)),
            Renewal::AnnounceCa
        );
        let announced = issue(
            &names,
            year,
            CA_VALIDITY,
            day(1),
            Some(&legacy),
            Renewal::AnnounceCa,
        )
        .unwrap();
        let switch = 1 + (announce_period(CA_VALIDITY).as_secs() / 86400) as i64 + 1;
        assert_eq!(
            renewal(&announced, &names, year, CA_VALIDITY, day(switch)),
            Renewal::Ca
        );
        let rotated = issue(
            &names,
            year,
            CA_VALIDITY,
            day(switch),
            Some(&announced),
            Renewal::Ca,
        )
        .unwrap();
        let now = day(switch + 1);
        assert!(verifies(
            &rotated.trust_pem(now),
            &legacy.cert_pem,
            "w",
            now
        ));
        assert!(verifies(
            &rotated.trust_pem(now),
            &rotated.cert_pem,
            "w",
            now
        ));
    }

    #[test]
    fn keys_never_show_in_debug_output() {
        let bundle = generate(&names("w", "ns", &[]), Duration::from_secs(3600), day(0)).unwrap();
        let shown = format!("{bundle:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(!shown.contains(bundle.key_pem.lines().nth(1).unwrap()));
        assert!(shown.contains("<redacted>"));
    }
}
