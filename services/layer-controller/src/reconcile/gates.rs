//! Metric gates in a pass (see `core_layers::metric_gate`): once a layer's objects are ready
//! its gates are read from Prometheus; the layer is Deployed when each has held for its
//! `for`, waits (`Applying`, then `Failed` with `GateFailed` at the timeout) while one does
//! not, and waits in `GateUnknown` while one cannot be read. Deployed, it is read again every
//! `--gate-poll` until its longest `watch` has passed: a breach then fails it (and rolls it
//! back with `spec.rollback.enabled`).

use std::time::Duration;

use core_k8s::Context;
use jiff::Timestamp;
use kube::ResourceExt as _;

use crate::crd::{AddonsLayer, GateStatus};
use crate::keys::{reason, state};
use crate::plan;
use core_layers::metric_gate::{self, Gate, Reading, Verdict};
use layer_reader::prometheus::Prometheus;

use super::status::Report;
use super::{Shared, access};

/// How long one query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The default Prometheus from the controller's flags (`--prometheus-url`, its CA and token
/// files, read once at start).
pub(super) fn default_prometheus(
    url: Option<&str>,
    ca_file: Option<&std::path::Path>,
    token_file: Option<&std::path::Path>,
) -> Result<Option<Prometheus>, String> {
    let Some(url) = url.filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let ca = ca_file.map(read).transpose()?;
    let token = token_file
        .map(read)
        .transpose()?
        .map(|t| String::from_utf8_lossy(&t).into_owned());
    Prometheus::new(url, ca.as_deref(), token, QUERY_TIMEOUT)
        .map(Some)
        .map_err(|e| format!("--prometheus-url: {e}"))
}

/// Every gate of the layer read now, in order, each status following its `previous` one (none
/// for a new attempt: its windows start now).
async fn read_all(
    ctx: &Context,
    shared: &Shared,
    layer: &AddonsLayer,
    gates: &[Gate],
    previous: &[GateStatus],
) -> Vec<GateStatus> {
    let namespace = plan::SourceRef::of(layer, &shared.args.default_source_namespace).namespace;
    let prometheus = match access(ctx, shared, layer) {
        Ok(access) => {
            layer_reader::prometheus::for_layer(
                &access.client,
                layer,
                &namespace,
                shared.prometheus.as_ref(),
                QUERY_TIMEOUT,
            )
            .await
        }
        Err(e) => Err(e.to_string()),
    };
    let mut out = Vec::with_capacity(gates.len());
    for gate in gates {
        let reading = match &prometheus {
            Ok(Some(prometheus)) => prometheus.read(&gate.query).await,
            Ok(None) => Reading::Unknown(
                "no Prometheus to read: set the controller's --prometheus-url or spec.health.prometheus"
                    .into(),
            ),
            Err(e) => Reading::Unknown(e.clone()),
        };
        let before = previous.iter().find(|p| p.name == gate.name);
        out.push(metric_gate::next_status(
            gate,
            before,
            &reading,
            Timestamp::now(),
        ));
    }
    out
}

/// What the gates make of a layer whose objects are all ready: the report (with the gates'
/// statuses) and when to look again — `deployed` and `interval` as they are for a layer
/// without gates. `deployed` is the report the layer would make without
/// gates; `same_attempt` that the last pass was at this revision and generation too;
/// `already_deployed` that it passed them before (only a breach within a watch counts
/// then); `elapsed` how long the attempt has been applying, against `timeout`.
pub(super) async fn judge_gates(
    ctx: &Context,
    shared: &Shared,
    layer: &AddonsLayer,
    deployed: Report,
    (same_attempt, already_deployed): (bool, bool),
    (elapsed, timeout, interval): (Duration, Duration, Duration),
) -> (Report, Duration) {
    let Some(gates) = metric_gate::gates(layer).ok().filter(|g| !g.is_empty()) else {
        return (deployed, interval);
    };
    // A gate's window counts from this attempt's first reading: how it stood for the last
    // revision says nothing of this one.
    let previous = match &layer.status {
        Some(status) if same_attempt => status.gates.as_slice(),
        _ => &[],
    };
    let statuses = read_all(ctx, shared, layer, &gates, previous).await;
    let poll = shared.args.gate_poll;
    let now = Timestamp::now();
    let (mut report, next) = if already_deployed {
        // It passed its gates: from now on only a breach within a watch counts.
        let deployed_for = plan::state_since(layer, state::DEPLOYED)
            .map(|since| now.duration_since(since).unsigned_abs())
            .unwrap_or_default();
        match metric_gate::breach_while_watched(&gates, &statuses, deployed_for) {
            Some(breach) => (
                Report::new(state::FAILED, reason::GATE_FAILED, breach),
                Duration::from_secs(30).min(interval),
            ),
            None => {
                let watch_left = metric_gate::longest_watch(&gates).saturating_sub(deployed_for);
                let next = if watch_left.is_zero() {
                    interval
                } else {
                    poll.min(watch_left)
                };
                (deployed, next)
            }
        }
    } else {
        match metric_gate::verdict(&gates, &statuses, now) {
            Verdict::Pass => {
                let watched = metric_gate::longest_watch(&gates);
                let next = if watched.is_zero() { interval } else { poll };
                (deployed, next)
            }
            Verdict::Wait(why) if elapsed >= timeout => (
                Report::new(
                    state::FAILED,
                    reason::GATE_FAILED,
                    format!(
                        "the gates did not hold within {}s: {why}",
                        timeout.as_secs()
                    ),
                ),
                Duration::from_secs(30).min(interval),
            ),
            Verdict::Wait(why) => (
                Report::new(
                    state::APPLYING,
                    reason::PROGRESSING,
                    format!("objects ready; waiting for {why}"),
                ),
                poll,
            ),
            Verdict::Unknown(why) => {
                tracing::info!(layer = %layer.name_any(), "metric gate unknown: {why}");
                (
                    Report::new(
                        state::GATE_UNKNOWN,
                        state::GATE_UNKNOWN,
                        format!("objects ready; cannot judge {why}"),
                    ),
                    poll,
                )
            }
        }
    };
    report.gates = Some(statuses);
    (report, next)
}

/// Whether a Deployed layer is still within a gate's watch: it is read again then.
pub(super) fn watching(layer: &AddonsLayer) -> bool {
    let Ok(gates) = metric_gate::gates(layer) else {
        return false;
    };
    let watch = metric_gate::longest_watch(&gates);
    !watch.is_zero()
        && plan::state_since(layer, state::DEPLOYED)
            .is_some_and(|since| Timestamp::now().duration_since(since).unsigned_abs() < watch)
}
