//! What the observer remembers per layer and decides from it — which fields drifted since
//! when, whether another writer is fighting the layer, when the next heal request may go
//! out, and the status that reports it all. Pure: the shell feeds it check results and the
//! clock.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use core_layers::crd::{Condition, DriftEntry};
use core_layers::keys::condition;
use core_layers::objects::ObjectRef;
use jiff::Timestamp;
use serde_json::Value;

use crate::compare::{self, FieldDrift};
use crate::rules::{Fight, ObjectMode};

/// `status.drift` holds at most this many entries (the condition message gives the totals).
pub const MAX_STATUS_ENTRIES: usize = 100;
/// First back-off once a fight is detected; doubles with every further correction.
pub const FIGHT_BACKOFF_BASE: Duration = Duration::from_secs(5);
/// Longest wait between heal requests.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);
/// Reasons of the observer's conditions (and Events).
pub mod reason {
    pub const DRIFT_DETECTED: &str = "DriftDetected";
    pub const NO_DRIFT: &str = "NoDrift";
    pub const INVALID_DRIFT_SPEC: &str = "InvalidDriftSpec";
    pub const FIGHT_DETECTED: &str = "FightDetected";
    pub const NO_FIGHT: &str = "NoFight";
    pub const HEAL_REQUESTED: &str = "HealRequested";
}

/// The drift path of an object that is missing altogether.
pub const MISSING_PATH: &str = "";

/// One drifted field, rendered for the status (Secret values already masked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub path: String,
    pub expected: String,
    pub actual: String,
    pub manager: Option<String>,
}

/// Turns compared fields into findings: values rendered and masked, the manager that holds
/// each field named from the live object's `managedFields` (ours excluded).
pub fn findings(kind: &str, drifts: &[FieldDrift], live: &Value, ours: &str) -> Vec<Finding> {
    drifts
        .iter()
        .map(|d| Finding {
            path: d.path.to_string(),
            expected: compare::render_value(&compare::mask_secret(
                kind,
                &d.path,
                d.expected.clone(),
            )),
            actual: compare::render_value(&compare::mask_secret(kind, &d.path, d.actual.clone())),
            manager: compare::manager_of(live, &d.path, ours),
        })
        .collect()
}

/// A layer's Secret-sourced variable values, in every form a finding may show them. A value
/// substituted into a ConfigMap, an environment variable or an annotation is as secret as the
/// Secret it came from, and the API server may quote it back in a refused dry run. Built once
/// per layer view, applied to every check's findings.
#[derive(Clone, Debug, Default)]
pub struct SecretValues {
    /// Each value as written, JSON-escaped and base64-encoded.
    forms: Vec<String>,
}

impl SecretValues {
    pub fn new(secrets: &[String]) -> Self {
        use base64::Engine as _;
        let forms = secrets
            .iter()
            .flat_map(|secret| {
                let escaped = serde_json::to_string(secret).unwrap_or_default();
                let escaped = escaped
                    .strip_prefix('"')
                    .and_then(|e| e.strip_suffix('"'))
                    .unwrap_or(&escaped)
                    .to_string();
                [
                    secret.clone(),
                    escaped,
                    base64::engine::general_purpose::STANDARD.encode(secret),
                ]
            })
            .collect();
        Self { forms }
    }

    /// Masks them in `findings`: a shown value holding one is replaced whole by
    /// [`compare::MASKED`], and a path naming one has it cut out.
    pub fn mask(&self, findings: &mut [Finding]) {
        if self.forms.is_empty() {
            return;
        }
        let holds = |text: &str| self.forms.iter().any(|form| text.contains(form.as_str()));
        for finding in findings {
            for shown in [&mut finding.expected, &mut finding.actual] {
                if holds(shown) {
                    *shown = compare::MASKED.to_string();
                }
            }
            for form in &self.forms {
                if finding.path.contains(form.as_str()) {
                    finding.path = finding.path.replace(form.as_str(), compare::MASKED);
                }
            }
        }
    }
}

/// The finding for an object that is gone.
pub fn missing() -> Finding {
    Finding {
        path: MISSING_PATH.into(),
        expected: "object exists".into(),
        actual: "(absent)".into(),
        manager: None,
    }
}

/// A field another writer keeps changing back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FightReport {
    pub object: ObjectRef,
    pub path: String,
    pub manager: Option<String>,
    /// Drift appearances within the window.
    pub corrections: usize,
}

#[derive(Clone, Debug)]
struct Drifted {
    mode: ObjectMode,
    entries: Vec<DriftEntry>,
}

/// What changed when a check was recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The status must be rewritten.
    pub changed: bool,
    /// Fields that drifted anew (for Events and metrics).
    pub appeared: Vec<Finding>,
    /// The object was drifted and is clean now.
    pub cleared: bool,
    /// This check turned a field's drift into a fight.
    pub new_fight: bool,
}

/// The observer's memory of one layer.
#[derive(Clone, Debug, Default)]
pub struct LayerMemory {
    drifted: BTreeMap<ObjectRef, Drifted>,
    /// (object, path) → when its drift appeared, oldest first, within the fight window.
    appearances: HashMap<(ObjectRef, String), Vec<Timestamp>>,
    fights: BTreeMap<(ObjectRef, String), FightReport>,
    /// No heal request before this time.
    backoff_until: Option<Timestamp>,
    /// Heal requests sent while the drift stayed (reset when the layer is clean).
    unresolved_requests: u32,
}

fn since_of(entries: &[DriftEntry], path: &str) -> Option<String> {
    entries
        .iter()
        .find(|e| e.path == path)
        .map(|e| e.since.clone())
}

impl LayerMemory {
    /// Memory seeded from the status a previous observer wrote, so a restart keeps every
    /// drift and its `since`.
    pub fn from_status(entries: &[DriftEntry], objects: &BTreeMap<String, ObjectRef>) -> Self {
        let mut memory = Self::default();
        for entry in entries {
            let Some(object) = objects.get(&entry.object) else {
                continue;
            };
            memory
                .drifted
                .entry(object.clone())
                .or_insert_with(|| Drifted {
                    mode: ObjectMode::Warn,
                    entries: Vec::new(),
                })
                .entries
                .push(entry.clone());
        }
        memory
    }

    /// Records one check of `object`: `found` empty means clean.
    pub fn record(
        &mut self,
        object: &ObjectRef,
        api_version: &str,
        mode: ObjectMode,
        found: Vec<Finding>,
        fight: Fight,
        now: Timestamp,
    ) -> Recorded {
        let mut out = Recorded::default();
        let previous = self.drifted.remove(object);
        let previous_entries = previous
            .as_ref()
            .map(|d| d.entries.as_slice())
            .unwrap_or(&[]);
        if found.is_empty() || mode == ObjectMode::Ignore {
            out.changed = previous.is_some();
            out.cleared = previous.is_some();
            if self.drifted.is_empty() {
                self.unresolved_requests = 0;
            }
            return out;
        }
        let now_text = core_status::augment::format_time(now);
        let window_start = now
            .checked_sub(jiff::SignedDuration::try_from(fight.window).unwrap_or_default())
            .unwrap_or(now);
        let mut entries = Vec::with_capacity(found.len());
        for finding in found {
            let since = since_of(previous_entries, &finding.path);
            if since.is_none() {
                let key = (object.clone(), finding.path.clone());
                let seen = self.appearances.entry(key.clone()).or_default();
                seen.retain(|t| *t >= window_start);
                seen.push(now);
                if seen.len() >= fight.corrections as usize {
                    out.new_fight |= !self.fights.contains_key(&key);
                    self.fights.insert(
                        key,
                        FightReport {
                            object: object.clone(),
                            path: finding.path.clone(),
                            manager: finding.manager.clone(),
                            corrections: seen.len(),
                        },
                    );
                }
                out.appeared.push(finding.clone());
            }
            entries.push(DriftEntry {
                object: object.to_string(),
                api_version: api_version.to_string(),
                path: finding.path,
                expected: finding.expected,
                actual: finding.actual,
                manager: finding.manager,
                since: since.unwrap_or_else(|| now_text.clone()),
            });
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        out.changed = previous_entries != entries.as_slice();
        self.drifted
            .insert(object.clone(), Drifted { mode, entries });
        out
    }

    /// Forgets an object that left the layer.
    pub fn forget(&mut self, object: &ObjectRef) -> bool {
        self.appearances.retain(|(o, _), _| o != object);
        self.fights.retain(|(o, _), _| o != object);
        self.drifted.remove(object).is_some()
    }

    /// Drops fights whose corrections all left the window.
    pub fn expire_fights(&mut self, fight: Fight, now: Timestamp) {
        let window_start = now
            .checked_sub(jiff::SignedDuration::try_from(fight.window).unwrap_or_default())
            .unwrap_or(now);
        self.appearances.retain(|_, seen| {
            seen.retain(|t| *t >= window_start);
            !seen.is_empty()
        });
        let appearances = &self.appearances;
        self.fights.retain(|key, _| {
            appearances
                .get(key)
                .is_some_and(|seen| seen.len() >= fight.corrections as usize)
        });
    }

    pub fn is_drifted(&self) -> bool {
        !self.drifted.is_empty()
    }

    pub fn drifted_objects(&self) -> usize {
        self.drifted.len()
    }

    /// Whether a heal request may go out now: an object in Heal mode drifted, and the
    /// back-off (fight or unresolved requests) has passed.
    pub fn heal_due(&self, now: Timestamp) -> bool {
        let wants_heal = self.drifted.values().any(|d| d.mode == ObjectMode::Heal);
        wants_heal && self.backoff_until.is_none_or(|until| now >= until)
    }

    /// When the next heal may go out, if one is waiting for its back-off.
    pub fn heal_backoff_until(&self) -> Option<Timestamp> {
        self.backoff_until
    }

    /// Records that a heal request went out: the next one waits, longer while the same
    /// drift stays and doubling with every correction of a fight.
    pub fn heal_requested(&mut self, now: Timestamp) {
        self.unresolved_requests = self.unresolved_requests.saturating_add(1);
        // 1 s after the first request (the watch events of the re-applied objects usually
        // land first; this keeps a late one from causing a second request), then doubling.
        let persist = Duration::from_secs(1 << (self.unresolved_requests - 1).min(9));
        let fight = self
            .fights
            .values()
            .map(|f| {
                let excess = f.corrections.saturating_sub(1).min(16) as u32;
                FIGHT_BACKOFF_BASE.saturating_mul(1 << excess)
            })
            .max()
            .unwrap_or(Duration::ZERO);
        let wait = persist.max(fight).min(MAX_BACKOFF);
        self.backoff_until = now
            .checked_add(jiff::SignedDuration::try_from(wait).unwrap_or_default())
            .ok();
    }

    pub fn fights(&self) -> impl Iterator<Item = &FightReport> {
        self.fights.values()
    }

    /// `status.drift`: every drifted field, object by object, bounded.
    pub fn entries(&self) -> Vec<DriftEntry> {
        self.drifted
            .values()
            .flat_map(|d| d.entries.iter().cloned())
            .take(MAX_STATUS_ENTRIES)
            .collect()
    }

    fn field_count(&self) -> usize {
        self.drifted.values().map(|d| d.entries.len()).sum()
    }

    /// The observer's two conditions, `lastTransitionTime` kept while a status holds.
    pub fn conditions(
        &self,
        observed: usize,
        spec_errors: &[String],
        fight: Fight,
        generation: Option<i64>,
        previous: &[Condition],
        now: Timestamp,
    ) -> Vec<Condition> {
        let now_text = core_status::augment::format_time(now);
        let make = |type_: &str, status: &str, reason: &str, message: String| Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            last_transition_time: previous
                .iter()
                .find(|c| c.type_ == type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now_text.clone()),
            message,
            observed_generation: generation,
        };
        let drifted = if !spec_errors.is_empty() {
            make(
                condition::DRIFTED,
                "Unknown",
                reason::INVALID_DRIFT_SPEC,
                spec_errors.join("; "),
            )
        } else if let Some(first) = self.drifted.values().flat_map(|d| &d.entries).next() {
            let by = first
                .manager
                .as_deref()
                .map(|m| format!(" (changed by {m})"))
                .unwrap_or_default();
            let what = if first.path.is_empty() && first.actual == "(absent)" {
                "is missing".to_string()
            } else if first.path.is_empty() {
                format!("cannot be applied: {}", first.actual)
            } else {
                format!(
                    "{}: expected {}, found {}",
                    first.path, first.expected, first.actual
                )
            };
            make(
                condition::DRIFTED,
                "True",
                reason::DRIFT_DETECTED,
                format!(
                    "{} field(s) of {} object(s) drifted; first: {} {what}{by}",
                    self.field_count(),
                    self.drifted.len(),
                    first.object
                ),
            )
        } else {
            make(
                condition::DRIFTED,
                "False",
                reason::NO_DRIFT,
                format!("no drift in {observed} observed object(s)"),
            )
        };
        let fight_condition = match self.fights.values().next() {
            Some(f) => {
                let who = f
                    .manager
                    .as_deref()
                    .map(|m| format!("field manager {m:?}"))
                    .unwrap_or_else(|| "an unknown writer".into());
                let until = self
                    .backoff_until
                    .map(|t| {
                        format!(
                            "; heal requests back off until {}",
                            core_status::augment::format_time(t)
                        )
                    })
                    .unwrap_or_default();
                make(
                    condition::FIGHT_DETECTED,
                    "True",
                    reason::FIGHT_DETECTED,
                    format!(
                        "{} {} drifted {} times within {}: {who} keeps changing it{until}",
                        f.object,
                        f.path,
                        f.corrections,
                        format_window(fight.window),
                    ),
                )
            }
            None => make(
                condition::FIGHT_DETECTED,
                "False",
                reason::NO_FIGHT,
                "no field is being changed back and forth".to_string(),
            ),
        };
        vec![drifted, fight_condition]
    }
}

/// `600s` → `10m`, `3600s` → `1h`, else seconds.
fn format_window(window: Duration) -> String {
    let seconds = window.as_secs();
    match seconds {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn web() -> ObjectRef {
        ObjectRef::new("apps/v1", "Deployment", Some("shop"), "web")
    }

    fn image(actual: &str, manager: &str) -> Finding {
        Finding {
            path: "spec.template.spec.containers[name=app].image".into(),
            expected: "nginx:1.25".into(),
            actual: actual.into(),
            manager: Some(manager.into()),
        }
    }

    const FIGHT: Fight = Fight {
        corrections: 3,
        window: Duration::from_secs(600),
    };

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn since_is_kept_while_the_drift_stays() {
        let mut memory = LayerMemory::default();
        let first = memory.record(
            &web(),
            "apps/v1",
            ObjectMode::Heal,
            vec![image("nginx:1.26", "kubectl-set")],
            FIGHT,
            at(0),
        );
        assert!(first.changed);
        assert_eq!(first.appeared.len(), 1);
        let again = memory.record(
            &web(),
            "apps/v1",
            ObjectMode::Heal,
            vec![image("nginx:1.27", "kubectl-set")],
            FIGHT,
            at(5),
        );
        assert!(again.changed, "the actual value changed");
        assert!(again.appeared.is_empty(), "same field: not a new drift");
        let entries = memory.entries();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].actual, "nginx:1.27");
        assert_eq!(entries[0].since, core_status::augment::format_time(at(0)));
        assert_eq!(entries[0].object, "Deployment shop/web");
        let clean = memory.record(&web(), "apps/v1", ObjectMode::Heal, vec![], FIGHT, at(6));
        assert!(clean.changed && clean.cleared);
        assert!(!memory.is_drifted());
        let still_clean = memory.record(&web(), "apps/v1", ObjectMode::Heal, vec![], FIGHT, at(7));
        assert!(!still_clean.changed);
    }

    #[test]
    fn restart_keeps_since() {
        let mut memory = LayerMemory::default();
        memory.record(
            &web(),
            "apps/v1",
            ObjectMode::Warn,
            vec![image("nginx:1.26", "kubectl-set")],
            FIGHT,
            at(0),
        );
        let objects = BTreeMap::from([(web().to_string(), web())]);
        let mut restarted = LayerMemory::from_status(&memory.entries(), &objects);
        assert_eq!(restarted.entries(), memory.entries());
        let recorded = restarted.record(
            &web(),
            "apps/v1",
            ObjectMode::Warn,
            vec![image("nginx:1.26", "kubectl-set")],
            FIGHT,
            at(100),
        );
        assert!(
            !recorded.changed,
            "same drift after a restart: nothing to rewrite"
        );
        assert!(recorded.appeared.is_empty());
        assert_eq!(
            restarted.entries()[0].since,
            core_status::augment::format_time(at(0))
        );
    }

    #[test]
    fn a_fight_backs_off_and_names_the_writer() {
        let mut memory = LayerMemory::default();
        let mut waits = Vec::new();
        for round in 0..6 {
            let t = at(round * 2);
            let recorded = memory.record(
                &web(),
                "apps/v1",
                ObjectMode::Heal,
                vec![image("evil:1", "fighter")],
                FIGHT,
                t,
            );
            assert_eq!(recorded.new_fight, round == 2, "round {round}");
            if memory.heal_due(t) {
                memory.heal_requested(t);
                waits.push(
                    memory
                        .heal_backoff_until()
                        .map(|u| (u - t).get_seconds())
                        .unwrap_or(0),
                );
            }
            // The heal lands: clean again until the fighter writes.
            memory.record(&web(), "apps/v1", ObjectMode::Heal, vec![], FIGHT, t);
        }
        // Heals 1 and 2 wait the usual second; the third correction is a fight:
        // 5 s × 2^(n-1), and the rounds inside that back-off send nothing.
        assert_eq!(waits, vec![1, 1, 20], "waits {waits:?}");
        let fights: Vec<_> = memory.fights().collect();
        assert_eq!(fights.len(), 1);
        assert_eq!(fights[0].manager.as_deref(), Some("fighter"));
        let conditions = memory.conditions(1, &[], FIGHT, Some(1), &[], at(20));
        let fight = conditions
            .iter()
            .find(|c| c.type_ == "FightDetected")
            .unwrap();
        assert_eq!(fight.status, "True");
        assert!(fight.message.contains("\"fighter\""), "{}", fight.message);
        // Outside the window the fight ends.
        memory.expire_fights(FIGHT, at(2000));
        assert_eq!(memory.fights().count(), 0);
    }

    #[test]
    fn warn_mode_never_heals_and_persisting_drift_backs_off() {
        let mut memory = LayerMemory::default();
        memory.record(
            &web(),
            "apps/v1",
            ObjectMode::Warn,
            vec![image("nginx:1.26", "kubectl-set")],
            FIGHT,
            at(0),
        );
        assert!(!memory.heal_due(at(0)));
        memory.record(
            &web(),
            "apps/v1",
            ObjectMode::Heal,
            vec![image("nginx:1.26", "kubectl-set")],
            FIGHT,
            at(0),
        );
        assert!(memory.heal_due(at(0)));
        memory.heal_requested(at(0));
        assert!(!memory.heal_due(at(0)), "one request at a time");
        assert!(memory.heal_due(at(1)));
        memory.heal_requested(at(1));
        assert!(
            !memory.heal_due(at(2)),
            "the same drift stayed: wait longer"
        );
        assert!(memory.heal_due(at(3)));
    }

    #[test]
    fn conditions_report_counts_and_errors() {
        let mut memory = LayerMemory::default();
        let clean = memory.conditions(4, &[], FIGHT, Some(2), &[], at(0));
        assert_eq!(
            (clean[0].status.as_str(), clean[0].reason.as_str()),
            ("False", "NoDrift")
        );
        assert!(clean[0].message.contains("4 observed"));
        memory.record(
            &web(),
            "apps/v1",
            ObjectMode::Heal,
            vec![missing()],
            FIGHT,
            at(1),
        );
        let drifted = memory.conditions(4, &[], FIGHT, Some(2), &clean, at(1));
        assert_eq!(drifted[0].status, "True");
        assert!(
            drifted[0]
                .message
                .contains("Deployment shop/web is missing"),
            "{}",
            drifted[0].message
        );
        assert_eq!(
            drifted[1].last_transition_time,
            clean[1].last_transition_time
        );
        let invalid = memory.conditions(4, &["spec.drift.x: bad".into()], FIGHT, None, &[], at(1));
        assert_eq!(invalid[0].status, "Unknown");
        assert_eq!(invalid[0].reason, reason::INVALID_DRIFT_SPEC);
    }

    #[test]
    fn secret_values_table() {
        let secret = "s3cr\"t".to_string();
        let finding = |path: &str, expected: &str, actual: &str| Finding {
            path: path.into(),
            expected: expected.into(),
            actual: actual.into(),
            manager: None,
        };
        let masked = compare::MASKED;
        // (name, finding, secrets, what must remain)
        let cases = [
            (
                "as written",
                finding("data.url", "https://u:s3cr\"t@db", "https://u:x@db"),
                vec![secret.clone()],
                finding("data.url", masked, "https://u:x@db"),
            ),
            (
                "JSON-escaped inside a rendered map",
                finding("data", r#"{"url":"s3cr\"t"}"#, "(absent)"),
                vec![secret.clone()],
                finding("data", masked, "(absent)"),
            ),
            (
                "base64-encoded (binaryData, a refused dry run)",
                finding(
                    "",
                    "the layer's manifest applies",
                    "dry run refused: czNjciJ0 is bad",
                ),
                vec![secret.clone()],
                finding("", "the layer's manifest applies", masked),
            ),
            (
                "the live value still holds it",
                finding("metadata.annotations.token", "(absent)", "s3cr\"t"),
                vec![secret.clone()],
                finding("metadata.annotations.token", "(absent)", masked),
            ),
            (
                "in a path",
                finding("data.s3cr\"t", "1", "2"),
                vec![secret.clone()],
                finding(&format!("data.{masked}"), "1", "2"),
            ),
            (
                "no secret variables: untouched",
                finding("data.url", "s3cr\"t", "x"),
                vec![],
                finding("data.url", "s3cr\"t", "x"),
            ),
            (
                "other values untouched",
                finding("data.url", "public", "x"),
                vec![secret.clone()],
                finding("data.url", "public", "x"),
            ),
        ];
        for (name, found, secrets, want) in cases {
            let mut found = vec![found];
            SecretValues::new(&secrets).mask(&mut found);
            assert_eq!(found, vec![want], "{name}");
        }
    }
}
