//! `strata render` end to end on fixture charts, with the real helm binary: golden trees for
//! each GitOps tool, idempotence, prune safety, secrets, `--diff`, and a chart repository served
//! over HTTP on 127.0.0.1.
//!
//! The helm binary is `$HELM`, else the one the local control plane builds (the version of
//! `e2e/plane/versions.env`), else `helm` on `PATH`; without any, each test fails saying how
//! to get one (`STRATA_SKIP_HELM_TESTS=1` skips them). `UPDATE_GOLDEN=1` rewrites the golden
//! trees.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use render::gitops::Tool;
use render::keys::HEADER;
use render::pipeline::{self, Options};
use render::profile::Profile;

fn fixtures() -> PathBuf {
    Path::new(
        std::env::var("CARGO_MANIFEST_DIR")
            .as_deref()
            .unwrap_or(env!("CARGO_MANIFEST_DIR")),
    )
    .join("tests/fixtures")
}

#[path = "support/helm.rs"]
mod support;

macro_rules! require_helm {
    () => {
        match support::helm() {
            Some(helm) => helm,
            None => return,
        }
    };
}

/// A fresh scratch directory holding a copy of the fixtures (course, charts, values).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-render-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_tree(&fixtures(), &dir);
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() != "golden" {
                copy_tree(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn profile() -> Profile {
    Profile::load(&fixtures().join("profile.yaml")).unwrap()
}

fn options(dir: &Path, tool: Tool, helm: &Path) -> Options {
    Options {
        course: dir.join("course.yaml"),
        output: dir.join("manifests"),
        tool,
        profile: Some(profile()),
        helm: helm.to_path_buf(),
        jobs: 2,
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// Every file under `dir`, relative path → content.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(relative, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

async fn render(options: &Options) -> pipeline::Outcome {
    let outcome = pipeline::plan(options, &no_env).await.unwrap();
    pipeline::write(options, &outcome).unwrap();
    outcome
}

async fn golden(tool: Tool) {
    let helm = require_helm!();
    let dir = scratch(tool.name());
    let options = options(&dir, tool, &helm);
    let outcome = render(&options).await;
    let got = tree(&options.output);
    let golden_dir = fixtures().join("golden").join(tool.name());
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let _ = std::fs::remove_dir_all(&golden_dir);
        for (path, content) in &got {
            let target = golden_dir.join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, content).unwrap();
        }
    }
    let want = tree(&golden_dir);
    let got_paths: Vec<&String> = got.keys().collect();
    let want_paths: Vec<&String> = want.keys().collect();
    assert_eq!(got_paths, want_paths, "{}: file set", tool.name());
    for (path, content) in &want {
        assert_eq!(&got[path], content, "{}: {path}", tool.name());
    }
    assert!(got.values().all(|c| c.starts_with(&format!("{HEADER}\n"))));
    // The report: every hook that lost something is named; nothing secret is printed.
    assert!(!outcome.hook_notes.is_empty());
    let report = outcome.hook_notes.join("\n") + &outcome.warnings.join("\n");
    assert!(!report.contains("secret/data/platform"), "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn golden_argocd() {
    golden(Tool::Argocd).await;
}

#[tokio::test]
async fn golden_flux() {
    golden(Tool::Flux).await;
}

#[tokio::test]
async fn golden_strata() {
    golden(Tool::Strata).await;
}

#[tokio::test]
async fn argocd_output_facts() {
    let helm = require_helm!();
    let dir = scratch("facts");
    let options = options(&dir, Tool::Argocd, &helm);
    let outcome = render(&options).await;
    let files = tree(&options.output);
    let release = "releases/platform";
    let has = |path: &str| files.contains_key(path);
    // CRDs and cluster-scoped kinds (built-in and from this render's CRDs) in _cluster.
    for path in [
        "_cluster/customresourcedefinition.apiextensions.k8s.io_widgets.example.com.yaml",
        "_cluster/clusterrole.rbac.authorization.k8s.io_platform%3Areader.yaml",
        "_cluster/priorityclass.scheduling.k8s.io_platform-high.yaml",
        "_cluster/widget.example.com_platform.yaml",
        // Namespaced: the List's items, a namespaced CR, the same kind+name in another group.
        "platform/serviceaccount_platform-worker.yaml",
        "platform/configmap_platform-listed.yaml",
        "platform/gadget.example.com_platform.yaml",
        "platform/gadget.example.org_platform.yaml",
        // Capabilities from the profile.
        "platform/servicemonitor.monitoring.coreos.com_platform.yaml",
        "platform/poddisruptionbudget.policy_platform.yaml",
        // The placeholder Secret passes.
        "platform/secret_platform-db.yaml",
    ] {
        assert!(has(&format!("{release}/{path}")), "missing {path}");
    }
    // Test pods are skipped; rollback-only hooks are dropped for Argo CD.
    assert!(!files.keys().any(|p| p.contains("platform-test")));
    assert!(!files.keys().any(|p| p.contains("rollback")));
    let cluster_role = &files[&format!(
        "{release}/_cluster/clusterrole.rbac.authorization.k8s.io_platform%3Areader.yaml"
    )];
    assert!(!cluster_role.contains("namespace:"), "{cluster_role}");
    let config = &files[&format!("{release}/platform/configmap_platform-config.yaml")];
    assert!(
        config.contains("greeting: from-file"),
        "files win over inline values: {config}"
    );
    assert!(
        config.contains("mode: fast,safe"),
        "--set escaping: {config}"
    );
    assert!(
        config.contains("strata.dev/rendered-from: release=platform,chart=platform,version=1.2.0")
    );
    assert!(
        config.contains("app.kubernetes.io/managed-by: Helm"),
        "Helm labels kept"
    );
    let capabilities = &files[&format!("{release}/platform/configmap_platform-capabilities.yaml")];
    assert!(
        capabilities.contains("kubeVersion: v1.34.4"),
        "{capabilities}"
    );
    let pvc = &files[&format!("{release}/platform/persistentvolumeclaim_platform-data.yaml")];
    assert!(
        pvc.contains("argocd.argoproj.io/sync-options: Delete=false"),
        "{pvc}"
    );
    let pre =
        &files[&format!("{release}/platform/job.batch_platform-pre-install-pre-upgrade.yaml")];
    for line in [
        "argocd.argoproj.io/hook: PreSync",
        "argocd.argoproj.io/sync-wave: \"-10\"",
        "argocd.argoproj.io/hook-delete-policy: BeforeHookCreation,HookSucceeded",
        "helm.sh/hook: pre-install,pre-upgrade",
    ] {
        assert!(pre.contains(line), "{line} in {pre}");
    }
    let app = &files["apps/argocd/platform.yaml"];
    for line in [
        "path: manifests/releases/platform",
        "- CreateNamespace=true",
        "team: platform",
        "selfHeal: true",
        "namespace: platform",
    ] {
        assert!(app.contains(line), "{line} in {app}");
    }
    let warnings = outcome.warnings.join("\n");
    assert!(
        warnings.contains("release platform: its manifests hold argocd-vault-plugin placeholders but its Application has no plugin source"),
        "{warnings}"
    );
    let web_app = &files["apps/argocd/web.yaml"];
    assert!(
        web_app.contains("owner: web-team") && web_app.contains("team: platform"),
        "{web_app}"
    );
    let notes = outcome.hook_notes.join("\n");
    for fragment in [
        "Job/platform-pre-rollback: dropped",
        "Job/platform-post-delete: PostDelete hooks need Argo CD v2.10",
        "Job/platform-pre-delete: PreDelete hooks need Argo CD v3.3",
        "Job/platform-post-install: Argo CD cannot tell install from upgrade",
    ] {
        assert!(notes.contains(fragment), "{fragment} in {notes}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn capabilities_follow_the_profile() {
    let helm = require_helm!();
    let dir = scratch("capabilities");
    let mut options = options(&dir, Tool::Argocd, &helm);
    options.profile = Some(Profile {
        kube_version: Some("v1.20.0".into()),
        api_versions: vec![],
        cluster_scoped: vec![],
    });
    render(&options).await;
    let files = tree(&options.output);
    let release = "releases/platform/platform";
    assert!(!files.keys().any(|p| p.contains("servicemonitor")));
    assert!(files.contains_key(&format!(
        "{release}/poddisruptionbudget.policy_platform.yaml"
    )));
    let pdb = &files[&format!("{release}/poddisruptionbudget.policy_platform.yaml")];
    assert!(pdb.contains("apiVersion: policy/v1beta1"), "{pdb}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn second_run_changes_nothing() {
    let helm = require_helm!();
    let dir = scratch("idempotent");
    for tool in [Tool::Argocd, Tool::Flux, Tool::Strata] {
        let options = options(&dir, tool, &helm);
        render(&options).await;
        let before = tree(&options.output);
        let again = pipeline::plan(&options, &no_env).await.unwrap();
        assert!(
            again.changes.is_empty(),
            "{}: {:?}",
            tool.name(),
            again.changes
        );
        assert_eq!(again.changes.unchanged.len(), again.files);
        pipeline::write(&options, &again).unwrap();
        assert_eq!(
            tree(&options.output),
            before,
            "{}: byte for byte",
            tool.name()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn prune_keeps_what_is_not_ours() {
    let helm = require_helm!();
    let dir = scratch("prune");
    let options = options(&dir, Tool::Argocd, &helm);
    render(&options).await;
    let out = &options.output;
    let ns = out.join("releases/platform/platform");
    // A user's own manifest with a look-alike header, one without any, a generated file whose
    // header was edited, and a stale generated file of a resource the chart no longer renders.
    let look_alike = ns.join("secret_my-own.yaml");
    std::fs::write(
        &look_alike,
        "# Code generated by strata render; DO NOT EDIT\napiVersion: v1\nkind: Secret\n",
    )
    .unwrap();
    let plain = ns.join("README.md");
    std::fs::write(&plain, "my notes\n").unwrap();
    let edited = ns.join("configmap_platform-config.yaml");
    let text = std::fs::read_to_string(&edited).unwrap();
    std::fs::write(
        &edited,
        text.replacen(
            HEADER,
            "# Code generated by strata render; edited by hand",
            1,
        ),
    )
    .unwrap();
    let stale_dir = out.join("releases/gone/gone");
    std::fs::create_dir_all(&stale_dir).unwrap();
    let stale = stale_dir.join("configmap_old.yaml");
    std::fs::write(
        &stale,
        format!("{HEADER}\n# old\napiVersion: v1\nkind: ConfigMap\n"),
    )
    .unwrap();
    let edited_before = std::fs::read_to_string(&edited).unwrap();

    let outcome = render(&options).await;
    assert!(
        look_alike.exists(),
        "a user file with a similar header survives"
    );
    assert!(plain.exists(), "a file without the header survives");
    assert_eq!(
        std::fs::read_to_string(&edited).unwrap(),
        edited_before,
        "an edited generated file is left alone"
    );
    assert!(!stale.exists(), "a stale generated file is pruned");
    assert!(
        !out.join("releases/gone").exists(),
        "its emptied directories too"
    );
    let warnings = outcome.warnings.join("\n");
    assert!(
        warnings.contains("configmap_platform-config.yaml: not overwritten"),
        "{warnings}"
    );
    assert!(
        warnings.contains("secret_my-own.yaml: left alone"),
        "{warnings}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn literal_secret_stops_the_render() {
    let helm = require_helm!();
    let dir = scratch("secret");
    let course = std::fs::read_to_string(dir.join("course.yaml")).unwrap();
    std::fs::write(
        dir.join("course.yaml"),
        course.replace(
            "<path:secret/data/platform#db-password>",
            "hunter2-but-longer",
        ),
    )
    .unwrap();
    let options = options(&dir, Tool::Argocd, &helm);
    let error = pipeline::plan(&options, &no_env)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "releases/platform/platform/secret_platform-db.yaml: stringData.password: literal secret value \
         would be written to git; pass an argocd-vault-plugin placeholder <path:...#key> or point the \
         chart at an existing Secret"
    );
    assert!(!options.output.exists(), "nothing written");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn diff_shows_changes_without_writing() {
    let helm = require_helm!();
    let dir = scratch("diff");
    let options = options(&dir, Tool::Argocd, &helm);
    let first = pipeline::plan(&options, &no_env).await.unwrap();
    assert_eq!(first.changes.added.len(), first.files);
    let diff = render::prune::diff_text(&first.changes);
    assert!(
        diff.contains("+++ b/releases/web/web/service_web.yaml"),
        "{diff}"
    );
    assert!(!options.output.exists(), "plan writes nothing");
    pipeline::write(&options, &first).unwrap();

    let values = dir.join("values/platform.yaml");
    std::fs::write(&values, "greeting: changed\n").unwrap();
    let course = std::fs::read_to_string(dir.join("course.yaml")).unwrap();
    std::fs::write(
        dir.join("course.yaml"),
        course.replace(
            "    version: 0.3.0\n    layer: apps\n",
            "    version: 0.3.0\n    layer: apps\n    values: {port: 9090}\n",
        ),
    )
    .unwrap();
    let before = tree(&options.output);
    let second = pipeline::plan(&options, &no_env).await.unwrap();
    let diff = render::prune::diff_text(&second.changes);
    assert!(
        diff.contains("-  greeting: from-file\n+  greeting: changed\n"),
        "{diff}"
    );
    assert!(
        diff.contains("--- a/releases/web/web/deployment.apps_web.yaml"),
        "{diff}"
    );
    assert!(second.changes.added.is_empty() && second.changes.removed.is_empty());
    assert_eq!(
        second.changes.changed.len(),
        3,
        "config map, deployment, service"
    );
    assert_eq!(tree(&options.output), before, "nothing written");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn helm_failure_names_the_release() {
    let helm = require_helm!();
    let dir = scratch("helm-failure");
    let course = std::fs::read_to_string(dir.join("course.yaml")).unwrap();
    std::fs::write(
        dir.join("course.yaml"),
        course.replace("./charts/web", "./charts/missing"),
    )
    .unwrap();
    let options = options(&dir, Tool::Argocd, &helm);
    let error = pipeline::plan(&options, &no_env)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("release web: helm template failed"),
        "{error}"
    );
    assert!(!error.contains('\n'), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A chart repository (`helm package` + `helm repo index`) served over HTTP on 127.0.0.1.
#[tokio::test]
async fn chart_from_an_http_repository() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let helm = require_helm!();
    let dir = scratch("repo");
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&helm)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "helm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "package",
        dir.join("charts/web").to_str().unwrap(),
        "-d",
        repo.to_str().unwrap(),
    ]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    run(&["repo", "index", repo.to_str().unwrap(), "--url", &url]);
    let root = repo.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let root = root.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
                let file = root.join(path.trim_start_matches('/'));
                let response = match std::fs::read(&file) {
                    Ok(body) if !path.contains("..") => {
                        let mut head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        head.extend(body);
                        head
                    }
                    _ => {
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                let _ = stream.write_all(&response).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    let course = format!(
        "namespace: web\nrepository: local\nrepositories:\n  local: {{url: '{url}'}}\n\
         gitops: {{argocd: {{spec: {{source: {{repoURL: 'https://git.invalid/x'}}}}}}}}\n\
         releases:\n  - name: shop\n    chart: web\n    version: 0.3.0\n    values: {{port: 7000}}\n"
    );
    std::fs::write(dir.join("repo-course.yaml"), course).unwrap();
    let mut options = options(&dir, Tool::Argocd, &helm);
    options.course = dir.join("repo-course.yaml");
    let outcome = render(&options).await;
    server.abort();
    let files = tree(&options.output);
    let deployment = &files["releases/shop/web/deployment.apps_shop.yaml"];
    assert!(deployment.contains("containerPort: 7000"), "{deployment}");
    assert!(deployment.contains("strata.dev/rendered-from: release=shop,chart=web,version=0.3.0"));
    assert!(outcome.warnings.iter().all(|w| !w.contains("not pinned")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn bad_course_names_file_and_line() {
    let dir = scratch("bad-course");
    std::fs::write(
        dir.join("course.yaml"),
        "namespace: a\nreleases:\n  - name: x\n    chart: ./c\n    valuez: {}\n",
    )
    .unwrap();
    let options = options(&dir, Tool::Argocd, Path::new("helm-not-needed"));
    let error = pipeline::plan(&options, &no_env).await.unwrap_err();
    assert!(error.is_input());
    let text = error.to_string();
    assert!(text.ends_with("course.yaml: line 5 column 5: unknown field `valuez`, expected one of name, namespace, namespace_management, chart, repository, version, hooks, files, values, set, plugin, gitops, layer"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
