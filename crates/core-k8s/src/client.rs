//! Building a Kubernetes client from the common flags.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::{CommonArgs, Error, Result};

/// Client configuration from, in order: `--kubeconfig`/$KUBECONFIG (with `--context`), else
/// the in-cluster service account, else `~/.kube/config`.
pub async fn config(args: &CommonArgs) -> Result<Config> {
    config_from(args.kubeconfig.as_deref(), args.context.as_deref()).await
}

/// Client configuration from an optional kubeconfig path and context (see [`config`]).
pub async fn config_from(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<Config> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let mut config = match (kubeconfig, context) {
        (Some(path), _) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))
        }
        (None, Some(_)) => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| Error::Kubeconfig(e.to_string())),
        (None, None) => Config::infer()
            .await
            .map_err(|e| Error::Kubeconfig(e.to_string())),
    }?;
    crate::proxy::apply_to_config(&mut config, crate::proxy::Proxies::from_env()?);
    if let Some(proxy) = &config.proxy_url {
        tracing::info!(server = %config.cluster_url, proxy = %crate::proxy::redacted(proxy), "reaching the API server through a proxy");
    }
    Ok(config)
}

/// A client built from [`config`].
pub async fn client(args: &CommonArgs) -> Result<Client> {
    client_from(args.kubeconfig.as_deref(), args.context.as_deref()).await
}

/// A client built from [`config_from`].
pub async fn client_from(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<Client> {
    let config = config_from(kubeconfig, context).await?;
    Client::try_from(config).map_err(|e| {
        Error::Kubeconfig(crate::proxy::without_credentials(&format!(
            "building client: {e}"
        )))
    })
}
