//! Flags every service accepts, flattened into each binary's clap parser.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::{Error, Result};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines, for a terminal.
    #[default]
    Text,
    /// One JSON object per line, for log collectors in a cluster.
    Json,
    /// logfmt lines (`ts=… level=… msg=…`), the Go anchors' default format.
    Logfmt,
}

/// The flags shared by every Strata service (`#[command(flatten)]`).
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Path to a kubeconfig; without it, $KUBECONFIG, ~/.kube/config or the in-cluster config.
    #[arg(long, env = "KUBECONFIG", global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// Kubeconfig context to use instead of the current one.
    #[arg(long, global = true)]
    pub context: Option<String>,

    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "STRATA_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// Log filter in RUST_LOG syntax, e.g. `info,kube=warn`.
    #[arg(long, default_value = "info", env = "RUST_LOG")]
    pub log_filter: String,

    /// Address of the admin HTTP server (/livez, /readyz, /metrics). `:8080` means all interfaces.
    #[arg(long, default_value = ":8080", value_parser = parse_listen_address)]
    pub admin_address: SocketAddr,

    /// Elect a leader through a Lease so that only one replica acts; `--leader-elect=false`
    /// for a single replica run by hand.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// Namespace of the leader Lease; defaults to the pod's namespace ($POD_NAMESPACE or the
    /// service-account namespace file), else `default`.
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Name of the leader Lease; defaults to `<service>-leader`. Two installations in one
    /// namespace (the chart's `nameOverride`/`fullnameOverride`) each need their own.
    #[arg(long)]
    pub lease_name: Option<String>,

    /// How long a leader's Lease stays valid without renewal; a successor takes over after it.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// Identity written into the Lease; defaults to $POD_NAME or the host name, plus a random
    /// suffix so two processes on one host never share it.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Watch only these namespaces (repeat the flag, or separate with commas); empty or unset
    /// watches all namespaces.
    #[arg(long, env = "WATCH_NAMESPACE", value_delimiter = ',', action = clap::ArgAction::Append)]
    pub watch_namespace: Vec<String>,

    /// Requests per second to the Kubernetes API, per API group (each group its own token
    /// bucket); 0 means no client-side limit, leaving it to the API server's priority and
    /// fairness.
    #[arg(long, default_value_t = 0.0)]
    pub client_qps: f64,

    /// Token-bucket size of `--client-qps`: how many requests may go at once.
    #[arg(long, default_value_t = 10)]
    pub client_burst: u32,

    /// Most requests to the Kubernetes API in flight at once, watches excepted; each needs a
    /// connection of its own, so this bounds the connections to the API server whatever the
    /// number of objects. 0: no cap.
    #[arg(long, default_value_t = 32)]
    pub client_max_in_flight: usize,

    /// Send this value as the `X-Cluster` header on every API and pod call, for servers that
    /// validate which cluster a caller belongs to (Grafana's cluster validation).
    #[arg(long)]
    pub cluster_validation_label: Option<String>,
}

impl CommonArgs {
    /// The namespaces to watch, each once, in the order given; empty means all namespaces.
    pub fn watch_namespaces(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for ns in self.watch_namespace.iter().map(|ns| ns.trim()) {
            if !ns.is_empty() && !out.contains(&ns) {
                out.push(ns);
            }
        }
        out
    }

    /// The namespace that holds the leader Lease.
    pub fn lease_namespace(&self) -> String {
        if let Some(ns) = self.lease_namespace.as_deref().filter(|ns| !ns.is_empty()) {
            return ns.to_string();
        }
        std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            .ok()
            .map(|ns| ns.trim().to_string())
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".to_string())
    }

    /// A unique identity for this process in the Lease.
    pub fn identity(&self) -> String {
        let base = self
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "strata".to_string());
        format!("{base}-{}", random_suffix())
    }
}

/// Eight hex digits that differ between processes and calls (identities, test names).
pub fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded per process from the OS; good enough to tell two processes apart.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:08x}", hasher.finish() as u32)
}

/// Parses a listen address: `:8080` (all interfaces, IPv6 and IPv4: see [`crate::net`]),
/// `127.0.0.1:8080`, `[::1]:8080`.
pub fn parse_listen_address(value: &str) -> Result<SocketAddr> {
    let invalid = |reason: &str| Error::InvalidFlag {
        flag: "address",
        reason: format!("{value:?}: {reason}"),
    };
    if let Some(port) = value.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| invalid("port is not a number 0-65535"))?;
        return Ok(crate::net::all_interfaces(port));
    }
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some((host, port)) = value.rsplit_once(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| invalid("port is not a number 0-65535"))?;
        if host == "localhost" {
            return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
        }
        return Err(invalid("host must be an IP address or localhost"));
    }
    Err(invalid("expected HOST:PORT or :PORT"))
}

/// Parses a duration like `500ms`, `10s`, `5m`, `1h`, `1h30m`, or a bare number of seconds.
pub fn parse_duration(value: &str) -> Result<Duration> {
    let invalid = |reason: &str| Error::InvalidFlag {
        flag: "duration",
        reason: format!("{value:?}: {reason}"),
    };
    let value = value.trim();
    if value.is_empty() {
        return Err(invalid("empty"));
    }
    if let Ok(secs) = value.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(|| invalid("missing unit (ms, s, m, h)"))?;
        if digits == 0 {
            return Err(invalid("expected a number before the unit"));
        }
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| invalid("not a number"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ms" => number / 1000.0,
            "s" => number,
            "m" => number * 60.0,
            "h" => number * 3600.0,
            other => return Err(invalid(&format!("unknown unit {other:?} (ms, s, m, h)"))),
        };
        total += Duration::from_secs_f64(seconds);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct TestCli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn parse(args: &[&str]) -> std::result::Result<CommonArgs, clap::Error> {
        let argv = std::iter::once("svc").chain(args.iter().copied());
        TestCli::try_parse_from(argv).map(|c| c.common)
    }

    #[test]
    fn listen_addresses() {
        let cases: &[(&str, Option<&str>)] = &[
            (":8080", Some("[::]:8080")),
            ("127.0.0.1:9000", Some("127.0.0.1:9000")),
            ("[::1]:8443", Some("[::1]:8443")),
            ("localhost:1234", Some("127.0.0.1:1234")),
            (":http", None),
            ("example.com:80", None),
            ("8080", None),
            (":70000", None),
        ];
        for (input, want) in cases {
            let got = parse_listen_address(input).ok().map(|a| a.to_string());
            assert_eq!(got.as_deref(), *want, "input {input:?}");
        }
    }

    #[test]
    fn durations() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("10s", Some(Duration::from_secs(10))),
            ("15", Some(Duration::from_secs(15))),
            ("500ms", Some(Duration::from_millis(500))),
            ("5m", Some(Duration::from_secs(300))),
            ("1h30m", Some(Duration::from_secs(5400))),
            ("1.5s", Some(Duration::from_millis(1500))),
            ("", None),
            ("s", None),
            ("10x", None),
            ("ten seconds", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input).ok(), *want, "input {input:?}");
        }
    }

    #[test]
    fn defaults() {
        // SAFETY of the test: these env vars would change defaults; the test asserts the
        // documented defaults only when they are unset in the test environment.
        let args = parse(&[]).unwrap();
        assert_eq!(args.admin_address.to_string(), "[::]:8080");
        assert!(args.leader_elect);
        assert_eq!(args.lease_duration, Duration::from_secs(10));
        if std::env::var_os("STRATA_LOG_FORMAT").is_none() {
            assert_eq!(args.log_format, LogFormat::Text);
        }
    }

    #[test]
    fn explicit_flags() {
        let args = parse(&[
            "--log-format",
            "json",
            "--log-filter",
            "debug",
            "--admin-address",
            "127.0.0.1:18080",
            "--leader-elect=false",
            "--lease-namespace",
            "strata-system",
            "--lease-duration",
            "20s",
            "--lease-name",
            "b-layer-controller-leader",
            "--watch-namespace",
            "mimir",
            "--context",
            "kind-dev",
            "--identity",
            "pod-0",
        ])
        .unwrap();
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.log_filter, "debug");
        assert_eq!(args.admin_address.to_string(), "127.0.0.1:18080");
        assert!(!args.leader_elect);
        assert_eq!(args.lease_namespace(), "strata-system");
        assert_eq!(args.lease_duration, Duration::from_secs(20));
        assert_eq!(
            args.lease_name.as_deref(),
            Some("b-layer-controller-leader")
        );
        assert_eq!(args.watch_namespaces(), vec!["mimir"]);
        assert_eq!(args.context.as_deref(), Some("kind-dev"));
        assert!(args.identity().starts_with("pod-0-"));
        assert_ne!(
            args.identity(),
            args.identity(),
            "identities are unique per call"
        );
    }

    #[test]
    fn empty_watch_namespace_means_all() {
        let args = parse(&["--watch-namespace", ""]).unwrap();
        assert!(args.watch_namespaces().is_empty());
    }

    #[test]
    fn watch_namespace_repeats_and_splits_on_commas() {
        let args = parse(&[
            "--watch-namespace",
            "mimir,loki",
            "--watch-namespace=tempo",
            "--watch-namespace",
            " loki ,",
        ])
        .unwrap();
        assert_eq!(args.watch_namespaces(), vec!["mimir", "loki", "tempo"]);
    }

    #[test]
    fn bad_flags_are_rejected() {
        for bad in [
            &["--log-format", "xml"][..],
            &["--admin-address", "nowhere"][..],
            &["--leader-elect", "maybe"][..],
            &["--lease-duration", "soon"][..],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
