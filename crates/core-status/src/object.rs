//! Reading fields of a dynamic object the way kstatus does.
//!
//! Two families of readers, because kstatus has two: *strict* lookups (generation,
//! deletionTimestamp, conditions) fail on a wrongly typed value, while *counter* lookups
//! (`spec.replicas`, `status.readyReplicas`, ...) quietly fall back to a default for anything
//! that is not an integer (a string, a float, null).

use serde_json::Value;

use crate::error::{StatusError, type_name};

/// Follows `path`; `None` when a step is missing or a parent is null.
pub fn lookup<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut current = object;
    for step in path {
        match current {
            Value::Object(map) => current = map.get(*step)?,
            _ => return None,
        }
    }
    Some(current)
}

/// Like [`lookup`], but a non-map parent is an error (kstatus' nested accessors).
fn lookup_strict<'a>(object: &'a Value, path: &[&str]) -> Result<Option<&'a Value>, StatusError> {
    let mut current = object;
    for (i, step) in path.iter().enumerate() {
        match current {
            Value::Null => return Ok(None),
            Value::Object(map) => match map.get(*step) {
                Some(next) => current = next,
                None => return Ok(None),
            },
            other => {
                return Err(StatusError::FieldType {
                    field: path[..i].join("."),
                    expected: "a map",
                    found: type_name(other),
                });
            }
        }
    }
    Ok(Some(current))
}

/// A strictly typed integer field: absent → `None`; present but not an integer → error.
pub fn strict_int(object: &Value, path: &[&str]) -> Result<Option<i64>, StatusError> {
    match lookup_strict(object, path)? {
        None => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| StatusError::FieldType {
                field: path.join("."),
                expected: "an integer",
                found: type_name(value),
            }),
    }
}

/// A strictly typed string field: absent → `None`; present but not a string → error.
pub fn strict_str<'a>(object: &'a Value, path: &[&str]) -> Result<Option<&'a str>, StatusError> {
    match lookup_strict(object, path)? {
        None => Ok(None),
        Some(value) => value
            .as_str()
            .map(Some)
            .ok_or_else(|| StatusError::FieldType {
                field: path.join("."),
                expected: "a string",
                found: type_name(value),
            }),
    }
}

/// The child `key` of a top-level part (`metadata`, `status`) as a strict value: a null part
/// or absent key is `None`; a non-map part is an error naming the part.
fn strict_child<'a>(
    part: &'a Value,
    part_name: &str,
    key: &str,
) -> Result<Option<&'a Value>, StatusError> {
    match part {
        Value::Null => Ok(None),
        Value::Object(map) => Ok(map.get(key)),
        other => Err(StatusError::FieldType {
            field: part_name.to_string(),
            expected: "a map",
            found: type_name(other),
        }),
    }
}

/// [`strict_int`] for `part.key`, reading from an already-found top-level part.
pub fn strict_int_in(part: &Value, part_name: &str, key: &str) -> Result<Option<i64>, StatusError> {
    match strict_child(part, part_name, key)? {
        None => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| StatusError::FieldType {
                field: format!("{part_name}.{key}"),
                expected: "an integer",
                found: type_name(value),
            }),
    }
}

/// [`strict_str`] for `part.key`, reading from an already-found top-level part.
pub fn strict_str_in<'a>(
    part: &'a Value,
    part_name: &str,
    key: &str,
) -> Result<Option<&'a str>, StatusError> {
    match strict_child(part, part_name, key)? {
        None => Ok(None),
        Some(value) => value
            .as_str()
            .map(Some)
            .ok_or_else(|| StatusError::FieldType {
                field: format!("{part_name}.{key}"),
                expected: "a string",
                found: type_name(value),
            }),
    }
}

/// A counter: an integer at `path`, else `default`.
pub fn int_or(object: &Value, path: &[&str], default: i64) -> i64 {
    lookup(object, path)
        .and_then(Value::as_i64)
        .unwrap_or(default)
}

/// A string at `path`, else `default`.
pub fn str_or<'a>(object: &'a Value, path: &[&str], default: &'a str) -> &'a str {
    lookup(object, path)
        .and_then(Value::as_str)
        .unwrap_or(default)
}

/// One entry of `status.conditions`, as kstatus decodes it (borrowed: decoding allocates
/// nothing but the list).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObservedCondition<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

/// Decodes `status.conditions`. A non-map `status`, a non-list `conditions`, a non-map entry or
/// a non-string `type`/`status`/`reason`/`message` is an error; null means absent.
pub fn conditions(object: &Value) -> Result<Vec<ObservedCondition<'_>>, StatusError> {
    conditions_in(object.get("status").unwrap_or(&Value::Null))
}

/// [`conditions`] from an object's `status` value.
pub fn conditions_in(status: &Value) -> Result<Vec<ObservedCondition<'_>>, StatusError> {
    let status = match Some(status) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(status)) => status,
        Some(other) => {
            return Err(StatusError::FieldType {
                field: "status".into(),
                expected: "a map",
                found: type_name(other),
            });
        }
    };
    let list = match status.get("conditions") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(StatusError::FieldType {
                field: "status.conditions".into(),
                expected: "a list",
                found: type_name(other),
            });
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, entry)| {
            let entry = match entry {
                Value::Null => return Ok(ObservedCondition::default()),
                Value::Object(entry) => entry,
                other => {
                    return Err(StatusError::FieldType {
                        field: format!("status.conditions[{i}]"),
                        expected: "a map",
                        found: type_name(other),
                    });
                }
            };
            let field = |name: &str| -> Result<&str, StatusError> {
                match entry.get(name) {
                    None | Some(Value::Null) => Ok(""),
                    Some(Value::String(s)) => Ok(s.as_str()),
                    Some(other) => Err(StatusError::FieldType {
                        field: format!("status.conditions[{i}].{name}"),
                        expected: "a string",
                        found: type_name(other),
                    }),
                }
            };
            Ok(ObservedCondition {
                type_: field("type")?,
                status: field("status")?,
                reason: field("reason")?,
                message: field("message")?,
            })
        })
        .collect()
}

/// Group of an `apiVersion` (`""` for the core group).
pub fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counters_fall_back_on_anything_but_integers() {
        let obj = json!({"spec": {"a": 3, "b": "3", "c": 3.5, "d": null}});
        assert_eq!(int_or(&obj, &["spec", "a"], 1), 3);
        for field in ["b", "c", "d", "missing"] {
            assert_eq!(int_or(&obj, &["spec", field], 1), 1, "{field}");
        }
    }

    #[test]
    fn strict_lookups_report_the_field() {
        let obj = json!({"metadata": {"generation": "2"}, "status": "broken"});
        let err = strict_int(&obj, &["metadata", "generation"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "metadata.generation: expected an integer, found string \"2\""
        );
        let err = strict_int(&obj, &["status", "observedGeneration"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "status: expected a map, found string \"broken\""
        );
        assert_eq!(
            strict_int(&json!({"status": null}), &["status", "observedGeneration"]),
            Ok(None)
        );
    }

    #[test]
    fn condition_decoding() {
        let ok = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": null}]}});
        assert_eq!(conditions(&ok).unwrap()[0].type_, "Ready");
        for (bad, field) in [
            (json!({"status": []}), "status"),
            (json!({"status": {"conditions": {}}}), "status.conditions"),
            (
                json!({"status": {"conditions": ["x"]}}),
                "status.conditions[0]",
            ),
            (
                json!({"status": {"conditions": [{"type": "Ready", "status": true}]}}),
                "status.conditions[0].status",
            ),
        ] {
            match conditions(&bad) {
                Err(StatusError::FieldType { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(conditions(&json!({"status": null})).unwrap().is_empty());
    }
}

/// The top-level parts of an object, found in one pass over its root, so that rules read
/// `spec.replicas` without walking from the root again (the dominant cost on large sets).
#[derive(Clone, Copy, Debug)]
pub struct Parts<'a> {
    pub object: &'a Value,
    pub api_version: &'a str,
    pub kind: &'a str,
    pub metadata: &'a Value,
    pub spec: &'a Value,
    pub status: &'a Value,
}

static NULL: Value = Value::Null;

impl<'a> Parts<'a> {
    pub fn new(object: &'a Value) -> Self {
        let mut parts = Parts {
            object,
            api_version: "",
            kind: "",
            metadata: &NULL,
            spec: &NULL,
            status: &NULL,
        };
        if let Value::Object(map) = object {
            for (key, value) in map {
                match key.as_str() {
                    "apiVersion" => parts.api_version = value.as_str().unwrap_or(""),
                    "kind" => parts.kind = value.as_str().unwrap_or(""),
                    "metadata" => parts.metadata = value,
                    "spec" => parts.spec = value,
                    "status" => parts.status = value,
                    _ => {}
                }
            }
        }
        parts
    }
}

/// A counter the rules read leniently (anything but an integer falls back to a default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    SpecReplicas,
    ProgressDeadlineSeconds,
    Parallelism,
    Completions,
    Partition,
    Replicas,
    UpdatedReplicas,
    ReadyReplicas,
    AvailableReplicas,
    CurrentReplicas,
    DesiredNumberScheduled,
    CurrentNumberScheduled,
    UpdatedNumberScheduled,
    NumberAvailable,
    NumberReady,
    FullyLabeledReplicas,
    Succeeded,
    Active,
    Failed,
    /// A Job's `status.ready` (pods ready).
    Ready,
}

impl Counter {
    pub const COUNT: usize = 20;

    /// Whether the counter lives under `spec` (else under `status`), and its path there.
    pub fn path(self) -> (bool, &'static [&'static str]) {
        use Counter::*;
        match self {
            SpecReplicas => (true, &["replicas"]),
            ProgressDeadlineSeconds => (true, &["progressDeadlineSeconds"]),
            Parallelism => (true, &["parallelism"]),
            Completions => (true, &["completions"]),
            Partition => (true, &["updateStrategy", "rollingUpdate", "partition"]),
            Replicas => (false, &["replicas"]),
            UpdatedReplicas => (false, &["updatedReplicas"]),
            ReadyReplicas => (false, &["readyReplicas"]),
            AvailableReplicas => (false, &["availableReplicas"]),
            CurrentReplicas => (false, &["currentReplicas"]),
            DesiredNumberScheduled => (false, &["desiredNumberScheduled"]),
            CurrentNumberScheduled => (false, &["currentNumberScheduled"]),
            UpdatedNumberScheduled => (false, &["updatedNumberScheduled"]),
            NumberAvailable => (false, &["numberAvailable"]),
            NumberReady => (false, &["numberReady"]),
            FullyLabeledReplicas => (false, &["fullyLabeledReplicas"]),
            Succeeded => (false, &["succeeded"]),
            Active => (false, &["active"]),
            Failed => (false, &["failed"]),
            Ready => (false, &["ready"]),
        }
    }
}

/// A string the rules read leniently (anything but a string falls back to a default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Text {
    CreationTimestamp,
    UpdateStrategyType,
    ServiceType,
    ClusterIp,
    Phase,
    CurrentRevision,
    UpdateRevision,
    StartTime,
}

impl Text {
    pub const COUNT: usize = 8;

    /// The top-level part the text lives in, and its path there.
    pub fn path(self) -> (&'static str, &'static [&'static str]) {
        use Text::*;
        match self {
            CreationTimestamp => ("metadata", &["creationTimestamp"]),
            UpdateStrategyType => ("spec", &["updateStrategy", "type"]),
            ServiceType => ("spec", &["type"]),
            ClusterIp => ("spec", &["clusterIP"]),
            Phase => ("status", &["phase"]),
            CurrentRevision => ("status", &["currentRevision"]),
            UpdateRevision => ("status", &["updateRevision"]),
            StartTime => ("status", &["startTime"]),
        }
    }
}

/// Every field kstatus' rules read, with its strictness. Two representations implement it:
/// [`Parts`] over a full decoded object, and [`crate::compact::Compact`], which holds only
/// these fields; one copy of the rules serves both.
pub trait Fields {
    fn api_version(&self) -> &str;
    fn kind(&self) -> &str;
    /// `metadata.deletionTimestamp` (strict).
    fn deletion_timestamp(&self) -> Result<Option<&str>, StatusError>;
    /// `metadata.generation` (strict).
    fn generation(&self) -> Result<Option<i64>, StatusError>;
    /// `status.observedGeneration` (strict).
    fn observed_generation(&self) -> Result<Option<i64>, StatusError>;
    /// `status.conditions` (strict).
    fn conditions(&self) -> Result<Vec<ObservedCondition<'_>>, StatusError>;
    fn counter(&self, counter: Counter) -> Option<i64>;
    fn text(&self, text: Text) -> Option<&str>;
    /// `spec.suspend` is `true`.
    fn suspended(&self) -> bool;
    /// Names of containers waiting in CrashLoopBackOff (only `status.containerStatuses`).
    fn crash_looping(&self) -> Vec<&str>;
}

impl Fields for Parts<'_> {
    fn api_version(&self) -> &str {
        self.api_version
    }

    fn kind(&self) -> &str {
        self.kind
    }

    fn deletion_timestamp(&self) -> Result<Option<&str>, StatusError> {
        strict_str_in(self.metadata, "metadata", "deletionTimestamp")
    }

    fn generation(&self) -> Result<Option<i64>, StatusError> {
        strict_int_in(self.metadata, "metadata", "generation")
    }

    fn observed_generation(&self) -> Result<Option<i64>, StatusError> {
        strict_int_in(self.status, "status", "observedGeneration")
    }

    fn conditions(&self) -> Result<Vec<ObservedCondition<'_>>, StatusError> {
        conditions_in(self.status)
    }

    fn counter(&self, counter: Counter) -> Option<i64> {
        let (in_spec, path) = counter.path();
        let part = if in_spec { self.spec } else { self.status };
        lookup(part, path).and_then(Value::as_i64)
    }

    fn text(&self, text: Text) -> Option<&str> {
        let (part, path) = text.path();
        let part = match part {
            "metadata" => self.metadata,
            "spec" => self.spec,
            _ => self.status,
        };
        lookup(part, path).and_then(Value::as_str)
    }

    fn suspended(&self) -> bool {
        lookup(self.spec, &["suspend"]).and_then(Value::as_bool) == Some(true)
    }

    fn crash_looping(&self) -> Vec<&str> {
        lookup(self.status, &["containerStatuses"])
            .and_then(Value::as_array)
            .map(|statuses| {
                statuses
                    .iter()
                    .filter(|cs| {
                        str_or(cs, &["state", "waiting", "reason"], "") == "CrashLoopBackOff"
                    })
                    .filter_map(|cs| cs.get("name").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default()
    }
}
