//! How values are prepared and shown: a Secret's `stringData` folded as the API server stores
//! it, secret values masked, values rendered for people.

use std::borrow::Cow;

use serde_json::Value;

use crate::fields::{FieldPath, Segment};

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
    use crate::compare::test_support::path;
    use serde_json::json;

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
