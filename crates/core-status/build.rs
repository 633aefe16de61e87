//! Embeds the built-in health rule pack: every `rules/*.yaml` file, by name, so adding a file
//! is all it takes to ship a rule group.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                .collect()
        })
        .unwrap_or_default();
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
