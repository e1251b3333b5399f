//! Every dispatch policy, with one and with three engines, gives the same trajectories for
//! scripted engines (each rollout's turns do not depend on where or when they run).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rstar_episode::episode::{ByteTokenizer, StopReason, Trajectory};
use rstar_rollout::Prompt;
use rstar_rollout::scheduled::{ScheduleConfig, run_scheduled_blocking};
use rstar_scheduler::{DispatchPolicy, KvRetention};

use super::common::{Script, generators, tools};

/// Rollout `r` behaves by `r % 4`: answers at once; calls once then answers (right when `r / 4`
/// is even); calls twice then answers; rambles past the budget.
fn script() -> Script {
    Arc::new(|rollout, turn| {
        let answer = |n: u64| format!("<answer>\\boxed{{{n}}}</answer>");
        let text = match (rollout % 4, turn) {
            (0, 0) => answer(42),
            (1, 0) => "Check.<c>print(42)</c>".to_string(),
            (1, 1) => answer(if (rollout / 4) % 2 == 0 { 42 } else { 41 }),
            (2, 0) => "<c>print(6)</c>".to_string(),
            (2, 1) => "<c>print(7)</c>".to_string(),
            (2, 2) => answer(42),
            (3, _) => "x".repeat(200),
            _ => return None,
        };
        Some(text)
    })
}

fn prompts() -> Vec<Prompt> {
    (0..4)
        .map(|i| Prompt::new(format!("p{i}"), format!("Problem {i}?"), "42"))
        .collect()
}

fn run(
    policy: DispatchPolicy,
    retention: KvRetention,
    engines: usize,
) -> (Vec<Trajectory>, Vec<usize>, usize) {
    let (gens, calls) = generators(&script(), engines);
    let mut config = ScheduleConfig::compact(11);
    config.limits.max_response_tokens = 120;
    config.policy = policy;
    config.retention = retention;
    let out = run_scheduled_blocking(
        gens,
        ByteTokenizer,
        tools(Arc::new(AtomicUsize::new(0))),
        &prompts(),
        3,
        &config,
    )
    .unwrap();
    (
        out.rollout.trajectories,
        out.turns_per_engine,
        calls.load(Ordering::SeqCst),
    )
}

#[test]
fn every_policy_and_engine_count_agree() {
    let (base, per_engine, calls) = run(DispatchPolicy::Static, KvRetention::Keep, 1);
    // Hand-derived: 12 rollouts, prompt-major, rollout r = 3p + s behaves by r % 4.
    assert_eq!(base.len(), 12);
    for (r, t) in base.iter().enumerate() {
        assert_eq!(t.id, format!("p{}", r / 3));
        assert_eq!(t.sample as usize, r % 3);
        let (stop, reward, tool_calls) = match r % 4 {
            0 => (StopReason::NoToolCall, 1.0, 0),
            1 => (
                StopReason::NoToolCall,
                if (r / 4) % 2 == 0 { 1.0 } else { 0.0 },
                1,
            ),
            2 => (StopReason::NoToolCall, 1.0, 2),
            _ => (StopReason::TokenBudget, 0.0, 0),
        };
        assert_eq!(
            (t.stop, t.reward, t.tool_calls.len()),
            (stop, Some(reward), tool_calls),
            "rollout {r}"
        );
    }
    // Turns: rollouts 0,4,8 one each; 1,5,9 two; 2,6,10 three; 3,7,11 one.
    assert_eq!(per_engine, vec![21]);
    assert_eq!(calls, 21);
    for policy in DispatchPolicy::ALL {
        for retention in [KvRetention::Keep, KvRetention::Release] {
            for engines in [1, 3] {
                let (got, per_engine, calls) = run(policy, retention, engines);
                assert_eq!(got, base, "{policy} {retention:?} with {engines} engines");
                assert_eq!(per_engine.iter().sum::<usize>(), 21);
                assert_eq!(calls, 21);
                if engines == 3 && policy != DispatchPolicy::KvAware {
                    assert!(
                        per_engine.iter().all(|&n| n > 0),
                        "{policy}: every engine works: {per_engine:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn kv_aware_refuses_a_rollout_no_engine_can_hold() {
    let (mut gens, _) = generators(&script(), 1);
    let mut small = super::common::ScriptGen::new(script());
    small.kv = 50; // prompt (≈14) + budget 120 does not fit
    gens[0] = Arc::new(small);
    let mut config = ScheduleConfig::compact(0);
    config.limits.max_response_tokens = 120;
    let err = run_scheduled_blocking(
        gens,
        ByteTokenizer,
        tools(Arc::new(AtomicUsize::new(0))),
        &prompts(),
        1,
        &config,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("scheduler"), "{text}");
}

#[test]
fn a_failing_generator_fails_the_run_with_its_message() {
    use rstar_engine::{BoxError, BoxFuture, TurnGenerator, TurnSample, TurnSpec};
    struct Broken;
    impl TurnGenerator for Broken {
        fn name(&self) -> String {
            "broken".into()
        }
        fn kv_capacity(&self) -> u64 {
            1 << 20
        }
        fn generate(&self, _: TurnSpec) -> BoxFuture<'_, Result<TurnSample, BoxError>> {
            Box::pin(async { Err("the server is on fire".into()) })
        }
    }
    let err = run_scheduled_blocking(
        vec![Arc::new(Broken)],
        ByteTokenizer,
        tools(Arc::new(AtomicUsize::new(0))),
        &prompts(),
        1,
        &ScheduleConfig::compact(0),
    )
    .unwrap_err();
    assert!(err.to_string().contains("the server is on fire"), "{err}");
}

#[test]
fn a_ground_truth_the_verifier_cannot_score_is_refused_before_running() {
    let (gens, calls) = generators(&script(), 1);
    let prompts = [Prompt::new(
        "frac",
        "Half?",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
    )];
    let err = run_scheduled_blocking(
        gens,
        ByteTokenizer,
        tools(Arc::new(AtomicUsize::new(0))),
        &prompts,
        1,
        &ScheduleConfig::compact(0),
    )
    .unwrap_err();
    assert!(err.to_string().contains("problem `frac`"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
