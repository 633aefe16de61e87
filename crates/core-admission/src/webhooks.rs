//! The anchor's admission rules, as pure functions of the review, the cluster state they read
//! and the time. The TLS server and `strata admission review` both call these; side effects
//! (HTTP calls to pods, the last-downscale patch) are returned, not performed.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use core_rollout::observed::{Observed, annotation, label, running_and_ready};
use core_rollout::{keys, zpdb};

use crate::review::{Decision, Review, Shape};

pub const NO_DOWNSCALE_LABEL: &str = "grafana.com/no-downscale";
pub const PREPARE_DOWNSCALE_LABEL: &str = "grafana.com/prepare-downscale";
pub const PREPARE_PATH: &str = "grafana.com/prepare-downscale-http-path";
pub const PREPARE_PORT: &str = "grafana.com/prepare-downscale-http-port";

/// The webhooks, by endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Webhook {
    NoDownscale,
    PrepareDownscale,
    PodEviction,
    ZpdbValidation,
    AddonsLayerValidation,
}

impl Webhook {
    /// Every endpoint the server serves.
    pub const ALL: [Webhook; 5] = [
        Webhook::NoDownscale,
        Webhook::PrepareDownscale,
        Webhook::PodEviction,
        Webhook::ZpdbValidation,
        Webhook::AddonsLayerValidation,
    ];

    /// The endpoint's name: its path without `/admission/` (metric label, CLI `--webhook`).
    pub fn name(self) -> &'static str {
        match self {
            Webhook::NoDownscale => "no-downscale",
            Webhook::PrepareDownscale => "prepare-downscale",
            Webhook::PodEviction => "pod-eviction",
            Webhook::ZpdbValidation => "zpdb-validation",
            Webhook::AddonsLayerValidation => "addonslayer-validation",
        }
    }

    /// The webhook named `name` ([`Webhook::name`]).
    pub fn named(name: &str) -> Option<Webhook> {
        Webhook::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Whether it reviews namespaced objects (so a namespace selector applies to it).
    pub fn namespaced(self) -> bool {
        self != Webhook::AddonsLayerValidation
    }

    pub fn path(self) -> &'static str {
        match self {
            Webhook::NoDownscale => "/admission/no-downscale",
            Webhook::PrepareDownscale => "/admission/prepare-downscale",
            Webhook::PodEviction => "/admission/pod-eviction",
            Webhook::ZpdbValidation => "/admission/zpdb-validation",
            Webhook::AddonsLayerValidation => "/admission/addonslayer-validation",
        }
    }
}

/// The parts of a scaled object the replica rules read: its type and `spec.replicas`.
const SCALED: Shape = Shape::Members(&[
    ("apiVersion", Shape::All),
    ("kind", Shape::All),
    ("spec", Shape::Members(&[("replicas", Shape::All)])),
]);

/// The same plus its labels (no-downscale decides on the old object's).
const SCALED_WITH_LABELS: Shape = Shape::Members(&[
    ("apiVersion", Shape::All),
    ("kind", Shape::All),
    ("metadata", Shape::Members(&[("labels", Shape::All)])),
    ("spec", Shape::Members(&[("replicas", Shape::All)])),
]);

impl Webhook {
    /// What of an AdmissionReview's request this webhook's rules read (see [`Shape`]): the
    /// server decodes only that, so a no-downscale review does not build the two objects it
    /// carries. Every member outside `object`/`oldObject` is kept.
    pub fn reads(self) -> Shape<'static> {
        match self {
            Webhook::NoDownscale => {
                Shape::AllBut(&[("object", SCALED), ("oldObject", SCALED_WITH_LABELS)])
            }
            // The old StatefulSet is decoded whole into its typed form.
            Webhook::PrepareDownscale => Shape::AllBut(&[("object", SCALED)]),
            Webhook::PodEviction | Webhook::ZpdbValidation | Webhook::AddonsLayerValidation => {
                Shape::All
            }
        }
    }
}

/// `--webhook <name>` on the command line (`strata admission review`).
impl clap::ValueEnum for Webhook {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

/// What the handlers may read besides the request.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub state: Observed,
    /// Zone-tracker mode of prepare-downscale: downscale times live in a ConfigMap instead
    /// of StatefulSet annotations.
    pub zone_tracker: Option<ZoneTracker>,
    /// Downscales this server admitted whose time is not on their StatefulSet yet, by
    /// StatefulSet name (annotation mode records the time once the downscale has landed, see
    /// [`prepare_downscale`]); each counts as that StatefulSet's `last-downscale`.
    pub pending_downscales: BTreeMap<String, Timestamp>,
    /// The layer-controller's defaults, which decide the account an AddonsLayer acts as.
    pub layer_defaults: LayerDefaults,
    /// What the API server answered when asked whether the author of an AddonsLayer may act
    /// as the account it names (`None`: not asked, as offline).
    pub impersonation: Option<Impersonation>,
}

/// The layer-controller's `--default-source-namespace` and `--default-service-account`, and
/// the account it runs as itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerDefaults {
    pub source_namespace: String,
    pub service_account: Option<String>,
    /// The layer-controller's own ServiceAccount: what a layer naming no account acts as when
    /// there is no default. `None` when the server was not told (nothing can be asked then).
    pub controller_account: Option<core_layers::objects::ActingAccount>,
}

impl Default for LayerDefaults {
    fn default() -> Self {
        Self {
            source_namespace: "strata-system".into(),
            service_account: None,
            controller_account: None,
        }
    }
}

/// Parses `<namespace>/<name>` (`--layer-controller-service-account`).
pub fn parse_controller_account(
    value: &str,
) -> Result<core_layers::objects::ActingAccount, String> {
    match value.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok(core_layers::objects::ActingAccount {
                namespace: namespace.to_string(),
                name: name.to_string(),
                from_spec: false,
            })
        }
        _ => Err(format!(
            "{value:?} is not <namespace>/<name> (the layer-controller's ServiceAccount)"
        )),
    }
}

/// The answer of a SubjectAccessReview: may the review's user impersonate the account?
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Impersonation {
    pub allowed: bool,
    /// The authorizer's reason, when it gave one.
    pub reason: String,
}

/// The user who sent a review, as `request.userInfo` names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requester {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Requester {
    pub fn of(review: &Review) -> Self {
        let info = review.request.get("userInfo").unwrap_or(&Value::Null);
        let text = |key: &str| info.get(key).and_then(Value::as_str).unwrap_or_default();
        let strings = |value: &Value| -> Vec<String> {
            value
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        };
        Self {
            username: text("username").to_string(),
            uid: text("uid").to_string(),
            groups: strings(&info["groups"]),
            extra: info
                .get("extra")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), strings(v)))
                .collect(),
        }
    }
}

/// The account an AddonsLayer review asks its author to be allowed to act as: on a create, or
/// an update that changes the spec (metadata-only updates — the controllers' finalizer, the
/// heal annotation — act as no one new), the layer's acting account, if it has one.
pub fn impersonation_asked(
    review: &Review,
    defaults: &LayerDefaults,
) -> Option<core_layers::objects::ActingAccount> {
    let operation = review.field("operation");
    let object = review.request.get("object")?;
    if operation == "UPDATE" && review.request.pointer("/oldObject/spec") == object.get("spec") {
        return None;
    }
    if !matches!(operation, "CREATE" | "UPDATE") {
        return None;
    }
    let layer: core_layers::crd::AddonsLayer = serde_json::from_value(object.clone()).ok()?;
    core_layers::objects::ActingAccount::of(
        &layer,
        &defaults.source_namespace,
        defaults.service_account.as_deref(),
    )
    // Naming no account is acting as the controller itself, the most powerful identity a
    // layer can have: its author must be allowed to be it like any other.
    .or_else(|| defaults.controller_account.clone())
}

impl Cluster {
    pub fn new(state: Observed) -> Self {
        Self {
            state,
            zone_tracker: None,
            pending_downscales: BTreeMap::new(),
            layer_defaults: LayerDefaults::default(),
            impersonation: None,
        }
    }
}

/// Where the zone-tracker ConfigMaps live: all in the server's own namespace, so one server
/// acting in many namespaces needs no right to write ConfigMaps in any of them. A StatefulSet
/// of that namespace is tracked in the ConfigMap named by the flag (the anchor's one-namespace
/// install, unchanged); one of namespace `ns` in `<name>-<ns>` beside it. Namespace names are
/// DNS labels, so no two namespaces share a ConfigMap, and a contended write only ever holds
/// back downscales of its own namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneTrackerPlace {
    /// The server's own namespace.
    pub namespace: String,
    /// `--zone-tracker-config-map-name`.
    pub name: String,
}

impl ZoneTrackerPlace {
    /// The ConfigMap tracking the StatefulSets of `namespace`.
    pub fn config_map_for(&self, namespace: &str) -> String {
        if namespace == self.namespace {
            self.name.clone()
        } else {
            format!("{}-{namespace}", self.name)
        }
    }
}

/// The zone-tracker ConfigMap as read: one data key per StatefulSet name, each value
/// `{"lastDownscaled":"<RFC 3339>"}` (the anchor's format).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneTracker {
    /// Its namespace (see [`ZoneTrackerPlace`]) and name.
    pub namespace: String,
    pub config_map: String,
    /// `None` when the ConfigMap does not exist yet.
    pub data: Option<BTreeMap<String, String>>,
}

impl ZoneTracker {
    /// The recorded downscale time of a StatefulSet: `None` without an entry, an error for
    /// an entry that is not the expected JSON.
    pub fn last_downscaled(&self, stateful_set: &str) -> Option<Result<Timestamp, ()>> {
        let raw = self.data.as_ref()?.get(stateful_set)?;
        Some(
            serde_json::from_str::<Value>(raw)
                .ok()
                .and_then(|v| v.get("lastDownscaled")?.as_str()?.parse().ok())
                .ok_or(()),
        )
    }

    /// The entry recording a downscale at `now`.
    pub fn entry(now: Timestamp) -> String {
        json!({"lastDownscaled": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}).to_string()
    }
}

/// Runs one review through a webhook.
pub fn decide(webhook: Webhook, review: &Review, cluster: &Cluster, now: Timestamp) -> Decision {
    match webhook {
        Webhook::NoDownscale => no_downscale(review, cluster),
        Webhook::PrepareDownscale => prepare_downscale(review, cluster, now),
        Webhook::PodEviction => pod_eviction(review, cluster, now),
        Webhook::ZpdbValidation => zpdb_validation(review),
        Webhook::AddonsLayerValidation => addonslayer_validation(review, cluster),
    }
}

/// Why the replica count of a review's object could not be read, in the anchor's words (its
/// warnings are part of the interface: users and its tests match on them).
enum Unreadable {
    /// The object does not decode as a known API type: missing, no kind or apiVersion, a kind
    /// its scheme does not know, a field of the wrong JSON type.
    Decode(String),
    /// A known type without replicas (a DaemonSet, a Pod).
    Unsupported(String),
}

/// The group/version/kinds the anchor's decoder knows (its scheme registers apps/v1, core v1,
/// autoscaling/v1 and the admission groups); any other kind does not decode.
const REGISTERED: &[(&str, &[&str])] = &[
    (
        "apps/v1",
        &[
            "ControllerRevision",
            "DaemonSet",
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
        ],
    ),
    ("autoscaling/v1", &["HorizontalPodAutoscaler", "Scale"]),
    (
        "v1",
        &[
            "Binding",
            "ComponentStatus",
            "ConfigMap",
            "Endpoints",
            "Event",
            "LimitRange",
            "Namespace",
            "Node",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Pod",
            "PodTemplate",
            "ReplicationController",
            "ResourceQuota",
            "Secret",
            "Service",
            "ServiceAccount",
            "Eviction",
        ],
    ),
    ("admission.k8s.io/v1", &["AdmissionReview"]),
    ("admission.k8s.io/v1beta1", &["AdmissionReview"]),
    (
        "admissionregistration.k8s.io/v1",
        &[
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ],
    ),
    (
        "admissionregistration.k8s.io/v1beta1",
        &[
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ],
    ),
];

fn registered(api_version: &str, kind: &str) -> bool {
    let kind = kind.strip_suffix("List").unwrap_or(kind);
    REGISTERED
        .iter()
        .any(|(gv, kinds)| *gv == api_version && kinds.contains(&kind))
}

/// JSON's name for a value's type, as Go's decoder names it in its errors.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Null => "null",
    }
}

/// `spec.replicas` of one object of a review: `Ok(None)` when unset. A `Scale`'s count is
/// never unset: kube-apiserver leaves `replicas: 0` out of a Scale, which means 0 (reading it
/// as unset would let a `/scale` to 0 through no-downscale).
fn replicas_of(object: Option<&Value>) -> Result<Option<i64>, Unreadable> {
    let Some(raw) = object.filter(|o| !o.is_null()) else {
        return Err(Unreadable::Decode("Object 'Kind' is missing in ''".into()));
    };
    let Some(fields) = raw.as_object() else {
        return Err(Unreadable::Decode(format!(
            "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            json_kind(raw)
        )));
    };
    let text = |key: &str| fields.get(key).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    if kind.is_empty() {
        return Err(Unreadable::Decode(format!(
            "Object 'Kind' is missing in '{raw}'"
        )));
    }
    if api_version.is_empty() {
        return Err(Unreadable::Decode(format!(
            "Object 'apiVersion' is missing in '{raw}'"
        )));
    }
    if !registered(api_version, kind) {
        return Err(Unreadable::Decode(format!(
            "no kind \"{kind}\" is registered for version \"{api_version}\" in scheme \"pkg/admission/scheme.go:21\""
        )));
    }
    let scale = kind == "Scale";
    if !matches!(kind, "Deployment" | "StatefulSet" | "ReplicaSet") && !scale {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        return Err(Unreadable::Unsupported(format!(
            "unsupported type {group}/{version}, Kind={kind} (go type *{version}.{kind})"
        )));
    }
    let unset = if scale { Some(0) } else { None };
    let spec = match fields.get("spec") {
        None | Some(Value::Null) => return Ok(unset),
        Some(Value::Object(spec)) => spec,
        Some(other) => {
            return Err(Unreadable::Decode(format!(
                "json: cannot unmarshal {} into Go struct field {kind}.spec of type v1.{kind}Spec",
                json_kind(other)
            )));
        }
    };
    match spec.get("replicas") {
        None | Some(Value::Null) => Ok(unset),
        Some(value) => value
            .as_i64()
            .filter(|n| i32::try_from(*n).is_ok())
            .map(Some)
            .ok_or_else(|| {
                // Go names a number by its literal too.
                let found = match value {
                    Value::Number(n) => format!("number {n}"),
                    other => json_kind(other).to_string(),
                };
                Unreadable::Decode(format!(
                    "json: cannot unmarshal {found} into Go struct field {kind}Spec.spec.replicas of type int32"
                ))
            }),
    }
}

/// Old and new replicas of an UPDATE, or the decision that ends the review early. The old
/// object is read first, then the new one, each warning naming which (the anchor's order and
/// words); no-downscale says "can't get … replicas" for a known type without replicas, where
/// prepare-downscale folds it into "can't decode".
fn replica_change(review: &Review, webhook: Webhook) -> Result<(i64, i64), Decision> {
    let read = |side: &str, key: &str| {
        replicas_of(review.request.get(key)).map_err(|why| {
            let (what, err) = match why {
                Unreadable::Unsupported(err) if webhook == Webhook::NoDownscale => {
                    (format!("can't get {side} replicas"), err)
                }
                Unreadable::Unsupported(err) | Unreadable::Decode(err) => {
                    (format!("can't decode {side} object"), err)
                }
            };
            Decision::allow_with_warning(format!("{what}, allowing the change, err: {err}"))
        })
    };
    let old = read("old", "oldObject")?;
    let new = read("new", "object")?;
    match (old, new) {
        (None, None) => Err(Decision::allow()),
        (None, Some(_)) | (Some(_), None) => Err(Decision::allow_with_warning(
            "old/new replicas is nil, allowing the change",
        )),
        (Some(old), Some(new)) if old <= new => Err(Decision::allow()),
        (Some(old), Some(new)) => Ok((old, new)),
    }
}

/// `downscale of <resource>/<name> in <ns> from <old> to <new> replicas` for a downscale
/// review, the start of every no-downscale and prepare-downscale message.
pub fn downscale_prefix(review: &Review) -> Option<String> {
    replica_change(review, Webhook::NoDownscale)
        .ok()
        .map(|(old, new)| prefix(review, old, new))
}

/// The replica count a downscale review asks for (`None` when the review is no downscale).
pub fn replica_target(review: &Review) -> Option<i64> {
    replica_change(review, Webhook::NoDownscale)
        .ok()
        .map(|(_, new)| new)
}

fn prefix(review: &Review, old: i64, new: i64) -> String {
    let resource = review
        .request
        .pointer("/resource/resource")
        .and_then(Value::as_str)
        .unwrap_or_default();
    format!(
        "downscale of {resource}/{} in {} from {old} to {new} replicas",
        review.field("name"),
        review.field("namespace")
    )
}

/// Whether deciding this review reads the scaled object from the cluster: only a `/scale`
/// request, whose old object is a `Scale` without the parent's labels.
pub fn needs_parent(review: &Review) -> bool {
    review
        .request
        .pointer("/oldObject/kind")
        .and_then(Value::as_str)
        == Some("Scale")
}

/// The labels of the object being scaled: the old object itself, or for a `/scale` request
/// the parent read from the cluster.
fn target_labels(
    review: &Review,
    cluster: &Cluster,
) -> Result<Option<serde_json::Map<String, Value>>, String> {
    if !needs_parent(review) {
        return Ok(review
            .request
            .pointer("/oldObject/metadata/labels")
            .and_then(Value::as_object)
            .cloned());
    }
    let resource = review
        .request
        .pointer("/resource/resource")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (name, namespace) = (review.field("name"), review.field("namespace"));
    // The anchor's texts: its client's not-found error, or the resource it cannot read.
    let cannot_get = |err: String| {
        format!("can't get {resource}/{name} in namespace {namespace}, allowing the change: {err}")
    };
    let not_found = || cannot_get(format!("{resource}.apps \"{name}\" not found"));
    // `Some(labels)` when the parent was found (its labels possibly absent).
    let parent_labels = match (resource, scaled_kind(resource)) {
        ("statefulsets", _) => cluster
            .state
            .stateful_sets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .map(|s| {
                s.metadata.labels.as_ref().map(|labels| {
                    labels
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect()
                })
            }),
        (_, Some(kind)) => cluster
            .state
            .references
            .iter()
            .find(|o| {
                o.get("kind").and_then(Value::as_str) == Some(kind)
                    && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
            })
            .map(|o| {
                o.pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .cloned()
            }),
        _ => return Err(cannot_get(format!("unsupported resource {resource}"))),
    };
    parent_labels.ok_or_else(not_found)
}

/// The kind behind a scalable `apps/v1` resource other than StatefulSets, whose parents are
/// read as dynamic objects.
pub fn scaled_kind(resource: &str) -> Option<&'static str> {
    match resource {
        "deployments" => Some("Deployment"),
        "replicasets" => Some("ReplicaSet"),
        _ => None,
    }
}

/// `/admission/no-downscale`: fail-open; denies a decrease of replicas of an object labelled
/// `grafana.com/no-downscale=true`, for the object and its `/scale` subresource (dry runs too).
pub fn no_downscale(review: &Review, cluster: &Cluster) -> Decision {
    let (old, new) = match replica_change(review, Webhook::NoDownscale) {
        Ok(change) => change,
        Err(decision) => return decision,
    };
    let labels = match target_labels(review, cluster) {
        Ok(labels) => labels,
        Err(warning) => return Decision::allow_with_warning(warning),
    };
    if labels
        .as_ref()
        .and_then(|l| l.get(NO_DOWNSCALE_LABEL))
        .and_then(Value::as_str)
        != Some("true")
    {
        return Decision::allow();
    }
    Decision::deny(format!(
        "{} is not allowed because it has the label '{NO_DOWNSCALE_LABEL}=true'",
        prefix(review, old, new)
    ))
}

/// Go's `time.Duration` text (`30m0s`, `1h0m0s`, `10s`, `1.5s`), as the anchor prints it.
pub fn go_duration(d: SignedDuration) -> String {
    let total_ms = d.as_millis();
    if total_ms == 0 {
        return "0s".into();
    }
    let (h, rest) = (total_ms / 3_600_000, total_ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, ms) = (rest / 1000, rest % 1000);
    let secs = if ms == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{}s", format!("{ms:03}").trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

/// Where the pods of a StatefulSet labelled for prepare-downscale are called: read from the
/// live object (its annotations; the anchor also requires a serviceName), never from a review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareEndpoint {
    port: String,
    path: String,
}

impl PrepareEndpoint {
    /// The endpoint, or the anchor's reason (the end of its denial) why there is none.
    pub fn of(sts: &StatefulSet) -> Result<Self, String> {
        let port = annotation(sts, PREPARE_PORT).unwrap_or_default();
        if port.is_empty() {
            return Err(format!(
                "the {PREPARE_PORT} annotation is not set or empty."
            ));
        }
        let path = annotation(sts, PREPARE_PATH).unwrap_or_default();
        if path.is_empty() {
            return Err(format!(
                "the {PREPARE_PATH} annotation is not set or empty."
            ));
        }
        let service = sts
            .spec
            .as_ref()
            .and_then(|s| s.service_name.as_deref())
            .unwrap_or_default();
        if service.is_empty() {
            return Err("the serviceName is not set or empty.".into());
        }
        Ok(Self {
            port: port.to_string(),
            path: path.to_string(),
        })
    }

    /// The URL of one pod: its own IP (`status.podIP`), the port, the path; `Err` when it has
    /// no address (not running).
    ///
    /// FIX (the Grafana operator calls `<pod>.<service>.<namespace>.svc.<cluster domain>`): the
    /// call needs no cluster DNS and reaches exactly the pod object whose owner was checked,
    /// not whatever that name resolves to at that moment.
    pub fn url(&self, pod: &Pod) -> Result<String, String> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .filter(|ip| !ip.is_empty())
            .ok_or_else(|| format!("pod {name} has no IP address yet"))?;
        let Self { port, path } = self;
        core_k8s::pod_http::pod_url(&format!("http://pod:{port}/{path}"), ip)
    }
}

/// `/admission/prepare-downscale` (annotation mode): before a StatefulSet shrinks, check the
/// zone rules, then ask the pods going away to prepare, and record the downscale time.
/// Most pods one prepare-downscale request prepares. The request itself names the replica
/// counts, so without a bound an absurd or forged review (`replicas` near 2^31) would make the
/// server build and call billions of pod addresses. A larger downscale is refused with this
/// number in the message, so it can be done in steps.
pub const MAX_PREPARED_PODS: i64 = 1000;

pub fn prepare_downscale(review: &Review, cluster: &Cluster, now: Timestamp) -> Decision {
    if review.request.get("dryRun").and_then(Value::as_bool) == Some(true) {
        return Decision::allow();
    }
    let (old, new) = match replica_change(review, Webhook::PrepareDownscale) {
        Ok(change) => change,
        Err(decision) => return decision,
    };
    let resource = review
        .request
        .pointer("/resource/resource")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if resource != "statefulsets" {
        return Decision::allow_with_warning(format!(
            "unsupported resource {resource}, allowing the change"
        ));
    }
    // Every side effect below (which pods are called, at which port and path, what is
    // recorded) follows the live StatefulSet, never the review: anyone who can reach the
    // server can post a review, and it must not be able to aim the calls.
    let sts = match live_target(review, cluster, old) {
        Ok(sts) => sts,
        Err(why) => {
            return Decision::deny(format!(
                "{} is not allowed because {why}; nothing was prepared",
                prefix(review, old, new)
            ));
        }
    };
    if label(&sts.metadata.labels, PREPARE_DOWNSCALE_LABEL) != Some("true") {
        return Decision::allow();
    }
    let not_allowed = |why: String| {
        Decision::deny(format!(
            "{} is not allowed because {why}",
            prefix(review, old, new)
        ))
    };
    if old - new > MAX_PREPARED_PODS {
        return not_allowed(format!(
            "it would prepare {} pods, more than the {MAX_PREPARED_PODS} one request may; scale down in steps of at most {MAX_PREPARED_PODS} replicas.",
            old - new
        ));
    }
    let endpoint = match PrepareEndpoint::of(&sts) {
        Ok(endpoint) => endpoint,
        Err(why) => return not_allowed(why),
    };
    let name = sts.metadata.name.clone().unwrap_or_default();
    if let Some(group) = label(&sts.metadata.labels, keys::ROLLOUT_GROUP).filter(|g| !g.is_empty())
    {
        let others: Vec<&StatefulSet> = cluster
            .state
            .stateful_sets
            .iter()
            .filter(|s| {
                label(&s.metadata.labels, keys::ROLLOUT_GROUP) == Some(group)
                    && s.metadata.name.as_deref() != Some(&name)
            })
            .collect();
        for other in &others {
            let other_name = other.metadata.name.as_deref().unwrap_or_default();
            // Zone-tracker mode reads the time from the ConfigMap; a missing entry is skipped.
            let last = match &cluster.zone_tracker {
                Some(tracker) => tracker.last_downscaled(other_name),
                None => {
                    let recorded = annotation(other, keys::LAST_DOWNSCALE)
                        .map(|text| text.parse::<Timestamp>().map_err(drop));
                    match (recorded, cluster.pending_downscales.get(other_name)) {
                        (Some(Ok(recorded)), Some(pending)) => Some(Ok(recorded.max(*pending))),
                        (None, Some(pending)) => Some(Ok(*pending)),
                        (recorded, _) => recorded,
                    }
                }
            };
            let (Some(last), Some(min_time)) = (
                last,
                label(
                    &other.metadata.labels,
                    keys::MIN_TIME_BETWEEN_ZONES_DOWNSCALE,
                ),
            ) else {
                continue;
            };
            let (Ok(last), Some(min_time)) = (
                last,
                core_k8s::args::parse_duration(min_time)
                    .ok()
                    .and_then(|d| SignedDuration::try_from(d).ok()),
            ) else {
                // The anchor's words for each mode (its zone-tracker text does say "parsing"
                // twice).
                return not_allowed(
                    if cluster.zone_tracker.is_some() {
                        "parsing parsing downscale timestamps from the zone ConfigMap failed."
                    } else {
                        "parsing downscale annotations failed."
                    }
                    .into(),
                );
            };
            if now.duration_since(last) < min_time {
                return not_allowed(format!(
                    "statefulset {} was downscaled at {} and is labelled to wait {} between zone downscales",
                    other.metadata.name.as_deref().unwrap_or_default(),
                    // Go's default rendering of a UTC time, as the anchor's message has it.
                    last.strftime("%Y-%m-%d %H:%M:%S +0000 UTC"),
                    go_duration(min_time)
                ));
            }
        }
        for other in &others {
            let ready = cluster
                .state
                .pods_of(other)
                .iter()
                .filter(|p| running_and_ready(p))
                .count() as i32;
            let status = other.status.clone().unwrap_or_default();
            let updated = status.updated_replicas.unwrap_or(0);
            if status.replicas != ready || updated != ready {
                return not_allowed(format!(
                    "statefulset {} has {} non-updated replicas and {} non-ready replicas",
                    other.metadata.name.as_deref().unwrap_or_default(),
                    status.replicas - updated,
                    status.replicas - ready
                ));
            }
        }
    }
    let namespace = review.field("namespace");
    let mut decision = Decision::allow_with_message(format!(
        "{} is allowed -- all pods successfully prepared for shutdown.",
        prefix(review, old, new)
    ));
    let uid = sts.metadata.uid.as_deref().unwrap_or_default();
    for ordinal in (new..old).rev() {
        let pod = format!("{name}-{ordinal}");
        // Only a pod this StatefulSet owns is called, at its own address: a pod of that name
        // owned by anything else, or none at all, is left alone.
        let owned = cluster.state.pods.iter().find(|p| {
            p.metadata.name.as_deref() == Some(pod.as_str())
                && p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid && o.kind == "StatefulSet")
        });
        let Some(owned) = owned else {
            decision.warnings.push(format!(
                "pod {namespace}/{pod} is not a pod of statefulset {namespace}/{name}; it was not called"
            ));
            continue;
        };
        // A pod going away that cannot be called cannot prepare: fail closed, as a call to it
        // that failed would.
        let url = match endpoint.url(owned) {
            Ok(url) => url,
            Err(why) => {
                return not_allowed(format!(
                    "{why}, so it cannot be told to prepare for shutdown; nothing was prepared."
                ));
            }
        };
        decision.side_effects.push(format!("POST {url}"));
        decision.pod_calls.push((pod, url));
    }
    decision.side_effects.push(match &cluster.zone_tracker {
        // FIX (a Grafana operator bug): a new ConfigMap holds only this entry; the anchor seeds
        // every zone with "now", which blocks the first downscale of every other zone.
        Some(tracker) => format!(
            "{} configmaps/{} in {}: {name}={}",
            if tracker.data.is_some() {
                "UPDATE"
            } else {
                "CREATE"
            },
            tracker.config_map,
            tracker.namespace,
            ZoneTracker::entry(now)
        ),
        // Written once the downscale has landed, never while the request is in flight: a
        // write to the StatefulSet during its own admission makes the request that is being
        // admitted fail with a conflict (an HPA's `/scale` update, which carries the
        // resourceVersion it read). grafana/rollout-operator#303.
        None => format!(
            "PATCH statefulsets/{name} in {namespace} once it has {new} replicas: {}={}",
            keys::LAST_DOWNSCALE,
            now.strftime("%Y-%m-%dT%H:%M:%SZ")
        ),
    });
    decision
}

/// The StatefulSet a prepare-downscale review is about, as it lives in the cluster: found by
/// the review's namespace and name, the same object (`uid`), at the replica count the review
/// starts from, and — when the review carries the object rather than its `/scale` — with the
/// same label, port, path and service name the calls would use. `Err` says, for the denial,
/// how the review and the cluster disagree.
fn live_target(review: &Review, cluster: &Cluster, old: i64) -> Result<StatefulSet, String> {
    let (name, namespace) = (review.field("name"), review.field("namespace"));
    let live = cluster
        .state
        .stateful_sets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(name))
        .ok_or_else(|| format!("statefulset {namespace}/{name} does not exist"))?;
    let live_uid = live.metadata.uid.as_deref().unwrap_or_default();
    let claimed_uid = review
        .request
        .pointer("/oldObject/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if claimed_uid.is_empty() || claimed_uid != live_uid {
        return Err(format!(
            "the review's object (uid {claimed_uid:?}) is not statefulset {namespace}/{name} (uid {live_uid:?})"
        ));
    }
    let live_replicas = live.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if i64::from(live_replicas) != old {
        return Err(format!(
            "statefulset {namespace}/{name} has {live_replicas} replicas, not the {old} the review starts from"
        ));
    }
    let old_object = review.request.get("oldObject").unwrap_or(&Value::Null);
    if old_object.get("kind").and_then(Value::as_str) == Some("StatefulSet") {
        let claimed = |pointer: &str| old_object.pointer(pointer).and_then(Value::as_str);
        let escaped = |key: &str| key.replace('~', "~0").replace('/', "~1");
        let fields = [
            (
                format!("label {PREPARE_DOWNSCALE_LABEL}"),
                claimed(&format!(
                    "/metadata/labels/{}",
                    escaped(PREPARE_DOWNSCALE_LABEL)
                )),
                label(&live.metadata.labels, PREPARE_DOWNSCALE_LABEL),
            ),
            (
                format!("annotation {PREPARE_PORT}"),
                claimed(&format!("/metadata/annotations/{}", escaped(PREPARE_PORT))),
                annotation(live, PREPARE_PORT),
            ),
            (
                format!("annotation {PREPARE_PATH}"),
                claimed(&format!("/metadata/annotations/{}", escaped(PREPARE_PATH))),
                annotation(live, PREPARE_PATH),
            ),
            (
                "spec.serviceName".to_string(),
                claimed("/spec/serviceName"),
                live.spec.as_ref().and_then(|s| s.service_name.as_deref()),
            ),
        ];
        let shown = |value: Option<&str>| value.map_or("unset".to_string(), |v| format!("{v:?}"));
        for (field, claimed, live) in fields {
            if claimed != live {
                return Err(format!(
                    "the review's {field} ({}) differs from statefulset {namespace}/{name}'s ({})",
                    shown(claimed),
                    shown(live)
                ));
            }
        }
    }
    Ok(live.clone())
}

/// `/admission/pod-eviction`: the zone-aware disruption budget.
pub fn pod_eviction(review: &Review, cluster: &Cluster, now: Timestamp) -> Decision {
    pod_eviction_with_reason(review, cluster, now).0
}

/// [`pod_eviction`] with the anchor's `reason` label of the decision
/// (`…_zpdb_eviction_requests_total`).
pub fn pod_eviction_with_reason(
    review: &Review,
    cluster: &Cluster,
    now: Timestamp,
) -> (Decision, &'static str) {
    let invalid = |message: String| (Decision::deny_with_code(400, message), "invalid-request");
    let operation = review.field("operation");
    if operation != "CREATE" {
        return invalid(format!("request operation is not create, got: {operation}"));
    }
    let sub = review.field("subResource");
    if sub != "eviction" {
        return invalid(format!("request SubResource is not eviction, got: {sub}"));
    }
    let (name, namespace) = (review.field("name"), review.field("namespace"));
    if name.is_empty() || namespace.is_empty() {
        return invalid("request did not include both a namespace and a name".into());
    }
    let Some(pod) = cluster
        .state
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
    else {
        return (
            Decision::deny_with_code(400, format!("pods \"{name}\" not found")),
            "pod-not-found",
        );
    };
    let zpdbs: Vec<zpdb::Zpdb> = cluster
        .state
        .zpdbs
        .iter()
        .filter_map(|z| zpdb::parse(z).ok())
        .collect();
    match zpdb::decide(pod, &cluster.state, &zpdbs, None, now) {
        Ok(allowed @ zpdb::Allowed::NotRunning) => (
            Decision::allow_with_warning("pod is not ready"),
            allowed.reason(),
        ),
        Ok(allowed) => (Decision::allow(), allowed.reason()),
        Err(denial) => (
            Decision::deny_with_code(denial.code, denial.message),
            denial.reason,
        ),
    }
}

/// `/admission/zpdb-validation`: the same parser the eviction path uses.
pub fn zpdb_validation(review: &Review) -> Decision {
    let object = review.request.get("object").cloned().unwrap_or(Value::Null);
    match zpdb::parse(&object) {
        Ok(_) => Decision::allow(),
        Err(message) => Decision::deny_with_code(400, message),
    }
}

/// `/admission/addonslayer-validation`: Strata's own. Judges a layer with its owners' rules —
/// the layer-controller's spec checks and dependency graph, the drift-observer's `spec.drift`
/// checks — so whatever is admitted, the controllers accept, and the other way round. Denies
/// a malformed spec, every invalid field (named), and a layer that would close a dependency
/// cycle with the layers that exist.
pub fn addonslayer_validation(review: &Review, cluster: &Cluster) -> Decision {
    use core_layers::crd::AddonsLayer;

    if !matches!(review.field("operation"), "CREATE" | "UPDATE") {
        return Decision::allow();
    }
    let object = review.request.get("object").cloned().unwrap_or(Value::Null);
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or(review.field("name"))
        .to_string();
    let deny =
        |message: String| Decision::deny_with_code(400, format!("AddonsLayer {name}: {message}"));
    let layer: AddonsLayer = match serde_json::from_value(object) {
        Ok(layer) => layer,
        Err(e) => return deny(format!("spec: {e}")),
    };
    let others: Vec<AddonsLayer> = cluster
        .state
        .references
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("AddonsLayer"))
        .filter(|o| o.pointer("/metadata/name").and_then(Value::as_str) != Some(name.as_str()))
        .filter_map(|o| serde_json::from_value(o.clone()).ok())
        .collect();
    if let Some(message) = layer_verdict(&layer, &others) {
        return deny(message);
    }
    // A layer applies as the account it names: its author must be allowed to act as that
    // account themselves, or creating a layer would be a way to become it.
    let Some(account) = impersonation_asked(review, &cluster.layer_defaults) else {
        return Decision::allow();
    };
    let requester = Requester::of(review);
    let field = if account.from_spec {
        "spec.serviceAccountName"
    } else if cluster.layer_defaults.controller_account.as_ref() == Some(&account) {
        "the layer-controller's own account: the layer names no spec.serviceAccountName"
    } else {
        "the layer-controller's default service account"
    };
    match &cluster.impersonation {
        Some(answer) if answer.allowed => Decision::allow(),
        Some(answer) => Decision::deny_with_code(
            403,
            format!(
                "AddonsLayer {name}: user {:?} may not act as {account} ({field}): it lacks \"impersonate\" on serviceaccounts {:?} in namespace {:?}{}",
                requester.username,
                account.name,
                account.namespace,
                if answer.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", answer.reason)
                }
            ),
        ),
        // Offline: the check is a call to the API server, listed rather than made.
        None => {
            let mut decision = Decision::allow();
            decision.side_effects.push(format!(
                "SubjectAccessReview: may user {:?} impersonate serviceaccounts {:?} in namespace {:?}",
                requester.username, account.name, account.namespace
            ));
            decision
        }
    }
}

/// Why the owners of an AddonsLayer would refuse it (spec errors, or the dependency cycle it
/// would close with `others`), or `None`: one copy of the rules for the webhook and its tests.
pub fn layer_verdict(
    layer: &core_layers::crd::AddonsLayer,
    others: &[core_layers::crd::AddonsLayer],
) -> Option<String> {
    use core_layers::plan;

    let mut errors = plan::spec_errors(layer);
    if let Some(drift) = &layer.spec.drift {
        errors.extend(core_drift::rules::spec_errors(drift));
    }
    if !errors.is_empty() {
        return Some(errors.join("; "));
    }
    let name = layer.metadata.name.clone().unwrap_or_default();
    let graph = plan::dependency_graph(others.iter().chain(std::iter::once(layer)));
    core_layers::deps::cycle_through(&name, &graph)
        .map(|cycle| format!("dependency cycle: {}", cycle.join(" -> ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        for (ms, want) in [
            (0, "0s"),
            (10_000, "10s"),
            (1_800_000, "30m0s"),
            (3_600_000, "1h0m0s"),
            (5_400_000, "1h30m0s"),
            (1_500, "1.5s"),
        ] {
            assert_eq!(go_duration(SignedDuration::from_millis(ms)), want);
        }
    }
}
