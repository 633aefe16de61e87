//! Labels, annotations, state names, condition types and reasons the layer-controller reads and
//! writes — in one place so the API, the planner, the CLI and the docs cannot drift apart.

/// Every object a layer applies carries the layer's name here; prune and hand-over read it.
pub const LAYER_LABEL: &str = "strata.dev/layer";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "strata";
/// Set on an object that left every layer; it is deleted when the grace window ends unless a
/// layer takes it back first. The value is a UTC time with `:` replaced by `.` (label values
/// cannot hold colons), as Kraan's `orphaned` label.
pub const ORPHANED_LABEL: &str = "strata.dev/orphaned";
/// `status.inventory[].status` of an object waiting out the orphan grace window.
pub const ORPHANED_STATUS: &str = "Orphaned";
/// Marks a ConfigMap as a layer source so its changes trigger the layers reading it.
pub const SOURCE_LABEL: &str = "strata.dev/layer-source";
/// Held by every layer until its objects are torn down.
pub const FINALIZER: &str = "strata.dev/layer-controller";

/// The layer-controller's service name: its Lease `layer-controller-leader`, metrics
/// `layer_controller_*`, field manager `strata-layer-controller` (what drift is judged against).
pub const LAYER_CONTROLLER: &str = "layer-controller";
/// An object annotated with one of these (`"true"`) gets the layer version injected, so a
/// version bump alone redeploys it (Kraan's `kraan.updateVersion`).
pub const UPDATE_VERSION_ANNOTATIONS: [&str; 2] =
    ["strata.dev/update-version", KRAAN_UPDATE_VERSION_ANNOTATION];
/// Kraan's own annotation; on a HelmRelease it injects [`KRAAN_VERSION_VALUE`].
pub const KRAAN_UPDATE_VERSION_ANNOTATION: &str = "kraan.updateVersion";
/// The Helm values key Kraan injects (`.Values.kraanVersion` in Kraan users' charts).
pub const KRAAN_VERSION_VALUE: &str = "kraanVersion";
/// The Helm values key `strata.dev/update-version` injects.
pub const LAYER_VERSION_VALUE: &str = "layerVersion";
/// Where the layer version is injected (pod template or object annotation; Helm values key
/// `layerVersion` for HelmReleases).
pub const LAYER_VERSION_ANNOTATION: &str = "strata.dev/layer-version";

/// Set on an AddonsLayer (RFC 3339 time) to have the layer-controller re-apply it at once,
/// as Flux's `reconcile.fluxcd.io/requestedAt`; the drift-observer's heal request.
pub const RECONCILE_REQUESTED_AT: &str = "strata.dev/reconcile-requested-at";
/// W3C trace context of whoever asked for the reconcile (the drift-observer's heal request):
/// the re-apply it causes joins that trace.
pub const RECONCILE_TRACEPARENT: &str = "strata.dev/traceparent";
/// The label that puts a layer in a shard, as Flux's controllers read it: a layer-controller
/// started with `--layer-selector=sharding.fluxcd.io/key=a` reconciles the layers labelled `a`,
/// the default shard (`!sharding.fluxcd.io/key`) those without the label.
pub const SHARD_LABEL: &str = "sharding.fluxcd.io/key";
/// How the layers carrying no shard label are named in messages and graphs.
pub const DEFAULT_SHARD: &str = "default";

/// Set on an AddonsLayer (RFC 3339 time) to have the layer-controller roll it back at once to
/// a kept revision (`strata layers rollback`); the revision is [`ROLLBACK_TO`]'s, else the
/// newest kept one that is not the current attempt.
pub const ROLLBACK_REQUESTED_AT: &str = "strata.dev/rollback-requested-at";
/// The revision a requested rollback restores.
pub const ROLLBACK_TO: &str = "strata.dev/rollback-to";
/// Label of the Secret holding a layer's kept revisions (value: the Secret's role, `revisions`).
pub const KEPT_REVISIONS_LABEL: &str = "strata.dev/kept-revisions-of";

/// On an applied object: `Heal`, `Warn` or `Ignore`, overriding the layer's drift mode.
pub const DRIFT_MODE_ANNOTATION: &str = "strata.dev/drift-mode";

/// Kraan's state names (`status.state`), plus `Deleting` for the ordered teardown.
pub mod state {
    pub const PENDING: &str = "Pending";
    pub const K8S_VERSION: &str = "K8sVersion";
    pub const APPLY_PENDING: &str = "ApplyPending";
    pub const APPLYING: &str = "Applying";
    pub const PRUNING: &str = "Pruning";
    pub const DEPLOYED: &str = "Deployed";
    pub const FAILED: &str = "Failed";
    pub const HOLD: &str = "Hold";
    pub const DELETING: &str = "Deleting";
    /// A failed attempt is being replaced by a kept revision (`spec.rollback`).
    pub const ROLLING_BACK: &str = "RollingBack";
    /// The layer runs a kept revision after a failed attempt (or a requested rollback), and
    /// stays there until its source or spec changes.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// Its objects are ready but a metric gate cannot be read (no data, an error, Prometheus
    /// unreachable): never counted as passed, never as failed; the layer waits, saying so.
    pub const GATE_UNKNOWN: &str = "GateUnknown";

    pub const ALL: [&str; 12] = [
        PENDING,
        K8S_VERSION,
        APPLY_PENDING,
        APPLYING,
        PRUNING,
        DEPLOYED,
        FAILED,
        HOLD,
        DELETING,
        ROLLING_BACK,
        ROLLED_BACK,
        GATE_UNKNOWN,
    ];
}

/// `status.blockedBy[].reason`.
pub mod blocker {
    pub const MISSING: &str = "Missing";
    pub const WRONG_VERSION: &str = "WrongVersion";
    pub const NOT_DEPLOYED: &str = "NotDeployed";
    pub const UNHEALTHY: &str = "Unhealthy";
    pub const SOURCE_NOT_READY: &str = "SourceNotReady";
    pub const ON_HOLD: &str = "OnHold";
    pub const CYCLE: &str = "Cycle";
    /// The dependency is reconciled by another shard.
    pub const OTHER_SHARD: &str = "OtherShard";
    pub const K8S_VERSION: &str = "K8sVersion";
    /// Teardown waits for a layer that depends on the one being deleted.
    pub const DEPENDENT: &str = "Dependent";
}

/// Standard condition types (kstatus, `kubectl wait --for=condition=Ready`).
pub mod condition {
    pub const READY: &str = "Ready";
    pub const RECONCILING: &str = "Reconciling";
    pub const STALLED: &str = "Stalled";
    /// Written by the drift-observer.
    pub const DRIFTED: &str = "Drifted";
    /// Written by the drift-observer: another writer keeps undoing the layer's fields.
    pub const FIGHT_DETECTED: &str = "FightDetected";
    /// The conditions the drift-observer owns (the layer-controller never writes them).
    pub const DRIFT_OBSERVER: [&str; 2] = [DRIFTED, FIGHT_DETECTED];
}

/// Reasons of the standard conditions and of Warning events that are not state names.
pub mod reason {
    pub const DEPENDENCY_CYCLE: &str = "DependencyCycle";
    /// A dependency is in another shard: chains cannot cross shards.
    pub const CROSS_SHARD_DEPENDENCY: &str = "CrossShardDependency";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const ARTIFACT_FAILED: &str = "ArtifactFailed";
    pub const INVALID_MANIFEST: &str = "InvalidManifest";
    /// `spec.postBuild` could not be honoured (Flux reports these as a failed build).
    pub const SUBSTITUTION_FAILED: &str = "SubstitutionFailed";
    pub const OWNERSHIP_CONFLICT: &str = "OwnershipConflict";
    pub const APPLY_FAILED: &str = "ApplyFailed";
    pub const HEALTH_CHECK_FAILED: &str = "HealthCheckFailed";
    pub const PRUNED: &str = "Pruned";
    pub const HANDED_OVER: &str = "HandedOver";
    pub const SUCCEEDED: &str = "ReconciliationSucceeded";
    pub const PROGRESSING: &str = "Progressing";
    pub const TEARDOWN_TIMED_OUT: &str = "TeardownTimedOut";
    /// A rollback asked for with `strata.dev/rollback-requested-at`.
    pub const ROLLBACK_REQUESTED: &str = "RollbackRequested";
    /// `spec.rollback` is on but no deployed revision is kept to go back to.
    pub const ROLLBACK_UNAVAILABLE: &str = "RollbackUnavailable";
    /// The kept revision could not be applied, or did not become healthy.
    pub const ROLLBACK_FAILED: &str = "RollbackFailed";
    /// A metric gate did not hold within the timeout, or broke during its watch.
    pub const GATE_FAILED: &str = "GateFailed";
}
