//! CA injection: every Validating/MutatingWebhookConfiguration labelled
//! `grafana.com/inject-rollout-operator-ca=true` and `grafana.com/namespace=<our namespace>`
//! gets our CA in every webhook's `clientConfig.caBundle` — continuously, so configurations
//! created later (or whose caBundle someone removed) are fixed too. Only the leader writes.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use core_k8s::Context;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

pub const INJECT_LABEL: &str = "grafana.com/inject-rollout-operator-ca";
pub const NAMESPACE_LABEL: &str = "grafana.com/namespace";

/// The label selector of the configurations we own the caBundle of, narrowed by `extra`
/// (`--inject-ca-selector`) when two installations share a namespace.
pub fn selector(namespace: &str, extra: Option<&str>) -> String {
    let own = format!("{INJECT_LABEL}=true,{NAMESPACE_LABEL}={namespace}");
    match extra.map(str::trim).filter(|e| !e.is_empty()) {
        Some(extra) => format!("{own},{extra}"),
        None => own,
    }
}

/// The strategic-merge patch that sets `caBundle` on the webhooks whose bundle differs
/// (webhooks merge by name), or `None` when all are current.
pub fn patch_for(
    webhooks: &[(String, Option<Vec<u8>>)],
    ca_pem: &str,
) -> Option<serde_json::Value> {
    let stale: Vec<serde_json::Value> = webhooks
        .iter()
        .filter(|(_, bundle)| bundle.as_deref() != Some(ca_pem.as_bytes()))
        .map(|(name, _)| json!({"name": name, "clientConfig": {"caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)}}))
        .collect();
    (!stale.is_empty()).then(|| json!({"webhooks": stale}))
}

#[derive(Debug, thiserror::Error)]
#[error("injecting the CA into {0}: {1}")]
pub struct InjectError(String, #[source] kube::Error);

impl core_k8s::controller::ReconcileError for InjectError {
    fn category(&self) -> &'static str {
        "inject_ca"
    }
}

/// Runs both injection controllers until shutdown.
pub async fn run(ctx: Arc<Context>, ca: watch::Receiver<String>, extra_selector: Option<String>) {
    let namespace = ctx.args.lease_namespace();
    let labels = selector(&namespace, extra_selector.as_deref());
    let config = watcher::Config::default().labels(&labels);
    let v = run_kind::<ValidatingWebhookConfiguration>(
        ctx.clone(),
        "validating-webhook-configurations",
        config.clone(),
        ca.clone(),
    );
    let m = run_kind::<MutatingWebhookConfiguration>(
        ctx,
        "mutating-webhook-configurations",
        config,
        ca,
    );
    futures::join!(v, m);
}

/// A webhook configuration kind: its webhooks' names and current caBundles.
pub trait WebhookConfiguration:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn bundles(&self) -> Vec<(String, Option<Vec<u8>>)>;
}

// The two kinds hold different webhook types with the same `name` and `clientConfig` fields.
macro_rules! webhook_configuration {
    ($kind:ty) => {
        impl WebhookConfiguration for $kind {
            fn bundles(&self) -> Vec<(String, Option<Vec<u8>>)> {
                let hooks = self.webhooks.iter().flatten();
                hooks
                    .map(|w| {
                        (
                            w.name.clone(),
                            w.client_config.ca_bundle.as_ref().map(|b| b.0.clone()),
                        )
                    })
                    .collect()
            }
        }
    };
}
webhook_configuration!(ValidatingWebhookConfiguration);
webhook_configuration!(MutatingWebhookConfiguration);

async fn run_kind<K: WebhookConfiguration>(
    ctx: Arc<Context>,
    cache: &str,
    config: watcher::Config,
    ca: watch::Receiver<String>,
) {
    let api: Api<K> = Api::all(ctx.client.clone());
    // Every configuration is looked at again as soon as what clients must trust changes (a CA
    // rotation announces its new CA this way before the CA signs anything).
    let changes = futures::stream::unfold(ca.clone(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    let controller = kube::runtime::Controller::new(api, config).reconcile_all_on(changes);
    core_k8s::controller::run_controller(
        ctx,
        cache,
        controller,
        move |object: Arc<K>, ctx: Arc<Context>| {
            let ca = ca.borrow().clone();
            let resource_version = object.meta().resource_version.clone();
            async move {
                apply::<K>(
                    &ctx,
                    &object.name_any(),
                    resource_version,
                    &object.bundles(),
                    &ca,
                )
                .await
            }
        },
    )
    .await;
}

async fn apply<K>(
    ctx: &Context,
    name: &str,
    resource_version: Option<String>,
    webhooks: &[(String, Option<Vec<u8>>)],
    ca: &str,
) -> Result<Action, InjectError>
where
    K: WebhookConfiguration,
{
    if !ca.is_empty()
        && let Some(mut patch) = patch_for(webhooks, ca)
    {
        // Fencing: confirmed right before the write, and the write applies only to the
        // configuration as read (its resourceVersion; 409 otherwise, and the next look
        // decides again).
        if !ctx.leadership.confirm().await {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        if let (Some(rv), Some(map)) = (resource_version, patch.as_object_mut()) {
            map.insert(
                "metadata".into(),
                serde_json::json!({"resourceVersion": rv}),
            );
        }
        let api: Api<K> = Api::all(ctx.client.clone());
        match api
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            Err(e) => return Err(InjectError(name.to_string(), e)),
        }
        tracing::info!(configuration = name, kind = %K::kind(&()), "injected the CA bundle");
    }
    // A periodic look as well, should a trigger be missed.
    Ok(Action::requeue(Duration::from_secs(60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_only_stale_webhooks() {
        let ca = "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n";
        let hooks = vec![
            ("a".to_string(), Some(ca.as_bytes().to_vec())),
            ("b".to_string(), None),
            ("c".to_string(), Some(b"old".to_vec())),
        ];
        let patch = patch_for(&hooks, ca).unwrap();
        let names: Vec<&str> = patch["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["b", "c"]);
        assert_eq!(patch_for(&hooks[..1], ca), None);
        assert_eq!(
            selector("strata-system", None),
            "grafana.com/inject-rollout-operator-ca=true,grafana.com/namespace=strata-system"
        );
        assert_eq!(
            selector("strata-system", Some("app.kubernetes.io/instance=b")),
            "grafana.com/inject-rollout-operator-ca=true,grafana.com/namespace=strata-system,app.kubernetes.io/instance=b"
        );
        assert_eq!(selector("ns", Some(" ")), selector("ns", None));
    }
}
