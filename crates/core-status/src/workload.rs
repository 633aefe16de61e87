//! Fail fast on workloads whose pods cannot start.
//!
//! kstatus calls a Deployment whose pods sit in `ImagePullBackOff` InProgress until
//! `progressDeadlineSeconds` (ten minutes by default) expires, so every waiter built on it
//! waits that long for an answer that was known in seconds. Under [`crate::policy::Policy`]'s
//! `workload_failures` switch a Deployment, StatefulSet, DaemonSet, ReplicaSet or Job that is
//! still InProgress is Failed once one of its current-revision pods has been unable to start
//! for longer than a grace period. The judgement needs the workload's pods: callers find them
//! with one list or watch per workload ([`selector_query`]) and pass them in.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use crate::compute::Evaluation;
use crate::object::{api_group, int_or, lookup, str_or};

/// How long a pod may be unable to start before its workload is Failed.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// Container waiting reasons that do not heal by waiting.
pub(crate) const CANNOT_START: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Restarts after which a crash loop is judged hopeless.
const CRASH_LOOP_RESTARTS: i64 = 3;

/// The workload kinds this rule judges.
pub fn is_workload(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_group(api_version), kind),
        (
            "apps",
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet"
        ) | ("batch", "Job")
    )
}

/// The workload's pod selector as a `labelSelector` query (`a=b,c in (d,e),!f`), or `None`
/// when it has no usable selector (the API server would have refused it).
pub fn selector_query(workload: &Value) -> Option<String> {
    let selector = lookup(workload, &["spec", "selector"])?;
    let mut terms = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in labels {
            terms.push(format!("{key}={}", value.as_str()?));
        }
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression.get("key")?.as_str()?;
        let values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        terms.push(match expression.get("operator")?.as_str()? {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        });
    }
    (!terms.is_empty()).then(|| terms.join(","))
}

/// Whether the pod's labels satisfy the workload's selector (the same rules as
/// [`selector_query`], for pods given offline).
fn selector_matches(workload: &Value, pod: &Value) -> bool {
    let Some(selector) = lookup(workload, &["spec", "selector"]) else {
        return false;
    };
    let labels = lookup(pod, &["metadata", "labels"]).and_then(Value::as_object);
    let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
    let match_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(key, value)| label(key) == value.as_str());
    let match_expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = str_or(e, &["key"], "");
            let in_values = |v: &str| {
                e.get("values")
                    .and_then(Value::as_array)
                    .is_some_and(|vs| vs.iter().any(|x| x.as_str() == Some(v)))
            };
            match str_or(e, &["operator"], "") {
                "In" => label(key).is_some_and(in_values),
                "NotIn" => !label(key).is_some_and(in_values),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                _ => false,
            }
        });
    match_labels && match_expressions
}

fn owner(pod: &Value) -> Option<(&str, &str)> {
    lookup(pod, &["metadata", "ownerReferences"])?
        .as_array()?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|o| (str_or(o, &["kind"], ""), str_or(o, &["name"], "")))
}

fn label<'a>(pod: &'a Value, key: &str) -> &'a str {
    lookup(pod, &["metadata", "labels", key])
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The ReplicaSet a Deployment's `Progressing` condition names as its new one
/// (`ReplicaSet "web-6d9c" is progressing.`), which is how the Deployment controller reports it.
fn new_replica_set(deployment: &Value) -> Option<&str> {
    let progressing = lookup(deployment, &["status", "conditions"])?
        .as_array()?
        .iter()
        .find(|c| str_or(c, &["type"], "") == "Progressing")?;
    let message = str_or(progressing, &["message"], "");
    let rest = message.strip_prefix("ReplicaSet \"")?;
    rest.split('"').next().filter(|n| !n.is_empty())
}

/// Among `pods`, those the workload owns (controller owner reference and selector) and that
/// run its current revision: a Deployment's new ReplicaSet, a StatefulSet's `updateRevision`,
/// a DaemonSet's newest revision; every pod of a ReplicaSet or Job.
pub fn current_pods<'a>(workload: &Value, pods: &'a [Value]) -> Vec<&'a Value> {
    let kind = str_or(workload, &["kind"], "");
    let name = str_or(workload, &["metadata", "name"], "");
    let namespace = str_or(workload, &["metadata", "namespace"], "");
    let owned: Vec<&Value> = pods
        .iter()
        .filter(|pod| {
            let pod_namespace = str_or(pod, &["metadata", "namespace"], "");
            if !namespace.is_empty() && !pod_namespace.is_empty() && pod_namespace != namespace {
                return false;
            }
            let Some((owner_kind, owner_name)) = owner(pod) else {
                return false;
            };
            let owned = match kind {
                // The Deployment's ReplicaSets are named after it and the template hash.
                "Deployment" => {
                    owner_kind == "ReplicaSet"
                        && owner_name == format!("{name}-{}", label(pod, "pod-template-hash"))
                }
                _ => owner_kind == kind && owner_name == name,
            };
            owned && selector_matches(workload, pod)
        })
        .collect();
    let newest_revision = |revision_of: &dyn Fn(&Value) -> String| -> Option<String> {
        owned
            .iter()
            .max_by_key(|p| str_or(p, &["metadata", "creationTimestamp"], "").to_string())
            .map(|p| revision_of(p))
    };
    match kind {
        "Deployment" => {
            let current = new_replica_set(workload).map(str::to_string).or_else(|| {
                newest_revision(&|p| owner(p).map(|(_, n)| n.to_string()).unwrap_or_default())
            });
            owned
                .into_iter()
                .filter(|p| owner(p).map(|(_, n)| n.to_string()) == current)
                .collect()
        }
        "StatefulSet" | "DaemonSet" => {
            let current = Some(str_or(workload, &["status", "updateRevision"], ""))
                .filter(|r| !r.is_empty() && kind == "StatefulSet")
                .map(str::to_string)
                .or_else(|| newest_revision(&|p| label(p, "controller-revision-hash").into()));
            owned
                .into_iter()
                .filter(|p| Some(label(p, "controller-revision-hash").to_string()) == current)
                .collect()
        }
        _ => owned,
    }
}

/// Pods grouped by the workload that controls them, so judging many workloads against many
/// pods (offline input, a whole namespace) costs one lookup per workload rather than a scan.
#[derive(Debug, Default)]
pub struct PodIndex {
    by_owner: std::collections::HashMap<(String, String, String), Vec<Value>>,
}

impl PodIndex {
    pub fn new<'a>(pods: impl IntoIterator<Item = &'a Value>) -> Self {
        let mut index = Self::default();
        for pod in pods {
            let Some((kind, name)) = owner(pod) else {
                continue;
            };
            let namespace = str_or(pod, &["metadata", "namespace"], "").to_string();
            let mut keys = vec![(namespace.clone(), kind.to_string(), name.to_string())];
            // A Deployment's pod is owned by a ReplicaSet named `<deployment>-<hash>`.
            let hash = label(pod, "pod-template-hash");
            if kind == "ReplicaSet"
                && !hash.is_empty()
                && let Some(deployment) = name.strip_suffix(&format!("-{hash}"))
            {
                keys.push((namespace, "Deployment".into(), deployment.to_string()));
            }
            for key in keys {
                index.by_owner.entry(key).or_default().push(pod.clone());
            }
        }
        index
    }

    /// The pods the workload may own (by controller reference; [`judge_pods`] narrows them).
    pub fn for_workload(&self, workload: &Value) -> &[Value] {
        self.for_owner(
            str_or(workload, &["metadata", "namespace"], ""),
            str_or(workload, &["kind"], ""),
            str_or(workload, &["metadata", "name"], ""),
        )
    }

    /// [`PodIndex::for_workload`] by the workload's namespace, kind and name.
    pub fn for_owner(&self, namespace: &str, kind: &str, name: &str) -> &[Value] {
        if self.by_owner.is_empty() {
            return &[];
        }
        let key = (namespace.to_string(), kind.to_string(), name.to_string());
        self.by_owner.get(&key).map_or(&[], Vec::as_slice)
    }
}

/// Why one pod cannot start, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stuck {
    pub pod: String,
    /// Empty when the pod itself is the problem (unschedulable).
    pub container: String,
    pub reason: String,
    pub message: String,
    /// When the problem began, as far as the pod tells; `None` when it carries no timestamps
    /// (objects written by hand): the grace is then taken as passed.
    pub since: Option<Timestamp>,
}

impl Stuck {
    /// `web-6d9c/app: ImagePullBackOff: image "x" not found`.
    pub fn describe(&self) -> String {
        let what = if self.container.is_empty() {
            self.pod.clone()
        } else {
            format!("{}/{}", self.pod, self.container)
        };
        if self.message.is_empty() {
            format!("{what}: {}", self.reason)
        } else {
            format!("{what}: {}: {}", self.reason, self.message)
        }
    }
}

fn timestamp(value: &Value, path: &[&str]) -> Option<Timestamp> {
    lookup(value, path)?.as_str()?.parse().ok()
}

fn pod_condition<'a>(pod: &'a Value, type_: &str) -> Option<&'a Value> {
    lookup(pod, &["status", "conditions"])?
        .as_array()?
        .iter()
        .find(|c| str_or(c, &["type"], "") == type_)
}

/// What keeps this pod from starting, if anything does.
pub fn stuck_pod(pod: &Value) -> Option<Stuck> {
    let name = str_or(pod, &["metadata", "name"], "").to_string();
    if matches!(
        str_or(pod, &["status", "phase"], ""),
        "Succeeded" | "Failed"
    ) {
        return None;
    }
    // Grace counts from when the pod last stopped being ready: its creation for a pod that
    // never started, the Ready transition for one that ran and then broke.
    let created = timestamp(pod, &["metadata", "creationTimestamp"]);
    let not_ready_since = pod_condition(pod, "Ready")
        .filter(|c| str_or(c, &["status"], "") != "True")
        .and_then(|c| timestamp(c, &["lastTransitionTime"]));
    let since = created.max(not_ready_since);
    for field in ["initContainerStatuses", "containerStatuses"] {
        for status in lookup(pod, &["status", field])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let reason = str_or(status, &["state", "waiting", "reason"], "");
            let hopeless = CANNOT_START.contains(&reason)
                || (reason == "CrashLoopBackOff"
                    && int_or(status, &["restartCount"], 0) >= CRASH_LOOP_RESTARTS);
            if hopeless {
                return Some(Stuck {
                    pod: name,
                    container: str_or(status, &["name"], "").to_string(),
                    reason: reason.to_string(),
                    message: str_or(status, &["state", "waiting", "message"], "").to_string(),
                    since,
                });
            }
        }
    }
    let scheduled = pod_condition(pod, "PodScheduled")?;
    (str_or(scheduled, &["status"], "") == "False"
        && str_or(scheduled, &["reason"], "") == "Unschedulable")
        .then(|| Stuck {
            pod: name,
            container: String::new(),
            reason: "Unschedulable".into(),
            message: str_or(scheduled, &["message"], "").to_string(),
            since: timestamp(scheduled, &["lastTransitionTime"]).or(created),
        })
}

/// The workload's verdict from its pods: Failed when a current-revision pod has been stuck
/// for longer than `grace`, naming it (and counting the others); `None` otherwise.
pub fn judge_pods(
    workload: &Value,
    pods: &[Value],
    now: Timestamp,
    grace: Duration,
) -> Option<Evaluation> {
    let grace = jiff::SignedDuration::try_from(grace).unwrap_or(jiff::SignedDuration::MAX);
    let mut stuck: Vec<Stuck> = current_pods(workload, pods)
        .into_iter()
        .filter_map(stuck_pod)
        .filter(|s| {
            s.since
                .is_none_or(|since| now.duration_since(since) >= grace)
        })
        .collect();
    stuck.sort_by(|a, b| a.pod.cmp(&b.pod));
    let first = stuck.first()?;
    let mut message = first.describe();
    let others: BTreeSet<&str> = stuck[1..]
        .iter()
        .map(|s| s.pod.as_str())
        .filter(|pod| *pod != first.pod)
        .collect();
    if !others.is_empty() {
        message.push_str(&format!(" (and {} more pods)", others.len()));
    }
    Some(Evaluation::failed(first.reason.clone(), message))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": 2},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 2, "conditions": [
                {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                 "message": "ReplicaSet \"web-new\" is progressing."}]}
        })
    }

    fn pod(name: &str, owner_kind: &str, owner: &str, labels: Value, status: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "labels": labels,
                         "creationTimestamp": "2026-11-26T10:00:00Z",
                         "ownerReferences": [{"kind": owner_kind, "name": owner, "controller": true}]},
            "status": status
        })
    }

    fn waiting(container: &str, reason: &str, message: &str, restarts: i64) -> Value {
        json!({"phase": "Pending", "containerStatuses": [
            {"name": container, "restartCount": restarts,
             "state": {"waiting": {"reason": reason, "message": message}}}]})
    }

    #[test]
    fn reasons_table() {
        let now = at("2026-11-26T10:01:00Z");
        let labels = json!({"app": "web", "pod-template-hash": "new"});
        let cases: Vec<(&str, Value, Option<&str>)> = vec![
            (
                "image pull backoff",
                waiting("app", "ImagePullBackOff", "image \"x\" not found", 0),
                Some("web-new-a/app: ImagePullBackOff: image \"x\" not found"),
            ),
            (
                "err image pull",
                waiting("app", "ErrImagePull", "pull failed", 0),
                Some("web-new-a/app: ErrImagePull: pull failed"),
            ),
            (
                "invalid image name",
                waiting("app", "InvalidImageName", "bad ref", 0),
                Some("web-new-a/app: InvalidImageName: bad ref"),
            ),
            (
                "config error",
                waiting(
                    "app",
                    "CreateContainerConfigError",
                    "secret \"s\" not found",
                    0,
                ),
                Some("web-new-a/app: CreateContainerConfigError: secret \"s\" not found"),
            ),
            (
                "crash loop with 3 restarts",
                waiting("app", "CrashLoopBackOff", "back-off 40s", 3),
                Some("web-new-a/app: CrashLoopBackOff: back-off 40s"),
            ),
            (
                "crash loop with 2 restarts is given time",
                waiting("app", "CrashLoopBackOff", "back-off 20s", 2),
                None,
            ),
            (
                "container creating is normal",
                waiting("app", "ContainerCreating", "", 0),
                None,
            ),
            (
                "init container that cannot pull",
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init", "state": {"waiting": {"reason": "ErrImagePull"}}}]}),
                Some("web-new-a/init: ErrImagePull"),
            ),
            (
                "unschedulable beyond the grace",
                json!({"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/3 nodes are available", "lastTransitionTime": "2026-11-26T10:00:10Z"}]}),
                Some("web-new-a: Unschedulable: 0/3 nodes are available"),
            ),
            (
                "unschedulable within the grace",
                json!({"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "lastTransitionTime": "2026-11-26T10:00:45Z"}]}),
                None,
            ),
            (
                "running",
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "app", "state": {"running": {}}}]}),
                None,
            ),
        ];
        for (case, status, want) in cases {
            let pods = [pod(
                "web-new-a",
                "ReplicaSet",
                "web-new",
                labels.clone(),
                status,
            )];
            let got = judge_pods(&deployment(), &pods, now, DEFAULT_GRACE);
            assert_eq!(
                got.as_ref().map(|e| e.message.to_string()).as_deref(),
                want,
                "{case}"
            );
            if let Some(e) = got {
                assert_eq!(e.status, crate::Status::Failed, "{case}");
            }
        }
    }

    #[test]
    fn grace_counts_from_creation_or_the_last_ready_transition() {
        let labels = json!({"app": "web", "pod-template-hash": "new"});
        let fresh = pod(
            "web-new-a",
            "ReplicaSet",
            "web-new",
            labels.clone(),
            waiting("app", "ImagePullBackOff", "", 0),
        );
        let deployment = deployment();
        let judge = |pods: &[Value], now: &str| {
            judge_pods(&deployment, pods, at(now), DEFAULT_GRACE).is_some()
        };
        assert!(!judge(std::slice::from_ref(&fresh), "2026-11-26T10:00:29Z"));
        assert!(judge(std::slice::from_ref(&fresh), "2026-11-26T10:00:30Z"));
        // Ran for an hour, broke ten seconds ago: not yet.
        let mut broke = fresh.clone();
        broke["status"]["conditions"] = json!([{"type": "Ready", "status": "False",
            "lastTransitionTime": "2026-11-26T11:00:00Z"}]);
        assert!(!judge(std::slice::from_ref(&broke), "2026-11-26T11:00:10Z"));
        assert!(judge(&[broke], "2026-11-26T11:00:31Z"));
    }

    #[test]
    fn only_the_workloads_current_pods_count() {
        let now = at("2026-11-26T10:01:00Z");
        let bad = waiting("app", "ImagePullBackOff", "", 0);
        let cases: Vec<(&str, Value, Value, bool)> = vec![
            (
                "new ReplicaSet",
                deployment(),
                pod(
                    "web-new-a",
                    "ReplicaSet",
                    "web-new",
                    json!({"app": "web", "pod-template-hash": "new"}),
                    bad.clone(),
                ),
                true,
            ),
            (
                "old ReplicaSet being replaced",
                deployment(),
                pod(
                    "web-old-a",
                    "ReplicaSet",
                    "web-old",
                    json!({"app": "web", "pod-template-hash": "old"}),
                    bad.clone(),
                ),
                false,
            ),
            (
                "another Deployment's pod with the same labels",
                deployment(),
                pod(
                    "webx-new-a",
                    "ReplicaSet",
                    "webx-new",
                    json!({"app": "web", "pod-template-hash": "new"}),
                    bad.clone(),
                ),
                false,
            ),
            (
                "selector does not match",
                deployment(),
                pod(
                    "web-new-a",
                    "ReplicaSet",
                    "web-new",
                    json!({"app": "api", "pod-template-hash": "new"}),
                    bad.clone(),
                ),
                false,
            ),
            (
                "StatefulSet update revision",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                       "metadata": {"name": "db", "namespace": "shop"},
                       "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]}},
                       "status": {"updateRevision": "db-2"}}),
                pod(
                    "db-0",
                    "StatefulSet",
                    "db",
                    json!({"app": "db", "controller-revision-hash": "db-2"}),
                    bad.clone(),
                ),
                true,
            ),
            (
                "StatefulSet pod of the old revision",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                       "metadata": {"name": "db", "namespace": "shop"},
                       "spec": {"selector": {"matchLabels": {"app": "db"}}},
                       "status": {"updateRevision": "db-2"}}),
                pod(
                    "db-0",
                    "StatefulSet",
                    "db",
                    json!({"app": "db", "controller-revision-hash": "db-1"}),
                    bad.clone(),
                ),
                false,
            ),
            (
                "DaemonSet",
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                       "metadata": {"name": "agent", "namespace": "shop"},
                       "spec": {"selector": {"matchLabels": {"app": "agent"}}}}),
                pod(
                    "agent-x",
                    "DaemonSet",
                    "agent",
                    json!({"app": "agent", "controller-revision-hash": "7"}),
                    bad.clone(),
                ),
                true,
            ),
            (
                "Job",
                json!({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": "migrate", "namespace": "shop"},
                       "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}}}}),
                pod(
                    "migrate-x",
                    "Job",
                    "migrate",
                    json!({"batch.kubernetes.io/controller-uid": "u1"}),
                    bad.clone(),
                ),
                true,
            ),
        ];
        for (case, workload, pod, want) in cases {
            assert_eq!(
                judge_pods(&workload, &[pod], now, DEFAULT_GRACE).is_some(),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn several_stuck_pods_name_the_first_and_count_the_rest() {
        let labels = json!({"app": "web", "pod-template-hash": "new"});
        let pods: Vec<Value> = ["web-new-b", "web-new-a", "web-new-c"]
            .iter()
            .map(|n| {
                pod(
                    n,
                    "ReplicaSet",
                    "web-new",
                    labels.clone(),
                    waiting("app", "ErrImagePull", "", 0),
                )
            })
            .collect();
        let e = judge_pods(
            &deployment(),
            &pods,
            at("2026-11-26T11:00:00Z"),
            DEFAULT_GRACE,
        )
        .unwrap();
        assert_eq!(e.message, "web-new-a/app: ErrImagePull (and 2 more pods)");
        assert_eq!(e.reason(), Some("ErrImagePull"));
    }

    #[test]
    fn the_index_finds_a_workloads_pods_by_owner() {
        let labels = json!({"app": "web", "pod-template-hash": "new"});
        let bad = waiting("app", "ErrImagePull", "", 0);
        let pods = [
            pod(
                "web-new-a",
                "ReplicaSet",
                "web-new",
                labels.clone(),
                bad.clone(),
            ),
            pod(
                "db-0",
                "StatefulSet",
                "db",
                json!({"app": "db"}),
                bad.clone(),
            ),
        ];
        let index = PodIndex::new(&pods);
        let names = |w: &Value| -> Vec<String> {
            index
                .for_workload(w)
                .iter()
                .map(|p| str_or(p, &["metadata", "name"], "").to_string())
                .collect()
        };
        assert_eq!(names(&deployment()), ["web-new-a"]);
        let rs =
            json!({"kind": "ReplicaSet", "metadata": {"name": "web-new", "namespace": "shop"}});
        assert_eq!(names(&rs), ["web-new-a"]);
        let other =
            json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "other"}});
        assert!(names(&other).is_empty());
    }

    #[test]
    fn selector_queries() {
        let w = json!({"spec": {"selector": {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "x", "operator": "NotIn", "values": ["c"]},
                {"key": "y", "operator": "Exists"},
                {"key": "z", "operator": "DoesNotExist"}]}}});
        assert_eq!(
            selector_query(&w).as_deref(),
            Some("app=web,tier in (a,b),x notin (c),y,!z")
        );
        assert_eq!(selector_query(&json!({"spec": {}})), None);
    }
}
