//! One reflector store per watched namespace, read as one.
//!
//! A watch of several namespaces is one watch per namespace (a namespaced Role grants no
//! cluster-wide list), and each needs its own store: a kube reflector swaps its whole store
//! when a relist completes, so two watches feeding one store would each erase the other's
//! objects.

use std::hash::Hash;
use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

/// The stores of every watched namespace.
pub struct ScopedStore<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    stores: Vec<Store<K>>,
}

impl<K> Clone for ScopedStore<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            stores: self.stores.clone(),
        }
    }
}

impl<K> std::fmt::Debug for ScopedStore<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedStore")
            .field("stores", &self.stores.len())
            .field("objects", &self.len())
            .finish()
    }
}

impl<K> ScopedStore<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    pub fn new(stores: Vec<Store<K>>) -> Self {
        Self { stores }
    }

    /// The object `key` names, from whichever namespace's store holds it.
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.stores.iter().find_map(|s| s.get(key))
    }

    /// Every object of every namespace.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.stores.iter().flat_map(|s| s.state()).collect()
    }

    /// How many objects all the stores hold.
    pub fn len(&self) -> usize {
        self.stores.iter().map(Store::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    fn config_map(ns: &str, name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A relist of one namespace (Init … InitDone) leaves the other namespace's objects alone,
    /// which one shared store would not.
    #[test]
    fn each_namespace_keeps_its_objects_through_the_others_relists() {
        let (mut a, mut b) = (
            Writer::<ConfigMap>::default(),
            Writer::<ConfigMap>::default(),
        );
        let scoped = ScopedStore::new(vec![a.as_reader(), b.as_reader()]);
        a.apply_watcher_event(&Event::Apply(config_map("mimir", "x")));
        b.apply_watcher_event(&Event::Apply(config_map("loki", "x")));
        b.apply_watcher_event(&Event::Init);
        b.apply_watcher_event(&Event::InitApply(config_map("loki", "y")));
        b.apply_watcher_event(&Event::InitDone);
        let mut names: Vec<String> = scoped
            .state()
            .iter()
            .map(|c| {
                format!(
                    "{}/{}",
                    c.metadata.namespace.as_deref().unwrap_or_default(),
                    c.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        names.sort();
        assert_eq!(names, vec!["loki/y", "mimir/x"]);
        assert_eq!(scoped.len(), 2);
        assert!(scoped.get(&ObjectRef::new("x").within("mimir")).is_some());
        assert!(scoped.get(&ObjectRef::new("x").within("loki")).is_none());
    }
}
