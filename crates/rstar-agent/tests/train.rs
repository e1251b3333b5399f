//! Integration tests of the trainer: the rollout driver, SFT, one GRPO-RoC step, configs,
//! `rstar train --preset smoke`, resume, plots, TensorBoard events and the report page; `--backend wgpu` with the `wgpu` feature.

mod train {
    mod cli;
    mod common;
    mod config;
    mod hf;
    mod plots;
    mod report;
    mod resume;
    mod rl;
    mod rollout;
    mod scheduled;
    mod sft;
    mod tensorboard;
    #[cfg(feature = "wgpu")]
    mod wgpu;
}
