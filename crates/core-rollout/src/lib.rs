//! The rollout decisions and their vocabulary: the CRDs ([`crd`]), the anchor's label and
//! annotation keys ([`keys`]), the observed state of a namespace ([`observed`]), the zone-aware
//! disruption budget ([`zpdb`]) and the planner ([`plan`]: one reconcile of a rollout group,
//! pure and table-tested). The rollout-operator executes its plans, the admission webhooks
//! judge evictions with it, and `strata rollout plan` prints them; none is built from another.

pub mod crd;
pub mod evictions;
pub mod go_text;
pub mod keys;
pub mod observed;
pub mod plan;
pub mod zpdb;
