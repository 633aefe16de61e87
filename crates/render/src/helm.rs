//! Runs the real `helm template`, the only faithful Helm renderer (no Rust engine covers
//! Helm's template functions: Sprig, `lookup`, `tpl`, subcharts). Releases render in parallel, a
//! bounded number at a time; the output keeps course order.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use futures::{StreamExt, TryStreamExt};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::course::{ChartSource, ReleasePlan};
use crate::error::{RenderError, Result};
use crate::profile::Profile;

/// The helm binary: `$HELM` if set, else `helm` on `PATH`.
pub fn binary(env_helm: Option<String>) -> PathBuf {
    env_helm
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("helm"))
}

/// Go's garbage-collector target for each `helm template` child, unless the user chose one.
///
/// `helm template` is a short-lived process whose heap stays small (about 45 MiB peak for a
/// typical chart, the same with this setting), so with Go's default target it collects many
/// times for nothing: measured on the render benchmark, 400 makes each call about a fifth
/// faster at no visible memory cost. A `GOGC` (or a `GOMEMLIMIT`, which bounds memory the user's
/// way) already in the environment is left alone, so `GOGC=100 strata render` restores Go's
/// default.
pub fn gc_target(
    gogc: Option<&std::ffi::OsStr>,
    gomemlimit: Option<&std::ffi::OsStr>,
) -> Option<&'static str> {
    (gogc.is_none() && gomemlimit.is_none()).then_some("400")
}

/// Escapes a `--set` value for Helm's parser, where `,` separates pairs and `\` escapes.
fn escape_set(value: &str) -> String {
    value.replace('\\', "\\\\").replace(',', "\\,")
}

/// The arguments of `helm template` for one release. Inline values are read from stdin
/// (`--values -`) so nothing is written to a temporary file; they come before the values files,
/// as in Reckoner, so the files win.
pub fn template_args(release: &ReleasePlan, profile: Option<&Profile>) -> Vec<String> {
    let mut args = vec!["template".to_string(), release.name.clone()];
    match &release.chart {
        ChartSource::Local(path) => args.push(path.display().to_string()),
        ChartSource::Oci(reference) => args.push(reference.clone()),
        ChartSource::Repository { url, chart } => {
            args.push(chart.clone());
            args.push("--repo".into());
            args.push(url.clone());
        }
    }
    args.extend([
        "--namespace".into(),
        release.namespace.clone(),
        "--skip-tests".into(),
        "--include-crds".into(),
    ]);
    if let Some(version) = &release.version {
        args.push("--version".into());
        args.push(version.clone());
    }
    if let Some(profile) = profile {
        if let Some(kube_version) = &profile.kube_version {
            args.push("--kube-version".into());
            args.push(kube_version.clone());
        }
        if !profile.api_versions.is_empty() {
            args.push("--api-versions".into());
            args.push(profile.api_versions.join(","));
        }
    }
    args.extend(release.helm_args.iter().cloned());
    if release.values.is_some() {
        args.push("--values".into());
        args.push("-".into());
    }
    for file in &release.files {
        args.push("--values".into());
        args.push(file.display().to_string());
    }
    for (key, value) in &release.set {
        args.push("--set".into());
        args.push(format!("{key}={}", escape_set(value)));
    }
    args
}

/// Runs `helm template` for one release and returns its standard output.
pub async fn template(
    helm: &Path,
    release: &ReleasePlan,
    profile: Option<&Profile>,
) -> Result<String> {
    let fail = |message: String| RenderError::Helm {
        release: release.name.clone(),
        message,
    };
    for file in &release.files {
        if !file.is_file() {
            return Err(fail(format!(
                "values file {} does not exist",
                file.display()
            )));
        }
    }
    let stdin_values = match &release.values {
        Some(values) => Some(serde_json::to_vec(values).map_err(|e| fail(format!("values: {e}")))?),
        None => None,
    };
    let mut command = Command::new(helm);
    if let Some(target) = gc_target(
        std::env::var_os("GOGC").as_deref(),
        std::env::var_os("GOMEMLIMIT").as_deref(),
    ) {
        command.env("GOGC", target);
    }
    let mut child = command
        .args(template_args(release, profile))
        .stdin(if stdin_values.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A failed sibling drops this future: do not leave helm running.
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| fail(format!("cannot run {}: {e}", helm.display())))?;
    let stdin = child.stdin.take();
    let feed = async move {
        if let (Some(mut stdin), Some(bytes)) = (stdin, stdin_values) {
            // Helm may exit early on a bad chart; its error is what matters, not EPIPE.
            let _ = stdin.write_all(&bytes).await;
            let _ = stdin.shutdown().await;
        }
    };
    let (_, output) = tokio::join!(feed, child.wait_with_output());
    let output = output.map_err(|e| fail(format!("helm: {e}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let message: Vec<&str> = stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        return Err(fail(format!(
            "helm template failed ({}): {}",
            output.status,
            message.join("; ")
        )));
    }
    String::from_utf8(output.stdout).map_err(|_| fail("helm printed invalid UTF-8".into()))
}

/// Renders every release, at most `jobs` at a time, in course order. The first failure stops
/// the rest.
pub async fn template_all(
    helm: &Path,
    releases: &[ReleasePlan],
    profile: Option<&Profile>,
    jobs: usize,
) -> Result<Vec<String>> {
    futures::stream::iter(releases)
        .map(|release| template(helm, release, profile))
        .buffered(jobs.max(1))
        .try_collect()
        .await
}

/// Chart name and version for `strata.dev/rendered-from`: the course's pin, else a local
/// chart's `Chart.yaml`, else `unpinned` (a repository chart without a version renders its
/// latest one — worth a warning, which the caller gives).
pub fn chart_identity(release: &ReleasePlan) -> (String, String) {
    let local = match &release.chart {
        ChartSource::Local(path) => read_chart_yaml(path),
        _ => None,
    };
    let name = local
        .as_ref()
        .and_then(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| {
            release
                .chart_name
                .rsplit('/')
                .next()
                .unwrap_or(&release.chart_name)
                .to_string()
        });
    let version = release
        .version
        .clone()
        .or_else(|| {
            local
                .as_ref()
                .and_then(|c| c.get("version").and_then(Value::as_str).map(str::to_string))
        })
        .unwrap_or_else(|| "unpinned".to_string());
    (name, version)
}

fn read_chart_yaml(dir: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(dir.join("Chart.yaml")).ok()?;
    serde_saphyr::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::course::{GitOpsTemplates, NamespaceMetadata};
    use serde_json::json;

    fn release(chart: ChartSource) -> ReleasePlan {
        ReleasePlan {
            name: "web".into(),
            index: 0,
            namespace: "apps".into(),
            chart_name: "podinfo".into(),
            chart,
            version: Some("1.2.3".into()),
            values: Some(json!({"a": 1})),
            files: vec!["/c/values.yaml".into()],
            set: vec![("image.tag".into(), "a,b\\c".into())],
            helm_args: vec!["--debug".into()],
            namespace_metadata: NamespaceMetadata::default(),
            namespace_overwrite: false,
            gitops: GitOpsTemplates::default(),
            layer: "web".into(),
        }
    }

    #[test]
    fn args() {
        let profile = Profile {
            kube_version: Some("v1.34.4".into()),
            api_versions: vec!["a/v1".into(), "b/v1/Kind".into()],
            cluster_scoped: vec![],
        };
        let repo = release(ChartSource::Repository {
            url: "http://127.0.0.1:1/charts".into(),
            chart: "podinfo".into(),
        });
        let want = [
            "template",
            "web",
            "podinfo",
            "--repo",
            "http://127.0.0.1:1/charts",
            "--namespace",
            "apps",
            "--skip-tests",
            "--include-crds",
            "--version",
            "1.2.3",
            "--kube-version",
            "v1.34.4",
            "--api-versions",
            "a/v1,b/v1/Kind",
            "--debug",
            "--values",
            "-",
            "--values",
            "/c/values.yaml",
            "--set",
            "image.tag=a\\,b\\\\c",
        ];
        assert_eq!(template_args(&repo, Some(&profile)), want);
        let mut local = release(ChartSource::Local("/charts/app".into()));
        local.values = None;
        local.files.clear();
        local.set.clear();
        local.version = None;
        assert_eq!(
            template_args(&local, None),
            [
                "template",
                "web",
                "/charts/app",
                "--namespace",
                "apps",
                "--skip-tests",
                "--include-crds",
                "--debug"
            ]
        );
    }

    #[test]
    fn gc_target_only_when_the_user_set_none() {
        use std::ffi::OsStr;
        assert_eq!(gc_target(None, None), Some("400"));
        assert_eq!(gc_target(Some(OsStr::new("100")), None), None);
        assert_eq!(gc_target(Some(OsStr::new("")), None), None);
        assert_eq!(gc_target(None, Some(OsStr::new("1GiB"))), None);
    }

    #[test]
    fn binary_from_env() {
        assert_eq!(binary(Some("/x/helm".into())), Path::new("/x/helm"));
        assert_eq!(binary(Some(String::new())), Path::new("helm"));
        assert_eq!(binary(None), Path::new("helm"));
    }
}
