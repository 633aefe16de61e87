//! `strata layers plan --from-empty` against a cluster: the layers (those of this test, by
//! label) and their sources read as the layer-controller reads them, nothing applied. A
//! layer using a CRD and a namespace that other layers create without depending on them is
//! reported, naming both layers and the object; with the dependencies added, nothing is.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::process::Command;

use anyhow::{Result, ensure};
use strata_e2e::flux::{install_layer_crds, source_configmap};
use strata_e2e::services::bin_dir;
use strata_e2e::support::{TestNamespace, apply_yaml, cluster};

fn layer(ns: &str, name: &str, depends_on: &str) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1
kind: AddonsLayer
metadata: {{name: {ns}-{name}, labels: {{strata-e2e/suite: {ns}}}}}
spec:
  version: 1.0.0
  source: {{kind: ConfigMap, name: src-{name}, namespace: {ns}, path: ./}}
  prereqs: {{dependsOn: [{depends_on}]}}
"
    )
}

fn plan(ns: &str) -> Result<(i32, String)> {
    let out = Command::new(bin_dir().join("strata"))
        .args(["layers", "plan", "--kubeconfig"])
        .arg(cluster().kubeconfig())
        .args(["--from-empty", "-l"])
        .arg(format!("strata-e2e/suite={ns}"))
        .args(["--default-source-namespace", ns])
        .output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

#[tokio::test]
async fn a_cluster_s_layers_are_checked_for_an_empty_rebuild() -> Result<()> {
    let client = cluster().client().await?;
    let test_ns = TestNamespace::create(&client, "from-empty").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let target = format!("{ns}-apps");
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: widgets.{ns}.example.com}}\nspec:\n  group: {ns}.example.com\n  names: {{kind: Widget, plural: widgets}}\n  scope: Namespaced\n  versions: []\n"
    );
    let files = [
        ("crds", vec![("crd.yaml", crd)]),
        (
            "namespaces",
            vec![(
                "ns.yaml",
                format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {target}}}\n"),
            )],
        ),
        (
            "web",
            vec![(
                "widget.yaml",
                format!(
                    "apiVersion: {ns}.example.com/v1\nkind: Widget\nmetadata: {{name: w, namespace: {target}}}\n"
                ),
            )],
        ),
    ];
    for (name, files) in &files {
        let files: Vec<(&str, String)> = files.iter().map(|(f, t)| (*f, t.clone())).collect();
        apply_yaml(&client, &ns, &source_configmap(&ns, name, &files)).await?;
    }
    for (name, deps) in [("crds", ""), ("namespaces", ""), ("web", "")] {
        apply_yaml(&client, &ns, &layer(&ns, name, deps)).await?;
    }
    let (code, out) = plan(&ns)?;
    ensure!(code == 1, "exit {code}: {out}");
    for want in [
        format!(
            "layer {ns}-web applies Widget {target}/w, a Widget.{ns}.example.com whose CustomResourceDefinition only layer {ns}-crds installs, and does not depend on it"
        ),
        format!(
            "layer {ns}-web applies Widget {target}/w into namespace {target}, which only layer {ns}-namespaces creates, and does not depend on it"
        ),
    ] {
        ensure!(out.contains(&want), "{want:?} missing:\n{out}");
    }
    ensure!(out.lines().count() == 2, "{out}");

    // The order fixed in the cluster: nothing to report.
    apply_yaml(
        &client,
        &ns,
        &layer(&ns, "web", &format!("{ns}-crds, {ns}-namespaces")),
    )
    .await?;
    let (code, out) = plan(&ns)?;
    ensure!(
        code == 0 && out.trim() == "3 layers: nothing would break on an empty cluster",
        "exit {code}: {out}"
    );
    Ok(())
}
