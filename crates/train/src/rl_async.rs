//! Asynchronous RL with a staleness bound (`rl.max_staleness: K ≥ 1`, issue #64): a producer
//! thread rolls out the next steps' groups on the scheduled driver's engines while the trainer
//! updates, as verl's fully async trainer, AReaL and prime-rl do.
//!
//! **Versions.** The policy after `v` updates is version `v` (`step-v` on the turns it writes).
//! The batch of step `t` starts once the version [`Gate::needs`] names is published, and rolls
//! out with the newest version published then, so its staleness when step `t` trains it
//! (`t − 1 − v`) is at most `K` by construction. The engines swap weights only between
//! batches: a turn never spans two versions.
//!
//! **Drops.** A group is as stale as its oldest turn ([`group_staleness`]). One staler than
//! `K` (which a remote engine that served an older version could write) is dropped, counted
//! and never trained on ([`drop_stale`]); later steps draw their prompts from the pool as
//! always, so its prompt may come again.
//!
//! **Checkpoints and stages.** A checkpoint holds the model and optimizer after its step, not
//! the up to `K + 1` batches rolled out ahead: a run resumed from it rolls them out again, with
//! the checkpoint's weights, and says so. A stage's end is decided by the curriculum after its
//! last step: the producer is then stopped before the new version is published, and what it
//! rolled out for the next steps, the old stage's prompts, is dropped, counted and logged.
//!
//! With `K ≥ 1` which version a batch rolls out with depends on timing, so an asynchronous run
//! (and its resume) is not bit-for-bit reproducible; `K = 0` is the synchronous loop.
//!
//! ```
//! use rstar_train::rl_async::{Gate, Producer};
//!
//! // K = 1, from step 1 at version 0; the "policy" is a number and a "batch" the version that
//! // rolled it out.
//! let gate = Gate::new(1);
//! let producer = Producer::spawn(gate, 1, 0, 0u64, |_step, version, _policy: &u64| Ok(version));
//! // Steps 1 and 2 may both roll out with version 0.
//! assert_eq!(producer.next().unwrap().batch, 0);
//! assert_eq!(producer.next().unwrap().batch, 0);
//! // Step 3 waits for version 1.
//! producer.publish(1, 1);
//! let third = producer.next().unwrap();
//! assert_eq!((third.step, third.version), (3, 1));
//! // Step 4 waits for version 2, never published: nothing was rolled out in vain.
//! assert_eq!(producer.stop(), 0);
//! ```

use rstar_episode::IoError;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use rstar_episode::episode::Trajectory;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::rl::StepBatch;

/// When the batch of a step may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// `K`: the most updates a rollout's weights may lag the policy that trains on it.
    pub max_staleness: u64,
}

impl Gate {
    /// A gate for `rl.max_staleness`.
    pub fn new(max_staleness: u64) -> Self {
        Self { max_staleness }
    }

    /// The version that must be published before the batch of step `step` (1-based) starts:
    /// `step − 1 − K`, so it is at most `K` stale when trained (`K = 0` would be the
    /// synchronous loop's `step − 1`).
    pub fn needs(&self, step: u64) -> u64 {
        step.saturating_sub(1 + self.max_staleness)
    }
}

/// One batch the producer rolled out.
#[derive(Debug)]
pub struct Produced<B> {
    /// The step it is for.
    pub step: u64,
    /// The version of the weights that rolled it out.
    pub version: u64,
    /// Seconds the producer (and so the engines) waited on the gate before it started.
    pub engine_idle_secs: f64,
    /// The batch.
    pub batch: B,
}

/// The newest weights and whether the producer must stop.
struct Latest<P> {
    version: u64,
    policy: P,
    stop: bool,
}

struct Shared<P> {
    latest: Mutex<Latest<P>>,
    changed: Condvar,
}

impl<P> Shared<P> {
    fn lock(&self) -> MutexGuard<'_, Latest<P>> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The producer thread: rolls out step after step's batch, each once the gate lets it, with
/// the newest weights [`publish`](Self::publish)ed; [`next`](Self::next) hands them out in
/// step order. Stopped (and its thread joined) by [`stop`](Self::stop) or when dropped.
pub struct Producer<P, B> {
    shared: Arc<Shared<P>>,
    batches: mpsc::Receiver<Result<Produced<B>, Error>>,
    handle: Option<JoinHandle<()>>,
}

impl<P, B> std::fmt::Debug for Producer<P, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("running", &self.handle.is_some())
            .finish_non_exhaustive()
    }
}

impl<P: Clone + Send + 'static, B: Send + 'static> Producer<P, B> {
    /// Starts producing from step `first_step` with `policy`, version `version`.
    /// `produce(step, version, policy)` rolls out one step's batch; after an error the
    /// producer stops (the error is what [`next`](Self::next) returns).
    pub fn spawn<F>(gate: Gate, first_step: u64, version: u64, policy: P, mut produce: F) -> Self
    where
        F: FnMut(u64, u64, &P) -> Result<B, Error> + Send + 'static,
    {
        let shared = Arc::new(Shared {
            latest: Mutex::new(Latest {
                version,
                policy,
                stop: false,
            }),
            changed: Condvar::new(),
        });
        let (tx, batches) = mpsc::channel();
        let inner = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("rstar-rollout-producer".into())
            .spawn(move || {
                let mut step = first_step;
                loop {
                    let waited = Instant::now();
                    let (version, policy) = {
                        let mut latest = inner.lock();
                        while !latest.stop && latest.version < gate.needs(step) {
                            latest = inner
                                .changed
                                .wait(latest)
                                .unwrap_or_else(|p| p.into_inner());
                        }
                        if latest.stop {
                            return;
                        }
                        (latest.version, latest.policy.clone())
                    };
                    let engine_idle_secs = waited.elapsed().as_secs_f64();
                    let result = produce(step, version, &policy).map(|batch| Produced {
                        step,
                        version,
                        engine_idle_secs,
                        batch,
                    });
                    let failed = result.is_err();
                    if tx.send(result).is_err() || failed {
                        return;
                    }
                    step += 1;
                }
            })
            .expect("spawning the rollout producer thread");
        Self {
            shared,
            batches,
            handle: Some(handle),
        }
    }

    /// Publishes the policy after `version` updates: the next batch rolls out with it.
    pub fn publish(&self, version: u64, policy: P) {
        let mut latest = self.shared.lock();
        if version >= latest.version {
            latest.version = version;
            latest.policy = policy;
        }
        self.shared.changed.notify_all();
    }

    /// The next step's batch, waiting for it.
    ///
    /// # Errors
    /// The rollout's error, or the producer's end (a panic in its thread).
    pub fn next(&self) -> Result<Produced<B>, Error> {
        match self.batches.recv() {
            Ok(result) => result,
            Err(_) => Err(Error::Io(IoError::new(
                "<rollout producer>",
                std::io::Error::other(
                    "the rollout producer has stopped (after an error, or its thread panicked)",
                ),
            ))),
        }
    }

    /// Stops the producer: lets the batch in flight finish, joins the thread, and returns how
    /// many batches it rolled out that were never handed out (dropped).
    pub fn stop(mut self) -> usize {
        self.halt()
    }

    fn halt(&mut self) -> usize {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        let mut dropped = 0;
        if let Some(handle) = self.handle.take() {
            // Drain while the thread finishes its batch: it never blocks on a full channel.
            while let Ok(result) = self.batches.recv() {
                dropped += usize::from(result.is_ok());
            }
            let _ = handle.join();
        }
        dropped
    }
}

impl<P, B> Drop for Producer<P, B> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.shared
                .latest
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .stop = true;
            self.shared.changed.notify_all();
            while self.batches.recv().is_ok() {}
            let _ = handle.join();
        }
    }
}

/// The version a turn's `weight_version` names (`step-N`), if it names one.
pub fn version_of(weight_version: &str) -> Option<u64> {
    weight_version.strip_prefix("step-")?.parse().ok()
}

/// A group's staleness when the policy at version `current` trains on it: `current` minus its
/// oldest assistant turn's version (`fallback` for turns that name none).
pub fn group_staleness<'a>(
    group: impl IntoIterator<Item = &'a Trajectory>,
    current: u64,
    fallback: u64,
) -> u64 {
    let oldest = group
        .into_iter()
        .flat_map(|t| &t.turns)
        .filter_map(|turn| turn.weight_version.as_deref())
        .map(|v| version_of(v).unwrap_or(fallback))
        .min()
        .unwrap_or(fallback);
    current.saturating_sub(oldest)
}

/// What the staleness check found in one step's batch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AsyncRecord {
    /// `rl.max_staleness`.
    pub max_staleness: u64,
    /// The version of the weights that rolled the batch out.
    pub version: u64,
    /// Groups by staleness (`"0"`, `"1"`, …), the dropped ones included.
    pub staleness: BTreeMap<String, usize>,
    /// Groups staler than `max_staleness`, dropped: never trained on.
    pub dropped_groups: usize,
    /// Seconds the engines waited for the gate before this batch started.
    pub engine_idle_secs: f64,
    /// Seconds the trainer waited for this batch.
    pub trainer_idle_secs: f64,
}

/// Drops from `batch` every group staler than `max_staleness` when the policy at version
/// `current` trains on it (its trajectories, and them from RoC's choice), and records the
/// staleness of every group. `fallback` is the version of turns that name none.
pub fn drop_stale(
    batch: &mut StepBatch,
    current: u64,
    max_staleness: u64,
    fallback: u64,
) -> AsyncRecord {
    let mut groups: BTreeMap<&str, Vec<&Trajectory>> = BTreeMap::new();
    for t in &batch.trajectories {
        groups.entry(t.id.as_str()).or_default().push(t);
    }
    let mut record = AsyncRecord {
        max_staleness,
        version: fallback,
        ..AsyncRecord::default()
    };
    let mut stale: BTreeSet<String> = BTreeSet::new();
    for (id, group) in groups {
        let s = group_staleness(group, current, fallback);
        *record.staleness.entry(s.to_string()).or_default() += 1;
        if s > max_staleness {
            stale.insert(id.to_string());
        }
    }
    record.dropped_groups = stale.len();
    if !stale.is_empty() {
        let keep: Vec<bool> = batch
            .trajectories
            .iter()
            .map(|t| !stale.contains(&t.id))
            .collect();
        // New indices of the trajectories that stay.
        let mut new_index = vec![usize::MAX; keep.len()];
        let mut n = 0;
        for (i, &k) in keep.iter().enumerate() {
            if k {
                new_index[i] = n;
                n += 1;
            }
        }
        batch.kept = batch
            .kept
            .iter()
            .filter(|&&i| keep[i])
            .map(|&i| new_index[i])
            .collect();
        let mut i = 0;
        batch.trajectories.retain(|_| {
            i += 1;
            keep[i - 1]
        });
    }
    record
}
