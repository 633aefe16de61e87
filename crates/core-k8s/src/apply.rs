//! Server-side apply of typed objects and of dynamic objects of any kind.
//!
//! Every write goes through server-side apply with the service's name as field manager, so each
//! service owns exactly the fields it sets and never clobbers another's. Dynamic objects are
//! mapped from `apiVersion`/`kind` to a REST resource through a discovery cache that asks the
//! API server only about kinds it has not seen (e.g. a CRD installed a moment ago).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::RwLock;

use crate::{Error, Result};

/// Fields the API server owns; sending them in an apply patch is wrong (resourceVersion would
/// turn the apply into an optimistic-lock update) or pointless.
const SERVER_OWNED_METADATA: &[&str] = &[
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
];

/// How many times a forced apply answered 409 is sent again, after 100, 200 and 400 ms. A
/// forced apply never conflicts over field ownership and carries no resourceVersion, so a 409
/// can only be a transient conflict inside the API server (or a proxy's), and sending the same
/// apply again is always safe: server-side apply is idempotent. Failing the whole reconcile
/// instead would throw away every other apply of the attempt.
pub const APPLY_CONFLICT_RETRIES: u32 = 3;

/// Sends `apply` again while it answers 409, at most [`APPLY_CONFLICT_RETRIES`] times.
pub async fn retry_conflicts<T, F, Fut>(mut apply: F) -> kube::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let mut pause = std::time::Duration::from_millis(100);
    for _ in 0..APPLY_CONFLICT_RETRIES {
        match apply().await {
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(message = %status.message, "apply answered 409: sending it again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            other => return other,
        }
    }
    apply().await
}

/// Splits an `apiVersion` into group and version (`v1` is the core group).
pub fn parse_api_version(api_version: &str) -> Option<(&str, &str)> {
    match api_version.split_once('/') {
        Some((group, version))
            if !group.is_empty() && !version.is_empty() && !version.contains('/') =>
        {
            Some((group, version))
        }
        None if !api_version.is_empty() => Some(("", api_version)),
        _ => None,
    }
}

/// A dynamic object as JSON with its `apiVersion` and `kind`, which the API server leaves off
/// the items of a list: code that dispatches on `kind` needs them back.
pub fn typed_value(object: &DynamicObject, resource: &ApiResource) -> Option<Value> {
    let mut value = serde_json::to_value(object).ok()?;
    let map = value.as_object_mut()?;
    map.insert("apiVersion".into(), resource.api_version.clone().into());
    map.insert("kind".into(), resource.kind.clone().into());
    Some(value)
}

/// Who an object is, for error messages and lookups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectKey {
    pub gvk: GroupVersionKind,
    pub api_version: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.gvk.kind, ns, self.name),
            None => write!(f, "{} {}", self.gvk.kind, self.name),
        }
    }
}

/// Builds the body of a server-side apply patch from a manifest: checks identity fields and
/// strips server-owned metadata and `status` (status is applied separately, on the
/// subresource, by whoever owns it).
pub fn apply_patch_body(manifest: &Value) -> Result<(ObjectKey, Value)> {
    let describe = || {
        let kind = manifest
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("<no kind>");
        let name = manifest
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("<no name>");
        format!("{kind} {name}")
    };
    let invalid = |field: &'static str, reason: &str| Error::InvalidObject {
        object: describe(),
        field,
        reason: reason.to_string(),
    };
    let object = manifest
        .as_object()
        .ok_or_else(|| invalid("<root>", "not a JSON/YAML mapping"))?;
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("apiVersion", "missing or not a string"))?;
    let (group, version) = parse_api_version(api_version)
        .ok_or_else(|| invalid("apiVersion", "expected GROUP/VERSION or VERSION"))?;
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| invalid("kind", "missing or empty"))?;
    let metadata = object
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("metadata", "missing or not a mapping"))?;
    let name = metadata
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            invalid(
                "metadata.name",
                "missing or empty (generateName cannot be applied)",
            )
        })?;
    let namespace = match metadata.get("namespace") {
        None | Some(Value::Null) => None,
        Some(Value::String(ns)) if ns.is_empty() => None,
        Some(Value::String(ns)) => Some(ns.clone()),
        Some(_) => return Err(invalid("metadata.namespace", "not a string")),
    };

    let mut body = manifest.clone();
    if let Some(obj) = body.as_object_mut() {
        obj.remove("status");
        if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
            for field in SERVER_OWNED_METADATA {
                meta.remove(*field);
            }
        }
    }
    let key = ObjectKey {
        gvk: GroupVersionKind::gvk(group, version, kind),
        api_version: api_version.to_string(),
        namespace,
        name: name.to_string(),
    };
    Ok((key, body))
}

/// Apply parameters: our field manager, and `force` to take over fields from other managers
/// (what a controller that owns an object must do; users' own changes to fields we do not set
/// are untouched).
///
/// Field validation is `Ignore`: server-side apply rejects a field the schema does not
/// declare whatever the directive (built-in kinds and custom resources alike), so `Warn` or
/// `Strict` would only add a second, strict YAML parse of every patch to look for duplicate
/// keys, which a body serialised from a JSON map cannot have. That parse was about 3 % of
/// kube-apiserver's CPU in the fleet benchmark.
pub fn apply_params(field_manager: &str, force: bool) -> PatchParams {
    let params = PatchParams::apply(field_manager).validation_ignore();
    if force { params.force() } else { params }
}

/// How a kind is served: its REST resource and whether it is namespaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedKind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

impl ResolvedKind {
    /// The API for objects of this kind through `client`: in `namespace` when the kind is
    /// namespaced and one is given, else across the cluster.
    pub fn api(&self, client: &Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &self.resource),
            _ => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// Where the cache learns about kinds it has not seen.
pub trait DiscoverySource: Send + Sync + Debug {
    /// `Ok(None)` when the API server does not serve the kind.
    fn lookup(
        &self,
        gvk: &GroupVersionKind,
    ) -> impl std::future::Future<Output = Result<Option<ResolvedKind>>> + Send;
}

/// Discovery against a live API server: one request for the kind's group-version.
#[derive(Clone)]
pub struct ApiDiscovery {
    client: Client,
}

impl Debug for ApiDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiDiscovery")
    }
}

impl ApiDiscovery {
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

impl DiscoverySource for ApiDiscovery {
    async fn lookup(&self, gvk: &GroupVersionKind) -> Result<Option<ResolvedKind>> {
        match kube::discovery::pinned_kind(&self.client, gvk).await {
            Ok((resource, caps)) => Ok(Some(ResolvedKind {
                resource,
                namespaced: matches!(caps.scope, Scope::Namespaced),
            })),
            // An unknown group-version is a 404; an unknown kind in a known group is reported
            // by kube as a discovery error. Both mean "not served (yet)".
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(kube::Error::Discovery(_)) => Ok(None),
            Err(e) => Err(Error::api(
                format!("discovery of {}/{} {}", gvk.group, gvk.version, gvk.kind),
                e,
            )),
        }
    }
}

/// A cache of resolved kinds in front of a [`DiscoverySource`]. Known kinds never cost a
/// request; an unknown kind is looked up every time it is asked for, so a CRD that appears
/// later is found without a restart.
#[derive(Debug)]
pub struct DiscoveryCache<S> {
    source: S,
    kinds: RwLock<HashMap<GroupVersionKind, ResolvedKind>>,
}

impl<S: DiscoverySource> DiscoveryCache<S> {
    pub fn new(source: S) -> Self {
        Self {
            source,
            kinds: RwLock::new(HashMap::new()),
        }
    }

    pub async fn resolve(&self, gvk: &GroupVersionKind) -> Result<ResolvedKind> {
        if let Some(kind) = self.kinds.read().await.get(gvk) {
            return Ok(kind.clone());
        }
        match self.source.lookup(gvk).await? {
            Some(kind) => {
                self.kinds.write().await.insert(gvk.clone(), kind.clone());
                Ok(kind)
            }
            None => Err(Error::UnknownKind {
                api_version: if gvk.group.is_empty() {
                    gvk.version.clone()
                } else {
                    format!("{}/{}", gvk.group, gvk.version)
                },
                kind: gvk.kind.clone(),
            }),
        }
    }

    /// Forgets a kind, e.g. after its CRD was deleted or changed scope.
    pub async fn forget(&self, gvk: &GroupVersionKind) {
        self.kinds.write().await.remove(gvk);
    }
}

/// Applies objects with server-side apply under one field manager.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    field_manager: String,
    discovery: Arc<DiscoveryCache<ApiDiscovery>>,
}

impl Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier")
            .field("field_manager", &self.field_manager)
            .finish()
    }
}

impl Applier {
    /// `field_manager` is the service name, e.g. `strata-layer-controller`.
    pub fn new(client: Client, field_manager: impl Into<String>) -> Self {
        Self {
            discovery: Arc::new(DiscoveryCache::new(ApiDiscovery::new(client.clone()))),
            client,
            field_manager: field_manager.into(),
        }
    }

    /// The same applier (field manager, discovery cache) sending its requests through
    /// `client` (e.g. one that impersonates a tenant's ServiceAccount).
    pub fn with_client(&self, client: Client) -> Self {
        Self {
            client,
            field_manager: self.field_manager.clone(),
            discovery: self.discovery.clone(),
        }
    }

    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    pub fn discovery(&self) -> &DiscoveryCache<ApiDiscovery> {
        &self.discovery
    }

    /// Applies a typed object; its namespace (if any) comes from its metadata.
    pub async fn apply<K>(&self, object: &K) -> Result<K>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    {
        let mut manifest = serde_json::to_value(object).map_err(|e| Error::InvalidObject {
            object: format!("{} {}", K::kind(&()), object.name_any()),
            field: "<root>",
            reason: e.to_string(),
        })?;
        // Typed objects serialise without apiVersion/kind when built by hand; SSA needs them.
        if let Some(obj) = manifest.as_object_mut() {
            obj.insert("apiVersion".into(), K::api_version(&()).into());
            obj.insert("kind".into(), K::kind(&()).into());
        }
        let (key, body) = apply_patch_body(&manifest)?;
        let api = self.api_for::<K>(key.namespace.as_deref());
        let params = apply_params(&self.field_manager, true);
        let patch = Patch::Apply(&body);
        let applied = retry_conflicts(|| api.patch(&key.name, &params, &patch))
            .await
            .map_err(|e| Error::api(format!("apply {key}"), e))?;
        Self::typed(applied, &key)
    }

    /// Applies the `status` of a typed object through the status subresource.
    pub async fn apply_status<K>(&self, object: &K, status: Value) -> Result<K>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug,
    {
        let name = object.name_any();
        let namespace = object.namespace();
        let body = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": { "name": name },
            "status": status,
        });
        let key = ObjectKey {
            gvk: GroupVersionKind::gvk(&K::group(&()), &K::version(&()), &K::kind(&())),
            api_version: K::api_version(&()).into_owned(),
            namespace: namespace.clone(),
            name: name.clone(),
        };
        let api = self.api_for::<K>(namespace.as_deref());
        let params = apply_params(&self.field_manager, true);
        let patch = Patch::Apply(&body);
        let applied = retry_conflicts(|| api.patch_status(&name, &params, &patch))
            .await
            .map_err(|e| Error::api(format!("apply status of {key}"), e))?;
        Self::typed(applied, &key)
    }

    /// A dynamic Api for a typed kind: works for both scopes without scope-specific bounds.
    fn api_for<K: Resource<DynamicType = ()>>(
        &self,
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        let resource = ApiResource::erase::<K>(&());
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    fn typed<K: DeserializeOwned>(object: DynamicObject, key: &ObjectKey) -> Result<K> {
        serde_json::to_value(object)
            .and_then(serde_json::from_value)
            .map_err(|e| Error::InvalidObject {
                object: key.to_string(),
                field: "<root>",
                reason: format!("server response does not decode: {e}"),
            })
    }

    /// Applies a manifest of any kind. A namespaced kind without a namespace goes to
    /// `default_namespace`; a namespace on a cluster-scoped kind is an error (silently
    /// dropping it would hide a mistake in the manifest).
    pub async fn apply_dynamic(
        &self,
        manifest: &Value,
        default_namespace: Option<&str>,
    ) -> Result<DynamicObject> {
        self.patch_dynamic(manifest, default_namespace, false).await
    }

    /// [`Applier::apply_dynamic`] as a server-side dry run: what the object would look like,
    /// nothing written.
    pub async fn dry_run_dynamic(
        &self,
        manifest: &Value,
        default_namespace: Option<&str>,
    ) -> Result<DynamicObject> {
        self.patch_dynamic(manifest, default_namespace, true).await
    }

    async fn patch_dynamic(
        &self,
        manifest: &Value,
        default_namespace: Option<&str>,
        dry_run: bool,
    ) -> Result<DynamicObject> {
        let (mut key, mut body) = apply_patch_body(manifest)?;
        let resolved = self.discovery.resolve(&key.gvk).await?;
        let api: Api<DynamicObject> = match (resolved.namespaced, &key.namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &resolved.resource),
            (true, None) => {
                let ns = default_namespace.ok_or_else(|| Error::InvalidObject {
                    object: key.to_string(),
                    field: "metadata.namespace",
                    reason: "namespaced kind without a namespace".into(),
                })?;
                key.namespace = Some(ns.to_string());
                if let Some(Value::Object(meta)) = body.get_mut("metadata") {
                    meta.insert("namespace".into(), ns.into());
                }
                Api::namespaced_with(self.client.clone(), ns, &resolved.resource)
            }
            (false, Some(_)) => {
                return Err(Error::InvalidObject {
                    object: key.to_string(),
                    field: "metadata.namespace",
                    reason: format!(
                        "{} is cluster-scoped and cannot have a namespace",
                        key.gvk.kind
                    ),
                });
            }
            (false, None) => Api::all_with(self.client.clone(), &resolved.resource),
        };
        let mut params = apply_params(&self.field_manager, true);
        if dry_run {
            params = params.dry_run();
        }
        let patch = Patch::Apply(&body);
        retry_conflicts(|| api.patch(&key.name, &params, &patch))
            .await
            .map_err(|e| Error::api(format!("apply {key}"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn api_error(code: u16) -> kube::Error {
        let mut status = kube::core::Status::failure("injected", "Conflict");
        status.code = code;
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn applies_skip_the_servers_duplicate_key_parse() {
        for force in [true, false] {
            let params = apply_params("strata-test", force);
            assert!(matches!(
                params.field_validation,
                Some(kube::api::ValidationDirective::Ignore)
            ));
            assert_eq!(params.force, force);
            assert_eq!(params.field_manager.as_deref(), Some("strata-test"));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflicting_apply_is_sent_again_a_few_times() {
        // Two 409s, then success: three sends, 100 + 200 ms apart.
        let sends = AtomicUsize::new(0);
        let started = tokio::time::Instant::now();
        let result = retry_conflicts(|| async {
            match sends.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(api_error(409)),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(result.unwrap(), 2);
        assert_eq!(started.elapsed(), std::time::Duration::from_millis(300));
        // Conflicting for good: the first send and APPLY_CONFLICT_RETRIES more, then the 409.
        let sends = AtomicUsize::new(0);
        let result: kube::Result<()> = retry_conflicts(|| async {
            sends.fetch_add(1, Ordering::SeqCst);
            Err(api_error(409))
        })
        .await;
        assert!(matches!(result, Err(kube::Error::Api(s)) if s.code == 409));
        assert_eq!(
            sends.load(Ordering::SeqCst),
            APPLY_CONFLICT_RETRIES as usize + 1
        );
        // Any other failure is returned at once.
        let sends = AtomicUsize::new(0);
        let result: kube::Result<()> = retry_conflicts(|| async {
            sends.fetch_add(1, Ordering::SeqCst);
            Err(api_error(422))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(sends.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn api_versions() {
        assert_eq!(parse_api_version("v1"), Some(("", "v1")));
        assert_eq!(parse_api_version("apps/v1"), Some(("apps", "v1")));
        assert_eq!(
            parse_api_version("strata.dev/v1alpha1"),
            Some(("strata.dev", "v1alpha1"))
        );
        assert_eq!(parse_api_version(""), None);
        assert_eq!(parse_api_version("apps/"), None);
        assert_eq!(parse_api_version("/v1"), None);
        assert_eq!(parse_api_version("a/b/c"), None);
    }

    #[test]
    fn patch_body_strips_server_fields_and_status() {
        let manifest = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "shop",
                "resourceVersion": "42", "uid": "abc", "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [],
                "labels": {"app": "web"}
            },
            "spec": {"replicas": 2},
            "status": {"readyReplicas": 2}
        });
        let (key, body) = apply_patch_body(&manifest).unwrap();
        assert_eq!(key.gvk, GroupVersionKind::gvk("apps", "v1", "Deployment"));
        assert_eq!(key.namespace.as_deref(), Some("shop"));
        assert_eq!(key.to_string(), "Deployment shop/web");
        assert_eq!(
            body,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
                "spec": {"replicas": 2}
            })
        );
    }

    #[test]
    fn patch_body_errors_name_object_and_field() {
        let cases = [
            (json!([1, 2]), "<root>"),
            (
                json!({"kind": "ConfigMap", "metadata": {"name": "a"}}),
                "apiVersion",
            ),
            (
                json!({"apiVersion": "x/y/z", "kind": "ConfigMap", "metadata": {"name": "a"}}),
                "apiVersion",
            ),
            (
                json!({"apiVersion": "v1", "metadata": {"name": "a"}}),
                "kind",
            ),
            (json!({"apiVersion": "v1", "kind": "ConfigMap"}), "metadata"),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "a-"}}),
                "metadata.name",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": 7}}),
                "metadata.namespace",
            ),
        ];
        for (manifest, want_field) in cases {
            match apply_patch_body(&manifest) {
                Err(Error::InvalidObject { field, .. }) => {
                    assert_eq!(field, want_field, "{manifest}")
                }
                other => panic!("{manifest}: expected invalid {want_field}, got {other:?}"),
            }
        }
        let err =
            apply_patch_body(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}))
                .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("ConfigMap <no name>: field metadata.name"),
            "{err}"
        );
    }

    #[test]
    fn typed_values_get_their_type_back() {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("strata.dev", "v1alpha1", "AddonsLayer"),
            "addonslayers",
        );
        // What a list item looks like: no apiVersion/kind.
        let item: DynamicObject =
            serde_json::from_value(json!({"metadata": {"name": "base"}, "spec": {"version": "1"}}))
                .unwrap();
        let value = typed_value(&item, &resource).unwrap();
        assert_eq!(
            (value["apiVersion"].as_str(), value["kind"].as_str()),
            (Some("strata.dev/v1alpha1"), Some("AddonsLayer"))
        );
        assert_eq!(value["spec"]["version"], "1");
    }

    #[test]
    fn params_carry_the_field_manager() {
        let params = apply_params("strata-layer-controller", true);
        assert_eq!(
            params.field_manager.as_deref(),
            Some("strata-layer-controller")
        );
        assert!(params.force);
        assert!(!apply_params("x", false).force);
    }

    #[derive(Debug, Default)]
    struct FakeDiscovery {
        calls: AtomicUsize,
        crd_installed: std::sync::atomic::AtomicBool,
    }

    impl DiscoverySource for FakeDiscovery {
        async fn lookup(&self, gvk: &GroupVersionKind) -> Result<Option<ResolvedKind>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let served = match gvk.kind.as_str() {
                "ConfigMap" => Some(true),
                "Namespace" => Some(false),
                "AddonsLayer" if self.crd_installed.load(Ordering::SeqCst) => Some(false),
                _ => None,
            };
            Ok(served.map(|namespaced| ResolvedKind {
                resource: ApiResource::from_gvk(gvk),
                namespaced,
            }))
        }
    }

    #[tokio::test]
    async fn discovery_cache_hits_and_refreshes_unknown_kinds() {
        let cache = DiscoveryCache::new(FakeDiscovery::default());
        let cm = GroupVersionKind::gvk("", "v1", "ConfigMap");
        let ns = GroupVersionKind::gvk("", "v1", "Namespace");
        let layer = GroupVersionKind::gvk("strata.dev", "v1alpha1", "AddonsLayer");

        assert!(cache.resolve(&cm).await.unwrap().namespaced);
        assert!(cache.resolve(&cm).await.unwrap().namespaced);
        assert!(!cache.resolve(&ns).await.unwrap().namespaced);
        assert_eq!(
            cache.source.calls.load(Ordering::SeqCst),
            2,
            "second ConfigMap lookup is cached"
        );

        let err = cache.resolve(&layer).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown kind strata.dev/v1alpha1/AddonsLayer: the api server does not serve it"
        );
        // The CRD arrives: the next resolve asks again and finds it.
        cache.source.crd_installed.store(true, Ordering::SeqCst);
        let resolved = cache.resolve(&layer).await.unwrap();
        assert_eq!(resolved.resource.plural, "addonslayers");
        assert_eq!(cache.source.calls.load(Ordering::SeqCst), 4);

        cache.forget(&cm).await;
        cache.resolve(&cm).await.unwrap();
        assert_eq!(
            cache.source.calls.load(Ordering::SeqCst),
            5,
            "forgotten kinds are looked up again"
        );
    }
}
