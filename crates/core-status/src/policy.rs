//! Stricter, opt-in judgements on top of kstatus' rules (docs/core-status.md lists them). The default
//! [`Policy`] changes nothing; each switch only ever makes a result *less* ready, so turning
//! one on can delay a wait but never end it early with a wrong Current.

use serde_json::Value;

use crate::compute::{Evaluation, compute};
use crate::error::StatusError;
use crate::object::{Counter, Fields, Parts, Text, api_group, lookup, str_or};
use crate::workload::CANNOT_START;
use crate::{Status, health::HealthRules};

/// Which stricter rules apply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Pod phase Failed is Failed; containers that cannot start (image pull errors, bad
    /// config) and crash-looping init containers are Failed.
    pub pod_failures: bool,
    /// A condition whose own `observedGeneration` is older than the object's generation is
    /// stale: the object is InProgress (metav1.Condition semantics).
    pub condition_generations: bool,
    /// For kinds without a built-in rule: `Ready=False` with a terminal reason (`…Failed`,
    /// `Error`) is Failed; `Degraded=True` is Failed; `Available`, `Programmed`, `Accepted`
    /// or `Synced` = False is InProgress.
    pub extra_conditions: bool,
    /// A LoadBalancer Service is InProgress until `status.loadBalancer.ingress` is set.
    pub load_balancer_ingress: bool,
    /// An OnDelete StatefulSet is InProgress until every replica is updated and Ready.
    pub on_delete_rollouts: bool,
    /// A custom resource with no status at all has not been observed by its controller yet:
    /// InProgress instead of kstatus' immediate Current.
    pub require_observed: bool,
    /// A Deployment, StatefulSet, DaemonSet, ReplicaSet or Job whose current-revision pods
    /// cannot start (image errors, bad config, crash loops, unschedulable) for longer than
    /// `failure_grace` is Failed instead of InProgress until its progress deadline
    /// ([`crate::workload`]). Needs the workload's pods.
    pub workload_failures: bool,
    /// How long a pod may be unable to start before `workload_failures` fails its workload.
    pub failure_grace: std::time::Duration,
    /// A custom resource whose spec was written after its status (its last apply is newer
    /// than every status write and condition transition, and no `observedGeneration` says
    /// otherwise) shows a status its controller wrote for an older spec: InProgress until
    /// the controller writes again, at most `observed_bound` after the apply, then judged as
    /// kstatus would, with a warning naming it.
    pub fresh_status: bool,
    pub observed_bound: std::time::Duration,
}

/// Default of [`Policy::observed_bound`].
pub const DEFAULT_OBSERVED_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

impl Policy {
    /// kstatus' exact behaviour.
    pub fn kstatus() -> Self {
        Self::default()
    }

    /// Every stricter rule.
    pub fn strict() -> Self {
        Self {
            pod_failures: true,
            condition_generations: true,
            extra_conditions: true,
            load_balancer_ingress: true,
            on_delete_rollouts: true,
            require_observed: true,
            workload_failures: true,
            failure_grace: crate::workload::DEFAULT_GRACE,
            fresh_status: true,
            observed_bound: DEFAULT_OBSERVED_BOUND,
        }
    }
}

/// One `status.conditions` entry as the stricter rules read it (leniently: a missing or
/// non-string field is empty).
#[derive(Clone, Copy, Debug, Default)]
pub struct PolicyCondition<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: &'a str,
    /// `None` when missing or not a string (the Degraded rule then has its own wording).
    pub message: Option<&'a str>,
    /// The condition's own `observedGeneration`, when an integer.
    pub observed_generation: Option<i64>,
    pub last_transition_time: &'a str,
}

/// What the stricter rules read beyond kstatus' [`Fields`]. Both representations implement
/// it — a full object ([`Parts`]) and the compact decoding ([`crate::compact::Compact`]) — so
/// the rules below are written once and the compact form judges exactly as the full one.
pub trait PolicyFields: Fields {
    fn name(&self) -> &str;
    /// `metadata.generation` when it is an integer (kstatus' strict read, errors as absent).
    fn generation_value(&self) -> Option<i64> {
        self.generation().ok().flatten()
    }
    /// `status.observedGeneration` when it is an integer.
    fn observed_generation_value(&self) -> Option<i64> {
        self.observed_generation().ok().flatten()
    }
    fn policy_conditions(&self) -> Vec<PolicyCondition<'_>>;
    /// `(name, reason)` of each container in `status.initContainerStatuses` (`init`) or
    /// `status.containerStatuses` whose `state.waiting.reason` is one of `reasons`.
    fn waiting_containers(&self, init: bool, reasons: &[&str]) -> Vec<(&str, &str)>;
    /// `status.loadBalancer.ingress` is a non-empty list.
    fn has_load_balancer_ingress(&self) -> bool;
    /// The status says nothing: absent, null or `{}`.
    fn status_is_empty(&self) -> bool;
    /// The latest `metadata.managedFields[].time` of writes to the object itself (`spec`)
    /// or to its status subresource (`!spec`).
    fn last_write(&self, spec: bool) -> Option<jiff::Timestamp>;
}

impl PolicyFields for Parts<'_> {
    fn name(&self) -> &str {
        str_or(self.metadata, &["name"], "")
    }

    fn policy_conditions(&self) -> Vec<PolicyCondition<'_>> {
        lookup(self.status, &["conditions"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| PolicyCondition {
                type_: str_or(c, &["type"], ""),
                status: str_or(c, &["status"], ""),
                reason: str_or(c, &["reason"], ""),
                message: lookup(c, &["message"]).and_then(Value::as_str),
                observed_generation: lookup(c, &["observedGeneration"]).and_then(Value::as_i64),
                last_transition_time: str_or(c, &["lastTransitionTime"], ""),
            })
            .collect()
    }

    fn waiting_containers(&self, init: bool, reasons: &[&str]) -> Vec<(&str, &str)> {
        let field = if init {
            "initContainerStatuses"
        } else {
            "containerStatuses"
        };
        lookup(self.status, &[field])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|cs| {
                let reason = str_or(cs, &["state", "waiting", "reason"], "");
                reasons
                    .contains(&reason)
                    .then(|| (str_or(cs, &["name"], ""), reason))
            })
            .collect()
    }

    fn has_load_balancer_ingress(&self) -> bool {
        lookup(self.status, &["loadBalancer", "ingress"])
            .and_then(Value::as_array)
            .is_some_and(|list| !list.is_empty())
    }

    fn status_is_empty(&self) -> bool {
        match self.status {
            Value::Null => true,
            Value::Object(map) => map.is_empty(),
            _ => false,
        }
    }

    fn last_write(&self, spec: bool) -> Option<jiff::Timestamp> {
        lookup(self.metadata, &["managedFields"])?
            .as_array()?
            .iter()
            .filter(|m| (str_or(m, &["subresource"], "") == "status") != spec)
            .filter_map(|m| str_or(m, &["time"], "").parse().ok())
            .max()
    }
}

/// A custom resource: a group that is neither core nor one of Kubernetes' own API groups.
fn is_custom_resource(group: &str) -> bool {
    group.contains('.') && !group.ends_with(".k8s.io")
}

fn describe_waiting(containers: &[(&str, &str)]) -> Vec<String> {
    containers
        .iter()
        .map(|(name, reason)| format!("{name} ({reason})"))
        .collect()
}

/// Whether a custom resource's status may predate its last apply: `Some(apply time)` when
/// the controller has not written status (nor moved a condition) since.
fn status_predates_apply<F: PolicyFields>(object: &F) -> Option<jiff::Timestamp> {
    let observed = object.observed_generation_value();
    if observed.is_some() && observed == object.generation_value() {
        return None;
    }
    let applied = object.last_write(true)?;
    let status_subresource_written = object.last_write(false);
    // Status written through the object itself (a CRD without the status subresource): its
    // writes look like applies, nothing tells them apart.
    if status_subresource_written.is_none() && !object.status_is_empty() {
        return None;
    }
    let conditions = object.policy_conditions();
    let status_written = conditions
        .iter()
        .filter_map(|c| c.last_transition_time.parse().ok())
        .chain(status_subresource_written)
        .max();
    // Second resolution: a status written in the apply's second counts as after it.
    match status_written {
        Some(written) if written >= applied => None,
        _ => Some(applied),
    }
}

/// `fresh_status` on a result that would be Current: `None` when the status is not older
/// than the last apply; else InProgress within the bound, past it the result with a warning.
fn fresh_status<F: PolicyFields>(
    object: &F,
    base: &Evaluation,
    policy: &Policy,
    now: jiff::Timestamp,
) -> Option<Evaluation> {
    let applied = status_predates_apply(object)?;
    let waited = now.duration_since(applied);
    let bound =
        jiff::SignedDuration::try_from(policy.observed_bound).unwrap_or(jiff::SignedDuration::MAX);
    if waited < bound {
        return Some(Evaluation::in_progress(
            "StatusNotObserved",
            format!(
                "{} was applied at {applied}; its controller has not written status since",
                object.kind()
            ),
        ));
    }
    let warning = format!(
        "{} {}: its controller wrote no status within {}s of the apply at {applied}; judged by kstatus' rules",
        object.kind(),
        object.name(),
        policy.observed_bound.as_secs()
    );
    Some(base.clone().with_warning(warning))
}

fn stricter<F: PolicyFields>(
    object: &F,
    base: Evaluation,
    policy: &Policy,
    now: jiff::Timestamp,
) -> Evaluation {
    if matches!(
        base.status,
        Status::Terminating | Status::Failed | Status::Unknown
    ) {
        return base;
    }
    let group = api_group(object.api_version());
    let kind = object.kind();
    let builtin = crate::compute::builtin_rule(group, kind).is_some();
    let conditions = object.policy_conditions();
    let condition = |type_: &str| conditions.iter().find(|c| c.type_ == type_);

    if policy.pod_failures && group.is_empty() && kind == "Pod" {
        if object.text(Text::Phase) == Some("Failed") {
            return Evaluation::failed("PodFailed", "Pod has failed");
        }
        let mut stuck = describe_waiting(&object.waiting_containers(false, CANNOT_START));
        stuck.extend(describe_waiting(
            &object.waiting_containers(true, CANNOT_START),
        ));
        if !stuck.is_empty() {
            return Evaluation::failed(
                "ContainerCannotStart",
                format!("Containers cannot start: {}", stuck.join(", ")),
            );
        }
        let looping = describe_waiting(&object.waiting_containers(true, &["CrashLoopBackOff"]));
        if !looping.is_empty() {
            return Evaluation::failed(
                "InitContainerCrashLooping",
                format!("Init containers in CrashLoop state: {}", looping.join(", ")),
            );
        }
    }
    if policy.extra_conditions && !builtin {
        if let Some(ready) = condition("Ready")
            && ready.status == "False"
            && (ready.reason.ends_with("Failed") || ready.reason == "Error")
        {
            return Evaluation::failed(
                ready.reason.to_string(),
                ready.message.unwrap_or_default().to_string(),
            );
        }
        if let Some(degraded) = condition("Degraded")
            && degraded.status == "True"
        {
            return Evaluation::failed(
                "Degraded",
                degraded.message.unwrap_or("Degraded").to_string(),
            );
        }
    }
    if base.status != Status::Current {
        return base;
    }
    if policy.extra_conditions && !builtin {
        for type_ in ["Available", "Programmed", "Accepted", "Synced"] {
            if let Some(c) = condition(type_)
                && c.status == "False"
            {
                return Evaluation::in_progress(
                    format!("Not{type_}"),
                    format!("{type_} is False: {}", c.message.unwrap_or_default()),
                );
            }
        }
    }
    if policy.condition_generations {
        let generation = object.generation_value().unwrap_or(0);
        let stale = conditions
            .iter()
            .find(|c| c.observed_generation.is_some_and(|g| g < generation));
        if let Some(c) = stale {
            let observed = c.observed_generation.unwrap_or(0);
            return Evaluation::in_progress(
                "ConditionNotObserved",
                format!(
                    "condition {} is from generation {observed}, the object is at generation {generation}",
                    c.type_
                ),
            );
        }
    }
    if policy.load_balancer_ingress
        && group.is_empty()
        && kind == "Service"
        && object.text(Text::ServiceType) == Some("LoadBalancer")
        && !object.has_load_balancer_ingress()
    {
        return Evaluation::in_progress("NoIngress", "LoadBalancer has no ingress yet");
    }
    if policy.on_delete_rollouts
        && group == "apps"
        && kind == "StatefulSet"
        && object.text(Text::UpdateStrategyType) == Some("OnDelete")
    {
        let spec = object.counter(Counter::SpecReplicas).unwrap_or(1);
        let updated = object.counter(Counter::UpdatedReplicas).unwrap_or(0);
        let ready = object.counter(Counter::ReadyReplicas).unwrap_or(0);
        if updated < spec {
            return Evaluation::in_progress("LessUpdated", format!("updated: {updated}/{spec}"));
        }
        if ready < spec {
            return Evaluation::in_progress("LessReady", format!("Ready: {ready}/{spec}"));
        }
    }
    if policy.fresh_status
        && is_custom_resource(group)
        && let Some(verdict) = fresh_status(object, &base, policy, now)
    {
        return verdict;
    }
    if policy.require_observed && is_custom_resource(group) && object.status_is_empty() {
        return Evaluation::in_progress(
            "NotObserved",
            format!("{kind} has no status yet: its controller has not observed it"),
        );
    }
    base
}

/// Status under a policy, with custom health expressions first.
pub fn compute_with_policy(
    object: &Value,
    now: jiff::Timestamp,
    policy: &Policy,
    health: &HealthRules,
) -> Result<Evaluation, StatusError> {
    compute_with_pods(object, &[], now, policy, health)
}

/// [`compute_with_policy`] for an object whose pods are known (a workload's, found by its
/// selector): `workload_failures` judges them.
pub fn compute_with_pods(
    object: &Value,
    pods: &[Value],
    now: jiff::Timestamp,
    policy: &Policy,
    health: &HealthRules,
) -> Result<Evaluation, StatusError> {
    if let Some(result) = health.evaluate(object) {
        let judged = result?;
        // An expression reads the status it is given: a status from before the last apply
        // would make it Current as falsely as kstatus' rules.
        if policy.fresh_status
            && judged.status == Status::Current
            && is_custom_resource(api_group(str_or(object, &["apiVersion"], "")))
        {
            return Ok(fresh_status(&Parts::new(object), &judged, policy, now).unwrap_or(judged));
        }
        return Ok(judged);
    }
    let base = compute(object, now)?;
    if *policy == Policy::default() {
        return Ok(base);
    }
    let parts = Parts::new(object);
    Ok(judge(&parts, base, policy, now, || {
        crate::workload::judge_pods(object, pods, now, policy.failure_grace)
    }))
}

/// The stricter rules on kstatus' verdict `base` for an object no health expression covers;
/// `pods_verdict` judges the workload's pods (see [`crate::workload::judge_pods`]), asked only
/// for a workload that may still be waiting for them.
fn judge<F: PolicyFields>(
    object: &F,
    base: Evaluation,
    policy: &Policy,
    now: jiff::Timestamp,
    pods_verdict: impl FnOnce() -> Option<Evaluation>,
) -> Evaluation {
    let judged = stricter(object, base, policy, now);
    if !policy.workload_failures
        || !crate::workload::is_workload(object.api_version(), object.kind())
        || !still_starting(object, &judged)
    {
        return judged;
    }
    if let Some(failed) = pods_verdict() {
        return failed;
    }
    // kstatus calls a Job Current as soon as it runs, which would end a wait before its pods
    // had a chance to fail: under this switch a running Job needs a ready or finished pod.
    if judged.status == Status::Current
        && object.counter(Counter::Ready).unwrap_or(0) == 0
        && object.counter(Counter::Succeeded).unwrap_or(0) == 0
    {
        return Evaluation::in_progress(
            "JobPodsNotStarted",
            "no pod of the Job is ready or has succeeded yet",
        );
    }
    judged
}

/// [`compute_with_pods`] for a compactly decoded object that no health expression covers and
/// whose pods, if it is a workload, are none: the same verdict as for the full object.
pub fn compute_compact(
    object: &crate::compact::Compact<'_>,
    now: jiff::Timestamp,
    policy: &Policy,
) -> Evaluation {
    let base = crate::compute::evaluate_fields(object, now);
    if *policy == Policy::default() {
        return base;
    }
    judge(object, base, policy, now, || None)
}

/// Whether a workload may still be waiting for its pods: InProgress, or a Job kstatus calls
/// Current while it runs (only completion ends a Job).
fn still_starting<F: PolicyFields>(object: &F, judged: &Evaluation) -> bool {
    match judged.status {
        Status::InProgress => true,
        Status::Current => {
            object.kind() == "Job"
                && !object.policy_conditions().iter().any(|c| {
                    matches!(c.type_, "Complete" | "SuccessCriteriaMet") && c.status == "True"
                })
        }
        _ => false,
    }
}

/// Everything that decides a status beyond kstatus' defaults.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    pub policy: Policy,
    pub health: HealthRules,
}

impl Rules {
    /// kstatus' own rules and nothing else: they read only the fields the compact decoder
    /// keeps, so objects may be decoded into [`crate::Observed`] (policies and health
    /// expressions may read any field and need full objects).
    pub fn is_kstatus(&self) -> bool {
        self.policy == Policy::kstatus() && self.health.is_empty()
    }

    pub fn evaluate(&self, object: &Value, now: jiff::Timestamp) -> Evaluation {
        evaluate_with_policy(object, now, &self.policy, &self.health)
    }

    /// [`Rules::evaluate`] with the object's pods (see [`compute_with_pods`]).
    pub fn evaluate_with_pods(
        &self,
        object: &Value,
        pods: &[Value],
        now: jiff::Timestamp,
    ) -> Evaluation {
        compute_with_pods(object, pods, now, &self.policy, &self.health)
            .unwrap_or_else(|e| Evaluation::unknown(&e))
    }

    /// Whether judging a workload needs its pods.
    pub fn needs_pods(&self) -> bool {
        self.policy.workload_failures
    }

    /// Every object's status, in order: those whose rules read only what the compact form
    /// holds are judged from it, the rest (types a health expression covers, workloads with
    /// pods in the input, and the pods some workload may own) are decoded in full from their
    /// text first. The verdicts are exactly those of [`Rules::evaluate_with_pods`] on full
    /// objects, with the pods of the whole input.
    pub fn evaluate_all(
        &self,
        objects: &[crate::input::Judged<'_>],
        now: jiff::Timestamp,
    ) -> Vec<Evaluation> {
        // The text was decoded once already, checked as strictly as a full decoding checks
        // it; were it refused now anyway, that object alone would be Unknown, named.
        let full = |object: &crate::input::Spanned<'_>| {
            object.full().map_err(|e| StatusError::Input {
                source_name: format!("{} {}", object.compact.kind(), object.compact.name()),
                index: 0,
                reason: e.to_string(),
            })
        };
        // Full objects are lent as they are; only spanned pods a workload may own are decoded.
        let pods: Vec<std::borrow::Cow<'_, Value>> = objects
            .iter()
            .filter(|o| self.needs_pods() && o.api_version() == "v1" && o.kind() == "Pod")
            .filter_map(|o| match o {
                crate::input::Judged::Full(object) => Some(std::borrow::Cow::Borrowed(object)),
                crate::input::Judged::Spanned(s) => s
                    .compact
                    .is_controlled()
                    .then(|| full(s).ok().map(std::borrow::Cow::Owned))
                    .flatten(),
            })
            .collect();
        let index = crate::workload::PodIndex::new(pods.iter().map(|p| p.as_ref()));
        objects
            .iter()
            .map(|o| match o {
                crate::input::Judged::Full(object) => {
                    self.evaluate_with_pods(object, index.for_workload(object), now)
                }
                crate::input::Judged::Spanned(s) => {
                    let c = &s.compact;
                    let with_pods = !index
                        .for_owner(c.namespace(), c.kind(), c.name())
                        .is_empty();
                    if !with_pods && !self.health.covers(c.api_version(), c.kind()) {
                        return compute_compact(c, now, &self.policy);
                    }
                    match full(s) {
                        Ok(object) => {
                            self.evaluate_with_pods(&object, index.for_workload(&object), now)
                        }
                        Err(e) => Evaluation::unknown(&e),
                    }
                }
            })
            .collect()
    }
}

/// [`compute_with_policy`], errors as Unknown.
pub fn evaluate_with_policy(
    object: &Value,
    now: jiff::Timestamp,
    policy: &Policy,
    health: &HealthRules,
) -> Evaluation {
    compute_with_policy(object, now, policy, health).unwrap_or_else(|e| Evaluation::unknown(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type View = (Status, Option<String>, String);

    fn both(object: Value) -> (View, View) {
        let now = jiff::Timestamp::UNIX_EPOCH;
        let view = |e: Evaluation| {
            (
                e.status,
                e.reason().map(str::to_string),
                e.message.to_string(),
            )
        };
        let rules = HealthRules::default();
        (
            view(evaluate_with_policy(
                &object,
                now,
                &Policy::kstatus(),
                &rules,
            )),
            view(evaluate_with_policy(
                &object,
                now,
                &Policy::strict(),
                &rules,
            )),
        )
    }

    /// Judging a whole input from its compact form (with only the objects the rules must read
    /// in full decoded again) gives each object the verdict the full path gives it with the
    /// pods of the whole input.
    #[test]
    fn evaluate_all_agrees_with_full_objects() {
        let now: jiff::Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let text = serde_json::to_string(&json!([
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "n", "generation": 1},
             "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}},
             "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated", "message": "ReplicaSet \"web-abc\" is progressing."}]}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-abc-1", "namespace": "n", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": "web", "pod-template-hash": "abc"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "controller": true}]},
             "status": {"phase": "Pending", "containerStatuses": [{"name": "app", "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "image \"x\" not found"}}}]}},
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "n", "generation": 1},
             "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "api"}}},
             "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loose", "namespace": "n"},
             "status": {"phase": "Pending", "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "ErrImagePull"}}}]}},
            {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "r", "namespace": "n", "generation": 2},
             "status": {"phase": "Degraded", "message": "ProgressDeadlineExceeded"}},
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "n"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}
        ]))
        .unwrap();
        let rules = Rules {
            policy: Policy::strict(),
            health: HealthRules::pack(),
        };
        let mut objects = Vec::new();
        assert!(crate::input::parse_spanned_into(&text, &mut objects));
        let got = rules.evaluate_all(&objects, now);

        let documents = crate::input::parse("f", &text).unwrap();
        let pods = crate::workload::PodIndex::new(
            documents
                .iter()
                .filter(|d| d.kind() == "Pod")
                .map(|d| &d.object),
        );
        let want: Vec<Evaluation> = documents
            .iter()
            .map(|d| rules.evaluate_with_pods(&d.object, pods.for_workload(&d.object), now))
            .collect();
        assert_eq!(got, want);
        // The cases reach the rules that need full objects: the Deployment fails by its pod,
        // the Rollout by the pack.
        assert_eq!(got[0].status, Status::Failed, "{:?}", got[0]);
        assert!(got[0].message.contains("web-abc-1/app: ImagePullBackOff"));
        assert_eq!(got[2].status, Status::InProgress);
        assert_eq!(got[4].status, Status::Failed, "{:?}", got[4]);
        assert_eq!(got[5].status, Status::InProgress);
    }

    #[test]
    fn default_policy_is_kstatus() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Failed"}});
        assert_eq!(both(pod).0.0, Status::Current);
    }

    #[test]
    fn strict_table() {
        let cases: Vec<(&str, Value, Status, &str, &str)> = vec![
            (
                "failed pod",
                json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Failed"}}),
                Status::Failed,
                "PodFailed",
                "Pod has failed",
            ),
            (
                "image pull backoff",
                json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Pending", "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}),
                Status::Failed,
                "ContainerCannotStart",
                "Containers cannot start: app (ImagePullBackOff)",
            ),
            (
                "init crash loop",
                json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Pending", "initContainerStatuses": [{"name": "init", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}),
                Status::Failed,
                "InitContainerCrashLooping",
                "Init containers in CrashLoop state: init (CrashLoopBackOff)",
            ),
            (
                "terminal Ready=False",
                json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "InstallFailed", "message": "timeout"}]}}),
                Status::Failed,
                "InstallFailed",
                "timeout",
            ),
            (
                "gateway not programmed",
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "status": {"conditions": [{"type": "Programmed", "status": "False", "message": "no address"}]}}),
                Status::InProgress,
                "NotProgrammed",
                "Programmed is False: no address",
            ),
            (
                "degraded",
                json!({"apiVersion": "example.com/v1", "kind": "W", "status": {"conditions": [{"type": "Degraded", "status": "True", "message": "half down"}]}}),
                Status::Failed,
                "Degraded",
                "half down",
            ),
            (
                "stale condition",
                json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"generation": 3}, "status": {"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]}}),
                Status::InProgress,
                "ConditionNotObserved",
                "condition Ready is from generation 2, the object is at generation 3",
            ),
            (
                "load balancer without ingress",
                json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1"}, "status": {"loadBalancer": {}}}),
                Status::InProgress,
                "NoIngress",
                "LoadBalancer has no ingress yet",
            ),
            (
                "on-delete not rolled",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"replicas": 3, "updateStrategy": {"type": "OnDelete"}}, "status": {"updatedReplicas": 1, "readyReplicas": 3}}),
                Status::InProgress,
                "LessUpdated",
                "updated: 1/3",
            ),
            (
                "unobserved CR",
                json!({"apiVersion": "example.com/v1", "kind": "W", "spec": {}}),
                Status::InProgress,
                "NotObserved",
                "W has no status yet: its controller has not observed it",
            ),
        ];
        for (name, object, status, reason, message) in cases {
            let (default, strict) = both(object);
            assert_ne!(
                default, strict,
                "{name}: strict must differ from kstatus here"
            );
            assert_eq!(
                strict,
                (status, Some(reason.to_string()), message.to_string()),
                "{name}"
            );
        }
    }

    #[test]
    fn strict_leaves_healthy_objects_alone() {
        for object in [
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role"}),
            json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"generation": 2}, "status": {"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]}}),
            json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1"}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
        ] {
            let (default, strict) = both(object.clone());
            assert_eq!(default, strict, "{object}");
        }
    }

    #[test]
    fn workload_failures_need_the_switch_and_an_unfinished_workload() {
        let now: jiff::Timestamp = "2026-11-26T11:00:00Z".parse().unwrap();
        let stuck_pod = |owner_kind: &str, owner: &str, labels: Value| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{owner}-p"), "namespace": "ns", "labels": labels,
                    "creationTimestamp": "2026-11-26T10:00:00Z",
                    "ownerReferences": [{"kind": owner_kind, "name": owner, "controller": true}]},
                "status": {"phase": "Pending", "containerStatuses": [{"name": "app",
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}]}})
        };
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "generation": 1},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1}});
        let web_pod = stuck_pod(
            "ReplicaSet",
            "web-h",
            json!({"app": "web", "pod-template-hash": "h"}),
        );
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"job": "m"}}},
            "status": {"active": 1, "startTime": "2026-11-26T10:00:00Z"}});
        let job_pod = stuck_pod("Job", "migrate", json!({"job": "m"}));
        let health = HealthRules::default();
        let judge = |object: &Value, pod: &Value, policy: &Policy| {
            compute_with_pods(object, std::slice::from_ref(pod), now, policy, &health)
                .unwrap()
                .status
        };
        let strict = Policy::strict();
        assert_eq!(
            judge(&deployment, &web_pod, &Policy::kstatus()),
            Status::InProgress
        );
        assert_eq!(judge(&deployment, &web_pod, &strict), Status::Failed);
        let without = Policy {
            workload_failures: false,
            ..Policy::strict()
        };
        assert_eq!(judge(&deployment, &web_pod, &without), Status::InProgress);
        // kstatus calls a running Job Current; a Job whose pods cannot start is not.
        assert_eq!(judge(&job, &job_pod, &Policy::kstatus()), Status::Current);
        assert_eq!(judge(&job, &job_pod, &strict), Status::Failed);
        // Not yet past the grace: a running Job without a ready pod is not Current either.
        let early: jiff::Timestamp = "2026-11-26T10:00:05Z".parse().unwrap();
        let early_status = compute_with_pods(
            &job,
            std::slice::from_ref(&job_pod),
            early,
            &strict,
            &health,
        )
        .unwrap();
        assert_eq!(
            (early_status.status, early_status.reason()),
            (Status::InProgress, Some("JobPodsNotStarted"))
        );
        let mut ready = job.clone();
        ready["status"]["ready"] = json!(1);
        assert_eq!(judge(&ready, &json!({}), &strict), Status::Current);
        let mut complete = job.clone();
        complete["status"]["conditions"] = json!([{"type": "Complete", "status": "True"}]);
        assert_eq!(judge(&complete, &job_pod, &strict), Status::Current);
    }

    #[test]
    fn a_status_older_than_the_last_apply_is_not_current() {
        let cr = |apply: &str,
                  status_write: Option<&str>,
                  transition: &str,
                  observed: Option<i64>| {
            let mut managed =
                vec![json!({"manager": "kubectl", "operation": "Apply", "time": apply})];
            if let Some(t) = status_write {
                managed.push(json!({"manager": "ctl", "operation": "Update", "subresource": "status", "time": t}));
            }
            let mut status = json!({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": transition}]});
            if let Some(g) = observed {
                status["observedGeneration"] = json!(g);
            }
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "generation": 2, "managedFields": managed},
                "status": status})
        };
        let at = |t: &str| -> jiff::Timestamp { t.parse().unwrap() };
        let health = HealthRules::default();
        let strict = Policy::strict();
        let judge = |object: &Value, now: &str, policy: &Policy| {
            let e = compute_with_policy(object, at(now), policy, &health).unwrap();
            (
                e.status,
                e.reason().map(str::to_string),
                e.warning.map(|w| w.to_string()),
            )
        };
        let stale = cr(
            "2026-11-26T10:00:10Z",
            Some("2026-11-26T10:00:00Z"),
            "2026-11-26T10:00:00Z",
            None,
        );
        let cases: Vec<(&str, Value, &str, Status)> = vec![
            (
                "status written before the apply",
                stale.clone(),
                "2026-11-26T10:00:20Z",
                Status::InProgress,
            ),
            (
                "status written after the apply",
                cr(
                    "2026-11-26T10:00:10Z",
                    Some("2026-11-26T10:00:15Z"),
                    "2026-11-26T10:00:00Z",
                    None,
                ),
                "2026-11-26T10:00:20Z",
                Status::Current,
            ),
            (
                "a condition moved after the apply",
                cr(
                    "2026-11-26T10:00:10Z",
                    Some("2026-11-26T10:00:00Z"),
                    "2026-11-26T10:00:12Z",
                    None,
                ),
                "2026-11-26T10:00:20Z",
                Status::Current,
            ),
            (
                "observedGeneration says this generation",
                cr(
                    "2026-11-26T10:00:10Z",
                    Some("2026-11-26T10:00:00Z"),
                    "2026-11-26T10:00:00Z",
                    Some(2),
                ),
                "2026-11-26T10:00:20Z",
                Status::Current,
            ),
            (
                "status through the object itself: nothing to tell",
                cr("2026-11-26T10:00:10Z", None, "2026-11-26T10:00:00Z", None),
                "2026-11-26T10:00:20Z",
                Status::Current,
            ),
        ];
        for (case, object, now, want) in cases {
            assert_eq!(judge(&object, now, &strict).0, want, "{case}");
            assert_eq!(
                judge(&object, now, &Policy::kstatus()).0,
                Status::Current,
                "{case}: kstatus"
            );
        }
        assert_eq!(
            judge(&stale, "2026-11-26T10:00:20Z", &strict).1.as_deref(),
            Some("StatusNotObserved")
        );
        // Past the bound: kstatus' judgement, with a warning naming the object.
        let (status, _, warning) = judge(&stale, "2026-11-26T10:01:10Z", &strict);
        assert_eq!(status, Status::Current);
        assert_eq!(
            warning.as_deref(),
            Some(
                "Widget w: its controller wrote no status within 60s of the apply at 2026-11-26T10:00:10Z; judged by kstatus' rules"
            )
        );
        // Expressions judge a stale status no better: the same rule applies to them.
        let exprs = HealthRules::from_yaml(
            "x.yaml",
            "- apiVersion: example.com/v1\n  kind: Widget\n  current: \"true\"\n",
        )
        .unwrap();
        let e = compute_with_policy(&stale, at("2026-11-26T10:00:20Z"), &strict, &exprs).unwrap();
        assert_eq!(e.status, Status::InProgress);
    }
}
