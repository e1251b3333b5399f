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

/// `rstar ARGS` at a 100-column terminal (clap reads `COLUMNS` when stdout is no terminal).
fn help(args: &[&str]) -> String {
    let r = super::common::run(args, None, &[("COLUMNS", "100".as_ref())]);
    assert_eq!(r.code, 0, "rstar {args:?}: {}", r.stderr);
    r.out()
}

/// The subcommands a help page lists under `Commands:` (without `help`).
fn commands(page: &str) -> Vec<String> {
    page.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A wrapped description continues on a deeper-indented line.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Every subcommand path, nested ones included (`tools serve`).
fn every_subcommand() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut todo: Vec<Vec<String>> = commands(&help(&["--help"]))
        .into_iter()
        .map(|c| vec![c])
        .collect();
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).chain(["--help"]).collect();
        for sub in commands(&help(&args)) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
        out.push(path);
    }
    out.sort();
    out
}

#[test]
fn issue_44_every_subcommand_prints_the_short_help_for_dash_h() {
    let all = every_subcommand();
    for sub in ["verify", "serve", "roc", "eval", "train"] {
        assert!(all.iter().any(|p| p == &[sub]), "{sub}: {all:?}");
    }
    assert!(all.iter().any(|p| p == &["tools", "serve"]), "{all:?}");
    for path in &all {
        let args: Vec<&str> = path.iter().map(String::as_str).chain(["-h"]).collect();
        let page = help(&args);
        // The short layout puts each option's help beside it; the long one (what `serve` and
        // `roc` used to print for `-h`, as clap falls back to it when an option's name column is
        // too wide for the terminal) puts it on the line below.
        assert!(
            page.lines()
                .any(|l| l.trim_start().starts_with("-h, --help") && l.contains("Print help")),
            "`rstar {}` prints the long layout:\n{page}",
            args.join(" ")
        );
    }
}

#[test]
fn issue_44_help_names_every_verifier_mode() {
    let top = help(&["--help"]);
    let line = top
        .lines()
        .find(|l| l.trim_start().starts_with("verify "))
        .unwrap_or_else(|| panic!("no verify line:\n{top}"));
    assert!(line.contains("math") && line.contains("choice"), "{line}");
    let page = help(&["verify", "--help"]);
    assert!(!page.contains("integer answers"), "{page}");
    assert!(!page.contains("ground-truth integer"), "{page}");
    assert!(page.contains("--mode") && page.contains("choice"), "{page}");
}

#[test]
fn issue_44_eval_workers_shows_one_default() {
    let page = help(&["eval", "--help"]);
    let workers: String = page
        .lines()
        .skip_while(|l| !l.contains("--workers"))
        .take_while(|l| !l.trim_start().starts_with("--tools"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(workers.contains("[default: one per CPU]"), "{workers}");
    assert!(!workers.contains("[default: 0]"), "{workers}");
}

/// Issue 70: a reader that closes the pipe after what it wanted (`rstar tasks --n 5000 | head
/// -1`, `rstar train --dry-run | head`) ends the command quietly with status 0: no `error:
/// Broken pipe`, no panic.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::io::{BufRead, Read};
    for args in [
        &["tasks", "--n", "5000"][..],
        &["train", "--preset", "smoke", "--dry-run"],
    ] {
        let mut child = super::common::command()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{args:?}");
        drop(stdout);
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "{args:?}: {status:?} {stderr}");
        assert!(
            !stderr.contains("Broken pipe") && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    }
}

/// Issue 70: `rstar info` lists every workspace crate linked into the binary: those of
/// `crates/*/Cargo.toml` but the Python wheel and the test data.
#[test]
fn info_lists_every_crate_of_the_binary() {
    let out = rstar(&["info", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut listed: Vec<String> = v["crates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut workspace: Vec<String> = std::fs::read_dir(&crates)
        .unwrap()
        .filter_map(|e| {
            let toml = std::fs::read_to_string(e.ok()?.path().join("Cargo.toml")).ok()?;
            let name = toml
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))?
                .trim_end_matches('"')
                .to_string();
            Some(name)
        })
        .filter(|n| n != "rstar-python" && n != "rstar-testdata")
        .collect();
    workspace.sort();
    assert_eq!(listed, workspace);
}

/// Issue 70: each subcommand's help offers its own flags (`tools run` no longer shows
/// `doctor`'s `--json`), and `sft`'s usage names the flags it needs.
#[test]
fn help_pages_show_what_each_command_takes() {
    let run = help(&["tools", "run", "--help"]);
    assert!(!run.contains("--json"), "{run}");
    let doctor = help(&["tools", "doctor", "--help"]);
    assert!(doctor.contains("--json"), "{doctor}");
    let sft = help(&["sft", "--help"]);
    assert!(
        sft.contains("Usage: rstar sft --model <DIR> --sft-data <FILE[:W]>...")
            && sft.contains("rstar sft --resume <RUN_DIR>"),
        "{sft}"
    );
}
