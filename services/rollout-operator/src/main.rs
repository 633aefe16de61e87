use clap::Parser;

/// Zone-by-zone StatefulSet rollouts and replica coordination (drop-in for Grafana's rollout-operator).
#[derive(Debug, Parser)]
#[command(name = "rollout-operator", version, about)]
struct Args {
    #[command(flatten)]
    common: core_k8s::CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    core_k8s::install_crypto_provider();
    let args = Args::parse();
    rollout_operator::run(args.common).await?;
    Ok(())
}
