//! A synthetic run directory (config, SFT and RL metrics, evaluations; no model) drawn as the
//! trainer draws a real one: `plots/*.svg` and the self-contained `report.html`.
//!
//! `cargo run -p rstar-analysis --example report -- [OUT_DIR] [STEPS]` (default
//! `target/report-demo`, 160 RL steps in three curriculum stages, the scheduled driver's
//! timings: tool seconds summed over concurrent calls far above the step's wall-clock time,
//! which the step-time chart leaves out).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use rstar_analysis::records::{EvalRow, TrajectoryStats};
use rstar_analysis::{plots, report};
use serde_json::json;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(args.next().unwrap_or_else(|| "target/report-demo".into()));
    let steps: u64 = args.next().map_or(Ok(160), |s| s.parse())?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;

    let config = json!({
        "preset": "demo",
        "seed": 7,
        "sft": {"steps": 40},
        "rl": {"roc": {"mode": "paper"}, "lr": 5e-5, "prompts_per_step": 8, "group_size": 8,
               "rollout_driver": "scheduled"},
        "curriculum": {"stages": [{"name": "short"}, {"name": "long"}, {"name": "hard"}]},
        "eval": {"problems": 64, "samples": 4, "temperature": 1.0},
    });
    std::fs::write(
        out.join("config.json"),
        serde_json::to_string_pretty(&config)?,
    )?;

    let mut sft = String::new();
    for step in 1..=40u32 {
        let loss = 0.4 + 2.0 * (-f64::from(step) / 8.0).exp();
        writeln!(sft, "{}", json!({"step": step, "loss": loss}))?;
    }
    std::fs::write(out.join("sft_metrics.jsonl"), sft)?;

    // Stages end after 40 % and 80 % of the steps; a smooth, slightly noisy climb.
    let ends = [steps * 2 / 5, steps * 4 / 5];
    let mut metrics = String::new();
    for step in 1..=steps {
        let stage = ends.iter().filter(|&&e| step > e).count();
        let name = ["short", "long", "hard"][stage];
        let t = step as f64 / steps as f64;
        let wiggle = ((step * 7919) % 13) as f64 / 13.0 - 0.5;
        let decision = match (ends.contains(&step), step == steps) {
            (true, _) => format!("advance to `{}`", ["short", "long", "hard"][stage + 1]),
            (_, true) => "finish".to_string(),
            _ => "stay".to_string(),
        };
        let line = json!({
            "step": step, "stage": stage, "stage_name": name, "decision": decision,
            "all": {"accuracy": 0.3 + 0.4 * t + 0.05 * wiggle, "tool_error_rate": 0.4 - 0.3 * t,
                    "tool_error_rate_success": 0.25 - 0.2 * t, "response_len": 180.0 + 60.0 * t,
                    "truncation_rate": 0.05 * (1.0 - t)},
            "kept": {"accuracy": 0.5 + 0.3 * t, "tool_error_rate_success": 0.2 - 0.18 * t,
                     "response_len": 170.0 + 50.0 * t},
            "clip_frac": 0.01 + 0.004 * wiggle, "entropy": 1.2 - 0.5 * t,
            // Scheduled driver: the rollout's wall-clock time includes the tool calls, whose
            // durations summed over concurrent calls run to thousands of seconds.
            "time_rollout": 20.0 + 6.0 * t + wiggle, "time_tools": 2000.0 + 500.0 * t,
            "time_update": 8.0 + wiggle, "time_step": 30.0 + 6.0 * t + 2.0 * wiggle,
        });
        writeln!(metrics, "{line}")?;
    }
    std::fs::write(out.join("metrics.jsonl"), metrics)?;

    let stats = |accuracy: f64, count: usize| TrajectoryStats {
        count,
        accuracy,
        response_len: 200.0,
        tool_calls: 1.2,
        tool_error_rate: 0.2,
        tool_error_rate_success: 0.1,
        answered: 0.95,
        ..TrajectoryStats::default()
    };
    let mut evals = String::new();
    let phases = [
        ("sft", 0),
        ("stage short", ends[0]),
        ("stage long", ends[1]),
        ("stage hard", steps),
    ];
    for (i, (phase, rl_steps)) in phases.iter().enumerate() {
        let accuracy = 0.3 + 0.12 * i as f64;
        let row = EvalRow {
            phase: phase.to_string(),
            rl_steps: *rl_steps,
            greedy: stats(accuracy + 0.05, 64),
            sampled: Some(stats(accuracy, 256)),
            avg_at_k: Some(accuracy),
            pass_at_k: Vec::new(),
            more: Vec::new(),
        };
        writeln!(evals, "{}", serde_json::to_string(&row)?)?;
    }
    std::fs::write(out.join("eval.jsonl"), evals)?;

    for file in plots::draw(&out)? {
        println!("{}", file.display());
    }
    let page = out.join("report.html");
    let runs = report::write(std::slice::from_ref(&out), &page)?;
    for problem in runs.iter().flat_map(|r| &r.problems) {
        // samples.jsonl is missing: the demo has no trajectories to show.
        println!("note: {problem}");
    }
    println!("{}", page.display());
    Ok(())
}
