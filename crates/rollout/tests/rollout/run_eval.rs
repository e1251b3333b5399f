//! `eval::run_eval` with a scripted engine over a prepared dataset, against avg@k, pass@k and
//! tool statistics computed by hand, and the files `write_outputs` writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rstar_episode::episode::{ByteTokenizer, Trajectory};
use rstar_rollout::Prompt;
use rstar_rollout::eval::{EvalOptions, EvalSummaryFile, ProblemResult, run_eval, write_outputs};
use rstar_rollout::scheduled::ScheduleConfig;
use rstar_scheduler::DispatchPolicy;

use super::common::{Script, generators, tools};

const RIGHT: &str = "<answer>\\boxed{7}</answer>"; // 26 bytes
const WRONG: &str = "<answer>\\boxed{8}</answer>";

/// Rollout r = 4p + s of problem p, sample s:
/// p0: s0 prints 7 then answers 7; s1 answers 8; s2, s3 answer 7 → 3 of 4 right.
/// p1: s0 times out then answers 7; s1..s3 answer 8 → 1 of 4.
/// p2: s0..s2 answer 8; s3 rambles past the 70-token budget → 0 of 4.
fn script() -> Script {
    Arc::new(|r, turn| {
        let text = match (r / 4, r % 4, turn) {
            (0, 0, 0) => "<c>print(7)</c>",
            (0, 1, 0) => WRONG,
            (0, _, _) => RIGHT,
            (1, 0, 0) => "<c>while True: pass</c>",
            (1, 0, _) => RIGHT,
            (1, _, _) => WRONG,
            (2, 3, _) => return Some("y".repeat(100)),
            _ => WRONG,
        };
        Some(text.to_string())
    })
}

fn options(policy: DispatchPolicy) -> EvalOptions {
    let mut schedule = ScheduleConfig::compact(1);
    schedule.limits.max_response_tokens = 70;
    schedule.policy = policy;
    EvalOptions {
        samples: 4,
        schedule,
    }
}

fn prompts() -> Vec<Prompt> {
    (0..3)
        .map(|i| Prompt::new(format!("q{i}"), format!("Seven, take {i}?"), "7"))
        .collect()
}

#[test]
fn run_eval_reproduces_hand_computed_numbers() {
    for (policy, engines) in [
        (DispatchPolicy::KvAware, 1),
        (DispatchPolicy::LeastRequests, 3),
    ] {
        let (gens, gen_calls) = generators(&script(), engines);
        let tool_calls = Arc::new(AtomicUsize::new(0));
        let run = run_eval(
            gens,
            ByteTokenizer,
            tools(Arc::clone(&tool_calls)),
            &prompts(),
            &options(policy),
        )
        .unwrap();
        let s = &run.report.summary;
        assert_eq!((s.problems, s.trajectories, s.samples), (3, 12, 4));
        // avg@4 = (3/4 + 1/4 + 0) / 3 = 1/3.
        assert!((s.avg_at_k - 1.0 / 3.0).abs() < 1e-12, "{}", s.avg_at_k);
        // pass@2: q0 1 − C(1,2)/C(4,2) = 1; q1 1 − C(3,2)/C(4,2) = 1/2; q2 0 → 1/2.
        // pass@4: 1, 1, 0 → 2/3.
        let pass: Vec<(usize, f64)> = s.pass_at_k.iter().map(|p| (p.k, p.value)).collect();
        assert_eq!(pass.len(), 3);
        for ((k, v), (wk, wv)) in pass.iter().zip([(1, 1.0 / 3.0), (2, 0.5), (4, 2.0 / 3.0)]) {
            assert_eq!(*k, wk);
            assert!((v - wv).abs() < 1e-12, "pass@{k} = {v}");
        }
        // Two calls (q0 s0, q1 s0), one a timeout; one truncation (q2 s3).
        assert!((s.tool_calls_per_problem - 2.0 / 3.0).abs() < 1e-12);
        assert!((s.tool_error_rate - 0.5).abs() < 1e-12);
        assert!((s.truncation_rate - 1.0 / 12.0).abs() < 1e-12);
        // Lengths: q0 (15 + 7 + 26) + 26·3 = 126; q1 (23 + 13 + 26) + 26·3 = 140; q2 26·3 + 70 = 148.
        assert!((s.mean_response_tokens - 414.0 / 12.0).abs() < 1e-12);
        let correct: Vec<usize> = run.report.problems.iter().map(|p| p.correct).collect();
        assert_eq!(correct, [3, 1, 0]);
        assert_eq!(tool_calls.load(Ordering::SeqCst), 2);
        // Turns: 12 rollouts + the two that called a tool.
        assert_eq!(gen_calls.load(Ordering::SeqCst), 14);
        assert_eq!(run.stats.rounds, 14);
        assert_eq!(run.stats.tool_calls, 2);
        assert_eq!(run.engines.len(), engines);

        // The files.
        let dir = tempfile::tempdir().unwrap();
        let summary = EvalSummaryFile::new(&run, &options(policy), "scripted", "prompts");
        let paths = write_outputs(&dir.path().join("out"), &run, &summary).unwrap();
        let results: Vec<ProblemResult> = std::fs::read_to_string(&paths.results)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(results, run.report.problems);
        let trajectories = Trajectory::read_jsonl(&paths.trajectories).unwrap();
        assert_eq!(trajectories, run.trajectories);
        let back: EvalSummaryFile =
            serde_json::from_str(&std::fs::read_to_string(&paths.summary).unwrap()).unwrap();
        assert_eq!(back.summary, *s);
        assert_eq!(back.options.samples, 4);
    }
}

#[test]
fn zero_samples_or_no_engine_is_a_config_error() {
    let mut o = options(DispatchPolicy::KvAware);
    o.samples = 0;
    let (gens, _) = generators(&script(), 1);
    let err = run_eval(gens, ByteTokenizer, tools(Arc::default()), &prompts(), &o).unwrap_err();
    assert!(err.to_string().contains("`samples`"), "{err}");
    let err = run_eval(
        Vec::new(),
        ByteTokenizer,
        tools(Arc::default()),
        &prompts(),
        &options(DispatchPolicy::KvAware),
    )
    .unwrap_err();
    assert!(err.to_string().contains("`engines`"), "{err}");
}
