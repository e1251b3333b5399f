//! Writes two synthetic trajectory files with per-token entropies ("before" and "after" RL) for trying `rstar show` and `rstar analyze entropy`.
//!
//! Run with `cargo run -p rstar-analysis --example entropy_demo -- [OUT_DIR] [SEED]`, then
//! `rstar analyze entropy --compare OUT_DIR/before.jsonl OUT_DIR/after.jsonl`.
//!
//! The rollouts are scripted (the embedded task set, the compact template, a fake sandbox that
//! knows each task's solution) and the entropies come from a hand-written, seeded model, NOT
//! from a policy: forking words ("But", "Wait", "Alternatively") are uncertain, code is fairly
//! certain, and the "after" checkpoint hesitates more right after a failed tool call, which is
//! the paper's §6 finding. Real entropies are recorded by the rollout driver through
//! `Episode::push_assistant_sampled`.

use std::path::PathBuf;

use anyhow::Context;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rstar_episode::episode::{ByteTokenizer, Episode, Limits, Score, Step, TokenStats, Trajectory};
use rstar_episode::template::Template;
use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_tasks::tasks::{Split, Task, TaskConfig, TaskSet};

/// Words whose first byte gets a high entropy: the paper's forking and reflection tokens.
const FORKS: [&str; 6] = [
    "But",
    "Wait",
    "Alternatively",
    "Check",
    "Instead",
    "The error",
];

/// Entropies for the bytes of `text`: low noise, high at forking words, middling in code;
/// `reflect` adds uncertainty to the first bytes (the reaction to a tool response).
fn entropies(text: &str, reflect: f32, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let mut e: Vec<f32> = text
        .bytes()
        .map(|_| 0.02 + 0.4 * rng.random::<f32>().powi(4))
        .collect();
    for w in FORKS {
        for (i, _) in text.match_indices(w) {
            e[i] = rng.random_range(1.6f32..2.6);
        }
    }
    if let (Some(s), Some(t)) = (text.find("<c>"), text.find("</c>")) {
        for x in &mut e[s + 3..t] {
            *x += 0.3 * rng.random::<f32>().powi(2);
        }
    }
    for x in e.iter_mut().take(4) {
        *x += reflect * rng.random_range(0.5f32..1.0);
    }
    e
}

fn rollout(task: &Task, sample: u32, after_rl: bool, rng: &mut ChaCha8Rng) -> Trajectory {
    let tok = ByteTokenizer;
    let template = Template::compact();
    let mut ep = Episode::new(&tok, &template, Limits::compact(), &task.problem_text())
        .with_id(task.id.clone(), sample)
        .with_ground_truth(task.answer());
    let typo = rng.random_bool(0.5);
    let code = if typo {
        task.solution_code().replacen("print", "prnt", 1)
    } else {
        task.solution_code()
    };
    // A policy before RL gives up after a failed call more often; after RL it fixes the code.
    let fixes = !typo || rng.random_bool(if after_rl { 0.9 } else { 0.4 });
    let first = format!(
        "Compute it.{}",
        template.render_tool_call(&ToolCall::python(code))
    );
    let mut turns = vec![first];
    if typo && fixes {
        let reason = if after_rl {
            "The error is a typo. Instead use print."
        } else {
            "Wait, again."
        };
        let fixed = ToolCall::python(task.solution_code());
        turns.push(format!("{reason}{}", template.render_tool_call(&fixed)));
    }
    let answer = if fixes {
        task.answer()
    } else {
        "0".to_string()
    };
    let last = if rng.random_bool(0.5) {
        format!("But check: <answer>\\boxed{{{answer}}}</answer>")
    } else {
        format!("<answer>\\boxed{{{answer}}}</answer>")
    };
    turns.push(last);

    let mut turn = 0;
    loop {
        match ep.step() {
            Step::Generate { .. } => {
                let text = &turns[turn.min(turns.len() - 1)];
                let reflect = if turn == 0 {
                    0.0
                } else if after_rl {
                    1.5
                } else {
                    0.3
                };
                let ids: Vec<u32> = text.bytes().map(u32::from).collect();
                let e = entropies(text, reflect, rng);
                let stats = TokenStats {
                    logprobs: e.iter().map(|x| -x * 0.6).collect(),
                    entropies: e,
                };
                ep.push_assistant_sampled(&ids, stats)
                    .expect("the script follows the episode");
                turn += 1;
            }
            Step::CallTools(calls) => {
                let outs = calls
                    .iter()
                    .map(|c| {
                        if c.code == task.solution_code() {
                            ToolOutcome::code_judge(
                                true,
                                "",
                                &format!("{}\n", task.answer()),
                                "",
                                0.01,
                            )
                        } else {
                            ToolOutcome::code_judge(
                                false,
                                "",
                                "",
                                "NameError: name 'prnt' is not defined",
                                0.01,
                            )
                        }
                    })
                    .collect();
                ep.push_tool_outcomes(outs).expect("one outcome per call");
            }
            Step::Done(_) => break,
        }
    }
    let truth = task.answer();
    ep.finish_scored(|text| {
        let got = text
            .rsplit("\\boxed{")
            .next()
            .and_then(|s| s.split('}').next())
            .map(str::to_string);
        let reward = if got.as_deref() == Some(truth.as_str()) {
            1.0
        } else {
            0.0
        };
        Score {
            answer: got,
            reward,
        }
    })
    .expect("the script ends the episode")
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(args.next().unwrap_or_else(|| "entropy_demo".to_string()));
    let seed: u64 = match args.next() {
        Some(s) => s.parse().context("the seed must be an integer")?,
        None => 0,
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let set = TaskSet::new(TaskConfig::embedded_default())?;
    let tasks = set.generate(Split::Train, 32, seed)?;
    for (name, after_rl) in [("before", false), ("after", true)] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let trajs: Vec<Trajectory> = tasks
            .iter()
            .flat_map(|t| (0..2).map(move |s| (t, s)))
            .map(|(t, s)| rollout(t, s, after_rl, &mut rng))
            .collect();
        let path = out.join(format!("{name}.jsonl"));
        Trajectory::write_jsonl(&path, &trajs)?;
        let solved = trajs.iter().filter(|t| t.reward == Some(1.0)).count();
        println!(
            "wrote {} ({} rollouts, {solved} solved)",
            path.display(),
            trajs.len()
        );
    }
    println!(
        "try: rstar analyze entropy --compare {0}/before.jsonl {0}/after.jsonl",
        out.display()
    );
    Ok(())
}
