//! `cargo xtask bench scheduler`: the three dispatch policies on the paper-scale preset over
//! several seeds, with medians and ratios against the `static` baseline measured in the same
//! run, and the simulator's own wall time.
//!
//! `RSTAR_BENCH_SEEDS` (default 5) sets how many seeds; `RSTAR_BENCH_PRESET` the preset.

use std::time::Instant;

use rstar_scheduler::{DispatchPolicy, PolicyReport, SimConfig, simulate_all};

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn main() {
    let seeds: u64 = std::env::var("RSTAR_BENCH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let preset =
        std::env::var("RSTAR_BENCH_PRESET").unwrap_or_else(|_| "rstar2-agent-64gpu".to_string());
    let base = SimConfig::preset(&preset).expect("a known preset");
    let mut reports = Vec::new();
    let mut wall = Vec::new();
    for seed in 0..seeds {
        let mut config = base.clone();
        config.seed = seed;
        let started = Instant::now();
        let report = simulate_all(&config).expect("the preset is valid");
        wall.push(started.elapsed().as_secs_f64());
        reports.push(report);
    }
    println!(
        "preset {preset}, seeds 0..{seeds}, retention {}: medians over seeds (ratio = policy / static, same seed)",
        base.retention.name()
    );
    println!(
        "{:<16}{:>14}{:>12}{:>12}{:>12}{:>12}{:>12}{:>14}",
        "policy",
        "makespan s",
        "ratio",
        "GPU idle",
        "idle ratio",
        "peak KV",
        "evictions",
        "peak tools"
    );
    let get = |r: &rstar_scheduler::SimReport, p| r.get(p).expect("all policies").clone();
    for policy in DispatchPolicy::ALL {
        let mine: Vec<PolicyReport> = reports.iter().map(|r| get(r, policy)).collect();
        let base: Vec<PolicyReport> = reports
            .iter()
            .map(|r| get(r, DispatchPolicy::Static))
            .collect();
        let idle_s = |r: &PolicyReport| r.gpu_idle_fraction * r.makespan_s;
        println!(
            "{:<16}{:>14.1}{:>12.3}{:>11.1}%{:>12.3}{:>11.1}%{:>12.0}{:>14.0}",
            policy.name(),
            median(mine.iter().map(|r| r.makespan_s).collect()),
            median(
                mine.iter()
                    .zip(&base)
                    .map(|(m, b)| m.makespan_s / b.makespan_s)
                    .collect()
            ),
            100.0 * median(mine.iter().map(|r| r.gpu_idle_fraction).collect()),
            median(
                mine.iter()
                    .zip(&base)
                    .map(|(m, b)| idle_s(m) / idle_s(b))
                    .collect()
            ),
            100.0 * median(mine.iter().map(|r| r.peak_kv_fraction).collect()),
            median(mine.iter().map(|r| r.evictions as f64).collect()),
            median(
                mine.iter()
                    .map(|r| r.peak_tool_concurrency as f64)
                    .collect()
            ),
        );
    }
    let kv_never_slower = reports.iter().all(|r| {
        get(r, DispatchPolicy::KvAware).makespan_s <= get(r, DispatchPolicy::Static).makespan_s
    });
    println!("kv-aware never slower than static on these seeds: {kv_never_slower}");
    println!(
        "simulator wall time per preset run (3 policies): median {:.2} s",
        median(wall)
    );
}
