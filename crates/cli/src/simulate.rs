//! `rstar simulate`: the three rollout dispatch policies side by side in `rstar-scheduler`'s
//! discrete-event simulator.
//!
//! Prints a table (makespan, GPU idle fraction, peak KV use, evictions, tool-call
//! concurrency per policy) and the acceptance check: kv-aware cuts GPU idle time by
//! at least 30% against static with zero evictions, least-requests in between. `--json`
//! writes the numbers (to stdout, or to a file), `--plot FILE.svg` the engine utilisation
//! over time per policy.

use std::path::PathBuf;

use anyhow::Context;
use rstar_agent::scheduler::{DispatchPolicy, KvRetention, SimConfig, SimReport, simulate_all};

/// KV retention during tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Retention {
    /// Keep the cache (and the kv-aware reservation) while the tool runs.
    Keep,
    /// Free it when the tool call starts; the next turn is prefilled again.
    Release,
}

/// Arguments of `rstar simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The preset: `rstar2-agent-64gpu` (the paper's scale) or `small`.
    #[arg(long, default_value = "rstar2-agent-64gpu")]
    pub preset: String,
    /// A JSON `SimConfig` to use instead of the preset (as `--json` writes under `config`).
    #[arg(long, conflicts_with = "preset")]
    pub config: Option<PathBuf>,
    /// Workload seed (overrides the preset's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// KV retention during tool calls (overrides the preset's).
    #[arg(long, value_enum)]
    pub retention: Option<Retention>,
    /// Write the report as JSON: to FILE, or to stdout instead of the table when no FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// Write engine utilisation over time per policy as an SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// The acceptance check as text, one line per claim.
fn verdict(report: &SimReport) -> String {
    let (Some(st), Some(lr), Some(kv)) = (
        report.get(DispatchPolicy::Static),
        report.get(DispatchPolicy::LeastRequests),
        report.get(DispatchPolicy::KvAware),
    ) else {
        return String::new();
    };
    let idle = |r: &rstar_agent::scheduler::PolicyReport| r.gpu_idle_fraction * r.makespan_s;
    let cut = report
        .idle_cut_vs_static(DispatchPolicy::KvAware)
        .unwrap_or(0.0);
    let between = idle(kv) <= idle(lr) && idle(lr) <= idle(st);
    format!(
        "check: kv-aware cuts GPU idle time by {:.1}% against static ({}), with {} evictions; \
         least-requests {}\n",
        100.0 * cut,
        if cut >= 0.3 {
            "at least 30%: yes"
        } else {
            "at least 30%: NO"
        },
        kv.evictions,
        if between {
            "lies in between".to_string()
        } else {
            format!(
                "does not lie in between: its idle time is {:.1}% of engine time against \
                 {:.1}% for static and {:.1}% for kv-aware",
                100.0 * lr.gpu_idle_fraction,
                100.0 * st.gpu_idle_fraction,
                100.0 * kv.gpu_idle_fraction
            )
        }
    )
}

/// Runs `rstar simulate`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str::<SimConfig>(&text)
                .with_context(|| format!("parsing {} as a simulator config", path.display()))?
        }
        None => SimConfig::preset(&args.preset)?,
    };
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    if let Some(r) = args.retention {
        config.retention = match r {
            Retention::Keep => KvRetention::Keep,
            Retention::Release => KvRetention::Release,
        };
    }
    let report = simulate_all(&config)?;
    let json = serde_json::to_string_pretty(&report)?;
    match args.json.as_deref() {
        Some(p) if p.as_os_str() == "-" => println!("{json}"),
        other => {
            print!("{}", report.table());
            print!("{}", verdict(&report));
            if let Some(path) = other {
                std::fs::write(path, &json)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, report.utilisation_svg())
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
