//! Differential: any JSON object through the compact status-only decoder must get exactly the
//! status the full decoder gets (the compact path is only a faster way to the same answer).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(full) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    if !full.is_object() {
        return;
    }
    let compact = core_status::Observed::from_json(text)
        .unwrap_or_else(|e| panic!("the full decoder read it, the compact one failed: {e}"));
    let now = jiff::Timestamp::UNIX_EPOCH;
    assert_eq!(compact.evaluate(now), core_status::evaluate(&full, now), "{text}");
});
