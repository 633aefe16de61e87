//! The `strata render` contract: default output beside the course, `--diff` exit
//! codes, bad input on one line with exit 2. Uses the render crate's fixture charts and the real
//! helm binary (skipped, saying so, when there is none).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(
        std::env::var("CARGO_MANIFEST_DIR")
            .as_deref()
            .unwrap_or(env!("CARGO_MANIFEST_DIR")),
    )
    .join("../crates/render/tests/fixtures")
}

#[path = "../../crates/render/tests/support/helm.rs"]
mod support;

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

fn strata(helm: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .env("HELM", helm)
        .output()
        .unwrap()
}

#[test]
fn render_writes_beside_the_course_and_diff_reports_changes() {
    let Some(helm) = support::helm() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("strata-render-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_tree(&fixtures(), &dir);
    let course = dir.join("course.yaml");
    let course_arg = course.to_str().unwrap();
    let profile = dir.join("profile.yaml");
    let profile_arg = profile.to_str().unwrap();

    let out = strata(&helm, &["render", "--profile", profile_arg, course_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        dir.join("manifests/apps/argocd/platform.yaml").is_file(),
        "argocd by default"
    );
    assert!(
        dir.join("manifests/releases/web/web/deployment.apps_web.yaml")
            .is_file()
    );
    assert!(
        stderr.contains("hook: release platform: Job/platform-pre-rollback: dropped"),
        "{stderr}"
    );

    let out = strata(
        &helm,
        &["render", "--diff", "--profile", profile_arg, course_arg],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());

    std::fs::write(dir.join("values/platform.yaml"), "greeting: changed\n").unwrap();
    let out = strata(
        &helm,
        &["render", "--diff", "--profile", profile_arg, course_arg],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(diff.contains("+  greeting: changed"), "{diff}");
    let config = dir.join("manifests/releases/platform/platform/configmap_platform-config.yaml");
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("greeting: from-file"),
        "--diff writes nothing"
    );

    std::fs::write(
        &course,
        "namespace: a\nreleases:\n  - name: x\n    chart: ./c\n    valuez: {}\n",
    )
    .unwrap();
    let out = strata(&helm, &["render", course_arg]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "strata: {course_arg}: line 5 column 5: unknown field `valuez`"
        )),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `helm template` children get Go's GC target of 400 unless the user set `GOGC` or
/// `GOMEMLIMIT` (a stand-in helm echoes what it was given into a ConfigMap).
#[test]
fn helm_children_get_a_gc_target_unless_the_user_chose_one() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("strata-render-gogc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("chart")).unwrap();
    std::fs::write(
        dir.join("chart/Chart.yaml"),
        "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
    )
    .unwrap();
    let stand_in = dir.join("helm");
    std::fs::write(
        &stand_in,
        "#!/bin/sh\ncat >/dev/null\nprintf 'apiVersion: v1\\nkind: ConfigMap\\nmetadata:\\n  name: gc\\ndata:\\n  gogc: \"%s\"\\n' \"${GOGC:-unset}\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.join("course.yaml"),
        "schema: v2\nnamespace: probe\nrepositories: {}\nreleases:\n  - name: probe\n    chart: ./chart\n",
    )
    .unwrap();
    let course = dir.join("course.yaml");
    let seen = |env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_strata"));
        command
            .args(["render", "--gitops", "flux", course.to_str().unwrap()])
            .env("HELM", &stand_in)
            .env_remove("GOGC")
            .env_remove("GOMEMLIMIT");
        for (key, value) in env {
            command.env(key, value);
        }
        let out = command.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let file = dir.join("manifests/releases/probe/probe/configmap_gc.yaml");
        let text = std::fs::read_to_string(&file).unwrap();
        let line = text
            .lines()
            .find(|l| l.contains("gogc:"))
            .unwrap()
            .to_string();
        line.trim().to_string()
    };
    assert_eq!(seen(&[]), "gogc: \"400\"");
    assert_eq!(seen(&[("GOGC", "100")]), "gogc: \"100\"");
    assert_eq!(seen(&[("GOMEMLIMIT", "1GiB")]), "gogc: unset");
    std::fs::remove_dir_all(&dir).unwrap();
}
