//! rollout-operator: zone-by-zone rollouts of StatefulSet groups and replica coordination.
//!
//! This crate owns the rollout decisions: [`plan`] is the pure planner (also behind
//! `strata rollout plan`), [`zpdb`] the zone-aware disruption budget shared with the
//! admission webhook, [`reconcile`] the event-driven shell that executes plans.

pub mod flags;
pub mod metrics;
pub mod plan;
pub mod reconcile;

pub use core_rollout::{crd, keys, observed, zpdb};

use prometheus_client::registry::Registry;

/// The service name: Lease `rollout-operator-leader`, metrics `rollout_operator_*`.
pub const SERVICE: &str = "rollout-operator";

/// Flags of the calls to pods' delayed-downscale endpoints.
#[derive(Clone, Debug, clap::Args)]
pub struct PodArgs {
    /// Timeout of each HTTP call to a pod (the anchor's `-pods.client-timeout`).
    #[arg(long, default_value = "5s", value_parser = core_k8s::args::parse_duration)]
    pub pod_timeout: std::time::Duration,
    /// DNS domain of the cluster, for pod addresses `<pod>.<service>.<namespace>.svc.<domain>`
    /// (the anchor's `-kubernetes.cluster-domain`).
    #[arg(long, default_value = "cluster.local.")]
    pub cluster_domain: String,
    /// TEST ONLY: send every pod call to this host:port (a local stand-in for the pods).
    #[arg(long, hide = true)]
    pub pod_address_override: Option<String>,
}

pub async fn run(args: core_k8s::CommonArgs, pods: PodArgs) -> core_k8s::Result<()> {
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    core_k8s::runtime::run_service(SERVICE, args, registry, |ctx| {
        reconcile::run(ctx, metrics, pods)
    })
    .await
}
