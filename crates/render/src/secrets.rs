//! Secret safety: a literal secret value is never written. A rendered Secret with literal
//! `data`/`stringData` stops the render, naming the file and key; an argocd-vault-plugin
//! placeholder (`<path:...#key>`) passes through, since the plugin resolves it in the cluster.
//! Values that merely look secret (key name, randomness) get a warning, never their value.

use base64::Engine as _;
use serde_json::Value;

use crate::course::values_strings;
use crate::error::{RenderError, Result};
use crate::split::{group_of, kind_of};

/// True when `value` holds an argocd-vault-plugin path placeholder, `<path:PATH#KEY[#VERSION]>`.
pub fn is_placeholder(value: &str) -> bool {
    let mut rest = value;
    while let Some(start) = rest.find("<path:") {
        let after = &rest[start + "<path:".len()..];
        if let Some(end) = after.find('>') {
            let inner = &after[..end];
            if let Some((path, key)) = inner.split_once('#')
                && !path.is_empty()
                && !key.is_empty()
                && !inner.contains('<')
            {
                return true;
            }
        }
        rest = after;
    }
    false
}

/// Refuses a Secret whose `data` or `stringData` holds a literal value. `file` is the output
/// path named in the error.
pub fn check_rendered(file: &str, object: &Value) -> Result<()> {
    if kind_of(object) != "Secret" || !group_of(object).is_empty() {
        return Ok(());
    }
    let refuse = |key: String| RenderError::Secret {
        file: file.to_string(),
        key,
        message: "literal secret value would be written to git; pass an argocd-vault-plugin \
                  placeholder <path:...#key> or point the chart at an existing Secret"
            .into(),
    };
    if let Some(data) = object.get("data").and_then(Value::as_object) {
        for (key, value) in data {
            let Some(text) = value.as_str().filter(|t| !t.is_empty()) else {
                continue;
            };
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok());
            let placeholder =
                is_placeholder(text) || decoded.as_deref().is_some_and(is_placeholder);
            let empty = decoded.as_deref() == Some("");
            if !placeholder && !empty {
                return Err(refuse(format!("data.{key}")));
            }
        }
    }
    if let Some(data) = object.get("stringData").and_then(Value::as_object) {
        for (key, value) in data {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            if !text.is_empty() && !is_placeholder(&text) {
                return Err(refuse(format!("stringData.{key}")));
            }
        }
    }
    Ok(())
}

/// A key name that usually holds a secret.
pub fn secret_key_name(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace(['-', '_'], "");
    [
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "privatekey",
        "credential",
        "accesskey",
        "clientsecret",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// Shannon entropy in bits per character.
pub fn entropy(text: &str) -> f64 {
    let mut counts = std::collections::BTreeMap::new();
    let mut total = 0usize;
    for c in text.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        total += 1;
    }
    if total == 0 {
        return 0.0;
    }
    counts
        .values()
        .map(|&n| {
            let p = n as f64 / total as f64;
            -p * p.log2()
        })
        .sum()
}

/// A long token of mixed letters and digits with high entropy (API keys, passwords).
pub fn looks_random(value: &str) -> bool {
    value.len() >= 20
        && !value.chars().any(char::is_whitespace)
        && !value.contains("://")
        && value.chars().any(|c| c.is_ascii_uppercase())
        && value.chars().any(|c| c.is_ascii_lowercase())
        && value.chars().any(|c| c.is_ascii_digit())
        && entropy(value) >= 4.0
}

/// Warnings for course values that look like secrets. The value itself is never printed.
pub fn value_warnings(file: &str, prefix: &str, values: Option<&Value>) -> Vec<String> {
    values_strings(values, prefix)
        .into_iter()
        .filter_map(|(path, value)| {
            let last = path.rsplit('.').next().unwrap_or(&path);
            if value.is_empty() || is_placeholder(&value) || value.contains("${") {
                None
            } else if secret_key_name(last) {
                Some(format!(
                    "{file}: {path}: looks like a secret (key name) and is not a <path:...#key> placeholder"
                ))
            } else if looks_random(&value) {
                Some(format!(
                    "{file}: {path}: looks like a secret (random-looking value) and is not a <path:...#key> placeholder"
                ))
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders() {
        let cases = [
            ("<path:secret/data/db#password>", true),
            ("<path:secret/data/db#password#2>", true),
            ("user-<path:kv/app#user>", true),
            ("<path:secret/data/db>", false),
            ("<path:#key>", false),
            ("password", false),
            ("<db#password>", false),
        ];
        for (value, want) in cases {
            assert_eq!(is_placeholder(value), want, "{value}");
        }
    }

    #[test]
    fn rendered_secrets() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let cases = [
            (
                "literal data",
                json!({"apiVersion": "v1", "kind": "Secret", "data": {"password": b64("hunter2")}}),
                Some("data.password"),
            ),
            (
                "literal stringData",
                json!({"apiVersion": "v1", "kind": "Secret", "stringData": {"token": "abc"}}),
                Some("stringData.token"),
            ),
            (
                "placeholder in stringData",
                json!({"apiVersion": "v1", "kind": "Secret", "stringData": {"token": "<path:kv/app#token>"}}),
                None,
            ),
            (
                "placeholder in data, raw",
                json!({"apiVersion": "v1", "kind": "Secret", "data": {"token": "<path:kv/app#token>"}}),
                None,
            ),
            (
                "placeholder in data, base64",
                json!({"apiVersion": "v1", "kind": "Secret", "data": {"token": b64("<path:kv/app#token>")}}),
                None,
            ),
            (
                "empty values",
                json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": ""}, "stringData": {"b": ""}}),
                None,
            ),
            (
                "no data",
                json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls"}),
                None,
            ),
            (
                "not a core Secret",
                json!({"apiVersion": "example.com/v1", "kind": "Secret", "data": {"a": "b"}}),
                None,
            ),
            (
                "a ConfigMap",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"password": "x"}}),
                None,
            ),
        ];
        for (name, object, want) in cases {
            match (check_rendered("out/secret_x.yaml", &object), want) {
                (Ok(()), None) => {}
                (Err(e), Some(key)) => {
                    assert!(
                        e.to_string()
                            .starts_with(&format!("out/secret_x.yaml: {key}: literal")),
                        "{name}: {e}"
                    );
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn warnings_never_show_the_value() {
        let values = json!({
            "db": {"password": "hunter2", "host": "db"},
            "apiToken": "<path:kv/app#token>",
            "key": "AKIAxY3k9QzP7mW2vN5tR8sL",
            "image": "registry.invalid/team/app:1.2.3",
            "env": "${FROM_ENV}",
        });
        let warnings = value_warnings("course.yaml", "releases[a].values", Some(&values));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("releases[a].values.db.password: looks like a secret (key name)")
        );
        assert!(
            warnings[1]
                .contains("releases[a].values.key: looks like a secret (random-looking value)")
        );
        assert!(
            warnings
                .iter()
                .all(|w| !w.contains("hunter2") && !w.contains("AKIA"))
        );
    }
}
