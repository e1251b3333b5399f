//! One GRPO-RoC step: RoC's view of a trajectory, the step's bookkeeping, and the update moving
//! the policy.

use burn::optim::ModuleOptimizer;
use rstar_agent::episode::{Role, StopReason, ToolCallRecord, Trajectory, Turn};
use rstar_agent::rollout::Prompt;
use rstar_agent::template::TemplateFormat;
use rstar_agent::toolcall::{OutcomeKind, ToolOutcome};
use rstar_agent::train::rl::{self, StepInputs, sample_prompts, trace_summary};
use rstar_agent::train::{TrainConfig, optim::adamw};
use rstar_curriculum::Stage;
use rstar_policy::{Qwen, Tokenizer};

use super::common::{overfit_trainable, prompts, tasks, tools};

fn record(kind: OutcomeKind) -> ToolCallRecord {
    ToolCallRecord {
        turn: 0,
        call: None,
        failure: None,
        outcome: ToolOutcome::new(kind, "x"),
    }
}

#[test]
fn roc_sees_calls_by_outcome_answers_and_turns() {
    let text = "A:<c>x</c>";
    let t = Trajectory {
        id: "p".into(),
        sample: 0,
        template: TemplateFormat::Compact,
        prompt: String::new(),
        prompt_ids: vec![],
        response_ids: vec![0; 3],
        loss_mask: vec![1, 0, 1],
        turns: vec![
            Turn {
                role: Role::Assistant,
                text: text.into(),
                start: 0,
                len: 1,
            },
            Turn {
                role: Role::Tool,
                text: "O:1".into(),
                start: 1,
                len: 1,
            },
            Turn {
                role: Role::Assistant,
                text: "<answer>1</answer><answer>".into(),
                start: 2,
                len: 1,
            },
        ],
        tool_calls: vec![
            record(OutcomeKind::Output),
            record(OutcomeKind::Error),
            record(OutcomeKind::Timeout),
            record(OutcomeKind::ParseFailure),
            record(OutcomeKind::NoOutput),
        ],
        stop: StopReason::NoToolCall,
        truncated: false,
        ground_truth: Some("1".into()),
        answer: Some("1".into()),
        reward: Some(1.0),
        entropies: vec![],
        token_logprobs: vec![],
        token_texts: vec![],
    };
    let s = trace_summary(&t);
    assert_eq!(s.reward, 1.0);
    assert_eq!(s.tool_calls, 5);
    assert_eq!(
        (s.failed_calls, s.timed_out_calls, s.parse_failures),
        (1, 1, 1)
    );
    assert_eq!((s.closed_answers, s.answer_open_tags), (1, 2));
    assert_eq!(s.assistant_turns, 2);
}

#[test]
fn prompts_are_drawn_without_replacement_and_seeded() {
    let pool: Vec<Prompt> = (0..10)
        .map(|i| Prompt::new(format!("p{i}"), "q", "1"))
        .collect();
    let a = sample_prompts(&pool, 4, 3);
    assert_eq!(a, sample_prompts(&pool, 4, 3));
    assert_eq!(a.len(), 4);
    let mut ids: Vec<&str> = a.iter().map(|p| p.id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    assert_eq!(sample_prompts(&pool, 20, 3).len(), 10);
}

fn weights(model: &Qwen) -> Vec<f32> {
    model.embed_tokens.val().into_data().try_to_vec().unwrap()
}

#[test]
fn a_step_rolls_out_2g_keeps_at_most_g_and_updates_when_a_group_survives() {
    let ts = tasks(4, 8);
    // A policy trained on these problems: at temperature 1 it solves some samples and not
    // others, so some groups survive equal-reward rejection.
    let model = overfit_trainable(&ts, 150);
    let mut options = TrainConfig::smoke().rl;
    options.group_size = 4;
    options.prompts_per_step = 4;
    let stage = Stage::new("s", 160, 3).steps(1);
    let pool = prompts(&ts);
    let before = weights(&model);
    let mut optimizer: ModuleOptimizer = adamw(0.0);
    let inputs = StepInputs {
        step: 1,
        stage: &stage,
        stage_index: 0,
        pool: &pool,
        options: &options,
        seed: 4,
        template: rstar_agent::template::TemplateFormat::Compact,
    };
    let (model, rec, trajectories) = rl::step(
        model,
        &mut optimizer,
        &Tokenizer::char(),
        &inputs,
        &mut tools(),
    )
    .unwrap();
    assert_eq!(rec.rollouts, 4 * 2 * 4);
    assert_eq!(trajectories.len(), rec.rollouts);
    assert!(rec.kept.count <= 4 * 4);
    assert!(trajectories.iter().all(|t| t.response_ids.len() <= 160));
    let surviving = 4 - rec.equal_reward_groups;
    assert!(surviving > 0, "{rec:?}");
    assert_eq!(rec.kept.count, surviving * 4, "{rec:?}");
    assert!(
        rec.kept.accuracy > 0.0 && rec.kept.accuracy < 1.0,
        "{rec:?}"
    );
    assert_eq!(rec.updates, 1);
    assert_ne!(weights(&model), before, "the update moved the policy");
    // One update on fresh samples: the ratio is one, nothing is clipped, the KL is zero.
    assert!(
        rec.clip_frac.abs() < 1e-6 && rec.ppo_kl.abs() < 1e-4,
        "{rec:?}"
    );
    assert!(rec.entropy > 0.0 && rec.grad_norm > 0.0, "{rec:?}");
    // Plain GRPO rolls out G per prompt.
    let mut plain = options.clone();
    plain.roc = false;
    let inputs = StepInputs {
        step: 2,
        options: &plain,
        ..inputs
    };
    let (_, rec, _) = rl::step(
        model,
        &mut optimizer,
        &Tokenizer::char(),
        &inputs,
        &mut tools(),
    )
    .unwrap();
    assert_eq!(rec.rollouts, 4 * 4);
}
