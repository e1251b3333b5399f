//! The PyO3 layer: the `rstar_agent` module, and argument conversion shared by its functions.

mod grpo;
mod roc;
mod sandbox;
mod verify;

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString};

use crate::modes::{ScoreMode, check_text};

/// rstar-agent's crates for Python RL trainers: the exact verifier (`compute_score`, `score`,
/// `verify`, `trl_reward`), Resample-on-Correct (`roc_select`, `roc_penalties`), GRPO / Dr. GRPO
/// / RLOO advantages (`advantages`) and the sandboxed Python pool (`Sandbox`, `ToolClient`).
#[pymodule(name = "rstar_agent")]
fn rstar_agent(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_TEXT_BYTES", crate::MAX_TEXT_BYTES)?;
    verify::register(m)?;
    roc::register(m)?;
    grpo::register(m)?;
    sandbox::register(m)?;
    Ok(())
}

/// The type name of `obj`, for messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// One `str` argument, checked: `TypeError` for a non-string, `ValueError` for a NUL byte, a
/// string over the size limit or one that is not valid Unicode (a lone surrogate).
fn text(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if !obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be str, not {}",
            type_name(obj)
        )));
    }
    let s: String = obj
        .extract()
        .map_err(|e| PyValueError::new_err(format!("{what} is not valid Unicode: {e}")))?;
    check_text(what, &s).map_err(PyValueError::new_err)?;
    Ok(s)
}

/// A ground truth: a `str`, or an `int` (written in decimal). Floats and bools are refused: a
/// float has lost the exact value, and `True` is no answer.
fn truth(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        return Ok(obj.str()?.to_string());
    }
    if obj.is_instance_of::<PyString>() {
        return text(what, obj);
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be str or int, not {}",
        type_name(obj)
    )))
}

/// Every item of a sequence (a list, a tuple, …, but not a `str`, which is a sequence of
/// characters), converted by `each`, which is given the item's name (`solutions[3]`).
fn items<T>(
    arg: &str,
    obj: &Bound<'_, PyAny>,
    mut each: impl FnMut(&str, &Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Vec<T>> {
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{arg} must be a sequence (a list), not a str"
        )));
    }
    let iter = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{arg} must be a sequence (a list), not {}",
            type_name(obj)
        ))
    })?;
    let mut out = Vec::with_capacity(obj.len().unwrap_or(0));
    for (i, item) in iter.enumerate() {
        out.push(each(&format!("{arg}[{i}]"), &item?)?);
    }
    Ok(out)
}

/// A `mode=` argument.
fn mode(s: &str) -> PyResult<ScoreMode> {
    s.parse()
        .map_err(|e: String| PyValueError::new_err(format!("mode {e}")))
}

/// A `threads=` argument: `None` (one per CPU) or a positive count.
fn threads(n: Option<i64>) -> PyResult<Option<usize>> {
    match n {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX).min(1024))),
        Some(n) => Err(PyValueError::new_err(format!(
            "threads must be at least 1 (or None for one per CPU), got {n}"
        ))),
    }
}

/// Runs `f` with the GIL released, turning a panic into a `RuntimeError` (a panic is a bug in
/// rstar; Python gets an exception it can catch, never an abort).
fn detached<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    py.detach(|| catch_unwind(AssertUnwindSafe(f)))
        .map_err(|panic| PyRuntimeError::new_err(format!("rstar panicked: {}", panic_text(&panic))))
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}
