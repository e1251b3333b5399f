//! Optimisation helpers shared by SFT and RL: AdamW (Burn's), the learning-rate schedule,
//! global gradient-norm clipping, and batching of token sequences into tensors.

use burn::module::{Module, ModuleVisitor, Param, ParamGroup, ParamId};
use burn::optim::lr_scheduler::LrSchedulerConfig;
use burn::optim::lr_scheduler::module_lr_scheduler::{ModuleLearningRate, ModuleLrSchedulerConfig};
use burn::optim::{AdamWConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rstar_episode::Trajectory;
use rstar_policy::Qwen;

use super::config::{LrSchedule, RlOptions};
use crate::error::Error;

/// Burn's AdamW with β = (0.9, 0.999), ε = 1e-8 and the given decoupled weight decay. Clipping is
/// done by [`clip_global_norm`] (Burn's own clips each tensor separately).
pub fn adamw(weight_decay: f32) -> ModuleOptimizer {
    adamw_with(weight_decay, 1e-8)
}

/// The RL optimizer: [`adamw`] with `rl.weight_decay` and `rl.adam_epsilon`.
pub fn rl_adamw(rl: &RlOptions) -> ModuleOptimizer {
    adamw_with(rl.weight_decay, rl.adam_epsilon)
}

/// The learning rates of one RL update: `lr` for every parameter and `lr · gain_multiplier` for
/// the RMSNorm gains ([`Qwen::norm_gains`]), as a Burn parameter group.
///
/// Adam moves every parameter by about its learning rate per step. The gains sit near 1, so a
/// step that is large for a weight matrix's entries (about 0.02–0.1) barely moves them, and
/// the final norm's gain is the policy's inverse temperature: `rl.gain_lr_multiplier` lets RL
/// sharpen (or soften) the whole distribution at the speed it changes the rest.
pub fn rl_learning_rate(model: &Qwen, lr: f64, gain_multiplier: f64) -> ModuleLearningRate {
    if gain_multiplier == 1.0 {
        return lr.into();
    }
    let mut scheduler = ModuleLrSchedulerConfig::new(LrSchedulerConfig::Constant(lr))
        .with_group(
            ParamGroup::ids_from_module(model.norm_gains()),
            LrSchedulerConfig::Constant(lr * gain_multiplier),
        )
        .init()
        .expect("constant learning rates build");
    scheduler.step()
}

/// [`adamw`] with another ε.
fn adamw_with(weight_decay: f32, epsilon: f64) -> ModuleOptimizer {
    AdamWConfig::new()
        .with_epsilon(epsilon as f32)
        .with_weight_decay(weight_decay)
        .init()
}

/// The learning rate of 0-based `step` out of `total`: linear warm-up over `warmup` steps to
/// `peak`, then constant or a cosine down to `min_ratio · peak` at the last step.
pub fn lr_at(
    step: usize,
    total: usize,
    warmup: usize,
    peak: f64,
    schedule: LrSchedule,
    min_ratio: f64,
) -> f64 {
    if step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    match schedule {
        LrSchedule::Constant => peak,
        LrSchedule::Cosine => {
            let span = total.saturating_sub(warmup).saturating_sub(1).max(1);
            let progress = ((step - warmup) as f64 / span as f64).min(1.0);
            let cos = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
            peak * (min_ratio + (1.0 - min_ratio) * cos)
        }
    }
}

/// Collects the ids of a module's float parameters.
struct ParamIds(Vec<(ParamId, usize)>);

impl ModuleVisitor for ParamIds {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push((param.id, D));
    }
}

fn squared_norm<const D: usize>(grads: &GradientsParams, id: ParamId) -> f64 {
    grads
        .get::<D>(id)
        .map(|g| f64::from(g.square().sum().into_scalar::<f32>()))
        .unwrap_or(0.0)
}

fn scale<const D: usize>(grads: &mut GradientsParams, id: ParamId, factor: f32) {
    if let Some(g) = grads.remove::<D>(id) {
        grads.register::<D>(id, g.mul_scalar(factor));
    }
}

/// [`Error::Diverged`] when a step's loss or gradient norm is NaN or infinite: called
/// before the optimizer applies the step, so a diverged step never reaches the weights, a
/// metrics file or a checkpoint.
///
/// # Errors
/// [`Error::Diverged`] naming the phase, the step and the quantity.
pub fn check_step_finite(
    phase: &'static str,
    step: u64,
    loss: f64,
    grad_norm: f64,
    lr_field: &'static str,
) -> Result<(), Error> {
    for (quantity, value) in [("loss", loss), ("gradient norm", grad_norm)] {
        if !value.is_finite() {
            return Err(Error::Diverged {
                phase,
                step,
                quantity,
                value,
                lr_field,
            });
        }
    }
    Ok(())
}

/// Scales every gradient by `max_norm / ‖g‖` when the global L2 norm `‖g‖` over all parameters
/// exceeds `max_norm` (PyTorch's `clip_grad_norm_`). Returns the norm before clipping.
pub fn clip_global_norm(model: &Qwen, grads: &mut GradientsParams, max_norm: Option<f32>) -> f64 {
    let mut ids = ParamIds(Vec::new());
    model.visit(&mut ids);
    let mut total = 0.0;
    for &(id, rank) in &ids.0 {
        total += match rank {
            1 => squared_norm::<1>(grads, id),
            2 => squared_norm::<2>(grads, id),
            3 => squared_norm::<3>(grads, id),
            _ => squared_norm::<4>(grads, id),
        };
    }
    let norm = total.sqrt();
    if let Some(max) = max_norm
        && norm > f64::from(max)
    {
        let factor = (f64::from(max) / (norm + 1e-6)) as f32;
        for &(id, rank) in &ids.0 {
            match rank {
                1 => scale::<1>(grads, id, factor),
                2 => scale::<2>(grads, id, factor),
                3 => scale::<3>(grads, id, factor),
                _ => scale::<4>(grads, id, factor),
            }
        }
    }
    norm
}

/// The summed negative log-likelihood of the weighted tokens of `rows` (ids and per-token
/// weights, packed by [`pack`]) under `model`, as a scalar tensor (a graph on an autodiff
/// model): divide it by the token count that makes the mean you need.
pub fn summed_nll(model: &Qwen, rows: &[(&[u32], &[f32])]) -> Tensor<1> {
    let (tokens, mask, _) = pack(rows, &model.device());
    // Memory bounded in the vocabulary: above `LOGIT_CHUNK_ELEMENTS` logits, chunked with a
    // closed-form backward; below it, the one-piece graph.
    rstar_policy::sequence_target_loss(model, tokens, |logp| (logp * mask).sum().neg())
}

/// The gradients of a loss over a batch split into shards, and the sum of the shards' loss
/// values. With one shard it runs on the calling thread with `model` itself; with more, each
/// shard's forward and backward pass runs on its own thread with its own autodiff graph (the
/// model forked, [`Module::fork`], with the same parameter ids) and the gradients are summed
/// in shard order, so the result is deterministic for a shard count. `loss_of` must scale each
/// shard's loss so that the shards add up to the batch's (a sum over tokens divided by the
/// batch's token count, not the shard's).
///
/// This is how SFT uses more than one core: Burn's CPU backend runs one operation at a time
/// and keeps about one core busy, so two shards on two threads run two graphs at once.
pub fn sharded_grads<T: Sync>(
    model: &Qwen,
    shards: &[&[T]],
    loss_of: &(dyn Fn(&Qwen, &[T]) -> Tensor<1> + Sync),
) -> (GradientsParams, f64) {
    let run = |m: &Qwen, shard: &[T]| {
        let loss = loss_of(m, shard);
        let value = f64::from(loss.clone().into_scalar::<f32>());
        (GradientsParams::from_grads(loss.backward(), m), value)
    };
    if let [shard] = shards {
        return run(model, shard);
    }
    let results = on_forks(model, shards, &|m: &Qwen, shard: &&[T]| run(m, shard));
    let mut accumulator = GradientsAccumulator::<Qwen>::new();
    let mut total = 0.0;
    for (grads, value) in results {
        accumulator.accumulate(model, grads);
        total += value;
    }
    (accumulator.grads(), total)
}

/// `items` cut into `n` contiguous shards of sizes differing by at most one (fewer when there
/// are fewer items; empty shards are left out).
pub fn shards<T>(items: &[T], n: usize) -> Vec<&[T]> {
    let n = n.clamp(1, items.len().max(1));
    let (base, extra) = (items.len() / n, items.len() % n);
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let len = base + usize::from(i < extra);
        if len > 0 {
            out.push(&items[start..start + len]);
        }
        start += len;
    }
    out
}

/// `work` on each of `groups`, each on its own thread with the model forked ([`Module::fork`]:
/// the same parameter ids, its own autodiff graph); the results in group order. The threads
/// of [`sharded_grads`] and of the RL update's micro-batches.
pub fn on_forks<G: Sync, R: Send>(
    model: &Qwen,
    groups: &[G],
    work: &(dyn Fn(&Qwen, &G) -> R + Sync),
) -> Vec<R> {
    let device = model.device();
    std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .iter()
            .map(|group| {
                let forked = model.clone().fork(&device);
                scope.spawn(move || work(&forked, group))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a forked model's thread does not panic"))
            .collect()
    })
}

/// `items` (micro-batches sorted by length) dealt out to `threads` groups in snake order
/// (0, 1, …, n−1, n−1, …, 0, 0, 1, …), so each group gets short and long ones alike; empty
/// groups are left out.
pub fn deal<T>(items: Vec<T>, threads: usize) -> Vec<Vec<T>> {
    let n = threads.max(1);
    let mut groups: Vec<Vec<T>> = (0..n).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        let (pass, at) = (i / n, i % n);
        let g = if pass % 2 == 0 { at } else { n - 1 - at };
        groups[g].push(item);
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// Right-padded token rows as an `[rows, len]` Int tensor and the `[rows, len - 1]` float mask of
/// next-token positions: position `t` of the mask weighs the prediction of token `t + 1`,
/// `mask_of[row][t + 1]`. Padding uses id 0 with weight 0.
pub fn pack(rows: &[(&[u32], &[f32])], device: &Device) -> (Tensor<2, Int>, Tensor<2>, usize) {
    let len = rows
        .iter()
        .map(|(ids, _)| ids.len())
        .max()
        .unwrap_or(0)
        .max(2);
    let mut ids = Vec::with_capacity(rows.len() * len);
    let mut mask = Vec::with_capacity(rows.len() * (len - 1));
    for (r, m) in rows {
        ids.extend(r.iter().map(|&t| i64::from(t)));
        ids.extend(std::iter::repeat_n(0i64, len - r.len()));
        mask.extend(m.iter().skip(1).copied());
        mask.extend(std::iter::repeat_n(0.0f32, len - m.len().max(1)));
    }
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [rows.len(), len]), device);
    let mask = Tensor::<2>::from_data(TensorData::new(mask, [rows.len(), len - 1]), device);
    (tokens, mask, len)
}

/// Per-token values of one row that the engines report per weighted token (the k-th value for
/// the row's k-th token with weight > 0: an engine's log-probs of the assistant tokens) on the
/// shifted grid of [`pack`], `len − 1` columns: column `j − 1` holds token `j`'s value, as the
/// mask's column `j − 1` weighs the prediction of token `j`; 0 where the weight is 0 and past
/// the row. A weighted token 0 (a row without a prompt) has no column: its value is dropped.
/// `None` unless there is one value per weighted token.
pub fn shifted_values(weights: &[f32], values: &[f32], len: usize) -> Option<Vec<f32>> {
    let weighted = weights.iter().filter(|&&w| w > 0.0).count();
    if values.len() != weighted || weights.len() > len {
        return None;
    }
    let mut out = vec![0.0f32; len.saturating_sub(1)];
    let mut k = 0;
    for (j, &w) in weights.iter().enumerate() {
        if w > 0.0 {
            if j >= 1 {
                out[j - 1] = values[k];
            }
            k += 1;
        }
    }
    Some(out)
}

/// The values of a shifted row (`len − 1` columns, as [`pack`] lays out a row's predictions)
/// at the row's weighted tokens from token 1 on, in order: [`shifted_values`]'s inverse.
pub fn unshifted_values(weights: &[f32], shifted: &[f32]) -> Vec<f32> {
    weights
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, w)| **w > 0.0)
        .map(|(j, _)| shifted[j - 1])
        .collect()
}

/// Padded tokens (rows × longest row) per micro-batch of the update.
pub const MICRO_BATCH_TOKENS: usize = 8192;

/// The rows `chunk` (indices into `rows`) sorted by length and cut into micro-batches of at most `budget` padded
/// tokens (at least one row each).
pub fn micro_batches(
    chunk: &[usize],
    rows: &[(Vec<u32>, Vec<f32>)],
    budget: usize,
) -> Vec<Vec<usize>> {
    let mut order = chunk.to_vec();
    order.sort_by_key(|&i| (rows[i].0.len(), i));
    let mut parts: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in order {
        // Sorted ascending, so row `i` is the longest of the micro-batch it joins.
        if !current.is_empty() && (current.len() + 1) * rows[i].0.len() > budget {
            parts.push(std::mem::take(&mut current));
        }
        current.push(i);
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

/// A trajectory as one training sequence: the prompt and response ids, and per id its loss
/// weight (0 on the prompt and tool tokens, 1 on the assistant's).
pub(crate) fn sequence_row(t: &Trajectory) -> (Vec<u32>, Vec<f32>) {
    let mut ids = t.prompt_ids.clone();
    ids.extend_from_slice(&t.response_ids);
    let mut w = vec![0.0f32; t.prompt_ids.len()];
    w.extend(t.loss_mask.iter().map(|&m| f32::from(m)));
    (ids, w)
}

/// The rows of a micro-batch, borrowed as [`pack`] takes them.
pub(crate) fn packed<'a>(
    part: &[usize],
    rows: &'a [(Vec<u32>, Vec<f32>)],
) -> Vec<(&'a [u32], &'a [f32])> {
    part.iter()
        .map(|&i| (rows[i].0.as_slice(), rows[i].1.as_slice()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_values_land_on_the_shifted_grid_of_their_tokens() {
        // Two prompt tokens, assistant, assistant, tool, tool, assistant; packed to 8.
        let w = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0];
        let grid = shifted_values(&w, &[-1.0, -2.0, -3.0], 8).unwrap();
        assert_eq!(grid, vec![0.0, -1.0, -2.0, 0.0, 0.0, -3.0, 0.0]);
        // The mask pack lays out weighs exactly those columns.
        let ids = [5u32; 7];
        let (_, mask, len) = pack(&[(&ids[..], &w[..]), (&ids[..1], &w[..1])], &Device::flex());
        assert_eq!(len, 7);
        let mask: Vec<f32> = mask.into_data().iter::<f32>().collect();
        let grid = shifted_values(&w, &[-1.0, -2.0, -3.0], len).unwrap();
        for (c, m) in mask[..6].iter().enumerate() {
            assert_eq!(*m != 0.0, grid[c] != 0.0, "column {c}");
        }
        assert_eq!(unshifted_values(&w, &grid), vec![-1.0, -2.0, -3.0]);
        // One value per weighted token, or none.
        assert_eq!(shifted_values(&w, &[-1.0, -2.0], 8), None);
        // A weighted first token has no column: its value is dropped, the rest stay in place.
        let w0 = [1.0, 1.0, 0.0, 1.0];
        assert_eq!(
            shifted_values(&w0, &[-9.0, -1.0, -2.0], 4).unwrap(),
            vec![-1.0, 0.0, -2.0]
        );
    }

    #[test]
    fn warmup_then_cosine_by_hand() {
        // 10 steps, 2 warm-up: 0.5, 1.0, then cos from 1 down to 0.1 over steps 2..=9.
        let lr = |s| lr_at(s, 10, 2, 1.0, LrSchedule::Cosine, 0.1);
        assert!((lr(0) - 0.5).abs() < 1e-12);
        assert!((lr(1) - 1.0).abs() < 1e-12);
        assert!((lr(2) - 1.0).abs() < 1e-12);
        assert!((lr(9) - 0.1).abs() < 1e-12);
        // 9 steps, 2 warm-up: span 6, step 5 is half way: 0.1 + 0.9 · (1 + cos(π/2)) / 2 = 0.55.
        assert!((lr_at(5, 9, 2, 1.0, LrSchedule::Cosine, 0.1) - 0.55).abs() < 1e-12);
        assert_eq!(lr_at(7, 10, 2, 2.0, LrSchedule::Constant, 0.1), 2.0);
    }

    #[test]
    fn pack_shifts_the_mask_and_pads() {
        let device = Device::flex();
        let a: (&[u32], &[f32]) = (&[5, 6, 7], &[0.0, 1.0, 1.0]);
        let b: (&[u32], &[f32]) = (&[8, 9], &[0.0, 1.0]);
        let (tokens, mask, len) = pack(&[a, b], &device);
        assert_eq!(len, 3);
        let t: Vec<i64> = tokens.into_data().convert::<i64>().try_to_vec().unwrap();
        assert_eq!(t, vec![5, 6, 7, 8, 9, 0]);
        let m: Vec<f32> = mask.into_data().try_to_vec().unwrap();
        assert_eq!(m, vec![1.0, 1.0, 1.0, 0.0]);
    }
}
