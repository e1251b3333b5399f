//! The conditions that end a stage, evaluated on the metrics of the steps
//! taken in it so far.

use serde::{Deserialize, Serialize};

use crate::{Error, Result, StepMetrics};

/// How a truncation-rate trigger compares the rate with its threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compare {
    /// Fires when the rate is at or below the threshold (responses fit).
    #[default]
    AtOrBelow,
    /// Fires when the rate is at or above the threshold (responses outgrow the budget).
    AtOrAbove,
}

/// A truncation-rate trigger: the rate compared with `threshold` holds on each
/// of the last `window` steps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Truncation {
    /// Share of responses cut at the token budget, in [0, 1].
    pub threshold: f64,
    /// Consecutive steps on which the comparison must hold (at least 1).
    pub window: u64,
    /// Direction of the comparison.
    #[serde(default)]
    pub compare: Compare,
}

/// A reward-plateau trigger on the moving average `m_t` of the mean reward over
/// the last `average` steps: it fires at step `t` when
/// `max(m_{t-window+1} … m_t) <= m_{t-window} + delta`, that is when the moving
/// average has not improved by more than `delta` over the last `window` steps.
/// It needs `average + window` steps in the stage and at least `warmup`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plateau {
    /// Steps over which the improvement is measured (at least 1).
    pub window: u64,
    /// The improvement that still counts as flat (at least 0).
    pub delta: f64,
    /// Length of the moving average (at least 1).
    #[serde(default = "one")]
    pub average: u64,
    /// Steps in the stage before the trigger may fire at all.
    #[serde(default)]
    pub warmup: u64,
}

fn one() -> u64 {
    1
}

/// A condition that ends a stage. In TOML: `{ steps = 300 }`,
/// `{ truncation = { threshold = 0.1, window = 10, compare = "at-or-above" } }`,
/// `{ plateau = { window = 50, delta = 0.01, average = 20, warmup = 100 } }`,
/// `{ any = [ … ] }`, `{ all = [ … ] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The stage has taken this many steps.
    Steps(u64),
    /// The truncation rate compared with a threshold for a window of steps.
    Truncation(Truncation),
    /// The reward's moving average stopped improving.
    Plateau(Plateau),
    /// Any of these fires.
    Any(Vec<Trigger>),
    /// All of these fire on the same step.
    All(Vec<Trigger>),
}

impl Trigger {
    /// Checks the parameters; `at` names the place in the configuration.
    pub fn validate(&self, at: &str) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(format!("{at}: {msg}")));
        match self {
            Self::Steps(0) => bad("`steps` must be at least 1".into()),
            Self::Steps(_) => Ok(()),
            Self::Truncation(t) => {
                if !(0.0..=1.0).contains(&t.threshold) {
                    return bad(format!(
                        "`truncation.threshold` must be in [0, 1], got {}",
                        t.threshold
                    ));
                }
                if t.window == 0 {
                    return bad("`truncation.window` must be at least 1".into());
                }
                Ok(())
            }
            Self::Plateau(p) => {
                if p.window == 0 || p.average == 0 {
                    return bad("`plateau.window` and `plateau.average` must be at least 1".into());
                }
                if !(p.delta >= 0.0 && p.delta.is_finite()) {
                    return bad(format!(
                        "`plateau.delta` must be a finite number >= 0, got {}",
                        p.delta
                    ));
                }
                Ok(())
            }
            Self::Any(ts) | Self::All(ts) => {
                if ts.is_empty() {
                    return bad("`any`/`all` needs at least one trigger".into());
                }
                ts.iter()
                    .enumerate()
                    .try_for_each(|(i, t)| t.validate(&format!("{at}[{i}]")))
            }
        }
    }

    /// The step budget this trigger implies, if it is one or an `any` holding one.
    pub fn step_budget(&self) -> Option<u64> {
        match self {
            Self::Steps(n) => Some(*n),
            Self::Any(ts) => ts.iter().filter_map(Self::step_budget).min(),
            _ => None,
        }
    }

    /// Whether the trigger fires on `history`, the metrics of every step taken
    /// in the stage (oldest first); `Some(reason)` when it does.
    pub fn check(&self, history: &[StepMetrics]) -> Option<String> {
        let steps = history.len() as u64;
        match self {
            Self::Steps(n) => (steps >= *n).then(|| format!("step budget of {n} reached")),
            Self::Truncation(t) => {
                if steps < t.window {
                    return None;
                }
                let tail = &history[history.len() - t.window as usize..];
                let holds = |m: &StepMetrics| match t.compare {
                    Compare::AtOrBelow => m.truncation_rate <= t.threshold,
                    Compare::AtOrAbove => m.truncation_rate >= t.threshold,
                };
                let sign = match t.compare {
                    Compare::AtOrBelow => "<=",
                    Compare::AtOrAbove => ">=",
                };
                tail.iter().all(holds).then(|| {
                    format!(
                        "truncation rate {sign} {} on each of the last {} steps",
                        t.threshold, t.window
                    )
                })
            }
            Self::Plateau(p) => {
                let (avg, window) = (p.average as usize, p.window as usize);
                if steps < p.warmup || history.len() < avg + window {
                    return None;
                }
                let ma = |end: usize| {
                    history[end + 1 - avg..=end]
                        .iter()
                        .map(|m| m.reward_mean)
                        .sum::<f64>()
                        / avg as f64
                };
                let last = history.len() - 1;
                let base = ma(last - window);
                let best = (last + 1 - window..=last)
                    .map(ma)
                    .fold(f64::NEG_INFINITY, f64::max);
                (best <= base + p.delta).then(|| {
                    format!(
                        "reward plateau: the {avg}-step moving average rose by {:.4} <= {} over the last {window} steps",
                        (best - base).max(0.0),
                        p.delta
                    )
                })
            }
            Self::Any(ts) => ts.iter().find_map(|t| t.check(history)),
            Self::All(ts) => {
                let reasons: Option<Vec<String>> = ts.iter().map(|t| t.check(history)).collect();
                reasons.map(|r| r.join(" and "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(rewards: &[f64]) -> Vec<StepMetrics> {
        rewards.iter().map(|&r| StepMetrics::new(r, 0.0)).collect()
    }

    #[test]
    fn plateau_by_hand() {
        let p = Trigger::Plateau(Plateau {
            window: 2,
            delta: 0.05,
            average: 2,
            warmup: 0,
        });
        // Moving averages of [0.1, 0.3, 0.5, 0.52, 0.5]: -, 0.2, 0.4, 0.51, 0.51.
        assert!(p.check(&hist(&[0.1, 0.3, 0.5])).is_none()); // 3 < average + window
        assert!(p.check(&hist(&[0.1, 0.3, 0.5, 0.52])).is_none()); // 0.51 > 0.2 + 0.05
        assert!(p.check(&hist(&[0.1, 0.3, 0.5, 0.52, 0.5])).is_none()); // best 0.51 > 0.4 + 0.05
        assert!(p.check(&hist(&[0.1, 0.3, 0.5, 0.52, 0.5, 0.5])).is_some()); // best 0.51 <= 0.51 + 0.05
    }

    #[test]
    fn all_needs_every_part() {
        let t = Trigger::All(vec![Trigger::Steps(2), Trigger::Steps(3)]);
        assert!(t.check(&hist(&[0.0, 0.0])).is_none());
        assert_eq!(
            t.check(&hist(&[0.0; 3])).unwrap(),
            "step budget of 2 reached and step budget of 3 reached"
        );
        let t = Trigger::Any(vec![Trigger::Steps(5), Trigger::Steps(3)]);
        assert_eq!(
            t.check(&hist(&[0.0; 3])).unwrap(),
            "step budget of 3 reached"
        );
        assert_eq!(t.step_budget(), Some(3));
    }

    #[test]
    fn validation_names_the_place() {
        let t = Trigger::Any(vec![
            Trigger::Steps(1),
            Trigger::Truncation(Truncation {
                threshold: 2.0,
                window: 1,
                compare: Compare::AtOrBelow,
            }),
        ]);
        let err = t.validate("stage[0].until").unwrap_err().to_string();
        assert!(
            err.contains("stage[0].until[1]: `truncation.threshold` must be in [0, 1]"),
            "{err}"
        );
        assert!(Trigger::All(vec![]).validate("x").is_err());
        assert!(Trigger::Steps(0).validate("x").is_err());
    }
}
