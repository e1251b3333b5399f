//! The rollout driver: determinism, trajectory invariants, log-probs against a recomputation,
//! real tool calls through the sandbox.

use burn::tensor::{Int, Tensor, TensorData};
use rstar_episode::episode::Role;
use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_policy::{Qwen, Sampling, Tokenizer, sequence_logprobs};
use rstar_rollout::scheduled::AsyncTools;
use rstar_rollout::{FnExecutor, RolloutConfig, TrajectoryStats, rollout};

use super::common::{overfit, prompts, tasks, tools};

fn config(seed: u64, tokens: usize) -> RolloutConfig {
    let mut c = RolloutConfig::compact(seed);
    c.limits.max_response_tokens = tokens;
    c
}

#[test]
fn a_random_policy_rolls_out_deterministically_within_budget() {
    let device = burn::tensor::Device::flex();
    let model = Qwen::random(super::common::tiny_config(), 0, &device).unwrap();
    let tok = Tokenizer::char();
    let ps = prompts(&tasks(3, 1));
    let mut calls = 0;
    let exec = FnExecutor::new(|_: &ToolCall| {
        calls += 1;
        ToolOutcome::code_judge(true, "", "1\n", "", 0.0)
    });
    let a = rollout(&model, &tok, &ps, 2, &config(9, 24), &exec).unwrap();
    let b = rollout(&model, &tok, &ps, 2, &config(9, 24), &exec).unwrap();
    let c = rollout(&model, &tok, &ps, 2, &config(10, 24), &exec).unwrap();
    assert_eq!(a.trajectories.len(), 6);
    for (i, t) in a.trajectories.iter().enumerate() {
        assert_eq!(t.id, ps[i / 2].id);
        assert_eq!(t.sample, (i % 2) as u32);
        assert!(t.response_ids.len() <= 24);
        assert_eq!(t.ground_truth.as_deref(), Some(ps[i / 2].answer.as_str()));
        t.validate().unwrap();
    }
    let ids = |o: &rstar_rollout::RolloutOutput| -> Vec<Vec<u32>> {
        o.trajectories
            .iter()
            .map(|t| t.response_ids.clone())
            .collect()
    };
    assert_eq!(ids(&a), ids(&b));
    assert_ne!(ids(&a), ids(&c));
    assert!(a.stats.generated_tokens > 0 && a.stats.rounds >= 1);
}

/// Greedy decoding of a policy that learnt the format: its turns call the tool, the sandbox
/// answers, and every assistant token's log-prob equals the one recomputed from the whole
/// sequence (so tool turns were inserted exactly where the policy saw them).
#[test]
fn tool_turns_come_from_the_sandbox_and_logprobs_match_a_recomputation() {
    let ts = tasks(4, 2);
    let model = overfit(&ts, 150);
    let tok = Tokenizer::char();
    let mut c = config(0, 320);
    c.sampling = Sampling::Greedy;
    let out = rollout(&model, &tok, &prompts(&ts), 1, &c, &tools()).unwrap();
    let stats = TrajectoryStats::of(&out.trajectories);
    assert!(
        stats.tool_calls > 0.0,
        "the overfitted policy makes tool calls: {stats:?}"
    );
    let mut checked = 0;
    for t in &out.trajectories {
        t.validate().unwrap();
        for record in &t.tool_calls {
            if let Some(call) = &record.call {
                // The sandbox really ran the code: the outcome is what Python says.
                let printed = record.outcome.stdout().map(str::trim).map(str::to_string);
                if call.code == ts.iter().find(|x| x.id == t.id).unwrap().solution_code() {
                    assert_eq!(printed.as_deref(), Some(t.ground_truth.as_deref().unwrap()));
                }
            }
        }
        for turn in &t.turns {
            let mask = &t.loss_mask[turn.start..turn.start + turn.len];
            let want = u8::from(turn.role == Role::Assistant);
            assert!(mask.iter().all(|&m| m == want));
        }
        let mut ids: Vec<i64> = t.prompt_ids.iter().map(|&x| i64::from(x)).collect();
        ids.extend(t.response_ids.iter().map(|&x| i64::from(x)));
        let n = ids.len();
        let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, n]), &model.device());
        let (logp, _) = sequence_logprobs(&model, tokens);
        let logp: Vec<f32> = logp.into_data().try_to_vec().unwrap();
        let p = t.prompt_ids.len();
        let assistant: Vec<f32> = (0..t.response_ids.len())
            .filter(|&j| t.loss_mask[j] == 1)
            .map(|j| logp[p + j - 1])
            .collect();
        assert_eq!(assistant.len(), t.token_logprobs.len());
        for (a, b) in assistant.iter().zip(&t.token_logprobs) {
            assert!((a - b).abs() < 1e-3, "{a} vs {b}");
            checked += 1;
        }
    }
    assert!(checked > 0);
}

#[test]
fn evaluation_episodes_keep_the_configured_response_budget() {
    let device = burn::tensor::Device::flex();
    let model = Qwen::random(super::common::tiny_config(), 0, &device).unwrap();
    let tok = Tokenizer::char();
    let ps = prompts(&tasks(2, 5));
    let exec = FnExecutor::new(|_: &ToolCall| ToolOutcome::code_judge(true, "", "1\n", "", 0.0));
    let mut options = rstar_train::TrainConfig::smoke().eval;
    options.samples = 1;
    let lens = |options: &rstar_train::EvalOptions, exec: &dyn AsyncTools| {
        let e = rstar_train::evaluate(&model, &tok, &ps, options, 3, exec).unwrap();
        assert_eq!((e.greedy.count, e.sampled.map(|s| s.count)), (2, Some(2)));
        // avg@1 by `rstar eval`'s code: the share of the two samples that are correct.
        let summary = e.sampled_summary.unwrap();
        assert_eq!(summary.samples, 1);
        assert_eq!(summary.avg_at_k, e.sampled.unwrap().accuracy);
        e.trajectories
            .iter()
            .map(|t| (t.response_ids.len(), t.truncated))
            .collect::<Vec<_>>()
    };
    // The template's budget (320 tokens compact): a random policy rarely ends on its own.
    options.max_response_tokens = None;
    let free = lens(&options, &exec);
    assert!(free.iter().any(|&(n, _)| n > 16), "{free:?}");
    assert!(free.iter().all(|&(n, _)| n <= 320), "{free:?}");
    // A budget of 16 tokens: every episode stops there, truncated.
    options.max_response_tokens = Some(16);
    let capped = lens(&options, &exec);
    assert!(!capped.is_empty());
    for (n, truncated) in capped {
        assert!(n <= 16, "{n}");
        assert!(truncated || n < 16, "{n}");
    }
}

/// A batch larger than `max_batch`: no generation call holds more than the bound, and with
/// per-rollout seeds the trajectories are those of one unbounded call (and of a rollout a
/// prompt at a time); with the per-round seeds the bound changes them, so the comparison can
/// fail.
#[test]
fn bounded_generation_gives_the_unbounded_results_with_per_rollout_seeds() {
    use rstar_rollout::{RolloutOutput, rollout_chunked};
    let device = burn::tensor::Device::flex();
    let model = Qwen::random(super::common::tiny_config(), 0, &device).unwrap();
    let tok = Tokenizer::char();
    let ps = prompts(&tasks(3, 11));
    let exec = FnExecutor::new(|_: &ToolCall| ToolOutcome::code_judge(true, "", "1\n", "", 0.0));
    let run = |max_batch: usize, per_rollout: bool, exec: &dyn AsyncTools| {
        let mut c = config(21, 24);
        c.max_batch = max_batch;
        c.per_rollout_seeds = per_rollout;
        rollout(&model, &tok, &ps, 4, &c, exec).unwrap()
    };
    let responses = |o: &RolloutOutput| -> Vec<(String, u32, Vec<u32>, Option<f32>)> {
        o.trajectories
            .iter()
            .map(|t| (t.id.clone(), t.sample, t.response_ids.clone(), t.reward))
            .collect()
    };
    let whole = run(0, true, &exec);
    assert_eq!(whole.trajectories.len(), 12);
    assert_eq!(whole.stats.largest_call, 12, "{:?}", whole.stats);
    let bounded = run(5, true, &exec);
    assert!(bounded.stats.largest_call <= 5, "{:?}", bounded.stats);
    assert!(bounded.stats.rounds >= 3, "{:?}", bounded.stats);
    assert_eq!(responses(&bounded), responses(&whole));
    // A prompt at a time, in calls of at most 3: the same trajectories again.
    let mut c = config(21, 24);
    c.max_batch = 3;
    c.per_rollout_seeds = true;
    let mut chunks = Vec::new();
    rollout_chunked(&model, &tok, &ps, 4, &c, &exec, 1, |part, out| {
        assert_eq!(part.len(), 1);
        assert!(out.stats.largest_call <= 3, "{:?}", out.stats);
        chunks.extend(responses(&out));
        Ok(())
    })
    .unwrap();
    assert_eq!(chunks, responses(&whole));
    // Seeded by round and batch position instead, the bound changes the samples.
    assert_ne!(
        responses(&run(5, false, &exec)),
        responses(&run(0, false, &exec))
    );
}

/// Tools that answer by the code's length, may be shared by two threads, and count how often
/// they are asked whether they may (the evaluation asks once, then samples on a second thread).
struct Threads {
    asked: std::sync::atomic::AtomicUsize,
}

impl AsyncTools for Threads {
    fn run(
        &self,
        call: ToolCall,
        _history: Vec<String>,
    ) -> rstar_scheduler::BoxFuture<'_, ToolOutcome> {
        let outcome = self.run_round(std::slice::from_ref(&call)).remove(0);
        Box::pin(async move { outcome })
    }

    fn run_round(&self, calls: &[ToolCall]) -> Vec<ToolOutcome> {
        calls
            .iter()
            .map(|c| ToolOutcome::code_judge(true, "", &format!("{}\n", c.code.len()), "", 0.0))
            .collect()
    }

    fn shared(&self) -> bool {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        true
    }
}

#[test]
fn an_evaluation_on_two_threads_measures_what_one_thread_does() {
    let device = burn::tensor::Device::flex();
    let model = Qwen::random(super::common::tiny_config(), 1, &device).unwrap();
    let tok = Tokenizer::char();
    let ps = prompts(&tasks(3, 7));
    let mut options = rstar_train::TrainConfig::smoke().eval;
    options.samples = 3;
    options.more_temperatures = vec![0.6];
    options.max_response_tokens = Some(48);
    let threads = Threads {
        asked: Default::default(),
    };
    let two = rstar_train::evaluate(&model, &tok, &ps, &options, 9, &threads).unwrap();
    assert_eq!(
        threads.asked.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the evaluation asks whether it may sample on a second thread"
    );
    let plain = FnExecutor::new(|c: &ToolCall| {
        ToolOutcome::code_judge(true, "", &format!("{}\n", c.code.len()), "", 0.0)
    });
    let one = rstar_train::evaluate(&model, &tok, &ps, &options, 9, &plain).unwrap();
    let texts = |e: &rstar_train::Evaluation| {
        e.trajectories
            .iter()
            .map(|t| t.response_ids.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(texts(&two), texts(&one));
    assert_eq!(format!("{:?}", two.greedy), format!("{:?}", one.greedy));
    assert_eq!(format!("{:?}", two.sampled), format!("{:?}", one.sampled));
    assert_eq!(format!("{:?}", two.more), format!("{:?}", one.more));
    assert_eq!(two.more.len(), 1);
    // 3 problems: greedy 3, and 9 samples at each of two temperatures.
    assert_eq!(two.sampled.as_ref().map(|s| s.count), Some(9));
    // Another seed samples other texts: the comparison above can fail.
    let other = rstar_train::evaluate(&model, &tok, &ps, &options, 10, &plain).unwrap();
    assert_ne!(format!("{:?}", other.sampled), format!("{:?}", one.sampled));
}
