//! Token-entropy analysis (the paper's §6): which assistant tokens are the most uncertain, and
//! where they sit.
//!
//! Every assistant token with a recorded entropy (see [`Trajectory::entropies`]) is put in one
//! [`Group`]:
//!
//! 1. [`Group::AfterToolResponse`]: one of the first `after_tool` tokens of an assistant turn
//!    that follows a tool turn (the policy reacting to what the tool said);
//! 2. [`Group::Code`]: otherwise, a token overlapping a tool call, tags included
//!    (`<tool_call>…</tool_call>` in ChatML, `<c>…</c>` in the compact template; an unclosed
//!    call runs to the end of the turn);
//! 3. [`Group::Reasoning`]: everything else.
//!
//! The high-entropy tokens are the top `top` fraction of all assistant tokens of the input:
//! with `n` tokens, `k = ceil(top · n)`, the threshold is the k-th largest entropy and every
//! token at or above it is high (ties at the threshold are all kept, so there can be more than
//! `k`). [`analyze`] reports, per group, how many high-entropy tokens fall in it, their share of
//! all assistant tokens and of the high-entropy tokens, and the most frequent ones with example
//! contexts; then the same split for successful (reward ≥ 1), failed and unscored trajectories.
//!
//! ```
//! use rstar_analysis::entropy::{analyze, EntropyConfig, Group};
//! use rstar_episode::episode::{ByteTokenizer, Episode, Limits, TokenStats};
//! use rstar_episode::template::Template;
//! use rstar_episode::toolcall::ToolOutcome;
//!
//! let tok = ByteTokenizer;
//! let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "1+1?");
//! let stats = |n: usize, e: f32| TokenStats { entropies: vec![e; n], logprobs: vec![-0.1; n] };
//! ep.push_assistant_sampled(b"Go<c>print(2)</c>".map(u32::from).as_slice(), stats(17, 0.1))
//!     .unwrap();
//! ep.push_tool_outcomes(vec![ToolOutcome::code_judge(true, "", "2\n", "", 0.0)]).unwrap();
//! // The reaction to the tool ("Ok") is where the policy is unsure.
//! ep.push_assistant_sampled(b"Ok<answer>2</answer>".map(u32::from).as_slice(), {
//!     let mut s = stats(20, 0.1);
//!     s.entropies[0] = 2.0;
//!     s.entropies[1] = 2.0;
//!     s
//! })
//! .unwrap();
//! let traj = ep.finish().unwrap();
//! let cfg = EntropyConfig { top: 0.05, after_tool: 2, ..EntropyConfig::paper() };
//! let report = analyze(&[traj], &cfg).unwrap();
//! assert_eq!(report.high_entropy_tokens, 2);
//! assert_eq!(report.group(Group::AfterToolResponse).high, 2);
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::Error;
use rstar_episode::episode::{Role, Trajectory};

/// Options of the analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntropyConfig {
    /// The fraction of assistant tokens called high-entropy, in (0, 1].
    pub top: f64,
    /// How many assistant tokens after a tool response count as the reaction to it.
    pub after_tool: usize,
    /// How many distinct frequent tokens to list per group.
    pub top_tokens: usize,
    /// How many example contexts to keep per listed token.
    pub examples: usize,
    /// Characters of context on each side of an example token.
    pub context_chars: usize,
}

impl Default for EntropyConfig {
    fn default() -> Self {
        EntropyConfig::paper()
    }
}

impl EntropyConfig {
    /// The paper's split: the top 20% of tokens; here the first 20 tokens after a tool response
    /// count as the reaction to it, 8 tokens listed per group with 2 contexts of 24 characters.
    pub fn paper() -> Self {
        EntropyConfig {
            top: 0.2,
            after_tool: 20,
            top_tokens: 8,
            examples: 2,
            context_chars: 24,
        }
    }

    fn check(&self) -> Result<(), Error> {
        if !(self.top > 0.0 && self.top <= 1.0) {
            return Err(Error::Entropy(format!(
                "`top` must be in (0, 1], got {}",
                self.top
            )));
        }
        Ok(())
    }
}

/// Where an assistant token sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Ordinary reasoning text.
    Reasoning,
    /// Among the first `after_tool` tokens of a turn that follows a tool response.
    AfterToolResponse,
    /// Inside a tool call (its tags included).
    Code,
}

impl Group {
    /// All groups, in report order.
    pub const ALL: [Group; 3] = [Group::Reasoning, Group::AfterToolResponse, Group::Code];

    /// The snake_case name used in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Group::Reasoning => "reasoning",
            Group::AfterToolResponse => "after_tool_response",
            Group::Code => "code",
        }
    }
}

/// The outcome class of a trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Reward ≥ 1.
    Success,
    /// Reward < 1.
    Failure,
    /// No reward recorded.
    Unscored,
}

impl Outcome {
    /// The outcome of a trajectory.
    pub fn of(t: &Trajectory) -> Outcome {
        match t.reward {
            Some(r) if r >= 1.0 => Outcome::Success,
            Some(_) => Outcome::Failure,
            None => Outcome::Unscored,
        }
    }
}

/// One assistant token, located.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenView {
    /// Index of the assistant token in the trajectory (into `entropies`).
    pub index: usize,
    /// Index of the token in `response_ids`.
    pub position: usize,
    /// Index of its turn in `turns`.
    pub turn: usize,
    /// Its text.
    pub text: String,
    /// Its entropy (nats).
    pub entropy: f32,
    /// Its group.
    pub group: Group,
    /// Byte offset of the token in its turn's concatenated token texts.
    pub offset: usize,
}

/// Locates and classifies every assistant token of a trajectory with entropies.
///
/// Token texts come from `token_texts`; when it is empty a turn whose text has exactly one
/// character (or one byte) per token is split that way (the byte and character tokenizers);
/// otherwise this fails, because tokens cannot be placed without the tokenizer.
pub fn token_views(t: &Trajectory, after_tool: usize) -> Result<Vec<TokenView>, Error> {
    let n = t.assistant_token_count();
    if t.entropies.len() != n {
        return Err(Error::Entropy(format!(
            "`entropies` has {} entries for {n} assistant tokens",
            t.entropies.len()
        )));
    }
    let (open, close) = t.template.call_tags();
    let mut out = Vec::with_capacity(n);
    let mut k = 0;
    for (ti, turn) in t.turns.iter().enumerate() {
        if turn.role != Role::Assistant {
            continue;
        }
        let texts = turn_texts(t, ti, k)?;
        let joined: String = texts.concat();
        let spans = call_spans(&joined, open, close);
        let follows_tool = ti > 0 && t.turns[ti - 1].role == Role::Tool;
        let mut offset = 0;
        for (i, text) in texts.into_iter().enumerate() {
            let end = offset + text.len();
            let in_code = spans.iter().any(|&(s, e)| {
                (offset < e && end > s) || (offset == end && offset >= s && offset < e)
            });
            let group = if follows_tool && i < after_tool {
                Group::AfterToolResponse
            } else if in_code {
                Group::Code
            } else {
                Group::Reasoning
            };
            out.push(TokenView {
                index: k + i,
                position: turn.start + i,
                turn: ti,
                text,
                entropy: t.entropies[k + i],
                group,
                offset,
            });
            offset = end;
        }
        k += turn.len;
    }
    Ok(out)
}

/// The texts of the tokens of assistant turn `ti`, whose first token is assistant token `k`.
fn turn_texts(t: &Trajectory, ti: usize, k: usize) -> Result<Vec<String>, Error> {
    let turn = &t.turns[ti];
    if !t.token_texts.is_empty() {
        return Ok(t.token_texts[k..k + turn.len].to_vec());
    }
    if turn.text.chars().count() == turn.len {
        return Ok(turn.text.chars().map(String::from).collect());
    }
    if turn.text.len() == turn.len {
        return Ok(turn
            .text
            .bytes()
            .map(|b| String::from_utf8_lossy(&[b]).into_owned())
            .collect());
    }
    Err(Error::Entropy(format!(
        "`token_texts` is missing and turns[{ti}] has {} characters for {} tokens, so its tokens \
         cannot be located; record trajectories with token texts",
        turn.text.chars().count(),
        turn.len
    )))
}

/// Byte spans `[open start, close end)` of the tool calls in `text`; an unclosed call runs to
/// the end.
pub fn call_spans(text: &str, open: &str, close: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut at = 0;
    while let Some(s) = text[at..].find(open) {
        let s = at + s;
        let body = s + open.len();
        let e = match text[body..].find(close) {
            Some(c) => body + c + close.len(),
            None => text.len(),
        };
        spans.push((s, e));
        at = e;
    }
    spans
}

/// The k-th largest entropy for `k = ceil(top · n)` (see the module docs); `None` when empty.
pub fn threshold(entropies: &[f32], top: f64) -> Option<f32> {
    if entropies.is_empty() {
        return None;
    }
    let n = entropies.len();
    // The small slack keeps 0.2 · 10 at 2 despite binary rounding.
    let k = ((top * n as f64) - 1e-9).ceil().clamp(1.0, n as f64) as usize;
    let mut sorted = entropies.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    Some(sorted[k - 1])
}

/// A frequent high-entropy token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenFrequency {
    /// The token text, trimmed (whitespace-only tokens are shown escaped: `⏎`, `⇥`, `␠`).
    pub token: String,
    /// How many high-entropy occurrences.
    pub count: usize,
    /// Their mean entropy.
    pub mean_entropy: f64,
    /// The first few occurrences in context, the token marked `«…»`, newlines shown as `⏎`.
    pub examples: Vec<String>,
}

/// One group's numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupReport {
    /// The group.
    pub group: Group,
    /// Assistant tokens in the group.
    pub tokens: usize,
    /// High-entropy tokens in the group.
    pub high: usize,
    /// `high` over all assistant tokens.
    pub share_of_tokens: f64,
    /// `high` over all high-entropy tokens.
    pub share_of_high: f64,
    /// `high` over the group's tokens: how often the policy hesitates there.
    pub high_rate: f64,
    /// The most frequent high-entropy tokens (empty in the per-outcome split).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frequent: Vec<TokenFrequency>,
}

/// The split for one outcome class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutcomeReport {
    /// Which trajectories.
    pub outcome: Outcome,
    /// How many trajectories.
    pub trajectories: usize,
    /// Their assistant tokens.
    pub tokens: usize,
    /// Their high-entropy tokens (by the global threshold).
    pub high: usize,
    /// Per group; shares are within this outcome class.
    pub groups: Vec<GroupReport>,
}

/// The result of [`analyze`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntropyReport {
    /// The options used.
    pub config: EntropyConfig,
    /// Trajectories read.
    pub trajectories: usize,
    /// Those without entropies, left out.
    pub without_entropies: usize,
    /// Assistant tokens analysed.
    pub tokens: usize,
    /// Their mean entropy.
    pub mean_entropy: f64,
    /// The entropy at and above which a token is high.
    pub threshold: f32,
    /// High-entropy tokens.
    pub high_entropy_tokens: usize,
    /// Per group, in [`Group::ALL`] order.
    pub groups: Vec<GroupReport>,
    /// Per outcome: success, failure, then unscored when there are any.
    pub outcomes: Vec<OutcomeReport>,
}

impl EntropyReport {
    /// The numbers of one group.
    pub fn group(&self, g: Group) -> &GroupReport {
        self.groups
            .iter()
            .find(|r| r.group == g)
            .expect("every group is reported")
    }

    /// The split of one outcome class, if any trajectory has it.
    pub fn outcome(&self, o: Outcome) -> Option<&OutcomeReport> {
        self.outcomes.iter().find(|r| r.outcome == o)
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Analyses the trajectories that have entropies; fails when none has, or when one cannot be
/// located (see [`token_views`]; the error names the trajectory's index).
pub fn analyze(trajs: &[Trajectory], cfg: &EntropyConfig) -> Result<EntropyReport, Error> {
    cfg.check()?;
    let mut views: Vec<(usize, Vec<TokenView>)> = Vec::new();
    for (i, t) in trajs.iter().enumerate() {
        if !t.has_entropies() {
            continue;
        }
        let v = token_views(t, cfg.after_tool).map_err(|e| {
            Error::Entropy(format!(
                "trajectory {i} (`{}` sample {}): {e}",
                t.id, t.sample
            ))
        })?;
        views.push((i, v));
    }
    let all: Vec<f32> = views
        .iter()
        .flat_map(|(_, v)| v.iter().map(|t| t.entropy))
        .collect();
    let Some(thr) = threshold(&all, cfg.top) else {
        return Err(Error::Entropy(
            "no trajectory has per-token `entropies`: the file was written without them (`cargo xtask train` records none); run `rstar train … --record-entropy` or `rstar eval … --record-entropy` first"
                .to_string(),
        ));
    };
    let total_high = all.iter().filter(|&&e| e >= thr).count();
    let groups = Group::ALL
        .iter()
        .map(|&g| {
            let mut r = group_counts(
                views.iter().flat_map(|(_, v)| v),
                g,
                thr,
                all.len(),
                total_high,
            );
            r.frequent = frequent(trajs, &views, g, thr, cfg);
            r
        })
        .collect();
    let mut outcomes = Vec::new();
    for o in [Outcome::Success, Outcome::Failure, Outcome::Unscored] {
        let sel: Vec<&(usize, Vec<TokenView>)> = views
            .iter()
            .filter(|(i, _)| Outcome::of(&trajs[*i]) == o)
            .collect();
        if sel.is_empty() && o == Outcome::Unscored {
            continue;
        }
        let tokens: usize = sel.iter().map(|(_, v)| v.len()).sum();
        let high = sel
            .iter()
            .flat_map(|(_, v)| v)
            .filter(|t| t.entropy >= thr)
            .count();
        outcomes.push(OutcomeReport {
            outcome: o,
            trajectories: sel.len(),
            tokens,
            high,
            groups: Group::ALL
                .iter()
                .map(|&g| group_counts(sel.iter().flat_map(|(_, v)| v), g, thr, tokens, high))
                .collect(),
        });
    }
    Ok(EntropyReport {
        config: cfg.clone(),
        trajectories: trajs.len(),
        without_entropies: trajs.len() - views.len(),
        tokens: all.len(),
        mean_entropy: all.iter().map(|&e| f64::from(e)).sum::<f64>() / all.len() as f64,
        threshold: thr,
        high_entropy_tokens: total_high,
        groups,
        outcomes,
    })
}

fn group_counts<'a>(
    views: impl Iterator<Item = &'a TokenView>,
    g: Group,
    thr: f32,
    tokens: usize,
    high_total: usize,
) -> GroupReport {
    let (mut n, mut high) = (0, 0);
    for t in views.filter(|t| t.group == g) {
        n += 1;
        high += usize::from(t.entropy >= thr);
    }
    GroupReport {
        group: g,
        tokens: n,
        high,
        share_of_tokens: ratio(high, tokens),
        share_of_high: ratio(high, high_total),
        high_rate: ratio(high, n),
        frequent: Vec::new(),
    }
}

/// How a token is keyed and shown: trimmed, or escaped when it is only whitespace.
fn display_token(text: &str) -> String {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        escape(text).replace(' ', "␠")
    } else {
        escape(trimmed)
    }
}

/// Newlines as `⏎`, tabs as `⇥`, so a context stays on one line.
fn escape(text: &str) -> String {
    text.replace('\n', "⏎").replace('\t', "⇥")
}

/// Per token: count, entropy sum, order first seen, example contexts.
type Tally = (usize, f64, usize, Vec<String>);

fn frequent(
    trajs: &[Trajectory],
    views: &[(usize, Vec<TokenView>)],
    g: Group,
    thr: f32,
    cfg: &EntropyConfig,
) -> Vec<TokenFrequency> {
    let mut table: HashMap<String, Tally> = HashMap::new();
    let mut seen = 0;
    for (i, v) in views {
        for t in v.iter().filter(|t| t.group == g && t.entropy >= thr) {
            let key = display_token(&t.text);
            let entry = table.entry(key).or_insert((0, 0.0, seen, Vec::new()));
            seen += 1;
            entry.0 += 1;
            entry.1 += f64::from(t.entropy);
            if entry.3.len() < cfg.examples {
                entry.3.push(context(&trajs[*i], v, t, cfg.context_chars));
            }
        }
    }
    let mut rows: Vec<(String, Tally)> = table.into_iter().collect();
    rows.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.2.cmp(&b.1.2)));
    rows.into_iter()
        .take(cfg.top_tokens)
        .map(|(token, (count, sum, _, examples))| TokenFrequency {
            token,
            count,
            mean_entropy: sum / count as f64,
            examples,
        })
        .collect()
}

/// The token in its turn, with `chars` characters each side.
fn context(_t: &Trajectory, views: &[TokenView], tok: &TokenView, chars: usize) -> String {
    let turn: Vec<&TokenView> = views.iter().filter(|v| v.turn == tok.turn).collect();
    let before: String = turn
        .iter()
        .filter(|v| v.index < tok.index)
        .map(|v| v.text.as_str())
        .collect();
    let after: String = turn
        .iter()
        .filter(|v| v.index > tok.index)
        .map(|v| v.text.as_str())
        .collect();
    let nb = before.chars().count();
    let before: String = before.chars().skip(nb.saturating_sub(chars)).collect();
    let after: String = after.chars().take(chars).collect();
    escape(&format!("{before}«{}»{after}", tok.text))
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The report as a text table (what `rstar analyze entropy` prints).
pub fn render_table(r: &EntropyReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} trajectories ({} without entropies, left out), {} assistant tokens, mean entropy {:.3}",
        r.trajectories, r.without_entropies, r.tokens, r.mean_entropy
    );
    let _ = writeln!(
        s,
        "top {}: {} high-entropy tokens (entropy >= {:.4}); after-tool window {} tokens\n",
        pct(r.config.top),
        r.high_entropy_tokens,
        r.threshold,
        r.config.after_tool
    );
    let _ = writeln!(
        s,
        "{:<20} {:>8} {:>8} {:>10} {:>10} {:>10}",
        "group", "tokens", "high", "%all tok", "%high", "high rate"
    );
    for g in &r.groups {
        let _ = writeln!(
            s,
            "{:<20} {:>8} {:>8} {:>10} {:>10} {:>10}",
            g.group.as_str(),
            g.tokens,
            g.high,
            pct(g.share_of_tokens),
            pct(g.share_of_high),
            pct(g.high_rate)
        );
    }
    for g in &r.groups {
        if g.frequent.is_empty() {
            continue;
        }
        let _ = writeln!(
            s,
            "\nmost frequent high-entropy tokens: {}",
            g.group.as_str()
        );
        for f in &g.frequent {
            let _ = writeln!(
                s,
                "  {:>5}x  {:<16} H={:.3}  {}",
                f.count,
                format!("`{}`", f.token),
                f.mean_entropy,
                f.examples.first().map(String::as_str).unwrap_or("")
            );
            for e in f.examples.iter().skip(1) {
                let _ = writeln!(s, "  {:>5}   {:<16}          {e}", "", "");
            }
        }
    }
    let _ = writeln!(
        s,
        "\nby outcome (global threshold; shares within each outcome)"
    );
    let _ = writeln!(
        s,
        "{:<10} {:>6} {:>8} {:>8} {:>14} {:>21} {:>14}",
        "outcome", "trajs", "tokens", "high", "reasoning", "after_tool_response", "code"
    );
    for o in &r.outcomes {
        let cell = |g: Group| {
            let x = o.groups.iter().find(|x| x.group == g).expect("all groups");
            format!("{} ({})", x.high, pct(x.share_of_high))
        };
        let _ = writeln!(
            s,
            "{:<10} {:>6} {:>8} {:>8} {:>14} {:>21} {:>14}",
            format!("{:?}", o.outcome).to_lowercase(),
            o.trajectories,
            o.tokens,
            o.high,
            cell(Group::Reasoning),
            cell(Group::AfterToolResponse),
            cell(Group::Code)
        );
    }
    s
}

/// Two reports side by side (what `--compare A B` prints); each file has its own threshold.
pub fn render_compare(name_a: &str, a: &EntropyReport, name_b: &str, b: &EntropyReport) -> String {
    let mut s = String::new();
    let w = name_a.chars().count().max(name_b.chars().count()).max(14);
    let _ = writeln!(s, "{:<40} {:>w$} {:>w$}", "", name_a, name_b);
    let mut row = |label: &str, x: String, y: String| {
        let _ = writeln!(s, "{label:<40} {x:>w$} {y:>w$}");
    };
    row(
        "trajectories",
        a.trajectories.to_string(),
        b.trajectories.to_string(),
    );
    row(
        "assistant tokens",
        a.tokens.to_string(),
        b.tokens.to_string(),
    );
    row(
        "mean entropy",
        format!("{:.3}", a.mean_entropy),
        format!("{:.3}", b.mean_entropy),
    );
    row(
        "threshold",
        format!("{:.4}", a.threshold),
        format!("{:.4}", b.threshold),
    );
    row(
        "high-entropy tokens",
        a.high_entropy_tokens.to_string(),
        b.high_entropy_tokens.to_string(),
    );
    for g in Group::ALL {
        let (x, y) = (a.group(g), b.group(g));
        row(
            &format!("{} high", g.as_str()),
            x.high.to_string(),
            y.high.to_string(),
        );
        row(
            &format!("{} % of high", g.as_str()),
            pct(x.share_of_high),
            pct(y.share_of_high),
        );
        row(
            &format!("{} % of all tokens", g.as_str()),
            pct(x.share_of_tokens),
            pct(y.share_of_tokens),
        );
    }
    for o in [Outcome::Success, Outcome::Failure] {
        let cell = |r: &EntropyReport| {
            r.outcome(o)
                .map(|x| {
                    let g = x
                        .groups
                        .iter()
                        .find(|g| g.group == Group::AfterToolResponse)
                        .expect("all groups");
                    pct(g.share_of_high)
                })
                .unwrap_or_else(|| "-".to_string())
        };
        row(
            &format!("{o:?} after_tool_response % of high").to_lowercase(),
            cell(a),
            cell(b),
        );
    }
    for g in [Group::Reasoning, Group::AfterToolResponse] {
        let top = |r: &EntropyReport| {
            r.group(g)
                .frequent
                .iter()
                .take(3)
                .map(|f| f.token.clone())
                .collect::<Vec<_>>()
                .join(" ")
        };
        row(&format!("{} top tokens", g.as_str()), top(a), top(b));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_takes_the_kth_largest() {
        let e: Vec<f32> = (1..=10).map(|i| i as f32).collect();
        assert_eq!(threshold(&e, 0.2), Some(9.0));
        assert_eq!(threshold(&e, 0.25), Some(8.0)); // ceil(2.5) = 3
        assert_eq!(threshold(&e, 1.0), Some(1.0));
        assert_eq!(threshold(&e, 0.01), Some(10.0)); // at least one
        assert_eq!(threshold(&[], 0.2), None);
    }

    #[test]
    fn call_spans_include_tags_and_run_unclosed_calls_to_the_end() {
        assert_eq!(
            call_spans("ab<c>x</c>d<c>y", "<c>", "</c>"),
            vec![(2, 10), (11, 15)]
        );
        assert!(call_spans("plain", "<c>", "</c>").is_empty());
    }

    #[test]
    fn escape_keeps_contexts_on_one_line() {
        assert_eq!(display_token(" But "), "But");
        assert_eq!(display_token("\n"), "⏎");
        assert_eq!(display_token(" "), "␠");
    }
}
