//! Scheduled rollouts scored through [`AsyncTools::verify`] (`rl.verify = "remote"`, issue 46):
//! every finished rollout is sent once, in batches, and scores as in process; a verifier that
//! cannot answer fails the run rather than scoring by guessing.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use rstar_engine::BoxFuture;
use rstar_episode::episode::ByteTokenizer;
use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_rollout::Prompt;
use rstar_rollout::scheduled::{AsyncTools, ScheduleConfig, VerifyResult, run_scheduled_blocking};
use rstar_verifier::{Scored, VerifyItem};

use super::common::{Script, generators, outcome};

/// Scripted tools that score answers "remotely" with the in-process verifier, recording each
/// batch; or fail every batch when `fail`.
struct Verifying {
    batches: Mutex<Vec<Vec<VerifyItem>>>,
    fail: bool,
}

impl AsyncTools for Verifying {
    fn run(&self, call: ToolCall, _history: Vec<String>) -> BoxFuture<'_, ToolOutcome> {
        Box::pin(async move { outcome(&call.code) })
    }

    fn verifies(&self) -> bool {
        true
    }

    fn verify(&self, answers: Vec<VerifyItem>) -> BoxFuture<'_, VerifyResult> {
        Box::pin(async move {
            self.batches.lock().unwrap().push(answers.clone());
            if self.fail {
                return Err(rstar_rollout::Error::tools(
                    "http://verifier: connection refused",
                ));
            }
            let v = rstar_verifier::Verifier::new();
            Ok(answers
                .iter()
                .map(|a| Scored::of(v.verify_mode(a.mode, &a.response, &a.ground_truth)))
                .collect())
        })
    }
}

/// Rollout `r` answers `r % 3` after one tool call on its even rollouts.
fn script() -> Script {
    Arc::new(|rollout, turn| match (rollout % 2, turn) {
        (0, 0) => Some(format!("Check.<c>print({})</c>", rollout % 3)),
        _ => Some(format!("<answer>\\boxed{{{}}}</answer>", rollout % 3)),
    })
}

fn prompts() -> Vec<Prompt> {
    (0..6)
        .map(|i| Prompt::new(format!("p{i}"), "What is it?", (i % 3).to_string()))
        .collect()
}

#[test]
fn issue_46_every_rollout_is_verified_once_and_scores_as_in_process() {
    let config = ScheduleConfig::compact(3);
    let local = {
        let (gens, _) = generators(&script(), 2);
        let calls = Arc::new(AtomicUsize::new(0));
        run_scheduled_blocking(
            gens,
            ByteTokenizer,
            super::common::tools(calls),
            &prompts(),
            4,
            &config,
        )
        .unwrap()
    };
    let tools = Arc::new(Verifying {
        batches: Mutex::new(Vec::new()),
        fail: false,
    });
    let (gens, _) = generators(&script(), 2);
    let remote = run_scheduled_blocking(
        gens,
        ByteTokenizer,
        Arc::clone(&tools) as Arc<dyn AsyncTools>,
        &prompts(),
        4,
        &config,
    )
    .unwrap();
    assert_eq!(local.rollout.trajectories, remote.rollout.trajectories);
    let rewards: Vec<f32> = remote
        .rollout
        .trajectories
        .iter()
        .map(|t| t.reward.unwrap())
        .collect();
    assert!(
        rewards.contains(&1.0) && rewards.contains(&0.0),
        "{rewards:?}"
    );
    let batches = tools.batches.lock().unwrap();
    let sent: Vec<&VerifyItem> = batches.iter().flatten().collect();
    assert_eq!(sent.len(), 24, "each of the 6 × 4 rollouts once");
    for t in &remote.rollout.trajectories {
        let truth = t.ground_truth.as_deref().unwrap();
        let n = sent
            .iter()
            .filter(|a| a.response == t.assistant_text() && a.ground_truth == truth)
            .count();
        assert!(n >= 1, "{} {} not sent", t.id, t.sample);
    }
}

#[test]
fn a_verifier_that_cannot_answer_fails_the_run() {
    let tools = Arc::new(Verifying {
        batches: Mutex::new(Vec::new()),
        fail: true,
    });
    let (gens, _) = generators(&script(), 1);
    let err = run_scheduled_blocking(
        gens,
        ByteTokenizer,
        tools as Arc<dyn AsyncTools>,
        &prompts(),
        2,
        &ScheduleConfig::compact(3),
    )
    .unwrap_err();
    assert!(err.to_string().contains("connection refused"), "{err}");
}
