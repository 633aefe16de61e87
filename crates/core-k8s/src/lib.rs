//! core-k8s: the runtime every Strata service shares.
//!
//! It owns the pieces that are the same in every deployable — the Kubernetes client, the
//! common command-line flags, logs and traces, the metrics registry and admin HTTP server,
//! the leader Lease, server-side apply (typed and dynamic), Events, and an ordered graceful
//! shutdown — so that a service's own crate holds only its domain logic.

pub mod admin;
pub mod api_client;
pub mod apply;
pub mod args;
pub mod client;
pub mod controller;
pub mod crds;
pub mod error;
pub mod events;
pub mod hashing;
pub mod http_get;
pub mod http_metrics;
pub mod labels;
pub mod leader;
pub mod logfmt;
pub mod metrics;
pub mod net;
pub mod otlp;
pub mod pod_http;
pub mod process;
pub mod proxy;
pub mod runtime;
pub mod scoped_store;
pub mod shutdown;
pub mod telemetry;

pub use args::CommonArgs;
pub use error::{Error, Result};
pub use runtime::{Context, Runtime};

/// Installs rustls' ring crypto provider for the whole process.
///
/// Every binary calls this first: kube's client and the webhook's TLS server both build rustls
/// configs, and rustls refuses to guess a provider when none is installed.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want anyway.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
