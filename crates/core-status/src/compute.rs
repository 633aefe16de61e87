//! The status of one object, reproducing kstatus' rules exactly (see the module tables in
//! `docs/core-status.md`): generic checks, a rule per special-cased kind, the `Ready`
//! fallback, then Current.

use std::borrow::Cow;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use crate::Status;
use crate::error::StatusError;
use crate::object::{Counter, Fields, ObservedCondition, Parts, Text as Field, api_group};

/// How long an unschedulable Pod is given before it counts as Failed.
pub const SCHEDULE_WINDOW: SignedDuration = SignedDuration::from_secs(15);

/// The standard condition types kstatus computes ("abnormal-true" polarity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ConditionType {
    /// The controller is working on the latest changes; accompanies InProgress.
    Reconciling,
    /// Error or insufficient progress; accompanies Failed.
    Stalled,
}

impl ConditionType {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Reconciling => "Reconciling",
            ConditionType::Stalled => "Stalled",
        }
    }
}

/// Text that is usually a constant: no allocation for the common messages and reasons.
pub type Text = Cow<'static, str>;

/// A computed standard condition. Its status is always `True` and its message is the
/// evaluation's message (kstatus never lets them differ).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub type_: ConditionType,
    pub reason: Text,
}

/// The result of evaluating one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    pub status: Status,
    pub message: Text,
    /// Reconciling with InProgress, Stalled with Failed, none otherwise.
    pub condition: Option<Condition>,
    /// Something the user should know about a result that stands (a stricter rule gave up
    /// and fell back to kstatus' judgement); callers print it as a warning.
    pub warning: Option<Text>,
}

impl Evaluation {
    pub fn current(message: impl Into<Text>) -> Self {
        Self {
            status: Status::Current,
            message: message.into(),
            condition: None,
            warning: None,
        }
    }

    pub fn in_progress(reason: impl Into<Text>, message: impl Into<Text>) -> Self {
        Self {
            status: Status::InProgress,
            message: message.into(),
            condition: Some(Condition {
                type_: ConditionType::Reconciling,
                reason: reason.into(),
            }),
            warning: None,
        }
    }

    pub fn failed(reason: impl Into<Text>, message: impl Into<Text>) -> Self {
        Self {
            status: Status::Failed,
            message: message.into(),
            condition: Some(Condition {
                type_: ConditionType::Stalled,
                reason: reason.into(),
            }),
            warning: None,
        }
    }

    pub fn terminating() -> Self {
        Self::with_status(Status::Terminating, "Resource scheduled for deletion")
    }

    /// Unknown, carrying the error that prevented a computation.
    pub fn unknown(error: &StatusError) -> Self {
        Self::with_status(Status::Unknown, error.to_string())
    }

    fn with_status(status: Status, message: impl Into<Text>) -> Self {
        Self {
            status,
            message: message.into(),
            condition: None,
            warning: None,
        }
    }

    /// The same result, with a warning for the user.
    pub fn with_warning(mut self, warning: impl Into<Text>) -> Self {
        self.warning = Some(warning.into());
        self
    }

    /// The reason of the computed Reconciling/Stalled condition, if any.
    pub fn reason(&self) -> Option<&str> {
        self.condition.as_ref().map(|c| c.reason.as_ref())
    }

    /// The computed conditions as a slice (zero or one).
    pub fn conditions(&self) -> &[Condition] {
        self.condition.as_slice()
    }
}

/// Copies borrowed text out of the object (reasons and messages of its own conditions).
fn owned(text: &str) -> Text {
    Cow::Owned(text.to_string())
}

/// Computes the status of `object` at `now`. Errors (a wrongly typed field, an unknown Pod
/// phase) are returned as such; [`evaluate`] turns them into Unknown.
pub fn compute(object: &Value, now: Timestamp) -> Result<Evaluation, StatusError> {
    compute_fields(&Parts::new(object), now)
}

/// [`compute`] over any representation of an object's fields.
pub fn compute_fields<F: Fields>(object: &F, now: Timestamp) -> Result<Evaluation, StatusError> {
    if let Some(result) = generic_metadata(object)? {
        return Ok(result);
    }
    // Decoded once; every rule reads the same borrowed list.
    let observed = object.conditions()?;
    if let Some(result) = generic_conditions(&observed) {
        return Ok(result);
    }
    if let Some(result) = builtin(object, &observed, now) {
        return result;
    }
    Ok(ready_fallback(&observed))
}

/// [`compute`], with an error turned into an Unknown result carrying the error.
pub fn evaluate(object: &Value, now: Timestamp) -> Evaluation {
    compute(object, now).unwrap_or_else(|e| Evaluation::unknown(&e))
}

/// [`evaluate`] over any representation of an object's fields.
pub fn evaluate_fields<F: Fields>(object: &F, now: Timestamp) -> Evaluation {
    compute_fields(object, now).unwrap_or_else(|e| Evaluation::unknown(&e))
}

/// The special-cased kinds, keyed on group and kind (version ignored, as kstatus does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Builtin {
    AlwaysReady,
    Service,
    Pod,
    PersistentVolumeClaim,
    StatefulSet,
    DaemonSet,
    Deployment,
    ReplicaSet,
    PodDisruptionBudget,
    Job,
    CustomResourceDefinition,
}

/// The built-in rule for a group and kind, if kstatus special-cases it.
pub(crate) fn builtin_rule(group: &str, kind: &str) -> Option<Builtin> {
    Some(match (group, kind) {
        ("", "ConfigMap") | ("", "Secret") | ("batch", "CronJob") => Builtin::AlwaysReady,
        ("", "Service") => Builtin::Service,
        ("", "Pod") => Builtin::Pod,
        ("", "PersistentVolumeClaim") => Builtin::PersistentVolumeClaim,
        ("apps", "StatefulSet") => Builtin::StatefulSet,
        ("apps" | "extensions", "DaemonSet") => Builtin::DaemonSet,
        ("apps" | "extensions", "Deployment") => Builtin::Deployment,
        ("apps" | "extensions", "ReplicaSet") => Builtin::ReplicaSet,
        ("policy", "PodDisruptionBudget") => Builtin::PodDisruptionBudget,
        ("batch", "Job") => Builtin::Job,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => Builtin::CustomResourceDefinition,
        _ => return None,
    })
}

fn builtin<F: Fields>(
    o: &F,
    observed: &[ObservedCondition],
    now: Timestamp,
) -> Option<Result<Evaluation, StatusError>> {
    let rule = builtin_rule(api_group(o.api_version()), o.kind())?;
    Some(Ok(match rule {
        Builtin::AlwaysReady => Evaluation::current("Resource is always ready"),
        Builtin::Service => service(o),
        Builtin::Pod => return Some(pod(o, observed, now)),
        Builtin::PersistentVolumeClaim => pvc(o),
        Builtin::StatefulSet => stateful_set(o),
        Builtin::DaemonSet => return Some(daemon_set(o)),
        Builtin::Deployment => deployment(o, observed),
        Builtin::ReplicaSet => replica_set(o, observed),
        Builtin::PodDisruptionBudget => {
            Evaluation::current("AllowedDisruptions has been computed.")
        }
        Builtin::Job => job(o, observed),
        Builtin::CustomResourceDefinition => crd(observed),
    }))
}

/// A lenient counter: an integer, else `default`.
fn count<F: Fields>(o: &F, counter: Counter, default: i64) -> i64 {
    o.counter(counter).unwrap_or(default)
}

/// A lenient string: a string, else `default`.
fn text<'a, F: Fields>(o: &'a F, field: Field, default: &'a str) -> &'a str {
    o.text(field).unwrap_or(default)
}

/// Deletion and generation: checked for every kind first.
fn generic_metadata<F: Fields>(object: &F) -> Result<Option<Evaluation>, StatusError> {
    if let Some(ts) = object.deletion_timestamp()?
        && !ts.is_empty()
    {
        return Ok(Some(Evaluation::terminating()));
    }
    if let Some(observed) = object.observed_generation()?
        && let Some(generation) = object.generation()?
        && generation != observed
    {
        let kind = object.kind();
        return Ok(Some(Evaluation::in_progress(
            "LatestGenerationNotObserved",
            format!(
                "{kind} generation is {generation}, but latest observed generation is {observed}"
            ),
        )));
    }
    Ok(None)
}

/// The standard conditions, checked for every kind after the metadata.
fn generic_conditions(observed: &[ObservedCondition]) -> Option<Evaluation> {
    for condition in observed.iter().filter(|c| c.status == "True") {
        match condition.type_ {
            "Reconciling" => {
                return Some(Evaluation::in_progress(
                    owned(condition.reason),
                    owned(condition.message),
                ));
            }
            "Stalled" => {
                return Some(Evaluation::failed(
                    owned(condition.reason),
                    owned(condition.message),
                ));
            }
            _ => {}
        }
    }
    None
}

fn ready_fallback(observed: &[ObservedCondition]) -> Evaluation {
    for condition in observed.iter().filter(|c| c.type_ == "Ready") {
        match condition.status {
            "True" => return Evaluation::current("Resource is Ready"),
            "False" | "Unknown" => {
                return Evaluation::in_progress(owned(condition.reason), owned(condition.message));
            }
            _ => {}
        }
    }
    Evaluation::current("Resource is current")
}

fn has_true(conditions: &[ObservedCondition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn deployment<F: Fields>(o: &F, observed: &[ObservedCondition]) -> Evaluation {
    let spec = count(o, Counter::SpecReplicas, 1);
    let replicas = count(o, Counter::Replicas, 0);
    let updated = count(o, Counter::UpdatedReplicas, 0);
    let ready = count(o, Counter::ReadyReplicas, 0);
    let available = count(o, Counter::AvailableReplicas, 0);
    // Without a progress deadline the controller never reports progress, so don't wait for it.
    let mut progressing =
        count(o, Counter::ProgressDeadlineSeconds, i64::from(i32::MAX)) == i64::from(i32::MAX);
    let mut is_available = false;
    for c in observed {
        match c.type_ {
            "Progressing" if c.reason == "ProgressDeadlineExceeded" => {
                return Evaluation::failed(
                    "ProgressDeadlineExceeded",
                    "Progress deadline exceeded",
                );
            }
            "Progressing" if c.status == "True" && c.reason == "NewReplicaSetAvailable" => {
                progressing = true
            }
            "Available" if c.status == "True" => is_available = true,
            _ => {}
        }
    }
    if spec > replicas {
        Evaluation::in_progress("LessReplicas", format!("Replicas: {replicas}/{spec}"))
    } else if spec > updated {
        Evaluation::in_progress("LessUpdated", format!("Updated: {updated}/{spec}"))
    } else if replicas > spec {
        Evaluation::in_progress(
            "ExtraPods",
            format!("Pending termination: {}", replicas - spec),
        )
    } else if updated > available {
        Evaluation::in_progress("LessAvailable", format!("Available: {available}/{updated}"))
    } else if spec > ready {
        Evaluation::in_progress("LessReady", format!("Ready: {ready}/{spec}"))
    } else if !progressing {
        Evaluation::in_progress("ReplicaSetNotAvailable", "ReplicaSet not Available")
    } else if !is_available {
        Evaluation::in_progress("DeploymentNotAvailable", "Deployment not Available")
    } else {
        Evaluation::current(format!("Deployment is available. Replicas: {replicas}"))
    }
}

fn stateful_set<F: Fields>(o: &F) -> Evaluation {
    if text(o, Field::UpdateStrategyType, "") == "OnDelete" {
        return Evaluation::current("StatefulSet is using the ondelete update strategy");
    }
    let spec = count(o, Counter::SpecReplicas, 1);
    let replicas = count(o, Counter::Replicas, 0);
    let ready = count(o, Counter::ReadyReplicas, 0);
    let current = count(o, Counter::CurrentReplicas, 0);
    let updated = count(o, Counter::UpdatedReplicas, 0);
    let partition = count(o, Counter::Partition, -1);
    if spec > replicas {
        return Evaluation::in_progress("LessReplicas", format!("Replicas: {replicas}/{spec}"));
    }
    if spec > ready {
        return Evaluation::in_progress("LessReady", format!("Ready: {ready}/{spec}"));
    }
    if replicas > spec {
        return Evaluation::in_progress(
            "ExtraPods",
            format!("Pending termination: {}", replicas - spec),
        );
    }
    if partition != -1 {
        let want = spec - partition;
        if updated < want {
            return Evaluation::in_progress(
                "PartitionRollout",
                format!("updated: {updated}/{want}"),
            );
        }
        return Evaluation::current(format!("Partition rollout complete. updated: {updated}"));
    }
    if spec > current {
        return Evaluation::in_progress("LessCurrent", format!("current: {current}/{spec}"));
    }
    if text(o, Field::CurrentRevision, "") != text(o, Field::UpdateRevision, "") {
        return Evaluation::in_progress(
            "RevisionMismatch",
            "Waiting for updated revision to match current",
        );
    }
    Evaluation::current(format!(
        "All replicas scheduled as expected. Replicas: {replicas}"
    ))
}

fn daemon_set<F: Fields>(o: &F) -> Result<Evaluation, StatusError> {
    let kind = o.kind();
    if o.generation()?.is_none() {
        let message = format!("{kind} metadata.generation not found");
        return Ok(Evaluation::in_progress("NoGeneration", message));
    }
    if o.observed_generation()?.is_none() {
        let message = format!("{kind} status.observedGeneration not found");
        return Ok(Evaluation::in_progress("NoObservedGeneration", message));
    }
    let desired = count(o, Counter::DesiredNumberScheduled, -1);
    let current = count(o, Counter::CurrentNumberScheduled, 0);
    let updated = count(o, Counter::UpdatedNumberScheduled, 0);
    let available = count(o, Counter::NumberAvailable, 0);
    let ready = count(o, Counter::NumberReady, 0);
    Ok(if desired == -1 {
        Evaluation::in_progress("NoDesiredNumber", "Missing .status.desiredNumberScheduled")
    } else if desired > current {
        Evaluation::in_progress("LessCurrent", format!("Current: {current}/{desired}"))
    } else if desired > updated {
        Evaluation::in_progress("LessUpdated", format!("Updated: {updated}/{desired}"))
    } else if desired > available {
        Evaluation::in_progress("LessAvailable", format!("Available: {available}/{desired}"))
    } else if desired > ready {
        Evaluation::in_progress("LessReady", format!("Ready: {ready}/{desired}"))
    } else {
        Evaluation::current(format!(
            "All replicas scheduled as expected. Replicas: {desired}"
        ))
    })
}

fn replica_set<F: Fields>(o: &F, observed: &[ObservedCondition]) -> Evaluation {
    if has_true(observed, "ReplicaFailure") {
        return Evaluation::in_progress("ReplicaFailure", "Replica Failure condition. Check Pods");
    }
    let spec = count(o, Counter::SpecReplicas, 1);
    let replicas = count(o, Counter::Replicas, 0);
    let labelled = count(o, Counter::FullyLabeledReplicas, 0);
    let available = count(o, Counter::AvailableReplicas, 0);
    let ready = count(o, Counter::ReadyReplicas, 0);
    if spec > labelled {
        Evaluation::in_progress("LessLabelled", format!("Labelled: {labelled}/{spec}"))
    } else if spec > available {
        Evaluation::in_progress("LessAvailable", format!("Available: {available}/{spec}"))
    } else if spec > ready {
        Evaluation::in_progress("LessReady", format!("Ready: {ready}/{spec}"))
    } else if replicas > spec {
        Evaluation::in_progress(
            "ExtraPods",
            format!("Pending termination: {}", replicas - spec),
        )
    } else {
        Evaluation::current(format!("ReplicaSet is available. Replicas: {replicas}"))
    }
}

/// Creation time; absent or unparsable counts as infinitely old (Go's zero time).
fn created<F: Fields>(o: &F) -> Option<Timestamp> {
    text(o, Field::CreationTimestamp, "").parse().ok()
}

fn pod<F: Fields>(
    o: &F,
    observed: &[ObservedCondition],
    now: Timestamp,
) -> Result<Evaluation, StatusError> {
    let phase = text(o, Field::Phase, "");
    Ok(match phase {
        "Succeeded" => Evaluation::current("Pod has completed successfully"),
        "Failed" => Evaluation::current("Pod has completed, but not successfully"),
        "Running" => {
            if has_true(observed, "Ready") {
                return Ok(Evaluation::current("Pod is Ready"));
            }
            let looping = o.crash_looping();
            if looping.is_empty() {
                Evaluation::in_progress("PodRunningNotReady", "Pod is running but is not Ready")
            } else {
                Evaluation::failed(
                    "ContainerCrashLooping",
                    format!("Containers in CrashLoop state: {}", looping.join(",")),
                )
            }
        }
        "Pending" => {
            let unschedulable = observed
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .is_some_and(|c| c.reason == "Unschedulable");
            if !unschedulable {
                Evaluation::in_progress("PodPending", "Pod is in the Pending phase")
            } else if created(o).is_some_and(|created| now - SCHEDULE_WINDOW < created) {
                Evaluation::in_progress("PodNotScheduled", "Pod has not been scheduled")
            } else {
                Evaluation::failed("PodUnschedulable", "Pod could not be scheduled")
            }
        }
        "" => Evaluation::in_progress("PodNotObserved", "Pod phase not available"),
        other => return Err(StatusError::UnknownPhase(other.to_string())),
    })
}

fn pvc<F: Fields>(o: &F) -> Evaluation {
    let phase = text(o, Field::Phase, "unknown");
    if phase == "Bound" {
        Evaluation::current("PVC is Bound")
    } else {
        Evaluation::in_progress("NotBound", format!("PVC is not Bound. phase: {phase}"))
    }
}

fn service<F: Fields>(o: &F) -> Evaluation {
    if text(o, Field::ServiceType, "ClusterIP") == "LoadBalancer"
        && text(o, Field::ClusterIp, "").is_empty()
    {
        return Evaluation::in_progress(
            "NoIPAssigned",
            "ClusterIP not set. Service type: LoadBalancer",
        );
    }
    Evaluation::current("Service is ready")
}

fn job<F: Fields>(o: &F, observed: &[ObservedCondition]) -> Evaluation {
    let parallelism = count(o, Counter::Parallelism, 1);
    let completions = count(o, Counter::Completions, parallelism);
    let succeeded = count(o, Counter::Succeeded, 0);
    let active = count(o, Counter::Active, 0);
    let failed = count(o, Counter::Failed, 0);
    let suspend = o.suspended();
    for c in observed.iter().filter(|c| c.status == "True") {
        match c.type_ {
            "Complete" => {
                return Evaluation::current(format!(
                    "Job Completed. succeeded: {succeeded}/{completions}"
                ));
            }
            "Failed" => {
                return Evaluation::failed(
                    "JobFailed",
                    format!("Job Failed. failed: {failed}/{completions}"),
                );
            }
            "Suspended" if suspend => return Evaluation::current("Job is suspended"),
            _ => {}
        }
    }
    if text(o, Field::StartTime, "").is_empty() {
        return Evaluation::in_progress("JobNotStarted", "Job not started");
    }
    Evaluation::current(format!(
        "Job in progress. success:{succeeded}, active: {active}, failed: {failed}"
    ))
}

fn crd(observed: &[ObservedCondition]) -> Evaluation {
    for c in observed {
        match (c.type_, c.status) {
            ("NamesAccepted", "False") => {
                return Evaluation::failed(owned(c.reason), owned(c.message));
            }
            ("Established", "False") if c.reason != "Installing" => {
                return Evaluation::failed(owned(c.reason), owned(c.message));
            }
            ("Established", "True") => return Evaluation::current("CRD is established"),
            _ => {}
        }
    }
    Evaluation::in_progress("Installing", "Install in progress")
}
