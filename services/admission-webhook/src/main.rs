use clap::Parser;

/// The TLS admission server kube-apiserver calls, with self-managed certificates.
#[derive(Debug, Parser)]
#[command(name = "admission-webhook", version, about)]
struct Args {
    #[command(flatten)]
    common: core_k8s::CommonArgs,
    #[command(flatten)]
    webhook: admission_webhook::WebhookArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    core_k8s::install_crypto_provider();
    let args = Args::parse();
    admission_webhook::run(args.common, args.webhook).await?;
    Ok(())
}
