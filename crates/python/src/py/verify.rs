//! The verifier from Python: verl's `compute_score`, the batch `score`, `verify`, TRL's reward function.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::{detached, items, text, truth, type_name};
use crate::modes::{ScoreMode, parallel, verdict};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyVerdict>()?;
    m.add_class::<TrlReward>()?;
    m.add_function(wrap_pyfunction!(compute_score, m)?)?;
    m.add_function(wrap_pyfunction!(compute_score_batch, m)?)?;
    m.add_function(wrap_pyfunction!(score, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add("trl_reward", TrlReward::new("auto", "solution", None)?)?;
    Ok(())
}

/// The keyword arguments verl passes to a `compute_score` beside the four it documents: the
/// sandbox options of `default_compute_score` and the reward loop's reward-model handles.
/// Accepted and ignored.
const VERL_EXTRA_KWARGS: &[&str] = &[
    "sandbox_fusion_url",
    "concurrent_semaphore",
    "memory_limit_mb",
    "reward_router_address",
    "reward_model_tokenizer",
    "model_name",
    "sampling_params",
];

/// Ignores verl's extra keyword arguments, and any other with a `UserWarning` (once per call
/// site, as Python shows warnings): a misspelt `reward_kwargs` key (`mdoe`) is seen, while a
/// keyword a newer verl adds does not stop training.
fn check_kwargs(py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
    for (key, _) in kwargs.into_iter().flatten() {
        let key = key.str()?.to_string();
        if !VERL_EXTRA_KWARGS.contains(&key.as_str()) {
            let message = std::ffi::CString::new(format!(
                "rstar_agent.compute_score ignores the keyword argument `{key}` (its own are `mode` and `threads`)"
            ))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
            let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
            PyErr::warn(py, &category, &message, 1)?;
        }
    }
    Ok(())
}

/// Scores pairs on the thread pools with the GIL released: rewards in order, or the first
/// ground-truth error as a `ValueError` naming its index.
fn score_pairs(
    py: Python<'_>,
    responses: Vec<String>,
    truths: Vec<String>,
    mode: ScoreMode,
    threads: Option<usize>,
    truth_arg: &str,
) -> PyResult<Vec<f64>> {
    if responses.len() != truths.len() {
        return Err(PyValueError::new_err(format!(
            "{} responses but {} ground truths: pass one ground truth per response",
            responses.len(),
            truths.len()
        )));
    }
    let results = detached(py, || {
        parallel(threads, responses.len(), |i| {
            crate::modes::score_one(mode, &responses[i], &truths[i])
        })
    })?;
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.map_err(|e| PyValueError::new_err(format!("{truth_arg}[{i}]: {e}"))))
        .collect()
}

/// verl's `custom_reward_function`: the reward (0.0 or 1.0) of one response.
///
/// `mode` is `"auto"` (integer, choice or math, picked from the ground truth), `"integer"`,
/// `"math"` or `"choice"`; set it with verl's `custom_reward_function.reward_kwargs`.
/// `data_source` and `extra_info` are accepted and not read, as are verl's other keyword
/// arguments (an unknown one gives a `UserWarning`). Raises `ValueError` for a ground truth the
/// mode cannot score, a NUL byte or a string over 16 MiB, and `TypeError` for a non-string.
#[pyfunction]
#[pyo3(signature = (data_source, solution_str, ground_truth, extra_info=None, *, mode="auto", **kwargs))]
fn compute_score(
    py: Python<'_>,
    data_source: &Bound<'_, PyAny>,
    solution_str: &Bound<'_, PyAny>,
    ground_truth: &Bound<'_, PyAny>,
    extra_info: Option<&Bound<'_, PyAny>>,
    mode: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<f64> {
    let _ = (data_source, extra_info);
    check_kwargs(py, kwargs)?;
    let mode = super::mode(mode)?;
    let response = text("solution_str", solution_str)?;
    let truth = truth("ground_truth", ground_truth)?;
    detached(py, || crate::modes::score_one(mode, &response, &truth))?
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// verl's batch reward manager (`reward_model.reward_manager=batch`): one reward per response.
#[pyfunction]
#[pyo3(signature = (data_sources, solution_strs, ground_truths, extra_infos=None, *, mode="auto", threads=None, **kwargs))]
#[allow(clippy::too_many_arguments)] // reason: verl's keyword signature plus ours, as Python sees it
fn compute_score_batch(
    py: Python<'_>,
    data_sources: &Bound<'_, PyAny>,
    solution_strs: &Bound<'_, PyAny>,
    ground_truths: &Bound<'_, PyAny>,
    extra_infos: Option<&Bound<'_, PyAny>>,
    mode: &str,
    threads: Option<i64>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<f64>> {
    let _ = (data_sources, extra_infos);
    check_kwargs(py, kwargs)?;
    let mode = super::mode(mode)?;
    let threads = super::threads(threads)?;
    let responses = items("solution_strs", solution_strs, text)?;
    let truths = items("ground_truths", ground_truths, truth)?;
    score_pairs(py, responses, truths, mode, threads, "ground_truths")
}

/// The rewards (0.0 or 1.0) of many responses, in order, on `threads` threads (`None`: one per
/// CPU) with the GIL released, so other Python threads run meanwhile.
#[pyfunction]
#[pyo3(signature = (solutions, truths, mode="auto", threads=None))]
fn score(
    py: Python<'_>,
    solutions: &Bound<'_, PyAny>,
    truths: &Bound<'_, PyAny>,
    mode: &str,
    threads: Option<i64>,
) -> PyResult<Vec<f64>> {
    let mode = super::mode(mode)?;
    let threads = super::threads(threads)?;
    let responses = items("solutions", solutions, text)?;
    let truths = items("truths", truths, truth)?;
    score_pairs(py, responses, truths, mode, threads, "truths")
}

/// One response's verdict: the reward and why.
#[pyclass(frozen, get_all, name = "Verdict", module = "rstar_agent")]
#[derive(Debug, Clone)]
struct PyVerdict {
    /// 1.0 when the answer is the ground truth, else 0.0.
    reward: f64,
    /// `right`, `wrong`, `no_box`, `empty_box`, `several_answers`, `not_an_integer` or `too_large`.
    reason: String,
    /// The mode that scored it (`integer`, `math` or `choice`).
    mode: String,
    /// The text of the last box, trimmed; `None` without one.
    extracted: Option<String>,
    /// The answer as a canonical integer, when it is one.
    normalized: Option<String>,
    /// The math and choice modes' canonical form of the answer.
    canonical: Option<String>,
}

#[pymethods]
impl PyVerdict {
    fn __repr__(&self) -> String {
        format!(
            "Verdict(reward={}, reason={:?}, mode={:?}, extracted={:?})",
            self.reward, self.reason, self.mode, self.extracted
        )
    }
}

/// Scores one response and says why: a `Verdict`.
#[pyfunction]
#[pyo3(signature = (solution, truth, mode="auto"))]
fn verify(
    py: Python<'_>,
    solution: &Bound<'_, PyAny>,
    truth: &Bound<'_, PyAny>,
    mode: &str,
) -> PyResult<PyVerdict> {
    let mode = super::mode(mode)?;
    let response = text("solution", solution)?;
    let truth = super::truth("truth", truth)?;
    let (v, used) = detached(py, || verdict(mode, &response, &truth))?
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyVerdict {
        reward: f64::from(v.reward),
        reason: v.reason.as_str().to_string(),
        mode: used.as_str().to_string(),
        extracted: v.extracted,
        normalized: v.normalized.map(|n| n.as_str().to_string()),
        canonical: v.canonical,
    })
}

/// The text of one TRL completion: a `str` (standard format), or a list of messages
/// (conversational format), of which the assistant turns are read, joined by newlines. A
/// message's `content` is a `str` or a list of parts whose `text` parts are read.
fn completion_text(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if obj.is_instance_of::<PyString>() {
        return text(what, obj);
    }
    if !obj.is_instance_of::<PyList>() && !obj.is_instance_of::<pyo3::types::PyTuple>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a str or a list of message dicts, not {}",
            type_name(obj)
        )));
    }
    let mut out = String::new();
    for (j, message) in obj.try_iter()?.enumerate() {
        let message = message?;
        let at = format!("{what}[{j}]");
        let message = message.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{at} must be a message dict, not {}",
                type_name(&message)
            ))
        })?;
        if let Some(role) = message.get_item("role")?
            && text(&format!("{at}[\"role\"]"), &role)? != "assistant"
        {
            continue;
        }
        let Some(content) = message.get_item("content")? else {
            continue;
        };
        let part = if content.is_none() {
            String::new()
        } else if content.is_instance_of::<PyString>() {
            text(&format!("{at}[\"content\"]"), &content)?
        } else {
            // Multimodal content: a list of parts, `{"type": "text", "text": ...}` among them.
            let mut joined = String::new();
            for (k, p) in content.try_iter()?.enumerate() {
                let p = p?;
                if let Ok(p) = p.cast::<PyDict>()
                    && let Some(t) = p.get_item("text")?
                {
                    joined.push_str(&text(&format!("{at}[\"content\"][{k}][\"text\"]"), &t)?);
                }
            }
            joined
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&part);
    }
    crate::modes::check_text(what, &out).map_err(PyValueError::new_err)?;
    Ok(out)
}

/// A TRL reward function (`GRPOTrainer(reward_funcs=[...])`): called as
/// `reward(completions, solution, **kwargs)`, it returns one float per completion. Completions
/// are strings or TRL's conversational lists of messages (assistant turns are scored). The ground
/// truths come from the dataset column `truth_key` (default `solution`), which TRL passes as a
/// keyword argument.
#[pyclass(frozen, name = "TrlReward", module = "rstar_agent")]
#[derive(Debug, Clone)]
struct TrlReward {
    mode: ScoreMode,
    truth_key: String,
    threads: Option<usize>,
}

#[pymethods]
impl TrlReward {
    #[new]
    #[pyo3(signature = (mode="auto", truth_key="solution", threads=None))]
    fn new(mode: &str, truth_key: &str, threads: Option<i64>) -> PyResult<Self> {
        Ok(Self {
            mode: super::mode(mode)?,
            truth_key: truth_key.to_string(),
            threads: super::threads(threads)?,
        })
    }

    /// The name TRL logs the reward under (`rewards/<name>`).
    #[getter(__name__)]
    fn name(&self) -> String {
        if self.mode == ScoreMode::Auto {
            "rstar_reward".into()
        } else {
            format!("rstar_reward_{}", self.mode.as_str())
        }
    }

    #[pyo3(signature = (completions, solution=None, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        completions: &Bound<'_, PyAny>,
        solution: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<f64>> {
        let truths = if self.truth_key == "solution" {
            solution.cloned()
        } else {
            match kwargs {
                Some(k) => k.get_item(&self.truth_key)?,
                None => None,
            }
        };
        let Some(truths) = truths else {
            return Err(PyTypeError::new_err(format!(
                "the reward needs the ground truths as the keyword argument `{}` (a dataset column of that name)",
                self.truth_key
            )));
        };
        let responses = items("completions", completions, completion_text)?;
        let truths = items(&self.truth_key, &truths, truth)?;
        score_pairs(
            py,
            responses,
            truths,
            self.mode,
            self.threads,
            &self.truth_key,
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "TrlReward(mode={:?}, truth_key={:?})",
            self.mode.as_str(),
            self.truth_key
        )
    }
}
