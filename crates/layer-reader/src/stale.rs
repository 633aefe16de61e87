//! Reading what the cluster says about objects that left a layer, for [`plan::prune_plan`].

use core_k8s::apply::ResolvedKind;
use kube::ResourceExt;

use crate::read::Reader;
use core_layers::crd::InventoryEntry;
use core_layers::error::{LayerError, Result};
use core_layers::keys::{LAYER_LABEL, ORPHANED_LABEL};
use core_layers::plan::{self, LiveOwnership, ObjectRef, StaleObject};

/// A stale inventory entry with what the cluster says about it.
#[derive(Debug)]
pub struct StaleRead<'a> {
    pub entry: &'a InventoryEntry,
    pub stale: StaleObject,
    /// `None` when the kind is no longer served.
    pub resolved: Option<ResolvedKind>,
    /// The live object's uid and resourceVersion as read: a prune deletes only that.
    pub read_as: (Option<String>, Option<String>),
}

/// Reads the live ownership of objects that left a layer, for [`plan::prune_plan`]: kinds
/// resolved by `reader`, objects read through `client` (the layer's access).
pub async fn read_stale<'a>(
    reader: &Reader,
    client: &kube::Client,
    entries: &[&'a InventoryEntry],
) -> Result<Vec<StaleRead<'a>>> {
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let object = ObjectRef::of_entry(entry);
        let resolved = match reader.resolve(&entry.api_version, &entry.kind).await {
            Ok(resolved) => resolved,
            // The kind is gone (its CRD was removed): so are its objects.
            Err(LayerError::Kube(core_k8s::Error::UnknownKind { .. })) => {
                let stage =
                    plan::stage_of(&entry.api_version, &entry.kind, entry.namespace.is_some());
                out.push(StaleRead {
                    entry,
                    stale: StaleObject {
                        object,
                        stage,
                        live: None,
                    },
                    resolved: None,
                    read_as: (None, None),
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        let found = resolved
            .api(client, entry.namespace.as_deref())
            .get_opt(&entry.name)
            .await
            .map_err(|e| LayerError::api(format!("reading {object}"), e))?;
        let read_as = found.as_ref().map_or((None, None), |o| {
            (o.metadata.uid.clone(), o.metadata.resource_version.clone())
        });
        let live = found.map(|o| LiveOwnership {
            layer: o.labels().get(LAYER_LABEL).cloned(),
            orphaned_at: o
                .labels()
                .get(ORPHANED_LABEL)
                .and_then(|v| plan::parse_orphaned_label(v)),
        });
        let stage = plan::stage_of(&entry.api_version, &entry.kind, resolved.namespaced);
        out.push(StaleRead {
            entry,
            stale: StaleObject {
                object,
                stage,
                live,
            },
            resolved: Some(resolved),
            read_as,
        });
    }
    Ok(out)
}
