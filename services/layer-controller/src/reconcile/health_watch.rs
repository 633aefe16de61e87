//! Health wake-ups: a layer waiting for its objects to become Current is re-checked when one
//! of them changes, not only at the next `--health-poll`. One metadata-only watch per kind
//! that some layer waits on, shared by every layer and started on first use, carries the
//! changes; the layers keep only a long safety-net poll while it is live.
//!
//! Why: polling every 2 s costs each applying layer a GET per object per poll whether
//! anything changed or not (at 1,000 layers waiting for a slow kube-controller-manager,
//! ~116 GETs per layer), and it adds up to a poll interval to every deploy (a 100-layer fleet
//! whose floor is 4.5 s finished in 6–7 s). A kind this replica cannot watch (no list/watch
//! right) or whose watch is not listed yet leaves its layers polling as before.
//!
//! The same registrations spare a waiting layer's re-check its reads: the objects that were
//! already Current are registered too (their changes wake the layer as well), and one whose
//! kind's watch stayed live and showed no other version since it was judged is known
//! unchanged, so it is not read again. Only the objects still progressing, or changed, are.
//!
//! Workloads (Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs) walk through several
//! status writes on their way to Current. Their kinds are watched as full objects, and a layer
//! judging them by kstatus' own rules has each event judged by the watch: a change that leaves
//! its verdict (status, reason, message) as the layer last judged it wakes nobody, and the
//! re-check of one that changed it takes the watch's verdict instead of reading the object
//! (as does a re-check with no event behind it, while the watch has shown no other version).
//! A deletion, a relist or a watch that is not live makes it read.
//!
//! The same watches spare a new attempt (and a Deployed layer's re-apply for the sync period,
//! see `plan::resync_sends_only_changed`) the applies that would change nothing: each object
//! this controller applies to a watched kind is remembered with the version its apply left it
//! at and a fingerprint of what was applied (manifest, field manager, acting user). While the
//! watch stays live and shows no other version, applying the same again is a no-op by
//! definition, so the attempt takes the object as it stands (see
//! [`HealthWakeups::unchanged_since_applied`]). Any other version seen, a relist, or a watch
//! that is not live forgets that and the object is applied. At 1,000 layers whose upgrade
//! changes only their Deployments, this removes three of every layer's four impersonated
//! applies, which kube-apiserver otherwise serves in full to find nothing changed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef as LayerKey;
use kube::runtime::watcher;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::crd::{AddonsLayer, InventoryEntry};
use crate::lock;

/// How long a change is remembered: one that arrived between a layer's re-check and its
/// registration still wakes it (see [`HealthWakeups::wait_for`]).
const RECENT: Duration = Duration::from_secs(10);

/// How an object stands for a layer: its status, reason and message, as in an inventory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verdict {
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Verdict {
    /// kstatus' own verdict on `object` (no pods, no policy: what a layer with the default
    /// rules concludes from the same object).
    fn of(object: &serde_json::Value) -> Self {
        let (status, reason, message) = crate::plan::inventory_health(
            object,
            &[],
            jiff::Timestamp::now(),
            &core_status::policy::Rules::default(),
        );
        Self {
            status: status.to_string(),
            reason,
            message,
        }
    }

    /// How `entry` says the layer judged its object.
    pub(super) fn of_entry(entry: &InventoryEntry) -> Self {
        Self {
            status: entry.status.clone(),
            reason: entry.reason.clone(),
            message: entry.message.clone(),
        }
    }

    /// `entry` judged so.
    pub(super) fn applied_to(self, entry: &InventoryEntry) -> InventoryEntry {
        InventoryEntry {
            status: self.status,
            reason: self.reason,
            message: self.message,
            ..entry.clone()
        }
    }
}

/// An object of one kind: its namespace (empty when cluster-scoped) and name, hashed (see
/// [`object_key`]).
type ObjectKey = u64;

/// The resource version each object had when a layer judged it, by apiVersion, kind,
/// namespace and name, as in its inventory: a change the layer has already seen (its own
/// apply, say) wakes nobody.
pub(super) type JudgedVersions = HashMap<(String, String, Option<String>, String), String>;

/// The key of `entry` in [`JudgedVersions`].
pub(super) fn judged_key(entry: &InventoryEntry) -> (String, String, Option<String>, String) {
    (
        entry.api_version.clone(),
        entry.kind.clone(),
        entry.namespace.clone(),
        entry.name.clone(),
    )
}

/// How a layer judged one object: at which version, whether Current, and whether the watch
/// has shown it at another version since (or may have missed that: a relist).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Judged {
    version: Option<String>,
    current: bool,
    moved: bool,
    /// The layer's verdict, when it judges this object from the watch's events (see the
    /// module's documentation); the watch keeps it up to date with `version`.
    verdict: Option<Verdict>,
    /// An event changed the verdict and woke the layer: its re-check may take the verdict.
    woke: bool,
}

impl Judged {
    /// The watch showed the object at another `version`, judged `seen` (`None`: a deletion, or
    /// a metadata-only watch); true when the layer must look at it again. A layer judging from
    /// events is then judged at that version, and looks again only if the verdict changed.
    fn saw(&mut self, version: &str, seen: Option<&Verdict>) -> bool {
        if let (Some(mine), Some(seen)) = (&self.verdict, seen) {
            self.version = Some(version.to_string());
            if mine == seen {
                return false;
            }
            self.verdict = Some(seen.clone());
            self.woke = true;
        } else {
            self.verdict = None;
            self.woke = false;
        }
        self.moved = true;
        true
    }
}

/// The layers waiting on one object, by name, each with how it judged it: almost always one
/// layer, so a sorted vector grown one entry at a time. (A `BTreeMap` allocates a node of
/// eleven entries for one, and a vector's first push room for four: in a 3,000-layer fleet
/// the nodes were 15 MB of a 71 MB heap peak, then the room for four 4.8 MB of 42 MB.)
#[derive(Debug, Default)]
struct Waiters(Vec<(String, Judged)>);

impl Waiters {
    fn position(&self, layer: &str) -> Result<usize, usize> {
        self.0
            .binary_search_by(|(name, _)| name.as_str().cmp(layer))
    }

    fn get(&self, layer: &str) -> Option<&Judged> {
        let i = self.position(layer).ok()?;
        Some(&self.0[i].1)
    }

    fn insert(&mut self, layer: String, judged: Judged) {
        match self.position(&layer) {
            Ok(i) => self.0[i].1 = judged,
            Err(i) => {
                // Room for exactly one more: a first push would make room for four.
                self.0.reserve_exact(1);
                self.0.insert(i, (layer, judged));
            }
        }
    }

    fn remove(&mut self, layer: &str) {
        if let Ok(i) = self.position(layer) {
            self.0.remove(i);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each layer (in name order) with how it judged the object.
    fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Judged)> {
        self.0.iter_mut().map(|(layer, judged)| (&*layer, judged))
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Judged> {
        self.0.iter_mut().map(|(_, judged)| judged)
    }
}

/// What one kind's watch knows: which layers wait on which objects, and which objects changed
/// lately. Pure bookkeeping, so it is tested without a cluster.
#[derive(Debug, Default)]
struct KindState {
    /// Object → the layers waiting on it, each with how it judged it.
    waiting: HashMap<ObjectKey, Waiters>,
    /// Object → when its last change was seen, its version then and the watch's verdict.
    recent: HashMap<ObjectKey, (Instant, String, Option<Verdict>)>,
    pruned: Option<Instant>,
    /// Object → what this controller last applied to it, while the watch has shown it at no
    /// other version since.
    applied: HashMap<ObjectKey, Applied>,
}

/// What this controller applied to an object: the version the apply left it at, the
/// fingerprint of what it applied, and kstatus' verdict on the object the apply returned (see
/// [`HealthWakeups::unchanged_since_applied`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Applied {
    version: String,
    fingerprint: u64,
    verdict: Verdict,
}

impl KindState {
    /// Records a change of `object` to `version`, seen `at`; returns the layers waiting on it
    /// that judged another version.
    #[cfg(test)]
    fn changed(&mut self, object: ObjectKey, version: String, at: Instant) -> Vec<String> {
        self.changed_to(object, version, None, at)
    }

    /// [`KindState::changed`] with the watch's verdict on the object at `version` (`None`: a
    /// deletion, or a metadata-only watch). A layer judging the object from events whose
    /// verdict it leaves as it was is not woken; the others are.
    fn changed_to(
        &mut self,
        object: ObjectKey,
        version: String,
        verdict: Option<Verdict>,
        at: Instant,
    ) -> Vec<String> {
        if self
            .pruned
            .is_none_or(|p| at.saturating_duration_since(p) >= RECENT)
        {
            self.recent
                .retain(|_, (seen, _, _)| at.saturating_duration_since(*seen) < RECENT);
            self.pruned = Some(at);
        }
        // Changed by someone else (or deleted): the next apply is not a no-op.
        if self
            .applied
            .get(&object)
            .is_some_and(|applied| applied.version != version)
        {
            self.applied.remove(&object);
        }
        let layers = self
            .waiting
            .get_mut(&object)
            .map(|layers| {
                layers
                    .iter_mut()
                    .filter(|(_, judged)| judged.version.as_deref() != Some(version.as_str()))
                    .filter_map(|(layer, judged)| {
                        judged
                            .saw(&version, verdict.as_ref())
                            .then(|| layer.clone())
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.recent.insert(object, (at, version, verdict));
        layers
    }

    /// `layer` waits on `object`, which it judged at `version` (Current or not); true when
    /// the object changed to another version at or after `since` (a change the layer's
    /// re-check may have missed).
    #[cfg(test)]
    fn wait(
        &mut self,
        layer: &str,
        object: ObjectKey,
        version: Option<String>,
        current: bool,
        since: Instant,
    ) -> bool {
        self.wait_judging(layer, object, version, current, None, since)
    }

    /// [`KindState::wait`]; with `verdict`, the layer judges the object from the watch's
    /// events from now on.
    fn wait_judging(
        &mut self,
        layer: &str,
        object: ObjectKey,
        version: Option<String>,
        current: bool,
        verdict: Option<Verdict>,
        since: Instant,
    ) -> bool {
        let mut judged = Judged {
            version,
            current,
            moved: false,
            verdict,
            woke: false,
        };
        // Changed since the re-check read it: look again, unless the watch judged the change
        // and it leaves the layer's verdict as it was.
        let changed = self
            .recent
            .get(&object)
            .filter(|(at, seen, _)| *at >= since && judged.version.as_deref() != Some(seen))
            .is_some_and(|(_, seen, theirs)| judged.saw(seen, theirs.as_ref()));
        self.waiting
            .entry(object)
            .or_default()
            .insert(layer.to_string(), judged);
        changed
    }

    /// The watch is listing the kind afresh: an object deleted while it was down shows in no
    /// event, so no registered object is known unchanged any more.
    fn relisting(&mut self) {
        for judged in self
            .waiting
            .values_mut()
            .flat_map(|layers| layers.values_mut())
        {
            judged.moved = true;
            judged.woke = false;
        }
        self.applied.clear();
    }

    /// This controller applied `applied.fingerprint` to `object`, which the apply left at
    /// `applied.version`. Not remembered when the watch showed the object at another version
    /// after `since` (when the apply began): which of the two is newer is unknown, so the next
    /// apply must be sent.
    fn applied(&mut self, object: ObjectKey, applied: Applied, since: Instant) {
        let moved = self
            .recent
            .get(&object)
            .is_some_and(|(at, seen, _)| *at >= since && *seen != applied.version);
        if moved {
            self.applied.remove(&object);
        } else {
            self.applied.insert(object, applied);
        }
    }

    /// The version `object` stands at and the verdict on it, when that is the version this
    /// controller's apply of `fingerprint` left it at and the watch has shown no other since.
    fn unchanged_since_applied(&self, object: &ObjectKey, fingerprint: u64) -> Option<&Applied> {
        self.applied
            .get(object)
            .filter(|applied| applied.fingerprint == fingerprint)
    }

    /// The watch's verdict on `object` and its version, when an event changed what `layer`
    /// judged and woke it.
    fn woken_by(&self, layer: &str, object: &ObjectKey) -> Option<(String, Verdict)> {
        let judged = self.waiting.get(object)?.get(layer)?;
        judged
            .woke
            .then(|| Some((judged.version.clone()?, judged.verdict.clone()?)))
            .flatten()
    }

    /// The version at which `layer` judged `object` Current, or judges it from the watch's
    /// events (at whatever verdict), while the watch has shown it at no other version since
    /// (or only at versions whose verdict was the same).
    fn unchanged(&self, layer: &str, object: &ObjectKey) -> Option<&str> {
        let judged = self.waiting.get(object)?.get(layer)?;
        ((judged.current || judged.verdict.is_some()) && !judged.moved)
            .then_some(judged.version.as_deref())
            .flatten()
    }

    /// What `layer`'s re-check may take for `object` without reading it: the verdict of the
    /// event that woke it, else the version it judged unchanged since (with its verdict when it
    /// judges from events).
    fn known(&self, layer: &str, object: &ObjectKey) -> Option<(String, Option<Verdict>)> {
        if let Some((version, verdict)) = self.woken_by(layer, object) {
            return Some((version, Some(verdict)));
        }
        let version = self.unchanged(layer, object)?.to_string();
        let verdict = self.waiting.get(object)?.get(layer)?.verdict.clone();
        Some((version, verdict))
    }

    fn stop_waiting(&mut self, layer: &str, object: &ObjectKey) {
        if let Some(layers) = self.waiting.get_mut(object) {
            layers.remove(layer);
            if layers.is_empty() {
                self.waiting.remove(object);
            }
        }
    }
}

/// One kind's watch.
#[derive(Debug, Default)]
struct KindWatch {
    /// Listed and watching: a change of its objects will be seen.
    live: AtomicBool,
    /// A full-object watch (a workload kind), whose events carry a verdict.
    judges: bool,
    state: Mutex<KindState>,
}

/// The objects a layer waits on, with their kinds' watches.
type Registered = Vec<(Arc<KindWatch>, ObjectKey)>;

/// How a layer waiting on its objects will hear of their changes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Wakeup {
    /// Every kind is watched: the layer is woken by a change (the poll is a safety net).
    Watched,
    /// An object changed since the layer's re-check began: look again now.
    Changed,
    /// Some kind is not watched (yet): poll.
    Polled,
}

/// An object of a waiting layer: one it waits on, or one already Current (registered so that
/// its change wakes the layer too, and so that its re-check may skip reading it).
pub(super) struct Awaited {
    pub resource: ApiResource,
    pub namespace: Option<String>,
    pub name: String,
    /// Its resource version when the layer judged it.
    pub version: Option<String>,
    /// Already Current: the layer does not wait on it (its kind's watch need not be live).
    pub current: bool,
    /// How the layer judged it, when it may judge it from the watch's events: a workload,
    /// judged by kstatus' own rules (see the module's documentation).
    pub verdict: Option<Verdict>,
}

/// The kind watches and who waits on what (see the module's documentation).
pub(super) struct HealthWakeups {
    client: kube::Client,
    wake: mpsc::Sender<LayerKey<AddonsLayer>>,
    shutdown: CancellationToken,
    /// By `group/version/plural`.
    kinds: Mutex<HashMap<String, Arc<KindWatch>>>,
    /// What each waiting layer registered, to undo it.
    layers: Mutex<HashMap<String, Registered>>,
}

impl HealthWakeups {
    pub(super) fn new(
        client: kube::Client,
        wake: mpsc::Sender<LayerKey<AddonsLayer>>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            client,
            wake,
            shutdown,
            kinds: Mutex::default(),
            layers: Mutex::default(),
        }
    }

    /// `layer` waits on `objects` (replacing what it waited on before); `since` is when its
    /// re-check began, so a change that arrived before this call but after that is not lost.
    /// Whether the layer is woken or must poll is decided by the objects it waits on; those
    /// already Current only add wake-ups.
    pub(super) fn wait_for(&self, layer: &str, objects: &[Awaited], since: Instant) -> Wakeup {
        self.forget(layer);
        let mut registered = Vec::with_capacity(objects.len());
        let (mut changed, mut live) = (false, true);
        for object in objects {
            let kind = self.kind(&object.resource);
            let key = object_key(object.namespace.as_deref(), &object.name);
            // Only a full-object watch judges its events.
            let verdict = object.verdict.clone().filter(|_| kind.judges);
            changed |= lock(&kind.state).wait_judging(
                layer,
                key,
                object.version.clone(),
                object.current,
                verdict,
                since,
            );
            live &= object.current || kind.live.load(Ordering::Acquire);
            registered.push((kind, key));
        }
        if !registered.is_empty() {
            lock(&self.layers).insert(layer.to_string(), registered);
        }
        match (changed, live) {
            (true, _) => Wakeup::Changed,
            (false, true) => Wakeup::Watched,
            (false, false) => Wakeup::Polled,
        }
    }

    /// What `layer`'s re-check may take for an object without reading it, its kind's watch
    /// live: the verdict of an event that changed what the layer had judged and woke it, else
    /// the version at which it judged the object Current (or judged it at all, for one it
    /// judges from events, with that verdict) while no other version was shown since (nor a
    /// relist, which could hide a deletion). `None`: read it.
    pub(super) fn known(
        &self,
        layer: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<(String, Option<Verdict>)> {
        let kind = self.live(resource)?;
        lock(&kind.state).known(layer, &object_key(namespace, name))
    }

    /// This controller applied `fingerprint` to an object, which the apply left at `version`,
    /// judged `verdict` by kstatus' rules; `since` is when the apply began. Remembered only for
    /// a kind already watched: this starts no watch.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_applied(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        version: String,
        fingerprint: u64,
        verdict: Verdict,
        since: Instant,
    ) {
        let Some(kind) = self.watched(resource) else {
            return;
        };
        let applied = Applied {
            version,
            fingerprint,
            verdict,
        };
        lock(&kind.state).applied(object_key(namespace, name), applied, since);
    }

    /// The version an object stands at and kstatus' verdict on it, when applying `fingerprint`
    /// to it again would change nothing: this controller's last apply to it was the same
    /// fingerprint and left it at that version (judged so), and its kind's watch, live, has
    /// shown no other version since (nor relisted). `None`: apply it.
    pub(super) fn unchanged_since_applied(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        fingerprint: u64,
    ) -> Option<(String, Verdict)> {
        let kind = self.live(resource)?;
        lock(&kind.state)
            .unchanged_since_applied(&object_key(namespace, name), fingerprint)
            .map(|applied| (applied.version.clone(), applied.verdict.clone()))
    }

    /// The watch of `resource`'s kind, if started (this starts none).
    fn watched(&self, resource: &ApiResource) -> Option<Arc<KindWatch>> {
        lock(&self.kinds).get(&kind_id(resource)).cloned()
    }

    /// [`HealthWakeups::watched`], while listed and watching: what it has not shown did not
    /// happen.
    fn live(&self, resource: &ApiResource) -> Option<Arc<KindWatch>> {
        self.watched(resource)
            .filter(|kind| kind.live.load(Ordering::Acquire))
    }

    /// `layer` waits on nothing (it is Deployed, Failed, deleted or gone to another shard).
    pub(super) fn forget(&self, layer: &str) {
        let Some(registered) = lock(&self.layers).remove(layer) else {
            return;
        };
        for (kind, key) in registered {
            lock(&kind.state).stop_waiting(layer, &key);
        }
    }

    /// The watch of `resource`'s kind, started on first use.
    fn kind(&self, resource: &ApiResource) -> Arc<KindWatch> {
        let id = kind_id(resource);
        let mut kinds = lock(&self.kinds);
        if let Some(kind) = kinds.get(&id) {
            return kind.clone();
        }
        let judges = core_status::workload::is_workload(&resource.api_version, &resource.kind);
        let kind = Arc::new(KindWatch {
            judges,
            ..KindWatch::default()
        });
        kinds.insert(id, kind.clone());
        let (wake, shutdown) = (self.wake.clone(), self.shutdown.clone());
        let config = watcher::Config::default();
        if judges {
            // Full objects, each event judged by kstatus' rules.
            let events = watcher(Api::all_with(self.client.clone(), resource), config);
            let resource = resource.clone();
            tokio::spawn(watch_kind(
                events,
                kind.clone(),
                wake,
                shutdown,
                move |o, deleted| judged(o, deleted, &resource),
            ));
        } else {
            // Metadata only: a change of status moves the resource version, which is all a
            // wake-up needs; the layer's re-check reads the object itself.
            let events = watcher(Api::all_with(self.client.clone(), resource), config);
            let metadata = |o: PartialObjectMeta<DynamicObject>, _| (o.metadata, None);
            tokio::spawn(watch_kind(events, kind.clone(), wake, shutdown, metadata));
        }
        kind
    }
}

/// One kind's watch events, backed off (`watch_backoff`, which drops a relist's `Init`); the
/// start of every (re)list first forgets which objects were known unchanged: an object deleted
/// while the watch was down shows in none of the relist's events.
fn kind_events<S, K>(
    events: S,
    kind: Arc<KindWatch>,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
    K: Send,
{
    core_k8s::controller::watch_backoff(events.inspect(move |event| {
        if matches!(event, Ok(watcher::Event::Init)) {
            lock(&kind.state).relisting();
        }
    }))
}

/// The key of an object among its kind's. A number, not the two strings: every object this
/// controller applied stays in its kind's `applied` map (40,000 at 10,000 layers). Two objects
/// of a kind sharing one (about one chance in 10^10 at that size) could wake each other's
/// layers; an apply is skipped only when its fingerprint, which covers the whole manifest
/// (name included), matches too.
fn object_key(namespace: Option<&str>, name: &str) -> ObjectKey {
    core_k8s::hashing::hash64(&(namespace.unwrap_or_default(), name))
}

/// A kind's key among the watches: `group/version/plural`.
fn kind_id(resource: &ApiResource) -> String {
    format!("{}/{}", resource.api_version, resource.plural)
}

/// A workload watch's object and the verdict on it (none for a deletion). The items of a
/// LIST (a relist's events) come without apiVersion and kind, and kstatus' rules for a kind
/// need them: without, a Deployment would be judged as an unknown kind, Current at once.
fn judged(
    mut object: DynamicObject,
    deleted: bool,
    resource: &ApiResource,
) -> (kube::api::ObjectMeta, Option<Verdict>) {
    object.types = Some(kube::api::TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    });
    let verdict = (!deleted)
        .then(|| serde_json::to_value(&object).ok())
        .flatten()
        .map(|value| Verdict::of(&value));
    (object.metadata, verdict)
}

/// Forwards the changes of one kind's objects to the layers waiting on them until shutdown:
/// `judge` turns an event's object (and whether it was deleted) into its metadata and the
/// watch's verdict.
async fn watch_kind<S, K, J>(
    events: S,
    kind: Arc<KindWatch>,
    wake: mpsc::Sender<LayerKey<AddonsLayer>>,
    shutdown: CancellationToken,
    judge: J,
) where
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
    K: Send,
    J: Fn(K, bool) -> (kube::api::ObjectMeta, Option<Verdict>),
{
    let events = std::pin::pin!(kind_events(events, kind.clone()));
    let forward = events.for_each(|event| {
        let (object, deleted) = match event {
            // A (re)list: objects changed while the watch was down are in it.
            Ok(watcher::Event::InitApply(o)) => (Some(o), false),
            // After an error the watch resumes from the last version it saw (a relist
            // starts with `Init` instead): an event means nothing was missed.
            Ok(watcher::Event::Apply(o)) => {
                kind.live.store(true, Ordering::Release);
                (Some(o), false)
            }
            Ok(watcher::Event::Delete(o)) => {
                kind.live.store(true, Ordering::Release);
                (Some(o), true)
            }
            Ok(watcher::Event::InitDone) => {
                kind.live.store(true, Ordering::Release);
                (None, false)
            }
            // Seen by `kind_events` (the backoff drops it).
            Ok(watcher::Event::Init) => (None, false),
            Err(e) => {
                // Until it is listed again its layers poll (no list/watch right, say).
                kind.live.store(false, Ordering::Release);
                tracing::debug!(error = %e, "health watch failed; layers waiting on this kind poll");
                (None, false)
            }
        };
        let change = object.map(|object| judge(object, deleted));
        let (kind, wake) = (kind.clone(), wake.clone());
        async move {
            let Some((metadata, verdict)) = change else {
                return;
            };
            let key = object_key(
                metadata.namespace.as_deref(),
                metadata.name.as_deref().unwrap_or_default(),
            );
            let version = metadata.resource_version.unwrap_or_default();
            let layers = lock(&kind.state).changed_to(key, version, verdict, Instant::now());
            for layer in layers {
                let _ = wake.send(LayerKey::new(&layer)).await;
            }
        }
    });
    tokio::select! {
        () = forward => {}
        () = shutdown.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a kind's metadata-only watch yields.
    type MetaEvent = watcher::Result<watcher::Event<PartialObjectMeta<DynamicObject>>>;

    fn object(name: &str) -> ObjectKey {
        object_key(Some("apps"), name)
    }

    fn v(version: &str) -> Option<String> {
        Some(version.to_string())
    }

    #[test]
    fn a_change_wakes_exactly_the_layers_waiting_on_that_object() {
        let mut state = KindState::default();
        let start = Instant::now();
        assert!(!state.wait("a", object("web"), v("1"), false, start));
        assert!(!state.wait("b", object("web"), v("1"), false, start));
        assert!(!state.wait("c", object("db"), None, false, start));
        let at = start + Duration::from_millis(10);
        assert_eq!(state.changed(object("web"), "2".into(), at), ["a", "b"]);
        assert_eq!(state.changed(object("db"), "7".into(), at), ["c"]);
        assert!(state.changed(object("other"), "3".into(), at).is_empty());
        // In another namespace it is another object.
        let prod = object_key(Some("prod"), "web");
        assert!(state.changed(prod, "4".into(), at).is_empty());
        state.stop_waiting("a", &object("web"));
        assert_eq!(state.changed(object("web"), "5".into(), at), ["b"]);
        state.stop_waiting("b", &object("web"));
        assert!(state.changed(object("web"), "6".into(), at).is_empty());
        assert!(!state.waiting.contains_key(&object("web")));
    }

    #[test]
    fn a_version_the_layer_already_judged_wakes_nobody() {
        let mut state = KindState::default();
        let start = Instant::now();
        // The event of the layer's own apply, arriving after it registered.
        assert!(!state.wait("a", object("web"), v("10"), false, start));
        assert!(
            state
                .changed(object("web"), "10".into(), start + Duration::from_millis(1))
                .is_empty()
        );
        assert_eq!(
            state.changed(object("web"), "11".into(), start + Duration::from_millis(2)),
            ["a"]
        );
    }

    #[test]
    fn a_change_between_the_recheck_and_the_registration_is_not_lost() {
        let mut state = KindState::default();
        let recheck = Instant::now();
        // Seen before the re-check began: the re-check read it.
        state.changed(
            object("old"),
            "1".into(),
            recheck - Duration::from_millis(1),
        );
        assert!(!state.wait("a", object("old"), v("1"), false, recheck));
        // Seen after the re-check began, at the version the re-check read: nothing new.
        state.changed(
            object("same"),
            "4".into(),
            recheck + Duration::from_millis(2),
        );
        assert!(!state.wait("a", object("same"), v("4"), false, recheck));
        // Seen after the re-check began, at another version, before the layer registered:
        // it must look again.
        state.changed(
            object("web"),
            "9".into(),
            recheck + Duration::from_millis(5),
        );
        assert!(state.wait("a", object("web"), v("8"), false, recheck));
        // Forgotten once older than RECENT (pruned on the next change).
        let later = recheck + RECENT + Duration::from_secs(1);
        state.changed(object("x"), "2".into(), later);
        assert!(!state.recent.contains_key(&object("web")));
    }

    #[test]
    fn an_object_judged_current_is_unchanged_until_the_watch_shows_another_version() {
        let mut state = KindState::default();
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        assert!(!state.wait("a", object("sa"), v("5"), true, start));
        assert!(!state.wait("a", object("web"), v("6"), false, start));
        assert_eq!(state.unchanged("a", &object("sa")), Some("5"));
        // Judged not Current: always read again.
        assert_eq!(state.unchanged("a", &object("web")), None);
        // Another layer, or an object never registered: unknown.
        assert_eq!(state.unchanged("b", &object("sa")), None);
        assert_eq!(state.unchanged("a", &object("other")), None);
        // The layer's own apply, seen late: the version it judged, still unchanged.
        assert!(state.changed(object("sa"), "5".into(), at(1)).is_empty());
        assert_eq!(state.unchanged("a", &object("sa")), Some("5"));
        // Edited (or deleted): it wakes the layer, and is read again.
        assert_eq!(state.changed(object("sa"), "9".into(), at(2)), ["a"]);
        assert_eq!(state.unchanged("a", &object("sa")), None);
        // Registered afresh at the version read: unchanged again.
        assert!(!state.wait("a", object("sa"), v("9"), true, at(3)));
        assert_eq!(state.unchanged("a", &object("sa")), Some("9"));
        // Changed after the re-check began and before the registration: read again.
        state.changed(object("late"), "3".into(), at(4));
        assert!(state.wait("a", object("late"), v("2"), true, at(3)));
        assert_eq!(state.unchanged("a", &object("late")), None);
        // Without a version to compare, never known unchanged.
        assert!(!state.wait("a", object("nv"), None, true, at(3)));
        assert_eq!(state.unchanged("a", &object("nv")), None);
    }

    fn verdict(status: &str, message: &str) -> Option<Verdict> {
        Some(Verdict {
            status: status.to_string(),
            reason: None,
            message: Some(message.to_string()).filter(|m| !m.is_empty()),
        })
    }

    #[test]
    fn a_judged_event_wakes_a_layer_only_when_it_changes_the_verdict() {
        let mut state = KindState::default();
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let waiting = verdict("InProgress", "waiting for rollout");
        // "a" judges from events; "b" (other rules) does not.
        assert!(!state.wait_judging("a", object("web"), v("1"), false, waiting.clone(), start));
        assert!(!state.wait("b", object("web"), v("1"), false, start));
        // A status write that leaves the verdict as it was: only "b" is woken.
        assert_eq!(
            state.changed_to(object("web"), "2".into(), waiting.clone(), at(1)),
            ["b"]
        );
        assert_eq!(state.woken_by("a", &object("web")), None);
        // Known unchanged in its verdict at the new version (a re-check need not read it);
        // "b", not Current and not judging from events, must read it.
        assert_eq!(state.unchanged("a", &object("web")), Some("2"));
        assert_eq!(state.unchanged("b", &object("web")), None);
        // The same version again (a relist's replay) does not wake "a" either.
        assert_eq!(
            state.changed_to(object("web"), "2".into(), waiting, at(2)),
            ["b"]
        );
        // Current now: "a" is woken and its re-check takes the watch's verdict.
        let current = verdict("Current", "");
        assert_eq!(
            state.changed_to(object("web"), "3".into(), current.clone(), at(3)),
            ["a", "b"]
        );
        assert_eq!(
            state.woken_by("a", &object("web")),
            Some(("3".to_string(), current.clone().unwrap()))
        );
        assert_eq!(state.woken_by("b", &object("web")), None);
        // Its verdict changed: not "unchanged" (the wake-up's verdict is taken instead).
        assert_eq!(state.unchanged("a", &object("web")), None);
        // A later change keeps it up to date, whether it wakes or not.
        assert!(
            state
                .changed_to(object("web"), "4".into(), current.clone(), at(4))
                .contains(&"b".to_string())
        );
        assert_eq!(
            state.woken_by("a", &object("web")),
            Some(("4".to_string(), current.unwrap()))
        );
    }

    #[test]
    fn a_listed_workload_without_apiversion_and_kind_is_judged_as_its_kind() {
        // A LIST's items carry no apiVersion or kind.
        let listed: DynamicObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "apps", "generation": 1, "resourceVersion": "7"},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                       "readyReplicas": 0, "availableReplicas": 0},
        }))
        .unwrap();
        let deployments = ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        );
        let (metadata, verdict) = judged(listed.clone(), false, &deployments);
        assert_eq!(metadata.resource_version.as_deref(), Some("7"));
        let verdict = verdict.unwrap();
        assert_eq!(verdict.status, "InProgress", "{verdict:?}");
        // A deletion carries no verdict.
        assert_eq!(judged(listed, true, &deployments).1, None);
    }

    #[test]
    fn a_judged_change_before_the_registration_is_taken_as_the_watch_judged_it() {
        let mut state = KindState::default();
        let recheck = Instant::now();
        let at = |ms| recheck + Duration::from_millis(ms);
        let waiting = verdict("InProgress", "waiting for rollout");
        let current = verdict("Current", "");
        // A status write that leaves the verdict: nothing to look at again.
        state.changed_to(object("same"), "2".into(), waiting.clone(), at(1));
        assert!(!state.wait_judging("a", object("same"), v("1"), false, waiting.clone(), recheck));
        assert_eq!(state.woken_by("a", &object("same")), None);
        // Later events compare with that version's verdict: the same again wakes nobody.
        assert!(
            state
                .changed_to(object("same"), "3".into(), waiting.clone(), at(2))
                .is_empty()
        );
        // One that made it Current: look again now, taking the watch's verdict.
        state.changed_to(object("done"), "5".into(), current.clone(), at(3));
        assert!(state.wait_judging("a", object("done"), v("4"), false, waiting.clone(), recheck));
        assert_eq!(
            state.woken_by("a", &object("done")),
            Some(("5".to_string(), current.unwrap()))
        );
        // A deletion: look again, and read it.
        state.changed_to(object("gone"), "7".into(), None, at(4));
        assert!(state.wait_judging("a", object("gone"), v("6"), false, waiting, recheck));
        assert_eq!(state.woken_by("a", &object("gone")), None);
    }

    #[test]
    fn a_deletion_or_a_relist_leaves_the_layer_to_read_the_object() {
        let mut state = KindState::default();
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let waiting = verdict("InProgress", "waiting for rollout");
        state.wait_judging("a", object("web"), v("1"), false, waiting, start);
        assert_eq!(
            state.changed_to(object("web"), "2".into(), verdict("Current", ""), at(1)),
            ["a"]
        );
        assert!(state.woken_by("a", &object("web")).is_some());
        // Deleted: woken, and nothing the watch judged stands.
        assert_eq!(
            state.changed_to(object("web"), "3".into(), None, at(2)),
            ["a"]
        );
        assert_eq!(state.woken_by("a", &object("web")), None);
        // Judged again, woken again, then a relist: read it.
        state.wait_judging(
            "a",
            object("web"),
            v("3"),
            false,
            verdict("InProgress", "x"),
            at(3),
        );
        assert_eq!(
            state.changed_to(object("web"), "4".into(), verdict("Current", ""), at(4)),
            ["a"]
        );
        state.relisting();
        assert_eq!(state.woken_by("a", &object("web")), None);
    }

    #[test]
    fn a_relist_forgets_what_was_known_unchanged() {
        let mut state = KindState::default();
        let start = Instant::now();
        assert!(!state.wait("a", object("sa"), v("5"), true, start));
        assert!(!state.wait("b", object("sa"), v("5"), true, start));
        // A deletion while the watch was down shows in no event of the relist.
        state.relisting();
        assert_eq!(state.unchanged("a", &object("sa")), None);
        assert_eq!(state.unchanged("b", &object("sa")), None);
    }

    /// The backoff drops a relist's `Init`: it must reach the bookkeeping before that.
    #[tokio::test]
    async fn a_relist_of_the_watch_forgets_what_was_known_unchanged() {
        let kind = Arc::new(KindWatch::default());
        assert!(!lock(&kind.state).wait("a", object("sa"), v("5"), true, Instant::now()));
        let quiet: Vec<MetaEvent> = vec![Ok(watcher::Event::InitDone)];
        let seen: Vec<_> = kind_events(futures::stream::iter(quiet), kind.clone())
            .collect()
            .await;
        assert_eq!(seen.len(), 1);
        assert_eq!(lock(&kind.state).unchanged("a", &object("sa")), Some("5"));
        let relist: Vec<MetaEvent> = vec![Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)];
        let seen: Vec<_> = kind_events(futures::stream::iter(relist), kind.clone())
            .collect()
            .await;
        assert!(
            seen.iter().all(|e| !matches!(e, Ok(watcher::Event::Init))),
            "the backoff drops Init"
        );
        assert_eq!(lock(&kind.state).unchanged("a", &object("sa")), None);
    }

    fn applied(version: &str) -> Applied {
        Applied {
            version: version.to_string(),
            fingerprint: 7,
            verdict: Verdict {
                status: "Current".into(),
                reason: None,
                message: None,
            },
        }
    }

    fn version_applied<'a>(
        state: &'a KindState,
        object: &ObjectKey,
        fingerprint: u64,
    ) -> Option<&'a str> {
        state
            .unchanged_since_applied(object, fingerprint)
            .map(|applied| applied.version.as_str())
    }

    #[test]
    fn an_object_is_unchanged_since_its_apply_until_the_watch_shows_another_version() {
        let mut state = KindState::default();
        let start = Instant::now();
        state.applied(object("sa"), applied("5"), start);
        assert_eq!(version_applied(&state, &object("sa"), 7), Some("5"));
        // Another manifest (or account) is another apply.
        assert_eq!(version_applied(&state, &object("sa"), 8), None);
        assert_eq!(version_applied(&state, &object("db"), 7), None);
        // The watch showing the apply's own version changes nothing.
        let at = start + Duration::from_millis(10);
        state.changed(object("sa"), "5".into(), at);
        assert_eq!(version_applied(&state, &object("sa"), 7), Some("5"));
        // Someone else's edit (or a deletion) does.
        state.changed(object("sa"), "6".into(), at + Duration::from_millis(10));
        assert_eq!(version_applied(&state, &object("sa"), 7), None);
        // Applied again: known again, until a relist.
        state.applied(object("sa"), applied("9"), at + Duration::from_millis(20));
        assert_eq!(version_applied(&state, &object("sa"), 7), Some("9"));
        state.relisting();
        assert_eq!(version_applied(&state, &object("sa"), 7), None);
    }

    #[test]
    fn a_version_seen_while_the_apply_was_under_way_is_not_taken_as_unchanged() {
        let mut state = KindState::default();
        let start = Instant::now();
        // An edit seen after the apply began, before its answer is recorded: which came last
        // is unknown.
        state.changed(object("sa"), "6".into(), start + Duration::from_millis(5));
        state.applied(object("sa"), applied("5"), start);
        assert_eq!(version_applied(&state, &object("sa"), 7), None);
        // The apply's own version seen first is no such edit.
        state.changed(object("cm"), "8".into(), start + Duration::from_millis(5));
        state.applied(object("cm"), applied("8"), start);
        assert_eq!(version_applied(&state, &object("cm"), 7), Some("8"));
        // Nor is a change seen before the apply began.
        let later = start + Duration::from_millis(50);
        state.applied(object("sa"), applied("11"), later);
        assert_eq!(version_applied(&state, &object("sa"), 7), Some("11"));
    }
}
