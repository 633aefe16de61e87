//! The comparison: each observed field whose live value is not the predicted one, and each
//! list bound the live object breaks; values compared as the API server means them.

use std::borrow::Cow;

use serde_json::Value;

use crate::fields::{FieldPath, ObservedFields, Segment, resolve, select};

/// One observed field whose live value is not the predicted one.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldDrift {
    pub path: FieldPath,
    /// `None`: absent. For a list bound, `"length between {min} and {max}"`.
    pub expected: Option<Value>,
    /// `None`: absent. For a list bound, the live length.
    pub actual: Option<Value>,
}

/// The drifted fields: each observed leaf not at or below an `ignore` path whose `live` value
/// differs from the `expected` (dry-run) one, then each list bound the live list breaks. Sorted
/// by path text, without repeats.
pub fn compare(
    expected: &Value,
    live: &Value,
    fields: &ObservedFields,
    ignore: &[FieldPath],
) -> Vec<FieldDrift> {
    // Ignore rules come as JSON pointers (positions) while leaves may select by merge key, and
    // the other way round: match every spelling of both.
    let spellings = |path: &FieldPath| -> Vec<FieldPath> {
        let mut all = vec![path.clone()];
        for object in [live, expected] {
            if let Some(positional) = path.positional_in(object)
                && !all.contains(&positional)
            {
                all.push(positional);
            }
        }
        all
    };
    let rules: Vec<Vec<FieldPath>> = ignore.iter().map(spellings).collect();
    let ignored = |path: &FieldPath| {
        let paths = spellings(path);
        rules
            .iter()
            .flatten()
            .any(|rule| paths.iter().any(|path| path.starts_with(rule)))
    };
    let mut drifts = Vec::new();
    for leaf in fields.leaves.iter().filter(|leaf| !ignored(leaf)) {
        // Absent from the prediction: the dry run keeps whatever is live, so a field it lacks
        // is not one the layer sets (e.g. an `ignore`d or defaulted one) — not ours to report.
        let Some(want) = resolve(expected, leaf) else {
            continue;
        };
        let have = resolve(live, leaf);
        // Ignore rules inside an observed subtree: cut those parts out of both sides.
        let mut below: Vec<&[Segment]> = Vec::new();
        for path in spellings(leaf) {
            for rule in rules.iter().flatten() {
                if rule.0.len() > path.0.len() && rule.starts_with(&path) {
                    below.push(&rule.0[path.0.len()..]);
                }
            }
        }
        let (want, have) = (without(want, &below), have.map(|v| without(v, &below)));
        if !have
            .as_deref()
            .is_some_and(|have| values_equal(&want, have))
        {
            push_unique(
                &mut drifts,
                FieldDrift {
                    path: leaf.clone(),
                    expected: Some(want.into_owned()),
                    actual: have.map(Cow::into_owned),
                },
            );
        }
    }
    for bound in fields.list_bounds.iter().filter(|b| !ignored(&b.path)) {
        let length = match resolve(live, &bound.path) {
            None | Some(Value::Null) => Some(0),
            Some(Value::Array(items)) => Some(items.len()),
            Some(_) => None,
        };
        let within = length.is_some_and(|n| n >= bound.min && bound.max.is_none_or(|max| n <= max));
        if within {
            continue;
        }
        let max = bound
            .max
            .map_or_else(|| "unbounded".to_string(), |max| max.to_string());
        push_unique(
            &mut drifts,
            FieldDrift {
                path: bound.path.clone(),
                expected: Some(Value::String(format!(
                    "length between {} and {max}",
                    bound.min
                ))),
                // Not a list at all: show what is there instead of a length.
                actual: match length {
                    Some(n) => Some(Value::from(n)),
                    None => resolve(live, &bound.path).cloned(),
                },
            },
        );
    }
    drifts.sort_by_cached_key(|drift| drift.path.to_string());
    drifts
}

fn push_unique(drifts: &mut Vec<FieldDrift>, drift: FieldDrift) {
    if !drifts.contains(&drift) {
        drifts.push(drift);
    }
}

/// `value` without the parts `ignore` (paths relative to it) name. List elements become `null`
/// rather than being removed, so the positions of the others still line up.
fn without<'a>(value: &'a Value, ignore: &[&[Segment]]) -> Cow<'a, Value> {
    if ignore.is_empty() {
        return Cow::Borrowed(value);
    }
    let mut value = value.clone();
    for path in ignore {
        remove(&mut value, path);
    }
    Cow::Owned(value)
}

fn remove(value: &mut Value, path: &[Segment]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let child = match (first, value) {
        (Segment::Key(key), Value::Object(members)) if rest.is_empty() => {
            members.remove(key);
            return;
        }
        (Segment::Key(key), Value::Object(members)) => members.get_mut(key),
        (Segment::Index(index), Value::Array(items)) => items.get_mut(*index),
        (Segment::Select { key, value }, Value::Array(items)) => {
            let position = select(items, key, value).map(|(position, _)| position);
            position.and_then(|position| items.get_mut(position))
        }
        _ => None,
    };
    match child {
        Some(child) if rest.is_empty() => *child = Value::Null,
        Some(child) => remove(child, rest),
        None => {}
    }
}

/// Equality as the API server means it: numbers by value (`1` == `1.0`, which JSON decoders
/// produce interchangeably), objects regardless of member order.
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
                (Some(x), Some(y), _, _) => x == y,
                (_, _, Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| values_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, x)| y.get(key).is_some_and(|y| values_equal(x, y)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::test_support::{app_container, live, live_with, path, sidecar};
    use crate::fields::{ListBound, default_fields, krake_schema_fields, selector_fields};
    use serde_json::json;

    /// What the layer applies.
    fn manifest() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "labels": {"app.kubernetes.io/name": "web"},
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "app",
                        "image": "nginx:1.27",
                        "ports": [{"containerPort": 80}],
                    }]},
                },
            },
        })
    }

    fn observe(paths: &[&str]) -> ObservedFields {
        let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        selector_fields(&paths).unwrap()
    }

    /// A Krake schema entry for the Deployment observing `spec`.
    fn krake(spec: Value) -> ObservedFields {
        krake_schema_fields(&json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn containers_bound(min: u64, max: u64) -> Value {
        json!({"template": {"spec": {"containers": [
            {"name": null},
            {"observer_schema_list_min_length": min, "observer_schema_list_max_length": max},
        ]}}})
    }

    #[test]
    fn compare_table() {
        let image = "spec.template.spec.containers[name=app].image";
        let set_image = || vec![(image, Some(json!("nginx:1.27")), Some(json!("nginx:1.28")))];
        let with_sidecar = || live_with(vec![sidecar(), app_container("nginx:1.27")]);
        // name, expected (dry run), live, observed, ignored → (path, expected, actual)
        type Want = Vec<(&'static str, Option<Value>, Option<Value>)>;
        type Case = (
            &'static str,
            Value,
            Value,
            ObservedFields,
            Vec<FieldPath>,
            Want,
        );
        let cases: Vec<Case> = vec![
            (
                "kubectl set image is drift",
                live("nginx:1.27"),
                live("nginx:1.28"),
                default_fields(&manifest()),
                vec![],
                set_image(),
            ),
            (
                "in sync",
                live("nginx:1.27"),
                live("nginx:1.27"),
                default_fields(&manifest()),
                vec![],
                vec![],
            ),
            (
                "judged against the manifest itself, defaults only live are not drift",
                manifest(),
                live("nginx:1.27"),
                default_fields(&manifest()),
                vec![],
                vec![],
            ),
            (
                "a defaulted field absent from the prediction is not drift even when observed",
                manifest(),
                live("nginx:1.27"),
                observe(&["spec.progressDeadlineSeconds"]),
                vec![],
                vec![],
            ),
            (
                "sidecar injected ahead of app, default fields",
                manifest(),
                with_sidecar(),
                default_fields(&manifest()),
                vec![],
                vec![],
            ),
            (
                "sidecar injected ahead of app shifts a positional path",
                manifest(),
                with_sidecar(),
                observe(&["spec.template.spec.containers[0].name"]),
                vec![],
                vec![(
                    "spec.template.spec.containers[0].name",
                    Some(json!("app")),
                    Some(json!("istio-proxy")),
                )],
            ),
            (
                "sidecar, the app container observed whole by merge key",
                live("nginx:1.27"),
                with_sidecar(),
                observe(&["spec.template.spec.containers[name=app]"]),
                vec![],
                vec![],
            ),
            (
                "sidecar, the whole list observed",
                live("nginx:1.27"),
                with_sidecar(),
                observe(&["spec.template.spec.containers"]),
                vec![],
                vec![(
                    "spec.template.spec.containers",
                    Some(json!([app_container("nginx:1.27")])),
                    Some(json!([sidecar(), app_container("nginx:1.27")])),
                )],
            ),
            (
                "a subtree observed by merge key shows the whole element",
                live("nginx:1.27"),
                live("nginx:1.28"),
                observe(&["spec.template.spec.containers[name=app]"]),
                vec![],
                vec![(
                    "spec.template.spec.containers[name=app]",
                    Some(app_container("nginx:1.27")),
                    Some(app_container("nginx:1.28")),
                )],
            ),
            (
                "a field outside the Krake schema is not observed",
                live("nginx:1.27"),
                live("nginx:1.28"),
                krake(json!({"replicas": null})),
                vec![],
                vec![],
            ),
            (
                "a field inside the Krake schema is",
                live("nginx:1.27"),
                {
                    let mut scaled = live("nginx:1.28");
                    scaled["spec"]["replicas"] = json!(5);
                    scaled
                },
                krake(json!({"replicas": null})),
                vec![],
                vec![("spec.replicas", Some(json!(2)), Some(json!(5)))],
            ),
            (
                "Krake list bound violated",
                with_sidecar(),
                with_sidecar(),
                krake(containers_bound(1, 1)),
                vec![],
                vec![(
                    "spec.template.spec.containers",
                    Some(json!("length between 1 and 1")),
                    Some(json!(2)),
                )],
            ),
            (
                "Krake list bound unbounded",
                with_sidecar(),
                with_sidecar(),
                krake(containers_bound(1, 0)),
                vec![],
                vec![],
            ),
            (
                "Krake list missing live is below its minimum",
                live("nginx:1.27"),
                live("nginx:1.27"),
                krake(json!({"template": {"spec": {"initContainers": [
                    {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 0},
                ]}}})),
                vec![],
                vec![(
                    "spec.template.spec.initContainers",
                    Some(json!("length between 1 and unbounded")),
                    Some(json!(0)),
                )],
            ),
            (
                "a list bound on something that is not a list shows it",
                json!({}),
                json!({"spec": {"ports": "x"}}),
                ObservedFields {
                    leaves: vec![],
                    list_bounds: vec![ListBound {
                        path: path("spec.ports"),
                        min: 0,
                        max: None,
                    }],
                },
                vec![],
                vec![(
                    "spec.ports",
                    Some(json!("length between 0 and unbounded")),
                    Some(json!("x")),
                )],
            ),
            (
                "ignored at the field",
                live("nginx:1.27"),
                live("nginx:1.28"),
                default_fields(&manifest()),
                vec![path(image)],
                vec![],
            ),
            (
                "ignored above the field",
                live("nginx:1.27"),
                live("nginx:1.28"),
                default_fields(&manifest()),
                vec![path("spec.template")],
                vec![],
            ),
            (
                "ignored by a JSON pointer with the element's position",
                live_with(vec![sidecar(), app_container("nginx:1.27")]),
                live_with(vec![sidecar(), app_container("nginx:1.28")]),
                default_fields(&manifest()),
                vec![
                    FieldPath::from_json_pointer("/spec/template/spec/containers/1/image").unwrap(),
                ],
                vec![],
            ),
            (
                "a JSON pointer at another position does not ignore it",
                live_with(vec![sidecar(), app_container("nginx:1.27")]),
                live_with(vec![sidecar(), app_container("nginx:1.28")]),
                default_fields(&manifest()),
                vec![
                    FieldPath::from_json_pointer("/spec/template/spec/containers/0/image").unwrap(),
                ],
                set_image(),
            ),
            (
                "ignored inside an observed subtree",
                live("nginx:1.27"),
                live("nginx:1.28"),
                observe(&["spec.template.spec.containers[name=app]"]),
                vec![path(image)],
                vec![],
            ),
            (
                "ignoring another field keeps the drift",
                live("nginx:1.27"),
                live("nginx:1.28"),
                default_fields(&manifest()),
                vec![
                    path("spec.replicas"),
                    path("spec.template.spec.containers[name=app].imagePullPolicy"),
                ],
                set_image(),
            ),
            (
                "1 and 1.0 are equal",
                json!({"spec": {"replicas": 1, "ratio": {"a": 0.5}}}),
                json!({"spec": {"replicas": 1.0, "ratio": {"a": 0.5}}}),
                observe(&["spec.replicas", "spec.ratio"]),
                vec![],
                vec![],
            ),
            (
                "1 and 2 are not",
                json!({"spec": {"replicas": 1}}),
                json!({"spec": {"replicas": 2.0}}),
                observe(&["spec.replicas"]),
                vec![],
                vec![("spec.replicas", Some(json!(1)), Some(json!(2.0)))],
            ),
            (
                "removed live",
                live("nginx:1.27"),
                {
                    let mut unlabelled = live("nginx:1.27");
                    unlabelled["metadata"]["labels"] = json!({});
                    unlabelled
                },
                default_fields(&manifest()),
                vec![],
                vec![(
                    r#"metadata.labels["app.kubernetes.io/name"]"#,
                    Some(json!("web")),
                    None,
                )],
            ),
            (
                "absent on both sides",
                json!({"spec": {}}),
                json!({"spec": {}}),
                observe(&["spec.paused"]),
                vec![],
                vec![],
            ),
            (
                "sorted by path text, without repeats",
                json!({"spec": {"a": 1, "0.x": 1}}),
                json!({"spec": {"a": 2, "0.x": 2}}),
                ObservedFields {
                    leaves: vec![
                        path(r#"spec["0.x"]"#),
                        path("spec.a"),
                        path(r#"spec["0.x"]"#),
                    ],
                    list_bounds: vec![],
                },
                vec![],
                vec![
                    ("spec.a", Some(json!(1)), Some(json!(2))),
                    (r#"spec["0.x"]"#, Some(json!(1)), Some(json!(2))),
                ],
            ),
        ];
        for (name, expected, live, fields, ignore, want) in cases {
            let got: Vec<(String, Option<Value>, Option<Value>)> =
                compare(&expected, &live, &fields, &ignore)
                    .into_iter()
                    .map(|d| (d.path.to_string(), d.expected, d.actual))
                    .collect();
            let want: Vec<(String, Option<Value>, Option<Value>)> = want
                .into_iter()
                .map(|(p, e, a)| (p.to_string(), e, a))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn values_equal_table() {
        let cases = [
            ("integer and float", json!(1), json!(1.0), true),
            ("negative", json!(-3), json!(-3.0), true),
            ("large unsigned", json!(u64::MAX), json!(u64::MAX), true),
            ("different numbers", json!(1), json!(1.5), false),
            ("number and string", json!(1), json!("1"), false),
            (
                "member order",
                json!({"a": 1, "b": 2}),
                json!({"b": 2.0, "a": 1}),
                true,
            ),
            (
                "extra member",
                json!({"a": 1}),
                json!({"a": 1, "b": 2}),
                false,
            ),
            ("list order matters", json!([1, 2]), json!([2, 1]), false),
            ("nested", json!([{"a": [1]}]), json!([{"a": [1.0]}]), true),
            ("null and absent-like", json!(null), json!({}), false),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(values_equal(&a, &b), want, "{name}");
            assert_eq!(values_equal(&b, &a), want, "{name}: symmetric");
        }
    }
}
