//! The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//! kwok, built from their Go modules (`e2e/plane/build.sh`) and run as local processes on
//! loopback with free ports, plus fake nodes in three zones.
//!
//! This module is synchronous on purpose: the components are started from the calling thread
//! with a parent-death signal (`setpriv --pdeathsig`), so they die with the process that owns
//! the plane even if it is killed without a chance to clean up.

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// The zones fake nodes are spread over.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// The CA (under the plane's `pki/`) of the client certificate kube-apiserver presents to
/// admission webhooks.
pub const WEBHOOK_CLIENT_CA: &str = "webhook-client-ca.crt";

/// Label that flips a pod on a kwok node to Running-but-NotReady (value `false`).
pub const FAKE_READY_LABEL: &str = "strata.dev/fake-ready";

/// This crate's directory (`e2e/`), found at run time: `CARGO_MANIFEST_DIR` under cargo, else
/// `e2e/` below the working directory (the Makefile and scripts run from the repository root),
/// else the path it was compiled at. The compile-time path alone is wrong when a shared cargo
/// cache holds a build made from another checkout (a CI clone) that is gone since.
pub fn e2e_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        return PathBuf::from(dir);
    }
    let here = std::env::current_dir()
        .map(|d| d.join("e2e"))
        .unwrap_or_default();
    if here.join("plane/build.sh").is_file() {
        return here;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Directory of the plane's build script, stage files and versions.
pub fn plane_source_dir() -> PathBuf {
    e2e_dir().join("plane")
}

/// A version pinned in `e2e/plane/versions.env` (`KEY=value`).
pub fn pinned_version(key: &str) -> Option<String> {
    let versions = std::fs::read_to_string(plane_source_dir().join("versions.env")).ok()?;
    versions
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().to_string())
}

/// The build cache: `$STRATA_CACHE`, else `~/.cache/strata`.
pub fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("STRATA_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/strata")))
}

/// A tool the plane build makes from its Go module: `$<env>` when set, else
/// `<cache>/bin/<name>-<version>/<name>` for the version `versions.env` pins under
/// `version_key`; an error saying to run `make plane-build` when it is not there.
pub fn cached_tool(env: &str, version_key: &str, name: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let version = pinned_version(version_key)
        .with_context(|| format!("{version_key} in e2e/plane/versions.env"))?;
    let path = cache_dir()
        .context("no cache directory ($STRATA_CACHE or $HOME)")?
        .join(format!("bin/{name}-{version}/{name}"));
    if !path.exists() {
        bail!("{} missing: run `make plane-build`", path.display());
    }
    Ok(path)
}

/// Where the component binaries live.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub kube: PathBuf,
    pub etcd: PathBuf,
    pub kwok: PathBuf,
    pub helm: PathBuf,
    /// What the build printed (`KEY=path` lines): the real node's pieces are found in it.
    build_output: String,
}

impl Binaries {
    /// Builds whatever is missing from the cache (cold: minutes; warm: instant) and returns
    /// the paths. The build's progress goes to our stderr.
    pub fn build() -> Result<Self> {
        use std::io::{BufRead as _, Read as _};
        let script = plane_source_dir().join("build.sh");
        let mut child = Command::new("bash")
            .arg(&script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", script.display()))?;
        // The build's progress is passed on as it comes; its own error line (a missing Go
        // toolchain, say) becomes our error instead, so it is said once.
        let mut error_line = None;
        if let Some(stderr) = child.stderr.take() {
            for line in std::io::BufReader::new(stderr).lines() {
                let line = line?;
                match line.strip_prefix("build-plane: error: ") {
                    Some(error) => error_line = Some(error.to_string()),
                    None => eprintln!("{line}"),
                }
            }
        }
        let mut stdout = String::new();
        if let Some(mut out) = child.stdout.take() {
            out.read_to_string(&mut stdout)?;
        }
        let status = child.wait()?;
        if let Some(error) = error_line {
            bail!("{error}");
        }
        if !status.success() {
            bail!(
                "building the local control plane failed ({status}): see the build-plane lines above, or run `bash {}`",
                script.display()
            );
        }
        let get = |key: &str| -> Result<PathBuf> {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
                .map(PathBuf::from)
                .ok_or_else(|| anyhow!("{} did not print {key}", script.display()))
        };
        Ok(Self {
            kube: get("KUBE_BIN")?,
            etcd: get("ETCD_BIN")?,
            kwok: get("KWOK_BIN")?,
            helm: get("HELM_BIN")?,
            build_output: stdout.clone(),
        })
    }

    /// The real node's programs, or one line naming what is missing.
    pub fn node(&self) -> Result<crate::node::NodeBinaries> {
        crate::node::NodeBinaries::find(&self.kube, &self.build_output)
    }

    pub fn kubectl(&self) -> PathBuf {
        self.kube.join("kubectl")
    }
}

/// A running control plane. Dropping it stops every component.
#[derive(Debug)]
pub struct Plane {
    dir: PathBuf,
    kubeconfig: PathBuf,
    binaries: Binaries,
    api_server: String,
    /// The running components, in start order.
    children: Vec<Component>,
    /// etcd's client port (what a restart of etcd waits for).
    etcd_port: u16,
    /// The real node, when asked for (`PlaneOptions::real_node`).
    node: Option<crate::node::RealNode>,
    /// Seconds from `start` to a plane with Ready nodes.
    pub startup: Duration,
}

/// How a plane is started.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlaneOptions {
    /// Besides the kwok nodes, a real node: kubelet, containerd and kube-proxy on this machine
    /// (`crate::node`). kube-apiserver then listens on the node's bridge address instead of
    /// loopback, so that pods reach it.
    pub real_node: bool,
}

/// One running component and how it was started, to start it again in place.
#[derive(Debug)]
struct Component {
    name: String,
    binary: PathBuf,
    args: Vec<String>,
    child: Child,
}

/// Starts `binary` with its output in `log`, tied to this process: setpriv sets a parent-death
/// signal and execs it, so if we die, it dies.
pub(crate) fn launch_tied(
    name: &str,
    binary: &Path,
    args: &[String],
    log: fs::File,
) -> Result<Child> {
    Command::new("setpriv")
        .arg("--pdeathsig=KILL")
        .arg("--")
        .arg(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {name} ({})", binary.display()))
}

/// A free TCP port on loopback. The port is released before use, so another process could
/// take it in between; on a test machine that race is rare and start-up reports it clearly.
pub fn free_port() -> Result<u16> {
    // A port is free only until someone binds it; the kernel may hand the same one to the
    // next bind(0) once this listener closes. Two ports asked for before either is bound (a
    // test's TLS port, then the service's admin port) must differ: a port is never handed
    // out twice in one process (two servers with SO_REUSEPORT would otherwise share it, and
    // kube-apiserver's webhook calls would land on the admin server half the time).
    static GIVEN: std::sync::Mutex<Option<std::collections::HashSet<u16>>> =
        std::sync::Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(Default::default);
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
        let port = listener.local_addr()?.port();
        if given.insert(port) {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port not handed out before in 100 tries")
}

struct Pki {
    /// The node's certificates (made only for a plane with a real node).
    node: Option<crate::node::NodePki>,
    ca_cert: PathBuf,
    ca_key: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    admin_cert: PathBuf,
    admin_key: PathBuf,
}

fn write_file(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

/// A new self-signed CA named `common_name`.
fn new_ca(common_name: &str) -> Result<CertifiedIssuer<'static, KeyPair>> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(CertifiedIssuer::self_signed(params, KeyPair::generate()?)?)
}

/// A certificate signed by `ca`, written as `<dir>/<name>.crt` and `.key`.
fn issue(
    dir: &Path,
    name: &str,
    ca: &CertifiedIssuer<'static, KeyPair>,
    params: CertificateParams,
) -> Result<(PathBuf, PathBuf)> {
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, ca)?;
    let (cert_path, key_path) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    write_file(&cert_path, &cert.pem())?;
    write_file(&key_path, &key.serialize_pem())?;
    Ok((cert_path, key_path))
}

/// Client certificate parameters for `common_name` in `organization` (if any).
fn client_params(common_name: &str, organization: Option<&str>) -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        params
            .distinguished_name
            .push(DnType::OrganizationName, org);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    Ok(params)
}

fn make_pki(dir: &Path, real_node: bool) -> Result<Pki> {
    fs::create_dir_all(dir)?;
    let ca = new_ca("strata-e2e-ca")?;

    let mut serving = CertificateParams::new(vec![
        "localhost".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
    ])?;
    serving
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse()?));
    serving
        .subject_alt_names
        .push(SanType::IpAddress("10.96.0.1".parse()?));
    // Where a plane with a real node listens (its bridge address).
    serving
        .subject_alt_names
        .push(SanType::IpAddress(crate::node::NODE_IP.parse()?));
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_key = KeyPair::generate()?;
    let serving_cert = serving.signed_by(&serving_key, &ca)?;

    // system:masters is bound to cluster-admin by the API server's bootstrap RBAC policy.
    let mut admin = CertificateParams::new(Vec::<String>::new())?;
    admin
        .distinguished_name
        .push(DnType::CommonName, "strata-e2e-admin");
    admin
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_key = KeyPair::generate()?;
    let admin_cert = admin.signed_by(&admin_key, &ca)?;

    // The client certificate kube-apiserver presents to admission webhooks (its
    // AdmissionConfiguration, below), from a CA of its own: a webhook server started with
    // `--client-ca-file <dir>/webhook-client-ca.crt` accepts kube-apiserver and no one else.
    let webhook_ca = new_ca("strata-e2e-webhook-client-ca")?;
    let mut webhook_client = CertificateParams::new(Vec::<String>::new())?;
    webhook_client
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver-webhook-client");
    webhook_client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let webhook_client_key = KeyPair::generate()?;
    let webhook_client_cert = webhook_client.signed_by(&webhook_client_key, &webhook_ca)?;

    let sa_key = KeyPair::generate()?;

    let node = if real_node {
        let node_name = crate::node::NODE_NAME;
        let mut serving = CertificateParams::new(vec![node_name.to_string()])?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress(crate::node::NODE_IP.parse()?));
        serving
            .distinguished_name
            .push(DnType::CommonName, node_name);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        Some(crate::node::NodePki {
            ca_cert: dir.join("ca.crt"),
            kubelet_client: issue(
                dir,
                "kubelet-client",
                &ca,
                client_params(&format!("system:node:{node_name}"), Some("system:nodes"))?,
            )?,
            kubelet_serving: issue(dir, "kubelet-serving", &ca, serving)?,
            kube_proxy_client: issue(
                dir,
                "kube-proxy-client",
                &ca,
                client_params("system:kube-proxy", None)?,
            )?,
        })
    } else {
        None
    };

    let pki = Pki {
        node,
        ca_cert: dir.join("ca.crt"),
        ca_key: dir.join("ca.key"),
        sa_key: dir.join("sa.key"),
        sa_pub: dir.join("sa.pub"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
    };
    write_file(&pki.ca_cert, &ca.pem())?;
    write_file(&pki.ca_key, &ca.key().serialize_pem())?;
    write_file(&pki.sa_key, &sa_key.serialize_pem())?;
    write_file(&pki.sa_pub, &sa_key.public_key_pem())?;
    write_file(&pki.serving_cert, &serving_cert.pem())?;
    write_file(&pki.serving_key, &serving_key.serialize_pem())?;
    write_file(&pki.admin_cert, &admin_cert.pem())?;
    write_file(&pki.admin_key, &admin_key.serialize_pem())?;
    write_file(&dir.join(WEBHOOK_CLIENT_CA), &webhook_ca.pem())?;
    let (client_cert, client_key) = (
        dir.join("webhook-client.crt"),
        dir.join("webhook-client.key"),
    );
    write_file(&client_cert, &webhook_client_cert.pem())?;
    write_file(&client_key, &webhook_client_key.serialize_pem())?;
    // kube-apiserver's credentials for webhooks: one user matching every webhook host.
    write_file(
        &dir.join("webhook-client.kubeconfig"),
        &format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: '*'\n  user:\n    client-certificate: {}\n    client-key: {}\n",
            client_cert.display(),
            client_key.display()
        ),
    )?;
    let plugin = |name: &str| {
        format!(
            "- name: {name}\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
            dir.join("webhook-client.kubeconfig").display()
        )
    };
    write_file(
        &dir.join("admission-config.yaml"),
        &format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
            plugin("ValidatingAdmissionWebhook"),
            plugin("MutatingAdmissionWebhook")
        ),
    )?;
    Ok(pki)
}

fn kubeconfig_yaml(server: &str, pki: &Pki) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: strata-e2e
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: strata-e2e-admin
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: strata-e2e
  context:
    cluster: strata-e2e
    user: strata-e2e-admin
    namespace: default
current-context: strata-e2e
",
        ca = pki.ca_cert.display(),
        cert = pki.admin_cert.display(),
        key = pki.admin_key.display(),
    )
}

fn node_manifest(name: &str, zone: &str) -> String {
    format!(
        "apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    kubernetes.io/hostname: {name}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: {zone}
    type: kwok
spec: {{}}
"
    )
}

impl Plane {
    /// Starts a plane in `dir` (created; any previous plane's data there is removed). Its
    /// ports are picked free just before the components bind them; when one was taken in
    /// between (a component exits with "address already in use"), the plane is started again
    /// on new ports, up to three times.
    pub fn start(dir: &Path) -> Result<Self> {
        Self::start_with(dir, PlaneOptions::default())
    }

    /// [`Plane::start`], with a real node when `options` ask for one.
    pub fn start_with(dir: &Path, options: PlaneOptions) -> Result<Self> {
        let mut attempt = 1;
        loop {
            match Self::start_once(dir, options) {
                Err(e) if attempt < 3 && format!("{e:#}").contains("address already in use") => {
                    eprintln!("strata-plane: a port was taken while starting; starting again");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    fn start_once(dir: &Path, options: PlaneOptions) -> Result<Self> {
        let started = Instant::now();
        let binaries = Binaries::build()?;
        fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        // A real node's lock, taken (and what a dead node left swept, its mounts under this
        // directory among them) before the directory is emptied.
        let node_lock = if options.real_node {
            let node_binaries = binaries.node()?;
            Some((crate::node::claim(&dir)?, node_binaries))
        } else {
            crate::node::unmount_under(&dir);
            None
        };
        fs::remove_dir_all(&dir).with_context(|| format!("cleaning {}", dir.display()))?;
        fs::create_dir_all(dir.join("logs"))?;
        let pki = make_pki(&dir.join("pki"), options.real_node)?;

        let etcd_port = free_port()?;
        let etcd_peer_port = free_port()?;
        let api_port = free_port()?;
        // With a real node kube-apiserver listens on the node's bridge, where pods reach it.
        let api_host = if options.real_node {
            crate::node::create_bridge()?;
            crate::node::NODE_IP
        } else {
            "127.0.0.1"
        };
        let api_server = format!("https://{api_host}:{api_port}");
        let kubeconfig = dir.join("kubeconfig");
        write_file(&kubeconfig, &kubeconfig_yaml(&api_server, &pki))?;

        let mut plane = Plane {
            dir: dir.clone(),
            kubeconfig: kubeconfig.clone(),
            binaries: binaries.clone(),
            api_server: api_server.clone(),
            children: Vec::new(),
            etcd_port,
            node: None,
            startup: Duration::ZERO,
        };
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd_peer = format!("http://127.0.0.1:{etcd_peer_port}");
        plane.spawn(
            "etcd",
            &binaries.etcd.join("etcd"),
            &[
                "--name=strata".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={etcd_peer}"),
                format!("--initial-advertise-peer-urls={etcd_peer}"),
                format!("--initial-cluster=strata={etcd_peer}"),
                // Test data is disposable: skipping fsync makes every write much cheaper.
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
        )?;
        plane.wait_tcp("etcd", etcd_port, Duration::from_secs(30))?;

        let kc = kubeconfig.display().to_string();
        let audit_policy = dir.join("audit-policy.yaml");
        write_file(&audit_policy, AUDIT_POLICY)?;
        plane.spawn(
            "kube-apiserver",
            &binaries.kube.join("kube-apiserver"),
            &[
                format!("--etcd-servers={etcd_url}"),
                format!("--bind-address={api_host}"),
                format!("--advertise-address={api_host}"),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", dir.join("pki").display()),
                format!("--tls-cert-file={}", pki.serving_cert.display()),
                format!("--tls-private-key-file={}", pki.serving_key.display()),
                format!("--client-ca-file={}", pki.ca_cert.display()),
                format!("--service-account-key-file={}", pki.sa_pub.display()),
                format!(
                    "--service-account-signing-key-file={}",
                    pki.sa_key.display()
                ),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                // The Node authorizer and NodeRestriction: what a real node's kubelet may do.
                "--authorization-mode=Node,RBAC".into(),
                // A namespace may send its pods to the real node (`node::namespace_annotations`).
                "--enable-admission-plugins=NodeRestriction,PodNodeSelector,PodTolerationRestriction".into(),
                format!("--kubelet-certificate-authority={}", pki.ca_cert.display()),
                format!("--kubelet-client-certificate={}", pki.admin_cert.display()),
                format!("--kubelet-client-key={}", pki.admin_key.display()),
                "--kubelet-preferred-address-types=InternalIP".into(),
                // A client certificate for every admission webhook call (see make_pki).
                format!(
                    "--admission-control-config-file={}",
                    dir.join("pki").join("admission-config.yaml").display()
                ),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--allow-privileged=true".into(),
                // Webhooks referenced by Service are reached through its endpoints (there is no
                // kube-proxy here), as the drop-in test's anchor-style install needs.
                "--enable-aggregator-routing=true".into(),
                // Pod deletions only, with who asked and what was deleted: the fault tests
                // tell the rollout-operator's deletions from the fake kubelet's by it.
                format!("--audit-policy-file={}", audit_policy.display()),
                format!(
                    "--audit-log-path={}",
                    dir.join("logs").join("audit.log").display()
                ),
                "--audit-log-format=json".into(),
                // A benchmark may ask for /debug/pprof, to say where the API server's CPU goes.
                format!(
                    "--profiling={}",
                    std::env::var_os("STRATA_PLANE_APISERVER_PROFILING").is_some()
                ),
                "--v=1".into(),
            ],
        )?;
        plane.wait_api_ready(Duration::from_secs(90))?;

        let cm_port = free_port()?;
        // Its client limit (default 20 requests/s, burst 30, as in Flux's kind runs) sets the
        // pace of every Deployment rollout; a benchmark may raise it to see past it.
        let cm_qps: Option<u32> = std::env::var("STRATA_PLANE_CONTROLLER_MANAGER_QPS")
            .ok()
            .and_then(|v| v.parse().ok());
        let mut cm_limits = Vec::new();
        if let Some(qps) = cm_qps {
            cm_limits.push(format!("--kube-api-qps={qps}"));
            cm_limits.push(format!("--kube-api-burst={}", qps.saturating_mul(3) / 2));
        }
        plane.spawn(
            "kube-controller-manager",
            &binaries.kube.join("kube-controller-manager"),
            &[
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={cm_port}"),
                format!("--cert-dir={}", dir.join("controller-manager").display()),
                "--leader-elect=false".into(),
                format!(
                    "--service-account-private-key-file={}",
                    pki.sa_key.display()
                ),
                format!("--root-ca-file={}", pki.ca_cert.display()),
                format!("--cluster-signing-cert-file={}", pki.ca_cert.display()),
                format!("--cluster-signing-key-file={}", pki.ca_key.display()),
                "--use-service-account-credentials=false".into(),
                // HorizontalPodAutoscalers act every 2 s instead of 15 s, so a test of a
                // downscale an HPA drives (e2e/tests/hpa.rs) waits seconds, not minutes.
                "--horizontal-pod-autoscaler-sync-period=2s".into(),
                "--profiling=false".into(),
                "--v=1".into(),
            ]
            .into_iter()
            .chain(cm_limits)
            .collect::<Vec<_>>(),
        )?;
        let scheduler_port = free_port()?;
        plane.spawn(
            "kube-scheduler",
            &binaries.kube.join("kube-scheduler"),
            &[
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={scheduler_port}"),
                format!("--cert-dir={}", dir.join("scheduler").display()),
                "--leader-elect=false".into(),
                "--profiling=false".into(),
                "--v=1".into(),
            ],
        )?;
        plane.spawn(
            "kwok",
            &binaries.kwok.join("kwok"),
            &[
                format!("--kubeconfig={kc}"),
                format!(
                    "--config={}",
                    plane_source_dir().join("stages.yaml").display()
                ),
                "--manage-all-nodes=false".into(),
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
                "--cidr=10.244.0.0/16".into(),
                "--node-ip=10.0.0.1".into(),
            ],
        )?;

        let nodes: String = ZONES
            .iter()
            .map(|zone| node_manifest(&format!("kwok-{zone}"), zone))
            .collect::<Vec<_>>()
            .join("---\n");
        plane.kubectl_stdin(&["apply", "-f", "-"], &nodes)?;
        plane.kubectl_retry(
            &[
                "wait",
                "--for=condition=Ready",
                "node",
                "--all",
                "--timeout=60s",
            ],
            Duration::from_secs(90),
        )?;
        // Pods are admitted only once the namespace's default ServiceAccount exists.
        plane.kubectl_retry(
            &["get", "serviceaccount", "default", "-n", "default"],
            Duration::from_secs(60),
        )?;
        if let (Some((lock, node_binaries)), Some(node_pki)) = (node_lock, pki.node.clone()) {
            plane.node = Some(crate::node::RealNode::start(crate::node::NodeConfig {
                dir: &dir.join("node"),
                binaries: node_binaries,
                pki: node_pki,
                api_server: &api_server,
                admin_kubeconfig: &kubeconfig,
                kubectl: &binaries.kubectl(),
                lock,
            })?);
        }
        plane.startup = started.elapsed();
        Ok(plane)
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn api_server(&self) -> &str {
        &self.api_server
    }

    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// The real node, when the plane has one.
    pub fn real_node(&self) -> Option<&crate::node::RealNode> {
        self.node.as_ref()
    }

    /// A kubectl command already pointed at this plane.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(self.binaries.kubectl());
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()));
        cmd
    }

    fn spawn(&mut self, name: &str, binary: &Path, args: &[String]) -> Result<()> {
        let child = self.launch(name, binary, args, false)?;
        self.children.push(Component {
            name: name.to_string(),
            binary: binary.to_path_buf(),
            args: args.to_vec(),
            child,
        });
        Ok(())
    }

    /// Starts one component; its output goes to `logs/<name>.log` (appended to on a restart).
    fn launch(&self, name: &str, binary: &Path, args: &[String], append: bool) -> Result<Child> {
        let log = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(self.dir.join("logs").join(format!("{name}.log")))?;
        launch_tied(name, binary, args, log)
    }

    /// Kills one component (`etcd`, `kube-apiserver`, …) with SIGKILL, as a crash or an OOM
    /// kill would, leaves it down for `down`, then starts it again with the same command line
    /// and data, and waits until it serves again (etcd: its client port; kube-apiserver:
    /// `/readyz`). Returns how long it was unreachable in all.
    pub fn restart(&mut self, name: &str, down: Duration) -> Result<Duration> {
        let index = self
            .children
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| anyhow!("no running plane component named {name}"))?;
        let killed = Instant::now();
        {
            let child = &mut self.children[index].child;
            child.kill().with_context(|| format!("killing {name}"))?;
            child.wait()?;
        }
        std::thread::sleep(down);
        let component = &self.children[index];
        let child = self.launch(name, &component.binary, &component.args, true)?;
        self.children[index].child = child;
        match name {
            "kube-apiserver" => self.wait_api_ready(Duration::from_secs(90))?,
            "etcd" => {
                self.wait_tcp("etcd", self.etcd_port, Duration::from_secs(30))?;
                // The API server reconnects on its own; ready means it reached etcd again.
                self.wait_api_ready(Duration::from_secs(90))?;
            }
            _ => {}
        }
        Ok(killed.elapsed())
    }

    fn check_alive(&mut self) -> Result<()> {
        for Component { name, child, .. } in &mut self.children {
            if let Some(status) = child.try_wait()? {
                let log = self.dir.join("logs").join(format!("{name}.log"));
                bail!(
                    "{name} exited ({status}); last lines of {}:\n{}",
                    log.display(),
                    tail(&log, 30)
                );
            }
        }
        Ok(())
    }

    fn wait_tcp(&mut self, name: &str, port: u16, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                bail!("{name} did not listen on 127.0.0.1:{port} within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_api_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.kubectl().args(["get", "--raw", "/readyz"]).output()?;
            if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok" {
                return Ok(());
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver not ready within {timeout:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Result<String> {
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("kubectl stdin"))?
            .write_all(stdin.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn kubectl_retry(&mut self, args: &[&str], timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.kubectl().args(args).output()?;
            if out.status.success() {
                return Ok(());
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                bail!(
                    "kubectl {} kept failing for {timeout:?}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Stops every component, newest first: SIGTERM, then SIGKILL after 10 s. A real node
    /// stops first, while kube-apiserver still answers its kubelet.
    pub fn stop(&mut self) {
        let node = self.node.take().map(|mut node| {
            node.stop();
            node
        });
        while let Some(Component {
            name, mut child, ..
        }) = self.children.pop()
        {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        eprintln!("plane: {name} did not stop on SIGTERM; killing it");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        // The bridge kube-apiserver listened on goes last.
        if let Some(node) = node {
            node.release();
        }
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What kube-apiserver records in `logs/audit.log`: every pod deletion with its request (the
/// delete options and their preconditions) and answer (the pod as deleted); and who did what,
/// without bodies, for every request of a ServiceAccount (the services run as their chart
/// ServiceAccounts: `rbac_coverage` checks each verb the chart grants was used); who changed a
/// StatefulSet's `/scale` and how it was answered (an HPA's update must never conflict with
/// prepare-downscale, e2e/tests/hpa.rs); nothing else.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: RequestResponse
  verbs: [delete]
  resources: [{group: \"\", resources: [pods]}]
- level: Metadata
  userGroups: [system:serviceaccounts]
- level: Metadata
  verbs: [update, patch]
  resources: [{group: apps, resources: [statefulsets/scale]}]
- level: None
";

/// One pod deletion from the API server's audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDeletion {
    pub namespace: String,
    pub name: String,
    /// The deleted pod's UID and `controller-revision-hash` label, from the answer.
    pub uid: String,
    pub revision: String,
    /// The client's User-Agent (Strata's services send `strata-<service>/<version>`).
    pub user_agent: String,
    pub code: u16,
}

impl Plane {
    /// Every pod deletion the API server answered so far, in order (see [`AUDIT_POLICY`]).
    pub fn pod_deletions(&self) -> Result<Vec<PodDeletion>> {
        pod_deletions(&self.dir.join("logs").join("audit.log"))
    }
}

/// The pod deletions of an audit log written under [`AUDIT_POLICY`].
pub fn pod_deletions(log: &Path) -> Result<Vec<PodDeletion>> {
    let text = fs::read_to_string(log).with_context(|| log.display().to_string())?;
    let mut deletions = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let event: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: {line}", log.display()))?;
        if event["verb"] != "delete" || event["objectRef"]["resource"] != "pods" {
            continue;
        }
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let pod = &event["responseObject"];
        deletions.push(PodDeletion {
            namespace: text(&event["objectRef"]["namespace"]),
            name: text(&event["objectRef"]["name"]),
            uid: text(&pod["metadata"]["uid"]),
            revision: text(&pod["metadata"]["labels"]["controller-revision-hash"]),
            user_agent: text(&event["userAgent"]),
            code: event["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or_default(),
        });
    }
    Ok(deletions)
}

/// Every change of a StatefulSet's `/scale` in `ns` an audit log written under
/// [`AUDIT_POLICY`] holds, as (user agent, verb, name, response code): who rescaled what, and
/// whether it was answered with a conflict.
pub fn scale_writes(log: &Path, ns: &str) -> Result<Vec<(String, String, String, i64)>> {
    let text = fs::read_to_string(log).with_context(|| log.display().to_string())?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["objectRef"]["resource"] == "statefulsets"
                && e["objectRef"]["subresource"] == "scale"
                && e["objectRef"]["namespace"] == ns
                && e["stage"] == "ResponseComplete"
        })
        .map(|e| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            (
                text(&e["userAgent"]),
                text(&e["verb"]),
                text(&e["objectRef"]["name"]),
                e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .collect())
}

/// The last `lines` lines of a file, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
