//! Hard-problem filtering: keep the problems the current policy does not yet
//! solve reliably, judged from per-problem pass counts over `k` samples.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, ProblemSet, Result};

/// Passes out of samples for one problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PassCount {
    /// Samples that were solved (reward > 0).
    pub passed: u32,
    /// Samples drawn.
    pub samples: u32,
}

impl PassCount {
    /// The pass rate, `passed / samples` (0 with no sample).
    pub fn rate(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            f64::from(self.passed) / f64::from(self.samples)
        }
    }
}

/// Pass counts of many problems, keyed by problem id.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PassCounts(pub BTreeMap<String, PassCount>);

impl PassCounts {
    /// No counts yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one sample of problem `id`.
    pub fn record(&mut self, id: &str, solved: bool) {
        let c = self.0.entry(id.to_string()).or_default();
        c.samples += 1;
        c.passed += u32::from(solved);
    }

    /// The count of one problem.
    pub fn get(&self, id: &str) -> Option<PassCount> {
        self.0.get(id).copied()
    }
}

/// The rule: keep problems whose pass rate over `k` samples is below `below`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HardFilter {
    /// Samples expected per problem.
    pub k: u32,
    /// Problems with a pass rate strictly below this are kept.
    pub below: f64,
}

impl HardFilter {
    /// The paper's rule: drop what is solved 8 of 8.
    pub fn rstar2_agent() -> Self {
        Self { k: 8, below: 1.0 }
    }

    /// The rule of a stage's problem set (`None` for all problems).
    pub fn of(problems: ProblemSet) -> Option<Self> {
        match problems {
            ProblemSet::All => None,
            ProblemSet::Hard { k, below } => Some(Self { k, below }),
        }
    }

    /// Decides for each problem of a dataset (by id, in dataset order) whether
    /// it is kept. A problem without counts is kept (nothing shows the policy
    /// solves it) and reported as unseen; one with a number of samples other
    /// than `k` is judged by its rate and reported.
    ///
    /// # Errors
    /// `k` of 0 or `below` outside (0, 1].
    pub fn apply<S: AsRef<str>>(
        &self,
        ids: &[S],
        counts: &PassCounts,
    ) -> Result<(Vec<bool>, FilterReport)> {
        if self.k == 0 || !(self.below > 0.0 && self.below <= 1.0) {
            return Err(Error::Config(format!(
                "hard filter needs k >= 1 and below in (0, 1], got k = {} and below = {}",
                self.k, self.below
            )));
        }
        let mut report = FilterReport {
            total: ids.len(),
            ..FilterReport::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        let keep: Vec<bool> = ids
            .iter()
            .map(|id| {
                let id = id.as_ref();
                seen.insert(id);
                let Some(c) = counts.get(id) else {
                    report.unseen += 1;
                    return true;
                };
                if c.samples != self.k {
                    report.other_than_k += 1;
                }
                if c.samples > 0 && c.passed == c.samples {
                    report.solved_every_time += 1;
                }
                c.rate() < self.below
            })
            .collect();
        report.kept = keep.iter().filter(|&&k| k).count();
        report.dropped = report.total - report.kept;
        report.unknown_ids = counts
            .0
            .keys()
            .filter(|id| !seen.contains(id.as_str()))
            .count();
        report.k = self.k;
        report.below = self.below;
        Ok((keep, report))
    }
}

/// What a hard filter did.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FilterReport {
    /// Problems in the dataset.
    pub total: usize,
    /// Problems kept.
    pub kept: usize,
    /// Problems dropped (pass rate at or above the threshold).
    pub dropped: usize,
    /// Problems with no counts (kept).
    pub unseen: usize,
    /// Problems with a number of samples other than `k`.
    pub other_than_k: usize,
    /// Problems solved in every sample.
    pub solved_every_time: usize,
    /// Counted ids that are not in the dataset.
    pub unknown_ids: usize,
    /// The rule's `k`.
    pub k: u32,
    /// The rule's threshold.
    pub below: f64,
}

impl fmt::Display for FilterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kept {} of {} problems (pass rate < {} over {} samples), dropped {}; {} solved every time, \
             {} without rollouts (kept), {} with other than {} samples, {} rollout ids not in the dataset",
            self.kept,
            self.total,
            self.below,
            self.k,
            self.dropped,
            self.solved_every_time,
            self.unseen,
            self.other_than_k,
            self.k,
            self.unknown_ids
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_rule_drops_what_is_solved_every_time() {
        let mut counts = PassCounts::new();
        for (id, passes) in [("a", 8), ("b", 7), ("c", 0), ("d", 8)] {
            for s in 0..8 {
                counts.record(id, s < passes);
            }
        }
        counts.record("e", true); // 1 of 1: solved every time, not 8 samples
        counts.record("zzz", false); // not in the dataset
        let ids = ["a", "b", "c", "d", "e", "f"];
        let (keep, report) = HardFilter::rstar2_agent().apply(&ids, &counts).unwrap();
        assert_eq!(keep, [false, true, true, false, false, true]);
        assert_eq!((report.total, report.kept, report.dropped), (6, 3, 3));
        assert_eq!(
            (
                report.unseen,
                report.other_than_k,
                report.solved_every_time,
                report.unknown_ids
            ),
            (1, 1, 3, 1)
        );
        assert!(
            report.to_string().starts_with("kept 3 of 6 problems"),
            "{report}"
        );
    }

    #[test]
    fn threshold_is_strict() {
        let mut counts = PassCounts::new();
        for s in 0..4 {
            counts.record("half", s < 2);
        }
        let rule = HardFilter { k: 4, below: 0.5 };
        assert_eq!(rule.apply(&["half"], &counts).unwrap().0, [false]);
        let rule = HardFilter { k: 4, below: 0.75 };
        assert_eq!(rule.apply(&["half"], &counts).unwrap().0, [true]);
        assert!(
            HardFilter { k: 0, below: 1.0 }
                .apply(&["x"], &counts)
                .is_err()
        );
        assert!(
            HardFilter { k: 8, below: 1.5 }
                .apply(&["x"], &counts)
                .is_err()
        );
    }
}
