//! `cargo xtask cli-examples [--slow]`: every fenced `sh` block of `docs/cli.md` run as written,
//! with the release `rstar`, against the run `cargo xtask train` leaves (`runs/tiny`) — what a
//! newcomer who copies the page's commands gets (issue #70).
//!
//! The commands run with `bash` in a scratch folder, `target/cli-examples/`, where the page's
//! own input files are written first ([`INPUTS`]: the rollouts, problems and calls a user brings),
//! and `runs/tiny` is the checkout's trained run. A line that starts a server (`rstar serve`,
//! `rstar tools serve`, `rstar verify serve`) passes when the server says where it listens; it is
//! then stopped with SIGTERM. Every other line must exit 0 within [`LIMIT`].
//!
//! A block is annotated on the line above its fence:
//! - `<!-- example: slow -->`: it trains (minutes each); run with `--slow`, which runs the slow
//!   blocks first in a scratch `runs/` of their own, so that the rest then reads the runs they
//!   made (CI's slow step, `.ci/engines`, does);
//! - `<!-- example: skip: WHY -->`: it needs what no checkout has (a Hugging Face model's
//!   weights); never run, and the reason is required.
//!
//! Any other annotation, or a `skip` without a reason, fails the check, which a unit test runs
//! over this checkout's page ([`plan`]) in `cargo xtask ci`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::snippets::blocks;
use crate::util::{release_rstar, root};

/// The page whose examples run.
const PAGE: &str = "docs/cli.md";

/// The longest a command may take (a slow block's training excepted: [`SLOW_LIMIT`]).
const LIMIT: Duration = Duration::from_secs(600);

/// The longest a slow block's command may take (the tiny preset trains in about ten minutes).
const SLOW_LIMIT: Duration = Duration::from_secs(3600);

/// The files the page's commands read that a user brings: written into the scratch folder
/// before any command runs.
const INPUTS: &[(&str, &str)] = &[
    (
        "math500_rollouts.jsonl",
        "{\"response\": \"The area is \\\\boxed{\\\\frac{1}{2}}.\", \"answer\": \"\\\\frac12\"}\n\
         {\"response\": \"So x = \\\\boxed{3}\", \"answer\": \"4\"}\n",
    ),
    (
        "R.jsonl",
        "{\"id\": \"a\", \"reward\": 1.0}\n{\"id\": \"a\", \"reward\": 0.0}\n\
         {\"id\": \"b\", \"reward\": 1.0}\n{\"id\": \"b\", \"reward\": 1.0}\n",
    ),
    (
        "D.jsonl",
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n\
         {\"id\": \"b\", \"problem\": \"What is 3*3?\", \"answer\": \"9\"}\n",
    ),
    (
        "calls.jsonl",
        "{\"code\": \"print(6 * 7)\"}\n{\"code\": \"print(int(input()) + 1)\", \"input\": \"41\"}\n",
    ),
    (
        "held_out.jsonl",
        "{\"id\": \"h1\", \"problem\": \"What is 17+25?\", \"answer\": \"42\"}\n\
         {\"id\": \"h2\", \"problem\": \"What is 6*7?\", \"answer\": \"42\"}\n",
    ),
];

/// How a block runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// Always.
    Run,
    /// With `--slow` only.
    Slow,
    /// Never, for this reason.
    Skip(String),
}

/// One `sh` block: where it is, how it runs, its command lines.
#[derive(Debug, Clone, PartialEq)]
struct Example {
    line: usize,
    kind: Kind,
    commands: Vec<String>,
}

/// The `sh` blocks of `markdown`, with their annotations checked.
fn plan(markdown: &str) -> Result<Vec<Example>> {
    let mut out = Vec::new();
    for block in blocks(markdown).into_iter().filter(|b| b.info == "sh") {
        let kind = match block.note("example") {
            None => Kind::Run,
            Some("slow") => Kind::Slow,
            Some(n) => match n.strip_prefix("skip:").map(str::trim) {
                Some(why) if !why.is_empty() => Kind::Skip(why.to_string()),
                _ => bail!(
                    "{PAGE}:{}: `<!-- example: {n} -->` is not `slow` or `skip: WHY`",
                    block.line
                ),
            },
        };
        // Lines joined where they end in `\`; comments and blank lines dropped.
        let mut commands = Vec::new();
        let mut pending = String::new();
        for line in block.body.lines() {
            let line = line.trim_end();
            if let Some(start) = line.strip_suffix('\\') {
                pending.push_str(start);
                pending.push(' ');
                continue;
            }
            pending.push_str(line);
            let command = std::mem::take(&mut pending);
            let command = command.trim();
            if !command.is_empty() && !command.starts_with('#') {
                commands.push(command.to_string());
            }
        }
        out.push(Example {
            line: block.line,
            kind,
            commands,
        });
    }
    Ok(out)
}

/// Whether `command` starts a server that runs until stopped.
fn is_server(command: &str) -> bool {
    ["rstar serve ", "rstar tools serve", "rstar verify serve"]
        .iter()
        .any(|p| command.starts_with(p))
}

/// `cargo xtask cli-examples [--slow]`.
pub fn run(args: &[String]) -> Result<()> {
    let slow = match args {
        [] => false,
        [a] if a == "--slow" => true,
        _ => bail!("usage: cargo xtask cli-examples [--slow]"),
    };
    let root = root();
    let examples = plan(&std::fs::read_to_string(root.join(PAGE)).context(PAGE)?)?;
    let rstar = release_rstar()?;
    let python = crate::venv::ensure_train()?;
    let scratch = root.join("target").join("cli-examples");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch).with_context(|| scratch.display().to_string())?;
    }
    std::fs::create_dir_all(scratch.join("runs"))?;
    for (name, text) in INPUTS {
        std::fs::write(scratch.join(name), text)?;
    }
    // The run the page reads: the checkout's, or (with --slow) the slow blocks' own.
    if !slow {
        let run = root.join("runs").join("tiny");
        if !run.join("checkpoints").join("final").exists() {
            bail!(
                "{} has no trained run: run `cargo xtask train` first (or pass --slow, which trains its own)",
                run.display()
            );
        }
        std::os::unix::fs::symlink(&run, scratch.join("runs").join("tiny"))?;
    }
    let bin = rstar.parent().context("the rstar binary's folder")?;
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut order: Vec<&Example> = examples.iter().filter(|e| e.kind == Kind::Slow).collect();
    order.extend(examples.iter().filter(|e| e.kind == Kind::Run));
    let mut failed = Vec::new();
    let mut ran = 0;
    for example in order {
        if example.kind == Kind::Slow && !slow {
            continue;
        }
        let limit = if example.kind == Kind::Slow {
            SLOW_LIMIT
        } else {
            LIMIT
        };
        for command in &example.commands {
            let started = Instant::now();
            let outcome = if is_server(command) {
                serve(command, &scratch, &path, &python)
            } else {
                once(command, &scratch, &path, &python, limit)
            };
            ran += 1;
            let secs = started.elapsed().as_secs_f64();
            match outcome {
                Ok(()) => eprintln!("ok    {PAGE}:{} ({secs:.1}s) {command}", example.line),
                Err(e) => {
                    eprintln!(
                        "FAIL  {PAGE}:{} ({secs:.1}s) {command}\n{e:#}",
                        example.line
                    );
                    failed.push(format!("{PAGE}:{}: {command}", example.line));
                }
            }
        }
    }
    for example in &examples {
        match &example.kind {
            Kind::Skip(why) => eprintln!("skip  {PAGE}:{}: {why}", example.line),
            Kind::Slow if !slow => eprintln!(
                "skip  {PAGE}:{}: trains (cargo xtask cli-examples --slow)",
                example.line
            ),
            _ => {}
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} of {ran} commands of {PAGE} failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    eprintln!("==> {ran} commands of {PAGE} ran as written");
    Ok(())
}

/// A `bash -c` of `command` in `dir`, with `rstar` and the project's Python on hand.
fn shell(command: &str, dir: &Path, path: &str, python: &PathBuf) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args(["-c", command])
        .current_dir(dir)
        .env("PATH", path)
        .env("RSTAR_PYTHON", python);
    cmd
}

/// Runs `command` to its end within `limit`; its output when it fails.
fn once(command: &str, dir: &Path, path: &str, python: &PathBuf, limit: Duration) -> Result<()> {
    let mut child = shell(command, dir, path, python)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("bash")?;
    let mut stderr = child.stderr.take().context("stderr is piped")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("still running after {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("{status}:\n{}", tail.join("\n"));
    }
    Ok(())
}

/// Starts the server `command`, waits for its `listening on` line, then stops it with SIGTERM.
fn serve(command: &str, dir: &Path, path: &str, python: &PathBuf) -> Result<()> {
    // `exec`, so that the signal reaches the server, not the shell.
    let mut child = shell(&format!("exec {command}"), dir, path, python)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("bash")?;
    let stderr = child.stderr.take().context("stderr is piped")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("listening on") {
                let _ = tx.send(Ok(line));
                // Keep reading so the server never blocks on a full pipe.
                continue;
            }
            seen.push(line);
        }
        let _ = tx.send(Err(seen.join("\n")));
    });
    let listening = rx.recv_timeout(Duration::from_secs(120));
    let stop = |child: &mut std::process::Child| {
        // SIGTERM: the servers drain and exit.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    };
    match listening {
        Ok(Ok(_)) => {
            stop(&mut child);
            Ok(())
        }
        Ok(Err(stderr)) => {
            let _ = child.wait();
            bail!("exited before listening:\n{stderr}")
        }
        Err(_) => {
            stop(&mut child);
            bail!("did not say where it listens within 120 s")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_planned_by_their_annotation_and_bad_ones_fail() {
        let page = "```sh\nrstar info\n# a comment\nrstar tasks \\\n  --n 3\n```\n\
                    <!-- example: slow -->\n```sh\nrstar train\n```\n\
                    <!-- example: skip: needs Qwen3-14B's weights -->\n```sh\nrstar sft\n```\n\
                    ```rust\nfn f() {}\n```\n";
        let plan = plan(page).unwrap();
        assert_eq!(plan.len(), 3);
        assert_eq!(plan[0].commands, ["rstar info", "rstar tasks    --n 3"]);
        assert_eq!(plan[0].kind, Kind::Run);
        assert_eq!(plan[1].kind, Kind::Slow);
        assert_eq!(plan[2].kind, Kind::Skip("needs Qwen3-14B's weights".into()));
        for bad in ["<!-- example: skip: -->", "<!-- example: later -->"] {
            let err = super::plan(&format!("{bad}\n```sh\nrstar info\n```\n")).unwrap_err();
            assert!(err.to_string().contains("docs/cli.md:2"), "{err}");
        }
        assert!(is_server("rstar tools serve --port 1") && is_server("rstar serve --model m"));
        assert!(!is_server("rstar show runs/tiny/samples.jsonl"));
    }

    #[test]
    fn this_checkout_s_page_plans_and_skips_only_with_reasons() {
        let text = std::fs::read_to_string(root().join(PAGE)).unwrap();
        let plan = plan(&text).unwrap();
        let run: usize = plan
            .iter()
            .filter(|e| e.kind == Kind::Run)
            .map(|e| e.commands.len())
            .sum();
        assert!(run >= 10, "{plan:?}");
        // The inputs the page names are written before its commands run.
        for (name, _) in INPUTS {
            assert!(text.contains(name), "{name} is not on the page");
        }
    }
}
