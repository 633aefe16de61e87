//! render: the engine behind `strata render` — a Reckoner v2 course file in, reviewed flat
//! GitOps manifests out (Reckoner's GitOps design).
//!
//! `helm template` (the real binary) does the templating; everything after it is ours and pure:
//! splitting, namespaces, file layout, hook mapping, secret checks, GitOps objects, pruning.

pub mod course;
pub mod diff;
pub mod error;
pub mod gitops;
pub mod helm;
pub mod hooks;
pub mod keys;
pub mod layout;
pub mod pipeline;
pub mod profile;
pub mod prune;
pub mod secrets;
pub mod split;

pub use error::{RenderError, Result};
