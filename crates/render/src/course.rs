//! The Reckoner v2 course file: parsing (unknown keys refused with their line), `${VAR}`
//! expansion, and resolution into one [`ReleasePlan`] per release with every default applied.
//!
//! Strata accepts the course exactly as Reckoner v2 writes it, plus three keys Reckoner lacks:
//! `set` on a release (`--set` values), `layer` on a release (the AddonsLayer it belongs to with
//! `--gitops strata`) and `gitops.flux` / `gitops.strata` templates beside `gitops.argocd`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::error::{RenderError, Result, yaml_message};

/// The course file as written. Field names are Reckoner's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CourseFile {
    pub schema: Option<String>,
    /// Default release namespace.
    pub namespace: Option<String>,
    /// Default chart repository name.
    pub repository: Option<String>,
    /// The kube context Reckoner insists on; rendering needs no cluster, so it is only kept.
    pub context: Option<String>,
    #[serde(default)]
    pub repositories: BTreeMap<String, Repository>,
    pub minimum_versions: Option<MinimumVersions>,
    pub hooks: Option<CourseHooks>,
    pub namespace_management: Option<NamespaceManagementDefaults>,
    #[serde(default)]
    pub secrets: Vec<SecretSpec>,
    #[serde(default)]
    pub helm_args: Vec<String>,
    pub gitops: Option<GitOpsTemplates>,
    #[serde(default)]
    pub releases: Vec<Release>,
    /// Free-form home for YAML anchors.
    #[serde(rename = "_references")]
    pub references: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repository {
    pub url: Option<String>,
    pub git: Option<String>,
    pub path: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MinimumVersions {
    pub helm: Option<String>,
    pub reckoner: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CourseHooks {
    #[serde(default)]
    pub pre_install: Vec<String>,
    #[serde(default)]
    pub post_install: Vec<String>,
    #[serde(default)]
    pub init: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceManagementDefaults {
    pub default: Option<NamespaceManagement>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NamespaceManagement {
    pub metadata: Option<NamespaceMetadata>,
    pub settings: Option<NamespaceSettings>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NamespaceMetadata {
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl NamespaceMetadata {
    pub fn is_empty(&self) -> bool {
        self.annotations.is_empty() && self.labels.is_empty()
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSettings {
    pub overwrite: Option<bool>,
}

/// A course secret. Render never runs a secret backend: a value that uses one is refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSpec {
    pub name: String,
    pub backend: Option<String>,
    #[serde(default)]
    pub script: Vec<String>,
    pub parameter_name: Option<String>,
    pub region: Option<String>,
}

/// Templates of the GitOps objects, merged release over course.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GitOpsTemplates {
    pub argocd: Option<Value>,
    pub flux: Option<Value>,
    pub strata: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseHooks {
    #[serde(default)]
    pub pre_install: Vec<String>,
    #[serde(default)]
    pub post_install: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Release {
    pub name: String,
    pub namespace: Option<String>,
    pub namespace_management: Option<NamespaceManagement>,
    /// Defaults to the release name.
    pub chart: Option<String>,
    pub repository: Option<String>,
    pub version: Option<String>,
    pub hooks: Option<ReleaseHooks>,
    /// Values files, relative to the course file.
    #[serde(default)]
    pub files: Vec<String>,
    /// Inline values.
    pub values: Option<Value>,
    /// `--set` values (Strata extension).
    #[serde(default)]
    pub set: BTreeMap<String, Value>,
    /// A Helm plugin Reckoner runs `template` through; render cannot honour it.
    pub plugin: Option<String>,
    pub gitops: Option<GitOpsTemplates>,
    /// The AddonsLayer this release belongs to with `--gitops strata` (Strata extension).
    pub layer: Option<String>,
}

/// Where a chart comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChartSource {
    /// A chart directory (or packaged `.tgz`) on disk.
    Local(PathBuf),
    /// A chart in an HTTP(S) chart repository (`helm template --repo URL CHART`).
    Repository { url: String, chart: String },
    /// A full `oci://` reference.
    Oci(String),
}

/// One release with every course default applied: all `helm template` and the layout need.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleasePlan {
    pub name: String,
    /// Position in the course (drives dependsOn).
    pub index: usize,
    pub namespace: String,
    pub chart_name: String,
    pub chart: ChartSource,
    pub version: Option<String>,
    /// Inline values, passed before the files (Reckoner's order: the files win).
    pub values: Option<Value>,
    /// Values files, resolved against the course file's directory.
    pub files: Vec<PathBuf>,
    /// `key=value` pairs for `--set`, in key order.
    pub set: Vec<(String, String)>,
    pub helm_args: Vec<String>,
    pub namespace_metadata: NamespaceMetadata,
    pub namespace_overwrite: bool,
    pub gitops: GitOpsTemplates,
    /// Name of the AddonsLayer (`--gitops strata`), a DNS label.
    pub layer: String,
}

/// A parsed, resolved course.
#[derive(Debug, Clone)]
pub struct Course {
    /// The course file as given (used in messages).
    pub file: PathBuf,
    /// The course file's directory: relative paths in the course resolve against it.
    pub dir: PathBuf,
    pub releases: Vec<ReleasePlan>,
    pub gitops: GitOpsTemplates,
    /// Things the course asks for that render does not do (shell hooks, context, ...).
    pub warnings: Vec<String>,
}

/// Reads and resolves a course file; `env` answers `${VAR}` look-ups.
pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Course> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        RenderError::course(path.display().to_string(), format!("cannot read: {e}"))
    })?;
    parse(path, &text, env)
}

/// Parses and resolves course text. `path` names the file in messages and anchors relative paths.
pub fn parse(path: &Path, text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Course> {
    let file = path.display().to_string();
    let secrets = secret_names(text);
    let expanded = expand_env(text, env, &secrets).map_err(|m| RenderError::course(&file, m))?;
    let course: CourseFile = serde_saphyr::from_str(&expanded)
        .map_err(|e| RenderError::course(&file, yaml_message(&e)))?;
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."));
    resolve(&file, &dir, course, &secrets).map(|(releases, gitops, warnings)| Course {
        file: path.to_path_buf(),
        dir,
        releases,
        gitops,
        warnings,
    })
}

/// Names declared under `secrets:`, read leniently before `${VAR}` expansion so that references
/// to them stay visible (and are refused later) instead of failing as unset variables.
fn secret_names(text: &str) -> BTreeSet<String> {
    let Ok(value) = serde_saphyr::from_str::<Value>(text) else {
        return BTreeSet::new();
    };
    value
        .get("secrets")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Replaces `${VAR}` with the environment's value, as Reckoner does across the whole course. An
/// unset variable is an error naming its line; references to course secrets are left verbatim.
pub fn expand_env(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    keep: &BTreeSet<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    for (number, line) in text.split_inclusive('\n').enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find("${") {
            let Some(len) = rest[start + 2..].find('}') else {
                break;
            };
            let name = &rest[start + 2..start + 2 + len];
            out.push_str(&rest[..start]);
            let reference = &rest[start..start + 3 + len];
            if keep.contains(name) || !is_env_name(name) {
                out.push_str(reference);
            } else {
                match env(name) {
                    Some(value) => out.push_str(&value),
                    None => {
                        return Err(format!(
                            "line {}: environment variable {name} is not set",
                            number + 1
                        ));
                    }
                }
            }
            rest = &rest[start + 3 + len..];
        }
        out.push_str(rest);
    }
    Ok(out)
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

type Resolved = (Vec<ReleasePlan>, GitOpsTemplates, Vec<String>);

fn resolve(
    file: &str,
    dir: &Path,
    course: CourseFile,
    secrets: &BTreeSet<String>,
) -> Result<Resolved> {
    let err = |message: String| RenderError::course(file, message);
    if let Some(schema) = &course.schema
        && schema != "v2"
    {
        return Err(err(format!(
            "schema: {schema:?} is not supported (only v2; run `reckoner convert` on a v1 file)"
        )));
    }
    if course.releases.is_empty() {
        return Err(err("releases: the course has no releases".into()));
    }
    let mut warnings = Vec::new();
    if course.hooks.as_ref().is_some_and(|h| {
        !(h.pre_install.is_empty() && h.post_install.is_empty() && h.init.is_empty())
    }) {
        warnings.push(format!(
            "{file}: hooks: course shell hooks are not run by strata render"
        ));
    }
    let defaults = course
        .namespace_management
        .as_ref()
        .and_then(|n| n.default.clone())
        .unwrap_or_default();
    let course_gitops = course.gitops.clone().unwrap_or_default();
    let mut seen = BTreeSet::new();
    let mut k8s_names = BTreeMap::new();
    let mut plans = Vec::with_capacity(course.releases.len());
    for (index, release) in course.releases.iter().enumerate() {
        let at = format!("releases[{index}]");
        if !is_release_name(&release.name) {
            return Err(err(format!(
                "{at}.name: {:?} must be 1 to 63 of a-z, A-Z, 0-9, '_' and '-'",
                release.name
            )));
        }
        if !seen.insert(release.name.clone()) {
            return Err(err(format!(
                "{at}.name: release {:?} is listed twice",
                release.name
            )));
        }
        let at = format!("releases[{}]", release.name);
        let k8s = k8s_name(&release.name);
        if let Some(other) = k8s_names.insert(k8s.clone(), release.name.clone()) {
            return Err(err(format!(
                "{at}.name: release {:?} and {other:?} both become the object name {k8s:?}",
                release.name
            )));
        }
        if let Some(plugin) = &release.plugin {
            return Err(err(format!(
                "{at}.plugin: helm plugin {plugin:?} is not supported by strata render"
            )));
        }
        if release
            .hooks
            .as_ref()
            .is_some_and(|h| !(h.pre_install.is_empty() && h.post_install.is_empty()))
        {
            warnings.push(format!(
                "{file}: {at}.hooks: release shell hooks are not run by strata render"
            ));
        }
        let namespace = release
            .namespace
            .clone()
            .or_else(|| course.namespace.clone())
            .ok_or_else(|| {
                err(format!(
                    "{at}.namespace: no namespace (set it on the release or at the top)"
                ))
            })?;
        if !is_dns_label(&namespace) {
            return Err(err(format!(
                "{at}.namespace: {namespace:?} is not a valid namespace name"
            )));
        }
        let chart_name = release
            .chart
            .clone()
            .unwrap_or_else(|| release.name.clone());
        let chart = chart_source(file, dir, &course, release, &at, &chart_name)?;
        for (key, value) in values_strings(release.values.as_ref(), &format!("{at}.values")) {
            refuse_secret_reference(file, &key, &value, secrets)?;
        }
        let mut set = Vec::with_capacity(release.set.len());
        for (key, value) in &release.set {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            refuse_secret_reference(file, &format!("{at}.set.{key}"), &text, secrets)?;
            set.push((key.clone(), text));
        }
        let (namespace_metadata, namespace_overwrite) =
            merge_namespace_management(&defaults, release.namespace_management.as_ref());
        let layer = match &release.layer {
            Some(layer) if is_dns_label(layer) => layer.clone(),
            Some(layer) => {
                return Err(err(format!(
                    "{at}.layer: {layer:?} is not a valid object name (lower-case letters, digits, '-')"
                )));
            }
            None => k8s.clone(),
        };
        plans.push(ReleasePlan {
            name: release.name.clone(),
            index,
            namespace,
            chart_name,
            chart,
            version: release.version.clone(),
            values: release.values.clone().filter(|v| !v.is_null()),
            files: release.files.iter().map(|f| dir.join(f)).collect(),
            set,
            helm_args: course.helm_args.clone(),
            namespace_metadata,
            namespace_overwrite,
            gitops: merge_gitops(&course_gitops, release.gitops.as_ref()),
            layer,
        });
    }
    Ok((plans, course_gitops, warnings))
}

fn chart_source(
    file: &str,
    dir: &Path,
    course: &CourseFile,
    release: &Release,
    at: &str,
    chart: &str,
) -> Result<ChartSource> {
    let err = |message: String| RenderError::course(file, message);
    if is_path(chart) && release.repository.is_none() {
        return Ok(ChartSource::Local(dir.join(chart)));
    }
    let repository = release
        .repository
        .as_deref()
        .or(course.repository.as_deref())
        .ok_or_else(|| {
            err(format!(
                "{at}.repository: no chart repository (set it on the release or at the top)"
            ))
        })?;
    match course.repositories.get(repository) {
        Some(Repository { url: Some(url), .. }) if url.starts_with("oci://") => Ok(
            ChartSource::Oci(format!("{}/{chart}", url.trim_end_matches('/'))),
        ),
        Some(Repository { url: Some(url), .. }) => Ok(ChartSource::Repository {
            url: url.clone(),
            chart: chart.to_string(),
        }),
        Some(Repository { git: Some(_), .. }) => Err(err(format!(
            "repositories.{repository}.git: git chart repositories are not supported by strata render yet"
        ))),
        Some(_) => Err(err(format!("repositories.{repository}: needs a url"))),
        None if is_path(repository) => Ok(ChartSource::Local(dir.join(repository).join(chart))),
        None => Err(err(format!(
            "{at}.repository: {repository:?} is neither a repository under repositories nor a path"
        ))),
    }
}

fn is_path(text: &str) -> bool {
    text.starts_with("./") || text.starts_with("../") || text.starts_with('/')
}

/// Reckoner's release-name rule.
pub fn is_release_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// An RFC 1123 label (namespace and layer names).
pub fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A release name as an object name (Application, Kustomization, AddonsLayer): Reckoner allows
/// upper case and `_`, Kubernetes names do not.
pub fn k8s_name(release: &str) -> String {
    release
        .chars()
        .map(|c| match c {
            '_' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Every string leaf of a values tree with its dotted key path.
pub fn values_strings(values: Option<&Value>, prefix: &str) -> Vec<(String, String)> {
    fn walk(value: &Value, path: String, out: &mut Vec<(String, String)>) {
        match value {
            Value::String(s) => out.push((path, s.clone())),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, format!("{path}[{i}]"), out);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    walk(item, format!("{path}.{key}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Some(values) = values {
        walk(values, prefix.to_string(), &mut out);
    }
    out
}

fn refuse_secret_reference(
    file: &str,
    key: &str,
    value: &str,
    secrets: &BTreeSet<String>,
) -> Result<()> {
    for name in secrets {
        if value.contains(&format!("${{{name}}}")) {
            return Err(RenderError::Secret {
                file: file.to_string(),
                key: key.to_string(),
                message: format!(
                    "uses course secret {name}, whose value would be written to git; \
                     use an argocd-vault-plugin placeholder <path:...#key> instead"
                ),
            });
        }
    }
    Ok(())
}

/// The release's namespace management over the course default: keys of the release win.
fn merge_namespace_management(
    default: &NamespaceManagement,
    release: Option<&NamespaceManagement>,
) -> (NamespaceMetadata, bool) {
    let mut metadata = default.metadata.clone().unwrap_or_default();
    let mut overwrite = default
        .settings
        .as_ref()
        .and_then(|s| s.overwrite)
        .unwrap_or(false);
    if let Some(release) = release {
        if let Some(m) = &release.metadata {
            metadata.labels.extend(m.labels.clone());
            metadata.annotations.extend(m.annotations.clone());
        }
        if let Some(o) = release.settings.as_ref().and_then(|s| s.overwrite) {
            overwrite = o;
        }
    }
    (metadata, overwrite)
}

fn merge_gitops(course: &GitOpsTemplates, release: Option<&GitOpsTemplates>) -> GitOpsTemplates {
    let Some(release) = release else {
        return course.clone();
    };
    let merge = |base: &Option<Value>, over: &Option<Value>| match (base, over) {
        (Some(b), Some(o)) => Some(deep_merge(b.clone(), o)),
        (b, o) => o.clone().or_else(|| b.clone()),
    };
    GitOpsTemplates {
        argocd: merge(&course.argocd, &release.argocd),
        flux: merge(&course.flux, &release.flux),
        strata: merge(&course.strata, &release.strata),
    }
}

/// `over` merged into `base`: maps merge key by key, anything else is replaced.
pub fn deep_merge(mut base: Value, over: &Value) -> Value {
    match (&mut base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (key, value) in o {
                let merged = match b.remove(key) {
                    Some(existing) => deep_merge(existing, value),
                    None => value.clone(),
                };
                b.insert(key.clone(), merged);
            }
            base
        }
        _ => over.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse_text(text: &str) -> Result<Course> {
        parse(Path::new("/repo/course.yaml"), text, &no_env)
    }

    const MINIMAL: &str = "\
namespace: apps
repository: stable
repositories:
  stable: {url: 'http://127.0.0.1:1/charts'}
releases:
  - name: web
    chart: podinfo
    version: 6.5.0
";

    #[test]
    fn resolves_defaults() {
        let course = parse_text(MINIMAL).unwrap();
        let web = &course.releases[0];
        assert_eq!(web.namespace, "apps");
        assert_eq!(
            web.chart,
            ChartSource::Repository {
                url: "http://127.0.0.1:1/charts".into(),
                chart: "podinfo".into()
            }
        );
        assert_eq!(web.layer, "web");
        assert_eq!(course.dir, Path::new("/repo"));
    }

    #[test]
    fn errors_name_the_field() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "unknown top-level key with its line",
                "namespace: a\nbogus: 1\nreleases: [{name: x, chart: ./c}]\n",
                "line 2 column 1: unknown field `bogus`",
            ),
            (
                "unknown release key with its line",
                "namespace: a\nreleases:\n  - name: x\n    chart: ./c\n    valuez: {}\n",
                "line 5 column 5: unknown field `valuez`",
            ),
            (
                "bad release name",
                "namespace: a\nreleases: [{name: 'a b', chart: ./c}]\n",
                "releases[0].name: \"a b\" must be",
            ),
            (
                "duplicate release",
                "namespace: a\nreleases: [{name: x, chart: ./c}, {name: x, chart: ./c}]\n",
                "releases[1].name: release \"x\" is listed twice",
            ),
            (
                "names that collide as objects",
                "namespace: a\nreleases: [{name: a_b, chart: ./c}, {name: a-b, chart: ./c}]\n",
                "both become the object name \"a-b\"",
            ),
            (
                "no namespace",
                "releases: [{name: x, chart: ./c}]\n",
                "releases[x].namespace: no namespace",
            ),
            (
                "unknown repository",
                "namespace: a\nreleases: [{name: x, repository: nope}]\n",
                "releases[x].repository: \"nope\" is neither",
            ),
            (
                "git repository",
                "namespace: a\nrepositories: {g: {git: 'https://x', path: charts}}\nreleases: [{name: x, repository: g}]\n",
                "repositories.g.git: git chart repositories are not supported",
            ),
            (
                "plugin",
                "namespace: a\nreleases: [{name: x, chart: ./c, plugin: secrets}]\n",
                "releases[x].plugin",
            ),
            (
                "v1 schema",
                "schema: v1\nnamespace: a\nreleases: [{name: x, chart: ./c}]\n",
                "schema: \"v1\" is not supported",
            ),
            (
                "unset variable",
                "namespace: a\nreleases:\n  - name: x\n    chart: ./c\n    version: ${NOPE}\n",
                "line 5: environment variable NOPE is not set",
            ),
            (
                "bad layer name",
                "namespace: a\nreleases: [{name: x, chart: ./c, layer: Base}]\n",
                "releases[x].layer",
            ),
        ];
        for (name, text, want) in cases {
            let error = parse_text(text).unwrap_err().to_string();
            assert!(error.starts_with("/repo/course.yaml: "), "{name}: {error}");
            assert!(error.contains(want), "{name}: {error}");
            assert!(!error.contains('\n'), "{name}: one line: {error}");
        }
    }

    #[test]
    fn secret_references_are_refused_with_the_key() {
        let text = "\
namespace: a
secrets:
  - {name: DB_PASS, backend: ShellExecutor, script: [echo, x]}
releases:
  - name: db
    chart: ./c
    values:
      auth: {password: '${DB_PASS}'}
";
        let error = parse_text(text).unwrap_err().to_string();
        assert!(
            error.starts_with(
                "/repo/course.yaml: releases[db].values.auth.password: uses course secret DB_PASS"
            ),
            "{error}"
        );
        let set = text.replace(
            "    values:\n      auth: {password: '${DB_PASS}'}\n",
            "    set: {auth.password: 'x${DB_PASS}'}\n",
        );
        let error = parse_text(&set).unwrap_err().to_string();
        assert!(error.contains("releases[db].set.auth.password"), "{error}");
    }

    #[test]
    fn env_expansion() {
        let env = |name: &str| (name == "TAG").then(|| "1.2.3".to_string());
        let keep = BTreeSet::from(["SECRET".to_string()]);
        let cases: &[(&str, &str)] = &[
            ("v: ${TAG}\n", "v: 1.2.3\n"),
            ("v: ${SECRET}\n", "v: ${SECRET}\n"),
            ("v: ${not a var}\n", "v: ${not a var}\n"),
            ("v: ${unterminated\n", "v: ${unterminated\n"),
            ("a: ${TAG}-${TAG}\nb: c\n", "a: 1.2.3-1.2.3\nb: c\n"),
        ];
        for (given, want) in cases {
            assert_eq!(&expand_env(given, &env, &keep).unwrap(), want, "{given}");
        }
    }

    #[test]
    fn chart_sources() {
        let cases: &[(&str, ChartSource)] = &[
            (
                "{name: x, chart: ./charts/app}",
                ChartSource::Local("/repo/./charts/app".into()),
            ),
            (
                "{name: x, repository: ../charts, chart: app}",
                ChartSource::Local("/repo/../charts/app".into()),
            ),
            (
                "{name: x, repository: oci, chart: app}",
                ChartSource::Oci("oci://registry.invalid/charts/app".into()),
            ),
            (
                "{name: app, repository: web}",
                ChartSource::Repository {
                    url: "http://127.0.0.1:1".into(),
                    chart: "app".into(),
                },
            ),
        ];
        for (release, want) in cases {
            let text = format!(
                "namespace: a\nrepositories:\n  oci: {{url: 'oci://registry.invalid/charts/'}}\n  web: {{url: 'http://127.0.0.1:1'}}\nreleases: [{release}]\n"
            );
            assert_eq!(
                &parse_text(&text).unwrap().releases[0].chart,
                want,
                "{release}"
            );
        }
    }

    #[test]
    fn namespace_management_and_gitops_merge() {
        let text = "\
namespace: a
namespace_management:
  default:
    metadata:
      labels: {team: platform, tier: base}
      annotations: {owner: ops}
    settings: {overwrite: true}
gitops:
  argocd:
    spec:
      source: {repoURL: 'https://git.invalid/x', targetRevision: main}
releases:
  - name: x
    chart: ./c
    namespace_management:
      metadata:
        labels: {tier: apps}
      settings: {overwrite: false}
    gitops:
      argocd:
        spec:
          source: {targetRevision: v2}
";
        let x = &parse_text(text).unwrap().releases[0];
        assert_eq!(x.namespace_metadata.labels["tier"], "apps");
        assert_eq!(x.namespace_metadata.labels["team"], "platform");
        assert_eq!(x.namespace_metadata.annotations["owner"], "ops");
        assert!(!x.namespace_overwrite);
        let source = &x.gitops.argocd.as_ref().unwrap()["spec"]["source"];
        assert_eq!(source["repoURL"], "https://git.invalid/x");
        assert_eq!(source["targetRevision"], "v2");
    }
}
