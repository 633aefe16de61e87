//! Watching a rollout from the outside, on every pod event: what the fault-injection tests
//! check a rollout-operator against (never two zones down, never more than max-unavailable in
//! a zone, only old-revision pods deleted, each once).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::plane::PodDeletion;
use crate::support::{eventually, pod_ready};

/// Whether a pod counts as up: Ready and not terminating.
pub fn up(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && pod_ready(pod)
}

/// Waits until `total` pods are up on a revision other than the `old` ones.
pub async fn rollout_finished(
    pods: &Api<Pod>,
    old: &BTreeSet<String>,
    total: usize,
    within: Duration,
) -> Result<()> {
    eventually("the rollout finishes", within, || async {
        let list = pods.list(&Default::default()).await?.items;
        let updated = list
            .iter()
            .filter(|p| up(p))
            .filter(|p| {
                p.labels()
                    .get("controller-revision-hash")
                    .is_some_and(|h| !old.contains(h))
            })
            .count();
        Ok((updated == total).then_some(()))
    })
    .await
}

/// What a watch of every pod event saw during a rollout.
#[derive(Debug, Default)]
pub struct RolloutWatch {
    /// Most zones with a pod down at once, and most pods down in one zone, over every event.
    pub most_zones_down: usize,
    pub most_down_in_a_zone: usize,
    /// Every graceful pod deletion seen: (pod name, uid, revision hash). A pod removed at
    /// once, without a graceful phase (grace period 0), is never the operator's doing and is
    /// left out. From a watch the deleter is unknown otherwise: kwok, the fake kubelet, deletes
    /// terminating pods by name and now and then deletes one name twice, taking the pod just
    /// created in its place; where that matters, the API server's audit log tells
    /// (`Plane::pod_deletions`, [`judge_operator_deletions`]).
    pub deleted: Vec<(String, String, String)>,
    /// Events that broke a zone invariant, with what the watch saw then.
    pub violations: Vec<String>,
}

/// A running [`watch_rollout`].
#[derive(Debug)]
pub struct RolloutWatcher {
    /// Graceful deletions seen so far, as they happen.
    pub deletions: tokio::sync::watch::Receiver<usize>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<RolloutWatch>,
}

impl RolloutWatcher {
    /// Stops watching and returns what the watch saw.
    pub async fn finish(self) -> Result<RolloutWatch> {
        let _ = self.stop.send(());
        Ok(self.task.await?)
    }
}

/// Follows every pod event of `pods` until finished, checking the rollout invariants after
/// each one (pods down per zone of `group`, `replicas` each) and recording deletions.
pub fn watch_rollout(
    pods: Api<Pod>,
    group: &'static str,
    zones: &'static [&'static str],
    replicas: usize,
) -> RolloutWatcher {
    let (deletions, deletions_rx) = tokio::sync::watch::channel(0usize);
    let (stop_tx, mut stop) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut seen = RolloutWatch::default();
        let mut current: BTreeMap<String, Pod> = BTreeMap::new();
        let mut listing: BTreeMap<String, Pod> = BTreeMap::new();
        let mut events = std::pin::pin!(
            watcher(pods, watcher::Config::default())
                .default_backoff()
                .boxed()
        );
        loop {
            let event = tokio::select! {
                _ = &mut stop => return seen,
                next = events.next() => match next {
                    Some(Ok(event)) => event,
                    Some(Err(_)) => continue,
                    None => return seen,
                },
            };
            let hash = |p: &Pod| {
                p.labels()
                    .get("controller-revision-hash")
                    .cloned()
                    .unwrap_or_default()
            };
            let record_deletion = |p: &Pod, seen: &mut RolloutWatch| {
                seen.deleted
                    .push((p.name_any(), p.uid().unwrap_or_default(), hash(p)));
                deletions.send_modify(|n| *n += 1);
            };
            match event {
                // A (re)list: judged once complete, not pod by pod (half a list would show
                // whole zones missing).
                watcher::Event::Init => {
                    listing.clear();
                    continue;
                }
                watcher::Event::InitApply(p) => {
                    listing.insert(p.name_any(), p);
                    continue;
                }
                watcher::Event::InitDone => {
                    // Deletions that happened while the watch was away (an API server restart)
                    // show only as a difference between the two lists.
                    for before in current.values() {
                        if before.metadata.deletion_timestamp.is_some() {
                            continue;
                        }
                        let now = listing.get(&before.name_any());
                        let gone_or_terminating = match now {
                            Some(now) if now.uid() == before.uid() => {
                                now.metadata.deletion_timestamp.is_some()
                            }
                            _ => true,
                        };
                        if gone_or_terminating {
                            record_deletion(before, &mut seen);
                        }
                    }
                    current = std::mem::take(&mut listing)
                }
                watcher::Event::Apply(p) => {
                    let before = current.get(&p.name_any());
                    let same_pod = before.is_some_and(|b| b.uid() == p.uid());
                    let was_terminating =
                        same_pod && before.is_some_and(|b| b.metadata.deletion_timestamp.is_some());
                    if p.metadata.deletion_timestamp.is_some() && !was_terminating {
                        record_deletion(&p, &mut seen);
                    }
                    current.insert(p.name_any(), p);
                }
                // Removed: counted when it turned terminating (a removal without that phase
                // is not the operator's, see `RolloutWatch::deleted`).
                watcher::Event::Delete(p) => {
                    current.remove(&p.name_any());
                }
            }
            let down: Vec<usize> = zones
                .iter()
                .map(|zone| {
                    let prefix = format!("{group}-zone-{zone}-");
                    let ready = current
                        .values()
                        .filter(|p| p.name_any().starts_with(&prefix) && up(p))
                        .count();
                    replicas.saturating_sub(ready)
                })
                .collect();
            let zones_down = down.iter().filter(|d| **d > 0).count();
            let most = down.iter().copied().max().unwrap_or(0);
            seen.most_zones_down = seen.most_zones_down.max(zones_down);
            seen.most_down_in_a_zone = seen.most_down_in_a_zone.max(most);
            if zones_down > 1 {
                seen.violations
                    .push(format!("pods down in {zones_down} zones at once: {down:?}"));
            }
        }
    });
    RolloutWatcher {
        deletions: deletions_rx,
        stop: stop_tx,
        task,
    }
}

/// Judges the rollout-operator's pod deletions of `group` in `ns` from the API server's audit
/// log (`deletions`, see `Plane::pod_deletions`), which names who deleted what: exactly
/// `expected` pods, all on one of the `old` revisions, each once. The fake kubelet's deletions
/// are left out. Returns a one-line summary.
pub fn judge_operator_deletions(
    deletions: &[PodDeletion],
    ns: &str,
    group: &str,
    old: &BTreeSet<String>,
    expected: usize,
) -> Result<String> {
    let prefix = format!("{group}-zone-");
    let ours: Vec<&PodDeletion> = deletions
        .iter()
        .filter(|d| d.namespace == ns && d.name.starts_with(&prefix))
        .collect();
    let (operator, others): (Vec<&PodDeletion>, Vec<&PodDeletion>) = ours
        .into_iter()
        .partition(|d| d.user_agent.starts_with("strata-rollout-operator/"));
    let mut accepted: Vec<&PodDeletion> =
        operator.iter().copied().filter(|d| d.code == 200).collect();
    // A delete cut off by the operator's own death (a replica SIGKILLed mid-request: the API
    // server records 5xx, the client never read an answer) may still have been applied: the
    // pod then went on terminating, and the fake kubelet's deletion of it, still on an old
    // revision, is the first one after. That deletion stands for the operator's.
    for cut in operator.iter().filter(|d| d.code >= 500) {
        let position = deletions.iter().position(|d| std::ptr::eq(d, *cut));
        let finished = position.and_then(|p| {
            deletions[p + 1..]
                .iter()
                .find(|d| d.namespace == cut.namespace && d.name == cut.name && d.code == 200)
        });
        if let Some(finished) = finished
            && !finished.user_agent.starts_with("strata-rollout-operator/")
            && old.contains(&finished.revision)
        {
            accepted.push(finished);
        }
    }
    let not_old: Vec<&PodDeletion> = accepted
        .iter()
        .copied()
        .filter(|d| !old.contains(&d.revision))
        .collect();
    anyhow::ensure!(
        not_old.is_empty(),
        "the operator deleted pods on a new revision: {not_old:?}"
    );
    let uids: BTreeSet<&String> = accepted.iter().map(|d| &d.uid).collect();
    anyhow::ensure!(
        accepted.len() == expected && uids.len() == expected,
        "the operator must delete each of the {expected} old pods once: {accepted:?}"
    );
    Ok(format!(
        "the operator deleted {} pods ({} requests); other clients sent {} pod deletions ({:?})",
        accepted.len(),
        operator.len(),
        others.len(),
        others
            .iter()
            .map(|d| d.user_agent.as_str())
            .collect::<BTreeSet<_>>()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deletion(name: &str, uid: &str, revision: &str, agent: &str, code: u16) -> PodDeletion {
        PodDeletion {
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
            revision: revision.into(),
            user_agent: agent.into(),
            code,
        }
    }

    #[test]
    fn a_delete_cut_off_by_the_operators_death_counts_once_the_pod_went() {
        let old: BTreeSet<String> = ["r1".to_string()].into();
        let operator = "strata-rollout-operator/0.1.0";
        let kwok = "kwok/v0.8.0";
        let applied_then_cut = vec![
            deletion("g-zone-a-0", "u0", "r1", operator, 200),
            deletion("g-zone-a-1", "", "", operator, 504),
            deletion("g-zone-a-1", "u1", "r1", kwok, 200),
        ];
        assert!(judge_operator_deletions(&applied_then_cut, "ns", "g", &old, 2).is_ok());
        // Cut off and never applied: the pod is still there, nothing stands for it.
        let never_applied = vec![
            deletion("g-zone-a-0", "u0", "r1", operator, 200),
            deletion("g-zone-a-1", "", "", operator, 504),
        ];
        assert!(judge_operator_deletions(&never_applied, "ns", "g", &old, 2).is_err());
        // A refused delete (409) never stands for anything.
        let refused = vec![
            deletion("g-zone-a-0", "u0", "r1", operator, 200),
            deletion("g-zone-a-1", "", "", operator, 409),
            deletion("g-zone-a-1", "u1", "r1", kwok, 200),
        ];
        assert!(judge_operator_deletions(&refused, "ns", "g", &old, 2).is_err());
        // The same pod deleted twice by the operator is still a failure.
        let twice = vec![
            deletion("g-zone-a-0", "u0", "r1", operator, 200),
            deletion("g-zone-a-0", "u0", "r1", operator, 200),
        ];
        assert!(judge_operator_deletions(&twice, "ns", "g", &old, 2).is_err());
    }
}
