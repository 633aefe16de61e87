//! Reading the objects a layer waits for (`spec.prereqs.objects`) for [`plan::gate`].

use core_status::Status;

use crate::read::Reader;
use core_layers::crd::AddonsLayer;
use core_layers::plan;

/// Each prerequisite object's status, in `spec.prereqs.objects` order: `None` when it (or its
/// kind) does not exist. A read error other than "not found" counts as Unknown, so the layer
/// waits and says why instead of applying.
pub async fn read(reader: &Reader, layer: &AddonsLayer) -> Vec<Option<(Status, String)>> {
    let now = jiff::Timestamp::now();
    // `self` of a readyExpr: the layer as stored.
    let layer_value = serde_json::to_value(layer).unwrap_or_default();
    let mut out = Vec::with_capacity(layer.spec.prereqs.objects.len());
    for wanted in &layer.spec.prereqs.objects {
        let resolved = match reader.resolve(&wanted.api_version, &wanted.kind).await {
            Ok(resolved) => resolved,
            Err(_) => {
                out.push(None);
                continue;
            }
        };
        let namespace = wanted
            .namespace
            .as_deref()
            .filter(|_| resolved.namespaced)
            .or(resolved.namespaced.then_some("default"));
        let state = match reader.get_value(&resolved, namespace, &wanted.name).await {
            Ok(None) => None,
            Ok(Some(value)) => Some(match &wanted.ready_expr {
                Some(source) => plan::ready_by_expr(source, &layer_value, &value),
                None => plan::object_status(&value, now),
            }),
            Err(e) => Some((Status::Unknown, format!("reading it failed: {e}"))),
        };
        out.push(state);
    }
    out
}
