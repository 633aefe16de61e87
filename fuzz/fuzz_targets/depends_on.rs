//! Any text as a dependsOn entry, a version and a k8sVersion: never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(dep) = core_layers::deps::parse_dependency(text) {
            let _ = dep.accepts(text);
        }
        let _ = core_layers::deps::k8s_version_satisfied(text, "v1.34.4");
    }
});
