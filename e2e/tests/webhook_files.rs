//! The admission-webhook serving a certificate given as files (as cert-manager's Secret is
//! mounted): kube-apiserver keeps calling it while the files are rotated — no restart, no
//! failed admission — and a broken change keeps the last good certificate serving, with a
//! Warning Event and a `failed` reload in the metrics. The expiry metric follows the files.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use strata_e2e::admission::{configuration_name, register_yaml, stateful_set};
use strata_e2e::plane::free_port;
use strata_e2e::services::start_admission_webhook;
use strata_e2e::support::{
    STATEFULSET_UPDATE_RULES, TestNamespace, apply_yaml, cluster, eventually, http_get,
    webhook_configuration,
};

/// Writes `contents` to `path` as kubelet updates a mounted Secret: whole, in one rename.
fn swap(path: &Path, contents: &str) -> Result<()> {
    let next = path.with_extension("next");
    std::fs::write(&next, contents)?;
    std::fs::rename(next, path)?;
    Ok(())
}

/// A certificate for 127.0.0.1 signed by `ca`, valid until `until`: (cert PEM, key PEM).
fn leaf(ca: &rcgen::Issuer<'_, rcgen::KeyPair>, until: (i32, u8, u8)) -> Result<(String, String)> {
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?;
    params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, ca)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The value of `series` (a full `name{labels}` or a bare name) in the server's metrics.
async fn metric(admin: std::net::SocketAddr, series: &str) -> Result<f64> {
    let (_, body) = http_get(admin, "/metrics").await?;
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("{series} not in the metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_certificate_rotates_under_traffic_and_a_broken_one_keeps_the_last_good()
-> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "certfiles").await?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate()?;
    let ca_pem = ca_params.self_signed(&ca_key)?.pem();
    let ca = rcgen::Issuer::new(ca_params, ca_key);
    let dir = std::env::temp_dir().join(format!("strata-certfiles-{}", ns.name));
    std::fs::create_dir_all(&dir)?;
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    let (cert, key) = leaf(&ca, (2030, 1, 1))?;
    swap(&cert_file, &cert)?;
    swap(&key_file, &key)?;

    let port = free_port()?;
    let server = start_admission_webhook(
        &ns.name,
        &format!("127.0.0.1:{port}"),
        &[
            "--tls-cert-file",
            cert_file.to_str().unwrap(),
            "--tls-key-file",
            key_file.to_str().unwrap(),
            "--tls-file-check-interval",
            "1s",
        ],
    )?;
    let admin = server.admin.unwrap();
    let expiry = "admission_webhook_certificate_expiry_timestamp_seconds";
    let until = |y: i16, m: i8, d: i8| {
        jiff::civil::date(y, m, d)
            .to_zoned(jiff::tz::TimeZone::UTC)
            .unwrap()
            .timestamp()
            .as_second() as f64
    };
    eventually(
        "the expiry of the file's certificate",
        Duration::from_secs(30),
        || async {
            Ok(metric(admin, expiry)
                .await
                .ok()
                .filter(|v| *v == until(2030, 1, 1))
                .map(drop))
        },
    )
    .await?;

    let kind = "ValidatingWebhookConfiguration";
    let name = configuration_name(&ns.name, "/admission/no-downscale");
    let ca_bundle = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&ca_pem)
    };
    let yaml = webhook_configuration(
        kind,
        &name,
        &ns.name,
        "no-downscale",
        &format!(
            "{{url: \"https://127.0.0.1:{port}/admission/no-downscale\", caBundle: \"{ca_bundle}\"}}"
        ),
        STATEFULSET_UPDATE_RULES,
    );
    let _hook = register_yaml(&client, &ns.name, kind, &name, &yaml).await?;
    apply_yaml(&client, &ns.name, &stateful_set("traffic", "", "")).await?;
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    let (next_cert, next_key) = leaf(&ca, (2031, 6, 1))?;
    let (mut ok, mut failed) = (0usize, Vec::new());
    let (mut rotated, mut broken) = (false, false);
    let started = tokio::time::Instant::now();
    let mut replicas = 3;
    while started.elapsed() < Duration::from_secs(14) {
        replicas = replicas % 5 + 1;
        // Every update goes through the webhook (dry run: nothing changes).
        match api
            .patch(
                "traffic",
                &PatchParams::default().dry_run(),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
            )
            .await
        {
            Ok(_) => ok += 1,
            Err(e) => failed.push(e.to_string()),
        }
        if !rotated && started.elapsed() > Duration::from_secs(3) {
            // Key first, then the certificate: between the two the pair does not match, a
            // change that must not be served.
            swap(&key_file, &next_key)?;
            swap(&cert_file, &next_cert)?;
            rotated = true;
        }
        if !broken && started.elapsed() > Duration::from_secs(8) {
            swap(&cert_file, "this is not a certificate\n")?;
            broken = true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok > 50, "traffic flowed: {ok} reviews");
    assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
    assert_eq!(
        metric(admin, expiry).await?,
        until(2031, 6, 1),
        "the rotated certificate serves (and the broken change did not replace it)"
    );
    assert!(
        metric(
            admin,
            "admission_webhook_certificate_reloads_total{result=\"reloaded\"}"
        )
        .await?
            >= 1.0
    );
    assert!(
        metric(
            admin,
            "admission_webhook_certificate_reloads_total{result=\"failed\"}"
        )
        .await?
            >= 1.0
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    let warning = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("CertificateReloadFailed"))
        .expect("a CertificateReloadFailed Event");
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let note = warning.note.unwrap_or_default();
    assert!(
        note.contains("tls.crt") && note.contains("still serving the last good certificate"),
        "{note}"
    );
    std::fs::remove_dir_all(dir)?;
    Ok(())
}
