use clap::Parser;

/// The TLS admission server kube-apiserver calls, with self-managed certificates.
#[derive(Debug, Parser)]
// A flag given twice takes its last value, so a chart's `extraArgs` can override a flag the
// chart itself sets (clap refuses repeats by default).
#[command(name = "admission-webhook", version, about, args_override_self = true)]
struct Args {
    #[command(flatten)]
    common: core_k8s::CommonArgs,
    #[command(flatten)]
    webhook: admission_server::WebhookArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    core_k8s::install_crypto_provider();
    let args = Args::parse();
    admission_server::run(args.common, args.webhook).await?;
    Ok(())
}
