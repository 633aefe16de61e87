//! `strata completion SHELL`: a completion script for each shell, naming the subcommands.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::process::Command;

#[test]
fn prints_a_completion_script_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _strata"),
        ("zsh", "#compdef strata"),
        ("fish", "complete -c strata"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for word in ["layers", "reconcile", "suspend", "rollout"] {
            assert!(script.contains(word), "{shell}: {word} missing");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["completion", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown shell is refused");
}
