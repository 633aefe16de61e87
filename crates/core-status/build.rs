//! Embeds the built-in health rule pack: every `rules/*.yaml` file, by name, so adding a file
//! is all it takes to ship a rule group.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // The directory cargo runs this for, read when the script runs: a path compiled into the
    // script (`env!`) is the checkout that first built it, and cargo reuses the compiled
    // script for another checkout sharing the target directory — whose rules it then missed,
    // shipping an empty pack.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|| panic!("cargo sets CARGO_MANIFEST_DIR for build scripts"));
    let dir = Path::new(&manifest_dir).join("rules");
    println!("cargo:rerun-if-changed={}", dir.display());
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading the rule pack {}: {e}", dir.display()));
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    assert!(!files.is_empty(), "no rule files in {}", dir.display());
    files.sort();
    let mut code = String::from("&[\n");
    for path in files {
        println!("cargo:rerun-if-changed={}", path.display());
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let _ = writeln!(
            code,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    code.push(']');
    let out = Path::new(&std::env::var("OUT_DIR").unwrap_or_default()).join("pack.rs");
    if let Err(e) = std::fs::write(&out, code) {
        panic!("writing {}: {e}", out.display());
    }
}
