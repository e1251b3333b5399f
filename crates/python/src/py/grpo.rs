//! Group-relative advantages from Python: GRPO, Dr. GRPO and RLOO over grouped rewards.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rstar_grpo::{AdvantageConfig, AdvantageEstimator, SingletonGroups, group_advantages};

use super::items;
use super::roc::{Key, key, number};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(advantages, m)?)?;
    Ok(())
}

/// One advantage per rollout, each reward compared with the others of its group.
///
/// `groups[i]` names rollout `i`'s group (its prompt, verl's `uid`; groups may interleave), or
/// `group_size=n` takes consecutive runs of `n` (TRL's layout); with neither, all rewards are one
/// group. `estimator` is `"grpo"` ((r − mean) / (std + epsilon), unbiased std), `"dr_grpo"`
/// (r − mean) or `"rloo"` (r − mean of the others). A group of one gets 0.0, or verl's raw
/// reward with `singleton="verl"`; a group whose rewards are all equal gets exactly 0.0.
#[pyfunction]
#[pyo3(signature = (rewards, groups=None, *, group_size=None, estimator="grpo", epsilon=1e-6, singleton="zero"))]
fn advantages(
    rewards: &Bound<'_, PyAny>,
    groups: Option<&Bound<'_, PyAny>>,
    group_size: Option<usize>,
    estimator: &str,
    epsilon: f64,
    singleton: &str,
) -> PyResult<Vec<f32>> {
    let estimator = match estimator {
        "grpo" => AdvantageEstimator::Grpo,
        "dr_grpo" | "dr-grpo" => AdvantageEstimator::DrGrpo,
        "rloo" => AdvantageEstimator::Rloo,
        other => {
            return Err(PyValueError::new_err(format!(
                "estimator `{other}` is not one of grpo, dr_grpo, rloo"
            )));
        }
    };
    let singleton = match singleton {
        "zero" => SingletonGroups::Zero,
        "verl" => SingletonGroups::Verl,
        other => {
            return Err(PyValueError::new_err(format!(
                "singleton `{other}` is not one of zero, verl"
            )));
        }
    };
    let rewards: Vec<f32> = items("rewards", rewards, |what, r| {
        number(what, r).map(|x| x as f32)
    })?;
    let keys: Vec<Key> = match (groups.filter(|g| !g.is_none()), group_size) {
        (Some(_), Some(_)) => {
            return Err(PyValueError::new_err("pass groups or group_size, not both"));
        }
        (Some(g), None) => items("groups", g, key)?,
        (None, Some(0)) => return Err(PyValueError::new_err("group_size must be at least 1")),
        (None, Some(n)) => {
            if !rewards.len().is_multiple_of(n) {
                return Err(PyValueError::new_err(format!(
                    "{} rewards do not split into groups of {n}",
                    rewards.len()
                )));
            }
            (0..rewards.len())
                .map(|i| Key::Int((i / n) as i64))
                .collect()
        }
        (None, None) => vec![Key::Int(0); rewards.len()],
    };
    let config = AdvantageConfig::new()
        .with_estimator(estimator)
        .with_epsilon(epsilon as f32)
        .with_singleton_groups(singleton);
    group_advantages(&rewards, &keys, &config).map_err(|e| PyValueError::new_err(e.to_string()))
}
