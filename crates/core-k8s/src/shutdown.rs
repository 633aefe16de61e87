//! Graceful shutdown: a signal handler and an ordered, time-boxed stop sequence.
//!
//! The order matters: controllers stop first (no new writes), then the Lease is released (a
//! standby takes over at once instead of waiting for expiry), then the admin server drains,
//! then traces flush. Each stage has its own time budget so one stuck stage cannot eat the
//! others' time, and the whole sequence fits in Kubernetes' default grace period.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The stages of shutdown, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    StopControllers,
    ReleaseLease,
    DrainHttp,
    FlushTelemetry,
}

impl Stage {
    /// The most a stage may take. Together: 9 s, under the 10 s we promise.
    pub fn budget(self) -> Duration {
        match self {
            // The admission server keeps accepting for --shutdown-delay (≤ 3 s), then drains 2 s.
            Stage::StopControllers => Duration::from_secs(5),
            Stage::ReleaseLease => Duration::from_secs(2),
            Stage::DrainHttp => Duration::from_secs(1),
            Stage::FlushTelemetry => Duration::from_secs(1),
        }
    }
}

type StepFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What happened to one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepOutcome {
    pub stage: Stage,
    pub name: &'static str,
    pub finished: bool,
}

/// An ordered set of shutdown steps.
#[derive(Default)]
pub struct Sequence {
    steps: Vec<(Stage, &'static str, StepFuture)>,
}

impl std::fmt::Debug for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.steps.iter().map(|(stage, name, _)| (stage, name)))
            .finish()
    }
}

impl Sequence {
    pub fn add(
        &mut self,
        stage: Stage,
        name: &'static str,
        step: impl Future<Output = ()> + Send + 'static,
    ) {
        self.steps.push((stage, name, Box::pin(step)));
    }

    /// Runs the steps stage by stage (steps of one stage concurrently), each stage bounded by
    /// its budget. A step that overruns is abandoned and reported, and later stages still run.
    pub async fn run(mut self) -> Vec<StepOutcome> {
        self.steps.sort_by_key(|(stage, _, _)| *stage);
        let mut outcomes = Vec::with_capacity(self.steps.len());
        let mut steps = self.steps.into_iter().peekable();
        while let Some((stage, name, first)) = steps.next() {
            let mut group = vec![(name, first)];
            while let Some((_, name, step)) = steps.next_if(|(s, _, _)| *s == stage) {
                group.push((name, step));
            }
            let deadline = tokio::time::Instant::now() + stage.budget();
            let runs = group.into_iter().map(|(name, step)| async move {
                let finished = tokio::time::timeout_at(deadline, step).await.is_ok();
                if !finished {
                    tracing::warn!(?stage, step = name, "shutdown step overran its budget");
                }
                StepOutcome {
                    stage,
                    name,
                    finished,
                }
            });
            outcomes.extend(futures::future::join_all(runs).await);
        }
        outcomes
    }
}

/// Cancels `token` on the first SIGTERM or SIGINT. A second signal exits at once, for an
/// operator who really means it.
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received; stopping");
        token.cancel();
        wait_for_signal().await;
        tracing::warn!("second signal; exiting immediately");
        std::process::exit(130);
    });
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn recorder(
        log: &Arc<Mutex<Vec<&'static str>>>,
        name: &'static str,
        delay: Duration,
    ) -> impl Future<Output = ()> + Send + 'static {
        let log = log.clone();
        async move {
            tokio::time::sleep(delay).await;
            log.lock().unwrap().push(name);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stages_run_in_order_whatever_the_registration_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut seq = Sequence::default();
        seq.add(
            Stage::FlushTelemetry,
            "traces",
            recorder(&log, "traces", Duration::ZERO),
        );
        seq.add(
            Stage::DrainHttp,
            "admin",
            recorder(&log, "admin", Duration::ZERO),
        );
        seq.add(
            Stage::ReleaseLease,
            "lease",
            recorder(&log, "lease", Duration::from_millis(10)),
        );
        seq.add(
            Stage::StopControllers,
            "controller",
            recorder(&log, "controller", Duration::from_millis(50)),
        );
        let outcomes = seq.run().await;
        assert_eq!(
            *log.lock().unwrap(),
            vec!["controller", "lease", "admin", "traces"]
        );
        assert!(outcomes.iter().all(|o| o.finished));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_stage_is_abandoned_and_later_stages_still_run() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut seq = Sequence::default();
        seq.add(
            Stage::StopControllers,
            "stuck",
            std::future::pending::<()>(),
        );
        seq.add(
            Stage::StopControllers,
            "quick",
            recorder(&log, "quick", Duration::ZERO),
        );
        seq.add(
            Stage::ReleaseLease,
            "lease",
            recorder(&log, "lease", Duration::ZERO),
        );
        let started = tokio::time::Instant::now();
        let outcomes = seq.run().await;
        assert_eq!(*log.lock().unwrap(), vec!["quick", "lease"]);
        let stuck = outcomes.iter().find(|o| o.name == "stuck").unwrap();
        assert!(!stuck.finished);
        assert!(started.elapsed() <= Stage::StopControllers.budget() + Duration::from_millis(1));
    }

    #[test]
    fn budgets_fit_in_ten_seconds() {
        let total: Duration = [
            Stage::StopControllers,
            Stage::ReleaseLease,
            Stage::DrainHttp,
            Stage::FlushTelemetry,
        ]
        .iter()
        .map(|s| s.budget())
        .sum();
        assert!(total < Duration::from_secs(10), "{total:?}");
    }
}
