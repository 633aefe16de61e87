//! core-layers: the `AddonsLayer` API and everything needed to know what a layer wants —
//! reading its source (Flux artifact or ConfigMap), selecting and parsing its manifests, and
//! preparing them exactly as the layer-controller applies them.
//!
//! The layer-controller applies what this crate reads; the drift-observer compares the cluster
//! with it. One copy, so the two services can never disagree on what a layer means.

pub mod crd;
pub mod error;
pub mod keys;
pub mod manifest;
pub mod objects;
pub mod read;
pub mod source;
pub mod source_cache;
pub mod substitute;

pub use error::{LayerError, Result};

/// Locks a mutex whose data stays usable after a panic elsewhere (caches).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
