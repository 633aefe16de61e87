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
        cmd.args(["lint", "--strict", "--kube-version", &chart::kube_version()])
            .arg(chart::chart_dir());
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
        // The drift-observer's dry-run identity is an account of its own (nothing runs as it).
        let dry_run = format!("{service}-dry-run");
        let accounts: Vec<&str> = if service == "drift-observer" {
            vec![service, &dry_run]
        } else {
            vec![service]
        };
        assert_eq!(
            kinds_named(&objs, "ServiceAccount"),
            accounts,
            "{key} alone"
        );
        for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
            for name in kinds_named(&objs, kind) {
                // The CRDs' additions to `view`/`edit` come with the CRDs, not a service.
                let crds = kind == "ClusterRole" && name.starts_with("strata-aggregate-to-");
                assert!(
                    name.contains(service) || crds,
                    "{key} alone renders {kind} {name}"
                );
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
            env.contains(&"HTTPS_PROXY")
                && env.contains(&"HTTP_PROXY")
                && env.contains(&"NO_PROXY"),
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
    let rendered = |set: &[&str]| -> Vec<Value> {
        let args: Vec<String> = set
            .iter()
            .flat_map(|s| ["--set".to_string(), s.to_string()])
            .collect();
        template(&args)
    };
    let rules = |set: &[&str]| -> Vec<Value> {
        let objs = rendered(set);
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
    // Pod eviction records its evictions on the budget's holder StatefulSet too.
    assert!(patches(&rules(&[
        "admissionWebhook.webhooks.prepareDownscale.enabled=false"
    ])));
    assert!(!patches(&rules(&[
        "admissionWebhook.webhooks.prepareDownscale.enabled=false",
        "admissionWebhook.webhooks.podEviction.enabled=false",
    ])));
    let zone_set = [
        "admissionWebhook.useZoneTracker=true",
        "admissionWebhook.zoneTrackerConfigMapName=zones",
        "admissionWebhook.webhooks.podEviction.enabled=false",
    ];
    let zone = rules(&zone_set);
    assert!(
        !patches(&zone),
        "zone-tracker mode records in the ConfigMap instead"
    );
    // The trackers of every namespace live in the release namespace: no ConfigMap rights
    // cluster-wide, get/create/update in a Role there.
    assert!(verbs_on(&zone, "configmaps").is_empty(), "{zone:?}");
    let objs = rendered(&zone_set);
    let role = objs
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "admission-webhook")
        .unwrap();
    let mut config_maps = verbs_on(role["rules"].as_array().unwrap(), "configmaps");
    config_maps.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        config_maps,
        vec![
            ("create".to_string(), None),
            ("get".to_string(), None),
            ("update".to_string(), None),
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
        (
            "admissionWebhook.webhooks.timeoutSeconds=31",
            "timeoutSeconds",
        ),
        (
            "admissionWebhook.webhooks.timeoutSeconds=0",
            "timeoutSeconds",
        ),
        ("global.imageRegistry=x", "imageRegistry"),
        ("layerController.dnsPolicy=Cluster", "dnsPolicy"),
        (
            "admissionWebhook.webhooks.podEviction.scope=Everywhere",
            "scope",
        ),
        // `default` names the unlabelled layers; a shard names Deployments and Leases.
        ("sharding.shards={default}", "shards"),
        ("sharding.shards={Team_A}", "shards"),
        ("sharding.shards={a,a}", "shards"),
    ] {
        let err = chart::template(&["--set", set]).expect_err(set).to_string();
        assert!(
            err.contains(needle) && err.contains("schema"),
            "{set}: {err}"
        );
    }
}

/// The account a layer acts as is decided by the layer-controller's defaults, which three
/// services must share: a flag that would set them for one service only, through its
/// `extraArgs`, is refused naming the value and the key to use instead (#53 item 7).
#[test]
fn the_shared_layer_defaults_come_from_values_only() {
    for set in [
        "layerController.extraArgs={--default-service-account=tenant}",
        "layerController.extraArgs={--default-source-namespace,flux-system}",
        "driftObserver.extraArgs={--apply-as=system:serviceaccount:x:y}",
        "admissionWebhook.extraArgs={--layer-default-service-account=tenant}",
        "admissionWebhook.extraArgs={--layer-controller-service-account=a/b}",
        // Refused even when the layer-controller is not in this release.
        "layerController.enabled=false,driftObserver.extraArgs={--default-service-account=x}",
    ] {
        let err = chart::template(&["--set", set]).expect_err(set).to_string();
        let (key, _) = set.rsplit_once(".extraArgs").unwrap();
        let key = key.rsplit(',').next().unwrap();
        assert!(
            err.contains(&format!("{key}.extraArgs: \"--"))
                && err.contains("layerController.defaultServiceAccount"),
            "{set}: {err}"
        );
    }
    // Other flags pass through, and so do the values themselves.
    for set in [
        "layerController.extraArgs={--default-service-account-is-not-a-flag}",
        "layerController.defaultServiceAccount=tenant",
        "admissionWebhook.layerControllerServiceAccount=a/b",
    ] {
        chart::template(&["--set", set]).expect(set);
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

/// Renders `helm template RELEASE` in namespace `shared` with `--set` values.
fn release(name: &str, sets: &[&str]) -> Vec<Value> {
    let mut args: Vec<&str> = Vec::new();
    for set in sets {
        args.extend(["--set", set]);
    }
    let rendered =
        chart::render(&chart::helm(), name, "shared", &args).unwrap_or_else(|e| panic!("{e:#}"));
    objects(&rendered)
}

fn deployment<'a>(objs: &'a [Value], service: &str) -> &'a Value {
    strata_e2e::release::deployment_of(objs, service)
        .unwrap_or_else(|| panic!("no Deployment of {service}"))
}

fn container_args(objs: &[Value], service: &str) -> Vec<String> {
    deployment(objs, service)["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a.as_str().unwrap_or_default().to_string())
        .collect()
}

/// Every object's identity: kind, namespace (empty when cluster-scoped) and name.
fn identities(objs: &[Value]) -> Vec<(String, String, String)> {
    objs.iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_string(),
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// `nameOverride`/`fullnameOverride`: two releases in one namespace share no object, Lease,
/// certificate Secret or webhook, and every reference inside a release follows its names;
/// without an override, names stay what they were (an upgrade renames nothing).
#[test]
fn two_releases_in_one_namespace_share_no_name() {
    let everything = [
        "serviceMonitor.enabled=true",
        "podMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "dashboards.enabled=true",
    ];
    let mut a_sets = vec!["fullnameOverride=team-a"];
    a_sets.extend(everything);
    let mut b_sets = vec!["nameOverride=strata", "crds.enabled=false"];
    b_sets.extend(everything);
    let a = release("a", &a_sets);
    let b = release("b", &b_sets);
    let plain = release("strata", &[]);

    let ids_a = identities(&a);
    let ids_b = identities(&b);
    let shared: Vec<_> = ids_a
        .iter()
        .filter(|id| ids_b.contains(id) && id.0 != "CustomResourceDefinition")
        .collect();
    assert!(shared.is_empty(), "both releases render {shared:?}");
    for (objs, prefix) in [(&a, "team-a-"), (&b, "b-strata-")] {
        for (kind, namespace, name) in identities(objs) {
            if kind == "CustomResourceDefinition" {
                continue;
            }
            assert!(
                name.starts_with(prefix),
                "{kind} {namespace}/{name}: not {prefix}…"
            );
        }
        for (_, service) in SERVICES {
            let args = container_args(objs, service);
            let lease = format!("--lease-name={prefix}{service}-leader");
            assert!(args.contains(&lease), "{service}: {args:?}");
            let pod = &deployment(objs, service)["spec"]["template"]["spec"];
            assert_eq!(pod["serviceAccountName"], format!("{prefix}{service}"));
        }
        let webhook = container_args(objs, "admission-webhook");
        for flag in [
            format!("--service-name={prefix}admission-webhook"),
            format!("--tls-secret-name={prefix}admission-webhook-certificate"),
        ] {
            assert!(webhook.contains(&flag), "{flag}: {webhook:?}");
        }
        assert!(
            webhook
                .iter()
                .any(|f| f.starts_with("--inject-ca-selector=app.kubernetes.io/instance=")),
            "{webhook:?}"
        );
        for config in objs.iter().filter(|o| {
            o["kind"]
                .as_str()
                .unwrap()
                .ends_with("WebhookConfiguration")
        }) {
            assert_eq!(
                config["webhooks"][0]["clientConfig"]["service"]["name"],
                format!("{prefix}admission-webhook"),
            );
        }
        let observer = container_args(objs, "drift-observer");
        let apply_as =
            format!("--apply-as=system:serviceaccount:shared:{prefix}drift-observer-dry-run");
        assert!(observer.contains(&apply_as), "{observer:?}");
        // Every RBAC binding names a ServiceAccount of its own release.
        for binding in objs
            .iter()
            .filter(|o| o["kind"].as_str().unwrap().ends_with("RoleBinding"))
        {
            for subject in binding["subjects"].as_array().unwrap() {
                let sa = subject["name"].as_str().unwrap();
                assert!(
                    sa.starts_with(prefix),
                    "{}: {sa}",
                    binding["metadata"]["name"]
                );
            }
        }
    }
    // No override: the names of earlier versions, and no Lease flag (its default name).
    assert_eq!(
        deployment(&plain, "layer-controller")["metadata"]["name"],
        "layer-controller"
    );
    assert!(
        !container_args(&plain, "layer-controller")
            .iter()
            .any(|a| a.starts_with("--lease-name"))
    );
    let webhook = container_args(&plain, "admission-webhook");
    assert!(
        webhook.contains(&"--tls-secret-name=strata-admission-webhook-certificate".to_string())
    );
    assert!(
        !webhook
            .iter()
            .any(|a| a.starts_with("--inject-ca-selector"))
    );
}

/// The values users reach for in other charts, each reaching its object.
#[test]
fn values_users_reach_for_reach_the_objects() {
    let values = r#"
global: {image: {registry: registry.example.com/platform}}
serviceMonitor:
  enabled: true
  namespace: monitoring
  scrapeTimeout: 10s
  relabelings: [{targetLabel: cluster, replacement: prod}]
  metricRelabelings: [{sourceLabels: [__name__], regex: go_.*, action: drop}]
podMonitor: {enabled: true, interval: 15s}
extraObjects:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: extra-object, namespace: "{{ .Release.Namespace }}"}
  - |
    apiVersion: v1
    kind: Secret
    metadata: {name: extra-string, namespace: {{ .Release.Namespace }}}
layerController:
  image: {registry: mirror.example.com}
  podLabels: {team: platform, app.kubernetes.io/name: not-the-selector}
  podAnnotations: {example.com/pod: "yes"}
  annotations: {example.com/deployment: "yes"}
  extraEnvFrom: [{secretRef: {name: proxy-settings}}]
  extraVolumes: [{name: ca, configMap: {name: corporate-ca}}]
  extraVolumeMounts: [{name: ca, mountPath: /etc/corporate-ca, readOnly: true}]
  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
  minReadySeconds: 7
  revisionHistoryLimit: 2
  startupProbe: {httpGet: {path: /livez, port: admin}, failureThreshold: 30}
admissionWebhook:
  webhooks:
    excludeSystemNamespaces: false
    namespaceSelector: null
    objectSelector: {matchLabels: {guarded: "yes"}}
    timeoutSeconds: 30
    noDownscale: {scope: Namespaced, namespaceSelector: {matchLabels: {team: mimir}}}
"#;
    let path =
        std::env::temp_dir().join(format!("strata-chart-values-{}.yaml", std::process::id()));
    std::fs::write(&path, values).unwrap();
    let objs = template(&["-f".into(), path.display().to_string()]);
    std::fs::remove_file(&path).ok();

    let lc = deployment(&objs, "layer-controller");
    assert_eq!(
        lc["metadata"]["annotations"]["example.com/deployment"],
        "yes"
    );
    assert_eq!(lc["spec"]["minReadySeconds"], 7);
    assert_eq!(lc["spec"]["revisionHistoryLimit"], 2);
    let template_meta = &lc["spec"]["template"]["metadata"];
    assert_eq!(template_meta["labels"]["team"], "platform");
    assert_eq!(
        template_meta["labels"]["app.kubernetes.io/name"], "layer-controller",
        "the selector's label wins"
    );
    assert_eq!(template_meta["annotations"]["example.com/pod"], "yes");
    let pod = &lc["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(pod["volumes"][0]["configMap"]["name"], "corporate-ca");
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        "mirror.example.com/strata/layer-controller:0.1.0"
    );
    assert_eq!(c["envFrom"][0]["secretRef"]["name"], "proxy-settings");
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/etc/corporate-ca");
    assert_eq!(c["startupProbe"]["failureThreshold"], 30);
    // Defaults elsewhere: the global registry, no startup probe, spread by node and zone.
    let ro = deployment(&objs, "rollout-operator");
    let ro_pod = &ro["spec"]["template"]["spec"];
    assert_eq!(
        ro_pod["containers"][0]["image"],
        "registry.example.com/platform/strata/rollout-operator:0.1.0"
    );
    assert!(ro_pod["containers"][0].get("startupProbe").is_none());
    assert!(ro_pod.get("hostNetwork").is_none());
    let keys: Vec<&str> = ro_pod["topologySpreadConstraints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["topologyKey"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    );

    let monitors: Vec<&Value> = objs
        .iter()
        .filter(|o| o["kind"] == "ServiceMonitor")
        .collect();
    assert_eq!(monitors.len(), 4);
    for m in &monitors {
        assert_eq!(m["metadata"]["namespace"], "monitoring");
        assert_eq!(
            m["spec"]["namespaceSelector"]["matchNames"][0],
            "strata-system"
        );
        let endpoint = &m["spec"]["endpoints"][0];
        assert_eq!(endpoint["scrapeTimeout"], "10s");
        assert_eq!(endpoint["relabelings"][0]["targetLabel"], "cluster");
        assert_eq!(endpoint["metricRelabelings"][0]["action"], "drop");
    }
    let pod_monitors: Vec<&Value> = objs.iter().filter(|o| o["kind"] == "PodMonitor").collect();
    assert_eq!(pod_monitors.len(), 4);
    assert_eq!(
        pod_monitors[0]["spec"]["podMetricsEndpoints"][0]["interval"],
        "15s"
    );
    assert_eq!(pod_monitors[0]["metadata"]["namespace"], "strata-system");

    assert_eq!(kinds_named(&objs, "ConfigMap"), ["extra-object"]);
    let secret = objs.iter().find(|o| o["kind"] == "Secret").unwrap();
    assert_eq!(secret["metadata"]["namespace"], "strata-system", "tpl ran");

    for config in objs.iter().filter(|o| {
        o["kind"]
            .as_str()
            .unwrap()
            .ends_with("WebhookConfiguration")
    }) {
        let hook = &config["webhooks"][0];
        let name = config["metadata"]["name"].as_str().unwrap();
        assert_eq!(hook["timeoutSeconds"], 30);
        assert_eq!(
            hook["objectSelector"]["matchLabels"]["guarded"], "yes",
            "{name}"
        );
        assert!(
            hook["namespaceSelector"].get("matchExpressions").is_none(),
            "{name}: release namespace guarded too"
        );
        if name.starts_with("no-downscale") {
            assert_eq!(hook["namespaceSelector"]["matchLabels"]["team"], "mimir");
            assert_eq!(hook["rules"][0]["scope"], "Namespaced");
        } else {
            assert_eq!(hook["namespaceSelector"], serde_json::json!({}), "{name}");
            assert_eq!(hook["rules"][0]["scope"], "*", "{name}");
        }
    }
    // Default: the system namespaces stay out.
    let default = template(&[]);
    let config = default
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .unwrap();
    assert_eq!(
        config["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["kube-system", "strata-system"])
    );
}

/// `helm test` checks each enabled service's `/readyz` through its Service, and the CRDs join
/// Kubernetes' `view` and `edit` roles.
#[test]
fn helm_test_pods_and_aggregated_roles() {
    let objs = template(&only("rolloutOperator"));
    let pods: Vec<&Value> = objs.iter().filter(|o| o["kind"] == "Pod").collect();
    assert_eq!(pods.len(), 1, "one enabled service, one test pod");
    assert_eq!(pods[0]["metadata"]["annotations"]["helm.sh/hook"], "test");
    let command: Vec<&str> = pods[0]["spec"]["containers"][0]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        command.last(),
        Some(&"http://rollout-operator.strata-system.svc:8080/readyz")
    );
    let all = template(&[]);
    assert_eq!(all.iter().filter(|o| o["kind"] == "Pod").count(), 4);

    let role = |name: &str| {
        all.iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name}"))
    };
    let view = role("strata-aggregate-to-view");
    assert_eq!(
        view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    let verbs = |r: &Value| {
        r["rules"][0]["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(verbs(view), ["get", "list", "watch"]);
    let edit = role("strata-aggregate-to-edit");
    assert_eq!(
        edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"],
        "true"
    );
    assert!(verbs(edit).contains(&"delete".to_string()));
    let resources: Vec<String> = edit["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
        })
        .collect();
    for kind in [
        "addonslayers",
        "zoneawarepoddisruptionbudgets",
        "replicatemplates",
        "addonslayers/status",
    ] {
        assert!(
            resources.contains(&kind.to_string()),
            "{kind}: {resources:?}"
        );
    }
    // Status stays the controllers': read only, even for `edit`.
    let status_rule = edit["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"][0] == "addonslayers/status")
        .unwrap();
    assert_eq!(
        status_rule["verbs"],
        serde_json::json!(["get", "list", "watch"])
    );
    let off = template(&[
        "--set".into(),
        "tests.enabled=false".into(),
        "--set".into(),
        "rbac.aggregateToDefaultRoles=false".into(),
    ]);
    assert!(!off.iter().any(|o| {
        o["kind"] == "Pod"
            || o["metadata"]["name"]
                .as_str()
                .unwrap()
                .contains("aggregate")
    }));
}

/// Chart.yaml says which Kubernetes it needs and where it comes from (the workspace's own
/// `repository`).
#[test]
fn chart_metadata_names_its_kubernetes_and_sources() {
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart::chart_dir().join("Chart.yaml")).unwrap(),
    )
    .unwrap();
    let cargo = std::fs::read_to_string(chart::repo_root().join("Cargo.toml")).unwrap();
    let repository = cargo
        .lines()
        .find_map(|l| l.strip_prefix("repository = "))
        .unwrap()
        .trim_matches('"');
    assert_eq!(chart["home"], repository);
    assert_eq!(chart["sources"][0], repository);
    assert!(chart["kubeVersion"].as_str().unwrap().starts_with(">="));
    // helm's offline default (1.20) is refused: the chart uses APIs newer than it.
    let err = Command::new(chart::helm())
        .args(["template", "x"])
        .arg(chart::chart_dir())
        .args(["--kube-version", "1.20.0"])
        .output()
        .unwrap();
    assert!(!err.status.success());
    assert!(String::from_utf8_lossy(&err.stderr).contains("kubeVersion"));
}

/// The PrometheusRule keeps the alerts of the services the release deploys and every alert
/// that names no service: a disabled service's `Down` alert would fire for ever.
#[test]
fn alerts_follow_the_deployed_services() {
    let alerts = |sets: &[&str]| -> Vec<String> {
        let mut all = vec!["prometheusRule.enabled=true"];
        all.extend_from_slice(sets);
        let objs = release("strata", &all);
        let rule = objs
            .iter()
            .find(|o| o["kind"] == "PrometheusRule")
            .expect("a PrometheusRule");
        rule["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().iter())
            .map(|r| r["alert"].as_str().unwrap().to_string())
            .collect()
    };
    let source: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart::chart_dir().join("files/dashboards/alerts.yaml")).unwrap(),
    )
    .unwrap();
    let every: usize = source["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["rules"].as_array().unwrap().len())
        .sum();
    let full = alerts(&[]);
    assert_eq!(full.len(), every, "{full:?}");
    let without_drift = alerts(&["driftObserver.enabled=false"]);
    for gone in ["DriftObserverDown", "DriftObserverNoLeader"] {
        assert!(full.contains(&gone.to_string()), "{full:?}");
        assert!(
            !without_drift.contains(&gone.to_string()),
            "{without_drift:?}"
        );
    }
    for kept in [
        "LayerControllerDown",
        "AddonsLayerFailed",
        "AdmissionWebhookUnavailable",
    ] {
        assert!(
            without_drift.contains(&kept.to_string()),
            "{kept}: {without_drift:?}"
        );
    }
    // Each service brings exactly its own labelled alerts.
    let per_service = full.len() - without_drift.len();
    assert_eq!(
        full.iter()
            .filter(|a| a.starts_with("DriftObserver"))
            .count(),
        per_service,
        "{full:?}"
    );
}

/// #29 item 4: `sharding.shards` adds one layer-controller and one drift-observer Deployment
/// per shard, each with its own Lease and the shard's selector; the main ones keep the layers
/// without the label; the Services, ServiceAccounts and monitors stay one per service.
#[test]
fn shards_deploy_one_controller_and_observer_each_with_matching_selectors() {
    let key = "sharding.fluxcd.io/key";
    let plain = release("r", &[]);
    let objs = release(
        "r",
        &[
            "sharding.shards={a,b}",
            "serviceMonitor.enabled=true",
            "networkPolicy.enabled=true",
        ],
    );
    let args_of = |d: &Value| -> Vec<String> {
        d["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a.as_str().unwrap_or_default().to_string())
            .collect()
    };
    for service in ["layer-controller", "drift-observer"] {
        let deployments: Vec<&Value> = objs
            .iter()
            .filter(|o| {
                o["kind"] == "Deployment"
                    && o["metadata"]["labels"]["app.kubernetes.io/name"] == service
            })
            .collect();
        let names: Vec<&str> = deployments
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            vec![
                service.to_string(),
                format!("{service}-a"),
                format!("{service}-b")
            ],
            "{service}"
        );
        let main_args = container_args(&objs, service);
        assert!(
            main_args.contains(&format!("--layer-selector=!{key}")),
            "{service}: {main_args:?}"
        );
        assert!(
            !container_args(&plain, service)
                .iter()
                .any(|a| a.starts_with("--layer-selector")),
            "{service}: no shards, no selector"
        );
        for shard in ["a", "b"] {
            let d = deployments
                .iter()
                .find(|d| d["metadata"]["labels"]["strata.dev/shard"] == shard)
                .unwrap_or_else(|| panic!("{service}: shard {shard}"));
            let args = args_of(d);
            assert!(
                args.contains(&format!("--layer-selector={key}={shard}")),
                "{service}/{shard}: {args:?}"
            );
            assert!(
                args.contains(&format!("--lease-name={service}-{shard}-leader")),
                "{service}/{shard}: {args:?}"
            );
            assert_eq!(
                args.contains(&format!("--shard-key={key}")),
                service == "layer-controller",
                "{service}/{shard}: {args:?}"
            );
            // Its own selector (the main Deployment's selects its pods too, through the
            // labels the Service and monitors use), same ServiceAccount as the main one.
            assert_eq!(
                d["spec"]["selector"]["matchLabels"]["strata.dev/shard"],
                shard
            );
            assert_eq!(
                d["spec"]["template"]["metadata"]["labels"]["strata.dev/shard"],
                shard
            );
            assert_eq!(
                d["spec"]["template"]["spec"]["serviceAccountName"],
                deployment(&objs, service)["spec"]["template"]["spec"]["serviceAccountName"]
            );
        }
    }
    // Only Deployments (and their PodDisruptionBudgets) multiply.
    for kind in [
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
        "NetworkPolicy",
        "ClusterRole",
        "Role",
    ] {
        assert_eq!(
            kinds_named(&objs, kind).len(),
            kinds_named(
                &release(
                    "r",
                    &["serviceMonitor.enabled=true", "networkPolicy.enabled=true"]
                ),
                kind
            )
            .len(),
            "{kind}"
        );
    }
    assert!(kinds_named(&objs, "PodDisruptionBudget").contains(&"layer-controller-a"));
}

/// `rolloutOperator.watchNamespaces` (#55 item 2): the operator is given every namespace, gets
/// a Role and RoleBinding in each and no ClusterRole that reaches pods, and the
/// admission-webhook's rollout webhooks select exactly those namespaces, in their
/// configurations and in the server's own check.
#[test]
fn a_list_of_rollout_namespaces_gets_a_role_in_each_and_the_webhooks_follow_it() {
    let objs = template(&[
        "--set".into(),
        "rolloutOperator.watchNamespaces={mimir,loki,mimir}".into(),
    ]);
    let args = container_args(&objs, "rollout-operator");
    assert!(
        args.contains(&"--watch-namespace=mimir,loki".to_string()),
        "{args:?}"
    );
    for ns in ["mimir", "loki"] {
        for kind in ["Role", "RoleBinding"] {
            assert!(
                objs.iter().any(|o| o["kind"] == kind
                    && o["metadata"]["namespace"] == ns
                    && o["metadata"]["name"] == "rollout-operator"),
                "no {kind} of the rollout-operator in {ns}"
            );
        }
    }
    no_pod_deletion_cluster_wide(&objs);
    let server = container_args(&objs, "admission-webhook");
    for webhook in [
        "no-downscale",
        "prepare-downscale",
        "pod-eviction",
        "zpdb-validation",
    ] {
        let flag = server
            .iter()
            .find(|a| a.starts_with(&format!("--namespace-selector={webhook}=")))
            .unwrap_or_else(|| panic!("no selector for {webhook}: {server:?}"));
        assert!(
            flag.ends_with("kubernetes.io/metadata.name in (mimir,loki)"),
            "{flag}"
        );
    }
    let configs = objs.iter().filter(|o| {
        o["kind"]
            .as_str()
            .unwrap_or_default()
            .ends_with("WebhookConfiguration")
            && o["metadata"]["name"] != "addonslayer-validation-strata-system"
    });
    for config in configs {
        let expressions = &config["webhooks"][0]["namespaceSelector"]["matchExpressions"];
        assert!(
            expressions
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["key"] == "kubernetes.io/metadata.name"
                    && e["operator"] == "In"
                    && e["values"] == serde_json::json!(["mimir", "loki"])),
            "{}: {expressions}",
            config["metadata"]["name"]
        );
    }
}

/// No ClusterRole bound to the rollout-operator cluster-wide lets it delete pods.
fn no_pod_deletion_cluster_wide(objs: &[Value]) {
    let deletes_pods = |rules: &Value| {
        rules.as_array().into_iter().flatten().any(|r| {
            let has = |key: &str, want: &str| {
                r[key]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|v| v == want || v == "*")
            };
            has("resources", "pods") && has("verbs", "delete")
        })
    };
    let rollout_bindings: Vec<&str> = objs
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding")
        .filter(|o| {
            o["subjects"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["name"] == "rollout-operator")
        })
        .filter_map(|o| o["roleRef"]["name"].as_str())
        .collect();
    for role in objs.iter().filter(|o| o["kind"] == "ClusterRole") {
        let name = role["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            !(rollout_bindings.contains(&name) && deletes_pods(&role["rules"])),
            "ClusterRole {name} lets the rollout-operator delete pods cluster-wide"
        );
    }
}

/// Namespaces chosen by label: the operator's flag is the selector's text, it reads
/// cluster-wide, writes only where a RoleBinding of the namespace role says (each listed
/// namespace), and the rollout webhooks select the same labels.
#[test]
fn a_namespace_selector_reads_cluster_wide_writes_where_bound_and_the_webhooks_follow_it() {
    let objs = template(&[
        "--set".into(),
        "rolloutOperator.watchNamespaceSelector.matchLabels.team=obs".into(),
        "--set".into(),
        "rolloutOperator.watchNamespaceSelector.matchExpressions[0].key=tier".into(),
        "--set".into(),
        "rolloutOperator.watchNamespaceSelector.matchExpressions[0].operator=NotIn".into(),
        "--set".into(),
        "rolloutOperator.watchNamespaceSelector.matchExpressions[0].values={dev}".into(),
        "--set".into(),
        "rolloutOperator.watchNamespaces={mimir}".into(),
    ]);
    let args = container_args(&objs, "rollout-operator");
    assert!(
        args.contains(&"--watch-namespace-selector=team=obs,tier notin (dev)".to_string()),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--watch-namespace=")),
        "{args:?}"
    );
    no_pod_deletion_cluster_wide(&objs);
    assert!(
        objs.iter().any(|o| o["kind"] == "ClusterRoleBinding"
            && o["roleRef"]["name"] == "strata-rollout-operator-reader"),
        "the reader role is not bound"
    );
    let binding = objs
        .iter()
        .find(|o| o["kind"] == "RoleBinding" && o["metadata"]["namespace"] == "mimir")
        .expect("a RoleBinding in mimir");
    assert_eq!(
        binding["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "strata-rollout-operator-namespace"})
    );
    assert!(
        !objs
            .iter()
            .any(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == "mimir"),
        "a Role besides the namespace role"
    );
    let server = container_args(&objs, "admission-webhook");
    let flag = server
        .iter()
        .find(|a| a.starts_with("--namespace-selector=pod-eviction="))
        .unwrap_or_else(|| panic!("no selector for pod-eviction: {server:?}"));
    assert!(flag.ends_with("team in (obs),tier notin (dev)"), "{flag}");
    let config = objs
        .iter()
        .find(|o| {
            o["kind"] == "ValidatingWebhookConfiguration"
                && o["metadata"]["name"] == "pod-eviction-strata-system"
        })
        .expect("the pod-eviction configuration");
    let expressions = &config["webhooks"][0]["namespaceSelector"]["matchExpressions"];
    for want in [
        serde_json::json!({"key": "team", "operator": "In", "values": ["obs"]}),
        serde_json::json!({"key": "tier", "operator": "NotIn", "values": ["dev"]}),
    ] {
        assert!(
            expressions
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| *e == want),
            "{want} missing: {expressions}"
        );
    }
}
