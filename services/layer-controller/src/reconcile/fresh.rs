//! Whether the cache holds a layer at least as new as this controller's own last write of it.
//!
//! A reconcile decides from the layer's status, which is this controller's own write. Right
//! after a write the watch may not have delivered it yet, and a decision from the older copy
//! would rewrite a stale status (history, transition times) or fail the finalizer's
//! compare-and-swap. Reading every layer afresh at the start of every reconcile avoided that
//! at one GET per reconcile: 2.6 per layer in a fleet round, the largest request count this
//! controller made after its applies. Now the version each write returned is remembered
//! until the watch shows it; only a layer with such an unseen write is read from the API
//! server, every other reconcile decides from the cache.
//!
//! A resource version is only compared for equality (its order is opaque). The watch may
//! deliver a write before the write's own response arrives, so the last few versions the watch
//! showed of each layer are kept: a write already among them is not waited for. A write whose
//! version the watch never shows (a relist that skipped past it) keeps its layer read afresh
//! until the next write is seen: the old behaviour, never a stale decision.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::lock;

/// How many of a layer's latest versions the watch showed are remembered.
const RECENT: usize = 4;

/// What is known of one layer's versions, each kept as a hash of its text ([`version_key`]):
/// only compared, and a layer's five version strings were most of this map's size.
#[derive(Debug, Default)]
struct Versions {
    /// Our last write, while the watch has not shown it (the empty text: a write without a
    /// version).
    unseen: Option<u64>,
    /// The latest versions the watch showed, oldest first.
    recent: VecDeque<u64>,
}

/// A resource version as [`Versions`] keeps it.
fn version_key(version: &str) -> u64 {
    core_k8s::hashing::hash64(version)
}

/// Layer name → our last write of it the watch has not shown yet, and what it did show.
#[derive(Debug, Default)]
pub(super) struct UnseenWrites(Mutex<HashMap<String, Versions>>);

impl UnseenWrites {
    /// Our write of `layer` returned `version`.
    pub(super) fn wrote(&self, layer: &str, version: Option<&str>) {
        let mut layers = lock(&self.0);
        let known = layers.entry(layer.to_string()).or_default();
        known.unseen = match version.map(version_key) {
            Some(version) if known.recent.contains(&version) => None,
            // No version to wait for: read afresh until a later write is seen.
            other => Some(other.unwrap_or_else(|| version_key(""))),
        };
    }

    /// The watch (and so the cache) now holds `layer` at `version`.
    pub(super) fn seen(&self, layer: &str, version: Option<&str>) {
        let Some(version) = version else { return };
        let version = version_key(version);
        let mut layers = lock(&self.0);
        let known = layers.entry(layer.to_string()).or_default();
        if known.unseen == Some(version) {
            known.unseen = None;
        }
        if known.recent.len() == RECENT {
            known.recent.pop_front();
        }
        known.recent.push_back(version);
    }

    /// Whether the cache may be older than our last write of `layer`.
    pub(super) fn pending(&self, layer: &str) -> bool {
        lock(&self.0)
            .get(layer)
            .is_some_and(|known| known.unseen.is_some())
    }

    /// The layer is gone from this replica (deleted, or moved to another shard).
    pub(super) fn forget(&self, layer: &str) {
        lock(&self.0).remove(layer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_trusted_only_once_the_watch_shows_our_last_write() {
        struct Case {
            name: &'static str,
            steps: &'static [(&'static str, Option<&'static str>)],
            pending: bool,
        }
        let cases = [
            Case {
                name: "never written: the cache is as new as anything we know",
                steps: &[],
                pending: false,
            },
            Case {
                name: "written, not seen yet",
                steps: &[("wrote", Some("10"))],
                pending: true,
            },
            Case {
                name: "written, then seen",
                steps: &[("wrote", Some("10")), ("seen", Some("10"))],
                pending: false,
            },
            Case {
                name: "an older version seen after our write proves nothing",
                steps: &[("wrote", Some("10")), ("seen", Some("9"))],
                pending: true,
            },
            Case {
                name: "two writes: seeing the first is not enough",
                steps: &[
                    ("wrote", Some("10")),
                    ("wrote", Some("12")),
                    ("seen", Some("10")),
                ],
                pending: true,
            },
            Case {
                name: "two writes: the last one seen",
                steps: &[
                    ("wrote", Some("10")),
                    ("wrote", Some("12")),
                    ("seen", Some("10")),
                    ("seen", Some("12")),
                ],
                pending: false,
            },
            Case {
                name: "the watch showed the write before its response arrived",
                steps: &[
                    ("seen", Some("9")),
                    ("seen", Some("10")),
                    ("wrote", Some("10")),
                ],
                pending: false,
            },
            Case {
                name: "shown, then three more versions: still remembered",
                steps: &[
                    ("seen", Some("10")),
                    ("seen", Some("11")),
                    ("seen", Some("12")),
                    ("seen", Some("13")),
                    ("wrote", Some("10")),
                ],
                pending: false,
            },
            Case {
                name: "shown too long ago to be remembered: read afresh",
                steps: &[
                    ("seen", Some("10")),
                    ("seen", Some("11")),
                    ("seen", Some("12")),
                    ("seen", Some("13")),
                    ("seen", Some("14")),
                    ("wrote", Some("10")),
                ],
                pending: true,
            },
            Case {
                name: "a write without a version stays pending",
                steps: &[("wrote", None), ("seen", Some("10"))],
                pending: true,
            },
            Case {
                name: "forgotten",
                steps: &[("wrote", Some("10")), ("forget", None)],
                pending: false,
            },
        ];
        for case in cases {
            let unseen = UnseenWrites::default();
            for (step, version) in case.steps {
                match *step {
                    "wrote" => unseen.wrote("a", *version),
                    "seen" => unseen.seen("a", *version),
                    _ => unseen.forget("a"),
                }
            }
            assert_eq!(unseen.pending("a"), case.pending, "{}", case.name);
            assert!(!unseen.pending("b"), "{}: another layer", case.name);
        }
    }
}
