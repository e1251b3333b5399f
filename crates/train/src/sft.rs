//! Supervised fine-tuning on the embedded corpus: demonstrations with real tool outputs,
//! cross-entropy on assistant tokens only, AdamW with warm-up and a cosine or constant schedule,
//! global gradient-norm clipping.

use std::collections::HashMap;
use std::time::Instant;

use burn::optim::{GradientsParams, ModuleOptimizer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rstar_policy::{Qwen, Tokenizer, sequence_nll};
use serde::{Deserialize, Serialize};

use super::config::SftOptions;
use super::optim::{adamw, clip_global_norm, lr_at, pack, sharded_grads, summed_nll};
use crate::error::Error;
use rstar_episode::episode::Limits;
use rstar_episode::template::Template;
use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_rollout::PolicyTokenizer;
use rstar_rollout::scheduled::AsyncTools;
use rstar_tasks::tasks::Task;
use rstar_tasks::tasks::sft::{Demonstration, SftConfig, build_corpus};

/// One tokenized demonstration: ids of prompt and response, and per-token loss weights (1 on
/// assistant tokens, 0 on the prompt and tool turns).
#[derive(Debug, Clone, PartialEq)]
pub struct SftRow {
    /// Token ids.
    pub ids: Vec<u32>,
    /// Per-token weights.
    pub weights: Vec<f32>,
}

/// Builds the compact-template corpus for `tasks` with REAL tool outputs.
///
/// The corpus builder asks for one call at a time; to run them concurrently on the sandbox,
/// the calls are first collected with a stand-in executor (whose outputs are discarded), then
/// run in one batch through `tools`, and the corpus is built again from those outcomes. The
/// builder checks them: a buggy call must fail and a correct one must print the answer.
///
/// # Errors
/// [`rstar_tasks::Error::Demonstration`] when a real outcome is not what the demonstration needs.
pub fn build_demonstrations(
    tasks: &[Task],
    limits: &Limits,
    failing_fraction: f64,
    seed: u64,
    tools: &dyn AsyncTools,
) -> Result<Vec<Demonstration>, Error> {
    let mut config = SftConfig::new(limits.clone());
    config.failing_fraction = failing_fraction;
    config.seed = seed;
    build_demonstrations_with(&Template::compact(), tasks, &config, tools)
}

/// [`build_demonstrations`] in another template (ChatML for HF tokenizers) with a whole
/// [`SftConfig`] (wrong programs included).
///
/// # Errors
/// [`rstar_tasks::Error::Demonstration`] when a real outcome is not what the demonstration needs.
pub fn build_demonstrations_with(
    template: &Template,
    tasks: &[Task],
    config: &SftConfig,
    tools: &dyn AsyncTools,
) -> Result<Vec<Demonstration>, Error> {
    let template = template.clone();
    // Pass 1: which calls will the builder make? Correct and wrong programs "print" their
    // numbers, any other program "fails"; these stand-ins only steer the builder and are
    // thrown away.
    let answers: HashMap<String, String> = tasks
        .iter()
        .flat_map(|t| {
            [
                (t.solution_code(), t.answer()),
                (t.wrong_code(), t.wrong_answer()),
            ]
        })
        .collect();
    let mut calls: Vec<ToolCall> = Vec::new();
    build_corpus(tasks, &template, config, |call: &ToolCall| {
        calls.push(call.clone());
        match answers.get(&call.code) {
            Some(a) => ToolOutcome::code_judge(true, "", &format!("{a}\n"), "", 0.0),
            None => ToolOutcome::code_judge(false, "", "", "Error: stand-in", 0.0),
        }
    })?;
    // Pass 2: run them for real, concurrently.
    let outcomes = tools.run_round(&calls);
    if outcomes.len() != calls.len() {
        return Err(rstar_rollout::Error::OutcomeCount {
            expected: calls.len(),
            got: outcomes.len(),
        }
        .into());
    }
    let real: HashMap<(String, String), ToolOutcome> = calls
        .into_iter()
        .map(|c| (c.code, c.input))
        .zip(outcomes)
        .collect();
    // Pass 3: the corpus from the real outcomes (checked by the builder).
    Ok(build_corpus(
        tasks,
        &template,
        config,
        |call: &ToolCall| {
            real.get(&(call.code.clone(), call.input.clone()))
                .cloned()
                .unwrap_or_else(|| ToolOutcome::code_judge(false, "", "", "call was not run", 0.0))
        },
    )?)
}

/// Tokenizes demonstrations with the policy's tokenizer.
pub fn tokenize(demos: &[Demonstration], tokenizer: &Tokenizer) -> Vec<SftRow> {
    let tok = PolicyTokenizer(tokenizer);
    demos
        .iter()
        .map(|d| {
            let (ids, mask) = d.encode(&tok);
            SftRow {
                ids,
                weights: mask.into_iter().map(f32::from).collect(),
            }
        })
        .collect()
}

/// One SFT step's record (a line of `sft_metrics.jsonl`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SftStep {
    /// 1-based step.
    pub step: usize,
    /// Mean cross-entropy per assistant token (nats).
    pub loss: f32,
    /// Learning rate used.
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Assistant tokens in the batch.
    pub tokens: usize,
    /// Seconds of the step.
    pub secs: f64,
}

/// Trains `model` (on an autodiff device) for `options.steps` steps on `rows`, drawing batches
/// uniformly with replacement from a generator seeded with `seed`. `on_step` sees every step.
///
/// # Errors
/// [`Error::TrainConfig`] for an empty corpus.
pub fn train(
    model: Qwen,
    rows: &[SftRow],
    options: &SftOptions,
    seed: u64,
    mut on_step: impl FnMut(&SftStep),
) -> Result<Qwen, Error> {
    let (model, _) = train_from(
        model,
        adamw(options.weight_decay),
        rows,
        options,
        seed,
        0,
        |s, _, _| {
            on_step(s);
            Ok(true)
        },
    )?;
    Ok(model)
}

/// [`train`] from step `start` (0-based; `start` steps already done) with `optimizer` (a fresh
/// AdamW at 0, the saved one when resuming): the batch generator is fast-forwarded past the
/// first `start` batches, so a resumed run draws the batches an uninterrupted one would.
/// `on_step` sees every step with the updated model and optimizer (to checkpoint them) and
/// returns whether to go on. Returns the model and the optimizer.
///
/// # Errors
/// [`Error::TrainConfig`] for an empty corpus; `on_step`'s errors.
#[allow(clippy::too_many_arguments)] // reason: the model, optimizer, corpus, options, seed, resume point and step hook of one SFT run
pub fn train_from(
    mut model: Qwen,
    mut optimizer: ModuleOptimizer,
    rows: &[SftRow],
    options: &SftOptions,
    seed: u64,
    start: usize,
    mut on_step: impl FnMut(&SftStep, &Qwen, &ModuleOptimizer) -> Result<bool, Error>,
) -> Result<(Qwen, ModuleOptimizer), Error> {
    if rows.is_empty() {
        return Err(Error::TrainConfig {
            field: "sft.corpus_size".into(),
            message: "gave no demonstrations".into(),
        });
    }
    let device = model.device();
    // The compute precision for these steps only: the returned model computes as it came.
    let previous = (model.precision, model.checkpointing);
    model = model
        .with_precision(options.precision)
        .with_gradient_checkpointing(options.gradient_checkpointing);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..start.min(options.steps) * options.batch_size {
        let _ = rng.random_range(0..rows.len());
    }
    for step in start..options.steps {
        let started = Instant::now();
        let batch: Vec<&SftRow> = (0..options.batch_size)
            .map(|_| &rows[rng.random_range(0..rows.len())])
            .collect();
        let packed: Vec<(&[u32], &[f32])> = batch
            .iter()
            .map(|r| (r.ids.as_slice(), r.weights.as_slice()))
            .collect();
        let tokens_in_loss: usize = batch
            .iter()
            .map(|r| r.weights.iter().skip(1).filter(|&&w| w > 0.0).count())
            .sum();
        let (mut grads, loss_value) = if options.threads <= 1 && options.micro_batches <= 1 {
            let (tokens, mask, _) = pack(&packed, &device);
            // Memory bounded in the vocabulary (`sequence_nll`: the one-piece graph when the
            // logits fit in one chunk, else chunked with a closed-form backward).
            let loss = sequence_nll(&model, tokens, mask);
            let loss_value = loss.clone().into_scalar::<f32>();
            (
                GradientsParams::from_grads(loss.backward(), &model),
                loss_value,
            )
        } else {
            // Each micro-batch's summed loss over the batch's token count: they add up to the
            // mean. A thread's micro-batches share one graph and one backward pass.
            let denominator = tokens_in_loss.max(1) as f32;
            // At least one micro-batch per thread.
            let micro =
                length_sorted_micro_batches(&packed, options.micro_batches.max(options.threads));
            let groups = super::optim::deal(micro, options.threads);
            let loss_of = |m: &Qwen, group: &[MicroBatch<'_>]| {
                group
                    .iter()
                    .map(|rows| summed_nll(m, rows))
                    .reduce(|a, b| a + b)
                    .expect("every thread gets a micro-batch")
                    / denominator
            };
            let shards: Vec<&[MicroBatch<'_>]> = groups.iter().map(Vec::as_slice).collect();
            let (grads, value) = sharded_grads(&model, &shards, &loss_of);
            (grads, value as f32)
        };
        let grad_norm = clip_global_norm(&model, &mut grads, options.grad_clip);
        super::optim::check_step_finite(
            "sft",
            step as u64 + 1,
            f64::from(loss_value),
            grad_norm,
            "sft.lr",
        )?;
        let lr = lr_at(
            step,
            options.steps,
            options.warmup_steps,
            options.lr,
            options.schedule,
            options.min_lr_ratio,
        );
        model = optimizer.step(lr, model, grads);
        let record = SftStep {
            step: step + 1,
            loss: loss_value,
            lr,
            grad_norm,
            tokens: tokens_in_loss,
            secs: started.elapsed().as_secs_f64(),
        };
        if !on_step(&record, &model, &optimizer)? {
            break;
        }
    }
    Ok((
        model
            .with_precision(previous.0)
            .with_gradient_checkpointing(previous.1),
        optimizer,
    ))
}

/// Rows of one micro-batch: token ids and per-token loss weights.
type MicroBatch<'a> = Vec<(&'a [u32], &'a [f32])>;

/// `rows` sorted by length (ties in batch order) and cut into `n` micro-batches of consecutive
/// rows, sizes differing by at most one (fewer when there are fewer rows): each is padded only
/// to its own longest row.
pub fn length_sorted_micro_batches<'a>(
    rows: &[(&'a [u32], &'a [f32])],
    n: usize,
) -> Vec<MicroBatch<'a>> {
    let mut sorted = rows.to_vec();
    sorted.sort_by_key(|(ids, _)| ids.len());
    super::optim::shards(&sorted, n)
        .into_iter()
        .map(<[_]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::deal;

    #[test]
    fn micro_batches_are_length_sorted_and_dealt_in_snake_order() {
        let ids: Vec<Vec<u32>> = [5usize, 1, 4, 2, 3, 6, 2]
            .iter()
            .map(|&n| vec![7; n])
            .collect();
        let w: Vec<f32> = vec![1.0; 6];
        let rows: Vec<(&[u32], &[f32])> =
            ids.iter().map(|i| (i.as_slice(), &w[..i.len()])).collect();
        let lens = |mb: &Vec<(&[u32], &[f32])>| mb.iter().map(|(i, _)| i.len()).collect::<Vec<_>>();
        let micro = length_sorted_micro_batches(&rows, 3);
        // 7 rows in 3: sizes 3, 2, 2 of the sorted lengths 1 2 2 3 4 5 6.
        assert_eq!(
            micro.iter().map(lens).collect::<Vec<_>>(),
            vec![vec![1, 2, 2], vec![3, 4], vec![5, 6]]
        );
        assert_eq!(length_sorted_micro_batches(&rows, 9).len(), 7);
        assert_eq!(
            deal((0..7).collect(), 3),
            vec![vec![0, 5, 6], vec![1, 4], vec![2, 3]]
        );
        assert_eq!(deal((0..4).collect(), 2), vec![vec![0, 3], vec![1, 2]]);
        assert_eq!(deal((0..2).collect(), 4), vec![vec![0], vec![1]]);
        assert_eq!(deal((0..3).collect(), 1), vec![vec![0, 1, 2]]);
    }
}
