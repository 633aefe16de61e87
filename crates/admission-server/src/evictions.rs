//! The eviction records (`core_rollout::evictions`) read and written through the API: a claim
//! decides an eviction against the budget and every recorded eviction and records it with a
//! resourceVersion precondition; a release takes back a claim not acted on. Shared by the
//! webhook's eviction path and the rollout-operator's own deletions, so both count each other.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::{Api, Client};

use core_rollout::evictions::{
    Claimed, Recorded, Refusal, holder, record_patch, recorded, release_patch, still_evicted,
};
use core_rollout::observed::{Observed, name};
use core_rollout::zpdb::{self, Allowed, Zpdb};

/// How often a contended record is read and written again before giving up.
const ATTEMPTS: usize = 8;

/// Takes back an eviction [`claim`] recorded for a deletion that then did not happen (the pod
/// changed since it was read, say): otherwise the still-running pod would count as evicted
/// against its budget for up to [`core_rollout::evictions::TTL`], refusing other zones'
/// evictions meanwhile.
pub async fn release(client: &Client, namespace: &str, record: &Recorded) -> Result<(), String> {
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    for _ in 0..ATTEMPTS {
        let holder = match sts_api.get_opt(&record.holder).await {
            Ok(Some(holder)) => holder,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("reading StatefulSet {}: {e}", record.holder)),
        };
        let Some(patch) = release_patch(&holder, record) else {
            return Ok(());
        };
        match sts_api
            .patch(
                &record.holder,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => {
                return Err(format!(
                    "taking the eviction of {} back off StatefulSet {}: {e}",
                    record.pod, record.holder
                ));
            }
        }
    }
    Err(format!(
        "the eviction record on StatefulSet {} stayed contended for {ATTEMPTS} attempts",
        record.holder
    ))
}

/// Decides `pod`'s eviction against the budget *and* every eviction recorded by anyone, and
/// records it when allowed. `observed` is the namespace as listed or watched; the record's
/// write is guarded by the holder's resourceVersion, so when another eviction was recorded
/// since (or `observed` is behind) the write conflicts and the decision is made again on
/// the holder read fresh. `own_recent` are pods this caller deleted itself and may not see
/// recorded yet. Pods no budget covers are allowed without a record. Returns the holder as the
/// record's write left it, if one was written.
pub async fn claim(
    client: &Client,
    namespace: &str,
    pod_name: &str,
    mut observed: Observed,
    override_max: Option<i64>,
    own_recent: &[String],
) -> Result<(Claimed, Option<StatefulSet>), Refusal> {
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let unrecorded = |allowed| {
        (
            Claimed {
                allowed,
                record: None,
            },
            None,
        )
    };
    for _ in 0..ATTEMPTS {
        let zpdbs: Vec<Zpdb> = observed
            .zpdbs
            .iter()
            .filter_map(|z| zpdb::parse(z).ok())
            .collect();
        let Some(pod) = observed
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(pod_name))
            .cloned()
        else {
            return Ok(unrecorded(Allowed::NotRunning)); // gone already: nothing left to disrupt
        };
        if zpdb::not_running(&pod) {
            return Ok(unrecorded(Allowed::NotRunning));
        }
        // One budget with a holder is recorded; otherwise (out of scope, several budgets —
        // which `decide` reports — or no StatefulSet selected) there is nothing to record.
        let recordable = match zpdb::covering(&pod, &zpdbs).as_slice() {
            [budget] => {
                holder(budget, &observed.stateful_sets).map(|h| ((*budget).clone(), h.clone()))
            }
            _ => None,
        };
        let Some((budget, holder)) = recordable else {
            return zpdb::decide(&pod, &observed, &zpdbs, override_max, Timestamp::now())
                .map(unrecorded)
                .map_err(Refusal::Denied);
        };
        let now = Timestamp::now();
        let mut evicted = still_evicted(&recorded(&holder, &budget.name, now), &observed.pods);
        evicted.extend(own_recent.iter().cloned());
        evicted.retain(|p| p != pod_name);
        observed.recently_evicted = evicted;
        let allowed = zpdb::decide(&pod, &observed, &zpdbs, override_max, now);
        tracing::debug!(
            pod = pod_name,
            holder = name(&holder),
            resource_version = ?holder.metadata.resource_version,
            recently_evicted = ?observed.recently_evicted,
            allowed = allowed.is_ok(),
            "eviction decided against the recorded evictions"
        );
        let allowed = allowed.map_err(Refusal::Denied)?;
        let patch = record_patch(&holder, &budget.name, pod_name, now);
        match sts_api
            .patch(
                name(&holder),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(patched) => {
                let claimed = Claimed {
                    allowed,
                    record: Some(Recorded {
                        holder: name(&holder).to_string(),
                        zpdb: budget.name.clone(),
                        pod: pod_name.to_string(),
                        at: now,
                    }),
                };
                return Ok((claimed, Some(patched)));
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                // Only the holder is read again: its record is what the write raced with.
                let fresh = sts_api.get_opt(name(&holder)).await.map_err(|e| {
                    Refusal::Unavailable(format!("reading StatefulSet {}: {e}", name(&holder)))
                })?;
                observed
                    .stateful_sets
                    .retain(|s| s.metadata.name != holder.metadata.name);
                observed.stateful_sets.extend(fresh);
                continue;
            }
            Err(e) => {
                return Err(Refusal::Unavailable(format!(
                    "recording the eviction on StatefulSet {}: {e}",
                    name(&holder)
                )));
            }
        }
    }
    Err(Refusal::Unavailable(format!(
        "the eviction record stayed contended for {ATTEMPTS} attempts"
    )))
}

/// ZoneAwarePodDisruptionBudgets, read as dynamic objects (the CRD may not be installed).
pub fn zpdb_resource() -> ApiResource {
    ApiResource::erase::<core_rollout::crd::ZoneAwarePodDisruptionBudget>(&())
}

/// Pods, StatefulSets and ZPDBs of `namespace`, read fresh.
pub async fn list(client: &Client, namespace: &str) -> Result<Observed, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let ar = zpdb_resource();
    let zpdbs: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let lp = ListParams::default();
    let (pods, sts, zpdbs) = tokio::join!(pods.list(&lp), sts.list(&lp), zpdbs.list(&lp));
    let mut observed = Observed {
        pods: pods.map_err(|e| format!("listing pods: {e}"))?.items,
        stateful_sets: sts.map_err(|e| format!("listing statefulsets: {e}"))?.items,
        ..Observed::default()
    };
    // A namespace without the ZPDB CRD simply has no budgets.
    if let Ok(list) = zpdbs {
        observed.zpdbs = list
            .items
            .into_iter()
            .filter_map(|z| core_k8s::apply::typed_value(&z, &ar))
            .collect();
    }
    Ok(observed)
}
