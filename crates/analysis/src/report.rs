//! The run report (`rstar report RUN_DIR [RUN_DIR2]`): one self-contained HTML page that opens
//! offline (no network, no external assets; a Content-Security-Policy forbids any fetch).
//!
//! It shows the config, the evaluation table after SFT and after each stage, the training
//! curves as inline SVG ([`crate::plots::charts`] and an SFT loss chart, drawn by
//! [`crate::plot::line_chart_svg`]), with two runs a comparison (the evaluation
//! tables side by side and the main curves overlaid: RoC against no RoC), and a browsable list
//! of the sampled trajectories of `samples.jsonl` (turns, tool calls and their outputs, errors
//! in red, the reward, per-token entropy shading when the run recorded it), each written by
//! [`crate::trajectory::html`], the renderer `rstar show` shares.
//!
//! Everything read from the run is HTML-escaped (model text is hostile). [`RunData::load`]
//! never fails: missing or truncated files become notes that the page shows at the top, with
//! whatever could be read. The page's small script (filters, expand/collapse) marks
//! `<body data-script="ok">` when it ran to the end, and counts in `data-label-overlaps` the
//! stage labels of the charts that the browser drew over a legend entry or another stage label;
//! the headless-browser test checks both.

use rstar_episode::IoError;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Error;
use crate::plot::{LineChart, Series, line_chart_svg};
use crate::plots::StepTiming;
use crate::records::EvalRow;
use crate::trajectory;
use rstar_episode::episode::Trajectory;

/// Trajectories of a run shown at most (the rest are counted).
pub const MAX_TRAJECTORIES: usize = 200;

/// What the report reads of a run directory, with notes on what was missing or unreadable.
#[derive(Debug, Clone, Default)]
pub struct RunData {
    /// The run directory.
    pub dir: PathBuf,
    /// Its last path component.
    pub name: String,
    /// `config.json`, when readable.
    pub config: Option<Value>,
    /// The readable lines of `sft_metrics.jsonl`.
    pub sft: Vec<Value>,
    /// The readable lines of `metrics.jsonl`.
    pub metrics: Vec<Value>,
    /// The readable lines of `eval.jsonl`.
    pub evals: Vec<EvalRow>,
    /// The readable trajectories of `samples.jsonl`.
    pub samples: Vec<Trajectory>,
    /// What is missing or could not be read, one sentence each.
    pub problems: Vec<String>,
}

/// Reads the JSONL file `name` of `dir` line by line, keeping the lines `parse` accepts and
/// noting the others (and a missing file, with `why`).
fn read_jsonl<T>(
    dir: &Path,
    name: &str,
    why_missing: &str,
    problems: &mut Vec<String>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Vec<T> {
    let path = dir.join(name);
    let text = match std::fs::read(&path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            problems.push(format!("{name} is missing ({why_missing})."));
            return Vec::new();
        }
        Err(e) => {
            problems.push(format!("{name} cannot be read: {e}."));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse(line) {
            Ok(v) => out.push(v),
            Err(e) => bad.push(format!("line {}: {e}", i + 1)),
        }
    }
    if !bad.is_empty() {
        let shown: Vec<&str> = bad.iter().take(3).map(String::as_str).collect();
        problems.push(format!(
            "{name}: {} unreadable line(s), skipped ({}{}).",
            bad.len(),
            shown.join("; "),
            if bad.len() > 3 { "; …" } else { "" }
        ));
    }
    out
}

fn json_error(e: &serde_json::Error) -> String {
    if e.is_eof() {
        format!("truncated ({e})")
    } else {
        e.to_string()
    }
}

impl RunData {
    /// Reads what it can of the run in `dir`.
    pub fn load(dir: &Path) -> Self {
        let name = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut run = RunData {
            dir: dir.to_path_buf(),
            name,
            ..RunData::default()
        };
        if !dir.is_dir() {
            run.problems.push(format!(
                "the run directory {} does not exist.",
                dir.display()
            ));
            return run;
        }
        let p = &mut run.problems;
        run.config = match std::fs::read_to_string(dir.join("config.json")) {
            Ok(text) => match serde_json::from_str::<Value>(&text) {
                Ok(v) => Some(v),
                Err(e) => {
                    p.push(format!("config.json cannot be read: {}.", json_error(&e)));
                    None
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                p.push("config.json is missing (not a run directory, or written by hand).".into());
                None
            }
            Err(e) => {
                p.push(format!("config.json cannot be read: {e}."));
                None
            }
        };
        let value = |l: &str| serde_json::from_str::<Value>(l).map_err(|e| json_error(&e));
        run.sft = read_jsonl(dir, "sft_metrics.jsonl", "no SFT step logged", p, value);
        run.metrics = read_jsonl(dir, "metrics.jsonl", "no RL step logged", p, value);
        run.evals = read_jsonl(dir, "eval.jsonl", "no evaluation yet", p, |l| {
            serde_json::from_str::<EvalRow>(l).map_err(|e| json_error(&e))
        });
        run.samples = read_jsonl(
            dir,
            "samples.jsonl",
            "written when the run finishes",
            p,
            |l| {
                let t: Trajectory = serde_json::from_str(l).map_err(|e| json_error(&e))?;
                t.validate().map_err(|e| e.to_string())?;
                Ok(t)
            },
        );
        run
    }

    /// RoC's mode in the config's `rl.roc`: `paper`, `reference` or `off`; configs written
    /// before `rl.roc` was an object hold `true` (paper) or `false` (off).
    pub fn roc(&self) -> Option<String> {
        let roc = self.config.as_ref()?.pointer("/rl/roc")?;
        match roc {
            Value::Bool(true) => Some("paper".into()),
            Value::Bool(false) => Some("off".into()),
            Value::String(mode) => Some(mode.clone()),
            Value::Object(fields) => fields
                .get("mode")
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        }
    }

    /// The run's name with `(RoC)`, `(RoC, reference)` or `(no RoC)`.
    pub fn label(&self) -> String {
        match self.roc().as_deref() {
            Some("off") => format!("{} (no RoC)", self.name),
            Some("reference") => format!("{} (RoC, reference)", self.name),
            Some(_) => format!("{} (RoC)", self.name),
            None => self.name.clone(),
        }
    }
}

/// Escapes text for HTML element content and attribute values, and shows control characters
/// other than newline and tab as visible symbols ([`trajectory::inert_char`], the map
/// `rstar show` uses for the terminal).
pub fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(trajectory::inert_char(c)),
        }
    }
    out
}

const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222;background:#fafafa;line-height:1.4}
header{background:#2c3e50;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#cfd8dc;font-size:13px}
nav{padding:8px 24px;background:#ecf0f1;font-size:14px}
nav a{margin-right:14px}
main{padding:8px 24px 40px;max-width:1200px}
h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;font-size:14px;margin:8px 0;background:#fff}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
th{background:#f0f3f5}
.warn{background:#fff3cd;border:1px solid #e0c36a;padding:8px 14px;margin:12px 0}
.warn h2{border:none;margin:4px 0;font-size:17px}
.muted{color:#777}
figure.plot{margin:10px 0;background:#fff;border:1px solid #ddd;display:inline-block;max-width:100%}
figure.plot svg{max-width:100%;height:auto;display:block}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;padding:6px 8px;background:#fff;border:1px solid #ddd;font-size:12.5px}
.controls button{margin-right:6px;padding:3px 10px;border:1px solid #888;background:#fff;border-radius:3px;cursor:pointer}
.controls button[aria-pressed=true]{background:#2c3e50;color:#fff}
details.traj{background:#fff;border:1px solid #ccc;margin:6px 0;padding:4px 10px}
details.traj>summary{cursor:pointer;font-size:14px}
.badge{display:inline-block;padding:0 7px;border-radius:8px;font-size:12px;color:#fff;background:#777}
.badge.good{background:#2e7d32}.badge.bad{background:#c62828}.badge.err{background:#e65100}
.turn{margin:8px 0}
.turn .who{font-size:12px;color:#555;font-weight:600}
pre.tool.ok{border-left:4px solid #2e7d32;background:#f1f8f1}
pre.tool.err{border-left:4px solid #c62828;background:#fdecea}
.call{font-size:13px;margin:2px 0}
.call.err{color:#c62828;font-weight:600}
.call.ok{color:#2e7d32}
mark.code{background:#fff0c2}
mark.answer{background:#c8f0c8;font-weight:700}
.tok{border-radius:2px}
"#;

const SCRIPT: &str = r#"
(function () {
  'use strict';
  var errors = 0;
  window.addEventListener('error', function () {
    errors += 1;
    document.body.setAttribute('data-script-errors', String(errors));
  });
  var items = document.querySelectorAll('details.traj');
  function apply(filter) {
    var shown = 0;
    items.forEach(function (t) {
      var on = filter === 'all' || t.classList.contains(filter);
      t.hidden = !on;
      if (on) { shown += 1; }
    });
    document.querySelectorAll('.shown-count').forEach(function (c) {
      c.textContent = shown + ' of ' + items.length + ' shown';
    });
    document.querySelectorAll('button[data-filter]').forEach(function (b) {
      b.setAttribute('aria-pressed', String(b.getAttribute('data-filter') === filter));
    });
  }
  document.querySelectorAll('button[data-filter]').forEach(function (b) {
    b.addEventListener('click', function () { apply(b.getAttribute('data-filter')); });
  });
  document.querySelectorAll('button[data-open]').forEach(function (b) {
    b.addEventListener('click', function () {
      var open = b.getAttribute('data-open') === 'all';
      items.forEach(function (t) { t.open = open; });
    });
  });
  apply('all');
  // The charts' own check of their layout, as the browser drew it: stage labels that cover the
  // legend or each other (the headless-browser test reads the count).
  var overlaps = 0;
  function hit(a, b) {
    return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
  }
  document.querySelectorAll('figure.plot svg').forEach(function (svg) {
    function boxes(selector) {
      return Array.prototype.map.call(svg.querySelectorAll(selector), function (e) { return e.getBBox(); });
    }
    var legend = boxes('g.legend text');
    var stages = boxes('text.vlabel');
    stages.forEach(function (a, i) {
      legend.concat(stages.slice(i + 1)).forEach(function (b) {
        if (hit(a, b)) { overlaps += 1; }
      });
    });
  });
  document.body.setAttribute('data-label-overlaps', String(overlaps));
  var status = document.getElementById('script-status');
  if (status) { status.textContent = 'interactive: filters and expand buttons ready'; }
  document.body.setAttribute('data-script', 'ok');
})();
"#;

/// The whole page for one run, or two (the second compared with the first).
pub fn render(runs: &[RunData]) -> String {
    let mut s = String::new();
    let names: Vec<String> = runs.iter().map(RunData::label).collect();
    let title = if names.is_empty() {
        "run report".to_string()
    } else {
        format!("run report: {}", names.join(" vs "))
    };
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body data-script=\"pending\">\n",
        html(&title)
    );
    let _ = writeln!(
        s,
        "<header><h1>{}</h1><p>{} · written by rstar {} · <span id=\"script-status\">static view</span></p></header>",
        html(&title),
        html(
            &runs
                .iter()
                .map(|r| r.dir.display().to_string())
                .collect::<Vec<_>>()
                .join(" · ")
        ),
        html(env!("CARGO_PKG_VERSION"))
    );
    s.push_str("<nav><a href=\"#config\">config</a><a href=\"#evaluations\">evaluations</a>");
    if runs.len() > 1 {
        s.push_str("<a href=\"#comparison\">comparison</a>");
    }
    s.push_str(
        "<a href=\"#plots\">plots</a><a href=\"#trajectories\">trajectories</a></nav>\n<main>\n",
    );

    let problems: Vec<(String, &String)> = runs
        .iter()
        .flat_map(|r| r.problems.iter().map(move |p| (r.name.clone(), p)))
        .collect();
    if !problems.is_empty() {
        s.push_str("<section id=\"problems\" class=\"warn\"><h2>Missing or unreadable</h2><ul>\n");
        for (run, p) in problems {
            let _ = writeln!(s, "<li><b>{}</b>: {}</li>", html(&run), html(p));
        }
        s.push_str("</ul></section>\n");
    }

    s.push_str("<section id=\"config\"><h2>Config</h2>\n");
    for r in runs {
        config_section(&mut s, r, runs.len() > 1);
    }
    s.push_str("</section>\n<section id=\"evaluations\"><h2>Evaluations (held-out)</h2>\n");
    for r in runs {
        if runs.len() > 1 {
            let _ = writeln!(s, "<h3>{}</h3>", html(&r.label()));
        }
        eval_table(&mut s, r);
    }
    s.push_str("</section>\n");
    if let [a, b] = runs {
        comparison(&mut s, a, b);
    }
    s.push_str("<section id=\"plots\"><h2>Training curves</h2>\n");
    for r in runs {
        plots(&mut s, r, runs.len() > 1);
    }
    s.push_str("</section>\n<section id=\"trajectories\"><h2>Sampled trajectories</h2>\n");
    s.push_str(
        "<p class=\"controls\">show: <button data-filter=\"all\">all</button><button data-filter=\"correct\">correct</button><button data-filter=\"wrong\">wrong</button><button data-filter=\"has-calls\">with tool calls</button><button data-filter=\"has-errors\">with tool errors</button> · <button data-open=\"all\">expand all</button><button data-open=\"none\">collapse all</button> <span class=\"shown-count muted\"></span></p>\n",
    );
    for (k, r) in runs.iter().enumerate() {
        trajectories(&mut s, r, k, runs.len() > 1);
    }
    s.push_str("</section>\n</main>\n");
    let _ = write!(s, "<script>{SCRIPT}</script>\n</body>\n</html>\n");
    s
}

fn config_section(s: &mut String, r: &RunData, several: bool) {
    if several {
        let _ = writeln!(s, "<h3>{}</h3>", html(&r.label()));
    }
    let Some(c) = &r.config else {
        s.push_str("<p class=\"muted\">No config.</p>\n");
        return;
    };
    let get = |p: &str| {
        c.pointer(p).map_or_else(
            || "-".to_string(),
            |v| match v {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            },
        )
    };
    let stages = c
        .pointer("/curriculum/stages")
        .and_then(Value::as_array)
        .map(|v| {
            v.iter()
                .filter_map(|st| st.get("name").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|| "-".into());
    s.push_str("<table class=\"config\"><tbody>\n");
    for (k, v) in [
        ("preset", get("/preset")),
        ("seed", get("/seed")),
        ("RoC (rl.roc)", get("/rl/roc")),
        ("SFT steps", get("/sft/steps")),
        ("RL learning rate", get("/rl/lr")),
        (
            "what trains",
            crate::tensorboard::lora_text_of(c)
                .map_or_else(|| "every weight".to_string(), |t| t.replace("\n\n", "; ")),
        ),
        ("prompts per step", get("/rl/prompts_per_step")),
        ("group size", get("/rl/group_size")),
        ("curriculum stages", stages),
        ("eval problems", get("/eval/problems")),
        ("eval samples (k)", get("/eval/samples")),
        ("eval temperature", get("/eval/temperature")),
    ] {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", html(k), html(&v));
    }
    s.push_str("</tbody></table>\n");
    let pretty = serde_json::to_string_pretty(c).unwrap_or_default();
    let _ = writeln!(
        s,
        "<details><summary>config.json</summary><pre>{}</pre></details>",
        html(&pretty)
    );
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// `k` of avg@k: sampled traces per problem.
fn k_of(evals: &[EvalRow]) -> String {
    evals
        .iter()
        .find_map(|e| e.sampled.map(|s| s.count / e.greedy.count.max(1)))
        .map_or_else(|| "k".to_string(), |k| k.to_string())
}

fn eval_table(s: &mut String, r: &RunData) {
    if r.evals.is_empty() {
        s.push_str("<p class=\"muted\">No evaluation yet.</p>\n");
        return;
    }
    let temperature = r
        .config
        .as_ref()
        .and_then(|c| c.pointer("/eval/temperature"))
        .map_or_else(|| "?".to_string(), Value::to_string);
    let _ = writeln!(
        s,
        "<table class=\"evals\"><thead><tr><th>phase</th><th>RL steps</th><th>problems</th><th>held-out avg@{} (T = {})</th><th>greedy</th><th>tool calls</th><th>tool error rate</th><th>in successes</th><th>truncated</th></tr></thead><tbody>",
        html(&k_of(&r.evals)),
        html(&temperature)
    );
    // Each accuracy with its 95% interval over the problems, as in the trainer's table.
    let with_interval = |e: &EvalRow, x: f64| format!("{} {}", pct(x), e.interval(x));
    for e in &r.evals {
        let (avg, t) = match &e.sampled {
            Some(x) => (with_interval(e, x.accuracy), x),
            None => ("-".to_string(), &e.greedy),
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{avg}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            html(&e.phase),
            e.rl_steps,
            e.problems(),
            with_interval(e, e.greedy.accuracy),
            t.tool_calls,
            pct(t.tool_error_rate),
            pct(t.tool_error_rate_success),
            pct(t.truncation_rate)
        );
    }
    s.push_str("</tbody></table>\n");
}

/// Reads a number at a dotted path of a JSON value (`NaN` when missing).
fn at(v: &Value, path: &str) -> f64 {
    path.split('.')
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN)
}

fn figure(s: &mut String, name: &str, chart: &LineChart) {
    let _ = writeln!(
        s,
        "<figure class=\"plot\" data-chart=\"{}\">{}</figure>",
        html(name),
        line_chart_svg(chart)
    );
}

fn comparison(s: &mut String, a: &RunData, b: &RunData) {
    let _ = writeln!(
        s,
        "<section id=\"comparison\"><h2>Comparison: {} vs {}</h2>",
        html(&a.label()),
        html(&b.label())
    );
    let mut phases: Vec<&str> = a.evals.iter().map(|e| e.phase.as_str()).collect();
    for e in &b.evals {
        if !phases.contains(&e.phase.as_str()) {
            phases.push(&e.phase);
        }
    }
    if phases.is_empty() {
        s.push_str("<p class=\"muted\">No evaluation in either run.</p>\n");
    } else {
        let (la, lb) = (html(&a.label()), html(&b.label()));
        let _ = writeln!(
            s,
            "<table class=\"compare\"><thead><tr><th>phase</th><th>avg@k {la}</th><th>avg@k {lb}</th><th>greedy {la}</th><th>greedy {lb}</th><th>tool error rate {la}</th><th>tool error rate {lb}</th><th>in successes {la}</th><th>in successes {lb}</th></tr></thead><tbody>"
        );
        let find = |r: &RunData, p: &str| r.evals.iter().find(|e| e.phase == p).cloned();
        for p in phases {
            let (ea, eb) = (find(a, p), find(b, p));
            let cell = |e: &Option<EvalRow>, f: &dyn Fn(&EvalRow) -> Option<f64>| {
                e.as_ref().and_then(f).map_or_else(|| "-".to_string(), pct)
            };
            let avg = |e: &EvalRow| e.sampled.map(|x| x.accuracy);
            let greedy = |e: &EvalRow| Some(e.greedy.accuracy);
            let tool = |e: &EvalRow| Some(e.sampled.unwrap_or(e.greedy).tool_error_rate);
            let ok = |e: &EvalRow| Some(e.sampled.unwrap_or(e.greedy).tool_error_rate_success);
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                html(p),
                cell(&ea, &avg),
                cell(&eb, &avg),
                cell(&ea, &greedy),
                cell(&eb, &greedy),
                cell(&ea, &tool),
                cell(&eb, &tool),
                cell(&ea, &ok),
                cell(&eb, &ok)
            );
        }
        s.push_str("</tbody></table>\n");
    }
    let last = a
        .metrics
        .iter()
        .chain(&b.metrics)
        .map(|r| at(r, "step"))
        .filter(|x| x.is_finite())
        .fold(1.0f64, f64::max);
    for (stem, title, y_label, path) in [
        (
            "compare_reward",
            "reward (all rollouts) per RL step",
            "mean reward",
            "all.accuracy",
        ),
        (
            "compare_tool_errors",
            "tool error rate per RL step",
            "share of tool calls",
            "all.tool_error_rate",
        ),
        (
            "compare_tool_errors_success",
            "tool error rate in successful traces",
            "share of tool calls",
            "all.tool_error_rate_success",
        ),
        (
            "compare_response_length",
            "response length per RL step",
            "tokens",
            "all.response_len",
        ),
    ] {
        if a.metrics.is_empty() && b.metrics.is_empty() {
            s.push_str("<p class=\"muted\">No RL step in either run.</p>\n");
            break;
        }
        let chart = LineChart {
            series: [a, b]
                .iter()
                .map(|r| Series {
                    name: r.label(),
                    points: r
                        .metrics
                        .iter()
                        .map(|m| (at(m, "step"), at(m, path)))
                        .collect(),
                })
                .collect(),
            ..LineChart::over_steps(title, "RL step", y_label, last)
        };
        figure(s, stem, &chart);
    }
    s.push_str("</section>\n");
}

fn plots(s: &mut String, r: &RunData, several: bool) {
    if several {
        let _ = writeln!(s, "<h3>{}</h3>", html(&r.label()));
    }
    if r.sft.is_empty() && r.metrics.is_empty() {
        s.push_str("<p class=\"muted\">No SFT or RL step logged.</p>\n");
        return;
    }
    if !r.sft.is_empty() {
        let last = r
            .sft
            .iter()
            .map(|v| at(v, "step"))
            .filter(|x| x.is_finite())
            .fold(1.0f64, f64::max);
        let chart = LineChart {
            series: vec![Series {
                name: "loss".into(),
                points: r
                    .sft
                    .iter()
                    .map(|v| (at(v, "step"), at(v, "loss")))
                    .collect(),
            }],
            ..LineChart::over_steps(
                "SFT loss per step",
                "SFT step",
                "nats per assistant token",
                last,
            )
        };
        figure(s, "sft_loss", &chart);
    }
    if r.metrics.is_empty() {
        s.push_str("<p class=\"muted\">No RL step logged.</p>\n");
        return;
    }
    for (stem, chart) in crate::plots::charts(&r.metrics, StepTiming::of_config(r.config.as_ref()))
    {
        figure(s, stem, &chart);
    }
}

fn trajectories(s: &mut String, r: &RunData, run_index: usize, several: bool) {
    if several {
        let _ = writeln!(s, "<h3>{}</h3>", html(&r.label()));
    }
    if r.samples.is_empty() {
        s.push_str("<p class=\"muted\">No sampled trajectories (samples.jsonl is written when the run finishes).</p>\n");
        return;
    }
    let shown = r.samples.len().min(MAX_TRAJECTORIES);
    let _ = writeln!(
        s,
        "<p class=\"muted\">{} trajectories of the final evaluation (samples.jsonl){}.</p>",
        r.samples.len(),
        if shown < r.samples.len() {
            format!(", the first {shown} shown")
        } else {
            String::new()
        }
    );
    for (i, t) in r.samples.iter().take(shown).enumerate() {
        s.push_str(&trajectory::html(
            &trajectory::view(t),
            &format!("t{run_index}-{i}"),
        ));
    }
}

/// Writes the report of `dirs` (one run, or two to compare) to `out`.
///
/// # Errors
/// IO errors naming `out` (a missing or damaged run is reported in the page, not an error).
pub fn write(dirs: &[PathBuf], out: &Path) -> Result<Vec<RunData>, Error> {
    let runs: Vec<RunData> = dirs.iter().map(|d| RunData::load(d)).collect();
    std::fs::write(out, render(&runs))
        .map_err(|source| Error::Io(IoError::new(out.to_path_buf(), source)))?;
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::TrajectoryStats;

    #[test]
    fn html_escapes_markup_quotes_and_controls() {
        assert_eq!(
            html("<script>alert('x')</script>&\"\u{1b}[31m\n"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;␛[31m\n"
        );
        // C1 controls (CSI among them) as in `rstar show`.
        assert_eq!(html("a\u{9b}2J\r\x7f"), "a�2J␍␡");
    }

    #[test]
    fn the_evaluation_table_gives_each_accuracy_with_its_interval() {
        let stats = |count, accuracy| TrajectoryStats {
            count,
            accuracy,
            ..TrajectoryStats::default()
        };
        let run = RunData {
            dir: PathBuf::from("runs/x"),
            name: "x".into(),
            config: Some(serde_json::json!({"eval": {"temperature": 1.0}})),
            sft: Vec::new(),
            metrics: Vec::new(),
            evals: vec![EvalRow {
                phase: "stage short".into(),
                rl_steps: 16,
                greedy: stats(100, 0.95),
                sampled: Some(stats(200, 0.52)),
                avg_at_k: Some(0.52),
                pass_at_k: Vec::new(),
                more: Vec::new(),
            }],
            samples: Vec::new(),
            problems: Vec::new(),
        };
        let mut s = String::new();
        eval_table(&mut s, &run);
        // Wilson's intervals over the 100 problems (statsmodels' `proportion_confint(...,
        // method="wilson")`: 95/100 → [0.888, 0.978], 52/100 → [0.423, 0.615]).
        assert!(
            s.contains("<th>problems</th><th>held-out avg@2 (T = 1.0)</th><th>greedy</th>"),
            "{s}"
        );
        assert!(
            s.contains(
                "<tr><td>stage short</td><td>16</td><td>100</td><td>52.0% [42.3, 61.5]</td><td>95.0% [88.8, 97.8]</td>"
            ),
            "{s}"
        );
    }

    #[test]
    fn a_missing_directory_is_a_note_not_an_error() {
        let run = RunData::load(Path::new("/nonexistent/rstar-run"));
        assert_eq!(run.problems.len(), 1);
        assert!(
            run.problems[0].contains("does not exist"),
            "{:?}",
            run.problems
        );
        let page = render(&[run]);
        assert!(page.contains("Missing or unreadable"));
        assert!(page.trim_end().ends_with("</html>"));
    }
}
