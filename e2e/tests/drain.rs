//! A node drain's eviction storm through kube-apiserver (#55 item 3): every pod of three
//! zone-aware groups is evicted at once, each refusal retried 20 ms later, so kube-apiserver
//! calls the pod-eviction webhook a few hundred times a second. Checked from outside the
//! webhook: the pods' states, from a watch of this test's own, never show more unavailable
//! pods in a zone than its ZoneAwarePodDisruptionBudget allows, nor two zones of a group down
//! at once; every eviction answer kube-apiserver gave is 201 (evicted) or 429 with the reason,
//! never a timeout or a 5xx (the anchor's v0.38.0 changelog: a burst of evictions stalled its
//! client rate limiter and every webhook answered `context canceled`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::EvictParams;
use kube::runtime::watcher;
use strata_e2e::admission::{namespace_args, register_pod_eviction};
use strata_e2e::plane::free_port;
use strata_e2e::services::start_service;
use strata_e2e::support::{
    TestNamespace, apply_shipped_crd, apply_yaml, cluster, eventually, pod_ready,
};

const GROUPS: [&str; 3] = ["ingester", "store-gateway", "alertmanager"];
const ZONES: [&str; 3] = ["a", "b", "c"];
const REPLICAS: usize = 4;
/// How soon a refused eviction is tried again: with every pod at once, a few hundred
/// evictions a second.
const RETRY_AFTER: Duration = Duration::from_millis(20);

fn zone(group: &str, zone: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: {group}-zone-{zone}, labels: {{rollout-group: {group}}}}}\nspec:\n  replicas: {REPLICAS}\n  serviceName: {group}\n  podManagementPolicy: Parallel\n  selector: {{matchLabels: {{name: {group}-zone-{zone}}}}}\n  template:\n    metadata: {{labels: {{name: {group}-zone-{zone}, rollout-group: {group}}}}}\n    spec: {{nodeSelector: {{topology.kubernetes.io/zone: zone-{zone}}}, containers: [{{name: c, image: x}}]}}\n"
    )
}

/// (group, zone) of a pod, from its `name` label `<group>-zone-<zone>`.
fn zone_of(pod: &Pod) -> Option<(String, String)> {
    let name = pod.metadata.labels.as_ref()?.get("name")?;
    let (group, zone) = name.rsplit_once("-zone-")?;
    Some((group.to_string(), zone.to_string()))
}

/// The worst the pods' states ever showed, from every event of a watch: per zone the most
/// pods unavailable at once (a zone runs REPLICAS; a pod counts when it is running and ready
/// by the budget's rule), and per group the most zones with an unavailable pod at once.
#[derive(Debug, Default)]
struct Worst {
    per_zone: BTreeMap<(String, String), usize>,
    zones_down: BTreeMap<String, usize>,
}

fn observe(pods: &BTreeMap<String, Pod>, worst: &mut Worst) {
    let mut available: BTreeMap<(String, String), usize> = BTreeMap::new();
    for pod in pods.values() {
        // The budget's own rule (the anchor's): running, not terminating, every container
        // running and ready.
        if let Some(key) = zone_of(pod)
            && rollout_operator::observed::running_and_ready(pod)
        {
            *available.entry(key).or_default() += 1;
        }
    }
    for group in GROUPS {
        let mut down = 0;
        for z in ZONES {
            let key = (group.to_string(), z.to_string());
            let missing = REPLICAS.saturating_sub(available.get(&key).copied().unwrap_or(0));
            if missing > 0 {
                down += 1;
            }
            let worst_zone = worst.per_zone.entry(key).or_default();
            *worst_zone = (*worst_zone).max(missing);
        }
        let worst_group = worst.zones_down.entry(group.to_string()).or_default();
        *worst_group = (*worst_group).max(down);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_storm_never_exceeds_a_zone_budget_and_every_refusal_is_a_429() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "drain").await?;
    apply_shipped_crd(&client, &ns.name, "zone-aware-pod-disruption-budget.yaml").await?;
    for group in GROUPS {
        let zpdb = format!(
            "apiVersion: rollout-operator.grafana.com/v1\nkind: ZoneAwarePodDisruptionBudget\nmetadata: {{name: {group}}}\nspec: {{maxUnavailable: 1, selector: {{matchLabels: {{rollout-group: {group}}}}}}}\n"
        );
        eventually("ZPDB served", Duration::from_secs(30), || async {
            Ok(apply_yaml(&client, &ns.name, &zpdb).await.ok())
        })
        .await?;
        for z in ZONES {
            apply_yaml(&client, &ns.name, &zone(group, z)).await?;
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let total = GROUPS.len() * ZONES.len() * REPLICAS;
    eventually(
        &format!("{total} ready pods"),
        Duration::from_secs(90),
        || async {
            let list = pods.list(&Default::default()).await?;
            let ready = list.items.iter().filter(|p| pod_ready(p)).count();
            Ok((ready == total).then_some(()))
        },
    )
    .await?;

    let port = free_port()?;
    let tls = format!("127.0.0.1:{port}");
    let _server = start_service(
        "admission-webhook",
        cluster().kubeconfig(),
        &namespace_args(&ns.name, &tls, "127.0.0.1:9"),
    )?;
    let _hook = register_pod_eviction(&client, &ns.name, port).await?;
    // The webhook answers before the storm: an eviction of a pod that does not exist.
    eventually(
        "the eviction webhook serving",
        Duration::from_secs(30),
        || async {
            // The webhook's own answer (the anchor's 400 "pods … not found"), not
            // kube-apiserver's failure to call it.
            Ok(
                match pods.evict("no-such-pod", &EvictParams::default()).await {
                    Err(kube::Error::Api(e))
                        if e.code == 400 && e.message.contains("denied the request") =>
                    {
                        Some(())
                    }
                    _ => None,
                },
            )
        },
    )
    .await?;

    // The test's own view of the pods, from a watch started before the storm.
    let worst = Arc::new(Mutex::new(Worst::default()));
    let watching = {
        let worst = worst.clone();
        let pods = pods.clone();
        tokio::spawn(async move {
            let mut seen: BTreeMap<String, Pod> = BTreeMap::new();
            // A (re)list arrives a pod at a time: judged once it is complete, not half-way.
            let mut listing = false;
            let mut stream = std::pin::pin!(watcher(pods, watcher::Config::default()));
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Init) => {
                        listing = true;
                        seen.clear();
                    }
                    Ok(watcher::Event::InitApply(p)) => {
                        seen.insert(p.metadata.name.clone().unwrap_or_default(), p);
                    }
                    Ok(watcher::Event::InitDone) => listing = false,
                    Ok(watcher::Event::Apply(p)) => {
                        seen.insert(p.metadata.name.clone().unwrap_or_default(), p);
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        seen.remove(&p.metadata.name.clone().unwrap_or_default());
                    }
                    Err(_) => continue,
                }
                if !listing {
                    observe(&seen, &mut worst.lock().unwrap());
                }
            }
        })
    };

    // The storm: every pod evicted at once, each refusal retried after RETRY_AFTER, until every pod
    // was evicted once (its replacement is another pod object).
    let started = Instant::now();
    let originals: Vec<String> = pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    // A kube client that does not retry: kube's default one retries 429 answers itself, with
    // back-off, which would hide every refusal this test is about.
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster().kubeconfig())?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.default_retry = false;
    let plain = kube::Client::try_from(config)?;
    let pods: Api<Pod> = Api::namespaced(plain, &ns.name);
    let answers: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let refusals: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let mut tasks = Vec::new();
    for name in originals {
        let (pods, answers, refusals) = (pods.clone(), answers.clone(), refusals.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let answer = pods.evict(&name, &EvictParams::default()).await;
                let code = match &answer {
                    Ok(_) => "201".to_string(),
                    Err(kube::Error::Api(e)) => {
                        if e.code == 429 {
                            refusals.lock().unwrap().insert(e.message.clone());
                        }
                        e.code.to_string()
                    }
                    Err(e) => format!("no answer: {e}"),
                };
                *answers.lock().unwrap().entry(code.clone()).or_default() += 1;
                if code == "201" || started.elapsed() > Duration::from_secs(240) {
                    return code == "201";
                }
                // Anything but a refusal fails the test below; the storm goes on meanwhile.
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }));
    }
    let mut evicted = 0;
    for task in tasks {
        evicted += usize::from(task.await?);
    }
    let took = started.elapsed();
    watching.abort();
    let answers = answers.lock().unwrap().clone();
    let calls: usize = answers.values().sum();
    eprintln!(
        "drain: {evicted}/{total} pods evicted in {took:?}, {calls} evictions ({:.0}/s): {answers:?}",
        calls as f64 / took.as_secs_f64()
    );
    assert_eq!(evicted, total, "not every pod was evicted: {answers:?}");
    let unexpected: Vec<_> = answers
        .iter()
        .filter(|(code, _)| *code != "201" && *code != "429")
        .collect();
    assert!(
        unexpected.is_empty(),
        "answers other than 201 and 429: {unexpected:?}"
    );
    assert!(
        answers.get("429").copied().unwrap_or(0) > total,
        "the storm was refused less than once per pod: {answers:?}"
    );
    // Each refusal says why, in the anchor's words.
    let refusals = refusals.lock().unwrap().clone();
    assert!(
        refusals
            .iter()
            .all(|m| m.contains("not ready") || m.contains("unknown")),
        "{refusals:?}"
    );
    let worst = worst.lock().unwrap();
    for ((group, z), missing) in &worst.per_zone {
        assert!(
            *missing <= 1,
            "{group} zone {z} had {missing} pods unavailable at once (budget 1)"
        );
    }
    for (group, zones) in &worst.zones_down {
        assert!(*zones <= 1, "{group} had {zones} zones disrupted at once");
    }
    assert!(
        worst.per_zone.values().any(|m| *m == 1),
        "the watch never saw a pod unavailable: {worst:?}"
    );
    Ok(())
}
