//! Label and annotation keys, exactly the anchor's so existing manifests keep working.

pub const ROLLOUT_GROUP: &str = "rollout-group";
pub const MAX_UNAVAILABLE: &str = "rollout-max-unavailable";
pub const PAUSED: &str = "grafana.com/rollout-paused";
pub const DOWNSCALE_LEADER: &str = "grafana.com/rollout-downscale-leader";
pub const UPSCALE_ONLY_WHEN_LEADER_READY: &str =
    "grafana.com/rollout-upscale-only-when-leader-ready";
/// A label, not an annotation (as in the anchor).
pub const MIN_TIME_BETWEEN_ZONES_DOWNSCALE: &str = "grafana.com/min-time-between-zones-downscale";
pub const LAST_DOWNSCALE: &str = "grafana.com/last-downscale";
pub const FORCE_REPLICAS: &str = "grafana.com/rollout-force-replicas";
pub const MIRROR_NAME: &str = "grafana.com/rollout-mirror-replicas-from-resource-name";
pub const MIRROR_KIND: &str = "grafana.com/rollout-mirror-replicas-from-resource-kind";
pub const MIRROR_API_VERSION: &str =
    "grafana.com/rollout-mirror-replicas-from-resource-api-version";
pub const MIRROR_WRITE_BACK: &str = "grafana.com/rollout-mirror-replicas-from-resource-write-back";
pub const DELAYED_DOWNSCALE: &str = "grafana.com/rollout-delayed-downscale";
pub const DELAYED_DOWNSCALE_URL: &str = "grafana.com/rollout-prepare-delayed-downscale-url";
/// Pod label compared with the StatefulSet's `status.updateRevision`.
pub const REVISION_HASH: &str = "controller-revision-hash";
/// The pod-template label the anchor selects pods by.
pub const POD_NAME_LABEL: &str = "name";
pub const READY_TIME: &str = "grafana.com/ready-time";
