//! `kube_validating_webhook_failure_policy`: the failure policy of every webhook entry in the
//! configurations labelled `grafana.com/namespace=<namespace>`, exported as the anchor does
//! (two series per entry, 1 on the active policy). The Mimir mixin alerts when an eviction or
//! ZPDB-validation webhook is set to `Ignore`, which silently switches the budget off.
//! Every replica exports it; entries stay after their configuration is deleted, as there.

use std::sync::Arc;

use core_k8s::Context;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::PolicyLabels;

/// The label the anchor's configurations carry, naming the namespace they serve.
pub const NAMESPACE_LABEL: &str = "grafana.com/namespace";

/// `(type, webhook name, policy)` of each entry; no policy means `Fail` (the API default).
pub fn entries<'a>(
    kind: &'static str,
    webhooks: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Vec<(&'static str, String, &'static str)> {
    webhooks
        .into_iter()
        .map(|(name, policy)| {
            let policy = if policy == Some("Ignore") {
                "Ignore"
            } else {
                "Fail"
            };
            (kind, name.to_string(), policy)
        })
        .collect()
}

/// Sets both series of each entry.
pub fn record(
    gauge: &Family<PolicyLabels, Gauge>,
    entries: &[(&'static str, String, &'static str)],
) {
    for (kind, webhook, active) in entries {
        for policy in ["Fail", "Ignore"] {
            gauge
                .get_or_create(&PolicyLabels {
                    r#type: kind,
                    webhook: webhook.clone(),
                    policy,
                })
                .set(i64::from(policy == *active));
        }
    }
}

/// The entries of every configuration of kind `K` the watch delivers.
fn watch_entries<K>(
    ctx: &Context,
    config: watcher::Config,
    kind: &'static str,
    hooks: fn(K) -> Vec<(String, Option<String>)>,
) -> impl futures::Stream<Item = Result<Vec<(&'static str, String, &'static str)>, watcher::Error>>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    watcher(Api::<K>::all(ctx.client.clone()), config)
        .default_backoff()
        .applied_objects()
        .map(move |found| {
            found.map(|c| {
                let hooks = hooks(c);
                entries(kind, hooks.iter().map(|(n, p)| (n.as_str(), p.as_deref())))
            })
        })
}

/// Watches both configuration kinds until shutdown.
pub async fn run(ctx: Arc<Context>, gauge: Family<PolicyLabels, Gauge>) {
    let namespace = ctx.args.lease_namespace();
    let config = watcher::Config::default().labels(&format!("{NAMESPACE_LABEL}={namespace}"));
    let validating = watch_entries::<ValidatingWebhookConfiguration>(
        &ctx,
        config.clone(),
        "ValidatingWebhook",
        |c| {
            c.webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.failure_policy))
                .collect()
        },
    );
    let mutating =
        watch_entries::<MutatingWebhookConfiguration>(&ctx, config, "MutatingWebhook", |c| {
            c.webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.failure_policy))
                .collect()
        });
    let mut both = std::pin::pin!(futures::stream::select(validating, mutating));
    loop {
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return,
            next = both.next() => match next {
                Some(Ok(found)) => record(&gauge, &found),
                Some(Err(e)) => tracing::debug!(error = %e, "webhook configuration watch error"),
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_entry_has_both_series_and_fail_is_the_default() {
        let gauge = Family::<PolicyLabels, Gauge>::default();
        let found = entries(
            "ValidatingWebhook",
            [
                ("pod-eviction-m.grafana.com", Some("Ignore")),
                ("zpdb-validation-m.grafana.com", None),
            ],
        );
        record(&gauge, &found);
        let value = |webhook: &str, policy: &'static str| {
            gauge
                .get_or_create(&PolicyLabels {
                    r#type: "ValidatingWebhook",
                    webhook: webhook.to_string(),
                    policy,
                })
                .get()
        };
        assert_eq!(value("pod-eviction-m.grafana.com", "Ignore"), 1);
        assert_eq!(value("pod-eviction-m.grafana.com", "Fail"), 0);
        assert_eq!(value("zpdb-validation-m.grafana.com", "Fail"), 1);
        assert_eq!(value("zpdb-validation-m.grafana.com", "Ignore"), 0);
        // Switched back to Fail: the series follow.
        record(
            &gauge,
            &entries(
                "ValidatingWebhook",
                [("pod-eviction-m.grafana.com", Some("Fail"))],
            ),
        );
        assert_eq!(value("pod-eviction-m.grafana.com", "Ignore"), 0);
        assert_eq!(value("pod-eviction-m.grafana.com", "Fail"), 1);
    }
}
