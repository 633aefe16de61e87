//! The `strata status` contract, run as a user would.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn strata(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The command may exit before reading its input (bad flags): a broken pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

const PENDING_POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns, creationTimestamp: '2026-01-01T00:00:00Z'}
status:
  phase: Pending
  conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable}]
";

#[test]
fn json_output_has_one_element_per_object_in_input_order() {
    let input = format!(
        "{PENDING_POD}---\napiVersion: v1\nkind: List\nitems:\n- {{apiVersion: v1, kind: ConfigMap, metadata: {{name: a}}}}\n- {{apiVersion: example.com/v1, kind: Widget, metadata: {{name: w, namespace: ns}}, status: {{conditions: [{{type: Ready, status: 'False', reason: Waiting, message: later}}]}}}}\n"
    );
    let out = strata(
        &[
            "status",
            "-f",
            "-",
            "-o",
            "json",
            "--now",
            "2026-01-01T00:00:10Z",
        ],
        &input,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = serde_json::json!([
        {"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "p", "status": "InProgress", "message": "Pod has not been scheduled", "reason": "PodNotScheduled"},
        {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "", "name": "a", "status": "Current", "message": "Resource is always ready", "reason": null},
        {"apiVersion": "example.com/v1", "kind": "Widget", "namespace": "ns", "name": "w", "status": "InProgress", "message": "later", "reason": "Waiting"},
    ]);
    assert_eq!(got, want);
    // Key order is part of the contract.
    let text = String::from_utf8_lossy(&out.stdout);
    let keys = [
        "\"apiVersion\"",
        "\"kind\"",
        "\"namespace\"",
        "\"name\"",
        "\"status\"",
        "\"message\"",
        "\"reason\"",
    ];
    let positions: Vec<usize> = keys.iter().map(|k| text.find(k).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
}

#[test]
fn now_fixes_the_clock() {
    let out = strata(
        &[
            "status",
            "-f",
            "-",
            "-o",
            "json",
            "--now",
            "2026-01-01T00:01:00Z",
        ],
        PENDING_POD,
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got[0]["status"], "Failed");
    assert_eq!(got[0]["reason"], "PodUnschedulable");
}

#[test]
fn not_current_objects_still_exit_zero() {
    let out = strata(
        &["status", "-f", "-"],
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 2}\n",
    );
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("KIND"), "{text}");
    assert!(
        text.contains("InProgress  LessReplicas  Replicas: 0/2"),
        "{text}"
    );
}

#[test]
fn directories_are_read_recursively_in_name_order() {
    let dir = std::env::temp_dir().join(format!("strata-status-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(
        dir.join("b.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a.json"),
        r#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("sub/c.yml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: c}\n",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "not a manifest").unwrap();
    let out = strata(&["status", "-f", dir.to_str().unwrap(), "-o", "json"], "");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a", "b", "c"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn malformed_input_is_one_line_naming_source_and_document_exit_2() {
    let cases = [
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nmetadata: {name: b}\n",
            "strata: -: document index 1: missing field kind",
        ),
        (
            "apiVersion: v1\nkind: [unclosed\n",
            "strata: -: document index 0: invalid YAML",
        ),
    ];
    for (input, want) in cases {
        let out = strata(&["status", "-f", "-"], input);
        assert_eq!(out.status.code(), Some(2), "{input:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with(want), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    }
    let out = strata(&["status", "-f", "-", "--now", "yesterday"], PENDING_POD);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn render_of_a_missing_course_is_bad_input() {
    let out = strata(&["render", "no-such-course.yaml"], "");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("strata: no-such-course.yaml: cannot read"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn health_expressions_judge_kinds_kstatus_cannot() {
    let dir = std::env::temp_dir().join(format!("strata-health-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exprs = dir.join("exprs.yaml");
    std::fs::write(
        &exprs,
        "- apiVersion: gateway.networking.k8s.io/v1\n  kind: Gateway\n  current: status.conditions.exists(c, c.type == 'Programmed' && c.status == 'True')\n",
    )
    .unwrap();
    let gateway = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\nstatus:\n  conditions: [{type: Programmed, status: 'False', reason: Pending}]\n";
    // kstatus alone calls it Current (no Ready, no Reconciling/Stalled).
    let plain: serde_json::Value =
        serde_json::from_slice(&strata(&["status", "-f", "-", "-o", "json"], gateway).stdout)
            .unwrap();
    assert_eq!(plain[0]["status"], "Current");
    let out = strata(
        &[
            "status",
            "-f",
            "-",
            "-o",
            "json",
            "--health-exprs",
            exprs.to_str().unwrap(),
        ],
        gateway,
    );
    let judged: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(judged[0]["status"], "InProgress");
    assert_eq!(judged[0]["reason"], "NoExpressionMatched");
    // A broken expression file is bad input.
    std::fs::write(&exprs, "- apiVersion: a/v1\n  current: '('\n").unwrap();
    let out = strata(
        &[
            "status",
            "-f",
            "-",
            "--health-exprs",
            exprs.to_str().unwrap(),
        ],
        gateway,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}: health expression", exprs.display())),
        "names the file: {err}"
    );
    assert!(
        err.contains("a/*") && err.contains("\"(\""),
        "names the GroupKind and the expression: {err}"
    );
    // Under --strict the same broken file is refused just the same (it would override the pack).
    let strict = strata(
        &[
            "status",
            "-f",
            "-",
            "--strict",
            "--health-exprs",
            exprs.to_str().unwrap(),
        ],
        gateway,
    );
    assert_eq!(strict.status.code(), Some(2));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Offline `--strict` judges a workload by the pods in the input, after the grace; the pack
/// judges the CRDs kstatus cannot read; a user's file overrides the pack.
#[test]
fn strict_offline_uses_the_inputs_pods_and_the_rule_pack() {
    let input = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, generation: 1}
spec: {replicas: 1, selector: {matchLabels: {app: web}}}
status: {observedGeneration: 1, replicas: 1, updatedReplicas: 1, unavailableReplicas: 1}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-6d9c-x
  namespace: shop
  labels: {app: web, pod-template-hash: 6d9c}
  creationTimestamp: '2026-11-26T10:00:00Z'
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-6d9c, uid: u, controller: true}]
status:
  phase: Pending
  containerStatuses: [{name: app, restartCount: 0, state: {waiting: {reason: ImagePullBackOff, message: 'Back-off pulling image x'}}}]
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: r, namespace: shop, generation: 2}
status: {phase: Degraded, observedGeneration: '2'}
";
    let judge = |args: &[&str]| -> serde_json::Value {
        let mut all = vec![
            "status",
            "-f",
            "-",
            "-o",
            "json",
            "--now",
            "2026-11-26T10:00:40Z",
        ];
        all.extend_from_slice(args);
        let out = strata(&all, input);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let default = judge(&[]);
    assert_eq!(default[0]["status"], "InProgress");
    assert_eq!(
        default[2]["status"], "Unknown",
        "kstatus cannot read a string observedGeneration"
    );
    let strict = judge(&["--strict"]);
    assert_eq!(
        (
            &strict[0]["status"],
            &strict[0]["reason"],
            &strict[0]["message"]
        ),
        (
            &serde_json::json!("Failed"),
            &serde_json::json!("ImagePullBackOff"),
            &serde_json::json!("web-6d9c-x/app: ImagePullBackOff: Back-off pulling image x")
        )
    );
    assert_eq!(
        strict[2]["status"], "Failed",
        "the pack's Rollout rule: {}",
        strict[2]
    );
    // Within a longer grace the Deployment is still only InProgress.
    let patient = judge(&["--strict", "--failure-grace", "1m"]);
    assert_eq!(patient[0]["status"], "InProgress");
    // A user's rule for the same kind wins over the pack.
    let dir = std::env::temp_dir().join(format!("strata-pack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let own = dir.join("own.yaml");
    std::fs::write(
        &own,
        "- apiVersion: argoproj.io/v1alpha1\n  kind: Rollout\n  current: 'true'\n",
    )
    .unwrap();
    let overridden = judge(&["--strict", "--health-exprs", own.to_str().unwrap()]);
    assert_eq!(overridden[2]["status"], "Current");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn strict_is_opt_in() {
    let failed_pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {phase: Failed}\n";
    let default: serde_json::Value =
        serde_json::from_slice(&strata(&["status", "-f", "-", "-o", "json"], failed_pod).stdout)
            .unwrap();
    assert_eq!(
        default[0]["status"], "Current",
        "kstatus counts a failed Pod as Current"
    );
    let strict: serde_json::Value = serde_json::from_slice(
        &strata(&["status", "-f", "-", "-o", "json", "--strict"], failed_pod).stdout,
    )
    .unwrap();
    assert_eq!(
        (strict[0]["status"].as_str(), strict[0]["reason"].as_str()),
        (Some("Failed"), Some("PodFailed"))
    );
}

/// JSON input takes the compact decoding path; the same text read as YAML (a comment line in
/// front) takes the full one. Both must print exactly the same.
#[test]
fn json_input_is_judged_exactly_like_yaml() {
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a", "generation": 3, "labels": {"x": "y"}},
         "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
         "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p\u{e9}\\x", "namespace": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
         "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes \"available\""}]}},
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": "2"}},
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "v"},
         "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Waiting", "message": "line\nbreak"}]}},
    ]});
    let pods = serde_json::json!({"apiVersion": "v1", "kind": "PodList", "items": [
        {"metadata": {"name": "q"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}]});
    let deployment = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "solo"},
        "status": {"conditions": [{"type": "Progressing", "status": "True", "reason": "ProgressDeadlineExceeded"}]}});
    for value in [list, pods, deployment] {
        let json = serde_json::to_string_pretty(&value).unwrap();
        let args = [
            "status",
            "-f",
            "-",
            "-o",
            "json",
            "--now",
            "2026-01-01T00:00:05Z",
        ];
        let fast = strata(&args, &json);
        let full = strata(&args, &format!("# read as YAML\n{json}"));
        assert_eq!(
            fast.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&fast.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&fast.stdout),
            String::from_utf8_lossy(&full.stdout)
        );
        let lines: Vec<serde_json::Value> = serde_json::from_slice(&fast.stdout).unwrap();
        assert!(!lines.is_empty());
    }
    let out = strata(
        &["status", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "metadata": {"name": "x"}}]}"#,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .starts_with("strata: -: document index 0: missing field kind")
    );
}

/// 12,000 objects of every special-cased kind, in several states.
fn cluster_dump() -> Vec<serde_json::Value> {
    (0..12_000)
        .map(|i| {
            let meta = serde_json::json!({"name": format!("o-{i}"), "namespace": format!("ns-{}", i % 17),
                "generation": 1 + i % 3, "uid": format!("00000000-0000-4000-8000-{i:012}"),
                "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "x", "index": format!("{i}")}});
            let observed = 1 + i % 3 - usize::from(i % 11 == 0);
            match i % 6 {
                0 => serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                    "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i:1", "args": ["--x", "10"]}]}}},
                    "status": {"observedGeneration": observed, "replicas": 2, "updatedReplicas": 2,
                        "readyReplicas": i % 4, "availableReplicas": i % 4,
                        "conditions": [{"type": "Available", "status": "True", "message": format!("Deployment has minimum availability: {i}")}]}}),
                1 => serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                    "status": {"phase": (["Pending", "Running", "Succeeded", "Failed"][i % 4]), "podIP": "10.244.0.5",
                        "conditions": [{"type": "Ready", "status": if i % 2 == 0 { "True" } else { "False" },
                            "message": "containers with unready status: [app] and a long tail so that emitters fold this message over several lines of text"}]}}),
                2 => serde_json::json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                    "spec": {"completions": 1}, "status": {"succeeded": i % 2, "active": 1 - i % 2}}),
                3 => serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                    "data": {"config.yaml": "key: value\nother: 1\n", "flag": "true", "n": "007"}}),
                4 => serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
                    "spec": {"replicas": 3, "updateStrategy": {"type": "RollingUpdate"}},
                    "status": {"observedGeneration": observed, "replicas": 3, "readyReplicas": i % 4, "currentReplicas": 3,
                        "updatedReplicas": 3, "currentRevision": "r1", "updateRevision": if i % 5 == 0 { "r2" } else { "r1" }}}),
                _ => serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta,
                    "status": {"observedGeneration": observed, "conditions": [{"type": (if i % 4 == 1 { "Stalled" } else { "Ready" }),
                        "status": (if i % 4 == 1 { "True" } else { ["True", "False", "Unknown"][i % 3] }), "reason": "Checked", "message": "it's \"fine\" # really"}]}}),
            }
        })
        .collect()
}

fn status_json(file: &std::path::Path) -> Output {
    let path = file.to_str().unwrap();
    strata(
        &[
            "status",
            "-f",
            path,
            "-o",
            "json",
            "--now",
            "2026-01-01T00:00:05Z",
        ],
        "",
    )
}

#[track_caller]
fn stdout_of(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn a_cluster_dump_reads_the_same_as_json_list_yaml_list_documents_and_array() {
    let objects = cluster_dump();
    let dir = tempfile_dir("dump");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": objects});
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let json_list = write("list.json", serde_json::to_string_pretty(&list).unwrap());
    let yaml_list = write("list.yaml", serde_saphyr::to_string(&list).unwrap());
    let documents: Vec<String> = objects
        .iter()
        .map(|o| serde_saphyr::to_string(o).unwrap())
        .collect();
    let yaml_documents = write(
        "documents.yaml",
        format!("---\n{}", documents.join("---\n")),
    );
    let array = write("array.json", serde_json::to_string(&objects).unwrap());
    // Far beyond the YAML parser's default budget (250,000 nodes), which used to refuse it.
    assert!(std::fs::metadata(&yaml_list).unwrap().len() > 3_000_000);

    let want = stdout_of(&status_json(&json_list));
    let statuses: Vec<serde_json::Value> = serde_json::from_str(&want).unwrap();
    assert_eq!(statuses.len(), 12_000);
    let distinct: std::collections::BTreeSet<&str> = statuses
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert!(distinct.len() >= 3, "a varied corpus: {distinct:?}");
    for path in [&yaml_list, &yaml_documents, &array] {
        assert_eq!(stdout_of(&status_json(path)), want, "{}", path.display());
    }
    // `-f` several times: the inputs one after the other.
    let both = strata(
        &[
            "status",
            "-f",
            array.to_str().unwrap(),
            "-f",
            yaml_list.to_str().unwrap(),
            "-o",
            "json",
            "--now",
            "2026-01-01T00:00:05Z",
        ],
        "",
    );
    let both: Vec<serde_json::Value> = serde_json::from_str(&stdout_of(&both)).unwrap();
    assert_eq!(both.len(), 24_000);
    assert_eq!(both[..12_000], both[12_000..]);

    // `--strict` judges from the compact form what it can, with each object's text kept for
    // the rest: the same verdicts from every format, and the same as decoding every object in
    // full, which one irregular object (a string generation) forces on a whole input.
    let strict = |path: &std::path::Path| {
        let out = strata(
            &[
                "status",
                "-f",
                path.to_str().unwrap(),
                "-o",
                "json",
                "--now",
                "2026-01-01T00:00:05Z",
                "--strict",
            ],
            "",
        );
        serde_json::from_str::<Vec<serde_json::Value>>(&stdout_of(&out)).unwrap()
    };
    let strict_want = strict(&json_list);
    assert_ne!(
        strict_want, statuses,
        "the strict policy changes some verdicts"
    );
    for path in [&yaml_list, &yaml_documents, &array] {
        assert_eq!(strict(path), strict_want, "{}", path.display());
    }
    let mut irregular = objects.clone();
    irregular.push(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "odd", "generation": "x"}}));
    let full = strict(&write(
        "irregular.json",
        serde_json::to_string(&irregular).unwrap(),
    ));
    assert_eq!(full.len(), 12_001);
    assert_eq!(full[..12_000], strict_want[..]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_alias_bomb_is_refused_with_bounded_memory() {
    let mut bomb = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for level in 1..9 {
        let refs = vec![format!("*l{}", level - 1); 10].join(", ");
        bomb.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
    }
    // 10^9 strings if expanded; with address space capped at 1 GiB the command must still
    // answer with a clear error (an unbounded expansion would abort instead).
    let dir = tempfile_dir("bomb");
    let path = dir.join("bomb.yaml");
    std::fs::write(&path, &bomb).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 1048576 && exec '{}' status -f '{}'",
            env!("CARGO_BIN_EXE_strata"),
            path.display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "strata: {}: document index 0: invalid YAML",
            path.display()
        )),
        "{stderr}"
    );
    assert!(stderr.to_lowercase().contains("alias"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-status-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn namespace_flags_need_live_objects() {
    for flag in [["-n", "ns"].as_slice(), ["-A"].as_slice()] {
        let mut args = vec!["status", "-f", "-"];
        args.extend(flag);
        let out = strata(&args, "");
        assert_eq!(out.status.code(), Some(2), "{flag:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim(),
            "strata: -n/--namespace and -A/--all-namespaces choose live objects: use them with -k KIND"
        );
    }
}
