//! `make demo`: a guided tour of every Strata system on the local control plane. Each step
//! does what a platform engineer would do, waits for the outcome Strata must produce, prints
//! what happened and the command to look at it. `make demo-check` runs the same tour headless
//! and exits non-zero at the first step whose outcome does not happen; `make test` runs it.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use layer_controller::crd::AddonsLayer;
use serde_json::json;

use crate::plane::Plane;
use crate::release::{Kubectl, RBAC_KINDS, Rendered, WEBHOOK_KINDS};
use crate::services::ServiceProcess;

/// The namespace the chart is installed into.
pub const RELEASE_NAMESPACE: &str = "strata-system";

/// The ports the demo's services listen on, from a base (default 18080): admin HTTP of the
/// four services at base+1..base+4 and the webhook server's TLS at base+5. Fixed, so the
/// printed URLs stay the same from run to run.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    pub base: u16,
}

impl Ports {
    /// Every port with what it is for.
    pub fn all(&self) -> Vec<(u16, String)> {
        let mut ports: Vec<(u16, String)> = crate::services::SERVICES
            .iter()
            .zip(1..)
            .map(|(service, offset)| (self.base + offset, format!("{service} admin HTTP")))
            .collect();
        ports.push((self.tls(), "admission-webhook TLS".to_string()));
        ports
    }

    pub fn admin(&self, service: &str) -> u16 {
        let index = crate::services::SERVICES
            .iter()
            .position(|s| *s == service)
            .unwrap_or(0);
        self.base + 1 + index as u16
    }

    pub fn tls(&self) -> u16 {
        self.base + 5
    }

    /// Fails with one line naming the first port already in use and how to free it.
    pub fn check_free(&self) -> Result<()> {
        for (port, what) in self.all() {
            if let Err(e) = TcpListener::bind(("127.0.0.1", port)) {
                bail!(
                    "port {port} ({what}) is not free ({e}): stop what listens there \
                     (`ss -ltnp 'sport = :{port}'` shows it; an earlier demo still running?) \
                     or pick other ports with `--port-base N`"
                );
            }
        }
        Ok(())
    }
}

/// Refuses to take over a directory another running demo uses; a directory left by an earlier
/// run that has ended is fine (the plane starts afresh in it). Returns the pid file to write.
pub fn claim_dir(dir: &Path) -> Result<PathBuf> {
    let pid_file = dir.join("demo.pid");
    if let Ok(text) = std::fs::read_to_string(&pid_file) {
        let pid = text.trim();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let alive = !cmdline.is_empty()
            && pid != std::process::id().to_string()
            && String::from_utf8_lossy(&cmdline).contains("strata-plane");
        if alive {
            bail!(
                "another demo (pid {pid}) is running in {}: stop it (Ctrl-C in its terminal, \
                 or `kill {pid}`) or give this one another `--dir`",
                dir.display()
            );
        }
        crate::say_err!(
            "demo: {} is left from an earlier run (pid {pid} has ended); starting afresh",
            dir.display()
        );
    }
    Ok(pid_file)
}

/// Where the tour's inputs are.
fn samples() -> PathBuf {
    crate::chart::repo_root().join("e2e/samples/demo")
}

/// Prints a line to standard output, ignoring a closed pipe (`make demo | head` must not end
/// the tour with a panic; what is printed is only for the reader).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Like [`say!`], on standard error.
#[macro_export]
macro_rules! say_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// One step's report, printed as it happens.
#[derive(Debug)]
struct Printer {
    step: usize,
    steps: usize,
    started: Instant,
}

impl Printer {
    fn begin(&mut self, title: &str) {
        self.step += 1;
        self.started = Instant::now();
        crate::say!("\n[{}/{}] {title}", self.step, self.steps);
    }

    /// What happened.
    fn saw(&self, line: &str) {
        for l in line.lines() {
            crate::say!("      {l}");
        }
    }

    /// A command to see it oneself.
    fn try_it(&self, command: &str) {
        crate::say!("      $ {command}");
    }

    fn end(&self) {
        crate::say!("      ok ({:.1} s)", self.started.elapsed().as_secs_f64());
    }
}

/// The titles of the tour's steps, in order.
pub const STEPS: [&str; 10] = [
    "Local control plane",
    "Install: CRDs, the chart's RBAC and webhooks, four services as their ServiceAccounts",
    "Layers: two dependent layers deploy in order",
    "Layers: a new revision of a source",
    "Drift: a hand edit reported and healed",
    "Rollout: a three-zone StatefulSet group, one zone at a time",
    "Admission: a downscale the no-downscale webhook refuses",
    "Admission: a zone-aware eviction refused while another zone is disrupted",
    "Render: a Helm chart into reviewed GitOps files; status and wait on them",
    "Metrics and dashboards",
];

/// The tour, from a started plane to the last step. The services it starts are returned
/// (in `services`) as soon as they run, so the caller stops them whatever happens.
#[derive(Debug)]
pub struct Tour<'a> {
    pub plane: &'a Plane,
    pub bin_dir: PathBuf,
    pub ports: Ports,
    /// The services run as host processes (when the plane has no real node).
    pub services: Vec<ServiceProcess>,
    printer: Printer,
    kubectl: Kubectl,
    /// The chart's own pods on the plane's real node run the services (`install_in_cluster`).
    in_cluster: bool,
}

/// A step that failed: its title and the cause (printed on one line).
#[derive(Debug)]
pub struct StepFailed {
    pub step: usize,
    pub title: &'static str,
    pub cause: anyhow::Error,
}

impl std::fmt::Display for StepFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step {} ({}) failed: {:#}",
            self.step, self.title, self.cause
        )
    }
}

impl<'a> Tour<'a> {
    pub fn new(plane: &'a Plane, bin_dir: PathBuf, ports: Ports) -> Self {
        let kubectl = Kubectl {
            binary: plane.binaries().kubectl(),
            kubeconfig: plane.kubeconfig().to_path_buf(),
        };
        Self {
            plane,
            bin_dir,
            ports,
            services: Vec::new(),
            printer: Printer {
                step: 0,
                steps: STEPS.len(),
                started: Instant::now(),
            },
            kubectl,
            in_cluster: plane.real_node().is_some(),
        }
    }

    /// Prints the first step (the plane, already started by the caller) and runs the others.
    pub async fn run(&mut self) -> Result<(), StepFailed> {
        let kube_bin = self.plane.binaries().kube.display().to_string();
        self.printer.begin(STEPS[0]);
        let real_node = if self.in_cluster {
            format!(
                ", and a real node {} (kubelet, containerd, kube-proxy; pods on the bridge {})",
                crate::node::NODE_NAME,
                crate::node::POD_SUBNET
            )
        } else {
            String::new()
        };
        self.printer.saw(&format!(
            "etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake nodes in \
             zone-a, zone-b, zone-c){real_node} ready in {:.1} s at {}",
            self.plane.startup.as_secs_f64(),
            self.plane.api_server()
        ));
        self.printer.saw(&format!(
            "to run the commands below in another terminal:\n  export KUBECONFIG={} PATH={kube_bin}:{}:$PATH",
            self.plane.kubeconfig().display(),
            self.bin_dir.display()
        ));
        self.printer
            .try_it("kubectl get nodes -L topology.kubernetes.io/zone");
        self.printer.end();
        let client = core_k8s::client::client_from(Some(self.plane.kubeconfig()), None)
            .await
            .map_err(|e| self.failed(anyhow!(e)))?;
        macro_rules! step {
            ($method:ident) => {{
                let index = self.printer.step;
                self.printer.begin(STEPS[index]);
                match self.$method(&client).await {
                    Ok(()) => self.printer.end(),
                    Err(cause) => return Err(self.failed(cause)),
                }
            }};
        }
        step!(install);
        step!(layers_in_order);
        step!(new_revision);
        step!(drift);
        step!(zone_by_zone_rollout);
        step!(no_downscale);
        step!(zone_aware_eviction);
        step!(render_status_wait);
        step!(metrics);
        Ok(())
    }

    fn failed(&self, cause: anyhow::Error) -> StepFailed {
        let step = self.printer.step.max(1);
        StepFailed {
            step,
            title: STEPS[step - 1],
            cause,
        }
    }

    fn strata(&self, args: &[&str]) -> Result<String> {
        let out = std::process::Command::new(self.bin_dir.join("strata"))
            .args(args)
            .env("KUBECONFIG", self.plane.kubeconfig())
            .env("HELM", self.plane.binaries().helm.join("helm"))
            .output()
            .context("running strata")?;
        ensure!(
            out.status.success(),
            "strata {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Where each running replica of `service` serves its admin HTTP: the chart's pods' own
    /// addresses (Ready ones) in-cluster, the host process's port otherwise.
    async fn admin_addresses(&self, client: &Client, service: &str) -> Result<Vec<SocketAddr>> {
        if !self.in_cluster {
            return Ok(vec![([127, 0, 0, 1], self.ports.admin(service)).into()]);
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
        let list = pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={service}")))
            .await?;
        Ok(list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.status.as_ref()?.pod_ip.as_deref()?.parse().ok())
            .map(|ip: std::net::IpAddr| SocketAddr::new(ip, 8080))
            .collect())
    }

    async fn install(&mut self, client: &Client) -> Result<()> {
        self.apply_crds(client).await?;
        if self.in_cluster {
            self.install_in_cluster(client).await
        } else {
            self.install_as_processes(client).await
        }
    }

    async fn apply_crds(&mut self, client: &Client) -> Result<()> {
        let crds = crate::chart::repo_root().join("manifests/crds");
        self.kubectl
            .run(
                &["apply", "--server-side", "-k", &crds.to_string_lossy()],
                None,
            )
            .context("applying the CRDs")?;
        crate::support::crds_established(
            client,
            &[
                "addonslayers.strata.dev",
                "zoneawarepoddisruptionbudgets.rollout-operator.grafana.com",
                "replicatemplates.rollout-operator.grafana.com",
            ],
        )
        .await?;
        self.printer
            .saw("CRDs applied: AddonsLayer, ZoneAwarePodDisruptionBudget, ReplicaTemplate");
        self.printer.try_it(&format!(
            "kubectl apply --server-side -k {}",
            crds.display()
        ));
        Ok(())
    }

    /// The chart installed with `helm install` onto the real node: its Deployments run the
    /// images `make images-test` built (imported into the node, never pulled), each service
    /// with its pod's own ServiceAccount token; kube-apiserver calls the webhooks through the
    /// chart's Service.
    async fn install_in_cluster(&mut self, client: &Client) -> Result<()> {
        let node = self
            .plane
            .real_node()
            .context("the plane has no real node")?;
        crate::in_cluster::import_images(&node.containerd_socket(), &node.binaries().ctr)?;
        let mut namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": RELEASE_NAMESPACE, "annotations": {}}});
        for (key, value) in crate::node::namespace_annotations() {
            namespace["metadata"]["annotations"][key] = json!(value);
        }
        self.kubectl.apply(&[&namespace])?;
        // The rollout-operator's Role lives in the namespace it watches.
        self.kubectl.apply(&[&json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "demo", "labels": {"strata.dev/admission-webhook": "enabled"}}
        })])?;
        let values = [
            "crds.enabled=false",
            "global.image.pullPolicy=Never",
            "global.logFormat=text",
            "layerController.defaultSourceNamespace=demo",
            "rolloutOperator.watchNamespace=demo",
        ];
        let chart = crate::chart::repo_root().join("helm/strata");
        let mut helm = std::process::Command::new(self.plane.binaries().helm.join("helm"));
        helm.args(["install", "strata"])
            .arg(&chart)
            .args(["--namespace", RELEASE_NAMESPACE, "--kubeconfig"])
            .arg(self.plane.kubeconfig());
        for value in values {
            helm.args(["--set", value]);
        }
        let out = helm.output().context("running helm")?;
        ensure!(
            out.status.success(),
            "helm install: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        self.printer.saw(&format!(
            "helm install strata helm/strata -n {RELEASE_NAMESPACE} --set {}",
            values.join(",")
        ));
        for service in crate::services::SERVICES {
            let (pod, admin) = poll(
                &format!("{service} ready and leading on the real node"),
                Duration::from_secs(120),
                || async {
                    let pods: Api<Pod> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);
                    let list = pods
                        .list(
                            &ListParams::default()
                                .labels(&format!("app.kubernetes.io/name={service}")),
                        )
                        .await?;
                    for pod in list.items {
                        let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                            continue;
                        };
                        let admin = SocketAddr::new(ip.parse()?, 8080);
                        if ready_and_leading(service, admin).await {
                            return Ok(Some((pod.metadata.name.unwrap_or_default(), admin)));
                        }
                    }
                    Ok(None)
                },
            )
            .await?;
            self.printer.saw(&format!(
                "{service:<18} ready and leading: pod {pod} on {}, as ServiceAccount {RELEASE_NAMESPACE}/{service}  http://{admin}/metrics",
                crate::node::NODE_NAME
            ));
        }
        // kube-apiserver calls the webhook at the Service's ready endpoints: both replicas
        // there before the tour asks anything of it.
        poll(
            "both admission-webhook replicas ready endpoints of its Service",
            Duration::from_secs(60),
            || async {
                let ready = crate::in_cluster::ready_endpoints(
                    client,
                    RELEASE_NAMESPACE,
                    "admission-webhook",
                )
                .await?;
                Ok((ready == 2).then_some(()))
            },
        )
        .await?;
        self.webhook_ca_injected(client).await?;
        self.printer.try_it(&format!(
            "kubectl -n {RELEASE_NAMESPACE} get pods -o wide; kubectl -n {RELEASE_NAMESPACE} logs deploy/layer-controller"
        ));
        Ok(())
    }

    /// The services as processes on this host, each from the command its rendered Deployment
    /// gives and a token of the ServiceAccount the chart made for it (no real node here).
    async fn install_as_processes(&mut self, client: &Client) -> Result<()> {
        let mut sets = vec![
            "crds.enabled=false".to_string(),
            "global.logFormat=text".to_string(),
            format!("layerController.defaultSourceNamespace=demo"),
            format!("rolloutOperator.watchNamespace=demo"),
            format!(
                "admissionWebhook.webhooks.url=https://127.0.0.1:{}",
                self.ports.tls()
            ),
            "admissionWebhook.tls.extraNames={127.0.0.1}".to_string(),
            format!("admissionWebhook.ports.https={}", self.ports.tls()),
        ];
        for (key, service) in crate::chart::SERVICES {
            sets.push(format!("{key}.ports.admin={}", self.ports.admin(service)));
        }
        let rendered = Rendered::template(
            &self.plane.binaries().helm.join("helm"),
            "strata",
            RELEASE_NAMESPACE,
            &sets,
        )?;
        self.kubectl
            .run(&["create", "namespace", RELEASE_NAMESPACE], None)?;
        // The rollout-operator's Role lives in the namespace it watches.
        self.kubectl.apply(&[&json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "demo", "labels": {"strata.dev/admission-webhook": "enabled"}}
        })])?;
        let rbac = rendered.of_kinds(&RBAC_KINDS);
        self.kubectl.apply(&rbac)?;
        let webhooks = rendered.of_kinds(&WEBHOOK_KINDS);
        self.kubectl.apply(&webhooks)?;
        self.printer.saw(&format!(
            "chart rendered (helm template strata helm/strata -n {RELEASE_NAMESPACE}): {} ServiceAccounts and RBAC objects, {} webhook configurations applied",
            rbac.len(),
            webhooks.len()
        ));

        let logs = self.plane.dir().join("logs");
        for service in crate::services::SERVICES {
            let pod = format!("{service}-demo");
            let command = rendered.container_command(service, &pod, &self.bin_dir)?;
            let kubeconfig = self.kubectl.token_kubeconfig(
                RELEASE_NAMESPACE,
                &command.service_account,
                "24h",
                &self.plane.dir().join(format!("{service}.kubeconfig")),
            )?;
            let mut env = command.env.clone();
            env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
            let args: Vec<&str> = command.args.iter().map(String::as_str).collect();
            let process = ServiceProcess::spawn_tied_blocking(&command.binary, &args, &env, &logs)?;
            self.services.push(process);
        }
        for service in crate::services::SERVICES {
            let admin: SocketAddr = ([127, 0, 0, 1], self.ports.admin(service)).into();
            let deadline = Instant::now() + Duration::from_secs(60);
            while !ready_and_leading(service, admin).await {
                self.exited()?;
                ensure!(
                    Instant::now() < deadline,
                    "{service} was not ready and leading within 60 s (its log: {})",
                    self.plane.dir().join("logs").display()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            self.printer.saw(&format!(
                "{service:<18} ready and leading, as ServiceAccount {RELEASE_NAMESPACE}/{service}  http://{admin}/metrics"
            ));
        }
        self.webhook_ca_injected(client).await?;
        self.printer
            .try_it(&format!("tail -f {}/*.log", logs.display()));
        Ok(())
    }

    async fn webhook_ca_injected(&mut self, client: &Client) -> Result<()> {
        // The server writes its CA into every configuration; kube-apiserver trusts it a moment
        // later. Until then a layer would be refused by a webhook that cannot be called.
        let configs: Api<
            k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
        > = Api::all(client.clone());
        poll(
            "the webhook CA injected",
            Duration::from_secs(60),
            || async {
                let config = configs
                    .get(&format!("addonslayer-validation-{RELEASE_NAMESPACE}"))
                    .await?;
                Ok(config
                    .webhooks
                    .and_then(|w| w.into_iter().next())
                    .and_then(|w| w.client_config.ca_bundle)
                    .filter(|b| !b.0.is_empty())
                    .map(|_| ()))
            },
        )
        .await?;
        self.printer
            .saw("the webhook server made its own CA and certificate and injected the CA into its configurations");
        self.printer.try_it(&format!(
            "kubectl -n {RELEASE_NAMESPACE} get leases; kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations"
        ));
        Ok(())
    }

    fn exited(&mut self) -> Result<()> {
        for service in &mut self.services {
            if let Some(status) = service.try_exit() {
                bail!(
                    "{} exited ({status}): {}",
                    service.name,
                    crate::plane::tail(service.log_path(), 3)
                );
            }
        }
        Ok(())
    }

    async fn layers_in_order(&mut self, client: &Client) -> Result<()> {
        let layers: Api<AddonsLayer> = Api::all(client.clone());
        let file = samples().join("layers.yaml");
        // A cycle is refused before it is stored: the validation webhook runs the
        // layer-controller's own dependency check.
        let cycle = json!({
            "apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer",
            "metadata": {"name": "base"},
            "spec": {"version": "1.0.0",
                     "source": {"kind": "ConfigMap", "name": "base-layer", "namespace": "demo", "path": "./"},
                     "prereqs": {"dependsOn": ["base@1.0.0"]}}
        });
        let refused = poll(
            "a self-dependent layer refused",
            Duration::from_secs(30),
            || async {
                match self.kubectl.apply(&[&cycle]) {
                    Ok(()) => {
                        let _ = self.kubectl.run(&["delete", "addonslayer", "base"], None);
                        bail!("a layer that depends on itself was accepted")
                    }
                    Err(e) if e.to_string().contains("addonslayer-validation") => {
                        Ok(Some(e.to_string()))
                    }
                    // kube-apiserver does not trust the injected CA yet.
                    Err(_) => Ok(None),
                }
            },
        )
        .await?;
        let reason = refused
            .lines()
            .last()
            .unwrap_or_default()
            .split("denied the request: ")
            .last()
            .unwrap_or_default()
            .to_string();
        self.printer.saw(&format!(
            "a layer that depends on itself is refused by the addonslayer-validation webhook: {reason}"
        ));

        self.kubectl.run(
            &["apply", "--server-side", "-f", &file.to_string_lossy()],
            None,
        )?;
        // Sampled every 50 ms: the order the two layers reach Deployed in.
        let mut deployed_at: [Option<Instant>; 2] = [None, None];
        let mut apps_blocked_by = None;
        let started = Instant::now();
        while deployed_at.iter().any(Option::is_none) {
            ensure!(
                started.elapsed() < Duration::from_secs(60),
                "the layers were not Deployed within 60 s (base: {:?}, apps: {:?})",
                state(&layers, "base").await?,
                state(&layers, "apps").await?
            );
            for (i, name) in ["base", "apps"].iter().enumerate() {
                let layer = layers.get_opt(name).await?;
                let status = layer.and_then(|l| l.status).unwrap_or_default();
                if deployed_at[i].is_none() && status.state.as_deref() == Some("Deployed") {
                    deployed_at[i] = Some(Instant::now());
                }
                if *name == "apps" && !status.blocked_by.is_empty() && apps_blocked_by.is_none() {
                    apps_blocked_by = Some(serde_json::to_string(&status.blocked_by)?);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (base_at, apps_at) = (
            deployed_at[0].unwrap_or(started),
            deployed_at[1].unwrap_or(started),
        );
        ensure!(
            base_at <= apps_at,
            "apps was Deployed before the layer it depends on"
        );
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "monitoring");
        ensure!(
            maps.get_opt("app-settings").await?.is_some(),
            "the apps layer's ConfigMap monitoring/app-settings is missing"
        );
        self.printer.saw(&format!(
            "base Deployed after {:.1} s, then apps after {:.1} s (apps waits for base@>=1.0{})",
            (base_at - started).as_secs_f64(),
            (apps_at - started).as_secs_f64(),
            if apps_blocked_by.is_some() {
                "; it was blocked by base meanwhile"
            } else {
                ""
            }
        ));
        let graph = self.strata(&["layers", "graph"])?;
        self.printer.saw(graph.trim_end());
        self.printer.try_it("strata layers graph");
        self.printer.try_it("kubectl get addonslayers");
        Ok(())
    }

    async fn new_revision(&mut self, client: &Client) -> Result<()> {
        let layers: Api<AddonsLayer> = Api::all(client.clone());
        let before = layers
            .get("apps")
            .await?
            .status
            .and_then(|s| s.revision)
            .unwrap_or_default();
        let settings = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-settings\n  namespace: monitoring\ndata:\n  retention: 30d\n";
        self.kubectl.run(
            &[
                "-n",
                "demo",
                "patch",
                "configmap",
                "apps-layer",
                "--type=merge",
                "-p",
                &json!({"data": {"settings.yaml": settings}}).to_string(),
            ],
            None,
        )?;
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "monitoring");
        let after = poll(
            "apps Deployed at a new revision",
            Duration::from_secs(60),
            || async {
                let status = layers.get("apps").await?.status.unwrap_or_default();
                let revision = status.revision.unwrap_or_default();
                let retention = maps
                    .get("app-settings")
                    .await?
                    .data
                    .and_then(|d| d.get("retention").cloned());
                Ok((status.state.as_deref() == Some("Deployed")
                    && revision != before
                    && retention.as_deref() == Some("30d"))
                .then_some(revision))
            },
        )
        .await?;
        self.printer.saw(&format!(
            "the apps-layer source changed (retention 15d -> 30d): apps went from revision {before} to {after}, monitoring/app-settings has retention 30d"
        ));
        self.printer
            .try_it("kubectl get addonslayer apps -o jsonpath='{.status.history}'");
        self.printer.try_it("strata layers plan apps");
        Ok(())
    }

    async fn drift(&mut self, client: &Client) -> Result<()> {
        let edit = json!({"data": {"retention": "1d"}}).to_string();
        self.kubectl.run(
            &[
                "-n",
                "monitoring",
                "patch",
                "configmap",
                "app-settings",
                "--type=merge",
                "-p",
                &edit,
            ],
            None,
        )?;
        self.printer.saw(
            "hand edit: kubectl -n monitoring patch configmap app-settings -p '{\"data\":{\"retention\":\"1d\"}}'",
        );
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(client.clone(), "monitoring");
        // The Event about this edit: the field's value it found is the one set by hand.
        let reported = poll("the drift reported", Duration::from_secs(30), || async {
            let list = events.list(&ListParams::default()).await?;
            Ok(list.items.into_iter().find_map(|e| {
                let about = e.regarding.as_ref()?;
                let note = e.note.unwrap_or_default();
                (e.reason.as_deref() == Some("DriftDetected")
                    && about.name.as_deref() == Some("app-settings")
                    && note.contains("found 1d"))
                .then_some(note)
            }))
        })
        .await?;
        self.printer.saw(&format!(
            "drift-observer reported (Warning DriftDetected): {reported}"
        ));
        // The new revision of the previous step was the layer-controller's own write, never
        // drift: the observer has handled that change before this edit (one object's changes
        // are checked in order), so a report of it would be here by now.
        let list = events.list(&ListParams::default()).await?;
        if let Some(false_report) = list.items.iter().find_map(|e| {
            let note = e.note.as_deref()?;
            (e.reason.as_deref() == Some("DriftDetected") && note.contains("found 30d"))
                .then_some(note)
        }) {
            bail!("the new revision's own apply was reported as drift: {false_report}");
        }
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "monitoring");
        poll("the drift healed", Duration::from_secs(30), || async {
            let retention = maps
                .get("app-settings")
                .await?
                .data
                .and_then(|d| d.get("retention").cloned());
            Ok((retention.as_deref() == Some("30d")).then_some(()))
        })
        .await?;
        self.printer.saw(
            "healed: the observer asked the layer-controller (annotation strata.dev/reconcile-requested-at), which re-applied apps; retention is 30d again",
        );
        let report = self.strata(&["drift", "apps"])?;
        self.printer.saw(report.trim_end());
        self.printer.try_it("strata drift apps");
        self.printer
            .try_it("kubectl -n monitoring get events --field-selector reason=DriftDetected");
        Ok(())
    }

    async fn zone_by_zone_rollout(&mut self, client: &Client) -> Result<()> {
        let file = samples().join("ingesters.yaml");
        self.kubectl.run(
            &["apply", "--server-side", "-f", &file.to_string_lossy()],
            None,
        )?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
        let group = ListParams::default().labels("rollout-group=ingester");
        poll("6 ingester pods Ready", Duration::from_secs(60), || async {
            let list = pods.list(&group).await?;
            Ok((list
                .items
                .iter()
                .filter(|p| crate::support::pod_ready(p))
                .count()
                == 6)
                .then_some(()))
        })
        .await?;
        self.printer
            .saw("ingester-zone-a/b/c: 2 pods each, Ready (OnDelete: only the rollout-operator replaces them)");
        let deletions_before = self.plane.pod_deletions()?.len();
        // Every pod event of the rollout, judged as it comes: never a second zone down while
        // one is (what "each zone once the previous one was Ready again" means).
        let watch =
            crate::rollout_watch::watch_rollout(pods.clone(), "ingester", &["a", "b", "c"], 2);
        self.kubectl.run(
            &[
                "-n",
                "demo",
                "set",
                "image",
                "statefulset",
                "-l",
                "rollout-group=ingester",
                "ingester=example.invalid/ingester:2",
            ],
            None,
        )?;
        self.printer.saw(
            "new image for the whole group: kubectl -n demo set image statefulset -l rollout-group=ingester ingester=example.invalid/ingester:2",
        );
        let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "demo");
        poll(
            "every zone rolled to the new revision",
            Duration::from_secs(90),
            || async {
                let list = sets.list(&group).await?;
                let rolled = list.items.iter().all(|s| {
                    s.status.as_ref().is_some_and(|st| {
                        st.update_revision.is_some()
                            && st.current_revision == st.update_revision
                            && st.ready_replicas == Some(2)
                    })
                });
                let ready = pods
                    .list(&group)
                    .await?
                    .items
                    .iter()
                    .filter(|p| crate::support::pod_ready(p))
                    .count();
                Ok((rolled && list.items.len() == 3 && ready == 6).then_some(()))
            },
        )
        .await?;
        let seen = watch.finish().await?;
        ensure!(
            seen.violations.is_empty() && seen.most_zones_down <= 1,
            "a zone went down before the previous one was Ready again: {:?}",
            seen.violations
        );
        // Who deleted what, in order, from kube-apiserver's audit log.
        let deletions: Vec<_> = self.plane.pod_deletions()?[deletions_before..]
            .iter()
            .filter(|d| {
                d.namespace == "demo"
                    && d.code == 200
                    && d.user_agent.starts_with("strata-rollout-operator")
            })
            .cloned()
            .collect();
        let zones: Vec<String> = deletions
            .iter()
            .map(|d| {
                d.name
                    .trim_start_matches("ingester-")
                    .rsplit_once('-')
                    .map(|(zone, _)| zone.to_string())
                    .unwrap_or_default()
            })
            .collect();
        let mut order: Vec<String> = zones.clone();
        order.dedup();
        ensure!(
            deletions.len() == 6,
            "the rollout-operator deleted {} pods, not the 6 old ones: {:?}",
            deletions.len(),
            deletions.iter().map(|d| &d.name).collect::<Vec<_>>()
        );
        ensure!(
            order.len() == 3,
            "pods were not deleted one zone at a time: {zones:?}"
        );
        self.printer.saw(&format!(
            "the rollout-operator deleted the old pods zone by zone ({}), each zone only once the previous one was Ready again",
            deletions
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        self.printer
            .try_it("kubectl -n demo get statefulsets -L rollout-group -o wide");
        self.printer.try_it(&format!(
            "grep '\"delete\"' {}  # the audit log of pod deletions",
            self.plane.dir().join("logs/audit.log").display()
        ));
        Ok(())
    }

    async fn no_downscale(&mut self, client: &Client) -> Result<()> {
        let command = [
            "-n",
            "demo",
            "scale",
            "statefulset",
            "ingester-zone-a",
            "--replicas=1",
        ];
        let refusal = match self.kubectl.run(&command, None) {
            Ok(_) => {
                bail!("the downscale of ingester-zone-a (grafana.com/no-downscale) was allowed")
            }
            Err(e) => e.to_string(),
        };
        ensure!(
            refusal.contains("no-downscale"),
            "the downscale failed, but not by the no-downscale webhook: {refusal}"
        );
        let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "demo");
        let replicas = sets
            .get("ingester-zone-a")
            .await?
            .spec
            .and_then(|s| s.replicas);
        ensure!(
            replicas == Some(2),
            "ingester-zone-a has {replicas:?} replicas"
        );
        self.printer.saw(&format!(
            "refused: {}",
            refusal
                .split("denied the request: ")
                .last()
                .unwrap_or(&refusal)
        ));
        self.printer
            .try_it("kubectl -n demo scale statefulset ingester-zone-a --replicas=1");
        Ok(())
    }

    async fn zone_aware_eviction(&mut self, client: &Client) -> Result<()> {
        let file = samples().join("zpdb.yaml");
        self.kubectl.run(
            &["apply", "--server-side", "-f", &file.to_string_lossy()],
            None,
        )?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
        // kwok turns a pod with this label NotReady: zone b is disrupted.
        pods.patch(
            "ingester-zone-b-1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {crate::plane::FAKE_READY_LABEL: "false"}}}),
            ),
        )
        .await?;
        poll(
            "ingester-zone-b-1 NotReady",
            Duration::from_secs(30),
            || async {
                Ok(
                    (!crate::support::pod_ready(&pods.get("ingester-zone-b-1").await?))
                        .then_some(()),
                )
            },
        )
        .await?;
        self.printer
            .saw("zone b disrupted: ingester-zone-b-1 is NotReady");
        // Through kubectl, as a user (or a node drain) asks: the API answers 429 at once
        // (Strata's own client would retry a 429 with back-off).
        let body = self.plane.dir().join("eviction.json");
        std::fs::write(
            &body,
            json!({"apiVersion": "policy/v1", "kind": "Eviction",
                   "metadata": {"name": "ingester-zone-a-0", "namespace": "demo"}})
            .to_string(),
        )?;
        let evict = [
            "create",
            "--raw",
            "/api/v1/namespaces/demo/pods/ingester-zone-a-0/eviction",
            "-f",
            &body.to_string_lossy(),
        ];
        // `-v=6` makes kubectl print the HTTP status it got.
        let verbose: Vec<&str> = std::iter::once("-v=6").chain(evict).collect();
        let denial = poll(
            "the eviction in zone a denied with 429",
            Duration::from_secs(30),
            || async {
                match self.kubectl.run(&verbose, None) {
                    Ok(_) => {
                        bail!("evicting ingester-zone-a-0 while zone b is disrupted was allowed")
                    }
                    Err(e) => {
                        let text = e.to_string();
                        Ok((text.contains("pod-eviction")
                            && text.contains("denied the request")
                            && text.contains("429"))
                        .then_some(text))
                    }
                }
            },
        )
        .await?;
        let reason = denial
            .lines()
            .filter_map(|l| l.split("denied the request: ").nth(1))
            .next_back()
            .unwrap_or_default()
            .trim()
            .to_string();
        self.printer.saw(&format!(
            "evicting ingester-zone-a-0: refused with 429 Too Many Requests ({reason})"
        ));
        self.printer.try_it(&format!(
            "kubectl create --raw /api/v1/namespaces/demo/pods/ingester-zone-a-0/eviction -f {}",
            body.display()
        ));
        // Zone b recovers; now the same eviction goes through.
        pods.patch(
            "ingester-zone-b-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {crate::plane::FAKE_READY_LABEL: null}}})),
        )
        .await?;
        poll(
            "the eviction allowed once zone b is Ready",
            Duration::from_secs(30),
            || async {
                if !crate::support::pod_ready(&pods.get("ingester-zone-b-1").await?) {
                    return Ok(None);
                }
                Ok(self.kubectl.run(&evict, None).ok().map(|_| ()))
            },
        )
        .await?;
        self.printer
            .saw("once zone b was Ready again, the same eviction was allowed");
        self.printer
            .try_it("kubectl -n demo get zoneawarepoddisruptionbudgets");
        Ok(())
    }

    async fn render_status_wait(&mut self, client: &Client) -> Result<()> {
        let course = samples().join("course.yaml");
        let out = self.plane.dir().join("rendered");
        let _ = std::fs::remove_dir_all(&out);
        let out_s = out.to_string_lossy().into_owned();
        self.strata(&[
            "render",
            "--gitops",
            "flux",
            "-o",
            &out_s,
            &course.to_string_lossy(),
        ])?;
        let mut files = Vec::new();
        collect_files(&out, &mut files)?;
        files.sort();
        ensure!(!files.is_empty(), "strata render wrote nothing to {out_s}");
        let listing: Vec<String> = files
            .iter()
            .map(|f| f.strip_prefix(&out).unwrap_or(f).display().to_string())
            .collect();
        self.printer.saw(&format!(
            "strata render: {} files, one object each, plus the Flux Kustomization that deploys them:\n  {}",
            files.len(),
            listing.join("\n  ")
        ));
        self.printer.try_it(&format!(
            "strata render --gitops flux -o {out_s} {}",
            course.display()
        ));
        // The release's own objects (not the GitOps object, which needs Flux).
        let release: Vec<&PathBuf> = files
            .iter()
            .filter(|f| !f.to_string_lossy().contains("/apps/flux/"))
            .collect();
        ensure!(
            release.len() >= 4,
            "the release rendered {} files",
            release.len()
        );
        let release_dir = common_dir(&release).context("the rendered release's directory")?;
        let offline = self.strata(&["status", "-f", &release_dir.to_string_lossy()])?;
        self.printer.saw(&format!(
            "strata status, offline (nothing applied yet):\n{}",
            offline.trim_end()
        ));
        self.kubectl.apply(&[&json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}
        })])?;
        self.kubectl.run(
            &[
                "apply",
                "--server-side",
                "-R",
                "-f",
                &release_dir.to_string_lossy(),
            ],
            None,
        )?;
        let waited = self.strata(&[
            "wait",
            "-f",
            &release_dir.to_string_lossy(),
            "--timeout",
            "60s",
        ])?;
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(client.clone(), "shop");
        let available = deployments
            .get("web")
            .await?
            .status
            .and_then(|s| s.available_replicas);
        ensure!(
            available == Some(1),
            "strata wait ended but shop/web has {available:?} available replicas"
        );
        self.printer.saw(&format!(
            "applied to namespace shop; strata wait until every object is Current:\n{}",
            waited.trim_end()
        ));
        self.printer
            .try_it(&format!("strata status -f {}", release_dir.display()));
        self.printer.try_it(&format!(
            "strata wait -f {} --timeout 60s",
            release_dir.display()
        ));
        Ok(())
    }

    async fn metrics(&mut self, client: &Client) -> Result<()> {
        let counters = [
            ("layer-controller", "layer_controller_applied_objects_total"),
            ("drift-observer", "drift_observer_drift_detected_total"),
            ("rollout-operator", "rollout_operator_pods_deleted_total"),
            ("admission-webhook", "admission_webhook_reviews_total"),
        ];
        let mut first_admin = None;
        for (service, counter) in counters {
            // Summed over the replicas: in-cluster the leader did the controllers' work, and
            // kube-apiserver spread the reviews over both webhook replicas.
            let (mut total, mut series_count) = (0.0, 0);
            let addresses = self.admin_addresses(client, service).await?;
            ensure!(!addresses.is_empty(), "no running {service}");
            for admin in &addresses {
                let (code, body) = crate::support::http_get(*admin, "/metrics").await?;
                ensure!(code == 200, "{service} /metrics at {admin} answered {code}");
                let series = crate::support::parse_openmetrics(&body)?;
                series_count = series_count.max(series.len());
                total += series
                    .iter()
                    .filter(|(s, _)| s.split('{').next() == Some(counter))
                    .map(|(_, v)| v)
                    .sum::<f64>();
            }
            ensure!(
                total > 0.0,
                "{service}: {counter} is {total} after the tour (it did work above)"
            );
            let shown: Vec<String> = addresses
                .iter()
                .map(|a| format!("http://{a}/metrics"))
                .collect();
            first_admin.get_or_insert(addresses[0]);
            self.printer.saw(&format!(
                "{service:<18} {}  {series_count} series; {counter} = {total}",
                shown.join(" ")
            ));
        }
        let dashboards = crate::chart::repo_root().join("dashboards");
        let mut boards: Vec<String> = std::fs::read_dir(&dashboards)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        boards.sort();
        self.printer.saw(&format!(
            "Grafana dashboards to import (Dashboards > New > Import): {}/{{{}}}\nPrometheus alerts: {}/alerts.yaml (or the chart: --set dashboards.enabled=true,prometheusRule.enabled=true)",
            dashboards.display(),
            boards.join(","),
            dashboards.display()
        ));
        if let Some(admin) = first_admin {
            self.printer.try_it(&format!(
                "curl -s http://{admin}/metrics | grep ^layer_controller_"
            ));
        }
        Ok(())
    }
}

/// Polls `check` every 100 ms until it yields `Some`; an error ends the wait at once (the
/// tour expects every call to work), so does `timeout`.
async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await.with_context(|| what.to_string())? {
            return Ok(value);
        }
        ensure!(
            Instant::now() < deadline,
            "{what}: did not happen within {} s",
            timeout.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `/readyz` answers 200 and `<service>_leader` is 1.
async fn ready_and_leading(service: &str, admin: SocketAddr) -> bool {
    let leader = format!("{}_leader", service.replace('-', "_"));
    let ready = crate::support::http_get(admin, "/readyz").await.ok();
    if ready.map(|(code, _)| code) != Some(200) {
        return false;
    }
    let Ok((_, metrics)) = crate::support::http_get(admin, "/metrics").await else {
        return false;
    };
    crate::support::parse_openmetrics(&metrics)
        .unwrap_or_default()
        .iter()
        .any(|(series, value)| series == &leader && *value == 1.0)
}

async fn state(layers: &Api<AddonsLayer>, name: &str) -> Result<Option<String>> {
    Ok(layers
        .get_opt(name)
        .await?
        .and_then(|l| l.status)
        .and_then(|s| s.state))
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| dir.display().to_string())? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// The deepest directory holding every one of `files`.
fn common_dir(files: &[&PathBuf]) -> Option<PathBuf> {
    let mut common = files.first()?.parent()?.to_path_buf();
    for file in files {
        while !file.starts_with(&common) {
            common = common.parent()?.to_path_buf();
        }
    }
    Some(common)
}
