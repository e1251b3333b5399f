//! `LocalEngine` with a random tiny model: a scheduled rollout is reproducible across runs,
//! engine counts and policies, because every turn samples with its own seed.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use burn::tensor::Device;
use rstar_engine::{LocalEngine, LocalEngineConfig, SharedTokenizer, TurnGenerator};
use rstar_episode::episode::Trajectory;
use rstar_episode::template::Template;
use rstar_policy::{Qwen, QwenConfig, Tokenizer};
use rstar_rollout::Prompt;
use rstar_rollout::scheduled::{ScheduleConfig, run_scheduled_blocking};
use rstar_scheduler::DispatchPolicy;

use super::common::tools;

fn run(engines: usize, policy: DispatchPolicy, record_entropy: bool) -> Vec<Trajectory> {
    let model = Qwen::random(QwenConfig::tiny_char(), 3, &Device::flex()).unwrap();
    let stops: Vec<String> = Template::compact()
        .stop_strings()
        .iter()
        .map(|s| s.to_string())
        .collect();
    let gens: Vec<Arc<dyn TurnGenerator>> = (0..engines)
        .map(|i| {
            let mut config = LocalEngineConfig::new(stops.clone());
            config.name = format!("local-{i}");
            Arc::new(LocalEngine::spawn(model.clone(), Tokenizer::char(), config))
                as Arc<dyn TurnGenerator>
        })
        .collect();
    let prompts: Vec<Prompt> = (0..3)
        .map(|i| {
            Prompt::new(
                format!("p{i}"),
                format!("What is {i}+{i}?"),
                (2 * i).to_string(),
            )
        })
        .collect();
    let mut config = ScheduleConfig::compact(17);
    config.limits.max_response_tokens = 24;
    config.policy = policy;
    config.record_entropy = record_entropy;
    let tok = SharedTokenizer(Arc::new(Tokenizer::char()));
    run_scheduled_blocking(
        gens,
        tok,
        tools(Arc::new(AtomicUsize::new(0))),
        &prompts,
        2,
        &config,
    )
    .unwrap()
    .rollout
    .trajectories
}

#[test]
fn local_engines_reproduce_across_runs_and_engine_counts() {
    let a = run(1, DispatchPolicy::KvAware, false);
    assert_eq!(a.len(), 6);
    for t in &a {
        t.validate().unwrap();
        assert!(t.response_ids.len() <= 24);
        assert!(t.entropies.is_empty());
    }
    // The two samples of a problem differ (their seeds do), at least for one problem.
    assert!(
        a.chunks(2)
            .any(|pair| pair[0].response_ids != pair[1].response_ids)
    );
    assert_eq!(run(1, DispatchPolicy::KvAware, false), a, "same run again");
    assert_eq!(
        run(2, DispatchPolicy::LeastRequests, false),
        a,
        "two engines"
    );
    let with = run(2, DispatchPolicy::Static, true);
    for (w, t) in with.iter().zip(&a) {
        assert_eq!(w.response_ids, t.response_ids);
        assert_eq!(w.entropies.len(), w.assistant_token_count());
        assert_eq!(w.token_logprobs.len(), w.assistant_token_count());
        assert!(w.entropies.iter().all(|e| e.is_finite() && *e >= 0.0));
        assert!(w.token_logprobs.iter().all(|l| *l <= 0.0));
    }
}
