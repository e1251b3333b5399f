//! End-to-end tests of the `rstar` binary: every test runs the real executable.

use super::common::output as rstar;

#[test]
fn help_lists_subcommands() {
    let out = rstar(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Usage: rstar"), "{text}");
    assert!(text.contains("info"), "{text}");
}

#[test]
fn version_matches_the_crate() {
    let out = rstar(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.trim(), format!("rstar {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn info_json_is_valid() {
    let out = rstar(&["info", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        v["crates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "rstar-agent")
    );
}

#[test]
fn unknown_subcommand_fails_with_usage() {
    let out = rstar(&["no-such-command"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("unrecognized subcommand"), "{err}");
}
