//! What counts as drift for one object: the layer's `spec.drift` (Krake observer schema,
//! merge-key path selectors, ignore rules, mode) resolved against one manifest. Pure.

use core_layers::crd::{DriftMode, DriftSpec, ObjectSelector};
use core_layers::keys::DRIFT_MODE_ANNOTATION;
use core_layers::objects::ObjectRef;
use serde_json::Value;

use crate::fields::{self, FieldPath, ObservedFields};

/// What the observer does about one object's drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectMode {
    Heal,
    Warn,
    /// `strata.dev/drift-mode: Ignore`: not observed at all.
    Ignore,
}

/// How one object is observed.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectRules {
    pub mode: ObjectMode,
    /// The fields a Krake schema or `observe` rules chose; `None`: every field the manifest
    /// declares, derived from the manifest when a check needs them (kept as paths, they were
    /// a fifth of the observer's heap at 4,000 objects).
    pub fields: Option<ObservedFields>,
    pub ignore: Vec<FieldPath>,
    /// The manifest declares every observed field and no list bound is observed, so where the
    /// live object holds exactly the manifest's values, the dry run would agree: such a check
    /// needs no API call. Decided once per manifest, not per event.
    pub manifest_decides: bool,
}

/// Default corrections of one field within the window that make a fight.
pub const DEFAULT_FIGHT_CORRECTIONS: u32 = 3;
/// Default fight window.
pub const DEFAULT_FIGHT_WINDOW: std::time::Duration = std::time::Duration::from_secs(600);

/// The fight policy of a layer, defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fight {
    pub corrections: u32,
    pub window: std::time::Duration,
}

/// Every problem of a layer's `spec.drift`, each naming the field (`spec.drift.ignore[1]...`).
pub fn spec_errors(spec: &DriftSpec) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, entry) in spec.observer_schema.iter().enumerate() {
        if let Err(e) = fields::krake_schema_fields(entry) {
            errors.push(format!("spec.drift.observerSchema[{i}]: {e}"));
        }
    }
    for (i, rule) in spec.observe.iter().enumerate() {
        if rule.paths.is_empty() {
            errors.push(format!("spec.drift.observe[{i}].paths: empty"));
        }
        for (j, path) in rule.paths.iter().enumerate() {
            if let Err(e) = path.parse::<FieldPath>() {
                errors.push(format!("spec.drift.observe[{i}].paths[{j}] {path:?}: {e}"));
            }
        }
    }
    for (i, rule) in spec.ignore.iter().enumerate() {
        for (j, pointer) in rule.json_pointers.iter().enumerate() {
            if let Err(e) = FieldPath::from_json_pointer(pointer) {
                errors.push(format!(
                    "spec.drift.ignore[{i}].jsonPointers[{j}] {pointer:?}: {e}"
                ));
            }
        }
    }
    if let Some(fight) = &spec.fight {
        if fight.corrections == Some(0) {
            errors.push("spec.drift.fight.corrections: must be at least 1".into());
        }
        if let Some(window) = &fight.window
            && core_k8s::args::parse_duration(window).is_err()
        {
            errors.push(format!(
                "spec.drift.fight.window {window:?}: not a duration (e.g. 10m)"
            ));
        }
    }
    errors
}

/// The layer's fight policy (defaults where unset or invalid; invalid values are reported by
/// [`spec_errors`]).
pub fn fight_policy(spec: Option<&DriftSpec>) -> Fight {
    let fight = spec.and_then(|s| s.fight.as_ref());
    Fight {
        corrections: fight
            .and_then(|f| f.corrections)
            .filter(|c| *c > 0)
            .unwrap_or(DEFAULT_FIGHT_CORRECTIONS),
        window: fight
            .and_then(|f| f.window.as_deref())
            .and_then(|w| core_k8s::args::parse_duration(w).ok())
            .unwrap_or(DEFAULT_FIGHT_WINDOW),
    }
}

fn matches(selector: &ObjectSelector, object: &ObjectRef) -> bool {
    let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    is(&selector.group, &object.group)
        && is(&selector.kind, &object.kind)
        && is(&selector.name, &object.name)
        && is(
            &selector.namespace,
            object.namespace.as_deref().unwrap_or_default(),
        )
}

/// Whether a Krake schema entry names this object (Krake identifies by apiVersion, kind and
/// name; a namespace in the entry must match too).
fn schema_names(entry: &Value, object: &ObjectRef) -> bool {
    let text = |pointer: &str| entry.pointer(pointer).and_then(Value::as_str);
    let group = text("/apiVersion").map(core_status::object::api_group);
    group == Some(object.group.as_str())
        && text("/kind") == Some(object.kind.as_str())
        && text("/metadata/name") == Some(object.name.as_str())
        && text("/metadata/namespace").is_none_or(|ns| Some(ns) == object.namespace.as_deref())
}

/// How `object` (applied from `manifest`) is observed. Fields: the union of its Krake schema
/// entries and its `observe` paths; every field the manifest declares when it has neither.
/// Invalid rules are skipped here (reported once by [`spec_errors`]).
pub fn object_rules(spec: Option<&DriftSpec>, object: &ObjectRef, manifest: &Value) -> ObjectRules {
    let annotation = manifest
        .pointer(&format!(
            "/metadata/annotations/{}",
            DRIFT_MODE_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let layer_mode = match spec.and_then(|s| s.mode) {
        Some(DriftMode::Warn) => ObjectMode::Warn,
        _ => ObjectMode::Heal,
    };
    let mode = match annotation.map(str::to_ascii_lowercase).as_deref() {
        Some("heal") => ObjectMode::Heal,
        Some("warn") => ObjectMode::Warn,
        Some("ignore") | Some("disabled") => ObjectMode::Ignore,
        _ => layer_mode,
    };
    let mut chosen: Option<ObservedFields> = None;
    let mut add = |more: ObservedFields| {
        chosen = Some(match chosen.take() {
            Some(have) => have.merge(more),
            None => more,
        });
    };
    let mut ignore = Vec::new();
    if let Some(spec) = spec {
        for entry in spec
            .observer_schema
            .iter()
            .filter(|e| schema_names(e, object))
        {
            if let Ok(observed) = fields::krake_schema_fields(entry) {
                add(observed);
            }
        }
        for rule in spec.observe.iter().filter(|r| matches(&r.target, object)) {
            if let Ok(observed) = fields::selector_fields(&rule.paths) {
                add(observed);
            }
        }
        for rule in spec.ignore.iter().filter(|r| matches(&r.target, object)) {
            ignore.extend(
                rule.json_pointers
                    .iter()
                    .filter_map(|p| FieldPath::from_json_pointer(p).ok()),
            );
        }
    }
    let decides = |observed: &ObservedFields| {
        observed.list_bounds.is_empty()
            && observed
                .leaves
                .iter()
                .all(|leaf| fields::resolve(manifest, leaf).is_some())
    };
    let manifest_decides = match &chosen {
        Some(observed) => decides(observed),
        None => decides(&fields::default_fields(manifest)),
    };
    ObjectRules {
        mode,
        fields: chosen,
        ignore,
        manifest_decides,
    }
}

impl ObjectRules {
    /// The observed fields of the object applied from `manifest`.
    pub fn fields_for(&self, manifest: &Value) -> std::borrow::Cow<'_, ObservedFields> {
        match &self.fields {
            Some(chosen) => std::borrow::Cow::Borrowed(chosen),
            None => std::borrow::Cow::Owned(fields::default_fields(manifest)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use core_layers::crd::{FightPolicy, IgnoreRule, ObserveRule};
    use serde_json::json;

    fn web() -> (ObjectRef, Value) {
        let object = ObjectRef::new("apps/v1", "Deployment", Some("shop"), "web");
        let manifest = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "app", "image": "nginx:1.25"}]}}}
        });
        (object, manifest)
    }

    fn texts(fields: &ObservedFields) -> Vec<String> {
        fields.leaves.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn which_fields_are_observed() {
        let (object, manifest) = web();
        let schema = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": null}
        });
        let other_schema = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
            "spec": {"paused": null}
        });
        let observe = |kind: &str, path: &str| ObserveRule {
            target: ObjectSelector {
                kind: Some(kind.into()),
                ..Default::default()
            },
            paths: vec![path.into()],
        };
        // (case, spec, observed, not observed)
        type Case<'a> = (&'a str, Option<DriftSpec>, Vec<&'a str>, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            (
                "no spec: every declared field",
                None,
                vec![
                    "spec.replicas",
                    "spec.template.spec.containers[name=app].image",
                ],
                vec![],
            ),
            (
                "a schema entry for this object only",
                Some(DriftSpec {
                    observer_schema: vec![schema.clone(), other_schema],
                    ..Default::default()
                }),
                vec!["spec.replicas"],
                vec!["spec.template.spec.containers[name=app].image"],
            ),
            (
                "selector paths of a matching rule, plus the schema",
                Some(DriftSpec {
                    observer_schema: vec![schema],
                    observe: vec![
                        observe(
                            "Deployment",
                            "spec.template.spec.containers[name=app].image",
                        ),
                        observe("StatefulSet", "spec.serviceName"),
                    ],
                    ..Default::default()
                }),
                vec![
                    "spec.replicas",
                    "spec.template.spec.containers[name=app].image",
                ],
                vec!["spec.serviceName"],
            ),
        ];
        for (case, spec, want, not_want) in cases {
            let rules = object_rules(spec.as_ref(), &object, &manifest);
            let got = texts(&rules.fields_for(&manifest));
            for w in want {
                assert!(got.iter().any(|g| g == w), "{case}: {w} missing in {got:?}");
            }
            for w in not_want {
                assert!(!got.iter().any(|g| g == w), "{case}: {w} in {got:?}");
            }
        }
    }

    #[test]
    fn mode_and_ignore() {
        let (object, mut manifest) = web();
        let warn = DriftSpec {
            mode: Some(DriftMode::Warn),
            ignore: vec![
                IgnoreRule {
                    target: ObjectSelector {
                        name: Some("web".into()),
                        ..Default::default()
                    },
                    json_pointers: vec!["/spec/replicas".into()],
                },
                IgnoreRule {
                    target: ObjectSelector {
                        namespace: Some("other".into()),
                        ..Default::default()
                    },
                    json_pointers: vec!["/spec/paused".into()],
                },
            ],
            ..Default::default()
        };
        let rules = object_rules(Some(&warn), &object, &manifest);
        assert_eq!(rules.mode, ObjectMode::Warn);
        assert_eq!(
            rules
                .ignore
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec!["spec.replicas"]
        );
        assert_eq!(
            object_rules(None, &object, &manifest).mode,
            ObjectMode::Heal
        );
        for (value, want) in [
            ("Ignore", ObjectMode::Ignore),
            ("heal", ObjectMode::Heal),
            ("Warn", ObjectMode::Warn),
            ("nonsense", ObjectMode::Warn),
        ] {
            manifest["metadata"]["annotations"] = json!({ DRIFT_MODE_ANNOTATION: value });
            assert_eq!(
                object_rules(Some(&warn), &object, &manifest).mode,
                want,
                "{value}"
            );
        }
    }

    #[test]
    fn spec_errors_name_the_field() {
        let spec = DriftSpec {
            observer_schema: vec![json!({"kind": "Deployment", "metadata": {"name": "web"}})],
            observe: vec![ObserveRule {
                target: ObjectSelector::default(),
                paths: vec!["spec..x".into()],
            }],
            ignore: vec![IgnoreRule {
                target: ObjectSelector::default(),
                json_pointers: vec!["spec/replicas".into()],
            }],
            fight: Some(FightPolicy {
                corrections: Some(0),
                window: Some("soon".into()),
            }),
            ..Default::default()
        };
        let errors = spec_errors(&spec);
        for want in [
            "spec.drift.observerSchema[0]",
            "spec.drift.observe[0].paths[0]",
            "spec.drift.ignore[0].jsonPointers[0]",
            "spec.drift.fight.corrections",
            "spec.drift.fight.window",
        ] {
            assert!(
                errors.iter().any(|e| e.starts_with(want)),
                "{want} not in {errors:?}"
            );
        }
        assert!(spec_errors(&DriftSpec::default()).is_empty());
        let fight = fight_policy(Some(&spec));
        assert_eq!(fight.corrections, DEFAULT_FIGHT_CORRECTIONS);
        assert_eq!(fight.window, DEFAULT_FIGHT_WINDOW);
    }
}
