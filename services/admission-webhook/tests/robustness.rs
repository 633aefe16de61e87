//! Random and truncated bodies never crash the server: each gets an HTTP answer (400 for
//! anything that is not an AdmissionReview).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::sync::Arc;

use admission_webhook::server::{App, router};
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
        cluster_domain: "cluster.local.".into(),
        http: PodHttp::new(std::time::Duration::from_millis(100), None),
        zone_tracker: None,
    })
}

async fn status(path: &str, content_type: &str, body: Vec<u8>) -> StatusCode {
    let request = Request::post(path)
        .header("content-type", content_type)
        .body(Body::from(body))
        .unwrap();
    router(app()).oneshot(request).await.unwrap().status()
}

#[tokio::test]
async fn random_bytes_get_400_and_never_a_crash() {
    core_k8s::install_crypto_provider();
    let valid = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","name":"z","namespace":"n","object":{"kind":"ZoneAwarePodDisruptionBudget","spec":{"selector":{"matchLabels":{"a":"b"}}}}}}"#;
    let mut seed: u64 = 0x5eed;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    for path in admission_webhook::webhooks::Webhook::ALL.map(|w| w.path()) {
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
            let code = status(path, "application/json", body.clone()).await;
            assert!(
                code == StatusCode::BAD_REQUEST || code == StatusCode::OK,
                "{path}: {code} for {:?}",
                String::from_utf8_lossy(&body)
            );
        }
        assert_eq!(
            status(path, "text/plain", valid.to_vec()).await,
            StatusCode::BAD_REQUEST,
            "{path}: wrong content type"
        );
    }
    assert_eq!(
        status(
            "/admission/zpdb-validation",
            "application/json",
            valid.to_vec()
        )
        .await,
        StatusCode::OK
    );
}
