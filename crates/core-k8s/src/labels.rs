//! Label selectors in the API server's text form (`a=b,c!=d,e in (f,g),!h`), parsed once at
//! start-up so a bad `--layer-selector` is refused with the requirement named, and matched
//! locally: a controller that watches a subset of objects can tell whether an object it read
//! directly (a dependency, its own latest copy) is still one of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    /// `key=value`, `key==value`, `key in (v1,v2)`.
    In(String, BTreeSet<String>),
    /// `key!=value`, `key notin (v1,v2)`: also true when the key is absent.
    NotIn(String, BTreeSet<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

/// A parsed label selector; every requirement must hold. The empty selector matches all.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LabelSelector {
    text: String,
    requirements: Vec<Requirement>,
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn valid_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && (prefix.is_empty()
            || prefix.len() > 253
            || !prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'))
    {
        return Err(format!(
            "label key {key:?}: the prefix must be a DNS subdomain"
        ));
    }
    valid_name(name).map_err(|why| format!("label key {key:?}: {why}"))
}

/// A label value, or the name part of a key: at most 63 characters, alphanumerics with `-`,
/// `_` and `.` inside.
fn valid_name(name: &str) -> Result<(), String> {
    if name.len() > 63 {
        return Err("longer than 63 characters".into());
    }
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let edge = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    if !name.chars().all(inner) || !edge(name.chars().next()) || !edge(name.chars().last()) {
        return Err(
            "must be alphanumerics, '-', '_' or '.', starting and ending alphanumeric".into(),
        );
    }
    Ok(())
}

fn valid_value(value: &str) -> Result<(), String> {
    valid_name(value).map_err(|why| format!("label value {value:?}: {why}"))
}

/// Splits at commas outside parentheses.
fn split_requirements(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced ')'".into());
                }
            }
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn set_requirement(part: &str, op: &str) -> Option<Result<Requirement, String>> {
    let padded = format!(" {op} ");
    let at = part.find(&padded)?;
    let key = part[..at].trim();
    let rest = part[at + padded.len()..].trim();
    let inner = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')'));
    let Some(inner) = inner else {
        return Some(Err(format!("{part:?}: '{op}' needs a list in parentheses")));
    };
    let values: BTreeSet<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if values.is_empty() {
        return Some(Err(format!("{part:?}: '{op}' needs at least one value")));
    }
    Some(
        valid_key(key)
            .and_then(|()| values.iter().try_for_each(|v| valid_value(v)))
            .map(|()| match op {
                "in" => Requirement::In(key.to_string(), values),
                _ => Requirement::NotIn(key.to_string(), values),
            }),
    )
}

fn requirement(part: &str) -> Result<Requirement, String> {
    let part = part.trim();
    if part.is_empty() {
        return Err("an empty requirement (two commas, or a comma at an end)".into());
    }
    for op in ["notin", "in"] {
        if let Some(r) = set_requirement(part, op) {
            return r;
        }
    }
    for (op, negated) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((key, value)) = part.split_once(op) {
            let (key, value) = (key.trim(), value.trim());
            valid_key(key)?;
            if !value.is_empty() {
                valid_value(value)?;
            }
            let values = BTreeSet::from([value.to_string()]);
            return Ok(if negated {
                Requirement::NotIn(key.to_string(), values)
            } else {
                Requirement::In(key.to_string(), values)
            });
        }
    }
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        valid_key(key)?;
        return Ok(Requirement::DoesNotExist(key.to_string()));
    }
    valid_key(part)?;
    Ok(Requirement::Exists(part.to_string()))
}

impl LabelSelector {
    /// Parses the API server's text form; the error names the requirement at fault.
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Ok(Self::default());
        }
        let requirements = split_requirements(trimmed)?
            .into_iter()
            .map(requirement)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            text: trimmed.to_string(),
            requirements,
        })
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
        })
    }

    /// The selector as the API server takes it (the `labelSelector` query parameter).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// The watch of the objects a selector flag picks: all of them when it is unset or empty.
pub fn watcher_config(selector: Option<&LabelSelector>) -> kube::runtime::watcher::Config {
    match selector.filter(|s| !s.is_empty()) {
        Some(selector) => kube::runtime::watcher::Config::default().labels(selector.as_str()),
        None => kube::runtime::watcher::Config::default(),
    }
}

/// A clap value parser for selector flags.
pub fn parse_flag(text: &str) -> Result<LabelSelector, String> {
    LabelSelector::parse(text).map_err(|why| format!("label selector {text:?}: {why}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_as_the_api_server_does() {
        let key = "sharding.fluxcd.io/key";
        let a = labels(&[(key, "a")]);
        let b = labels(&[(key, "b"), ("team", "x")]);
        let none = labels(&[("team", "x")]);
        // (selector, matches a, matches b, matches none)
        let cases: [(&str, [bool; 3]); 12] = [
            ("", [true, true, true]),
            ("sharding.fluxcd.io/key=a", [true, false, false]),
            ("sharding.fluxcd.io/key==a", [true, false, false]),
            ("sharding.fluxcd.io/key!=a", [false, true, true]),
            ("!sharding.fluxcd.io/key", [false, false, true]),
            ("sharding.fluxcd.io/key", [true, true, false]),
            ("sharding.fluxcd.io/key in (a, b)", [true, true, false]),
            ("sharding.fluxcd.io/key notin (a)", [false, true, true]),
            ("team=x,sharding.fluxcd.io/key=b", [false, true, false]),
            ("team=x, !sharding.fluxcd.io/key", [false, false, true]),
            ("sharding.fluxcd.io/key in (b),team", [false, true, false]),
            ("team!=x", [true, false, false]),
        ];
        for (text, want) in cases {
            let s = LabelSelector::parse(text).unwrap();
            let got = [s.matches(&a), s.matches(&b), s.matches(&none)];
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn bad_selectors_are_refused_naming_the_requirement() {
        for (text, names) in [
            ("a=b,,c", "empty requirement"),
            ("key in (a", "unbalanced"),
            ("key in a,b", "parentheses"),
            ("key in ()", "at least one value"),
            ("-bad=x", "\"-bad\""),
            ("k=v v", "\"v v\""),
            ("/x=1", "prefix"),
        ] {
            let err = parse_flag(text).unwrap_err();
            assert!(err.contains(names), "{text:?}: {err}");
            assert!(err.contains(text), "{text:?}: {err}");
        }
    }

    #[test]
    fn the_text_form_is_kept_for_the_api_server() {
        let s = LabelSelector::parse(" !sharding.fluxcd.io/key ").unwrap();
        assert_eq!(s.as_str(), "!sharding.fluxcd.io/key");
        assert_eq!(s.to_string(), "!sharding.fluxcd.io/key");
        assert!(LabelSelector::parse("").unwrap().is_empty());
    }
}
