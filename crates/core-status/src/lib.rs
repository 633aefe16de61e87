//! core-status: the status of any Kubernetes object, compatible with kstatus.
//!
//! Every other component decides "is this healthy yet?" here: the layer-controller gates
//! layers on it, the rollout-operator reads pod and StatefulSet health from it, and
//! `strata status` / `strata wait` expose it to users.

use serde::{Deserialize, Serialize};

pub mod aggregate;
pub mod augment;
pub mod block_yaml;
pub mod compact;
pub mod compute;
pub mod error;
pub mod health;
pub mod input;
pub mod object;
pub mod policy;
#[cfg(feature = "wait")]
pub mod wait;
pub mod workload;

pub use aggregate::aggregate;
pub use compact::Observed;
pub use compute::{Condition, ConditionType, Evaluation, compute, evaluate};
pub use error::StatusError;

/// The computed status of an object, with kstatus' names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Status {
    InProgress,
    Failed,
    Current,
    Terminating,
    NotFound,
    Unknown,
}

impl Status {
    /// Parses a status name as printed (`Current`, `InProgress`, ...).
    pub fn parse(name: &str) -> Option<Self> {
        [
            Status::InProgress,
            Status::Failed,
            Status::Current,
            Status::Terminating,
            Status::NotFound,
            Status::Unknown,
        ]
        .into_iter()
        .find(|s| s.to_string() == name)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Current => "Current",
            Status::Terminating => "Terminating",
            Status::NotFound => "NotFound",
            Status::Unknown => "Unknown",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_match_kstatus() {
        let all = [
            (Status::InProgress, "InProgress"),
            (Status::Failed, "Failed"),
            (Status::Current, "Current"),
            (Status::Terminating, "Terminating"),
            (Status::NotFound, "NotFound"),
            (Status::Unknown, "Unknown"),
        ];
        for (status, name) in all {
            assert_eq!(status.to_string(), name);
            assert_eq!(serde_json::to_value(status).unwrap(), name);
        }
    }
}
