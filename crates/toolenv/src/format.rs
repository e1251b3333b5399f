//! The tool-response text, formatted exactly as rStar2-Agent's code-judge client does.
//!
//! The reference (`rstar2_agent/tools/code_judge_utils.py`) builds the text from
//! a code-judge result: `Tool call success` or `Tool call failure`, then (on
//! failure) `reason: …`, then `stdout: …` and `stderr: …` when non-empty, then
//! `execution time: X.XXs`, joined by newlines. code-judge has already cut each
//! stream to its first 1000 characters. verl's agent loop then cuts the whole
//! response in the middle when it exceeds `max_tool_response_length`:
//! `text[:n/2] + "...(truncated)..." + text[-n/2:]`. Lengths are counted in
//! characters (Unicode scalar values), as Python counts them.

/// The marker verl puts in the middle of a truncated tool response.
pub const TRUNCATION_MARKER: &str = "...(truncated)...";

/// How a result is turned into tool-response text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResponseFormat {
    /// Characters kept from the start of each stream (code-judge's
    /// `MAX_STDOUT_ERROR_LENGTH`, 1000).
    pub stream_chars: usize,
    /// When set, the whole text is cut in the middle to this many characters
    /// (verl's `max_tool_response_length` with `truncate_side = "middle"`).
    pub budget_chars: Option<usize>,
}

impl ResponseFormat {
    /// code-judge's 1000 characters per stream and no overall budget.
    pub fn new() -> Self {
        Self {
            stream_chars: 1000,
            budget_chars: None,
        }
    }

    /// The same, with an overall budget in characters.
    pub fn with_budget(budget_chars: usize) -> Self {
        Self {
            budget_chars: Some(budget_chars),
            ..Self::new()
        }
    }
}

impl Default for ResponseFormat {
    fn default() -> Self {
        Self::new()
    }
}

/// The first `n` characters of `text` (Python's `text[:n]`).
pub fn head_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((byte, _)) => &text[..byte],
        None => text,
    }
}

/// The last `n` characters of `text` (Python's `text[-n:]`, with `text[-0:]`
/// being the whole string as in Python).
fn tail_chars(text: &str, n: usize) -> &str {
    if n == 0 {
        return text;
    }
    match text.char_indices().rev().nth(n - 1) {
        Some((byte, _)) => &text[byte..],
        None => text,
    }
}

/// Cuts `text` in the middle when it has more than `budget` characters, as
/// verl does: the first and last `budget / 2` characters around
/// [`TRUNCATION_MARKER`].
pub fn truncate_middle(text: &str, budget: usize) -> String {
    if text.chars().count() <= budget {
        return text.to_string();
    }
    let half = budget / 2;
    // Python's `text[-0:]` is the whole text; verl never hits it with a sane
    // budget, but we keep the arithmetic identical.
    format!(
        "{}{TRUNCATION_MARKER}{}",
        head_chars(text, half),
        tail_chars(text, half)
    )
}

/// The tool-response text for one result: each stream cut to `format.stream_chars`, the text
/// of [`rstar_episode::toolcall::code_judge_text`], then the whole cut to the budget.
///
/// `success` is code-judge's `run_success and success` (exit status zero and,
/// with no expected output, nothing else); `reason` is code-judge's reason
/// (`""`, `worker_timeout`, `internal_error`, …), printed on failure only.
pub fn format_response(
    success: bool,
    reason: &str,
    stdout: &str,
    stderr: &str,
    cost_seconds: f64,
    format: &ResponseFormat,
) -> String {
    let text = rstar_episode::toolcall::code_judge_text(
        success,
        reason,
        head_chars(stdout, format.stream_chars),
        head_chars(stderr, format.stream_chars),
        cost_seconds,
    );
    match format.budget_chars {
        Some(budget) => truncate_middle(&text, budget),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(
        success: bool,
        reason: &str,
        stdout: &str,
        stderr: &str,
        cost: f64,
        format: &ResponseFormat,
        expected: &str,
    ) {
        assert_eq!(
            format_response(success, reason, stdout, stderr, cost, format),
            expected
        );
    }

    #[test]
    fn success_and_failure_table() {
        let f = ResponseFormat::new();
        // Expected strings written out from the reference's f-strings by hand.
        check(
            true,
            "",
            "1\n",
            "",
            0.0123,
            &f,
            "Tool call success\nstdout: 1\n\nexecution time: 0.01s",
        );
        check(
            true,
            "",
            "",
            "",
            0.5,
            &f,
            "Tool call success\nexecution time: 0.50s",
        );
        check(
            true,
            "",
            "a",
            "warn",
            1.0,
            &f,
            "Tool call success\nstdout: a\nstderr: warn\nexecution time: 1.00s",
        );
        check(
            false,
            "",
            "",
            "ZeroDivisionError at line 1: division by zero\n  1/0\n",
            0.031,
            &f,
            "Tool call failure\nreason: \nstderr: ZeroDivisionError at line 1: division by zero\n  1/0\n\nexecution time: 0.03s",
        );
        check(
            false,
            "worker_timeout",
            "partial",
            "",
            4.004,
            &f,
            "Tool call failure\nreason: worker_timeout\nstdout: partial\nexecution time: 4.00s",
        );
    }

    #[test]
    fn seconds_round_like_python() {
        // Python: f"{0.125:.2f}" == "0.12", f"{0.375:.2f}" == "0.38",
        // f"{2.675:.2f}" == "2.67" (binary value below the tie), f"{0.005:.2f}" == "0.01".
        for (x, want) in [
            (0.125, "0.12"),
            (0.375, "0.38"),
            (2.675, "2.67"),
            (0.005, "0.01"),
            (12.0, "12.00"),
        ] {
            let text = format_response(true, "", "", "", x, &ResponseFormat::new());
            assert_eq!(
                text,
                format!("Tool call success\nexecution time: {want}s"),
                "{x}"
            );
        }
    }

    #[test]
    fn streams_are_cut_to_1000_characters() {
        let f = ResponseFormat::new();
        let long: String = "é".repeat(1500);
        let text = format_response(true, "", &long, "", 0.0, &f);
        let stdout_line = text.lines().nth(1).unwrap();
        assert_eq!(stdout_line.chars().count(), "stdout: ".len() + 1000);
    }

    #[test]
    fn middle_truncation_matches_verl() {
        // Python: t = "abcdefghij"; n = 4; t[:2] + "...(truncated)..." + t[-2:]
        assert_eq!(truncate_middle("abcdefghij", 4), "ab...(truncated)...ij");
        assert_eq!(truncate_middle("abcdefghij", 5), "ab...(truncated)...ij");
        assert_eq!(truncate_middle("abcdefghij", 10), "abcdefghij");
        assert_eq!(truncate_middle("ééééé", 2), "é...(truncated)...é");
        let f = ResponseFormat::with_budget(30);
        let text = format_response(true, "", &"x".repeat(100), "", 0.1, &f);
        assert_eq!(text, "Tool call succe...(truncated)...ion time: 0.10s");
    }

    proptest! {
        #[test]
        fn truncation_never_exceeds_budget_plus_marker(s in "\\PC{0,200}", budget in 2usize..100) {
            let out = truncate_middle(&s, budget);
            let n = s.chars().count();
            if n <= budget {
                prop_assert_eq!(out, s);
            } else {
                prop_assert!(out.chars().count() <= budget + TRUNCATION_MARKER.len() + 1);
                prop_assert!(out.contains(TRUNCATION_MARKER));
            }
        }

        #[test]
        fn formatted_text_always_ends_with_the_time(out in "\\PC{0,50}", err in "\\PC{0,50}", ok: bool) {
            let text = format_response(ok, "r", &out, &err, 0.25, &ResponseFormat::new());
            prop_assert!(text.ends_with("execution time: 0.25s"));
            prop_assert_eq!(text.starts_with("Tool call success"), ok);
        }
    }
}
