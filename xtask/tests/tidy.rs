//! Tidy: the workspace's structural invariants as tests (rust-analyzer's pattern), run by
//! `cargo test --workspace` (and so by `cargo xtask ci`).
//!
//! Each check is a function from the repository root to a list of violations, so that the
//! `planted_*` tests can run it on a scratch tree holding one violation and see it fail; the
//! `workspace_*` tests run it on this checkout and print every violation with its file and line.
//!
//! The invariants (see `docs/ARCHITECTURE.md`):
//! - leaf crates build no tensor library: no Burn in the manifests of the verifier, toolenv,
//!   toolserver, roc, scheduler, curriculum, episode and tasks crates, and `cargo tree` of
//!   `rstar-episode` and `rstar-tasks` holds no burn, tokio, axum, hyper or clap;
//! - processes are spawned only by the sandbox: no `Command::new` and no `fork(` outside
//!   `crates/toolenv`, `xtask`, benches and tests;
//! - no library crate enables a Burn backend by default (only the binary, `rstar-cli`, does);
//! - every `#[allow]` says why, in a comment on its line or the line above;
//! - every `.rs` file opens with a `//!` line, and every crate has a `//!` header in its
//!   `lib.rs` (or `main.rs`) and a runnable example in `examples/`.
//! - `rstar-grpo` without its default `burn` feature builds no Burn (`cargo tree -e normal`);
//! - every `runs/tiny/…` path that `README.md` and `docs/*.md` name is one `cargo xtask train`
//!   writes (issue 44: the docs once served `runs/tiny/final`, which no run has);
//! - `rstar-analysis` (the report, plots, TensorBoard writer and entropy analysis) builds no
//!   Burn and no tokio: its normal dependencies, followed through the workspace's manifests,
//!   and `cargo tree -p rstar-analysis -e normal` (issue 39).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (xtask's parent).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the repository root")
        .to_path_buf()
}

/// Every file under `dir` whose name ends with `suffix`, skipping `target` and hidden folders.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if name.ends_with(suffix) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The crates under `crates/`, as their folders.
fn crate_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join("Cargo.toml").is_file())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Fails with every violation listed.
fn assert_clean(check: &str, violations: &[String]) {
    assert!(
        violations.is_empty(),
        "tidy: {check}: {} violation(s):\n  {}",
        violations.len(),
        violations.join("\n  ")
    );
}

/// The dependency names of a manifest (every `[*dependencies]` table, `[target.*]` included).
fn dependencies(manifest: &str) -> Vec<(usize, String)> {
    let mut in_deps = false;
    let mut out = Vec::new();
    for (i, line) in manifest.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.trim_matches(['[', ']']).ends_with("dependencies");
            // `[dependencies.burn]`
            if let Some(name) = line
                .trim_matches(['[', ']'])
                .split_once("dependencies.")
                .map(|(_, n)| n)
            {
                out.push((i + 1, name.to_string()));
            }
            continue;
        }
        if in_deps && let Some((name, _)) = line.split_once('=') {
            let name = name.trim().split('.').next().unwrap_or("").trim();
            if !name.is_empty() && !name.starts_with('#') {
                out.push((i + 1, name.to_string()));
            }
        }
    }
    out
}

/// Crates that must not depend on Burn, by folder.
const NO_BURN: &[&str] = &[
    "verifier",
    "toolenv",
    "toolserver",
    "roc",
    "scheduler",
    "curriculum",
    "episode",
    "tasks",
];

fn no_burn_in_manifests(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for name in NO_BURN {
        let path = root.join("crates").join(name).join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            bad.push(format!("{}: missing", rel(root, &path)));
            continue;
        };
        for (line, dep) in dependencies(&text) {
            if dep == "burn" || dep.starts_with("burn-") || dep == "rstar-policy" {
                bad.push(format!(
                    "{}:{line}: depends on `{dep}` (Burn)",
                    rel(root, &path)
                ));
            }
        }
    }
    bad
}

/// Runs a closure's `Command::new` or `fork(` scan over one file's text.
fn spawns(text: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let forks = code.match_indices("fork(").any(|(at, _)| {
            let before = code[..at].chars().last();
            // `os.fork()` inside a Python string is not a Rust call.
            !matches!(before, Some(c) if c == '.' || c.is_alphanumeric() || c == '_')
        });
        if code.contains("Command::new") || forks {
            lines.push(i + 1);
        }
    }
    lines
}

fn no_spawn_outside_sandbox(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for dir in crate_dirs(root) {
        if dir.file_name().is_some_and(|n| n == "toolenv") {
            continue;
        }
        // Tests and benches may run binaries; the library and its examples may not.
        for sub in ["src", "examples"] {
            for path in files(&dir.join(sub), ".rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for line in spawns(&text) {
                    bad.push(format!(
                        "{}:{line}: spawns a process outside rstar-toolenv",
                        rel(root, &path)
                    ));
                }
            }
        }
    }
    bad
}

/// The binary crates, which choose the backend.
const BINARIES: &[&str] = &["cli"];

fn no_default_backend(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for dir in crate_dirs(root) {
        if dir
            .file_name()
            .is_some_and(|n| BINARIES.contains(&n.to_string_lossy().as_ref()))
        {
            continue;
        }
        let path = dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut in_features = false;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.starts_with('[') {
                in_features = t == "[features]";
                continue;
            }
            if in_features && t.starts_with("default") {
                for backend in ["flex", "wgpu", "cuda", "ndarray", "tch", "metal", "vulkan"] {
                    if t.contains(&format!("\"{backend}\"")) || t.contains(&format!("/{backend}\""))
                    {
                        bad.push(format!(
                            "{}:{}: the default features enable the `{backend}` backend",
                            rel(root, &path),
                            i + 1
                        ));
                    }
                }
            }
        }
        // A default-on Burn dependency with a backend feature is the same thing.
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.starts_with("burn") && !t.contains("optional") {
                for backend in ["\"flex\"", "\"wgpu\"", "\"cuda\""] {
                    if t.contains(backend) {
                        let table = text
                            .lines()
                            .take(i)
                            .filter(|l| l.trim().starts_with('['))
                            .last();
                        if table.is_some_and(|t| t.trim() == "[dependencies]") {
                            bad.push(format!(
                                "{}:{}: Burn with the {backend} backend always on",
                                rel(root, &path),
                                i + 1
                            ));
                        }
                    }
                }
            }
        }
    }
    bad
}

fn allows_without_reason(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for top in ["crates", "xtask", "examples"] {
        for path in files(&root.join(top), ".rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let t = line.trim_start();
                if !(t.starts_with("#[allow(") || t.starts_with("#![allow(")) {
                    continue;
                }
                // A comment on the line, or the attribute's own `reason = "…"` (which may sit on
                // a later line of a multi-line attribute, up to its closing `)]`).
                let attribute_end = (i..lines.len())
                    .find(|&j| lines[j].contains(")]"))
                    .unwrap_or(i);
                let same_line = t.contains("//")
                    || lines[i..=attribute_end]
                        .iter()
                        .any(|l| l.contains("reason ="));
                // A plain comment: a doc comment above says what the item is, not why it is allowed.
                let above = i > 0 && {
                    let prev = lines[i - 1].trim_start();
                    prev.starts_with("//") && !prev.starts_with("///") && !prev.starts_with("//!")
                };
                if !same_line && !above {
                    bad.push(format!(
                        "{}:{}: `{}` without a reason (a comment on the line or above)",
                        rel(root, &path),
                        i + 1,
                        t
                    ));
                }
            }
        }
    }
    bad
}

fn headers_and_examples(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for top in ["crates", "xtask", "examples"] {
        for path in files(&root.join(top), ".rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if !text.starts_with("//!") {
                bad.push(format!(
                    "{}: does not start with a `//!` line",
                    rel(root, &path)
                ));
            }
        }
    }
    for dir in crate_dirs(root) {
        let lib = dir.join("src/lib.rs");
        let main = dir.join("src/main.rs");
        let entry = if lib.is_file() { lib } else { main };
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        // The crate header: several `//!` lines saying what the crate is (and is not).
        if text.lines().take_while(|l| l.starts_with("//!")).count() < 2 {
            bad.push(format!(
                "{}: no `//!` crate header (two lines at least)",
                rel(root, &entry)
            ));
        }
        if files(&dir.join("examples"), ".rs").is_empty() {
            bad.push(format!(
                "{}: no runnable example in examples/",
                rel(root, &dir)
            ));
        }
    }
    bad
}

/// The packages `cargo tree` shows for `package` (every edge kind), one name a line.
fn tree(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--prefix",
            "none",
            "-e",
            "all",
            "-p",
            package,
        ])
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

fn heavy_in_tree(names: &[String]) -> Vec<String> {
    let mut bad: Vec<String> = names
        .iter()
        .filter(|n| {
            ["burn", "tokio", "axum", "hyper", "clap"]
                .iter()
                .any(|h| n.as_str() == *h || n.starts_with(&format!("{h}-")))
        })
        .cloned()
        .collect();
    bad.sort();
    bad.dedup();
    bad
}

/// What `cargo xtask train` writes under `runs/tiny/`, as path patterns (`*` in a segment stands
/// for any text): the table of `crates/rstar-agent/src/train/mod.rs`, the checkpoints of
/// `train/phases.rs` (`sft`, `stage-<name>` for the embedded curriculum's stages `short`, `long`
/// and `hard` in `crates/curriculum/src/stage.rs`, the `final` link) and `train/checkpoint.rs`
/// (`last`, `last.old`), the files `rstar_policy::save_dir` writes into each, and the report
/// `rstar train` writes at the end (`crates/cli/src/train.rs`).
const RUN_OUTPUTS: &[&str] = &[
    "config.json",
    "config_edits.jsonl",
    "sft_corpus.jsonl",
    "sft_metrics.jsonl",
    "metrics.jsonl",
    "eval.jsonl",
    "samples.jsonl",
    "report.html",
    "plots",
    "plots/*.svg",
    "tb",
    "tb/events.out.tfevents.*",
    "checkpoints",
    "checkpoints/sft",
    "checkpoints/stage-short",
    "checkpoints/stage-long",
    "checkpoints/stage-hard",
    "checkpoints/last",
    "checkpoints/last.old",
    "checkpoints/final",
    "checkpoints/*/config.json",
    "checkpoints/*/model.safetensors",
    "checkpoints/*/tokenizer_rstar.json",
    "checkpoints/*/checksums.sha256",
    "checkpoints/last/optimizer.bpk",
    "checkpoints/last/state.json",
];

/// Whether one path segment matches a pattern segment with at most one `*`. A shell variable
/// (`$m` in `for m in sft stage-hard`) matches anything: its values are checked where they are
/// written, not here.
fn segment_matches(pattern: &str, segment: &str) -> bool {
    if segment.starts_with('$') {
        return true;
    }
    match pattern.split_once('*') {
        Some((pre, post)) => {
            segment.len() >= pre.len() + post.len()
                && segment.starts_with(pre)
                && segment.ends_with(post)
        }
        None => pattern == segment,
    }
}

/// Whether `path` (below `runs/tiny/`) is one of [`RUN_OUTPUTS`].
fn is_run_output(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').collect();
    RUN_OUTPUTS.iter().any(|pattern| {
        let pattern: Vec<&str> = pattern.split('/').collect();
        pattern.len() == segments.len()
            && pattern
                .iter()
                .zip(&segments)
                .all(|(p, s)| segment_matches(p, s))
    })
}

/// Every `runs/tiny/…` path that `README.md` and `docs/*.md` mention and the trainer does not
/// write, with its file and line.
fn docs_name_only_run_outputs(root: &Path) -> Vec<String> {
    let mut pages = vec![root.join("README.md")];
    let mut docs = files(&root.join("docs"), ".md");
    docs.sort();
    pages.extend(docs);
    let mut bad = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            for (at, _) in line.match_indices("runs/tiny/") {
                // `myruns/tiny/` is another folder.
                if line[..at]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.')
                {
                    continue;
                }
                let rest = &line[at + "runs/tiny/".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_-./*${}".contains(c)))
                    .unwrap_or(rest.len());
                // A sentence's full stop and a folder's trailing slash are not part of the name.
                let path = rest[..end].trim_end_matches(['.', '/']);
                if !path.is_empty() && !is_run_output(path) {
                    bad.push(format!(
                        "{}:{}: `runs/tiny/{path}` is not a path `cargo xtask train` writes",
                        rel(root, &page),
                        i + 1
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn workspace_leaf_manifests_have_no_burn() {
    assert_clean("no Burn in leaf crates", &no_burn_in_manifests(&root()));
}

#[test]
fn workspace_format_and_tasks_build_nothing_heavy() {
    for package in ["rstar-episode", "rstar-tasks"] {
        let heavy = heavy_in_tree(&tree(package));
        assert_clean(
            &format!("cargo tree -p {package} has no burn/tokio/axum/hyper/clap"),
            &heavy,
        );
    }
}

#[test]
fn workspace_spawns_only_in_the_sandbox() {
    assert_clean(
        "no Command::new or fork outside rstar-toolenv",
        &no_spawn_outside_sandbox(&root()),
    );
}

#[test]
fn workspace_libraries_enable_no_backend() {
    assert_clean("no default backend", &no_default_backend(&root()));
}

#[test]
fn workspace_allows_have_reasons() {
    assert_clean(
        "every #[allow] has a reason",
        &allows_without_reason(&root()),
    );
}

#[test]
fn workspace_headers_and_examples() {
    assert_clean("//! headers and examples", &headers_and_examples(&root()));
}

#[test]
fn workspace_docs_name_only_paths_the_trainer_writes() {
    assert_clean(
        "every runs/tiny/… path in README.md and docs/ is a trainer output",
        &docs_name_only_run_outputs(&root()),
    );
}

#[test]
fn workspace_grpo_without_default_features_builds_no_burn() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--prefix",
            "none",
            "-e",
            "normal",
            "--no-default-features",
            "-p",
            "rstar-grpo",
        ])
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(names.iter().any(|n| n == "rstar-grpo"), "{names:?}");
    let burn: Vec<&String> = names.iter().filter(|n| n.starts_with("burn")).collect();
    assert_clean(
        "cargo tree -p rstar-grpo --no-default-features -e normal has no burn",
        &burn.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
    );
}

/// A scratch repository with one crate, `crates/<name>`, for the planted violations.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rstar-tidy-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes `text` at `path` (relative), creating folders.
    fn write(&self, path: &str, text: &str) -> &Self {
        let path = self.0.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    /// A clean leaf crate in `crates/<name>`.
    fn clean_crate(&self, name: &str) -> &Self {
        self.write(
            &format!("crates/{name}/Cargo.toml"),
            "[package]\nname = \"x\"\n\n[dependencies]\nserde.workspace = true\n",
        )
        .write(
            &format!("crates/{name}/src/lib.rs"),
            "//! A crate.\n//! What it is not.\n\npub fn f() {}\n",
        )
        .write(
            &format!("crates/{name}/examples/demo.rs"),
            "//! Demo.\nfn main() {}\n",
        )
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn planted_clean_tree_passes_every_check() {
    let s = Scratch::new("clean");
    for name in NO_BURN {
        s.clean_crate(name);
    }
    assert_eq!(no_burn_in_manifests(&s.0), Vec::<String>::new());
    assert_eq!(no_spawn_outside_sandbox(&s.0), Vec::<String>::new());
    assert_eq!(no_default_backend(&s.0), Vec::<String>::new());
    assert_eq!(allows_without_reason(&s.0), Vec::<String>::new());
    assert_eq!(headers_and_examples(&s.0), Vec::<String>::new());
}

#[test]
fn planted_burn_in_a_leaf_crate_fails() {
    let s = Scratch::new("burn");
    for name in NO_BURN {
        s.clean_crate(name);
    }
    s.write(
        "crates/roc/Cargo.toml",
        "[package]\nname = \"x\"\n\n[dependencies]\nburn = { workspace = true }\n",
    );
    let bad = no_burn_in_manifests(&s.0);
    assert_eq!(bad, ["crates/roc/Cargo.toml:5: depends on `burn` (Burn)"]);
}

#[test]
fn planted_spawn_outside_the_sandbox_fails() {
    let s = Scratch::new("spawn");
    s.clean_crate("verifier").clean_crate("toolenv").write(
        "crates/verifier/src/lib.rs",
        "//! A.\n//! B.\nfn f() { let _ = std::process::Command::new(\"python3\"); }\n",
    );
    s.write(
        "crates/toolenv/src/lib.rs",
        "//! A.\n//! B.\nfn f() { unsafe { libc::fork() }; }\n",
    );
    s.write(
        "crates/verifier/examples/demo.rs",
        "//! Demo.\nfn main() { let code = \"os.fork()\"; unsafe { libc::fork() }; }\n",
    );
    let bad = no_spawn_outside_sandbox(&s.0);
    assert_eq!(
        bad,
        [
            "crates/verifier/src/lib.rs:3: spawns a process outside rstar-toolenv",
            "crates/verifier/examples/demo.rs:2: spawns a process outside rstar-toolenv",
        ]
    );
}

#[test]
fn planted_default_backend_fails() {
    let s = Scratch::new("backend");
    s.clean_crate("rstar-agent").clean_crate("cli");
    let features = "[package]\nname = \"x\"\n\n[features]\ndefault = [\"flex\"]\nflex = []\n";
    s.write("crates/rstar-agent/Cargo.toml", features);
    s.write("crates/cli/Cargo.toml", features);
    assert_eq!(
        no_default_backend(&s.0),
        ["crates/rstar-agent/Cargo.toml:5: the default features enable the `flex` backend"]
    );
    s.write(
        "crates/rstar-agent/Cargo.toml",
        "[package]\nname = \"x\"\n\n[dependencies]\nburn = { workspace = true, features = [\"flex\"] }\n",
    );
    assert_eq!(
        no_default_backend(&s.0),
        ["crates/rstar-agent/Cargo.toml:5: Burn with the \"flex\" backend always on"]
    );
}

#[test]
fn planted_allow_without_reason_fails() {
    let s = Scratch::new("allow");
    s.clean_crate("roc").write(
        "crates/roc/src/lib.rs",
        "//! A.\n//! B.\n#[allow(dead_code)] // reason: kept for the docs\nfn a() {}\n// reason: an API shape\n#[allow(clippy::too_many_arguments)]\nfn b() {}\n\n#[allow(dead_code)]\nfn c() {}\n/// A doc comment is no reason.\n#[allow(dead_code)]\nfn d() {}\n",
    );
    assert_eq!(
        allows_without_reason(&s.0),
        [
            "crates/roc/src/lib.rs:9: `#[allow(dead_code)]` without a reason (a comment on the line or above)",
            "crates/roc/src/lib.rs:12: `#[allow(dead_code)]` without a reason (a comment on the line or above)",
        ]
    );
}

#[test]
fn planted_missing_header_or_example_fails() {
    let s = Scratch::new("header");
    s.clean_crate("roc").clean_crate("grpo");
    s.write("crates/roc/src/lib.rs", "pub fn f() {}\n");
    std::fs::remove_file(s.0.join("crates/grpo/examples/demo.rs")).unwrap();
    assert_eq!(
        headers_and_examples(&s.0),
        [
            "crates/roc/src/lib.rs: does not start with a `//!` line",
            "crates/grpo: no runnable example in examples/",
            "crates/roc/src/lib.rs: no `//!` crate header (two lines at least)",
        ]
    );
}

#[test]
fn planted_heavy_package_in_a_tree_fails() {
    let names: Vec<String> = [
        "rstar-episode",
        "serde",
        "tokio",
        "burn-tensor",
        "clap_builder",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(heavy_in_tree(&names), ["burn-tensor", "tokio"]);
}

#[test]
fn planted_doc_path_the_trainer_does_not_write_fails() {
    let s = Scratch::new("run-paths");
    s.write(
        "README.md",
        "Serve it: `rstar serve --model runs/tiny/final`.\nPlots land in `runs/tiny/plots/`.\n",
    );
    s.write(
        "docs/serve.md",
        "```sh\nrstar serve --model runs/tiny/checkpoints/final\nfor m in sft stage-hard; do rstar eval --model runs/tiny/checkpoints/$m; done\nls runs/tiny/tb/events.out.tfevents.* runs/tiny-no-roc/x myruns/tiny/x\n```\nThe state is in runs/tiny/checkpoints/last/state.json.\n",
    );
    s.write(
        "docs/agent.md",
        "Evaluate `runs/tiny/checkpoints/stage-8k` or `runs/tiny/checkpoints/final/model.safetensors`.\n",
    );
    assert_eq!(
        docs_name_only_run_outputs(&s.0),
        [
            "README.md:1: `runs/tiny/final` is not a path `cargo xtask train` writes",
            "docs/agent.md:1: `runs/tiny/checkpoints/stage-8k` is not a path `cargo xtask train` writes",
        ]
    );
}

#[test]
fn workspace_python_wheel_builds_no_burn() {
    // The wheel (crates/python) takes rstar-grpo without its `burn` feature; its tree, resolved
    // for that package alone as maturin builds it, holds no Burn.
    let names = tree("rstar-python");
    assert!(
        names.iter().any(|n| n == "rstar-grpo"),
        "cargo tree -p rstar-python lists rstar-grpo"
    );
    let burn: Vec<&String> = names
        .iter()
        .filter(|n| *n == "burn" || n.starts_with("burn-"))
        .collect();
    assert_clean(
        "cargo tree -p rstar-python has no burn",
        &burn.into_iter().cloned().collect::<Vec<_>>(),
    );
}

/// Crates whose normal dependency tree holds no Burn and no tokio, by folder: a user who only
/// wants a run's report compiles neither (issue 39).
const NO_BURN_NO_TOKIO: &[&str] = &["analysis"];

/// Whether a package name is Burn, tokio or the Burn policy crate.
fn burn_or_tokio(name: &str) -> bool {
    name == "burn"
        || name.starts_with("burn-")
        || name == "tokio"
        || name.starts_with("tokio-")
        || name == "rstar-policy"
}

/// The dependency names of a manifest's normal tables (`[dependencies]`,
/// `[target.*.dependencies]`), not the dev or build ones.
fn normal_dependencies(manifest: &str) -> Vec<(usize, String)> {
    let mut table = String::new();
    let mut out = Vec::new();
    for (i, line) in manifest.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            table = trimmed.trim_matches(['[', ']']).to_string();
            // `[dependencies.burn]`
            if let Some((head, name)) = table.split_once("dependencies.")
                && (head.is_empty() || (head.ends_with('.') && head.starts_with("target.")))
            {
                out.push((i + 1, name.to_string()));
            }
            continue;
        }
        let normal = table == "dependencies"
            || (table.starts_with("target.") && table.ends_with(".dependencies"));
        if normal && let Some((name, _)) = trimmed.split_once('=') {
            let name = name.trim().split('.').next().unwrap_or("").trim();
            if !name.is_empty() && !name.starts_with('#') {
                out.push((i + 1, name.to_string()));
            }
        }
    }
    out
}

/// The workspace's crates by package name: `rstar-episode` → `crates/episode/Cargo.toml`.
fn packages(root: &Path) -> Vec<(String, PathBuf)> {
    crate_dirs(root)
        .into_iter()
        .filter_map(|dir| {
            let manifest = dir.join("Cargo.toml");
            let text = std::fs::read_to_string(&manifest).ok()?;
            let name = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = \""))?
                .trim_end_matches('"')
                .to_string();
            Some((name, manifest))
        })
        .collect()
}

/// Burn and tokio among the normal dependencies of the [`NO_BURN_NO_TOKIO`] crates, followed
/// through the workspace crates they depend on, each with the chain that pulls it in.
fn burn_or_tokio_in_manifests(root: &Path) -> Vec<String> {
    let packages = packages(root);
    let mut bad = Vec::new();
    for dir in NO_BURN_NO_TOKIO {
        let start = root.join("crates").join(dir).join("Cargo.toml");
        if !start.is_file() {
            bad.push(format!("{}: missing", rel(root, &start)));
            continue;
        }
        // Depth-first over workspace manifests, each visited once.
        let mut seen: Vec<PathBuf> = Vec::new();
        let mut stack = vec![(start, vec![format!("crates/{dir}")])];
        while let Some((manifest, chain)) = stack.pop() {
            if seen.contains(&manifest) {
                continue;
            }
            seen.push(manifest.clone());
            let text = std::fs::read_to_string(&manifest).unwrap_or_default();
            for (line, dep) in normal_dependencies(&text) {
                if burn_or_tokio(&dep) {
                    bad.push(format!(
                        "{}:{line}: {} → `{dep}` (Burn or tokio)",
                        rel(root, &manifest),
                        chain.join(" → ")
                    ));
                } else if let Some((_, next)) = packages.iter().find(|(name, _)| *name == dep) {
                    let mut chain = chain.clone();
                    chain.push(dep);
                    stack.push((next.clone(), chain));
                }
            }
        }
    }
    bad
}

#[test]
fn workspace_analysis_builds_no_burn_and_no_tokio() {
    assert_clean(
        "no Burn or tokio in the normal dependencies of rstar-analysis",
        &burn_or_tokio_in_manifests(&root()),
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--prefix",
            "none",
            "-e",
            "normal",
            "-p",
            "rstar-analysis",
        ])
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(names.iter().any(|n| n == "rstar-episode"), "{names:?}");
    let mut heavy: Vec<String> = names.into_iter().filter(|n| burn_or_tokio(n)).collect();
    heavy.sort();
    heavy.dedup();
    assert_clean(
        "cargo tree -p rstar-analysis -e normal has no burn and no tokio",
        &heavy,
    );
}

#[test]
fn planted_burn_or_tokio_under_analysis_fails() {
    let s = Scratch::new("analysis-tree");
    s.write(
        "crates/analysis/Cargo.toml",
        "[package]\nname = \"rstar-analysis\"\n\n[dependencies]\nrstar-episode.workspace = true\nserde.workspace = true\n\n[dev-dependencies]\ntokio.workspace = true\nrstar-policy.workspace = true\n",
    )
    .write(
        "crates/episode/Cargo.toml",
        "[package]\nname = \"rstar-episode\"\n\n[dependencies]\nserde.workspace = true\n",
    )
    .write(
        "crates/policy/Cargo.toml",
        "[package]\nname = \"rstar-policy\"\n\n[dependencies]\nburn.workspace = true\n",
    );
    // Clean: tokio and the policy are dev-dependencies only.
    assert_eq!(burn_or_tokio_in_manifests(&s.0), Vec::<String>::new());
    // tokio two crates down, and Burn named directly in a target table.
    s.write(
        "crates/episode/Cargo.toml",
        "[package]\nname = \"rstar-episode\"\n\n[dependencies]\nserde.workspace = true\ntokio = { workspace = true }\n",
    );
    assert_eq!(
        burn_or_tokio_in_manifests(&s.0),
        ["crates/episode/Cargo.toml:6: crates/analysis → rstar-episode → `tokio` (Burn or tokio)"]
    );
    s.write(
        "crates/analysis/Cargo.toml",
        "[package]\nname = \"rstar-analysis\"\n\n[target.'cfg(unix)'.dependencies.burn-tensor]\nworkspace = true\n",
    );
    assert_eq!(
        burn_or_tokio_in_manifests(&s.0),
        ["crates/analysis/Cargo.toml:4: crates/analysis → `burn-tensor` (Burn or tokio)"]
    );
    let names = [
        "rstar-episode",
        "serde",
        "tokio-macros",
        "burn-std",
        "tokenizers",
    ];
    let heavy: Vec<&str> = names.into_iter().filter(|n| burn_or_tokio(n)).collect();
    assert_eq!(heavy, ["tokio-macros", "burn-std"]);
}
