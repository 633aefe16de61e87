//! Any bytes as a request to the pod_eviction webhook, decided against a realistic cluster:
//! a 400-worthy parse error or an answer, never a panic.
#![no_main]
use core_admission::webhooks::Webhook;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| common::review(Webhook::PodEviction, data));
