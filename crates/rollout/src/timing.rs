//! Per-call tool latency: [`ToolTimings`], where [`PoolTools`](crate::scheduled::PoolTools)
//! and `rstar_train::tools::ServerTools` note how long each call took from its
//! submission to its answer and how long the sandbox ran it. The trainer takes a step's
//! timings after its rollouts and writes their percentiles ([`ToolLatency`]) to
//! `metrics.jsonl`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use rstar_episode::records::ToolLatency;

/// A shared, cheap-to-clone list of `(latency, run)` seconds, one pair a tool call, and the
/// seconds those calls waited behind calls at their time limit where the tools can tell
/// (the in-process pool, [`rstar_toolenv::Pool::run_waited`]).
#[derive(Debug, Clone, Default)]
pub struct ToolTimings(Arc<Mutex<Noted>>);

#[derive(Debug, Default)]
struct Noted {
    calls: Vec<(f64, f64)>,
    behind_limit: Option<f64>,
}

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
            .calls
            .push((latency.as_secs_f64(), run));
    }

    /// [`record`](Self::record), with the part of the call's wait spent behind calls at their
    /// time limit.
    pub fn record_waited(&self, latency: Duration, run_secs: f64, behind_limit: Duration) {
        self.record(latency, run_secs);
        let mut noted = self.0.lock().expect("tool timings lock");
        *noted.behind_limit.get_or_insert(0.0) += behind_limit.as_secs_f64();
    }

    /// Every call noted since the last take, emptying the list.
    pub fn take(&self) -> Vec<(f64, f64)> {
        std::mem::take(&mut *self.0.lock().expect("tool timings lock")).calls
    }

    /// [`take`](Self::take), summarised with the seconds waited behind calls at their time
    /// limit (`behind_limit_secs`, when the tools told); `None` when no call was noted.
    pub fn take_summary(&self, budget_secs: Option<f64>) -> Option<ToolLatency> {
        let noted = std::mem::take(&mut *self.0.lock().expect("tool timings lock"));
        ToolLatency::of(&noted.calls, budget_secs).map(|l| ToolLatency {
            behind_limit_secs: noted.behind_limit,
            ..l
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_behind_calls_at_their_limit_is_summed_when_the_tools_tell_it() {
        let t = ToolTimings::new();
        t.record(Duration::from_millis(30), 0.010);
        assert_eq!(t.take_summary(None).unwrap().behind_limit_secs, None);
        t.record_waited(
            Duration::from_millis(900),
            0.010,
            Duration::from_millis(500),
        );
        t.record_waited(
            Duration::from_millis(400),
            0.010,
            Duration::from_millis(250),
        );
        let l = t.take_summary(None).unwrap();
        assert_eq!(l.calls, 2);
        assert!((l.behind_limit_secs.unwrap() - 0.75).abs() < 1e-9);
        assert!(t.take_summary(None).is_none(), "taken: empty again");
    }

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
