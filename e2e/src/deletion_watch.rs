//! Watches labelled ConfigMaps for the whole of a test and records every one that goes away,
//! however it shows: a `Delete` event, a name that a (re)list no longer holds (deletions while
//! the watch was away, as during an API server restart, show only as a difference between two
//! lists), or a name that comes back with another uid (deleted and created again).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};

#[derive(Default, Debug)]
struct Seen {
    /// The uid each name had when first seen.
    first: BTreeMap<String, String>,
    /// Names that went away (once each).
    deleted: BTreeSet<String>,
}

/// A running watch; stops when dropped.
#[derive(Debug)]
pub struct DeletionWatch {
    seen: Arc<Mutex<Seen>>,
    created: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DeletionWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DeletionWatch {
    /// Starts watching the ConfigMaps of `api` matching `labels`.
    pub fn start(api: Api<ConfigMap>, labels: &str) -> Self {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let (created_tx, created) = tokio::sync::watch::channel(0usize);
        let config = watcher::Config::default().labels(labels);
        let mut events = watcher(api, config).default_backoff().boxed();
        let state = seen.clone();
        let task = tokio::spawn(async move {
            let mut listing: BTreeMap<String, String> = BTreeMap::new();
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let mut seen = state.lock().unwrap_or_else(|e| e.into_inner());
                let saw = |seen: &mut Seen, name: String, uid: String| match seen.first.get(&name) {
                    None => {
                        seen.first.insert(name, uid);
                    }
                    Some(first) if *first != uid => {
                        seen.deleted.insert(name);
                    }
                    Some(_) => {}
                };
                match event {
                    watcher::Event::Init => listing.clear(),
                    watcher::Event::InitApply(m) => {
                        listing.insert(m.name_any(), m.uid().unwrap_or_default());
                    }
                    watcher::Event::InitDone => {
                        let gone: Vec<String> = seen
                            .first
                            .keys()
                            .filter(|name| !listing.contains_key(*name))
                            .cloned()
                            .collect();
                        seen.deleted.extend(gone);
                        for (name, uid) in std::mem::take(&mut listing) {
                            saw(&mut seen, name, uid);
                        }
                    }
                    watcher::Event::Apply(m) => {
                        saw(&mut seen, m.name_any(), m.uid().unwrap_or_default())
                    }
                    watcher::Event::Delete(m) => {
                        seen.deleted.insert(m.name_any());
                    }
                }
                created_tx.send_replace(seen.first.len());
            }
        });
        Self {
            seen,
            created,
            task,
        }
    }

    /// How many distinct objects were seen, changing as they appear.
    pub fn created(&self) -> tokio::sync::watch::Receiver<usize> {
        self.created.clone()
    }

    /// Waits until the watch has seen `name` (a sentinel created after everything of
    /// interest: once it is seen, every event before it has been processed).
    pub async fn wait_seen(&self, name: &str, timeout: Duration) -> Result<()> {
        tokio::time::timeout(timeout, async {
            loop {
                if self
                    .seen
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .first
                    .contains_key(name)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .with_context(|| format!("the watch did not see {name} within {timeout:?}"))
    }

    /// The names that went away so far.
    pub fn deleted(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .deleted
            .iter()
            .cloned()
            .collect()
    }
}
