//! Fixtures shared by the tests of several `plan` submodules: a layer waiting for objects.

use crate::crd::{AddonsLayer, AddonsLayerSpec, ObjectPrereq, Source};

pub(super) fn layer(objects: Vec<ObjectPrereq>) -> AddonsLayer {
    let mut spec = AddonsLayerSpec {
        version: "1".into(),
        source: Source {
            name: "r".into(),
            path: "./x".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    spec.prereqs.objects = objects;
    AddonsLayer::new("apps", spec)
}

pub(super) fn crd() -> ObjectPrereq {
    ObjectPrereq {
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        name: "widgets.example.com".into(),
        namespace: None,
        ready_expr: None,
    }
}
