//! Drop-in command lines: the Grafana image's Go-style flags (`-kubernetes.namespace=mimir`)
//! translated to Strata's, so a Deployment written for the anchor works unchanged.

/// Flags of the anchor that configure something Strata does elsewhere or differently; they are
/// accepted and ignored with a warning. `true` = takes a value.
const IGNORED: &[(&str, bool, &str)] = &[
    (
        "kubernetes.api-url",
        true,
        "the API server comes from the kubeconfig",
    ),
    (
        "kubernetes.client-timeout",
        true,
        "client timeouts are built in",
    ),
    (
        "kubernetes.client-qps",
        true,
        "client-side rate limits are built in",
    ),
    (
        "kubernetes.client-burst",
        true,
        "client-side rate limits are built in",
    ),
    ("reconcile.interval", true, "reconciles are event-driven"),
    (
        "server-tls.enabled",
        false,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "server-tls.port",
        true,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "server-tls.cert-file",
        true,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "server-tls.key-file",
        true,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "server-tls.request-timeout",
        true,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "server-tls.self-signed-cert.enabled",
        false,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "server-tls.self-signed-cert.secret-name",
        true,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "server-tls.self-signed-cert.dns-name",
        true,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "server-tls.self-signed-cert.org",
        true,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "server-tls.self-signed-cert.expiration",
        true,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "webhooks.update-ca-bundle",
        false,
        "webhooks are served by the admission-webhook deployable",
    ),
    (
        "use-zone-tracker",
        false,
        "the zone tracker belongs to the prepare-downscale webhook",
    ),
    (
        "zone-tracker.config-map-name",
        true,
        "the zone tracker belongs to the prepare-downscale webhook",
    ),
    (
        "zpdb.pod-ready-annotation-patch-timeout",
        true,
        "pod readiness is read from pod conditions",
    ),
    (
        "server.cluster-validation.http.enabled",
        false,
        "cluster validation is not supported",
    ),
    (
        "server.cluster-validation.http.soft-validation",
        false,
        "cluster validation is not supported",
    ),
    (
        "server.cluster-validation.http.excluded-paths",
        true,
        "cluster validation is not supported",
    ),
    (
        "server.cluster-validation.http.excluded-user-agents",
        true,
        "cluster validation is not supported",
    ),
];

/// Rewrites anchor flags into Strata flags. Returns the new argument list (program name
/// first) and one warning per ignored flag. An anchor-style command line also turns leader
/// election off unless asked for: the anchor's manifests run one replica and grant no Lease
/// permissions.
pub fn translate(args: Vec<String>) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::with_capacity(args.len());
    let mut warnings = Vec::new();
    let mut anchor_style = false;
    let mut leader_flag = false;
    let mut iter = args.into_iter();
    if let Some(program) = iter.next() {
        out.push(program);
    }
    while let Some(arg) = iter.next() {
        leader_flag |= arg.starts_with("--leader-elect");
        // Go accepts `-flag` and `--flag`; only dotted or anchor names are rewritten.
        let bare = arg.trim_start_matches('-');
        let (name, inline) = match bare.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (bare, None),
        };
        let is_dash = arg.starts_with('-');
        let mapped = match name {
            "kubernetes.namespace" => Some("--watch-namespace"),
            "kubernetes.config-file" => Some("--kubeconfig"),
            "server.port" => Some("--admin-address"),
            "log.format" => Some("--log-format"),
            "log.level" => Some("--log-filter"),
            "pods.client-timeout" => Some("--pod-timeout"),
            "kubernetes.cluster-domain" => Some("--cluster-domain"),
            _ => None,
        };
        if let (true, Some(flag)) = (is_dash, mapped) {
            anchor_style = true;
            let Some(value) = inline.or_else(|| iter.next()) else {
                out.push(flag.to_string());
                continue;
            };
            let value = match flag {
                "--admin-address" => format!(":{value}"),
                "--log-format" if value == "logfmt" => "text".to_string(),
                _ => value,
            };
            out.push(format!("{flag}={value}"));
            continue;
        }
        if is_dash && let Some((_, takes_value, why)) = IGNORED.iter().find(|(n, _, _)| *n == name)
        {
            anchor_style = true;
            if *takes_value && inline.is_none() {
                iter.next();
            }
            warnings.push(format!("ignoring -{name}: {why}"));
            continue;
        }
        out.push(arg);
    }
    if anchor_style && !leader_flag {
        out.push("--leader-elect=false".to_string());
    }
    (out, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> (Vec<String>, Vec<String>) {
        translate(
            std::iter::once("rollout-operator")
                .chain(args.iter().copied())
                .map(String::from)
                .collect(),
        )
    }

    #[test]
    fn anchor_deployment_args() {
        let (args, warnings) = run(&[
            "-kubernetes.namespace=mimir",
            "-server.port",
            "8001",
            "-log.format=logfmt",
            "-log.level=debug",
            "-server-tls.enabled=true",
            "-server-tls.self-signed-cert.secret-name",
            "certs",
            "-use-zone-tracker",
            "-reconcile.interval=1s",
        ]);
        assert_eq!(
            args,
            vec![
                "rollout-operator",
                "--watch-namespace=mimir",
                "--admin-address=:8001",
                "--log-format=text",
                "--log-filter=debug",
                "--leader-elect=false",
            ]
        );
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(warnings[0].contains("admission-webhook"));
    }

    #[test]
    fn strata_args_pass_through() {
        let (args, warnings) = run(&["--watch-namespace", "mimir", "--admin-address", ":9000"]);
        assert_eq!(
            args,
            vec![
                "rollout-operator",
                "--watch-namespace",
                "mimir",
                "--admin-address",
                ":9000"
            ]
        );
        assert!(warnings.is_empty());
    }

    #[test]
    fn pod_call_flags_are_translated() {
        let (args, warnings) = run(&[
            "-pods.client-timeout=3s",
            "-kubernetes.cluster-domain",
            "example.org.",
        ]);
        assert_eq!(
            args,
            vec![
                "rollout-operator",
                "--pod-timeout=3s",
                "--cluster-domain=example.org.",
                "--leader-elect=false"
            ]
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn explicit_leader_election_wins() {
        let (args, _) = run(&["-kubernetes.namespace", "mimir", "--leader-elect=true"]);
        assert_eq!(
            args,
            vec![
                "rollout-operator",
                "--watch-namespace=mimir",
                "--leader-elect=true"
            ]
        );
    }
}
