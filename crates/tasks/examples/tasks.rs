//! Prints generated problems of each split and one SFT demonstration in each template, with tool responses from a real Python.
//!
//! Run with `cargo run -p rstar-agent --example tasks [SEED]`. The trainer runs demonstration
//! code in `rstar-toolenv`'s sandbox; this example runs it with a plain `python3` (or
//! `$RSTAR_PYTHON`) so that it has no dependency beyond this crate.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use rstar_agent::episode::{ByteTokenizer, Limits};
use rstar_agent::tasks::sft::{Bug, SftConfig, demonstrate};
use rstar_agent::tasks::{Split, TaskConfig, TaskSet};
use rstar_agent::template::Template;
use rstar_agent::toolcall::{ToolCall, ToolOutcome};

fn python(call: &ToolCall) -> ToolOutcome {
    let exe = std::env::var("RSTAR_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let start = Instant::now();
    let child = Command::new(&exe)
        .args(["-c", &call.code])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        return ToolOutcome::code_judge(
            false,
            "internal_error",
            "",
            &format!("cannot run {exe}"),
            0.0,
        );
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(call.input.as_bytes());
    }
    match child.wait_with_output() {
        Ok(out) => ToolOutcome::code_judge(
            out.status.success(),
            "",
            &String::from_utf8_lossy(&out.stdout),
            &String::from_utf8_lossy(&out.stderr),
            start.elapsed().as_secs_f64(),
        ),
        Err(e) => ToolOutcome::code_judge(false, "internal_error", "", &e.to_string(), 0.0),
    }
}

fn main() -> anyhow::Result<()> {
    let seed: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse().context("the seed must be an integer")?,
        None => 0,
    };
    let set = TaskSet::new(TaskConfig::embedded_default())?;
    for split in [Split::Train, Split::HeldOut, Split::HeldOutKinds] {
        println!("== {} ==", split.as_str());
        for task in set.generate(split, 4, seed)? {
            println!(
                "{:<34} {:<46} {}",
                task.id,
                task.problem_text(),
                task.answer()
            );
        }
    }

    let task = &set.generate(Split::Train, 1, seed)?[0];
    for (template, limits, bug) in [
        (Template::compact(), Limits::compact(), Some(Bug::Typo)),
        (Template::chatml(), Limits::rstar2_agent(), None),
    ] {
        let demo = demonstrate(task, bug, &template, &SftConfig::new(limits), &mut python)
            .context("building the demonstration (is python3 installed?)")?;
        let (ids, mask) = demo.encode(&ByteTokenizer);
        let trained = mask.iter().filter(|&&m| m == 1).count();
        println!(
            "\n== SFT demonstration, {:?} template ({} bytes, {} trained on) ==",
            template.format,
            ids.len(),
            trained
        );
        println!("{}", demo.full_text());
    }
    Ok(())
}
