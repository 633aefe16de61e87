//! drift-observer: detects drift between what the layers applied and what runs.
//!
//! This crate owns drift detection and reporting. Until that lands (its own issue), the
//! controller watches the ConfigMaps Strata manages (`app.kubernetes.io/managed-by=strata`) —
//! so its cache, readiness, leadership and metrics are real — and reports nothing.

use std::sync::Arc;

use core_k8s::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;

/// The service name: Lease `drift-observer-leader`, metrics `drift_observer_*`.
pub const SERVICE: &str = "drift-observer";

/// Selects the objects Strata applied.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=strata";

pub async fn run(args: core_k8s::CommonArgs) -> core_k8s::Result<()> {
    core_k8s::runtime::run_service(SERVICE, args, Registry::default(), |ctx| async move {
        let api = ctx.watched_api::<ConfigMap>();
        let config = watcher::Config::default().labels(MANAGED_SELECTOR);
        core_k8s::controller::run(ctx, "managed-configmaps", api, config, reconcile).await;
    })
    .await
}

async fn reconcile(object: Arc<ConfigMap>, _ctx: Arc<Context>) -> Result<Action, core_k8s::Error> {
    tracing::debug!(object = %object.name_any(), "observed managed object");
    Ok(Action::await_change())
}
