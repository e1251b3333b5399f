//! Integration tests of the agent-format layer: templates, the episode state machine, the task set and the SFT corpus.

mod agent_format {
    mod common;
    mod episode;
    mod python;
    mod sft;
    mod tasks;
    mod tool_response;
    mod verified;
}
