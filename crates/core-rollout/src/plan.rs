//! The pure rollout planner: what ONE reconcile of the operator does, given the observed state
//! of a namespace and the time. The controller executes the plan; `strata rollout plan` prints
//! it. Rules follow the anchor (Grafana rollout-operator v0.38) except where noted `FIX`.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use serde_json::{Value, json};

use crate::keys;
use crate::observed::{
    Observed, annotation, key, label, name, natural_cmp, ready_replicas, running_and_ready,
    spec_replicas, status_replicas,
};
use crate::zpdb::{self, Zpdb};

/// A change of a StatefulSet's `spec.replicas`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaChange {
    pub stateful_set: String,
    pub from: i32,
    pub to: i32,
}

/// What one reconcile does (the `strata rollout plan -o json` contract).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Pods to delete, `namespace/name`, in order.
    pub delete_pods: Vec<String>,
    /// StatefulSets whose `status.currentRevision` is set to `status.updateRevision`.
    pub status_updates: Vec<String>,
    pub replica_changes: Vec<ReplicaChange>,
    /// Problems that stop the group's rollout: the group's reconcile counts as failed.
    pub errors: Vec<String>,
    /// Problems the anchor only logs (replica coordination of one StatefulSet, an invalid
    /// ZoneAwarePodDisruptionBudget): reported, but the group's reconcile still succeeds, so
    /// `RolloutOperatorNotReconciling` fires only when rollouts really stop.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Pods (`namespace/name`) a zone-aware budget covers, with the max-unavailable override
    /// the rollout may use: before deleting one, the controller claims it through the API
    /// (`core_rollout::evictions::claim`) so it never races an eviction.
    #[serde(skip)]
    pub budget_overrides: BTreeMap<String, i64>,
    /// When a decision waits for time to pass (min time between zone downscales, a delayed
    /// downscale), the controller looks again after this long instead of at the next resync.
    #[serde(skip)]
    pub recheck_after: Option<SignedDuration>,
    /// What each delayed downscale decided and why (which pods, their preparation times,
    /// what it waits for): the operator publishes it as an Event on the StatefulSet.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub delayed_downscales: Vec<DelayedDownscale>,
}

/// One delayed downscale's decision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DelayedDownscale {
    /// `namespace/name`.
    pub stateful_set: String,
    pub from: i32,
    /// What the reference resource asks for.
    pub desired: i32,
    /// What this reconcile scales to (`from` while it waits or holds).
    pub to: i32,
    /// The `grafana.com/rollout-delayed-downscale` delay, as written.
    pub delay: String,
    /// The pods going away, highest ordinal first.
    pub pods: Vec<PodPreparation>,
    /// One line: `scale N -> M: …`, `waiting: …` or `held: …`.
    pub decision: String,
}

/// What one pod going away reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPreparation {
    pub pod: String,
    /// When the pod says it prepared (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepared_at: Option<String>,
    /// When the delay since then has passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub may_go_at: Option<String>,
    /// Why the pod gave no time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl Plan {
    fn recheck(&mut self, after: SignedDuration) {
        let after = after.max(SignedDuration::from_millis(1));
        self.recheck_after = Some(self.recheck_after.map_or(after, |d| d.min(after)));
    }
}

/// Waiting reasons that never resolve on their own: an outdated pod stuck in one of them is
/// replaced even when the max-unavailable budget is used up (it is unavailable anyway).
const STUCK_REASONS: &[&str] = &[
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// `namespace/name` of a StatefulSet, as plans name them.
pub fn sts_key(sts: &StatefulSet) -> String {
    key(sts.metadata.namespace.as_deref(), name(sts))
}

fn pod_key(pod: &Pod) -> String {
    key(
        pod.metadata.namespace.as_deref(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// `rollout-max-unavailable`: an integer > 0, or `N%` (1..=100) of `spec.replicas` rounded
/// down, at least 1; anything else is 1.
pub fn max_unavailable(sts: &StatefulSet) -> i64 {
    let Some(raw) = annotation(sts, keys::MAX_UNAVAILABLE).map(str::trim) else {
        return 1;
    };
    if let Some(pct) = raw.strip_suffix('%') {
        let Ok(pct) = pct.trim().parse::<i64>() else {
            return 1;
        };
        if !(1..=100).contains(&pct) {
            return 1;
        }
        let Some(replicas) = sts.spec.as_ref().and_then(|s| s.replicas) else {
            return 1;
        };
        return (pct * i64::from(replicas) / 100).max(1);
    }
    raw.parse::<i64>().ok().filter(|v| *v > 0).unwrap_or(1)
}

/// `grafana.com/rollout-force-replicas`: a non-negative int32, else ignored.
pub fn force_replicas(sts: &StatefulSet) -> Option<i32> {
    annotation(sts, keys::FORCE_REPLICAS)
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|v| *v >= 0)
}

/// Prometheus-style durations (`30m`, `4h`, `1d`, `2w`, `1y`, combinations like `1d12h`).
pub fn parse_prometheus_duration(text: &str) -> Option<SignedDuration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text == "0" {
        // Prometheus accepts a bare zero (the anchor's "no delay").
        return Some(SignedDuration::ZERO);
    }
    let (mut total, mut rest) = (0i64, text);
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "y" => 31_536_000_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(ms)?)?;
        rest = &rest[unit_len..];
    }
    Some(SignedDuration::from_millis(total))
}

/// How many pods a StatefulSet should have. FIX: the anchor used `status.replicas` alone, but
/// right after a pod is deleted the status can already say N-1/N-1 Ready while the pod is not
/// recreated yet — and the next zone would start. Counting against `spec.replicas` too closes
/// that window.
fn expected_pods(sts: &StatefulSet) -> i64 {
    i64::from(status_replicas(sts).max(spec_replicas(sts)))
}

/// The status-and-pods view of "has not-ready pods".
fn has_not_ready(observed: &Observed, sts: &StatefulSet) -> bool {
    let pods = observed.pods_of(sts);
    status_replicas(sts) != ready_replicas(sts)
        || (pods.len() as i64) < expected_pods(sts)
        || pods.iter().any(|p| !running_and_ready(p))
}

/// Plans one reconcile of every rollout group in `observed`.
pub fn plan(observed: &Observed, now: Timestamp) -> Plan {
    let mut plan = Plan::default();
    let mut zpdbs = Vec::new();
    for z in &observed.zpdbs {
        match zpdb::parse(z) {
            Ok(parsed) => zpdbs.push(parsed),
            Err(e) => plan.warnings.push(format!(
                "ZoneAwarePodDisruptionBudget {}: {e}",
                z.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            )),
        }
    }
    let mut groups: BTreeMap<&str, Vec<&StatefulSet>> = BTreeMap::new();
    for sts in &observed.stateful_sets {
        if let Some(group) = label(&sts.metadata.labels, keys::ROLLOUT_GROUP) {
            groups.entry(group).or_default().push(sts);
        }
    }
    let mut observed = observed.clone();
    for (group, mut members) in groups {
        members.sort_by(|a, b| name(a).cmp(name(b)));
        plan_group(group, members, &mut observed, &zpdbs, now, &mut plan);
    }
    // A reference resource's scale is read, not watched (it can be any kind): a group that
    // mirrors one is looked at again at the anchor's pace, so a change of it (or a pod that
    // held a delayed downscale answering again) is acted on within seconds, not at resync.
    if observed
        .stateful_sets
        .iter()
        .any(|s| annotation(s, keys::MIRROR_NAME).is_some())
    {
        plan.recheck(REFERENCE_POLL);
    }
    plan
}

/// How often a group mirroring a reference resource is looked at again (the anchor's
/// reconcile interval).
pub const REFERENCE_POLL: SignedDuration = SignedDuration::from_secs(5);

enum Progress {
    Ongoing,
    Done,
}

fn plan_group(
    group: &str,
    members: Vec<&StatefulSet>,
    observed: &mut Observed,
    zpdbs: &[Zpdb],
    now: Timestamp,
    plan: &mut Plan,
) {
    let (change, errors) = adjust_replicas(&members, observed, now, plan);
    plan.warnings.extend(
        errors
            .into_iter()
            .map(|e| format!("rollout group {group}: {e}")),
    );
    if let Some(change) = change {
        // The anchor changes one StatefulSet per reconcile and looks again with fresh state.
        plan.replica_changes.push(change);
        return;
    }
    for sts in &members {
        let strategy = sts
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.type_.as_deref())
            .unwrap_or("RollingUpdate");
        if strategy != "OnDelete" {
            plan.errors.push(format!(
                "StatefulSet {} has {strategy} update strategy while OnDelete is expected, skipping reconcile",
                sts_key(sts)
            ));
            return;
        }
    }
    let not_ready: Vec<&StatefulSet> = members
        .iter()
        .copied()
        .filter(|s| has_not_ready(observed, s))
        .collect();
    if not_ready.len() >= 2 {
        return;
    }
    let mut order = members.clone();
    if let [first] = not_ready.as_slice() {
        order.retain(|s| name(s) != name(first));
        order.insert(0, first);
    }
    for sts in order {
        match update_pods(sts, observed, zpdbs, now, plan) {
            Err(e) => {
                plan.errors.push(e);
                return;
            }
            Ok(Progress::Ongoing) => return,
            Ok(Progress::Done) => {}
        }
    }
}

fn update_pods(
    sts: &StatefulSet,
    observed: &mut Observed,
    zpdbs: &[Zpdb],
    now: Timestamp,
    plan: &mut Plan,
) -> Result<Progress, String> {
    let not_ready = has_not_ready(observed, sts);
    if annotation(sts, keys::PAUSED) == Some("true") {
        // FIX (a Grafana operator bug): a paused StatefulSet with not-ready pods still blocks the
        // others, so no two zones are ever unavailable at once.
        return Ok(if not_ready {
            Progress::Ongoing
        } else {
            Progress::Done
        });
    }
    let status = sts.status.as_ref();
    let current = status
        .and_then(|s| s.current_revision.as_deref())
        .unwrap_or_default();
    let update = status
        .and_then(|s| s.update_revision.as_deref())
        .unwrap_or_default();
    if current.is_empty() {
        return Err(format!(
            "StatefulSet {}: currentRevision is empty",
            sts_key(sts)
        ));
    }
    if update.is_empty() {
        return Err(format!(
            "StatefulSet {}: updateRevision is empty",
            sts_key(sts)
        ));
    }
    let pods = observed.pods_of(sts);
    let mut outdated: Vec<Pod> = pods
        .iter()
        .filter(|p| label(&p.metadata.labels, keys::REVISION_HASH) != Some(update))
        .map(|p| (*p).clone())
        .collect();
    outdated.sort_by(|a, b| {
        natural_cmp(
            a.metadata.name.as_deref().unwrap_or_default(),
            b.metadata.name.as_deref().unwrap_or_default(),
        )
    });

    if outdated.is_empty() {
        if not_ready {
            return Ok(Progress::Ongoing);
        }
        if current != update {
            plan.status_updates.push(sts_key(sts));
        }
        return Ok(Progress::Done);
    }

    let budget = max_unavailable(sts);
    // FIX (a Grafana operator bug): count not-ready from the pods too, so a pod that is already
    // terminating but still counted Ready in status uses up the budget.
    let status_not_ready = i64::from(status_replicas(sts) - ready_replicas(sts));
    // A pod we just deleted may still look Running and Ready in a lagging cache: it counts
    // as not ready until it is seen replaced.
    let already_deleted = observed.recently_evicted.clone();
    let recently_deleted = |p: &Pod| {
        already_deleted
            .iter()
            .any(|e| Some(e.as_str()) == p.metadata.name.as_deref())
    };
    let pods_not_ready = pods
        .iter()
        .filter(|p| !running_and_ready(p) || recently_deleted(p))
        .count() as i64
        + (expected_pods(sts) - pods.len() as i64).max(0);
    let num_not_ready = status_not_ready.max(pods_not_ready);
    let slots = (budget - num_not_ready).min(outdated.len() as i64).max(0) as usize;

    let stuck = |p: &Pod| {
        p.metadata.deletion_timestamp.is_none()
            && p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.state
                            .as_ref()
                            .and_then(|s| s.waiting.as_ref())
                            .and_then(|w| w.reason.as_deref())
                            .is_some_and(|r| STUCK_REASONS.contains(&r))
                    })
                })
    };
    // Outdated pods stuck in an unrecoverable state are replaced regardless of the budget
    // (the anchor fixed this after v0.38; without it a crash-looping rollout never recovers).
    let mut handled = Vec::new();
    for pod in outdated.iter().filter(|p| stuck(p)) {
        plan.delete_pods.push(pod_key(pod));
        observed
            .recently_evicted
            .push(pod.metadata.name.clone().unwrap_or_default());
        handled.push(pod.metadata.name.clone());
    }
    if slots == 0 {
        return Ok(Progress::Ongoing);
    }
    let override_max = match outdated.first() {
        Some(first)
            if zpdb::covering(first, zpdbs)
                .iter()
                .any(|z| z.partition.is_some()) =>
        {
            1
        }
        _ => budget,
    };
    // A pod already terminating (or just deleted by us, or replaced above) is counted in
    // `num_not_ready`, so it holds a slot already: the slots left go to the next old pods, as
    // the anchor does, and such a pod is never deleted twice.
    let candidates = outdated.iter().filter(|p| {
        !handled.contains(&p.metadata.name)
            && p.metadata.deletion_timestamp.is_none()
            && !recently_deleted(p)
    });
    for pod in candidates.take(slots) {
        if zpdb::decide(pod, observed, zpdbs, Some(override_max), now).is_err() {
            continue;
        }
        observed
            .recently_evicted
            .push(pod.metadata.name.clone().unwrap_or_default());
        if !zpdb::covering(pod, zpdbs).is_empty() {
            plan.budget_overrides.insert(pod_key(pod), override_max);
        }
        plan.delete_pods.push(pod_key(pod));
    }
    Ok(Progress::Ongoing)
}

/// Replica coordination: leader/follower, then mirroring. Returns at most one change (the
/// anchor's pace) and every error met on the way.
fn adjust_replicas(
    members: &[&StatefulSet],
    observed: &Observed,
    now: Timestamp,
    plan: &mut Plan,
) -> (Option<ReplicaChange>, Vec<String>) {
    let mut errors = Vec::new();
    let change = |sts: &StatefulSet, to: i32| ReplicaChange {
        stateful_set: sts_key(sts),
        from: spec_replicas(sts),
        to,
    };
    for sts in members {
        let current = spec_replicas(sts);
        let desired = match annotation(sts, keys::DOWNSCALE_LEADER) {
            Some(leader_name) => {
                let Some(leader) = members.iter().find(|s| name(s) == leader_name) else {
                    // FIX (a Grafana operator bug): one bad StatefulSet no longer stops the others.
                    errors.push(format!(
                        "could not find leader for {}: {leader_name}",
                        name(sts)
                    ));
                    continue;
                };
                match follower_replicas(sts, leader, members, now, plan) {
                    Ok(desired) => desired,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                }
            }
            // FIX (a Grafana operator bug): force-replicas also applies to a StatefulSet with no
            // leader and no reference resource.
            None if annotation(sts, keys::MIRROR_NAME).is_none() => {
                force_replicas(sts).unwrap_or(current)
            }
            None => current,
        };
        if desired != current {
            return (Some(change(sts, desired)), errors);
        }
    }
    // Whose turn it is to go down, the same for every zone of the group.
    let turn = mirrored_downscale_turn(members, observed, now);
    for sts in members {
        let reference = match mirrored_reference(sts, observed) {
            None => continue,
            Some(Ok(reference)) => reference,
            Some(Err(e)) => {
                errors.push(e);
                continue;
            }
        };
        let desired = mirrored_replicas(sts, reference);
        let current = spec_replicas(sts);
        if desired == current {
            continue;
        }
        let target = if desired < current {
            // One zone of the group goes down at a time, each at least the group's
            // minimum time after the previous one (grafana/rollout-operator#303: the anchor
            // scales every mirroring zone down at once).
            match &turn {
                Turn::Go(zone) if zone == name(sts) => {}
                Turn::Go(_) | Turn::NoneDown => continue,
                Turn::Wait(wait) => {
                    plan.recheck(*wait);
                    continue;
                }
                Turn::Invalid(e) => {
                    errors.push(e.clone());
                    continue;
                }
            }
            match delayed_downscale_target(sts, observed, desired, now, plan) {
                Ok(target) => target,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            }
        } else {
            desired
        };
        if target != current {
            return (Some(change(sts, target)), errors);
        }
    }
    (None, errors)
}

fn follower_replicas(
    follower: &StatefulSet,
    leader: &StatefulSet,
    members: &[&StatefulSet],
    now: Timestamp,
    plan: &mut Plan,
) -> Result<i32, String> {
    if let Some(forced) = force_replicas(follower) {
        return Ok(forced);
    }
    let (current, leader_replicas) = (spec_replicas(follower), spec_replicas(leader));
    if leader_replicas > current {
        let wait_for_leader =
            annotation(follower, keys::UPSCALE_ONLY_WHEN_LEADER_READY) == Some("true");
        return Ok(
            if wait_for_leader && leader_replicas != ready_replicas(leader) {
                current
            } else {
                leader_replicas
            },
        );
    }
    if leader_replicas == current {
        return Ok(current);
    }
    let Some(most_recent) = last_other_zone_downscale(follower, members)? else {
        return Ok(leader_replicas);
    };
    let min_time = min_time_between_zones(follower)?.ok_or_else(|| {
        format!(
            "{} has no {} label",
            name(follower),
            keys::MIN_TIME_BETWEEN_ZONES_DOWNSCALE
        )
    })?;
    let elapsed = now.duration_since(most_recent);
    if elapsed > min_time {
        return Ok(leader_replicas);
    }
    plan.recheck(min_time - elapsed + SignedDuration::from_millis(1));
    Ok(current)
}

/// The most recent `last-downscale` among the other zones of `sts`'s group.
fn last_other_zone_downscale(
    sts: &StatefulSet,
    members: &[&StatefulSet],
) -> Result<Option<Timestamp>, String> {
    let mut most_recent: Option<Timestamp> = None;
    for other in members.iter().filter(|s| name(s) != name(sts)) {
        if let Some(text) = annotation(other, keys::LAST_DOWNSCALE) {
            let at: Timestamp = text.parse().map_err(|e| {
                format!(
                    "can't parse {} annotation of {}: {e}",
                    keys::LAST_DOWNSCALE,
                    name(other)
                )
            })?;
            most_recent = Some(most_recent.map_or(at, |m: Timestamp| m.max(at)));
        }
    }
    Ok(most_recent)
}

/// `sts`'s minimum time between its group's zone downscales; `None` without the label.
fn min_time_between_zones(sts: &StatefulSet) -> Result<Option<SignedDuration>, String> {
    let Some(text) = label(&sts.metadata.labels, keys::MIN_TIME_BETWEEN_ZONES_DOWNSCALE) else {
        return Ok(None);
    };
    core_k8s::args::parse_duration(text)
        .ok()
        .and_then(|d| SignedDuration::try_from(d).ok())
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{} label of {} is not a duration: {text}",
                keys::MIN_TIME_BETWEEN_ZONES_DOWNSCALE,
                name(sts)
            )
        })
}

/// Whose turn it is to go down among the zones of a group that mirror a reference resource.
#[derive(Debug, PartialEq, Eq)]
enum Turn {
    /// This zone (name) may prepare and go down now; the others wait for it.
    Go(String),
    /// No zone may go yet: the minimum time since the last zone downscale runs this long.
    Wait(SignedDuration),
    /// A zone's label or a recorded time does not parse.
    Invalid(String),
    /// No zone is below its reference.
    NoneDown,
}

/// The zone of `members` whose mirrored downscale may proceed now: the first, in name order,
/// of those the reference takes below their replicas whose own minimum time since the other
/// zones' last downscale has passed (a zone without the label never waits). Only that zone is
/// prepared (delayed downscale) and scaled, so zones go down one after the other, each its
/// minimum time after the previous one was recorded. An upscale never waits for a turn.
fn mirrored_downscale_turn(members: &[&StatefulSet], observed: &Observed, now: Timestamp) -> Turn {
    let mut wait: Option<SignedDuration> = None;
    for sts in members {
        let Some(Ok(reference)) = mirrored_reference(sts, observed) else {
            continue;
        };
        if mirrored_replicas(sts, reference) >= spec_replicas(sts) {
            continue;
        }
        let (last, min_time) = match (
            last_other_zone_downscale(sts, members),
            min_time_between_zones(sts),
        ) {
            (Ok(last), Ok(min_time)) => (last, min_time),
            (Err(e), _) | (_, Err(e)) => return Turn::Invalid(e),
        };
        let (Some(last), Some(min_time)) = (last, min_time) else {
            return Turn::Go(name(sts).to_string());
        };
        // Strictly more than the minimum time, as for a follower of a leader.
        let remaining = min_time - now.duration_since(last);
        if remaining < SignedDuration::ZERO {
            return Turn::Go(name(sts).to_string());
        }
        let remaining = remaining + SignedDuration::from_millis(1);
        wait = Some(wait.map_or(remaining, |w| w.min(remaining)));
    }
    wait.map_or(Turn::NoneDown, Turn::Wait)
}

/// The merge patch that sets a StatefulSet's replicas. A downscale of a zone labelled with a
/// minimum time between zone downscales records its time in the same write
/// (`grafana.com/last-downscale`): the next zone waits from it whether or not a
/// prepare-downscale webhook records it too, and one write cannot conflict with itself.
pub fn replica_patch(sts: &StatefulSet, change: &ReplicaChange, now: Timestamp) -> Value {
    let labelled = label(&sts.metadata.labels, keys::MIN_TIME_BETWEEN_ZONES_DOWNSCALE).is_some();
    if change.to < change.from && labelled {
        json!({
            "metadata": {"annotations": {keys::LAST_DOWNSCALE: now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}},
            "spec": {"replicas": change.to},
        })
    } else {
        json!({"spec": {"replicas": change.to}})
    }
}

/// The reference resource a StatefulSet mirrors its replicas from: `None` when it mirrors
/// nothing, an error when the reference was not found.
fn mirrored_reference<'a>(
    sts: &StatefulSet,
    observed: &'a Observed,
) -> Option<Result<&'a Value, String>> {
    let (Some(ref_name), Some(ref_kind)) = (
        annotation(sts, keys::MIRROR_NAME).filter(|v| !v.is_empty()),
        annotation(sts, keys::MIRROR_KIND).filter(|v| !v.is_empty()),
    ) else {
        return None;
    };
    let api_version = annotation(sts, keys::MIRROR_API_VERSION).unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let reference = observed.references.iter().find(|r| {
        r.get("kind").and_then(Value::as_str) == Some(ref_kind)
            && r.pointer("/metadata/name").and_then(Value::as_str) == Some(ref_name)
            && r.get("apiVersion")
                .and_then(Value::as_str)
                .map_or("", |v| v.rsplit_once('/').map_or("", |(g, _)| g))
                == group
    });
    Some(reference.ok_or_else(|| {
        format!(
            "failed to query scale subresource of {ref_kind} {ref_name} for {}: not found",
            name(sts)
        )
    }))
}

/// The replicas a mirroring StatefulSet wants: its reference's `scale.spec.replicas`, unless
/// force-replicas overrides it. The Scale API omits `spec.replicas` when it is 0, so absent
/// means 0 (a reference scaled to zero is mirrored, as in the anchor).
fn mirrored_replicas(sts: &StatefulSet, reference: &Value) -> i32 {
    let scale = reference
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    force_replicas(sts).unwrap_or(scale as i32)
}

/// The delayed-downscale settings (delay, prepare URL): `None` unless both annotations are set
/// and the delay is positive; an error for a delay that does not parse.
fn delayed_downscale(sts: &StatefulSet) -> Result<Option<(SignedDuration, &str)>, String> {
    let (Some(delay), Some(url)) = (
        annotation(sts, keys::DELAYED_DOWNSCALE).filter(|v| !v.is_empty()),
        annotation(sts, keys::DELAYED_DOWNSCALE_URL).filter(|v| !v.is_empty()),
    ) else {
        return Ok(None);
    };
    let parsed = parse_prometheus_duration(delay).ok_or_else(|| {
        format!(
            "{}: invalid {} {delay:?}",
            name(sts),
            keys::DELAYED_DOWNSCALE
        )
    })?;
    Ok((parsed > SignedDuration::ZERO).then_some((parsed, url)))
}

/// The delayed-downscale endpoint calls one reconcile makes for a StatefulSet before planning:
/// the pods it would remove are asked to prepare (POST; their answers feed
/// [`Observed::prepared_at`]) and the pods that stay are told to cancel (DELETE).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DelayedCalls {
    /// `namespace/name` of the StatefulSet.
    pub stateful_set: String,
    /// (pod name, URL) of each pod to prepare, lowest ordinal first.
    pub prepare: Vec<(String, String)>,
    /// (pod name, why) of each pod to prepare that cannot be called: no such pod of this
    /// StatefulSet, or no address yet. It holds the downscale as a failed call would.
    pub unreachable: Vec<(String, String)>,
    /// URLs of pods whose preparation is cancelled.
    pub cancel: Vec<String>,
    /// Pods that stay but cannot be called yet (not created, or no address): their cancel is
    /// still owed, so the StatefulSet is not taken as settled.
    pub cancel_owed: Vec<String>,
}

/// The delayed-downscale calls for the observed state. Unlike the anchor, which DELETEs on
/// every pod of every stable StatefulSet on every reconcile (hundreds of calls every few
/// seconds), cancellation of a stable StatefulSet happens only while `settled` says its pods
/// may still hold a preparation (after a POST, and once after start-up).
pub fn delayed_downscale_calls(
    observed: &Observed,
    settled: &dyn Fn(&str) -> bool,
    now: Timestamp,
) -> Vec<DelayedCalls> {
    // Only the zone whose turn it is gets prepared: the others' pods would otherwise sit
    // prepared (and, for an ingester, read-only) for every zone's delay and minimum time.
    let mut groups: BTreeMap<Option<&str>, Vec<&StatefulSet>> = BTreeMap::new();
    for sts in &observed.stateful_sets {
        groups
            .entry(label(&sts.metadata.labels, keys::ROLLOUT_GROUP))
            .or_default()
            .push(sts);
    }
    let turns: Vec<String> = groups
        .into_values()
        .filter_map(|mut members| {
            members.sort_by(|a, b| name(a).cmp(name(b)));
            match mirrored_downscale_turn(&members, observed, now) {
                Turn::Go(zone) => Some(zone),
                _ => None,
            }
        })
        .collect();
    let mut out = Vec::new();
    for sts in &observed.stateful_sets {
        // A bad annotation is reported by the planner when it matters (a downscale).
        let Ok(Some((_, url))) = delayed_downscale(sts) else {
            continue;
        };
        let Some(Ok(reference)) = mirrored_reference(sts, observed) else {
            continue;
        };
        let desired = mirrored_replicas(sts, reference);
        let current = spec_replicas(sts);
        let key = sts_key(sts);
        // Each pod is called at its own address (see `pod_http::pod_url`): only a pod this
        // StatefulSet owns, with an IP.
        let url_of = |ordinal: i32| -> (String, Result<String, String>) {
            let pod = format!("{}-{ordinal}", name(sts));
            let url = owned_pod(sts, &pod, observed)
                .ok_or_else(|| format!("pod {pod} of this StatefulSet does not exist"))
                .and_then(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.pod_ip.as_deref())
                        .filter(|ip| !ip.is_empty())
                        .ok_or_else(|| format!("pod {pod} has no IP address yet"))
                })
                .and_then(|ip| core_k8s::pod_http::pod_url(url, ip));
            (pod, url)
        };
        let mut calls = DelayedCalls {
            stateful_set: key.clone(),
            ..DelayedCalls::default()
        };
        let keep = if desired < current && turns.iter().any(|zone| zone == name(sts)) {
            for (pod, url) in (desired.max(0)..current).map(url_of) {
                match url {
                    Ok(url) => calls.prepare.push((pod, url)),
                    Err(why) => calls.unreachable.push((pod, why)),
                }
            }
            desired.max(0)
        } else if settled(&key) {
            continue;
        } else {
            current
        };
        for (pod, url) in (0..keep).map(url_of) {
            match url {
                Ok(url) => calls.cancel.push(url),
                Err(_) => calls.cancel_owed.push(pod),
            }
        }
        out.push(calls);
    }
    out
}

/// The pod named `pod` when `sts` owns it: its controller reference names the StatefulSet
/// (and carries its uid, when the StatefulSet's is known).
fn owned_pod<'a>(sts: &StatefulSet, pod: &str, observed: &'a Observed) -> Option<&'a Pod> {
    let uid = sts.metadata.uid.as_deref();
    observed.pods.iter().find(|p| {
        p.metadata.name.as_deref() == Some(pod)
            && p.metadata.namespace == sts.metadata.namespace
            && p.metadata.owner_references.iter().flatten().any(|o| {
                o.kind == "StatefulSet"
                    && o.controller == Some(true)
                    && o.name == name(sts)
                    && uid.is_none_or(|uid| o.uid == uid)
            })
    })
}

/// The preparation time a pod answered a delayed-downscale POST with: a 2xx JSON body
/// `{"timestamp": <unix seconds>}` with a non-zero timestamp.
pub fn prepared_at(status: u16, body: &[u8]) -> Result<i64, String> {
    if !(200..300).contains(&status) {
        return Err(format!("HTTP status {status}"));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("unparsable response: {e}"))?;
    match value.get("timestamp").and_then(Value::as_i64) {
        Some(t) if t > 0 => Ok(t),
        _ => Err("response has no non-zero timestamp".into()),
    }
}

/// The delayed-downscale target: pods being removed report when they were prepared; the
/// downscale proceeds from the highest ordinal for every pod prepared at least `delay` ago. A
/// pod that gave no time (it did not answer in time, refused, or answered without a valid
/// timestamp) holds the whole downscale (the anchor's rule): it is never taken as prepared.
/// The decision, with every pod's time, is recorded in `plan.delayed_downscales`.
fn delayed_downscale_target(
    sts: &StatefulSet,
    observed: &Observed,
    desired: i32,
    now: Timestamp,
    plan: &mut Plan,
) -> Result<i32, String> {
    let current = spec_replicas(sts);
    let Some((delay, _)) = delayed_downscale(sts)? else {
        return Ok(desired);
    };
    let text = |t: Timestamp| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut pods = Vec::new();
    // Counting stops at the first pod (from the highest ordinal) not yet allowed to go.
    let (mut allowed, mut counting, mut next) = (0, true, None);
    for ordinal in (desired..current).rev() {
        let pod = format!("{}-{ordinal}", name(sts));
        let prepared = observed
            .prepared_at
            .get(&pod)
            .filter(|t| **t > 0)
            .and_then(|t| Timestamp::from_second(*t).ok());
        let Some(prepared) = prepared else {
            let problem = observed
                .prepare_failures
                .get(&pod)
                .cloned()
                .unwrap_or_else(|| "did not report a preparation time".into());
            pods.push(PodPreparation {
                pod,
                problem: Some(problem),
                ..PodPreparation::default()
            });
            counting = false;
            continue;
        };
        let may_go = prepared.checked_add(delay).unwrap_or(Timestamp::MAX);
        if counting && now >= may_go {
            allowed += 1;
        } else if counting {
            counting = false;
            next = Some((pod.clone(), may_go));
        }
        pods.push(PodPreparation {
            pod,
            prepared_at: Some(text(prepared)),
            may_go_at: Some(text(may_go)),
            problem: None,
        });
    }
    let held: Vec<String> = pods
        .iter()
        .filter_map(|p| Some(format!("pod {}: {}", p.pod, p.problem.as_ref()?)))
        .collect();
    let delay_text = annotation(sts, keys::DELAYED_DOWNSCALE)
        .unwrap_or_default()
        .to_string();
    let mut record = DelayedDownscale {
        stateful_set: sts_key(sts),
        from: current,
        desired,
        to: current,
        delay: delay_text.clone(),
        pods,
        decision: String::new(),
    };
    if !held.is_empty() {
        let why = format!(
            "held: {}; nothing is scaled down until every pod going away reports when it prepared",
            held.join("; ")
        );
        record.decision = why.clone();
        plan.delayed_downscales.push(record);
        return Err(format!("delayed downscale of {}: {why}", name(sts)));
    }
    let target = current - allowed;
    record.to = target;
    let waiting = next.map(|(pod, at)| {
        plan.recheck(at.duration_since(now));
        format!(
            "{pod} may go at {} ({delay_text} after it prepared)",
            text(at)
        )
    });
    record.decision = match (allowed, waiting) {
        (0, Some(waiting)) => format!("waiting: {waiting}"),
        (_, None) => format!(
            "scale {current} -> {target}: every pod going away prepared at least {delay_text} ago"
        ),
        (_, Some(waiting)) => format!(
            "scale {current} -> {target}: {allowed} pod(s) prepared at least {delay_text} ago; next, {waiting}"
        ),
    };
    plan.delayed_downscales.push(record);
    Ok(target)
}
