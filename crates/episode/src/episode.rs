//! The episode state machine: one multi-turn rollout, with no IO and no model.
//!
//! An [`Episode`] is fed what the policy wrote and what the tools returned, and says what comes
//! next ([`Step`]): generate a turn (with the token budget left), call tools (with the decoded
//! calls), or stop (with a [`StopReason`]). When it stops it yields a [`Trajectory`]: the token
//! ids of the whole response, a loss mask that is 1 on assistant tokens and 0 on tool-response
//! tokens, every turn's text, every tool call with its outcome, the truncation flag and,
//! given a scorer, the extracted answer and reward.
//!
//! The termination rules are those of the reference `RStar2AgentLoop`, checked after every
//! assistant turn in this order:
//!
//! 1. **token budget**: the response reached `max_response_tokens` (the turn was cut, or it
//!    filled the budget and still wanted a tool or never finished);
//! 2. **no tool call**: the turn contains no `<tool_call>` (malformed calls count as calls);
//! 3. **max turns**: this was turn `max_assistant_turns`;
//!
//! and after the tools ran:
//!
//! 4. **tool response would not fit**: appending the tool turn would reach the budget, so a
//!    trajectory always ends on an assistant turn.
//!
//! ```
//! use rstar_episode::episode::{ByteTokenizer, Episode, Limits, Step, StopReason};
//! use rstar_episode::template::Template;
//! use rstar_episode::toolcall::ToolOutcome;
//!
//! let tok = ByteTokenizer;
//! let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "What is 6*7?");
//! let step = ep.push_assistant_text("Multiply.<c>print(6*7)</c>").unwrap();
//! let Step::CallTools(calls) = step else { panic!("{step:?}") };
//! assert_eq!(calls[0].code, "print(6*7)");
//! let out = ToolOutcome::code_judge(true, "", "42\n", "", 0.01);
//! ep.push_tool_outcomes(vec![out]).unwrap();
//! let step = ep.push_assistant_text("<answer>\\boxed{42}</answer>").unwrap();
//! assert_eq!(step, Step::Done(StopReason::NoToolCall));
//! let traj = ep.finish().unwrap();
//! assert_eq!(traj.response_text(), "Multiply.<c>print(6*7)</c>\nO:42\nA:<answer>\\boxed{42}</answer>");
//! // "\nO:42\nA:" is the tool turn: 8 bytes masked out of the loss.
//! assert_eq!(traj.loss_mask.iter().filter(|&&m| m == 0).count(), 8);
//! ```

use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::template::{Template, TemplateFormat};
use crate::toolcall::{ParseFailure, ParsedCall, ToolCall, ToolOutcome};
use crate::{Error, IoError, LineError};

/// Text ↔ token ids. The policy crate's tokenizers implement it through an adapter; tests and
/// examples use [`ByteTokenizer`].
pub trait TextTokenizer {
    /// The ids of `text`.
    fn encode(&self, text: &str) -> Vec<u32>;
    /// The text of `ids`.
    fn decode(&self, ids: &[u32]) -> String;
}

impl<T: TextTokenizer + ?Sized> TextTokenizer for &T {
    fn encode(&self, text: &str) -> Vec<u32> {
        (**self).encode(text)
    }
    fn decode(&self, ids: &[u32]) -> String {
        (**self).decode(ids)
    }
}

impl<T: TextTokenizer + ?Sized> TextTokenizer for std::sync::Arc<T> {
    fn encode(&self, text: &str) -> Vec<u32> {
        (**self).encode(text)
    }
    fn decode(&self, ids: &[u32]) -> String {
        (**self).decode(ids)
    }
}

/// One token per UTF-8 byte. Decoding replaces invalid sequences (a cut in the middle of a
/// character) with U+FFFD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByteTokenizer;

impl TextTokenizer for ByteTokenizer {
    fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }
    fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().map(|&i| i.min(255) as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Limits of one rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Most assistant turns (the reference's `max_assistant_turns`).
    pub max_assistant_turns: usize,
    /// Most response tokens, assistant and tool tokens together (verl's `response_length`).
    pub max_response_tokens: usize,
    /// Each tool response body is cut in the middle to this many characters (verl's
    /// `max_tool_response_length`); `None` keeps it whole.
    pub max_tool_response_chars: Option<usize>,
    /// Calls run per turn; later calls of the same turn are ignored (verl's
    /// `max_parallel_calls`).
    pub max_calls_per_turn: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::rstar2_agent()
    }
}

impl Limits {
    /// The reference training example: 5 turns, 8192 response tokens (stage 1), tool
    /// responses cut to 256 characters, one call per turn.
    pub fn rstar2_agent() -> Self {
        Limits {
            max_assistant_turns: 5,
            max_response_tokens: 8192,
            max_tool_response_chars: Some(256),
            max_calls_per_turn: 1,
        }
    }

    /// The embedded default's character model: 4 turns, 320 response tokens, tool responses cut
    /// to 64 characters, one call per turn.
    pub fn compact() -> Self {
        Limits {
            max_assistant_turns: 4,
            max_response_tokens: 320,
            max_tool_response_chars: Some(64),
            max_calls_per_turn: 1,
        }
    }
}

/// Why a rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The last assistant turn called no tool: the policy is done.
    NoToolCall,
    /// The last assistant turn was the last one allowed.
    MaxTurns,
    /// The response reached the token budget.
    TokenBudget,
    /// The tool turn would not fit in the budget.
    ToolResponseTooLong,
}

impl StopReason {
    /// The snake_case name, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::NoToolCall => "no_tool_call",
            StopReason::MaxTurns => "max_turns",
            StopReason::TokenBudget => "token_budget",
            StopReason::ToolResponseTooLong => "tool_response_too_long",
        }
    }

    /// Whether this ending counts as truncation (the response ran out of room).
    pub fn is_truncation(self) -> bool {
        matches!(
            self,
            StopReason::TokenBudget | StopReason::ToolResponseTooLong
        )
    }
}

/// What the caller should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Generate the next assistant turn from [`Episode::context_ids`], at most `max_tokens`.
    Generate {
        /// Tokens left in the response budget.
        max_tokens: usize,
    },
    /// Run these calls and pass their outcomes, in order, to [`Episode::push_tool_outcomes`].
    CallTools(Vec<ToolCall>),
    /// The rollout is over; call [`Episode::finish`].
    Done(StopReason),
}

/// Who wrote a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The policy (loss mask 1).
    Assistant,
    /// The tool turn that answers the policy's calls (loss mask 0).
    Tool,
}

/// One turn of the response and where its tokens are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// Who wrote it.
    pub role: Role,
    /// Its text (the decoded tokens for assistant turns).
    pub text: String,
    /// Index of its first token in `response_ids`.
    pub start: usize,
    /// Its number of tokens.
    pub len: usize,
    /// The weight version of the engine that wrote it (assistant turns, where the rollout
    /// driver knows it); `None` for tool turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<String>,
}

/// One tool call and its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The assistant turn (0-based) that made the call.
    pub turn: usize,
    /// The decoded call; `None` when it failed to parse.
    pub call: Option<ToolCall>,
    /// Why it failed to parse; `None` when it parsed.
    pub failure: Option<ParseFailure>,
    /// What came back.
    pub outcome: ToolOutcome,
}

/// A scorer's verdict on the assistant text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The extracted final answer, if any.
    pub answer: Option<String>,
    /// The reward (0 or 1 for the paper's outcome reward).
    pub reward: f32,
}

/// A finished rollout: what `rstar show`, `rstar eval`, RoC and the trainer read.
/// One JSON object per line in `trajectories.jsonl` (see `docs/agent.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// The problem's id (empty unless set with [`Episode::with_id`]).
    #[serde(default)]
    pub id: String,
    /// Which sample of the problem this is (0-based).
    #[serde(default)]
    pub sample: u32,
    /// The template the rollout used.
    pub template: TemplateFormat,
    /// The prompt text.
    pub prompt: String,
    /// The prompt's token ids.
    #[serde(default)]
    pub prompt_ids: Vec<u32>,
    /// Token ids of the whole response: assistant and tool turns in order.
    pub response_ids: Vec<u32>,
    /// Per response token: 1 for assistant tokens (trained on), 0 for tool-response tokens.
    pub loss_mask: Vec<u8>,
    /// Every turn in order, with its token span.
    pub turns: Vec<Turn>,
    /// Every executed or failed call in order.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Why the rollout ended.
    pub stop: StopReason,
    /// Whether it ran out of room (`stop` is `token_budget` or `tool_response_too_long`).
    pub truncated: bool,
    /// The ground truth, when given with [`Episode::with_ground_truth`].
    #[serde(default)]
    pub ground_truth: Option<String>,
    /// The extracted answer, when scored.
    #[serde(default)]
    pub answer: Option<String>,
    /// The reward, when scored.
    #[serde(default)]
    pub reward: Option<f32>,
    /// Per **assistant** token, in order (the k-th entry belongs to the k-th position whose
    /// `loss_mask` is 1): the entropy, in nats, of the policy's next-token distribution it was
    /// sampled from. Tool tokens carry none, so the length is the number of assistant tokens.
    /// Empty when the rollout did not record it (`--record-entropy`); omitted from the JSON
    /// then. See [`Trajectory::attach_token_stats`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entropies: Vec<f32>,
    /// Per assistant token, like `entropies`: the log-probability (nats) of the sampled token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_logprobs: Vec<f32>,
    /// Per assistant token, like `entropies`: the token decoded on its own, so analyses can
    /// show and locate tokens without the tokenizer. Concatenated within a turn they give the
    /// turn's text (up to lossy decoding of a character split across tokens).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_texts: Vec<String>,
}

/// Per-token statistics of one sampled assistant turn, as an engine reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenStats {
    /// The entropy (nats) of the distribution each token was sampled from.
    pub entropies: Vec<f32>,
    /// The log-probability (nats) of each sampled token.
    pub logprobs: Vec<f32>,
}

impl Trajectory {
    /// The number of assistant turns.
    pub fn assistant_turns(&self) -> usize {
        self.turns
            .iter()
            .filter(|t| t.role == Role::Assistant)
            .count()
    }

    /// The assistant turns' text, concatenated: what the verifier reads.
    pub fn assistant_text(&self) -> String {
        self.turns
            .iter()
            .filter(|t| t.role == Role::Assistant)
            .map(|t| t.text.as_str())
            .collect()
    }

    /// The whole response text, tool turns included.
    pub fn response_text(&self) -> String {
        self.turns.iter().map(|t| t.text.as_str()).collect()
    }

    /// Calls whose outcome is an error, a timeout or a parse failure.
    pub fn tool_errors(&self) -> usize {
        self.tool_calls
            .iter()
            .filter(|c| c.outcome.is_error())
            .count()
    }

    /// The number of assistant tokens (positions whose `loss_mask` is 1): the length that
    /// `entropies`, `token_logprobs` and `token_texts` must have when they are recorded.
    pub fn assistant_token_count(&self) -> usize {
        self.loss_mask.iter().filter(|&&m| m == 1).count()
    }

    /// Whether per-token entropies were recorded.
    pub fn has_entropies(&self) -> bool {
        !self.entropies.is_empty()
    }

    /// Drops the per-token entropies, log-probabilities and token texts (drivers keep them only
    /// when asked to record entropies: they triple a trajectory's size).
    pub fn strip_token_stats(&mut self) {
        self.entropies.clear();
        self.token_logprobs.clear();
        self.token_texts.clear();
    }

    /// Sets the weight version of each assistant turn, in order (one entry per assistant turn).
    /// Fails, changing nothing, on another count.
    pub fn set_turn_versions(&mut self, versions: Vec<Option<String>>) -> Result<(), Error> {
        let n = self
            .turns
            .iter()
            .filter(|t| t.role == Role::Assistant)
            .count();
        if versions.len() != n {
            return Err(Error::Trajectory(format!(
                "{} weight versions for {n} assistant turns",
                versions.len()
            )));
        }
        let assistant = self.turns.iter_mut().filter(|t| t.role == Role::Assistant);
        for (turn, version) in assistant.zip(versions) {
            turn.weight_version = version;
        }
        Ok(())
    }

    /// Attaches per-assistant-token entropies and log-probabilities (see the field docs);
    /// either may be empty. Fails, changing nothing, when a non-empty one does not have one
    /// entry per assistant token.
    pub fn attach_token_stats(
        &mut self,
        entropies: Vec<f32>,
        logprobs: Vec<f32>,
    ) -> Result<(), Error> {
        let n = self.assistant_token_count();
        for (field, len) in [
            ("entropies", entropies.len()),
            ("token_logprobs", logprobs.len()),
        ] {
            if len != 0 && len != n {
                return Err(Error::Trajectory(format!(
                    "`{field}` has {len} entries for {n} assistant tokens"
                )));
            }
        }
        self.entropies = entropies;
        self.token_logprobs = logprobs;
        Ok(())
    }

    /// Attaches the per-assistant-token texts (see the field docs); fails, changing nothing,
    /// unless there is one per assistant token (or none).
    pub fn attach_token_texts(&mut self, texts: Vec<String>) -> Result<(), Error> {
        let n = self.assistant_token_count();
        if !texts.is_empty() && texts.len() != n {
            return Err(Error::Trajectory(format!(
                "`token_texts` has {} entries for {n} assistant tokens",
                texts.len()
            )));
        }
        self.token_texts = texts;
        Ok(())
    }

    /// Checks the invariants a reader relies on: `loss_mask` matches `response_ids`, the turns
    /// tile the response with the mask of their role, and the optional per-token fields have one
    /// entry per assistant token. Errors name the field.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Trajectory(m));
        let n = self.response_ids.len();
        if self.loss_mask.len() != n {
            return bad(format!(
                "`loss_mask` has {} entries for {n} response tokens",
                self.loss_mask.len()
            ));
        }
        let mut at = 0;
        for (i, t) in self.turns.iter().enumerate() {
            if t.start != at || t.start + t.len > n {
                return bad(format!(
                    "`turns[{i}]` spans {}..{} but should start at {at} within {n} response tokens",
                    t.start,
                    t.start + t.len
                ));
            }
            let want = u8::from(t.role == Role::Assistant);
            if self.loss_mask[t.start..t.start + t.len]
                .iter()
                .any(|&m| m != want)
            {
                return bad(format!(
                    "`loss_mask` disagrees with the role of `turns[{i}]` ({:?})",
                    t.role
                ));
            }
            at += t.len;
        }
        if at != n {
            return bad(format!("`turns` cover {at} of {n} response tokens"));
        }
        let a = self.assistant_token_count();
        for (field, len) in [
            ("entropies", self.entropies.len()),
            ("token_logprobs", self.token_logprobs.len()),
            ("token_texts", self.token_texts.len()),
        ] {
            if len != 0 && len != a {
                return bad(format!(
                    "`{field}` has {len} entries for {a} assistant tokens"
                ));
            }
        }
        if let Some(i) = self
            .entropies
            .iter()
            .position(|e| !e.is_finite() || *e < 0.0)
        {
            return bad(format!(
                "`entropies[{i}]` is {}, not a finite non-negative number",
                self.entropies[i]
            ));
        }
        Ok(())
    }

    /// The trajectory as one JSON line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("trajectories always serialise")
    }

    /// Parses one JSON line.
    pub fn from_json_line(line: &str) -> Result<Self, Error> {
        Ok(serde_json::from_str(line)?)
    }

    /// Writes trajectories as JSONL.
    pub fn write_jsonl(path: &Path, trajectories: &[Trajectory]) -> Result<(), Error> {
        write_jsonl(path, trajectories)
    }

    /// Reads a JSONL file of trajectories; errors name the file and line.
    pub fn read_jsonl(path: &Path) -> Result<Vec<Trajectory>, Error> {
        read_jsonl(path)
    }
}

/// Writes serde records as JSONL, one a line (the trajectory files, the task set, the SFT corpus).
pub fn write_jsonl<R: Serialize>(path: &Path, records: &[R]) -> Result<(), Error> {
    let io = |source| Error::Io(IoError::new(path, source));
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    for r in records {
        let line = serde_json::to_string(r)?;
        writeln!(w, "{line}").map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Reads serde records from JSONL, skipping blank lines; errors name the file and line.
pub fn read_jsonl<R: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<R>, Error> {
    let io = |source| Error::Io(IoError::new(path, source));
    let file = std::fs::File::open(path).map_err(io)?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let r = serde_json::from_str(&line)
            .map_err(|e| Error::Dataset(LineError::new(path, i + 1, e.to_string())))?;
        out.push(r);
    }
    Ok(out)
}

#[derive(Debug, Clone)]
enum State {
    AwaitAssistant,
    AwaitTools(Vec<ParsedCall>),
    Done(StopReason),
}

/// One rollout in progress. See the [module docs](self) for the rules.
///
/// The tokenizer is held by value: pass `&tok` to borrow it, or an `Arc` when the episode
/// must be `'static` (moved into a spawned task).
#[derive(Debug)]
pub struct Episode<T: TextTokenizer> {
    tokenizer: T,
    template: Template,
    limits: Limits,
    id: String,
    sample: u32,
    ground_truth: Option<String>,
    prompt: String,
    prompt_ids: Vec<u32>,
    response_ids: Vec<u32>,
    loss_mask: Vec<u8>,
    turns: Vec<Turn>,
    tool_calls: Vec<ToolCallRecord>,
    assistant_turns: usize,
    state: State,
    entropies: Vec<f32>,
    logprobs: Vec<f32>,
    token_texts: Vec<String>,
    /// Assistant turns pushed without statistics (mixing the two is refused).
    plain_turns: usize,
}

impl<T: TextTokenizer> Episode<T> {
    /// Starts a rollout of `problem`; the first step is [`Step::Generate`].
    pub fn new(tokenizer: T, template: &Template, limits: Limits, problem: &str) -> Self {
        let prompt = template.render_prompt(problem);
        let prompt_ids = tokenizer.encode(&prompt);
        Episode {
            tokenizer,
            template: template.clone(),
            limits,
            id: String::new(),
            sample: 0,
            ground_truth: None,
            prompt,
            prompt_ids,
            response_ids: Vec::new(),
            loss_mask: Vec::new(),
            turns: Vec::new(),
            tool_calls: Vec::new(),
            assistant_turns: 0,
            state: State::AwaitAssistant,
            entropies: Vec::new(),
            logprobs: Vec::new(),
            token_texts: Vec::new(),
            plain_turns: 0,
        }
    }

    /// Sets the problem id and sample index recorded in the trajectory.
    pub fn with_id(mut self, id: impl Into<String>, sample: u32) -> Self {
        self.id = id.into();
        self.sample = sample;
        self
    }

    /// Records the problem's ground truth in the trajectory (for `rstar show` and evaluation;
    /// scoring itself is the scorer's job).
    pub fn with_ground_truth(mut self, truth: impl Into<String>) -> Self {
        self.ground_truth = Some(truth.into());
        self
    }

    /// The prompt text.
    pub fn prompt(&self) -> &str {
        &self.prompt
    }

    /// The prompt's token ids.
    pub fn prompt_ids(&self) -> &[u32] {
        &self.prompt_ids
    }

    /// Prompt and response so far: what the policy continues from.
    pub fn context_ids(&self) -> Vec<u32> {
        let mut ids = self.prompt_ids.clone();
        ids.extend_from_slice(&self.response_ids);
        ids
    }

    /// Tokens left in the response budget.
    pub fn remaining_tokens(&self) -> usize {
        self.limits
            .max_response_tokens
            .saturating_sub(self.response_ids.len())
    }

    /// The assistant turns' text so far: once the episode is done, what
    /// [`Episode::finish_scored`] hands its scorer (a driver that scores elsewhere sends it).
    pub fn assistant_text(&self) -> String {
        self.turns
            .iter()
            .filter(|t| t.role == Role::Assistant)
            .map(|t| t.text.as_str())
            .collect()
    }

    /// The calls recorded so far (an executor of `jupyter_code` replays earlier cells from it).
    pub fn tool_calls(&self) -> &[ToolCallRecord] {
        &self.tool_calls
    }

    /// Ends the episode now with `reason`, dropping a pending tool call: for a driver that hits
    /// a limit the episode does not know, such as the model's context length
    /// ([`StopReason::TokenBudget`]: the response is truncated).
    pub fn stop(&mut self, reason: StopReason) {
        self.state = State::Done(reason);
    }

    /// What the caller should do now.
    pub fn step(&self) -> Step {
        match &self.state {
            State::AwaitAssistant => Step::Generate {
                max_tokens: self.remaining_tokens(),
            },
            State::AwaitTools(calls) => {
                Step::CallTools(calls.iter().filter_map(|c| c.clone().ok()).collect())
            }
            State::Done(reason) => Step::Done(*reason),
        }
    }

    /// Accepts an assistant turn as text. It is tokenized; tokens beyond the budget are cut
    /// and the turn's text becomes the decoding of what was kept.
    pub fn push_assistant_text(&mut self, text: &str) -> Result<Step, Error> {
        let ids = self.tokenizer.encode(text);
        self.push_assistant_ids(&ids)
    }

    /// Accepts an assistant turn as token ids (what an engine sampled); ids beyond the budget
    /// are cut.
    pub fn push_assistant_ids(&mut self, ids: &[u32]) -> Result<Step, Error> {
        if !matches!(self.state, State::AwaitAssistant) {
            return Err(Error::EpisodeState(format!(
                "an assistant turn was pushed while the episode expects {:?}",
                self.step()
            )));
        }
        if !self.entropies.is_empty() {
            return Err(Error::EpisodeState(
                "a turn without token statistics was pushed after turns with them".to_string(),
            ));
        }
        self.plain_turns += 1;
        self.push_assistant_inner(ids)
    }

    /// Like [`push_assistant_ids`](Self::push_assistant_ids), with the engine's per-token
    /// entropies and log-probabilities (one per id; cut with the ids at the budget). The
    /// trajectory then carries `entropies`, `token_logprobs` and `token_texts` (each id decoded
    /// on its own). Every assistant turn of the episode must come with statistics.
    pub fn push_assistant_sampled(
        &mut self,
        ids: &[u32],
        stats: TokenStats,
    ) -> Result<Step, Error> {
        if !matches!(self.state, State::AwaitAssistant) {
            return Err(Error::EpisodeState(format!(
                "an assistant turn was pushed while the episode expects {:?}",
                self.step()
            )));
        }
        if self.plain_turns > 0 {
            return Err(Error::EpisodeState(
                "a turn with token statistics was pushed after turns without them".to_string(),
            ));
        }
        for (field, len) in [
            ("entropies", stats.entropies.len()),
            ("logprobs", stats.logprobs.len()),
        ] {
            if len != ids.len() {
                return Err(Error::Trajectory(format!(
                    "`{field}` has {len} entries for {} sampled ids",
                    ids.len()
                )));
            }
        }
        let keep = ids.len().min(self.remaining_tokens());
        self.entropies.extend_from_slice(&stats.entropies[..keep]);
        self.logprobs.extend_from_slice(&stats.logprobs[..keep]);
        for id in &ids[..keep] {
            let text = self.tokenizer.decode(std::slice::from_ref(id));
            self.token_texts.push(text);
        }
        self.push_assistant_inner(ids)
    }

    fn push_assistant_inner(&mut self, ids: &[u32]) -> Result<Step, Error> {
        if !matches!(self.state, State::AwaitAssistant) {
            return Err(Error::EpisodeState(format!(
                "an assistant turn was pushed while the episode expects {:?}",
                self.step()
            )));
        }
        let remaining = self.remaining_tokens();
        let cut = ids.len() > remaining;
        let ids = &ids[..ids.len().min(remaining)];
        let text = self.tokenizer.decode(ids);
        self.turns.push(Turn {
            role: Role::Assistant,
            text: text.clone(),
            start: self.response_ids.len(),
            len: ids.len(),
            weight_version: None,
        });
        self.response_ids.extend_from_slice(ids);
        self.loss_mask.extend(std::iter::repeat_n(1u8, ids.len()));
        self.assistant_turns += 1;

        let mut calls = self.template.parse_tool_calls(&text);
        calls.truncate(self.limits.max_calls_per_turn);
        let finished = self.template.turn_is_finished(&text);
        let full = self.remaining_tokens() == 0;
        let reason = if cut || (full && !(calls.is_empty() && finished)) {
            Some(StopReason::TokenBudget)
        } else if calls.is_empty() {
            Some(StopReason::NoToolCall)
        } else if self.assistant_turns >= self.limits.max_assistant_turns {
            Some(StopReason::MaxTurns)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.state = State::Done(reason);
            return Ok(Step::Done(reason));
        }
        if calls.iter().all(|c| c.is_err()) {
            // Nothing to run: answer the parse failures right away.
            self.state = State::AwaitTools(calls);
            return self.push_tool_outcomes(Vec::new());
        }
        self.state = State::AwaitTools(calls);
        Ok(self.step())
    }

    /// Accepts the outcomes of the calls of the last [`Step::CallTools`], in the same order.
    pub fn push_tool_outcomes(&mut self, outcomes: Vec<ToolOutcome>) -> Result<Step, Error> {
        let State::AwaitTools(calls) = &self.state else {
            return Err(Error::EpisodeState(format!(
                "tool outcomes were pushed while the episode expects {:?}",
                self.step()
            )));
        };
        let expected = calls.iter().filter(|c| c.is_ok()).count();
        if outcomes.len() != expected {
            return Err(Error::OutcomeCount {
                expected,
                got: outcomes.len(),
            });
        }
        let calls = calls.clone();
        let turn = self.assistant_turns - 1;
        let mut outcomes = outcomes.into_iter();
        let mut merged = Vec::with_capacity(calls.len());
        for parsed in calls {
            let record = match parsed {
                Ok(call) => ToolCallRecord {
                    turn,
                    call: Some(call),
                    failure: None,
                    outcome: outcomes.next().expect("counted above"),
                },
                Err(failure) => ToolCallRecord {
                    turn,
                    call: None,
                    outcome: ToolOutcome::parse_failure(&failure),
                    failure: Some(failure),
                },
            };
            merged.push(record.outcome.clone());
            self.tool_calls.push(record);
        }
        let text = self
            .template
            .render_tool_turn(&merged, self.limits.max_tool_response_chars);
        let ids = self.tokenizer.encode(&text);
        if self.response_ids.len() + ids.len() >= self.limits.max_response_tokens {
            self.state = State::Done(StopReason::ToolResponseTooLong);
            return Ok(self.step());
        }
        self.turns.push(Turn {
            role: Role::Tool,
            text,
            start: self.response_ids.len(),
            len: ids.len(),
            weight_version: None,
        });
        self.response_ids.extend_from_slice(&ids);
        self.loss_mask.extend(std::iter::repeat_n(0u8, ids.len()));
        self.state = State::AwaitAssistant;
        Ok(self.step())
    }

    /// Ends a finished rollout without scoring it.
    pub fn finish(self) -> Result<Trajectory, Error> {
        let State::Done(stop) = self.state else {
            return Err(Error::EpisodeState(format!(
                "finish was called while the episode expects {:?}",
                self.step()
            )));
        };
        Ok(Trajectory {
            id: self.id,
            sample: self.sample,
            template: self.template.format,
            prompt: self.prompt,
            prompt_ids: self.prompt_ids,
            response_ids: self.response_ids,
            loss_mask: self.loss_mask,
            turns: self.turns,
            tool_calls: self.tool_calls,
            stop,
            truncated: stop.is_truncation(),
            ground_truth: self.ground_truth,
            answer: None,
            reward: None,
            entropies: self.entropies,
            token_logprobs: self.logprobs,
            token_texts: self.token_texts,
        })
    }

    /// Ends a finished rollout and scores its assistant text (tool output is not shown to the
    /// scorer, so a printed number never earns a reward by itself).
    pub fn finish_scored(self, scorer: impl FnOnce(&str) -> Score) -> Result<Trajectory, Error> {
        let mut t = self.finish()?;
        let score = scorer(&t.assistant_text());
        t.answer = score.answer;
        t.reward = Some(score.reward);
        Ok(t)
    }

    /// Drives the rollout to its end with a synchronous generator (given the context ids and
    /// the token budget left, it returns the next assistant turn's text) and executor.
    /// The asynchronous, batched driver lives with the scheduler; this one serves tests,
    /// demonstrations and single-problem debugging.
    pub fn run(
        mut self,
        mut generate: impl FnMut(&[u32], usize) -> String,
        mut execute: impl FnMut(&ToolCall) -> ToolOutcome,
    ) -> Result<Self, Error> {
        loop {
            match self.step() {
                Step::Generate { max_tokens } => {
                    let text = generate(&self.context_ids(), max_tokens);
                    self.push_assistant_text(&text)?;
                }
                Step::CallTools(calls) => {
                    let outcomes = calls.iter().map(&mut execute).collect();
                    self.push_tool_outcomes(outcomes)?;
                }
                Step::Done(_) => return Ok(self),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokenizer_round_trips() {
        let t = ByteTokenizer;
        let s = "héllo <|im_end|>";
        assert_eq!(t.decode(&t.encode(s)), s);
        assert_eq!(t.encode("A"), vec![65]);
    }

    #[test]
    fn misuse_is_an_error() {
        let tok = ByteTokenizer;
        let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "x");
        assert!(matches!(
            ep.push_tool_outcomes(vec![]),
            Err(Error::EpisodeState(_))
        ));
        ep.push_assistant_text("<c>print(1)</c>").unwrap();
        assert!(matches!(
            ep.push_assistant_text("again"),
            Err(Error::EpisodeState(_))
        ));
        assert!(matches!(
            ep.push_tool_outcomes(vec![]),
            Err(Error::OutcomeCount {
                expected: 1,
                got: 0
            })
        ));
        let ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "x");
        assert!(ep.finish().is_err());
    }

    #[test]
    fn turn_versions_go_to_the_assistant_turns_in_order() {
        let tok = ByteTokenizer;
        let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "x");
        ep.push_assistant_text("<c>print(1)</c>").unwrap();
        ep.push_tool_outcomes(vec![crate::toolcall::ToolOutcome::new(
            crate::toolcall::OutcomeKind::Output,
            "1\n",
        )])
        .unwrap();
        ep.push_assistant_text("<answer>1</answer>").unwrap();
        let mut t = ep.finish().unwrap();
        // Without versions the JSON is as before.
        assert!(!t.to_json_line().contains("weight_version"));
        let err = t.set_turn_versions(vec![Some("a".into())]).unwrap_err();
        assert!(
            err.to_string()
                .contains("1 weight versions for 2 assistant turns"),
            "{err}"
        );
        t.set_turn_versions(vec![Some("step-0".into()), None])
            .unwrap();
        let versions: Vec<(Role, Option<&str>)> = t
            .turns
            .iter()
            .map(|turn| (turn.role, turn.weight_version.as_deref()))
            .collect();
        assert_eq!(
            versions,
            [
                (Role::Assistant, Some("step-0")),
                (Role::Tool, None),
                (Role::Assistant, None)
            ]
        );
        let back = Trajectory::from_json_line(&t.to_json_line()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn stop_reason_serde_names() {
        let names: Vec<String> = [
            StopReason::NoToolCall,
            StopReason::MaxTurns,
            StopReason::TokenBudget,
            StopReason::ToolResponseTooLong,
        ]
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
        assert_eq!(
            names,
            [
                "\"no_tool_call\"",
                "\"max_turns\"",
                "\"token_budget\"",
                "\"tool_response_too_long\""
            ]
        );
    }
}
