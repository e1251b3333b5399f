//! A run's problems: the embedded task set or a dataset file, split into the held-out set and
//! the RL pool; and the template a tokenizer takes.

use std::path::Path;

use rstar_episode::template::TemplateFormat;
use rstar_policy::Tokenizer;
use rstar_rollout::{Prompt, mix_seed};
use rstar_tasks::tasks::{Split, TaskSet};

use crate::TrainConfig;
use crate::error::Error;

/// Seeds of the run's independent streams.
pub(crate) fn seed_of(seed: u64, stream: &str) -> u64 {
    stream.bytes().fold(seed, |s, b| mix_seed(s, u64::from(b)))
}

/// The held-out problems and the RL pool of a run.
pub(crate) fn problems(config: &TrainConfig) -> Result<(Vec<Prompt>, Vec<Prompt>), Error> {
    if let Some(path) = &config.data {
        return data_problems(config, path);
    }
    let tasks = TaskSet::new(config.tasks.clone())?;
    let seed = config.seed;
    let held_out = tasks
        .generate(
            Split::HeldOut,
            config.eval.problems,
            seed_of(seed, "eval-tasks"),
        )?
        .iter()
        .map(Prompt::from)
        .collect();
    let rl_pool = tasks
        .generate(Split::Train, config.rl.pool_size, seed_of(seed, "rl-tasks"))?
        .iter()
        .map(Prompt::from)
        .collect();
    Ok((held_out, rl_pool))
}

/// The held-out problems and the RL pool of `--data FILE` ([`rstar_tasks::dataset::load_prompts`]):
/// the problems in an order shuffled with the run's seed, the first `eval.problems` held out,
/// the next `rl.pool_size` (or fewer) the RL pool.
fn data_problems(config: &TrainConfig, path: &Path) -> Result<(Vec<Prompt>, Vec<Prompt>), Error> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut prompts = rstar_tasks::dataset::load_prompts(path)?;
    let held = config.eval.problems;
    if prompts.len() <= held {
        return Err(Error::TrainConfig {
            field: "data".into(),
            message: format!(
                "is {} with {} problems: `eval.problems` holds out {held}, which leaves none to train on",
                path.display(),
                prompts.len()
            ),
        });
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed_of(config.seed, "data-split"));
    prompts.shuffle(&mut rng);
    let rest = prompts.split_off(held);
    Ok((
        prompts,
        rest.into_iter().take(config.rl.pool_size).collect(),
    ))
}

/// The template of a tokenizer: compact for the built-in character tokenizer, ChatML for HF.
pub fn template_for(tokenizer: &Tokenizer) -> TemplateFormat {
    match tokenizer {
        Tokenizer::Hf(_) => TemplateFormat::ChatMl,
        Tokenizer::Char(_) => TemplateFormat::Compact,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_tiny_held_out_set_is_500_distinct_problems_outside_the_rl_pool() {
        let config = TrainConfig::tiny();
        let (held_out, pool) = problems(&config).unwrap();
        assert_eq!((held_out.len(), pool.len()), (500, config.rl.pool_size));
        let held: HashSet<&str> = held_out.iter().map(|p| p.problem.as_str()).collect();
        assert_eq!(held.len(), 500, "the held-out problems repeat");
        // The hard stage filters the RL pool, so nothing it trains on is evaluated either.
        let leaked: Vec<&str> = pool
            .iter()
            .map(|p| p.problem.as_str())
            .filter(|p| held.contains(p))
            .collect();
        assert!(leaked.is_empty(), "held out and trained on: {leaked:?}");
    }
}
