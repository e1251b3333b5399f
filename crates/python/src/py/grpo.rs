//! Group-relative advantages from Python: GRPO, Dr. GRPO and RLOO over grouped rewards; and
//! verl's rollout correction (importance weights, rejection, mismatch metrics).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use rstar_grpo::{
    AdvantageConfig, AdvantageEstimator, IsThreshold, RolloutCorrectionConfig, RolloutIs,
    RsThresholds, SingletonGroups, group_advantages,
};

use super::roc::{Key, key, number};
use super::{items, type_name};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(advantages, m)?)?;
    m.add_function(wrap_pyfunction!(rollout_correction, m)?)?;
    Ok(())
}

/// A `[rows][cols]` matrix of floats (lists, tuples or anything iterable, numpy arrays
/// included); NaN and infinities pass (they may sit where the mask is 0).
fn matrix(arg: &str, obj: &Bound<'_, PyAny>) -> PyResult<(Vec<f32>, usize, usize)> {
    let rows: Vec<Vec<f32>> = items(arg, obj, |what, row| {
        items(what, row, |what, x| {
            x.extract::<f64>().map(|v| v as f32).map_err(|_| {
                PyTypeError::new_err(format!("{what} must be a number, not {}", type_name(x)))
            })
        })
    })?;
    let cols = rows.first().map_or(0, Vec::len);
    if let Some(i) = rows.iter().position(|r| r.len() != cols) {
        return Err(PyValueError::new_err(format!(
            "{arg}[{i}] has {} values, {arg}[0] has {cols}: rows must be the same length",
            rows[i].len()
        )));
    }
    Ok((rows.concat(), rows.len(), cols))
}

/// A threshold as verl takes it: a number, or a string (`"0.5_2.0"`, `"0.5_2.0,0.3"`).
fn threshold_text(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if obj.is_instance_of::<PyString>() {
        return obj.extract::<String>();
    }
    number(what, obj).map(|v| v.to_string())
}

fn rows_of(values: &[f32], cols: usize) -> Vec<Vec<f32>> {
    values.chunks(cols.max(1)).map(<[f32]>::to_vec).collect()
}

/// verl 0.9.1's rollout correction (`compute_rollout_correction_and_rejection_mask`, decoupled
/// mode), on `[batch][response_len]` matrices: importance weights from
/// `old_log_prob − rollout_log_prob` (`rollout_is="token"|"sequence"`, truncated at a number or
/// masked outside `"lower_upper"`), the rejection mask (`rollout_rs="token_k1,seq_mean_k3"`,
/// `rollout_rs_threshold="0.5_2.0,0.3"`) and verl's `rollout_corr/…` metrics.
///
/// Returns a dict: `weights` (a matrix, or None without `rollout_is`), `response_mask` (with
/// rejected tokens set to 0) and `metrics` (name to float).
#[pyfunction]
#[pyo3(signature = (old_log_prob, rollout_log_prob, response_mask, *, rollout_is=None, rollout_is_threshold=None, rollout_is_batch_normalize=false, rollout_rs=None, rollout_rs_threshold=None))]
#[allow(clippy::too_many_arguments)] // reason: verl's five keys, as keyword arguments
fn rollout_correction<'py>(
    py: Python<'py>,
    old_log_prob: &Bound<'py, PyAny>,
    rollout_log_prob: &Bound<'py, PyAny>,
    response_mask: &Bound<'py, PyAny>,
    rollout_is: Option<&str>,
    rollout_is_threshold: Option<&Bound<'py, PyAny>>,
    rollout_is_batch_normalize: bool,
    rollout_rs: Option<&str>,
    rollout_rs_threshold: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let err = |e: rstar_grpo::GrpoError| PyValueError::new_err(e.to_string());
    let mut config = RolloutCorrectionConfig::off();
    config.rollout_is = match rollout_is {
        None => None,
        Some("token") => Some(RolloutIs::Token),
        Some("sequence") => Some(RolloutIs::Sequence),
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "rollout_is `{other}` is not one of token, sequence (or None)"
            )));
        }
    };
    if let Some(t) = rollout_is_threshold.filter(|t| !t.is_none()) {
        config.rollout_is_threshold = threshold_text("rollout_is_threshold", t)?
            .parse::<IsThreshold>()
            .map_err(err)?;
    }
    config.rollout_is_batch_normalize = rollout_is_batch_normalize;
    config.rollout_rs = rollout_rs.map(str::parse).transpose().map_err(err)?;
    if let Some(t) = rollout_rs_threshold.filter(|t| !t.is_none()) {
        config.rollout_rs_threshold = Some(
            threshold_text("rollout_rs_threshold", t)?
                .parse::<RsThresholds>()
                .map_err(err)?,
        );
    }
    let (old, rows, cols) = matrix("old_log_prob", old_log_prob)?;
    let (rollout, _, _) = matrix("rollout_log_prob", rollout_log_prob)?;
    let (mask, _, _) = matrix("response_mask", response_mask)?;
    let c = py
        .detach(|| rstar_grpo::rollout_correction(&config, &old, &rollout, &mask, rows, cols))
        .map_err(err)?;
    let out = PyDict::new(py);
    out.set_item("weights", c.weights.map(|w| rows_of(&w, cols)))?;
    out.set_item("response_mask", rows_of(&c.response_mask, cols))?;
    out.set_item("metrics", c.metrics)?;
    Ok(out)
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
