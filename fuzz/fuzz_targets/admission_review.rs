//! Any bytes through the AdmissionReview decoder and every webhook's decision: never a panic.
#![no_main]
use admission_webhook::review::Review;
use admission_webhook::webhooks::{Cluster, Webhook, decide};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(review) = Review::parse(data) {
        let cluster = Cluster::default();
        for webhook in Webhook::ALL {
            let decision = decide(webhook, &review, &cluster, jiff::Timestamp::UNIX_EPOCH);
            let _ = review.respond(&decision);
        }
    }
});
