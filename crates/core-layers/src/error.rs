//! The layer-controller's one error type. Messages name the object and field; `category()`
//! labels the error metric.

#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The artifact could not be fetched, verified or unpacked.
    #[error("artifact: {0}")]
    Artifact(String),
    /// A manifest in the layer's directory is unusable.
    #[error("invalid manifest: {0}")]
    Manifest(String),
    /// `spec.postBuild` could not be honoured: a variable is missing or invalid, or a
    /// substituted manifest is not valid YAML.
    #[error("substitution: {0}")]
    Substitution(String),
    /// The source object could not be read.
    #[error("source: {0}")]
    Source(String),
    #[error(transparent)]
    Kube(#[from] core_k8s::Error),
    #[error("{context}: {source}")]
    Api {
        context: String,
        #[source]
        source: kube::Error,
    },
}

impl LayerError {
    pub fn api(context: impl Into<String>, source: kube::Error) -> Self {
        Self::Api {
            context: context.into(),
            source,
        }
    }

    pub fn category(&self) -> &'static str {
        match self {
            LayerError::Artifact(_) => "artifact",
            LayerError::Manifest(_) => "manifest",
            LayerError::Source(_) => "source",
            LayerError::Substitution(_) => "substitution",
            LayerError::Kube(e) => e.category(),
            LayerError::Api { .. } => "api",
        }
    }
}

impl core_k8s::controller::ReconcileError for LayerError {
    fn category(&self) -> &'static str {
        LayerError::category(self)
    }
}

pub type Result<T, E = LayerError> = std::result::Result<T, E>;
