//! Prints generated problems of each split and one SFT demonstration in each template, built
//! against `rstar-tasks` alone.
//!
//! Run with `cargo run -p rstar-tasks --example tasks [SEED]`. The trainer runs demonstration
//! code in `rstar-toolenv`'s sandbox; this example runs no code at all: its executor answers
//! the solution call with the task's exact answer and any other call (the planted bug) with a
//! Python-style error, which is what the sandbox returns for them.

use rstar_episode::{ByteTokenizer, Limits, Template, ToolCall, ToolOutcome};
use rstar_tasks::tasks::sft::{Bug, SftConfig, demonstrate};
use rstar_tasks::tasks::{Split, TaskConfig, TaskSet};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seed: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse().map_err(|e| format!("the seed `{s}`: {e}"))?,
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
    let solution = task.solution_code();
    let answer = task.answer();
    // A scripted tool: the solution prints the answer, anything else fails as Python would.
    let mut tool = |call: &ToolCall| {
        if call.code == solution {
            ToolOutcome::code_judge(true, "", &format!("{answer}\n"), "", 0.01)
        } else {
            let stderr = "Traceback (most recent call last):\nNameError: name is not defined\n";
            ToolOutcome::code_judge(false, "", "", stderr, 0.01)
        }
    };
    for (template, limits, bug) in [
        (Template::compact(), Limits::compact(), Some(Bug::Typo)),
        (Template::chatml(), Limits::rstar2_agent(), None),
    ] {
        let demo = demonstrate(task, bug, &template, &SftConfig::new(limits), &mut tool)?;
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
