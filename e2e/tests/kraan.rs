//! Migrating from Kraan, as `docs/layer-controller.md` tells a user to: two layers written the
//! way Kraan's user guide writes them (`kraan.io/v1alpha1`, the `plural.group` source kind, a
//! path without `./`, `dependsOn: name@version`) are converted by `strata layers import` and
//! deployed by the layer-controller from a Flux GitRepository on the real source schema; a
//! Flux Kustomization with variables is imported and deployed the same way.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Result, ensure};
use kube::api::Api;
use layer_controller::crd::AddonsLayer;
use strata_e2e::flux::{ArtifactServer, create_gitrepository, install_layer_crds, set_artifact};
use strata_e2e::services::{bin_dir, delete_layers_then_stop, start_layer_service};
use strata_e2e::support::{TestNamespace, cluster, eventually};

/// Runs `command` with `stdin` fed in: (success, stdout, stderr).
fn pipe(mut command: Command, stdin: &str) -> Result<(bool, String, String)> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes())?;
    let out = child.wait_with_output()?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Converts `documents` with `strata layers import` and applies the result to the test
/// cluster, as the migration guides tell a user to; returns the notes the import printed.
fn import_and_apply(documents: &str) -> Result<String> {
    let mut import = Command::new(bin_dir().join("strata"));
    import.args(["layers", "import", "-f", "-"]);
    let (ok, converted, notes) = pipe(import, documents)?;
    ensure!(ok, "strata layers import failed: {notes}");
    let mut apply = cluster().kubectl();
    apply.args([
        "apply",
        "--server-side",
        "--field-manager=strata-e2e",
        "-f",
        "-",
    ]);
    let (ok, _, err) = pipe(apply, &converted)?;
    ensure!(ok, "applying the imported layers: {err}\n{converted}");
    Ok(notes)
}

#[tokio::test]
async fn a_kraan_layer_set_imports_and_deploys() -> Result<()> {
    let client = cluster().client().await?;
    let test_ns = TestNamespace::create(&client, "kraan").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let config = |name: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{from: kraan}}\n"
        )
    };
    let bootstrap_file = config("bootstrap-settings");
    let base_file = config("base-settings");
    let server = ArtifactServer::start().await?;
    let (url, digest) = server.publish(
        "addons.tar.gz",
        &[
            (
                "testdata/addons/bootstrap/settings.yaml",
                bootstrap_file.as_str(),
            ),
            ("testdata/addons/base/settings.yaml", base_file.as_str()),
        ],
    );
    create_gitrepository(&client, &ns).await?;
    set_artifact(&client, &ns, "master@sha1:0123456789abcdef", &url, &digest).await?;

    let kraan = format!(
        "apiVersion: kraan.io/v1alpha1
kind: AddonsLayer
metadata:
  name: {ns}-bootstrap
  labels: {{strata-e2e/suite: {ns}}}
spec:
  version: 0.1.01
  hold: false
  interval: 1m
  source:
    kind: gitrepositories.source.toolkit.fluxcd.io
    name: repo
    namespace: {ns}
    path: ./testdata/addons/bootstrap
  prereqs:
      k8sVersion: \"v1.16\"
---
apiVersion: kraan.io/v1alpha1
kind: AddonsLayer
metadata:
  name: {ns}-base
  labels: {{strata-e2e/suite: {ns}}}
spec:
  version: 0.1.01
  interval: 1m
  source:
    name: repo
    namespace: {ns}
    path: testdata/addons/base
  prereqs:
      k8sVersion: \"v1.16\"
      dependsOn:
        - {ns}-bootstrap@0.1.01
"
    );
    let notes = import_and_apply(&kraan)?;
    ensure!(
        notes.contains("apiVersion kraan.io/v1alpha1 -> strata.dev/v1alpha1")
            && notes.contains(
                "spec.source.path \"testdata/addons/base\" -> \"./testdata/addons/base\""
            ),
        "every change is reported: {notes}"
    );

    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "500ms"])?;
    let layers: Api<AddonsLayer> = Api::all(client.clone());
    for name in [format!("{ns}-bootstrap"), format!("{ns}-base")] {
        let status = eventually(
            &format!("{name} Deployed"),
            Duration::from_secs(60),
            || async {
                let status = layers.get(&name).await?.status.unwrap_or_default();
                Ok((status.state.as_deref() == Some("Deployed")).then_some(status))
            },
        )
        .await?;
        ensure!(
            status.revision.as_deref() == Some("master@sha1:0123456789abcdef"),
            "{name}: {status:?}"
        );
        ensure!(
            status.inventory.len() == 1,
            "{name}: {:?}",
            status.inventory
        );
    }
    delete_layers_then_stop(
        &[&format!("{ns}-base"), &format!("{ns}-bootstrap")],
        controller,
    );
    Ok(())
}

/// Migrating from Flux: a Kustomization with `postBuild` variables (from `substitute` and a
/// ConfigMap) is converted by `strata layers import` and deployed from the same GitRepository
/// artifact, the variables substituted.
#[tokio::test]
async fn a_flux_kustomization_imports_and_deploys_with_its_variables() -> Result<()> {
    let client = cluster().client().await?;
    let test_ns = TestNamespace::create(&client, "flux-import").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{app}}-settings\n  namespace: {ns}\ndata:\n  env: ${{cluster_env}}\n  region: ${{region:=eu}}\n"
    );
    let server = ArtifactServer::start().await?;
    let (url, digest) = server.publish("apps.tar.gz", &[("apps/podinfo/settings.yaml", &manifest)]);
    create_gitrepository(&client, &ns).await?;
    set_artifact(&client, &ns, "main@sha1:feedface", &url, &digest).await?;
    strata_e2e::support::apply_yaml(
        &client,
        &ns,
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cluster-vars, namespace: {ns}}}\ndata: {{cluster_env: production}}\n"),
    )
    .await?;
    let kustomization = format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {ns}-podinfo
  namespace: {ns}
  labels: {{strata-e2e/suite: {ns}}}
spec:
  interval: 10m
  path: ./apps/podinfo
  prune: true
  wait: true
  sourceRef: {{kind: GitRepository, name: repo}}
  postBuild:
    substitute: {{app: podinfo}}
    substituteFrom:
    - {{kind: ConfigMap, name: cluster-vars}}
"
    );
    let notes = import_and_apply(&kustomization)?;
    ensure!(
        notes.contains("spec.wait/healthChecks dropped"),
        "every change is reported: {notes}"
    );
    let controller = start_layer_service("layer-controller", &ns, &["--health-poll", "500ms"])?;
    let layers: Api<AddonsLayer> = Api::all(client.clone());
    let name = format!("{ns}-podinfo");
    eventually(
        &format!("{name} Deployed"),
        Duration::from_secs(60),
        || async {
            let status = layers.get(&name).await?.status.unwrap_or_default();
            Ok((status.state.as_deref() == Some("Deployed")).then_some(()))
        },
    )
    .await?;
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    let data = maps.get("podinfo-settings").await?.data.unwrap_or_default();
    ensure!(
        data.get("env").map(String::as_str) == Some("production")
            && data.get("region").map(String::as_str) == Some("eu"),
        "{data:?}"
    );
    delete_layers_then_stop(&[&name], controller);
    Ok(())
}

/// `spec.prereqs.objects`: a layer waits for an object of any kind — here a Secret that does
/// not exist yet — names it in `blockedBy`, and applies once it exists.
#[tokio::test]
async fn a_layer_waits_for_an_object_of_any_kind() -> Result<()> {
    let client = cluster().client().await?;
    let test_ns = TestNamespace::create(&client, "prereq").await?;
    let ns = test_ns.name.clone();
    install_layer_crds(&client, &ns).await?;
    let source = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: src, namespace: {ns}, labels: {{strata.dev/layer-source: \"true\"}}}}\ndata:\n  app.yaml: |\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {{name: app, namespace: {ns}}}\n    data: {{a: b}}\n"
    );
    strata_e2e::support::apply_yaml(&client, &ns, &source).await?;
    let name = format!("{ns}-gated");
    let layer = format!(
        "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {name}, labels: {{strata-e2e/suite: {ns}}}}}\nspec:\n  version: 1.0.0\n  source: {{kind: ConfigMap, name: src, namespace: {ns}, path: ./}}\n  prereqs:\n    objects:\n    - {{apiVersion: v1, kind: Secret, name: gate, namespace: {ns}}}\n"
    );
    let controller = start_layer_service("layer-controller", &ns, &[])?;
    strata_e2e::support::apply_yaml(&client, &ns, &layer).await?;
    let layers: Api<AddonsLayer> = Api::all(client.clone());
    let blocked = eventually(
        "blocked by the missing Secret",
        Duration::from_secs(30),
        || async {
            let status = layers.get(&name).await?.status.unwrap_or_default();
            Ok((status.state.as_deref() == Some("ApplyPending")).then_some(status))
        },
    )
    .await?;
    let blocker = blocked.blocked_by.first().expect("a blocker");
    ensure!(
        blocker.name == format!("Secret {ns}/gate") && blocker.reason == "Missing",
        "{:?}",
        blocked.blocked_by
    );
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), &ns);
    ensure!(
        configmaps.get_opt("app").await?.is_none(),
        "nothing applied while blocked"
    );
    strata_e2e::support::apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: gate, namespace: {ns}}}\ndata: {{}}\n"
        ),
    )
    .await?;
    eventually(
        "Deployed once the Secret exists",
        Duration::from_secs(30),
        || async {
            let status = layers.get(&name).await?.status.unwrap_or_default();
            Ok((status.state.as_deref() == Some("Deployed")).then_some(()))
        },
    )
    .await?;
    ensure!(configmaps.get_opt("app").await?.is_some());
    delete_layers_then_stop(&[&name], controller);
    Ok(())
}
