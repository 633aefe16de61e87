//! Post-build variable substitution, with Flux's syntax and rules (`spec.postBuild` of a
//! Kustomization), so a Flux user's manifests and variables carry across unchanged:
//!
//! - `${NAME}` is the variable's value; with no such variable it is an error (Flux's strict
//!   mode, its default since it made it a feature gate turned on);
//! - `${NAME:=default}` and `${NAME:-default}` take the default when the variable is unset or
//!   empty, `${NAME=default}` only when it is unset; a default may itself hold `${OTHER}`;
//! - `$$` is one literal `$`, so `$${NAME}` stays `${NAME}`;
//! - a `$` not followed by `{` is text (`$NAME` is never substituted);
//! - names match `[_A-Za-z][_A-Za-z0-9]*`; values lose their line breaks;
//! - an object labelled or annotated `kustomize.toolkit.fluxcd.io/substitute: disabled` is
//!   left alone, and a layer with no variables at all substitutes nothing.
//!
//! Substitution works on an object's YAML (as Flux does after its build, so comments of the
//! source file never count), which is parsed again: a value that makes the YAML invalid is an
//! error naming the object.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::crd::AddonsLayer;
use crate::error::LayerError;
use crate::objects::SourceRef;

/// The opt-out key, as a label or an annotation, with the value `disabled`.
pub const OPT_OUT_KEY: &str = "kustomize.toolkit.fluxcd.io/substitute";

/// Why a text could not be substituted; `Display` says where in the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubstituteError {
    #[error("variable {0:?} is not set and has no default")]
    Unset(String),
    #[error("invalid variable name {0:?}: names match [_A-Za-z][_A-Za-z0-9]*")]
    InvalidName(String),
    #[error("missing closing brace after {0:?}")]
    Unclosed(String),
    #[error(
        "unsupported expression {0:?}: Strata substitutes ${{NAME}}, ${{NAME:=default}}, ${{NAME:-default}} and ${{NAME=default}}"
    )]
    Unsupported(String),
}

/// Whether `name` may name a variable.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// A variable's value as it is substituted: without line breaks.
pub fn clean_value(value: &str) -> String {
    value.replace('\n', "")
}

/// Substitutes every expression of `text` from `vars`.
pub fn expand(text: &str, vars: &BTreeMap<String, String>) -> Result<String, SubstituteError> {
    let chars: Vec<char> = text.chars().collect();
    let mut pos = 0;
    let (out, _) = expand_until(&chars, &mut pos, vars, false)?;
    Ok(out)
}

/// Expands from `pos` to the end, or (in a default) to the unmatched `}`, which is consumed;
/// says whether that `}` was found.
fn expand_until(
    chars: &[char],
    pos: &mut usize,
    vars: &BTreeMap<String, String>,
    in_default: bool,
) -> Result<(String, bool), SubstituteError> {
    let mut out = String::new();
    while *pos < chars.len() {
        let c = chars[*pos];
        match (c, chars.get(*pos + 1)) {
            ('$', Some('$')) => {
                out.push('$');
                *pos += 2;
                // The character after an escaped `$` is text, even a `{`.
                if let Some(next) = chars.get(*pos) {
                    out.push(*next);
                    *pos += 1;
                }
            }
            ('$', Some('{')) => {
                *pos += 2;
                out.push_str(&expression(chars, pos, vars)?);
            }
            ('}', _) if in_default => {
                *pos += 1;
                return Ok((out, true));
            }
            _ => {
                out.push(c);
                *pos += 1;
            }
        }
    }
    Ok((out, false))
}

/// One `${…}` whose `${` has been read.
fn expression(
    chars: &[char],
    pos: &mut usize,
    vars: &BTreeMap<String, String>,
) -> Result<String, SubstituteError> {
    let start = *pos;
    while *pos < chars.len() && (chars[*pos] == '_' || chars[*pos].is_ascii_alphanumeric()) {
        *pos += 1;
    }
    let name: String = chars[start..*pos].iter().collect();
    let shown = |until: usize| -> String {
        format!(
            "${{{}",
            chars[start..until.min(chars.len())]
                .iter()
                .collect::<String>()
        )
    };
    if name.is_empty() {
        return match chars.get(*pos) {
            Some('#') => Err(SubstituteError::Unsupported(shown(*pos + 1))),
            _ => Err(SubstituteError::InvalidName(shown(*pos + 1))),
        };
    }
    if !valid_name(&name) {
        return Err(SubstituteError::InvalidName(name));
    }
    let value = vars.get(&name);
    let rest: String = chars[*pos..chars.len().min(*pos + 2)].iter().collect();
    // A default operator: whether it also applies to an empty value, and its length.
    let operator = if rest.starts_with(":=") || rest.starts_with(":-") {
        Some((true, 2))
    } else if rest.starts_with('=') {
        Some((false, 1))
    } else {
        None
    };
    if let Some((or_empty, length)) = operator {
        *pos += length;
        let (default, closed) = expand_until(chars, pos, vars, true)?;
        if !closed {
            return Err(SubstituteError::Unclosed(shown(*pos)));
        }
        return Ok(match value {
            Some(v) if !(or_empty && v.is_empty()) => v.clone(),
            _ => default,
        });
    }
    match chars.get(*pos) {
        Some('}') => {
            *pos += 1;
            value.cloned().ok_or(SubstituteError::Unset(name))
        }
        None => Err(SubstituteError::Unclosed(shown(*pos))),
        Some(_) => Err(SubstituteError::Unsupported(shown(closing(chars, *pos)))),
    }
}

/// Where the expression that continues at `pos` ends (after its `}`), for messages.
fn closing(chars: &[char], pos: usize) -> usize {
    chars[pos..]
        .iter()
        .position(|c| *c == '}')
        .map_or(chars.len(), |i| pos + i + 1)
}

/// Whether an object opted out of substitution.
pub fn opted_out(object: &Value) -> bool {
    ["labels", "annotations"].iter().any(|field| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(|m| m.get(OPT_OUT_KEY))
            .and_then(Value::as_str)
            == Some("disabled")
    })
}

/// Substitutes `vars` into one object, key and string by key and string. `Ok(None)`: nothing
/// to do (no variables, or the object opted out). A string YAML would write unquoted is read
/// again as YAML once substituted, as Flux's substitution into the object's YAML text does:
/// `replicas: ${REPLICAS}` with `REPLICAS=3` is the number 3, `${FLAG}` with `true` a
/// boolean. The error says what went wrong, for the caller to prefix with the object's origin.
pub fn substitute_object(
    object: &Value,
    vars: &BTreeMap<String, String>,
) -> Result<Option<Value>, String> {
    if vars.is_empty() || opted_out(object) {
        return Ok(None);
    }
    substitute_value(object, vars, "").map(Some)
}

fn substitute_value(
    value: &Value,
    vars: &BTreeMap<String, String>,
    path: &str,
) -> Result<Value, String> {
    let failed = |e: SubstituteError| {
        if path.is_empty() {
            e.to_string()
        } else {
            format!("{path}: {e}")
        }
    };
    Ok(match value {
        Value::String(text) if text.contains('$') => {
            let expanded = expand(text, vars).map_err(failed)?;
            if written_plain(text) {
                reread(&expanded).map_err(|e| {
                    format!(
                        "{}the substituted value {expanded:?} is not valid YAML: {e}",
                        if path.is_empty() {
                            String::new()
                        } else {
                            format!("{path}: ")
                        }
                    )
                })?
            } else {
                Value::String(expanded)
            }
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| substitute_value(item, vars, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (key, item) in map {
                let key = if key.contains('$') {
                    expand(key, vars).map_err(failed)?
                } else {
                    key.clone()
                };
                let here = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let item = substitute_value(item, vars, &here)?;
                out.insert(key, item);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

/// Whether YAML would write `text` as a plain (unquoted) scalar: it reads back as itself.
fn written_plain(text: &str) -> bool {
    !text.contains('\n') && reread(text).is_ok_and(|v| v == Value::String(text.to_string()))
}

/// `text` read as one YAML value (empty: null).
fn reread(text: &str) -> Result<Value, String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| e.to_string())?;
    match docs.as_slice() {
        [] => Ok(Value::Null),
        [one] => Ok(one.clone()),
        _ => Err("it holds more than one YAML document".into()),
    }
}

/// The variables of a layer (`spec.postBuild`), as Flux merges them: every `substituteFrom`
/// ConfigMap's data and Secret's decoded data in list order (a later one wins), then
/// `substitute` over all of them. The objects are read in the layer's source namespace with
/// `client` (the layer's own access, so a layer reads only what its account may). A missing
/// object fails the layer unless marked `optional`; an invalid variable name fails it too.
/// Empty: the layer substitutes nothing.
pub async fn layer_variables(
    client: &kube::Client,
    layer: &AddonsLayer,
    default_namespace: &str,
) -> Result<BTreeMap<String, String>, LayerError> {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let Some(post_build) = &layer.spec.post_build else {
        return Ok(BTreeMap::new());
    };
    let namespace = SourceRef::of(layer, default_namespace).namespace;
    let mut vars = BTreeMap::new();
    let add = |vars: &mut BTreeMap<String, String>, from: &str, key: &str, value: &str| {
        if !valid_name(key) {
            return Err(LayerError::Substitution(format!(
                "{from}: variable name {key:?} is invalid: names match [_A-Za-z][_A-Za-z0-9]*"
            )));
        }
        vars.insert(key.to_string(), clean_value(value));
        Ok(())
    };
    for (i, reference) in post_build.substitute_from.iter().enumerate() {
        let from = format!(
            "spec.postBuild.substituteFrom[{i}] ({} {namespace}/{})",
            reference.kind, reference.name
        );
        let missing = || {
            LayerError::Substitution(format!(
                "{from} does not exist (mark it optional: true if it may be missing)"
            ))
        };
        let read = |e: kube::Error| LayerError::api(format!("reading {from}"), e);
        match reference.kind.as_str() {
            "ConfigMap" => {
                let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), &namespace);
                match api.get_opt(&reference.name).await.map_err(read)? {
                    Some(found) => {
                        for (key, value) in found.data.unwrap_or_default() {
                            add(&mut vars, &from, &key, &value)?;
                        }
                    }
                    None if reference.optional => {}
                    None => return Err(missing()),
                }
            }
            "Secret" => {
                let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &namespace);
                match api.get_opt(&reference.name).await.map_err(read)? {
                    Some(found) => {
                        for (key, value) in found.data.unwrap_or_default() {
                            let text = String::from_utf8(value.0).map_err(|_| {
                                LayerError::Substitution(format!(
                                    "{from}: the value of {key:?} is not UTF-8 text"
                                ))
                            })?;
                            add(&mut vars, &from, &key, &text)?;
                        }
                        for (key, value) in found.string_data.unwrap_or_default() {
                            add(&mut vars, &from, &key, &value)?;
                        }
                    }
                    None if reference.optional => {}
                    None => return Err(missing()),
                }
            }
            other => {
                return Err(LayerError::Substitution(format!(
                    "spec.postBuild.substituteFrom[{i}].kind {other:?} is not ConfigMap or Secret"
                )));
            }
        }
    }
    for (key, value) in &post_build.substitute {
        add(&mut vars, "spec.postBuild.substitute", key, value)?;
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expressions_as_flux_documents_them() {
        let set = vars(&[("APP", "podinfo"), ("EMPTY", ""), ("B", "b")]);
        for (text, want) in [
            ("${APP}", "podinfo"),
            ("name: ${APP}-svc", "name: podinfo-svc"),
            ("${APP}${APP}", "podinfopodinfo"),
            // Defaults: `:=`/`:-` when unset or empty, `=` only when unset.
            ("${MISSING:=d}", "d"),
            ("${EMPTY:=d}", "d"),
            ("${APP:=d}", "podinfo"),
            ("${MISSING:-d}", "d"),
            ("${EMPTY:-d}", "d"),
            ("${MISSING=d}", "d"),
            ("${EMPTY=d}", ""),
            ("${MISSING:=}", ""),
            // A default may hold text and other variables.
            ("${MISSING:=pre-${B}-post}", "pre-b-post"),
            ("${MISSING:=${OTHER:=deep}}", "deep"),
            // Escapes and plain dollars.
            ("$${APP}", "${APP}"),
            ("cost: $$5", "cost: $5"),
            ("$APP", "$APP"),
            ("a$b", "a$b"),
            ("trailing $", "trailing $"),
            ("", ""),
        ] {
            assert_eq!(expand(text, &set).as_deref(), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_expressions_are_refused_with_what_is_wrong() {
        let set = vars(&[("APP", "podinfo")]);
        for (text, want) in [
            ("${MISSING}", SubstituteError::Unset("MISSING".into())),
            ("x ${EMPTYISH} y", SubstituteError::Unset("EMPTYISH".into())),
            ("${1APP}", SubstituteError::InvalidName("1APP".into())),
            ("${}", SubstituteError::InvalidName("${}".into())),
            ("${APP", SubstituteError::Unclosed("${APP".into())),
            ("${APP:=d", SubstituteError::Unclosed("${APP:=d".into())),
            ("${#APP}", SubstituteError::Unsupported("${#".into())),
            ("${APP^^}", SubstituteError::Unsupported("${APP^^}".into())),
            (
                "${APP:1:2}",
                SubstituteError::Unsupported("${APP:1:2}".into()),
            ),
            ("${APP-d}", SubstituteError::Unsupported("${APP-d}".into())),
        ] {
            assert_eq!(expand(text, &set), Err(want), "{text}");
        }
        assert!(
            SubstituteError::Unset("X".into())
                .to_string()
                .contains("\"X\" is not set")
        );
    }

    #[test]
    fn names_follow_flux() {
        for (name, ok) in [
            ("APP", true),
            ("_x1", true),
            ("app_name", true),
            ("1APP", false),
            ("A-B", false),
            ("", false),
            ("A.B", false),
        ] {
            assert_eq!(valid_name(name), ok, "{name}");
        }
        assert_eq!(clean_value("a\nb\n"), "ab");
    }

    #[test]
    fn objects_are_substituted_with_yaml_types() {
        let set = vars(&[
            ("APP", "podinfo"),
            ("REPLICAS", "3"),
            ("ON", "true"),
            ("NONE", ""),
        ]);
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "${APP}", "labels": {"app.kubernetes.io/${APP}": "x"}},
            "spec": {
                "replicas": "${REPLICAS}",
                "paused": "${ON}",
                "revisionHistoryLimit": "${NONE}",
                "template": {"metadata": {"annotations": {
                    "quoted": "123 ${REPLICAS}",
                    "number-looking": "10",
                    "script": "echo ${APP}\necho $$HOME",
                }}},
                "args": ["--name=${APP}", 7],
            },
        });
        let got = substitute_object(&object, &set).unwrap().unwrap();
        assert_eq!(
            got,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "podinfo", "labels": {"app.kubernetes.io/podinfo": "x"}},
                "spec": {
                    "replicas": 3,
                    "paused": true,
                    "revisionHistoryLimit": null,
                    "template": {"metadata": {"annotations": {
                        "quoted": "123 3",
                        "number-looking": "10",
                        "script": "echo podinfo\necho $HOME",
                    }}},
                    "args": ["--name=podinfo", 7],
                },
            })
        );
    }

    #[test]
    fn opted_out_objects_and_layers_without_variables_are_left_alone() {
        let set = vars(&[("APP", "podinfo")]);
        let annotated =
            json!({"metadata": {"name": "${APP}", "annotations": {OPT_OUT_KEY: "disabled"}}});
        let labelled = json!({"metadata": {"name": "${APP}", "labels": {OPT_OUT_KEY: "disabled"}}});
        assert_eq!(substitute_object(&annotated, &set), Ok(None));
        assert_eq!(substitute_object(&labelled, &set), Ok(None));
        let plain = json!({"metadata": {"name": "${MISSING}"}});
        assert_eq!(substitute_object(&plain, &BTreeMap::new()), Ok(None));
        // Another value of the key does not opt out.
        let enabled =
            json!({"metadata": {"name": "${APP}", "annotations": {OPT_OUT_KEY: "enabled"}}});
        assert_eq!(
            substitute_object(&enabled, &set).unwrap().unwrap()["metadata"]["name"],
            "podinfo"
        );
    }

    #[test]
    fn errors_name_the_field_and_the_variable() {
        let set = vars(&[("BAD", "a: b: c")]);
        let object = json!({"metadata": {"name": "x"}, "data": {"key": "${MISSING}"}});
        let err = substitute_object(&object, &set).unwrap_err();
        assert_eq!(
            err,
            "data.key: variable \"MISSING\" is not set and has no default"
        );
        let object = json!({"spec": {"list": ["ok", "${BAD}"]}});
        let err = substitute_object(&object, &set).unwrap_err();
        assert!(
            err.starts_with("spec.list[1]: the substituted value \"a: b: c\" is not valid YAML"),
            "{err}"
        );
    }
}
