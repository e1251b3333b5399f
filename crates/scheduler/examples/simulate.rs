//! Simulates the three dispatch policies on a preset and prints them side by side.
//!
//! ```sh
//! cargo run --release -p rstar-scheduler --example simulate -- rstar2-agent-64gpu|small|CONFIG.json [SEED] [plot.svg]
//! ```

use rstar_scheduler::{DispatchPolicy, SimConfig, simulate_all};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let preset = args.next().unwrap_or_else(|| "small".to_string());
    // A preset name, or a JSON `SimConfig` (as `rstar simulate --json` writes under `config`).
    let mut config = if preset.ends_with(".json") {
        serde_json::from_str(&std::fs::read_to_string(&preset)?)?
    } else {
        SimConfig::preset(&preset)?
    };
    if let Some(seed) = args.next() {
        config.seed = seed.parse()?;
    }
    let started = std::time::Instant::now();
    let report = simulate_all(&config)?;
    print!("{}", report.table());
    if let Some(cut) = report.idle_cut_vs_static(DispatchPolicy::KvAware) {
        println!(
            "kv-aware cuts GPU idle time by {:.1}% against static",
            100.0 * cut
        );
    }
    println!("(simulated in {:.2} s)", started.elapsed().as_secs_f64());
    if let Some(path) = args.next() {
        std::fs::write(&path, report.utilisation_svg())?;
        println!("wrote {path}");
    }
    Ok(())
}
