//! admission-webhook: the TLS admission server kube-apiserver calls.
//!
//! This crate owns the webhooks and their certificates. Until those land (their own issue),
//! the leader-elected part — which will inject the CA bundle — watches the webhook
//! configurations labelled for injection, so its cache, readiness, leadership and metrics are
//! real, and changes nothing. Serving admission requests will need no leadership: every
//! replica serves.

pub mod review;
pub mod webhooks;

use std::sync::Arc;

use core_k8s::Context;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use prometheus_client::registry::Registry;

/// The service name: Lease `admission-webhook-leader`, metrics `admission_webhook_*`.
pub const SERVICE: &str = "admission-webhook";

/// The anchor's label asking for the CA bundle to be injected into a webhook configuration.
pub const INJECT_CA_LABEL: &str = "grafana.com/inject-rollout-operator-ca";

pub async fn run(args: core_k8s::CommonArgs) -> core_k8s::Result<()> {
    core_k8s::runtime::run_service(SERVICE, args, Registry::default(), |ctx| async move {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(ctx.client.clone());
        let config = watcher::Config::default().labels(&format!("{INJECT_CA_LABEL}=true"));
        core_k8s::controller::run(ctx, "webhook-configurations", api, config, reconcile).await;
    })
    .await
}

async fn reconcile(
    config: Arc<ValidatingWebhookConfiguration>,
    _ctx: Arc<Context>,
) -> Result<Action, core_k8s::Error> {
    let webhooks = config.webhooks.as_ref().map_or(0, Vec::len);
    tracing::debug!(configuration = %config.name_any(), webhooks, "observed webhook configuration");
    Ok(Action::await_change())
}
