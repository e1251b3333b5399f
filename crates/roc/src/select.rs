//! Down-sampling a batch of rollout groups: the paper's rule, the reference
//! code's rule, equal-reward rejection and the metrics they log.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::hash::Hash;

use rand::seq::index;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::penalty::{Penalty, PenaltyOptions, error_count, penalty};
use crate::{Error, Result, TraceSummary};

/// Which down-sampling rule to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The paper: each side halved in proportion (`⌊n_neg/2⌋` failures of a
    /// group of `2·keep`, the rest successes; [`GroupRule::paper_counts`]),
    /// failures uniformly, successes ∝ 1/`p_total` (zero penalty first), both
    /// without replacement. Groups of at most `keep` traces are kept whole.
    Paper,
    /// The reference code (microsoft/rStar `resample_of_correct`): proportional
    /// split `round(count · keep / G)` with ties to even, floors, lowest-penalty
    /// successes (stable), failures in rollout order; groups smaller than `keep`
    /// are dropped, groups of exactly `keep` kept whole.
    Reference,
}

/// Everything RoC needs to down-sample a batch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RocConfig {
    /// The down-sampling rule.
    pub mode: Mode,
    /// Traces kept per group, `G` (the reference's `down_sample_to_n`).
    pub keep: usize,
    /// Floor on kept failures (the reference's `min_zero_reward_trace_num`).
    pub min_failures: usize,
    /// Floor on kept successes (the reference's `min_non_zero_reward_trace_num`).
    pub min_successes: usize,
    /// How penalties are computed.
    pub penalties: PenaltyOptions,
    /// Drop groups whose rewards are all equal before down-sampling.
    pub reject_equal_reward: bool,
    /// Seed of the paper mode's sampling.
    pub seed: u64,
}

impl RocConfig {
    /// The paper's GRPO-RoC: 2G = 32 → G = 16, no floors (the paper has
    /// none: the proportional counts decide), paper penalties.
    pub fn paper() -> Self {
        Self {
            mode: Mode::Paper,
            keep: 16,
            min_failures: 0,
            min_successes: 0,
            penalties: PenaltyOptions::paper(),
            reject_equal_reward: false,
            seed: 0,
        }
    }

    /// The reference code's example configuration: `down_sample_to_n` 16,
    /// floors 2/2, both penalties with its text heuristics.
    pub fn reference() -> Self {
        Self {
            mode: Mode::Reference,
            min_failures: 2,
            min_successes: 2,
            penalties: PenaltyOptions::reference(),
            ..Self::paper()
        }
    }

    /// Checks that the floors fit in `keep` and that `keep` is positive.
    pub fn validate(&self) -> Result<()> {
        if self.keep == 0 {
            return Err(Error::Config("keep must be at least 1".into()));
        }
        if self.min_failures + self.min_successes > self.keep {
            return Err(Error::Config(format!(
                "min_failures ({}) + min_successes ({}) exceed keep ({})",
                self.min_failures, self.min_successes, self.keep
            )));
        }
        Ok(())
    }

    fn rule(&self) -> GroupRule {
        GroupRule {
            keep: self.keep,
            min_failures: self.min_failures,
            min_successes: self.min_successes,
        }
    }
}

impl Default for RocConfig {
    fn default() -> Self {
        Self::paper()
    }
}

/// The per-group part of the configuration, for callers that down-sample one
/// group at a time. `rewards[i] > 0` marks a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRule {
    /// Traces to keep.
    pub keep: usize,
    /// Floor on kept failures.
    pub min_failures: usize,
    /// Floor on kept successes.
    pub min_successes: usize,
}

impl GroupRule {
    /// The paper's rule on one group; returns the kept indices, ascending.
    ///
    /// A group of at most `keep` traces is kept whole. Otherwise each side is halved in
    /// proportion ([`GroupRule::paper_counts`]): of a group of `n` traces with `n_neg` failures,
    /// `⌊n_neg · keep / n⌋` failures (`⌊n_neg / 2⌋` for the paper's `n = 2 · keep`) and the
    /// other `keep − ⌊n_neg · keep / n⌋` from the successes. Failures are drawn uniformly;
    /// successes with `p_total = 0` first (uniformly among them), then successively with
    /// probability ∝ 1/`p_total` among those left; both without replacement.
    pub fn paper<R: Rng + ?Sized>(
        &self,
        rewards: &[f64],
        p_total: &[f64],
        rng: &mut R,
    ) -> Vec<usize> {
        let g = rewards.len();
        if g <= self.keep {
            return (0..g).collect();
        }
        let (pos, neg) = split(rewards);
        let (k_neg, k_pos) = self.paper_counts(neg.len(), pos.len());
        let mut kept: Vec<usize> = index::sample(rng, neg.len(), k_neg)
            .into_iter()
            .map(|i| neg[i])
            .collect();
        kept.extend(sample_inverse_penalty(&pos, p_total, k_pos, rng));
        kept.sort_unstable();
        kept
    }

    /// The paper mode's counts `(failures, successes)` for a group of `failures + successes`
    /// traces larger than `keep`: `⌊failures · keep / n⌋` failures, the rest successes, then
    /// the floors (`min_failures`, `min_successes`, each capped at what its side has) raise a
    /// side below its floor, taking from the other. Each side is capped at what it has and the
    /// other fills the rest; for a group larger than `keep` the proportional counts never run
    /// short (`keep − ⌊f · keep / n⌋ = ⌈s · keep / n⌉ ≤ s`), so only floors can make a side
    /// fill in. The counts add up to `keep`.
    pub fn paper_counts(&self, failures: usize, successes: usize) -> (usize, usize) {
        let n = failures + successes;
        let keep = self.keep.min(n);
        if n == 0 {
            return (0, 0);
        }
        let mut k_neg = failures * keep / n;
        let floor_neg = self.min_failures.min(failures).min(keep);
        if k_neg < floor_neg {
            k_neg = floor_neg;
        }
        let floor_pos = self.min_successes.min(successes).min(keep);
        if keep - k_neg < floor_pos {
            k_neg = keep - floor_pos;
        }
        // Caps: a side never gives more than it has; the other fills.
        k_neg = k_neg.min(failures);
        let k_pos = (keep - k_neg).min(successes);
        (keep - k_pos, k_pos)
    }

    /// The reference code's rule on one group, exactly; returns the kept
    /// indices, ascending (empty when the group is dropped).
    ///
    /// # Errors
    /// [`Error::ReferenceCount`] (with an empty `uid`) where the reference's own
    /// assertion would fail: the rounded split does not add up to `keep`.
    pub fn reference(&self, rewards: &[f64], p_total: &[f64]) -> Result<Vec<usize>> {
        let g = rewards.len();
        let n = self.keep;
        if g < n {
            return Ok(Vec::new());
        }
        if g == n {
            return Ok((0..g).collect());
        }
        let (mut pos, neg) = split(rewards);
        // Python's `list.sort` is stable, as is `sort_by`; penalties are finite.
        pos.sort_by(|&a, &b| p_total[a].total_cmp(&p_total[b]));
        let proportional =
            |count: usize| ((count * n) as f64 / g as f64).round_ties_even() as usize;
        let mut k_neg = proportional(neg.len());
        let mut k_pos = proportional(pos.len());
        if k_neg < self.min_failures && k_pos < self.min_successes {
            return Ok((0..g).collect());
        }
        let floor_neg = self.min_failures.min(neg.len());
        if k_neg <= floor_neg {
            k_neg = floor_neg;
            k_pos = n.saturating_sub(k_neg);
        }
        let floor_pos = self.min_successes.min(pos.len());
        if k_pos <= floor_pos {
            k_pos = floor_pos;
            k_neg = n.saturating_sub(k_pos);
        }
        let mut kept: Vec<usize> = pos
            .iter()
            .take(k_pos)
            .chain(neg.iter().take(k_neg))
            .copied()
            .collect();
        if kept.len() != n {
            return Err(Error::ReferenceCount {
                uid: String::new(),
                picked: kept.len(),
                keep: n,
            });
        }
        kept.sort_unstable();
        Ok(kept)
    }
}

/// Indices of successes (`reward > 0`) and failures, each in rollout order.
fn split(rewards: &[f64]) -> (Vec<usize>, Vec<usize>) {
    (0..rewards.len()).partition(|&i| rewards[i] > 0.0)
}

/// `k` of `candidates` without replacement: zero-penalty ones first (uniformly
/// among them), then successive draws ∝ 1/`p_total` among the rest.
fn sample_inverse_penalty<R: Rng + ?Sized>(
    candidates: &[usize],
    p_total: &[f64],
    k: usize,
    rng: &mut R,
) -> Vec<usize> {
    let (zero, mut rest): (Vec<usize>, Vec<usize>) =
        candidates.iter().partition(|&&i| p_total[i] <= 0.0);
    if zero.len() >= k {
        return index::sample(rng, zero.len(), k)
            .into_iter()
            .map(|i| zero[i])
            .collect();
    }
    let mut chosen = zero;
    while chosen.len() < k && !rest.is_empty() {
        let total: f64 = rest.iter().map(|&i| 1.0 / p_total[i]).sum();
        let mut u = rng.random::<f64>() * total;
        let mut pick = rest.len() - 1;
        for (j, &i) in rest.iter().enumerate() {
            u -= 1.0 / p_total[i];
            if u < 0.0 {
                pick = j;
                break;
            }
        }
        chosen.push(rest.remove(pick));
    }
    chosen
}

/// Whether a group's rewards are all equal as `torch.allclose(r[0], r)` sees
/// them: `|r[0] - r[i]| <= 1e-8 + 1e-5 · |r[i]|` for every `i`.
pub fn all_rewards_equal(rewards: &[f64]) -> bool {
    let Some(&first) = rewards.first() else {
        return true;
    };
    rewards
        .iter()
        .all(|&r| (first - r).abs() <= 1e-8 + 1e-5 * r.abs())
}

/// What [`select`] decided for a batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Selection {
    /// Indices of the kept traces into the batch, ascending.
    pub kept: Vec<usize>,
    /// Every trace's penalties, in batch order.
    pub penalties: Vec<Penalty>,
    /// Metrics named as the reference names them (`roc_error_ratio/…`,
    /// `roc_answer_format/…`, `reject_equal_reward/…`), plus this crate's own
    /// under `roc/`.
    pub metrics: BTreeMap<String, f64>,
}

/// Groups of a batch by uid, in order of first appearance.
fn groups<K: Hash + Eq>(uids: &[K]) -> Vec<Vec<usize>> {
    let mut slot: HashMap<&K, usize> = HashMap::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, uid) in uids.iter().enumerate() {
        let g = *slot.entry(uid).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[g].push(i);
    }
    out
}

/// Equal-reward rejection on its own: the indices (ascending) of traces whose
/// group has at least two distinct rewards, and the reference's metrics.
/// When nothing survives, the reference skips the step; here `kept` is empty.
pub fn reject_equal_reward<K: Hash + Eq>(
    uids: &[K],
    rewards: &[f64],
) -> Result<(Vec<usize>, BTreeMap<String, f64>)> {
    if uids.len() != rewards.len() {
        return Err(Error::Input(format!(
            "{} uids but {} rewards",
            uids.len(),
            rewards.len()
        )));
    }
    let groups = groups(uids);
    let mut kept = Vec::new();
    let (mut equal, mut equal_zeros, mut equal_non_zero) = (0usize, 0usize, 0usize);
    for group in &groups {
        let r: Vec<f64> = group.iter().map(|&i| rewards[i]).collect();
        if all_rewards_equal(&r) {
            equal += 1;
            if r.iter().all(|&x| x.abs() <= 1e-8) {
                equal_zeros += 1;
            } else {
                equal_non_zero += 1;
            }
        } else {
            kept.extend_from_slice(group);
        }
    }
    kept.sort_unstable();
    let total = groups.len();
    let mut metrics = BTreeMap::new();
    let mut put = |k: &str, v: f64| metrics.insert(format!("reject_equal_reward/{k}"), v);
    put("solve_non_equal_total", (total - equal) as f64);
    put("solve_equal_total", equal as f64);
    put(
        "solve_equal_total_ratio",
        if total > 0 {
            equal as f64 / total as f64
        } else {
            0.0
        },
    );
    put("solve_equal_zeros", equal_zeros as f64);
    put("solve_equal_non_all_zeros", equal_non_zero as f64);
    Ok((kept, metrics))
}

/// Down-samples a batch: `uids[i]` names trace `i`'s group (its prompt).
///
/// Equal-reward rejection runs first when enabled, as in the reference
/// trainer; the RoC metrics are then computed over the surviving traces.
/// Groups are visited in order of first appearance with one seeded ChaCha8
/// generator, so the result is a function of the inputs and `config.seed`.
///
/// # Errors
/// An invalid configuration, inputs of different lengths, a reward that is
/// not finite, or the reference rule's count assertion failing.
pub fn select<K: Hash + Eq + Debug>(
    uids: &[K],
    traces: &[TraceSummary],
    config: &RocConfig,
) -> Result<Selection> {
    config.validate()?;
    if uids.len() != traces.len() {
        return Err(Error::Input(format!(
            "{} uids but {} traces",
            uids.len(),
            traces.len()
        )));
    }
    for (index, t) in traces.iter().enumerate() {
        if !t.reward.is_finite() {
            return Err(Error::NotFinite {
                index,
                field: "reward",
                value: t.reward,
            });
        }
    }
    let rewards: Vec<f64> = traces.iter().map(|t| t.reward).collect();
    let penalties: Vec<Penalty> = traces
        .iter()
        .map(|t| penalty(t, &config.penalties))
        .collect();
    let mut metrics = BTreeMap::new();
    let mut alive = vec![true; traces.len()];
    if config.reject_equal_reward {
        let (kept, m) = reject_equal_reward(uids, &rewards)?;
        metrics.extend(m);
        alive = vec![false; traces.len()];
        for i in kept {
            alive[i] = true;
        }
    }
    let rows: Vec<usize> = (0..traces.len()).filter(|&i| alive[i]).collect();
    if !rows.is_empty() {
        metrics.extend(reference_metrics(
            &rows,
            traces,
            &penalties,
            &config.penalties,
        ));
    }

    let rule = config.rule();
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut kept = Vec::new();
    let mut dropped_groups = 0usize;
    for group in groups(uids) {
        let group: Vec<usize> = group.into_iter().filter(|&i| alive[i]).collect();
        if group.is_empty() {
            continue;
        }
        let r: Vec<f64> = group.iter().map(|&i| rewards[i]).collect();
        let p: Vec<f64> = group.iter().map(|&i| penalties[i].p_total).collect();
        let local = match config.mode {
            Mode::Paper => rule.paper(&r, &p, &mut rng),
            Mode::Reference => rule.reference(&r, &p).map_err(|e| match e {
                Error::ReferenceCount { picked, keep, .. } => Error::ReferenceCount {
                    uid: format!("{:?}", uids[group[0]]),
                    picked,
                    keep,
                },
                other => other,
            })?,
        };
        if local.is_empty() {
            dropped_groups += 1;
        }
        kept.extend(local.into_iter().map(|j| group[j]));
    }
    kept.sort_unstable();
    own_metrics(
        &mut metrics,
        &rows,
        &kept,
        traces,
        &penalties,
        dropped_groups,
    );
    Ok(Selection {
        kept,
        penalties,
        metrics,
    })
}

/// The reference's `roc_error_ratio/*` and `roc_answer_format/*` metrics over `rows`.
fn reference_metrics(
    rows: &[usize],
    traces: &[TraceSummary],
    penalties: &[Penalty],
    options: &PenaltyOptions,
) -> BTreeMap<String, f64> {
    let (mut errors, mut calls, mut p_err_sum) = (0u64, 0u64, 0.0);
    let (mut answers, mut zero, mut one, mut more) = (0u64, 0u64, 0u64, 0u64);
    for &i in rows {
        let t = &traces[i];
        if t.tool_calls > 0 {
            errors += u64::from(error_count(t, options));
            calls += u64::from(t.tool_calls);
        }
        p_err_sum += penalties[i].p_err;
        let a = t.reported_answers();
        answers += u64::from(a);
        match a {
            0 => zero += 1,
            1 => one += 1,
            _ => more += 1,
        }
    }
    let n = rows.len() as f64;
    let mut m = BTreeMap::new();
    let global = if calls > 0 {
        errors as f64 / calls as f64
    } else {
        0.0
    };
    m.insert("roc_error_ratio/global_err_ratio".into(), global);
    m.insert("roc_error_ratio/penalty_weight".into(), p_err_sum / n);
    m.insert(
        "roc_answer_format/answer_per_rollout_mean".into(),
        answers as f64 / n,
    );
    m.insert("roc_answer_format/zero_answer_count".into(), zero as f64);
    m.insert("roc_answer_format/one_answer_count".into(), one as f64);
    m.insert("roc_answer_format/gt_one_answer_count".into(), more as f64);
    m
}

/// This crate's own metrics: counts and the mean `p_total` of kept vs dropped successes.
fn own_metrics(
    metrics: &mut BTreeMap<String, f64>,
    rows: &[usize],
    kept: &[usize],
    traces: &[TraceSummary],
    penalties: &[Penalty],
    dropped_groups: usize,
) {
    let mut is_kept = vec![false; traces.len()];
    for &i in kept {
        is_kept[i] = true;
    }
    let (mut ks, mut kn, mut ds, mut dn) = (0.0, 0usize, 0.0, 0usize);
    for &i in rows {
        if traces[i].is_success() {
            if is_kept[i] {
                ks += penalties[i].p_total;
                kn += 1;
            } else {
                ds += penalties[i].p_total;
                dn += 1;
            }
        }
    }
    let mean = |s: f64, n: usize| if n > 0 { s / n as f64 } else { 0.0 };
    metrics.insert("roc/input_traces".into(), traces.len() as f64);
    metrics.insert("roc/kept_traces".into(), kept.len() as f64);
    metrics.insert("roc/dropped_groups".into(), dropped_groups as f64);
    metrics.insert("roc/kept_success_p_total_mean".into(), mean(ks, kn));
    metrics.insert("roc/dropped_success_p_total_mean".into(), mean(ds, dn));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(keep: usize) -> GroupRule {
        GroupRule {
            keep,
            min_failures: 2,
            min_successes: 2,
        }
    }

    #[test]
    fn reference_rounds_half_to_even() {
        // 5 failures and 3 successes of 8 down to 4: round(2.5) = 2, round(1.5) = 2.
        let rewards = [0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0];
        let p = [0.0, 0.0, 0.9, 0.0, 0.1, 0.0, 0.5, 0.0];
        assert_eq!(rule(4).reference(&rewards, &p).unwrap(), vec![0, 1, 4, 6]);
    }

    #[test]
    fn reference_small_and_exact_groups() {
        assert!(
            rule(4)
                .reference(&[1.0, 0.0, 1.0], &[0.0; 3])
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            rule(4).reference(&[1.0, 0.0, 1.0, 1.0], &[0.0; 4]).unwrap(),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn reference_floor_raises_the_minority() {
        // 1 failure of 8 down to 4: round(0.5) = 0 ≤ min(2, 1) → 1 failure, 3 successes.
        let rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0];
        let p = [0.7, 0.6, 0.5, 0.0, 0.4, 0.3, 0.2, 0.1];
        assert_eq!(rule(4).reference(&rewards, &p).unwrap(), vec![3, 5, 6, 7]);
    }

    #[test]
    fn reference_floors_apply_in_order() {
        // 3 failures, 9 successes of 12 down to 4: round(1) = 1 failure ≤ min(2, 3) → 2 failures,
        // 2 successes; then 2 successes ≤ min(2, 9) → 2 and 2 again. Ties in penalty keep rollout order.
        let r = rule(4);
        let rewards = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        assert_eq!(r.reference(&rewards, &[0.0; 12]).unwrap(), vec![0, 1, 3, 4]);
        // 6 failures, 1 success of 7 down to 3 with floors 1/2: round(18/7) = 3 failures,
        // round(3/7) = 0 successes ≤ min(2, 1) → 1 success and 2 failures.
        let r = GroupRule {
            keep: 3,
            min_failures: 1,
            min_successes: 2,
        };
        assert_eq!(
            r.reference(&[0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0], &[0.0; 7])
                .unwrap(),
            vec![0, 1, 2]
        );
        // The reference's "both below their floors: keep the whole group" branch needs the two
        // rounded counts to sum to at most keep - 2, which rounding cannot do once
        // min_failures + min_successes <= keep (validated), so no valid configuration reaches it.
    }

    #[test]
    fn reference_count_assertion_is_an_error() {
        // 3 of 7 down to 5: round(15/7 = 2.14) = 2 failures... build a split that rounds to 6:
        // 3 failures, 3 successes of 6 down to 5: round(2.5) = 2 each → 4 picked ≠ 5.
        let r = GroupRule {
            keep: 5,
            min_failures: 1,
            min_successes: 1,
        };
        let err = r
            .reference(&[0.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[0.0; 6])
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::ReferenceCount {
                    picked: 4,
                    keep: 5,
                    ..
                }
            ),
            "{err}"
        );
    }

    fn no_floors(keep: usize) -> GroupRule {
        GroupRule {
            keep,
            min_failures: 0,
            min_successes: 0,
        }
    }

    #[test]
    fn paper_counts_halve_each_side_in_proportion() {
        // Groups of 2G = 32 down to 16: ⌊n_neg / 2⌋ failures, the rest successes.
        let r = no_floors(16);
        for (n_neg, want) in [
            (0, (0, 16)),
            (1, (0, 16)),
            (2, (1, 15)),
            (5, (2, 14)),
            (16, (8, 8)),
            (17, (8, 8)),
            (31, (15, 1)),
            (32, (16, 0)),
        ] {
            assert_eq!(r.paper_counts(n_neg, 32 - n_neg), want, "{n_neg} failures");
        }
        // Other sizes: ⌊n_neg · keep / n⌋ failures (7 · 16 / 20 = 5.6, 30 · 16 / 31 = 15.5).
        assert_eq!(r.paper_counts(7, 13), (5, 11));
        assert_eq!(r.paper_counts(30, 1), (15, 1));
        assert_eq!(r.paper_counts(0, 0), (0, 0));
    }

    #[test]
    fn paper_counts_apply_floors_capped_at_each_side() {
        // 1 failure of 8 down to 4: ⌊4/8⌋ = 0, raised to min(2, 1) = 1.
        assert_eq!(rule(4).paper_counts(1, 7), (1, 3));
        // 7 failures, 1 success: ⌊28/8⌋ = 3 failures, 1 success already meets min(2, 1).
        assert_eq!(rule(4).paper_counts(7, 1), (3, 1));
        // 2 of 8 failures: ⌊8/8⌋ = 1, raised to 2.
        assert_eq!(rule(4).paper_counts(2, 6), (2, 2));
    }

    #[test]
    fn paper_keeps_the_proportional_counts() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let failures =
            |kept: &[usize], rewards: &[f64]| kept.iter().filter(|&&i| rewards[i] <= 0.0).count();
        // 2 failures of 8 down to 4: 1 failure, 3 successes (not 2 and 2).
        let rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0];
        let kept = no_floors(4).paper(&rewards, &[0.5; 8], &mut rng);
        assert_eq!((kept.len(), failures(&kept, &rewards)), (4, 1));
        // 1 success: it is kept with 3 failures.
        let rewards = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0];
        let kept = no_floors(4).paper(&rewards, &[0.0; 8], &mut rng);
        assert!(kept.contains(&3));
        assert_eq!((kept.len(), failures(&kept, &rewards)), (4, 3));
    }

    #[test]
    fn paper_takes_zero_penalty_successes_first() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let rewards = [1.0; 8];
        let p = [1.5, 0.0, 2.0, 0.0, 0.5, 1.0, 0.0, 0.25];
        let kept = rule(4).paper(&rewards, &p, &mut rng);
        assert_eq!(kept.len(), 4);
        for z in [1, 3, 6] {
            assert!(kept.contains(&z), "{kept:?}");
        }
    }

    #[test]
    fn paper_survives_floors_larger_than_keep() {
        let r = GroupRule {
            keep: 2,
            min_failures: 5,
            min_successes: 5,
        };
        let rewards = [0.0, 1.0, 0.0, 1.0, 0.0, 1.0];
        let kept = r.paper(&rewards, &[0.5; 6], &mut ChaCha8Rng::seed_from_u64(3));
        assert_eq!(kept.len(), 2);
        assert_eq!(r.paper_counts(3, 3), (0, 2));
    }

    #[test]
    fn paper_keeps_small_groups_whole() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(
            rule(4).paper(&[1.0, 0.0, 1.0], &[0.0; 3], &mut rng),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn allclose_table() {
        assert!(all_rewards_equal(&[]));
        assert!(all_rewards_equal(&[1.0, 1.0, 1.0]));
        assert!(all_rewards_equal(&[0.0, 0.0]));
        assert!(all_rewards_equal(&[1.0, 1.0 + 5e-6]));
        assert!(!all_rewards_equal(&[1.0, 1.0 + 1e-4]));
        assert!(!all_rewards_equal(&[0.0, 1.0, 0.0]));
        assert!(!all_rewards_equal(&[0.0, 1e-7]));
    }

    #[test]
    fn select_rejects_bad_input() {
        let t = [TraceSummary::new(1.0), TraceSummary::new(f64::NAN)];
        let err = select(&["a", "a"], &t, &RocConfig::paper()).unwrap_err();
        assert!(matches!(err, Error::NotFinite { index: 1, .. }), "{err}");
        assert!(matches!(
            select(&["a"], &t, &RocConfig::paper()),
            Err(Error::Input(_))
        ));
        let bad = RocConfig {
            keep: 3,
            min_failures: 2,
            min_successes: 2,
            ..RocConfig::paper()
        };
        assert!(matches!(
            select(&["a", "a"], &t[..1].repeat(2), &bad),
            Err(Error::Config(_))
        ));
    }
}
