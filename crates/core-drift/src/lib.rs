//! core-drift: what drift is, decided without a cluster — shared by the drift-observer, the
//! admission-webhook (a layer's `spec.drift` validated) and the `strata drift` command.
//!
//! `fields` and `compare` are the pure comparison (paths with merge-key selectors, Krake's
//! observer schema, managedFields attribution, masking); `rules` resolves a layer's
//! `spec.drift` for one object; `state` remembers drift, fights and back-off per layer;
//! [`check::drift_of`] compares one live object with its manifest (one server-side apply dry
//! run, as the layer-controller would apply it).

pub mod check;
pub mod compare;
pub mod error;
pub mod fields;
pub mod rules;
pub mod state;

pub use error::{DriftError, Result};
