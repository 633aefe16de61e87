//! Table tests of the rollout planner: one reconcile, given → expect.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use core_rollout::observed::Observed;
use core_rollout::plan::{
    DelayedCalls, Plan, ReplicaChange, delayed_downscale_calls, max_unavailable,
    parse_prometheus_duration, plan, prepared_at, replica_patch,
};
use jiff::Timestamp;
use serde_json::{Value, json};

const NOW: &str = "2026-01-01T12:00:00Z";

fn sts(zone: &str, replicas: i32, ready: i32, current: &str, update: &str, extra: Value) -> Value {
    let name = format!("ingester-zone-{zone}");
    let mut s = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "mimir", "labels": {"rollout-group": "ingester"}, "annotations": {}},
        "spec": {"replicas": replicas, "serviceName": "ingester", "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"name": name}},
            "template": {"metadata": {"labels": {"name": name, "rollout-group": "ingester"}}, "spec": {"containers": [{"name": "ingester", "image": "x"}]}}},
        "status": {"replicas": replicas, "readyReplicas": ready, "currentRevision": current, "updateRevision": update}
    });
    merge(&mut s, extra);
    s
}

fn merge(target: &mut Value, extra: Value) {
    match (target, extra) {
        (Value::Object(t), Value::Object(e)) => {
            for (k, v) in e {
                merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
        (t, e) => *t = e,
    }
}

/// A pod of zone `zone`, ordinal `i`, at `revision`; `state` is "ready", "notready",
/// "terminating" or a waiting reason.
fn pod(zone: &str, i: usize, revision: &str, state: &str) -> Value {
    let sts = format!("ingester-zone-{zone}");
    let (ready, container_state) = match state {
        "ready" | "terminating" => (true, json!({"running": {}})),
        "notready" => (false, json!({"running": {}})),
        reason => (false, json!({"waiting": {"reason": reason}})),
    };
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{sts}-{i}"), "namespace": "mimir",
            "labels": {"name": sts, "rollout-group": "ingester", "controller-revision-hash": revision},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts, "uid": "u", "controller": true}]},
        "spec": {"containers": [{"name": "ingester", "image": "x"}]},
        "status": {"phase": "Running", "podIP": format!("10.1.0.{i}"), "containerStatuses": [{"name": "ingester", "image": "x", "imageID": "", "restartCount": 0, "ready": ready, "state": container_state}]}
    });
    if state == "terminating" {
        p["metadata"]["deletionTimestamp"] = json!("2026-01-01T11:59:00Z");
    }
    p
}

fn zone(
    zone: &str,
    replicas: i32,
    current: &str,
    update: &str,
    pods: &[(&str, &str)],
    extra: Value,
) -> Vec<Value> {
    let ready = pods
        .iter()
        .filter(|(_, s)| *s == "ready" || *s == "terminating")
        .count() as i32;
    let mut docs = vec![sts(zone, replicas, ready, current, update, extra)];
    docs.extend(
        pods.iter()
            .enumerate()
            .map(|(i, (rev, state))| pod(zone, i, rev, state)),
    );
    docs
}

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn run(docs: Vec<Value>) -> Plan {
    run_with(docs, |_| {})
}

fn run_with(docs: Vec<Value>, tweak: impl FnOnce(&mut Observed)) -> Plan {
    let mut observed =
        Observed::from_documents("test", docs.into_iter().enumerate().collect()).unwrap();
    tweak(&mut observed);
    plan(&observed, NOW.parse::<Timestamp>().unwrap())
}

fn deletes(p: &Plan) -> Vec<&str> {
    p.delete_pods.iter().map(String::as_str).collect()
}

const UP: (&str, &str) = ("v2", "ready");
const OLD: (&str, &str) = ("v1", "ready");

#[test]
fn rolls_one_zone_lowest_ordinal_first_within_budget() {
    let mut docs = zone(
        "a",
        3,
        "v1",
        "v2",
        &[OLD, OLD, OLD],
        json!({"metadata": {"annotations": {"rollout-max-unavailable": "2"}}}),
    );
    docs.extend(zone("b", 3, "v1", "v2", &[OLD, OLD, OLD], json!({})));
    let p = run(docs);
    assert_eq!(
        deletes(&p),
        vec!["mimir/ingester-zone-a-0", "mimir/ingester-zone-a-1"]
    );
    assert!(
        p.errors.is_empty() && p.status_updates.is_empty() && p.replica_changes.is_empty(),
        "{p:?}"
    );
}

#[test]
fn natural_order_puts_2_before_10() {
    let pods: Vec<(&str, &str)> = (0..11)
        .map(|i| if i == 2 || i == 10 { OLD } else { UP })
        .collect();
    let mut docs = zone("a", 11, "v1", "v2", &pods, json!({}));
    docs.extend(zone("b", 1, "v2", "v2", &[UP], json!({})));
    assert_eq!(deletes(&run(docs)), vec!["mimir/ingester-zone-a-2"]);
}

#[test]
fn the_not_ready_zone_goes_first() {
    let mut docs = zone("a", 2, "v1", "v2", &[OLD, OLD], json!({}));
    docs.extend(zone(
        "b",
        2,
        "v1",
        "v2",
        &[("v2", "notready"), OLD],
        json!({"metadata": {"annotations": {"rollout-max-unavailable": "2"}}}),
    ));
    assert_eq!(deletes(&run(docs)), vec!["mimir/ingester-zone-b-1"]);
}

#[test]
fn two_not_ready_zones_stop_the_group() {
    let mut docs = zone("a", 2, "v1", "v2", &[("v1", "notready"), OLD], json!({}));
    docs.extend(zone(
        "b",
        2,
        "v1",
        "v2",
        &[("v1", "notready"), OLD],
        json!({}),
    ));
    assert_eq!(run(docs), Plan::default());
}

#[test]
fn a_non_on_delete_member_skips_the_group() {
    let mut docs = zone("a", 1, "v1", "v2", &[OLD], json!({}));
    docs.extend(zone(
        "b",
        1,
        "v1",
        "v2",
        &[OLD],
        json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}}}),
    ));
    let p = run(docs);
    assert!(p.delete_pods.is_empty());
    assert_eq!(
        p.errors,
        vec![
            "StatefulSet mimir/ingester-zone-b has RollingUpdate update strategy while OnDelete is expected, skipping reconcile"
        ]
    );
}

#[test]
fn paused_zone_is_skipped_but_still_blocks_when_not_ready() {
    let paused = json!({"metadata": {"annotations": {"grafana.com/rollout-paused": "true"}}});
    let mut docs = zone("a", 1, "v1", "v2", &[OLD], paused.clone());
    docs.extend(zone("b", 1, "v1", "v2", &[OLD], json!({})));
    assert_eq!(
        deletes(&run(docs)),
        vec!["mimir/ingester-zone-b-0"],
        "paused zone skipped, next rolled"
    );
    // FIX: a paused zone with not-ready pods must not let another zone roll.
    let mut docs = zone("a", 2, "v1", "v2", &[("v1", "notready"), OLD], paused);
    docs.extend(zone("b", 1, "v1", "v2", &[OLD], json!({})));
    assert_eq!(run(docs), Plan::default());
}

#[test]
fn terminating_pods_not_yet_in_status_use_the_budget() {
    // Status still counts the terminating pod as ready (3/3): the anchor would delete another.
    let mut docs = zone(
        "a",
        3,
        "v1",
        "v2",
        &[("v1", "terminating"), OLD, OLD],
        json!({}),
    );
    docs.extend(zone("b", 3, "v2", "v2", &[UP, UP, UP], json!({})));
    let p = run(docs);
    assert!(p.delete_pods.is_empty(), "{p:?}");
}

#[test]
fn terminating_pods_take_a_slot_but_are_not_deleted_again() {
    let mut docs = zone(
        "a",
        3,
        "v1",
        "v2",
        &[("v1", "terminating"), OLD, OLD],
        json!({"metadata": {"annotations": {"rollout-max-unavailable": "3"}}}),
    );
    docs.extend(zone("b", 3, "v2", "v2", &[UP, UP, UP], json!({})));
    // Budget 3, pod-0 terminating holds one slot: the two left go to pod-1 and pod-2.
    assert_eq!(
        deletes(&run(docs)),
        vec!["mimir/ingester-zone-a-1", "mimir/ingester-zone-a-2"]
    );
}

#[test]
fn a_terminating_pod_leaves_the_other_slot_of_a_batch_of_two() {
    // The anchor's rule: a batch of 2 with pod-0 already terminating deletes pod-1 into the slot
    // it leaves, whether or not status still counts pod-0 ready, and never deletes pod-0 again.
    for status_ready in [3, 2] {
        let mut docs = zone(
            "a",
            3,
            "v1",
            "v2",
            &[("v1", "terminating"), OLD, OLD],
            json!({"metadata": {"annotations": {"rollout-max-unavailable": "2"}},
                   "status": {"readyReplicas": status_ready}}),
        );
        docs.extend(zone("b", 3, "v2", "v2", &[UP, UP, UP], json!({})));
        assert_eq!(
            deletes(&run(docs)),
            vec!["mimir/ingester-zone-a-1"],
            "status ready {status_ready}"
        );
    }
    // pod-1 terminating in the middle: the one slot left goes to the lowest other ordinal.
    let mut docs = zone(
        "a",
        3,
        "v1",
        "v2",
        &[OLD, ("v1", "terminating"), OLD],
        json!({"metadata": {"annotations": {"rollout-max-unavailable": "2"}}}),
    );
    docs.extend(zone("b", 3, "v2", "v2", &[UP, UP, UP], json!({})));
    assert_eq!(deletes(&run(docs)), vec!["mimir/ingester-zone-a-0"]);
}

#[test]
fn finished_zone_gets_its_current_revision_advanced() {
    let mut docs = zone("a", 2, "v1", "v2", &[UP, UP], json!({}));
    docs.extend(zone("b", 2, "v1", "v2", &[OLD, OLD], json!({})));
    let p = run(docs);
    assert_eq!(p.status_updates, vec!["mimir/ingester-zone-a"]);
    assert_eq!(deletes(&p), vec!["mimir/ingester-zone-b-0"]);
}

#[test]
fn empty_update_revision_is_an_error() {
    let p = run(zone("a", 1, "v1", "", &[OLD], json!({})));
    assert_eq!(
        p.errors,
        vec!["StatefulSet mimir/ingester-zone-a: updateRevision is empty"]
    );
}

#[test]
fn stuck_outdated_pods_are_replaced_beyond_the_budget() {
    let mut docs = zone(
        "a",
        3,
        "v1",
        "v2",
        &[("v1", "CrashLoopBackOff"), ("v1", "ImagePullBackOff"), OLD],
        json!({}),
    );
    docs.extend(zone("b", 3, "v2", "v2", &[UP, UP, UP], json!({})));
    assert_eq!(
        deletes(&run(docs)),
        vec!["mimir/ingester-zone-a-0", "mimir/ingester-zone-a-1"]
    );
}

fn follower(extra: Value) -> Vec<Value> {
    let mut docs = zone("a", 5, "v1", "v1", &[], json!({}));
    let mut f = json!({"metadata": {"annotations": {"grafana.com/rollout-downscale-leader": "ingester-zone-a"}}});
    merge(&mut f, extra);
    docs.extend(zone("b", 3, "v1", "v1", &[], f));
    docs
}

#[test]
fn follower_scales_up_to_the_leader_and_stops_there() {
    let p = run(follower(json!({})));
    assert_eq!(
        p.replica_changes,
        vec![ReplicaChange {
            stateful_set: "mimir/ingester-zone-b".into(),
            from: 3,
            to: 5
        }]
    );
    assert!(p.delete_pods.is_empty());
    // Only when the leader is ready, if asked to.
    let p = run(follower(
        json!({"metadata": {"annotations": {"grafana.com/rollout-upscale-only-when-leader-ready": "true"}}}),
    ));
    assert!(p.replica_changes.is_empty(), "leader has 0/5 ready: {p:?}");
}

#[test]
fn follower_downscale_waits_for_min_time_between_zones() {
    let mut docs = zone(
        "a",
        2,
        "v1",
        "v1",
        &[],
        json!({"metadata": {"annotations": {"grafana.com/last-downscale": "2026-01-01T11:50:00Z"}}}),
    );
    let f = json!({"metadata": {"labels": {"grafana.com/min-time-between-zones-downscale": "30m"},
        "annotations": {"grafana.com/rollout-downscale-leader": "ingester-zone-a"}}});
    docs.extend(zone("b", 4, "v1", "v1", &[], f.clone()));
    assert!(
        run(docs.clone()).replica_changes.is_empty(),
        "10 min since the last downscale, 30 min required"
    );
    docs[0]["metadata"]["annotations"]["grafana.com/last-downscale"] =
        json!("2026-01-01T11:00:00Z");
    assert_eq!(run(docs).replica_changes[0].to, 2);
}

#[test]
fn missing_leader_is_reported_and_the_rollout_continues() {
    let mut docs = zone(
        "a",
        1,
        "v1",
        "v2",
        &[OLD],
        json!({"metadata": {"annotations": {"grafana.com/rollout-downscale-leader": "nope"}}}),
    );
    docs.extend(zone("b", 1, "v2", "v2", &[UP], json!({})));
    let p = run(docs);
    // The anchor only logs this: the group's reconcile must not count as failed.
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    assert_eq!(
        p.warnings,
        vec!["rollout group ingester: could not find leader for ingester-zone-a: nope"]
    );
    assert_eq!(deletes(&p), vec!["mimir/ingester-zone-a-0"]);
}

#[test]
fn force_replicas_overrides() {
    let p = run(follower(
        json!({"metadata": {"annotations": {"grafana.com/rollout-force-replicas": "1"}}}),
    ));
    assert_eq!(p.replica_changes[0].to, 1);
    // FIX: also without a leader.
    let p = run(zone(
        "a",
        3,
        "v1",
        "v1",
        &[],
        json!({"metadata": {"annotations": {"grafana.com/rollout-force-replicas": "7"}}}),
    ));
    assert_eq!(p.replica_changes[0].to, 7);
    let p = run(zone(
        "a",
        3,
        "v1",
        "v1",
        &[],
        json!({"metadata": {"annotations": {"grafana.com/rollout-force-replicas": "-1"}}}),
    ));
    assert!(p.replica_changes.is_empty(), "negative values are ignored");
}

fn mirrored(spec_replicas: i64, extra: Value) -> Vec<Value> {
    let mut ann = json!({"metadata": {"annotations": {
        "grafana.com/rollout-mirror-replicas-from-resource-name": "ingester-zone-a",
        "grafana.com/rollout-mirror-replicas-from-resource-kind": "ReplicaTemplate",
        "grafana.com/rollout-mirror-replicas-from-resource-api-version": "rollout-operator.grafana.com/v1"}}});
    merge(&mut ann, extra);
    let mut docs = zone("a", 5, "v1", "v1", &[OLD; 5], ann);
    docs.push(json!({"apiVersion": "rollout-operator.grafana.com/v1", "kind": "ReplicaTemplate",
        "metadata": {"name": "ingester-zone-a", "namespace": "mimir"}, "spec": {"replicas": spec_replicas}, "status": {"replicas": 5}}));
    docs
}

/// Three zones mirroring one ReplicaTemplate at `reference`, each labelled to wait 10 minutes
/// between zone downscales; `zones` gives each zone's replicas and `last-downscale` (if any).
fn three_mirrored(reference: i64, zones: [(i32, Option<&str>); 3], extra: Value) -> Vec<Value> {
    let mut docs = Vec::new();
    for (zone_name, (replicas, last)) in ["a", "b", "c"].into_iter().zip(zones) {
        let mut ann = json!({"metadata": {
            "labels": {"grafana.com/min-time-between-zones-downscale": "10m"},
            "annotations": {
            "grafana.com/rollout-mirror-replicas-from-resource-name": "ingester",
            "grafana.com/rollout-mirror-replicas-from-resource-kind": "ReplicaTemplate",
            "grafana.com/rollout-mirror-replicas-from-resource-api-version": "rollout-operator.grafana.com/v1"}}});
        if let Some(last) = last {
            ann["metadata"]["annotations"]["grafana.com/last-downscale"] = json!(last);
        }
        merge(&mut ann, extra.clone());
        let pods = vec![OLD; replicas as usize];
        docs.extend(zone(zone_name, replicas, "v1", "v1", &pods, ann));
    }
    docs.push(
        json!({"apiVersion": "rollout-operator.grafana.com/v1", "kind": "ReplicaTemplate",
        "metadata": {"name": "ingester", "namespace": "mimir"}, "spec": {"replicas": reference}}),
    );
    docs
}

/// grafana/rollout-operator#303: zones mirroring a reference an HPA scales go down one at a
/// time, each its minimum time after the last zone downscale; an upscale never waits.
#[test]
fn mirrored_zones_go_down_one_at_a_time_a_minimum_time_apart() {
    let change = |p: &Plan| {
        p.replica_changes
            .iter()
            .map(|c| format!("{} {}->{}", c.stateful_set, c.from, c.to))
            .collect::<Vec<_>>()
    };
    // Nothing recorded yet: the first zone goes, alone.
    let p = run(three_mirrored(
        2,
        [(3, None), (3, None), (3, None)],
        json!({}),
    ));
    assert_eq!(change(&p), vec!["mimir/ingester-zone-a 3->2"]);
    // Zone a went 4 minutes ago: b and c wait the 6 minutes left.
    let p = run(three_mirrored(
        2,
        [(2, Some("2026-01-01T11:56:00Z")), (3, None), (3, None)],
        json!({}),
    ));
    assert!(p.replica_changes.is_empty(), "{:?}", change(&p));
    // Looked at again at the reference's pace, sooner than the 6 minutes left.
    assert_eq!(p.recheck_after, Some(core_rollout::plan::REFERENCE_POLL));
    // 11 minutes ago: b goes, and only b.
    let p = run(three_mirrored(
        2,
        [(2, Some("2026-01-01T11:49:00Z")), (3, None), (3, None)],
        json!({}),
    ));
    assert_eq!(change(&p), vec!["mimir/ingester-zone-b 3->2"]);
    // b went 1 minute ago: c waits for b's time, not a's.
    let p = run(three_mirrored(
        2,
        [
            (2, Some("2026-01-01T11:40:00Z")),
            (2, Some("2026-01-01T11:59:00Z")),
            (3, None),
        ],
        json!({}),
    ));
    assert!(p.replica_changes.is_empty(), "{:?}", change(&p));
    // An upscale right after a downscale is not delayed.
    let p = run(three_mirrored(
        4,
        [(2, Some("2026-01-01T11:59:00Z")), (3, None), (3, None)],
        json!({}),
    ));
    assert_eq!(change(&p), vec!["mimir/ingester-zone-a 2->4"]);
    // Without the label, no stagger (the anchor's behaviour), still one change per look.
    let mut unlabelled = three_mirrored(
        2,
        [(2, Some("2026-01-01T11:59:00Z")), (3, None), (3, None)],
        json!({}),
    );
    for doc in &mut unlabelled {
        if let Some(labels) = doc["metadata"]["labels"].as_object_mut() {
            labels.remove("grafana.com/min-time-between-zones-downscale");
        }
    }
    assert_eq!(change(&run(unlabelled)), vec!["mimir/ingester-zone-b 3->2"]);
    // A label that is not a duration is reported and nothing goes down.
    let p = run(three_mirrored(
        2,
        [(3, None), (3, None), (3, None)],
        json!({"metadata": {"labels": {"grafana.com/min-time-between-zones-downscale": "soon"}}}),
    ));
    assert!(p.replica_changes.is_empty());
    assert!(
        p.warnings.iter().any(|w| w.contains(
            "min-time-between-zones-downscale label of ingester-zone-a is not a duration: soon"
        )),
        "{:?}",
        p.warnings
    );
}

/// With a delayed downscale, only the zone whose turn it is gets its pods prepared; a zone
/// waiting for its turn has its pods told to cancel (once, until settled).
#[test]
fn only_the_zone_whose_turn_it_is_is_prepared() {
    let delayed = json!({"metadata": {"annotations": {"grafana.com/rollout-delayed-downscale": "1h",
        "grafana.com/rollout-prepare-delayed-downscale-url": "http://pod:8080/prepare"}}});
    let prepared = |docs: Vec<Value>| {
        delayed_downscale_calls(&observed(docs), &|_| false, now())
            .into_iter()
            .map(|c| {
                (
                    c.stateful_set,
                    c.prepare.into_iter().map(|(p, _)| p).collect::<Vec<_>>(),
                    c.cancel.len(),
                )
            })
            .collect::<Vec<_>>()
    };
    let a = |pods: &[&str]| pods.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    assert_eq!(
        prepared(three_mirrored(
            2,
            [(3, None), (3, None), (3, None)],
            delayed.clone()
        )),
        vec![
            ("mimir/ingester-zone-a".into(), a(&["ingester-zone-a-2"]), 2),
            ("mimir/ingester-zone-b".into(), vec![], 3),
            ("mimir/ingester-zone-c".into(), vec![], 3),
        ]
    );
    // a went 4 minutes ago: nobody is prepared until b's turn comes.
    let waiting = prepared(three_mirrored(
        2,
        [(2, Some("2026-01-01T11:56:00Z")), (3, None), (3, None)],
        delayed.clone(),
    ));
    assert!(waiting.iter().all(|(_, p, _)| p.is_empty()), "{waiting:?}");
    let turn = prepared(three_mirrored(
        2,
        [(2, Some("2026-01-01T11:49:00Z")), (3, None), (3, None)],
        delayed,
    ));
    assert_eq!(turn[1].1, a(&["ingester-zone-b-2"]));
    assert!(turn[2].1.is_empty());
}

#[test]
fn a_zone_downscale_records_its_time_in_the_same_write() {
    let change = |from, to| ReplicaChange {
        stateful_set: "mimir/ingester-zone-a".into(),
        from,
        to,
    };
    let labelled: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(sts(
        "a",
        3,
        3,
        "v1",
        "v1",
        json!({"metadata": {"labels": {"grafana.com/min-time-between-zones-downscale": "10m"}}}),
    ))
    .unwrap();
    let plain: k8s_openapi::api::apps::v1::StatefulSet =
        serde_json::from_value(sts("a", 3, 3, "v1", "v1", json!({}))).unwrap();
    assert_eq!(
        replica_patch(&labelled, &change(3, 2), now()),
        json!({"metadata": {"annotations": {"grafana.com/last-downscale": "2026-01-01T12:00:00Z"}}, "spec": {"replicas": 2}})
    );
    assert_eq!(
        replica_patch(&labelled, &change(2, 3), now()),
        json!({"spec": {"replicas": 3}})
    );
    assert_eq!(
        replica_patch(&plain, &change(3, 2), now()),
        json!({"spec": {"replicas": 2}})
    );
}

#[test]
fn a_mirroring_group_is_looked_at_again_at_the_anchors_pace() {
    let stable = run(mirrored(5, json!({})));
    assert!(stable.replica_changes.is_empty());
    assert_eq!(
        stable.recheck_after,
        Some(core_rollout::plan::REFERENCE_POLL)
    );
    let mut plain = zone("a", 3, "v1", "v1", &[UP, UP, UP], json!({}));
    plain.extend(zone("b", 3, "v1", "v1", &[UP, UP, UP], json!({})));
    assert_eq!(run(plain).recheck_after, None, "nothing to poll");
}

#[test]
fn mirrors_the_reference_scale() {
    assert_eq!(run(mirrored(8, json!({}))).replica_changes[0].to, 8);
    assert_eq!(
        run(mirrored(2, json!({}))).replica_changes[0].to,
        2,
        "no delay configured: immediate"
    );
    let mut docs = mirrored(2, json!({}));
    docs.pop();
    let p = run(docs);
    assert!(p.replica_changes.is_empty());
    assert!(
        p.errors.is_empty(),
        "an unreadable reference only warns: {:?}",
        p.errors
    );
    assert_eq!(
        p.warnings,
        vec![
            "rollout group ingester: failed to query scale subresource of ReplicaTemplate ingester-zone-a for ingester-zone-a: not found"
        ]
    );
}

#[test]
fn a_reference_scaled_to_zero_is_mirrored() {
    // The Scale API leaves spec.replicas out when it is 0.
    let mut docs = mirrored(0, json!({}));
    let reference = docs.last_mut().unwrap();
    reference["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let p = run(docs);
    assert!(p.errors.is_empty() && p.warnings.is_empty(), "{p:?}");
    assert_eq!(p.replica_changes.len(), 1, "{p:?}");
    assert_eq!(p.replica_changes[0].to, 0);
}

#[test]
fn an_invalid_zpdb_does_not_fail_the_groups() {
    let mut docs = zone("a", 1, "v1", "v2", &[OLD], json!({}));
    docs.extend(zone("b", 1, "v1", "v2", &[OLD], json!({})));
    docs.push(json!({"apiVersion": "rollout-operator.grafana.com/v1", "kind": "ZoneAwarePodDisruptionBudget",
        "metadata": {"name": "broken", "namespace": "mimir"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "other"}}, "podNamePartitionRegex": "("}}));
    let p = run(docs);
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    assert!(
        p.warnings[0].starts_with("ZoneAwarePodDisruptionBudget broken:"),
        "{:?}",
        p.warnings
    );
    assert_eq!(
        deletes(&p),
        vec!["mimir/ingester-zone-a-0"],
        "the rollout goes on"
    );
}

#[test]
fn delayed_downscale_is_partial_from_the_highest_ordinal() {
    let delayed = json!({"metadata": {"annotations": {"grafana.com/rollout-delayed-downscale": "1h",
        "grafana.com/rollout-prepare-delayed-downscale-url": "http://pod/prepare-delayed-downscale"}}});
    let two_hours_ago = NOW.parse::<Timestamp>().unwrap().as_second() - 7200;
    let half_hour_ago = two_hours_ago + 5400;
    let p = run_with(mirrored(2, delayed.clone()), |o| {
        o.prepared_at
            .insert("ingester-zone-a-4".into(), two_hours_ago);
        o.prepared_at
            .insert("ingester-zone-a-3".into(), half_hour_ago);
        o.prepared_at
            .insert("ingester-zone-a-2".into(), two_hours_ago);
    });
    assert_eq!(
        p.replica_changes,
        vec![ReplicaChange {
            stateful_set: "mimir/ingester-zone-a".into(),
            from: 5,
            to: 4
        }]
    );
    // Without the pods' answers there is no downscale at all.
    assert!(run(mirrored(2, delayed)).replica_changes.is_empty());
}

/// The decision of each delayed downscale names the pods, their times and what it waits for;
/// a pod that gave no time holds everything, even when the others prepared long ago.
#[test]
fn delayed_downscale_decisions_name_pods_times_and_reasons() {
    let delayed = json!({"metadata": {"annotations": {"grafana.com/rollout-delayed-downscale": "1h",
        "grafana.com/rollout-prepare-delayed-downscale-url": "http://pod/prepare-delayed-downscale"}}});
    let now = NOW.parse::<Timestamp>().unwrap().as_second();
    let (two_hours_ago, half_hour_ago) = (now - 7200, now - 1800);
    let decide = |times: &[(&str, i64)], failures: &[(&str, &str)]| {
        let p = run_with(mirrored(2, delayed.clone()), |o| {
            for (pod, at) in times {
                o.prepared_at.insert((*pod).into(), *at);
            }
            for (pod, why) in failures {
                o.prepare_failures.insert((*pod).into(), (*why).into());
            }
        });
        assert_eq!(p.delayed_downscales.len(), 1, "{p:?}");
        (p.delayed_downscales[0].clone(), p.replica_changes)
    };
    // Partial: pod 4 may go, pod 3 prepared half an hour ago waits.
    let (d, changes) = decide(
        &[
            ("ingester-zone-a-4", two_hours_ago),
            ("ingester-zone-a-3", half_hour_ago),
            ("ingester-zone-a-2", two_hours_ago),
        ],
        &[],
    );
    assert_eq!((d.from, d.desired, d.to), (5, 2, 4));
    assert_eq!(changes.len(), 1);
    assert_eq!(
        d.decision,
        "scale 5 -> 4: 1 pod(s) prepared at least 1h ago; next, ingester-zone-a-3 may go at 2026-01-01T12:30:00Z (1h after it prepared)"
    );
    assert_eq!(
        d.pods.iter().map(|p| p.pod.as_str()).collect::<Vec<_>>(),
        [
            "ingester-zone-a-4",
            "ingester-zone-a-3",
            "ingester-zone-a-2"
        ]
    );
    assert_eq!(
        d.pods[1].prepared_at.as_deref(),
        Some("2026-01-01T11:30:00Z")
    );
    // Waiting: the highest pod is not ready to go.
    let (d, changes) = decide(
        &[
            ("ingester-zone-a-4", half_hour_ago),
            ("ingester-zone-a-3", two_hours_ago),
            ("ingester-zone-a-2", two_hours_ago),
        ],
        &[],
    );
    assert!(changes.is_empty());
    assert_eq!(d.to, 5);
    assert!(
        d.decision
            .starts_with("waiting: ingester-zone-a-4 may go at 2026-01-01T12:30:00Z"),
        "{}",
        d.decision
    );
    // Held: pod 3 timed out, pod 2 answered garbage; pod 4 prepared long ago but nothing goes.
    let (d, changes) = decide(
        &[("ingester-zone-a-4", two_hours_ago)],
        &[
            ("ingester-zone-a-3", "timed out after 1s"),
            (
                "ingester-zone-a-2",
                "unparsable response: expected value at line 1 column 1",
            ),
        ],
    );
    assert!(changes.is_empty(), "never early: {changes:?}");
    assert_eq!(d.to, 5);
    assert_eq!(
        d.decision,
        "held: pod ingester-zone-a-3: timed out after 1s; pod ingester-zone-a-2: unparsable response: expected value at line 1 column 1; nothing is scaled down until every pod going away reports when it prepared"
    );
    assert_eq!(d.pods[1].problem.as_deref(), Some("timed out after 1s"));
    // No answer recorded at all (the offline plan): held, said so.
    let (d, _) = decide(&[], &[]);
    assert!(
        d.decision
            .contains("pod ingester-zone-a-4: did not report a preparation time"),
        "{}",
        d.decision
    );
}

fn observed(docs: Vec<Value>) -> Observed {
    Observed::from_documents("test", docs.into_iter().enumerate().collect()).unwrap()
}

#[test]
fn delayed_downscale_prepares_leaving_pods_and_cancels_staying_ones() {
    let delayed = json!({"metadata": {"annotations": {"grafana.com/rollout-delayed-downscale": "1h",
        "grafana.com/rollout-prepare-delayed-downscale-url": "http://pod:8080/ingester/prepare-delayed-downscale?x=1"}}});
    // Each pod at its own IP (the helper gives ordinal i the address 10.1.0.i).
    let url = |i: usize| format!("http://10.1.0.{i}:8080/ingester/prepare-delayed-downscale?x=1");
    let never_settled = |_: &str| false;
    // Downscale 5 -> 2: ordinals 2..5 prepare, 0..2 cancel.
    let calls = delayed_downscale_calls(
        &observed(mirrored(2, delayed.clone())),
        &never_settled,
        now(),
    );
    assert_eq!(
        calls,
        vec![DelayedCalls {
            stateful_set: "mimir/ingester-zone-a".into(),
            prepare: (2..5)
                .map(|i| (format!("ingester-zone-a-{i}"), url(i)))
                .collect(),
            unreachable: vec![],
            cancel: vec![url(0), url(1)],
            cancel_owed: vec![],
        }]
    );
    // A pod going away that has no address, or is not this StatefulSet's, cannot be called:
    // named, so that it holds the downscale as a failed call would. A staying pod without an
    // address is not running: nothing to cancel.
    let mut docs = mirrored(2, delayed.clone());
    for doc in &mut docs {
        match doc["metadata"]["name"].as_str() {
            Some("ingester-zone-a-4" | "ingester-zone-a-1") => {
                doc["status"]["podIP"] = Value::Null;
            }
            Some("ingester-zone-a-3") => {
                doc["metadata"]["ownerReferences"][0]["name"] = json!("someone-else");
            }
            _ => {}
        }
    }
    let calls = delayed_downscale_calls(&observed(docs), &never_settled, now());
    assert_eq!(calls[0].prepare, vec![("ingester-zone-a-2".into(), url(2))]);
    assert_eq!(
        calls[0].unreachable,
        vec![
            (
                "ingester-zone-a-3".to_string(),
                "pod ingester-zone-a-3 of this StatefulSet does not exist".to_string()
            ),
            (
                "ingester-zone-a-4".to_string(),
                "pod ingester-zone-a-4 has no IP address yet".to_string()
            ),
        ]
    );
    assert_eq!(calls[0].cancel, vec![url(0)]);
    assert_eq!(calls[0].cancel_owed, vec!["ingester-zone-a-1".to_string()]);
    // Stable (or scaling up): every pod cancels — once, until a preparation happens again.
    let stable = observed(mirrored(5, delayed.clone()));
    let calls = delayed_downscale_calls(&stable, &never_settled, now());
    assert_eq!(calls[0].cancel, (0..5).map(url).collect::<Vec<_>>());
    assert!(calls[0].prepare.is_empty());
    assert!(delayed_downscale_calls(&stable, &|k| k == "mimir/ingester-zone-a", now()).is_empty());
    // A forced replica count is the target too.
    let forced = json!({"metadata": {"annotations": {"grafana.com/rollout-force-replicas": "4"}}});
    let mut both = delayed.clone();
    merge(&mut both, forced);
    let calls = delayed_downscale_calls(&observed(mirrored(5, both)), &never_settled, now());
    assert_eq!(
        calls[0].prepare,
        vec![("ingester-zone-a-4".to_string(), url(4))]
    );
    // Not configured, zero or invalid delay, or no reference: no calls.
    let mut zero = delayed.clone();
    merge(
        &mut zero,
        json!({"metadata": {"annotations": {"grafana.com/rollout-delayed-downscale": "0s"}}}),
    );
    let mut bad = delayed.clone();
    merge(
        &mut bad,
        json!({"metadata": {"annotations": {"grafana.com/rollout-delayed-downscale": "soon"}}}),
    );
    let mut unreferenced = mirrored(2, delayed);
    unreferenced.pop();
    for docs in [
        mirrored(2, json!({})),
        mirrored(2, zero),
        mirrored(2, bad),
        unreferenced,
    ] {
        assert!(delayed_downscale_calls(&observed(docs), &never_settled, now()).is_empty());
    }
}

#[test]
fn prepared_at_needs_a_2xx_json_timestamp() {
    assert_eq!(
        prepared_at(200, br#"{"timestamp": 1767268800}"#),
        Ok(1767268800)
    );
    for (status, body, why) in [
        (500, &br#"{"timestamp": 1}"#[..], "HTTP status 500"),
        (200, b"not json", "unparsable response"),
        (200, br#"{"timestamp": 0}"#, "no non-zero timestamp"),
        (200, br#"{"other": 1}"#, "no non-zero timestamp"),
    ] {
        let err = prepared_at(status, body).unwrap_err();
        assert!(err.contains(why), "{err}");
    }
}

#[test]
fn zone_aware_pdb_limits_deletions() {
    let mut docs = zone(
        "a",
        3,
        "v1",
        "v2",
        &[OLD, OLD, OLD],
        json!({"metadata": {"annotations": {"rollout-max-unavailable": "3"}}}),
    );
    docs.extend(zone("b", 3, "v2", "v2", &[UP, UP, UP], json!({})));
    docs.push(json!({"apiVersion": "rollout-operator.grafana.com/v1", "kind": "ZoneAwarePodDisruptionBudget",
        "metadata": {"name": "ingester", "namespace": "mimir"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"rollout-group": "ingester"}}}}));
    // The operator's budget is 3, the ZPDB's 1: only the first deletion is allowed.
    assert_eq!(deletes(&run(docs)), vec!["mimir/ingester-zone-a-0"]);
}

#[test]
fn max_unavailable_parsing() {
    let with = |value: Option<&str>, replicas: i32| {
        let mut s = sts("a", replicas, replicas, "v1", "v1", json!({}));
        if let Some(v) = value {
            s["metadata"]["annotations"]["rollout-max-unavailable"] = json!(v);
        }
        max_unavailable(&serde_json::from_value(s).unwrap())
    };
    let cases = [
        (None, 10, 1),
        (Some("3"), 10, 3),
        (Some(" 2 "), 10, 2),
        (Some("0"), 10, 1),
        (Some("-1"), 10, 1),
        (Some("x"), 10, 1),
        (Some("25%"), 10, 2),
        (Some("5%"), 10, 1),
        (Some("100%"), 10, 10),
        (Some("0%"), 10, 1),
        (Some("101%"), 10, 1),
    ];
    for (value, replicas, want) in cases {
        assert_eq!(with(value, replicas), want, "{value:?} of {replicas}");
    }
}

#[test]
fn prometheus_durations() {
    let secs = |t: &str| parse_prometheus_duration(t).map(|d| d.as_secs());
    assert_eq!(secs("30m"), Some(1800));
    assert_eq!(secs("1d12h"), Some(129_600));
    assert_eq!(secs("2w"), Some(1_209_600));
    assert_eq!(secs("1y"), Some(31_536_000));
    assert_eq!(secs("10"), None);
    assert_eq!(secs("1x"), None);
}

#[test]
fn a_blocked_downscale_asks_to_be_looked_at_again_when_it_may_proceed() {
    let mut docs = zone(
        "a",
        2,
        "v1",
        "v1",
        &[],
        json!({"metadata": {"annotations": {"grafana.com/last-downscale": "2026-01-01T11:50:00Z"}}}),
    );
    let f = json!({"metadata": {"labels": {"grafana.com/min-time-between-zones-downscale": "30m"},
        "annotations": {"grafana.com/rollout-downscale-leader": "ingester-zone-a"}}});
    docs.extend(zone("b", 4, "v1", "v1", &[], f));
    let p = run(docs);
    assert!(p.replica_changes.is_empty());
    let after = p.recheck_after.expect("a recheck time").as_secs();
    assert_eq!(after, 1200, "20 minutes left of the 30");
}

#[test]
fn a_zone_whose_deleted_pod_is_not_back_yet_still_blocks_the_next() {
    // Zone a: spec 3, status already shrank to 2/2 Ready, only two pods exist (the third was
    // just deleted and is not recreated yet). Zone b must not start.
    let mut docs = zone(
        "a",
        3,
        "v1",
        "v2",
        &[UP, UP],
        json!({"status": {"replicas": 2, "readyReplicas": 2}}),
    );
    docs.extend(zone("b", 3, "v1", "v2", &[OLD, OLD, OLD], json!({})));
    assert_eq!(run(docs), Plan::default());
}
