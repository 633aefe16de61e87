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
        Self::spawn_inner(binary, args, env, log_dir, false)
    }

    /// Like [`Self::spawn_with_env_blocking`], but the process is killed when the calling
    /// thread ends, even if the owner is killed without a chance to clean up (the demo: a
    /// `kill -9` of it must not leave services holding its ports). Only for the main thread
    /// of a long-lived program: the signal follows the thread, not the process.
    pub fn spawn_tied_blocking(
        binary: &Path,
        args: &[&str],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> Result<Self> {
        Self::spawn_inner(binary, args, env, log_dir, true)
    }

    fn spawn_inner(
        binary: &Path,
        args: &[&str],
        env: &[(String, String)],
        log_dir: &Path,
        tied: bool,
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
        // setpriv sets a parent-death signal and execs the binary (same pid).
        let mut command = if tied {
            let mut c = Command::new("setpriv");
            c.arg("--pdeathsig=KILL").arg("--").arg(binary);
            c
        } else {
            Command::new(binary)
        };
        let child = command
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

    /// The rollout-operator's reconciles of one rollout group
    /// (`rollout_operator_group_reconciles_total{rollout_group}`): a signal of that group only.
    pub async fn group_reconciles(&self, group: &str) -> Result<f64> {
        let label = format!("rollout_group=\"{group}\"");
        self.metric("rollout_operator_group_reconciles_total", &[&label])
            .await
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

    pub fn log_path(&self) -> &Path {
        &self.log
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

/// The value of `--flag VALUE` or `--flag=VALUE` in `args` (the last one given).
fn flag<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    let mut found = None;
    for (i, arg) in args.iter().enumerate() {
        if *arg == flag {
            found = args.get(i + 1).copied();
        } else if let Some(value) = arg.strip_prefix(flag).and_then(|v| v.strip_prefix('=')) {
            found = Some(value);
        }
    }
    found
}

/// The chart values that decide what RBAC the chart renders for a service started with
/// `args`: the same choices a user makes in values, read from the flags the chart would pass.
fn rbac_values(service: &str, args: &[&str]) -> Result<Vec<String>> {
    let mut sets = crate::release::alone(service);
    match service {
        "rollout-operator" => {
            // Namespaces chosen by label: the label as the chart's selector (equality only
            // here); which namespaces it may write in is a value of the test's own.
            if let Some(selector) = flag(args, "--watch-namespace-selector") {
                let (key, value) = selector
                    .split_once('=')
                    .filter(|(k, _)| !k.contains('.'))
                    .context("a test's --watch-namespace-selector is one `key=value` (no dots)")?;
                sets.push(format!(
                    "rolloutOperator.watchNamespaceSelector.matchLabels.{key}={value}"
                ));
                return Ok(sets);
            }
            // The chart's rollout-operator manages the namespaces it lists, a Role in each.
            let watch = flag(args, "--watch-namespace").context(
                "the chart's rollout-operator watches the namespaces it lists: pass --watch-namespace",
            )?;
            if watch.contains(',') {
                sets.push(format!("rolloutOperator.watchNamespaces={{{watch}}}"));
            } else {
                sets.push(format!("rolloutOperator.watchNamespace={watch}"));
            }
        }
        "layer-controller" => {
            if let Some(account) = flag(args, "--default-service-account") {
                sets.push(format!("layerController.defaultServiceAccount={account}"));
            }
        }
        "admission-webhook" => {
            if let Some(secret) = flag(args, "--tls-secret-name") {
                sets.push(format!("admissionWebhook.tls.secretName={secret}"));
            }
            if args.contains(&"--use-zone-tracker") {
                sets.push("admissionWebhook.useZoneTracker=true".into());
            }
            if let Some(name) = flag(args, "--zone-tracker-config-map-name") {
                sets.push(format!("admissionWebhook.zoneTrackerConfigMapName={name}"));
            }
        }
        _ => {}
    }
    Ok(sets)
}

/// The namespace a service started with `args` lives in, as its chart release would: where
/// its Lease is, else the one it watches or takes sources from.
fn release_namespace<'a>(args: &[&'a str]) -> Result<&'a str> {
    [
        "--lease-namespace",
        "--watch-namespace",
        "--default-source-namespace",
    ]
    .iter()
    .find_map(|f| flag(args, f))
    .context("the service's namespace: pass --lease-namespace")
}

/// Identities already made, by (cluster kubeconfig, namespace, service): the values they were
/// rendered with and the ServiceAccount's kubeconfig.
type Identities = std::collections::HashMap<(PathBuf, String, String), (Vec<String>, PathBuf)>;
static IDENTITIES: std::sync::Mutex<Option<Identities>> = std::sync::Mutex::new(None);

/// The kubeconfig `service` runs with in the tests: a token of the ServiceAccount the chart
/// creates for it, bound by exactly the RBAC `helm template` renders for a release in its
/// namespace (see [`rbac_values`]), applied to the cluster `admin_kubeconfig` reaches. Made
/// once per cluster, namespace and service; the cluster-scoped roles carry the release's
/// instance label (the namespace), by which [`crate::support::TestNamespace`] removes them.
pub fn chart_identity(admin_kubeconfig: &Path, service: &str, args: &[&str]) -> Result<PathBuf> {
    chart_identity_with(admin_kubeconfig, service, args, &[])
}

/// [`chart_identity`] for a release installed with these extra chart `values` (`--set`
/// syntax): a deployment choice no flag carries, such as where layers may impersonate.
pub fn chart_identity_with(
    admin_kubeconfig: &Path,
    service: &str,
    args: &[&str],
    values: &[&str],
) -> Result<PathBuf> {
    let namespace = release_namespace(args)?.to_string();
    let mut sets = rbac_values(service, args)?;
    sets.extend(values.iter().map(|v| v.to_string()));
    let key = (
        admin_kubeconfig.to_path_buf(),
        namespace.clone(),
        service.to_string(),
    );
    let mut identities = IDENTITIES.lock().unwrap_or_else(|e| e.into_inner());
    let identities = identities.get_or_insert_with(Default::default);
    if let Some((made_with, kubeconfig)) = identities.get(&key) {
        // The namespaced Roles have fixed names: a second set of rights would replace the first.
        anyhow::ensure!(
            *made_with == sets,
            "{service} already runs in {namespace} with other RBAC values ({made_with:?}, now {sets:?})"
        );
        return Ok(kubeconfig.clone());
    }
    let kubectl = crate::release::Kubectl {
        binary: crate::support::kubectl_binary(),
        kubeconfig: admin_kubeconfig.to_path_buf(),
    };
    let rendered =
        crate::release::Rendered::template(&crate::chart::helm(), &namespace, &namespace, &sets)?;
    kubectl.apply(&rendered.of_kinds(&crate::release::RBAC_KINDS))?;
    let account = rendered.service_account(service)?;
    let path = std::env::temp_dir().join(format!(
        "strata-e2e-{}-{namespace}-{account}.kubeconfig",
        std::process::id()
    ));
    let kubeconfig = kubectl.token_kubeconfig(&namespace, &account, "6h", &path)?;
    // RBAC reaches the API server's authorizer through its informers: wait until the account
    // holds a right every service's Role grants, so the service does not start forbidden
    // (`create` of Leases: `get` and `patch` are granted on its own Leases only, by name).
    let as_account = crate::release::Kubectl {
        binary: kubectl.binary.clone(),
        kubeconfig: kubeconfig.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while as_account
        .run(
            &["auth", "can-i", "create", "leases", "-n", &namespace],
            None,
        )
        .map(|out| out.trim() != "yes")
        .unwrap_or(true)
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{namespace}/{account} was not granted its Role within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    identities.insert(key, (sets, kubeconfig.clone()));
    Ok(kubeconfig)
}

/// Starts the rollout-operator for namespace `ns` alone (no leader election), with `extra`.
pub fn start_rollout_operator(ns: &str, extra: &[&str]) -> Result<ServiceProcess> {
    let mut args = vec![
        "--watch-namespace",
        ns,
        "--lease-namespace",
        ns,
        "--leader-elect=false",
    ];
    args.extend_from_slice(extra);
    start_service(
        "rollout-operator",
        crate::support::cluster().kubeconfig(),
        &args,
    )
}

/// Starts the workspace binary `service` on the cluster `admin_kubeconfig` reaches, as the
/// ServiceAccount the chart makes for it ([`chart_identity`]), with a free admin address, then
/// `args`, logging to the e2e log directory.
pub fn start_service(
    service: &str,
    admin_kubeconfig: &Path,
    args: &[&str],
) -> Result<ServiceProcess> {
    let kubeconfig = chart_identity(admin_kubeconfig, service, args)?;
    start_service_with(service, &kubeconfig, args)
}

/// Starts the workspace binary `service` with exactly this kubeconfig (a ServiceAccount's
/// from [`chart_identity`] behind a proxy, say), a free admin address and `args`.
pub fn start_service_with(
    service: &str,
    kubeconfig: &Path,
    args: &[&str],
) -> Result<ServiceProcess> {
    start_service_with_env(service, kubeconfig, args, &[])
}

/// [`start_service_with`] with extra environment variables (`OTEL_*`, say).
pub fn start_service_with_env(
    service: &str,
    kubeconfig: &Path,
    args: &[&str],
    env: &[(String, String)],
) -> Result<ServiceProcess> {
    let admin = format!("127.0.0.1:{}", crate::plane::free_port()?);
    let kubeconfig = kubeconfig.to_string_lossy();
    let mut all = vec![
        "--kubeconfig",
        kubeconfig.as_ref(),
        "--admin-address",
        admin.as_str(),
    ];
    all.extend_from_slice(args);
    ServiceProcess::spawn_with_env_blocking(
        &bin_dir().join(service),
        &all,
        env,
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
/// `strata-e2e/suite=<ns>`, sources defaulting to `ns`, then `extra`. The drift-observer
/// dry-runs as the release's dry-run identity, as the chart wires them.
pub fn start_layer_service(binary: &str, ns: &str, extra: &[&str]) -> Result<ServiceProcess> {
    start_layer_service_with(binary, ns, extra, &[])
}

/// [`start_layer_service`] of a release installed with these extra chart `values`.
pub fn start_layer_service_with(
    binary: &str,
    ns: &str,
    extra: &[&str],
    values: &[&str],
) -> Result<ServiceProcess> {
    start_layer_service_with_env(binary, ns, extra, values, &[])
}

/// [`start_layer_service_with`] with extra environment variables.
pub fn start_layer_service_with_env(
    binary: &str,
    ns: &str,
    extra: &[&str],
    values: &[&str],
    env: &[(String, String)],
) -> Result<ServiceProcess> {
    let selector = format!("strata-e2e/suite={ns}");
    let apply_as = format!("--apply-as=system:serviceaccount:{ns}:drift-observer-dry-run");
    let mut args = vec![
        "--leader-elect=false",
        "--layer-selector",
        selector.as_str(),
        "--default-source-namespace",
        ns,
    ];
    if binary == "drift-observer" {
        args.push(&apply_as);
    }
    args.extend_from_slice(extra);
    let kubeconfig = chart_identity_with(
        crate::support::cluster().kubeconfig(),
        binary,
        &args,
        values,
    )?;
    start_service_with_env(binary, &kubeconfig, &args, env)
}

/// Starts the admission-webhook binary for a test: its own admin port, Leases in `ns`, no
/// leader election, serving TLS at `tls_address`, then `extra` flags.
/// The admission-webhook's arguments for test namespace `ns`, serving TLS at `tls_address`,
/// without leader election. Scoped to the namespace: the undo loop of prepare-downscale then
/// never calls pods of a test running beside (through this server's stand-in address).
pub fn admission_webhook_args<'a>(ns: &'a str, tls_address: &'a str) -> Vec<&'a str> {
    vec![
        "--lease-namespace",
        ns,
        "--watch-namespace",
        ns,
        "--leader-elect=false",
        "--tls-address",
        tls_address,
    ]
}

pub fn start_admission_webhook(
    ns: &str,
    tls_address: &str,
    extra: &[&str],
) -> Result<ServiceProcess> {
    let mut args = admission_webhook_args(ns, tls_address);
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
