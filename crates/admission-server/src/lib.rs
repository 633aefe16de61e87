//! admission-server: the TLS admission server kube-apiserver calls, as a library both binaries
//! that serve Strata's webhooks run — the admission-webhook, and the rollout-operator in the
//! Grafana operator's compatibility mode (one process, as the anchor ships it).
//!
//! The decisions are `core-admission`'s ([`webhooks`], [`review`]); this crate is the shell:
//! [`server`] the HTTPS server every replica runs, [`certs`] the self-managed certificates
//! shared through a Secret, [`inject`] the leader-only CA injection into webhook
//! configurations, [`prepared`] the calls to pods and their undo.

pub mod cert_files;
pub mod certs;
pub mod downscale_record;
pub mod eviction_cache;
pub mod evictions;
pub mod idle;
pub mod inject;
pub mod metrics;
pub mod policy;
pub mod prepared;
pub mod server;
pub mod tls;

pub use core_admission::{review, webhooks};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use core_k8s::Context;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// The service name: Lease `admission-webhook-leader`, metrics `admission_webhook_*`.
pub const SERVICE: &str = "admission-webhook";

/// Flags of the webhook server.
#[derive(Clone, Debug, clap::Args)]
pub struct WebhookArgs {
    /// HTTPS address of the admission server.
    #[arg(long, default_value = ":8443", value_parser = core_k8s::args::parse_listen_address)]
    pub tls_address: SocketAddr,
    /// Serve this certificate (PEM) instead of a self-managed one; needs --tls-key-file. The
    /// CA is then not injected: put your own caBundle in the webhook configurations.
    #[arg(long, requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// How often the certificate files are checked for a change (reloaded without a
    /// restart; a change that does not load keeps the last good certificate).
    #[arg(long, default_value = "10s", value_parser = core_k8s::args::parse_duration)]
    pub tls_file_check_interval: Duration,
    /// Require every caller to present a client certificate signed by a CA in this PEM file
    /// (give kube-apiserver one through its AdmissionConfiguration's kubeconfig, see
    /// docs/admission-webhook.md): a review from anything else is refused at the TLS
    /// handshake. Unset, any client that reaches the port may post a review.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// With `--client-ca-file`: also require the client certificate's subject common name to
    /// be one of these (repeatable or comma-separated), so another holder of a certificate
    /// from the same CA is refused at the handshake.
    #[arg(long, value_delimiter = ',', requires = "client_ca_file")]
    pub client_cn: Vec<String>,
    /// Secret (in the pod's namespace) holding the self-managed CA and certificate.
    #[arg(long, default_value = "strata-admission-webhook-certificate")]
    pub tls_secret_name: String,
    /// Name of the Service in front of the webhook: the certificate covers its DNS names.
    #[arg(long, default_value = "admission-webhook")]
    pub service_name: String,
    /// More names or IP addresses for the certificate, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub tls_extra_names: Vec<String>,
    /// Validity of the serving certificate; it is renewed a third of this before expiry.
    #[arg(long, default_value = "8760h", value_parser = core_k8s::args::parse_duration)]
    pub cert_validity: Duration,
    /// Validity of the self-managed CA; it rotates a third of this before expiry, the old CA
    /// staying in every `caBundle` until it expires.
    #[arg(long, default_value = "87600h", value_parser = core_k8s::args::parse_duration)]
    pub ca_validity: Duration,
    /// How often the certificate is checked for renewal.
    #[arg(long, default_value = "1h", value_parser = core_k8s::args::parse_duration)]
    pub cert_check_interval: Duration,
    /// The anchor's cluster DNS domain, accepted so its command lines keep working: pods are
    /// called at their own IP (`status.podIP`), never through cluster DNS.
    #[arg(long, default_value = "cluster.local.")]
    pub cluster_domain: String,
    /// Timeout of one call to a pod.
    #[arg(long, default_value = "5s", value_parser = core_k8s::args::parse_duration)]
    pub pod_timeout: Duration,
    /// TEST ONLY, in builds with the `test-hooks` feature (never in release images): send
    /// every pod call to this host:port (a local stand-in for the pods).
    #[cfg_attr(feature = "test-hooks", arg(long, hide = true))]
    #[cfg_attr(not(feature = "test-hooks"), arg(skip))]
    pub pod_address_override: Option<String>,
    /// prepare-downscale keeps downscale times in a ConfigMap instead of StatefulSet
    /// annotations (the anchor's `-use-zone-tracker`; avoids conflicting with the client's
    /// own update of the StatefulSet).
    #[arg(long)]
    pub use_zone_tracker: bool,
    /// The layer-controller's `--default-source-namespace` (the namespace of a layer's source
    /// when `spec.source.namespace` is empty): where the account a layer acts as lives.
    #[arg(long, env = "POD_NAMESPACE", default_value = "strata-system")]
    pub layer_default_source_namespace: String,
    /// The layer-controller's `--default-service-account`: the account layers that name none
    /// act as, which their authors must then be allowed to impersonate.
    #[arg(long)]
    pub layer_default_service_account: Option<String>,
    /// The layer-controller's own ServiceAccount, `<namespace>/<name>`: a layer that names no
    /// account (and has no default) acts as it, so its author must be allowed to impersonate
    /// it. Without the flag such layers are admitted unasked (the chart always sets it).
    #[arg(long, value_parser = webhooks::parse_controller_account)]
    pub layer_controller_service_account: Option<core_layers::objects::ActingAccount>,
    /// Name of the zone-tracker ConfigMap, kept in the server's own namespace (the lease
    /// namespace): StatefulSets of that namespace are tracked in it, those of another
    /// namespace `NS` in `<name>-NS` beside it.
    #[arg(long, default_value = "rollout-operator-zone-tracker", value_parser = non_empty)]
    pub zone_tracker_config_map_name: String,
    /// Inject the self-managed CA into the webhook configurations labelled for it
    /// (`--inject-ca-bundle=false` when something else manages caBundle; the anchor's
    /// `-webhooks.update-ca-bundle`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub inject_ca_bundle: bool,
    /// A label selector the injected configurations must also match, beside the anchor's
    /// labels: two installations in one namespace (the chart's name overrides) each inject
    /// only their own (`app.kubernetes.io/instance=<release>`).
    #[arg(long)]
    pub inject_ca_selector: Option<String>,
    /// The namespaces a webhook acts in, `WEBHOOK=SELECTOR` (e.g.
    /// `pod-eviction=strata.dev/admission-webhook=enabled`; repeatable, one per webhook), checked
    /// by the server itself as kube-apiserver checks the configuration's `namespaceSelector`: a
    /// review for an object in a namespace the selector does not match — one kube-apiserver
    /// would not have sent, so forged — is allowed with nothing read, called or recorded. A
    /// webhook not listed acts in every namespace. The chart passes each webhook's selector.
    #[arg(long, value_parser = parse_namespace_selector)]
    pub namespace_selector: Vec<(webhooks::Webhook, core_k8s::labels::LabelSelector)>,
    /// Budget of one admission request; decisions must be made within 90 % of it (the
    /// anchor's `-server-tls.request-timeout`). Keep it at or under the webhook
    /// configurations' `timeoutSeconds` (10 s by default).
    /// It also bounds a client's TLS handshake and each request from its first byte, however
    /// slowly it arrives: past it the answer is 408 and, a second later, the connection closes.
    #[arg(long, default_value = "10s", value_parser = core_k8s::args::parse_duration)]
    pub request_timeout: Duration,
    /// A connection on which nothing has been read or written this long is closed (the
    /// anchor's idle timeout). kube-apiserver closes its own idle connections after 90 s.
    #[arg(long, default_value = "3m", value_parser = core_k8s::args::parse_duration)]
    pub idle_timeout: Duration,
    /// On SIGTERM, keep accepting reviews this long (reporting not ready on `/readyz`) before
    /// the server stops accepting and drains: a terminating pod's endpoint leaves kube-apiserver's
    /// view only some time after the signal, and a connection refused in between is a failed
    /// admission under `failurePolicy: Fail`. At most 3 s (the shutdown stays within 10 s).
    #[arg(long, default_value = "2s", value_parser = shutdown_delay)]
    pub shutdown_delay: Duration,
    /// A pod prepared for a downscale that its StatefulSet still wants this long after it was
    /// prepared is told to undo (the downscale did not happen: refused by a later admission
    /// step, timed out, or the replicas went back up before the pod was removed). The default
    /// is kube-apiserver's own request timeout: past it no request can still remove the pod.
    /// A downscale this server denies itself is undone at once.
    #[arg(long, default_value = "1m", value_parser = core_k8s::args::parse_duration)]
    pub prepare_downscale_undo_after: Duration,
}

/// `--shutdown-delay` unless given (also what the rollout-operator's compatibility mode uses).
pub const DEFAULT_SHUTDOWN_DELAY: Duration = Duration::from_secs(2);

/// The most `--shutdown-delay` may be: with the 2 s drain after it, serving stops within the
/// controllers' 5 s share of the shutdown.
pub const MAX_SHUTDOWN_DELAY: Duration = Duration::from_secs(3);

fn shutdown_delay(value: &str) -> Result<Duration, String> {
    let delay = core_k8s::args::parse_duration(value).map_err(|e| e.to_string())?;
    if delay > MAX_SHUTDOWN_DELAY {
        return Err(format!(
            "must be at most {}s (shutdown completes within 10 s)",
            MAX_SHUTDOWN_DELAY.as_secs()
        ));
    }
    Ok(delay)
}

/// The certificate bundle from the Secret (issued or renewed as needed), retried until it is
/// available; `None` when the process is asked to stop first.
async fn load_or_issue(
    ctx: &Context,
    args: &WebhookArgs,
    namespace: &str,
    known: Option<&certs::Bundle>,
) -> Option<certs::Bundle> {
    let names = certs::names(&args.service_name, namespace, &args.tls_extra_names);
    loop {
        match certs::ensure(
            &ctx.client,
            namespace,
            &args.tls_secret_name,
            &names,
            args.cert_validity,
            args.ca_validity,
            known,
        )
        .await
        {
            Ok(bundle) => return Some(bundle),
            Err(e) => {
                tracing::warn!(error = %e, secret = %args.tls_secret_name, "certificate not available yet; retrying");
                tokio::select! {
                    _ = ctx.shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                }
            }
        }
    }
}

/// Serves the webhooks until the process stops: certificates, the HTTPS server and (unless
/// turned off) CA injection. Also linked into the rollout-operator's compatibility mode,
/// which serves the anchor's webhooks from the operator's own process.
pub async fn serve_webhooks(ctx: Arc<Context>, args: WebhookArgs, metrics: metrics::Metrics) {
    let namespace = ctx.args.lease_namespace();
    let ready = ctx.readiness.register("certificate");
    let (ca_tx, ca_rx) = watch::channel(String::new());
    let trust = match &args.client_ca_file {
        None => tls::ClientTrust::default(),
        Some(path) => match std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|pem| tls::ClientTrust::from_pem(&pem))
            .and_then(|trust| trust.pinned_to(args.client_cn.clone()))
        {
            Ok(trust) => trust,
            Err(e) => {
                tracing::error!(error = %e, file = %path.display(), "reading --client-ca-file");
                return;
            }
        },
    };
    if trust.requires_client_certificates() {
        tracing::info!("callers must present a client certificate (--client-ca-file)");
    }
    let tls = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => {
            let files = cert_files::CertFiles {
                cert: cert.clone(),
                key: key.clone(),
            };
            match files.load(&trust) {
                Ok(loaded) => {
                    metrics.certificate_expiry.set(loaded.not_after.as_second());
                    let tls = RustlsConfig::from_config(Arc::new(loaded.config));
                    // Rotated files (cert-manager renewing its Secret, kubelet swapping the
                    // mounted files) are picked up without a restart.
                    tokio::spawn(files.watch(
                        ctx.clone(),
                        cert_files::regarding(&args.tls_secret_name, &namespace),
                        trust.clone(),
                        tls.clone(),
                        metrics.clone(),
                        args.tls_file_check_interval,
                        loaded.fingerprint,
                    ));
                    tls
                }
                Err(e) => {
                    tracing::error!(error = %e, "reading --tls-cert-file/--tls-key-file");
                    return;
                }
            }
        }
        _ => {
            let Some(bundle) = load_or_issue(&ctx, &args, &namespace, None).await else {
                return;
            };
            ca_tx.send_replace(bundle.trust_pem(jiff::Timestamp::now()));
            metrics.certificate_expiry.set(bundle.not_after.as_second());
            let tls = match tls::server_config(
                bundle.cert_pem.as_bytes(),
                bundle.key_pem.as_bytes(),
                &trust,
            ) {
                Ok(config) => RustlsConfig::from_config(Arc::new(config)),
                Err(e) => {
                    tracing::error!(error = %e, "loading the serving certificate");
                    return;
                }
            };
            // Renew before expiry and hot-swap without a restart: in-flight and new
            // connections keep working; the injected caBundle changes only at CA rotation, and
            // then it trusts the new CA before any server presents a certificate of it.
            let (ctx2, args2, tls2, ns2, metrics2, trust2) = (
                ctx.clone(),
                args.clone(),
                tls.clone(),
                namespace.clone(),
                metrics.clone(),
                trust.clone(),
            );
            tokio::spawn(async move {
                let mut current = bundle;
                loop {
                    tokio::select! {
                        _ = ctx2.shutdown.cancelled() => return,
                        _ = tokio::time::sleep(args2.cert_check_interval) => {}
                    }
                    let Some(next) = load_or_issue(&ctx2, &args2, &ns2, Some(&current)).await
                    else {
                        return;
                    };
                    if next.cert_pem != current.cert_pem {
                        match tls::server_config(
                            next.cert_pem.as_bytes(),
                            next.key_pem.as_bytes(),
                            &trust2,
                        ) {
                            Ok(config) => {
                                tls2.reload_from_config(Arc::new(config));
                                metrics2.certificate_expiry.set(next.not_after.as_second());
                                tracing::info!(not_after = %next.not_after, "serving certificate reloaded")
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "reloading the serving certificate failed")
                            }
                        }
                    }
                    // What clients must trust changes on its own at CA rotation (a new CA
                    // announced before it signs, an old one leaving once expired).
                    let trust = next.trust_pem(jiff::Timestamp::now());
                    if trust != *ca_tx.borrow() {
                        ca_tx.send_replace(trust);
                    }
                    current = next;
                }
            });
            tls
        }
    };
    ready.ready();
    // Admission decisions get their own client: with a client-side rate limit they never
    // queue behind the controllers' requests.
    let client = match ctx.dedicated_client() {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "building the webhooks' client");
            return;
        }
    };
    let app = Arc::new(server::App {
        client,
        zone_tracker: args
            .use_zone_tracker
            .then(|| core_admission::webhooks::ZoneTrackerPlace {
                namespace: namespace.clone(),
                name: args.zone_tracker_config_map_name.clone(),
            }),
        http: ctx.pod_http(
            args.pod_timeout,
            args.pod_address_override.clone(),
            metrics.pod_calls.clone(),
        ),
        http_metrics: ctx.http_metrics.clone(),
        metrics: metrics.clone(),
        handler_timeout: server::handler_timeout(args.request_timeout),
        layer_defaults: webhooks::LayerDefaults {
            source_namespace: args.layer_default_source_namespace.clone(),
            service_account: args.layer_default_service_account.clone(),
            controller_account: args.layer_controller_service_account.clone(),
        },
        // Checked in `run`.
        namespace_selectors: namespace_selectors(&args.namespace_selector).unwrap_or_default(),
        layers: Default::default(),
        pending_downscales: Default::default(),
        eviction_cache: Default::default(),
    });
    tracing::info!(address = %args.tls_address, "admission server listening");
    // The server outlives the shutdown signal by --shutdown-delay (see the flag), not ready
    // from the signal on.
    let serving_stop = tokio_util::sync::CancellationToken::new();
    {
        let (shutdown, serving_stop, delay) = (
            ctx.shutdown.clone(),
            serving_stop.clone(),
            args.shutdown_delay,
        );
        tokio::spawn(async move {
            shutdown.cancelled().await;
            ready.not_ready();
            if !delay.is_zero() {
                tracing::info!(?delay, "still accepting reviews before stopping");
                tokio::time::sleep(delay).await;
            }
            serving_stop.cancel();
        });
    }
    let serving = async {
        let served = server::serve(
            args.tls_address,
            tls,
            server::Timeouts {
                request: args.request_timeout,
                idle: args.idle_timeout,
            },
            app.clone(),
            ctx.shutdown.clone(),
            serving_stop,
        )
        .await;
        // A server that cannot listen (its port taken, say) must not sit there looking
        // healthy while kube-apiserver's calls fail: say so at once and stop the process.
        if let Err(e) = served {
            tracing::error!(error = %e, address = %args.tls_address, "admission server failed; stopping");
            ctx.shutdown.cancel();
        }
    };
    let injecting = async {
        // With a provided certificate there is no CA of ours to inject.
        if args.inject_ca_bundle && args.tls_cert_file.is_none() {
            inject::run(ctx.clone(), ca_rx, args.inject_ca_selector.clone()).await;
        }
    };
    let collecting = policy::run(ctx.clone(), metrics.failure_policy.clone());
    let undoing = prepared::run(ctx.clone(), app.clone(), args.prepare_downscale_undo_after);
    futures::join!(serving, injecting, collecting, undoing);
}

pub async fn run(common: core_k8s::CommonArgs, args: WebhookArgs) -> core_k8s::Result<()> {
    namespace_selectors(&args.namespace_selector)?;
    let mut registry = Registry::default();
    let prefix = core_k8s::metrics::metric_prefix(SERVICE);
    let zpdb = metrics::ZpdbMetrics::register(&prefix, &mut registry);
    let pod_calls = core_k8s::http_metrics::PodCallMetrics::register(&prefix, &mut registry);
    let metrics = metrics::Metrics::register(&mut registry, zpdb, pod_calls);
    core_k8s::runtime::run_service(SERVICE, common, registry, |ctx| {
        serve_webhooks(ctx, args, metrics)
    })
    .await
}

/// One `--namespace-selector` value: `WEBHOOK=SELECTOR`, for a namespaced webhook.
fn parse_namespace_selector(
    value: &str,
) -> Result<(webhooks::Webhook, core_k8s::labels::LabelSelector), String> {
    let (name, selector) = value
        .split_once('=')
        .ok_or_else(|| format!("{value:?} is not WEBHOOK=SELECTOR"))?;
    let webhook = webhooks::Webhook::named(name).ok_or_else(|| {
        format!(
            "{name:?} is not a webhook (one of {})",
            webhooks::Webhook::ALL.map(|w| w.name()).join(", ")
        )
    })?;
    if !webhook.namespaced() {
        return Err(format!(
            "{name} reviews cluster-scoped objects: no namespace to select"
        ));
    }
    Ok((webhook, core_k8s::labels::parse_flag(selector)?))
}

/// The `--namespace-selector` values by webhook; a webhook given twice is refused (which one
/// kube-apiserver uses is not for the server to guess).
pub fn namespace_selectors(
    given: &[(webhooks::Webhook, core_k8s::labels::LabelSelector)],
) -> core_k8s::Result<std::collections::BTreeMap<webhooks::Webhook, core_k8s::labels::LabelSelector>>
{
    let mut selectors = std::collections::BTreeMap::new();
    for (webhook, selector) in given {
        if selectors.insert(*webhook, selector.clone()).is_some() {
            return Err(core_k8s::Error::InvalidFlag {
                flag: "--namespace-selector",
                reason: format!(
                    "{} is given twice: one selector per webhook",
                    webhook.name()
                ),
            });
        }
    }
    Ok(selectors)
}

fn non_empty(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        webhook: WebhookArgs,
    }

    #[test]
    fn namespace_selectors_name_a_namespaced_webhook_once() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("admission-webhook").chain(args.iter().copied()))
                .map_err(|e| e.to_string())
                .and_then(|cli| {
                    namespace_selectors(&cli.webhook.namespace_selector).map_err(|e| e.to_string())
                })
        };
        let selectors = parse(&[
            "--namespace-selector",
            "pod-eviction=strata.dev/admission-webhook=enabled,kubernetes.io/metadata.name notin (kube-system)",
            "--namespace-selector",
            "prepare-downscale=team",
        ])
        .unwrap();
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let eviction = &selectors[&webhooks::Webhook::PodEviction];
        assert!(eviction.matches(&labels(&[
            ("strata.dev/admission-webhook", "enabled"),
            ("kubernetes.io/metadata.name", "apps")
        ])));
        assert!(!eviction.matches(&labels(&[
            ("strata.dev/admission-webhook", "enabled"),
            ("kubernetes.io/metadata.name", "kube-system")
        ])));
        assert!(!eviction.matches(&labels(&[("kubernetes.io/metadata.name", "apps")])));
        assert!(!selectors.contains_key(&webhooks::Webhook::NoDownscale));
        // (flags, what the refusal names)
        let refused = [
            (vec!["pod-eviction"], "is not WEBHOOK=SELECTOR"),
            (vec!["evict=a=b"], "\"evict\" is not a webhook"),
            (vec!["addonslayer-validation=a=b"], "no namespace to select"),
            (vec!["pod-eviction=a in (b"], "label selector"),
            (
                vec!["pod-eviction=a=b", "pod-eviction=c=d"],
                "pod-eviction is given twice",
            ),
        ];
        for (values, says) in refused {
            let mut args = Vec::new();
            for value in &values {
                args.extend(["--namespace-selector", value]);
            }
            let error = parse(&args).unwrap_err();
            assert!(error.contains(says), "{values:?}: {error}");
        }
    }

    #[test]
    fn the_shutdown_delay_defaults_to_two_seconds_and_keeps_the_stop_within_ten() {
        let delay = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("admission-webhook").chain(args.iter().copied()))
                .map(|cli| cli.webhook.shutdown_delay)
                .map_err(|e| e.to_string())
        };
        assert_eq!(delay(&[]), Ok(Duration::from_secs(2)));
        assert_eq!(delay(&["--shutdown-delay", "0s"]), Ok(Duration::ZERO));
        assert_eq!(delay(&["--shutdown-delay", "3s"]), Ok(MAX_SHUTDOWN_DELAY));
        let refused = delay(&["--shutdown-delay", "4s"]).unwrap_err();
        assert!(refused.contains("at most 3s"), "{refused}");
        // With the 2 s drain after it, serving ends within the controllers' share of the stop.
        assert!(
            MAX_SHUTDOWN_DELAY + Duration::from_secs(2)
                <= core_k8s::shutdown::Stage::StopControllers.budget()
        );
    }
}
