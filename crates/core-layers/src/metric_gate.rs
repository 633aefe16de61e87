//! Metric gates (`spec.health.gates[]`): a layer whose objects are ready is Deployed only once
//! each gate's PromQL query has met its condition for the gate's `for`; within a gate's
//! `watch` after that, a breach fails the layer. A query that errors, returns no series or NaN,
//! or a Prometheus that cannot be reached, leaves the gate Unknown: never a pass, never a
//! failure — the layer waits in `GateUnknown`, saying why.
//!
//! Pure: the layer-controller reads Prometheus (`layer_reader::prometheus`) and hands the
//! readings here; validation is shared with the admission webhook.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use crate::crd::{AddonsLayer, GateStatus, MetricGate};

/// Gate states (`status.gates[].state`).
pub mod gate_state {
    pub const HOLDING: &str = "Holding";
    pub const BREACHED: &str = "Breached";
    pub const UNKNOWN: &str = "Unknown";
}

/// A comparison of the gate's value with a threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Condition {
    op: Op,
    threshold: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Condition {
    /// `< 0.01`, `<=5`, `> 0`, `>= 1e3`, `== 0`, `!= 0`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (op, rest) = [
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<", Op::Lt),
            (">", Op::Gt),
        ]
        .iter()
        .find_map(|(token, op)| text.strip_prefix(token).map(|rest| (*op, rest)))
        .ok_or_else(|| {
            format!("{text:?} does not start with <, <=, >, >=, == or != (e.g. \"< 0.01\")")
        })?;
        let threshold: f64 = rest
            .trim()
            .parse()
            .map_err(|_| format!("{text:?}: {:?} is not a number", rest.trim()))?;
        if !threshold.is_finite() {
            return Err(format!("{text:?}: the threshold must be a finite number"));
        }
        Ok(Self { op, threshold })
    }

    pub fn holds(&self, value: f64) -> bool {
        let t = self.threshold;
        match self.op {
            Op::Lt => value < t,
            Op::Le => value <= t,
            Op::Gt => value > t,
            Op::Ge => value >= t,
            Op::Eq => value == t,
            Op::Ne => value != t,
        }
    }
}

/// A gate as the controller judges it.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    pub name: String,
    pub query: String,
    pub condition: Condition,
    /// The condition's text, for messages.
    pub condition_text: String,
    pub hold_for: Duration,
    pub watch: Duration,
}

/// The layer's gates, or every error, each naming its field (`spec.health.gates[i].query`).
pub fn gates(layer: &AddonsLayer) -> Result<Vec<Gate>, Vec<String>> {
    let Some(health) = &layer.spec.health else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(health.gates.len());
    let mut errors = Vec::new();
    for (i, gate) in health.gates.iter().enumerate() {
        match compile(gate) {
            Ok(gate) => out.push(gate),
            Err(e) => errors.extend(e.into_iter().map(|e| format!("spec.health.gates[{i}].{e}"))),
        }
        if health.gates[..i].iter().any(|g| g.name == gate.name) {
            errors.push(format!(
                "spec.health.gates[{i}].name: {:?} is used by another gate",
                gate.name
            ));
        }
    }
    if let Some(prometheus) = &health.prometheus
        && !(prometheus.url.starts_with("http://") || prometheus.url.starts_with("https://"))
    {
        errors.push(format!(
            "spec.health.prometheus.url: {:?} is not an http:// or https:// URL",
            prometheus.url
        ));
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// One gate, or its errors (each starting with the field name).
fn compile(gate: &MetricGate) -> Result<Gate, Vec<String>> {
    let mut errors = Vec::new();
    if gate.name.trim().is_empty() {
        errors.push("name: must not be empty".to_string());
    }
    if gate.query.trim().is_empty() {
        errors.push("query: must not be empty".to_string());
    } else if let Err(e) = promql_parser::parser::parse(&gate.query) {
        errors.push(format!(
            "query {:?} is not PromQL: {}",
            gate.query,
            e.lines().next().unwrap_or_default()
        ));
    }
    let condition = Condition::parse(&gate.condition)
        .map_err(|e| errors.push(format!("condition: {e}")))
        .ok();
    let duration = |field: &str, value: &Option<String>, errors: &mut Vec<String>| {
        value.as_deref().map_or(Some(Duration::ZERO), |text| {
            core_k8s::args::parse_duration(text)
                .map_err(|e| errors.push(format!("{field}: {e}")))
                .ok()
        })
    };
    let hold_for = duration("for", &gate.for_, &mut errors);
    let watch = duration("watch", &gate.watch, &mut errors);
    match (condition, hold_for, watch) {
        (Some(condition), Some(hold_for), Some(watch)) if errors.is_empty() => Ok(Gate {
            name: gate.name.clone(),
            query: gate.query.clone(),
            condition,
            condition_text: gate.condition.trim().to_string(),
            hold_for,
            watch,
        }),
        _ => Err(errors),
    }
}

/// What one query gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    /// The number, and its text as Prometheus wrote it.
    Value(f64, String),
    /// Why there is no number: an error, no series, NaN, several series.
    Unknown(String),
}

/// The reading in a Prometheus `/api/v1/query` answer.
pub fn reading_of(answer: &Value) -> Reading {
    if answer["status"] != "success" {
        let error = answer["error"].as_str().unwrap_or("no error given");
        return Reading::Unknown(format!("Prometheus answered an error: {error}"));
    }
    let data = &answer["data"];
    let sample = match data["resultType"].as_str() {
        Some("scalar") => Some(&data["result"]),
        Some("vector") => match data["result"].as_array().map(Vec::as_slice) {
            Some([]) | None => {
                return Reading::Unknown("no data: the query returned no series".into());
            }
            Some([one]) => Some(&one["value"]),
            Some(many) => {
                return Reading::Unknown(format!(
                    "the query returned {} series; a gate needs one (aggregate it, e.g. with sum or max)",
                    many.len()
                ));
            }
        },
        other => {
            return Reading::Unknown(format!(
                "the query returned a {}; a gate needs a scalar or one series",
                other.unwrap_or("result of no type")
            ));
        }
    };
    let text = sample
        .and_then(|s| s.get(1))
        .and_then(Value::as_str)
        .unwrap_or_default();
    match text.parse::<f64>() {
        Ok(v) if v.is_nan() => Reading::Unknown("no data: the query returned NaN".into()),
        Ok(v) => Reading::Value(v, text.to_string()),
        Err(_) => Reading::Unknown(format!("not a number: {text:?}")),
    }
}

/// The gate's status after `reading` at `now`: its state's `since` kept while the state holds.
pub fn next_status(
    gate: &Gate,
    previous: Option<&GateStatus>,
    reading: &Reading,
    now: Timestamp,
) -> GateStatus {
    let now_text = core_status::augment::format_time(now);
    let (state, value, message) = match reading {
        Reading::Value(v, text) if gate.condition.holds(*v) => (
            gate_state::HOLDING,
            Some(text.clone()),
            format!("{text} {}", gate.condition_text),
        ),
        Reading::Value(_, text) => (
            gate_state::BREACHED,
            Some(text.clone()),
            format!("{text} is not {}", gate.condition_text),
        ),
        Reading::Unknown(why) => (gate_state::UNKNOWN, None, why.clone()),
    };
    let since = previous
        .filter(|p| p.state == state)
        .map(|p| p.since.clone())
        .unwrap_or_else(|| now_text.clone());
    GateStatus {
        name: gate.name.clone(),
        state: state.to_string(),
        value,
        since,
        checked_at: now_text,
        message,
    }
}

/// What the gates say about a layer whose objects are ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every gate held for its `for`.
    Pass,
    /// Every gate could be read; some do not hold, or not for long enough yet.
    Wait(String),
    /// Some gate cannot be read.
    Unknown(String),
}

/// Judges `statuses` (one per gate, in order) at `now`.
pub fn verdict(gates: &[Gate], statuses: &[GateStatus], now: Timestamp) -> Verdict {
    let mut unknown = Vec::new();
    let mut waiting = Vec::new();
    for (gate, status) in gates.iter().zip(statuses) {
        match status.state.as_str() {
            gate_state::UNKNOWN => unknown.push(format!("gate {}: {}", gate.name, status.message)),
            gate_state::BREACHED => waiting.push(format!("gate {}: {}", gate.name, status.message)),
            _ => {
                let held = held_for(status, now);
                if held < gate.hold_for {
                    waiting.push(format!(
                        "gate {}: {} for {}s of {}s",
                        gate.name,
                        status.message,
                        held.as_secs(),
                        gate.hold_for.as_secs()
                    ));
                }
            }
        }
    }
    if !unknown.is_empty() {
        Verdict::Unknown(unknown.join("; "))
    } else if !waiting.is_empty() {
        Verdict::Wait(waiting.join("; "))
    } else {
        Verdict::Pass
    }
}

/// How long the status's state has lasted at `now`.
pub fn held_for(status: &GateStatus, now: Timestamp) -> Duration {
    status
        .since
        .parse::<Timestamp>()
        .map(|since| now.duration_since(since).unsigned_abs())
        .unwrap_or_default()
}

/// The gates still watched `deployed_for` after the layer was Deployed, and the first that
/// broke among them (its message), if any.
pub fn breach_while_watched(
    gates: &[Gate],
    statuses: &[GateStatus],
    deployed_for: Duration,
) -> Option<String> {
    gates
        .iter()
        .zip(statuses)
        .find(|(gate, status)| deployed_for < gate.watch && status.state == gate_state::BREACHED)
        .map(|(gate, status)| {
            format!(
                "gate {} broke {}s after the layer was Deployed (watched for {}s): {}",
                gate.name,
                deployed_for.as_secs(),
                gate.watch.as_secs(),
                status.message
            )
        })
}

/// The longest watch of the gates: how long after Deployed the layer is still read.
pub fn longest_watch(gates: &[Gate]) -> Duration {
    gates.iter().map(|g| g.watch).max().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn layer(gates: Value) -> AddonsLayer {
        serde_json::from_value(json!({
            "apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer",
            "metadata": {"name": "apps"},
            "spec": {"version": "1", "source": {"name": "s", "path": "./"},
                     "health": {"gates": gates}},
        }))
        .unwrap()
    }

    #[test]
    fn conditions_table() {
        for (text, value, want) in [
            ("< 0.01", 0.005, true),
            ("< 0.01", 0.01, false),
            ("<=5", 5.0, true),
            ("> 0", 0.0, false),
            (">= 1e3", 1000.0, true),
            ("== 0", 0.0, true),
            ("!= 0", 0.0, false),
            ("< 1", f64::NAN, false),
        ] {
            assert_eq!(
                Condition::parse(text).unwrap().holds(value),
                want,
                "{text} {value}"
            );
        }
        for bad in ["0.01", "=< 1", "< one", "< inf", ""] {
            assert!(Condition::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn invalid_gates_name_their_field() {
        let errors = gates(&layer(json!([
            {"name": "errors", "query": "sum(rate(x[1m])", "condition": "< 1"},
            {"name": "latency", "query": "histogram_quantile(0.99, rate(h[5m]))", "condition": "below 1", "for": "2 minutes"},
            {"name": "latency", "query": "up", "condition": "> 0", "watch": "10m"},
        ])))
        .unwrap_err();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.health.gates[0].query \"sum(rate(x[1m])\" is not PromQL"),
            "{errors:?}"
        );
        assert!(
            errors[1]
                .starts_with("spec.health.gates[1].condition: \"below 1\" does not start with"),
            "{errors:?}"
        );
        assert!(
            errors[2].starts_with("spec.health.gates[1].for: "),
            "{errors:?}"
        );
        assert_eq!(
            errors[3],
            "spec.health.gates[2].name: \"latency\" is used by another gate"
        );
        let fine = gates(&layer(json!([
            {"name": "errors", "query": "sum(rate(errors_total[1m])) / sum(rate(requests_total[1m]))", "condition": "< 0.01", "for": "2m", "watch": "10m"},
        ])))
        .unwrap();
        assert_eq!(fine[0].hold_for, Duration::from_secs(120));
        assert_eq!(fine[0].watch, Duration::from_secs(600));
    }

    #[test]
    fn readings_table() {
        let vector = |values: &[&str]| {
            json!({"status": "success", "data": {"resultType": "vector", "result":
                values.iter().map(|v| json!({"metric": {}, "value": [1.0, v]})).collect::<Vec<_>>()}})
        };
        assert_eq!(
            reading_of(&vector(&["0.25"])),
            Reading::Value(0.25, "0.25".into())
        );
        assert_eq!(
            reading_of(
                &json!({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}})
            ),
            Reading::Value(3.0, "3".into())
        );
        for (answer, starts) in [
            (vector(&[]), "no data: the query returned no series"),
            (vector(&["NaN"]), "no data: the query returned NaN"),
            (vector(&["1", "2"]), "the query returned 2 series"),
            (
                json!({"status": "error", "error": "parse error"}),
                "Prometheus answered an error: parse error",
            ),
            (
                json!({"status": "success", "data": {"resultType": "matrix", "result": []}}),
                "the query returned a matrix",
            ),
        ] {
            match reading_of(&answer) {
                Reading::Unknown(why) => assert!(why.starts_with(starts), "{why}"),
                other => panic!("{answer}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_gate_passes_after_holding_for_its_window() {
        let gate = &gates(&layer(json!([
            {"name": "errors", "query": "x", "condition": "< 0.01", "for": "30s", "watch": "1m"}
        ])))
        .unwrap()[0];
        let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        let good = Reading::Value(0.001, "0.001".into());
        let first = next_status(gate, None, &good, t(0));
        let gates = std::slice::from_ref(gate);
        assert_eq!(
            verdict(gates, std::slice::from_ref(&first), t(0)),
            Verdict::Wait("gate errors: 0.001 < 0.01 for 0s of 30s".into())
        );
        let later = next_status(gate, Some(&first), &good, t(31));
        assert_eq!(
            later.since, first.since,
            "still holding since the first reading"
        );
        assert_eq!(
            verdict(gates, std::slice::from_ref(&later), t(31)),
            Verdict::Pass
        );
        // A breach restarts the window; no data is never a pass.
        let bad = next_status(
            gate,
            Some(&later),
            &Reading::Value(0.5, "0.5".into()),
            t(32),
        );
        assert_eq!(bad.state, gate_state::BREACHED);
        assert_eq!(
            verdict(gates, std::slice::from_ref(&bad), t(40)),
            Verdict::Wait("gate errors: 0.5 is not < 0.01".into())
        );
        let unknown = next_status(gate, Some(&bad), &Reading::Unknown("down".into()), t(41));
        assert_eq!(
            verdict(gates, std::slice::from_ref(&unknown), t(100)),
            Verdict::Unknown("gate errors: down".into())
        );
        let again = next_status(gate, Some(&unknown), &good, t(42));
        assert_eq!(again.since, core_status::augment::format_time(t(42)));
        // Watched for a minute after Deployed: a breach then is one; after it, not.
        assert!(
            breach_while_watched(gates, std::slice::from_ref(&bad), Duration::from_secs(59))
                .is_some()
        );
        assert!(
            breach_while_watched(gates, std::slice::from_ref(&bad), Duration::from_secs(60))
                .is_none()
        );
        assert!(
            breach_while_watched(gates, std::slice::from_ref(&again), Duration::from_secs(5))
                .is_none()
        );
        assert_eq!(longest_watch(gates), Duration::from_secs(60));
    }
}
