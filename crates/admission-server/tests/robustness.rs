//! Random and truncated bodies never crash the server: each gets an HTTP answer (400 for
//! anything that is not an AdmissionReview).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::sync::Arc;

use admission_server::metrics::{Outcome, ReviewLabels};
use admission_server::server::{App, router};
use admission_server::webhooks::Webhook;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use core_k8s::pod_http::PodHttp;
use tower::ServiceExt;

fn app() -> Arc<App> {
    // Decisions that would read the cluster are never reached by these bodies; the client only
    // has to exist.
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    Arc::new(App {
        client: kube::Client::try_from(config).unwrap(),
        http: PodHttp::new(std::time::Duration::from_millis(100), None),
        zone_tracker: None,
        metrics: admission_server::metrics::Metrics::default(),
        handler_timeout: admission_server::server::HANDLER_TIMEOUT,
        http_metrics: core_k8s::http_metrics::HttpMetrics::register(
            "admission_webhook",
            &mut prometheus_client::registry::Registry::default(),
        ),
        layer_defaults: Default::default(),
        namespace_selectors: Default::default(),
        layers: Default::default(),
        pending_downscales: Default::default(),
        eviction_cache: Default::default(),
    })
}

async fn status(app: &Arc<App>, path: &str, content_type: &str, body: Vec<u8>) -> StatusCode {
    let request = Request::post(path)
        .header("content-type", content_type)
        .body(Body::from(body))
        .unwrap();
    router(app.clone()).oneshot(request).await.unwrap().status()
}

#[tokio::test]
async fn random_bytes_get_400_and_never_a_crash() {
    core_k8s::install_crypto_provider();
    let app = app();
    let valid = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","name":"z","namespace":"n","object":{"kind":"ZoneAwarePodDisruptionBudget","spec":{"selector":{"matchLabels":{"a":"b"}}}}}}"#;
    let mut seed: u64 = 0x5eed;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    for webhook in Webhook::ALL {
        let path = webhook.path();
        let mut answered = [0u64; 2]; // 400s, 200s
        for round in 0..100 {
            let body: Vec<u8> = match round % 3 {
                0 => (0..next() % 512).map(|_| next() as u8).collect(),
                1 => valid[..next() % valid.len()].to_vec(),
                _ => {
                    let mut b = valid.to_vec();
                    let at = next() % b.len();
                    b[at] = next() as u8;
                    b
                }
            };
            let code = status(&app, path, "application/json", body.clone()).await;
            assert!(
                code == StatusCode::BAD_REQUEST || code == StatusCode::OK,
                "{path}: {code} for {:?}",
                String::from_utf8_lossy(&body)
            );
            answered[usize::from(code == StatusCode::OK)] += 1;
        }
        assert_eq!(
            status(&app, path, "text/plain", valid.to_vec()).await,
            StatusCode::BAD_REQUEST,
            "{path}: wrong content type"
        );
        answered[0] += 1;
        // Every answer is counted once, under its webhook and outcome.
        let count = |outcome| {
            app.metrics
                .reviews
                .get_or_create(&ReviewLabels {
                    webhook: webhook.name(),
                    outcome,
                })
                .get()
        };
        assert_eq!(count(Outcome::invalid), answered[0], "{path}");
        assert_eq!(
            count(Outcome::allowed) + count(Outcome::denied),
            answered[1],
            "{path}"
        );
        assert_eq!(count(Outcome::timeout), 0, "{path}");
    }
    assert_eq!(
        status(
            &app,
            "/admission/zpdb-validation",
            "application/json",
            valid.to_vec()
        )
        .await,
        StatusCode::OK
    );
}

/// A body over the explicit limit is refused with 413 before it is buffered or parsed; one at
/// the limit's scale that is a real review is still read (and answered 200).
#[tokio::test]
async fn oversized_bodies_get_413() {
    core_k8s::install_crypto_provider();
    let app = app();
    let limit = admission_server::server::MAX_REVIEW_BYTES;
    for webhook in Webhook::ALL {
        let oversized = vec![b' '; limit + 1];
        assert_eq!(
            status(&app, webhook.path(), "application/json", oversized).await,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{webhook:?}"
        );
    }
    // A large but legal review: a 2 MiB annotation on a ZPDB under validation.
    let big = "x".repeat(2 * 1024 * 1024);
    let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE", "name": "z", "namespace": "n",
            "object": {"kind": "ZoneAwarePodDisruptionBudget", "metadata": {"annotations": {"big": big}},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}}}}});
    let body = serde_json::to_vec(&review).unwrap();
    assert!(body.len() < limit);
    assert_eq!(
        status(
            &app,
            Webhook::ZpdbValidation.path(),
            "application/json",
            body
        )
        .await,
        StatusCode::OK
    );
}

/// Deeply nested JSON inside a review is refused with 400, quickly and without exhausting the
/// stack: the decoder stops at a fixed nesting depth (128), in the fields a webhook reads and in
/// the ones it skips alike.
#[tokio::test]
async fn deeply_nested_bodies_get_400() {
    core_k8s::install_crypto_provider();
    let app = app();
    let depth = 100_000;
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let bodies = [
        // In a skipped field (an object's spec).
        format!(
            r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {{"uid": "u", "operation": "CREATE", "name": "z", "namespace": "n", "object": {{"kind": "ZoneAwarePodDisruptionBudget", "spec": {{"x": {nested}}}}}}}}}"#
        ),
        // As the request itself.
        format!(
            r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {nested}}}"#
        ),
    ];
    for webhook in Webhook::ALL {
        for body in &bodies {
            let started = std::time::Instant::now();
            assert_eq!(
                status(
                    &app,
                    webhook.path(),
                    "application/json",
                    body.clone().into_bytes()
                )
                .await,
                StatusCode::BAD_REQUEST,
                "{webhook:?}"
            );
            assert!(
                started.elapsed() < std::time::Duration::from_secs(2),
                "{webhook:?}"
            );
        }
    }
    // Within the limit, nesting is fine.
    let shallow = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let review = format!(
        r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {{"uid": "u", "operation": "CREATE", "name": "z", "namespace": "n", "object": {{"kind": "ZoneAwarePodDisruptionBudget", "metadata": {{"name": "z"}}, "spec": {{"maxUnavailable": 1, "selector": {{"matchLabels": {{"a": "b"}}}}, "x": {shallow}}}}}}}}}"#
    );
    assert_eq!(
        status(
            &app,
            Webhook::ZpdbValidation.path(),
            "application/json",
            review.into_bytes()
        )
        .await,
        StatusCode::OK
    );
}
