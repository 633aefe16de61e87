use clap::Parser;

/// Deploys ordered, dependency-aware layers of addons (AddonsLayer).
#[derive(Debug, Parser)]
#[command(name = "layer-controller", version, about)]
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
