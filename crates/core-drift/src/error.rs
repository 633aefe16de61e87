//! The drift-observer's one error type; `category()` labels the error metric.

#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    /// Reading the layer's source or manifests failed.
    #[error(transparent)]
    Layer(#[from] core_layers::LayerError),
    #[error(transparent)]
    Kube(#[from] core_k8s::Error),
    /// A kept manifest could not be read back (never expected: we wrote it).
    #[error("{0}")]
    Manifest(String),
}

impl DriftError {
    pub fn category(&self) -> &'static str {
        match self {
            DriftError::Layer(e) => e.category(),
            DriftError::Kube(e) => e.category(),
            DriftError::Manifest(_) => "manifest",
        }
    }
}

impl core_k8s::controller::ReconcileError for DriftError {
    fn category(&self) -> &'static str {
        DriftError::category(self)
    }
}

pub type Result<T, E = DriftError> = std::result::Result<T, E>;

impl From<kube::Error> for DriftError {
    fn from(e: kube::Error) -> Self {
        Self::Kube(core_k8s::Error::api("kubernetes api", e))
    }
}
