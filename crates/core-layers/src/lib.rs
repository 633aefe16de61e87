//! core-layers: the `AddonsLayer` API and every decision about layers — unpacking a layer's
//! source files (Flux artifact or ConfigMap), selecting, parsing and preparing its manifests
//! exactly as the layer-controller applies them; validating a spec; the dependency graph and its cycles
//! ([`deps`], [`graph`]); what one pass of the controller does ([`plan`], pure and
//! table-tested); importing Kraan and Flux objects ([`kraan`], [`flux_import`]).
//!
//! The layer-controller applies what this crate decides; the drift-observer compares the cluster
//! with it; the admission-webhook validates with it; the `strata` CLI explains it. One copy, so
//! none of them can disagree on what a layer means, and none is built from another. Nothing here
//! takes a cluster client: reading from a cluster is `layer-reader`'s.

pub mod crd;
pub mod deps;
pub mod error;
pub mod flux_import;
pub mod from_empty;
pub mod graph;
pub mod keys;
pub mod kraan;
pub mod manifest;
pub mod metric_gate;
pub mod objects;
pub mod plan;
pub mod rollback;
pub mod source;
pub mod substitute;

pub use error::{LayerError, Result};
