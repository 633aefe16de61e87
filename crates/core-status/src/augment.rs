//! Merging the computed standard conditions into an object's `status.conditions`.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::compute::compute;
use crate::error::{StatusError, type_name};

/// What to do with a Reconciling/Stalled condition the computation no longer produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Stale {
    /// Leave it as it is — kstatus' behaviour.
    #[default]
    Keep,
    /// Set it to `False` (transition time updated once), so a reader never sees a stale
    /// `Reconciling=True` next to a Current object. What Strata's own controllers use.
    SetFalse,
}

/// RFC 3339 in UTC with second precision, as the API server writes times.
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Computes the status of `object` and merges its conditions into `status.conditions`:
/// existing conditions keep their order; a computed type that exists is updated in place
/// (`lastTransitionTime` changes only when its status changes); a new one is appended.
pub fn augment(object: &Value, now: Timestamp, stale: Stale) -> Result<Value, StatusError> {
    let evaluation = compute(object, now)?;
    let mut out = object.clone();
    let root = out.as_object_mut().ok_or_else(|| StatusError::FieldType {
        field: "<root>".into(),
        expected: "a map",
        found: type_name(object),
    })?;
    let status = root
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if status.is_null() {
        *status = Value::Object(Map::new());
    }
    let status = status
        .as_object_mut()
        .ok_or_else(|| StatusError::FieldType {
            field: "status".into(),
            expected: "a map",
            found: "another type".into(),
        })?;
    let list = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if list.is_null() {
        *list = Value::Array(Vec::new());
    }
    let list = list.as_array_mut().ok_or_else(|| StatusError::FieldType {
        field: "status.conditions".into(),
        expected: "a list",
        found: "another type".into(),
    })?;
    let now_text = format_time(now);

    for (i, entry) in list.iter().enumerate() {
        let entry = entry.as_object().ok_or_else(|| StatusError::FieldType {
            field: format!("status.conditions[{i}]"),
            expected: "a map",
            found: type_name(entry),
        })?;
        for key in ["type", "status"] {
            if let Some(v) = entry.get(key).filter(|v| !v.is_string()) {
                return Err(StatusError::FieldType {
                    field: format!("status.conditions[{i}].{key}"),
                    expected: "a string",
                    found: type_name(v),
                });
            }
        }
    }

    let set = |entry: &mut Map<String, Value>, status: &str, reason: &str, message: &str| {
        let changed = entry.get("status").and_then(Value::as_str) != Some(status);
        entry.insert("status".into(), status.into());
        entry.insert("reason".into(), reason.into());
        entry.insert("message".into(), message.into());
        entry.insert("lastUpdateTime".into(), now_text.clone().into());
        if changed {
            entry.insert("lastTransitionTime".into(), now_text.clone().into());
        }
    };

    for computed in &evaluation.conditions {
        let type_ = computed.type_.as_str();
        match list
            .iter_mut()
            .filter_map(Value::as_object_mut)
            .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        {
            Some(entry) => set(entry, "True", &computed.reason, &computed.message),
            None => list.push(json!({
                "type": type_,
                "status": "True",
                "reason": computed.reason,
                "message": computed.message,
                "lastTransitionTime": now_text,
                "lastUpdateTime": now_text,
            })),
        }
    }
    if stale == Stale::SetFalse {
        for type_ in ["Reconciling", "Stalled"] {
            if evaluation
                .conditions
                .iter()
                .any(|c| c.type_.as_str() == type_)
            {
                continue;
            }
            for entry in list.iter_mut().filter_map(Value::as_object_mut) {
                if entry.get("type").and_then(Value::as_str) == Some(type_)
                    && entry.get("status").and_then(Value::as_str) == Some("True")
                {
                    set(entry, "False", "Reconciled", &evaluation.message);
                }
            }
        }
    }
    Ok(out)
}
