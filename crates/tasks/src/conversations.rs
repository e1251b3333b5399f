//! Conversation files for `rstar sft`: JSONL (one row a line) or parquet, each row an OpenAI /
//! HF chat example (`messages`, optionally `tools`), read into
//! [`Conversation`](rstar_episode::chat::Conversation)s.
//!
//! Every row comes back with where it was (`file:line` for JSONL, 1-based; `file: row N` for
//! parquet, 0-based as pyarrow counts) and either the conversation or what is wrong with it,
//! naming the field. A bad row does not stop the file: the caller counts and reports them, and
//! chooses whether to stop, drop or truncate. Only a file that cannot be read at all is an
//! [`Error`].
//!
//! ```no_run
//! use rstar_tasks::conversations::read_conversations;
//! use std::path::Path;
//!
//! let rows = read_conversations(Path::new("function_calling.jsonl"))?;
//! for bad in rows.iter().filter(|r| r.conversation.is_err()) {
//!     eprintln!("{}: {}", bad.at, bad.conversation.as_ref().unwrap_err());
//! }
//! # Ok::<(), rstar_tasks::Error>(())
//! ```

use rstar_episode::IoError;
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

#[cfg(feature = "parquet")]
use parquet::file::reader::{FileReader, SerializedFileReader};
use rstar_episode::chat::{Conversation, Json};

use crate::Error;

/// Where a row is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowAt {
    /// The file.
    pub path: PathBuf,
    /// The line (JSONL) or row (parquet).
    pub index: RowIndex,
}

/// A JSONL line or a parquet row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowIndex {
    /// 1-based line of a JSONL file.
    Line(usize),
    /// 0-based row of a parquet file.
    Row(usize),
}

impl fmt::Display for RowAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            RowIndex::Line(l) => write!(f, "{}:{l}", self.path.display()),
            RowIndex::Row(r) => write!(f, "{}: row {r}", self.path.display()),
        }
    }
}

/// One row of a conversation file.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationRow {
    /// Where it is.
    pub at: RowAt,
    /// The conversation, or what is wrong with the row (naming the field).
    pub conversation: Result<Conversation, String>,
}

/// Reads every row of a conversation file (`.jsonl`/`.ndjson` or `.parquet`); blank lines are
/// skipped. A JSONL line that is not UTF-8 is a bad row (its line named), not an error of the
/// whole file.
///
/// # Errors
/// [`Error::DatasetFile`] for an unknown extension, an unreadable parquet file or a file with
/// no rows; [`Error::Io`] when it cannot be read.
pub fn read_conversations(path: &Path) -> Result<Vec<ConversationRow>, Error> {
    read_conversations_limited(path, usize::MAX)
}

/// [`read_conversations`], with rows over `max_row_bytes` bytes (a JSONL line, or a parquet
/// row's fields as JSON) made bad rows before they are parsed: a 200 MB line is skipped as it
/// is read, never held, parsed or tokenized whole.
///
/// # Errors
/// As [`read_conversations`].
pub fn read_conversations_limited(
    path: &Path,
    max_row_bytes: usize,
) -> Result<Vec<ConversationRow>, Error> {
    let ext = path.extension().and_then(|e| e.to_str());
    let rows = match ext {
        Some("jsonl" | "ndjson") => read_jsonl(path, max_row_bytes)?,
        #[cfg(feature = "parquet")]
        Some("parquet") => read_parquet(path, max_row_bytes)?,
        #[cfg(not(feature = "parquet"))]
        Some("parquet") => {
            return Err(file_error(
                path,
                "parquet files need rstar-tasks' `parquet` feature",
            ));
        }
        _ => {
            return Err(file_error(
                path,
                "unknown extension: expected .jsonl, .ndjson or .parquet",
            ));
        }
    };
    if rows.is_empty() {
        return Err(file_error(path, "has no rows"));
    }
    Ok(rows)
}

fn file_error(path: &Path, message: &str) -> Error {
    Error::DatasetFile {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// One line of a JSONL reader: its bytes (without the newline), or its length when it was
/// over the limit and skipped; `None` at the end of the file.
fn next_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<Result<(), usize>>> {
    buf.clear();
    let mut skipped = 0usize;
    let mut any = false;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(any.then_some(if skipped > 0 { Err(skipped) } else { Ok(()) }));
        }
        any = true;
        let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if skipped > 0 || buf.len() + part.len() > max {
            skipped += buf.len() + part.len();
            buf.clear();
        } else {
            buf.extend_from_slice(part);
        }
        let used = done.unwrap_or(chunk.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(if skipped > 0 { Err(skipped) } else { Ok(()) }));
        }
    }
}

fn read_jsonl(path: &Path, max_row_bytes: usize) -> Result<Vec<ConversationRow>, Error> {
    let io = |source| Error::Io(IoError::new(path.to_path_buf(), source));
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut rows = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0;
    while let Some(read) = next_line(&mut reader, &mut buf, max_row_bytes).map_err(io)? {
        line_no += 1;
        let conversation = match read {
            Err(len) => Err(format!(
                "{len} bytes, over the limit of {max_row_bytes} bytes a row (longer than the context can hold): not parsed"
            )),
            Ok(()) => match std::str::from_utf8(&buf) {
                Err(e) => Err(format!(
                    "invalid UTF-8 at byte {} of the line",
                    e.valid_up_to()
                )),
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => Json::parse(line.trim_end_matches('\r'))
                    .map_err(|e| format!("invalid json: {e}"))
                    .and_then(|row| Conversation::from_json(&row)),
            },
        };
        rows.push(ConversationRow {
            at: RowAt {
                path: path.to_path_buf(),
                index: RowIndex::Line(line_no),
            },
            conversation,
        });
    }
    Ok(rows)
}

#[cfg(feature = "parquet")]
fn read_parquet(path: &Path, max_row_bytes: usize) -> Result<Vec<ConversationRow>, Error> {
    let file = std::fs::File::open(path)
        .map_err(|source| Error::Io(IoError::new(path.to_path_buf(), source)))?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| file_error(path, &format!("not a readable parquet file: {e}")))?;
    let iter = reader
        .get_row_iter(None)
        .map_err(|e| file_error(path, &format!("parquet: {e}")))?;
    Ok(iter
        .enumerate()
        .map(|(i, row)| ConversationRow {
            at: RowAt {
                path: path.to_path_buf(),
                index: RowIndex::Row(i),
            },
            conversation: row.map_err(|e| format!("parquet: {e}")).and_then(|row| {
                let json = Json::Object(
                    row.get_column_iter()
                        .map(|(name, field)| (name.clone(), crate::dataset::json(field)))
                        .collect(),
                );
                if max_row_bytes < usize::MAX {
                    let len = serde_json::Value::from(json.clone()).to_string().len();
                    if len > max_row_bytes {
                        return Err(format!(
                            "{len} bytes, over the limit of {max_row_bytes} bytes a row (longer than the context can hold): not parsed"
                        ));
                    }
                }
                Conversation::from_json(&json)
            }),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_rows_come_back_with_their_lines_and_problems() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}"#,
                "\n\n",
                r#"{"messages": [{"role": "robot", "content": "x"}]}"#,
                "\n",
                "not json\n"
            ),
        )
        .unwrap();
        let rows = read_conversations(&path).unwrap();
        assert_eq!(rows.len(), 3);
        assert!(rows[0].conversation.is_ok());
        assert_eq!(rows[1].at.to_string(), format!("{}:3", path.display()));
        assert!(
            rows[1]
                .conversation
                .as_ref()
                .unwrap_err()
                .contains("messages[0].role: unknown role \"robot\"")
        );
        assert_eq!(rows[2].at.index, RowIndex::Line(4));
        assert!(
            rows[2]
                .conversation
                .as_ref()
                .unwrap_err()
                .starts_with("invalid json")
        );
    }

    #[test]
    fn issue_42_invalid_utf8_and_oversized_rows_are_bad_rows_at_their_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        let good = r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}"#;
        let mut bytes = Vec::new();
        bytes.extend_from_slice(good.as_bytes());
        bytes.extend_from_slice(b"\n{\"messages\": \"\xff\xfe\"}\n");
        // 300 000 bytes in one line, over a limit of 100 000.
        let long = format!(
            r#"{{"messages": [{{"role": "user", "content": "{}"}}, {{"role": "assistant", "content": "ok"}}]}}"#,
            "x".repeat(300_000)
        );
        bytes.extend_from_slice(long.as_bytes());
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(good.as_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let rows = read_conversations_limited(&path, 100_000).unwrap();
        assert_eq!(rows.len(), 4);
        let err = |i: usize| rows[i].conversation.as_ref().unwrap_err().clone();
        assert!(rows[0].conversation.is_ok());
        assert_eq!(rows[1].at.to_string(), format!("{}:2", path.display()));
        assert!(err(1).contains("invalid UTF-8 at byte 14"), "{}", err(1));
        assert_eq!(rows[2].at.index, RowIndex::Line(3));
        assert!(
            err(2).contains(&format!("{} bytes", long.len() + 1)) && err(2).contains("not parsed"),
            "{}",
            err(2)
        );
        // The line after the skipped one is read whole (a CRLF file reads as well).
        assert_eq!(rows[3].at.index, RowIndex::Line(4));
        assert!(rows[3].conversation.is_ok());
        // Without a limit the long row parses.
        let rows = read_conversations(&path).unwrap();
        assert!(rows[2].conversation.is_ok(), "{:?}", rows[2].conversation);
        assert!(rows[1].conversation.is_err());
    }

    #[test]
    fn unreadable_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("c.csv");
        std::fs::write(&csv, "a,b\n").unwrap();
        assert!(
            read_conversations(&csv)
                .unwrap_err()
                .to_string()
                .contains("unknown extension")
        );
        let empty = dir.path().join("e.jsonl");
        std::fs::write(&empty, "\n").unwrap();
        assert!(
            read_conversations(&empty)
                .unwrap_err()
                .to_string()
                .contains("has no rows")
        );
        assert!(read_conversations(&dir.path().join("missing.jsonl")).is_err());
    }
}
