//! What the pod-eviction webhook decides on, from watches instead of a LIST per review.
//!
//! A node drain sends a burst of evictions, most of them refused and retried at once. Read
//! fresh, each review cost three LISTs (pods, StatefulSets, budgets): under a client-side rate
//! limit (the anchor's default 5 requests/s per API group, which the drop-in keeps) a burst
//! queued behind its own reads until kube-apiserver gave up on the webhook — the stall of the
//! anchor's v0.38.0 changelog, which our drop-in reproduced under its defaults. From a cache a
//! refusal costs no request at all and an allowed eviction one write: its record on the
//! budget's holder StatefulSet, guarded by the holder's resourceVersion, so a decision on a
//! cache that is behind fails the write (409) and is made again on the holder read fresh
//! (`evictions::claim`). A namespace is watched from its first eviction review on; a watch
//! that has not listed yet, or whose last event was an error, is not trusted: the review
//! lists fresh, as before.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DynamicObject;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};

use core_k8s::controller::when_synced;
use core_rollout::observed::Observed;

/// How long the first review of a namespace waits for its watches' first lists before it
/// reads fresh instead.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(3);

/// One namespace's watches.
struct Namespace {
    pods: Store<Pod>,
    stateful_sets: Store<StatefulSet>,
    zpdbs: Store<DynamicObject>,
    /// Per watch: its last event was not an error.
    healthy: [Arc<AtomicBool>; 3],
    /// Per watch: true once it has listed (see `core_k8s::controller::when_synced`: a
    /// store's own readiness wakes only the last of several waiting reviews).
    listed: [tokio::sync::watch::Receiver<bool>; 3],
}

impl Namespace {
    fn trusted(&self) -> bool {
        self.healthy.iter().all(|h| h.load(Ordering::Relaxed))
    }
}

/// The watched namespaces, each started by its first eviction review (shared by clones).
#[derive(Clone, Default)]
pub struct EvictionCache {
    namespaces: Arc<std::sync::Mutex<HashMap<String, Arc<Namespace>>>>,
    /// Per namespace: the claims' turn, and the holders as this server's last writes left them.
    claims: Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Holders>>>>>,
}

/// Holder StatefulSets by name, as the record writes of this server returned them: newer than
/// the watch until it catches up.
#[derive(Debug, Default)]
pub struct Holders(HashMap<String, StatefulSet>);

/// A namespace's turn to claim an eviction (see [`EvictionCache::claims`]).
#[derive(Debug)]
pub struct Claims(tokio::sync::OwnedMutexGuard<Holders>);

impl Claims {
    /// Replaces each StatefulSet of `stateful_sets` this server wrote more recently than it
    /// was read.
    pub fn overlay(&self, stateful_sets: &mut [StatefulSet]) {
        for sts in stateful_sets.iter_mut() {
            let Some(name) = sts.metadata.name.as_deref() else {
                continue;
            };
            if let Some(written) = self.0.0.get(name)
                && newer(written, sts)
            {
                *sts = written.clone();
            }
        }
    }

    /// Keeps the holder a record's write returned.
    pub fn wrote(&mut self, holder: Option<StatefulSet>) {
        if let Some(holder) = holder
            && let Some(name) = holder.metadata.name.clone()
        {
            self.0.0.insert(name, holder);
        }
    }
}

/// Whether `a` is a later version of the object than `b`. resourceVersions are opaque to
/// clients, but kube-apiserver's (etcd's revision) are increasing integers; anything else is
/// taken as not newer, so the watch's copy is used and a stale one only costs a conflict.
fn newer(a: &StatefulSet, b: &StatefulSet) -> bool {
    let version = |s: &StatefulSet| {
        s.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    a.metadata.uid == b.metadata.uid
        && matches!((version(a), version(b)), (Some(a), Some(b)) if a > b)
}

impl std::fmt::Debug for EvictionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let namespaces = self.namespaces.lock().map(|n| n.len()).unwrap_or_default();
        f.debug_struct("EvictionCache")
            .field("namespaces", &namespaces)
            .finish()
    }
}

impl EvictionCache {
    /// Waits for `namespace`'s turn to claim an eviction: one claim at a time per namespace in
    /// this server, each seeing the holders as the previous ones wrote them.
    pub async fn claims(&self, namespace: &str) -> Claims {
        let turn = self
            .claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(namespace.to_string())
            .or_default()
            .clone();
        Claims(turn.lock_owned().await)
    }

    /// The pods, StatefulSets and budgets of `namespace` from its watches (started now if
    /// this is its first review); `None` when they cannot be trusted yet, so the caller reads
    /// fresh.
    pub async fn observed(&self, client: &Client, namespace: &str) -> Option<Observed> {
        let watched = {
            let mut namespaces = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
            namespaces
                .entry(namespace.to_string())
                .or_insert_with(|| Arc::new(watch(client, namespace)))
                .clone()
        };
        let all_listed = async {
            for mut listed in watched.listed.clone() {
                listed.wait_for(|done| *done).await.ok()?;
            }
            Some(())
        };
        let wait = tokio::time::timeout(FIRST_LIST_WAIT, all_listed).await;
        if !matches!(wait, Ok(Some(()))) || !watched.trusted() {
            return None;
        }
        let ar = crate::evictions::zpdb_resource();
        tracing::debug!(
            %namespace,
            pods = watched.pods.len(),
            stateful_sets = watched.stateful_sets.len(),
            zpdbs = watched.zpdbs.len(),
            "eviction decision from the watches"
        );
        Some(Observed {
            pods: watched.pods.state().iter().map(|p| (**p).clone()).collect(),
            stateful_sets: watched
                .stateful_sets
                .state()
                .iter()
                .map(|s| (**s).clone())
                .collect(),
            zpdbs: watched
                .zpdbs
                .state()
                .iter()
                .filter_map(|z| core_k8s::apply::typed_value(z, &ar))
                .collect(),
            ..Observed::default()
        })
    }
}

/// Starts the three watches of `namespace`, for as long as the process runs.
fn watch(client: &Client, namespace: &str) -> Namespace {
    let healthy: [Arc<AtomicBool>; 3] = Default::default();
    let pods = reflect(
        Api::<Pod>::namespaced(client.clone(), namespace),
        (),
        healthy[0].clone(),
        namespace,
    );
    let stateful_sets = reflect(
        Api::<StatefulSet>::namespaced(client.clone(), namespace),
        (),
        healthy[1].clone(),
        namespace,
    );
    let ar = crate::evictions::zpdb_resource();
    let zpdbs = reflect(
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &ar),
        ar,
        healthy[2].clone(),
        namespace,
    );
    let listed = [
        when_synced(pods.clone()),
        when_synced(stateful_sets.clone()),
        when_synced(zpdbs.clone()),
    ];
    Namespace {
        pods,
        stateful_sets,
        zpdbs,
        healthy,
        listed,
    }
}

fn reflect<K>(
    api: Api<K>,
    dynamic: K::DynamicType,
    healthy: Arc<AtomicBool>,
    namespace: &str,
) -> Store<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync,
    K: 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let kind = K::kind(&dynamic).to_string();
    let writer = reflector::store::Writer::new(dynamic);
    let reader = writer.as_reader();
    let namespace = namespace.to_string();
    // Managed fields are most of an object's size and never read here.
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o: &mut K| o.meta_mut().managed_fields = None);
    tokio::spawn(reflector::reflector(writer, events).for_each(move |event| {
        match event {
            Ok(_) => healthy.store(true, Ordering::Relaxed),
            Err(e) => {
                healthy.store(false, Ordering::Relaxed);
                tracing::warn!(error = %e, %namespace, %kind, "watching for eviction decisions (retrying with back-off; reviews read fresh meanwhile)");
            }
        }
        std::future::ready(())
    }));
    reader
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sts(name: &str, uid: &str, version: &str, record: &str) -> StatefulSet {
        serde_json::from_value(serde_json::json!({"metadata": {
            "name": name, "uid": uid, "resourceVersion": version,
            "annotations": {"strata.dev/recent-evictions": record},
        }}))
        .unwrap()
    }

    #[tokio::test]
    async fn a_claim_sees_the_holders_as_this_servers_last_writes_left_them() {
        let cache = EvictionCache::default();
        let mut claims = cache.claims("mimir").await;
        claims.wrote(Some(sts("ingester-zone-a", "u1", "120", "written")));
        drop(claims);
        // (watched copy, expected after the overlay)
        for (watched, expected) in [
            // The watch is behind the write: the write's copy.
            (sts("ingester-zone-a", "u1", "100", "watched"), "written"),
            // The watch caught up (or another server wrote since): the watch's.
            (sts("ingester-zone-a", "u1", "130", "watched"), "watched"),
            // Another object under the same name: never mixed up.
            (sts("ingester-zone-a", "u2", "100", "watched"), "watched"),
            // A version that is not a number: the watch's (a stale one costs a conflict).
            (sts("ingester-zone-a", "u1", "x", "watched"), "watched"),
            // Another StatefulSet: untouched.
            (sts("store-gateway-zone-a", "u1", "1", "watched"), "watched"),
        ] {
            let claims = cache.claims("mimir").await;
            let mut all = vec![watched.clone()];
            claims.overlay(&mut all);
            let record =
                all[0].metadata.annotations.as_ref().unwrap()["strata.dev/recent-evictions"]
                    .clone();
            assert_eq!(record, expected, "{:?}", watched.metadata);
        }
        // Another namespace has its own turn and holders.
        let other = cache.claims("loki").await;
        let mut all = vec![sts("ingester-zone-a", "u1", "100", "watched")];
        other.overlay(&mut all);
        assert_eq!(all[0].metadata.resource_version.as_deref(), Some("100"));
    }
}
