//! One named case per kstatus rule: object → (status, reason, message), exact strings.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use core_status::{Observed, Status, evaluate};
use jiff::Timestamp;
use serde_json::{Value, json};

const NOW: &str = "2026-01-01T00:01:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn obj(api_version: &str, kind: &str, rest: Value) -> Value {
    let mut o = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ns"}});
    for (k, v) in rest.as_object().unwrap() {
        if k == "metadata" {
            for (mk, mv) in v.as_object().unwrap() {
                o["metadata"][mk] = mv.clone();
            }
        } else {
            o[k] = v.clone();
        }
    }
    o
}

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message})
}

struct Case {
    name: &'static str,
    object: Value,
    status: Status,
    reason: Option<&'static str>,
    message: &'static str,
}

fn check(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for case in &cases {
        let got = evaluate(&case.object, now());
        // The compact decoder (bulk status from JSON) must give the very same result.
        let text = serde_json::to_string(&case.object).unwrap();
        let compact = Observed::from_json(&text).unwrap().evaluate(now());
        if compact != got {
            failures.push(format!("{}: compact decoding gave {compact:?}", case.name));
        }
        let want = (case.status, case.reason, case.message);
        let have = (got.status, got.reason(), got.message.as_ref());
        if want != have {
            failures.push(format!("{}: want {want:?}, got {have:?}", case.name));
        }
        // Conditions follow the status: Reconciling with InProgress, Stalled with Failed.
        let types: Vec<&str> = got.conditions().iter().map(|c| c.type_.as_str()).collect();
        let expected_types: &[&str] = match got.status {
            Status::InProgress => &["Reconciling"],
            Status::Failed => &["Stalled"],
            _ => &[],
        };
        if types != expected_types {
            failures.push(format!("{}: conditions {types:?}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

macro_rules! case {
    ($name:expr, $object:expr, $status:ident, $reason:expr, $message:expr) => {
        Case {
            name: $name,
            object: $object,
            status: Status::$status,
            reason: $reason,
            message: $message,
        }
    };
}

#[test]
fn generic_rules() {
    let cm = |rest| obj("v1", "ConfigMap", rest);
    let cr = |rest| obj("example.com/v1", "Widget", rest);
    check(vec![
        case!(
            "deletion wins over everything",
            cr(
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "generation": 2}, "status": {"observedGeneration": 1}})
            ),
            Terminating,
            None,
            "Resource scheduled for deletion"
        ),
        case!(
            "empty deletionTimestamp is ignored",
            cm(json!({"metadata": {"deletionTimestamp": ""}})),
            Current,
            None,
            "Resource is always ready"
        ),
        case!(
            "generation ahead of observed",
            cr(json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}})),
            InProgress,
            Some("LatestGenerationNotObserved"),
            "Widget generation is 3, but latest observed generation is 2"
        ),
        case!(
            "observed ahead of generation also counts",
            cr(json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 2}})),
            InProgress,
            Some("LatestGenerationNotObserved"),
            "Widget generation is 1, but latest observed generation is 2"
        ),
        case!(
            "generation check skipped without observedGeneration",
            cr(json!({"metadata": {"generation": 3}})),
            Current,
            None,
            "Resource is current"
        ),
        case!(
            "generation check skipped without generation",
            cr(json!({"status": {"observedGeneration": 3}})),
            Current,
            None,
            "Resource is current"
        ),
        case!(
            "non-integer observedGeneration is an error",
            cr(json!({"metadata": {"generation": 1}, "status": {"observedGeneration": "1"}})),
            Unknown,
            None,
            "status.observedGeneration: expected an integer, found string \"1\""
        ),
        case!(
            "non-integer generation is an error when observed is set",
            cr(json!({"metadata": {"generation": 1.5}, "status": {"observedGeneration": 1}})),
            Unknown,
            None,
            "metadata.generation: expected an integer, found number 1.5"
        ),
        case!(
            "Reconciling=True",
            cr(
                json!({"status": {"conditions": [cond("Reconciling", "True", "Working", "working on it")]}})
            ),
            InProgress,
            Some("Working"),
            "working on it"
        ),
        case!(
            "Stalled=True",
            cr(json!({"status": {"conditions": [cond("Stalled", "True", "Broken", "gave up")]}})),
            Failed,
            Some("Broken"),
            "gave up"
        ),
        case!(
            "Stalled=True with empty message",
            cr(json!({"status": {"conditions": [cond("Stalled", "True", "Broken", "")]}})),
            Failed,
            Some("Broken"),
            ""
        ),
        case!(
            "first standard condition wins",
            cr(
                json!({"status": {"conditions": [cond("Stalled", "True", "A", "a"), cond("Reconciling", "True", "B", "b")]}})
            ),
            Failed,
            Some("A"),
            "a"
        ),
        case!(
            "Reconciling=False ignored",
            cr(json!({"status": {"conditions": [cond("Reconciling", "False", "Done", "")]}})),
            Current,
            None,
            "Resource is current"
        ),
        case!(
            "generic applies to built-ins: Stalled Deployment",
            obj(
                "apps/v1",
                "Deployment",
                json!({"status": {"conditions": [cond("Stalled", "True", "X", "y")]}})
            ),
            Failed,
            Some("X"),
            "y"
        ),
        case!(
            "generic applies to built-ins: Reconciling ConfigMap",
            cm(json!({"status": {"conditions": [cond("Reconciling", "True", "R", "m")]}})),
            InProgress,
            Some("R"),
            "m"
        ),
        case!(
            "malformed conditions are an error",
            cr(json!({"status": {"conditions": [{"type": "Ready", "status": true}]}})),
            Unknown,
            None,
            "status.conditions[0].status: expected a string, found bool true"
        ),
        case!(
            "non-string deletionTimestamp is an error",
            cr(json!({"metadata": {"deletionTimestamp": 5}})),
            Unknown,
            None,
            "metadata.deletionTimestamp: expected a string, found number 5"
        ),
        case!(
            "status null is absent",
            cr(json!({"status": null})),
            Current,
            None,
            "Resource is current"
        ),
    ]);
}

#[test]
fn ready_fallback() {
    let cr = |conds: Value| {
        obj(
            "example.com/v1",
            "Widget",
            json!({"status": {"conditions": conds}}),
        )
    };
    check(vec![
        case!(
            "Ready=True",
            cr(json!([cond("Ready", "True", "", "")])),
            Current,
            None,
            "Resource is Ready"
        ),
        case!(
            "Ready=False copies reason and message",
            cr(json!([cond("Ready", "False", "Waiting", "not yet")])),
            InProgress,
            Some("Waiting"),
            "not yet"
        ),
        case!(
            "Ready=Unknown",
            cr(json!([cond("Ready", "Unknown", "Checking", "soon")])),
            InProgress,
            Some("Checking"),
            "soon"
        ),
        case!(
            "Ready with odd status is skipped",
            cr(json!([
                cond("Ready", "Maybe", "", ""),
                cond("Ready", "True", "", "")
            ])),
            Current,
            None,
            "Resource is Ready"
        ),
        case!(
            "ready is case-sensitive",
            cr(json!([cond("ready", "False", "x", "y")])),
            Current,
            None,
            "Resource is current"
        ),
        case!(
            "no conditions",
            cr(json!([])),
            Current,
            None,
            "Resource is current"
        ),
        case!(
            "Ready=False is never Failed",
            cr(json!([cond("Ready", "False", "Error", "boom")])),
            InProgress,
            Some("Error"),
            "boom"
        ),
        case!(
            "Namespace uses the fallback",
            obj("v1", "Namespace", json!({"status": {"phase": "Active"}})),
            Current,
            None,
            "Resource is current"
        ),
        case!(
            "version is ignored but group matters: CR named Deployment",
            obj(
                "example.com/v1",
                "Deployment",
                json!({"spec": {"replicas": 3}})
            ),
            Current,
            None,
            "Resource is current"
        ),
        case!(
            "knative Service is not a core Service",
            obj(
                "serving.knative.dev/v1",
                "Service",
                json!({"status": {"conditions": [cond("Ready", "False", "RevisionMissing", "no revision")]}})
            ),
            InProgress,
            Some("RevisionMissing"),
            "no revision"
        ),
    ]);
}

#[test]
fn always_ready_kinds() {
    check(vec![
        case!(
            "ConfigMap",
            obj("v1", "ConfigMap", json!({})),
            Current,
            None,
            "Resource is always ready"
        ),
        case!(
            "Secret",
            obj("v1", "Secret", json!({})),
            Current,
            None,
            "Resource is always ready"
        ),
        case!(
            "CronJob",
            obj("batch/v1", "CronJob", json!({})),
            Current,
            None,
            "Resource is always ready"
        ),
        case!(
            "PDB",
            obj("policy/v1", "PodDisruptionBudget", json!({})),
            Current,
            None,
            "AllowedDisruptions has been computed."
        ),
        case!(
            "PDB generation not observed",
            obj(
                "policy/v1",
                "PodDisruptionBudget",
                json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 1}})
            ),
            InProgress,
            Some("LatestGenerationNotObserved"),
            "PodDisruptionBudget generation is 2, but latest observed generation is 1"
        ),
        case!(
            "Secret ignores Ready=False",
            obj(
                "v1",
                "Secret",
                json!({"status": {"conditions": [cond("Ready", "False", "x", "y")]}})
            ),
            Current,
            None,
            "Resource is always ready"
        ),
    ]);
}

fn deploy(spec: Value, status: Value) -> Value {
    obj(
        "apps/v1",
        "Deployment",
        json!({"spec": spec, "status": status}),
    )
}

#[test]
fn deployment() {
    let progressing = cond("Progressing", "True", "NewReplicaSetAvailable", "");
    let available = cond("Available", "True", "MinimumReplicasAvailable", "");
    let full = |conds: Value| json!({"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3, "conditions": conds});
    check(vec![
        case!(
            "deadline exceeded fails first",
            deploy(
                json!({"replicas": 3}),
                json!({"conditions": [cond("Progressing", "False", "ProgressDeadlineExceeded", "x")]})
            ),
            Failed,
            Some("ProgressDeadlineExceeded"),
            "Progress deadline exceeded"
        ),
        case!(
            "deadline exceeded with any status",
            deploy(
                json!({"replicas": 3}),
                json!({"replicas": 3, "conditions": [cond("Progressing", "Unknown", "ProgressDeadlineExceeded", "")]})
            ),
            Failed,
            Some("ProgressDeadlineExceeded"),
            "Progress deadline exceeded"
        ),
        case!(
            "less replicas",
            deploy(json!({"replicas": 3}), json!({"replicas": 1})),
            InProgress,
            Some("LessReplicas"),
            "Replicas: 1/3"
        ),
        case!(
            "replicas default 1",
            deploy(json!({}), json!({})),
            InProgress,
            Some("LessReplicas"),
            "Replicas: 0/1"
        ),
        case!(
            "less updated",
            deploy(
                json!({"replicas": 3}),
                json!({"replicas": 3, "updatedReplicas": 2})
            ),
            InProgress,
            Some("LessUpdated"),
            "Updated: 2/3"
        ),
        case!(
            "extra pods",
            deploy(
                json!({"replicas": 3}),
                json!({"replicas": 5, "updatedReplicas": 3})
            ),
            InProgress,
            Some("ExtraPods"),
            "Pending termination: 2"
        ),
        case!(
            "less available",
            deploy(
                json!({"replicas": 3}),
                json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 1})
            ),
            InProgress,
            Some("LessAvailable"),
            "Available: 1/3"
        ),
        case!(
            "less ready",
            deploy(
                json!({"replicas": 3}),
                json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "readyReplicas": 2})
            ),
            InProgress,
            Some("LessReady"),
            "Ready: 2/3"
        ),
        case!(
            "default deadline needs NewReplicaSetAvailable",
            deploy(
                json!({"replicas": 3, "progressDeadlineSeconds": 600}),
                full(json!([available]))
            ),
            InProgress,
            Some("ReplicaSetNotAvailable"),
            "ReplicaSet not Available"
        ),
        case!(
            "not available",
            deploy(
                json!({"replicas": 3, "progressDeadlineSeconds": 600}),
                full(json!([progressing]))
            ),
            InProgress,
            Some("DeploymentNotAvailable"),
            "Deployment not Available"
        ),
        case!(
            "current",
            deploy(
                json!({"replicas": 3, "progressDeadlineSeconds": 600}),
                full(json!([progressing, available]))
            ),
            Current,
            None,
            "Deployment is available. Replicas: 3"
        ),
        case!(
            "no deadline: progressing assumed",
            deploy(json!({"replicas": 3}), full(json!([available]))),
            Current,
            None,
            "Deployment is available. Replicas: 3"
        ),
        case!(
            "max-int deadline: progressing assumed",
            deploy(
                json!({"replicas": 3, "progressDeadlineSeconds": 2147483647}),
                full(json!([available]))
            ),
            Current,
            None,
            "Deployment is available. Replicas: 3"
        ),
        case!(
            "string replicas take the default",
            deploy(
                json!({"replicas": "3"}),
                full(json!([progressing, available]))
            ),
            InProgress,
            Some("ExtraPods"),
            "Pending termination: 2"
        ),
        case!(
            "paused is not considered",
            deploy(
                json!({"replicas": 3, "paused": true}),
                json!({"replicas": 1})
            ),
            InProgress,
            Some("LessReplicas"),
            "Replicas: 1/3"
        ),
        case!(
            "extensions group too",
            obj(
                "extensions/v1beta1",
                "Deployment",
                json!({"spec": {"replicas": 2}, "status": {"replicas": 1}})
            ),
            InProgress,
            Some("LessReplicas"),
            "Replicas: 1/2"
        ),
        case!(
            "zero replicas",
            deploy(
                json!({"replicas": 0}),
                json!({"conditions": [progressing, available]})
            ),
            Current,
            None,
            "Deployment is available. Replicas: 0"
        ),
    ]);
}

fn sts(spec: Value, status: Value) -> Value {
    obj(
        "apps/v1",
        "StatefulSet",
        json!({"spec": spec, "status": status}),
    )
}

#[test]
fn stateful_set() {
    let ok = |extra: Value| {
        let mut s = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3, "currentRevision": "r1", "updateRevision": "r1"});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    check(vec![
        case!(
            "OnDelete is current at once",
            sts(
                json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}),
                json!({})
            ),
            Current,
            None,
            "StatefulSet is using the ondelete update strategy"
        ),
        case!(
            "less replicas",
            sts(json!({"replicas": 3}), json!({"replicas": 2})),
            InProgress,
            Some("LessReplicas"),
            "Replicas: 2/3"
        ),
        case!(
            "less ready",
            sts(
                json!({"replicas": 3}),
                json!({"replicas": 3, "readyReplicas": 1})
            ),
            InProgress,
            Some("LessReady"),
            "Ready: 1/3"
        ),
        case!(
            "extra pods",
            sts(
                json!({"replicas": 3}),
                json!({"replicas": 4, "readyReplicas": 4})
            ),
            InProgress,
            Some("ExtraPods"),
            "Pending termination: 1"
        ),
        case!(
            "partition rollout",
            sts(
                json!({"replicas": 3, "updateStrategy": {"rollingUpdate": {"partition": 1}}}),
                ok(json!({"updatedReplicas": 1}))
            ),
            InProgress,
            Some("PartitionRollout"),
            "updated: 1/2"
        ),
        case!(
            "partition complete",
            sts(
                json!({"replicas": 3, "updateStrategy": {"rollingUpdate": {"partition": 1}}}),
                ok(json!({"updatedReplicas": 2, "currentRevision": "a", "updateRevision": "b"}))
            ),
            Current,
            None,
            "Partition rollout complete. updated: 2"
        ),
        case!(
            "partition 0 (API default) skips revision checks",
            sts(
                json!({"replicas": 3, "updateStrategy": {"rollingUpdate": {"partition": 0}}}),
                ok(json!({"currentReplicas": 0, "currentRevision": "a", "updateRevision": "b"}))
            ),
            Current,
            None,
            "Partition rollout complete. updated: 3"
        ),
        case!(
            "less current",
            sts(json!({"replicas": 3}), ok(json!({"currentReplicas": 2}))),
            InProgress,
            Some("LessCurrent"),
            "current: 2/3"
        ),
        case!(
            "revision mismatch",
            sts(json!({"replicas": 3}), ok(json!({"updateRevision": "r2"}))),
            InProgress,
            Some("RevisionMismatch"),
            "Waiting for updated revision to match current"
        ),
        case!(
            "current",
            sts(json!({"replicas": 3}), ok(json!({}))),
            Current,
            None,
            "All replicas scheduled as expected. Replicas: 3"
        ),
    ]);
}

fn ds(meta: Value, status: Value) -> Value {
    obj(
        "apps/v1",
        "DaemonSet",
        json!({"metadata": meta, "status": status}),
    )
}

#[test]
fn daemon_set() {
    let g = json!({"generation": 1});
    let full = |extra: Value| {
        let mut s = json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "currentNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3, "numberReady": 3});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    check(vec![
        case!(
            "no generation",
            ds(json!({}), json!({"observedGeneration": 1})),
            InProgress,
            Some("NoGeneration"),
            "DaemonSet metadata.generation not found"
        ),
        case!(
            "no observed generation",
            ds(g.clone(), json!({})),
            InProgress,
            Some("NoObservedGeneration"),
            "DaemonSet status.observedGeneration not found"
        ),
        case!(
            "no desired number",
            ds(g.clone(), json!({"observedGeneration": 1})),
            InProgress,
            Some("NoDesiredNumber"),
            "Missing .status.desiredNumberScheduled"
        ),
        case!(
            "less current",
            ds(g.clone(), full(json!({"currentNumberScheduled": 1}))),
            InProgress,
            Some("LessCurrent"),
            "Current: 1/3"
        ),
        case!(
            "less updated",
            ds(g.clone(), full(json!({"updatedNumberScheduled": 2}))),
            InProgress,
            Some("LessUpdated"),
            "Updated: 2/3"
        ),
        case!(
            "less available",
            ds(g.clone(), full(json!({"numberAvailable": 0}))),
            InProgress,
            Some("LessAvailable"),
            "Available: 0/3"
        ),
        case!(
            "less ready",
            ds(g.clone(), full(json!({"numberReady": 2}))),
            InProgress,
            Some("LessReady"),
            "Ready: 2/3"
        ),
        case!(
            "current",
            ds(g.clone(), full(json!({}))),
            Current,
            None,
            "All replicas scheduled as expected. Replicas: 3"
        ),
        case!(
            "zero desired is current",
            ds(
                g.clone(),
                json!({"observedGeneration": 1, "desiredNumberScheduled": 0})
            ),
            Current,
            None,
            "All replicas scheduled as expected. Replicas: 0"
        ),
        case!(
            "generation mismatch first",
            ds(json!({"generation": 2}), full(json!({}))),
            InProgress,
            Some("LatestGenerationNotObserved"),
            "DaemonSet generation is 2, but latest observed generation is 1"
        ),
    ]);
}

#[test]
fn replica_set() {
    let rs = |spec: Value, status: Value| {
        obj(
            "apps/v1",
            "ReplicaSet",
            json!({"spec": spec, "status": status}),
        )
    };
    let full = json!({"replicas": 2, "fullyLabeledReplicas": 2, "availableReplicas": 2, "readyReplicas": 2});
    check(vec![
        case!(
            "replica failure",
            rs(
                json!({"replicas": 2}),
                json!({"conditions": [cond("ReplicaFailure", "True", "FailedCreate", "quota")]})
            ),
            InProgress,
            Some("ReplicaFailure"),
            "Replica Failure condition. Check Pods"
        ),
        case!(
            "less labelled",
            rs(json!({"replicas": 2}), json!({"fullyLabeledReplicas": 1})),
            InProgress,
            Some("LessLabelled"),
            "Labelled: 1/2"
        ),
        case!(
            "less available",
            rs(
                json!({"replicas": 2}),
                json!({"fullyLabeledReplicas": 2, "availableReplicas": 1})
            ),
            InProgress,
            Some("LessAvailable"),
            "Available: 1/2"
        ),
        case!(
            "less ready",
            rs(
                json!({"replicas": 2}),
                json!({"fullyLabeledReplicas": 2, "availableReplicas": 2, "readyReplicas": 0})
            ),
            InProgress,
            Some("LessReady"),
            "Ready: 0/2"
        ),
        case!(
            "extra pods",
            rs(
                json!({"replicas": 2}),
                json!({"replicas": 3, "fullyLabeledReplicas": 2, "availableReplicas": 2, "readyReplicas": 2})
            ),
            InProgress,
            Some("ExtraPods"),
            "Pending termination: 1"
        ),
        case!(
            "current",
            rs(json!({"replicas": 2}), full),
            Current,
            None,
            "ReplicaSet is available. Replicas: 2"
        ),
    ]);
}

fn pod(meta: Value, status: Value) -> Value {
    obj("v1", "Pod", json!({"metadata": meta, "status": status}))
}

#[test]
fn pods() {
    let unschedulable = json!([cond("PodScheduled", "False", "Unschedulable", "0/3 nodes")]);
    check(vec![
        case!(
            "succeeded",
            pod(json!({}), json!({"phase": "Succeeded"})),
            Current,
            None,
            "Pod has completed successfully"
        ),
        case!(
            "failed phase is Current by design",
            pod(json!({}), json!({"phase": "Failed"})),
            Current,
            None,
            "Pod has completed, but not successfully"
        ),
        case!(
            "running and ready",
            pod(
                json!({}),
                json!({"phase": "Running", "conditions": [cond("Ready", "True", "", "")]})
            ),
            Current,
            None,
            "Pod is Ready"
        ),
        case!(
            "crash looping",
            pod(
                json!({}),
                json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            {"name": "b", "state": {"running": {}}},
            {"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})
            ),
            Failed,
            Some("ContainerCrashLooping"),
            "Containers in CrashLoop state: a,c"
        ),
        case!(
            "init container crash loop is not seen",
            pod(
                json!({}),
                json!({"phase": "Running", "initContainerStatuses": [{"name": "i", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})
            ),
            InProgress,
            Some("PodRunningNotReady"),
            "Pod is running but is not Ready"
        ),
        case!(
            "image pull backoff is just in progress",
            pod(
                json!({}),
                json!({"phase": "Running", "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]})
            ),
            InProgress,
            Some("PodRunningNotReady"),
            "Pod is running but is not Ready"
        ),
        case!(
            "ready wins over crash loop",
            pod(
                json!({}),
                json!({"phase": "Running", "conditions": [cond("Ready", "True", "", "")], "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})
            ),
            Current,
            None,
            "Pod is Ready"
        ),
        case!(
            "running not ready",
            pod(
                json!({}),
                json!({"phase": "Running", "conditions": [cond("Ready", "False", "ContainersNotReady", "")]})
            ),
            InProgress,
            Some("PodRunningNotReady"),
            "Pod is running but is not Ready"
        ),
        case!(
            "pending",
            pod(json!({}), json!({"phase": "Pending"})),
            InProgress,
            Some("PodPending"),
            "Pod is in the Pending phase"
        ),
        case!(
            "unschedulable within the window",
            pod(
                json!({"creationTimestamp": "2026-01-01T00:00:50Z"}),
                json!({"phase": "Pending", "conditions": unschedulable})
            ),
            InProgress,
            Some("PodNotScheduled"),
            "Pod has not been scheduled"
        ),
        case!(
            "unschedulable at exactly 15 s fails",
            pod(
                json!({"creationTimestamp": "2026-01-01T00:00:45Z"}),
                json!({"phase": "Pending", "conditions": unschedulable})
            ),
            Failed,
            Some("PodUnschedulable"),
            "Pod could not be scheduled"
        ),
        case!(
            "unschedulable after the window",
            pod(
                json!({"creationTimestamp": "2026-01-01T00:00:00Z"}),
                json!({"phase": "Pending", "conditions": unschedulable})
            ),
            Failed,
            Some("PodUnschedulable"),
            "Pod could not be scheduled"
        ),
        case!(
            "unschedulable without creation time is old",
            pod(
                json!({}),
                json!({"phase": "Pending", "conditions": unschedulable})
            ),
            Failed,
            Some("PodUnschedulable"),
            "Pod could not be scheduled"
        ),
        case!(
            "other scheduling reason is pending",
            pod(
                json!({}),
                json!({"phase": "Pending", "conditions": [cond("PodScheduled", "False", "SchedulerError", "")]})
            ),
            InProgress,
            Some("PodPending"),
            "Pod is in the Pending phase"
        ),
        case!(
            "no phase",
            pod(json!({}), json!({})),
            InProgress,
            Some("PodNotObserved"),
            "Pod phase not available"
        ),
        case!(
            "unknown phase is an error",
            pod(json!({}), json!({"phase": "Unknown"})),
            Unknown,
            None,
            "unknown phase Unknown"
        ),
        case!(
            "terminating pod",
            pod(
                json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
                json!({"phase": "Running"})
            ),
            Terminating,
            None,
            "Resource scheduled for deletion"
        ),
    ]);
}

#[test]
fn pvc_service_job_crd() {
    let pvc = |status: Value| obj("v1", "PersistentVolumeClaim", json!({"status": status}));
    let svc = |spec: Value| obj("v1", "Service", json!({"spec": spec}));
    let job = |spec: Value, status: Value| {
        obj("batch/v1", "Job", json!({"spec": spec, "status": status}))
    };
    let crd = |conds: Value| {
        obj(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            json!({"status": {"conditions": conds}}),
        )
    };
    check(vec![
        case!(
            "pvc bound",
            pvc(json!({"phase": "Bound"})),
            Current,
            None,
            "PVC is Bound"
        ),
        case!(
            "pvc pending",
            pvc(json!({"phase": "Pending"})),
            InProgress,
            Some("NotBound"),
            "PVC is not Bound. phase: Pending"
        ),
        case!(
            "pvc without phase",
            pvc(json!({})),
            InProgress,
            Some("NotBound"),
            "PVC is not Bound. phase: unknown"
        ),
        case!(
            "service cluster ip",
            svc(json!({"clusterIP": "10.0.0.1"})),
            Current,
            None,
            "Service is ready"
        ),
        case!(
            "service load balancer without ip",
            svc(json!({"type": "LoadBalancer"})),
            InProgress,
            Some("NoIPAssigned"),
            "ClusterIP not set. Service type: LoadBalancer"
        ),
        case!(
            "service load balancer with ip",
            svc(json!({"type": "LoadBalancer", "clusterIP": "10.0.0.2"})),
            Current,
            None,
            "Service is ready"
        ),
        case!(
            "service external name",
            svc(json!({"type": "ExternalName"})),
            Current,
            None,
            "Service is ready"
        ),
        case!(
            "job complete",
            job(
                json!({"completions": 3}),
                json!({"succeeded": 3, "conditions": [cond("Complete", "True", "", "")]})
            ),
            Current,
            None,
            "Job Completed. succeeded: 3/3"
        ),
        case!(
            "job failed",
            job(
                json!({"parallelism": 2}),
                json!({"failed": 4, "conditions": [cond("Failed", "True", "BackoffLimitExceeded", "")]})
            ),
            Failed,
            Some("JobFailed"),
            "Job Failed. failed: 4/2"
        ),
        case!(
            "job suspended",
            job(
                json!({"suspend": true}),
                json!({"conditions": [cond("Suspended", "True", "", "")]})
            ),
            Current,
            None,
            "Job is suspended"
        ),
        case!(
            "job suspended condition without spec.suspend",
            job(
                json!({}),
                json!({"conditions": [cond("Suspended", "True", "", "")]})
            ),
            InProgress,
            Some("JobNotStarted"),
            "Job not started"
        ),
        case!(
            "job not started",
            job(json!({}), json!({})),
            InProgress,
            Some("JobNotStarted"),
            "Job not started"
        ),
        case!(
            "running job is current",
            job(
                json!({}),
                json!({"startTime": "2026-01-01T00:00:00Z", "active": 1, "succeeded": 0})
            ),
            Current,
            None,
            "Job in progress. success:0, active: 1, failed: 0"
        ),
        case!(
            "crd established",
            crd(json!([
                cond("NamesAccepted", "True", "", ""),
                cond("Established", "True", "", "")
            ])),
            Current,
            None,
            "CRD is established"
        ),
        case!(
            "crd names not accepted",
            crd(json!([cond(
                "NamesAccepted",
                "False",
                "MultipleNamesNotAllowed",
                "conflict"
            )])),
            Failed,
            Some("MultipleNamesNotAllowed"),
            "conflict"
        ),
        case!(
            "crd establishing failed",
            crd(json!([cond("Established", "False", "Conflict", "x")])),
            Failed,
            Some("Conflict"),
            "x"
        ),
        case!(
            "crd installing",
            crd(json!([cond("Established", "False", "Installing", "")])),
            InProgress,
            Some("Installing"),
            "Install in progress"
        ),
        case!(
            "crd no conditions",
            crd(json!([])),
            InProgress,
            Some("Installing"),
            "Install in progress"
        ),
        case!(
            "crd order matters",
            crd(json!([
                cond("Established", "True", "", ""),
                cond("NamesAccepted", "False", "X", "y")
            ])),
            Current,
            None,
            "CRD is established"
        ),
    ]);
}
