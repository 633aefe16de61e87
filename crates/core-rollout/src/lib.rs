//! The rollout-operator's shared vocabulary: its CRDs ([`crd`]), the anchor's label and
//! annotation keys ([`keys`]), the observed state of a namespace ([`observed`]) and the
//! zone-aware disruption budget ([`zpdb`]). The rollout-operator plans with it and the
//! admission webhook judges evictions with it; keeping it apart lets the rollout-operator's
//! compatibility mode link the webhook server without a dependency cycle.

pub mod crd;
pub mod evictions;
pub mod go_text;
pub mod keys;
pub mod observed;
pub mod zpdb;
