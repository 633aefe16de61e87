//! Identities the layer services share: an applied object, a layer's source, the state of
//! that source.

use std::fmt;

use crate::crd::{AddonsLayer, InventoryEntry};

/// An object's identity, independent of its API version (an object keeps its identity when
/// a manifest moves from `v1beta1` to `v1`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            group: core_status::object::api_group(api_version).to_string(),
            kind: kind.to_string(),
            namespace: namespace.filter(|ns| !ns.is_empty()).map(str::to_string),
            name: name.to_string(),
        }
    }

    pub fn of_entry(entry: &InventoryEntry) -> Self {
        Self::new(
            &entry.api_version,
            &entry.kind,
            entry.namespace.as_deref(),
            &entry.name,
        )
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The source of a layer as `kind/namespace/name`, for same-source lock-step and watches.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl SourceRef {
    /// `spec.source` with the kind and namespace defaults applied.
    pub fn of(layer: &AddonsLayer, default_namespace: &str) -> Self {
        let source = &layer.spec.source;
        Self {
            kind: source
                .kind
                .clone()
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "GitRepository".into()),
            namespace: source
                .namespace
                .clone()
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| default_namespace.to_string()),
            name: source.name.clone(),
        }
    }
}

impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What the shell found out about a layer's source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceState {
    Ready { revision: String },
    NotReady { message: String },
}
