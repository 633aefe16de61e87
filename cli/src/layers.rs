//! `strata layers graph` and `strata layers plan`: the layer-controller's view of a cluster,
//! from the same planner and readers the controller uses.

use std::process::ExitCode;
use std::time::Duration;

use core_k8s::apply::Applier;
use core_layers::crd::{AddonsLayer, LayerSet};
use core_layers::plan::{self, Gate, GateInputs, ObjectRef, SourceRef, SourceState};
use core_layers::source::{self, Limits};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use layer_reader::read::Reader;
use serde::Serialize;
use serde_json::Value;

use crate::cli::{ClusterArgs, GraphFormat, PlanFormat};

async fn all_layers(client: &Client) -> anyhow::Result<Vec<AddonsLayer>> {
    let api: Api<AddonsLayer> = Api::all(client.clone());
    Ok(api.list(&ListParams::default()).await?.items)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub fn graph(
    format: GraphFormat,
    shard_key: &str,
    cluster: &ClusterArgs,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let graph = core_layers::graph::build(&all_layers(&client).await?, shard_key);
        let text = match format {
            GraphFormat::Dot => core_layers::graph::to_dot(&graph),
            GraphFormat::Mermaid => core_layers::graph::to_mermaid(&graph),
            GraphFormat::Json => serde_json::to_string_pretty(&graph)? + "\n",
        };
        print!("{text}");
        Ok(ExitCode::SUCCESS)
    })
}

/// `strata layers why LAYER`.
pub fn why(name: &str, format: PlanFormat, cluster: &ClusterArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let all: LayerSet = all_layers(&client)
            .await?
            .into_iter()
            .map(|l| (l.name_any(), std::sync::Arc::new(l)))
            .collect();
        let Some(why) = plan::why(name, &all, jiff::Timestamp::now()) else {
            eprintln!("strata layers why: AddonsLayer {name} not found");
            return Ok(ExitCode::from(1));
        };
        match format {
            PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&why)?),
            PlanFormat::Text => print!("{}", plan::render_why(&why)),
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// What the next apply of a layer would do.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct LayerPlan {
    layer: String,
    version: String,
    state: String,
    source: String,
    revision: Option<String>,
    /// `Proceed`, `Hold`, `Invalid`, `Cycle`, or the state it would wait in.
    gate: String,
    message: Option<String>,
    blocked_by: Vec<core_layers::crd::Blocker>,
    /// Every applied object not Current yet, with its status, reason and message.
    not_ready: Vec<String>,
    create: Vec<String>,
    change: Vec<String>,
    unchanged: Vec<String>,
    prune: Vec<String>,
    hand_over: Vec<HandOver>,
    errors: Vec<String>,
    /// Layers that depend on this one and re-run once it is Deployed.
    dependents: Vec<String>,
}

#[derive(Debug, Serialize)]
struct HandOver {
    object: String,
    to: String,
}

pub fn plan(
    name: &str,
    format: PlanFormat,
    default_ns: &str,
    cluster: &ClusterArgs,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let layers = all_layers(&client).await?;
        let all: LayerSet = layers
            .iter()
            .map(|l| (l.name_any(), std::sync::Arc::new(l.clone())))
            .collect();
        let Some(layer) = all.get(name) else {
            eprintln!("strata layers plan: AddonsLayer {name} not found");
            return Ok(ExitCode::from(1));
        };
        // The controller's field manager, so the dry run shows what its apply would change.
        let field_manager = core_k8s::runtime::field_manager(core_layers::keys::LAYER_CONTROLLER);
        let applier = Applier::new(client.clone(), field_manager);
        let reader = Reader::new(
            client.clone(),
            applier,
            Limits::default(),
            default_ns.into(),
        );
        let result = compute(&reader, &client, layer, &all).await?;
        match format {
            PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&result)?),
            PlanFormat::Text => print!("{}", render(&result)),
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn compute(
    reader: &Reader,
    client: &Client,
    layer: &AddonsLayer,
    all: &LayerSet,
) -> anyhow::Result<LayerPlan> {
    let name = layer.name_any();
    let status = layer.status.clone().unwrap_or_default();
    let source_ref = SourceRef::of(layer, reader.default_namespace());
    let mut out = LayerPlan {
        layer: name.clone(),
        version: layer.spec.version.clone(),
        state: status.state.clone().unwrap_or_default(),
        source: source_ref.to_string(),
        dependents: plan::dependents(&name, all.values().map(|l| l.as_ref())),
        not_ready: plan::waiting_on(layer),
        ..LayerPlan::default()
    };
    let fetched = match reader.fetch(&source_ref).await {
        Ok(fetched) => fetched,
        Err(e) => {
            out.gate = "Failed".into();
            out.message = Some(e.to_string());
            return Ok(out);
        }
    };
    let version = client.apiserver_version().await.ok().map(|v| v.git_version);
    let objects = layer_reader::prereqs::read(reader, layer).await;
    let inputs = GateInputs {
        source: &fetched.state,
        cluster_version: version.as_deref(),
        default_source_namespace: reader.default_namespace(),
        objects: &objects,
        shard: None,
    };
    match plan::gate(layer, all, &inputs) {
        Gate::Hold => out.gate = "Hold".into(),
        Gate::Invalid(message) => {
            out.gate = "Invalid".into();
            out.message = Some(message);
        }
        Gate::Cycle(cycle) => {
            out.gate = "Cycle".into();
            out.message = Some(format!("dependency cycle: {}", cycle.join(" -> ")));
        }
        Gate::CrossShard { message, blockers } => {
            out.gate = "CrossShard".into();
            out.message = Some(message);
            out.blocked_by = blockers;
        }
        Gate::Blocked { state, blockers } => {
            out.gate = state.into();
            out.blocked_by = blockers;
        }
        Gate::Proceed => out.gate = "Proceed".into(),
    }
    // The dry run is shown even for a held or blocked layer: "what would it do once free?"
    let (SourceState::Ready { revision }, Some(files)) = (&fetched.state, &fetched.files) else {
        return Ok(out);
    };
    out.revision = Some(revision.clone());
    let manifests =
        match layer_reader::variables::layer_variables(client, layer, reader.default_namespace())
            .await
            .and_then(|vars| source::layer_manifests_with(files, &layer.spec.source.path, &vars))
        {
            Ok(manifests) => manifests,
            Err(e) => {
                out.errors.push(e.to_string());
                return Ok(out);
            }
        };
    let mut desired = Vec::new();
    for manifest in &manifests {
        let object = reader.identity(manifest).await;
        desired.push(object.clone());
        let prepared = plan::prepare_manifest(&manifest.value, &name, &layer.spec.version);
        match dry_run(reader, manifest, &object, &prepared).await {
            Ok(Change::Create) => out.create.push(object.to_string()),
            Ok(Change::Update) => out.change.push(object.to_string()),
            Ok(Change::None) => out.unchanged.push(object.to_string()),
            Err(e) => out
                .errors
                .push(format!("{}: {object}: {e}", manifest.origin)),
        }
    }
    // The controller's own prune decision: objects already gone or taken over by another
    // layer are not listed; orphaned ones (pruned after the grace window) are.
    let stale_entries: Vec<_> = status
        .inventory
        .iter()
        .filter(|e| !desired.contains(&ObjectRef::of_entry(e)))
        .collect();
    if !stale_entries.is_empty() {
        let wanted_by = reader.wanted_by(&name, all).await;
        let stale: Vec<_> =
            layer_reader::stale::read_stale(reader, reader.client(), &stale_entries)
                .await?
                .into_iter()
                .map(|r| r.stale)
                .collect();
        let prune = plan::prune_plan(
            &name,
            &stale,
            &wanted_by,
            Duration::ZERO,
            jiff::Timestamp::now(),
        );
        out.prune = prune.pending().map(ToString::to_string).collect();
        out.hand_over = prune
            .hand_over
            .iter()
            .map(|(object, to)| HandOver {
                object: object.to_string(),
                to: to.clone(),
            })
            .collect();
    }
    Ok(out)
}

enum Change {
    Create,
    Update,
    None,
}

/// Server-side dry-run apply, compared with the live object (metadata the server manages
/// and status left out).
async fn dry_run(
    reader: &Reader,
    manifest: &source::Manifest,
    object: &ObjectRef,
    prepared: &Value,
) -> anyhow::Result<Change> {
    let resolved = match reader.resolve(&manifest.api_version, &object.kind).await {
        Ok(resolved) => resolved,
        // Its CRD is not installed yet (it may be in this very layer): it will be created.
        Err(core_layers::error::LayerError::Kube(core_k8s::Error::UnknownKind { .. })) => {
            return Ok(Change::Create);
        }
        Err(e) => return Err(e.into()),
    };
    let api = reader.api(&resolved, object.namespace.as_deref());
    let live = api.get_opt(&object.name).await?;
    // Dry-run even a create: the API server's validation errors are part of the plan.
    let after = reader
        .applier()
        .dry_run_dynamic(prepared, Some("default"))
        .await?;
    let Some(live) = live else {
        return Ok(Change::Create);
    };
    let comparable = |o: &kube::api::DynamicObject| {
        let mut v = serde_json::to_value(o).unwrap_or_default();
        if let Some(map) = v.as_object_mut() {
            map.remove("status");
            if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                for key in ["managedFields", "resourceVersion", "generation"] {
                    meta.remove(key);
                }
            }
        }
        v
    };
    Ok(if comparable(&after) == comparable(&live) {
        Change::None
    } else {
        Change::Update
    })
}

fn render(plan: &LayerPlan) -> String {
    let mut out = format!(
        "layer {} (version {}, state {})\nsource {} at {}\n",
        plan.layer,
        plan.version,
        if plan.state.is_empty() {
            "none"
        } else {
            &plan.state
        },
        plan.source,
        plan.revision.as_deref().unwrap_or("(not ready)")
    );
    match plan.gate.as_str() {
        "Proceed" => out.push_str("gate: ready to apply\n"),
        gate => {
            out.push_str(&format!("gate: {gate}"));
            if let Some(message) = &plan.message {
                out.push_str(&format!(": {message}"));
            }
            out.push('\n');
        }
    }
    for b in &plan.blocked_by {
        out.push_str(&format!(
            "  blocked by {} ({}): {}\n",
            b.name, b.reason, b.message
        ));
    }
    for object in &plan.not_ready {
        out.push_str(&format!("not ready  {object}\n"));
    }
    for (verb, list) in [
        ("create", &plan.create),
        ("change", &plan.change),
        ("unchanged", &plan.unchanged),
        ("prune", &plan.prune),
    ] {
        for object in list {
            out.push_str(&format!("{verb:<10} {object}\n"));
        }
    }
    for h in &plan.hand_over {
        out.push_str(&format!("hand over  {} -> layer {}\n", h.object, h.to));
    }
    for e in &plan.errors {
        out.push_str(&format!("error      {e}\n"));
    }
    if !plan.dependents.is_empty() {
        out.push_str(&format!(
            "dependents that re-run: {}\n",
            plan.dependents.join(", ")
        ));
    }
    out
}

/// `strata layers import -f FILE`: Kraan AddonsLayers converted, notes on stderr.
pub fn import(files: &[String]) -> anyhow::Result<ExitCode> {
    let documents = match core_status::input::read_sources(files) {
        Ok(documents) => documents,
        Err(e) => return Ok(crate::cli::input_error(&e.to_string())),
    };
    let mut out = Vec::new();
    let mut refused = false;
    for document in &documents {
        let imported = core_layers::kraan::import(&document.object);
        for note in &imported.notes {
            eprintln!("{}: document {}: {note}", document.source, document.index);
        }
        for error in &imported.errors {
            eprintln!(
                "{}: document {}: error: {error}",
                document.source, document.index
            );
            refused = true;
        }
        out.push(serde_saphyr::to_string(&imported.object)?);
    }
    print!("{}", out.join("---\n"));
    Ok(if refused {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Merge-patches AddonsLayer `name`; a missing layer is an error naming it.
async fn patch_layer(client: &Client, name: &str, patch: Value) -> anyhow::Result<()> {
    let api: Api<AddonsLayer> = Api::all(client.clone());
    match api
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            anyhow::bail!("addonslayer {name} not found")
        }
        other => other.map(drop).map_err(Into::into),
    }
}

/// The patch asking the layer-controller to reconcile now, and its value.
fn reconcile_request() -> (Value, String) {
    let at = jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {"annotations": {
        core_layers::keys::RECONCILE_REQUESTED_AT: at}}});
    (patch, at)
}

/// `strata layers reconcile`: asks for a reconcile; with `wait`, waits until the controller
/// recorded handling this very request. Exit 1 when the layer is then Failed, or on timeout.
pub fn reconcile(
    name: &str,
    wait: Option<Duration>,
    cluster: &ClusterArgs,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let (patch, at) = reconcile_request();
        patch_layer(&client, name, patch).await?;
        println!("addonslayer/{name}: reconcile requested at {at}");
        let Some(timeout) = wait else {
            return Ok(ExitCode::SUCCESS);
        };
        let api: Api<AddonsLayer> = Api::all(client);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let layer = api.get(name).await?;
            let status = layer.status.unwrap_or_default();
            if status.last_handled_reconcile_at.as_deref() == Some(at.as_str()) {
                let state = status.state.unwrap_or_default();
                let revision = status.revision.unwrap_or_default();
                println!("addonslayer/{name}: reconciled: {state} (revision {revision})");
                return Ok(if state == "Failed" {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                });
            }
            if tokio::time::Instant::now() >= deadline {
                eprintln!(
                    "strata: addonslayer {name}: the layer-controller did not handle the request within {timeout:?}"
                );
                return Ok(ExitCode::FAILURE);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// One line of `strata layers history`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HistoryLine {
    revision: String,
    generation: Option<i64>,
    version: String,
    outcome: String,
    at: String,
    /// Kept for rollback: the compressed bytes it takes.
    kept_bytes: Option<u64>,
    reason: Option<String>,
    message: Option<String>,
}

/// The history of a layer's status, each entry marked when its revision is kept.
fn history_lines(status: &core_layers::crd::AddonsLayerStatus) -> Vec<HistoryLine> {
    status
        .history
        .iter()
        .map(|h| HistoryLine {
            revision: h.revision.clone(),
            generation: h.generation,
            version: h.version.clone(),
            outcome: h.outcome().to_string(),
            at: h
                .deployed_at
                .clone()
                .or_else(|| h.failed_at.clone())
                .unwrap_or_default(),
            kept_bytes: h
                .was_good()
                .then(|| {
                    status
                        .kept_revisions
                        .iter()
                        .find(|k| k.revision == h.revision && k.generation == h.generation)
                        .map(|k| k.bytes)
                })
                .flatten(),
            reason: h.reason.clone(),
            message: h.message.clone(),
        })
        .collect()
}

fn render_history(name: &str, lines: &[HistoryLine]) -> String {
    if lines.is_empty() {
        return format!("addonslayer {name}: no attempt recorded yet\n");
    }
    let generation = |g: Option<i64>| g.map_or_else(|| "-".to_string(), |g| g.to_string());
    let rows: Vec<[String; 6]> = lines
        .iter()
        .map(|l| {
            [
                l.revision.clone(),
                generation(l.generation),
                l.version.clone(),
                l.outcome.clone(),
                l.at.clone(),
                match (l.kept_bytes, &l.reason) {
                    (Some(bytes), _) => format!("kept ({bytes} bytes)"),
                    (None, Some(reason)) => {
                        format!("{reason}: {}", l.message.as_deref().unwrap_or_default())
                    }
                    (None, None) => String::new(),
                },
            ]
        })
        .collect();
    let header = ["REVISION", "GENERATION", "VERSION", "OUTCOME", "AT", "NOTE"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text: String = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        text.truncate(text.trim_end().len());
        text + "\n"
    };
    let mut out = line(header.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// `strata layers history LAYER`.
pub fn history(name: &str, format: PlanFormat, cluster: &ClusterArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let api: Api<AddonsLayer> = Api::all(client);
        let Some(layer) = api.get_opt(name).await? else {
            eprintln!("strata layers history: AddonsLayer {name} not found");
            return Ok(ExitCode::from(1));
        };
        let lines = history_lines(&layer.status.unwrap_or_default());
        match format {
            PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&lines)?),
            PlanFormat::Text => print!("{}", render_history(name, &lines)),
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The kept revision a rollback of `layer` to `to` restores (the newest kept one that is not
/// the current attempt, without `to`), or why there is none.
fn rollback_target(layer: &AddonsLayer, to: Option<&str>) -> Result<String, String> {
    let name = layer.name_any();
    let Some(_) = &layer.spec.rollback else {
        return Err(format!(
            "addonslayer {name} keeps no revisions to roll back to: spec.rollback is not set"
        ));
    };
    let status = layer.status.clone().unwrap_or_default();
    let current = (
        status.last_attempted_revision.as_deref(),
        status.observed_generation,
    );
    let candidates: Vec<&core_layers::crd::KeptRevision> = status
        .kept_revisions
        .iter()
        .filter(|k| (Some(k.revision.as_str()), k.generation) != current)
        .collect();
    let found = match to {
        Some(to) => candidates.iter().find(|k| k.revision.starts_with(to)),
        None => candidates.first(),
    };
    found.map(|k| k.revision.clone()).ok_or_else(|| {
        let listed: Vec<&str> = candidates.iter().map(|k| k.revision.as_str()).collect();
        let kept = if listed.is_empty() {
            "no other revision is kept".to_string()
        } else {
            format!("kept: {}", listed.join(", "))
        };
        match to {
            Some(to) => format!("addonslayer {name}: revision {to:?} is not kept ({kept})"),
            None => format!("addonslayer {name}: nothing to roll back to ({kept})"),
        }
    })
}

/// `strata layers rollback LAYER [--to REVISION]`: asks the layer-controller to restore a kept
/// revision (`strata.dev/rollback-requested-at`, `strata.dev/rollback-to`); with `wait`,
/// waits until it handled the request. Exit 1 when the revision is not kept, when the
/// rollback failed, or on timeout.
pub fn rollback(
    name: &str,
    to: Option<&str>,
    wait: Option<Duration>,
    cluster: &ClusterArgs,
) -> anyhow::Result<ExitCode> {
    use core_layers::keys::{ROLLBACK_REQUESTED_AT, ROLLBACK_TO, state};
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let api: Api<AddonsLayer> = Api::all(client.clone());
        let Some(layer) = api.get_opt(name).await? else {
            eprintln!("strata layers rollback: AddonsLayer {name} not found");
            return Ok(ExitCode::from(1));
        };
        let target = match rollback_target(&layer, to) {
            Ok(target) => target,
            Err(why) => {
                eprintln!("strata layers rollback: {why}");
                return Ok(ExitCode::from(1));
            }
        };
        let at = jiff::Timestamp::now().to_string();
        let patch = serde_json::json!({"metadata": {"annotations": {
            ROLLBACK_REQUESTED_AT: at, ROLLBACK_TO: target}}});
        patch_layer(&client, name, patch).await?;
        println!("addonslayer/{name}: rollback to revision {target} requested at {at}");
        let Some(timeout) = wait else {
            return Ok(ExitCode::SUCCESS);
        };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let status = api.get(name).await?.status.unwrap_or_default();
            let state = status.state.clone().unwrap_or_default();
            let handled = status.last_handled_rollback_at.as_deref() == Some(at.as_str());
            if handled && matches!(state.as_str(), state::ROLLED_BACK | state::FAILED) {
                let revision = status.revision.unwrap_or_default();
                println!("addonslayer/{name}: {state} (revision {revision})");
                return Ok(if state == state::FAILED {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                });
            }
            if tokio::time::Instant::now() >= deadline {
                eprintln!(
                    "strata: addonslayer {name}: not rolled back within {timeout:?} (state {state})"
                );
                return Ok(ExitCode::FAILURE);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// `strata layers suspend|resume`: sets `spec.hold`; resuming also asks for a reconcile.
pub fn set_hold(name: &str, hold: bool, cluster: &ClusterArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let mut patch = serde_json::json!({"spec": {"hold": hold}});
        if hold {
            patch_layer(&client, name, patch).await?;
            println!("addonslayer/{name}: suspended (spec.hold: true)");
        } else {
            let (request, at) = reconcile_request();
            patch["metadata"] = request["metadata"].clone();
            patch_layer(&client, name, patch).await?;
            println!("addonslayer/{name}: resumed, reconcile requested at {at}");
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The objects of `manifests`, as [`core_layers::from_empty`] reads them.
fn contents(
    layer: &AddonsLayer,
    manifests: &[core_layers::source::Manifest],
) -> core_layers::from_empty::LayerContents {
    core_layers::from_empty::LayerContents {
        name: layer.name_any(),
        version: layer.spec.version.clone(),
        depends_on: layer.spec.prereqs.depends_on.clone(),
        objects: manifests
            .iter()
            .map(|m| (m.object.clone(), m.value.clone()))
            .collect(),
    }
}

/// Prints the findings of [`core_layers::from_empty`], one per line (the layers whose source
/// could not be read first): exit 1 when there is any.
fn report_from_empty(
    unreadable: Vec<String>,
    layers: &[core_layers::from_empty::LayerContents],
) -> ExitCode {
    let mut lines = unreadable;
    lines.extend(core_layers::from_empty::findings(layers));
    if lines.is_empty() {
        println!(
            "{} layers: nothing would break on an empty cluster",
            layers.len()
        );
        return ExitCode::SUCCESS;
    }
    for line in &lines {
        println!("{line}");
    }
    ExitCode::from(1)
}

/// `strata layers plan --from-empty -f FILES --source-root DIR`: offline, every AddonsLayer of
/// FILES with its source read from DIR (its inline `postBuild.substitute` variables applied;
/// `substituteFrom` objects live in a cluster and are left out).
pub fn from_empty_files(
    files: &[String],
    source_root: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let documents = match core_status::input::read_sources(files) {
        Ok(documents) => documents,
        Err(e) => return Ok(crate::cli::input_error(&e.to_string())),
    };
    let root = match crate::drift::read_files(source_root) {
        Ok(root) => root,
        Err(e) => {
            return Ok(crate::cli::input_error(&format!(
                "--source-root {}: {e}",
                source_root.display()
            )));
        }
    };
    let (mut unreadable, mut layers) = (Vec::new(), Vec::new());
    for document in &documents {
        if document.object["kind"] != "AddonsLayer" {
            continue;
        }
        let layer: AddonsLayer = match serde_json::from_value(document.object.clone()) {
            Ok(layer) => layer,
            Err(e) => {
                return Ok(crate::cli::input_error(&format!(
                    "{}: document {}: not an AddonsLayer: {e}",
                    document.source, document.index
                )));
            }
        };
        let vars = layer
            .spec
            .post_build
            .as_ref()
            .map(|p| p.substitute.clone())
            .unwrap_or_default();
        match source::layer_manifests_with(&root, &layer.spec.source.path, &vars) {
            Ok(manifests) => layers.push(contents(&layer, &manifests)),
            Err(e) => unreadable.push(format!(
                "layer {}: its source {}: {e}",
                layer.name_any(),
                source_root.join(&layer.spec.source.path).display()
            )),
        }
    }
    if layers.is_empty() && unreadable.is_empty() {
        return Ok(crate::cli::input_error(&format!(
            "no AddonsLayer in {}",
            files.join(", ")
        )));
    }
    Ok(report_from_empty(unreadable, &layers))
}

/// `strata layers plan --from-empty`: the cluster's layers, each with its source as the
/// layer-controller reads it (its variables read as this user).
pub fn from_empty_cluster(
    default_ns: &str,
    selector: Option<&str>,
    cluster: &ClusterArgs,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let client = cluster.client().await?;
        let field_manager = core_k8s::runtime::field_manager(core_layers::keys::LAYER_CONTROLLER);
        let reader = Reader::new(
            client.clone(),
            Applier::new(client.clone(), field_manager),
            Limits::default(),
            default_ns.into(),
        );
        let (mut unreadable, mut layers) = (Vec::new(), Vec::new());
        let mut list = ListParams::default();
        if let Some(selector) = selector {
            list = list.labels(selector);
        }
        let selected = Api::<AddonsLayer>::all(client.clone())
            .list(&list)
            .await?
            .items;
        for layer in selected {
            let name = layer.name_any();
            let source_ref = SourceRef::of(&layer, reader.default_namespace());
            let files = match reader.fetch(&source_ref).await {
                Ok(fetched) => fetched.files,
                Err(e) => {
                    unreadable.push(format!("layer {name}: its source {source_ref}: {e}"));
                    continue;
                }
            };
            let Some(files) = files else {
                unreadable.push(format!(
                    "layer {name}: its source {source_ref} has no artifact yet"
                ));
                continue;
            };
            match layer_reader::variables::layer_variables(&client, &layer, default_ns)
                .await
                .and_then(|vars| {
                    source::layer_manifests_with(&files, &layer.spec.source.path, &vars)
                }) {
                Ok(manifests) => layers.push(contents(&layer, &manifests)),
                Err(e) => unreadable.push(format!("layer {name}: its source {source_ref}: {e}")),
            }
        }
        Ok(report_from_empty(unreadable, &layers))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn layer(status: serde_json::Value, rollback: bool) -> AddonsLayer {
        let mut spec = serde_json::json!({"version": "2", "source": {"name": "s", "path": "./"}});
        if rollback {
            spec["rollback"] = serde_json::json!({"enabled": true});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer",
            "metadata": {"name": "apps", "generation": 3},
            "spec": spec, "status": status,
        }))
        .unwrap()
    }

    fn status() -> serde_json::Value {
        serde_json::json!({
            "lastAttemptedRevision": "r3", "observedGeneration": 3,
            "history": [
                {"revision": "r2", "version": "1", "generation": 2, "outcome": "RolledBack",
                 "deployedAt": "2026-11-28T10:02:00Z", "reason": "HealthCheckFailed"},
                {"revision": "r3", "version": "2", "generation": 3, "outcome": "Failed",
                 "failedAt": "2026-11-28T10:01:00Z", "reason": "HealthCheckFailed",
                 "message": "Deployment apps/web: timed out"},
                {"revision": "r2", "version": "1", "generation": 2,
                 "deployedAt": "2026-11-28T09:00:00Z"},
            ],
            "keptRevisions": [
                {"revision": "r3", "generation": 3, "version": "2", "objects": 1, "bytes": 300},
                {"revision": "r2", "generation": 2, "version": "1", "objects": 1, "bytes": 280},
                {"revision": "r1", "generation": 1, "version": "1", "objects": 1, "bytes": 250},
            ],
        })
    }

    #[test]
    fn history_marks_kept_revisions_and_failures() {
        let this = layer(status(), true);
        let text = render_history("apps", &history_lines(this.status.as_ref().unwrap()));
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| {
                l.split("  ")
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                vec!["REVISION", "GENERATION", "VERSION", "OUTCOME", "AT", "NOTE"],
                vec![
                    "r2",
                    "2",
                    "1",
                    "RolledBack",
                    "2026-11-28T10:02:00Z",
                    "kept (280 bytes)"
                ],
                vec![
                    "r3",
                    "3",
                    "2",
                    "Failed",
                    "2026-11-28T10:01:00Z",
                    "HealthCheckFailed: Deployment apps/web: timed out"
                ],
                // Written before outcomes were recorded: Deployed.
                vec![
                    "r2",
                    "2",
                    "1",
                    "Deployed",
                    "2026-11-28T09:00:00Z",
                    "kept (280 bytes)"
                ],
            ],
            "{text}"
        );
        assert_eq!(
            render_history("apps", &[]),
            "addonslayer apps: no attempt recorded yet\n"
        );
    }

    #[test]
    fn rollback_target_table() {
        for (case, rollback, to, want) in [
            (
                "the newest kept that is not the current attempt",
                true,
                None,
                Ok("r2"),
            ),
            (
                "a kept revision by its beginning",
                true,
                Some("r1"),
                Ok("r1"),
            ),
            (
                "the current attempt is not a target",
                true,
                Some("r3"),
                Err("addonslayer apps: revision \"r3\" is not kept (kept: r2, r1)"),
            ),
            (
                "without spec.rollback nothing is kept",
                false,
                None,
                Err(
                    "addonslayer apps keeps no revisions to roll back to: spec.rollback is not set",
                ),
            ),
        ] {
            let got = rollback_target(&layer(status(), rollback), to);
            assert_eq!(got.as_deref().map_err(String::as_str), want, "{case}");
        }
        let mut alone = status();
        alone["keptRevisions"] = serde_json::json!([
            {"revision": "r3", "generation": 3, "version": "2", "objects": 1, "bytes": 300}]);
        assert_eq!(
            rollback_target(&layer(alone, true), None).unwrap_err(),
            "addonslayer apps: nothing to roll back to (no other revision is kept)"
        );
    }
}
