//! Calls, outcomes and results.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::format::{ResponseFormat, format_response};

/// The two reference tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// `python_code_with_standard_io`: code plus stdin.
    #[default]
    PythonCodeWithStandardIo,
    /// `jupyter_code`: a cell run after replaying earlier cells with their
    /// output suppressed (stateless emulation, as the reference does).
    JupyterCode,
}

impl Tool {
    /// The tool's name as the model writes it.
    pub fn name(self) -> &'static str {
        match self {
            Tool::PythonCodeWithStandardIo => "python_code_with_standard_io",
            Tool::JupyterCode => "jupyter_code",
        }
    }
}

/// One tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ToolCall {
    /// Which tool.
    #[serde(default)]
    pub tool: Tool,
    /// The code to run.
    pub code: String,
    /// Standard input (`python_code_with_standard_io` only).
    #[serde(default)]
    pub input: String,
    /// Earlier cells, replayed with output suppressed (`jupyter_code` only).
    #[serde(default)]
    pub history: Vec<String>,
    /// Overrides the pool's wall-clock timeout for this call.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_secs")]
    pub timeout: Option<Duration>,
}

impl ToolCall {
    /// A `python_code_with_standard_io` call.
    pub fn python(code: impl Into<String>, input: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            input: input.into(),
            ..Self::default()
        }
    }

    /// A `jupyter_code` call: `code` runs after `history` is replayed.
    pub fn jupyter(code: impl Into<String>, history: Vec<String>) -> Self {
        Self {
            tool: Tool::JupyterCode,
            code: code.into(),
            history,
            ..Self::default()
        }
    }

    /// The same call with its own timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

mod opt_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let secs = Option::<f64>::deserialize(d)?;
        match secs {
            Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
            Some(s) => Err(serde::de::Error::custom(format!(
                "timeout must be positive, got {s}"
            ))),
            None => Ok(None),
        }
    }
}

/// How a call ended: the paper's four outcomes plus a retryable internal failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Exit status 0 and something on stdout.
    Output,
    /// Exit status 0 and nothing on stdout.
    NoOutput,
    /// A non-zero exit, a signal, or output beyond the cap; stderr has the
    /// traceback or error message.
    Error,
    /// The wall-clock or CPU limit was reached.
    Timeout,
    /// The sandbox itself failed (worker died, set-up failed). The code may not
    /// have run; the caller may retry.
    Internal,
}

/// The result of one call. Every submitted call gets exactly one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// How the call ended.
    pub outcome: Outcome,
    /// Captured stdout (UTF-8, lossy), at most the pool's output cap.
    pub stdout: String,
    /// Captured stderr (UTF-8, lossy), at most the pool's output cap.
    pub stderr: String,
    /// The exit status, when the process exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the process, when one did.
    pub signal: Option<i32>,
    /// Wall-clock seconds from fork to exit (code-judge's `cost`).
    pub cost: f64,
    /// CPU seconds used by the call's main process.
    pub cpu: f64,
    /// Whether a stream hit the output cap (the process was then killed).
    pub output_limited: bool,
    /// For [`Outcome::Internal`]: what went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ToolResult {
    /// An internal failure with a message.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Internal,
            stdout: String::new(),
            stderr: String::new(),
            exit_code: None,
            signal: None,
            cost: 0.0,
            cpu: 0.0,
            output_limited: false,
            message: Some(message.into()),
        }
    }

    /// code-judge's `run_success`: the process exited with status 0.
    pub fn success(&self) -> bool {
        matches!(self.outcome, Outcome::Output | Outcome::NoOutput)
    }

    /// Whether retrying may help (internal failures only).
    pub fn is_retryable(&self) -> bool {
        self.outcome == Outcome::Internal
    }

    /// code-judge's `reason`: `""`, `worker_timeout`, `internal_error` or
    /// `output_limit_exceeded` (ours; code-judge has no output cap).
    pub fn reason(&self) -> &'static str {
        match self.outcome {
            Outcome::Timeout => "worker_timeout",
            Outcome::Internal => "internal_error",
            Outcome::Error if self.output_limited => "output_limit_exceeded",
            _ => "",
        }
    }

    /// The tool-response text, exactly as the reference formats it.
    pub fn text(&self, format: &ResponseFormat) -> String {
        format_response(
            self.success(),
            self.reason(),
            &self.stdout,
            &self.stderr,
            self.cost,
            format,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_parse_from_jsonl_lines() {
        let c: ToolCall = serde_json::from_str(r#"{"code":"print(input())","input":"7"}"#).unwrap();
        assert_eq!(c, ToolCall::python("print(input())", "7"));
        let j: ToolCall = serde_json::from_str(
            r#"{"tool":"jupyter_code","code":"x","history":["x=1"],"timeout":2.5}"#,
        )
        .unwrap();
        assert_eq!(j.tool, Tool::JupyterCode);
        assert_eq!(j.timeout, Some(Duration::from_millis(2500)));
        assert!(serde_json::from_str::<ToolCall>(r#"{"code":"x","timeout":-1}"#).is_err());
        assert!(serde_json::from_str::<ToolCall>(r#"{"input":"x"}"#).is_err());
    }

    #[test]
    fn reasons_follow_code_judge() {
        let mut r = ToolResult::internal("boom");
        assert_eq!(
            (r.reason(), r.success(), r.is_retryable()),
            ("internal_error", false, true)
        );
        r.outcome = Outcome::Timeout;
        assert_eq!(r.reason(), "worker_timeout");
        r.outcome = Outcome::Error;
        assert_eq!(r.reason(), "");
        r.output_limited = true;
        assert_eq!(r.reason(), "output_limit_exceeded");
        r.outcome = Outcome::NoOutput;
        assert!(r.success());
        assert_eq!(
            r.text(&ResponseFormat::new()),
            "Tool call success\nexecution time: 0.00s"
        );
    }
}
