//! Readiness of applied objects (refusing stale readiness) and the outcome of an apply
//! attempt.

use std::time::Duration;

use core_status::Status;
use core_status::policy::Rules;
use jiff::Timestamp;
use serde_json::Value;

use crate::crd::InventoryEntry;
use crate::keys::condition;

use super::{ObjectRef, summarize};

/// An applied object's inventory health under the layer's rules (`pods`: a workload's, when
/// the rules judge them): its status and, while it is not Current, a reason (the rule's,
/// else the object's `Ready` condition's) and the rule's message.
pub fn inventory_health(
    object: &Value,
    pods: &[Value],
    now: Timestamp,
    rules: &Rules,
) -> (Status, Option<String>, Option<String>) {
    let (status, message, reason) = judged_status(object, pods, now, rules);
    if status == Status::Current {
        return (status, None, None);
    }
    let reason = ready_reason(object).or(reason);
    (status, reason, Some(message).filter(|m| !m.is_empty()))
}

/// The reason of an object's `Ready` condition, when it has one that is not True.
pub fn ready_reason(object: &Value) -> Option<String> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .filter(|c| c.get("status").and_then(Value::as_str) != Some("True"))
        .and_then(|c| c.get("reason")?.as_str().map(str::to_string))
}

/// Compiles a prerequisite's `readyExpr`; the error is the compiler's.
pub fn compile_ready_expr(source: &str) -> Result<cel::Program, String> {
    cel::Program::compile(source).map_err(|e| e.to_string().replace('\n', " "))
}

/// A prerequisite object judged by its `readyExpr` (`dep`: the object, `self`: the layer):
/// Current when it returns true, InProgress when false, Unknown when it cannot be evaluated
/// (a field missing, a result that is not a boolean) — never ready by mistake.
pub fn ready_by_expr(source: &str, layer: &Value, object: &Value) -> (Status, String) {
    let program = match compile_ready_expr(source) {
        Ok(program) => program,
        Err(e) => return (Status::Unknown, format!("readyExpr does not compile: {e}")),
    };
    let mut context = cel::Context::default();
    for (name, value) in [("dep", object), ("self", layer)] {
        match cel::to_value(value) {
            Ok(value) => context.add_variable_from_value(name, value),
            Err(e) => {
                return (
                    Status::Unknown,
                    format!("readyExpr: {name} cannot be given to CEL: {e}"),
                );
            }
        }
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(true)) => (Status::Current, format!("readyExpr {source:?} holds")),
        Ok(cel::Value::Bool(false)) => {
            (Status::InProgress, format!("readyExpr {source:?} is false"))
        }
        Ok(other) => (
            Status::Unknown,
            format!("readyExpr {source:?} returned {other:?}, not a boolean"),
        ),
        Err(e) => (Status::Unknown, format!("readyExpr {source:?} failed: {e}")),
    }
}

/// The status of an applied object under kstatus' rules, refusing stale readiness (see
/// [`judged_status`]).
pub fn object_status(object: &Value, now: Timestamp) -> (Status, String) {
    let (status, message, _) = judged_status(object, &[], now, &Rules::default());
    (status, message)
}

/// The status, message and reason of an applied object, refusing stale readiness: a status
/// written for an older generation than the one just applied is InProgress, and Flux
/// objects with no status yet are InProgress (kstatus would call them Current: kc#387).
fn judged_status(
    object: &Value,
    pods: &[Value],
    now: Timestamp,
    rules: &Rules,
) -> (Status, String, Option<String>) {
    use core_status::object::{int_or, lookup, str_or};
    let evaluation = rules.evaluate_with_pods(object, pods, now);
    let reason = evaluation.reason().map(str::to_string);
    let mut result = (evaluation.status, evaluation.message.to_string(), reason);
    if result.0 != Status::Current {
        return result;
    }
    let generation = int_or(object, &["metadata", "generation"], 0);
    let stale_condition = lookup(object, &["status", "conditions"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            matches!(
                str_or(c, &["type"], ""),
                condition::READY | condition::RECONCILING | condition::STALLED
            )
        })
        .find_map(|c| {
            let observed = c.get("observedGeneration")?.as_i64()?;
            (observed < generation).then_some(observed)
        });
    if let Some(observed) = stale_condition {
        result = (
            Status::InProgress,
            format!(
                "conditions are from generation {observed}, the applied generation is {generation}"
            ),
            None,
        );
    } else if str_or(object, &["apiVersion"], "").contains(".toolkit.fluxcd.io/")
        && lookup(object, &["status"]).is_none_or(|s| s.as_object().is_none_or(|m| m.is_empty()))
    {
        result = (Status::InProgress, "no status reported yet".into(), None);
    }
    result
}

/// How an apply attempt stands after checking every object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Deployed,
    /// Still within the timeout; the message names what is not ready.
    Waiting(String),
    Failed(String),
}

/// Judges the inventory: Failed at once on a Failed object (no point waiting), Failed when
/// the timeout has passed with objects still not Current, else Waiting.
pub fn outcome(inventory: &[InventoryEntry], elapsed: Duration, timeout: Duration) -> Outcome {
    let not_current: Vec<&InventoryEntry> = inventory
        .iter()
        .filter(|e| e.status != Status::Current.to_string())
        .collect();
    if not_current.is_empty() {
        return Outcome::Deployed;
    }
    let describe = |entries: &[&InventoryEntry]| {
        let items: Vec<String> = entries
            .iter()
            .map(|e| match &e.message {
                Some(why) => format!("{} is {}: {why}", ObjectRef::of_entry(e), e.status),
                None => format!("{} is {}", ObjectRef::of_entry(e), e.status),
            })
            .collect();
        summarize(&items, 5, ", ")
    };
    let failed: Vec<&InventoryEntry> = not_current
        .iter()
        .copied()
        .filter(|e| e.status == Status::Failed.to_string())
        .collect();
    if !failed.is_empty() {
        return Outcome::Failed(describe(&failed));
    }
    if elapsed >= timeout {
        return Outcome::Failed(format!(
            "not ready after {}s: {}",
            timeout.as_secs(),
            describe(&not_current)
        ));
    }
    Outcome::Waiting(describe(&not_current))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn ready_reasons() {
        for (case, object, want) in [
            (
                "not ready with a reason",
                json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "InstallFailed"}]}}),
                Some("InstallFailed"),
            ),
            (
                "ready",
                json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded"}]}}),
                None,
            ),
            ("no conditions", json!({"status": {}}), None),
        ] {
            assert_eq!(ready_reason(&object).as_deref(), want, "{case}");
        }
    }

    #[test]
    fn stale_readiness_is_refused() {
        let now: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        let cases = [
            (
                "condition from an older generation",
                serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w", "generation": 3},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]}}),
                Status::InProgress,
            ),
            (
                "condition from this generation",
                serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w", "generation": 3},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 3}]}}),
                Status::Current,
            ),
            (
                "HelmRelease without status",
                serde_json::json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                    "metadata": {"name": "h", "generation": 1}}),
                Status::InProgress,
            ),
            (
                "ConfigMap",
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
                Status::Current,
            ),
            (
                "Deployment at an older observedGeneration",
                serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "d", "generation": 2},
                    "spec": {"replicas": 1}, "status": {"observedGeneration": 1, "replicas": 1}}),
                Status::InProgress,
            ),
        ];
        for (case, object, want) in cases {
            assert_eq!(object_status(&object, now).0, want, "{case}");
        }
    }

    fn entry(name: &str, status: &str) -> InventoryEntry {
        InventoryEntry {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
            status: status.into(),
            reason: None,
            message: None,
        }
    }

    #[test]
    fn outcomes() {
        let t = Duration::from_secs(60);
        let all_current = [entry("a", "Current")];
        assert_eq!(
            outcome(&all_current, Duration::from_secs(500), t),
            Outcome::Deployed
        );
        let slow = [entry("a", "Current"), entry("b", "InProgress")];
        assert_eq!(
            outcome(&slow, Duration::from_secs(10), t),
            Outcome::Waiting("ConfigMap ns/b is InProgress".into())
        );
        assert_eq!(
            outcome(&slow, Duration::from_secs(60), t),
            Outcome::Failed("not ready after 60s: ConfigMap ns/b is InProgress".into())
        );
        let failed = [entry("b", "InProgress"), entry("c", "Failed")];
        assert_eq!(
            outcome(&failed, Duration::from_secs(1), t),
            Outcome::Failed("ConfigMap ns/c is Failed".into())
        );
        let mut stuck = entry("web", "Failed");
        stuck.kind = "Deployment".into();
        stuck.reason = Some("ImagePullBackOff".into());
        stuck.message = Some("web-1/app: ImagePullBackOff: no such image".into());
        assert_eq!(
            outcome(&[stuck], Duration::from_secs(1), t),
            Outcome::Failed(
                "Deployment ns/web is Failed: web-1/app: ImagePullBackOff: no such image".into()
            )
        );
    }

    #[test]
    fn the_layers_rules_judge_its_workloads_with_their_pods() {
        let now: Timestamp = "2026-11-26T11:00:00Z".parse().unwrap();
        let deployment = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "generation": 1},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}});
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-h-1", "namespace": "ns", "creationTimestamp": "2026-11-26T10:00:00Z",
                "labels": {"app": "web", "pod-template-hash": "h"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": "web-h", "controller": true}]},
            "status": {"containerStatuses": [{"name": "app",
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}]}});
        let kstatus = Rules::default();
        let strict = Rules {
            policy: core_status::policy::Policy::strict(),
            health: Default::default(),
        };
        let pods = [pod];
        let (status, reason, _) = inventory_health(&deployment, &pods, now, &kstatus);
        assert_eq!(
            (status, reason.as_deref()),
            (Status::InProgress, Some("LessAvailable"))
        );
        assert_eq!(
            inventory_health(&deployment, &pods, now, &strict),
            (
                Status::Failed,
                Some("ImagePullBackOff".into()),
                Some("web-h-1/app: ImagePullBackOff: no such image".into())
            )
        );
    }
}

#[cfg(test)]
mod ready_expr_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn ready_by_expr_table() {
        let layer = json!({"metadata": {"name": "apps"}, "spec": {"version": "1.2.0"}});
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate"},
                            "data": {"ready": "yes", "version": "1.2.0"}});
        // (expression, status, message part)
        let cases = [
            ("dep.data.ready == 'yes'", Status::Current, "holds"),
            ("dep.data.ready == 'no'", Status::InProgress, "is false"),
            (
                "dep.data.version == self.spec.version",
                Status::Current,
                "holds",
            ),
            ("dep.data.missing == 'x'", Status::Unknown, "failed"),
            ("dep.data.ready", Status::Unknown, "not a boolean"),
            ("dep.data.ready ==", Status::Unknown, "does not compile"),
        ];
        for (source, want, part) in cases {
            let (status, message) = ready_by_expr(source, &layer, &object);
            assert_eq!(status, want, "{source}: {message}");
            assert!(message.contains(part), "{source}: {message}");
        }
    }
}
