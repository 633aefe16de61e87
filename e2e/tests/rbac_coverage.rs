//! Every verb the chart grants a service is one some test made it use. The e2e tests run each
//! service as the ServiceAccount the chart creates for it, and the local plane's audit log
//! records every request of a ServiceAccount (user, verb, resource, who it impersonated). Run
//! after the whole suite, on the same plane (`make e2e` does), this test matches each rule of
//! each Role and ClusterRole the chart binds to a service against that log, and fails naming
//! every verb no test exercised: such a verb is removed from the chart or gets a test.
//!
//! With `STRATA_UPDATE_DOCS=1` it also writes the table of docs/security.md (which test
//! exercised each verb, by the prefix of the test namespace the service ran in).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result, ensure};
use serde_json::Value;
use strata_e2e::release::Rendered;
use strata_e2e::support::cluster;

/// One use of a right: (apiGroup, resource[/subresource], verb).
type Right = (String, String, String);

/// The release namespace the chart is rendered for here.
const RENDERED_NAMESPACE: &str = "strata-system";

/// Who used a right and on what: (test prefix, the object's name if the request named one).
/// The ServiceAccount the drift-observer's dry runs are made as (`<name>-dry-run`).
const DRY_RUN_IDENTITY: &str = "drift-observer-dry-run";

/// A rule with `resourceNames` is used only by requests naming one of them.
type Use = (String, Option<String>);

/// The services' allowed uses of rights from the audit log: service → right → uses. Only
/// requests the API server authorized count: a 401 or 403 is a right the service lacked.
fn uses(log: &str) -> Result<BTreeMap<String, BTreeMap<Right, BTreeSet<Use>>>> {
    let mut uses: BTreeMap<String, BTreeMap<Right, BTreeSet<Use>>> = BTreeMap::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let event: Value = serde_json::from_str(line).context("an audit line")?;
        let user = event["user"]["username"].as_str().unwrap_or_default();
        let Some(rest) = user.strip_prefix("system:serviceaccount:") else {
            continue;
        };
        let Some((namespace, account)) = rest.split_once(':') else {
            continue;
        };
        if !strata_e2e::services::SERVICES.contains(&account) {
            continue;
        }
        // `e2e-<prefix>-<random>` names the test; the anchor's own install (dropin) runs
        // under the anchor's RBAC, not the chart's.
        let test = namespace
            .strip_prefix("e2e-")
            .and_then(|n| n.rsplit_once('-'))
            .map(|(prefix, _)| prefix.to_string())
            .unwrap_or_else(|| namespace.to_string());
        if test == "dropin" {
            continue;
        }
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        let allowed = code != 401 && code != 403;
        let mut service = uses.entry(account.to_string()).or_default();
        if let Some(as_user) = event.get("impersonatedUser").filter(|u| u.is_object()) {
            // kube-apiserver records the impersonated user only once the impersonation itself
            // was authorized (as the service), whatever then happened to the request; the
            // account impersonated is the name a `resourceNames` rule lists.
            let name = as_user["username"]
                .as_str()
                .and_then(|u| u.strip_prefix("system:serviceaccount:"))
                .and_then(|u| u.split_once(':'))
                .map(|(_, name)| name.to_string());
            service
                .entry(("".into(), "serviceaccounts".into(), "impersonate".into()))
                .or_default()
                .insert((test.clone(), name.clone()));
            // The observer's dry-run identity runs nowhere: its rights are used only through
            // the observer's impersonation, and counted for it (requests as a layer's own
            // account use that account's rights, not the chart's).
            if name.as_deref() != Some(DRY_RUN_IDENTITY) {
                continue;
            }
            service = uses.entry(DRY_RUN_IDENTITY.to_string()).or_default();
        }
        if !allowed {
            continue;
        }
        let object = &event["objectRef"];
        let Some(resource) = object["resource"].as_str() else {
            continue; // a non-resource URL (discovery, /version)
        };
        let resource = match object["subresource"].as_str() {
            Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
            _ => resource.to_string(),
        };
        let group = object["apiGroup"].as_str().unwrap_or_default().to_string();
        let verb = event["verb"].as_str().unwrap_or_default().to_string();
        // Names the chart derives from the release namespace (`<name>-<namespace>`, the
        // webhook configurations) are compared as rendered below, for `strata-system`.
        let name = object["name"].as_str().filter(|n| !n.is_empty()).map(|n| {
            match n.strip_suffix(&format!("-{namespace}")) {
                Some(base) => format!("{base}-{RENDERED_NAMESPACE}"),
                None => n.to_string(),
            }
        });
        // A server-side apply that creates the object is a `patch` the API server also
        // authorized as `create` (answered 201).
        if verb == "patch" && code == 201 {
            service
                .entry((group.clone(), resource.clone(), "create".into()))
                .or_default()
                .insert((test.clone(), name.clone()));
        }
        service
            .entry((group, resource, verb))
            .or_default()
            .insert((test, name));
    }
    Ok(uses)
}

/// The rules the chart binds to each service's ServiceAccount: service → (role, rules).
fn granted(rendered: &Rendered) -> BTreeMap<String, Vec<(String, Value)>> {
    let roles: BTreeMap<(String, String), &Value> = rendered
        .of_kinds(&["Role", "ClusterRole"])
        .into_iter()
        .map(|r| {
            (
                (
                    r["kind"].as_str().unwrap_or_default().to_string(),
                    r["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
                r,
            )
        })
        .collect();
    let mut granted: BTreeMap<String, Vec<(String, Value)>> = BTreeMap::new();
    for binding in rendered.of_kinds(&["RoleBinding", "ClusterRoleBinding"]) {
        let role_ref = &binding["roleRef"];
        let key = (
            role_ref["kind"].as_str().unwrap_or_default().to_string(),
            role_ref["name"].as_str().unwrap_or_default().to_string(),
        );
        let Some(role) = roles.get(&key) else {
            continue;
        };
        for subject in binding["subjects"].as_array().into_iter().flatten() {
            let account = subject["name"].as_str().unwrap_or_default().to_string();
            let label = format!("{} {}", key.0, key.1);
            for rule in role["rules"].as_array().into_iter().flatten() {
                granted
                    .entry(account.clone())
                    .or_default()
                    .push((label.clone(), rule.clone()));
            }
        }
    }
    granted
}

/// The tests whose requests used the rule (`group`, `resource`, `verb`, `names`): same group,
/// resource and verb (`*` matching any), and, when the rule lists `resourceNames`, naming one.
fn tests_using(
    used: &BTreeMap<Right, BTreeSet<Use>>,
    group: &str,
    resource: &str,
    verb: &str,
    names: &[String],
) -> BTreeSet<String> {
    used.iter()
        .filter(|((g, r, v), _)| {
            (group == "*" || g == group) && (resource == "*" || r == resource) && v == verb
        })
        .flat_map(|(_, uses)| uses.iter())
        .filter(|(_, name)| names.is_empty() || name.as_ref().is_some_and(|n| names.contains(n)))
        .map(|(test, _)| test.clone())
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "run by `make e2e` after the whole suite, on its plane (it reads the audit log)"]
fn every_verb_the_chart_grants_was_used_by_some_test() -> Result<()> {
    let log_path = cluster()
        .audit_log()
        .context("no audit log: this runs on the local plane after the e2e suite")?;
    let uses = uses(&std::fs::read_to_string(&log_path)?)?;
    let helm = strata_e2e::chart::helm();
    // The defaults, plus the choices that add rights: impersonation in a tenant namespace, the
    // zone-tracker mode of prepare-downscale.
    let variants = [
        vec!["layerController.impersonation[0].namespace=tenant".to_string()],
        vec!["admissionWebhook.useZoneTracker=true".to_string()],
    ];
    let mut table = BTreeMap::new();
    let mut unused = BTreeSet::new();
    for sets in &variants {
        let rendered = Rendered::template(&helm, "strata", RENDERED_NAMESPACE, sets)?;
        for (service, rules) in granted(&rendered) {
            let used = uses.get(&service).cloned().unwrap_or_default();
            for (role, rule) in rules {
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            let tests = tests_using(
                                &used,
                                &group,
                                &resource,
                                &verb,
                                &strings(&rule["resourceNames"]),
                            );
                            let row = (
                                service.clone(),
                                role.replace("strata-", "<release>-"),
                                group.clone(),
                                resource.clone(),
                                verb.clone(),
                            );
                            if tests.is_empty() {
                                unused.insert(format!("{row:?}"));
                            }
                            table.insert(row, tests);
                        }
                    }
                }
            }
        }
    }
    let mut markdown = String::from(
        "| service | role | apiGroup | resource | verb | exercised by (test namespace prefix) |\n|---|---|---|---|---|---|\n",
    );
    for ((service, role, group, resource, verb), tests) in &table {
        let group = if group.is_empty() { "\"\"" } else { group };
        let tests: Vec<&String> = tests.iter().take(4).collect();
        markdown.push_str(&format!(
            "| {service} | {role} | {group} | {resource} | {verb} | {} |\n",
            tests
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    println!("{markdown}");
    if std::env::var("STRATA_UPDATE_DOCS").is_ok_and(|v| v == "1") {
        let path = strata_e2e::chart::repo_root().join("docs/security.md");
        let doc = std::fs::read_to_string(&path)?;
        let (begin, end) = ("<!-- rbac-table:begin -->\n", "<!-- rbac-table:end -->");
        let (head, rest) = doc.split_once(begin).context("the table's begin marker")?;
        let (_, tail) = rest.split_once(end).context("the table's end marker")?;
        std::fs::write(&path, format!("{head}{begin}{markdown}{end}{tail}"))?;
    }
    ensure!(
        unused.is_empty(),
        "granted by the chart, used by no test (remove it or test it):\n{}",
        unused.into_iter().collect::<Vec<_>>().join("\n")
    );
    Ok(())
}

/// The matching, on audit lines made up for it: a denied request is no use; a rule with
/// `resourceNames` is used only by requests naming one; impersonation counts per account.
#[test]
fn only_allowed_requests_on_the_named_objects_count() {
    let line = |code: u16, verb: &str, resource: &str, name: &str, test: &str| {
        serde_json::json!({
            "user": {"username": "system:serviceaccount:e2e-NS-abc:admission-webhook"},
            "verb": verb,
            "objectRef": {"resource": resource, "name": name, "apiGroup": ""},
            "responseStatus": {"code": code},
        })
        .to_string()
        .replace("NS", test)
    };
    let impersonation = serde_json::json!({
        "user": {"username": "system:serviceaccount:e2e-tenancy-abc:layer-controller"},
        "impersonatedUser": {"username": "system:serviceaccount:team:deployer"},
        "verb": "create",
        "objectRef": {"resource": "configmaps", "name": "x", "apiGroup": ""},
        "responseStatus": {"code": 403},
    })
    .to_string();
    let dry_run = |code: u16, verb: &str| {
        serde_json::json!({
            "user": {"username": "system:serviceaccount:e2e-drift-abc:drift-observer"},
            "impersonatedUser": {"username": "system:serviceaccount:e2e-drift-abc:drift-observer-dry-run"},
            "verb": verb,
            "objectRef": {"resource": "deployments", "name": "web", "apiGroup": "apps"},
            "responseStatus": {"code": code},
        })
        .to_string()
    };
    let log = [
        dry_run(200, "patch"),
        dry_run(403, "delete"),
        line(200, "get", "secrets", "certificate", "rotate"),
        line(200, "patch", "configmaps", "hooks-e2e-inject-abc", "inject"),
        line(200, "get", "secrets", "someone-elses", "sneaky"),
        line(403, "update", "secrets", "certificate", "denied"),
        impersonation,
    ]
    .join("\n");
    let uses = uses(&log).unwrap();
    let webhook = &uses["admission-webhook"];
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let set = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    // A rule naming the certificate Secret: only the request on it counts.
    assert_eq!(
        tests_using(webhook, "", "secrets", "get", &names(&["certificate"])),
        set(&["rotate"])
    );
    // Without resourceNames, both gets count.
    assert_eq!(
        tests_using(webhook, "", "secrets", "get", &[]),
        set(&["rotate", "sneaky"])
    );
    // A name derived from the test's namespace is compared as the chart renders it.
    assert_eq!(
        tests_using(
            webhook,
            "",
            "configmaps",
            "patch",
            &names(&["hooks-strata-system"])
        ),
        set(&["inject"])
    );
    // The denied update is no use.
    assert!(tests_using(webhook, "", "secrets", "update", &[]).is_empty());
    // Impersonation by account name.
    let controller = &uses["layer-controller"];
    assert_eq!(
        tests_using(
            controller,
            "",
            "serviceaccounts",
            "impersonate",
            &names(&["deployer"])
        ),
        set(&["tenancy"])
    );
    assert!(
        tests_using(
            controller,
            "",
            "serviceaccounts",
            "impersonate",
            &names(&["other"])
        )
        .is_empty()
    );
    // The observer's dry runs: its impersonation, and the dry-run identity's own allowed rights.
    assert_eq!(
        tests_using(
            &uses["drift-observer"],
            "",
            "serviceaccounts",
            "impersonate",
            &names(&[DRY_RUN_IDENTITY])
        ),
        set(&["drift"])
    );
    let identity = &uses[DRY_RUN_IDENTITY];
    assert_eq!(
        tests_using(identity, "*", "*", "patch", &[]),
        set(&["drift"])
    );
    assert!(tests_using(identity, "*", "*", "delete", &[]).is_empty());
}
