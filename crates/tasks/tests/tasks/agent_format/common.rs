//! Shared helpers: a scripted executor (the tokenizer and the scorer are `rstar_testdata`'s).

use std::collections::HashMap;

use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_tasks::tasks::Task;

/// A fake sandbox that knows the right output of each task's solution program and fails on
/// anything else with a `NameError`, in code-judge's format.
pub fn fake_executor(tasks: &[Task]) -> impl FnMut(&ToolCall) -> ToolOutcome + use<> {
    let known: HashMap<String, String> = tasks
        .iter()
        .flat_map(|t| {
            [
                (t.solution_code(), t.answer()),
                (t.wrong_code(), t.wrong_answer()),
            ]
        })
        .collect();
    move |call| match known.get(&call.code) {
        Some(answer) => ToolOutcome::code_judge(true, "", &format!("{answer}\n"), "", 0.05),
        None => ToolOutcome::code_judge(
            false,
            "",
            "",
            "NameError at line 1: name 'prnt' is not defined\n  prnt(1)",
            0.01,
        ),
    }
}
