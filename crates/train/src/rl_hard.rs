//! The hard stage's problems: those the policy does not solve `k` of `k` times
//! ([`hard_problems`]), rolled out with the stage's setup a chunk at a time.

use rstar_curriculum::Stage;
use rstar_episode::template::TemplateFormat;
use rstar_policy::{Qwen, Tokenizer};
use rstar_rollout::scheduled::AsyncTools;
use rstar_rollout::{Prompt, rollout_chunked};

use crate::error::Error;
use crate::rl::stage_setup;

/// How the hard stage's pass-rate check runs ([`hard_problems`]).
#[derive(Debug, Clone, Copy)]
pub struct HardCheck<'a> {
    /// Check the first this many problems of the pool (`0`: all).
    pub limit: usize,
    /// Samples per problem.
    pub k: u32,
    /// A problem is hard when its pass rate is below this.
    pub below: f64,
    /// The stage: limits and temperature.
    pub stage: &'a Stage,
    /// The prompt and tool-call layout.
    pub template: TemplateFormat,
    /// The rollout seed (per rollout: the result does not depend on the chunking).
    pub seed: u64,
    /// Problems rolled out at a time (`0`: all); each chunk's trajectories are reduced to pass
    /// counts and dropped, so memory holds one chunk's.
    pub chunk: usize,
    /// Most sequences in one generation call (`0`: the whole chunk's active episodes).
    pub max_batch: usize,
}

/// The problems of `pool` whose pass rate over `k` samples of `model` is below `below` (the
/// curriculum's hard stage), checked on the first `limit` problems (`0`: all), `chunk`
/// problems at a time.
///
/// # Errors
/// Rollout errors.
pub fn hard_problems(
    model: &Qwen,
    tokenizer: &Tokenizer,
    pool: &[Prompt],
    check: &HardCheck<'_>,
    tools: &dyn AsyncTools,
) -> Result<Vec<Prompt>, Error> {
    let candidates = if check.limit == 0 {
        pool
    } else {
        &pool[..check.limit.min(pool.len())]
    };
    let k = check.k.max(1) as usize;
    let config = stage_setup(check.template, check.stage).lock_step(check.seed, check.max_batch);
    let mut hard = Vec::new();
    rollout_chunked(
        model,
        tokenizer,
        candidates,
        k,
        &config,
        tools,
        check.chunk,
        |prompts, out| {
            for (p, prompt) in prompts.iter().enumerate() {
                let solved = out.trajectories[p * k..(p + 1) * k]
                    .iter()
                    .filter(|t| t.reward.unwrap_or(0.0) > 0.0)
                    .count();
                if (solved as f64 / k as f64) < check.below {
                    hard.push(prompt.clone());
                }
            }
            Ok(())
        },
    )?;
    Ok(hard)
}
