//! A node drain's eviction storm through kube-apiserver, shared by the e2e scenario
//! (`tests/drain.rs`) and the benchmark beside the anchor (`examples/drain_bench.rs`).
//!
//! Every pod of some zone-aware groups (one ZoneAwarePodDisruptionBudget each, one unavailable
//! pod allowed) is evicted at once, each refusal retried a few milliseconds later, so
//! kube-apiserver calls the pod-eviction webhook as fast as the callers go. What the storm is
//! judged by comes from outside the webhook: the pods' states from a watch of its own, and the
//! answers kube-apiserver gave.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::EvictParams;
use kube::runtime::watcher;

use crate::support::{apply_shipped_crd, apply_yaml, cluster, eventually, pod_ready};

pub const ZONES: [&str; 3] = ["a", "b", "c"];

/// The groups a storm evicts: `groups` three-zone groups of `replicas` pods per zone.
#[derive(Clone, Debug)]
pub struct Fleet {
    pub groups: Vec<String>,
    pub replicas: usize,
}

impl Fleet {
    /// The first three are named as Mimir's; more are `group-<n>`.
    pub fn new(groups: usize, replicas: usize) -> Self {
        let named = ["ingester", "store-gateway", "alertmanager"];
        let groups = (0..groups)
            .map(|i| match named.get(i) {
                Some(name) => name.to_string(),
                None => format!("group-{i}"),
            })
            .collect();
        Self { groups, replicas }
    }

    pub fn pods(&self) -> usize {
        self.groups.len() * ZONES.len() * self.replicas
    }

    /// Creates the budget and the three StatefulSets of each group in `ns` and waits until
    /// every pod is Ready.
    pub async fn create(&self, client: &kube::Client, ns: &str) -> Result<()> {
        apply_shipped_crd(client, ns, "zone-aware-pod-disruption-budget.yaml").await?;
        for group in &self.groups {
            let zpdb = format!(
                "apiVersion: rollout-operator.grafana.com/v1\nkind: ZoneAwarePodDisruptionBudget\nmetadata: {{name: {group}}}\nspec: {{maxUnavailable: 1, selector: {{matchLabels: {{rollout-group: {group}}}}}}}\n"
            );
            eventually("ZPDB served", Duration::from_secs(30), || async {
                Ok(apply_yaml(client, ns, &zpdb).await.ok())
            })
            .await?;
            for z in ZONES {
                apply_yaml(client, ns, &self.zone(group, z)).await?;
            }
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let total = self.pods();
        eventually(
            &format!("{total} ready pods"),
            Duration::from_secs(120),
            || async {
                let list = pods.list(&Default::default()).await?;
                let ready = list.items.iter().filter(|p| pod_ready(p)).count();
                Ok((ready == total).then_some(()))
            },
        )
        .await
    }

    fn zone(&self, group: &str, zone: &str) -> String {
        let replicas = self.replicas;
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: {group}-zone-{zone}, labels: {{rollout-group: {group}}}}}\nspec:\n  replicas: {replicas}\n  serviceName: {group}\n  podManagementPolicy: Parallel\n  updateStrategy: {{type: OnDelete}}\n  selector: {{matchLabels: {{name: {group}-zone-{zone}}}}}\n  template:\n    metadata: {{labels: {{name: {group}-zone-{zone}, rollout-group: {group}}}}}\n    spec: {{nodeSelector: {{topology.kubernetes.io/zone: zone-{zone}}}, containers: [{{name: c, image: x}}]}}\n"
        )
    }
}

/// (group, zone) of a pod, from its `name` label `<group>-zone-<zone>`.
fn zone_of(pod: &Pod) -> Option<(String, String)> {
    let name = pod.metadata.labels.as_ref()?.get("name")?;
    let (group, zone) = name.rsplit_once("-zone-")?;
    Some((group.to_string(), zone.to_string()))
}

/// The worst the pods' states ever showed: per zone the most pods unavailable at once (a pod
/// counts when it is running and ready by the budget's rule), and per group the most zones
/// with an unavailable pod at once.
#[derive(Debug, Default, Clone)]
pub struct Worst {
    pub per_zone: BTreeMap<(String, String), usize>,
    pub zones_down: BTreeMap<String, usize>,
}

impl Worst {
    fn observe(&mut self, fleet: &Fleet, pods: &BTreeMap<String, Pod>) {
        let mut available: BTreeMap<(String, String), usize> = BTreeMap::new();
        for pod in pods.values() {
            // The budget's own rule (the anchor's): running, not terminating, every container
            // running and ready.
            if let Some(key) = zone_of(pod)
                && core_rollout::observed::running_and_ready(pod)
            {
                *available.entry(key).or_default() += 1;
            }
        }
        for group in &fleet.groups {
            let mut down = 0;
            for z in ZONES {
                let key = (group.clone(), z.to_string());
                let missing = fleet
                    .replicas
                    .saturating_sub(available.get(&key).copied().unwrap_or(0));
                if missing > 0 {
                    down += 1;
                }
                let worst_zone = self.per_zone.entry(key).or_default();
                *worst_zone = (*worst_zone).max(missing);
            }
            let worst_group = self.zones_down.entry(group.clone()).or_default();
            *worst_group = (*worst_group).max(down);
        }
    }

    /// Every breach of a one-pod budget: a zone with two pods down, a group with two zones.
    pub fn breaches(&self) -> Vec<String> {
        let zones = self
            .per_zone
            .iter()
            .filter(|(_, missing)| **missing > 1)
            .map(|((group, z), missing)| {
                format!("{group} zone {z} had {missing} pods unavailable at once (budget 1)")
            });
        let groups = self
            .zones_down
            .iter()
            .filter(|(_, zones)| **zones > 1)
            .map(|(group, zones)| format!("{group} had {zones} zones disrupted at once"));
        zones.chain(groups).collect()
    }
}

/// Watches the pods of `ns` and keeps the [`Worst`] they ever showed, judged only on complete
/// lists (a relist arrives a pod at a time). Stops when the handle is dropped.
#[derive(Debug)]
pub struct Watch {
    worst: Arc<Mutex<Worst>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    pub fn start(client: &kube::Client, ns: &str, fleet: &Fleet) -> Self {
        let worst = Arc::new(Mutex::new(Worst::default()));
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let (shared, fleet) = (worst.clone(), fleet.clone());
        let task = tokio::spawn(async move {
            let mut seen: BTreeMap<String, Pod> = BTreeMap::new();
            let mut listing = false;
            let mut stream = std::pin::pin!(watcher(pods, watcher::Config::default()));
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Init) => {
                        listing = true;
                        seen.clear();
                    }
                    Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p)) => {
                        seen.insert(p.metadata.name.clone().unwrap_or_default(), p);
                    }
                    Ok(watcher::Event::InitDone) => listing = false,
                    Ok(watcher::Event::Delete(p)) => {
                        seen.remove(&p.metadata.name.clone().unwrap_or_default());
                    }
                    Err(_) => continue,
                }
                if !listing {
                    shared
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .observe(&fleet, &seen);
                }
            }
        });
        Self { worst, task }
    }

    pub fn worst(&self) -> Worst {
        self.worst.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits until the webhook registered for evictions in `ns` answers (an eviction of a pod that
/// does not exist is refused by the webhook itself, not failed by kube-apiserver's call to it).
pub async fn webhook_serving(client: &kube::Client, ns: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(
        "the eviction webhook serving",
        Duration::from_secs(60),
        || async {
            Ok(
                match pods.evict("no-such-pod", &EvictParams::default()).await {
                    Err(kube::Error::Api(e))
                        if e.message.contains("denied the request")
                            && !e.message.contains("failed calling webhook") =>
                    {
                        Some(())
                    }
                    _ => None,
                },
            )
        },
    )
    .await
}

/// What the storm's callers saw.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Pods evicted (each original pod once).
    pub evicted: usize,
    /// Answers by HTTP code (`"no answer: …"` for a call that got none).
    pub answers: BTreeMap<String, usize>,
    /// The distinct messages of the 429 answers.
    pub refusals: BTreeSet<String>,
    /// Every answered call's latency, in milliseconds, sorted.
    pub latencies_ms: Vec<f64>,
    /// First call to last answer.
    pub took: Duration,
}

impl Outcome {
    pub fn calls(&self) -> usize {
        self.answers.values().sum()
    }

    /// Answers other than 201 (evicted) and 429 (refused).
    pub fn unexpected(&self) -> Vec<(String, usize)> {
        self.answers
            .iter()
            .filter(|(code, _)| *code != "201" && *code != "429")
            .map(|(c, n)| (c.clone(), *n))
            .collect()
    }
}

/// Evicts every pod of `ns` once: all at once, each refusal retried after `retry`, until each
/// was evicted or `limit` passed. The calls go through a client that does not retry (kube's
/// default one retries 429 answers itself, with back-off, which would hide every refusal).
pub async fn storm(ns: &str, retry: Duration, limit: Duration) -> Result<Outcome> {
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster().kubeconfig())?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.default_retry = false;
    let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(config)?, ns);
    let originals: Vec<String> = pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let started = Instant::now();
    let shared: Arc<Mutex<Outcome>> = Arc::default();
    let mut tasks = Vec::new();
    for name in originals {
        let (pods, shared) = (pods.clone(), shared.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let sent = Instant::now();
                let answer = pods.evict(&name, &EvictParams::default()).await;
                let latency = sent.elapsed().as_secs_f64() * 1000.0;
                let code = match &answer {
                    Ok(_) => "201".to_string(),
                    Err(kube::Error::Api(e)) => e.code.to_string(),
                    Err(e) => format!("no answer: {e}"),
                };
                {
                    let mut out = shared.lock().unwrap_or_else(|e| e.into_inner());
                    if let Err(kube::Error::Api(e)) = &answer
                        && e.code == 429
                    {
                        out.refusals.insert(e.message.clone());
                    }
                    if !code.starts_with("no answer") {
                        out.latencies_ms.push(latency);
                    }
                    *out.answers.entry(code.clone()).or_default() += 1;
                }
                if code == "201" || started.elapsed() > limit {
                    return code == "201";
                }
                // Anything but a refusal is judged by the caller; the storm goes on meanwhile.
                tokio::time::sleep(retry).await;
            }
        }));
    }
    let mut evicted = 0;
    for task in tasks {
        evicted += usize::from(task.await?);
    }
    let mut out = std::mem::take(&mut *shared.lock().unwrap_or_else(|e| e.into_inner()));
    out.evicted = evicted;
    out.took = started.elapsed();
    out.latencies_ms.sort_by(f64::total_cmp);
    Ok(out)
}
