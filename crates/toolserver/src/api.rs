//! The wire types of both protocols: code-judge (`/run*`, `/judge*`) and SandboxFusion
//! (`/run_code`, `/run_jupyter`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// code-judge's cap on the `stdout`/`stderr` it returns (`MAX_STDOUT_ERROR_LENGTH`).
pub const MAX_STDOUT_ERROR_LENGTH: usize = 1000;

/// code-judge's `reason` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Reason {
    /// The call ran to completion (whatever its exit status).
    #[default]
    #[serde(rename = "")]
    None,
    /// The call hit its wall-clock or CPU limit.
    #[serde(rename = "worker_timeout")]
    WorkerTimeout,
    /// The call waited in the queue longer than the server's limit and did not run.
    #[serde(rename = "queue_timeout")]
    QueueTimeout,
    /// The sandbox failed (after the server's own retries), or the client gave
    /// up on a transport error.
    #[serde(rename = "internal_error")]
    InternalError,
    /// The submission could not be run as given.
    #[serde(rename = "invalid_input")]
    InvalidInput,
    /// The call wrote more than the sandbox's output cap and was killed (ours: code-judge has no
    /// cap; the in-process sandbox gives the same reason).
    #[serde(rename = "output_limit_exceeded")]
    OutputLimitExceeded,
}

impl Reason {
    /// The string on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::None => "",
            Reason::WorkerTimeout => "worker_timeout",
            Reason::QueueTimeout => "queue_timeout",
            Reason::InternalError => "internal_error",
            Reason::InvalidInput => "invalid_input",
            Reason::OutputLimitExceeded => "output_limit_exceeded",
        }
    }
}

/// A code-judge submission (`POST /run`; an element of a batch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// The caller's id, echoed in the result; the server makes one up when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_id: Option<String>,
    /// The language: only `python` runs here (`cpp` and `math` are refused with a 422).
    #[serde(rename = "type")]
    pub kind: String,
    /// code-judge's free-form options (accepted and ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<BTreeMap<String, String>>,
    /// The program.
    pub solution: String,
    /// Standard input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// When set, `success` also requires the stripped stdout to equal it (stripped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_output: Option<String>,
}

impl Submission {
    /// A python submission.
    pub fn python(solution: impl Into<String>) -> Self {
        Self {
            sub_id: None,
            kind: "python".into(),
            options: None,
            solution: solution.into(),
            input: None,
            expected_output: None,
        }
    }

    /// The same submission with an id.
    pub fn with_sub_id(mut self, id: impl Into<String>) -> Self {
        self.sub_id = Some(id.into());
        self
    }

    /// The same submission with standard input.
    pub fn with_input(mut self, input: impl Into<String>) -> Self {
        self.input = Some(input.into());
        self
    }

    /// The same submission with an expected output.
    pub fn with_expected_output(mut self, expected: impl Into<String>) -> Self {
        self.expected_output = Some(expected.into());
        self
    }
}

/// A code-judge batch (`POST /run/batch`, `/run/long-batch`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSubmission {
    /// The batch's id, echoed; made up when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_id: Option<String>,
    /// Always `batch` in code-judge; accepted when absent.
    #[serde(rename = "type", default = "batch_type")]
    pub kind: String,
    /// The submissions (at least one).
    pub submissions: Vec<Submission>,
}

fn batch_type() -> String {
    "batch".into()
}

/// A code-judge result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmissionResult {
    /// The submission's id.
    pub sub_id: String,
    /// `run_success` and, when `expected_output` was given, matching output.
    pub success: bool,
    /// The program exited with status 0.
    pub run_success: bool,
    /// Seconds the program ran.
    pub cost: f64,
    /// Captured stdout, cut to [`MAX_STDOUT_ERROR_LENGTH`] characters.
    #[serde(default)]
    pub stdout: Option<String>,
    /// Captured stderr, cut to [`MAX_STDOUT_ERROR_LENGTH`] characters.
    #[serde(default)]
    pub stderr: Option<String>,
    /// Why the call did not complete normally (`""` when it did).
    #[serde(default)]
    pub reason: Reason,
}

impl SubmissionResult {
    /// A result for a call that did not run.
    pub fn failed(sub_id: impl Into<String>, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            sub_id: sub_id.into(),
            success: false,
            run_success: false,
            cost: 0.0,
            stdout: Some(String::new()),
            stderr: Some(message.into()),
            reason,
        }
    }
}

/// A code-judge batch result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchResult {
    /// The batch's id.
    pub sub_id: String,
    /// One result per submission, in order.
    pub results: Vec<SubmissionResult>,
}

/// A code-judge `/judge` result: [`SubmissionResult`] without the streams, as code-judge's
/// `JudgeResult` leaves `stdout` and `stderr` out (rather than writing them `null`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeResult {
    /// The submission's id.
    pub sub_id: String,
    /// `run_success` and, when `expected_output` was given, matching output.
    pub success: bool,
    /// The program exited with status 0.
    pub run_success: bool,
    /// Seconds the program ran.
    pub cost: f64,
    /// Why the call did not complete normally (`""` when it did).
    #[serde(default)]
    pub reason: Reason,
}

impl From<SubmissionResult> for JudgeResult {
    fn from(r: SubmissionResult) -> Self {
        Self {
            sub_id: r.sub_id,
            success: r.success,
            run_success: r.run_success,
            cost: r.cost,
            reason: r.reason,
        }
    }
}

/// A code-judge `/judge/batch` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchJudgeResult {
    /// The batch's id.
    pub sub_id: String,
    /// One result per submission, in order.
    pub results: Vec<JudgeResult>,
}

impl From<BatchResult> for BatchJudgeResult {
    fn from(b: BatchResult) -> Self {
        Self {
            sub_id: b.sub_id,
            results: b.results.into_iter().map(JudgeResult::from).collect(),
        }
    }
}

/// `GET /status`: code-judge's two fields plus ours.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStatus {
    /// Calls accepted and waiting for a worker.
    pub queue: usize,
    /// Workers with a live process.
    pub num_workers: usize,
    /// Calls running now.
    #[serde(default)]
    pub running: usize,
    /// Configured workers.
    #[serde(default)]
    pub workers: usize,
    /// Workers replaced after dying, hanging or reaching their call budget.
    #[serde(default)]
    pub restarts: u64,
    /// The server is shutting down and refuses new work.
    #[serde(default)]
    pub draining: bool,
    /// Calls held now, waiting or running (`rstar tools serve`; 0 from code-judge).
    #[serde(default)]
    pub admitted: usize,
    /// The most calls the server holds; past it requests get `429` (0: not reported, as
    /// code-judge does not).
    #[serde(default)]
    pub max_queue: usize,
    /// Requests refused with `429` since the server started.
    #[serde(default)]
    pub refused: u64,
    /// Calls run to their end since the server started.
    #[serde(default)]
    pub completed: u64,
}

impl ServerStatus {
    /// Room for more calls before the server refuses them: `max_queue − admitted`, or `None`
    /// when the server does not report its limit.
    pub fn room(&self) -> Option<usize> {
        (self.max_queue > 0).then(|| self.max_queue.saturating_sub(self.admitted))
    }
}

/// SandboxFusion's `POST /run_code` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCodeRequest {
    /// The program.
    pub code: String,
    /// The language: `python` or `python3` here; anything else gets a 422.
    pub language: String,
    /// Accepted for compatibility; python is not compiled.
    #[serde(default = "ten")]
    pub compile_timeout: f64,
    /// Wall-clock limit in seconds.
    #[serde(default = "ten")]
    pub run_timeout: f64,
    /// Accepted and validated; the pool's address-space limit applies (see the docs).
    #[serde(default = "minus_one", rename = "memory_limit_MB")]
    pub memory_limit_mb: i64,
    /// Standard input.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Files to create; not supported (a non-empty map gets a 422).
    #[serde(default)]
    pub files: BTreeMap<String, Option<String>>,
    /// Files to return; not supported (a non-empty list gets a 422).
    #[serde(default)]
    pub fetch_files: Vec<String>,
}

fn ten() -> f64 {
    10.0
}

fn minus_one() -> i64 {
    -1
}

impl RunCodeRequest {
    /// A python request with SandboxFusion's defaults.
    pub fn python(code: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            language: "python".into(),
            compile_timeout: ten(),
            run_timeout: ten(),
            memory_limit_mb: -1,
            stdin: None,
            files: BTreeMap::new(),
            fetch_files: Vec::new(),
        }
    }
}

/// SandboxFusion's `RunStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunStatus {
    /// The program ran and exited with status 0.
    Success,
    /// The program ran and failed (non-zero exit, signal or timeout).
    Failed,
    /// The sandbox could not run the program.
    SandboxError,
}

/// SandboxFusion's `CommandRunStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandRunStatus {
    /// The process ended by itself.
    Finished,
    /// The process could not be run.
    Error,
    /// The process hit the time limit.
    TimeLimitExceeded,
}

/// SandboxFusion's `CommandRunResult`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandRunResult {
    /// How the process ended.
    pub status: CommandRunStatus,
    /// Seconds it ran.
    pub execution_time: Option<f64>,
    /// Its exit status (`None` when a signal ended it).
    pub return_code: Option<i32>,
    /// Its stdout.
    pub stdout: Option<String>,
    /// Its stderr.
    pub stderr: Option<String>,
}

/// SandboxFusion's `POST /run_code` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCodeResponse {
    /// The overall status.
    pub status: RunStatus,
    /// A message for `SandboxError`, else empty.
    pub message: String,
    /// Always `None`: python is not compiled.
    pub compile_result: Option<CommandRunResult>,
    /// The run.
    pub run_result: Option<CommandRunResult>,
    /// This server's name (SandboxFusion reports its pod).
    pub executor_pod_name: Option<String>,
    /// Fetched files: always empty here.
    pub files: BTreeMap<String, String>,
}

/// SandboxFusion's `POST /run_jupyter` request: cells run in order in one notebook, so a
/// later cell sees what an earlier one defined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunJupyterRequest {
    /// The cells' code, in order.
    pub cells: Vec<String>,
    /// Wall-clock limit of one cell in seconds (its replay of the earlier cells included); 0
    /// means none beyond `total_timeout`.
    #[serde(default)]
    pub cell_timeout: f64,
    /// Wall-clock limit of all the cells together, in seconds.
    #[serde(default = "forty_five")]
    pub total_timeout: f64,
    /// The kernel: only `python3` (SandboxFusion's only one).
    #[serde(default = "python3")]
    pub kernel: String,
    /// Files to create; not supported (a non-empty map gets a 422).
    #[serde(default)]
    pub files: BTreeMap<String, Option<String>>,
    /// Files to return; not supported (a non-empty list gets a 422).
    #[serde(default)]
    pub fetch_files: Vec<String>,
}

fn forty_five() -> f64 {
    45.0
}

fn python3() -> String {
    "python3".into()
}

impl RunJupyterRequest {
    /// A request with SandboxFusion's defaults (no cell limit, 45 s in all, `python3`).
    pub fn new(cells: Vec<String>) -> Self {
        Self {
            cells,
            cell_timeout: 0.0,
            total_timeout: forty_five(),
            kernel: python3(),
            files: BTreeMap::new(),
            fetch_files: Vec::new(),
        }
    }
}

/// SandboxFusion's `CellRunResult`: what one cell wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRunResult {
    /// The cell's stdout (its last expression's `repr` included, as `jupyter_code` prints it).
    pub stdout: String,
    /// The cell's stderr.
    pub stderr: String,
    /// Rich display outputs: always empty here (the value of a last expression is in `stdout`).
    pub display: Vec<serde_json::Map<String, serde_json::Value>>,
    /// The cell's exception, as Jupyter's `error` output (`ename`, `evalue`, `traceback`);
    /// empty when the cell ran through.
    pub error: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// SandboxFusion's `POST /run_jupyter` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunJupyterResponse {
    /// `Success` when every cell ran (a cell that raised included: its exception is in its
    /// `error`), `Failed` when the time ran out, `SandboxError` when the sandbox failed.
    pub status: RunStatus,
    /// A message for `SandboxError`, else empty.
    pub message: String,
    /// The notebook run as a whole: its status and time.
    pub driver: Option<CommandRunResult>,
    /// One result per cell when `status` is `Success`, else empty (as SandboxFusion answers).
    pub cells: Vec<CellRunResult>,
    /// This server's name (SandboxFusion reports its pod).
    pub executor_pod_name: Option<String>,
    /// Fetched files: always empty here.
    pub files: BTreeMap<String, String>,
}

/// `POST /verify`: answers to score with `rstar-verifier`, as the trainer scores them in
/// process (`rl.verify = "remote"` sends its finished rollouts here). An empty list is
/// answered with an empty list.
///
/// ```
/// use rstar_toolserver::api::{VerifyItem, VerifyRequest};
/// use rstar_verifier::Mode;
/// let body: VerifyRequest = serde_json::from_str(
///     r#"{"items": [{"response": "so \\boxed{42}", "ground_truth": "42"},
///                   {"response": "\\boxed{B}", "ground_truth": "B", "mode": "choice"}]}"#,
/// ).unwrap();
/// assert_eq!(body.items[0], VerifyItem::new("so \\boxed{42}", "42", Mode::Integer));
/// assert_eq!(body.items[1].mode, Mode::Choice);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// The answers, answered in this order (at most the server's `max_batch`).
    pub items: Vec<VerifyItem>,
}

/// One answer of a [`VerifyRequest`]: `rstar-verifier`'s own [`rstar_verifier::VerifyItem`].
pub use rstar_verifier::VerifyItem;

/// `POST /verify`'s answer: one verdict per item, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyResponse {
    /// The verdicts.
    pub results: Vec<VerifyVerdict>,
}

/// The verdict on one answer: [`rstar_verifier::Verdict`]'s fields, or `error` when the ground
/// truth cannot be scored in its mode. The one JSON form of a verdict is
/// [`rstar_verifier::Scored`]; this is its name here.
pub use rstar_verifier::Scored as VerifyVerdict;

/// The body of every 4xx/5xx answer (FastAPI's shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What was wrong.
    pub detail: String,
}

/// Cuts `text` to at most `max` characters (code-judge cuts by characters).
pub fn head_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => text[..i].to_string(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_serialize_as_code_judge_strings() {
        for (r, s) in [
            (Reason::None, ""),
            (Reason::WorkerTimeout, "worker_timeout"),
            (Reason::QueueTimeout, "queue_timeout"),
            (Reason::InternalError, "internal_error"),
            (Reason::InvalidInput, "invalid_input"),
            (Reason::OutputLimitExceeded, "output_limit_exceeded"),
        ] {
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{s}\""));
            assert_eq!(r.as_str(), s);
            assert_eq!(
                serde_json::from_str::<Reason>(&format!("\"{s}\"")).unwrap(),
                r
            );
        }
    }

    #[test]
    fn submissions_parse_with_code_judge_field_names() {
        let s: Submission = serde_json::from_str(
            r#"{"sub_id":"a","type":"python","solution":"print(1)","input":"x","expected_output":"1","options":{"k":"v"}}"#,
        )
        .unwrap();
        assert_eq!(s.kind, "python");
        assert_eq!(s.input.as_deref(), Some("x"));
        assert_eq!(s.expected_output.as_deref(), Some("1"));
        let b: BatchSubmission =
            serde_json::from_str(r#"{"submissions":[{"type":"python","solution":"1"}]}"#).unwrap();
        assert_eq!(
            (b.kind.as_str(), b.sub_id, b.submissions.len()),
            ("batch", None, 1)
        );
        assert!(serde_json::from_str::<Submission>(r#"{"type":"python"}"#).is_err());
    }

    #[test]
    fn run_code_defaults_follow_sandbox_fusion() {
        let r: RunCodeRequest =
            serde_json::from_str(r#"{"code":"print(1)","language":"python"}"#).unwrap();
        assert_eq!(r, RunCodeRequest::python("print(1)"));
        let r: RunCodeRequest =
            serde_json::from_str(r#"{"code":"","language":"python","memory_limit_MB":512}"#)
                .unwrap();
        assert_eq!(r.memory_limit_mb, 512);
    }

    proptest::proptest! {
        #[test]
        fn head_chars_is_a_prefix_of_at_most_max_chars(text in "\\PC{0,40}", max in 0usize..50) {
            let head = head_chars(&text, max);
            proptest::prop_assert!(text.starts_with(&head));
            proptest::prop_assert_eq!(head.chars().count(), text.chars().count().min(max));
        }

        #[test]
        fn submissions_round_trip(solution in "\\PC{0,30}", input in proptest::option::of("\\PC{0,10}"), id in proptest::option::of("[a-z0-9-]{1,12}")) {
            let mut sub = Submission::python(solution);
            sub.input = input;
            sub.sub_id = id;
            let text = serde_json::to_string(&sub).unwrap();
            proptest::prop_assert_eq!(serde_json::from_str::<Submission>(&text).unwrap(), sub);
        }
    }

    #[test]
    fn issue_44_judge_results_leave_the_streams_out() {
        let run = SubmissionResult {
            stdout: Some("1\n".into()),
            ..SubmissionResult::failed("j", Reason::None, "")
        };
        let judged = serde_json::to_value(JudgeResult::from(run)).unwrap();
        let mut keys: Vec<&String> = judged.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["cost", "reason", "run_success", "sub_id", "success"]);
        let r: RunJupyterRequest = serde_json::from_str(r#"{"cells": ["a = 1"]}"#).unwrap();
        assert_eq!(r, RunJupyterRequest::new(vec!["a = 1".into()]));
        assert_eq!((r.total_timeout, r.cell_timeout), (45.0, 0.0));
    }

    #[test]
    fn head_chars_counts_characters() {
        assert_eq!(head_chars("héllo", 2), "hé");
        assert_eq!(head_chars("ab", 5), "ab");
        assert_eq!(head_chars("", 0), "");
    }
}
