//! One reconcile of a layer: the latest copy, its dependencies, source and prerequisite
//! objects, then what the gate decides (apply, wait, or report why not).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use core_k8s::Context;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef as LayerKey, Store};
use tracing::Instrument as _;

use crate::crd::{AddonsLayer, Blocker, LayerSet};
use crate::error::{LayerError, Result};
use crate::keys::{FINALIZER, RECONCILE_TRACEPARENT, blocker, reason, state};
use crate::lock;
use crate::plan::{self, Gate, GateInputs, SourceRef, SourceState};
use crate::source;

use super::Shared;
use super::apply::apply_layer;
use super::prune::teardown;
use super::status::{Pass, Report, set_finalizer, write_status};

/// How often a layer blocked by `spec.prereqs.objects` looks at them again while some of their
/// kinds is not watched (see `watch_prereqs`).
const OBJECT_PREREQ_POLL: Duration = Duration::from_secs(5);

/// What the gate of `layer` reads: the layer and its dependency chain. From this replica's
/// cache, except the dependencies the cache does not hold, read from the API server: one in
/// another shard (to name it), or deleted. Those in the cache are as new as the change that
/// woke this layer (see `run`).
async fn dependency_chain(
    ctx: &Context,
    store: &Store<AddonsLayer>,
    layer: &Arc<AddonsLayer>,
) -> Result<LayerSet> {
    let cached = |name: &str| store.get(&LayerKey::new(name));
    let mut near = LayerSet::from([(layer.name_any(), layer.clone())]);
    plan::close_over_dependencies(&mut near, cached);
    let api: Api<AddonsLayer> = Api::all(ctx.client.clone());
    let mut read_afresh = false;
    for dep in &plan::dependencies_of(layer) {
        if near.contains_key(dep) {
            continue;
        }
        if let Some(found) = api
            .get_opt(dep)
            .await
            .map_err(|e| LayerError::api(format!("reading layer {dep}"), e))?
        {
            near.insert(dep.clone(), Arc::new(found));
            read_afresh = true;
        }
    }
    if read_afresh {
        plan::close_over_dependencies(&mut near, cached);
    }
    Ok(near)
}

/// One reconcile, as a `layer.reconcile` span: a child of the requester's trace when an
/// unhandled reconcile request (a drift heal) carries one.
pub(super) async fn reconcile(
    layer: Arc<AddonsLayer>,
    ctx: Arc<Context>,
    shared: Arc<Shared>,
) -> Result<Action> {
    let span = tracing::info_span!("layer.reconcile", layer = %layer.name_any());
    if super::status::reconcile_request_pending(&layer) {
        core_k8s::telemetry::continue_trace(
            &span,
            layer
                .annotations()
                .get(RECONCILE_TRACEPARENT)
                .map(String::as_str),
        );
    }
    reconcile_layer(layer, ctx, shared).instrument(span).await
}

/// One pass over the latest copy of the layer, and its one status write.
async fn reconcile_layer(
    layer: Arc<AddonsLayer>,
    ctx: Arc<Context>,
    shared: Arc<Shared>,
) -> Result<Action> {
    let Some(held) = latest_copy(&layer.name_any(), &ctx, &shared).await? else {
        return Ok(Action::await_change());
    };
    let pass = pass(&held, &ctx, &shared).await?;
    if let Some(report) = pass.report {
        write_status(&ctx, &shared, &held, report).await?;
    }
    Ok(pass.action)
}

/// The cache's copy, unless our own last write of the layer is not in it yet: then the latest
/// copy from the API server (see `fresh`). `None` when the layer is gone.
async fn latest_copy(
    name: &str,
    ctx: &Context,
    shared: &Shared,
) -> Result<Option<Arc<AddonsLayer>>> {
    if !shared.writes.pending(name)
        && let Some(layer) = shared.layers.get(&LayerKey::new(name))
    {
        return Ok(Some(layer));
    }
    let api: Api<AddonsLayer> = Api::all(ctx.client.clone());
    let layer = api
        .get_opt(name)
        .await
        .map_err(|e| LayerError::api(format!("reading layer {name}"), e))?;
    Ok(layer.map(Arc::new))
}

/// Reads what the layer needs (its dependency chain, source, prerequisite objects), asks the
/// gate, and does what it decides: report why not, or apply.
async fn pass(held: &Arc<AddonsLayer>, ctx: &Context, shared: &Shared) -> Result<Pass> {
    let layer = held.as_ref();
    let name = layer.name_any();
    if !shared.owns(layer) {
        // Relabelled into another shard since this reconcile was queued: hands off.
        tracing::info!(layer = %name, "the layer left this shard; another shard reconciles it");
        shared.metrics.forget(&name);
        shared.health.forget(&name);
        shared.first_reports.release(&name);
        return Ok(Pass::quiet(Action::await_change()));
    }
    if layer.metadata.deletion_timestamp.is_some() {
        shared.health.forget(&name);
        return teardown(layer, ctx, shared).await;
    }
    // The finalizer goes on before anything is applied: a write of its own (see `Pass`).
    if !layer.finalizers().iter().any(|f| f == FINALIZER) {
        set_finalizer(ctx, shared, layer, true).await?;
    }
    let (interval, timeout) = plan::timing_or_default(layer);
    let interval = plan::effective_interval(interval, shared.args.sync_period);
    let near = dependency_chain(ctx, &shared.layers, held).await?;
    let source_ref = SourceRef::of(layer, &shared.args.default_source_namespace);
    let fetched = match fetch_source(layer, shared, &source_ref).await {
        Ok(fetched) => fetched,
        Err(e @ LayerError::Artifact(_)) => {
            let report = Report::new(
                state::FAILED,
                reason::ARTIFACT_FAILED,
                format!("{source_ref}: {e}"),
            );
            let retry = Action::requeue(interval.min(Duration::from_secs(60)));
            return Ok(Pass::report(report, retry));
        }
        Err(e) => return Err(e),
    };
    let cluster_version = shared.cluster_version(ctx).await;
    let read_at = Instant::now();
    let objects = layer_reader::prereqs::read(&shared.reader, layer).await;
    let inputs = GateInputs {
        source: &fetched.state,
        cluster_version: cluster_version.as_deref(),
        default_source_namespace: &shared.args.default_source_namespace,
        objects: &objects,
        shard: shared.shard(),
    };
    let gate = plan::gate(layer, &near, &inputs);
    if let Gate::Proceed = gate {
        if let Some(since) = lock(&shared.memory)
            .entry(name.clone())
            .or_default()
            .blocked_since
            .take()
        {
            shared
                .metrics
                .observe_dependency_wait(&name, since.elapsed().as_secs_f64());
        }
        let SourceState::Ready { revision } = fetched.state else {
            return Ok(Pass::quiet(Action::requeue(interval)));
        };
        let files = fetched.files.unwrap_or_default();
        return apply_layer(layer, ctx, shared, revision, &files, interval, timeout).await;
    }
    let mut prereq_poll = OBJECT_PREREQ_POLL;
    if let Gate::Blocked { .. } = gate {
        let blocked_since = *lock(&shared.memory)
            .entry(name.clone())
            .or_default()
            .blocked_since
            .get_or_insert_with(Instant::now);
        if !layer.spec.prereqs.objects.is_empty() {
            let waited = blocked_since.elapsed();
            prereq_poll = watch_prereqs(layer, shared, &objects, (read_at, waited)).await;
        }
    }
    Ok(refusal(layer, gate, interval, prereq_poll))
}

/// Registers a blocked layer's prerequisite objects with the kind watches (`health_watch`): a
/// change of one (created, edited, deleted) wakes the layer, and the poll is only a safety net
/// growing with how long the layer has `waited` (`plan::watched_recheck`) — or, while some
/// kind is not watched yet (or not served), the 5 s poll. Returns when to look again.
async fn watch_prereqs(
    layer: &AddonsLayer,
    shared: &Shared,
    objects: &[Option<(core_status::Status, String)>],
    (read_at, waited): (Instant, Duration),
) -> Duration {
    let mut awaited = Vec::with_capacity(layer.spec.prereqs.objects.len());
    for (i, wanted) in layer.spec.prereqs.objects.iter().enumerate() {
        let Ok((resolved, namespace)) = layer_reader::prereqs::locate(&shared.reader, wanted).await
        else {
            // A kind not served yet (its CRD to come) has no watch: poll.
            return OBJECT_PREREQ_POLL;
        };
        awaited.push(super::health_watch::Awaited {
            resource: resolved.resource,
            namespace,
            name: wanted.name.clone(),
            version: None,
            current: matches!(
                objects.get(i),
                Some(Some((core_status::Status::Current, _)))
            ),
            verdict: None,
        });
    }
    match shared.health.wait_for(&layer.name_any(), &awaited, read_at) {
        super::health_watch::Wakeup::Watched => {
            plan::watched_recheck(waited, Duration::MAX, shared.args.health_poll)
        }
        super::health_watch::Wakeup::Changed => Duration::from_millis(100),
        super::health_watch::Wakeup::Polled => OBJECT_PREREQ_POLL,
    }
}

/// The layer's source, read unless the layer is on hold or its spec is invalid (the gate
/// reports those without it).
async fn fetch_source(
    layer: &AddonsLayer,
    shared: &Shared,
    source_ref: &SourceRef,
) -> Result<source::Fetched> {
    if layer.spec.hold || !plan::spec_errors(layer).is_empty() {
        return Ok(source::Fetched {
            state: SourceState::NotReady {
                message: "not read".into(),
            },
            files: None,
        });
    }
    let span = tracing::info_span!(
        "layer.source_fetch",
        source = %source_ref,
        revision = tracing::field::Empty,
        files = tracing::field::Empty,
        bytes = tracing::field::Empty,
    );
    let fetched = shared
        .reader
        .fetch(source_ref)
        .instrument(span.clone())
        .await?;
    if let SourceState::Ready { revision } = &fetched.state {
        span.record("revision", revision.as_str());
    }
    if let Some(files) = &fetched.files {
        span.record("files", files.len());
        span.record("bytes", files.values().map(Vec::len).sum::<usize>());
    }
    Ok(fetched)
}

/// What the layer reports when the gate does not let it proceed, and when it looks again.
fn refusal(layer: &AddonsLayer, gate: Gate, interval: Duration, prereq_poll: Duration) -> Pass {
    let name = layer.name_any();
    match gate {
        Gate::Hold => Pass::report(
            Report::new(
                state::HOLD,
                state::HOLD,
                "the layer is on hold: nothing is applied or pruned until spec.hold is false",
            ),
            Action::await_change(),
        ),
        Gate::Invalid(message) => Pass::report(
            Report::new(state::FAILED, reason::INVALID_SPEC, message),
            Action::await_change(),
        ),
        Gate::Cycle(cycle) => {
            let mut report = Report::new(
                state::FAILED,
                reason::DEPENDENCY_CYCLE,
                format!("dependency cycle: {}", cycle.join(" -> ")),
            );
            let members: BTreeSet<&String> = cycle.iter().filter(|m| **m != name).collect();
            report.blockers = members
                .into_iter()
                .map(|m| Blocker {
                    name: m.clone(),
                    reason: blocker::CYCLE.into(),
                    message: format!("dependency cycle: {}", cycle.join(" -> ")),
                })
                .collect();
            Pass::report(report, Action::requeue(interval))
        }
        // Relabelling either layer wakes this one (a dependency joining the shard is a watch
        // event here; this layer leaving it is the other shard's); the interval is the safety
        // net.
        Gate::CrossShard { message, blockers } => {
            let mut report = Report::new(state::FAILED, reason::CROSS_SHARD_DEPENDENCY, message);
            report.blockers = blockers;
            Pass::report(report, Action::requeue(interval))
        }
        Gate::Blocked { state, blockers } => {
            let first = &blockers[0];
            let more = match blockers.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            let mut report = Report::new(
                state,
                state,
                format!("waiting for {}: {}{more}", first.name, first.message),
            );
            // Prerequisite objects: woken by their kind's watch, else polled (`watch_prereqs`).
            let waits_for_objects = blockers.iter().any(|b| {
                layer
                    .spec
                    .prereqs
                    .objects
                    .iter()
                    .any(|o| o.to_string() == b.name)
            });
            report.blockers = blockers;
            let next = if waits_for_objects {
                interval.min(prereq_poll)
            } else {
                interval
            };
            Pass::report(report, Action::requeue(next))
        }
        // Proceeding is the caller's: it applies.
        Gate::Proceed => Pass::quiet(Action::requeue(interval)),
    }
}
