//! The plane's real node (`strata-plane up --real-node`): a kubelet, containerd with runc, the
//! CNI bridge plugin and kube-proxy on this machine, so that images run as containers, probes
//! are made by a kubelet and kube-apiserver reaches pods through Services.
//!
//! Addresses: the plane creates the bridge [`BRIDGE`] with [`NODE_IP`] (the node's address, and
//! the address kube-apiserver listens on, so pods reach it through the `kubernetes` Service); pods
//! get addresses of [`POD_SUBNET`] on it, with a route to the Service range only (no default
//! route), and this machine's IP forwarding is left as it is (off here): nothing a pod sends is
//! routed anywhere but the bridge and this host. The Service range is routed onto the bridge too,
//! so a Service address kube-proxy has not programmed goes nowhere.
//!
//! The node is tainted [`NODE_TAINT`] and labelled [`NODE_LABEL`]: the kwok nodes keep every pod
//! that does not ask for it. A namespace asks for it with [`namespace_annotations`] (upstream's
//! `PodNodeSelector` and `PodTolerationRestriction` admission plugins), so a chart is installed
//! onto the real node unchanged.
//!
//! The node holds what is machine-wide (the bridge, kube-proxy's iptables chains, the `kubepods`
//! cgroups): one per machine, taken with a lock. Everything a node leaves behind — containers whose
//! runtime was killed with the plane, mounts under its directory, the bridge, iptables chains — is
//! swept when it stops and again before the next node starts.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};

/// The node's name.
pub const NODE_NAME: &str = "strata-node";
/// The bridge pods are attached to.
pub const BRIDGE: &str = "strata0";
/// The node's address, on the bridge: the kubelet's, and kube-apiserver's.
pub const NODE_IP: &str = "10.250.0.1";
/// The pods' addresses (kwok's fake pod addresses are 10.244.0.0/16: apart).
pub const POD_SUBNET: &str = "10.250.0.0/24";
/// kube-apiserver's Service range (`--service-cluster-ip-range`).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The label only the real node has.
pub const NODE_LABEL: (&str, &str) = ("strata.dev/node", "real");
/// The taint that keeps every pod off the real node unless it tolerates it.
pub const NODE_TAINT: &str = "strata.dev/real-node";
/// The zone the real node reports (`topology.kubernetes.io/zone`).
pub const NODE_ZONE: &str = "zone-real";

/// Where the lock naming the machine's running real node lives.
const LOCK_FILE: &str = "/run/strata-real-node.lock";

/// The annotations that put every pod of a namespace on the real node: a node selector and a
/// default toleration of its taint, applied by kube-apiserver's `PodNodeSelector` and
/// `PodTolerationRestriction` admission plugins.
pub fn namespace_annotations() -> [(&'static str, String); 2] {
    [
        (
            "scheduler.alpha.kubernetes.io/node-selector",
            format!("{}={}", NODE_LABEL.0, NODE_LABEL.1),
        ),
        (
            "scheduler.alpha.kubernetes.io/defaultTolerations",
            format!(r#"[{{"key":"{NODE_TAINT}","operator":"Exists","effect":"NoSchedule"}}]"#),
        ),
    ]
}

/// The programs a real node runs, found before anything starts.
#[derive(Clone, Debug)]
pub struct NodeBinaries {
    pub kubelet: PathBuf,
    pub kube_proxy: PathBuf,
    pub containerd: PathBuf,
    pub runc: PathBuf,
    pub ctr: PathBuf,
    pub crictl: PathBuf,
    pub cni: PathBuf,
    pub pause_archive: PathBuf,
    pub pause_image: String,
}

impl NodeBinaries {
    /// Checks the host can run a node: root, cgroups, the Debian packages and what the plane
    /// build made. The error is one line naming what is missing and how to get it.
    pub fn find(kube_bin: &Path, build_output: &str) -> Result<Self> {
        Self::find_on(&Host::this(), kube_bin, build_output)
    }

    /// [`NodeBinaries::find`] on a host described by `host` (this one, or a test's).
    fn find_on(host: &Host, kube_bin: &Path, build_output: &str) -> Result<Self> {
        let get = |key: &str| {
            build_output
                .lines()
                .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
                .map(str::to_string)
                .ok_or_else(|| anyhow!("e2e/plane/build.sh did not print {key}"))
        };
        if !host.root {
            bail!(
                "the real node needs root (a kubelet, containerd and kube-proxy set up cgroups, mounts and iptables): run as root, or without --real-node"
            );
        }
        if !host.cgroups {
            bail!(
                "the real node needs cgroups mounted at /sys/fs/cgroup (v1 with a memory controller, or v2): this host has neither"
            );
        }
        let packages = "install Debian's containerd, runc and iptables packages as root (`make plane-build` does it with apt when it can)";
        let tool = |name: &str| -> Result<PathBuf> {
            which(&host.path, name)
                .ok_or_else(|| anyhow!("the real node needs `{name}` on PATH: {packages}"))
        };
        for name in ["iptables", "iptables-restore", "ip", "umount", "setpriv"] {
            tool(name)?;
        }
        let built = |path: PathBuf| -> Result<PathBuf> {
            if path.exists() {
                Ok(path)
            } else {
                bail!(
                    "the real node needs {}: run `make plane-build` (it needs gcc and podman for the pause image)",
                    path.display()
                )
            }
        };
        Ok(Self {
            kubelet: built(kube_bin.join("kubelet"))?,
            kube_proxy: built(kube_bin.join("kube-proxy"))?,
            containerd: tool("containerd")?,
            runc: tool("runc")?,
            ctr: tool("ctr")?,
            crictl: built(PathBuf::from(get("CRICTL_BIN")?).join("crictl"))?,
            cni: built(PathBuf::from(get("CNI_BIN")?).join("bridge"))?
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            pause_archive: built(PathBuf::from(get("PAUSE_ARCHIVE")?))?,
            pause_image: get("PAUSE_IMAGE")?,
        })
    }
}

/// The certificates the node's components present, signed by the plane's CA (see
/// `plane::make_pki`).
#[derive(Clone, Debug)]
pub struct NodePki {
    pub ca_cert: PathBuf,
    /// `system:node:<name>` in `system:nodes`: what the Node authorizer and NodeRestriction
    /// expect of a kubelet.
    pub kubelet_client: (PathBuf, PathBuf),
    /// The kubelet's serving certificate for [`NODE_IP`] (kube-apiserver verifies it).
    pub kubelet_serving: (PathBuf, PathBuf),
    /// `system:kube-proxy`, bound to `system:node-proxier` by the bootstrap policy.
    pub kube_proxy_client: (PathBuf, PathBuf),
}

/// One process of the node.
#[derive(Debug)]
struct NodeProcess {
    name: &'static str,
    child: std::process::Child,
}

/// A running real node. [`RealNode::stop`] (also on drop) stops it and sweeps what it left.
#[derive(Debug)]
pub struct RealNode {
    dir: PathBuf,
    binaries: NodeBinaries,
    processes: Vec<NodeProcess>,
    /// Held while the node runs: the machine-wide pieces are this node's.
    _lock: fs::File,
}

/// Takes the machine's real-node lock for `plane_dir`, first sweeping whatever a node that
/// is no longer running left behind (in any directory). Call before the plane's directory is
/// removed: a dead node's mounts live under it.
pub fn claim(plane_dir: &Path) -> Result<fs::File> {
    let lock = fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(false)
        .open(LOCK_FILE)
        .with_context(|| format!("opening {LOCK_FILE}"))?;
    if lock.try_lock().is_err() {
        let holder = fs::read_to_string(LOCK_FILE).unwrap_or_default();
        let holder: Vec<&str> = holder.lines().filter(|l| !l.trim().is_empty()).collect();
        bail!(
            "another plane's real node runs on this machine ({}): one real node per machine; stop that plane first, or start this one without --real-node",
            holder.join(", ")
        );
    }
    // The previous holder (if any) is gone: sweep its node and ours.
    let previous = fs::read_to_string(LOCK_FILE).unwrap_or_default();
    for line in previous.lines() {
        if let Some(dir) = line.strip_prefix("dir=") {
            sweep(Path::new(dir), None);
        }
    }
    sweep(&plane_dir.join("node"), None);
    delete_bridge();
    fs::write(
        LOCK_FILE,
        format!(
            "pid={}\ndir={}\n",
            std::process::id(),
            plane_dir.join("node").display()
        ),
    )?;
    Ok(lock)
}

/// Creates the bridge with the node's address and routes the Service range onto it. Done
/// before kube-apiserver starts: it listens on [`NODE_IP`].
pub fn create_bridge() -> Result<()> {
    delete_bridge();
    run("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
    run(
        "ip",
        &["addr", "add", &format!("{NODE_IP}/24"), "dev", BRIDGE],
    )?;
    run("ip", &["link", "set", BRIDGE, "up"])?;
    run(
        "ip",
        &["route", "add", SERVICE_CIDR, "dev", BRIDGE, "src", NODE_IP],
    )?;
    Ok(())
}

fn delete_bridge() {
    if Path::new("/sys/class/net").join(BRIDGE).exists() {
        let _ = run("ip", &["link", "del", BRIDGE]);
    }
}

/// What the node needs from the plane to start.
#[derive(Debug)]
pub struct NodeConfig<'a> {
    pub dir: &'a Path,
    pub binaries: NodeBinaries,
    pub pki: NodePki,
    /// kube-apiserver, as the node reaches it (`https://NODE_IP:port`).
    pub api_server: &'a str,
    /// The plane's admin kubeconfig (to wait for the node to be Ready).
    pub admin_kubeconfig: &'a Path,
    pub kubectl: &'a Path,
    pub lock: fs::File,
}

impl RealNode {
    /// Starts containerd, imports the pause image, starts the kubelet and kube-proxy, and waits
    /// until the node is Ready.
    pub fn start(config: NodeConfig<'_>) -> Result<Self> {
        let dir = config.dir.to_path_buf();
        for sub in [
            "containerd",
            "cni/conf",
            "cni/ipam",
            "kubelet/root",
            "logs/pods",
            "kube-proxy",
        ] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let mut node = RealNode {
            dir: dir.clone(),
            binaries: config.binaries.clone(),
            processes: Vec::new(),
            _lock: config.lock,
        };
        let b = &config.binaries;
        write(&dir.join("cni/conf/10-strata.conflist"), &cni_config(&dir))?;
        write(
            &dir.join("containerd/config.toml"),
            &containerd_config(&dir, b),
        )?;
        node.spawn(
            "containerd",
            &b.containerd,
            &[
                "--config".into(),
                dir.join("containerd/config.toml").display().to_string(),
            ],
        )?;
        node.wait_for("containerd", Duration::from_secs(30), |node| {
            Ok(node.containerd_socket().exists()
                && node
                    .ctr(&["version"])
                    .map(|o| o.status.success())
                    .unwrap_or(false))
        })?;
        // The pause image is imported, never pulled: nothing here reaches a registry.
        let out = node
            .ctr(&["images", "import", &b.pause_archive.display().to_string()])
            .context("importing the pause image")?;
        if !out.status.success() {
            bail!(
                "importing the pause image into the node's containerd failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }

        let kubelet_port = crate::plane::free_port()?;
        let kubelet_healthz = crate::plane::free_port()?;
        write(
            &dir.join("kubelet/kubeconfig"),
            &component_kubeconfig(
                config.api_server,
                &config.pki.ca_cert,
                &config.pki.kubelet_client,
            ),
        )?;
        write(
            &dir.join("kubelet/config.yaml"),
            &kubelet_config(&dir, &config.pki, kubelet_port, kubelet_healthz),
        )?;
        node.spawn(
            "kubelet",
            &b.kubelet,
            &[
                format!("--config={}", dir.join("kubelet/config.yaml").display()),
                format!("--kubeconfig={}", dir.join("kubelet/kubeconfig").display()),
                format!("--root-dir={}", dir.join("kubelet/root").display()),
                format!("--hostname-override={NODE_NAME}"),
                format!("--node-ip={NODE_IP}"),
                format!(
                    "--node-labels={}={},topology.kubernetes.io/zone={NODE_ZONE}",
                    NODE_LABEL.0, NODE_LABEL.1
                ),
                "--v=1".into(),
            ],
        )?;

        let proxy_health = crate::plane::free_port()?;
        let proxy_metrics = crate::plane::free_port()?;
        write(
            &dir.join("kube-proxy/kubeconfig"),
            &component_kubeconfig(
                config.api_server,
                &config.pki.ca_cert,
                &config.pki.kube_proxy_client,
            ),
        )?;
        write(
            &dir.join("kube-proxy/config.yaml"),
            &kube_proxy_config(&dir, proxy_health, proxy_metrics),
        )?;
        node.spawn(
            "kube-proxy",
            &b.kube_proxy,
            &[
                format!("--config={}", dir.join("kube-proxy/config.yaml").display()),
                "--v=1".into(),
            ],
        )?;

        let kubectl = |args: &[&str]| {
            Command::new(config.kubectl)
                .arg(format!(
                    "--kubeconfig={}",
                    config.admin_kubeconfig.display()
                ))
                .args(args)
                .output()
        };
        node.wait_for("the node to be Ready", Duration::from_secs(120), |_| {
            let out = kubectl(&[
                "get",
                "node",
                NODE_NAME,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])?;
            Ok(String::from_utf8_lossy(&out.stdout).trim() == "True")
        })?;
        // kube-proxy has programmed the `kubernetes` Service: pods can reach kube-apiserver.
        node.wait_for("kube-proxy to be healthy", Duration::from_secs(60), |_| {
            Ok(http_status(proxy_health, "/healthz").is_ok_and(|code| code == 200))
        })?;
        Ok(node)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// containerd's socket, for `crictl` and `ctr`.
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd/containerd.sock")
    }

    pub fn binaries(&self) -> &NodeBinaries {
        &self.binaries
    }

    /// Runs `ctr` in the node's Kubernetes namespace of containerd.
    pub fn ctr(&self, args: &[&str]) -> std::io::Result<std::process::Output> {
        Command::new(&self.binaries.ctr)
            .arg("--address")
            .arg(self.containerd_socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
    }

    /// The lines a plane writes to its `env` file for the node.
    pub fn env_lines(&self) -> String {
        format!(
            "STRATA_REAL_NODE={NODE_NAME}\nSTRATA_NODE_CONTAINERD={}\nSTRATA_NODE_CTR={}\nSTRATA_NODE_CRICTL={}\n",
            self.containerd_socket().display(),
            self.binaries.ctr.display(),
            self.binaries.crictl.display(),
        )
    }

    fn spawn(&mut self, name: &'static str, binary: &Path, args: &[String]) -> Result<()> {
        let log = fs::File::create(self.dir.join(format!("logs/{name}.log")))?;
        let child = crate::plane::launch_tied(name, binary, args, log)?;
        self.processes.push(NodeProcess { name, child });
        Ok(())
    }

    /// Polls `ready` until it holds; fails at once, with the last lines of its log, when one
    /// of the node's processes exits.
    fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        mut ready: impl FnMut(&Self) -> Result<bool>,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if ready(self).unwrap_or(false) {
                return Ok(());
            }
            for NodeProcess { name, child } in &mut self.processes {
                if let Some(status) = child.try_wait()? {
                    let log = self.dir.join(format!("logs/{name}.log"));
                    bail!(
                        "the real node's {name} exited ({status}) while waiting for {what}: {}",
                        last_error_line(&log)
                    );
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "waiting for {what} timed out after {timeout:?}; the node's logs are in {}",
                    self.dir.join("logs").display()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Stops the node: the kubelet first (so it restarts nothing), then every pod sandbox
    /// through the CRI (their containers, mounts and network), kube-proxy (and its iptables
    /// chains), containerd; then sweeps whatever is left. The bridge stays (kube-apiserver
    /// listens on it) until [`RealNode::release`].
    pub fn stop(&mut self) {
        self.terminate("kubelet");
        if self.running("containerd") {
            let _ = Command::new(&self.binaries.crictl)
                .arg(format!(
                    "--runtime-endpoint=unix://{}",
                    self.containerd_socket().display()
                ))
                .args(["--timeout=20s", "rmp", "--all", "--force"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        self.terminate("kube-proxy");
        self.terminate("containerd");
        sweep(&self.dir, Some(&self.binaries.kube_proxy));
    }

    /// Deletes the bridge once nothing listens on it any more (the plane stopped), and gives up
    /// the machine's real-node lock.
    pub fn release(mut self) {
        self.stop();
        delete_bridge();
    }

    fn running(&mut self, name: &str) -> bool {
        self.processes
            .iter_mut()
            .any(|p| p.name == name && matches!(p.child.try_wait(), Ok(None)))
    }

    fn terminate(&mut self, name: &str) {
        let Some(index) = self.processes.iter().position(|p| p.name == name) else {
            return;
        };
        let NodeProcess { mut child, .. } = self.processes.remove(index);
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        if !self.processes.is_empty() {
            self.stop();
            delete_bridge();
        }
    }
}

/// Removes what a node left: processes in the kubelet's `kubepods` cgroups and containerd
/// shims serving its socket (killed), mounts under `node_dir` (unmounted), kube-proxy's iptables
/// chains (when its binary is known). Safe to run when nothing is left.
fn sweep(node_dir: &Path, kube_proxy: Option<&Path>) {
    // Containers outlive a killed containerd (their shims are daemons): kill them by cgroup.
    for _ in 0..20 {
        let pids = kubepods_pids();
        let shims = shim_pids(node_dir);
        if pids.is_empty() && shims.is_empty() {
            break;
        }
        for pid in pids.iter().chain(&shims) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    unmount_under(node_dir);
    if let Some(kube_proxy) = kube_proxy {
        let _ = Command::new(kube_proxy)
            .arg("--cleanup")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Unmounts whatever is mounted at or under `dir` (lazily: a busy mount goes when released).
/// A plane that reuses a directory runs it first, in case a real node there was killed.
pub fn unmount_under(dir: &Path) {
    let mut mounts = mounts_under(dir);
    // Deepest first, so a mount is never hidden under another.
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for mount in mounts {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&mount)
            .stderr(Stdio::null())
            .status();
    }
}

/// Every process in the kubelet's pod cgroups (cgroupfs driver, cgroup v1 or v2).
fn kubepods_pids() -> Vec<u32> {
    let mut pids = Vec::new();
    for root in [
        "/sys/fs/cgroup/pids/kubepods",
        "/sys/fs/cgroup/memory/kubepods",
        "/sys/fs/cgroup/kubepods",
    ] {
        collect_cgroup_pids(Path::new(root), &mut pids);
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn collect_cgroup_pids(dir: &Path, pids: &mut Vec<u32>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_cgroup_pids(&entry.path(), pids);
        }
    }
}

/// containerd shims started for the containerd whose files live in `node_dir`.
fn shim_pids(node_dir: &Path) -> Vec<u32> {
    let needle = node_dir.display().to_string();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            cmdline.contains("containerd-shim") && cmdline.contains(&needle)
        })
        .collect()
}

/// Mount points at or under `dir`, from `/proc/self/mountinfo`.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mount_path)
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape_mount_path(field: &str) -> String {
    let mut out = Vec::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..=i + 3]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The CNI network: the plane's bridge, addresses from the pod subnet, a route to the Service
/// range through the node and none other (see the module comment).
fn cni_config(dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "strata",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": false,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": dir.join("cni/ipam").display().to_string(),
                    "ranges": [[{
                        "subnet": POD_SUBNET,
                        "rangeStart": "10.250.0.10",
                        "gateway": NODE_IP,
                    }]],
                    "routes": [{ "dst": SERVICE_CIDR }],
                },
            },
            { "type": "portmap", "capabilities": { "portMappings": true } },
        ],
    })
    .to_string()
}

/// containerd: everything under the node's directory; the CRI plugin with the CNI network
/// above, the locally built pause image, and the two limits of a sandboxed machine handled:
/// no container may ask for a negative `oom_score_adj` (clamped to containerd's own, 0).
fn containerd_config(dir: &Path, b: &NodeBinaries) -> String {
    let d = |sub: &str| dir.join(sub).display().to_string();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{ttrpc}"

[debug]
  level = "warn"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
"#,
        root = d("containerd/root"),
        state = d("containerd/state"),
        socket = d("containerd/containerd.sock"),
        ttrpc = d("containerd/containerd-ttrpc.sock"),
        pause = b.pause_image,
        cni_bin = b.cni.display(),
        cni_conf = d("cni/conf"),
        runc = b.runc.display(),
    )
}

fn component_kubeconfig(server: &str, ca: &Path, (cert, key): &(PathBuf, PathBuf)) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: plane
  cluster: {{server: {server}, certificate-authority: {ca}}}
users:
- name: node
  user: {{client-certificate: {cert}, client-key: {key}}}
contexts:
- name: plane
  context: {{cluster: plane, user: node}}
current-context: plane
",
        ca = ca.display(),
        cert = cert.display(),
        key = key.display(),
    )
}

/// The kubelet: cgroup v1 with the cgroupfs driver (this machine has no systemd), no negative
/// OOM score, pod logs and state under the node's directory, no DNS (pods get no resolver:
/// nothing outside the plane to resolve), evictions and image garbage collection that never
/// remove the imported images on a disk the tests share. Disk thresholds are absolute: a
/// percentage of a large disk the builds share (1% of 252 GB) put the node under DiskPressure,
/// refusing every pod, while gigabytes were still free.
fn kubelet_config(dir: &Path, pki: &NodePki, port: u16, healthz: u16) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
containerRuntimeEndpoint: unix://{socket}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podLogsDir: {logs}
resolvConf: \"\"
clusterDomain: cluster.local
registerWithTaints:
- {{key: {NODE_TAINT}, effect: NoSchedule}}
evictionHard: {{memory.available: 50Mi, nodefs.available: 256Mi, nodefs.inodesFree: 1%, imagefs.available: 256Mi}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 60
shutdownGracePeriod: 0s
",
        ca = pki.ca_cert.display(),
        cert = pki.kubelet_serving.0.display(),
        key = pki.kubelet_serving.1.display(),
        socket = dir.join("containerd/containerd.sock").display(),
        logs = dir.join("logs/pods").display(),
    )
}

/// kube-proxy in iptables mode: node ports on the bridge address only, no sysctl it would
/// change for the whole machine (conntrack sizes, localhost node ports), no negative OOM score.
fn kube_proxy_config(dir: &Path, health: u16, metrics: u16) -> String {
    format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {kubeconfig}}}
hostnameOverride: {NODE_NAME}
mode: iptables
clusterCIDR: {POD_SUBNET}
detectLocalMode: ClusterCIDR
healthzBindAddress: 127.0.0.1:{health}
metricsBindAddress: 127.0.0.1:{metrics}
oomScoreAdj: 0
nodePortAddresses: [{NODE_IP}/32]
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
iptables: {{localhostNodePorts: false, minSyncPeriod: 0s}}
",
        kubeconfig = dir.join("kube-proxy/kubeconfig").display(),
    )
}

/// The status code of a plain HTTP GET on loopback.
fn http_status(port: u16, path: &str) -> Result<u16> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("not an HTTP answer: {line}"))
}

fn write(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What the real node needs of the host it would run on.
#[derive(Debug)]
struct Host {
    root: bool,
    /// cgroups mounted at /sys/fs/cgroup: v1 with a memory controller, or v2.
    cgroups: bool,
    /// Where programs are looked for: `PATH` and the sbin directories a root shell has.
    path: std::ffi::OsString,
}

impl Host {
    fn this() -> Self {
        let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        dirs.extend(["/usr/sbin", "/sbin"].map(PathBuf::from));
        Self {
            root: is_root(),
            cgroups: Path::new("/sys/fs/cgroup/memory").is_dir()
                || Path::new("/sys/fs/cgroup/cgroup.controllers").is_file(),
            path: std::env::join_paths(dirs).unwrap_or_default(),
        }
    }
}

fn which(path: &std::ffi::OsStr, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// The last line of a component's log that says what went wrong (an error, else the last).
fn last_error_line(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines
        .iter()
        .rev()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("error") || l.contains("fatal") || l.contains("failed")
        })
        .or(lines.last())
        .map(|l| l.to_string())
        .unwrap_or_else(|| format!("(nothing in {})", log.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_unescaped() {
        for (field, want) in [
            ("/a/b", "/a/b"),
            ("/a\\040b", "/a b"),
            ("/x\\011y\\134z", "/x\ty\\z"),
            ("/trailing\\04", "/trailing\\04"),
        ] {
            assert_eq!(unescape_mount_path(field), want, "{field}");
        }
    }

    /// A host whose PATH holds `tools`, with the plane build's pieces in a directory of their
    /// own: what `find_on` says for it.
    fn find_with(root: bool, cgroups: bool, tools: &[&str]) -> Result<NodeBinaries> {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("strata-node-find-{}-{case}", std::process::id()));
        let (bin, kube) = (dir.join("bin"), dir.join("kube"));
        fs::create_dir_all(&bin)?;
        fs::create_dir_all(&kube)?;
        for tool in tools {
            fs::write(bin.join(tool), "")?;
        }
        for built in ["kubelet", "kube-proxy", "crictl", "bridge", "pause.oci.tar"] {
            fs::write(kube.join(built), "")?;
        }
        let k = kube.display();
        let output = format!(
            "CRICTL_BIN={k}\nCNI_BIN={k}\nPAUSE_ARCHIVE={k}/pause.oci.tar\nPAUSE_IMAGE=localhost/strata/pause:t\n"
        );
        let host = Host {
            root,
            cgroups,
            path: bin.into_os_string(),
        };
        let found = NodeBinaries::find_on(&host, &kube, &output);
        let _ = fs::remove_dir_all(&dir);
        found
    }

    #[test]
    fn a_host_that_cannot_run_the_node_is_named_in_one_line() {
        let all = [
            "iptables",
            "iptables-restore",
            "ip",
            "umount",
            "setpriv",
            "containerd",
            "runc",
            "ctr",
        ];
        assert!(find_with(true, true, &all).is_ok());
        let without = |missing: &str| -> Vec<&str> {
            all.iter().copied().filter(|t| *t != missing).collect()
        };
        for (case, found, want) in [
            ("not root", find_with(false, true, &all), "needs root"),
            ("no cgroups", find_with(true, false, &all), "needs cgroups"),
            (
                "no runtime",
                find_with(true, true, &without("containerd")),
                "needs `containerd` on PATH: install Debian's containerd",
            ),
            (
                "no runc",
                find_with(true, true, &without("runc")),
                "needs `runc` on PATH",
            ),
            (
                "no iptables for kube-proxy",
                find_with(true, true, &without("iptables-restore")),
                "needs `iptables-restore` on PATH",
            ),
        ] {
            let error = format!("{:#}", found.expect_err(case));
            assert!(error.contains(want), "{case}: {error}");
            assert!(!error.contains('\n'), "{case}: not one line: {error}");
        }
    }

    #[test]
    fn namespace_annotations_select_the_node_and_tolerate_its_taint() {
        let [selector, tolerations] = namespace_annotations();
        assert_eq!(selector.1, "strata.dev/node=real");
        let parsed: serde_json::Value = serde_json::from_str(&tolerations.1).unwrap();
        assert_eq!(parsed[0]["key"], NODE_TAINT);
        assert_eq!(parsed[0]["effect"], "NoSchedule");
    }
}
