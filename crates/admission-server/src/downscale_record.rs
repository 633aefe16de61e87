//! Recording `grafana.com/last-downscale` after the downscale has landed, not during its
//! admission.
//!
//! A write to a StatefulSet while a request to change it is being admitted bumps its
//! resourceVersion, so kube-apiserver answers the admitted request with a conflict whenever
//! that request carries the version it read: an HPA's update of `/scale` always does. The
//! anchor patches the StatefulSet during admission, so an HPA scaling a prepared zone never
//! gets its downscale through (grafana/rollout-operator#303). Here the admitted downscale is
//! remembered in this process ([`PendingDownscales`], counted by every later decision as the
//! StatefulSet's time), and the annotation is written once the StatefulSet shows the new
//! replica count.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use core_rollout::keys;

/// How long an admitted downscale is waited for. kube-apiserver gives up on a request after
/// its own timeout (60 s by default); a downscale not seen by then was refused after this
/// webhook (another webhook, a conflict) and is not recorded.
pub const LANDING_WAIT: Duration = Duration::from_secs(75);

/// How long an entry outlives the write of its time.
const PENDING_AFTER_RECORD: Duration = Duration::from_secs(60);

/// How often the StatefulSet is read while waiting for the downscale to land.
const LANDING_POLL: Duration = Duration::from_millis(100);

/// How long a landed downscale's record is retried before it is given up (logged as an error;
/// the other zones were held by the pending entry meanwhile).
pub const RECORD_RETRY_FOR: Duration = Duration::from_secs(600);

/// Admitted downscales whose time is not on their StatefulSet yet, by (namespace, name).
#[derive(Clone, Debug, Default)]
pub struct PendingDownscales(Arc<Mutex<HashMap<(String, String), Timestamp>>>);

impl PendingDownscales {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Timestamp>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The pending downscales of `namespace`, by StatefulSet name.
    pub fn in_namespace(&self, namespace: &str) -> BTreeMap<String, Timestamp> {
        self.lock()
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((_, name), at)| (name.clone(), *at))
            .collect()
    }

    fn insert(&self, namespace: &str, name: &str, at: Timestamp) {
        let mut pending = self.lock();
        let entry = pending
            .entry((namespace.to_string(), name.to_string()))
            .or_insert(at);
        *entry = (*entry).max(at);
    }

    /// Forgets the entry for `at`, unless a later downscale of the same StatefulSet replaced it.
    fn settle(&self, namespace: &str, name: &str, at: Timestamp) {
        let mut pending = self.lock();
        let key = (namespace.to_string(), name.to_string());
        if pending.get(&key) == Some(&at) {
            pending.remove(&key);
        }
    }
}

/// The downscale admitted for StatefulSet `namespace/name` (object `uid`) to `replicas`.
#[derive(Clone, Debug)]
pub struct Admitted {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub replicas: i64,
    pub at: Timestamp,
}

/// Remembers `admitted` at once, then writes its time on the StatefulSet once the downscale
/// has landed, in a task of its own.
pub fn record_when_landed(client: kube::Client, pending: PendingDownscales, admitted: Admitted) {
    pending.insert(&admitted.namespace, &admitted.name, admitted.at);
    tokio::spawn(async move {
        let api: Api<StatefulSet> = Api::namespaced(client, &admitted.namespace);
        match landed(&api, &admitted).await {
            Landing::Landed => {
                record(&api, &admitted).await;
                // Kept a while after the write, for a decision whose read of the StatefulSets
                // began before it.
                tokio::time::sleep(PENDING_AFTER_RECORD).await;
            }
            Landing::Replaced => tracing::info!(
                statefulset = %admitted.name, namespace = %admitted.namespace,
                "the StatefulSet was replaced before its admitted downscale landed; nothing recorded"
            ),
            Landing::NotSeen => tracing::info!(
                statefulset = %admitted.name, namespace = %admitted.namespace,
                replicas = admitted.replicas,
                "the admitted downscale did not happen (refused after this webhook?); nothing recorded"
            ),
        }
        pending.settle(&admitted.namespace, &admitted.name, admitted.at);
    });
}

enum Landing {
    Landed,
    Replaced,
    NotSeen,
}

async fn landed(api: &Api<StatefulSet>, admitted: &Admitted) -> Landing {
    let deadline = Instant::now() + LANDING_WAIT;
    while Instant::now() < deadline {
        tokio::time::sleep(LANDING_POLL).await;
        let Ok(found) = api.get_opt(&admitted.name).await else {
            continue;
        };
        let Some(sts) = found else {
            return Landing::Replaced;
        };
        if sts.metadata.uid.as_deref() != Some(admitted.uid.as_str()) {
            return Landing::Replaced;
        }
        let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        if i64::from(replicas) <= admitted.replicas {
            return Landing::Landed;
        }
    }
    Landing::NotSeen
}

/// Writes the time, retried with a growing pause; the uid in the patch makes it fail rather
/// than land on a StatefulSet recreated under the same name.
async fn record(api: &Api<StatefulSet>, admitted: &Admitted) {
    let time = admitted.at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let patch =
        json!({"metadata": {"uid": admitted.uid, "annotations": {keys::LAST_DOWNSCALE: time}}});
    let started = Instant::now();
    let mut pause = Duration::from_millis(200);
    loop {
        match api
            .patch(
                &admitted.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return,
            // Gone or replaced (the uid no longer matches): nothing to record on. Any other
            // conflict is retried like any failure.
            Err(kube::Error::Api(e))
                if e.code == 404
                    || (e.code == 409 && e.message.contains("UID in precondition")) =>
            {
                tracing::info!(
                    statefulset = %admitted.name, namespace = %admitted.namespace, error = %e,
                    "the StatefulSet is gone or was replaced; its downscale time is not recorded"
                );
                return;
            }
            Err(e) if started.elapsed() >= RECORD_RETRY_FOR => {
                tracing::error!(
                    statefulset = %admitted.name, namespace = %admitted.namespace, error = %e,
                    "recording {} failed for {RECORD_RETRY_FOR:?}; giving up", keys::LAST_DOWNSCALE
                );
                return;
            }
            Err(e) => {
                tracing::warn!(
                    statefulset = %admitted.name, namespace = %admitted.namespace, error = %e,
                    "recording {} failed; retrying", keys::LAST_DOWNSCALE
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(10));
            }
        }
    }
}
