//! The one error type of core-k8s.

/// Errors of the shared runtime. Messages are lower-case and name the object or flag involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid flag {flag}: {reason}")]
    InvalidFlag { flag: &'static str, reason: String },

    #[error("kubeconfig: {0}")]
    Kubeconfig(String),

    #[error("kubernetes api: {context}: {source}")]
    Api {
        context: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error("{object}: field {field}: {reason}")]
    InvalidObject {
        object: String,
        field: &'static str,
        reason: String,
    },

    #[error("unknown kind {api_version}/{kind}: the api server does not serve it")]
    UnknownKind { api_version: String, kind: String },

    #[error("leader election on lease {lease}: {reason}")]
    Leader { lease: String, reason: String },

    #[error("admin server on {address}: {reason}")]
    Admin { address: String, reason: String },

    #[error("telemetry: {0}")]
    Telemetry(String),

    #[error("event reason {0:?} is not a CamelCase code")]
    InvalidEventReason(String),
}

impl Error {
    /// Wraps a kube error with what we were doing, e.g. `apply apps/v1 Deployment ns/name`.
    pub fn api(context: impl Into<String>, source: kube::Error) -> Self {
        Error::Api {
            context: context.into(),
            source: Box::new(source),
        }
    }

    /// A short stable label for metrics (`reconcile_errors_total{category}`) and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::InvalidFlag { .. } | Error::Kubeconfig(_) => "config",
            Error::Api { source, .. } => match source.as_ref() {
                kube::Error::Api(status) if status.code == 409 => "conflict",
                kube::Error::Api(status) if status.code == 403 => "forbidden",
                kube::Error::Api(status) if status.code == 404 => "not_found",
                kube::Error::Api(_) => "api",
                _ => "transport",
            },
            Error::InvalidObject { .. } => "invalid_object",
            Error::UnknownKind { .. } => "unknown_kind",
            Error::Leader { .. } => "leader",
            Error::Admin { .. } => "admin",
            Error::Telemetry(_) => "telemetry",
            Error::InvalidEventReason(_) => "invalid_event",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
