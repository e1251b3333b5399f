//! `cargo xtask bench NAME`: benchmarks that print medians and ratios against a
//! peer measured side by side in the same run.

use anyhow::{Result, bail};

/// Every benchmark: its name and what it compares. Each arm of `run` calls
/// `venv::ensure_bench()` first when it needs a Python peer. Each arm of `run` calls
/// `venv::ensure_bench()` first when it needs a Python peer.
const BENCHES: &[(&str, &str)] = &[];

pub fn run(args: &[String]) -> Result<()> {
    let Some(name) = args.first() else {
        list();
        bail!("name a benchmark");
    };
    #[allow(clippy::match_single_binding)] // reason: one arm per benchmark as they land
    match name.as_str() {
        other => {
            list();
            bail!("unknown benchmark `{other}`")
        }
    }
}

fn list() {
    eprintln!("benchmarks (cargo xtask bench NAME):");
    if BENCHES.is_empty() {
        eprintln!("  (none yet)");
    }
    for (name, what) in BENCHES {
        eprintln!("  {name:<16} {what}");
    }
}
