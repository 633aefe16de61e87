//! Evictions serialized through the API. Two drains in different zones, or a drain racing
//! the rollout's own deletion, must never both pass a zone-aware budget that allows one. The
//! anchor serialises with an in-process lock and a 2-minute in-memory cache, which only holds
//! within one process; here every allowed eviction (webhook or rollout deletion, any replica,
//! any process) is recorded on the budget's *holder* — the first StatefulSet (by name) the
//! ZoneAwarePodDisruptionBudget selects — with a resourceVersion precondition. The decision
//! is made against the record as read; a concurrent writer makes the write fail with 409 and
//! the loser decides again with the winner's eviction counted. Needs only `patch` on
//! statefulsets, which the anchor's Role grants.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::observed::name;
use crate::zpdb::{self, Allowed, Denial, Zpdb};

/// Annotation on the holder StatefulSet: `{"<zpdb>": {"<pod>": "<RFC 3339>"}}`.
pub const RECORD: &str = "strata.dev/recent-evictions";

/// How long an allowed eviction counts against the budget when the pod has not been
/// replaced yet (the anchor's cache expiry).
pub const TTL: Duration = Duration::from_secs(120);

/// The StatefulSet holding `zpdb`'s record: the first by name it selects.
pub fn holder<'a>(zpdb: &Zpdb, stateful_sets: &'a [StatefulSet]) -> Option<&'a StatefulSet> {
    stateful_sets
        .iter()
        .filter(|s| zpdb::matches(&zpdb.match_labels, &s.metadata.labels))
        .min_by(|a, b| name(a).cmp(name(b)))
}

/// Every budget's entries recorded on `holder`, as written (expired ones included).
fn record_of(holder: &StatefulSet) -> serde_json::Map<String, Value> {
    holder
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RECORD))
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default()
}

/// The unexpired evictions recorded for `zpdb` on `holder`.
pub fn recorded(holder: &StatefulSet, zpdb: &str, now: Timestamp) -> BTreeMap<String, Timestamp> {
    let all = record_of(holder);
    let ttl = jiff::SignedDuration::try_from(TTL).unwrap_or(jiff::SignedDuration::ZERO);
    all.get(zpdb)
        .and_then(Value::as_object)
        .map(|pods| {
            pods.iter()
                .filter_map(|(pod, at)| {
                    Some((pod.clone(), at.as_str()?.parse::<Timestamp>().ok()?))
                })
                .filter(|(_, at)| now.duration_since(*at) < ttl)
                .collect()
        })
        .unwrap_or_default()
}

/// Pods recorded as evicted that still stand for the evicted pod: a pod created after its
/// record is the replacement and is judged by its own readiness.
pub fn still_evicted(record: &BTreeMap<String, Timestamp>, pods: &[Pod]) -> Vec<String> {
    record
        .iter()
        .filter(|(pod, at)| {
            pods.iter()
                .find(|p| p.metadata.name.as_deref() == Some(pod.as_str()))
                .is_none_or(|p| {
                    // Creation times have whole seconds: a pod created in the second of the
                    // record or later is the replacement. (Should that be the evicted pod
                    // itself, it carries a deletionTimestamp and counts as not ready anyway.)
                    p.metadata
                        .creation_timestamp
                        .as_ref()
                        .is_none_or(|created| created.0.as_second() < at.as_second())
                })
        })
        .map(|(pod, _)| pod.clone())
        .collect()
}

/// The merge patch writing `all` as `holder`'s record, guarded by its resourceVersion.
fn guarded_record_patch(holder: &StatefulSet, all: serde_json::Map<String, Value>) -> Value {
    json!({"metadata": {
        "resourceVersion": holder.metadata.resource_version,
        "annotations": {RECORD: Value::Object(all).to_string()},
    }})
}

/// The merge patch recording `pod` for `zpdb` on `holder`: guarded by the holder's
/// resourceVersion, expired entries dropped.
pub fn record_patch(holder: &StatefulSet, zpdb: &str, pod: &str, now: Timestamp) -> Value {
    let mut all = record_of(holder);
    let mut entries: serde_json::Map<String, Value> = recorded(holder, zpdb, now)
        .into_iter()
        .map(|(p, at)| (p, json!(at.to_string())))
        .collect();
    entries.insert(pod.to_string(), json!(now.to_string()));
    all.insert(zpdb.to_string(), Value::Object(entries));
    guarded_record_patch(holder, all)
}

/// What a successful claim (`admission_server::evictions::claim`) decided, and the record it wrote, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub allowed: Allowed,
    /// The entry written on the budget's holder; `None` when the pod needed no record.
    pub record: Option<Recorded>,
}

/// One eviction entry a claim wrote: pod `pod` under budget `zpdb` on StatefulSet
/// `holder`, at `at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub holder: String,
    pub zpdb: String,
    pub pod: String,
    pub at: Timestamp,
}

/// The merge patch taking `record` back off `holder` (guarded by its resourceVersion), or
/// `None` when the entry is no longer there as written: expired, or written again since by
/// another eviction of the same pod, which is not ours to take back.
pub fn release_patch(holder: &StatefulSet, record: &Recorded) -> Option<Value> {
    let mut all = record_of(holder);
    let entries = all.get_mut(&record.zpdb)?.as_object_mut()?;
    if entries.get(&record.pod)?.as_str() != Some(record.at.to_string().as_str()) {
        return None;
    }
    entries.remove(&record.pod);
    if entries.is_empty() {
        all.remove(&record.zpdb);
    }
    Some(guarded_record_patch(holder, all))
}

/// Why a claim was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The budget says no (code and message for the eviction response).
    Denied(Denial),
    /// The record could not be read or written.
    Unavailable(String),
}

impl Refusal {
    /// The answer to give: a budget denial as it is; an unavailable record as the anchor
    /// answers a pod status it could not determine (500).
    pub fn into_denial(self) -> Denial {
        match self {
            Refusal::Denied(denial) => denial,
            Refusal::Unavailable(message) => Denial {
                code: 500,
                message,
                reason: "err: sts-pod-status-not-determined",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sts(name: &str, record: Option<Value>) -> StatefulSet {
        let mut annotations = serde_json::Map::new();
        if let Some(r) = record {
            annotations.insert(RECORD.into(), json!(r.to_string()));
        }
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "mimir",
            "resourceVersion": "42", "labels": {"rollout-group": "ingester"}, "annotations": annotations}}))
        .unwrap_or_default()
    }

    fn budget() -> Zpdb {
        zpdb::parse(&json!({"kind": "ZoneAwarePodDisruptionBudget", "metadata": {"name": "ingester"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"rollout-group": "ingester"}}}}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The record a patch writes.
    fn written_by(patch: &Value) -> Value {
        serde_json::from_str(
            patch["metadata"]["annotations"][RECORD]
                .as_str()
                .unwrap_or_default(),
        )
        .unwrap_or_default()
    }

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap_or_default()
    }

    #[test]
    fn the_holder_is_the_first_selected_statefulset() {
        let set = [
            sts("ingester-zone-b", None),
            sts("ingester-zone-a", None),
            {
                let mut other = sts("aaa-other", None);
                other.metadata.labels = None;
                other
            },
        ];
        assert_eq!(holder(&budget(), &set).map(name), Some("ingester-zone-a"));
    }

    #[test]
    fn records_expire_and_replacements_count_as_new_pods() {
        let now = at("2026-11-23T10:02:00Z");
        let holder = sts(
            "ingester-zone-a",
            Some(json!({"ingester": {
                "ingester-zone-a-0": "2026-11-23T10:01:00.600Z",
                "ingester-zone-b-0": "2026-11-23T09:59:00Z",
                "ingester-zone-c-0": "2026-11-23T10:01:30Z"
            }, "other": {"x-0": "2026-11-23T10:01:00Z"}})),
        );
        let record = recorded(&holder, "ingester", now);
        assert_eq!(
            record.keys().collect::<Vec<_>>(),
            vec!["ingester-zone-a-0", "ingester-zone-c-0"],
            "b-0 is older than the TTL; other budgets are separate"
        );
        let pod = |n: &str, created: &str| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": n, "creationTimestamp": created}}))
                .unwrap_or_default()
        };
        let pods = [
            pod("ingester-zone-a-0", "2026-11-23T10:01:00Z"), // recreated in the same second
            pod("ingester-zone-c-0", "2026-11-23T10:01:29Z"), // still the evicted pod
        ];
        assert_eq!(still_evicted(&record, &pods), vec!["ingester-zone-c-0"]);
    }

    #[test]
    fn the_patch_is_guarded_and_keeps_other_entries() {
        let now = at("2026-11-23T10:02:00Z");
        let holder = sts(
            "ingester-zone-a",
            Some(
                json!({"ingester": {"old-0": "2026-11-23T09:00:00Z", "a-1": "2026-11-23T10:01:00Z"},
                "other": {"x-0": "2026-11-23T10:01:00Z"}}),
            ),
        );
        let patch = record_patch(&holder, "ingester", "b-0", now);
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let written: Value = written_by(&patch);
        assert_eq!(
            written,
            json!({"ingester": {"a-1": "2026-11-23T10:01:00Z", "b-0": "2026-11-23T10:02:00Z"},
                "other": {"x-0": "2026-11-23T10:01:00Z"}})
        );
    }

    #[test]
    fn a_claim_not_acted_on_is_taken_back_and_nothing_else() {
        let now = at("2026-11-23T10:02:00Z");
        let holder = sts(
            "ingester-zone-a",
            Some(json!({"ingester": {"a-1": "2026-11-23T10:01:00Z"},
                "other": {"x-0": "2026-11-23T10:01:00Z"}})),
        );
        let written: Value = written_by(&record_patch(&holder, "ingester", "b-0", now));
        let claimed = sts("ingester-zone-a", Some(written));
        let record = |pod: &str, zpdb: &str, at: Timestamp| Recorded {
            holder: "ingester-zone-a".into(),
            zpdb: zpdb.into(),
            pod: pod.into(),
            at,
        };
        let patch = release_patch(&claimed, &record("b-0", "ingester", now))
            .unwrap_or_else(|| panic!("b-0 is recorded as claimed"));
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let left: Value = written_by(&patch);
        assert_eq!(
            left,
            json!({"ingester": {"a-1": "2026-11-23T10:01:00Z"},
                "other": {"x-0": "2026-11-23T10:01:00Z"}}),
            "only the claim is taken back"
        );
        // Written again since (another eviction of the same pod), or never there: not ours.
        let later = at("2026-11-23T10:02:05Z");
        assert_eq!(
            release_patch(&claimed, &record("b-0", "ingester", later)),
            None
        );
        assert_eq!(
            release_patch(&claimed, &record("c-0", "ingester", now)),
            None
        );
        assert_eq!(
            release_patch(&claimed, &record("b-0", "missing", now)),
            None
        );
        // The last entry of a budget takes the budget's key with it.
        let only = sts(
            "ingester-zone-a",
            Some(json!({"ingester": {"b-0": now.to_string()}})),
        );
        let patch = release_patch(&only, &record("b-0", "ingester", now))
            .unwrap_or_else(|| panic!("b-0 is recorded"));
        assert_eq!(patch["metadata"]["annotations"][RECORD], "{}");
    }
}
