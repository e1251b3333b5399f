//! Plateau and truncation triggers, with their edge cases.

use rstar_curriculum::trigger::{Compare, Plateau, Truncation};
use rstar_curriculum::{Curriculum, CurriculumConfig, Decision, Stage, StepMetrics, Trigger};

fn hist(points: &[(f64, f64)]) -> Vec<StepMetrics> {
    points
        .iter()
        .map(|&(r, t)| StepMetrics::new(r, t))
        .collect()
}

fn truncation(threshold: f64, window: u64, compare: Compare) -> Trigger {
    Trigger::Truncation(Truncation {
        threshold,
        window,
        compare,
    })
}

fn plateau(window: u64, delta: f64, average: u64, warmup: u64) -> Trigger {
    Trigger::Plateau(Plateau {
        window,
        delta,
        average,
        warmup,
    })
}

/// The first 1-based step at which `trigger` fires on `points`, if any.
fn first_fire(trigger: &Trigger, points: &[(f64, f64)]) -> Option<usize> {
    let h = hist(points);
    (1..=h.len()).find(|&n| trigger.check(&h[..n]).is_some())
}

#[test]
fn truncation_needs_the_whole_window() {
    let t = truncation(0.1, 3, Compare::AtOrBelow);
    // 0.2 0.1 0.05 0.3 0.1 0.1 0.1: the window of 3 at or below 0.1 first holds at step 7.
    let seq: Vec<(f64, f64)> = [0.2, 0.1, 0.05, 0.3, 0.1, 0.1, 0.1]
        .iter()
        .map(|&x| (0.0, x))
        .collect();
    assert_eq!(first_fire(&t, &seq), Some(7));
    // At or below includes equality; steps 2-4 hold here.
    let seq: Vec<(f64, f64)> = [0.2, 0.1, 0.1, 0.1].iter().map(|&x| (0.0, x)).collect();
    assert_eq!(first_fire(&t, &seq), Some(4));
    let up = truncation(0.1, 2, Compare::AtOrAbove);
    let seq: Vec<(f64, f64)> = [0.0, 0.1, 0.09, 0.1, 0.5]
        .iter()
        .map(|&x| (0.0, x))
        .collect();
    assert_eq!(first_fire(&up, &seq), Some(5));
}

#[test]
fn truncation_window_longer_than_the_stage_never_fires() {
    let t = truncation(0.5, 10, Compare::AtOrBelow);
    assert_eq!(first_fire(&t, &[(0.0, 0.0); 9]), None);
    assert_eq!(first_fire(&t, &[(0.0, 0.0); 10]), Some(10));
}

#[test]
fn plateau_on_a_flat_reward_fires_after_average_plus_window() {
    // A constant reward is flat from the start, so the plateau fires as soon as
    // it has `average + window` steps.
    assert_eq!(
        first_fire(&plateau(4, 0.0, 3, 0), &[(0.5, 0.0); 20]),
        Some(7)
    );
}

#[test]
fn plateau_window_shorter_than_warmup_waits_for_warmup() {
    // Window 2 and average 1 would fire at step 3; warm-up 10 holds it to step 10.
    assert_eq!(
        first_fire(&plateau(2, 0.0, 1, 10), &[(0.5, 0.0); 20]),
        Some(10)
    );
    // Warm-up shorter than the window: the window decides.
    assert_eq!(
        first_fire(&plateau(5, 0.0, 1, 2), &[(0.5, 0.0); 20]),
        Some(6)
    );
}

#[test]
fn plateau_does_not_fire_while_reward_improves_by_more_than_delta() {
    // +0.02 per step; over a window of 3 the average of 2 rises by 0.06.
    let rising: Vec<(f64, f64)> = (0..50).map(|i| (i as f64 * 0.02, 0.0)).collect();
    assert_eq!(first_fire(&plateau(3, 0.05, 2, 0), &rising), None);
    assert_eq!(first_fire(&plateau(3, 0.06 + 1e-9, 2, 0), &rising), Some(5));
}

#[test]
fn plateau_ignores_a_drop() {
    // A falling reward does not improve: that is a plateau too.
    let falling: Vec<(f64, f64)> = (0..10).map(|i| (1.0 - i as f64 * 0.1, 0.0)).collect();
    assert_eq!(first_fire(&plateau(3, 0.0, 1, 0), &falling), Some(4));
}

#[test]
fn plateau_noise_within_delta() {
    // Noise of ±0.01 around 0.4 after a climb; delta 0.03 sees it as flat.
    let mut seq: Vec<(f64, f64)> = (0..5).map(|i| (i as f64 * 0.1, 0.0)).collect();
    seq.extend((0..10).map(|i| (0.4 + if i % 2 == 0 { 0.01 } else { -0.01 }, 0.0)));
    let fired = first_fire(&plateau(4, 0.03, 2, 0), &seq).unwrap();
    assert!((9..=11).contains(&fired), "{fired}");
}

#[test]
fn nan_metrics_are_rejected_with_an_error() {
    let stage = Stage::new("a", 100, 2).until(plateau(2, 0.0, 1, 0));
    let config = CurriculumConfig {
        stages: vec![stage, Stage::new("b", 200, 2).steps(1)],
    };
    let mut c = Curriculum::new(config).unwrap();
    assert_eq!(
        c.observe(StepMetrics::new(0.1, 0.0)).unwrap(),
        Decision::Stay
    );
    let err = c.observe(StepMetrics::new(f64::NAN, 0.0)).unwrap_err();
    assert!(err.to_string().contains("`reward_mean` is NaN"), "{err}");
    let err = c.observe(StepMetrics::new(0.1, f64::NAN)).unwrap_err();
    assert!(
        err.to_string().contains("`truncation_rate` is NaN"),
        "{err}"
    );
    // The rejected steps were not counted: the plateau fires on the 3rd accepted step.
    assert_eq!(
        c.observe(StepMetrics::new(0.1, 0.0)).unwrap(),
        Decision::Stay
    );
    assert!(matches!(
        c.observe(StepMetrics::new(0.1, 0.0)).unwrap(),
        Decision::Advance { to: 1, .. }
    ));
    assert_eq!(c.state().total_step, 3);
}

#[test]
fn any_and_all_combine() {
    let any = Trigger::Any(vec![
        Trigger::Steps(10),
        truncation(0.0, 2, Compare::AtOrBelow),
    ]);
    let all = Trigger::All(vec![
        Trigger::Steps(3),
        truncation(0.0, 2, Compare::AtOrBelow),
    ]);
    let seq = [(0.0, 0.5), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0)];
    assert_eq!(first_fire(&any, &seq), Some(3));
    assert_eq!(first_fire(&all, &seq), Some(3));
    let seq = [(0.0, 0.5), (0.0, 0.0), (0.0, 0.5), (0.0, 0.0), (0.0, 0.0)];
    assert_eq!(first_fire(&all, &seq), Some(5));
}
