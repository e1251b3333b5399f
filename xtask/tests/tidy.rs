//! Tidy: the workspace's structural invariants as tests (rust-analyzer's pattern), run by
//! `cargo test --workspace` (and so by `cargo xtask ci`).
//!
//! Each check is a function from the repository root to a list of violations, so that the
//! `planted_*` tests can run it on a scratch tree holding one violation and see it fail; the
//! `workspace_*` tests run it on this checkout and print every violation with its file and line.
//!
//! The invariants (see `docs/ARCHITECTURE.md`):
//! - leaf crates build no tensor library: no Burn in the manifests of the verifier, toolenv,
//!   toolserver, roc, scheduler, curriculum, episode and tasks crates;
//! - the dependency rules, one table ([`DEPENDENCY_RULES`]), each a `cargo tree -p PACKAGE`
//!   that must not list some packages: `rstar-episode` and `rstar-tasks` (every edge) no burn,
//!   tokio, axum, hyper or clap; `rstar-python` no Burn; `rstar-grpo --no-default-features` no
//!   Burn; `rstar-analysis` (normal edges, and its manifests followed through the workspace) no
//!   Burn, tokio or `rstar-policy`; `rstar-serve` no `rstar-toolenv`, `rstar-grpo`, `rstar-roc`
//!   or `rstar-curriculum` (issue 39);
//! - processes are spawned only by the sandbox: no `Command::new` and no `fork(` outside
//!   `crates/toolenv`, `xtask`, benches and tests;
//! - `rstar-verifier` does no I/O: its `src/` names no `std::{fs, io, net, process, env, os}`,
//!   no `File`, `OpenOptions`, socket, `Command` or standard-stream type, no `print!`-family or
//!   `dbg!` macro and no `tokio`, `async_std`, `mio`, `libc` or `nix` path (comments and string
//!   literals are not code; `env!` and `include_str!` are compile-time and pass);
//! - `unsafe` code only in the files of [`UNSAFE_FILES`], each with a reason (and no stale
//!   entry);
//! - no library crate enables a Burn backend by default (only the binary, `rstar-cli`, does);
//! - every `#[allow]` says why, in a comment on its line or the line above;
//! - every `.rs` file opens with a `//!` line, and every crate has a `//!` header in its
//!   `lib.rs` (or `main.rs`) and a runnable example in `examples/`;
//! - every crate's docs have a `# Crate features` section whose bullets name exactly the
//!   features of its `[features]` table (`default` aside), a default one marked `(default)`
//!   after its name, `None.` when there are none;
//! - `examples/README.md` has a row for every example in `crates/*/examples/` (`NAME.rs`,
//!   `NAME/main.rs`, `NAME.py`) and no row for one that is not there, and every
//!   `-p PACKAGE --example NAME` in the README, `docs/` and the examples names the package
//!   that has the example;
//! - one test layout: a crate's `tests/` holds `<crate>.rs` (the one test binary, named after
//!   the crate's folder), its modules in `tests/<crate>/` and data in `tests/data/`, and
//!   nothing else but the exceptions of [`TEST_LAYOUT_EXCEPTIONS`], each with a reason;
//! - every `runs/tiny/…` path that `README.md` and `docs/*.md` name is one `cargo xtask train`
//!   writes (issue 44: the docs once served `runs/tiny/final`, which no run has).

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

/// The one module outside rstar-toolenv that starts processes: `rstar bench policy` runs the
/// measured PyTorch peer and `nvidia-smi` (both named by the person running the bench, never by
/// a model), so that the binary that travels to a GPU machine is also its bench (issue #67).
const SPAWNS_A_PEER: &[&str] = &["crates/cli/src/bench.rs"];

fn no_spawn_outside_sandbox(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for dir in crate_dirs(root) {
        // rstar-testdata is test code (the tests' shared helpers, never a dependency of a
        // library or binary): it runs the tests' Python oracles.
        if dir
            .file_name()
            .is_some_and(|n| n == "toolenv" || n == "testdata")
        {
            continue;
        }
        // Tests and benches may run binaries; the library and its examples may not.
        for sub in ["src", "examples"] {
            for path in files(&dir.join(sub), ".rs") {
                if SPAWNS_A_PEER.contains(&rel(root, &path).as_str()) {
                    continue;
                }
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

/// The most lines a source file in `crates/*/src` may hold (issue #69): a room a newcomer can
/// read in one sitting.
const MAX_SOURCE_LINES: usize = 1200;

/// Every `crates/*/src/**.rs` over [`MAX_SOURCE_LINES`].
fn oversized_sources(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for dir in crate_dirs(root) {
        for file in files(&dir.join("src"), ".rs") {
            let lines = std::fs::read_to_string(&file).unwrap().lines().count();
            if lines > MAX_SOURCE_LINES {
                bad.push(format!(
                    "{}: {lines} lines, more than {MAX_SOURCE_LINES}: split it along its sections",
                    rel(root, &file)
                ));
            }
        }
    }
    bad
}

#[test]
fn workspace_source_files_are_at_most_1200_lines() {
    assert_clean("source files of readable size", &oversized_sources(&root()));
}

#[test]
fn planted_oversized_source_fails() {
    let s = Scratch::new("oversized");
    s.clean_crate("episode");
    assert_eq!(oversized_sources(&s.0), Vec::<String>::new());
    s.write(
        "crates/episode/src/big.rs",
        &"// x\n".repeat(MAX_SOURCE_LINES + 1),
    );
    let bad = oversized_sources(&s.0);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("crates/episode/src/big.rs: 1201 lines"),
        "{bad:?}"
    );
}

#[test]
fn workspace_docs_name_only_paths_the_trainer_writes() {
    assert_clean(
        "every runs/tiny/… path in README.md and docs/ is a trainer output",
        &docs_name_only_run_outputs(&root()),
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

// ---------------------------------------------------------------------------------------------
// Dependency rules (issue 39): what each package's `cargo tree` must not hold.

/// One row of [`DEPENDENCY_RULES`]: `cargo tree -p PACKAGE -e EDGES ARGS…` lists none of
/// `forbidden` (a name, or the name followed by `-…`: `burn` covers `burn-tensor`, not
/// `clap_builder`) and does list `must_list` (so a broken query cannot pass).
struct DependencyRule {
    package: &'static str,
    /// `normal` (what a user of the library compiles) or `all` (dev and build ones too).
    edges: &'static str,
    /// Extra `cargo tree` arguments (`--no-default-features`).
    args: &'static [&'static str],
    forbidden: &'static [&'static str],
    must_list: &'static str,
    /// Also follow the normal dependencies through the workspace's manifests, which names the
    /// chain that pulls a forbidden package in (and runs on a scratch tree, without cargo).
    follow_manifests: bool,
    why: &'static str,
}

/// The dependency rules, one row a package.
const DEPENDENCY_RULES: &[DependencyRule] = &[
    DependencyRule {
        package: "rstar-episode",
        edges: "all",
        args: &[],
        forbidden: &["burn", "tokio", "axum", "hyper", "clap"],
        must_list: "serde",
        follow_manifests: false,
        why: "the turn format builds no tensor library, runtime, server or CLI",
    },
    DependencyRule {
        package: "rstar-tasks",
        edges: "all",
        args: &[],
        forbidden: &["burn", "tokio", "axum", "hyper", "clap"],
        must_list: "rstar-episode",
        follow_manifests: false,
        why: "the task set builds no tensor library, runtime, server or CLI",
    },
    DependencyRule {
        package: "rstar-python",
        edges: "all",
        args: &[],
        forbidden: &["burn"],
        must_list: "rstar-grpo",
        follow_manifests: false,
        why: "the wheel takes rstar-grpo without its `burn` feature, resolved alone as maturin builds it",
    },
    DependencyRule {
        package: "rstar-grpo",
        edges: "normal",
        args: &["--no-default-features"],
        forbidden: &["burn"],
        must_list: "rstar-grpo",
        follow_manifests: false,
        why: "without its default `burn` feature the crate is the advantages and configs alone",
    },
    DependencyRule {
        package: "rstar-analysis",
        edges: "normal",
        args: &[],
        forbidden: &["burn", "tokio", "rstar-policy"],
        must_list: "rstar-episode",
        follow_manifests: true,
        why: "a user who only wants a run's report compiles neither Burn nor tokio",
    },
    DependencyRule {
        package: "rstar-serve",
        edges: "normal",
        args: &[],
        forbidden: &[
            "rstar-toolenv",
            "rstar-grpo",
            "rstar-roc",
            "rstar-curriculum",
        ],
        must_list: "rstar-engine",
        follow_manifests: true,
        why: "serving a policy needs neither the sandbox nor the trainer's crates",
    },
    DependencyRule {
        package: "rstar-rollout",
        edges: "normal",
        args: &[],
        forbidden: &["rstar-analysis", "rstar-curriculum", "rstar-toolserver"],
        must_list: "rstar-engine",
        follow_manifests: true,
        why: "the rollout drivers need neither the report, the curriculum nor the tool server's client (issue #63): the trainer wires the servers in (`rstar_train::tools`)",
    },
];

/// The rule of `package`.
fn rule(package: &str) -> &'static DependencyRule {
    DEPENDENCY_RULES
        .iter()
        .find(|r| r.package == package)
        .expect("a rule of DEPENDENCY_RULES")
}

/// Whether package `name` is `forbidden` or one of its `forbidden-…` family.
fn is_forbidden(name: &str, forbidden: &[&str]) -> bool {
    forbidden
        .iter()
        .any(|f| name == *f || name.strip_prefix(f).is_some_and(|r| r.starts_with('-')))
}

/// The packages of a `cargo tree --prefix none` listing that break `rule`, sorted, once each;
/// and a violation when the listing lacks `rule.must_list`.
fn rule_violations(rule: &DependencyRule, names: &[String]) -> Vec<String> {
    let mut bad: Vec<String> = names
        .iter()
        .filter(|n| is_forbidden(n, rule.forbidden))
        .map(|n| format!("{}: `{n}` ({})", rule.package, rule.why))
        .collect();
    bad.sort();
    bad.dedup();
    if !names.iter().any(|n| n == rule.must_list) {
        bad.push(format!(
            "{}: the tree does not list `{}`; the query is wrong",
            rule.package, rule.must_list
        ));
    }
    bad
}

/// The packages `cargo tree` lists for one rule, one name a line.
fn rule_tree(rule: &DependencyRule) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "--prefix", "none", "-e", rule.edges])
        .args(rule.args)
        .args(["-p", rule.package])
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {}: {}",
        rule.package,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// The forbidden packages among the normal dependencies of `package`, followed through the
/// workspace crates it depends on, each with the chain that pulls it in.
fn forbidden_in_manifests(root: &Path, package: &str, forbidden: &[&str]) -> Vec<String> {
    let packages = packages(root);
    let Some((_, start)) = packages.iter().find(|(name, _)| name == package) else {
        return vec![format!("{package}: no crate under crates/ has this name")];
    };
    let mut bad = Vec::new();
    // Depth-first over workspace manifests, each visited once.
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut stack = vec![(start.clone(), vec![package.to_string()])];
    while let Some((manifest, chain)) = stack.pop() {
        if seen.contains(&manifest) {
            continue;
        }
        seen.push(manifest.clone());
        let text = std::fs::read_to_string(&manifest).unwrap_or_default();
        for (line, dep) in normal_dependencies(&text) {
            if is_forbidden(&dep, forbidden) {
                bad.push(format!(
                    "{}:{line}: {} → `{dep}`",
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
    bad
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

/// The package name of a manifest (`[package]`'s `name`).
fn package_name(manifest: &str) -> Option<String> {
    Some(
        manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = \""))?
            .trim_end_matches('"')
            .to_string(),
    )
}

/// The workspace's crates by package name: `rstar-episode` → `crates/episode/Cargo.toml`.
fn packages(root: &Path) -> Vec<(String, PathBuf)> {
    crate_dirs(root)
        .into_iter()
        .filter_map(|dir| {
            let manifest = dir.join("Cargo.toml");
            let name = package_name(&std::fs::read_to_string(&manifest).ok()?)?;
            Some((name, manifest))
        })
        .collect()
}

#[test]
fn workspace_dependency_rules() {
    let mut bad = Vec::new();
    for rule in DEPENDENCY_RULES {
        if rule.follow_manifests {
            bad.extend(forbidden_in_manifests(
                &root(),
                rule.package,
                rule.forbidden,
            ));
        }
        bad.extend(rule_violations(rule, &rule_tree(rule)));
    }
    assert_clean("the dependency rules (DEPENDENCY_RULES)", &bad);
}

#[test]
fn planted_forbidden_package_in_a_tree_fails() {
    let serve = rule("rstar-serve");
    let names = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rule_violations(
            serve,
            &names(&["rstar-serve", "rstar-engine", "tokio", "burn"])
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        rule_violations(
            serve,
            &names(&["rstar-engine", "rstar-roc", "rstar-roc", "rstar-toolserver"])
        ),
        [
            "rstar-serve: `rstar-roc` (serving a policy needs neither the sandbox nor the trainer's crates)"
        ]
    );
    let episode = rule("rstar-episode");
    assert_eq!(
        rule_violations(
            episode,
            &names(&["serde", "tokio", "burn-tensor", "clap_builder", "tokio"])
        ),
        [
            "rstar-episode: `burn-tensor` (the turn format builds no tensor library, runtime, server or CLI)",
            "rstar-episode: `tokio` (the turn format builds no tensor library, runtime, server or CLI)",
        ]
    );
    assert_eq!(
        rule_violations(episode, &names(&["rstar-episode"])),
        ["rstar-episode: the tree does not list `serde`; the query is wrong"]
    );
}

#[test]
fn planted_forbidden_package_in_the_manifests_fails() {
    let s = Scratch::new("dependency-rules");
    let forbidden = &["burn", "tokio", "rstar-policy"];
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
    assert_eq!(
        forbidden_in_manifests(&s.0, "rstar-analysis", forbidden),
        Vec::<String>::new()
    );
    // tokio two crates down, and Burn named directly in a target table.
    s.write(
        "crates/episode/Cargo.toml",
        "[package]\nname = \"rstar-episode\"\n\n[dependencies]\nserde.workspace = true\ntokio = { workspace = true }\n",
    );
    assert_eq!(
        forbidden_in_manifests(&s.0, "rstar-analysis", forbidden),
        ["crates/episode/Cargo.toml:6: rstar-analysis → rstar-episode → `tokio`"]
    );
    s.write(
        "crates/analysis/Cargo.toml",
        "[package]\nname = \"rstar-analysis\"\n\n[target.'cfg(unix)'.dependencies.burn-tensor]\nworkspace = true\n",
    );
    assert_eq!(
        forbidden_in_manifests(&s.0, "rstar-analysis", forbidden),
        ["crates/analysis/Cargo.toml:4: rstar-analysis → `burn-tensor`"]
    );
    // The server through the engine to the sandbox.
    s.write(
        "crates/serve/Cargo.toml",
        "[package]\nname = \"rstar-serve\"\n\n[dependencies]\nrstar-engine.workspace = true\n",
    )
    .write(
        "crates/engine/Cargo.toml",
        "[package]\nname = \"rstar-engine\"\n\n[dependencies]\nrstar-policy.workspace = true\nrstar-toolenv.workspace = true\n",
    );
    assert_eq!(
        forbidden_in_manifests(&s.0, "rstar-serve", rule("rstar-serve").forbidden),
        ["crates/engine/Cargo.toml:6: rstar-serve → rstar-engine → `rstar-toolenv`"]
    );
}

// ---------------------------------------------------------------------------------------------
// Source scans: what the compiler reads, without comments and literals.

/// `text` with every comment and every string and character literal blanked (newlines kept, so
/// line numbers still hold): what the compiler reads as code. Lifetimes (`'a`) stay code.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            // Block comments nest.
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            continue;
        }
        // A raw string, `r"…"`, `r#"…"#`, `br"…"` (not an identifier ending in r, not `r#ident`).
        let after_ident = i > 0 && ident(chars[i - 1]);
        if !after_ident && (c == 'r' || (c == 'b' && next == Some('r'))) {
            let mut j = i + if c == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                out.extend(std::iter::repeat_n(' ', j + 1 - i));
                j += 1;
                while j < chars.len() {
                    if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                        out.extend(std::iter::repeat_n(' ', hashes + 1));
                        j += hashes + 1;
                        break;
                    }
                    out.push(blank(chars[j]));
                    j += 1;
                }
                i = j;
                continue;
            }
        }
        if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() {
                match chars[i] {
                    '\\' => {
                        out.push(' ');
                        if let Some(&n) = chars.get(i + 1) {
                            out.push(blank(n));
                        }
                        i += 2;
                    }
                    '"' => {
                        out.push(' ');
                        i += 1;
                        break;
                    }
                    ch => {
                        out.push(blank(ch));
                        i += 1;
                    }
                }
            }
            continue;
        }
        // A character literal (`'x'`, `'\''`, `'\u{1F600}'`); `'a` alone is a lifetime.
        if c == '\'' {
            if next == Some('\\') {
                let mut j = i + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                let end = j.min(chars.len() - 1);
                out.extend(std::iter::repeat_n(' ', end + 1 - i));
                i = end + 1;
                continue;
            }
            if chars.get(i + 2) == Some(&'\'') {
                out.push_str("   ");
                i += 3;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The tokens of code (from [`code_only`]): identifiers whole, every other non-space character
/// alone, each with its line.
fn tokens(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut word = String::new();
    for c in code.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            out.push((line, std::mem::take(&mut word)));
        }
        if c == '\n' {
            line += 1;
        } else if !c.is_whitespace() {
            out.push((line, c.to_string()));
        }
    }
    if !word.is_empty() {
        out.push((line, word));
    }
    out
}

#[test]
fn planted_comments_and_literals_are_not_code() {
    let text = "let a = \"unsafe { x }\"; // unsafe\n/* unsafe /* nested */ still */ let b = r#\"std::fs \"quoted\"\"#;\nlet c = '\"'; let d = '\\''; fn f<'a>(x: &'a str) {}\nlet e = b\"\\\"unsafe\"; unsafe {}\n";
    let code = code_only(text);
    assert_eq!(code.lines().count(), 4);
    let words: Vec<(usize, String)> = tokens(&code)
        .into_iter()
        .filter(|(_, t)| t.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .collect();
    let names: Vec<&str> = words.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(
        names,
        [
            "let", "a", "let", "b", "let", "c", "let", "d", "fn", "f", "a", "x", "a", "str", "let",
            "e", "b", "unsafe"
        ]
    );
    assert_eq!(words.last().unwrap().0, 4);
}

// ---------------------------------------------------------------------------------------------
// `rstar-verifier` does no I/O.

/// The `std` modules whose use is I/O (files, sockets, processes, the environment, standard
/// streams, OS handles). Formatting goes through `std::fmt`, so `std::io` is out altogether.
const IO_MODULES: &[&str] = &["fs", "io", "net", "process", "env", "os"];

/// Names that are I/O however they are imported (a `use` of them is caught above, a re-export
/// through another crate here).
const IO_NAMES: &[&str] = &[
    "File",
    "OpenOptions",
    "TcpStream",
    "TcpListener",
    "UdpSocket",
    "UnixStream",
    "UnixListener",
    "Command",
    "Stdin",
    "Stdout",
    "Stderr",
];

/// Macros that write to the standard streams.
const IO_MACROS: &[&str] = &["print", "println", "eprint", "eprintln", "dbg"];

/// Crates whose paths are I/O or OS calls.
const IO_CRATES: &[&str] = &["tokio", "async_std", "mio", "libc", "nix"];

/// Every I/O token in one file's code, with its line. Compile-time macros (`env!`,
/// `include_str!`) are not I/O at run time and pass.
fn io_uses(text: &str) -> Vec<(usize, String)> {
    let toks = tokens(&code_only(text));
    let tok = |k: usize| toks.get(k).map_or("", |(_, t)| t.as_str());
    let mut bad = Vec::new();
    for (k, (line, t)) in toks.iter().enumerate() {
        let path_follows = tok(k + 1) == ":" && tok(k + 2) == ":";
        if t == "std" && path_follows {
            if IO_MODULES.contains(&tok(k + 3)) {
                bad.push((*line, format!("std::{}", tok(k + 3))));
            } else if tok(k + 3) == "{" {
                // `use std::{fmt, io::Write}`: the first name of each item at depth one.
                let mut depth = 0;
                for (j, (at, name)) in toks.iter().enumerate().skip(k + 3) {
                    match name.as_str() {
                        "{" => depth += 1,
                        "}" => depth -= 1,
                        name if depth == 1
                            && matches!(tok(j - 1), "{" | ",")
                            && IO_MODULES.contains(&name) =>
                        {
                            bad.push((*at, format!("std::{name}")));
                        }
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                }
            }
        } else if IO_NAMES.contains(&t.as_str())
            || (IO_MACROS.contains(&t.as_str()) && tok(k + 1) == "!")
            || (IO_CRATES.contains(&t.as_str()) && path_follows)
        {
            bad.push((*line, t.clone()));
        }
    }
    bad
}

fn verifier_does_no_io(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for path in files(&root.join("crates/verifier/src"), ".rs") {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for (line, what) in io_uses(&text) {
            bad.push(format!(
                "{}:{line}: `{what}` is I/O; the verifier is a pure function of its strings",
                rel(root, &path)
            ));
        }
    }
    bad
}

#[test]
fn workspace_verifier_does_no_io() {
    assert_clean("rstar-verifier does no I/O", &verifier_does_no_io(&root()));
}

#[test]
fn planted_io_in_the_verifier_fails() {
    let s = Scratch::new("verifier-io");
    s.clean_crate("verifier").write(
        "crates/verifier/src/lib.rs",
        "//! A.\n//! Never `std::fs`, never println!.\nuse std::fmt::{self, Write as _};\nuse std::collections::BTreeMap;\nconst P: &str = env!(\"CARGO_PKG_NAME\");\n",
    );
    assert_eq!(verifier_does_no_io(&s.0), Vec::<String>::new());
    s.write(
        "crates/verifier/src/norm.rs",
        "//! A.\nuse std::{fmt, io::Write};\nuse std::fs;\nfn f() {\n    let _ = \"std::net\";\n    println!(\"x\");\n    let _ = std::env::var(\"X\");\n    let _ = tokio::spawn(async {});\n}\nfn g(_: File) {}\n",
    );
    assert_eq!(
        verifier_does_no_io(&s.0),
        [
            "crates/verifier/src/norm.rs:2: `std::io` is I/O; the verifier is a pure function of its strings",
            "crates/verifier/src/norm.rs:3: `std::fs` is I/O; the verifier is a pure function of its strings",
            "crates/verifier/src/norm.rs:6: `println` is I/O; the verifier is a pure function of its strings",
            "crates/verifier/src/norm.rs:7: `std::env` is I/O; the verifier is a pure function of its strings",
            "crates/verifier/src/norm.rs:8: `tokio` is I/O; the verifier is a pure function of its strings",
            "crates/verifier/src/norm.rs:10: `File` is I/O; the verifier is a pure function of its strings",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// `unsafe` only in listed files.

/// The files that may hold `unsafe` code (the workspace denies `unsafe_code`; each of these
/// allows it with a reason, and each block has a SAFETY note), with why.
const UNSAFE_FILES: &[(&str, &str)] = &[
    (
        "crates/toolenv/src/sandbox.rs",
        "fork/pre_exec hooks, prctl, seccomp, unshare and kill are libc calls",
    ),
    (
        "crates/policy/src/alloc.rs",
        "mallopt and mallinfo2, the C calls that tune and read glibc's allocator",
    ),
    (
        "crates/policy/src/fused/cpu.rs",
        "calling a kernel's #[target_feature] copy once the CPU was found to have its features",
    ),
    (
        "crates/policy/src/fused/gemm.rs",
        "the `gemm` crate takes raw pointers and strides; one call, after bounds checks",
    ),
    (
        "crates/testdata/src/alloc.rs",
        "a counting `GlobalAlloc` implements an unsafe trait (the memory test and benchmark)",
    ),
    (
        "crates/toolenv/tests/toolenv/adversarial.rs",
        "kill(2) stops a sentinel child",
    ),
    (
        "crates/toolenv/tests/toolenv/lifecycle.rs",
        "kill(2) simulates a dead or hung worker",
    ),
];

/// Every `.rs` file under `crates/`, `xtask/` and `examples/` whose code (not its comments or
/// strings) says `unsafe` and that `allowed` does not list, and every entry of `allowed` whose
/// file has none (so the list stays true).
fn unsafe_outside(root: &Path, allowed: &[(&str, &str)]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut used = Vec::new();
    for top in ["crates", "xtask", "examples"] {
        for path in files(&root.join(top), ".rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let Some((line, _)) = tokens(&code_only(&text))
                .into_iter()
                .find(|(_, t)| t == "unsafe")
            else {
                continue;
            };
            let file = rel(root, &path);
            if allowed.iter().any(|(f, _)| *f == file) {
                used.push(file);
            } else {
                bad.push(format!(
                    "{file}:{line}: `unsafe` in a file UNSAFE_FILES does not list (add it with a reason, or do without)"
                ));
            }
        }
    }
    for (file, _) in allowed {
        if !used.iter().any(|u| u == file) {
            bad.push(format!(
                "{file}: listed in UNSAFE_FILES but holds no `unsafe`: drop the entry"
            ));
        }
    }
    bad
}

#[test]
fn workspace_unsafe_only_in_listed_files() {
    assert_clean(
        "unsafe only in UNSAFE_FILES",
        &unsafe_outside(&root(), UNSAFE_FILES),
    );
}

#[test]
fn planted_unsafe_outside_the_list_fails() {
    let s = Scratch::new("unsafe");
    s.clean_crate("roc").clean_crate("toolenv").write(
        "crates/toolenv/src/lib.rs",
        "//! A.\n//! B.\nfn f() { unsafe { libc::kill(1, 0) }; }\n",
    );
    s.write(
        "crates/roc/src/lib.rs",
        "//! A.\n//! No `unsafe` here.\n#![deny(unsafe_code)]\nconst CSP: &str = \"'unsafe-inline'\";\n",
    );
    let allowed = [("crates/toolenv/src/lib.rs", "libc")];
    assert_eq!(unsafe_outside(&s.0, &allowed), Vec::<String>::new());
    s.write(
        "crates/roc/src/lib.rs",
        "//! A.\n//! B.\n\nunsafe impl Send for X {}\n",
    );
    s.write("crates/toolenv/src/lib.rs", "//! A.\n//! B.\n");
    assert_eq!(
        unsafe_outside(&s.0, &allowed),
        [
            "crates/roc/src/lib.rs:4: `unsafe` in a file UNSAFE_FILES does not list (add it with a reason, or do without)",
            "crates/toolenv/src/lib.rs: listed in UNSAFE_FILES but holds no `unsafe`: drop the entry",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Each crate's documented features are its `[features]`.

/// A manifest's `[features]`: every feature but `default`, and the features `default` enables
/// (its `dep:…` and `crate/feature` entries are not features of this crate).
fn manifest_features(manifest: &str) -> (Vec<String>, Vec<String>) {
    let mut in_features = false;
    let mut names = Vec::new();
    let mut default = String::new();
    let mut in_default = false;
    for line in manifest.lines() {
        let t = line.split('#').next().unwrap_or("").trim();
        if in_default {
            default.push_str(t);
            in_default = !t.contains(']');
            continue;
        }
        if t.starts_with('[') {
            in_features = t == "[features]";
            continue;
        }
        if !in_features {
            continue;
        }
        if let Some((name, value)) = t.split_once('=') {
            let name = name.trim();
            if name == "default" {
                default = value.to_string();
                in_default = !value.contains(']');
            } else {
                names.push(name.to_string());
            }
        }
    }
    let default = default
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|f| !f.contains('/') && !f.starts_with("dep:"))
        .map(str::to_string)
        .collect();
    (names, default)
}

/// The features a crate's `# Crate features` section names, each with whether its bullet says
/// `(default)`; `None` when the crate docs have no such section. A bullet names its features in
/// backticks before its first colon: ``- `fusion`, `autotune`: …``, ``- `burn` (default): …``.
fn documented_features(lib: &str) -> Option<Vec<(String, bool)>> {
    let mut in_fence = false;
    let mut in_section = false;
    let mut found = false;
    let mut out = Vec::new();
    for line in lib.lines().take_while(|l| l.starts_with("//!")) {
        let doc = line.trim_start_matches("//!").trim_start();
        if doc.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if doc.starts_with("# ") {
            in_section = doc == "# Crate features";
            found |= in_section;
            continue;
        }
        let Some(bullet) = doc.strip_prefix("- ").filter(|_| in_section) else {
            continue;
        };
        let head = bullet.split(": ").next().unwrap_or("");
        let mut rest = head;
        while let Some((_, after)) = rest.split_once('`') {
            let Some((name, tail)) = after.split_once('`') else {
                break;
            };
            out.push((name.to_string(), tail.starts_with(" (default)")));
            rest = tail;
        }
    }
    found.then_some(out)
}

fn features_documented(root: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for dir in crate_dirs(root) {
        let lib = dir.join("src/lib.rs");
        let entry = if lib.is_file() {
            lib
        } else {
            dir.join("src/main.rs")
        };
        let file = rel(root, &entry);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        let (features, default) = manifest_features(&manifest);
        let Some(documented) =
            documented_features(&std::fs::read_to_string(&entry).unwrap_or_default())
        else {
            bad.push(format!(
                "{file}: no `# Crate features` section in the crate docs (say `None.` when there are none)"
            ));
            continue;
        };
        for (name, says_default) in &documented {
            if !features.contains(name) {
                bad.push(format!(
                    "{file}: `# Crate features` names `{name}`, which is not in Cargo.toml's [features]"
                ));
            } else if *says_default != default.contains(name) {
                let fix = if *says_default {
                    "says `(default)`, but the `default` feature does not enable it"
                } else {
                    "is a default feature: its bullet says `(default)` after the name"
                };
                bad.push(format!("{file}: `{name}` {fix}"));
            }
        }
        for name in &features {
            if !documented.iter().any(|(d, _)| d == name) {
                bad.push(format!(
                    "{file}: feature `{name}` of Cargo.toml is not in `# Crate features`"
                ));
            }
        }
    }
    bad
}

#[test]
fn workspace_features_are_documented() {
    assert_clean(
        "each crate's `# Crate features` lists its [features]",
        &features_documented(&root()),
    );
}

#[test]
fn planted_undocumented_feature_fails() {
    let s = Scratch::new("features");
    s.clean_crate("roc").clean_crate("grpo");
    s.write(
        "crates/roc/src/lib.rs",
        "//! A.\n//!\n//! ```\n//! # Crate features\n//! - `fake`: in a code block\n//! ```\n//!\n//! # Crate features\n//! None.\n#![warn(missing_docs)]\n",
    );
    s.write(
        "crates/grpo/Cargo.toml",
        "[package]\nname = \"x\"\n\n[features]\ndefault = [\n    \"burn\", # the loss\n    \"dep:serde\",\n]\nburn = [\"dep:burn\"]\nfusion = [\"burn/fusion\"]\nautotune = []\n\n[dependencies]\nserde = { workspace = true, optional = true }\n",
    );
    s.write(
        "crates/grpo/src/lib.rs",
        "//! A.\n//!\n//! # Crate features\n//! - `burn` (default): the loss.\n//! - `fusion`, `autotune`: CubeCL's, for `wgpu`: see `burn`.\n//!\n//! # Other\n//! - `not_a_feature`: another section.\n",
    );
    assert_eq!(features_documented(&s.0), Vec::<String>::new());
    s.write(
        "crates/grpo/src/lib.rs",
        "//! A.\n//!\n//! # Crate features\n//! - `burn`: the loss.\n//! - `fusion` (default), `flex`: CubeCL's.\n",
    );
    s.write("crates/roc/src/lib.rs", "//! A.\n//! B.\n");
    assert_eq!(
        features_documented(&s.0),
        [
            "crates/grpo/src/lib.rs: `burn` is a default feature: its bullet says `(default)` after the name",
            "crates/grpo/src/lib.rs: `fusion` says `(default)`, but the `default` feature does not enable it",
            "crates/grpo/src/lib.rs: `# Crate features` names `flex`, which is not in Cargo.toml's [features]",
            "crates/grpo/src/lib.rs: feature `autotune` of Cargo.toml is not in `# Crate features`",
            "crates/roc/src/lib.rs: no `# Crate features` section in the crate docs (say `None.` when there are none)",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// `examples/README.md` lists every example, and commands name the package that has it.

/// Every runnable example: `(package, name, file)`, from `crates/*/examples/`: `NAME.rs`,
/// `NAME/main.rs`, and the Python ones as `NAME.py`.
fn examples(root: &Path) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for dir in crate_dirs(root) {
        let Some(package) =
            package_name(&std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default())
        else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(dir.join("examples")) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let name = if path.is_dir() {
                path.join("main.rs").is_file().then_some(name)
            } else if let Some(stem) = name.strip_suffix(".rs") {
                Some(stem.to_string())
            } else {
                name.ends_with(".py").then_some(name)
            };
            if let Some(name) = name {
                out.push((package.clone(), name, rel(root, &path)));
            }
        }
    }
    out.sort();
    out
}

/// The `-p PACKAGE` (the last before `--example`) and `--example NAME` of a command line; not a
/// placeholder's (`-p CRATE --example NAME`, without a lowercase letter).
fn example_command(line: &str) -> Option<(String, String)> {
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == '`')
        .filter(|w| !w.is_empty())
        .collect();
    let at = words.iter().position(|w| *w == "--example")?;
    let name = words
        .get(at + 1)?
        .trim_end_matches(['.', ',', ';', ':', ')']);
    let package = words[..at]
        .iter()
        .rposition(|w| *w == "-p" || *w == "--package")
        .and_then(|p| words.get(p + 1))?;
    let placeholder = |w: &str| !w.chars().any(|c| c.is_ascii_lowercase());
    if placeholder(package) || placeholder(name) {
        return None;
    }
    Some((package.to_string(), name.to_string()))
}

fn examples_indexed(root: &Path) -> Vec<String> {
    let examples = examples(root);
    let crates: Vec<(String, String)> = crate_dirs(root)
        .into_iter()
        .filter_map(|dir| {
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
            Some((rel(root, &dir), package_name(&manifest)?))
        })
        .collect();
    let index = root.join("examples/README.md");
    let text = std::fs::read_to_string(&index).unwrap_or_default();
    let mut bad = Vec::new();
    let mut rows: Vec<(String, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(row) = line.strip_prefix("| `") else {
            continue;
        };
        let Some((name, _)) = row.split_once('`') else {
            continue;
        };
        let at = format!("examples/README.md:{}: `{name}`", i + 1);
        // A Rust example by its `cargo run` line, a Python one by its path.
        let key = if let Some((package, example)) = example_command(line) {
            if example != name {
                bad.push(format!("{at}: the command runs `--example {example}`"));
            }
            Some(package)
        } else {
            crates.iter().find_map(|(dir, package)| {
                line.contains(&format!("{dir}/examples/{name}"))
                    .then(|| package.clone())
            })
        };
        let Some(package) = key else {
            bad.push(format!(
                "{at}: the row has no `cargo run -p PACKAGE --example {name}` nor a path to it"
            ));
            continue;
        };
        if !examples.iter().any(|(p, n, _)| *p == package && n == name) {
            bad.push(format!("{at}: `{package}` has no example `{name}`"));
        }
        rows.push((package, name.to_string()));
    }
    for (package, name, file) in &examples {
        if !rows.iter().any(|(p, n)| p == package && n == name) {
            bad.push(format!(
                "examples/README.md: no row for `{file}` (package `{package}`)"
            ));
        }
    }
    // Every `-p PACKAGE --example NAME` in the pages and the examples' own headers.
    let mut pages = vec![root.join("README.md")];
    pages.extend(files(&root.join("docs"), ".md"));
    for (_, _, file) in &examples {
        pages.push(root.join(file));
    }
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let Some((package, name)) = example_command(line) else {
                continue;
            };
            if !examples.iter().any(|(p, n, _)| *p == package && *n == name) {
                let owner = examples
                    .iter()
                    .find(|(_, n, _)| *n == name)
                    .map_or(String::new(), |(p, _, _)| format!(" (it is `{p}`'s)"));
                bad.push(format!(
                    "{}:{}: `-p {package} --example {name}`: `{package}` has no such example{owner}",
                    rel(root, &page),
                    i + 1
                ));
            }
        }
    }
    bad
}

#[test]
fn workspace_examples_are_indexed() {
    assert_clean(
        "examples/README.md lists every example and commands name its package",
        &examples_indexed(&root()),
    );
}

#[test]
fn planted_unindexed_or_moved_example_fails() {
    let s = Scratch::new("examples");
    s.write(
        "crates/roc/Cargo.toml",
        "[package]\nname = \"rstar-roc\"\n",
    )
    .write("crates/roc/examples/downsample.rs", "//! `cargo run -p rstar-roc --example downsample`.\nfn main() {}\n")
    .write("crates/python/Cargo.toml", "[package]\nname = \"rstar-python\"\n")
    .write("crates/python/examples/rewards.py", "")
    .write("crates/policy/Cargo.toml", "[package]\nname = \"rstar-policy\"\n")
    .write("crates/policy/examples/random_hf_model.rs", "fn main() {}\n")
    .write(
        "examples/README.md",
        "| example | command | shows |\n|---|---|---|\n| `downsample` | `cargo run -p rstar-roc --example downsample` | RoC |\n| `rewards.py` | `python crates/python/examples/rewards.py` | the wheel |\n| `random_hf_model` | `cargo run --release -p rstar-policy --example random_hf_model -- OUT \\| X` | a model |\n",
    )
    .write(
        "docs/policy.md",
        "Run one with `cargo run -p CRATE --example NAME`:\n```sh\ncargo build -p rstar-cli && cargo build --release -p rstar-policy --example random_hf_model\n```\n",
    );
    assert_eq!(examples_indexed(&s.0), Vec::<String>::new());
    // An example without a row, a row without an example, and a command naming the old home.
    s.write("crates/roc/examples/sweep.rs", "fn main() {}\n").write(
        "examples/README.md",
        "| `downsample` | `cargo run -p rstar-roc --example downsample` | RoC |\n| `rewards.py` | `python crates/python/examples/rewards.py` | the wheel |\n| `random_hf_model` | `cargo run -p rstar-agent --example random_hf_model` | a model |\n| `gone` | `cargo run -p rstar-roc --example gone` | removed |\n| `typo` | `cargo run -p rstar-roc --example downsample` | wrong name |\n",
    );
    assert_eq!(
        examples_indexed(&s.0),
        [
            "examples/README.md:3: `random_hf_model`: `rstar-agent` has no example `random_hf_model`",
            "examples/README.md:4: `gone`: `rstar-roc` has no example `gone`",
            "examples/README.md:5: `typo`: the command runs `--example downsample`",
            "examples/README.md:5: `typo`: `rstar-roc` has no example `typo`",
            "examples/README.md: no row for `crates/policy/examples/random_hf_model.rs` (package `rstar-policy`)",
            "examples/README.md: no row for `crates/roc/examples/sweep.rs` (package `rstar-roc`)",
        ]
    );
    s.write(
        "crates/roc/examples/downsample.rs",
        "//! `cargo run -p rstar-agent --example downsample`.\nfn main() {}\n",
    );
    assert!(examples_indexed(&s.0).contains(
        &"crates/roc/examples/downsample.rs:1: `-p rstar-agent --example downsample`: `rstar-agent` has no such example (it is `rstar-roc`'s)"
            .to_string()
    ));
}

// ---------------------------------------------------------------------------------------------
// One test layout.

/// What may sit in a crate's `tests/` beside `<crate>.rs`, `<crate>/` and `data/`, with why.
const TEST_LAYOUT_EXCEPTIONS: &[(&str, &str)] = &[
    (
        "crates/policy/tests/memory.rs",
        "replaces the global allocator to measure the heap's peak, so it needs a process of its own",
    ),
    (
        "crates/python/tests",
        "the wheel's pytest suite (`cargo xtask ci` runs it with pytest), not a cargo test binary",
    ),
];

/// Every entry of a crate's `tests/` that is not the crate's one test binary (`tests/<crate>.rs`,
/// named after the crate's folder, its modules in `tests/<crate>/`), `tests/data/` or an
/// exception; every `[[test]]` whose path is not that file; every stale exception.
fn test_layout(root: &Path, exceptions: &[(&str, &str)]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut used = Vec::new();
    for dir in crate_dirs(root) {
        let short = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tests = dir.join("tests");
        let entry = format!("{}/tests/{short}.rs", rel(root, &dir));
        let whole = exceptions
            .iter()
            .find(|(p, _)| tests.is_dir() && *p == rel(root, &tests));
        if let Some(exception) = whole {
            used.push(exception.0);
            continue;
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&tests)
            .map(|e| e.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        entries.sort();
        for path in entries {
            let file = rel(root, &path);
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let expected = if path.is_dir() {
                name == short || name == "data"
            } else {
                file == entry
            };
            if expected {
                continue;
            }
            if let Some(exception) = exceptions.iter().find(|(p, _)| *p == file) {
                used.push(exception.0);
                continue;
            }
            bad.push(format!(
                "{file}: tests/ holds `{short}.rs` (modules in `{short}/`) and `data/` only; move it into `tests/{short}/` as a module"
            ));
        }
        // A `[[test]]` table may add required features, not another layout.
        let manifest_path = dir.join("Cargo.toml");
        let manifest = std::fs::read_to_string(&manifest_path).unwrap_or_default();
        let mut in_test = false;
        for (i, line) in manifest.lines().enumerate() {
            let t = line.trim();
            if t.starts_with('[') {
                in_test = t == "[[test]]";
                continue;
            }
            if let Some(path) = t.strip_prefix("path = \"").filter(|_| in_test) {
                let path = path.trim_end_matches('"');
                if format!("{}/{path}", rel(root, &dir)) != entry {
                    bad.push(format!(
                        "{}:{}: a [[test]] at `{path}`, not `tests/{short}.rs`",
                        rel(root, &manifest_path),
                        i + 1
                    ));
                }
            }
        }
    }
    for (path, _) in exceptions {
        if !used.contains(path) {
            bad.push(format!(
                "{path}: listed in TEST_LAYOUT_EXCEPTIONS but absent: drop the entry"
            ));
        }
    }
    bad
}

#[test]
fn workspace_one_test_layout() {
    assert_clean(
        "tests/<crate>.rs, tests/<crate>/ and tests/data/ only",
        &test_layout(&root(), TEST_LAYOUT_EXCEPTIONS),
    );
}

#[test]
fn planted_second_test_binary_fails() {
    let s = Scratch::new("test-layout");
    s.clean_crate("roc")
        .clean_crate("grpo")
        .clean_crate("python");
    s.write("crates/roc/tests/roc.rs", "//! Tests.\nmod roc {\n    mod props;\n}\n")
        .write("crates/roc/tests/roc/props.rs", "//! Props.\n")
        .write("crates/roc/tests/roc/props.proptest-regressions", "")
        .write("crates/roc/tests/data/cases.json", "{}")
        .write("crates/roc/tests/alone.rs", "//! Its own process.\n")
        .write("crates/python/tests/test_x.py", "")
        .write(
            "crates/grpo/Cargo.toml",
            "[package]\nname = \"x\"\n\n[[test]]\nname = \"grpo\"\npath = \"tests/grpo.rs\"\nrequired-features = [\"burn\"]\n",
        )
        .write("crates/grpo/tests/grpo.rs", "//! Tests.\n");
    let exceptions = [
        ("crates/roc/tests/alone.rs", "its own process"),
        ("crates/python/tests", "pytest"),
    ];
    assert_eq!(test_layout(&s.0, &exceptions), Vec::<String>::new());
    s.write("crates/roc/tests/sim.rs", "//! A second binary.\n")
        .write("crates/roc/tests/helpers/common.rs", "//! Helpers.\n")
        .write(
            "crates/grpo/Cargo.toml",
            "[package]\nname = \"x\"\n\n[[test]]\nname = \"grpo\"\npath = \"tests/grpo/main.rs\"\n",
        );
    std::fs::remove_file(s.0.join("crates/roc/tests/alone.rs")).unwrap();
    assert_eq!(
        test_layout(&s.0, &exceptions),
        [
            "crates/grpo/Cargo.toml:6: a [[test]] at `tests/grpo/main.rs`, not `tests/grpo.rs`",
            "crates/roc/tests/helpers: tests/ holds `roc.rs` (modules in `roc/`) and `data/` only; move it into `tests/roc/` as a module",
            "crates/roc/tests/sim.rs: tests/ holds `roc.rs` (modules in `roc/`) and `data/` only; move it into `tests/roc/` as a module",
            "crates/roc/tests/alone.rs: listed in TEST_LAYOUT_EXCEPTIONS but absent: drop the entry",
        ]
    );
}

/// `docs/ARCHITECTURE.md` tells the truth (issue #69): its arrows (the first fenced block whose
/// lines start `rstar-… ─▶`, one entry a crate: `rstar-x ─▶ rstar-y, rstar-z (why)`, continued on indented lines)
/// are exactly each crate's `rstar-*` build dependencies, and every repository path it names
/// in backticks (`crates/…`, `xtask/…`, `docs/…`, `examples/…`, `.ci/…`, and `DESIGN.md`)
/// exists.
fn architecture_is_true(root: &Path) -> Vec<String> {
    let page = "docs/ARCHITECTURE.md";
    let text = std::fs::read_to_string(root.join(page)).unwrap_or_default();
    let mut bad = Vec::new();
    // The arrows.
    let block: Vec<&str> = text
        .split("```")
        .skip(1)
        .step_by(2)
        .find(|b| {
            b.lines()
                .any(|l| l.starts_with("rstar-") && l.contains("─▶"))
        })
        .map(|b| b.lines().collect())
        .unwrap_or_default();
    let mut arrows: Vec<(String, Vec<String>)> = Vec::new();
    for line in block {
        let names = |s: &str| -> Vec<String> {
            s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|w| w.starts_with("rstar-"))
                .map(str::to_string)
                .collect()
        };
        if let Some((left, right)) = line.split_once("─▶") {
            let Some(from) = names(left).into_iter().next() else {
                bad.push(format!(
                    "{page}: an arrow without a crate on its left: `{line}`"
                ));
                continue;
            };
            arrows.push((from, names(right)));
        } else if line.starts_with(' ')
            && let Some((_, to)) = arrows.last_mut()
        {
            to.extend(names(line));
        }
    }
    if arrows.is_empty() {
        bad.push(format!(
            "{page}: no block of `crate ─▶ dependencies` arrows"
        ));
    }
    for dir in crate_dirs(root) {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        let Some(name) = package_name(&manifest) else {
            continue;
        };
        // The crate's `rstar-*` build dependencies (not dev or build ones).
        let mut deps: Vec<String> = normal_dependencies(&manifest)
            .into_iter()
            .map(|(_, dep)| dep)
            .filter(|dep| dep.starts_with("rstar-"))
            .collect();
        deps.sort();
        deps.dedup();
        let drawn: Vec<String> = arrows
            .iter()
            .filter(|(from, _)| *from == name)
            .flat_map(|(_, to)| to.clone())
            .collect();
        for dep in &deps {
            if !drawn.contains(dep) {
                bad.push(format!(
                    "{page}: no arrow {name} ─▶ {dep} ({}/Cargo.toml has it)",
                    rel(root, &dir)
                ));
            }
        }
        for dep in &drawn {
            if !deps.contains(dep) {
                bad.push(format!(
                    "{page}: arrow {name} ─▶ {dep}, which {}/Cargo.toml does not have",
                    rel(root, &dir)
                ));
            }
        }
    }
    // The paths.
    for (i, line) in text.lines().enumerate() {
        for (k, quoted) in line.split('`').enumerate() {
            let names_a_path = ["crates/", "xtask/", "docs/", "examples/", ".ci/"]
                .iter()
                .any(|p| quoted.starts_with(p))
                || quoted == "DESIGN.md";
            if k % 2 == 1
                && names_a_path
                && !quoted.contains(['*', '<', ' '])
                && !root.join(quoted).exists()
            {
                bad.push(format!("{page}:{}: `{quoted}` does not exist", i + 1));
            }
        }
    }
    bad
}

#[test]
fn workspace_architecture_is_true() {
    assert_clean(
        "docs/ARCHITECTURE.md's arrows are the crates' dependencies and its paths exist",
        &architecture_is_true(&root()),
    );
}

#[test]
fn planted_missing_arrow_or_path_fails() {
    let s = Scratch::new("architecture");
    s.write(
        "crates/a/Cargo.toml",
        "[package]\nname = \"rstar-a\"\n\n[dependencies]\nrstar-b.workspace = true\nrstar-c = { path = \"../c\" }\n\n[dev-dependencies]\nrstar-d.workspace = true\n",
    )
    .write("crates/b/Cargo.toml", "[package]\nname = \"rstar-b\"\n")
    .write(
        "docs/ARCHITECTURE.md",
        "# A\n\n```\nrstar-a ─▶ rstar-b (why),\n           rstar-e\n```\n\nSee `crates/a/src/lib.rs` and `DESIGN.md`; `crates/*/examples/` is a pattern.\n",
    );
    let bad = architecture_is_true(&s.0);
    assert_eq!(bad.len(), 4, "{bad:?}");
    assert!(bad[0].contains("no arrow rstar-a ─▶ rstar-c"), "{bad:?}");
    assert!(
        bad[1].contains("arrow rstar-a ─▶ rstar-e, which"),
        "{bad:?}"
    );
    assert!(
        bad[2].contains("`crates/a/src/lib.rs` does not exist"),
        "{bad:?}"
    );
    assert!(bad[3].contains("`DESIGN.md` does not exist"), "{bad:?}");
    // With the arrows right and the files there, it passes.
    s.write(
        "docs/ARCHITECTURE.md",
        "```\nrstar-a ─▶ rstar-b,\n           rstar-c\n```\n`crates/a/Cargo.toml`\n",
    );
    assert_eq!(architecture_is_true(&s.0), Vec::<String>::new());
}

/// The README's "Two commands" section is the two commands and a line (issue #69): at most 12
/// lines, heading included; the details live in `docs/training.md`.
fn two_commands_lines(readme: &str) -> Option<usize> {
    let start = readme.find("## Two commands\n")?;
    let rest = &readme[start + 3..];
    let end = rest.find("\n## ").map_or(rest.len(), |e| e + 1);
    Some(rest[..end].trim_end().lines().count())
}

#[test]
fn workspace_readme_two_commands_is_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = two_commands_lines(&readme).expect("README.md has a `## Two commands` section");
    assert!(
        lines <= 12,
        "README.md's Two commands section has {lines} lines (at most 12)"
    );
    // A section that grew fails.
    let long = format!("## Two commands\n{}\n## Next\n", "a line\n".repeat(12));
    assert_eq!(two_commands_lines(&long), Some(13));
}
