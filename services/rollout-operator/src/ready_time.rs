//! `grafana.com/ready-time`: when each pod in a zone-aware PDB's scope last became ready.
//! `crossZoneEvictionDelay` reads it (a pod must have been ready for the delay before a pod
//! of its partition in another zone may go), so someone must write it: the anchor's pod
//! observer does, and so does the rollout-operator's leader here. Set (RFC 3339, seconds) when
//! a pod is running and ready without it, removed when the pod is not; a present value is
//! never moved, so the original ready time survives restarts.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::keys;
use crate::observed::running_and_ready;
use crate::zpdb;
use core_k8s::Context;

/// What to do with one pod's annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Set(String),
    Remove,
}

/// The change `pod` needs, if any. `in_scope`: some valid ZPDB of its namespace selects it.
pub fn change(pod: &Pod, in_scope: bool, now: Timestamp) -> Option<Change> {
    if !in_scope {
        return None;
    }
    let present = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(keys::READY_TIME));
    match (running_and_ready(pod), present) {
        (true, false) => Some(Change::Set(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())),
        (false, true) => Some(Change::Remove),
        _ => None,
    }
}

/// The valid ZPDBs of the store with their namespaces, parsed once per use.
pub fn budgets(
    zpdbs: &core_k8s::scoped_store::ScopedStore<kube::api::DynamicObject>,
) -> Vec<(Option<String>, zpdb::Zpdb)> {
    zpdbs
        .state()
        .iter()
        .filter_map(|z| {
            let parsed = zpdb::parse(&serde_json::to_value(z.as_ref()).ok()?).ok()?;
            Some((z.namespace(), parsed))
        })
        .collect()
}

/// Whether one of `budgets` in the pod's namespace selects it.
pub fn in_scope(pod: &Pod, budgets: &[(Option<String>, zpdb::Zpdb)]) -> bool {
    let namespace = pod.namespace();
    budgets.iter().any(|(ns, budget)| {
        *ns == namespace && zpdb::matches(&budget.match_labels, &pod.metadata.labels)
    })
}

/// A queued patch: (namespace, pod name, change).
pub type Patchwork = (String, String, Change);

/// Applies queued changes one at a time, each bounded by `timeout`; failures are logged (the
/// next event or resync of the pod queues it again).
pub async fn patcher(ctx: Arc<Context>, mut rx: mpsc::Receiver<Patchwork>, timeout: Duration) {
    while let Some((namespace, name, change)) = rx.recv().await {
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
        let value = match &change {
            Change::Set(at) => json!(at),
            Change::Remove => serde_json::Value::Null,
        };
        let patch =
            Patch::Strategic(json!({"metadata": {"annotations": {keys::READY_TIME: value}}}));
        let params = PatchParams::default();
        let patch = api.patch(&name, &params, &patch);
        match tokio::time::timeout(timeout, patch).await {
            Ok(Ok(_)) => {
                tracing::debug!(pod = %format!("{namespace}/{name}"), ?change, "pod ready-time updated")
            }
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => {}
            Ok(Err(e)) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "failed to patch pod ready annotation")
            }
            Err(_) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), "failed to patch pod ready annotation: timed out")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ready: bool, annotation: Option<&str>) -> Pod {
        let mut annotations = serde_json::Map::new();
        if let Some(at) = annotation {
            annotations.insert(keys::READY_TIME.into(), json!(at));
        }
        serde_json::from_value(json!({
            "metadata": {"name": "ingester-zone-a-0", "namespace": "mimir", "annotations": annotations},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "image": "x", "imageID": "",
                "restartCount": 0, "ready": ready, "state": {"running": {}}}]}
        }))
        .unwrap_or_default()
    }

    #[test]
    fn set_when_ready_removed_when_not_kept_otherwise() {
        let now: Timestamp = "2026-11-23T10:00:00.123Z".parse().unwrap_or_default();
        assert_eq!(
            change(&pod(true, None), true, now),
            Some(Change::Set("2026-11-23T10:00:00Z".into()))
        );
        assert_eq!(
            change(&pod(true, Some("2026-11-01T00:00:00Z")), true, now),
            None,
            "an existing ready time is kept"
        );
        assert_eq!(
            change(&pod(false, Some("2026-11-01T00:00:00Z")), true, now),
            Some(Change::Remove)
        );
        assert_eq!(change(&pod(false, None), true, now), None);
        assert_eq!(
            change(&pod(true, None), false, now),
            None,
            "pods no ZPDB selects are left alone"
        );
    }
}
