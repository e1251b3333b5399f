//! `cargo xtask doc-snippets`: the docs' "use it from another project" snippets, built and run
//! as a newcomer would: a scratch project whose `[dependencies]` are copied from each page's
//! `toml` block as written (path dependencies into the checkout, `/path/to/rstar-agent` being
//! where the docs say the clone is), each page's `rust` blocks as functions that `main` runs.
//!
//! Every page is checked: `README.md` and `docs/*.md`. A page's `rust` blocks are built and run;
//! `rust,no_run` blocks are built only; `rust,ignore` blocks are not built. Both need a reason,
//! on the line right above the fence: `<!-- snippet: why it is not run -->`, and a block without
//! one fails the check (a page once left out of a hard-coded list, `docs/grpo.md`, went
//! uncompiled with eight undefined names). A page's `[dependencies]` join the project only when
//! the page has a block to build, so that sketches over Burn-heavy crates cost nothing. The
//! scratch project lives in `target/doc-snippets/`; it builds into the workspace's `target/`
//! with the workspace's profiles, so the registry crates the tests built are reused (Burn for
//! `docs/grpo.md` with its own features: a few minutes the first time).

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::util::{cargo, root, step};

/// Where the docs' path dependencies say the checkout is.
const CHECKOUT: &str = "/path/to/rstar-agent";

/// The pages whose snippets are checked: the README and every `docs/*.md`, sorted.
fn pages(root: &Path) -> Result<Vec<String>> {
    let mut pages = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .context("docs/")?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".md").then(|| format!("docs/{name}"))
        })
        .collect();
    docs.sort();
    pages.extend(docs);
    Ok(pages)
}

/// A fenced block of a Markdown page.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Block {
    /// The info string (`rust`, `rust,ignore`, `toml`, …).
    pub(crate) info: String,
    /// The lines between the fences.
    pub(crate) body: String,
    /// The 1-based line of the opening fence.
    pub(crate) line: usize,
    /// The line above the fence, trimmed (where a block's annotation goes).
    above: String,
}

impl Block {
    /// The annotation `<!-- KIND: TEXT -->` on the line above the fence: `TEXT`, trimmed
    /// (`snippet` gives why a block is not run, `example` how `cargo xtask cli-examples` runs
    /// it).
    pub(crate) fn note(&self, kind: &str) -> Option<&str> {
        self.above
            .strip_prefix("<!-- ")
            .and_then(|n| n.strip_prefix(kind))
            .and_then(|n| n.strip_prefix(':'))
            .and_then(|n| n.strip_suffix("-->"))
            .map(str::trim)
    }

    /// Why a block is not run (`<!-- snippet: … -->`), if given.
    fn reason(&self) -> Option<&str> {
        self.note("snippet").filter(|r| !r.is_empty())
    }
}

/// The fenced blocks of a Markdown page.
pub(crate) fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    let mut previous = "";
    for (i, line) in markdown.lines().enumerate() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) => {
                current = Some(Block {
                    info: info.trim().to_string(),
                    body: String::new(),
                    line: i + 1,
                    above: previous.trim().to_string(),
                });
            }
            (Some(_), Some(_)) => out.extend(current.take()),
            (Some(block), None) => {
                block.body.push_str(line);
                block.body.push('\n');
            }
            (None, None) => {}
        }
        previous = line;
    }
    out
}

/// How a `rust` block is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Built and run.
    Run,
    /// Built, not run (`rust,no_run`).
    Build,
    /// Not built (`rust,ignore`).
    Skip,
}

/// What the project gets from the pages: dependency lines, and each built snippet with where it
/// came from and whether it runs.
#[derive(Debug, Default)]
struct Snippets {
    deps: Vec<String>,
    built: Vec<(String, usize, Check, String)>,
}

/// Reads the pages' blocks; fails on a `rust,ignore` or `rust,no_run` block without a reason and
/// on a `rust,…` attribute it does not know.
fn collect(pages: &[(String, String)], checkout: &str) -> Result<Snippets> {
    let mut out = Snippets::default();
    let mut bad = Vec::new();
    for (page, text) in pages {
        let blocks = blocks(text);
        let mut page_deps = Vec::new();
        let mut page_built = Vec::new();
        for block in &blocks {
            if block.info == "toml" && block.body.contains("[dependencies]") {
                // The `[dependencies]` table up to the next table header.
                for line in block
                    .body
                    .lines()
                    .skip_while(|l| l.trim() != "[dependencies]")
                    .skip(1)
                    .take_while(|l| !l.trim_start().starts_with('['))
                {
                    let line = line.trim();
                    if !line.is_empty() && !line.starts_with('#') {
                        page_deps.push(line.replace(CHECKOUT, checkout));
                    }
                }
                continue;
            }
            let check = match block.info.as_str() {
                "rust" => Check::Run,
                "rust,no_run" => Check::Build,
                "rust,ignore" => Check::Skip,
                info if info.starts_with("rust") => {
                    bad.push(format!(
                        "{page}:{}: `{info}`: use `rust`, `rust,no_run` or `rust,ignore`",
                        block.line
                    ));
                    continue;
                }
                _ => continue,
            };
            if check != Check::Run && block.reason().is_none() {
                bad.push(format!(
                    "{page}:{}: a `{}` block needs its reason on the line above: `<!-- snippet: why it is not run -->`",
                    block.line, block.info
                ));
            }
            if check != Check::Skip {
                page_built.push((page.clone(), block.line, check, block.body.clone()));
            }
        }
        if !page_built.is_empty() {
            for dep in page_deps {
                if !out.deps.contains(&dep) {
                    out.deps.push(dep);
                }
            }
            out.built.extend(page_built);
        }
    }
    if !bad.is_empty() {
        bail!("{} doc block(s) to fix:\n  {}", bad.len(), bad.join("\n  "));
    }
    if out.built.is_empty() {
        bail!("no `rust` snippet to check");
    }
    Ok(out)
}

/// The scratch project's `src/main.rs`: one function per snippet, `main` running those that run.
fn main_rs(snippets: &Snippets) -> String {
    let mut functions = String::new();
    let mut calls = String::new();
    for (page, line, check, body) in &snippets.built {
        let name = format!(
            "{}_line_{line}",
            Path::new(page)
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
                .to_lowercase()
        );
        functions.push_str(&format!(
            "/// `{page}`, line {line}.\n#[allow(unused)] // reason: snippets bind values to show them\nfn {name}() -> Result<(), Box<dyn std::error::Error>> {{\n{body}    Ok(())\n}}\n\n"
        ));
        match check {
            Check::Run => calls.push_str(&format!(
                "    {name}().map_err(|e| format!(\"{page}:{line}: {{e}}\"))?;\n    println!(\"{page}:{line}: ran\");\n"
            )),
            Check::Build => calls.push_str(&format!(
                "    let _ = {name}; // `rust,no_run`: built, not run\n    println!(\"{page}:{line}: built\");\n"
            )),
            Check::Skip => {}
        }
    }
    format!(
        "//! The docs' snippets (written by `cargo xtask doc-snippets`).\n\n{functions}fn main() -> Result<(), Box<dyn std::error::Error>> {{\n{calls}    Ok(())\n}}\n"
    )
}

pub fn run(args: &[String]) -> Result<()> {
    if let Some(extra) = args.first() {
        bail!("`cargo xtask doc-snippets` takes no arguments (got `{extra}`)");
    }
    let root = root();
    let project = root.join("target/doc-snippets/project");
    std::fs::create_dir_all(project.join("src"))?;
    let mut texts = Vec::new();
    for page in pages(&root)? {
        let text = std::fs::read_to_string(root.join(&page)).with_context(|| page.clone())?;
        texts.push((page, text));
    }
    let checkout = root.to_str().context("the checkout's path is not UTF-8")?;
    let mut snippets = collect(&texts, checkout)?;
    // Some snippets print JSON; that is the one dependency the pages do not list themselves.
    if !snippets.deps.iter().any(|d| d.starts_with("serde_json")) {
        snippets.deps.push("serde_json = \"1\"".to_string());
    }
    let manifest = format!(
        "[package]\nname = \"doc-snippets\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n# Not a member of the checkout's workspace.\n[workspace]\n\n[dependencies]\n{}\n\n{}",
        snippets.deps.join("\n"),
        profiles(&root)?
    );
    std::fs::write(project.join("Cargo.toml"), manifest)?;
    std::fs::write(project.join("src/main.rs"), main_rs(&snippets))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn page(name: &str, text: &str) -> (String, String) {
        (name.to_string(), text.to_string())
    }

    const DEPS: &str = "```toml\n[dependencies]\n# a comment\nrstar-x = { path = \"/path/to/rstar-agent/crates/x\" }\n\n[profile.dev.package.\"*\"]\nopt-level = 2\n```\n";

    #[test]
    fn every_rust_block_of_every_page_is_built_with_its_page_dependencies() {
        let pages = [
            page("docs/a.md", &format!("{DEPS}```rust\nlet x = 1;\n```\n")),
            // A page whose only block is a sketch: its dependencies stay out.
            page(
                "docs/b.md",
                "```toml\n[dependencies]\nheavy = \"1\"\n```\n<!-- snippet: a sketch over your engine -->\n```rust,ignore\nmy_engine();\n```\n",
            ),
            page(
                "docs/c.md",
                "<!-- snippet: needs Python -->\n```rust,no_run\nlet y = 2;\n```\n",
            ),
        ];
        let s = collect(&pages, "/src/checkout").unwrap();
        assert_eq!(s.deps, ["rstar-x = { path = \"/src/checkout/crates/x\" }"]);
        let built: Vec<_> = s
            .built
            .iter()
            .map(|(p, l, c, _)| (p.as_str(), *l, *c))
            .collect();
        assert_eq!(
            built,
            [("docs/a.md", 9, Check::Run), ("docs/c.md", 2, Check::Build)]
        );
        let main = main_rs(&s);
        assert!(
            main.contains("fn a_line_9()") && main.contains("a_line_9().map_err"),
            "{main}"
        );
        assert!(
            main.contains("let _ = c_line_2;") && !main.contains("my_engine"),
            "{main}"
        );
    }

    #[test]
    fn planted_ignored_block_without_a_reason_fails() {
        let pages = [
            page("docs/a.md", "```rust\nlet x = 1;\n```\n"),
            page(
                "docs/b.md",
                "Some text.\n```rust,ignore\nlet x = undefined;\n```\n",
            ),
            page(
                "docs/c.md",
                "<!-- snippet: -->\n```rust,no_run\nlet y = 2;\n```\n",
            ),
            page("docs/d.md", "```rust,should_panic\npanic!();\n```\n"),
        ];
        let err = collect(&pages, "/c").unwrap_err().to_string();
        assert!(err.starts_with("3 doc block(s) to fix"), "{err}");
        for want in [
            "docs/b.md:2: a `rust,ignore` block",
            "docs/c.md:2: a `rust,no_run` block",
            "docs/d.md:1: `rust,should_panic`",
        ] {
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn the_pages_are_every_doc_page() {
        let pages = pages(&root()).unwrap();
        assert_eq!(pages[0], "README.md");
        for page in ["docs/grpo.md", "docs/verifier.md", "docs/serve.md"] {
            assert!(pages.iter().any(|p| p == page), "{page}: {pages:?}");
        }
    }

    #[test]
    fn this_checkout_s_doc_blocks_are_all_built_or_explained() {
        let root = root();
        let texts: Vec<(String, String)> = pages(&root)
            .unwrap()
            .into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(root.join(&p)).unwrap();
                (p, text)
            })
            .collect();
        let s = collect(&texts, "/c").unwrap();
        assert!(
            s.built.iter().any(|(p, ..)| p == "docs/grpo.md"),
            "{:?}",
            s.built
        );
    }
}
