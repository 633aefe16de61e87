//! ZoneAwarePodDisruptionBudget: parsing and the eviction decision shared by the rollout
//! planner (before it deletes a pod) and the pod-eviction webhook.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use regex::Regex;
use serde_json::Value;

use crate::observed::{Observed, label, name, running_and_ready, spec_replicas, status_replicas};
use crate::{go_text, keys};

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

/// What can be wrong with a ZPDB. The texts are a compatibility contract (docs/
/// rollout-operator.md lists them): scripts and alerts written for Grafana's operator match
/// them. Variants are declared in the order they are reported in: a budget with several
/// problems is refused with the first (the Grafana operator reports only the first it meets,
/// in this order); [`problems`] gives all of them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// The object is empty (nothing was decoded).
    Empty,
    /// No `kind`; carries the object's JSON text.
    NoKind(String),
    NoSpec,
    /// `spec` is not a map; carries the accessor error.
    SpecNotAMap(String),
    WrongKind,
    BothMaxima,
    MaxNotAnInteger,
    NegativeMax(i64),
    PercentageNotAnInteger,
    PercentageOutOfRange(i64),
    /// The partition regex or its group; carries why.
    Partition(String),
    NoSelector,
    /// `selector.matchLabels` is malformed; carries the accessor error.
    Selector(String),
    DelayNotAString,
    DelayNotADuration(String),
    NegativeDelay(String),
    DelayWithoutPartition,
    PercentageWithPartition,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let field = |name: &str| format!("failed to extract value from config field {name}");
        let text = match self {
            Problem::Empty => "unexpected end of JSON input".to_string(),
            Problem::NoKind(object) => format!("Object 'Kind' is missing in '{object}'"),
            Problem::NoSpec => "no spec found in unstructured object".to_string(),
            Problem::SpecNotAMap(e) => e.clone(),
            Problem::WrongKind => {
                "unexpected object kind - expecting ZoneAwarePodDisruptionBudget".to_string()
            }
            Problem::BothMaxima => {
                "invalid value: only one of maxUnavailable or maxUnavailablePercentage may be set"
                    .to_string()
            }
            Problem::MaxNotAnInteger => field("maxUnavailable"),
            Problem::NegativeMax(v) => {
                format!("invalid value: max unavailable must be 0 <= val, got {v}")
            }
            Problem::PercentageNotAnInteger => field("maxUnavailablePercentage"),
            Problem::PercentageOutOfRange(v) => format!(
                "invalid value: max unavailable percentage must be 0 <= val <= 100, got {v}"
            ),
            Problem::Partition(e) => format!("invalid value: regex is not valid, got {e}"),
            Problem::NoSelector => "invalid value: selector is not found".to_string(),
            Problem::Selector(e) => format!("invalid value: selector is not valid, got {e}"),
            Problem::DelayNotAString => field("crossZoneEvictionDelay"),
            Problem::DelayNotADuration(e) => {
                format!("invalid value: crossZoneEvictionDelay is not a valid duration, got {e}")
            }
            Problem::NegativeDelay(text) => {
                format!("invalid value: crossZoneEvictionDelay must be >= 0, got {text}")
            }
            Problem::DelayWithoutPartition => {
                "invalid value: crossZoneEvictionDelay requires podNamePartitionRegex to be set"
                    .to_string()
            }
            Problem::PercentageWithPartition => {
                "invalid value: max unavailable percentage can not be used with partition awareness"
                    .to_string()
            }
        };
        f.write_str(&text)
    }
}

/// Parses a ZPDB object; refused with the first of its [`problems`] (see [`Problem`]).
pub fn parse(object: &Value) -> Result<Zpdb, String> {
    read(object).map_err(|problems| {
        problems
            .into_iter()
            .min()
            .map(|p| p.to_string())
            .unwrap_or_default()
    })
}

/// Every problem of a ZPDB object, in the order they are reported (empty when it is valid).
pub fn problems(object: &Value) -> Vec<Problem> {
    let mut all = read(object).err().unwrap_or_default();
    all.sort();
    all
}

/// Reads a ZPDB: the envelope first (kind and spec: without them no field can be read), then
/// every field on its own, then the rules between fields; all the problems found, or the
/// budget.
fn read(object: &Value) -> Result<Zpdb, Vec<Problem>> {
    let Some(fields) = object.as_object().filter(|m| !m.is_empty()) else {
        return Err(vec![Problem::Empty]);
    };
    let kind = fields
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind.is_empty() {
        return Err(vec![Problem::NoKind(object.to_string())]);
    }
    let spec = match fields.get("spec") {
        None => return Err(vec![Problem::NoSpec]),
        Some(Value::Object(spec)) => spec,
        Some(other) => {
            return Err(vec![Problem::SpecNotAMap(go_text::not_a_map(
                ".spec", other,
            ))]);
        }
    };
    let mut problems = Vec::new();
    if kind != "ZoneAwarePodDisruptionBudget" {
        problems.push(Problem::WrongKind);
    }
    let both = spec.contains_key("maxUnavailable") && spec.contains_key("maxUnavailablePercentage");
    if both {
        problems.push(Problem::BothMaxima);
    }
    let max_unavailable = ok_or_note(&mut problems, maximum(spec)).flatten();
    let percentage = ok_or_note(&mut problems, percentage(spec)).flatten();
    let partition = ok_or_note(
        &mut problems,
        partition_regex(spec).map_err(Problem::Partition),
    );
    let match_labels = ok_or_note(&mut problems, match_labels(spec));
    let delay = ok_or_note(&mut problems, cross_zone_eviction_delay(spec));
    // Rules between fields, judged on fields that were read.
    if let (Some(delay), Some(partition)) = (delay, &partition)
        && delay > Duration::ZERO
        && partition.is_none()
    {
        problems.push(Problem::DelayWithoutPartition);
    }
    if partition.as_ref().is_some_and(Option::is_some) && percentage.is_some_and(|p| p > 0) {
        problems.push(Problem::PercentageWithPartition);
    }
    match (problems.is_empty(), partition, match_labels, delay) {
        (true, Some(partition), Some(match_labels), Some(delay)) => Ok(Zpdb {
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            // Neither set: one pod at a time.
            max_unavailable: if max_unavailable.is_none() && percentage.is_none() {
                Some(1)
            } else {
                max_unavailable
            },
            max_unavailable_percentage: percentage,
            match_labels,
            partition,
            cross_zone_eviction_delay: delay,
        }),
        _ => Err(problems),
    }
}

/// The value, or `None` with its problem noted.
fn ok_or_note<T>(problems: &mut Vec<Problem>, read: Result<T, Problem>) -> Option<T> {
    read.map_err(|p| problems.push(p)).ok()
}

/// `maxUnavailable`: absent, or an integer of at least 0.
fn maximum(spec: &serde_json::Map<String, Value>) -> Result<Option<i64>, Problem> {
    match spec.get("maxUnavailable").map(Value::as_i64) {
        None => Ok(None),
        Some(None) => Err(Problem::MaxNotAnInteger),
        Some(Some(v)) if v < 0 => Err(Problem::NegativeMax(v)),
        Some(Some(v)) => Ok(Some(v)),
    }
}

/// `maxUnavailablePercentage`: absent, or an integer from 0 to 100.
fn percentage(spec: &serde_json::Map<String, Value>) -> Result<Option<i64>, Problem> {
    match spec.get("maxUnavailablePercentage").map(Value::as_i64) {
        None => Ok(None),
        Some(None) => Err(Problem::PercentageNotAnInteger),
        Some(Some(v)) if !(0..=100).contains(&v) => Err(Problem::PercentageOutOfRange(v)),
        Some(Some(v)) => Ok(Some(v)),
    }
}

/// `crossZoneEvictionDelay`: absent or empty is none; read as Go reads durations.
fn cross_zone_eviction_delay(spec: &serde_json::Map<String, Value>) -> Result<Duration, Problem> {
    let Some(value) = spec.get("crossZoneEvictionDelay") else {
        return Ok(Duration::ZERO);
    };
    let text = value.as_str().ok_or(Problem::DelayNotAString)?;
    if text.is_empty() {
        return Ok(Duration::ZERO);
    }
    match go_text::parse_duration(text) {
        Err(e) => Err(Problem::DelayNotADuration(e)),
        Ok((true, d)) if !d.is_zero() => Err(Problem::NegativeDelay(text.to_string())),
        Ok((_, d)) => Ok(d),
    }
}

/// `podNamePartitionRegex` (anchored at both ends) and the capture group that names a pod's
/// partition (`podNameRegexGroup`, default 1; 0 is the whole name, as in the anchor).
fn partition_regex(
    spec: &serde_json::Map<String, Value>,
) -> Result<Option<(Regex, usize)>, String> {
    let source = match spec.get("podNamePartitionRegex") {
        None => return Ok(None),
        Some(v) => v
            .as_str()
            .ok_or("failed to extract regex value from config field podNamePartitionRegex")?,
    };
    if source.is_empty() {
        return Ok(None);
    }
    let group = match spec.get("podNameRegexGroup") {
        None => None,
        Some(v) => Some(
            v.as_i64()
                .ok_or("failed to extract group value from config field podNameRegexGroup")?,
        ),
    };
    let regex = Regex::new(&format!("^{source}$")).map_err(|e| e.to_string())?;
    let groups = regex.captures_len() as i64 - 1;
    if groups == 0 {
        return Err("regular expression requires at least one subexpression".into());
    }
    if groups > 1 && group.is_none() {
        return Err(
            "regular expression has multiple subexpressions and requires podNameRegexGroup to be set"
                .into(),
        );
    }
    let group = group.unwrap_or(1);
    // FIX (a Grafana operator bug): a negative group passes its check and panics on the first
    // pod; refused here with the out-of-range message.
    if group > groups || group < 0 {
        return Err("regular expression subexpression index out of range".into());
    }
    Ok(Some((regex, group as usize)))
}

/// `spec.selector.matchLabels`, every value a string, with Kubernetes' accessor errors.
fn match_labels(
    spec: &serde_json::Map<String, Value>,
) -> Result<BTreeMap<String, String>, Problem> {
    const PATH: &str = ".spec.selector.matchLabels";
    let labels = match spec.get("selector") {
        None | Some(Value::Null) => None,
        Some(Value::Object(selector)) => selector.get("matchLabels"),
        Some(other) => return Err(Problem::Selector(go_text::not_a_map(PATH, other))),
    };
    let labels = labels.ok_or(Problem::NoSelector)?;
    let labels = labels
        .as_object()
        .ok_or_else(|| Problem::Selector(go_text::not_a_map(PATH, labels)))?;
    labels
        .iter()
        .map(|(k, v)| match v {
            Value::String(text) => Ok((k.clone(), text.clone())),
            other => Err(Problem::Selector(format!(
                "{PATH} accessor error: contains non-string value in the map under key {k:?}: {} is of the type {}, expected string",
                go_text::value(other),
                go_text::type_name(other)
            ))),
        })
        .collect()
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
                r#"invalid value: crossZoneEvictionDelay is not a valid duration, got time: invalid duration "soon""#,
            ),
            (
                z(json!({"selector": sel, "crossZoneEvictionDelay": "10"})),
                r#"invalid value: crossZoneEvictionDelay is not a valid duration, got time: missing unit in duration "10""#,
            ),
            (
                z(json!({"selector": sel, "crossZoneEvictionDelay": "-1m"})),
                "invalid value: crossZoneEvictionDelay must be >= 0, got -1m",
            ),
            (
                z(json!({"selector": sel, "crossZoneEvictionDelay": 60})),
                "failed to extract value from config field crossZoneEvictionDelay",
            ),
            (
                z(
                    json!({"selector": sel, "podNamePartitionRegex": "x-(\\d+)", "podNameRegexGroup": 2}),
                ),
                "invalid value: regex is not valid, got regular expression subexpression index out of range",
            ),
            (
                z(
                    json!({"selector": sel, "podNamePartitionRegex": "x-(\\d+)", "podNameRegexGroup": -1}),
                ),
                "invalid value: regex is not valid, got regular expression subexpression index out of range",
            ),
            (
                z(
                    json!({"selector": sel, "podNamePartitionRegex": "x-(\\d+)", "podNameRegexGroup": "1"}),
                ),
                "invalid value: regex is not valid, got failed to extract group value from config field podNameRegexGroup",
            ),
            (
                z(json!({"selector": sel, "podNamePartitionRegex": 7})),
                "invalid value: regex is not valid, got failed to extract regex value from config field podNamePartitionRegex",
            ),
            (
                z(json!({"selector": {"matchLabels": {"name": 1}}})),
                r#"invalid value: selector is not valid, got .spec.selector.matchLabels accessor error: contains non-string value in the map under key "name": 1 is of the type int64, expected string"#,
            ),
            (
                z(json!({"selector": {"matchLabels": "name=x"}})),
                "invalid value: selector is not valid, got .spec.selector.matchLabels accessor error: name=x is of the type string, expected map[string]interface{}",
            ),
            (
                z(json!({"selector": sel, "maxUnavailable": "x", "maxUnavailablePercentage": 5})),
                "invalid value: only one of maxUnavailable or maxUnavailablePercentage may be set",
            ),
            (
                json!({"apiVersion": "rollout-operator.grafana.com/v1", "kind": "ZoneAwarePodDisruptionBudget", "spec": 5}),
                ".spec accessor error: 5 is of the type int64, expected map[string]interface{}",
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
        // Group 0 is the whole name, as the anchor allows.
        let whole = parse(&z(
            json!({"selector": sel, "podNamePartitionRegex": "x-(\\d+)", "podNameRegexGroup": 0}),
        ))
        .unwrap();
        assert_eq!(whole.partition.map(|(_, g)| g), Some(0));
    }

    /// Every problem of a budget, in the order they are reported; the refusal names the first.
    #[test]
    fn all_problems_are_found_and_the_first_is_reported() {
        let object = json!({"kind": "ZoneAwarePodDisruptionBudget", "spec": {
            "crossZoneEvictionDelay": "soon", "maxUnavailable": -2,
            "podNamePartitionRegex": "(a)-(b)"}});
        let found = problems(&object);
        assert_eq!(
            found,
            vec![
                Problem::NegativeMax(-2),
                Problem::Partition(
                    "regular expression has multiple subexpressions and requires podNameRegexGroup to be set".into()
                ),
                Problem::NoSelector,
                Problem::DelayNotADuration(r#"time: invalid duration "soon""#.into()),
            ]
        );
        assert_eq!(
            parse(&object).unwrap_err(),
            "invalid value: max unavailable must be 0 <= val, got -2"
        );
        // A rule between two fields is judged only when both were read.
        let delay_only = json!({"kind": "ZoneAwarePodDisruptionBudget", "spec": {
            "selector": {"matchLabels": {"a": "b"}}, "crossZoneEvictionDelay": "1m",
            "podNamePartitionRegex": 7}});
        assert_eq!(
            problems(&delay_only),
            vec![Problem::Partition(
                "failed to extract regex value from config field podNamePartitionRegex".into()
            )]
        );
        assert!(
            problems(&json!({"kind": "ZoneAwarePodDisruptionBudget", "spec": {
            "selector": {"matchLabels": {}}}}))
            .is_empty()
        );
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
