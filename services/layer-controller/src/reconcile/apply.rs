//! Applying a layer: variables substituted, ownership checked, definitions first and then
//! the rest in kind order, stale objects pruned; then the inventory judged into a state.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use core_k8s::Context;
use futures::StreamExt;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef as LayerKey;
use serde_json::{Value, json};

use crate::crd::{AddonsLayer, InventoryEntry, LayerSet, RolledBack};
use crate::error::{LayerError, Result};
use crate::keys::{ORPHANED_LABEL, ORPHANED_STATUS, reason, state};
use crate::lock;
use crate::plan::{self, ObjectRef, Outcome, Stage};
use crate::read::Reader;
use crate::source::{self, Files, Manifest};
use core_status::policy::Rules;

use super::first_report::FirstReports;
use super::health_watch::{Awaited, HealthWakeups, JudgedVersions, Verdict, Wakeup, judged_key};
use super::prune::prune;
use super::status::{Pass, Report, reconcile_request_pending};
use super::{Access, Shared, access};

#[allow(clippy::too_many_arguments)]
pub(super) async fn apply_layer(
    layer: &AddonsLayer,
    ctx: &Context,
    shared: &Shared,
    revision: String,
    files: &Files,
    interval: Duration,
    timeout: Duration,
) -> Result<Pass> {
    let name = layer.name_any();
    // Changes of the objects seen after this are not missed by the health wake-ups.
    let checked_at = Instant::now();
    let access = access(ctx, shared, layer)?;
    // spec.health was validated by the gate (a bad one stalls the layer before it gets here).
    let rules = plan::layer_rules(layer).unwrap_or_default();
    let mut previous = layer.status.clone().unwrap_or_default();
    let attempt_key = (revision.clone(), layer.metadata.generation);
    // A first report held back (see `first_report`) stands for the status not written yet.
    if let Some(held) = shared.first_reports.held(layer) {
        previous.inventory = held.inventory;
        if held.attempt == attempt_key {
            previous.state = Some(state::APPLYING.into());
            previous.last_attempted_revision = Some(revision.clone());
            previous.observed_generation = layer.metadata.generation;
        }
    }
    let same_attempt = previous.last_attempted_revision.as_deref() == Some(revision.as_str())
        && previous.observed_generation == layer.metadata.generation;
    let previous_state = previous.state.as_deref().unwrap_or_default();
    // A rollback asked for, or one decided earlier for this very attempt: the kept revision,
    // not the source's (see `rollback`).
    if let Some(pass) =
        super::rollback::instead_of_attempt(layer, ctx, shared, &revision, interval, timeout)
            .await?
    {
        return Ok(pass);
    }
    // How long ago this very attempt was fully applied, if within the interval.
    let applied_ago = lock(&shared.memory)
        .get(&name)
        .and_then(|m| m.applied.as_ref())
        .filter(|(key, _)| *key == attempt_key)
        .map(|(_, at)| at.elapsed())
        .filter(|ago| *ago < interval);
    let prune_pending = previous
        .inventory
        .iter()
        .any(|e| e.status == ORPHANED_STATUS);
    // A reconcile request (the drift-observer's heal, or a user's) re-applies at once.
    let requested = reconcile_request_pending(layer);
    if let Some(ago) = applied_ago.filter(|_| same_attempt && !prune_pending && !requested) {
        // Deployed, and past every gate's watch: nothing to do until the interval.
        if previous_state == state::DEPLOYED && !super::gates::watching(layer) {
            return Ok(Pass::quiet(Action::requeue(
                interval.saturating_sub(ago).max(Duration::from_secs(1)),
            )));
        }
        // Waiting on its objects or its gates (or watching its gates): judged again as they
        // stand, nothing sent.
        if matches!(
            previous_state,
            state::APPLYING | state::FAILED | state::GATE_UNKNOWN | state::DEPLOYED
        ) && let Some(pass) = rejudge(
            ctx,
            layer,
            shared,
            &previous.inventory,
            (revision.clone(), same_attempt),
            (interval, timeout),
            None,
        )
        .await?
        {
            return super::rollback::after_attempt(layer, ctx, shared, pass, interval, timeout)
                .await;
        }
    }

    if !shared.still_watched(&name) {
        tracing::debug!(layer = %name, "the layer left this shard: the new shard applies it");
        return Ok(Pass::quiet(Action::await_change()));
    }
    // Any failure to render fails this layer alone, with nothing applied.
    let manifests = match rendered_manifests(shared, &access, layer, files).await {
        Ok(manifests) => manifests,
        Err(e @ (LayerError::Api { .. } | LayerError::Kube(_))) => return Err(e),
        Err(e) => {
            let why = match e {
                LayerError::Substitution(_) => reason::SUBSTITUTION_FAILED,
                _ => reason::INVALID_MANIFEST,
            };
            let mut report = Report::new(state::FAILED, why, e.to_string());
            report.attempted_revision = Some(revision);
            return Ok(Pass::report(report, Action::requeue(interval)));
        }
    };

    // A new attempt starts the timeout clock.
    if !same_attempt || previous_state != state::APPLYING {
        lock(&shared.memory)
            .entry(name.clone())
            .or_default()
            .attempt_started = Some(Instant::now());
    }

    // Ownership: never take an object another layer owns and still wants.
    let Claims {
        desired,
        wanted_by,
        conflicts,
    } = claims(shared, &name, &previous.inventory, &manifests).await;
    if !conflicts.is_empty() {
        let message = conflicts
            .iter()
            .map(|(object, owner)| {
                format!("{object} is also in layer {owner}, which applied it first")
            })
            .collect::<Vec<_>>()
            .join("; ");
        let mut report = Report::new(state::FAILED, reason::OWNERSHIP_CONFLICT, message);
        report.attempted_revision = Some(revision);
        return Ok(Pass::report(report, Action::requeue(interval)));
    }

    // With `spec.rollback`, what this attempt applies is kept before it is applied: a
    // controller that stops halfway can still roll back to it once it has deployed.
    super::rollback::keep_revision(ctx, shared, layer, &revision, &manifests).await?;

    // A new attempt sends only the applies that change something (see
    // `unchanged_since_applied`), and so does a Deployed layer's re-apply for `--sync-period`
    // while its own interval has not passed since every object was last sent. Any other
    // re-apply of the same attempt (the interval, a reconcile request, a retry after a
    // failure) sends every one, so that the account's rights and the admission chain are
    // asked again.
    let since_all_sent = lock(&shared.memory)
        .get(&name)
        .and_then(|m| m.all_sent)
        .map(|at| at.elapsed());
    let resync = same_attempt
        && previous_state == state::DEPLOYED
        && plan::resync_sends_only_changed(
            since_all_sent,
            plan::timing_or_default(layer).0,
            shared.args.sync_period,
        );
    let skip_unchanged = (!same_attempt || resync) && !requested && rules.is_kstatus();
    // CRDs and Namespaces first, then the rest in kind order.
    let Staged {
        mut inventory,
        versions,
        failures,
        left_unsent,
    } = apply_stages(
        &access,
        shared,
        layer,
        &layer.spec.version,
        &manifests,
        &desired,
        &rules,
        skip_unchanged,
        timeout,
    )
    .await?;
    if !failures.is_empty() {
        let pass = failed_apply(
            &previous.inventory,
            &inventory,
            &failures,
            revision,
            interval,
        );
        return super::rollback::after_attempt(layer, ctx, shared, pass, interval, timeout).await;
    }
    {
        let mut memory = lock(&shared.memory);
        let memory = memory.entry(name.clone()).or_default();
        memory.applied = Some((attempt_key, Instant::now()));
        if left_unsent == 0 {
            memory.all_sent = Some(Instant::now());
        }
    }

    // Prune what left the layer, now that the whole desired set is applied.
    let prune_wait = prune_left(
        ctx,
        &access,
        shared,
        layer,
        &previous.inventory,
        &mut inventory,
        &wanted_by,
        plan::orphan_grace(shared.args.orphan_grace, interval),
    )
    .await?;
    let attempt = Attempt {
        revision,
        same: same_attempt,
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
    let pass = judge(ctx, layer, shared, attempt, inventory, None).await?;
    super::rollback::after_attempt(layer, ctx, shared, pass, interval, timeout).await
}

/// Judges the objects `inventory` lists as they stand now, without applying anything: an
/// attempt (or a rollback) already applied within the interval, waiting on health. `None`
/// when one of them is missing (it must be applied again).
pub(super) async fn rejudge(
    ctx: &Context,
    layer: &AddonsLayer,
    shared: &Shared,
    inventory: &[InventoryEntry],
    (revision, same): (String, bool),
    (interval, timeout): (Duration, Duration),
    rollback: Option<&RolledBack>,
) -> Result<Option<Pass>> {
    let rules = plan::layer_rules(layer).unwrap_or_default();
    let checked_at = Instant::now();
    let name = layer.name_any();
    let Some((inventory, versions)) = recheck(
        &shared.reader,
        inventory,
        &rules,
        Some((&shared.health, &name)),
    )
    .await?
    else {
        return Ok(None);
    };
    let attempt = Attempt {
        revision,
        same,
        interval,
        timeout,
        prune_wait: None,
        observed: Observed {
            at: checked_at,
            versions,
            judges_pods: rules.needs_pods(),
            kstatus_rules: rules.is_kstatus(),
        },
    };
    judge(ctx, layer, shared, attempt, inventory, rollback)
        .await
        .map(Some)
}

/// The report of an attempt whose apply failed: nothing is pruned after a failed apply, and
/// the inventory keeps everything the layer owns (what it owned before and what it applied
/// now).
pub(super) fn failed_apply(
    owned_before: &[InventoryEntry],
    applied: &[InventoryEntry],
    failures: &[String],
    revision: String,
    interval: Duration,
) -> Pass {
    let owned: BTreeSet<ObjectRef> = owned_before.iter().map(ObjectRef::of_entry).collect();
    let mut kept = owned_before.to_vec();
    kept.extend(
        applied
            .iter()
            .filter(|e| !owned.contains(&ObjectRef::of_entry(e)))
            .cloned(),
    );
    let message = plan::summarize(failures, 3, "; ");
    let mut report = Report::new(state::FAILED, reason::APPLY_FAILED, message);
    report.inventory = Some(kept);
    report.attempted_revision = Some(revision);
    Pass::report(
        report,
        Action::requeue(interval.min(Duration::from_secs(30))),
    )
}

/// Prunes what was in `owned_before` and is not in the applied `inventory`; the objects still
/// waiting out their grace window join the inventory (as orphaned entries). Returns when the
/// next grace window ends, if one does.
#[allow(clippy::too_many_arguments)]
pub(super) async fn prune_left(
    ctx: &Context,
    access: &Access,
    shared: &Shared,
    layer: &AddonsLayer,
    owned_before: &[InventoryEntry],
    inventory: &mut Vec<InventoryEntry>,
    wanted_by: &BTreeMap<ObjectRef, BTreeSet<String>>,
    grace: Duration,
) -> Result<Option<Duration>> {
    let applied: BTreeSet<ObjectRef> = inventory.iter().map(ObjectRef::of_entry).collect();
    let stale_entries: Vec<&InventoryEntry> = owned_before
        .iter()
        .filter(|e| !applied.contains(&ObjectRef::of_entry(e)))
        .collect();
    if stale_entries.is_empty() {
        return Ok(None);
    }
    let pending = prune(ctx, access, shared, layer, &stale_entries, wanted_by, grace).await?;
    Ok(pending.map(|(entries, wait)| {
        inventory.extend(entries);
        wait
    }))
}

/// What a layer wants and who else claims it.
pub(super) struct Claims {
    /// The objects of the layer's manifests, in manifest order.
    pub(super) desired: Vec<ObjectRef>,
    /// The layers whose sources want each contested or leaving object.
    pub(super) wanted_by: BTreeMap<ObjectRef, BTreeSet<String>>,
    /// The objects another layer owns and still wants, with that layer.
    pub(super) conflicts: Vec<(ObjectRef, String)>,
}

/// The objects `name` wants, their owners from the index the layer watch keeps (each
/// confirmed against the owner's cached copy, see `index`), and which of them another layer
/// owns and still wants.
pub(super) async fn claims(
    shared: &Shared,
    name: &str,
    inventory: &[InventoryEntry],
    manifests: &[Manifest],
) -> Claims {
    let mut desired = Vec::with_capacity(manifests.len());
    for manifest in manifests {
        desired.push(shared.reader.identity(manifest).await);
    }
    // The owners of the objects this layer wants, from the index the layer watch keeps,
    // each confirmed against the owner's cached copy (see `index`).
    let mut owners: BTreeMap<ObjectRef, String> = BTreeMap::new();
    // A new layer whose first report is held back owns what it applied all the same, and
    // still wants it: it has just applied it (see `first_report`).
    let mut held_by = Vec::new();
    for object in &desired {
        let held_owner =
            shared
                .first_reports
                .owners(object, name)
                .into_iter()
                .find(|(other, uid)| {
                    shared
                        .layers
                        .get(&LayerKey::new(other))
                        .is_some_and(|l| FirstReports::still_held_by(&l, uid.as_deref()))
                });
        if let Some((other, _)) = held_owner {
            owners.insert(object.clone(), other.clone());
            held_by.push((object.clone(), other));
            continue;
        }
        for other in shared.index.owners(object) {
            if other == name || owners.contains_key(object) {
                continue;
            }
            let Some(owner) = shared.layers.get(&LayerKey::new(&other)) else {
                continue;
            };
            let holds = owner.metadata.deletion_timestamp.is_none()
                && owner
                    .status
                    .iter()
                    .flat_map(|s| s.inventory.iter())
                    .any(|e| e.status != ORPHANED_STATUS && object.is_entry(e));
            if holds {
                owners.insert(object.clone(), other);
            }
        }
    }
    let contested = !owners.is_empty();
    // The global desired state costs reading every other layer's source: only when an
    // object is contested or something left this layer.
    let leaving = inventory
        .iter()
        .any(|e| !desired.iter().any(|object| object.is_entry(e)));
    let mut wanted_by = if contested || leaving {
        let all: LayerSet = shared
            .layers
            .state()
            .into_iter()
            .map(|l| (l.name_any(), l))
            .collect();
        shared.reader.wanted_by(name, &all).await
    } else {
        BTreeMap::new()
    };
    // What a layer with variables wants is read from its inventory, which a held report has
    // not written yet.
    for (object, owner) in held_by {
        wanted_by.entry(object).or_default().insert(owner);
    }
    let conflicts = plan::ownership_conflicts(name, &desired, &owners, &wanted_by);
    Claims {
        desired,
        wanted_by,
        conflicts,
    }
}

/// What the staged apply left: the entries applied (or left unchanged), the versions they
/// were judged at, the failures, and how many objects were left unsent as unchanged.
pub(super) struct Staged {
    pub(super) inventory: Vec<InventoryEntry>,
    pub(super) versions: JudgedVersions,
    pub(super) failures: Vec<String>,
    pub(super) left_unsent: usize,
}

/// Stage 1, CRDs and Namespaces, waited on (up to a minute) before anything that may need
/// them; then cluster-scoped objects and namespaced ones, each in kind order. A stage that
/// fails stops the next.
#[allow(clippy::too_many_arguments)]
pub(super) async fn apply_stages(
    access: &Access,
    shared: &Shared,
    layer: &AddonsLayer,
    version: &str,
    manifests: &[Manifest],
    desired: &[ObjectRef],
    rules: &Rules,
    skip_unchanged: bool,
    timeout: Duration,
) -> Result<Staged> {
    let name = layer.name_any();
    let prepared: Vec<(usize, Value)> = manifests
        .iter()
        .enumerate()
        .map(|(i, m)| (i, plan::prepare_manifest(&m.value, &name, version)))
        .collect();
    let (mut definitions, rest): (Vec<_>, Vec<_>) = prepared.into_iter().partition(|(i, _)| {
        plan::is_definition(&manifests[*i].api_version, &manifests[*i].object.kind)
    });
    let mut inventory = Vec::new();
    let mut versions = JudgedVersions::new();
    let mut failures = Vec::new();
    let mut left_unsent = 0;
    definitions.sort_by_key(|(i, _)| plan::apply_key(&desired[*i], Stage::Definitions));
    // CRDs first, when the layer has any (no empty apply span otherwise).
    if !definitions.is_empty() {
        left_unsent += apply_all(
            access,
            shared,
            &name,
            manifests,
            &definitions,
            rules,
            skip_unchanged,
            &mut inventory,
            &mut versions,
            &mut failures,
        )
        .await;
    }
    if failures.is_empty() && !definitions.is_empty() {
        wait_established(
            &shared.reader,
            rules,
            &mut inventory,
            timeout.min(Duration::from_secs(60)),
        )
        .await?;
    }

    // Then cluster-scoped objects, then namespaced ones, each in kind order.
    if failures.is_empty() {
        let mut ordered = Vec::new();
        for (i, value) in rest {
            let m = &manifests[i];
            match shared.reader.resolve(&m.api_version, &m.object.kind).await {
                Ok(resolved) => {
                    let stage = plan::stage_of(&m.api_version, &m.object.kind, resolved.namespaced);
                    ordered.push((plan::apply_key(&desired[i], stage), i, value));
                }
                Err(e) => failures.push(format!("{}: {}: {e}", m.origin, m.object)),
            }
        }
        ordered.sort_by(|a, b| a.0.cmp(&b.0));
        if failures.is_empty() {
            let ordered: Vec<(usize, Value)> =
                ordered.into_iter().map(|(_, i, v)| (i, v)).collect();
            left_unsent += apply_all(
                access,
                shared,
                &name,
                manifests,
                &ordered,
                rules,
                skip_unchanged,
                &mut inventory,
                &mut versions,
                &mut failures,
            )
            .await;
        }
    }
    Ok(Staged {
        inventory,
        versions,
        failures,
        left_unsent,
    })
}

/// The layer's manifests from `files`, its variables substituted. Variables are read as the
/// layer acts (its ServiceAccount's rights).
pub(super) async fn rendered_manifests(
    shared: &Shared,
    access: &Access,
    layer: &AddonsLayer,
    files: &Files,
) -> Result<Vec<Manifest>> {
    let vars = layer_reader::variables::layer_variables(
        &access.client,
        layer,
        &shared.args.default_source_namespace,
    )
    .await?;
    source::layer_manifests_with(files, &layer.spec.source.path, &vars)
}

/// Whether a new attempt may leave `manifest`'s object unapplied, and if so its inventory
/// entry and the version it stands at: this controller applied exactly so (same manifest,
/// field manager and acting user, `fingerprint`) and nobody changed it since, by its kind's
/// watch (see `health_watch`). Applying it again would change nothing, and each apply costs
/// kube-apiserver a full server-side apply (impersonated, authorized, merged) only to find
/// that out. Only an object that its apply left Current by kstatus' rules is left so:
/// unchanged since, it still is (Pods excepted, which are judged by the clock too). One left
/// InProgress (a new generation its controller has not observed) is applied again, so that its
/// inventory entry is judged afresh.
async fn unchanged_since_applied(
    shared: &Shared,
    manifest: &Manifest,
    resource: &ApiResource,
    fingerprint: u64,
) -> Option<(InventoryEntry, String)> {
    if manifest.api_version == "v1" && manifest.object.kind == "Pod" {
        return None;
    }
    let object = shared.reader.identity(manifest).await;
    let (version, verdict) = shared.health.unchanged_since_applied(
        resource,
        object.namespace.as_deref(),
        &object.name,
        fingerprint,
    )?;
    if verdict.status != core_status::Status::Current.to_string() {
        return None;
    }
    let entry = InventoryEntry {
        api_version: manifest.api_version.clone(),
        kind: manifest.object.kind.clone(),
        namespace: object.namespace,
        name: object.name,
        status: verdict.status,
        reason: verdict.reason,
        message: verdict.message,
    };
    Some((entry, version))
}

/// What an apply sends, as one number: the prepared manifest, the field manager and the user
/// acting (the same manifest applied as another account is another apply).
fn fingerprint(value: &Value, access: &Access) -> u64 {
    let mut hasher = DefaultHasher::new();
    access.applier.field_manager().hash(&mut hasher);
    access.user.hash(&mut hasher);
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

/// How one object of an attempt went.
enum ObjectApply {
    /// Applied: the object as the server left it.
    Sent(Box<core_k8s::Result<DynamicObject>>),
    /// Not applied: unchanged since it was applied exactly so (see
    /// [`unchanged_since_applied`]); its entry and the version it stands at.
    Unchanged(InventoryEntry, String),
}

/// Applies manifests in the given order, four at a time, recording inventory entries and
/// failures (`file: document N: object: error`); with `skip_unchanged`, the objects whose
/// apply would change nothing are left as they stand. Returns how many were.
#[tracing::instrument(
    name = "layer.apply",
    skip_all,
    fields(layer = %layer, objects = ordered.len(), field_manager = %access.applier.field_manager())
)]
#[allow(clippy::too_many_arguments)]
async fn apply_all(
    access: &Access,
    shared: &Shared,
    layer: &str,
    manifests: &[Manifest],
    ordered: &[(usize, Value)],
    rules: &Rules,
    skip_unchanged: bool,
    inventory: &mut Vec<InventoryEntry>,
    versions: &mut JudgedVersions,
    failures: &mut Vec<String>,
) -> usize {
    let now = Timestamp::now();
    let mut left_unsent = 0;
    let started = Instant::now();
    // Collected first: a lazily mapped iterator held across the await trips the compiler's
    // higher-ranked Send check.
    let applies: Vec<_> = ordered
        .iter()
        .map(|(i, value)| {
            let m = &manifests[*i];
            async move {
                // What a later attempt compares with (see `unchanged_since_applied`): only
                // kstatus' verdicts are remembered, so only under its rules.
                let remembered = if rules.is_kstatus() {
                    let resolved = shared.reader.resolve(&m.api_version, &m.object.kind).await;
                    resolved
                        .ok()
                        .map(|r| (r.resource, fingerprint(value, access)))
                } else {
                    None
                };
                if skip_unchanged
                    && let Some((resource, fingerprint)) = &remembered
                    && let Some((entry, version)) =
                        unchanged_since_applied(shared, m, resource, *fingerprint).await
                {
                    return (m, remembered, ObjectApply::Unchanged(entry, version));
                }
                let sent = access.applier.apply_dynamic(value, Some("default")).await;
                (m, remembered, ObjectApply::Sent(Box::new(sent)))
            }
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(applies).buffered(4).collect().await;
    for (m, remembered, applied) in results {
        let applied = match applied {
            ObjectApply::Unchanged(entry, version) => {
                left_unsent += 1;
                shared.metrics.count_unchanged(layer);
                versions.insert(judged_key(&entry), version);
                inventory.push(entry);
                continue;
            }
            ObjectApply::Sent(applied) => *applied,
        };
        match applied {
            Ok(object) => {
                shared.metrics.count_applied(layer);
                if object.labels().contains_key(ORPHANED_LABEL) {
                    // Taken back within the grace window: it is ours again.
                    let _ = remove_orphaned_label(&shared.reader, access, &m.api_version, &object)
                        .await;
                }
                let value = with_type(
                    serde_json::to_value(&object).unwrap_or_default(),
                    &m.api_version,
                    &m.object.kind,
                );
                // Just applied: its pods (if any) are judged on the next re-check.
                let (status, reason, message) = plan::inventory_health(&value, &[], now, rules);
                let entry = InventoryEntry {
                    api_version: m.api_version.clone(),
                    kind: m.object.kind.clone(),
                    namespace: object.namespace(),
                    name: object.name_any(),
                    status: status.to_string(),
                    reason,
                    message,
                };
                if let Some(version) = object.resource_version() {
                    // Judged by kstatus' rules, the verdict a later attempt may take over.
                    if let Some((resource, fingerprint)) = &remembered {
                        shared.health.record_applied(
                            resource,
                            entry.namespace.as_deref(),
                            &entry.name,
                            version.clone(),
                            *fingerprint,
                            Verdict::of_entry(&entry),
                            started,
                        );
                    }
                    versions.insert(judged_key(&entry), version);
                }
                inventory.push(entry);
            }
            Err(e) => failures.push(format!("{}: {}: {e}", m.origin, m.object)),
        }
    }
    left_unsent
}

fn with_type(mut value: Value, api_version: &str, kind: &str) -> Value {
    if let Some(obj) = value.as_object_mut() {
        obj.insert("apiVersion".into(), api_version.into());
        obj.insert("kind".into(), kind.into());
    }
    value
}

async fn remove_orphaned_label(
    reader: &Reader,
    access: &Access,
    api_version: &str,
    object: &DynamicObject,
) -> Result<()> {
    let kind = object
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    let resolved = reader.resolve(api_version, &kind).await?;
    let api = resolved.api(&access.client, object.namespace().as_deref());
    let patch = json!({"metadata": {"labels": {ORPHANED_LABEL: null}}});
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| LayerError::api(format!("adopting {kind} {}", object.name_any()), e))?;
    Ok(())
}

/// Polls the definitions of the first stage until they are Current (CRDs Established,
/// Namespaces Active), refreshing their inventory status.
async fn wait_established(
    reader: &Reader,
    rules: &Rules,
    inventory: &mut [InventoryEntry],
    limit: Duration,
) -> Result<()> {
    let started = Instant::now();
    loop {
        if let Some((fresh, _)) = recheck(reader, inventory, rules, None).await? {
            inventory.clone_from_slice(&fresh);
        }
        if inventory
            .iter()
            .all(|e| e.status == core_status::Status::Current.to_string())
            || started.elapsed() >= limit
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Re-reads the inventory's objects, with the versions read. `None` when one is missing (it
/// must be re-applied).
/// Under rules that judge pods, a workload that is not ready yet also has its pods listed
/// (one LIST by its selector).
/// With `known` (the health wake-ups and the layer), an object Current at the layer's last
/// pass that its kind's watch shows unchanged since is not read again: it is still Current.
pub(super) async fn recheck(
    reader: &Reader,
    inventory: &[InventoryEntry],
    rules: &Rules,
    known: Option<(&HealthWakeups, &str)>,
) -> Result<Option<(Vec<InventoryEntry>, JudgedVersions)>> {
    let now = Timestamp::now();
    let mut out = Vec::with_capacity(inventory.len());
    let mut versions = JudgedVersions::new();
    for entry in inventory {
        if entry.status == ORPHANED_STATUS {
            out.push(entry.clone());
            continue;
        }
        let resolved = reader.resolve(&entry.api_version, &entry.kind).await?;
        // Known without reading it (see `health_watch`): the verdict of the event that woke the
        // layer, or unchanged since it was judged.
        let known = known
            .and_then(|(health, layer)| {
                health.known(
                    layer,
                    &resolved.resource,
                    entry.namespace.as_deref(),
                    &entry.name,
                )
            })
            // Registered Current counts only where this inventory says Current too.
            .filter(|(_, verdict)| {
                verdict.is_some() || entry.status == core_status::Status::Current.to_string()
            });
        if let Some((version, verdict)) = known {
            versions.insert(judged_key(entry), version);
            out.push(verdict.map_or_else(|| entry.clone(), |v| v.applied_to(entry)));
            continue;
        }
        let Some(value) = reader
            .get_value(&resolved, entry.namespace.as_deref(), &entry.name)
            .await?
        else {
            return Ok(None);
        };
        let pods = if rules.needs_pods()
            && entry.status != core_status::Status::Current.to_string()
            && core_status::workload::is_workload(&entry.api_version, &entry.kind)
        {
            workload_pods(reader, entry.namespace.as_deref(), &value).await?
        } else {
            Vec::new()
        };
        let (status, reason, message) = plan::inventory_health(&value, &pods, now, rules);
        if let Some(version) = value
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            versions.insert(judged_key(entry), version.to_string());
        }
        out.push(InventoryEntry {
            status: status.to_string(),
            reason,
            message,
            ..entry.clone()
        });
    }
    Ok(Some((out, versions)))
}

/// The pods a workload's selector matches, in its namespace.
async fn workload_pods(
    reader: &Reader,
    namespace: Option<&str>,
    workload: &Value,
) -> Result<Vec<Value>> {
    let namespace = namespace.unwrap_or_default();
    core_status::wait::list_workload_pods(reader.client(), namespace, workload)
        .await
        .map_err(|e| LayerError::api(format!("listing the pods of a workload in {namespace}"), e))
}

/// The apply attempt being judged.
#[derive(Debug)]
pub(super) struct Attempt {
    pub(super) revision: String,
    /// Same revision and generation as the previous pass.
    pub(super) same: bool,
    pub(super) interval: Duration,
    pub(super) timeout: Duration,
    /// When the next orphaned object's grace window ends.
    pub(super) prune_wait: Option<Duration>,
    /// How this pass saw the objects, for the health wake-ups.
    pub(super) observed: Observed,
}

/// How a pass saw a layer's objects.
#[derive(Debug)]
pub(super) struct Observed {
    /// When the pass began reading or applying them.
    pub(super) at: Instant,
    /// Their versions as judged.
    pub(super) versions: JudgedVersions,
    /// The rules judge pods, whose changes no object watch sees: poll.
    pub(super) judges_pods: bool,
    /// The rules are kstatus' own, as the workload watches judge their events.
    pub(super) kstatus_rules: bool,
}

/// Turns the inventory into the layer's state: Deployed, still Applying, or Failed.
#[tracing::instrument(
    name = "layer.health",
    skip_all,
    fields(
        layer = %layer.name_any(),
        revision = %attempt.revision,
        objects = inventory.len(),
        not_ready = ?inventory
            .iter()
            .filter(|e| e.status != "Current" && e.status != ORPHANED_STATUS)
            .take(20)
            .map(|e| format!("{} {}: {}", e.kind, e.name, e.status))
            .collect::<Vec<_>>(),
    )
)]
pub(super) async fn judge(
    ctx: &Context,
    layer: &AddonsLayer,
    shared: &Shared,
    attempt: Attempt,
    inventory: Vec<InventoryEntry>,
    rollback: Option<&RolledBack>,
) -> Result<Pass> {
    let Attempt {
        revision,
        same: same_attempt,
        interval,
        timeout,
        prune_wait,
        observed,
    } = attempt;
    let name = layer.name_any();
    let previous = layer.status.clone().unwrap_or_default();
    let previous_state = previous.state.as_deref().unwrap_or_default();
    let desired: Vec<InventoryEntry> = inventory
        .iter()
        .filter(|e| e.status != ORPHANED_STATUS)
        .cloned()
        .collect();
    let pending_prune = inventory.len() - desired.len();
    // A rollback's health wait counts from when it began rolling back, an attempt's from
    // when it began applying.
    let waiting_state = match rollback {
        Some(_) => state::ROLLING_BACK,
        None => state::APPLYING,
    };
    let elapsed = if same_attempt && previous_state == waiting_state {
        plan::state_since(layer, waiting_state)
            .map(|since| Timestamp::now().duration_since(since).unsigned_abs())
            .unwrap_or_default()
    } else if same_attempt && rollback.is_none() && shared.first_reports.held(layer).is_some() {
        // Held back, the attempt has no Applying state to count from: since it began.
        lock(&shared.memory)
            .get(&name)
            .and_then(|m| m.attempt_started)
            .map(|at| at.elapsed())
            .unwrap_or_default()
    } else {
        Duration::ZERO
    };
    // Whatever the outcome, what the layer waited on is replaced: a layer still applying
    // registers afresh below.
    shared.health.forget(&name);
    let outcome = plan::outcome(&desired, elapsed, timeout);
    if let Some(rolled_back) = rollback {
        let (report, next) = super::rollback::judged(
            layer,
            rolled_back,
            outcome,
            pending_prune,
            same_attempt && previous_state == state::FAILED,
        );
        let next = match next {
            super::rollback::Next::Interval => interval,
            super::rollback::Next::Retry => interval.min(Duration::from_secs(30)),
            super::rollback::Next::Prune => prune_wait.map_or(interval, |w| w.min(interval)),
            super::rollback::Next::Health => {
                let remaining = timeout.saturating_sub(elapsed) + Duration::from_secs(1);
                next_health_check(shared, &name, &desired, &observed, (elapsed, remaining)).await
            }
        };
        let report = Report {
            inventory: Some(inventory),
            attempted_revision: Some(revision),
            ..report
        };
        return Ok(Pass::report(report, Action::requeue(next)));
    }
    let (report, action) = match outcome {
        Outcome::Deployed => {
            let mut message = format!(
                "layer version {} deployed: {} objects Current at revision {revision}",
                layer.spec.version,
                desired.len()
            );
            // Objects that left the layer wait out the orphan grace window before they are
            // pruned: Kraan's `Pruning` state until they are gone (dependents wait for
            // Deployed, which now means applied, healthy and pruned).
            let (layer_state, why) = if pending_prune > 0 {
                message.push_str(&format!(
                    "; pruning {pending_prune} orphaned objects after the grace window"
                ));
                (state::PRUNING, state::PRUNING)
            } else {
                (state::DEPLOYED, reason::SUCCEEDED)
            };
            let mut report = Report::new(layer_state, why, message);
            report.deployed_revision = Some(revision.clone());
            // Ready objects are not enough where the layer has metric gates (see `gates`).
            let already = same_attempt && previous_state == state::DEPLOYED;
            let (report, after) = super::gates::judge_gates(
                ctx,
                shared,
                layer,
                report,
                (same_attempt, already),
                (elapsed, timeout, interval),
            )
            .await;
            let next = prune_wait
                .map_or(interval, |wait| wait.min(interval))
                .min(after);
            if matches!(report.state, state::DEPLOYED | state::PRUNING) {
                let started = lock(&shared.memory)
                    .get_mut(&name)
                    .and_then(|m| m.attempt_started.take());
                if let Some(started) = started {
                    shared
                        .metrics
                        .rollout_seconds
                        .observe(started.elapsed().as_secs_f64());
                }
            }
            (report, Action::requeue(next))
        }
        Outcome::Waiting(message) if same_attempt && previous_state == state::FAILED => (
            Report::new(
                state::FAILED,
                reason::HEALTH_CHECK_FAILED,
                format!("still not ready: {message}"),
            ),
            Action::requeue(interval.min(Duration::from_secs(30))),
        ),
        Outcome::Waiting(message) => {
            let remaining = timeout.saturating_sub(elapsed) + Duration::from_secs(1);
            let next =
                next_health_check(shared, &name, &desired, &observed, (elapsed, remaining)).await;
            // A new layer's first state waits for the attempt to settle, a little; not when a
            // reconcile request waits for its answer in the status.
            let attempt = (revision.clone(), layer.metadata.generation);
            if !reconcile_request_pending(layer)
                && let Some(left) =
                    shared
                        .first_reports
                        .hold(layer, attempt, &inventory, Instant::now())
            {
                return Ok(Pass::quiet(Action::requeue(next.min(left))));
            }
            (
                Report::new(
                    state::APPLYING,
                    reason::PROGRESSING,
                    format!("waiting for {message}"),
                ),
                Action::requeue(next),
            )
        }
        Outcome::Failed(message) => (
            Report::new(state::FAILED, reason::HEALTH_CHECK_FAILED, message),
            Action::requeue(interval.min(Duration::from_secs(30))),
        ),
    };
    let report = Report {
        inventory: Some(inventory),
        attempted_revision: Some(revision),
        ..report
    };
    Ok(Pass::report(report, action))
}

/// A layer still waiting checks again when one of its objects changes, with a poll that grows
/// with the wait as the safety net (`plan::watched_recheck`, no later than its timeout); every
/// `--health-poll` where a change could go unseen: a kind not watched (yet), or rules that
/// judge pods.
async fn next_health_check(
    shared: &Shared,
    name: &str,
    desired: &[InventoryEntry],
    observed: &Observed,
    (waited, remaining): (Duration, Duration),
) -> Duration {
    let poll = shared.args.health_poll;
    if observed.judges_pods {
        return poll;
    }
    let current = core_status::Status::Current.to_string();
    if desired.iter().all(|e| e.status == current) {
        return poll;
    }
    // The objects already Current too: a change of one wakes the layer, and the next
    // re-check reads only those not known unchanged (see `health_watch`).
    let mut awaited = Vec::new();
    for entry in desired {
        let resolved = match shared.reader.resolve(&entry.api_version, &entry.kind).await {
            Ok(resolved) => resolved,
            // Not a wake-up source then, and read again at the next re-check.
            Err(_) if entry.status == current => continue,
            Err(_) => return poll,
        };
        awaited.push(Awaited {
            resource: resolved.resource,
            namespace: entry.namespace.clone(),
            name: entry.name.clone(),
            version: observed.versions.get(&judged_key(entry)).cloned(),
            current: entry.status == current,
            verdict: observed.kstatus_rules.then(|| Verdict::of_entry(entry)),
        });
    }
    match shared.health.wait_for(name, &awaited, observed.at) {
        Wakeup::Watched => plan::watched_recheck(waited, remaining, poll),
        Wakeup::Changed => Duration::from_millis(100),
        Wakeup::Polled => poll,
    }
}
