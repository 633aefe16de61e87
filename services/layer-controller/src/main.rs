use clap::Parser;

/// Deploys ordered, dependency-aware layers of addons (AddonsLayer).
#[derive(Debug, Parser)]
// A flag given twice takes its last value, so a chart's `extraArgs` can override a flag the
// chart itself sets (clap refuses repeats by default).
#[command(name = "layer-controller", version, about, args_override_self = true)]
struct Args {
    #[command(flatten)]
    common: core_k8s::CommonArgs,
    #[command(flatten)]
    layer: layer_controller::LayerArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    core_k8s::install_crypto_provider();
    let args = Args::parse();
    layer_controller::run(args.common, args.layer).await?;
    Ok(())
}
