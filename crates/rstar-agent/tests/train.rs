//! Integration tests of the trainer: the rollout driver, SFT, one GRPO-RoC step, configs and
//! `rstar train --preset smoke`.

mod train {
    mod cli;
    mod common;
    mod config;
    mod rl;
    mod rollout;
    mod sft;
}
