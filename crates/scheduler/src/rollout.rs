//! The multi-turn rollout state machine shared by the dispatcher and the simulator.
//!
//! A rollout alternates model turns and tool calls: generate a turn; if it ends in a tool
//! call (and turns and budget remain) run the tool and append its output; repeat until the
//! model stops, the response budget (model plus tool tokens, as in the paper's 8K/12K
//! limits) is spent, or the turn limit is reached.

use serde::{Deserialize, Serialize};

/// Why a rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// The model ended a turn without a tool call.
    Stop,
    /// The response budget is spent (the rollout is truncated).
    Length,
    /// The model asked for a tool after its last allowed turn.
    MaxTurns,
}

/// What the rollout does after a turn or a tool result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Run the tool call that ended the turn.
    RunTool,
    /// Generate another turn (after a tool result).
    Generate,
    /// The rollout is over.
    Finish(FinishReason),
}

/// Where one rollout stands: token counts and turn counts, no token ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutState {
    prompt_tokens: u64,
    max_response_tokens: u64,
    max_turns: u32,
    generated_tokens: u64,
    tool_tokens: u64,
    turns: u32,
    tool_calls: u32,
    finish: Option<FinishReason>,
}

impl RolloutState {
    /// A rollout of a `prompt_tokens`-token prompt allowed `max_response_tokens` response
    /// tokens (model and tool tokens together) over at most `max_turns` model turns.
    pub fn new(prompt_tokens: u64, max_response_tokens: u64, max_turns: u32) -> Self {
        Self {
            prompt_tokens,
            max_response_tokens,
            max_turns: max_turns.max(1),
            generated_tokens: 0,
            tool_tokens: 0,
            turns: 0,
            tool_calls: 0,
            finish: None,
        }
    }

    /// The KV tokens that cover this rollout whatever it does: prompt plus response budget.
    pub fn reservation(&self) -> u64 {
        self.prompt_tokens + self.max_response_tokens
    }

    /// Tokens in the context so far: prompt, model tokens and tool tokens.
    pub fn context_tokens(&self) -> u64 {
        self.prompt_tokens + self.response_tokens()
    }

    /// Response tokens so far (model and tool).
    pub fn response_tokens(&self) -> u64 {
        self.generated_tokens + self.tool_tokens
    }

    /// Model-generated tokens so far.
    pub fn generated_tokens(&self) -> u64 {
        self.generated_tokens
    }

    /// Tool-output tokens appended so far (after truncation to the budget).
    pub fn tool_tokens(&self) -> u64 {
        self.tool_tokens
    }

    /// Model turns completed.
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// Tool calls started.
    pub fn tool_calls(&self) -> u32 {
        self.tool_calls
    }

    /// The most tokens the next turn may generate.
    pub fn turn_limit(&self) -> u64 {
        self.max_response_tokens
            .saturating_sub(self.response_tokens())
    }

    /// Why the rollout ended, once it has.
    pub fn finish(&self) -> Option<FinishReason> {
        self.finish
    }

    /// Records a finished turn of `generated` tokens (clamped to [`Self::turn_limit`]) that
    /// did or did not end in a tool call.
    ///
    /// # Panics
    /// If the rollout has already finished.
    pub fn on_turn_end(&mut self, generated: u64, tool_call: bool) -> Next {
        assert!(self.finish.is_none(), "turn on a finished rollout");
        self.generated_tokens += generated.min(self.turn_limit());
        self.turns += 1;
        let next = if self.turn_limit() == 0 {
            Next::Finish(FinishReason::Length)
        } else if !tool_call {
            Next::Finish(FinishReason::Stop)
        } else if self.turns >= self.max_turns {
            Next::Finish(FinishReason::MaxTurns)
        } else {
            self.tool_calls += 1;
            Next::RunTool
        };
        if let Next::Finish(reason) = next {
            self.finish = Some(reason);
        }
        next
    }

    /// Appends a tool result of `tokens` tokens, truncated to the remaining budget, and
    /// returns what to do next. Returns how many tokens were kept via [`Self::tool_tokens`].
    ///
    /// # Panics
    /// If the rollout has already finished.
    pub fn on_tool_result(&mut self, tokens: u64) -> Next {
        assert!(self.finish.is_none(), "tool result on a finished rollout");
        self.tool_tokens += tokens.min(self.turn_limit());
        if self.turn_limit() == 0 {
            self.finish = Some(FinishReason::Length);
            Next::Finish(FinishReason::Length)
        } else {
            Next::Generate
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_tool_calls_then_stop() {
        let mut s = RolloutState::new(100, 1000, 8);
        assert_eq!(s.reservation(), 1100);
        assert_eq!(s.on_turn_end(200, true), Next::RunTool);
        assert_eq!(s.on_tool_result(50), Next::Generate);
        assert_eq!(s.on_turn_end(300, true), Next::RunTool);
        assert_eq!(s.on_tool_result(50), Next::Generate);
        assert_eq!(s.turn_limit(), 1000 - 600);
        assert_eq!(s.on_turn_end(10, false), Next::Finish(FinishReason::Stop));
        assert_eq!(s.context_tokens(), 100 + 200 + 50 + 300 + 50 + 10);
        assert_eq!((s.turns(), s.tool_calls()), (3, 2));
        assert_eq!(s.finish(), Some(FinishReason::Stop));
    }

    #[test]
    fn budget_truncates_turns_and_tool_output() {
        let mut s = RolloutState::new(10, 100, 8);
        assert_eq!(s.on_turn_end(90, true), Next::RunTool);
        // The tool output is cut to the 10 tokens left, which ends the rollout.
        assert_eq!(s.on_tool_result(40), Next::Finish(FinishReason::Length));
        assert_eq!((s.generated_tokens(), s.tool_tokens()), (90, 10));
        let mut s = RolloutState::new(10, 100, 8);
        assert_eq!(s.on_turn_end(500, true), Next::Finish(FinishReason::Length));
        assert_eq!(s.generated_tokens(), 100);
    }

    #[test]
    fn turn_limit_ends_with_max_turns() {
        let mut s = RolloutState::new(10, 1000, 2);
        assert_eq!(s.on_turn_end(5, true), Next::RunTool);
        assert_eq!(s.on_tool_result(5), Next::Generate);
        assert_eq!(s.on_turn_end(5, true), Next::Finish(FinishReason::MaxTurns));
        assert_eq!(s.tool_calls(), 1);
    }

    #[test]
    #[should_panic(expected = "finished rollout")]
    fn no_turn_after_finish() {
        let mut s = RolloutState::new(10, 100, 2);
        s.on_turn_end(5, false);
        s.on_turn_end(5, false);
    }
}
