//! Kubernetes Events, published with stable CamelCase reasons.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::{Error, Result};

/// Severity of an Event: `Normal` for progress, `Warning` for failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

/// Whether `reason` is a stable CamelCase code (`ScaledDown`, `ApplyFailed`): ASCII letters and
/// digits, starting with an upper-case letter, at most 128 characters (the API's limit).
pub fn is_camel_case_reason(reason: &str) -> bool {
    let mut chars = reason.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_uppercase())
        && reason.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric())
}

/// Publishes Events as one reporting controller. An Event repeated on the same object (same
/// type, reason, action **and note**) within [`SERIES_WINDOW`] is folded into the first one's
/// series instead of flooding the API. kube's own recorder folds by reason alone, so a second,
/// different note (a decision that changed, another error) was lost in the first one's count;
/// here a new note is a new Event.
#[derive(Clone)]
pub struct EventPublisher {
    client: Client,
    controller: String,
    instance: String,
    published: Arc<Mutex<Folds>>,
}

/// The Events published lately, to fold repeats into. Expired ones are dropped at most every
/// [`PRUNE_EVERY`]: a sweep of the whole map on every publish made a fleet's Events cost
/// O(n²) (a thousand layers publish two thousand Events in a minute).
#[derive(Debug, Default)]
struct Folds {
    by_key: HashMap<EventKey, Published>,
    pruned: Option<Timestamp>,
}

const PRUNE_EVERY: SignedDuration = SignedDuration::from_secs(10);

impl Folds {
    /// The Event `key` would fold into at `now`: one published within the window.
    fn recall(
        &mut self,
        key: &EventKey,
        now: Timestamp,
        window: SignedDuration,
    ) -> Option<Published> {
        if self
            .pruned
            .is_none_or(|at| now.duration_since(at) >= PRUNE_EVERY)
        {
            self.by_key
                .retain(|_, p| now.duration_since(p.last) < window);
            self.pruned = Some(now);
        }
        self.by_key
            .get(key)
            .filter(|p| now.duration_since(p.last) < window)
            .cloned()
    }
}

/// How long a repeated Event is folded into the last one.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// What makes two Events the same series: the object they regard (uid, kind, namespace,
/// name), type, reason, action and note.
#[derive(Hash)]
struct EventIdentity<'a> {
    regarding: (
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    ),
    type_: &'a str,
    reason: &'a str,
    action: &'a str,
    note: &'a str,
}

/// An [`EventIdentity`] as the folds remember it: a 128-bit fingerprint, not the text. A
/// fleet keeps an entry per layer and round for [`SERIES_WINDOW`], and the notes themselves
/// made most of a thousand layers' 1.5 MB of fold keys. Two different Events sharing one
/// (for 10^5 keys at once, a chance in 10^28) would fold a count into the wrong series.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct EventKey((u64, u64));

impl EventKey {
    fn of(identity: &EventIdentity<'_>) -> Self {
        Self(crate::hashing::fingerprint128(identity))
    }
}

#[derive(Clone, Debug)]
struct Published {
    name: String,
    count: i32,
    last: Timestamp,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventPublisher")
    }
}

impl EventPublisher {
    /// `controller` is the service's field-manager name; `instance` tells replicas apart.
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            published: Arc::default(),
        }
    }

    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        severity: Severity,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) -> Result<()> {
        if !is_camel_case_reason(reason) {
            return Err(Error::InvalidEventReason(reason.to_string()));
        }
        let mut note = note.into();
        // The API rejects notes over 1 kB.
        if note.len() > 1024 {
            let mut cut = 1021;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        let type_ = match severity {
            Severity::Normal => "Normal",
            Severity::Warning => "Warning",
        };
        let who = format!(
            "{} {}/{}",
            regarding.kind.as_deref().unwrap_or(""),
            regarding.namespace.as_deref().unwrap_or(""),
            regarding.name.as_deref().unwrap_or("")
        );
        let key = EventKey::of(&EventIdentity {
            regarding: (
                regarding.uid.as_deref(),
                regarding.kind.as_deref(),
                regarding.namespace.as_deref(),
                regarding.name.as_deref(),
            ),
            type_,
            reason,
            action,
            note: &note,
        });
        let now = Timestamp::now();
        let window = SignedDuration::try_from(SERIES_WINDOW).unwrap_or(SignedDuration::MAX);
        let repeat = {
            self.published
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recall(&key, now, window)
        };
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let fail = |e| Error::api(format!("publish event {reason} on {who}"), e);
        let (name, count) = match repeat {
            Some(first) => {
                let count = first.count + 1;
                let series =
                    json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
                events
                    .patch(&first.name, &PatchParams::default(), &Patch::Merge(&series))
                    .await
                    .map_err(fail)?;
                (first.name, count)
            }
            None => {
                let event = K8sEvent {
                    metadata: ObjectMeta {
                        namespace: regarding.namespace.clone(),
                        name: Some(format!(
                            "{}.{:x}",
                            regarding.name.as_deref().unwrap_or(&self.controller),
                            now.as_nanosecond()
                        )),
                        ..ObjectMeta::default()
                    },
                    action: Some(action.to_string()),
                    reason: Some(reason.to_string()),
                    note: Some(note),
                    type_: Some(type_.to_string()),
                    event_time: Some(MicroTime(now)),
                    regarding: Some(regarding.clone()),
                    reporting_controller: Some(self.controller.clone()),
                    reporting_instance: Some(self.instance.clone()),
                    ..K8sEvent::default()
                };
                let created = events
                    .create(&PostParams::default(), &event)
                    .await
                    .map_err(fail)?;
                (created.metadata.name.unwrap_or_default(), 1)
            }
        };
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .insert(
                key,
                Published {
                    name,
                    count,
                    last: now,
                },
            );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_folds_only_within_the_window_and_old_ones_are_swept() {
        let key = |note: &str| {
            EventKey::of(&EventIdentity {
                regarding: (None, Some("AddonsLayer"), None, Some(note)),
                type_: "Normal",
                reason: "Deployed",
                action: "Reconcile",
                note,
            })
        };
        let published = |at: Timestamp| Published {
            name: "e".into(),
            count: 1,
            last: at,
        };
        let window = SignedDuration::from_secs(60);
        let t0 = Timestamp::from_second(1_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let at = |s: i64| t0 + SignedDuration::from_secs(s);
        let mut folds = Folds::default();
        assert!(folds.recall(&key("a"), at(0), window).is_none());
        folds.by_key.insert(key("a"), published(at(0)));
        folds.by_key.insert(key("b"), published(at(30)));
        // Within the window: folded. Another note: not.
        assert!(folds.recall(&key("a"), at(59), window).is_some());
        assert!(folds.recall(&key("c"), at(59), window).is_none());
        // Past the window it never folds, swept or not (the last sweep, at 59 s, was 1 s ago).
        assert!(folds.recall(&key("a"), at(60), window).is_none());
        assert_eq!(folds.by_key.len(), 2, "not swept again within PRUNE_EVERY");
        // The next sweep (10 s after the last) drops what expired, keeps the rest.
        assert!(folds.recall(&key("b"), at(69), window).is_some());
        assert!(!folds.by_key.contains_key(&key("a")));
        assert!(folds.by_key.contains_key(&key("b")));
    }

    #[test]
    fn reasons_are_camel_case_codes() {
        for good in ["ScaledDown", "ApplyFailed", "Reconciled", "V2Migrated"] {
            assert!(is_camel_case_reason(good), "{good}");
        }
        for bad in [
            "",
            "scaledDown",
            "Scaled Down",
            "Scaled-Down",
            "SCALED_DOWN",
            &"A".repeat(129),
        ] {
            assert!(!is_camel_case_reason(bad), "{bad}");
        }
    }
}
