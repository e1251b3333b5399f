//! Rollout dumps as JSONL: one trace per line, so that RoC can down-sample
//! the output of any framework and write back the kept lines untouched.
//!
//! Each line is a JSON object with:
//! - `uid` (string or any JSON value; values are compared by their JSON text,
//!   strings by their content): the group, one per prompt;
//! - `reward` (number, or `true`/`false` for 1/0): `> 0` is a success;
//! - either `response` (string, the rollout text in the reference format,
//!   parsed by [`TraceSummary::from_text`]; `response_text` is read when
//!   `response` is absent) or structured counts:
//!   `tool_calls` (required), `failed_calls`, `timed_out_calls`,
//!   `parse_failures`, `answers` (closed `<answer>…</answer>` pairs),
//!   `unbalanced_answers` (bool), `assistant_turns` (default 1), all optional
//!   but the first and 0/false by default. When `response` is a string it wins.
//!
//! Every other field is ignored and passed through, since kept lines are
//! returned as byte ranges of the input. Blank lines are skipped.

use std::ops::Range;

use serde_json::Value;

use crate::{Error, Result, RocConfig, Selection, TraceSummary, select};

/// A parsed JSONL batch.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonlBatch {
    /// Each trace's group, as text.
    pub uids: Vec<String>,
    /// Each trace's summary.
    pub traces: Vec<TraceSummary>,
    /// Each trace's line in the input, as a byte range including its newline.
    pub lines: Vec<Range<usize>>,
    /// 1-based line numbers of the traces.
    pub line_numbers: Vec<usize>,
}

impl JsonlBatch {
    /// Parses `input`; `source_name` (a path or `<stdin>`) names it in errors.
    ///
    /// # Errors
    /// [`Error::Line`] naming the line and the field for a line that is not a
    /// JSON object, lacks `uid` or `reward`, has a non-numeric or non-finite
    /// reward, or has neither a `response` string nor `tool_calls`.
    pub fn parse(input: &[u8], source_name: &str) -> Result<Self> {
        let (batch, mut errors) = Self::parse_lenient(input, source_name);
        if errors.is_empty() {
            Ok(batch)
        } else {
            Err(errors.swap_remove(0))
        }
    }

    /// Parses `input`, skipping the lines that cannot be used and returning
    /// one [`Error::Line`] for each of them, in line order.
    pub fn parse_lenient(input: &[u8], source_name: &str) -> (Self, Vec<Error>) {
        Self::parse_lenient_keyed(input, source_name, "uid")
    }

    /// [`parse_lenient`](Self::parse_lenient) with the group in the field `group_key` instead
    /// of `uid`.
    pub fn parse_lenient_keyed(
        input: &[u8],
        source_name: &str,
        group_key: &str,
    ) -> (Self, Vec<Error>) {
        Self::parse_lenient_with(input, source_name, |value| record(&value, group_key))
    }

    /// [`parse_lenient`](Self::parse_lenient) with each line's JSON read by `record` into its
    /// group and summary (or why the line cannot be used, without its line number), for
    /// rollout formats of other shapes (`rstar roc` reads rstar's own trajectories so).
    pub fn parse_lenient_with(
        input: &[u8],
        source_name: &str,
        mut record: impl FnMut(Value) -> Result<(String, TraceSummary), String>,
    ) -> (Self, Vec<Error>) {
        let mut batch = Self {
            uids: Vec::new(),
            traces: Vec::new(),
            lines: Vec::new(),
            line_numbers: Vec::new(),
        };
        let mut errors = Vec::new();
        let mut start = 0;
        let mut number = 0;
        while start < input.len() {
            number += 1;
            let end = input[start..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(input.len(), |p| start + p + 1);
            let line = &input[start..end];
            let range = start..end;
            start = end;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let parsed = serde_json::from_slice::<Value>(line)
                .map_err(|e| format!("invalid JSON: {e}"))
                .and_then(&mut record);
            match parsed {
                Ok((uid, trace)) => {
                    batch.uids.push(uid);
                    batch.traces.push(trace);
                    batch.lines.push(range);
                    batch.line_numbers.push(number);
                }
                Err(message) => errors.push(Error::Line {
                    source_name: source_name.to_string(),
                    line: number,
                    message,
                }),
            }
        }
        (batch, errors)
    }
}

impl JsonlBatch {
    /// The kept lines of `input` (the bytes this batch was parsed from), byte
    /// for byte and in input order, each with its own line ending.
    pub fn kept_bytes(&self, input: &[u8], selection: &Selection) -> Vec<u8> {
        let mut out = Vec::new();
        for &i in &selection.kept {
            out.extend_from_slice(&input[self.lines[i].clone()]);
        }
        out
    }
}

/// A line's group: the field `key`, a string as it is, any other JSON value as its JSON text.
///
/// # Errors
/// The field is absent or null (the message names it).
pub fn group_of(value: &Value, key: &str) -> Result<String, String> {
    match value.get(key) {
        None | Some(Value::Null) => Err(format!("missing field `{key}`")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Ok(other.to_string()),
    }
}

fn record(value: &Value, group_key: &str) -> Result<(String, TraceSummary), String> {
    let obj = value.as_object().ok_or("not a JSON object")?;
    let uid = group_of(value, group_key)?;
    let reward = match obj.get("reward") {
        None => return Err("missing field `reward`".into()),
        Some(Value::Bool(b)) => f64::from(u8::from(*b)),
        Some(Value::Number(n)) => n.as_f64().ok_or("field `reward` is not a finite number")?,
        Some(other) => return Err(format!("field `reward` is not a number: {other}")),
    };
    if !reward.is_finite() {
        return Err("field `reward` is not a finite number".into());
    }
    // verl-style dumps call the decoded response `response_text`.
    if let Some(Value::String(text)) = obj.get("response").or_else(|| obj.get("response_text")) {
        return Ok((uid, TraceSummary::from_text(reward, text)));
    }
    let count = |field: &str, default: u32| -> Result<u32, String> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("field `{field}` is not a non-negative integer: {v}")),
        }
    };
    if obj.get("tool_calls").is_none_or(Value::is_null) {
        return Err("neither a string `response` nor structured counts (`tool_calls`, …)".into());
    }
    let calls = count("tool_calls", 0)?;
    let failed = count("failed_calls", 0)?;
    let timed_out = count("timed_out_calls", 0)?;
    let parse = count("parse_failures", 0)?;
    let errors = failed
        .checked_add(timed_out)
        .and_then(|s| s.checked_add(parse))
        .filter(|&s| s <= calls)
        .ok_or_else(|| {
            "`failed_calls` + `timed_out_calls` + `parse_failures` exceed `tool_calls`".to_string()
        })?;
    let unbalanced = match obj.get("unbalanced_answers") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(format!("field `unbalanced_answers` is not a bool: {v}")),
    };
    let trace = TraceSummary::new(reward)
        .with_calls(calls - errors, failed, timed_out, parse)
        .with_answers(count("answers", 0)?, unbalanced)
        .with_turns(count("assistant_turns", 1)?);
    Ok((uid, trace))
}

/// Parses a JSONL batch and down-samples it: the kept traces are
/// `batch.lines[i]` for `i` in `selection.kept`, in input order.
///
/// # Errors
/// Those of [`JsonlBatch::parse`] and [`select`].
pub fn select_jsonl(
    input: &[u8],
    source_name: &str,
    config: &RocConfig,
) -> Result<(JsonlBatch, Selection)> {
    let batch = JsonlBatch::parse(input, source_name)?;
    let selection = select(&batch.uids, &batch.traces, config)?;
    Ok((batch, selection))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(input: &str) -> String {
        JsonlBatch::parse(input.as_bytes(), "x.jsonl")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_lines_name_line_and_field() {
        let ok = r#"{"uid": "a", "reward": 1, "response": ""}"#;
        assert_eq!(
            parse_err(&format!("{ok}\n\nnot json\n"))
                .split(": ")
                .take(2)
                .collect::<Vec<_>>(),
            ["x.jsonl:3", "invalid JSON"]
        );
        assert_eq!(
            parse_err(r#"{"reward": 1}"#),
            "x.jsonl:1: missing field `uid`"
        );
        assert_eq!(
            parse_err(r#"{"uid": 1}"#),
            "x.jsonl:1: missing field `reward`"
        );
        assert!(parse_err(r#"{"uid": 1, "reward": "1"}"#).contains("`reward` is not a number"));
        assert!(parse_err(r#"{"uid": 1, "reward": 1}"#).contains("neither a string `response`"));
        assert!(
            parse_err(r#"{"uid": 1, "reward": 1, "tool_calls": -1}"#)
                .contains("`tool_calls` is not a non-negative integer")
        );
        assert!(
            parse_err(r#"{"uid": 1, "reward": 1, "tool_calls": 1, "failed_calls": 2}"#)
                .contains("exceed `tool_calls`")
        );
        assert_eq!(parse_err("[1]"), "x.jsonl:1: not a JSON object");
    }

    #[test]
    fn lenient_parse_reports_every_bad_line() {
        let input = "{\"uid\": 1, \"reward\": 1, \"response\": \"\"}\nbad\n{}\n";
        let (batch, errors) = JsonlBatch::parse_lenient(input.as_bytes(), "f");
        assert_eq!(batch.line_numbers, [1]);
        let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert!(lines[0].starts_with("f:2: invalid JSON"), "{lines:?}");
        assert_eq!(lines[1], "f:3: missing field `uid`");
    }

    #[test]
    fn parses_text_and_structured_lines() {
        let input = "{\"uid\": 7, \"reward\": true, \"tool_calls\": 3, \"failed_calls\": 1, \"answers\": 1, \"assistant_turns\": 4, \"extra\": [1]}\r\n\
                     {\"uid\": \"7\", \"reward\": 0.0, \"response\": \"<answer>1</answer>\"}";
        let b = JsonlBatch::parse(input.as_bytes(), "<stdin>").unwrap();
        assert_eq!(b.uids, ["7", "7"]);
        assert_eq!(
            b.traces[0],
            TraceSummary::new(1.0)
                .with_calls(2, 1, 0, 0)
                .with_answers(1, false)
                .with_turns(4)
        );
        assert_eq!(
            b.traces[1],
            TraceSummary::from_text(0.0, "<answer>1</answer>")
        );
        assert_eq!(
            &input.as_bytes()[b.lines[1].clone()],
            input.lines().nth(1).unwrap().as_bytes()
        );
        assert_eq!(b.line_numbers, [1, 2]);
    }
}
