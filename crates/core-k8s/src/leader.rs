//! Leader election on a Lease `<service>-leader`.
//!
//! Only the leader acts; every replica keeps its caches warm and stays Ready, so a standby can
//! take over the moment the Lease frees. On shutdown the leader releases the Lease explicitly,
//! so its successor does not wait for the Lease to expire.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{Error, Result};

/// The name of a service's leader Lease.
pub fn lease_name(service: &str) -> String {
    format!("{service}-leader")
}

/// Renewal margin before the Lease expires: a third of its duration, at least one second.
pub fn renew_grace(duration: Duration) -> u64 {
    (duration.as_secs() / 3).max(1)
}

/// Observes whether this process leads. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Leadership {
    rx: watch::Receiver<bool>,
    fence: Option<Arc<Fence>>,
}

/// Re-reads the Lease before an action: the Lease in the API server, not this process's
/// belief, decides who may act. Two processes can both believe they lead for a moment (a
/// renewal that stalled, two first acquisitions racing); only the one the Lease names passes.
struct Fence {
    api: Api<Lease>,
    lease: String,
    identity: String,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("lease", &self.lease)
            .field("identity", &self.identity)
            .finish()
    }
}

/// Whether a Lease names `identity` as holder and has not expired at `now`.
pub fn lease_holds(lease: &Lease, identity: &str, now: jiff::Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return false;
    };
    if spec.holder_identity.as_deref() != Some(identity) {
        return false;
    }
    let (Some(renewed), Some(duration)) = (spec.renew_time.as_ref(), spec.lease_duration_seconds)
    else {
        return false;
    };
    let expires = renewed.0.as_second().saturating_add(i64::from(duration));
    now.as_second() < expires
}

impl Leadership {
    /// Always leading: for `--leader-elect=false`.
    pub fn always() -> Self {
        let (tx, rx) = watch::channel(true);
        // Keep the channel open for the life of the process.
        std::mem::forget(tx);
        Self { rx, fence: None }
    }

    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Confirms leadership against the API server right before a destructive action.
    /// Without leader election this is [`Leadership::is_leader`].
    pub async fn confirm(&self) -> bool {
        if !self.is_leader() {
            return false;
        }
        let Some(fence) = &self.fence else {
            return true;
        };
        match fence.api.get_opt(&fence.lease).await {
            Ok(Some(lease)) => {
                let holds = lease_holds(&lease, &fence.identity, jiff::Timestamp::now());
                if !holds {
                    tracing::warn!(lease = %fence.lease, identity = %fence.identity, "believed to lead but the Lease says otherwise; not acting");
                }
                holds
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(lease = %fence.lease, error = %e, "cannot confirm leadership; not acting");
                false
            }
        }
    }

    /// A receiver to await changes on.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }
}

/// Parameters of the leader election.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub service: String,
    /// The Lease's name ([`lease_name`] of the service unless told otherwise).
    pub lease: String,
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
}

/// Starts contending for the Lease. The returned task runs until `stop` is cancelled, then
/// steps down (gauge 0, Leadership false) and releases the Lease if it holds it.
pub async fn elect(
    client: Client,
    config: LeaseConfig,
    gauge: Gauge,
    stop: CancellationToken,
) -> Result<(Leadership, JoinHandle<()>)> {
    let lease = config.lease.clone();
    let duration = config.duration.as_secs().max(2);
    let manager = LeaseManagerBuilder::new(client.clone(), &lease)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(duration)
        .with_grace(renew_grace(config.duration))
        .with_field_manager(format!("strata-{}", config.service))
        .build()
        .await
        .map_err(|e| Error::Leader {
            lease: format!("{}/{lease}", config.namespace),
            reason: e.to_string(),
        })?;
    let (tx, rx) = watch::channel(false);
    gauge.set(0);
    let fence = Arc::new(Fence {
        api: Api::namespaced(client, &config.namespace),
        lease: lease.clone(),
        identity: config.identity.clone(),
    });
    let task = tokio::spawn(contend(
        manager,
        fence.clone(),
        lease.clone(),
        config.identity.clone(),
        tx,
        gauge,
        stop,
    ));
    Ok((
        Leadership {
            rx,
            fence: Some(fence),
        },
        task,
    ))
}

/// After a failed renewal, reads the Lease: when it still names us and has not expired, we
/// lead again. Returns whether to stop reading: we lead again, or another holder has it (the
/// manager reports that when it acts on it). A failed read, an expired Lease or none means
/// read again: the manager, which reports changes only, may renew or take it back silently
/// (its Lease expired while the API server was away, then it renewed unseen).
async fn read_lease_again(
    fence: &Fence,
    lease: &str,
    identity: &str,
    tx: &watch::Sender<bool>,
    gauge: &Gauge,
) -> bool {
    let now = jiff::Timestamp::now();
    match fence.api.get_opt(lease).await {
        Ok(Some(current)) if lease_holds(&current, identity, now) => {
            if !*tx.borrow() {
                tracing::info!(%lease, %identity, "still holding the Lease; leading again");
                gauge.set(1);
                tx.send_replace(true);
            }
            true
        }
        // Someone else's and still valid: the manager reports that when it acts on it.
        Ok(Some(current)) => current
            .spec
            .as_ref()
            .and_then(|spec| spec.holder_identity.as_deref())
            .is_some_and(|holder| holder != identity && lease_holds(&current, holder, now)),
        Ok(None) => false,
        Err(e) => {
            tracing::debug!(%lease, error = %e, "reading the Lease after a failed renewal; retrying");
            false
        }
    }
}

async fn contend(
    manager: LeaseManager,
    fence: Arc<Fence>,
    lease: String,
    identity: String,
    tx: watch::Sender<bool>,
    gauge: Gauge,
    stop: CancellationToken,
) {
    // After a failed renewal: read the Lease every second until it names us again or another
    // holder ([`read_lease_again`]). The manager reports changes only, so when it renews again
    // after the error it still believes it leads and says nothing; the Lease itself decides
    // whether to act again. One read was not enough: right after a restarted API server a read
    // fails too (403 while it warms its RBAC caches), or finds our Lease expired just before the
    // manager renews it, and the leader then stayed idle forever holding its Lease.
    let mut recheck = false;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            changed = manager.changed() => match changed {
                Ok(leading) => {
                    recheck = false;
                    if leading {
                        tracing::info!(%lease, %identity, "became leader");
                    } else {
                        tracing::warn!(%lease, %identity, "lost leadership");
                    }
                    gauge.set(i64::from(leading));
                    tx.send_replace(leading);
                }
                Err(e) => {
                    // A transient API error must not crash the process; while we cannot renew,
                    // we stop acting as leader to stay safe.
                    tracing::warn!(%lease, error = %e, "lease update failed; retrying");
                    if *tx.borrow() {
                        gauge.set(0);
                        tx.send_replace(false);
                    }
                    // The manager may report the same error at once again: never spin.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    recheck = !read_lease_again(&fence, &lease, &identity, &tx, &gauge).await;
                }
            },
            _ = tokio::time::sleep(Duration::from_secs(1)), if recheck => {
                recheck = !read_lease_again(&fence, &lease, &identity, &tx, &gauge).await;
            }
        }
    }
    gauge.set(0);
    tx.send_replace(false);
    // release() is a no-op unless we hold the Lease, so call it whatever we last observed:
    // a renewal may have succeeded in the instant before the stop.
    match tokio::time::timeout(Duration::from_secs(2), manager.release()).await {
        Ok(Ok(())) => tracing::info!(%lease, %identity, "stepped down"),
        Ok(Err(e)) => tracing::warn!(%lease, error = %e, "releasing leader lease failed"),
        Err(_) => tracing::warn!(%lease, "releasing leader lease timed out"),
    }
}

/// Delete parameters that make a delete conditional on the object being the one that was
/// read: the same incarnation (`uid`: not a successor created under the same name, as a
/// StatefulSet recreates its pods) and, when given, unchanged since (`resourceVersion`). The
/// second half of fencing: a process that lost its lease between [`Leadership::confirm`] and
/// the delete can still only delete what it decided on; the API server answers 409 otherwise.
pub fn conditional_delete(
    uid: Option<String>,
    resource_version: Option<String>,
    propagation: Option<kube::api::PropagationPolicy>,
) -> kube::api::DeleteParams {
    let preconditions =
        (uid.is_some() || resource_version.is_some()).then_some(kube::api::Preconditions {
            uid,
            resource_version,
        });
    kube::api::DeleteParams {
        preconditions,
        propagation_policy: propagation,
        ..kube::api::DeleteParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_and_grace() {
        assert_eq!(lease_name("rollout-operator"), "rollout-operator-leader");
        assert_eq!(renew_grace(Duration::from_secs(10)), 3);
        assert_eq!(renew_grace(Duration::from_secs(2)), 1);
        assert_eq!(renew_grace(Duration::from_secs(60)), 20);
    }

    #[test]
    fn lease_holder_and_expiry() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let lease = |holder: &str, renewed: &str| Lease {
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some(holder.to_string()),
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                lease_duration_seconds: Some(10),
                ..Default::default()
            }),
            ..Default::default()
        };
        let now: jiff::Timestamp = "2026-01-01T00:00:05Z".parse().unwrap();
        assert!(lease_holds(&lease("me", "2026-01-01T00:00:00Z"), "me", now));
        assert!(!lease_holds(
            &lease("other", "2026-01-01T00:00:00Z"),
            "me",
            now
        ));
        assert!(
            !lease_holds(&lease("me", "2025-12-31T23:59:50Z"), "me", now),
            "expired"
        );
        assert!(!lease_holds(&Lease::default(), "me", now));
    }

    #[test]
    fn always_leads() {
        let leadership = Leadership::always();
        assert!(leadership.is_leader());
        assert!(*leadership.subscribe().borrow());
    }

    #[test]
    fn conditional_deletes_carry_what_was_read() {
        let params = conditional_delete(
            Some("u-1".into()),
            Some("42".into()),
            Some(kube::api::PropagationPolicy::Background),
        );
        let preconditions = params.preconditions.unwrap();
        assert_eq!(preconditions.uid.as_deref(), Some("u-1"));
        assert_eq!(preconditions.resource_version.as_deref(), Some("42"));
        assert!(matches!(
            params.propagation_policy,
            Some(kube::api::PropagationPolicy::Background)
        ));
        // Nothing read, nothing to condition on.
        assert!(conditional_delete(None, None, None).preconditions.is_none());
    }
}
