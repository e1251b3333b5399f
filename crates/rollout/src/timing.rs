//! Per-call tool latency: [`ToolTimings`], where [`PoolTools`](crate::scheduled::PoolTools)
//! and [`ServerTools`](crate::scheduled::ServerTools) note how long each call took from its
//! submission to its answer and how long the sandbox ran it. The trainer takes a step's
//! timings after its rollouts and writes their percentiles ([`ToolLatency`]) to
//! `metrics.jsonl`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use rstar_analysis::records::ToolLatency;

/// A shared, cheap-to-clone list of `(latency, run)` seconds, one pair a tool call.
#[derive(Debug, Clone, Default)]
pub struct ToolTimings(Arc<Mutex<Vec<(f64, f64)>>>);

impl ToolTimings {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes one call: `latency` from submission to answer, `run_secs` as the sandbox
    /// measured it.
    pub fn record(&self, latency: Duration, run_secs: f64) {
        let run = if run_secs.is_finite() {
            run_secs.max(0.0)
        } else {
            0.0
        };
        self.0
            .lock()
            .expect("tool timings lock")
            .push((latency.as_secs_f64(), run));
    }

    /// Everything noted since the last take, emptying the list.
    pub fn take(&self) -> Vec<(f64, f64)> {
        std::mem::take(&mut *self.0.lock().expect("tool timings lock"))
    }

    /// [`take`](Self::take), summarised; `None` when no call was noted.
    pub fn take_summary(&self, budget_secs: Option<f64>) -> Option<ToolLatency> {
        ToolLatency::of(&self.take(), budget_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_list_and_take_empties_it() {
        let a = ToolTimings::new();
        let b = a.clone();
        b.record(Duration::from_millis(30), 0.010);
        a.record(Duration::from_millis(10), f64::NAN);
        let l = a.take_summary(Some(0.02)).unwrap();
        assert_eq!((l.calls, l.max_ms, l.over_budget), (2, 30.0, 1));
        assert!((l.wait_max_ms - 20.0).abs() < 1e-9, "{l:?}");
        assert!(b.take().is_empty());
    }
}
