//! Down-samples one generated group of 32 rollouts to 16 with both rules and
//! prints what each keeps: `cargo run -p rstar-roc --example downsample`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rstar_roc::{RocConfig, TraceSummary, select};

fn main() -> anyhow::Result<()> {
    // A synthetic group: 12 successes and 20 failures with varied tool records.
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let traces: Vec<TraceSummary> = (0..32)
        .map(|i| {
            let reward = if i % 8 < 3 { 1.0 } else { 0.0 };
            let ok = rng.random_range(0..4);
            let failed = rng.random_range(0..3);
            let timed_out = u32::from(rng.random_bool(0.15));
            let answers = if rng.random_bool(0.8) { 1 } else { 2 };
            TraceSummary::new(reward)
                .with_calls(ok, failed, timed_out, 0)
                .with_answers(answers, false)
                .with_turns(ok + failed + timed_out + 1)
        })
        .collect();
    let uids = vec!["problem-1"; traces.len()];
    for config in [
        RocConfig {
            seed: 7,
            ..RocConfig::paper()
        },
        RocConfig::reference(),
    ] {
        let sel = select(&uids, &traces, &config)?;
        println!(
            "mode {:?}: kept {} of {}",
            config.mode,
            sel.kept.len(),
            traces.len()
        );
        for &i in &sel.kept {
            let t = &traces[i];
            let p = &sel.penalties[i];
            println!(
                "  #{i:>2} reward {} calls {} errors {} p_err {:.2} p_format {:.2} p_total {:.2}",
                t.reward,
                t.tool_calls,
                t.failed_calls + t.timed_out_calls,
                p.p_err,
                p.p_format,
                p.p_total
            );
        }
        println!(
            "  mean p_total of successes: kept {:.3}, dropped {:.3}",
            sel.metrics["roc/kept_success_p_total_mean"],
            sel.metrics["roc/dropped_success_p_total_mean"]
        );
    }
    Ok(())
}
