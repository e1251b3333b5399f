//! Analyses of recorded trajectories (pure: text in, reports and SVG out; the CLI does the IO).
//!
//! - [`entropy`]: where the policy hesitates. The top-q highest-entropy assistant tokens, split
//!   into ordinary reasoning, the first tokens after a tool response, and tool-call code
//!   (`rstar analyze entropy`, see `docs/analysis.md`).
//! - [`plot`]: entropy along one trajectory as a hand-written SVG, tool responses shaded.
//! - [`tensorboard`]: TensorBoard event files of a run, written by hand (TFRecord framing,
//!   CRC32C, the `Event`/`Summary` protos), live from the trainer or from a run's JSONL.
//! - [`report`]: a run's self-contained HTML report (`rstar report`).
//! - [`parse_trajectories`]: reads and validates trajectory JSONL, naming the line and field of
//!   the first bad record.

pub mod entropy;
pub mod plot;
pub mod report;
pub mod tensorboard;

use std::path::Path;

use crate::episode::Trajectory;
use crate::error::AgentError;

/// Parses trajectory JSONL text (blank lines skipped) and checks each record with
/// [`Trajectory::validate`]. Errors are [`AgentError::Dataset`] with the 1-based line of `path`;
/// a line cut short (a truncated file) says so.
///
/// ```
/// use rstar_agent::analysis::parse_trajectories;
/// let err = parse_trajectories("{\"id\": \"x\"", "t.jsonl".as_ref()).unwrap_err();
/// assert!(err.to_string().starts_with("t.jsonl:1: truncated line"), "{err}");
/// ```
pub fn parse_trajectories(text: &str, path: &Path) -> Result<Vec<Trajectory>, AgentError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |message: String| AgentError::Dataset {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        let t: Trajectory = serde_json::from_str(line).map_err(|e| {
            if e.is_eof() {
                at(format!("truncated line ({e})"))
            } else {
                at(e.to_string())
            }
        })?;
        t.validate().map_err(|e| at(e.to_string()))?;
        out.push(t);
    }
    Ok(out)
}
