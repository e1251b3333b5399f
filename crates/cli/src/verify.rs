//! `rstar verify`: scores JSONL responses against integer, LaTeX math or multiple-choice answers with `rstar-verifier`.
//!
//! Input: one JSON object a line (stdin or `--input FILE`) holding a response
//! and an answer field. Output: one JSON verdict a line on stdout, in input
//! order, each carrying its input line number:
//! `{"line":1,"reward":1,"reason":"right","extracted":"42","normalized":"42"}`.
//! A summary (accuracy, counts per reason) goes to stderr.
//!
//! Malformed lines (not UTF-8, bad JSON, a missing or non-string field, a ground truth
//! that is not an integer) are reported on stderr with their line number and
//! skipped; the run goes on. Blank lines are ignored. Exit status: 0 when
//! every line was scored, 2 when some lines were skipped (every other verdict
//! is still written), 1 on an IO error.

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use rayon::prelude::*;
use rstar_agent::verifier::{Mode, Reason, ScoreMode, Verdict, Verifier};
use serde::Serialize;

/// Lines scored in parallel at a time; output is written chunk by chunk, in order.
const CHUNK: usize = 16 * 1024;

/// Arguments of `rstar verify`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// `rstar verify serve`: the verifier as an HTTP reward service (see `verify_serve`).
    #[command(subcommand)]
    pub command: Option<super::verify_serve::VerifyCommand>,
    /// JSONL file to read (default: stdin).
    #[arg(long, short)]
    pub input: Option<PathBuf>,
    /// Field holding the model's response (assistant text only).
    #[arg(long, value_name = "FIELD", default_value = "response")]
    pub response_field: String,
    /// Field holding the ground truth (a JSON string or number): an integer, a LaTeX answer or a
    /// letter, as --mode says.
    #[arg(long, value_name = "FIELD", default_value = "answer")]
    pub answer_field: String,
    /// Compare literal integers only: do not evaluate `2^{10}`, `\frac{84}{2}`, ….
    #[arg(long)]
    pub no_expressions: bool,
    /// How answers are compared: integer (exact integers, the training reward), math (LaTeX
    /// answers: fractions, surds, π, intervals, tuples, sets, matrices, text), choice (a letter
    /// A-J) or auto (each line by its own ground truth, as `verify serve`, `eval` and the Python
    /// API default to).
    #[arg(long, default_value = "integer")]
    pub mode: ScoreMode,
}

/// An output line: the line number, then the verdict's own JSON fields.
#[derive(Serialize)]
struct Line<'a> {
    line: usize,
    #[serde(flatten)]
    verdict: &'a Verdict,
}

/// Scores one input line: the verdict, or why the line is malformed.
fn score(verifier: &Verifier, args: &Args, text: Option<&str>) -> Result<Verdict, String> {
    let text = text.ok_or("the line is not valid UTF-8")?;
    let row: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let field = |name: &str| {
        row.get(name)
            .ok_or_else(|| format!("missing field `{name}`"))
    };
    let response = field(&args.response_field)?
        .as_str()
        .ok_or_else(|| format!("field `{}` is not a string", args.response_field))?;
    let answer = field(&args.answer_field)?;
    let answer = match answer {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => {
            return Err(format!(
                "field `{}` is not a string or a number",
                args.answer_field
            ));
        }
    };
    verifier
        .verify_mode(args.mode.resolve(&answer), response, &answer)
        .map_err(|e| format!("field `{}`: {e}", args.answer_field))
}

/// Runs `rstar verify`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(super::verify_serve::VerifyCommand::Serve(serve)) = args.command {
        return super::verify_serve::run(serve);
    }
    let verifier = Verifier::new().with_expressions(!args.no_expressions);
    let mut input: Box<dyn BufRead> = match &args.input {
        Some(path) => Box::new(std::io::BufReader::with_capacity(
            1 << 20,
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
        )),
        None => Box::new(std::io::BufReader::with_capacity(1 << 20, std::io::stdin())),
    };
    let source = args
        .input
        .as_ref()
        .map_or_else(|| "<stdin>".to_string(), |p| p.display().to_string());
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
    let mut counts = [0usize; Reason::ALL.len()];
    let mut skipped = 0usize;
    let mut line_no = 0usize;
    let mut done = false;
    while !done {
        let mut chunk: Vec<(usize, Option<String>)> = Vec::with_capacity(CHUNK);
        while chunk.len() < CHUNK {
            let mut buf = Vec::new();
            let n = input
                .read_until(b'\n', &mut buf)
                .with_context(|| format!("reading {source} after line {line_no}"))?;
            if n == 0 {
                done = true;
                break;
            }
            line_no += 1;
            match String::from_utf8(buf) {
                Ok(text) if text.trim().is_empty() => {}
                Ok(text) => chunk.push((line_no, Some(text))),
                // Reported in order with the scored lines below.
                Err(_) => chunk.push((line_no, None)),
            }
        }
        let scored: Vec<(usize, Result<Verdict, String>)> = chunk
            .par_iter()
            .with_min_len(256)
            .map(|(n, text)| (*n, score(&verifier, &args, text.as_deref())))
            .collect();
        for (n, result) in scored {
            match result {
                Ok(v) => {
                    counts[Reason::ALL.iter().position(|r| *r == v.reason).unwrap_or(0)] += 1;
                    serde_json::to_writer(
                        &mut out,
                        &Line {
                            line: n,
                            verdict: &v,
                        },
                    )?;
                    out.write_all(b"\n")?;
                }
                Err(msg) => {
                    skipped += 1;
                    eprintln!("{source}:{n}: skipped: {msg}");
                }
            }
        }
    }
    out.flush()?;
    drop(out);
    let scored: usize = counts.iter().sum();
    let right = counts[0];
    // The integer mode's summary line is unchanged; the others name their mode.
    let mode = match args.mode {
        ScoreMode::Fixed(Mode::Integer) => String::new(),
        m => format!(" ({m} mode)"),
    };
    if scored == 0 {
        eprintln!("rstar verify{mode}: nothing scored, {skipped} skipped");
    } else {
        let accuracy = right as f64 / scored as f64;
        eprintln!(
            "rstar verify{mode}: {scored} scored, {skipped} skipped; accuracy {accuracy:.4} ({right}/{scored})"
        );
    }
    let per_reason: Vec<String> = Reason::ALL
        .iter()
        .zip(counts)
        .map(|(r, c)| format!("{r} {c}"))
        .collect();
    eprintln!("  {}", per_reason.join(", "));
    if skipped > 0 {
        // Every valid line was scored and written; the status tells scripts that some were not.
        std::process::exit(2);
    }
    Ok(())
}
