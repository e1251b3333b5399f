//! TensorBoard event files of a run (`runs/<name>/tb/`), written by hand: TFRecord framing
//! with masked CRC32C and the few `Event`/`Summary` protobuf messages TensorBoard reads.
//!
//! - [`EventWriter`]: one `events.out.tfevents.*` file; scalars as `simple_value`, text as a
//!   rank-0 string tensor with the `text` plugin's metadata. Every call is flushed.
//! - [`RunLog`]: the mapping of a run's JSONL lines (`sft_metrics.jsonl`, `metrics.jsonl`,
//!   `eval.jsonl`) to verl-like tags ([`rl_scalars`], [`sft_scalars`], [`eval_scalars`]) and of
//!   trajectories to Markdown text ([`trajectory_markdown`]). The trainer writes through it
//!   while it runs; [`convert`] (`rstar train tensorboard RUN_DIR`) writes the same events from
//!   the files of a finished or killed run.
//!
//! On resume the trainer calls [`RunLog::start`] again: the run's earlier event files are
//! removed and the JSONL lines kept by the resume are written again, so each tag has each step
//! once (the text of RL rollouts from before the resume is not in the JSONL and is lost).
//!
//! The formats, for the reader of this file: a TFRecord is `u64 length (LE) · u32
//! masked_crc32c(length bytes) · data · u32 masked_crc32c(data)`, with
//! `masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8`. The messages (field numbers from
//! TensorFlow's `event.proto`, `summary.proto`, `tensor.proto`, `tensor_shape.proto`):
//! `Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5 }`,
//! `Summary { repeated Value value = 1 }`, `Value { string tag = 1; float simple_value = 2;
//! TensorProto tensor = 8; SummaryMetadata metadata = 9 }`, `SummaryMetadata { PluginData
//! plugin_data = 1 }`, `PluginData { string plugin_name = 1; bytes content = 2 }`,
//! `TensorProto { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2;
//! repeated bytes string_val = 8 }`.

use rstar_episode::{IoError, LineError};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::Error;
use rstar_episode::episode::{Role, Trajectory};

/// The file name suffix of the event files we write (what [`RunLog::start`] removes).
pub const SUFFIX: &str = ".rstar";

/// CRC-32C (Castagnoli, reflected polynomial `0x82F63B78`), bitwise over a 256-entry table.
pub fn crc32c(data: &[u8]) -> u32 {
    const fn table() -> [u32; 256] {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    }
    const TABLE: [u32; 256] = table();
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// TFRecord's masked CRC-32C.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let c = crc32c(data);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord: length, its masked CRC, the data, its masked CRC.
pub fn tfrecord(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    out
}

/// Protobuf wire encoding of the few field kinds the messages use.
mod proto {
    pub fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
        varint(out, (u64::from(field) << 3) | u64::from(wire));
    }
    pub fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
        key(out, field, 0);
        varint(out, v);
    }
    pub fn double(out: &mut Vec<u8>, field: u32, v: f64) {
        key(out, field, 1);
        out.extend_from_slice(&v.to_le_bytes());
    }
    pub fn float(out: &mut Vec<u8>, field: u32, v: f32) {
        key(out, field, 5);
        out.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(out: &mut Vec<u8>, field: u32, v: &[u8]) {
        key(out, field, 2);
        varint(out, v.len() as u64);
        out.extend_from_slice(v);
    }
}

/// An `Event` with a wall time, a step and either a file version or one summary value.
fn event(wall_time: f64, step: i64, body: EventBody<'_>) -> Vec<u8> {
    let mut e = Vec::new();
    proto::double(&mut e, 1, wall_time);
    // int64 is encoded as the two's-complement u64.
    proto::uint(&mut e, 2, step as u64);
    match body {
        EventBody::FileVersion(v) => proto::bytes(&mut e, 3, v.as_bytes()),
        EventBody::Value(value) => {
            let mut summary = Vec::new();
            proto::bytes(&mut summary, 1, &value);
            proto::bytes(&mut e, 5, &summary);
        }
    }
    e
}

enum EventBody<'a> {
    FileVersion(&'a str),
    Value(Vec<u8>),
}

/// A `Summary.Value` holding a scalar.
fn scalar_value(tag: &str, value: f32) -> Vec<u8> {
    let mut v = Vec::new();
    proto::bytes(&mut v, 1, tag.as_bytes());
    proto::float(&mut v, 2, value);
    v
}

/// A `Summary.Value` holding a rank-0 string tensor for the `text` plugin.
fn text_value(tag: &str, text: &str) -> Vec<u8> {
    let mut tensor = Vec::new();
    proto::uint(&mut tensor, 1, 7); // DT_STRING
    proto::bytes(&mut tensor, 2, &[]); // a scalar: a shape without dimensions
    proto::bytes(&mut tensor, 8, text.as_bytes());
    let mut plugin = Vec::new();
    proto::bytes(&mut plugin, 1, b"text");
    let mut metadata = Vec::new();
    proto::bytes(&mut metadata, 1, &plugin);
    let mut v = Vec::new();
    proto::bytes(&mut v, 1, tag.as_bytes());
    proto::bytes(&mut v, 8, &tensor);
    proto::bytes(&mut v, 9, &metadata);
    v
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io(IoError::new(path.to_path_buf(), source))
}

/// One TensorBoard event file, flushed after every event.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    file: File,
}

impl EventWriter {
    /// Creates `dir` when missing and a new event file in it,
    /// `events.out.tfevents.<unix seconds>.<pid>.<n>.rstar` (TensorBoard reads every file whose
    /// name contains `tfevents`, in name order), starting with the `brain.Event:2` version
    /// record.
    ///
    /// # Errors
    /// IO errors naming the directory or file.
    pub fn create(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let secs = now() as u64;
        let pid = std::process::id();
        let mut n = 0;
        let (path, file) = loop {
            let path = dir.join(format!("events.out.tfevents.{secs:010}.{pid}.{n}{SUFFIX}"));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => break (path, file),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(io_err(&path)(e)),
            }
        };
        let mut w = EventWriter { path, file };
        w.write(&event(now(), 0, EventBody::FileVersion("brain.Event:2")))?;
        Ok(w)
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, event: &[u8]) -> Result<(), Error> {
        self.file
            .write_all(&tfrecord(event))
            .and_then(|()| self.file.flush())
            .map_err(io_err(&self.path))
    }

    /// A scalar (stored as a 32-bit float, TensorBoard's `simple_value`).
    ///
    /// # Errors
    /// IO errors naming the file.
    pub fn scalar(&mut self, tag: &str, step: i64, value: f64) -> Result<(), Error> {
        self.write(&event(
            now(),
            step,
            EventBody::Value(scalar_value(tag, value as f32)),
        ))
    }

    /// A text (Markdown, shown by TensorBoard's Text tab).
    ///
    /// # Errors
    /// IO errors naming the file.
    pub fn text(&mut self, tag: &str, step: i64, text: &str) -> Result<(), Error> {
        self.write(&event(now(), step, EventBody::Value(text_value(tag, text))))
    }
}

/// The tag of a statistic of [`crate::records::TrajectoryStats`] below a prefix.
fn stats_tag(prefix: &str, field: &str) -> Option<String> {
    let name = match field {
        "accuracy" => "rewards/mean",
        "response_len" => "response_length/mean",
        "truncation_rate" => "response_length/clip_ratio",
        "tool_calls" => "tool/calls_per_trace",
        "tool_error_rate" => "tool/error_rate",
        "tool_error_rate_success" => "tool/error_rate_in_successes",
        "answered" => "response/answered_ratio",
        "count" => "count",
        _ => return None,
    };
    Some(format!("{prefix}{name}"))
}

/// The tag of a numeric leaf of a `metrics.jsonl` line (its dotted path): verl's names where
/// verl has one (`critic/rewards/mean`, `actor/entropy`, `actor/pg_clipfrac`,
/// `response_length/mean`, `timing_s/gen`, …), ours for the rest (`tool/*`, `roc/*`,
/// `kept/*`, `curriculum/stage`), `rstar/<path>` for a field this table does not know.
pub fn rl_tag(path: &str) -> String {
    let known = match path {
        "all.accuracy" => Some("critic/rewards/mean".to_string()),
        "all.response_len" => Some("response_length/mean".to_string()),
        "all.truncation_rate" => Some("response_length/clip_ratio".to_string()),
        "all.count" => Some("rollout/count".to_string()),
        "clip_frac" => Some("actor/pg_clipfrac".to_string()),
        "ppo_kl" => Some("actor/ppo_kl".to_string()),
        "entropy" => Some("actor/entropy".to_string()),
        "pg_loss" => Some("actor/pg_loss".to_string()),
        "grad_norm" => Some("actor/grad_norm".to_string()),
        "updates" => Some("actor/updates".to_string()),
        "time_rollout" => Some("timing_s/gen".to_string()),
        "time_tools" => Some("timing_s/tools".to_string()),
        "time_update" => Some("timing_s/update_actor".to_string()),
        "time_step" => Some("timing_s/step".to_string()),
        "rollout_tokens_per_sec" => Some("perf/throughput".to_string()),
        "stage" => Some("curriculum/stage".to_string()),
        "roc" => Some("roc/enabled".to_string()),
        "prompts" => Some("data/prompts".to_string()),
        "rollouts" => Some("data/rollouts".to_string()),
        "equal_reward_groups" => Some("roc/equal_reward_groups".to_string()),
        "rollout/logprob_diff_max" | "rollout/logprob_diff_mean" => Some(path.to_string()),
        _ => None,
    };
    if let Some(tag) = known {
        return tag;
    }
    if let Some(tag) = path.strip_prefix("all.").and_then(|f| stats_tag("", f)) {
        return tag;
    }
    if let Some(tag) = path
        .strip_prefix("kept.")
        .and_then(|f| stats_tag("kept/", f))
    {
        return tag;
    }
    if let Some(name) = path.strip_prefix("roc_metrics.") {
        return format!("roc/{name}");
    }
    // The rollout correction's metrics carry verl's own tags (`rollout_corr/kl`, …).
    if let Some(name) = path.strip_prefix("rollout_corr.") {
        return name.to_string();
    }
    if let Some(name) = path.strip_prefix("tool_latency.") {
        return format!("tool/latency/{name}");
    }
    // Asynchronous RL (`rl.max_staleness`): `async/staleness/1`, `async/dropped_groups`, ….
    if let Some(name) = path.strip_prefix("asynchronous.") {
        return format!("async/{}", name.replace('.', "/"));
    }
    format!("rstar/{}", path.replace('.', "/"))
}

/// The tag of a numeric leaf of an `sft_metrics.jsonl` line.
pub fn sft_tag(path: &str) -> String {
    match path {
        "secs" => "timing_s/sft_step".to_string(),
        other => format!("sft/{}", other.replace('.', "/")),
    }
}

/// The tag of a numeric leaf of an `eval.jsonl` line (`greedy.*` and `sampled.*`, the avg@k
/// evaluation): `val/greedy/rewards/mean`, `val/sampled/tool/error_rate`, ….
pub fn eval_tag(path: &str) -> String {
    for (prefix, group) in [("greedy.", "val/greedy/"), ("sampled.", "val/sampled/")] {
        if let Some(field) = path.strip_prefix(prefix) {
            return stats_tag(group, field)
                .unwrap_or_else(|| format!("{group}{}", field.replace('.', "/")));
        }
    }
    format!("val/{}", path.replace('.', "/"))
}

/// The numeric (and boolean, as 0/1) leaves of a JSON object with their dotted paths, in
/// key order, except the keys in `skip`.
pub fn numeric_leaves(v: &Value, skip: &[&str]) -> Vec<(String, f64)> {
    fn walk(v: &Value, path: &str, out: &mut Vec<(String, f64)>) {
        match v {
            Value::Number(n) => {
                if let Some(x) = n.as_f64() {
                    out.push((path.to_string(), x));
                }
            }
            Value::Bool(b) => out.push((path.to_string(), f64::from(u8::from(*b)))),
            Value::Object(map) => {
                for (k, v) in map {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(v, &p, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Value::Object(map) = v {
        for (k, v) in map.iter().filter(|(k, _)| !skip.contains(&k.as_str())) {
            walk(v, k, &mut out);
        }
    }
    out
}

/// The step and `(tag, value)` scalars of a `metrics.jsonl` line; `None` without a `step`.
pub fn rl_scalars(line: &Value) -> Option<(i64, Vec<(String, f64)>)> {
    let step = line.get("step")?.as_i64()?;
    let scalars = numeric_leaves(line, &["step"])
        .into_iter()
        .map(|(p, x)| (rl_tag(&p), x))
        .collect();
    Some((step, scalars))
}

/// The step and scalars of an `sft_metrics.jsonl` line; `None` without a `step`.
pub fn sft_scalars(line: &Value) -> Option<(i64, Vec<(String, f64)>)> {
    let step = line.get("step")?.as_i64()?;
    let scalars = numeric_leaves(line, &["step"])
        .into_iter()
        .map(|(p, x)| (sft_tag(&p), x))
        .collect();
    Some((step, scalars))
}

/// The step (`rl_steps`, 0 after SFT) and scalars of an `eval.jsonl` line; `None` without
/// `rl_steps`.
pub fn eval_scalars(line: &Value) -> Option<(i64, Vec<(String, f64)>)> {
    let step = line.get("rl_steps")?.as_i64()?;
    let scalars = numeric_leaves(line, &["rl_steps"])
        .into_iter()
        .map(|(p, x)| (eval_tag(&p), x))
        .collect();
    Some((step, scalars))
}

/// Characters of a trajectory's text kept in its Markdown summary.
const TEXT_LIMIT: usize = 6000;

/// A Markdown summary of a trajectory for TensorBoard's Text tab: a header line (id, reward,
/// stop reason, tool calls and errors, tokens), then every turn as an indented code block (so
/// model text cannot form markup; TensorBoard sanitises the HTML it renders besides).
pub fn trajectory_markdown(t: &Trajectory) -> String {
    let reward = t
        .reward
        .map_or_else(|| "unscored".to_string(), |r| r.to_string());
    let mut s = format!(
        "**{}** sample {} · reward {reward} · answer {} · stop {} · {} tool calls ({} errors) · {} tokens\n\n",
        md_inline(if t.id.is_empty() { "(no id)" } else { &t.id }),
        t.sample,
        md_inline(t.answer.as_deref().unwrap_or("none")),
        t.stop.as_str(),
        t.tool_calls.len(),
        t.tool_errors(),
        t.response_ids.len()
    );
    let mut budget = TEXT_LIMIT;
    for turn in &t.turns {
        let who = match turn.role {
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        s.push_str(&format!("*{who}:*\n\n"));
        let text: String = turn.text.chars().take(budget).collect();
        budget = budget.saturating_sub(text.chars().count());
        for line in text.lines() {
            s.push_str("    ");
            s.push_str(line);
            s.push('\n');
        }
        s.push('\n');
        if budget == 0 {
            s.push_str("*(cut)*\n");
            break;
        }
    }
    s
}

/// Text for inline Markdown: backslash-escapes the characters that form markup.
fn md_inline(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\`*_{}[]()#+-.!<>|~".contains(c) {
            out.push('\\');
        }
        if c == '\n' {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// Up to `n` trajectories worth showing: rewarded ones and failures alternately, those with
/// tool calls first.
pub fn pick_samples(trajectories: &[Trajectory], n: usize) -> Vec<&Trajectory> {
    let by_calls = |ok: bool| {
        let mut v: Vec<&Trajectory> = trajectories
            .iter()
            .filter(|t| (t.reward.unwrap_or(0.0) > 0.0) == ok)
            .collect();
        v.sort_by_key(|t| t.tool_calls.is_empty());
        v
    };
    let (good, bad) = (by_calls(true), by_calls(false));
    let mut out = Vec::new();
    let (mut g, mut b) = (good.into_iter(), bad.into_iter());
    while out.len() < n {
        let before = out.len();
        out.extend(g.next());
        if out.len() < n {
            out.extend(b.next());
        }
        if out.len() == before {
            break;
        }
    }
    out
}

/// Which JSONL file a line comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// `sft_metrics.jsonl`.
    Sft,
    /// `metrics.jsonl`.
    Rl,
    /// `eval.jsonl`.
    Eval,
}

impl LineKind {
    /// The file name in a run directory.
    pub fn file(self) -> &'static str {
        match self {
            LineKind::Sft => "sft_metrics.jsonl",
            LineKind::Rl => "metrics.jsonl",
            LineKind::Eval => "eval.jsonl",
        }
    }
}

/// Trajectories of an RL step logged as text.
pub const ROLLOUT_SAMPLES: usize = 2;

/// What [`RunLog`] wrote: events by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Scalar events.
    pub scalars: usize,
    /// Text events.
    pub texts: usize,
}

/// A run's TensorBoard log: turns JSONL lines and trajectories into events of one file.
#[derive(Debug)]
pub struct RunLog {
    writer: EventWriter,
    counts: Counts,
    evals: Vec<String>,
}

impl RunLog {
    /// Removes the event files a previous writer left in `dir` (the files ending in
    /// [`SUFFIX`]), starts a new one, and writes the lines of the run's JSONL files in `run` as
    /// they are now (nothing for a new run; the kept lines on resume). Texts: the curriculum's
    /// decisions and the evaluation table.
    ///
    /// # Errors
    /// IO errors naming the file; a malformed line names its file and line.
    pub fn start(dir: &Path, run: &Path) -> Result<Self, Error> {
        if dir.is_dir() {
            for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
                let path = entry.map_err(io_err(dir))?.path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if name.starts_with("events.out.tfevents.") && name.ends_with(SUFFIX) {
                    std::fs::remove_file(&path).map_err(io_err(&path))?;
                }
            }
        }
        let mut log = RunLog {
            writer: EventWriter::create(dir)?,
            counts: Counts::default(),
            evals: Vec::new(),
        };
        if let Some(text) = lora_text(run) {
            log.text("run/lora", 0, &text)?;
        }
        for kind in [LineKind::Sft, LineKind::Rl, LineKind::Eval] {
            let path = run.join(kind.file());
            if !path.exists() {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let v: Value = serde_json::from_str(line)
                    .map_err(|e| Error::Line(LineError::new(path.clone(), i + 1, e.to_string())))?;
                log.line(kind, &v).map_err(|e| match e {
                    Error::Io { .. } => e,
                    other => Error::Line(LineError::new(path.clone(), i + 1, other.to_string())),
                })?;
            }
        }
        Ok(log)
    }

    /// The event file.
    pub fn path(&self) -> &Path {
        self.writer.path()
    }

    /// What was written so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    fn scalars(&mut self, step: i64, scalars: &[(String, f64)]) -> Result<(), Error> {
        for (tag, x) in scalars {
            self.writer.scalar(tag, step, *x)?;
            self.counts.scalars += 1;
        }
        Ok(())
    }

    fn text(&mut self, tag: &str, step: i64, text: &str) -> Result<(), Error> {
        self.writer.text(tag, step, text)?;
        self.counts.texts += 1;
        Ok(())
    }

    /// Writes the events of one JSONL line: its scalars; for `metrics.jsonl` the curriculum's
    /// decision as text when it is not `stay`; for `eval.jsonl` the evaluation table so far.
    ///
    /// # Errors
    /// IO errors naming the file; [`Error::NoStep`] for a line without its step.
    pub fn line(&mut self, kind: LineKind, v: &Value) -> Result<(), Error> {
        let parsed = match kind {
            LineKind::Sft => sft_scalars(v),
            LineKind::Rl => rl_scalars(v),
            LineKind::Eval => eval_scalars(v),
        };
        let Some((step, scalars)) = parsed else {
            return Err(Error::NoStep {
                file: kind.file(),
                field: if kind == LineKind::Eval {
                    "rl_steps"
                } else {
                    "step"
                },
            });
        };
        self.scalars(step, &scalars)?;
        match kind {
            LineKind::Rl => {
                let decision = v.get("decision").and_then(Value::as_str).unwrap_or("");
                if !decision.is_empty() && decision != "stay" {
                    let stage = v.get("stage_name").and_then(Value::as_str).unwrap_or("?");
                    let text = format!(
                        "step {step}: stage {} → {}",
                        md_inline(stage),
                        md_inline(decision)
                    );
                    self.text("curriculum/decision", step, &text)?;
                }
            }
            LineKind::Eval => {
                self.evals.push(eval_row_markdown(v));
                let table = format!(
                    "| phase | RL steps | avg@k | greedy | tool calls | tool error rate | in successes | truncated |\n|---|---|---|---|---|---|---|---|\n{}",
                    self.evals.join("")
                );
                self.text("val/table", step, &table)?;
            }
            LineKind::Sft => {}
        }
        Ok(())
    }

    /// Writes up to `n` of `trajectories` ([`pick_samples`]) as one Markdown text under `tag`.
    ///
    /// # Errors
    /// IO errors naming the file.
    pub fn samples(
        &mut self,
        tag: &str,
        step: i64,
        trajectories: &[Trajectory],
        n: usize,
    ) -> Result<(), Error> {
        let picked = pick_samples(trajectories, n);
        if picked.is_empty() {
            return Ok(());
        }
        let text = picked
            .iter()
            .map(|t| trajectory_markdown(t))
            .collect::<Vec<_>>()
            .join("\n---\n\n");
        self.text(tag, step, &text)
    }
}

/// What a LoRA run trains, from its `config.json` (`sft.lora`, `rl.lora`): `rl: LoRA rank 16
/// (alpha 32) on q_proj, …`, a line a phase; `None` for full fine-tuning or without the file.
pub fn lora_text(run: &Path) -> Option<String> {
    let text = std::fs::read_to_string(run.join("config.json")).ok()?;
    lora_text_of(&serde_json::from_str(&text).ok()?)
}

/// [`lora_text`] of a run's config.
pub fn lora_text_of(config: &Value) -> Option<String> {
    let lines: Vec<String> = ["sft", "rl"]
        .into_iter()
        .filter_map(|phase| {
            let lora = config.get(phase)?.get("lora")?;
            let targets: Vec<&str> = lora
                .get("targets")?
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            Some(format!(
                "{phase}: LoRA rank {} (alpha {}{}) on {}",
                lora.get("rank")?,
                lora.get("alpha")?.as_f64()?,
                if lora.get("use_rslora").and_then(Value::as_bool) == Some(true) {
                    ", rsLoRA"
                } else {
                    ""
                },
                targets.join(", ")
            ))
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n\n"))
}

/// A row of the evaluation table (Markdown).
fn eval_row_markdown(v: &Value) -> String {
    let num = |p: &str| {
        p.split('.')
            .try_fold(v, |v, k| v.get(k))
            .and_then(Value::as_f64)
    };
    let pct = |p: &str| num(p).map_or_else(|| "-".to_string(), |x| format!("{:.1}%", 100.0 * x));
    let tool = if v.get("sampled").is_some_and(|s| !s.is_null()) {
        "sampled"
    } else {
        "greedy"
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
        md_inline(v.get("phase").and_then(Value::as_str).unwrap_or("?")),
        num("rl_steps").map_or_else(|| "-".to_string(), |x| x.to_string()),
        pct("sampled.accuracy"),
        pct("greedy.accuracy"),
        num(&format!("{tool}.tool_calls")).map_or_else(|| "-".to_string(), |x| format!("{x:.2}")),
        pct(&format!("{tool}.tool_error_rate")),
        pct(&format!("{tool}.tool_error_rate_success")),
        pct(&format!("{tool}.truncation_rate")),
    )
}

/// Writes TensorBoard events for the run in `run` into `dir` (`run/tb` by default in the
/// CLI): every line of its JSONL files as [`RunLog::start`] does, and the trajectories of
/// `samples.jsonl` (the final evaluation's, when the run finished) as text at the last
/// evaluation's step. Returns the event file and what it holds.
///
/// # Errors
/// [`Error::NotARun`] when `run` holds none of the files; IO errors naming the file;
/// malformed lines name their file and line.
pub fn convert(run: &Path, dir: &Path) -> Result<(PathBuf, Counts), Error> {
    let any = [LineKind::Sft, LineKind::Rl, LineKind::Eval]
        .iter()
        .any(|k| run.join(k.file()).exists());
    if !any {
        return Err(Error::NotARun {
            path: run.to_path_buf(),
        });
    }
    let mut log = RunLog::start(dir, run)?;
    let samples = run.join("samples.jsonl");
    if samples.exists() {
        let text = std::fs::read_to_string(&samples).map_err(io_err(&samples))?;
        let trajectories = crate::parse_trajectories(&text, &samples)?;
        let step = last_eval_step(run).unwrap_or(0);
        log.samples("val/samples", step, &trajectories, 4)?;
    }
    Ok((log.path().to_path_buf(), log.counts()))
}

/// The `rl_steps` of the last line of `run/eval.jsonl`.
fn last_eval_step(run: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(run.join("eval.jsonl")).ok()?;
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .and_then(|v| v.get("rl_steps").and_then(Value::as_i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_check_value_and_rfc3720_vectors() {
        // The CRC catalogue's check value for CRC-32/ISCSI.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        // RFC 3720, B.4: 32 bytes of zeros, of 0xff, ascending.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
    }

    #[test]
    #[allow(clippy::manual_rotate)] // reason: the TFRecord format's formula written out by hand, independent of the implementation
    fn the_mask_rotates_and_adds_the_constant() {
        let c = crc32c(b"abc");
        assert_eq!(
            masked_crc32c(b"abc"),
            ((c >> 15) | (c << 17)).wrapping_add(0xa282_ead8)
        );
    }

    #[test]
    fn a_record_is_framed_with_length_and_both_crcs() {
        let r = tfrecord(b"hello");
        assert_eq!(r.len(), 8 + 4 + 5 + 4);
        assert_eq!(&r[..8], &5u64.to_le_bytes());
        assert_eq!(&r[8..12], &masked_crc32c(&5u64.to_le_bytes()).to_le_bytes());
        assert_eq!(&r[12..17], b"hello");
        assert_eq!(&r[17..], &masked_crc32c(b"hello").to_le_bytes());
    }

    #[test]
    fn a_scalar_event_is_encoded_by_hand() {
        // wall_time 1.5 (field 1, fixed64), step 300 (field 2, varint ac 02), summary
        // (field 5) { value (field 1) { tag "a" (field 1), simple_value 0.5 (field 2, fixed32) } }.
        let e = event(1.5, 300, EventBody::Value(scalar_value("a", 0.5)));
        let mut want = vec![0x09];
        want.extend_from_slice(&1.5f64.to_le_bytes());
        want.extend_from_slice(&[0x10, 0xac, 0x02, 0x2a, 10, 0x0a, 8, 0x0a, 1, b'a', 0x15]);
        want.extend_from_slice(&0.5f32.to_le_bytes());
        assert_eq!(e, want);
    }

    #[test]
    fn tags_follow_verl_and_name_unknown_fields() {
        assert_eq!(rl_tag("all.accuracy"), "critic/rewards/mean");
        assert_eq!(rl_tag("entropy"), "actor/entropy");
        assert_eq!(rl_tag("clip_frac"), "actor/pg_clipfrac");
        assert_eq!(rl_tag("time_rollout"), "timing_s/gen");
        assert_eq!(rl_tag("all.tool_error_rate"), "tool/error_rate");
        assert_eq!(rl_tag("kept.accuracy"), "kept/rewards/mean");
        assert_eq!(rl_tag("roc_metrics.roc/pass_ratio"), "roc/roc/pass_ratio");
        assert_eq!(rl_tag("tool_latency.p99_ms"), "tool/latency/p99_ms");
        assert_eq!(rl_tag("rollout_corr.rollout_corr/kl"), "rollout_corr/kl");
        assert_eq!(rl_tag("asynchronous.staleness.1"), "async/staleness/1");
        assert_eq!(
            rl_tag("asynchronous.engine_idle_secs"),
            "async/engine_idle_secs"
        );
        assert_eq!(rl_tag("new_field.x"), "rstar/new_field/x");
        assert_eq!(sft_tag("loss"), "sft/loss");
        assert_eq!(eval_tag("sampled.accuracy"), "val/sampled/rewards/mean");
        assert_eq!(
            eval_tag("greedy.tool_error_rate"),
            "val/greedy/tool/error_rate"
        );
    }

    #[test]
    fn numeric_leaves_flatten_objects_and_skip_strings() {
        let v: Value =
            serde_json::json!({"step": 3, "a": {"b": 1.5, "c": "x"}, "ok": true, "n": null});
        assert_eq!(
            numeric_leaves(&v, &["step"]),
            vec![("a.b".to_string(), 1.5), ("ok".to_string(), 1.0)]
        );
    }

    #[test]
    fn inline_markdown_is_escaped() {
        assert_eq!(
            md_inline("a*b_[c](d)\n<x>"),
            "a\\*b\\_\\[c\\]\\(d\\) \\<x\\>"
        );
    }
}
