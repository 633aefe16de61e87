//! Pods told to prepare for a downscale that did not happen are told to undo.
//!
//! prepare-downscale POSTs to each pod going away before kube-apiserver has persisted the
//! downscale. The downscale can still fail to happen: a later call fails, recording its time
//! fails, the request runs out of time, another admission step refuses it, or the replicas go
//! back up before the pods are removed. A prepared pod that stays (an ingester flushed and
//! read-only) is an outage in waiting, and the anchor leaves such pods prepared
//! (grafana/rollout-operator#146).
//!
//! So each pod is marked (label [`PREPARED_LABEL`], time in [`PREPARED_AT`]) before it is
//! called. A pod that goes away takes its mark with it. When this server denies the downscale
//! itself, the pods are told to undo at once ([`undo_now`]); whatever else leaves a marked pod
//! in place is found by [`run`]: a marked pod its StatefulSet still wants (ordinal below
//! `spec.replicas`, not terminating), marked longer ago than `--prepare-downscale-undo-after`
//! (by then kube-apiserver has given up any request that could still remove it), gets the undo
//! DELETE, retried with back-off until it answers or is gone; its mark is removed once it
//! answers. Every replica of the server runs the loop; the DELETE is idempotent.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use core_k8s::Context;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use crate::server::App;
use crate::webhooks::{PREPARE_DOWNSCALE_LABEL, PrepareEndpoint};
use core_rollout::observed::{label, spec_replicas};

/// Marks a pod that was (or is about to be) told to prepare for a downscale.
pub const PREPARED_LABEL: &str = "strata.dev/prepared-for-downscale";
/// When the pod was marked (RFC 3339).
pub const PREPARED_AT: &str = "strata.dev/prepared-for-downscale-at";

/// How often the loop looks for marked pods.
const LOOP_EVERY: Duration = Duration::from_secs(5);
/// Back-off between undo attempts of one pod: doubling from the first, capped.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);

/// One pod told to prepare: where it lives and the URL it was called at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedPod {
    pub namespace: String,
    pub name: String,
    pub url: String,
}

/// Why a marked pod is left alone or told to undo, decided from what the cluster shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It is being removed, or its StatefulSet no longer wants it: the downscale happens.
    GoingAway,
    /// Marked too recently: the request that prepared it may still be persisted.
    Settling,
    /// Its StatefulSet still wants it: tell it to undo at this URL.
    Undo(String),
    /// Its StatefulSet still wants it, but it has no address (restarting): tried again later.
    NoAddress,
    /// Its StatefulSet is gone or no longer has a prepare endpoint: nothing can be called;
    /// the mark is dropped with this reason.
    Unmark(String),
}

/// The verdict on one marked pod. Pure: table-tested.
pub fn verdict(
    pod: &Pod,
    stateful_sets: &[StatefulSet],
    now: Timestamp,
    undo_after: Duration,
) -> Verdict {
    if pod.metadata.deletion_timestamp.is_some() {
        return Verdict::GoingAway;
    }
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "StatefulSet" && o.controller == Some(true));
    let Some(sts) = owner.and_then(|o| {
        stateful_sets
            .iter()
            .find(|s| s.metadata.uid.as_deref() == Some(o.uid.as_str()))
    }) else {
        return Verdict::Unmark("its StatefulSet is gone".into());
    };
    let sts_name = sts.metadata.name.as_deref().unwrap_or_default();
    let ordinal = name
        .strip_prefix(sts_name)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|n| n.parse::<i64>().ok());
    if ordinal.is_none_or(|n| n >= i64::from(spec_replicas(sts))) {
        return Verdict::GoingAway;
    }
    let marked_at = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PREPARED_AT))
        .and_then(|t| t.parse::<Timestamp>().ok());
    // An unreadable time counts as old: the mark is ours, a pod cannot stay prepared forever
    // because someone edited it.
    let settle = SignedDuration::try_from(undo_after).unwrap_or(SignedDuration::MAX);
    if marked_at.is_some_and(|at| now.duration_since(at) < settle) {
        return Verdict::Settling;
    }
    if label(&sts.metadata.labels, PREPARE_DOWNSCALE_LABEL) != Some("true") {
        return Verdict::Unmark(format!(
            "StatefulSet {sts_name} is no longer labelled {PREPARE_DOWNSCALE_LABEL}=true"
        ));
    }
    match PrepareEndpoint::of(sts) {
        Ok(endpoint) => endpoint.url(pod).map_or(Verdict::NoAddress, Verdict::Undo),
        Err(why) => Verdict::Unmark(why),
    }
}

/// Most marks written at once: a downscale of many pods is marked within the request's
/// deadline without opening a connection per pod.
const MARKS_IN_FLIGHT: usize = 16;

/// Marks the pods before they are called, so that whatever happens to the request they are
/// found again. Fails naming a pod that could not be marked.
pub async fn mark(app: &App, pods: &[PreparedPod]) -> Result<(), String> {
    use futures::StreamExt as _;
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let patch = json!({"metadata": {"labels": {PREPARED_LABEL: "true"}, "annotations": {PREPARED_AT: now}}});
    // Owned futures: borrowed ones trip the spawned handler's higher-ranked bounds.
    let marks: Vec<_> = pods
        .iter()
        .map(|pod| {
            let api: Api<Pod> = Api::namespaced(app.client.clone(), &pod.namespace);
            let (patch, who) = (patch.clone(), format!("{}/{}", pod.namespace, pod.name));
            let name = pod.name.clone();
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(drop)
                    .map_err(|e| format!("marking pod {who} failed: {e}"))
            }
        })
        .collect();
    let results: Vec<Result<(), String>> = futures::stream::iter(marks)
        .buffer_unordered(MARKS_IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The merge patch removing a pod's mark.
fn unmark() -> serde_json::Value {
    json!({"metadata": {"labels": {PREPARED_LABEL: null}, "annotations": {PREPARED_AT: null}}})
}

/// What one undo attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undone {
    /// The pod answered the DELETE (2xx) and its mark is removed.
    Answered,
    /// The pod is gone (or no longer marked): nothing left to undo.
    Gone,
    /// No answer or a refusal: try again later.
    Failed,
}

/// One undo attempt: DELETE, then remove the mark once the pod answered. A pod that no
/// longer exists or is no longer marked needs nothing.
pub async fn undo_once(app: &App, pod: &PreparedPod) -> Undone {
    let api: Api<Pod> = Api::namespaced(app.client.clone(), &pod.namespace);
    let answer = app.http.call("DELETE", &pod.url).await;
    let outcome = match answer {
        Ok(ref response) if response.is_success() => {
            match api
                .patch(&pod.name, &PatchParams::default(), &Patch::Merge(unmark()))
                .await
            {
                Ok(_) => Undone::Answered,
                Err(kube::Error::Api(e)) if e.code == 404 => Undone::Gone,
                // Undone but still marked: the loop calls it again (harmless) and unmarks.
                Err(e) => {
                    tracing::warn!(pod = %pod.name, namespace = %pod.namespace, error = %e, "removing the prepared mark failed");
                    Undone::Failed
                }
            }
        }
        _ => match api.get_opt(&pod.name).await {
            Ok(None) => Undone::Gone,
            Ok(Some(p)) if label(&p.metadata.labels, PREPARED_LABEL).is_none() => Undone::Gone,
            _ => Undone::Failed,
        },
    };
    let result = match outcome {
        Undone::Answered => "answered",
        Undone::Gone => "gone",
        Undone::Failed => "failed",
    };
    app.metrics
        .prepare_undo
        .get_or_create(&crate::metrics::UndoLabels { result })
        .inc();
    match (outcome, &answer) {
        (Undone::Failed, Err(e)) => {
            tracing::warn!(pod = %pod.name, namespace = %pod.namespace, error = %e, "undo of a prepared pod failed; retrying")
        }
        (Undone::Failed, Ok(r)) => {
            tracing::warn!(pod = %pod.name, namespace = %pod.namespace, status = r.status, "undo of a prepared pod refused; retrying")
        }
        (Undone::Answered, _) => {
            tracing::info!(pod = %pod.name, namespace = %pod.namespace, "pod told to undo its preparation for a downscale that did not happen")
        }
        _ => {}
    }
    outcome
}

/// Tells the pods to undo now: one attempt each (all at once) before the denial is answered,
/// then the ones that did not answer retried with back-off until they answer or are gone, in
/// tasks of their own. A pod still unanswered when the server stops keeps its mark, and
/// [`run`] takes it over.
pub async fn undo_now(app: &App, pods: &[PreparedPod]) {
    let first = futures::future::join_all(pods.iter().map(|pod| undo_once(app, pod))).await;
    for (pod, outcome) in pods.iter().zip(first) {
        if outcome != Undone::Failed {
            continue;
        }
        let (app, pod) = (app.clone(), pod.clone());
        tokio::spawn(async move {
            let mut wait = FIRST_RETRY;
            loop {
                tokio::time::sleep(wait).await;
                if undo_once(&app, &pod).await != Undone::Failed {
                    return;
                }
                wait = (wait * 2).min(MAX_RETRY);
            }
        });
    }
}

/// The loop: every few seconds, every marked pod in scope gets its [`verdict`]; the ones to
/// undo are called (each with its own back-off), the ones without an endpoint lose their mark.
pub async fn run(ctx: Arc<Context>, app: Arc<App>, undo_after: Duration) {
    let scopes: Vec<Api<Pod>> = ctx.watched_apis().into_iter().map(|(_, api)| api).collect();
    let marked = ListParams::default().labels(&format!("{PREPARED_LABEL}=true"));
    // Per pod uid: the next attempt's time and the back-off after it.
    let mut backoff: HashMap<String, (tokio::time::Instant, Duration)> = HashMap::new();
    loop {
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return,
            _ = tokio::time::sleep(LOOP_EVERY) => {}
        }
        let mut found = Vec::new();
        for pods in &scopes {
            match pods.list(&marked).await {
                Ok(list) => found.extend(list.items),
                Err(e) => {
                    tracing::warn!(error = %e, "listing pods prepared for a downscale failed")
                }
            }
        }
        backoff.retain(|uid, _| {
            found
                .iter()
                .any(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
        });
        let mut owners: BTreeMap<String, Vec<StatefulSet>> = BTreeMap::new();
        for pod in &found {
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            if !owners.contains_key(&namespace) {
                let api: Api<StatefulSet> = Api::namespaced(app.client.clone(), &namespace);
                match api.list(&ListParams::default()).await {
                    Ok(list) => owners.insert(namespace.clone(), list.items),
                    Err(e) => {
                        tracing::warn!(error = %e, %namespace, "listing StatefulSets failed");
                        continue;
                    }
                };
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if backoff
                .get(&uid)
                .is_some_and(|(next, _)| *next > tokio::time::Instant::now())
            {
                continue;
            }
            let name = pod.metadata.name.clone().unwrap_or_default();
            match verdict(pod, &owners[&namespace], Timestamp::now(), undo_after) {
                Verdict::GoingAway | Verdict::Settling | Verdict::NoAddress => {}
                Verdict::Undo(url) => {
                    let target = PreparedPod {
                        namespace,
                        name,
                        url,
                    };
                    if undo_once(&app, &target).await == Undone::Failed {
                        let wait = backoff.get(&uid).map_or(FIRST_RETRY, |(_, w)| *w);
                        backoff.insert(
                            uid,
                            (
                                tokio::time::Instant::now() + wait,
                                (wait * 2).min(MAX_RETRY),
                            ),
                        );
                    }
                }
                Verdict::Unmark(why) => {
                    tracing::warn!(pod = %name, %namespace, reason = %why, "a pod prepared for a downscale cannot be told to undo; dropping its mark");
                    let api: Api<Pod> = Api::namespaced(app.client.clone(), &namespace);
                    if let Err(e) = api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(unmark()))
                        .await
                    {
                        tracing::warn!(pod = %name, %namespace, error = %e, "removing the prepared mark failed");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::Value;

    const NOW: &str = "2026-01-01T12:00:00Z";

    fn sts(replicas: i32, labelled: bool, port: Option<&str>) -> StatefulSet {
        let mut annotations = serde_json::Map::new();
        annotations.insert(
            "grafana.com/prepare-downscale-http-path".into(),
            "ingester/prepare-shutdown".into(),
        );
        if let Some(port) = port {
            annotations.insert(
                "grafana.com/prepare-downscale-http-port".into(),
                port.into(),
            );
        }
        let labels = if labelled {
            json!({"grafana.com/prepare-downscale": "true"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "metadata": {"name": "ingester-zone-a", "namespace": "mimir", "uid": "sts-uid",
                "labels": labels, "annotations": Value::Object(annotations)},
            "spec": {"replicas": replicas, "serviceName": "ingester",
                "selector": {"matchLabels": {"name": "ingester-zone-a"}},
                "template": {"metadata": {}}}
        }))
        .unwrap()
    }

    fn pod(ordinal: u32, marked_at: Option<&str>, terminating: bool, owner_uid: &str) -> Pod {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("ingester-zone-a-{ordinal}"), "namespace": "mimir",
                "labels": {PREPARED_LABEL: "true"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "name": "ingester-zone-a", "uid": owner_uid, "controller": true}]},
            "status": {"podIP": format!("10.250.0.{}", 10 + ordinal)}
        }))
        .unwrap();
        if let Some(at) = marked_at {
            p.metadata.annotations = Some([(PREPARED_AT.to_string(), at.to_string())].into());
        }
        if terminating {
            p.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(NOW.parse().unwrap()),
            );
        }
        p
    }

    #[test]
    fn verdicts() {
        let old = Some("2026-01-01T11:58:00Z");
        let recent = Some("2026-01-01T11:59:50Z");
        let url = "http://10.250.0.12:80/ingester/prepare-shutdown";
        let restarting = {
            let mut p = pod(2, old, false, "sts-uid");
            p.status = None;
            p
        };
        let cases: Vec<(&str, Pod, StatefulSet, Verdict)> = vec![
            (
                "the downscale happened: ordinal at or past the replicas",
                pod(2, old, false, "sts-uid"),
                sts(2, true, Some("80")),
                Verdict::GoingAway,
            ),
            (
                "being removed",
                pod(2, old, true, "sts-uid"),
                sts(3, true, Some("80")),
                Verdict::GoingAway,
            ),
            (
                "wanted again, prepared 2 minutes ago",
                pod(2, old, false, "sts-uid"),
                sts(3, true, Some("80")),
                Verdict::Undo(url.into()),
            ),
            (
                "wanted, but restarting: no address to call yet",
                restarting,
                sts(3, true, Some("80")),
                Verdict::NoAddress,
            ),
            (
                "wanted, but the request may still be in flight",
                pod(2, recent, false, "sts-uid"),
                sts(3, true, Some("80")),
                Verdict::Settling,
            ),
            (
                "wanted, time unreadable: counts as old",
                pod(2, Some("yesterday"), false, "sts-uid"),
                sts(3, true, Some("80")),
                Verdict::Undo(url.into()),
            ),
            (
                "its StatefulSet replaced (another uid)",
                pod(2, old, false, "other-uid"),
                sts(3, true, Some("80")),
                Verdict::Unmark("its StatefulSet is gone".into()),
            ),
            (
                "no port to call any more",
                pod(2, old, false, "sts-uid"),
                sts(3, true, None),
                Verdict::Unmark(
                    "the grafana.com/prepare-downscale-http-port annotation is not set or empty."
                        .into(),
                ),
            ),
            (
                "no longer labelled for prepare-downscale",
                pod(2, old, false, "sts-uid"),
                sts(3, false, Some("80")),
                Verdict::Unmark(
                    "StatefulSet ingester-zone-a is no longer labelled grafana.com/prepare-downscale=true"
                        .into(),
                ),
            ),
        ];
        for (case, pod, sts, want) in cases {
            let got = verdict(&pod, &[sts], NOW.parse().unwrap(), Duration::from_secs(60));
            assert_eq!(got, want, "{case}");
        }
    }
}
