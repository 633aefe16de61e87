//! `strata-plane`: runs the local control plane for `make e2e` and `make demo`.
//!
//! `up` starts the plane, writes `<dir>/env` (KUBECONFIG, KUBECTL, HELM) and `<dir>/ready`,
//! and keeps it running until SIGINT/SIGTERM — or, with `--exit-on-stdin-close`, until its
//! standard input closes (so a test process that started it cannot leak it). `demo` does the
//! same and also runs every Strata service against it and applies a sample.

use std::io::Read;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use strata_e2e::plane::Plane;
use strata_e2e::services::{SERVICES, ServiceProcess};

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
    },
    /// Start the plane, run every service against it and apply a sample.
    Demo {
        #[arg(long, default_value = "target/strata-demo")]
        dir: PathBuf,
        /// Directory holding the service binaries.
        #[arg(long)]
        bin_dir: PathBuf,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Up {
            dir,
            exit_on_stdin_close,
        } => up(dir, exit_on_stdin_close),
        Cmd::Demo { dir, bin_dir } => demo(dir, bin_dir),
    }
}

fn start(dir: &std::path::Path) -> Result<Plane> {
    let _ = std::fs::remove_file(dir.join("ready"));
    let plane = Plane::start(dir).context("starting the local control plane")?;
    let env = format!(
        "KUBECONFIG={}\nE2E_KUBECONFIG={}\nKUBECTL={}\nHELM={}\n",
        plane.kubeconfig().display(),
        plane.kubeconfig().display(),
        plane.binaries().kubectl().display(),
        plane.binaries().helm.join("helm").display(),
    );
    std::fs::write(plane.dir().join("env"), env)?;
    std::fs::write(
        plane.dir().join("ready"),
        format!("{:.1}\n", plane.startup.as_secs_f64()),
    )?;
    eprintln!(
        "plane: ready in {:.1}s at {} (kubeconfig {})",
        plane.startup.as_secs_f64(),
        plane.api_server(),
        plane.kubeconfig().display()
    );
    Ok(plane)
}

fn up(dir: PathBuf, exit_on_stdin_close: bool) -> Result<()> {
    let mut plane = start(&dir)?;
    println!("ready {}", plane.kubeconfig().display());
    wait_for_stop(exit_on_stdin_close)?;
    eprintln!("plane: stopping");
    plane.stop();
    Ok(())
}

fn demo(dir: PathBuf, bin_dir: PathBuf) -> Result<()> {
    let mut plane = start(&dir)?;
    let mut services = Vec::new();
    // Strata's CRDs first, so the services' caches sync and the sample's layers are served.
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    let status = plane
        .kubectl()
        .args(["apply", "--server-side", "-f"])
        .arg(&crds)
        .stdout(Stdio::inherit())
        .status()?;
    anyhow::ensure!(status.success(), "applying {} failed", crds.display());
    let status = plane
        .kubectl()
        .args([
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ])
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "the CRDs did not become Established");
    for (i, service) in SERVICES.iter().enumerate() {
        let admin = format!("127.0.0.1:{}", 18081 + i);
        let process = ServiceProcess::spawn_blocking(
            &bin_dir.join(service),
            plane.kubeconfig(),
            &["--admin-address", &admin, "--lease-namespace", "default"],
            &plane.dir().join("logs"),
        )?;
        eprintln!("demo: {service} running, admin http://{admin}/metrics");
        services.push(process);
    }
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/demo.yaml");
    let status = plane
        .kubectl()
        .args(["apply", "--server-side", "-f"])
        .arg(&sample)
        .stdout(Stdio::inherit())
        .status()?;
    anyhow::ensure!(status.success(), "applying {} failed", sample.display());
    println!(
        "\nStrata demo is running.\n  export KUBECONFIG={kc}\n  {kubectl} get nodes -L topology.kubernetes.io/zone\n  {kubectl} -n demo get statefulsets,pods -o wide\n  {kubectl} get leases -n default\n  {kubectl} get addonslayers\nService logs: {logs}\nPress Ctrl-C to stop.",
        kc = plane.kubeconfig().display(),
        kubectl = plane.binaries().kubectl().display(),
        logs = plane.dir().join("logs").display(),
    );
    wait_for_stop(false)?;
    eprintln!("demo: stopping services and the plane");
    for service in &mut services {
        service.terminate_blocking();
    }
    plane.stop();
    Ok(())
}

/// Blocks until SIGINT/SIGTERM, or until stdin closes when asked to.
fn wait_for_stop(exit_on_stdin_close: bool) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
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
        Ok::<_, anyhow::Error>(())
    })
}
