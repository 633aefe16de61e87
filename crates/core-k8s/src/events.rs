//! Kubernetes Events, published with stable CamelCase reasons.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

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

/// Publishes Events as one reporting controller. Repeated identical Events are folded into a
/// series by kube's recorder instead of flooding the API.
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventPublisher")
    }
}

impl EventPublisher {
    /// `controller` is the service's field-manager name; `instance` tells replicas apart.
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_string(),
            instance: Some(instance.to_string()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
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
        let event = Event {
            type_: match severity {
                Severity::Normal => EventType::Normal,
                Severity::Warning => EventType::Warning,
            },
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        let who = format!(
            "{} {}/{}",
            regarding.kind.as_deref().unwrap_or(""),
            regarding.namespace.as_deref().unwrap_or(""),
            regarding.name.as_deref().unwrap_or("")
        );
        self.recorder
            .publish(&event, regarding)
            .await
            .map_err(|e| Error::api(format!("publish event {reason} on {who}"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
