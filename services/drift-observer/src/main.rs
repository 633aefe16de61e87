use clap::Parser;

/// Detects drift between what the layers applied and what runs, reports it and asks for heals.
#[derive(Debug, Parser)]
// A flag given twice takes its last value, so a chart's `extraArgs` can override a flag the
// chart itself sets (clap refuses repeats by default).
#[command(name = "drift-observer", version, about, args_override_self = true)]
struct Args {
    #[command(flatten)]
    common: core_k8s::CommonArgs,
    #[command(flatten)]
    drift: drift_observer::DriftArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    core_k8s::install_crypto_provider();
    let args = Args::parse();
    drift_observer::run(args.common, args.drift).await?;
    Ok(())
}
