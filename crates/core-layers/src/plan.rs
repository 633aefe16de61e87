//! The pure decisions of the layer-controller: whether a layer may apply now (every blocker,
//! not just the first), cycles, apply stages and order, ownership conflicts, prune and
//! hand-over, readiness with a freshness guard, and the conditions that describe the result.
//! No I/O: the reconcile shell and `strata layers plan|graph` feed it what they read.
//!
//! Split by concern: `gate` (whether a layer may apply, its dependency graph),
//! `spec` (spec validation and timing), `apply` (stages and order), `prune` (ownership
//! conflicts, prune and hand-over), `readiness` (object status and the outcome of an attempt)
//! and `status` (conditions and Kraan's `status.resources`). Everything is re-exported here.

mod apply;
mod gate;
mod health;
mod prune;
mod readiness;
mod spec;
mod status;
#[cfg(test)]
mod test_support;
mod why;

use std::time::Duration;

pub use self::apply::{Stage, apply_key, is_definition, kind_rank, stage_of};
pub use self::gate::{
    Gate, GateInputs, ShardScope, close_over_dependencies, dependencies_of, dependency_graph,
    dependents, gate,
};
pub use self::health::{layer_rules, watched_recheck};
pub use self::prune::{
    LiveOwnership, PrunePlan, StaleObject, orphaned_label_value, ownership_conflicts,
    parse_orphaned_label, prune_plan,
};
pub use self::readiness::{
    Outcome, compile_ready_expr, inventory_health, object_status, outcome, ready_by_expr,
    ready_reason,
};
pub use self::spec::{
    effective_interval, orphan_grace, resync_sends_only_changed, spec_errors, timing,
    timing_or_default,
};
pub use self::status::{KRAAN_HELMRELEASE_KIND, conditions, kraan_resources, state_since};
pub use self::why::{WhyBlocker, WhyLayer, render_why, waiting_on, why};
pub use crate::manifest::prepare_manifest;
pub use crate::objects::{ObjectRef, SOURCE_KINDS, SourceRef, SourceState};

/// How often a layer is re-checked without a change (`spec.interval` default).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// How long applying may take before the layer is Failed (`spec.timeout` default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Deployed revisions kept in `status.history`.
pub const HISTORY_LIMIT: usize = 10;

/// The first `shown` items joined with `separator`, then `(and N more)`: messages stay
/// short however many objects are involved.
pub fn summarize(items: &[String], shown: usize, separator: &str) -> String {
    let mut text = items
        .iter()
        .take(shown)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(separator);
    let more = items.len().saturating_sub(shown);
    if more > 0 {
        text.push_str(&format!(" (and {more} more)"));
    }
    text
}
