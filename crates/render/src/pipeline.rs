//! One render from course file to output tree: load the course, run `helm template` for every
//! release, then [`assemble`] (pure) the files, and compare them with the disk. Writing is a
//! separate step so `--diff` can stop before it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::course::{self, ChartSource, Course, ReleasePlan, k8s_name};
use crate::error::{RenderError, Result};
use crate::gitops::{self, Tool};
use crate::helm;
use crate::hooks::{self, HookTarget};
use crate::layout::{self, OutputFile};
use crate::profile::Profile;
use crate::prune::{self, Changes};
use crate::secrets;
use crate::split::{self, Scopes, group_of, kind_of, name_of};

/// Namespaces every cluster has: render never writes a Namespace object for them.
const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// What to render and where.
#[derive(Debug, Clone)]
pub struct Options {
    pub course: PathBuf,
    /// The output directory (the CLI defaults it to `manifests` beside the course file).
    pub output: PathBuf,
    pub tool: Tool,
    pub profile: Option<Profile>,
    pub helm: PathBuf,
    /// How many `helm template` processes run at once.
    pub jobs: usize,
}

/// The result of a render before anything is written.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub changes: Changes,
    pub files: usize,
    /// Course, secret and layout warnings (never containing a secret value).
    pub warnings: Vec<String>,
    /// The hook report: everything converted with a loss, or dropped.
    pub hook_notes: Vec<String>,
}

/// The files of one render and what is worth telling the user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assembly {
    pub files: Vec<OutputFile>,
    pub warnings: Vec<String>,
    pub hook_notes: Vec<String>,
}

/// Loads the course, renders every release and compares the result with the output directory.
/// Nothing is written.
pub async fn plan(options: &Options, env: &dyn Fn(&str) -> Option<String>) -> Result<Outcome> {
    let course = course::load(&options.course, env)?;
    let outputs = helm::template_all(
        &options.helm,
        &course.releases,
        options.profile.as_ref(),
        options.jobs,
    )
    .await?;
    let (prefix, mut warnings) = repo_prefix(&course.dir, &options.output);
    if options.profile.is_none() {
        warnings.push(
            "no --profile: charts see helm's default capabilities, which may not match the cluster"
                .into(),
        );
    }
    let assembly = assemble(
        &course,
        &outputs,
        options.tool,
        options.profile.as_ref(),
        &prefix,
    )?;
    let changes = prune::changes(&options.output, &assembly.files)?;
    warnings.extend(course.warnings.iter().cloned());
    warnings.extend(assembly.warnings);
    warnings.extend(changes.warnings.iter().cloned());
    Ok(Outcome {
        files: assembly.files.len(),
        changes,
        warnings,
        hook_notes: assembly.hook_notes,
    })
}

/// Writes the planned changes.
pub fn write(options: &Options, outcome: &Outcome) -> Result<()> {
    prune::apply(&options.output, &outcome.changes)
}

/// Identity of an object across the whole render: two releases must not both own it.
fn identity(object: &Value) -> (String, String, String, String) {
    (
        group_of(object).to_string(),
        kind_of(object).to_string(),
        object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        name_of(object).unwrap_or_default().to_string(),
    )
}

/// Turns Helm's outputs (one per release, in course order) into the files of the tree. Pure:
/// reads nothing but the local charts' `Chart.yaml` for the provenance annotation.
pub fn assemble(
    course: &Course,
    outputs: &[String],
    tool: Tool,
    profile: Option<&Profile>,
    prefix: &str,
) -> Result<Assembly> {
    let mut assembly = Assembly::default();
    let file = course.file.display().to_string();
    let mut parsed = Vec::with_capacity(outputs.len());
    for (release, output) in course.releases.iter().zip(outputs) {
        parsed.push(split::objects(&release.name, output)?);
    }
    let mut scopes = Scopes::builtin();
    if let Some(profile) = profile {
        profile.add_scopes(&mut scopes);
    }
    scopes.add_crds(parsed.iter().flatten().map(|o| &o.object));
    let chart_namespaces: BTreeSet<String> = parsed
        .iter()
        .flatten()
        .filter(|o| kind_of(&o.object) == "Namespace" && group_of(&o.object).is_empty())
        .filter_map(|o| name_of(&o.object).map(str::to_string))
        .collect();
    let target = match tool {
        Tool::Argocd => HookTarget::Argocd,
        Tool::Flux => HookTarget::Flux,
        Tool::Strata => HookTarget::Plain,
    };
    let mut owners: BTreeMap<(String, String, String, String), String> = BTreeMap::new();
    let mut paths: BTreeSet<PathBuf> = BTreeSet::new();
    let mut created_namespaces: BTreeSet<String> = BTreeSet::new();
    // Releases whose output holds argocd-vault-plugin placeholders.
    let mut placeholders: BTreeSet<String> = BTreeSet::new();
    for (release, objects) in course.releases.iter().zip(parsed) {
        let (chart, version) = helm::chart_identity(release);
        if version == "unpinned" && !matches!(release.chart, ChartSource::Local(_)) {
            assembly.warnings.push(format!(
                "{file}: releases[{}].version: not pinned; the chart's latest version was rendered",
                release.name
            ));
        }
        let at = format!("releases[{}]", release.name);
        assembly.warnings.extend(secrets::value_warnings(
            &file,
            &format!("{at}.values"),
            release.values.as_ref(),
        ));
        let set: serde_json::Map<String, Value> = release
            .set
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        assembly.warnings.extend(secrets::value_warnings(
            &file,
            &format!("{at}.set"),
            Some(&Value::Object(set)),
        ));
        let release_dir = gitops::release_dir(tool, release);
        let rendered_from = layout::rendered_from(&release.name, &chart, &version);
        let mut add = |object: Value, provenance: String, assembly: &mut Assembly| -> Result<()> {
            let path = layout::object_path(&release_dir, &object, &scopes);
            let shown = path.display().to_string();
            if let Some(other) = owners.insert(identity(&object), release.name.clone()) {
                return Err(RenderError::Layout {
                    path: shown,
                    message: format!(
                        "{} {} is rendered by both release {other} and release {}",
                        kind_of(&object),
                        name_of(&object).unwrap_or_default(),
                        release.name
                    ),
                });
            }
            if !paths.insert(path.clone()) {
                return Err(RenderError::Layout {
                    path: shown,
                    message: "two objects would share this file".into(),
                });
            }
            secrets::check_rendered(&shown, &object)?;
            let content = layout::file_content(&provenance, &object)?;
            if secrets::is_placeholder(&content) {
                placeholders.insert(release.name.clone());
            }
            assembly.files.push(OutputFile { path, content });
            Ok(())
        };
        let namespace = &release.namespace;
        if tool != Tool::Argocd
            && !SYSTEM_NAMESPACES.contains(&namespace.as_str())
            && !chart_namespaces.contains(namespace)
            && created_namespaces.insert(namespace.clone())
        {
            let object = gitops::namespace_object(namespace, &release.namespace_metadata);
            add(
                object,
                format!(
                    "namespace of release {} (course namespace management)",
                    release.name
                ),
                &mut assembly,
            )?;
        }
        for rendered in objects {
            let mut object = rendered.object;
            let conversion = hooks::convert(&mut object, target);
            assembly.hook_notes.extend(
                conversion
                    .notes
                    .into_iter()
                    .map(|n| format!("release {}: {n}", release.name)),
            );
            if !conversion.keep {
                continue;
            }
            split::set_namespace(&mut object, namespace, &scopes);
            layout::annotate(&mut object, &rendered_from);
            let provenance = format!("{}: {chart}@{version}: {}", release.name, rendered.source);
            add(object, provenance, &mut assembly)?;
        }
    }
    gitops_files(course, tool, prefix, &placeholders, &mut assembly)?;
    assembly.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(assembly)
}

fn gitops_files(
    course: &Course,
    tool: Tool,
    prefix: &str,
    placeholders: &BTreeSet<String>,
    assembly: &mut Assembly,
) -> Result<()> {
    let mut objects: Vec<(String, Value)> = Vec::new();
    match tool {
        Tool::Argocd => {
            for release in &course.releases {
                match gitops::application(release, prefix) {
                    Ok(app) => {
                        // A directory source would apply the placeholders verbatim.
                        if placeholders.contains(&release.name)
                            && app["spec"]["source"]["plugin"].is_null()
                        {
                            assembly.warnings.push(format!(
                                "release {}: its manifests hold argocd-vault-plugin placeholders but its Application has no plugin source; set gitops.argocd.spec.source.plugin",
                                release.name
                            ));
                        }
                        objects.push((k8s_name(&release.name), app));
                    }
                    Err(note) => assembly.warnings.push(note),
                }
            }
        }
        Tool::Flux => {
            let mut previous: Option<&ReleasePlan> = None;
            for release in &course.releases {
                objects.push((
                    k8s_name(&release.name),
                    gitops::kustomization(release, previous, prefix),
                ));
                previous = Some(release);
            }
        }
        Tool::Strata => {
            let mut versions = BTreeMap::new();
            for release in &course.releases {
                let dir = gitops::layer_dir(&release.layer);
                if versions.contains_key(&release.layer) {
                    continue;
                }
                let mut parts: Vec<(String, &str)> = assembly
                    .files
                    .iter()
                    .filter(|f| f.path.starts_with(&dir))
                    .map(|f| (f.path.display().to_string(), f.content.as_str()))
                    .collect();
                parts.sort();
                let parts: Vec<(&str, &str)> =
                    parts.iter().map(|(p, c)| (p.as_str(), *c)).collect();
                versions.insert(release.layer.clone(), gitops::digest(&parts));
            }
            for layer in gitops::addons_layers(&course.releases, &versions, prefix) {
                let name = layer["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                objects.push((name, layer));
            }
        }
    }
    for (name, object) in objects {
        let provenance = format!(
            "{} {} for course {}",
            kind_of(&object),
            name,
            course
                .file
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        );
        let content = layout::file_content(&provenance, &object)?;
        assembly.files.push(OutputFile {
            path: gitops::app_path(tool, &name),
            content,
        });
    }
    Ok(())
}

/// Removes `.` and resolves `..` without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        normalize(path)
    } else {
        let cwd = std::env::current_dir().unwrap_or_default();
        normalize(&cwd.join(path))
    }
}

/// The output directory's path inside its Git work tree (what Argo CD and Flux read), found by
/// looking for `.git` upwards; outside Git, the path relative to the course file's directory.
pub fn repo_prefix(course_dir: &Path, output: &Path) -> (String, Vec<String>) {
    let output = absolute(output);
    let as_slashes = |p: &Path| {
        p.components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/")
    };
    for root in output.ancestors() {
        if root.join(".git").exists() {
            return (
                as_slashes(output.strip_prefix(root).unwrap_or(&output)),
                Vec::new(),
            );
        }
    }
    let base = absolute(course_dir);
    match output.strip_prefix(&base) {
        Ok(relative) => (
            as_slashes(relative),
            vec![format!(
                "{}: not inside a Git work tree: paths in GitOps objects are relative to the course file's directory",
                output.display()
            )],
        ),
        Err(_) => (
            String::new(),
            vec![format!(
                "{}: not inside a Git work tree: paths in GitOps objects are relative to the output directory",
                output.display()
            )],
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const COURSE: &str = "\
namespace: apps
gitops:
  argocd:
    spec:
      source: {repoURL: 'https://git.invalid/x'}
releases:
  - name: one
    chart: ./charts/one
    version: 1.0.0
  - name: two
    chart: ./charts/two
    version: 2.0.0
";

    const ONE: &str = "\
---
# Source: one/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: shared}
---
# Source: one/templates/hook.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations: {helm.sh/hook: pre-rollback}
";

    fn course() -> Course {
        course::parse(Path::new("/r/course.yaml"), COURSE, &no_env).unwrap()
    }

    #[test]
    fn argocd_tree() {
        let assembly = assemble(
            &course(),
            &[ONE.into(), String::new()],
            Tool::Argocd,
            None,
            "m",
        )
        .unwrap();
        let paths: Vec<String> = assembly
            .files
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        assert_eq!(
            paths,
            [
                "apps/argocd/one.yaml",
                "apps/argocd/two.yaml",
                "releases/one/apps/configmap_shared.yaml"
            ]
        );
        assert_eq!(assembly.hook_notes.len(), 2, "{:?}", assembly.hook_notes);
        assert!(assembly.hook_notes[1].starts_with("release one: Job/migrate: dropped"));
    }

    #[test]
    fn flux_and_strata_create_the_namespace_once() {
        for (tool, want) in [
            (Tool::Flux, "releases/one/_cluster/namespace_apps.yaml"),
            (Tool::Strata, "layers/one/one/_cluster/namespace_apps.yaml"),
        ] {
            let assembly =
                assemble(&course(), &[ONE.into(), String::new()], tool, None, "").unwrap();
            let namespaces: Vec<&OutputFile> = assembly
                .files
                .iter()
                .filter(|f| f.path.display().to_string().contains("namespace_"))
                .collect();
            assert_eq!(namespaces.len(), 1, "{tool:?}");
            assert_eq!(namespaces[0].path, Path::new(want));
        }
    }

    #[test]
    fn the_same_object_from_two_releases_is_refused() {
        let error = assemble(&course(), &[ONE.into(), ONE.into()], Tool::Argocd, None, "")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("ConfigMap shared is rendered by both release one and release two"),
            "{error}"
        );
    }

    #[test]
    fn literal_secrets_stop_the_render() {
        let secret = "---\n# Source: one/templates/s.yaml\napiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: hunter2}\n";
        let error = assemble(
            &course(),
            &[secret.into(), String::new()],
            Tool::Argocd,
            None,
            "",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            error.split(": literal").next().unwrap(),
            "releases/one/apps/secret_db.yaml: stringData.password"
        );
        assert!(!error.contains("hunter2"));
    }

    #[test]
    fn repo_prefix_finds_the_git_work_tree() {
        let root =
            std::env::temp_dir().join(format!("strata-render-prefix-{}", std::process::id()));
        std::fs::create_dir_all(root.join("repo/.git")).unwrap();
        std::fs::create_dir_all(root.join("plain")).unwrap();
        let (prefix, warnings) =
            repo_prefix(&root.join("repo/deploy"), &root.join("repo/deploy/out"));
        assert_eq!(prefix, "deploy/out");
        assert!(warnings.is_empty());
        let (prefix, warnings) =
            repo_prefix(&root.join("plain"), &root.join("plain/./x/../manifests"));
        assert_eq!(prefix, "manifests");
        assert_eq!(warnings.len(), 1);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn normalize_table() {
        let cases = [("a/./b/../c", "a/c"), ("/x/y/..", "/x"), ("../a", "../a")];
        for (given, want) in cases {
            assert_eq!(normalize(Path::new(given)), Path::new(want));
        }
    }
}
