//! `rstar-analysis`: a run's artefacts in, pictures and tables out.
//!
//! It reads what the trainer and `rstar eval` write (trajectory JSONL with per-token entropies,
//! `metrics.jsonl`, `eval.jsonl`, `config.json`) and turns it into the run report, plots,
//! TensorBoard event files and the token-entropy analysis of the paper's §6. Everything here is
//! plain Rust over serde types: a user who only wants the report of a run, or TensorBoard
//! events from their own trainer's JSONL, builds no tensor library and no async runtime.
//!
//! It is deliberately **not** a trainer, a model or a rollout driver: it never runs a policy,
//! spawns no process and opens no socket. No Burn and no tokio in its tree (a tidy test checks
//! `cargo tree -p rstar-analysis -e normal`). The trainer (`rstar-agent`) depends on it, never
//! the other way round: the records the trainer writes and the report reads
//! ([`records::EvalRow`], [`records::TrajectoryStats`]) are defined here.
//!
//! # Main items
//! - [`report`]: a run's self-contained HTML page ([`report::RunData`], [`report::write`];
//!   `rstar report`).
//! - [`plots`]: a run's RL metrics over steps as SVG charts ([`plots::charts`], [`plots::draw`];
//!   `runs/<name>/plots/*.svg`, `rstar train plot`).
//! - [`plot`]: the SVG writer ([`plot::LineChart`], [`plot::line_chart_svg`]) and the entropy
//!   along one trajectory ([`plot::entropy_svg`]).
//! - [`trajectory`]: one trajectory rendered once for the report (HTML) and `rstar show`
//!   (terminal text): [`trajectory::view`], [`trajectory::html`], [`trajectory::text`].
//! - [`tensorboard`]: TensorBoard event files written by hand ([`tensorboard::EventWriter`],
//!   [`tensorboard::RunLog`], [`tensorboard::convert`]).
//! - [`entropy`]: where the policy hesitates ([`entropy::analyze`]; `rstar analyze entropy`).
//! - [`records`]: the lines of `eval.jsonl` ([`records::EvalRow`]) and the trajectory
//!   statistics inside them and inside `metrics.jsonl` ([`records::TrajectoryStats`]).
//! - [`interval`]: 95% intervals of held-out accuracies ([`interval::Interval::wilson`]) and
//!   of the difference of two ([`interval::Interval::difference`], Newcombe's), which the
//!   trainer's table and the report show.
//! - [`parse_trajectories`]: reads and validates trajectory JSONL, naming the line and field of
//!   the first bad record. Errors are [`Error`].
//!
//! ```
//! use rstar_analysis::plot::{LineChart, Series, line_chart_svg};
//!
//! let chart = LineChart {
//!     series: vec![Series { name: "reward".into(), points: vec![(1.0, 0.2), (2.0, 0.5)] }],
//!     ..LineChart::over_steps("reward per RL step", "RL step", "mean reward", 2.0)
//! };
//! let svg = line_chart_svg(&chart);
//! assert!(svg.starts_with("<svg") && svg.contains(r#"class="series""#));
//! ```
//!
//! # Crate features
//! None. The crate has no optional parts and enables nothing in its dependencies
//! (`rstar-episode`, serde, serde_json, thiserror).
#![warn(missing_docs)]

pub mod entropy;
mod error;
pub mod plot;
pub mod plots;
pub mod report;
pub mod tensorboard;
pub mod trajectory;

use rstar_episode::LineError;
use std::path::Path;

pub use error::Error;
/// The record types and the Wilson interval live in `rstar-episode` (so that the rollout
/// drivers, which write them, need nothing of this crate); re-exported here under the names
/// readers use.
pub use rstar_episode::{interval, records};

use rstar_episode::episode::Trajectory;

/// Parses trajectory JSONL text (blank lines skipped) and checks each record with
/// [`Trajectory::validate`]. Errors are [`Error::Line`] with the 1-based line of `path`;
/// a line cut short (a truncated file) says so.
///
/// ```
/// use rstar_analysis::parse_trajectories;
/// let err = parse_trajectories("{\"id\": \"x\"", "t.jsonl".as_ref()).unwrap_err();
/// assert!(err.to_string().starts_with("t.jsonl:1: truncated line"), "{err}");
/// ```
pub fn parse_trajectories(text: &str, path: &Path) -> Result<Vec<Trajectory>, Error> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |message: String| Error::Line(LineError::new(path.to_path_buf(), i + 1, message));
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
