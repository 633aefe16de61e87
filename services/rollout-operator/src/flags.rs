//! Compatibility mode: the Grafana image's Go-style command line (`-kubernetes.namespace=mimir
//! -server-tls.enabled=true …`) translated to Strata's flags, with the anchor's defaults, so a
//! Deployment written for the anchor runs unchanged — controller and webhooks in one process.

use jiff::SignedDuration;

/// Anchor flags with a Strata equivalent: (anchor name, Strata flag, kind).
const MAPPED: &[(&str, &str, Kind)] = &[
    ("kubernetes.namespace", "--watch-namespace", Kind::Value),
    ("kubernetes.config-file", "--kubeconfig", Kind::Value),
    ("server.port", "--admin-address", Kind::Port),
    ("log.format", "--log-format", Kind::Value),
    ("log.level", "--log-filter", Kind::LogLevel),
    ("pods.client-timeout", "--pod-timeout", Kind::Value),
    ("kubernetes.client-qps", "--client-qps", Kind::Float),
    ("kubernetes.client-burst", "--client-burst", Kind::Count),
    ("kubernetes.cluster-domain", "--cluster-domain", Kind::Value),
    ("server-tls.enabled", "--serve-webhooks", Kind::Bool),
    ("server-tls.port", "--webhook-tls-address", Kind::Port),
    (
        "server-tls.cert-file",
        "--webhook-tls-cert-file",
        Kind::Value,
    ),
    ("server-tls.key-file", "--webhook-tls-key-file", Kind::Value),
    (
        "server-tls.request-timeout",
        "--webhook-request-timeout",
        Kind::Value,
    ),
    (
        "server-tls.self-signed-cert.secret-name",
        "--webhook-tls-secret-name",
        Kind::Value,
    ),
    (
        "server-tls.self-signed-cert.dns-name",
        "--webhook-dns-name",
        Kind::Value,
    ),
    (
        "server-tls.self-signed-cert.expiration",
        "--webhook-cert-validity",
        Kind::PrometheusDuration,
    ),
    (
        "webhooks.update-ca-bundle",
        "--webhook-inject-ca-bundle",
        Kind::Bool,
    ),
    ("use-zone-tracker", "--use-zone-tracker", Kind::Bool),
    (
        "zone-tracker.config-map-name",
        "--zone-tracker-config-map-name",
        Kind::Value,
    ),
    (
        "zpdb.pod-ready-annotation-patch-timeout",
        "--ready-time-patch-timeout",
        Kind::Value,
    ),
];

/// How an anchor flag's value is carried over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Copied as is.
    Value,
    /// A port number → `:PORT`.
    Port,
    /// A Go boolean flag: no value means true; never consumes the next argument.
    Bool,
    /// A Prometheus duration (`1y`, `30d`) → seconds.
    PrometheusDuration,
    /// The anchor's level (debug, info, warn, error) → a filter for Strata's own crates.
    LogLevel,
    /// A float64 flag (negative means no limit, like 0).
    Float,
    /// A non-negative int flag (a negative burst means no limit, like 0).
    Count,
}

/// Anchor flags with no effect in Strata; accepted with a warning. `true` = takes a value.
const IGNORED: &[(&str, bool, &str)] = &[
    (
        "kubernetes.api-url",
        true,
        "the API server comes from the kubeconfig or the in-cluster config",
    ),
    (
        "kubernetes.client-timeout",
        true,
        "each API call is bounded by the client's own timeouts",
    ),
    (
        "reconcile.interval",
        true,
        "reconciles are event-driven (a change is acted on within 20 ms, plus a 30 s resync)",
    ),
    (
        "server-tls.self-signed-cert.enabled",
        false,
        "a self-managed certificate is used whenever no certificate file is given",
    ),
    (
        "server-tls.self-signed-cert.org",
        true,
        "the organisation of the self-managed CA is not configurable",
    ),
    (
        "server.cluster-validation.http.enabled",
        false,
        "HTTP cluster validation is not supported",
    ),
    (
        "server.cluster-validation.http.soft-validation",
        false,
        "HTTP cluster validation is not supported",
    ),
    (
        "server.cluster-validation.http.excluded-paths",
        true,
        "HTTP cluster validation is not supported",
    ),
    (
        "server.cluster-validation.http.excluded-user-agents",
        true,
        "HTTP cluster validation is not supported",
    ),
];

/// The anchor's defaults that differ from Strata's, added when an anchor-style command line
/// does not set them: (Strata flag, value).
const ANCHOR_DEFAULTS: &[(&str, &str)] = &[
    ("--admin-address", ":8001"),
    ("--log-format", "logfmt"),
    ("--log-filter", "debug"),
    ("--leader-elect", "false"),
    // The anchor limits its API calls per API group by default.
    ("--client-qps", "5"),
    ("--client-burst", "10"),
    (
        "--webhook-tls-secret-name",
        "rollout-operator-self-signed-certificate",
    ),
];

/// A translated command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Translated {
    /// Strata's arguments, program name first.
    pub args: Vec<String>,
    /// One line per anchor flag accepted without effect.
    pub warnings: Vec<String>,
    /// Whether any anchor flag was seen (compatibility mode).
    pub anchor_style: bool,
}

/// Why an anchor-style command line cannot run.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// The anchor refuses to start without a namespace; so do we, rather than silently
    /// operating on every namespace of the cluster.
    #[error("-kubernetes.namespace is required (the namespace the rollout-operator operates in)")]
    NamespaceRequired,
    /// The Grafana flag means exactly one namespace; another namespace flag beside it would
    /// silently widen or contradict it.
    #[error(
        "-kubernetes.namespace={anchor} conflicts with {strata}: give the Grafana flag alone (one namespace), or --watch-namespace alone (one or more), or --watch-namespace-selector alone"
    )]
    ConflictingNamespaces { anchor: String, strata: String },
    #[error("invalid value {value:?} for flag -{flag}: {reason}")]
    InvalidValue {
        flag: String,
        value: String,
        reason: String,
    },
}

/// Rewrites anchor flags into Strata flags and fills in the anchor's defaults. Strata's own
/// flags pass through unchanged, and win over the defaults.
pub fn translate(args: Vec<String>) -> Result<Translated, FlagError> {
    let mut out = Translated::default();
    let mut iter = args.into_iter();
    if let Some(program) = iter.next() {
        out.args.push(program);
    }
    let mut namespace = None;
    while let Some(arg) = iter.next() {
        // Go accepts `-flag` and `--flag`; only the anchor's names are rewritten.
        let bare = arg.trim_start_matches('-');
        let (name, inline) = match bare.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (bare, None),
        };
        if !arg.starts_with('-') {
            out.args.push(arg);
            continue;
        }
        if let Some((_, flag, kind)) = MAPPED.iter().find(|(n, _, _)| *n == name) {
            out.anchor_style = true;
            let value = match (kind, inline) {
                (_, Some(v)) => v,
                (Kind::Bool, None) => "true".to_string(),
                (_, None) => match iter.next() {
                    Some(v) => v,
                    None => {
                        return Err(FlagError::InvalidValue {
                            flag: name.to_string(),
                            value: String::new(),
                            reason: "flag needs an argument".into(),
                        });
                    }
                },
            };
            let value = convert(name, *kind, &value)?;
            if name == "kubernetes.namespace" {
                // Go's flags keep the last value; the flag names one namespace, where Strata's
                // `--watch-namespace` would split a list on its commas.
                if value.contains(',') {
                    return Err(FlagError::InvalidValue {
                        flag: name.to_string(),
                        value,
                        reason: "the Grafana flag names the one namespace the operator works in; use --watch-namespace to name several".into(),
                    });
                }
                namespace = Some(value);
                continue;
            }
            out.args.push(format!("{flag}={value}"));
            continue;
        }
        if let Some((_, takes_value, why)) = IGNORED.iter().find(|(n, _, _)| *n == name) {
            out.anchor_style = true;
            if *takes_value && inline.is_none() {
                iter.next();
            }
            out.warnings.push(format!("ignoring -{name}: {why}"));
            continue;
        }
        out.args.push(arg);
    }
    if !out.anchor_style {
        return Ok(out);
    }
    let Some(namespace) = namespace.filter(|n| !n.is_empty()) else {
        return Err(FlagError::NamespaceRequired);
    };
    if let Some(strata) = out.args.iter().find(|a| {
        ["--watch-namespace", "--watch-namespace-selector"]
            .iter()
            .any(|f| *a == f || a.starts_with(&format!("{f}=")))
    }) {
        return Err(FlagError::ConflictingNamespaces {
            anchor: namespace,
            strata: strata.clone(),
        });
    }
    out.args.push(format!("--watch-namespace={namespace}"));
    // The anchor keeps its certificate Secret (and reads its zone tracker) in the namespace
    // it operates in.
    let mut defaults: Vec<(&str, String)> = ANCHOR_DEFAULTS
        .iter()
        .map(|(f, v)| (*f, v.to_string()))
        .collect();
    // The anchor sends its namespace as `X-Cluster` on every API and pod call.
    defaults.push(("--cluster-validation-label", namespace.clone()));
    defaults.push(("--lease-namespace", namespace));
    for (flag, value) in defaults {
        let given = out
            .args
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")));
        if !given {
            let value = if flag == "--log-filter" {
                log_filter(&value)
            } else {
                value
            };
            out.args.push(format!("{flag}={value}"));
        }
    }
    let last = |flag: &str, default: f64| {
        out.args
            .iter()
            .rev()
            .find_map(|a| a.strip_prefix(flag)?.strip_prefix('=')?.parse::<f64>().ok())
            .unwrap_or(default)
    };
    if last("--client-qps", 5.0) > 0.0 && last("--client-burst", 10.0) < 1.0 {
        return Err(FlagError::InvalidValue {
            flag: "kubernetes.client-burst".into(),
            value: last("--client-burst", 10.0).to_string(),
            reason: "-kubernetes.client-burst must be at least 1 when -kubernetes.client-qps is greater than 0, since each request consumes one token".into(),
        });
    }
    Ok(out)
}

fn convert(name: &str, kind: Kind, value: &str) -> Result<String, FlagError> {
    let invalid = |reason: &str| FlagError::InvalidValue {
        flag: name.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    Ok(match kind {
        Kind::Value => value.to_string(),
        Kind::Port => {
            let port: u16 = value.parse().map_err(|_| invalid("not a port number"))?;
            format!(":{port}")
        }
        Kind::Bool => go_parse_bool(value)
            .ok_or_else(|| invalid("not a boolean"))?
            .to_string(),
        Kind::PrometheusDuration => {
            let d = crate::plan::parse_prometheus_duration(value)
                .filter(|d| *d > SignedDuration::ZERO)
                .ok_or_else(|| invalid("not a positive duration such as 1y or 90d"))?;
            format!("{}s", d.as_secs())
        }
        Kind::Float => {
            let v: f64 = value.parse().map_err(|_| invalid("not a number"))?;
            if !v.is_finite() {
                return Err(invalid("not a finite number"));
            }
            v.max(0.0).to_string()
        }
        Kind::Count => {
            let v: i64 = value.parse().map_err(|_| invalid("not an integer"))?;
            v.clamp(0, i64::from(u32::MAX)).to_string()
        }
        Kind::LogLevel => match value {
            "debug" | "info" | "warn" | "error" => log_filter(value),
            _ => return Err(invalid("expected debug, info, warn or error")),
        },
    })
}

/// Go's `strconv.ParseBool`, which the anchor reads boolean flags and annotations with.
pub fn go_parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The anchor's level applies to the operator's own logs; libraries stay at warnings, as the
/// anchor's client libraries log separately from its level.
fn log_filter(level: &str) -> String {
    // The webhooks this process serves log from the admission-server and core-admission
    // crates (named `admission_webhook` here until 2026-11-29, which silenced them).
    let crates = [
        "rollout_operator",
        "admission_server",
        "core_admission",
        "core_k8s",
        "core_rollout",
    ];
    let mut filter = String::from("warn");
    for c in crates {
        filter.push_str(&format!(",{c}={level}"));
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Translated, FlagError> {
        translate(
            std::iter::once("rollout-operator")
                .chain(args.iter().copied())
                .map(String::from)
                .collect(),
        )
    }

    fn args(args: &[&str]) -> Vec<String> {
        run(args).unwrap_or_default().args
    }

    #[test]
    fn jsonnet_deployment_args_get_the_anchor_defaults() {
        let t = run(&[
            "-kubernetes.namespace=mimir",
            "-use-zone-tracker=true",
            "-zone-tracker.config-map-name=rollout-operator-zone-tracker",
            "-zpdb.pod-ready-annotation-patch-timeout=5s",
            "-server-tls.enabled=true",
        ])
        .unwrap_or_default();
        assert!(t.anchor_style);
        assert!(t.warnings.is_empty(), "{:?}", t.warnings);
        let debug = log_filter("debug");
        // The webhooks served in this process log at the anchor's level too.
        assert!(
            debug.contains(",admission_server=debug,core_admission=debug,"),
            "{debug}"
        );
        assert_eq!(
            t.args,
            vec![
                "rollout-operator".to_string(),
                "--use-zone-tracker=true".into(),
                "--zone-tracker-config-map-name=rollout-operator-zone-tracker".into(),
                "--ready-time-patch-timeout=5s".into(),
                "--serve-webhooks=true".into(),
                "--watch-namespace=mimir".into(),
                "--admin-address=:8001".into(),
                "--log-format=logfmt".into(),
                format!("--log-filter={debug}"),
                "--leader-elect=false".into(),
                "--client-qps=5".into(),
                "--client-burst=10".into(),
                "--webhook-tls-secret-name=rollout-operator-self-signed-certificate".into(),
                "--cluster-validation-label=mimir".into(),
                "--lease-namespace=mimir".into(),
            ]
        );
    }

    #[test]
    fn client_rate_limit_flags_are_carried_over_and_checked() {
        let a = args(&[
            "-kubernetes.namespace=m",
            "-kubernetes.client-qps=20.5",
            "-kubernetes.client-burst",
            "40",
        ]);
        assert!(a.contains(&"--client-qps=20.5".to_string()), "{a:?}");
        assert!(a.contains(&"--client-burst=40".to_string()), "{a:?}");
        assert_eq!(
            a.iter().filter(|x| x.starts_with("--client-qps")).count(),
            1,
            "{a:?}"
        );
        // 0 turns the limit off, as in the anchor; then any burst is fine.
        let off = args(&[
            "-kubernetes.namespace=m",
            "-kubernetes.client-qps=0",
            "-kubernetes.client-burst=0",
        ]);
        assert!(off.contains(&"--client-qps=0".to_string()), "{off:?}");
        let e = run(&["-kubernetes.namespace=m", "-kubernetes.client-burst=0"]).unwrap_err();
        assert!(
            e.to_string().contains("-kubernetes.client-burst must be at least 1 when -kubernetes.client-qps is greater than 0"),
            "{e}"
        );
        let e = run(&["-kubernetes.namespace=m", "-kubernetes.client-qps=fast"]).unwrap_err();
        assert!(e.to_string().contains("-kubernetes.client-qps"), "{e}");
    }

    #[test]
    fn helm_chart_args_and_separate_values() {
        let a = args(&[
            "-kubernetes.namespace",
            "loki",
            "-server-tls.enabled",
            "-server-tls.self-signed-cert.secret-name",
            "my-certs",
            "-server-tls.self-signed-cert.dns-name=ro.loki.svc",
            "-server-tls.self-signed-cert.expiration=90d",
            "-server.port",
            "9000",
            "-log.level=info",
            "-webhooks.update-ca-bundle=false",
        ]);
        for want in [
            "--watch-namespace=loki",
            "--serve-webhooks=true",
            "--webhook-tls-secret-name=my-certs",
            "--webhook-dns-name=ro.loki.svc",
            "--webhook-cert-validity=7776000s",
            "--admin-address=:9000",
            "--webhook-inject-ca-bundle=false",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing in {a:?}");
        }
        assert!(a.contains(&format!("--log-filter={}", log_filter("info"))));
        assert_eq!(
            a.iter()
                .filter(|x| x.starts_with("--admin-address"))
                .count(),
            1,
            "the given port wins over the default: {a:?}"
        );
        assert_eq!(
            a.iter()
                .filter(|x| x.starts_with("--webhook-tls-secret-name"))
                .count(),
            1
        );
    }

    #[test]
    fn a_bool_flag_never_takes_the_next_argument() {
        let a = args(&["-server-tls.enabled", "-kubernetes.namespace=m"]);
        assert!(a.contains(&"--serve-webhooks=true".to_string()));
        assert!(a.contains(&"--watch-namespace=m".to_string()));
        let a = args(&["-kubernetes.namespace=m", "-server-tls.enabled=false"]);
        assert!(a.contains(&"--serve-webhooks=false".to_string()));
    }

    #[test]
    fn the_namespace_is_required_in_compatibility_mode() {
        assert_eq!(
            run(&["-server-tls.enabled=true"]),
            Err(FlagError::NamespaceRequired)
        );
        assert_eq!(
            run(&["-kubernetes.namespace="]),
            Err(FlagError::NamespaceRequired)
        );
    }

    /// The Grafana flag keeps its meaning: one namespace, the last given (Go's flags), never
    /// widened by a comma or by Strata's own flag beside it.
    #[test]
    fn the_grafana_namespace_flag_names_exactly_one_namespace() {
        let a = args(&["-kubernetes.namespace=a", "-kubernetes.namespace=b"]);
        assert_eq!(
            a.iter()
                .filter(|x| x.starts_with("--watch-namespace"))
                .collect::<Vec<_>>(),
            vec!["--watch-namespace=b"]
        );
        let e = run(&["-kubernetes.namespace=mimir,loki"]).unwrap_err();
        assert!(
            e.to_string().contains("-kubernetes.namespace") && e.to_string().contains("mimir,loki"),
            "{e}"
        );
        for strata in [
            &["--watch-namespace", "loki"][..],
            &["--watch-namespace=loki"][..],
            &["--watch-namespace-selector", "team=mimir"][..],
            &["--watch-namespace-selector=team=mimir"][..],
        ] {
            let mut given = vec!["-kubernetes.namespace=mimir"];
            given.extend_from_slice(strata);
            assert_eq!(
                run(&given),
                Err(FlagError::ConflictingNamespaces {
                    anchor: "mimir".into(),
                    strata: strata[0].to_string(),
                }),
                "{given:?}"
            );
        }
        let e = run(&["-kubernetes.namespace=mimir", "--watch-namespace=loki"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "-kubernetes.namespace=mimir conflicts with --watch-namespace=loki: give the Grafana flag alone (one namespace), or --watch-namespace alone (one or more), or --watch-namespace-selector alone"
        );
    }

    #[test]
    fn bad_values_name_the_flag() {
        let e = run(&["-kubernetes.namespace=m", "-server.port=http"]).unwrap_err();
        assert!(e.to_string().contains("-server.port"), "{e}");
        let e = run(&["-kubernetes.namespace=m", "-log.level=trace"]).unwrap_err();
        assert!(e.to_string().contains("-log.level"), "{e}");
        let e = run(&["-kubernetes.namespace=m", "-use-zone-tracker=maybe"]).unwrap_err();
        assert!(e.to_string().contains("-use-zone-tracker"), "{e}");
    }

    #[test]
    fn ignored_flags_warn_and_skip_their_value() {
        let t = run(&[
            "-kubernetes.namespace=m",
            "-reconcile.interval",
            "1s",
            "-server-tls.self-signed-cert.org=Acme",
        ])
        .unwrap_or_default();
        assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
        assert!(!t.args.iter().any(|a| a == "1s"), "{:?}", t.args);
    }

    #[test]
    fn strata_args_pass_through_untouched() {
        let t =
            run(&["--watch-namespace", "mimir", "--admin-address", ":9000"]).unwrap_or_default();
        assert!(!t.anchor_style);
        assert_eq!(
            t.args,
            vec![
                "rollout-operator",
                "--watch-namespace",
                "mimir",
                "--admin-address",
                ":9000"
            ]
        );
    }

    #[test]
    fn explicit_strata_flags_win_over_anchor_defaults() {
        let a = args(&["-kubernetes.namespace", "mimir", "--leader-elect=true"]);
        assert!(a.contains(&"--leader-elect=true".to_string()));
        assert!(!a.contains(&"--leader-elect=false".to_string()));
    }
}
