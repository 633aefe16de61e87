//! `spec.health`: the rules a layer judges its objects by.

use core_status::health::{HealthCheckExpr, HealthRules};
use core_status::policy::{Policy, Rules};

use crate::crd::{AddonsLayer, HealthPolicy};

/// The layer's health rules: kstatus' (the default) or the strict policy with the built-in
/// rule pack, and its own expressions over both. `Err` names the field.
pub fn layer_rules(layer: &AddonsLayer) -> Result<Rules, String> {
    let Some(health) = &layer.spec.health else {
        return Ok(Rules::default());
    };
    let strict = health.policy.unwrap_or_default() == HealthPolicy::Strict;
    let mut policy = if strict {
        Policy::strict()
    } else {
        Policy::kstatus()
    };
    if let Some(text) = &health.failure_grace {
        let grace = core_k8s::args::parse_duration(text).map_err(|_| {
            format!("spec.health.failureGrace: {text:?} is not a duration like 30s or 2m")
        })?;
        if !strict {
            return Err(
                "spec.health.failureGrace: only used with policy: strict (kstatus never fails a workload early)"
                    .into(),
            );
        }
        policy.failure_grace = grace;
    }
    let entries: Vec<HealthCheckExpr> = health
        .exprs
        .iter()
        .map(|e| HealthCheckExpr {
            api_version: e.api_version.clone(),
            kind: e.kind.clone(),
            current: e.current.clone(),
            in_progress: e.in_progress.clone(),
            failed: e.failed.clone(),
        })
        .collect();
    for (i, entry) in entries.iter().enumerate() {
        HealthRules::new(std::slice::from_ref(entry))
            .map_err(|e| format!("spec.health.exprs[{i}]: {e}"))?;
    }
    let own = HealthRules::new(&entries).map_err(|e| format!("spec.health.exprs: {e}"))?;
    let health = if strict {
        HealthRules::pack().overridden_by(own)
    } else {
        own
    };
    Ok(Rules { policy, health })
}

/// When a layer whose objects are all watched looks at them again with no event behind it.
/// The watches wake it on any change, so this poll only guards against an event lost (a
/// watch restarted): at first after 30 s, then after as long as the layer has `waited` so far,
/// at most 5 minutes apart; never past its timeout (`remaining`), nor more often than
/// `--health-poll`. A fixed 30 s cost a fleet's layers waiting minutes for
/// kube-controller-manager a reconcile every 30 s each: 6.5 per layer in an upgrade of
/// 10,000 layers, where the watches' wake-ups alone need two.
pub fn watched_recheck(
    waited: std::time::Duration,
    remaining: std::time::Duration,
    health_poll: std::time::Duration,
) -> std::time::Duration {
    use std::time::Duration;
    const FIRST: Duration = Duration::from_secs(30);
    const LONGEST: Duration = Duration::from_secs(5 * 60);
    waited.clamp(FIRST, LONGEST).min(remaining).max(health_poll)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::plan::test_support::layer;
    use serde_json::json;

    fn with_health(health: serde_json::Value) -> AddonsLayer {
        let mut this = layer(vec![]);
        this.spec.health = Some(serde_json::from_value(health).unwrap());
        this
    }

    #[test]
    fn a_watched_layer_looks_again_less_often_the_longer_it_waits() {
        use std::time::Duration;
        let s = Duration::from_secs;
        let cases = [
            // (what, waited, remaining, --health-poll, next look)
            ("just applied: 30 s", s(0), s(600), s(2), s(30)),
            ("waited 10 s: still 30 s", s(10), s(600), s(2), s(30)),
            ("waited 45 s: 45 s more", s(45), s(600), s(2), s(45)),
            ("waited 2 min: 2 min more", s(120), s(600), s(2), s(120)),
            ("waited 8 min: at most 5 min", s(480), s(3600), s(2), s(300)),
            ("never past the timeout", s(120), s(20), s(2), s(20)),
            ("a longer --health-poll wins", s(0), s(600), s(60), s(60)),
            (
                "--health-poll even past the timeout",
                s(0),
                s(5),
                s(10),
                s(10),
            ),
        ];
        for (what, waited, remaining, poll, next) in cases {
            assert_eq!(watched_recheck(waited, remaining, poll), next, "{what}");
        }
    }

    #[test]
    fn policies_and_grace() {
        assert!(layer_rules(&layer(vec![])).unwrap().is_kstatus());
        assert!(
            layer_rules(&with_health(json!({"policy": "kstatus"})))
                .unwrap()
                .is_kstatus()
        );
        let strict = layer_rules(&with_health(
            json!({"policy": "strict", "failureGrace": "10s"}),
        ))
        .unwrap();
        assert!(strict.policy.workload_failures);
        assert_eq!(
            strict.policy.failure_grace,
            std::time::Duration::from_secs(10)
        );
    }

    #[test]
    fn bad_health_names_the_field_and_expression() {
        for (case, health, want) in [
            (
                "unparsable expression",
                json!({"exprs": [{"apiVersion": "example.com/v1", "kind": "Widget", "current": "status.ready =="}]}),
                "spec.health.exprs[0]: health expression \"status.ready ==\" for example.com/Widget: ERROR",
            ),
            (
                "bad grace",
                json!({"policy": "strict", "failureGrace": "soon"}),
                "spec.health.failureGrace: \"soon\" is not a duration",
            ),
            (
                "grace without strict",
                json!({"failureGrace": "10s"}),
                "spec.health.failureGrace: only used with policy: strict",
            ),
        ] {
            let error = layer_rules(&with_health(health)).unwrap_err();
            assert!(error.starts_with(want), "{case}: {error}");
        }
    }

    #[test]
    fn own_expressions_judge_under_either_policy() {
        let rules = layer_rules(&with_health(json!({"exprs": [{
            "apiVersion": "example.com/v1", "kind": "Widget",
            "current": "has(status.ready) && status.ready",
            "failed": "has(status.error)"}]})))
        .unwrap();
        let now = jiff::Timestamp::UNIX_EPOCH;
        let widget = |status: serde_json::Value| {
            rules
                .evaluate(
                    &json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": status}),
                    now,
                )
                .status
        };
        assert_eq!(widget(json!({"ready": true})), core_status::Status::Current);
        assert_eq!(widget(json!({"error": "x"})), core_status::Status::Failed);
        assert_eq!(widget(json!({})), core_status::Status::InProgress);
    }
}
