//! Removing objects: the prune plan executed for objects that left a layer, and the teardown
//! of a layer being deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use core_k8s::Context;
use core_k8s::apply::ResolvedKind;
use core_k8s::events::Severity;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PropagationPolicy};
use kube::runtime::controller::Action;
use serde_json::json;

use crate::crd::{AddonsLayer, Blocker, InventoryEntry};
use crate::error::{LayerError, Result};
use crate::keys::{
    FINALIZER, LAYER_LABEL, ORPHANED_LABEL, ORPHANED_STATUS, blocker, reason, state,
};
use crate::lock;
use crate::plan::{self, ObjectRef, StaleObject};
use crate::source;

use super::apply::rendered_manifests;
use super::status::{Pass, Report, publish_event, set_finalizer};
use super::{Access, Shared, access};

/// The uid and resourceVersion a stale object was read with.
type ReadAs = (Option<String>, Option<String>);

/// Executes the prune plan. Returns the entries still waiting (kept in the inventory) and
/// when to look again.
#[tracing::instrument(
    name = "layer.prune",
    skip_all,
    fields(layer = %layer.name_any(), stale = stale_entries.len())
)]
pub(super) async fn prune(
    ctx: &Context,
    access: &Access,
    shared: &Shared,
    layer: &AddonsLayer,
    stale_entries: &[&InventoryEntry],
    wanted_by: &BTreeMap<ObjectRef, BTreeSet<String>>,
    grace: Duration,
) -> Result<Option<(Vec<InventoryEntry>, Duration)>> {
    let name = layer.name_any();
    let now = Timestamp::now();
    let read = crate::stale::read_stale(&shared.reader, &access.client, stale_entries).await?;
    let stale: Vec<StaleObject> = read.iter().map(|r| r.stale.clone()).collect();
    let by_ref: BTreeMap<ObjectRef, (&InventoryEntry, ResolvedKind, ReadAs)> = read
        .into_iter()
        .filter_map(|r| Some((r.stale.object, (r.entry, r.resolved?, r.read_as))))
        .collect();
    let plan = plan::prune_plan(&name, &stale, wanted_by, grace, now);
    let orphaned_value = plan::orphaned_label_value(now);
    // Fencing: only the replica the Lease names labels or deletes anything.
    let acts = !plan.orphan.is_empty() || !plan.delete.is_empty();
    if acts && !ctx.leadership.confirm().await {
        // Not confirmed: everything stays in the inventory, to be looked at again.
        let kept = stale_entries.iter().map(|e| (*e).clone()).collect();
        return Ok(Some((kept, Duration::from_secs(5))));
    }
    for object in &plan.orphan {
        if let Some((entry, resolved, _)) = by_ref.get(object) {
            let api = resolved.api(&access.client, entry.namespace.as_deref());
            let patch = json!({"metadata": {"labels": {ORPHANED_LABEL: orphaned_value}}});
            api.patch(&entry.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| LayerError::api(format!("labelling {object} orphaned"), e))?;
        }
    }
    let mut deleted = Vec::new();
    for object in &plan.delete {
        if let Some((entry, resolved, (uid, resource_version))) = by_ref.get(object) {
            let api = resolved.api(&access.client, entry.namespace.as_deref());
            // Only the object as it was read (not one taken over or recreated meanwhile).
            let params = core_k8s::leader::conditional_delete(
                uid.clone(),
                resource_version.clone(),
                Some(PropagationPolicy::Background),
            );
            match api.delete(&entry.name, &params).await {
                Ok(_) => deleted.push(object.to_string()),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    tracing::info!(object = %object, "changed since it was read; pruning decided again next time");
                }
                Err(e) => return Err(LayerError::api(format!("pruning {object}"), e)),
            }
        }
    }
    if !deleted.is_empty() {
        shared.metrics.count_pruned(&name, deleted.len() as u64);
        let note = format!("pruned {}", deleted.join(", "));
        publish_event(ctx, layer, Severity::Normal, reason::PRUNED, "Prune", note).await;
    }
    if !plan.hand_over.is_empty() {
        let moved: Vec<String> = plan
            .hand_over
            .iter()
            .map(|(o, to)| format!("{o} to layer {to}"))
            .collect();
        let note = format!("handed over {}", moved.join(", "));
        publish_event(
            ctx,
            layer,
            Severity::Normal,
            reason::HANDED_OVER,
            "Prune",
            note,
        )
        .await;
    }
    if plan.orphan.is_empty() && plan.waiting.is_empty() {
        return Ok(None);
    }
    let pending: Vec<InventoryEntry> = plan
        .orphan
        .iter()
        .chain(plan.waiting.iter().map(|(o, _)| o))
        .filter_map(|o| by_ref.get(o))
        .map(|(entry, _, _)| InventoryEntry {
            status: ORPHANED_STATUS.into(),
            ..(*entry).clone()
        })
        .collect();
    let wait = plan
        .waiting
        .iter()
        .map(|(_, d)| *d)
        .chain(plan.orphan.iter().map(|_| grace))
        .min()
        .unwrap_or(grace);
    Ok(Some((pending, wait + Duration::from_millis(100))))
}

/// Deleting a layer: its dependents go first, then its objects in reverse apply order; the
/// finalizer is released when they are gone, or after `timeout` with a Warning naming what
/// is still there (never a stuck layer, unlike kraan#212).
pub(super) async fn teardown(layer: &AddonsLayer, ctx: &Context, shared: &Shared) -> Result<Pass> {
    let name = layer.name_any();
    if !layer.finalizers().iter().any(|f| f == FINALIZER) {
        shared.first_reports.release(&name);
        return Ok(Pass::quiet(Action::await_change()));
    }
    let dependents = shared.index.dependents(&name);
    if !dependents.is_empty() {
        let mut report = Report::new(
            state::DELETING,
            state::DELETING,
            format!(
                "waiting for dependent layers to be deleted first: {}",
                dependents.join(", ")
            ),
        );
        report.blockers = dependents
            .iter()
            .map(|d| Blocker {
                name: d.clone(),
                reason: blocker::DEPENDENT.into(),
                message: format!("layer {d} depends on {name} and is torn down first"),
            })
            .collect();
        return Ok(Pass::report(
            report,
            Action::requeue(Duration::from_secs(10)),
        ));
    }
    let access = access(ctx, shared, layer)?;
    // A layer deleted before its first report: the objects it applied are in the held one,
    // or, when this process holds none (it restarted meanwhile) and the status lists none,
    // those its source renders.
    let status = layer.status.clone().unwrap_or_default();
    let inventory = match shared.first_reports.held(layer) {
        Some(held) => held.inventory,
        None if status.inventory.is_empty() => {
            match rendered_objects(shared, layer, &access).await {
                Ok(entries) => entries,
                Err(why) => return unrendered_teardown(ctx, shared, layer, why).await,
            }
        }
        None => status.inventory,
    };
    let mut entries: Vec<(_, &InventoryEntry)> = inventory
        .iter()
        .map(|e| {
            let stage = plan::stage_of(&e.api_version, &e.kind, e.namespace.is_some());
            (plan::apply_key(&ObjectRef::of_entry(e), stage), e)
        })
        .collect();
    entries.sort_by(|a, b| b.0.cmp(&a.0));
    let mut remaining = Vec::new();
    for (_, entry) in entries {
        let object = ObjectRef::of_entry(entry);
        let Ok(resolved) = shared.reader.resolve(&entry.api_version, &entry.kind).await else {
            continue;
        };
        let api = resolved.api(&access.client, entry.namespace.as_deref());
        let Some(live) = api
            .get_opt(&entry.name)
            .await
            .map_err(|e| LayerError::api(format!("reading {object}"), e))?
        else {
            continue;
        };
        if live.labels().get(LAYER_LABEL) != Some(&name) {
            continue; // handed over to another layer
        }
        if live.metadata.deletion_timestamp.is_none() {
            // Fencing: confirmed right before, and only the object as just read.
            if !ctx.leadership.confirm().await {
                return Ok(Pass::quiet(Action::requeue(Duration::from_secs(5))));
            }
            let params = core_k8s::leader::conditional_delete(
                live.metadata.uid.clone(),
                live.metadata.resource_version.clone(),
                Some(PropagationPolicy::Background),
            );
            match api.delete(&entry.name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                // Changed since just now: it stays in `remaining`, tried again next time.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(LayerError::api(format!("deleting {object}"), e)),
            }
        }
        remaining.push(object.to_string());
    }
    let (_, timeout) = plan::timing_or_default(layer);
    if remaining.is_empty() || deleting_for(layer) >= timeout {
        let timed_out = (!remaining.is_empty()).then(|| {
            format!(
                "released after {}s with objects still terminating: {}",
                timeout.as_secs(),
                remaining.join(", ")
            )
        });
        return release(ctx, shared, layer, timed_out).await;
    }
    let mut report = Report::new(
        state::DELETING,
        state::DELETING,
        format!(
            "waiting for {} objects to be deleted: {}",
            remaining.len(),
            plan::summarize(&remaining, 5, ", ")
        ),
    );
    // Recorded, so that the next pass waits for the same objects however it found them.
    report.inventory = Some(inventory);
    Ok(Pass::report(
        report,
        Action::requeue(Duration::from_secs(2)),
    ))
}

/// The end of a teardown: the finalizer released and the layer forgotten; when it ran out of
/// time, a `TeardownTimedOut` Warning says what may remain (`timed_out`).
async fn release(
    ctx: &Context,
    shared: &Shared,
    layer: &AddonsLayer,
    timed_out: Option<String>,
) -> Result<Pass> {
    if let Some(note) = timed_out {
        publish_event(
            ctx,
            layer,
            Severity::Warning,
            reason::TEARDOWN_TIMED_OUT,
            "Delete",
            note,
        )
        .await;
    }
    let name = layer.name_any();
    set_finalizer(ctx, shared, layer, false).await?;
    shared.metrics.forget(&name);
    lock(&shared.memory).remove(&name);
    shared.first_reports.release(&name);
    // Nothing to report: the layer is gone once its finalizer is.
    Ok(Pass::quiet(Action::await_change()))
}

/// How long ago the layer's deletion was requested.
fn deleting_for(layer: &AddonsLayer) -> Duration {
    layer
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| Timestamp::now().duration_since(t.0).unsigned_abs())
        .unwrap_or_default()
}

/// The teardown of a layer that recorded no inventory and whose source cannot be rendered
/// now (`why`): it waits in `Deleting` for the source, until the layer's `timeout`; then the
/// finalizer is released with a `TeardownTimedOut` Warning saying what may remain.
async fn unrendered_teardown(
    ctx: &Context,
    shared: &Shared,
    layer: &AddonsLayer,
    why: String,
) -> Result<Pass> {
    let (_, timeout) = plan::timing_or_default(layer);
    if deleting_for(layer) < timeout {
        let report = Report::new(
            state::DELETING,
            state::DELETING,
            format!(
                "the layer recorded no inventory: waiting to read what its source renders: {why}"
            ),
        );
        return Ok(Pass::report(
            report,
            Action::requeue(Duration::from_secs(10)),
        ));
    }
    let note = format!(
        "released after {}s without reading what its source renders ({why}): objects labelled {LAYER_LABEL}={} may remain",
        timeout.as_secs(),
        layer.name_any()
    );
    release(ctx, shared, layer, Some(note)).await
}

/// What a layer that never recorded an inventory may have applied: what its source renders
/// now, with its variables, as its apply would. Only those still labelled with the layer are
/// deleted, as with any teardown. `Err` says why the source cannot be rendered now.
async fn rendered_objects(
    shared: &Shared,
    layer: &AddonsLayer,
    access: &Access,
) -> std::result::Result<Vec<InventoryEntry>, String> {
    let source = plan::SourceRef::of(layer, &shared.args.default_source_namespace);
    let files = match shared.reader.fetch(&source).await {
        Ok(source::Fetched {
            files: Some(files), ..
        }) => files,
        Ok(source::Fetched {
            state: plan::SourceState::NotReady { message },
            ..
        }) => return Err(format!("{source}: {message}")),
        Ok(_) => return Err(format!("{source}: no artifact")),
        Err(e) => return Err(format!("{source}: {e}")),
    };
    let manifests = rendered_manifests(shared, access, layer, &files)
        .await
        .map_err(|e| format!("{source}: {e}"))?;
    let mut entries = Vec::with_capacity(manifests.len());
    for manifest in &manifests {
        let object = shared.reader.identity(manifest).await;
        entries.push(InventoryEntry {
            api_version: manifest.api_version.clone(),
            kind: manifest.object.kind.clone(),
            namespace: object.namespace,
            name: object.name,
            status: core_status::Status::Unknown.to_string(),
            reason: None,
            message: None,
        });
    }
    Ok(entries)
}
