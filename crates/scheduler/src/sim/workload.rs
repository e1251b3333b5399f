//! Seeded rollout workloads: heavy-tailed response lengths and tool-call counts.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::WorkloadConfig;
use super::report::WorkloadSummary;
use crate::rollout::{Next, RolloutState};

/// A tool call in a simulated rollout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ToolStep {
    /// Tokens of the tool response, after truncation to the budget.
    pub tokens: u64,
    /// Seconds the tool takes.
    pub latency_s: f64,
}

/// One model turn of a simulated rollout and the tool call it ends with, if any.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimTurn {
    /// Model tokens of the turn, after truncation to the budget.
    pub generated: u64,
    /// The tool call that follows, if the turn ends with one that runs.
    pub tool: Option<ToolStep>,
    /// Whether the model asked for a tool (it may not run: budget or turn limit).
    pub asks_tool: bool,
}

/// A simulated rollout, exactly as it will play out under [`RolloutState`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimRollout {
    /// The prompt's index in the batch.
    pub prompt: usize,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// The turns, in order.
    pub turns: Vec<SimTurn>,
}

impl SimRollout {
    /// Model tokens over all turns.
    pub fn generated_tokens(&self) -> u64 {
        self.turns.iter().map(|t| t.generated).sum()
    }

    /// Tool calls that run.
    pub fn tool_calls(&self) -> usize {
        self.turns.iter().filter(|t| t.tool.is_some()).count()
    }
}

/// A batch of simulated rollouts, in batch order (prompt by prompt).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Response budget every rollout shares.
    pub max_response_tokens: u64,
    /// Turn limit every rollout shares.
    pub max_turns: u32,
    /// The rollouts.
    pub rollouts: Vec<SimRollout>,
}

/// A standard normal draw (Box-Muller), so that no distribution crate is needed.
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1], so the log is finite
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn lognormal(rng: &mut ChaCha8Rng, median: f64, sigma: f64) -> f64 {
    median * (sigma * normal(rng)).exp()
}

/// Failures before the first success with success probability `1 / (1 + mean)`: mean `mean`.
fn geometric(rng: &mut ChaCha8Rng, mean: f64, cap: u32) -> u32 {
    let q = mean / (1.0 + mean);
    let mut k = 0;
    while k < cap && rng.random::<f64>() < q {
        k += 1;
    }
    k
}

impl Workload {
    /// Draws a workload. The same config and seed give the same workload on every platform
    /// (ChaCha8 and only IEEE operations).
    pub fn generate(config: &WorkloadConfig, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let c = config;
        let mut rollouts = Vec::with_capacity(c.prompts * c.rollouts_per_prompt);
        for prompt in 0..c.prompts {
            let difficulty = lognormal(&mut rng, 1.0, c.prompt_difficulty_sigma);
            let prompt_tokens = rng.random_range(c.prompt_tokens.0..=c.prompt_tokens.1);
            for _ in 0..c.rollouts_per_prompt {
                let total = lognormal(
                    &mut rng,
                    c.response_tokens_median * difficulty,
                    c.response_tokens_sigma,
                )
                .max(1.0) as u64;
                let calls = geometric(
                    &mut rng,
                    c.tool_calls_mean * difficulty.sqrt(),
                    c.max_turns.saturating_sub(1),
                );
                // Split `total` model tokens into `calls + 1` turns at uniform cut points.
                let mut cuts: Vec<u64> = (0..calls).map(|_| rng.random_range(0..=total)).collect();
                cuts.sort_unstable();
                cuts.push(total);
                let mut planned = Vec::with_capacity(cuts.len());
                let mut prev = 0;
                for (i, &cut) in cuts.iter().enumerate() {
                    let generated = (cut - prev).max(1);
                    prev = cut;
                    let tool = (i < calls as usize).then(|| ToolStep {
                        tokens: lognormal(&mut rng, c.tool_output_tokens_median, 0.7)
                            .clamp(1.0, 4096.0) as u64,
                        latency_s: lognormal(
                            &mut rng,
                            c.tool_latency_median_s,
                            c.tool_latency_sigma,
                        )
                        .min(c.tool_timeout_s),
                    });
                    planned.push((generated, tool));
                }
                rollouts.push(SimRollout {
                    prompt,
                    prompt_tokens,
                    turns: realise(prompt_tokens, c.max_response_tokens, c.max_turns, &planned),
                });
            }
        }
        Self {
            max_response_tokens: c.max_response_tokens,
            max_turns: c.max_turns,
            rollouts,
        }
    }

    /// Model tokens over all rollouts: what a simulation must generate.
    pub fn generated_tokens(&self) -> u64 {
        self.rollouts.iter().map(SimRollout::generated_tokens).sum()
    }

    /// Summary statistics.
    pub fn summary(&self) -> WorkloadSummary {
        let mut lengths: Vec<u64> = self
            .rollouts
            .iter()
            .map(|r| {
                r.turns
                    .iter()
                    .map(|t| t.generated + t.tool.map_or(0, |s| s.tokens))
                    .sum()
            })
            .collect();
        lengths.sort_unstable();
        let n = lengths.len().max(1);
        let pct = |p: f64| {
            lengths
                .get(((n - 1) as f64 * p).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        let truncated = lengths
            .iter()
            .filter(|&&l| l >= self.max_response_tokens)
            .count();
        let tools: usize = self.rollouts.iter().map(SimRollout::tool_calls).sum();
        WorkloadSummary {
            rollouts: self.rollouts.len(),
            generated_tokens: self.generated_tokens(),
            response_tokens_mean: lengths.iter().sum::<u64>() as f64 / n as f64,
            response_tokens_p50: pct(0.5),
            response_tokens_p99: pct(0.99),
            response_tokens_max: lengths.last().copied().unwrap_or(0),
            truncated_fraction: truncated as f64 / n as f64,
            tool_calls_mean: tools as f64 / n as f64,
        }
    }
}

/// Plays planned turns through [`RolloutState`] so the stored turns are exactly what the
/// state machine allows (budget and turn limit applied).
fn realise(
    prompt_tokens: u64,
    budget: u64,
    max_turns: u32,
    planned: &[(u64, Option<ToolStep>)],
) -> Vec<SimTurn> {
    let mut state = RolloutState::new(prompt_tokens, budget, max_turns);
    let mut turns = Vec::new();
    for &(generated, tool) in planned {
        let before = state.generated_tokens();
        let next = state.on_turn_end(generated, tool.is_some());
        let mut turn = SimTurn {
            generated: state.generated_tokens() - before,
            tool: None,
            asks_tool: tool.is_some(),
        };
        match next {
            Next::RunTool => {
                let step = tool.expect("a tool call was planned");
                let before = state.tool_tokens();
                let next = state.on_tool_result(step.tokens);
                turn.tool = Some(ToolStep {
                    tokens: state.tool_tokens() - before,
                    latency_s: step.latency_s,
                });
                turns.push(turn);
                if matches!(next, Next::Finish(_)) {
                    break;
                }
            }
            _ => {
                turns.push(turn);
                break;
            }
        }
    }
    turns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimConfig;

    #[test]
    fn same_seed_same_workload_other_seed_differs() {
        let c = SimConfig::small().workload;
        assert_eq!(Workload::generate(&c, 7), Workload::generate(&c, 7));
        assert_ne!(Workload::generate(&c, 7), Workload::generate(&c, 8));
    }

    #[test]
    fn budget_and_turns_respected() {
        let c = SimConfig::rstar2_agent_64gpu().workload;
        let w = Workload::generate(&c, 1);
        assert_eq!(w.rollouts.len(), 512 * 32);
        for r in &w.rollouts {
            let response: u64 = r
                .turns
                .iter()
                .map(|t| t.generated + t.tool.map_or(0, |s| s.tokens))
                .sum();
            assert!(response <= c.max_response_tokens);
            assert!(r.turns.len() <= c.max_turns as usize);
            assert!(
                r.turns
                    .iter()
                    .all(|t| t.generated >= 1 || response == c.max_response_tokens)
            );
        }
        let s = w.summary();
        // A long tail: the 99th percentile is several times the median and some rollouts
        // hit the budget, as in the paper's 12K stage.
        assert!(
            s.response_tokens_p99 as f64 > 3.0 * s.response_tokens_p50 as f64,
            "{s:?}"
        );
        assert!(
            s.truncated_fraction > 0.0 && s.truncated_fraction < 0.1,
            "{s:?}"
        );
        assert!((1.0..4.0).contains(&s.tool_calls_mean), "{s:?}");
    }

    #[test]
    fn normal_draws_have_unit_moments() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let xs: Vec<f64> = (0..200_000).map(|_| normal(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((var - 1.0).abs() < 0.01, "{var}");
        let g: Vec<u32> = (0..200_000)
            .map(|_| geometric(&mut rng, 2.0, 1000))
            .collect();
        let gm = g.iter().map(|&k| k as f64).sum::<f64>() / g.len() as f64;
        assert!((gm - 2.0).abs() < 0.03, "{gm}");
    }
}
