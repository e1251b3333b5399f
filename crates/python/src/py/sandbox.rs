//! The sandbox from Python: the zygote pool in-process (`Sandbox`) and the client of `rstar tools serve` fleets (`ToolClient`).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use rstar_toolenv::{
    Backend, BlockingPool, Outcome, Pool, ResponseFormat, ToolCall, format_response,
};
use rstar_toolserver::api::{Reason, Submission, SubmissionResult};
use rstar_toolserver::{Client, MAX_BATCH};

use super::{detached, items, text, type_name};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyToolResult>()?;
    m.add_class::<Sandbox>()?;
    m.add_class::<ToolClient>()?;
    Ok(())
}

/// How one call ended, with what it printed.
#[pyclass(frozen, get_all, name = "ToolResult", module = "rstar_agent")]
#[derive(Debug, Clone)]
struct PyToolResult {
    /// `output`, `no_output`, `error`, `timeout` (the four outcomes), or `internal` (the sandbox
    /// itself failed; retrying may help).
    outcome: String,
    /// Captured standard output.
    stdout: String,
    /// Captured standard error.
    stderr: String,
    /// The exit status, when the process exited (always `None` from a `ToolClient`).
    exit_code: Option<i32>,
    /// Wall-clock seconds the call ran.
    cost: f64,
    /// Whether the program exited with status 0.
    success: bool,
    /// The tool-response text the model sees, exactly as code-judge writes it.
    text: String,
}

#[pymethods]
impl PyToolResult {
    fn __repr__(&self) -> String {
        format!(
            "ToolResult(outcome={:?}, stdout={:?}, stderr={:?}, cost={:.3})",
            self.outcome, self.stdout, self.stderr, self.cost
        )
    }
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Output => "output",
        Outcome::NoOutput => "no_output",
        Outcome::Error => "error",
        Outcome::Timeout => "timeout",
        Outcome::Internal => "internal",
    }
}

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    if s.is_finite() && s > 0.0 && s <= 86_400.0 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(PyValueError::new_err(format!(
            "{what} must be a positive number of seconds (at most a day), got {s}"
        )))
    }
}

/// A `stdin=` argument: `None` or a `str`.
fn stdin_text(obj: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    match obj.filter(|o| !o.is_none()) {
        Some(o) => text("stdin", o),
        None => Ok(String::new()),
    }
}

/// One call of a batch: a code `str`, or a `(code, stdin)` tuple.
fn call(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<(String, String)> {
    if obj.is_instance_of::<PyString>() {
        return Ok((text(what, obj)?, String::new()));
    }
    if let Ok(t) = obj.cast::<PyTuple>()
        && t.len() == 2
    {
        return Ok((
            text(&format!("{what}[0]"), &t.get_item(0)?)?,
            text(&format!("{what}[1]"), &t.get_item(1)?)?,
        ));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be a code str or a (code, stdin) tuple, not {}",
        type_name(obj)
    )))
}

/// A pool of sandboxed Python workers (rstar-toolenv's zygote pool): each call runs in a fresh
/// forked child with rlimits, no network, a private temporary directory and a wall-clock limit,
/// and ends in one of four outcomes (`output`, `no_output`, `error`, `timeout`).
///
/// `python` defaults to this interpreter (`sys.executable`); `preload` to numpy and sympy (each
/// skipped when absent). Calls from several Python threads run concurrently (the GIL is released
/// while a call runs). `close()` (or leaving a `with` block) stops the workers.
#[pyclass(frozen, name = "Sandbox", module = "rstar_agent")]
#[derive(Debug)]
struct Sandbox {
    pool: RwLock<Option<Arc<BlockingPool>>>,
    format: ResponseFormat,
}

impl Sandbox {
    fn pool(&self) -> PyResult<Arc<BlockingPool>> {
        self.pool
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err("the sandbox is closed"))
    }

    fn convert(&self, r: rstar_toolenv::ToolResult) -> PyToolResult {
        PyToolResult {
            outcome: outcome_name(r.outcome).to_string(),
            text: r.text(&self.format),
            success: r.success(),
            stdout: r.stdout,
            stderr: match r.message {
                Some(m) if r.stderr.is_empty() => m,
                _ => r.stderr,
            },
            exit_code: r.exit_code,
            cost: r.cost,
        }
    }
}

#[pymethods]
impl Sandbox {
    #[new]
    #[pyo3(signature = (workers=None, *, python=None, timeout=10.0, memory_mb=4096, preload=None, backend="zygote"))]
    fn new(
        py: Python<'_>,
        workers: Option<usize>,
        python: Option<String>,
        timeout: f64,
        memory_mb: u64,
        preload: Option<Vec<String>>,
        backend: &str,
    ) -> PyResult<Self> {
        let python = match python {
            Some(p) => p,
            None => {
                let exe: String = py.import("sys")?.getattr("executable")?.extract()?;
                if exe.is_empty() {
                    "python3".into()
                } else {
                    exe
                }
            }
        };
        let backend = match backend {
            "zygote" => Backend::Zygote,
            "spawn" => Backend::Spawn,
            other => {
                return Err(PyValueError::new_err(format!(
                    "backend `{other}` is not one of zygote, spawn"
                )));
            }
        };
        let mut builder = Pool::builder()
            .python(python)
            .backend(backend)
            .timeout(seconds("timeout", timeout)?)
            .memory(memory_mb.saturating_mul(1 << 20));
        if let Some(w) = workers {
            if w == 0 {
                return Err(PyValueError::new_err("workers must be at least 1"));
            }
            builder = builder.workers(w);
        }
        if let Some(p) = preload {
            builder = builder.preload(p);
        }
        let format = builder.config().format.clone();
        let pool = detached(py, || BlockingPool::new(builder))?
            .map_err(|e| PyRuntimeError::new_err(format!("the sandbox did not start: {e}")))?;
        Ok(Self {
            pool: RwLock::new(Some(Arc::new(pool))),
            format,
        })
    }

    /// Runs `code` with `stdin` as its standard input; `timeout` (seconds) overrides the pool's.
    #[pyo3(signature = (code, stdin=None, timeout=None))]
    fn run(
        &self,
        py: Python<'_>,
        code: &Bound<'_, PyAny>,
        stdin: Option<&Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<PyToolResult> {
        let mut c = ToolCall::python(text("code", code)?, stdin_text(stdin)?);
        if let Some(t) = timeout {
            c = c.with_timeout(seconds("timeout", t)?);
        }
        let pool = self.pool()?;
        let r = detached(py, move || pool.run(c))?;
        Ok(self.convert(r))
    }

    /// Runs many calls concurrently (code strings or `(code, stdin)` tuples); results in order.
    #[pyo3(signature = (calls, timeout=None))]
    fn run_batch(
        &self,
        py: Python<'_>,
        calls: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<PyToolResult>> {
        let limit = timeout.map(|t| seconds("timeout", t)).transpose()?;
        let calls: Vec<ToolCall> = items("calls", calls, call)?
            .into_iter()
            .map(|(code, stdin)| {
                let c = ToolCall::python(code, stdin);
                match limit {
                    Some(t) => c.with_timeout(t),
                    None => c,
                }
            })
            .collect();
        let pool = self.pool()?;
        let results = detached(py, move || pool.run_batch(calls))?;
        Ok(results.into_iter().map(|r| self.convert(r)).collect())
    }

    /// The number of workers.
    #[getter]
    fn workers(&self) -> PyResult<usize> {
        Ok(self.pool()?.pool().config().workers)
    }

    /// Stops the workers; later calls raise `RuntimeError`. Calling it twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let pool = self.pool.write().unwrap_or_else(|e| e.into_inner()).take();
        // Dropping the last handle stops the workers; let it happen without the GIL.
        detached(py, move || drop(pool))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match self.pool.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(p) => format!("Sandbox(workers={})", p.pool().config().workers),
            None => "Sandbox(closed)".into(),
        }
    }
}

/// A client of one or more `rstar tools serve` (or code-judge) servers: calls are batched (up to
/// 64 a request), spread over the servers by their queue length, and retried on `queue_timeout`
/// and transport errors. Results are `ToolResult`s, as from a `Sandbox`.
#[pyclass(frozen, name = "ToolClient", module = "rstar_agent")]
#[derive(Debug)]
struct ToolClient {
    runtime: tokio::runtime::Runtime,
    client: Client,
    format: ResponseFormat,
}

impl ToolClient {
    fn convert(&self, r: SubmissionResult) -> PyToolResult {
        let stdout = r.stdout.unwrap_or_default();
        let stderr = r.stderr.unwrap_or_default();
        let outcome = match r.reason {
            Reason::WorkerTimeout => "timeout",
            Reason::QueueTimeout | Reason::InternalError | Reason::InvalidInput => "internal",
            Reason::OutputLimitExceeded => "error",
            Reason::None if !r.run_success => "error",
            Reason::None if stdout.is_empty() => "no_output",
            Reason::None => "output",
        };
        PyToolResult {
            outcome: outcome.to_string(),
            text: format_response(
                r.run_success,
                r.reason.as_str(),
                &stdout,
                &stderr,
                r.cost,
                &self.format,
            ),
            success: r.run_success,
            stdout,
            stderr,
            exit_code: None,
            cost: r.cost,
        }
    }
}

#[pymethods]
impl ToolClient {
    #[new]
    #[pyo3(signature = (endpoints, *, token=None, batch_size=MAX_BATCH, concurrency=8, max_retries=4))]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        token: Option<String>,
        batch_size: usize,
        concurrency: usize,
        max_retries: u32,
    ) -> PyResult<Self> {
        let endpoints: Vec<String> = if endpoints.is_instance_of::<PyString>() {
            vec![text("endpoints", endpoints)?]
        } else {
            items("endpoints", endpoints, text)?
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("could not start a runtime: {e}")))?;
        let mut builder = Client::builder()
            .token(token)
            .batch_size(batch_size)
            .concurrency(concurrency)
            .max_retries(max_retries);
        for e in endpoints {
            builder = builder.endpoint(e);
        }
        let client = {
            let _inside = runtime.enter();
            builder
                .build()
                .map_err(|e| PyValueError::new_err(e.to_string()))?
        };
        Ok(Self {
            runtime,
            client,
            format: ResponseFormat::new(),
        })
    }

    /// Runs `code` with `stdin`; with `expected_output`, `success` also needs matching output.
    #[pyo3(signature = (code, stdin=None, expected_output=None))]
    fn run(
        &self,
        py: Python<'_>,
        code: &Bound<'_, PyAny>,
        stdin: Option<&Bound<'_, PyAny>>,
        expected_output: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyToolResult> {
        let mut sub = Submission::python(text("code", code)?).with_input(stdin_text(stdin)?);
        if let Some(e) = expected_output {
            sub = sub.with_expected_output(text("expected_output", e)?);
        }
        let r = detached(py, || self.runtime.block_on(self.client.run(sub)))?;
        Ok(self.convert(r))
    }

    /// Runs many calls (code strings or `(code, stdin)` tuples) in batches; results in order.
    fn run_batch(&self, py: Python<'_>, calls: &Bound<'_, PyAny>) -> PyResult<Vec<PyToolResult>> {
        let subs: Vec<Submission> = items("calls", calls, call)?
            .into_iter()
            .map(|(code, stdin)| Submission::python(code).with_input(stdin))
            .collect();
        let results = detached(py, || self.runtime.block_on(self.client.run_batch(subs)))?;
        Ok(results.into_iter().map(|r| self.convert(r)).collect())
    }

    fn __repr__(&self) -> String {
        format!("ToolClient({} endpoints)", self.client.loads().len())
    }
}
