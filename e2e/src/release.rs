//! The chart as a user installs it, with the services run as local processes: `helm template`
//! renders the release, its ServiceAccounts, RBAC and webhook configurations are applied, and
//! each service starts with the command its rendered Deployment gives and a token of the
//! ServiceAccount the chart made for it — never the plane's admin certificate. The demo, the
//! install tests and the default way every test starts a service go through here, so what
//! they exercise is the chart's RBAC.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// The kinds that give a service its identity and rights.
pub const RBAC_KINDS: [&str; 5] = [
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
];

/// The admission-webhook's configurations.
pub const WEBHOOK_KINDS: [&str; 2] = [
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

/// A cluster as a kubectl user reaches it: a kubectl binary and a kubeconfig.
#[derive(Clone, Debug)]
pub struct Kubectl {
    pub binary: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()));
        cmd
    }

    /// Runs kubectl with `args`, `stdin` on its standard input; its standard output, or an
    /// error with its standard error.
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let mut child = self
            .command()
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", self.binary.display()))?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Applies objects (JSON values) with server-side apply as `strata-e2e`.
    pub fn apply(&self, objects: &[&Value]) -> Result<()> {
        if objects.is_empty() {
            return Ok(());
        }
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
        self.run(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=strata-e2e",
                "-f",
                "-",
            ],
            Some(&list.to_string()),
        )
        .map(drop)
    }

    /// A kubeconfig acting as ServiceAccount `namespace/account` (a TokenRequest token valid
    /// for `duration`, the same server and CA), written to `path`.
    pub fn token_kubeconfig(
        &self,
        namespace: &str,
        account: &str,
        duration: &str,
        path: &Path,
    ) -> Result<PathBuf> {
        let token = self
            .run(
                &[
                    "create",
                    "token",
                    account,
                    "-n",
                    namespace,
                    &format!("--duration={duration}"),
                ],
                None,
            )
            .with_context(|| format!("a token of ServiceAccount {namespace}/{account}"))?;
        let admin: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(&self.kubeconfig)
                .with_context(|| self.kubeconfig.display().to_string())?,
        )?;
        let server = admin["clusters"][0]["cluster"].clone();
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "plane", "cluster": server}],
            "users": [{"name": account, "user": {"token": token.trim()}}],
            "contexts": [{"name": account, "context": {"cluster": "plane", "user": account, "namespace": namespace}}],
            "current-context": account,
        });
        std::fs::write(path, serde_json::to_string(&config)?)
            .with_context(|| path.display().to_string())?;
        Ok(path.to_path_buf())
    }
}

/// A release of the chart as `helm template` renders it.
#[derive(Clone, Debug)]
pub struct Rendered {
    pub release: String,
    pub namespace: String,
    pub objects: Vec<Value>,
}

/// How a service's container runs: the binary (looked up in `bin_dir`), its arguments and
/// environment with the pod fields (`metadata.namespace`, `metadata.name`) filled in.
#[derive(Clone, Debug)]
pub struct ContainerCommand {
    pub binary: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub service_account: String,
}

impl Rendered {
    /// `helm template RELEASE helm/strata -n NAMESPACE --set S...` with `helm`.
    pub fn template(helm: &Path, release: &str, namespace: &str, sets: &[String]) -> Result<Self> {
        let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s.as_str()]).collect();
        let rendered = crate::chart::render(helm, release, namespace, &args)?;
        Ok(Self {
            release: release.to_string(),
            namespace: namespace.to_string(),
            objects: crate::support::parse_yaml(&rendered)?,
        })
    }

    /// The rendered objects of these kinds, in chart order.
    pub fn of_kinds(&self, kinds: &[&str]) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|o| kinds.iter().any(|k| o["kind"] == *k))
            .collect()
    }

    /// The Deployment of `service` (by its `app.kubernetes.io/name` label: with a name
    /// override the Deployment's own name carries a prefix).
    pub fn deployment(&self, service: &str) -> Result<&Value> {
        deployment_of(&self.objects, service)
            .with_context(|| format!("release {} renders no Deployment {service}", self.release))
    }

    /// The ServiceAccount `service`'s pods run as.
    pub fn service_account(&self, service: &str) -> Result<String> {
        Ok(
            self.deployment(service)?["spec"]["template"]["spec"]["serviceAccountName"]
                .as_str()
                .with_context(|| format!("{service}: serviceAccountName"))?
                .to_string(),
        )
    }

    /// The command of `service`'s container, for a pod named `pod_name`.
    pub fn container_command(
        &self,
        service: &str,
        pod_name: &str,
        bin_dir: &Path,
    ) -> Result<ContainerCommand> {
        self.command_of(self.deployment(service)?, service, pod_name, bin_dir)
    }

    /// The command of the container of `service`'s Deployment for shard `shard`
    /// (`sharding.shards`), for a pod named `pod_name`.
    pub fn shard_container_command(
        &self,
        service: &str,
        shard: &str,
        pod_name: &str,
        bin_dir: &Path,
    ) -> Result<ContainerCommand> {
        let deployment = self
            .objects
            .iter()
            .find(|o| {
                o["kind"] == "Deployment"
                    && o["metadata"]["labels"]["app.kubernetes.io/name"] == service
                    && o["metadata"]["labels"]["strata.dev/shard"] == shard
            })
            .with_context(|| {
                format!(
                    "release {} renders no Deployment of {service} for shard {shard}",
                    self.release
                )
            })?;
        self.command_of(deployment, service, pod_name, bin_dir)
    }

    fn command_of(
        &self,
        deployment: &Value,
        service: &str,
        pod_name: &str,
        bin_dir: &Path,
    ) -> Result<ContainerCommand> {
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let service_account = self.service_account(service)?;
        let command = container["command"][0]
            .as_str()
            .with_context(|| format!("{service}: command"))?;
        let binary = bin_dir.join(command.trim_start_matches('/'));
        let args = container["args"]
            .as_array()
            .with_context(|| format!("{service}: args"))?
            .iter()
            .map(|a| a.as_str().unwrap_or_default().to_string())
            .collect();
        let mut env = Vec::new();
        for var in container["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().context("env name")?.to_string();
            let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.namespace") => self.namespace.clone(),
                Some("metadata.name") => pod_name.to_string(),
                Some(other) => bail!("{service}: unexpected fieldRef {other}"),
                None => var["value"].as_str().unwrap_or_default().to_string(),
            };
            env.push((name, value));
        }
        Ok(ContainerCommand {
            binary,
            args,
            env,
            service_account,
        })
    }
}

/// The Deployment of `service` among rendered `objects`, by its `app.kubernetes.io/name`
/// label (with a name override the Deployment's own name carries a prefix).
pub fn deployment_of<'a>(objects: &'a [Value], service: &str) -> Option<&'a Value> {
    // The service's own Deployment, not one of its shards' (`sharding.shards`).
    objects.iter().find(|o| {
        o["kind"] == "Deployment"
            && o["metadata"]["labels"]["app.kubernetes.io/name"] == service
            && o["metadata"]["labels"]["strata.dev/shard"].is_null()
    })
}

/// The `--set` values that render `service` alone (the others and the CRDs off) in the chart.
pub fn alone(service: &str) -> Vec<String> {
    let mut sets = vec!["crds.enabled=false".to_string()];
    for (key, name) in crate::chart::SERVICES {
        sets.push(format!("{key}.enabled={}", name == service));
    }
    sets
}

/// The chart's values key of `service` (`layer-controller` → `layerController`).
pub fn values_key(service: &str) -> Result<&'static str> {
    crate::chart::SERVICES
        .iter()
        .find(|(_, name)| *name == service)
        .map(|(key, _)| *key)
        .with_context(|| format!("{service} is not a service of the chart"))
}

/// Applies the `ValidatingAdmissionPolicy` of `rendered` whose name ends with `suffix`, and its
/// binding, as the cluster's admin; both are deleted when the returned guards drop.
pub fn apply_policy(
    rendered: &Rendered,
    suffix: &str,
) -> Result<Vec<crate::support::DeleteOnDrop>> {
    let policy: Vec<&Value> = rendered
        .of_kinds(&[
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ])
        .into_iter()
        .filter(|o| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with(suffix))
        })
        .collect();
    anyhow::ensure!(
        policy.len() == 2,
        "release {} renders the policy *{suffix} and its binding: {policy:?}",
        rendered.release
    );
    Kubectl {
        binary: crate::support::kubectl_binary(),
        kubeconfig: crate::support::cluster().kubeconfig().to_path_buf(),
    }
    .apply(&policy)?;
    Ok(policy
        .iter()
        .map(|o| crate::support::DeleteOnDrop {
            resource: if o["kind"] == "ValidatingAdmissionPolicy" {
                "validatingadmissionpolicy"
            } else {
                "validatingadmissionpolicybinding"
            },
            name: o["metadata"]["name"].as_str().unwrap_or_default().into(),
        })
        .collect())
}
