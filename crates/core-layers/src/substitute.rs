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
//! Substitution works on each YAML document's text, as written (Flux substitutes the YAML of
//! each object, which keeps the way its scalars were quoted), then the text is parsed: so
//! `replicas: ${REPLICAS}` with `3` is the number 3 while `release: "${RELEASE}"` stays a
//! string, and a value that makes the YAML invalid fails like any invalid manifest.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::LayerError;

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

/// An error and the character offset, in the text, of the `${` it is about.
pub type Located = (SubstituteError, usize);

/// Substitutes every expression of `text` from `vars`.
pub fn expand(text: &str, vars: &BTreeMap<String, String>) -> Result<String, Located> {
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
) -> Result<(String, bool), Located> {
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
                let at = *pos;
                *pos += 2;
                out.push_str(&expression(chars, pos, vars, at)?);
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

/// One `${…}`, starting at `at`, whose `${` has been read.
fn expression(
    chars: &[char],
    pos: &mut usize,
    vars: &BTreeMap<String, String>,
    at: usize,
) -> Result<String, Located> {
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
        return Err(match chars.get(*pos) {
            Some('#') => (SubstituteError::Unsupported(shown(*pos + 1)), at),
            _ => (SubstituteError::InvalidName(shown(*pos + 1)), at),
        });
    }
    if !valid_name(&name) {
        return Err((SubstituteError::InvalidName(name), at));
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
            return Err((SubstituteError::Unclosed(shown(*pos)), at));
        }
        return Ok(match value {
            Some(v) if !(or_empty && v.is_empty()) => v.clone(),
            _ => default,
        });
    }
    match chars.get(*pos) {
        Some('}') => {
            *pos += 1;
            value.cloned().ok_or((SubstituteError::Unset(name), at))
        }
        None => Err((SubstituteError::Unclosed(shown(*pos)), at)),
        Some(_) => Err((
            SubstituteError::Unsupported(shown(closing(chars, *pos))),
            at,
        )),
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

/// Substitutes `vars` into every document of the manifest file `source` (its `text`), but
/// those whose object opted out; the documents keep their order and indices. With no
/// variables the text is returned as it is. The error names the document and the line of the
/// file (`a.yaml: document 1 (line 9): variable "PORT" is not set and has no default`).
pub fn substitute_file(
    source: &str,
    text: &str,
    vars: &BTreeMap<String, String>,
) -> Result<String, LayerError> {
    if vars.is_empty() || !text.contains('$') {
        return Ok(text.to_string());
    }
    let documents = core_status::input::split_documents(text);
    let mut out = Vec::with_capacity(documents.len());
    // Every line of the file is in one document (a `---` line starts its document's text).
    let mut lines_before = 0;
    for (index, document) in documents.into_iter().enumerate() {
        let first_line = lines_before;
        lines_before += document.matches('\n').count();
        // Parsed only when it names the opt-out key at all; a document that does not parse is
        // left for the parser to report.
        let opted = document.contains(OPT_OUT_KEY)
            && serde_saphyr::from_str::<Value>(&document).is_ok_and(|v| opted_out(&v));
        if opted || !document.contains('$') {
            out.push(document);
            continue;
        }
        let expanded = expand(&document, vars).map_err(|(e, at)| {
            let line = first_line + document.chars().take(at).filter(|c| *c == '\n').count() + 1;
            LayerError::Substitution(format!("{source}: document {index} (line {line}): {e}"))
        })?;
        out.push(expanded);
    }
    Ok(out.join("---\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(expand(text, &set).map_err(|(e, _)| e), Err(want), "{text}");
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
    fn files_are_substituted_document_by_document() {
        let set = vars(&[("APP", "shop"), ("REPLICAS", "3"), ("RELEASE", "7")]);
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: \"${APP}\", labels: {release: \"${RELEASE}\"}}\nspec:\n  replicas: ${REPLICAS}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  annotations: {kustomize.toolkit.fluxcd.io/substitute: disabled}\ndata: {script: \"echo ${UNSET}\"}\n";
        let out = substitute_file("a.yaml", text, &set).unwrap();
        let docs = core_status::input::parse("a.yaml", &out).unwrap();
        assert_eq!(docs.len(), 2);
        // Quoting is kept: the label stays a string, the replica count is a number.
        assert_eq!(docs[0].object["metadata"]["name"], "shop");
        assert_eq!(docs[0].object["metadata"]["labels"]["release"], "7");
        assert_eq!(docs[0].object["spec"]["replicas"], 3);
        // Opted out: left as written.
        assert_eq!(docs[1].index, 1);
        assert_eq!(docs[1].object["data"]["script"], "echo ${UNSET}");
        // No variables: nothing is touched, not even an unset one.
        assert_eq!(
            substitute_file("a.yaml", text, &BTreeMap::new()).unwrap(),
            text
        );
    }

    #[test]
    fn errors_name_the_document_line_and_variable() {
        let set = vars(&[("APP", "shop")]);
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: \"${APP}\"}\nspec:\n  ports:\n  - port: ${PORT}\n";
        let err = substitute_file("l/app.yaml", text, &set)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "substitution: l/app.yaml: document 1 (line 10): variable \"PORT\" is not set and has no default"
        );
        // The position is that of the expression at fault, inside a default too.
        assert_eq!(
            expand("ab\n  ${X:=${Y}}", &BTreeMap::new()).unwrap_err(),
            (SubstituteError::Unset("Y".into()), 10)
        );
    }
}
