//! Fixtures shared by the tests of several `compare` submodules: a Deployment as the API
//! server holds it.

use serde_json::{Value, json};

use crate::fields::FieldPath;

pub(super) const LAYER: &str = "strata-layer-controller";

pub(super) fn path(text: &str) -> FieldPath {
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} does not parse: {e}"))
}

pub(super) fn app_container(image: &str) -> Value {
    json!({
        "name": "app",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 80, "protocol": "TCP"}],
        "resources": {},
        "terminationMessagePath": "/dev/termination-log",
    })
}

pub(super) fn sidecar() -> Value {
    json!({"name": "istio-proxy", "image": "istio/proxyv2:1.24", "ports": [{"containerPort": 15090}]})
}

/// The Deployment as the API server holds it: defaults, managedFields and status added,
/// after `kubectl set image deployment/web app=<image>` when `image` is not nginx:1.27.
pub(super) fn live_with(containers: Vec<Value>) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "labels": {"app.kubernetes.io/name": "web"},
            "annotations": {"deployment.kubernetes.io/revision": "2"},
            "generation": 2,
            "managedFields": [
                {
                    "manager": LAYER,
                    "operation": "Apply",
                    "apiVersion": "apps/v1",
                    "time": "2026-11-20T09:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {"f:app.kubernetes.io/name": {}}},
                        "f:spec": {
                            "f:replicas": {},
                            "f:selector": {},
                            "f:template": {
                                "f:metadata": {"f:labels": {"f:app": {}}},
                                "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                                    ".": {},
                                    "f:name": {},
                                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                        ".": {},
                                        "f:containerPort": {},
                                    }},
                                }}},
                            },
                        },
                    },
                },
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "apps/v1",
                    "time": "2026-11-20T10:00:05Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:annotations": {
                        ".": {},
                        "f:deployment.kubernetes.io/revision": {},
                    }}},
                },
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "apps/v1",
                    "time": "2026-11-20T10:00:05Z",
                    "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {"f:replicas": {}, "f:conditions": {
                        ".": {},
                        "k:{\"type\":\"Available\"}": {".": {}, "f:status": {}},
                    }}},
                },
                {
                    "manager": "kubectl-set",
                    "operation": "Update",
                    "apiVersion": "apps/v1",
                    "time": "2026-11-20T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"app\"}": {"f:image": {}},
                    }}}}},
                },
            ],
        },
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 600,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": containers,
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                },
            },
        },
        "status": {"replicas": 2, "conditions": [{"type": "Available", "status": "True"}]},
    })
}

pub(super) fn live(image: &str) -> Value {
    live_with(vec![app_container(image)])
}
