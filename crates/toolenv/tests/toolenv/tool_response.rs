//! `rstar_episode::ToolOutcome::code_judge` writes the tool-response layout out again so the agent
//! format needs no sandbox crate; these tests hold it to `rstar_toolenv::format_response`, the
//! implementation checked against the reference, for each of the four outcomes.

use rstar_episode::toolcall::{OutcomeKind, ToolOutcome};
use rstar_toolenv::{ResponseFormat, format_response};

/// `format_response` as the episode uses it: the pool has already capped each stream and the
/// episode's limits cut the whole, so no per-stream cap and no budget.
fn reference(success: bool, reason: &str, stdout: &str, stderr: &str, seconds: f64) -> String {
    let format = ResponseFormat {
        stream_chars: usize::MAX,
        budget_chars: None,
    };
    format_response(success, reason, stdout, stderr, seconds, &format)
}

#[test]
fn code_judge_text_equals_format_response_for_every_outcome() {
    // (success, reason, stdout, stderr, seconds, expected kind)
    let cases: &[(bool, &str, &str, &str, f64, OutcomeKind)] = &[
        // Output, including a multi-line, non-ASCII, long stdout and both streams.
        (true, "", "42\n", "", 0.123, OutcomeKind::Output),
        (true, "", "a\nb\n\nc", "", 1.0, OutcomeKind::Output),
        (
            true,
            "",
            "π ≈ 3.14159 ✓\n",
            "warning: x\n",
            0.005,
            OutcomeKind::Output,
        ),
        (true, "", &"x".repeat(5000), "", 12.345, OutcomeKind::Output),
        // No output (stderr alone does not count as output).
        (true, "", "", "", 0.0, OutcomeKind::NoOutput),
        (
            true,
            "",
            "",
            "DeprecationWarning\n",
            0.015,
            OutcomeKind::NoOutput,
        ),
        // Error: the program failed, or the sandbox did.
        (
            false,
            "",
            "",
            "NameError at line 1: name 'prnt' is not defined\n  prnt(1)",
            0.02,
            OutcomeKind::Error,
        ),
        (
            false,
            "",
            "partial\n",
            "Traceback\n",
            2.675,
            OutcomeKind::Error,
        ),
        (false, "internal_error", "", "", 0.0, OutcomeKind::Error),
        // Timeout.
        (false, "worker_timeout", "", "", 10.0, OutcomeKind::Timeout),
        (
            false,
            "worker_timeout",
            "tick\n",
            "",
            9.995,
            OutcomeKind::Timeout,
        ),
    ];
    for &(success, reason, stdout, stderr, seconds, kind) in cases {
        let outcome = ToolOutcome::code_judge(success, reason, stdout, stderr, seconds);
        assert_eq!(
            outcome.text,
            reference(success, reason, stdout, stderr, seconds),
            "success={success} reason={reason:?} stdout={stdout:?} stderr={stderr:?} seconds={seconds}"
        );
        assert_eq!(outcome.kind, kind, "{outcome:?}");
    }
}
