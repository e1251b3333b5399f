//! Scheduled rollouts (`rstar_agent::scheduled`) and evaluation (`rstar_agent::eval`,
//! `rstar eval`): one test binary, modules under `tests/rollout/`.

mod rollout {
    pub mod common;

    mod eval_metrics;
    mod local;
    mod policies;
    mod pool;
    mod rules;
    mod run_eval;
    mod setup;
    mod verify;
}
