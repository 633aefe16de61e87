//! Strata's service binaries as child processes of a test or the demo.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

/// Every deployable service binary.
pub const SERVICES: [&str; 4] = [
    "layer-controller",
    "drift-observer",
    "rollout-operator",
    "admission-webhook",
];

/// Where the workspace's binaries are: `$STRATA_BIN_DIR`, else the cargo profile directory
/// this test binary was built into (`target/debug/deps/<test>` → `target/debug`).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("STRATA_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// A running service process. Dropping it kills the process; if the thread is panicking (a
/// failed test), the service's log is printed first.
#[derive(Debug)]
pub struct ServiceProcess {
    pub name: String,
    child: Child,
    log: PathBuf,
    pub admin: Option<SocketAddr>,
}

impl ServiceProcess {
    /// Starts `binary --kubeconfig KUBECONFIG ARGS...`, logging to `log_dir/<name>-<pid>.log`.
    pub fn spawn_blocking(
        binary: &Path,
        kubeconfig: &Path,
        args: &[&str],
        log_dir: &Path,
    ) -> Result<Self> {
        let kubeconfig = kubeconfig.to_string_lossy();
        let mut all = vec!["--kubeconfig", kubeconfig.as_ref()];
        all.extend_from_slice(args);
        Self::spawn_plain_blocking(binary, &all, log_dir)
    }

    /// Starts `binary ARGS...` as they are (a Go binary, say, that names its kubeconfig with
    /// its own flag), logging to `log_dir/<name>-<pid>.log`.
    pub fn spawn_plain_blocking(binary: &Path, args: &[&str], log_dir: &Path) -> Result<Self> {
        Self::spawn_with_env_blocking(binary, args, &[], log_dir)
    }

    /// Starts `binary ARGS...` with these extra environment variables (a container's `env`).
    pub fn spawn_with_env_blocking(
        binary: &Path,
        args: &[&str],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> Result<Self> {
        let name = binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        fs::create_dir_all(log_dir)?;
        let log = log_dir.join(format!("{name}-{}.log", unique()));
        let file = fs::File::create(&log)?;
        let admin = args
            .iter()
            .position(|a| *a == "--admin-address")
            .and_then(|i| args.get(i + 1))
            .and_then(|a| a.parse().ok());
        let child = Command::new(binary)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("E2E_SERVICE_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} (build the workspace binaries first)",
                    binary.display()
                )
            })?;
        Ok(Self {
            name,
            child,
            log,
            admin,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A metric from the process's `/metrics`, summed over the series of that name whose text
    /// contains every `filter` (label values, say).
    pub async fn metric(&self, name: &str, filters: &[&str]) -> Result<f64> {
        let address = self.admin.context("no admin address")?;
        let (_, body) = crate::support::http_get(address, "/metrics").await?;
        Ok(crate::support::parse_openmetrics(&body)?
            .into_iter()
            .filter(|(series, _)| {
                series.split('{').next() == Some(name) && filters.iter().all(|f| series.contains(f))
            })
            .map(|(_, v)| v)
            .sum())
    }

    /// `<service>_reconcile_total`: how often the process reconciled, over every label set. A
    /// test waits for it to move to know the service had its chance to act.
    pub async fn reconciles(&self) -> Result<f64> {
        let name = format!("{}_reconcile_total", self.name.replace('-', "_"));
        self.metric(&name, &[]).await
    }

    /// `<service>_leader`: 1 while this replica leads, 0 while it stands by.
    pub async fn leader(&self) -> Result<f64> {
        let name = format!("{}_leader", self.name.replace('-', "_"));
        self.metric(&name, &[]).await
    }

    pub fn logs(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends a signal by name (`TERM`, `KILL`, `INT`).
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status();
    }

    /// Whether the process has exited, and how.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit_blocking(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then SIGKILL after 15 s.
    pub fn terminate_blocking(&mut self) -> Option<ExitStatus> {
        self.signal("TERM");
        let status = self.wait_exit_blocking(Duration::from_secs(15));
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        status
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "----- {} log ({}) -----\n{}\n----- end of {} log -----",
                self.name,
                self.log.display(),
                self.logs(),
                self.name
            );
        }
        if self.try_exit().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn unique() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// Starts the workspace binary `service` against `kubeconfig` with a free admin address,
/// then `args`, logging to the e2e log directory.
pub fn start_service(service: &str, kubeconfig: &Path, args: &[&str]) -> Result<ServiceProcess> {
    let admin = format!("127.0.0.1:{}", crate::plane::free_port()?);
    let mut all = vec!["--admin-address", admin.as_str()];
    all.extend_from_slice(args);
    ServiceProcess::spawn_blocking(
        &bin_dir().join(service),
        kubeconfig,
        &all,
        &std::env::temp_dir().join("strata-e2e-logs"),
    )
}

/// Starts one replica of `service` with leader election on (Leases in `lease_namespace`,
/// identity `identity`), acting only on the objects of the test that owns `lease_namespace`:
/// other tests run their own controllers on the same plane.
pub fn start_replica(
    service: &str,
    lease_namespace: &str,
    identity: &str,
) -> Result<ServiceProcess> {
    let tls = format!("127.0.0.1:{}", crate::plane::free_port()?);
    let mut args = vec!["--lease-namespace", lease_namespace, "--identity", identity];
    let selector = format!("strata-e2e/suite={lease_namespace}");
    match service {
        // Two replicas on one host need their own TLS ports.
        "admission-webhook" => args.extend(["--tls-address", &tls]),
        "rollout-operator" => args.extend(["--watch-namespace", lease_namespace]),
        _ => args.extend([
            "--layer-selector",
            &selector,
            "--default-source-namespace",
            lease_namespace,
        ]),
    }
    start_service(service, crate::support::cluster().kubeconfig(), &args)
}

/// Starts two replicas of `service` (see [`start_replica`]) and returns them once exactly one
/// leads: `[leader, standby]`.
pub async fn two_replicas(service: &str, lease_namespace: &str) -> Result<[ServiceProcess; 2]> {
    let one = start_replica(service, lease_namespace, "replica-1")?;
    let two = start_replica(service, lease_namespace, "replica-2")?;
    let first_leads = crate::support::eventually(
        &format!("one {service} replica leads"),
        Duration::from_secs(30),
        || async {
            Ok(match (one.leader().await.ok(), two.leader().await.ok()) {
                (Some(1.0), Some(0.0)) => Some(true),
                (Some(0.0), Some(1.0)) => Some(false),
                _ => None,
            })
        },
    )
    .await?;
    Ok(if first_leads { [one, two] } else { [two, one] })
}

/// Starts one of the workspace's layer services (`layer-controller`, `drift-observer`) for the
/// layers of one test: a free admin address, leader election off, only layers labelled
/// `strata-e2e/suite=<ns>`, sources defaulting to `ns`, then `extra`.
pub fn start_layer_service(binary: &str, ns: &str, extra: &[&str]) -> Result<ServiceProcess> {
    let selector = format!("strata-e2e/suite={ns}");
    let mut args = vec![
        "--leader-elect=false",
        "--layer-selector",
        selector.as_str(),
        "--default-source-namespace",
        ns,
    ];
    args.extend_from_slice(extra);
    start_service(binary, crate::support::cluster().kubeconfig(), &args)
}

/// Starts the admission-webhook binary for a test: its own admin port, Leases in `ns`, no
/// leader election, serving TLS at `tls_address`, then `extra` flags.
pub fn start_admission_webhook(
    ns: &str,
    tls_address: &str,
    extra: &[&str],
) -> Result<ServiceProcess> {
    let mut args = vec![
        "--lease-namespace",
        ns,
        "--leader-elect=false",
        "--tls-address",
        tls_address,
    ];
    args.extend_from_slice(extra);
    start_service(
        "admission-webhook",
        crate::support::cluster().kubeconfig(),
        &args,
    )
}

/// Deletes a test's layers in order (dependents first), waiting for each one's teardown by
/// its layer-controller (`controller`), then stops that controller. Best effort: cleanup.
pub fn delete_layers_then_stop(names: &[&str], mut controller: ServiceProcess) {
    for name in names {
        let _ = crate::support::cluster()
            .kubectl()
            .args([
                "delete",
                "addonslayer",
                name,
                "--wait=true",
                "--timeout=60s",
            ])
            .output();
    }
    controller.terminate_blocking();
}
