//! Any JSON as a ZoneAwarePodDisruptionBudget: a parse error or a config, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = core_rollout::zpdb::parse(&value);
    }
});
