//! The webhook benchmark's floor: the same server stack as the admission-webhook (axum,
//! axum-server, rustls with ring, TCP_NODELAY, a multi-thread tokio runtime) answering every
//! no-downscale review with a fixed AdmissionReview, without decoding it. Run under the same
//! load, it shows how much of the measured latency the machine, the stack and the load
//! generator account for before any decision code runs.
//!
//! Usage: `tls_floor_server ADDRESS CERT_PEM KEY_PEM`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark helper fails loudly

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};

/// The decision the load generator expects, read from the request uid it chose
/// (`deny`/`allow`) by a byte search — no JSON decoding.
async fn answer(body: Bytes) -> ([(&'static str, &'static str); 1], &'static str) {
    let allowed = !body.windows(12).any(|w| w == br#""uid":"deny""#);
    let json = if allowed {
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"allow","allowed":true}}"#
    } else {
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"deny","allowed":false,"status":{"message":"floor"}}}"#
    };
    ([("content-type", "application/json")], json)
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args: Vec<String> = std::env::args().collect();
    let [_, address, cert, key] = args.as_slice() else {
        panic!("usage: tls_floor_server ADDRESS CERT_PEM KEY_PEM");
    };
    let tls = RustlsConfig::from_pem_file(cert, key).await.unwrap();
    let acceptor = RustlsAcceptor::new(tls).acceptor(axum_server::accept::NoDelayAcceptor::new());
    let router = Router::new().route("/admission/no-downscale", post(answer));
    let address: std::net::SocketAddr = address.parse().unwrap();
    axum_server::bind(address)
        .acceptor(acceptor)
        .serve(router.into_make_service())
        .await
        .unwrap();
}
