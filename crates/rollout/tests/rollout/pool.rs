//! Scheduled rollouts with the real sandboxed pool (`PoolTools`): output and a timeout.

use std::sync::Arc;
use std::time::Duration;

use rstar_episode::episode::{ByteTokenizer, StopReason};
use rstar_episode::toolcall::OutcomeKind;
use rstar_rollout::Prompt;
use rstar_rollout::scheduled::{PoolTools, ScheduleConfig, run_scheduled_blocking};
use rstar_rollout::tools::{ToolOptions, start_pool};

use super::common::{Script, generators};

#[test]
fn sandboxed_calls_answer_and_time_out() {
    let pool = start_pool(&ToolOptions {
        python: rstar_testdata::python(),
        workers: 2,
        timeout_secs: 1.0,
        servers: Vec::new(),
        latency_budget_secs: None,
    })
    .expect("the sandbox starts (set RSTAR_PYTHON)");
    let tools = Arc::new(PoolTools {
        timeout: Some(Duration::from_secs(1)),
        ..PoolTools::new(pool.pool().clone())
    });
    // Rollout 0 prints 6*7 then answers; rollout 1 loops forever then answers.
    let script: Script = Arc::new(|r, turn| {
        Some(
            match (r, turn) {
                (0, 0) => "<c>print(6*7)</c>",
                (1, 0) => "<c>while True: pass</c>",
                _ => "<answer>\\boxed{42}</answer>",
            }
            .to_string(),
        )
    });
    let (gens, _) = generators(&script, 2);
    let prompts = [
        Prompt::new("a", "6*7?", "42"),
        Prompt::new("b", "Loop?", "42"),
    ];
    let out = run_scheduled_blocking(
        gens,
        ByteTokenizer,
        tools,
        &prompts,
        1,
        &ScheduleConfig::compact(0),
    )
    .unwrap();
    let [a, b] = &out.rollout.trajectories[..] else {
        panic!("two trajectories")
    };
    assert_eq!(a.turns[1].text, "\nO:42\nA:");
    assert_eq!(a.tool_calls[0].outcome.kind, OutcomeKind::Output);
    assert_eq!((a.stop, a.reward), (StopReason::NoToolCall, Some(1.0)));
    assert_eq!(
        b.tool_calls[0].outcome.kind,
        OutcomeKind::Timeout,
        "{:?}",
        b.tool_calls[0]
    );
    assert_eq!(b.turns[1].text, "\nO:timeout\nA:");
    assert_eq!(out.rollout.stats.tool_calls, 2);
    assert!(out.rollout.stats.tool_secs > 0.0);
}
