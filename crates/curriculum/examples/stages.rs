//! Prints the paper's curriculum and drives it with a scripted run whose
//! reward flattens while truncations climb: `cargo run -p rstar-curriculum --example stages`.

use rstar_curriculum::{
    Curriculum, CurriculumConfig, Decision, HardFilter, PassCounts, StepMetrics,
};

fn main() -> anyhow::Result<()> {
    let config = CurriculumConfig::rstar2_agent();
    print!("{}", config.table());

    let mut curriculum = Curriculum::new(config)?;
    let mut step = 0u64;
    while !curriculum.is_finished() {
        step += 1;
        let reward = (step as f64 / 200.0).min(0.6);
        let truncation = if step >= 150 { 0.12 } else { 0.03 };
        match curriculum.observe(StepMetrics::new(reward, truncation))? {
            Decision::Stay => {}
            Decision::Advance {
                name,
                reset_optimizer,
                because,
                ..
            } => {
                println!(
                    "step {step}: advance to `{name}` (reset optimizer: {reset_optimizer}): {because}"
                );
            }
            Decision::Finish { because } => println!("step {step}: finished: {because}"),
        }
    }

    // The hard filter before the last stage: 8 samples of 5 problems.
    let mut counts = PassCounts::new();
    for (id, passes) in [("p1", 8), ("p2", 5), ("p3", 0), ("p4", 8), ("p5", 7)] {
        for s in 0..8 {
            counts.record(id, s < passes);
        }
    }
    let ids = ["p1", "p2", "p3", "p4", "p5"];
    let (keep, report) = HardFilter::rstar2_agent().apply(&ids, &counts)?;
    let kept: Vec<&str> = ids
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(id, _)| *id)
        .collect();
    println!("hard problems: {kept:?}; {report}");
    Ok(())
}
