//! `strata layers why LAYER`: why a layer is not Deployed, followed down its dependencies —
//! each blocker with how long it has been in its state and the objects it waits on.

use std::collections::BTreeSet;

use core_status::Status;
use jiff::Timestamp;
use serde::Serialize;

use crate::crd::{AddonsLayer, LayerSet};
use crate::keys::{ORPHANED_STATUS, state};

use super::ObjectRef;

/// One layer on the path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhyLayer {
    pub layer: String,
    pub state: String,
    /// How long it has been in that state (seconds), when its conditions tell.
    pub for_seconds: Option<i64>,
    /// Its own objects that are not ready: `Kind ns/name: Status (reason): message`.
    pub waiting_on: Vec<String>,
    /// What it waits for: other layers (explained in turn) or objects and sources.
    pub blocked_by: Vec<WhyBlocker>,
    /// Its metric gates as last read: `gate NAME: State (value V) for D: message`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhyBlocker {
    pub name: String,
    pub reason: String,
    pub message: String,
    /// The blocking layer explained, when the blocker is a layer (not already shown above).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<Box<WhyLayer>>,
}

fn age(layer: &AddonsLayer, now: Timestamp) -> Option<i64> {
    let status = layer.status.as_ref()?;
    let current = status.state.as_deref()?;
    let since: Timestamp = status
        .conditions
        .iter()
        .find(|c| c.type_ == current)
        .or_else(|| status.conditions.iter().find(|c| c.type_ == "Ready"))?
        .last_transition_time
        .parse()
        .ok()?;
    Some(now.duration_since(since).as_secs().max(0))
}

/// A layer's own objects that are not ready (none once it is Deployed):
/// `Kind ns/name: Status (reason): message`.
pub fn waiting_on(layer: &AddonsLayer) -> Vec<String> {
    let Some(status) = &layer.status else {
        return Vec::new();
    };
    if status.state.as_deref() == Some(state::DEPLOYED) {
        return Vec::new();
    }
    status
        .inventory
        .iter()
        .filter(|e| e.status != Status::Current.to_string() && e.status != ORPHANED_STATUS)
        .map(|e| {
            let mut line = format!("{}: {}", ObjectRef::of_entry(e), e.status);
            if let Some(reason) = &e.reason {
                line.push_str(&format!(" ({reason})"));
            }
            if let Some(message) = &e.message {
                line.push_str(&format!(": {message}"));
            }
            line
        })
        .collect()
}

/// The explanation of `name`, following every blocking layer once (cycles stop at a layer
/// already on the path). `None` when the layer does not exist.
pub fn why(name: &str, all: &LayerSet, now: Timestamp) -> Option<WhyLayer> {
    let mut seen = BTreeSet::new();
    explain(name, all, now, &mut seen)
}

fn explain(
    name: &str,
    all: &LayerSet,
    now: Timestamp,
    seen: &mut BTreeSet<String>,
) -> Option<WhyLayer> {
    let layer = all.get(name)?;
    seen.insert(name.to_string());
    let status = layer.status.clone().unwrap_or_default();
    let layer_state = status.state.clone().unwrap_or_else(|| "none".into());
    let waiting_on = waiting_on(layer);
    let blocked_by = status
        .blocked_by
        .iter()
        .map(|b| WhyBlocker {
            name: b.name.clone(),
            reason: b.reason.clone(),
            message: b.message.clone(),
            layer: if seen.contains(&b.name) {
                None
            } else {
                explain(&b.name, all, now, seen).map(Box::new)
            },
        })
        .collect();
    let gates = status
        .gates
        .iter()
        .map(|g| {
            let value = g
                .value
                .as_ref()
                .map(|v| format!(" (value {v})"))
                .unwrap_or_default();
            let held = crate::metric_gate::held_for(g, now).as_secs();
            let held = duration(i64::try_from(held).unwrap_or(i64::MAX));
            format!(
                "gate {}: {}{value} for {held}: {}",
                g.name, g.state, g.message
            )
        })
        .collect();
    Some(WhyLayer {
        layer: name.to_string(),
        for_seconds: age(layer, now),
        state: layer_state,
        waiting_on,
        blocked_by,
        gates,
    })
}

fn duration(seconds: i64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The explanation as indented text, one layer per level.
pub fn render_why(why: &WhyLayer) -> String {
    let mut out = String::new();
    render_into(why, 0, &mut out);
    out
}

fn render_into(why: &WhyLayer, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    out.push_str(&format!("{pad}{} is {}", why.layer, why.state));
    if let Some(seconds) = why.for_seconds {
        out.push_str(&format!(" for {}", duration(seconds)));
    }
    out.push('\n');
    for object in &why.waiting_on {
        out.push_str(&format!("{pad}  on {object}\n"));
    }
    for gate in &why.gates {
        out.push_str(&format!("{pad}  {gate}\n"));
    }
    for blocker in &why.blocked_by {
        out.push_str(&format!(
            "{pad}  waits for {} ({}): {}\n",
            blocker.name, blocker.reason, blocker.message
        ));
        if let Some(layer) = &blocker.layer {
            render_into(layer, depth + 2, out);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crd::{AddonsLayerStatus, Blocker, InventoryEntry};
    use crate::plan::test_support::layer;
    use kube::api::ObjectMeta;
    use std::sync::Arc;

    fn with_status(
        name: &str,
        layer_state: &str,
        since: &str,
        status: AddonsLayerStatus,
    ) -> AddonsLayer {
        let mut this = layer(vec![]);
        this.metadata = ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        };
        let mut status = status;
        status.state = Some(layer_state.into());
        status.conditions.push(crate::crd::Condition {
            type_: layer_state.into(),
            status: "True".into(),
            last_transition_time: since.into(),
            ..Default::default()
        });
        this.status = Some(status);
        this
    }

    #[test]
    fn follows_blockers_down_to_the_object() {
        let now: Timestamp = "2026-11-26T12:00:00Z".parse().unwrap();
        let blocked = |on: &str| AddonsLayerStatus {
            blocked_by: vec![Blocker {
                name: on.into(),
                reason: "Unhealthy".into(),
                message: format!("layer {on} failed"),
            }],
            ..Default::default()
        };
        let base = AddonsLayerStatus {
            inventory: vec![
                InventoryEntry {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    namespace: Some("ns".into()),
                    name: "web".into(),
                    status: "Failed".into(),
                    reason: Some("ImagePullBackOff".into()),
                    message: Some("web-1/app: ImagePullBackOff: no image".into()),
                },
                InventoryEntry {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("ns".into()),
                    name: "fine".into(),
                    status: "Current".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let all: LayerSet = [
            with_status(
                "apps",
                state::APPLY_PENDING,
                "2026-11-26T11:58:30Z",
                blocked("infra"),
            ),
            with_status(
                "infra",
                state::APPLY_PENDING,
                "2026-11-26T11:59:00Z",
                blocked("base"),
            ),
            with_status("base", state::FAILED, "2026-11-26T11:59:50Z", base),
        ]
        .into_iter()
        .map(|l| (l.metadata.name.clone().unwrap(), Arc::new(l)))
        .collect();
        let text = render_why(&why("apps", &all, now).unwrap());
        assert_eq!(
            text,
            "apps is ApplyPending for 1m30s
  waits for infra (Unhealthy): layer infra failed
    infra is ApplyPending for 1m00s
      waits for base (Unhealthy): layer base failed
        base is Failed for 10s
          on Deployment ns/web: Failed (ImagePullBackOff): web-1/app: ImagePullBackOff: no image
"
        );
        assert!(why("nope", &all, now).is_none());
    }

    #[test]
    fn a_cycle_is_shown_once() {
        let now: Timestamp = "2026-11-26T12:00:00Z".parse().unwrap();
        let blocked = |on: &str| AddonsLayerStatus {
            blocked_by: vec![Blocker {
                name: on.into(),
                reason: "Cycle".into(),
                message: "cycle".into(),
            }],
            ..Default::default()
        };
        let all: LayerSet = [
            with_status("a", state::FAILED, "2026-11-26T12:00:00Z", blocked("b")),
            with_status("b", state::FAILED, "2026-11-26T12:00:00Z", blocked("a")),
        ]
        .into_iter()
        .map(|l| (l.metadata.name.clone().unwrap(), Arc::new(l)))
        .collect();
        let why = why("a", &all, now).unwrap();
        let b = why.blocked_by[0].layer.as_ref().unwrap();
        assert!(b.blocked_by[0].layer.is_none(), "a is not explained twice");
    }

    #[test]
    fn gates_are_shown_with_their_value_and_age() {
        let now: Timestamp = "2026-11-26T12:00:00Z".parse().unwrap();
        let status = AddonsLayerStatus {
            gates: vec![
                crate::crd::GateStatus {
                    name: "errors".into(),
                    state: "Holding".into(),
                    value: Some("0.001".into()),
                    since: "2026-11-26T11:59:15Z".into(),
                    checked_at: "2026-11-26T12:00:00Z".into(),
                    message: "0.001 < 0.01".into(),
                },
                crate::crd::GateStatus {
                    name: "latency".into(),
                    state: "Unknown".into(),
                    value: None,
                    since: "2026-11-26T11:58:00Z".into(),
                    checked_at: "2026-11-26T12:00:00Z".into(),
                    message: "no data: the query returned no series".into(),
                },
            ],
            ..Default::default()
        };
        let all: LayerSet = [with_status(
            "apps",
            state::GATE_UNKNOWN,
            "2026-11-26T11:58:00Z",
            status,
        )]
        .into_iter()
        .map(|l| (l.metadata.name.clone().unwrap(), Arc::new(l)))
        .collect();
        assert_eq!(
            render_why(&why("apps", &all, now).unwrap()),
            "apps is GateUnknown for 2m00s
  gate errors: Holding (value 0.001) for 45s: 0.001 < 0.01
  gate latency: Unknown for 2m00s: no data: the query returned no series
"
        );
    }
}
