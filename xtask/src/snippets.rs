//! `cargo xtask doc-snippets`: the docs' "use it from another project" snippets, built and run
//! as a newcomer would: a scratch project beside a checkout called `rstar-agent`, its
//! `[dependencies]` copied from each page's `toml` block as written (path dependencies into the
//! checkout), each page's `rust` blocks as functions that `main` runs.
//!
//! Pages checked: `docs/verifier.md`, `docs/roc.md`, `docs/episode.md`, `docs/tasks.md` (crates
//! with no Burn: the scratch build stays a minute or two, once). Blocks fenced `rust,ignore` are
//! skipped. The scratch project lives in `target/doc-snippets/`; it builds into the workspace's `target/`
//! with the workspace's profiles, so the registry crates the tests built are reused.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::util::{cargo, root, step};

/// The pages whose snippets are built and run.
const PAGES: &[&str] = &[
    "docs/verifier.md",
    "docs/roc.md",
    "docs/episode.md",
    "docs/tasks.md",
];

/// The fenced blocks of a Markdown page: (info string, body).
fn blocks(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) => current = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.extend(current.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

pub fn run(args: &[String]) -> Result<()> {
    if let Some(extra) = args.first() {
        bail!("`cargo xtask doc-snippets` takes no arguments (got `{extra}`)");
    }
    let root = root();
    let scratch = root.join("target/doc-snippets");
    let project = scratch.join("project");
    std::fs::create_dir_all(project.join("src"))?;
    // The checkout, where the docs assume it: beside the project, named `rstar-agent`.
    let checkout = scratch.join("rstar-agent");
    // A link left by another checkout (a moved or copied `target/`) points at other sources.
    if std::fs::read_link(&checkout).is_ok_and(|to| to != root) {
        std::fs::remove_file(&checkout)
            .with_context(|| format!("removing the stale link {}", checkout.display()))?;
    }
    if std::fs::symlink_metadata(&checkout).is_err() {
        std::os::unix::fs::symlink(&root, &checkout)
            .with_context(|| format!("linking {}", checkout.display()))?;
    }
    let mut deps: Vec<String> = Vec::new();
    let mut functions = String::new();
    let mut calls = String::new();
    for page in PAGES {
        let text = std::fs::read_to_string(root.join(page)).with_context(|| page.to_string())?;
        let mut snippets = 0;
        for (info, body) in blocks(&text) {
            if info == "toml" && body.contains("[dependencies]") {
                for line in body
                    .lines()
                    .skip_while(|l| l.trim() != "[dependencies]")
                    .skip(1)
                {
                    let line = line.trim();
                    if !line.is_empty() && !line.starts_with('#') && !deps.iter().any(|d| d == line)
                    {
                        deps.push(line.to_string());
                    }
                }
            } else if info == "rust" {
                snippets += 1;
                let name = format!(
                    "{}_{snippets}",
                    Path::new(page).file_stem().unwrap().to_string_lossy()
                );
                functions.push_str(&format!(
                    "/// `{page}`, snippet {snippets}.\n#[allow(unused)] // reason: snippets bind values to show them\nfn {name}() -> Result<(), Box<dyn std::error::Error>> {{\n{body}    Ok(())\n}}\n\n"
                ));
                calls.push_str(&format!(
                    "    {name}().map_err(|e| format!(\"{page}: {{e}}\"))?;\n    println!(\"{page}: snippet {snippets} ok\");\n"
                ));
            }
        }
        if snippets == 0 {
            bail!("{page}: no `rust` snippet to check");
        }
    }
    // Some snippets print JSON; that is the one dependency the pages do not list themselves.
    if !deps.iter().any(|d| d.starts_with("serde_json")) {
        deps.push("serde_json = \"1\"".to_string());
    }
    let manifest = format!(
        "[package]\nname = \"doc-snippets\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n# Not a member of the checkout's workspace.\n[workspace]\n\n[dependencies]\n{}\n\n{}",
        deps.join("\n"),
        profiles(&root)?
    );
    std::fs::write(project.join("Cargo.toml"), manifest)?;
    std::fs::write(
        project.join("src/main.rs"),
        format!(
            "//! The docs' snippets (written by `cargo xtask doc-snippets`).\n\n{functions}fn main() -> Result<(), Box<dyn std::error::Error>> {{\n{calls}    Ok(())\n}}\n"
        ),
    )?;
    // The checkout's versions, so that the scratch build needs no registry look-up.
    std::fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock"))?;
    step(
        "docs' snippets in a scratch project (path dependencies)",
        cargo()
            .current_dir(&project)
            .args(["run", "--quiet"])
            // The workspace's target folder: with the same profiles and lock file, the
            // registry crates the tests already built are reused (the path crates get artifacts
            // of their own, hashed by their path from this project).
            .env("CARGO_TARGET_DIR", root.join("target")),
    )
}

/// The checkout's `[profile.*]` sections, so that the scratch build compiles the registry
/// crates exactly as the workspace does.
fn profiles(root: &Path) -> Result<String> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).context("Cargo.toml")?;
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with('[') {
            inside = line.starts_with("[profile");
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}
