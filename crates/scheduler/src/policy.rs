//! Dispatch policies: the admission decision as a pure function of engine states.
//!
//! Both the tokio [`Dispatcher`](crate::Dispatcher) and the [simulator](crate::simulate) call
//! [`choose_engine`], so what the simulator measures is the code that runs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Error;

/// How a new rollout is assigned to an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchPolicy {
    /// The baseline: rollouts are split evenly in advance, in contiguous blocks (the order of
    /// the batch, so the rollouts of one prompt share an engine), and every engine gets all
    /// of its block at once.
    Static,
    /// verl's `AsyncLLMServerManager`: each new rollout goes to the engine with the fewest
    /// rollouts in flight, later turns stick to it; admission is immediate, whatever the KV
    /// cache holds.
    LeastRequests,
    /// The paper, made exact: a rollout is admitted only where its KV reservation keeps the
    /// engine's [`KvLedger`](crate::KvLedger) safe (it goes to the engine with the most free
    /// tokens, see [`choose_ledger`](crate::choose_ledger)); it reserves `prompt + budget`
    /// while a turn generates (or its context plus one segment, with segments), only its
    /// context during a tool call, and freed capacity goes to the next waiting rollout at
    /// once. No engine is ever asked to hold more than its capacity.
    KvAware,
}

impl DispatchPolicy {
    /// All three, in the order reports print them.
    pub const ALL: [DispatchPolicy; 3] = [Self::Static, Self::LeastRequests, Self::KvAware];

    /// The kebab-case name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Static => "static",
            Self::LeastRequests => "least-requests",
            Self::KvAware => "kv-aware",
        }
    }

    /// Whether the dispatcher holds rollouts back until an engine has room for their
    /// reservation (only `kv-aware`); the other two hand everything to the engines at once
    /// and let the engines queue and preempt.
    pub fn reserves_kv(self) -> bool {
        matches!(self, Self::KvAware)
    }
}

impl fmt::Display for DispatchPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DispatchPolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "static" => Ok(Self::Static),
            "least-requests" => Ok(Self::LeastRequests),
            "kv-aware" => Ok(Self::KvAware),
            other => Err(Error::UnknownPolicy(other.to_string())),
        }
    }
}

/// What happens to a rollout's KV cache while its tool call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KvRetention {
    /// Keep the KV cache (and, under `kv-aware`, the reservation) on the engine; the next
    /// turn continues on the same engine without recomputing the context. The default.
    #[default]
    Keep,
    /// Free the KV cache (and the reservation) when the tool call starts; the next turn is
    /// dispatched again like a new request and its whole context is prefilled again.
    Release,
}

impl KvRetention {
    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Release => "release",
        }
    }
}

impl FromStr for KvRetention {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "keep" => Ok(Self::Keep),
            "release" => Ok(Self::Release),
            other => Err(Error::Config {
                field: "kv_retention",
                reason: format!("`{other}` is neither `keep` nor `release`"),
            }),
        }
    }
}

/// What a dispatcher knows about one engine when it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineView {
    /// KV-cache capacity in tokens.
    pub capacity: u64,
    /// Tokens reserved by the dispatcher for rollouts admitted to this engine (kv-aware only).
    pub reserved: u64,
    /// Rollouts in flight on this engine (generating, waiting for a tool, or queued there).
    pub in_flight: usize,
}

impl EngineView {
    /// Capacity not yet reserved.
    pub fn free(&self) -> u64 {
        self.capacity.saturating_sub(self.reserved)
    }
}

/// The engine that rollout number `index` of `total` gets under [`DispatchPolicy::Static`]:
/// contiguous blocks whose sizes differ by at most one.
pub fn static_engine(index: usize, total: usize, engines: usize) -> usize {
    assert!(engines > 0, "static_engine needs at least one engine");
    assert!(index < total, "rollout index {index} out of {total}");
    // Block b holds the indices in [floor(b*total/engines), floor((b+1)*total/engines)).
    let mut block = (index as u128 * engines as u128 / total as u128) as usize;
    while block + 1 < engines && block_start(block + 1, total, engines) <= index {
        block += 1;
    }
    block
}

fn block_start(block: usize, total: usize, engines: usize) -> usize {
    (block as u128 * total as u128 / engines as u128) as usize
}

/// The admission decision for a rollout that needs `need` KV tokens (prompt + response
/// budget), which is rollout number `index` of `total` in the batch.
///
/// Returns `None` when the rollout must wait (only `kv-aware` ever waits: no engine has
/// `need` tokens unreserved). Ties go to the lowest engine index, so the decision is
/// deterministic. For `kv-aware` this is the whole-claim rule on plain counters; the
/// [`Dispatcher`](crate::Dispatcher) and the simulator decide with
/// [`choose_ledger`](crate::choose_ledger), which also keeps the book safe when reservations
/// shrink and grow.
pub fn choose_engine(
    policy: DispatchPolicy,
    engines: &[EngineView],
    index: usize,
    total: usize,
    need: u64,
) -> Option<usize> {
    if engines.is_empty() {
        return None;
    }
    match policy {
        DispatchPolicy::Static => Some(static_engine(index, total, engines.len())),
        DispatchPolicy::LeastRequests => engines
            .iter()
            .enumerate()
            .min_by_key(|(i, e)| (e.in_flight, *i))
            .map(|(i, _)| i),
        DispatchPolicy::KvAware => engines
            .iter()
            .enumerate()
            .filter(|(_, e)| e.free() >= need)
            .max_by_key(|(i, e)| (e.free(), std::cmp::Reverse(*i)))
            .map(|(i, _)| i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(capacity: u64, reserved: u64, in_flight: usize) -> EngineView {
        EngineView {
            capacity,
            reserved,
            in_flight,
        }
    }

    #[test]
    fn static_blocks_are_contiguous_and_even() {
        for (total, engines) in [(10, 3), (16384, 64), (7, 7), (5, 8), (100, 1)] {
            let assigned: Vec<usize> = (0..total)
                .map(|i| static_engine(i, total, engines))
                .collect();
            // Non-decreasing means contiguous blocks.
            assert!(assigned.windows(2).all(|w| w[0] <= w[1]), "{assigned:?}");
            let mut counts = vec![0usize; engines];
            for &e in &assigned {
                counts[e] += 1;
            }
            let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(hi - lo <= 1, "total {total} engines {engines}: {counts:?}");
            // Block b starts at floor(b * total / engines), written out.
            for (b, &count) in counts.iter().enumerate() {
                let start = b * total / engines;
                let end = (b + 1) * total / engines;
                assert_eq!(count, end - start, "block {b}");
            }
        }
    }

    #[test]
    fn least_requests_picks_fewest_then_lowest_index() {
        let e = [view(10, 0, 3), view(10, 0, 1), view(10, 0, 1)];
        assert_eq!(
            choose_engine(DispatchPolicy::LeastRequests, &e, 0, 1, 5),
            Some(1)
        );
    }

    #[test]
    fn kv_aware_picks_most_free_and_waits_when_full() {
        let e = [view(100, 60, 1), view(100, 20, 4), view(100, 20, 0)];
        assert_eq!(
            choose_engine(DispatchPolicy::KvAware, &e, 0, 1, 50),
            Some(1)
        );
        assert_eq!(choose_engine(DispatchPolicy::KvAware, &e, 0, 1, 81), None);
        assert_eq!(choose_engine(DispatchPolicy::KvAware, &[], 0, 1, 1), None);
    }

    #[test]
    fn names_round_trip() {
        for p in DispatchPolicy::ALL {
            assert_eq!(p.name().parse::<DispatchPolicy>().unwrap(), p);
            assert_eq!(
                serde_json::to_string(&p).unwrap(),
                format!("\"{}\"", p.name())
            );
        }
        assert!("fastest".parse::<DispatchPolicy>().is_err());
        assert!("hold".parse::<KvRetention>().is_err());
    }
}
