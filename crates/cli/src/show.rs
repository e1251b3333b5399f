//! `rstar show`: print one rollout of a trajectory JSONL the way a person debugs a policy.
//!
//! The header says which rollout, why it stopped, the reward, answer and ground truth and a
//! summary of its tool calls; then every turn follows with its token span, tool calls
//! highlighted in the assistant text, the final answer in bold, tool responses green when the
//! call worked and red when it failed. Colour is ANSI, on when stdout is a terminal and
//! `NO_COLOR` is unset; `--no-color` and `--color` override.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, bail};

use rstar_agent::analysis::entropy::call_spans;
use rstar_agent::analysis::parse_trajectories;
use rstar_agent::episode::{Role, Trajectory};
use rstar_agent::template::TemplateFormat;
use rstar_agent::toolcall::OutcomeKind;

/// Arguments of `rstar show`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trajectory JSONL (as written by the agent loop, `rstar eval` or training).
    pub file: PathBuf,
    /// Which rollout, 0-based line order (blank lines not counted).
    #[arg(long, short, conflicts_with = "id")]
    pub index: Option<usize>,
    /// Which rollout by problem id (the first sample, or `--sample`).
    #[arg(long)]
    pub id: Option<String>,
    /// With `--id`: which sample of the problem.
    #[arg(long, requires = "id")]
    pub sample: Option<u32>,
    /// List the rollouts one a line instead of showing one.
    #[arg(long, conflicts_with_all = ["index", "id"])]
    pub list: bool,
    /// Print the whole prompt (by default only its last 240 characters).
    #[arg(long)]
    pub prompt: bool,
    /// No ANSI colours (also: `NO_COLOR` set, or stdout not a terminal).
    #[arg(long, conflicts_with = "color")]
    pub no_color: bool,
    /// ANSI colours even when stdout is not a terminal (for `less -R`).
    #[arg(long)]
    pub color: bool,
}

/// Runs `rstar show`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let trajs = parse_trajectories(&text, &args.file)?;
    if trajs.is_empty() {
        bail!("{}: no trajectories", args.file.display());
    }
    let color = if args.no_color {
        false
    } else if args.color {
        true
    } else {
        std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
    };
    let p = Paint(color);
    if args.list {
        print!("{}", render_list(&trajs, p));
        return Ok(());
    }
    let index = match (&args.id, args.index) {
        (Some(id), _) => trajs
            .iter()
            .position(|t| &t.id == id && args.sample.is_none_or(|s| t.sample == s))
            .with_context(|| match args.sample {
                Some(s) => format!("no trajectory with id `{id}` and sample {s}"),
                None => format!("no trajectory with id `{id}`"),
            })?,
        (None, Some(k)) if k >= trajs.len() => bail!(
            "--index {k} is out of range: {} has {} trajectories",
            args.file.display(),
            trajs.len()
        ),
        (None, k) => k.unwrap_or(0),
    };
    print!(
        "{}",
        render(&trajs[index], index, trajs.len(), args.prompt, p)
    );
    Ok(())
}

/// ANSI styling, or none.
#[derive(Debug, Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn style(self, code: &str, text: &str) -> String {
        if self.0 && !text.is_empty() {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
    fn bold(self, t: &str) -> String {
        self.style("1", t)
    }
    fn dim(self, t: &str) -> String {
        self.style("2", t)
    }
    fn red(self, t: &str) -> String {
        self.style("31", t)
    }
    fn green(self, t: &str) -> String {
        self.style("32", t)
    }
    fn yellow(self, t: &str) -> String {
        self.style("33", t)
    }
    fn cyan(self, t: &str) -> String {
        self.style("36", t)
    }
    fn answer(self, t: &str) -> String {
        self.style("1;32", t)
    }
}

fn reward_text(t: &Trajectory, p: Paint) -> String {
    match t.reward {
        Some(r) if r >= 1.0 => p.green(&format!("{r}")),
        Some(r) => p.red(&format!("{r}")),
        None => p.dim("unscored"),
    }
}

fn render_list(trajs: &[Trajectory], p: Paint) -> String {
    let mut s = String::new();
    for (i, t) in trajs.iter().enumerate() {
        s.push_str(&format!(
            "{i:>4}  {} #{}  reward {}  stop {}  turns {}  calls {} ({} errors)  tokens {}\n",
            p.bold(&t.id),
            t.sample,
            reward_text(t, p),
            t.stop.as_str(),
            t.assistant_turns(),
            t.tool_calls.len(),
            t.tool_errors(),
            t.response_ids.len()
        ));
    }
    s
}

/// Shows control characters other than newline and tab as visible symbols (Unicode Control
/// Pictures: `␛` for ESC, `␡` for DEL; `�` for the C1 controls), so text a policy or a program
/// wrote cannot move the cursor or restyle the terminal.
fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            '\x7f' => '␡',
            '\u{80}'..='\u{9f}' => '�',
            c if (c as u32) < 0x20 => char::from_u32(0x2400 + c as u32).unwrap_or('�'),
            c => c,
        })
        .collect()
}

/// Colours an assistant turn: tool calls yellow, `<answer>…</answer>` bold green.
fn paint_assistant(text: &str, format: TemplateFormat, p: Paint) -> String {
    let (open, close) = match format {
        TemplateFormat::ChatMl => ("<tool_call>", "</tool_call>"),
        TemplateFormat::Compact => ("<c>", "</c>"),
    };
    let mut spans: Vec<(usize, usize, bool)> = call_spans(text, open, close)
        .into_iter()
        .map(|(a, b)| (a, b, true))
        .collect();
    spans.extend(
        call_spans(text, "<answer>", "</answer>")
            .into_iter()
            .map(|(a, b)| (a, b, false)),
    );
    spans.sort();
    let mut out = String::new();
    let mut at = 0;
    for (a, b, code) in spans {
        if a < at {
            continue;
        }
        out.push_str(&text[at..a]);
        let part = &text[a..b];
        out.push_str(&if code { p.yellow(part) } else { p.answer(part) });
        at = b;
    }
    out.push_str(&text[at..]);
    out
}

fn kind_name(k: OutcomeKind) -> &'static str {
    match k {
        OutcomeKind::Output => "output",
        OutcomeKind::NoOutput => "no output",
        OutcomeKind::Error => "error",
        OutcomeKind::Timeout => "timeout",
        OutcomeKind::ParseFailure => "parse failure",
    }
}

/// The whole view of one trajectory.
fn render(t: &Trajectory, index: usize, of: usize, whole_prompt: bool, p: Paint) -> String {
    let mut s = String::new();
    let rule = |title: String| format!("{}\n", p.dim(&format!("── {title} ──")));
    s.push_str(&format!(
        "{} {index} of {of} · id {} · sample {} · template {:?}\n",
        p.bold("trajectory"),
        p.bold(if t.id.is_empty() { "(none)" } else { &t.id }),
        t.sample,
        t.template
    ));
    let stop = t.stop.as_str();
    s.push_str(&format!(
        "stop: {} · truncated: {} · reward: {} · answer: {} · ground truth: {}\n",
        if t.truncated {
            p.red(stop)
        } else {
            stop.to_string()
        },
        if t.truncated { "yes" } else { "no" },
        reward_text(t, p),
        t.answer
            .as_deref()
            .map_or_else(|| p.dim("none"), |a| p.bold(a)),
        t.ground_truth.as_deref().unwrap_or("unknown")
    ));
    let assistant = t.assistant_token_count();
    s.push_str(&format!(
        "turns: {} assistant · response tokens: {} ({assistant} assistant, {} tool)\n",
        t.assistant_turns(),
        t.response_ids.len(),
        t.response_ids.len() - assistant
    ));
    s.push_str(&format!("tool calls: {}\n", call_summary(t, p)));
    if t.has_entropies() {
        let n = t.entropies.len() as f32;
        let mean = t.entropies.iter().sum::<f32>() / n;
        let max = t.entropies.iter().copied().fold(0.0, f32::max);
        s.push_str(&format!(
            "entropy: mean {mean:.3} · max {max:.3} nats over {} tokens\n",
            t.entropies.len()
        ));
    }

    let chars = t.prompt.chars().count();
    if whole_prompt || chars <= 240 {
        s.push_str(&rule("prompt".to_string()));
        s.push_str(&p.dim(&sanitize(&t.prompt)));
    } else {
        s.push_str(&rule(format!(
            "prompt (last 240 of {chars} characters; --prompt for all)"
        )));
        let tail: String = t.prompt.chars().skip(chars - 240).collect();
        s.push_str(&p.dim(&format!("…{}", sanitize(&tail))));
    }
    s.push('\n');

    let mut assistant_turn = 0usize;
    let mut entropy_at = 0usize;
    for (i, turn) in t.turns.iter().enumerate() {
        let span = format!("tokens {}..{}", turn.start, turn.start + turn.len);
        match turn.role {
            Role::Assistant => {
                let mut title = format!("turn {i} · assistant {} · {span}", assistant_turn + 1);
                if t.has_entropies() && turn.len > 0 {
                    let e = &t.entropies[entropy_at..entropy_at + turn.len];
                    let mean = e.iter().sum::<f32>() / e.len() as f32;
                    title.push_str(&format!(" · mean entropy {mean:.3}"));
                }
                entropy_at += turn.len;
                s.push_str(&rule(title));
                s.push_str(&paint_assistant(&sanitize(&turn.text), t.template, p));
                s.push('\n');
                for (k, c) in t
                    .tool_calls
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.turn == assistant_turn)
                {
                    let what = match (&c.call, &c.failure) {
                        (Some(call), _) => format!(
                            "{} ({} lines)",
                            call.name.as_str(),
                            call.code.lines().count()
                        ),
                        (None, Some(f)) => format!("undecodable: {}", f.message),
                        (None, None) => "unknown".to_string(),
                    };
                    let kind = kind_name(c.outcome.kind);
                    let kind = if c.outcome.kind.is_error() {
                        p.red(kind)
                    } else {
                        p.green(kind)
                    };
                    s.push_str(&format!("{} call {k}: {what} → {kind}\n", p.cyan("▶")));
                }
                assistant_turn += 1;
            }
            Role::Tool => {
                s.push_str(&rule(format!("turn {i} · tool response · {span}")));
                let failed = t
                    .tool_calls
                    .iter()
                    .filter(|c| c.turn + 1 == assistant_turn)
                    .any(|c| c.outcome.kind.is_error());
                s.push_str(&if failed {
                    p.red(&turn.text)
                } else {
                    p.green(&turn.text)
                });
                s.push('\n');
            }
        }
    }
    if t.stop == rstar_agent::episode::StopReason::ToolResponseTooLong {
        s.push_str(&p.red(
            "(the last tool response did not fit in the token budget and is not in the response)\n",
        ));
    }
    s.push_str(&rule("end".to_string()));
    s
}

/// `3 (2 output, 1 error)`, or `none`.
fn call_summary(t: &Trajectory, p: Paint) -> String {
    if t.tool_calls.is_empty() {
        return "none".to_string();
    }
    let mut counts: Vec<(OutcomeKind, usize)> = Vec::new();
    for c in &t.tool_calls {
        match counts.iter_mut().find(|(k, _)| *k == c.outcome.kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((c.outcome.kind, 1)),
        }
    }
    let parts: Vec<String> = counts
        .into_iter()
        .map(|(k, n)| {
            let text = format!("{n} {}", kind_name(k));
            if k.is_error() {
                p.red(&text)
            } else {
                p.green(&text)
            }
        })
        .collect();
    format!(
        "{} ({}) · error rate {:.0}%",
        t.tool_calls.len(),
        parts.join(", "),
        100.0 * t.tool_errors() as f64 / t.tool_calls.len() as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assistant_text_is_painted_around_calls_and_answers() {
        let p = Paint(true);
        let out = paint_assistant("a<c>x</c>b<answer>1</answer>", TemplateFormat::Compact, p);
        assert_eq!(
            out,
            "a\x1b[33m<c>x</c>\x1b[0mb\x1b[1;32m<answer>1</answer>\x1b[0m"
        );
        let plain = paint_assistant("a<c>x</c>b", TemplateFormat::Compact, Paint(false));
        assert_eq!(
            sanitize("a\x1b[31mb\n\tc\x07\x7f\u{9b}é"),
            "a␛[31mb\n\tc␇␡�é"
        );
        assert_eq!(plain, "a<c>x</c>b");
    }
}
