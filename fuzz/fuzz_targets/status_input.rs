//! Any text as `strata status` input, and every object's status: never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(documents) = core_status::input::parse("fuzz", text) {
            for document in documents {
                let _ = core_status::evaluate(&document.object, jiff::Timestamp::UNIX_EPOCH);
            }
        }
    }
});
