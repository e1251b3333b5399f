//! The facade in one file: the task set, the agent format and the verifier through
//! `rstar_agent`'s short names, as a project that depends on the whole recipe uses them. A
//! scripted policy solves one embedded problem with one tool call; no model, no sandbox.
//!
//! ```sh
//! cargo run -p rstar-agent --example facade
//! ```

use rstar_agent::episode::{ByteTokenizer, Episode, Limits, Score, Step};
use rstar_agent::tasks::{Split, TaskConfig, TaskSet};
use rstar_agent::template::Template;
use rstar_agent::toolcall::{ToolCall, ToolOutcome};

fn main() -> Result<(), rstar_agent::AgentError> {
    let task = TaskSet::new(TaskConfig::embedded_default())?
        .generate(Split::HeldOut, 1, 7)?
        .remove(0);
    println!("problem {}: {}", task.id, task.problem_text());

    let template = Template::compact();
    let mut episode = Episode::new(
        &ByteTokenizer,
        &template,
        Limits::compact(),
        &task.problem_text(),
    );
    // The scripted turns: run the task's solution, then box what it printed.
    let mut turns = vec![
        format!(
            "Compute it.{}",
            template.render_tool_call(&ToolCall::python(task.solution_code()))
        ),
        format!("<answer>\\boxed{{{}}}</answer>", task.answer()),
    ]
    .into_iter();
    loop {
        match episode.step() {
            Step::Generate { .. } => {
                episode.push_assistant_text(&turns.next().unwrap_or_default())?;
            }
            Step::CallTools(calls) => {
                // A stand-in sandbox that knows the solution's output.
                let outputs = calls
                    .iter()
                    .map(|_| {
                        ToolOutcome::code_judge(true, "", &format!("{}\n", task.answer()), "", 0.01)
                    })
                    .collect();
                episode.push_tool_outcomes(outputs)?;
            }
            Step::Done(_) => break,
        }
    }

    let truth = task.answer();
    let trajectory = episode.finish_scored(|text| {
        let verdict = rstar_agent::verifier::verify(text, &truth).ok();
        Score {
            answer: verdict.as_ref().and_then(|v| v.extracted.clone()),
            reward: verdict.map_or(0.0, |v| f32::from(v.reward)),
        }
    })?;
    println!(
        "{} turns, {} tool call(s), reward {}",
        trajectory.turns.len(),
        trajectory.tool_calls.len(),
        trajectory.reward.unwrap_or(0.0)
    );
    assert_eq!(trajectory.reward, Some(1.0));
    Ok(())
}
