//! The per-trace penalties `p_err`, `p_format` and their sum `p_total`.

use serde::{Deserialize, Serialize};

use crate::TraceSummary;

/// Which tool responses count as errors in `p_err`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCounting {
    /// Failed calls, timeouts and undecodable calls (the paper's "tool errors").
    Outcomes,
    /// Tool responses whose text contains `error` in any case: the reference
    /// code's heuristic, which misses timeouts and undecodable calls and counts
    /// ordinary output such as `relative error`.
    Substring,
}

/// Which assistant turns divide the surplus answers in `p_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TurnCounting {
    /// Every assistant turn.
    All,
    /// Only turns framed by `<|im_start|>assistant … <|im_end|>` in the
    /// decoded response, so the first turn is not counted and a trace with one
    /// turn gets `p_format` 1: the reference code's heuristic.
    Marked,
}

/// Which penalties make up `p_total`, and how they count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PenaltyOptions {
    /// Add `p_err` to `p_total` (the reference's `roc_error_ratio`).
    pub error_ratio: bool,
    /// Add `p_format` to `p_total` (the reference's `roc_answer_format`).
    pub answer_format: bool,
    /// How errors are counted.
    pub errors: ErrorCounting,
    /// How turns are counted.
    pub turns: TurnCounting,
}

impl PenaltyOptions {
    /// The paper's penalties (the default): both enabled, a timeout or an
    /// undecodable call counts as an error, every turn counts.
    pub fn paper() -> Self {
        Self {
            error_ratio: true,
            answer_format: true,
            errors: ErrorCounting::Outcomes,
            turns: TurnCounting::All,
        }
    }

    /// The reference code's text heuristics, reproduced exactly: the substring
    /// `error` marks an error, the first turn is not counted.
    pub fn reference() -> Self {
        Self {
            errors: ErrorCounting::Substring,
            turns: TurnCounting::Marked,
            ..Self::paper()
        }
    }
}

impl Default for PenaltyOptions {
    fn default() -> Self {
        Self::paper()
    }
}

/// The penalties of one trace.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Penalty {
    /// Tool-error rate: errors / calls, 0.5 with no call.
    pub p_err: f64,
    /// Answer-format penalty: 1 with no or unbalanced answer tags (or no
    /// counted turn), else `min(1, (answers - 1) / turns)`.
    pub p_format: f64,
    /// The enabled penalties summed.
    pub p_total: f64,
}

/// The number of errors `p_err` counts under `options`.
pub fn error_count(trace: &TraceSummary, options: &PenaltyOptions) -> u32 {
    match options.errors {
        ErrorCounting::Outcomes => {
            trace.failed_calls + trace.timed_out_calls + trace.parse_failures
        }
        ErrorCounting::Substring => trace.error_mentions,
    }
}

/// `p_err`: the share of tool calls that erred, 0.5 when there is no call.
pub fn p_err(trace: &TraceSummary, options: &PenaltyOptions) -> f64 {
    if trace.tool_calls == 0 {
        0.5
    } else {
        f64::from(error_count(trace, options)) / f64::from(trace.tool_calls)
    }
}

/// `p_format`: 1 with missing or unbalanced answer tags or no counted turn,
/// else `min(1, (closed answers - 1) / turns)`.
pub fn p_format(trace: &TraceSummary, options: &PenaltyOptions) -> f64 {
    if !trace.answers_balanced() {
        return 1.0;
    }
    let turns = match options.turns {
        TurnCounting::All => trace.assistant_turns,
        TurnCounting::Marked => trace.marked_turns,
    };
    if turns == 0 {
        return 1.0;
    }
    ((f64::from(trace.closed_answers) - 1.0) / f64::from(turns)).min(1.0)
}

/// All three penalties of a trace. `p_total` is summed in the reference's
/// order (`0 + p_err + p_format`) so that ties compare exactly as there.
pub fn penalty(trace: &TraceSummary, options: &PenaltyOptions) -> Penalty {
    let p_err = p_err(trace, options);
    let p_format = p_format(trace, options);
    let mut p_total = 0.0;
    if options.error_ratio {
        p_total += p_err;
    }
    if options.answer_format {
        p_total += p_format;
    }
    Penalty {
        p_err,
        p_format,
        p_total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(ok: u32, failed: u32, timed_out: u32, parse: u32) -> TraceSummary {
        TraceSummary::new(1.0)
            .with_calls(ok, failed, timed_out, parse)
            .with_answers(1, false)
            .with_turns(3)
    }

    #[test]
    fn p_err_table() {
        let paper = PenaltyOptions::paper();
        let reference = PenaltyOptions::reference();
        // (trace, paper p_err, reference p_err), written out by hand.
        let cases = [
            (calls(0, 0, 0, 0), 0.5, 0.5),
            (calls(4, 0, 0, 0), 0.0, 0.0),
            (calls(3, 1, 0, 0), 0.25, 0.25),
            (calls(1, 0, 1, 0), 0.5, 0.0),
            (calls(1, 0, 0, 1), 0.5, 0.0),
            (calls(0, 1, 1, 1), 1.0, 1.0 / 3.0),
            (calls(0, 2, 0, 0), 1.0, 1.0),
        ];
        for (trace, want_paper, want_ref) in cases {
            assert_eq!(p_err(&trace, &paper), want_paper, "{trace:?}");
            assert_eq!(p_err(&trace, &reference), want_ref, "{trace:?}");
        }
        // The substring heuristic counts ordinary output mentioning an error.
        let mut noisy = calls(2, 0, 0, 0);
        noisy.error_mentions = 1;
        assert_eq!(p_err(&noisy, &paper), 0.0);
        assert_eq!(p_err(&noisy, &reference), 0.5);
    }

    #[test]
    fn p_format_table() {
        let paper = PenaltyOptions::paper();
        let reference = PenaltyOptions::reference();
        let t = |closed, unbalanced, turns| {
            TraceSummary::new(1.0)
                .with_answers(closed, unbalanced)
                .with_turns(turns)
        };
        // (trace, paper p_format, reference p_format), written out by hand.
        let cases = [
            (t(0, false, 3), 1.0, 1.0), // no answer
            (t(0, true, 3), 1.0, 1.0),  // only an opening tag
            (t(1, true, 3), 1.0, 1.0),  // unbalanced
            (t(1, false, 1), 0.0, 1.0), // one-shot answer: reference counts no turn
            (t(1, false, 3), 0.0, 0.0), // one answer
            (t(2, false, 4), 0.25, 1.0 / 3.0),
            (t(3, false, 2), 1.0, 1.0), // capped at 1
            (t(2, false, 0), 1.0, 1.0), // no turn at all
        ];
        for (trace, want_paper, want_ref) in cases {
            assert_eq!(p_format(&trace, &paper), want_paper, "{trace:?}");
            assert_eq!(p_format(&trace, &reference), want_ref, "{trace:?}");
        }
    }

    #[test]
    fn p_total_sums_enabled_penalties() {
        let trace = TraceSummary::new(1.0)
            .with_calls(1, 1, 0, 0)
            .with_answers(2, false)
            .with_turns(4);
        let all = penalty(&trace, &PenaltyOptions::paper());
        assert_eq!((all.p_err, all.p_format, all.p_total), (0.5, 0.25, 0.75));
        let only_err = PenaltyOptions {
            answer_format: false,
            ..PenaltyOptions::paper()
        };
        assert_eq!(penalty(&trace, &only_err).p_total, 0.5);
        let none = PenaltyOptions {
            error_ratio: false,
            answer_format: false,
            ..PenaltyOptions::paper()
        };
        assert_eq!(penalty(&trace, &none).p_total, 0.0);
    }
}
