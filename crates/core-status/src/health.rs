//! Custom health expressions for kinds kstatus cannot judge, compatible with Flux's
//! `healthCheckExprs`: per GroupKind (or a whole group), CEL expressions `current`
//! (required), `inProgress` and `failed`.
//!
//! Evaluation follows Flux: if `status.observedGeneration` and `metadata.generation` are both
//! integers and differ → InProgress; else `inProgress`, then `failed`, then `current`, the
//! first that is true wins; none true → InProgress. Expressions see the object's top-level
//! fields as variables (`metadata`, `spec`, `status`, ...). A non-boolean result or a missing
//! field is an error (→ Unknown): guard optional fields with `has()`.
//!
//! Beyond Flux: an object with a `deletionTimestamp` is Terminating (Flux ignores it), results
//! carry a reason and a message naming the expression that matched, an object without any
//! `status` sees an empty `status` map (Flux: an undeclared variable, so every expression
//! errors), and an entry for `batch/Job` is honoured (Flux's Job reader shadows it).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::compute::Evaluation;
use crate::error::StatusError;
use crate::object::{Parts, api_group, strict_str_in};

const PACK_FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/pack.rs"));

/// One entry, as written in a Flux Kustomization's `spec.healthCheckExprs`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthCheckExpr {
    /// Only the group is used (`example.com/v1` → `example.com`).
    pub api_version: String,
    /// Absent: every kind of the group.
    #[serde(default)]
    pub kind: Option<String>,
    pub current: String,
    #[serde(default)]
    pub in_progress: Option<String>,
    #[serde(default)]
    pub failed: Option<String>,
}

#[derive(Clone)]
struct Compiled {
    group_kind: String,
    current: (String, Arc<cel::Program>),
    in_progress: Option<(String, Arc<cel::Program>)>,
    failed: Option<(String, Arc<cel::Program>)>,
}

/// One entry's expressions, compiled when first needed: compiling every expression of the
/// built-in pack took longer than judging a 13,000-object dump, and most runs meet none of
/// its kinds. A user's entries are compiled as they are loaded, so a bad one is refused then.
#[derive(Clone, Debug)]
struct Rule {
    entry: Arc<(String, HealthCheckExpr)>,
    compiled: Arc<std::sync::OnceLock<Result<Compiled, StatusError>>>,
}

impl Rule {
    fn lazy(group_kind: String, entry: &HealthCheckExpr) -> Self {
        Rule {
            entry: Arc::new((group_kind, entry.clone())),
            compiled: Arc::default(),
        }
    }

    fn compiled(&self) -> Result<&Compiled, StatusError> {
        self.compiled
            .get_or_init(|| {
                let (group_kind, entry) = &*self.entry;
                Ok(Compiled {
                    current: compile(group_kind, &entry.current)?,
                    in_progress: entry
                        .in_progress
                        .as_deref()
                        .map(|e| compile(group_kind, e))
                        .transpose()?,
                    failed: entry
                        .failed
                        .as_deref()
                        .map(|e| compile(group_kind, e))
                        .transpose()?,
                    group_kind: group_kind.clone(),
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("group_kind", &self.group_kind)
            .finish()
    }
}

/// A validated set of health expressions.
#[derive(Clone, Debug, Default)]
pub struct HealthRules {
    by_kind: HashMap<(String, String), Rule>,
    by_group: HashMap<String, Rule>,
}

fn compile(group_kind: &str, source: &str) -> Result<(String, Arc<cel::Program>), StatusError> {
    cel::Program::compile(source)
        .map(|p| (source.to_string(), Arc::new(p)))
        .map_err(|e| StatusError::Expression {
            group_kind: group_kind.to_string(),
            expression: source.to_string(),
            reason: e
                .to_string()
                .lines()
                .next()
                .unwrap_or("parse error")
                .to_string(),
        })
}

impl HealthRules {
    /// Compiles the entries; an unparsable expression or two entries for the same GroupKind
    /// (or group) is an error naming it.
    pub fn new(entries: &[HealthCheckExpr]) -> Result<Self, StatusError> {
        Self::load(entries, true)
    }

    /// [`HealthRules::new`]; with `eager` false each entry is compiled only when first used
    /// (the built-in pack, whose every expression its tests compile).
    fn load(entries: &[HealthCheckExpr], eager: bool) -> Result<Self, StatusError> {
        let mut rules = HealthRules::default();
        for entry in entries {
            let group = api_group(&entry.api_version).to_string();
            let group_kind = match &entry.kind {
                Some(kind) => format!("{group}/{kind}"),
                None => format!("{group}/*"),
            };
            let rule = Rule::lazy(group_kind.clone(), entry);
            if eager {
                rule.compiled()?;
            }
            let duplicate = match &entry.kind {
                Some(kind) => rules.by_kind.insert((group, kind.clone()), rule).is_some(),
                None => rules.by_group.insert(group, rule).is_some(),
            };
            if duplicate {
                return Err(StatusError::Expression {
                    group_kind,
                    expression: entry.current.clone(),
                    reason: "more than one entry for this GroupKind".into(),
                });
            }
        }
        Ok(rules)
    }

    /// Parses a YAML/JSON list of entries (the Flux format).
    pub fn from_yaml(source: &str, text: &str) -> Result<Self, StatusError> {
        Self::from_yaml_with(source, text, true)
    }

    fn from_yaml_with(source: &str, text: &str, eager: bool) -> Result<Self, StatusError> {
        let entries: Vec<HealthCheckExpr> =
            serde_saphyr::from_str(text).map_err(|e| StatusError::Input {
                source_name: source.to_string(),
                index: 0,
                reason: format!(
                    "health expressions: {}",
                    e.to_string().lines().next().unwrap_or("invalid")
                ),
            })?;
        Self::load(&entries, eager)
    }

    /// The built-in rule pack (`crates/core-status/rules/`, one file per API group, embedded
    /// at build time): rules for popular CRDs whose status kstatus misjudges or cannot read.
    /// Used under the strict policy; a user's entries override it ([`Self::overridden_by`]).
    pub fn pack() -> HealthRules {
        static PACK: std::sync::OnceLock<HealthRules> = std::sync::OnceLock::new();
        PACK.get_or_init(|| {
            let mut all = HealthRules::default();
            for (file, text) in PACK_FILES {
                // Every file is loaded and compiled by the pack's own tests; a broken one
                // cannot ship.
                if let Ok(rules) = HealthRules::from_yaml_with(file, text, false) {
                    all = all.overridden_by(rules);
                }
            }
            all
        })
        .clone()
    }

    /// The pack's files, by name (for tests and documentation).
    pub fn pack_files() -> &'static [(&'static str, &'static str)] {
        PACK_FILES
    }

    /// These rules with `other`'s on top: an entry of `other` replaces the one for the same
    /// GroupKind, and a whole-group entry of `other` replaces every entry of that group.
    pub fn overridden_by(mut self, other: HealthRules) -> HealthRules {
        for group in other.by_group.keys() {
            self.by_kind.retain(|(g, _), _| g != group);
        }
        self.by_kind.extend(other.by_kind);
        self.by_group.extend(other.by_group);
        self
    }

    /// The GroupKinds covered by an entry of their own (`group/Kind`), sorted.
    pub fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self
            .by_kind
            .keys()
            .map(|(g, k)| format!("{g}/{k}"))
            .collect();
        kinds.sort();
        kinds
    }

    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty() && self.by_group.is_empty()
    }

    /// Whether an entry covers this type (its expressions then judge it, reading any field).
    pub fn covers(&self, api_version: &str, kind: &str) -> bool {
        self.rule_for(api_version, kind).is_some()
    }

    /// The entry for this type: its own, else its group's.
    fn rule_for(&self, api_version: &str, kind: &str) -> Option<&Rule> {
        let group = api_group(api_version);
        // Asked for every object of large inputs, most of whose groups have no entry: the
        // owned lookup key is built only for a group that has some.
        if !self.by_kind.keys().any(|(g, _)| g == group) {
            return self.by_group.get(group);
        }
        self.by_kind
            .get(&(group.to_string(), kind.to_string()))
            .or_else(|| self.by_group.get(group))
    }

    /// The status by expression, or `None` when no entry covers the object's GroupKind.
    pub fn evaluate(&self, object: &Value) -> Option<Result<Evaluation, StatusError>> {
        // Most runs load no expressions: skip splitting the object and the lookup keys.
        if self.is_empty() {
            return None;
        }
        let parts = Parts::new(object);
        let rule = self.rule_for(parts.api_version, parts.kind)?;
        Some(rule.compiled().and_then(|rule| run(rule, &parts)))
    }
}

fn run(rule: &Compiled, parts: &Parts) -> Result<Evaluation, StatusError> {
    if let Some(ts) = strict_str_in(parts.metadata, "metadata", "deletionTimestamp")?
        && !ts.is_empty()
    {
        return Ok(Evaluation::terminating());
    }
    let generation = parts.metadata.get("generation").and_then(Value::as_i64);
    let observed = parts
        .status
        .get("observedGeneration")
        .and_then(Value::as_i64);
    if let (Some(generation), Some(observed)) = (generation, observed)
        && generation != observed
    {
        return Ok(Evaluation::in_progress(
            "LatestGenerationNotObserved",
            format!(
                "{} generation is {generation}, but latest observed generation is {observed}",
                parts.kind
            ),
        ));
    }
    let mut context = cel::Context::default();
    if let Value::Object(map) = parts.object {
        for (name, value) in map {
            let value = cel::to_value(value).map_err(|e| StatusError::Expression {
                group_kind: rule.group_kind.clone(),
                expression: name.clone(),
                reason: format!("field {name} cannot be given to CEL: {e}"),
            })?;
            context.add_variable_from_value(name.clone(), value);
        }
    }
    // An object its controller has not written yet has no `status` at all; as a variable it
    // would be undeclared and even `has(status.x)` an error (Unknown). Beyond Flux: it is an
    // empty map, so guarded expressions judge a fresh object InProgress.
    if parts.object.get("status").is_none_or(Value::is_null) {
        context.add_variable_from_value(
            "status",
            cel::to_value(Value::Object(Default::default())).unwrap_or(cel::Value::Null),
        );
    }
    let check = |(source, program): &(String, Arc<cel::Program>)| -> Result<bool, StatusError> {
        let error = |reason: String| StatusError::Expression {
            group_kind: rule.group_kind.clone(),
            expression: source.clone(),
            reason,
        };
        match program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(error(format!("result is {other:?}, not a boolean"))),
            Err(e) => Err(error(e.to_string())),
        }
    };
    if let Some(expr) = &rule.in_progress
        && check(expr)?
    {
        return Ok(Evaluation::in_progress(
            "InProgressExpression",
            format!("inProgress expression matched: {}", expr.0),
        ));
    }
    if let Some(expr) = &rule.failed
        && check(expr)?
    {
        return Ok(Evaluation::failed(
            "FailedExpression",
            format!("failed expression matched: {}", expr.0),
        ));
    }
    if check(&rule.current)? {
        return Ok(Evaluation::current(format!(
            "current expression matched: {}",
            rule.current.0
        )));
    }
    Ok(Evaluation::in_progress(
        "NoExpressionMatched",
        "no health expression matched",
    ))
}

/// Status with custom expressions first, kstatus' rules for every other kind.
pub fn evaluate_with(object: &Value, now: jiff::Timestamp, rules: &HealthRules) -> Evaluation {
    match rules.evaluate(object) {
        Some(result) => result.unwrap_or_else(|e| Evaluation::unknown(&e)),
        None => crate::evaluate(object, now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;
    use serde_json::json;

    fn rules() -> HealthRules {
        HealthRules::from_yaml(
            "exprs.yaml",
            r#"
- apiVersion: gateway.networking.k8s.io/v1
  kind: Gateway
  current: status.conditions.filter(c, c.type == 'Programmed').all(c, c.status == 'True')
  failed: status.conditions.exists(c, c.type == 'Programmed' && c.status == 'False' && c.reason == 'Invalid')
  inProgress: "!has(status.conditions) || size(status.conditions) == 0"
- apiVersion: example.com/v1
  current: has(status.phase) && status.phase == 'Ready'
- apiVersion: example.com/v1
  kind: Special
  current: spec.size > 2
"#,
        )
        .unwrap()
    }

    fn gateway(status: Value) -> Value {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "g", "generation": 2}, "spec": {}, "status": status})
    }

    fn eval(object: &Value) -> (Status, Option<String>, String) {
        let e = evaluate_with(object, jiff::Timestamp::UNIX_EPOCH, &rules());
        (
            e.status,
            e.reason().map(str::to_string),
            e.message.to_string(),
        )
    }

    #[test]
    fn flux_order_in_progress_then_failed_then_current() {
        let programmed = |s: &str, r: &str| json!({"observedGeneration": 2, "conditions": [{"type": "Programmed", "status": s, "reason": r}]});
        assert_eq!(
            eval(&gateway(json!({"observedGeneration": 2, "conditions": []}))).0,
            Status::InProgress
        );
        assert_eq!(
            eval(&gateway(programmed("False", "Invalid"))).0,
            Status::Failed
        );
        assert_eq!(
            eval(&gateway(programmed("True", "Programmed"))).0,
            Status::Current
        );
        let (status, reason, _) = eval(&gateway(programmed("False", "Pending")));
        assert_eq!(
            (status, reason.as_deref()),
            (Status::InProgress, Some("NoExpressionMatched"))
        );
    }

    #[test]
    fn generation_check_comes_first() {
        let (status, reason, message) = eval(&gateway(
            json!({"observedGeneration": 1, "conditions": [{"type": "Programmed", "status": "True"}]}),
        ));
        assert_eq!(
            (status, reason.as_deref()),
            (Status::InProgress, Some("LatestGenerationNotObserved"))
        );
        assert_eq!(
            message,
            "Gateway generation is 2, but latest observed generation is 1"
        );
    }

    #[test]
    fn kind_entry_beats_group_entry_and_other_kinds_use_kstatus() {
        let special =
            json!({"apiVersion": "example.com/v2", "kind": "Special", "spec": {"size": 3}});
        assert_eq!(eval(&special).0, Status::Current);
        let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"phase": "Pending"}});
        assert_eq!(eval(&widget).0, Status::InProgress);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert_eq!(eval(&cm).2, "Resource is always ready");
    }

    #[test]
    fn missing_fields_and_non_booleans_are_unknown() {
        let no_status = json!({"apiVersion": "example.com/v1", "kind": "Special", "spec": {}});
        let (status, _, message) = eval(&no_status);
        assert_eq!(status, Status::Unknown);
        assert!(message.contains("spec.size > 2"), "{message}");
        let bad = HealthRules::from_yaml(
            "x",
            "- apiVersion: a.b/v1\n  kind: K\n  current: spec.name\n",
        )
        .unwrap();
        let e = evaluate_with(
            &json!({"apiVersion": "a.b/v1", "kind": "K", "spec": {"name": "n"}}),
            jiff::Timestamp::UNIX_EPOCH,
            &bad,
        );
        assert_eq!(e.status, Status::Unknown);
        assert!(e.message.contains("not a boolean"), "{}", e.message);
    }

    #[test]
    fn terminating_objects_are_terminating() {
        let g = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {}});
        assert_eq!(eval(&g).0, Status::Terminating);
    }

    #[test]
    fn bad_entries_are_rejected_with_the_group_kind() {
        let err = HealthRules::from_yaml(
            "x",
            "- apiVersion: a.b/v1\n  kind: K\n  current: 'spec.('\n",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("health expression \"spec.(\" for a.b/K"),
            "{err}"
        );
        let dup = "- apiVersion: a.b/v1\n  kind: K\n  current: 'true'\n- apiVersion: a.b/v2\n  kind: K\n  current: 'false'\n";
        assert!(
            HealthRules::from_yaml("x", dup)
                .unwrap_err()
                .to_string()
                .contains("more than one entry")
        );
        assert!(
            HealthRules::from_yaml("x", "- apiVersion: a/v1\n  current: 'true'\n  typo: 1\n")
                .is_err()
        );
    }
}
