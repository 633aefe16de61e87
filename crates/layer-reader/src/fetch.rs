//! Downloading a Flux artifact: plain HTTP inside the cluster (source-controller's address),
//! through `HTTP_PROXY` when set, bounded in size and time by [`Limits`].

use core_layers::error::LayerError;
use core_layers::source::Limits;

/// Downloads an artifact over HTTP with a size bound (Flux's source-controller serves
/// artifacts over plain HTTP inside the cluster).
pub async fn download(url: &str, limits: &Limits) -> Result<Vec<u8>, LayerError> {
    use http_body_util::{BodyExt, Empty, Limited};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    if !url.starts_with("http://") {
        return Err(LayerError::Artifact(format!(
            "artifact URL {url:?}: only http:// is supported (Flux source-controller's in-cluster address)"
        )));
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|e| LayerError::Artifact(format!("artifact URL {url:?}: {e}")))?;
    let proxies = core_k8s::proxy::Proxies::from_env()
        .map_err(|e| LayerError::Artifact(format!("downloading {url}: {e}")))?;
    let proxy = proxies.for_uri(&uri);
    let fetch = async {
        let response = match proxy {
            // Through HTTP_PROXY: the request goes to the proxy, in absolute form.
            Some(proxy) => via_proxy(&uri, proxy).await,
            None => Client::builder(TokioExecutor::new())
                .build_http::<Empty<hyper::body::Bytes>>()
                .get(uri.clone())
                .await
                .map_err(|e| e.to_string()),
        }
        .map_err(|e| LayerError::Artifact(format!("downloading {url}: {e}")))?;
        if !response.status().is_success() {
            return Err(LayerError::Artifact(format!(
                "downloading {url}: HTTP {}",
                response.status()
            )));
        }
        let limit = usize::try_from(limits.max_artifact_bytes).unwrap_or(usize::MAX);
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| {
                LayerError::Artifact(format!(
                    "downloading {url}: {e} (limit {} bytes)",
                    limits.max_artifact_bytes
                ))
            })?;
        Ok(body.to_bytes().to_vec())
    };
    tokio::time::timeout(limits.download_timeout, fetch)
        .await
        .map_err(|_| {
            LayerError::Artifact(format!(
                "downloading {url}: no answer within {}s",
                limits.download_timeout.as_secs()
            ))
        })?
}

/// GET `target` (http://) through an HTTP proxy: one connection to the proxy, the request
/// line in absolute form, `Proxy-Authorization` from the proxy URL's credentials.
async fn via_proxy(
    target: &http::Uri,
    proxy: &http::Uri,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    use http_body_util::Empty;
    use hyper_util::rt::TokioIo;

    let address = format!(
        "{}:{}",
        proxy.host().unwrap_or_default(),
        proxy.port_u16().unwrap_or(80)
    );
    let stream = tokio::net::TcpStream::connect(&address)
        .await
        .map_err(|e| format!("proxy {address}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("proxy {address}: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = http::Request::get(target.clone()).header(
        http::header::HOST,
        target.authority().map(|a| a.as_str()).unwrap_or_default(),
    );
    if let Some(auth) = core_k8s::proxy::basic_auth(proxy) {
        request = request.header("proxy-authorization", auth);
    }
    let request = request
        .body(Empty::<hyper::body::Bytes>::new())
        .map_err(|e| e.to_string())?;
    sender
        .send_request(request)
        .await
        .map_err(|e| format!("proxy {address}: {e}"))
}
