//! Outbound proxies from the standard environment: `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY`
//! (upper case wins over lower case), read the way Go's clients read them, so a value that
//! works for kube-apiserver's neighbours works here.
//!
//! - The Kubernetes API client: `HTTPS_PROXY` for an `https://` server (`HTTP_PROXY` for
//!   `http://`), tunnelled with CONNECT, unless `NO_PROXY` names the server. A kubeconfig's own
//!   `proxy-url` wins. In-cluster configuration is covered too (kube-rs ignores the variables
//!   there, and with a kubeconfig it checked `NO_PROXY` against the proxy's own address).
//! - Artifact downloads (`http://`): `HTTP_PROXY`, the request sent in absolute form.
//! - OTLP over gRPC: `HTTPS_PROXY` whatever the endpoint's scheme, as gRPC clients do.
//! - Calls to pods (prepare-downscale) never use a proxy: pod addresses are cluster-internal.
//!
//! `NO_PROXY` is a comma-separated list of `*`, host names (`example.com` matches it and its
//! subdomains, `.example.com` only the subdomains), IP addresses and CIDR blocks, each
//! optionally with `:port`.

use std::net::IpAddr;

use http::Uri;

use crate::{Error, Result};

/// One `NO_PROXY` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Bypass {
    All,
    /// A domain (lower case, no leading dot) and whether the domain itself matches, not only
    /// its subdomains.
    Domain {
        name: String,
        itself: bool,
        port: Option<u16>,
    },
    Network {
        address: IpAddr,
        prefix: u8,
        port: Option<u16>,
    },
}

/// The proxy settings of the process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Proxies {
    https: Option<Uri>,
    http: Option<Uri>,
    bypass: Vec<Bypass>,
}

fn variable(get: &impl Fn(&str) -> Option<String>, name: &str) -> Option<(String, String)> {
    [name.to_string(), name.to_lowercase()]
        .into_iter()
        .find_map(|n| get(&n).filter(|v| !v.trim().is_empty()).map(|v| (n, v)))
}

fn proxy_url(name: &str, value: &str) -> Result<Uri> {
    let invalid = |reason: String| Error::InvalidFlag {
        flag: "proxy environment",
        reason: format!("{name}={value:?}: {reason}"),
    };
    // Go accepts a bare `host:port` and means http.
    let value = value.trim();
    let with_scheme = if value.contains("://") {
        value.to_string()
    } else {
        format!("http://{value}")
    };
    let uri: Uri = with_scheme.parse().map_err(|e| invalid(format!("{e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        other => {
            return Err(invalid(format!(
                "scheme {other:?} is not supported (http:// or https://)"
            )));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("no host".into()));
    }
    Ok(uri)
}

fn bypass_entry(entry: &str) -> Option<Bypass> {
    let entry = entry.trim().to_ascii_lowercase();
    if entry.is_empty() {
        return None;
    }
    if entry == "*" {
        return Some(Bypass::All);
    }
    // A CIDR block, else `host[:port]` where the host may be an IP address (IPv6 bracketed
    // when a port follows).
    if let Some((address, prefix)) = entry.split_once('/')
        && let (Ok(address), Ok(prefix)) = (address.parse::<IpAddr>(), prefix.parse::<u8>())
    {
        return Some(network(address, Some(prefix), None));
    }
    let (host, port) = split_port(&entry);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(address) = host.parse::<IpAddr>() {
        return Some(network(address, None, port));
    }
    let itself = !host.starts_with('.') && !host.starts_with("*.");
    let name = host
        .trim_start_matches("*.")
        .trim_start_matches('.')
        .to_string();
    (!name.is_empty()).then_some(Bypass::Domain { name, itself, port })
}

/// A network entry: `prefix` bits of `address` (all of them when `None`), at most the
/// family's length.
fn network(address: IpAddr, prefix: Option<u8>, port: Option<u16>) -> Bypass {
    let bits = if address.is_ipv4() { 32 } else { 128 };
    Bypass::Network {
        address,
        prefix: prefix.unwrap_or(bits).min(bits),
        port,
    }
}

/// `host:port` → (host, Some(port)); a bare IPv6 address is all host.
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some((host, port)) = entry.rsplit_once(':')
        && !host.contains(':')
        && let Ok(port) = port.parse::<u16>()
    {
        return (host, Some(port));
    }
    if let Some(rest) = entry.strip_prefix('[')
        && let Some((host, port)) = rest.split_once("]:")
        && let Ok(port) = port.parse::<u16>()
    {
        return (host, Some(port));
    }
    (entry, None)
}

fn in_network(ip: IpAddr, network: IpAddr, prefix: u8) -> bool {
    let (ip, network, bits) = match (ip.to_canonical(), network.to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(a.to_bits()), u128::from(b.to_bits()), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (a.to_bits(), b.to_bits(), 128),
        _ => return false,
    };
    let prefix = u32::from(prefix);
    if prefix == 0 {
        return true;
    }
    let shift = bits - prefix.min(bits);
    (ip >> shift) == (network >> shift)
}

impl Proxies {
    /// The process environment's settings, read once: the environment does not change while
    /// the process runs, and every artifact download asks. An unusable proxy URL is an error
    /// naming the variable (better than requests silently going direct, or nowhere).
    pub fn from_env() -> Result<&'static Self> {
        static PROXIES: std::sync::OnceLock<std::result::Result<Proxies, String>> =
            std::sync::OnceLock::new();
        PROXIES
            .get_or_init(|| {
                Self::from_vars(|name| std::env::var(name).ok()).map_err(|e| match e {
                    Error::InvalidFlag { reason, .. } => reason,
                    other => other.to_string(),
                })
            })
            .as_ref()
            .map_err(|reason| Error::InvalidFlag {
                flag: "proxy environment",
                reason: reason.clone(),
            })
    }

    /// Settings from a variable lookup (tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let https = variable(&get, "HTTPS_PROXY")
            .map(|(n, v)| proxy_url(&n, &v))
            .transpose()?;
        let http = variable(&get, "HTTP_PROXY")
            .map(|(n, v)| proxy_url(&n, &v))
            .transpose()?;
        let bypass = variable(&get, "NO_PROXY")
            .map(|(_, v)| v.split(',').filter_map(bypass_entry).collect())
            .unwrap_or_default();
        Ok(Self {
            https,
            http,
            bypass,
        })
    }

    /// The proxy for a request to `target` by its scheme (`HTTPS_PROXY` for https,
    /// `HTTP_PROXY` for http), or `None` to go direct.
    pub fn for_uri(&self, target: &Uri) -> Option<&Uri> {
        let proxy = match target.scheme_str() {
            Some("https") => self.https.as_ref(),
            _ => self.http.as_ref(),
        }?;
        (!self.bypasses(target)).then_some(proxy)
    }

    /// The proxy for a gRPC connection to `target`: `HTTPS_PROXY` whatever its scheme.
    pub fn for_grpc(&self, target: &Uri) -> Option<&Uri> {
        let proxy = self.https.as_ref()?;
        (!self.bypasses(target)).then_some(proxy)
    }

    /// Whether `NO_PROXY` sends requests to `target` direct.
    pub fn bypasses(&self, target: &Uri) -> bool {
        let Some(host) = target.host() else {
            return true;
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = target.port_u16().unwrap_or(match target.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let ip = host.parse::<IpAddr>().ok();
        self.bypass.iter().any(|rule| match rule {
            Bypass::All => true,
            Bypass::Domain {
                name,
                itself,
                port: p,
            } => {
                p.is_none_or(|p| p == port)
                    && ((*itself && host == *name) || host.ends_with(&format!(".{name}")))
            }
            Bypass::Network {
                address,
                prefix,
                port: p,
            } => {
                p.is_none_or(|p| p == port)
                    && ip.is_some_and(|ip| in_network(ip, *address, *prefix))
            }
        })
    }
}

/// `Proxy-Authorization` for a proxy URL with `user:password@`, if any (percent-decoded:
/// `%40` in a password is `@`).
pub fn basic_auth(proxy: &Uri) -> Option<http::HeaderValue> {
    use base64::Engine as _;
    let (userinfo, _) = proxy.authority()?.as_str().rsplit_once('@')?;
    let decoded: Vec<u8> = percent_encoding::percent_decode_str(userinfo).collect();
    let encoded = base64::engine::general_purpose::STANDARD.encode(decoded);
    http::HeaderValue::from_str(&format!("Basic {encoded}")).ok()
}

/// `text` with the `user:password@` of every URL in it removed (errors that quote a proxy
/// URL must not print its password).
pub fn without_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '"' || c.is_whitespace())
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(at) => rest = &tail[at + 1..],
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// A proxy URL without its credentials, for logs.
pub fn redacted(proxy: &Uri) -> String {
    without_credentials(&proxy.to_string())
}

/// Points a Kubernetes client configuration at the proxy `proxies` give for its server. A
/// `proxy-url` of the kubeconfig stays; one kube-rs took from `HTTPS_PROXY` (the same URL
/// as `proxies`' own) is replaced by this decision, which honours `NO_PROXY` for the
/// server's address.
pub fn apply_to_config(config: &mut kube::Config, proxies: &Proxies) {
    if config
        .proxy_url
        .as_ref()
        .is_some_and(|uri| proxies.https.as_ref() != Some(uri))
    {
        return;
    }
    config.proxy_url = proxies.for_uri(&config.cluster_url).cloned();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn proxies(vars: &[(&str, &str)]) -> Proxies {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Proxies::from_vars(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
            .unwrap()
    }

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn scheme_picks_the_variable_and_upper_case_wins() {
        let p = proxies(&[
            ("HTTPS_PROXY", "http://secure:3128"),
            ("https_proxy", "http://lower:1"),
            ("http_proxy", "plain:8080"),
        ]);
        assert_eq!(
            p.for_uri(&uri("https://api.example.com:6443")),
            Some(&uri("http://secure:3128"))
        );
        assert_eq!(
            p.for_uri(&uri("http://artifacts.flux-system/x.tar.gz")),
            Some(&uri("http://plain:8080")),
            "a bare host:port is http"
        );
        assert_eq!(
            p.for_grpc(&uri("http://otel:4317")),
            Some(&uri("http://secure:3128")),
            "gRPC uses HTTPS_PROXY whatever the scheme"
        );
        assert!(proxies(&[]).for_uri(&uri("https://x")).is_none());
    }

    /// NO_PROXY as Go's clients read it.
    #[test]
    fn no_proxy_rules() {
        let p = proxies(&[
            ("HTTPS_PROXY", "http://proxy:3128"),
            (
                "NO_PROXY",
                " .svc, cluster.local,10.0.0.0/8, 192.168.1.7 ,[fd00::1]:6443, internal.example:8443,fd10::/16",
            ),
        ]);
        for (target, direct) in [
            ("https://kubernetes.default.svc", true),
            ("https://svc", false),
            ("https://cluster.local", true),
            ("https://a.b.cluster.local", true),
            ("https://notcluster.local", false),
            ("https://10.96.0.1:443", true),
            ("https://11.0.0.1", false),
            ("https://192.168.1.7:6443", true),
            ("https://192.168.1.8", false),
            ("https://[fd00::1]:6443", true),
            ("https://[fd00::1]:443", false),
            ("https://[fd10:1::2]", true),
            ("https://internal.example:8443", true),
            ("https://internal.example", false),
            ("https://API.EXAMPLE.COM", false),
        ] {
            assert_eq!(p.bypasses(&uri(target)), direct, "{target}");
            assert_eq!(p.for_uri(&uri(target)).is_none(), direct, "{target}");
        }
        let all = proxies(&[("HTTPS_PROXY", "http://proxy:3128"), ("no_proxy", "*")]);
        assert!(all.for_uri(&uri("https://anything")).is_none());
    }

    #[test]
    fn an_unusable_proxy_is_an_error_naming_the_variable() {
        for value in ["socks5://proxy:1080", "http://", "ht tp://x"] {
            let err = Proxies::from_vars(|n| (n == "HTTPS_PROXY").then(|| value.to_string()))
                .unwrap_err()
                .to_string();
            assert!(err.contains("HTTPS_PROXY"), "{value}: {err}");
        }
    }

    /// In-cluster (kube-rs sets no proxy) the environment's proxy applies, unless NO_PROXY
    /// names the server; a kubeconfig's own `proxy-url` stays.
    #[test]
    fn the_api_client_follows_the_environment() {
        let set = proxies(&[("HTTPS_PROXY", "http://proxy:3128")]);
        let mut config = kube::Config::new(uri("https://10.96.0.1:443"));
        apply_to_config(&mut config, &set);
        assert_eq!(config.proxy_url, Some(uri("http://proxy:3128")));
        let bypassed = proxies(&[
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("NO_PROXY", "10.0.0.0/8"),
        ]);
        let mut config = kube::Config::new(uri("https://10.96.0.1:443"));
        apply_to_config(&mut config, &bypassed);
        assert_eq!(config.proxy_url, None);
        let mut own = kube::Config::new(uri("https://10.96.0.1:443"));
        own.proxy_url = Some(uri("http://kubeconfig-proxy:8080"));
        apply_to_config(&mut own, &bypassed);
        assert_eq!(own.proxy_url, Some(uri("http://kubeconfig-proxy:8080")));
    }

    #[test]
    fn credentials_never_reach_a_message() {
        assert_eq!(
            without_credentials(
                "proxy \"http://user:p%40ss@proxy:3128/\" refused; see https://x/y"
            ),
            "proxy \"http://proxy:3128/\" refused; see https://x/y"
        );
        assert_eq!(without_credentials("no url"), "no url");
    }

    #[test]
    fn proxy_credentials_become_basic_auth() {
        let header = basic_auth(&uri("http://user:p%40ss@proxy:3128")).unwrap();
        // base64("user:p@ss")
        assert_eq!(header, "Basic dXNlcjpwQHNz");
        assert!(basic_auth(&uri("http://proxy:3128")).is_none());
    }
}
