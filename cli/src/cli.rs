//! The command tree.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Exit code of bad input.
pub const EXIT_NOT_AVAILABLE: u8 = 2;

/// Strata: ship cluster addons and stateful services safely.
#[derive(Debug, Parser)]
#[command(name = "strata", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compute, offline, the kstatus-compatible status of every object in YAML/JSON input.
    Status(StatusArgs),
    /// Wait, against a cluster, until every object in the input is Current (or deleted).
    Wait(WaitArgs),
    /// Render Helm charts into reviewed, flat GitOps manifests.
    Render(RenderArgs),
    /// Inspect AddonsLayers in a cluster.
    #[command(subcommand)]
    Layers(LayersCommand),
    /// What drifted in a layer (the drift-observer's report), or local manifests compared
    /// with the cluster (`-f`). Exit 1 when something drifted.
    Drift(DriftArgs),
    /// Ask what the rollout-operator would do next.
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Run admission reviews offline through Strata's webhooks.
    #[command(subcommand)]
    Admission(AdmissionCommand),
    /// Print a shell completion script: `source <(strata completion bash)`, or write it where
    /// your shell loads completions (zsh: a file `_strata` on `$fpath`; fish:
    /// `~/.config/fish/completions/strata.fish`).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StatusOutput {
    Json,
    Table,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["files", "kinds"])))]
pub struct StatusArgs {
    /// A file, a directory (read recursively) or `-` for standard input; may be repeated.
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<String>,
    /// Read live objects from the cluster instead: KIND or KIND/NAME, where KIND is a kind,
    /// resource or short name (`Deployment`, `deployments.apps`, `deploy`); may be repeated.
    #[arg(
        short = 'k',
        long = "kind",
        value_name = "KIND[/NAME]",
        conflicts_with = "files"
    )]
    pub kinds: Vec<String>,
    /// Namespace of the live objects (default: the kubeconfig's); with `-k`.
    #[arg(short = 'n', long, conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Live objects of every namespace; with `-k`.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = StatusOutput::Table)]
    pub output: StatusOutput,
    /// Fix the clock for time-dependent rules (RFC 3339).
    #[arg(long)]
    pub now: Option<String>,
    #[command(flatten)]
    pub health: HealthArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// How objects are judged, shared by `status` and `wait`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Custom health expressions for kinds kstatus cannot judge: a YAML list in Flux's
    /// `healthCheckExprs` format (apiVersion, kind, current, inProgress, failed). Under
    /// `--strict` they override the built-in rule pack kind by kind.
    #[arg(long, value_name = "FILE")]
    pub health_exprs: Option<PathBuf>,
    /// Stricter than kstatus: workloads whose pods cannot start are Failed after
    /// --failure-grace, the built-in rules for popular CRDs apply, failed Pods are Failed,
    /// stale conditions and unobserved custom resources are InProgress, and more (see
    /// docs/core-status.md). Off by default: the default is kstatus exactly.
    #[arg(long)]
    pub strict: bool,
    /// With --strict: how long a workload's pod may be unable to start (image pull errors,
    /// bad config, crash loop, unschedulable) before the workload is Failed.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub failure_grace: String,
    /// With --strict: how long after its last apply a custom resource whose status predates
    /// that apply is InProgress (waiting for its controller to write status); past it, it is
    /// judged by kstatus' rules with a warning.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub observed_bound: String,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum WaitFor {
    Current,
    Deleted,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum WaitEngine {
    Watch,
    Poll,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// A file or a directory (read recursively).
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<String>,
    /// The state to wait for.
    #[arg(long = "for", value_enum, default_value_t = WaitFor::Current)]
    pub wait_for: WaitFor,
    /// Also wait for Jobs to complete.
    #[arg(long)]
    pub jobs: bool,
    /// Helm's hook wait: wait only for the Pods and Jobs of the input to complete (a Pod
    /// Succeeded, a Job Complete; a failed one ends the wait), leaving every other kind out.
    #[arg(long, conflicts_with_all = ["jobs", "wait_for"])]
    pub hooks: bool,
    /// Give up after this long (e.g. 90s, 5m).
    #[arg(long, default_value = "5m")]
    pub timeout: String,
    /// How to read the cluster: `watch` (one watch per kind and namespace) or `poll` (LIST
    /// every --poll-interval; needs only `list` permission).
    #[arg(long, value_enum, default_value_t = WaitEngine::Watch)]
    pub engine: WaitEngine,
    /// Interval of the poll engine.
    #[arg(long, default_value = "2s")]
    pub poll_interval: String,
    #[command(flatten)]
    pub health: HealthArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GitOps {
    Argocd,
    Flux,
    Strata,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct RenderArgs {
    #[command(subcommand)]
    pub command: Option<RenderCommand>,
    /// The course file listing the charts to render (Reckoner v2).
    #[arg(required = true)]
    pub course: Option<PathBuf>,
    /// Which GitOps tool the output is laid out for (Argo CD, as in Reckoner's design).
    #[arg(long, value_enum, default_value_t = GitOps::Argocd)]
    pub gitops: GitOps,
    /// Output directory [default: `manifests` beside the course file].
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Capabilities profile (kube version, API versions) for charts that branch on
    /// `.Capabilities`; see `strata render capture-profile`.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Print what would change as a unified diff, write nothing; exit 1 when something would.
    #[arg(long)]
    pub diff: bool,
    /// How many `helm template` run at once [default: the number of CPUs].
    #[arg(long)]
    pub jobs: Option<usize>,
}

#[derive(Debug, Subcommand)]
pub enum RenderCommand {
    /// Write a capabilities profile (kube version, API versions, cluster-scoped kinds) from a
    /// live cluster's discovery.
    CaptureProfile {
        #[arg(short = 'o', long, default_value = "profile.yaml")]
        output: PathBuf,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GraphFormat {
    Dot,
    Mermaid,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum LayersCommand {
    /// Print the dependency graph of the cluster's AddonsLayers, with their states.
    Graph {
        #[arg(short = 'o', long, value_enum, default_value_t = GraphFormat::Mermaid)]
        output: GraphFormat,
        /// The label naming a layer's shard; once any layer carries it, each shard is drawn
        /// as a group and edges that cross shards are marked.
        #[arg(long, default_value = core_layers::keys::SHARD_LABEL)]
        shard_key: String,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Show what the layer-controller would do next for one layer: whether it may apply
    /// (every blocker), and a server-side dry run of what it would create, change and prune.
    ///
    /// With `--from-empty` instead of LAYER: what would break on a cluster rebuilt from
    /// nothing, checked without touching one — a layer applying a kind whose CRD only another
    /// layer installs, or into a namespace only another layer creates, without depending on
    /// it; a dependency cycle; a dependency no layer's version satisfies. One line per finding
    /// naming both layers and the object, exit 1 when there is any (a pre-merge check). Reads
    /// the cluster's layers and their sources, or with `-f`, AddonsLayer files and their
    /// sources under `--source-root`, offline.
    Plan {
        /// The AddonsLayer name.
        #[arg(required_unless_present = "from_empty", conflicts_with = "from_empty")]
        layer: Option<String>,
        /// Check every layer for what would break on an empty cluster.
        #[arg(long)]
        from_empty: bool,
        /// With `--from-empty`: AddonsLayer files (a file, a directory read recursively, or
        /// `-`), checked offline instead of the cluster's layers.
        #[arg(short = 'f', long = "filename", requires = "from_empty")]
        files: Vec<String>,
        /// With `-f`: the directory every layer's `spec.source.path` is relative to (the
        /// checkout of the repository the sources point at).
        #[arg(long, default_value = ".", requires = "files")]
        source_root: std::path::PathBuf,
        /// With `--from-empty` against a cluster: only the layers matching this label selector
        /// (a shard, a team); a dependency on a layer left out counts as missing.
        #[arg(short = 'l', long, requires = "from_empty", conflicts_with = "files")]
        selector: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t = PlanFormat::Text)]
        output: PlanFormat,
        /// Namespace of a source when the layer does not name one (the controller's
        /// `--default-source-namespace`).
        #[arg(long, env = "POD_NAMESPACE", default_value = "strata-system")]
        default_source_namespace: String,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Why LAYER is not Deployed: its state and for how long, the objects it waits on (with
    /// their reasons), and every layer or object blocking it, each blocking layer explained
    /// in turn down to the object at the end of the path.
    Why {
        /// The AddonsLayer name.
        layer: String,
        #[arg(short = 'o', long, value_enum, default_value_t = PlanFormat::Text)]
        output: PlanFormat,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Ask the layer-controller to reconcile LAYER now (as `flux reconcile`): sets
    /// `strata.dev/reconcile-requested-at`; with `--wait`, waits until the controller has
    /// handled the request and prints the layer's state.
    Reconcile {
        /// The AddonsLayer name.
        layer: String,
        /// Wait until the layer-controller handled the request.
        #[arg(long)]
        wait: bool,
        /// How long `--wait` waits.
        #[arg(long, default_value = "2m", value_parser = core_k8s::args::parse_duration)]
        timeout: std::time::Duration,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// The outcomes of LAYER's attempts, newest first: each revision deployed, failed, or
    /// restored by a rollback, with the revisions kept for rollback (`spec.rollback`) marked.
    History {
        /// The AddonsLayer name.
        layer: String,
        #[arg(short = 'o', long, value_enum, default_value_t = PlanFormat::Text)]
        output: PlanFormat,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Roll LAYER back to a kept revision (the last deployed one unless `--to`): the
    /// layer-controller applies it exactly as it was applied then, prunes what the current
    /// revision added and reports `RolledBack`; the layer stays there until its source or
    /// spec changes. Needs `spec.rollback` on the layer (which keeps the revisions).
    Rollback {
        /// The AddonsLayer name.
        layer: String,
        /// The kept revision to restore (as `strata layers history` lists it; a unique
        /// beginning is enough).
        #[arg(long)]
        to: Option<String>,
        /// Wait until the layer is RolledBack (or the rollback failed).
        #[arg(long)]
        wait: bool,
        /// How long `--wait` waits.
        #[arg(long, default_value = "5m", value_parser = core_k8s::args::parse_duration)]
        timeout: std::time::Duration,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Hold LAYER: the layer-controller touches nothing of it until `resume` (`spec.hold`,
    /// Kraan's hold, Flux's suspend).
    Suspend {
        /// The AddonsLayer name.
        layer: String,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Release a held LAYER and ask for a reconcile at once.
    Resume {
        /// The AddonsLayer name.
        layer: String,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Convert Kraan AddonsLayers (`kraan.io/v1alpha1`) and Flux Kustomizations
    /// (`kustomize.toolkit.fluxcd.io`) to Strata's AddonsLayers, printing the result as
    /// YAML and every change (with the reason) on stderr. Exit 1 when a converted layer would
    /// be refused by the layer-controller. Offline: no cluster needed.
    Import {
        /// A file, a directory (read recursively) or `-` for standard input.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DriftOutput {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct DriftArgs {
    /// The AddonsLayer whose drift report to print.
    #[arg(required_unless_present = "files", conflicts_with = "files")]
    pub layer: Option<String>,
    /// Compare these manifests (a file or a directory, recursively) with the cluster instead.
    #[arg(short = 'f', long = "filename")]
    pub files: Option<PathBuf>,
    #[arg(short = 'o', long, value_enum, default_value_t = DriftOutput::Table)]
    pub output: DriftOutput,
    /// The field manager whose apply the comparison simulates (`-f` only).
    #[arg(long, default_value = "strata-layer-controller")]
    pub field_manager: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PlanFormat {
    Text,
    Json,
}

/// Which cluster to talk to.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Path to a kubeconfig.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long)]
    pub context: Option<String>,
}

impl ClusterArgs {
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        Ok(
            core_k8s::client::client_from(self.kubeconfig.as_deref(), self.context.as_deref())
                .await?,
        )
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum JsonOutput {
    Json,
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Print what ONE reconcile of the rollout-operator would do on the given state.
    Plan {
        /// StatefulSets, Pods, ZoneAwarePodDisruptionBudgets and reference objects of one
        /// namespace, as `kubectl get -o yaml` prints them.
        #[arg(short = 'f', long = "filename")]
        state: PathBuf,
        /// Fix the clock (RFC 3339).
        #[arg(long)]
        now: Option<String>,
        /// What a pod would answer a delayed-downscale prepare call: `POD=TIME` (RFC 3339 or
        /// unix seconds), repeatable. Without it a delayed downscale is shown held: offline,
        /// no pod reports a preparation time.
        #[arg(long = "prepared", value_name = "POD=TIME")]
        prepared: Vec<String>,
        #[arg(short = 'o', long, value_enum, default_value_t = JsonOutput::Json)]
        output: JsonOutput,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdmissionCommand {
    /// Run one AdmissionReview (v1) through a webhook and print the response.
    Review {
        /// The AdmissionReview JSON.
        #[arg(short = 'f', long = "filename")]
        review: PathBuf,
        /// Objects the webhook would read from the cluster.
        #[arg(long)]
        state: Option<PathBuf>,
        /// Fix the clock (RFC 3339).
        #[arg(long)]
        now: Option<String>,
        /// Which webhook endpoint handles the review.
        #[arg(long, value_enum)]
        webhook: core_admission::webhooks::Webhook,
    },
}

/// Bad input (unreadable file, malformed YAML, a bad flag value): one line on stderr, exit 2.
pub fn input_error(message: &str) -> ExitCode {
    eprintln!("strata: {message}");
    ExitCode::from(EXIT_NOT_AVAILABLE)
}

/// The status rules from `--strict` and `--health-exprs`.
pub fn status_rules(args: &HealthArgs) -> Result<core_status::policy::Rules, String> {
    use core_status::health::HealthRules;
    use core_status::policy::{Policy, Rules};
    let own = match &args.health_exprs {
        None => HealthRules::default(),
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            HealthRules::from_yaml(&path.display().to_string(), &text).map_err(|e| match e {
                // Name the file too; a YAML error already starts with it.
                core_status::StatusError::Expression { .. } => {
                    format!("{}: {e}", path.display())
                }
                e => e.to_string(),
            })?
        }
    };
    if !args.strict {
        return Ok(Rules {
            policy: Policy::kstatus(),
            health: own,
        });
    }
    let policy = Policy {
        failure_grace: core_k8s::args::parse_duration(&args.failure_grace)
            .map_err(|e| format!("--failure-grace: {e}"))?,
        observed_bound: core_k8s::args::parse_duration(&args.observed_bound)
            .map_err(|e| format!("--observed-bound: {e}"))?,
        ..Policy::strict()
    };
    // The built-in rules for popular CRDs come with --strict; the user's file wins kind by kind.
    Ok(Rules {
        policy,
        health: HealthRules::pack().overridden_by(own),
    })
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Status(args) => crate::status::run(&args),
        Command::Wait(args) => crate::wait::run(&args),
        Command::Render(args) => crate::render::run(&args),
        Command::Layers(LayersCommand::Graph {
            output,
            shard_key,
            cluster,
        }) => crate::layers::graph(output, &shard_key, &cluster),
        Command::Layers(LayersCommand::Import { files }) => crate::layers::import(&files),
        Command::Layers(LayersCommand::Why {
            layer,
            output,
            cluster,
        }) => crate::layers::why(&layer, output, &cluster),
        Command::Layers(LayersCommand::Reconcile {
            layer,
            wait,
            timeout,
            cluster,
        }) => crate::layers::reconcile(&layer, wait.then_some(timeout), &cluster),
        Command::Layers(LayersCommand::History {
            layer,
            output,
            cluster,
        }) => crate::layers::history(&layer, output, &cluster),
        Command::Layers(LayersCommand::Rollback {
            layer,
            to,
            wait,
            timeout,
            cluster,
        }) => crate::layers::rollback(&layer, to.as_deref(), wait.then_some(timeout), &cluster),
        Command::Layers(LayersCommand::Suspend { layer, cluster }) => {
            crate::layers::set_hold(&layer, true, &cluster)
        }
        Command::Layers(LayersCommand::Resume { layer, cluster }) => {
            crate::layers::set_hold(&layer, false, &cluster)
        }
        Command::Completion { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(shell, &mut Cli::command(), "strata", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Layers(LayersCommand::Plan {
            layer,
            from_empty,
            files,
            source_root,
            selector,
            output,
            default_source_namespace,
            cluster,
        }) => match layer {
            Some(layer) if !from_empty => {
                crate::layers::plan(&layer, output, &default_source_namespace, &cluster)
            }
            _ if !files.is_empty() => crate::layers::from_empty_files(&files, &source_root),
            _ => crate::layers::from_empty_cluster(
                &default_source_namespace,
                selector.as_deref(),
                &cluster,
            ),
        },
        Command::Drift(args) => match (&args.layer, &args.files) {
            (_, Some(files)) => {
                crate::drift::files(files, args.output, &args.field_manager, &args.cluster)
            }
            (Some(layer), None) => crate::drift::layer(layer, args.output, &args.cluster),
            (None, None) => Ok(input_error("strata drift: give a LAYER or -f DIR")),
        },
        Command::Rollout(RolloutCommand::Plan {
            state,
            now,
            prepared,
            ..
        }) => crate::rollout::plan(&state, now.as_deref(), &prepared),
        Command::Admission(AdmissionCommand::Review {
            review,
            state,
            now,
            webhook,
        }) => crate::admission::review(&review, state.as_deref(), now.as_deref(), webhook),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn contracts_parse() {
        let cases: &[&[&str]] = &[
            &[
                "strata",
                "status",
                "-f",
                "-",
                "-o",
                "json",
                "--now",
                "2026-01-01T00:00:00Z",
            ],
            &["strata", "status", "-f", "a.yaml", "-f", "dir/"],
            &["strata", "status", "-k", "deploy", "-k", "cm/x", "-n", "ns"],
            &[
                "strata",
                "status",
                "-k",
                "Deployment/web",
                "-A",
                "-o",
                "json",
            ],
            &[
                "strata",
                "wait",
                "-f",
                "hooks.yaml",
                "--hooks",
                "--timeout",
                "5m",
            ],
            &[
                "strata",
                "wait",
                "-f",
                "dir",
                "--for",
                "deleted",
                "--jobs",
                "--timeout",
                "90s",
            ],
            &[
                "strata",
                "render",
                "--gitops",
                "flux",
                "-o",
                "./out",
                "course.yaml",
            ],
            &["strata", "render", "course.yaml"],
            &["strata", "render", "--gitops", "argocd", "course.yaml"],
            &[
                "strata",
                "render",
                "--gitops",
                "strata",
                "--diff",
                "--profile",
                "p.yaml",
                "c.yaml",
            ],
            &["strata", "render", "capture-profile", "-o", "profile.yaml"],
            &["strata", "layers", "graph", "-o", "dot"],
            &["strata", "layers", "plan", "base"],
            &["strata", "layers", "import", "-f", "kraan.yaml"],
            &["strata", "drift", "base"],
            &["strata", "drift", "base", "-o", "json"],
            &["strata", "drift", "-f", "manifests/"],
            &[
                "strata",
                "rollout",
                "plan",
                "-f",
                "state.yaml",
                "--now",
                "2026-01-01T00:00:00Z",
                "-o",
                "json",
            ],
            &[
                "strata",
                "admission",
                "review",
                "-f",
                "r.json",
                "--state",
                "s.yaml",
                "--webhook",
                "no-downscale",
            ],
        ];
        for argv in cases {
            assert!(Cli::try_parse_from(*argv).is_ok(), "{argv:?}");
        }
        let refused: &[&[&str]] = &[
            // Input from files or from the cluster: one of them, not both, not neither.
            &["strata", "status"],
            &["strata", "status", "-f", "a.yaml", "-k", "deploy"],
            &["strata", "status", "-k", "deploy", "-n", "ns", "-A"],
            &["strata", "wait", "-f", "a.yaml", "--hooks", "--jobs"],
            &[
                "strata", "wait", "-f", "a.yaml", "--hooks", "--for", "deleted",
            ],
        ];
        for argv in refused {
            assert!(Cli::try_parse_from(*argv).is_err(), "{argv:?}");
        }
        // `capture-profile` is the subcommand, not a course file of that name.
        let cli = Cli::try_parse_from(["strata", "render", "capture-profile", "-o", "p.yaml"]);
        let Ok(Cli {
            command: Command::Render(render),
        }) = cli
        else {
            panic!("render capture-profile does not parse");
        };
        assert!(matches!(
            render.command,
            Some(RenderCommand::CaptureProfile { .. })
        ));
        assert!(render.course.is_none());
        let Ok(Cli {
            command: Command::Render(render),
        }) = Cli::try_parse_from(["strata", "render", "course.yaml"])
        else {
            panic!("render course.yaml does not parse");
        };
        assert!(matches!(render.gitops, GitOps::Argocd), "argocd by default");
        assert!(
            render.output.is_none(),
            "default output is beside the course"
        );
        for bad in [
            &["strata", "status"][..],
            &["strata", "status", "-f", "x", "-o", "xml"][..],
            &["strata", "admission", "review", "-f", "r.json"][..],
            &["strata", "wait", "-f", "x", "--for", "ready"][..],
            &["strata", "drift"][..],
            &["strata", "drift", "base", "-f", "dir"][..],
            &["strata", "render"][..],
            &["strata", "render", "--gitops", "helmfile", "c.yaml"][..],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
