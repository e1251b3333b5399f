//! Resample-on-Correct from Python: the kept indices of a group (or a batch of groups) and the penalties.

use std::collections::HashMap;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};
use rstar_roc::{Penalty, PenaltyOptions, RocConfig, TraceSummary, penalty, select};

use super::{items, text, type_name};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(roc_select, m)?)?;
    m.add_function(wrap_pyfunction!(roc_penalties, m)?)?;
    Ok(())
}

/// A group key from Python: a `str` or an `int`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Key {
    Str(String),
    Int(i64),
}

pub(super) fn key(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<Key> {
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        return obj
            .extract::<i64>()
            .map(Key::Int)
            .map_err(|_| PyValueError::new_err(format!("{what} does not fit in 64 bits")));
    }
    if obj.is_instance_of::<PyString>() {
        return text(what, obj).map(Key::Str);
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be str or int, not {}",
        type_name(obj)
    )))
}

pub(super) fn number(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<f64> {
    let v: f64 = obj.extract().map_err(|_| {
        PyTypeError::new_err(format!("{what} must be a number, not {}", type_name(obj)))
    })?;
    if !v.is_finite() {
        return Err(PyValueError::new_err(format!(
            "{what} is not a finite number ({v})"
        )));
    }
    Ok(v)
}

/// The counts a trace dict may set (`TraceSummary`'s fields).
const COUNT_FIELDS: &[&str] = &[
    "tool_calls",
    "failed_calls",
    "timed_out_calls",
    "parse_failures",
    "error_mentions",
    "answer_open_tags",
    "answer_close_tags",
    "closed_answers",
    "assistant_turns",
    "marked_turns",
];

/// One trace: `None` (no tool calls, no answers recorded), the rollout's response text in the
/// reference format (parsed as `TraceSummary::from_text` does), or a dict of counts.
fn trace(what: &str, obj: Option<&Bound<'_, PyAny>>, reward: f64) -> PyResult<TraceSummary> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(TraceSummary::new(reward));
    };
    if obj.is_instance_of::<PyString>() {
        return Ok(TraceSummary::from_text(reward, &text(what, obj)?));
    }
    let dict = obj.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a response str, a dict of counts or None, not {}",
            type_name(obj)
        ))
    })?;
    let mut t = TraceSummary::new(reward);
    for (k, v) in dict.iter() {
        let k = k.str()?.to_string();
        let at = format!("{what}[{k:?}]");
        let n: u32 = v.extract().map_err(|_| {
            PyValueError::new_err(format!("{at} must be a count (an int from 0 to 2^32-1)"))
        })?;
        let field = match k.as_str() {
            "tool_calls" => &mut t.tool_calls,
            "failed_calls" => &mut t.failed_calls,
            "timed_out_calls" => &mut t.timed_out_calls,
            "parse_failures" => &mut t.parse_failures,
            "error_mentions" => &mut t.error_mentions,
            "answer_open_tags" => &mut t.answer_open_tags,
            "answer_close_tags" => &mut t.answer_close_tags,
            "closed_answers" => &mut t.closed_answers,
            "assistant_turns" => &mut t.assistant_turns,
            "marked_turns" => &mut t.marked_turns,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "{what}: unknown count `{k}` (known: {})",
                    COUNT_FIELDS.join(", ")
                )));
            }
        };
        *field = n;
    }
    Ok(t)
}

fn traces(rewards: &[f64], obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<TraceSummary>> {
    match obj.filter(|o| !o.is_none()) {
        None => Ok(rewards.iter().map(|&r| TraceSummary::new(r)).collect()),
        Some(obj) => {
            let mut i = 0;
            let out = items("traces", obj, |what, item| {
                let r = rewards.get(i).copied().unwrap_or(0.0);
                i += 1;
                trace(what, Some(item), r)
            })?;
            if out.len() != rewards.len() {
                return Err(PyValueError::new_err(format!(
                    "{} rewards but {} traces",
                    rewards.len(),
                    out.len()
                )));
            }
            Ok(out)
        }
    }
}

fn base_config(mode: &str) -> PyResult<RocConfig> {
    match mode {
        "paper" => Ok(RocConfig::paper()),
        "reference" => Ok(RocConfig::reference()),
        other => Err(PyValueError::new_err(format!(
            "mode `{other}` is not one of paper, reference"
        ))),
    }
}

/// Resample-on-Correct: which rollouts of a group to keep. Returns their indices, ascending.
///
/// `rewards[i] > 0` marks a success. `traces[i]` is rollout `i`'s response text (its tool
/// responses and answer tags give the penalties), a dict of counts, or `None`. `keep` defaults to
/// half the largest group (2G → G). `mode="paper"` samples successes ∝ 1/penalty with the
/// seeded generator; `mode="reference"` is microsoft/rStar's deterministic rule (floors of 2
/// failures and 2 successes unless given). `uids` names each rollout's group (its prompt) to
/// down-sample a whole batch at once.
#[pyfunction]
#[pyo3(signature = (rewards, traces=None, *, mode="paper", keep=None, seed=0, uids=None, min_failures=None, min_successes=None, reject_equal_reward=false))]
#[allow(clippy::too_many_arguments)] // reason: Python keyword arguments, one per RocConfig field
fn roc_select(
    py: Python<'_>,
    rewards: &Bound<'_, PyAny>,
    traces: Option<&Bound<'_, PyAny>>,
    mode: &str,
    keep: Option<usize>,
    seed: u64,
    uids: Option<&Bound<'_, PyAny>>,
    min_failures: Option<usize>,
    min_successes: Option<usize>,
    reject_equal_reward: bool,
) -> PyResult<Vec<usize>> {
    let mut config = base_config(mode)?;
    let rewards = items("rewards", rewards, number)?;
    let traces = self::traces(&rewards, traces)?;
    let uids: Vec<Key> = match uids.filter(|u| !u.is_none()) {
        Some(u) => items("uids", u, key)?,
        None => vec![Key::Int(0); rewards.len()],
    };
    if uids.len() != rewards.len() {
        return Err(PyValueError::new_err(format!(
            "{} rewards but {} uids",
            rewards.len(),
            uids.len()
        )));
    }
    config.keep = match keep {
        Some(k) => k,
        None => {
            let mut sizes: HashMap<&Key, usize> = HashMap::new();
            for u in &uids {
                *sizes.entry(u).or_default() += 1;
            }
            (sizes.values().copied().max().unwrap_or(0) / 2).max(1)
        }
    };
    if let Some(n) = min_failures {
        config.min_failures = n;
    }
    if let Some(n) = min_successes {
        config.min_successes = n;
    }
    config.seed = seed;
    config.reject_equal_reward = reject_equal_reward;
    let selection = super::detached(py, || select(&uids, &traces, &config))?
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(selection.kept)
}

/// Each trace's RoC penalties as `(p_err, p_format, p_total)`, with the paper's or the reference
/// code's counting (`mode`).
#[pyfunction]
#[pyo3(signature = (traces, mode="paper"))]
fn roc_penalties(traces: &Bound<'_, PyAny>, mode: &str) -> PyResult<Vec<(f64, f64, f64)>> {
    let options = match mode {
        "paper" => PenaltyOptions::paper(),
        "reference" => PenaltyOptions::reference(),
        other => {
            return Err(PyValueError::new_err(format!(
                "mode `{other}` is not one of paper, reference"
            )));
        }
    };
    let traces = items("traces", traces, |what, item| trace(what, Some(item), 1.0))?;
    Ok(traces
        .iter()
        .map(|t| {
            let Penalty {
                p_err,
                p_format,
                p_total,
            } = penalty(t, &options);
            (p_err, p_format, p_total)
        })
        .collect())
}
