//! What one reconcile observes: the StatefulSets, Pods, ZoneAwarePodDisruptionBudgets and
//! reference objects of one namespace. Built from informer stores by the controller, or from a
//! `kubectl get -o yaml` dump by `strata rollout plan`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::keys;

/// The observed state of one namespace.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub stateful_sets: Vec<StatefulSet>,
    pub pods: Vec<Pod>,
    /// ZoneAwarePodDisruptionBudgets as stored (parsed on use, so one bad object only affects
    /// the decisions that need it).
    pub zpdbs: Vec<Value>,
    /// Objects a StatefulSet may mirror replicas from; `spec.replicas` / `status.replicas`
    /// stand for their `scale` subresource.
    pub references: Vec<Value>,
    /// Pods recently allowed to be evicted/deleted (they count as not ready).
    pub recently_evicted: Vec<String>,
    /// Delayed-downscale preparation times (unix seconds) returned by pods, by pod name.
    pub prepared_at: BTreeMap<String, i64>,
    /// Why a pod asked to prepare for a delayed downscale gave no time (timed out, refused,
    /// an answer without a timestamp), by pod name.
    pub prepare_failures: BTreeMap<String, String>,
}

/// An error reading the state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: document index {index}: {reason}")]
pub struct StateError {
    pub source_name: String,
    pub index: usize,
    pub reason: String,
}

impl Observed {
    /// Sorts documents into the state by kind. `docs` are (document index, object).
    pub fn from_documents(source: &str, docs: Vec<(usize, Value)>) -> Result<Self, StateError> {
        let mut observed = Observed::default();
        for (index, doc) in docs {
            let error = |reason: String| StateError {
                source_name: source.to_string(),
                index,
                reason,
            };
            let kind = doc
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let api_version = doc
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            match (api_version.as_str(), kind.as_str()) {
                ("apps/v1", "StatefulSet") => observed.stateful_sets.push(
                    serde_json::from_value(doc).map_err(|e| error(format!("StatefulSet: {e}")))?,
                ),
                ("v1", "Pod") => observed
                    .pods
                    .push(serde_json::from_value(doc).map_err(|e| error(format!("Pod: {e}")))?),
                (v, "ZoneAwarePodDisruptionBudget")
                    if v.starts_with("rollout-operator.grafana.com/") =>
                {
                    observed.zpdbs.push(doc)
                }
                _ => observed.references.push(doc),
            }
        }
        Ok(observed)
    }

    /// The pods of a StatefulSet: selected by its pod template's `name` label, as the anchor does.
    pub fn pods_of<'a>(&'a self, sts: &StatefulSet) -> Vec<&'a Pod> {
        let Some(name) = template_name(sts) else {
            return Vec::new();
        };
        let namespace = sts.metadata.namespace.as_deref();
        self.pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == namespace || namespace.is_none())
            .filter(|p| label(&p.metadata.labels, keys::POD_NAME_LABEL) == Some(name))
            .collect()
    }
}

pub fn label<'a>(labels: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    labels.as_ref().and_then(|l| l.get(key)).map(String::as_str)
}

pub fn annotation<'a>(sts: &'a StatefulSet, key: &str) -> Option<&'a str> {
    label(&sts.metadata.annotations, key)
}

/// The pod template's `name` label.
pub fn template_name(sts: &StatefulSet) -> Option<&str> {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| label(&m.labels, keys::POD_NAME_LABEL))
}

pub fn name(sts: &StatefulSet) -> &str {
    sts.metadata.name.as_deref().unwrap_or_default()
}

/// `namespace/name`.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

pub fn spec_replicas(sts: &StatefulSet) -> i32 {
    sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn status_replicas(sts: &StatefulSet) -> i32 {
    sts.status.as_ref().map_or(0, |s| s.replicas)
}

pub fn ready_replicas(sts: &StatefulSet) -> i32 {
    sts.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// Running and Ready as the anchor judges it: phase Running, not terminating, every container
/// status ready and running (no container statuses passes).
pub fn running_and_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && pod.metadata.deletion_timestamp.is_none()
        && status
            .and_then(|s| s.container_statuses.as_ref())
            .is_none_or(|cs| {
                cs.iter()
                    .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
            })
}

/// Natural order of names: `x-2` before `x-10`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for ((da, xa), (db, xb)) in ca.iter().zip(cb.iter()) {
        let order = if *da && *db {
            let (ta, tb) = (xa.trim_start_matches('0'), xb.trim_start_matches('0'));
            ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb))
        } else {
            xa.cmp(xb)
        };
        if order != std::cmp::Ordering::Equal {
            return order;
        }
    }
    ca.len().cmp(&cb.len()).then_with(|| a.cmp(b))
}
