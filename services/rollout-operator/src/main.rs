use clap::Parser;

/// Zone-by-zone StatefulSet rollouts and replica coordination (drop-in for Grafana's rollout-operator).
#[derive(Debug, Parser)]
// A flag given twice takes its last value, so a chart's `extraArgs` can override a flag the
// chart itself sets (clap refuses repeats by default).
#[command(name = "rollout-operator", version, about, args_override_self = true)]
struct Args {
    #[command(flatten)]
    common: core_k8s::CommonArgs,
    #[command(flatten)]
    pods: rollout_operator::PodArgs,
    #[command(flatten)]
    compat: rollout_operator::CompatArgs,
    #[command(flatten)]
    scope: rollout_operator::ScopeArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    core_k8s::install_crypto_provider();
    // Accept the Grafana image's flags so its manifests work unchanged.
    let translated = match rollout_operator::flags::translate(std::env::args().collect()) {
        Ok(translated) => translated,
        Err(e) => {
            eprintln!("rollout-operator: {e}");
            std::process::exit(1);
        }
    };
    let args = Args::parse_from(translated.args);
    for warning in translated.warnings {
        eprintln!("rollout-operator: {warning}");
    }
    rollout_operator::run(args.common, args.pods, args.compat, args.scope).await?;
    Ok(())
}
