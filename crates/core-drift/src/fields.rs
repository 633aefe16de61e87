//! Field paths and the sets of fields the drift observer watches. Pure.
//!
//! A [`FieldPath`] addresses one value inside a Kubernetes object. List elements are addressed
//! by position (`args[0]`) or by merge key (`containers[name=app]`); the merge key survives a
//! webhook inserting a sidecar ahead of ours, a position does not. [`ObservedFields`] come from
//! a manifest ([`default_fields`]), a Krake observer-schema entry ([`krake_schema_fields`]) or
//! text paths ([`selector_fields`]).
//!
//! Split by concern: `path` (the [`FieldPath`] type, JSON pointers, resolving a path in an
//! object), `text` (the text form: printing and parsing), `observed` ([`ObservedFields`], from
//! a manifest or text paths) and `krake` (Krake observer-schema entries). [`SchemaError`], shared
//! by all of them, is defined here; everything is re-exported here.

mod krake;
mod observed;
mod path;
#[cfg(test)]
mod test_support;
mod text;

pub use self::krake::krake_schema_fields;
pub use self::observed::{ListBound, ObservedFields, default_fields, selector_fields};
pub use self::path::{FieldPath, Segment, resolve};
pub(crate) use self::path::{select, selector_value};

/// An invalid field path, JSON pointer or observer schema.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// `position` counts characters from 1; one past the end for "ended too early".
    #[error("field path {text:?}: {reason} at character {position}")]
    PathSyntax {
        text: String,
        position: usize,
        reason: String,
    },
    #[error("json pointer {pointer:?}: {reason}")]
    Pointer { pointer: String, reason: String },
    #[error("observer schema entry: must be an object, got {found}")]
    EntryNotObject { found: String },
    /// `apiVersion`, `kind`, `metadata.name` or `metadata.namespace` is missing or not a
    /// non-empty string.
    #[error("observer schema entry: {field}: {reason}")]
    Identification { field: &'static str, reason: String },
    #[error("observer schema {object}: {path}: an observed leaf must be null, got {value}")]
    LeafNotNull {
        object: String,
        path: String,
        value: String,
    },
    #[error(
        "observer schema {object}: list {path}: must end with a control dictionary \
         {{observer_schema_list_min_length, observer_schema_list_max_length}}"
    )]
    MissingListControl { object: String, path: String },
    #[error("observer schema {object}: list {path}: {field}: {reason}")]
    ListControl {
        object: String,
        path: String,
        field: String,
        reason: String,
    },
    #[error(
        "observer schema {object}: list {path}: observer_schema_list_max_length {max} is below \
         observer_schema_list_min_length {min}"
    )]
    ListMaxBelowMin {
        object: String,
        path: String,
        min: usize,
        max: usize,
    },
    #[error(
        "observer schema {object}: list {path}: observer_schema_list_max_length {max} is below \
         the {observed} observed elements"
    )]
    ListMaxBelowObserved {
        object: String,
        path: String,
        max: usize,
        observed: usize,
    },
    #[error("observer schema {object}: {path}: observer_schema_merge_key: {reason}")]
    MergeKey {
        object: String,
        path: String,
        reason: String,
    },
}
