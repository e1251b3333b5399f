//! One GRPO-RoC step: RoC's view of a trajectory, the step's bookkeeping, and the update moving
//! the policy.

use burn::optim::ModuleOptimizer;
use rstar_curriculum::Stage;
use rstar_episode::episode::{Role, StopReason, ToolCallRecord, Trajectory, Turn};
use rstar_episode::template::TemplateFormat;
use rstar_episode::toolcall::{OutcomeKind, ToolOutcome};
use rstar_policy::{Qwen, Tokenizer};
use rstar_rollout::Prompt;
use rstar_train::rl::{self, StepInputs, sample_prompts, trace_summary};
use rstar_train::{TrainConfig, optim::adamw};

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
                weight_version: None,
            },
            Turn {
                role: Role::Tool,
                text: "O:1".into(),
                start: 1,
                len: 1,
                weight_version: None,
            },
            Turn {
                role: Role::Assistant,
                text: "<answer>1</answer><answer>".into(),
                start: 2,
                len: 1,
                weight_version: None,
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
    // others, so some groups survive equal-reward rejection. (Trained longer it gets sure of
    // itself: after 150 steps every group of 8 was unanimous once the fused kernels moved the
    // weights' last bits; `surviving > 0` below says so if that happens again.)
    let model = overfit_trainable(&ts, 100);
    let mut options = TrainConfig::smoke().rl;
    options.group_size = 4;
    options.prompts_per_step = 4;
    let stage = Stage::new("s", 160, 3).steps(1);
    let pool = prompts(&ts);
    let before = weights(&model);
    let twin = model.clone();
    let slow_twin = model.clone();
    let mut optimizer: ModuleOptimizer = adamw(0.0);
    let inputs = StepInputs {
        step: 1,
        stage: &stage,
        stage_index: 0,
        pool: &pool,
        options: &options,
        seed: 4,
        template: rstar_episode::template::TemplateFormat::Compact,
        // Every call takes longer than no time at all: all of them are over this budget.
        tool_latency_budget_secs: Some(0.0),
        policy_version: None,
    };
    let (model, rec, trajectories) = rl::step(
        model,
        &mut optimizer,
        &Tokenizer::char(),
        &inputs,
        rl::StepTools::new(&tools()),
    )
    .unwrap();
    assert_eq!(rec.rollouts, 4 * 2 * 4);
    // Every call that reached the sandbox was timed (a call that did not parse never does).
    let made: usize = trajectories.iter().map(|t| t.tool_calls.len()).sum();
    let l = rec.tool_latency.expect("the rollouts called the tools");
    assert!(
        l.calls > 0 && l.calls <= made,
        "{l:?}, {made} calls recorded"
    );
    assert!(
        l.p50_ms <= l.p99_ms && l.p99_ms <= l.max_ms && l.wait_max_ms <= l.max_ms,
        "{l:?}"
    );
    assert_eq!((l.budget_secs, l.over_budget), (Some(0.0), l.calls));
    assert_eq!(trajectories.len(), rec.rollouts);
    assert!(rec.kept.count <= 4 * 4);
    assert_eq!(
        rec.largest_call, 32,
        "rl.max_batch 0: one call for every active episode"
    );
    // The paper's RoC: of each surviving group of 2G = 8 with n_neg failures, ⌊n_neg / 2⌋
    // failures and G − ⌊n_neg / 2⌋ successes are kept.
    let mut kept_successes = 0;
    for group in trajectories.chunks(8) {
        let failures = group
            .iter()
            .filter(|t| t.reward.unwrap_or(0.0) <= 0.0)
            .count();
        if failures != 0 && failures != 8 {
            kept_successes += 4 - failures / 2;
        }
    }
    assert_eq!(
        (rec.kept.accuracy * rec.kept.count as f64).round() as usize,
        kept_successes,
        "{rec:?}"
    );
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
    // The same step in generation calls of at most 5 sequences: the same samples (seeded per
    // rollout), the same update.
    let mut bounded = options.clone();
    bounded.max_batch = 5;
    let (twin, twin_rec, twin_trajectories) = rl::step(
        twin,
        &mut adamw(0.0),
        &Tokenizer::char(),
        &StepInputs {
            options: &bounded,
            ..inputs
        },
        rl::StepTools::new(&tools()),
    )
    .unwrap();
    assert!(twin_rec.largest_call <= 5, "{twin_rec:?}");
    let ids = |ts: &[rstar_episode::episode::Trajectory]| -> Vec<Vec<u32>> {
        ts.iter().map(|t| t.response_ids.clone()).collect()
    };
    assert_eq!(ids(&twin_trajectories), ids(&trajectories));
    assert_eq!((twin_rec.all, twin_rec.kept), (rec.all, rec.kept));
    assert_eq!(weights(&twin), weights(&model));
    // The same step in a stage at half the learning rate (`lr_scale`): Adam's first step moves
    // each weight by lr · g / (|g| + ε), so the policy moves exactly half as far.
    let slow = Stage::new("s", 160, 3).steps(1).lr_scale(0.5);
    let (slow_twin, ..) = rl::step(
        slow_twin,
        &mut adamw(0.0),
        &Tokenizer::char(),
        &StepInputs {
            stage: &slow,
            ..inputs
        },
        rl::StepTools::new(&tools()),
    )
    .unwrap();
    let (full, half) = (weights(&model), weights(&slow_twin));
    let mut moved = 0;
    for ((b, f), h) in before.iter().zip(&full).zip(&half) {
        let (df, dh) = (f - b, h - b);
        assert!(
            (dh - 0.5 * df).abs() <= 1e-7 + 1e-3 * df.abs(),
            "{b} moved by {df} at the run's rate and {dh} at half of it"
        );
        moved += usize::from(df != 0.0);
    }
    assert!(moved > 0);
    // Plain GRPO rolls out G per prompt.
    let mut plain = options.clone();
    plain.roc = rstar_train::RocOptions::off();
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
        rl::StepTools::new(&tools()),
    )
    .unwrap();
    assert_eq!(rec.rollouts, 4 * 4);
}

/// Collects `(id, rank)` of a module's float parameters.
struct Ids(Vec<(burn::module::ParamId, usize)>);

impl burn::module::ModuleVisitor for Ids {
    fn visit_float<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D>>,
    ) {
        self.0.push((param.id, D));
    }
}

/// Every gradient of `grads` flattened, parameter by parameter in the model's order.
fn flat(model: &Qwen, grads: &burn::optim::GradientsParams) -> Vec<f32> {
    use burn::module::Module;
    fn get<const D: usize>(
        g: &burn::optim::GradientsParams,
        id: burn::module::ParamId,
    ) -> Vec<f32> {
        g.get::<D>(id)
            .map(|t| t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap())
            .unwrap_or_default()
    }
    let mut ids = Ids(Vec::new());
    model.visit(&mut ids);
    ids.0
        .iter()
        .flat_map(|&(id, rank)| match rank {
            1 => get::<1>(grads, id),
            2 => get::<2>(grads, id),
            3 => get::<3>(grads, id),
            _ => get::<4>(grads, id),
        })
        .collect()
}

#[test]
fn micro_batches_give_the_gradient_of_the_whole_mini_batch() {
    use rl::{MiniBatchMetrics, micro_batches, mini_batch_gradients, mini_batch_gradients_threads};
    let device = burn::tensor::Device::flex().autodiff();
    let model = Qwen::random(super::common::tiny_config(), 3, &device).unwrap();
    // Nine rows of 5 to 37 tokens: a 3-token prompt (weight 0), then response tokens with every
    // fifth one a tool token (weight 0); one row has no token in the loss at all.
    let rows: Vec<(Vec<u32>, Vec<f32>)> = (0..9usize)
        .map(|r| {
            let len = 5 + 4 * ((r * 5) % 9);
            let ids = (0..len)
                .map(|t| ((t * 7 + r * 3) % 50 + 1) as u32)
                .collect();
            let w = (0..len)
                .map(|t| {
                    if t < 3 || t % 5 == 0 || r == 4 {
                        0.0
                    } else {
                        1.0
                    }
                })
                .collect();
            (ids, w)
        })
        .collect();
    let advantages = [1.2, -0.4, 0.7, -1.1, 0.3, 0.0, -0.8, 0.5, -0.2];
    let all: Vec<usize> = (0..rows.len()).collect();
    let parts = micro_batches(&all, &rows, 60);
    // Sorted by length, nothing lost or repeated, each part within 60 padded tokens.
    let order: Vec<usize> = parts.iter().flatten().copied().collect();
    let mut seen = order.clone();
    seen.sort_unstable();
    assert_eq!(seen, all);
    assert!(
        order
            .windows(2)
            .all(|w| rows[w[0]].0.len() <= rows[w[1]].0.len())
    );
    assert!(parts.len() >= 3, "{parts:?}");
    for p in &parts {
        let longest = p.iter().map(|&i| rows[i].0.len()).max().unwrap();
        assert!(p.len() == 1 || p.len() * longest <= 60, "{p:?}");
    }

    let config = rstar_grpo::GrpoConfig::rstar2_agent();
    let (whole, wm) = mini_batch_gradients(
        &model,
        &rows,
        std::slice::from_ref(&all),
        &advantages,
        None,
        &config,
    )
    .unwrap()
    .unwrap();
    let (split, sm) = mini_batch_gradients(&model, &rows, &parts, &advantages, None, &config)
        .unwrap()
        .unwrap();
    // Old log-probs recomputed by the policy without autodiff: the same ratios of 1.
    let valid = burn::module::Module::valid(&model);
    let olds: Vec<burn::tensor::TensorData> = parts
        .iter()
        .map(|p| {
            let packed: Vec<(&[u32], &[f32])> = p
                .iter()
                .map(|&i| (rows[i].0.as_slice(), rows[i].1.as_slice()))
                .collect();
            let (tokens, _, _) = rstar_train::optim::pack(&packed, &valid.device());
            rstar_policy::sequence_logprobs(&valid, tokens)
                .0
                .into_data()
        })
        .collect();
    let (recomputed, _) =
        mini_batch_gradients(&model, &rows, &parts, &advantages, Some(&olds), &config)
            .unwrap()
            .unwrap();
    // The micro-batches dealt out to two and to three threads, each on its own graph.
    let (two, tm) =
        mini_batch_gradients_threads(&model, &rows, &parts, &advantages, None, &config, 2)
            .unwrap()
            .unwrap();
    let (three, _) =
        mini_batch_gradients_threads(&model, &rows, &parts, &advantages, None, &config, 3)
            .unwrap()
            .unwrap();
    let (a, b, c) = (
        flat(&model, &whole),
        flat(&model, &split),
        flat(&model, &recomputed),
    );
    let (d, e) = (flat(&model, &two), flat(&model, &three));
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    assert!(scale > 1e-4, "the gradient is not trivially zero: {scale}");
    for (x, y) in a
        .iter()
        .zip(&b)
        .chain(a.iter().zip(&c))
        .chain(a.iter().zip(&d))
        .chain(a.iter().zip(&e))
    {
        assert!((x - y).abs() <= 1e-4 * scale + 1e-7, "{x} vs {y}");
    }
    for (f, (x, y)) in [
        ("pg_loss", (sm.pg_loss, tm.pg_loss)),
        ("entropy", (sm.entropy, tm.entropy)),
        ("clip_frac", (sm.clip_frac, tm.clip_frac)),
        ("ppo_kl", (sm.ppo_kl, tm.ppo_kl)),
    ] {
        assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{f}: {x} vs {y}");
    }
    let close = |x: f32, y: f32| (x - y).abs() <= 1e-5 * (1.0 + x.abs());
    let (
        MiniBatchMetrics {
            pg_loss: p1,
            entropy: e1,
            ..
        },
        MiniBatchMetrics {
            pg_loss: p2,
            entropy: e2,
            ..
        },
    ) = (wm, sm);
    assert!(close(p1, p2) && close(e1, e2), "{wm:?} vs {sm:?}");

    // A mini-batch with no token in the loss has no gradient.
    assert!(
        mini_batch_gradients(&model, &rows, &[vec![4]], &advantages, None, &config)
            .unwrap()
            .is_none()
    );
}

#[test]
fn the_rl_learning_rate_warms_up_linearly() {
    let mut options = TrainConfig::tiny().rl;
    options.lr = 2e-4;
    assert_eq!(rl::step_lr(&options, 1), 2e-4, "no warm-up by default");
    options.warmup_steps = 4;
    let lrs: Vec<f64> = (1..=6).map(|s| rl::step_lr(&options, s)).collect();
    let by_hand = [0.5e-4, 1e-4, 1.5e-4, 2e-4, 2e-4, 2e-4];
    for (lr, want) in lrs.iter().zip(by_hand) {
        assert!((lr - want).abs() < 1e-12, "{lrs:?}");
    }
}

#[test]
fn a_negative_entropy_coefficient_lowers_the_policys_entropy() {
    use rl::mini_batch_gradients;
    let device = burn::tensor::Device::flex().autodiff();
    let model = Qwen::random(super::common::tiny_config(), 5, &device).unwrap();
    let rows: Vec<(Vec<u32>, Vec<f32>)> = (0..4usize)
        .map(|r| {
            let ids: Vec<u32> = (0..12).map(|t| ((t * 5 + r * 7) % 40 + 1) as u32).collect();
            let w = (0..12).map(|t| if t < 2 { 0.0 } else { 1.0 }).collect();
            (ids, w)
        })
        .collect();
    // Zero advantages: the policy-gradient term has no gradient, only the entropy term does.
    let advantages = [0.0; 4];
    let parts = vec![(0..4).collect::<Vec<usize>>()];
    let mean_entropy = |m: &Qwen| -> f32 {
        let packed: Vec<(&[u32], &[f32])> = rows
            .iter()
            .map(|(i, w)| (i.as_slice(), w.as_slice()))
            .collect();
        let (tokens, mask, _) = rstar_train::optim::pack(&packed, &m.device());
        let (_, ent) = rstar_policy::sequence_logprobs(m, tokens);
        (ent * mask.clone()).sum().into_scalar::<f32>() / mask.sum().into_scalar::<f32>()
    };
    let plain = rstar_grpo::GrpoConfig::rstar2_agent();
    let (g0, _) = mini_batch_gradients(&model, &rows, &parts, &advantages, None, &plain)
        .unwrap()
        .unwrap();
    assert!(
        flat(&model, &g0).iter().all(|x| x.abs() < 1e-12),
        "no advantage, no entropy term: no gradient"
    );
    let penalised = plain.with_entropy_coeff(-1.0);
    let (g, m) = mini_batch_gradients(&model, &rows, &parts, &advantages, None, &penalised)
        .unwrap()
        .unwrap();
    assert!((m.entropy - mean_entropy(&model)).abs() < 1e-4, "{m:?}");
    // One small SGD step along the negative gradient lowers the mean entropy.
    let before = mean_entropy(&model);
    let mut sgd = burn::optim::SgdConfig::new().init();
    let stepped = burn::optim::ModuleOptimizer::step(&mut sgd, 0.5, model, g);
    let after = mean_entropy(&stepped);
    assert!(after < before - 1e-4, "entropy {before} -> {after}");
}

/// The values of `params`, flattened in order.
fn values(params: &[burn::module::Param<burn::tensor::Tensor<1>>]) -> Vec<f32> {
    params
        .iter()
        .flat_map(|p| p.val().try_into_vec_as::<f32>().unwrap())
        .collect()
}

#[test]
fn the_norm_gains_take_their_own_learning_rate() {
    use rstar_train::optim::{rl_adamw, rl_learning_rate};
    let device = burn::tensor::Device::flex().autodiff();
    let model = Qwen::random(super::common::tiny_config(), 6, &device).unwrap();
    let gains = model.norm_gains();
    // 2 layers x (input, q, k, post-attention norms) + the final norm.
    assert_eq!(gains.len(), 2 * 4 + 1);
    let packed: Vec<(Vec<u32>, Vec<f32>)> = (0..3usize)
        .map(|r| {
            (
                (0..10)
                    .map(|t| ((t * 3 + r * 11) % 40 + 1) as u32)
                    .collect(),
                vec![1.0; 10],
            )
        })
        .collect();
    let rows: Vec<(&[u32], &[f32])> = packed
        .iter()
        .map(|(i, w)| (i.as_slice(), w.as_slice()))
        .collect();
    let (lr, m) = (1e-3, 10.0);
    // The same gradients each time: one SFT-like loss on fixed rows.
    let step = |multiplier: f64| {
        let (tokens, mask, _) = rstar_train::optim::pack(&rows, &device);
        let (logp, _) = rstar_policy::sequence_logprobs(&model, tokens);
        let grads = burn::optim::GradientsParams::from_grads(
            rstar_policy::masked_nll(logp, mask).backward(),
            &model,
        );
        let mut optimizer = rl_adamw(&TrainConfig::tiny().rl);
        let rates = rl_learning_rate(&model, lr, multiplier);
        optimizer.step(rates, model.clone(), grads)
    };
    let (one, scaled) = (step(1.0), step(m));
    let before_gains = values(&gains);
    let delta = |after: &Qwen| -> Vec<f32> {
        values(&after.norm_gains())
            .iter()
            .zip(&before_gains)
            .map(|(a, b)| a - b)
            .collect()
    };
    // Adam's first step moves each parameter by lr · g / (|g| + ε): about lr for the gains
    // with a gradient, m · lr with the multiplier.
    let (d1, dm) = (delta(&one), delta(&scaled));
    let moved = d1.iter().filter(|d| d.abs() > 0.5 * lr as f32).count();
    assert!(moved > d1.len() / 2, "{d1:?}");
    for (a, b) in d1.iter().zip(&dm) {
        assert!((b - m as f32 * a).abs() < 1e-5, "{a} x {m} != {b}");
    }
    // Every other parameter takes the same step either way.
    assert_eq!(
        one.embed_tokens.val().try_into_vec_as::<f32>().unwrap(),
        scaled.embed_tokens.val().try_into_vec_as::<f32>().unwrap()
    );
    for (a, b) in one.layers.iter().zip(&scaled.layers) {
        assert_eq!(
            a.mlp.up_proj.val().try_into_vec_as::<f32>().unwrap(),
            b.mlp.up_proj.val().try_into_vec_as::<f32>().unwrap()
        );
        assert_eq!(
            a.self_attn.q_proj.val().try_into_vec_as::<f32>().unwrap(),
            b.self_attn.q_proj.val().try_into_vec_as::<f32>().unwrap()
        );
    }
    assert_ne!(
        one.embed_tokens.val().try_into_vec_as::<f32>().unwrap(),
        model.embed_tokens.val().try_into_vec_as::<f32>().unwrap(),
        "the step moved the weights"
    );
}

/// The parameter ids AdamW keeps state for.
fn optimizer_ids(optimizer: ModuleOptimizer) -> std::collections::HashSet<u64> {
    let record = burn_pack::Reader::from_bytes(optimizer.into_bytes().unwrap()).unwrap();
    record
        .into_tensors()
        .unwrap()
        .into_iter()
        .map(|t| t.into_parts().unwrap().3.expect("keyed by a parameter"))
        .collect()
}

/// Two RL steps of one stage (`s`, seed 4) on `ts` with `options` and a fresh AdamW: the
/// model, the optimizer, and the updates taken.
fn two_steps(
    mut model: Qwen,
    options: &rstar_train::config::RlOptions,
    ts: &[rstar_tasks::tasks::Task],
) -> (Qwen, ModuleOptimizer, usize) {
    let stage = Stage::new("s", 160, 3).steps(1);
    let pool = prompts(ts);
    let mut optimizer = rstar_train::optim::rl_adamw(options);
    let mut updates = 0;
    for step in 1..=2 {
        let inputs = StepInputs {
            step,
            stage: &stage,
            stage_index: 0,
            pool: &pool,
            options,
            seed: 4,
            template: TemplateFormat::Compact,
            tool_latency_budget_secs: None,
            policy_version: None,
        };
        let (next, rec, _) = rl::step(
            model,
            &mut optimizer,
            &Tokenizer::char(),
            &inputs,
            rl::StepTools::new(&tools()),
        )
        .unwrap();
        model = next;
        updates += rec.updates;
    }
    (model, optimizer, updates)
}

#[test]
fn a_lora_step_moves_the_adapters_alone_on_every_update_thread() {
    let ts = tasks(4, 8);
    let base = overfit_trainable(&ts, 100);
    let lora = rstar_policy::LoraConfig::new(4, 8.0);
    let model = base.with_lora(&lora, 3).unwrap();
    let digest = model.base_digest().unwrap();
    let adapters_before = model.adapter_tensors().unwrap();
    let base_ids: std::collections::HashSet<u64> = {
        let mut all = rstar_train::checkpoint::param_ids(&model);
        all.truncate(all.len() - 2 * 7 * model.config.num_hidden_layers);
        all.into_iter().collect()
    };
    let mut options = TrainConfig::smoke().rl;
    options.group_size = 4;
    options.prompts_per_step = 4;
    // Two update threads: each forks the model, and a fork must keep the base frozen.
    options.threads = 2;
    options.lora = Some(lora);
    let (model, optimizer, updates) = two_steps(model, &options, &ts);
    assert!(updates > 0, "no group survived: nothing to check");
    assert_eq!(model.base_digest().unwrap(), digest, "the base moved");
    assert_ne!(model.adapter_tensors().unwrap(), adapters_before);
    let kept = optimizer_ids(optimizer);
    assert!(!kept.is_empty());
    assert!(
        kept.is_disjoint(&base_ids),
        "AdamW state for a base parameter"
    );
    // The curriculum's reset: a fresh optimizer, nothing kept.
    assert!(optimizer_ids(rstar_train::optim::rl_adamw(&options)).is_empty());
}

/// `rl.gradient_checkpointing` changes memory, not the update: two RL steps (full fine-tuning,
/// and LoRA over a bf16 base) end with the weights of the same steps taken without it, within
/// f32 rounding, and hand back a model that computes as it came (checkpointing off again).
#[test]
fn a_checkpointed_rl_step_takes_the_same_step() {
    let ts = tasks(4, 8);
    let base = overfit_trainable(&ts, 100);
    let lora = rstar_policy::LoraConfig::new(4, 8.0);
    let lora_model = base
        .clone()
        .with_lora(&lora, 3)
        .unwrap()
        .with_base_precision(rstar_policy::Precision::Bf16)
        .unwrap();
    for (name, model, adapters) in [("full", base, None), ("lora", lora_model, Some(lora))] {
        let run = |checkpointing: bool| {
            let mut options = TrainConfig::smoke().rl;
            options.group_size = 4;
            options.prompts_per_step = 4;
            options.lora = adapters.clone();
            options.gradient_checkpointing = checkpointing;
            let (model, _, updates) = two_steps(model.clone(), &options, &ts);
            assert!(updates > 0, "{name}: no group survived: nothing to check");
            assert!(
                !model.checkpointing,
                "{name}: the step hands back the model as it came"
            );
            model.hf_tensors().unwrap()
        };
        let (plain, checkpointed) = (run(false), run(true));
        let before = model.hf_tensors().unwrap();
        // Summed over each tensor: AdamW's first steps are about ±lr wherever the gradient is
        // not zero, so an element whose gradient is within rounding of zero may step either way.
        let mut moved = 0.0f64;
        for (((spec, a), (_, b)), (_, w)) in plain.iter().zip(&checkpointed).zip(&before) {
            let l1 = |u: &[f32], v: &[f32]| -> f64 {
                u.iter().zip(v).map(|(x, y)| f64::from((x - y).abs())).sum()
            };
            let (step, diff) = (l1(a, w), l1(a, b));
            moved += step;
            assert!(
                diff <= 1e-2 * step + 1e-6,
                "{name}: {} differs by {diff} in all (the step moved it by {step})",
                spec.name
            );
        }
        assert!(moved > 0.0, "{name}: nothing moved");
    }
}

/// Issue #63: the scheduled driver's local engines live across the steps of a stage: spawned
/// once, the policy swapped in at each step, spawned again for a new stage; and a step on the
/// kept engines is the step on fresh ones (the same rollouts, the same update).
#[test]
fn local_engines_are_started_once_a_stage_and_give_the_steps_of_fresh_ones() {
    use std::sync::Arc;
    let ts = tasks(4, 8);
    let start = overfit_trainable(&ts, 60);
    let mut options = TrainConfig::smoke().rl;
    options.group_size = 2;
    options.prompts_per_step = 2;
    options.rollout_driver = rstar_train::RolloutDriver::Scheduled;
    options.engines = rstar_train::Engines::Local(2);
    let pool = prompts(&ts);
    let short = Stage::new("short", 120, 3).steps(2);
    let long = Stage::new("long", 160, 3).steps(1);
    // Three steps: two of `short`, one of `long`; with kept engines or fresh ones each step.
    let run = |kept: Option<&mut rl::LocalEngines>| {
        let mut kept = kept;
        let mut model = start.clone();
        let mut optimizer = adamw(1e-3);
        let mut rollouts = Vec::new();
        for (step, stage, index) in [(1, &short, 0), (2, &short, 0), (3, &long, 1)] {
            let inputs = StepInputs {
                step,
                stage,
                stage_index: index,
                pool: &pool,
                options: &options,
                seed: 4,
                template: TemplateFormat::Compact,
                tool_latency_budget_secs: None,
                policy_version: None,
            };
            let tools_here = tools();
            let mut step_tools = rl::StepTools::new(&tools_here).scheduled(Arc::new(tools()));
            if let Some(engines) = kept.as_deref_mut() {
                step_tools = step_tools.engines(engines);
            }
            let (next, _, trajectories) = rl::step(
                model,
                &mut optimizer,
                &Tokenizer::char(),
                &inputs,
                step_tools,
            )
            .unwrap();
            model = next;
            rollouts.push(
                trajectories
                    .iter()
                    .map(|t| (t.response_ids.clone(), t.reward))
                    .collect::<Vec<_>>(),
            );
            if let Some(engines) = kept.as_deref() {
                // Two engines for `short`, two more for `long`: never one set a step.
                let want = if step < 3 { 2 } else { 4 };
                assert_eq!(engines.spawned(), want, "after step {step}: {engines:?}");
            }
        }
        (rollouts, weights(&model))
    };
    let mut engines = rl::LocalEngines::new();
    let kept = run(Some(&mut engines));
    let fresh = run(None);
    assert_eq!(
        kept.0, fresh.0,
        "the same rollouts on kept and fresh engines"
    );
    assert_eq!(kept.1, fresh.1, "the same updates");
}
