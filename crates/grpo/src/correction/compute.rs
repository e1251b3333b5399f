//! The computation of [`super`]: verl's masked reductions on `[rows, cols]` slices, the
//! importance weights, the rejection mask and the mismatch metrics, in verl's order and `f32`.

use super::{
    Correction, CorrectionMetrics, IsThreshold, METRIC_PREFIX, RolloutCorrectionConfig, RolloutIs,
    RsCriterion, RsLevel, RsStat, SAFETY_BOUND,
};
use crate::GrpoError;

/// A `[rows, cols]` view with verl's masked reductions.
struct Grid<'a> {
    mask: &'a [f32],
    cols: usize,
}

impl Grid<'_> {
    fn rows(&self) -> usize {
        self.mask.len() / self.cols.max(1)
    }

    fn row(&self, i: usize) -> std::ops::Range<usize> {
        i * self.cols..(i + 1) * self.cols
    }

    /// `Σ where(m≠0, v, 0)·m` over `range`.
    fn sum_in(&self, v: &[f32], range: std::ops::Range<usize>) -> f64 {
        range
            .filter(|&j| self.mask[j] != 0.0)
            .map(|j| f64::from(v[j]) * f64::from(self.mask[j]))
            .sum()
    }

    fn count_in(&self, range: std::ops::Range<usize>) -> f64 {
        self.mask[range].iter().map(|&m| f64::from(m)).sum()
    }

    /// verl's `masked_mean` over everything: `Σ v·m / (Σ m + 1e-8)`.
    fn mean(&self, v: &[f32]) -> f32 {
        let all = 0..self.mask.len();
        (self.sum_in(v, all.clone()) / (self.count_in(all) + 1e-8)) as f32
    }

    /// The same of `f(v)`.
    fn mean_of(&self, v: &[f32], f: impl Fn(f32) -> f32) -> f32 {
        let mapped: Vec<f32> = v.iter().map(|&x| f(x)).collect();
        self.mean(&mapped)
    }

    /// Per row: `Σ_t v·m` (f32, as verl's tensor).
    fn row_sums(&self, v: &[f32]) -> Vec<f32> {
        (0..self.rows())
            .map(|i| self.sum_in(v, self.row(i)) as f32)
            .collect()
    }

    /// Per row: `Σ_t v·m / (Σ_t m + 1e-8)` (0 for an empty row).
    fn row_means(&self, v: &[f32]) -> Vec<f32> {
        (0..self.rows())
            .map(|i| (self.sum_in(v, self.row(i)) / (self.count_in(self.row(i)) + 1e-8)) as f32)
            .collect()
    }

    fn non_empty(&self, i: usize) -> bool {
        self.mask[self.row(i)].iter().any(|&m| m != 0.0)
    }

    /// Values at unmasked positions.
    fn kept<'v>(&'v self, v: &'v [f32]) -> impl Iterator<Item = f32> + 'v {
        v.iter()
            .zip(self.mask)
            .filter(|(_, m)| **m != 0.0)
            .map(|(x, _)| *x)
    }

    /// `sqrt(max(E[c²] − E[c]², 0))` under the mask, 0 when at most one token counts.
    fn std_of(&self, c: &[f32]) -> f64 {
        if self.count_in(0..self.mask.len()) <= 1.0 {
            return 0.0;
        }
        let mean = self.mean(c);
        let square = self.mean_of(c, |x| x * x);
        f64::from((square - mean * mean).max(0.0).sqrt())
    }
}

fn mean(v: &[f32]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64
}

/// The unbiased (n − 1) standard deviation; 0 for fewer than two values.
fn std_unbiased(v: &[f32]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|&x| (f64::from(x) - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

fn max_of(v: impl Iterator<Item = f32>) -> f32 {
    v.fold(f32::NEG_INFINITY, f32::max)
}

fn min_of(v: impl Iterator<Item = f32>) -> f32 {
    v.fold(f32::INFINITY, f32::min)
}

fn fraction(v: &[f32], f: impl Fn(f32) -> bool) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().filter(|&&x| f(x)).count() as f64 / v.len() as f64
}

fn indicator(b: bool) -> f32 {
    if b { 1.0 } else { 0.0 }
}

fn check_inputs(
    rows: usize,
    cols: usize,
    inputs: &[(&'static str, &[f32])],
    mask: &[f32],
) -> Result<(), GrpoError> {
    for (field, v) in inputs.iter().chain([&("response_mask", mask)]) {
        if v.len() != rows * cols {
            return Err(GrpoError::Length {
                field,
                expected: rows * cols,
                got: v.len(),
            });
        }
    }
    for (field, v) in inputs {
        if let Some(index) = v
            .iter()
            .zip(mask)
            .position(|(x, m)| *m != 0.0 && !x.is_finite())
        {
            return Err(GrpoError::NonFinite {
                field,
                index,
                value: v[index],
            });
        }
    }
    if !mask.iter().any(|&m| m != 0.0) {
        return Err(GrpoError::EmptyBatch { what: "tokens" });
    }
    Ok(())
}

/// verl's `compute_rollout_correction_and_rejection_mask`: importance weights (when
/// `rollout_is` is set), the rejection mask (when `rollout_rs` is set) and the mismatch metrics,
/// all from the original `response_mask`.
///
/// # Errors
/// [`GrpoError::Length`] for a slice that is not `rows × cols`, [`GrpoError::NonFinite`] for a
/// log-prob that is not finite where the mask is 1, [`GrpoError::EmptyBatch`] when the mask
/// selects nothing (verl refuses it too), [`GrpoError::Config`] for an invalid config.
pub fn rollout_correction(
    config: &RolloutCorrectionConfig,
    old_log_prob: &[f32],
    rollout_log_prob: &[f32],
    response_mask: &[f32],
    rows: usize,
    cols: usize,
) -> Result<Correction, GrpoError> {
    config.validate()?;
    check_inputs(
        rows,
        cols,
        &[
            ("old_log_prob", old_log_prob),
            ("rollout_log_prob", rollout_log_prob),
        ],
        response_mask,
    )?;
    let grid = Grid {
        mask: response_mask,
        cols,
    };
    // Masked positions may hold anything: zero them so no NaN reaches a product with 0.
    let log_ratio: Vec<f32> = old_log_prob
        .iter()
        .zip(rollout_log_prob)
        .zip(response_mask)
        .map(|((o, r), m)| if *m != 0.0 { o - r } else { 0.0 })
        .collect();
    let mut metrics = CorrectionMetrics::new();
    let weights = config.rollout_is.map(|level| {
        is_weights(
            &grid,
            &log_ratio,
            level,
            config.rollout_is_threshold,
            config.rollout_is_batch_normalize,
            &mut metrics,
        )
    });
    let criteria = config.criteria()?;
    let response_mask = if criteria.is_empty() {
        response_mask.to_vec()
    } else {
        rejection_mask(&grid, &log_ratio, &criteria, &mut metrics)
    };
    metrics.extend(mismatch(&grid, old_log_prob, rollout_log_prob));
    Ok(Correction {
        weights,
        response_mask,
        metrics: metrics
            .into_iter()
            .map(|(k, v)| (format!("{METRIC_PREFIX}{k}"), v))
            .collect(),
    })
}

/// verl's `compute_rollout_corr_metrics_from_logprobs`: the mismatch metrics alone (training and
/// rollout perplexities, their KL, χ²), e.g. between the trainer's current log-probs and the
/// engine's.
///
/// # Errors
/// As [`rollout_correction`]'s.
pub fn mismatch_metrics(
    log_prob: &[f32],
    rollout_log_prob: &[f32],
    response_mask: &[f32],
    rows: usize,
    cols: usize,
) -> Result<CorrectionMetrics, GrpoError> {
    check_inputs(
        rows,
        cols,
        &[
            ("log_prob", log_prob),
            ("rollout_log_prob", rollout_log_prob),
        ],
        response_mask,
    )?;
    let grid = Grid {
        mask: response_mask,
        cols,
    };
    Ok(mismatch(&grid, log_prob, rollout_log_prob)
        .into_iter()
        .map(|(k, v)| (format!("{METRIC_PREFIX}{k}"), v))
        .collect())
}

fn is_weights(
    grid: &Grid<'_>,
    log_ratio: &[f32],
    level: RolloutIs,
    threshold: IsThreshold,
    batch_normalize: bool,
    metrics: &mut CorrectionMetrics,
) -> Vec<f32> {
    let upper = threshold.upper() as f32;
    let lower_m = threshold.metric_lower() as f32;
    let cols = grid.cols;
    // The per-row log-ratio sums of sequence IS.
    let sums = grid.row_sums(log_ratio);
    let raw: Vec<f32> = (0..log_ratio.len())
        .map(|j| {
            let lr = match level {
                RolloutIs::Token => log_ratio[j],
                RolloutIs::Sequence => sums[j / cols],
            };
            lr.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp() * grid.mask[j]
        })
        .collect();
    let mut w: Vec<f32> = raw
        .iter()
        .map(|&r| match threshold {
            IsThreshold::Truncate(_) => r.min(upper),
            IsThreshold::Mask { lower, .. } => {
                if r >= lower as f32 && r <= upper {
                    r
                } else {
                    0.0
                }
            }
        })
        .collect();
    let mut put = |k: &str, v: f64| {
        metrics.insert(k.to_string(), v);
    };
    match level {
        RolloutIs::Sequence => {
            put(
                "rollout_is_max",
                f64::from(max_of(sums.iter().copied()).min(SAFETY_BOUND).exp()),
            );
            put(
                "rollout_is_min",
                f64::from(min_of(sums.iter().copied()).exp()),
            );
            let (hi, lo) = (upper.ln(), lower_m.ln());
            put(
                "rollout_is_ratio_fraction_high",
                fraction(&sums, |s| s > hi),
            );
            put("rollout_is_ratio_fraction_low", fraction(&sums, |s| s < lo));
        }
        RolloutIs::Token => {
            put("rollout_is_max", f64::from(max_of(grid.kept(&w))));
            put("rollout_is_min", f64::from(min_of(grid.kept(&w))));
            put(
                "rollout_is_ratio_fraction_high",
                f64::from(grid.mean_of(&raw, |r| indicator(r > upper))),
            );
            put(
                "rollout_is_ratio_fraction_low",
                f64::from(grid.mean_of(&raw, |r| indicator(r < lower_m))),
            );
        }
    }
    put("rollout_is_mean", f64::from(grid.mean(&w)));
    let ws: Vec<f32> = w.iter().map(|&x| x.clamp(0.0, upper)).collect();
    put("rollout_is_std", grid.std_of(&ws));
    let mc = grid.mean(&ws);
    let normalised = grid.mean_of(&ws, |x| {
        let n = x / (mc + 1e-8);
        n * n
    });
    put("rollout_is_eff_sample_size", 1.0 / f64::from(normalised));
    let sm = grid.row_means(&w);
    put("rollout_is_seq_mean", mean(&sm));
    put("rollout_is_seq_std", std_unbiased(&sm));
    put("rollout_is_seq_max", f64::from(max_of(sm.iter().copied())));
    put("rollout_is_seq_min", f64::from(min_of(sm.iter().copied())));
    put(
        "rollout_is_seq_max_deviation",
        f64::from(max_of(sm.iter().map(|x| (x - 1.0).abs()))),
    );
    let rsm = grid.row_means(&raw);
    put(
        "rollout_is_seq_fraction_high",
        fraction(&rsm, |x| x > upper),
    );
    put(
        "rollout_is_seq_fraction_low",
        fraction(&rsm, |x| x < lower_m),
    );
    if let IsThreshold::Mask { lower, .. } = threshold {
        let lower = lower as f32;
        put(
            "rollout_is_oob_ratio",
            f64::from(grid.mean_of(&raw, |r| indicator(r < lower || r > upper))),
        );
    }
    if batch_normalize {
        let mean = match level {
            RolloutIs::Token => grid.mean(&w),
            RolloutIs::Sequence => {
                let rows: Vec<usize> = (0..grid.rows()).filter(|&i| grid.non_empty(i)).collect();
                let total: f32 = rows.iter().map(|&i| sm[i]).sum();
                total / (rows.len() as f32).max(1e-8)
            }
        };
        if mean > 1e-8 {
            for x in &mut w {
                *x /= mean;
            }
            put("rollout_is_batch_norm_factor", f64::from(mean));
        } else {
            put("rollout_is_batch_norm_factor", 1.0);
        }
    }
    w
}

fn rejection_mask(
    grid: &Grid<'_>,
    log_ratio: &[f32],
    criteria: &[RsCriterion],
    metrics: &mut CorrectionMetrics,
) -> Vec<f32> {
    let cols = grid.cols;
    let rows = grid.rows();
    let clamped: Vec<f32> = log_ratio
        .iter()
        .map(|x| x.clamp(-SAFETY_BOUND, SAFETY_BOUND))
        .collect();
    let stat_of = |stat: RsStat| -> Vec<f32> {
        clamped
            .iter()
            .map(|&l| match stat {
                RsStat::K1 => -l,
                RsStat::K2 => 0.5 * l * l,
                RsStat::K3 => l.exp() - 1.0 - l,
            })
            .collect()
    };
    let valid: Vec<usize> = (0..rows).filter(|&i| grid.non_empty(i)).collect();
    let mut combined = vec![1.0f32; log_ratio.len()];
    for c in criteria {
        let k1 = c.option.stat == RsStat::K1;
        // k1's bounds are on the log-ratio; k2's and k3's on the statistic.
        let hi = if k1 {
            c.upper.ln() as f32
        } else {
            c.upper as f32
        };
        let lo = if k1 {
            c.lower.unwrap_or(1.0 / c.upper).ln() as f32
        } else {
            0.0
        };
        let passes = |v: f32| if k1 { v >= lo && v <= hi } else { v <= hi };
        let stat = stat_of(c.option.stat);
        let (per_token, row_values, keep): (Vec<f32>, Vec<f32>, Vec<bool>) = match c.option.level {
            RsLevel::Token => {
                let keep = stat.iter().map(|&v| passes(v)).collect();
                (stat.clone(), grid.row_means(&stat), keep)
            }
            level => {
                let per_row: Vec<f32> = match level {
                    RsLevel::SeqSum => grid.row_sums(&stat),
                    RsLevel::SeqMean => grid.row_means(&stat),
                    _ => (0..rows)
                        .map(|i| {
                            let m = max_of(
                                grid.row(i)
                                    .filter(|&j| grid.mask[j] != 0.0)
                                    .map(|j| stat[j]),
                            );
                            if m == f32::NEG_INFINITY { 0.0 } else { m }
                        })
                        .collect(),
                };
                let per_token = (0..stat.len()).map(|j| per_row[j / cols]).collect();
                let keep = (0..stat.len()).map(|j| passes(per_row[j / cols])).collect();
                (per_token, per_row, keep)
            }
        };
        let seq_vals: Vec<f32> = valid.iter().map(|&i| row_values[i]).collect();
        let p = format!("rollout_rs_{}", c.option);
        let mut put = |k: &str, v: f64| {
            metrics.insert(format!("{p}_{k}"), v);
        };
        put("mean", f64::from(grid.mean(&per_token)));
        if c.option.level == RsLevel::Token {
            put("max", f64::from(max_of(grid.kept(&per_token))));
            put("min", f64::from(min_of(grid.kept(&per_token))));
            put(
                "fraction_high",
                f64::from(grid.mean_of(&per_token, |v| indicator(v > hi))),
            );
            put(
                "fraction_low",
                if k1 {
                    f64::from(grid.mean_of(&per_token, |v| indicator(v < lo)))
                } else {
                    0.0
                },
            );
        } else {
            put("max", f64::from(max_of(seq_vals.iter().copied())));
            put("min", f64::from(min_of(seq_vals.iter().copied())));
            put("fraction_high", fraction(&seq_vals, |v| v > hi));
            put(
                "fraction_low",
                if k1 {
                    fraction(&seq_vals, |v| v < lo)
                } else {
                    0.0
                },
            );
        }
        let clipped: Vec<f32> = per_token.iter().map(|&v| v.clamp(lo, hi)).collect();
        put("std", grid.std_of(&clipped));
        put("seq_mean", mean(&seq_vals));
        put("seq_std", std_unbiased(&seq_vals));
        put("seq_max", f64::from(max_of(seq_vals.iter().copied())));
        put("seq_min", f64::from(min_of(seq_vals.iter().copied())));
        put(
            "seq_max_deviation",
            f64::from(max_of(seq_vals.iter().map(|v| v.abs()))),
        );
        put("seq_fraction_high", fraction(&seq_vals, |v| v > hi));
        if k1 {
            put("seq_fraction_low", fraction(&seq_vals, |v| v < lo));
        }
        let dropped: Vec<f32> = keep.iter().map(|&k| indicator(!k)).collect();
        put("masked_fraction", f64::from(grid.mean(&dropped)));
        let rows_hit = valid
            .iter()
            .filter(|&&i| grid.row(i).any(|j| !keep[j] && grid.mask[j] != 0.0))
            .count();
        put(
            "seq_masked_fraction",
            rows_hit as f64 / valid.len().max(1) as f64,
        );
        for (c, k) in combined.iter_mut().zip(&keep) {
            *c *= indicator(*k);
        }
    }
    let dropped: Vec<f32> = combined.iter().map(|c| 1.0 - c).collect();
    metrics.insert(
        "rollout_rs_masked_fraction".into(),
        f64::from(grid.mean(&dropped)),
    );
    let rows_hit = (0..rows)
        .filter(|&i| {
            grid.row(i)
                .any(|j| combined[j] <= 0.5 && grid.mask[j] != 0.0)
        })
        .count();
    metrics.insert(
        "rollout_rs_seq_masked_fraction".into(),
        rows_hit as f64 / rows.max(1) as f64,
    );
    grid.mask
        .iter()
        .zip(&combined)
        .map(|(m, c)| m * c)
        .collect()
}

fn mismatch(grid: &Grid<'_>, old: &[f32], rollout: &[f32]) -> CorrectionMetrics {
    let mut out = CorrectionMetrics::new();
    let mut put = |k: &str, v: f64| {
        out.insert(k.to_string(), v);
    };
    let zeroed = |v: &[f32]| -> Vec<f32> {
        v.iter()
            .zip(grid.mask)
            .map(|(x, m)| if *m != 0.0 { *x } else { 0.0 })
            .collect()
    };
    let (old, rollout) = (zeroed(old), zeroed(rollout));
    let mlt = grid.row_means(&old);
    let mlr = grid.row_means(&rollout);
    let exp_neg: Vec<f32> = mlt.iter().map(|x| (-x).exp()).collect();
    put("training_ppl", mean(&exp_neg));
    put("training_log_ppl", -mean(&mlt));
    let diff: Vec<f32> = rollout.iter().zip(&old).map(|(r, o)| r - o).collect();
    put("kl", f64::from(grid.mean(&diff)));
    let lr: Vec<f32> = old.iter().zip(&rollout).map(|(o, r)| o - r).collect();
    put("k3_kl", f64::from(grid.mean_of(&lr, |x| x.exp() - x - 1.0)));
    let exp_neg: Vec<f32> = mlr.iter().map(|x| (-x).exp()).collect();
    put("rollout_ppl", mean(&exp_neg));
    put("rollout_log_ppl", -mean(&mlr));
    let d: Vec<f32> = mlr.iter().zip(&mlt).map(|(r, t)| r - t).collect();
    put("log_ppl_diff", mean(&d));
    let abs: Vec<f32> = d.iter().map(|x| x.abs()).collect();
    put("log_ppl_abs_diff", mean(&abs));
    put("log_ppl_diff_max", f64::from(max_of(d.iter().copied())));
    put("log_ppl_diff_min", f64::from(min_of(d.iter().copied())));
    let ratio: Vec<f32> = d.iter().map(|x| x.exp()).collect();
    put("ppl_ratio", mean(&ratio));
    let chi2_token = grid.mean_of(&lr, |x| {
        let r = x.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp();
        r * r
    });
    put("chi2_token", f64::from(chi2_token) - 1.0);
    let sums: Vec<f32> = grid
        .row_sums(&lr)
        .iter()
        .map(|s| (2.0 * s.clamp(-SAFETY_BOUND, SAFETY_BOUND)).exp())
        .collect();
    put("chi2_seq", mean(&sums) - 1.0);
    out
}
