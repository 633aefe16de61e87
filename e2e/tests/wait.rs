//! `strata wait` against the local control plane: a rolling update followed to Current, a Job
//! waited to completion, a CR whose CRD is created during the wait, deletion, timeout
//! summaries, a Failed object ending the wait early, Helm's hook wait (`--hooks`), missing
//! permissions reported up front; and `strata status -k` reading live objects.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::Result;
use strata_e2e::services::bin_dir;
use strata_e2e::support::{TestNamespace, apply_yaml, cannot_start, cluster};

fn write_manifest(ns: &str, name: &str, yaml: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-wait-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    path
}

fn strata_wait(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin_dir().join("strata"));
    cmd.arg("wait")
        .arg("--kubeconfig")
        .arg(cluster().kubeconfig())
        .args(args);
    cmd
}

async fn run(cmd: Command) -> Output {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.output().await.unwrap()
}

/// A `strata wait` running in the background whose progress lines (stderr) are read as they
/// come, so a test can see what the waiter has observed instead of sleeping.
struct Waiter {
    task: tokio::task::JoinHandle<(std::process::ExitStatus, String)>,
    progress: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Waiter {
    fn spawn(cmd: Command) -> Self {
        use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let progress = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let lines = progress.clone();
        let stderr = child.stderr.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let task = tokio::spawn(async move {
            let reader = tokio::spawn(async move {
                let mut lines_in = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines_in.next_line().await {
                    let mut all = lines.lock().unwrap();
                    all.push_str(&line);
                    all.push('\n');
                }
            });
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out).await;
            let status = child.wait().await.unwrap();
            let _ = reader.await;
            (status, out)
        });
        Self { task, progress }
    }

    /// Waits until the waiter has reported a line containing every one of `needles`.
    async fn reported(&self, needles: &[&str]) -> Result<()> {
        strata_e2e::support::eventually(
            &format!("the waiter reporting {needles:?}"),
            Duration::from_secs(30),
            || async {
                let progress = self.progress.lock().unwrap().clone();
                Ok(progress
                    .lines()
                    .any(|l| needles.iter().all(|n| l.contains(n)))
                    .then_some(()))
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}; progress so far:\n{}", self.progress.lock().unwrap()))
    }

    fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Exit status, stdout, and every progress line.
    async fn finish(self) -> (std::process::ExitStatus, String, String) {
        let (status, stdout) = self.task.await.unwrap();
        let progress = self.progress.lock().unwrap().clone();
        (status, stdout, progress)
    }
}

/// A Job's `status.succeeded`, as kubectl prints it.
fn job_succeeded(ns: &str, job: &str) -> Result<String> {
    let out = cluster()
        .kubectl()
        .args([
            "-n",
            ns,
            "get",
            "job",
            job,
            "-o",
            "jsonpath={.status.succeeded}",
        ])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn deployment(ns: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: web, image: {image}}}]}}
"
    )
}

#[tokio::test]
async fn follows_a_rolling_update_to_current() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-roll").await?;
    let v1 = deployment(&ns.name, "example.invalid/web:1");
    apply_yaml(&client, &ns.name, &v1).await?;
    let file = write_manifest(&ns.name, "web.yaml", &v1);
    let out = run(strata_wait(&[
        "-f",
        file.to_str().unwrap(),
        "--timeout",
        "60s",
    ]))
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("all 1 objects Current"), "{stdout}");

    // Roll to v2 and wait again: the waiter must see the rollout in progress, then Current.
    let v2 = deployment(&ns.name, "example.invalid/web:2");
    apply_yaml(&client, &ns.name, &v2).await?;
    let out = run(strata_wait(&[
        "-f",
        file.to_str().unwrap(),
        "--timeout",
        "60s",
    ]))
    .await;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("waiting for Deployment/") && stderr.contains("InProgress"),
        "no progress seen:\n{stderr}"
    );
    let live = cluster()
        .kubectl()
        .args([
            "-n",
            &ns.name,
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.status.updatedReplicas}/{.status.readyReplicas}",
        ])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&live.stdout), "3/3");
    Ok(())
}

#[tokio::test]
async fn waits_for_a_job_to_complete_with_jobs() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-job").await?;
    let job = format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: migrate, namespace: {}}}
spec:
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: m, image: example.invalid/migrate:1}}]
",
        ns.name
    );
    let file = write_manifest(&ns.name, "job.yaml", &job);
    apply_yaml(&client, &ns.name, &job).await?;
    let out = run(strata_wait(&[
        "-f",
        file.to_str().unwrap(),
        "--jobs",
        "--timeout",
        "90s",
    ]))
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        job_succeeded(&ns.name, "migrate")?,
        "2",
        "the wait returned before the Job completed"
    );
    Ok(())
}

#[tokio::test]
async fn waits_for_a_cr_whose_crd_arrives_during_the_wait() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-crd").await?;
    let group = format!("{}.wait.strata.dev", ns.name.replace('-', ""));
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: gadgets.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: gadgets, singular: gadget, kind: Gadget}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"
    );
    // No status subresource, so the CR is created already carrying Ready=False: created
    // without conditions, kstatus would rightly call it Current and the wait could end
    // before the test marks it not ready.
    let cr = format!(
        "apiVersion: {group}/v1\nkind: Gadget\nmetadata: {{name: g1, namespace: {}}}\nspec: {{size: 1}}\nstatus: {{conditions: [{{type: Ready, status: \"False\", reason: Test, message: created not ready}}]}}\n",
        ns.name
    );
    let file = write_manifest(&ns.name, "all.yaml", &format!("{crd}---\n{cr}"));
    // Start waiting before the CRD exists: the waiter has looked and reported it missing.
    let waiter = Waiter::spawn(strata_wait(&[
        "-f",
        file.to_str().unwrap(),
        "--timeout",
        "90s",
    ]));
    waiter
        .reported(&["CustomResourceDefinition/gadgets.", "NotFound"])
        .await?;
    apply_yaml(&client, &ns.name, &crd).await?;
    // `kubectl create`, not the server-side apply helper: apply bodies drop `status`, and the
    // CR must exist with its Ready=False status from the first moment.
    let cr_file = write_manifest(&ns.name, "cr.yaml", &cr);
    strata_e2e::support::eventually("CR created", Duration::from_secs(30), || async {
        let out = cluster()
            .kubectl()
            .args(["create", "-f"])
            .arg(&cr_file)
            .output()?;
        Ok(out.status.success().then_some(()))
    })
    .await?;
    // Not Ready yet: the waiter must keep waiting.
    let status = |ready: &str| {
        format!(
            r#"{{"status": {{"conditions": [{{"type": "Ready", "status": "{ready}", "reason": "Test", "message": "set by the test"}}]}}}}"#
        )
    };
    let patch = |ready: &str| {
        cluster()
            .kubectl()
            .args([
                "-n",
                &ns.name,
                "patch",
                &format!("gadgets.{group}"),
                "g1",
                "--type=merge",
                "-p",
                &status(ready),
            ])
            .output()
    };
    assert!(patch("False")?.status.success());
    // The waiter has seen the patched not-Ready status, and keeps waiting.
    waiter.reported(&["Gadget/", "set by the test"]).await?;
    if waiter.is_finished() {
        let (_, stdout, progress) = waiter.finish().await;
        panic!("the wait ended while the CR was not Ready:\n{stdout}\n{progress}");
    }
    assert!(patch("True")?.status.success());
    let (status, stdout, progress) = waiter.finish().await;
    assert!(status.success(), "{stdout}\n{progress}");
    assert!(stdout.contains("all 2 objects Current"), "{stdout}");
    let _ = cluster()
        .kubectl()
        .args(["delete", "crd", &format!("gadgets.{group}"), "--wait=false"])
        .output();
    Ok(())
}

#[tokio::test]
async fn waits_for_deletion() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-del").await?;
    let yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a, namespace: {ns}, finalizers: [strata.dev/test]}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: b, namespace: {ns}}}\n",
        ns = ns.name
    );
    apply_yaml(&client, &ns.name, &yaml).await?;
    let file = write_manifest(&ns.name, "cms.yaml", &yaml);
    assert!(
        cluster()
            .kubectl()
            .args([
                "-n",
                &ns.name,
                "delete",
                "configmap",
                "a",
                "b",
                "--wait=false"
            ])
            .output()?
            .status
            .success()
    );
    let waiter = Waiter::spawn(strata_wait(&[
        "-f",
        file.to_str().unwrap(),
        "--for",
        "deleted",
        "--timeout",
        "60s",
    ]));
    // `a` is held by its finalizer: Terminating is not deleted. The waiter has reported it
    // (and b gone) and is still waiting.
    waiter
        .reported(&["1/2 deleted", &format!("ConfigMap/{}/a", ns.name)])
        .await?;
    assert!(
        !waiter.is_finished(),
        "the wait ended while a ConfigMap was Terminating"
    );
    let unblock = cluster()
        .kubectl()
        .args([
            "-n",
            &ns.name,
            "patch",
            "configmap",
            "a",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ])
        .output()?;
    assert!(unblock.status.success());
    let (status, stdout, progress) = waiter.finish().await;
    assert!(status.success(), "{progress}");
    assert!(stdout.contains("all 2 objects deleted"), "{stdout}");
    Ok(())
}

#[tokio::test]
async fn timeout_lists_every_object_not_ready_and_why() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-timeout").await?;
    let yaml = format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: stuck, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: stuck}}}}
  template:
    metadata: {{labels: {{app: stuck}}}}
    spec:
      nodeSelector: {{topology.kubernetes.io/zone: nowhere}}
      containers: [{{name: s, image: x}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: fine, namespace: {ns}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: never-created, namespace: {ns}}}
",
        ns = ns.name
    );
    apply_yaml(
        &client,
        &ns.name,
        yaml.split(
            "---
apiVersion: v1
kind: Secret",
        )
        .next()
        .unwrap(),
    )
    .await?;
    let file = write_manifest(&ns.name, "stuck.yaml", &yaml);
    for engine in ["watch", "poll"] {
        let out = run(strata_wait(&[
            "-f",
            file.to_str().unwrap(),
            "--timeout",
            "4s",
            "--engine",
            engine,
            "--poll-interval",
            "500ms",
        ]))
        .await;
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{engine}: {stderr}");
        assert!(
            stderr.contains("timed out after 4s: 2 of 3 objects not Current"),
            "{engine}: {stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "resource Deployment/{}/stuck not ready. status: InProgress, message: ",
                ns.name
            )),
            "{engine}: {stderr}"
        );
        assert!(stderr.contains(&format!("resource Secret/{}/never-created not ready. status: NotFound, message: Resource not found", ns.name)), "{engine}: {stderr}");
        assert!(
            !stderr.contains("resource ConfigMap/"),
            "{engine}: the ready object is not in the summary: {stderr}"
        );
        // Progress names every object still waited for, with its reason, not only the first.
        let progress_names_both = stderr.lines().collect::<Vec<_>>().windows(2).any(|w| {
            w[0].contains(&format!(
                "1/3 ready; waiting for Deployment/{}/stuck: InProgress (",
                ns.name
            )) && w[1].contains(&format!(
                "  also waiting for Secret/{}/never-created: NotFound",
                ns.name
            ))
        });
        assert!(progress_names_both, "{engine}: {stderr}");
    }
    Ok(())
}

#[tokio::test]
async fn a_failed_job_ends_the_wait_early() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-fail").await?;
    // The pod can never be scheduled, so the Job hits its deadline and is marked Failed.
    let job = format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: doomed, namespace: {}}}
spec:
  activeDeadlineSeconds: 2
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {{topology.kubernetes.io/zone: nowhere}}
      containers: [{{name: d, image: x}}]
",
        ns.name
    );
    apply_yaml(&client, &ns.name, &job).await?;
    let file = write_manifest(&ns.name, "doomed.yaml", &job);
    let out = run(strata_wait(&[
        "-f",
        file.to_str().unwrap(),
        "--jobs",
        "--timeout",
        "120s",
    ]))
    .await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("an object Failed"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "resource Job/{}/doomed not ready. status: Failed, message: Job Failed.",
            ns.name
        )),
        "{stderr}"
    );
    // Ended by the Job's failure, not by the clock: a wait that ran to its timeout says so
    // (and no wall-clock bound is needed to tell the two apart on a busy machine).
    assert!(
        !stderr.contains("timed out"),
        "the wait ran to its timeout instead of ending early: {stderr}"
    );
    Ok(())
}

/// A Deployment that can never become ready: its pods match no node.
fn unschedulable_deployment(ns: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: stuck, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: stuck}}}}
  template:
    metadata: {{labels: {{app: stuck}}}}
    spec:
      nodeSelector: {{strata.dev/no-such-node: \"true\"}}
      containers: [{{name: c, image: example.invalid/stuck:1}}]
"
    )
}

#[tokio::test]
async fn hooks_wait_for_jobs_and_pods_only() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-hooks").await?;
    let manifests = format!(
        "{}---
apiVersion: batch/v1
kind: Job
metadata: {{name: pre-install, namespace: {ns}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: m, image: example.invalid/hook:1}}]
",
        unschedulable_deployment(&ns.name),
        ns = ns.name
    );
    let file = write_manifest(&ns.name, "hooks.yaml", &manifests);
    apply_yaml(&client, &ns.name, &manifests).await?;
    // Without --hooks the stuck Deployment holds the wait until it times out.
    let out = run(strata_wait(&[
        "-f",
        file.to_str().unwrap(),
        "--timeout",
        "5s",
    ]))
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("resource Deployment/{}/stuck not ready", ns.name)),
        "{stderr}"
    );
    // With --hooks only the Job counts: the wait ends when it has completed.
    let out = run(strata_wait(&[
        "-f",
        file.to_str().unwrap(),
        "--hooks",
        "--timeout",
        "90s",
    ]))
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("all 1 objects Current"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "skipped Deployment/{}/stuck (only Pods and Jobs are waited on with --hooks)",
            ns.name
        )),
        "{stderr}"
    );
    assert_eq!(
        job_succeeded(&ns.name, "pre-install")?,
        "1",
        "the hook wait returned before the Job completed"
    );
    Ok(())
}

#[tokio::test]
async fn a_wait_without_watch_permission_fails_at_once_naming_the_kind() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-rbac").await?;
    // May read ConfigMaps fully, Deployments only with get and list (no watch).
    let rbac = strata_e2e::support::service_account_with_role(
        &ns.name,
        "waiter",
        &[
            r#"{apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}"#,
            "{apiGroups: [apps], resources: [deployments], verbs: [get, list]}",
        ],
    );
    apply_yaml(&client, &ns.name, &rbac).await?;
    let manifests = format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
---
{}",
        deployment(&ns.name, "example.invalid/web:1"),
        ns = ns.name
    );
    apply_yaml(&client, &ns.name, &manifests).await?;
    let file = write_manifest(&ns.name, "app.yaml", &manifests);
    let kubeconfig = strata_e2e::support::service_account_kubeconfig(&ns.name, "waiter")?;
    let wait_as_waiter = |extra: &[&str]| {
        let mut cmd = Command::new(bin_dir().join("strata"));
        cmd.arg("wait")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["-f", file.to_str().unwrap(), "--timeout", "60s"])
            .args(extra);
        cmd
    };
    let started = Instant::now();
    let out = run(wait_as_waiter(&[])).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "strata: cannot wait: this user may not watch Deployment in namespace {}",
            ns.name
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("ConfigMap"),
        "only what is missing: {stderr}"
    );
    // Up front, not when the 60 s timeout ends the wait: the bound is the product's own
    // timeout, halved for the margin a busy two-core machine needs to start a process and
    // ask two access reviews (the check takes well under a second when idle).
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the check is up front, not after the 60 s timeout"
    );
    // The poll engine needs only list, which the user has: the wait goes ahead.
    let out = run(wait_as_waiter(&[
        "--engine",
        "poll",
        "--poll-interval",
        "1s",
    ]))
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    Ok(())
}

fn strata_status(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin_dir().join("strata"));
    cmd.arg("status")
        .arg("--kubeconfig")
        .arg(cluster().kubeconfig())
        .args(args);
    cmd
}

#[tokio::test]
async fn status_reads_live_objects_like_a_dump() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "status-live").await?;
    let manifests = format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
---
{}",
        unschedulable_deployment(&ns.name),
        ns = ns.name
    );
    apply_yaml(&client, &ns.name, &manifests).await?;
    // The Deployment is seen by its controller (its status no longer changes) before both reads.
    strata_e2e::support::eventually(
        "the Deployment observed",
        Duration::from_secs(30),
        || async {
            let out = cluster()
                .kubectl()
                .args(["-n", &ns.name, "get", "deploy", "stuck"])
                .args([
                    "-o",
                    "jsonpath={.status.observedGeneration}/{.status.unavailableReplicas}",
                ])
                .output()?;
            Ok((String::from_utf8_lossy(&out.stdout) == "1/1").then_some(()))
        },
    )
    .await?;
    let dump = cluster()
        .kubectl()
        .args([
            "-n",
            &ns.name,
            "get",
            "deployments.apps/stuck",
            "configmaps/settings",
            "-o",
            "yaml",
        ])
        .output()?;
    assert!(dump.status.success());
    let file = write_manifest(&ns.name, "dump.yaml", &String::from_utf8(dump.stdout)?);
    let offline = run(strata_status(&["-f", file.to_str().unwrap(), "-o", "json"])).await;
    let (want, stderr) = text(&offline);
    assert!(offline.status.success(), "{stderr}");
    // Kind, resource and short names, with and without a group, with a name.
    for kinds in [
        ["-k", "Deployment", "-k", "ConfigMap/settings"],
        ["-k", "deployments.apps", "-k", "configmaps/settings"],
        ["-k", "deploy", "-k", "cm/settings"],
    ] {
        let mut args = kinds.to_vec();
        args.extend(["-n", &ns.name, "-o", "json"]);
        let live = run(strata_status(&args)).await;
        let (got, stderr) = text(&live);
        assert!(live.status.success(), "{kinds:?}: {stderr}");
        assert_eq!(got, want, "{kinds:?}");
    }
    let lines: Vec<serde_json::Value> = serde_json::from_str(&want)?;
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["status"], "InProgress");
    assert_eq!(lines[1]["status"], "Current");
    // Every namespace: ours is among them.
    let all = run(strata_status(&["-k", "deploy", "-A"])).await;
    let (table, stderr) = text(&all);
    assert!(all.status.success(), "{stderr}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("Deployment") && l.contains(&ns.name) && l.contains("stuck")),
        "{table}"
    );
    // Clear errors naming what was asked for.
    let missing = run(strata_status(&["-k", "cm/absent", "-n", &ns.name])).await;
    assert_eq!(missing.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim(),
        format!(
            "strata: -k cm/absent: configmaps \"absent\" not found in namespace {}",
            ns.name
        )
    );
    let unknown = run(strata_status(&["-k", "gizmos"])).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unknown.stderr)
            .contains("does not serve a resource named \"gizmos\""),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
    Ok(())
}

/// `strata wait --strict` fails a workload whose pods cannot start once the grace has passed,
/// naming the pod, the container and the reason, for every reason and workload kind; the
/// default (kstatus) wait on the same object still only sees InProgress.
#[tokio::test]
async fn a_strict_wait_fails_fast_when_pods_cannot_start() -> Result<()> {
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-failfast").await?;
    let grace = Duration::from_secs(5);
    let cases = [
        ("Deployment", "pull", "ImagePullBackOff", "pull-"),
        ("StatefulSet", "errpull", "ErrImagePull", "errpull-0"),
        ("DaemonSet", "badname", "InvalidImageName", "badname-"),
        (
            "ReplicaSet",
            "config",
            "CreateContainerConfigError",
            "config-",
        ),
        ("Job", "crash", "CrashLoopBackOff", "crash-"),
        ("Deployment", "nowhere", "Unschedulable", "nowhere-"),
    ];
    let mut manifests = String::new();
    for (kind, name, reason, _) in cases {
        manifests.push_str(&cannot_start(kind, name, &ns.name, reason));
        manifests.push_str("---\n");
    }
    apply_yaml(&client, &ns.name, &manifests).await?;
    let waits = cases.iter().map(|(kind, name, reason, pod_prefix)| {
        let file = write_manifest(
            &ns.name,
            &format!("{name}.yaml"),
            &cannot_start(kind, name, &ns.name, reason),
        );
        async move {
            let started = Instant::now();
            let out = run(strata_wait(&[
                "-f",
                file.to_str().unwrap(),
                "--strict",
                "--failure-grace",
                "5s",
                "--timeout",
                "60s",
            ]))
            .await;
            (*kind, *name, *reason, *pod_prefix, started.elapsed(), out)
        }
    });
    // The same stuck Deployment under the default policy: kstatus waits for its deadline.
    let default_file = write_manifest(
        &ns.name,
        "default.yaml",
        &cannot_start("Deployment", "pull", &ns.name, "ImagePullBackOff"),
    );
    let default_wait = run(strata_wait(&[
        "-f",
        default_file.to_str().unwrap(),
        "--timeout",
        "12s",
    ]));
    let (results, default_out) = tokio::join!(futures::future::join_all(waits), default_wait);
    for (kind, name, reason, pod_prefix, elapsed, out) in results {
        let (_, stderr) = text(&out);
        eprintln!("{kind} {reason}: the strict wait ended after {elapsed:?}");
        assert_eq!(out.status.code(), Some(1), "{kind} {reason}: {stderr}");
        assert!(
            stderr.contains("an object Failed"),
            "{kind} {reason}: {stderr}"
        );
        let line = stderr
            .lines()
            .find(|l| l.contains(&format!("resource {kind}/{}/{name} not ready", ns.name)))
            .unwrap_or_else(|| panic!("{kind} {reason}: no summary line: {stderr}"));
        assert!(line.contains("status: Failed"), "{kind} {reason}: {line}");
        let named = if reason == "Unschedulable" {
            ": Unschedulable: 0/".to_string()
        } else {
            format!("/app: {reason}: image \"registry.invalid/{name}:1\"")
        };
        assert!(
            line.contains(&format!("message: {pod_prefix}")) && line.contains(&named),
            "{kind} {reason}: the message must name the pod, container and reason: {line}"
        );
        // The promise is `--failure-grace`; the objects were applied (and their pods stuck)
        // before the wait started, so the 5 s margin is only for the wait's first reads and
        // watch on a shared machine. A wait that ran to its timeout is told apart by the
        // message above, not by this bound.
        assert!(
            elapsed <= grace + Duration::from_secs(5),
            "{kind} {reason}: Failed after {elapsed:?}, beyond the grace ({grace:?}) + 5s"
        );
    }
    let (_, stderr) = text(&default_out);
    assert_eq!(default_out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("timed out after 12s")
            && stderr.contains("status: InProgress")
            && !stderr.contains("ImagePullBackOff"),
        "the default policy must stay kstatus' (InProgress until the deadline): {stderr}"
    );
    // `strata status -k --strict` reads the live workload's pods too.
    let out = run(strata_status(&[
        "-k",
        "deploy/pull",
        "-n",
        &ns.name,
        "--strict",
        "--failure-grace",
        "5s",
        "-o",
        "json",
    ]))
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let live: serde_json::Value = serde_json::from_str(&stdout)?;
    assert_eq!(
        (live[0]["status"].as_str(), live[0]["reason"].as_str()),
        (Some("Failed"), Some("ImagePullBackOff")),
        "{live}"
    );
    Ok(())
}

/// Item 3 of #30: a custom resource's status from before its last apply is not Ready. A
/// test controller answers every generation of its `Gadget`s 5 s late (a Ready condition,
/// no observedGeneration, as many controllers write it); 100 strict waits on fresh gadgets
/// and 100 on changed ones must none of them end before that answer. Control: kstatus'
/// policy on the changed ones ends early (the old status says Ready).
#[tokio::test]
async fn strict_waits_never_end_before_the_controller_wrote_status() -> Result<()> {
    use core_status::policy::{Policy, Rules};
    use core_status::wait::{Engine, Outcome, Target, WaitFor, WaitOptions, wait};
    use futures::StreamExt;
    use kube::api::{DynamicObject, Patch, PatchParams};
    use kube::core::{ApiResource, GroupVersionKind};
    use kube::runtime::{WatchStreamExt, watcher};
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    const GADGETS: usize = 100;
    let client = cluster().client().await?;
    let ns = TestNamespace::create(&client, "wait-fresh").await?;
    apply_yaml(
        &client,
        &ns.name,
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.fresh.strata-e2e.dev}
spec:
  group: fresh.strata-e2e.dev
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
",
    )
    .await?;
    strata_e2e::support::crds_established(&client, &["gadgets.fresh.strata-e2e.dev"]).await?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fresh.strata-e2e.dev", "v1", "Gadget"),
        "gadgets",
    );
    let gadgets: kube::Api<DynamicObject> =
        kube::Api::namespaced_with(client.clone(), &ns.name, &resource);

    // The late controller: (name, generation) → when its status write was sent.
    let answered: Arc<Mutex<HashMap<(String, i64), Instant>>> = Arc::default();
    let controller = {
        let gadgets = gadgets.clone();
        let answered = answered.clone();
        tokio::spawn(async move {
            let mut pending = std::collections::HashSet::new();
            let mut stream = std::pin::pin!(
                watcher(gadgets.clone(), watcher::Config::default()).applied_objects()
            );
            while let Some(Ok(gadget)) = stream.next().await {
                let name = gadget.metadata.name.clone().unwrap_or_default();
                let generation = gadget.metadata.generation.unwrap_or(0);
                if !pending.insert((name.clone(), generation)) {
                    continue;
                }
                let (gadgets, answered) = (gadgets.clone(), answered.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    // Stamped to the second, truncated, as the API server stamps times (rounding
                    // up could date the write after an apply made in the next second).
                    let now =
                        jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
                    let status = serde_json::json!({"status": {"conditions": [{
                        "type": "Ready", "status": "True", "reason": "Answered",
                        "lastTransitionTime": now.to_string()}]}});
                    answered
                        .lock()
                        .unwrap()
                        .insert((name.clone(), generation), Instant::now());
                    let _ = gadgets
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await;
                });
            }
        })
    };

    let gadget = |i: usize, v: u32| {
        format!(
            "apiVersion: fresh.strata-e2e.dev/v1\nkind: Gadget\nmetadata: {{name: g{i}, namespace: {}}}\nspec: {{v: {v}}}\n",
            ns.name
        )
    };
    let strict = Rules {
        policy: Policy::strict(),
        health: Default::default(),
    };
    let run_waits = |rules: Rules, count: usize| {
        let client = client.clone();
        let ns = ns.name.clone();
        async move {
            let waits = (0..count).map(|i| {
                let client = client.clone();
                let rules = rules.clone();
                let target = Target {
                    api_version: "fresh.strata-e2e.dev/v1".into(),
                    kind: "Gadget".into(),
                    namespace: ns.clone(),
                    name: format!("g{i}"),
                    min_generation: None,
                };
                async move {
                    let options = WaitOptions {
                        mode: WaitFor::Current,
                        engine: Engine::Watch,
                        timeout: Duration::from_secs(60),
                        rules,
                    };
                    let report = wait(client, vec![target], options, |_| {}).await.unwrap();
                    (format!("g{i}"), report.outcome, Instant::now())
                }
            });
            futures::future::join_all(waits).await
        }
    };
    let early = |results: &[(String, Outcome, Instant)], generation: i64| -> Vec<String> {
        let answered = answered.lock().unwrap();
        results
            .iter()
            .filter(|(name, outcome, ended)| {
                *outcome != Outcome::Done
                    || answered
                        .get(&(name.clone(), generation))
                        .is_none_or(|written| ended < written)
            })
            .map(|(name, outcome, _)| format!("{name}: {outcome:?}"))
            .collect()
    };

    // Fresh: no status at all until the controller answers.
    let mut all = String::new();
    for i in 0..GADGETS {
        all.push_str(&gadget(i, 1));
        all.push_str("---\n");
    }
    apply_yaml(&client, &ns.name, &all).await?;
    let fresh = run_waits(strict.clone(), GADGETS).await;
    let early_fresh = early(&fresh, 1);
    // Changed: the status from generation 1 says Ready until the controller answers again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut changed = String::new();
    for i in 0..GADGETS {
        changed.push_str(&gadget(i, 2));
        changed.push_str("---\n");
    }
    apply_yaml(&client, &ns.name, &changed).await?;
    let (after_change, control) = tokio::join!(
        run_waits(strict.clone(), GADGETS),
        run_waits(Rules::default(), 10)
    );
    let early_changed = early(&after_change, 2);
    let early_control = early(&control, 2);
    controller.abort();
    assert!(
        early_fresh.is_empty() && early_changed.is_empty(),
        "of {} strict waits, these ended before the controller wrote status: fresh {early_fresh:?}, changed {early_changed:?}",
        2 * GADGETS
    );
    assert!(
        !early_control.is_empty(),
        "kstatus' policy should have ended early on the stale Ready (the test cannot tell otherwise)"
    );
    Ok(())
}
