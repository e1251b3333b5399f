//! Rollout correction: the engine that sampled a rollout (vLLM in bf16, an older weight version)
//! never computes exactly the trainer's probabilities. verl 0.9.1's `algorithm.rollout_correction`
//! corrects for it with importance weights (truncated, TIS; or masked, IcePop) and rejection
//! masks, and reports how far the two policies are apart. This module is that computation on
//! plain `f32` slices, with verl's names, semantics and metrics (no Burn: the Python wheel and a
//! trainer's whole-batch pass use it as it is); the loss applies its weights and mask
//! ([`crate::PolicyLossInputs::with_rollout_log_prob`]).
//!
//! All matrices are `[rows, cols]` row-major; `log_ratio = old_log_prob − rollout_log_prob`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::GrpoError;

/// verl's `SAFETY_BOUND`: log-ratios are clamped to ±20 before `exp`.
const SAFETY_BOUND: f32 = 20.0;

/// The prefix of every metric name, as verl logs them.
pub const METRIC_PREFIX: &str = "rollout_corr/";

/// At which level importance weights are computed (verl's `rollout_is`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutIs {
    /// One weight per token: `exp(old − rollout)` of that token.
    Token,
    /// One weight per sequence: `exp(Σ_t (old − rollout))`, the same for all its tokens.
    Sequence,
}

/// The importance-weight threshold (verl's `rollout_is_threshold`): a number for truncated IS, or
/// `"lower_upper"` for masked IS (IcePop).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IsThreshold {
    /// Truncated IS (TIS): weights above `upper` are set to `upper`.
    Truncate(f64),
    /// Masked IS (IcePop): weights outside `[lower, upper]` are set to 0.
    Mask {
        /// The lowest weight kept.
        lower: f64,
        /// The highest weight kept.
        upper: f64,
    },
}

impl IsThreshold {
    /// The upper bound of either kind.
    pub fn upper(self) -> f64 {
        match self {
            Self::Truncate(u) | Self::Mask { upper: u, .. } => u,
        }
    }

    /// The lower bound of the metrics: IcePop's `lower`, or `1 / upper` for TIS (verl's rule).
    fn metric_lower(self) -> f64 {
        match self {
            Self::Truncate(u) => 1.0 / u,
            Self::Mask { lower, .. } => lower,
        }
    }

    fn parse(s: &str) -> Result<Self, String> {
        Ok(match parse_spec(s)? {
            (Some(lower), upper) => Self::Mask { lower, upper },
            (None, upper) => Self::Truncate(upper),
        })
    }

    fn check(self) -> Result<(), String> {
        match self {
            Self::Truncate(u) if !(u.is_finite() && u > 1.0) => Err(format!(
                "a truncation threshold must be finite and > 1 (a cap at or below 1 scales every weight down), got {u}"
            )),
            Self::Mask { lower, upper }
                if !(lower.is_finite() && upper.is_finite() && lower > 0.0 && lower <= upper) =>
            {
                Err(format!(
                    "a `lower_upper` range needs 0 < lower <= upper, both finite, got {lower}_{upper}"
                ))
            }
            _ => Ok(()),
        }
    }
}

impl Default for IsThreshold {
    fn default() -> Self {
        Self::Truncate(2.0)
    }
}

impl fmt::Display for IsThreshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncate(u) => write!(f, "{u}"),
            Self::Mask { lower, upper } => write!(f, "{lower}_{upper}"),
        }
    }
}

impl std::str::FromStr for IsThreshold {
    type Err = GrpoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = Self::parse(s).map_err(|reason| GrpoError::Config {
            field: "rollout_correction.rollout_is_threshold",
            reason,
        })?;
        t.check().map_err(|reason| GrpoError::Config {
            field: "rollout_correction.rollout_is_threshold",
            reason,
        })?;
        Ok(t)
    }
}

/// One threshold as verl writes it: `"lower_upper"` or a single number, as `(lower, upper)`.
fn parse_spec(s: &str) -> Result<(Option<f64>, f64), String> {
    let num = |p: &str| {
        p.trim()
            .parse::<f64>()
            .map_err(|_| format!("`{s}` is not a number or `lower_upper`"))
    };
    Ok(match s.split_once('_') {
        Some((lo, hi)) => (Some(num(lo)?), num(hi)?),
        None => (None, num(s)?),
    })
}

/// A number or a string, as verl's YAML takes thresholds.
#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrString {
    Number(f64),
    String(String),
}

impl Serialize for IsThreshold {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Truncate(u) => s.serialize_f64(*u),
            Self::Mask { .. } => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for IsThreshold {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match NumberOrString::deserialize(d)? {
            NumberOrString::Number(u) => Ok(Self::Truncate(u)),
            NumberOrString::String(s) => Self::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// What a rejection statistic is computed over (the first part of verl's option names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RsLevel {
    /// Each token on its own; only that token is dropped.
    Token,
    /// The masked sum over the sequence; the whole sequence is kept or dropped.
    SeqSum,
    /// The masked mean over the sequence (a geometric mean of the ratio for k1).
    SeqMean,
    /// The masked max over the sequence (k2 and k3 only).
    SeqMax,
}

/// The divergence statistic of a rejection option, per token, with `δ = old − rollout` clamped to
/// ±20.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RsStat {
    /// `−δ = log(π_rollout / π_old)`, kept inside `[ln lower, ln upper]`.
    K1,
    /// `δ² / 2`, kept at or below the threshold.
    K2,
    /// `e^δ − 1 − δ`, kept at or below the threshold.
    K3,
}

/// One of verl's rejection options (`token_k1`, `seq_mean_k3`, …; there is no `seq_max_k1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RsOption {
    /// What the statistic is computed over.
    pub level: RsLevel,
    /// The statistic.
    pub stat: RsStat,
}

impl fmt::Display for RsOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.level {
            RsLevel::Token => "token",
            RsLevel::SeqSum => "seq_sum",
            RsLevel::SeqMean => "seq_mean",
            RsLevel::SeqMax => "seq_max",
        };
        let stat = match self.stat {
            RsStat::K1 => "k1",
            RsStat::K2 => "k2",
            RsStat::K3 => "k3",
        };
        write!(f, "{level}_{stat}")
    }
}

impl std::str::FromStr for RsOption {
    type Err = GrpoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let unknown = || GrpoError::Config {
            field: "rollout_correction.rollout_rs",
            reason: format!(
                "unknown option `{s}`: expected token_k1|k2|k3, seq_sum_k1|k2|k3, seq_mean_k1|k2|k3 or seq_max_k2|k3"
            ),
        };
        let (level, stat) = s.rsplit_once('_').ok_or_else(unknown)?;
        let level = match level {
            "token" => RsLevel::Token,
            "seq_sum" => RsLevel::SeqSum,
            "seq_mean" => RsLevel::SeqMean,
            "seq_max" => RsLevel::SeqMax,
            _ => return Err(unknown()),
        };
        let stat = match stat {
            "k1" => RsStat::K1,
            "k2" => RsStat::K2,
            "k3" => RsStat::K3,
            _ => return Err(unknown()),
        };
        if level == RsLevel::SeqMax && stat == RsStat::K1 {
            return Err(unknown());
        }
        Ok(Self { level, stat })
    }
}

/// The most distinct rejection options (4 levels × 3 statistics, less `seq_max_k1`).
pub const MAX_RS_OPTIONS: usize = 11;

/// verl's `rollout_rs`: a comma list of options, duplicates dropped (the first kept). Serialised
/// as verl's string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RsOptions {
    options: [Option<RsOption>; MAX_RS_OPTIONS],
    len: usize,
}

impl RsOptions {
    /// The options, in their order.
    pub fn iter(&self) -> impl Iterator<Item = RsOption> + '_ {
        self.options[..self.len].iter().flatten().copied()
    }

    /// How many options.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none (never, for a parsed list).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::str::FromStr for RsOptions {
    type Err = GrpoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = Self {
            options: [None; MAX_RS_OPTIONS],
            len: 0,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let option: RsOption = part.parse()?;
            if !out.iter().any(|o| o == option) {
                out.options[out.len] = Some(option);
                out.len += 1;
            }
        }
        if out.len == 0 {
            return Err(GrpoError::Config {
                field: "rollout_correction.rollout_rs",
                reason: format!("`{s}` names no option"),
            });
        }
        Ok(out)
    }
}

impl fmt::Display for RsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.iter().map(|o| o.to_string()).collect();
        f.write_str(&names.join(","))
    }
}

impl Serialize for RsOptions {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for RsOptions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// verl's `rollout_rs_threshold`: one spec for every option, or one per option, comma-separated;
/// each `lower_upper` or a single number. Serialised as verl's number or string.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RsThresholds {
    specs: [(Option<f64>, f64); MAX_RS_OPTIONS],
    len: usize,
}

impl RsThresholds {
    /// One number for every option: `1/u … u` for k1, `u` for k2 and k3.
    pub fn single(upper: f64) -> Self {
        let mut specs = [(None, 0.0); MAX_RS_OPTIONS];
        specs[0] = (None, upper);
        Self { specs, len: 1 }
    }

    /// The specs as given: `(lower, upper)`, `lower` only where the spec had `lower_upper`.
    pub fn specs(&self) -> &[(Option<f64>, f64)] {
        &self.specs[..self.len]
    }
}

impl std::str::FromStr for RsThresholds {
    type Err = GrpoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| GrpoError::Config {
            field: "rollout_correction.rollout_rs_threshold",
            reason,
        };
        let mut out = Self {
            specs: [(None, 0.0); MAX_RS_OPTIONS],
            len: 0,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if out.len == MAX_RS_OPTIONS {
                return Err(bad(format!("more than {MAX_RS_OPTIONS} specs in `{s}`")));
            }
            out.specs[out.len] = parse_spec(part).map_err(bad)?;
            out.len += 1;
        }
        if out.len == 0 {
            return Err(bad(format!("`{s}` holds no threshold")));
        }
        Ok(out)
    }
}

impl fmt::Display for RsThresholds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .specs()
            .iter()
            .map(|(lo, hi)| match lo {
                Some(lo) => format!("{lo}_{hi}"),
                None => format!("{hi}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl Serialize for RsThresholds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.specs() {
            [(None, u)] => s.serialize_f64(*u),
            _ => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for RsThresholds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match NumberOrString::deserialize(d)? {
            NumberOrString::Number(u) => Ok(Self::single(u)),
            NumberOrString::String(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// One rejection option with its bounds resolved: k1 keeps `ln lower ≤ k1 ≤ ln upper`, k2 and k3
/// keep `value ≤ upper`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RsCriterion {
    /// The option.
    pub option: RsOption,
    /// The lowest ratio kept (k1 only).
    pub lower: Option<f64>,
    /// The highest ratio (k1) or statistic (k2, k3) kept.
    pub upper: f64,
}

/// verl 0.9.1's `algorithm.rollout_correction`, in its decoupled mode (the loss's old policy is
/// the trainer's recompute; the weights correct from the rollout engine to it). Off by default.
///
/// verl's bypass mode and its `loss_type` are not built: their keys are refused.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolloutCorrectionConfig {
    /// Importance weights per `token` or per `sequence`; `None` (null) for none.
    pub rollout_is: Option<RolloutIs>,
    /// Their threshold: a number for truncated IS, `"lower_upper"` for masked IS (IcePop).
    pub rollout_is_threshold: IsThreshold,
    /// Divide the weights by their mean over the batch (after truncation or masking).
    pub rollout_is_batch_normalize: bool,
    /// Rejection options, e.g. `"token_k1,seq_mean_k3"`; `None` for none.
    pub rollout_rs: Option<RsOptions>,
    /// Their thresholds: one for all options or one per option, e.g. `"0.5_2.0,0.3"`.
    pub rollout_rs_threshold: Option<RsThresholds>,
}

impl Default for RolloutCorrectionConfig {
    fn default() -> Self {
        Self::off()
    }
}

impl RolloutCorrectionConfig {
    /// No weights, no rejection: the loss is the uncorrected one.
    pub fn off() -> Self {
        Self {
            rollout_is: None,
            rollout_is_threshold: IsThreshold::default(),
            rollout_is_batch_normalize: false,
            rollout_rs: None,
            rollout_rs_threshold: None,
        }
    }

    /// Whether the correction changes nothing (no weights, no rejection).
    pub fn is_off(&self) -> bool {
        self.rollout_is.is_none() && self.rollout_rs.is_none()
    }

    /// Importance weights at `level` with `threshold`, no rejection (verl's `decoupled_token_is`
    /// and `decoupled_seq_is` with a number; `decoupled_token_icepop` with a range).
    pub fn is(level: RolloutIs, threshold: IsThreshold) -> Self {
        Self {
            rollout_is: Some(level),
            rollout_is_threshold: threshold,
            ..Self::off()
        }
    }

    /// verl's named presets (decoupled mode): `disabled`, `decoupled_token_is`,
    /// `decoupled_seq_is`, `decoupled_token_icepop`, `decoupled_seq_is_rs`, `decoupled_geo_rs`,
    /// `decoupled_geo_rs_seq_tis`, `decoupled_geo_rs_token_tis`, `decoupled_k3_rs`,
    /// `decoupled_k3_rs_seq_tis`, `decoupled_k3_rs_token_tis`.
    ///
    /// # Errors
    /// [`GrpoError::Config`] naming the presets, for another name (the bypass presets included).
    pub fn preset(name: &str) -> Result<Self, GrpoError> {
        let rs = |options: &str, threshold: &str| -> Result<Self, GrpoError> {
            Ok(Self {
                rollout_rs: Some(options.parse()?),
                rollout_rs_threshold: Some(threshold.parse()?),
                ..Self::off()
            })
        };
        let with_is = |mut c: Self, level| {
            c.rollout_is = Some(level);
            c
        };
        Ok(match name {
            "disabled" => Self::off(),
            "decoupled_token_is" => Self::is(RolloutIs::Token, IsThreshold::Truncate(2.0)),
            "decoupled_seq_is" => Self::is(RolloutIs::Sequence, IsThreshold::Truncate(2.0)),
            "decoupled_token_icepop" => Self::is(
                RolloutIs::Token,
                IsThreshold::Mask {
                    lower: 0.5,
                    upper: 5.0,
                },
            ),
            "decoupled_seq_is_rs" => with_is(rs("seq_sum_k1", "0.5_2.0")?, RolloutIs::Sequence),
            "decoupled_geo_rs" => rs("seq_mean_k1", "0.999_1.001")?,
            "decoupled_geo_rs_seq_tis" => {
                with_is(rs("seq_mean_k1", "0.999_1.001")?, RolloutIs::Sequence)
            }
            "decoupled_geo_rs_token_tis" => {
                with_is(rs("seq_mean_k1", "0.999_1.001")?, RolloutIs::Token)
            }
            "decoupled_k3_rs" => rs("seq_mean_k3", "0.01")?,
            "decoupled_k3_rs_seq_tis" => with_is(rs("seq_mean_k3", "0.01")?, RolloutIs::Sequence),
            "decoupled_k3_rs_token_tis" => with_is(rs("seq_mean_k3", "0.01")?, RolloutIs::Token),
            other => {
                return Err(GrpoError::Config {
                    field: "rollout_correction",
                    reason: format!(
                        "unknown preset `{other}`: expected disabled, decoupled_token_is, decoupled_seq_is, decoupled_token_icepop, decoupled_seq_is_rs, decoupled_geo_rs, decoupled_geo_rs_seq_tis, decoupled_geo_rs_token_tis, decoupled_k3_rs, decoupled_k3_rs_seq_tis or decoupled_k3_rs_token_tis (verl's bypass presets are not built)"
                    ),
                });
            }
        })
    }

    /// The rejection options with their bounds (empty without rejection).
    ///
    /// # Errors
    /// [`GrpoError::Config`] naming `rollout_rs_threshold`: missing, a count that is neither 1
    /// nor one per option, a `lower_upper` for k2/k3, a bound not finite or ≤ 0, `lower > upper`.
    pub fn criteria(&self) -> Result<Vec<RsCriterion>, GrpoError> {
        let Some(options) = self.rollout_rs else {
            return Ok(Vec::new());
        };
        let bad = |reason: String| GrpoError::Config {
            field: "rollout_correction.rollout_rs_threshold",
            reason,
        };
        let Some(thresholds) = self.rollout_rs_threshold else {
            return Err(bad(format!(
                "rejection `{options}` needs a threshold (a number, or `lower_upper` for k1)"
            )));
        };
        let specs = thresholds.specs();
        if specs.len() != 1 && specs.len() != options.len() {
            return Err(bad(format!(
                "{} thresholds for {} options (`{options}`): give one for all, or one each",
                specs.len(),
                options.len()
            )));
        }
        options
            .iter()
            .enumerate()
            .map(|(i, option)| {
                let (lo, hi) = specs[if specs.len() == 1 { 0 } else { i }];
                let positive = |v: f64| v.is_finite() && v > 0.0;
                match (option.stat, lo) {
                    (RsStat::K1, lo) => {
                        let lower = lo.unwrap_or(1.0 / hi);
                        if !(positive(lower) && positive(hi) && lower <= hi) {
                            return Err(bad(format!(
                                "`{option}` needs 0 < lower <= upper, got {lower}_{hi}"
                            )));
                        }
                        Ok(RsCriterion {
                            option,
                            lower: Some(lower),
                            upper: hi,
                        })
                    }
                    (_, Some(lo)) => Err(bad(format!(
                        "`{option}` takes one number, not a range `{lo}_{hi}`"
                    ))),
                    (_, None) if !positive(hi) => Err(bad(format!(
                        "`{option}` needs a finite threshold > 0, got {hi}"
                    ))),
                    (_, None) => Ok(RsCriterion {
                        option,
                        lower: None,
                        upper: hi,
                    }),
                }
            })
            .collect()
    }

    /// Checks every field (the IS threshold only when weights are on).
    ///
    /// # Errors
    /// [`GrpoError::Config`] naming the field under `rollout_correction.`.
    pub fn validate(&self) -> Result<(), GrpoError> {
        if self.rollout_is.is_some() {
            self.rollout_is_threshold
                .check()
                .map_err(|reason| GrpoError::Config {
                    field: "rollout_correction.rollout_is_threshold",
                    reason,
                })?;
        }
        self.criteria().map(|_| ())
    }
}

/// verl's metric names (with the `rollout_corr/` prefix) and values.
pub type CorrectionMetrics = BTreeMap<String, f64>;

/// What a correction gives the loss.
#[derive(Debug, Clone, PartialEq)]
pub struct Correction {
    /// Importance weights, `[rows, cols]` (0 where the mask is 0); `None` without `rollout_is`.
    pub weights: Option<Vec<f32>>,
    /// The response mask with rejected tokens and sequences set to 0 (the input's without
    /// rejection).
    pub response_mask: Vec<f32>,
    /// verl's metrics: the IS, rejection and mismatch metrics.
    pub metrics: CorrectionMetrics,
}

mod compute;

pub use compute::{mismatch_metrics, rollout_correction};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_and_options_parse_as_verl_spells_them() {
        assert_eq!(
            "2.0".parse::<IsThreshold>().unwrap(),
            IsThreshold::Truncate(2.0)
        );
        assert_eq!(
            "0.5_2.0".parse::<IsThreshold>().unwrap(),
            IsThreshold::Mask {
                lower: 0.5,
                upper: 2.0
            }
        );
        for bad in ["1.0", "0.5", "2_1", "0_2", "x", ""] {
            assert!(bad.parse::<IsThreshold>().is_err(), "{bad}");
        }
        let o: RsOptions = " token_k1, seq_mean_k3,token_k1,".parse().unwrap();
        assert_eq!(o.to_string(), "token_k1,seq_mean_k3");
        assert_eq!(o.len(), 2);
        for bad in ["seq_max_k1", "token_k4", "tok_k1", ",", "k1"] {
            assert!(bad.parse::<RsOptions>().is_err(), "{bad}");
        }
    }

    #[test]
    fn rejection_thresholds_are_checked_per_option() {
        let config = |rs: &str, thr: &str| RolloutCorrectionConfig {
            rollout_rs: Some(rs.parse().unwrap()),
            rollout_rs_threshold: Some(thr.parse().unwrap()),
            ..RolloutCorrectionConfig::off()
        };
        let k1 = config("token_k1", "4").criteria().unwrap();
        assert_eq!((k1[0].lower, k1[0].upper), (Some(0.25), 4.0));
        let two = config("token_k1,seq_mean_k3", "0.5_2.0,0.3")
            .criteria()
            .unwrap();
        assert_eq!((two[1].lower, two[1].upper), (None, 0.3));
        for (rs, thr) in [
            ("token_k2", "0.5_2.0"),
            ("token_k1,token_k2,token_k3", "1,2"),
            ("token_k1", "2_0.5"),
            ("token_k3", "-1"),
        ] {
            let err = config(rs, thr).validate().unwrap_err();
            assert!(
                matches!(err, GrpoError::Config { field, .. } if field == "rollout_correction.rollout_rs_threshold"),
                "{rs} {thr}: {err}"
            );
        }
        let missing = RolloutCorrectionConfig {
            rollout_rs: Some("token_k1".parse().unwrap()),
            ..RolloutCorrectionConfig::off()
        };
        assert!(missing.validate().is_err());
    }

    #[test]
    fn serde_takes_numbers_and_strings_and_refuses_bypass() {
        let c: RolloutCorrectionConfig = serde_json::from_str(
            r#"{"rollout_is": "token", "rollout_is_threshold": "0.5_2.0", "rollout_rs": "token_k1,seq_mean_k3", "rollout_rs_threshold": "0.5_2.0,0.3"}"#,
        )
        .unwrap();
        assert_eq!(c.rollout_is, Some(RolloutIs::Token));
        let back: RolloutCorrectionConfig =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let n: RolloutCorrectionConfig =
            serde_json::from_str(r#"{"rollout_is_threshold": 2.5, "rollout_rs_threshold": 0.01}"#)
                .unwrap();
        assert_eq!(n.rollout_is_threshold, IsThreshold::Truncate(2.5));
        assert!(n.is_off());
        let err = serde_json::from_str::<RolloutCorrectionConfig>(r#"{"bypass_mode": true}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bypass_mode"), "{err}");
        assert!(RolloutCorrectionConfig::preset("bypass_ppo_clip").is_err());
    }

    #[test]
    fn bad_inputs_are_named() {
        let c = RolloutCorrectionConfig::is(RolloutIs::Token, IsThreshold::Truncate(2.0));
        let err = rollout_correction(&c, &[0.0; 3], &[0.0; 4], &[1.0; 4], 2, 2).unwrap_err();
        assert!(matches!(
            err,
            GrpoError::Length {
                field: "old_log_prob",
                ..
            }
        ));
        let err =
            rollout_correction(&c, &[0.0, f32::NAN], &[0.0; 2], &[1.0, 1.0], 1, 2).unwrap_err();
        assert!(matches!(
            err,
            GrpoError::NonFinite {
                field: "old_log_prob",
                index: 1,
                ..
            }
        ));
        // Not finite where masked out: fine.
        rollout_correction(&c, &[0.0, f32::NAN], &[0.0; 2], &[1.0, 0.0], 1, 2).unwrap();
        let err = rollout_correction(&c, &[0.0; 2], &[0.0; 2], &[0.0; 2], 1, 2).unwrap_err();
        assert_eq!(err, GrpoError::EmptyBatch { what: "tokens" });
    }
}
