//! `strata render`: Helm charts from a Reckoner course file into reviewed, flat
//! GitOps manifests, and `strata render capture-profile` (a cluster's capabilities via
//! discovery). The work is in the `render` crate; this file maps flags and exit codes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kube::discovery::{Discovery, Scope};
// `::render` is the library crate; this module shares its name.
use ::render::gitops::Tool;
use ::render::pipeline::{self, Options};
use ::render::profile::Profile;
use ::render::split::Scopes;

use crate::cli::{ClusterArgs, GitOps, RenderArgs, RenderCommand, input_error};

/// Exit code of `--diff` when the output would change (as `diff` and `git diff --exit-code`).
const EXIT_WOULD_CHANGE: u8 = 1;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

pub fn run(args: &RenderArgs) -> anyhow::Result<ExitCode> {
    if let Some(RenderCommand::CaptureProfile { output, cluster }) = &args.command {
        return capture_profile(output, cluster);
    }
    let Some(course) = &args.course else {
        return Ok(input_error("strata render: give a course file"));
    };
    let profile = match &args.profile {
        Some(path) => match Profile::load(path) {
            Ok(profile) => Some(profile),
            Err(e) => return Ok(input_error(&e.to_string())),
        },
        None => None,
    };
    let options = Options {
        course: course.clone(),
        output: output_dir(course, args.output.as_deref()),
        tool: match args.gitops {
            GitOps::Argocd => Tool::Argocd,
            GitOps::Flux => Tool::Flux,
            GitOps::Strata => Tool::Strata,
        },
        profile,
        helm: ::render::helm::binary(std::env::var("HELM").ok()),
        jobs: args.jobs.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        }),
    };
    let env = |name: &str| std::env::var(name).ok();
    let outcome = match runtime()?.block_on(pipeline::plan(&options, &env)) {
        Ok(outcome) => outcome,
        Err(e) if e.is_input() => return Ok(input_error(&e.to_string())),
        Err(e) => return Err(e.into()),
    };
    for note in &outcome.hook_notes {
        eprintln!("hook: {note}");
    }
    for warning in &outcome.warnings {
        eprintln!("warning: {warning}");
    }
    let changes = &outcome.changes;
    if args.diff {
        print!("{}", ::render::prune::diff_text(changes));
        eprintln!(
            "{} to add, {} to change, {} to remove, {} unchanged",
            changes.added.len(),
            changes.changed.len(),
            changes.removed.len(),
            changes.unchanged.len()
        );
        return Ok(if changes.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_WOULD_CHANGE)
        });
    }
    pipeline::write(&options, &outcome)?;
    eprintln!(
        "{}: {} added, {} changed, {} removed, {} unchanged",
        options.output.display(),
        changes.added.len(),
        changes.changed.len(),
        changes.removed.len(),
        changes.unchanged.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// `-o` as given (relative to the working directory), or `manifests` beside the course file as
/// Reckoner's design has it.
fn output_dir(course: &Path, output: Option<&Path>) -> PathBuf {
    match output {
        Some(output) => output.to_path_buf(),
        None => course
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .join("manifests"),
    }
}

fn capture_profile(output: &Path, cluster: &ClusterArgs) -> anyhow::Result<ExitCode> {
    let profile = runtime()?.block_on(async {
        let client = cluster.client().await?;
        let version = client.apiserver_version().await?;
        let discovery = Discovery::new(client).run().await?;
        Ok::<_, anyhow::Error>(profile_from(&version.git_version, &discovery))
    })?;
    std::fs::write(output, profile.to_yaml()?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", output.display()))?;
    eprintln!(
        "{}: kube {} with {} API versions, {} extra cluster-scoped kinds",
        output.display(),
        profile.kube_version.as_deref().unwrap_or("?"),
        profile.api_versions.len(),
        profile.cluster_scoped.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Helm's capabilities as `helm install` computes them from discovery: every served
/// `group/version` and `group/version/Kind`, plus the cluster-scoped kinds the built-in table
/// does not know.
fn profile_from(git_version: &str, discovery: &Discovery) -> Profile {
    let builtin = Scopes::builtin();
    let mut profile = Profile {
        kube_version: Some(git_version.to_string()),
        ..Profile::default()
    };
    for group in discovery.groups() {
        for version in group.versions() {
            let group_version = if group.name().is_empty() {
                version.to_string()
            } else {
                format!("{}/{version}", group.name())
            };
            profile.api_versions.push(group_version.clone());
            for (resource, capabilities) in group.versioned_resources(version) {
                profile
                    .api_versions
                    .push(format!("{group_version}/{}", resource.kind));
                if capabilities.scope == Scope::Cluster
                    && !builtin.is_cluster_scoped(&resource.group, &resource.kind)
                {
                    profile.cluster_scoped.push(if resource.group.is_empty() {
                        resource.kind.clone()
                    } else {
                        format!("{}.{}", resource.kind, resource.group)
                    });
                }
            }
        }
    }
    profile.normalized()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_defaults_beside_the_course() {
        let cases = [
            ("course.yaml", None, "./manifests"),
            ("deploy/course.yaml", None, "deploy/manifests"),
            ("deploy/course.yaml", Some("out"), "out"),
        ];
        for (course, output, want) in cases {
            assert_eq!(
                output_dir(Path::new(course), output.map(Path::new)),
                Path::new(want)
            );
        }
    }
}
