//! Checks of a layer's spec that no retry can fix, and its timing (interval, timeout, sync
//! period, orphan grace).

use std::time::Duration;

use crate::crd::AddonsLayer;
use crate::deps::{self, parse_dependency};

use super::{DEFAULT_INTERVAL, DEFAULT_TIMEOUT, SOURCE_KINDS};

/// How often a layer is re-applied: its interval, but at least every `sync_period` (Kraan
/// reprocesses every layer each `syncPeriod`, whatever its interval).
pub fn effective_interval(layer_interval: Duration, sync_period: Duration) -> Duration {
    if sync_period.is_zero() {
        layer_interval
    } else {
        layer_interval.min(sync_period)
    }
}

/// Whether a Deployed layer's periodic re-apply of the same attempt may leave out the objects
/// its watches know unchanged since this controller applied them exactly so: the re-apply is
/// due to `sync_period`, not to the layer's own interval, which has not passed since every
/// object was last sent (`since_all_sent`; `None`: not known, as after a restart). Kraan's
/// sync period re-applies only what differs from the cluster (it reads every object to tell),
/// and Flux re-applies at the interval alone; sending a thousand layers' unchanged objects
/// every minute only makes kube-apiserver find, in full, that nothing changed. The interval
/// still sends every object, so the account's rights and the admission chain are asked again
/// at least that often.
pub fn resync_sends_only_changed(
    since_all_sent: Option<Duration>,
    layer_interval: Duration,
    sync_period: Duration,
) -> bool {
    since_all_sent.is_some_and(|ago| {
        !sync_period.is_zero() && sync_period < layer_interval && ago < layer_interval
    })
}

/// How long an object that left a layer waits, orphaned, for another layer to adopt it: the
/// `--orphan-grace` flag when given, else the interval of the layer it left (Kraan).
pub fn orphan_grace(flag: Option<Duration>, layer_interval: Duration) -> Duration {
    flag.unwrap_or(layer_interval)
}

/// [`timing`], with the defaults when the spec is invalid (the gate reports that error).
pub fn timing_or_default(layer: &AddonsLayer) -> (Duration, Duration) {
    timing(layer).unwrap_or((DEFAULT_INTERVAL, DEFAULT_TIMEOUT))
}

/// Parsed `spec.interval` and `spec.timeout` (defaults applied).
pub fn timing(layer: &AddonsLayer) -> Result<(Duration, Duration), String> {
    let parse = |field: &str, value: &Option<String>, default: Duration| match value {
        None => Ok(default),
        Some(text) => core_k8s::args::parse_duration(text)
            .map_err(|_| format!("spec.{field}: {text:?} is not a duration like 30s, 5m or 1h"))
            .and_then(|d| {
                if d.is_zero() {
                    Err(format!("spec.{field} must be greater than zero"))
                } else {
                    Ok(d)
                }
            }),
    };
    let timeout = parse("timeout", &layer.spec.timeout, DEFAULT_TIMEOUT)?;
    // spec.health.timeout, when set, is how long the objects may take to become ready.
    let health_timeout = layer.spec.health.as_ref().and_then(|h| h.timeout.clone());
    Ok((
        parse("interval", &layer.spec.interval, DEFAULT_INTERVAL)?,
        parse("health.timeout", &health_timeout, timeout)?,
    ))
}

/// Problems in the spec that no retry can fix, naming the field.
pub fn spec_errors(layer: &AddonsLayer) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, entry) in layer.spec.prereqs.depends_on.iter().enumerate() {
        match parse_dependency(entry) {
            Ok(dep) if dep.layer == layer.metadata.name.as_deref().unwrap_or_default() => errors
                .push(format!(
                    "spec.prereqs.dependsOn[{i}]: a layer cannot depend on itself"
                )),
            Ok(_) => {}
            Err(e) => errors.push(format!("spec.prereqs.dependsOn[{i}]: {e}")),
        }
    }
    if let Some(want) = &layer.spec.prereqs.k8s_version
        && !want.is_empty()
        && deps::Version::parse(want).is_none()
    {
        errors.push(format!(
            "spec.prereqs.k8sVersion: {want:?} is not a version like v1.29 or 1.30.2"
        ));
    }
    if let Err(e) = timing(layer) {
        errors.push(e);
    }
    if let Err(e) = super::health::layer_rules(layer) {
        errors.push(e);
    }
    for (i, object) in layer.spec.prereqs.objects.iter().enumerate() {
        if let Some(source) = &object.ready_expr
            && let Err(e) = super::readiness::compile_ready_expr(source)
        {
            errors.push(format!(
                "spec.prereqs.objects[{i}].readyExpr {source:?} does not compile: {e}"
            ));
        }
        for (field, value) in [
            ("apiVersion", &object.api_version),
            ("kind", &object.kind),
            ("name", &object.name),
        ] {
            if value.trim().is_empty() {
                errors.push(format!(
                    "spec.prereqs.objects[{i}].{field}: must not be empty"
                ));
            }
        }
        if core_k8s::apply::parse_api_version(&object.api_version).is_none()
            && !object.api_version.trim().is_empty()
        {
            errors.push(format!(
                "spec.prereqs.objects[{i}].apiVersion: {:?} is not GROUP/VERSION or VERSION",
                object.api_version
            ));
        }
    }
    if let Err(e) = crate::metric_gate::gates(layer) {
        errors.extend(e);
    }
    if let Some(keep) = layer.spec.rollback.as_ref().and_then(|r| r.keep)
        && !(1..=crate::rollback::MAX_KEEP).contains(&keep)
    {
        errors.push(format!(
            "spec.rollback.keep: {keep} is not between 1 and {}",
            crate::rollback::MAX_KEEP
        ));
    }
    if let Some(post_build) = &layer.spec.post_build {
        for key in post_build.substitute.keys() {
            if !crate::substitute::valid_name(key) {
                errors.push(format!(
                    "spec.postBuild.substitute: variable name {key:?} is invalid: names match [_A-Za-z][_A-Za-z0-9]*"
                ));
            }
        }
        for (i, reference) in post_build.substitute_from.iter().enumerate() {
            if !matches!(reference.kind.as_str(), "ConfigMap" | "Secret") {
                errors.push(format!(
                    "spec.postBuild.substituteFrom[{i}].kind: {:?} is not ConfigMap or Secret",
                    reference.kind
                ));
            }
            if reference.name.trim().is_empty() {
                errors.push(format!(
                    "spec.postBuild.substituteFrom[{i}].name: must not be empty"
                ));
            }
        }
    }
    if let Some(kind) = layer.spec.source.kind.as_deref().filter(|k| !k.is_empty())
        && crate::objects::source_kind(kind).is_none()
    {
        errors.push(format!(
            "spec.source.kind: {kind:?} is not one of {} (or their plural.group form, e.g. gitrepositories.source.toolkit.fluxcd.io)",
            SOURCE_KINDS.join(", ")
        ));
    }
    let path = &layer.spec.source.path;
    if !path.starts_with("./") || path.split('/').any(|part| part == "..") {
        errors.push(format!(
            "spec.source.path: {path:?} must start with ./ and stay inside the source"
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::plan::test_support::{crd, layer};

    #[test]
    fn object_prereqs_are_validated() {
        let mut bad = crd();
        bad.name = String::new();
        bad.api_version = "a/b/c".into();
        let errors = spec_errors(&layer(vec![bad]));
        assert!(
            errors
                .iter()
                .any(|e| e == "spec.prereqs.objects[0].name: must not be empty"),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.prereqs.objects[0].apiVersion")),
            "{errors:?}"
        );
    }

    #[test]
    fn a_ready_expr_must_compile() {
        let mut bad = crd();
        bad.ready_expr = Some("dep.status.phase ==".into());
        let mut good = crd();
        good.ready_expr = Some("dep.status.phase == 'Active'".into());
        let errors = spec_errors(&layer(vec![good, bad]));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(
                "spec.prereqs.objects[1].readyExpr \"dep.status.phase ==\" does not compile: "
            ),
            "{errors:?}"
        );
    }

    #[test]
    fn rollback_keep_is_bounded() {
        for (keep, valid) in [
            (None, true),
            (Some(1), true),
            (Some(10), true),
            (Some(0), false),
            (Some(11), false),
        ] {
            let mut this = layer(vec![]);
            this.spec.rollback = Some(crate::crd::RollbackSpec {
                enabled: true,
                keep,
            });
            let errors = spec_errors(&this);
            assert_eq!(errors.is_empty(), valid, "keep {keep:?}: {errors:?}");
            if !valid {
                assert!(errors[0].starts_with("spec.rollback.keep: "), "{errors:?}");
            }
        }
    }

    #[test]
    fn post_build_is_validated() {
        let mut this = layer(vec![]);
        this.spec.post_build = serde_json::from_value(serde_json::json!({
            "substitute": {"GOOD_1": "x", "1BAD": "y", "also-bad": "z"},
            "substituteFrom": [
                {"kind": "ConfigMap", "name": "vars"},
                {"kind": "Secret", "name": " "},
                {"kind": "Deployment", "name": "x", "optional": true},
            ],
        }))
        .unwrap();
        let errors = spec_errors(&this);
        assert_eq!(
            errors,
            vec![
                "spec.postBuild.substitute: variable name \"1BAD\" is invalid: names match [_A-Za-z][_A-Za-z0-9]*",
                "spec.postBuild.substitute: variable name \"also-bad\" is invalid: names match [_A-Za-z][_A-Za-z0-9]*",
                "spec.postBuild.substituteFrom[1].name: must not be empty",
                "spec.postBuild.substituteFrom[2].kind: \"Deployment\" is not ConfigMap or Secret",
            ]
        );
        this.spec.post_build = serde_json::from_value(serde_json::json!({
            "substitute": {"APP": "x"},
            "substituteFrom": [{"kind": "Secret", "name": "s", "optional": true}],
        }))
        .unwrap();
        assert_eq!(spec_errors(&this), Vec::<String>::new());
    }

    #[test]
    fn sync_period_and_orphan_grace() {
        let s = Duration::from_secs;
        for (case, interval, sync, want) in [
            ("interval shorter than the sync period", s(10), s(60), s(10)),
            ("sync period bounds a long interval", s(300), s(60), s(60)),
            ("zero sync period: interval alone", s(300), s(0), s(300)),
        ] {
            assert_eq!(effective_interval(interval, sync), want, "{case}");
        }
        for (case, since_all_sent, interval, sync, want) in [
            (
                "a sync within the interval",
                Some(s(90)),
                s(300),
                s(60),
                true,
            ),
            (
                "the interval has passed: every object",
                Some(s(300)),
                s(300),
                s(60),
                false,
            ),
            (
                "never all sent (a restart): every object",
                None,
                s(300),
                s(60),
                false,
            ),
            (
                "interval shorter than the sync period",
                Some(s(5)),
                s(10),
                s(60),
                false,
            ),
            (
                "interval equal to the sync period",
                Some(s(30)),
                s(60),
                s(60),
                false,
            ),
            ("no sync period", Some(s(30)), s(300), s(0), false),
        ] {
            assert_eq!(
                resync_sends_only_changed(since_all_sent, interval, sync),
                want,
                "{case}"
            );
        }
        for (case, flag, interval, want) in [
            (
                "no flag: the layer's interval, as Kraan",
                None,
                s(60),
                s(60),
            ),
            ("the flag wins", Some(s(2)), s(60), s(2)),
        ] {
            assert_eq!(orphan_grace(flag, interval), want, "{case}");
        }
    }
}
