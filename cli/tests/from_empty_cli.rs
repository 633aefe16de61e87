//! `strata layers plan --from-empty -f LAYERS --source-root DIR`: offline, what would break on a
//! cluster rebuilt from nothing — one line per finding naming both layers and the object,
//! exit 1; exit 0 once the order is fixed; a bad input names the file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::Path;
use std::process::Command;

fn write(dir: &Path, path: &str, text: &str) {
    let file = dir.join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, text).unwrap();
}

fn layer(name: &str, version: &str, path: &str, depends_on: &str) -> String {
    format!(
        "apiVersion: strata.dev/v1alpha1\nkind: AddonsLayer\nmetadata: {{name: {name}}}\nspec:\n  version: {version}\n  source: {{kind: GitRepository, name: platform, path: {path}}}\n  prereqs: {{dependsOn: [{depends_on}]}}\n---\n"
    )
}

fn run(dir: &Path, layers: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "layers",
            "plan",
            "--from-empty",
            "-f",
            layers,
            "--source-root",
        ])
        .arg(dir.join("repo"))
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn an_order_that_only_works_on_a_full_cluster_is_found_offline() {
    let dir = std::env::temp_dir().join(format!("strata-from-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    write(
        &dir,
        "repo/crds/crd.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: certificates.cert-manager.io}\nspec:\n  group: cert-manager.io\n  names: {kind: Certificate, plural: certificates}\n  scope: Namespaced\n  versions: []\n",
    );
    write(
        &dir,
        "repo/namespaces/apps.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: apps}\n",
    );
    write(
        &dir,
        "repo/loop/settings.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\n",
    );
    // `${ENV}` comes from the layer's inline variables.
    write(
        &dir,
        "repo/web/web.yaml",
        "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: web, namespace: apps}\nspec: {secretName: web-tls}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-${ENV}, namespace: apps}\n",
    );
    let broken = [
        layer("crds", "1.2.0", "./crds", ""),
        layer("namespaces", "1.0.0", "./namespaces", ""),
        layer("web", "1.0.0", "./web", "\"crds@>=2\"").replace(
            "  prereqs:",
            "  postBuild: {substitute: {ENV: prod}}\n  prereqs:",
        ),
        layer("loop-a", "1.0.0", "./loop", "loop-b"),
        layer("loop-b", "1.0.0", "./loop", "loop-a"),
    ]
    .concat();
    write(&dir, "broken.yaml", &broken);
    let (code, stdout, stderr) = run(&dir, "broken.yaml");
    assert_eq!(code, 1, "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    for want in [
        "layer web applies ConfigMap apps/web-prod into namespace apps, which only layer namespaces creates, and does not depend on it",
        "layer web applies Certificate apps/web into namespace apps, which only layer namespaces creates",
        "layer web depends on crds@>=2, but layer crds is version 1.2.0: no layer satisfies it",
        "layers loop-a -> loop-b -> loop-a form a dependency cycle",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(want)),
            "{want:?} missing:\n{stdout}"
        );
    }
    assert_eq!(lines.len(), 4, "{stdout}");

    // Fixed: web depends on both, the constraint matches, no loop.
    let fixed = [
        layer("crds", "1.2.0", "./crds", ""),
        layer("namespaces", "1.0.0", "./namespaces", ""),
        layer("web", "1.0.0", "./web", "\"crds@^1.2\", namespaces").replace(
            "  prereqs:",
            "  postBuild: {substitute: {ENV: prod}}\n  prereqs:",
        ),
    ]
    .concat();
    write(&dir, "fixed.yaml", &fixed);
    let (code, stdout, stderr) = run(&dir, "fixed.yaml");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout.trim(),
        "3 layers: nothing would break on an empty cluster"
    );

    // A layer whose path holds nothing, and a file that is not YAML, are named.
    write(&dir, "typo.yaml", &layer("web", "1.0.0", "./wbe", ""));
    let (code, stdout, _) = run(&dir, "typo.yaml");
    assert_eq!(code, 1);
    assert!(stdout.starts_with("layer web: its source "), "{stdout}");
    write(&dir, "bad.yaml", "kind: [");
    let (code, _, stderr) = run(&dir, "bad.yaml");
    assert_eq!(code, 2);
    assert!(stderr.contains("bad.yaml"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
