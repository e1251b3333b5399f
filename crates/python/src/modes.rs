//! The Python-free core of the bindings: the scoring modes (with `auto`), input checks and the
//! thread pools the batch API runs on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rayon::prelude::*;
use rstar_verifier::{Error, Mode, Verdict, Verifier};

/// The largest string the bindings accept (responses, ground truths, code), in bytes: 16 MiB.
/// The verifier is linear and would take more; a larger string in a reward call is a bug upstream
/// (a whole log passed as one response), refused with a `ValueError` instead of scored.
pub const MAX_TEXT_BYTES: usize = 16 << 20;

/// How an answer is compared: one of the verifier's [`Mode`]s, or `auto` (the verifier's own
/// [`ScoreMode`], re-exported here).
pub use rstar_verifier::ScoreMode;

/// Scores one response: the verdict and the mode that produced it.
///
/// # Errors
/// The mode's ground-truth error (an integer-mode truth that is not an integer, an empty math
/// truth, a choice truth that is not one letter).
pub fn verdict(mode: ScoreMode, response: &str, truth: &str) -> Result<(Verdict, Mode), Error> {
    let mode = mode.resolve(truth);
    Verifier::new()
        .verify_mode(mode, response, truth)
        .map(|v| (v, mode))
}

/// The reward (0.0 or 1.0) of one response.
///
/// # Errors
/// As [`verdict`].
pub fn score_one(mode: ScoreMode, response: &str, truth: &str) -> Result<f64, Error> {
    verdict(mode, response, truth).map(|(v, _)| f64::from(v.reward))
}

/// Why a string is refused: a NUL byte, or more than [`MAX_TEXT_BYTES`]. `what` names it in the
/// message (`solutions[3]`).
///
/// # Errors
/// The message of the `ValueError` to raise.
pub fn check_text(what: &str, text: &str) -> Result<(), String> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "{what} is {} bytes, over the limit of {MAX_TEXT_BYTES} (16 MiB)",
            text.len()
        ));
    }
    if let Some(at) = text.find('\0') {
        return Err(format!("{what} holds a NUL byte at byte {at}"));
    }
    Ok(())
}

/// Runs `f(i)` for `i` in `0..n` on `threads` threads (`None`: one per CPU; `Some(1)`: the
/// calling thread), results in order.
///
/// The pools are this module's own, not rayon's global one, and are made again in a process
/// forked from the one that made them: a pool's threads do not survive `fork`, and trainers fork
/// (multiprocessing, Ray workers), so a pool inherited from the parent would never run a job.
pub fn parallel<T, F>(threads: Option<usize>, n: usize, f: F) -> Vec<T>
where
    T: Send,
    F: Fn(usize) -> T + Sync + Send,
{
    let threads = threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    if threads <= 1 || n < 2 {
        return (0..n).map(f).collect();
    }
    let pool = pool(threads);
    pool.install(|| (0..n).into_par_iter().with_min_len(32).map(f).collect())
}

/// The pools of one process, by thread count.
type Pools = HashMap<usize, Arc<rayon::ThreadPool>>;

/// The pools, with the id of the process they belong to.
static POOLS: Mutex<Option<(u32, Pools)>> = Mutex::new(None);

fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
    let pid = std::process::id();
    let mut guard = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if guard.as_ref().is_some_and(|(owner, _)| *owner != pid) {
        // Inherited through fork: the threads are gone. Leak the pools rather than drop them, as
        // dropping would signal threads that do not exist in this process.
        if let Some((_, old)) = guard.take() {
            std::mem::forget(old);
        }
    }
    let (_, pools) = guard.get_or_insert_with(|| (pid, HashMap::new()));
    Arc::clone(pools.entry(threads).or_insert_with(|| {
        Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("rstar-score-{i}"))
                .build()
                .expect("a rayon pool starts"),
        )
    }))
}
