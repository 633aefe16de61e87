//! Krake observer-schema entries turned into [`ObservedFields`], with list bounds and our
//! merge-key extension.

use serde_json::{Map, Value};

use super::{FieldPath, ListBound, ObservedFields, SchemaError, Segment, selector_value};

/// The control dictionary that ends every list of a Krake observer schema.
const LIST_MIN: &str = "observer_schema_list_min_length";
const LIST_MAX: &str = "observer_schema_list_max_length";
/// Our extension: a list element of the schema may name its merge key, see
/// [`krake_schema_fields`].
const MERGE_KEY: &str = "observer_schema_merge_key";

/// The observed fields of one entry of a Krake observer schema.
///
/// The entry is a copy of the resource's shape whose leaves are `null` (observed), except the
/// identification `apiVersion`, `kind`, `metadata.name` (required) and `metadata.namespace`
/// (optional), which hold non-empty strings and are not observed. Every list ends with a control
/// dictionary `{observer_schema_list_min_length: N, observer_schema_list_max_length: M}`
/// (`M` = 0: unlimited) that becomes a [`ListBound`]; the elements before it are matched by
/// position.
///
/// Extension: an element `{observer_schema_merge_key: name, name: app, image: null}` is matched
/// by merge key instead (`containers[name=app].image`). Its key member holds the value to match
/// (a string or number); the key path (`containers[name=app].name`) is observed too, so a
/// removed element shows as drift even when the element observes nothing else.
pub fn krake_schema_fields(entry: &Value) -> Result<ObservedFields, SchemaError> {
    let Some(members) = entry.as_object() else {
        return Err(SchemaError::EntryNotObject {
            found: json_type(entry).to_string(),
        });
    };
    identification(members.get("apiVersion"), "apiVersion")?;
    let kind = identification(members.get("kind"), "kind")?;
    let Some(metadata) = members.get("metadata").and_then(Value::as_object) else {
        return Err(SchemaError::Identification {
            field: "metadata",
            reason: "required object".to_string(),
        });
    };
    let name = identification(metadata.get("name"), "metadata.name")?;
    let namespace = match metadata.get("namespace") {
        None => None,
        namespace => Some(identification(namespace, "metadata.namespace")?),
    };
    let object = match namespace {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    };

    let mut walk = SchemaWalk {
        object,
        fields: ObservedFields::default(),
    };
    for (key, value) in members {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                let path = FieldPath::root().key(key);
                for (key, value) in metadata {
                    if key != "name" && key != "namespace" {
                        walk.value(value, path.key(key))?;
                    }
                }
            }
            _ => walk.value(value, FieldPath::root().key(key))?,
        }
    }
    Ok(walk.fields.normalised())
}

fn identification<'a>(
    value: Option<&'a Value>,
    field: &'static str,
) -> Result<&'a str, SchemaError> {
    match value {
        Some(Value::String(text)) if !text.is_empty() => Ok(text),
        Some(Value::String(_)) => Err(SchemaError::Identification {
            field,
            reason: "must not be empty".to_string(),
        }),
        None => Err(SchemaError::Identification {
            field,
            reason: "required non-empty string".to_string(),
        }),
        Some(other) => Err(SchemaError::Identification {
            field,
            reason: format!("must be a string, got {}", json_type(other)),
        }),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

struct SchemaWalk {
    /// `Kind ns/name`, for errors.
    object: String,
    fields: ObservedFields,
}

impl SchemaWalk {
    fn value(&mut self, value: &Value, path: FieldPath) -> Result<(), SchemaError> {
        match value {
            Value::Null => self.fields.leaves.push(path),
            Value::Object(members) => {
                for (key, member) in members {
                    self.value(member, path.key(key))?;
                }
            }
            Value::Array(items) => self.list(items, path)?,
            other => {
                return Err(SchemaError::LeafNotNull {
                    object: self.object.clone(),
                    path: path.to_string(),
                    value: other.to_string(),
                });
            }
        }
        Ok(())
    }

    fn list(&mut self, items: &[Value], path: FieldPath) -> Result<(), SchemaError> {
        let control = match items.split_last() {
            Some((Value::Object(last), _)) if is_control(last) => last,
            _ => {
                return Err(SchemaError::MissingListControl {
                    object: self.object.clone(),
                    path: path.to_string(),
                });
            }
        };
        let elements = &items[..items.len() - 1];
        let (min, max) = self.control(control, &path)?;
        let max = match max {
            0 => None,
            max if max < min => {
                return Err(SchemaError::ListMaxBelowMin {
                    object: self.object.clone(),
                    path: path.to_string(),
                    min,
                    max,
                });
            }
            max if max < elements.len() => {
                return Err(SchemaError::ListMaxBelowObserved {
                    object: self.object.clone(),
                    path: path.to_string(),
                    max,
                    observed: elements.len(),
                });
            }
            max => Some(max),
        };

        let mut selected = std::collections::BTreeSet::new();
        for (index, element) in elements.iter().enumerate() {
            let element_path = path.child(Segment::Index(index));
            match element {
                Value::Object(members) if is_control(members) => {
                    return Err(SchemaError::ListControl {
                        object: self.object.clone(),
                        path: path.to_string(),
                        field: format!("[{index}]"),
                        reason: "the control dictionary must be the last element".to_string(),
                    });
                }
                Value::Object(members) if members.contains_key(MERGE_KEY) => {
                    let (key, value) = self.selector(members, &element_path)?;
                    let selected_path = path.child(Segment::Select {
                        key: key.clone(),
                        value,
                    });
                    if !selected.insert(selected_path.clone()) {
                        return Err(self.merge_key_error(
                            &element_path,
                            format!("another element already selects {selected_path}"),
                        ));
                    }
                    self.selected_element(members, &key, selected_path)?;
                }
                element => self.value(element, element_path)?,
            }
        }
        self.fields.list_bounds.push(ListBound { path, min, max });
        Ok(())
    }

    /// Reads `(min, max)` from a list's control dictionary.
    fn control(
        &self,
        control: &Map<String, Value>,
        path: &FieldPath,
    ) -> Result<(usize, usize), SchemaError> {
        let error = |field: &str, reason: String| SchemaError::ListControl {
            object: self.object.clone(),
            path: path.to_string(),
            field: field.to_string(),
            reason,
        };
        if let Some(unexpected) = control.keys().find(|k| *k != LIST_MIN && *k != LIST_MAX) {
            return Err(error(
                unexpected,
                "unexpected member in the control dictionary".to_string(),
            ));
        }
        let length = |field: &str| match control.get(field) {
            None => Err(error(field, "required non-negative integer".to_string())),
            Some(value) => value
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    error(
                        field,
                        format!("must be a non-negative integer, got {value}"),
                    )
                }),
        };
        Ok((length(LIST_MIN)?, length(LIST_MAX)?))
    }

    /// The `(key, value)` selector an element with `observer_schema_merge_key` stands for.
    fn selector(
        &self,
        members: &Map<String, Value>,
        element_path: &FieldPath,
    ) -> Result<(String, String), SchemaError> {
        let key = match members.get(MERGE_KEY) {
            Some(Value::String(key)) if !key.is_empty() && key != MERGE_KEY => key,
            other => {
                let found = other.map(|v| v.to_string()).unwrap_or_default();
                return Err(self.merge_key_error(
                    element_path,
                    format!("must name a member of the element, got {found}"),
                ));
            }
        };
        let Some(value) = members.get(key).and_then(selector_value) else {
            return Err(self.merge_key_error(
                element_path,
                format!("member {key:?} must hold the string or number to match"),
            ));
        };
        Ok((key.clone(), value))
    }

    /// The members of an element matched by merge key `key`, at `element_path`.
    fn selected_element(
        &mut self,
        members: &Map<String, Value>,
        key: &str,
        element_path: FieldPath,
    ) -> Result<(), SchemaError> {
        self.fields.leaves.push(element_path.key(key));
        for (member, value) in members {
            if member != key && member != MERGE_KEY {
                self.value(value, element_path.key(member))?;
            }
        }
        Ok(())
    }

    fn merge_key_error(&self, path: &FieldPath, reason: String) -> SchemaError {
        SchemaError::MergeKey {
            object: self.object.clone(),
            path: path.to_string(),
            reason,
        }
    }
}

fn is_control(members: &Map<String, Value>) -> bool {
    members.contains_key(LIST_MIN) || members.contains_key(LIST_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::test_support::{bound, path, texts};
    use serde_json::json;

    fn service_entry(spec: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": spec,
        })
    }

    #[test]
    fn krake_schema_accepted() {
        let cases: Vec<(&str, Value, Vec<&str>, Vec<ListBound>)> = vec![
            (
                "service with a bounded list",
                service_entry(json!({
                    "type": null,
                    "ports": [
                        {"port": null, "protocol": null},
                        {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 2},
                    ],
                })),
                vec!["spec.ports[0].port", "spec.ports[0].protocol", "spec.type"],
                vec![bound("spec.ports", 1, Some(2))],
            ),
            (
                "max 0 is unlimited",
                service_entry(json!({"ports": [
                    {"observer_schema_list_min_length": 0, "observer_schema_list_max_length": 0},
                ]})),
                vec![],
                vec![bound("spec.ports", 0, None)],
            ),
            (
                "null list elements and nested lists",
                service_entry(json!({"externalIPs": [
                    null,
                    [null, {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 1}],
                    {"observer_schema_list_min_length": 2, "observer_schema_list_max_length": 3},
                ]})),
                vec!["spec.externalIPs[0]", "spec.externalIPs[1][0]"],
                vec![
                    bound("spec.externalIPs", 2, Some(3)),
                    bound("spec.externalIPs[1]", 1, Some(1)),
                ],
            ),
            (
                "metadata beyond identification is observed, no namespace needed",
                json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "cfg", "labels": {"app.kubernetes.io/name": null}},
                    "data": {"mode": null},
                }),
                vec![r#"metadata.labels["app.kubernetes.io/name"]"#, "data.mode"],
                vec![],
            ),
            (
                "merge-key extension",
                json!({
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "web"},
                    "spec": {"template": {"spec": {"containers": [
                        {"observer_schema_merge_key": "name", "name": "app", "image": null,
                         "ports": [
                            {"observer_schema_merge_key": "containerPort", "containerPort": 80,
                             "protocol": null},
                            {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 0},
                         ]},
                        {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 0},
                    ]}}},
                }),
                vec![
                    "spec.template.spec.containers[name=app].image",
                    "spec.template.spec.containers[name=app].name",
                    "spec.template.spec.containers[name=app].ports[containerPort=80].containerPort",
                    "spec.template.spec.containers[name=app].ports[containerPort=80].protocol",
                ],
                vec![
                    bound("spec.template.spec.containers", 1, None),
                    bound("spec.template.spec.containers[name=app].ports", 1, None),
                ],
            ),
        ];
        for (name, entry, want_leaves, want_bounds) in cases {
            let fields = krake_schema_fields(&entry).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut want_leaves: Vec<FieldPath> = want_leaves.into_iter().map(path).collect();
            want_leaves.sort();
            assert_eq!(texts(&fields.leaves), texts(&want_leaves), "{name}: leaves");
            assert_eq!(fields.list_bounds, want_bounds, "{name}: bounds");
        }
    }

    #[test]
    fn krake_schema_refused() {
        let object = "Service shop/web".to_string();
        let control =
            json!({"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 1});
        let cases: Vec<(&str, Value, SchemaError)> = vec![
            (
                "not an object",
                json!([]),
                SchemaError::EntryNotObject {
                    found: "a list".into(),
                },
            ),
            (
                "missing apiVersion",
                json!({"kind": "Service", "metadata": {"name": "web"}}),
                SchemaError::Identification {
                    field: "apiVersion",
                    reason: "required non-empty string".into(),
                },
            ),
            (
                "empty kind",
                json!({"apiVersion": "v1", "kind": "", "metadata": {"name": "web"}}),
                SchemaError::Identification {
                    field: "kind",
                    reason: "must not be empty".into(),
                },
            ),
            (
                "missing metadata",
                json!({"apiVersion": "v1", "kind": "Service"}),
                SchemaError::Identification {
                    field: "metadata",
                    reason: "required object".into(),
                },
            ),
            (
                "null name",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": null}}),
                SchemaError::Identification {
                    field: "metadata.name",
                    reason: "must be a string, got null".into(),
                },
            ),
            (
                "numeric namespace",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": 3}}),
                SchemaError::Identification {
                    field: "metadata.namespace",
                    reason: "must be a string, got a number".into(),
                },
            ),
            (
                "non-null leaf",
                service_entry(json!({"replicas": 3})),
                SchemaError::LeafNotNull {
                    object: object.clone(),
                    path: "spec.replicas".into(),
                    value: "3".into(),
                },
            ),
            (
                "non-null list element",
                service_entry(json!({"ports": ["x", control.clone()]})),
                SchemaError::LeafNotNull {
                    object: object.clone(),
                    path: "spec.ports[0]".into(),
                    value: "\"x\"".into(),
                },
            ),
            (
                "missing control dictionary",
                service_entry(json!({"ports": [{"port": null}]})),
                SchemaError::MissingListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                },
            ),
            (
                "empty list has no control dictionary",
                service_entry(json!({"ports": []})),
                SchemaError::MissingListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                },
            ),
            (
                "control dictionary not last",
                service_entry(json!({"ports": [
                    control.clone(),
                    {"port": null},
                    {"observer_schema_list_min_length": 0, "observer_schema_list_max_length": 0},
                ]})),
                SchemaError::ListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    field: "[0]".into(),
                    reason: "the control dictionary must be the last element".into(),
                },
            ),
            (
                "control dictionary without max",
                service_entry(json!({"ports": [{"observer_schema_list_min_length": 1}]})),
                SchemaError::ListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    field: "observer_schema_list_max_length".into(),
                    reason: "required non-negative integer".into(),
                },
            ),
            (
                "negative min",
                service_entry(json!({"ports": [
                    {"observer_schema_list_min_length": -1, "observer_schema_list_max_length": 0},
                ]})),
                SchemaError::ListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    field: "observer_schema_list_min_length".into(),
                    reason: "must be a non-negative integer, got -1".into(),
                },
            ),
            (
                "unexpected control member",
                service_entry(json!({"ports": [
                    {"observer_schema_list_min_length": 0, "observer_schema_list_max_length": 0, "port": null},
                ]})),
                SchemaError::ListControl {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    field: "port".into(),
                    reason: "unexpected member in the control dictionary".into(),
                },
            ),
            (
                "max below min",
                service_entry(json!({"ports": [
                    {"observer_schema_list_min_length": 3, "observer_schema_list_max_length": 2},
                ]})),
                SchemaError::ListMaxBelowMin {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    min: 3,
                    max: 2,
                },
            ),
            (
                "max below the observed elements",
                service_entry(json!({"ports": [
                    {"port": null}, {"port": null},
                    {"observer_schema_list_min_length": 1, "observer_schema_list_max_length": 1},
                ]})),
                SchemaError::ListMaxBelowObserved {
                    object: object.clone(),
                    path: "spec.ports".into(),
                    max: 1,
                    observed: 2,
                },
            ),
            (
                "merge key naming a missing member",
                service_entry(json!({"ports": [
                    {"observer_schema_merge_key": "name", "port": null}, control.clone(),
                ]})),
                SchemaError::MergeKey {
                    object: object.clone(),
                    path: "spec.ports[0]".into(),
                    reason: "member \"name\" must hold the string or number to match".into(),
                },
            ),
            (
                "merge key not a string",
                service_entry(json!({"ports": [
                    {"observer_schema_merge_key": null, "port": null}, control.clone(),
                ]})),
                SchemaError::MergeKey {
                    object: object.clone(),
                    path: "spec.ports[0]".into(),
                    reason: "must name a member of the element, got null".into(),
                },
            ),
            (
                "two elements selecting the same",
                service_entry(json!({"ports": [
                    {"observer_schema_merge_key": "name", "name": "http"},
                    {"observer_schema_merge_key": "name", "name": "http"},
                    {"observer_schema_list_min_length": 0, "observer_schema_list_max_length": 0},
                ]})),
                SchemaError::MergeKey {
                    object: object.clone(),
                    path: "spec.ports[1]".into(),
                    reason: "another element already selects spec.ports[name=http]".into(),
                },
            ),
        ];
        for (name, entry, want) in cases {
            assert_eq!(krake_schema_fields(&entry), Err(want), "{name}");
        }
        let message = krake_schema_fields(&service_entry(json!({"ports": [{"port": null}]})))
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("observer schema Service shop/web: list spec.ports: must end"),
            "{message}"
        );
    }
}
