//! Integration tests of the trainer: the rollout driver, SFT, one GRPO-RoC step, configs,
//! `rstar train --preset smoke`, resume and plots; `--backend wgpu` with the `wgpu` feature.

mod train {
    mod common;
    mod config;
    mod hf;
    mod rl;
    mod rollout;
    mod sft;
}
