//! rollout-operator: zone-by-zone rollouts of StatefulSet groups and replica coordination.
//!
//! The decisions (`plan`, the pure planner also behind `strata rollout plan`; `zpdb`, the
//! zone-aware disruption budget) live in `core-rollout`; [`reconcile`] is the event-driven
//! shell that executes plans, and the compatibility mode serves the webhooks through the
//! `admission-server` crate.

pub mod flags;
pub mod metrics;
pub mod ready_time;
pub mod reconcile;
pub mod scope;

pub use core_rollout::{crd, keys, observed, plan, zpdb};

use prometheus_client::registry::Registry;

/// The service name: Lease `rollout-operator-leader`, metrics `rollout_operator_*`.
pub const SERVICE: &str = "rollout-operator";

/// Flags of the calls to pods' delayed-downscale endpoints.
#[derive(Clone, Debug, clap::Args)]
pub struct PodArgs {
    /// Timeout of each HTTP call to a pod (the anchor's `-pods.client-timeout`).
    #[arg(long, default_value = "5s", value_parser = core_k8s::args::parse_duration)]
    pub pod_timeout: std::time::Duration,
    /// The anchor's `-kubernetes.cluster-domain`, accepted so its command lines keep working:
    /// pods are called at their own IP (`status.podIP`), never through cluster DNS.
    #[arg(long, default_value = "cluster.local.")]
    pub cluster_domain: String,
    /// TEST ONLY, in builds with the `test-hooks` feature (never in release images): send
    /// every pod call to this host:port (a local stand-in for the pods).
    #[cfg_attr(feature = "test-hooks", arg(long, hide = true))]
    #[cfg_attr(not(feature = "test-hooks"), arg(skip))]
    pub pod_address_override: Option<String>,
    /// Timeout of each `grafana.com/ready-time` patch (the anchor's
    /// `-zpdb.pod-ready-annotation-patch-timeout`).
    #[arg(long, default_value = "5s", value_parser = core_k8s::args::parse_duration)]
    pub ready_time_patch_timeout: std::time::Duration,
}

/// Where the operator acts, beyond `--watch-namespace`.
#[derive(Clone, Debug, clap::Args)]
pub struct ScopeArgs {
    /// Act only in namespaces whose labels match this selector (e.g.
    /// `strata.dev/rollouts=enabled`), followed as namespaces are labelled and unlabelled.
    /// Objects are then watched in every namespace; the operator needs list and watch
    /// cluster-wide and its write rights in each selected namespace. Not with
    /// `--watch-namespace` (or the anchor's `-kubernetes.namespace`).
    #[arg(long, value_parser = core_k8s::labels::parse_flag)]
    pub watch_namespace_selector: Option<core_k8s::labels::LabelSelector>,
}

/// Compatibility mode: the anchor's webhooks served from this process (`-server-tls.enabled`
/// in the anchor's flags). Strata-native installs run the admission-webhook deployable instead.
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Compatibility mode (the anchor's webhooks in this process)")]
pub struct CompatArgs {
    /// Serve no-downscale, prepare-downscale, pod-eviction and zpdb-validation over TLS from
    /// this process, as the anchor's image does (`-server-tls.enabled`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub serve_webhooks: bool,
    /// HTTPS address of the webhooks (`-server-tls.port`).
    #[arg(long, default_value = ":8443", value_parser = core_k8s::args::parse_listen_address)]
    pub webhook_tls_address: std::net::SocketAddr,
    /// Serve this certificate instead of a self-managed one (`-server-tls.cert-file`).
    #[arg(long, requires = "webhook_tls_key_file")]
    pub webhook_tls_cert_file: Option<std::path::PathBuf>,
    #[arg(long, requires = "webhook_tls_cert_file")]
    pub webhook_tls_key_file: Option<std::path::PathBuf>,
    /// Secret holding the self-managed certificate (`-server-tls.self-signed-cert.secret-name`).
    #[arg(long, default_value = "rollout-operator-self-signed-certificate")]
    pub webhook_tls_secret_name: String,
    /// One more DNS name for the certificate (`-server-tls.self-signed-cert.dns-name`); the
    /// names of Service `rollout-operator` are always covered.
    #[arg(long)]
    pub webhook_dns_name: Option<String>,
    /// Validity of the self-managed certificate (`-server-tls.self-signed-cert.expiration`).
    #[arg(long, default_value = "8760h", value_parser = core_k8s::args::parse_duration)]
    pub webhook_cert_validity: std::time::Duration,
    /// Inject the CA into the labelled webhook configurations (`-webhooks.update-ca-bundle`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub webhook_inject_ca_bundle: bool,
    /// Budget of one admission request (`-server-tls.request-timeout`).
    #[arg(long, default_value = "10s", value_parser = core_k8s::args::parse_duration)]
    pub webhook_request_timeout: std::time::Duration,
    /// prepare-downscale keeps downscale times in a ConfigMap (`-use-zone-tracker`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub use_zone_tracker: bool,
    /// The zone-tracker ConfigMap (`-zone-tracker.config-map-name`).
    #[arg(long, default_value = "rollout-operator-zone-tracker")]
    pub zone_tracker_config_map_name: String,
    /// When a pod prepared for a downscale that did not happen is told to undo (a Strata
    /// flag; see the admission-webhook's `--prepare-downscale-undo-after`).
    #[arg(long, default_value = "1m", value_parser = core_k8s::args::parse_duration)]
    pub prepare_downscale_undo_after: std::time::Duration,
}

impl CompatArgs {
    /// The admission-webhook library's arguments for the anchor's surface.
    fn webhook_args(&self, pods: &PodArgs) -> admission_server::WebhookArgs {
        admission_server::WebhookArgs {
            tls_address: self.webhook_tls_address,
            tls_cert_file: self.webhook_tls_cert_file.clone(),
            tls_key_file: self.webhook_tls_key_file.clone(),
            tls_file_check_interval: std::time::Duration::from_secs(10),
            // Caller certificates are a Strata flag of the native deployable only.
            client_ca_file: None,
            client_cn: Vec::new(),
            // The anchor's install selects namespaces in its webhook configurations only.
            namespace_selector: Vec::new(),
            // The anchor serves no AddonsLayer validation; the defaults only matter there.
            layer_default_source_namespace: String::new(),
            layer_default_service_account: None,
            layer_controller_service_account: None,
            tls_secret_name: self.webhook_tls_secret_name.clone(),
            service_name: SERVICE.to_string(),
            tls_extra_names: self.webhook_dns_name.iter().cloned().collect(),
            cert_validity: self.webhook_cert_validity,
            ca_validity: admission_server::certs::CA_VALIDITY,
            cert_check_interval: std::time::Duration::from_secs(3600),
            cluster_domain: pods.cluster_domain.clone(),
            pod_timeout: pods.pod_timeout,
            pod_address_override: pods.pod_address_override.clone(),
            use_zone_tracker: self.use_zone_tracker,
            zone_tracker_config_map_name: self.zone_tracker_config_map_name.clone(),
            inject_ca_bundle: self.webhook_inject_ca_bundle,
            inject_ca_selector: None,
            request_timeout: self.webhook_request_timeout,
            idle_timeout: admission_server::idle::IDLE_TIMEOUT,
            shutdown_delay: admission_server::DEFAULT_SHUTDOWN_DELAY,
            prepare_downscale_undo_after: self.prepare_downscale_undo_after,
        }
    }
}

pub async fn run(
    args: core_k8s::CommonArgs,
    pods: PodArgs,
    compat: CompatArgs,
    scope: ScopeArgs,
) -> core_k8s::Result<()> {
    let selector = scope.watch_namespace_selector.filter(|s| !s.is_empty());
    if let (Some(selector), [first, ..]) = (&selector, args.watch_namespaces().as_slice()) {
        return Err(core_k8s::Error::InvalidFlag {
            flag: "--watch-namespace-selector",
            reason: format!(
                "{:?} and --watch-namespace {first:?} both choose the namespaces: give one",
                selector.as_str()
            ),
        });
    }
    check_namespaces_exist(&args).await?;
    let mut registry = Registry::default();
    let mut metrics = metrics::Metrics::register(&mut registry);
    metrics.namespace_label = selector.is_some() || args.watch_namespaces().len() != 1;
    let webhooks = compat.serve_webhooks.then(|| {
        (
            compat.webhook_args(&pods),
            admission_server::metrics::Metrics::register(
                &mut registry,
                metrics.zpdb.clone(),
                metrics.pod_calls.clone(),
            ),
        )
    });
    core_k8s::runtime::run_service(SERVICE, args, registry, |ctx| async move {
        let controller = reconcile::run(ctx.clone(), metrics, pods, selector);
        let webhooks = async {
            if let Some((args, metrics)) = webhooks {
                admission_server::serve_webhooks(ctx.clone(), args, metrics).await;
            }
        };
        futures::join!(controller, webhooks);
    })
    .await
}

/// Refuses to start on a listed namespace that does not exist (a misspelt `--watch-namespace`
/// would otherwise be watched, empty, forever). A client that may not read namespaces (the
/// chart grants none: Roles only) cannot tell, and goes on.
async fn check_namespaces_exist(args: &core_k8s::CommonArgs) -> core_k8s::Result<()> {
    let namespaces = args.watch_namespaces();
    if namespaces.is_empty() {
        return Ok(());
    }
    let client =
        core_k8s::client::client_from(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    for namespace in namespaces {
        match api.get_opt(namespace).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(core_k8s::Error::InvalidFlag {
                    flag: "--watch-namespace",
                    reason: format!("namespace {namespace:?} does not exist"),
                });
            }
            Err(e) => {
                tracing::debug!(%namespace, error = %e, "cannot check that the namespace exists");
            }
        }
    }
    Ok(())
}
