//! `strata render` against the real upstream schemas on the local control plane: Argo CD's
//! published Application CRD and Flux's Kustomization CRD (generated from its API types; both
//! made by `e2e/plane/build.sh`) are installed, a course of two local charts is rendered for
//! every GitOps tool, and every rendered object — GitOps objects and chart manifests alike —
//! passes a server-side dry run with strict field validation. The `strata` output is then
//! served as a Flux artifact and deployed by a real layer-controller until every layer is
//! Deployed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use kube::api::Api;
use layer_controller::crd::AddonsLayer;
use strata_e2e::flux::{ArtifactServer, create_gitrepository, install_layer_crds, set_artifact};
use strata_e2e::services::{bin_dir, delete_layers_then_stop, start_layer_service};
use strata_e2e::support::{TestNamespace, cluster, crds_established, eventually, upstream_crds};

fn samples() -> PathBuf {
    Path::new(
        std::env::var("CARGO_MANIFEST_DIR")
            .as_deref()
            .unwrap_or(env!("CARGO_MANIFEST_DIR")),
    )
    .join("samples/render")
}

fn kubectl(args: &[&str]) -> Result<String> {
    let out = cluster().kubectl().args(args).output()?;
    ensure!(
        out.status.success(),
        "kubectl {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn helm() -> PathBuf {
    strata_e2e::chart::helm()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        if next.is_dir() {
            for entry in std::fs::read_dir(&next).unwrap() {
                stack.push(entry.unwrap().path());
            }
        } else {
            out.push(next);
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn rendered_objects_pass_upstream_schemas_and_the_strata_output_deploys() -> Result<()> {
    let client = cluster().client().await?;
    let test_ns = TestNamespace::create(&client, "render").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let crds = upstream_crds()?;
    for file in ["application-crd.yaml", "kustomization-crd.yaml"] {
        kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=strata-e2e",
            "-f",
            &crds.join(file).to_string_lossy(),
        ])?;
    }
    crds_established(
        &client,
        &[
            "applications.argoproj.io",
            "kustomizations.kustomize.toolkit.fluxcd.io",
        ],
    )
    .await?;
    // The namespaces the GitOps objects live in (Argo CD's own; Flux's is the test's).
    kubectl(&[
        "create",
        "namespace",
        "argocd",
        "--dry-run=client",
        "-o",
        "yaml",
    ])
    .and_then(|yaml| {
        let file = std::env::temp_dir().join(format!("argocd-ns-{ns}.yaml"));
        std::fs::write(&file, yaml)?;
        kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=strata-e2e",
            "-f",
            &file.to_string_lossy(),
        ])
    })?;

    let work = std::env::temp_dir().join(format!("render-{ns}"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let copy = std::process::Command::new("cp")
        .args([
            "-r",
            &samples().join("charts").to_string_lossy(),
            &work.to_string_lossy(),
        ])
        .status()?;
    ensure!(copy.success(), "copying the sample charts");
    let base = format!("{ns}-base");
    let apps = format!("{ns}-apps");
    let course = format!(
        "schema: v2
namespace: {ns}
repositories:
  local: {{url: http://127.0.0.1:9/unused}}
gitops:
  argocd:
    metadata: {{namespace: argocd}}
    spec:
      source: {{repoURL: https://git.invalid/fleet.git, targetRevision: main}}
  flux:
    metadata: {{namespace: {ns}}}
  strata:
    metadata: {{labels: {{strata-e2e/suite: {ns}}}}}
    spec:
      source: {{name: repo, namespace: {ns}}}
releases:
  - name: infra
    chart: ./charts/addons
    layer: {base}
  - name: app
    chart: ./charts/app
    layer: {apps}
    values: {{greeting: hi}}
"
    );
    std::fs::write(work.join("course.yaml"), course)?;
    let render = |gitops: &str| -> Result<PathBuf> {
        let out_dir = work.join(format!("out-{gitops}"));
        let out = std::process::Command::new(bin_dir().join("strata"))
            .args(["render", "--gitops", gitops, "-o"])
            .arg(&out_dir)
            .arg(work.join("course.yaml"))
            .env("HELM", helm())
            .output()?;
        ensure!(
            out.status.success(),
            "strata render --gitops {gitops}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(out_dir)
    };

    for gitops in ["argocd", "flux", "strata"] {
        let out_dir = render(gitops)?;
        let files = files_under(&out_dir);
        let gitops_objects = files
            .iter()
            .filter(|f| f.to_string_lossy().contains(&format!("/apps/{gitops}/")))
            .count();
        ensure!(
            gitops_objects == 2,
            "{gitops}: one GitOps object per release/layer, got {gitops_objects}"
        );
        // CRDs for real first (their custom resources are judged against them), then every
        // object through a strict server-side dry run.
        for file in files
            .iter()
            .filter(|f| f.to_string_lossy().contains("customresourcedefinition"))
        {
            kubectl(&[
                "apply",
                "--server-side",
                "--field-manager=strata-e2e",
                "-f",
                &file.to_string_lossy(),
            ])?;
        }
        crds_established(&client, &["crontabs.render.e2e.strata.dev"]).await?;
        for file in &files {
            kubectl(&[
                "apply",
                "--server-side",
                "--dry-run=server",
                "--validate=strict",
                "--field-manager=strata-e2e",
                "-f",
                &file.to_string_lossy(),
            ])
            .with_context(|| format!("{gitops}: {}", file.display()))?;
        }
        // Strict validation must be able to refuse: an unknown field in a GitOps object.
        let gitops_file = files
            .iter()
            .find(|f| f.to_string_lossy().contains(&format!("/apps/{gitops}/")))
            .unwrap();
        let broken = std::fs::read_to_string(gitops_file)?
            .replace("\nspec:\n", "\nspec:\n  notAField: true\n");
        let broken_file = work.join(format!("broken-{gitops}.yaml"));
        std::fs::write(&broken_file, broken)?;
        ensure!(
            kubectl(&[
                "apply",
                "--server-side",
                "--dry-run=server",
                "--validate=strict",
                "-f",
                &broken_file.to_string_lossy()
            ])
            .is_err(),
            "{gitops}: strict validation accepted an unknown field"
        );
    }

    // Capabilities from the live cluster: the kube version and every served API version,
    // including the CRDs installed above.
    let profile = work.join("profile.yaml");
    let out = std::process::Command::new(bin_dir().join("strata"))
        .args(["render", "capture-profile", "-o"])
        .arg(&profile)
        .arg("--kubeconfig")
        .arg(cluster().kubeconfig())
        .output()?;
    ensure!(
        out.status.success(),
        "capture-profile: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let captured = std::fs::read_to_string(&profile)?;
    for want in [
        "v1.34.4",
        "apps/v1",
        "argoproj.io/v1alpha1",
        "kustomize.toolkit.fluxcd.io/v1",
        "render.e2e.strata.dev/v1",
    ] {
        ensure!(
            captured.contains(want),
            "{want} missing from the captured profile:\n{captured}"
        );
    }
    let out = std::process::Command::new(bin_dir().join("strata"))
        .args(["render", "--gitops", "strata", "--profile"])
        .arg(&profile)
        .arg("-o")
        .arg(work.join("out-profiled"))
        .arg(work.join("course.yaml"))
        .env("HELM", helm())
        .output()?;
    ensure!(
        out.status.success(),
        "render with the captured profile: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The strata output, served as a Flux artifact, deployed by the layer-controller.
    let out_dir = work.join("out-strata");
    let files: Vec<(String, String)> = files_under(&out_dir)
        .into_iter()
        .map(|f| {
            let relative = f
                .strip_prefix(&work)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (relative, std::fs::read_to_string(&f).unwrap())
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let server = ArtifactServer::start().await?;
    let (url, digest) = server.publish("render.tar.gz", &refs);
    create_gitrepository(&client, &ns).await?;
    set_artifact(&client, &ns, "main@sha1:render", &url, &digest).await?;
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "500ms"])?;
    kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=strata-e2e",
        "-f",
        &out_dir.join("apps/strata").to_string_lossy(),
    ])?;
    let layers: Api<AddonsLayer> = Api::all(client.clone());
    for name in [&base, &apps] {
        eventually(
            &format!("{name} Deployed"),
            Duration::from_secs(120),
            || async {
                let layer = layers.get(name).await?;
                let status = layer.status.unwrap_or_default();
                Ok((status.state.as_deref() == Some("Deployed")).then_some(status))
            },
        )
        .await?;
    }
    let deployed = kubectl(&[
        "-n",
        &ns,
        "get",
        "crontab",
        "infra-nightly",
        "-o",
        "jsonpath={.metadata.labels.strata\\.dev/layer}",
    ])?;
    ensure!(
        deployed == base,
        "the custom resource came from layer {base}: {deployed:?}"
    );
    kubectl(&["-n", &ns, "get", "deployment/app", "configmap/app-listed-b"])?;

    delete_layers_then_stop(&[&apps, &base], controller);
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
