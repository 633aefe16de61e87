//! The render crate's one error type. Every message names the file (course, values file or
//! output file) and the field or key, in lower case, so the CLI can print it on one line.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The course file (or a file it names) is malformed: unknown key, wrong type, bad name.
    #[error("{file}: {message}")]
    Course { file: String, message: String },
    /// The capabilities profile is malformed.
    #[error("{file}: {message}")]
    Profile { file: String, message: String },
    /// `helm template` could not be run or failed.
    #[error("release {release}: {message}")]
    Helm { release: String, message: String },
    /// Helm's output cannot be turned into objects (no kind, no name, not a mapping, ...).
    #[error("release {release}: {source_template}: document {index}: {message}")]
    Manifest {
        release: String,
        source_template: String,
        index: usize,
        message: String,
    },
    /// Two rendered objects would land in the same file, or overwrite a file we do not own.
    #[error("{path}: {message}")]
    Layout { path: String, message: String },
    /// A secret value would be written to the output.
    #[error("{file}: {key}: {message}")]
    Secret {
        file: String,
        key: String,
        message: String,
    },
    /// Reading or writing the output tree failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl RenderError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub fn course(file: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Course {
            file: file.into(),
            message: message.into(),
        }
    }

    /// Bad input (exit 2 in the CLI) as opposed to a failure while rendering or writing.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            RenderError::Course { .. }
                | RenderError::Profile { .. }
                | RenderError::Manifest { .. }
                | RenderError::Layout { .. }
                | RenderError::Secret { .. }
        )
    }

    /// A short stable label for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            RenderError::Course { .. } => "course",
            RenderError::Profile { .. } => "profile",
            RenderError::Helm { .. } => "helm",
            RenderError::Manifest { .. } => "manifest",
            RenderError::Layout { .. } => "layout",
            RenderError::Secret { .. } => "secret",
            RenderError::Io { .. } => "io",
        }
    }
}

pub type Result<T, E = RenderError> = std::result::Result<T, E>;

/// The first line of a serde-saphyr error, without its `error: ` prefix: the rest is a source
/// snippet that does not fit the CLI's one-line contract.
pub(crate) fn yaml_message(error: &serde_saphyr::Error) -> String {
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}
