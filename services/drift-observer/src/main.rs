use clap::Parser;

/// Detects drift between what the layers applied and what runs, and reports it.
#[derive(Debug, Parser)]
#[command(name = "drift-observer", version, about)]
struct Args {
    #[command(flatten)]
    common: core_k8s::CommonArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    core_k8s::install_crypto_provider();
    let args = Args::parse();
    drift_observer::run(args.common).await?;
    Ok(())
}
