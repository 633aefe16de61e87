//! Identities the layer services share: an applied object, a layer's source, the state of
//! that source.

use std::fmt;

use crate::crd::{AddonsLayer, InventoryEntry};

/// An object's identity, independent of its API version (an object keeps its identity when
/// a manifest moves from `v1beta1` to `v1`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            group: core_status::object::api_group(api_version).to_string(),
            kind: kind.to_string(),
            namespace: namespace.filter(|ns| !ns.is_empty()).map(str::to_string),
            name: name.to_string(),
        }
    }

    pub fn of_entry(entry: &InventoryEntry) -> Self {
        Self::new(
            &entry.api_version,
            &entry.kind,
            entry.namespace.as_deref(),
            &entry.name,
        )
    }

    /// Whether `entry` records this object; the same as comparing with [`Self::of_entry`],
    /// without copying the entry (owners are looked up across every layer's inventory).
    pub fn is_entry(&self, entry: &InventoryEntry) -> bool {
        self.name == entry.name
            && self.kind == entry.kind
            && self.namespace.as_deref().unwrap_or_default()
                == entry.namespace.as_deref().unwrap_or_default()
            && self.group == core_status::object::api_group(&entry.api_version)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The source kinds a layer can read, by Kind name.
pub const SOURCE_KINDS: [&str; 4] = ["GitRepository", "OCIRepository", "Bucket", "ConfigMap"];

/// `spec.source.kind` as written → the Kind it names: the Kind itself (`GitRepository`), or
/// the `plural.group` form Kraan documents (`gitrepositories.source.toolkit.fluxcd.io`), or a
/// bare plural (`configmaps`), case-insensitively. `None` for anything else.
pub fn source_kind(written: &str) -> Option<&'static str> {
    const FLUX_GROUP: &str = "source.toolkit.fluxcd.io";
    let lower = written.trim().to_ascii_lowercase();
    let (name, group) = match lower.split_once('.') {
        Some((name, group)) => (name, Some(group)),
        None => (lower.as_str(), None),
    };
    let kind = match name {
        "gitrepository" | "gitrepositories" => "GitRepository",
        "ocirepository" | "ocirepositories" => "OCIRepository",
        "bucket" | "buckets" => "Bucket",
        "configmap" | "configmaps" => "ConfigMap",
        _ => return None,
    };
    let group_ok = match (kind, group) {
        (_, None) => true,
        ("ConfigMap", Some(group)) => group == "v1" || group == "core",
        (_, Some(group)) => group == FLUX_GROUP,
    };
    group_ok.then_some(kind)
}

/// The source of a layer as `kind/namespace/name`, for same-source lock-step and watches.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl SourceRef {
    /// `spec.source` with the kind and namespace defaults applied.
    pub fn of(layer: &AddonsLayer, default_namespace: &str) -> Self {
        let source = &layer.spec.source;
        Self {
            kind: match source.kind.as_deref().filter(|k| !k.is_empty()) {
                None => "GitRepository".into(),
                Some(kind) => source_kind(kind).unwrap_or(kind).to_string(),
            },
            namespace: source
                .namespace
                .clone()
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| default_namespace.to_string()),
            name: source.name.clone(),
        }
    }
}

/// The ServiceAccount a layer acts as when it applies, reads and prunes (impersonation, like
/// Flux's `serviceAccountName`): `spec.serviceAccountName`, else the controller's default
/// account, in the namespace of the layer's source. `None`: the layer acts as the
/// layer-controller itself. The layer-controller, the drift-observer's dry runs and the
/// validation webhook's impersonation check all ask this one function.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ActingAccount {
    pub namespace: String,
    pub name: String,
    /// Where the name came from: `spec.serviceAccountName` or the default.
    pub from_spec: bool,
}

impl ActingAccount {
    pub fn of(
        layer: &AddonsLayer,
        default_namespace: &str,
        default_account: Option<&str>,
    ) -> Option<Self> {
        let from_spec = layer
            .spec
            .service_account_name
            .as_deref()
            .filter(|n| !n.is_empty());
        let name = from_spec.or(default_account.filter(|n| !n.is_empty()))?;
        Some(Self {
            namespace: SourceRef::of(layer, default_namespace).namespace,
            name: name.to_string(),
            from_spec: from_spec.is_some(),
        })
    }

    /// The user name the API server knows the account by (what impersonation sends).
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

impl std::fmt::Display for ActingAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceAccount {}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_the_object_whatever_its_version() {
        let entry =
            |api_version: &str, kind: &str, namespace: Option<&str>, name: &str| InventoryEntry {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: namespace.map(str::to_string),
                name: name.into(),
                status: "Current".into(),
                reason: None,
                message: None,
            };
        let web = ObjectRef::new("apps/v1", "Deployment", Some("shop"), "web");
        let node = ObjectRef::new("v1", "Namespace", None, "shop");
        // (entry, is it `web`, is it `node`)
        let cases = [
            (
                entry("apps/v1", "Deployment", Some("shop"), "web"),
                true,
                false,
            ),
            (
                entry("apps/v1beta2", "Deployment", Some("shop"), "web"),
                true,
                false,
            ),
            (
                entry("extensions/v1beta1", "Deployment", Some("shop"), "web"),
                false,
                false,
            ),
            (
                entry("apps/v1", "StatefulSet", Some("shop"), "web"),
                false,
                false,
            ),
            (
                entry("apps/v1", "Deployment", Some("prod"), "web"),
                false,
                false,
            ),
            (entry("apps/v1", "Deployment", None, "web"), false, false),
            (
                entry("apps/v1", "Deployment", Some("shop"), "api"),
                false,
                false,
            ),
            (entry("v1", "Namespace", None, "shop"), false, true),
            (entry("v1", "Namespace", Some(""), "shop"), false, true),
            (entry("core/v1", "Namespace", None, "shop"), false, false),
        ];
        for (e, is_web, is_node) in &cases {
            assert_eq!(web.is_entry(e), *is_web, "{e:?}");
            assert_eq!(node.is_entry(e), *is_node, "{e:?}");
            // The same answer as comparing a copy.
            assert_eq!(web.is_entry(e), ObjectRef::of_entry(e) == web, "{e:?}");
            assert_eq!(node.is_entry(e), ObjectRef::of_entry(e) == node, "{e:?}");
        }
    }

    #[test]
    fn the_acting_account_of_a_layer() {
        let layer = |account: Option<&str>, namespace: Option<&str>| {
            let mut spec =
                serde_json::json!({"version": "1.0.0", "source": {"name": "repo", "path": "./"}});
            if let Some(account) = account {
                spec["serviceAccountName"] = account.into();
            }
            if let Some(namespace) = namespace {
                spec["source"]["namespace"] = namespace.into();
            }
            serde_json::from_value::<AddonsLayer>(serde_json::json!({
                "apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer",
                "metadata": {"name": "l"}, "spec": spec}))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let user = |l: &AddonsLayer, default: Option<&str>| {
            ActingAccount::of(l, "strata-system", default).map(|a| (a.user(), a.from_spec))
        };
        let cases = [
            (
                "named, in the source's namespace",
                layer(Some("deployer"), Some("team-a")),
                None,
                Some(("system:serviceaccount:team-a:deployer".to_string(), true)),
            ),
            (
                "named, the default source namespace",
                layer(Some("deployer"), None),
                None,
                Some((
                    "system:serviceaccount:strata-system:deployer".to_string(),
                    true,
                )),
            ),
            (
                "the default account",
                layer(None, Some("team-a")),
                Some("tenant"),
                Some(("system:serviceaccount:team-a:tenant".to_string(), false)),
            ),
            (
                "the spec wins over the default",
                layer(Some("deployer"), Some("team-a")),
                Some("tenant"),
                Some(("system:serviceaccount:team-a:deployer".to_string(), true)),
            ),
            (
                "an empty name is no name",
                layer(Some(""), Some("team-a")),
                None,
                None,
            ),
            (
                "none at all: the controller itself",
                layer(None, Some("team-a")),
                None,
                None,
            ),
        ];
        for (name, l, default, want) in cases {
            assert_eq!(user(&l, default), want, "{name}");
        }
    }

    #[test]
    fn source_kinds_as_kraan_and_flux_write_them() {
        let cases = [
            ("GitRepository", Some("GitRepository")),
            (
                "gitrepositories.source.toolkit.fluxcd.io",
                Some("GitRepository"),
            ),
            (
                "GitRepositories.Source.Toolkit.FluxCD.io",
                Some("GitRepository"),
            ),
            (
                "ocirepositories.source.toolkit.fluxcd.io",
                Some("OCIRepository"),
            ),
            ("buckets.source.toolkit.fluxcd.io", Some("Bucket")),
            ("Bucket", Some("Bucket")),
            ("ConfigMap", Some("ConfigMap")),
            ("configmaps", Some("ConfigMap")),
            ("gitrepositories.example.com", None),
            ("helmrepositories.source.toolkit.fluxcd.io", None),
            ("Secret", None),
            ("", None),
        ];
        for (written, want) in cases {
            assert_eq!(source_kind(written), want, "{written:?}");
        }
    }
}

impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What the shell found out about a layer's source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceState {
    Ready { revision: String },
    NotReady { message: String },
}
