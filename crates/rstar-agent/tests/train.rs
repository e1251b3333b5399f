//! Integration tests of the trainer: the rollout driver, SFT, one GRPO-RoC step, configs,
//! `rstar train --preset smoke`, resume and plots; `--backend wgpu` with the `wgpu` feature.

mod train {
    mod common;
    mod config;
    mod hf;
    mod plots;
    mod rl;
    mod rollout;
    mod scheduled;
    mod sft;
    #[cfg(feature = "wgpu")]
    mod wgpu;
}
