//! layer-reader: what a layer needs read from a cluster — its source (a Flux artifact
//! downloaded once per revision, or a ConfigMap), the identities of its manifests' objects, the
//! global desired state, its stale objects, prerequisite objects and variables. The I/O half of
//! `core-layers`, whose decisions stay free of any client; shared by the layer-controller, the
//! drift-observer and `strata layers`, so they read alike.

pub mod fetch;
pub mod prereqs;
pub mod prometheus;
pub mod read;
pub mod source_cache;
pub mod stale;
pub mod variables;

/// Locks a mutex whose data stays usable after a panic elsewhere (caches).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
