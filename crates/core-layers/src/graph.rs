//! The layer DAG as data (nodes with state and blockers, edges with their constraint, levels,
//! cycles) and as DOT, Mermaid or JSON, for `strata layers graph`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::crd::{AddonsLayer, Blocker};
use crate::deps::{cycle_through, parse_dependency};
use crate::plan::dependency_graph;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub name: String,
    pub version: String,
    /// `status.state`, empty when the controller has not reconciled the layer yet.
    pub state: String,
    /// Topological level (0 = no dependencies); `None` inside or behind a cycle.
    pub level: Option<usize>,
    pub blocked_by: Vec<Blocker>,
    /// The shard that reconciles the layer (its shard label, `default` without one); only
    /// set when some layer of the graph carries the label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
}

/// `from` depends on `to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Edge {
    pub from: String,
    pub to: String,
    /// The `dependsOn` entry, e.g. `base@>=1.2`.
    pub requirement: String,
    /// The dependency does not exist.
    pub missing: bool,
    /// The two layers are in different shards: the dependent is stalled until they share one.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cross_shard: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    /// Each cycle once, as `a -> b -> a`.
    pub cycles: Vec<Vec<String>>,
}

/// Builds the graph of a set of layers; `shard_key` is the label naming a layer's shard
/// (shards are shown once any layer carries it).
pub fn build(layers: &[AddonsLayer], shard_key: &str) -> Graph {
    let sharded = layers.iter().any(|l| l.is_sharded(shard_key));
    let shard_of: BTreeMap<String, String> = layers
        .iter()
        .filter(|_| sharded)
        .map(|l| {
            (
                l.metadata.name.clone().unwrap_or_default(),
                l.shard(shard_key).to_string(),
            )
        })
        .collect();
    let names: BTreeSet<String> = layers
        .iter()
        .filter_map(|l| l.metadata.name.clone())
        .collect();
    let deps = dependency_graph(layers);
    let mut cycles: Vec<Vec<String>> = Vec::new();
    let mut in_cycle = BTreeSet::new();
    for name in &names {
        if in_cycle.contains(name) {
            continue;
        }
        if let Some(cycle) = cycle_through(name, &deps) {
            in_cycle.extend(cycle.iter().cloned());
            cycles.push(cycle);
        }
    }
    let mut levels: BTreeMap<String, Option<usize>> = BTreeMap::new();
    fn level(
        name: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        in_cycle: &BTreeSet<String>,
        memo: &mut BTreeMap<String, Option<usize>>,
        visiting: &mut BTreeSet<String>,
    ) -> Option<usize> {
        if let Some(known) = memo.get(name) {
            return *known;
        }
        if in_cycle.contains(name) || !visiting.insert(name.to_string()) {
            return None;
        }
        let mut result = Some(0);
        for dep in deps.get(name).into_iter().flatten() {
            if !deps.contains_key(dep) {
                continue; // a missing dependency does not shift the level
            }
            result = match (result, level(dep, deps, in_cycle, memo, visiting)) {
                (Some(mine), Some(theirs)) => Some(mine.max(theirs + 1)),
                _ => None,
            };
        }
        visiting.remove(name);
        memo.insert(name.to_string(), result);
        result
    }
    let mut visiting = BTreeSet::new();
    let mut nodes: Vec<Node> = layers
        .iter()
        .map(|l| {
            let name = l.metadata.name.clone().unwrap_or_default();
            let status = l.status.clone().unwrap_or_default();
            Node {
                level: level(&name, &deps, &in_cycle, &mut levels, &mut visiting),
                version: l.spec.version.clone(),
                state: status.state.unwrap_or_default(),
                blocked_by: status.blocked_by,
                shard: shard_of.get(&name).cloned(),
                name,
            }
        })
        .collect();
    nodes.sort_by(|a, b| {
        (a.level.is_none(), a.level, &a.name).cmp(&(b.level.is_none(), b.level, &b.name))
    });
    let mut edges: Vec<Edge> = layers
        .iter()
        .flat_map(|l| {
            let from = l.metadata.name.clone().unwrap_or_default();
            let names = &names;
            let shard_of = &shard_of;
            l.spec.prereqs.depends_on.iter().filter_map(move |entry| {
                let dep = parse_dependency(entry).ok()?;
                Some(Edge {
                    from: from.clone(),
                    missing: !names.contains(&dep.layer),
                    cross_shard: matches!(
                        (shard_of.get(&from), shard_of.get(&dep.layer)),
                        (Some(a), Some(b)) if a != b
                    ),
                    to: dep.layer,
                    requirement: entry.clone(),
                })
            })
        })
        .collect();
    edges.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
    Graph {
        nodes,
        edges,
        cycles,
    }
}

/// Appends every node's line (`line(node, indent)`), each shard's nodes inside a group that
/// `open(shard)` starts and `close` ends; without shards, the lines alone.
fn push_nodes(
    out: &mut String,
    graph: &Graph,
    open: impl Fn(&str) -> String,
    close: &str,
    line: impl Fn(&Node, &str) -> String,
) {
    let mut groups: BTreeMap<Option<&str>, Vec<&Node>> = BTreeMap::new();
    for node in &graph.nodes {
        groups.entry(node.shard.as_deref()).or_default().push(node);
    }
    for (shard, nodes) in groups {
        let indent = match shard {
            Some(shard) => {
                out.push_str(&open(shard));
                "    "
            }
            None => "  ",
        };
        for node in nodes {
            out.push_str(&line(node, indent));
        }
        if shard.is_some() {
            out.push_str(close);
        }
    }
}

fn color(state: &str) -> &'static str {
    match state {
        "Deployed" => "green",
        "Failed" => "red",
        "Hold" => "grey",
        "" => "black",
        _ => "orange",
    }
}

fn label(node: &Node) -> String {
    let state = if node.state.is_empty() {
        "not reconciled"
    } else {
        &node.state
    };
    format!("{} {}\\n{state}", node.name, node.version)
}

/// Graphviz: `dot -Tsvg`. Edges point from a layer to what it depends on.
pub fn to_dot(graph: &Graph) -> String {
    let mut out = String::from("digraph layers {\n  rankdir=LR;\n  node [shape=box];\n");
    let node_line = |node: &Node, indent: &str| {
        format!(
            "{indent}\"{}\" [label=\"{}\", color={}];\n",
            node.name,
            label(node),
            color(&node.state)
        )
    };
    // Each shard is a box of its own: a dependency edge leaving a box is a chain that crosses
    // shards (its dependent is stalled).
    push_nodes(
        &mut out,
        graph,
        |shard| format!("  subgraph \"cluster_shard_{shard}\" {{\n    label=\"shard {shard}\";\n"),
        "  }\n",
        node_line,
    );
    for edge in &graph.edges {
        if edge.missing {
            out.push_str(&format!(
                "  \"{}\" [label=\"{} (missing)\", style=dashed, color=red];\n",
                edge.to, edge.to
            ));
        }
        let requirement = edge
            .requirement
            .split_once('@')
            .map(|(_, r)| r)
            .unwrap_or("");
        let cross = if edge.cross_shard {
            ", color=red, style=bold, xlabel=\"crosses shards\""
        } else {
            ""
        };
        out.push_str(&format!(
            "  \"{}\" -> \"{}\" [label=\"{requirement}\"{cross}];\n",
            edge.from, edge.to
        ));
    }
    out.push_str("}\n");
    out
}

fn mermaid_id(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Mermaid flowchart (renders in GitHub and GitLab Markdown).
pub fn to_mermaid(graph: &Graph) -> String {
    let mut out = String::from("flowchart LR\n");
    let node_line = |node: &Node, indent: &str| {
        let state = if node.state.is_empty() {
            "not reconciled"
        } else {
            &node.state
        };
        format!(
            "{indent}{}[\"{} {}<br/>{state}\"]\n",
            mermaid_id(&node.name),
            node.name,
            node.version
        )
    };
    push_nodes(
        &mut out,
        graph,
        |shard| {
            format!(
                "  subgraph shard_{}[\"shard {shard}\"]\n",
                mermaid_id(shard)
            )
        },
        "  end\n",
        node_line,
    );
    for edge in &graph.edges {
        let requirement = edge.requirement.split_once('@').map(|(_, r)| r);
        let text = match (requirement, edge.cross_shard) {
            (Some(r), true) => Some(format!("{} (crosses shards)", r.replace('"', "'"))),
            (Some(r), false) => Some(r.replace('"', "'")),
            (None, true) => Some("crosses shards".to_string()),
            (None, false) => None,
        };
        let arrow = match text {
            Some(text) => format!("-->|\"{text}\"|"),
            None => "-->".into(),
        };
        let target = if edge.missing {
            format!("{}[\"{} (missing)\"]", mermaid_id(&edge.to), edge.to)
        } else {
            mermaid_id(&edge.to)
        };
        out.push_str(&format!("  {} {arrow} {target}\n", mermaid_id(&edge.from)));
    }
    for node in &graph.nodes {
        let class = match node.state.as_str() {
            "Deployed" => "deployed",
            "Failed" => "failed",
            _ => "waiting",
        };
        out.push_str(&format!("  class {} {class}\n", mermaid_id(&node.name)));
    }
    out.push_str("  classDef deployed stroke:#2a2\n  classDef failed stroke:#c22\n  classDef waiting stroke:#d80\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{AddonsLayerSpec, AddonsLayerStatus, Prereqs, Source};

    fn layer(name: &str, deps: &[&str], state: &str) -> AddonsLayer {
        let mut l = AddonsLayer::new(
            name,
            AddonsLayerSpec {
                version: "1.0.0".into(),
                source: Source {
                    name: "repo".into(),
                    path: "./x".into(),
                    ..Default::default()
                },
                prereqs: Prereqs {
                    depends_on: deps.iter().map(|d| d.to_string()).collect(),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        l.status = Some(AddonsLayerStatus {
            state: Some(state.into()),
            ..Default::default()
        });
        l
    }

    fn sample() -> Graph {
        build(
            &[
                layer("apps", &["base@>=1.0", "ghost"], "ApplyPending"),
                layer("base", &["bootstrap"], "Deployed"),
                layer("bootstrap", &[], "Deployed"),
                layer("x", &["y"], "Failed"),
                layer("y", &["x"], "Failed"),
            ],
            crate::keys::SHARD_LABEL,
        )
    }

    #[test]
    fn levels_edges_and_cycles() {
        let graph = sample();
        let levels: Vec<(&str, Option<usize>)> = graph
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.level))
            .collect();
        assert_eq!(
            levels,
            vec![
                ("bootstrap", Some(0)),
                ("base", Some(1)),
                ("apps", Some(2)),
                ("x", None),
                ("y", None)
            ]
        );
        assert_eq!(graph.cycles, vec![vec!["x", "y", "x"]]);
        let ghost = graph.edges.iter().find(|e| e.to == "ghost").unwrap();
        assert!(ghost.missing);
        assert_eq!(graph.edges.len(), 5);
    }

    #[test]
    fn renderings() {
        let graph = sample();
        let dot = to_dot(&graph);
        assert!(dot.starts_with("digraph layers {"), "{dot}");
        assert!(
            dot.contains("\"apps\" -> \"base\" [label=\">=1.0\"];"),
            "{dot}"
        );
        assert!(
            dot.contains("\"base\" [label=\"base 1.0.0\\nDeployed\", color=green];"),
            "{dot}"
        );
        assert!(
            dot.contains("\"ghost\" [label=\"ghost (missing)\""),
            "{dot}"
        );
        let mermaid = to_mermaid(&graph);
        assert!(
            mermaid.contains("  apps -->|\">=1.0\"| base\n"),
            "{mermaid}"
        );
        assert!(mermaid.contains("  base --> bootstrap\n"), "{mermaid}");
        assert!(mermaid.contains("class apps waiting"), "{mermaid}");
        let json = serde_json::to_value(&graph).unwrap();
        assert_eq!(json["nodes"][0]["name"], "bootstrap");
        assert_eq!(json["edges"][0]["requirement"], "base@>=1.0");
    }

    #[test]
    fn shards_are_grouped_and_crossing_edges_marked() {
        let key = crate::keys::SHARD_LABEL;
        let sharded = |mut l: AddonsLayer, shard: &str| {
            l.metadata.labels = Some(BTreeMap::from([(key.to_string(), shard.to_string())]));
            l
        };
        let graph = build(
            &[
                sharded(layer("base", &[], "Deployed"), "a"),
                sharded(layer("app", &["base"], "Deployed"), "a"),
                layer("other", &["base"], "Failed"),
            ],
            key,
        );
        let shards: Vec<(&str, Option<&str>)> = graph
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.shard.as_deref()))
            .collect();
        assert_eq!(
            shards,
            vec![
                ("base", Some("a")),
                ("app", Some("a")),
                ("other", Some("default"))
            ]
        );
        let crossing: Vec<(&str, bool)> = graph
            .edges
            .iter()
            .map(|e| (e.from.as_str(), e.cross_shard))
            .collect();
        assert_eq!(crossing, vec![("app", false), ("other", true)]);
        let dot = to_dot(&graph);
        assert!(
            dot.contains("subgraph \"cluster_shard_a\" {\n    label=\"shard a\";\n    \"base\""),
            "{dot}"
        );
        assert!(dot.contains("subgraph \"cluster_shard_default\""), "{dot}");
        assert!(dot.contains("\"other\" -> \"base\" [label=\"\", color=red, style=bold, xlabel=\"crosses shards\"];"), "{dot}");
        let mermaid = to_mermaid(&graph);
        assert!(
            mermaid.contains("  subgraph shard_a[\"shard a\"]\n    base["),
            "{mermaid}"
        );
        assert!(
            mermaid.contains("  other -->|\"crosses shards\"| base\n"),
            "{mermaid}"
        );
        let json = serde_json::to_value(&graph).unwrap();
        assert_eq!(json["nodes"][2]["shard"], "default");
        assert_eq!(json["edges"][1]["crossShard"], true);
        assert!(json["edges"][0].get("crossShard").is_none());
        // Without any shard label, nothing about shards is shown.
        let plain = sample();
        assert!(plain.nodes.iter().all(|n| n.shard.is_none()));
        assert!(!to_dot(&plain).contains("subgraph"));
        assert!(
            serde_json::to_value(&plain).unwrap()["nodes"][0]
                .get("shard")
                .is_none()
        );
    }
}
