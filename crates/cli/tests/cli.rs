//! End-to-end tests of the `rstar` binary: every test runs the real executable.
//!
//! One test binary for every subcommand (a test binary per file would link the whole crate
//! once per file); the modules share [`run`].

mod cli {
    pub mod common;

    mod analyze;
    mod basics;
    mod curriculum;
    mod roc;
    mod show;
    mod simulate;
    mod tasks;
    mod tools;
    mod tools_serve;
    mod verify;
}
