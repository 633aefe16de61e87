//! What a layer's status reports: the conditions for a state, when it was entered, and
//! Kraan's `status.resources`.

use jiff::Timestamp;

use crate::crd::{AddonsLayer, Condition};
use crate::keys::{condition, state};

/// Kraan's kind string for HelmReleases in `status.resources`.
pub const KRAAN_HELMRELEASE_KIND: &str = "helmreleases.helm.toolkit.fluxcd.io";

/// Kraan's `status.resources`: one entry per HelmRelease of the inventory, sorted by
/// namespace and name; `lastTransitionTime` kept while an entry's status holds.
pub fn kraan_resources(
    inventory: &[crate::crd::InventoryEntry],
    previous: &[crate::crd::ResourceStatus],
    now: Timestamp,
) -> Vec<crate::crd::ResourceStatus> {
    let now_text = core_status::augment::format_time(now);
    let mut out: Vec<crate::crd::ResourceStatus> = inventory
        .iter()
        .filter(|e| {
            e.kind == "HelmRelease"
                && core_status::object::api_group(&e.api_version) == "helm.toolkit.fluxcd.io"
        })
        .map(|e| {
            let namespace = e.namespace.clone().unwrap_or_default();
            let status = match (e.status.as_str(), e.reason.as_deref()) {
                ("Current", _) => "Deployed".to_string(),
                (_, Some(reason)) if !reason.is_empty() => reason.to_string(),
                _ => "NotDeployed".to_string(),
            };
            let last_transition_time = previous
                .iter()
                .find(|p| p.namespace == namespace && p.name == e.name && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| now_text.clone());
            crate::crd::ResourceStatus {
                kind: KRAAN_HELMRELEASE_KIND.into(),
                namespace,
                name: e.name.clone(),
                status,
                last_transition_time,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// The conditions for a state: Kraan's single state-named condition (so
/// `kubectl wait --for=condition=Deployed` keeps working) plus the standard Ready,
/// Reconciling and Stalled, with `lastTransitionTime` kept when a condition's status holds.
pub fn conditions(
    layer_state: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    previous: &[Condition],
    now: Timestamp,
) -> Vec<Condition> {
    let now_text = core_status::augment::format_time(now);
    let make = |type_: &str, status: bool, reason: &str| {
        let status = if status { "True" } else { "False" };
        let last_transition_time = previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now_text.clone());
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            last_transition_time,
            observed_generation: generation,
        }
    };
    let deployed = layer_state == state::DEPLOYED;
    // Rolled back, the layer stays on the kept revision until its source or spec changes:
    // no progress without someone acting, as kstatus means by Stalled.
    let failed = matches!(layer_state, state::FAILED | state::ROLLED_BACK);
    let working = matches!(
        layer_state,
        state::PENDING
            | state::K8S_VERSION
            | state::APPLY_PENDING
            | state::APPLYING
            | state::PRUNING
            | state::DELETING
            | state::ROLLING_BACK
            | state::GATE_UNKNOWN
    );
    let mut out = vec![
        make(layer_state, true, layer_state),
        make(condition::READY, deployed, reason),
    ];
    if working {
        out.push(make(condition::RECONCILING, true, reason));
    }
    if failed {
        out.push(make(condition::STALLED, true, reason));
    }
    out
}

/// When the current state was entered (the state condition's transition time).
pub fn state_since(layer: &AddonsLayer, layer_state: &str) -> Option<Timestamp> {
    let status = layer.status.as_ref()?;
    if status.state.as_deref() != Some(layer_state) {
        return None;
    }
    status
        .conditions
        .iter()
        .find(|c| c.type_ == layer_state)
        .and_then(|c| c.last_transition_time.parse().ok())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crd::{InventoryEntry, ResourceStatus};

    fn entry(
        kind: &str,
        api_version: &str,
        name: &str,
        status: &str,
        reason: Option<&str>,
    ) -> InventoryEntry {
        InventoryEntry {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: Some("base".into()),
            name: name.into(),
            status: status.into(),
            reason: reason.map(str::to_string),
            message: None,
        }
    }

    #[test]
    fn helmreleases_as_kraan_reports_them() {
        let hr = "helm.toolkit.fluxcd.io/v2";
        let inventory = vec![
            entry("HelmRelease", hr, "zeta", "Current", None),
            entry("HelmRelease", hr, "alpha", "InProgress", Some("TestFailed")),
            entry("HelmRelease", hr, "mid", "InProgress", None),
            entry("ConfigMap", "v1", "settings", "Current", None),
            entry(
                "HelmRelease",
                "example.com/v1",
                "lookalike",
                "Current",
                None,
            ),
        ];
        let t0 = Timestamp::from_second(1_800_000_000).unwrap();
        let t1 = Timestamp::from_second(1_800_000_060).unwrap();
        let first = kraan_resources(&inventory, &[], t0);
        let got: Vec<(&str, &str)> = first
            .iter()
            .map(|r| (r.name.as_str(), r.status.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("alpha", "TestFailed"),
                ("mid", "NotDeployed"),
                ("zeta", "Deployed")
            ]
        );
        assert!(
            first
                .iter()
                .all(|r| r.kind == KRAAN_HELMRELEASE_KIND && r.namespace == "base")
        );
        // A minute later alpha recovered: only its transition time moves.
        let mut later = inventory.clone();
        later[1] = entry("HelmRelease", hr, "alpha", "Current", None);
        let second: Vec<ResourceStatus> = kraan_resources(&later, &first, t1);
        let t0_text = core_status::augment::format_time(t0);
        let t1_text = core_status::augment::format_time(t1);
        assert_eq!(
            (
                second[0].status.as_str(),
                second[0].last_transition_time.as_str()
            ),
            ("Deployed", t1_text.as_str())
        );
        assert_eq!(
            second[2].last_transition_time, t0_text,
            "zeta kept its time"
        );
    }

    #[test]
    fn conditions_keep_transition_times() {
        let t0: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-11-21T10:05:00Z".parse().unwrap();
        let first = conditions(state::APPLYING, "Progressing", "applying", Some(1), &[], t0);
        let types: Vec<(&str, &str)> = first
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            types,
            vec![
                ("Applying", "True"),
                ("Ready", "False"),
                ("Reconciling", "True")
            ]
        );
        let again = conditions(state::APPLYING, "Progressing", "still", Some(1), &first, t1);
        assert_eq!(again[0].last_transition_time, "2026-11-21T10:00:00Z");
        let done = conditions(
            state::DEPLOYED,
            "ReconciliationSucceeded",
            "ok",
            Some(1),
            &again,
            t1,
        );
        assert_eq!(
            done.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            vec!["Deployed", "Ready"]
        );
        assert_eq!(done[1].status, "True");
        assert_eq!(done[1].last_transition_time, "2026-11-21T10:05:00Z");
        let failed = conditions(state::FAILED, "HealthCheckFailed", "x", Some(1), &done, t1);
        assert!(
            failed
                .iter()
                .any(|c| c.type_ == "Stalled" && c.status == "True")
        );
    }
}
