//! Waiting for a set of objects in a live cluster to become Current (optionally with Jobs
//! complete) or to be deleted.
//!
//! Two engines share one decision core ([`Tracker`]):
//! - **watch** (default): one shared watch per (kind, namespace) — not one per object —
//!   narrowed to the object's name when it is alone in its group;
//! - **poll**: one LIST per (kind, namespace) every interval, for users whose RBAC allows
//!   `list` but not `watch`.
//!
//! What they add over kstatus' waiters: objects never seen after the initial list are
//! resolved by a GET (NotFound vs Unknown) instead of staying Unknown; kinds whose CRD is not
//! served yet are retried until it is; a staleness guard refuses Current from an object whose
//! generation is older than the one just applied; paused Deployments are not waited on
//! (Helm's rule); time-dependent rules are re-evaluated every second; a Failed object ends a
//! wait for Current early.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use core_k8s::apply::{ApiDiscovery, DiscoveryCache, parse_api_version};
use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::Value;

use crate::compute::{Evaluation, evaluate};
use crate::object::{conditions, int_or, lookup, str_or};
use crate::policy::Rules;
use crate::{Status, aggregate};

/// What to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFor {
    /// Every object Current.
    Current,
    /// Every object Current, and every Job complete (a running Job is not enough).
    CurrentWithJobs,
    /// Every object gone.
    Deleted,
    /// Helm's hook wait (`WatchUntilReady`): only Pods and Jobs are waited for, until they
    /// complete (a Pod Succeeded, a Job Complete); a failed one ends the wait. Every other
    /// kind is left out.
    Hooks,
}

impl WaitFor {
    fn desired(self) -> Status {
        match self {
            WaitFor::Current | WaitFor::CurrentWithJobs | WaitFor::Hooks => Status::Current,
            WaitFor::Deleted => Status::NotFound,
        }
    }
}

/// Which engine reads the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Watch,
    Poll { interval: Duration },
}

/// One object to wait for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub api_version: String,
    pub kind: String,
    /// Empty for cluster-scoped objects (filled from the default namespace when the kind is
    /// namespaced and the manifest had none).
    pub namespace: String,
    pub name: String,
    /// The generation just applied, if known: an older generation is never Current.
    pub min_generation: Option<i64>,
}

impl Target {
    /// A target from a manifest.
    pub fn from_object(object: &Value) -> Self {
        Self {
            api_version: str_or(object, &["apiVersion"], "").to_string(),
            kind: str_or(object, &["kind"], "").to_string(),
            namespace: str_or(object, &["metadata", "namespace"], "").to_string(),
            name: str_or(object, &["metadata", "name"], "").to_string(),
            min_generation: None,
        }
    }

    /// `Kind/namespace/name` (or `Kind/name`), as summaries print it.
    pub fn id(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.kind, self.name)
        } else {
            format!("{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }

    fn gvk(&self) -> Option<GroupVersionKind> {
        let (group, version) = parse_api_version(&self.api_version)?;
        Some(GroupVersionKind::gvk(group, version, &self.kind))
    }
}

/// The latest known state of one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetState {
    pub status: Status,
    pub message: String,
    pub reason: Option<String>,
    /// A warning about a result that stands (see [`Evaluation::warning`]).
    pub warning: Option<String>,
}

impl TargetState {
    fn unknown(message: impl Into<String>) -> Self {
        Self {
            status: Status::Unknown,
            message: message.into(),
            reason: None,
            warning: None,
        }
    }

    fn not_found() -> Self {
        Self {
            status: Status::NotFound,
            message: "Resource not found".into(),
            reason: None,
            warning: None,
        }
    }

    fn from_evaluation(e: Evaluation) -> Self {
        Self {
            reason: e.reason().map(str::to_string),
            warning: e.warning.as_ref().map(ToString::to_string),
            status: e.status,
            message: e.message.into_owned(),
        }
    }
}

/// A view of the wait for progress reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub ready: usize,
    pub total: usize,
    /// Every not-ready object (in target order) with its state.
    pub waiting: Vec<(Target, TargetState)>,
}

impl Progress {
    /// The first not-ready object (in target order) and its state.
    pub fn blocking(&self) -> Option<&(Target, TargetState)> {
        self.waiting.first()
    }
}

/// How a wait ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every object reached the desired state.
    Done,
    /// An object Failed while waiting for Current.
    Failed,
    TimedOut,
}

/// The result of a wait: the outcome and every object's final state.
#[derive(Clone, Debug)]
pub struct Report {
    pub outcome: Outcome,
    pub states: Vec<(Target, TargetState)>,
    /// Paused Deployments left out of the wait.
    pub skipped: Vec<Target>,
    pub mode: WaitFor,
}

impl Report {
    /// One line per object that did not reach the desired state.
    pub fn summary(&self) -> Vec<String> {
        let desired = self.mode.desired();
        self.states
            .iter()
            .filter(|(_, s)| s.status != desired)
            .map(|(t, s)| match self.mode {
                WaitFor::Deleted => format!(
                    "resource {} still exists. status: {}, message: {}",
                    t.id(),
                    s.status,
                    s.message
                ),
                _ => format!(
                    "resource {} not ready. status: {}, message: {}",
                    t.id(),
                    s.status,
                    s.message
                ),
            })
            .collect()
    }
}

/// The Helm-style Job reader used with `--jobs`: only completion counts.
fn job_for_completion(object: &Value) -> Option<Evaluation> {
    let parallelism = int_or(object, &["spec", "parallelism"], 1);
    let completions = int_or(object, &["spec", "completions"], parallelism);
    let succeeded = int_or(object, &["status", "succeeded"], 0);
    let failed = int_or(object, &["status", "failed"], 0);
    let conds = conditions(object).ok()?;
    for c in conds.iter().filter(|c| c.status == "True") {
        match c.type_ {
            "Complete" => {
                return Some(Evaluation::current(format!(
                    "Job Completed. succeeded: {succeeded}/{completions}"
                )));
            }
            "Failed" => {
                return Some(Evaluation::failed(
                    "JobFailed",
                    format!("Job Failed. failed: {failed}/{completions}"),
                ));
            }
            _ => {}
        }
    }
    Some(Evaluation::in_progress("JobInProgress", "Job in progress"))
}

/// The Helm hook reader of a Pod: only completion counts.
fn pod_for_completion(object: &Value) -> Evaluation {
    match str_or(object, &["status", "phase"], "") {
        "Succeeded" => Evaluation::current("Pod completed successfully"),
        "Failed" => Evaluation::failed("PodFailed", "Pod failed"),
        "" => Evaluation::in_progress("PodNotCompleted", "Pod has not started"),
        phase => Evaluation::in_progress("PodNotCompleted", format!("Pod phase is {phase}")),
    }
}

/// Whether a hook wait waits for this kind (Pods and Jobs).
pub fn is_hook_kind(target: &Target) -> bool {
    matches!(
        (
            crate::object::api_group(&target.api_version),
            target.kind.as_str()
        ),
        ("", "Pod") | ("batch", "Job")
    )
}

/// The state of a live object for this wait: custom health expressions, else kstatus' rules,
/// plus the wait's own (Jobs in `--jobs` mode, the staleness guard).
pub fn judge(
    target: &Target,
    object: &Value,
    mode: WaitFor,
    now: Timestamp,
    rules: &Rules,
) -> TargetState {
    judge_with_pods(target, object, &[], mode, now, rules)
}

/// [`judge`] for a workload whose pods are known: under a policy with `workload_failures`,
/// pods that cannot start fail it.
pub fn judge_with_pods(
    target: &Target,
    object: &Value,
    pods: &[Value],
    mode: WaitFor,
    now: Timestamp,
    rules: &Rules,
) -> TargetState {
    let is_job = crate::object::api_group(&target.api_version) == "batch" && target.kind == "Job";
    let deleting = !str_or(object, &["metadata", "deletionTimestamp"], "").is_empty();
    let evaluation = match (mode, is_job) {
        (WaitFor::CurrentWithJobs | WaitFor::Hooks, true) if !deleting => {
            match job_for_completion(object) {
                Some(e) if e.status == Status::InProgress && rules.needs_pods() => {
                    crate::workload::judge_pods(object, pods, now, rules.policy.failure_grace)
                        .unwrap_or(e)
                }
                Some(e) => e,
                None => evaluate(object, now),
            }
        }
        (WaitFor::Hooks, false) if !deleting && is_hook_kind(target) => pod_for_completion(object),
        _ => rules.evaluate_with_pods(object, pods, now),
    };
    let mut state = TargetState::from_evaluation(evaluation);
    if state.status == Status::Current
        && let Some(min) = target.min_generation
    {
        let generation = int_or(object, &["metadata", "generation"], 0);
        if generation < min {
            state = TargetState {
                status: Status::InProgress,
                message: format!(
                    "status is from generation {generation}, older than the applied generation {min}"
                ),
                reason: Some("StaleGeneration".into()),
                warning: None,
            };
        }
    }
    state
}

/// Whether Helm would leave this object out of a wait (a paused Deployment).
pub fn is_paused_deployment(object: &Value) -> bool {
    matches!(
        crate::object::api_group(str_or(object, &["apiVersion"], "")),
        "apps" | "extensions"
    ) && str_or(object, &["kind"], "") == "Deployment"
        && lookup(object, &["spec", "paused"]).and_then(Value::as_bool) == Some(true)
}

/// The decision core shared by both engines: the latest object per target, re-judged on
/// every change and every tick.
#[derive(Debug)]
pub struct Tracker {
    mode: WaitFor,
    rules: Rules,
    targets: Vec<Target>,
    objects: HashMap<usize, Option<Value>>,
    /// The pods of workload targets, when the rules judge them.
    pods: HashMap<usize, Vec<Value>>,
    states: Vec<TargetState>,
    skipped: Vec<Target>,
}

impl Tracker {
    pub fn new(targets: Vec<Target>, mode: WaitFor) -> Self {
        Self::with_rules(targets, mode, Rules::default())
    }

    /// A tracker that judges with a stricter policy and/or custom health expressions.
    pub fn with_rules(targets: Vec<Target>, mode: WaitFor, rules: Rules) -> Self {
        let states = targets
            .iter()
            .map(|_| TargetState::unknown("waiting for the first observation"))
            .collect();
        Self {
            mode,
            rules,
            targets,
            objects: HashMap::new(),
            pods: HashMap::new(),
            states,
            skipped: Vec::new(),
        }
    }

    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// Records the object (`None` = confirmed absent) for target `i` and re-judges it.
    pub fn observe(&mut self, i: usize, mut object: Option<Value>, now: Timestamp) {
        // Items of a LIST or watch come without apiVersion/kind; without them every object
        // would fall through to the generic rules (a stuck Deployment would look Current).
        if let Some(Value::Object(map)) = &mut object {
            let target = &self.targets[i];
            map.entry("apiVersion")
                .or_insert_with(|| target.api_version.clone().into());
            map.entry("kind")
                .or_insert_with(|| target.kind.clone().into());
        }
        if self.mode != WaitFor::Deleted
            && let Some(o) = &object
            && is_paused_deployment(o)
            && !self.skipped.contains(&self.targets[i])
        {
            self.skipped.push(self.targets[i].clone());
        }
        self.objects.insert(i, object);
        self.rejudge(i, now);
    }

    /// Records the current pods of workload target `i` (found by its selector) and re-judges it.
    pub fn observe_pods(&mut self, i: usize, pods: Vec<Value>, now: Timestamp) {
        self.pods.insert(i, pods);
        self.rejudge(i, now);
    }

    /// Whether target `i` is a workload whose pods the rules judge, and its object is known.
    pub fn wants_pods(&self, i: usize) -> Option<&Value> {
        let target = &self.targets[i];
        if !self.rules.needs_pods()
            || self.mode == WaitFor::Deleted
            || !crate::workload::is_workload(&target.api_version, &target.kind)
        {
            return None;
        }
        self.objects.get(&i)?.as_ref()
    }

    /// Marks target `i` as not determinable (e.g. its kind is not served yet).
    pub fn unknown(&mut self, i: usize, message: impl Into<String>) {
        self.objects.remove(&i);
        self.states[i] = TargetState::unknown(message);
    }

    fn rejudge(&mut self, i: usize, now: Timestamp) {
        self.states[i] = match self.objects.get(&i) {
            Some(Some(object)) => judge_with_pods(
                &self.targets[i],
                object,
                self.pods.get(&i).map_or(&[][..], Vec::as_slice),
                self.mode,
                now,
                &self.rules,
            ),
            Some(None) => TargetState::not_found(),
            None => return,
        };
    }

    /// Re-evaluates every known object (time-dependent rules such as Pod scheduling).
    pub fn tick(&mut self, now: Timestamp) {
        for i in 0..self.targets.len() {
            self.rejudge(i, now);
        }
    }

    fn counted(&self) -> impl Iterator<Item = (usize, &TargetState)> {
        self.states
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.skipped.contains(&self.targets[*i]))
    }

    /// Done, failed early, or still waiting (`None`).
    pub fn outcome(&self) -> Option<Outcome> {
        let desired = self.mode.desired();
        let statuses: Vec<Status> = self.counted().map(|(_, s)| s.status).collect();
        if self.mode != WaitFor::Deleted && statuses.contains(&Status::Failed) {
            return Some(Outcome::Failed);
        }
        (aggregate(statuses, desired) == desired).then_some(Outcome::Done)
    }

    pub fn progress(&self) -> Progress {
        let desired = self.mode.desired();
        let counted: Vec<(usize, &TargetState)> = self.counted().collect();
        let ready = counted.iter().filter(|(_, s)| s.status == desired).count();
        let waiting: Vec<(Target, TargetState)> = counted
            .iter()
            .filter(|(_, s)| s.status != desired)
            .map(|(i, s)| (self.targets[*i].clone(), (*s).clone()))
            .collect();
        Progress {
            ready,
            total: counted.len(),
            waiting,
        }
    }

    pub fn report(&self, outcome: Outcome) -> Report {
        Report {
            outcome,
            states: self
                .targets
                .iter()
                .cloned()
                .zip(self.states.iter().cloned())
                .filter(|(t, _)| !self.skipped.contains(t))
                .collect(),
            skipped: self.skipped.clone(),
            mode: self.mode,
        }
    }
}

/// Options of a wait.
#[derive(Clone, Debug)]
pub struct WaitOptions {
    pub mode: WaitFor,
    pub engine: Engine,
    pub timeout: Duration,
    /// Stricter policy and custom health expressions.
    pub rules: Rules,
}

/// Targets of one kind in one namespace (`""` = cluster-scoped), read by one watch or LIST.
#[derive(Debug)]
struct Group {
    gvk: GroupVersionKind,
    namespace: String,
    members: BTreeMap<String, usize>,
}

fn group_targets(targets: &[Target]) -> Result<Vec<Group>, crate::StatusError> {
    let mut groups: BTreeMap<(String, String, String, String), Group> = BTreeMap::new();
    for (i, t) in targets.iter().enumerate() {
        let gvk = t.gvk().ok_or_else(|| crate::StatusError::FieldType {
            field: format!("{}: apiVersion", t.id()),
            expected: "GROUP/VERSION or VERSION",
            found: format!("{:?}", t.api_version),
        })?;
        let key = (
            gvk.group.clone(),
            gvk.version.clone(),
            gvk.kind.clone(),
            t.namespace.clone(),
        );
        groups
            .entry(key)
            .or_insert_with(|| Group {
                gvk,
                namespace: t.namespace.clone(),
                members: BTreeMap::new(),
            })
            .members
            .insert(t.name.clone(), i);
    }
    Ok(groups.into_values().collect())
}

enum Update {
    Seen(usize, Value),
    /// Every current pod of a workload target.
    Pods(usize, Vec<Value>),
    Gone(usize),
    /// The initial list of a group finished; these members were not in it.
    Listed(Vec<usize>),
    /// The watch of a group failed (it is restarted by the watcher's backoff).
    Error(Vec<usize>, String),
}

/// Fills in the namespace of namespaced targets that had none, and drops the namespace of
/// cluster-scoped ones (a manifest may carry one by mistake; the API server ignores it).
async fn normalise_namespaces(
    client: &Client,
    discovery: &DiscoveryCache<ApiDiscovery>,
    targets: &mut [Target],
) {
    let default_namespace = client.default_namespace().to_string();
    for target in targets.iter_mut() {
        let Some(gvk) = target.gvk() else { continue };
        if let Ok(kind) = discovery.resolve(&gvk).await {
            if kind.namespaced && target.namespace.is_empty() {
                target.namespace = default_namespace.clone();
            } else if !kind.namespaced {
                target.namespace.clear();
            }
        } else if target.namespace.is_empty() {
            // Unknown kind (CRD not there yet): guess namespaced, as most CRs are.
            target.namespace = default_namespace.clone();
        }
    }
}

/// Waits for `targets` per `options`, calling `on_progress` whenever the progress changes.
pub async fn wait(
    client: Client,
    mut targets: Vec<Target>,
    options: WaitOptions,
    mut on_progress: impl FnMut(&Progress),
) -> Result<Report, crate::StatusError> {
    // Hooks: only Pods and Jobs are waited for (nor read: no permission is needed for the rest).
    let mut ignored = Vec::new();
    if options.mode == WaitFor::Hooks {
        let (hooks, rest): (Vec<Target>, Vec<Target>) = targets.into_iter().partition(is_hook_kind);
        targets = hooks;
        ignored = rest;
    }
    // One cache for every reader: a kind resolved once is not asked for again.
    let discovery = Arc::new(DiscoveryCache::new(ApiDiscovery::new(client.clone())));
    normalise_namespaces(&client, &discovery, &mut targets).await;
    let groups = group_targets(&targets)?;
    // Every (kind, namespace) the wait reads; a strict wait also reads its workloads' pods.
    let mut scopes: Vec<(GroupVersionKind, String)> = groups
        .iter()
        .map(|g| (g.gvk.clone(), g.namespace.clone()))
        .collect();
    if options.rules.needs_pods() && options.mode != WaitFor::Deleted {
        let pod = GroupVersionKind::gvk("", "v1", "Pod");
        for t in targets
            .iter()
            .filter(|t| crate::workload::is_workload(&t.api_version, &t.kind))
        {
            let scope = (pod.clone(), t.namespace.clone());
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
    }
    check_access(&client, &discovery, &scopes, options.engine).await?;
    let mut tracker = Tracker::with_rules(targets, options.mode, options.rules);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Update>(1024);
    let mut readers = Vec::new();
    for group in groups {
        let client = client.clone();
        let tx = tx.clone();
        let engine = options.engine;
        let discovery = discovery.clone();
        readers.push(tokio::spawn(async move {
            run_group(client, &discovery, group, engine, tx).await;
        }));
    }
    // Pod readers start once a workload is seen (its selector is needed); they share the
    // channel, through a sender kept here so the channel stays open for them.
    let pod_tx = tx.clone();
    let mut pod_readers: HashMap<usize, tokio::task::JoinHandle<()>> = HashMap::new();
    drop(tx);

    let deadline = tokio::time::sleep(options.timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut last_progress = None;
    let outcome = loop {
        if let Some(outcome) = tracker.outcome() {
            break outcome;
        }
        let progress = tracker.progress();
        if last_progress.as_ref() != Some(&progress) {
            on_progress(&progress);
            last_progress = Some(progress);
        }
        tokio::select! {
            _ = &mut deadline => break tracker.outcome().unwrap_or(Outcome::TimedOut),
            _ = ticker.tick() => tracker.tick(Timestamp::now()),
            update = rx.recv() => match update {
                Some(Update::Seen(i, object)) => {
                    tracker.observe(i, Some(object), Timestamp::now());
                    if !pod_readers.contains_key(&i)
                        && let Some(workload) = tracker.wants_pods(i)
                        && let Some(selector) = crate::workload::selector_query(workload)
                    {
                        let reader = read_pods(
                            client.clone(),
                            tracker.targets()[i].namespace.clone(),
                            selector,
                            i,
                            options.engine,
                            pod_tx.clone(),
                        );
                        pod_readers.insert(i, tokio::spawn(reader));
                    }
                }
                Some(Update::Pods(i, pods)) => tracker.observe_pods(i, pods, Timestamp::now()),
                Some(Update::Gone(i)) => tracker.observe(i, None, Timestamp::now()),
                Some(Update::Listed(missing)) => {
                    for i in missing {
                        let state = confirm_absent(&client, &discovery, &tracker.targets()[i]).await;
                        match state {
                            Ok(Some(object)) => tracker.observe(i, Some(object), Timestamp::now()),
                            Ok(None) => tracker.observe(i, None, Timestamp::now()),
                            Err(message) => tracker.unknown(i, message),
                        }
                    }
                }
                Some(Update::Error(members, message)) => {
                    for i in members {
                        tracker.unknown(i, message.clone());
                    }
                }
                None => {
                    // Every reader ended (only possible when all were stopped); wait out the deadline.
                    (&mut deadline).await;
                    break tracker.outcome().unwrap_or(Outcome::TimedOut);
                }
            },
        }
    };
    // Aborting a reader ends its watch or poll loop.
    for reader in readers.into_iter().chain(pod_readers.into_values()) {
        reader.abort();
    }
    let progress = tracker.progress();
    if last_progress.as_ref() != Some(&progress) {
        on_progress(&progress);
    }
    let mut report = tracker.report(outcome);
    report.skipped.extend(ignored);
    Ok(report)
}

/// The verbs an engine needs on every kind it reads.
fn needed_verbs(engine: Engine) -> &'static [&'static str] {
    match engine {
        Engine::Watch => &["list", "watch"],
        Engine::Poll { .. } => &["list"],
    }
}

/// Asks the API server, before waiting, whether this user may do everything the wait needs
/// (SelfSubjectAccessReview per kind, namespace and verb), so a missing permission is one clear
/// error naming every kind instead of a wait that hangs on a watch that can never start.
/// Kinds not served yet (their CRD is still coming) and an API server that does not answer
/// reviews are not checked here.
async fn check_access(
    client: &Client,
    discovery: &DiscoveryCache<ApiDiscovery>,
    scopes: &[(GroupVersionKind, String)],
    engine: Engine,
) -> Result<(), crate::StatusError> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut asks = Vec::new();
    for (gvk, scope) in scopes {
        let Ok(kind) = discovery.resolve(gvk).await else {
            continue;
        };
        let namespace = (kind.namespaced && !scope.is_empty()).then(|| scope.clone());
        for verb in needed_verbs(engine) {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(gvk.group.clone()),
                        resource: Some(kind.resource.plural.clone()),
                        namespace: namespace.clone(),
                        verb: Some((*verb).to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let reviews = reviews.clone();
            let what = (gvk.kind.clone(), namespace.clone(), *verb);
            asks.push(async move {
                let answer = reviews
                    .create(&kube::api::PostParams::default(), &review)
                    .await;
                (what, answer)
            });
        }
    }
    let mut denied: BTreeMap<(String, Option<String>), Vec<&str>> = BTreeMap::new();
    for ((kind, namespace, verb), answer) in futures::future::join_all(asks).await {
        match answer {
            Ok(review) if review.status.as_ref().is_some_and(|s| !s.allowed) => {
                denied.entry((kind, namespace)).or_default().push(verb);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "access review failed; not checking permissions up front");
                return Ok(());
            }
        }
    }
    if denied.is_empty() {
        return Ok(());
    }
    let missing: Vec<String> = denied
        .into_iter()
        .map(|((kind, namespace), verbs)| {
            let scope = match namespace {
                Some(ns) => format!("in namespace {ns}"),
                None => "cluster-wide".to_string(),
            };
            format!("{} {kind} {scope}", verbs.join(" and "))
        })
        .collect();
    Err(crate::StatusError::Access(format!(
        "this user may not {} (a wait needs {} on every kind it waits for)",
        missing.join("; "),
        needed_verbs(engine).join(" and ")
    )))
}

/// The live GET that settles a target the initial list did not contain: NotFound if the API
/// says so, the object if it appeared meanwhile, else an error message (Unknown).
async fn confirm_absent(
    client: &Client,
    discovery: &DiscoveryCache<ApiDiscovery>,
    target: &Target,
) -> Result<Option<Value>, String> {
    let gvk = target.gvk().ok_or("invalid apiVersion")?;
    let kind = discovery.resolve(&gvk).await.map_err(|e| e.to_string())?;
    let api = kind.api(
        client,
        Some(target.namespace.as_str()).filter(|ns| !ns.is_empty()),
    );
    match api.get_opt(&target.name).await {
        Ok(Some(object)) => serde_json::to_value(object)
            .map(Some)
            .map_err(|e| e.to_string()),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("reading {}: {e}", target.id())),
    }
}

async fn run_group(
    client: Client,
    discovery: &DiscoveryCache<ApiDiscovery>,
    group: Group,
    engine: Engine,
    tx: tokio::sync::mpsc::Sender<Update>,
) {
    let members: Vec<usize> = group.members.values().copied().collect();
    // The kind may not be served yet (CRD applied together with its CRs): keep asking.
    let kind = loop {
        match discovery.resolve(&group.gvk).await {
            Ok(kind) => break kind,
            Err(e) => {
                if tx
                    .send(Update::Error(members.clone(), e.to_string()))
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let api = kind.api(
        &client,
        Some(group.namespace.as_str()).filter(|ns| !ns.is_empty()),
    );
    match engine {
        Engine::Watch => watch_group(api, &group, &tx).await,
        Engine::Poll { interval } => poll_group(api, &group, interval, &tx).await,
    }
}

async fn watch_group(
    api: Api<DynamicObject>,
    group: &Group,
    tx: &tokio::sync::mpsc::Sender<Update>,
) {
    let mut config = watcher::Config::default();
    if group.members.len() == 1
        && let Some(name) = group.members.keys().next()
    {
        config = config.fields(&format!("metadata.name={name}"));
    }
    let members: Vec<usize> = group.members.values().copied().collect();
    let mut listed = Vec::new();
    let mut stream = watcher(api, config).boxed();
    while let Some(event) = stream.next().await {
        let update = match event {
            Ok(watcher::Event::Init) => {
                listed.clear();
                continue;
            }
            Ok(watcher::Event::InitApply(object)) | Ok(watcher::Event::Apply(object)) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                let Some(&i) = group.members.get(&name) else {
                    continue;
                };
                listed.push(i);
                match serde_json::to_value(object) {
                    Ok(value) => Update::Seen(i, value),
                    Err(e) => Update::Error(vec![i], e.to_string()),
                }
            }
            Ok(watcher::Event::InitDone) => {
                let missing = members
                    .iter()
                    .copied()
                    .filter(|i| !listed.contains(i))
                    .collect();
                Update::Listed(missing)
            }
            Ok(watcher::Event::Delete(object)) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                let Some(&i) = group.members.get(&name) else {
                    continue;
                };
                Update::Gone(i)
            }
            Err(e) => {
                tracing::debug!(error = %e, "watch error; the watcher retries");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        if tx.send(update).await.is_err() {
            return;
        }
    }
}

/// The pods a workload's selector matches in its namespace (one LIST), as JSON: what
/// [`crate::policy::Rules::evaluate_with_pods`] judges a workload with. Empty for a workload
/// without a namespace or a usable selector.
pub async fn list_workload_pods(
    client: &Client,
    namespace: &str,
    workload: &Value,
) -> Result<Vec<Value>, kube::Error> {
    use k8s_openapi::api::core::v1::Pod;
    let Some(selector) =
        crate::workload::selector_query(workload).filter(|_| !namespace.is_empty())
    else {
        return Ok(Vec::new());
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods.list(&ListParams::default().labels(&selector)).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|pod| serde_json::to_value(pod).ok())
        .collect())
}

/// Reads the pods of one workload (one watch, or one LIST per interval, narrowed by the
/// workload's selector) and sends every change as the whole current set.
async fn read_pods(
    client: Client,
    namespace: String,
    selector: String,
    i: usize,
    engine: Engine,
    tx: tokio::sync::mpsc::Sender<Update>,
) {
    use k8s_openapi::api::core::v1::Pod;
    let api: Api<Pod> = if namespace.is_empty() {
        Api::all(client)
    } else {
        Api::namespaced(client, &namespace)
    };
    let snapshot =
        |pods: &BTreeMap<String, Value>| Update::Pods(i, pods.values().cloned().collect());
    let to_value = |pod: Pod| serde_json::to_value(pod).ok();
    let mut pods: BTreeMap<String, Value> = BTreeMap::new();
    match engine {
        Engine::Watch => {
            let mut stream = watcher(api, watcher::Config::default().labels(&selector)).boxed();
            let mut listed = BTreeMap::new();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Init) => {
                        listed.clear();
                        continue;
                    }
                    Ok(watcher::Event::InitApply(pod)) => {
                        if let Some(value) = to_value(pod) {
                            listed.insert(
                                str_or(&value, &["metadata", "name"], "").to_string(),
                                value,
                            );
                        }
                        continue;
                    }
                    // A (re)list is sent whole once done; changes after it one by one.
                    Ok(watcher::Event::InitDone) => {
                        pods = std::mem::take(&mut listed);
                    }
                    Ok(watcher::Event::Apply(pod)) => {
                        if let Some(value) = to_value(pod) {
                            pods.insert(
                                str_or(&value, &["metadata", "name"], "").to_string(),
                                value,
                            );
                        }
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        pods.remove(pod.metadata.name.as_deref().unwrap_or(""));
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "pod watch error; the watcher retries");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                }
                if tx.send(snapshot(&pods)).await.is_err() {
                    return;
                }
            }
        }
        Engine::Poll { interval } => loop {
            match api.list(&ListParams::default().labels(&selector)).await {
                Ok(list) => {
                    pods = list
                        .items
                        .into_iter()
                        .filter_map(to_value)
                        .map(|v| (str_or(&v, &["metadata", "name"], "").to_string(), v))
                        .collect();
                    if tx.send(snapshot(&pods)).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "listing a workload's pods failed"),
            }
            tokio::time::sleep(interval).await;
        },
    }
}

async fn poll_group(
    api: Api<DynamicObject>,
    group: &Group,
    interval: Duration,
    tx: &tokio::sync::mpsc::Sender<Update>,
) {
    let members: Vec<usize> = group.members.values().copied().collect();
    let mut params = ListParams::default();
    if group.members.len() == 1
        && let Some(name) = group.members.keys().next()
    {
        params = params.fields(&format!("metadata.name={name}"));
    }
    loop {
        let updates: Vec<Update> = match api.list(&params).await {
            Ok(list) => {
                let mut seen = Vec::new();
                let mut updates = Vec::new();
                for object in list.items {
                    let name = object.metadata.name.clone().unwrap_or_default();
                    if let Some(&i) = group.members.get(&name) {
                        seen.push(i);
                        match serde_json::to_value(object) {
                            Ok(value) => updates.push(Update::Seen(i, value)),
                            Err(e) => updates.push(Update::Error(vec![i], e.to_string())),
                        }
                    }
                }
                // A LIST is authoritative: whatever it lacks does not exist (no GET needed,
                // which keeps list-only RBAC sufficient).
                updates.extend(
                    members
                        .iter()
                        .filter(|i| !seen.contains(i))
                        .map(|i| Update::Gone(*i)),
                );
                updates
            }
            Err(e) => vec![Update::Error(members.clone(), e.to_string())],
        };
        for update in updates {
            if tx.send(update).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target(kind: &str, name: &str) -> Target {
        let api_version = match kind {
            "Job" => "batch/v1",
            "Deployment" => "apps/v1",
            _ => "v1",
        };
        Target {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: "ns".into(),
            name: name.into(),
            min_generation: None,
        }
    }

    fn now() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn waits_until_every_object_is_current() {
        let mut tracker = Tracker::new(
            vec![target("ConfigMap", "a"), target("Pod", "p")],
            WaitFor::Current,
        );
        assert_eq!(tracker.outcome(), None);
        tracker.observe(
            0,
            Some(json!({"apiVersion": "v1", "kind": "ConfigMap"})),
            now(),
        );
        let progress = tracker.progress();
        assert_eq!((progress.ready, progress.total), (1, 2));
        assert_eq!(progress.blocking().map(|(t, _)| t.name.as_str()), Some("p"));
        tracker.observe(
            1,
            Some(json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running"}})),
            now(),
        );
        assert_eq!(
            tracker.progress().blocking().unwrap().1.message,
            "Pod is running but is not Ready"
        );
        tracker.observe(1, Some(json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})), now());
        assert_eq!(tracker.outcome(), Some(Outcome::Done));
    }

    #[test]
    fn listed_objects_without_type_are_judged_by_their_target_kind() {
        let mut tracker = Tracker::new(vec![target("Deployment", "d")], WaitFor::Current);
        // What a LIST item looks like: no apiVersion, no kind.
        tracker.observe(0, Some(json!({"metadata": {"name": "d"}, "spec": {"replicas": 2}, "status": {"replicas": 2, "updatedReplicas": 2}})), now());
        let state = tracker.progress().blocking().unwrap().1.clone();
        assert_eq!(
            (state.status, state.message.as_str()),
            (Status::InProgress, "Available: 0/2")
        );
    }

    #[test]
    fn a_failed_object_ends_the_wait_for_current() {
        let mut tracker = Tracker::new(
            vec![target("Job", "j"), target("ConfigMap", "c")],
            WaitFor::CurrentWithJobs,
        );
        tracker.observe(0, Some(json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"failed": 2, "conditions": [{"type": "Failed", "status": "True"}]}})), now());
        assert_eq!(tracker.outcome(), Some(Outcome::Failed));
        let report = tracker.report(Outcome::Failed);
        assert_eq!(
            report.summary(),
            vec![
                "resource Job/ns/j not ready. status: Failed, message: Job Failed. failed: 2/1",
                "resource ConfigMap/ns/c not ready. status: Unknown, message: waiting for the first observation",
            ]
        );
    }

    #[test]
    fn jobs_mode_needs_completion() {
        let running = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"startTime": "2026-01-01T00:00:00Z", "active": 1}});
        let t = target("Job", "j");
        assert_eq!(
            judge(&t, &running, WaitFor::Current, now(), &Rules::default()).status,
            Status::Current
        );
        let state = judge(
            &t,
            &running,
            WaitFor::CurrentWithJobs,
            now(),
            &Rules::default(),
        );
        assert_eq!(
            (state.status, state.message.as_str()),
            (Status::InProgress, "Job in progress")
        );
        let done = json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"completions": 2}, "status": {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(
            judge(
                &t,
                &done,
                WaitFor::CurrentWithJobs,
                now(),
                &Rules::default()
            )
            .message,
            "Job Completed. succeeded: 2/2"
        );
    }

    #[test]
    fn hooks_mode_waits_for_pods_and_jobs_to_complete() {
        assert!(is_hook_kind(&target("Pod", "p")));
        assert!(is_hook_kind(&target("Job", "j")));
        assert!(!is_hook_kind(&target("Deployment", "d")));
        assert!(!is_hook_kind(&target("ConfigMap", "c")));
        let pod = |phase: &str| json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}});
        let cases = [
            // A Ready, Running Pod is Current for kstatus, but a hook Pod must finish.
            ("Running", Status::InProgress, "Pod phase is Running"),
            ("Pending", Status::InProgress, "Pod phase is Pending"),
            ("Succeeded", Status::Current, "Pod completed successfully"),
            ("Failed", Status::Failed, "Pod failed"),
        ];
        let p = target("Pod", "p");
        for (phase, status, message) in cases {
            let state = judge(&p, &pod(phase), WaitFor::Hooks, now(), &Rules::default());
            assert_eq!(
                (state.status, state.message.as_str()),
                (status, message),
                "{phase}"
            );
        }
        let running = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"active": 1}});
        let state = judge(
            &target("Job", "j"),
            &running,
            WaitFor::Hooks,
            now(),
            &Rules::default(),
        );
        assert_eq!(state.status, Status::InProgress);
        let mut tracker =
            Tracker::new(vec![target("Pod", "p"), target("Job", "j")], WaitFor::Hooks);
        tracker.observe(0, Some(pod("Succeeded")), now());
        tracker.observe(1, Some(running), now());
        assert_eq!(tracker.outcome(), None);
        tracker.observe(0, Some(pod("Failed")), now());
        assert_eq!(tracker.outcome(), Some(Outcome::Failed));
    }

    #[test]
    fn deletion_wait_treats_terminating_as_not_yet_gone() {
        let mut tracker = Tracker::new(vec![target("ConfigMap", "a")], WaitFor::Deleted);
        tracker.observe(0, Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})), now());
        assert_eq!(tracker.outcome(), None);
        tracker.observe(0, None, now());
        assert_eq!(tracker.outcome(), Some(Outcome::Done));
    }

    #[test]
    fn paused_deployments_are_not_waited_on() {
        let mut tracker = Tracker::new(
            vec![target("Deployment", "d"), target("ConfigMap", "c")],
            WaitFor::Current,
        );
        tracker.observe(0, Some(json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"paused": true, "replicas": 3}})), now());
        tracker.observe(
            1,
            Some(json!({"apiVersion": "v1", "kind": "ConfigMap"})),
            now(),
        );
        assert_eq!(tracker.outcome(), Some(Outcome::Done));
        assert_eq!(tracker.report(Outcome::Done).skipped.len(), 1);
    }

    #[test]
    fn stale_generation_is_not_current() {
        let mut t = target("ConfigMap", "c");
        t.min_generation = Some(3);
        let state = judge(
            &t,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generation": 2}}),
            WaitFor::Current,
            now(),
            &Rules::default(),
        );
        assert_eq!(
            (state.status, state.reason.as_deref()),
            (Status::InProgress, Some("StaleGeneration"))
        );
        let state = judge(
            &t,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generation": 3}}),
            WaitFor::Current,
            now(),
            &Rules::default(),
        );
        assert_eq!(state.status, Status::Current);
    }

    #[test]
    fn ticks_re_evaluate_time_dependent_rules() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}});
        let mut tracker = Tracker::new(vec![target("Pod", "p")], WaitFor::Current);
        tracker.observe(0, Some(pod), now());
        assert_eq!(tracker.outcome(), None);
        tracker.tick("2026-01-01T00:00:20Z".parse().unwrap());
        assert_eq!(tracker.outcome(), Some(Outcome::Failed));
    }

    #[test]
    fn targets_are_grouped_per_kind_and_namespace() {
        let mut other_ns = target("ConfigMap", "a");
        other_ns.namespace = "other".into();
        let groups = group_targets(&[
            target("ConfigMap", "a"),
            target("ConfigMap", "b"),
            other_ns,
            target("Pod", "p"),
        ])
        .unwrap();
        let shape: Vec<(String, String, usize)> = groups
            .iter()
            .map(|g| (g.gvk.kind.clone(), g.namespace.clone(), g.members.len()))
            .collect();
        assert_eq!(
            shape,
            vec![
                ("ConfigMap".into(), "ns".into(), 2),
                ("ConfigMap".into(), "other".into(), 1),
                ("Pod".into(), "ns".into(), 1)
            ]
        );
    }
}
