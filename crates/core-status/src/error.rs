//! The one error type of core-status.

/// Why a status could not be computed, or input could not be read. Messages name the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    /// A field has the wrong type (e.g. `metadata.generation: "3"`).
    #[error("{field}: expected {expected}, found {found}")]
    FieldType {
        field: String,
        expected: &'static str,
        found: String,
    },
    /// A Pod phase kstatus does not know.
    #[error("unknown phase {0}")]
    UnknownPhase(String),
    /// A health expression failed to parse or evaluate.
    #[error("health expression {expression:?} for {group_kind}: {reason}")]
    Expression {
        group_kind: String,
        expression: String,
        reason: String,
    },
    /// Unreadable input for `strata status`/`wait`.
    #[error("{source_name}: document index {index}: {reason}")]
    Input {
        source_name: String,
        index: usize,
        reason: String,
    },
    #[error("{0}")]
    Io(String),
    /// The user lacks a permission a command needs (checked up front).
    #[error("{0}")]
    Access(String),
}

impl StatusError {
    /// A short stable label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            StatusError::FieldType { .. } => "field_type",
            StatusError::UnknownPhase(_) => "unknown_phase",
            StatusError::Expression { .. } => "expression",
            StatusError::Input { .. } => "input",
            StatusError::Io(_) => "io",
            StatusError::Access(_) => "access",
        }
    }
}

pub(crate) fn type_name(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "null".into(),
        serde_json::Value::Bool(b) => format!("bool {b}"),
        serde_json::Value::Number(n) => format!("number {n}"),
        serde_json::Value::String(s) => format!("string {s:?}"),
        serde_json::Value::Array(_) => "a list".into(),
        serde_json::Value::Object(_) => "a map".into(),
    }
}
