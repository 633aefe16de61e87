//! `strata-plane`: runs the local control plane for `make e2e` and `make demo`.
//!
//! `up` starts the plane, writes `<dir>/env` (KUBECONFIG, KUBECTL, HELM) and `<dir>/ready`,
//! and keeps it running until SIGINT/SIGTERM — or, with `--exit-on-stdin-close`, until its
//! standard input closes (so a test process that started it cannot leak it). `demo` starts
//! it, installs Strata the way a user would and runs the guided tour (`strata_e2e::demo`),
//! then keeps everything running until Ctrl-C; `demo --check` runs the same tour and exits.
//! Every error is one line naming what failed and why; no backtrace.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use strata_e2e::demo::{Ports, STEPS, Tour};
use strata_e2e::plane::{Plane, PlaneOptions};
use strata_e2e::{say, say_err};

#[derive(Debug, Parser)]
#[command(
    name = "strata-plane",
    about = "The local Kubernetes control plane for Strata's tests and demo"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Start the plane and keep it running.
    Up {
        /// Working directory (data, certificates, logs, kubeconfig).
        #[arg(long, default_value = "target/strata-plane")]
        dir: PathBuf,
        /// Stop when standard input closes.
        #[arg(long)]
        exit_on_stdin_close: bool,
        /// Also run a real node (kubelet, containerd, CNI bridge, kube-proxy; needs root) that
        /// runs pods of namespaces that ask for it, beside the kwok nodes.
        #[arg(long)]
        real_node: bool,
    },
    /// Start the plane, install Strata and run the guided tour of every system.
    Demo {
        #[arg(long, default_value = "target/strata-demo")]
        dir: PathBuf,
        /// Directory holding the service and `strata` binaries.
        #[arg(long)]
        bin_dir: PathBuf,
        /// Run the tour and exit: 0 when every step's outcome happened, 1 at the first that
        /// did not (what `make demo-check` and `make test` run).
        #[arg(long)]
        check: bool,
        /// The services' ports: admin HTTP at BASE+1..BASE+4, the webhook server at BASE+5.
        #[arg(long, default_value_t = 18080)]
        port_base: u16,
        /// Where the services run: `auto` installs the chart onto a real node when this machine
        /// can run one and the images are built (`make images-test`), else runs the services as
        /// processes on this host, saying why; `required` fails instead; `off` never tries.
        #[arg(long, value_enum, default_value_t = RealNode::Auto)]
        real_node: RealNode,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum RealNode {
    Auto,
    Required,
    Off,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Up {
            dir,
            exit_on_stdin_close,
            real_node,
        } => up(dir, exit_on_stdin_close, PlaneOptions { real_node }),
        Cmd::Demo {
            dir,
            bin_dir,
            check,
            port_base,
            real_node,
        } => demo(dir, bin_dir, check, Ports { base: port_base }, real_node),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // `{:#}` is the cause chain on one line; a backtrace is for `RUST_BACKTRACE` users
            // debugging this binary, never for its users.
            say_err!("strata-plane: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn start(dir: &std::path::Path, options: PlaneOptions) -> Result<Plane> {
    let _ = std::fs::remove_file(dir.join("ready"));
    let plane = Plane::start_with(dir, options).context("starting the local control plane")?;
    let mut env = format!(
        "KUBECONFIG={}\nE2E_KUBECONFIG={}\nKUBECTL={}\nHELM={}\n",
        plane.kubeconfig().display(),
        plane.kubeconfig().display(),
        plane.binaries().kubectl().display(),
        plane.binaries().helm.join("helm").display(),
    );
    if let Some(node) = plane.real_node() {
        env.push_str(&node.env_lines());
    }
    std::fs::write(plane.dir().join("env"), env)?;
    std::fs::write(
        plane.dir().join("ready"),
        format!("{:.1}\n", plane.startup.as_secs_f64()),
    )?;
    say_err!(
        "plane: ready in {:.1}s at {} (kubeconfig {})",
        plane.startup.as_secs_f64(),
        plane.api_server(),
        plane.kubeconfig().display()
    );
    Ok(plane)
}

fn up(dir: PathBuf, exit_on_stdin_close: bool, options: PlaneOptions) -> Result<ExitCode> {
    let mut plane = start(&dir, options)?;
    say!("ready {}", plane.kubeconfig().display());
    let runtime = runtime()?;
    runtime.block_on(wait_for_stop(exit_on_stdin_close))?;
    say_err!("plane: stopping");
    plane.stop();
    Ok(ExitCode::SUCCESS)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    // One thread, this one: the processes the demo starts are tied to the thread that
    // started them (a parent-death signal), which must live as long as they should.
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// The demo's plane: with a real node when asked and possible; `auto` falls back to kwok nodes
/// only, saying why, when the images are not built or the node cannot start.
fn demo_plane(dir: &std::path::Path, mode: RealNode) -> Result<Plane> {
    let with_node = PlaneOptions { real_node: true };
    let why_not = match mode {
        RealNode::Off => return Plane::start(dir),
        RealNode::Required | RealNode::Auto if !strata_e2e::in_cluster::image_archives_built() => {
            "the images are not built (`make images-test` builds them)".to_string()
        }
        RealNode::Required | RealNode::Auto => match Plane::start_with(dir, with_node) {
            Ok(plane) => return Ok(plane),
            Err(e) => format!("{e:#}"),
        },
    };
    anyhow::ensure!(
        mode == RealNode::Auto,
        "no real node for the demo: {why_not}"
    );
    say!(
        "The chart's pods cannot run here ({why_not}): the services run as processes on this host instead."
    );
    Plane::start(dir)
}

fn demo(
    dir: PathBuf,
    bin_dir: PathBuf,
    check: bool,
    ports: Ports,
    real_node: RealNode,
) -> Result<ExitCode> {
    let started = Instant::now();
    for binary in [
        "strata",
        "layer-controller",
        "drift-observer",
        "rollout-operator",
        "admission-webhook",
    ] {
        anyhow::ensure!(
            bin_dir.join(binary).is_file(),
            "{} is missing: build the workspace first (`make build`, or run `make demo`)",
            bin_dir.join(binary).display()
        );
    }
    ports.check_free()?;
    let pid_file = strata_e2e::demo::claim_dir(&dir)?;
    say!(
        "Strata demo: a tour of every system on a local control plane ({} steps).",
        STEPS.len()
    );
    let mut plane = demo_plane(&dir, real_node).context("starting the local control plane")?;
    std::fs::write(&pid_file, std::process::id().to_string())?;
    let runtime = runtime()?;
    let mut tour = Tour::new(&plane, bin_dir, ports);
    let outcome = runtime.block_on(async {
        tokio::select! {
            result = tour.run() => Some(result),
            _ = wait_for_stop(false) => None,
        }
    });
    let code = match outcome {
        None => {
            say_err!("demo: interrupted; stopping the services and the plane");
            ExitCode::from(130)
        }
        Some(Err(failed)) => {
            say_err!("demo: {failed}");
            say_err!(
                "demo: service logs and the plane's are in {}",
                plane.dir().join("logs").display()
            );
            ExitCode::FAILURE
        }
        Some(Ok(())) if check => {
            say!(
                "\ndemo: all {} steps happened in {:.1} s",
                STEPS.len(),
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Some(Ok(())) => {
            say!(
                "\nThe tour is over ({:.1} s); Strata and the plane keep running for you to explore:\n  export KUBECONFIG={} PATH={}:{}:$PATH\nService logs: {}\nPress Ctrl-C to stop.",
                started.elapsed().as_secs_f64(),
                plane.kubeconfig().display(),
                plane.binaries().kube.display(),
                tour.bin_dir.display(),
                plane.dir().join("logs").display(),
            );
            runtime.block_on(wait_for_stop(false))?;
            say_err!("demo: stopping the services and the plane");
            ExitCode::SUCCESS
        }
    };
    for service in &mut tour.services {
        service.terminate_blocking();
    }
    drop(tour);
    plane.stop();
    let _ = std::fs::remove_file(&pid_file);
    Ok(code)
}

/// Returns on SIGINT/SIGTERM, or when stdin closes if asked to.
async fn wait_for_stop(exit_on_stdin_close: bool) -> Result<()> {
    let (stdin_closed_tx, stdin_closed_rx) = tokio::sync::oneshot::channel::<()>();
    if exit_on_stdin_close {
        std::thread::spawn(move || {
            let mut sink = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = stdin_closed_tx.send(());
        });
    }
    let stdin_closed = async {
        if exit_on_stdin_close {
            let _ = stdin_closed_rx.await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = stdin_closed => {}
    }
    Ok(())
}
