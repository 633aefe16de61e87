//! Rollback (`spec.rollback`): the manifests of each attempt are kept before it is applied
//! (in one Secret per layer, next to the controller, owned by the layer); when an attempt
//! ends Failed, or a user asks with `strata.dev/rollback-requested-at`, the last revision that
//! ran healthy is applied again exactly as it was, what the failed attempt added is pruned, and
//! the layer reports `RollingBack`, then `RolledBack`. It stays there — the failed revision is
//! not tried again — until its source or spec changes.
//!
//! Everything a rollback needs is in the API (the kept Secret, `status.rolledBack`), so a
//! controller restarted, or another replica taking the lease, carries on where it stopped.

use std::time::{Duration, Instant};

use core_k8s::Context;
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta};
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt as _};

use crate::crd::{AddonsLayer, HistoryEntry, InventoryEntry, RolledBack};
use crate::error::{LayerError, Result};
use crate::keys::{KEPT_REVISIONS_LABEL, ROLLBACK_REQUESTED_AT, ROLLBACK_TO, reason, state};
use crate::lock;
use crate::plan::{self, Outcome};
use crate::rollback::{self as kept, Packed, StoredRevision, Target};
use crate::source::Manifest;

use super::apply::{
    Attempt, Claims, Observed, Staged, apply_stages, claims, failed_apply, judge, prune_left,
    rejudge,
};
use super::status::{Pass, Report};
use super::{Shared, access};

/// When a rollback's pass looks again.
pub(super) enum Next {
    /// Rolled back: at the interval (the kept revision is re-applied, as a deployed one).
    Interval,
    /// Failed: soon.
    Retry,
    /// Objects of the failed attempt wait to be pruned.
    Prune,
    /// Its objects are not all ready yet: on their change (see `health_watch`).
    Health,
}

/// Keeps the manifests of the attempt about to be applied, when the layer has
/// `spec.rollback`: one read and one write of the Secret per new attempt (none when this
/// attempt is kept already). The kept list reaches the status with the attempt's report
/// (see [`with_kept`]).
pub(super) async fn keep_revision(
    ctx: &Context,
    shared: &Shared,
    layer: &AddonsLayer,
    revision: &str,
    manifests: &[Manifest],
) -> Result<()> {
    let Some(spec) = &layer.spec.rollback else {
        return Ok(());
    };
    let name = layer.name_any();
    let key = (revision.to_string(), layer.metadata.generation);
    let already = lock(&shared.memory)
        .get(&name)
        .is_some_and(|m| m.kept.as_ref().is_some_and(|(k, _)| *k == key));
    let in_status = layer.status.as_ref().is_some_and(|s| {
        s.kept_revisions
            .first()
            .is_some_and(|k| k.revision == revision && k.generation == layer.metadata.generation)
    });
    if already || in_status {
        return Ok(());
    }
    let new = Packed::new(StoredRevision {
        revision: revision.to_string(),
        generation: layer.metadata.generation,
        version: layer.spec.version.clone(),
        manifests: manifests.iter().map(|m| m.value.clone()).collect(),
    })?;
    // What is kept already: this process's last write when the status shows exactly that (no
    // other replica wrote since), nothing when the status shows nothing, else read back.
    let shown = layer
        .status
        .as_ref()
        .map(|s| s.kept_revisions.as_slice())
        .unwrap_or_default();
    let written = lock(&shared.memory)
        .get(&name)
        .and_then(|m| m.kept.as_ref().map(|(_, packed)| packed.clone()))
        .filter(|packed| packed.iter().map(Packed::summary).eq(shown.iter().cloned()));
    let old = match written {
        Some(packed) => packed,
        None if shown.is_empty() => Vec::new(),
        None => read_kept(ctx, shared, &name).await?,
    };
    let history = layer
        .status
        .as_ref()
        .map(|s| s.history.as_slice())
        .unwrap_or_default();
    let (retained, note) = kept::retain(new, old, history, kept::keep_count(spec.keep));
    if let Some(note) = note {
        tracing::warn!(layer = %name, "{note}");
    }
    let data = retained
        .iter()
        .enumerate()
        .map(|(i, p)| (kept::data_key(i), ByteString(p.bytes.clone())))
        .collect();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(kept::store_name(&name)),
            namespace: Some(shared.args.default_source_namespace.clone()),
            labels: Some([(KEPT_REVISIONS_LABEL.to_string(), "revisions".to_string())].into()),
            annotations: Some([(KEPT_REVISIONS_LABEL.to_string(), name.clone())].into()),
            // Deleted with the layer, by the garbage collector.
            // (Without blockOwnerDeletion, which would need rights on the layer's finalizers
            // where OwnerReferencesPermissionEnforcement is on.)
            owner_references: layer.controller_owner_ref(&()).map(|mut r| {
                r.block_owner_deletion = None;
                vec![r]
            }),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    };
    ctx.applier.apply(&secret).await?;
    let light = retained.iter().map(Packed::light).collect();
    lock(&shared.memory).entry(name).or_default().kept = Some((key, light));
    Ok(())
}

/// The layer's kept revisions, newest first; none when nothing is kept yet.
async fn read_kept(ctx: &Context, shared: &Shared, layer: &str) -> Result<Vec<Packed>> {
    let api: Api<Secret> =
        Api::namespaced(ctx.client.clone(), &shared.args.default_source_namespace);
    let store = kept::store_name(layer);
    let Some(secret) = api
        .get_opt(&store)
        .await
        .map_err(|e| LayerError::api(format!("reading Secret {store}"), e))?
    else {
        return Ok(Vec::new());
    };
    let data = secret.data.unwrap_or_default();
    let mut out = Vec::with_capacity(data.len());
    for i in 0..data.len() {
        let key = kept::data_key(i);
        if let Some(bytes) = data.get(&key) {
            out.push(Packed::unpack(&format!("{store} {key}"), &bytes.0)?);
        }
    }
    Ok(out)
}

/// Adds to an attempt's report the kept list this process wrote for that attempt, when the
/// status does not show it yet (a first report held back, a write that failed).
fn with_kept(shared: &Shared, layer: &AddonsLayer, mut pass: Pass) -> Pass {
    let Some(report) = pass.report.as_mut() else {
        return pass;
    };
    let Some(revision) = report.attempted_revision.clone() else {
        return pass;
    };
    let key = (revision, layer.metadata.generation);
    let written = lock(&shared.memory).get(&layer.name_any()).and_then(|m| {
        m.kept
            .as_ref()
            .filter(|(k, _)| *k == key)
            .map(|(_, packed)| packed.iter().map(Packed::summary).collect::<Vec<_>>())
    });
    let shown = layer.status.as_ref().map(|s| &s.kept_revisions);
    if written.is_some() && written.as_ref() != shown {
        report.kept = written;
    }
    pass
}

/// What a layer does instead of its source's attempt: a rollback asked for, or the one
/// already decided for this very attempt (rolling back, rolled back, or failing to).
pub(super) async fn instead_of_attempt(
    layer: &AddonsLayer,
    ctx: &Context,
    shared: &Shared,
    revision: &str,
    interval: Duration,
    timeout: Duration,
) -> Result<Option<Pass>> {
    let status = layer.status.clone().unwrap_or_default();
    let generation = layer.metadata.generation;
    if let Some(at) = rollback_request_pending(layer) {
        let to = layer
            .annotations()
            .get(ROLLBACK_TO)
            .filter(|v| !v.is_empty())
            .cloned();
        let why = Why::Requested { to, at };
        let owned = status.inventory.clone();
        return roll_back(layer, ctx, shared, why, owned, revision, interval, timeout)
            .await
            .map(Some);
    }
    let Some(rolled_back) = status.rolled_back.clone().filter(|r| {
        r.failed_revision == revision
            && r.failed_generation == generation
            && matches!(
                status.state.as_deref(),
                Some(state::ROLLING_BACK | state::ROLLED_BACK | state::FAILED)
            )
    }) else {
        return Ok(None);
    };
    // Within the interval of its last apply, by this process: nothing to send again.
    let name = layer.name_any();
    let applied_ago = lock(&shared.memory)
        .get(&name)
        .and_then(|m| m.applied.as_ref())
        .filter(|(key, _)| *key == applied_key(&rolled_back))
        .map(|(_, at)| at.elapsed())
        .filter(|ago| *ago < interval);
    let prune_pending = status
        .inventory
        .iter()
        .any(|e| e.status == crate::keys::ORPHANED_STATUS);
    let requested = super::status::reconcile_request_pending(layer);
    if let Some(ago) = applied_ago.filter(|_| !prune_pending && !requested) {
        if status.state.as_deref() == Some(state::ROLLED_BACK) {
            let next = interval.saturating_sub(ago).max(Duration::from_secs(1));
            return Ok(Some(Pass::quiet(Action::requeue(next))));
        }
        if let Some(pass) = rejudge(
            ctx,
            layer,
            shared,
            &status.inventory,
            (revision.to_string(), true),
            (interval, timeout),
            Some(&rolled_back),
        )
        .await?
        {
            return Ok(Some(pass));
        }
    }
    let owned = status.inventory.clone();
    let why = Why::Continuing(rolled_back);
    roll_back(layer, ctx, shared, why, owned, revision, interval, timeout)
        .await
        .map(Some)
}

/// After an attempt's pass: when it ended Failed (its apply, or its objects' health) and the
/// layer rolls back on failure, the rollback, in the same pass. A layer that had already
/// failed this attempt (nothing to roll back to, or the rollback failed) is not rolled back
/// again until its source or spec changes.
pub(super) async fn after_attempt(
    layer: &AddonsLayer,
    ctx: &Context,
    shared: &Shared,
    pass: Pass,
    interval: Duration,
    timeout: Duration,
) -> Result<Pass> {
    let pass = with_kept(shared, layer, pass);
    let enabled = layer.spec.rollback.as_ref().is_some_and(|r| r.enabled);
    let Some(report) = pass.report.as_ref() else {
        return Ok(pass);
    };
    let failed = report.state == state::FAILED
        && matches!(
            report.reason.as_str(),
            reason::APPLY_FAILED | reason::HEALTH_CHECK_FAILED | reason::GATE_FAILED
        );
    let Some(revision) = report.attempted_revision.clone() else {
        return Ok(pass);
    };
    let status = layer.status.clone().unwrap_or_default();
    let failed_before = status.state.as_deref() == Some(state::FAILED)
        && status.last_attempted_revision.as_deref() == Some(revision.as_str())
        && status.observed_generation == layer.metadata.generation;
    if !enabled || !failed || failed_before {
        return Ok(pass);
    }
    let Some(report) = pass.report else {
        return Ok(pass);
    };
    let owned = report.inventory.clone().unwrap_or(status.inventory);
    let why = Why::Failed(Box::new(report));
    roll_back(layer, ctx, shared, why, owned, &revision, interval, timeout).await
}

/// Why a layer rolls back.
enum Why {
    /// Its attempt failed: that attempt's report.
    Failed(Box<Report>),
    /// A user asked (`strata layers rollback`), for a revision or the last good one.
    Requested { to: Option<String>, at: String },
    /// A rollback decided earlier, carried on (a later pass, a restarted controller).
    Continuing(RolledBack),
}

/// The key under which a rollback's apply is remembered (see `Memory::applied`): the kept
/// revision, apart from an attempt at the same source revision.
fn applied_key(rolled_back: &RolledBack) -> (String, Option<i64>) {
    (
        format!("{} (kept)", rolled_back.restored_revision),
        rolled_back.restored_generation,
    )
}

/// Applies the kept revision `why` calls for in place of the attempt at `revision`, prunes
/// what the layer owns beyond it (`owned`) at once, and judges it.
#[allow(clippy::too_many_arguments)]
async fn roll_back(
    layer: &AddonsLayer,
    ctx: &Context,
    shared: &Shared,
    why: Why,
    owned: Vec<InventoryEntry>,
    revision: &str,
    interval: Duration,
    timeout: Duration,
) -> Result<Pass> {
    let name = layer.name_any();
    let status = layer.status.clone().unwrap_or_default();
    let generation = layer.metadata.generation;
    let failed = (revision, generation);
    let all = read_kept(ctx, shared, &name).await?;
    let target = match &why {
        Why::Failed(_) => Target::LastGood,
        Why::Requested { to: Some(to), .. } => Target::Revision(to),
        Why::Requested { to: None, .. } => Target::LastGood,
        Why::Continuing(r) => Target::Exactly(&r.restored_revision, r.restored_generation),
    };
    let chosen = kept::choose(&all, &status.history, failed, target).cloned();
    let (failed_reason, failed_message, handled) = match &why {
        Why::Failed(report) => (report.reason.clone(), report.message.clone(), None),
        Why::Requested { at, .. } => (
            reason::ROLLBACK_REQUESTED.to_string(),
            format!("rollback requested at {at}"),
            Some(at.clone()),
        ),
        Why::Continuing(r) => (r.reason.clone(), r.message.clone(), None),
    };
    let chosen = match chosen {
        Ok(chosen) => chosen,
        Err(missing) => return Ok(unavailable(why, &missing, owned, revision, interval)),
    };
    let rolled_back = match &why {
        Why::Continuing(r) => r.clone(),
        _ => RolledBack {
            failed_revision: revision.to_string(),
            failed_generation: generation,
            restored_revision: chosen.revision.clone(),
            restored_generation: chosen.generation,
            restored_version: chosen.version.clone(),
            reason: failed_reason.clone(),
            message: failed_message.clone(),
            at: core_status::augment::format_time(Timestamp::now()),
        },
    };
    let mut pass = restore(
        layer,
        ctx,
        shared,
        &chosen,
        &rolled_back,
        owned,
        interval,
        timeout,
    )
    .await?;
    if let Some(report) = pass.report.as_mut() {
        report.handled_rollback_at = handled;
        // The failed attempt, recorded as it is given up (a requested rollback replaces an
        // attempt that did not fail).
        if let Why::Failed(failed_report) = &why {
            report.history.push(HistoryEntry {
                revision: revision.to_string(),
                version: layer.spec.version.clone(),
                generation,
                outcome: Some(state::FAILED.into()),
                failed_at: Some(rolled_back.at.clone()),
                reason: Some(failed_report.reason.clone()),
                message: Some(super::status::bounded(&failed_report.message)),
                ..Default::default()
            });
        }
        if let Why::Failed(failed_report) = why {
            report.kept = failed_report.kept;
        }
    }
    Ok(pass)
}

/// The report when there is nothing to roll back to: the failed attempt's own report (or,
/// for a request, a Failed one), saying why not and naming the field.
fn unavailable(
    why: Why,
    missing: &str,
    owned: Vec<InventoryEntry>,
    revision: &str,
    interval: Duration,
) -> Pass {
    let retry = Action::requeue(interval.min(Duration::from_secs(30)));
    match why {
        Why::Failed(report) => {
            let mut report = *report;
            report.message = format!(
                "spec.rollback: {missing}; revision {revision} failed: {}",
                report.message
            );
            report.reason = reason::ROLLBACK_UNAVAILABLE.into();
            Pass::report(report, retry)
        }
        Why::Requested { to, at } => {
            let field = if to.is_some() {
                ROLLBACK_TO
            } else {
                ROLLBACK_REQUESTED_AT
            };
            let mut report = Report::new(
                state::FAILED,
                reason::ROLLBACK_UNAVAILABLE,
                format!("{field}: {missing}; nothing was applied"),
            );
            report.inventory = Some(owned);
            report.handled_rollback_at = Some(at);
            Pass::report(report, retry)
        }
        Why::Continuing(rolled_back) => {
            let mut report = Report::new(
                state::FAILED,
                reason::ROLLBACK_FAILED,
                format!(
                    "the rollback to revision {} cannot go on: {missing}",
                    rolled_back.restored_revision
                ),
            );
            report.inventory = Some(owned);
            report.rolled_back = Some(rolled_back);
            Pass::report(report, retry)
        }
    }
}

/// Applies `chosen` as the layer acts, in stages, prunes what it does not hold, and judges.
#[allow(clippy::too_many_arguments)]
async fn restore(
    layer: &AddonsLayer,
    ctx: &Context,
    shared: &Shared,
    chosen: &StoredRevision,
    rolled_back: &RolledBack,
    owned: Vec<InventoryEntry>,
    interval: Duration,
    timeout: Duration,
) -> Result<Pass> {
    let name = layer.name_any();
    let checked_at = Instant::now();
    let access = access(ctx, shared, layer)?;
    let rules = plan::layer_rules(layer).unwrap_or_default();
    let manifests = chosen.to_manifests()?;
    let revision = rolled_back.failed_revision.clone();
    let Claims {
        desired,
        wanted_by,
        conflicts,
    } = claims(shared, &name, &owned, &manifests).await;
    if !conflicts.is_empty() {
        let message = conflicts
            .iter()
            .map(|(object, owner)| format!("{object} is now in layer {owner}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut report = Report::new(
            state::FAILED,
            reason::ROLLBACK_FAILED,
            format!(
                "the rollback to revision {} cannot take back what another layer owns: {message}",
                chosen.revision
            ),
        );
        report.inventory = Some(owned);
        report.attempted_revision = Some(revision);
        report.rolled_back = Some(rolled_back.clone());
        return Ok(Pass::report(report, Action::requeue(interval)));
    }
    let Staged {
        mut inventory,
        versions,
        failures,
        ..
    } = apply_stages(
        &access,
        shared,
        layer,
        &chosen.version,
        &manifests,
        &desired,
        &rules,
        false,
        timeout,
    )
    .await?;
    if !failures.is_empty() {
        let mut pass = failed_apply(&owned, &inventory, &failures, revision, interval);
        if let Some(report) = pass.report.as_mut() {
            report.reason = reason::ROLLBACK_FAILED.into();
            report.message = format!(
                "applying kept revision {}: {}",
                chosen.revision, report.message
            );
            report.rolled_back = Some(rolled_back.clone());
            report.version = Some(chosen.version.clone());
        }
        return Ok(pass);
    }
    lock(&shared.memory)
        .entry(name.clone())
        .or_default()
        .applied = Some((applied_key(rolled_back), Instant::now()));
    // What the failed attempt added goes at once: it never ran healthy, nobody may want it
    // kept for a grace window.
    let prune_wait = prune_left(
        ctx,
        &access,
        shared,
        layer,
        &owned,
        &mut inventory,
        &wanted_by,
        Duration::ZERO,
    )
    .await?;
    let status = layer.status.clone().unwrap_or_default();
    let attempt = Attempt {
        revision,
        // The same rollback as the last pass's: its health wait goes on.
        same: status.rolled_back.as_ref() == Some(rolled_back),
        interval,
        timeout,
        prune_wait,
        observed: Observed {
            at: checked_at,
            versions,
            judges_pods: rules.needs_pods(),
            kstatus_rules: rules.is_kstatus(),
        },
    };
    judge(ctx, layer, shared, attempt, inventory, Some(rolled_back)).await
}

/// A rollback's report for its objects' `outcome`: `RolledBack` once they are all Current
/// and the failed attempt's objects are gone, `RollingBack` until then, `Failed`
/// (`RollbackFailed`) when the kept revision does not become healthy either.
pub(super) fn judged(
    layer: &AddonsLayer,
    rolled_back: &RolledBack,
    outcome: Outcome,
    pending_prune: usize,
    failed_before: bool,
) -> (Report, Next) {
    let restored = &rolled_back.restored_revision;
    let why = format!(
        "revision {} failed ({}: {})",
        rolled_back.failed_revision, rolled_back.reason, rolled_back.message
    );
    let (mut report, next) = match outcome {
        Outcome::Deployed if pending_prune == 0 => {
            let mut report = Report::new(
                state::ROLLED_BACK,
                state::ROLLED_BACK,
                format!(
                    "rolled back to revision {restored} (version {}): {why}; it is not tried again until the source or spec changes",
                    rolled_back.restored_version
                ),
            );
            report.deployed_revision = Some(restored.clone());
            // Once per rollback, however often it turns RollingBack again on the way (an
            // object edited by hand, a heal).
            let recorded = layer.status.as_ref().is_some_and(|s| {
                s.rolled_back.as_ref() == Some(rolled_back)
                    && s.history.first().is_some_and(|h| {
                        h.outcome() == state::ROLLED_BACK
                            && h.revision == *restored
                            && h.generation == rolled_back.restored_generation
                    })
            });
            if !recorded {
                report.history.push(HistoryEntry {
                    revision: restored.clone(),
                    version: rolled_back.restored_version.clone(),
                    generation: rolled_back.restored_generation,
                    outcome: Some(state::ROLLED_BACK.into()),
                    deployed_at: Some(core_status::augment::format_time(Timestamp::now())),
                    reason: Some(rolled_back.reason.clone()),
                    message: Some(format!(
                        "restored after revision {} failed",
                        rolled_back.failed_revision
                    )),
                    ..Default::default()
                });
            }
            (report, Next::Interval)
        }
        Outcome::Deployed => (
            Report::new(
                state::ROLLING_BACK,
                reason::PROGRESSING,
                format!(
                    "rolling back to revision {restored}: pruning {pending_prune} objects of the failed attempt; {why}"
                ),
            ),
            Next::Prune,
        ),
        Outcome::Waiting(message) if failed_before => (
            Report::new(
                state::FAILED,
                reason::ROLLBACK_FAILED,
                format!("kept revision {restored} still not ready: {message}; {why}"),
            ),
            Next::Retry,
        ),
        Outcome::Waiting(message) => (
            Report::new(
                state::ROLLING_BACK,
                reason::PROGRESSING,
                format!("rolling back to revision {restored}: waiting for {message}; {why}"),
            ),
            Next::Health,
        ),
        Outcome::Failed(message) => (
            Report::new(
                state::FAILED,
                reason::ROLLBACK_FAILED,
                format!("kept revision {restored} did not become ready: {message}; {why}"),
            ),
            Next::Retry,
        ),
    };
    report.rolled_back = Some(rolled_back.clone());
    report.version = Some(rolled_back.restored_version.clone());
    (report, next)
}

/// The layer's `strata.dev/rollback-requested-at` value, when not handled yet.
fn rollback_request_pending(layer: &AddonsLayer) -> Option<String> {
    let handled = layer
        .status
        .as_ref()
        .and_then(|s| s.last_handled_rollback_at.as_deref());
    layer
        .annotations()
        .get(ROLLBACK_REQUESTED_AT)
        .filter(|at| !at.is_empty() && handled != Some(at.as_str()))
        .cloned()
}
