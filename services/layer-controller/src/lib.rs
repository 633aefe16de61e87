//! layer-controller: ordered, dependency-aware layers of addons (`AddonsLayer`).
//!
//! This crate owns layer ordering, apply and prune. Until the AddonsLayer API lands (its own
//! issue), the controller watches the ConfigMap layer sources (`strata.dev/layer-source`) — so
//! its cache, readiness, leadership and metrics are real — and applies nothing.

pub mod crd;
pub mod deps;
pub mod error;
pub mod keys;
pub mod plan;
pub mod source;

use std::sync::Arc;

use core_k8s::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;

/// The service name: Lease `layer-controller-leader`, metrics `layer_controller_*`.
pub const SERVICE: &str = "layer-controller";

/// Label that marks a ConfigMap as a layer source for clusters without Flux.
pub const LAYER_SOURCE_LABEL: &str = "strata.dev/layer-source";

pub async fn run(args: core_k8s::CommonArgs) -> core_k8s::Result<()> {
    core_k8s::runtime::run_service(SERVICE, args, Registry::default(), |ctx| async move {
        let api = ctx.watched_api::<ConfigMap>();
        let config = watcher::Config::default().labels(LAYER_SOURCE_LABEL);
        core_k8s::controller::run(ctx, "layer-sources", api, config, reconcile).await;
    })
    .await
}

async fn reconcile(source: Arc<ConfigMap>, _ctx: Arc<Context>) -> Result<Action, core_k8s::Error> {
    let files = source.data.as_ref().map_or(0, |d| d.len());
    tracing::debug!(source = %source.name_any(), files, "observed layer source");
    Ok(Action::await_change())
}
