//! A leader-gated controller loop over one kind, with the shared reconcile metrics.
//!
//! Every replica runs the watch (so its cache is warm and `/readyz` is honest), but only the
//! leader reconciles. When a replica becomes leader, every object is reconciled once, so
//! nothing that changed during the hand-over is missed.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::runtime::Context;

/// An error a reconcile can return: it says which metrics category it belongs to.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    fn category(&self) -> &'static str;
}

impl ReconcileError for crate::Error {
    fn category(&self) -> &'static str {
        crate::Error::category(self)
    }
}

/// Registers `cache` with the readiness endpoint and marks it ready once `store` has synced.
pub fn report_when_synced<K>(readiness: &crate::admin::Readiness, cache: &str, store: Store<K>)
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let ready = readiness.register(cache.to_string());
    let mut synced = when_synced(store);
    tokio::spawn(async move {
        if synced.wait_for(|done| *done).await.is_ok() {
            ready.ready();
        }
    });
}

/// A signal that turns true once `store` holds its first full list, which any number of
/// tasks may await at once.
///
/// kube's own store readiness wakes only its most recent waiter (and a kube `Controller`
/// waits on it too), so several tasks awaiting it directly all but one sit out whatever
/// timeout they set. One task here re-polls it with a short timeout, which sees the memoised
/// value instead of hanging, and publishes the result. The receiver never turns true when the
/// store's writer is dropped before its first list.
pub fn when_synced<K>(store: Store<K>) -> tokio::sync::watch::Receiver<bool>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let (synced, receiver) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        loop {
            match tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready()).await {
                Ok(Ok(())) => {
                    let _ = synced.send(true);
                    return;
                }
                Ok(Err(_)) => return,
                Err(_) if synced.is_closed() => return,
                Err(_) => continue,
            }
        }
    });
    receiver
}

/// Runs a controller for `K` until the runtime's shutdown token fires.
///
/// `cache` names the cache for `/readyz`; `reconcile` is called only while leading.
pub async fn run<K, F, Fut, E>(
    ctx: Arc<Context>,
    cache: &str,
    api: Api<K>,
    config: watcher::Config,
    reconcile: F,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Debug + Unpin,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: ReconcileError,
{
    run_controller(ctx, cache, Controller::new(api, config), reconcile).await
}

/// Like [`run`], for a controller that already has its extra triggers (`watches`,
/// `reconcile_on`): leader-gated, metered, stopped by the shutdown token.
pub async fn run_controller<K, F, Fut, E>(
    ctx: Arc<Context>,
    cache: &str,
    controller: Controller<K>,
    reconcile: F,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Debug + Unpin,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: ReconcileError,
{
    report_when_synced(&ctx.readiness, cache, controller.store());

    // Reconcile everything once on each gain of leadership.
    let leadership = ctx.leadership.subscribe();
    let became_leader = futures::stream::unfold(leadership, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    });

    let reconcile = Arc::new(reconcile);
    let gated = move |object: Arc<K>, ctx: Arc<Context>| {
        let reconcile = reconcile.clone();
        async move {
            if !ctx.leadership.is_leader() {
                return Ok(Action::await_change());
            }
            let started = Instant::now();
            ctx.metrics.reconcile_total.inc();
            let result = reconcile(object, ctx.clone()).await;
            ctx.metrics
                .reconcile_duration_seconds
                .observe(started.elapsed().as_secs_f64());
            result
        }
    };
    let error_policy = |_: Arc<K>, error: &E, ctx: Arc<Context>| {
        ctx.metrics.observe_error(error.category());
        Action::requeue(Duration::from_secs(5))
    };

    let cache = cache.to_string();
    controller
        .reconcile_all_on(became_leader)
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(gated, error_policy, ctx.clone())
        .for_each(|result| {
            let cache = cache.clone();
            async move {
                match result {
                    Ok((object, _)) => tracing::debug!(%cache, object = %object, "reconciled"),
                    Err(kube::runtime::controller::Error::ReconcilerFailed(e, object)) => {
                        tracing::warn!(%cache, object = %object, error = %e, "reconcile failed")
                    }
                    Err(e) => tracing::debug!(%cache, error = %e, "controller event"),
                }
            }
        })
        .await;
    tracing::info!(%cache, "controller stopped");
}

/// kube's `default_backoff` (0.8 s doubling to 30 s) for a watch stream, except that a relist's
/// `Init` does not count as progress. kube's watcher emits `Init` before each list attempt and
/// its backoff resets on any item that is not an error, so a list that keeps failing (a CRD
/// that is not installed, a permission missing) was retried every 0.8–1.6 s for as long as
/// the process ran. Here only an object, or a completed list, resets it. `Init` is dropped
/// from the stream: use this after a reflector (which has seen it) or where nothing needs it.
pub fn watch_backoff<S, K>(
    stream: S,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    K: Send,
{
    kube::runtime::utils::StreamBackoff::new(
        stream.filter(|event| std::future::ready(!matches!(event, Ok(watcher::Event::Init)))),
        watcher::DefaultBackoff::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list that fails for good: `Init`, error, `Init`, error, ... Ten failures must take the
    /// doubling backoff's time, not ten times its first step.
    #[tokio::test(start_paused = true)]
    async fn a_relist_that_keeps_failing_backs_off() {
        let failing = || {
            futures::stream::iter((0..10).flat_map(|_| {
                [
                    Ok(watcher::Event::<()>::Init),
                    Err(watcher::Error::NoResourceVersion),
                ]
            }))
        };
        // kube's own: every Init resets it, so it never grows past its first step.
        let started = tokio::time::Instant::now();
        let _: Vec<_> =
            kube::runtime::utils::StreamBackoff::new(failing(), watcher::DefaultBackoff::default())
                .collect()
                .await;
        assert!(
            started.elapsed() < Duration::from_secs(16),
            "{:?}",
            started.elapsed()
        );
        let started = tokio::time::Instant::now();
        let items: Vec<_> = watch_backoff(failing()).collect().await;
        assert_eq!(items.len(), 10, "only the errors come through");
        // 0.8 s doubling (jittered down by at most half) capped at 30 s: nine waits are at
        // least 0.4+0.8+1.6+3.2+6.4+12.8+15+15+15 s; without the fix they were nine × ≤ 1.6 s.
        assert!(
            started.elapsed() > Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
    }
}
