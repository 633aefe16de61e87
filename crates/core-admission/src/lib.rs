//! core-admission: what Strata's admission webhooks decide, without a cluster.
//!
//! [`review`] is the AdmissionReview envelope (v1 and v1beta1) and the [`review::Decision`]
//! every webhook returns; [`webhooks`] the decisions themselves (pure: a review, what the
//! cluster holds, the time), also behind `strata admission review`. The HTTPS server that
//! serves them — in the admission-webhook and in the rollout-operator's compatibility mode —
//! is the `admission-server` crate.

pub mod review;
pub mod webhooks;
