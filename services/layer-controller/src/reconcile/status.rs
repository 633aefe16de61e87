//! What a reconcile reports and how: the layer's status (written when it changed), its
//! finalizer, and Events.

use core_k8s::Context;
use core_k8s::events::Severity;
use jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::crd::{
    AddonsLayer, AddonsLayerStatus, Blocker, GateStatus, HistoryEntry, InventoryEntry,
    KeptRevision, RolledBack,
};
use crate::error::{LayerError, Result};
use crate::keys::{FINALIZER, RECONCILE_REQUESTED_AT, condition, state};
use crate::plan;

use super::Shared;

/// What a reconcile reports into the layer's status.
#[derive(Debug)]
pub(super) struct Report {
    pub(super) state: &'static str,
    pub(super) reason: String,
    pub(super) message: String,
    pub(super) blockers: Vec<Blocker>,
    /// `None` keeps the previous inventory.
    pub(super) inventory: Option<Vec<InventoryEntry>>,
    /// Set when this revision is now deployed.
    pub(super) deployed_revision: Option<String>,
    pub(super) attempted_revision: Option<String>,
    /// Outcomes to add to the history, newest first (besides a newly deployed revision and
    /// a newly failed attempt, which are added from the state).
    pub(super) history: Vec<HistoryEntry>,
    /// `None` keeps the previous list of kept revisions.
    pub(super) kept: Option<Vec<KeptRevision>>,
    /// `None` keeps the previous `rolledBack` (cleared when the layer is Deployed).
    pub(super) rolled_back: Option<RolledBack>,
    /// The version running, when not `spec.version` (a restored revision's).
    pub(super) version: Option<String>,
    /// The rollback request this pass handled.
    pub(super) handled_rollback_at: Option<String>,
    /// The metric gates as read by this pass; `None` keeps the previous.
    pub(super) gates: Option<Vec<GateStatus>>,
}

impl Report {
    pub(super) fn new(state: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            state,
            reason: reason.to_string(),
            message: message.into(),
            blockers: Vec::new(),
            inventory: None,
            deployed_revision: None,
            attempted_revision: None,
            history: Vec::new(),
            kept: None,
            rolled_back: None,
            version: None,
            handled_rollback_at: None,
            gates: None,
        }
    }
}

/// What one pass decided: the report to write (none when the pass has nothing to say, e.g. a
/// first report held back or a layer handed to another shard) and when to look again. A pass
/// never writes the status itself: `reconcile` writes the report once, at its end. The only
/// earlier writes are the finalizer's (added before anything is applied, removed as the last
/// step of a teardown), which the API needs apart from the status.
#[derive(Debug)]
#[must_use]
pub(super) struct Pass {
    pub(super) report: Option<Report>,
    pub(super) action: Action,
}

impl Pass {
    /// A pass that reports.
    pub(super) fn report(report: Report, action: Action) -> Self {
        Self {
            report: Some(report),
            action,
        }
    }

    /// A pass with nothing to write.
    pub(super) fn quiet(action: Action) -> Self {
        Self {
            report: None,
            action,
        }
    }
}

/// Writes the status when it changed; publishes an Event when the state changed.
pub(super) async fn write_status(
    ctx: &Context,
    shared: &Shared,
    layer: &AddonsLayer,
    report: Report,
) -> Result<()> {
    let name = layer.name_any();
    if !shared.still_watched(&name) {
        tracing::debug!(layer = %name, "the layer left this shard: its status is the new shard's to write");
        return Ok(());
    }
    let previous = layer.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let fresh_attempt = new_attempt(&previous, &report, layer);
    let (history, revision) = history_after(layer, &previous, &report, fresh_attempt, now);
    let rolled_back = match (&report.rolled_back, report.state) {
        (Some(rolled_back), _) => Some(rolled_back.clone()),
        (None, state::DEPLOYED | state::PRUNING) => None,
        (None, _) => previous.rolled_back.clone(),
    };
    let status = AddonsLayerStatus {
        state: Some(report.state.to_string()),
        conditions: plan::conditions(
            report.state,
            &report.reason,
            &report.message,
            layer.metadata.generation,
            &previous.conditions,
            now,
        ),
        revision,
        last_attempted_revision: report
            .attempted_revision
            .or(previous.last_attempted_revision.clone()),
        version: Some(
            report
                .version
                .clone()
                .unwrap_or_else(|| layer.spec.version.clone()),
        ),
        observed_generation: layer.metadata.generation,
        // A held first report's inventory is what the layer owns (see `first_report`).
        inventory: report
            .inventory
            .or_else(|| shared.first_reports.held(layer).map(|h| h.inventory))
            .unwrap_or(previous.inventory.clone()),
        resources: Vec::new(),
        blocked_by: report.blockers,
        history,
        last_handled_reconcile_at: reconcile_requested_at(layer)
            .or(previous.last_handled_reconcile_at.clone()),
        // The drift-observer's fields: never part of our apply (SSA would take them over).
        drift: Vec::new(),
        kept_revisions: report
            .kept
            .clone()
            .unwrap_or_else(|| previous.kept_revisions.clone()),
        rolled_back,
        // A layer without gates has nothing to show; a new attempt's gates are not read yet;
        // otherwise the last reading stands.
        gates: match (&layer.spec.health, &report.gates) {
            (Some(health), _) if health.gates.is_empty() => Vec::new(),
            (None, _) => Vec::new(),
            (_, Some(gates)) => gates.clone(),
            (_, None) if fresh_attempt => Vec::new(),
            (_, None) => previous.gates.clone(),
        },
        last_handled_rollback_at: report
            .handled_rollback_at
            .clone()
            .or(previous.last_handled_rollback_at.clone()),
    };
    let status = AddonsLayerStatus {
        resources: plan::kraan_resources(&status.inventory, &previous.resources, now),
        ..status
    };
    shared.metrics.set_state(&name, report.state);
    let mut ours = previous.clone();
    ours.drift.clear();
    ours.conditions
        .retain(|c| !condition::DRIFT_OBSERVER.contains(&c.type_.as_str()));
    if status == ours {
        return Ok(());
    }
    let value = serde_json::to_value(&status).map_err(|e| LayerError::Source(e.to_string()))?;
    let written = ctx.applier.apply_status(layer, value).await?;
    shared
        .writes
        .wrote(&name, written.metadata.resource_version.as_deref());
    shared.first_reports.release(&name);
    if previous.state.as_deref() != Some(report.state) {
        // A rollback is a warning: the revision asked for is not what runs.
        let severity = if matches!(
            report.state,
            state::FAILED | state::ROLLING_BACK | state::ROLLED_BACK
        ) {
            Severity::Warning
        } else {
            Severity::Normal
        };
        let event_reason = if report.state == state::FAILED {
            report.reason.as_str()
        } else {
            report.state
        };
        let note = report.message.clone();
        publish_event(ctx, layer, severity, event_reason, "Reconcile", note).await;
        tracing::info!(layer = %name, state = report.state, message = %report.message, "layer state changed");
    }
    Ok(())
}

/// The history and deployed revision after `report`: a revision newly deployed, an attempt
/// newly failed and the report's own entries go first; the oldest beyond
/// [`plan::HISTORY_LIMIT`] go.
fn history_after(
    layer: &AddonsLayer,
    previous: &AddonsLayerStatus,
    report: &Report,
    fresh_attempt: bool,
    now: Timestamp,
) -> (Vec<HistoryEntry>, Option<String>) {
    let at = core_status::augment::format_time(now);
    let mut history = previous.history.clone();
    let mut revision = previous.revision.clone();
    let generation = layer.metadata.generation;
    let mut add = |entry: HistoryEntry| {
        history.insert(0, entry);
        history.truncate(plan::HISTORY_LIMIT);
    };
    if let Some(deployed) = &report.deployed_revision {
        revision = Some(deployed.clone());
        let already = previous.history.first().is_some_and(|h| {
            h.revision == *deployed
                && h.version == layer.spec.version
                && h.outcome() == state::DEPLOYED
        });
        let deployed_now = matches!(report.state, state::DEPLOYED | state::PRUNING);
        if !already && deployed_now {
            add(HistoryEntry {
                revision: deployed.clone(),
                version: layer.spec.version.clone(),
                generation,
                outcome: Some(state::DEPLOYED.into()),
                deployed_at: Some(at.clone()),
                ..Default::default()
            });
        }
    }
    // An attempt that turns Failed is recorded once, when it does.
    let attempted = report
        .attempted_revision
        .as_ref()
        .or(previous.last_attempted_revision.as_ref());
    let newly_failed = report.state == state::FAILED
        && (previous.state.as_deref() != Some(state::FAILED) || fresh_attempt);
    if newly_failed && let Some(attempted) = attempted {
        add(HistoryEntry {
            revision: attempted.clone(),
            version: layer.spec.version.clone(),
            generation,
            outcome: Some(state::FAILED.into()),
            failed_at: Some(at.clone()),
            reason: Some(report.reason.clone()),
            message: Some(bounded(&report.message)),
            ..Default::default()
        });
    }
    for entry in report.history.iter().rev() {
        add(entry.clone());
    }
    (history, revision)
}

/// Whether `report` is about another attempt (revision, generation) than the previous status.
fn new_attempt(previous: &AddonsLayerStatus, report: &Report, layer: &AddonsLayer) -> bool {
    report
        .attempted_revision
        .as_ref()
        .is_some_and(|r| previous.last_attempted_revision.as_ref() != Some(r))
        || previous.observed_generation != layer.metadata.generation
}

/// A message as the history keeps it: its first 512 bytes.
pub(super) fn bounded(message: &str) -> String {
    const LIMIT: usize = 512;
    if message.len() <= LIMIT {
        return message.to_string();
    }
    let mut end = LIMIT;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// Whether the layer carries a reconcile request (a drift heal, a user's) not handled yet.
pub(super) fn reconcile_request_pending(layer: &AddonsLayer) -> bool {
    let handled = layer
        .status
        .as_ref()
        .and_then(|s| s.last_handled_reconcile_at.as_deref());
    reconcile_requested_at(layer).is_some_and(|at| handled != Some(at.as_str()))
}

/// The layer's `strata.dev/reconcile-requested-at` annotation, if set.
pub(super) fn reconcile_requested_at(layer: &AddonsLayer) -> Option<String> {
    layer
        .annotations()
        .get(RECONCILE_REQUESTED_AT)
        .filter(|v| !v.is_empty())
        .cloned()
}

/// Adds or removes our finalizer. The finalizers are replaced as a compare-and-swap on the
/// copy the reconcile decided from; when another writer got there first, once more on the
/// latest copy.
pub(super) async fn set_finalizer(
    ctx: &Context,
    shared: &Shared,
    layer: &AddonsLayer,
    present: bool,
) -> Result<()> {
    let name = layer.name_any();
    let api: Api<AddonsLayer> = Api::all(ctx.client.clone());
    let written = match patch_finalizers(&api, layer, present).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let latest = api
                .get_opt(&name)
                .await
                .map_err(|e| LayerError::api(format!("reading layer {name}"), e))?;
            match latest {
                Some(latest) => patch_finalizers(&api, &latest, present).await,
                None => return Ok(()),
            }
        }
        other => other,
    }
    .map_err(|e| LayerError::api(format!("finalizer of layer {name}"), e))?;
    if let Some(written) = written {
        shared
            .writes
            .wrote(&name, written.metadata.resource_version.as_deref());
    }
    Ok(())
}

/// The finalizer patch, with `layer`'s resource version as its precondition; `None` when the
/// finalizers are already as wanted.
async fn patch_finalizers(
    api: &Api<AddonsLayer>,
    layer: &AddonsLayer,
    present: bool,
) -> std::result::Result<Option<AddonsLayer>, kube::Error> {
    let mut finalizers: Vec<String> = layer
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if present {
        finalizers.push(FINALIZER.into());
    }
    if finalizers.as_slice() == layer.finalizers() {
        return Ok(None);
    }
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": layer.resource_version()}});
    api.patch(
        &layer.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(Some)
}

/// Publishes an Event about a layer; a failure to publish is logged, never fatal.
pub(super) async fn publish_event(
    ctx: &Context,
    layer: &AddonsLayer,
    severity: Severity,
    reason: &str,
    action: &str,
    note: String,
) {
    if let Err(e) = ctx
        .events
        .publish(&layer.object_ref(&()), severity, reason, action, note)
        .await
    {
        tracing::debug!(layer = %layer.name_any(), error = %e, "publishing an event");
    }
}
