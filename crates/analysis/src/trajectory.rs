//! One trajectory, rendered once: the facts both readers show ([`view`]), then HTML for the run
//! report ([`html`]) or terminal text for `rstar show` ([`text`], [`list_line`]).
//!
//! [`view`] decides everything the two outputs share: the verdict ([`Verdict`]: a reward above
//! zero is correct, no reward is unscored), the tool-call summary, the entropy summary, each
//! assistant turn split into text, tool calls and the answer, each call's line, which tool
//! turns answer a failed call, and the placeholders for a missing id or ground truth. The two
//! writers only choose markup and wording.
//!
//! Every text read from the file is hostile (the policy wrote it, or a program the policy
//! wrote printed it), so both writers pass it through one control-character map,
//! [`inert_char`]: HTML escaping ([`crate::report::html`]) and [`sanitize`] for the terminal
//! show newline and tab as they are and every other C0 control, DEL and the C1 controls as
//! visible symbols, so no ESC or CSI reaches a terminal and no markup reaches a page.
//!
//! ```
//! use rstar_analysis::trajectory::sanitize;
//! assert_eq!(sanitize("a\x1b[2Jb"), "a␛[2Jb");
//! ```

use std::fmt::Write as _;
use std::ops::Range;

use rstar_episode::episode::{Role, StopReason, Trajectory};
use rstar_episode::toolcall::OutcomeKind;

use crate::entropy::call_spans;
use crate::report::html as escape;

/// What `id` shows when a trajectory has none.
pub const NO_ID: &str = "(no id)";
/// What the ground truth shows when a trajectory has none.
pub const NO_TRUTH: &str = "unknown";
/// What the answer shows when none was extracted.
pub const NO_ANSWER: &str = "none";

/// How one character of untrusted text is shown: newline and tab as they are; the other C0
/// controls as their Unicode Control Pictures (`␛` for ESC, `␍` for CR), DEL as `␡`, the C1
/// controls (U+0080–U+009F, among them CSI) as `�`; everything else unchanged.
pub fn inert_char(c: char) -> char {
    match c {
        '\n' | '\t' => c,
        '\x7f' => '␡',
        '\u{80}'..='\u{9f}' => '�',
        c if (c as u32) < 0x20 => char::from_u32(0x2400 + c as u32).unwrap_or('�'),
        c => c,
    }
}

/// `text` with every character passed through [`inert_char`]: safe to print to a terminal.
pub fn sanitize(text: &str) -> String {
    text.chars().map(inert_char).collect()
}

/// Whether a trajectory's answer counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The reward is above zero (partial credit counts).
    Correct,
    /// The reward is zero or below (or not a number).
    Wrong,
    /// No reward was recorded.
    Unscored,
}

impl Verdict {
    /// The verdict of a reward.
    pub fn of(reward: Option<f32>) -> Self {
        match reward {
            None => Verdict::Unscored,
            Some(r) if r > 0.0 => Verdict::Correct,
            Some(_) => Verdict::Wrong,
        }
    }
}

/// The tool calls of a trajectory, counted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallSummary {
    /// All calls.
    pub total: usize,
    /// Calls that ended in an error, a timeout or a parse failure.
    pub errors: usize,
    /// Calls per outcome, in the order each outcome first occurs.
    pub by_kind: Vec<(OutcomeKind, usize)>,
}

/// The per-token entropies of a trajectory, summarised.
#[derive(Debug, Clone, PartialEq)]
pub struct EntropySummary {
    /// The mean entropy (nats).
    pub mean: f32,
    /// The largest entropy (nats).
    pub max: f32,
    /// The number of assistant tokens with an entropy.
    pub tokens: usize,
    /// Whether every such token has its text too, so tokens can be shaded one by one.
    pub shaded: bool,
}

/// A piece of an assistant turn's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span<'a> {
    /// Plain text.
    Text(&'a str),
    /// A tool call, tags included (an unclosed one runs to the end of the turn).
    Call(&'a str),
    /// The `<answer>…</answer>` block, tags included.
    Answer(&'a str),
}

/// One tool call under the assistant turn that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallLine {
    /// Its index among all the trajectory's calls.
    pub index: usize,
    /// The tool and the code's line count, `undecodable: MESSAGE` or `unknown` (unescaped:
    /// the message is the policy's text).
    pub what: String,
    /// How it ended.
    pub kind: OutcomeKind,
}

/// An assistant turn.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistantTurn<'a> {
    /// Its index among all turns.
    pub turn: usize,
    /// Its number among assistant turns, from 1.
    pub number: usize,
    /// Its tokens in `response_ids`.
    pub tokens: Range<usize>,
    /// Its text, cut into plain text, calls and the answer.
    pub spans: Vec<Span<'a>>,
    /// The mean entropy of its tokens, when recorded and the turn has tokens.
    pub mean_entropy: Option<f32>,
    /// Its tokens in `entropies` and `token_texts`, when they can be shaded one by one.
    pub shaded: Option<Range<usize>>,
    /// The calls it made.
    pub calls: Vec<CallLine>,
}

/// A tool turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolTurn<'a> {
    /// Its index among all turns.
    pub turn: usize,
    /// Its tokens in `response_ids`.
    pub tokens: Range<usize>,
    /// Its text.
    pub text: &'a str,
    /// Whether a call it answers failed.
    pub failed: bool,
}

/// A turn of the response.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnView<'a> {
    /// Written by the policy.
    Assistant(AssistantTurn<'a>),
    /// The tool's response.
    Tool(ToolTurn<'a>),
}

/// What both outputs show of a trajectory, decided once (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct View<'a> {
    /// The trajectory.
    pub trajectory: &'a Trajectory,
    /// Its id, or [`NO_ID`].
    pub id: &'a str,
    /// The extracted answer.
    pub answer: Option<&'a str>,
    /// The ground truth, or [`NO_TRUTH`].
    pub truth: &'a str,
    /// Whether the answer counted.
    pub verdict: Verdict,
    /// Its number of assistant turns.
    pub assistant_turns: usize,
    /// Its tool calls, counted.
    pub calls: CallSummary,
    /// Its entropies, summarised, when recorded.
    pub entropy: Option<EntropySummary>,
    /// Every turn in order.
    pub turns: Vec<TurnView<'a>>,
    /// Whether the rollout stopped because the last tool response did not fit.
    pub response_too_long: bool,
}

/// The facts of `t` that both outputs show.
pub fn view(t: &Trajectory) -> View<'_> {
    let entropy = t.has_entropies().then(|| EntropySummary {
        mean: t.entropies.iter().sum::<f32>() / t.entropies.len() as f32,
        max: t.entropies.iter().copied().fold(0.0, f32::max),
        tokens: t.entropies.len(),
        shaded: t.token_texts.len() == t.entropies.len(),
    });
    let shade = entropy.as_ref().is_some_and(|e| e.shaded);
    let mut turns = Vec::with_capacity(t.turns.len());
    let mut assistant_turn = 0usize;
    let mut token_at = 0usize;
    for (i, turn) in t.turns.iter().enumerate() {
        let tokens = turn.start..turn.start + turn.len;
        match turn.role {
            Role::Assistant => {
                let at = token_at..token_at + turn.len;
                token_at += turn.len;
                let recorded = t.entropies.get(at.clone()).filter(|_| t.has_entropies());
                let mean_entropy = recorded
                    .filter(|e| !e.is_empty())
                    .map(|e| e.iter().sum::<f32>() / e.len() as f32);
                let calls = t
                    .tool_calls
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.turn == assistant_turn)
                    .map(|(index, c)| CallLine {
                        index,
                        what: match (&c.call, &c.failure) {
                            (Some(call), _) => format!(
                                "{} ({} lines)",
                                call.name.as_str(),
                                call.code.lines().count()
                            ),
                            (None, Some(f)) => format!("undecodable: {}", f.message),
                            (None, None) => "unknown".to_string(),
                        },
                        kind: c.outcome.kind,
                    })
                    .collect();
                assistant_turn += 1;
                turns.push(TurnView::Assistant(AssistantTurn {
                    turn: i,
                    number: assistant_turn,
                    tokens,
                    spans: spans(&turn.text, t.template.call_tags()),
                    mean_entropy,
                    shaded: (shade && recorded.is_some()).then_some(at),
                    calls,
                }));
            }
            Role::Tool => turns.push(TurnView::Tool(ToolTurn {
                turn: i,
                tokens,
                text: &turn.text,
                failed: t
                    .tool_calls
                    .iter()
                    .filter(|c| c.turn + 1 == assistant_turn)
                    .any(|c| c.outcome.kind.is_error()),
            })),
        }
    }
    View {
        trajectory: t,
        id: if t.id.is_empty() { NO_ID } else { &t.id },
        answer: t.answer.as_deref(),
        truth: t.ground_truth.as_deref().unwrap_or(NO_TRUTH),
        verdict: Verdict::of(t.reward),
        assistant_turns: assistant_turn,
        calls: call_summary(t),
        entropy,
        turns,
        response_too_long: t.stop == StopReason::ToolResponseTooLong,
    }
}

fn call_summary(t: &Trajectory) -> CallSummary {
    let mut by_kind: Vec<(OutcomeKind, usize)> = Vec::new();
    for c in &t.tool_calls {
        match by_kind.iter_mut().find(|(k, _)| *k == c.outcome.kind) {
            Some((_, n)) => *n += 1,
            None => by_kind.push((c.outcome.kind, 1)),
        }
    }
    CallSummary {
        total: t.tool_calls.len(),
        errors: t.tool_errors(),
        by_kind,
    }
}

/// `text` cut at its tool calls (between `tags`) and `<answer>` blocks.
fn spans<'a>(text: &'a str, (open, close): (&str, &str)) -> Vec<Span<'a>> {
    let mut marks: Vec<(usize, usize, bool)> = call_spans(text, open, close)
        .into_iter()
        .map(|(a, b)| (a, b, true))
        .collect();
    marks.extend(
        call_spans(text, "<answer>", "</answer>")
            .into_iter()
            .map(|(a, b)| (a, b, false)),
    );
    marks.sort();
    let mut out = Vec::new();
    let mut at = 0;
    for (a, b, call) in marks {
        // An answer inside a call (or a call inside an answer) belongs to the outer one.
        if a < at {
            continue;
        }
        if a > at {
            out.push(Span::Text(&text[at..a]));
        }
        out.push(if call {
            Span::Call(&text[a..b])
        } else {
            Span::Answer(&text[a..b])
        });
        at = b;
    }
    if at < text.len() {
        out.push(Span::Text(&text[at..]));
    }
    out
}

/// The trajectory as a `<details>` element of the run report, with the element id `anchor`:
/// a summary line with badges, then the prompt and every turn; everything from the file escaped.
pub fn html(v: &View<'_>, anchor: &str) -> String {
    let t = v.trajectory;
    let mut s = String::new();
    let correct = v.verdict == Verdict::Correct;
    let mut classes = vec!["traj", if correct { "correct" } else { "wrong" }];
    if v.calls.total > 0 {
        classes.push("has-calls");
    }
    if v.calls.errors > 0 {
        classes.push("has-errors");
    }
    let reward_badge = match t.reward {
        Some(r) => format!(
            "<span class=\"badge {}\">reward {}</span>",
            if correct { "good" } else { "bad" },
            escape(&r.to_string())
        ),
        None => "<span class=\"badge\">unscored</span>".to_string(),
    };
    let error_badge = if v.calls.errors > 0 {
        format!(
            " <span class=\"badge err\">{} tool error(s)</span>",
            v.calls.errors
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "<details class=\"{}\" id=\"{anchor}\" data-reward=\"{}\"><summary>{reward_badge}{error_badge} <b>{}</b> #{} · answer <code>{}</code> · truth <code>{}</code> · stop {} · {} turns · {} tool calls · {} tokens</summary>",
        classes.join(" "),
        escape(&t.reward.unwrap_or(0.0).to_string()),
        escape(v.id),
        t.sample,
        escape(v.answer.unwrap_or(NO_ANSWER)),
        escape(v.truth),
        escape(t.stop.as_str()),
        v.assistant_turns,
        v.calls.total,
        t.response_ids.len()
    );
    let _ = writeln!(
        s,
        "<div class=\"turn\"><div class=\"who\">prompt</div><pre class=\"prompt\">{}</pre></div>",
        escape(&t.prompt)
    );
    if let Some(e) = &v.entropy {
        let _ = writeln!(
            s,
            "<p class=\"muted\">entropy: mean {:.3}, max {:.3} nats over {} assistant tokens{}</p>",
            e.mean,
            e.max,
            e.tokens,
            if e.shaded {
                " (tokens shaded by entropy; hover for the value)"
            } else {
                ""
            }
        );
    }
    let max_entropy = v.entropy.as_ref().map_or(0.0, |e| e.max);
    for turn in &v.turns {
        match turn {
            TurnView::Assistant(a) => {
                let body = match &a.shaded {
                    Some(at) => entropy_html(
                        &t.token_texts[at.clone()],
                        &t.entropies[at.clone()],
                        max_entropy,
                    ),
                    None => assistant_html(&a.spans),
                };
                let _ = writeln!(
                    s,
                    "<div class=\"turn assistant\"><div class=\"who\">assistant turn {}</div><pre>{body}</pre>",
                    a.number
                );
                for c in &a.calls {
                    let _ = writeln!(
                        s,
                        "<div class=\"call {}\">▶ tool call {}: {} → {}</div>",
                        if c.kind.is_error() { "err" } else { "ok" },
                        c.index,
                        escape(&c.what),
                        c.kind.as_str()
                    );
                }
                s.push_str("</div>\n");
            }
            TurnView::Tool(tool) => {
                let _ = writeln!(
                    s,
                    "<div class=\"turn tool\"><div class=\"who\">tool response{}</div><pre class=\"tool {}\">{}</pre></div>",
                    if tool.failed { " (error)" } else { "" },
                    if tool.failed { "err" } else { "ok" },
                    escape(tool.text)
                );
            }
        }
    }
    if v.response_too_long {
        s.push_str("<p class=\"call err\">The last tool response did not fit in the token budget and is not in the response.</p>\n");
    }
    s.push_str("</details>\n");
    s
}

/// The HTML of an assistant turn's text: tool calls and answers marked, all escaped.
fn assistant_html(spans: &[Span<'_>]) -> String {
    let mut out = String::new();
    for span in spans {
        match span {
            Span::Text(text) => out.push_str(&escape(text)),
            Span::Call(text) => {
                let _ = write!(out, "<mark class=\"code\">{}</mark>", escape(text));
            }
            Span::Answer(text) => {
                let _ = write!(out, "<mark class=\"answer\">{}</mark>", escape(text));
            }
        }
    }
    out
}

/// Tokens shaded by entropy: red with opacity `0.6 · e / max`, the value in the tooltip.
fn entropy_html(texts: &[String], entropies: &[f32], max: f32) -> String {
    let mut out = String::new();
    for (text, &e) in texts.iter().zip(entropies) {
        let alpha = if max > 0.0 {
            0.6 * (e / max).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let _ = write!(
            out,
            "<span class=\"tok\" style=\"background:rgba(222,45,38,{alpha:.2})\" title=\"entropy {e:.3}\">{}</span>",
            escape(text)
        );
    }
    out
}

/// How [`text`] and [`list_line`] write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TextStyle {
    /// ANSI colours.
    pub color: bool,
    /// The whole prompt (otherwise its last [`PROMPT_TAIL`] characters).
    pub whole_prompt: bool,
}

/// Characters of the prompt [`text`] shows unless asked for all of it.
pub const PROMPT_TAIL: usize = 240;

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
    /// Green when the call worked, red when it failed.
    fn outcome(self, failed: bool, t: &str) -> String {
        if failed { self.red(t) } else { self.green(t) }
    }
}

/// The reward, green when correct, red when wrong, `unscored` dimmed.
fn reward_text(reward: Option<f32>, p: Paint) -> String {
    match (Verdict::of(reward), reward) {
        (Verdict::Correct, Some(r)) => p.green(&r.to_string()),
        (_, Some(r)) => p.red(&r.to_string()),
        (_, None) => p.dim("unscored"),
    }
}

/// One line of `rstar show --list`: the trajectory at `index` of its file, its reward, stop,
/// turns, calls and tokens.
pub fn list_line(index: usize, t: &Trajectory, style: &TextStyle) -> String {
    let p = Paint(style.color);
    format!(
        "{index:>4}  {} #{}  reward {}  stop {}  turns {}  calls {} ({} errors)  tokens {}\n",
        p.bold(&sanitize(if t.id.is_empty() { NO_ID } else { &t.id })),
        t.sample,
        reward_text(t.reward, p),
        t.stop.as_str(),
        t.assistant_turns(),
        t.tool_calls.len(),
        t.tool_errors(),
        t.response_ids.len()
    )
}

/// The trajectory as `rstar show` prints it, `index` of `of` in its file: a header (id, stop,
/// reward, answer, ground truth, turns, tool calls, entropy), the prompt, then every turn under
/// a rule; everything from the file passed through [`sanitize`].
pub fn text(v: &View<'_>, index: usize, of: usize, style: &TextStyle) -> String {
    let t = v.trajectory;
    let p = Paint(style.color);
    let mut s = String::new();
    let rule = |title: String| format!("{}\n", p.dim(&format!("── {title} ──")));
    s.push_str(&format!(
        "{} {index} of {of} · id {} · sample {} · template {:?}\n",
        p.bold("trajectory"),
        p.bold(&sanitize(v.id)),
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
        reward_text(t.reward, p),
        v.answer
            .map_or_else(|| p.dim(NO_ANSWER), |a| p.bold(&sanitize(a))),
        sanitize(v.truth)
    ));
    let assistant = t.assistant_token_count();
    s.push_str(&format!(
        "turns: {} assistant · response tokens: {} ({assistant} assistant, {} tool)\n",
        v.assistant_turns,
        t.response_ids.len(),
        t.response_ids.len() - assistant
    ));
    s.push_str(&format!("tool calls: {}\n", call_summary_text(&v.calls, p)));
    if let Some(e) = &v.entropy {
        s.push_str(&format!(
            "entropy: mean {:.3} · max {:.3} nats over {} tokens\n",
            e.mean, e.max, e.tokens
        ));
    }

    let chars = t.prompt.chars().count();
    if style.whole_prompt || chars <= PROMPT_TAIL {
        s.push_str(&rule("prompt".to_string()));
        s.push_str(&p.dim(&sanitize(&t.prompt)));
    } else {
        s.push_str(&rule(format!(
            "prompt (last {PROMPT_TAIL} of {chars} characters; --prompt for all)"
        )));
        let tail: String = t.prompt.chars().skip(chars - PROMPT_TAIL).collect();
        s.push_str(&p.dim(&format!("…{}", sanitize(&tail))));
    }
    s.push('\n');

    for turn in &v.turns {
        match turn {
            TurnView::Assistant(a) => {
                let mut title = format!(
                    "turn {} · assistant {} · tokens {}..{}",
                    a.turn, a.number, a.tokens.start, a.tokens.end
                );
                if let Some(mean) = a.mean_entropy {
                    title.push_str(&format!(" · mean entropy {mean:.3}"));
                }
                s.push_str(&rule(title));
                s.push_str(&assistant_text(&a.spans, p));
                s.push('\n');
                for c in &a.calls {
                    s.push_str(&format!(
                        "{} call {}: {} → {}\n",
                        p.cyan("▶"),
                        c.index,
                        sanitize(&c.what),
                        p.outcome(c.kind.is_error(), c.kind.as_str())
                    ));
                }
            }
            TurnView::Tool(tool) => {
                s.push_str(&rule(format!(
                    "turn {} · tool response · tokens {}..{}",
                    tool.turn, tool.tokens.start, tool.tokens.end
                )));
                s.push_str(&p.outcome(tool.failed, &sanitize(tool.text)));
                s.push('\n');
            }
        }
    }
    if v.response_too_long {
        s.push_str(&p.red(
            "(the last tool response did not fit in the token budget and is not in the response)\n",
        ));
    }
    s.push_str(&rule("end".to_string()));
    s
}

/// An assistant turn's text for the terminal: tool calls yellow, the answer bold green.
fn assistant_text(spans: &[Span<'_>], p: Paint) -> String {
    let mut out = String::new();
    for span in spans {
        out.push_str(&match span {
            Span::Text(text) => sanitize(text),
            Span::Call(text) => p.yellow(&sanitize(text)),
            Span::Answer(text) => p.answer(&sanitize(text)),
        });
    }
    out
}

/// `3 (2 output, 1 error) · error rate 33%`, or `none`.
fn call_summary_text(calls: &CallSummary, p: Paint) -> String {
    if calls.total == 0 {
        return "none".to_string();
    }
    let parts: Vec<String> = calls
        .by_kind
        .iter()
        .map(|&(k, n)| p.outcome(k.is_error(), &format!("{n} {}", k.as_str())))
        .collect();
    format!(
        "{} ({}) · error rate {:.0}%",
        calls.total,
        parts.join(", "),
        100.0 * calls.errors as f64 / calls.total as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstar_episode::episode::{ByteTokenizer, Episode, Limits, Score};
    use rstar_episode::template::{Template, TemplateFormat};
    use rstar_episode::toolcall::{ToolCall, ToolOutcome};

    /// Text a hostile program could print: a screen clear, a title-setting OSC, a C1 CSI and
    /// markup.
    const HOSTILE: &str = "\x1b[2J\x1b]0;pwned\x07\u{9b}31m<script>alert(1)</script>";

    /// Three assistant turns: a call that fails, a malformed call, then the answer; rewarded
    /// `reward`.
    fn rollout(reward: f32) -> Trajectory {
        let tok = ByteTokenizer;
        let template = Template::chatml();
        let mut turns = vec![
            template.render_call_turn("Compute.", &ToolCall::python("prnt(6*7)")),
            "Again.</reason>\n<tool_call>not json</tool_call><|im_end|>".to_string(),
            template.render_answer_turn("It is 42.", "42"),
        ]
        .into_iter();
        Episode::new(&tok, &template, Limits::rstar2_agent(), "What is 6*7?")
            .with_id("mul", 3)
            .with_ground_truth("42")
            .run(
                |_, _| turns.next().unwrap(),
                |_| ToolOutcome::new(OutcomeKind::Error, "NameError: name 'prnt' is not defined"),
            )
            .unwrap()
            .finish_scored(|_| Score {
                answer: Some("42".into()),
                reward,
            })
            .unwrap()
    }

    #[test]
    fn the_view_holds_the_shared_facts() {
        let mut t = rollout(1.0);
        let n = t.assistant_token_count();
        t.attach_token_stats(vec![0.5; n], Vec::new()).unwrap();
        let v = view(&t);
        assert_eq!((v.id, v.truth, v.answer), ("mul", "42", Some("42")));
        assert_eq!(v.verdict, Verdict::Correct);
        assert_eq!(v.assistant_turns, 3);
        assert_eq!(
            v.calls,
            CallSummary {
                total: 2,
                errors: 2,
                by_kind: vec![(OutcomeKind::Error, 1), (OutcomeKind::ParseFailure, 1)],
            }
        );
        let e = v.entropy.as_ref().unwrap();
        assert!((e.mean - 0.5).abs() < 1e-6 && (e.max - 0.5).abs() < 1e-6);
        assert_eq!((e.tokens, e.shaded), (n, false));
        assert!(!v.response_too_long);
        let kinds: Vec<&str> = v
            .turns
            .iter()
            .map(|turn| match turn {
                TurnView::Assistant(_) => "assistant",
                TurnView::Tool(_) => "tool",
            })
            .collect();
        assert_eq!(
            kinds,
            ["assistant", "tool", "assistant", "tool", "assistant"]
        );
        let TurnView::Assistant(first) = &v.turns[0] else {
            unreachable!()
        };
        assert_eq!((first.turn, first.number, first.tokens.start), (0, 1, 0));
        assert_eq!(first.spans[0], Span::Text("Compute.</reason>\n"));
        assert!(matches!(first.spans[1], Span::Call(c) if c.starts_with("<tool_call>")));
        assert_eq!(first.shaded, None);
        assert!((first.mean_entropy.unwrap() - 0.5).abs() < 1e-6);
        assert_eq!(
            first.calls[0].what,
            "python_code_with_standard_io (1 lines)"
        );
        let TurnView::Assistant(second) = &v.turns[2] else {
            unreachable!()
        };
        assert_eq!(second.calls[0].index, 1);
        assert_eq!(second.calls[0].kind, OutcomeKind::ParseFailure);
        assert!(
            second.calls[0].what.starts_with("undecodable: "),
            "{:?}",
            second.calls
        );
        let TurnView::Tool(tool) = &v.turns[1] else {
            unreachable!()
        };
        assert!(tool.failed && tool.text.contains("NameError"));
        assert_eq!(tool.tokens.start, first.tokens.end);
        let TurnView::Assistant(last) = &v.turns[4] else {
            unreachable!()
        };
        assert!(
            last.spans
                .iter()
                .any(|s| matches!(s, Span::Answer(a) if a.contains("\\boxed{42}")))
        );

        // Placeholders, and token texts make the turns shadeable.
        t.id.clear();
        t.ground_truth = None;
        t.reward = None;
        let texts = (0..n).map(|_| "x".to_string()).collect();
        t.attach_token_texts(texts).unwrap();
        let v = view(&t);
        assert_eq!(
            (v.id, v.truth, v.verdict),
            (NO_ID, NO_TRUTH, Verdict::Unscored)
        );
        let TurnView::Assistant(first) = &v.turns[0] else {
            unreachable!()
        };
        assert_eq!(first.shaded, Some(first.tokens.clone()));
    }

    #[test]
    fn verdicts_follow_the_reward_sign() {
        assert_eq!(Verdict::of(Some(1.0)), Verdict::Correct);
        assert_eq!(Verdict::of(Some(0.5)), Verdict::Correct);
        assert_eq!(Verdict::of(Some(0.0)), Verdict::Wrong);
        assert_eq!(Verdict::of(Some(f32::NAN)), Verdict::Wrong);
        assert_eq!(Verdict::of(None), Verdict::Unscored);
    }

    #[test]
    fn half_a_reward_is_correct_in_both_outputs() {
        let t = rollout(0.5);
        let v = view(&t);
        let page = html(&v, "t0-0");
        assert!(
            page.starts_with("<details class=\"traj correct has-calls has-errors\" id=\"t0-0\" data-reward=\"0.5\"><summary><span class=\"badge good\">reward 0.5</span>"),
            "{page}"
        );
        let style = TextStyle {
            color: true,
            whole_prompt: false,
        };
        let out = text(&v, 0, 1, &style);
        assert!(out.contains("reward: \x1b[32m0.5\x1b[0m"), "{out}");
        let line = list_line(0, &t, &style);
        assert!(line.contains("reward \x1b[32m0.5\x1b[0m"), "{line}");
        let wrong = rollout(0.0);
        assert!(text(&view(&wrong), 0, 1, &style).contains("reward: \x1b[31m0\x1b[0m"));
        assert!(html(&view(&wrong), "a").starts_with("<details class=\"traj wrong"));
    }

    /// Every ESC in `out` opens one of the writer's own colour codes (`ESC [ digits ; m`).
    fn only_own_escapes(out: &str) -> bool {
        out.match_indices('\x1b').all(|(at, _)| {
            let rest = &out[at + 1..];
            rest.starts_with('[')
                && rest[1..]
                    .find(|c: char| !(c.is_ascii_digit() || c == ';'))
                    .is_some_and(|end| rest[1 + end..].starts_with('m'))
        })
    }

    #[test]
    fn hostile_text_comes_out_inert_in_both_outputs() {
        let mut t = rollout(1.0);
        t.id = format!("mul{HOSTILE}");
        t.prompt.push_str(HOSTILE);
        t.answer = Some(format!("42{HOSTILE}"));
        t.ground_truth = Some(format!("42{HOSTILE}"));
        t.tool_calls[1].failure.as_mut().unwrap().message = HOSTILE.to_string();
        for turn in &mut t.turns {
            turn.text.push_str(HOSTILE);
        }
        let v = view(&t);
        let page = html(&v, "t0-0");
        for bad in ['\x1b', '\x07', '\u{9b}'] {
            assert!(!page.contains(bad), "{bad:?} in {page}");
        }
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("␛[2J␛]0;pwned␇�31m&lt;script&gt;alert(1)&lt;/script&gt;"));
        for color in [false, true] {
            let style = TextStyle {
                color,
                whole_prompt: true,
            };
            for out in [text(&v, 0, 1, &style), list_line(0, &t, &style)] {
                assert!(only_own_escapes(&out), "a hostile escape in\n{out}");
                assert!(!out.contains('\x07') && !out.contains('\u{9b}'), "{out}");
                assert!(out.contains("␛[2J␛]0;pwned␇�31m<script>"), "{out}");
            }
        }
        let plain = text(&v, 0, 1, &TextStyle::default());
        // The id, answer, truth, prompt and undecodable call, and the five turns (tool
        // responses among them).
        assert_eq!(plain.matches("␛[2J").count(), 10, "{plain}");
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(
            sanitize("a\x1b[31mb\n\tc\x07\x7f\u{9b}é\r"),
            "a␛[31mb\n\tc␇␡�é␍"
        );
    }

    #[test]
    fn assistant_text_marks_calls_and_answers_after_escaping() {
        let tags = TemplateFormat::Compact.call_tags();
        let out = assistant_html(&spans("a<c>x<y</c>b<answer>1</answer>", tags));
        assert_eq!(
            out,
            "a<mark class=\"code\">&lt;c&gt;x&lt;y&lt;/c&gt;</mark>b<mark class=\"answer\">&lt;answer&gt;1&lt;/answer&gt;</mark>"
        );
        let painted = assistant_text(&spans("a<c>x</c>b<answer>1</answer>", tags), Paint(true));
        assert_eq!(
            painted,
            "a\x1b[33m<c>x</c>\x1b[0mb\x1b[1;32m<answer>1</answer>\x1b[0m"
        );
        let plain = assistant_text(&spans("a<c>x</c>b", tags), Paint(false));
        assert_eq!(plain, "a<c>x</c>b");
    }
}
