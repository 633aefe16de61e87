//! One live object compared with its manifest, as the drift-observer and `strata drift -f` do.

use core_k8s::apply::Applier;
use serde_json::Value;
use tracing::Instrument as _;

use crate::compare;
use crate::error::Result;
use crate::rules::ObjectRules;
use crate::state;

/// Compares one object with its manifest: the findings, and how it was decided (`missing`,
/// `unchanged` without any API call, or `dry_run`). `layer_applier` applies as the
/// layer-controller; the dry run tells what its apply would change, and drift is attributed
/// to any other field manager. Used by the service and by `strata drift -f`.
pub async fn drift_of(
    layer_applier: &Applier,
    kind: &str,
    manifest: &Value,
    live: Option<&Value>,
    rules: &ObjectRules,
) -> Result<(Vec<state::Finding>, &'static str)> {
    let Some(live) = live else {
        return Ok((vec![state::missing()], "missing"));
    };
    let fields = rules.fields_for(manifest);
    // The manifest itself is a cheap first judge (see `ObjectRules::manifest_decides`).
    if rules.manifest_decides && compare::compare(manifest, live, &fields, &rules.ignore).is_empty()
    {
        return Ok((Vec::new(), "unchanged"));
    }
    let dry_run = layer_applier
        .dry_run_dynamic(manifest, None)
        .instrument(tracing::info_span!(
            "drift.dry_run",
            field_manager = %layer_applier.field_manager()
        ))
        .await;
    let expected = match dry_run {
        Ok(expected) => expected,
        // The API server refuses the layer's own manifest against the live object (an
        // immutable field changed, a webhook denies it, RBAC): that is drift the next apply
        // would fail on — reported, not retried forever in silence.
        Err(core_k8s::Error::Api { source, .. }) if matches!(*source, kube::Error::Api(_)) => {
            let message = match *source {
                kube::Error::Api(status) => status.message,
                _ => String::new(),
            };
            return Ok((
                vec![state::Finding {
                    path: state::MISSING_PATH.into(),
                    expected: "the layer's manifest applies".into(),
                    actual: format!("dry run refused: {message}"),
                    manager: None,
                }],
                "dry_run",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let expected = serde_json::to_value(expected).unwrap_or_default();
    let mut drifts = compare::compare(&expected, live, &fields, &rules.ignore);
    drifts.retain(|d| !compare::applied_by(live, &d.path, layer_applier.field_manager()));
    Ok((
        state::findings(kind, &drifts, live, layer_applier.field_manager()),
        "dry_run",
    ))
}
