//! A shared pool, a lock that serialises the cases using it, and checks.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rstar_toolenv::{BlockingPool, Outcome, Pool, PoolBuilder, ToolCall, ToolResult};

/// The builder every test starts from: a wall clock generous enough for a
/// loaded machine; cases that expect a timeout set a short one per call.
pub fn builder() -> PoolBuilder {
    Pool::builder()
        .python(rstar_testdata::python())
        .workers(2)
        .timeout(Duration::from_secs(10))
        .memory(768 << 20)
        .max_output(256 << 10)
        .max_processes(32)
        .scratch_size(Some(64 << 20))
        .preload(["numpy"])
}

/// The pool shared by the adversarial cases (started once).
pub fn pool() -> &'static BlockingPool {
    static POOL: OnceLock<BlockingPool> = OnceLock::new();
    POOL.get_or_init(|| BlockingPool::new(builder()).expect("the shared pool starts"))
}

/// Serialises the cases on the shared pool so "nothing left behind" is
/// checked while no other call runs.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `code` on the shared pool (exclusively), then checks that nothing is
/// left and that the pool answers `print(1)`.
pub fn run_hostile(code: &str, input: &str) -> ToolResult {
    run_hostile_call(ToolCall::python(code, input))
}

/// Runs `code` with a 1 s wall clock, for cases that must time out.
pub fn run_hostile_short(code: &str) -> ToolResult {
    run_hostile_call(ToolCall::python(code, "").with_timeout(Duration::from_secs(1)))
}

/// [`run_hostile`] for any call (e.g. one with its own timeout).
pub fn run_hostile_call(call: ToolCall) -> ToolResult {
    let _guard = exclusive();
    let pool = pool();
    let result = pool.run(call);
    assert_clean(pool);
    result
}

/// No process outlives its call, and the next ordinary call works.
pub fn assert_clean(pool: &BlockingPool) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let strays = pool.pool().stray_processes();
        if strays.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes outlived their call: {strays:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let next = pool.run(ToolCall::python("print(1)", ""));
    assert_eq!(
        (next.outcome, next.stdout.as_str()),
        (Outcome::Output, "1\n"),
        "{next:?}"
    );
}
