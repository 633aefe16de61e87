//! Reading what layers want: sources (downloaded once per revision and shared by every layer
//! reading them), manifest identities, and the global desired state used for hand-over and
//! ownership. Shared by the layer-controller, the drift-observer and `strata layers plan`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use core_k8s::apply::{Applier, ResolvedKind, parse_api_version, typed_value};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;

use crate::lock;
use crate::source_cache::{self, SourceCache};
use core_layers::crd::AddonsLayer;
use core_layers::error::{LayerError, Result};
use core_layers::objects::{ObjectRef, SourceRef, SourceState};
use core_layers::source::{self, CONFIGMAP_KIND, FLUX_GROUP, Files, Limits, Manifest};

/// (source, path) → (revision, objects): what a layer wants depends on nothing else, and
/// only the latest revision is kept.
type DesiredCache = HashMap<(SourceRef, String), (String, Arc<BTreeSet<ObjectRef>>)>;

/// How long a read of a cached source kind waits for the kind's first list (a controller's
/// start-up); past it the source reads as not ready and the layer is woken by the list.
pub const SOURCE_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A source's artifact as the reader keeps it between reads, under the key of its revision
/// and digest.
type ArtifactSlot = Arc<tokio::sync::Mutex<Option<(String, Kept)>>>;

/// From this many unpacked bytes an artifact is kept unpacked; below it, packed.
const KEEP_UNPACKED_FROM: usize = 64 * 1024;

/// How an artifact is kept. A large one stays unpacked: layers sharing a monorepo's source
/// read the files without unpacking them again. A small one stays as downloaded, and is
/// unpacked again (microseconds) when no reader still holds the files: a fleet with a source
/// per layer kept ~2.6 KB per layer of unpacked files, against a few hundred bytes packed.
#[derive(Debug)]
enum Kept {
    Unpacked(Arc<Files>),
    Packed {
        bytes: Box<[u8]>,
        /// The files while some reader still holds them.
        unpacked: std::sync::Weak<Files>,
    },
}

impl Kept {
    fn of(bytes: Vec<u8>, files: &Arc<Files>) -> Self {
        let size: usize = files
            .iter()
            .map(|(path, data)| path.len() + data.len())
            .sum();
        if size >= KEEP_UNPACKED_FROM || bytes.len() >= size {
            Kept::Unpacked(files.clone())
        } else {
            Kept::Packed {
                bytes: bytes.into_boxed_slice(),
                unpacked: Arc::downgrade(files),
            }
        }
    }

    /// The files, unpacked again if they were let go.
    fn files(&mut self, limits: &Limits) -> Result<Arc<Files>> {
        match self {
            Kept::Unpacked(files) => Ok(files.clone()),
            Kept::Packed { bytes, unpacked } => {
                if let Some(files) = unpacked.upgrade() {
                    return Ok(files);
                }
                let files = Arc::new(source::unpack(bytes, limits)?);
                *unpacked = Arc::downgrade(&files);
                Ok(files)
            }
        }
    }
}

/// Reads sources and live kinds for the layer-controller and the CLI.
pub struct Reader {
    client: Client,
    applier: Applier,
    limits: Limits,
    default_namespace: String,
    artifacts: Mutex<HashMap<SourceRef, ArtifactSlot>>,
    desired: Mutex<DesiredCache>,
    /// Flux source kind → what a watch knows of its objects, read instead of a GET per read
    /// (see [`Reader::cache_sources`]).
    sources: Mutex<HashMap<String, Arc<SourceCache>>>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("default_namespace", &self.default_namespace)
            .finish()
    }
}

impl Reader {
    /// `applier` brings the discovery cache (shared with the applies).
    pub fn new(
        client: Client,
        applier: Applier,
        limits: Limits,
        default_namespace: String,
    ) -> Self {
        Self {
            client,
            applier,
            limits,
            default_namespace,
            artifacts: Mutex::default(),
            desired: Mutex::default(),
            sources: Mutex::default(),
        }
    }

    /// Reads of Flux sources of `kind` come from `cache` (waiting for its first list, up to
    /// [`SOURCE_LIST_WAIT`]), never from a GET: a controller whose reconciles are woken by the
    /// same watch, after it updated the cache, never decides from an older source than the
    /// one that woke it. Without a cache (the drift-observer, the CLI) a read is a GET.
    pub fn cache_sources(&self, kind: &str, cache: Arc<SourceCache>) {
        lock(&self.sources).insert(kind.to_string(), cache);
    }

    pub fn default_namespace(&self) -> &str {
        &self.default_namespace
    }

    pub fn applier(&self) -> &Applier {
        &self.applier
    }

    /// The served version of a Flux source kind (`v1`, else the older `v1beta2`).
    pub async fn resolve_flux_kind(&self, kind: &str) -> Option<ResolvedKind> {
        for version in ["v1", "v1beta2"] {
            let gvk = GroupVersionKind::gvk(FLUX_GROUP, version, kind);
            if let Ok(resolved) = self.applier.discovery().resolve(&gvk).await {
                return Some(resolved);
            }
        }
        None
    }

    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<ResolvedKind> {
        let (group, version) = parse_api_version(api_version).ok_or_else(|| {
            LayerError::Manifest(format!("{kind}: apiVersion {api_version:?} is not valid"))
        })?;
        Ok(self
            .applier
            .discovery()
            .resolve(&GroupVersionKind::gvk(group, version, kind))
            .await?)
    }

    pub fn api(&self, resolved: &ResolvedKind, namespace: Option<&str>) -> Api<DynamicObject> {
        resolved.api(&self.client, namespace)
    }

    /// The client reads go through (the controller's own identity).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Reads one live object of a resolved kind as JSON with its `apiVersion` and `kind`;
    /// `None` when it does not exist.
    pub async fn get_value(
        &self,
        resolved: &ResolvedKind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<serde_json::Value>> {
        let object = self
            .api(resolved, namespace)
            .get_opt(name)
            .await
            .map_err(|e| {
                LayerError::api(format!("reading {} {name}", resolved.resource.kind), e)
            })?;
        Ok(object.map(|o| typed_value(&o, &resolved.resource).unwrap_or_default()))
    }

    /// Reads a source: its state and, when ready, its files (downloaded once per revision).
    pub async fn fetch(&self, source: &SourceRef) -> Result<source::Fetched> {
        let not_ready = |message: String| source::Fetched {
            state: SourceState::NotReady { message },
            files: None,
        };
        if source.kind == CONFIGMAP_KIND {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &source.namespace);
            let Some(cm) = api
                .get_opt(&source.name)
                .await
                .map_err(|e| LayerError::api(format!("reading {source}"), e))?
            else {
                return Ok(not_ready(format!("{source} not found")));
            };
            let value = serde_json::to_value(&cm).unwrap_or_default();
            let files = source::configmap_files(&value);
            return Ok(source::Fetched {
                state: SourceState::Ready {
                    revision: source::configmap_revision(&files),
                },
                files: Some(Arc::new(files)),
            });
        }
        let Some(resolved) = self.resolve_flux_kind(&source.kind).await else {
            return Ok(not_ready(format!(
                "{}.{FLUX_GROUP} is not served by this cluster (is Flux installed?)",
                source.kind
            )));
        };
        let cached = lock(&self.sources).get(&source.kind).cloned();
        let verdict = match cached {
            Some(cache) => {
                if !cache.wait_listed(SOURCE_LIST_WAIT).await {
                    return Ok(not_ready(format!(
                        "the {} watch has not listed them yet (may this controller list and watch {}.{FLUX_GROUP}?)",
                        source.kind, resolved.resource.plural
                    )));
                }
                cache.get(&source.namespace, &source.name)
            }
            None => self
                .api(&resolved, Some(&source.namespace))
                .get_opt(&source.name)
                .await
                .map_err(|e| LayerError::api(format!("reading {source}"), e))?
                .as_ref()
                .map(source_cache::verdict),
        };
        let artifact = match verdict {
            None => return Ok(not_ready(format!("{source} not found"))),
            Some(Err(message)) => return Ok(not_ready(message)),
            Some(Ok(artifact)) => artifact,
        };
        let slot = lock(&self.artifacts)
            .entry(source.clone())
            .or_default()
            .clone();
        // One download per source and revision, however many layers ask at once.
        let mut slot = slot.lock().await;
        let key = format!(
            "{}|{}",
            artifact.revision,
            artifact.digest.as_deref().unwrap_or("")
        );
        let files = match slot.as_mut() {
            Some((cached, kept)) if *cached == key => kept.files(&self.limits)?,
            _ => {
                let bytes = crate::fetch::download(&artifact.url, &self.limits).await?;
                source::verify_digest(&bytes, artifact.digest.as_deref())?;
                let files = Arc::new(source::unpack(&bytes, &self.limits)?);
                *slot = Some((key, Kept::of(bytes, &files)));
                files
            }
        };
        Ok(source::Fetched {
            state: SourceState::Ready {
                revision: artifact.revision,
            },
            files: Some(files),
        })
    }

    /// An object's identity with the namespace a namespaced kind gets when the manifest
    /// leaves it out (`default`, as kubectl).
    pub async fn identity(&self, manifest: &Manifest) -> ObjectRef {
        if manifest.object.namespace.is_some() {
            return manifest.object.clone();
        }
        match self
            .resolve(&manifest.api_version, &manifest.object.kind)
            .await
        {
            Ok(resolved) if resolved.namespaced => ObjectRef {
                namespace: Some("default".into()),
                ..manifest.object.clone()
            },
            _ => manifest.object.clone(),
        }
    }

    /// What another layer wants right now: its source content, or, when its source cannot be
    /// read, its inventory (so nothing it owns is mistaken for abandoned).
    pub async fn desired_of(&self, layer: &AddonsLayer) -> Arc<BTreeSet<ObjectRef>> {
        let inventory = || {
            Arc::new(
                layer
                    .status
                    .iter()
                    .flat_map(|s| s.inventory.iter())
                    .map(ObjectRef::of_entry)
                    .collect(),
            )
        };
        // What a layer with variables wants depends on them, which live elsewhere and change
        // on their own: its inventory (what it applied) stands for it.
        if layer.spec.post_build.is_some() {
            return inventory();
        }
        let source = SourceRef::of(layer, &self.default_namespace);
        let Ok(fetched) = self.fetch(&source).await else {
            return inventory();
        };
        let (SourceState::Ready { revision }, Some(files)) = (&fetched.state, &fetched.files)
        else {
            return inventory();
        };
        let key = (source, layer.spec.source.path.clone());
        if let Some((cached_revision, refs)) = lock(&self.desired).get(&key)
            && cached_revision == revision
        {
            return refs.clone();
        }
        let Ok(manifests) = source::layer_manifests(files, &layer.spec.source.path) else {
            return inventory();
        };
        let mut refs = BTreeSet::new();
        for manifest in &manifests {
            refs.insert(self.identity(manifest).await);
        }
        let refs = Arc::new(refs);
        lock(&self.desired).insert(key, (revision.clone(), refs.clone()));
        refs
    }

    /// `object → layers wanting it`, over every other layer.
    pub async fn wanted_by(
        &self,
        this: &str,
        all: &core_layers::crd::LayerSet,
    ) -> BTreeMap<ObjectRef, BTreeSet<String>> {
        let mut wanted: BTreeMap<ObjectRef, BTreeSet<String>> = BTreeMap::new();
        for (name, layer) in all {
            if name == this || layer.metadata.deletion_timestamp.is_some() {
                continue;
            }
            for object in self.desired_of(layer).await.iter() {
                wanted
                    .entry(object.clone())
                    .or_default()
                    .insert(name.clone());
            }
        }
        wanted
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn kept(files: &[(&str, &str)]) -> (Kept, Arc<Files>) {
        let bytes = source::pack(files);
        let unpacked = Arc::new(source::unpack(&bytes, &Limits::default()).unwrap());
        (Kept::of(bytes, &unpacked), unpacked)
    }

    #[test]
    fn a_small_artifact_is_kept_packed_and_unpacked_again_only_once_let_go() {
        let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n".repeat(20);
        let (mut kept, first) = kept(&[("a.yaml", &manifest), ("b/c.yaml", &manifest)]);
        assert!(matches!(kept, Kept::Packed { .. }), "{kept:?}");
        // Still held by a reader: the same files, not unpacked again.
        let again = kept.files(&Limits::default()).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let expected = (*first).clone();
        drop((first, again));
        // Let go: unpacked again from the kept bytes, the same content.
        let fresh = kept.files(&Limits::default()).unwrap();
        assert_eq!(*fresh, expected);
        assert_eq!(fresh.keys().collect::<Vec<_>>(), ["a.yaml", "b/c.yaml"]);
    }

    #[test]
    fn a_large_artifact_stays_unpacked() {
        // Varied enough that it does not compress to nothing, above KEEP_UNPACKED_FROM.
        let big: String = (0..8000)
            .map(|i| format!("k{i}: v{}\n", i * 7919))
            .collect();
        assert!(big.len() >= KEEP_UNPACKED_FROM);
        let (mut kept, first) = kept(&[("big.yaml", &big)]);
        assert!(matches!(kept, Kept::Unpacked(_)), "kept packed");
        let again = kept.files(&Limits::default()).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
    }
}
