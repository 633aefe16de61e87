//! Comparing the object a server-side-apply dry run predicts with the live object, at the
//! observed fields; who changed a drifted field; how a drifted value is shown. Pure.
//!
//! The dry run is the live object with the layer's manifest applied, so every difference at a
//! field the layer declares is a change someone else made (or a field the API server refused to
//! keep), and fields only the live object has are never ours.

use std::borrow::Cow;

use jiff::Timestamp;
use serde_json::Value;

use crate::fields::{FieldPath, ObservedFields, Segment, resolve, select, selector_value};

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

/// The field manager, other than `exclude`, that owns `path` in `live`'s `managedFields`: the
/// one owning the deepest part of it (the field itself, else the nearest node on the way that it
/// owns whole, like a container element `k:{"name":"app"}` with `.`), the newest `time` among
/// equals. `None` when no one else owns any of it.
pub fn manager_of(live: &Value, path: &FieldPath, exclude: &str) -> Option<String> {
    let entries = live.pointer("/metadata/managedFields")?.as_array()?;
    let mut best: Option<(usize, Option<Timestamp>, &str)> = None;
    for entry in entries {
        let Some(manager) = entry.get("manager").and_then(Value::as_str) else {
            continue;
        };
        let fields_type = entry.get("fieldsType").and_then(Value::as_str);
        if manager == exclude || fields_type.is_some_and(|t| t != "FieldsV1") {
            continue;
        }
        let Some(depth) = entry
            .get("fieldsV1")
            .and_then(|owned| owned_depth(owned, live, path))
        else {
            continue;
        };
        // An unreadable time sorts as the oldest.
        let time = entry
            .get("time")
            .and_then(Value::as_str)
            .and_then(|time| time.parse::<Timestamp>().ok());
        if best.is_none_or(|(best_depth, best_time, _)| (depth, time) > (best_depth, best_time)) {
            best = Some((depth, time, manager));
        }
    }
    best.map(|(_, _, manager)| manager.to_string())
}

/// Whether `path` holds what `manager` itself applied: it owns the whole field through a
/// server-side apply and no other manager owns any of it. Such a difference from the deployed
/// revision's manifest is the layer-controller's own write — a newer revision being applied
/// before the layer's status says so — never drift (without this, every new revision raced
/// the status write and was reported, with an Event and a needless heal request).
pub fn applied_by(live: &Value, path: &FieldPath, manager: &str) -> bool {
    let Some(entries) = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return false;
    };
    let ours = entries.iter().any(|entry| {
        entry.get("manager").and_then(Value::as_str) == Some(manager)
            && entry.get("operation").and_then(Value::as_str) == Some("Apply")
            && entry
                .get("fieldsV1")
                .and_then(|owned| owned_depth(owned, live, path))
                == Some(path.0.len())
    });
    ours && manager_of(live, path, manager).is_none()
}

/// How many leading segments of `path` a `fieldsV1` trie owns: the whole path when the trie
/// reaches its end, else the deepest node on the way that has `.` (owns itself) or no children
/// (owns an atomic value whole).
fn owned_depth(trie: &Value, live: &Value, path: &FieldPath) -> Option<usize> {
    let mut node = trie;
    let mut value = Some(live);
    let mut owned = None;
    for (position, segment) in path.0.iter().enumerate() {
        let (child, next_value) = match segment {
            Segment::Key(key) => (node.get(format!("f:{key}")), value.and_then(|v| v.get(key))),
            Segment::Index(index) => {
                let element = value.and_then(Value::as_array).and_then(|v| v.get(*index));
                (element_node(node, element, Some(*index), None), element)
            }
            Segment::Select { key, value: wanted } => {
                let found = value
                    .and_then(Value::as_array)
                    .and_then(|items| select(items, key, wanted));
                let element = found.map(|(_, element)| element);
                let index = found.map(|(index, _)| index);
                let child = element_node(node, element, index, Some((key, wanted)));
                (child, element)
            }
        };
        let Some(child) = child else {
            break;
        };
        node = child;
        value = next_value;
        let owns_itself =
            node.get(".").is_some() || node.as_object().is_some_and(|members| members.is_empty());
        if owns_itself || position + 1 == path.0.len() {
            owned = Some(position + 1);
        }
    }
    owned
}

/// The trie node of a list element: `k:{json}` (merge-key members equal to the element's),
/// `v:<json>` (a set element equal to it) or `i:N` (its position). Without the live element, a
/// selector still finds its `k:` node by the selected member.
fn element_node<'a>(
    node: &'a Value,
    element: Option<&Value>,
    index: Option<usize>,
    selector: Option<(&str, &str)>,
) -> Option<&'a Value> {
    let members = node.as_object()?;
    members.iter().find_map(|(name, child)| {
        let matches = if let Some(keys) = name.strip_prefix("k:") {
            match (serde_json::from_str::<Value>(keys), element) {
                (Ok(Value::Object(keys)), Some(element)) => {
                    !keys.is_empty()
                        && keys.iter().all(|(key, want)| {
                            element
                                .get(key)
                                .is_some_and(|have| values_equal(want, have))
                        })
                }
                (Ok(Value::Object(keys)), None) => selector.is_some_and(|(key, wanted)| {
                    keys.get(key)
                        .and_then(selector_value)
                        .is_some_and(|v| v == wanted)
                }),
                _ => false,
            }
        } else if let Some(set_value) = name.strip_prefix("v:") {
            match (serde_json::from_str::<Value>(set_value), element) {
                (Ok(set_value), Some(element)) => values_equal(&set_value, element),
                _ => false,
            }
        } else if let Some(position) = name.strip_prefix("i:") {
            index.is_some_and(|index| position.parse() == Ok(index))
        } else {
            false
        };
        matches.then_some(child)
    })
}

/// A Secret's `stringData` as the API server stores it: each value base64-encoded under
/// `data` (a `stringData` key wins over the same `data` key, as on write), `stringData`
/// removed. The API server never returns `stringData`, so a manifest compared with it as
/// written would observe a field no live object has and never see that value drift.
pub fn fold_string_data(manifest: &mut Value) {
    use base64::Engine as _;
    if manifest.get("kind").and_then(Value::as_str) != Some("Secret")
        || manifest.get("apiVersion").and_then(Value::as_str) != Some("v1")
    {
        return;
    }
    let Some(Value::Object(strings)) = manifest.get("stringData").cloned() else {
        return;
    };
    // A value that is not a string is left where it is: the API server refuses it, and the
    // dry run reports that.
    if strings.values().any(|v| !v.is_string()) {
        return;
    }
    let Some(object) = manifest.as_object_mut() else {
        return;
    };
    object.remove("stringData");
    let data = object
        .entry("data")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(data) = data {
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default();
            data.insert(
                key,
                Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}

/// What a masked value shows instead.
pub const MASKED: &str = "(masked)";

/// Members of a Secret whose values are secret.
const SECRET_MEMBERS: [&str; 2] = ["data", "stringData"];

/// `kubectl apply` (client-side) copies the whole object, data included, into this annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// For a `Secret`, [`MASKED`] in place of a value at or under `data`/`stringData`, of a subtree
/// holding them (the whole object), and of the last-applied annotation (which copies them);
/// absent stays absent. Other kinds unchanged.
pub fn mask_secret(kind: &str, path: &FieldPath, value: Option<Value>) -> Option<Value> {
    if kind != "Secret" {
        return value;
    }
    let value = value?;
    let under_data = matches!(path.0.first(),
        Some(Segment::Key(key)) if SECRET_MEMBERS.contains(&key.as_str()));
    let last_applied = path
        .0
        .iter()
        .any(|segment| matches!(segment, Segment::Key(key) if key == LAST_APPLIED));
    if under_data || last_applied || holds_secret(&value) {
        Some(Value::String(MASKED.to_string()))
    } else {
        Some(value)
    }
}

fn holds_secret(value: &Value) -> bool {
    match value {
        Value::Object(members) => members.iter().any(|(key, member)| {
            SECRET_MEMBERS.contains(&key.as_str()) || key == LAST_APPLIED || holds_secret(member)
        }),
        Value::Array(items) => items.iter().any(holds_secret),
        _ => false,
    }
}

/// Longest rendering of a value, in characters (the ellipsis included): enough to tell two
/// images or a small map apart without flooding an Event or a log line.
const RENDER_LIMIT: usize = 256;

/// A value for people: compact JSON, strings without quotes, `(absent)` for absent, at most
/// 256 characters (cut with `…`).
pub fn render_value(value: &Option<Value>) -> String {
    let text = match value {
        None => return "(absent)".to_string(),
        Some(Value::String(text)) => Cow::Borrowed(text.as_str()),
        Some(other) => Cow::Owned(other.to_string()),
    };
    if text.chars().count() <= RENDER_LIMIT {
        return text.into_owned();
    }
    let mut cut: String = text.chars().take(RENDER_LIMIT - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::{ListBound, default_fields, krake_schema_fields, selector_fields};
    use serde_json::json;

    const LAYER: &str = "strata-layer-controller";

    fn path(text: &str) -> FieldPath {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} does not parse: {e}"))
    }

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

    fn app_container(image: &str) -> Value {
        json!({
            "name": "app",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "resources": {},
            "terminationMessagePath": "/dev/termination-log",
        })
    }

    fn sidecar() -> Value {
        json!({"name": "istio-proxy", "image": "istio/proxyv2:1.24", "ports": [{"containerPort": 15090}]})
    }

    /// The Deployment as the API server holds it: defaults, managedFields and status added,
    /// after `kubectl set image deployment/web app=<image>` when `image` is not nginx:1.27.
    fn live_with(containers: Vec<Value>) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "labels": {"app.kubernetes.io/name": "web"},
                "annotations": {"deployment.kubernetes.io/revision": "2"},
                "generation": 2,
                "managedFields": [
                    {
                        "manager": LAYER,
                        "operation": "Apply",
                        "apiVersion": "apps/v1",
                        "time": "2026-11-20T09:00:00Z",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {
                            "f:metadata": {"f:labels": {"f:app.kubernetes.io/name": {}}},
                            "f:spec": {
                                "f:replicas": {},
                                "f:selector": {},
                                "f:template": {
                                    "f:metadata": {"f:labels": {"f:app": {}}},
                                    "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                                        ".": {},
                                        "f:name": {},
                                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                            ".": {},
                                            "f:containerPort": {},
                                        }},
                                    }}},
                                },
                            },
                        },
                    },
                    {
                        "manager": "kube-controller-manager",
                        "operation": "Update",
                        "apiVersion": "apps/v1",
                        "time": "2026-11-20T10:00:05Z",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:annotations": {
                            ".": {},
                            "f:deployment.kubernetes.io/revision": {},
                        }}},
                    },
                    {
                        "manager": "kube-controller-manager",
                        "operation": "Update",
                        "apiVersion": "apps/v1",
                        "time": "2026-11-20T10:00:05Z",
                        "fieldsType": "FieldsV1",
                        "subresource": "status",
                        "fieldsV1": {"f:status": {"f:replicas": {}, "f:conditions": {
                            ".": {},
                            "k:{\"type\":\"Available\"}": {".": {}, "f:status": {}},
                        }}},
                    },
                    {
                        "manager": "kubectl-set",
                        "operation": "Update",
                        "apiVersion": "apps/v1",
                        "time": "2026-11-20T10:00:00Z",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                            "k:{\"name\":\"app\"}": {"f:image": {}},
                        }}}}},
                    },
                ],
            },
            "spec": {
                "replicas": 2,
                "progressDeadlineSeconds": 600,
                "revisionHistoryLimit": 10,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": containers,
                        "restartPolicy": "Always",
                        "terminationGracePeriodSeconds": 30,
                    },
                },
            },
            "status": {"replicas": 2, "conditions": [{"type": "Available", "status": "True"}]},
        })
    }

    fn live(image: &str) -> Value {
        live_with(vec![app_container(image)])
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

    fn owned_by(entries: Value, object: Value) -> Value {
        let mut object = object;
        object["metadata"]["managedFields"] = entries;
        object
    }

    #[test]
    fn manager_of_table() {
        let replicas_owners = owned_by(
            json!([
                {"manager": "old-tool", "operation": "Apply", "time": "2026-11-20T08:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": "new-tool", "operation": "Apply", "time": "2026-11-20T11:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": "no-time", "operation": "Apply",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": "element-owner", "operation": "Update", "time": "2026-11-21T00:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {
                    "f:containers": {"k:{\"name\":\"app\"}": {".": {}}}}}}}},
                {"manager": "image-owner", "operation": "Update", "time": "2026-11-19T00:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {
                    "f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}}}}}}}},
            ]),
            live("nginx:1.27"),
        );
        let other_addressing = owned_by(
            json!([
                {"manager": "finalizer", "operation": "Update", "time": "2026-11-20T08:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:finalizers": {
                    ".": {}, "v:\"strata.dev/cleanup\"": {}}}}},
                {"manager": "other-finalizer", "operation": "Update", "time": "2026-11-19T08:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:finalizers": {
                    "v:\"other\"": {}}}}},
                {"manager": "by-position", "operation": "Update", "time": "2026-11-20T08:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:items": {"i:1": {"f:x": {}}}}}},
                {"manager": "gone-container", "operation": "Update", "time": "2026-11-20T08:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {
                    "f:containers": {"k:{\"name\":\"db\"}": {"f:image": {}}}}}}}},
                {"manager": "not-fields-v1", "operation": "Update", "time": "2026-11-20T08:00:00Z",
                 "fieldsType": "FieldsV2", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            ]),
            json!({
                "metadata": {"finalizers": ["other", "strata.dev/cleanup"]},
                "spec": {"replicas": 1, "items": [{"x": 1}, {"x": 2}],
                         "template": {"spec": {"containers": [app_container("nginx:1.27")]}}},
            }),
        );
        let after_set_image = live("nginx:1.28");
        let unmanaged = json!({"spec": {"replicas": 1}});
        let with_sidecar = live_with(vec![sidecar(), app_container("nginx:1.28")]);
        let cases: Vec<(&str, &Value, &str, &str, Option<&str>)> = vec![
            (
                "kubectl set image owns the image",
                &after_set_image,
                "spec.template.spec.containers[name=app].image",
                LAYER,
                Some("kubectl-set"),
            ),
            (
                "kubectl set image, even without excluding the layer",
                &after_set_image,
                "spec.template.spec.containers[name=app].image",
                "",
                Some("kubectl-set"),
            ),
            (
                "the same field by position behind a sidecar",
                &with_sidecar,
                "spec.template.spec.containers[1].image",
                LAYER,
                Some("kubectl-set"),
            ),
            (
                "the layer's own field, excluded",
                &after_set_image,
                "spec.replicas",
                LAYER,
                None,
            ),
            (
                "the layer's own field",
                &after_set_image,
                "spec.replicas",
                "",
                Some(LAYER),
            ),
            (
                "a port element matched by both of its key members",
                &after_set_image,
                "spec.template.spec.containers[name=app].ports[containerPort=80].containerPort",
                "kubectl-set",
                Some(LAYER),
            ),
            (
                "an unowned field of an element the layer owns",
                &after_set_image,
                "spec.template.spec.containers[name=app].resources",
                "kubectl-set",
                Some(LAYER),
            ),
            (
                "an unowned field, owner of the element excluded",
                &after_set_image,
                "spec.template.spec.containers[name=app].resources",
                LAYER,
                None,
            ),
            (
                "an atomic field owned whole",
                &after_set_image,
                "spec.selector.matchLabels.app",
                "",
                Some(LAYER),
            ),
            (
                "a label key with dots",
                &after_set_image,
                r#"metadata.labels["app.kubernetes.io/name"]"#,
                "",
                Some(LAYER),
            ),
            (
                "the status subresource",
                &after_set_image,
                "status.conditions[type=Available].status",
                LAYER,
                Some("kube-controller-manager"),
            ),
            (
                "newest among co-owners, a missing time oldest",
                &replicas_owners,
                "spec.replicas",
                "",
                Some("new-tool"),
            ),
            (
                "newest among co-owners, newest excluded",
                &replicas_owners,
                "spec.replicas",
                "new-tool",
                Some("old-tool"),
            ),
            (
                "the field's owner before a newer element owner",
                &replicas_owners,
                "spec.template.spec.containers[name=app].image",
                "",
                Some("image-owner"),
            ),
            (
                "a set element",
                &other_addressing,
                "metadata.finalizers[1]",
                "",
                Some("finalizer"),
            ),
            (
                "another set element",
                &other_addressing,
                "metadata.finalizers[0]",
                "",
                Some("other-finalizer"),
            ),
            (
                "another set element, its owner excluded: the list's owner",
                &other_addressing,
                "metadata.finalizers[0]",
                "other-finalizer",
                Some("finalizer"),
            ),
            (
                "an element by position",
                &other_addressing,
                "spec.items[1].x",
                "",
                Some("by-position"),
            ),
            (
                "a selected element gone from the live object",
                &other_addressing,
                "spec.template.spec.containers[name=db].image",
                "",
                Some("gone-container"),
            ),
            (
                "other field encodings are skipped",
                &other_addressing,
                "spec.replicas",
                "",
                None,
            ),
            ("no managedFields", &unmanaged, "spec.replicas", "", None),
        ];
        for (name, live, text, exclude, want) in cases {
            assert_eq!(
                manager_of(live, &path(text), exclude).as_deref(),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn applied_by_table() {
        let retention =
            |entries: Value| owned_by(entries, json!({"data": {"retention": "30d", "other": "x"}}));
        let applied = |manager: &str, operation: &str, fields: Value| {
            json!({"manager": manager, "operation": operation, "time": "2026-11-20T08:00:00Z",
                   "fieldsType": "FieldsV1", "fieldsV1": fields})
        };
        let data = json!({"f:data": {"f:retention": {}}});
        let layer_apply = retention(json!([applied(LAYER, "Apply", data.clone())]));
        let hand_edit = retention(json!([
            applied(LAYER, "Apply", json!({"f:data": {"f:other": {}}})),
            applied("kubectl-patch", "Update", data.clone()),
        ]));
        let shared = retention(json!([
            applied(LAYER, "Apply", data.clone()),
            applied("someone", "Apply", data.clone()),
        ]));
        let our_update = retention(json!([applied(LAYER, "Update", data.clone())]));
        let cases = [
            (
                "the layer-controller applied it",
                &layer_apply,
                "data.retention",
                true,
            ),
            ("edited by hand", &hand_edit, "data.retention", false),
            (
                "another applier shares it",
                &shared,
                "data.retention",
                false,
            ),
            (
                "ours, but not through apply",
                &our_update,
                "data.retention",
                false,
            ),
            (
                "a field ours does not reach",
                &layer_apply,
                "data.other",
                false,
            ),
            (
                "no managedFields",
                &json!({"data": {}}),
                "data.retention",
                false,
            ),
        ];
        for (name, live, text, want) in cases {
            assert_eq!(applied_by(live, &path(text), LAYER), want, "{name}");
        }
    }

    #[test]
    fn fold_string_data_table() {
        let secret = |extra: Value| {
            let mut s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
            if let (Value::Object(s), Value::Object(e)) = (&mut s, extra) {
                s.extend(e);
            }
            s
        };
        let cases = [
            (
                "stringData becomes data",
                secret(json!({"stringData": {"token": "abc"}})),
                secret(json!({"data": {"token": "YWJj"}})),
            ),
            (
                "merged with data, stringData winning",
                secret(
                    json!({"data": {"a": "eA==", "token": "b2xk"}, "stringData": {"token": "abc"}}),
                ),
                secret(json!({"data": {"a": "eA==", "token": "YWJj"}})),
            ),
            (
                "data alone is left as it is",
                secret(json!({"data": {"a": "eA=="}})),
                secret(json!({"data": {"a": "eA=="}})),
            ),
            (
                "a value that is not a string is left for the API server to refuse",
                secret(json!({"stringData": {"n": 1}})),
                secret(json!({"stringData": {"n": 1}})),
            ),
            (
                "not a Secret",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "stringData": {"a": "b"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "stringData": {"a": "b"}}),
            ),
        ];
        for (name, mut manifest, want) in cases {
            fold_string_data(&mut manifest);
            assert_eq!(manifest, want, "{name}");
        }
    }

    #[test]
    fn mask_secret_table() {
        let masked = Some(json!(MASKED));
        let cases = [
            (
                "secret data key",
                "Secret",
                "data.password",
                Some(json!("c2VjcmV0")),
                masked.clone(),
            ),
            (
                "secret stringData key",
                "Secret",
                "stringData.token",
                Some(json!("s3cr3t")),
                masked.clone(),
            ),
            (
                "secret data whole",
                "Secret",
                "data",
                Some(json!({"password": "c2VjcmV0"})),
                masked.clone(),
            ),
            (
                "secret object whole",
                "Secret",
                "",
                Some(json!({"kind": "Secret", "data": {"password": "c2VjcmV0"}})),
                masked.clone(),
            ),
            (
                "any subtree holding data",
                "Secret",
                "extra",
                Some(json!({"nested": [{"stringData": {"a": "b"}}]})),
                masked.clone(),
            ),
            (
                "last-applied annotation copies the data",
                "Secret",
                r#"metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]"#,
                Some(json!("{\"data\":{\"password\":\"c2VjcmV0\"}}")),
                masked.clone(),
            ),
            ("absent stays absent", "Secret", "data.password", None, None),
            (
                "secret label",
                "Secret",
                "metadata.labels.app",
                Some(json!("web")),
                Some(json!("web")),
            ),
            (
                "secret type",
                "Secret",
                "type",
                Some(json!("Opaque")),
                Some(json!("Opaque")),
            ),
            (
                "configmap data",
                "ConfigMap",
                "data.mode",
                Some(json!("prod")),
                Some(json!("prod")),
            ),
            (
                "configmap whole",
                "ConfigMap",
                "",
                Some(json!({"data": {"mode": "prod"}})),
                Some(json!({"data": {"mode": "prod"}})),
            ),
        ];
        for (name, kind, text, value, want) in cases {
            let at = if text.is_empty() {
                FieldPath::root()
            } else {
                path(text)
            };
            assert_eq!(mask_secret(kind, &at, value), want, "{name}");
        }
    }

    #[test]
    fn render_value_table() {
        let long = "x".repeat(300);
        let exact = "é".repeat(RENDER_LIMIT);
        let cases = [
            ("absent", None, "(absent)".to_string()),
            (
                "string without quotes",
                Some(json!("nginx:1.28")),
                "nginx:1.28".to_string(),
            ),
            ("number", Some(json!(2)), "2".to_string()),
            ("null", Some(json!(null)), "null".to_string()),
            (
                "compact object",
                Some(json!({"a": [1, "b"]})),
                r#"{"a":[1,"b"]}"#.to_string(),
            ),
            (
                "at the limit, in characters",
                Some(json!(exact.clone())),
                exact.clone(),
            ),
            (
                "cut",
                Some(json!(long)),
                format!("{}…", "x".repeat(RENDER_LIMIT - 1)),
            ),
        ];
        for (name, value, want) in cases {
            let got = render_value(&value);
            assert_eq!(got, want, "{name}");
            assert!(got.chars().count() <= RENDER_LIMIT, "{name}");
        }
    }
}
