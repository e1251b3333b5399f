//! Scheduled rollouts (`rstar_agent::scheduled`) and evaluation (`rstar_agent::eval`,
//! `rstar eval`): one test binary, modules under `tests/scheduled/`.

mod scheduled {
    pub mod common;

    mod eval_metrics;
    mod local;
    mod policies;
    mod pool;
    mod rules;
    mod run_eval;
}
