//! Integration tests of `rstar-tasks`: the agent-format layer (templates, the task set and the
//! SFT corpus) and the dataset loaders.

mod tasks {
    mod agent_format {
        mod common;
        mod python;
        mod sft;
        mod tasks;
        mod verified;
    }
    mod dataset;
}
