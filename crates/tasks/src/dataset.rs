//! Problem files for `rstar eval --data` and `rstar train --data`: JSONL in the common field layouts and verl's parquet.
//!
//! [`load_prompts`] reads a file into [`Prompt`]s (`id`, `problem`, `answer`). The format comes from the
//! extension (`.jsonl`/`.ndjson`: one JSON object a line; `.parquet`: verl's layout, read with the `parquet`
//! crate's record API), the fields from the first record: the first of [`PROBLEM_FIELDS`],
//! [`ANSWER_FIELDS`] and [`ID_FIELDS`] that it has is then required of every record. A dotted name
//! (`reward_model.ground_truth`) looks inside nested objects. [`load_prompts_with`] takes
//! [`DatasetOptions`] to name the fields, cap the count or keep DAPO's instruction wrapper.
//!
//! Values are cleaned so that the result is what the agent and `rstar_verifier::verify` expect:
//! - the problem: a string, or a list of chat messages (`[{role, content}]`, verl) whose last `user`
//!   message is taken; surrounding white space is trimmed and DAPO's instruction wrapper ([`DAPO_PREFIX`],
//!   [`DAPO_SUFFIX`]) is removed unless [`DatasetOptions::strip_instruction`] is off;
//! - the answer: a string or a number; GSM8K's `… #### 1,234` becomes `1234`, a text with a `\boxed{…}`
//!   (a MATH `solution`) becomes the content of its last box, anything else is kept as written (MATH-500's
//!   LaTeX answers stay LaTeX: the integer-only verifier reports them as
//!   `rstar_verifier::Error::GroundTruth` when scored);
//! - the id: a string or an integer; without an id field it is `<file stem>-<row>` with the 0-based
//!   record number (`dapo_math_17k_verl_format-17`). Ids must be unique: rollouts are grouped by them.
//!
//! Errors are [`Error`]s that name the file, the 1-based line (JSONL) or the 0-based row (parquet,
//! as pyarrow and pandas count) and the field.
//!
//! ```no_run
//! use rstar_tasks::dataset::{DatasetOptions, load_prompts, load_prompts_with};
//! use std::path::Path;
//!
//! let aime = load_prompts(Path::new("../shared/datasets/aime24.jsonl"))?;
//! assert_eq!(aime[0].answer, "204");
//! let opts = DatasetOptions { limit: Some(100), ..DatasetOptions::default() };
//! let dapo = load_prompts_with(Path::new("dapo_math_17k_verl_format.parquet"), &opts)?;
//! assert_eq!(dapo.len(), 100);
//! # Ok::<(), rstar_tasks::Error>(())
//! ```

use rstar_episode::{IoError, LineError};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

#[cfg(feature = "parquet")]
use parquet::file::reader::{FileReader, SerializedFileReader};
#[cfg(feature = "parquet")]
use parquet::record::Field;
#[cfg(feature = "parquet")]
use rstar_episode::chat::Json;
#[cfg(feature = "parquet")]
use serde_json::Number;
use serde_json::Value;

use crate::Error;
use rstar_episode::Prompt;

/// Problem fields tried in order when [`DatasetOptions::problem_field`] is not set.
pub const PROBLEM_FIELDS: &[&str] = &["problem", "question", "prompt", "query"];
/// Answer fields tried in order when [`DatasetOptions::answer_field`] is not set.
pub const ANSWER_FIELDS: &[&str] = &[
    "answer",
    "ground_truth",
    "reward_model.ground_truth",
    "final_answer",
    "solution",
];
/// Id fields tried in order when [`DatasetOptions::id_field`] is not set; none present means
/// `<file stem>-<row>`.
pub const ID_FIELDS: &[&str] = &["id", "unique_id", "idx", "problem_id"];

/// The instruction DAPO-Math-17k puts before each problem (removed by default).
pub const DAPO_PREFIX: &str = "Solve the following math problem step by step. The last line of your \
     response should be of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.";
/// The reminder DAPO-Math-17k puts after each problem (removed by default).
pub const DAPO_SUFFIX: &str = "Remember to put your answer on its own line after \"Answer:\".";

/// How [`load_prompts_with`] reads a file. `Default` is what [`load_prompts`] uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetOptions {
    /// The problem field (dotted for nested objects); `None` detects one of [`PROBLEM_FIELDS`].
    pub problem_field: Option<String>,
    /// The answer field; `None` detects one of [`ANSWER_FIELDS`].
    pub answer_field: Option<String>,
    /// The id field; `None` detects one of [`ID_FIELDS`] or numbers the rows.
    pub id_field: Option<String>,
    /// Read at most this many records (the rest of the file is not read, nor checked).
    pub limit: Option<usize>,
    /// Remove DAPO's instruction wrapper so the problem text is bare (default `true`).
    pub strip_instruction: bool,
}

impl DatasetOptions {
    /// Detected fields, no limit, DAPO's wrapper removed.
    pub fn new() -> Self {
        Self {
            problem_field: None,
            answer_field: None,
            id_field: None,
            limit: None,
            strip_instruction: true,
        }
    }
}

impl Default for DatasetOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads the problems of a JSONL or verl parquet file with the detected fields.
///
/// # Errors
/// See [`load_prompts_with`].
pub fn load_prompts(path: &Path) -> Result<Vec<Prompt>, Error> {
    load_prompts_with(path, &DatasetOptions::new())
}

/// Reads the problems of a JSONL or verl parquet file.
///
/// # Errors
/// [`Error::DatasetFile`] for an unknown extension, an empty file or an unreadable parquet
/// footer; [`Error::Io`] when the file cannot be opened; [`Error::Dataset`] (JSONL line)
/// or [`Error::DatasetRow`] (parquet row) for a record that is not JSON, lacks a field, has
/// one of the wrong type or empty, or repeats an id.
pub fn load_prompts_with(path: &Path, options: &DatasetOptions) -> Result<Vec<Prompt>, Error> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let mut reader = Reader::new(path, options);
    match ext.as_deref() {
        Some("jsonl" | "ndjson") => read_jsonl(path, &mut reader)?,
        #[cfg(feature = "parquet")]
        Some("parquet") => read_parquet(path, &mut reader)?,
        #[cfg(not(feature = "parquet"))]
        Some("parquet") => {
            return Err(file_error(
                path,
                "parquet files need rstar-tasks' `parquet` feature".to_string(),
            ));
        }
        _ => {
            return Err(file_error(
                path,
                format!(
                    "unknown extension {}: expected .jsonl, .ndjson or .parquet",
                    ext.map_or("(none)".to_string(), |e| format!("`.{e}`"))
                ),
            ));
        }
    }
    if reader.prompts.is_empty() && options.limit != Some(0) {
        return Err(file_error(path, "the file holds no records".to_string()));
    }
    Ok(reader.prompts)
}

fn file_error(path: &Path, message: String) -> Error {
    Error::DatasetFile {
        path: path.to_path_buf(),
        message,
    }
}

/// Where a record is, for error messages.
#[derive(Debug, Clone, Copy)]
enum At {
    /// 1-based JSONL line.
    Line(usize),
    /// 0-based parquet row.
    #[cfg_attr(not(feature = "parquet"), allow(dead_code))]
    // reason: rows exist only in parquet files
    Row(usize),
}

impl At {
    fn error(self, path: &Path, message: String) -> Error {
        match self {
            At::Line(line) => Error::Dataset(LineError::new(path.to_path_buf(), line, message)),
            At::Row(row) => Error::DatasetRow {
                path: path.to_path_buf(),
                row,
                message,
            },
        }
    }
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Line(l) => write!(f, "line {l}"),
            At::Row(r) => write!(f, "row {r}"),
        }
    }
}

/// The fields chosen for a file (from the options or its first record).
#[derive(Debug)]
struct Fields {
    problem: String,
    answer: String,
    id: Option<String>,
}

/// Turns records into prompts, one at a time, in file order.
#[derive(Debug)]
struct Reader<'a> {
    path: PathBuf,
    stem: String,
    options: &'a DatasetOptions,
    fields: Option<Fields>,
    prompts: Vec<Prompt>,
    seen: HashMap<String, At>,
}

impl<'a> Reader<'a> {
    fn new(path: &Path, options: &'a DatasetOptions) -> Self {
        Self {
            path: path.to_path_buf(),
            stem: path
                .file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
            options,
            fields: None,
            prompts: Vec::new(),
            seen: HashMap::new(),
        }
    }

    /// Whether the limit is reached (no more records are wanted).
    fn full(&self) -> bool {
        self.options.limit.is_some_and(|n| self.prompts.len() >= n)
    }

    /// Adds the record at `at` (its 0-based record number is the count read so far).
    fn push(&mut self, at: At, record: &Value) -> Result<(), Error> {
        let bad = |message: String| at.error(&self.path, message);
        if !record.is_object() {
            return Err(bad("the record is not a json object".to_string()));
        }
        let fields = match &self.fields {
            Some(fields) => fields,
            None => self
                .fields
                .insert(detect(self.options, record).map_err(&bad)?),
        };
        let problem = problem_text(&fields.problem, get(record, &fields.problem)).map_err(&bad)?;
        let problem = if self.options.strip_instruction {
            strip_instruction(&problem)
        } else {
            problem.trim()
        };
        if problem.is_empty() {
            return Err(bad(format!("field `{}` is empty", fields.problem)));
        }
        let answer = answer_text(&fields.answer, get(record, &fields.answer)).map_err(&bad)?;
        let id = match &fields.id {
            Some(field) => id_text(field, get(record, field)).map_err(&bad)?,
            None => format!("{}-{}", self.stem, self.prompts.len()),
        };
        if let Some(first) = self.seen.insert(id.clone(), at) {
            return Err(bad(format!("duplicate id `{id}` (first at {first})")));
        }
        self.prompts.push(Prompt::new(id, problem, answer));
        Ok(())
    }
}

/// The fields to read: the options' names, else the first candidates the record has.
fn detect(options: &DatasetOptions, record: &Value) -> Result<Fields, String> {
    let pick = |given: &Option<String>, candidates: &[&str], what: &str| {
        match given {
        Some(name) => Ok(name.clone()),
        None => candidates
            .iter()
            .find(|c| get(record, c).is_some())
            .map(|c| (*c).to_string())
            .ok_or_else(|| {
                format!(
                    "no {what} field: the first record has none of {} (name one with the `{what}_field` option)",
                    candidates
                        .iter()
                        .map(|c| format!("`{c}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }),
    }
    };
    Ok(Fields {
        problem: pick(&options.problem_field, PROBLEM_FIELDS, "problem")?,
        answer: pick(&options.answer_field, ANSWER_FIELDS, "answer")?,
        id: match &options.id_field {
            Some(name) => Some(name.clone()),
            None => ID_FIELDS
                .iter()
                .find(|c| get(record, c).is_some())
                .map(|c| (*c).to_string()),
        },
    })
}

/// The value at a field name: the key itself, else a dotted path into nested objects. `null`
/// counts as absent.
fn get<'v>(record: &'v Value, field: &str) -> Option<&'v Value> {
    let found = match record.get(field) {
        Some(v) => Some(v),
        None if field.contains('.') => field
            .split('.')
            .try_fold(record, |v, key| v.as_object()?.get(key)),
        None => None,
    };
    found.filter(|v| !v.is_null())
}

/// The JSON type of a value, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The problem: a string, or the last `user` message of a chat.
fn problem_text(field: &str, value: Option<&Value>) -> Result<String, String> {
    match value {
        None => Err(format!("missing field `{field}`")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(messages)) => {
            let mut last_user = None;
            for (i, m) in messages.iter().enumerate() {
                let role = m.get("role").and_then(Value::as_str);
                let content = m.get("content").and_then(Value::as_str);
                match (role, content) {
                    (Some("user"), Some(c)) => last_user = Some(c),
                    (Some(_), Some(_)) => {}
                    _ => {
                        return Err(format!(
                            "field `{field}`: message {i} is not {{\"role\": string, \"content\": string}}"
                        ));
                    }
                }
            }
            last_user
                .map(str::to_string)
                .ok_or_else(|| format!("field `{field}`: no message with role `user`"))
        }
        Some(other) => Err(format!(
            "field `{field}` must be a string or a list of chat messages, not {}",
            kind(other)
        )),
    }
}

/// The bare problem: trimmed, without DAPO's instruction and reminder.
fn strip_instruction(text: &str) -> &str {
    let text = text.trim();
    let text = text.strip_prefix(DAPO_PREFIX).unwrap_or(text).trim();
    text.strip_suffix(DAPO_SUFFIX).unwrap_or(text).trim()
}

/// The ground truth as the verifier takes it (see the module docs).
fn answer_text(field: &str, value: Option<&Value>) -> Result<String, String> {
    let text = match value {
        None => return Err(format!("missing field `{field}`")),
        Some(Value::String(s)) => s.trim(),
        Some(Value::Number(n)) => return Ok(n.to_string()),
        Some(other) => {
            return Err(format!(
                "field `{field}` must be a string or a number, not {}",
                kind(other)
            ));
        }
    };
    let answer = if let Some((_, last)) = text.rsplit_once("####") {
        // GSM8K: the reasoning, then `#### 1,234`.
        last.trim().replace(',', "")
    } else if let Some(boxed) = last_boxed(text) {
        boxed.trim().to_string()
    } else {
        text.to_string()
    };
    if answer.is_empty() {
        return Err(format!("field `{field}` is empty"));
    }
    Ok(answer)
}

/// The content of the last `\boxed{…}` (balanced braces), if any is closed.
fn last_boxed(text: &str) -> Option<&str> {
    let start = text.rfind("\\boxed{")? + "\\boxed{".len();
    let mut depth = 1usize;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..start + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// An id: a non-empty string or an integer.
fn id_text(field: &str, value: Option<&Value>) -> Result<String, String> {
    match value {
        None => Err(format!("missing field `{field}`")),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Some(Value::String(_)) => Err(format!("field `{field}` is empty")),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        Some(other) => Err(format!(
            "field `{field}` must be a string or an integer, not {}",
            if other.is_number() {
                "a fraction"
            } else {
                kind(other)
            }
        )),
    }
}

fn read_jsonl(path: &Path, reader: &mut Reader<'_>) -> Result<(), Error> {
    let io = |source| Error::Io(IoError::new(path.to_path_buf(), source));
    let file = std::fs::File::open(path).map_err(io)?;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        if reader.full() {
            break;
        }
        let at = At::Line(i + 1);
        let line = line.map_err(|e| at.error(path, format!("cannot read the line: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Value = serde_json::from_str(&line)
            .map_err(|e| at.error(path, format!("invalid json: {e}")))?;
        reader.push(at, &record)?;
    }
    Ok(())
}

#[cfg(feature = "parquet")]
fn read_parquet(path: &Path, reader: &mut Reader<'_>) -> Result<(), Error> {
    let file = std::fs::File::open(path)
        .map_err(|source| Error::Io(IoError::new(path.to_path_buf(), source)))?;
    let parquet = SerializedFileReader::new(file)
        .map_err(|e| file_error(path, format!("not a readable parquet file: {e}")))?;
    let rows = parquet
        .get_row_iter(None)
        .map_err(|e| file_error(path, format!("parquet: {e}")))?;
    for (i, row) in rows.enumerate() {
        if reader.full() {
            break;
        }
        let at = At::Row(i);
        let row = row.map_err(|e| at.error(path, format!("parquet: {e}")))?;
        let record = Value::from(Json::Object(
            row.get_column_iter()
                .map(|(name, field)| (name.clone(), json(field)))
                .collect(),
        ));
        reader.push(at, &record)?;
    }
    Ok(())
}

/// A parquet value as JSON (objects in schema order), so that both formats share one field
/// reader, and conversation files keep the order of their tool schemas' keys.
#[cfg(feature = "parquet")]
pub(crate) fn json(field: &Field) -> Json {
    let number = |n: Option<Number>| n.map_or(Json::Null, Json::Number);
    match field {
        Field::Null => Json::Null,
        Field::Bool(b) => Json::Bool(*b),
        Field::Byte(v) => Json::Number((*v).into()),
        Field::Short(v) => Json::Number((*v).into()),
        Field::Int(v) => Json::Number((*v).into()),
        Field::Long(v) => Json::Number((*v).into()),
        Field::UByte(v) => Json::Number((*v).into()),
        Field::UShort(v) => Json::Number((*v).into()),
        Field::UInt(v) => Json::Number((*v).into()),
        Field::ULong(v) => Json::Number((*v).into()),
        Field::Float(v) => number(Number::from_f64(f64::from(*v))),
        Field::Double(v) => number(Number::from_f64(*v)),
        Field::Str(s) => Json::String(s.clone()),
        Field::Bytes(b) => match std::str::from_utf8(b.data()) {
            Ok(s) => Json::String(s.to_string()),
            Err(_) => Json::Array(b.data().iter().map(|&x| Json::Number(x.into())).collect()),
        },
        Field::Group(row) => Json::Object(
            row.get_column_iter()
                .map(|(name, f)| (name.clone(), json(f)))
                .collect(),
        ),
        Field::ListInternal(list) => Json::Array(list.elements().iter().map(json).collect()),
        Field::MapInternal(map) => Json::Object(
            map.entries()
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Field::Str(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (key, json(v))
                })
                .collect(),
        ),
        // Half floats, decimals, dates and times never hold a problem, an answer or an id;
        // their display form keeps error messages readable.
        other => Json::String(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_cleaned_for_the_verifier() {
        let check = |raw: Value, want: &str| {
            assert_eq!(answer_text("answer", Some(&raw)).unwrap(), want, "{raw}");
        };
        check(
            Value::from("Natalia sold 48/2 = 24 clips.\n#### 1,234"),
            "1234",
        );
        check(Value::from(" 204 "), "204");
        check(Value::from(42), "42");
        check(
            Value::from("So $x = \\boxed{\\frac{1}{2}}$ and then \\boxed{\\dfrac{14}{3}}."),
            "\\dfrac{14}{3}",
        );
        check(
            Value::from("\\left( 3, \\frac{\\pi}{2} \\right)"),
            "\\left( 3, \\frac{\\pi}{2} \\right)",
        );
        // An unclosed box is not an answer: the text is kept whole.
        check(Value::from("\\boxed{3"), "\\boxed{3");
        assert!(answer_text("answer", Some(&Value::from("  "))).is_err());
        assert!(answer_text("answer", Some(&Value::from("#### "))).is_err());
    }

    #[test]
    fn dapo_wrapper_is_removed_exactly() {
        let wrapped = format!("{DAPO_PREFIX}\n\nWhat is $1+1$?\n\n{DAPO_SUFFIX}");
        assert_eq!(strip_instruction(&wrapped), "What is $1+1$?");
        // A problem that merely starts like the instruction is left alone.
        let own = "Solve the following math problem step by step: $x+1=2$.";
        assert_eq!(strip_instruction(own), own);
    }

    #[test]
    fn dotted_fields_and_nulls() {
        let v: Value = serde_json::json!({"a.b": 1, "a": {"b": 2, "c": null}, "d": null});
        assert_eq!(get(&v, "a.b"), Some(&Value::from(1)));
        assert_eq!(
            get(&serde_json::json!({"a": {"b": 2}}), "a.b"),
            Some(&Value::from(2))
        );
        assert_eq!(get(&v, "a.c"), None);
        assert_eq!(get(&v, "d"), None);
        assert_eq!(get(&v, "a.b.c"), None);
    }

    #[test]
    fn chat_prompts_take_the_last_user_message() {
        let chat = serde_json::json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "?"},
            {"role": "user", "content": "second"}
        ]);
        assert_eq!(problem_text("prompt", Some(&chat)).unwrap(), "second");
        let no_user = serde_json::json!([{"role": "system", "content": "x"}]);
        assert!(
            problem_text("prompt", Some(&no_user))
                .unwrap_err()
                .contains("no message with role `user`")
        );
        let broken = serde_json::json!([{"role": "user"}]);
        assert!(
            problem_text("prompt", Some(&broken))
                .unwrap_err()
                .contains("message 0")
        );
    }
}
