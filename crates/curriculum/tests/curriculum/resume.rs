//! A state saved mid-stage and loaded resumes identically.

use proptest::prelude::*;
use rstar_curriculum::{Curriculum, CurriculumConfig, CurriculumState, Decision, StepMetrics};

fn metrics(s: u64) -> StepMetrics {
    // Climbs, then flat with truncations: exercises the paper preset's early exit.
    let reward = if s <= 120 { s as f64 / 200.0 } else { 0.6 };
    StepMetrics::new(reward, if s >= 150 { 0.12 } else { 0.03 })
}

fn run(c: &mut Curriculum, from: u64, to: u64) -> Vec<(u64, Decision)> {
    let mut out = Vec::new();
    for s in from..=to {
        if c.is_finished() {
            break;
        }
        let d = c.observe(metrics(s)).unwrap();
        if d != Decision::Stay {
            out.push((s, d));
        }
    }
    out
}

#[test]
fn resume_mid_stage_matches_an_uninterrupted_run() {
    let mut straight = Curriculum::new(CurriculumConfig::rstar2_agent()).unwrap();
    let all = run(&mut straight, 1, 400);

    let mut first = Curriculum::new(CurriculumConfig::rstar2_agent()).unwrap();
    let mut events = run(&mut first, 1, 170); // mid-stage: the plateau window is half full
    let saved = serde_json::to_string(first.state()).unwrap();
    drop(first);
    let state: CurriculumState = serde_json::from_str(&saved).unwrap();
    assert_eq!((state.stage, state.stage_step), (0, 170));
    let mut resumed = Curriculum::resume(CurriculumConfig::rstar2_agent(), state).unwrap();
    events.extend(run(&mut resumed, 171, 400));
    assert_eq!(events, all);
    assert_eq!(all.iter().map(|e| e.0).collect::<Vec<_>>(), [184, 269, 394]);
    assert_eq!(resumed.state(), straight.state());
}

#[test]
fn resume_in_a_later_stage() {
    let mut c = Curriculum::new(CurriculumConfig::rstar2_agent()).unwrap();
    run(&mut c, 1, 230);
    let state: CurriculumState =
        serde_json::from_str(&serde_json::to_string(c.state()).unwrap()).unwrap();
    let resumed = Curriculum::resume(CurriculumConfig::rstar2_agent(), state).unwrap();
    assert_eq!(resumed.stage().name, "12k");
    assert_eq!(resumed.state().entered_at, [0, 184]);
}

proptest! {
    #[test]
    fn any_save_point_resumes_identically(cut in 1u64..60, rewards in prop::collection::vec(0.0f64..1.0, 60), truncs in prop::collection::vec(0.0f64..=1.0, 60)) {
        let m = |s: u64| StepMetrics::new(rewards[s as usize - 1], truncs[s as usize - 1]);
        let mut straight = Curriculum::new(CurriculumConfig::tiny()).unwrap();
        let mut a = Vec::new();
        for s in 1..=60 {
            if straight.is_finished() { break; }
            a.push(straight.observe(m(s)).unwrap());
        }
        let mut first = Curriculum::new(CurriculumConfig::tiny()).unwrap();
        let mut b = Vec::new();
        let mut s = 1;
        while s <= cut && !first.is_finished() {
            b.push(first.observe(m(s)).unwrap());
            s += 1;
        }
        let state: CurriculumState = serde_json::from_str(&serde_json::to_string(first.state()).unwrap()).unwrap();
        let mut resumed = Curriculum::resume(CurriculumConfig::tiny(), state).unwrap();
        while s <= 60 && !resumed.is_finished() {
            b.push(resumed.observe(m(s)).unwrap());
            s += 1;
        }
        prop_assert_eq!(a, b);
    }
}
