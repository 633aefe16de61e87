//! Reading the objects a layer waits for (`spec.prereqs.objects`) for [`plan::gate`].

use core_status::Status;

use crate::read::Reader;
use core_k8s::apply::ResolvedKind;
use core_layers::crd::{AddonsLayer, ObjectPrereq};
use core_layers::plan;

/// Where a prerequisite object lives: its kind as the API serves it, and its namespace (the
/// one named for a namespaced kind, else `default`; none for a cluster-scoped kind). `Err`: the
/// kind is not served.
pub async fn locate(
    reader: &Reader,
    wanted: &ObjectPrereq,
) -> core_layers::error::Result<(ResolvedKind, Option<String>)> {
    let resolved = reader.resolve(&wanted.api_version, &wanted.kind).await?;
    let namespace = resolved
        .namespaced
        .then(|| wanted.namespace.clone().unwrap_or_else(|| "default".into()));
    Ok((resolved, namespace))
}

/// Each prerequisite object's status, in `spec.prereqs.objects` order: `None` when it (or its
/// kind) does not exist. A read error other than "not found" counts as Unknown, so the layer
/// waits and says why instead of applying.
pub async fn read(reader: &Reader, layer: &AddonsLayer) -> Vec<Option<(Status, String)>> {
    let now = jiff::Timestamp::now();
    // `self` of a readyExpr: the layer as stored (made only when some object has one).
    let layer_value = layer
        .spec
        .prereqs
        .objects
        .iter()
        .any(|o| o.ready_expr.is_some())
        .then(|| serde_json::to_value(layer).unwrap_or_default());
    let mut out = Vec::with_capacity(layer.spec.prereqs.objects.len());
    for wanted in &layer.spec.prereqs.objects {
        let Ok((resolved, namespace)) = locate(reader, wanted).await else {
            out.push(None);
            continue;
        };
        let state = match reader
            .get_value(&resolved, namespace.as_deref(), &wanted.name)
            .await
        {
            Ok(None) => None,
            Ok(Some(value)) => Some(match (&wanted.ready_expr, &layer_value) {
                (Some(source), Some(layer_value)) => {
                    plan::ready_by_expr(source, layer_value, &value)
                }
                _ => plan::object_status(&value, now),
            }),
            Err(e) => Some((Status::Unknown, format!("reading it failed: {e}"))),
        };
        out.push(state);
    }
    out
}
