//! `strata status`: offline status of every object in the input.

use std::io::Write;
use std::process::ExitCode;

use core_k8s::apply::ResolvedKind;
use core_status::input::{
    Document, Judged, looks_like_json, parse, parse_compact, parse_general, parse_json_documents,
    parse_spanned_into, read_texts,
};
use core_status::policy::Rules;
use core_status::{Evaluation, Observed};
use jiff::Timestamp;
use serde::Serialize;

use crate::cli::{StatusArgs, StatusOutput};

/// One element of `-o json`, fields in the documented order.
#[derive(Debug, Serialize)]
pub struct StatusLine {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub status: String,
    pub message: String,
    pub reason: Option<String>,
}

impl StatusLine {
    fn new(
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        evaluation: Evaluation,
    ) -> Self {
        StatusLine {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            status: evaluation.status.to_string(),
            reason: evaluation.reason().map(str::to_string),
            message: evaluation.message.into_owned(),
        }
    }

    fn from_document(d: &Document, rules: &Rules, now: Timestamp) -> Self {
        StatusLine::new(
            d.api_version(),
            d.kind(),
            d.namespace(),
            d.name(),
            rules.evaluate(&d.object, now),
        )
    }

    /// A document judged with its pods (a workload's, from `pods`) under `rules`.
    fn with_pods(
        d: &Document,
        pods: &core_status::workload::PodIndex,
        rules: &Rules,
        now: Timestamp,
    ) -> Self {
        StatusLine::new(
            d.api_version(),
            d.kind(),
            d.namespace(),
            d.name(),
            rules.evaluate_with_pods(&d.object, pods.for_workload(&d.object), now),
        )
    }

    fn from_observed(o: &Observed<'_>, now: Timestamp) -> Self {
        StatusLine::new(
            o.api_version(),
            o.kind(),
            o.namespace(),
            o.name(),
            o.evaluate(now),
        )
    }
}

/// Parses `--now`, defaulting to the system clock.
pub fn parse_now(now: Option<&str>) -> Result<Timestamp, String> {
    match now {
        None => Ok(Timestamp::now()),
        Some(text) => text
            .parse()
            .map_err(|e| format!("--now {text:?}: not an RFC 3339 time ({e})")),
    }
}

pub fn run(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let now = match parse_now(args.now.as_deref()) {
        Ok(now) => now,
        Err(e) => return Ok(crate::cli::input_error(&e)),
    };
    let rules = match crate::cli::status_rules(&args.health) {
        Ok(rules) => rules,
        Err(e) => return Ok(crate::cli::input_error(&e)),
    };
    if !args.kinds.is_empty() {
        return live(args, &rules, now);
    }
    if args.namespace.is_some() || args.all_namespaces {
        return Ok(crate::cli::input_error(
            "-n/--namespace and -A/--all-namespaces choose live objects: use them with -k KIND",
        ));
    }
    let texts = match read_texts(&args.files) {
        Ok(texts) => texts,
        Err(e) => return Ok(crate::cli::input_error(&e.to_string())),
    };
    if !rules.is_kstatus() {
        return match judged_lines(texts, &rules, now) {
            Ok(lines) => print_lines(args.output, &lines),
            Err(e) => Ok(crate::cli::input_error(&e)),
        };
    }
    let mut lines = Vec::new();
    for (source, text) in texts {
        match text_lines(&source, text, &rules, now) {
            Ok(more) => lines.extend(more),
            Err(e) => return Ok(crate::cli::input_error(&e)),
        }
    }
    print_lines(args.output, &lines)
}

/// The status lines of one input text. JSON, and block-style YAML (what `kubectl get -o yaml`
/// prints) once turned into JSON, are decoded straight into the compact form when the rules
/// allow it: much faster and smaller on large inputs. The text is dropped as soon as it is
/// converted. `Err` is the one-line message for bad input.
fn text_lines(
    source: &str,
    text: String,
    rules: &Rules,
    now: Timestamp,
) -> Result<Vec<StatusLine>, String> {
    let compact = |json: &str| {
        parse_compact(json).map(|objects| {
            objects
                .iter()
                .map(|o| StatusLine::from_observed(o, now))
                .collect::<Vec<_>>()
        })
    };
    let documents = if looks_like_json(&text) {
        if let Some(lines) = compact(&text) {
            return Ok(lines);
        }
        parse(source, &text)
    } else if let Some((json, indices)) = core_status::block_yaml::to_json_documents(&text) {
        drop(text);
        // One document is decoded as itself (a `List` is flattened on the way).
        let one = match indices.len() {
            1 => &json[1..json.len() - 1],
            _ => &json[..],
        };
        if let Some(lines) = compact(one) {
            return Ok(lines);
        }
        parse_json_documents(source, &json, &indices)
            .ok_or_else(|| format!("{source}: unreadable"))?
    } else {
        // Outside the fast reader's subset: the general parser, not the fast one again.
        parse_general(source, &text)
    };
    documents
        .map(|documents| {
            documents
                .iter()
                .map(|d| StatusLine::from_document(d, rules, now))
                .collect()
        })
        .map_err(|e| e.to_string())
}

/// Status lines under rules beyond kstatus' own (`--strict`, `--health-exprs`), judged with
/// the pods of the whole input: a workload whose pods (in any of the files) cannot start is
/// Failed under `workload_failures`. JSON, and block-style YAML once turned into JSON, are
/// decoded compactly with each object's text kept, so only the objects the rules must read in
/// full (see [`Rules::evaluate_all`]) are decoded twice.
fn judged_lines(
    texts: Vec<(String, String)>,
    rules: &Rules,
    now: Timestamp,
) -> Result<Vec<StatusLine>, String> {
    // YAML is turned into JSON first: the objects below borrow from these texts.
    let texts: Vec<(String, String, Option<Vec<usize>>)> = texts
        .into_iter()
        .map(|(source, text)| {
            if looks_like_json(&text) {
                return (source, text, None);
            }
            match core_status::block_yaml::to_json_documents(&text) {
                Some((json, indices)) => (source, json, Some(indices)),
                None => (source, text, None),
            }
        })
        .collect();
    let mut objects = Vec::new();
    for (source, text, indices) in &texts {
        // One YAML document is decoded as itself (a `List` is flattened on the way).
        let one = match indices {
            Some(indices) if indices.len() == 1 => &text[1..text.len() - 1],
            _ => &text[..],
        };
        let json = indices.is_some() || looks_like_json(text);
        if json && parse_spanned_into(one, &mut objects) {
            continue;
        }
        let documents = match indices {
            Some(indices) => parse_json_documents(source, text, indices)
                .ok_or_else(|| format!("{source}: unreadable"))?,
            None if json => parse(source, text),
            None => parse_general(source, text),
        }
        .map_err(|e| e.to_string())?;
        objects.extend(documents.into_iter().map(|d| Judged::Full(d.object)));
    }
    let evaluations = rules.evaluate_all(&objects, now);
    let lines = objects
        .iter()
        .zip(evaluations)
        .map(|(o, evaluation)| {
            StatusLine::new(
                o.api_version(),
                o.kind(),
                o.namespace(),
                o.name(),
                evaluation,
            )
        })
        .collect();
    // The command prints these lines and exits: freeing every object one node at a time
    // took a quarter of a large run. The OS takes the memory back at exit.
    std::mem::forget(objects);
    Ok(lines)
}

fn print_lines(output: StatusOutput, lines: &[StatusLine]) -> anyhow::Result<ExitCode> {
    match output {
        StatusOutput::Json => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            serde_json::to_writer_pretty(&mut out, &lines)?;
            writeln!(out)?;
            out.flush()?;
        }
        StatusOutput::Table => print!("{}", table(lines)),
    }
    Ok(ExitCode::SUCCESS)
}

/// `strata status -k KIND[/NAME]`: the same report for live objects.
fn live(args: &StatusArgs, rules: &Rules, now: Timestamp) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let objects = runtime.block_on(async {
        let client = args.cluster.client().await?;
        let mut objects = Vec::new();
        for spec in &args.kinds {
            match live_objects(
                &client,
                spec,
                args.namespace.as_deref(),
                args.all_namespaces,
            )
            .await
            {
                Ok(found) => objects.extend(found),
                Err(e) => return Ok::<_, anyhow::Error>(Err(format!("-k {spec}: {e}"))),
            }
        }
        let pods = if rules.needs_pods() {
            workload_pods(&client, &objects).await
        } else {
            Vec::new()
        };
        Ok(Ok((objects, pods)))
    })?;
    let (objects, pods) = match objects {
        Ok(found) => found,
        Err(e) => return Ok(crate::cli::input_error(&e)),
    };
    let pods = core_status::workload::PodIndex::new(&pods);
    let lines: Vec<StatusLine> = objects
        .iter()
        .map(|d| StatusLine::with_pods(d, &pods, rules, now))
        .collect();
    print_lines(args.output, &lines)
}

/// The pods of every live workload (one LIST by its selector each) for `--strict`'s
/// workload rule. A LIST that fails (no right to read pods) leaves that workload to the other
/// rules, with one warning.
async fn workload_pods(client: &kube::Client, objects: &[Document]) -> Vec<serde_json::Value> {
    let mut pods = Vec::new();
    let mut warned = false;
    for d in objects
        .iter()
        .filter(|d| core_status::workload::is_workload(d.api_version(), d.kind()))
    {
        match core_status::wait::list_workload_pods(client, d.namespace(), &d.object).await {
            Ok(found) => pods.extend(found),
            Err(e) if !warned => {
                warned = true;
                eprintln!(
                    "warning: cannot list the pods of {} {}/{}: {e}; workloads are judged without their pods",
                    d.kind(),
                    d.namespace(),
                    d.name()
                );
            }
            Err(_) => {}
        }
    }
    pods
}

/// The live objects one `-k KIND[/NAME]` names, as documents of the source `spec`. `Err` is a
/// message for the user (unknown kind, object not found, API error), to be prefixed with the
/// argument.
async fn live_objects(
    client: &kube::Client,
    spec: &str,
    namespace: Option<&str>,
    all_namespaces: bool,
) -> Result<Vec<Document>, String> {
    use kube::api::ListParams;
    let (kind, name) = match spec.split_once('/') {
        Some((kind, name)) if !name.is_empty() && !name.contains('/') => (kind, Some(name)),
        Some(_) => return Err("expected KIND or KIND/NAME".into()),
        None => (spec, None),
    };
    let kind = resolve_kind(client, kind).await?;
    let resource = &kind.resource;
    let scope = match (kind.namespaced, namespace, all_namespaces) {
        (false, _, _) | (true, _, true) => None,
        (true, Some(ns), false) => Some(ns.to_string()),
        (true, None, false) => Some(client.default_namespace().to_string()),
    };
    let api = kind.api(client, scope.as_deref());
    let where_ = scope
        .as_deref()
        .map(|ns| format!(" in namespace {ns}"))
        .unwrap_or_default();
    let mut found = Vec::new();
    match name {
        Some(name) => match api.get_opt(name).await {
            Ok(Some(object)) => found.push(object),
            Ok(None) => {
                return Err(format!(
                    "{} {name:?} not found{where_}",
                    resource_name(resource)
                ));
            }
            Err(e) => {
                return Err(format!(
                    "reading {} {name}{where_}: {e}",
                    resource_name(resource)
                ));
            }
        },
        None => {
            // Page through large lists rather than asking for everything at once.
            let mut params = ListParams::default().limit(500);
            loop {
                let page = api
                    .list(&params)
                    .await
                    .map_err(|e| format!("listing {}{where_}: {e}", resource_name(resource)))?;
                found.extend(page.items);
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
        }
    }
    found
        .into_iter()
        .map(|object| {
            let mut value = serde_json::to_value(object).map_err(|e| e.to_string())?;
            // List items come without their type.
            if let Some(map) = value.as_object_mut() {
                map.insert("apiVersion".into(), resource.api_version.clone().into());
                map.insert("kind".into(), resource.kind.clone().into());
            }
            Ok(Document {
                source: spec.to_string(),
                index: 0,
                object: value,
            })
        })
        .collect()
}

/// `plural.group` (or `plural` for the core group), as kubectl names a resource.
fn resource_name(resource: &kube::api::ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// A kind as a user types it — kind (`Deployment`), resource (`deployments`), singular or
/// short name (`deploy`), optionally with `.group` (`deployments.apps`) — resolved by discovery
/// like kubectl does: the core group first, then the others in the server's order, each at its
/// preferred version.
async fn resolve_kind(client: &kube::Client, kind: &str) -> Result<ResolvedKind, String> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, APIResourceList};
    let wanted = kind.to_ascii_lowercase();
    let (name, group) = match wanted.split_once('.') {
        Some((name, group)) => (name.to_string(), Some(group.to_string())),
        None => (wanted.clone(), None),
    };
    let matches = |list: &APIResourceList| {
        list.resources
            .iter()
            .find(|r| {
                !r.name.contains('/')
                    && r.verbs.iter().any(|v| v == "list")
                    && (r.name == name
                        || r.singular_name == name
                        || r.kind.to_ascii_lowercase() == name
                        || r.short_names.iter().flatten().any(|s| *s == name))
            })
            .cloned()
    };
    let to_resource = |group: &str, version: &str, r: &APIResource| {
        let gvk = kube::core::GroupVersionKind::gvk(group, version, &r.kind);
        ResolvedKind {
            resource: kube::api::ApiResource::from_gvk_with_plural(&gvk, &r.name),
            namespaced: r.namespaced,
        }
    };
    if group.as_deref().is_none_or(|g| g.is_empty() || g == "core") {
        let core = client
            .list_core_api_resources("v1")
            .await
            .map_err(|e| format!("discovery: {e}"))?;
        if let Some(r) = matches(&core) {
            return Ok(to_resource("", "v1", &r));
        }
    }
    let groups = client
        .list_api_groups()
        .await
        .map_err(|e| format!("discovery: {e}"))?;
    let candidates: Vec<_> = groups
        .groups
        .iter()
        .filter(|g| group.as_deref().is_none_or(|want| g.name == want))
        .filter_map(|g| {
            let version = g.preferred_version.as_ref().or(g.versions.first())?;
            Some((
                g.name.clone(),
                version.version.clone(),
                version.group_version.clone(),
            ))
        })
        .collect();
    let lists = futures::future::join_all(
        candidates
            .iter()
            .map(|(_, _, group_version)| client.list_api_group_resources(group_version)),
    )
    .await;
    for ((group, version, _), list) in candidates.iter().zip(lists) {
        // A group whose discovery fails (an aggregated API that is down) is skipped.
        if let Ok(list) = list
            && let Some(r) = matches(&list)
        {
            return Ok(to_resource(group, version, &r));
        }
    }
    Err(format!(
        "the server does not serve a resource named {kind:?} (kind, resource or short name)"
    ))
}

/// A plain aligned table: KIND NAMESPACE NAME STATUS REASON MESSAGE.
pub fn table(lines: &[StatusLine]) -> String {
    let rows: Vec<[String; 6]> = std::iter::once(
        ["KIND", "NAMESPACE", "NAME", "STATUS", "REASON", "MESSAGE"].map(String::from),
    )
    .chain(lines.iter().map(|l| {
        [
            l.kind.to_string(),
            l.namespace.to_string(),
            l.name.to_string(),
            l.status.clone(),
            l.reason.clone().unwrap_or_default(),
            l.message.to_string(),
        ]
    }))
    .collect();
    let mut widths = [0usize; 6];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i == 5 {
                    cell.clone()
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
