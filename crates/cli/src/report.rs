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
    let mut dirs = vec![args.run.clone()];
    dirs.extend(args.compare.clone());
    // A path that is no run directory is a mistake (a typo, a run not made yet): say so and
    // exit non-zero, rather than write a page about nothing.
    for dir in &dirs {
        if !dir.is_dir() {
            bail!(
                "{}: no such run directory (`cargo xtask train` writes runs/tiny; `rstar train --out DIR` any other)",
                dir.display()
            );
        }
    }
    let out = match &args.out {
        Some(out) => out.clone(),
        None => args.run.join("report.html"),
    };
    let runs = report::write(&dirs, &out).with_context(|| "writing the report".to_string())?;
    for r in &runs {
        for p in &r.problems {
            eprintln!("{}: {p}", r.dir.display());
        }
    }
    println!("{}", out.display());
    Ok(())
}
