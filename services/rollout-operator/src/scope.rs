//! `--watch-namespace-selector`: the namespaces the operator acts in, chosen by their labels
//! and followed as namespaces are labelled, unlabelled, created and deleted.
//!
//! The objects are watched in every namespace (one watch per kind, as with no namespace
//! listed); what the selector decides is where the operator *acts*: a group is reconciled,
//! and a pod's ready time written, only while its namespace matches. A namespace that starts
//! to match has its groups reconciled at once; one that stops matching is left alone from its
//! next event on. Until the namespaces' first list arrives nothing is selected, so a
//! restarted operator never acts in a namespace it cannot yet tell is in.

use std::collections::BTreeSet;

use futures::StreamExt as _;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt as _};

use core_k8s::labels::LabelSelector;

/// Where the operator acts.
#[derive(Clone)]
pub enum Scope {
    /// Every namespace it watches (all, or those `--watch-namespace` lists).
    Watched,
    /// The namespaces matching the selector, from a watch of them.
    Selected(Store<Namespace>),
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Watched => f.write_str("Watched"),
            Self::Selected(store) => f.debug_tuple("Selected").field(&store.len()).finish(),
        }
    }
}

impl Scope {
    /// Whether the operator acts in `namespace` now.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::Watched => true,
            Self::Selected(store) => store.get(&ObjectRef::new(namespace)).is_some(),
        }
    }
}

/// Watches the namespaces `selector` matches; `selected` is called with each one that starts
/// to match (or changes), so its groups are reconciled at once. The first time a namespace is
/// selected the operator checks it may delete its pods there: with the chart's per-namespace
/// grants a labelled namespace nobody bound the operator's role in would otherwise fail every
/// rollout step with a bare 403.
pub fn follow(
    client: Client,
    selector: &LabelSelector,
    selected: impl Fn(&str) + Send + 'static,
) -> Scope {
    let writer = reflector::store::Writer::default();
    let store = writer.as_reader();
    let api: Api<Namespace> = Api::all(client.clone());
    let config = core_k8s::labels::watcher_config(Some(selector));
    let events =
        reflector::reflector(writer, watcher(api, config).default_backoff()).applied_objects();
    let selector = selector.as_str().to_string();
    tokio::spawn(async move {
        let mut checked = BTreeSet::new();
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(namespace) => {
                    let name = namespace.name_any();
                    selected(&name);
                    if checked.insert(name.clone()) {
                        check_rights(&client, &name, &selector).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, %selector, "watching the namespaces of --watch-namespace-selector (retrying)");
                }
            }
        }
    });
    Scope::Selected(store)
}

/// Says once, naming the namespace, when the operator may not delete pods in a namespace it
/// was asked to act in.
async fn check_rights(client: &Client, namespace: &str, selector: &str) {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_string()),
                verb: Some("delete".into()),
                resource: Some("pods".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &review).await {
        Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {
            tracing::info!(%namespace, %selector, "acting in namespace (it matches --watch-namespace-selector)");
        }
        Ok(_) => tracing::error!(
            %namespace,
            %selector,
            "namespace {namespace} matches --watch-namespace-selector but this operator may not delete pods there: bind its namespace role in {namespace} (the chart's rolloutOperator.watchNamespaces does)"
        ),
        Err(e) => tracing::debug!(%namespace, error = %e, "cannot check the operator's rights"),
    }
}
