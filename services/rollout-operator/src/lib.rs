//! rollout-operator: zone-by-zone rollouts of StatefulSet groups and replica coordination.
//!
//! This crate owns the rollout decisions: [`plan`] is the pure planner (also behind
//! `strata rollout plan`), [`zpdb`] the zone-aware disruption budget shared with the
//! admission webhook. The controller shell that executes plans is not wired yet: it watches
//! the StatefulSets of rollout groups and makes no changes.

pub mod keys;
pub mod observed;
pub mod plan;
pub mod zpdb;

use std::sync::Arc;

use core_k8s::Context;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;

/// The service name: Lease `rollout-operator-leader`, metrics `rollout_operator_*`.
pub const SERVICE: &str = "rollout-operator";

/// The anchor's label that puts a StatefulSet into a rollout group.
pub const ROLLOUT_GROUP_LABEL: &str = keys::ROLLOUT_GROUP;

pub async fn run(args: core_k8s::CommonArgs) -> core_k8s::Result<()> {
    core_k8s::runtime::run_service(SERVICE, args, Registry::default(), |ctx| async move {
        let api = ctx.watched_api::<StatefulSet>();
        let config = watcher::Config::default().labels(ROLLOUT_GROUP_LABEL);
        core_k8s::controller::run(ctx, "statefulsets", api, config, reconcile).await;
    })
    .await
}

async fn reconcile(sts: Arc<StatefulSet>, _ctx: Arc<Context>) -> Result<Action, core_k8s::Error> {
    let group = sts
        .labels()
        .get(ROLLOUT_GROUP_LABEL)
        .cloned()
        .unwrap_or_default();
    tracing::debug!(statefulset = %sts.name_any(), %group, "observed rollout group member");
    Ok(Action::await_change())
}
