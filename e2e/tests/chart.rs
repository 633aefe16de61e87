//! The Helm chart without a cluster: `helm lint --strict`, what each toggle renders, the
//! schema refusing typos, and the generated files (values table, schema, plain manifests, the
//! chart's copies of the CRDs and dashboards) being current. `make manifests` rewrites them.

use std::process::Command;

use serde_json::Value;
use strata_e2e::chart::{self, SERVICES};

fn objects(rendered: &str) -> Vec<Value> {
    chart::documents(rendered)
        .into_iter()
        .map(|(source, doc)| {
            serde_saphyr::from_str(&doc).unwrap_or_else(|e| panic!("{source}: {e}\n{doc}"))
        })
        .collect()
}

fn kinds_named<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a str> {
    objects
        .iter()
        .filter(|o| o["kind"] == kind)
        .map(|o| o["metadata"]["name"].as_str().unwrap_or("<unnamed>"))
        .collect()
}

fn only(key: &str) -> Vec<String> {
    SERVICES
        .iter()
        .flat_map(|(k, _)| ["--set".to_string(), format!("{k}.enabled={}", *k == key)])
        .collect()
}

fn template(args: &[String]) -> Vec<Value> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match chart::template(&args) {
        Ok(rendered) => objects(&rendered),
        Err(e) => panic!("{e:#}"),
    }
}

fn all_toggles() -> String {
    chart::repo_root()
        .join("e2e/fixtures/chart/all-toggles.yaml")
        .display()
        .to_string()
}

#[test]
fn lint_is_clean_with_default_all_toggles_and_kraan_values() {
    let kraan = chart::chart_dir().join("values-kraan.yaml");
    for values in [None, Some(all_toggles()), Some(kraan.display().to_string())] {
        let mut cmd = Command::new(chart::helm());
        cmd.args(["lint", "--strict"]).arg(chart::chart_dir());
        if let Some(values) = &values {
            cmd.args(["-f", values]);
        }
        let out = cmd.output().expect("running helm");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "helm lint --strict with {values:?}:\n{text}"
        );
        assert!(
            !text.contains("[WARNING]") && !text.contains("[ERROR]"),
            "{values:?}:\n{text}"
        );
    }
}

#[test]
fn each_service_renders_alone_with_only_its_objects() {
    for (key, service) in SERVICES {
        let objs = template(&only(key));
        assert_eq!(kinds_named(&objs, "Deployment"), [service], "{key} alone");
        assert_eq!(
            kinds_named(&objs, "ServiceAccount"),
            [service],
            "{key} alone"
        );
        for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
            for name in kinds_named(&objs, kind) {
                assert!(name.contains(service), "{key} alone renders {kind} {name}");
            }
        }
        let webhooks = kinds_named(&objs, "ValidatingWebhookConfiguration").len()
            + kinds_named(&objs, "MutatingWebhookConfiguration").len();
        assert_eq!(
            webhooks > 0,
            service == "admission-webhook",
            "{key} alone: webhooks"
        );
        // CRDs come with every service unless disabled.
        assert_eq!(
            kinds_named(&objs, "CustomResourceDefinition").len(),
            3,
            "{key} alone"
        );
    }
    let none = template(
        &SERVICES
            .iter()
            .flat_map(|(k, _)| ["--set".to_string(), format!("{k}.enabled=false")])
            .chain(["--set".to_string(), "crds.enabled=false".to_string()])
            .collect::<Vec<_>>(),
    );
    assert!(none.is_empty(), "everything disabled renders {none:?}");
}

#[test]
fn every_pod_is_locked_down_and_every_deployment_runs_its_binary() {
    let objs = template(&["-f".into(), all_toggles()]);
    let deployments: Vec<&Value> = objs.iter().filter(|o| o["kind"] == "Deployment").collect();
    assert_eq!(deployments.len(), 4);
    for d in deployments {
        let name = d["metadata"]["name"].as_str().unwrap();
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{name}"
        );
        let c = &pod["containers"][0];
        assert_eq!(c["command"][0], format!("/{name}"), "{name}");
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(sc["capabilities"]["drop"][0], "ALL", "{name}");
        // all-toggles.yaml: digest wins over tag, registry prefixed, proxy env, pull secrets.
        let image = c["image"].as_str().unwrap();
        assert!(
            image.starts_with("registry.example.com/") && image.contains("@sha256:"),
            "{name}: {image}"
        );
        let env: Vec<&str> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert!(
            env.contains(&"HTTPS_PROXY") && env.contains(&"NO_PROXY"),
            "{name}: {env:?}"
        );
        assert_eq!(pod["imagePullSecrets"][0]["name"], "regcred", "{name}");
        let (policy, secrets) = if name == "rollout-operator" {
            ("Never", 2)
        } else {
            ("Always", 1)
        };
        assert_eq!(c["imagePullPolicy"], policy, "{name}");
        assert_eq!(
            pod["imagePullSecrets"].as_array().map(Vec::len),
            Some(secrets),
            "{name}"
        );
        assert_eq!(
            pod["priorityClassName"], "system-cluster-critical",
            "{name}"
        );
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.contains(&"--log-format=text"), "{name}: {args:?}");
        assert!(args.contains(&"--client-qps=20"), "{name}: {args:?}");
    }
    for kind in ["ServiceMonitor", "PodDisruptionBudget", "NetworkPolicy"] {
        assert_eq!(kinds_named(&objs, kind).len(), 4, "{kind}");
    }
    assert_eq!(kinds_named(&objs, "PrometheusRule"), ["strata"]);
    let dashboards = std::fs::read_dir(chart::chart_dir().join("files/dashboards"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".json")
        })
        .count();
    let maps = kinds_named(&objs, "ConfigMap");
    assert_eq!(maps.len(), dashboards, "{maps:?}");
    assert!(
        maps.contains(&"strata-drift-observer-dashboard"),
        "{maps:?}"
    );
}

#[test]
fn webhooks_guard_only_opted_in_namespaces_with_the_chosen_failure_policy() {
    let objs = template(&[
        "--set".into(),
        "admissionWebhook.webhooks.podEviction.failurePolicy=Ignore".into(),
        "--set".into(),
        "admissionWebhook.webhooks.zpdbValidation.enabled=false".into(),
    ]);
    let configs: Vec<&Value> = objs
        .iter()
        .filter(|o| {
            o["kind"]
                .as_str()
                .unwrap()
                .ends_with("WebhookConfiguration")
        })
        .collect();
    let names: Vec<&str> = configs
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(!names.contains(&"zpdb-validation-strata-system"));
    for c in &configs {
        let name = c["metadata"]["name"].as_str().unwrap();
        let hook = &c["webhooks"][0];
        let selector = &hook["namespaceSelector"];
        assert_eq!(
            selector["matchLabels"]["strata.dev/admission-webhook"], "enabled",
            "{name}"
        );
        let exclusion = &selector["matchExpressions"][0];
        assert_eq!(exclusion["operator"], "NotIn", "{name}");
        assert_eq!(
            exclusion["values"],
            serde_json::json!(["kube-system", "strata-system"]),
            "{name}"
        );
        let policy = if name.starts_with("pod-eviction") {
            "Ignore"
        } else {
            "Fail"
        };
        assert_eq!(hook["failurePolicy"], policy, "{name}");
        assert_eq!(
            c["metadata"]["labels"]["grafana.com/inject-rollout-operator-ca"],
            "true"
        );
    }
    // CA injection may patch exactly these configurations, nothing else.
    let role = objs
        .iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "strata-admission-webhook")
        .unwrap();
    let patchable: Vec<&str> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["verbs"].as_array().unwrap().iter().any(|v| v == "patch")
                && r["resources"][0] == "validatingwebhookconfigurations"
        })
        .flat_map(|r| {
            r["resourceNames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
        })
        .collect();
    let mut expected = names.clone();
    expected.sort();
    let mut patchable = patchable;
    patchable.sort();
    assert_eq!(patchable, expected);
    // Zone-tracker ConfigMap access only in that mode.
    assert!(!serde_json::to_string(role).unwrap().contains("configmaps"));
}

/// The admission-webhook's writes follow its mode: the StatefulSet annotation patch only for
/// prepare-downscale outside zone-tracker mode; in zone-tracker mode the named ConfigMap only.
#[test]
fn the_webhook_may_write_only_what_its_mode_records() {
    let rules = |set: &[&str]| -> Vec<Value> {
        let args: Vec<String> = set
            .iter()
            .flat_map(|s| ["--set".to_string(), s.to_string()])
            .collect();
        let objs = template(&args);
        let role = objs
            .iter()
            .find(|o| {
                o["kind"] == "ClusterRole" && o["metadata"]["name"] == "strata-admission-webhook"
            })
            .unwrap();
        role["rules"].as_array().unwrap().clone()
    };
    let verbs_on = |rules: &[Value], resource: &str| -> Vec<(String, Option<Value>)> {
        rules
            .iter()
            .filter(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == resource)
            })
            .flat_map(|r| {
                r["verbs"].as_array().unwrap().iter().map(|v| {
                    (
                        v.as_str().unwrap().to_string(),
                        r.get("resourceNames").cloned(),
                    )
                })
            })
            .collect()
    };
    let patches = |rules: &[Value]| {
        verbs_on(rules, "statefulsets")
            .iter()
            .any(|(v, _)| v == "patch")
    };
    assert!(
        patches(&rules(&[])),
        "prepare-downscale records on the StatefulSet"
    );
    assert!(!patches(&rules(&[
        "admissionWebhook.webhooks.prepareDownscale.enabled=false"
    ])));
    let zone = rules(&[
        "admissionWebhook.useZoneTracker=true",
        "admissionWebhook.zoneTrackerConfigMapName=zones",
    ]);
    assert!(
        !patches(&zone),
        "zone-tracker mode records in the ConfigMap instead"
    );
    let mut config_maps = verbs_on(&zone, "configmaps");
    config_maps.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        config_maps,
        vec![
            ("create".to_string(), None),
            ("get".to_string(), Some(serde_json::json!(["zones"]))),
            ("update".to_string(), Some(serde_json::json!(["zones"]))),
        ]
    );
    let objs = template(&[
        "--set".into(),
        "admissionWebhook.useZoneTracker=true".into(),
        "--set".into(),
        "admissionWebhook.zoneTrackerConfigMapName=zones".into(),
    ]);
    let deployment = objs
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "admission-webhook")
        .unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--zone-tracker-config-map-name=zones"),
        "{args}"
    );
}

#[test]
fn crds_are_kept_on_uninstall_unless_told_otherwise() {
    let kept = template(&[]);
    for crd in kept
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
    {
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
    }
    let not_kept = template(&["--set".into(), "crds.keep=false".into()]);
    let crds: Vec<&Value> = not_kept
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .collect();
    assert_eq!(crds.len(), 3);
    assert!(
        crds.iter()
            .all(|c| c["metadata"]["annotations"]["helm.sh/resource-policy"].is_null())
    );
}

#[test]
fn the_schema_refuses_misspelt_keys_and_bad_values() {
    for (set, needle) in [
        ("layerController.replicass=2", "replicass"),
        ("global.logFormat=xml", "logFormat"),
        (
            "admissionWebhook.webhooks.noDownscale.failurePolicy=Maybe",
            "failurePolicy",
        ),
        ("rolloutOperator.ports.admin=70000", "admin"),
        ("crds.enabled=yes", "enabled"),
        ("layerController.clientQPS=abc", "clientQPS"),
    ] {
        let err = chart::template(&["--set", set]).expect_err(set).to_string();
        assert!(
            err.contains(needle) && err.contains("schema"),
            "{set}: {err}"
        );
    }
}

/// Compares (or with STRATA_UPDATE_MANIFESTS=1 rewrites) every generated file.
#[test]
fn generated_files_are_current() {
    let mut stale = Vec::new();
    let root = chart::repo_root();
    let values = std::fs::read_to_string(chart::chart_dir().join("values.yaml")).unwrap();
    let schema = chart::values_schema(&values).unwrap();
    let schema_path = chart::chart_dir().join("values.schema.json");
    if chart::check_or_update(&schema_path, &schema).unwrap() {
        stale.push(schema_path);
    }
    let readme_path = chart::chart_dir().join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let table = chart::values_table(&chart::value_docs(&values).unwrap());
    if chart::check_or_update(
        &readme_path,
        &chart::readme_with_table(&readme, &table).unwrap(),
    )
    .unwrap()
    {
        stale.push(readme_path);
    }
    for (source, copy) in chart::chart_copies().unwrap() {
        if chart::check_or_update(&copy, &std::fs::read_to_string(&source).unwrap()).unwrap() {
            stale.push(copy);
        }
    }
    let manifests = chart::plain_manifests().unwrap();
    for (path, content) in &manifests {
        let path = root.join("manifests").join(path);
        if chart::check_or_update(&path, content).unwrap() {
            stale.push(path);
        }
    }
    // No file left over from an older layout.
    for (_, service) in SERVICES {
        for entry in std::fs::read_dir(root.join("manifests").join(service)).unwrap() {
            let name = format!("{service}/{}", entry.unwrap().file_name().to_string_lossy());
            assert!(
                manifests.iter().any(|(p, _)| *p == name),
                "manifests/{name} is not generated"
            );
        }
    }
    assert!(
        stale.is_empty() || std::env::var_os("STRATA_UPDATE_MANIFESTS").is_some(),
        "stale (run `make manifests`): {stale:?}"
    );
}

#[test]
fn values_table_documents_every_service_toggle() {
    let values = std::fs::read_to_string(chart::chart_dir().join("values.yaml")).unwrap();
    let docs = chart::value_docs(&values).unwrap();
    for (key, _) in SERVICES {
        let toggle = docs
            .iter()
            .find(|d| d.key == format!("{key}.enabled"))
            .unwrap();
        assert_eq!((toggle.kind, toggle.default.as_str()), ("bool", "true"));
    }
    assert!(docs.len() > 100, "{} documented values", docs.len());
}

/// `admissionWebhook.tls.mode`: the self-managed certificate (default), a cert-manager
/// Certificate with the CA injector's annotation, or a Secret of the user's; in the last two
/// the Secret is mounted and the server neither writes Secrets nor patches configurations.
#[test]
fn the_serving_certificate_comes_from_the_chosen_mode() {
    let render = |sets: &[&str]| -> Vec<Value> {
        let args: Vec<String> = sets
            .iter()
            .flat_map(|s| ["--set".to_string(), s.to_string()])
            .collect();
        template(&args)
    };
    let webhook = |objs: &[Value]| -> Value {
        objs.iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "admission-webhook")
            .unwrap()
            .clone()
    };
    let args = |objs: &[Value]| -> Vec<String> {
        webhook(objs)["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    let configs = |objs: &[Value]| -> Vec<Value> {
        objs.iter()
            .filter(|o| {
                o["kind"]
                    .as_str()
                    .unwrap()
                    .ends_with("WebhookConfiguration")
            })
            .cloned()
            .collect()
    };
    let writes_secrets = |objs: &[Value]| {
        objs.iter().any(|o| {
            o["kind"] == "Role"
                && o["metadata"]["name"] == "admission-webhook"
                && o["rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["resources"][0] == "secrets")
        })
    };
    let patches_configs = |objs: &[Value]| {
        objs.iter().any(|o| {
            o["kind"] == "ClusterRole"
                && o["rules"].as_array().unwrap().iter().any(|r| {
                    r["resources"][0] == "validatingwebhookconfigurations"
                        && r["verbs"].as_array().unwrap().iter().any(|v| v == "patch")
                })
        })
    };

    let own = render(&[]);
    assert!(args(&own).contains(&"--inject-ca-bundle=true".to_string()));
    assert!(!args(&own).iter().any(|a| a.starts_with("--tls-cert-file")));
    assert!(kinds_named(&own, "Certificate").is_empty());
    assert!(writes_secrets(&own) && patches_configs(&own));

    let managed = render(&[
        "admissionWebhook.tls.mode=certManager",
        "admissionWebhook.tls.extraNames={webhook.example.com,10.0.0.1}",
    ]);
    let flags = args(&managed);
    for flag in [
        "--tls-cert-file=/etc/strata/tls/tls.crt",
        "--tls-key-file=/etc/strata/tls/tls.key",
        "--inject-ca-bundle=false",
    ] {
        assert!(flags.contains(&flag.to_string()), "{flag}: {flags:?}");
    }
    let pod = &webhook(&managed)["spec"]["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "strata-admission-webhook-certificate"),
        "{pod}"
    );
    let certificate = managed
        .iter()
        .find(|o| o["kind"] == "Certificate")
        .expect("a Certificate");
    assert_eq!(
        certificate["spec"]["secretName"],
        "strata-admission-webhook-certificate"
    );
    let dns = certificate["spec"]["dnsNames"].as_array().unwrap();
    for name in [
        "admission-webhook.strata-system.svc",
        "admission-webhook.strata-system.svc.cluster.local",
        "webhook.example.com",
    ] {
        assert!(dns.iter().any(|d| d == name), "{name}: {dns:?}");
    }
    assert_eq!(
        certificate["spec"]["ipAddresses"],
        serde_json::json!(["10.0.0.1"])
    );
    assert_eq!(
        certificate["spec"]["issuerRef"]["name"],
        "admission-webhook-selfsigned"
    );
    assert_eq!(
        kinds_named(&managed, "Issuer"),
        ["admission-webhook-selfsigned"]
    );
    for config in configs(&managed) {
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "strata-system/admission-webhook",
            "{}",
            config["metadata"]["name"]
        );
    }
    assert!(!writes_secrets(&managed) && !patches_configs(&managed));

    let corporate = render(&[
        "admissionWebhook.tls.mode=certManager",
        "admissionWebhook.tls.certManager.issuerRef.name=corp-ca",
        "admissionWebhook.tls.certManager.issuerRef.kind=ClusterIssuer",
    ]);
    assert!(kinds_named(&corporate, "Issuer").is_empty());
    let certificate = corporate
        .iter()
        .find(|o| o["kind"] == "Certificate")
        .unwrap();
    assert_eq!(
        certificate["spec"]["issuerRef"],
        serde_json::json!({"name": "corp-ca", "kind": "ClusterIssuer"})
    );

    let theirs = render(&[
        "admissionWebhook.tls.mode=secret",
        "admissionWebhook.tls.secretName=my-webhook-tls",
        "admissionWebhook.webhooks.caBundle=Q0E=",
    ]);
    assert!(kinds_named(&theirs, "Certificate").is_empty());
    assert!(args(&theirs).contains(&"--tls-cert-file=/etc/strata/tls/tls.crt".to_string()));
    let pod = &webhook(&theirs)["spec"]["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "my-webhook-tls")
    );
    for config in configs(&theirs) {
        assert_eq!(config["webhooks"][0]["clientConfig"]["caBundle"], "Q0E=");
        assert!(config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_null());
    }
    assert!(!writes_secrets(&theirs) && !patches_configs(&theirs));

    let refused = chart::template(&["--set", "admissionWebhook.tls.mode=vault"]).unwrap_err();
    assert!(
        format!("{refused:#}").contains("/admissionWebhook/tls/mode"),
        "{refused:#}"
    );
}
