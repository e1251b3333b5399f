//! Outcome advantages on plain `f32` slices: GRPO, Dr. GRPO and RLOO, grouped by prompt.

use std::collections::HashMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use crate::GrpoError;

/// The epsilon added to the group standard deviation by GRPO: verl's default
/// (`compute_grpo_outcome_advantage(epsilon=1e-6)`). TRL uses `1e-4`, which changes the result
/// at the fifth decimal for small groups, so this is a field, not a constant, in
/// [`AdvantageConfig`].
pub const VERL_EPSILON: f32 = 1e-6;

/// How the per-sequence outcome score is turned into an advantage within its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdvantageEstimator {
    /// GRPO: `(s_i − mean) / (std + ε)` with the unbiased (`n − 1`) standard deviation of the group.
    Grpo,
    /// Dr. GRPO: `s_i − mean`, no division by the standard deviation
    /// (verl's `norm_adv_by_std_in_grpo = False`).
    DrGrpo,
    /// RLOO: `s_i − mean of the others = n/(n−1) · (s_i − mean)`.
    Rloo,
}

/// What a group with a single member gets.
///
/// A group of one has no baseline to compare against, so its advantage carries no signal about the
/// relative quality of the response. verl nevertheless sets `mean = 0, std = 1` for such groups,
/// which hands the raw reward (divided by `1 + ε` for GRPO) through as the advantage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SingletonGroups {
    /// Zero advantage (the default): no baseline, no gradient.
    #[default]
    Zero,
    /// verl's behaviour: mean 0 and std 1, so the advantage is the reward (over `1 + ε` for GRPO).
    Verl,
}

/// Everything the advantage computation needs besides the data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdvantageConfig {
    /// The estimator.
    pub estimator: AdvantageEstimator,
    /// Added to the standard deviation by [`AdvantageEstimator::Grpo`]; ignored by the others.
    /// Default [`VERL_EPSILON`] (`1e-6`).
    pub epsilon: f32,
    /// What groups of one get.
    pub singleton_groups: SingletonGroups,
}

impl AdvantageConfig {
    /// GRPO with verl's epsilon and zero advantage for groups of one.
    pub fn new() -> Self {
        Self {
            estimator: AdvantageEstimator::Grpo,
            epsilon: VERL_EPSILON,
            singleton_groups: SingletonGroups::Zero,
        }
    }

    /// The same configuration with another estimator.
    pub fn with_estimator(mut self, estimator: AdvantageEstimator) -> Self {
        self.estimator = estimator;
        self
    }

    /// The same configuration with another epsilon.
    pub fn with_epsilon(mut self, epsilon: f32) -> Self {
        self.epsilon = epsilon;
        self
    }

    /// The same configuration with another rule for groups of one.
    pub fn with_singleton_groups(mut self, singleton_groups: SingletonGroups) -> Self {
        self.singleton_groups = singleton_groups;
        self
    }

    /// Checks the ranges of the fields.
    pub fn validate(&self) -> Result<(), GrpoError> {
        if !(self.epsilon.is_finite() && self.epsilon >= 0.0) {
            return Err(GrpoError::Config {
                field: "advantage.epsilon",
                reason: format!("must be finite and >= 0, got {}", self.epsilon),
            });
        }
        Ok(())
    }
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// One advantage per sequence: each score is compared with the other scores of its group.
///
/// `scores[i]` is the outcome reward of sequence `i` (verl sums its token-level rewards, which hold
/// the reward on the last response token), `groups[i]` the prompt it answers (verl's `uid`); groups
/// may be interleaved. Statistics are computed in `f64` and the result rounded to `f32`.
///
/// A group whose scores are all equal gets exactly zero; a group of one gets what
/// [`AdvantageConfig::singleton_groups`] says.
///
/// # Errors
/// [`GrpoError::Length`] if the slices differ in length, [`GrpoError::NonFinite`] for a NaN or
/// infinite score, [`GrpoError::Config`] for a negative epsilon.
pub fn group_advantages<K: Eq + Hash>(
    scores: &[f32],
    groups: &[K],
    config: &AdvantageConfig,
) -> Result<Vec<f32>, GrpoError> {
    config.validate()?;
    if groups.len() != scores.len() {
        return Err(GrpoError::Length {
            field: "groups",
            expected: scores.len(),
            got: groups.len(),
        });
    }
    check_finite("scores", scores)?;

    // Members of each group, in order of first appearance (the order does not change the result).
    let mut slot: HashMap<&K, usize> = HashMap::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (i, key) in groups.iter().enumerate() {
        let g = *slot.entry(key).or_insert_with(|| {
            members.push(Vec::new());
            members.len() - 1
        });
        members[g].push(i);
    }

    let mut out = vec![0.0f32; scores.len()];
    for idx in &members {
        let n = idx.len();
        if n == 1 {
            let i = idx[0];
            out[i] = match config.singleton_groups {
                SingletonGroups::Zero => 0.0,
                SingletonGroups::Verl => match config.estimator {
                    AdvantageEstimator::Grpo => {
                        (f64::from(scores[i]) / (1.0 + f64::from(config.epsilon))) as f32
                    }
                    AdvantageEstimator::DrGrpo | AdvantageEstimator::Rloo => scores[i],
                },
            };
            continue;
        }
        let first = scores[idx[0]];
        if idx.iter().all(|&i| scores[i] == first) {
            // Equal rewards carry no preference; zero exactly, whatever the epsilon.
            continue;
        }
        let nf = n as f64;
        let mean = idx.iter().map(|&i| f64::from(scores[i])).sum::<f64>() / nf;
        let scale = match config.estimator {
            AdvantageEstimator::Grpo => {
                let var = idx
                    .iter()
                    .map(|&i| (f64::from(scores[i]) - mean).powi(2))
                    .sum::<f64>()
                    / (nf - 1.0);
                1.0 / (var.sqrt() + f64::from(config.epsilon))
            }
            AdvantageEstimator::DrGrpo => 1.0,
            AdvantageEstimator::Rloo => nf / (nf - 1.0),
        };
        for &i in idx {
            out[i] = ((f64::from(scores[i]) - mean) * scale) as f32;
        }
    }
    Ok(out)
}

/// Spreads one advantage per sequence over its response tokens: `out[b·T + t] = adv[b] · mask[b·T + t]`.
///
/// `response_mask` is row-major `[batch, response_len]` with 1 for tokens the policy generated and
/// 0 for padding and tool-response tokens, so those get no advantage.
///
/// # Errors
/// [`GrpoError::Length`] if `response_mask.len() != advantages.len() * response_len`.
pub fn broadcast_to_tokens(
    advantages: &[f32],
    response_mask: &[f32],
    response_len: usize,
) -> Result<Vec<f32>, GrpoError> {
    let expected = advantages.len() * response_len;
    if response_mask.len() != expected {
        return Err(GrpoError::Length {
            field: "response_mask",
            expected,
            got: response_mask.len(),
        });
    }
    let mut out = Vec::with_capacity(expected);
    for (b, &a) in advantages.iter().enumerate() {
        let row = &response_mask[b * response_len..(b + 1) * response_len];
        out.extend(row.iter().map(|&m| if m != 0.0 { a * m } else { 0.0 }));
    }
    Ok(out)
}

/// [`group_advantages`] followed by [`broadcast_to_tokens`]: verl's
/// `compute_grpo_outcome_advantage` / `compute_rloo_outcome_advantage` in one call.
///
/// # Errors
/// Those of the two functions.
pub fn token_advantages<K: Eq + Hash>(
    scores: &[f32],
    groups: &[K],
    response_mask: &[f32],
    response_len: usize,
    config: &AdvantageConfig,
) -> Result<Vec<f32>, GrpoError> {
    let adv = group_advantages(scores, groups, config)?;
    broadcast_to_tokens(&adv, response_mask, response_len)
}

fn check_finite(field: &'static str, values: &[f32]) -> Result<(), GrpoError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(GrpoError::NonFinite {
            field,
            index,
            value: values[index],
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpo() -> AdvantageConfig {
        AdvantageConfig::new()
    }

    #[test]
    fn grpo_two_of_four_by_hand() {
        // mean 0.5, unbiased std sqrt(1/3) = 0.57735; (1 - 0.5) / 0.57735 = 0.866025.
        let a = group_advantages(&[1.0, 1.0, 0.0, 0.0], &[7, 7, 7, 7], &grpo()).unwrap();
        let expected = 0.5 / ((1.0f64 / 3.0).sqrt() + 1e-6);
        for (x, sign) in a.iter().zip([1.0, 1.0, -1.0, -1.0]) {
            assert!((f64::from(*x) - sign * expected).abs() < 1e-6, "{x}");
        }
    }

    #[test]
    fn dr_grpo_and_rloo_by_hand() {
        let scores = [1.0, 0.0, 0.0];
        let g = ["a", "a", "a"];
        let dr = group_advantages(
            &scores,
            &g,
            &grpo().with_estimator(AdvantageEstimator::DrGrpo),
        )
        .unwrap();
        assert!((dr[0] - 2.0 / 3.0).abs() < 1e-6 && (dr[1] + 1.0 / 3.0).abs() < 1e-6);
        let rloo = group_advantages(
            &scores,
            &g,
            &grpo().with_estimator(AdvantageEstimator::Rloo),
        )
        .unwrap();
        // 1 − mean(0, 0) = 1; 0 − mean(1, 0) = −0.5.
        assert!((rloo[0] - 1.0).abs() < 1e-6 && (rloo[1] + 0.5).abs() < 1e-6);
    }

    #[test]
    fn singletons_and_equal_groups() {
        let a = group_advantages(&[1.0, 0.3, 0.3], &[1, 2, 2], &grpo()).unwrap();
        assert_eq!(a, vec![0.0, 0.0, 0.0]);
        let v = group_advantages(
            &[1.0],
            &[1],
            &grpo().with_singleton_groups(SingletonGroups::Verl),
        )
        .unwrap();
        assert!((v[0] - 1.0 / (1.0 + 1e-6)).abs() < 1e-7);
    }

    #[test]
    fn bad_input() {
        assert!(matches!(
            group_advantages(&[1.0, 2.0], &[1], &grpo()),
            Err(GrpoError::Length {
                field: "groups",
                ..
            })
        ));
        assert!(matches!(
            group_advantages(&[1.0, f32::NAN], &[1, 1], &grpo()),
            Err(GrpoError::NonFinite { index: 1, .. })
        ));
        assert!(matches!(
            group_advantages(&[1.0], &[1], &grpo().with_epsilon(-1.0)),
            Err(GrpoError::Config { .. })
        ));
        assert!(broadcast_to_tokens(&[1.0, 2.0], &[1.0; 5], 3).is_err());
    }

    #[test]
    fn broadcast_masks_tool_tokens() {
        let t = broadcast_to_tokens(&[2.0, -1.0], &[1.0, 0.0, 1.0, 1.0, 1.0, 0.0], 3).unwrap();
        assert_eq!(t, vec![2.0, 0.0, 2.0, -1.0, -1.0, 0.0]);
    }
}
