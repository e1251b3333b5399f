//! What one rollout trace looks like to RoC: counts of tool calls by outcome,
//! answer tags and assistant turns, built from structured data or parsed from
//! rollout text in the reference format.

use serde::{Deserialize, Serialize};

const TOOL_RESPONSE_OPEN: &str = "<tool_response>";
const TOOL_RESPONSE_CLOSE: &str = "</tool_response>";
const ANSWER_OPEN: &str = "<answer>";
const ANSWER_CLOSE: &str = "</answer>";
const TURN_OPEN: &str = "<|im_start|>assistant";
const TURN_CLOSE: &str = "<|im_end|>";

/// The structured counts of one rollout trace that RoC's penalties read.
///
/// Two groups of fields exist side by side. The *outcome* counts
/// (`failed_calls`, `timed_out_calls`, `parse_failures`, `assistant_turns`)
/// are what an agent loop knows; the paper's penalties use them. The *text*
/// counts (`error_mentions`, `marked_turns`) reproduce the reference code's
/// heuristics, which look for the substring `error` and for turns framed by
/// `<|im_start|>assistant … <|im_end|>`; [`TraceSummary::from_text`] fills
/// both groups, [`TraceSummary::new`] with the `with_*` methods fills the text
/// counts with the closest structured equivalent (documented on each method).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TraceSummary {
    /// The outcome reward (0/1 in the paper); `> 0` counts as a success.
    pub reward: f64,
    /// Tool calls made (one tool response each, including undecodable calls).
    pub tool_calls: u32,
    /// Calls that ran and failed (non-zero exit, sandbox error).
    pub failed_calls: u32,
    /// Calls that hit the time limit.
    pub timed_out_calls: u32,
    /// Calls whose JSON could not be decoded (`Failed to decode tool call: …`).
    pub parse_failures: u32,
    /// Tool responses whose text contains `error` in any case (the reference heuristic).
    pub error_mentions: u32,
    /// Occurrences of `<answer>`.
    pub answer_open_tags: u32,
    /// Occurrences of `</answer>`.
    pub answer_close_tags: u32,
    /// Non-overlapping `<answer>…</answer>` pairs.
    pub closed_answers: u32,
    /// Assistant turns in the rollout, the first included.
    pub assistant_turns: u32,
    /// Turns framed by `<|im_start|>assistant … <|im_end|>` in the decoded
    /// response; the first turn has no such prefix there (the reference heuristic).
    pub marked_turns: u32,
}

/// How one tool response reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    /// The call ran and succeeded.
    Success,
    /// The call ran and failed.
    Failed,
    /// The call timed out.
    TimedOut,
    /// The call could not be decoded.
    ParseFailure,
}

impl ToolOutcome {
    /// Classifies a tool response's text as code-judge and the agent loop write
    /// it: `Failed to decode tool call: …`, `Tool call failure` with
    /// `reason: worker_timeout`/`queue_timeout` (timeout) or any other reason
    /// (failed), `Error when executing tool: …` (failed), anything else success.
    pub fn classify(text: &str) -> Self {
        let body = text.trim_start();
        if body.starts_with("Failed to decode tool call") {
            Self::ParseFailure
        } else if body.starts_with("Tool call failure") {
            if body.contains("reason: worker_timeout") || body.contains("reason: queue_timeout") {
                Self::TimedOut
            } else {
                Self::Failed
            }
        } else if body.starts_with("Error when executing tool") {
            Self::Failed
        } else {
            Self::Success
        }
    }
}

impl TraceSummary {
    /// A trace with this reward and no tool calls, answers or turns yet.
    pub fn new(reward: f64) -> Self {
        Self {
            reward,
            ..Self::default()
        }
    }

    /// Sets the tool-call counts by outcome; each call is counted in exactly one of them:
    /// - `ok`: calls that ran and succeeded (`Tool call success`);
    /// - `failed`: calls that ran and failed (`Tool call failure`, an exception or a non-zero
    ///   exit; `Error when executing tool`);
    /// - `timed_out`: calls stopped at the time limit (`reason: worker_timeout`/`queue_timeout`);
    /// - `parse_failures`: tool calls that could not be decoded (`Failed to decode tool call`).
    ///
    /// The total, `tool_calls`, is their sum: `with_calls(2, 0, 0, 0)` is two calls, both
    /// successful (`p_err` 0), and `with_calls(1, 1, 1, 0)` three calls of which the paper's
    /// rule counts two as errors. `error_mentions` (the reference's text heuristic) is set to
    /// `failed`: a failing call's stderr names the error type, while code-judge's timeout text
    /// and the parse-failure text contain no `error`.
    ///
    /// ```
    /// use rstar_roc::{PenaltyOptions, TraceSummary, p_err};
    ///
    /// let t = TraceSummary::new(1.0).with_calls(1, 1, 1, 0);
    /// assert_eq!(t.tool_calls, 3);
    /// assert!((p_err(&t, &PenaltyOptions::paper()) - 2.0 / 3.0).abs() < 1e-12);
    /// ```
    pub fn with_calls(mut self, ok: u32, failed: u32, timed_out: u32, parse_failures: u32) -> Self {
        self.tool_calls = ok + failed + timed_out + parse_failures;
        self.failed_calls = failed;
        self.timed_out_calls = timed_out;
        self.parse_failures = parse_failures;
        self.error_mentions = failed;
        self
    }

    /// Sets the answers: `closed` well-formed `<answer>…</answer>` pairs, and
    /// whether an extra opening or closing tag leaves them unbalanced (counted
    /// as one stray `<answer>`).
    pub fn with_answers(mut self, closed: u32, unbalanced: bool) -> Self {
        self.closed_answers = closed;
        self.answer_open_tags = closed + u32::from(unbalanced);
        self.answer_close_tags = closed;
        self
    }

    /// Sets the number of assistant turns; `marked_turns` becomes `turns - 1`,
    /// as in a decoded response whose first turn carries no prefix.
    pub fn with_turns(mut self, turns: u32) -> Self {
        self.assistant_turns = turns;
        self.marked_turns = turns.saturating_sub(1);
        self
    }

    /// Parses a rollout's response text in the reference format (verl's
    /// decoded response: the first assistant turn without its
    /// `<|im_start|>assistant` prefix, tool responses in user turns as
    /// `<tool_response>\n…\n</tool_response>`).
    ///
    /// Blocks are matched as the reference's non-greedy, dot-all regexes
    /// match them (`<tool_response>.*?</tool_response>` and so on, scanning
    /// left to right without overlap).
    pub fn from_text(reward: f64, text: &str) -> Self {
        let mut s = Self::new(reward);
        for block in blocks(text, TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE) {
            s.tool_calls += 1;
            let inner = &block[TOOL_RESPONSE_OPEN.len()..block.len() - TOOL_RESPONSE_CLOSE.len()];
            match ToolOutcome::classify(inner) {
                ToolOutcome::Success => {}
                ToolOutcome::Failed => s.failed_calls += 1,
                ToolOutcome::TimedOut => s.timed_out_calls += 1,
                ToolOutcome::ParseFailure => s.parse_failures += 1,
            }
            // The reference tests `'error' in block.lower()`. No character
            // outside ASCII lower-cases to `e`, `r` or `o`, so an ASCII
            // case-insensitive search gives the same answer without allocating.
            if contains_ignore_ascii_case(block, "error") {
                s.error_mentions += 1;
            }
        }
        s.answer_open_tags = count(text.matches(ANSWER_OPEN).count());
        s.answer_close_tags = count(text.matches(ANSWER_CLOSE).count());
        s.closed_answers = count(blocks(text, ANSWER_OPEN, ANSWER_CLOSE).count());
        s.marked_turns = count(blocks(text, TURN_OPEN, TURN_CLOSE).count());
        let prefixed = count(text.matches(TURN_OPEN).count());
        s.assistant_turns = if text.trim_start().starts_with(TURN_OPEN) {
            prefixed
        } else if text.is_empty() {
            0
        } else {
            prefixed + 1
        };
        s
    }

    /// Whether the trace counts as a success (`reward > 0`, as in the reference).
    pub fn is_success(&self) -> bool {
        self.reward > 0.0
    }

    /// Whether the answer tags are present and balanced: at least one `<answer>`
    /// and one `</answer>`, and as many of each as closed pairs.
    pub fn answers_balanced(&self) -> bool {
        self.answer_open_tags > 0
            && self.answer_close_tags > 0
            && self.answer_open_tags == self.closed_answers
            && self.answer_close_tags == self.closed_answers
    }

    /// The number of answers the reference reports for its metrics: 0 when
    /// either tag is missing, else the closed pairs.
    pub fn reported_answers(&self) -> u32 {
        if self.answer_open_tags == 0 || self.answer_close_tags == 0 {
            0
        } else {
            self.closed_answers
        }
    }
}

fn contains_ignore_ascii_case(haystack: &str, needle: &str) -> bool {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Non-overlapping `open.*?close` matches, left to right, as Python's
/// `re.findall` with `re.DOTALL` finds them for literal delimiters.
fn blocks<'a>(text: &'a str, open: &'a str, close: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let start = pos + text[pos..].find(open)?;
        let after = start + open.len();
        let end = after + text[after..].find(close)? + close.len();
        pos = end;
        Some(&text[start..end])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: TraceSummary) {
        assert_eq!(TraceSummary::from_text(1.0, text), expected, "{text:?}");
    }

    #[test]
    fn parses_counts_from_reference_text() {
        let ok = "<tool_response>\nTool call success\nstdout: 3\nexecution time: 0.01s\n</tool_response>";
        let err = "<tool_response>\nTool call failure\nreason: \nstderr: NameError at line 1\n</tool_response>";
        let to = "<tool_response>\nTool call failure\nreason: worker_timeout\nstdout: Suicide from timeout.\n</tool_response>";
        let parse =
            "<tool_response>\nFailed to decode tool call: Expecting value\n</tool_response>";
        let rel =
            "<tool_response>\nTool call success\nstdout: relative error 1e-9\n</tool_response>";
        let text = format!(
            "<reason>a</reason>{ok}<|im_end|>\n<|im_start|>assistant\n{err}{to}<|im_end|>\n\
             <|im_start|>assistant\n{parse}{rel}<answer>\\boxed{{1}}</answer><|im_end|>"
        );
        check(
            &text,
            TraceSummary {
                reward: 1.0,
                tool_calls: 5,
                failed_calls: 1,
                timed_out_calls: 1,
                parse_failures: 1,
                error_mentions: 2,
                answer_open_tags: 1,
                answer_close_tags: 1,
                closed_answers: 1,
                assistant_turns: 3,
                marked_turns: 2,
            },
        );
    }

    #[test]
    fn unclosed_blocks_are_not_counted() {
        let s = TraceSummary::from_text(0.0, "<tool_response>\nerror <answer>1</answer><answer>2");
        assert_eq!((s.tool_calls, s.error_mentions), (0, 0));
        assert_eq!(
            (s.answer_open_tags, s.answer_close_tags, s.closed_answers),
            (2, 1, 1)
        );
        assert!(!s.answers_balanced());
        assert_eq!((s.assistant_turns, s.marked_turns), (1, 0));
    }

    #[test]
    fn empty_text_has_no_turns() {
        assert_eq!(TraceSummary::from_text(0.0, ""), TraceSummary::new(0.0));
    }

    #[test]
    fn a_leading_prefix_is_the_first_turn() {
        let s = TraceSummary::from_text(0.0, "<|im_start|>assistant\nx<|im_end|>");
        assert_eq!((s.assistant_turns, s.marked_turns), (1, 1));
    }

    #[test]
    fn error_search_matches_lowercase_contains() {
        for text in [
            "ERROR",
            "NameError",
            "eRRoR!",
            "err or",
            "erro",
            "İERROR",
            "ＥＲＲＯＲ",
            "relative error",
        ] {
            let want = text.to_lowercase().contains("error");
            assert_eq!(contains_ignore_ascii_case(text, "error"), want, "{text}");
        }
    }

    #[test]
    fn classify_table() {
        for (text, want) in [
            ("Tool call success\nstdout: 1", ToolOutcome::Success),
            (
                "\nTool call failure\nreason: \nstderr: ZeroDivisionError",
                ToolOutcome::Failed,
            ),
            (
                "Tool call failure\nreason: worker_timeout",
                ToolOutcome::TimedOut,
            ),
            (
                "Tool call failure\nreason: queue_timeout",
                ToolOutcome::TimedOut,
            ),
            (
                "Tool call failure\nreason: internal_error",
                ToolOutcome::Failed,
            ),
            (
                "Failed to decode tool call: bad json",
                ToolOutcome::ParseFailure,
            ),
            ("Error when executing tool: boom", ToolOutcome::Failed),
        ] {
            assert_eq!(ToolOutcome::classify(text), want, "{text:?}");
        }
    }

    #[test]
    fn structured_builders() {
        let s = TraceSummary::new(1.0)
            .with_calls(2, 1, 1, 1)
            .with_answers(2, true)
            .with_turns(4);
        assert_eq!(s.tool_calls, 5);
        assert_eq!(s.error_mentions, 1);
        assert_eq!(
            (s.answer_open_tags, s.answer_close_tags, s.closed_answers),
            (3, 2, 2)
        );
        assert!(!s.answers_balanced());
        assert_eq!(s.marked_turns, 3);
    }
}
