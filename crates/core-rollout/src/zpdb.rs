//! ZoneAwarePodDisruptionBudget: parsing and the eviction decision shared by the rollout
//! planner (before it deletes a pod) and the pod-eviction webhook.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use regex::Regex;
use serde_json::Value;

use crate::keys;
use crate::observed::{Observed, label, name, running_and_ready, spec_replicas, status_replicas};

/// A validated ZPDB.
#[derive(Clone, Debug)]
pub struct Zpdb {
    pub name: String,
    pub max_unavailable: Option<i64>,
    pub max_unavailable_percentage: Option<i64>,
    pub match_labels: BTreeMap<String, String>,
    pub partition: Option<(Regex, usize)>,
    pub cross_zone_eviction_delay: Duration,
}

/// Parses a ZPDB object, with the anchor's validation messages.
pub fn parse(object: &Value) -> Result<Zpdb, String> {
    if object.as_object().is_none_or(|m| m.is_empty()) {
        return Err("unexpected end of JSON input".into());
    }
    if object.get("kind").and_then(Value::as_str) != Some("ZoneAwarePodDisruptionBudget") {
        return Err("unexpected object kind - expecting ZoneAwarePodDisruptionBudget".into());
    }
    let spec = object
        .get("spec")
        .filter(|s| s.is_object())
        .ok_or("no spec found in unstructured object")?;
    let int_field = |field: &str| -> Result<Option<i64>, String> {
        match spec.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| format!("failed to extract value from config field {field}")),
        }
    };
    let max_unavailable = int_field("maxUnavailable")?;
    let percentage = int_field("maxUnavailablePercentage")?;
    if max_unavailable.is_some() && percentage.is_some() {
        return Err(
            "invalid value: only one of maxUnavailable or maxUnavailablePercentage may be set"
                .into(),
        );
    }
    if let Some(v) = max_unavailable.filter(|v| *v < 0) {
        return Err(format!(
            "invalid value: max unavailable must be 0 <= val, got {v}"
        ));
    }
    if let Some(v) = percentage.filter(|v| !(0..=100).contains(v)) {
        return Err(format!(
            "invalid value: max unavailable percentage must be 0 <= val <= 100, got {v}"
        ));
    }
    let match_labels: BTreeMap<String, String> = spec
        .pointer("/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .ok_or("invalid value: selector is not found")?;
    let partition = match spec
        .get("podNamePartitionRegex")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
    {
        None => None,
        Some(source) => {
            let regex = Regex::new(&format!("^{source}$"))
                .map_err(|e| format!("invalid value: regex is not valid, got {e}"))?;
            let groups = regex.captures_len() - 1;
            let group = int_field("podNameRegexGroup")?.unwrap_or(1);
            if groups == 0 {
                return Err("invalid value: regex is not valid, got regular expression requires at least one subexpression".into());
            }
            if groups > 1 && spec.get("podNameRegexGroup").is_none() {
                return Err("invalid value: regex is not valid, got regular expression has multiple subexpressions and requires podNameRegexGroup to be set".into());
            }
            if group < 1 || group as usize > groups {
                return Err(
                    "invalid value: regex is not valid, got subexpression index out of range"
                        .into(),
                );
            }
            Some((regex, group as usize))
        }
    };
    if partition.is_some() && percentage.is_some_and(|p| p > 0) {
        return Err(
            "invalid value: max unavailable percentage can not be used with partition awareness"
                .into(),
        );
    }
    let delay = match spec.get("crossZoneEvictionDelay").and_then(Value::as_str) {
        None | Some("") => Duration::ZERO,
        Some(text) => {
            if text.starts_with('-') {
                return Err(format!(
                    "invalid value: crossZoneEvictionDelay must be >= 0, got {text}"
                ));
            }
            core_k8s::args::parse_duration(text).map_err(|_| {
                format!("invalid value: crossZoneEvictionDelay is not a valid duration, got {text}")
            })?
        }
    };
    if delay > Duration::ZERO && partition.is_none() {
        return Err(
            "invalid value: crossZoneEvictionDelay requires podNamePartitionRegex to be set".into(),
        );
    }
    Ok(Zpdb {
        name: object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        max_unavailable: if max_unavailable.is_none() && percentage.is_none() {
            Some(1)
        } else {
            max_unavailable
        },
        max_unavailable_percentage: percentage,
        match_labels,
        partition,
        cross_zone_eviction_delay: delay,
    })
}

/// An empty `matchLabels` selects everything in the namespace, as a Kubernetes label
/// selector built from an empty set does (the anchor's behaviour).
pub fn matches(
    selector: &BTreeMap<String, String>,
    labels: &Option<BTreeMap<String, String>>,
) -> bool {
    selector
        .iter()
        .all(|(k, v)| label(labels, k) == Some(v.as_str()))
}

/// The anchor's budget message: `1 pod not ready`, `2 pods not ready, 1 pod unknown`, then
/// ` in <span>`.
pub fn budget_message(not_ready: i64, unknown: i64, span: &str) -> String {
    let plural = |n: i64| if n > 1 { "s" } else { "" };
    let mut parts = Vec::new();
    if not_ready > 0 {
        parts.push(format!("{not_ready} pod{} not ready", plural(not_ready)));
    }
    if unknown > 0 {
        parts.push(format!("{unknown} pod{} unknown", plural(unknown)));
    }
    format!("{} in {span}", parts.join(", "))
}

/// The generations of the valid budgets seen, to label each change a watch delivers as the
/// anchor's `…_zpdb_configurations_observed_total{result}` does.
#[derive(Debug, Default)]
pub struct Observations(std::collections::HashMap<String, i64>);

impl Observations {
    /// A budget created or changed: `invalid`, `ignored` (generation not newer than the one
    /// already seen) or `updated`.
    pub fn applied(&mut self, key: &str, generation: i64, valid: bool) -> &'static str {
        if !valid {
            return "invalid";
        }
        match self.0.get(key) {
            Some(seen) if *seen >= generation => "ignored",
            _ => {
                self.0.insert(key.to_string(), generation);
                "updated"
            }
        }
    }

    /// A budget deleted: `deleted`, or `delete-ignored` when it was never seen valid or a
    /// newer generation was.
    pub fn deleted(&mut self, key: &str, generation: i64) -> &'static str {
        match self.0.get(key) {
            Some(seen) if *seen <= generation => {
                self.0.remove(key);
                "deleted"
            }
            _ => "delete-ignored",
        }
    }
}

/// A denial: the HTTP-like code the webhook returns, the anchor's message, and the anchor's
/// `reason` label of `…_zpdb_eviction_requests_total`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub code: u16,
    pub message: String,
    pub reason: &'static str,
}

fn deny(code: u16, reason: &'static str, message: impl Into<String>) -> Denial {
    Denial {
        code,
        message: message.into(),
        reason,
    }
}

/// Why an eviction is allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// The pod is not running (finished, pending or terminating).
    NotRunning,
    /// No budget covers the pod.
    NotInScope,
    /// Its budget has room.
    WithinBudget,
}

impl Allowed {
    /// The anchor's `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            Allowed::NotRunning => "pod-not-ready",
            Allowed::NotInScope => "pod-not-in-scope",
            Allowed::WithinBudget => "allowed",
        }
    }
}

/// The valid ZPDBs covering `pod`.
pub fn covering<'a>(pod: &Pod, zpdbs: &'a [Zpdb]) -> Vec<&'a Zpdb> {
    zpdbs
        .iter()
        .filter(|z| matches(&z.match_labels, &pod.metadata.labels))
        .collect()
}

/// A pod that is not running (finished, pending or terminating) never counts against a
/// budget: evicting it disrupts nothing.
pub fn not_running(pod: &Pod) -> bool {
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    matches!(phase, "Succeeded" | "Failed" | "Pending") || pod.metadata.deletion_timestamp.is_some()
}

/// Decides whether `pod` may be evicted (or deleted by the rollout). `override_max` replaces a
/// zero max-unavailable (the rollout passes its own budget). `Ok(())` allows.
pub fn decide(
    pod: &Pod,
    observed: &Observed,
    zpdbs: &[Zpdb],
    override_max: Option<i64>,
    now: Timestamp,
) -> Result<Allowed, Denial> {
    if not_running(pod) {
        return Ok(Allowed::NotRunning);
    }
    let zpdb = match covering(pod, zpdbs).as_slice() {
        [] => return Ok(Allowed::NotInScope),
        [one] => *one,
        _ => {
            return Err(deny(
                400,
                "cfg-not-found",
                "multiple zoned pod disruption budgets found for pod",
            ));
        }
    };
    let owner = pod
        .metadata
        .owner_references
        .as_ref()
        .and_then(|refs| refs.iter().find(|r| r.controller == Some(true)))
        .ok_or_else(|| {
            deny(
                500,
                "sts-no-found",
                "unable to find a StatefulSet pod owner",
            )
        })?;
    if owner.kind != "StatefulSet" {
        return Err(deny(
            500,
            "sts-no-found",
            format!(
                "pod owner is not a StatefulSet - {} has owner {} ({})",
                pod.metadata.name.as_deref().unwrap_or_default(),
                owner.name,
                owner.kind
            ),
        ));
    }
    let owner_sts = observed
        .stateful_sets
        .iter()
        .find(|s| name(s) == owner.name)
        .ok_or_else(|| {
            deny(
                500,
                "sts-no-found",
                format!(
                    "unable to find StatefulSet {0} by name: statefulsets.apps \"{0}\" not found",
                    owner.name
                ),
            )
        })?;

    let mut max_unavailable = match (zpdb.max_unavailable, zpdb.max_unavailable_percentage) {
        (Some(v), _) if v > 0 => v,
        // A percentage of 0 allows no eviction, like maxUnavailable 0 (the anchor's rule).
        (_, Some(pct)) if pct > 0 && spec_replicas(owner_sts) > 0 => {
            let base = i64::from(spec_replicas(owner_sts).min(status_replicas(owner_sts)));
            if base == 0 {
                0
            } else {
                (pct * base / 100).max(1)
            }
        }
        _ => 0,
    };
    if max_unavailable == 0
        && let Some(v) = override_max
    {
        max_unavailable = v;
    }
    if max_unavailable <= 0 {
        return Err(deny(403, "max-unavailable-0", "max unavailable = 0"));
    }
    let zones: Vec<&StatefulSet> = observed
        .stateful_sets
        .iter()
        .filter(|s| matches(&zpdb.match_labels, &s.metadata.labels))
        .collect();
    if zones.len() <= 1 {
        return Err(deny(
            400,
            "min-sts-not-found",
            "minimum number of StatefulSets not found",
        ));
    }
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let partition_of = |n: &str| -> Option<String> {
        zpdb.partition.as_ref().and_then(|(re, g)| {
            re.captures(n)
                .and_then(|c| c.get(*g))
                .map(|m| m.as_str().to_string())
        })
    };
    let partition = match &zpdb.partition {
        None => None,
        Some(_) => Some(partition_of(pod_name).ok_or_else(|| {
            deny(
                400,
                "partition-not-identified",
                "failed to extract partition from pod Name regular expression",
            )
        })?),
    };
    let not_ready = |p: &Pod| -> bool {
        let n = p.metadata.name.as_deref().unwrap_or_default();
        if observed.recently_evicted.iter().any(|e| e == n) || !running_and_ready(p) {
            return true;
        }
        if partition.is_some() && !zpdb.cross_zone_eviction_delay.is_zero() {
            let ready_at = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::READY_TIME))
                .and_then(|t| t.parse::<Timestamp>().ok())
                .unwrap_or(now);
            let delay = jiff::SignedDuration::try_from(zpdb.cross_zone_eviction_delay)
                .unwrap_or(jiff::SignedDuration::MAX);
            return now.duration_since(ready_at) < delay;
        }
        false
    };
    match &partition {
        None => {
            let mut own = None;
            for zone in &zones {
                let pods = observed.pods_of(zone);
                let nr = pods
                    .iter()
                    .filter(|p| p.metadata.name.as_deref() != Some(pod_name) && not_ready(p))
                    .count() as i64;
                let unknown = (i64::from(status_replicas(zone).max(spec_replicas(zone)))
                    - pods.len() as i64)
                    .max(0);
                if name(zone) == owner.name {
                    own = Some((nr, unknown));
                } else if nr + unknown > 0 {
                    return Err(deny(429, "denied", budget_message(nr, unknown, name(zone))));
                }
            }
            let (nr, unknown) = own.unwrap_or((0, 0));
            if nr + unknown >= max_unavailable {
                return Err(deny(
                    429,
                    "denied",
                    budget_message(nr, unknown, &owner.name),
                ));
            }
        }
        Some(part) => {
            let (mut nr, mut unknown) = (0i64, 0i64);
            for zone in zones.iter().filter(|z| name(z) != owner.name) {
                let all = observed.pods_of(zone);
                // Missing pods of the zone may be this partition's: they count as unknown
                // (the anchor charges them to the partition being evicted from).
                let zone_unknown = (i64::from(status_replicas(zone).max(spec_replicas(zone)))
                    - all.len() as i64)
                    .max(0);
                let pods: Vec<&Pod> = all
                    .into_iter()
                    .filter(|p| {
                        partition_of(p.metadata.name.as_deref().unwrap_or_default()).as_deref()
                            == Some(part.as_str())
                    })
                    .collect();
                let zone_not_ready = pods.iter().filter(|p| not_ready(p)).count() as i64;
                // A zone with no pod of this partition at all: that pod is unknown.
                let absent = i64::from(pods.is_empty() && zone_not_ready == 0 && zone_unknown == 0);
                nr += zone_not_ready;
                unknown += zone_unknown + absent;
            }
            if nr + unknown >= max_unavailable {
                return Err(deny(
                    429,
                    "denied",
                    budget_message(nr, unknown, &format!("partition {part}")),
                ));
            }
        }
    }
    Ok(Allowed::WithinBudget)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validation_messages() {
        let z = |spec: Value| json!({"apiVersion": "rollout-operator.grafana.com/v1", "kind": "ZoneAwarePodDisruptionBudget", "metadata": {"name": "z"}, "spec": spec});
        let sel = json!({"matchLabels": {"rollout-group": "ingester"}});
        let cases = [
            (json!({}), "unexpected end of JSON input"),
            (
                json!({"kind": "Pod", "spec": {}}),
                "unexpected object kind - expecting ZoneAwarePodDisruptionBudget",
            ),
            (
                json!({"kind": "ZoneAwarePodDisruptionBudget"}),
                "no spec found in unstructured object",
            ),
            (
                z(json!({"maxUnavailable": 1, "maxUnavailablePercentage": 10, "selector": sel})),
                "invalid value: only one of maxUnavailable or maxUnavailablePercentage may be set",
            ),
            (
                z(json!({"maxUnavailable": -1, "selector": sel})),
                "invalid value: max unavailable must be 0 <= val, got -1",
            ),
            (
                z(json!({"maxUnavailablePercentage": 101, "selector": sel})),
                "invalid value: max unavailable percentage must be 0 <= val <= 100, got 101",
            ),
            (
                z(json!({"maxUnavailable": "1", "selector": sel})),
                "failed to extract value from config field maxUnavailable",
            ),
            (
                z(json!({"maxUnavailable": 1})),
                "invalid value: selector is not found",
            ),
            (
                z(json!({"selector": sel, "podNamePartitionRegex": "ingester-[a-z]-[0-9]+"})),
                "invalid value: regex is not valid, got regular expression requires at least one subexpression",
            ),
            (
                z(json!({"selector": sel, "podNamePartitionRegex": "(a)-(b)"})),
                "invalid value: regex is not valid, got regular expression has multiple subexpressions and requires podNameRegexGroup to be set",
            ),
            (
                z(json!({"selector": sel, "crossZoneEvictionDelay": "1m"})),
                "invalid value: crossZoneEvictionDelay requires podNamePartitionRegex to be set",
            ),
            (
                z(json!({"selector": sel, "crossZoneEvictionDelay": "soon"})),
                "invalid value: crossZoneEvictionDelay is not a valid duration, got soon",
            ),
            (
                z(
                    json!({"selector": sel, "maxUnavailablePercentage": 10, "podNamePartitionRegex": "x-(\\d+)"}),
                ),
                "invalid value: max unavailable percentage can not be used with partition awareness",
            ),
        ];
        for (object, want) in cases {
            assert_eq!(parse(&object).unwrap_err(), want, "{object}");
        }
        let ok = parse(&z(json!({"selector": sel}))).unwrap();
        assert_eq!(ok.max_unavailable, Some(1), "default max unavailable is 1");
    }

    #[test]
    fn observed_changes_are_labelled_as_the_anchor_labels_them() {
        let mut seen = Observations::default();
        assert_eq!(seen.applied("m/z", 1, true), "updated");
        assert_eq!(seen.applied("m/z", 1, true), "ignored"); // a resync
        assert_eq!(seen.applied("m/z", 2, false), "invalid");
        assert_eq!(seen.applied("m/z", 2, true), "updated");
        assert_eq!(seen.deleted("m/z", 1), "delete-ignored"); // older than what was seen
        assert_eq!(seen.deleted("m/z", 2), "deleted");
        assert_eq!(seen.deleted("m/z", 2), "delete-ignored"); // gone already
        assert_eq!(seen.applied("m/bad", 1, false), "invalid");
        assert_eq!(seen.deleted("m/bad", 1), "delete-ignored"); // never valid
    }
}
