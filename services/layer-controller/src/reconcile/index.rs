//! What the layer watch indexes beside the cache, so that a reconcile or a wake-up costs what
//! it touches, not what the fleet holds:
//!
//! - **owners**: which layers hold each object in their inventory, the owners an apply checks
//!   its objects against (a layer never takes an object another layer owns and still wants);
//! - **dependents**: which layers name each layer in `dependsOn`, woken when it changes;
//! - **readers**: which layers read each source, woken when it changes.
//!
//! Why: each of these used to be found by walking every cached layer, per apply, per state
//! change of a layer and per change of a source, so a fleet's round cost O(layers²) (at 1,000
//! layers the owners walk alone looked at 4 million inventory entries a round, most of the
//! controller's CPU until it stopped copying them; at 10,000, 400 million). The indexes are
//! kept by the layer watch after the cache stored the change, and answer with candidates: a
//! caller that must be exact (owners) confirms each against the layer's cached copy, so a
//! stale or colliding entry can cost a look, never a wrong answer.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use crate::crd::{AddonsLayer, InventoryEntry};
use crate::keys::ORPHANED_STATUS;
use crate::lock;
use crate::plan::{self, ObjectRef, SourceRef};

/// An object's identity as a number: group, kind, namespace and name, hashed without copying
/// them (the same for an inventory entry as for the [`ObjectRef`] of its object).
fn object_key(group: &str, kind: &str, namespace: &str, name: &str) -> u64 {
    core_k8s::hashing::hash64(&(group, kind, namespace, name))
}

fn entry_key(entry: &InventoryEntry) -> u64 {
    object_key(
        core_status::object::api_group(&entry.api_version),
        &entry.kind,
        entry.namespace.as_deref().unwrap_or_default(),
        &entry.name,
    )
}

fn ref_key(object: &ObjectRef) -> u64 {
    object_key(
        &object.group,
        &object.kind,
        object.namespace.as_deref().unwrap_or_default(),
        &object.name,
    )
}

/// A source's identity as a number (the readers index keeps no copy of the reference; two
/// sources sharing one would only wake each other's readers).
fn source_key(source: &SourceRef) -> u64 {
    core_k8s::hashing::hash64(source)
}

/// One reverse map: key → the layers filed under it (sorted; almost always one, so a `Vec`
/// and not a set, whose smallest node costs ten times the memory), and what each layer was
/// filed under. A layer's name is allocated once and shared by every entry naming it.
#[derive(Debug)]
struct Reverse<K> {
    by_key: HashMap<K, Vec<Arc<str>>>,
    by_layer: HashMap<Arc<str>, Vec<K>>,
}

impl<K> Default for Reverse<K> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            by_layer: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Ord + Clone> Reverse<K> {
    fn remove(&mut self, layer: &str) {
        for key in self.by_layer.remove(layer).unwrap_or_default() {
            if let Some(layers) = self.by_key.get_mut(&key) {
                if let Ok(at) = layers.binary_search_by(|l| (**l).cmp(layer)) {
                    layers.remove(at);
                }
                if layers.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }

    /// Files `layer` under exactly `keys`.
    fn file(&mut self, layer: &str, mut keys: Vec<K>) {
        keys.sort_unstable();
        keys.dedup();
        // Most changes of a layer are status writes that keep what it is filed under.
        if self.by_layer.get(layer) == Some(&keys) {
            return;
        }
        self.remove(layer);
        let name: Arc<str> = Arc::from(layer);
        for key in &keys {
            let layers = self.by_key.entry(key.clone()).or_default();
            if let Err(at) = layers.binary_search_by(|l| (**l).cmp(layer)) {
                // Almost always the only one: room for it alone, not the first push's four.
                layers.reserve_exact(1);
                layers.insert(at, name.clone());
            }
        }
        if !keys.is_empty() {
            self.by_layer.insert(name, keys);
        }
    }

    fn get<Q>(&self, key: &Q) -> Vec<String>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.by_key
            .get(key)
            .map(|layers| layers.iter().map(|l| l.to_string()).collect())
            .unwrap_or_default()
    }
}

#[derive(Debug, Default)]
struct Indexes {
    owners: Reverse<u64>,
    dependents: Reverse<String>,
    /// By [`source_key`].
    readers: Reverse<u64>,
}

impl Indexes {
    fn remove(&mut self, layer: &str) {
        self.owners.remove(layer);
        self.dependents.remove(layer);
        self.readers.remove(layer);
    }

    fn record(&mut self, layer: &AddonsLayer, default_source_namespace: &str) {
        let name = layer.metadata.name.as_deref().unwrap_or_default();
        let objects = layer
            .status
            .iter()
            .flat_map(|s| s.inventory.iter())
            .filter(|e| e.status != ORPHANED_STATUS)
            .map(entry_key)
            .collect();
        self.owners.file(name, objects);
        self.dependents
            .file(name, plan::dependencies_of(layer).into_iter().collect());
        self.readers.file(
            name,
            vec![source_key(&SourceRef::of(layer, default_source_namespace))],
        );
    }
}

/// The indexes (see the module's documentation), shared by the layer watch and the
/// reconciles.
#[derive(Debug)]
pub(super) struct LayerIndex {
    default_source_namespace: String,
    indexes: Mutex<Indexes>,
}

impl LayerIndex {
    pub(super) fn new(default_source_namespace: &str) -> Self {
        Self {
            default_source_namespace: default_source_namespace.to_string(),
            indexes: Mutex::default(),
        }
    }

    /// The cache now holds `layer` as it is.
    pub(super) fn record(&self, layer: &AddonsLayer) {
        lock(&self.indexes).record(layer, &self.default_source_namespace);
    }

    /// `layer` left the cache (deleted, or relabelled into another shard).
    pub(super) fn remove(&self, layer: &str) {
        lock(&self.indexes).remove(layer);
    }

    /// The cache was relisted and now holds exactly `layers`.
    pub(super) fn rebuild<'a>(&self, layers: impl IntoIterator<Item = &'a AddonsLayer>) {
        let mut indexes = Indexes::default();
        for layer in layers {
            indexes.record(layer, &self.default_source_namespace);
        }
        *lock(&self.indexes) = indexes;
    }

    /// The layers that may hold `object` in their inventory, by name: to be confirmed against
    /// their cached copies.
    pub(super) fn owners(&self, object: &ObjectRef) -> Vec<String> {
        lock(&self.indexes).owners.get(&ref_key(object))
    }

    /// The layers that name `layer` in their `dependsOn`.
    pub(super) fn dependents(&self, layer: &str) -> Vec<String> {
        lock(&self.indexes).dependents.get(layer)
    }

    /// The layers that read `source`.
    pub(super) fn readers(&self, source: &SourceRef) -> Vec<String> {
        lock(&self.indexes).readers.get(&source_key(source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{AddonsLayerSpec, AddonsLayerStatus};

    fn entry(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> InventoryEntry {
        InventoryEntry {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
            status: "Current".into(),
            reason: None,
            message: None,
        }
    }

    fn layer(name: &str, inventory: Vec<InventoryEntry>) -> AddonsLayer {
        let mut l = AddonsLayer::new(name, AddonsLayerSpec::default());
        l.status = Some(AddonsLayerStatus {
            inventory,
            ..Default::default()
        });
        l
    }

    fn web() -> ObjectRef {
        ObjectRef::new("apps/v1", "Deployment", Some("shop"), "web")
    }

    fn crd() -> ObjectRef {
        ObjectRef::new(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "widgets.example.com",
        )
    }

    #[test]
    fn the_index_follows_each_layers_inventory() {
        let index = LayerIndex::new("flux-system");
        let widgets = entry(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "widgets.example.com",
        );
        index.record(&layer(
            "a",
            vec![
                entry("apps/v1", "Deployment", Some("shop"), "web"),
                widgets.clone(),
            ],
        ));
        // Another API version of the same object, and a cluster-scoped one written with an
        // empty namespace: the same objects.
        index.record(&layer(
            "b",
            vec![
                entry("apps/v1beta2", "Deployment", Some("shop"), "web"),
                InventoryEntry {
                    namespace: Some(String::new()),
                    ..widgets.clone()
                },
            ],
        ));
        assert_eq!(index.owners(&web()), ["a", "b"]);
        assert_eq!(index.owners(&crd()), ["a", "b"]);
        // Not the same object: another namespace, kind, group or name.
        for other in [
            ObjectRef::new("apps/v1", "Deployment", Some("prod"), "web"),
            ObjectRef::new("apps/v1", "StatefulSet", Some("shop"), "web"),
            ObjectRef::new("extensions/v1beta1", "Deployment", Some("shop"), "web"),
            ObjectRef::new("apps/v1", "Deployment", Some("shop"), "api"),
        ] {
            assert!(index.owners(&other).is_empty(), "{other}");
        }
        // `a` lets go of `web`: orphaned, then gone from its inventory.
        let mut orphaned = entry("apps/v1", "Deployment", Some("shop"), "web");
        orphaned.status = ORPHANED_STATUS.into();
        index.record(&layer("a", vec![orphaned, widgets.clone()]));
        assert_eq!(index.owners(&web()), ["b"]);
        index.record(&layer("a", vec![widgets.clone()]));
        assert_eq!(index.owners(&web()), ["b"]);
        assert_eq!(index.owners(&crd()), ["a", "b"]);
        // Deleted.
        index.remove("b");
        assert!(index.owners(&web()).is_empty());
        assert_eq!(index.owners(&crd()), ["a"]);
        // A relist holds exactly what was listed: `a` went while the watch was down.
        index.rebuild([&layer(
            "c",
            vec![entry("apps/v1", "Deployment", Some("shop"), "web")],
        )]);
        assert_eq!(index.owners(&web()), ["c"]);
        assert!(index.owners(&crd()).is_empty());
        // Nothing left behind by a layer whose inventory emptied.
        index.record(&layer("c", vec![]));
        let inner = lock(&index.indexes);
        assert!(inner.owners.by_key.is_empty() && inner.owners.by_layer.is_empty());
    }

    fn reading(name: &str, source: (&str, Option<&str>, &str), deps: &[&str]) -> AddonsLayer {
        let (kind, namespace, source_name) = source;
        let mut l = layer(name, vec![]);
        l.spec.source.kind = Some(kind.into());
        l.spec.source.namespace = namespace.map(str::to_string);
        l.spec.source.name = source_name.into();
        l.spec.prereqs.depends_on = deps.iter().map(|d| d.to_string()).collect();
        l
    }

    #[test]
    fn dependents_and_readers_follow_each_layers_spec() {
        let index = LayerIndex::new("flux-system");
        let repo = |namespace: &str, name: &str| SourceRef {
            kind: "GitRepository".into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        index.record(&reading("base", ("GitRepository", None, "main"), &[]));
        index.record(&reading(
            "apps",
            (
                "gitrepositories.source.toolkit.fluxcd.io",
                Some("flux-system"),
                "main",
            ),
            &["base@>=1.0.0"],
        ));
        index.record(&reading(
            "web",
            ("GitRepository", Some("team"), "main"),
            &["apps", "base"],
        ));
        // Not a layer name: left out, as the gate reports it on its own layer.
        index.record(&reading(
            "bad",
            ("GitRepository", None, "other"),
            &["Not A Name"],
        ));
        assert_eq!(index.dependents("base"), ["apps", "web"]);
        assert_eq!(index.dependents("apps"), ["web"]);
        assert!(index.dependents("web").is_empty());
        assert_eq!(
            index.readers(&repo("flux-system", "main")),
            ["apps", "base"]
        );
        assert_eq!(index.readers(&repo("team", "main")), ["web"]);
        assert_eq!(index.readers(&repo("flux-system", "other")), ["bad"]);
        // `web` drops `base` and moves to another source.
        index.record(&reading("web", ("GitRepository", None, "main"), &["apps"]));
        assert_eq!(index.dependents("base"), ["apps"]);
        assert_eq!(
            index.readers(&repo("flux-system", "main")),
            ["apps", "base", "web"]
        );
        assert!(index.readers(&repo("team", "main")).is_empty());
        // Deleted.
        index.remove("apps");
        assert!(index.dependents("base").is_empty());
        assert_eq!(index.readers(&repo("flux-system", "main")), ["base", "web"]);
        assert_eq!(index.dependents("apps"), ["web"], "web still names apps");
    }
}
