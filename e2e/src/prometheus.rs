//! A real Prometheus server (built from its Go module by the plane build) scraping the
//! services of one test, and its HTTP API to evaluate queries and read alerts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::plane::{cached_tool, free_port};
use crate::services::ServiceProcess;
use crate::support::{eventually, http_get};

/// The server binary: `$PROMETHEUS`, else the plane build's cache for the pinned version.
pub fn binary() -> Result<PathBuf> {
    cached_tool("PROMETHEUS", "PROMETHEUS_VERSION", "prometheus")
}

/// One scrape job: a service's admin address with the labels Kubernetes service discovery
/// would give its pod.
#[derive(Clone, Debug)]
pub struct Target {
    pub job: String,
    pub address: SocketAddr,
    pub labels: Vec<(String, String)>,
}

/// A running Prometheus.
#[derive(Debug)]
pub struct Prometheus {
    pub address: SocketAddr,
    process: ServiceProcess,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` every second (and kube-apiserver at `apiserver`,
    /// with the plane's client certificate, when given), evaluating `rules` (a rule file's
    /// YAML) every second; waits until it is ready.
    pub async fn start(
        targets: &[Target],
        apiserver: Option<(&str, &Path)>,
        rules: &str,
    ) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "strata-e2e-prometheus-{}",
            core_k8s::args::random_suffix()
        ));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("rules.yaml"), rules)?;
        let mut config = String::from(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [rules.yaml]\nscrape_configs:\n",
        );
        for t in targets {
            let labels: Vec<String> = t
                .labels
                .iter()
                .map(|(k, v)| format!("{k}: {v:?}"))
                .collect();
            config.push_str(&format!(
                "- job_name: {:?}\n  static_configs: [{{targets: [\"{}\"], labels: {{{}}}}}]\n",
                t.job,
                t.address,
                labels.join(", ")
            ));
        }
        if let Some((server, pki)) = apiserver {
            let host = server
                .trim_start_matches("https://")
                .trim_end_matches('/')
                .to_string();
            config.push_str(&format!(
                "- job_name: kube-apiserver\n  scheme: https\n  tls_config: {{ca_file: {:?}, cert_file: {:?}, key_file: {:?}}}\n  static_configs: [{{targets: [\"{host}\"]}}]\n",
                pki.join("ca.crt"),
                pki.join("admin.crt"),
                pki.join("admin.key"),
            ));
        }
        std::fs::write(dir.join("prometheus.yml"), &config)?;
        // A port found free can be taken before Prometheus binds it (an outgoing connection
        // of any process may get it as its ephemeral port): then another is tried.
        for attempt in 1..=3 {
            let port = free_port()?;
            let process = ServiceProcess::spawn_plain_blocking(
                &binary()?,
                &[
                    &format!("--config.file={}", dir.join("prometheus.yml").display()),
                    &format!(
                        "--storage.tsdb.path={}",
                        dir.join(format!("data-{attempt}")).display()
                    ),
                    &format!("--web.listen-address=127.0.0.1:{port}"),
                ],
                &std::env::temp_dir().join("strata-e2e-logs"),
            )?;
            let address: SocketAddr = format!("127.0.0.1:{port}").parse()?;
            let bound = eventually("Prometheus ready", Duration::from_secs(60), || async {
                if process.logs().contains("address already in use") {
                    return Ok(Some(false));
                }
                Ok(matches!(http_get(address, "/-/ready").await, Ok((200, _))).then_some(true))
            })
            .await
            .with_context(|| format!("Prometheus log:\n{}", process.logs()))?;
            if bound {
                return Ok(Self { address, process });
            }
        }
        bail!("Prometheus found its port taken 3 times in a row")
    }

    fn data(body: &str, what: &str) -> Result<Value> {
        let answer: Value =
            serde_json::from_str(body).with_context(|| format!("{what}: {body}"))?;
        if answer["status"] != "success" {
            bail!("{what}: {body}");
        }
        Ok(answer["data"].clone())
    }

    /// The series an instant query returns now; a query Prometheus refuses is an error.
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let (_, body) = http_get(
            self.address,
            &format!(
                "/api/v1/query?query={}",
                core_k8s::http_get::percent_encode(expr)
            ),
        )
        .await?;
        Ok(Self::data(&body, expr)?["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Alerts now pending or firing.
    pub async fn alerts(&self) -> Result<Vec<Value>> {
        let (_, body) = http_get(self.address, "/api/v1/alerts").await?;
        Ok(Self::data(&body, "alerts")?["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Every rule loaded, with the health of its last evaluation: (name, health, last error).
    pub async fn rules(&self) -> Result<Vec<(String, String, String)>> {
        let (_, body) = http_get(self.address, "/api/v1/rules").await?;
        Ok(Self::data(&body, "rules")?["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                let text = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                (text("name"), text("health"), text("lastError"))
            })
            .collect())
    }

    /// Whether every target of `job` was scraped successfully at least once.
    pub async fn scraped(&self, job: &str) -> Result<bool> {
        let up = self.query(&format!("up{{job=\"{job}\"}} == 1")).await?;
        Ok(!up.is_empty())
    }

    pub fn logs(&self) -> String {
        self.process.logs()
    }
}
