//! Scripted metric sequences drive the presets through their stages.

use rstar_curriculum::{Curriculum, CurriculumConfig, Decision, ProblemSet, StepMetrics};

/// Runs `metrics(step)` until the curriculum finishes; returns the decisions
/// that were not `Stay`, with their 1-based step.
fn drive(config: CurriculumConfig, metrics: impl Fn(u64) -> StepMetrics) -> Vec<(u64, Decision)> {
    let mut c = Curriculum::new(config).unwrap();
    let mut out = Vec::new();
    let mut step = 0;
    while !c.is_finished() {
        step += 1;
        assert!(step <= 10_000, "never finished");
        let d = c.observe(metrics(step)).unwrap();
        if d != Decision::Stay {
            out.push((step, d));
        }
    }
    out
}

#[test]
fn paper_preset_advances_at_300_385_510() {
    // Rising reward, few truncations: only the step budgets end stages.
    let events = drive(CurriculumConfig::rstar2_agent(), |s| {
        StepMetrics::new(0.2 + s as f64 * 1e-3, 0.02)
    });
    let steps: Vec<u64> = events.iter().map(|e| e.0).collect();
    assert_eq!(steps, [300, 385, 510]);
    match &events[0].1 {
        Decision::Advance {
            to,
            name,
            reset_optimizer,
            because,
        } => {
            assert_eq!((*to, name.as_str(), *reset_optimizer), (1, "12k", false));
            assert!(because.contains("step budget of 300 reached"), "{because}");
        }
        other => panic!("{other:?}"),
    }
    match &events[1].1 {
        Decision::Advance {
            to,
            name,
            reset_optimizer,
            ..
        } => {
            assert_eq!(
                (*to, name.as_str(), *reset_optimizer),
                (2, "12k-hard", true)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&events[2].1, Decision::Finish { because } if because.contains("step budget of 125"))
    );
}

#[test]
fn paper_preset_leaves_8k_early_when_it_stalls() {
    // Reward rises for 120 steps then is flat; truncation climbs to 12% from step 150.
    let metrics = |s: u64| {
        let reward = if s <= 120 { s as f64 / 200.0 } else { 0.6 };
        let trunc = if s >= 150 { 0.12 } else { 0.03 };
        StepMetrics::new(reward, trunc)
    };
    let events = drive(CurriculumConfig::rstar2_agent(), metrics);
    // The 20-step moving average reaches 0.6 at step 139 and is within
    // δ = 0.005 of it from step 134 (0.59625; 0.59475 at step 133), so the
    // plateau (window 50) holds from step 134 + 50 = 184; truncation >= 10%
    // for 10 steps holds from step 159. Both hold first at 184.
    assert_eq!(events[0].0, 184);
    match &events[0].1 {
        Decision::Advance { because, .. } => {
            assert!(
                because.contains("reward plateau") && because.contains("truncation rate >= 0.1"),
                "{because}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        events.iter().map(|e| e.0).collect::<Vec<_>>(),
        [184, 269, 394]
    );
}

#[test]
fn paper_preset_shape() {
    let c = CurriculumConfig::rstar2_agent();
    let tokens: Vec<u32> = c.stages.iter().map(|s| s.max_response_tokens).collect();
    let turns: Vec<u32> = c.stages.iter().map(|s| s.max_assistant_turns).collect();
    let steps: Vec<Option<u64>> = c.stages.iter().map(|s| s.steps).collect();
    assert_eq!(tokens, [8192, 12288, 12288]);
    assert_eq!(turns, [10, 10, 15]);
    assert_eq!(steps, [Some(300), Some(85), Some(125)]);
    assert_eq!(c.total_steps(), Some(510));
    assert_eq!(c.stages[2].problems, ProblemSet::Hard { k: 8, below: 1.0 });
    assert!(
        c.stages[2].reset_optimizer && !c.stages[0].reset_optimizer && !c.stages[1].reset_optimizer
    );
    assert!(c.stages.iter().all(|s| s.temperature == 1.0));
}

#[test]
fn tiny_preset_runs_in_a_few_steps() {
    let c = CurriculumConfig::tiny();
    c.validate().unwrap();
    assert_eq!(c.stages.len(), 3);
    assert!(
        c.stages
            .iter()
            .all(|s| (128..=512).contains(&s.max_response_tokens))
    );
    assert!(matches!(c.stages[2].problems, ProblemSet::Hard { .. }));
    // The tiny model's hard stage keeps Adam's state (the paper's resets it).
    assert!(c.stages.iter().all(|s| !s.reset_optimizer));
    assert!(CurriculumConfig::rstar2_agent().stages[2].reset_optimizer);
    let events = drive(c, |s| StepMetrics::new(s as f64 / 10.0, 0.0));
    assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), [16, 32, 40]);
}

#[test]
fn observe_after_finish_is_an_error() {
    let mut c = Curriculum::new(CurriculumConfig::tiny()).unwrap();
    while !c.is_finished() {
        c.observe(StepMetrics::new(1.0, 0.0)).unwrap();
    }
    let err = c.observe(StepMetrics::new(1.0, 0.0)).unwrap_err();
    assert!(err.to_string().contains("finished"), "{err}");
}
