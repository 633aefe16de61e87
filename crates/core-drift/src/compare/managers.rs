//! Who changed a drifted field: the field manager owning it in `managedFields`, and whether
//! it holds what the layer-controller itself applied.

use jiff::Timestamp;
use serde_json::Value;

use crate::fields::{FieldPath, Segment, select, selector_value};

use super::values_equal;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::test_support::{LAYER, app_container, live, live_with, path, sidecar};
    use serde_json::json;

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
}
