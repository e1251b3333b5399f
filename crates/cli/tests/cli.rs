//! End-to-end tests of the `rstar` binary: every test runs the real executable.
//!
//! One test binary for every subcommand (a test binary per file would link the whole crate
//! once per file); the modules share [`run`].

mod cli {
    pub mod common;
    // The umbrella's test helpers, shared rather than copied: a served tiny model and its raw
    // HTTP client, the trainer's shrunk configs and tiny models.
    #[allow(dead_code)] // reason: this binary uses a few of the umbrella's serve helpers
    #[path = "../../../serve/tests/serve/common.rs"]
    pub mod serve_common;
    #[allow(dead_code)] // reason: this binary uses a few of the umbrella's trainer helpers
    #[path = "../../../train/tests/train/common.rs"]
    pub mod train_common;

    mod analyze;
    mod basics;
    mod bench;
    mod compare;
    mod curriculum;
    mod eval;
    pub mod lora;
    mod resume;
    mod robust;
    mod roc;
    mod serve;
    mod sft;
    mod show;
    mod simulate;
    mod tasks;
    mod tools;
    mod tools_serve;
    pub mod train;
    mod train_faults;
    mod train_lora;
    mod train_plots;
    mod train_report;
    mod train_scheduled;
    mod train_tensorboard;
    mod train_verify;
    #[cfg(feature = "wgpu")]
    mod train_wgpu;
    mod verify;
    mod verify_serve;
}
