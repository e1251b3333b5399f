//! `rstar report RUN_DIR [RUN_DIR2]`: a run's self-contained HTML report (config, evaluations,
//! training curves, sampled trajectories; with two runs, their comparison), written to
//! `RUN_DIR/report.html` or `--out FILE` (see `rstar_agent::analysis::report`).

use std::path::PathBuf;

use anyhow::{Context, bail};

use rstar_agent::analysis::report;

/// Arguments of `rstar report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run directory (`runs/<name>`).
    pub run: PathBuf,
    /// A second run to compare with the first (e.g. the `--no-roc` ablation).
    pub compare: Option<PathBuf>,
    /// The HTML file to write [default: RUN_DIR/report.html].
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Runs `rstar report`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let out = match &args.out {
        Some(out) => out.clone(),
        None if args.run.is_dir() => args.run.join("report.html"),
        None => bail!(
            "{} is not a directory (pass --out FILE to write a report that says so)",
            args.run.display()
        ),
    };
    let mut dirs = vec![args.run.clone()];
    dirs.extend(args.compare.clone());
    let runs = report::write(&dirs, &out).with_context(|| "writing the report".to_string())?;
    for r in &runs {
        for p in &r.problems {
            eprintln!("{}: {p}", r.dir.display());
        }
    }
    println!("{}", out.display());
    Ok(())
}
