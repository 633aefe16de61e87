//! The Helm chart `helm/strata` and what is generated from it: the values table of its README
//! (from the `# --` comments of `values.yaml`), `values.schema.json` (from the shape of
//! `values.yaml`), and the plain manifests under `manifests/<service>/` (rendered by helm).
//! Tests compare each with the committed file; `make manifests` rewrites them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

/// The services of the chart: values key, service name.
pub const SERVICES: [(&str, &str); 4] = [
    ("layerController", "layer-controller"),
    ("driftObserver", "drift-observer"),
    ("rolloutOperator", "rollout-operator"),
    ("admissionWebhook", "admission-webhook"),
];

/// The repository root, read at run time (a shared cargo cache may hold a build made from
/// another checkout) with the compile-time path as fallback.
pub fn repo_root() -> PathBuf {
    let root = crate::plane::e2e_dir().join("..");
    root.canonicalize().unwrap_or(root)
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("helm/strata")
}

/// The helm binary: `$HELM` (the Makefile and `with-plane.sh` set it), else the one the plane
/// build caches (`$STRATA_CACHE/bin/helm-<version>/helm`, so a test run by hand finds it),
/// else `helm` on `PATH`.
pub fn helm() -> PathBuf {
    if let Some(helm) = std::env::var_os("HELM").filter(|h| !h.is_empty()) {
        return PathBuf::from(helm);
    }
    crate::plane::pinned_version("HELM_VERSION")
        .zip(crate::plane::cache_dir())
        .map(|(version, cache)| cache.join(format!("bin/helm-{version}/helm")))
        .filter(|cached| cached.is_file())
        .unwrap_or_else(|| PathBuf::from("helm"))
}

/// The Kubernetes version the plane runs (`KUBERNETES_VERSION` in `versions.env`): what
/// `helm template` and `helm lint` are told the cluster is, since the chart's `kubeVersion`
/// refuses helm's offline default (1.20).
pub fn kube_version() -> String {
    crate::plane::pinned_version("KUBERNETES_VERSION").unwrap_or_else(|| "v1.34.0".to_string())
}

/// The chart's default memory limit of a service (`<values_key>.resources.limits.memory`
/// in values.yaml), in bytes.
pub fn documented_memory_limit(values_key: &str) -> Result<u64> {
    let path = chart_dir().join("values.yaml");
    let values: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path)?)?;
    let limit = values[values_key]["resources"]["limits"]["memory"]
        .as_str()
        .with_context(|| format!("{values_key}.resources.limits.memory in {}", path.display()))?;
    let (number, unit) = limit.split_at(
        limit
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(limit.len()),
    );
    let scale = match unit {
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ki" => 1 << 10,
        other => bail!("unexpected unit {other:?} in {limit}"),
    };
    Ok(number.parse::<u64>()? * scale)
}

/// One documented value: its dotted key, type, default (compact JSON) and description.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueDoc {
    pub key: String,
    pub kind: &'static str,
    pub default: String,
    pub description: String,
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int",
        Value::Number(_) => "float",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

fn lookup<'a>(values: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(values, |v, k| v.get(k))
}

/// Reads the `# -- description` comments of a values file: each documents the key on the next
/// non-comment line; following `#` lines continue it. The key's path comes from indentation.
pub fn value_docs(values_yaml: &str) -> Result<Vec<ValueDoc>> {
    let values: Value = serde_saphyr::from_str(values_yaml).context("parsing values.yaml")?;
    let mut docs = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<String> = None;
    for (index, line) in values_yaml.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(text) = trimmed.strip_prefix("# --") {
            pending = Some(text.trim().to_string());
            continue;
        }
        if let Some(text) = trimmed.strip_prefix('#') {
            if let Some(description) = pending.as_mut() {
                description.push(' ');
                description.push_str(text.trim());
            }
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('-') {
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        stack.retain(|(i, _)| *i < indent);
        stack.push((indent, key.trim().to_string()));
        if let Some(description) = pending.take() {
            let path: Vec<String> = stack.iter().map(|(_, k)| k.clone()).collect();
            let value = lookup(&values, &path).with_context(|| {
                format!(
                    "values.yaml line {}: key {} not found",
                    index + 1,
                    path.join(".")
                )
            })?;
            docs.push(ValueDoc {
                key: path.join("."),
                kind: kind_of(value),
                default: serde_json::to_string(value)?,
                description,
            });
        }
    }
    Ok(docs)
}

/// The README's values table (Markdown), one row per documented value.
pub fn values_table(docs: &[ValueDoc]) -> String {
    let mut out = String::from("| Key | Type | Default | Description |\n|---|---|---|---|\n");
    for doc in docs {
        let default = doc.default.replace('|', "\\|");
        let description = doc.description.replace('|', "\\|");
        out.push_str(&format!(
            "| `{}` | {} | `{}` | {} |\n",
            doc.key, doc.kind, default, description
        ));
    }
    out
}

pub const TABLE_START: &str =
    "<!-- values-table:start (generated from values.yaml by `make manifests`) -->\n";
pub const TABLE_END: &str = "<!-- values-table:end -->";

/// The README with its values table replaced by `table`.
pub fn readme_with_table(readme: &str, table: &str) -> Result<String> {
    let (Some(start), Some(end)) = (readme.find(TABLE_START), readme.find(TABLE_END)) else {
        bail!("helm/strata/README.md has no values-table markers");
    };
    Ok(format!(
        "{}{}{}{}",
        &readme[..start],
        TABLE_START,
        table,
        &readme[end..]
    ))
}

/// Keys whose value is a Kubernetes type or a free-form map: any object is accepted.
const FREE_FORM: [&str; 8] = [
    "resources",
    "startupProbe",
    "objectSelector",
    "podSecurityContext",
    "securityContext",
    "affinity",
    "nodeSelector",
    "namespaceSelector",
];

/// Keys whose value is a map of strings (labels and annotations).
fn is_string_map(key: &str) -> bool {
    key.ends_with("Labels")
        || key.ends_with("Annotations")
        || key == "labels"
        || key == "annotations"
        || key == "nodeSelector"
}

fn enum_of(key: &str, path: &[String]) -> Option<Vec<&'static str>> {
    let global = path.first().is_some_and(|k| k == "global");
    match key {
        "logFormat" if global => Some(vec!["json", "text", "logfmt"]),
        "logFormat" => Some(vec!["", "json", "text", "logfmt"]),
        "pullPolicy" if global => Some(vec!["Always", "IfNotPresent", "Never"]),
        "pullPolicy" => Some(vec!["", "Always", "IfNotPresent", "Never"]),
        "failurePolicy" => Some(vec!["Fail", "Ignore"]),
        "mode" if path.iter().any(|k| k == "tls") => Some(vec!["self", "certManager", "secret"]),
        "dnsPolicy" => Some(vec![
            "",
            "ClusterFirst",
            "ClusterFirstWithHostNet",
            "Default",
            "None",
        ]),
        "scope" => Some(vec!["*", "Cluster", "Namespaced"]),
        _ => None,
    }
}

/// A JSON schema for a value, from its default: closed objects (a misspelt key is an error),
/// free-form Kubernetes objects and string maps, typed scalars and a few enumerations.
fn schema_of(value: &Value, path: &[String], docs: &[ValueDoc]) -> Value {
    let key = path.last().map(String::as_str).unwrap_or("");
    let mut schema = match value {
        // Kubernetes types and empty maps (labels, annotations, selectors) take any keys.
        Value::Object(map) if FREE_FORM.contains(&key) || map.is_empty() => {
            if is_string_map(key) {
                json!({"type": "object", "additionalProperties": {"type": "string"}})
            } else {
                json!({"type": "object"})
            }
        }
        Value::Object(map) => {
            let mut properties = Map::new();
            for (k, v) in map {
                let mut child = path.to_vec();
                child.push(k.clone());
                properties.insert(k.clone(), schema_of(v, &child, docs));
            }
            // `global` too: a misspelt global key is as silent as any other.
            json!({"type": "object", "properties": properties, "additionalProperties": false})
        }
        Value::Array(_) if key == "imagePullSecrets" => json!({
            "type": "array",
            "items": {"anyOf": [
                {"type": "string"},
                {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
            ]}
        }),
        // A shard names Deployments and Leases and is a label value; `default` is what the
        // layers without the label are called.
        Value::Array(_) if key == "shards" => json!({
            "type": "array",
            "uniqueItems": true,
            "items": {
                "type": "string",
                "maxLength": 40,
                "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                "not": {"const": "default"}
            }
        }),
        Value::Array(_) => json!({"type": "array"}),
        Value::String(_) => match enum_of(key, path) {
            Some(values) => json!({"type": "string", "enum": values}),
            None => json!({"type": "string"}),
        },
        Value::Bool(_) => json!({"type": "boolean"}),
        Value::Number(_) if path.iter().any(|k| k == "ports") => {
            json!({"type": "integer", "minimum": 1, "maximum": 65535})
        }
        // kube-apiserver refuses a webhook timeout outside 1–30 s.
        Value::Number(_) if key == "timeoutSeconds" => {
            json!({"type": "integer", "minimum": 1, "maximum": 30})
        }
        // Rates are fractional even when their default is a whole number; `--set` passes a
        // fraction as a string.
        Value::Number(_) if key.ends_with("QPS") => json!({
            "anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"}]
        }),
        Value::Number(n) if n.is_i64() || n.is_u64() => json!({"type": "integer", "minimum": 0}),
        Value::Number(_) => json!({"type": "number", "minimum": 0}),
        Value::Null => json!({}),
    };
    let dotted = path.join(".");
    if let Some(doc) = docs.iter().find(|d| d.key == dotted) {
        schema["description"] = Value::String(doc.description.clone());
    }
    schema
}

/// `values.schema.json` for a values file.
pub fn values_schema(values_yaml: &str) -> Result<String> {
    let values: Value = serde_saphyr::from_str(values_yaml).context("parsing values.yaml")?;
    let docs = value_docs(values_yaml)?;
    let mut schema = schema_of(&values, &[], &docs);
    let Some(object) = schema.as_object_mut() else {
        bail!("values.yaml is not a map");
    };
    object.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft-07/schema#"),
    );
    object.insert(
        "title".into(),
        json!("Values of the Strata chart (generated from values.yaml by `make manifests`)"),
    );
    Ok(serde_json::to_string_pretty(&schema)? + "\n")
}

/// Runs `helm template` of the chart with these extra arguments; the rendered YAML.
pub fn template(args: &[&str]) -> Result<String> {
    render(&helm(), "strata", "strata-system", args)
}

/// `helm template RELEASE helm/strata --namespace NAMESPACE ARGS...` with `helm`: the
/// rendered YAML, `# Source:` comments included.
pub fn render(helm: &Path, release: &str, namespace: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(helm)
        .args(["template", release])
        .arg(chart_dir())
        .args(["--kube-version", &kube_version()])
        .args(["--namespace", namespace])
        .args(args)
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    if !output.status.success() {
        bail!(
            "helm template {release} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// Splits helm's output into (template file, document) pairs, without the `# Source:` lines.
pub fn documents(rendered: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for doc in rendered.split("\n---\n") {
        let doc = doc.trim_start_matches("---\n");
        let mut source = String::new();
        let mut body = String::new();
        for line in doc.lines() {
            if let Some(s) = line.strip_prefix("# Source: ") {
                source = s.to_string();
            } else {
                body.push_str(line);
                body.push('\n');
            }
        }
        if body.lines().any(|l| l.starts_with("kind:")) {
            out.push((source, body));
        }
    }
    out
}

fn kind_line(doc: &str) -> &str {
    doc.lines()
        .find_map(|l| l.strip_prefix("kind: "))
        .unwrap_or("")
}

/// Which file of `manifests/<service>/` a rendered object goes to.
fn manifest_file(kind: &str) -> &'static str {
    match kind {
        "ServiceAccount" | "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding" => {
            "rbac.yaml"
        }
        "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => "webhooks.yaml",
        _ => "deployment.yaml",
    }
}

/// The plain manifests generated from the chart: (path under `manifests/`, content). Each
/// service is rendered alone with the default values in namespace `strata-system`; the CRDs
/// stay as `make crds` writes them, with a kustomization beside them.
pub fn plain_manifests() -> Result<Vec<(String, String)>> {
    const HEADER: &str =
        "# Generated from helm/strata by `make manifests` (default values); do not edit.\n";
    let mut files = Vec::new();
    for (key, service) in SERVICES {
        // `helm test` pods are Helm's alone.
        let mut args = vec![
            "--set".to_string(),
            "crds.enabled=false".to_string(),
            "--set".to_string(),
            "tests.enabled=false".to_string(),
        ];
        for (other, _) in SERVICES {
            args.push("--set".into());
            args.push(format!("{other}.enabled={}", other == key));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let rendered = template(&args)?;
        let mut by_file: Vec<(&'static str, String)> = Vec::new();
        for (_, doc) in documents(&rendered) {
            // Not installed by Helm: the managed-by label says what wrote them.
            let doc = doc.replace(
                "app.kubernetes.io/managed-by: Helm",
                "app.kubernetes.io/managed-by: strata-manifests",
            );
            let file = manifest_file(kind_line(&doc));
            match by_file.iter_mut().find(|(f, _)| *f == file) {
                Some((_, content)) => {
                    content.push_str("---\n");
                    content.push_str(&doc);
                }
                None => by_file.push((file, format!("{HEADER}{doc}"))),
            }
        }
        by_file.sort_by_key(|(f, _)| *f);
        let mut kustomization = format!(
            "{HEADER}apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: strata-system\nresources:\n"
        );
        for (file, _) in &by_file {
            kustomization.push_str(&format!("  - {file}\n"));
        }
        files.push((format!("{service}/kustomization.yaml"), kustomization));
        for (file, content) in by_file {
            files.push((format!("{service}/{file}"), content));
        }
    }
    let mut crds = String::from(
        "# The CRDs every service needs (generated by `make crds`).\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n",
    );
    for crd in crd_files()? {
        crds.push_str(&format!("  - {crd}\n"));
    }
    files.push(("crds/kustomization.yaml".into(), crds));
    let mut all = format!(
        "{HEADER}apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - crds\n"
    );
    for (_, service) in SERVICES {
        all.push_str(&format!("  - {service}\n"));
    }
    files.push(("kustomization.yaml".into(), all));
    Ok(files)
}

/// The CRD files `make crds` writes, sorted.
pub fn crd_files() -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(repo_root().join("manifests/crds"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    names.sort();
    Ok(names)
}

/// Files the chart carries as copies of the repository's generated files: (source, copy).
pub fn chart_copies() -> Result<Vec<(PathBuf, PathBuf)>> {
    let root = repo_root();
    let mut pairs = Vec::new();
    for crd in crd_files()? {
        pairs.push((
            root.join("manifests/crds").join(&crd),
            chart_dir().join("files/crds").join(&crd),
        ));
    }
    let mut dashboards: Vec<String> = std::fs::read_dir(root.join("dashboards"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") || n == "alerts.yaml")
        .collect();
    dashboards.sort();
    for file in dashboards {
        pairs.push((
            root.join("dashboards").join(&file),
            chart_dir().join("files/dashboards").join(&file),
        ));
    }
    Ok(pairs)
}

/// Writes `content` to `path` when updating (`STRATA_UPDATE_MANIFESTS=1`), else fails when the
/// committed file differs. Returns the paths that were stale.
pub fn check_or_update(path: &Path, content: &str) -> Result<bool> {
    let current = std::fs::read_to_string(path).unwrap_or_default();
    if current == content {
        return Ok(false);
    }
    if std::env::var_os("STRATA_UPDATE_MANIFESTS").is_some() {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUES: &str = "\
# header comment, not a description
a:
  # -- The b value,
  # continued.
  b: 3
  c:
    # -- A list.
    d: [x]
  undocumented: true
# -- Top level.
e: {}
";

    #[test]
    fn docs_follow_indentation_and_continuations() {
        let docs = value_docs(VALUES).unwrap();
        let keys: Vec<_> = docs.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["a.b", "a.c.d", "e"]);
        assert_eq!(docs[0].description, "The b value, continued.");
        assert_eq!((docs[0].kind, docs[0].default.as_str()), ("int", "3"));
        assert_eq!(
            (docs[1].kind, docs[1].default.as_str()),
            ("list", "[\"x\"]")
        );
        assert_eq!((docs[2].kind, docs[2].default.as_str()), ("object", "{}"));
    }

    #[test]
    fn schema_closes_objects_and_types_leaves() {
        let schema: Value = serde_json::from_str(&values_schema(VALUES).unwrap()).unwrap();
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(
            schema["properties"]["a"]["additionalProperties"],
            json!(false)
        );
        assert_eq!(
            schema["properties"]["a"]["properties"]["b"]["type"],
            json!("integer")
        );
        assert_eq!(
            schema["properties"]["a"]["properties"]["b"]["description"],
            json!("The b value, continued.")
        );
        assert_eq!(
            schema["properties"]["e"],
            json!({"type": "object", "description": "Top level."})
        );
    }

    #[test]
    fn table_escapes_pipes() {
        let docs = [ValueDoc {
            key: "x".into(),
            kind: "string",
            default: "\"a|b\"".into(),
            description: "one | two".into(),
        }];
        assert!(values_table(&docs).contains("| `x` | string | `\"a\\|b\"` | one \\| two |"));
    }
}
