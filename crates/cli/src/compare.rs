//! `rstar eval --compare A B`: a paired comparison of two evaluations on the same problems.
//!
//! Each problem is scored by its avg@k (1 or 0 greedy); the difference B − A is averaged over
//! the problems both evaluations hold, with the paired 95% interval
//! (`rstar_agent::analysis::interval::Interval::paired`), which is far narrower than two
//! separate intervals because the problems' difficulty is shared. A problem *flipped* when a
//! majority of its samples solved it in one evaluation and not in the other.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rstar_agent::analysis::interval::Interval;
use rstar_agent::eval::ProblemResult;
use serde::Serialize;

/// What `--compare --json` prints.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// The first evaluation's results file.
    pub a: PathBuf,
    /// The second evaluation's results file.
    pub b: PathBuf,
    /// Problems both hold.
    pub problems: usize,
    /// Problems only one of them holds (left out of everything else).
    pub unmatched: usize,
    /// A's mean avg@k over the common problems.
    pub accuracy_a: f64,
    /// B's.
    pub accuracy_b: f64,
    /// Their Wilson 95% intervals.
    pub interval_a: Interval,
    /// B's.
    pub interval_b: Interval,
    /// `accuracy_b − accuracy_a`.
    pub difference: f64,
    /// The paired 95% interval of the difference.
    pub difference_interval: Interval,
    /// Problems B solves (a majority of samples) and A does not.
    pub gained: Vec<String>,
    /// Problems A solves and B does not.
    pub lost: Vec<String>,
}

/// The results file of an evaluation: `DIR/results.jsonl`, or the file itself.
fn results_path(p: &Path) -> PathBuf {
    if p.is_dir() {
        p.join("results.jsonl")
    } else {
        p.to_path_buf()
    }
}

/// The per-problem results of one evaluation, by id.
fn read(path: &Path) -> anyhow::Result<BTreeMap<String, ProblemResult>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "{}: cannot read (expected an `rstar eval --out` directory or its results.jsonl)",
            path.display()
        )
    })?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: ProblemResult = serde_json::from_str(line)
            .with_context(|| format!("{}: line {}: not a problem result", path.display(), i + 1))?;
        if out.insert(r.id.clone(), r).is_some() {
            bail!("{}: line {}: problem id repeated", path.display(), i + 1);
        }
    }
    Ok(out)
}

/// Compares the evaluations `a` and `b`.
///
/// # Errors
/// A file that cannot be read or parsed (naming it and the line), or no problem in common.
pub fn compare(a: &Path, b: &Path) -> anyhow::Result<Comparison> {
    let (pa, pb) = (results_path(a), results_path(b));
    let (ra, rb) = (read(&pa)?, read(&pb)?);
    let mut diffs = Vec::new();
    let (mut sa, mut sb) = (0.0, 0.0);
    let (mut gained, mut lost) = (Vec::new(), Vec::new());
    for (id, x) in &ra {
        let Some(y) = rb.get(id) else { continue };
        diffs.push(y.avg - x.avg);
        sa += x.avg;
        sb += y.avg;
        match (x.avg > 0.5, y.avg > 0.5) {
            (false, true) => gained.push(id.clone()),
            (true, false) => lost.push(id.clone()),
            _ => {}
        }
    }
    let n = diffs.len();
    if n == 0 {
        bail!(
            "{} and {} have no problem id in common",
            pa.display(),
            pb.display()
        );
    }
    let (difference, difference_interval) = Interval::paired(&diffs);
    let (accuracy_a, accuracy_b) = (sa / n as f64, sb / n as f64);
    Ok(Comparison {
        unmatched: ra.len() + rb.len() - 2 * n,
        problems: n,
        interval_a: Interval::wilson(accuracy_a, n),
        interval_b: Interval::wilson(accuracy_b, n),
        accuracy_a,
        accuracy_b,
        difference,
        difference_interval,
        gained,
        lost,
        a: pa,
        b: pb,
    })
}

/// Runs `rstar eval --compare A B`.
pub fn run(a: &Path, b: &Path, json: bool) -> anyhow::Result<()> {
    let c = compare(a, b)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&c)?);
        return Ok(());
    }
    if c.unmatched > 0 {
        eprintln!(
            "{} problems are in only one of the two and are left out",
            c.unmatched
        );
    }
    println!("problems   {}", c.problems);
    println!(
        "A          {:.1}% {}  {}",
        100.0 * c.accuracy_a,
        c.interval_a,
        c.a.display()
    );
    println!(
        "B          {:.1}% {}  {}",
        100.0 * c.accuracy_b,
        c.interval_b,
        c.b.display()
    );
    let verdict = if c.difference_interval.excludes_zero() {
        if c.difference > 0.0 {
            "B is better"
        } else {
            "A is better"
        }
    } else {
        "no difference the problems can show"
    };
    println!(
        "B − A      {:+.1} points, 95% {} (paired): {verdict}",
        100.0 * c.difference,
        c.difference_interval
    );
    println!("gained     {} {}", c.gained.len(), c.gained.join(" "));
    println!("lost       {} {}", c.lost.len(), c.lost.join(" "));
    Ok(())
}
